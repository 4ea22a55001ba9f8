//! SEARCH/REPLACE edit blocks: parsing them out of a model's reply and
//! applying them to files with an exact matcher, then a whitespace-tolerant
//! one. Also the Fixer's line-range edits ([`LineEdit`], applied bottom-up
//! with overlaps refused), the parsers of its `lines` and `definition`
//! formats, and whole definitions from code fences.
//!
//! The format (aider's and Agentless's):
//!
//! ```text
//! path/to/file.py
//! <<<<<<< SEARCH
//! lines to find
//! =======
//! lines to put instead
//! >>>>>>> REPLACE
//! ```

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One parsed block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Block {
    pub path: String,
    pub search: String,
    pub replace: String,
}

/// Which matcher found the SEARCH text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Matched {
    /// Byte for byte.
    Exact,
    /// Line by line, ignoring trailing whitespace.
    TrailingWhitespace,
    /// Line by line, ignoring indentation; the replacement is re-indented.
    Indentation,
    /// SEARCH was empty and the file did not exist: it was created.
    NewFile,
    /// Not a block: a whole definition from a code fence replaced the one
    /// of the same name.
    Definition,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("SEARCH text not found in {0}")]
    NotFound(String),
    #[error("SEARCH text matches {count} places in {path}; include more lines to make it unique")]
    Ambiguous { path: String, count: usize },
    #[error("path `{0}` is not a relative path inside the repository")]
    BadPath(String),
    #[error("path `{0}` goes through a symbolic link; edit the file it points to by its own path")]
    Symlink(String),
    #[error(
        "{0} does not exist (an empty SEARCH creates a new file; otherwise name an existing file)"
    )]
    NoSuchFile(String),
    #[error("empty SEARCH on existing file {0}")]
    EmptySearch(String),
    #[error("SEARCH and REPLACE are identical")]
    NoChange,
    #[error(
        "lines {start}-{end} are not lines of {path} (it has {lines}); name lines the prompt shows"
    )]
    OutOfRange {
        path: String,
        start: usize,
        end: usize,
        lines: usize,
    },
    #[error(
        "edits of {path} overlap: lines {first_start}-{first_end} and {second_start}-{second_end}; \
         write one edit for lines that are changed together"
    )]
    Overlap {
        path: String,
        first_start: usize,
        first_end: usize,
        second_start: usize,
        second_end: usize,
    },
    #[error("cannot {action} {path}: {message}")]
    Io {
        action: &'static str,
        path: String,
        message: String,
    },
    /// A read or write through [`crate::confined`] refused (a symbolic
    /// link planted since the path was checked) or failed.
    /// (The message of the [`crate::confined::ConfinedError`], which names
    /// the worktree, the path and the link.)
    #[error("{0}")]
    Confined(String),
}

impl From<crate::confined::ConfinedError> for EditError {
    fn from(e: crate::confined::ConfinedError) -> Self {
        EditError::Confined(e.to_string())
    }
}

/// The text of `path` in the repository at `root`, read through
/// [`crate::confined`]: no symbolic link is followed.
fn read_in(root: &Path, path: &str) -> Result<String, EditError> {
    resolve(root, path)?;
    Ok(crate::confined::Root::open(root)?.read_to_string(path)?)
}

/// Writes `text` to `path` in the repository at `root` through
/// [`crate::confined`], creating its directory first when `create_dirs`.
fn write_in(root: &Path, path: &str, text: &str, create_dirs: bool) -> Result<(), EditError> {
    resolve(root, path)?;
    let confined = crate::confined::Root::open(root)?;
    if create_dirs {
        if let Some(parent) = Path::new(path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            confined.create_dir_all(parent)?;
        }
    }
    Ok(confined.write(path, text)?)
}

/// The result of parsing a reply: complete blocks, and how many block
/// starts were left unterminated (typically cut off by the token limit).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Parsed {
    pub blocks: Vec<Block>,
    pub unterminated: usize,
}

fn is_marker(line: &str, ch: char, word: &str) -> bool {
    let t = line.trim_end();
    let n = t.chars().take_while(|&c| c == ch).count();
    (5..=9).contains(&n) && t[n..].trim() == word
}

/// Whether `line` would be read as a SEARCH/REPLACE marker (`<<<<<<< SEARCH`,
/// `=======`, `>>>>>>> REPLACE`): such a line of code can never be a SEARCH
/// line, or the block would not parse back.
pub fn is_marker_line(line: &str) -> bool {
    is_marker(line, '<', "SEARCH") || is_marker(line, '=', "") || is_marker(line, '>', "REPLACE")
}

/// The file name a block belongs to: the closest line above it that is not
/// blank and not a code fence, with decorations removed.
fn file_name(line: &str) -> String {
    let t = line.trim().trim_matches('`').trim_matches('*').trim();
    let t = t
        .strip_prefix("File:")
        .or_else(|| t.strip_prefix("file:"))
        .unwrap_or(t);
    let t = t.trim_start_matches('#').trim();
    t.trim_matches('`').trim_end_matches(':').trim().to_string()
}

/// Extracts every SEARCH/REPLACE block of `reply`.
pub fn parse(reply: &str) -> Parsed {
    let lines: Vec<&str> = reply.lines().collect();
    let mut parsed = Parsed::default();
    let mut current_path = String::new();
    let mut i = 0;
    while i < lines.len() {
        if !is_marker(lines[i], '<', "SEARCH") {
            let t = lines[i].trim();
            if !t.is_empty() && !t.starts_with("```") {
                current_path = file_name(t);
            }
            i += 1;
            continue;
        }
        let path = current_path.clone();
        let mut j = i + 1;
        let mut search = Vec::new();
        while j < lines.len() && !is_marker(lines[j], '=', "") {
            search.push(lines[j]);
            j += 1;
        }
        let mut k = j + 1;
        let mut replace = Vec::new();
        while k < lines.len() && !is_marker(lines[k], '>', "REPLACE") {
            replace.push(lines[k]);
            k += 1;
        }
        if k >= lines.len() {
            parsed.unterminated += 1;
            break;
        }
        parsed.blocks.push(Block {
            path,
            search: join_lines(&search),
            replace: join_lines(&replace),
        });
        i = k + 1;
    }
    parsed
}

fn join_lines(lines: &[&str]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Resolves a block's path inside `root`, refusing anything that escapes it.
pub fn resolve(root: &Path, path: &str) -> Result<PathBuf, EditError> {
    let p = Path::new(path);
    let clean = !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && !p.components().any(|c| c.as_os_str() == ".git");
    if !clean {
        return Err(EditError::BadPath(path.into()));
    }
    // The runner edits files outside the sandbox: it must never follow a
    // symbolic link planted in the repository (to /root/.ssh, say).
    let mut current = root.to_path_buf();
    for component in p.components() {
        if let Component::Normal(name) = component {
            current.push(name);
            match std::fs::symlink_metadata(&current) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    // The confined walk names the link and where it leads.
                    let checked = crate::confined::Root::open(root).and_then(|r| r.check(p));
                    return Err(match checked {
                        Err(e) if e.is_symlink() => EditError::Confined(e.to_string()),
                        _ => EditError::Symlink(path.into()),
                    });
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
    Ok(root.join(p))
}

/// Applies one block to the repository at `root`.
pub fn apply_block(root: &Path, block: &Block) -> Result<Matched, EditError> {
    let full = resolve(root, &block.path)?;
    if block.search == block.replace {
        return Err(EditError::NoChange);
    }
    if block.search.trim().is_empty() {
        if full.symlink_metadata().is_ok() {
            return Err(EditError::EmptySearch(block.path.clone()));
        }
        write_in(root, &block.path, &block.replace, true)?;
        return Ok(Matched::NewFile);
    }
    if !full.is_file() {
        return Err(EditError::NoSuchFile(block.path.clone()));
    }
    let content = read_in(root, &block.path)?;
    let (new, matched) = replace(&content, &block.search, &block.replace, &block.path)?;
    write_in(root, &block.path, &new, false)?;
    Ok(matched)
}

/// Applies one block, tolerating a wrong file name: small models often put
/// prose where the path belongs. When `block.path` is not an existing file
/// and SEARCH is not empty, the block goes to the one file of `shown` whose
/// text SEARCH matches. Returns how it matched and the path it was applied to.
pub fn apply_block_lenient(
    root: &Path,
    block: &Block,
    shown: &[String],
) -> Result<(Matched, String), EditError> {
    let named_exists = resolve(root, &block.path).is_ok_and(|p| p.is_file());
    if named_exists || block.search.trim().is_empty() {
        return apply_block(root, block).map(|m| (m, block.path.clone()));
    }
    let matching: Vec<&String> = shown
        .iter()
        .filter(|path| {
            read_in(root, path)
                .ok()
                .is_some_and(|text| replace(&text, &block.search, &block.replace, path).is_ok())
        })
        .collect();
    match matching.as_slice() {
        [path] => {
            let retargeted = Block {
                path: (*path).clone(),
                ..block.clone()
            };
            apply_block(root, &retargeted).map(|m| (m, retargeted.path))
        }
        _ => Err(EditError::NoSuchFile(block.path.clone())),
    }
}

/// Replaces the one occurrence of `search` in `content`.
pub fn replace(
    content: &str,
    search: &str,
    replace: &str,
    path: &str,
) -> Result<(String, Matched), EditError> {
    let fitted = if path.ends_with(".py") {
        fit_indentation(search, replace)
    } else {
        None
    };
    let replace = fitted.as_deref().unwrap_or(replace);
    let exact = content.matches(search).count();
    if exact == 1 {
        return Ok((content.replacen(search, replace, 1), Matched::Exact));
    }
    if exact > 1 {
        return Err(EditError::Ambiguous {
            path: path.into(),
            count: exact,
        });
    }
    let lines: Vec<&str> = content.split_inclusive('\n').collect();
    let wanted: Vec<&str> = search.lines().collect();
    // Leading and trailing blank lines in SEARCH carry no information.
    let first = wanted
        .iter()
        .position(|l| !l.trim().is_empty())
        .unwrap_or(0);
    let last = wanted
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .map_or(0, |i| i + 1);
    let wanted = &wanted[first..last];
    if wanted.is_empty() {
        return Err(EditError::NotFound(path.into()));
    }
    let find = |same: &dyn Fn(&str, &str) -> bool| -> Vec<usize> {
        (0..lines.len().saturating_sub(wanted.len() - 1))
            .filter(|&s| {
                wanted
                    .iter()
                    .enumerate()
                    .all(|(k, w)| same(lines[s + k].trim_end_matches(['\n', '\r']), w))
            })
            .collect()
    };
    type Same<'a> = &'a dyn Fn(&str, &str) -> bool;
    let matchers: [(Matched, Same); 2] = [
        (Matched::TrailingWhitespace, &|a: &str, b: &str| {
            a.trim_end() == b.trim_end()
        }),
        (Matched::Indentation, &|a: &str, b: &str| {
            a.trim() == b.trim()
        }),
    ];
    for (kind, same) in matchers {
        let hits = find(same);
        match hits.len() {
            0 => continue,
            1 => {
                let start = hits[0];
                let end = start + wanted.len();
                let replacement = if kind == Matched::Indentation {
                    reindent(replace, wanted, &lines[start..end])
                } else {
                    replace.to_string()
                };
                let mut out: String = lines[..start].concat();
                out.push_str(&replacement);
                if !replacement.is_empty() && !replacement.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str(&lines[end..].concat());
                return Ok((out, kind));
            }
            count => {
                return Err(EditError::Ambiguous {
                    path: path.into(),
                    count,
                })
            }
        }
    }
    Err(EditError::NotFound(path.into()))
}

/// A whole function or class definition the model wrote in a fenced code
/// block instead of a SEARCH/REPLACE block — what small models do most.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Definition {
    pub name: String,
    /// The definition's text, decorators included, dedented.
    pub text: String,
}

/// `def name(` / `async def name(` / `class name` at the start of `line`
/// (after indentation): the defined name.
fn defined_name(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let rest = t
        .strip_prefix("def ")
        .or_else(|| t.strip_prefix("async def "))
        .or_else(|| t.strip_prefix("class "))?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// The top-level definitions in the reply's fenced code blocks.
pub fn parse_definitions(reply: &str) -> Vec<Definition> {
    let mut out = Vec::new();
    let mut in_fence = false;
    let mut block: Vec<&str> = Vec::new();
    for line in reply.lines() {
        if line.trim_start().starts_with("```") {
            if in_fence {
                out.extend(split_definitions(&block));
                block.clear();
            }
            in_fence = !in_fence;
        } else if in_fence {
            block.push(line);
        }
    }
    out
}

fn split_definitions(lines: &[&str]) -> Vec<Definition> {
    let base = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent_of(l).len())
        .min()
        .unwrap_or(0);
    let at_base = |l: &str| !l.trim().is_empty() && indent_of(l).len() == base;
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let start = i;
        // Decorators belong to the definition below them.
        while i < lines.len() && at_base(lines[i]) && lines[i].trim_start().starts_with('@') {
            i += 1;
        }
        let Some(name) = lines
            .get(i)
            .filter(|l| at_base(l))
            .and_then(|l| defined_name(l))
        else {
            i = start + 1;
            continue;
        };
        let mut end = i + 1;
        while end < lines.len() && !at_base(lines[end]) {
            end += 1;
        }
        let text: String = lines[start..end]
            .iter()
            .map(|l| format!("{}\n", l.get(base..).unwrap_or(l.trim_start())))
            .collect();
        out.push(Definition {
            name: name.to_string(),
            text: text.trim_end().to_string() + "\n",
        });
        i = end;
    }
    out
}

/// Replaces the definition of `def.name` in the one file of `shown` that
/// defines it exactly once, re-indenting the new text to the old one's
/// indentation. Returns the file it changed.
pub fn apply_definition(
    root: &Path,
    def: &Definition,
    shown: &[String],
) -> Result<String, EditError> {
    let mut found = Vec::new();
    for path in shown {
        let Ok(text) = read_in(root, path) else {
            continue;
        };
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for (i, line) in lines.iter().enumerate() {
            if defined_name(line) == Some(def.name.as_str()) {
                found.push((path.clone(), text.clone(), i));
            }
        }
    }
    let (path, text, line) = match found.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(EditError::NotFound(format!(
                "a definition of `{}` in the shown files",
                def.name
            )))
        }
        many => {
            return Err(EditError::Ambiguous {
                path: format!("the definitions of `{}`", def.name),
                count: many.len(),
            })
        }
    };
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let indent = indent_of(lines[line]).to_string();
    let mut start = line;
    while start > 0
        && lines[start - 1].trim_start().starts_with('@')
        && indent_of(lines[start - 1]) == indent
    {
        start -= 1;
    }
    let mut end = line + 1;
    while end < lines.len() {
        let l = lines[end];
        if !l.trim().is_empty() && indent_of(l).len() <= indent.len() {
            break;
        }
        end += 1;
    }
    // Blank lines before the next definition stay where they were.
    while end > line + 1 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    let new = indent_lines(&def.text, &indent);
    if lines[start..end].concat() == new {
        return Err(EditError::NoChange);
    }
    let out = format!(
        "{}{}{}",
        lines[..start].concat(),
        new,
        lines[end..].concat()
    );
    write_in(root, &path, &out, false)?;
    Ok(path)
}

/// `text` (dedented) with `indent` put before each non-blank line; blank
/// lines become empty. Every line ends in a newline.
pub fn indent_lines(text: &str, indent: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim().is_empty() {
                "\n".to_string()
            } else {
                format!("{indent}{l}\n")
            }
        })
        .collect()
}

/// `text` with `indent` taken off the start of each line (a line that does
/// not start with it loses its leading whitespace): the inverse of
/// [`indent_lines`].
pub fn dedent_lines(text: &str, indent: &str) -> String {
    text.lines()
        .map(|l| match l.strip_prefix(indent) {
            Some(rest) => format!("{rest}\n"),
            None => format!("{}\n", l.trim_start()),
        })
        .collect()
}

/// Lines `start`-`end` (1-based, inclusive) of the file at `path` to be
/// replaced by `text` (whole lines, each ending in a newline; empty
/// deletes them): what the `anchored`, `lines` and `definition` edit
/// formats of the Fixer come down to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineEdit {
    pub path: String,
    pub start: usize,
    pub end: usize,
    pub text: String,
}

/// Applies `edits` to the files at `root`: every range must lie in its
/// file and no two edits of a file may overlap (checked before anything
/// is written); each file's edits are applied from the bottom up, so the
/// line numbers, all of the file as it was, stay valid. Returns the
/// files changed, in the order first named.
pub fn apply_line_edits(root: &Path, edits: &[LineEdit]) -> Result<Vec<String>, EditError> {
    let mut paths: Vec<&str> = Vec::new();
    for e in edits {
        if !paths.contains(&e.path.as_str()) {
            paths.push(&e.path);
        }
    }
    let mut outputs = Vec::new();
    for path in &paths {
        let full = resolve(root, path)?;
        if !full.is_file() {
            return Err(EditError::NoSuchFile(path.to_string()));
        }
        let content = read_in(root, path)?;
        let lines: Vec<&str> = content.split_inclusive('\n').collect();
        let mut mine: Vec<&LineEdit> = edits.iter().filter(|e| e.path == *path).collect();
        mine.sort_by_key(|e| (e.start, e.end));
        for e in &mine {
            if e.start == 0 || e.start > e.end || e.end > lines.len() {
                return Err(EditError::OutOfRange {
                    path: path.to_string(),
                    start: e.start,
                    end: e.end,
                    lines: lines.len(),
                });
            }
        }
        for pair in mine.windows(2) {
            if pair[1].start <= pair[0].end {
                return Err(EditError::Overlap {
                    path: path.to_string(),
                    first_start: pair[0].start,
                    first_end: pair[0].end,
                    second_start: pair[1].start,
                    second_end: pair[1].end,
                });
            }
        }
        let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        for e in mine.iter().rev() {
            let mut text = e.text.clone();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            let new: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
            out.splice(e.start - 1..e.end, new);
        }
        outputs.push((path.to_string(), out.concat()));
    }
    for (path, text) in &outputs {
        write_in(root, path, text, false)?;
    }
    Ok(outputs.into_iter().map(|(p, _)| p).collect())
}

/// The line that starts the new text of a `lines` edit: `replace lines
/// A-B with:`.
pub const LINES_HEADER_PREFIX: &str = "replace lines ";

/// The fence around the new text of a `lines` or `definition` edit.
pub const FENCE: &str = "```";

/// One edit of the `lines` format as written: the path, lines `start`-`end`
/// as the model wrote them (`start` may exceed `end`), and the new text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinesEdit {
    pub path: String,
    pub start: usize,
    pub end: usize,
    pub text: String,
}

/// The edits of the `lines` format in `reply`:
///
/// ```text
/// path/to/file.py
/// replace lines 12-14 with:
/// ```
/// new lines
/// ```
/// ```
///
/// and how many were left open (a reply cut by the token cap). The path
/// is the closest non-blank line above the header.
pub fn parse_lines_edits(reply: &str) -> (Vec<LinesEdit>, usize) {
    let lines: Vec<&str> = reply.lines().collect();
    let mut out = Vec::new();
    let mut path = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end();
        let range = line
            .strip_prefix(LINES_HEADER_PREFIX)
            .and_then(|r| r.strip_suffix(" with:"))
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
        let Some((start, end)) = range else {
            if !line.trim().is_empty() {
                path = line.trim().to_string();
            }
            i += 1;
            continue;
        };
        if lines.get(i + 1).map(|l| l.trim_end()) != Some(FENCE) {
            i += 1;
            continue;
        }
        let body_start = i + 2;
        let Some(close) = (body_start..lines.len()).find(|&k| lines[k].trim_end() == FENCE) else {
            return (out, 1);
        };
        out.push(LinesEdit {
            path: path.clone(),
            start,
            end,
            text: join_lines(&lines[body_start..close]),
        });
        i = close + 1;
    }
    (out, 0)
}

/// The one edit of the `definition` format in `reply`: a `path::qualname`
/// line, then the new definition in a fence. `None` when there is no
/// closed fence after such a line (a reply cut by the token cap).
pub fn parse_definition_edit(reply: &str) -> Option<(String, String)> {
    let lines: Vec<&str> = reply.lines().collect();
    let at = (0..lines.len().saturating_sub(1))
        .find(|&i| lines[i].contains("::") && lines[i + 1].trim_end() == FENCE)?;
    let close = (at + 2..lines.len()).find(|&k| lines[k].trim_end() == FENCE)?;
    Some((
        lines[at].trim().to_string(),
        join_lines(&lines[at + 2..close]),
    ))
}

fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// A Python replacement moved to SEARCH's indentation, when it sits at
/// another one throughout: indented deeper throughout than SEARCH's first
/// line, it is moved left to it; starting shallower than SEARCH's first
/// line with nothing shallower after its first line, it is moved right to
/// it. Small models often indent a whole REPLACE one level too deep, or
/// not at all, which Python rejects ("unexpected indent", "expected an
/// indented block"); replacing code with the same code at another depth
/// throughout is not otherwise a change a fix makes.
pub fn fit_indentation(search: &str, replace: &str) -> Option<String> {
    let first = search.lines().find(|l| !l.trim().is_empty())?;
    let base = indent_of(first);
    let lines: Vec<&str> = replace.lines().collect();
    let written: Vec<usize> = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent_of(l).len())
        .collect();
    let least = *written.iter().min()?;
    let shift = |l: &str| -> String {
        if l.trim().is_empty() {
            "\n".to_string()
        } else if least > base.len() {
            format!("{}\n", &l[least - base.len()..])
        } else {
            format!("{}{l}\n", &base[..base.len() - least])
        }
    };
    let starts_least = written.first() == Some(&least);
    let fits = least > base.len() || (least < base.len() && starts_least);
    fits.then(|| lines.iter().map(|l| shift(l)).collect())
}

/// Shifts `replace` by the indentation difference between what SEARCH said
/// and what the file has.
fn reindent(replace: &str, wanted: &[&str], found: &[&str]) -> String {
    let Some(k) = wanted.iter().position(|l| !l.trim().is_empty()) else {
        return replace.to_string();
    };
    let said = indent_of(wanted[k]);
    let real = indent_of(found[k]);
    replace
        .lines()
        .map(|line| {
            if line.trim().is_empty() {
                "\n".to_string()
            } else if let Some(rest) = line.strip_prefix(said) {
                format!("{real}{rest}\n")
            } else {
                format!("{real}{}\n", line.trim_start())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_blocks_with_decorated_paths() {
        let reply = "I will fix it.\n\n```python\n### pkg/a.py\n<<<<<<< SEARCH\n    x = 1\n=======\n    x = 2\n>>>>>>> REPLACE\n```\n`pkg/b.py`\n<<<<<<< SEARCH\n=======\nnew\n>>>>>>> REPLACE\nc.py\n<<<<<<< SEARCH\ncut off";
        let p = parse(reply);
        assert_eq!(
            p.blocks,
            vec![
                Block {
                    path: "pkg/a.py".into(),
                    search: "    x = 1\n".into(),
                    replace: "    x = 2\n".into()
                },
                Block {
                    path: "pkg/b.py".into(),
                    search: "".into(),
                    replace: "new\n".into()
                },
            ]
        );
        assert_eq!(p.unterminated, 1);
    }

    #[test]
    fn replace_cases() {
        let file = "def f(x):\n    if x > 1:\n        return x\n    return 0\n";
        type Case<'a> = (&'a str, &'a str, Result<(&'a str, Matched), EditError>);
        let cases: &[Case] = &[
            (
                "    if x > 1:\n",
                "    if x >= 1:\n",
                Ok((
                    "def f(x):\n    if x >= 1:\n        return x\n    return 0\n",
                    Matched::Exact,
                )),
            ),
            (
                "    if x > 1:   \n        return x\n",
                "    if x >= 1:\n        return x\n",
                Ok((
                    "def f(x):\n    if x >= 1:\n        return x\n    return 0\n",
                    Matched::TrailingWhitespace,
                )),
            ),
            (
                "if x > 1:\n    return x\n",
                "if x >= 1:\n    return x + 0\n",
                Ok((
                    "def f(x):\n    if x >= 1:\n        return x + 0\n    return 0\n",
                    Matched::Indentation,
                )),
            ),
            (
                "\n\n    return 0\n\n",
                "    return -1\n",
                Ok((
                    "def f(x):\n    if x > 1:\n        return x\n    return -1\n",
                    Matched::TrailingWhitespace,
                )),
            ),
            // A replacement written at no indentation is moved right to
            // SEARCH's first line.
            (
                "        return x\n",
                "return x + 1\n",
                Ok((
                    "def f(x):\n    if x > 1:\n        return x + 1\n    return 0\n",
                    Matched::Exact,
                )),
            ),
            (
                "    if x > 1:\n        return x\n",
                "if x >= 1:\n    return x\n",
                Ok((
                    "def f(x):\n    if x >= 1:\n        return x\n    return 0\n",
                    Matched::Exact,
                )),
            ),
            // A replacement one level too deep throughout is moved left
            // to SEARCH's first line; one that opens a deeper block is not.
            (
                "    if x > 1:\n        return x\n",
                "        if x >= 1:\n\n            return x\n",
                Ok((
                    "def f(x):\n    if x >= 1:\n\n        return x\n    return 0\n",
                    Matched::Exact,
                )),
            ),
            (
                "    return 0\n",
                "    if x:\n        return 1\n    return 0\n",
                Ok((
                    "def f(x):\n    if x > 1:\n        return x\n    if x:\n        return 1\n    return 0\n",
                    Matched::Exact,
                )),
            ),
            (
                "    return y\n",
                "",
                Err(EditError::NotFound("f.py".into())),
            ),
            (
                "return",
                "yield",
                Err(EditError::Ambiguous {
                    path: "f.py".into(),
                    count: 2,
                }),
            ),
        ];
        for (search, repl, expected) in cases {
            let got = replace(file, search, repl, "f.py");
            let got = got.as_ref().map(|(s, m)| (s.as_str(), *m));
            assert_eq!(got, expected.as_ref().map(|(s, m)| (*s, *m)), "{search:?}");
        }
        // Only Python's indentation is corrected.
        let text = "a:\n  b\n";
        assert_eq!(
            replace(text, "  b\n", "    c\n", "f.yaml"),
            Ok(("a:\n    c\n".to_string(), Matched::Exact))
        );
    }

    #[test]
    fn paths_cannot_escape() {
        let root = Path::new("/ws");
        for bad in ["../x.py", "/etc/passwd", "", "a/../../b", ".git/config"] {
            assert!(resolve(root, bad).is_err(), "{bad}");
        }
        assert_eq!(
            resolve(root, "./pkg/a.py").unwrap(),
            Path::new("/ws/./pkg/a.py")
        );
    }

    #[test]
    fn symbolic_links_are_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("authorized_keys");
        std::os::unix::fs::symlink(&target, dir.path().join("dangling")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("d")).unwrap();
        std::fs::write(outside.path().join("x.py"), "x = 1\n").unwrap();
        let block = |path: &str, s: &str| Block {
            path: path.into(),
            search: s.into(),
            replace: "pwned\n".into(),
        };
        let cases = [
            block("dangling", ""),
            block("d/x.py", "x = 1\n"),
            block("d/new.py", ""),
        ];
        for b in cases {
            let link = b.path.split('/').next().unwrap_or_default();
            assert_eq!(
                apply_block(dir.path(), &b),
                Err(EditError::Confined(format!(
                    "cannot reach `{}` in the worktree {}: `{link}` is a symbolic link to `{}`, \
                     which leads out of the worktree; refused (nothing outside a worktree is \
                     read, written or removed)",
                    b.path,
                    dir.path().display(),
                    if link == "d" {
                        outside.path()
                    } else {
                        target.as_path()
                    }
                    .display()
                )))
            );
        }
        assert!(!target.exists());
        assert!(!outside.path().join("new.py").exists());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("x.py")).unwrap(),
            "x = 1\n"
        );
    }

    #[test]
    fn apply_block_creates_and_edits() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
        let block = |path: &str, s: &str, r: &str| Block {
            path: path.into(),
            search: s.into(),
            replace: r.into(),
        };
        assert_eq!(
            apply_block(dir.path(), &block("a.py", "x = 1\n", "x = 2\n")),
            Ok(Matched::Exact)
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.py")).unwrap(),
            "x = 2\n"
        );
        assert_eq!(
            apply_block(dir.path(), &block("n/b.py", "", "y = 1\n")),
            Ok(Matched::NewFile)
        );
        assert_eq!(
            apply_block(dir.path(), &block("a.py", "", "z\n")),
            Err(EditError::EmptySearch("a.py".into()))
        );
        assert_eq!(
            apply_block(dir.path(), &block("c.py", "q\n", "r\n")),
            Err(EditError::NoSuchFile("c.py".into()))
        );
        assert_eq!(
            apply_block(dir.path(), &block("a.py", "x = 2\n", "x = 2\n")),
            Err(EditError::NoChange)
        );
    }

    #[test]
    fn definitions_in_code_fences_replace_the_originals() {
        let dir = tempfile::tempdir().unwrap();
        let original = "import os\n\n\nclass T:\n    @property\n    def size(self):\n        return 1\n\n    def other(self):\n        pass\n\n\ndef top(x):\n    return x < 1\n";
        std::fs::write(dir.path().join("m.py"), original).unwrap();
        let reply = "The bug is in `size`.\n```python\n@property\ndef size(self):\n    return 2\n```\nand\n```\ndef top(x):\n    return x <= 1\n\nprint(top(1))\n```\n";
        let defs = parse_definitions(reply);
        assert_eq!(
            defs,
            vec![
                Definition {
                    name: "size".into(),
                    text: "@property\ndef size(self):\n    return 2\n".into()
                },
                Definition {
                    name: "top".into(),
                    text: "def top(x):\n    return x <= 1\n".into()
                },
            ]
        );
        let shown = ["m.py".to_string()];
        for d in &defs {
            assert_eq!(apply_definition(dir.path(), d, &shown), Ok("m.py".into()));
        }
        assert_eq!(
            std::fs::read_to_string(dir.path().join("m.py")).unwrap(),
            "import os\n\n\nclass T:\n    @property\n    def size(self):\n        return 2\n\n    def other(self):\n        pass\n\n\ndef top(x):\n    return x <= 1\n"
        );
        assert_eq!(
            apply_definition(dir.path(), &defs[1], &shown),
            Err(EditError::NoChange)
        );
        let missing = Definition {
            name: "absent".into(),
            text: "def absent():\n    pass\n".into(),
        };
        assert!(matches!(
            apply_definition(dir.path(), &missing, &shown),
            Err(EditError::NotFound(_))
        ));
    }

    #[test]
    fn a_wrong_path_is_retargeted_to_the_one_shown_file_that_matches() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
        std::fs::write(dir.path().join("b.py"), "y = 1\n").unwrap();
        let shown = ["a.py".to_string(), "b.py".to_string()];
        let block = |path: &str, s: &str| Block {
            path: path.into(),
            search: s.into(),
            replace: "z = 0\n".into(),
        };
        let got = apply_block_lenient(dir.path(), &block("Here is the fix", "y = 1\n"), &shown);
        assert_eq!(got, Ok((Matched::Exact, "b.py".to_string())));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.py")).unwrap(),
            "z = 0\n"
        );
        let got = apply_block_lenient(dir.path(), &block("nowhere.py", "q = 1\n"), &shown);
        assert_eq!(got, Err(EditError::NoSuchFile("nowhere.py".into())));
        // A named file that exists is never second-guessed.
        let got = apply_block_lenient(dir.path(), &block("a.py", "y = 1\n"), &shown);
        assert_eq!(got, Err(EditError::NotFound("a.py".into())));
    }

    #[test]
    fn line_edits_apply_from_the_bottom_up_and_refuse_overlaps() {
        let dir = tempfile::tempdir().unwrap();
        let original = "a = 1\nb = 2\nc = 3\nd = 4\n";
        let edit = |path: &str, start: usize, end: usize, text: &str| LineEdit {
            path: path.into(),
            start,
            end,
            text: text.into(),
        };
        type Case = (Vec<LineEdit>, Result<&'static str, EditError>);
        let cases: Vec<Case> = vec![
            // Line numbers are the file's as it was, whatever the order.
            (
                vec![
                    edit("m.py", 1, 1, "a = 10\na2 = 0\n"),
                    edit("m.py", 3, 4, ""),
                ],
                Ok("a = 10\na2 = 0\nb = 2\n"),
            ),
            (
                vec![edit("m.py", 4, 4, "d = 40"), edit("m.py", 2, 2, "b = 20\n")],
                Ok("a = 1\nb = 20\nc = 3\nd = 40\n"),
            ),
            (
                vec![edit("m.py", 1, 2, "x\n"), edit("m.py", 2, 3, "y\n")],
                Err(EditError::Overlap {
                    path: "m.py".into(),
                    first_start: 1,
                    first_end: 2,
                    second_start: 2,
                    second_end: 3,
                }),
            ),
            (
                vec![edit("m.py", 4, 5, "x\n")],
                Err(EditError::OutOfRange {
                    path: "m.py".into(),
                    start: 4,
                    end: 5,
                    lines: 4,
                }),
            ),
            (
                vec![edit("m.py", 3, 2, "x\n")],
                Err(EditError::OutOfRange {
                    path: "m.py".into(),
                    start: 3,
                    end: 2,
                    lines: 4,
                }),
            ),
            (
                vec![edit("none.py", 1, 1, "x\n")],
                Err(EditError::NoSuchFile("none.py".into())),
            ),
        ];
        for (edits, expected) in cases {
            std::fs::write(dir.path().join("m.py"), original).unwrap();
            let got = apply_line_edits(dir.path(), &edits);
            let text = std::fs::read_to_string(dir.path().join("m.py")).unwrap();
            match expected {
                Ok(want) => {
                    assert_eq!(got, Ok(vec![edits[0].path.clone()]), "{edits:?}");
                    assert_eq!(text, want, "{edits:?}");
                }
                Err(e) => {
                    assert_eq!(got, Err(e), "{edits:?}");
                    assert_eq!(text, original, "nothing written: {edits:?}");
                }
            }
        }
    }

    #[test]
    fn lines_edits_parse_with_their_paths_and_a_cut_one_is_counted() {
        let reply = "Reasoning: off by one.\n\npkg/a.py\nreplace lines 12-14 with:\n```\n    if x:\n\n        return 1\n```\npkg/b.py\nreplace lines 9-3 with:\n```\n```\npkg/a.py\nreplace lines 20-20 with:\n```\n    cut";
        let (edits, open) = parse_lines_edits(reply);
        assert_eq!(
            edits,
            vec![
                LinesEdit {
                    path: "pkg/a.py".into(),
                    start: 12,
                    end: 14,
                    text: "    if x:\n\n        return 1\n".into(),
                },
                LinesEdit {
                    path: "pkg/b.py".into(),
                    start: 9,
                    end: 3,
                    text: String::new(),
                },
            ]
        );
        assert_eq!(open, 1);
        assert_eq!(parse_lines_edits("Reasoning: nothing"), (vec![], 0));
    }

    #[test]
    fn a_definition_edit_parses_its_label_and_body() {
        let cases: [(&str, Option<(&str, &str)>); 3] = [
            (
                "Reasoning: x.\n\nm.py::C.f\n```\n    def f(self):\n        return 2\n```\n",
                Some(("m.py::C.f", "    def f(self):\n        return 2\n")),
            ),
            ("Reasoning: x.\n\nm.py::C.f\n```\n    def f(self):\n", None),
            ("Reasoning: a::b but no fence", None),
        ];
        for (reply, want) in cases {
            let got = parse_definition_edit(reply);
            assert_eq!(
                got.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
                want,
                "{reply:?}"
            );
        }
    }

    #[test]
    fn indenting_and_dedenting_are_inverse_on_indented_text() {
        let text = "    def f(self):\n\n        return 1\n";
        let dedented = dedent_lines(text, "    ");
        assert_eq!(dedented, "def f(self):\n\n    return 1\n");
        assert_eq!(indent_lines(&dedented, "    "), text);
        // A line under the indentation loses only its own.
        assert_eq!(dedent_lines("  x\n", "    "), "x\n");
    }

    #[test]
    fn marker_lines_are_recognised() {
        for (line, marker) in [
            ("<<<<<<< SEARCH", true),
            ("=======", true),
            ("=====  ", true),
            (">>>>>>> REPLACE", true),
            ("====", false),
            ("x = 1", false),
            (">>> f()", false),
        ] {
            assert_eq!(is_marker_line(line), marker, "{line:?}");
        }
    }
}
