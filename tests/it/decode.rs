//! Decoding with drafts (prompt lookup, jump-forward) and the prefix cache
//! across conversations, on the real SmolLM2-135M test model: greedy
//! replies are exactly the replies without them, with and without a
//! grammar, through a session and through the scheduler; sampled replies
//! repeat exactly for the same seeds; only the number of batches and of
//! prompt tokens evaluated changes.
//!
//! Sampled candidates are not compared with drafts off: llama.cpp's CPU
//! kernels round a position's logits slightly differently depending on how
//! many tokens share its batch (the repacked Q4 weights use one kernel for
//! one row and another for several), which can reorder near-equal tokens
//! in top-p's tail, as mixing tasks in the scheduler's batches already
//! does.

use crate::common;

use patchwright::engine::gbnf::{Grammar, Matcher};
use patchwright::engine::grammar;
use patchwright::engine::{
    serve, Backend, Candidate, Engine, EngineSettings, Generation, Message, Request, Sampling,
    Session, Slots,
};

type Error = Box<dyn std::error::Error>;

fn engine(prompt_lookup: bool, jump_forward: bool) -> Result<Engine, Error> {
    Ok(Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 2048,
            threads: 2,
            prompt_lookup,
            jump_forward,
            ..EngineSettings::default()
        },
    )?)
}

/// Code the model is asked to copy with a change: replies that reuse the
/// prompt's lines, where prompt lookup has something to find.
const CODE: &str = "def parse_version(text):
    parts = text.strip().split(\".\")
    if len(parts) != 3:
        raise ValueError(\"expected MAJOR.MINOR.PATCH\")
    major, minor, patch = (int(p) for p in parts)
    return major, minor, patch
";

fn copy_messages() -> Vec<Message> {
    vec![
        Message::system("You are an expert Python developer who fixes bugs."),
        Message::user(format!(
            "semver/parse.py\n```python\n{CODE}```\n\nThe function rejects versions with a \
             leading 'v'. Fix it with one SEARCH/REPLACE block: the path, then \
             <<<<<<< SEARCH, the lines to change copied exactly, =======, the new lines, \
             >>>>>>> REPLACE."
        )),
    ]
}

/// Candidate 0 greedy, the others sampled, as the Fixer asks them.
fn fixer_request<'a>(messages: &'a [Message], grammar: Option<&'a str>) -> Request<'a> {
    Request {
        messages,
        sampling: Sampling {
            temperature: 0.0,
            top_p: 0.95,
            min_p: 0.0,
            seed: 7,
            max_tokens: 96,
        },
        n: 4,
        temperatures: Some(vec![0.0, 0.8, 0.8, 0.8]),
        grammar,
    }
}

fn greedy<'a>(messages: &'a [Message], grammar: Option<&'a str>) -> Request<'a> {
    let mut r = Request::new(
        messages,
        Sampling {
            temperature: 0.0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
            max_tokens: 96,
        },
    );
    r.grammar = grammar;
    r
}

fn texts(g: &Generation) -> Vec<(Vec<i32>, String)> {
    g.candidates
        .iter()
        .map(|c: &Candidate| (c.tokens.clone(), c.text.clone()))
        .collect()
}

/// A prompt and the grammar its reply must follow.
type Case = (Vec<Message>, Option<String>);

/// Prompts whose replies copy some of the prompt, with and without the
/// Fixer's SEARCH/REPLACE grammar, and a choice among paths: three cases,
/// each drafting kind in at least one (five cost the suite 61 s).
fn greedy_cases() -> Result<Vec<Case>, Error> {
    let sr = grammar::search_replace(&["semver/parse.py"])?;
    let choice = grammar::choice(&["semver/parse.py", "semver/format.py", "tests/test_parse.py"])?;
    let copy = vec![
        Message::system("You are a careful assistant."),
        Message::user(format!(
            "Repeat this code exactly, then say what it does:\n{CODE}"
        )),
    ];
    let which = vec![
        Message::system("You are an expert Python developer."),
        Message::user(format!(
            "{CODE}\nWhich file holds this function? Answer with a path."
        )),
    ];
    Ok(vec![
        (copy_messages(), None),
        (copy, Some(sr)),
        (which, Some(choice)),
    ])
}

#[test]
fn greedy_replies_with_drafts_are_the_replies_without() -> Result<(), Error> {
    let off = engine(false, false)?;
    let modes = [
        ("lookup", engine(true, false)?),
        ("jump-forward", engine(false, true)?),
        ("both", engine(true, true)?),
    ];
    let mut drafted = [0usize; 3];
    let mut kept = [0usize; 3];
    for (c, (messages, grammar)) in greedy_cases()?.iter().enumerate() {
        let request = greedy(messages, grammar.as_deref());
        let expected = Session::new(&off, 1, 96)?.generate(&request)?;
        assert_eq!(expected.stats.draft_tokens, 0, "drafts off drafts nothing");
        for (m, (mode, engine)) in modes.iter().enumerate() {
            let with = Session::new(engine, 1, 96)?.generate(&request)?;
            assert_eq!(texts(&with), texts(&expected), "case {c}, {mode}, session");
            let slots = Slots {
                conversations: 2,
                candidates: 1,
            };
            let scheduled = serve(engine, slots, |s| -> Result<Generation, Error> {
                Ok(s.conversation(1, 96)?.generate(&request)?)
            })??;
            assert_eq!(
                texts(&scheduled),
                texts(&expected),
                "case {c}, {mode}, scheduler"
            );
            for g in [&with, &scheduled] {
                assert!(g.stats.draft_accepted <= g.stats.draft_tokens);
                drafted[m] += g.stats.draft_tokens;
                kept[m] += g.stats.draft_accepted;
            }
        }
    }
    // Each kind of draft was made and partly kept: the replies copy the
    // prompt's code and the grammars force text.
    for (m, (mode, _)) in modes.iter().enumerate() {
        assert!(
            drafted[m] > 0 && kept[m] > 0,
            "{mode}: drafted {}, kept {}",
            drafted[m],
            kept[m]
        );
    }
    Ok(())
}

#[test]
fn sampled_candidates_with_drafts_repeat_and_follow_the_grammar() -> Result<(), Error> {
    let messages = copy_messages();
    let sr = grammar::search_replace(&["semver/parse.py"])?;
    let request = fixer_request(&messages, Some(&sr));
    let engine = engine(true, true)?;
    let first = Session::new(&engine, 4, 96)?.generate(&request)?;
    let again = Session::new(&engine, 4, 96)?.generate(&request)?;
    assert_eq!(texts(&again), texts(&first));
    let parsed = std::sync::Arc::new(Grammar::parse(&sr)?);
    for c in &first.candidates {
        let mut m = Matcher::new(parsed.clone());
        assert!(m.accept(&c.text), "{:?}", c.text);
    }
    assert!(first.stats.draft_tokens > 0);
    Ok(())
}

fn preamble() -> String {
    (0..12)
        .map(|i| format!("Rule {i}: read the issue, then answer only what is asked.\n"))
        .collect()
}

fn stage(question: &str) -> Vec<Message> {
    vec![
        Message::system("You are an expert Python developer."),
        Message::user(format!("{}\nQUESTION: {question}", preamble())),
    ]
}

fn shared_tokens(engine: &Engine, a: &[Message], b: &[Message]) -> Result<usize, Error> {
    let (a, b) = (engine.tokenize_messages(a)?, engine.tokenize_messages(b)?);
    Ok(a.iter().zip(&b).take_while(|(x, y)| x == y).count())
}

#[test]
fn conversations_share_a_prefix_another_one_evaluated() -> Result<(), Error> {
    let engine = engine(true, true)?;
    let first = stage("Which file holds the parser?");
    let second = stage("Write a test for the parser.");
    let third = stage("What does the parser return?");
    let shared = shared_tokens(&engine, &first, &second)?;
    assert!(
        shared >= patchwright::engine::scheduler::MIN_SHARED_PREFIX,
        "{shared}"
    );
    let greedy = |max_tokens| Sampling {
        temperature: 0.0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 0,
        max_tokens,
    };
    // Each prompt alone in a fresh scheduler: what the answers must be.
    let alone = |messages: &[Message]| -> Result<Generation, Error> {
        let slots = Slots {
            conversations: 1,
            candidates: 1,
        };
        serve(&engine, slots, |s| -> Result<Generation, Error> {
            Ok(s.conversation(1, 24)?
                .generate(&Request::new(messages, greedy(24)))?)
        })?
    };
    let expected = [alone(&first)?, alone(&second)?, alone(&third)?];
    let slots = Slots {
        conversations: 2,
        candidates: 1,
    };
    serve(&engine, slots, |s| -> Result<(), Error> {
        let mut a = s.conversation(1, 24)?;
        let g1 = a.generate(&Request::new(&first, greedy(24)))?;
        assert_eq!(g1.stats.prompt_tokens_reused, 0);
        // A second conversation, open beside the first: it copies the
        // shared prefix from the first's cache.
        let mut b = s.conversation(1, 24)?;
        let g2 = b.generate(&Request::new(&second, greedy(24)))?;
        assert_eq!(g2.stats.prompt_tokens_reused, shared);
        assert_eq!(
            g2.stats.prompt_tokens_evaluated,
            g2.stats.prompt_tokens - shared
        );
        drop(a);
        drop(b);
        // A third, after both closed: the closed conversations' caches
        // stay until their sequences are used again.
        let mut c = s.conversation(1, 24)?;
        let g3 = c.generate(&Request::new(&third, greedy(24)))?;
        // It is given the first conversation's sequence (the lowest free
        // one) and starts from its cache; the second's is copied only if
        // it shares MIN_SHARED_PREFIX tokens more.
        let own = shared_tokens(&engine, &first, &third)?;
        let other = shared_tokens(&engine, &second, &third)?;
        let min = patchwright::engine::scheduler::MIN_SHARED_PREFIX;
        let shared3 = if other >= own + min { other } else { own };
        assert!(shared3 >= min, "{shared3}");
        assert_eq!(g3.stats.prompt_tokens_reused, shared3);
        for (i, g) in [g1, g2, g3].iter().enumerate() {
            assert_eq!(texts(g), texts(&expected[i]), "conversation {i}");
        }
        Ok(())
    })??;
    Ok(())
}

/// An agent's name, a prompt of its kind and its grammar.
type AgentGrammar = (&'static str, Vec<Message>, String);

/// Every grammar the agents constrain a reply with, each with a prompt of
/// its kind: the Fixer's four edit formats over the same shown code, the
/// reproducer's test file, a ReAct turn over every command of the ACI, the
/// localizer's pick and the ranker's choice.
fn agent_grammars() -> Result<Vec<AgentGrammar>, Error> {
    use patchwright::aci::command::{self, Choices};
    use patchwright::engine::grammar::{DefinitionTarget, ShownFile, ShownRun};
    let shown = vec![ShownFile {
        path: "semver/parse.py".into(),
        runs: vec![ShownRun {
            first: 1,
            lines: CODE.lines().map(str::to_string).collect(),
        }],
    }];
    let target = DefinitionTarget {
        label: "semver/parse.py::parse_version".into(),
        indent: String::new(),
        lead: "def parse_version(".into(),
    };
    let files: Vec<String> = ["semver/parse.py", "tests/test_parse.py"]
        .map(String::from)
        .to_vec();
    let choices = Choices {
        files: files.clone(),
        python_files: files,
        dirs: [".", "semver", "tests"].map(String::from).to_vec(),
        symbols: vec!["semver/parse.py::parse_version".into()],
        locatable: vec!["semver/parse.py::parse_version".into()],
        locatable_files: vec!["semver/parse.py".into()],
    };
    let ask = |question: &str| {
        vec![
            Message::system("You are an expert Python developer who fixes bugs."),
            Message::user(format!(
                "semver/parse.py\n```python\n{CODE}```\n\n{question}"
            )),
        ]
    };
    let fix = ask(
        "The function rejects versions with a leading 'v'. Give one line of reasoning, then \
         the edit.",
    );
    let ranker = format!(
        "root ::= \"Reasoning: \" [^\\n]{{1,{}}} \"\\nBest: \" (\"1\" | \"2\")\n",
        grammar::MAX_THOUGHT_CHARS
    );
    Ok(vec![
        (
            "fixer search_replace",
            fix.clone(),
            grammar::search_replace_with_reasoning(&["semver/parse.py"])?,
        ),
        ("fixer anchored", fix.clone(), grammar::anchored(&shown)?),
        ("fixer lines", fix.clone(), grammar::lines(&shown)?),
        ("fixer definition", fix, grammar::definition(&[target])?),
        (
            "reproducer",
            ask("Write a pytest test that fails while the issue is there."),
            patchwright::agents::reproduce::grammar(),
        ),
        (
            "react turn",
            ask("Find where versions are parsed. Think in one line, then give one command."),
            grammar::turn(&command::actions(command::NAMES, &choices))?,
        ),
        (
            "localizer",
            ask("Which of these may need the edit? 1. parse_version 2. format_version"),
            grammar::choice(&patchwright::agents::localize::label_options(2, 2))?,
        ),
        (
            "ranker",
            ask("Which candidate fixes the issue, 1 or 2? Reason in one line."),
            ranker,
        ),
    ])
}

fn engine_with(grammar_first: bool) -> Result<Engine, Error> {
    Ok(Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 2048,
            threads: 2,
            grammar_first,
            ..EngineSettings::default()
        },
    )?)
}

#[test]
fn greedy_replies_are_the_same_with_the_grammar_checked_first() -> Result<(), Error> {
    let masked = engine_with(false)?;
    let first = engine_with(true)?;
    let mut refused = 0;
    for (name, messages, g) in agent_grammars()? {
        let request = greedy(&messages, Some(&g));
        let expected = Session::new(&masked, 1, 96)?.generate(&request)?;
        let got = Session::new(&first, 1, 96)?.generate(&request)?;
        assert_eq!(texts(&got), texts(&expected), "{name}");
        let (e, g) = (expected.stats.grammar, got.stats.grammar);
        // The reference masks every pick; grammar-first only those whose
        // likeliest tokens are all refused.
        assert_eq!(e.masked, e.checked, "{name}: {e:?}");
        assert!(g.checked > 0 && g.masked <= g.refused, "{name}: {g:?}");
        refused += g.refused;
    }
    // The refused path was taken (the model does not write the formats
    // by itself), and the greedy replies were still the same.
    assert!(refused > 0);
    Ok(())
}

/// Sampled replies under each agent grammar, over seeds, temperatures and
/// nuclei: every reply is admitted by its grammar (a whole match when the
/// model ended it), and the refused and masked paths are taken.
#[test]
fn sampled_replies_are_admitted_by_their_grammar_for_every_seed() -> Result<(), Error> {
    let engine = engine_with(true)?;
    let mut total = patchwright::engine::GrammarChecks::default();
    for (name, messages, g) in agent_grammars()? {
        let parsed = std::sync::Arc::new(Grammar::parse(&g)?);
        for seed in 0..2u32 {
            let request = Request {
                messages: &messages,
                sampling: Sampling {
                    temperature: 1.0,
                    top_p: if seed == 1 { 0.9 } else { 1.0 },
                    min_p: 0.0,
                    seed: seed * 100,
                    max_tokens: 64,
                },
                n: 2,
                temperatures: Some(vec![0.8, 1.6]),
                grammar: Some(&g),
            };
            let generation = Session::new(&engine, 2, 64)?.generate(&request)?;
            total.add(generation.stats.grammar);
            for c in &generation.candidates {
                let mut m = Matcher::new(parsed.clone());
                assert!(m.accept(&c.text), "{name}, seed {seed}: {:?}", c.text);
                if c.stop == patchwright::engine::Stop::EndOfText {
                    assert!(
                        m.can_end(),
                        "{name}, seed {seed}: ended early: {:?}",
                        c.text
                    );
                }
            }
        }
    }
    assert!(total.refused > 0 && total.masked > 0, "{total:?}");
    assert!(total.masked < total.refused, "{total:?}");
    Ok(())
}

/// Logits over the test model's vocabulary where "d" holds most of the
/// mass and "a", "b", "c" the rest at 1 : 1 : 2, every other token far
/// below: under `root ::= [abc]`, constrained sampling gives a, b, c at
/// 1/4, 1/4, 1/2, and so must grammar-first, which draws "d" first almost
/// every time and has it refused.
#[test]
fn grammar_first_samples_the_masked_distribution() -> Result<(), Error> {
    let engine = engine_with(true)?;
    let ids: Vec<i32> = ["a", "b", "c", "d"]
        .iter()
        .map(|p| engine.token_of(p).ok_or(format!("no token {p:?}")))
        .collect::<Result<_, _>>()?;
    let mut logits = vec![-20.0f32; engine.vocab_size()];
    for (id, l) in ids.iter().zip([0.0, 0.0, 2.0f32.ln(), 5.0]) {
        logits[*id as usize] = l;
    }
    let mut counts = [0usize; 4];
    let mut refused = 0;
    let draws = 2000;
    for seed in 0..draws {
        let sampling = Sampling {
            temperature: 1.0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            max_tokens: 1,
        };
        let mut sampler = engine.sampler(&sampling, Some("root ::= [abc]"))?;
        let t = sampler.sample(&logits, |t| engine.is_eog(t.0));
        let k = ids
            .iter()
            .position(|&id| id == t.0)
            .ok_or("a token outside a, b, c, d")?;
        counts[k] += 1;
        refused += sampler.count.refused;
        assert_eq!(sampler.count.checked, 1);
    }
    assert_eq!(counts[3], 0, "{counts:?}");
    assert!(refused > draws as usize * 9 / 10, "{refused}");
    for (k, want) in [0.25, 0.25, 0.5].iter().enumerate() {
        let share = counts[k] as f64 / f64::from(draws);
        assert!((share - want).abs() < 0.03, "{counts:?}");
    }
    Ok(())
}
