//! One call to a model: the messages, how to sample, and what came back.

use serde::{Deserialize, Serialize};

/// How one reply is sampled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    /// 0 is greedy decoding (deterministic).
    pub temperature: f32,
    /// Nucleus: the likeliest tokens holding this share of the mass (1:
    /// every token).
    pub top_p: f32,
    /// Tokens less likely than this fraction of the likeliest token's
    /// probability are never drawn (0: off; absent in records written
    /// before it existed). It keeps a sampled reply on the tokens the model
    /// is sure of where one continuation dominates (code's syntax) and
    /// leaves the choice open where several are close (names, values).
    #[serde(default)]
    pub min_p: f32,
    pub seed: u32,
    /// Most tokens generated for one reply.
    pub max_tokens: u32,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
            max_tokens: 1024,
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Message {
            role: "system".into(),
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Message {
            role: "user".into(),
            content: content.into(),
        }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Message {
            role: "assistant".into(),
            content: content.into(),
        }
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The model produced an end-of-generation token.
    EndOfText,
    /// `max_tokens` was reached.
    MaxTokens,
}

/// A finished reply and what it cost.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    /// Generated token ids, for exact comparisons.
    pub tokens: Vec<i32>,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub stop: Stop,
    pub prompt_s: f64,
    pub decode_s: f64,
}

/// One generated candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub text: String,
    pub tokens: Vec<i32>,
    pub stop: Stop,
}

/// What a call cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    pub prompt_tokens: usize,
    /// Prompt tokens decoded by this call.
    pub prompt_tokens_evaluated: usize,
    /// Prompt tokens found in the KV cache from earlier calls.
    pub prompt_tokens_reused: usize,
    /// Tokens generated, per candidate.
    pub generated_tokens: Vec<usize>,
    /// Draft tokens evaluated beside the sampled ones, over all candidates
    /// (prompt lookup and jump-forward, the engine's `speculate`).
    pub draft_tokens: usize,
    /// Draft tokens the samplers kept.
    pub draft_accepted: usize,
    /// How the candidates' grammar was consulted (zero without one).
    pub grammar: GrammarChecks,
    pub prompt_s: f64,
    pub decode_s: f64,
    pub total_s: f64,
}

/// How often a grammar was consulted while sampling (the engine's
/// grammar-first sampler): tokens picked under it, first picks it refused,
/// and picks that masked the whole vocabulary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GrammarChecks {
    pub checked: usize,
    pub refused: usize,
    pub masked: usize,
}

impl GrammarChecks {
    pub fn add(&mut self, other: GrammarChecks) {
        self.checked += other.checked;
        self.refused += other.refused;
        self.masked += other.masked;
    }
}

/// The candidates of one call and what they cost.
#[derive(Debug, Clone, Serialize)]
pub struct Generation {
    pub candidates: Vec<Candidate>,
    pub stats: Stats,
}

/// One call: the conversation so far, how many candidates, how to sample.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub messages: &'a [Message],
    pub sampling: Sampling,
    /// Number of candidates (at least 1).
    pub n: usize,
    /// Candidate i's temperature, overriding `sampling.temperature`; its
    /// seed is always `sampling.seed + i`.
    pub temperatures: Option<Vec<f32>>,
    /// A GBNF grammar (root rule `root`) every candidate must follow.
    pub grammar: Option<&'a str>,
}

impl<'a> Request<'a> {
    pub fn new(messages: &'a [Message], sampling: Sampling) -> Self {
        Request {
            messages,
            sampling,
            n: 1,
            temperatures: None,
            grammar: None,
        }
    }
}
