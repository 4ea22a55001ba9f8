//! The Python environments commands and tests run in: a virtualenv on the
//! host, bound read-only into the sandbox with the interpreter it was made
//! from, its `bin/` first on PATH. [`spec`] says what each (repository,
//! version) needs and [`build`] builds it.

pub mod build;
pub mod ccache;
pub mod log;
pub mod spec;
pub mod task;
pub mod wasi;

use std::path::{Path, PathBuf};

use patchwright_sandbox as sandbox;

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("environment {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
}

/// A virtualenv and the Python installation it was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    pub venv: PathBuf,
    /// The installation's prefix (`home` in `pyvenv.cfg`, one level up).
    pub base_prefix: PathBuf,
}

impl Environment {
    /// Reads the virtualenv at `venv` (its `pyvenv.cfg`).
    pub fn open(venv: &Path) -> Result<Environment, EnvError> {
        let invalid = |message: String| EnvError::Invalid {
            path: venv.to_path_buf(),
            message,
        };
        let venv =
            std::fs::canonicalize(venv).map_err(|e| invalid(format!("cannot resolve it: {e}")))?;
        let cfg = venv.join("pyvenv.cfg");
        let text = std::fs::read_to_string(&cfg).map_err(|e| {
            invalid(format!(
                "cannot read pyvenv.cfg ({e}); pass a virtualenv made with `python -m venv`"
            ))
        })?;
        let home = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == "home")
            .map(|(_, v)| PathBuf::from(v.trim()))
            .ok_or_else(|| invalid("pyvenv.cfg has no `home` line".into()))?;
        let home = std::fs::canonicalize(&home).unwrap_or(home);
        let base_prefix = home
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| invalid(format!("`home` {} has no parent", home.display())))?;
        Ok(Environment { venv, base_prefix })
    }
}

/// Adds `env` (if any) to `policy`: both directories bound read-only, the
/// venv's `bin/` first on PATH. Bytecode writing is turned off either way:
/// a stale `.pyc` of the same size and second as an edited file would
/// shadow the edit.
pub fn apply(policy: &mut sandbox::Policy, env: Option<&Environment>) {
    if let Some(env) = env {
        for p in [&env.venv, &env.base_prefix] {
            if !policy.extra_ro_binds.contains(p) {
                policy.extra_ro_binds.push(p.clone());
            }
        }
        // The configured venv was named by the user; its base prefix only
        // when it is a real Python installation (a pyenv version), not a
        // home directory itself (a venv made from `~/bin/python`).
        policy.allowed_in_home.push(env.venv.clone());
        allow_python_prefix(policy, &env.base_prefix);
        let path = format!(
            "{}:{}",
            env.venv.join("bin").display(),
            sandbox::DEFAULT_PATH
        );
        policy.env.insert("PATH".into(), path);
        policy
            .env
            .insert("VIRTUAL_ENV".into(), env.venv.display().to_string());
        link_python(policy, &env.base_prefix);
    }
    policy
        .env
        .insert("PYTHONDONTWRITEBYTECODE".into(), "1".into());
}

/// Lets the linker find the interpreter's `libpython` where it is now.
/// distutils of Python 3.6 and 3.7 links every extension of a shared
/// interpreter with `-lpython3.Xm`, searched in the `LIBDIR` the
/// interpreter was built with: a bundle's interpreter (`pack`) lives
/// elsewhere on the machine that unpacks it, and that directory is not
/// there (scikit-learn 0.20 failed to link offline without this).
pub fn link_python(policy: &mut sandbox::Policy, prefix: &Path) {
    policy.env.insert(
        "LIBRARY_PATH".into(),
        prefix.join("lib").display().to_string(),
    );
}

/// Allows binds of `prefix` inside a home directory when it is a real
/// Python installation (a `bin/python*` and a `lib/python*`: pyenv's
/// `~/.pyenv/versions/X.Y.Z`, 2.7 included) and not a home directory
/// itself. A prefix that is a home (a venv made from `~/bin/python`) stays
/// refused by the sandbox's bind check.
pub fn allow_python_prefix(policy: &mut sandbox::Policy, prefix: &Path) {
    let homes = sandbox::host_homes();
    if homes.iter().any(|h| h == prefix) {
        return;
    }
    let has = |dir: &str| {
        std::fs::read_dir(prefix.join(dir)).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("python"))
        })
    };
    if has("bin") && has("lib") {
        policy.allowed_in_home.push(prefix.to_path_buf());
    }
}

/// The default policy for `worktree` on `host` with `env` applied.
pub fn policy(
    worktree: &Path,
    env: Option<&Environment>,
    host: &sandbox::Host,
) -> Result<sandbox::Policy, EnvError> {
    let mut policy = sandbox::Policy::for_worktree(worktree, host)?;
    apply(&mut policy, env);
    Ok(policy)
}

/// Where Python environments come from, and how tasks are graded in them
/// (`env build`, `eval`, and `--evaluate` of batch and sweep); resolved
/// from the command line by `config::EnvOptions::resolve`.
pub struct EnvSettings {
    pub specs: spec::Specs,
    pub pythons: build::Pythons,
    /// The host's sandbox (bubblewrap, tier, the program's directories),
    /// which every policy of an environment, a build or a grading run
    /// starts from.
    pub host: sandbox::Host,
    pub envs_root: PathBuf,
    pub index: build::Index,
    pub jobs: usize,
    pub test_timeout_s: u64,
    /// Run the tests even when the patch is empty (`--empty`).
    pub run_empty: bool,
    /// Keep each task's worktree and layer under `OUT/.work/<id>` (to rerun
    /// its tests by hand when an environment misbehaves).
    pub keep_work: bool,
}
