//! A reproduction test's missing imports, completed. Small models often
//! use a name of the repository in a test without importing it
//! (`max_satisfying`, a test helper class): the test then fails with a
//! `NameError`, a bug of the test that says nothing of the issue. Python's
//! message names the missing name; when exactly one module of the
//! repository defines it at its top level, the test gets
//! `from MODULE import NAME` and runs again. It is what SWE-agent's linter
//! reports as an undefined name, mended without a model call; a name the
//! repository does not define, or defines in several modules, is left as
//! it is.

use std::path::Path;

use crate::index::{imports, is_test_file};

/// Times a test's imports are completed: each run names one missing name.
/// Two cover a test that forgot both the function under test and a helper;
/// each is one more run of the test on the base commit.
pub const COMPLETION_ROUNDS: usize = 2;

/// Files larger than this are not searched for definitions (generated
/// tables, vendored bundles).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The name of the first `NameError: name 'NAME' is not defined` in a
/// test run's `output`.
pub fn undefined_name(output: &str) -> Option<&str> {
    const LEAD: &str = "NameError: name '";
    let at = output.find(LEAD)? + LEAD.len();
    let rest = &output[at..];
    let name = &rest[..rest.find('\'')?];
    let valid = name
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    (valid && rest[name.len()..].starts_with("' is not defined")).then_some(name)
}

/// Whether `line` (at the top level of a module) defines `name`: a
/// function, a class, or an assignment.
fn defines(line: &str, name: &str) -> bool {
    let rest = line
        .strip_prefix("def ")
        .or_else(|| line.strip_prefix("async def "))
        .or_else(|| line.strip_prefix("class "))
        .unwrap_or(line);
    let Some(after) = rest.strip_prefix(name) else {
        return false;
    };
    if rest.len() == line.len() {
        // An assignment: `NAME = …` or `NAME: type = …`, not `NAME == …`.
        let after = after.trim_start();
        (after.starts_with('=') && !after.starts_with("==")) || after.starts_with(':')
    } else {
        after.starts_with('(') || after.starts_with(':')
    }
}

/// `from MODULE import NAME` for the one module of the repository at
/// `root` that defines `name` at its top level; `files` are the
/// repository's `.py` files, `test_path` the test's own. Modules that are
/// not tests are looked at first, then test modules (never `conftest.py`,
/// which is not imported by name). None when no module defines it, or
/// when several do: a short name (`x`, defined at the top of many of
/// sympy's modules) is more often one the test forgot to define than one
/// it forgot to import, and a guessed module would import the wrong thing.
pub fn import_for(root: &Path, files: &[String], name: &str, test_path: &str) -> Option<String> {
    import_among(files, name, test_path, |f| {
        let path = root.join(f);
        let small = std::fs::metadata(&path).is_ok_and(|m| m.len() <= MAX_FILE_BYTES);
        small.then(|| std::fs::read_to_string(&path).ok()).flatten()
    })
}

/// [`import_for`] over files read by `read`.
fn import_among(
    files: &[String],
    name: &str,
    test_path: &str,
    read: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let defining: Vec<&String> = files
        .iter()
        .filter(|f| f.as_str() != test_path && !f.ends_with("conftest.py"))
        .filter(|f| read(f).is_some_and(|text| text.lines().any(|l| defines(l, name))))
        .collect();
    let (tests, modules): (Vec<&String>, Vec<&String>) =
        defining.into_iter().partition(|f| is_test_file(f));
    let module = match (modules.as_slice(), tests.as_slice()) {
        ([one], _) | ([], [one]) => imports::module_name(one, files)?,
        _ => return None,
    };
    Some(format!("from {module} import {name}"))
}

/// `text` with the import `line` added: before its first import that is
/// not a `__future__` one, else after its leading comments, docstring and
/// `__future__` imports.
pub fn with_import(text: &str, line: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let is_import = |l: &str| {
        (l.starts_with("import ") || l.starts_with("from ")) && !l.starts_with("from __future__")
    };
    let at = lines.iter().position(|l| is_import(l)).unwrap_or_else(|| {
        let mut at = 0;
        let mut in_docstring = false;
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim();
            let quotes = t.matches("\"\"\"").count() + t.matches("'''").count();
            if in_docstring {
                in_docstring = quotes % 2 == 0;
                at = i + 1;
            } else if t.starts_with("\"\"\"") || t.starts_with("'''") {
                in_docstring = quotes % 2 == 1;
                at = i + 1;
            } else if t.is_empty() || t.starts_with('#') || t.starts_with("from __future__") {
                at = i + 1;
            } else {
                break;
            }
        }
        at
    });
    let mut out: Vec<&str> = lines[..at].to_vec();
    out.push(line);
    out.extend_from_slice(&lines[at..]);
    let mut text = out.join("\n");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_name_is_read_from_pythons_message() {
        let cases = [
            (
                "E       NameError: name 'max_satisfying' is not defined\ntests/t.py:8: NameError",
                Some("max_satisfying"),
            ),
            (
                "ERROR tests/t.py - NameError: name 'FakeClock' is not defined",
                Some("FakeClock"),
            ),
            (
                "NameError: free variable 'x' referenced before assignment",
                None,
            ),
            ("NameError: name 'a b' is not defined", None),
            ("AssertionError: name 'x' is not defined", None),
        ];
        for (output, want) in cases {
            assert_eq!(undefined_name(output), want, "{output}");
        }
    }

    #[test]
    fn definitions_at_the_top_level() {
        let cases = [
            ("def parse(text):", true),
            ("async def parse(text):", true),
            ("class parse:", true),
            ("class parse(Base):", true),
            ("parse = make_parser()", true),
            ("parse: Parser = make()", true),
            ("parse == 1", false),
            ("def parser(text):", false),
            ("    def parse(self):", false),
            ("parsed = 1", false),
        ];
        for (line, want) in cases {
            assert_eq!(defines(line, "parse"), want, "{line}");
        }
    }

    #[test]
    fn the_import_comes_from_the_defining_module() {
        let files: Vec<String> = [
            "semverkit/__init__.py",
            "semverkit/ranges.py",
            "semverkit/version.py",
            "other/__init__.py",
            "other/deep/__init__.py",
            "other/deep/ranges.py",
            "tests/conftest.py",
            "tests/test_ttl.py",
            "tests/test_version.py",
            "tests/test_reproduce_issue.py",
        ]
        .map(String::from)
        .to_vec();
        let read = |f: &str| -> Option<String> {
            Some(
                match f {
                    "semverkit/ranges.py" => "def max_satisfying(versions, spec):\n    pass\n",
                    "other/deep/ranges.py" => "def max_satisfying(v, s):\n    pass\n",
                    "semverkit/version.py" => {
                        "class Version:\n    def parse(self):\n        pass\n"
                    }
                    "tests/conftest.py" => "class Clock:\n    pass\n",
                    "tests/test_ttl.py" => "class FakeClock:\n    pass\n",
                    "tests/test_version.py" => "class Version:\n    pass\n",
                    "tests/test_reproduce_issue.py" => "def helper():\n    pass\n",
                    _ => "",
                }
                .to_string(),
            )
        };
        let cases = [
            // Two modules define it: which one is a guess.
            ("max_satisfying", None),
            // A module's definition wins over a test module's.
            ("Version", Some("from semverkit.version import Version")),
            ("FakeClock", Some("from test_ttl import FakeClock")),
            // A method is not importable; conftest is not imported by
            // name; the test's own definitions are not its missing names.
            ("parse", None),
            ("Clock", None),
            ("helper", None),
        ];
        for (name, want) in cases {
            assert_eq!(
                import_among(&files, name, "tests/test_reproduce_issue.py", read).as_deref(),
                want,
                "{name}"
            );
        }
        // With one of the two gone, the other is the import.
        let only = |f: &str| {
            read(f).map(|t| {
                if f == "other/deep/ranges.py" {
                    String::new()
                } else {
                    t
                }
            })
        };
        assert_eq!(
            import_among(
                &files,
                "max_satisfying",
                "tests/test_reproduce_issue.py",
                only
            )
            .as_deref(),
            Some("from semverkit.ranges import max_satisfying")
        );
    }

    #[test]
    fn the_import_goes_with_the_others() {
        let line = "from m import f";
        let cases = [
            (
                "import pytest\n\ndef test_a():\n    f()\n",
                "from m import f\nimport pytest\n\ndef test_a():\n    f()\n",
            ),
            (
                "from __future__ import annotations\nfrom a import b\n",
                "from __future__ import annotations\nfrom m import f\nfrom a import b\n",
            ),
            (
                "\"\"\"Doc\nstring.\"\"\"\n# c\n\ndef test_a():\n    f()\n",
                "\"\"\"Doc\nstring.\"\"\"\n# c\n\nfrom m import f\ndef test_a():\n    f()\n",
            ),
            (
                "def test_a():\n    f()",
                "from m import f\ndef test_a():\n    f()\n",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(with_import(text, line), want, "{text}");
        }
    }
}
