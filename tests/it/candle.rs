//! The candle engine (`[engine] kind = "candle"`) against llama.cpp on the
//! same GGUF files: greedy decoding from the same prompt token ids agrees,
//! or parts only where both engines were at a near-tie; and the candle
//! engine's conversations, candidates and grammar-constrained replies.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::common;

use patchwright::engine::candle::model::Model;
use patchwright::engine::candle::CandleEngine;
use patchwright::engine::gbnf::{Grammar, Matcher};
use patchwright::engine::grammar::{self, Action, Arg};
use patchwright::engine::{
    Backend, Engine, EngineKind, EngineSettings, Message, Request, Sampling, Stop, TraceStep,
};

/// Greedy tokens compared per prompt (the issue's "first 64 tokens").
const STEPS: usize = 64;

/// Largest gap between the two highest logits (in logit units) at which
/// the two engines may pick different tokens. The engines quantize the
/// activations alike but sum in different orders (llama.cpp's SIMD dot
/// products and its own attention kernel against candle's), so their
/// logits differ by a few hundredths: on these prompts the largest
/// difference of a step's top logit between the engines reaches 0.65
/// (SmolLM2, up to the first divergence), and the gaps at the divergences
/// measured there were at most 0.20. Two tokens within 0.25 of each other
/// can swap places under such noise; a gap above it is a real disagreement.
const NEAR_TIE: f32 = 0.25;

/// Prompt tokens per candle forward pass (`[engine] batch`'s default).
const PROMPT_BATCH: usize = 512;

/// Longest prompt of the fixture, in tokens, so that the test stays cheap.
const MAX_PROMPT_TOKENS: usize = 200;

/// The prompts: issue texts of SWE-bench Lite and Python code from its gold
/// patches, each cut to about 500 characters.
fn prompts() -> Vec<(String, Vec<Message>)> {
    let path = common::root().join("tests/fixtures/differential/prompts.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let items: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    items
        .iter()
        .map(|item| {
            let name = item["name"].as_str().unwrap().to_string();
            let body = item["text"].as_str().unwrap();
            let ask = match item["kind"].as_str().unwrap() {
                "issue" => format!("Summarize this GitHub issue:\n\n{body}"),
                _ => format!("Explain what this Python code does:\n\n```python\n{body}\n```"),
            };
            let messages = vec![
                Message::system("You are a helpful assistant."),
                Message::user(ask),
            ];
            (name, messages)
        })
        .collect()
}

fn settings(kind: EngineKind) -> EngineSettings {
    EngineSettings {
        kind,
        context: 2048,
        threads: 2,
        ..EngineSettings::default()
    }
}

fn default_model() -> std::path::PathBuf {
    match patchwright::models::resolve(&common::models_dir(), "qwen2.5-coder-0.5b") {
        Ok(m) => m.path,
        Err(e) => panic!("the default model is missing: {e} (scripts/test fetches it)"),
    }
}

/// Where two traces first pick different tokens.
fn first_difference(a: &[TraceStep], b: &[TraceStep]) -> Option<usize> {
    (0..a.len().max(b.len())).find(|&k| a.get(k).map(|s| s.token) != b.get(k).map(|s| s.token))
}

/// Runs the differential comparison on `model` over `prompts`; panics with
/// every prompt's outcome when one diverges at a step that is not a
/// near-tie. After the first difference the traces would compare
/// different texts, so candle decodes no further.
fn differential(model: &Path, prompts: Vec<(String, Vec<Message>)>) {
    let started = Instant::now();
    let llama = Engine::load(model, &settings(EngineKind::Llama)).unwrap();
    // The model alone: the prompts' token ids come from llama.cpp.
    let candle = Model::load(model).unwrap();
    let mut report = Vec::new();
    let mut failures = 0;
    let mut identical = 0;
    let mut largest_difference = 0.0f32;
    for (name, messages) in &prompts {
        let ids: Vec<u32> = llama
            .tokenize_messages(messages)
            .unwrap()
            .into_iter()
            .map(|t| t as u32)
            .collect();
        assert!(
            ids.len() <= MAX_PROMPT_TOKENS,
            "{name}: {} tokens",
            ids.len()
        );
        let t = Instant::now();
        let a = llama.greedy_trace(&ids, STEPS).unwrap();
        let llama_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        // Only the steps up to the first difference are compared: candle's
        // trace stops there.
        let b = candle
            .greedy_trace_while(&ids, STEPS, PROMPT_BATCH, |k, step| {
                a.get(k).map(|s| s.token) == Some(step.token)
            })
            .unwrap();
        let candle_s = t.elapsed().as_secs_f64();
        let timing = format!(
            "{} prompt tokens, llama.cpp {llama_s:.1}s, candle {candle_s:.1}s",
            ids.len()
        );
        let same = first_difference(&a, &b).unwrap_or(a.len().min(b.len()));
        for (x, y) in a.iter().zip(&b).take(same + 1) {
            largest_difference = largest_difference.max((x.top1 - y.top1).abs());
        }
        match first_difference(&a, &b) {
            None => {
                identical += 1;
                report.push(format!("{name}: identical ({} tokens; {timing})", a.len()));
            }
            Some(k) => {
                let gap = |t: &[TraceStep]| t.get(k).map_or(f32::NAN, TraceStep::gap);
                let (ga, gb) = (gap(&a), gap(&b));
                let tie = ga <= NEAR_TIE && gb <= NEAR_TIE;
                if !tie {
                    failures += 1;
                }
                report.push(format!(
                    "{name}: diverged at step {k}: llama.cpp gap {ga:.3}, candle gap {gb:.3}{} ({timing})",
                    if tie { " (near-tie)" } else { " NOT A NEAR-TIE" }
                ));
            }
        }
    }
    let report = report.join("\n");
    eprintln!(
        "{}: {identical}/{} identical, largest top-logit difference {largest_difference:.3}, {:.0}s\n{report}",
        model.display(),
        prompts.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(failures, 0, "{report}");
}

/// Every `step`-th prompt of the fixture, checked to hold `issues` issue
/// texts and `code` code excerpts, so both kinds of text are compared.
fn every(step: usize, issues: usize, code: usize) -> Vec<(String, Vec<Message>)> {
    let some: Vec<_> = prompts().into_iter().step_by(step).collect();
    let kinds = |kind: &str| some.iter().filter(|(n, _)| n.ends_with(kind)).count();
    assert_eq!(
        (kinds(":issue"), kinds(":code")),
        (issues, code),
        "{:?}",
        some.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    some
}

/// SmolLM2 (the llama architecture) on every other prompt of the 12: three
/// issue texts and three code excerpts, each of another repository (the
/// whole set cost the suite 95 s of its 40 minutes).
#[test]
fn greedy_agrees_with_llama_cpp_on_smollm2() {
    differential(&common::test_model(), every(2, 3, 3));
}

/// The default model (the qwen2 architecture, 4x SmolLM2's cost a token) on
/// one issue text and one code excerpt, so the qwen2 forward pass is
/// compared on both kinds of text; SmolLM2 above takes more of the set.
#[test]
fn greedy_agrees_with_llama_cpp_on_the_default_model() {
    differential(&default_model(), every(6, 1, 1));
}

fn engine() -> CandleEngine {
    CandleEngine::load(&common::test_model(), &settings(EngineKind::Candle)).unwrap()
}

fn sampling(temperature: f32, seed: u32, max_tokens: u32) -> Sampling {
    Sampling {
        temperature,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        max_tokens,
    }
}

fn ask(text: &str) -> Vec<Message> {
    vec![
        Message::system("You are a helpful assistant."),
        Message::user(text),
    ]
}

#[test]
fn grammar_constrained_replies_conform() {
    let engine = engine();
    let paths = [
        "src/app/config.py",
        "src/app/main.py",
        "tests/test_config.py",
    ];
    let choice = grammar::choice(&paths).unwrap();
    let action = grammar::actions(&[
        Action {
            name: "open".into(),
            args: vec![
                Arg::Choice(paths.iter().map(|p| p.to_string()).collect()),
                Arg::Integer,
            ],
        },
        Action {
            name: "search_dir".into(),
            args: vec![Arg::Word],
        },
        Action {
            name: "submit".into(),
            args: vec![],
        },
    ])
    .unwrap();
    let line = regex::Regex::new(r"^(open (src/app/config\.py|src/app/main\.py|tests/test_config\.py) [0-9]{1,9}|search_dir [^ \n]{1,120}|submit)\n$").unwrap();
    let msgs = ask("Which file configures the app? Answer with a path.");
    let mut conversation = engine.conversation(4, 48).unwrap();
    let mut ended = 0;
    for seed in 0..4 {
        for (g, check) in [
            (
                &choice,
                &(|t: &str| paths.contains(&t)) as &dyn Fn(&str) -> bool,
            ),
            (&action, &|t: &str| line.is_match(t)),
        ] {
            let request = Request {
                n: 4,
                grammar: Some(g),
                ..Request::new(&msgs, sampling(1.0, seed * 10, 48))
            };
            let parsed = Arc::new(Grammar::parse(g).unwrap());
            for c in conversation.generate(&request).unwrap().candidates {
                let mut matcher = Matcher::new(Arc::clone(&parsed));
                assert!(matcher.accept(&c.text), "seed {seed}: {:?}", c.text);
                if c.stop == Stop::EndOfText {
                    ended += 1;
                    assert!(matcher.can_end(), "seed {seed}: {:?}", c.text);
                    assert!(check(&c.text), "seed {seed}: {:?}", c.text);
                }
            }
        }
    }
    // Most replies finish within 48 tokens (a `search_dir` word may not).
    assert!(ended >= 24, "{ended} of 32 replies ended");
}

#[test]
fn a_conversation_reuses_its_cache_and_candidates_share_the_prompt() {
    let engine = engine();
    let first = ask("Name three colours.");
    let mut conversation = engine.conversation(4, 24).unwrap();
    let one = conversation
        .generate(&Request::new(&first, sampling(0.0, 0, 24)))
        .unwrap();
    let prompt_tokens = engine.count_tokens(&first).unwrap();
    assert_eq!(one.stats.prompt_tokens, prompt_tokens);
    assert_eq!(one.stats.prompt_tokens_reused, 0);
    let reply = &one.candidates[0];

    // The next turn starts with the first turn and its reply: only what
    // follows them is evaluated.
    let mut second = first.clone();
    second.push(Message::assistant(reply.text.clone()));
    second.push(Message::user("And three more."));
    let two = conversation
        .generate(&Request::new(&second, sampling(0.0, 0, 24)))
        .unwrap();
    let fresh = engine
        .conversation(1, 24)
        .unwrap()
        .generate(&Request::new(&second, sampling(0.0, 0, 24)))
        .unwrap();
    assert_eq!(two.candidates, fresh.candidates);
    assert!(
        two.stats.prompt_tokens_reused >= prompt_tokens + reply.tokens.len() - 1,
        "{:?}",
        two.stats
    );
    assert_eq!(
        two.stats.prompt_tokens_reused + two.stats.prompt_tokens_evaluated,
        two.stats.prompt_tokens
    );

    // Four candidates from one prompt: the greedy one equals the reply of a
    // single greedy call; the sampled ones repeat with their seeds.
    let request = Request {
        n: 4,
        temperatures: Some(vec![0.0, 1.0, 1.0, 1.0]),
        ..Request::new(&first, sampling(1.0, 7, 24))
    };
    let four = conversation.generate(&request).unwrap();
    assert_eq!(four.candidates[0], *reply);
    assert_eq!(four.stats.generated_tokens.len(), 4);
    let again = engine
        .conversation(4, 24)
        .unwrap()
        .generate(&request)
        .unwrap();
    assert_eq!(four.candidates, again.candidates);
}

#[test]
fn prompts_that_do_not_fit_are_refused() {
    let engine = CandleEngine::load(
        &common::test_model(),
        &EngineSettings {
            context: 64,
            ..settings(EngineKind::Candle)
        },
    )
    .unwrap();
    let msgs = ask("Write a long story about a dragon.");
    let err = engine
        .conversation(1, 64)
        .unwrap()
        .generate(&Request::new(&msgs, sampling(0.0, 0, 60)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("prompt does not fit"), "{err}");
}

#[test]
fn generate_runs_on_the_candle_engine() {
    common::test_model();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .args([
            "generate",
            "--model",
            "smollm2-135m",
            "--engine",
            "candle",
            "--threads",
            "2",
            "--context",
            "2048",
            "--json",
            "--max-tokens",
            "16",
            "--system",
            "You are a helpful assistant.",
            "What is the capital of France? Answer in one word.",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // llama.cpp's greedy answer to the same messages (tests/it/engine.rs).
    assert_eq!(
        v["candidates"],
        serde_json::json!(["The capital of France is Paris."])
    );
    assert_eq!(v["stats"]["generated_tokens"], serde_json::json!([7]));
    assert_eq!(v["stats"]["prompt_tokens"], 32);
}
