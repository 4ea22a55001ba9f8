//! The bodies of the fuzz targets (`fuzz/fuzz_targets/<name>.rs`, run by
//! `scripts/fuzz`): one `pub fn <target>(data: &[u8])` per parser of
//! untrusted text. Each feeds the bytes to the parser and checks cheap
//! invariants on what it returns; a violated invariant panics, which is
//! what the fuzzer reports. The regression test (`tests/it/fuzz_regressions.rs`)
//! replays every saved crash input and seed through the same functions.
//!
//! Not part of the program's interface: it exists for the fuzzer and the
//! test, and may panic (that is how a target reports a bug).

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use crate::env::spec::LogFormat;

/// A target's body: one input, no result (a panic is a finding).
pub type Target = fn(&[u8]);

/// The targets, by name: what `fuzz/fuzz_targets/` and
/// `fuzz/regressions/<name>/` are named after.
pub const TARGETS: &[(&str, Target)] = &[
    ("dataset", dataset),
    ("predictions", predictions),
    ("search_replace", search_replace),
    ("unified_diff", unified_diff),
    ("test_log", test_log),
    ("gguf", gguf),
    ("config", config),
    ("aci_command", aci_command),
    ("gbnf", gbnf),
];

/// Splits `data` at its first NUL byte into two texts (the second empty
/// when there is none), invalid UTF-8 replaced.
fn two_texts(data: &[u8]) -> (String, String) {
    let (a, b) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    (
        String::from_utf8_lossy(a).into_owned(),
        String::from_utf8_lossy(b).into_owned(),
    )
}

/// The first byte as a selector among `n` choices, and the rest.
fn pick(data: &[u8], n: u8) -> (u8, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (first % n, rest),
        None => (0, data),
    }
}

/// SWE-bench task files. The first byte picks the form: a `.jsonl` file,
/// a `.json` list, a `.parquet` file (through a temporary file), or the
/// rest as the JSON-encoded string of a task's `FAIL_TO_PASS`. Tasks that
/// load must load again, equal, from their own serialisation.
pub fn dataset(data: &[u8]) {
    let (form, rest) = pick(data, 4);
    let text = String::from_utf8_lossy(rest);
    let loaded = match form {
        0 => crate::dataset::parse(Path::new("fuzz.jsonl"), &text),
        1 => crate::dataset::parse(Path::new("fuzz.json"), &text),
        2 => {
            let Ok(dir) = tempfile::tempdir() else { return };
            let path = dir.path().join("fuzz.parquet");
            if std::fs::write(&path, rest).is_err() {
                return;
            }
            crate::dataset::load(&path)
        }
        _ => {
            let task = serde_json::json!({
                "instance_id": "a__b-1",
                "repo": "a/b",
                "base_commit": "c0ffee1",
                "problem_statement": "It breaks.",
                "FAIL_TO_PASS": text,
                "PASS_TO_PASS": text,
            });
            crate::dataset::parse(Path::new("fuzz.jsonl"), &task.to_string())
        }
    };
    let Ok(tasks) = loaded else { return };
    let lines: String = tasks
        .iter()
        .map(|t| {
            serde_json::to_string(t)
                .unwrap_or_else(|e| panic!("a loaded task does not serialise to JSON: {e}"))
                + "\n"
        })
        .collect();
    let again = crate::dataset::parse(Path::new("again.jsonl"), &lines)
        .unwrap_or_else(|e| panic!("loaded tasks do not load from their own JSON: {e}"));
    assert_eq!(again, tasks, "tasks changed through their own JSON");
}

/// Predictions files. Predictions that load must load again, equal, from
/// the JSON lines and the JSON list that hold them.
pub fn predictions(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(patches) = crate::record::result::parse_predictions(Path::new("fuzz.jsonl"), &text)
    else {
        return;
    };
    let predictions: Vec<crate::record::result::Prediction> = patches
        .iter()
        .map(|(id, patch)| crate::record::result::Prediction {
            instance_id: id.clone(),
            model_name_or_path: "m".into(),
            model_patch: patch.clone(),
        })
        .collect();
    let lines: String = predictions
        .iter()
        .map(|p| {
            serde_json::to_string(p)
                .unwrap_or_else(|e| panic!("a loaded prediction does not serialise to JSON: {e}"))
                + "\n"
        })
        .collect();
    let list = serde_json::to_string(&predictions)
        .unwrap_or_else(|e| panic!("loaded predictions do not serialise to a JSON list: {e}"));
    for text in [lines, list] {
        let again = crate::record::result::parse_predictions(Path::new("again.jsonl"), &text)
            .unwrap_or_else(|e| panic!("predictions do not load from their own JSON: {e}"));
        assert_eq!(again, patches, "predictions changed through their own JSON");
    }
}

/// The Fixer's edit formats applied to a file's text. The input is the
/// file's text, a NUL byte, and the model's reply. SEARCH/REPLACE blocks
/// go through [`crate::edit::replace`] (an exact match changes exactly
/// the SEARCH text); `lines` edits and definitions are applied to the file
/// in a temporary directory. Block paths that resolve stay inside the root.
pub fn search_replace(data: &[u8]) {
    use crate::edit;
    let (file, reply) = two_texts(data);
    let parsed = edit::parse(&reply);
    let starts = reply
        .lines()
        .filter(|l| edit::is_marker_line(l) && l.contains("SEARCH"))
        .count();
    assert!(
        parsed.blocks.len() + parsed.unterminated <= starts,
        "{} blocks and {} unterminated from {starts} SEARCH lines",
        parsed.blocks.len(),
        parsed.unterminated
    );
    let root = Path::new("/nonexistent-fuzz-root");
    for block in &parsed.blocks {
        if let Ok(full) = edit::resolve(root, &block.path) {
            let inside = full
                .strip_prefix(root)
                .unwrap_or_else(|_| panic!("{:?} resolves outside the root: {full:?}", block.path));
            assert!(
                inside
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_))),
                "{:?} resolves to {full:?}",
                block.path
            );
        }
        if let Ok((new, matched)) = edit::replace(&file, &block.search, &block.replace, "f.py") {
            if matched == edit::Matched::Exact {
                assert_eq!(
                    new.len() + block.search.len(),
                    file.len() + block.replace.len(),
                    "an exact replacement changed more than its SEARCH text"
                );
                assert!(new.contains(&block.replace));
            }
        }
    }
    let (lines_edits, _) = edit::parse_lines_edits(&reply);
    let definitions = edit::parse_definitions(&reply);
    let _ = edit::parse_definition_edit(&reply);
    if lines_edits.is_empty() && definitions.is_empty() {
        return;
    }
    let Ok(dir) = tempfile::tempdir() else { return };
    let shown = vec!["f.py".to_string()];
    let line_edits: Vec<edit::LineEdit> = lines_edits
        .into_iter()
        .map(|e| edit::LineEdit {
            path: "f.py".into(),
            start: e.start,
            end: e.end,
            text: e.text,
        })
        .collect();
    if std::fs::write(dir.path().join("f.py"), &file).is_err() {
        return;
    }
    let _ = edit::apply_line_edits(dir.path(), &line_edits);
    for def in &definitions {
        let _ = edit::apply_definition(dir.path(), def, &shown);
    }
}

/// Unified diffs, as the grader, the Ranker, the metrics and the pipeline
/// check read them: the files they touch, the lines they change, their
/// hunks as SEARCH/REPLACE blocks.
pub fn unified_diff(data: &[u8]) {
    let patch = String::from_utf8_lossy(data);
    let changed = crate::pipeline::metrics::changed_lines(&patch);
    let touched = crate::repo::touched_files(&patch);
    let files = crate::eval::patch_files(&patch);
    let _ = crate::eval::needs_reinstall("pip install -e .", &patch);
    let _ = crate::pipeline::check::search_replace(&patch, None);
    let _ = crate::pipeline::check::search_replace(&patch, Some("# wrong"));
    let headers = patch
        .lines()
        .filter(|l| l.starts_with("diff --git a/"))
        .count();
    assert_eq!(changed.len(), headers, "one entry per file header");
    assert!(touched.len() <= headers && files.len() <= headers);
    for (path, _) in &changed {
        assert!(
            touched.contains(path),
            "changed_lines names {path:?}, touched_files does not"
        );
    }
}

/// Test logs, in every [`LogFormat`] (the first byte picks it). For the
/// formats read line by line, a log repeated twice reads as the log once
/// (the worst status wins, and pseudo-ids keep their last line).
pub fn test_log(data: &[u8]) {
    const FORMATS: [LogFormat; 7] = [
        LogFormat::Pytest,
        LogFormat::PytestOptions,
        LogFormat::PytestV2,
        LogFormat::Matplotlib,
        LogFormat::Seaborn,
        LogFormat::Django,
        LogFormat::Sympy,
    ];
    let (which, rest) = pick(data, FORMATS.len() as u8);
    let format = FORMATS[usize::from(which)];
    let log = String::from_utf8_lossy(rest);
    let once = crate::env::log::parse(format, &log);
    let line_based = !matches!(format, LogFormat::Django | LogFormat::Sympy);
    if line_based {
        let twice = crate::env::log::parse(format, &format!("{log}\n{log}"));
        assert_eq!(twice, once, "a repeated log reads differently");
    }
}

/// GGUF headers, read from memory; a header that reads gives its derived
/// values without panicking.
pub fn gguf(data: &[u8]) {
    let Ok(header) = crate::models::gguf::parse_header(data, "fuzz.gguf") else {
        return;
    };
    let _ = header.architecture();
    let _ = header.context_length();
    let _ = header.kv_shape();
}

/// Configuration files (first byte even) and environment spec files (odd).
/// Settings that load must load again, equal, from their own TOML; a spec
/// that loads gives every version it lists.
pub fn config(data: &[u8]) {
    let (which, rest) = pick(data, 2);
    let text = String::from_utf8_lossy(rest);
    if which == 0 {
        let base = crate::config::Settings::defaults("m");
        let Ok(settings) = crate::config::Settings::with_toml(&base, &text) else {
            return;
        };
        let table = toml::Table::try_from(&settings)
            .unwrap_or_else(|e| panic!("loaded settings do not serialise: {e}"));
        let text = table.to_string();
        let again = crate::config::Settings::with_toml(&base, &text)
            .unwrap_or_else(|e| panic!("settings do not load from their own TOML: {e}"));
        // Compared as TOML text: a float may be NaN, unequal to itself.
        let again = toml::Table::try_from(&again).map(|t| t.to_string());
        assert_eq!(
            again.ok(),
            Some(text),
            "settings changed through their own TOML"
        );
    } else {
        let Ok(specs) = crate::env::spec::Specs::from_texts([(
            Path::new("fuzz.toml").to_path_buf(),
            text.into_owned(),
        )]) else {
            return;
        };
        for repo in specs.repos() {
            for version in specs.versions(repo) {
                specs
                    .get(repo, &version)
                    .unwrap_or_else(|e| panic!("{repo} lists {version} but has no spec: {e}"));
            }
        }
    }
}

/// The agent-computer interface's command parser and the ReAct turn
/// splitter over a model's reply.
pub fn aci_command(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = crate::aci::command::Command::parse(&text);
    if let Some(turn) = crate::aci::command::split_turn(&text) {
        let _ = crate::aci::command::Command::parse(&turn.command);
    }
}

/// GBNF grammars and matching text against them: the grammar's source, a
/// NUL byte, and the text. The matcher must agree with itself: a text it
/// accepts leaves it able to end or continue, and its forced text is
/// accepted.
pub fn gbnf(data: &[u8]) {
    let (source, text) = two_texts(data);
    let Ok(grammar) = crate::engine::gbnf::Grammar::parse(&source) else {
        return;
    };
    let mut matcher = crate::engine::gbnf::Matcher::new(Arc::new(grammar));
    for c in text.chars().take(256) {
        if !matcher.allows(c) {
            break;
        }
        let accepted = matcher.accept(&c.to_string());
        assert!(accepted || matcher.exhausted(), "allowed {c:?}, refused it");
        if !accepted {
            return;
        }
    }
    let forced = matcher.forced(64);
    if !forced.is_empty() {
        assert!(
            matcher.accept(&forced) || matcher.exhausted(),
            "refused its own forced text"
        );
    }
}
