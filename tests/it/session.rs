//! Sessions on the real SmolLM2-135M test model: N candidates from one
//! prompt, KV reuse across turns, grammar-constrained output.

use crate::common;

use patchwright::engine::grammar::{self, Action, Arg};
use patchwright::engine::{
    Engine, EngineError, EngineSettings, Message, Request, Sampling, Session, Stop,
};

fn engine() -> Engine {
    Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 2048,
            threads: 2,
            ..EngineSettings::default()
        },
    )
    .expect("test model loads")
}

fn sampling(temperature: f32, seed: u32, max_tokens: u32) -> Sampling {
    Sampling {
        temperature,
        top_p: 0.95,
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
fn greedy_n1_matches_the_plain_path() {
    let engine = engine();
    for prompt in [
        "What is the capital of France? Answer in one word.",
        "List three colours.",
    ] {
        let msgs = ask(prompt);
        let plain = engine.complete(&msgs, &sampling(0.0, 0, 40)).unwrap();
        let mut session = Session::new(&engine, 1, 40).unwrap();
        let g = session
            .generate(&Request::new(&msgs, sampling(0.0, 0, 40)))
            .unwrap();
        assert_eq!(g.candidates.len(), 1);
        assert_eq!(g.candidates[0].tokens, plain.tokens, "{prompt}");
        assert_eq!(g.candidates[0].text, plain.text);
        assert_eq!(g.candidates[0].stop, plain.stop);
        assert_eq!(g.stats.prompt_tokens, plain.prompt_tokens);
    }
}

#[test]
fn sampled_candidates_differ_and_repeat_exactly() {
    let engine = engine();
    let msgs = ask("Write a short poem about rust.");
    let request = Request {
        n: 4,
        ..Request::new(&msgs, sampling(0.9, 7, 24))
    };
    let run = || {
        Session::new(&engine, 4, 24)
            .unwrap()
            .generate(&request)
            .unwrap()
    };
    let a = run();
    assert_eq!(a.candidates.len(), 4);
    for i in 0..4 {
        for j in i + 1..4 {
            assert_ne!(
                a.candidates[i].tokens, a.candidates[j].tokens,
                "candidates {i} and {j}"
            );
        }
    }
    // The prompt was evaluated once for all four.
    assert_eq!(a.stats.prompt_tokens_evaluated, a.stats.prompt_tokens);
    assert_eq!(
        a.stats.generated_tokens,
        a.candidates
            .iter()
            .map(|c| c.tokens.len())
            .collect::<Vec<_>>()
    );
    let b = run();
    assert_eq!(
        a.candidates.iter().map(|c| &c.tokens).collect::<Vec<_>>(),
        b.candidates.iter().map(|c| &c.tokens).collect::<Vec<_>>()
    );
}

/// Measured once (six candidates decoding: too many for a lookup draft to
/// pay, so none is made; drafts would decide how many tokens share each
/// batch and so the last bits of the sampled logits): every candidate ends
/// by itself, at its own length, before the 32-token cap; the short ones
/// left the batch while the others went on.
const EARLY_LENGTHS: &[usize] = &[6, 5, 22, 3, 27, 24];

#[test]
fn candidates_that_finish_early_leave_the_batch() {
    let engine = engine();
    let msgs = ask("Is the sky blue? Answer in a few words.");
    let request = Request {
        n: 6,
        ..Request::new(&msgs, sampling(1.0, 3, 32))
    };
    let out = Session::new(&engine, 6, 32)
        .unwrap()
        .generate(&request)
        .unwrap();
    let lengths: Vec<usize> = out.candidates.iter().map(|c| c.tokens.len()).collect();
    assert_eq!(out.stats.generated_tokens, lengths);
    let texts: Vec<&str> = out.candidates.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(lengths, EARLY_LENGTHS, "{texts:?}");
    assert!(out.candidates.iter().all(|c| c.stop == Stop::EndOfText));
}

#[test]
fn reuse_statistics_are_exact_for_a_scripted_conversation() {
    let engine = engine();
    let mut session = Session::new(&engine, 1, 32).unwrap();
    let s = sampling(0.0, 0, 32);
    let mut msgs = ask("Name a fruit.");
    let turn1_tokens = engine.tokenize_messages(&msgs).unwrap();
    let t1 = session.generate(&Request::new(&msgs, s.clone())).unwrap();
    assert_eq!(
        (
            t1.stats.prompt_tokens_reused,
            t1.stats.prompt_tokens_evaluated
        ),
        (0, turn1_tokens.len())
    );

    msgs.push(Message::assistant(t1.candidates[0].text.clone()));
    msgs.push(Message::user("Name another one."));
    let turn2_tokens = engine.tokenize_messages(&msgs).unwrap();
    let cached: Vec<i32> = turn1_tokens
        .iter()
        .chain(&t1.candidates[0].tokens)
        .copied()
        .collect();
    let expected = turn2_tokens
        .iter()
        .zip(&cached)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        expected >= turn1_tokens.len(),
        "the whole first prompt is a prefix of the second"
    );
    let t2 = session.generate(&Request::new(&msgs, s.clone())).unwrap();
    assert_eq!(t2.stats.prompt_tokens, turn2_tokens.len());
    assert_eq!(t2.stats.prompt_tokens_reused, expected);
    assert_eq!(
        t2.stats.prompt_tokens_evaluated,
        turn2_tokens.len() - expected
    );

    // The same prompt again: everything but the last token is reused, and
    // greedy decoding gives the same reply.
    let t3 = session.generate(&Request::new(&msgs, s.clone())).unwrap();
    assert_eq!(
        (
            t3.stats.prompt_tokens_reused,
            t3.stats.prompt_tokens_evaluated
        ),
        (turn2_tokens.len() - 1, 1)
    );
    assert_eq!(t3.candidates[0].tokens, t2.candidates[0].tokens);

    // A different history: only the shared system prompt stays.
    let other = ask("Name a vegetable.");
    let other_tokens = engine.tokenize_messages(&other).unwrap();
    let cached: Vec<i32> = turn2_tokens
        .iter()
        .chain(&t3.candidates[0].tokens)
        .copied()
        .collect();
    let shared = other_tokens
        .iter()
        .zip(&cached)
        .take_while(|(a, b)| a == b)
        .count();
    let t4 = session.generate(&Request::new(&other, s)).unwrap();
    assert_eq!(t4.stats.prompt_tokens_reused, shared);
    let fresh = engine.complete(&other, &sampling(0.0, 0, 32)).unwrap();
    assert_eq!(
        t4.candidates[0].tokens, fresh.tokens,
        "dropping the divergent tail leaves no trace"
    );
}

#[test]
fn grammar_output_is_always_accepted() {
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
    let mut session = Session::new(&engine, 4, 64).unwrap();
    for seed in 0..6 {
        let request = Request {
            n: 4,
            grammar: Some(&choice),
            ..Request::new(&msgs, sampling(1.2, seed * 10, 64))
        };
        for c in session.generate(&request).unwrap().candidates {
            assert!(
                paths.contains(&c.text.as_str()),
                "seed {seed}: {:?}",
                c.text
            );
            assert_eq!(c.stop, Stop::EndOfText);
        }
        let request = Request {
            n: 4,
            grammar: Some(&action),
            ..Request::new(&msgs, sampling(1.2, seed * 10, 64))
        };
        for c in session.generate(&request).unwrap().candidates {
            if c.stop == Stop::EndOfText {
                assert!(line.is_match(&c.text), "seed {seed}: {:?}", c.text);
            } else {
                // Cut by max_tokens: still a prefix the grammar allows.
                assert!(
                    c.text.starts_with("open ")
                        || c.text.starts_with("search_dir ")
                        || c.text.starts_with("submit"),
                    "{:?}",
                    c.text
                );
            }
        }
    }
}

#[test]
fn search_replace_grammar_shapes_the_reply() {
    let engine = engine();
    let g = grammar::search_replace(&["pkg/a.py", "pkg/b.py"]).unwrap();
    let msgs = ask("Change x = 1 to x = 2 in pkg/a.py.");
    let request = Request {
        n: 2,
        grammar: Some(&g),
        ..Request::new(&msgs, sampling(0.8, 1, 48))
    };
    let out = Session::new(&engine, 2, 48)
        .unwrap()
        .generate(&request)
        .unwrap();
    for c in out.candidates {
        assert!(
            c.text.starts_with("pkg/a.py\n<<<<<<< SEARCH\n")
                || c.text.starts_with("pkg/b.py\n<<<<<<< SEARCH\n"),
            "{:?}",
            c.text
        );
    }
}

#[test]
fn bad_grammars_and_oversized_requests_are_refused() {
    let engine = engine();
    let msgs = ask("hi");
    let mut session = Session::new(&engine, 2, 100).unwrap();
    let request = Request {
        grammar: Some("root ::= (unclosed"),
        ..Request::new(&msgs, sampling(0.0, 0, 8))
    };
    assert!(matches!(
        session.generate(&request),
        Err(EngineError::Grammar(_))
    ));
    // 2 candidates x 1200 tokens do not fit 2048 + 100 cells (rounded up).
    assert!(
        session.capacity() >= 2148 && session.capacity() < 2400,
        "{}",
        session.capacity()
    );
    let request = Request {
        n: 2,
        ..Request::new(&msgs, sampling(0.0, 0, 1200))
    };
    match session.generate(&request) {
        Err(EngineError::TooLong {
            reserved, context, ..
        }) => assert_eq!((reserved, context), (2400, session.capacity())),
        other => panic!("expected TooLong, got {:?}", other.map(|g| g.stats)),
    }
    let request = Request {
        n: 3,
        ..Request::new(&msgs, sampling(0.0, 0, 8))
    };
    assert!(
        session.generate(&request).is_err(),
        "more candidates than the session was made for"
    );
}
