//! Judging by execution, shared by the stages that run tests: a
//! worktree prepared like the task's ([`prepare_like`]), the regression
//! tests of a change and their verdict on the base commit
//! ([`Regression`]), and a patch tried against the reproduction test and
//! the regression tests ([`Trial`]). The Reproducer, the Fixer's rounds
//! and the Ranker all use it; it uses none of them.

use std::collections::BTreeSet;
use std::path::Path;

use crate::aci::{check, SubmittedTest};
use crate::edit::EditError;
use crate::env::log::{self as testlog, TestStatus};
use crate::env::task::TaskEnv;
use crate::env::{self, spec::LogFormat};
use crate::index::imports;
use crate::repo::{RepoError, Workspace};
use patchwright_sandbox as sandbox;

/// Why a patch or a test could not be tried.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Env(#[from] env::EnvError),
    /// A candidate's worktree could not be installed into its layer.
    #[error(transparent)]
    Install(#[from] env::task::InstallError),
    #[error(transparent)]
    RunTest(#[from] check::RunTestError),
    /// A test run could not be started.
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    /// The reproduction test's path is not one inside the worktree.
    #[error(transparent)]
    Edit(#[from] EditError),
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

/// The tests a run's log, read as `format`, reports passing.
pub(crate) fn passing(format: LogFormat, output: &str) -> BTreeSet<String> {
    testlog::parse(format, output)
        .into_iter()
        .filter(|(_, s)| TestStatus::is_pass(*s))
        .map(|(t, _)| t)
        .collect()
}

/// Runs `script` (bash) in the worktree `dir`, in `env` when given.
pub(crate) fn run_in(
    dir: &Path,
    env: &TaskEnv,
    timeout_s: u64,
    script: &str,
) -> Result<sandbox::Outcome, JudgeError> {
    let mut policy = env.policy(dir)?;
    policy.limits.timeout_ms = timeout_s.saturating_mul(1000);
    let argv = ["bash".to_string(), "-c".to_string(), script.to_string()];
    Ok(sandbox::run(&policy, &argv)?)
}

/// The tests of `files` the repository's way (pytest without an
/// environment from a spec), and the format of their log.
fn test_run(env: &TaskEnv, files: &[String]) -> (String, LogFormat) {
    (env.test_script(files), env.log_format())
}

/// A candidate's worktree prepared like the task's: the repository (with
/// the candidate's patch) installed into its own layer when the task's
/// environment comes from a spec.
pub fn prepare_like(
    env: &TaskEnv,
    worktree: &Path,
    layer: &Path,
) -> Result<TaskEnv, env::task::InstallError> {
    match &env.setup {
        Some(setup) if setup.spec.is_some() => Ok(setup.install(&env.host, worktree, layer)?.task),
        _ => Ok(env.clone()),
    }
}

/// Which regression tests judged a stage's candidates, as its record
/// keeps it: the test files, how many of their tests pass on the base
/// commit, and why none ran per candidate when some were found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RegressionRecord {
    pub files: Vec<String>,
    pub base_passing: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The regression tests of a change to `touched` files: the test files
/// ([`regression_tests`]), the script that runs them the repository's
/// way, its log's format, and the tests among them that pass on the base
/// commit (none, with the reason, when they could not run there or ran
/// past the time limit).
#[derive(Debug, Clone)]
pub struct Regression {
    pub files: Vec<String>,
    pub script: String,
    pub format: LogFormat,
    pub base_passing: BTreeSet<String>,
    pub skipped: Option<String>,
}

impl Regression {
    /// Finds the regression tests of `touched` and runs them on the base
    /// commit in `ws`.
    pub fn baseline(
        ws: &Workspace,
        environment: &TaskEnv,
        touched: &[String],
        timeout_s: u64,
    ) -> Regression {
        let all = crate::index::python_files(ws.path()).unwrap_or_default();
        let mut files = regression_tests(ws.path(), &all, touched);
        let (script, format) = test_run(environment, &files);
        let mut skipped = None;
        let base_passing = if files.is_empty() {
            BTreeSet::new()
        } else {
            match run_in(ws.path(), environment, timeout_s, &script) {
                // Too slow on the base commit: as slow per candidate, and
                // what passed before the limit says nothing of the rest.
                Ok(o) if o.timed_out => {
                    skipped = Some(format!(
                        "the regression tests ran past {timeout_s} s on the base commit"
                    ));
                    files.clear();
                    BTreeSet::new()
                }
                Ok(o) => passing(format, &o.output),
                Err(e) => {
                    skipped = Some(format!("the regression tests could not run: {e}"));
                    files.clear();
                    BTreeSet::new()
                }
            }
        };
        Regression {
            files,
            script,
            format,
            base_passing,
            skipped,
        }
    }

    /// What a stage's record keeps of it.
    pub fn record(&self) -> RegressionRecord {
        RegressionRecord {
            files: self.files.clone(),
            base_passing: self.base_passing.len(),
            skipped: self.skipped.clone(),
        }
    }

    /// The tests passing on the base commit that do not pass in `dir`,
    /// and the run's output.
    fn broken_in(
        &self,
        dir: &Path,
        env: &TaskEnv,
        timeout_s: u64,
    ) -> Result<(Vec<String>, String), JudgeError> {
        if self.files.is_empty() {
            return Ok((Vec::new(), String::new()));
        }
        let o = run_in(dir, env, timeout_s, &self.script)?;
        let passed = passing(self.format, &o.output);
        let broken = self.base_passing.difference(&passed).cloned().collect();
        Ok((broken, o.output))
    }
}

/// A patch judged by execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// The reproduction test says the patch fixes what it reproduced
    /// ([`check::fixed`]); None without a test.
    pub fixed: Option<bool>,
    /// The test run's output.
    pub output: String,
    /// Whether each of the other accepted tests passes with it.
    pub others: Vec<bool>,
    /// Regression tests passing on the base commit that fail with it.
    pub regressions: Vec<String>,
    /// The regression tests' output (empty when they did not run).
    pub regression_output: String,
}

/// What a patch is judged by: the accepted reproduction tests and the
/// regression tests, in worktrees of the task's workspace prepared like
/// the task's.
pub struct Trial<'a> {
    /// The task's workspace at the base commit.
    pub ws: &'a Workspace,
    /// The task's environment (the workspace installed in it).
    pub env: &'a TaskEnv,
    /// The chosen reproduction test (None: there is none, and only the
    /// regression tests run).
    pub test: Option<&'a SubmittedTest>,
    /// The other accepted reproduction tests.
    pub others: &'a [SubmittedTest],
    /// The regression tests a patch must not break.
    pub regression: Option<&'a Regression>,
    pub timeout_s: u64,
}

impl Trial<'_> {
    /// Runs the reproduction test with `patch` applied, in a worktree of
    /// the workspace at `dir` prepared like the task's (its layer at
    /// `layer`), then the other accepted tests and the regression tests;
    /// the worktree and layer are removed after.
    pub fn judge(&self, patch: &str, dir: &Path, layer: &Path) -> Result<Judged, JudgeError> {
        let cand = self.ws.clone_to(dir)?;
        let ran = (|| -> Result<Judged, JudgeError> {
            crate::repo::apply_patch(cand.path(), patch)?;
            let env = prepare_like(self.env, cand.path(), layer)?;
            let fixed = |test: &SubmittedTest| -> Result<(bool, String), JudgeError> {
                test.place(cand.path())?;
                let (outcome, verdict) =
                    check::run_test(cand.path(), &env, &test.command, self.timeout_s)?;
                Ok((check::fixed(&env, test, &outcome, &verdict), outcome.output))
            };
            let (fixed_by_test, output) = match self.test {
                Some(test) => {
                    let (f, o) = fixed(test)?;
                    (Some(f), o)
                }
                None => (None, String::new()),
            };
            let others = self
                .others
                .iter()
                .map(|other| Ok(fixed(other)?.0))
                .collect::<Result<Vec<bool>, JudgeError>>()?;
            let (regressions, regression_output) = match self.regression {
                Some(r) => r.broken_in(cand.path(), &env, self.timeout_s)?,
                None => (Vec::new(), String::new()),
            };
            Ok(Judged {
                fixed: fixed_by_test,
                output,
                others,
                regressions,
                regression_output,
            })
        })();
        // Scratch: a failure to delete it is harmless.
        let _ = cand.remove();
        let _ = std::fs::remove_dir_all(layer);
        ran
    }
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
            crate::repo::touched_files(
                "diff --git a/x/y.py b/x/y.py\nindex 1..2\ndiff --git a/a.py b/a.py\n"
            ),
            ["a.py", "x/y.py"]
        );
        let out = "PASSED tests/test_a.py::test_x\nFAILED tests/test_a.py::test_y - assert 1 == 2\nPASSED tests/test_a.py::test_z\n";
        assert_eq!(
            passing(LogFormat::Pytest, out)
                .into_iter()
                .collect::<Vec<_>>(),
            ["tests/test_a.py::test_x", "tests/test_a.py::test_z"]
        );
    }
}
