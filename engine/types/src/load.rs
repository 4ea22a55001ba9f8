//! What the scheduler's model did over a run.

use serde::{Deserialize, Serialize};

/// What the model did over the scheduler's life, read while it runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// Seconds since the scheduler started.
    pub wall_s: f64,
    /// Seconds the model spent evaluating batches and sampling.
    pub busy_s: f64,
    /// `busy_s / wall_s`.
    pub busy_fraction: f64,
    pub prompt_tokens_evaluated: u64,
    pub generated_tokens: u64,
    pub requests: u64,
    /// Batches evaluated.
    pub steps: u64,
    /// Most sequences decoded together in one step.
    pub max_decoding: u64,
    /// Of `busy_s`, the seconds spent sampling the candidates' tokens (the
    /// rest is evaluating batches). Absent from older records.
    #[serde(default)]
    pub sampling_s: f64,
    /// Forward passes (llama.cpp's micro-batches) the steps took: one per
    /// step when every batch is evaluated whole.
    #[serde(default)]
    pub micro_batches: u64,
    /// Steps that only decoded (no prompt tokens), and their forward
    /// passes.
    #[serde(default)]
    pub decode_steps: u64,
    #[serde(default)]
    pub decode_micro_batches: u64,
}

impl Load {
    /// What was done since `earlier` (a reading of the same scheduler).
    pub fn since(&self, earlier: &Load) -> Load {
        let wall_s = self.wall_s - earlier.wall_s;
        let busy_s = self.busy_s - earlier.busy_s;
        Load {
            wall_s,
            busy_s,
            busy_fraction: if wall_s > 0.0 { busy_s / wall_s } else { 0.0 },
            prompt_tokens_evaluated: self.prompt_tokens_evaluated - earlier.prompt_tokens_evaluated,
            generated_tokens: self.generated_tokens - earlier.generated_tokens,
            requests: self.requests - earlier.requests,
            steps: self.steps - earlier.steps,
            max_decoding: self.max_decoding,
            sampling_s: self.sampling_s - earlier.sampling_s,
            micro_batches: self.micro_batches - earlier.micro_batches,
            decode_steps: self.decode_steps - earlier.decode_steps,
            decode_micro_batches: self.decode_micro_batches - earlier.decode_micro_batches,
        }
    }
}
