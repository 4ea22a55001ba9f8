//! Trajectories: the record of one task's run — every model call (messages,
//! rendered prompt, reply, generated token ids, token counts, time) and every
//! other step — written as one JSON file per task: enough to inspect a run,
//! and to replay it without the model (`engine::replay`).

use std::time::Instant;

use serde::Serialize;

use crate::engine::{Completion, Message, Sampling};

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
    /// model actually read.
    pub prompt: String,
    pub sampling: Sampling,
    pub response: String,
    /// Generated token ids, so a replay can check it matches exactly.
    pub tokens: Vec<i32>,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub stop: crate::engine::Stop,
    pub prompt_s: f64,
    pub decode_s: f64,
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
            prompt,
            sampling,
            response: c.text,
            tokens: c.tokens,
            prompt_tokens: c.prompt_tokens,
            completion_tokens: c.completion_tokens,
            stop: c.stop,
            prompt_s: c.prompt_s,
            decode_s: c.decode_s,
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
        }
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
