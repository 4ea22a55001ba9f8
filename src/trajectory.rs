//! Trajectories: the record of one task's run — every model call (messages,
//! rendered prompt, reply, generated token ids, token counts, time) and every
//! other step — written as one JSON file per task: enough to inspect a run,
//! and to replay it without the model (`engine::replay`).
//!
//! The file is `{"instance_id": ..., "steps": [...]}`; each step has `kind`
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

use std::time::Instant;

use serde::Serialize;

use crate::engine::{Completion, Generation, Message, Sampling};

/// One recorded step.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// Files ranked against the issue, and which of them the model saw.
    Retrieve {
        ranked: Vec<RankedEntry>,
        shown: Vec<String>,
        truncated: Vec<String>,
    },
    /// One call of the model.
    ModelCall(Box<ModelCall>),
    /// Edit blocks parsed from a reply and what became of each; when no
    /// block applied, the whole definitions found in code fences.
    Edit {
        blocks: Vec<EditOutcome>,
        definitions: Vec<EditOutcome>,
        unterminated: usize,
    },
    /// The final patch.
    Diff { files: usize, bytes: usize },
    /// One turn of a ReAct episode: what the agent thought and did, and
    /// what it was shown.
    Action(Box<ActionStep>),
    /// How a ReAct episode ended.
    Episode(Box<crate::agents::react::EpisodeSummary>),
    /// A pipeline stage begins.
    Stage { name: String },
    /// A stage's output was taken from shared stages instead of run.
    Reused { stage: String, from: String },
}

#[derive(Debug, Clone, Serialize)]
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

#[derive(Debug, Clone, Serialize)]
pub struct RankedEntry {
    pub path: String,
    pub score: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelCall {
    pub purpose: String,
    pub messages: Vec<Message>,
    /// The messages rendered with the model's chat template: the text the
    /// model actually read (absent when a server renders it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    pub sampling: Sampling,
    pub response: String,
    /// Generated token ids, so a replay can check it matches exactly.
    pub tokens: Vec<i32>,
    pub prompt_tokens: usize,
    /// Prompt tokens the model evaluated for this call.
    pub prompt_tokens_evaluated: usize,
    /// Prompt tokens whose KV entries were reused from the previous call.
    pub prompt_tokens_reused: usize,
    pub completion_tokens: usize,
    pub stop: crate::engine::Stop,
    pub prompt_s: f64,
    pub decode_s: f64,
    /// With N > 1 candidates from one evaluated prompt: every candidate
    /// (the first is `response`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<crate::engine::Candidate>,
}

impl ModelCall {
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
            stop: c.stop,
            prompt_s: c.prompt_s,
            decode_s: c.decode_s,
            candidates: Vec::new(),
        }
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
            stop: first.map_or(crate::engine::Stop::MaxTokens, |c| c.stop),
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

#[derive(Debug, Clone, Serialize)]
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

/// A trajectory being recorded: steps with the seconds since the task began.
#[derive(Debug, Serialize)]
pub struct Trajectory {
    pub instance_id: String,
    pub steps: Vec<TimedStep>,
    #[serde(skip)]
    started: Option<Instant>,
    #[serde(skip)]
    on_stage: Option<StageObserver>,
}

/// Told the name of each stage as it begins (a progress display).
pub struct StageObserver(pub Box<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for StageObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StageObserver")
    }
}

#[derive(Debug, Serialize)]
pub struct TimedStep {
    pub at_s: f64,
    #[serde(flatten)]
    pub step: Step,
}

impl Trajectory {
    pub fn new(instance_id: &str) -> Self {
        Trajectory {
            instance_id: instance_id.into(),
            steps: Vec::new(),
            started: Some(Instant::now()),
            on_stage: None,
        }
    }

    /// Calls `observer` with each stage's name as it begins.
    pub fn observe_stages(&mut self, observer: StageObserver) {
        self.on_stage = Some(observer);
    }

    /// Records that stage `name` begins, and tells the observer.
    pub fn stage(&mut self, name: &str) {
        if let Some(o) = &self.on_stage {
            (o.0)(name);
        }
        self.record(Step::Stage { name: name.into() });
    }

    pub fn record(&mut self, step: Step) {
        let at_s = self.started.map_or(0.0, |s| s.elapsed().as_secs_f64());
        self.steps.push(TimedStep { at_s, step });
    }

    pub fn model_calls(&self) -> impl Iterator<Item = &ModelCall> {
        self.steps.iter().filter_map(|s| match &s.step {
            Step::ModelCall(c) => Some(c.as_ref()),
            _ => None,
        })
    }
}
