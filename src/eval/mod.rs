//! Offline grading with SWE-bench's rules. Per task: a fresh worktree at
//! the base commit, the repository installed into a [`Layer`] over the
//! (repository, version) environment, the model patch applied (`git
//! apply`, then `git apply --reject`, then `patch --fuzz=5`), the install
//! repeated, the test files reset and the task's test patch applied, the
//! test command run on the test files, and the log parsed and graded.
//! Every step that runs repository or model-written code runs in the
//! sandbox, with the network off.

pub mod grade;
pub mod pool;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use patchwright_sandbox as sandbox;

use crate::dataset::Task;
use crate::env::build::{self, quote, BuildError, Plan};
use crate::env::log;
use crate::env::spec::{Spec, SpecError};
use crate::env::task::{test_directives, InstallError, Setup, TaskEnv, INSTALL_TIMEOUT_S};
use crate::env::EnvSettings;
use crate::env::Environment;
use crate::record::grade::{self as graded, ErrorKind, InfraError, InstanceReport, Summary};
/// Reading predictions files lives with the other run files.
use crate::record::RecordError;
use crate::repo::{self, RepoError, Repos, Workspace};

/// SWE-bench's limit on one task's tests.
pub const DEFAULT_TEST_TIMEOUT_S: u64 = 1800;
/// Logs of verbose runners (Django at verbosity 2, sympy) reach a few MB.
pub const TEST_OUTPUT_BYTES: usize = 32 << 20;
/// A test run holds the repository's test data in memory (xarray, sympy).
pub const TEST_MEMORY_BYTES: u64 = 8 << 30;

/// Why grading could not start, or why a (repository, version) has no
/// environment or a task's commit could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The WASI tier's environment of a (repository, version) could not be
    /// made, or the tier cannot serve its spec.
    #[error(transparent)]
    Wasi(#[from] crate::env::wasi::WasiEnvError),
    /// [`evaluate_one`] was given no environment for the task.
    #[error("no environment was prepared for this task")]
    NoEnvironment,
    /// [`build_envs`] found no plan for a (repository, version).
    #[error("not planned")]
    NotPlanned,
    /// A predictions file names instances the task file does not have
    /// (SWE-bench: "Some prediction IDs not found in dataset!").
    #[error(
        "{}: predictions for instances not in the task file: {}; grade them with the task \
         file that has them",
        path.display(),
        ids.join(" ")
    )]
    UnknownPredictions { path: PathBuf, ids: Vec<String> },
}

impl EvalError {
    /// Why the sandbox's tier cannot serve the task, when that is the
    /// error.
    pub fn unsupported_in_tier(&self) -> Option<&str> {
        match self {
            EvalError::Wasi(e) => e.unsupported(),
            _ => None,
        }
    }
}

/// Why there is no plan, environment or prepared commit; shared, as the
/// same reason serves every task of a (repository, version).
pub type Unavailable = Arc<EvalError>;

/// The environment plan of each (repository, version), or why there is
/// none.
pub type Plans = BTreeMap<(String, String), Result<Plan, Unavailable>>;

/// The built environment of each (repository, version), or why there is
/// none.
pub type Envs = BTreeMap<(String, String), Result<(Plan, Environment), Unavailable>>;

/// The environment plan of each (repository, version) of `tasks`, or why
/// there is none.
pub fn plans(tasks: &[Task], settings: &EnvSettings, repos: &Repos) -> Plans {
    let mut out = BTreeMap::new();
    for t in tasks {
        let key = (t.repo.clone(), t.version.clone());
        if out.contains_key(&key) {
            continue;
        }
        let plan = (|| -> Result<Plan, EvalError> {
            let spec = settings.specs.get(&t.repo, &t.version)?;
            let source = repos.locate(&t.repo)?;
            let commit = setup_commit(t);
            Ok(Plan::resolve(
                &spec,
                &settings.pythons,
                &source,
                commit,
                &settings.envs_root,
            )?)
        })();
        out.insert(key, plan.map_err(Arc::new));
    }
    out
}

fn setup_commit(t: &Task) -> &str {
    if t.environment_setup_commit.is_empty() {
        &t.base_commit
    } else {
        &t.environment_setup_commit
    }
}

/// Builds (or finds built) the environment of every plan; the result per
/// (repository, version).
pub fn ensure_envs(plans: &Plans, settings: &EnvSettings, repos: &Repos, scratch: &Path) -> Envs {
    plans
        .iter()
        .map(|(key, plan)| {
            let built = plan.clone().and_then(|plan| {
                let ensured = (|| -> Result<Environment, EvalError> {
                    let source = repos.locate(&key.0)?;
                    Ok(plan.ensure(&source, &settings.index, &settings.host, scratch)?)
                })();
                ensured.map(|env| (plan, env)).map_err(Arc::new)
            });
            if let Err(e) = &built {
                tracing::warn!(repo = %key.0, version = %key.1, "environment unavailable: {e}");
            }
            (key.clone(), built)
        })
        .collect()
}

/// Downloads, for each task whose commit depends on other packages than
/// its environment's setup commit, those packages into the environment's
/// wheelhouse ([`Plan::prepare_commit`]). The result per instance id.
pub fn prepare_commits(
    tasks: &[Task],
    envs: &Envs,
    settings: &EnvSettings,
    repos: &Repos,
    scratch: &Path,
) -> BTreeMap<String, Result<(), Unavailable>> {
    tasks
        .iter()
        .filter_map(|t| {
            let (plan, _) = envs
                .get(&(t.repo.clone(), t.version.clone()))?
                .as_ref()
                .ok()?;
            let result = (|| -> Result<(), EvalError> {
                let source = repos.locate(&t.repo)?;
                Ok(plan.prepare_commit(
                    &source,
                    &t.base_commit,
                    &settings.index,
                    &settings.host,
                    scratch,
                )?)
            })()
            .map_err(Arc::new);
            if let Err(e) = &result {
                tracing::warn!("{}: {e}", t.instance_id);
            }
            Some((t.instance_id.clone(), result))
        })
        .collect()
}

/// Grades the tasks of `tasks` that have a patch in `patches` (by instance
/// id) into `out`: `out/report.json` (the summary over all of `tasks`; one
/// without a patch is incomplete, as SWE-bench counts a task without a
/// prediction) and `out/logs/<id>/` (report.json, test_output.txt,
/// run_instance.log, patch.diff). `on_done` sees each report as it
/// finishes.
pub fn evaluate_all(
    tasks: &[Task],
    patches: &BTreeMap<String, String>,
    settings: &EnvSettings,
    repos: &Repos,
    out: &Path,
    on_done: &(dyn Fn(&InstanceReport) + Sync),
) -> Result<Summary, EvalError> {
    let work = out.join(".work");
    std::fs::create_dir_all(&work).map_err(|source| EvalError::CreateDir {
        path: work.clone(),
        source,
    })?;
    let ids: Vec<String> = tasks.iter().map(|t| t.instance_id.clone()).collect();
    let tasks: Vec<&Task> = tasks
        .iter()
        .filter(|t| patches.contains_key(&t.instance_id))
        .collect();
    let needed: Vec<Task> = tasks
        .iter()
        .filter(|t| needs_run(patches.get(&t.instance_id).map(String::as_str), settings))
        .map(|t| (*t).clone())
        .collect();
    let pool = pool::Pool::new(settings, repos, &work);
    pool.ensure(&needed);
    let next = AtomicUsize::new(0);
    let reports = Mutex::new(Vec::new());
    let jobs = settings.jobs.max(1).min(tasks.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(task) = tasks.get(i).copied() else {
                    break;
                };
                let patch = patches.get(&task.instance_id).map(String::as_str);
                let report = grade_with(&pool, task, patch, out);
                on_done(&report);
                reports
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(report);
            });
        }
    });
    let reports = reports.into_inner().unwrap_or_else(|e| e.into_inner());
    let summary = Summary::new(&ids, &reports);
    graded::write_summary(out, &summary)?;
    if !settings.keep_work {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(summary)
}

fn needs_run(patch: Option<&str>, settings: &EnvSettings) -> bool {
    match patch {
        None => false,
        Some(p) => settings.run_empty || !p.trim().is_empty(),
    }
}

/// Grades `patch` for `task` in its environment from `pool` (built on
/// first need); the report goes under `out/logs/<id>/`. A panic (a bug)
/// ends this task's grading as an error in its report, not the run.
pub fn grade_with(
    pool: &pool::Pool<'_>,
    task: &Task,
    patch: Option<&str>,
    out: &Path,
) -> InstanceReport {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let setup = needs_run(patch, pool.settings).then(|| pool.setup(task));
        let setup = match &setup {
            Some(Ok(s)) => Ok(s),
            Some(Err(e)) => Err(&**e),
            None => Err(&EvalError::NoEnvironment),
        };
        evaluate_one(task, patch, setup, pool.settings, pool.repos, out)
    }))
    .unwrap_or_else(|_| {
        let mut r = InstanceReport::new(&task.instance_id, patch);
        r.error = Some(InfraError {
            kind: ErrorKind::Sandbox,
            message: "internal error (a bug in patchwright): see stderr".into(),
        });
        r
    })
}

/// Grades one task in `setup`'s environment; never fails: what went
/// wrong is in the report.
pub fn evaluate_one(
    task: &Task,
    patch: Option<&str>,
    setup: Result<&Setup, &EvalError>,
    settings: &EnvSettings,
    repos: &Repos,
    out: &Path,
) -> InstanceReport {
    let start = Instant::now();
    let mut report = InstanceReport::new(&task.instance_id, patch);
    let logdir = out.join("logs").join(&task.instance_id);
    let mut log = RunLog::default();
    if needs_run(patch, settings) {
        let patch = patch.unwrap_or_default();
        let _ = std::fs::create_dir_all(&logdir);
        let _ = std::fs::write(logdir.join("patch.diff"), patch);
        let work = out.join(".work").join(&task.instance_id);
        let result = setup
            .map_err(|e| InfraError {
                kind: if e.unsupported_in_tier().is_some() {
                    ErrorKind::UnsupportedInTier
                } else {
                    ErrorKind::EnvironmentMissing
                },
                message: e.to_string(),
            })
            .and_then(|setup| {
                let ctx = TaskRun {
                    setup,
                    host: &settings.host,
                    repos,
                    work: &work,
                    logdir: &logdir,
                    test_timeout_s: settings.test_timeout_s,
                };
                ctx.run(task, patch, &mut report, &mut log)
            });
        if let Err(e) = result {
            log.step(&format!("error ({:?}): {}", e.kind, e.message));
            report.error = Some(e);
        }
        if !settings.keep_work {
            let _ = std::fs::remove_dir_all(&work);
        }
        report.total_seconds = start.elapsed().as_secs_f64();
        let _ = std::fs::write(logdir.join("run_instance.log"), &log.text);
        if let Err(e) = graded::write_instance_report(&logdir, &report) {
            tracing::warn!("{}: {e}", task.instance_id);
        }
    }
    report
}

#[derive(Default)]
struct RunLog {
    text: String,
}

impl RunLog {
    fn step(&mut self, title: &str) {
        self.text.push_str(&format!("\n>>>>> {title}\n"));
    }
    fn output(&mut self, o: &sandbox::Outcome) {
        self.text.push_str(&o.output);
        self.text.push_str(&format!(
            "[exit status {}, {:.1} s]\n",
            o.cli_exit_code(),
            o.wall_time_secs
        ));
    }
}

struct TaskRun<'a> {
    setup: &'a Setup,
    host: &'a sandbox::Host,
    repos: &'a Repos,
    work: &'a Path,
    logdir: &'a Path,
    test_timeout_s: u64,
}

impl TaskRun<'_> {
    fn run(
        &self,
        task: &Task,
        patch: &str,
        report: &mut InstanceReport,
        log: &mut RunLog,
    ) -> Result<(), InfraError> {
        let Some(spec) = self.setup.spec.as_ref().map(|s| &s.spec) else {
            return Err(infra(ErrorKind::EnvironmentMissing)(
                "grading needs an environment built from a spec",
            ));
        };
        // 1. The repository installed at its base commit.
        let tree = self.install_base(task, spec, log)?;
        // 2. The model patch.
        tree.apply_model_patch(patch, report, log)?;
        // 3. Installed again with the patch.
        if !tree.install_patched(patch, report, log)? {
            return Ok(());
        }
        // What the installed commit needs and the environment lacks shows
        // here: a diagnosis, not a verdict.
        if !tree.wasi {
            log.step("pip check");
            let o = tree.run("python -m pip check".into(), 120)?;
            log.output(&o);
        }
        // 4. The test files as the test patch expects them, then the test patch.
        let files = tree.apply_test_patch(task, log)?;
        // 5. The tests, alone in their own sandbox run: the log is theirs.
        self.run_tests(&tree, task, &files, report, log)
    }

    /// A fresh worktree at the task's base commit with the repository
    /// installed into the task's layer (the same preparation the agents'
    /// worktrees get): an environment problem if this fails.
    fn install_base<'s>(
        &self,
        task: &Task,
        spec: &'s Spec,
        log: &mut RunLog,
    ) -> Result<Worktree<'s>, InfraError> {
        let TaskRun {
            setup,
            host,
            repos,
            work,
            ..
        } = *self;
        let source = repos
            .locate(&task.repo)
            .map_err(infra(ErrorKind::RepositoryMissing))?;
        let ws = Workspace::create(&source, &task.base_commit, &work.join("repo"))
            .map_err(infra(ErrorKind::RepositoryMissing))?;
        let inputs = work.join("inputs");
        std::fs::create_dir_all(&inputs).map_err(|e| {
            infra(ErrorKind::Sandbox)(format!("cannot create {}: {e}", inputs.display()))
        })?;
        // With the dependencies the commit declares: they are in the
        // environment, or in its wheelhouse when this commit needs others
        // (installed into the layer, which shadows the environment's).
        let install = setup.install_command().unwrap_or_default();

        log.step(&format!("install at base commit: {install}"));
        let task_env = match setup.install(host, ws.path(), &work.join("layer")) {
            Ok(installed) => {
                if let Some(o) = &installed.outcome {
                    log.output(o);
                }
                installed.task
            }
            Err(InstallError::Failed {
                status, outcome, ..
            }) => {
                log.output(&outcome);
                return Err(infra(ErrorKind::InstallFailed)(format!(
                    "the repository did not install at its base commit (status {status}); see \
                     run_instance.log"
                )));
            }
            Err(InstallError::Layer(e)) => return Err(infra(ErrorKind::EnvironmentMissing)(e)),
            Err(e) => return Err(infra(ErrorKind::Sandbox)(e)),
        };
        let mut policy = task_env
            .policy(ws.path())
            .map_err(infra(ErrorKind::Sandbox))?;
        // Created by the program for this task.
        policy.allowed_in_home.push(inputs.clone());
        policy.extra_ro_binds.push(inputs.clone());
        repo::commit_all(ws.path(), "patchwright: installed").map_err(infra(ErrorKind::Sandbox))?;
        Ok(Worktree {
            spec,
            ws,
            inputs,
            install,
            wasi: setup.spec.as_ref().is_some_and(|s| s.wasi.is_some()),
            task_env,
            policy,
        })
    }

    /// Runs the task's test script on `files` and grades its log into
    /// `report`; the output goes to `test_output.txt`.
    fn run_tests(
        &self,
        tree: &Worktree<'_>,
        task: &Task,
        files: &[String],
        report: &mut InstanceReport,
        log: &mut RunLog,
    ) -> Result<(), InfraError> {
        let spec = tree.spec;
        let test_timeout_s = self.test_timeout_s;
        let directives = test_directives(files, spec.test_directives);
        let script = tree.task_env.test_script(files);
        log.step(&format!(
            "tests: {} {}",
            spec.test_cmd,
            directives.join(" ")
        ));
        let mut p = tree.policy.clone();
        p.limits.timeout_ms = test_timeout_s * 1000;
        p.limits.output_bytes = TEST_OUTPUT_BYTES;
        p.limits.memory_bytes = TEST_MEMORY_BYTES;
        let o = sandbox::run(&p, &["bash".into(), "-c".into(), script]).map_err(|e| {
            let kind = match e {
                // The tier refused the test script (not Python): nothing ran.
                sandbox::SandboxError::Unsupported { .. } => ErrorKind::UnsupportedInTier,
                _ => ErrorKind::Sandbox,
            };
            infra(kind)(e)
        })?;
        log.text += &format!(
            "[exit status {}, {:.1} s; output in test_output.txt]\n",
            o.cli_exit_code(),
            o.wall_time_secs
        );
        report.test_seconds = o.wall_time_secs;
        report.test_exit_code = o.exit_code;
        let _ = std::fs::write(self.logdir.join("test_output.txt"), &o.output);
        if o.timed_out {
            return Err(infra(ErrorKind::Timeout)(format!(
                "the tests ran past {} s",
                test_timeout_s
            )));
        }
        let mut statuses = log::parse(spec.log_format, &o.output);
        if let Some(why) = grade::distrust(&statuses, o.exit_code) {
            log.step(&why);
            report.untrusted_log = Some(why);
            statuses.clear();
        }
        let status = grade::grade(&task.fail_to_pass, &task.pass_to_pass, &statuses);
        report.resolved = status.resolved();
        let offline = status.only_network_failures(&spec.network_tests);
        report.tests_status = Some(status);
        if let Some(tests) = offline {
            return Err(infra(ErrorKind::NeedsNetwork)(format!(
                "the only failing tests need the real network (the spec's network_tests): {}",
                tests.join(", ")
            )));
        }
        Ok(())
    }
}

/// A task's worktree with the repository installed at its base commit,
/// and the sandbox policy its commands run under.
struct Worktree<'a> {
    spec: &'a Spec,
    ws: Workspace,
    /// The files the program writes for the task (the patches), bound
    /// read-only into the sandbox.
    inputs: PathBuf,
    /// The install command, run again with the patch when needed.
    install: String,
    /// The WASI tier: it runs only Python, not git.
    wasi: bool,
    task_env: TaskEnv,
    policy: sandbox::Policy,
}

impl Worktree<'_> {
    /// Writes `text` to `name` in the task's inputs.
    fn write_input(&self, name: &str, text: &str) -> Result<PathBuf, InfraError> {
        let p = self.inputs.join(name);
        std::fs::write(&p, text)
            .map_err(|e| infra(ErrorKind::Sandbox)(format!("write {}: {e}", p.display())))?;
        Ok(p)
    }

    /// Runs `cmd` in bash in the sandbox, for at most `timeout_s`.
    fn run(&self, cmd: String, timeout_s: u64) -> Result<sandbox::Outcome, InfraError> {
        let mut p = self.policy.clone();
        p.limits.timeout_ms = timeout_s * 1000;
        sandbox::run(&p, &["bash".into(), "-c".into(), cmd]).map_err(infra(ErrorKind::Sandbox))
    }

    /// Applies the model patch with git apply, then git apply --reject,
    /// then patch --fuzz=5; an error when none applies it.
    fn apply_model_patch(
        &self,
        patch: &str,
        report: &mut InstanceReport,
        log: &mut RunLog,
    ) -> Result<(), InfraError> {
        let ws = &self.ws;
        let wasi = self.wasi;
        let patch_file = self.write_input("model.diff", patch)?;
        let p = quote(&patch_file.to_string_lossy());
        let attempts = [
            ("git apply", format!("git apply --verbose {p}")),
            (
                "git apply --reject",
                format!("git apply --verbose --reject {p}"),
            ),
            (
                "patch --fuzz=5",
                format!("patch --batch --fuzz=5 -p1 -i {p}"),
            ),
        ];
        if patch.trim().is_empty() {
            report.patch_successfully_applied = true;
        }
        // The WASI tier runs only Python, not git: the host's `git apply`
        // applies the patch (it writes only inside the worktree, refusing
        // paths outside it and beyond symbolic links, and runs nothing).
        if wasi && !patch.trim().is_empty() {
            log.step(
                "apply the model patch: git apply (on the host: the WASI tier runs only Python)",
            );
            match repo::apply_patch(ws.path(), patch) {
                Ok(()) => {
                    report.patch_successfully_applied = true;
                    report.applied_with = Some("git apply".into());
                }
                Err(e) => {
                    log.text += &format!("{e}\n");
                    repo::reset_worktree(ws.path()).map_err(infra(ErrorKind::Sandbox))?;
                }
            }
        }
        for (name, cmd) in attempts
            .iter()
            .filter(|_| !wasi && !patch.trim().is_empty())
        {
            log.step(&format!("apply the model patch: {cmd}"));
            let o = self.run(cmd.clone(), 120)?;
            log.output(&o);
            if o.success() {
                report.patch_successfully_applied = true;
                report.applied_with = Some(name.to_string());
                break;
            }
            repo::reset_worktree(ws.path()).map_err(infra(ErrorKind::Sandbox))?;
        }
        if !report.patch_successfully_applied {
            return Err(infra(ErrorKind::PatchApplyFailed)(
                "the model patch applied neither with git apply, git apply --reject nor patch \
                 --fuzz=5 (see run_instance.log)",
            ));
        }
        Ok(())
    }

    /// Installs the patched repository again (as SWE-bench does) when the
    /// patch needs it. False when that install failed: the task is
    /// unresolved, and graded no further.
    fn install_patched(
        &self,
        patch: &str,
        report: &mut InstanceReport,
        log: &mut RunLog,
    ) -> Result<bool, InfraError> {
        // An editable install already sees the patched sources: it is
        // redone only when the patch could change what the install does. A
        // failure here is the patch's, and it cannot be left to the tests:
        // they would import the copy the base install left in the layer,
        // not the patched sources (a model patch that broke
        // `requests/models.py` graded resolved that way).
        if self.wasi {
            log.step(
                "install with the patch: not needed (the WASI tier imports the worktree itself)",
            );
        } else if needs_reinstall(&self.spec.install, patch) {
            log.step(&format!("install with the patch: {}", self.install));
            let o = self.run(self.install.clone(), INSTALL_TIMEOUT_S)?;
            log.output(&o);
            if !o.success() {
                log.step(
                    "the patched repository did not install: the tests would run the unpatched \
                     copy of the base install; unresolved",
                );
                report.patched_install_failed = true;
                return Ok(false);
            }
        } else {
            log.step("install with the patch: not needed (editable install, no packaging file or new file in the patch)");
        }
        Ok(true)
    }

    /// Restores the files the task's test patch touches and applies it;
    /// those files, which the tests run on.
    fn apply_test_patch(&self, task: &Task, log: &mut RunLog) -> Result<Vec<String>, InfraError> {
        let ws = &self.ws;
        let files = patch_files(&task.test_patch);
        repo::restore_paths(ws.path(), &files).map_err(infra(ErrorKind::TestPatchFailed))?;
        let test_patch = self.write_input("test.diff", &task.test_patch)?;
        log.step("apply the test patch");
        if self.wasi {
            // The host's git, as for the model patch above.
            repo::apply_patch(ws.path(), &task.test_patch).map_err(|e| {
                infra(ErrorKind::TestPatchFailed)(format!(
                    "the task's test patch did not apply: {e}"
                ))
            })?;
            log.text += "[applied on the host with git apply]\n";
        } else {
            let o = self.run(
                format!(
                    "git apply --verbose {}",
                    quote(&test_patch.to_string_lossy())
                ),
                120,
            )?;
            log.output(&o);
            if !o.success() {
                return Err(infra(ErrorKind::TestPatchFailed)(format!(
                    "the task's test patch did not apply (status {})",
                    o.cli_exit_code()
                )));
            }
        }
        Ok(files)
    }
}

/// An infrastructure error of `kind`, its message `e`'s text.
fn infra<E: std::fmt::Display>(kind: ErrorKind) -> impl Fn(E) -> InfraError {
    move |e| InfraError {
        kind,
        message: e.to_string(),
    }
}

/// Whether the install must run again after `patch`: not an editable
/// install, or the patch touches a packaging file or adds a file (an
/// editable install maps packages, and may miss a new one).
pub fn needs_reinstall(install: &str, patch: &str) -> bool {
    let editable = install.contains(" -e ") || install.contains("--editable");
    let packaging = patch_files(patch)
        .iter()
        .any(|f| build::DEPENDENCY_FILES.contains(&f.as_str()) || f == "MANIFEST.in");
    !patch.trim().is_empty() && (!editable || packaging || patch.contains("\nnew file mode"))
}

/// The files a patch touches (the `b/` side of each `diff --git`).
pub fn patch_files(patch: &str) -> Vec<String> {
    patch
        .lines()
        .filter_map(|l| l.strip_prefix("diff --git a/"))
        .filter_map(|rest| rest.split_once(" b/").map(|(_, b)| b.to_string()))
        .collect()
}

/// What `env build` did for one (repository, version); serialised as
/// `env build --json` prints it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EnvBuilt {
    pub repo: String,
    pub version: String,
    /// Built (or found built), and usable.
    pub ok: bool,
    /// The interpreter's version, when built.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    /// The environment's virtualenv, when built.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// It was built before this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reused: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// `id: why` of each task whose own commit's dependencies could not be
    /// prepared, when built.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_dependency_errors: Option<Vec<String>>,
    /// Why it could not be built.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl EnvBuilt {
    /// Built, and every task's dependencies prepared.
    pub fn complete(&self) -> bool {
        self.ok
            && self
                .task_dependency_errors
                .as_ref()
                .is_none_or(Vec::is_empty)
    }
}

/// Why [`build_envs`] could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot create a scratch directory: {0}")]
pub struct ScratchError(#[source] std::io::Error);

/// Builds the environment of every (repository, version) of `tasks` that is
/// not built yet, one at a time, and prepares each task's own commit's
/// dependencies in it. `started(i, n, repo, version)` is called before each
/// (0-based `i` of `n`), `done` after.
pub fn build_envs(
    tasks: &[Task],
    settings: &EnvSettings,
    repos: &Repos,
    started: &mut dyn FnMut(usize, usize, &str, &str),
    done: &mut dyn FnMut(&EnvBuilt),
) -> Result<Vec<EnvBuilt>, ScratchError> {
    if let sandbox::Tier::Wasi(runtime) = &settings.host.tier {
        return Ok(build_wasi_envs(tasks, settings, runtime, started, done));
    }
    let plans = plans(tasks, settings, repos);
    let scratch = tempfile::Builder::new()
        .prefix("patchwright-env-")
        .tempdir()
        .map_err(ScratchError)?;
    let mut rows = Vec::new();
    for (i, ((repo, version), plan)) in plans.iter().enumerate() {
        started(i, plans.len(), repo, version);
        let start = Instant::now();
        let one = BTreeMap::from([((repo.clone(), version.clone()), plan.clone())]);
        let was_built = plan.as_ref().is_ok_and(|p| p.is_built());
        let built = ensure_envs(&one, settings, repos, scratch.path());
        let of_env: Vec<Task> = tasks
            .iter()
            .filter(|t| &t.repo == repo && &t.version == version)
            .cloned()
            .collect();
        let prepared = prepare_commits(&of_env, &built, settings, repos, scratch.path());
        let unprepared: Vec<String> = prepared
            .iter()
            .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("{id}: {e}")))
            .collect();
        let result = built
            .into_values()
            .next()
            .unwrap_or_else(|| Err(Arc::new(EvalError::NotPlanned)));
        let mut row = EnvBuilt {
            repo: repo.clone(),
            version: version.clone(),
            ok: result.is_ok(),
            python: None,
            dir: None,
            reused: None,
            seconds: None,
            task_dependency_errors: None,
            error: None,
        };
        match result {
            Ok((plan, env)) => {
                row.python = Some(plan.interpreter.version);
                row.dir = Some(env.venv);
                row.reused = Some(was_built);
                row.seconds = Some(start.elapsed().as_secs_f64());
                row.task_dependency_errors = Some(unprepared);
            }
            Err(e) => row.error = Some(e.to_string()),
        }
        done(&row);
        rows.push(row);
    }
    Ok(rows)
}

/// [`build_envs`] under the WASI tier: the WASI environment of each
/// (repository, version), or why the tier cannot serve it.
fn build_wasi_envs(
    tasks: &[Task],
    settings: &EnvSettings,
    runtime: &sandbox::WasiRuntime,
    started: &mut dyn FnMut(usize, usize, &str, &str),
    done: &mut dyn FnMut(&EnvBuilt),
) -> Vec<EnvBuilt> {
    let mut keys: Vec<(&Task, (String, String))> = Vec::new();
    for t in tasks {
        let key = (t.repo.clone(), t.version.clone());
        if !keys.iter().any(|(_, k)| *k == key) {
            keys.push((t, key));
        }
    }
    keys.sort_by(|a, b| a.1.cmp(&b.1));
    let mut rows = Vec::new();
    for (i, (task, (repo, version))) in keys.iter().enumerate() {
        started(i, keys.len(), repo, version);
        let start = Instant::now();
        let was_built = settings.specs.get(repo, version).ok().is_some_and(|spec| {
            crate::env::wasi::env_dir(&spec, &settings.envs_root)
                .join(crate::env::wasi::ENV_RECORD)
                .is_file()
        });
        let mut row = EnvBuilt {
            repo: repo.clone(),
            version: version.clone(),
            ok: false,
            python: None,
            dir: None,
            reused: None,
            seconds: None,
            task_dependency_errors: None,
            error: None,
        };
        match pool::wasi_setup(task, runtime, settings) {
            Ok(setup) => {
                row.ok = true;
                row.python = Some(crate::env::wasi::RUNTIME_PYTHON.to_string());
                row.dir = Some(setup.env.venv);
                row.reused = Some(was_built);
                row.seconds = Some(start.elapsed().as_secs_f64());
                row.task_dependency_errors = Some(Vec::new());
            }
            Err(e) => row.error = Some(e.to_string()),
        }
        done(&row);
        rows.push(row);
    }
    rows
}

/// Which patches [`evaluate_all`] grades.
#[derive(Debug, Clone, Copy)]
pub enum PatchSource<'a> {
    /// Each task's reference patch.
    Gold,
    /// An empty patch for every task.
    Empty,
    /// The predictions file at this path (see [`crate::record::result::load_predictions`]).
    Predictions(&'a Path),
}

/// The patch to grade for each task of `tasks` (by instance id), from
/// `source`. A predictions file may miss tasks (they are not graded) and
/// name tasks of the file that are not selected (left out), but not an
/// instance `in_file` (the whole task file's ids) lacks.
pub fn choose_patches(
    tasks: &[Task],
    in_file: &BTreeSet<String>,
    source: PatchSource<'_>,
) -> Result<BTreeMap<String, String>, EvalError> {
    Ok(match source {
        PatchSource::Gold => tasks
            .iter()
            .map(|t| (t.instance_id.clone(), t.patch.clone()))
            .collect(),
        PatchSource::Empty => tasks
            .iter()
            .map(|t| (t.instance_id.clone(), String::new()))
            .collect(),
        PatchSource::Predictions(path) => {
            let mut predicted = crate::record::result::load_predictions(path)?;
            let unknown: Vec<String> = predicted
                .keys()
                .filter(|id| !in_file.contains(*id))
                .cloned()
                .collect();
            if !unknown.is_empty() {
                return Err(EvalError::UnknownPredictions {
                    path: path.to_path_buf(),
                    ids: unknown,
                });
            }
            let selected: BTreeSet<&str> = tasks.iter().map(|t| t.instance_id.as_str()).collect();
            predicted.retain(|id, _| selected.contains(id.as_str()));
            predicted
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reinstall_only_when_the_patch_can_change_the_install() {
        let edit = "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n";
        let setup = "diff --git a/setup.py b/setup.py\n--- a/setup.py\n+++ b/setup.py\n";
        let new = "diff --git a/pkg/new.py b/pkg/new.py\nnew file mode 100644\n--- /dev/null\n";
        let editable = "python -m pip install -e .";
        let cases = [
            (editable, edit, false),
            (editable, setup, true),
            (editable, new, true),
            (editable, "", false),
            ("python -m pip install .", edit, true),
            ("python -m pip install .", "", false),
        ];
        for (install, patch, want) in cases {
            assert_eq!(needs_reinstall(install, patch), want, "{install} / {patch}");
        }
    }

    #[test]
    fn directives_follow_swe_bench() {
        use crate::env::spec::Directives;
        let patch =
            "diff --git a/tests/utils_tests/test_text.py b/tests/utils_tests/test_text.py\n\
                     --- a/x\n+++ b/x\n\
                     diff --git a/tests/fixtures/data.json b/tests/fixtures/data.json\n\
                     diff --git a/tests/migrations/test_ops.py b/tests/migrations/test_ops.py\n";
        let files = patch_files(patch);
        assert_eq!(files.len(), 3);
        assert_eq!(
            test_directives(&files, Directives::Django),
            ["utils_tests.test_text", "migrations.test_ops"]
        );
        assert_eq!(
            test_directives(&files, Directives::Files),
            [
                "tests/utils_tests/test_text.py",
                "tests/migrations/test_ops.py"
            ]
        );
    }
}
