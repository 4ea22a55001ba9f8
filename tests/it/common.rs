//! Shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The SmolLM2-135M test model. `scripts/test` fetches it; a missing model
/// fails the test with the command to run, it never skips it.
pub fn test_model() -> PathBuf {
    match patchwright::models::resolve("smollm2-135m") {
        Ok(m) => m.path,
        Err(e) => panic!("the test model is missing: {e} (scripts/test fetches it)"),
    }
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

struct ScriptedConversation<'a>(&'a Scripted);

impl Conversation for ScriptedConversation<'_> {
    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        let mut next = self.0.next.lock().unwrap();
        let call = self.0.calls.get(*next).unwrap_or_else(|| {
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
                prompt_s: 0.0,
                decode_s: 0.0,
                total_s: 0.0,
            },
        })
    }
}

impl Backend for Scripted {
    fn conversation(&self, _: usize, _: usize) -> Result<Box<dyn Conversation + '_>, EngineError> {
        Ok(Box::new(ScriptedConversation(self)))
    }
}
