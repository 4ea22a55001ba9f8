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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    #[error("a choice grammar needs at least one option")]
    NoOptions,
    #[error("an action grammar needs at least one command")]
    NoActions,
    #[error("command name `{0}` must be lower-case letters, digits and '_'")]
    BadName(String),
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

/// The type of one command argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    /// One of these strings (an existing path, a known symbol).
    Choice(Vec<String>),
    /// A non-negative integer.
    Integer,
    /// One word: no space, no newline.
    Word,
    /// Free text to the end of the line (last argument only).
    Text,
}

/// A command of an action set: its name and its arguments in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    pub name: String,
    pub args: Vec<Arg>,
}

/// Exactly one command line of `actions`, ending in a newline: the name,
/// then each argument after one space, each of its type.
pub fn actions(actions: &[Action]) -> Result<String, GrammarError> {
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
        for (i, arg) in action.args.iter().enumerate() {
            let arg_rule = format!("{rule}-arg{i}");
            let def = match arg {
                Arg::Choice(options) if options.is_empty() => return Err(GrammarError::NoOptions),
                Arg::Choice(options) => alternatives(options),
                Arg::Integer => format!("[0-9]{{1,{MAX_DIGITS}}}"),
                Arg::Word => format!("[^ \\n]{{1,{MAX_WORD_CHARS}}}"),
                Arg::Text => format!("[^\\n]{{1,{MAX_TEXT_CHARS}}}"),
            };
            rules.push(format!("{arg_rule} ::= {def}"));
            body.push("\" \"".into());
            body.push(arg_rule);
        }
        body.push("\"\\n\"".into());
        rules.push(format!("{rule} ::= {}", body.join(" ")));
        roots.push(rule);
    }
    Ok(format!(
        "root ::= {}\n{}\n",
        roots.join(" | "),
        rules.join("\n")
    ))
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
}
