//! Engine benchmark (run by `scripts/bench-engine`; figures go to
//! BENCHMARKS.md). Not a test: it measures, it asserts nothing.
//!
//!   bench_engine MODEL.gguf THREADS [PROMPT_OUT]
//!
//! `BENCH_SECTIONS` (comma-separated: single, candidates, conversation;
//! default all) picks what runs. With PROMPT_OUT, the rendered single-sequence prompt is written there so
//! a peer (llama-cpp-python) can be timed on exactly the same text.
//!
//! 1. one sequence: prompt-processing and generation tokens/s;
//! 2. N = 1, 2, 4, 8 candidates of 128 tokens after a ~1,500-token prompt:
//!    batched (one session) vs one after another (N plain calls);
//! 3. a 20-turn conversation adding ~300 tokens a turn: prompt tokens
//!    evaluated with KV reuse vs the prompt tokens a stateless call would
//!    evaluate.

use std::time::Instant;

use patchwright::engine::{Engine, EngineSettings, Message, Request, Sampling, Session};

/// Filler text of roughly `tokens` tokens (a line is about 17 Qwen tokens):
/// numbered, so no two are alike.
fn filler(tokens: usize, salt: usize) -> String {
    (0..tokens / 17)
        .map(|i| format!("Line {salt}-{i}: the parser reads a value and checks its range.\n"))
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (model, threads, prompt_out) = match args.as_slice() {
        [_, m, t] => (m.clone(), t.parse::<u32>()?, None),
        [_, m, t, p] => (m.clone(), t.parse::<u32>()?, Some(p.clone())),
        _ => return Err("usage: bench_engine MODEL.gguf THREADS [PROMPT_OUT]".into()),
    };
    let engine = Engine::load(
        std::path::Path::new(&model),
        &EngineSettings {
            context: 8192,
            threads,
            ..Default::default()
        },
    )?;
    let greedy = |max_tokens| Sampling {
        max_tokens,
        ..Sampling::default()
    };
    let prompt = vec![
        Message::system("You are a careful code reviewer."),
        Message::user(format!("{}\nSummarise the text above.", filler(1500, 0))),
    ];
    let prompt_tokens = engine.count_tokens(&prompt)?;
    if let Some(path) = prompt_out {
        std::fs::write(path, engine.render(&prompt)?)?;
    }

    let sections =
        std::env::var("BENCH_SECTIONS").unwrap_or_else(|_| "single,candidates,conversation".into());
    let run = |name: &str| sections.split(',').any(|s| s.trim() == name);

    // 1. One sequence. Generation speed from a run with no EOS allowed to
    // cut it short is what we want; a 128-token cap keeps it bounded.
    if run("single") {
        let one = engine.complete(&prompt, &greedy(128))?;
        println!(
        "single: prompt {} tok in {:.2}s = {:.1} tok/s; generation {} tok in {:.2}s = {:.1} tok/s",
        one.prompt_tokens,
        one.prompt_s,
        one.prompt_tokens as f64 / one.prompt_s,
        one.completion_tokens,
        one.decode_s,
        one.completion_tokens as f64 / one.decode_s
    );
    }

    // 2. N candidates: batched vs one after another.
    let mut base = None;
    for n in [1usize, 2, 4, 8].into_iter().filter(|_| run("candidates")) {
        let sampling = Sampling {
            temperature: 0.8,
            top_p: 0.95,
            min_p: 0.0,
            seed: 1,
            max_tokens: 128,
        };
        let t = Instant::now();
        let mut session = Session::new(&engine, n, 128)?;
        let g = session.generate(&Request {
            n,
            ..Request::new(&prompt, sampling.clone())
        })?;
        let batched = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut generated_seq = Vec::new();
        for i in 0..n {
            let c = engine.complete(
                &prompt,
                &Sampling {
                    seed: 1 + i as u32,
                    ..sampling.clone()
                },
            )?;
            generated_seq.push(c.completion_tokens);
        }
        let sequential = t.elapsed().as_secs_f64();
        let base_s = *base.get_or_insert(batched);
        println!(
            "n={n}: batched {batched:.1}s ({:.2}x n=1, generated {:?}); one after another {sequential:.1}s ({:.2}x, generated {generated_seq:?}); prompt {prompt_tokens} tok",
            batched / base_s,
            g.stats.generated_tokens,
            sequential / base_s,
        );
    }

    // 3. A 20-turn conversation.
    if !run("conversation") {
        return Ok(());
    }
    let mut session = Session::new(&engine, 1, 32)?;
    let mut messages = vec![Message::system("You are an agent exploring a repository.")];
    let (mut evaluated, mut total) = (0usize, 0usize);
    let t = Instant::now();
    for turn in 0..20 {
        messages.push(Message::user(format!(
            "Observation {turn}:\n{}What next?",
            filler(300, turn + 1)
        )));
        let g = session.generate(&Request::new(&messages, greedy(32)))?;
        evaluated += g.stats.prompt_tokens_evaluated;
        total += g.stats.prompt_tokens;
        messages.push(Message::assistant(g.candidates[0].text.clone()));
    }
    println!(
        "conversation: 20 turns, {total} prompt tokens in all, {evaluated} evaluated with reuse ({:.1}% reused) in {:.1}s; without reuse all {total} are evaluated",
        100.0 * (total - evaluated) as f64 / total as f64,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
