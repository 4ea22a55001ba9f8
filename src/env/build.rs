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
//!
//! The parts: finding interpreters ([`Pythons`]), the [`Plan`] and its hash,
//! the sandboxed build (here), the wheelhouse of task commits' own
//! dependencies ([`Plan::prepare_commit`]), and a task's [`Layer`].

use std::path::{Path, PathBuf};

use patchwright_sandbox as sandbox;

use super::Environment;
use crate::repo::{RepoError, Workspace};

mod download;
mod layer;
mod plan;
mod python;
mod wheelhouse;

pub use layer::Layer;
pub use plan::{Plan, RECIPE_VERSION};
pub use python::{Interpreter, Pythons};
pub use wheelhouse::{download_command, DEPENDENCY_FILES};

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
    #[error(
        "{repo} {version}: the host has no {missing:?} locale, which the tests set (as root: \
         sed -i 's/^# *\\({}\\)/\\1/' /etc/locale.gen && locale-gen)", missing.join("\\|")
    )]
    MissingLocale {
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
    #[error(
        "{repo} {version}: the bundle has no wheels for this environment ({dir} is missing); \
         add them on a connected host: patchwright pack --dataset FILE --repos DIR --out BUNDLE"
    )]
    NotInBundle {
        repo: String,
        version: String,
        dir: PathBuf,
    },
    #[error(
        "{repo} {version}: the file {file} that pre_install needs is not in {dir} \
         (fetched from {url} on a machine with the network; with a bundle, pack adds it)"
    )]
    MissingDownload {
        repo: String,
        version: String,
        file: String,
        url: String,
        dir: PathBuf,
    },
    #[error("{url}: {message}")]
    Fetch { url: String, message: String },
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

/// Where packages come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Index {
    /// The package index pip is configured for (network kept during builds).
    #[default]
    Online,
    /// Only this directory of wheels and sdists (`pip --no-index
    /// --find-links`), with the network off.
    Wheels(PathBuf),
    /// A bundle's wheelhouses (`patchwright pack`), one directory per
    /// environment ([`Index::bundle_dir`]), with the network off.
    Bundle(PathBuf),
}

impl Index {
    /// The wheelhouse of `repo` `version` under a bundle's `wheels` root.
    pub fn bundle_dir(root: &Path, repo: &str, version: &str) -> PathBuf {
        root.join(repo.replace('/', "__")).join(version)
    }

    /// The one directory pip installs from for `spec`, or `None` for the
    /// package index; a bundle without it is an error naming what to add.
    pub fn wheels_for(&self, spec: &super::spec::Spec) -> Result<Option<PathBuf>, BuildError> {
        match self {
            Index::Online => Ok(None),
            Index::Wheels(dir) => Ok(Some(dir.clone())),
            Index::Bundle(root) => {
                let dir = Index::bundle_dir(root, &spec.repo, &spec.version);
                if dir.is_dir() {
                    Ok(Some(dir))
                } else {
                    Err(BuildError::NotInBundle {
                        repo: spec.repo.clone(),
                        version: spec.version.clone(),
                        dir,
                    })
                }
            }
        }
    }
}

impl Plan {
    /// The built environment, building it first if needed, in `host`'s
    /// sandbox. `scratch` holds the checkout of the setup commit while
    /// building.
    pub fn ensure(
        &self,
        source: &Path,
        index: &Index,
        host: &sandbox::Host,
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
        // `locale -a` only for a spec that names locales.
        let generated = if self.spec.locales.is_empty() {
            Vec::new()
        } else {
            generated_locales()
        };
        let missing: Vec<String> = self
            .spec
            .locales
            .iter()
            .filter(|l| !generated.contains(&locale_key(l)))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(BuildError::MissingLocale {
                repo: self.spec.repo.clone(),
                version: self.spec.version.clone(),
                missing,
            });
        }
        if !self.is_built() {
            self.build(source, index, host, scratch)?;
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

    fn build(
        &self,
        source: &Path,
        index: &Index,
        host: &sandbox::Host,
        scratch: &Path,
    ) -> Result<(), BuildError> {
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
        self.write_step_files(&meta)?;
        let write = |name: &str, text: String| {
            let p = meta.join(name);
            std::fs::write(&p, text).map_err(io("write", &p))
        };
        write("find_repo_dists.py", FIND_REPO_DISTS.to_string())?;
        std::fs::create_dir_all(scratch).map_err(io("create", scratch))?;
        let checkout_dir = scratch.join(format!("checkout-{}", &self.hash[..12]));
        let checkout = Workspace::create(source, &self.setup_commit, &checkout_dir)?;
        let policy = self.build_policy(checkout.path(), index, host)?;

        let script = self.script();
        write("build.sh", script.clone())?;
        self.keep_downloads(index)?;
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

    /// The files the build's first steps install from, into `dir`:
    /// `pip.txt` (the spec's pip, or nothing), `requirements.txt`,
    /// `build-requires.txt` (the build backend and `wheel`),
    /// `pip-packages.txt`.
    pub(super) fn write_step_files(&self, dir: &Path) -> Result<(), BuildError> {
        let write = |name: &str, text: String| {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(io("write", &p))
        };
        write("pip.txt", lines(&self.pip_requirement()))?;
        write("requirements.txt", lines(&self.requirements))?;
        let mut build_requires = self.build_requires.clone();
        build_requires.push("wheel".into());
        write("build-requires.txt", lines(&build_requires))?;
        write("pip-packages.txt", lines(&self.spec.pip_packages))
    }

    /// `pip==X` when the spec pins the venv's pip, else nothing.
    pub(super) fn pip_requirement(&self) -> Vec<String> {
        self.spec.pip.iter().map(|v| format!("pip=={v}")).collect()
    }

    /// The sandbox policy of a build step in `worktree`: the environment
    /// writable, the package index reachable (or only the wheel directory),
    /// pip's cache shared by all environments.
    fn build_policy(
        &self,
        worktree: &Path,
        index: &Index,
        host: &sandbox::Host,
    ) -> Result<sandbox::Policy, BuildError> {
        let cache = self
            .dir
            .parent()
            .and_then(Path::parent)
            .map(|r| r.join(".pip-cache"));

        let mut policy = sandbox::Policy::for_worktree(worktree, host)?;
        policy.extra_ro_binds.push(self.interpreter.prefix.clone());
        super::allow_python_prefix(&mut policy, &self.interpreter.prefix);
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
        if !self.spec.downloads.is_empty() {
            let dir = self.downloads_dir(index)?;
            policy.extra_ro_binds.push(dir.clone());
            policy
                .env
                .insert(super::spec::DOWNLOADS_ENV.into(), dir.display().to_string());
        }
        match index.wheels_for(&self.spec)? {
            None => policy.allow_network(),
            Some(dir) => {
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
        super::ccache::for_build(&mut policy, &self.dir);
        super::link_python(&mut policy, &self.interpreter.prefix);
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
        if self.spec.pip.is_some() {
            s += &format!("step pip\npip install -r {meta}/pip.txt\n");
        }
        if !self.requirements.is_empty() {
            s += &format!("step requirements\npip install -r {meta}/requirements.txt\n");
        }
        s += &format!("step build-requires\npip install -r {meta}/build-requires.txt\n");
        if !self.spec.pip_packages.is_empty() {
            s += &format!("step pip_packages\npip install -r {meta}/pip-packages.txt\n");
        }
        for cmd in &self.spec.pre_install {
            s += &format!("step {}\n{cmd}\n", step_label("pre_install", cmd));
        }
        let install = with_pip_flags(&self.spec.install, "--no-build-isolation");
        s += &format!("step {}\n{install}\n", step_label("install", &install));
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

impl Plan {
    /// Copies the spec's downloads into [`Plan::kept_downloads`] (checked
    /// again against their sha256: the copy is what every later install
    /// reads).
    fn keep_downloads(&self, index: &Index) -> Result<(), BuildError> {
        if self.spec.downloads.is_empty() {
            return Ok(());
        }
        let from = self.downloads_dir(index)?;
        let to = self.kept_downloads();
        std::fs::create_dir_all(&to).map_err(io("create", &to))?;
        for d in &self.spec.downloads {
            let (src, dest) = (from.join(&d.file), to.join(&d.file));
            std::fs::copy(&src, &dest).map_err(io("copy", &src))?;
            let found = sha_of(&dest)?;
            if found != d.sha256 {
                return Err(self.failed(format!(
                    "{} has sha256 {found}, not the spec's {}: delete it and build again",
                    src.display(),
                    d.sha256
                )));
            }
        }
        Ok(())
    }

    /// The directory holding this spec's downloads: fetched into the
    /// environments' `.downloads/` when the index is online, else the wheel
    /// directory, or the bundle's `downloads/`. Each file must be there.
    pub fn downloads_dir(&self, index: &Index) -> Result<PathBuf, BuildError> {
        let dir = match index {
            Index::Online => {
                let root = self
                    .dir
                    .parent()
                    .and_then(Path::parent)
                    .unwrap_or(&self.dir);
                let dir = root.join(".downloads");
                for d in &self.spec.downloads {
                    fetch_download(d, &dir)?;
                }
                return Ok(dir);
            }
            Index::Wheels(dir) => dir.clone(),
            Index::Bundle(root) => root.parent().unwrap_or(root).join("downloads"),
        };
        for d in &self.spec.downloads {
            if !dir.join(&d.file).is_file() {
                return Err(BuildError::MissingDownload {
                    repo: self.spec.repo.clone(),
                    version: self.spec.version.clone(),
                    file: d.file.clone(),
                    url: d.url.clone(),
                    dir,
                });
            }
        }
        Ok(dir)
    }
}

/// The sha256 of the file at `p`, hex-encoded.
fn sha_of(p: &Path) -> Result<String, BuildError> {
    use sha2::Digest;
    let mut f = std::fs::File::open(p).map_err(io("read", p))?;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(io("read", p))?;
    Ok(hex::encode(h.finalize()))
}

/// How long fetching one download may take.
const FETCH_TIMEOUT_S: u64 = 600;

/// `d` in `dir`: kept when it is there with its sha256, else fetched from
/// its URL (by patchwright itself: a plain HTTP GET of a file, no code of
/// the repository runs), checked, and moved into place.
pub fn fetch_download(d: &super::spec::Download, dir: &Path) -> Result<PathBuf, BuildError> {
    let dest = dir.join(&d.file);
    if dest.is_file() && sha_of(&dest)? == d.sha256 {
        return Ok(dest);
    }
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let fail = |message: String| BuildError::Fetch {
        url: d.url.clone(),
        message,
    };
    tracing::info!(url = %d.url, "fetching a file pre_install needs");
    let agent = ureq::AgentBuilder::new()
        .timeout(std::time::Duration::from_secs(FETCH_TIMEOUT_S))
        .build();
    let response = agent.get(&d.url).call().map_err(|e| fail(e.to_string()))?;
    let part = dir.join(format!("{}.part", d.file));
    let mut out = std::fs::File::create(&part).map_err(io("create", &part))?;
    std::io::copy(&mut response.into_reader(), &mut out).map_err(|e| fail(e.to_string()))?;
    drop(out);
    let got = sha_of(&part)?;
    if got != d.sha256 {
        let _ = std::fs::remove_file(&part);
        return Err(fail(format!(
            "sha256 {got}, the spec says {}: refused",
            d.sha256
        )));
    }
    std::fs::rename(&part, &dest).map_err(io("rename into place", &dest))?;
    Ok(dest)
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

/// The locales the host has generated (`locale -a`), as [`locale_key`]s.
fn generated_locales() -> Vec<String> {
    std::process::Command::new("locale")
        .arg("-a")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(locale_key)
                .collect()
        })
        .unwrap_or_default()
}

/// A locale name as `locale -a` spells it: `en_US.UTF-8` and `en_US.utf8`
/// are one locale.
fn locale_key(name: &str) -> String {
    name.trim().to_lowercase().replace("utf-8", "utf8")
}

fn lines(v: &[String]) -> String {
    v.iter().map(|l| format!("{l}\n")).collect()
}

/// The `step` line's argument for `cmd`: one line, quoted, so the label
/// is only echoed (a command with a pipe or `$(...)` must not run twice).
fn step_label(name: &str, cmd: &str) -> String {
    quote(&format!("{name}: {}", one_line(cmd)))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves `body` to each of `n` connections on 127.0.0.1; the URL.
    fn serve(body: &'static [u8], n: usize) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(n) {
                let mut stream = stream.unwrap();
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body);
            }
        });
        format!("http://127.0.0.1:{port}/qhull.tgz")
    }

    #[test]
    fn a_download_is_fetched_checked_and_kept() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let body: &'static [u8] = b"the qhull sources";
        let sha = {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(body))
        };
        // One connection only: the second call must not fetch again.
        let url = serve(body, 1);
        let d = crate::env::spec::Download {
            url: url.clone(),
            sha256: sha.clone(),
            file: "q.tgz".into(),
        };
        let path = fetch_download(&d, dir.path())?;
        assert_eq!(std::fs::read(&path)?, body);
        assert_eq!(fetch_download(&d, dir.path())?, path);
        // A file whose sum differs is refused and not kept.
        let wrong = crate::env::spec::Download {
            url: serve(body, 1),
            sha256: "0".repeat(64),
            file: "other.tgz".into(),
        };
        let e = fetch_download(&wrong, dir.path()).unwrap_err().to_string();
        assert!(e.contains("the spec says 0000"), "{e}");
        assert!(!dir.path().join("other.tgz").exists());
        assert!(!dir.path().join("other.tgz.part").exists());
        Ok(())
    }

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

    /// A plan of the built-in spec of `repo` `version`, with a made-up
    /// interpreter and no requirement file read.
    fn plan_of(repo: &str, version: &str) -> Plan {
        let spec = crate::env::spec::Specs::builtin()
            .and_then(|s| s.get(repo, version))
            .unwrap();
        serde_json::from_value(serde_json::json!({
            "spec": spec,
            "interpreter": {"version": "3.6.15", "prefix": "/py", "executable": "/py/bin/python3.6"},
            "requirements": ["bcrypt"], "build_requires": ["setuptools"],
            "setup_commit": "c0ffee", "hash": "0".repeat(64), "dir": "/envs/e",
        }))
        .unwrap()
    }

    #[test]
    fn a_pinned_pip_is_installed_before_anything_else() {
        let script = plan_of("django/django", "3.0").script();
        let pip = script.find("step pip\npip install -r '/envs/e'/patchwright/pip.txt\n");
        let requirements = script.find("step requirements\n");
        assert!(pip.is_some() && pip < requirements, "{script}");
        let dir = tempfile::tempdir().unwrap();
        let plan = plan_of("django/django", "3.0");
        plan.write_step_files(dir.path()).unwrap();
        let pinned = std::fs::read_to_string(dir.path().join("pip.txt")).unwrap();
        assert_eq!(pinned, "pip==21.3.1\n");
        // Django 4.0 runs on Python 3.8, whose own pip is new enough.
        let script = plan_of("django/django", "4.0").script();
        assert!(!script.contains("step pip\n"), "{script}");
    }

    #[test]
    fn locales_are_compared_as_locale_a_spells_them() {
        assert_eq!(locale_key("en_US.UTF-8"), "en_us.utf8");
        assert_eq!(locale_key("C.utf8"), locale_key("C.UTF-8"));
        // Every glibc host has the C locale.
        assert!(generated_locales().contains(&locale_key("C")));
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("a'b"), "'a'\\''b'");
    }
}
