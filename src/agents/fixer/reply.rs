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

/// Applies one reply's edits to the workspace, checks and diffs the
/// result, and undoes it.
pub(super) fn try_candidate(
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
