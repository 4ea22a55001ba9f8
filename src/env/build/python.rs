//! Finding interpreters: the Python installations on this machine that
//! environments can be made from, by `major.minor` (pyenv's versions and
//! prefixes given with `--python`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A Python installation the environments can be made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interpreter {
    /// `major.minor.patch` when known (pyenv's directory name), else
    /// `major.minor`.
    pub version: String,
    pub prefix: PathBuf,
    pub executable: PathBuf,
}

/// The interpreters found on this machine, by `major.minor`.
#[derive(Debug, Clone, Default)]
pub struct Pythons {
    by_minor: BTreeMap<String, Interpreter>,
    looked: Vec<PathBuf>,
}

impl Pythons {
    /// pyenv's versions (`$PYENV_ROOT`, else `~/.pyenv`), then `extra`
    /// prefixes, which win over pyenv's for the same `major.minor`.
    pub fn discover(extra: &[PathBuf]) -> Pythons {
        let root = std::env::var_os("PYENV_ROOT")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
        Pythons::discover_at(root.as_deref(), extra)
    }

    /// [`Pythons::discover`] with pyenv's root given.
    pub fn discover_at(pyenv_root: Option<&Path>, extra: &[PathBuf]) -> Pythons {
        let mut p = Pythons::default();
        if let Some(versions) = pyenv_root.map(|r| r.join("versions")) {
            p.looked.push(versions.clone());
            let mut found: Vec<(Vec<u32>, String, PathBuf)> = std::fs::read_dir(&versions)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let parts: Option<Vec<u32>> = name.split('.').map(|x| x.parse().ok()).collect();
                    parts.filter(|v| v.len() == 3).map(|v| (v, name, e.path()))
                })
                .collect();
            found.sort();
            for (v, name, prefix) in found {
                let minor = format!("{}.{}", v[0], v[1]);
                if let Some(i) = interpreter(&prefix, &minor, name) {
                    p.by_minor.insert(minor, i);
                }
            }
        }
        for prefix in extra {
            p.looked.push(prefix.clone());
            for minor in minors_in(prefix) {
                if let Some(i) = interpreter(prefix, &minor, minor.clone()) {
                    p.by_minor.insert(minor, i);
                }
            }
        }
        p
    }

    pub fn get(&self, minor: &str) -> Option<&Interpreter> {
        self.by_minor.get(minor)
    }

    pub fn all(&self) -> impl Iterator<Item = &Interpreter> {
        self.by_minor.values()
    }

    /// Where interpreters were looked for, for an error message.
    pub(super) fn looked(&self) -> String {
        let v: Vec<String> = self
            .looked
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        v.join(", ")
    }
}

fn interpreter(prefix: &Path, minor: &str, version: String) -> Option<Interpreter> {
    let executable = prefix.join("bin").join(format!("python{minor}"));
    let prefix = std::fs::canonicalize(prefix).ok()?;
    executable.is_file().then_some(Interpreter {
        version,
        prefix,
        executable,
    })
}

/// `major.minor` of every `bin/pythonX.Y` under `prefix`.
fn minors_in(prefix: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(prefix.join("bin"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix("python")?;
            let (a, b) = rest.split_once('.')?;
            (a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok()).then(|| rest.to_string())
        })
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pyenv_versions_are_found_by_minor() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        for v in ["3.9.1", "3.9.18", "3.11.7", "system"] {
            let bin = dir.path().join("versions").join(v).join("bin");
            std::fs::create_dir_all(&bin)?;
            let minor: Vec<&str> = v.split('.').take(2).collect();
            std::fs::write(bin.join(format!("python{}", minor.join("."))), "")?;
        }
        let p = Pythons::discover_at(Some(dir.path()), &[]);
        assert_eq!(p.get("3.9").map(|i| i.version.as_str()), Some("3.9.18"));
        assert_eq!(p.get("3.11").map(|i| i.version.as_str()), Some("3.11.7"));
        assert!(p.get("3.5").is_none());
        Ok(())
    }
}
