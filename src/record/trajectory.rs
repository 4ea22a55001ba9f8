//! `trajectories/<id>.json`: the record of one task's run — every model call (messages,
//! rendered prompt, reply, generated token ids, token counts, time) and every
//! other step — written as one JSON file per task: enough to inspect a run,
//! and to replay it without the model (`trajectory::replay`).
//!
//! The file is the task's result (`results/<id>.json`) with `model` and
//! `steps` added (a recorder's own file has only `instance_id` and
//! `steps`); each step has `kind`
//! and `at_s` (seconds since the task began) and the fields of its kind:
//!
//! - `retrieve`: `ranked` [{path, score}], `shown`, `truncated` (paths).
//! - `model_call`: `purpose`, `messages` [{role, content}], `prompt` (the
//!   rendered text, absent when the backend renders it itself), `sampling`,
//!   `response`, `tokens` (generated ids), `prompt_tokens`,
//!   `prompt_tokens_evaluated` and `prompt_tokens_reused` (the KV cache's
//!   work: evaluated + reused = prompt), `completion_tokens`, `stop`,
//!   `prompt_s`, `decode_s`.
//! - `action` (one ReAct turn, after its `model_call`): `agent`, `step`
//!   (1-based), `thought`, `action` (the command's text), `observation`
//!   (what the agent was shown), `format_error` (why the reply was not a
//!   command, if it was not), `exec_s` (seconds running the command).
//! - `episode` (the end of a ReAct episode): `agent`, `status`
//!   (`submitted`, `exit_step_limit`, `exit_context`, `exit_time`,
//!   `exit_token_limit`, `exit_error`), `steps`, `format_errors`, `truncated`,
//!   `tokens_evaluated`, `tokens_reused`, `tokens_generated`, `wall_s`,
//!   `error`.
//! - `edit`: `blocks` and `definitions` [{path, applied_to, matched,
//!   error}], `unterminated`.
//! - `diff`: `files`, `bytes` of the final patch.
//! - `trimmed` (a prompt cut to fit the context, before its `model_call`):
//!   `purpose`, `context`, `reserved` (the reply's tokens), `full_tokens`
//!   (the prompt before any cut), `prompt_tokens` (as sent), `fits` (false
//!   when even the smallest prompt did not fit and no call was made),
//!   `cuts` [{`cut`: `issue` (`kept_chars`, `dropped_chars`,
//!   `dropped_lines`), `span` (`path`, `symbol`, `kept_lines`,
//!   `left_out` [[first, last]]), `location` (`path`, `symbol`: left out
//!   whole), or `candidate` (`distinct`: a tied candidate not shown)}].

use serde::{Deserialize, Serialize};

use super::result::TaskResult;
use patchwright_engine_types::{Candidate, Completion, Generation, Message, Sampling, Stop};

/// A trajectory file: the task's result, the model, and the steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrajectoryFile {
    /// The task's result (absent from a recorder's own file, which has
    /// only `instance_id` and `steps`).
    #[serde(flatten)]
    pub result: Option<TaskResult>,
    /// The model file or server.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    #[serde(default)]
    pub steps: Vec<TimedStep>,
}

impl TrajectoryFile {
    /// Reads a trajectory file.
    pub fn read(path: &std::path::Path) -> Result<TrajectoryFile, super::RecordError> {
        super::read_json(path)
    }

    /// The recorded model calls, in order.
    pub fn model_calls(&self) -> impl Iterator<Item = &ModelCall> {
        self.steps.iter().filter_map(|s| match &s.step {
            Step::ModelCall(c) => Some(c.as_ref()),
            _ => None,
        })
    }
}

/// A step as a reader finds it: of a kind this version knows, or of
/// another (a newer version's), kept as JSON.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ReadStep {
    Known(TimedStep),
    Other(serde_json::Value),
}

impl ReadStep {
    /// The step's `kind` (empty when an unknown step names none).
    pub fn kind(&self) -> String {
        match self {
            ReadStep::Known(t) => serde_json::to_value(&t.step)
                .ok()
                .and_then(|v| v.get("kind").and_then(|k| k.as_str().map(String::from)))
                .unwrap_or_default(),
            ReadStep::Other(v) => v
                .get("kind")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string(),
        }
    }
}

/// Reads the steps of a trajectory file, keeping steps of unknown kinds.
pub fn read_steps(path: &std::path::Path) -> Result<Vec<ReadStep>, super::RecordError> {
    /// The steps of [`TrajectoryFile`], each read on its own.
    #[derive(Deserialize)]
    struct Steps {
        #[serde(default)]
        steps: Vec<ReadStep>,
    }
    Ok(super::read_json::<Steps>(path)?.steps)
}

/// A step and when it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimedStep {
    /// Seconds since the task began.
    #[serde(default)]
    pub at_s: f64,
    #[serde(flatten)]
    pub step: Step,
}

/// One recorded step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// Files ranked against the issue, and which of them the model saw.
    Retrieve {
        #[serde(default)]
        ranked: Vec<RankedEntry>,
        #[serde(default)]
        shown: Vec<String>,
        #[serde(default)]
        truncated: Vec<String>,
    },
    /// One call of the model.
    ModelCall(Box<ModelCall>),
    /// Edit blocks parsed from a reply and what became of each; when no
    /// block applied, the whole definitions found in code fences.
    Edit {
        #[serde(default)]
        blocks: Vec<EditOutcome>,
        #[serde(default)]
        definitions: Vec<EditOutcome>,
        #[serde(default)]
        unterminated: usize,
    },
    /// The final patch.
    Diff { files: usize, bytes: usize },
    /// One turn of a ReAct episode: what the agent thought and did, and
    /// what it was shown.
    Action(Box<ActionStep>),
    /// How a ReAct episode ended.
    Episode(Box<EpisodeSummary>),
    /// A pipeline stage begins.
    Stage { name: String },
    /// A stage's output was taken from shared stages instead of run.
    Reused { stage: String, from: String },
    /// A prompt cut to fit the model's context, and what was cut.
    Trimmed(Box<Trim>),
}

/// A prompt cut to fit the context (recorded before its call, or instead
/// of it when even the smallest prompt does not fit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trim {
    /// The call the prompt is for (`fixer`, `ranker`, `localizer`, ...).
    #[serde(default)]
    pub purpose: String,
    /// The context the prompt and its reply must fit in, in tokens.
    #[serde(default)]
    pub context: usize,
    /// Tokens kept for the reply.
    #[serde(default)]
    pub reserved: usize,
    /// Tokens of the prompt before any cut.
    #[serde(default)]
    pub full_tokens: usize,
    /// Tokens of the prompt as sent (the smallest one when none fits).
    #[serde(default)]
    pub prompt_tokens: usize,
    /// False when even the smallest prompt does not fit: the model was not
    /// called.
    #[serde(default)]
    pub fits: bool,
    /// What was cut, in the order the cuts were made.
    #[serde(default)]
    pub cuts: Vec<Cut>,
}

/// One cut made to a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cut", rename_all = "snake_case")]
pub enum Cut {
    /// The issue's middle left out: its head and tail kept.
    Issue {
        #[serde(default)]
        kept_chars: usize,
        #[serde(default)]
        dropped_chars: usize,
        #[serde(default)]
        dropped_lines: usize,
    },
    /// Lines of a located span left out (the lines that matter kept).
    Span {
        #[serde(default)]
        path: String,
        #[serde(default)]
        symbol: String,
        #[serde(default)]
        kept_lines: usize,
        /// Line ranges left out, 1-based and inclusive.
        #[serde(default)]
        left_out: Vec<(usize, usize)>,
    },
    /// A location left out of the prompt whole.
    Location {
        #[serde(default)]
        path: String,
        #[serde(default)]
        symbol: String,
    },
    /// A tied candidate not shown to the ranker's comparison.
    Candidate {
        /// Its index into the distinct candidates.
        #[serde(default)]
        distinct: usize,
    },
}

impl Cut {
    /// The cut in a few words, for logs and the report.
    pub fn describe(&self) -> String {
        match self {
            Cut::Issue {
                kept_chars,
                dropped_chars,
                dropped_lines,
            } => format!(
                "issue: {dropped_chars} characters ({dropped_lines} lines) left out, {kept_chars} kept"
            ),
            Cut::Span {
                path,
                symbol,
                kept_lines,
                left_out,
            } => {
                let ranges: Vec<String> = left_out
                    .iter()
                    .map(|(a, b)| format!("{a}-{b}"))
                    .collect();
                format!(
                    "{path}::{symbol}: lines {} left out, {kept_lines} kept",
                    ranges.join(", ")
                )
            }
            Cut::Location { path, symbol } => format!("{path}::{symbol}: left out whole"),
            Cut::Candidate { distinct } => format!("candidate {distinct}: not shown"),
        }
    }
}

/// One ReAct turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionStep {
    pub agent: String,
    pub step: usize,
    pub thought: String,
    pub action: String,
    pub observation: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format_error: Option<String>,
    pub exec_s: f64,
}

/// A file and its retrieval score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankedEntry {
    pub path: String,
    pub score: f64,
}

/// One call of the model: what it was asked, what it answered, and what
/// that cost. Fields older or hand-written files lack read as defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    /// What the call was for (`fix`, `localizer`, ...).
    #[serde(default)]
    pub purpose: String,
    pub messages: Vec<Message>,
    /// The messages rendered with the model's chat template: the text the
    /// model actually read (absent when a server renders it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Missing settings (older or hand-written files) read as defaults.
    #[serde(default, deserialize_with = "partial_sampling")]
    pub sampling: Sampling,
    #[serde(default)]
    pub response: String,
    /// Generated token ids, so a replay can check it matches exactly.
    #[serde(default)]
    pub tokens: Vec<i32>,
    #[serde(default)]
    pub prompt_tokens: usize,
    /// Prompt tokens the model evaluated for this call.
    #[serde(default)]
    pub prompt_tokens_evaluated: usize,
    /// Prompt tokens whose KV entries were reused from the previous call.
    #[serde(default)]
    pub prompt_tokens_reused: usize,
    #[serde(default)]
    pub completion_tokens: usize,
    /// Draft tokens evaluated beside the sampled ones, over all
    /// candidates (prompt lookup, jump-forward), and how many were kept.
    #[serde(default)]
    pub draft_tokens: usize,
    #[serde(default)]
    pub draft_accepted: usize,
    pub stop: Stop,
    #[serde(default)]
    pub prompt_s: f64,
    #[serde(default)]
    pub decode_s: f64,
    /// With N > 1 candidates from one evaluated prompt: every candidate
    /// (the first is `response`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Candidate>,
}

impl ModelCall {
    /// The record of a plain one-reply call.
    pub fn new(
        purpose: &str,
        messages: Vec<Message>,
        prompt: String,
        sampling: Sampling,
        c: Completion,
    ) -> Self {
        ModelCall {
            purpose: purpose.into(),
            messages,
            prompt: Some(prompt),
            sampling,
            response: c.text,
            tokens: c.tokens,
            prompt_tokens: c.prompt_tokens,
            prompt_tokens_evaluated: c.prompt_tokens,
            prompt_tokens_reused: 0,
            completion_tokens: c.completion_tokens,
            draft_tokens: 0,
            draft_accepted: 0,
            stop: c.stop,
            prompt_s: c.prompt_s,
            decode_s: c.decode_s,
            candidates: Vec::new(),
        }
    }

    /// Tokens generated over every candidate of the call.
    pub fn generated_tokens(&self) -> usize {
        if self.candidates.is_empty() {
            self.completion_tokens
        } else {
            self.candidates.iter().map(|c| c.tokens.len()).sum()
        }
    }

    /// Seconds the model spent on the call: its prompt, then decoding.
    pub fn model_s(&self) -> f64 {
        self.prompt_s + self.decode_s
    }

    /// The record of a call that returned `generation` (its first
    /// candidate is the reply).
    pub fn from_generation(
        purpose: &str,
        messages: Vec<Message>,
        prompt: Option<String>,
        sampling: Sampling,
        generation: &Generation,
    ) -> Self {
        let first = generation.candidates.first();
        let s = &generation.stats;
        ModelCall {
            purpose: purpose.into(),
            messages,
            prompt,
            sampling,
            response: first.map(|c| c.text.clone()).unwrap_or_default(),
            tokens: first.map(|c| c.tokens.clone()).unwrap_or_default(),
            prompt_tokens: s.prompt_tokens,
            prompt_tokens_evaluated: s.prompt_tokens_evaluated,
            prompt_tokens_reused: s.prompt_tokens_reused,
            completion_tokens: s.generated_tokens.first().copied().unwrap_or(0),
            draft_tokens: s.draft_tokens,
            draft_accepted: s.draft_accepted,
            stop: first.map_or(Stop::MaxTokens, |c| c.stop),
            prompt_s: s.prompt_s,
            decode_s: s.decode_s,
            candidates: if generation.candidates.len() > 1 {
                generation.candidates.clone()
            } else {
                Vec::new()
            },
        }
    }
}

/// What became of one edit block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditOutcome {
    /// The path the block named.
    pub path: String,
    /// The file it was applied to (another shown file when the named one
    /// does not exist but SEARCH matches there).
    pub applied_to: Option<String>,
    /// How the SEARCH text was found, when the block applied.
    pub matched: Option<crate::edit::Matched>,
    /// Why the block did not apply, when it did not.
    pub error: Option<String>,
}

/// How an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    Submitted,
    ExitStepLimit,
    ExitContext,
    ExitTime,
    ExitTokenLimit,
    ExitError,
}

impl ExitStatus {
    /// The status as stored (`exit_step_limit`).
    pub fn as_str(&self) -> &'static str {
        match self {
            ExitStatus::Submitted => "submitted",
            ExitStatus::ExitStepLimit => "exit_step_limit",
            ExitStatus::ExitContext => "exit_context",
            ExitStatus::ExitTime => "exit_time",
            ExitStatus::ExitTokenLimit => "exit_token_limit",
            ExitStatus::ExitError => "exit_error",
        }
    }
}

/// The end of an episode, as recorded in the trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeSummary {
    pub agent: String,
    pub status: ExitStatus,
    pub steps: usize,
    /// Replies that were not a command of the agent's set (impossible
    /// under the grammar; possible with a backend that ignores it).
    pub format_errors: usize,
    /// Replies cut off by the token cap before their command ended.
    pub truncated: usize,
    pub tokens_evaluated: u64,
    pub tokens_reused: u64,
    pub tokens_generated: u64,
    pub wall_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl EpisodeSummary {
    /// Reused prompt tokens over all prompt tokens.
    pub fn kv_reuse(&self) -> f64 {
        let all = self.tokens_evaluated + self.tokens_reused;
        if all == 0 {
            0.0
        } else {
            self.tokens_reused as f64 / all as f64
        }
    }
}

/// Sampling settings of which some may be missing: the defaults fill in.
fn partial_sampling<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Sampling, D::Error> {
    use serde::de::Error;
    let given = serde_json::Value::deserialize(d)?;
    let mut full = serde_json::to_value(Sampling::default()).map_err(D::Error::custom)?;
    if let (Some(full), serde_json::Value::Object(given)) = (full.as_object_mut(), given) {
        full.extend(given);
    }
    serde_json::from_value(full).map_err(D::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_step_reads_back_and_an_older_one_reads_with_defaults(
    ) -> Result<(), serde_json::Error> {
        let step = Step::Trimmed(Box::new(Trim {
            purpose: "fixer".into(),
            context: 4096,
            reserved: 512,
            full_tokens: 10_997,
            prompt_tokens: 3577,
            fits: true,
            cuts: vec![
                Cut::Span {
                    path: "a.py".into(),
                    symbol: "Big".into(),
                    kept_lines: 26,
                    left_out: vec![(12, 294)],
                },
                Cut::Issue {
                    kept_chars: 1200,
                    dropped_chars: 28_800,
                    dropped_lines: 700,
                },
                Cut::Location {
                    path: "b.py".into(),
                    symbol: "f".into(),
                },
                Cut::Candidate { distinct: 3 },
            ],
        }));
        let text = serde_json::to_string(&step)?;
        assert_eq!(
            text,
            r#"{"kind":"trimmed","purpose":"fixer","context":4096,"reserved":512,"full_tokens":10997,"prompt_tokens":3577,"fits":true,"cuts":[{"cut":"span","path":"a.py","symbol":"Big","kept_lines":26,"left_out":[[12,294]]},{"cut":"issue","kept_chars":1200,"dropped_chars":28800,"dropped_lines":700},{"cut":"location","path":"b.py","symbol":"f"},{"cut":"candidate","distinct":3}]}"#
        );
        assert_eq!(serde_json::from_str::<Step>(&text)?, step);
        let bare: Step = serde_json::from_str(r#"{"kind":"trimmed","cuts":[{"cut":"issue"}]}"#)?;
        assert_eq!(
            bare,
            Step::Trimmed(Box::new(Trim {
                purpose: String::new(),
                context: 0,
                reserved: 0,
                full_tokens: 0,
                prompt_tokens: 0,
                fits: false,
                cuts: vec![Cut::Issue {
                    kept_chars: 0,
                    dropped_chars: 0,
                    dropped_lines: 0
                }],
            }))
        );
        Ok(())
    }

    #[test]
    fn cuts_are_described_in_a_few_words() {
        let cases = [
            (
                Cut::Issue {
                    kept_chars: 1200,
                    dropped_chars: 28_800,
                    dropped_lines: 700,
                },
                "issue: 28800 characters (700 lines) left out, 1200 kept",
            ),
            (
                Cut::Span {
                    path: "a.py".into(),
                    symbol: "Big".into(),
                    kept_lines: 26,
                    left_out: vec![(12, 294), (306, 596)],
                },
                "a.py::Big: lines 12-294, 306-596 left out, 26 kept",
            ),
            (
                Cut::Location {
                    path: "b.py".into(),
                    symbol: "f".into(),
                },
                "b.py::f: left out whole",
            ),
            (Cut::Candidate { distinct: 3 }, "candidate 3: not shown"),
        ];
        for (cut, want) in cases {
            assert_eq!(cut.describe(), want);
        }
    }
}
