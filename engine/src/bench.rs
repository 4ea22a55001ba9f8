//! The engine's speed on one model, measured in one process with one load:
//! prompt evaluation at given lengths, and generation of N candidates from
//! one prompt (the Fixer's shape), with a grammar and without.
//!
//! `patchwright models bench` prints it; `scripts/gpu-bench` runs it on
//! synthetic models of real shapes on a GPU host. One process matters on a
//! GPU: a load copies the weights to the card and compiles the kernels
//! (Vulkan's pipelines are compiled on first use), which a benchmark of one
//! process per figure would pay for every figure.
//!
//! What is measured is the engine itself: drafts are the caller's to turn
//! off (their gain depends on what the model writes, and a synthetic
//! model's text is noise). The generation figures share one conversation of
//! the largest N, whose prompt is evaluated once, by the warm-up; each
//! prompt figure runs in a fresh conversation, so nothing of it comes from
//! the KV cache.

use std::path::PathBuf;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::{Backend, Engine, EngineError, Message, Placement, Request, Sampling};

/// A grammar of the Fixer's shape: free text, then SEARCH/REPLACE blocks.
pub const FIXER_SHAPE_GRAMMAR: &str = r#"root   ::= prose block+
prose  ::= [^<]{0,200} "\n"
block  ::= "<<<<<<< SEARCH\n" line+ "=======\n" line+ ">>>>>>> REPLACE\n"
line   ::= [^\n<=>]{0,80} "\n"
"#;

/// Python source the prompts are made of, line after line: it tokenizes
/// like the code a task shows.
const CODE: &str = r#"def merge_intervals(intervals):
    """Merge overlapping intervals, returned sorted by start."""
    ordered = sorted(intervals, key=lambda pair: pair[0])
    merged = []
    for start, end in ordered:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged

"#;

/// Temperature of the candidates when N > 1 (the Fixer samples them);
/// one candidate is decoded greedily.
pub const SAMPLED_TEMPERATURE: f32 = 0.8;
/// Tokens per candidate of the warm-up calls, which pay for first-use
/// costs (kernel compilation, buffer allocation) outside the figures: two,
/// so that each runs one decoding step.
const WARMUP_TOKENS: u32 = 2;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Prompt lengths, in tokens, whose evaluation speed is measured.
    pub prompts: Vec<usize>,
    /// Tokens of the prompt the generation figures share.
    pub generation_prompt: usize,
    /// Candidate counts N, each measured without and with the grammar.
    pub candidates: Vec<usize>,
    /// Tokens per candidate (a candidate that ends earlier counts what it
    /// generated).
    pub max_tokens: u32,
    /// The grammar of the "grammar on" figures (GBNF, rule `root`).
    pub grammar: String,
    pub seed: u32,
}

/// Every figure of one model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub model: PathBuf,
    /// Size of the model file, the bytes a decoding step reads at most.
    pub file_bytes: u64,
    pub placement: Placement,
    /// Seconds of the warm-up calls, the generation prompt's evaluation
    /// included.
    pub warmup_s: f64,
    pub prompt: Vec<PromptFigure>,
    pub generation: Vec<GenerationFigure>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PromptFigure {
    /// The length asked for.
    pub target_tokens: usize,
    /// Tokens evaluated (the prompt as the chat template renders it).
    pub tokens: usize,
    pub seconds: f64,
    pub tokens_per_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenerationFigure {
    pub candidates: usize,
    pub grammar: bool,
    /// Tokens generated, all candidates together.
    pub tokens: usize,
    /// Decoding steps: the longest candidate's tokens.
    pub steps: usize,
    pub seconds: f64,
    pub tokens_per_s: f64,
    pub steps_per_s: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("a benchmark needs at least one prompt length and one candidate count")]
    Empty,
    #[error("{what}: {source}")]
    Figure {
        what: String,
        #[source]
        source: EngineError,
    },
}

fn figure(what: impl Into<String>) -> impl FnOnce(EngineError) -> BenchError {
    let what = what.into();
    move |source| BenchError::Figure { what, source }
}

/// Measures every figure of `plan` on `engine`, telling `shown` each one as
/// it is done.
pub fn run(
    engine: &Engine,
    plan: &Plan,
    mut shown: impl FnMut(&str),
) -> Result<Report, BenchError> {
    let most = plan
        .candidates
        .iter()
        .copied()
        .max()
        .ok_or(BenchError::Empty)?;
    if plan.prompts.is_empty() || most == 0 {
        return Err(BenchError::Empty);
    }
    let file_bytes = std::fs::metadata(engine.path()).map_or(0, |m| m.len());

    // The generation figures share one conversation, whose first calls
    // (the warm-up) evaluate their prompt and run one decoding step of
    // every N: a GPU compiles its kernels for each batch shape on first
    // use.
    let started = Instant::now();
    let base = prompt_of(engine, "Generation", plan.generation_prompt)
        .map_err(figure("the generation prompt"))?;
    let mut conversation = engine
        .conversation(most, plan.max_tokens.max(WARMUP_TOKENS) as usize)
        .map_err(figure("the generation conversation"))?;
    let mut shapes = plan.candidates.clone();
    shapes.sort_unstable_by(|a, b| b.cmp(a));
    shapes.dedup();
    for n in shapes {
        let sampling = sampling(n, plan.seed, WARMUP_TOKENS);
        conversation
            .generate(&request(&base, sampling, n, Some(&plan.grammar)))
            .map_err(figure("the warm-up"))?;
    }
    let warmup_s = started.elapsed().as_secs_f64();
    shown(&format!("warm-up: {warmup_s:.1} s"));

    let mut generation = Vec::new();
    for grammar in [false, true] {
        for &n in &plan.candidates {
            let what = format!("N = {n}, grammar {}", if grammar { "on" } else { "off" });
            let g = conversation
                .generate(&request(
                    &base,
                    sampling(n, plan.seed, plan.max_tokens),
                    n,
                    grammar.then_some(plan.grammar.as_str()),
                ))
                .map_err(figure(what.clone()))?;
            let s = &g.stats;
            let tokens: usize = s.generated_tokens.iter().sum();
            let steps = s.generated_tokens.iter().copied().max().unwrap_or(0);
            let f = GenerationFigure {
                candidates: n,
                grammar,
                tokens,
                steps,
                seconds: s.decode_s,
                tokens_per_s: per_second(tokens, s.decode_s),
                steps_per_s: per_second(steps, s.decode_s),
            };
            shown(&format!("{what}: {:.1} tokens/s", f.tokens_per_s));
            generation.push(f);
        }
    }
    drop(conversation);

    // Each prompt in a conversation of its own: nothing from the cache.
    let mut prompt = Vec::new();
    for (i, &target) in plan.prompts.iter().enumerate() {
        let what = format!("prompt of {target} tokens");
        let text = prompt_of(engine, &format!("Prompt {}", i + 1), target)
            .map_err(figure(what.clone()))?;
        let mut conversation = engine.conversation(1, 1).map_err(figure(what.clone()))?;
        let g = conversation
            .generate(&request(&text, sampling(1, plan.seed, 1), 1, None))
            .map_err(figure(what))?;
        let s = &g.stats;
        let f = PromptFigure {
            target_tokens: target,
            tokens: s.prompt_tokens_evaluated,
            seconds: s.prompt_s,
            tokens_per_s: per_second(s.prompt_tokens_evaluated, s.prompt_s),
        };
        shown(&format!(
            "prompt {} tokens: {:.1} tokens/s",
            f.tokens, f.tokens_per_s
        ));
        prompt.push(f);
    }
    Ok(Report {
        model: engine.path().to_path_buf(),
        file_bytes,
        placement: engine.placement().clone(),
        warmup_s,
        prompt,
        generation,
    })
}

fn per_second(count: usize, seconds: f64) -> f64 {
    count as f64 / seconds.max(1e-9)
}

/// Greedy for one candidate, else sampled as the Fixer samples (the
/// whole distribution: a nucleus would cost a synthetic model's flat
/// distribution more than a trained model's peaked one).
fn sampling(n: usize, seed: u32, max_tokens: u32) -> Sampling {
    Sampling {
        temperature: if n > 1 { SAMPLED_TEMPERATURE } else { 0.0 },
        seed,
        max_tokens,
        ..Sampling::default()
    }
}

/// `n` candidates of `messages`, under `grammar` if any.
fn request<'a>(
    messages: &'a [Message],
    sampling: Sampling,
    n: usize,
    grammar: Option<&'a str>,
) -> Request<'a> {
    Request {
        n,
        grammar,
        ..Request::new(messages, sampling)
    }
}

/// A user message that the chat template renders to `target` tokens, or
/// the longest below it (at the least the label alone): `label`, then
/// lines of [`CODE`] over and over.
/// The label starts the message, so prompts of different labels share no
/// more than the template's opening tokens.
fn prompt_of(engine: &Engine, label: &str, target: usize) -> Result<Vec<Message>, EngineError> {
    let lines: Vec<&str> = CODE.lines().collect();
    let text = |k: usize| {
        let mut t = format!("{label}: explain what this Python code does.\n\n");
        for line in lines.iter().cycle().take(k) {
            t.push_str(line);
            t.push('\n');
        }
        vec![Message::user(t)]
    };
    let count = |k: usize| engine.count_tokens(&text(k));
    // Every line is at least one token: `target` lines are enough.
    let (mut lo, mut hi) = (0usize, target);
    if count(hi)? <= target {
        lo = hi;
    }
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if count(mid)? <= target {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(text(lo))
}
