//! What the agents know about a repository without running it: its Python
//! files and a BM25 ranking of them against an issue (`bm25.rs`), and the
//! classes, functions and methods in them from tree-sitter, with their
//! signatures, line ranges and docstrings, indexed in parallel and cached per
//! repository and commit, plus syntax errors for checking an edit
//! (`symbols.rs`); the test files that import a module, directly or through
//! other modules (`imports.rs`).

pub mod bm25;
pub mod candidates;
pub mod imports;
pub mod symbols;

use std::path::Path;

/// Files larger than this are not ranked or shown: they are data or
/// generated code, and would not fit a small model's context anyway.
pub const MAX_FILE_BYTES: u64 = 512 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("cannot list files of {dir} with git ls-files: {message}")]
    List { dir: String, message: String },
    #[error("cannot resolve the repository directory {dir}: {message}")]
    Root { dir: String, message: String },
    #[error("cannot write the code index cache {path}: {message}")]
    Cache { path: String, message: String },
}

/// A ranked file with its text.
#[derive(Debug, Clone)]
pub struct RankedFile {
    pub path: String,
    pub score: f64,
    pub text: String,
}

/// The repository's tracked Python files (paths relative to `root`).
pub fn python_files(root: &Path) -> Result<Vec<String>, IndexError> {
    let out = crate::repo::git_command()
        .current_dir(root)
        .args(["ls-files", "-z", "--", "*.py"])
        .output()
        .map_err(|e| IndexError::List {
            dir: root.display().to_string(),
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(IndexError::List {
            dir: root.display().to_string(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out
        .stdout
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

/// Whether a path is a test file by the conventions of pytest and unittest
/// (`tests/` directories, `test_*.py`, `*_test.py`, `conftest.py`). A
/// `test/` or `testing/` package is not assumed to be tests: in Django and
/// NumPy it is library code that fixes land in.
pub fn is_test_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    path.split('/').any(|part| part == "tests")
        || name.starts_with("test_")
        || name.ends_with("_test.py")
        || name == "conftest.py"
}

/// Ranks the repository's Python source files (test files left out: a fix
/// goes into the code) against `query`, best first. A file's path counts as
/// part of its text. Unreadable and oversized files are left out.
pub fn rank_files(root: &Path, query: &str) -> Result<Vec<RankedFile>, IndexError> {
    let mut files = Vec::new();
    for path in python_files(root)?.into_iter().filter(|p| !is_test_file(p)) {
        // No link followed: a model can make a tracked file a link to a
        // host file, and the ranked text goes into a prompt.
        if let Some(text) = symbols::read_source(root, &path) {
            files.push((path, text));
        }
    }
    let documents: Vec<String> = files.iter().map(|(p, t)| format!("{p}\n{t}")).collect();
    let index = bm25::Bm25::new(documents.iter().map(String::as_str));
    Ok(index
        .rank(query)
        .into_iter()
        .map(|(i, score)| RankedFile {
            path: files[i].0.clone(),
            score,
            text: files[i].1.clone(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_files_are_recognised() {
        let cases = [
            ("tests/test_a.py", true),
            ("pkg/tests/helpers.py", true),
            ("test_x.py", true),
            ("pkg/x_test.py", true),
            ("conftest.py", true),
            ("pkg/testing/utils.py", false),
            ("django/test/client.py", false),
            ("pkg/contest.py", false),
            ("pkg/latest.py", false),
            ("src/attest/core.py", false),
        ];
        for (path, expected) in cases {
            assert_eq!(is_test_file(path), expected, "{path}");
        }
    }
}
