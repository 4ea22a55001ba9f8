//! The build plan: everything an environment is built from (spec,
//! interpreter, requirement lines, build backend, setup commit), resolved,
//! its hash, and the directory it lives in, which the hash names.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::python::{Interpreter, Pythons};
use super::BuildError;
use crate::env::spec::{self, Spec};

/// Version of the build recipe; part of every hash, so a change to the
/// recipe rebuilds environments instead of trusting old ones.
pub const RECIPE_VERSION: u32 = 1;

/// Everything an environment is built from, resolved, and where it lives.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub spec: Spec,
    pub interpreter: Interpreter,
    /// The repository's requirement lines (file and `packages`).
    pub requirements: Vec<String>,
    /// The build backend the repository declares (`[build-system]`).
    pub build_requires: Vec<String>,
    pub setup_commit: String,
    /// Hex SHA-256 of what the environment is built from.
    pub hash: String,
    pub dir: PathBuf,
}

impl Plan {
    /// Resolves `spec` against the interpreters and the repository at
    /// `source` (its requirement files and `pyproject.toml` at
    /// `setup_commit`).
    pub fn resolve(
        spec: &Spec,
        pythons: &Pythons,
        source: &Path,
        setup_commit: &str,
        envs_root: &Path,
    ) -> Result<Plan, BuildError> {
        let interpreter =
            pythons
                .get(&spec.python)
                .cloned()
                .ok_or_else(|| BuildError::NoInterpreter {
                    repo: spec.repo.clone(),
                    version: spec.version.clone(),
                    python: spec.python.clone(),
                    looked: pythons.looked(),
                })?;
        let show = |path: &str| crate::repo::show_file(source, setup_commit, path).ok();
        let mut requirements = Vec::new();
        if spec.requirements {
            let (path, text) = spec
                .requirements_files
                .iter()
                .find_map(|p| show(p).map(|t| (p.clone(), t)))
                .ok_or_else(|| BuildError::NoRequirements {
                    repo: spec.repo.clone(),
                    version: spec.version.clone(),
                    files: spec.requirements_files.clone(),
                    commit: setup_commit.to_string(),
                })?;
            let dir = Path::new(&path).parent().unwrap_or(Path::new(""));
            let include = |name: &str| show(&dir.join(name).to_string_lossy());
            requirements = spec::requirement_lines(&text, &spec.exclude, &include);
        }
        requirements.extend(spec.packages.iter().cloned());
        let build_requires = show("pyproject.toml")
            .and_then(|t| build_requires(&t))
            .unwrap_or_else(|| vec!["setuptools".into()]);
        let mut hasher = Sha256::new();
        let key = serde_json::json!({
            "recipe": RECIPE_VERSION,
            "repo": spec.repo, "version": spec.version,
            "python": interpreter.version, "prefix": interpreter.prefix,
            "requirements": requirements, "build_requires": build_requires,
            "pip_packages": spec.pip_packages, "pre_install": spec.pre_install,
            "install": spec.install, "vars": spec.vars, "setup_commit": setup_commit,
        });
        let mut key = key;
        // Only when there are any: older environments keep their hashes.
        if !spec.downloads.is_empty() {
            key["downloads"] = serde_json::json!(spec.downloads);
        }
        if let Some(pip) = &spec.pip {
            key["pip"] = serde_json::json!(pip);
        }
        hasher.update(key.to_string().as_bytes());
        let hash = hex::encode(hasher.finalize());
        let owner_name = spec.repo.replace('/', "__");
        let dir = envs_root
            .join(owner_name)
            .join(format!("{}-{}", spec.version, &hash[..12]));
        Ok(Plan {
            spec: spec.clone(),
            interpreter,
            requirements,
            build_requires,
            setup_commit: setup_commit.to_string(),
            hash,
            dir,
        })
    }

    /// The build's own files: logs, inputs, the marker, the wheelhouse.
    pub(super) fn meta(&self) -> PathBuf {
        self.dir.join("patchwright")
    }

    /// The marker written last by a complete build.
    pub fn marker(&self) -> PathBuf {
        self.meta().join("env.json")
    }

    pub fn log(&self) -> PathBuf {
        self.meta().join("build.log")
    }

    pub fn is_built(&self) -> bool {
        self.marker().is_file()
    }
}

/// `requires` of `[build-system]` in a pyproject.toml, if declared.
fn build_requires(pyproject: &str) -> Option<Vec<String>> {
    let v: toml::Value = toml::from_str(pyproject).ok()?;
    let reqs = v.get("build-system")?.get("requires")?.as_array()?;
    Some(
        reqs.iter()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_requires_come_from_pyproject() {
        let t = "[build-system]\nrequires = [\"setuptools>=45\", \"setuptools_scm[toml]>=6.2\"]\n";
        assert_eq!(
            build_requires(t),
            Some(vec![
                "setuptools>=45".to_string(),
                "setuptools_scm[toml]>=6.2".into()
            ])
        );
        assert_eq!(build_requires("[tool.black]\nline-length = 88\n"), None);
    }
}
