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
//! The scheduler figures measure what a batch gets: K conversations at
//! once through the scheduler (`batch --jobs K`), each a prompt of the
//! generation prompt's length (a shared half, as the stages of a task share
//! the issue and the code, then a half of its own), N candidates under the
//! Fixer-shaped grammar, all decoded in the same steps.
//!
//! What is measured is the engine itself: drafts are the caller's to turn
//! off (their gain depends on what the model writes, and a synthetic
//! model's text is noise). The generation figures share one conversation of
//! the largest N, whose prompt is evaluated once, by the warm-up; each
//! prompt figure runs in a fresh conversation, so nothing of it comes from
//! the KV cache.

use std::path::PathBuf;
use std::sync::Barrier;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::scheduler::{serve, Slots};
use crate::{Backend, Engine, EngineError, Load, Message, Placement, Request, Sampling};

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
    /// Conversations K of the scheduler figures (none: no scheduler
    /// figure), each with `scheduler_candidates` candidates.
    pub conversations: Vec<usize>,
    pub scheduler_candidates: usize,
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
    #[serde(default)]
    pub scheduler: Vec<SchedulerFigure>,
    /// Scheduler figures left out, and why (a KV cache over the budget).
    #[serde(default)]
    pub scheduler_skipped: Vec<String>,
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
    /// Tokens picked under the grammar, first picks it refused, and picks
    /// that masked the whole vocabulary (zero with the grammar off).
    #[serde(default)]
    pub grammar_checked: usize,
    #[serde(default)]
    pub grammar_refused: usize,
    #[serde(default)]
    pub grammar_masked: usize,
}

/// K conversations of N candidates each through the scheduler, as a batch
/// of K tasks in flight sends them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SchedulerFigure {
    pub conversations: usize,
    pub candidates: usize,
    /// Each conversation's prompt, and the part all of them share.
    pub prompt_tokens: usize,
    pub shared_tokens: usize,
    /// Tokens generated, every candidate of every conversation.
    pub tokens: u64,
    /// From the calls' start to the last one's end (the prompts were
    /// evaluated before, by the warm-up).
    pub seconds: f64,
    pub tokens_per_s: f64,
    /// Batches the model thread evaluated, and the forward passes they
    /// took; of those, the steps that only decoded.
    pub steps: u64,
    pub micro_batches: u64,
    pub decode_steps: u64,
    pub decode_micro_batches: u64,
    /// Share of `seconds` the model thread was busy, and its busy seconds
    /// split into evaluating batches and sampling.
    pub busy_fraction: f64,
    pub decoding_s: f64,
    pub sampling_s: f64,
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
                grammar_checked: s.grammar.checked,
                grammar_refused: s.grammar.refused,
                grammar_masked: s.grammar.masked,
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

    let mut scheduler = Vec::new();
    let mut scheduler_skipped = Vec::new();
    let n = plan.scheduler_candidates.max(1);
    for &k in &plan.conversations {
        let f = match scheduler_figure(engine, plan, k, n) {
            Ok(f) => f,
            Err(BenchError::Figure {
                what,
                source: source @ EngineError::KvBudget { .. },
            }) => {
                shown(&format!("{what}: left out: {source}"));
                scheduler_skipped.push(format!("{what}: {source}"));
                continue;
            }
            Err(e) => return Err(e),
        };
        shown(&format!(
            "K = {k} x N = {n}: {:.1} tokens/s, {:.2} forward passes per decoding step",
            f.tokens_per_s,
            f.decode_micro_batches as f64 / (f.decode_steps.max(1)) as f64
        ));
        scheduler.push(f);
    }
    Ok(Report {
        model: engine.path().to_path_buf(),
        file_bytes,
        placement: engine.placement().clone(),
        warmup_s,
        prompt,
        generation,
        scheduler,
        scheduler_skipped,
    })
}

/// `k` conversations of `n` candidates through a scheduler of their own:
/// each evaluates its prompt in a warm-up call (two tokens), then all send
/// the measured call at once.
fn scheduler_figure(
    engine: &Engine,
    plan: &Plan,
    k: usize,
    n: usize,
) -> Result<SchedulerFigure, BenchError> {
    let what = format!("K = {k} conversations x N = {n}");
    let target = plan.generation_prompt;
    let shared = shared_prompt(engine, target / 2).map_err(figure(what.clone()))?;
    let prompts = (0..k)
        .map(|i| task_prompt(engine, &shared, i, target))
        .collect::<Result<Vec<_>, _>>()
        .map_err(figure(what.clone()))?;
    let prompt_tokens = engine
        .count_tokens(&prompts[0])
        .map_err(figure(what.clone()))?;
    let shared_tokens = match prompts.get(1) {
        Some(other) => common_tokens(engine, &prompts[0], other).map_err(figure(what.clone()))?,
        None => 0,
    };
    let slots = Slots {
        conversations: k,
        candidates: n,
    };
    let barrier = Barrier::new(k + 1);
    let measured = serve(engine, slots, |s| {
        std::thread::scope(|scope| {
            let calls: Vec<_> = prompts
                .iter()
                .map(|messages| {
                    let barrier = &barrier;
                    scope.spawn(move || -> Result<u64, EngineError> {
                        // The prompt evaluated first; every thread meets the
                        // others at the barrier, failed or not.
                        let warm = s
                            .conversation(n, plan.max_tokens as usize)
                            .and_then(|mut c| {
                                let sampling = sampling(n, plan.seed, WARMUP_TOKENS);
                                c.generate(&request(messages, sampling, n, Some(&plan.grammar)))?;
                                Ok(c)
                            });
                        barrier.wait();
                        let sampling = sampling(n, plan.seed, plan.max_tokens);
                        let g =
                            warm?.generate(&request(messages, sampling, n, Some(&plan.grammar)))?;
                        Ok(g.stats.generated_tokens.iter().sum::<usize>() as u64)
                    })
                })
                .collect();
            barrier.wait();
            let before = s.load();
            let started = Instant::now();
            let tokens = calls
                .into_iter()
                .map(|c| {
                    c.join().unwrap_or_else(|_| {
                        Err(EngineError::Llama {
                            action: "run a benchmark conversation",
                            message: "its thread panicked".into(),
                        })
                    })
                })
                .collect::<Result<Vec<u64>, EngineError>>();
            let seconds = started.elapsed().as_secs_f64();
            tokens.map(|t| (t.iter().sum::<u64>(), seconds, s.load().since(&before)))
        })
    })
    .and_then(|r| r)
    .map_err(figure(what))?;
    let (tokens, seconds, load): (u64, f64, Load) = measured;
    Ok(SchedulerFigure {
        conversations: k,
        candidates: n,
        prompt_tokens,
        shared_tokens,
        tokens,
        seconds,
        tokens_per_s: tokens as f64 / seconds.max(1e-9),
        steps: load.steps,
        micro_batches: load.micro_batches,
        decode_steps: load.decode_steps,
        decode_micro_batches: load.decode_micro_batches,
        busy_fraction: load.busy_s / seconds.max(1e-9),
        decoding_s: load.busy_s - load.sampling_s,
        sampling_s: load.sampling_s,
    })
}

/// The system message every conversation of a scheduler figure shares:
/// code of about `target` tokens.
fn shared_prompt(engine: &Engine, target: usize) -> Result<String, EngineError> {
    let messages = prompt_of(engine, "Shared context", target)?;
    Ok(messages
        .into_iter()
        .next()
        .map(|m| m.content)
        .unwrap_or_default())
}

/// Conversation `i`'s prompt: the shared system message, then a user
/// message of its own, `target` tokens in all or the longest below.
fn task_prompt(
    engine: &Engine,
    shared: &str,
    i: usize,
    target: usize,
) -> Result<Vec<Message>, EngineError> {
    let system = engine.count_tokens(&[Message::system(shared.to_string())])?;
    let own = prompt_of(
        engine,
        &format!("Task {}", i + 1),
        target.saturating_sub(system),
    )?;
    let mut messages = vec![Message::system(shared.to_string())];
    messages.extend(own);
    Ok(messages)
}

/// Tokens two prompts share from their start.
fn common_tokens(engine: &Engine, a: &[Message], b: &[Message]) -> Result<usize, EngineError> {
    let (a, b) = (engine.tokenize_messages(a)?, engine.tokenize_messages(b)?);
    Ok(a.iter().zip(&b).take_while(|(x, y)| x == y).count())
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
