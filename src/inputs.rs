//! A command's inputs, resolved once and passed down explicitly: where its
//! tasks, repositories and models come from ([`Sources`]: the flags or a
//! bundle), and the host's sandbox ([`host`], then [`preflight`], which
//! picks the tier). Nothing below reads them from the process environment
//! again: the sandbox policy takes the [`sandbox::Host`] it is given, the
//! model lookups the models directory, the environments their
//! `EnvSettings` (which carry the host).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use patchwright_sandbox as sandbox;

use crate::bundle::{Bundle, BundleError};
use crate::config::{ConfigError, EnvOptions, EnvSettings, SandboxChoice};
use crate::dataset::Task;
use crate::env::spec::Specs;
use crate::models::ModelError;

/// The environment variable naming the bubblewrap binary every sandbox of
/// a command uses (default `/usr/bin/bwrap`, `sandbox::DEFAULT_BWRAP`).
/// Read by the command layer only, and given to [`host`].
pub const BWRAP_ENV: &str = "PATCHWRIGHT_BWRAP";

/// Why a command's inputs could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum InputsError {
    #[error("--dataset is required (or --bundle)")]
    NoDataset,
    #[error("--repos is required (or --bundle)")]
    NoRepos,
    #[error(
        "--repos {} and --bundle {}: with a bundle the repositories are its own",
        repos.display(),
        bundle.display()
    )]
    ReposWithBundle { repos: PathBuf, bundle: PathBuf },
    #[error("{BWRAP_ENV}={value}: not a usable path: {source}")]
    Bwrap {
        value: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// A command's inputs, resolved once from its flags, the environment, the
/// configuration and a bundle, and passed down explicitly.
pub struct Inputs {
    /// Where the tasks and repositories come from.
    pub sources: Sources,
    /// Where model names are looked up ([`Sources::models_dir`]).
    pub models: PathBuf,
    /// The environments (specs, interpreters, package index, their root
    /// directory) and the host's sandbox every policy starts from.
    pub environments: EnvSettings,
}

impl Inputs {
    /// `sources`, their models directory, and `options` resolved on
    /// `host` (after its preflight).
    pub fn resolve(
        sources: Sources,
        options: &EnvOptions,
        host: &sandbox::Host,
    ) -> Result<Inputs, InputsError> {
        let models = sources.models_dir()?;
        let environments = options.resolve(host)?;
        Ok(Inputs {
            sources,
            models,
            environments,
        })
    }

    /// With a bundle: checks that it holds what `tasks` need and the model
    /// `model` ([`Sources::check`]).
    pub fn check(&self, tasks: &[Task], model: Option<&str>) -> Result<(), InputsError> {
        self.sources.check(tasks, &self.environments.specs, model)
    }
}

/// Where a command's tasks, repositories and models come from: the flags,
/// or a bundle (`--bundle`, `PATCHWRIGHT_BUNDLE`).
pub struct Sources {
    pub dataset: PathBuf,
    pub repos: PathBuf,
    pub bundle: Option<Bundle>,
}

impl Sources {
    /// `--dataset` and `--repos`, or the bundle's (and then its models
    /// directory: [`Sources::models_dir`]).
    pub fn resolve(
        dataset: Option<&Path>,
        repos: Option<&Path>,
        bundle: Option<&Path>,
    ) -> Result<Sources, InputsError> {
        let bundle = bundle.map(Bundle::open).transpose()?;
        let Some(bundle) = bundle else {
            return Ok(Sources {
                dataset: dataset.ok_or(InputsError::NoDataset)?.to_path_buf(),
                repos: repos.ok_or(InputsError::NoRepos)?.to_path_buf(),
                bundle: None,
            });
        };
        if let Some(r) = repos {
            return Err(InputsError::ReposWithBundle {
                repos: r.to_path_buf(),
                bundle: bundle.root.clone(),
            });
        }
        Ok(Sources {
            dataset: dataset.map_or_else(|| bundle.dataset(), Path::to_path_buf),
            repos: bundle.repos_dir(),
            bundle: Some(bundle),
        })
    }

    /// `--dataset`, or the bundle's task file (for a command that reads
    /// only the task file).
    pub fn dataset(dataset: Option<&Path>, bundle: Option<&Path>) -> Result<PathBuf, InputsError> {
        match (dataset, bundle) {
            (Some(d), _) => Ok(d.to_path_buf()),
            (None, Some(b)) => Ok(Bundle::open(b)?.dataset()),
            (None, None) => Err(InputsError::NoDataset),
        }
    }

    /// Where model names are looked up: the bundle's models directory,
    /// else the user's ([`crate::models::models_dir`]).
    pub fn models_dir(&self) -> Result<PathBuf, InputsError> {
        match &self.bundle {
            Some(b) => Ok(b.models_dir()),
            None => Ok(crate::models::models_dir()?),
        }
    }

    /// With a bundle: checks that it holds what `tasks` need (and the model
    /// `model`, a manifest name or a file in the bundle) and that those
    /// files are intact.
    pub fn check(
        &self,
        tasks: &[Task],
        specs: &Specs,
        model: Option<&str>,
    ) -> Result<(), InputsError> {
        let Some(bundle) = &self.bundle else {
            return Ok(());
        };
        let mut files = Vec::new();
        if let Some(spec) = model {
            let known = crate::models::manifest()?;
            if let Some(k) = known.iter().find(|k| k.name == spec) {
                files.push(k.file.clone());
            } else if let Ok(p) = std::fs::canonicalize(spec) {
                if let Ok(rel) = p.strip_prefix(bundle.models_dir()) {
                    files.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        bundle.check_for(tasks, specs, &files)?;
        tracing::info!(
            "bundle {}: everything {} tasks need is there and intact",
            bundle.root.display(),
            tasks.len()
        );
        Ok(())
    }
}

/// The host's sandbox before its preflight: `bwrap` (the value of
/// [`BWRAP_ENV`], made absolute; none or empty: the default) and the
/// program's own directories, inside which binds pass the sandbox's
/// home-directory check: the cache directory, `~/.cache/patchwright` (the
/// default root of caches and environments), the environments root and the
/// models directory. The tier is bubblewrap until [`preflight`] decides.
pub fn host(bwrap: Option<&OsStr>) -> Result<sandbox::Host, InputsError> {
    let mut host = sandbox::Host::default();
    if let Some(value) = bwrap.filter(|v| !v.is_empty()) {
        host.bwrap =
            std::path::absolute(PathBuf::from(value)).map_err(|source| InputsError::Bwrap {
                value: value.to_string_lossy().into_owned(),
                source,
            })?;
    }
    host.allow_program_dir(crate::dirs::cache_dir());
    host.allow_program_dir(crate::dirs::home_cache_dir());
    host.allow_program_dir(crate::dirs::envs_dir());
    if let Ok(models) = crate::models::models_dir() {
        host.allow_program_dir(models);
    }
    Ok(host)
}

/// The sandbox cannot work on this host: the preflight's finding, with
/// what to change here. The command layer exits with a status of its own
/// on it (nothing was started).
#[derive(Debug, thiserror::Error)]
pub enum SandboxUnavailable {
    /// bubblewrap's preflight failed (and `auto` could not or may not
    /// fall back to the WASI tier).
    #[error(
        "the sandbox cannot run on this host, so nothing was started \
         (bubblewrap: {}; set {BWRAP_ENV} to use another)",
        bwrap.display()
    )]
    Bubblewrap {
        bwrap: PathBuf,
        #[source]
        source: sandbox::PreflightError,
    },
    /// bubblewrap cannot create namespaces and the WASI tier, which `auto`
    /// would use instead, is not ready.
    #[error(
        "the sandbox cannot run on this host, so nothing was started: bubblewrap cannot \
         create namespaces here ({namespaces}), and the WASI tier that `--sandbox auto` uses \
         instead is not ready: {wasi}"
    )]
    NeitherTier {
        namespaces: sandbox::PreflightError,
        wasi: String,
    },
    /// `--sandbox wasi`, and its runtime is not ready.
    #[error("the WASI sandbox tier cannot run, so nothing was started: {0}")]
    Wasi(String),
}

/// The WASI tier's runtime, fetched and compiled (once: the compiled module
/// is cached beside it), its directory declared the program's own on
/// `host`; what is missing as text.
fn wasi_runtime(host: &mut sandbox::Host) -> Result<sandbox::WasiRuntime, String> {
    let runtime = crate::env::wasi::runtime::runtime().map_err(|e| e.to_string())?;
    // The runtime lives in the program's cache directory.
    if let Some(dir) = runtime.python_wasm.parent() {
        host.allow_program_dir(dir.to_path_buf());
    }
    let start = std::time::Instant::now();
    sandbox::prepare_runtime(&runtime).map_err(|e| e.to_string())?;
    tracing::info!(
        "sandbox: the WASI tier, {} ({:.1} s to load the compiled module)",
        runtime.python_wasm.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(runtime)
}

/// Resolves the `sandbox` setting to the tier of `host`, once, before
/// anything slow (models, environments), and returns the host with it:
/// `bubblewrap`, its preflight as [`preflight_bubblewrap`] does it; `wasi`,
/// the fetched WASI runtime; `auto`, bubblewrap's preflight, and when that
/// finds that bubblewrap cannot create namespaces, the WASI tier with a
/// warning. Other failures are errors ([`SandboxUnavailable`]).
pub fn preflight(
    mut host: sandbox::Host,
    network: bool,
    choice: SandboxChoice,
) -> Result<sandbox::Host, SandboxUnavailable> {
    let unfit = |host: &sandbox::Host, source| SandboxUnavailable::Bubblewrap {
        bwrap: host.bwrap.clone(),
        source,
    };
    host.tier = match choice {
        SandboxChoice::Bubblewrap => {
            preflight_bubblewrap(&host, network).map_err(|e| unfit(&host, e))?;
            sandbox::Tier::Bubblewrap
        }
        SandboxChoice::Wasi => {
            sandbox::Tier::Wasi(wasi_runtime(&mut host).map_err(SandboxUnavailable::Wasi)?)
        }
        SandboxChoice::Auto => match preflight_bubblewrap(&host, network) {
            Ok(()) => sandbox::Tier::Bubblewrap,
            Err(e) if e.namespaces_unavailable() => {
                let runtime = match wasi_runtime(&mut host) {
                    Ok(r) => r,
                    Err(wasi) => {
                        return Err(SandboxUnavailable::NeitherTier {
                            namespaces: e,
                            wasi,
                        })
                    }
                };
                tracing::warn!(
                    "bubblewrap cannot create namespaces here ({e}); using the WASI tier: only \
                     Python commands run"
                );
                sandbox::Tier::Wasi(runtime)
            }
            Err(e) => return Err(unfit(&host, e)),
        },
    };
    Ok(host)
}

/// Checks once that bubblewrap works on `host`: the default policy of a
/// temporary worktree, with the network kept when `network` (environment
/// builds), through `sandbox::preflight`. Logs what it found.
pub fn preflight_bubblewrap(
    host: &sandbox::Host,
    network: bool,
) -> Result<(), sandbox::PreflightError> {
    let probe = |source: sandbox::SandboxError| sandbox::PreflightError::Probe { source };
    let dir = tempfile::tempdir().map_err(|e| {
        probe(sandbox::SandboxError::InvalidPolicy {
            reason: format!("cannot create a temporary directory to check the sandbox in: {e}"),
        })
    })?;
    let mut policy = sandbox::Policy::for_worktree(dir.path(), host).map_err(probe)?;
    // The check is bubblewrap's, whatever tier is chosen.
    policy.tier = sandbox::Tier::Bubblewrap;
    if network {
        policy.allow_network();
    }
    let report = sandbox::preflight(&policy)?;
    tracing::info!(
        "sandbox: bubblewrap {} at {}, {} options checked, probe {:.0} ms{}",
        report.version,
        report.bwrap.display(),
        report.flags.len(),
        report.probe_secs * 1000.0,
        report
            .cgroup_unavailable
            .map_or(String::new(), |why| format!(
                "; no per-command cgroup ({why}): memory and process caps are rlimits"
            ))
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bwrap_variable_is_made_absolute_and_empty_is_the_default(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let cwd = std::env::current_dir()?;
        let cases: [(Option<&str>, PathBuf); 4] = [
            (None, PathBuf::from(sandbox::DEFAULT_BWRAP)),
            (Some(""), PathBuf::from(sandbox::DEFAULT_BWRAP)),
            (
                Some("/opt/bwrap/bin/bwrap"),
                PathBuf::from("/opt/bwrap/bin/bwrap"),
            ),
            (Some("bin/bwrap"), cwd.join("bin/bwrap")),
        ];
        for (value, want) in cases {
            let host = host(value.map(OsStr::new))?;
            assert_eq!(host.bwrap, want, "{value:?}");
            assert_eq!(host.tier, sandbox::Tier::Bubblewrap);
            let cache = std::path::absolute(crate::dirs::cache_dir())?;
            assert!(
                host.program_dirs.contains(&cache),
                "{:?}",
                host.program_dirs
            );
        }
        Ok(())
    }

    #[test]
    fn sources_come_from_the_flags_or_the_bundle_never_both() {
        let cases: [(Option<&str>, Option<&str>, &str); 2] = [
            (None, Some("repos"), "--dataset is required (or --bundle)"),
            (
                Some("tasks.json"),
                None,
                "--repos is required (or --bundle)",
            ),
        ];
        for (dataset, repos, want) in cases {
            match Sources::resolve(dataset.map(Path::new), repos.map(Path::new), None) {
                Err(e) => assert_eq!(e.to_string(), want),
                Ok(_) => panic!("{dataset:?} {repos:?} resolved"),
            }
        }
        let Ok(s) = Sources::resolve(Some(Path::new("t.json")), Some(Path::new("r")), None) else {
            panic!("flags alone do not resolve");
        };
        assert_eq!(
            (s.dataset, s.repos, s.bundle.is_none()),
            (PathBuf::from("t.json"), PathBuf::from("r"), true)
        );
    }
}
