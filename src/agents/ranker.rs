//! MASAI's Ranker: every distinct candidate is tried in its own worktree,
//! in parallel sandboxes — the reproduction test, and the regression tests
//! (tests of the touched modules that pass on the base commit) — and the
//! candidates are ordered: passes the reproduction test, then fewest
//! regressions, then most candidates agreeing, then the model's
//! chain-of-thought comparison of those still tied. It never sees
//! FAIL_TO_PASS, PASS_TO_PASS or the gold patch.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::fixer::Fixes;
use crate::aci::{check, SubmittedTest};
use crate::dataset::Issue;
use crate::edit::EditError;
use crate::engine::{grammar, Conversation, EngineError, Message, Request, Sampling};
use crate::env::log::{self as testlog, TestStatus};
use crate::env::task::TaskEnv;
use crate::env::{self, spec::LogFormat};
use crate::index::imports;
use crate::record::trajectory::{ModelCall, Step};
use crate::repo::{RepoError, Workspace};
use crate::trajectory::Trajectory;
use patchwright_sandbox as sandbox;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankerSettings {
    /// Ask the model to choose among candidates still tied.
    pub compare: bool,
    /// Wall-clock limit of one test command, in seconds.
    pub test_timeout_s: u64,
}

impl Default for RankerSettings {
    fn default() -> Self {
        RankerSettings {
            compare: true,
            test_timeout_s: 300,
        }
    }
}

/// How one distinct candidate fared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Index into `Fixes::distinct`.
    pub distinct: usize,
    /// Candidates that produced this patch.
    pub votes: usize,
    /// Whether the reproduction test passes with it (None: no test).
    pub reproduction: Option<bool>,
    /// Regression tests that pass on the base commit and not with it.
    pub regressions: Vec<String>,
    /// Why it could not be tried, if it could not (a [`RankError`]'s
    /// message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The model's choice among tied candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The tied candidates (indexes into `Fixes::distinct`), as numbered
    /// for the model (1-based).
    pub tied: Vec<usize>,
    pub chosen: usize,
    pub reasoning: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    /// Indexes into `Fixes::distinct`, best first.
    pub order: Vec<usize>,
    pub evaluations: Vec<Evaluation>,
    /// Regression test files run.
    pub regression_files: Vec<String>,
    /// Tests among them passing on the base commit.
    pub base_passing: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
}

#[derive(Debug, thiserror::Error)]
pub enum RankError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Env(#[from] env::EnvError),
    /// A candidate's worktree could not be installed into its layer.
    #[error(transparent)]
    Install(#[from] env::task::InstallError),
    #[error(transparent)]
    RunTest(#[from] check::RunTestError),
    #[error(transparent)]
    Grammar(#[from] grammar::GrammarError),
    /// A test run could not be started.
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    /// The reproduction test's path is not one inside the worktree.
    #[error(transparent)]
    Edit(#[from] EditError),
}

/// The paths a patch changes.
pub fn touched_files(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = patch
        .lines()
        .filter_map(|l| l.strip_prefix("diff --git a/"))
        .filter_map(|l| l.split(" b/").next())
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The regression test files of a change to `touched`: the test files
/// whose imports reach a touched module (closest first, at most
/// [`imports::REGRESSION_FILES`]); when imports reach none (a plugin
/// loaded by name, say), those whose name holds a touched module's name.
/// Only their tests that pass on the base commit count.
pub fn regression_tests(root: &Path, all_files: &[String], touched: &[String]) -> Vec<String> {
    let by_imports = imports::importing_tests(root, all_files, touched, imports::REGRESSION_FILES);
    if !by_imports.is_empty() {
        return by_imports;
    }
    let mut by_name = regression_files(all_files, touched);
    by_name.truncate(imports::REGRESSION_FILES);
    by_name
}

/// Test files of the modules `sources` names: test files whose name holds
/// a touched module's name (`cachekit/lru.py` → `tests/test_lru.py`).
pub fn regression_files(all_files: &[String], sources: &[String]) -> Vec<String> {
    let stems: BTreeSet<&str> = sources
        .iter()
        .filter(|s| s.ends_with(".py") && !crate::index::is_test_file(s))
        .filter_map(|s| s.rsplit('/').next())
        .map(|n| n.trim_end_matches(".py"))
        .filter(|n| *n != "__init__")
        .collect();
    all_files
        .iter()
        .filter(|f| f.ends_with(".py") && crate::index::is_test_file(f))
        .filter(|f| {
            let name = f.rsplit('/').next().unwrap_or(f).trim_end_matches(".py");
            name != "conftest" && stems.iter().any(|s| name.contains(s))
        })
        .cloned()
        .collect()
}

/// The test ids pytest's `-rA` summary reports as PASSED.
pub fn passed_tests(output: &str) -> BTreeSet<String> {
    passing(LogFormat::Pytest, output)
}

/// The tests a run's log, read as `format`, reports passing.
fn passing(format: LogFormat, output: &str) -> BTreeSet<String> {
    testlog::parse(format, output)
        .into_iter()
        .filter(|(_, s)| TestStatus::is_pass(*s))
        .map(|(t, _)| t)
        .collect()
}

/// Runs `script` (bash) in the worktree `dir`, in `env` when given.
fn run_in(
    dir: &Path,
    env: Option<&TaskEnv>,
    timeout_s: u64,
    script: &str,
) -> Result<sandbox::Outcome, RankError> {
    let mut policy = match env {
        Some(e) => e.policy(dir)?,
        None => env::policy(dir, None)?,
    };
    policy.limits.timeout_ms = timeout_s.saturating_mul(1000);
    let argv = ["bash".to_string(), "-c".to_string(), script.to_string()];
    Ok(sandbox::run(&policy, &argv)?)
}

/// The tests of `files` the repository's way (pytest without an
/// environment from a spec), and the format of their log.
fn test_run(env: Option<&TaskEnv>, files: &[String]) -> (String, LogFormat) {
    match env {
        Some(e) => (e.test_script(files), e.log_format()),
        None => {
            let args: Vec<String> = files.iter().map(|f| env::build::quote(f)).collect();
            (
                format!("{} {}", env::task::DEFAULT_TEST_COMMAND, args.join(" ")),
                LogFormat::Pytest,
            )
        }
    }
}

/// A candidate's worktree prepared like the task's: the repository (with
/// the candidate's patch) installed into its own layer when the task's
/// environment comes from a spec.
pub fn prepare_like(
    env: Option<&TaskEnv>,
    worktree: &Path,
    layer: &Path,
) -> Result<Option<TaskEnv>, env::task::InstallError> {
    match env {
        Some(e) if e.spec().is_some() => Ok(Some(e.setup.install(worktree, layer)?.task)),
        Some(e) => Ok(Some(e.clone())),
        None => Ok(None),
    }
}

/// Tries every distinct candidate and orders them. `environment` is the
/// task's (the workspace `ws` installed in it); each candidate's worktree
/// is prepared the same way.
#[allow(clippy::too_many_arguments)]
pub fn rank(
    conversation: &mut dyn Conversation,
    ws: &Workspace,
    issue: &Issue,
    fixes: &Fixes,
    reproduction: Option<&SubmittedTest>,
    environment: Option<&TaskEnv>,
    settings: &RankerSettings,
    sampling: &Sampling,
    scratch: &Path,
    trajectory: &mut Trajectory,
) -> Result<Ranking, RankError> {
    let touched: Vec<String> = fixes
        .distinct
        .iter()
        .flat_map(|d| touched_files(&d.patch))
        .collect();
    let all = crate::index::python_files(ws.path()).unwrap_or_default();
    let regression = regression_tests(ws.path(), &all, &touched);
    let (regression_script, format) = test_run(environment, &regression);
    let base_passing = if regression.is_empty() {
        BTreeSet::new()
    } else {
        run_in(
            ws.path(),
            environment,
            settings.test_timeout_s,
            &regression_script,
        )
        .map(|o| passing(format, &o.output))
        .unwrap_or_default()
    };

    let evaluations: Vec<Evaluation> = std::thread::scope(|s| {
        let handles: Vec<_> = fixes
            .distinct
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let (regression, base_passing) = (&regression, &base_passing);
                let regression_script = &regression_script;
                s.spawn(move || {
                    let mut e = Evaluation {
                        distinct: i,
                        votes: d.members.len(),
                        reproduction: None,
                        regressions: Vec::new(),
                        error: None,
                    };
                    let tried = (|| -> Result<(), RankError> {
                        let dir = scratch.join(format!("candidate-{i}"));
                        let cand = ws.clone_to(&dir)?;
                        crate::repo::apply_patch(cand.path(), &d.patch)?;
                        let layer = scratch.join(format!("candidate-{i}-layer"));
                        let env = prepare_like(environment, cand.path(), &layer)?;
                        if let Some(test) = reproduction {
                            test.place(cand.path())?;
                            let (_, verdict) = check::run_test(
                                cand.path(),
                                env.as_ref(),
                                &test.command,
                                settings.test_timeout_s,
                            )?;
                            e.reproduction = Some(verdict == check::Verdict::Passed);
                        }
                        if !regression.is_empty() {
                            let o = run_in(
                                cand.path(),
                                env.as_ref(),
                                settings.test_timeout_s,
                                regression_script,
                            )?;
                            let passed = passing(format, &o.output);
                            e.regressions = base_passing.difference(&passed).cloned().collect();
                        }
                        // The worktree is scratch: a failure to delete it is harmless.
                        let _ = cand.remove();
                        let _ = std::fs::remove_dir_all(&layer);
                        Ok(())
                    })();
                    e.error = tried.err().map(|e| e.to_string());
                    e
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                h.join().unwrap_or_else(|_| Evaluation {
                    distinct: i,
                    votes: 0,
                    reproduction: None,
                    regressions: Vec::new(),
                    error: Some("the worker panicked".into()),
                })
            })
            .collect()
    });

    let key = |e: &Evaluation| {
        (
            e.error.is_some(),
            e.reproduction != Some(true),
            e.regressions.len(),
            std::cmp::Reverse(e.votes),
        )
    };
    let mut order: Vec<usize> = (0..evaluations.len()).collect();
    order.sort_by_key(|&i| (key(&evaluations[i]), i));
    let mut comparison = None;
    if let Some(&best) = order.first() {
        let tied: Vec<usize> = order
            .iter()
            .copied()
            .take_while(|&i| key(&evaluations[i]) == key(&evaluations[best]))
            .collect();
        if settings.compare && tied.len() > 1 {
            let c = compare(conversation, issue, fixes, &tied, sampling, trajectory)?;
            order.retain(|&i| i != c.chosen);
            order.insert(0, c.chosen);
            comparison = Some(c);
        }
    }
    Ok(Ranking {
        order,
        evaluations,
        regression_files: regression,
        base_passing: base_passing.len(),
        comparison,
    })
}

/// Most tokens of the comparison's reasoning and choice.
const COMPARE_TOKENS: u32 = 192;

fn compare(
    conversation: &mut dyn Conversation,
    issue: &Issue,
    fixes: &Fixes,
    tied: &[usize],
    sampling: &Sampling,
    trajectory: &mut Trajectory,
) -> Result<Comparison, RankError> {
    let listed: Vec<String> = tied
        .iter()
        .enumerate()
        .map(|(n, &i)| {
            format!(
                "Candidate {}:\n```diff\n{}```",
                n + 1,
                fixes.distinct[i].patch
            )
        })
        .collect();
    let msgs = vec![
        Message::system("You are an expert Python developer who reviews patches."),
        Message::user(format!(
            "ISSUE:\n{}\n\n{}\n\nWhich candidate fixes the issue best? Start with `Reasoning:` \
             and one line comparing them, then `Best:` and the candidate's number.",
            issue.problem_statement.trim(),
            listed.join("\n\n")
        )),
    ];
    let numbers: Vec<String> = (1..=tied.len()).map(|n| n.to_string()).collect();
    let g = format!(
        "root ::= \"Reasoning: \" [^\\n]{{1,{}}} \"\\nBest: \" ({})\n",
        grammar::MAX_THOUGHT_CHARS,
        numbers
            .iter()
            .map(|n| grammar::literal(n))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let sampling = Sampling {
        max_tokens: COMPARE_TOKENS,
        temperature: 0.0,
        ..sampling.clone()
    };
    let request = Request {
        grammar: Some(&g),
        ..Request::new(&msgs, sampling.clone())
    };
    let generation = conversation.generate(&request)?;
    let prompt = conversation.render(&msgs);
    let text = generation
        .candidates
        .first()
        .map(|c| c.text.clone())
        .unwrap_or_default();
    trajectory.record(Step::ModelCall(Box::new(ModelCall::from_generation(
        "ranker",
        msgs,
        prompt,
        sampling,
        &generation,
    ))));
    let number = text
        .rsplit_once("Best: ")
        .and_then(|(_, n)| n.trim().parse::<usize>().ok())
        .filter(|n| (1..=tied.len()).contains(n))
        .unwrap_or(1);
    let reasoning = text
        .strip_prefix("Reasoning: ")
        .and_then(|t| t.split_once("\nBest:"))
        .map(|(r, _)| r.trim().to_string())
        .unwrap_or_default();
    Ok(Comparison {
        tied: tied.to_vec(),
        chosen: tied[number - 1],
        reasoning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regression_files_follow_the_touched_modules() {
        let all: Vec<String> = [
            "cachekit/lru.py",
            "cachekit/__init__.py",
            "tests/test_lru.py",
            "tests/test_ttl.py",
            "tests/conftest.py",
            "tests/test_lru_extra.py",
        ]
        .map(String::from)
        .to_vec();
        let touched = [
            "cachekit/lru.py".to_string(),
            "cachekit/__init__.py".to_string(),
        ];
        assert_eq!(
            regression_files(&all, &touched),
            ["tests/test_lru.py", "tests/test_lru_extra.py"]
        );
        assert_eq!(
            touched_files("diff --git a/x/y.py b/x/y.py\nindex 1..2\ndiff --git a/a.py b/a.py\n"),
            ["a.py", "x/y.py"]
        );
        let out = "PASSED tests/test_a.py::test_x\nFAILED tests/test_a.py::test_y - assert 1 == 2\nPASSED tests/test_a.py::test_z\n";
        assert_eq!(
            passed_tests(out).into_iter().collect::<Vec<_>>(),
            ["tests/test_a.py::test_x", "tests/test_a.py::test_z"]
        );
    }
}
