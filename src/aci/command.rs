//! The commands of the interface: their text form (what the model writes
//! and what `patchwright aci` reads), parsing, documentation, and the typed
//! argument lists the grammar is built from.

use crate::engine::grammar::{Action, Arg};

/// Ends the replacement text of `edit`.
pub const END_OF_EDIT: &str = "end_of_edit";
/// Opens the old text of `str_replace`.
pub const SEARCH_MARKER: &str = "<<<<<<< SEARCH";
/// Separates the old and new text of `str_replace`.
pub const DIVIDER: &str = "=======";
/// Ends the new text of `str_replace`.
pub const REPLACE_MARKER: &str = ">>>>>>> REPLACE";

/// One command of the interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Open {
        path: String,
        line: Option<usize>,
    },
    Goto {
        line: usize,
    },
    ScrollUp,
    ScrollDown,
    FindFile {
        name: String,
        dir: Option<String>,
    },
    SearchDir {
        text: String,
        dir: Option<String>,
    },
    SearchFile {
        text: String,
        path: Option<String>,
    },
    ViewSkeleton {
        path: String,
    },
    ViewSymbol {
        path: String,
        symbol: String,
    },
    SearchClass {
        name: String,
    },
    SearchMethod {
        name: String,
        class: Option<String>,
    },
    /// Replace lines `start..=end` of the open file (`end = start - 1`
    /// inserts before `start`).
    Edit {
        start: usize,
        end: usize,
        text: String,
    },
    StrReplace {
        path: String,
        old: String,
        new: String,
    },
    Create {
        path: String,
    },
    Run {
        command: String,
    },
    Submit,
    /// Hand in a test file and the command that runs it (the test
    /// template generator and the reproducer end with it).
    SubmitTest {
        path: String,
        command: String,
    },
    /// Record a location to edit (the edit localizer).
    Locate {
        path: String,
        symbol: String,
    },
}

/// How many of [`NAMES`], from the start, only look at the repository
/// (the viewer, the searches, the lazy views).
pub const EXPLORING: usize = 11;

/// The commands that look without changing anything.
pub const EXPLORE: &[&str] = NAMES.split_at(EXPLORING).0;

/// Every command name, in the order the documentation lists them: the
/// exploring ones first.
pub const NAMES: &[&str] = &[
    "open",
    "goto",
    "scroll_up",
    "scroll_down",
    "find_file",
    "search_dir",
    "search_file",
    "view_skeleton",
    "view_symbol",
    "search_class",
    "search_method",
    "edit",
    "str_replace",
    "create",
    "run",
    "submit",
    "submit_test",
    "locate",
];

/// The documentation shown to the model, one entry per command.
pub fn doc(name: &str) -> &'static str {
    match name {
        "open" => "open PATH [LINE]\n  Opens the file at PATH and shows a window of lines around LINE (default: the top).",
        "goto" => "goto LINE\n  Moves the window of the open file to show LINE.",
        "scroll_up" => "scroll_up\n  Moves the window up by one window's height.",
        "scroll_down" => "scroll_down\n  Moves the window down by one window's height.",
        "find_file" => "find_file NAME [DIR]\n  Finds files named NAME (wildcards * and ? allowed) under DIR (default: the repository root).",
        "search_dir" => "search_dir TEXT [DIR]\n  Lists the files under DIR containing TEXT, with counts. Quote TEXT if it has spaces: search_dir \"def parse\".",
        "search_file" => "search_file TEXT [PATH]\n  Lists the lines of PATH (default: the open file) containing TEXT.",
        "view_skeleton" => "view_skeleton PATH\n  Shows the classes and functions of a Python file with their signatures and line numbers, bodies left out.",
        "view_symbol" => "view_symbol PATH::NAME\n  Shows the whole source of one class, function or method, e.g. view_symbol pkg/mod.py::Parser.parse.",
        "search_class" => "search_class NAME\n  Finds the classes named NAME in the repository and lists their methods.",
        "search_method" => "search_method NAME [CLASS]\n  Finds the functions and methods named NAME (only in class CLASS if given).",
        "edit" => "edit START:END\nREPLACEMENT LINES\nend_of_edit\n  Replaces lines START to END of the open file with the lines that follow, up to end_of_edit. Indentation matters. END = START - 1 inserts before START. An edit that breaks the Python syntax is refused.",
        "str_replace" => "str_replace PATH\n<<<<<<< SEARCH\nOLD LINES\n=======\nNEW LINES\n>>>>>>> REPLACE\n  Replaces the old lines, which must appear exactly once in PATH, with the new lines.",
        "create" => "create PATH\n  Creates an empty file at PATH and opens it; then use edit 1:1 to write it.",
        "run" => "run COMMAND\n  Runs a shell command in the repository (in a sandbox without network) and shows its output.",
        "submit" => "submit\n  Ends the session; your changes to the files are the result.",
        "submit_test" => "submit_test PATH COMMAND\n  Hands in the test file PATH and the shell COMMAND that runs it; the command is run to check it, and you are told if it does not do what was asked.",
        "locate" => "locate PATH::NAME\n  Records the function, method or class NAME in PATH as a place to edit. Use it once per place, then submit.",
        _ => "",
    }
}

/// The documentation of `names`, blank-line separated.
pub fn docs(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| doc(n))
        .filter(|d| !d.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// What the grammar may offer for each argument that names something that
/// exists.
#[derive(Debug, Clone, Default)]
pub struct Choices {
    /// Files of the repository (paths relative to its root).
    pub files: Vec<String>,
    /// Python files among them.
    pub python_files: Vec<String>,
    /// Directories, `.` included.
    pub dirs: Vec<String>,
    /// `path::Class.method` of every symbol of the code index, when there
    /// are few enough to offer as a choice; empty otherwise (then a symbol
    /// argument is an existing Python file and any dotted name).
    pub symbols: Vec<String>,
    /// The symbols `locate` may record: those of [`Choices::symbols`] outside
    /// test files (see `index::candidates::is_excluded`).
    pub locatable: Vec<String>,
    /// The Python files `locate` may name when there are too many symbols
    /// to offer: [`Choices::python_files`] without test files.
    pub locatable_files: Vec<String>,
}

/// The typed action set of `names`, with paths restricted to `choices`.
/// A command whose choice list would be empty (no Python file for
/// `view_skeleton`) is left out.
pub fn actions(names: &[&str], choices: &Choices) -> Vec<Action> {
    let files = || Arg::Choice(choices.files.clone());
    let python = || Arg::Choice(choices.python_files.clone());
    let dirs = || Arg::Optional(Box::new(Arg::Choice(choices.dirs.clone())));
    let optional = |arg: Arg| Arg::Optional(Box::new(arg));
    let symbol = || {
        if choices.symbols.is_empty() {
            Arg::Symbol(choices.python_files.clone())
        } else {
            Arg::Choice(choices.symbols.clone())
        }
    };
    let locatable = || {
        if choices.symbols.is_empty() {
            Arg::Symbol(choices.locatable_files.clone())
        } else {
            Arg::Choice(choices.locatable.clone())
        }
    };
    let mut out = Vec::new();
    for &name in names {
        let needs_files = matches!(name, "open" | "search_file" | "str_replace" | "submit_test");
        let needs_python = matches!(name, "view_skeleton" | "view_symbol" | "locate");
        let needs_locatable = name == "locate"
            && if choices.symbols.is_empty() {
                choices.locatable_files.is_empty()
            } else {
                choices.locatable.is_empty()
            };
        if (needs_files && choices.files.is_empty())
            || (needs_python && choices.python_files.is_empty())
            || needs_locatable
        {
            continue;
        }
        let args = match name {
            "open" => vec![files(), optional(Arg::Integer)],
            "goto" => vec![Arg::Integer],
            "scroll_up" | "scroll_down" | "submit" => vec![],
            "find_file" => vec![Arg::Term, dirs()],
            "search_dir" => vec![Arg::Term, dirs()],
            "search_file" => vec![Arg::Term, optional(files())],
            "view_skeleton" => vec![python()],
            "view_symbol" => vec![symbol()],
            "locate" => vec![locatable()],
            "search_class" => vec![Arg::Identifier],
            "search_method" => vec![Arg::Identifier, optional(Arg::Identifier)],
            "edit" => vec![Arg::Range, Arg::Lines(END_OF_EDIT.into())],
            "str_replace" => vec![files(), Arg::SearchReplace],
            "create" => vec![Arg::Word],
            "run" => vec![Arg::Text],
            "submit_test" => vec![files(), Arg::Text],
            _ => continue,
        };
        out.push(Action {
            name: name.to_string(),
            args,
        });
    }
    out
}

/// Why a command's text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("empty command")]
    Empty,
    #[error("unknown command `{0}`; the commands are: {list}", list = NAMES.join(", "))]
    Unknown(String),
    #[error("{command}: {message}; usage: {usage}", usage = doc(.command).lines().next().unwrap_or(""))]
    Usage {
        command: &'static str,
        message: String,
    },
}

/// The terminator line a command's body ends with, if its first line
/// starts a multi-line command.
pub fn body_terminator(first_line: &str) -> Option<&'static str> {
    match first_line.split_whitespace().next() {
        Some("edit") => Some(END_OF_EDIT),
        Some("str_replace") => Some(REPLACE_MARKER),
        _ => None,
    }
}

/// Reads the text of the next command from `lines` (as `patchwright aci`
/// reads stdin): blank lines are skipped; `edit` and `str_replace` take
/// the lines that follow through their terminator line. `None` at the end.
pub fn read_command<I>(lines: &mut I) -> Option<std::io::Result<String>>
where
    I: Iterator<Item = std::io::Result<String>>,
{
    let first = loop {
        match lines.next()? {
            Ok(l) if l.trim().is_empty() => continue,
            Ok(l) => break l,
            Err(e) => return Some(Err(e)),
        }
    };
    let mut text = format!("{first}\n");
    if let Some(terminator) = body_terminator(&first) {
        for line in lines.by_ref() {
            match line {
                Ok(l) => {
                    let done = l == terminator;
                    text.push_str(&l);
                    text.push('\n');
                    if done {
                        break;
                    }
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
    Some(Ok(text))
}

/// Splits `s` into a term (a word, or a double-quoted string) and the rest.
fn term(s: &str) -> Option<(String, &str)> {
    let s = s.trim_start();
    if let Some(quoted) = s.strip_prefix('"') {
        let end = quoted.find('"')?;
        if end == 0 {
            return None;
        }
        return Some((quoted[..end].to_string(), &quoted[end + 1..]));
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    Some((s[..end].to_string(), &s[end..]))
}

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

impl Command {
    /// Parses one command: its line, and for `edit` and `str_replace` the
    /// lines of its body through the terminator.
    pub fn parse(text: &str) -> Result<Command, ParseError> {
        let text = text.trim_end_matches('\n');
        let (first, body) = match text.split_once('\n') {
            Some((f, b)) => (f, Some(b)),
            None => (text, None),
        };
        let first = first.trim();
        let (name, rest) = match first.split_once(char::is_whitespace) {
            Some((n, r)) => (n, r.trim()),
            None => (first, ""),
        };
        if name.is_empty() {
            return Err(ParseError::Empty);
        }
        let Some(&command) = NAMES.iter().find(|&&n| n == name) else {
            return Err(ParseError::Unknown(name.to_string()));
        };
        let usage = |message: &str| ParseError::Usage {
            command,
            message: message.to_string(),
        };
        if body.is_some() && body_terminator(first).is_none() {
            return Err(usage("takes one line; write one command per reply"));
        }
        let number = |s: &str, what: &str| -> Result<usize, ParseError> {
            s.parse::<usize>()
                .map_err(|_| usage(&format!("{what} must be a number, not `{s}`")))
        };
        let w = words(rest);
        let cmd = match command {
            "open" => match w.as_slice() {
                [path] => Command::Open {
                    path: path.to_string(),
                    line: None,
                },
                [path, line] => Command::Open {
                    path: path.to_string(),
                    line: Some(number(line, "LINE")?),
                },
                _ => return Err(usage("expects a path and an optional line number")),
            },
            "goto" => match w.as_slice() {
                [line] => Command::Goto {
                    line: number(line, "LINE")?,
                },
                _ => return Err(usage("expects one line number")),
            },
            "scroll_up" | "scroll_down" | "submit" => {
                if !w.is_empty() {
                    return Err(usage("takes no arguments"));
                }
                match command {
                    "scroll_up" => Command::ScrollUp,
                    "scroll_down" => Command::ScrollDown,
                    _ => Command::Submit,
                }
            }
            "find_file" | "search_dir" | "search_file" => {
                let (text, rest) = term(rest).ok_or_else(|| usage("expects a search term"))?;
                let extra = words(rest);
                if extra.len() > 1 {
                    return Err(usage(
                        "takes a term and at most one path; quote a term with spaces",
                    ));
                }
                let place = extra.first().map(|s| s.to_string());
                match command {
                    "find_file" => Command::FindFile {
                        name: text,
                        dir: place,
                    },
                    "search_dir" => Command::SearchDir { text, dir: place },
                    _ => Command::SearchFile { text, path: place },
                }
            }
            "view_skeleton" => match w.as_slice() {
                [path] => Command::ViewSkeleton {
                    path: path.to_string(),
                },
                _ => return Err(usage("expects one path")),
            },
            "view_symbol" | "locate" => match w.as_slice() {
                [target] => match target.split_once("::") {
                    Some((path, symbol)) if !path.is_empty() && !symbol.is_empty() => {
                        let (path, symbol) = (path.to_string(), symbol.to_string());
                        if command == "locate" {
                            Command::Locate { path, symbol }
                        } else {
                            Command::ViewSymbol { path, symbol }
                        }
                    }
                    _ => return Err(usage("expects PATH::NAME")),
                },
                _ => return Err(usage("expects PATH::NAME")),
            },
            "submit_test" => match rest.split_once(char::is_whitespace) {
                Some((path, cmd)) if !cmd.trim().is_empty() => Command::SubmitTest {
                    path: path.to_string(),
                    command: cmd.trim().to_string(),
                },
                _ => return Err(usage("expects a path and a command")),
            },
            "search_class" => match w.as_slice() {
                [name] => Command::SearchClass {
                    name: name.to_string(),
                },
                _ => return Err(usage("expects one class name")),
            },
            "search_method" => match w.as_slice() {
                [name] => Command::SearchMethod {
                    name: name.to_string(),
                    class: None,
                },
                [name, class] => Command::SearchMethod {
                    name: name.to_string(),
                    class: Some(class.to_string()),
                },
                _ => return Err(usage("expects a name and an optional class")),
            },
            "edit" => {
                let range = match w.as_slice() {
                    [range] => *range,
                    _ => return Err(usage("expects START:END on the first line")),
                };
                let (start, end) = range
                    .split_once(':')
                    .ok_or_else(|| usage("expects START:END on the first line"))?;
                let (start, end) = (number(start, "START")?, number(end, "END")?);
                let lines: Vec<&str> = body.map(|b| b.split('\n').collect()).unwrap_or_default();
                let Some(at) = lines.iter().position(|l| *l == END_OF_EDIT) else {
                    return Err(usage(
                        "the replacement lines must end with a line `end_of_edit`",
                    ));
                };
                if lines[at + 1..].iter().any(|l| !l.trim().is_empty()) {
                    return Err(usage(
                        "text after `end_of_edit`; write one command per reply",
                    ));
                }
                Command::Edit {
                    start,
                    end,
                    text: lines[..at].iter().map(|l| format!("{l}\n")).collect(),
                }
            }
            "str_replace" => {
                let path = match w.as_slice() {
                    [path] => path.to_string(),
                    _ => return Err(usage("expects one path on the first line")),
                };
                let lines: Vec<&str> = body.map(|b| b.split('\n').collect()).unwrap_or_default();
                let marker = |m: &str, from: usize| {
                    lines[from..].iter().position(|l| *l == m).map(|i| i + from)
                };
                let (Some(s), Some(d), Some(r)) = (
                    marker(SEARCH_MARKER, 0),
                    marker(DIVIDER, 0),
                    marker(REPLACE_MARKER, 0),
                ) else {
                    return Err(usage("expects a SEARCH/REPLACE block after the path"));
                };
                let ordered = s == 0 && s < d && d < r;
                if !ordered || lines[r + 1..].iter().any(|l| !l.trim().is_empty()) {
                    return Err(usage(
                        "expects exactly one SEARCH/REPLACE block after the path",
                    ));
                }
                let join = |ls: &[&str]| ls.iter().map(|l| format!("{l}\n")).collect::<String>();
                Command::StrReplace {
                    path,
                    old: join(&lines[s + 1..d]),
                    new: join(&lines[d + 1..r]),
                }
            }
            "create" => match w.as_slice() {
                [path] => Command::Create {
                    path: path.to_string(),
                },
                _ => return Err(usage("expects one path")),
            },
            "run" => {
                if rest.is_empty() {
                    return Err(usage("expects a shell command"));
                }
                Command::Run {
                    command: rest.to_string(),
                }
            }
            _ => return Err(ParseError::Unknown(name.to_string())),
        };
        Ok(cmd)
    }

    /// The command's name.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Open { .. } => "open",
            Command::Goto { .. } => "goto",
            Command::ScrollUp => "scroll_up",
            Command::ScrollDown => "scroll_down",
            Command::FindFile { .. } => "find_file",
            Command::SearchDir { .. } => "search_dir",
            Command::SearchFile { .. } => "search_file",
            Command::ViewSkeleton { .. } => "view_skeleton",
            Command::ViewSymbol { .. } => "view_symbol",
            Command::SearchClass { .. } => "search_class",
            Command::SearchMethod { .. } => "search_method",
            Command::Edit { .. } => "edit",
            Command::StrReplace { .. } => "str_replace",
            Command::Create { .. } => "create",
            Command::Run { .. } => "run",
            Command::Submit => "submit",
            Command::SubmitTest { .. } => "submit_test",
            Command::Locate { .. } => "locate",
        }
    }
}

/// A model's reply split into its thought and the text of its command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    pub thought: String,
    pub command: String,
}

/// Splits a reply of the turn format (a thought, then one command in a
/// three-backtick fence). `None` when there is no complete fenced command.
pub fn split_turn(reply: &str) -> Option<Turn> {
    let open = reply.find("```")?;
    let after = &reply[open + 3..];
    // An optional language tag, then the newline that starts the command.
    let start = after.find('\n')?;
    let body = &after[start + 1..];
    // The closing fence is the last one: an edit body may itself hold ```.
    let close = body.rfind("```")?;
    let command = body[..close].to_string();
    if command.trim().is_empty() {
        return None;
    }
    Some(Turn {
        thought: reply[..open].trim().to_string(),
        command,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_offers_no_test_file() {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let with_symbols = Choices {
            files: strings(&["a.py", "tests/test_a.py"]),
            python_files: strings(&["a.py", "tests/test_a.py"]),
            dirs: strings(&["."]),
            symbols: strings(&["a.py::f", "tests/test_a.py::test_f"]),
            locatable: strings(&["a.py::f"]),
            locatable_files: strings(&["a.py"]),
        };
        let args = |choices: &Choices, name: &str| {
            actions(&[name], choices).into_iter().next().map(|a| a.args)
        };
        let cases = [
            (
                &with_symbols,
                "locate",
                Some(vec![Arg::Choice(strings(&["a.py::f"]))]),
            ),
            (
                &with_symbols,
                "view_symbol",
                Some(vec![Arg::Choice(strings(&[
                    "a.py::f",
                    "tests/test_a.py::test_f",
                ]))]),
            ),
        ];
        for (choices, name, want) in cases {
            assert_eq!(args(choices, name), want, "{name}");
        }
        // Too many symbols to list: a dotted name in a non-test file.
        let many = Choices {
            symbols: Vec::new(),
            locatable: Vec::new(),
            ..with_symbols.clone()
        };
        assert_eq!(
            args(&many, "locate"),
            Some(vec![Arg::Symbol(strings(&["a.py"]))])
        );
        // Only test files: no locate command at all.
        let only_tests = Choices {
            locatable: Vec::new(),
            locatable_files: Vec::new(),
            ..with_symbols.clone()
        };
        assert_eq!(args(&only_tests, "locate"), None);
    }

    #[test]
    fn commands_parse() {
        let cases: Vec<(&str, Command)> = vec![
            (
                "open a.py",
                Command::Open {
                    path: "a.py".into(),
                    line: None,
                },
            ),
            (
                "open a.py 12",
                Command::Open {
                    path: "a.py".into(),
                    line: Some(12),
                },
            ),
            ("goto 7", Command::Goto { line: 7 }),
            ("scroll_down", Command::ScrollDown),
            (
                "find_file *.py src",
                Command::FindFile {
                    name: "*.py".into(),
                    dir: Some("src".into()),
                },
            ),
            (
                "search_dir \"def parse\" pkg",
                Command::SearchDir {
                    text: "def parse".into(),
                    dir: Some("pkg".into()),
                },
            ),
            (
                "search_file cache",
                Command::SearchFile {
                    text: "cache".into(),
                    path: None,
                },
            ),
            (
                "view_symbol a/b.py::C.m",
                Command::ViewSymbol {
                    path: "a/b.py".into(),
                    symbol: "C.m".into(),
                },
            ),
            (
                "search_method get Cache",
                Command::SearchMethod {
                    name: "get".into(),
                    class: Some("Cache".into()),
                },
            ),
            (
                "edit 3:4\n    x = 1\nend_of_edit\n",
                Command::Edit {
                    start: 3,
                    end: 4,
                    text: "    x = 1\n".into(),
                },
            ),
            (
                "edit 3:4\nend_of_edit",
                Command::Edit {
                    start: 3,
                    end: 4,
                    text: String::new(),
                },
            ),
            (
                "str_replace a.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\ny = 3\n>>>>>>> REPLACE\n",
                Command::StrReplace {
                    path: "a.py".into(),
                    old: "x = 1\n".into(),
                    new: "x = 2\ny = 3\n".into(),
                },
            ),
            (
                "run python -m pytest -q tests",
                Command::Run {
                    command: "python -m pytest -q tests".into(),
                },
            ),
            ("submit", Command::Submit),
            (
                "submit_test tests/test_x.py python -m pytest -q tests/test_x.py",
                Command::SubmitTest {
                    path: "tests/test_x.py".into(),
                    command: "python -m pytest -q tests/test_x.py".into(),
                },
            ),
            (
                "locate a/b.py::C.m",
                Command::Locate {
                    path: "a/b.py".into(),
                    symbol: "C.m".into(),
                },
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(Command::parse(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn bad_commands_say_why() {
        let cases = [
            ("", "empty command"),
            ("ls -la", "unknown command `ls`"),
            (
                "goto x",
                "goto: LINE must be a number, not `x`; usage: goto LINE",
            ),
            (
                "edit 1:2\nx = 1",
                "edit: the replacement lines must end with a line `end_of_edit`",
            ),
            ("view_symbol a.py", "view_symbol: expects PATH::NAME"),
            ("submit now", "submit: takes no arguments"),
            (
                "open a.py\nopen b.py",
                "open: takes one line; write one command per reply",
            ),
        ];
        for (text, message) in cases {
            let err = Command::parse(text).unwrap_err().to_string();
            assert!(err.starts_with(message), "{text:?}: {err}");
        }
    }

    #[test]
    fn the_exploring_commands_are_the_viewer_searches_and_views() {
        assert_eq!(EXPLORE.first(), Some(&"open"));
        assert_eq!(EXPLORE.last(), Some(&"search_method"));
        assert!(!EXPLORE.contains(&"edit"));
    }

    #[test]
    fn commands_are_read_line_by_line() {
        let input = "\nopen a.py\nedit 1:1\nx = 1\n\nend_of_edit\nsubmit\n";
        let mut lines = input.lines().map(|l| Ok(l.to_string()));
        let mut got = Vec::new();
        while let Some(c) = read_command(&mut lines) {
            got.push(c.unwrap());
        }
        assert_eq!(
            got,
            [
                "open a.py\n",
                "edit 1:1\nx = 1\n\nend_of_edit\n",
                "submit\n"
            ]
        );
    }

    #[test]
    fn turns_split_into_thought_and_command() {
        let t = split_turn("Look at it.\n\n```\nopen a.py\n```").unwrap();
        assert_eq!(t.thought, "Look at it.");
        assert_eq!(t.command, "open a.py\n");
        assert_eq!(split_turn("no command here"), None);
        assert_eq!(split_turn("x\n```\n```"), None);
    }
}
