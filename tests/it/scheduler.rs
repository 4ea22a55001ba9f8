//! The scheduler on the real SmolLM2-135M test model: one context serving
//! many conversations at once, admission by free sequences and cells, KV
//! reuse per conversation, and its load counters.

use crate::common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use patchwright::engine::{
    serve, Backend, Engine, EngineError, EngineSettings, KvBudget, Message, Request, Sampling,
    Session, Slots,
};

type Error = Box<dyn std::error::Error>;

fn engine() -> Result<Engine, EngineError> {
    Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 1024,
            threads: 2,
            ..EngineSettings::default()
        },
    )
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling {
        temperature: 0.0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 0,
        max_tokens,
    }
}

fn ask(text: &str) -> Vec<Message> {
    vec![
        Message::system("You are a helpful assistant."),
        Message::user(text),
    ]
}

const SLOTS: Slots = Slots {
    conversations: 3,
    candidates: 2,
};

#[test]
fn one_conversation_answers_as_a_session_does() -> Result<(), Error> {
    let engine = engine()?;
    let turns = [
        "What is the capital of France? Answer in one word.",
        "And of Italy?",
    ];
    // A two-turn conversation through a session, then the scheduler: the
    // same tokens, and the second turn reuses the first's cache.
    let mut expected = Vec::new();
    let mut session = Session::new(&engine, 1, 0)?;
    let mut msgs = ask(turns[0]);
    for (i, turn) in turns.iter().enumerate() {
        if i > 0 {
            msgs.push(Message::user(*turn));
        }
        let g = session.generate(&Request::new(&msgs, greedy(24)))?;
        msgs.push(Message::assistant(g.candidates[0].text.clone()));
        expected.push(g);
    }
    serve(&engine, SLOTS, |scheduler| -> Result<(), Error> {
        let mut conversation = scheduler.conversation(1, 0)?;
        let mut msgs = ask(turns[0]);
        for (i, turn) in turns.iter().enumerate() {
            if i > 0 {
                msgs.push(Message::user(*turn));
            }
            let g = conversation.generate(&Request::new(&msgs, greedy(24)))?;
            assert_eq!(
                g.candidates[0].tokens, expected[i].candidates[0].tokens,
                "turn {i}"
            );
            assert_eq!(g.stats.prompt_tokens, expected[i].stats.prompt_tokens);
            assert_eq!(
                g.stats.prompt_tokens_reused, expected[i].stats.prompt_tokens_reused,
                "turn {i}"
            );
            msgs.push(Message::assistant(g.candidates[0].text.clone()));
        }
        assert!(expected[1].stats.prompt_tokens_reused > 0);
        let load = scheduler.load();
        assert_eq!(load.requests, 2);
        let generated: usize = expected.iter().map(|g| g.stats.generated_tokens[0]).sum();
        assert_eq!(load.generated_tokens, generated as u64);
        assert!(load.busy_s > 0.0 && load.busy_fraction <= 1.0, "{load:?}");
        Ok(())
    })??;
    Ok(())
}

#[test]
fn conversations_of_many_tasks_decode_in_one_batch() -> Result<(), Error> {
    let engine = engine()?;
    let prompts = ["List three colours.", "Name two rivers.", "Count to five."];
    serve(&engine, SLOTS, |scheduler| -> Result<(), Error> {
        let results: Vec<Result<usize, EngineError>> = std::thread::scope(|s| {
            let handles: Vec<_> = prompts
                .iter()
                .map(|p| {
                    s.spawn(move || {
                        let mut c = scheduler.conversation(2, 32)?;
                        let msgs = ask(p);
                        let mut request = Request::new(&msgs, greedy(32));
                        request.n = 2;
                        request.temperatures = Some(vec![0.0, 0.9]);
                        let g = c.generate(&request)?;
                        assert_eq!(g.candidates.len(), 2);
                        Ok(g.stats.generated_tokens.iter().sum())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or(Err(EngineError::Llama {
                        action: "run a task thread",
                        message: "it panicked".into(),
                    }))
                })
                .collect()
        });
        let mut total = 0;
        for r in results {
            total += r?;
        }
        let load = scheduler.load();
        assert_eq!(load.requests, 3);
        assert_eq!(load.generated_tokens, total as u64);
        assert!(
            load.max_decoding >= 4,
            "two tasks' candidates shared a step: {load:?}"
        );
        // Every step that only decoded was one forward pass, the three
        // conversations' candidates in sequence order, padded to one
        // length; a step that also read a prompt took one more.
        assert!(load.decode_steps > 0, "{load:?}");
        assert_eq!(load.decode_micro_batches, load.decode_steps, "{load:?}");
        assert!(load.micro_batches > load.decode_micro_batches, "{load:?}");
        assert!(
            load.sampling_s > 0.0 && load.sampling_s < load.busy_s,
            "{load:?}"
        );
        // More candidates than a conversation may have are refused.
        let err = scheduler.conversation(3, 32).err().map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("3 candidates")),
            "{err:?}"
        );
        Ok(())
    })??;
    Ok(())
}

#[test]
fn a_conversation_waits_for_a_free_slot() -> Result<(), Error> {
    let engine = engine()?;
    let one = Slots {
        conversations: 1,
        candidates: 1,
    };
    serve(&engine, one, |scheduler| -> Result<(), Error> {
        let (held_tx, held_rx) = mpsc::channel();
        std::thread::scope(|s| -> Result<(), Error> {
            let first = s.spawn(move || -> Result<Instant, EngineError> {
                let c = scheduler.conversation(1, 0)?;
                let _ = held_tx.send(());
                std::thread::sleep(Duration::from_millis(500));
                let released = Instant::now();
                drop(c);
                Ok(released)
            });
            held_rx.recv()?;
            let mut second = scheduler.conversation(1, 0)?;
            let admitted = Instant::now();
            let released = first.join().map_err(|_| "the first task panicked")??;
            assert!(
                admitted >= released,
                "the second conversation was admitted while the only slot was held"
            );
            let msgs = ask("Say hi.");
            second.generate(&Request::new(&msgs, greedy(8)))?;
            Ok(())
        })
    })??;
    Ok(())
}

/// What `--jobs` defaults to on a GPU, the conversations whose streams
/// the KV budget holds; and a scheduler that would not fit its budget is
/// refused with the numbers and the settings to change.
#[test]
fn the_kv_budget_sizes_the_scheduler() -> Result<(), Error> {
    use patchwright::engine::scheduler::conversations_within;
    #[rustfmt::skip]
    let cases = [
        // (budget bytes, bytes per token, context, candidates, limit, conversations)
        (80 << 30, 262_144, 8192, 4, 32, 10),  // a 32B at 8k on an 80 GB card
        (80 << 30, 262_144, 8192, 1, 32, 32),  // 40 fit
        (1 << 30, 262_144, 8192, 4, 32, 1),    // not even one: at least 1
        (u64::MAX, 12_288, 8192, 4, 8, 8),     // capped
    ];
    for (budget, per_token, context, candidates, limit, want) in cases {
        assert_eq!(
            conversations_within(budget, per_token, context, candidates, limit),
            want,
            "{budget} B, {per_token} B/token"
        );
    }
    // SmolLM2 at a 1,024-token context: 3 conversations × 2 streams.
    let per_token = engine()?.kv_bytes_per_token();
    let needed = 3 * 2 * 1024 * per_token;
    let with_budget = |bytes| {
        Engine::load(
            &common::test_model(),
            &EngineSettings {
                context: 1024,
                threads: 2,
                kv_budget: KvBudget::Bytes(bytes),
                ..EngineSettings::default()
            },
        )
    };
    let err = serve(&with_budget(needed - 1)?, SLOTS, |_| ())
        .err()
        .map(|e| e.to_string())
        .ok_or("a scheduler over its budget started")?;
    for part in [
        "3 conversations × 2 candidates × 1024 tokens of context",
        "engine.kv_budget",
        "lower --jobs, fixer.candidates or engine.context",
    ] {
        assert!(err.contains(part), "{err}");
    }
    serve(&with_budget(needed)?, SLOTS, |_| ())?;
    Ok(())
}
