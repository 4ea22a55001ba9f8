//! What a test command's run says: passed, failed (a reproduction), or
//! broken (the test itself is wrong — an import that fails, a syntax
//! error, a fixture that does not exist — which is no reproduction).

use patchwright_sandbox::Outcome;

/// Signs in a test's output that the test, not the code under test, is
/// broken.
pub const BROKEN_MARKERS: &[&str] = &[
    "SyntaxError",
    "IndentationError",
    "ModuleNotFoundError",
    "ImportError while importing",
    "ERROR collecting",
    "fixture '",
    "Interrupted:",
    "no tests ran",
    "file or directory not found",
    "command not found",
    "No module named",
];

/// pytest's exit status when tests ran and some failed.
pub const PYTEST_TESTS_FAILED: i32 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Failed,
    Broken(String),
}

/// Classifies one run of a test command.
pub fn verdict(outcome: &Outcome) -> Verdict {
    if outcome.timed_out {
        return Verdict::Broken("it timed out".into());
    }
    if let Some(sig) = &outcome.signal {
        return Verdict::Broken(format!("it was killed by {}", sig.name));
    }
    if let Some(marker) = BROKEN_MARKERS.iter().find(|m| outcome.output.contains(*m)) {
        return Verdict::Broken(format!("its output shows `{marker}`"));
    }
    match outcome.exit_code {
        Some(0) => Verdict::Passed,
        Some(PYTEST_TESTS_FAILED) => Verdict::Failed,
        Some(code) => Verdict::Broken(format!(
            "it exited with status {code}, not {PYTEST_TESTS_FAILED} (tests ran and failed)"
        )),
        None => Verdict::Broken("it did not exit normally".into()),
    }
}

/// Why a test could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum RunTestError {
    #[error(transparent)]
    Env(#[from] crate::env::EnvError),
    #[error(transparent)]
    Sandbox(#[from] patchwright_sandbox::SandboxError),
}

/// Runs a test `command` (bash) in the worktree `dir`, in `env` when
/// given, and judges it: with an environment built from a spec, by the
/// repository's log format ([`verdict_in`]); otherwise by [`verdict`]. The
/// one way a submitted test is run: by `submit_test`, the Ranker and the
/// stage metrics.
pub fn run_test(
    dir: &std::path::Path,
    env: Option<&crate::env::task::TaskEnv>,
    command: &str,
    timeout_s: u64,
) -> Result<(Outcome, Verdict), RunTestError> {
    let mut policy = match env {
        Some(e) => e.policy(dir)?,
        None => crate::env::policy(dir, None)?,
    };
    policy.limits.timeout_ms = timeout_s.saturating_mul(1000);
    let argv = ["bash".to_string(), "-c".to_string(), command.to_string()];
    let outcome = patchwright_sandbox::run(&policy, &argv)?;
    let verdict = match env.and_then(|e| e.spec()) {
        Some(spec) => verdict_in(spec.log_format, &outcome),
        None => verdict(&outcome),
    };
    Ok((outcome, verdict))
}

/// Classifies a run of the repository's own test command by its log
/// format: the tests' statuses as grading parses them.
pub fn verdict_in(format: crate::env::spec::LogFormat, outcome: &Outcome) -> Verdict {
    if outcome.timed_out {
        return Verdict::Broken("it timed out".into());
    }
    if let Some(sig) = &outcome.signal {
        return Verdict::Broken(format!("it was killed by {}", sig.name));
    }
    let statuses = crate::env::log::parse(format, &outcome.output);
    if statuses.is_empty() {
        return Verdict::Broken("no test ran".into());
    }
    if statuses
        .values()
        .any(|s| *s == crate::env::log::TestStatus::Failed)
    {
        return Verdict::Failed;
    }
    if statuses.values().any(|s| s.is_failure()) {
        return Verdict::Broken("a test errored outside its body".into());
    }
    match outcome.exit_code {
        Some(0) => Verdict::Passed,
        other => Verdict::Broken(format!(
            "the tests passed but the runner exited with {other:?}"
        )),
    }
}
