//! The one way to a task's environment: a pool of the environments of
//! (repository, version, spec hash), built on first need (or found built by
//! `env build`), each task's own commit's dependencies prepared in its
//! wheelhouse. Agents, the Ranker, the stage metrics and grading all take
//! a task's [`Setup`] from here, and prepare their worktrees with
//! [`Setup::install`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::dataset::Task;
use crate::env::task::{Setup, SpecSetup};
use crate::env::EnvSettings;
use crate::env::Environment;
use crate::record::result::{EnvironmentSource, EnvironmentUsed};
use crate::repo::Repos;
use patchwright_sandbox as sandbox;

use super::{ensure_envs, plans, prepare_commits, Envs, EvalError, Unavailable};

/// The environments of a run, shared by its tasks (and a sweep's points).
pub struct Pool<'a> {
    pub settings: &'a EnvSettings,
    pub repos: &'a Repos,
    /// Checkouts made while building.
    scratch: PathBuf,
    /// By (repository, version); the lock also keeps two tasks from
    /// building or preparing one at once.
    envs: Mutex<Envs>,
    /// Each task's own commit's dependencies, by instance id.
    prepared: Mutex<BTreeMap<String, Result<(), Unavailable>>>,
    /// Repositories already reported as having no environment.
    reported: Mutex<BTreeSet<String>>,
    /// Under the WASI tier: the setups by (repository, version).
    wasi: Mutex<BTreeMap<(String, String), Result<Setup, Unavailable>>>,
}

impl<'a> Pool<'a> {
    /// A pool over `settings`' specs and environments directory; builds
    /// check out under `scratch`.
    pub fn new(settings: &'a EnvSettings, repos: &'a Repos, scratch: &Path) -> Pool<'a> {
        Pool {
            settings,
            repos,
            scratch: scratch.to_path_buf(),
            envs: Mutex::new(Envs::new()),
            prepared: Mutex::new(BTreeMap::new()),
            reported: Mutex::new(BTreeSet::new()),
            wasi: Mutex::new(BTreeMap::new()),
        }
    }

    /// The environments of all of `tasks`, built now (grading's warm-up).
    pub fn ensure(&self, tasks: &[Task]) {
        for t in tasks {
            let _ = self.setup(t);
        }
    }

    /// `task`'s setup: its (repository, version) environment, built on
    /// first need, with the task's commit's dependencies prepared.
    pub fn setup(&self, task: &Task) -> Result<Setup, Unavailable> {
        if let sandbox::Tier::Wasi(runtime) = &self.settings.host.tier {
            return self.wasi_setup(task, runtime);
        }
        let key = (task.repo.clone(), task.version.clone());
        let mut envs = self.envs.lock().unwrap_or_else(|e| e.into_inner());
        if !envs.contains_key(&key) {
            let plans = plans(std::slice::from_ref(task), self.settings, self.repos);
            envs.extend(ensure_envs(
                &plans,
                self.settings,
                self.repos,
                &self.scratch,
            ));
        }
        let (plan, env) = match envs.get(&key) {
            Some(Ok(pair)) => pair.clone(),
            Some(Err(e)) => return Err(e.clone()),
            None => return Err(Arc::new(EvalError::NotPlanned)),
        };
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if !prepared.contains_key(&task.instance_id) {
            prepared.extend(prepare_commits(
                std::slice::from_ref(task),
                &envs,
                self.settings,
                self.repos,
                &self.scratch,
            ));
        }
        if let Some(Err(e)) = prepared.get(&task.instance_id) {
            return Err(e.clone());
        }
        Ok(Setup {
            env,
            spec: Some(SpecSetup {
                wheelhouse: plan.wheelhouse(),
                downloads: plan.kept_downloads(),
                hash: plan.hash.clone(),
                spec: plan.spec,
                wasi: None,
            }),
        })
    }

    /// `task`'s setup under the WASI tier: the WASI environment of its
    /// spec (`env::wasi::ensure`), made on first need; a spec the tier
    /// cannot serve is [`EvalError::UnsupportedInTier`].
    fn wasi_setup(
        &self,
        task: &Task,
        runtime: &sandbox::WasiRuntime,
    ) -> Result<Setup, Unavailable> {
        let key = (task.repo.clone(), task.version.clone());
        let mut envs = self.wasi.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = envs.get(&key) {
            return known.clone();
        }
        let made = wasi_setup(task, runtime, self.settings).map_err(Arc::new);
        if let Err(e) = &made {
            tracing::warn!(repo = %task.repo, version = %task.version, "environment unavailable: {e}");
        }
        envs.insert(key, made.clone());
        made
    }

    /// The setup the agents of `task` work in: `given` (`--environment`)
    /// when set, else the task's own. Either way, what was used (or why
    /// there is none) for the task's result; a repository without one is
    /// logged once per pool.
    pub fn for_agents(
        &self,
        task: &Task,
        given: Option<&Path>,
    ) -> (Option<Setup>, EnvironmentUsed) {
        let mut used = EnvironmentUsed {
            source: EnvironmentSource::None,
            repo: task.repo.clone(),
            version: task.version.clone(),
            ..EnvironmentUsed::default()
        };
        if let Some(venv) = given {
            used.source = EnvironmentSource::Given;
            used.dir = Some(venv.to_path_buf());
            return match crate::env::Environment::open(venv) {
                Ok(env) => (Some(Setup::given(env)), used),
                Err(e) => {
                    used.error = Some(e.to_string());
                    (None, used)
                }
            };
        }
        match self.setup(task) {
            Ok(setup) => {
                used.source = EnvironmentSource::Spec;
                used.dir = Some(setup.env.venv.clone());
                used.hash = setup.spec.as_ref().map(|s| s.hash.clone());
                (Some(setup), used)
            }
            Err(e) => {
                let first = self
                    .reported
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(task.repo.clone());
                if first {
                    tracing::warn!(
                        "{} {}: no environment ({e}); its tasks run without their tests \
                         (give one with --environment, or a spec in datasets/envs)",
                        task.repo,
                        task.version
                    );
                }
                used.error = Some(e.to_string());
                (None, used)
            }
        }
    }
}

/// The WASI tier's setup of `task`: its spec, and the WASI environment of
/// it under the environments root (the environment's directory stands in
/// for the virtualenv).
pub fn wasi_setup(
    task: &Task,
    runtime: &sandbox::WasiRuntime,
    settings: &EnvSettings,
) -> Result<Setup, EvalError> {
    let spec = settings.specs.get(&task.repo, &task.version)?;
    let env = crate::env::wasi::ensure(&spec, runtime, &settings.envs_root, &settings.index)?;
    Ok(Setup {
        env: Environment {
            venv: env.dir.clone(),
            base_prefix: env.dir.clone(),
        },
        spec: Some(SpecSetup {
            spec,
            wheelhouse: env.dir.clone(),
            downloads: env.dir.clone(),
            hash: env.hash.clone(),
            wasi: Some(env),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::build::{Index, Pythons};
    use crate::env::spec::Specs;
    use crate::record::result::EnvironmentSource;

    fn task(repo: &str) -> Result<Task, serde_json::Error> {
        serde_json::from_value(serde_json::json!({
            "instance_id": "o__r-1", "repo": repo, "base_commit": "abc",
            "problem_statement": "it breaks", "version": "1.0",
        }))
    }

    #[test]
    fn the_agents_environment_is_the_override_the_spec_or_none_and_why(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let settings = EnvSettings {
            specs: Specs::default(),
            pythons: Pythons::discover_at(None, &[]),
            host: sandbox::Host::default(),
            envs_root: dir.path().join("envs"),
            index: Index::Online,
            jobs: 1,
            test_timeout_s: 60,
            run_empty: false,
            keep_work: false,
        };
        let repos = Repos::new(dir.path())?;
        let pool = Pool::new(&settings, &repos, dir.path());
        let t = task("o/r")?;

        // No spec, no override: none, and why.
        let (setup, used) = pool.for_agents(&t, None);
        assert!(setup.is_none());
        assert_eq!(
            (used.source, used.repo.as_str(), used.version.as_str()),
            (EnvironmentSource::None, "o/r", "1.0")
        );
        assert!(used.error.is_some_and(|e| e.contains("o/r")));

        // An override that is no virtualenv: given, and why it is unusable.
        let venv = dir.path().join("no-venv");
        let (setup, used) = pool.for_agents(&t, Some(&venv));
        assert!(setup.is_none());
        assert_eq!(used.source, EnvironmentSource::Given);
        assert_eq!(used.dir.as_deref(), Some(venv.as_path()));
        assert!(used.error.is_some());

        // A real virtualenv as the override: used as it is, no spec.
        std::fs::create_dir_all(venv.join("bin"))?;
        std::fs::write(
            venv.join("pyvenv.cfg"),
            format!("home = {}\n", dir.path().display()),
        )?;
        let (setup, used) = pool.for_agents(&t, Some(&venv));
        let setup = setup.ok_or("no setup from a real virtualenv")?;
        assert!(setup.spec.is_none());
        assert_eq!((used.source, used.error), (EnvironmentSource::Given, None));
        Ok(())
    }
}
