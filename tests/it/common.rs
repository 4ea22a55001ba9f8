//! Shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The user's models directory, where `scripts/test` fetches the models.
pub fn models_dir() -> PathBuf {
    match patchwright::models::models_dir() {
        Ok(d) => d,
        Err(e) => panic!("no models directory: {e}"),
    }
}

/// The SmolLM2-135M test model. `scripts/test` fetches it; a missing model
/// fails the test with the command to run, it never skips it.
pub fn test_model() -> PathBuf {
    match patchwright::models::resolve(&models_dir(), "smollm2-135m") {
        Ok(m) => m.path,
        Err(e) => panic!("the test model is missing: {e} (scripts/test fetches it)"),
    }
}

/// The tests' tiny model: `models synth qwen2-tiny` (two layers, 128
/// wide, pseudo-random weights) with Qwen2.5-Coder's tokenizer, which
/// llama.cpp runs in milliseconds a call where SmolLM2 takes seconds. For
/// the tests of what happens around the model (sweeps, shards, Slurm
/// arrays, resuming), where its words do not matter. Written once per test
/// process (0.2 s), from the default model's tokenizer (`scripts/test`
/// fetches it), so it is never stale.
pub fn tiny_model() -> PathBuf {
    static TINY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TINY.get_or_init(|| {
        use patchwright::models::synth::{self, Quant, Shape};
        let tokenizer = match patchwright::models::resolve(&models_dir(), "qwen2.5-coder-0.5b") {
            Ok(m) => m.path,
            Err(e) => panic!("the default model is missing: {e} (scripts/test fetches it)"),
        };
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("qwen2-tiny-q4_0.gguf");
        let part = out.with_extension(format!("gguf.{}", std::process::id()));
        let shape = Shape::named("qwen2-tiny").unwrap();
        synth::write(&shape, Quant::Q4_0, None, &tokenizer, 0, &part).unwrap();
        // Tests in other processes may read the file meanwhile: a rename
        // replaces it whole.
        std::fs::rename(&part, &out).unwrap();
        out
    })
    .clone()
}

/// A task of the demo dataset.
pub fn demo_task(id: &str) -> patchwright::dataset::Task {
    patchwright::dataset::load(&root().join("datasets/demo/tasks.jsonl"))
        .unwrap()
        .into_iter()
        .find(|t| t.instance_id == id)
        .unwrap_or_else(|| panic!("no demo task {id}"))
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where the tests build environments: `$PATCHWRIGHT_ENVS_DIR`
/// (`scripts/test` keeps them in the build tree), else the test binary's
/// temporary directory.
pub fn envs_dir() -> PathBuf {
    std::env::var_os("PATCHWRIGHT_ENVS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("envs"))
}

/// The environment pool over the demo repositories and the committed
/// specs, built on first need into [`envs_dir`]; one per test binary.
pub fn demo_pool() -> &'static patchwright::eval::pool::Pool<'static> {
    static POOL: std::sync::OnceLock<patchwright::eval::pool::Pool<'static>> =
        std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let settings = patchwright::config::EnvOptions {
            specs: None,
            envs: Some(envs_dir()),
            pythons: Vec::new(),
            wheels: None,
            bundle: None,
            jobs: Some(1),
            test_timeout_s: 600,
            run_empty: false,
            keep_work: false,
        }
        .resolve(&patchwright_sandbox::Host::default())
        .unwrap();
        let settings: &'static _ = Box::leak(Box::new(settings));
        let repos: &'static _ = Box::leak(Box::new(
            patchwright::repo::Repos::new(&root().join("datasets/demo/repos")).unwrap(),
        ));
        let scratch: &'static _ = Box::leak(Box::new(tempfile::tempdir().unwrap()));
        patchwright::eval::pool::Pool::new(settings, repos, scratch.path())
    })
}

use std::sync::Mutex;

use patchwright::engine::{
    Backend, Candidate, Conversation, EngineError, Generation, Request, Stats, Stop,
};

/// A backend that answers each call with the next scripted candidates
/// (one string per candidate): the stand-in for a model when a test
/// records an episode, which the replay backend then plays back. Every
/// call must be grammar-constrained and ask for as many candidates as
/// scripted.
pub struct Scripted {
    calls: Vec<Vec<&'static str>>,
    next: Mutex<usize>,
}

impl Scripted {
    pub fn new(calls: Vec<Vec<&'static str>>) -> Scripted {
        Scripted {
            calls,
            next: Mutex::new(0),
        }
    }

    /// One reply per call.
    pub fn replies(replies: &[&'static str]) -> Scripted {
        Scripted::new(replies.iter().map(|r| vec![*r]).collect())
    }
}

/// A scripted conversation, made for `sequences` candidates at once as
/// the engine's are: asking more fails the test, as it fails the engine.
struct ScriptedConversation<'a> {
    script: &'a Scripted,
    sequences: usize,
}

impl Conversation for ScriptedConversation<'_> {
    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        assert!(
            request.n.max(1) <= self.sequences,
            "{} candidates asked of a conversation made for {}",
            request.n,
            self.sequences
        );
        let mut next = self.script.next.lock().unwrap();
        let call = self.script.calls.get(*next).unwrap_or_else(|| {
            panic!(
                "unscripted call {}: {:?}",
                *next + 1,
                request.messages.last()
            )
        });
        *next += 1;
        assert_eq!(call.len(), request.n.max(1), "call {}: candidates", *next);
        assert!(
            request.grammar.is_some(),
            "call {}: every call is grammar-constrained",
            *next
        );
        Ok(Generation {
            candidates: call
                .iter()
                .map(|t| Candidate {
                    text: t.to_string(),
                    tokens: vec![1; 4],
                    stop: Stop::EndOfText,
                })
                .collect(),
            stats: Stats {
                prompt_tokens: 100,
                prompt_tokens_evaluated: 100,
                prompt_tokens_reused: 0,
                generated_tokens: vec![4; call.len()],
                draft_tokens: 0,
                draft_accepted: 0,
                grammar: Default::default(),
                // Fixed, so that a run's model seconds are exact.
                prompt_s: SCRIPTED_PROMPT_S,
                decode_s: SCRIPTED_DECODE_S,
                total_s: SCRIPTED_PROMPT_S + SCRIPTED_DECODE_S,
            },
        })
    }
}

/// Seconds every scripted call reports for its prompt and its decoding.
pub const SCRIPTED_PROMPT_S: f64 = 0.5;
pub const SCRIPTED_DECODE_S: f64 = 0.25;

impl Backend for Scripted {
    fn conversation(
        &self,
        sequences: usize,
        _: usize,
    ) -> Result<Box<dyn Conversation + '_>, EngineError> {
        Ok(Box::new(ScriptedConversation {
            script: self,
            sequences: sequences.max(1),
        }))
    }
}
