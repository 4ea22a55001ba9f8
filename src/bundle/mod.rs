//! Bundles: everything a selection of tasks needs on a machine with no
//! network, packed on a connected host (`patchwright pack`) into one
//! directory, and used from there (`--bundle` on `env build`, `batch`,
//! `run`, `sweep`, `eval`).
//!
//! Layout of `BUNDLE/`:
//!
//! - `manifest.json` — [`Manifest`]: what is packed, the sha256 of every
//!   file; written last.
//! - `dataset/<file>` — the task file as given.
//! - `models/<file>.gguf` — the models, sha256-checked against the model
//!   manifest.
//! - `repos/<owner>__<name>.bundle` — a shallow git bundle per repository:
//!   each task's `base_commit` and `environment_setup_commit`, no other
//!   history ([`crate::repo::bundle_commits`]).
//! - `wheels/<owner>__<name>/<version>/` — the wheelhouse of each
//!   environment: what its build installs and what each task's own commit
//!   depends on, as wheels ([`crate::env::build::Plan::download`]).
//! - `python/<version>/` — the interpreters, copied from the host and made
//!   relocatable ([`python`]).
//! - `downloads/<file>` — files a spec's `pre_install` reads from outside
//!   pip (`downloads` in the spec), sha256-checked.
//!
//! A bundle is used in place (read-only is fine): the models directory is
//! `BUNDLE/models`, the repositories `BUNDLE/repos`, packages come only from
//! the environment's wheelhouse, interpreters only from `BUNDLE/python`.
//! Before a command starts, the pieces its tasks need are looked up in the
//! manifest (a missing one is an error naming the task and the piece) and
//! their files hashed (a changed one is an error naming the file).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::dataset::Task;
use crate::env::spec::Specs;

pub mod elf;
pub mod manifest;
pub mod pack;
pub mod python;

pub use manifest::{Bad, Manifest};

pub const MANIFEST: &str = "manifest.json";

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{path} is not a bundle (no {MANIFEST}): make one with `patchwright pack --dataset FILE --repos DIR --out {path}`")]
    NotABundle { path: PathBuf },
    #[error("{path}: bundle format {found} is newer than this patchwright reads ({supported}); use a newer patchwright")]
    Format {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error(
        "the bundle {bundle} lacks what these tasks need:\n{}\nadd it on a connected host: \
         patchwright pack --dataset FILE --repos DIR --out {bundle} (a second pack adds only what is missing)",
        missing.join("\n")
    )]
    Missing {
        bundle: PathBuf,
        missing: Vec<String>,
    },
    #[error(
        "files of the bundle are damaged:\n{}\nrun `patchwright pack --check {bundle}`, and pack again on the connected host to replace them",
        bad.iter().map(|b| format!("  {}: {}", b.path.display(), b.problem)).collect::<Vec<_>>().join("\n")
    )]
    Corrupt { bundle: PathBuf, bad: Vec<Bad> },
    #[error("cannot relocate {path}: {message}")]
    Relocate { path: PathBuf, message: String },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Record(#[from] crate::record::RecordError),
    #[error(transparent)]
    Repo(#[from] crate::repo::RepoError),
    #[error(transparent)]
    Model(#[from] crate::models::ModelError),
    #[error(transparent)]
    Dataset(#[from] crate::dataset::DatasetError),
    #[error(transparent)]
    Build(#[from] crate::env::build::BuildError),
}

pub(crate) fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> BundleError + 'a {
    move |source| BundleError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// An opened bundle.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub root: PathBuf,
    pub manifest: Manifest,
}

impl Bundle {
    pub fn open(root: &Path) -> Result<Bundle, BundleError> {
        let path = root.join(MANIFEST);
        if !path.is_file() {
            return Err(BundleError::NotABundle {
                path: root.to_path_buf(),
            });
        }
        let manifest: Manifest = crate::record::read_json(&path)?;
        if manifest.format > manifest::FORMAT {
            return Err(BundleError::Format {
                path: root.to_path_buf(),
                found: manifest.format,
                supported: manifest::FORMAT,
            });
        }
        let root = std::fs::canonicalize(root).map_err(io("resolve", root))?;
        Ok(Bundle { root, manifest })
    }

    /// The task file packed.
    pub fn dataset(&self) -> PathBuf {
        self.root.join(&self.manifest.dataset)
    }

    pub fn repos_dir(&self) -> PathBuf {
        self.root.join("repos")
    }

    pub fn models_dir(&self) -> PathBuf {
        self.root.join("models")
    }

    pub fn wheels_dir(&self) -> PathBuf {
        self.root.join("wheels")
    }

    /// Checks that the bundle holds what `tasks` need (their repositories
    /// and commits, the wheels of their environments and the interpreters,
    /// and `models`, file names), then that those files are intact.
    pub fn check_for(
        &self,
        tasks: &[Task],
        specs: &Specs,
        models: &[String],
    ) -> Result<(), BundleError> {
        let m = &self.manifest;
        let mut missing = Vec::new();
        let mut parts: BTreeSet<String> = BTreeSet::new();
        let has = |commits: &[String], c: &str| commits.iter().any(|x| x.starts_with(c));
        for t in tasks {
            let id = &t.instance_id;
            match m.repos.get(&t.repo) {
                Some(r) if has(&r.commits, &t.base_commit) => {
                    parts.insert(r.file.clone());
                }
                Some(_) => missing.push(format!("  {id}: commit {} of {}", t.base_commit, t.repo)),
                None => missing.push(format!("  {id}: the repository {}", t.repo)),
            }
            let Ok(spec) = specs.get(&t.repo, &t.version) else {
                // No spec, no environment: the run says so per task.
                continue;
            };
            match m.envs.get(&env_key(&t.repo, &t.version)) {
                Some(e) if has(&e.commits, &t.base_commit) => {
                    parts.insert(e.wheels.clone());
                }
                Some(_) => missing.push(format!(
                    "  {id}: the dependencies of commit {} ({} {})",
                    t.base_commit, t.repo, t.version
                )),
                None => missing.push(format!(
                    "  {id}: the wheels of the environment {} {}",
                    t.repo, t.version
                )),
            }
            for d in &spec.downloads {
                let rel = format!("downloads/{}", d.file);
                if m.files.contains_key(&rel) {
                    parts.insert(rel);
                } else {
                    missing.push(format!("  {id}: the file {} ({})", d.file, d.url));
                }
            }
            match m.pythons.get(&spec.python) {
                Some(p) => {
                    parts.insert(p.dir.clone());
                }
                None => missing.push(format!("  {id}: Python {}", spec.python)),
            }
        }
        for file in models {
            if m.models.contains_key(file) {
                parts.insert(format!("models/{file}"));
            } else {
                missing.push(format!("  the model {file}"));
            }
        }
        if !missing.is_empty() {
            missing.dedup();
            return Err(BundleError::Missing {
                bundle: self.root.clone(),
                missing,
            });
        }
        parts.insert(m.dataset.clone());
        let parts: Vec<String> = parts.into_iter().collect();
        let bad = m.verify(&self.root, &parts);
        if !bad.is_empty() {
            return Err(BundleError::Corrupt {
                bundle: self.root.clone(),
                bad,
            });
        }
        Ok(())
    }
}

/// The manifest's key of an environment.
pub fn env_key(repo: &str, version: &str) -> String {
    format!("{repo} {version}")
}

/// The interpreter prefixes under a bundle's `python/` (complete copies
/// only).
pub fn python_prefixes(root: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join("python"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| python::is_copied(p))
        .collect();
    v.sort();
    v
}
