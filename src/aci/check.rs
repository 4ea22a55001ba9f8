//! What a test command's run says: passed, failed (a reproduction), or
//! broken (the test itself is wrong — an import that fails, a syntax
//! error, a fixture that does not exist — which is no reproduction).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use patchwright_sandbox::Outcome;
use regex::Regex;

use crate::env::log::{self, TestStatus};
use crate::env::spec::LogFormat;

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

/// What one run of a test command says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Tests ran and all passed.
    Passed,
    /// A test failed in its body: a reproduction.
    Failed,
    /// The test or the command is wrong, with the reason.
    Broken(String),
}

/// Classifies one run of a free-form test command (no environment spec, so
/// no log format): by marker strings and pytest's exit status.
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

/// Exit status of a shell asked to run a command it cannot find.
pub const COMMAND_NOT_FOUND: i32 = 127;

/// Exit status of a shell asked to run a file that is not executable.
pub const COMMAND_NOT_EXECUTABLE: i32 = 126;

/// The exit status every runner of `datasets/envs` uses when tests ran and
/// some failed: pytest's 1, Django's `runtests.py` `sys.exit(bool(failures))`,
/// sympy's `bin/test` `sys.exit(not ok)`, and tox's when its command fails.
pub const TESTS_FAILED: i32 = 1;

/// unittest's stand-in for a test module it could not load (import error,
/// syntax error, a missing attribute in a dotted label); Python before 3.5
/// called it `ModuleImportFailure`.
const UNITTEST_LOADER_FAILURES: [&str; 2] = [
    "unittest.loader._FailedTest",
    "unittest.loader.ModuleImportFailure",
];

/// The rule unittest prints above each failure's block.
const UNITTEST_BLOCK_RULE: &str =
    "\n======================================================================";

/// The rule unittest prints under a block's header and above `Ran N tests`.
const UNITTEST_RAN_RULE: &str =
    "\n----------------------------------------------------------------------";

/// What sympy's `bin/test` prints in place of a file's tests when importing
/// it raised `ImportError`.
const SYMPY_IMPORT_FAILURE: &str = "[?]   Failed to import";

static ANSI_COLOUR: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\x1b\[[0-9;]*m").ok());
/// A Python exception line: `ValueError: message`, `pkg.mod.Error`,
/// optionally behind pytest's `E   ` prefix.
static EXCEPTION_LINE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^(?:E\s+)?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::.*)?)$",
    )
    .ok()
});
static MISSING_FIXTURE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"fixture '([^']+)' not found").ok());
static SYMPY_PASSED: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"tests finished: (\d+) passed").ok());

/// Classifies one run of a repository's own test command, reading its output
/// with the parser grading uses for `format` (`env::log::parse`).
///
/// * `Passed`: it exited 0 and at least one test passed, none failed.
/// * `Failed`: it exited with [`TESTS_FAILED`] and a test failed inside its
///   body (pytest's `FAILED`; unittest's `FAIL` or `ERROR`; sympy's `F` or
///   `E`), with nothing showing the test file itself to be broken.
/// * `Broken`: a timeout or a signal; the command not found; a collection,
///   import or syntax error of the test module; a missing fixture or a
///   failed pytest setup (`ERROR`); no test ran, or only skipped ones; an
///   exit status that does not match what the log shows.
pub fn verdict_in(format: LogFormat, outcome: &Outcome) -> Verdict {
    if outcome.timed_out {
        return Verdict::Broken("it timed out".into());
    }
    if let Some(sig) = &outcome.signal {
        return Verdict::Broken(format!("it was killed by {}", sig.name));
    }
    let Some(code) = outcome.exit_code else {
        return Verdict::Broken("it did not exit normally".into());
    };
    match code {
        COMMAND_NOT_FOUND => {
            return Verdict::Broken(format!(
                "the test command was not found (exit status {COMMAND_NOT_FOUND})"
            ))
        }
        COMMAND_NOT_EXECUTABLE => {
            return Verdict::Broken(format!(
                "the test command is not executable (exit status {COMMAND_NOT_EXECUTABLE})"
            ))
        }
        _ => {}
    }
    let whole = match ANSI_COLOUR.as_ref() {
        Some(re) => re.replace_all(&outcome.output, "").into_owned(),
        None => outcome.output.clone(),
    };
    let output = summary_part(format, &whole).to_string();
    let tests = log::parse(format, &output);
    // The plain pytest parser reads every pytest family's `ERROR id` and
    // `SKIPPED` summary lines, which the seaborn one drops.
    let plain = match format {
        LogFormat::Django | LogFormat::Sympy => BTreeMap::new(),
        _ => log::parse(LogFormat::Pytest, &output),
    };
    let broken = match format {
        LogFormat::Django => django_broken(&output),
        LogFormat::Sympy => sympy_broken(&output),
        _ => pytest_broken(&whole, &tests, &plain),
    };
    if let Some(reason) = broken {
        return Verdict::Broken(reason);
    }
    let statuses = || {
        tests
            .iter()
            .filter(|(id, _)| names_a_test(id))
            .map(|(_, s)| *s)
    };
    let failed = statuses().any(TestStatus::is_failure);
    let passed = statuses().any(TestStatus::is_pass)
        // sympy's parser misses a file's last test; its summary counts it.
        || (format == LogFormat::Sympy && sympy_passed(&output) > 0);
    if !failed && !passed {
        if tests
            .values()
            .chain(plain.values())
            .any(|s| *s == TestStatus::Skipped)
        {
            return Verdict::Broken("every test was skipped: no test ran".into());
        }
        return Verdict::Broken(no_test_reason(&whole));
    }
    match (failed, code) {
        (true, TESTS_FAILED) => Verdict::Failed,
        (true, 0) => {
            Verdict::Broken("its output shows a failing test, yet it exited with status 0".into())
        }
        (false, 0) => Verdict::Passed,
        (true, code) => Verdict::Broken(format!(
            "it exited with status {code}, not {TESTS_FAILED} (tests ran and failed)"
        )),
        (false, code) => {
            Verdict::Broken(format!("no test failed, yet it exited with status {code}"))
        }
    }
}

/// The header of pytest's `-r` summary.
pub const PYTEST_SUMMARY_HEADER: &str = " short test summary info ";

/// What a verdict reads of a pytest `-rA` log: from its last summary
/// header on, when it has one. Before it come the failures' reports,
/// which for a test of a test runner (pytest's own tests) hold inner
/// runs' output, `ERROR collecting` sections and summaries included,
/// that are not this run's. Other formats read their whole log.
fn summary_part(format: LogFormat, output: &str) -> &str {
    if !matches!(format, LogFormat::Pytest | LogFormat::PytestOptions) {
        return output;
    }
    output
        .match_indices(PYTEST_SUMMARY_HEADER)
        .filter_map(|(at, _)| {
            let line_start = output[..at].rfind('\n').map_or(0, |i| i + 1);
            output[line_start..at]
                .chars()
                .all(|c| c == '=')
                .then_some(line_start)
        })
        .last()
        .map_or(output, |start| &output[start..])
}

/// Whether a parsed id names a test rather than being a pseudo-id like
/// `[100%]` or pytest's `[1]` for a skip count.
fn names_a_test(id: &str) -> bool {
    !id.starts_with('[')
}

/// The first exception line (`KeyError: 'x'`) at or after byte `from`.
fn exception_after(output: &str, from: usize) -> Option<String> {
    let re = EXCEPTION_LINE.as_ref()?;
    output.get(from..)?.lines().find_map(|l| {
        re.captures(l.trim_end())
            .and_then(|c| c.get(1))
            .map(|m| m.as_str().trim().to_string())
    })
}

/// The last exception line of `text`.
fn last_exception(text: &str) -> Option<String> {
    let re = EXCEPTION_LINE.as_ref()?;
    text.lines().rev().find_map(|l| {
        re.captures(l.trim_end())
            .and_then(|c| c.get(1))
            .map(|m| m.as_str().trim().to_string())
    })
}

/// Why no test ran, from the last exception the output shows.
fn no_test_reason(output: &str) -> String {
    match last_exception(output) {
        Some(e)
            if ["SyntaxError", "IndentationError", "TabError"]
                .iter()
                .any(|s| e.starts_with(s)) =>
        {
            format!("a syntax error stopped the run before any test ran: {e}")
        }
        Some(e)
            if ["ImportError", "ModuleNotFoundError"]
                .iter()
                .any(|s| e.starts_with(s)) =>
        {
            format!("an import failed before any test ran: {e}")
        }
        Some(e) => format!("no test ran; the run stopped at {e}"),
        None => "no test ran".into(),
    }
}

/// pytest's signs of a broken test file: `ERROR path` (a collection error:
/// the module did not import or compile), a missing fixture, `ERROR
/// path::test` (a fixture, setup or teardown failed, not the body), and a
/// path that does not exist.
fn pytest_broken(
    output: &str,
    tests: &BTreeMap<String, TestStatus>,
    plain: &BTreeMap<String, TestStatus>,
) -> Option<String> {
    // `plain` has the `ERROR id` summary lines; `tests`, the format's own
    // reading, adds the classic `id ERROR` lines.
    let errors: BTreeSet<&str> = plain
        .iter()
        .chain(tests.iter())
        .filter(|(id, s)| **s == TestStatus::Error && names_a_test(id))
        .map(|(id, _)| id.as_str())
        .collect();
    if let Some(file) = errors.iter().find(|id| !id.contains("::")) {
        let section = output
            .find(&format!("ERROR collecting {file}"))
            .and_then(|at| exception_after(output, at));
        let summary = output
            .lines()
            .find_map(|l| l.strip_prefix(&format!("ERROR {file} - ")))
            .map(str::to_string);
        return Some(match section.or(summary) {
            Some(cause) => format!("pytest could not collect {file}: {cause}"),
            None => format!("pytest could not collect {file} (an import or syntax error in it)"),
        });
    }
    if let Some(name) = MISSING_FIXTURE
        .as_ref()
        .filter(|_| !errors.is_empty())
        .and_then(|re| re.captures(output))
        .and_then(|c| c.get(1))
    {
        return Some(format!(
            "it asks for fixture '{}', which does not exist",
            name.as_str()
        ));
    }
    if let Some(test) = errors.first() {
        let cause = output
            .lines()
            .find_map(|l| l.strip_prefix(&format!("ERROR {test} - ")));
        return Some(match cause {
            Some(cause) => {
                format!("a fixture, setup or teardown of {test} failed, not its body: {cause}")
            }
            None => format!("a fixture, setup or teardown of {test} failed, not its body"),
        });
    }
    if tests.keys().any(|id| names_a_test(id)) {
        return None;
    }
    output
        .lines()
        .find_map(|l| l.strip_prefix("ERROR: file or directory not found: "))
        .or_else(|| {
            output
                .lines()
                .find_map(|l| l.strip_prefix("ERROR: not found: "))
        })
        .map(|path| format!("pytest found no test file or test named {}", path.trim()))
}

/// unittest's sign of a broken test module: the loader's stand-in test
/// (`test_x (unittest.loader._FailedTest) ... ERROR`), whose traceback says
/// why the module did not load.
fn django_broken(output: &str) -> Option<String> {
    let at = UNITTEST_LOADER_FAILURES
        .iter()
        .filter_map(|m| output.find(&format!("({m}")))
        .min()?;
    let header_start = output[..at].rfind('\n').map_or(0, |n| n + 1);
    let label = output[header_start..at]
        .trim()
        .trim_start_matches("ERROR:")
        .trim()
        .to_string();
    // The block with the traceback: from the `ERROR:` header for it to the
    // next block's `=====` rule or the `-----` rule above `Ran N tests`.
    let block = output.find(&format!("ERROR: {label} (")).map(|start| {
        let body = &output[start..];
        let next_block = body.find(UNITTEST_BLOCK_RULE);
        let ran = body.match_indices(UNITTEST_RAN_RULE).nth(1).map(|(i, _)| i);
        let end = [next_block, ran].into_iter().flatten().min();
        &body[..end.unwrap_or(body.len())]
    });
    let cause = block.and_then(last_exception);
    Some(match cause {
        Some(cause) => format!("the test module {label} could not be loaded: {cause}"),
        None => format!("the test module {label} could not be loaded"),
    })
}

/// sympy's sign of a broken test file: `path[?]   Failed to import`, then
/// the import's traceback among the run's exceptions.
fn sympy_broken(output: &str) -> Option<String> {
    let at = output.find(SYMPY_IMPORT_FAILURE)?;
    let line_start = output[..at].rfind('\n').map_or(0, |n| n + 1);
    let file = output[line_start..at].trim();
    let cause = output
        .find(&format!("{file} _"))
        .and_then(|header| exception_after(output, header));
    Some(match cause {
        Some(cause) => format!("sympy could not import the test file {file}: {cause}"),
        None => format!("sympy could not import the test file {file}"),
    })
}

/// The passed count of sympy's `tests finished: N passed, ...` line.
fn sympy_passed(output: &str) -> usize {
    SYMPY_PASSED
        .as_ref()
        .and_then(|re| re.captures(output))
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse().ok())
        .unwrap_or(0)
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
    env: &crate::env::task::TaskEnv,
    command: &str,
    timeout_s: u64,
) -> Result<(Outcome, Verdict), RunTestError> {
    let mut policy = env.policy(dir)?;
    policy.limits.timeout_ms = timeout_s.saturating_mul(1000);
    let argv = ["bash".to_string(), "-c".to_string(), command.to_string()];
    let outcome = patchwright_sandbox::run(&policy, &argv)?;
    let verdict = match env.spec() {
        Some(spec) => verdict_in(spec.log_format, &outcome),
        None => verdict(&outcome),
    };
    Ok((outcome, verdict))
}

/// Seconds the compile check may take: parsing a few files.
pub const COMPILE_TIMEOUT_S: u64 = 60;

/// The marker of a compile error in the check's output.
const COMPILE_ERROR: &str = "COMPILE-ERROR ";

/// Compiles `paths` (relative to `dir`) with Python's own `compile`, in
/// the sandbox with `env`'s interpreter (else `python3`): writes nothing,
/// runs nothing of them. `Ok(Some(error))` for the first that does not
/// compile (`path:line: SyntaxError: message`), `Ok(None)` when all do,
/// or when no interpreter answered (the check then says nothing).
pub fn compile_error(
    dir: &std::path::Path,
    env: &crate::env::task::TaskEnv,
    paths: &[String],
) -> Result<Option<String>, RunTestError> {
    const SCRIPT: &str = "import sys\nfor f in sys.argv[1:]:\n    try:\n        compile(open(f, 'rb').read(), f, 'exec')\n    except (SyntaxError, ValueError) as e:\n        print('COMPILE-ERROR %s:%s: %s: %s' % (f, getattr(e, 'lineno', 0), type(e).__name__, getattr(e, 'msg', e)))\n        sys.exit(1)\n";
    let mut policy = env.policy(dir)?;
    policy.limits.timeout_ms = COMPILE_TIMEOUT_S * 1000;
    let mut argv = vec![
        "bash".to_string(),
        "-c".to_string(),
        "py=$(command -v python || command -v python3) && exec \"$py\" -c \"$0\" \"$@\""
            .to_string(),
        SCRIPT.to_string(),
    ];
    argv.extend(paths.iter().cloned());
    let outcome = patchwright_sandbox::run(&policy, &argv)?;
    Ok(outcome
        .output
        .lines()
        .find_map(|l| l.strip_prefix(COMPILE_ERROR))
        .map(|e| e.trim().to_string()))
}

/// Whether a submitted test, run again (`outcome`, judged `verdict`)
/// after a change, says the change fixes what it reproduced. With an
/// environment from a spec, reading both runs with the spec's log format:
/// some test that failed in the accepted run (`test.output`) now passes,
/// and none that passed then fails now. A test of the file that fails
/// either way (one that needs the network, or this environment lacks
/// something for) neither counts for nor against. Otherwise: the run
/// passes.
pub fn fixed(
    env: &crate::env::task::TaskEnv,
    test: &crate::aci::SubmittedTest,
    outcome: &Outcome,
    verdict: &Verdict,
) -> bool {
    let format = env.spec().map(|s| s.log_format);
    fixed_in(format, &test.output, outcome, verdict)
}

/// [`fixed`] with the spec's log format (`None`: no spec) and the
/// accepted run's output.
pub fn fixed_in(
    format: Option<LogFormat>,
    accepted_output: &str,
    outcome: &Outcome,
    verdict: &Verdict,
) -> bool {
    let Some(format) = format else {
        return *verdict == Verdict::Passed;
    };
    let statuses = |output: &str| {
        let output = match ANSI_COLOUR.as_ref() {
            Some(re) => re.replace_all(output, "").into_owned(),
            None => output.to_string(),
        };
        log::parse(format, summary_part(format, &output))
    };
    let before = statuses(accepted_output);
    let tests = || before.iter().filter(|(id, _)| names_a_test(id));
    if !tests().any(|(_, s)| s.is_failure()) || outcome.timed_out || outcome.signal.is_some() {
        return *verdict == Verdict::Passed;
    }
    let now = statuses(&outcome.output);
    let passes = |id: &String| now.get(id).is_some_and(|s| s.is_pass());
    let fixed_some = tests().any(|(id, s)| s.is_failure() && passes(id));
    let broke_none = tests().all(|(id, s)| !s.is_pass() || passes(id));
    fixed_some && broke_none
}

/// Longest failure signature kept, in characters: a message quoting a
/// whole object says no more past this.
pub const MAX_SIGNATURE_CHARS: usize = 200;

static HEX_ADDRESS: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"0x[0-9a-fA-F]+").ok());
static NUMBER: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\d+").ok());
static SPACES: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\s+").ok());

/// What a failing run failed with, so that runs failing the same way can
/// be told apart from runs failing differently: pytest's first `E   `
/// line (the exception or the rewritten assertion of the first failing
/// test), else the first Python exception line of the output (unittest's,
/// sympy's tracebacks). Normalised: colours dropped, addresses (`0x7f..`)
/// masked as `ADDR`, every number as `N`, spaces collapsed, at most
/// [`MAX_SIGNATURE_CHARS`]. `None` when the output shows neither.
pub fn failure_signature(output: &str) -> Option<String> {
    let output = match ANSI_COLOUR.as_ref() {
        Some(re) => re.replace_all(output, "").into_owned(),
        None => output.to_string(),
    };
    let pytest_e = output.lines().find_map(|l| {
        let rest = l.strip_prefix("E ")?;
        let rest = rest.trim();
        (!rest.is_empty()).then(|| rest.to_string())
    });
    let raw = pytest_e.or_else(|| exception_after(&output, 0))?;
    let mut s = raw;
    for (re, with) in [(&HEX_ADDRESS, "ADDR"), (&NUMBER, "N"), (&SPACES, " ")] {
        if let Some(re) = re.as_ref() {
            s = re.replace_all(&s, with).into_owned();
        }
    }
    Some(s.trim().chars().take(MAX_SIGNATURE_CHARS).collect())
}

#[cfg(test)]
mod tests {
    use patchwright_sandbox::{
        Enforced, LimitEvents, LimitsInForce, Mechanism, Outcome, SignalInfo,
    };

    use super::*;

    fn outcome(exit_code: Option<i32>, output: &str) -> Outcome {
        let e = Enforced {
            value: 0,
            mechanism: Mechanism::Runner,
        };
        Outcome {
            exit_code,
            signal: None,
            timed_out: false,
            wall_time_secs: 0.5,
            output: output.to_string(),
            output_bytes_retained: output.len() as u64,
            bytes_omitted: 0,
            limits: LimitsInForce {
                memory_bytes: None,
                max_processes: None,
                file_size_bytes: e,
                open_files: e,
                core_dump_bytes: e,
                tmp_bytes: e,
                timeout_ms: e,
                output_bytes: e,
                cgroup_unavailable: None,
            },
            events: LimitEvents::default(),
            tier: Default::default(),
        }
    }

    fn broken(reason: &str) -> Verdict {
        Verdict::Broken(reason.to_string())
    }

    // pytest 9.2 `pytest -rA test_x.py`, as run (paths shortened).
    const PT_PASS: &str = "\
============================= test session starts ==============================
platform linux -- Python 3.11.7, pytest-9.2.0, pluggy-1.7.0
rootdir: /testbed
collected 1 item

tests/test_issue.py .                                                    [100%]

==================================== PASSES ====================================
=========================== short test summary info ============================
PASSED tests/test_issue.py::test_a
============================== 1 passed in 0.01s ===============================
";
    const PT_ASSERT: &str = "\
============================= test session starts ==============================
collected 1 item

tests/test_issue.py F                                                    [100%]

=================================== FAILURES ===================================
____________________________________ test_a ____________________________________

    def test_a():
>       assert [1, 2] == [1, 3]
E       assert [1, 2] == [1, 3]
E         At index 1 diff: 2 != 3

tests/test_issue.py:2: AssertionError
=========================== short test summary info ============================
FAILED tests/test_issue.py::test_a - assert [1, 2] == [1, 3]
============================== 1 failed in 0.02s ===============================
";
    const PT_EXCEPTION: &str = "\
============================= test session starts ==============================
collected 2 items

tests/test_issue.py .F                                                   [100%]

=================================== FAILURES ===================================
____________________________________ test_b ____________________________________

    def test_b():
>       {}[\"missing\"]
E       KeyError: 'missing'

tests/test_issue.py:5: KeyError
==================================== PASSES ====================================
=========================== short test summary info ============================
PASSED tests/test_issue.py::test_a
FAILED tests/test_issue.py::test_b - KeyError: 'missing'
========================= 1 failed, 1 passed in 0.01s ==========================
";
    const PT_IMPORT: &str = "\
============================= test session starts ==============================
collected 0 items / 1 error

==================================== ERRORS ====================================
____________________ ERROR collecting tests/test_issue.py _____________________
ImportError while importing test module '/testbed/tests/test_issue.py'.
Hint: make sure your test modules/packages have valid Python names.
Traceback:
/usr/lib/python3.11/importlib/__init__.py:126: in import_module
    return _bootstrap._gcd_import(name[level:], package, level)
tests/test_issue.py:1: in <module>
    from nowhere import thing
E   ModuleNotFoundError: No module named 'nowhere'
=========================== short test summary info ============================
ERROR tests/test_issue.py
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!
=============================== 1 error in 0.09s ===============================
";
    const PT_SYNTAX: &str = "\
============================= test session starts ==============================
collected 0 items / 1 error

==================================== ERRORS ====================================
____________________ ERROR collecting tests/test_issue.py _____________________
/usr/lib/python3.11/site-packages/_pytest/python.py:528: in importtestmodule
    mod = import_path(
/usr/lib/python3.11/ast.py:50: in parse
    return compile(source, filename, mode, flags,
E     File \"/testbed/tests/test_issue.py\", line 1
E       def test_a(:
E                  ^
E   SyntaxError: invalid syntax
=========================== short test summary info ============================
ERROR tests/test_issue.py
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!
=============================== 1 error in 0.15s ===============================
";
    /// pytest 5's summary line carries the cause; there is no section.
    const PT5_COLLECT: &str = "\
============================= test session starts ==============================
collected 0 items / 1 error
=========================== short test summary info ============================
ERROR tests/test_issue.py - ImportError: cannot import name 'parse' from 'pkg'
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!
=============================== 1 error in 0.30s ===============================
";
    const PT_FIXTURE: &str = "\
============================= test session starts ==============================
collected 1 item

tests/test_issue.py E                                                    [100%]

==================================== ERRORS ====================================
___________________________ ERROR at setup of test_a ___________________________
file /testbed/tests/test_issue.py, line 1
  def test_a(no_such_fixture):
E       fixture 'no_such_fixture' not found
>       available fixtures: capfd, caplog, capsys, monkeypatch, tmp_path
>       use 'pytest --fixtures [testpath]' for help on them.

/testbed/tests/test_issue.py:1
=========================== short test summary info ============================
ERROR tests/test_issue.py::test_a
=============================== 1 error in 0.01s ===============================
";
    const PT_SETUP: &str = "\
============================= test session starts ==============================
collected 2 items

tests/test_issue.py EF                                                   [100%]

==================================== ERRORS ====================================
_________________________ ERROR at setup of test_a _____________________________

    @pytest.fixture
    def server():
>       raise OSError(\"port in use\")
E       OSError: port in use

tests/test_issue.py:6: OSError
=================================== FAILURES ===================================
____________________________________ test_b ____________________________________
E       assert 1 == 2
=========================== short test summary info ============================
ERROR tests/test_issue.py::test_a - OSError: port in use
FAILED tests/test_issue.py::test_b - assert 1 == 2
===================== 1 failed, 1 error in 0.01s ==============================
";
    const PT_SKIP: &str = "\
============================= test session starts ==============================
collected 1 item

tests/test_issue.py s                                                    [100%]

=========================== short test summary info ============================
SKIPPED [1] tests/test_issue.py:2: later
============================== 1 skipped in 0.01s ==============================
";
    const PT_EMPTY: &str = "\
============================= test session starts ==============================
collected 0 items

============================ no tests ran in 0.00s =============================
";
    const PT_MISSING: &str = "\
============================= test session starts ==============================
collected 0 items

============================ no tests ran in 0.00s =============================
ERROR: file or directory not found: tests/test_nothere.py
";

    const COLLECT_IMPORT: &str =
        "pytest could not collect tests/test_issue.py: ModuleNotFoundError: No module named 'nowhere'";
    const COLLECT_SYNTAX: &str =
        "pytest could not collect tests/test_issue.py: SyntaxError: invalid syntax";
    const MISSING_FIXTURE_REASON: &str =
        "it asks for fixture 'no_such_fixture', which does not exist";

    /// The plain `-rA` outputs, read by every format whose runner prints them.
    #[rustfmt::skip]
    const PLAIN: &[(&str, Option<i32>, &str, Option<&str>)] = &[
        ("passed", Some(0), PT_PASS, None),
        ("assertion", Some(1), PT_ASSERT, Some("")),
        ("exception in the body", Some(1), PT_EXCEPTION, Some("")),
        ("import error", Some(2), PT_IMPORT, Some(COLLECT_IMPORT)),
        ("syntax error", Some(2), PT_SYNTAX, Some(COLLECT_SYNTAX)),
        ("pytest 5 collection error", Some(2), PT5_COLLECT,
            Some("pytest could not collect tests/test_issue.py: ImportError: cannot import name 'parse' from 'pkg'")),
        ("missing fixture", Some(1), PT_FIXTURE, Some(MISSING_FIXTURE_REASON)),
        ("fixture raised", Some(1), PT_SETUP,
            Some("a fixture, setup or teardown of tests/test_issue.py::test_a failed, not its body: OSError: port in use")),
        ("skipped only", Some(0), PT_SKIP, Some("every test was skipped: no test ran")),
        ("no tests", Some(5), PT_EMPTY, Some("no test ran")),
        ("no such file", Some(4), PT_MISSING,
            Some("pytest found no test file or test named tests/test_nothere.py")),
        ("command not found", Some(127), "bash: line 1: pytest: command not found\n",
            Some("the test command was not found (exit status 127)")),
        ("forged failure with status 0", Some(0), PT_ASSERT,
            Some("its output shows a failing test, yet it exited with status 0")),
        ("failure with an odd status", Some(3), PT_ASSERT,
            Some("it exited with status 3, not 1 (tests ran and failed)")),
        ("pass with a failing status", Some(1), PT_PASS,
            Some("no test failed, yet it exited with status 1")),
    ];

    /// `Some("")` stands for `Failed`, `None` for `Passed`.
    fn expected(e: Option<&str>) -> Verdict {
        match e {
            None => Verdict::Passed,
            Some("") => Verdict::Failed,
            Some(reason) => broken(reason),
        }
    }

    #[test]
    fn pytest_family_reads_plain_summaries() {
        for format in [
            LogFormat::Pytest,
            LogFormat::PytestOptions,
            LogFormat::PytestV2,
            LogFormat::Seaborn,
            LogFormat::Matplotlib,
        ] {
            for (name, code, output, want) in PLAIN {
                assert_eq!(
                    verdict_in(format, &outcome(*code, output)),
                    expected(*want),
                    "{format:?}: {name}"
                );
            }
        }
    }

    // astropy's `pytest -rA -vv -o console_output_style=classic --tb=no`.
    const CLASSIC_PASS: &str = "\
============================= test session starts ==============================
collecting ... collected 2 items

astropy/io/tests/test_issue.py::test_a PASSED
astropy/io/tests/test_issue.py::test_b XFAIL

=========================== short test summary info ============================
PASSED astropy/io/tests/test_issue.py::test_a
XFAIL astropy/io/tests/test_issue.py::test_b
======================== 1 passed, 1 xfailed in 0.20s ==========================
";
    const CLASSIC_FAIL: &str = "\
============================= test session starts ==============================
collecting ... collected 1 item

astropy/io/tests/test_issue.py::test_a FAILED

=========================== short test summary info ============================
FAILED astropy/io/tests/test_issue.py::test_a - ValueError: bad unit
============================== 1 failed in 0.21s ===============================
";
    const CLASSIC_IMPORT: &str = "\
============================= test session starts ==============================
collecting ... collected 0 items / 1 error

=========================== short test summary info ============================
ERROR astropy/io/tests/test_issue.py
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!
=============================== 1 error in 0.11s ===============================
";
    /// `--tb=no` and no summary: only the classic `id ERROR` line is left.
    const CLASSIC_FIXTURE: &str = "\
============================= test session starts ==============================
collecting ... collected 1 item

astropy/io/tests/test_issue.py::test_a ERROR

=============================== 1 error in 0.01s ===============================
";
    // sphinx's `tox --current-env -epy39 -v --`, in colour.
    const TOX_FAIL: &str = "\
py39 run-test: commands[0] | python -X dev -m pytest -rA --durations 25 tests/test_ext_napoleon.py
\x1b[1m============================= test session starts ==============================\x1b[0m
collected 2 items

tests/test_ext_napoleon.py \x1b[32m.\x1b[0m\x1b[31mF\x1b[0m\x1b[31m                                         [100%]\x1b[0m

\x1b[36m\x1b[1m=========================== short test summary info ============================\x1b[0m
\x1b[32mPASSED\x1b[0m tests/test_ext_napoleon.py::\x1b[1mtest_a\x1b[0m
\x1b[31mFAILED\x1b[0m tests/test_ext_napoleon.py::\x1b[1mtest_b\x1b[0m - AssertionError: assert ':param x:' in ''
\x1b[31m========================= \x1b[31m\x1b[1m1 failed\x1b[0m, \x1b[32m1 passed\x1b[0m\x1b[31m in 0.31s\x1b[0m\x1b[31m ==========================\x1b[0m
ERROR: InvocationError for command /usr/bin/python -X dev -m pytest -rA --durations 25 tests/test_ext_napoleon.py (exited with code 1)
___________________________________ summary ____________________________________
ERROR:   py39: commands failed
";
    const TOX_SYNTAX: &str = "\
py39 run-test: commands[0] | python -X dev -m pytest -rA --durations 25 tests/test_ext_napoleon.py
\x1b[1m============================= test session starts ==============================\x1b[0m
collected 0 items / 1 error

==================================== ERRORS ====================================
\x1b[31m\x1b[1m________________ ERROR collecting tests/test_ext_napoleon.py _________________\x1b[0m
\x1b[1m\x1b[31mE     File \"/testbed/tests/test_ext_napoleon.py\", line 12\x1b[0m
\x1b[1m\x1b[31mE       def test_b(:\x1b[0m
\x1b[1m\x1b[31mE   SyntaxError: invalid syntax\x1b[0m
\x1b[36m\x1b[1m=========================== short test summary info ============================\x1b[0m
\x1b[31mERROR\x1b[0m tests/test_ext_napoleon.py
\x1b[31m!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!\x1b[0m
ERROR: InvocationError for command /usr/bin/python -X dev -m pytest (exited with code 2)
___________________________________ summary ____________________________________
ERROR:   py39: commands failed
";
    const TOX_EMPTY: &str = "\
py39 run-test: commands[0] | python -X dev -m pytest -rA --durations 25 tests/test_nothing.py
\x1b[1m============================= test session starts ==============================\x1b[0m
collected 0 items

\x1b[33m============================ no tests ran in 0.01s =============================\x1b[0m
ERROR: InvocationError for command /usr/bin/python -X dev -m pytest (exited with code 5)
___________________________________ summary ____________________________________
ERROR:   py39: commands failed
";

    #[test]
    fn pytest_v2_reads_classic_lines_and_tox_runs() {
        #[rustfmt::skip]
        let cases: &[(&str, Option<i32>, &str, Option<&str>)] = &[
            ("classic passed and xfail", Some(0), CLASSIC_PASS, None),
            ("classic failure", Some(1), CLASSIC_FAIL, Some("")),
            ("classic collection error", Some(2), CLASSIC_IMPORT,
                Some("pytest could not collect astropy/io/tests/test_issue.py (an import or syntax error in it)")),
            ("classic setup error", Some(1), CLASSIC_FIXTURE,
                Some("a fixture, setup or teardown of astropy/io/tests/test_issue.py::test_a failed, not its body")),
            ("tox, failure in colour", Some(1), TOX_FAIL, Some("")),
            ("tox, syntax error", Some(1), TOX_SYNTAX,
                Some("pytest could not collect tests/test_ext_napoleon.py: SyntaxError: invalid syntax")),
            ("tox, no tests", Some(1), TOX_EMPTY, Some("no test ran")),
        ];
        for (name, code, output, want) in cases {
            assert_eq!(
                verdict_in(LogFormat::PytestV2, &outcome(*code, output)),
                expected(*want),
                "{name}"
            );
        }
    }

    // Django's `./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1`.
    const DJ_HEAD: &str = "\
Testing against Django installed in '/testbed/django'
Importing application utils_tests
Skipping setup of unused database(s): default, other.
System check identified no issues (0 silenced).
";
    const DJ_PASS: &str = "\
test_slugify (utils_tests.test_text.TestUtilsText) ... ok
test_wrap (utils_tests.test_text.TestUtilsText) ... skipped 'needs the locale'

----------------------------------------------------------------------
Ran 2 tests in 0.012s

OK (skipped=1)
";
    const DJ_FAIL: &str = "\
test_slugify (utils_tests.test_text.TestUtilsText) ... FAIL
test_wrap (utils_tests.test_text.TestUtilsText) ... ok

======================================================================
FAIL: test_slugify (utils_tests.test_text.TestUtilsText)
----------------------------------------------------------------------
Traceback (most recent call last):
  File \"/testbed/tests/utils_tests/test_text.py\", line 190, in test_slugify
    self.assertEqual(text.slugify('a_b'), 'a-b')
AssertionError: 'a_b' != 'a-b'

----------------------------------------------------------------------
Ran 2 tests in 0.010s

FAILED (failures=1)
";
    const DJ_ERROR: &str = "\
test_slugify (utils_tests.test_text.TestUtilsText) ... ERROR

======================================================================
ERROR: test_slugify (utils_tests.test_text.TestUtilsText)
----------------------------------------------------------------------
Traceback (most recent call last):
  File \"/testbed/tests/utils_tests/test_text.py\", line 190, in test_slugify
    text.slugify(None)
  File \"/testbed/django/utils/text.py\", line 400, in slugify
    value = unicodedata.normalize('NFKC', value)
TypeError: normalize() argument 2 must be str, not None

----------------------------------------------------------------------
Ran 1 test in 0.003s

FAILED (errors=1)
";
    const DJ_IMPORT: &str = "\
test_text (unittest.loader._FailedTest) ... ERROR

======================================================================
ERROR: test_text (unittest.loader._FailedTest)
----------------------------------------------------------------------
ImportError: Failed to import test module: test_text
Traceback (most recent call last):
  File \"/usr/lib/python3.8/unittest/loader.py\", line 154, in loadTestsFromName
    module = __import__(module_name)
  File \"/testbed/tests/utils_tests/test_text.py\", line 6, in <module>
    from django.utils.text import slugify_unicode
ImportError: cannot import name 'slugify_unicode' from 'django.utils.text' (/testbed/django/utils/text.py)


----------------------------------------------------------------------
Ran 1 test in 0.000s

FAILED (errors=1)
";
    /// Python 3.11 names the stand-in `_FailedTest.<name>`; a second,
    /// passing module ran too.
    const DJ_IMPORT_311: &str = "\
test_text (unittest.loader._FailedTest.test_text) ... ERROR
test_slugify (utils_tests.test_html.TestUtilsHtml) ... ok

======================================================================
ERROR: test_text (unittest.loader._FailedTest.test_text)
----------------------------------------------------------------------
ImportError: Failed to import test module: test_text
Traceback (most recent call last):
  File \"/usr/lib/python3.11/unittest/loader.py\", line 162, in loadTestsFromName
    module = __import__(module_name)
             ^^^^^^^^^^^^^^^^^^^^^^^
  File \"/testbed/tests/utils_tests/test_text.py\", line 3, in <module>
    from utils_tests.helpers import make_text
ModuleNotFoundError: No module named 'utils_tests.helpers'


======================================================================
ERROR: test_other (utils_tests.test_html.TestUtilsHtml)
----------------------------------------------------------------------
Traceback (most recent call last):
  File \"/testbed/tests/utils_tests/test_html.py\", line 9, in test_other
    raise KeyError('x')
KeyError: 'x'

----------------------------------------------------------------------
Ran 3 tests in 0.004s

FAILED (errors=2)
";
    /// unittest's `loadTestsFromName` catches only `ImportError`: a syntax
    /// error in the labelled module ends `runtests.py` with a traceback.
    const DJ_SYNTAX: &str = "\
Traceback (most recent call last):
  File \"./tests/runtests.py\", line 594, in <module>
    options.timing,
  File \"/testbed/django/test/runner.py\", line 629, in build_suite
    tests = self.test_loader.loadTestsFromName(label)
  File \"/usr/lib/python3.8/unittest/loader.py\", line 154, in loadTestsFromName
    module = __import__(module_name)
  File \"/testbed/tests/utils_tests/test_text.py\", line 12
    def test_slugify(self:
                         ^
SyntaxError: invalid syntax
";
    const DJ_NONE: &str = "
----------------------------------------------------------------------
Ran 0 tests in 0.000s

OK
";

    #[test]
    fn django_runner() {
        let import = "the test module test_text could not be loaded: ImportError: cannot import name 'slugify_unicode' from 'django.utils.text' (/testbed/django/utils/text.py)";
        #[rustfmt::skip]
        let cases: &[(&str, Option<i32>, &str, Option<&str>)] = &[
            ("passed with a skip", Some(0), DJ_PASS, None),
            ("assertion", Some(1), DJ_FAIL, Some("")),
            ("exception in the body", Some(1), DJ_ERROR, Some("")),
            ("import error", Some(1), DJ_IMPORT, Some(import)),
            ("import error, Python 3.11", Some(1), DJ_IMPORT_311,
                Some("the test module test_text could not be loaded: ModuleNotFoundError: No module named 'utils_tests.helpers'")),
            ("syntax error", Some(1), DJ_SYNTAX,
                Some("a syntax error stopped the run before any test ran: SyntaxError: invalid syntax")),
            ("no tests", Some(0), DJ_NONE, Some("no test ran")),
            ("not executable", Some(126), "bash: ./tests/runtests.py: Permission denied\n",
                Some("the test command is not executable (exit status 126)")),
        ];
        for (name, code, body, want) in cases {
            let output = format!("{DJ_HEAD}{body}");
            assert_eq!(
                verdict_in(LogFormat::Django, &outcome(*code, &output)),
                expected(*want),
                "{name}"
            );
        }
    }

    // sympy's `bin/test -C --verbose`.
    const SY_HEAD: &str = "\
============================= test process starts ==============================
executable:         /opt/venv/bin/python  (3.9.18-final-0) [CPython]
architecture:       64-bit
cache:              no
ground types:       python 
numpy:              None
random seed:        53581215
hash randomization: on (PYTHONHASHSEED=2447125290)

";
    /// The file's only test ends its line in `[OK]`, which the parser skips:
    /// only the summary shows it passed.
    const SY_PASS: &str = "\
sympy/core/tests/test_issue.py[1] 
test_issue ok                                                             [OK]


================== tests finished: 1 passed, in 0.01 seconds ===================
";
    const SY_FAIL: &str = "\
sympy/core/tests/test_issue.py[2] 
test_other ok
test_issue F                                                              [FAIL]


________________________________________________________________________________
_______________ sympy/core/tests/test_issue.py:test_issue ______________________
Traceback (most recent call last):
  File \"/testbed/sympy/core/tests/test_issue.py\", line 6, in test_issue
    assert Symbol('x').is_finite is None
AssertionError

============= tests finished: 1 passed, 1 failed, in 0.02 seconds ==============
DO *NOT* COMMIT!
";
    const SY_EXCEPTION: &str = "\
sympy/core/tests/test_issue.py[2] 
test_issue E
test_other ok                                                             [FAIL]


________________________________________________________________________________
_______________ sympy/core/tests/test_issue.py:test_issue ______________________
Traceback (most recent call last):
  File \"/testbed/sympy/core/tests/test_issue.py\", line 6, in test_issue
    Matrix([[1, 2]]).inv()
  File \"/testbed/sympy/matrices/matrices.py\", line 2150, in inv
    raise NonSquareMatrixError()
sympy.matrices.common.NonSquareMatrixError

=========== tests finished: 1 passed, 1 exceptions, in 0.03 seconds ============
DO *NOT* COMMIT!
";
    const SY_IMPORT: &str = "\
sympy/core/tests/test_issue.py[?]   Failed to import                    [FAIL]

________________________________________________________________________________
________________ /testbed/sympy/core/tests/test_issue.py _______________________
Traceback (most recent call last):
  File \"/testbed/sympy/core/tests/test_issue.py\", line 1, in <module>
    from sympy.core.nothing import x
ModuleNotFoundError: No module named 'sympy.core.nothing'

=========== tests finished: 0 passed, 1 exceptions, in 0.01 seconds ============
DO *NOT* COMMIT!
";
    /// A syntax error is not an `ImportError` to sympy: `E` with no test.
    const SY_SYNTAX: &str = "\
E
________________________________________________________________________________
________________________________________________________________________________
  File \"/testbed/sympy/core/tests/test_issue.py\", line 3
    def test_issue(:
                   ^
SyntaxError: invalid syntax

=========== tests finished: 0 passed, 1 exceptions, in 0.00 seconds ============
DO *NOT* COMMIT!
";
    const SY_NONE: &str = "
=================== tests finished: 0 passed, in 0.00 seconds ==================
";

    #[test]
    fn sympy_runner() {
        #[rustfmt::skip]
        let cases: &[(&str, Option<i32>, &str, Option<&str>)] = &[
            ("passed, last test only in the summary", Some(0), SY_PASS, None),
            ("assertion", Some(1), SY_FAIL, Some("")),
            ("exception in the body", Some(1), SY_EXCEPTION, Some("")),
            ("import error", Some(1), SY_IMPORT,
                Some("sympy could not import the test file sympy/core/tests/test_issue.py: ModuleNotFoundError: No module named 'sympy.core.nothing'")),
            ("syntax error", Some(1), SY_SYNTAX,
                Some("a syntax error stopped the run before any test ran: SyntaxError: invalid syntax")),
            ("no tests", Some(0), SY_NONE, Some("no test ran")),
        ];
        for (name, code, body, want) in cases {
            let output = format!("{SY_HEAD}{body}");
            assert_eq!(
                verdict_in(LogFormat::Sympy, &outcome(*code, &output)),
                expected(*want),
                "{name}"
            );
        }
    }

    #[test]
    fn runs_that_did_not_finish_are_broken_in_every_format() {
        let mut timed_out = outcome(None, PT_PASS);
        timed_out.timed_out = true;
        let mut killed = outcome(None, PT_PASS);
        killed.signal = Some(SignalInfo {
            number: 9,
            name: "SIGKILL".into(),
        });
        let cases = [
            (timed_out, "it timed out"),
            (killed, "it was killed by SIGKILL"),
            (outcome(None, PT_PASS), "it did not exit normally"),
        ];
        for format in [LogFormat::Pytest, LogFormat::Django, LogFormat::Sympy] {
            for (o, reason) in &cases {
                assert_eq!(verdict_in(format, o), broken(reason), "{format:?}");
            }
        }
    }

    #[test]
    fn exception_lines() {
        let cases = [
            ("E   KeyError: 'x'", Some("KeyError: 'x'")),
            (
                "sympy.matrices.common.NonSquareMatrixError",
                Some("sympy.matrices.common.NonSquareMatrixError"),
            ),
            ("ImportError while importing test module '/t.py'.", None),
            ("    raise KeyError('x')", None),
            ("Traceback (most recent call last):", None),
            ("ERROR: test_x (m.C)", None),
        ];
        for (line, want) in cases {
            assert_eq!(last_exception(line).as_deref(), want, "{line}");
        }
    }

    /// A test of a test runner (pytest's own) prints inner runs' output,
    /// collection errors and summaries included, in its failure report:
    /// only the run's own last summary counts.
    #[test]
    fn inner_runs_in_a_failure_report_are_not_this_runs() {
        let log = "\
============================= test session starts ==============================
collected 3 items

testing/test_mark.py .F.                                                  [100%]

=================================== FAILURES ===================================
____________________________ test_wrong_marker _________________________________
----------------------------- Captured stdout call -----------------------------
==================================== ERRORS ====================================
_______________ ERROR collecting test_mark_with_wrong_marker.py ________________
E   TypeError: got <class 'pytestmark'> instead of Mark
=========================== short test summary info ============================
ERROR test_mark_with_wrong_marker.py - TypeError: got <class 'pytestmark'>
E       AssertionError: expected the marker to be refused
=========================== short test summary info ============================
PASSED testing/test_mark.py::test_a
FAILED testing/test_mark.py::test_wrong_marker - AssertionError: expected the marker
PASSED testing/test_mark.py::test_c
========================= 1 failed, 2 passed in 0.52s ==========================
";
        for format in [LogFormat::Pytest, LogFormat::PytestOptions] {
            assert_eq!(
                verdict_in(format, &outcome(Some(1), log)),
                Verdict::Failed,
                "{format:?}"
            );
        }
        let passing = log
            .replace("FAILED testing/test_mark.py::test_wrong_marker - AssertionError: expected the marker", "PASSED testing/test_mark.py::test_wrong_marker")
            .replace("1 failed, 2 passed", "3 passed");
        assert_eq!(
            verdict_in(LogFormat::Pytest, &outcome(Some(0), &passing)),
            Verdict::Passed
        );
    }

    /// A change fixes a reproduction when a test that failed in the
    /// accepted run now passes and none that passed now fails; a test
    /// failing either way (the network's) counts for nothing.
    #[test]
    fn fixed_reads_the_tests_that_failed_when_accepted() {
        let header =
            "=========================== short test summary info ============================\n";
        let run = |old: &str, issue: &str, network: &str| {
            format!(
                "{header}{old} tests/x.py::test_old\n{issue} tests/x.py::test_issue\n\
                 {network} tests/x.py::test_needs_network\n"
            )
        };
        let accepted = run("PASSED", "FAILED", "FAILED");
        let after = |old, issue, network, code| outcome(Some(code), &run(old, issue, network));
        let py = Some(LogFormat::Pytest);
        // (format, run after the change, its verdict, fixed)
        let cases = [
            (
                py,
                after("PASSED", "PASSED", "PASSED", 0),
                Verdict::Passed,
                true,
            ),
            // The network test fails either way.
            (
                py,
                after("PASSED", "PASSED", "FAILED", 1),
                Verdict::Failed,
                true,
            ),
            (
                py,
                after("PASSED", "FAILED", "FAILED", 1),
                Verdict::Failed,
                false,
            ),
            // The issue's test passes, but a test that passed now fails.
            (
                py,
                after("FAILED", "PASSED", "FAILED", 1),
                Verdict::Failed,
                false,
            ),
            // Without a spec, only a passing run counts.
            (
                None,
                after("PASSED", "PASSED", "PASSED", 0),
                Verdict::Passed,
                true,
            ),
            (
                None,
                after("PASSED", "PASSED", "FAILED", 1),
                Verdict::Failed,
                false,
            ),
        ];
        for (i, (format, after, verdict, want)) in cases.iter().enumerate() {
            assert_eq!(
                fixed_in(*format, &accepted, after, verdict),
                *want,
                "case {i}"
            );
        }
    }

    #[test]
    fn failure_signatures_mask_numbers_and_addresses() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("pytest assertion", PT_ASSERT, Some("assert [N, N] == [N, N]")),
            ("pytest exception", PT_EXCEPTION, Some("KeyError: 'missing'")),
            (
                "pytest, an address and a number",
                "___ test_x ___\n    def test_x():\n>       f()\nE       ValueError: bad <Obj at 0x7f3a2c> 42\n\nt.py:3: ValueError\n",
                Some("ValueError: bad <Obj at ADDR> N"),
            ),
            (
                "coloured",
                "\x1b[31mE   KeyError: 'k'\x1b[0m\n",
                Some("KeyError: 'k'"),
            ),
            (
                "unittest traceback",
                "FAIL: test_a (t.T)\nTraceback (most recent call last):\n  File \"t.py\", line 9\nAssertionError: 3 != 4\n",
                Some("AssertionError: N != N"),
            ),
            ("nothing failed", PT_PASS, None),
        ];
        for (name, output, want) in cases {
            assert_eq!(
                failure_signature(output).as_deref(),
                *want,
                "{name}: {output}"
            );
        }
        let long = format!("E   AssertionError: {}\n", "x".repeat(500));
        assert_eq!(
            failure_signature(&long).map(|s| s.chars().count()),
            Some(MAX_SIGNATURE_CHARS)
        );
    }
}
