//! `BUNDLE/manifest.json`: what a bundle holds and the sha256 of every
//! file in it. Written last by `pack`; read by `pack --check` and by every
//! command given `--bundle`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::BundleError;

/// Version of the bundle layout; a reader refuses a newer one.
pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: u32,
    /// The patchwright version that packed it.
    pub packed_by: String,
    pub packed_at: String,
    /// The task file, relative to the bundle.
    pub dataset: String,
    /// The instance ids packed for.
    pub tasks: Vec<String>,
    /// Repositories by `owner/name`.
    #[serde(default)]
    pub repos: BTreeMap<String, RepoEntry>,
    /// Environments by `owner/name version`.
    #[serde(default)]
    pub envs: BTreeMap<String, EnvEntry>,
    /// Interpreters by `major.minor`.
    #[serde(default)]
    pub pythons: BTreeMap<String, PythonEntry>,
    /// Models by file name.
    #[serde(default)]
    pub models: BTreeMap<String, ModelEntry>,
    /// Every file of the bundle but this one, by path relative to it.
    #[serde(default)]
    pub files: BTreeMap<String, FileEntry>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RepoEntry {
    /// The git bundle, relative to the bundle.
    pub file: String,
    /// The full ids of the commits it holds.
    pub commits: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct EnvEntry {
    pub repo: String,
    pub version: String,
    /// `major.minor` of its interpreter.
    pub python: String,
    /// Its wheelhouse, relative to the bundle.
    pub wheels: String,
    /// Task commits whose own dependencies were downloaded (or found to be
    /// the setup commit's).
    pub commits: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PythonEntry {
    /// The full version (`3.9.18`).
    pub version: String,
    /// Its prefix, relative to the bundle.
    pub dir: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ModelEntry {
    /// The manifest name, when it is a known model.
    pub name: Option<String>,
    pub sha256: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileEntry {
    pub sha256: String,
    pub bytes: u64,
}

/// A file that is not what the manifest says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bad {
    pub path: PathBuf,
    pub problem: String,
}

impl Manifest {
    /// The part a bundle path belongs to (`models`, `repos`, `wheels`,
    /// `python`, `dataset`): its first component.
    pub fn part(rel: &str) -> &str {
        rel.split('/').next().unwrap_or(rel)
    }

    /// Bytes by part.
    pub fn sizes(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (rel, f) in &self.files {
            *out.entry(Manifest::part(rel).to_string()).or_insert(0) += f.bytes;
        }
        out
    }

    /// Checks the files under `prefixes` (relative paths; a file or a
    /// directory) against their hashes; every file when `prefixes` is
    /// empty. Returns the bad ones.
    pub fn verify(&self, root: &Path, prefixes: &[String]) -> Vec<Bad> {
        let wanted = |rel: &str| {
            prefixes.is_empty()
                || prefixes
                    .iter()
                    .any(|p| rel == p || rel.starts_with(&format!("{}/", p.trim_end_matches('/'))))
        };
        let mut bad = Vec::new();
        for (rel, f) in self.files.iter().filter(|(rel, _)| wanted(rel)) {
            let path = root.join(rel);
            match hash_file(&path) {
                Ok((sha, _)) if sha == f.sha256 => {}
                Ok((sha, bytes)) => bad.push(Bad {
                    path,
                    problem: format!(
                        "sha256 {sha} ({bytes} bytes), the manifest says {} ({} bytes)",
                        f.sha256, f.bytes
                    ),
                }),
                Err(e) => bad.push(Bad {
                    path,
                    problem: format!("missing or unreadable ({e})"),
                }),
            }
        }
        bad
    }
}

/// sha256 and size of a file, streamed.
pub fn hash_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut f = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut f, &mut hasher)?;
    Ok((hex::encode(hasher.finalize()), bytes))
}

/// Every regular file under `root` as a path relative to it (symbolic
/// links are not files of their own: a link inside an interpreter's tree
/// is kept by the tree, and `pack` makes no other), minus `skip`.
pub fn walk(root: &Path, skip: &dyn Fn(&str) -> bool) -> Result<Vec<String>, BundleError> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let entries = std::fs::read_dir(&dir).map_err(super::io("read", &dir))?;
        for e in entries.filter_map(Result::ok) {
            let r = rel.join(e.file_name());
            let s = r.to_string_lossy().into_owned();
            if skip(&s) {
                continue;
            }
            let t = e.file_type().map_err(super::io("stat", &e.path()))?;
            if t.is_dir() {
                stack.push(r);
            } else if t.is_file() {
                out.push(s);
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_names_changed_and_missing_files_and_sizes_go_by_part(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let root = dir.path();
        std::fs::create_dir_all(root.join("wheels/o__r/1.0"))?;
        std::fs::create_dir_all(root.join("models"))?;
        std::fs::write(root.join("wheels/o__r/1.0/a.whl"), "aaaa")?;
        std::fs::write(root.join("wheels/o__r/1.0/b.whl"), "bb")?;
        std::fs::write(root.join("models/m.gguf"), "model")?;
        let mut m = Manifest::default();
        for rel in walk(root, &|_| false)? {
            let (sha256, bytes) = hash_file(&root.join(&rel))?;
            m.files.insert(rel, FileEntry { sha256, bytes });
        }
        assert_eq!(
            m.files.keys().collect::<Vec<_>>(),
            [
                "models/m.gguf",
                "wheels/o__r/1.0/a.whl",
                "wheels/o__r/1.0/b.whl"
            ]
        );
        assert_eq!(
            m.sizes(),
            BTreeMap::from([("models".to_string(), 5), ("wheels".to_string(), 6)])
        );
        assert!(m.verify(root, &[]).is_empty());
        std::fs::write(root.join("wheels/o__r/1.0/a.whl"), "aaab")?;
        std::fs::remove_file(root.join("models/m.gguf"))?;
        let bad = m.verify(root, &[]);
        assert_eq!(
            bad.iter().map(|b| b.path.clone()).collect::<Vec<_>>(),
            [
                root.join("models/m.gguf"),
                root.join("wheels/o__r/1.0/a.whl")
            ]
        );
        assert!(bad[1].problem.contains("the manifest says"));
        // Only what is asked for is checked.
        let bad = m.verify(root, &["wheels/o__r/1.0".to_string()]);
        assert_eq!(bad.len(), 1);
        assert!(m
            .verify(root, &["wheels/o__r/1.0/b.whl".to_string()])
            .is_empty());
        assert!(m.verify(root, &["wheels/o__r/1".to_string()]).is_empty());
        Ok(())
    }
}
