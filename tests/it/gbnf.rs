//! The GBNF matcher against llama.cpp's grammar sampler: replies sampled
//! by SmolLM2-135M under each grammar `engine::grammar` builds are
//! admitted whole by `engine::gbnf::Matcher`, and a reply that ended with
//! the end-of-generation token is a complete match.

use std::sync::Arc;

use crate::common;

use patchwright::aci::command::{self, Choices};
use patchwright::engine::gbnf::{Grammar, Matcher};
use patchwright::engine::grammar::{self, DefinitionTarget, ShownFile, ShownRun};
use patchwright::engine::{Engine, EngineSettings, Message, Request, Sampling, Session, Stop};

/// Candidates per grammar, sampled in one call.
const CANDIDATES: usize = 12;
/// Tokens per reply: enough to get past the fixed openings into the
/// free parts of each format.
const MAX_TOKENS: u32 = 24;

fn shown() -> Vec<ShownFile> {
    let lines = |f: usize| -> Vec<String> {
        vec![
            format!("def area_{f}(w, h):"),
            "    \"\"\"Area of a rectangle.\"\"\"".into(),
            "    if w < 0 or h < 0:".into(),
            "        raise ValueError(\"negative\")".into(),
            "    return w * h".into(),
            String::new(),
        ]
    };
    (0..2)
        .map(|f| ShownFile {
            path: format!("pkg/geo_{f}.py"),
            runs: vec![ShownRun {
                first: 10,
                lines: lines(f),
            }],
        })
        .collect()
}

fn grammars() -> Vec<(&'static str, String)> {
    let files: Vec<String> = (0..4)
        .flat_map(|d| (0..10).map(move |f| format!("pkg/sub{d}/mod{f}.py")))
        .collect();
    let choices = Choices {
        python_files: files.clone(),
        dirs: (0..4).map(|d| format!("pkg/sub{d}")).collect(),
        symbols: Vec::new(),
        locatable: Vec::new(),
        locatable_files: files.clone(),
        files: files.clone(),
    };
    let actions = command::actions(command::NAMES, &choices);
    let targets = [
        DefinitionTarget {
            label: "pkg/geo_0.py::area_0".into(),
            indent: String::new(),
            lead: "def area_0(".into(),
        },
        DefinitionTarget {
            label: "pkg/geo_1.py::Shape.area".into(),
            indent: "    ".into(),
            lead: "    def area(".into(),
        },
    ];
    let built = [
        ("choice", grammar::choice(&files)),
        (
            "search_replace",
            grammar::search_replace(&["pkg/geo_0.py", "pkg/geo_1.py"]),
        ),
        (
            "search_replace_with_reasoning",
            grammar::search_replace_with_reasoning(&["pkg/geo_0.py"]),
        ),
        ("anchored", grammar::anchored(&shown())),
        ("lines", grammar::lines(&shown())),
        ("definition", grammar::definition(&targets)),
        ("actions", grammar::actions(&actions)),
        ("turn", grammar::turn(&actions)),
    ];
    built
        .into_iter()
        .map(|(name, g)| (name, g.unwrap_or_else(|e| panic!("{name}: {e}"))))
        .collect()
}

#[test]
fn replies_sampled_by_llama_cpp_are_admitted() {
    let engine = Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 2048,
            threads: 2,
            ..EngineSettings::default()
        },
    )
    .expect("test model loads");
    let messages = [
        Message::system("You fix bugs in Python code."),
        Message::user(
            "pkg/geo_0.py, lines 10-15:\n```\ndef area_0(w, h):\n    \"\"\"Area of a rectangle.\"\"\"\n    if w < 0 or h < 0:\n        raise ValueError(\"negative\")\n    return w * h\n\n```\nThe area must allow a zero width. Explain briefly, then write the edit.",
        ),
    ];
    let mut session = Session::new(&engine, CANDIDATES, MAX_TOKENS as usize).unwrap();
    let mut ended = 0;
    for (name, g) in grammars() {
        let grammar = Arc::new(Grammar::parse(&g).unwrap_or_else(|e| panic!("{name}: {e}")));
        for seed in [11] {
            let request = Request {
                n: CANDIDATES,
                grammar: Some(&g),
                ..Request::new(
                    &messages,
                    Sampling {
                        temperature: 0.8,
                        top_p: 0.95,
                        min_p: 0.0,
                        seed,
                        max_tokens: MAX_TOKENS,
                    },
                )
            };
            let generation = session.generate(&request).unwrap();
            assert_eq!(generation.candidates.len(), CANDIDATES);
            for c in generation.candidates {
                let mut m = Matcher::new(grammar.clone());
                assert!(
                    m.accept(&c.text),
                    "{name}, seed {seed}: llama.cpp sampled {:?}, which the matcher refuses",
                    c.text
                );
                if c.stop == Stop::EndOfText {
                    ended += 1;
                    assert!(
                        m.can_end(),
                        "{name}, seed {seed}: llama.cpp ended {:?}, which the matcher cannot end",
                        c.text
                    );
                }
            }
        }
    }
    // The choices end within the token limit: the end check is exercised.
    assert!(ended >= CANDIDATES, "only {ended} replies ended");
}
