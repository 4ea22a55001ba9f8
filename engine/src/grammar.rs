//! GBNF grammars for llama.cpp's grammar sampler: a choice among given
//! strings (real paths, real symbols), SEARCH/REPLACE edit blocks over given
//! paths, and one command of an action set with typed arguments.
//!
//! Every repetition is bounded: a sampled output under an unbounded `*` can
//! run to the token cap without closing.

/// Longest line inside a SEARCH or REPLACE section, in characters.
pub const MAX_LINE_CHARS: usize = 200;
/// Most lines in one SEARCH or REPLACE section.
pub const MAX_BLOCK_LINES: usize = 40;
/// Most SEARCH/REPLACE blocks in one reply.
pub const MAX_BLOCKS: usize = 4;
/// Longest free-text argument of a command, in characters.
pub const MAX_TEXT_CHARS: usize = 300;
/// Longest word argument of a command, in characters.
pub const MAX_WORD_CHARS: usize = 120;
/// Most digits of an integer argument.
pub const MAX_DIGITS: usize = 9;
/// Most lines of a multi-line command body (an edit's replacement, a
/// SEARCH or REPLACE section of `str_replace`): enough for a test file, few
/// enough that a reply cannot run away.
pub const MAX_BODY_LINES: usize = 80;
/// Longest thought before a command, in characters.
pub const MAX_THOUGHT_CHARS: usize = 400;
/// Options above which a choice is written as a prefix tree: llama.cpp's
/// grammar sampler tracks one stack per live alternative, so thousands of
/// flat paths would be checked against every token.
pub const TRIE_THRESHOLD: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    #[error("a choice grammar needs at least one option")]
    NoOptions,
    #[error("an action grammar needs at least one command")]
    NoActions,
    #[error("command name `{0}` must be lower-case letters, digits and '_'")]
    BadName(String),
    #[error("argument {0}: optional and multi-line arguments cannot be nested")]
    Nested(String),
}

/// `s` as a GBNF string literal.
pub fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn alternatives<S: AsRef<str>>(options: &[S]) -> String {
    options
        .iter()
        .map(|o| literal(o.as_ref()))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// A rule body matching exactly one of `options`. Up to [`TRIE_THRESHOLD`]
/// options are flat alternatives; more are a prefix tree whose nodes become
/// rules named `{name}-{n}` pushed onto `rules`.
fn options_rule(name: &str, options: &[String], rules: &mut Vec<String>) -> String {
    if options.len() <= TRIE_THRESHOLD {
        return alternatives(options);
    }
    let mut sorted: Vec<&str> = options.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut counter = 0;
    trie_node(name, &sorted, 0, rules, &mut counter)
}

/// The body matching `strings[..][depth..]`; all share `strings[0][..depth]`.
fn trie_node(
    name: &str,
    strings: &[&str],
    depth: usize,
    rules: &mut Vec<String>,
    counter: &mut usize,
) -> String {
    let mut ends_here = false;
    let mut branches = Vec::new();
    let mut i = 0;
    while i < strings.len() {
        let rest = &strings[i][depth..];
        let Some(first) = rest.chars().next() else {
            ends_here = true;
            i += 1;
            continue;
        };
        let mut j = i + 1;
        while j < strings.len() && strings[j][depth..].starts_with(first) {
            j += 1;
        }
        let group = &strings[i..j];
        // Extend the shared prefix of the group as far as it goes.
        let mut len = depth + first.len_utf8();
        'grow: while let Some(c) = group[0][len..].chars().next() {
            for s in group {
                if !s[len..].starts_with(c) {
                    break 'grow;
                }
            }
            len += c.len_utf8();
        }
        let prefix = literal(&group[0][depth..len]);
        if group.len() == 1 && group[0].len() == len {
            branches.push(prefix);
        } else {
            let body = trie_node(name, group, len, rules, counter);
            *counter += 1;
            let rule = format!("{name}-{counter}");
            rules.push(format!("{rule} ::= {body}"));
            branches.push(format!("{prefix} {rule}"));
        }
        i = j;
    }
    let inner = branches.join(" | ");
    match (ends_here, branches.len()) {
        (false, _) => inner,
        (true, 0) => "\"\"".to_string(),
        (true, _) => format!("({inner})?"),
    }
}

/// A rule body matching one line (with its newline) that is not exactly
/// `terminator`, at most [`MAX_LINE_CHARS`] characters long.
fn line_except(terminator: &str) -> String {
    let any = format!("[^\\n]{{0,{}}}", MAX_LINE_CHARS - 1);
    let chars: Vec<char> = terminator.chars().collect();
    let mut alts = vec!["\"\\n\"".to_string()];
    for k in 0..chars.len() {
        let prefix: String = chars[..k].iter().collect();
        let lead = if k == 0 {
            String::new()
        } else {
            format!("{} ", literal(&prefix))
        };
        let c = char_class_escape(chars[k]);
        alts.push(format!("{lead}[^{c}\\n] {any} \"\\n\""));
        if k > 0 {
            alts.push(format!("{} \"\\n\"", literal(&prefix)));
        }
    }
    alts.push(format!("{} [^\\n] {any} \"\\n\"", literal(terminator)));
    format!("({})", alts.join(" | "))
}

fn char_class_escape(c: char) -> String {
    match c {
        '\\' | ']' | '[' | '^' | '-' => format!("\\{c}"),
        c => c.to_string(),
    }
}

/// Exactly one of `options`, nothing else.
pub fn choice<S: AsRef<str>>(options: &[S]) -> Result<String, GrammarError> {
    if options.is_empty() {
        return Err(GrammarError::NoOptions);
    }
    Ok(format!("root ::= {}\n", alternatives(options)))
}

/// One to [`MAX_BLOCKS`] SEARCH/REPLACE blocks, each naming one of `paths`.
/// Lines inside a section may not start with `<`, `=` or `>`, so a marker
/// line can never be taken for content.
pub fn search_replace<S: AsRef<str>>(paths: &[S]) -> Result<String, GrammarError> {
    if paths.is_empty() {
        return Err(GrammarError::NoOptions);
    }
    Ok(format!(
        "root ::= block{{1,{MAX_BLOCKS}}}\n\
         block ::= path \"\\n<<<<<<< SEARCH\\n\" line{{1,{MAX_BLOCK_LINES}}} \"=======\\n\" line{{0,{MAX_BLOCK_LINES}}} \">>>>>>> REPLACE\\n\"\n\
         path ::= {}\n\
         line ::= ([^\\n<=>] [^\\n]{{0,{}}})? \"\\n\"\n",
        alternatives(paths),
        MAX_LINE_CHARS - 1
    ))
}

/// `Reasoning: ` and one line of at most [`MAX_THOUGHT_CHARS`], a blank
/// line, then SEARCH/REPLACE blocks as [`search_replace`] (the Fixer's
/// chain of thought before its edit).
pub fn search_replace_with_reasoning<S: AsRef<str>>(paths: &[S]) -> Result<String, GrammarError> {
    let blocks = search_replace(paths)?.replacen("root ::=", "blocks ::=", 1);
    Ok(format!(
        "root ::= \"Reasoning: \" [^\\n]{{1,{MAX_THOUGHT_CHARS}}} \"\\n\\n\" blocks\n{blocks}"
    ))
}

/// Most decorator lines before the `def` of a rewritten definition.
pub const MAX_DECORATORS: usize = 4;

/// Longest reasoning line before a Fixer edit, in characters: the 0.5B
/// model otherwise spends half of a 192-token reply explaining.
pub const MAX_REASONING_CHARS: usize = 200;

/// The opening of a reply in the `anchored`, `lines` and `definition`
/// formats: `Reasoning: `, one line of at most [`MAX_REASONING_CHARS`],
/// a blank line.
fn reasoning() -> String {
    format!("\"Reasoning: \" [^\\n]{{1,{MAX_REASONING_CHARS}}} \"\\n\\n\"")
}

/// A replacement line: at most [`MAX_LINE_CHARS`], not starting with `<`,
/// `=` or `>` (so it is never a SEARCH/REPLACE marker).
fn marker_free_line() -> String {
    format!("([^\\n<=>] [^\\n]{{0,{}}})? \"\\n\"", MAX_LINE_CHARS - 1)
}

/// A fenced body line: at most [`MAX_LINE_CHARS`], not starting with a
/// backtick (so it never closes the fence).
fn fenced_line() -> String {
    format!("([^`\\n] [^\\n]{{0,{}}})? \"\\n\"", MAX_LINE_CHARS - 1)
}

/// A run of consecutive lines the prompt shows of a file: the first's
/// 1-based number and their text (without newlines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownRun {
    pub first: usize,
    pub lines: Vec<String>,
}

/// A file the prompt shows, as runs of consecutive lines (a left-out part
/// of a span ends a run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownFile {
    pub path: String,
    pub runs: Vec<ShownRun>,
}

fn check_shown(files: &[ShownFile]) -> Result<(), GrammarError> {
    let any = files
        .iter()
        .any(|f| f.runs.iter().any(|r| !r.lines.is_empty()));
    if any {
        Ok(())
    } else {
        Err(GrammarError::NoOptions)
    }
}

/// Most lines of an `anchored` SEARCH: small models copy a whole function
/// into SEARCH and run out of tokens before REPLACE; the change itself is
/// a few lines.
pub const MAX_SEARCH_LINES: usize = 8;

/// The Fixer's `anchored` format: the reasoning line, then one to
/// [`MAX_BLOCKS`] SEARCH/REPLACE blocks whose SEARCH is a contiguous run
/// of at most [`MAX_SEARCH_LINES`] shown lines of the named file, copied
/// exactly: rule `f{i}-l{n}-{k}` is line `n` of file `i` as the `k`-th line
/// of SEARCH, followed by line `n+1` of its run or by nothing. REPLACE is
/// free lines as in [`search_replace`].
pub fn anchored(files: &[ShownFile]) -> Result<String, GrammarError> {
    check_shown(files)?;
    let mut rules = vec![
        format!("root ::= {} edit{{1,{MAX_BLOCKS}}}", reasoning()),
        String::new(),
        format!("line ::= {}", marker_free_line()),
    ];
    let mut edits = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let mut starts = Vec::new();
        let mut chain = Vec::new();
        for run in &file.runs {
            for (at, text) in run.lines.iter().enumerate() {
                let n = run.first + at;
                starts.push(format!("f{i}-l{n}-1"));
                // Line `n` as SEARCH's k-th line: k-1 lines of the run before it.
                for k in 1..=MAX_SEARCH_LINES.min(at + 1) {
                    let next = if at + 1 < run.lines.len() && k < MAX_SEARCH_LINES {
                        format!(" f{i}-l{}-{}?", n + 1, k + 1)
                    } else {
                        String::new()
                    };
                    chain.push(format!(
                        "f{i}-l{n}-{k} ::= {}{next}",
                        literal(&format!("{text}\n"))
                    ));
                }
            }
        }
        if starts.is_empty() {
            continue;
        }
        rules.push(format!(
            "f{i} ::= {} ({}) \"=======\\n\" line{{0,{MAX_BLOCK_LINES}}} \">>>>>>> REPLACE\\n\"",
            literal(&format!("{}\n<<<<<<< SEARCH\n", file.path)),
            starts.join(" | ")
        ));
        rules.extend(chain);
        edits.push(format!("f{i}"));
    }
    rules[1] = format!("edit ::= {}", edits.join(" | "));
    Ok(rules.join("\n") + "\n")
}

/// Most lines one `lines` edit replaces: with the whole span to choose
/// from, the 0.5B model picked all of it (`replace lines 3-37`), copied
/// it back with its line numbers and ran out of tokens; a fix is a few
/// lines, and a reply may hold [`MAX_BLOCKS`] edits.
pub const MAX_EDIT_LINES: usize = 8;

/// Most lines a `lines` edit writes beyond those it replaces: on the demo
/// the 0.5B model rewrote whole functions into a one-line range and 7 of
/// 40 replies ran out of tokens before the fence closed; a guard clause
/// or a new branch is a few lines.
pub const MAX_ADDED_LINES: usize = 4;

/// Most indentation of a new line in a `lines` edit.
pub const MAX_INDENT: usize = 40;

/// The Fixer's `lines` format: the reasoning line, then one to
/// [`MAX_BLOCKS`] edits, each the file's path, `replace lines A-B with:`
/// where A is a shown line number and B one of the next
/// [`MAX_EDIT_LINES`] of the same run (rule `f{i}-r{r}`), and a fence of
/// at most B−A+1+[`MAX_ADDED_LINES`] new lines (rule `w{k}` for k lines
/// replaced). A new line is empty or starts, after its indentation, with
/// neither a digit, a tab nor `|`, so it cannot be a shown line copied
/// with its number.
pub fn lines(files: &[ShownFile]) -> Result<String, GrammarError> {
    check_shown(files)?;
    let mut rules = vec![
        format!("root ::= {} edit{{1,{MAX_BLOCKS}}}", reasoning()),
        String::new(),
        format!(
            "body ::= ([ ]{{0,{MAX_INDENT}}} [^`\\n0-9 \\t|] [^\\n]{{0,{}}})? \"\\n\"",
            MAX_LINE_CHARS - 1
        ),
    ];
    for k in 1..=MAX_EDIT_LINES {
        rules.push(format!(
            "w{k} ::= \" with:\\n```\\n\" body{{0,{}}} \"```\\n\"",
            k + MAX_ADDED_LINES
        ));
    }
    let mut edits = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let mut ranges = Vec::new();
        let mut extra = Vec::new();
        for (r, run) in file.runs.iter().enumerate() {
            if run.lines.is_empty() {
                continue;
            }
            let name = format!("f{i}-r{r}");
            let last = run.first + run.lines.len() - 1;
            let starts: Vec<String> = (run.first..=last)
                .map(|a| {
                    let ends: Vec<String> = (a..=last.min(a + MAX_EDIT_LINES - 1))
                        .map(|b| format!("{} w{}", literal(&b.to_string()), b - a + 1))
                        .collect();
                    format!("{} ({})", literal(&format!("{a}-")), ends.join(" | "))
                })
                .collect();
            extra.push(format!("{name} ::= {}", starts.join(" | ")));
            ranges.push(name);
        }
        if ranges.is_empty() {
            continue;
        }
        rules.push(format!(
            "f{i} ::= {} ({})",
            literal(&format!("{}\nreplace lines ", file.path)),
            ranges.join(" | ")
        ));
        rules.extend(extra);
        edits.push(format!("f{i}"));
    }
    rules[1] = format!("edit ::= {}", edits.join(" | "));
    Ok(rules.join("\n") + "\n")
}

/// A definition the `definition` format may rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionTarget {
    /// `path::Qual.name`, the line that picks it.
    pub label: String,
    /// Its indentation.
    pub indent: String,
    /// Its `def` line up to and including the name and `(`, as written
    /// (`    async def size(`): the new definition must start with it.
    pub lead: String,
}

/// The Fixer's `definition` format: the reasoning line, then one target's
/// label, and in a fence up to [`MAX_DECORATORS`] decorator lines at its
/// indentation, its `def` line's lead and the rest of that line, and up
/// to [`MAX_BODY_LINES`] lines.
pub fn definition(targets: &[DefinitionTarget]) -> Result<String, GrammarError> {
    if targets.is_empty() {
        return Err(GrammarError::NoOptions);
    }
    let rest = format!("[^\\n]{{0,{}}}", MAX_LINE_CHARS - 1);
    let mut rules = vec![
        format!("root ::= {} edit", reasoning()),
        format!(
            "edit ::= {}",
            (0..targets.len())
                .map(|i| format!("d{i}"))
                .collect::<Vec<_>>()
                .join(" | ")
        ),
        format!("body ::= {}", fenced_line()),
    ];
    for (i, t) in targets.iter().enumerate() {
        rules.push(format!(
            "d{i} ::= {} d{i}-dec{{0,{MAX_DECORATORS}}} {} {rest} \"\\n\" body{{0,{MAX_BODY_LINES}}} \"```\\n\"",
            literal(&format!("{}\n```\n", t.label)),
            literal(&t.lead)
        ));
        rules.push(format!(
            "d{i}-dec ::= {} {rest} \"\\n\"",
            literal(&format!("{}@", t.indent))
        ));
    }
    Ok(rules.join("\n") + "\n")
}

/// The type of one command argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    /// One of these strings (an existing path, a known symbol).
    Choice(Vec<String>),
    /// A non-negative integer.
    Integer,
    /// One word: no space, no newline.
    Word,
    /// A Python identifier or dotted name (`Class.method`).
    Identifier,
    /// One word, or a double-quoted string without quotes or newlines in it.
    Term,
    /// A line range `START:END`.
    Range,
    /// One of these strings, then `::`, then a dotted name: `path::Class.method`.
    Symbol(Vec<String>),
    /// Free text to the end of the line (last argument only).
    Text,
    /// This argument or nothing (the space before it included).
    Optional(Box<Arg>),
    /// After the command line: up to [`MAX_BODY_LINES`] lines, then this
    /// terminator on its own line. No body line equals the terminator, so
    /// the body parses back exactly.
    Lines(String),
    /// After the command line: one SEARCH/REPLACE section pair
    /// (`<<<<<<< SEARCH` … `=======` … `>>>>>>> REPLACE`).
    SearchReplace,
}

/// A command of an action set: its name and its arguments in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    pub name: String,
    pub args: Vec<Arg>,
}

/// Exactly one command of `actions`, ending in a newline: the name, then
/// each argument after one space (a body after a newline), each of its type.
pub fn actions(actions: &[Action]) -> Result<String, GrammarError> {
    let (root, rules) = action_rules(actions)?;
    Ok(format!("root ::= {root}\n{}\n", rules.join("\n")))
}

/// One ReAct turn: a one-line thought (no backticks), a blank line, and
/// exactly one command of `actions` in a three-backtick fence:
///
/// ````text
/// I should look at the parser first.
///
/// ```
/// open src/parser.py
/// ```
/// ````
pub fn turn(actions: &[Action]) -> Result<String, GrammarError> {
    let (command, rules) = action_rules(actions)?;
    Ok(format!(
        "root ::= thought \"\\n\\n```\\n\" command \"```\"\n\
         thought ::= [^`\\n ] [^`\\n]{{0,{}}}\n\
         command ::= {command}\n{}\n",
        MAX_THOUGHT_CHARS - 1,
        rules.join("\n")
    ))
}

/// The alternatives of one command (a rule body) and the rules they use.
fn action_rules(actions: &[Action]) -> Result<(String, Vec<String>), GrammarError> {
    if actions.is_empty() {
        return Err(GrammarError::NoActions);
    }
    let mut rules = Vec::new();
    let mut roots = Vec::new();
    for action in actions {
        let ok = !action.name.is_empty()
            && action
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok {
            return Err(GrammarError::BadName(action.name.clone()));
        }
        let rule = format!("cmd-{}", action.name.replace('_', "-"));
        let mut body = vec![literal(&action.name)];
        let mut line_ended = false;
        for (i, arg) in action.args.iter().enumerate() {
            let arg_rule = format!("{rule}-arg{i}");
            let (optional, arg) = match arg {
                Arg::Optional(inner) => (true, inner.as_ref()),
                arg => (false, arg),
            };
            let (separator, def) = match arg {
                // A body line is a rule of its own: llama.cpp refuses a
                // bounded repetition nested in another one.
                Arg::Lines(terminator) => {
                    line_ended = true;
                    let line = format!("{arg_rule}-line");
                    rules.push(format!("{line} ::= {}", line_except(terminator)));
                    (
                        "\"\\n\"",
                        format!(
                            "{line}{{0,{MAX_BODY_LINES}}} {}",
                            literal(&format!("{terminator}\n"))
                        ),
                    )
                }
                Arg::SearchReplace => {
                    line_ended = true;
                    let line = format!("{arg_rule}-line");
                    rules.push(format!(
                        "{line} ::= ([^\\n<=>] [^\\n]{{0,{}}})? \"\\n\"",
                        MAX_LINE_CHARS - 1
                    ));
                    (
                        "\"\\n\"",
                        format!(
                            "\"<<<<<<< SEARCH\\n\" {line}{{1,{MAX_BODY_LINES}}} \"=======\\n\" {line}{{0,{MAX_BODY_LINES}}} \">>>>>>> REPLACE\\n\""
                        ),
                    )
                }
                other => ("\" \"", simple_arg(&arg_rule, other, &mut rules)?),
            };
            rules.push(format!("{arg_rule} ::= {def}"));
            if optional {
                body.push(format!("({separator} {arg_rule})?"));
            } else {
                body.push(separator.into());
                body.push(arg_rule);
            }
        }
        if !line_ended {
            body.push("\"\\n\"".into());
        }
        rules.push(format!("{rule} ::= {}", body.join(" ")));
        roots.push(rule);
    }
    Ok((roots.join(" | "), rules))
}

fn simple_arg(name: &str, arg: &Arg, rules: &mut Vec<String>) -> Result<String, GrammarError> {
    const IDENT: &str = "[A-Za-z_] [A-Za-z0-9_.]";
    Ok(match arg {
        Arg::Choice(options) if options.is_empty() => return Err(GrammarError::NoOptions),
        Arg::Choice(options) => options_rule(name, options, rules),
        Arg::Symbol(paths) if paths.is_empty() => return Err(GrammarError::NoOptions),
        Arg::Symbol(paths) => format!(
            "({}) \"::\" {IDENT}{{0,{}}}",
            options_rule(name, paths, rules),
            MAX_WORD_CHARS - 1
        ),
        Arg::Integer => format!("[0-9]{{1,{MAX_DIGITS}}}"),
        Arg::Range => format!("[0-9]{{1,{MAX_DIGITS}}} \":\" [0-9]{{1,{MAX_DIGITS}}}"),
        Arg::Word => format!("[^ \\n]{{1,{MAX_WORD_CHARS}}}"),
        Arg::Identifier => format!("{IDENT}{{0,{}}}", MAX_WORD_CHARS - 1),
        Arg::Term => format!(
            "[^ \"\\n] [^ \\n]{{0,{}}} | \"\\\"\" [^\"\\n]{{1,{MAX_WORD_CHARS}}} \"\\\"\"",
            MAX_WORD_CHARS - 1
        ),
        Arg::Text => format!("[^\\n]{{1,{MAX_TEXT_CHARS}}}"),
        Arg::Optional(_) | Arg::Lines(_) | Arg::SearchReplace => {
            return Err(GrammarError::Nested(name.to_string()))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_what_gbnf_needs() {
        let cases = [
            ("a.py", r#""a.py""#),
            ("say \"hi\"", r#""say \"hi\"""#),
            ("a\\b", r#""a\\b""#),
            ("x\ny\tz", r#""x\ny\tz""#),
            ("\u{1}", r#""\x01""#),
        ];
        for (input, expected) in cases {
            assert_eq!(literal(input), expected, "{input:?}");
        }
    }

    #[test]
    fn grammars_are_built_exactly() {
        assert_eq!(
            choice(&["a.py", "b/c.py"]).unwrap(),
            "root ::= \"a.py\" | \"b/c.py\"\n"
        );
        assert_eq!(choice::<&str>(&[]), Err(GrammarError::NoOptions));
        let g = actions(&[
            Action {
                name: "open".into(),
                args: vec![Arg::Choice(vec!["a.py".into()]), Arg::Integer],
            },
            Action {
                name: "submit".into(),
                args: vec![],
            },
        ])
        .unwrap();
        assert_eq!(
            g,
            "root ::= cmd-open | cmd-submit\n\
             cmd-open-arg0 ::= \"a.py\"\n\
             cmd-open-arg1 ::= [0-9]{1,9}\n\
             cmd-open ::= \"open\" \" \" cmd-open-arg0 \" \" cmd-open-arg1 \"\\n\"\n\
             cmd-submit ::= \"submit\" \"\\n\"\n"
        );
        assert_eq!(
            actions(&[Action {
                name: "Bad Name".into(),
                args: vec![]
            }]),
            Err(GrammarError::BadName("Bad Name".into()))
        );
        let sr = search_replace(&["x.py"]).unwrap();
        assert!(sr.starts_with("root ::= block{1,4}\n"), "{sr}");
        assert!(sr.contains("path ::= \"x.py\"\n"), "{sr}");
    }

    #[test]
    fn prefix_trees_and_body_lines_are_built_exactly() {
        let mut rules = Vec::new();
        let mut counter = 0;
        let body = trie_node("p", &["ab", "abc", "b"], 0, &mut rules, &mut counter);
        assert_eq!(body, r#""ab" p-1 | "b""#);
        assert_eq!(rules, [r#"p-1 ::= ("c")?"#]);
        // Up to the threshold a choice stays flat.
        let few: Vec<String> = (0..TRIE_THRESHOLD).map(|i| format!("f{i}")).collect();
        let mut rules = Vec::new();
        assert_eq!(options_rule("q", &few, &mut rules), alternatives(&few));
        assert!(rules.is_empty());
        assert_eq!(
            line_except("ab"),
            r#"("\n" | [^a\n] [^\n]{0,199} "\n" | "a" [^b\n] [^\n]{0,199} "\n" | "a" "\n" | "ab" [^\n] [^\n]{0,199} "\n")"#
        );
        let g = turn(&[Action {
            name: "edit".into(),
            args: vec![Arg::Range, Arg::Lines("end".into())],
        }])
        .unwrap();
        assert!(
            g.starts_with("root ::= thought \"\\n\\n```\\n\" command \"```\"\n"),
            "{g}"
        );
        assert!(
            g.contains("cmd-edit ::= \"edit\" \" \" cmd-edit-arg0 \"\\n\" cmd-edit-arg1\n"),
            "{g}"
        );
        assert!(
            g.contains("cmd-edit-arg1 ::= cmd-edit-arg1-line{0,80} \"end\\n\"\n"),
            "{g}"
        );
        assert_eq!(
            actions(&[Action {
                name: "x".into(),
                args: vec![Arg::Optional(Box::new(Arg::Optional(Box::new(Arg::Word))))],
            }]),
            Err(GrammarError::Nested("cmd-x-arg0".into()))
        );
    }

    /// A 3-line span of `a.py` (lines 4-6), shown whole.
    fn three_lines() -> Vec<ShownFile> {
        vec![ShownFile {
            path: "a.py".into(),
            runs: vec![ShownRun {
                first: 4,
                lines: vec!["def f(x):".into(), "    return \"x\"".into(), "".into()],
            }],
        }]
    }

    #[test]
    fn the_anchored_grammar_chains_the_shown_lines() {
        assert_eq!(
            anchored(&three_lines()).unwrap(),
            "root ::= \"Reasoning: \" [^\\n]{1,200} \"\\n\\n\" edit{1,4}\n\
             edit ::= f0\n\
             line ::= ([^\\n<=>] [^\\n]{0,199})? \"\\n\"\n\
             f0 ::= \"a.py\\n<<<<<<< SEARCH\\n\" (f0-l4-1 | f0-l5-1 | f0-l6-1) \"=======\\n\" line{0,40} \">>>>>>> REPLACE\\n\"\n\
             f0-l4-1 ::= \"def f(x):\\n\" f0-l5-2?\n\
             f0-l5-1 ::= \"    return \\\"x\\\"\\n\" f0-l6-2?\n\
             f0-l5-2 ::= \"    return \\\"x\\\"\\n\" f0-l6-3?\n\
             f0-l6-1 ::= \"\\n\"\n\
             f0-l6-2 ::= \"\\n\"\n\
             f0-l6-3 ::= \"\\n\"\n"
        );
        // Two runs (a left-out part between them): line 2 ends its run.
        let files = [ShownFile {
            path: "b.py".into(),
            runs: vec![
                ShownRun {
                    first: 1,
                    lines: vec!["a = 1".into(), "b = 2".into()],
                },
                ShownRun {
                    first: 9,
                    lines: vec!["c = 3".into()],
                },
            ],
        }];
        let g = anchored(&files).unwrap();
        assert!(g.contains("(f0-l1-1 | f0-l2-1 | f0-l9-1)"), "{g}");
        assert!(g.contains("f0-l1-1 ::= \"a = 1\\n\" f0-l2-2?\n"), "{g}");
        assert!(g.contains("f0-l2-2 ::= \"b = 2\\n\"\n"), "{g}");
        assert!(g.contains("f0-l9-1 ::= \"c = 3\\n\"\n"), "{g}");
        assert!(!g.contains("f0-l9-2"), "{g}");
        // A long run: SEARCH stops at its 8th line.
        let long = [ShownFile {
            path: "d.py".into(),
            runs: vec![ShownRun {
                first: 1,
                lines: (1..=12).map(|n| format!("x = {n}")).collect(),
            }],
        }];
        let g = anchored(&long).unwrap();
        assert!(g.contains("f0-l7-7 ::= \"x = 7\\n\" f0-l8-8?\n"), "{g}");
        assert!(g.contains("f0-l8-8 ::= \"x = 8\\n\"\n"), "{g}");
        assert!(g.contains("f0-l12-8 ::= \"x = 12\\n\"\n"), "{g}");
        assert!(!g.contains("-9 ::="), "{g}");
        let empty = [ShownFile {
            path: "c.py".into(),
            runs: vec![],
        }];
        assert_eq!(anchored(&empty), Err(GrammarError::NoOptions));
        assert_eq!(lines(&empty), Err(GrammarError::NoOptions));
    }

    #[test]
    fn the_lines_grammar_chooses_numbers_of_one_run() {
        let g = lines(&three_lines()).unwrap();
        let want_head = "root ::= \"Reasoning: \" [^\\n]{1,200} \"\\n\\n\" edit{1,4}\n\
             edit ::= f0\n\
             body ::= ([ ]{0,40} [^`\\n0-9 \\t|] [^\\n]{0,199})? \"\\n\"\n\
             w1 ::= \" with:\\n```\\n\" body{0,5} \"```\\n\"\n";
        assert!(g.starts_with(want_head), "{g}");
        assert!(
            g.contains("w8 ::= \" with:\\n```\\n\" body{0,12} \"```\\n\"\n"),
            "{g}"
        );
        assert!(
            g.ends_with(
                "f0 ::= \"a.py\\nreplace lines \" (f0-r0)\n\
                 f0-r0 ::= \"4-\" (\"4\" w1 | \"5\" w2 | \"6\" w3) | \"5-\" (\"5\" w1 | \"6\" w2) | \"6-\" (\"6\" w1)\n"
            ),
            "{g}"
        );
        // B is at most MAX_EDIT_LINES - 1 after A, and never past the run.
        let long = [ShownFile {
            path: "a.py".into(),
            runs: vec![ShownRun {
                first: 1,
                lines: vec![String::new(); 20],
            }],
        }];
        let g = lines(&long).unwrap();
        assert!(
            g.contains("| \"3-\" (\"3\" w1 | \"4\" w2 | \"5\" w3 | \"6\" w4 | \"7\" w5 | \"8\" w6 | \"9\" w7 | \"10\" w8) |"),
            "{g}"
        );
        assert!(
            g.contains("| \"19-\" (\"19\" w1 | \"20\" w2) | \"20-\" (\"20\" w1)\n"),
            "{g}"
        );
    }

    #[test]
    fn the_definition_grammar_forces_the_chosen_definitions_lead() {
        let targets = [
            DefinitionTarget {
                label: "a.py::f".into(),
                indent: String::new(),
                lead: "def f(".into(),
            },
            DefinitionTarget {
                label: "a.py::C.m".into(),
                indent: "    ".into(),
                lead: "    async def m(".into(),
            },
        ];
        assert_eq!(
            definition(&targets).unwrap(),
            "root ::= \"Reasoning: \" [^\\n]{1,200} \"\\n\\n\" edit\n\
             edit ::= d0 | d1\n\
             body ::= ([^`\\n] [^\\n]{0,199})? \"\\n\"\n\
             d0 ::= \"a.py::f\\n```\\n\" d0-dec{0,4} \"def f(\" [^\\n]{0,199} \"\\n\" body{0,80} \"```\\n\"\n\
             d0-dec ::= \"@\" [^\\n]{0,199} \"\\n\"\n\
             d1 ::= \"a.py::C.m\\n```\\n\" d1-dec{0,4} \"    async def m(\" [^\\n]{0,199} \"\\n\" body{0,80} \"```\\n\"\n\
             d1-dec ::= \"    @\" [^\\n]{0,199} \"\\n\"\n"
        );
        assert_eq!(definition(&[]), Err(GrammarError::NoOptions));
    }
}
