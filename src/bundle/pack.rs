//! `patchwright pack`: writing a bundle on a connected host (see the
//! parent module for the layout). Resumable: each piece is skipped when
//! it is already there and intact (a model or git bundle by its content,
//! an interpreter or wheelhouse by its completion marker), so a second
//! call downloads nothing; a file the manifest knows that has changed is
//! removed first, with its piece's marker, and packed again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::manifest::{
    self, hash_file, EnvEntry, FileEntry, Manifest, ModelEntry, PythonEntry, RepoEntry,
};
use super::{env_key, io, python, Bad, BundleError, MANIFEST};
use crate::dataset::Task;
use crate::env::build::{Index, Plan, Pythons};
use crate::env::spec::Specs;
use crate::repo::Repos;

/// Where a wheelhouse keeps its completion markers and download logs.
const MARKERS: &str = ".patchwright";

/// What to pack.
pub struct PackOptions<'a> {
    /// The task file (copied as it is).
    pub dataset: &'a Path,
    /// The selected tasks of it.
    pub tasks: &'a [Task],
    pub repos: &'a Repos,
    /// `--model` values: manifest names (fetched when not yet) or files.
    pub models: &'a [String],
    /// Where manifest models are looked up and fetched to.
    pub models_dir: &'a Path,
    pub specs: &'a Specs,
    /// The host's interpreters.
    pub pythons: &'a Pythons,
    /// pip's cache for the downloads.
    pub pip_cache: &'a Path,
    /// The host's sandbox, which the downloads run in.
    pub host: &'a patchwright_sandbox::Host,
}

/// What a pack did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PackReport {
    pub bundle: PathBuf,
    /// Pieces added by this call (empty when the bundle was complete).
    pub added: Vec<String>,
    /// Pieces already there.
    pub kept: usize,
    /// Damaged files found and packed again.
    pub replaced: Vec<Bad>,
    /// Pieces that could not be packed, and why.
    pub errors: Vec<String>,
    /// Bytes by part.
    pub sizes: BTreeMap<String, u64>,
    pub files: usize,
    pub seconds: f64,
}

/// Packs `opts` into `out`; `progress` is told about each piece.
pub fn pack(
    opts: &PackOptions,
    out: &Path,
    progress: &dyn Fn(&str),
) -> Result<PackReport, BundleError> {
    let started = std::time::Instant::now();
    std::fs::create_dir_all(out).map_err(io("create", out))?;
    let out = std::fs::canonicalize(out).map_err(io("resolve", out))?;
    let mut report = PackReport {
        bundle: out.clone(),
        ..PackReport::default()
    };
    let old: Option<Manifest> = crate::record::read_json_if_exists(&out.join(MANIFEST))?;
    if let Some(old) = &old {
        progress("checking what is already packed");
        for bad in old.verify(&out, &[]) {
            forget(&out, &bad.path)?;
            report.replaced.push(bad);
        }
    }
    let mut m = Manifest {
        format: manifest::FORMAT,
        packed_by: format!("patchwright {}", env!("CARGO_PKG_VERSION")),
        packed_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        tasks: opts.tasks.iter().map(|t| t.instance_id.clone()).collect(),
        ..Manifest::default()
    };

    // The task file.
    let name = opts
        .dataset
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tasks.json".into());
    m.dataset = format!("dataset/{name}");
    let dest = out.join(&m.dataset);
    let same = std::fs::read(&dest).ok()
        == Some(std::fs::read(opts.dataset).map_err(io("read", opts.dataset))?);
    if same {
        report.kept += 1;
    } else {
        copy_file(opts.dataset, &dest)?;
        report.added.push(format!("dataset {}", m.dataset));
    }

    // Models.
    for spec in opts.models {
        progress(&format!("model {spec}"));
        match pack_model(opts.models_dir, spec, &out, progress) {
            Ok((file, entry, added)) => {
                if added {
                    report.added.push(format!("model {file}"));
                } else {
                    report.kept += 1;
                }
                m.models.insert(file, entry);
            }
            Err(e) => report.errors.push(format!("model {spec}: {e}")),
        }
    }

    // Repositories: the commits each needs.
    let mut commits: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for t in opts.tasks {
        let set = commits.entry(t.repo.as_str()).or_default();
        set.insert(t.base_commit.clone());
        if !t.environment_setup_commit.is_empty() {
            set.insert(t.environment_setup_commit.clone());
        }
    }
    for (repo, wanted) in &commits {
        progress(&format!("repository {repo}"));
        match pack_repo(opts.repos, repo, wanted, &out) {
            Ok((entry, added)) => {
                if added {
                    report.added.push(format!(
                        "repository {repo} ({} commits)",
                        entry.commits.len()
                    ));
                } else {
                    report.kept += 1;
                }
                m.repos.insert(repo.to_string(), entry);
            }
            Err(e) => report.errors.push(format!("repository {repo}: {e}")),
        }
    }

    // Environments: interpreters and wheels.
    let scratch = tempfile::Builder::new()
        .prefix("patchwright-pack-")
        .tempdir()
        .map_err(io("create a temporary directory in", &std::env::temp_dir()))?;
    let mut by_env: BTreeMap<(String, String), Vec<&Task>> = BTreeMap::new();
    for t in opts.tasks {
        by_env
            .entry((t.repo.clone(), t.version.clone()))
            .or_default()
            .push(t);
    }
    for ((repo, version), tasks) in &by_env {
        let Ok(spec) = opts.specs.get(repo, version) else {
            // No spec: no environment to pack; the offline run says so.
            continue;
        };
        progress(&format!("environment {repo} {version}"));
        let result = pack_env(
            opts,
            &spec,
            tasks,
            &out,
            scratch.path(),
            &mut report,
            progress,
        );
        match result {
            Ok((py, entry)) => {
                m.pythons.insert(spec.python.clone(), py);
                m.envs.insert(env_key(repo, version), entry);
            }
            Err(e) => report
                .errors
                .push(format!("environment {repo} {version}: {e}")),
        }
    }

    // What earlier packs added for other tasks stays in the manifest while
    // its files do (a bundle can be completed with a second task file).
    if let Some(old) = old {
        for (k, v) in old.repos {
            if out.join(&v.file).is_file() {
                m.repos.entry(k).or_insert(v);
            }
        }
        for (k, v) in old.models {
            if out.join("models").join(&k).is_file() {
                m.models.entry(k).or_insert(v);
            }
        }
        for (k, v) in old.pythons {
            if python::is_copied(&out.join(&v.dir)) {
                m.pythons.entry(k).or_insert(v);
            }
        }
        for (k, v) in old.envs {
            let held = |c: &String| {
                out.join(&v.wheels)
                    .join(MARKERS)
                    .join(format!("commit-{c}"))
                    .is_file()
            };
            let commits: Vec<String> = v.commits.iter().filter(|c| held(c)).cloned().collect();
            let e = m.envs.entry(k).or_insert_with(|| EnvEntry {
                commits: Vec::new(),
                ..v.clone()
            });
            for c in commits {
                if !e.commits.contains(&c) {
                    e.commits.push(c);
                }
            }
        }
        m.envs.retain(|_, e| !e.commits.is_empty());
        for t in old.tasks {
            if !m.tasks.contains(&t) {
                m.tasks.push(t);
            }
        }
    }

    // The manifest, last.
    progress("hashing");
    for rel in manifest::walk(&out, &|rel| {
        rel == MANIFEST
            || rel.ends_with(".part")
            || rel.split('/').any(|c| c.starts_with('.') && c != MARKERS)
    })? {
        let (sha256, bytes) = hash_file(&out.join(&rel)).map_err(io("read", &out.join(&rel)))?;
        m.files.insert(rel, FileEntry { sha256, bytes });
    }
    crate::record::write_json(&out.join(MANIFEST), &m)?;
    report.sizes = m.sizes();
    report.files = m.files.len();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Removes a damaged file and the completion marker of the piece it
/// belongs to, so the piece is packed again.
fn forget(out: &Path, path: &Path) -> Result<(), BundleError> {
    if path.is_file() {
        std::fs::remove_file(path).map_err(io("remove", path))?;
    }
    let rel = path.strip_prefix(out).unwrap_or(path);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let marker_dir = match parts.first().map(String::as_str) {
        Some("wheels") if parts.len() > 3 => out
            .join(&parts[0])
            .join(&parts[1])
            .join(&parts[2])
            .join(MARKERS),
        Some("python") if parts.len() > 2 => {
            let m = out.join(&parts[0]).join(&parts[1]).join(python::MARKER);
            if m.is_file() {
                std::fs::remove_file(&m).map_err(io("remove", &m))?;
            }
            return Ok(());
        }
        _ => return Ok(()),
    };
    if marker_dir.is_dir() {
        for e in std::fs::read_dir(&marker_dir)
            .map_err(io("read", &marker_dir))?
            .flatten()
        {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("complete-") || n.starts_with("commit-") {
                std::fs::remove_file(e.path()).map_err(io("remove", &e.path()))?;
            }
        }
    }
    Ok(())
}

fn copy_file(from: &Path, to: &Path) -> Result<(), BundleError> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(io("create", parent))?;
    }
    let tmp = to.with_extension("part");
    std::fs::copy(from, &tmp).map_err(io("copy", from))?;
    std::fs::rename(&tmp, to).map_err(io("rename into place", to))?;
    Ok(())
}

/// A model into `out/models/`: a manifest name (fetched first when it is
/// not in the models directory `models_dir`) or a GGUF file. Returns the file name, its
/// entry, and whether it was added now.
fn pack_model(
    models_dir: &Path,
    spec: &str,
    out: &Path,
    progress: &dyn Fn(&str),
) -> Result<(String, ModelEntry, bool), BundleError> {
    let known = crate::models::manifest()?
        .into_iter()
        .find(|k| k.name == spec);
    let (src, name, want) = match &known {
        Some(k) => {
            let path = models_dir.join(&k.file);
            let path = if path.is_file() {
                path
            } else {
                crate::models::fetch(models_dir, &k.name, progress)?
            };
            (path, Some(k.name.clone()), Some(k.sha256.clone()))
        }
        None => (PathBuf::from(spec), None, None),
    };
    let file = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| crate::models::ModelError::Unknown {
            name: spec.into(),
            known: String::new(),
        })?;
    let dest = out.join("models").join(&file);
    let digest = |p: &Path| hash_file(p).map(|(s, _)| s).map_err(io("read", p));
    if dest.is_file() {
        let have = digest(&dest)?;
        if want.as_ref().is_none_or(|w| *w == have) && (want.is_some() || have == digest(&src)?) {
            return Ok((file, ModelEntry { name, sha256: have }, false));
        }
    }
    copy_file(&src, &dest)?;
    let have = digest(&dest)?;
    if let Some(w) = &want {
        if *w != have {
            std::fs::remove_file(&dest).map_err(io("remove", &dest))?;
            return Err(BundleError::Corrupt {
                bundle: out.to_path_buf(),
                bad: vec![Bad {
                    path: src,
                    problem: format!("sha256 {have}, the model manifest says {w}: fetch it again (`patchwright models fetch {spec}`)"),
                }],
            });
        }
    }
    Ok((file, ModelEntry { name, sha256: have }, true))
}

/// A repository's git bundle with `wanted` commits (and any it held
/// before). Returns its entry and whether it was written now.
fn pack_repo(
    repos: &Repos,
    repo: &str,
    wanted: &BTreeSet<String>,
    out: &Path,
) -> Result<(RepoEntry, bool), BundleError> {
    let name = crate::repo::mirror_name(repo)
        .ok_or_else(|| crate::repo::RepoError::BadName(repo.into()))?;
    let file = format!("repos/{name}.bundle");
    let dest = out.join(&file);
    let held = if dest.is_file() {
        crate::repo::bundle_heads(&dest).unwrap_or_default()
    } else {
        Vec::new()
    };
    let covered = |c: &String| held.iter().any(|h| h.starts_with(c.as_str()));
    if !held.is_empty() && wanted.iter().all(covered) {
        return Ok((
            RepoEntry {
                file,
                commits: held,
            },
            false,
        ));
    }
    let source = repos.locate(repo)?;
    let mut all: Vec<String> = wanted.iter().cloned().collect();
    all.extend(held);
    let commits = crate::repo::bundle_commits(&source, &all, &dest)?;
    Ok((RepoEntry { file, commits }, true))
}

/// An environment's interpreter and wheelhouse, and its tasks' own
/// commits' dependencies.
fn pack_env(
    opts: &PackOptions,
    spec: &crate::env::spec::Spec,
    tasks: &[&Task],
    out: &Path,
    scratch: &Path,
    report: &mut PackReport,
    progress: &dyn Fn(&str),
) -> Result<(PythonEntry, EnvEntry), BundleError> {
    let repo = &spec.repo;
    let source = opts.repos.locate(repo)?;
    let first = tasks.first().copied();
    let setup = first
        .map(|t| {
            if t.environment_setup_commit.is_empty() {
                t.base_commit.clone()
            } else {
                t.environment_setup_commit.clone()
            }
        })
        .unwrap_or_default();
    let plan = Plan::resolve(spec, opts.pythons, &source, &setup, &scratch.join("envs"))?;

    let py_dir = format!("python/{}", plan.interpreter.version);
    let py_dest = out.join(&py_dir);
    if python::is_copied(&py_dest) {
        report.kept += 1;
    } else {
        progress(&format!(
            "Python {} from {}",
            plan.interpreter.version,
            plan.interpreter.prefix.display()
        ));
        python::copy(&plan.interpreter, &py_dest)?;
        report
            .added
            .push(format!("Python {}", plan.interpreter.version));
    }

    let wheels = Index::bundle_dir(&out.join("wheels"), repo, &spec.version);
    let rel = wheels
        .strip_prefix(out)
        .unwrap_or(&wheels)
        .to_string_lossy()
        .into_owned();
    let markers = wheels.join(MARKERS);
    let complete = markers.join(format!("complete-{}", &plan.hash[..12]));
    if complete.is_file() {
        report.kept += 1;
    } else {
        progress(&format!(
            "wheels of {repo} {} (build steps downloaded and installed offline)",
            spec.version
        ));
        plan.download(
            &source,
            &wheels,
            &out.join("downloads"),
            scratch,
            opts.pip_cache,
            opts.host,
        )?;
        std::fs::create_dir_all(&markers).map_err(io("create", &markers))?;
        std::fs::write(&complete, &plan.hash).map_err(io("write", &complete))?;
        report
            .added
            .push(format!("wheels of {repo} {}", spec.version));
    }
    let mut commits = Vec::new();
    for t in tasks {
        let marker = markers.join(format!("commit-{}", t.base_commit));
        if !marker.is_file() {
            progress(&format!("dependencies of {}", t.instance_id));
            let downloaded = plan.download_commit(
                &source,
                &t.base_commit,
                &wheels,
                &out.join("downloads"),
                scratch,
                opts.pip_cache,
                opts.host,
            )?;
            std::fs::write(
                &marker,
                if downloaded {
                    "downloaded"
                } else {
                    "as the setup commit"
                },
            )
            .map_err(io("write", &marker))?;
            if downloaded {
                report
                    .added
                    .push(format!("dependencies of {}", t.instance_id));
            }
        } else {
            report.kept += 1;
        }
        commits.push(t.base_commit.clone());
    }
    Ok((
        PythonEntry {
            version: plan.interpreter.version.clone(),
            dir: py_dir,
        },
        EnvEntry {
            repo: repo.clone(),
            version: spec.version.clone(),
            python: spec.python.clone(),
            wheels: rel,
            commits,
        },
    ))
}
