//! A task's environment: the (repository, version) environment, a layer
//! over it with the repository installed at the task's commit in one
//! worktree, and how that repository's tests are run and read. The agents,
//! the Ranker, the stage metrics and grading all prepare a worktree through
//! [`Setup::install`] and run commands under [`TaskEnv::policy`].

use std::path::{Path, PathBuf};

use patchwright_sandbox as sandbox;

use super::build::{self, git_safe, quote, BuildError, Layer};
use super::spec::{Directives, LogFormat, Spec};
use super::wasi::WasiEnv;
use super::{EnvError, Environment};

/// Installing one commit into its layer (no downloads: everything is in
/// the environment or its wheelhouse) takes seconds; compiled extensions
/// take minutes.
pub const INSTALL_TIMEOUT_S: u64 = 1200;

/// The test command without a spec (an `--environment` virtualenv): pytest
/// with its `-rA` summary, which [`LogFormat::Pytest`] reads, and no cache
/// written into the worktree.
pub const DEFAULT_TEST_COMMAND: &str = "python -m pytest -rA -p no:cacheprovider";

/// Files of a test patch that are not tests (SWE-bench's NON_TEST_EXTS).
pub const NON_TEST_EXTS: &[&str] = &[
    ".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml",
];

/// Why a worktree could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("cannot make the task's layer: {0}")]
    Layer(#[from] BuildError),
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("cannot run the install in the sandbox: {0}")]
    Sandbox(#[from] sandbox::SandboxError),
    #[error(
        "the repository did not install at its commit (`{command}`, status {status}); its \
         output ends:\n{tail}"
    )]
    Failed {
        command: String,
        status: i32,
        tail: String,
        outcome: Box<sandbox::Outcome>,
    },
    #[error("the repository installed, but its products in the worktree cannot be listed: {0}")]
    Products(#[from] crate::repo::RepoError),
}

/// What a task's worktrees are prepared from: an environment and, when it
/// was built from a spec, the spec and the wheelhouse the install reads.
#[derive(Debug, Clone)]
pub struct Setup {
    pub env: Environment,
    pub spec: Option<SpecSetup>,
}

/// The spec side of a [`Setup`].
#[derive(Debug, Clone)]
pub struct SpecSetup {
    pub spec: Spec,
    /// Packages a task's commit needs beyond the environment's.
    pub wheelhouse: PathBuf,
    /// The environment's copy of the spec's `downloads`, which each task's
    /// `pre_install` reads as `$PATCHWRIGHT_DOWNLOADS`.
    pub downloads: PathBuf,
    /// The environment's build hash (names its directory).
    pub hash: String,
    /// Under the WASI tier: the environment is a [`WasiEnv`] (and
    /// [`Setup::env`] names its directory, not a virtualenv); nothing is
    /// installed, the worktree goes on `PYTHONPATH` ([`TaskEnv::policy`]).
    pub wasi: Option<WasiEnv>,
}

/// What [`Setup::install`] reports as the install under the WASI tier,
/// where nothing runs.
pub const WASI_INSTALL: &str =
    "(WASI tier: nothing installed; the worktree is on PYTHONPATH, like an install of a \
     pure-Python package)";

/// Where a task's commands run: the host's sandbox, in a worktree prepared
/// by [`Setup::install`] when the task has an environment, else with the
/// sandbox's own `python3` ([`TaskEnv::bare`]).
#[derive(Debug, Clone)]
pub struct TaskEnv {
    /// The host's sandbox every command of the task runs in.
    pub host: sandbox::Host,
    /// What it was prepared from (and other worktrees of the task can be);
    /// none without an environment.
    pub setup: Option<Setup>,
    /// The layer the repository is installed into (with a spec).
    pub layer: Option<PathBuf>,
}

/// The result of [`Setup::install`]: the prepared environment, and the
/// install's command and run (with a spec).
#[derive(Debug)]
pub struct Installed {
    pub task: TaskEnv,
    pub command: Option<String>,
    pub outcome: Option<sandbox::Outcome>,
}

impl Setup {
    /// A virtualenv given as is (`--environment`): nothing is installed.
    pub fn given(env: Environment) -> Setup {
        Setup { env, spec: None }
    }

    /// The install command with pip kept offline, reading the wheelhouse.
    pub fn install_command(&self) -> Option<String> {
        let s = self.spec.as_ref()?;
        if s.wasi.is_some() {
            return Some(WASI_INSTALL.to_string());
        }
        Some(build::with_pip_flags(
            &s.spec.install,
            &format!(
                "--no-build-isolation --no-index --find-links {} --disable-pip-version-check",
                quote(&s.wheelhouse.to_string_lossy())
            ),
        ))
    }

    /// Prepares `worktree` (at the commit to install): with a spec, a layer
    /// at `layer_dir` over the environment, and the repository installed
    /// into it in the sandbox (network off), as grading does; without one,
    /// the environment as it is. Files the install leaves in the worktree
    /// (egg-info, built extensions) are excluded from git there, so diffs
    /// and resets never see them.
    pub fn install(
        &self,
        host: &sandbox::Host,
        worktree: &Path,
        layer_dir: &Path,
    ) -> Result<Installed, InstallError> {
        let Some(s) = &self.spec else {
            return Ok(Installed {
                task: TaskEnv {
                    host: host.clone(),
                    setup: Some(self.clone()),
                    layer: None,
                },
                command: None,
                outcome: None,
            });
        };
        if s.wasi.is_some() {
            // Nothing to run: the spec was checked to be a pip install of
            // the repository itself with no other step (`wasi::refusal`).
            return Ok(Installed {
                task: TaskEnv {
                    host: host.clone(),
                    setup: Some(self.clone()),
                    layer: None,
                },
                command: Some(WASI_INSTALL.to_string()),
                outcome: None,
            });
        }
        let layer = Layer::create(&self.env, layer_dir)?;
        let task = TaskEnv {
            host: host.clone(),
            setup: Some(self.clone()),
            layer: Some(layer.dir),
        };
        let install = self.install_command().unwrap_or_default();
        let mut script = String::from("set -euo pipefail\n");
        for cmd in &s.spec.pre_install {
            script += &format!("{cmd}\n");
        }
        script += &format!("{install}\n");
        let mut policy = task.policy(worktree)?;
        policy.limits.timeout_ms = INSTALL_TIMEOUT_S * 1000;
        let outcome = sandbox::run(&policy, &["bash".into(), "-c".into(), script])?;
        if !outcome.success() {
            let tail: Vec<&str> = outcome.output.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(InstallError::Failed {
                command: install,
                status: outcome.cli_exit_code(),
                tail: tail.join("\n"),
                outcome: Box::new(outcome),
            });
        }
        // Kept by every workspace reset, left out of every patch.
        crate::repo::keep_install_products(worktree)?;
        Ok(Installed {
            task,
            command: Some(install),
            outcome: Some(outcome),
        })
    }
}

impl TaskEnv {
    /// No environment: commands run in `host`'s sandbox with its own
    /// `python3`.
    pub fn bare(host: &sandbox::Host) -> TaskEnv {
        TaskEnv {
            host: host.clone(),
            setup: None,
            layer: None,
        }
    }

    /// The spec the environment was built from, if any.
    pub fn spec(&self) -> Option<&Spec> {
        self.setup.as_ref()?.spec.as_ref().map(|s| &s.spec)
    }

    /// The sandbox policy of commands in `worktree`: the worktree (and the
    /// layer) writable, the environment and its interpreter read-only, the
    /// layer's then the environment's `bin/` first on PATH, the spec's
    /// variables and local hosts, no network. Without an environment, the
    /// host's default policy ([`super::policy`]).
    pub fn policy(&self, worktree: &Path) -> Result<sandbox::Policy, EnvError> {
        let Some(setup) = &self.setup else {
            return super::policy(worktree, None, &self.host);
        };
        let env = &setup.env;
        let mut policy = super::policy(worktree, Some(env), &self.host)?;
        if let Some(layer) = &self.layer {
            // Created by the program for this worktree.
            policy.allowed_in_home.push(layer.clone());
            policy.writable.push(layer.clone());
            policy.env.insert(
                "PATH".into(),
                format!(
                    "{}:{}:{}",
                    layer.join("bin").display(),
                    env.venv.join("bin").display(),
                    sandbox::DEFAULT_PATH
                ),
            );
            policy
                .env
                .insert("VIRTUAL_ENV".into(), layer.display().to_string());
        }
        if let Some(wasi) = setup.spec.as_ref().and_then(|s| s.wasi.as_ref()) {
            let mut path = super::wasi::repository_path(&policy.worktree);
            path.push(wasi.site_packages());
            let path: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
            policy.env.insert("PYTHONPATH".into(), path.join(":"));
            policy
                .env
                .insert("PYTEST_ADDOPTS".into(), super::wasi::PYTEST_ADDOPTS.into());
        }
        if let Some(s) = &setup.spec {
            for (k, v) in &s.spec.vars {
                policy.env.insert(k.clone(), v.clone());
            }
            policy.local_hosts = s.spec.local_hosts.clone();
            if !s.spec.downloads.is_empty() {
                // Inside the environment, which is bound read-only.
                policy.env.insert(
                    crate::env::spec::DOWNLOADS_ENV.into(),
                    s.downloads.display().to_string(),
                );
            }
        }
        super::ccache::for_task(&mut policy, &env.venv);
        git_safe(&mut policy);
        Ok(policy)
    }

    /// How this repository's test logs are read: the spec's format, else
    /// pytest's `-rA` summary.
    pub fn log_format(&self) -> LogFormat {
        self.spec().map_or(LogFormat::Pytest, |s| s.log_format)
    }

    /// The script that runs the tests of `files` (repository paths) the
    /// repository's way: the spec's `eval_commands`, then its test command
    /// on the files as its runner names them; without a spec, pytest.
    pub fn test_script(&self, files: &[String]) -> String {
        match self.spec() {
            Some(spec) => test_script(spec, files),
            None => default_test_script(files),
        }
    }
}

/// The tests of `files` without a spec: [`DEFAULT_TEST_COMMAND`] on them.
pub fn default_test_script(files: &[String]) -> String {
    let args: Vec<String> = files.iter().map(|f| quote(f)).collect();
    format!("{DEFAULT_TEST_COMMAND} {}\n", args.join(" "))
}

/// The test script of `spec` for `files`: its `eval_commands`, then its
/// test command on the files' directives.
pub fn test_script(spec: &Spec, files: &[String]) -> String {
    let mut script = String::new();
    for cmd in &spec.eval_commands {
        script += &format!("{cmd}\n");
    }
    let args: Vec<String> = test_directives(files, spec.test_directives)
        .iter()
        .map(|d| quote(d))
        .collect();
    script += &format!("{} {}\n", spec.test_cmd, args.join(" "));
    script
}

/// The test command's arguments for test files (SWE-bench's directives:
/// paths, or Django's dotted labels under `tests/`).
pub fn test_directives(files: &[String], kind: Directives) -> Vec<String> {
    files
        .iter()
        .filter(|f| !NON_TEST_EXTS.iter().any(|x| f.ends_with(x)))
        .map(|f| match kind {
            Directives::Files => f.clone(),
            Directives::Django => {
                let f = f.strip_suffix(".py").unwrap_or(f);
                let f = f.strip_prefix("tests/").unwrap_or(f);
                f.replace('/', ".")
            }
        })
        .collect()
}
