//! Which code the Fixer is shown (`[fixer] show`): the located spans'
//! whole files when they fit, else the spans with what they call and
//! what sits beside them in the same file, else the spans alone. The bug
//! is often one call away from the located code (a helper under the
//! located function, the sibling method beside it), and the Fixer can
//! only edit lines it is shown.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::aci::Location;
use crate::index::symbols::{self, Symbol, SymbolKind};

/// Definitions added beside the located spans at most (callees first,
/// then siblings), so a long function calling many helpers does not crowd
/// the prompt.
pub const MAX_RELATED: usize = 6;

/// Lines shown around each located span, so SEARCH can include a line of
/// context and the model sees the surroundings.
pub const CONTEXT_LINES: usize = 5;

/// Lines apart under which two spans of a file are shown as one: twice the
/// context shown around each, so their shown ranges would touch.
pub const MERGE_GAP_LINES: usize = 2 * CONTEXT_LINES + 1;

/// What the Fixer is shown (`[fixer] show`); each rule falls back to the
/// next when its prompt does not fit the context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Show {
    /// The located files whole; else as `related`.
    #[default]
    File,
    /// The located spans, the functions of the same file they call, and
    /// the definitions just before and after them; else as `located`.
    Related,
    /// The located spans alone (trimmed to their relevant lines when even
    /// they do not fit).
    Located,
}

/// The spans of each view to try, widest first: `show`'s and those it
/// falls back to. Of two views showing the same lines, the narrower one
/// is kept.
pub fn views(root: &Path, located: &[Location], show: Show) -> Vec<Vec<Location>> {
    let mut out: Vec<Vec<Location>> = Vec::new();
    let ranges = |v: &[Location]| -> Vec<(String, usize, usize)> {
        v.iter()
            .map(|l| (l.path.clone(), l.start_line, l.end_line))
            .collect()
    };
    let mut push = |v: Vec<Location>| {
        if v.is_empty() {
            return;
        }
        // A view showing the same lines as the wider one before it
        // replaces it (its names are the located ones).
        if out.last().is_some_and(|w| ranges(w) == ranges(&v)) {
            out.pop();
        }
        out.push(v);
    };
    if show == Show::File {
        push(whole_files(root, located));
    }
    if show != Show::Located {
        push(related(root, located));
    }
    push(located.to_vec());
    out
}

/// Each located file once, whole (in the order first located).
pub fn whole_files(root: &Path, located: &[Location]) -> Vec<Location> {
    let mut out: Vec<Location> = Vec::new();
    for loc in located {
        if out.iter().any(|l| l.path == loc.path) {
            continue;
        }
        let Ok(text) = crate::aci::read_text(root, &loc.path) else {
            continue;
        };
        let lines = text.lines().count();
        if lines > 0 {
            out.push(Location {
                path: loc.path.clone(),
                symbol: "(the whole file)".into(),
                start_line: 1,
                end_line: lines,
            });
        }
    }
    out
}

/// Names called in `lines` (a word followed by `(`), `self.` and
/// attribute calls included by their last name.
pub fn called_names(lines: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in lines {
        let code = line.split('#').next().unwrap_or("");
        let bytes = code.as_bytes();
        let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let mut i = 0;
        while i < bytes.len() {
            if !is_word(bytes[i]) || (i > 0 && is_word(bytes[i - 1])) {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && is_word(bytes[i]) {
                i += 1;
            }
            if bytes.get(i) == Some(&b'(') && !bytes[start].is_ascii_digit() {
                out.insert(code[start..i].to_string());
            }
        }
    }
    out
}

/// The located spans with, in the same file, the functions and methods
/// they call and the definitions just before and after each located
/// function or method in its class or module, at most [`MAX_RELATED`]
/// added; merged per file ([`merge`]).
pub fn related(root: &Path, located: &[Location]) -> Vec<Location> {
    let mut all: Vec<Location> = located.to_vec();
    let mut callees: Vec<Location> = Vec::new();
    let mut siblings: Vec<Location> = Vec::new();
    for loc in located {
        let Ok(text) = crate::aci::read_text(root, &loc.path) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        let file = symbols::parse_symbols(&loc.path, &text);
        let inside = |s: &Symbol| s.start_line >= loc.start_line && s.end_line <= loc.end_line;
        let covers = |s: &Symbol| s.start_line <= loc.start_line && loc.end_line <= s.end_line;
        let body = lines
            .get(loc.start_line.saturating_sub(1)..loc.end_line.min(lines.len()))
            .unwrap_or_default();
        let called = called_names(body);
        for s in &file.symbols {
            let callable = matches!(s.kind, SymbolKind::Function | SymbolKind::Method);
            if callable && called.contains(&s.name) && !inside(s) && !covers(s) {
                callees.push(as_location(&loc.path, s));
            }
        }
        // The definitions beside the located one, in its class or module.
        let Some(own) = file
            .symbols
            .iter()
            .filter(|s| covers(s) && s.kind != SymbolKind::Class)
            .min_by_key(|s| s.end_line - s.start_line)
        else {
            continue;
        };
        let parent = own.qualname.rsplit_once('.').map(|(p, _)| p);
        let peers: Vec<&Symbol> = file
            .symbols
            .iter()
            .filter(|s| s.qualname.rsplit_once('.').map(|(p, _)| p) == parent)
            .filter(|s| s.kind != SymbolKind::Class || parent.is_some())
            .collect();
        let before = peers
            .iter()
            .filter(|s| s.end_line < own.start_line)
            .max_by_key(|s| s.end_line);
        let after = peers
            .iter()
            .filter(|s| s.start_line > own.end_line)
            .min_by_key(|s| s.start_line);
        siblings.extend(
            before
                .into_iter()
                .chain(after)
                .map(|s| as_location(&loc.path, s)),
        );
    }
    let mut added = 0;
    for l in callees.into_iter().chain(siblings) {
        if added == MAX_RELATED {
            break;
        }
        if !all.contains(&l) {
            all.push(l);
            added += 1;
        }
    }
    merge(&all)
}

fn as_location(path: &str, s: &Symbol) -> Location {
    Location {
        path: path.to_string(),
        symbol: s.qualname.clone(),
        start_line: s.start_line,
        end_line: s.end_line,
    }
}

/// The spans per file (files in the order first named), sorted, and
/// those overlapping or under [`MERGE_GAP_LINES`] apart merged into one
/// (their symbols joined with `, `).
pub fn merge(locations: &[Location]) -> Vec<Location> {
    let mut paths: Vec<&str> = Vec::new();
    for l in locations {
        if !paths.contains(&l.path.as_str()) {
            paths.push(&l.path);
        }
    }
    let mut out = Vec::new();
    for path in paths {
        let mut spans: Vec<&Location> = locations.iter().filter(|l| l.path == path).collect();
        spans.sort_by_key(|l| (l.start_line, l.end_line));
        let mut current: Option<Location> = None;
        for s in spans {
            match current.as_mut() {
                Some(c) if s.start_line <= c.end_line + MERGE_GAP_LINES => {
                    c.end_line = c.end_line.max(s.end_line);
                    if !c.symbol.split(", ").any(|n| n == s.symbol) {
                        c.symbol = format!("{}, {}", c.symbol, s.symbol);
                    }
                }
                _ => {
                    out.extend(current.take());
                    current = Some(s.clone());
                }
            }
        }
        out.extend(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(path: &str, symbol: &str, start: usize, end: usize) -> Location {
        Location {
            path: path.into(),
            symbol: symbol.into(),
            start_line: start,
            end_line: end,
        }
    }

    #[test]
    fn spans_merge_per_file() {
        let cases: &[(&str, Vec<Location>, Vec<Location>)] = &[
            (
                "apart",
                vec![loc("a.py", "f", 1, 5), loc("a.py", "g", 40, 50)],
                vec![loc("a.py", "f", 1, 5), loc("a.py", "g", 40, 50)],
            ),
            (
                "close",
                vec![loc("a.py", "g", 20, 30), loc("a.py", "f", 1, 10)],
                vec![loc("a.py", "f, g", 1, 30)],
            ),
            (
                "inside",
                vec![loc("a.py", "C", 1, 100), loc("a.py", "C.m", 10, 20)],
                vec![loc("a.py", "C, C.m", 1, 100)],
            ),
            (
                "two files",
                vec![
                    loc("b.py", "h", 1, 2),
                    loc("a.py", "f", 1, 2),
                    loc("b.py", "i", 3, 4),
                ],
                vec![loc("b.py", "h, i", 1, 4), loc("a.py", "f", 1, 2)],
            ),
        ];
        for (name, input, want) in cases {
            assert_eq!(&merge(input), want, "{name}");
        }
    }

    #[test]
    fn calls_are_read_from_code() {
        let got = called_names(&[
            "    if _expand_caret(v) and self.check(x):  # not_this(1)",
            "    return sorted(Version.parse(s))",
        ]);
        let want: BTreeSet<String> = ["_expand_caret", "check", "sorted", "parse"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_helper_and_the_neighbours_are_shown() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let text = "\
def _helper(x):
    return x + 1


def unrelated():
    return 0


class Cache:
    def __getitem__(self, key):
        return self._data[key]

    def __setitem__(self, key, value):
        self._data[key] = value

    def __len__(self):
        return len(self._data)


def satisfies(v):
    return _helper(v) > 2


def last():
    pass
";
        std::fs::write(dir.path().join("m.py"), text)?;
        // `satisfies` calls `_helper`; beside it, `unrelated` (a class is
        // no function's neighbour) and `last`.
        let got = related(dir.path(), &[loc("m.py", "satisfies", 20, 21)]);
        assert_eq!(
            got,
            [
                loc("m.py", "_helper, unrelated", 1, 6),
                loc("m.py", "satisfies, last", 20, 25)
            ],
        );
        // A method: the methods before and after it in its class.
        let got = related(dir.path(), &[loc("m.py", "Cache.__getitem__", 10, 11)]);
        assert_eq!(
            got,
            [loc("m.py", "Cache.__getitem__, Cache.__setitem__", 10, 14)]
        );
        let views = views(
            dir.path(),
            &[loc("m.py", "Cache.__getitem__", 10, 11)],
            Show::File,
        );
        assert_eq!(views.len(), 3);
        assert_eq!(views[0], [loc("m.py", "(the whole file)", 1, 25)]);
        assert_eq!(views[2], [loc("m.py", "Cache.__getitem__", 10, 11)]);
        assert_eq!(
            super::views(dir.path(), &[loc("m.py", "f", 10, 11)], Show::Located).len(),
            1
        );
        Ok(())
    }
}
