//! MASAI's Fixer, one round: from the issue, the code at and around the
//! localised spans ([`Show`]), and when given the reproduction test with
//! its failure and the earlier rounds' fixes ([`Extra`]), N candidate
//! edits in one batched generation sharing the prompt (one greedy, N−1
//! sampled), each a short chain of thought then edits in the
//! configured [`EditFormat`], enforced by grammar. Candidates that do
//! not apply, break the syntax, or change nothing are dropped; duplicates
//! (the same normalised diff) are merged and counted.
//!
//! In the `anchored`, `lines` and `definition` formats every reply the
//! grammar allows names real lines of the shown code, so it applies; the
//! only rejections left are a syntax error of the result and a
//! reply cut by the token cap before its first edit closed (`no_blocks`:
//! there is no separate "truncated" status, so `Fixes::applied` keeps its
//! meaning).

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::budget::{self, Budget};
use super::call::{self, Call};
use super::preamble;
pub use super::shown::Show;
use crate::aci::Location;
use crate::dataset::Issue;
use crate::edit;
use crate::engine::{grammar, Conversation, EngineError, Message, Sampling};
use crate::index::symbols;
use crate::record::trajectory::{Cut, Step, Trim};
use crate::repo::RepoError;
use crate::trajectory::Trajectory;

pub use super::shown::CONTEXT_LINES;

/// How a candidate writes its edit. Each is enforced by a grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EditFormat {
    /// SEARCH/REPLACE blocks over the shown files, SEARCH free text
    /// (matched exactly, then ignoring whitespace).
    #[default]
    SearchReplace,
    /// SEARCH/REPLACE blocks whose SEARCH the grammar restricts to a
    /// contiguous run of the shown lines of the named file; when the run
    /// occurs more than once among the shown lines, the first occurrence
    /// not overlapping an earlier block of the reply is taken.
    Anchored,
    /// `replace lines A-B with:` and the new lines in a fence, A and B
    /// numbers of one run of shown lines of the named file (the code is
    /// shown numbered). A > B is normalised: the lines between them are
    /// replaced. An edit overlapping an earlier one of the reply is
    /// dropped ([`apart`]).
    Lines,
    /// One located function or method rewritten whole: its
    /// `path::qualname`, then the new definition (decorators included) in
    /// a fence, which replaces its span from the tree-sitter index. With
    /// no function or method among the located spans, `anchored` is used.
    Definition,
}

impl EditFormat {
    /// The setting's value as written in a config (`search_replace`, ...).
    pub fn name(self) -> &'static str {
        match self {
            EditFormat::SearchReplace => "search_replace",
            EditFormat::Anchored => "anchored",
            EditFormat::Lines => "lines",
            EditFormat::Definition => "definition",
        }
    }
}

/// The Fixer's settings (`[fixer]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixerSettings {
    /// Candidates per task (N).
    pub candidates: usize,
    /// Temperature of candidates 2..N (candidate 1 is greedy).
    pub temperature: f32,
    /// Most tokens of one candidate.
    pub max_tokens: u32,
    /// How candidates write their edits (`search_replace` when absent).
    #[serde(default)]
    pub edit_format: EditFormat,
    /// Rounds at most: the first, then repair rounds while no candidate
    /// passes the reproduction test ([`super::repair`]); 1 when absent.
    #[serde(default = "one_round")]
    pub rounds: usize,
    /// What code the prompt shows ([`Show`]); `file` when absent.
    #[serde(default)]
    pub show: Show,
}

fn one_round() -> usize {
    1
}

impl Default for FixerSettings {
    fn default() -> Self {
        FixerSettings {
            candidates: 4,
            temperature: 0.8,
            max_tokens: 384,
            // Chosen by what resolves (issue 32, BENCHMARKS.md): `lines`
            // applies more often, but a wrong line number applies to the
            // wrong lines; a setting written before there was a choice
            // reads as `search_replace` (the field's serde default).
            edit_format: EditFormat::Anchored,
            rounds: 3,
            show: Show::File,
        }
    }
}

/// What became of one candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "detail")]
pub enum Status {
    /// Applied, parses, changes something: `patch` holds it.
    Kept,
    NoBlocks,
    DidNotApply(String),
    SyntaxError(String),
    NoChange,
    /// The same patch as an earlier candidate (its index).
    Duplicate(usize),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub index: usize,
    /// The round that sampled it (1 is the first; 1 in files written
    /// before there were rounds).
    #[serde(default = "one_round")]
    pub round: usize,
    pub temperature: f32,
    pub reply: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// A distinct patch and the candidates that produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distinct {
    pub patch: String,
    /// Candidate indexes (the first is the representative).
    pub members: Vec<usize>,
    /// The round of its first candidate.
    #[serde(default = "one_round")]
    pub round: usize,
    /// Whether the reproduction test passes with it, as judged after its
    /// round (None: not judged: no test, or its run failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reproduction: Option<bool>,
    /// The lines of the reproduction test's failure with it, or why it
    /// could not run; when it passes the test, the failure of the first
    /// regression test it breaks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure: String,
    /// Regression tests that passed on the base commit and fail with it
    /// (run when it passes the reproduction test).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regressions: Vec<String>,
}

impl Distinct {
    /// A patch first written by candidate `member` of round 1, not judged.
    pub fn new(patch: String, member: usize) -> Distinct {
        Distinct {
            patch,
            members: vec![member],
            round: 1,
            reproduction: None,
            failure: String::new(),
            regressions: Vec::new(),
        }
    }
}

/// One round of the Fixer: its candidates, the new distinct patches among
/// them, and how many of those were judged, and pass the reproduction
/// test without breaking a regression test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    pub round: usize,
    pub candidates: usize,
    pub distinct: usize,
    pub judged: usize,
    pub passing: usize,
}

/// The Fixer's outcome (`fixes.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fixes {
    pub candidates: Vec<Candidate>,
    pub distinct: Vec<Distinct>,
    /// The format the candidates were asked for (`search_replace` in
    /// files written before there was a choice).
    #[serde(default)]
    pub edit_format: EditFormat,
    /// Each round's counts (empty in files written before there were
    /// rounds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Round>,
    /// The runs of lines the first round's prompt showed, per file (its
    /// edits may touch only these); empty in files written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shown: Vec<Location>,
}

impl Fixes {
    /// No candidates yet, asked in `format`.
    pub fn empty(format: EditFormat) -> Fixes {
        Fixes {
            candidates: Vec::new(),
            distinct: Vec::new(),
            edit_format: format,
            rounds: Vec::new(),
            shown: Vec::new(),
        }
    }
    pub fn generated(&self) -> usize {
        self.candidates.len()
    }
    /// Candidates whose blocks applied.
    pub fn applied(&self) -> usize {
        self.candidates
            .iter()
            .filter(|c| !matches!(c.status, Status::NoBlocks | Status::DidNotApply(_)))
            .count()
    }
    /// Candidates that applied and parse.
    pub fn parsed(&self) -> usize {
        self.candidates
            .iter()
            .filter(|c| {
                matches!(
                    c.status,
                    Status::Kept | Status::Duplicate(_) | Status::NoChange
                )
            })
            .count()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FixError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Grammar(#[from] grammar::GrammarError),
    #[error("no location to fix: the localizer found none")]
    NoLocations,
}

/// The role of the `search_replace` and `anchored` formats, after the
/// shared preamble and the code.
const ROLE: &str = "You fix bugs. You first explain the cause in one line, then write the fix \
as SEARCH/REPLACE blocks.";

/// The `search_replace` format's instructions.
const INSTRUCTIONS: &str = "Fix the issue. Start with `Reasoning:` and one line on the cause. \
Then write each change as a SEARCH/REPLACE block: the file's path on its own line, \
`<<<<<<< SEARCH`, the lines to change copied exactly from the code above (no line numbers), \
`=======`, the new lines, and `>>>>>>> REPLACE`. Keep SEARCH short: the lines that change \
and one line around them.";

/// The `anchored` format's instructions.
const ANCHORED_INSTRUCTIONS: &str = "Fix the issue. Start with `Reasoning:` and one short line \
on the cause. Then write each change as a SEARCH/REPLACE block: the file's path on its own line, \
`<<<<<<< SEARCH`, one or more consecutive lines copied exactly from the code above, `=======`, \
the new lines, and `>>>>>>> REPLACE`. Keep SEARCH short: only the lines that change";

/// The `lines` format's instructions.
const LINES_INSTRUCTIONS: &str = "Fix the issue. Start with `Reasoning:` and one short line on \
the cause. Then write each change as: the file's path on its own line, `replace lines A-B with:` \
(A and B are line numbers shown left of the code above; lines A to B, at most 8, are replaced), \
then the new lines in a ``` fence, exactly as they must be in the file, indentation included, \
without line numbers. Change only the lines that must change; write several short changes \
rather than one long one.";

/// The `definition` format's instructions, before the list of targets.
const DEFINITION_INSTRUCTIONS: &str = "Fix the issue. Start with `Reasoning:` and one short line \
on the cause. Then write the name of the one function to rewrite on its own line, then the whole \
new function in a ``` fence, decorators included, indented as in the code above. It replaces the \
old function. The functions you can rewrite:";

/// What the prompt asks for in `format` (`targets`: the definitions the
/// `definition` format may rewrite).
fn instructions(format: EditFormat, targets: &[Target]) -> String {
    match format {
        EditFormat::SearchReplace => INSTRUCTIONS.to_string(),
        EditFormat::Anchored => format!(
            "{ANCHORED_INSTRUCTIONS}, at most {} lines (several blocks for changes far apart).",
            grammar::MAX_SEARCH_LINES
        ),
        EditFormat::Lines => LINES_INSTRUCTIONS.to_string(),
        EditFormat::Definition => {
            let list: Vec<String> = targets.iter().map(|t| t.label()).collect();
            format!("{DEFINITION_INSTRUCTIONS}\n{}", list.join("\n"))
        }
    }
}

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
fn definition_lead(line: &str, name: &str) -> Option<String> {
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
const TRIMMED_NOTE: &str = "(Lines of the form `# ... lines A-B left out ...` stand for code \
not shown; they are not in the file: never copy them into SEARCH.)";

/// A located span and its file's lines.
#[derive(Debug, Clone)]
struct Located {
    location: Location,
    lines: Vec<String>,
}

/// The located spans whose files can be read and whose lines exist.
fn read_located(root: &Path, locations: &[Location]) -> Vec<Located> {
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
fn shown_range(loc: &Location, file_lines: usize) -> (usize, usize) {
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
fn names(line: &str, name: &str) -> bool {
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
fn gap_note(a: usize, b: usize, next: &str) -> String {
    let indent: String = next.chars().take_while(|c| c.is_whitespace()).collect();
    format!("{indent}# ... lines {a}-{b} left out ...")
}

/// The sections of the prompt, grouped per file, and the spans' cuts:
/// whole, or trimmed to [`kept_lines`] when `identifiers` is given.
/// With `numbered`, each shown line starts with its number (the `lines`
/// format). Also returns what each file shows.
fn sections(
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

/// The prompt of the Fixer in the `search_replace` format, showing
/// `issue` (the issue's text, whole or cut).
pub fn messages(issue: &str, sections: &[(String, String)]) -> Vec<Message> {
    messages_in(issue, sections, false, ROLE, INSTRUCTIONS)
}

/// The role of `format`.
fn role(format: EditFormat) -> &'static str {
    match format {
        EditFormat::SearchReplace | EditFormat::Anchored => ROLE,
        EditFormat::Lines => LINES_ROLE,
        EditFormat::Definition => DEFINITION_ROLE,
    }
}

/// The role of the `lines` format.
const LINES_ROLE: &str = "You fix bugs. You first explain the cause in one line, then replace \
numbered lines of the code with new ones.";

/// The role of the `definition` format.
const DEFINITION_ROLE: &str = "You fix bugs. You first explain the cause in one line, then \
rewrite the one function that has the bug.";

/// The shared preamble, the code (the preamble's form: `numbered` in the
/// `lines` format), then the role and the instructions.
fn messages_in(
    issue: &str,
    sections: &[(String, String)],
    numbered: bool,
    role: &str,
    instructions: &str,
) -> Vec<Message> {
    messages_with(issue, sections, numbered, "", role, instructions)
}

/// [`messages_in`] with `extra` (the evidence and earlier attempts,
/// [`Extra::text`]) between the code and the role, so the preamble and
/// the code stay the prefix every stage shares.
fn messages_with(
    issue: &str,
    sections: &[(String, String)],
    numbered: bool,
    extra: &str,
    role: &str,
    instructions: &str,
) -> Vec<Message> {
    preamble::messages(
        issue,
        &format!(
            "{}{extra}{role}\n\n{instructions}",
            preamble::code(sections, numbered)
        ),
    )
}

/// The accepted reproduction test and the lines of its failure on the
/// base commit, as the Fixer is shown them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    pub path: String,
    pub text: String,
    pub failure: String,
}

/// An earlier candidate shown in a repair round: its diff (or, when it
/// was rejected, its edit) and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub edit: String,
    /// `edit` is a diff (else the reply's edit as written).
    pub diff: bool,
    pub outcome: String,
}

/// What the prompt shows besides the issue and the code.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extra<'a> {
    pub evidence: Option<&'a Evidence>,
    pub attempts: &'a [Attempt],
}

impl Extra<'_> {
    /// The text shown after the code (empty when there is nothing).
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Some(e) = self.evidence {
            out.push_str(&format!(
                "A TEST THAT REPRODUCES THE ISSUE ({}):\n```python\n{}\n```\nON THE CODE ABOVE \
                 IT FAILS:\n```\n{}\n```\n\n",
                e.path,
                e.text.trim_end(),
                e.failure.trim_end()
            ));
        }
        if !self.attempts.is_empty() {
            out.push_str("EARLIER FIXES, WHICH DID NOT FIX IT:\n");
            for (i, a) in self.attempts.iter().enumerate() {
                let fence = if a.diff { "diff" } else { "" };
                out.push_str(&format!(
                    "\nFix {}:\n```{fence}\n{}\n```\n",
                    i + 1,
                    a.edit.trim_end()
                ));
                match a.outcome.split_once('\n') {
                    Some((lead, rest)) if a.diff => {
                        out.push_str(&format!("{lead}\n```\n{}\n```\n", rest.trim_end()))
                    }
                    _ => out.push_str(&format!("{}\n", a.outcome.trim_end())),
                }
            }
            out.push('\n');
        }
        out
    }

    /// What the instructions add: make the test pass; do not repeat an
    /// earlier fix.
    fn instruction(&self) -> &'static str {
        match (self.evidence.is_some(), self.attempts.is_empty()) {
            (true, true) => " The fix must make the test above pass.",
            (true, false) => {
                " The fix must make the test above pass and keep the tests that passed before \
                 passing. The earlier fixes did not: write a different one."
            }
            (false, false) => " The earlier fixes did not work: write a different one.",
            (false, true) => "",
        }
    }
}

/// The Fixer's prompt as it will be sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub messages: Vec<Message>,
    /// The files shown, which SEARCH/REPLACE blocks may name.
    pub paths: Vec<String>,
    /// The record of the cuts made to fit the context (`None`: nothing
    /// was cut, or the backend does not say its context).
    pub trim: Option<Trim>,
    /// The format asked for: the one configured, or `anchored` for a
    /// `definition` prompt with no function among the located spans.
    pub format: EditFormat,
    /// What the prompt shows of each file.
    pub code: Vec<ShownCode>,
    /// The definitions the `definition` format may rewrite (empty in the
    /// other formats).
    pub targets: Vec<Target>,
}

impl Prompt {
    /// The grammar every candidate of this prompt follows.
    pub fn grammar(&self) -> Result<String, grammar::GrammarError> {
        match self.format {
            EditFormat::SearchReplace => grammar::search_replace_with_reasoning(&self.paths),
            EditFormat::Anchored => {
                grammar::anchored(&self.code.iter().map(|c| c.runs(true)).collect::<Vec<_>>())
            }
            EditFormat::Lines => {
                grammar::lines(&self.code.iter().map(|c| c.runs(false)).collect::<Vec<_>>())
            }
            EditFormat::Definition => grammar::definition(
                &self
                    .targets
                    .iter()
                    .map(|t| grammar::DefinitionTarget {
                        label: t.label(),
                        indent: t.indent.clone(),
                        lead: t.lead.clone(),
                    })
                    .collect::<Vec<_>>(),
            ),
        }
    }
}

/// The parts of a prompt built for a number of locations.
struct Built {
    messages: Vec<Message>,
    paths: Vec<String>,
    cuts: Vec<Cut>,
    format: EditFormat,
    code: Vec<ShownCode>,
    targets: Vec<Target>,
}

impl Built {
    fn into_prompt(self, trim: Option<Trim>) -> Prompt {
        Prompt {
            messages: self.messages,
            paths: self.paths,
            trim,
            format: self.format,
            code: self.code,
            targets: self.targets,
        }
    }
}

/// The prompt in `format` over `located`, showing `issue`; spans trimmed
/// to [`kept_lines`] of `identifiers` when given.
fn build_prompt(
    issue: &str,
    located: &[Located],
    identifiers: Option<&BTreeSet<String>>,
    format: EditFormat,
    extra: Option<&Extra<'_>>,
) -> Built {
    let numbered = format == EditFormat::Lines;
    let (sections, cuts, code) = sections(located, identifiers, numbered);
    let paths: Vec<String> = sections.iter().map(|(p, _)| p.clone()).collect();
    let targets = if format == EditFormat::Definition {
        definition_targets(&code)
    } else {
        Vec::new()
    };
    let format = if format == EditFormat::Definition && targets.is_empty() {
        EditFormat::Anchored
    } else {
        format
    };
    let (extra_text, also) = extra.map_or((String::new(), ""), |e| (e.text(), e.instruction()));
    Built {
        messages: messages_with(
            issue,
            &sections,
            numbered,
            &extra_text,
            role(format),
            &format!("{}{also}", instructions(format, &targets)),
        ),
        paths,
        cuts,
        format,
        code,
        targets,
    }
}

/// The Fixer's prompt over the located spans alone, with nothing besides
/// the issue and the code: [`fit_prompt_with`] for [`Show::Located`].
pub fn fit_prompt(
    conversation: &dyn Conversation,
    root: &Path,
    issue: &str,
    locations: &[Location],
    reply_tokens: usize,
    format: EditFormat,
) -> Result<Prompt, FixError> {
    fit_prompt_with(
        conversation,
        root,
        issue,
        locations,
        reply_tokens,
        format,
        Show::Located,
        &Extra::default(),
    )
}

/// The Fixer's prompt fitted to the context: everything whole if it fits
/// (the widest view of the code `show` allows, [`super::shown::views`],
/// and `extra`); else, in order until it fits with the issue as every
/// stage shows it ([`preamble::shared_issue`]: whole unless it takes more
/// than 40% of the context), with `extra`: each view of the code, widest
/// first, then the located spans trimmed to [`kept_lines`], and the last
/// locations left out; then the same without `extra`; else the located
/// spans with the issue cut further, to a head and a tail
/// ([`budget::fit_issue`]). When even one trimmed span and the shortest
/// issue do not fit, the smallest prompt, with a trim whose `fits` is
/// false.
#[allow(clippy::too_many_arguments)]
pub fn fit_prompt_with(
    conversation: &dyn Conversation,
    root: &Path,
    issue: &str,
    locations: &[Location],
    reply_tokens: usize,
    format: EditFormat,
    show: Show,
    extra: &Extra<'_>,
) -> Result<Prompt, FixError> {
    let views: Vec<Vec<Located>> = super::shown::views(root, locations, show)
        .iter()
        .map(|v| read_located(root, v))
        .filter(|v| !v.is_empty())
        .collect();
    let Some(located) = views
        .last()
        .filter(|_| !read_located(root, locations).is_empty())
    else {
        return Err(FixError::NoLocations);
    };
    let issue = issue.trim();
    let identifiers = issue_identifiers(issue);
    let has_extra = extra.evidence.is_some() || !extra.attempts.is_empty();
    let build = |text: &str, spans: &[Located], trim: bool, with_extra: bool| {
        build_prompt(
            text,
            spans,
            trim.then_some(&identifiers),
            format,
            with_extra.then_some(extra),
        )
    };
    let all = located.len();
    let whole = build(issue, &views[0], false, has_extra);
    let Some(budget) = Budget::of(conversation, reply_tokens) else {
        return Ok(whole.into_prompt(None));
    };
    let (full_tokens, fits) = budget.measure(conversation, &whole.messages)?;
    let shared = preamble::shared_issue(conversation, issue)?;
    if fits && shared.cut.is_none() {
        return Ok(whole.into_prompt(None));
    }
    let dropped = |n: usize| {
        located[n..].iter().map(|l| Cut::Location {
            path: l.location.path.clone(),
            symbol: l.location.symbol.clone(),
        })
    };
    // What a narrower view or a prompt without `extra` leaves out: the
    // wider views' spans the chosen one does not show as they are.
    let narrowed = |view: usize, with_extra: bool| {
        let span = |l: &Located| {
            (
                l.location.path.clone(),
                l.location.start_line,
                l.location.end_line,
            )
        };
        let kept: Vec<_> = views[view].iter().map(span).collect();
        let mut cuts: Vec<Cut> = Vec::new();
        for l in views[..view].iter().flatten() {
            let cut = Cut::Location {
                path: l.location.path.clone(),
                symbol: l.location.symbol.clone(),
            };
            if !kept.contains(&span(l)) && !cuts.contains(&cut) {
                cuts.push(cut);
            }
        }
        if has_extra && !with_extra {
            cuts.push(Cut::Location {
                path: extra.evidence.map_or(String::new(), |e| e.path.clone()),
                symbol: "(the reproduction test, its failure and the earlier fixes)".into(),
            });
        }
        cuts
    };
    let finish = |mut built: Built, issue_cut: Option<Cut>, n: usize, before: Vec<Cut>| {
        let mut cuts = before;
        cuts.extend(std::mem::take(&mut built.cuts));
        cuts.extend(issue_cut);
        cuts.extend(dropped(n));
        let tokens = conversation.count_tokens(&built.messages)?;
        let trim = budget.trim("fixer", full_tokens, tokens, cuts);
        Ok::<Prompt, FixError>(built.into_prompt(Some(trim)))
    };
    let last = views.len() - 1;
    let variants: &[bool] = if has_extra { &[true, false] } else { &[false] };
    for &with_extra in variants {
        for (v, view) in views.iter().enumerate() {
            let built = build(&shared.text, view, false, with_extra);
            if budget.measure(conversation, &built.messages)?.1 {
                return finish(built, shared.cut.clone(), all, narrowed(v, with_extra));
            }
        }
        for n in (1..=all).rev() {
            let built = build(&shared.text, &located[..n], true, with_extra);
            if budget.measure(conversation, &built.messages)?.1 {
                return finish(built, shared.cut.clone(), n, narrowed(last, with_extra));
            }
        }
    }
    // Not even one trimmed span fits beside the shared issue: this stage
    // cuts it further, and shares only the issue's head with the others.
    for n in (1..=all).rev() {
        let fitted = budget::fit_issue(conversation, &budget, issue, |t| {
            build(t, &located[..n], true, false).messages
        })?;
        if let Some(cut) = fitted {
            return finish(
                build(&cut.text, &located[..n], true, false),
                cut.cut,
                n,
                narrowed(last, false),
            );
        }
    }
    let shortest = budget::cut_issue(issue, budget::MIN_ISSUE_CHARS);
    finish(
        build(&shortest.text, &located[..1], true, false),
        shortest.cut,
        1,
        narrowed(last, false),
    )
}

/// Normalised for deduplication: no `index` lines, no trailing spaces.
fn normalise(patch: &str) -> String {
    patch
        .lines()
        .filter(|l| !l.starts_with("index "))
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Generates and sorts out one round of candidates over the located
/// spans alone, with nothing shown besides the issue and the code. The
/// workspace at `root` is left as it was (each candidate is applied,
/// diffed and undone). The pipeline's Fixer is [`super::repair::run`].
#[allow(clippy::too_many_arguments)]
pub fn run(
    conversation: &mut dyn Conversation,
    root: &Path,
    base: &str,
    issue: &Issue,
    locations: &[Location],
    settings: &FixerSettings,
    sampling: &Sampling,
    trajectory: &mut Trajectory,
) -> Result<Fixes, FixError> {
    let mut fixes = Fixes::empty(settings.edit_format);
    generate_round(
        conversation,
        root,
        base,
        issue,
        locations,
        settings,
        sampling,
        None,
        &[],
        None,
        1,
        &mut fixes,
        trajectory,
    )?;
    Ok(fixes)
}

/// Python's own compile of the files a candidate changed (paths in the
/// worktree `root`): the first error, or `None`. It catches what
/// tree-sitter's tolerant parse lets through (an unexpected indent, a
/// `return` outside a function).
pub type CompileCheck<'a> = dyn Fn(&Path, &[String]) -> Option<String> + Sync + 'a;

/// The seed of round `round`'s sampled candidates: a repair round whose
/// prompt is the first's (nothing to show of the earlier round) still
/// draws new ones.
pub fn round_seed(seed: u32, round: usize) -> u32 {
    seed.wrapping_add((round.saturating_sub(1) as u32).wrapping_mul(1_000_003))
}

/// One round: the prompt (`settings.show`'s code, the `evidence` and the
/// earlier `attempts`), N candidates, each applied, checked and diffed,
/// added to `fixes` (indexes after those of earlier rounds; a patch the
/// same as an earlier round's is its duplicate).
#[allow(clippy::too_many_arguments)]
pub fn generate_round(
    conversation: &mut dyn Conversation,
    root: &Path,
    base: &str,
    issue: &Issue,
    locations: &[Location],
    settings: &FixerSettings,
    sampling: &Sampling,
    evidence: Option<&Evidence>,
    attempts: &[Attempt],
    compile: Option<&CompileCheck<'_>>,
    round: usize,
    fixes: &mut Fixes,
    trajectory: &mut Trajectory,
) -> Result<(), FixError> {
    if locations.is_empty() {
        return Err(FixError::NoLocations);
    }
    let show = settings.show;
    let prompt = fit_prompt_with(
        conversation,
        root,
        &issue.problem_statement,
        locations,
        settings.max_tokens as usize,
        settings.edit_format,
        show,
        &Extra { evidence, attempts },
    )?;
    if prompt.format != settings.edit_format && round == 1 {
        tracing::warn!(
            "{}: no function or method among the located spans to rewrite: the fixer asks for \
             the {} format instead of {}",
            issue.instance_id,
            prompt.format.name(),
            settings.edit_format.name()
        );
    }
    let g = prompt.grammar()?;
    if round == 1 {
        fixes.edit_format = prompt.format;
        fixes.shown = prompt
            .code
            .iter()
            .flat_map(ShownCode::visible_runs)
            .collect();
    }
    if let Some(t) = prompt.trim.clone() {
        let fits = t.fits;
        if !fits {
            tracing::warn!(
                "{}: the fixer's smallest prompt ({} tokens) does not fit the context of {} \
                 with {} kept for the reply: no candidates",
                issue.instance_id,
                t.prompt_tokens,
                t.context,
                t.reserved
            );
        }
        trajectory.record(Step::Trimmed(Box::new(t)));
        if !fits {
            return Ok(());
        }
    }
    let sampling = Sampling {
        seed: round_seed(sampling.seed, round),
        ..sampling.clone()
    };
    let call = Call::spread(
        "fixer",
        prompt.messages.clone(),
        &sampling,
        settings.max_tokens,
        settings.candidates,
        settings.temperature,
        &g,
    );
    let temperatures = call.temperatures.clone().unwrap_or_default();
    let generation = call::constrained(conversation, trajectory, call)?;

    let first = fixes.candidates.len();
    for (k, c) in generation.candidates.iter().enumerate() {
        let index = first + k;
        let (status, patch) = try_candidate(root, base, &c.text, &prompt, compile)?;
        let status = match (&status, &patch) {
            (Status::Kept, Some(p)) => {
                let key = normalise(p);
                match fixes
                    .distinct
                    .iter_mut()
                    .find(|d| normalise(&d.patch) == key)
                {
                    Some(d) => {
                        d.members.push(index);
                        Status::Duplicate(d.members[0])
                    }
                    None => {
                        fixes.distinct.push(Distinct {
                            patch: p.clone(),
                            members: vec![index],
                            round,
                            reproduction: None,
                            failure: String::new(),
                            regressions: Vec::new(),
                        });
                        Status::Kept
                    }
                }
            }
            _ => status,
        };
        fixes.candidates.push(Candidate {
            index,
            round,
            temperature: temperatures.get(k).copied().unwrap_or(0.0),
            reply: c.text.clone(),
            status,
            patch,
        });
    }
    Ok(())
}

/// The edits a reply asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edits {
    /// No complete edit: nothing written, or cut before the first closed.
    None,
    /// SEARCH/REPLACE blocks, matched in the files (`search_replace`).
    Blocks(Vec<edit::Block>),
    /// Line ranges of the files as they are, and their new text.
    Lines(Vec<edit::LineEdit>),
    /// Edits that name no shown code (a reply the grammar would not allow).
    Refused(String),
}

/// What `reply` asks to change, read in the prompt's format.
pub fn edits_of(reply: &str, prompt: &Prompt) -> Edits {
    match prompt.format {
        EditFormat::SearchReplace => {
            let parsed = edit::parse(reply);
            if parsed.blocks.is_empty() {
                Edits::None
            } else {
                Edits::Blocks(parsed.blocks)
            }
        }
        EditFormat::Anchored => {
            let blocks = edit::parse(reply).blocks;
            if blocks.is_empty() {
                return Edits::None;
            }
            anchor(&blocks, &prompt.code)
                .map_or_else(|e| Edits::Refused(e.to_string()), Edits::Lines)
        }
        EditFormat::Lines => {
            let (written, _) = edit::parse_lines_edits(reply);
            if written.is_empty() {
                return Edits::None;
            }
            let mut out = Vec::new();
            for e in written {
                let Some(code) = prompt.code.iter().find(|c| c.path == e.path) else {
                    return Edits::Refused(format!("{} is not a file the prompt shows", e.path));
                };
                let (start, end) = (e.start.min(e.end), e.start.max(e.end));
                if let Some(n) = [start, end].into_iter().find(|n| !code.shown.contains(n)) {
                    return Edits::Refused(format!("line {n} of {} is not shown", e.path));
                }
                out.push(edit::LineEdit {
                    path: e.path,
                    start,
                    end,
                    text: e.text,
                });
            }
            Edits::Lines(out)
        }
        EditFormat::Definition => {
            let Some((label, body)) = edit::parse_definition_edit(reply) else {
                return Edits::None;
            };
            let Some(t) = prompt.targets.iter().find(|t| t.label() == label) else {
                return Edits::Refused(format!("`{label}` is not a located definition"));
            };
            let text = edit::indent_lines(&edit::dedent_lines(&body, &t.indent), &t.indent);
            Edits::Lines(vec![edit::LineEdit {
                path: t.path.clone(),
                start: t.start_line,
                end: t.end_line,
                text,
            }])
        }
    }
}

/// Why an `anchored` block has no place among the shown lines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Unanchored {
    #[error("{0} is not a file the prompt shows")]
    File(String),
    #[error("SEARCH is not a run of the lines shown of {0}")]
    Search(String),
}

/// The `anchored` blocks as line ranges: each SEARCH at a run of shown
/// lines of its file that it equals, chosen so that no two blocks
/// overlap, the earliest such choice in the order of the blocks (a run
/// that occurs once, the usual case, has one place). When the blocks
/// cannot all be placed apart, each at its first place: applying refuses
/// the overlap.
fn anchor(blocks: &[edit::Block], code: &[ShownCode]) -> Result<Vec<edit::LineEdit>, Unanchored> {
    let mut places: Vec<Vec<usize>> = Vec::new();
    for b in blocks {
        let Some(file) = code.iter().find(|c| c.path == b.path) else {
            return Err(Unanchored::File(b.path.clone()));
        };
        let search: Vec<&str> = b.search.lines().collect();
        let fits = |s: usize| {
            !search.is_empty()
                && search.iter().enumerate().all(|(k, want)| {
                    file.shown.contains(&(s + k))
                        && file.lines.get(s + k - 1).map(String::as_str) == Some(*want)
                })
        };
        let found: Vec<usize> = file.shown.iter().copied().filter(|&s| fits(s)).collect();
        if found.is_empty() {
            return Err(Unanchored::Search(b.path.clone()));
        }
        places.push(found);
    }
    let edit_at = |k: usize, start: usize| edit::LineEdit {
        path: blocks[k].path.clone(),
        start,
        end: start + blocks[k].search.lines().count() - 1,
        text: blocks[k].replace.clone(),
    };
    let mut chosen: Vec<edit::LineEdit> = Vec::new();
    if place(&places, &edit_at, &mut chosen) {
        return Ok(chosen);
    }
    // No placement keeps every block: each at its first place clear of
    // the ones before it, and a block with none is dropped.
    let mut kept: Vec<edit::LineEdit> = Vec::new();
    for (k, starts) in places.iter().enumerate() {
        if let Some(e) = starts
            .iter()
            .map(|&s| edit_at(k, s))
            .find(|e| !kept.iter().any(|c| overlaps(c, e)))
        {
            kept.push(e);
        }
    }
    Ok(kept)
}

/// Whether two line edits touch a common line of one file.
fn overlaps(a: &edit::LineEdit, b: &edit::LineEdit) -> bool {
    a.path == b.path && b.start <= a.end && a.start <= b.end
}

/// The edits in reply order without those overlapping an earlier one: a
/// small model often writes the same change twice, or a second edit
/// inside the first, and the first is the one it meant.
pub fn apart(edits: &[edit::LineEdit]) -> Vec<edit::LineEdit> {
    let mut kept: Vec<edit::LineEdit> = Vec::new();
    for e in edits {
        if !kept.iter().any(|c| overlaps(c, e)) {
            kept.push(e.clone());
        }
    }
    kept
}

/// Chooses a place for each block after `chosen`, none overlapping,
/// backtracking (at most [`grammar::MAX_BLOCKS`] blocks).
fn place(
    places: &[Vec<usize>],
    edit_at: &dyn Fn(usize, usize) -> edit::LineEdit,
    chosen: &mut Vec<edit::LineEdit>,
) -> bool {
    let k = chosen.len();
    if k == places.len() {
        return true;
    }
    for &start in &places[k] {
        let e = edit_at(k, start);
        let free = !chosen
            .iter()
            .any(|c| c.path == e.path && e.start <= c.end && c.start <= e.end);
        if free {
            chosen.push(e);
            if place(places, edit_at, chosen) {
                return true;
            }
            chosen.pop();
        }
    }
    false
}

/// Applies one reply's edits to the workspace, checks and diffs the
/// result, and undoes it.
fn try_candidate(
    root: &Path,
    base: &str,
    reply: &str,
    prompt: &Prompt,
    compile: Option<&CompileCheck<'_>>,
) -> Result<(Status, Option<String>), RepoError> {
    let paths = &prompt.paths;
    let edits = edits_of(reply, prompt);
    if edits == Edits::None {
        return Ok((Status::NoBlocks, None));
    }
    let before: Vec<(String, usize)> = paths
        .iter()
        .map(|p| {
            let n = crate::aci::read_text(root, p)
                .map(|t| symbols::syntax_errors(&t).len())
                .unwrap_or(0);
            (p.clone(), n)
        })
        .collect();
    let mut failure = None;
    match &edits {
        Edits::None => {}
        Edits::Refused(why) => failure = Some(why.clone()),
        Edits::Blocks(blocks) => {
            for block in blocks {
                if let Err(e) = edit::apply_block_lenient(root, block, paths) {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
        Edits::Lines(lines) => {
            if let Err(e) = edit::apply_line_edits(root, &apart(lines)) {
                failure = Some(e.to_string());
            }
        }
    }
    let result = match failure {
        Some(why) => (Status::DidNotApply(why), None),
        None => {
            let broken = before.iter().find_map(|(p, n)| {
                let errors = crate::aci::read_text(root, p)
                    .map(|t| symbols::syntax_errors(&t))
                    .unwrap_or_default();
                (errors.len() > *n).then(|| {
                    let e = &errors[0];
                    format!("{p}:{}:{}: {}", e.line, e.column, e.message)
                })
            });
            match broken {
                Some(why) => (Status::SyntaxError(why), None),
                None => {
                    let patch = crate::repo::diff_against(root, base)?;
                    let touched = crate::repo::touched_files(&patch);
                    let compiled = compile
                        .filter(|_| !patch.trim().is_empty())
                        .and_then(|check| check(root, &touched));
                    if patch.trim().is_empty() {
                        (Status::NoChange, None)
                    } else if let Some(why) = compiled {
                        (Status::SyntaxError(why), None)
                    } else {
                        (Status::Kept, Some(patch))
                    }
                }
            }
        }
    };
    crate::repo::reset_worktree(root)?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::budget::fake::{self, Fake};
    use crate::record::trajectory::Cut;

    type R = Result<(), Box<dyn std::error::Error>>;

    /// A 600-line class: `class Big:` on line 1, `target_method` defined on
    /// line 300, other methods around it.
    fn big_class() -> String {
        (1..=600)
            .map(|n| match n {
                1 => "class Big:".to_string(),
                300 => "    def target_method(self):".to_string(),
                301 => "        return 'wrong'".to_string(),
                n if n % 2 == 0 => format!("    def method_{n}(self):"),
                n => format!("        return {n}"),
            })
            .map(|l| l + "\n")
            .collect()
    }

    /// A 30,000-character issue: a head naming `Big.target_method()`,
    /// filler lines, and a tail.
    fn long_issue() -> String {
        let head = "HEAD: calling Big.target_method() returns 'wrong'.\n";
        let tail = "\nTAIL: expected 'right'.";
        let filler_len = 30_000 - head.len() - tail.len();
        let filler: String = (0..)
            .map(|i| format!("filler line {i:04} with plain words in it\n"))
            .flat_map(|l| l.chars().collect::<Vec<_>>())
            .take(filler_len)
            .collect();
        format!("{head}{filler}{tail}")
    }

    fn workspace(files: &[(&str, &str)]) -> Result<tempfile::TempDir, std::io::Error> {
        let dir = tempfile::tempdir()?;
        for (path, text) in files {
            let full = dir.path().join(path);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(full, text)?;
        }
        Ok(dir)
    }

    fn location(path: &str, symbol: &str, start_line: usize, end_line: usize) -> Location {
        Location {
            path: path.into(),
            symbol: symbol.into(),
            start_line,
            end_line,
        }
    }

    /// A 200-line function every line of which names `target_method`.
    fn busy_function() -> String {
        let mut out = String::from("def helper():\n");
        for n in 2..=200 {
            out.push_str(&format!("    x{n} = target_method({n})\n"));
        }
        out
    }

    fn issue_of(text: &str) -> Issue {
        Issue {
            instance_id: "demo__big-1".into(),
            repo: "demo/big".into(),
            base_commit: "0".repeat(40),
            problem_statement: text.into(),
            created_at: None,
        }
    }

    #[test]
    fn a_long_issue_and_a_large_class_fit() -> R {
        let dir = workspace(&[("pkg/big.py", &big_class())])?;
        let issue = long_issue();
        assert_eq!(issue.chars().count(), 30_000);
        let locs = [location("pkg/big.py", "Big", 1, 600)];
        let conversation = Fake::new(4096, "");
        let untrimmed = messages(&issue, &code_sections(dir.path(), &locs, false));
        assert_eq!(fake::tokens(&untrimmed), 11_008);

        let p = fit_prompt(
            &conversation,
            dir.path(),
            &issue,
            &locs,
            512,
            EditFormat::SearchReplace,
        )?;
        let trim = p.trim.ok_or("nothing was cut")?;
        assert_eq!(
            trim,
            Trim {
                purpose: "fixer".into(),
                context: 4096,
                reserved: 512,
                full_tokens: 11_008,
                prompt_tokens: 1958,
                fits: true,
                cuts: vec![
                    Cut::Span {
                        path: "pkg/big.py".into(),
                        symbol: "Big".into(),
                        kept_lines: 26,
                        left_out: vec![(12, 294), (306, 596)],
                    },
                    // Cut as every stage of the task cuts it: to 40% of
                    // the context.
                    Cut::Issue {
                        kept_chars: 6360,
                        dropped_chars: 23_640,
                        dropped_lines: 591,
                    },
                ],
            }
        );
        assert_eq!(fake::tokens(&p.messages), 1958);
        assert_eq!(p.paths, ["pkg/big.py"]);
        let user = &p.messages[1].content;
        let lines: Vec<&str> = user.lines().collect();
        for wanted in [
            // The issue's head and tail, and the note between them.
            "HEAD: calling Big.target_method() returns 'wrong'.",
            "[... 23,640 characters (591 lines) of the issue left out ...]",
            "TAIL: expected 'right'.",
            // The signature, the located method and the span's end.
            "class Big:",
            "    def target_method(self):",
            "        return 'wrong'",
            "    def method_600(self):",
            // The notes, indented like the line after them.
            "        # ... lines 12-294 left out ...",
            "        # ... lines 306-596 left out ...",
            TRIMMED_NOTE,
        ] {
            assert_eq!(
                lines.iter().filter(|l| **l == wanted).count(),
                1,
                "{wanted:?} in\n{user}"
            );
        }
        // Lines 11 and 12: the last before the first note, and one left out.
        assert!(lines.contains(&"        return 11"));
        assert!(!lines.contains(&"    def method_12(self):"));
        Ok(())
    }

    #[test]
    fn the_last_locations_go_when_the_shortest_issue_does_not_fit() -> R {
        let dir = workspace(&[
            ("pkg/big.py", &big_class()),
            ("pkg/busy.py", &busy_function()),
        ])?;
        let issue = long_issue();
        let locs = [
            location("pkg/big.py", "Big", 1, 600),
            location("pkg/busy.py", "helper", 1, 200),
        ];
        // Both spans trimmed and the shortest issue take 833 tokens; the
        // Big class alone and the shortest issue, 658.
        let conversation = Fake::new(700 + 512, "");
        let p = fit_prompt(
            &conversation,
            dir.path(),
            &issue,
            &locs,
            512,
            EditFormat::SearchReplace,
        )?;
        let trim = p.trim.ok_or("nothing was cut")?;
        let shortest = budget::cut_issue(&issue, budget::MIN_ISSUE_CHARS);
        let located = read_located(dir.path(), &locs);
        let (both, _, _) = sections(&located, Some(&issue_identifiers(&issue)), false);
        assert_eq!(fake::tokens(&messages(&shortest.text, &both)), 833);
        assert_eq!(
            (trim.fits, trim.prompt_tokens, trim.full_tokens),
            (true, 698, 12_463)
        );
        assert_eq!(
            trim.cuts,
            [
                Cut::Span {
                    path: "pkg/big.py".into(),
                    symbol: "Big".into(),
                    kept_lines: 26,
                    left_out: vec![(12, 294), (306, 596)],
                },
                Cut::Issue {
                    kept_chars: 1320,
                    dropped_chars: 28_680,
                    dropped_lines: 717,
                },
                Cut::Location {
                    path: "pkg/busy.py".into(),
                    symbol: "helper".into(),
                },
            ]
        );
        assert_eq!(p.paths, ["pkg/big.py"]);
        Ok(())
    }

    #[test]
    fn with_no_room_no_call_is_made_and_no_candidate_comes() -> R {
        let dir = workspace(&[("pkg/big.py", &big_class())])?;
        let issue = issue_of(&long_issue());
        let locs = [location("pkg/big.py", "Big", 1, 600)];
        let mut conversation = Fake::new(700, "Reasoning: x");
        let mut trajectory = Trajectory::new("demo__big-1");
        let settings = FixerSettings {
            edit_format: EditFormat::SearchReplace,
            ..FixerSettings::default()
        };
        let fixes = run(
            &mut conversation,
            dir.path(),
            "HEAD",
            &issue,
            &locs,
            &settings,
            &Sampling::default(),
            &mut trajectory,
        )?;
        assert_eq!(fixes.candidates, []);
        assert_eq!(fixes.distinct, []);
        assert_eq!(conversation.prompts.len(), 0);
        let steps: Vec<&Step> = trajectory.steps.iter().map(|s| &s.step).collect();
        let [Step::Trimmed(t)] = steps.as_slice() else {
            return Err(format!("one trimmed step expected: {steps:?}").into());
        };
        assert_eq!(
            (t.fits, t.prompt_tokens, t.context, t.reserved),
            (false, 658, 700, 384)
        );
        assert_eq!(
            t.cuts[1],
            Cut::Issue {
                kept_chars: 1160,
                dropped_chars: 28_840,
                dropped_lines: 721,
            }
        );
        Ok(())
    }

    #[test]
    fn a_fitted_prompt_is_the_one_sent_and_its_cut_is_recorded_first() -> R {
        let dir = workspace(&[("pkg/big.py", &big_class())])?;
        let issue = issue_of(&long_issue());
        let locs = [location("pkg/big.py", "Big", 1, 600)];
        let mut conversation = Fake::new(4096, "Reasoning: no blocks");
        let mut trajectory = Trajectory::new("demo__big-1");
        let settings = FixerSettings {
            candidates: 2,
            edit_format: EditFormat::SearchReplace,
            ..FixerSettings::default()
        };
        let fixes = run(
            &mut conversation,
            dir.path(),
            "HEAD",
            &issue,
            &locs,
            &settings,
            &Sampling::default(),
            &mut trajectory,
        )?;
        let statuses: Vec<&Status> = fixes.candidates.iter().map(|c| &c.status).collect();
        assert_eq!(statuses, [&Status::NoBlocks, &Status::NoBlocks]);
        let expected = fit_prompt(
            &conversation,
            dir.path(),
            &issue.problem_statement,
            &locs,
            512,
            EditFormat::SearchReplace,
        )?;
        assert_eq!(conversation.prompts, [expected.messages]);
        let kinds: Vec<&str> = trajectory
            .steps
            .iter()
            .map(|s| match &s.step {
                Step::Trimmed(_) => "trimmed",
                Step::ModelCall(_) => "model_call",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["trimmed", "model_call"]);
        Ok(())
    }

    #[test]
    fn a_prompt_that_fits_is_left_whole() -> R {
        let dir = workspace(&[("pkg/big.py", &big_class())])?;
        let locs = [location("pkg/big.py", "Big", 1, 600)];
        let conversation = Fake::new(32_768, "");
        let issue = "Big.target_method() returns 'wrong'.";
        let p = fit_prompt(
            &conversation,
            dir.path(),
            issue,
            &locs,
            512,
            EditFormat::SearchReplace,
        )?;
        assert_eq!(p.trim, None);
        assert_eq!(
            p.messages,
            messages(issue, &code_sections(dir.path(), &locs, false))
        );
        Ok(())
    }

    #[test]
    fn identifiers_are_the_code_like_words() {
        let cases: [(&str, &[&str]); 5] = [
            ("Square.area() is wrong", &["area"]),
            ("the get_value of a QuerySet", &["QuerySet", "get_value"]),
            ("call len(x) and run(", &["len", "run"]),
            ("plain words only, Square too", &[]),
            ("ab_ is short? no: _x and 9_lives", &["ab_"]),
        ];
        for (text, want) in cases {
            let got: Vec<String> = issue_identifiers(text).into_iter().collect();
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn a_short_span_keeps_every_line() {
        let lines: Vec<String> = (1..=30).map(|n| format!("line {n}")).collect();
        let loc = location("a.py", "f", 10, 20);
        let none = BTreeSet::new();
        // Shown 5-25; kept: 5-20 (signature window) and 17-25 (end).
        assert_eq!(
            kept_lines(&lines, &loc, &none),
            (5..=25).collect::<BTreeSet<_>>()
        );
        // A 40-line span: 5-20 and 47-55 kept; 21-46 left out.
        let lines: Vec<String> = (1..=60).map(|n| format!("line {n}")).collect();
        let loc = location("a.py", "f", 10, 50);
        let kept = kept_lines(&lines, &loc, &none);
        assert_eq!(kept, (5..=20).chain(47..=55).collect::<BTreeSet<_>>());
        // A line naming `line_30`... none does; `30` is a word of line 30.
        let ids: BTreeSet<String> = ["30".to_string()].into();
        let kept = kept_lines(&lines, &loc, &ids);
        assert_eq!(
            kept,
            (5..=20)
                .chain(25..=35)
                .chain(47..=55)
                .collect::<BTreeSet<_>>()
        );
    }

    /// A module with a class of a decorated property and a method, and a
    /// decorated function with a nested one.
    const SHAPES: &str = "import functools\n\n\nclass Shape:\n    @property\n    def area(self):\n        return self.w * self.h\n\n    def scale(self, k):\n        self.w *= k\n        return self\n\n\n@functools.lru_cache(maxsize=None)\ndef helper(x):\n    def inner(y):\n        return y\n    return inner(x)\n";

    /// Two functions with the same two-line body, 20 lines apart.
    fn twins() -> String {
        let mut out = String::from("def a(w, k):\n    w *= k\n    return w\n\n\n");
        for n in 6..=20 {
            out.push_str(&format!("x{n} = {n}\n"));
        }
        out.push_str("def b(w, k):\n    w *= k\n    return w\n");
        out
    }

    /// The prompt of `format` over `locs`, whole, or trimmed to the
    /// identifiers of `issue` with `trim`.
    fn prompt_of(
        root: &Path,
        issue: &str,
        locs: &[Location],
        format: EditFormat,
        trim: bool,
    ) -> Prompt {
        let ids = issue_identifiers(issue);
        build_prompt(
            issue,
            &read_located(root, locs),
            trim.then_some(&ids),
            format,
            None,
        )
        .into_prompt(None)
    }

    /// The files after applying `reply` (read in `prompt`'s format) to a
    /// copy of `files`.
    fn applied(
        files: &[(&str, &str)],
        prompt: &Prompt,
        reply: &str,
    ) -> Result<Vec<String>, String> {
        let dir = workspace(files).map_err(|e| e.to_string())?;
        match edits_of(reply, prompt) {
            Edits::Lines(edits) => {
                edit::apply_line_edits(dir.path(), &apart(&edits)).map_err(|e| e.to_string())?
            }
            other => return Err(format!("{other:?}")),
        };
        Ok(files
            .iter()
            .map(|(p, _)| std::fs::read_to_string(dir.path().join(p)).unwrap_or_default())
            .collect())
    }

    #[test]
    fn an_anchored_search_takes_the_occurrence_inside_the_shown_range() -> R {
        let text = twins();
        let files = [("t.py", text.as_str())];
        let dir = workspace(&files)?;
        // b (21-23) is shown with lines 16-23: its body, not a's.
        let locs = [location("t.py", "b", 21, 23)];
        let p = prompt_of(dir.path(), "b is wrong", &locs, EditFormat::Anchored, false);
        assert_eq!(p.code[0].shown, (16..=23).collect::<BTreeSet<_>>());
        let reply = "Reasoning: k is ignored.\n\nt.py\n<<<<<<< SEARCH\n    w *= k\n    return w\n=======\n    return w * k\n>>>>>>> REPLACE\n";
        let got = applied(&files, &p, reply)?;
        assert_eq!(
            got[0],
            text.replace(
                "x20 = 20\ndef b(w, k):\n    w *= k\n    return w\n",
                "x20 = 20\ndef b(w, k):\n    return w * k\n"
            )
        );
        // With both shown, two blocks of the same run take both places.
        let locs = [location("t.py", "a", 1, 23)];
        let p = prompt_of(dir.path(), "both", &locs, EditFormat::Anchored, false);
        let reply = "Reasoning: both.\n\nt.py\n<<<<<<< SEARCH\n    return w\n=======\n    return -w\n>>>>>>> REPLACE\nt.py\n<<<<<<< SEARCH\n    return w\n=======\n    return +w\n>>>>>>> REPLACE\n";
        let got = applied(&files, &p, reply)?;
        assert_eq!(got[0].matches("    return -w\n").count(), 1, "{}", got[0]);
        assert_eq!(got[0].matches("    return +w\n").count(), 1, "{}", got[0]);
        assert!(got[0].find("-w") < got[0].find("+w"), "{}", got[0]);
        // A run that is not shown, and one that cannot be placed apart:
        // the first block is kept and the one overlapping it dropped.
        let reply = "Reasoning: x.\n\nt.py\n<<<<<<< SEARCH\n    w *= k\n    w *= k\n=======\n>>>>>>> REPLACE\n";
        assert_eq!(
            edits_of(reply, &p),
            Edits::Refused("SEARCH is not a run of the lines shown of t.py".into())
        );
        let reply = "Reasoning: x.\n\nt.py\n<<<<<<< SEARCH\ndef b(w, k):\n=======\ndef b(w, k=1):\n>>>>>>> REPLACE\nt.py\n<<<<<<< SEARCH\ndef b(w, k):\n    w *= k\n=======\n>>>>>>> REPLACE\n";
        assert_eq!(
            applied(&files, &p, reply)?[0],
            text.replace("def b(w, k):\n", "def b(w, k=1):\n")
        );
        Ok(())
    }

    #[test]
    fn lines_edits_name_shown_numbers_and_a_reversed_range_is_normalised() -> R {
        let files = [("m.py", SHAPES)];
        let dir = workspace(&files)?;
        let locs = [location("m.py", "Shape", 4, 11)];
        let p = prompt_of(
            dir.path(),
            "Shape.area is wrong",
            &locs,
            EditFormat::Lines,
            false,
        );
        let user = &p.messages[1].content;
        assert!(user.contains("\n 1| import functools\n 2| \n"), "{user}");
        assert!(
            user.contains("\n 7|         return self.w * self.h\n"),
            "{user}"
        );
        assert!(user.contains("\n16|     def inner(y):\n```"), "{user}");
        assert!(user.contains("replace lines A-B with:"), "{user}");
        let cases: [(&str, Result<&str, &str>); 4] = [
            (
                "m.py\nreplace lines 7-7 with:\n```\n        return self.w * self.h * 2\n```\n",
                Ok("        return self.w * self.h * 2\n\n    def scale"),
            ),
            // 11-10: lines 10 to 11.
            (
                "m.py\nreplace lines 11-10 with:\n```\n        return self.scaled(k)\n```\n",
                Ok("    def scale(self, k):\n        return self.scaled(k)\n\n\n@functools"),
            ),
            // 7-9 overlaps 6-7: the first edit stands, the second is dropped.
            (
                "m.py\nreplace lines 6-7 with:\n```\n```\nm.py\nreplace lines 7-9 with:\n```\n```\n",
                Ok("class Shape:\n    @property\n\n    def scale(self, k):"),
            ),
            (
                "m.py\nreplace lines 17-17 with:\n```\n```\n",
                Err("Refused(\"line 17 of m.py is not shown\")"),
            ),
        ];
        for (edits, want) in cases {
            let reply = format!("Reasoning: x.\n\n{edits}");
            let got = applied(&files, &p, &reply);
            match want {
                Ok(part) => {
                    let got = got?;
                    assert!(got[0].contains(part), "{edits}:\n{}", got[0]);
                }
                Err(e) => assert_eq!(got, Err(e.to_string()), "{edits}"),
            }
        }
        Ok(())
    }

    #[test]
    fn definitions_are_the_located_functions_and_methods_outermost() -> R {
        let files = [("m.py", SHAPES)];
        let dir = workspace(&files)?;
        let locs = [
            location("m.py", "Shape", 4, 11),
            location("m.py", "helper", 14, 18),
        ];
        let p = prompt_of(dir.path(), "area", &locs, EditFormat::Definition, false);
        assert_eq!(p.format, EditFormat::Definition);
        let got: Vec<(String, usize, usize, &str, &str)> = p
            .targets
            .iter()
            .map(|t| {
                (
                    t.label(),
                    t.start_line,
                    t.end_line,
                    t.indent.as_str(),
                    t.lead.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "m.py::Shape.area".to_string(),
                    5,
                    7,
                    "    ",
                    "    def area("
                ),
                (
                    "m.py::Shape.scale".to_string(),
                    9,
                    11,
                    "    ",
                    "    def scale("
                ),
                ("m.py::helper".to_string(), 14, 18, "", "def helper("),
            ]
        );
        let user = &p.messages[1].content;
        assert!(
            user.ends_with(
                "The functions you can rewrite:\nm.py::Shape.area\nm.py::Shape.scale\nm.py::helper"
            ),
            "{user}"
        );
        // The decorated property, rewritten with its decorator.
        let reply = "Reasoning: x.\n\nm.py::Shape.area\n```\n    @property\n    def area(self):\n\n        return self.w * self.h * 2\n```\n";
        assert_eq!(
            applied(&files, &p, reply)?[0],
            SHAPES.replace(
                "        return self.w * self.h\n",
                "\n        return self.w * self.h * 2\n"
            )
        );
        // Written without its decorator, it loses it.
        let reply = "Reasoning: x.\n\nm.py::helper\n```\ndef helper(x):\n    return x\n```\n";
        assert_eq!(
            applied(&files, &p, reply)?[0],
            SHAPES.replace(
                "@functools.lru_cache(maxsize=None)\ndef helper(x):\n    def inner(y):\n        return y\n    return inner(x)\n",
                "def helper(x):\n    return x\n"
            )
        );
        // The lines are kept as written at the forced indentation; a line
        // under it is put at it.
        let reply = "Reasoning: x.\n\nm.py::Shape.scale\n```\n    def scale(self, k):\n      self.w *= k * 2\n  return self\n```\n";
        assert_eq!(
            applied(&files, &p, reply)?[0],
            SHAPES.replace(
                "        self.w *= k\n        return self\n",
                "      self.w *= k * 2\n    return self\n"
            )
        );
        // No function among the spans: anchored instead.
        let p = prompt_of(
            dir.path(),
            "x",
            &[location("m.py", "imports", 1, 1)],
            EditFormat::Definition,
            false,
        );
        assert_eq!((p.format, p.targets.len()), (EditFormat::Anchored, 0));
        Ok(())
    }

    /// A xorshift64 generator: the property tests' seeded randomness.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        /// A number in `0..n` (`n` > 0).
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Random replacement lines at `indent`: 0-4 statements (some opening
    /// a block or a parenthesis, so some results do not parse), blank
    /// lines among them.
    fn random_lines(rng: &mut Rng, indent: &str) -> String {
        const POOL: &[&str] = &[
            "pass",
            "x = 1",
            "return None",
            "",
            "y = [1, 2]",
            "if x:",
            "self.w = 0  # note",
            "y = (1,",
        ];
        (0..rng.below(5))
            .map(|_| {
                let line = POOL[rng.below(POOL.len())];
                if line.is_empty() {
                    "\n".to_string()
                } else {
                    format!("{indent}{line}\n")
                }
            })
            .collect()
    }

    /// A property case: the files, the located spans, the issue, and
    /// whether the spans are trimmed.
    type PropertyCase = (
        Vec<(&'static str, String)>,
        Vec<Location>,
        &'static str,
        bool,
    );

    /// The cases of the property tests: a small module shown whole, and a
    /// large class trimmed around the issue's names (gaps in the runs).
    fn property_cases() -> Vec<PropertyCase> {
        vec![
            (
                vec![("m.py", SHAPES.to_string()), ("t.py", twins())],
                vec![
                    location("m.py", "Shape", 4, 11),
                    location("m.py", "helper", 14, 18),
                    location("t.py", "b", 1, 23),
                ],
                "Shape.area",
                false,
            ),
            (
                vec![("pkg/big.py", big_class())],
                vec![location("pkg/big.py", "Big", 1, 600)],
                "Big.target_method() returns 'wrong'",
                true,
            ),
        ]
    }

    /// Applies `reply`; the only failure allowed is a syntax error of the
    /// result (counted), anything else fails the test.
    fn check_property(
        files: &[(&str, String)],
        prompt: &Prompt,
        reply: &str,
        syntax_errors: &mut usize,
    ) -> R {
        let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
        let after =
            applied(&refs, prompt, reply).map_err(|e| format!("{e}\nin reply:\n{reply}"))?;
        let broken = after
            .iter()
            .zip(files)
            .any(|(a, (_, b))| symbols::syntax_errors(a).len() > symbols::syntax_errors(b).len());
        if broken {
            *syntax_errors += 1;
        }
        Ok(())
    }

    /// Replies per format and case in the property tests.
    const PROPERTY_REPLIES: usize = 200;

    #[test]
    fn every_conforming_anchored_reply_applies() -> R {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut syntax = 0;
        for (files, locs, issue, trim) in property_cases() {
            let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
            let dir = workspace(&refs)?;
            let p = prompt_of(dir.path(), issue, &locs, EditFormat::Anchored, trim);
            let shown: Vec<grammar::ShownFile> = p.code.iter().map(|c| c.runs(true)).collect();
            for _ in 0..PROPERTY_REPLIES {
                let mut reply = String::from("Reasoning: a random edit.\n\n");
                let mut taken: Vec<(usize, usize, usize)> = Vec::new();
                for _ in 0..1 + rng.below(3) {
                    let f = rng.below(shown.len());
                    let run = &shown[f].runs[rng.below(shown[f].runs.len())];
                    let at = rng.below(run.lines.len());
                    let len = 1 + rng.below((run.lines.len() - at).min(6));
                    let (a, b) = (run.first + at, run.first + at + len - 1);
                    if taken.iter().any(|&(g, s, e)| g == f && a <= e && s <= b) {
                        continue;
                    }
                    taken.push((f, a, b));
                    let search: String = run.lines[at..at + len]
                        .iter()
                        .map(|l| format!("{l}\n"))
                        .collect();
                    let indent: String = run.lines[at]
                        .chars()
                        .take_while(|c| c.is_whitespace())
                        .collect();
                    reply.push_str(&format!(
                        "{}\n<<<<<<< SEARCH\n{search}=======\n{}>>>>>>> REPLACE\n",
                        shown[f].path,
                        random_lines(&mut rng, &indent)
                    ));
                }
                check_property(&files, &p, &reply, &mut syntax)?;
            }
        }
        // Some random replacements break the syntax: the generator is not
        // trivially safe.
        assert!(syntax > 0);
        Ok(())
    }

    #[test]
    fn every_conforming_lines_reply_applies() -> R {
        let mut rng = Rng(0xD1B5_4A32_D192_ED03);
        let mut syntax = 0;
        for (files, locs, issue, trim) in property_cases() {
            let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
            let dir = workspace(&refs)?;
            let p = prompt_of(dir.path(), issue, &locs, EditFormat::Lines, trim);
            let shown: Vec<grammar::ShownFile> = p.code.iter().map(|c| c.runs(false)).collect();
            for _ in 0..PROPERTY_REPLIES {
                let mut reply = String::from("Reasoning: a random edit.\n\n");
                let mut taken: Vec<(usize, usize, usize)> = Vec::new();
                for _ in 0..1 + rng.below(3) {
                    let f = rng.below(shown.len());
                    let run = &shown[f].runs[rng.below(shown[f].runs.len())];
                    let a = run.first + rng.below(run.lines.len());
                    let b = run.first + rng.below(run.lines.len());
                    let (lo, hi) = (a.min(b), a.max(b));
                    if taken.iter().any(|&(g, s, e)| g == f && lo <= e && s <= hi) {
                        continue;
                    }
                    taken.push((f, lo, hi));
                    let first = &run.lines[lo - run.first];
                    let indent: String = first.chars().take_while(|c| c.is_whitespace()).collect();
                    reply.push_str(&format!(
                        "{}\nreplace lines {a}-{b} with:\n```\n{}```\n",
                        shown[f].path,
                        random_lines(&mut rng, &indent)
                    ));
                }
                check_property(&files, &p, &reply, &mut syntax)?;
            }
        }
        assert!(syntax > 0);
        Ok(())
    }

    #[test]
    fn every_conforming_definition_reply_applies() -> R {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut syntax = 0;
        for (files, locs, issue, trim) in property_cases() {
            let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
            let dir = workspace(&refs)?;
            let p = prompt_of(dir.path(), issue, &locs, EditFormat::Definition, trim);
            assert_eq!(p.format, EditFormat::Definition);
            for _ in 0..PROPERTY_REPLIES {
                let t = &p.targets[rng.below(p.targets.len())];
                let decorators: String = (0..rng.below(3))
                    .map(|i| format!("{}@decorator_{i}\n", t.indent))
                    .collect();
                let body = random_lines(&mut rng, &format!("{}    ", t.indent));
                let reply = format!(
                    "Reasoning: a random rewrite.\n\n{}\n```\n{decorators}{}self, x):\n{}    return x\n{body}```\n",
                    t.label(),
                    t.lead,
                    t.indent
                );
                check_property(&files, &p, &reply, &mut syntax)?;
            }
        }
        assert!(syntax > 0);
        Ok(())
    }

    /// `files` committed in a new git repository; its head commit.
    fn git_workspace(
        files: &[(&str, &str)],
    ) -> Result<(tempfile::TempDir, String), Box<dyn std::error::Error>> {
        let dir = workspace(files)?;
        for args in [
            &["init", "-q"][..],
            &["add", "-A"],
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "base",
            ],
        ] {
            let status = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .status()?;
            assert!(status.success(), "git {args:?}");
        }
        let head = crate::repo::head_commit(dir.path())?;
        Ok((dir, head))
    }

    #[test]
    fn each_format_runs_through_the_fixer_and_is_recorded() -> R {
        let (dir, head) = git_workspace(&[("m.py", SHAPES)])?;
        let issue = issue_of("Shape.area is wrong");
        let locs = [location("m.py", "Shape", 4, 11)];
        let patch = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -4,7 +4,7 @@ import functools\n class Shape:\n     @property\n     def area(self):\n-        return self.w * self.h\n+        return self.w * self.h * 2\n \n     def scale(self, k):\n         self.w *= k\n";
        let cases = [
            (
                EditFormat::SearchReplace,
                "Reasoning: x.\n\nm.py\n<<<<<<< SEARCH\n        return self.w * self.h\n=======\n        return self.w * self.h * 2\n>>>>>>> REPLACE\n",
            ),
            (
                EditFormat::Anchored,
                "Reasoning: x.\n\nm.py\n<<<<<<< SEARCH\n        return self.w * self.h\n=======\n        return self.w * self.h * 2\n>>>>>>> REPLACE\n",
            ),
            (
                EditFormat::Lines,
                "Reasoning: x.\n\nm.py\nreplace lines 7-7 with:\n```\n        return self.w * self.h * 2\n```\n",
            ),
            (
                EditFormat::Definition,
                "Reasoning: x.\n\nm.py::Shape.area\n```\n    @property\n    def area(self):\n        return self.w * self.h * 2\n```\n",
            ),
        ];
        for (format, reply) in cases {
            let mut conversation = Fake::new(32_768, reply);
            let mut trajectory = Trajectory::new("demo__big-1");
            let settings = FixerSettings {
                candidates: 2,
                edit_format: format,
                ..FixerSettings::default()
            };
            let fixes = run(
                &mut conversation,
                dir.path(),
                &head,
                &issue,
                &locs,
                &settings,
                &Sampling::default(),
                &mut trajectory,
            )?;
            let statuses: Vec<&Status> = fixes.candidates.iter().map(|c| &c.status).collect();
            assert_eq!(
                statuses,
                [&Status::Kept, &Status::Duplicate(0)],
                "{format:?}"
            );
            let got = fixes.candidates[0].patch.as_deref().map(normalise);
            assert_eq!(got, Some(normalise(patch)), "{format:?}");
            assert_eq!((fixes.edit_format, fixes.applied()), (format, 2));
            let json = serde_json::to_value(&fixes)?;
            assert_eq!(json["edit_format"], format.name(), "{format:?}");
            // The workspace is left as it was.
            assert_eq!(crate::repo::diff_against(dir.path(), &head)?, "");
        }
        // A reply cut before its edit closed is `no_blocks`.
        let mut conversation = Fake::new(
            32_768,
            "Reasoning: x.\n\nm.py\nreplace lines 7-7 with:\n```\n        return",
        );
        let settings = FixerSettings {
            candidates: 1,
            edit_format: EditFormat::Lines,
            ..FixerSettings::default()
        };
        let fixes = run(
            &mut conversation,
            dir.path(),
            &head,
            &issue,
            &locs,
            &settings,
            &Sampling::default(),
            &mut Trajectory::new("demo__big-1"),
        )?;
        assert_eq!(fixes.candidates[0].status, Status::NoBlocks);
        assert_eq!(fixes.applied(), 0);
        Ok(())
    }

    #[test]
    fn older_records_and_settings_read_as_search_replace() -> R {
        let fixes: Fixes = serde_json::from_str(r#"{"candidates": [], "distinct": []}"#)?;
        assert_eq!(fixes.edit_format, EditFormat::SearchReplace);
        let cases = [
            ("candidates = 2\ntemperature = 0.5\nmax_tokens = 9", EditFormat::SearchReplace),
            ("candidates = 2\ntemperature = 0.5\nmax_tokens = 9\nedit_format = \"lines\"", EditFormat::Lines),
            ("candidates = 2\ntemperature = 0.5\nmax_tokens = 9\nedit_format = \"anchored\"", EditFormat::Anchored),
            ("candidates = 2\ntemperature = 0.5\nmax_tokens = 9\nedit_format = \"definition\"", EditFormat::Definition),
            ("candidates = 2\ntemperature = 0.5\nmax_tokens = 9\nedit_format = \"search_replace\"", EditFormat::SearchReplace),
        ];
        for (text, want) in cases {
            let s: FixerSettings = toml::from_str(text)?;
            assert_eq!(s.edit_format, want, "{text}");
            assert_eq!(serde_json::to_value(want)?, want.name());
        }
        assert!(toml::from_str::<FixerSettings>(
            "candidates = 2\ntemperature = 0.5\nmax_tokens = 9\nedit_format = \"diff\""
        )
        .is_err());
        Ok(())
    }
}
