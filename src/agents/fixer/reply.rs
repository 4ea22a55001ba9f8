//! Reading a Fixer reply: the edits it asks for in the prompt's format,
//! anchored to the shown lines, and applied to the worktree.

use super::*;

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
pub(super) enum Unanchored {
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
pub(super) fn anchor(
    blocks: &[edit::Block],
    code: &[ShownCode],
) -> Result<Vec<edit::LineEdit>, Unanchored> {
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
    let edit_at = |k: usize, start: usize| {
        let b = &blocks[k];
        let fitted = b
            .path
            .ends_with(".py")
            .then(|| edit::fit_indentation(&b.search, &b.replace))
            .flatten();
        edit::LineEdit {
            path: b.path.clone(),
            start,
            end: start + b.search.lines().count() - 1,
            text: fitted.unwrap_or_else(|| b.replace.clone()),
        }
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
pub(super) fn overlaps(a: &edit::LineEdit, b: &edit::LineEdit) -> bool {
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
pub(super) fn place(
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

/// One candidate's result: its status, its patch when kept, and the
/// edits dropped to keep it (why each was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tried {
    pub status: Status,
    pub patch: Option<String>,
    /// What the patch means ([`meaning`]) when kept.
    pub meaning: String,
    /// Whether that meaning is the base's (see [`Applied::Patch`]).
    pub inert: bool,
    pub dropped: Vec<String>,
}

/// A reply's edits as units that apply on their own: the blocks of
/// `search_replace` (in order, each on the file as the earlier ones left
/// it), the line ranges of the other formats (all of the file as it was).
#[derive(Clone, Copy)]
enum Units<'a> {
    Blocks(&'a [edit::Block]),
    Lines(&'a [edit::LineEdit]),
}

impl Units<'_> {
    fn len(self) -> usize {
        match self {
            Units::Blocks(b) => b.len(),
            Units::Lines(l) => l.len(),
        }
    }

    /// Applies the units numbered in `which` to the worktree at `root`.
    fn apply(self, root: &Path, paths: &[String], which: &[usize]) -> Result<(), String> {
        match self {
            Units::Blocks(blocks) => which.iter().try_for_each(|&i| {
                edit::apply_block_lenient(root, &blocks[i], paths)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }),
            Units::Lines(lines) => {
                let chosen: Vec<edit::LineEdit> = which.iter().map(|&i| lines[i].clone()).collect();
                edit::apply_line_edits(root, &chosen)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// Applies one reply's edits to the workspace, checks and diffs the
/// result, and undoes it. When the edits together do not apply or break
/// the syntax, each is tried in reply order on top of those kept so far
/// and dropped if it does not apply or breaks the syntax, as SWE-agent's
/// editor refuses one edit and keeps the others: a candidate with one
/// stray block keeps its fix. One whose edits are all dropped is refused
/// with its first edit's reason.
///
/// `before` is [`befores`] of the prompt's files, read once for all the
/// candidates of a prompt (each is undone before the next).
pub(super) fn try_candidate(
    root: &Path,
    base: &str,
    reply: &str,
    prompt: &Prompt,
    before: &[Before],
    compile: Option<&CompileCheck<'_>>,
) -> Result<Tried, RepoError> {
    let paths = &prompt.paths;
    let edits = edits_of(reply, prompt);
    let units = match &edits {
        Edits::None => return Ok(tried(Status::NoBlocks, None)),
        Edits::Refused(why) => return Ok(tried(Status::DidNotApply(why.clone()), None)),
        Edits::Blocks(blocks) => Units::Blocks(blocks),
        Edits::Lines(lines) => Units::Lines(lines),
    };
    let check = Check {
        root,
        base,
        paths,
        before,
        compile,
    };
    let all: Vec<usize> = (0..units.len()).collect();
    let whole = check.attempt(units, &all)?;
    if matches!(whole, Applied::Patch { .. } | Applied::NoChange) || units.len() == 1 {
        return Ok(match whole {
            Applied::Patch {
                patch,
                meaning,
                inert,
            } => Tried {
                meaning,
                inert,
                ..tried(Status::Kept, Some(patch))
            },
            Applied::NoChange => tried(Status::NoChange, None),
            Applied::Unapplied(why) => tried(Status::DidNotApply(why), None),
            Applied::Broken(why) => tried(Status::SyntaxError(why), None),
        });
    }
    let mut kept: Vec<usize> = Vec::new();
    let mut dropped: Vec<String> = Vec::new();
    let mut first_refusal = None;
    let mut last = Applied::NoChange;
    for i in all {
        let trial: Vec<usize> = kept.iter().copied().chain([i]).collect();
        match check.attempt(units, &trial)? {
            Applied::Unapplied(why) => {
                dropped.push(format!("edit {}: {why}", i + 1));
                first_refusal.get_or_insert(Status::DidNotApply(why));
            }
            Applied::Broken(why) => {
                dropped.push(format!("edit {}: {why}", i + 1));
                first_refusal.get_or_insert(Status::SyntaxError(why));
            }
            ok => {
                kept.push(i);
                last = ok;
            }
        }
    }
    Ok(match (last, first_refusal) {
        (
            Applied::Patch {
                patch,
                meaning,
                inert,
            },
            _,
        ) => Tried {
            status: Status::Kept,
            patch: Some(patch),
            meaning,
            inert,
            dropped,
        },
        (_, Some(status)) => tried(status, None),
        _ => tried(Status::NoChange, None),
    })
}

fn tried(status: Status, patch: Option<String>) -> Tried {
    Tried {
        status,
        patch,
        meaning: String::new(),
        inert: false,
        dropped: Vec::new(),
    }
}

/// What applying some of a candidate's edits gave.
enum Applied {
    /// The patch, what it means ([`meaning`]), and whether that is what
    /// the base means: every file it changes has the base's normal form
    /// (it changes only comments, docstrings or formatting).
    Patch {
        patch: String,
        meaning: String,
        inert: bool,
    },
    /// No change.
    NoChange,
    Unapplied(String),
    Broken(String),
}

/// How a candidate's edits are checked in the worktree.
struct Check<'a> {
    root: &'a Path,
    base: &'a str,
    paths: &'a [String],
    /// Each shown file before any edit.
    before: &'a [Before],
    compile: Option<&'a CompileCheck<'a>>,
}

impl Check<'_> {
    /// Applies units `which`, checks the syntax (tree-sitter, then
    /// Python's compile when it can run), diffs, and resets the worktree.
    fn attempt(&self, units: Units<'_>, which: &[usize]) -> Result<Applied, RepoError> {
        let root = self.root;
        let result = match units.apply(root, self.paths, which) {
            Err(why) => Applied::Unapplied(why),
            Ok(()) => self.judge()?,
        };
        crate::repo::reset_worktree(root)?;
        Ok(result)
    }

    fn judge(&self) -> Result<Applied, RepoError> {
        let root = self.root;
        let broken = self.before.iter().find_map(|b| {
            let errors = crate::aci::read_text(root, &b.path)
                .map(|t| symbols::syntax_errors(&t))
                .unwrap_or_default();
            (errors.len() > b.errors).then(|| {
                let e = &errors[0];
                format!("{}:{}:{}: {}", b.path, e.line, e.column, e.message)
            })
        });
        if let Some(why) = broken {
            return Ok(Applied::Broken(why));
        }
        let patch = crate::repo::diff_against(root, self.base)?;
        if patch.trim().is_empty() {
            return Ok(Applied::NoChange);
        }
        let touched = crate::repo::touched_files(&patch);
        let forms: Vec<(String, Option<String>)> = touched
            .iter()
            .map(|p| {
                let form = crate::aci::read_text(root, p)
                    .ok()
                    .and_then(|t| symbols::normal_form(&t));
                (p.clone(), form)
            })
            .collect();
        let inert = forms.iter().all(|(p, form)| {
            form.is_some() && self.before.iter().any(|b| &b.path == p && b.form == *form)
        });
        Ok(match self.compile.and_then(|check| check(root, &touched)) {
            Some(why) => Applied::Broken(why),
            None => Applied::Patch {
                meaning: meaning(&forms),
                patch,
                inert,
            },
        })
    }
}

/// A shown file as it was before any edit: its syntax errors (an edit may
/// not add one) and its normal form (None: the grammar cannot read it).
pub(super) struct Before {
    path: String,
    errors: usize,
    form: Option<String>,
}

/// The files `paths` of the workspace at `root` as they are now, before
/// any candidate's edit.
pub(super) fn befores(root: &Path, paths: &[String]) -> Vec<Before> {
    paths
        .iter()
        .map(|p| {
            let text = crate::aci::read_text(root, p).ok();
            Before {
                path: p.clone(),
                errors: text
                    .as_deref()
                    .map_or(0, |t| symbols::syntax_errors(t).len()),
                form: text.as_deref().and_then(symbols::normal_form),
            }
        })
        .collect()
}

/// What a patch means: a digest of the normal forms
/// ([`symbols::normal_form`]) of the files it leaves, by path, so that
/// patches differing only in comments, docstrings or formatting are one
/// (a file the grammar cannot read counts by its diff's path alone).
fn meaning(forms: &[(String, Option<String>)]) -> String {
    use sha2::Digest;
    let mut sorted: Vec<&(String, Option<String>)> = forms.iter().collect();
    sorted.sort();
    let mut hasher = sha2::Sha256::new();
    for (path, form) in sorted {
        hasher.update(path.as_bytes());
        hasher.update([0]);
        hasher.update(form.as_deref().unwrap_or("").as_bytes());
        hasher.update([0]);
    }
    hex::encode(&hasher.finalize()[..12])
}
