//! Building environments: one virtualenv per (repository, version, spec
//! hash), made from an interpreter found on the machine, filled from the
//! package index (or a wheel directory), built inside the sandbox, and
//! reused by every task and sweep point that needs it.
//!
//! Build recipe, all in one sandboxed script with the network kept:
//! `python -m venv`; the repository's requirement file and `packages`;
//! the build backend the repository declares; `pip_packages` (pins win);
//! then, in a checkout at the environment setup commit, `pre_install` and
//! `install` (which pulls in the repository's own dependencies), and the
//! repository itself uninstalled again: each task installs its own commit
//! into a [`Layer`] at evaluation time. The directory is complete when
//! `patchwright/env.json` exists; it is written last.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use patchwright_sandbox as sandbox;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::spec::Spec;
use super::Environment;
use crate::repo::{RepoError, Workspace};

/// Version of the build recipe; part of every hash, so a change to the
/// recipe rebuilds environments instead of trusting old ones.
pub const RECIPE_VERSION: u32 = 1;
/// A cold build of the largest environments (xarray's, Sphinx's) downloads
/// and unpacks several hundred MB and may compile sdists on two cores.
pub const BUILD_TIMEOUT_S: u64 = 3600;
/// pip holds whole wheels in memory while installing; scipy/pandas fit.
pub const BUILD_MEMORY_BYTES: u64 = 8 << 30;
/// pip unpacks and builds in /tmp (a tmpfs in the sandbox).
pub const BUILD_TMP_BYTES: u64 = 4 << 30;
/// The build log is kept whole (head and tail) up to this size.
pub const BUILD_OUTPUT_BYTES: usize = 8 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "{repo} {version}: no Python {python} interpreter found (looked in {looked}); install it \
         with pyenv or pass its prefix with --python"
    )]
    NoInterpreter {
        repo: String,
        version: String,
        python: String,
        looked: String,
    },
    #[error(
        "{repo} {version}: the system packages {missing:?} are not installed (apt-get install \
         -y {})", missing.join(" ")
    )]
    MissingSystem {
        repo: String,
        version: String,
        missing: Vec<String>,
    },
    #[error("{repo} {version}: none of the requirement files {files:?} exists at {commit}")]
    NoRequirements {
        repo: String,
        version: String,
        files: Vec<String>,
        commit: String,
    },
    #[error("{repo} {version}: the build failed ({reason}); log: {log}")]
    Failed {
        repo: String,
        version: String,
        reason: String,
        log: PathBuf,
    },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Write(#[from] crate::record::RecordError),
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BuildError + 'a {
    move |source| BuildError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

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

    fn looked(&self) -> String {
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

/// Where packages come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Index {
    /// The package index pip is configured for (network kept during builds).
    #[default]
    Online,
    /// Only this directory of wheels and sdists (`pip --no-index
    /// --find-links`), with the network off.
    Wheels(PathBuf),
}

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
            requirements = super::spec::requirement_lines(&text, &spec.exclude, &include);
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

    fn meta(&self) -> PathBuf {
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

    /// The built environment, building it first if needed. `scratch` holds
    /// the checkout of the setup commit while building.
    pub fn ensure(
        &self,
        source: &Path,
        index: &Index,
        scratch: &Path,
    ) -> Result<Environment, BuildError> {
        let missing: Vec<String> = self
            .spec
            .system
            .iter()
            .filter(|p| !dpkg_installed(p))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(BuildError::MissingSystem {
                repo: self.spec.repo.clone(),
                version: self.spec.version.clone(),
                missing,
            });
        }
        if !self.is_built() {
            self.build(source, index, scratch)?;
        }
        Environment::open(&self.dir).map_err(|e| self.failed(e.to_string()))
    }

    fn failed(&self, reason: String) -> BuildError {
        BuildError::Failed {
            repo: self.spec.repo.clone(),
            version: self.spec.version.clone(),
            reason,
            log: self.log(),
        }
    }

    fn build(&self, source: &Path, index: &Index, scratch: &Path) -> Result<(), BuildError> {
        let parent = self.dir.parent().unwrap_or(&self.dir).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(io("create", &parent))?;
        // One builder per environment across processes; a second waits.
        let lock_path = parent.join(format!(".{}.lock", file_name(&self.dir)));
        let lock = std::fs::File::create(&lock_path).map_err(io("create", &lock_path))?;
        lock.lock().map_err(io("lock", &lock_path))?;
        if self.is_built() {
            return Ok(());
        }
        if self.dir.exists() {
            std::fs::remove_dir_all(&self.dir).map_err(io("remove the incomplete", &self.dir))?;
        }
        let meta = self.meta();
        std::fs::create_dir_all(&meta).map_err(io("create", &meta))?;
        let write = |name: &str, text: String| {
            let p = meta.join(name);
            std::fs::write(&p, text).map_err(io("write", &p))
        };
        write("requirements.txt", lines(&self.requirements))?;
        let mut build_requires = self.build_requires.clone();
        build_requires.push("wheel".into());
        write("build-requires.txt", lines(&build_requires))?;
        write("pip-packages.txt", lines(&self.spec.pip_packages))?;
        write("find_repo_dists.py", FIND_REPO_DISTS.to_string())?;
        std::fs::create_dir_all(scratch).map_err(io("create", scratch))?;
        let checkout_dir = scratch.join(format!("checkout-{}", &self.hash[..12]));
        let checkout = Workspace::create(source, &self.setup_commit, &checkout_dir)?;
        let policy = self.build_policy(checkout.path(), index)?;

        let script = self.script();
        write("build.sh", script.clone())?;
        tracing::info!(repo = %self.spec.repo, version = %self.spec.version, dir = %self.dir.display(), "building environment");
        let outcome = sandbox::run(&policy, &["bash".into(), "-c".into(), script]);
        let _ = checkout.remove();
        let outcome = outcome?;
        write("build.log", outcome.output.clone())?;
        if outcome.timed_out {
            return Err(self.failed(format!("timed out after {BUILD_TIMEOUT_S} s")));
        }
        if !outcome.success() {
            let step = outcome
                .output
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix(">>>>> step: "))
                .unwrap_or("?")
                .to_string();
            let mut reason = format!(
                "step `{step}` exited with status {}",
                outcome.cli_exit_code()
            );
            if let Some(why) = pip_diagnosis(&outcome.output) {
                reason += &format!(": {why}");
            }
            return Err(self.failed(reason));
        }
        let record = serde_json::json!({
            "plan": self,
            "built_at": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            "build_seconds": outcome.wall_time_secs,
        });
        crate::record::write_json(&self.marker(), &record)?;
        drop(lock);
        Ok(())
    }

    /// The sandbox policy of a build step in `worktree`: the environment
    /// writable, the package index reachable (or only the wheel directory),
    /// pip's cache shared by all environments.
    fn build_policy(&self, worktree: &Path, index: &Index) -> Result<sandbox::Policy, BuildError> {
        let cache = self
            .dir
            .parent()
            .and_then(Path::parent)
            .map(|r| r.join(".pip-cache"));

        let mut policy = sandbox::Policy::for_worktree(worktree)?;
        policy.extra_ro_binds.push(self.interpreter.prefix.clone());
        policy.writable.push(self.dir.clone());
        // pip's options as its environment variables: they reach every pip
        // the build runs, including the one inside `install`.
        for (k, v) in [
            ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
            ("PIP_NO_INPUT", "1"),
            ("PIP_PROGRESS_BAR", "off"),
        ] {
            policy.env.insert(k.into(), v.into());
        }
        match index {
            Index::Online => policy.allow_network(),
            Index::Wheels(dir) => {
                policy.extra_ro_binds.push(dir.clone());
                policy.env.insert("PIP_NO_INDEX".into(), "1".into());
                policy
                    .env
                    .insert("PIP_FIND_LINKS".into(), dir.display().to_string());
            }
        }
        if let Some(cache) = &cache {
            std::fs::create_dir_all(cache).map_err(io("create", cache))?;
            policy.writable.push(cache.clone());
            policy
                .env
                .insert("PIP_CACHE_DIR".into(), cache.display().to_string());
        }
        let env_bin = self.dir.join("bin");
        policy.env.insert(
            "PATH".into(),
            format!("{}:{}", env_bin.display(), sandbox::DEFAULT_PATH),
        );
        policy
            .env
            .insert("VIRTUAL_ENV".into(), self.dir.display().to_string());
        for (k, v) in &self.spec.vars {
            policy.env.insert(k.clone(), v.clone());
        }
        git_safe(&mut policy);
        policy.limits.timeout_ms = BUILD_TIMEOUT_S * 1000;
        policy.limits.memory_bytes = BUILD_MEMORY_BYTES;
        policy.limits.tmp_bytes = BUILD_TMP_BYTES;
        policy.limits.output_bytes = BUILD_OUTPUT_BYTES;

        Ok(policy)
    }

    /// Where the dependencies of task commits whose own requirements differ
    /// from the setup commit's are kept, as wheels and sdists; the layer's
    /// install finds them there with the network off.
    pub fn wheelhouse(&self) -> PathBuf {
        self.meta().join("wheels")
    }

    /// Downloads into [`Plan::wheelhouse`] what the repository at `commit`
    /// depends on, when its dependency files differ from the setup
    /// commit's (SWE-bench installs each task's commit with its
    /// dependencies; without the network this is done ahead). Once per
    /// commit.
    pub fn prepare_commit(
        &self,
        source: &Path,
        commit: &str,
        index: &Index,
        scratch: &Path,
    ) -> Result<(), BuildError> {
        let done = self.wheelhouse().join(format!(".done-{commit}"));
        if done.exists() || commit == self.setup_commit {
            return Ok(());
        }
        let changed =
            crate::repo::paths_differ(source, &self.setup_commit, commit, DEPENDENCY_FILES)?;
        let Some(download) = download_command(&self.spec.install) else {
            return Ok(());
        };
        if changed {
            let checkout_dir = scratch.join(format!("deps-{}", &commit[..commit.len().min(12)]));
            let checkout = Workspace::create(source, commit, &checkout_dir)?;
            let mut policy = self.build_policy(checkout.path(), index)?;
            // The environment is complete: read-only from here on.
            policy.writable.retain(|p| p != &self.dir);
            policy.extra_ro_binds.push(self.dir.clone());
            let house = self.wheelhouse();
            std::fs::create_dir_all(&house).map_err(io("create", &house))?;
            policy.writable.push(house.clone());
            let mut script = String::from("set -euo pipefail\n");
            for cmd in &self.spec.pre_install {
                script += &format!("{cmd}\n");
            }
            script += &format!("{download} --dest {}\n", quote(&house.to_string_lossy()));
            tracing::info!(repo = %self.spec.repo, commit, "downloading the dependencies of a task commit");
            let outcome = sandbox::run(&policy, &["bash".into(), "-c".into(), script]);
            let _ = checkout.remove();
            let outcome = outcome?;
            let log = house.join(format!("download-{commit}.log"));
            std::fs::write(&log, &outcome.output).map_err(io("write", &log))?;
            if !outcome.success() {
                return Err(BuildError::Failed {
                    repo: self.spec.repo.clone(),
                    version: self.spec.version.clone(),
                    reason: format!(
                        "downloading the dependencies of {commit} failed{}",
                        pip_diagnosis(&outcome.output)
                            .map(|d| format!(": {d}"))
                            .unwrap_or_default()
                    ),
                    log,
                });
            }
        }
        let parent = done.parent().unwrap_or(&done).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(io("create", &parent))?;
        std::fs::write(&done, "").map_err(io("write", &done))?;
        Ok(())
    }

    /// The build script (run in the checkout, inside the sandbox).
    fn script(&self) -> String {
        let env = quote(&self.dir.to_string_lossy());
        let meta = format!("{env}/patchwright");
        let mut s = String::from("set -euo pipefail\nstep() { echo; echo \">>>>> step: $*\"; }\n");
        s += &format!(
            "step venv\n{} -m venv {env}\n",
            quote(&self.interpreter.executable.to_string_lossy())
        );
        s += &format!("pip() {{ {env}/bin/python -m pip \"$@\"; }}\n");
        if !self.requirements.is_empty() {
            s += &format!("step requirements\npip install -r {meta}/requirements.txt\n");
        }
        s += &format!("step build-requires\npip install -r {meta}/build-requires.txt\n");
        if !self.spec.pip_packages.is_empty() {
            s += &format!("step pip_packages\npip install -r {meta}/pip-packages.txt\n");
        }
        for cmd in &self.spec.pre_install {
            s += &format!("step pre_install: {}\n{cmd}\n", one_line(cmd));
        }
        let install = with_pip_flags(&self.spec.install, "--no-build-isolation");
        s += &format!("step install: {}\n{install}\n", one_line(&install));
        s += &format!(
            "step uninstall the repository\nfor d in $({env}/bin/python {meta}/find_repo_dists.py \"$PWD\"); do pip uninstall -y \"$d\"; done\n"
        );
        s += &format!("step freeze\npip freeze > {meta}/freeze.txt\ncat {meta}/freeze.txt\n");
        s += "step check\npip check || echo 'pip check reported conflicts (kept: the pins are the spec'\"'\"'s)'\n";
        s
    }
}

/// Lists the distributions installed from the directory given as argv[1]
/// (editable or not), for the build to uninstall again.
const FIND_REPO_DISTS: &str = r#"import json, os, sys
root = os.path.realpath(sys.argv[1])
inside = lambda p: p == root or p.startswith(root + os.sep)
names = set()
try:
    from importlib import metadata
    for d in metadata.distributions():
        try:
            url = json.loads(d.read_text("direct_url.json") or "{}").get("url", "")
        except ValueError:
            url = ""
        loc = os.path.realpath(str(getattr(d, "_path", "")))
        if (url.startswith("file://") and inside(os.path.realpath(url[7:]))) or inside(loc):
            names.add(d.metadata["Name"])
except ImportError:
    import pkg_resources
    for d in pkg_resources.working_set:
        if d.location and inside(os.path.realpath(d.location)):
            names.add(d.project_name)
print("\n".join(sorted(names)))
"#;

/// Files whose change between two commits may change what the repository
/// depends on.
pub const DEPENDENCY_FILES: &[&str] = &[
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "requirements.txt",
];

/// The spec's install command as a `pip download` of the same target
/// (`python -m pip install -e .[test]` → `python -m pip download .[test]`),
/// or `None` when it is not a pip install.
pub fn download_command(install: &str) -> Option<String> {
    let (head, rest) = install.split_once("pip install")?;
    let args: Vec<&str> = rest
        .split_whitespace()
        .filter(|a| *a != "-e" && *a != "--editable")
        .collect();
    Some(format!("{head}pip download {}", args.join(" ")))
}

/// `cmd` with `flags` inserted after each `pip install`; other commands
/// (`python setup.py develop`) unchanged.
pub fn with_pip_flags(cmd: &str, flags: &str) -> String {
    cmd.replace("pip install", &format!("pip install {flags}"))
}

/// Lets git inside the sandbox read repositories owned by another uid.
pub fn git_safe(policy: &mut sandbox::Policy) {
    for (k, v) in [
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "safe.directory"),
        ("GIT_CONFIG_VALUE_0", "*"),
    ] {
        policy.env.insert(k.into(), v.into());
    }
}

/// pip's own words for the commonest build failure: a requirement no
/// index (or wheel directory) has for this interpreter.
fn pip_diagnosis(log: &str) -> Option<String> {
    let missing: Vec<&str> = log
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("ERROR: No matching distribution found for ")
        })
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "no distribution of {} for this Python",
            missing.join(", ")
        ));
    }
    log.lines()
        .rev()
        .find(|l| l.trim_start().starts_with("ERROR:") || l.starts_with("error:"))
        .map(|l| l.trim().to_string())
}

/// Whether the Debian package `name` is installed (`dpkg-query`).
fn dpkg_installed(name: &str) -> bool {
    std::process::Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .output()
        .is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).ends_with("installed")
        })
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

fn lines(v: &[String]) -> String {
    v.iter().map(|l| format!("{l}\n")).collect()
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Single-quotes `s` for bash.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A task's own layer over a built environment: a virtualenv of the same
/// interpreter whose site-packages chains to the environment's (through a
/// `.pth` line), so the task can install its repository commit into it
/// while the environment stays read-only and shared. Console scripts of
/// the environment are re-pointed at the layer's interpreter. Made with
/// plain file writes: nothing runs.
pub struct Layer {
    pub dir: PathBuf,
}

impl Layer {
    pub fn create(env: &Environment, dir: &Path) -> Result<Layer, BuildError> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io("remove", dir))?;
        }
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).map_err(io("create", &bin))?;
        let cfg = env.venv.join("pyvenv.cfg");
        std::fs::copy(&cfg, dir.join("pyvenv.cfg")).map_err(io("copy", &cfg))?;
        let env_python = env.venv.join("bin/python");
        let target = std::fs::canonicalize(&env_python).map_err(io("resolve", &env_python))?;
        let lib = env.venv.join("lib");
        let site_name = std::fs::read_dir(&lib)
            .map_err(io("read", &lib))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("python"))
            .ok_or_else(|| BuildError::Io {
                action: "find lib/pythonX.Y in",
                path: lib.clone(),
                source: std::io::ErrorKind::NotFound.into(),
            })?;
        for name in ["python", "python3", site_name.as_str()] {
            let link = bin.join(name);
            std::os::unix::fs::symlink(&target, &link).map_err(io("link", &link))?;
        }
        let site = dir.join("lib").join(&site_name).join("site-packages");
        std::fs::create_dir_all(&site).map_err(io("create", &site))?;
        let base_site = lib.join(&site_name).join("site-packages");
        let pth = site.join("_patchwright_env.pth");
        std::fs::write(
            &pth,
            format!(
                "import site; site.addsitedir({:?})\n",
                base_site.to_string_lossy()
            ),
        )
        .map_err(io("write", &pth))?;
        let shebang = format!("#!{}", env.venv.join("bin").display());
        let layer_python = format!("#!{}", bin.join("python").display());
        for e in std::fs::read_dir(env.venv.join("bin"))
            .map_err(io("read", &env.venv))?
            .filter_map(|e| e.ok())
        {
            let dest = bin.join(e.file_name());
            if dest.exists() || !e.path().is_file() {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            let Some((first, rest)) = text.split_once('\n') else {
                continue;
            };
            if let Some(tail) = first.strip_prefix(&shebang) {
                if tail.starts_with("/python") {
                    std::fs::write(&dest, format!("{layer_python}\n{rest}"))
                        .map_err(io("write", &dest))?;
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755))
                        .map_err(io("chmod", &dest))?;
                }
            }
        }
        Ok(Layer {
            dir: dir.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_flags_go_after_every_pip_install() {
        let cases = [
            (
                "python -m pip install -e .",
                "python -m pip install --no-deps -e .",
            ),
            (
                "python -m pip install -e .[test]",
                "python -m pip install --no-deps -e .[test]",
            ),
            ("python setup.py develop", "python setup.py develop"),
            (
                "pip install -U x && python -m pip install .",
                "pip install --no-deps -U x && python -m pip install --no-deps .",
            ),
        ];
        for (cmd, want) in cases {
            assert_eq!(with_pip_flags(cmd, "--no-deps"), want);
        }
    }

    #[test]
    fn install_commands_become_downloads() {
        let cases = [
            (
                "python -m pip install -e .",
                Some("python -m pip download ."),
            ),
            (
                "python -m pip install -e .[test]",
                Some("python -m pip download .[test]"),
            ),
            (
                "python -m pip install -v --no-use-pep517 --no-build-isolation -e .",
                Some("python -m pip download -v --no-use-pep517 --no-build-isolation ."),
            ),
            ("python setup.py develop", None),
        ];
        for (install, want) in cases {
            assert_eq!(download_command(install).as_deref(), want, "{install}");
        }
    }

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

    #[test]
    fn pip_failures_are_named() {
        let log = "Collecting numpy==1.2\n  ERROR: Could not find a version that satisfies the requirement numpy==1.2\nERROR: No matching distribution found for numpy==1.2\n";
        assert_eq!(
            pip_diagnosis(log).as_deref(),
            Some("no distribution of numpy==1.2 for this Python")
        );
        assert_eq!(
            pip_diagnosis("x\nerror: command 'gcc' failed\n").as_deref(),
            Some("error: command 'gcc' failed")
        );
        assert_eq!(pip_diagnosis("all fine\n"), None);
    }

    #[test]
    fn system_packages_are_checked_with_dpkg() {
        assert!(dpkg_installed("bash"));
        assert!(!dpkg_installed("no-such-package-patchwright"));
    }

    #[test]
    fn a_layer_chains_to_its_environment_and_repoints_scripts(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let env_dir = dir.path().join("env");
        std::fs::create_dir_all(env_dir.join("bin"))?;
        std::fs::create_dir_all(env_dir.join("lib/python3.9/site-packages"))?;
        let interp = dir.path().join("python3.9");
        std::fs::write(&interp, "")?;
        std::os::unix::fs::symlink(&interp, env_dir.join("bin/python"))?;
        std::fs::write(
            env_dir.join("pyvenv.cfg"),
            format!("home = {}\nversion = 3.9.18\n", dir.path().display()),
        )?;
        let env_bin = env_dir.join("bin");
        std::fs::write(
            env_bin.join("pytest"),
            format!("#!{}/python\nimport pytest\n", env_bin.display()),
        )?;
        std::fs::write(env_bin.join("activate"), "# not a script of this python\n")?;
        let env = Environment::open(&env_dir)?;
        let layer = Layer::create(&env, &dir.path().join("layer"))?;
        let l = &layer.dir;
        assert_eq!(
            std::fs::read_link(l.join("bin/python3.9"))?,
            std::fs::canonicalize(&interp)?
        );
        let pth =
            std::fs::read_to_string(l.join("lib/python3.9/site-packages/_patchwright_env.pth"))?;
        assert_eq!(
            pth,
            format!(
                "import site; site.addsitedir({:?})\n",
                env.venv
                    .join("lib/python3.9/site-packages")
                    .display()
                    .to_string()
            )
        );
        let pytest = std::fs::read_to_string(l.join("bin/pytest"))?;
        assert_eq!(
            pytest,
            format!("#!{}/bin/python\nimport pytest\n", l.display())
        );
        assert!(!l.join("bin/activate").exists());
        assert_eq!(
            std::fs::read_to_string(l.join("pyvenv.cfg"))?,
            std::fs::read_to_string(env.venv.join("pyvenv.cfg"))?
        );
        Ok(())
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("a'b"), "'a'\\''b'");
    }

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
