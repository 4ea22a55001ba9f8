//! The search commands: `find_file`, `search_dir`, `search_file`, with
//! SWE-agent's output shapes (matches are counted in lines, as grep does)
//! and a cap of [`MAX_SEARCH_RESULTS`]. TEXT is matched literally.

use std::path::Path;

use super::{read_text, walk, AciError, MAX_SEARCH_RESULTS};

/// How the repository root is named in messages.
const ROOT_NAME: &str = "the repository root";

/// The directory as the agent named it, checked to be one.
fn directory(root: &Path, dir: Option<&str>) -> Result<String, AciError> {
    let dir = dir.unwrap_or(".");
    let clean = dir.trim_end_matches('/');
    if clean == "." || clean.is_empty() {
        return Ok(ROOT_NAME.to_string());
    }
    let full = crate::edit::resolve(root, clean)?;
    match std::fs::symlink_metadata(&full) {
        Ok(m) if m.is_dir() => Ok(clean.to_string()),
        _ => Err(AciError::NoDirectory(dir.to_string())),
    }
}

fn walk_dir(root: &Path, dir: &str) -> Vec<(String, bool)> {
    walk(root, if dir == ROOT_NAME { "" } else { dir })
}

/// Shell-style matching of a file name: `*` any run, `?` one character.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

pub fn find_file(root: &Path, name: &str, dir: Option<&str>) -> String {
    let dir = match directory(root, dir) {
        Ok(d) => d,
        Err(e) => return e.to_string(),
    };
    let matches: Vec<String> = walk_dir(root, &dir)
        .into_iter()
        .filter(|(path, is_dir)| {
            !is_dir && glob_match(name, path.rsplit('/').next().unwrap_or(path))
        })
        .map(|(path, _)| path)
        .collect();
    if matches.is_empty() {
        return format!("No matches found for \"{name}\" in {dir}");
    }
    if matches.len() > MAX_SEARCH_RESULTS {
        return format!(
            "More than {MAX_SEARCH_RESULTS} files matched for \"{name}\" in {dir}. Please narrow your search."
        );
    }
    format!(
        "Found {} matches for \"{name}\" in {dir}:\n{}",
        matches.len(),
        matches.join("\n")
    )
}

pub fn search_dir(root: &Path, text: &str, dir: Option<&str>) -> String {
    let dir = match directory(root, dir) {
        Ok(d) => d,
        Err(e) => return e.to_string(),
    };
    let mut hits = Vec::new();
    let mut total = 0;
    for (path, is_dir) in walk_dir(root, &dir) {
        if is_dir {
            continue;
        }
        // Binary, non-UTF-8 and oversized files are not searched (grep -I).
        let Ok(content) = read_text(root, &path) else {
            continue;
        };
        let count = content.lines().filter(|l| l.contains(text)).count();
        if count > 0 {
            total += count;
            hits.push((path, count));
        }
    }
    if hits.is_empty() {
        return format!("No matches found for \"{text}\" in {dir}");
    }
    if hits.len() > MAX_SEARCH_RESULTS {
        return format!(
            "More than {MAX_SEARCH_RESULTS} files matched for \"{text}\" in {dir}. Please narrow your search."
        );
    }
    let list: Vec<String> = hits
        .iter()
        .map(|(p, c)| format!("{p} ({c} matches)"))
        .collect();
    format!(
        "Found {total} matches for \"{text}\" in {dir}:\n{}\nEnd of matches for \"{text}\" in {dir}",
        list.join("\n")
    )
}

pub fn search_file(root: &Path, text: &str, path: &str) -> String {
    let content = match read_text(root, path) {
        Ok(c) => c,
        Err(e) => return e.to_string(),
    };
    let hits: Vec<String> = content
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(text))
        .map(|(i, l)| format!("Line {}:{}", i + 1, l))
        .collect();
    if hits.is_empty() {
        return format!("No matches found for \"{text}\" in {path}");
    }
    if hits.len() > MAX_SEARCH_RESULTS {
        return format!(
            "More than {MAX_SEARCH_RESULTS} lines matched for \"{text}\" in {path}. Please narrow your search."
        );
    }
    format!(
        "Found {} matches for \"{text}\" in {path}:\n{}\nEnd of matches for \"{text}\" in {path}",
        hits.len(),
        hits.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_a_shell() {
        let cases = [
            ("*.py", "a.py", true),
            ("*.py", "a.pyc", false),
            ("test_*.py", "test_x.py", true),
            ("test_*.py", "x_test.py", false),
            ("?.py", "a.py", true),
            ("?.py", "ab.py", false),
            ("setup.py", "setup.py", true),
            ("*", "", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ];
        for (pattern, name, expected) in cases {
            assert_eq!(glob_match(pattern, name), expected, "{pattern} {name}");
        }
    }
}
