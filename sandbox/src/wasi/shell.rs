//! The WASI tier's shell: a small, explicit subset of POSIX sh that the
//! callers' `bash -c SCRIPT` commands are read as, turned into a [`Plan`]
//! before anything runs. Whatever is outside the subset (pipes,
//! redirections, subshells, command substitution, parameter expansion,
//! globs, other programs) is refused with [`SandboxError::Unsupported`].
//!
//! The subset: commands one per line, or joined by `&&` or `;`; blank
//! lines and `#` comments; words quoted with `'...'`, `"..."` and `\` as
//! POSIX sh does; `set` with `-e`, `-u`, `-x`, `-o pipefail` (and `+`
//! forms); `export K=V`/`export K`; `K=V` assignments, alone or before a
//! Python command; `cd DIR`; `source FILE`/`. FILE` of an `activate`
//! script and `conda activate NAME` (no-ops: this tier has no virtual
//! environments, the policy's environment is the Python's); `exit [N]`;
//! and the Python commands `python`, `python3`, `python3.N`, a path ending
//! in one of those, and the console scripts the policy's runtime maps to
//! a module (`WasiRuntime::modules`: the caller's `pytest` runs as
//! `python -m pytest`).

use std::collections::BTreeMap;

use crate::error::SandboxError;

/// The tier name the refusals carry.
const TIER: &str = "wasi";

/// One command of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `set` options: `errexit` is `Some(true)` for `-e`, `Some(false)` for
    /// `+e`, `None` when the command does not mention it; `xtrace` alike.
    Set {
        /// `-e` / `+e`.
        errexit: Option<bool>,
        /// `-x` / `+x`.
        xtrace: Option<bool>,
    },
    /// `export` and bare assignments: variables to set (exported: every
    /// variable reaches the Python commands that follow).
    Assign(Vec<(String, String)>),
    /// `cd DIR` (relative to the current directory).
    Cd(String),
    /// `source .../activate`, `. activate`, `conda activate NAME`: nothing
    /// to do on this tier (no virtual environments).
    Activate(String),
    /// `exit [N]`.
    Exit(i32),
    /// A Python run: variables set for this command only, and the
    /// interpreter's arguments (after the program name).
    Python {
        /// `K=V` prefixes.
        env: Vec<(String, String)>,
        /// Arguments after `python` (`-m pytest ...` for `pytest`).
        args: Vec<String>,
    },
}

/// Commands joined by `&&`: each runs only if the one before succeeded.
pub type AndList = Vec<Step>;

/// A parsed script: and-lists separated by `;` or newlines, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The and-lists.
    pub lists: Vec<AndList>,
}

/// A token of the script.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    AndAnd,
    /// `;` or a newline.
    Sep,
}

fn refuse(command: &str, reason: impl Into<String>) -> SandboxError {
    SandboxError::Unsupported {
        tier: TIER,
        command: command.trim().to_string(),
        reason: reason.into(),
    }
}

/// The line of `script` holding byte `at`, for messages.
fn line_at(script: &str, at: usize) -> &str {
    let start = script[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = script[at..].find('\n').map_or(script.len(), |i| at + i);
    &script[start..end]
}

/// Splits `script` into words and operators, refusing what needs a real
/// shell. Pure.
fn tokenize(script: &str) -> Result<Vec<Token>, SandboxError> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    // Whether a word is being built (an empty quoted word counts).
    let mut in_word = false;
    let chars: Vec<(usize, char)> = script.char_indices().collect();
    let mut i = 0;
    let finish = |word: &mut String, in_word: &mut bool, tokens: &mut Vec<Token>| {
        if *in_word {
            tokens.push(Token::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while i < chars.len() {
        let (at, c) = chars[i];
        let here = || line_at(script, at);
        match c {
            ' ' | '\t' => {
                finish(&mut word, &mut in_word, &mut tokens);
                i += 1;
            }
            '\n' => {
                finish(&mut word, &mut in_word, &mut tokens);
                tokens.push(Token::Sep);
                i += 1;
            }
            ';' => {
                finish(&mut word, &mut in_word, &mut tokens);
                if chars.get(i + 1).map(|p| p.1) == Some(';') {
                    return Err(refuse(here(), "uses `;;` (a case statement)"));
                }
                tokens.push(Token::Sep);
                i += 1;
            }
            '&' => {
                finish(&mut word, &mut in_word, &mut tokens);
                if chars.get(i + 1).map(|p| p.1) == Some('&') {
                    tokens.push(Token::AndAnd);
                    i += 2;
                } else {
                    return Err(refuse(here(), "runs a command in the background (&)"));
                }
            }
            '#' if !in_word => {
                // A comment runs to the end of the line.
                while i < chars.len() && chars[i].1 != '\n' {
                    i += 1;
                }
            }
            '|' => {
                let what = if chars.get(i + 1).map(|p| p.1) == Some('|') {
                    "uses `||`"
                } else {
                    "uses a pipe (|)"
                };
                return Err(refuse(here(), what));
            }
            '<' | '>' => return Err(refuse(here(), "uses a redirection (< or >)")),
            '(' | ')' => return Err(refuse(here(), "uses a subshell or a function ( )")),
            '`' => return Err(refuse(here(), "uses command substitution (`...`)")),
            '{' | '}' => return Err(refuse(here(), "uses braces { }")),
            '*' | '?' | '[' => {
                return Err(refuse(
                    here(),
                    "uses a glob (*, ? or [) that would need expanding: quote it, or name the \
                     files",
                ))
            }
            '~' if !in_word => {
                return Err(refuse(here(), "uses ~, which would need expanding"));
            }
            '$' => {
                if expands(chars.get(i + 1).map(|p| p.1)) {
                    return Err(refuse(
                        here(),
                        "uses $ expansion (variables, $(...)): write the value out",
                    ));
                }
                word.push('$');
                in_word = true;
                i += 1;
            }
            '\\' => {
                match chars.get(i + 1).map(|p| p.1) {
                    // A line continuation.
                    Some('\n') => {}
                    Some(n) => {
                        word.push(n);
                        in_word = true;
                    }
                    None => {
                        word.push('\\');
                        in_word = true;
                    }
                }
                i += 2;
            }
            '\'' => {
                in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(refuse(here(), "has an unterminated ' quote")),
                        Some((_, '\'')) => {
                            i += 1;
                            break;
                        }
                        Some((_, q)) => {
                            word.push(*q);
                            i += 1;
                        }
                    }
                }
            }
            '"' => {
                in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(refuse(here(), "has an unterminated \" quote")),
                        Some((_, '"')) => {
                            i += 1;
                            break;
                        }
                        Some((_, '\\')) => {
                            match chars.get(i + 1).map(|p| p.1) {
                                Some(e @ ('$' | '`' | '"' | '\\')) => word.push(e),
                                Some('\n') => {}
                                Some(other) => {
                                    word.push('\\');
                                    word.push(other);
                                }
                                None => return Err(refuse(here(), "has an unterminated \" quote")),
                            }
                            i += 2;
                        }
                        Some((_, '$')) if expands(chars.get(i + 1).map(|p| p.1)) => {
                            return Err(refuse(
                                here(),
                                "uses $ expansion (variables, $(...)): write the value out",
                            ));
                        }
                        Some((_, '`')) => {
                            return Err(refuse(here(), "uses command substitution (`...`)"))
                        }
                        Some((_, q)) => {
                            word.push(*q);
                            i += 1;
                        }
                    }
                }
            }
            other => {
                word.push(other);
                in_word = true;
                i += 1;
            }
        }
    }
    finish(&mut word, &mut in_word, &mut tokens);
    Ok(tokens)
}

/// Whether `$` followed by `next` is an expansion in sh (a name, a
/// special parameter, `${`, `$(`); a lone `$` is literal.
fn expands(next: Option<char>) -> bool {
    matches!(next, Some(c) if c.is_ascii_alphanumeric()
        || matches!(c, '_' | '{' | '(' | '@' | '*' | '#' | '?' | '$' | '!' | '-'))
}

/// `NAME=VALUE` with a valid sh name, split.
fn assignment(word: &str) -> Option<(String, String)> {
    let (name, value) = word.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    if !(first.is_ascii_alphabetic() || first == '_')
        || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return None;
    }
    Some((name.to_string(), value.to_string()))
}

/// Whether `program` names a Python interpreter: `python`, `python3`,
/// `python3.N`, or a path ending in one of those. Pure.
pub fn is_python(program: &str) -> bool {
    let base = program.rsplit('/').next().unwrap_or(program);
    let Some(rest) = base.strip_prefix("python") else {
        return false;
    };
    if rest.is_empty() || rest == "3" {
        return true;
    }
    match rest.strip_prefix("3.") {
        Some(minor) => !minor.is_empty() && minor.chars().all(|c| c.is_ascii_digit()),
        None => false,
    }
}

/// The module `program` (a name, or a path ending in one) runs as, when
/// `modules` maps it.
fn module_of<'a>(program: &str, modules: &'a BTreeMap<String, String>) -> Option<&'a str> {
    let base = program.rsplit('/').next().unwrap_or(program);
    modules.get(base).map(String::as_str)
}

/// The [`Step`] of one simple command's words; `modules` are the console
/// scripts run as `python -m MODULE`. Pure.
fn step(words: &[String], modules: &BTreeMap<String, String>) -> Result<Step, SandboxError> {
    let shown = words.join(" ");
    let mut env = Vec::new();
    let mut rest = words;
    while let Some((first, tail)) = rest.split_first() {
        match assignment(first) {
            Some(kv) => {
                env.push(kv);
                rest = tail;
            }
            None => break,
        }
    }
    let Some((program, args)) = rest.split_first() else {
        return Ok(Step::Assign(env));
    };
    let builtin = |s: Step| {
        if env.is_empty() {
            Ok(s)
        } else {
            Err(refuse(
                &shown,
                "sets variables before a shell builtin: use export",
            ))
        }
    };
    match program.as_str() {
        "set" => {
            let mut errexit = None;
            let mut xtrace = None;
            let mut it = args.iter();
            while let Some(a) = it.next() {
                let (on, flags) = match (a.strip_prefix('-'), a.strip_prefix('+')) {
                    (Some(f), _) => (true, f),
                    (_, Some(f)) => (false, f),
                    _ => return Err(refuse(&shown, format!("passes `set` the argument {a}"))),
                };
                for f in flags.chars() {
                    match f {
                        'e' => errexit = Some(on),
                        'x' => xtrace = Some(on),
                        'u' => {}
                        'o' => match it.next().map(String::as_str) {
                            Some("pipefail" | "errexit" | "nounset" | "xtrace") => {}
                            other => {
                                return Err(refuse(
                                    &shown,
                                    format!("passes `set -o` the option {other:?}"),
                                ))
                            }
                        },
                        other => {
                            return Err(refuse(&shown, format!("passes `set` the flag {other}")))
                        }
                    }
                }
            }
            builtin(Step::Set { errexit, xtrace })
        }
        "export" => {
            let mut vars = Vec::new();
            for a in args {
                match assignment(a) {
                    Some(kv) => vars.push(kv),
                    None if assignment(&format!("{a}=")).is_some() => {}
                    None => return Err(refuse(&shown, format!("exports {a}, not NAME=VALUE"))),
                }
            }
            builtin(Step::Assign(vars))
        }
        "cd" => match args {
            [dir] if dir != "-" => builtin(Step::Cd(dir.clone())),
            _ => Err(refuse(&shown, "is a cd without exactly one directory")),
        },
        "source" | "." => match args.first() {
            Some(file) if file.rsplit('/').next() == Some("activate") => {
                builtin(Step::Activate(shown.clone()))
            }
            _ => Err(refuse(
                &shown,
                "sources a file other than a virtual environment's activate script",
            )),
        },
        "conda" if args.first().map(String::as_str) == Some("activate") => {
            builtin(Step::Activate(shown.clone()))
        }
        "exit" => match args {
            [] => builtin(Step::Exit(0)),
            [n] => match n.parse::<i32>() {
                Ok(code) => builtin(Step::Exit(code & 0xff)),
                Err(_) => Err(refuse(&shown, "exits with a status that is not a number")),
            },
            _ => Err(refuse(&shown, "passes exit more than one argument")),
        },
        p if is_python(p) => Ok(Step::Python {
            env,
            args: args.to_vec(),
        }),
        p => match module_of(p, modules) {
            Some(module) => {
                let mut all = vec!["-m".to_string(), module.to_string()];
                all.extend(args.iter().cloned());
                Ok(Step::Python { env, args: all })
            }
            None => Err(refuse(&shown, "is not Python")),
        },
    }
}

/// Reads `script` as the subset of sh this tier runs (`modules` as in
/// [`parse_argv`]). Pure: nothing runs, and a script with any refused
/// command is refused whole.
pub fn parse_script(
    script: &str,
    modules: &BTreeMap<String, String>,
) -> Result<Plan, SandboxError> {
    let tokens = tokenize(script)?;
    let mut plan = Plan::default();
    let mut list: AndList = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut after_and = false;
    for t in tokens.into_iter().chain(std::iter::once(Token::Sep)) {
        match t {
            Token::Word(w) => words.push(w),
            Token::AndAnd => {
                if words.is_empty() {
                    return Err(refuse(script, "has && without a command before it"));
                }
                list.push(step(&words, modules)?);
                words.clear();
                after_and = true;
            }
            Token::Sep => {
                if words.is_empty() {
                    if after_and {
                        // `a &&` then a newline: sh continues on the next line.
                        continue;
                    }
                    if !list.is_empty() {
                        plan.lists.push(std::mem::take(&mut list));
                    }
                    continue;
                }
                list.push(step(&words, modules)?);
                words.clear();
                after_and = false;
                plan.lists.push(std::mem::take(&mut list));
            }
        }
    }
    if after_and {
        return Err(refuse(script, "ends with &&"));
    }
    Ok(plan)
}

/// The plan of a direct argv (no shell): a Python command, or `bash -c
/// SCRIPT` / `sh -c SCRIPT` read by [`parse_script`]; a console script of
/// `modules` runs as `python -m MODULE`. Pure.
pub fn parse_argv(
    argv: &[String],
    modules: &BTreeMap<String, String>,
) -> Result<Plan, SandboxError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(SandboxError::invalid(
            "the command is empty: pass at least the program to run",
        ));
    };
    let base = program.rsplit('/').next().unwrap_or(program);
    if matches!(base, "bash" | "sh") {
        return match args {
            [flag, script, ..] if flag == "-c" => parse_script(script, modules),
            _ => Err(refuse(
                &argv.join(" "),
                "runs a shell without -c SCRIPT (scripts from files are not read)",
            )),
        };
    }
    let s = step(argv, modules)?;
    match s {
        Step::Python { .. } => Ok(Plan {
            lists: vec![vec![s]],
        }),
        _ => Err(refuse(
            &argv.join(" "),
            "is a shell builtin outside a shell",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The console scripts of the tests: pytest's.
    fn modules() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("pytest".to_string(), "pytest".to_string()),
            ("py.test".to_string(), "pytest".to_string()),
        ])
    }

    fn py(args: &[&str]) -> Step {
        Step::Python {
            env: Vec::new(),
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn scripts_parse_to_plans() {
        let cases: Vec<(&str, Vec<AndList>)> = vec![
            ("python -c 'print(1)'", vec![vec![py(&["-c", "print(1)"])]]),
            (
                "set -euxo pipefail\nsource /venv/bin/activate\ncd /w/sub && pytest -rA 'tests/test_a.py::t[1]'\n",
                vec![
                    vec![Step::Set {
                        errexit: Some(true),
                        xtrace: Some(true),
                    }],
                    vec![Step::Activate("source /venv/bin/activate".into())],
                    vec![
                        Step::Cd("/w/sub".into()),
                        py(&["-m", "pytest", "-rA", "tests/test_a.py::t[1]"]),
                    ],
                ],
            ),
            (
                "# a comment\n\n  export A=1 B='two words'; K=V python3.11 x.py arg#1 # trailing\n",
                vec![
                    vec![Step::Assign(vec![
                        ("A".into(), "1".into()),
                        ("B".into(), "two words".into()),
                    ])],
                    vec![Step::Python {
                        env: vec![("K".into(), "V".into())],
                        args: vec!["x.py".into(), "arg#1".into()],
                    }],
                ],
            ),
            (
                r#"/usr/bin/python3 -c "print(\"a\\b\$\")" && py.test -x"#,
                vec![vec![
                    py(&["-c", r#"print("a\b$")"#]),
                    py(&["-m", "pytest", "-x"]),
                ]],
            ),
            (
                "python a.py &&\n  python b.py\nexit 3",
                vec![
                    vec![py(&["a.py"]), py(&["b.py"])],
                    vec![Step::Exit(3)],
                ],
            ),
            (
                ". activate; conda activate testbed; python -m mod\\\n arg ''",
                vec![
                    vec![Step::Activate(". activate".into())],
                    vec![Step::Activate("conda activate testbed".into())],
                    vec![py(&["-m", "mod", "arg", ""])],
                ],
            ),
            ("set +e -u", vec![vec![Step::Set {
                errexit: Some(false),
                xtrace: None,
            }]]),
            ("python -c x $", vec![vec![py(&["-c", "x", "$"])]]),
            ("A=1", vec![vec![Step::Assign(vec![("A".into(), "1".into())])]]),
            ("", vec![]),
        ];
        for (script, want) in cases {
            match parse_script(script, &modules()) {
                Ok(plan) => assert_eq!(plan.lists, want, "{script:?}"),
                Err(e) => panic!("{script:?}: {e}"),
            }
        }
    }

    #[test]
    fn what_needs_a_real_shell_is_refused_naming_the_tier() {
        let cases: &[(&str, &str, &str)] = &[
            ("grep -rn foo .", "grep -rn foo .", "is not Python"),
            (
                "python a.py | head",
                "python a.py | head",
                "uses a pipe (|)",
            ),
            (
                "python a.py > out",
                "python a.py > out",
                "uses a redirection (< or >)",
            ),
            ("python a.py || true", "python a.py || true", "uses `||`"),
            (
                "python a.py &",
                "python a.py &",
                "runs a command in the background (&)",
            ),
            (
                "(cd x; python a)",
                "(cd x; python a)",
                "uses a subshell or a function ( )",
            ),
            (
                "python $(which x)",
                "python $(which x)",
                "uses $ expansion (variables, $(...)): write the value out",
            ),
            (
                "cd \"$HOME\"",
                "cd \"$HOME\"",
                "uses $ expansion (variables, $(...)): write the value out",
            ),
            (
                "python `x`",
                "python `x`",
                "uses command substitution (`...`)",
            ),
            (
                "pytest tests/*.py",
                "pytest tests/*.py",
                "uses a glob (*, ? or [) that would need expanding: quote it, or name the files",
            ),
            ("cd ~/x", "cd ~/x", "uses ~, which would need expanding"),
            ("python 'a", "python 'a", "has an unterminated ' quote"),
            ("python a.py\ngit diff", "git diff", "is not Python"),
            (
                "source env.sh",
                "source env.sh",
                "sources a file other than a virtual environment's activate script",
            ),
            (
                "set -o posix",
                "set -o posix",
                "passes `set -o` the option Some(\"posix\")",
            ),
            ("cd", "cd", "is a cd without exactly one directory"),
            (
                "A=1 cd x",
                "A=1 cd x",
                "sets variables before a shell builtin: use export",
            ),
            ("python a &&", "python a &&", "ends with &&"),
            ("pythonx a", "pythonx a", "is not Python"),
        ];
        for (script, command, reason) in cases {
            match parse_script(script, &modules()) {
                Err(SandboxError::Unsupported {
                    tier,
                    command: c,
                    reason: r,
                }) => {
                    assert_eq!(tier, "wasi", "{script}");
                    assert_eq!(c, *command, "{script}");
                    assert_eq!(r, *reason, "{script}");
                }
                other => panic!("{script}: {other:?}"),
            }
        }
        let e = parse_script("grep -rn foo .", &modules())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "the wasi sandbox runs only Python (python, python3, python -m MODULE, and the \
             console scripts its policy runs as modules), one command per line or joined by && \
             or ;, with cd, export, set and source/. of an activate script; `grep -rn foo .` is \
             not Python: nothing was run"
        );
    }

    #[test]
    fn argv_forms() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_argv(&s(&["python3", "-c", "pass"]), &modules())
                .unwrap()
                .lists,
            vec![vec![py(&["-c", "pass"])]]
        );
        assert_eq!(
            parse_argv(&s(&["/bin/bash", "-c", "pytest -q"]), &modules())
                .unwrap()
                .lists,
            vec![vec![py(&["-m", "pytest", "-q"])]]
        );
        // A console script runs only when the policy maps it to a module.
        assert!(matches!(
            parse_argv(&s(&["pytest", "-q"]), &BTreeMap::new()),
            Err(SandboxError::Unsupported { .. })
        ));
        assert_eq!(
            parse_argv(&s(&["/venv/bin/py.test"]), &modules())
                .unwrap()
                .lists,
            vec![vec![py(&["-m", "pytest"])]]
        );
        for bad in [&["ls", "-la"][..], &["bash", "run.sh"], &["cd", "/"]] {
            assert!(
                matches!(
                    parse_argv(&s(bad), &modules()),
                    Err(SandboxError::Unsupported { .. })
                ),
                "{bad:?}"
            );
        }
        let names = [
            ("python", true),
            ("python3", true),
            ("python3.11", true),
            ("/opt/venv/bin/python3.12", true),
            ("python3.", false),
            ("python2", false),
            ("python3-config", false),
            ("ipython", false),
        ];
        for (n, want) in names {
            assert_eq!(is_python(n), want, "{n}");
        }
    }
}
