//! What a failing test run says, read from its output: each failure's
//! exception and where it was raised, the traceback's frames inside the
//! repository, and the lines of the failure worth showing a model. The
//! Issue Reproducer judges a candidate test with it (Agentless's three
//! outcomes: the issue reproduced, or "other issues"), the pipeline
//! confirms or corrects the location with the frames, and the Fixer and
//! its repair rounds are shown the failure.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Exceptions that say a test's own expectation did not hold: an
/// `assert` (pytest's rewritten ones included), pytest's `Failed` (from
/// `pytest.fail` and `pytest.raises`'s "DID NOT RAISE"), unittest's
/// `assert*` methods.
pub const ASSERTION_EXCEPTIONS: [&str; 3] = ["AssertionError", "Failed", "DidNotRaise"];

/// Exceptions that, raised in the test file's own lines, are the test's
/// bug, not the issue's: a name it never imported, a file it assumed, a
/// module that does not exist. Measured on the demo: 9 of the 20 failing
/// samples of the first five tasks failed this way, and agreement between
/// samples does not filter them (five `NameError`s on one task).
pub const TEST_BUG_EXCEPTIONS: [&str; 4] = [
    "NameError",
    "FileNotFoundError",
    "ModuleNotFoundError",
    "UnboundLocalError",
];

/// Lines of a failure shown to the Fixer (the end of the failure's
/// report, where the assertion or the exception is).
pub const FAILURE_LINES: usize = 24;

/// Characters of one shown line of a failure.
pub const FAILURE_LINE_CHARS: usize = 200;

/// Which failing candidate tests the Issue Reproducer accepts
/// (`[reproducer] accept`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Accept {
    /// The issue reproduced: the test fails in an assertion (its own
    /// expectation of the behaviour), or with an exception the issue's
    /// text names (the crash it reports). Any other failure — a
    /// `TypeError` from a wrong call, an `AttributeError` from a name the
    /// code does not have — is "other issues", not accepted.
    #[default]
    Issue,
    /// Any failure inside a test's body, but for the test's own bugs
    /// ([`TEST_BUG_EXCEPTIONS`] in its lines).
    Failure,
}

/// One frame of a traceback: a file and a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub path: String,
    pub line: usize,
}

/// One failure of a run: the exception's type (the last component of a
/// dotted name), and where it was raised, when the output says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub exception: String,
    pub raised_at: Option<Frame>,
}

/// A line `path.py:LINE: ...` (pytest's location lines) as its path,
/// line, and what follows (`in name`, an exception's name, or nothing).
fn pytest_location(line: &str) -> Option<(&str, usize, &str)> {
    let line = line.trim();
    let at = line.find(".py:")?;
    let path = &line[..at + 3];
    if path.is_empty() || path.contains(char::is_whitespace) {
        return None;
    }
    let rest = &line[at + 4..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let number = rest[..digits].parse().ok()?;
    let after = rest[digits..].strip_prefix(':')?;
    Some((path, number, after.trim()))
}

/// A line `File "path", line N, in name` (Python's tracebacks).
fn python_frame(line: &str) -> Option<Frame> {
    let rest = line.trim().strip_prefix("File \"")?;
    let (path, rest) = rest.split_once('"')?;
    let rest = rest.trim_start().strip_prefix(", line ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some(Frame {
        path: path.to_string(),
        line: digits.parse().ok()?,
    })
}

/// An exception's type name from a line like `KeyError: 'x'`,
/// `E       KeyError: 'x'`, `module.Error` or `E   assert 1 == 2`
/// (pytest's rewritten assertion: `AssertionError`).
fn exception_of(line: &str) -> Option<String> {
    let text = line.trim();
    let text = text.strip_prefix("E ").map_or(text, str::trim_start);
    if text.starts_with("assert ") || text == "assert" {
        return Some("AssertionError".into());
    }
    let name = text.split([':', ' ', '(']).next()?;
    let last = name.rsplit('.').next()?;
    let looks = !last.is_empty()
        && last.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && last.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && (last.ends_with("Error")
            || last.ends_with("Exception")
            || last.ends_with("Exit")
            || last.ends_with("Interrupt")
            || ASSERTION_EXCEPTIONS.contains(&last)
            || last.ends_with("Warning"));
    looks.then(|| last.to_string())
}

/// The failures of a run's output. pytest: each failure's report ends
/// with `path:LINE: Exception`. Python tracebacks (sympy's and django's
/// runners): the exception line after the last `File "..."` frame of
/// each traceback.
pub fn failures(output: &str) -> Vec<Failure> {
    let mut out = Vec::new();
    for line in output.lines() {
        if let Some((path, number, after)) = pytest_location(line) {
            // pytest's line ends with the exception's name; a warning's
            // (`path:LINE: DeprecationWarning: message`) goes on.
            let bare = !after.contains([' ', ':']);
            if let Some(exception) = exception_of(after).filter(|_| bare) {
                out.push(Failure {
                    exception,
                    raised_at: Some(Frame {
                        path: path.to_string(),
                        line: number,
                    }),
                });
            }
        }
    }
    if !out.is_empty() {
        return out;
    }
    // Python's own tracebacks: the last frame, then the exception line.
    // sympy's runner prints the frames without the `Traceback` header.
    let mut last_frame: Option<Frame> = None;
    let mut in_traceback = false;
    for line in output.lines() {
        if line.starts_with("Traceback (most recent call last)") {
            in_traceback = true;
            last_frame = None;
            continue;
        }
        if let Some(f) = python_frame(line) {
            in_traceback = true;
            last_frame = Some(f);
            continue;
        }
        if !in_traceback {
            continue;
        }
        if !line.starts_with(' ') {
            if let Some(exception) = exception_of(line) {
                out.push(Failure {
                    exception,
                    raised_at: last_frame.take(),
                });
                in_traceback = false;
            }
        }
    }
    out
}

/// Every frame the output's tracebacks show (pytest's location lines and
/// Python's `File` lines), in order.
pub fn frames(output: &str) -> Vec<Frame> {
    output
        .lines()
        .filter_map(|l| {
            python_frame(l).or_else(|| {
                pytest_location(l).map(|(path, line, _)| Frame {
                    path: path.to_string(),
                    line,
                })
            })
        })
        .collect()
}

/// `path` as a path of the repository: itself when it is one of `files`,
/// else the longest tail of it that is (a sandbox's absolute path, an
/// installed copy's `site-packages/pkg/mod.py`).
pub fn repository_path(path: &str, files: &BTreeSet<&str>) -> Option<String> {
    let path = path.trim_start_matches("./");
    if files.contains(path) {
        return Some(path.to_string());
    }
    path.match_indices('/')
        .map(|(i, _)| &path[i + 1..])
        .find(|tail| files.contains(tail))
        .map(str::to_string)
}

/// Whether `path` is `test_path`, or a path ending in it.
fn is_test_path(path: &str, test_path: &str) -> bool {
    let file = test_path.rsplit('/').next().unwrap_or(test_path);
    path == test_path || path.ends_with(&format!("/{file}")) || path == file
}

/// Whether `text` has `word` as a whole word.
pub fn names_word(text: &str, word: &str) -> bool {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

/// The exception of [`TEST_BUG_EXCEPTIONS`] raised in a line of the test
/// file itself, if any.
pub fn test_bug(output: &str, test_path: &str) -> Option<&'static str> {
    failures(output).into_iter().find_map(|f| {
        let at = f.raised_at?;
        is_test_path(&at.path, test_path)
            .then(|| TEST_BUG_EXCEPTIONS.iter().find(|e| **e == f.exception))
            .flatten()
            .copied()
    })
}

/// Why a test that failed on the base commit is not a reproduction of
/// the issue ("other issues" in Agentless's terms).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OtherIssues {
    /// A bug of the test: an exception raised in its own lines.
    #[error("{exception} raised in the test's own lines: the test's bug")]
    TestBug { exception: String },
    /// An exception that is no assertion and that the issue does not name,
    /// raised at `at` (`path:line`) when known.
    #[error(
        "other issues: it failed with {exception}{}, not in an assertion, and the issue names \
         no {exception}: a wrong use of the code, not the issue",
        at.as_ref().map(|a| format!(" raised at {a}")).unwrap_or_default()
    )]
    WrongUse {
        exception: String,
        at: Option<String>,
    },
    /// No failure could be read from the output.
    #[error("other issues: no assertion or exception of the issue in its failure")]
    Unread,
}

/// Judges a candidate test that failed on the base commit: `Ok` when it
/// reproduces the issue as `accept` asks, else why it is "other issues".
pub fn judge(
    output: &str,
    test_path: &str,
    issue: &str,
    accept: Accept,
) -> Result<(), OtherIssues> {
    if let Some(e) = test_bug(output, test_path) {
        return Err(OtherIssues::TestBug {
            exception: e.to_string(),
        });
    }
    if accept == Accept::Failure {
        return Ok(());
    }
    let all = failures(output);
    if all
        .iter()
        .any(|f| ASSERTION_EXCEPTIONS.contains(&f.exception.as_str()))
    {
        return Ok(());
    }
    if all.iter().any(|f| names_word(issue, &f.exception)) {
        return Ok(());
    }
    Err(match all.first() {
        Some(f) => OtherIssues::WrongUse {
            exception: f.exception.clone(),
            at: f
                .raised_at
                .as_ref()
                .map(|a| format!("{}:{}", a.path, a.line)),
        },
        None => OtherIssues::Unread,
    })
}

/// The lines of a failing run to show a model: pytest's failure reports
/// (from the first `___ name ___` header to the summary), else the last
/// traceback, else the output's end; at most [`FAILURE_LINES`] (the last
/// ones), each cut to [`FAILURE_LINE_CHARS`].
pub fn excerpt(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let start = lines
        .iter()
        .position(|l| report_header(l).is_some())
        .or_else(|| {
            lines
                .iter()
                .rposition(|l| l.starts_with("Traceback (most recent call last)"))
        })
        .unwrap_or(0);
    let end = lines
        .iter()
        .enumerate()
        .skip(start + 1)
        .find(|(_, l)| l.contains(" short test summary info ") || l.starts_with("====="))
        .map_or(lines.len(), |(i, _)| i);
    shown_lines(&lines[start..end])
}

/// The test named by a pytest failure report's `___ name ___` header.
fn report_header(line: &str) -> Option<&str> {
    let t = line.trim();
    (t.starts_with("___") && t.ends_with("___") && t.len() > 8).then(|| t.trim_matches('_').trim())
}

/// The lines of a report shown: blank lines and rules dropped, at most
/// [`FAILURE_LINES`] (the last ones), each cut to [`FAILURE_LINE_CHARS`].
fn shown_lines(report: &[&str]) -> String {
    let part: Vec<&str> = report
        .iter()
        .copied()
        .filter(|l| !l.trim().is_empty() && !l.trim().chars().all(|c| c == '_' || c == ' '))
        .collect();
    let from = part.len().saturating_sub(FAILURE_LINES);
    part[from..]
        .iter()
        .map(|l| l.chars().take(FAILURE_LINE_CHARS).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// pytest's failure report of the test `id` (`path::name` or
/// `path::Class::name`) in `output`: the lines from its `___ name ___`
/// (or `___ Class.name ___`) header to the next header or summary, shown
/// like [`excerpt_in`]'s. None when the output has no report of it (a
/// test runner other than pytest, a test that errored in collection).
pub fn test_excerpt_in(output: &str, id: &str, files: &BTreeSet<&str>) -> Option<String> {
    let (_, name) = id.split_once("::")?;
    let name = name.replace("::", ".");
    let lines: Vec<&str> = output.lines().collect();
    let start = lines
        .iter()
        .position(|l| report_header(l) == Some(name.as_str()))?;
    let end = lines
        .iter()
        .enumerate()
        .skip(start + 1)
        .find(|(_, l)| report_header(l).is_some() || l.starts_with("====="))
        .map_or(lines.len(), |(i, _)| i);
    Some(normalised(&shown_lines(&lines[start..end]), files))
}

/// [`excerpt`] made the same from run to run: absolute paths of
/// repository files (a worktree's, a sandbox's) as the repository's paths,
/// and object addresses (`0x7f…`) as `0x…`, so that a prompt showing it
/// is the same when replayed.
pub fn excerpt_in(output: &str, files: &BTreeSet<&str>) -> String {
    normalised(&excerpt(output), files)
}

/// `text` with absolute paths of repository files as the repository's
/// paths and object addresses as `0x…` (see [`excerpt_in`]).
fn normalised(text: &str, files: &BTreeSet<&str>) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let starts_path = bytes[i] == b'/' && (i == 0 || b" \t\"'(=<".contains(&bytes[i - 1]));
        if starts_path {
            let end = text[i..]
                .find(|c: char| c.is_whitespace() || "\"',:)>".contains(c))
                .map_or(text.len(), |n| i + n);
            let token = &text[i..end];
            if let Some(rel) = token
                .ends_with(".py")
                .then(|| repository_path(token, files))
                .flatten()
            {
                out.push_str(&rel);
                i = end;
                continue;
            }
        }
        if bytes[i] == b'0' && bytes.get(i + 1) == Some(&b'x') {
            let hex = text[i + 2..]
                .find(|c: char| !c.is_ascii_hexdigit())
                .map_or(text.len() - i - 2, |n| n);
            if hex >= 6 {
                out.push_str("0x…");
                i += 2 + hex;
                continue;
            }
        }
        let c = text[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Literals of a test's assertions found in the issue's text: quoted
/// strings and numbers of two or more characters on `assert` lines. A
/// test whose expectation comes from the issue scores above one that
/// made its own up.
pub fn issue_literals(test: &str, issue: &str) -> usize {
    let mut found = BTreeSet::new();
    for line in test.lines() {
        let t = line.trim_start();
        if !(t.starts_with("assert") || t.starts_with("self.assert") || t.contains("pytest.raises"))
        {
            continue;
        }
        for quote in ['"', '\''] {
            let parts: Vec<&str> = t.split(quote).collect();
            for lit in parts.iter().skip(1).step_by(2) {
                if lit.len() >= 2 && issue.contains(lit) {
                    found.insert(lit.to_string());
                }
            }
        }
        for word in t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_')) {
            let numeric = word.len() >= 2 && word.chars().all(|c| c.is_ascii_digit() || c == '.');
            let exception = exception_of(word).is_some() && !ASSERTION_EXCEPTIONS.contains(&word);
            if (numeric || exception) && names_word(issue, word) {
                found.insert(word.to_string());
            }
        }
    }
    found.len()
}

/// The test file's line where a run's first failure left it: the first
/// frame in the test file (the test function's own line, outside any
/// helper it calls).
pub fn failing_line(output: &str, test_path: &str) -> Option<usize> {
    frames(output)
        .into_iter()
        .find(|f| is_test_path(&f.path, test_path))
        .map(|f| f.line)
}

/// The test file cut after the statement at `line` (1-based): what runs
/// after the assertion that failed on the base commit never ran there, so
/// nothing says it tests the issue; a small model's test often goes on to
/// assert what the issue never asked for. `None` when no statement starts
/// at `line`, nothing follows it, or the cut file does not parse.
pub fn cut_after(text: &str, line: usize) -> Option<String> {
    let tree = crate::index::symbols::parse_tree(text)?;
    let row = line.checked_sub(1)?;
    let mut cursor = tree.walk();
    let mut end_row: Option<usize> = None;
    // The outermost statement starting on the line (a whole `with` or `if`
    // block when the line opens one).
    'walk: loop {
        let node = cursor.node();
        let r = node.start_position().row..=node.end_position().row;
        if r.contains(&row) {
            let statement =
                node.kind().ends_with("statement") || node.kind() == "decorated_definition";
            if statement && node.start_position().row == row {
                end_row = Some(node.end_position().row);
                break 'walk;
            }
            if cursor.goto_first_child() {
                continue;
            }
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                break 'walk;
            }
        }
    }
    let end_row = end_row?;
    let lines: Vec<&str> = text.lines().collect();
    if end_row + 1 >= lines.len() || lines[end_row + 1..].iter().all(|l| l.trim().is_empty()) {
        return None;
    }
    let cut = format!("{}\n", lines[..=end_row].join("\n"));
    // `has_error` counts missing nodes too (a `try` left without its
    // `except`), which an error list does not.
    crate::index::symbols::parse_tree(&cut)
        .is_some_and(|t| !t.root_node().has_error())
        .then_some(cut)
}

/// The function of the repository where a failing reproduction test's
/// traceback ends (its deepest frame in a file of `files` that is not a
/// test file), when the test crashed (an exception, not an assertion) and
/// no location covers that line: evidence that the bug is there, to add
/// to the located spans before the Fixer runs. `None` when the failures
/// are assertions, when the crash is raised in the test itself, or when
/// the frame is already located (the location confirmed).
pub fn traceback_location(
    root: &std::path::Path,
    files: &[String],
    output: &str,
    test_path: &str,
    located: &[crate::aci::Location],
) -> Option<crate::aci::Location> {
    use crate::index::symbols::{self, SymbolKind};
    // An assertion's deepest frame is where the check is (the test, or a
    // test helper of the repository such as pytest's `pytester`), not
    // where the bug is: only a crash points at the code.
    let crashes = failures(output)
        .iter()
        .any(|f| !ASSERTION_EXCEPTIONS.contains(&f.exception.as_str()));
    if !crashes {
        return None;
    }
    let known: BTreeSet<&str> = files.iter().map(String::as_str).collect();
    let frame = frames(output).into_iter().rev().find_map(|f| {
        let path = repository_path(&f.path, &known)?;
        (!crate::index::is_test_file(&path) && !is_test_path(&path, test_path))
            .then_some((path, f.line))
    })?;
    let (path, line) = frame;
    if located
        .iter()
        .any(|l| l.path == path && l.start_line <= line && line <= l.end_line)
    {
        return None;
    }
    let text = crate::aci::read_text(root, &path).ok()?;
    let file = symbols::parse_symbols(&path, &text);
    let own = file
        .symbols
        .iter()
        .filter(|s| s.kind != SymbolKind::Class && s.start_line <= line && line <= s.end_line)
        .min_by_key(|s| s.end_line - s.start_line)?;
    Some(crate::aci::Location {
        path,
        symbol: own.qualname.clone(),
        start_line: own.start_line,
        end_line: own.end_line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASSERTION: &str = "\
_________________________ test_keeps_results _________________________

    def test_keeps_results():
>       assert two(7) == 2
E       assert 1 == 2
E        +  where 1 = two(7)

tests/test_reproduce_issue.py:14: AssertionError
=========================== short test summary info ============================
FAILED tests/test_reproduce_issue.py::test_keeps_results - assert 1 == 2";

    const LIBRARY: &str = "\
_________________________ test_url _________________________

    def test_url():
>       cfg = loads(\"[db]\\nurl = a=b\\n\")

tests/test_reproduce_issue.py:5: 
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _
confkit/config.py:102: in loads
    return Config(parse_string(text))
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

    def _split_option(line):
>       key, value = line.split(sep)
E       ValueError: too many values to unpack (expected 2)

/tmp/wt/confkit/parser.py:15: ValueError
=========================== short test summary info ============================
FAILED tests/test_reproduce_issue.py::test_url - ValueError: too many values";

    const WRONG_CALL: &str = "\
_________________________ test_x _________________________

    def test_x():
>       assert f(1, colour=2) == 3
E       TypeError: f() got an unexpected keyword argument 'colour'

tests/test_reproduce_issue.py:4: TypeError
=========================== short test summary info ============================
FAILED tests/test_reproduce_issue.py::test_x - TypeError: f() got an unexpected";

    const SYMPY: &str = "\
________________________________________________________________________________
___________ sympy/core/tests/test_reproduce_issue.py:test_pickle ___________
Traceback (most recent call last):
  File \"/w/sympy/core/tests/test_reproduce_issue.py\", line 6, in test_pickle
    assert loads(dumps(x)) == x
  File \"/w/sympy/core/numbers.py\", line 1042, in __new__
    num[1] = long(num[1], 16)
ValueError: invalid literal for int() with base 10: '1L'";

    /// sympy's runner without a `Traceback` header, after a warning.
    const SYMPY_BARE: &str = "\
/w/sympy/core/basic.py:3: DeprecationWarning: Using or importing the ABCs from 'collections'
  from collections import Mapping, defaultdict
test_issue_reproduce E                                                    [FAIL]
 sympy/functions/elementary/tests/test_reproduce_issue.py:test_issue_reproduce _
  File \"/w/sympy/functions/elementary/tests/test_reproduce_issue.py\", line 11, in test_issue_reproduce
    assert coth(log(tan(2))) == 1/2
  File \"/w/sympy/functions/elementary/hyperbolic.py\", line 590, in eval
    if cotm is S.ComplexInfinity:
NameError: name 'cotm' is not defined

=========== tests finished: 0 passed, 1 exceptions, in 0.02 seconds ============";

    /// A case: its name, the output, the exception read, where it was raised.
    type FailureCase<'a> = (&'a str, &'a str, &'a str, Option<(&'a str, usize)>);

    #[test]
    fn failures_are_read_with_where_they_were_raised() {
        let cases: &[FailureCase<'_>] = &[
            (
                "assertion",
                ASSERTION,
                "AssertionError",
                Some(("tests/test_reproduce_issue.py", 14)),
            ),
            (
                "library",
                LIBRARY,
                "ValueError",
                Some(("/tmp/wt/confkit/parser.py", 15)),
            ),
            (
                "wrong call",
                WRONG_CALL,
                "TypeError",
                Some(("tests/test_reproduce_issue.py", 4)),
            ),
            (
                "python traceback",
                SYMPY,
                "ValueError",
                Some(("/w/sympy/core/numbers.py", 1042)),
            ),
            (
                "frames without a header, after a warning",
                SYMPY_BARE,
                "NameError",
                Some(("/w/sympy/functions/elementary/hyperbolic.py", 590)),
            ),
        ];
        for (name, output, exception, at) in cases {
            let got = failures(output);
            assert_eq!(got.len(), 1, "{name}: {got:?}");
            assert_eq!(got[0].exception, *exception, "{name}");
            assert_eq!(
                got[0].raised_at.as_ref().map(|f| (f.path.as_str(), f.line)),
                *at,
                "{name}"
            );
        }
    }

    #[test]
    fn the_three_outcomes() {
        let p = "tests/test_reproduce_issue.py";
        let name_error = "\
    def test_x():
>       assert memo(1) == 1
E       NameError: name 'memo' is not defined

tests/test_reproduce_issue.py:3: NameError";
        // (case, output, issue, accept, accepted)
        let cases: &[(&str, &str, &str, Accept, bool)] = &[
            (
                "an assertion",
                ASSERTION,
                "results are mixed up",
                Accept::Issue,
                true,
            ),
            (
                "the issue's exception",
                LIBRARY,
                "fails with ValueError: too many",
                Accept::Issue,
                true,
            ),
            (
                "an exception the issue does not name",
                LIBRARY,
                "fails on a URL",
                Accept::Issue,
                false,
            ),
            (
                "a wrong call",
                WRONG_CALL,
                "f returns 2",
                Accept::Issue,
                false,
            ),
            (
                "a wrong call, any failure",
                WRONG_CALL,
                "f returns 2",
                Accept::Failure,
                true,
            ),
            (
                "the test's own NameError",
                name_error,
                "NameError in memo",
                Accept::Issue,
                false,
            ),
            (
                "the test's own NameError, any failure",
                name_error,
                "x",
                Accept::Failure,
                false,
            ),
            (
                "a word that contains the name",
                LIBRARY,
                "MyValueErrors happen",
                Accept::Issue,
                false,
            ),
        ];
        for (name, output, issue, accept, want) in cases {
            let got = judge(output, p, issue, *accept);
            assert_eq!(got.is_ok(), *want, "{name}: {got:?}");
        }
    }

    #[test]
    fn repository_frames_are_found_under_any_prefix() {
        let files: BTreeSet<&str> = [
            "confkit/parser.py",
            "confkit/config.py",
            "sympy/core/numbers.py",
        ]
        .into_iter()
        .collect();
        let got: Vec<Option<String>> = frames(LIBRARY)
            .iter()
            .chain(frames(SYMPY).iter())
            .map(|f| repository_path(&f.path, &files))
            .collect();
        assert_eq!(
            got,
            [
                None,
                Some("confkit/config.py".to_string()),
                Some("confkit/parser.py".to_string()),
                None,
                Some("sympy/core/numbers.py".to_string()),
            ]
        );
    }

    #[test]
    fn the_excerpt_is_the_failure_report() {
        let e = excerpt(&format!(
            "==== test session starts ====\nplatform linux\ncollected 1 item\n\n{ASSERTION}"
        ));
        assert!(
            e.starts_with("_________________________ test_keeps_results"),
            "{e}"
        );
        assert!(
            e.ends_with("tests/test_reproduce_issue.py:14: AssertionError"),
            "{e}"
        );
        assert!(
            !e.contains("platform linux") && !e.contains("short test summary"),
            "{e}"
        );
        let long: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let e = excerpt(&format!("Traceback (most recent call last)\n{long}"));
        assert_eq!(e.lines().count(), FAILURE_LINES);
        assert!(e.ends_with("line 99"), "{e}");
    }

    #[test]
    fn one_tests_report_is_found_by_its_id() {
        let files: BTreeSet<&str> = ["pkg/a.py"].into_iter().collect();
        let output = "==== FAILURES ====\n\
            ____ test_one ____\n    def test_one():\n>       assert f() == 1\nE       assert 2 == 1\n\
            tests/test_a.py:3: AssertionError\n\
            ____ TestB.test_two[x-1] ____\n  File \"/w/judge-1-0/pkg/a.py\", line 9\nE   TypeError: no\n\
            ====== short test summary info ======\nFAILED tests/test_a.py::test_one\n";
        let cases = [
            (
                "tests/test_a.py::test_one",
                Some(
                    "____ test_one ____\n    def test_one():\n>       assert f() == 1\n\
                     E       assert 2 == 1\ntests/test_a.py:3: AssertionError",
                ),
            ),
            (
                "tests/test_a.py::TestB::test_two[x-1]",
                Some(
                    "____ TestB.test_two[x-1] ____\n  File \"pkg/a.py\", line 9\nE   TypeError: no",
                ),
            ),
            ("tests/test_a.py::test_three", None),
            ("test_one", None),
        ];
        for (id, expected) in cases {
            assert_eq!(
                test_excerpt_in(output, id, &files).as_deref(),
                expected,
                "{id}"
            );
        }
    }

    #[test]
    fn expectations_from_the_issue_count() {
        let issue =
            "print(user_email(7)) prints user-7, expected user7@example.com; raises KeyError";
        let cases: &[(&str, usize)] = &[
            ("assert user_email(7) == 'user7@example.com'", 1),
            ("assert user_email(7) == 'someone@else'", 0),
            ("with pytest.raises(KeyError):", 1),
            ("x = 'user7@example.com'", 0),
            ("assert f() == 7", 0),
        ];
        for (test, want) in cases {
            assert_eq!(issue_literals(test, issue), *want, "{test}");
        }
    }

    #[test]
    fn the_traceback_corrects_the_location() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("confkit"))?;
        let parser: String = (1..=14)
            .map(|n| {
                if n == 10 {
                    "def _split_option(line):\n".to_string()
                } else if n > 10 {
                    format!("    x = {n}\n")
                } else {
                    "\n".to_string()
                }
            })
            .collect();
        std::fs::write(
            dir.path().join("confkit/parser.py"),
            format!("{parser}    key, value = line.split(sep)\n    return key\n"),
        )?;
        std::fs::write(dir.path().join("confkit/config.py"), "")?;
        let files: Vec<String> = [
            "confkit/parser.py",
            "confkit/config.py",
            "tests/test_reproduce_issue.py",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let loc = |path: &str, symbol: &str, a: usize, b: usize| crate::aci::Location {
            path: path.into(),
            symbol: symbol.into(),
            start_line: a,
            end_line: b,
        };
        let p = "tests/test_reproduce_issue.py";
        // Located elsewhere: the frame's function is added.
        assert_eq!(
            traceback_location(
                dir.path(),
                &files,
                LIBRARY,
                p,
                &[loc("confkit/config.py", "loads", 100, 104)]
            ),
            Some(loc("confkit/parser.py", "_split_option", 10, 16))
        );
        // Located there: confirmed, nothing added.
        assert_eq!(
            traceback_location(
                dir.path(),
                &files,
                LIBRARY,
                p,
                &[loc("confkit/parser.py", "_split_option", 10, 16)]
            ),
            None
        );
        // An assertion in a helper of the repository: where the check is,
        // not the bug.
        let helper = LIBRARY
            .replace(
                "ValueError: too many values to unpack (expected 2)",
                "AssertionError",
            )
            .replace("parser.py:15: ValueError", "parser.py:15: AssertionError");
        assert_eq!(
            traceback_location(
                dir.path(),
                &files,
                &helper,
                p,
                &[loc("confkit/config.py", "loads", 100, 104)]
            ),
            None
        );
        // Raised in the test: no evidence of a place.
        assert_eq!(
            traceback_location(dir.path(), &files, ASSERTION, p, &[]),
            None
        );
        Ok(())
    }

    #[test]
    fn a_test_is_cut_after_the_assertion_that_failed() {
        let test = "from m import f\n\n\ndef test_a():\n    x = f(\n        1,\n    )\n    assert x == 2\n    assert f(3) == 9\n    f.clear()\n\n\ndef test_b():\n    assert f(0) == 0\n";
        let cases: &[(&str, usize, Option<&str>)] = &[
            ("the first assertion", 8, Some("from m import f\n\n\ndef test_a():\n    x = f(\n        1,\n    )\n    assert x == 2\n")),
            ("a statement over three lines", 5, Some("from m import f\n\n\ndef test_a():\n    x = f(\n        1,\n    )\n")),
            ("inside a statement", 6, None),
            ("the last line", 14, None),
        ];
        for (name, line, want) in cases {
            assert_eq!(cut_after(test, *line).as_deref(), *want, "{name}");
        }
        assert_eq!(
            failing_line(ASSERTION, "tests/test_reproduce_issue.py"),
            Some(14)
        );
        assert_eq!(
            failing_line(LIBRARY, "tests/test_reproduce_issue.py"),
            Some(5)
        );
    }

    #[test]
    fn an_excerpt_is_the_same_from_run_to_run() {
        let files: BTreeSet<&str> = ["confkit/parser.py"].into_iter().collect();
        let output = "___ test_a ___\n  File \"/tmp/x1/scratch/judge-1-2/confkit/parser.py\", line 3\nE   assert <function f at 0x7fb2190816c0> == 1\n/tmp/x1/site/other.py:4: in g\n";
        assert_eq!(
            excerpt_in(output, &files),
            "___ test_a ___\n  File \"confkit/parser.py\", line 3\nE   assert <function f at 0x…> == 1\n/tmp/x1/site/other.py:4: in g"
        );
    }
}
