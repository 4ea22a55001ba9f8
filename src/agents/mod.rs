//! The agents: the ReAct loop they share (`react`), its history processing
//! (`history`), and the agents themselves — each a role, a command set, a
//! demonstration and a task.

pub mod budget;
pub mod call;
pub mod code;
pub mod evidence;
pub mod fixer;
pub mod history;
pub mod judge;
pub mod localize;
pub mod missing;
pub mod parallel;
pub mod preamble;
pub mod ranker;
pub mod react;
pub mod reproduce;
pub mod shown;
pub mod template;
pub mod workplace;

use crate::aci::command::{EXPLORE, NAMES};
use crate::dataset::Issue;
use react::{Agent, TaskText};

/// A worked example of the reply format for an agent that edits, on a made-up
/// repository.
pub const EDIT_DEMONSTRATION: &str = r#"ISSUE: Square.area() returns the perimeter instead of the area.

The issue names Square.area, so I will find that method.

```
search_method area Square
```
OBSERVATION:
Found 1 methods named "area" in class "Square":
geometry/square.py::Square.area  (lines 8-9)
8:    def area(self):
9:        return 4 * self.side
(Open file: n/a)

Line 9 computes the perimeter; I will open the file there to edit it.

```
open geometry/square.py 9
```
OBSERVATION:
[File: geometry/square.py (12 lines total)]
1:class Square:
...
8:    def area(self):
9:        return 4 * self.side
...
(Open file: geometry/square.py)

The area is the side squared, so line 9 becomes side * side.

```
edit 9:9
        return self.side * self.side
end_of_edit
```
OBSERVATION:
[File: geometry/square.py (12 lines total)]
...
9:        return self.side * self.side
...
File updated. Please review the changes and make sure they are correct (correct indentation, no duplicate lines, etc). Edit the file again if necessary.
(Open file: geometry/square.py)

The fix is in place, so I submit.

```
submit
```"#;

/// An agent that resolves an issue on its own with every command: the
/// SWE-agent setting, used to drive the interface end to end.
pub fn solver(issue: &Issue) -> Agent<'static> {
    Agent {
        name: "solver",
        role: "You fix the issue above by editing the repository's source files, then submit.",
        commands: NAMES,
        demonstration: EDIT_DEMONSTRATION,
        task: TaskText::new(
            issue,
            "Find the code that causes the issue, edit it to fix the issue, then submit.",
        ),
    }
}

/// Exploring, writing a test file, running it, handing it in.
const TEST_WRITER: &[&str] = &[
    "open",
    "goto",
    "scroll_down",
    "find_file",
    "search_dir",
    "view_skeleton",
    "view_symbol",
    "create",
    "edit",
    "run",
    "submit_test",
];

const TEST_DEMONSTRATION: &str = r#"ISSUE: Square.area() returns the perimeter instead of the area.

I look for the existing tests to copy their style.

```
find_file test_*.py
```
OBSERVATION:
Found 1 matches for "test_*.py" in the repository root:
tests/test_square.py
(Open file: n/a)

I write a new test file next to it.

```
create tests/test_issue.py
```
OBSERVATION:
[File: tests/test_issue.py (1 lines total)]
1:
(Open file: tests/test_issue.py)

The test builds a square of side 3 and expects area 9.

```
edit 1:1
from geometry.square import Square


def test_area_of_square():
    assert Square(3).area() == 9
end_of_edit
```
OBSERVATION:
[File: tests/test_issue.py (5 lines total)]
...
File updated. Please review the changes and make sure they are correct (correct indentation, no duplicate lines, etc). Edit the file again if necessary.
(Open file: tests/test_issue.py)

I hand in the test with the command that runs it.

```
submit_test tests/test_issue.py python -m pytest -q tests/test_issue.py
```"#;

/// MASAI's Test Template Generator: a minimal passing test in the
/// repository's style, and the command that runs it.
/// How `submit_test` will run a test file (the repository's own test
/// command, when its environment has one), told to the test writers.
fn runs_with(test_cmd: Option<&str>) -> String {
    match test_cmd {
        Some(cmd) => format!(
            "\n\nThis repository's tests run with `{cmd} PATH`; submit_test runs your file that \
             way, whatever COMMAND you give."
        ),
        None => String::new(),
    }
}

pub fn test_template(issue: &Issue, test_cmd: Option<&str>) -> Agent<'static> {
    Agent {
        name: "test_template",
        role: "You find out how this repository's tests are written and run, then write a \
               minimal test file that PASSES, and hand it in with the command that runs it.",
        commands: TEST_WRITER,
        demonstration: TEST_DEMONSTRATION,
        task: TaskText::new(
            issue,
            format!(
                "The repository has the issue above: do not fix it, and do not test it yet. \
                 Write a new minimal test file that imports the package and PASSES, in the \
                 style of the existing tests, then hand it in with submit_test PATH COMMAND (for \
                 example python -m pytest -q PATH).{}",
                runs_with(test_cmd)
            ),
        ),
    }
}

/// MASAI's Issue Reproducer: a test that fails on the base commit because
/// of the issue.
pub fn reproducer(
    issue: &Issue,
    template: Option<&crate::aci::SubmittedTest>,
    test_cmd: Option<&str>,
) -> Agent<'static> {
    let template = match template {
        Some(t) => format!(
            "A test that passes in this repository, run with `{}`:\n{}:\n{}\n\n",
            t.command,
            t.path,
            t.text.trim_end()
        ),
        None => String::new(),
    };
    Agent {
        name: "reproducer",
        role: "You write a test that reproduces the issue above: it must FAIL on the current \
               code because of the issue, and would pass once the issue is fixed. You do not fix \
               the issue.",
        commands: TEST_WRITER,
        demonstration: TEST_DEMONSTRATION,
        task: TaskText::new(
            issue,
            format!(
                "{template}Write a new test file whose test fails because of the issue, \
                 then hand it in with submit_test PATH COMMAND. It is checked: it must run, and \
                 fail (not crash on an import or a typo).{}",
                runs_with(test_cmd)
            ),
        ),
    }
}

const LOCATE_DEMONSTRATION: &str = r#"ISSUE: Square.area() returns the perimeter instead of the area.

The issue names Square.area; I look at its file's outline.

```
view_skeleton geometry/square.py
```
OBSERVATION:
[Skeleton of geometry/square.py (12 lines total): classes and functions, bodies left out]
1:class Square:  # lines 1-12
4:    def __init__(self, side):  # lines 4-5
8:    def area(self):  # lines 8-9
11:    def perimeter(self):  # lines 11-12
(Open file: n/a)

I read the method to confirm.

```
view_symbol geometry/square.py::Square.area
```
OBSERVATION:
[Symbol geometry/square.py::Square.area (lines 8-9 of 12)]
8:    def area(self):
9:        return 4 * self.side
(Open file: n/a)

This is where the fix goes.

```
locate geometry/square.py::Square.area
```
OBSERVATION:
Recorded location 1: geometry/square.py::Square.area (lines 8-9). Record another place with locate, or submit.
(Open file: n/a)

That is the only place to change.

```
submit
```"#;

/// MASAI's Edit Localizer: the functions, methods or classes to edit,
/// chosen among those that exist.
pub fn localizer(issue: &Issue) -> Agent<'static> {
    static COMMANDS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let commands = COMMANDS.get_or_init(|| {
        let mut c = EXPLORE.to_vec();
        c.extend(["locate", "submit"]);
        c
    });
    Agent {
        name: "localizer",
        role: "You find where in the repository's source code the issue above must be fixed. \
               You do not edit anything.",
        commands,
        demonstration: LOCATE_DEMONSTRATION,
        task: TaskText::new(
            issue,
            format!(
                "Find the functions or methods that must change to fix the issue. Record \
                 each with locate PATH::NAME (at most {}), then submit.",
                crate::aci::MAX_LOCATIONS
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    /// The sources that solve a task: every agent, and the pipelines that
    /// drive them. They take a `dataset::Issue`, which has no answer in it.
    const SOLVERS: [(&str, &str); 24] = [
        ("src/agents/mod.rs", include_str!("mod.rs")),
        ("src/agents/budget.rs", include_str!("budget.rs")),
        ("src/agents/call.rs", include_str!("call.rs")),
        ("src/agents/evidence.rs", include_str!("evidence.rs")),
        ("src/agents/fixer/mod.rs", include_str!("fixer/mod.rs")),
        ("src/agents/code.rs", include_str!("code.rs")),
        (
            "src/agents/fixer/prompt.rs",
            include_str!("fixer/prompt.rs"),
        ),
        ("src/agents/fixer/reply.rs", include_str!("fixer/reply.rs")),
        (
            "src/agents/fixer/rounds.rs",
            include_str!("fixer/rounds.rs"),
        ),
        ("src/agents/history.rs", include_str!("history.rs")),
        ("src/agents/judge.rs", include_str!("judge.rs")),
        ("src/agents/localize.rs", include_str!("localize.rs")),
        ("src/agents/missing.rs", include_str!("missing.rs")),
        ("src/agents/parallel.rs", include_str!("parallel.rs")),
        ("src/agents/preamble.rs", include_str!("preamble.rs")),
        ("src/agents/ranker.rs", include_str!("ranker.rs")),
        ("src/agents/react.rs", include_str!("react.rs")),
        ("src/agents/reproduce.rs", include_str!("reproduce.rs")),
        ("src/agents/shown.rs", include_str!("shown.rs")),
        ("src/agents/workplace.rs", include_str!("workplace.rs")),
        ("src/agents/template.rs", include_str!("template.rs")),
        (
            "src/pipeline/masai.rs",
            include_str!("../pipeline/masai.rs"),
        ),
        (
            "src/pipeline/first.rs",
            include_str!("../pipeline/first.rs"),
        ),
        (
            "src/pipeline/stage.rs",
            include_str!("../pipeline/stage.rs"),
        ),
    ];

    /// `source` without its comments (`//` to the end of the line, and
    /// `/* ... */`). A `//` inside a string literal cuts the line short,
    /// which only hides code from the check below; none of these files has
    /// one before a name that matters.
    fn code(source: &str) -> String {
        let mut out = String::new();
        let mut rest = source;
        while let Some(start) = rest.find("/*") {
            out.push_str(&rest[..start]);
            rest = rest[start..]
                .find("*/")
                .map_or("", |end| &rest[start + end + 2..]);
        }
        out.push_str(rest);
        out.lines()
            .map(|line| line.find("//").map_or(line, |i| &line[..i]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn no_solver_names_the_task_with_its_answer() {
        // Spelled in two halves so that this test does not name it either.
        let task = concat!("Ta", "sk");
        for (path, source) in SOLVERS {
            for (n, line) in code(source).lines().enumerate() {
                let named = line
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|word| word == task);
                assert!(
                    !named,
                    "{path}:{}: names `{task}`, which holds the gold patch and the tests; \
                     take a `dataset::Issue` instead: {line}",
                    n + 1
                );
            }
        }
    }

    #[test]
    fn every_agent_file_is_checked() -> Result<(), Box<dyn std::error::Error>> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        let mut dirs = vec![root.join("src/agents")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path.strip_prefix(root)?.to_string_lossy().into_owned());
                }
            }
        }
        files.sort();
        let mut listed: Vec<String> = SOLVERS
            .iter()
            .map(|(path, _)| path.to_string())
            .filter(|path| path.starts_with("src/agents/"))
            .collect();
        listed.sort();
        assert_eq!(listed, files, "add the new agent file to SOLVERS");
        Ok(())
    }

    #[test]
    fn comments_are_not_code() {
        let task = concat!("Ta", "sk");
        let source = format!("/// the {task}\nlet a = 1; // a {task}\n/* {task} */ let b = 2;\n");
        let code = code(&source);
        assert!(!code.contains(task), "{code}");
        assert!(code.contains("let a = 1;") && code.contains("let b = 2;"));
    }
}

/// The stages' prompts side by side: here, above the stages, because the
/// test builds each stage's messages.
#[cfg(test)]
mod shared_prefix_tests {
    use super::budget::fake::Fake;
    use super::preamble::SYSTEM;
    use crate::engine::Message;

    /// The stages' prompts of one demo-like task, built as each stage
    /// builds them, share the system message and the user message through
    /// the end of the issue; the reproducer's and the fixer's share the
    /// located code too, and differ from there on.
    #[test]
    fn every_stage_of_a_task_starts_with_the_same_prefix() -> Result<(), Box<dyn std::error::Error>>
    {
        use crate::aci::Location;
        use crate::agents::fixer::{self, Distinct, EditFormat, Fixes};
        use crate::agents::{localize, ranker, reproduce};
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("pkg"))?;
        std::fs::write(
            dir.path().join("pkg/card.py"),
            "class Card:\n    def split(self):\n        return 2\n",
        )?;
        let locs = [Location {
            path: "pkg/card.py".into(),
            symbol: "Card.split".into(),
            start_line: 2,
            end_line: 3,
        }];
        let issue =
            "Card.split returns 2; it should return 1.\n\n```\nassert Card().split() == 1\n```\n";
        let localizer = localize::messages(issue, "[1] pkg/card.py::Card.split (lines 2-3)\n", 2);
        let sections = fixer::code_sections(dir.path(), &locs, true);
        let reproducer = reproduce::messages(
            issue,
            &sections,
            Some(("tests/test_card.py", "from pkg.card import Card\n")),
            "tests/test_issue.py",
        );
        let conversation = Fake::new(8192, "");
        let fixer = fixer::fit_prompt(
            &conversation,
            dir.path(),
            issue,
            &locs,
            512,
            EditFormat::Lines,
        )?;
        assert_eq!(fixer.trim, None);
        let fixes = Fixes {
            candidates: Vec::new(),
            distinct: vec![
                Distinct::new("--- a\n+++ b\n".into(), 0),
                Distinct::new("--- c\n+++ d\n".into(), 1),
            ],
            ..Fixes::empty(EditFormat::Lines)
        };
        let ranker = ranker::compare_messages(issue, &fixes, &[0, 1]);
        let prompts = [&localizer, &reproducer, &fixer.messages, &ranker];
        let preamble = "ISSUE:\nCard.split returns 2; it should return 1.\n\n```\nassert \
                        Card().split() == 1\n```\n\n";
        let code = "THE CODE THE ISSUE IS ABOUT (the numbers left of `| ` are line numbers, not \
                    part of the files):\n\npkg/card.py::Card.split (lines 1-3)\n```python\n1| \
                    class Card:\n2|     def split(self):\n3|         return 2\n```\n\n";
        for (i, m) in prompts.iter().enumerate() {
            assert_eq!(m.len(), 2, "{i}");
            assert_eq!(m[0], Message::system(SYSTEM), "{i}");
            assert!(m[1].content.starts_with(preamble), "{i}: {}", m[1].content);
        }
        // Where each pair's user messages part: right after the issue
        // (or the `You ` their roles start with), the reproducer and the
        // fixer after the code too.
        let common =
            |a: &str, b: &str| a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        let cases = [
            (0, 1, preamble.len()),
            (0, 2, preamble.len()),
            (0, 3, preamble.len() + "You ".len()),
            (1, 2, preamble.len() + code.len() + "You ".len()),
            (1, 3, preamble.len()),
            (2, 3, preamble.len()),
        ];
        for (a, b, shared) in cases {
            let (x, y) = (&prompts[a][1].content, &prompts[b][1].content);
            assert_eq!(common(x, y), shared, "{a} and {b}:\n{x}\n---\n{y}");
        }
        assert!(reproducer[1].content[preamble.len()..].starts_with(code));
        Ok(())
    }
}
