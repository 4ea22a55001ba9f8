//! Stage metrics, computed after a task's run from what the dataset knows
//! (the gold patch, its tests) and never shown to the agents: did the
//! localizer find the gold patch's files and functions, is the
//! reproduction test valid (fails on the base commit, passes with the gold
//! patch), how many candidates were generated, applied, parse and are
//! distinct, does any of them resolve the task, and did the ranker pick
//! one that does.

use std::collections::BTreeSet;
use std::path::Path;

use crate::record::grade::ErrorKind;
use crate::record::metrics::Metrics;

use super::masai::Outcome;
use crate::aci::{check, Location, SubmittedTest};
use crate::agents::judge::prepare_like;
use crate::dataset::Task;
use crate::edit::EditError;
use crate::env::task::{InstallError, TaskEnv};
use crate::env::EnvError;
use crate::eval::{self, pool::Pool};
use crate::index::symbols::{self, SymbolKind};
use crate::record::trajectory::{Step, TimedStep};
use crate::repo::touched_files;
use crate::repo::{RepoError, Workspace};
use patchwright_sandbox as sandbox;

/// Why a metric could not be computed (kept as a note in the metrics).
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    #[error(transparent)]
    Repo(#[from] RepoError),
    /// The reproduction test's path is not one inside the worktree.
    #[error(transparent)]
    Edit(#[from] EditError),
    #[error(transparent)]
    Install(#[from] InstallError),
    #[error(transparent)]
    RunTest(#[from] check::RunTestError),
}

/// Wall-clock limit of one test run while computing metrics.
pub const TEST_TIMEOUT_S: u64 = 300;

/// The old-side line numbers a patch changes, per file: removed lines, and
/// the line before each insertion.
pub fn changed_lines(patch: &str) -> Vec<(String, BTreeSet<usize>)> {
    let mut out: Vec<(String, BTreeSet<usize>)> = Vec::new();
    let mut old_line = 0usize;
    for line in patch.lines() {
        if let Some(rest) = line.strip_prefix("diff --git a/") {
            let path = rest.split(" b/").next().unwrap_or(rest).to_string();
            out.push((path, BTreeSet::new()));
        } else if let Some(rest) = line.strip_prefix("@@ -") {
            let start = rest
                .split([',', ' '])
                .next()
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(1);
            old_line = start;
        } else if let Some((_, lines)) = out.last_mut() {
            if line.starts_with("---") || line.starts_with("+++") || line.starts_with("index ") {
                continue;
            }
            match line.chars().next() {
                // Saturating: a hunk header may claim any start line.
                Some('-') => {
                    lines.insert(old_line);
                    old_line = old_line.saturating_add(1);
                }
                Some('+') => {
                    lines.insert(old_line.saturating_sub(1).max(1));
                }
                Some(' ') => old_line = old_line.saturating_add(1),
                _ => {}
            }
        }
    }
    out
}

/// The innermost functions (or, outside any, classes) of the base
/// version of each file that hold a changed line.
pub fn gold_functions(root: &Path, patch: &str) -> Vec<String> {
    let mut out = BTreeSet::new();
    for (path, lines) in changed_lines(patch) {
        let Ok(text) = crate::aci::read_text(root, &path) else {
            continue;
        };
        let file = symbols::parse_symbols(&path, &text);
        for line in lines {
            let holding = file
                .symbols
                .iter()
                .filter(|s| s.start_line <= line && line <= s.end_line);
            let innermost = holding
                .clone()
                .filter(|s| s.kind != SymbolKind::Class)
                .max_by_key(|s| s.start_line)
                .or_else(|| holding.max_by_key(|s| s.start_line));
            if let Some(s) = innermost {
                out.insert(format!("{path}::{}", s.qualname));
            }
        }
    }
    out.into_iter().collect()
}

/// `path::qualname` of every function, method or class of the base
/// version whose lines (from its `def` or `class` line to its end) all lie
/// in the `shown` runs of lines.
pub fn shown_functions(root: &Path, shown: &[Location]) -> Vec<String> {
    let mut out = BTreeSet::new();
    let mut paths: Vec<&str> = shown.iter().map(|l| l.path.as_str()).collect();
    paths.dedup();
    for path in paths {
        let Ok(text) = crate::aci::read_text(root, path) else {
            continue;
        };
        let runs: Vec<&Location> = shown.iter().filter(|l| l.path == path).collect();
        for s in symbols::parse_symbols(path, &text).symbols {
            if runs
                .iter()
                .any(|r| r.start_line <= s.def_line && s.end_line <= r.end_line)
            {
                out.insert(format!("{path}::{}", s.qualname));
            }
        }
    }
    out.into_iter().collect()
}

/// Whether `patch` changes a line of one of the `located` spans (old-side
/// line numbers; a pure insertion counts at the line it follows).
pub fn touches(patch: &str, located: &[Location]) -> bool {
    changed_lines(patch).iter().any(|(path, lines)| {
        located
            .iter()
            .any(|l| &l.path == path && lines.iter().any(|&n| l.start_line <= n && n <= l.end_line))
    })
}

fn share(gold: &[String], hit: impl Fn(&str) -> bool) -> Option<f64> {
    if gold.is_empty() {
        return None;
    }
    Some(gold.iter().filter(|g| hit(g)).count() as f64 / gold.len() as f64)
}

/// A scratch worktree of `ws` with `patches` applied.
fn patched(ws: &Workspace, dir: &Path, patches: &[&str]) -> Result<Workspace, MetricsError> {
    let w = ws.clone_to(dir)?;
    for p in patches {
        crate::repo::apply_patch(w.path(), p)?;
    }
    Ok(w)
}

/// Whether the reproduction test passes with the gold patch, run as the
/// Ranker runs it: in a worktree prepared like the task's.
fn reproduction_passes(
    ws: &Workspace,
    env: &TaskEnv,
    gold: &str,
    test: &SubmittedTest,
    dir: &Path,
) -> Result<bool, MetricsError> {
    let w = patched(ws, &dir.join("repo"), &[gold])?;
    let result = (|| {
        let env = prepare_like(env, w.path(), &dir.join("layer"))?;
        test.place(w.path())?;
        let (outcome, verdict) = check::run_test(w.path(), &env, &test.command, TEST_TIMEOUT_S)?;
        Ok(check::fixed(&env, test, &outcome, &verdict))
    })();
    let _ = w.remove();
    let _ = std::fs::remove_dir_all(dir);
    result
}

/// Observations of agent turns that show the repository or its
/// dependencies missing: `No module named 'x'` where `x`'s top-level name
/// is a package or module at the repository's top (its own package), or
/// names no module of the repository at all (a dependency, or a module
/// the agent imported without writing it: the count cannot tell those
/// apart). `root` is the workspace at the base commit.
pub fn env_import_errors(root: &Path, steps: &[TimedStep]) -> usize {
    static MISSING: std::sync::LazyLock<Option<regex::Regex>> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?:ModuleNotFoundError|ImportError): No module named '([A-Za-z0-9_.]+)'",
        )
        .ok()
    });
    let Some(re) = MISSING.as_ref() else {
        return 0;
    };
    let files = crate::index::python_files(root).unwrap_or_default();
    steps
        .iter()
        .filter_map(|s| match &s.step {
            Step::Action(a) => Some(a.observation.as_str()),
            _ => None,
        })
        .filter(|obs| {
            re.captures_iter(obs).any(|c| {
                let top = c[1].split('.').next().unwrap_or_default();
                is_package(root, top) || !names_a_module(&files, top)
            })
        })
        .count()
}

/// Whether some file of `files` is the module or package `name` (at any
/// depth: test helpers imported by their own directory).
fn names_a_module(files: &[String], name: &str) -> bool {
    files.iter().any(|f| {
        let f = format!("/{f}");
        f.ends_with(&format!("/{name}.py")) || f.contains(&format!("/{name}/"))
    })
}

/// Whether `name` is a package or module at the repository's top (or
/// under `src/`, `lib/`).
fn is_package(root: &Path, name: &str) -> bool {
    ["", "src/", "lib/"].iter().any(|prefix| {
        root.join(format!("{prefix}{name}/__init__.py")).exists()
            || root.join(format!("{prefix}{name}.py")).exists()
    })
}

/// The metrics of one task's outcome. `ws` must be at the base commit,
/// installed in `env` (the task's environment, if any); whether a
/// candidate resolves the task is decided by the real grader, in the
/// task's environment from `pool`, exactly as `eval` grades it.
pub fn compute(
    task: &Task,
    ws: &Workspace,
    env: &TaskEnv,
    pool: &Pool<'_>,
    outcome: &Outcome,
    steps: &[TimedStep],
    scratch: &Path,
) -> Metrics {
    let mut m = Metrics {
        gold_files: touched_files(&task.patch),
        gold_functions: gold_functions(ws.path(), &task.patch),
        env_import_errors: env_import_errors(ws.path(), steps),
        ..Metrics::default()
    };
    for step in steps {
        if let Step::ModelCall(call) = &step.step {
            m.model_s += call.model_s();
            m.generated_tokens += call.generated_tokens();
        }
    }
    let locs = &outcome.locations.locations;
    m.located_files = locs
        .iter()
        .map(|l| l.path.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    m.located_functions = locs
        .iter()
        .map(|l| format!("{}::{}", l.path, l.symbol))
        .collect();
    m.file_hit = share(&m.gold_files, |g| m.located_files.iter().any(|f| f == g));
    m.located_function_hit = share(&m.gold_functions, |g| {
        m.located_functions
            .iter()
            .any(|f| g == f || g.starts_with(&format!("{f}.")))
    });
    let shown = shown_functions(ws.path(), &outcome.fixes.shown);
    m.function_hit = if outcome.fixes.shown.is_empty() {
        m.located_function_hit
    } else {
        share(&m.gold_functions, |g| {
            shown.iter().any(|f| f == g)
                || m.located_functions
                    .iter()
                    .any(|f| g == f || g.starts_with(&format!("{f}.")))
        })
    };
    if let Some(test) = outcome.reproduction.as_ref().and_then(|r| r.test.as_ref()) {
        m.reproduction_fails_on_base = Some(true);
        match reproduction_passes(ws, env, &task.patch, test, &scratch.join("gold")) {
            Ok(p) => m.reproduction_passes_with_gold = Some(p),
            Err(e) => m
                .notes
                .push(format!("reproduction with the gold patch: {e}")),
        }
    } else if outcome.reproduction.is_some() {
        m.reproduction_fails_on_base = Some(false);
    }
    let f = &outcome.fixes;
    m.candidates_generated = f.generated();
    m.candidates_applied = f.applied();
    m.candidates_parsed = f.parsed();
    m.candidates_distinct = f.distinct.len();
    m.candidates_per_round = f.rounds.iter().map(|r| r.candidates).collect();
    m.passing_per_round = f.rounds.iter().map(|r| r.passing).collect();
    m.candidates_off_located = f
        .candidates
        .iter()
        .filter_map(|c| c.patch.as_deref())
        .filter(|p| !touches(p, locs))
        .count();
    let mut resolving = Vec::new();
    let mut checked = true;
    for (i, d) in f.distinct.iter().enumerate() {
        let out = scratch.join(format!("grade-{i}"));
        let report = eval::grade_with(pool, task, Some(&d.patch), &out);
        let _ = std::fs::remove_dir_all(&out);
        match report.error {
            None if report.resolved => resolving.push(i),
            None => {}
            // Applied in the worktree, not on a fresh checkout: it resolves
            // nothing, and says nothing about the others.
            Some(e) if e.kind == ErrorKind::PatchApplyFailed => m.notes.push(format!(
                "candidate {i}: did not apply when graded: {}",
                e.message
            )),
            Some(e) => {
                m.notes.push(format!(
                    "candidate {i}: not gradable ({:?}): {}",
                    e.kind, e.message
                ));
                checked = false;
                break;
            }
        }
    }
    if checked {
        m.any_resolves = Some(!resolving.is_empty());
        m.picked_resolves = Some(outcome.chosen.is_some_and(|c| resolving.contains(&c)));
        m.resolving = Some(resolving);
    }
    m
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_lines_are_old_side_line_numbers() {
        let patch = "diff --git a/p.py b/p.py\nindex 1..2 100644\n--- a/p.py\n+++ b/p.py\n@@ -5,7 +5,7 @@ x\n a\n b\n-c\n+C\n d\n@@ -20,2 +20,3 @@\n e\n+f\n g\n";
        let got = changed_lines(patch);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "p.py");
        assert_eq!(got[0].1.iter().copied().collect::<Vec<_>>(), [7, 20]);
    }
}
