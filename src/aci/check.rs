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
