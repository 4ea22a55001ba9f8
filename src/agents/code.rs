//! The code a prompt shows (the Fixer's, and the Reproducer's sections):
//! the located spans read from the worktree, whole files or spans with the functions around them, cut to
//! the lines that matter for the issue when the prompt must shrink, and the
//! definitions the `definition` format may rewrite.

use std::collections::BTreeSet;
use std::path::Path;

use super::shown::CONTEXT_LINES;
use crate::aci::Location;
use crate::edit;
use crate::engine::grammar;
use crate::index::symbols;
use crate::record::trajectory::Cut;

/// The code of the located spans, with context, grouped per file: each
/// span whole; with `numbered`, each line starts with its number, as the
/// `lines` format shows it.
pub fn code_sections(root: &Path, locations: &[Location], numbered: bool) -> Vec<(String, String)> {
    sections(&read_located(root, locations), None, numbered).0
}

/// A file the prompt shows: all its lines, and which it shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownCode {
    pub path: String,
    /// The file's lines, without newlines.
    pub lines: Vec<String>,
    /// The 1-based numbers of the lines shown (gaps' notes are none).
    pub shown: BTreeSet<usize>,
    /// The located spans of this file (1-based, inclusive).
    pub spans: Vec<(usize, usize)>,
}

impl ShownCode {
    /// The runs of consecutive shown lines, as locations (no symbol).
    pub fn visible_runs(&self) -> Vec<Location> {
        let mut out: Vec<Location> = Vec::new();
        for &n in &self.shown {
            match out.last_mut() {
                Some(l) if l.end_line + 1 == n => l.end_line = n,
                _ => out.push(Location {
                    path: self.path.clone(),
                    symbol: String::new(),
                    start_line: n,
                    end_line: n,
                }),
            }
        }
        out
    }

    /// The shown lines as runs of consecutive numbers for a grammar; with
    /// `anchored`, a line that reads as a SEARCH/REPLACE marker ends a run
    /// and is left out (it could not be parsed back from SEARCH).
    pub fn runs(&self, anchored: bool) -> grammar::ShownFile {
        let mut runs: Vec<grammar::ShownRun> = Vec::new();
        let mut previous = None;
        for &n in &self.shown {
            let text = self.lines.get(n - 1).cloned().unwrap_or_default();
            if anchored && edit::is_marker_line(&text) {
                previous = None;
                continue;
            }
            match runs.last_mut() {
                Some(run) if previous == Some(n - 1) => run.lines.push(text),
                _ => runs.push(grammar::ShownRun {
                    first: n,
                    lines: vec![text],
                }),
            }
            previous = Some(n);
        }
        grammar::ShownFile {
            path: self.path.clone(),
            runs,
        }
    }
}

/// A function or method the `definition` format may rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub path: String,
    pub qualname: String,
    /// Its span, 1-based and inclusive, decorators included.
    pub start_line: usize,
    pub end_line: usize,
    /// The indentation of its `def` line.
    pub indent: String,
    /// Its `def` line up to and including the name and `(`.
    pub lead: String,
}

impl Target {
    /// `path::qualname`, the line of a reply that picks it.
    pub fn label(&self) -> String {
        format!("{}::{}", self.path, self.qualname)
    }
}

/// The functions and methods inside the located spans whose `def` line is
/// shown, outermost only (a nested function is rewritten with its
/// parent), in the order of the files and lines.
pub fn definition_targets(code: &[ShownCode]) -> Vec<Target> {
    let mut out: Vec<Target> = Vec::new();
    for c in code {
        let text = c.lines.join("\n") + "\n";
        let index = symbols::parse_symbols(&c.path, &text);
        let mut mine: Vec<&symbols::Symbol> = index
            .symbols
            .iter()
            .filter(|s| s.kind != symbols::SymbolKind::Class)
            .filter(|s| c.shown.contains(&s.def_line))
            .filter(|s| {
                c.spans
                    .iter()
                    .any(|&(a, b)| a <= s.start_line && s.end_line <= b)
            })
            .collect();
        mine.sort_by_key(|s| (s.start_line, std::cmp::Reverse(s.end_line)));
        let mut last_end = 0;
        for s in mine {
            if s.start_line <= last_end {
                continue;
            }
            let Some(def_line) = c.lines.get(s.def_line - 1) else {
                continue;
            };
            let Some(lead) = definition_lead(def_line, &s.name) else {
                continue;
            };
            last_end = s.end_line;
            out.push(Target {
                path: c.path.clone(),
                qualname: s.qualname.clone(),
                start_line: s.start_line,
                end_line: s.end_line,
                indent: def_line[..def_line.len() - def_line.trim_start().len()].to_string(),
                lead,
            });
        }
    }
    out
}

/// `line` (a `def` line) up to and including `name` and, when it follows
/// at once, `(`.
pub(super) fn definition_lead(line: &str, name: &str) -> Option<String> {
    let at = line.find(&format!("def {name}"))? + 4 + name.len();
    let paren = usize::from(line[at..].starts_with('('));
    Some(line[..at + paren].to_string())
}

/// Lines kept after a span's first line (its signature, then usually its
/// docstring) when a span is trimmed.
pub const SIGNATURE_WINDOW_LINES: usize = 10;

/// Lines kept before a span's last line when it is trimmed: where a
/// function returns.
pub const END_WINDOW_LINES: usize = 3;

/// Lines kept on each side of a line that names something the issue
/// names, when a span is trimmed.
pub const MATCH_WINDOW_LINES: usize = 5;

/// Lines naming something from the issue that get a window, per span: a
/// name the whole class uses would otherwise keep it all.
pub const MAX_MATCHED_LINES: usize = 8;

/// Left-out runs shorter than this are kept: a note in place of a line or
/// two saves nothing.
pub const MIN_GAP_LINES: usize = 3;

/// Shortest name from the issue looked for in a span (shorter ones, `x`,
/// `id`, match everywhere).
pub const MIN_IDENTIFIER_CHARS: usize = 3;

/// Said under the code when a span was trimmed, so no SEARCH copies a note.
pub(super) const TRIMMED_NOTE: &str =
    "(Lines of the form `# ... lines A-B left out ...` stand for code \
not shown; they are not in the file: never copy them into SEARCH.)";

/// A located span and its file's lines.
#[derive(Debug, Clone)]
pub(super) struct Located {
    pub(super) location: Location,
    pub(super) lines: Vec<String>,
}

/// The located spans whose files can be read and whose lines exist.
pub(super) fn read_located(root: &Path, locations: &[Location]) -> Vec<Located> {
    locations
        .iter()
        .filter_map(|loc| {
            let text = crate::aci::read_text(root, &loc.path).ok()?;
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            let (start, end) = shown_range(loc, lines.len());
            (start <= end).then(|| Located {
                location: loc.clone(),
                lines,
            })
        })
        .collect()
}

/// The lines shown of a span (1-based, inclusive): the span and
/// [`CONTEXT_LINES`] around it.
pub(super) fn shown_range(loc: &Location, file_lines: usize) -> (usize, usize) {
    let start = loc.start_line.saturating_sub(CONTEXT_LINES).max(1);
    let end = (loc.end_line + CONTEXT_LINES).min(file_lines);
    (start, end)
}

/// Names the issue mentions the way code is written: with an underscore,
/// a capital after the first letter (`QuerySet`), after a dot (`.area`) or
/// before a parenthesis (`area(`), at least [`MIN_IDENTIFIER_CHARS`] long.
pub fn issue_identifiers(issue: &str) -> BTreeSet<String> {
    let bytes = issue.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_word(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_word(bytes[i]) {
            i += 1;
        }
        let word = &issue[start..i];
        if word.len() < MIN_IDENTIFIER_CHARS || word.as_bytes()[0].is_ascii_digit() {
            continue;
        }
        let code_like = word.contains('_')
            || word.chars().skip(1).any(|c| c.is_ascii_uppercase())
            || (start > 0 && bytes[start - 1] == b'.')
            || bytes.get(i) == Some(&b'(');
        if code_like {
            out.insert(word.to_string());
        }
    }
    out
}

/// Whether `line` has `name` as a whole word.
pub(super) fn names(line: &str, name: &str) -> bool {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    line.match_indices(name).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + name.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

/// The lines of a span kept when it is trimmed (1-based, within its shown
/// range): the context before and the signature with
/// [`SIGNATURE_WINDOW_LINES`] after it, [`END_WINDOW_LINES`] before its
/// last line and the context after, and [`MATCH_WINDOW_LINES`] around
/// each of the first [`MAX_MATCHED_LINES`] lines naming an identifier of
/// the issue; gaps under [`MIN_GAP_LINES`] are kept too.
pub fn kept_lines(
    lines: &[String],
    loc: &Location,
    identifiers: &BTreeSet<String>,
) -> BTreeSet<usize> {
    let (start, end) = shown_range(loc, lines.len());
    let mut keep = BTreeSet::new();
    if start > end {
        return keep;
    }
    let mut window = |a: usize, b: usize| {
        for n in a.max(start)..=b.min(end) {
            keep.insert(n);
        }
    };
    window(start, loc.start_line + SIGNATURE_WINDOW_LINES);
    window(loc.end_line.saturating_sub(END_WINDOW_LINES), end);
    let matched = (loc.start_line.max(start)..=loc.end_line.min(end))
        .filter(|&n| {
            let line = &lines[n - 1];
            identifiers.iter().any(|id| names(line, id))
        })
        .take(MAX_MATCHED_LINES)
        .collect::<Vec<_>>();
    for n in matched {
        window(n.saturating_sub(MATCH_WINDOW_LINES), n + MATCH_WINDOW_LINES);
    }
    // Fill the gaps too short to be worth a note.
    let mut gap_start = None;
    for n in start..=end {
        match (keep.contains(&n), gap_start) {
            (false, None) => gap_start = Some(n),
            (true, Some(g)) => {
                if n - g < MIN_GAP_LINES {
                    for m in g..n {
                        keep.insert(m);
                    }
                }
                gap_start = None;
            }
            _ => {}
        }
    }
    keep
}

/// The note standing for lines `a`-`b`, indented like `next` (the line
/// after them).
pub(super) fn gap_note(a: usize, b: usize, next: &str) -> String {
    let indent: String = next.chars().take_while(|c| c.is_whitespace()).collect();
    format!("{indent}# ... lines {a}-{b} left out ...")
}

/// The sections of the prompt, grouped per file, and the spans' cuts:
/// whole, or trimmed to [`kept_lines`] when `identifiers` is given.
/// With `numbered`, each shown line starts with its number (the `lines`
/// format). Also returns what each file shows.
pub(super) fn sections(
    located: &[Located],
    identifiers: Option<&BTreeSet<String>>,
    numbered: bool,
) -> (Vec<(String, String)>, Vec<Cut>, Vec<ShownCode>) {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut cuts = Vec::new();
    let mut code: Vec<ShownCode> = Vec::new();
    for l in located {
        let loc = &l.location;
        let (start, end) = shown_range(loc, l.lines.len());
        let keep: BTreeSet<usize> = match identifiers {
            Some(ids) => kept_lines(&l.lines, loc, ids),
            None => (start..=end).collect(),
        };
        let width = end.to_string().len();
        let number = |n: Option<usize>, text: String| match (numbered, n) {
            (false, _) => text,
            (true, Some(n)) => format!("{n:>width$}| {text}"),
            (true, None) => format!("{:width$}| {text}", ""),
        };
        let mut shown: Vec<String> = Vec::new();
        let mut left_out: Vec<(usize, usize)> = Vec::new();
        let mut n = start;
        while n <= end {
            if keep.contains(&n) {
                shown.push(number(Some(n), l.lines[n - 1].clone()));
                n += 1;
                continue;
            }
            let a = n;
            while n <= end && !keep.contains(&n) {
                n += 1;
            }
            let next = l.lines.get(n - 1).filter(|_| n <= end).map_or("", |s| s);
            shown.push(number(None, gap_note(a, n - 1, next)));
            left_out.push((a, n - 1));
        }
        let visible = (start..=end).filter(|n| keep.contains(n));
        match code.iter_mut().find(|c| c.path == loc.path) {
            Some(c) => {
                c.shown.extend(visible);
                c.spans.push((loc.start_line, loc.end_line));
            }
            None => code.push(ShownCode {
                path: loc.path.clone(),
                lines: l.lines.clone(),
                shown: visible.collect(),
                spans: vec![(loc.start_line, loc.end_line)],
            }),
        }
        let snippet = shown.join("\n");
        let note = if left_out.is_empty() {
            String::new()
        } else {
            format!("\n{TRIMMED_NOTE}")
        };
        let section = format!(
            "{}::{} (lines {start}-{end})\n```python\n{snippet}\n```{note}",
            loc.path, loc.symbol
        );
        if !left_out.is_empty() {
            cuts.push(Cut::Span {
                path: loc.path.clone(),
                symbol: loc.symbol.clone(),
                kept_lines: keep.len(),
                left_out,
            });
        }
        match out.iter_mut().find(|(p, _)| *p == loc.path) {
            Some((_, s)) => {
                s.push_str("\n\n");
                s.push_str(&section);
            }
            None => out.push((loc.path.clone(), section)),
        }
    }
    (out, cuts, code)
}
