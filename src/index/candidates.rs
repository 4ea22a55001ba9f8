//! Edit-location candidates ranked from the code index, without a model.
//!
//! What the issue names comes first: the files it mentions (`fits/card.py`,
//! `sympy.core.basic`), the frames of its tracebacks that point into the
//! repository's own files (the function holding the frame's line), and the
//! dotted names and identifiers it writes as code that the index defines
//! (`Card._split`, `` `bulk_create` ``). Then BM25: over functions (the
//! qualname and the source, [`CodeIndex::rank_functions`]) and over whole
//! files. Each function gets one score:
//!
//! ```text
//! score(f) = own(f) + file(F)          F the file that defines f
//! own(f)   = FUNCTION_BM25_WEIGHT · bm25(f) / max bm25
//!          + traceback(f) + named(f) + class(f)
//! file(F)  = FILE_BM25_WEIGHT · bm25(F) / max bm25
//!          + PATH_WEIGHT if the issue names F + TRACEBACK_FILE_WEIGHT if a frame does
//! ```
//!
//! and a file's score is `file(F)` plus the best `own(f)` of its functions,
//! so a file ranks as high as its best function. Test files are never
//! candidates; documentation, examples and `setup.py` only when nothing
//! else is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::bm25::Bm25;
use super::is_test_file;
use super::symbols::{canonical_root, read_source, CodeIndex, Symbol, SymbolKind};

/// Weight of a function's BM25 score, normalised to the best function's.
pub const FUNCTION_BM25_WEIGHT: f64 = 1.0;
/// Weight of a file's BM25 score, normalised to the best file's: the whole
/// file's vocabulary says where a topic lives even when no single
/// function's text does.
pub const FILE_BM25_WEIGHT: f64 = 1.0;
/// A file the issue names by path or module: as strong as two full BM25
/// matches, since an author who names a file usually knows it is involved.
pub const PATH_WEIGHT: f64 = 2.0;
/// The function of the innermost traceback frame in the repository: where
/// the error surfaced, the strongest evidence an issue gives.
pub const TRACEBACK_WEIGHT: f64 = 3.0;
/// Taken off [`TRACEBACK_WEIGHT`] per frame further out from the innermost:
/// outer frames are callers, less often the place to fix.
pub const TRACEBACK_STEP: f64 = 0.25;
/// The least a traceback frame's function gets, however far out.
pub const TRACEBACK_MIN_WEIGHT: f64 = 1.5;
/// A file some traceback frame points into.
pub const TRACEBACK_FILE_WEIGHT: f64 = 1.0;
/// A function or method the issue names with a dotted name (`Card._split`,
/// `QuerySet.bulk_create`), shared among its definitions.
pub const NAMED_WEIGHT: f64 = 2.0;
/// A function the issue names with a bare identifier in code, shared among
/// its definitions: weaker, since code in an issue also calls functions that
/// work fine.
pub const IDENTIFIER_WEIGHT: f64 = 1.0;
/// Each method of a class the issue names, shared among the class's
/// definitions: the class is involved, BM25 says which method.
pub const CLASS_WEIGHT: f64 = 0.5;
/// A name defined more often than this says nothing about where (`get`,
/// `__init__`): it is ignored.
pub const MAX_DEFINITIONS: usize = 3;
/// A partial path (`card.py`, `fits/card.py`) matching more files than this
/// is ignored as ambiguous.
pub const MAX_PATH_MATCHES: usize = 3;
/// Identifiers shorter than this (`x`, `df`) are too common to look up.
pub const MIN_IDENTIFIER_CHARS: usize = 3;

/// Words of code that name nothing in a repository: keywords and builtins.
const NOT_NAMES: &[&str] = &[
    "and",
    "any",
    "all",
    "assert",
    "async",
    "await",
    "bool",
    "break",
    "bytes",
    "class",
    "continue",
    "def",
    "del",
    "dict",
    "elif",
    "else",
    "except",
    "False",
    "finally",
    "float",
    "for",
    "from",
    "getattr",
    "global",
    "hasattr",
    "if",
    "import",
    "int",
    "isinstance",
    "in",
    "is",
    "lambda",
    "len",
    "list",
    "max",
    "min",
    "None",
    "nonlocal",
    "not",
    "object",
    "open",
    "or",
    "pass",
    "print",
    "raise",
    "range",
    "repr",
    "return",
    "self",
    "cls",
    "set",
    "setattr",
    "str",
    "super",
    "True",
    "try",
    "tuple",
    "type",
    "while",
    "with",
    "yield",
    "Traceback",
    "File",
    "line",
    "most",
    "recent",
    "call",
    "last",
    "Error",
    "Exception",
    "ValueError",
    "TypeError",
    "KeyError",
    "AttributeError",
    "IndexError",
    "RuntimeError",
    "python",
    "pip",
    "install",
];

/// A place to edit, ranked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Relative to the repository root.
    pub path: String,
    /// The function's or method's qualname (`Card._split`).
    pub symbol: String,
    /// 1-based, the first decorator's line if decorated.
    pub start_line: usize,
    /// 1-based, inclusive.
    pub end_line: usize,
    /// See the module's documentation.
    pub score: f64,
    /// What it was ranked for, `+`-joined, strongest first: `traceback`,
    /// `named`, `class`, `path`, `bm25`.
    pub why: String,
}

/// A file and its score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankedPath {
    pub path: String,
    pub score: f64,
}

/// Candidates and files, best first (ties by path, then line).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ranking {
    pub candidates: Vec<Candidate>,
    pub files: Vec<RankedPath>,
}

/// A traceback frame as the issue writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// As written, `\` turned to `/`.
    pub path: String,
    pub line: usize,
    /// The function's name when the frame gives it (`in _split`).
    pub function: Option<String>,
}

/// What an issue's text names, before looking anything up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mentions {
    /// Words ending in `.py`, as written (`\` turned to `/`), in order, once each.
    pub paths: Vec<String>,
    /// Traceback frames (`File "x.py", line 3, in f` and pytest's
    /// `x.py:3: in f`), in the order written.
    pub frames: Vec<Frame>,
    /// Dotted names (`Card._split`, `sympy.core.basic`), `self.`/`cls.` left
    /// off, in order, once each.
    pub dotted: Vec<String>,
    /// Identifiers in code (backticks, fenced blocks), called in prose
    /// (`name(`) or defined (`def name`, `class Name`), in order, once each.
    pub identifiers: Vec<String>,
}

fn push_unique(list: &mut Vec<String>, item: &str) {
    if !list.iter().any(|x| x == item) {
        list.push(item.to_string());
    }
}

fn is_identifier(word: &str) -> bool {
    let mut chars = word.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A word that may be a path: letters, digits, `_ . / - \`.
fn path_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || "_./-\\".contains(c)))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| !w.is_empty())
}

/// The text's code: the lines of fenced blocks and the spans between
/// backticks.
fn code_parts(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            out.push(line);
        } else {
            out.extend(line.split('`').skip(1).step_by(2));
        }
    }
    out
}

fn frame_of_python(line: &str) -> Option<Frame> {
    let rest = &line[line.find("File \"")? + 6..];
    let (path, rest) = rest.split_once('"')?;
    let rest = rest.trim_start().strip_prefix(",")?.trim_start();
    let rest = rest.strip_prefix("line")?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let line_no = digits.parse().ok()?;
    let function = rest[digits.len()..]
        .trim_start()
        .strip_prefix(",")
        .and_then(|r| r.trim_start().strip_prefix("in "))
        .and_then(|r| r.split_whitespace().next())
        .filter(|f| is_identifier(f))
        .map(str::to_string);
    Some(Frame {
        path: path.replace('\\', "/"),
        line: line_no,
        function,
    })
}

/// pytest's `path/x.py:12: in name` or `path/x.py:12: ValueError`.
fn frame_of_pytest(line: &str) -> Option<Frame> {
    let word = line
        .split_whitespace()
        .find(|w| w.contains(".py:"))?
        .trim_start_matches(['"', '\'', '(']);
    let (path, rest) = word.split_once(".py:")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let line_no = digits.parse().ok()?;
    let after = line[line.find(word)? + word.len()..].trim_start();
    let function = after
        .strip_prefix("in ")
        .and_then(|r| r.split_whitespace().next())
        .filter(|f| is_identifier(f))
        .map(str::to_string);
    Some(Frame {
        path: format!("{}.py", path.replace('\\', "/")),
        line: line_no,
        function,
    })
}

/// What `issue` names (see [`Mentions`]).
pub fn mentions(issue: &str) -> Mentions {
    let mut m = Mentions::default();
    for line in issue.lines() {
        if let Some(frame) = frame_of_python(line).or_else(|| frame_of_pytest(line)) {
            m.frames.push(frame);
        }
        for word in path_words(line) {
            let word = word.replace('\\', "/");
            if word.ends_with(".py") && word.len() > 3 {
                push_unique(&mut m.paths, &word);
            }
        }
        for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')) {
            let word = word.trim_matches('.');
            let word = word
                .strip_prefix("self.")
                .or_else(|| word.strip_prefix("cls."))
                .unwrap_or(word);
            let parts: Vec<&str> = word.split('.').collect();
            if parts.len() >= 2
                && parts.iter().all(|p| is_identifier(p))
                && parts.last() != Some(&"py")
            {
                push_unique(&mut m.dotted, word);
            }
        }
        // Called (`name(`), or defined (`def name`, `class Name`).
        for (at, _) in line.match_indices('(') {
            let before = &line[..at];
            let start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            push_identifier(&mut m.identifiers, &before[start..]);
        }
        let words: Vec<&str> = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        for pair in words.windows(2) {
            if matches!(pair[0], "def" | "class") {
                push_identifier(&mut m.identifiers, pair[1]);
            }
        }
    }
    for part in code_parts(issue) {
        for word in part.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            push_identifier(&mut m.identifiers, word);
        }
    }
    m
}

fn push_identifier(list: &mut Vec<String>, word: &str) {
    if word.len() >= MIN_IDENTIFIER_CHARS && is_identifier(word) && !NOT_NAMES.contains(&word) {
        push_unique(list, word);
    }
}

/// A test file by [`is_test_file`], or under a top-level `testing/`
/// directory (pytest's own tests): never a place to edit.
pub fn is_excluded(path: &str) -> bool {
    is_test_file(path) || path.starts_with("testing/")
}

/// Documentation, examples, benchmarks and `setup.py`: a place to edit
/// only when nothing else is.
pub fn is_secondary(path: &str) -> bool {
    let first = path.split('/').next().unwrap_or(path);
    matches!(
        first,
        "doc" | "docs" | "example" | "examples" | "benchmarks" | "asv_bench"
    ) || path == "setup.py"
}

/// The directories a source layout keeps its packages under: installed,
/// `src/_pytest/runner.py` is `site-packages/_pytest/runner.py`, and
/// matplotlib's `lib/matplotlib/axes/_base.py` is `matplotlib/axes/_base.py`.
const LAYOUT_ROOTS: &[&str] = &["src/", "lib/"];

/// Whether `written` is `path` or ends with it after a `/`.
fn ends_with_path(written: &str, path: &str) -> bool {
    written == path
        || (written.len() > path.len()
            && written.ends_with(path)
            && written.as_bytes()[written.len() - path.len() - 1] == b'/')
}

/// The indices of the index's files that `written` names: the file whose
/// whole path it ends with (an absolute path, a site-packages copy; the
/// longest such), the path under a source layout's root counting as whole
/// ([`LAYOUT_ROOTS`]), else the files whose path ends with it after a `/`
/// (`fits/card.py`), when there are at most [`MAX_PATH_MATCHES`].
fn resolve_path(index: &CodeIndex, written: &str) -> Vec<usize> {
    let written = written.trim_start_matches("./");
    let whole = index
        .files
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let installed = LAYOUT_ROOTS
                .iter()
                .find_map(|root| f.path.strip_prefix(root));
            [Some(f.path.as_str()), installed]
                .into_iter()
                .flatten()
                .find(|p| ends_with_path(written, p))
                .map(|p| (i, p.len()))
        })
        .max_by_key(|&(_, len)| len);
    if let Some((i, _)) = whole {
        return vec![i];
    }
    let suffix = format!("/{written}");
    let partial: Vec<usize> = index
        .files
        .iter()
        .enumerate()
        .filter(|(_, f)| f.path.ends_with(&suffix))
        .map(|(i, _)| i)
        .collect();
    if partial.len() <= MAX_PATH_MATCHES {
        partial
    } else {
        Vec::new()
    }
}

/// Evidence for one function.
#[derive(Debug, Default, Clone, Copy)]
struct Own {
    bm25: f64,
    traceback: f64,
    named: f64,
    class: f64,
}

impl Own {
    fn total(&self) -> f64 {
        FUNCTION_BM25_WEIGHT * self.bm25 + self.traceback + self.named + self.class
    }
}

/// Evidence for one file.
#[derive(Debug, Default, Clone, Copy)]
struct FileEvidence {
    bm25: f64,
    path: f64,
    traceback: f64,
}

impl FileEvidence {
    fn total(&self) -> f64 {
        FILE_BM25_WEIGHT * self.bm25 + self.path + self.traceback
    }
}

/// Ranks the index's functions and methods, and its files, as places to
/// edit for `issue` (see the module's documentation). `root` is the
/// repository the index was built from, read for BM25.
pub fn rank(index: &CodeIndex, root: &Path, issue: &str) -> Ranking {
    let m = mentions(issue);
    let mut evidence = Evidence::new(index);
    // Paths, and dotted module names (`sympy.core.basic.Basic.foo`).
    evidence.note_paths(&m.paths);
    evidence.note_names(&m.dotted, &m.identifiers);
    // Traceback frames into the repository's own (non-test) files.
    evidence.note_frames(&m.frames);
    // BM25 over functions and over files, each normalised to its best.
    evidence.note_bm25(root, issue);
    Ranking {
        candidates: evidence.candidates(),
        files: evidence.ranked_files(),
    }
}

/// A function or method: (file index, symbol index) in the [`CodeIndex`].
type SymbolAt = (usize, usize);

/// The index's non-test functions, methods and classes by name.
type ByName<'a> = HashMap<&'a str, Vec<SymbolAt>>;

/// What [`rank`] has gathered so far, per function and per file.
struct Evidence<'a> {
    index: &'a CodeIndex,
    own: HashMap<SymbolAt, Own>,
    files: HashMap<usize, FileEvidence>,
}

impl<'a> Evidence<'a> {
    fn new(index: &'a CodeIndex) -> Self {
        Evidence {
            index,
            own: HashMap::new(),
            files: HashMap::new(),
        }
    }

    fn excluded(&self, fi: usize) -> bool {
        is_excluded(&self.index.files[fi].path)
    }

    /// The files the issue names by path.
    fn note_paths(&mut self, paths: &[String]) {
        for written in paths {
            for fi in resolve_path(self.index, written) {
                if !self.excluded(fi) {
                    self.files.entry(fi).or_default().path = PATH_WEIGHT;
                }
            }
        }
    }

    fn by_name(&self) -> ByName<'a> {
        let index = self.index;
        let mut by_name: ByName<'a> = HashMap::new();
        for (fi, f) in index.files.iter().enumerate() {
            if self.excluded(fi) {
                continue;
            }
            for (si, s) in f.symbols.iter().enumerate() {
                by_name.entry(s.name.as_str()).or_default().push((fi, si));
            }
        }
        by_name
    }

    /// The functions and classes the issue names, with dotted names and
    /// with identifiers.
    fn note_names(&mut self, dotted: &[String], identifiers: &[String]) {
        let by_name = self.by_name();
        for dotted in dotted {
            self.note_dotted(dotted, &by_name);
        }
        for name in identifiers {
            if let Some(hits) = by_name.get(name.as_str()) {
                self.give(hits, IDENTIFIER_WEIGHT);
            }
        }
    }

    /// `weight` shared among `hits` as named functions, or [`CLASS_WEIGHT`]
    /// to each method of a class among them; nothing when there are more
    /// than [`MAX_DEFINITIONS`].
    fn give(&mut self, hits: &[SymbolAt], weight: f64) {
        if hits.is_empty() || hits.len() > MAX_DEFINITIONS {
            return;
        }
        let index = self.index;
        let share = weight / hits.len() as f64;
        for &(fi, si) in hits {
            let s = &index.files[fi].symbols[si];
            if s.kind == SymbolKind::Class {
                let prefix = format!("{}.", s.qualname);
                for (mi, method) in index.files[fi].symbols.iter().enumerate() {
                    if method.kind == SymbolKind::Method
                        && method.qualname.starts_with(&prefix)
                        && !method.qualname[prefix.len()..].contains('.')
                    {
                        let o = self.own.entry((fi, mi)).or_default();
                        o.class = o.class.max(CLASS_WEIGHT / hits.len() as f64);
                    }
                }
            } else {
                let o = self.own.entry((fi, si)).or_default();
                o.named = o.named.max(share);
            }
        }
    }

    /// A dotted name: in the module it starts with when that is a file of
    /// the repository, else wherever a qualname matches it.
    fn note_dotted(&mut self, dotted: &str, by_name: &ByName<'a>) {
        let parts: Vec<&str> = dotted.split('.').collect();
        if self.note_in_module(&parts) {
            return;
        }
        let rest = dotted;
        let index = self.index;
        let last = parts.last().copied().unwrap_or(rest);
        let hits: Vec<SymbolAt> = by_name
            .get(last)
            .map(|v| {
                v.iter()
                    .copied()
                    .filter(|&(fi, si)| {
                        let q = index.files[fi].symbols[si].qualname.as_str();
                        q == rest
                            || q.ends_with(&format!(".{rest}"))
                            || (q.contains('.') && rest.ends_with(&format!(".{q}")))
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.give(&hits, NAMED_WEIGHT);
    }

    /// The longest module prefix of `parts` that is a file of the
    /// repository: the file named, and the qualname after the prefix in it.
    /// False when no prefix is such a file.
    fn note_in_module(&mut self, parts: &[&str]) -> bool {
        let index = self.index;
        for i in (2..=parts.len()).rev() {
            let module = parts[..i].join("/");
            let found: Vec<usize> = [format!("{module}.py"), format!("{module}/__init__.py")]
                .iter()
                .flat_map(|p| resolve_path(index, p))
                .filter(|&fi| !self.excluded(fi))
                .collect();
            if !found.is_empty() {
                for &fi in &found {
                    self.files.entry(fi).or_default().path = PATH_WEIGHT;
                }
                let qual = parts[i..].join(".");
                let hits: Vec<SymbolAt> = found
                    .iter()
                    .filter_map(|&fi| {
                        let si = index.files[fi]
                            .symbols
                            .iter()
                            .position(|s| s.qualname == qual)?;
                        Some((fi, si))
                    })
                    .collect();
                self.give(&hits, NAMED_WEIGHT);
                return true;
            }
        }
        false
    }

    /// Traceback frames into the repository's own (non-test) files: the
    /// file, and the function holding the frame's line, weighted by how
    /// far in the frame is.
    fn note_frames(&mut self, frames: &[Frame]) {
        let index = self.index;
        let frames: Vec<(usize, &Frame)> = frames
            .iter()
            .filter_map(|f| {
                let fi = resolve_path(index, &f.path).into_iter().next()?;
                (!self.excluded(fi)).then_some((fi, f))
            })
            .collect();
        for (k, (fi, frame)) in frames.iter().enumerate() {
            let weight = (TRACEBACK_WEIGHT - TRACEBACK_STEP * (frames.len() - 1 - k) as f64)
                .max(TRACEBACK_MIN_WEIGHT);
            self.files.entry(*fi).or_default().traceback = TRACEBACK_FILE_WEIGHT;
            if let Some(si) = frame_function(&index.files[*fi].symbols, frame) {
                let o = self.own.entry((*fi, si)).or_default();
                o.traceback = o.traceback.max(weight);
            }
        }
    }

    /// BM25 over functions and over files, each normalised to its best.
    fn note_bm25(&mut self, root: &Path, issue: &str) {
        let index = self.index;
        let file_index: HashMap<&str, usize> = index
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.path.as_str(), i))
            .collect();
        let ranked = index.rank_functions(root, issue, usize::MAX);
        let best = ranked.first().map_or(0.0, |r| r.2);
        if best > 0.0 {
            for (path, qualname, score) in &ranked {
                let Some(&fi) = file_index.get(path.as_str()) else {
                    continue;
                };
                if self.excluded(fi) {
                    continue;
                }
                if let Some(si) = index.files[fi]
                    .symbols
                    .iter()
                    .position(|s| &s.qualname == qualname)
                {
                    self.own.entry((fi, si)).or_default().bm25 = score / best;
                }
            }
        }
        let file_scores = file_bm25(index, root, issue, |p| !is_excluded(p));
        let best = file_scores.iter().map(|(_, s)| *s).fold(0.0, f64::max);
        if best > 0.0 {
            for (fi, score) in file_scores {
                self.files.entry(fi).or_default().bm25 = score / best;
            }
        }
    }

    /// Every function with a positive score, best first, secondary files'
    /// only when there are no others.
    fn candidates(&self) -> Vec<Candidate> {
        let mut candidates: Vec<Candidate> = self
            .own
            .iter()
            .filter_map(|(&(fi, si), o)| {
                let f = &self.index.files[fi];
                let s = &f.symbols[si];
                let fe = self.files.get(&fi).copied().unwrap_or_default();
                let score = o.total() + fe.total();
                if score <= 0.0 {
                    return None;
                }
                let reasons = [
                    ("traceback", o.traceback > 0.0),
                    ("named", o.named > 0.0),
                    ("class", o.class > 0.0),
                    ("path", fe.path > 0.0),
                    ("bm25", o.bm25 > 0.0 || fe.bm25 > 0.0),
                ];
                let why: Vec<&str> = reasons.iter().filter(|r| r.1).map(|r| r.0).collect();
                Some(Candidate {
                    path: f.path.clone(),
                    symbol: s.qualname.clone(),
                    start_line: s.start_line,
                    end_line: s.end_line,
                    score,
                    why: why.join("+"),
                })
            })
            .collect();
        if candidates.iter().any(|c| !is_secondary(&c.path)) {
            candidates.retain(|c| !is_secondary(&c.path));
        }
        candidates.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.path.cmp(&b.path))
                .then(a.start_line.cmp(&b.start_line))
        });
        // Two definitions of one qualname (a property's getter and setter) are
        // one place to show.
        let mut seen = BTreeSet::new();
        candidates.retain(|c| seen.insert((c.path.clone(), c.symbol.clone())));
        candidates
    }

    /// Every file with a positive score (its own plus its best function's),
    /// best first, secondary files only when there are no others.
    fn ranked_files(&self) -> Vec<RankedPath> {
        let mut best_own: BTreeMap<usize, f64> = BTreeMap::new();
        for (&(fi, _), o) in &self.own {
            let e = best_own.entry(fi).or_insert(0.0);
            *e = e.max(o.total());
        }
        let mut ranked_files: Vec<RankedPath> = self
            .files
            .keys()
            .chain(best_own.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|&fi| RankedPath {
                path: self.index.files[fi].path.clone(),
                score: self.files.get(&fi).copied().unwrap_or_default().total()
                    + best_own.get(&fi).copied().unwrap_or(0.0),
            })
            .filter(|r| r.score > 0.0)
            .collect();
        if ranked_files.iter().any(|r| !is_secondary(&r.path)) {
            ranked_files.retain(|r| !is_secondary(&r.path));
        }
        ranked_files.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.path.cmp(&b.path))
        });
        ranked_files
    }
}

/// The index of the function (not class) in `symbols` that holds the
/// frame's line: the innermost one with the frame's function name, else
/// the only function of that name, else the innermost one.
fn frame_function(symbols: &[Symbol], frame: &Frame) -> Option<usize> {
    let holding = |named: bool| {
        symbols
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.kind != SymbolKind::Class
                    && s.start_line <= frame.line
                    && frame.line <= s.end_line
                    && (!named || frame.function.as_deref() == Some(s.name.as_str()))
            })
            .max_by_key(|(_, s)| s.start_line)
            .map(|(i, _)| i)
    };
    let by_function = || {
        let name = frame.function.as_deref()?;
        let mut named = symbols
            .iter()
            .enumerate()
            .filter(|(_, s)| s.kind != SymbolKind::Class && s.name == name);
        let first = named.next()?;
        named.next().is_none().then_some(first.0)
    };
    holding(true)
        .or_else(by_function)
        .or_else(|| holding(false))
}

/// BM25 of `query` over the index's files whose path `keep` accepts (a
/// file's path counts as part of its text): (file index, score) for every
/// positive score, best first.
fn file_bm25(
    index: &CodeIndex,
    root: &Path,
    query: &str,
    keep: impl Fn(&str) -> bool + Sync,
) -> Vec<(usize, f64)> {
    let Ok(root) = canonical_root(root) else {
        return Vec::new();
    };
    let documents: Vec<(usize, String)> = index
        .files
        .par_iter()
        .enumerate()
        .filter(|(_, f)| keep(&f.path))
        .filter_map(|(i, f)| {
            let text = read_source(&root, &f.path)?;
            Some((i, format!("{}\n{text}", f.path)))
        })
        .collect();
    let bm25 = Bm25::new(documents.iter().map(|(_, t)| t.as_str()));
    bm25.rank(query)
        .into_iter()
        .map(|(d, score)| (documents[d].0, score))
        .collect()
}

/// The baseline: the `k` files plain BM25 ranks best for `query` (the issue
/// text) over all the index's files, tests included, nothing boosted.
pub fn bm25_files(index: &CodeIndex, root: &Path, query: &str, k: usize) -> Vec<String> {
    file_bm25(index, root, query, |_| true)
        .into_iter()
        .take(k)
        .map(|(fi, _)| index.files[fi].path.clone())
        .collect()
}

/// The first `functions` candidates, in order, drawn from at most `files`
/// files (a candidate in a further file is passed over).
pub fn top_locations(candidates: &[Candidate], files: usize, functions: usize) -> Vec<Candidate> {
    let mut chosen_files: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for c in candidates {
        if out.len() >= functions {
            break;
        }
        if !chosen_files.contains(&c.path.as_str()) {
            if chosen_files.len() >= files {
                continue;
            }
            chosen_files.push(&c.path);
        }
        out.push(c.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    type R = Result<(), Box<dyn std::error::Error>>;

    fn frame(path: &str, line: usize, function: Option<&str>) -> Frame {
        Frame {
            path: path.into(),
            line,
            function: function.map(str::to_string),
        }
    }

    #[test]
    fn mentions_of_real_looking_issues() {
        struct Case {
            issue: &'static str,
            paths: &'static [&'static str],
            frames: Vec<Frame>,
            dotted: &'static [&'static str],
            identifiers: &'static [&'static str],
        }
        let cases = [
            // astropy-14508: a path in prose and a method in backticks.
            Case {
                issue: "`io.fits.Card` may use a string representation of floats that is \
                        larger than necessary; see `_format_float()` in \
                        astropy/io/fits/card.py.",
                paths: &["astropy/io/fits/card.py"],
                frames: vec![],
                dotted: &["io.fits.Card"],
                identifiers: &["_format_float", "fits", "Card"],
            },
            // sympy: a Python traceback through the repository and numpy.
            Case {
                issue: "Traceback (most recent call last):\n  File \"<stdin>\", line 1, in <module>\n  \
                        File \"/home/me/sympy/sympy/core/sympify.py\", line 385, in sympify\n    \
                        expr = parse_expr(a)\n  \
                        File \"C:\\py\\site-packages\\numpy\\core\\numeric.py\", line 12, in asarray\n",
                paths: &["/home/me/sympy/sympy/core/sympify.py", "/py/site-packages/numpy/core/numeric.py"],
                frames: vec![
                    // Kept, though it resolves to no file.
                    frame("<stdin>", 1, None),
                    frame("/home/me/sympy/sympy/core/sympify.py", 385, Some("sympify")),
                    frame("C:/py/site-packages/numpy/core/numeric.py", 12, Some("asarray")),
                ],
                // `sympify.py` is a path, not a dotted name.
                dotted: &[],
                identifiers: &["parse_expr"],
            },
            // pytest's own traceback format, and a module path.
            Case {
                issue: "src/_pytest/python.py:578: in _importtestmodule\n    mod = import_path(self.path)\n\
                        E   ImportError from _pytest.pathlib.import_path",
                paths: &["src/_pytest/python.py"],
                frames: vec![frame("src/_pytest/python.py", 578, Some("_importtestmodule"))],
                dotted: &["_pytest.pathlib.import_path"],
                identifiers: &["import_path"],
            },
            // A code block defining and calling, dotted names in prose.
            Case {
                issue: "QuerySet.bulk_create() ignores batch_size.\n```python\ndef check(qs):\n    \
                        return qs.bulk_create(objs, batch_size=10)\n```\nSee self._batched_insert.",
                paths: &[],
                frames: vec![],
                dotted: &["QuerySet.bulk_create", "qs.bulk_create"],
                // `self._batched_insert` is prose, `qs` too short.
                identifiers: &["bulk_create", "check", "objs", "batch_size"],
            },
        ];
        for (i, case) in cases.iter().enumerate() {
            let m = mentions(case.issue);
            assert_eq!(m.paths, case.paths, "case {i} paths");
            assert_eq!(m.frames, case.frames, "case {i} frames");
            assert_eq!(m.dotted, case.dotted, "case {i} dotted");
            assert_eq!(m.identifiers, case.identifiers, "case {i} identifiers");
        }
    }

    #[test]
    fn written_paths_resolve_to_the_repositorys_files() {
        use crate::index::symbols::parse_symbols;
        let index = CodeIndex {
            files: [
                "src/_pytest/runner.py",
                "src/_pytest/assertion/rewrite.py",
                "lib/matplotlib/axes/_base.py",
                "pkg/card.py",
                "other/card.py",
            ]
            .iter()
            .map(|p| parse_symbols(p, "def f():\n    pass\n"))
            .collect(),
        };
        let cases: [(&str, &[&str]); 9] = [
            // An installed copy of a src layout (pytest-11143's traceback).
            (
                "/usr/local/lib/python3.8/site-packages/_pytest/assertion/rewrite.py",
                &["src/_pytest/assertion/rewrite.py"],
            ),
            ("src/_pytest/runner.py", &["src/_pytest/runner.py"]),
            ("./src/_pytest/runner.py", &["src/_pytest/runner.py"]),
            // matplotlib's lib layout, from a checkout and installed.
            (
                "/home/me/matplotlib/lib/matplotlib/axes/_base.py",
                &["lib/matplotlib/axes/_base.py"],
            ),
            (
                "/venv/site-packages/matplotlib/axes/_base.py",
                &["lib/matplotlib/axes/_base.py"],
            ),
            ("/x/site-packages/pkg/card.py", &["pkg/card.py"]),
            // Partial paths: every file they end, few enough.
            ("card.py", &["pkg/card.py", "other/card.py"]),
            ("runner.py", &["src/_pytest/runner.py"]),
            // Another package's file of the same name is not ours.
            ("/site-packages/elsewhere/runner.py", &[]),
        ];
        for (written, want) in cases {
            let got: Vec<&str> = resolve_path(&index, written)
                .into_iter()
                .map(|i| index.files[i].path.as_str())
                .collect();
            assert_eq!(got, want, "{written}");
        }
    }

    #[test]
    fn test_files_are_never_locations_and_docs_only_last() {
        let cases = [
            ("tests/test_card.py", true, false),
            ("astropy/io/fits/tests/test_card.py", true, false),
            ("testing/test_python.py", true, false),
            ("src/_pytest/python.py", false, false),
            ("sympy/testing/runtests.py", false, false),
            ("pkg/card_test.py", true, false),
            ("conftest.py", true, false),
            ("doc/conf.py", false, true),
            ("docs/conf.py", false, true),
            ("examples/plot.py", false, true),
            ("setup.py", false, true),
            ("pkg/setup.py", false, false),
            ("sphinx/ext/autodoc/__init__.py", false, false),
        ];
        for (path, excluded, secondary) in cases {
            assert_eq!(
                (is_excluded(path), is_secondary(path)),
                (excluded, secondary),
                "{path}"
            );
        }
    }

    fn git(dir: &Path, args: &[&str]) -> R {
        let out = crate::repo::git_command()
            .current_dir(dir)
            .args(["-c", "user.name=test", "-c", "user.email=test@example.com"])
            .args(args)
            .output()?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
        }
        Ok(())
    }

    fn repo(files: &[(&str, &str)]) -> Result<tempfile::TempDir, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        for (path, text) in files {
            let full = dir.path().join(path);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(full, text)?;
        }
        git(dir.path(), &["init", "-q"])?;
        git(dir.path(), &["add", "-A"])?;
        git(dir.path(), &["commit", "-qm", "x"])?;
        Ok(dir)
    }

    const CARD: &str = "class Card:\n    def _split(self, text):\n        return text.split('=')\n\n    def image(self):\n        return self._split(str(self))\n";
    const UTIL: &str = "def format_value(value):\n    if isinstance(value, float):\n        return repr(value)\n    return str(value)\n\n\ndef unrelated():\n    return 1\n";
    const TEST: &str = "from pkg.card import Card\n\ndef test_split_card_value_float():\n    assert Card()._split('a=1.0') == ['a', '1.0']\n";
    const DOCS: &str = "def setup(app):\n    app.add_config_value('card', 'float', 'value')\n";

    /// `path::qualname`, why, the score to two decimals.
    type Ranked = Vec<(String, String, String)>;

    fn ranked(issue: &str) -> Result<Ranked, Box<dyn std::error::Error>> {
        let dir = repo(&[
            ("pkg/__init__.py", ""),
            ("pkg/card.py", CARD),
            ("pkg/util.py", UTIL),
            ("tests/test_card.py", TEST),
            ("docs/conf.py", DOCS),
        ])?;
        let index = CodeIndex::build(dir.path())?;
        Ok(rank(&index, dir.path(), issue)
            .candidates
            .into_iter()
            .map(|c| {
                (
                    format!("{}::{}", c.path, c.symbol),
                    c.why,
                    format!("{:.2}", c.score),
                )
            })
            .collect())
    }

    fn triple(a: &str, b: &str, c: &str) -> (String, String, String) {
        (a.into(), b.into(), c.into())
    }

    #[test]
    fn the_traceback_then_named_then_bm25_and_never_a_test() -> R {
        // The innermost frame (util.py line 3, in format_value) first, then
        // the outer frame's Card.image, then the named Card._split (both
        // files are named by the frames' paths); the test file, which
        // matches the words best, and the docs never appear; `unrelated`
        // has no evidence of its own.
        let issue = "Card._split drops the float value.\n\nTraceback (most recent call last):\n  \
                     File \"/site-packages/pkg/card.py\", line 6, in image\n  \
                     File \"/site-packages/pkg/util.py\", line 3, in format_value\n";
        let got = ranked(issue)?;
        assert_eq!(
            got,
            [
                triple("pkg/util.py::format_value", "traceback+path+bm25", "8.00"),
                triple("pkg/card.py::Card.image", "traceback+path+bm25", "7.30"),
                triple("pkg/card.py::Card._split", "named+path+bm25", "6.22"),
            ]
        );
        Ok(())
    }

    #[test]
    fn without_mentions_bm25_ranks_and_docs_come_only_when_nothing_else_does() -> R {
        let got = ranked("the float value is formatted wrong")?;
        assert_eq!(got, [triple("pkg/util.py::format_value", "bm25", "2.00")]);
        // Only the docs match: they are all there is.
        let got = ranked("app config")?;
        assert_eq!(got, [triple("docs/conf.py::setup", "bm25", "2.00")]);
        Ok(())
    }

    #[test]
    fn top_locations_keep_to_the_first_files() {
        let c = |path: &str, symbol: &str| Candidate {
            path: path.into(),
            symbol: symbol.into(),
            start_line: 1,
            end_line: 2,
            score: 1.0,
            why: "bm25".into(),
        };
        let ranked = [
            c("a.py", "f"),
            c("b.py", "g"),
            c("a.py", "h"),
            c("c.py", "k"),
        ];
        let names = |v: Vec<Candidate>| -> Vec<String> {
            v.iter()
                .map(|c| format!("{}::{}", c.path, c.symbol))
                .collect()
        };
        assert_eq!(names(top_locations(&ranked, 1, 2)), ["a.py::f", "a.py::h"]);
        assert_eq!(
            names(top_locations(&ranked, 2, 3)),
            ["a.py::f", "b.py::g", "a.py::h"]
        );
        assert_eq!(names(top_locations(&ranked, 1, 1)), ["a.py::f"]);
        assert_eq!(names(top_locations(&ranked, 5, 9)).len(), 4);
        assert!(top_locations(&[], 1, 2).is_empty());
    }
}
