//! Classes, functions and methods of Python files, from tree-sitter's
//! syntax tree, and an index of them over a repository.
//!
//! Parsing never fails: tree-sitter recovers from syntax errors, and what it
//! recovered is indexed; [`syntax_errors`] says where the errors are. The
//! index is built in parallel (rayon) and cached per repository and commit
//! ([`CodeIndex::load_or_build`]); after an edit, [`CodeIndex::update_file`]
//! re-parses the one file.

use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tree_sitter::{Node, Parser, Tree, TreeCursor};

use super::bm25::Bm25;
use super::{is_test_file, python_files, IndexError, MAX_FILE_BYTES};

/// Version of the cache file's format. Bump it whenever [`FileSymbols`] or
/// what the parser extracts changes, so that caches written by an older
/// build are rebuilt instead of being read as if they were current.
pub const CACHE_FORMAT_VERSION: u32 = 1;

/// Node kinds that never contain a `def` or `class` (expressions, imports,
/// simple statements): the symbol walk does not descend into them, which
/// saves visiting most of a file's nodes. `ERROR` nodes are always entered.
const LEAF_KINDS: &[&str] = &[
    "comment",
    "string",
    "concatenated_string",
    "expression_statement",
    "return_statement",
    "import_statement",
    "import_from_statement",
    "future_import_statement",
    "assert_statement",
    "raise_statement",
    "delete_statement",
    "global_statement",
    "nonlocal_statement",
    "pass_statement",
    "print_statement",
    "parameters",
    "argument_list",
    "decorator",
    "type",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SymbolKind {
    Class,
    Function,
    /// A function whose nearest enclosing definition is a class (its body,
    /// or an `if`/`try`/`with` block inside its body).
    Method,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Symbol {
    pub kind: SymbolKind,
    /// `method`
    pub name: String,
    /// `Outer.Inner.method`; a function nested in a function is
    /// `outer.inner` (Python's `<locals>` left out).
    pub qualname: String,
    /// The header as written up to and including its final `:`, comments
    /// dropped and whitespace runs (the newlines of a multi-line header, a
    /// backslash continuation) collapsed to one space:
    /// `async def f(self, x: int = 1) -> str:`, `class Foo(Base, metaclass=M):`.
    pub signature: String,
    /// 1-based; the first decorator's line if decorated.
    pub start_line: usize,
    /// 1-based line of the `def` (or `async`) / `class` keyword.
    pub def_line: usize,
    /// 1-based, inclusive: the body's last line of code (comments after
    /// the last statement left out, as in Python's `end_lineno`).
    pub end_line: usize,
    /// The docstring's first non-blank line, trimmed (after the escapes
    /// `\\`, `\'`, `\"`, `\n`, `\t`; others as written).
    pub docstring: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSymbols {
    /// Relative to the repository root, `/` separators.
    pub path: String,
    /// Number of lines in the file.
    pub lines: usize,
    /// In source order: a parent before its children.
    pub symbols: Vec<Symbol>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntaxError {
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    /// `syntax error` for an ERROR node, ``missing `)` `` for a missing
    /// token, `missing identifier` for a missing named node.
    pub message: String,
}

thread_local! {
    /// One parser per thread (rayon's workers included), reused across files.
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

/// The syntax tree of `source`, or `None` when tree-sitter cannot parse at
/// all (the grammar's ABI refused by the library: a build problem, logged).
pub(crate) fn parse_tree(source: &str) -> Option<Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let mut parser = Parser::new();
            if let Err(e) = parser.set_language(&tree_sitter_python::LANGUAGE.into()) {
                tracing::error!("cannot load the tree-sitter Python grammar: {e}");
                return None;
            }
            *slot = Some(parser);
        }
        slot.as_mut()?.parse(source, None)
    })
}

/// The classes, functions and methods of one file. Never fails: a file with
/// syntax errors yields what tree-sitter recovered.
pub fn parse_symbols(path: &str, source: &str) -> FileSymbols {
    let symbols = parse_tree(source)
        .map(|tree| collect_symbols(&tree, source))
        .unwrap_or_default();
    FileSymbols {
        path: path.to_string(),
        lines: source.lines().count(),
        symbols,
    }
}

/// An enclosing definition during the walk.
struct Scope {
    /// Depth of the definition's node in the tree.
    depth: usize,
    qualname: String,
    is_class: bool,
}

fn collect_symbols(tree: &Tree, source: &str) -> Vec<Symbol> {
    let mut out = Vec::new();
    let mut scopes: Vec<Scope> = Vec::new();
    // (depth, first line) of the enclosing decorated_definition nodes.
    let mut decorated: Vec<(usize, usize)> = Vec::new();
    let mut cursor = tree.walk();
    let mut depth = 0usize;
    loop {
        let node = cursor.node();
        let kind = node.kind();
        match kind {
            "decorated_definition" => decorated.push((depth, node.start_position().row + 1)),
            "function_definition" | "class_definition" => {
                let start_line = decorated
                    .last()
                    .filter(|(d, _)| *d + 1 == depth)
                    .map(|(_, line)| *line);
                if let Some(symbol) = make_symbol(node, source, scopes.last(), start_line) {
                    scopes.push(Scope {
                        depth,
                        qualname: symbol.qualname.clone(),
                        is_class: symbol.kind == SymbolKind::Class,
                    });
                    out.push(symbol);
                }
            }
            _ => {}
        }
        let descend = node.is_error() || !LEAF_KINDS.contains(&kind);
        if descend && cursor.goto_first_child() {
            depth += 1;
            continue;
        }
        loop {
            // Leaving the node at `depth`: it closes the scopes it opened.
            while scopes.last().is_some_and(|s| s.depth >= depth) {
                scopes.pop();
            }
            while decorated.last().is_some_and(|(d, _)| *d >= depth) {
                decorated.pop();
            }
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return out;
            }
            depth -= 1;
        }
    }
}

fn make_symbol(
    node: Node,
    source: &str,
    parent: Option<&Scope>,
    decorated_line: Option<usize>,
) -> Option<Symbol> {
    let name = node
        .child_by_field_name("name")?
        .utf8_text(source.as_bytes())
        .ok()?
        .to_string();
    if name.is_empty() {
        return None; // a MISSING identifier
    }
    let kind = match (node.kind(), parent) {
        ("class_definition", _) => SymbolKind::Class,
        (_, Some(scope)) if scope.is_class => SymbolKind::Method,
        _ => SymbolKind::Function,
    };
    let qualname = match parent {
        Some(scope) => format!("{}.{name}", scope.qualname),
        None => name.clone(),
    };
    let def_line = node.start_position().row + 1;
    let body = node.child_by_field_name("body");
    Some(Symbol {
        kind,
        name,
        qualname,
        signature: signature(node, body, source),
        start_line: decorated_line.unwrap_or(def_line),
        def_line,
        end_line: last_line(node),
        docstring: body.and_then(|b| docstring(b, source)),
    })
}

/// 1-based line of a definition's last character of code: the end of its
/// last token that is not a comment (tree-sitter counts comments after the
/// last statement, at the body's indentation, as part of the body; Python's
/// `end_lineno` does not).
fn last_line(node: Node) -> usize {
    let mut last = node;
    while let Some(child) = last_code_child(last) {
        last = child;
    }
    let end = last.end_position();
    // tree-sitter's end is exclusive: a token ending with a newline ends at
    // column 0 of the next row.
    if end.column == 0 && end.row > last.start_position().row {
        end.row
    } else {
        end.row + 1
    }
}

fn last_code_child(node: Node) -> Option<Node> {
    let mut cursor = node.walk();
    let children: Vec<Node> = node.children(&mut cursor).collect();
    children
        .into_iter()
        .rev()
        .find(|c| c.kind() != "comment" && c.start_byte() < c.end_byte())
}

/// The header of a definition: from its first byte through the `:` before
/// the body, comments dropped, whitespace collapsed.
fn signature(node: Node, body: Option<Node>, source: &str) -> String {
    let start = node.start_byte();
    let mut end = body.map_or(node.end_byte(), |b| b.start_byte());
    let mut comments = Vec::new();
    let mut cursor = node.walk();
    for child in node.children(&mut cursor) {
        if Some(child) == body {
            break;
        }
        if child.kind() == ":" {
            end = child.end_byte();
        }
        collect_comments(child, &mut comments);
    }
    let mut text = String::new();
    let mut at = start;
    for (from, to) in comments.into_iter().filter(|(from, _)| *from < end) {
        text.push_str(source.get(at..from).unwrap_or_default());
        text.push(' ');
        at = to;
    }
    text.push_str(source.get(at..end).unwrap_or_default());
    text.replace("\\\r\n", " ")
        .replace("\\\n", " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Byte ranges of the comments in a (small) header subtree, in order.
fn collect_comments(node: Node, out: &mut Vec<(usize, usize)>) {
    if node.kind() == "comment" {
        out.push((node.start_byte(), node.end_byte()));
        return;
    }
    let mut cursor = node.walk();
    let mut stack: Vec<Node> = node.children(&mut cursor).collect();
    stack.reverse();
    while let Some(n) = stack.pop() {
        if n.kind() == "comment" {
            out.push((n.start_byte(), n.end_byte()));
        } else {
            let mut cursor = n.walk();
            let children: Vec<Node> = n.children(&mut cursor).collect();
            stack.extend(children.into_iter().rev());
        }
    }
}

/// The first non-blank line of a body's docstring: a string literal (not a
/// bytes or f-string) as the body's first statement.
fn docstring(body: Node, source: &str) -> Option<String> {
    let mut cursor = body.walk();
    let first = body
        .named_children(&mut cursor)
        .find(|n| n.kind() != "comment")?;
    if first.kind() != "expression_statement" || first.named_child_count() != 1 {
        return None;
    }
    let mut expr = first.named_child(0)?;
    if expr.kind() == "concatenated_string" {
        expr = expr.named_child(0)?;
    }
    if expr.kind() != "string" {
        return None;
    }
    docstring_line(expr.utf8_text(source.as_bytes()).ok()?)
}

fn docstring_line(literal: &str) -> Option<String> {
    let quote_at = literal.find(['"', '\''])?;
    let prefix = literal[..quote_at].to_ascii_lowercase();
    if prefix.contains('b') || prefix.contains('f') {
        return None;
    }
    let quoted = &literal[quote_at..];
    let quote = ["\"\"\"", "'''", "\"", "'"]
        .into_iter()
        .find(|q| quoted.starts_with(q))?;
    let inner = &quoted[quote.len()..];
    let inner = inner.strip_suffix(quote).unwrap_or(inner);
    let text = if prefix.contains('r') {
        inner.to_string()
    } else {
        unescape(inner)
    };
    text.lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(str::to_string)
}

/// The escapes that matter for a docstring's first line as Python reads
/// them: `\\`, `\'`, `\"`, `\n`, `\t`, and a backslash before a newline
/// (the line continues); other escapes are kept as written.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(next @ ('\\' | '\'' | '"')) => out.push(next),
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('\n') => {}
                Some(next) => {
                    out.push(c);
                    out.push(next);
                }
                None => out.push(c),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// What `source` means to Python, as Agentless compares patches: its
/// syntax tree written out (each named node as `(kind ...)`, each token
/// by its text, a string whole), without comments and docstrings, so
/// that two sources differing only in those or in formatting (spacing,
/// line breaks inside brackets, blank lines) have the same form. `None`
/// when the grammar cannot be loaded.
pub fn normal_form(source: &str) -> Option<String> {
    let tree = parse_tree(source)?;
    let mut out = String::new();
    write_normal(tree.root_node(), source.as_bytes(), &mut out);
    Some(out)
}

/// A docstring: a statement that is only a string, first in a module or in
/// the body of a class or function.
fn is_docstring(node: Node<'_>) -> bool {
    if node.kind() != "expression_statement" || node.named_child_count() != 1 {
        return false;
    }
    let only_string = node
        .named_child(0)
        .is_some_and(|c| matches!(c.kind(), "string" | "concatenated_string"));
    let Some(parent) = node.parent() else {
        return false;
    };
    let first = parent.named_child(0).is_some_and(|c| c.id() == node.id());
    let body = match parent.kind() {
        "module" => true,
        "block" => parent
            .parent()
            .is_some_and(|g| matches!(g.kind(), "function_definition" | "class_definition")),
        _ => false,
    };
    only_string && first && body
}

fn write_normal(node: Node<'_>, source: &[u8], out: &mut String) {
    if node.kind() == "comment" || is_docstring(node) {
        return;
    }
    let text = || String::from_utf8_lossy(&source[node.start_byte()..node.end_byte()]);
    if node.child_count() == 0 || node.kind() == "string" {
        out.push_str(&text());
        out.push(' ');
        return;
    }
    if node.is_named() {
        out.push('(');
        out.push_str(node.kind());
        out.push(' ');
    }
    let mut cursor = node.walk();
    for child in node.children(&mut cursor) {
        write_normal(child, source, out);
    }
    if node.is_named() {
        out.push_str(") ");
    }
}

/// tree-sitter's ERROR and MISSING nodes, in source order; empty when the
/// source parses cleanly. An ERROR node is placed at its first token of its
/// own (the tokens it could not fit, not a complete statement it wraps);
/// one that wraps only complete statements and other errors is reported
/// through those.
pub fn syntax_errors(source: &str) -> Vec<SyntaxError> {
    let Some(tree) = parse_tree(source) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cursor = tree.walk();
    if !cursor.node().has_error() {
        return out;
    }
    loop {
        let node = cursor.node();
        if node.is_error() {
            let mut children = node.walk();
            let token = node.children(&mut children).find(|c| {
                c.child_count() == 0 && c.start_byte() < c.end_byte() && c.kind() != "comment"
            });
            let nested = node.children(&mut children).any(|c| c.has_error());
            match token {
                Some(token) => out.push(error_at(token, source, "syntax error".to_string())),
                None if !nested => out.push(error_at(node, source, "syntax error".to_string())),
                None => {}
            }
        } else if node.is_missing() {
            let message = if node.is_named() {
                format!("missing {}", node.kind())
            } else {
                format!("missing `{}`", node.kind())
            };
            out.push(error_at(node, source, message));
        }
        if node.has_error() && cursor.goto_first_child() {
            continue;
        }
        if !next_node(&mut cursor) {
            break;
        }
    }
    out.sort_by_key(|e| (e.line, e.column));
    out.dedup();
    out
}

/// Moves to the next node in pre-order that is not inside the current one;
/// false at the end of the tree.
fn next_node(cursor: &mut TreeCursor) -> bool {
    loop {
        if cursor.goto_next_sibling() {
            return true;
        }
        if !cursor.goto_parent() {
            return false;
        }
    }
}

fn error_at(node: Node, source: &str, message: String) -> SyntaxError {
    let point = node.start_position();
    let line_start = node.start_byte().saturating_sub(point.column);
    let column = source
        .get(line_start..node.start_byte())
        .map_or(point.column, |s| s.chars().count());
    SyntaxError {
        line: point.row + 1,
        column: column + 1,
        message,
    }
}

/// The symbols of a repository's Python files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeIndex {
    /// Sorted by path.
    pub files: Vec<FileSymbols>,
}

/// The cache file as written.
#[derive(Serialize)]
struct CacheOut<'a> {
    version: u32,
    repo: &'a str,
    commit: &'a str,
    files: &'a [FileSymbols],
}

/// The cache file as read.
#[derive(Deserialize)]
struct CacheIn {
    version: u32,
    repo: String,
    commit: String,
    files: Vec<FileSymbols>,
}

impl CodeIndex {
    /// Parses every tracked `.py` file under `root` in parallel (rayon's
    /// global pool). Symlinks (the file or a directory on its path), files
    /// over [`MAX_FILE_BYTES`] and files that are not UTF-8 are left out.
    pub fn build(root: &Path) -> Result<CodeIndex, IndexError> {
        let paths = python_files(root)?;
        let root = canonical_root(root)?;
        let mut files: Vec<FileSymbols> = paths
            .par_iter()
            .filter_map(|path| read_source(&root, path).map(|text| parse_symbols(path, &text)))
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(CodeIndex { files })
    }

    /// The index of `root`, which must be the pristine checkout of `repo` at
    /// `commit`, from `<cache_dir>/<repo, / as __>/<commit>.json` when that
    /// holds a readable index of the current format for the same repository
    /// and commit; otherwise built and written there (atomically). A cache
    /// that cannot be written is logged, not an error. Returns whether the
    /// index came from the cache.
    pub fn load_or_build(
        root: &Path,
        cache_dir: &Path,
        repo: &str,
        commit: &str,
    ) -> Result<(CodeIndex, bool), IndexError> {
        let path = cache_path(cache_dir, repo, commit);
        if let Some(index) = CodeIndex::read_cache(&path, repo, commit) {
            return Ok((index, true));
        }
        let index = CodeIndex::build(root)?;
        if let Err(e) = index.write_cache(&path, repo, commit) {
            tracing::warn!("{e}; the index will be rebuilt next time");
        }
        Ok((index, false))
    }

    /// The cached index at `path`, if it is readable, of the current format
    /// and for `repo` at `commit`.
    pub fn read_cache(path: &Path, repo: &str, commit: &str) -> Option<CodeIndex> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::debug!("no code index cache at {}: {e}", path.display());
                return None;
            }
        };
        match serde_json::from_slice::<CacheIn>(&bytes) {
            Ok(c) if c.version == CACHE_FORMAT_VERSION && c.repo == repo && c.commit == commit => {
                Some(CodeIndex { files: c.files })
            }
            Ok(c) => {
                tracing::info!(
                    "code index cache {} is for {} at {}, format {} (want {repo} at {commit}, format {CACHE_FORMAT_VERSION}); rebuilding",
                    path.display(),
                    c.repo,
                    c.commit,
                    c.version
                );
                None
            }
            Err(e) => {
                tracing::warn!(
                    "code index cache {} is corrupt ({e}); rebuilding",
                    path.display()
                );
                None
            }
        }
    }

    /// Writes the index to `path` through a temporary file in the same
    /// directory and a rename, so a reader never sees half a file.
    pub fn write_cache(&self, path: &Path, repo: &str, commit: &str) -> Result<(), IndexError> {
        let cache_error = |message: String| IndexError::Cache {
            path: path.display().to_string(),
            message,
        };
        let dir = path
            .parent()
            .ok_or_else(|| cache_error("the cache path has no directory".into()))?;
        std::fs::create_dir_all(dir).map_err(|e| cache_error(e.to_string()))?;
        let mut tmp =
            tempfile::NamedTempFile::new_in(dir).map_err(|e| cache_error(e.to_string()))?;
        let contents = CacheOut {
            version: CACHE_FORMAT_VERSION,
            repo,
            commit,
            files: &self.files,
        };
        {
            let mut writer = std::io::BufWriter::new(tmp.as_file_mut());
            serde_json::to_writer(&mut writer, &contents)
                .map_err(|e| cache_error(e.to_string()))?;
            writer.flush().map_err(|e| cache_error(e.to_string()))?;
        }
        tmp.persist(path)
            .map_err(|e| cache_error(e.error.to_string()))?;
        Ok(())
    }

    pub fn file(&self, path: &str) -> Option<&FileSymbols> {
        self.position(path).ok().map(|i| &self.files[i])
    }

    fn position(&self, path: &str) -> Result<usize, usize> {
        self.files.binary_search_by(|f| f.path.as_str().cmp(path))
    }

    /// Re-parses `path` (relative to `root`) after an edit: adds it if it is
    /// new and a `.py` file, drops it if it was deleted or can no longer be
    /// indexed (see [`CodeIndex::build`]). A path outside `root` is ignored.
    pub fn update_file(&mut self, root: &Path, path: &str) {
        let path = path.strip_prefix("./").unwrap_or(path);
        if Path::new(path).is_absolute() || path.split('/').any(|part| part == "..") {
            return;
        }
        let parsed = if path.ends_with(".py") {
            canonical_root(root)
                .ok()
                .and_then(|root| read_source(&root, path))
                .map(|text| parse_symbols(path, &text))
        } else {
            None
        };
        match (self.position(path), parsed) {
            (Ok(i), Some(file)) => self.files[i] = file,
            (Err(i), Some(file)) => self.files.insert(i, file),
            (Ok(i), None) => {
                self.files.remove(i);
            }
            (Err(_), None) => {}
        }
    }

    /// Classes named exactly `name`, over all files, in path order.
    pub fn find_class(&self, name: &str) -> Vec<(&FileSymbols, &Symbol)> {
        self.matching(|s| s.kind == SymbolKind::Class && s.name == name)
    }

    /// Functions and methods named exactly `name`; with `class`, only the
    /// methods whose immediate enclosing class is named `class`.
    pub fn find_method(&self, name: &str, class: Option<&str>) -> Vec<(&FileSymbols, &Symbol)> {
        self.matching(|s| {
            s.name == name
                && match class {
                    None => s.kind != SymbolKind::Class,
                    Some(class) => s.kind == SymbolKind::Method && parent_name(s) == Some(class),
                }
        })
    }

    fn matching(&self, keep: impl Fn(&Symbol) -> bool) -> Vec<(&FileSymbols, &Symbol)> {
        self.files
            .iter()
            .flat_map(|f| f.symbols.iter().filter(|s| keep(s)).map(move |s| (f, s)))
            .collect()
    }

    /// The symbol of `path` with this qualname (`Class.method`, `function`,
    /// `Outer.Inner`); the first one when it is defined more than once (a
    /// property's getter before its setter).
    pub fn symbol(&self, path: &str, qualname: &str) -> Option<&Symbol> {
        self.file(path)?
            .symbols
            .iter()
            .find(|s| s.qualname == qualname)
    }

    pub fn symbol_count(&self) -> usize {
        self.files.iter().map(|f| f.symbols.len()).sum()
    }

    /// Functions and methods of non-test files ranked by BM25 against
    /// `query`: each document is the qualname and the function's source
    /// (decorators included), read from `root` now. Returns (path, qualname,
    /// score), best first, at most `k`.
    pub fn rank_functions(&self, root: &Path, query: &str, k: usize) -> Vec<(String, String, f64)> {
        let root = canonical_root(root).ok();
        let documents: Vec<(&str, &str, String)> = self
            .files
            .par_iter()
            .filter(|f| !is_test_file(&f.path))
            .flat_map_iter(|f| {
                let text = root.as_deref().and_then(|r| read_source(r, &f.path));
                let lines: Vec<&str> = text
                    .as_deref()
                    .map_or_else(Vec::new, |t| t.lines().collect());
                f.symbols
                    .iter()
                    .filter(|s| s.kind != SymbolKind::Class)
                    .map(|s| {
                        let to = s.end_line.min(lines.len());
                        let from = s.start_line.saturating_sub(1).min(to);
                        let body = lines[from..to].join("\n");
                        (
                            f.path.as_str(),
                            s.qualname.as_str(),
                            format!("{}\n{body}", s.qualname),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let bm25 = Bm25::new(documents.iter().map(|(_, _, text)| text.as_str()));
        bm25.rank(query)
            .into_iter()
            .take(k)
            .map(|(i, score)| {
                (
                    documents[i].0.to_string(),
                    documents[i].1.to_string(),
                    score,
                )
            })
            .collect()
    }
}

/// The name of the class or function a symbol is defined in.
fn parent_name(symbol: &Symbol) -> Option<&str> {
    let (parents, _) = symbol.qualname.rsplit_once('.')?;
    parents.rsplit('.').next()
}

/// `<cache_dir>/<repo with / as __>/<commit>.json`, every other character
/// that could leave the directory replaced by `_`.
pub fn cache_path(cache_dir: &Path, repo: &str, commit: &str) -> PathBuf {
    cache_dir
        .join(path_component(&repo.replace('/', "__")))
        .join(format!("{}.json", path_component(commit)))
}

fn path_component(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.chars().all(|c| c == '.') {
        out.insert(0, '_');
    }
    out
}

pub(crate) fn canonical_root(root: &Path) -> Result<PathBuf, IndexError> {
    root.canonicalize().map_err(|e| IndexError::Root {
        dir: root.display().to_string(),
        message: e.to_string(),
    })
}

/// The text of `root/path` if it can be indexed: a regular file reached
/// through no symlink (the file itself or a directory on the way), at most
/// [`MAX_FILE_BYTES`], UTF-8.
pub(crate) fn read_source(root: &Path, path: &str) -> Option<String> {
    // Read through `confined`: a link planted between a look and the read
    // is refused, not followed.
    let confined = crate::confined::Root::open(root).ok()?;
    let meta = confined.metadata(path).ok()??;
    if meta.kind != crate::confined::Kind::File || meta.len > MAX_FILE_BYTES {
        return None;
    }
    String::from_utf8(confined.read(path).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use SymbolKind::{Class, Function, Method};

    #[test]
    fn normal_forms_ignore_comments_docstrings_and_formatting_only() {
        let base = "def f(a, b):\n    \"\"\"Add.\"\"\"\n    return a + b\n";
        let form = |s: &str| normal_form(s).unwrap_or_default();
        #[rustfmt::skip]
        let same = [
            "def f(a, b):\n    return a + b\n",
            "def f(a, b):\n    \"\"\"Add them.\"\"\"\n    # the sum\n    return a + b  # done\n",
            "def f(a,b):\n\n    return a  +  b\n",
            "def f(\n    a,\n    b\n):\n    return a + b\n",
        ];
        for s in same {
            assert_eq!(form(s), form(base), "{s}");
        }
        #[rustfmt::skip]
        let different = [
            "def f(a, b):\n    return a - b\n",
            "def f(a, b):\n    return 'a + b'\n",
            // A string that is not first in the body is code, not a docstring.
            "def f(a, b):\n    x = 1\n    \"\"\"Add.\"\"\"\n    return a + b\n",
            "def f(a, b):\n    if a:\n        return a\n    return a + b\n",
            "def f(a, b):\n    if a:\n        return a\n        return a + b\n",
        ];
        for s in different {
            assert_ne!(form(s), form(base), "{s}");
        }
        // Indentation is structure: the same tokens in another block differ.
        assert_ne!(form(different[3]), form(different[4]));
    }

    const SAMPLE: &str = r#""""Module docstring."""
import os


@decorator
def decorated(a, b=2):
    """Adds things.

    More text.
    """
    return a + b


class Outer(Base, metaclass=Meta):
    '''Outer class.'''

    class Inner:
        def method(self):
            pass

    @property
    @cached(
        ttl=3,
    )
    def prop(self) -> int:
        return 1

    async def fetch(self, url: str = "http://x#y") -> bytes:
        return b""

    def multi(
        self,
        x: int,  # the x
        y=None,
    ) -> dict:
        """
        Summary on second line.
        """
        def helper():
            return x
        return {}

    if sys.version_info >= (3, 8):
        def compat(self): pass


async def top_async(): pass


def outer():
    def inner(z):
        class Local:
            def m(self):
                pass
        return z
    return inner


def generic[T](x: T, \
               y: T) -> T:
    # a comment first
    r"""Raw docstring."""
    return x
    # A trailing comment is not part of the body.
"#;

    /// kind, qualname, signature, start_line, def_line, end_line, docstring
    type Row<'a> = (
        SymbolKind,
        &'a str,
        &'a str,
        usize,
        usize,
        usize,
        Option<&'a str>,
    );

    fn rows(file: &FileSymbols) -> Vec<Row<'_>> {
        file.symbols
            .iter()
            .map(|s| {
                (
                    s.kind,
                    s.qualname.as_str(),
                    s.signature.as_str(),
                    s.start_line,
                    s.def_line,
                    s.end_line,
                    s.docstring.as_deref(),
                )
            })
            .collect()
    }

    #[test]
    fn symbols_of_a_sample_file() {
        let expected: Vec<Row<'static>> = vec![
            (
                Function,
                "decorated",
                "def decorated(a, b=2):",
                5,
                6,
                11,
                Some("Adds things."),
            ),
            (
                Class,
                "Outer",
                "class Outer(Base, metaclass=Meta):",
                14,
                14,
                44,
                Some("Outer class."),
            ),
            (Class, "Outer.Inner", "class Inner:", 17, 17, 19, None),
            (
                Method,
                "Outer.Inner.method",
                "def method(self):",
                18,
                18,
                19,
                None,
            ),
            (
                Method,
                "Outer.prop",
                "def prop(self) -> int:",
                21,
                25,
                26,
                None,
            ),
            (
                Method,
                "Outer.fetch",
                r#"async def fetch(self, url: str = "http://x#y") -> bytes:"#,
                28,
                28,
                29,
                None,
            ),
            (
                Method,
                "Outer.multi",
                "def multi( self, x: int, y=None, ) -> dict:",
                31,
                31,
                41,
                Some("Summary on second line."),
            ),
            (
                Function,
                "Outer.multi.helper",
                "def helper():",
                39,
                39,
                40,
                None,
            ),
            (
                Method,
                "Outer.compat",
                "def compat(self):",
                44,
                44,
                44,
                None,
            ),
            (
                Function,
                "top_async",
                "async def top_async():",
                47,
                47,
                47,
                None,
            ),
            (Function, "outer", "def outer():", 50, 50, 56, None),
            (Function, "outer.inner", "def inner(z):", 51, 51, 55, None),
            (Class, "outer.inner.Local", "class Local:", 52, 52, 54, None),
            (
                Method,
                "outer.inner.Local.m",
                "def m(self):",
                53,
                53,
                54,
                None,
            ),
            (
                Function,
                "generic",
                "def generic[T](x: T, y: T) -> T:",
                59,
                59,
                63,
                Some("Raw docstring."),
            ),
        ];
        let file = parse_symbols("pkg/sample.py", SAMPLE);
        assert_eq!(file.path, "pkg/sample.py");
        assert_eq!(file.lines, 64);
        assert_eq!(rows(&file), expected);
        assert_eq!(file.symbols[3].name, "method");
        assert!(
            syntax_errors(SAMPLE).is_empty(),
            "{:?}",
            syntax_errors(SAMPLE)
        );
    }

    #[test]
    fn docstring_first_lines() {
        let cases = [
            (r#""""One line.""""#, Some("One line.")),
            (
                "'''\n    Second line.\n    More.\n    '''",
                Some("Second line."),
            ),
            (r#"r"raw \d \\""#, Some(r"raw \d \\")),
            (
                r#""Escaped \\(x\) \"q\" \n second""#,
                Some(r#"Escaped \(x\) "q""#),
            ),
            ("\"\\\n    Continued \\tline\"", Some("Continued \tline")),
            ("u'unicode'", Some("unicode")),
            (r#"b"bytes""#, None),
            (r#"f"{x} formatted""#, None),
            (r#""""""""#, None),
            ("'  '", None),
        ];
        for (literal, expected) in cases {
            assert_eq!(docstring_line(literal).as_deref(), expected, "{literal}");
        }
    }

    #[test]
    fn line_counts() {
        for (source, lines) in [("", 0), ("x = 1\n", 1), ("x = 1\ny = 2", 2), ("\n\n", 2)] {
            assert_eq!(parse_symbols("a.py", source).lines, lines, "{source:?}");
        }
    }

    #[test]
    fn syntax_error_positions() {
        /// line, column, message
        type Error = (usize, usize, &'static str);
        let cases: &[(&str, &[Error])] = &[
            ("def f(x):\n    return x\n", &[]),
            ("", &[]),
            ("def broken(:\n    pass\n", &[(1, 12, "missing `)`")]),
            (
                "class A:\n    def m(self)\n        pass\n\n    def n(self):\n        return 1\n",
                &[(2, 5, "syntax error")],
            ),
            (
                "def f():\n    return [1, 2\n\nclass C:\n    def m(self):\n        pass\n",
                &[(2, 5, "syntax error"), (4, 1, "syntax error")],
            ),
            (
                "def f():\n    x = (1,\n    return x\n",
                &[(2, 5, "syntax error")],
            ),
            // Columns count characters, not bytes.
            ("   é = f(1))\n", &[(1, 12, "syntax error")]),
        ];
        for (source, expected) in cases {
            let expected: Vec<SyntaxError> = expected
                .iter()
                .map(|&(line, column, message)| SyntaxError {
                    line,
                    column,
                    message: message.into(),
                })
                .collect();
            assert_eq!(syntax_errors(source), expected, "{source:?}");
        }
    }

    #[test]
    fn a_file_with_a_syntax_error_still_yields_symbols() {
        let source = "def ok():\n    return 1\n\ndef broken(:\n    pass\n\nclass After:\n    def m(self):\n        return 2\n";
        let file = parse_symbols("a.py", source);
        let got: Vec<(&str, usize, usize)> = file
            .symbols
            .iter()
            .map(|s| (s.qualname.as_str(), s.def_line, s.end_line))
            .collect();
        assert_eq!(
            got,
            [
                ("ok", 1, 2),
                ("broken", 4, 5),
                ("After", 7, 9),
                ("After.m", 8, 9)
            ]
        );
        assert_eq!(
            syntax_errors(source),
            [SyntaxError {
                line: 4,
                column: 12,
                message: "missing `)`".into()
            }]
        );
    }

    fn git(dir: &Path, args: &[&str]) {
        let out = crate::repo::git_command()
            .current_dir(dir)
            .args(["-c", "user.name=test", "-c", "user.email=test@example.com"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A git repository holding `files`, all tracked and committed.
    fn repo(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        git(dir.path(), &["init", "--quiet", "--template="]);
        git(dir.path(), &["add", "-A"]);
        git(dir.path(), &["commit", "--quiet", "-m", "init"]);
        dir
    }

    const CACHE_PY: &[u8] = b"class Cache:\n    def get(self, key):\n        return self.store.get(key)\n\n    def expire(self, key, ttl):\n        \"\"\"Expire a cache key after ttl seconds.\"\"\"\n        self.deadlines[key] = now() + ttl\n\n\ndef get(url):\n    return fetch(url)\n";
    const UTIL_PY: &[u8] = b"def slugify(text):\n    return text.lower().replace(' ', '-')\n\n\nclass Cache:\n    pass\n";
    const TEST_PY: &[u8] = b"def test_expire_cache_key_ttl():\n    Cache().expire('k', 1)\n";

    fn sample_repo() -> tempfile::TempDir {
        repo(&[
            ("pkg/cache.py", CACHE_PY),
            ("pkg/util.py", UTIL_PY),
            ("tests/test_cache.py", TEST_PY),
            ("README.md", b"# not python\n"),
        ])
    }

    #[test]
    fn build_indexes_tracked_python_files() {
        let dir = sample_repo();
        let index = CodeIndex::build(dir.path()).unwrap();
        let paths: Vec<&str> = index.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            ["pkg/cache.py", "pkg/util.py", "tests/test_cache.py"]
        );
        assert_eq!(index.symbol_count(), 7);
        assert_eq!(index.file("pkg/util.py").map(|f| f.lines), Some(6));
        assert!(index.file("README.md").is_none());
    }

    #[test]
    fn build_skips_symlinks_large_and_non_utf8_files() {
        let large = "x = 1\n".repeat(MAX_FILE_BYTES as usize / 6 + 1);
        let dir = repo(&[
            ("a.py", b"def a(): pass\n"),
            ("large.py", large.as_bytes()),
            ("latin1.py", b"# caf\xe9\ndef b(): pass\n"),
        ]);
        std::os::unix::fs::symlink("a.py", dir.path().join("link.py")).unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("up")).unwrap();
        git(dir.path(), &["add", "link.py", "up"]);
        let index = CodeIndex::build(dir.path()).unwrap();
        let paths: Vec<&str> = index.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a.py"]);
        // Nor does an update reach through a symlinked directory.
        let mut index = index;
        index.update_file(dir.path(), "up/a.py");
        index.update_file(dir.path(), "link.py");
        assert_eq!(index.files.len(), 1);
    }

    #[test]
    fn lookups() {
        let dir = sample_repo();
        let index = CodeIndex::build(dir.path()).unwrap();
        let found = |hits: Vec<(&FileSymbols, &Symbol)>| -> Vec<(String, String)> {
            hits.into_iter()
                .map(|(f, s)| (f.path.clone(), s.qualname.clone()))
                .collect()
        };
        let pair = |p: &str, q: &str| (p.to_string(), q.to_string());
        assert_eq!(
            found(index.find_class("Cache")),
            [pair("pkg/cache.py", "Cache"), pair("pkg/util.py", "Cache")]
        );
        assert!(index.find_class("get").is_empty());
        assert_eq!(
            found(index.find_method("get", None)),
            [
                pair("pkg/cache.py", "Cache.get"),
                pair("pkg/cache.py", "get")
            ]
        );
        assert_eq!(
            found(index.find_method("get", Some("Cache"))),
            [pair("pkg/cache.py", "Cache.get")]
        );
        assert!(index.find_method("get", Some("Other")).is_empty());
        assert!(index.find_method("Cache", None).is_empty());
        let expire = index.symbol("pkg/cache.py", "Cache.expire").unwrap();
        assert_eq!(
            (
                expire.kind,
                expire.start_line,
                expire.end_line,
                expire.docstring.as_deref()
            ),
            (Method, 5, 7, Some("Expire a cache key after ttl seconds."))
        );
        assert_eq!(
            index.symbol("pkg/cache.py", "get").map(|s| s.kind),
            Some(Function)
        );
        assert!(index.symbol("pkg/cache.py", "expire").is_none());
        assert!(index.symbol("pkg/missing.py", "get").is_none());
    }

    #[test]
    fn rank_functions_puts_the_relevant_function_first() {
        let dir = sample_repo();
        let index = CodeIndex::build(dir.path()).unwrap();
        let ranked = index.rank_functions(dir.path(), "cache key does not expire after the ttl", 2);
        let names: Vec<(&str, &str)> = ranked
            .iter()
            .map(|(p, q, _)| (p.as_str(), q.as_str()))
            .collect();
        // The test function matches as well but test files are left out.
        assert_eq!(
            names,
            [
                ("pkg/cache.py", "Cache.expire"),
                ("pkg/cache.py", "Cache.get")
            ]
        );
        assert!(ranked[0].2 > ranked[1].2);
        assert!(index.rank_functions(dir.path(), "slugify", 0).is_empty());
        assert_eq!(
            index.rank_functions(dir.path(), "slugify text", 5)[0].1,
            "slugify"
        );
    }

    #[test]
    fn cache_round_trip() {
        let dir = sample_repo();
        let cache = tempfile::tempdir().unwrap();
        let (built, cached) =
            CodeIndex::load_or_build(dir.path(), cache.path(), "acme/widgets", "abc123").unwrap();
        assert!(!cached);
        let file = cache.path().join("acme__widgets/abc123.json");
        assert!(file.is_file());
        let (loaded, cached) =
            CodeIndex::load_or_build(dir.path(), cache.path(), "acme/widgets", "abc123").unwrap();
        assert!(cached);
        assert_eq!(loaded, built);
        // Another commit is another cache file.
        let (_, cached) =
            CodeIndex::load_or_build(dir.path(), cache.path(), "acme/widgets", "def456").unwrap();
        assert!(!cached);
        // Only the cache files are left in the directory (no temporary ones).
        let mut names: Vec<String> = std::fs::read_dir(cache.path().join("acme__widgets"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["abc123.json", "def456.json"]);
    }

    #[test]
    fn unusable_cache_files_are_rebuilt() {
        let dir = sample_repo();
        let cache = tempfile::tempdir().unwrap();
        let path = cache_path(cache.path(), "acme/widgets", "abc123");
        let expected = CodeIndex::build(dir.path()).unwrap();
        let other_version =
            serde_json::json!({"version": CACHE_FORMAT_VERSION + 1, "repo": "acme/widgets", "commit": "abc123", "files": []})
                .to_string();
        let other_commit =
            serde_json::json!({"version": CACHE_FORMAT_VERSION, "repo": "acme/widgets", "commit": "zzz", "files": []})
                .to_string();
        for contents in ["{not json", "", &other_version, &other_commit] {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, contents).unwrap();
            let (index, cached) =
                CodeIndex::load_or_build(dir.path(), cache.path(), "acme/widgets", "abc123")
                    .unwrap();
            assert!(!cached, "{contents}");
            assert_eq!(index, expected, "{contents}");
            let (_, cached) =
                CodeIndex::load_or_build(dir.path(), cache.path(), "acme/widgets", "abc123")
                    .unwrap();
            assert!(cached, "rewritten after {contents}");
        }
    }

    #[test]
    fn an_unwritable_cache_is_not_an_error() {
        let dir = sample_repo();
        let cache = tempfile::tempdir().unwrap();
        // A file where the cache's directory should be.
        std::fs::write(cache.path().join("acme__widgets"), "").unwrap();
        let (index, cached) =
            CodeIndex::load_or_build(dir.path(), cache.path(), "acme/widgets", "abc123").unwrap();
        assert!(!cached);
        assert_eq!(index.files.len(), 3);
        let err = index
            .write_cache(
                &cache_path(cache.path(), "acme/widgets", "abc123"),
                "acme/widgets",
                "abc123",
            )
            .unwrap_err();
        assert!(
            err.to_string().contains("acme__widgets/abc123.json"),
            "{err}"
        );
    }

    #[test]
    fn cache_paths_stay_inside_the_cache_directory() {
        let cases = [
            ("django/django", "0123abc", "/c/django__django/0123abc.json"),
            ("../x", "..", "/c/..__x/_...json"),
            ("a", "../../etc/passwd", "/c/a/.._.._etc_passwd.json"),
            ("..", "c", "/c/_../c.json"),
        ];
        for (repo, commit, expected) in cases {
            assert_eq!(
                cache_path(Path::new("/c"), repo, commit),
                Path::new(expected),
                "{repo} {commit}"
            );
        }
    }

    #[test]
    fn update_file_follows_edits() {
        let dir = sample_repo();
        let mut index = CodeIndex::build(dir.path()).unwrap();
        let root = dir.path();
        let names = |index: &CodeIndex, path: &str| -> Option<Vec<String>> {
            index
                .file(path)
                .map(|f| f.symbols.iter().map(|s| s.qualname.clone()).collect())
        };

        std::fs::write(
            root.join("pkg/util.py"),
            "def slugify(text, sep='-'):\n    pass\n\ndef title(text):\n    pass\n",
        )
        .unwrap();
        index.update_file(root, "pkg/util.py");
        assert_eq!(
            names(&index, "pkg/util.py"),
            Some(vec!["slugify".into(), "title".into()])
        );
        assert_eq!(
            index
                .symbol("pkg/util.py", "slugify")
                .map(|s| s.signature.as_str()),
            Some("def slugify(text, sep='-'):")
        );

        std::fs::write(root.join("pkg/new.py"), "class New:\n    pass\n").unwrap();
        index.update_file(root, "./pkg/new.py");
        assert_eq!(names(&index, "pkg/new.py"), Some(vec!["New".into()]));
        let paths: Vec<&str> = index.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "pkg/cache.py",
                "pkg/new.py",
                "pkg/util.py",
                "tests/test_cache.py"
            ]
        );

        std::fs::remove_file(root.join("pkg/cache.py")).unwrap();
        index.update_file(root, "pkg/cache.py");
        assert!(index.file("pkg/cache.py").is_none());

        std::fs::write(root.join("notes.txt"), "def x(): pass\n").unwrap();
        index.update_file(root, "notes.txt");
        index.update_file(root, "../outside.py");
        index.update_file(root, "pkg/never_existed.py");
        assert_eq!(index.files.len(), 3);
        assert_eq!(index.symbol_count(), 4);
    }
}
