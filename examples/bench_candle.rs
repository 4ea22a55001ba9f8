//! The candle engine against llama.cpp (run by `scripts/bench-candle`;
//! figures go to BENCHMARKS.md). Not a test: it measures.
//!
//!   bench_candle MODEL.gguf THREADS PROMPTS.json
//!
//! One prompt (the issue texts of the differential fixture, joined), the
//! same for both engines: prompt tokens per second and generated tokens per
//! second of one greedy call of 64 tokens; then on the candle engine four
//! candidates from the evaluated prompt in one batch, against four single
//! calls one after another; and the cost of a grammar-constrained step.

use std::path::Path;
use std::time::Instant;

use patchwright::engine::candle::CandleEngine;
use patchwright::engine::grammar;
use patchwright::engine::{
    Backend, Engine, EngineKind, EngineSettings, Generation, Message, Request, Sampling,
};

/// Tokens generated per candidate.
const MAX_TOKENS: u32 = 64;

fn messages(fixture: &Path) -> Result<Vec<Message>, Box<dyn std::error::Error>> {
    let items: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(fixture)?)?;
    let issues: Vec<&str> = items
        .iter()
        .filter(|i| i["kind"] == "issue")
        .filter_map(|i| i["text"].as_str())
        .take(3)
        .collect();
    Ok(vec![
        Message::system("You are a helpful assistant."),
        Message::user(format!(
            "Summarize these GitHub issues:\n\n{}",
            issues.join("\n\n---\n\n")
        )),
    ])
}

fn line(engine: &str, what: &str, g: &Generation, wall: f64) {
    let generated: usize = g.stats.generated_tokens.iter().sum();
    println!(
        "{engine:<7} {what:<28} prompt {:>4} tok in {:>6.2}s = {:>6.1} tok/s | generated {:>3} tok in {:>6.2}s = {:>5.1} tok/s | wall {:.2}s",
        g.stats.prompt_tokens_evaluated,
        g.stats.prompt_s,
        g.stats.prompt_tokens_evaluated as f64 / g.stats.prompt_s.max(1e-9),
        generated,
        g.stats.decode_s,
        generated as f64 / g.stats.decode_s.max(1e-9),
        wall
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, threads, fixture] = args.as_slice() else {
        return Err("usage: bench_candle MODEL.gguf THREADS PROMPTS.json".into());
    };
    let model = Path::new(model);
    let messages = messages(Path::new(fixture))?;
    let settings = EngineSettings {
        context: 2048,
        threads: threads.parse()?,
        // Drafts are llama.cpp-only; off, both engines decode token by token.
        prompt_lookup: false,
        jump_forward: false,
        ..EngineSettings::default()
    };
    let greedy = Sampling {
        temperature: 0.0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 0,
        max_tokens: MAX_TOKENS,
    };

    let started = Instant::now();
    let llama = Engine::load(model, &settings)?;
    println!(
        "llama.cpp loaded in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let g = llama
        .conversation(1, MAX_TOKENS as usize)?
        .generate(&Request::new(&messages, greedy.clone()))?;
    line(
        "llama",
        "greedy, 1 candidate",
        &g,
        started.elapsed().as_secs_f64(),
    );
    let llama_text = g.candidates[0].text.clone();
    drop(llama);

    let started = Instant::now();
    let candle = CandleEngine::load(
        model,
        &EngineSettings {
            kind: EngineKind::Candle,
            ..settings.clone()
        },
    )?;
    println!("candle loaded in {:.1}s", started.elapsed().as_secs_f64());
    let started = Instant::now();
    let one = candle
        .conversation(1, MAX_TOKENS as usize)?
        .generate(&Request::new(&messages, greedy.clone()))?;
    line(
        "candle",
        "greedy, 1 candidate",
        &one,
        started.elapsed().as_secs_f64(),
    );
    println!(
        "same greedy text in both engines: {}",
        one.candidates[0].text == llama_text
    );

    // Four candidates: the prompt once, then one batch, or the prompt
    // reused from the conversation's cache and four calls in turn.
    let four = Request {
        n: 4,
        temperatures: Some(vec![0.0, 0.8, 0.8, 0.8]),
        ..Request::new(&messages, greedy.clone())
    };
    let mut conversation = candle.conversation(4, MAX_TOKENS as usize)?;
    let started = Instant::now();
    let batched = conversation.generate(&four)?;
    line(
        "candle",
        "4 candidates, one batch",
        &batched,
        started.elapsed().as_secs_f64(),
    );
    let mut decode = 0.0;
    let mut generated = 0;
    for (i, &temperature) in [0.0f32, 0.8, 0.8, 0.8].iter().enumerate() {
        let g = conversation.generate(&Request::new(
            &messages,
            Sampling {
                temperature,
                seed: i as u32,
                ..greedy.clone()
            },
        ))?;
        decode += g.stats.decode_s;
        generated += g.stats.generated_tokens.iter().sum::<usize>();
    }
    println!(
        "candle  4 candidates, in turn      generated {generated:>3} tok in {decode:>6.2}s = {:>5.1} tok/s (prompt from the cache)",
        generated as f64 / decode.max(1e-9)
    );

    // A grammar-constrained call: a choice among paths, greedy and sampled.
    let paths = [
        "src/app/config.py",
        "src/app/main.py",
        "tests/test_config.py",
    ];
    let choice = grammar::choice(&paths)?;
    for temperature in [0.0f32, 1.0] {
        let started = Instant::now();
        let g = conversation.generate(&Request {
            grammar: Some(&choice),
            ..Request::new(
                &messages,
                Sampling {
                    temperature,
                    ..greedy.clone()
                },
            )
        })?;
        line(
            "candle",
            &format!("grammar, temperature {temperature}"),
            &g,
            started.elapsed().as_secs_f64(),
        );
    }
    Ok(())
}
