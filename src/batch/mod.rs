//! Batches: running the pipeline over a selection of tasks against one
//! loaded model, and writing the run directory.
//!
//! Run directory layout:
//!
//! ```text
//! RUN_DIR/run.json                    resolved settings, model sha256, versions, summary
//! RUN_DIR/predictions.jsonl           SWE-bench predictions, rebuilt from results/
//! RUN_DIR/results/<id>.json           one task's outcome (status, error, patch, counts)
//! RUN_DIR/trajectories/<id>.json      every model call and step of one task
//! RUN_DIR/workspaces/<id>/            a task's workspace while it runs (kept with --keep-workspaces)
//! RUN_DIR/artifacts/<id>/             the MASAI stages' outputs
//! RUN_DIR/eval/                       grades with --evaluate (logs/<id>/, report.json)
//! ```
//!
//! Tasks run K at a time ([`Options::jobs`]), each in its own workspace,
//! against one backend (the scheduler batches their model calls). A task's
//! failure is recorded as that task's error; the batch goes on.
//!
//! Exactly once: every file is written atomically (to a temporary name,
//! then renamed), and a task's result is written last, so its presence
//! means the task finished. Running the same batch again skips finished
//! tasks (grading any that finished but were not graded) and redoes the
//! others; `predictions.jsonl` is rebuilt from the results after every
//! task. A `kill -9` loses at most the tasks in flight.

pub mod merge;
pub mod progress;
pub mod run;
pub mod rundir;
pub mod sweep;

use crate::record::result::{EnvironmentUsed, Status, TaskError, TaskErrorKind, TaskResult};
use crate::record::run::Summary;
use crate::record::write_json;
pub use run::{RunContext, RunOutcome};
pub use rundir::{Opened, RunDir};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use crate::aci::check::RunTestError;
use crate::config::Kind;
use crate::config::Settings;
use crate::dataset::Task;
use crate::engine::{Backend, EngineError};
use crate::env::task::TaskEnv;
use crate::env::EnvError;
use crate::eval::{self, pool::Pool};
use crate::pipeline::{self, masai::MasaiError};
use crate::record::grade::{self as grades, InstanceReport};
use crate::record::metrics::{Metrics, Summary as MetricsSummary};
use crate::record::trajectory::TrajectoryFile;
use crate::record::RecordError;
use crate::repo::{RepoError, Repos, Workspace};
use crate::trajectory::{StageObserver, Trajectory};

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Repo(#[from] crate::repo::RepoError),
    #[error(
        "{path} holds another run ({difference}): choose another --out, or delete it to start over"
    )]
    Different { path: PathBuf, difference: String },
    #[error("{0}")]
    Invalid(String),
}

impl BatchError {
    /// An IO error's mapping, naming what was done to which path:
    /// `.map_err(BatchError::io("create", dir))`.
    pub fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BatchError {
        let path = path.to_path_buf();
        move |source| BatchError::Io {
            action,
            path,
            source,
        }
    }
}

/// What a batch needs besides its tasks.
pub struct Batch<'a> {
    /// Answers every model call of the pipeline.
    pub backend: &'a dyn Backend,
    pub settings: &'a Settings,
    pub repos: &'a Repos,
    pub run: &'a RunDir,
    /// `model_name_or_path` for the predictions.
    pub model_name: String,
    /// The model file or server, for the trajectories.
    pub model: String,
    /// Stages shared with other runs (a sweep's), see
    /// [`pipeline::masai::Dirs::shared`].
    pub shared: Option<PathBuf>,
    /// Every task of the run directory, in order: this selection and those
    /// of earlier runs into it. `predictions.jsonl` and `metrics.json`
    /// cover them all.
    pub ids: Vec<String>,
    /// The tasks' environments: the agents', the Ranker's, the metrics'
    /// and grading's.
    pub envs: &'a Pool<'a>,
}

/// How a batch runs its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Tasks in flight at once (none: the default for where the model
    /// runs, `backing::jobs_for`; a batch runs with its backing's).
    pub jobs: Option<usize>,
    /// Run finished tasks again.
    pub redo: bool,
}

/// What happens in a batch, as it happens (for a progress display).
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// The tasks to run now, and those finished by an earlier run.
    Planned {
        run: usize,
        finished: usize,
    },
    Started {
        id: &'a str,
    },
    Stage {
        id: &'a str,
        stage: &'a str,
    },
    Grading {
        id: &'a str,
    },
    Finished {
        result: &'a TaskResult,
        resolved: Option<bool>,
        summary: &'a Summary,
    },
}

/// Where a batch's events go.
pub type Sink = std::sync::Arc<dyn Fn(Event<'_>) + Send + Sync>;

/// The stored grade of task `id` under `out`, if it was graded.
fn stored_grade(id: &str, out: &Path) -> Option<InstanceReport> {
    grades::stored_report(out, id)
}

/// What is left to do for a task.
enum Work {
    Solve,
    /// Finished by an earlier run but not graded.
    Grade(Box<TaskResult>),
}

/// Shared by the workers of [`Batch::run_all`].
struct Progress {
    summary: Summary,
    reports: Vec<InstanceReport>,
    error: Option<BatchError>,
}

impl Batch<'_> {
    /// Where `--evaluate` grades go.
    pub fn eval_dir(&self) -> PathBuf {
        self.run.root().join("eval")
    }

    /// Runs `tasks`, `options.jobs` at a time, skipping the finished ones
    /// unless `options.redo`; grades each when `evaluate`. Returns
    /// the summary over all of `tasks` (finished earlier or now). `Err`
    /// means the run directory could not be written; the tasks in flight
    /// still finish first.
    pub fn run_all(
        &self,
        tasks: &[Task],
        options: Options,
        evaluate: bool,
        on: &Sink,
    ) -> Result<Summary, BatchError> {
        let started = Instant::now();
        let eval_dir = self.eval_dir();
        if evaluate {
            std::fs::create_dir_all(&eval_dir).map_err(|source| BatchError::Io {
                action: "create",
                path: eval_dir.clone(),
                source,
            })?;
        }
        let mut progress = Progress {
            summary: Summary::default(),
            reports: Vec::new(),
            error: None,
        };
        let mut todo: Vec<(&Task, Work)> = Vec::new();
        for task in tasks {
            let done = if options.redo {
                None
            } else {
                self.run.finished(&task.instance_id)?
            };
            match (done, evaluate) {
                (None, _) => todo.push((task, Work::Solve)),
                (Some(r), true) => match stored_grade(&task.instance_id, &eval_dir) {
                    Some(report) => {
                        progress.summary.add(&r);
                        progress.reports.push(report);
                    }
                    None => todo.push((task, Work::Grade(Box::new(r)))),
                },
                (Some(r), false) => progress.summary.add(&r),
            }
        }
        if evaluate {
            progress.summary.resolved =
                Some(progress.reports.iter().filter(|r| r.resolved).count());
        }
        on(Event::Planned {
            run: todo.len(),
            finished: tasks.len() - todo.len(),
        });
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let progress = Mutex::new(progress);
        let worker = || {
            while !stop.load(Ordering::Relaxed) {
                let Some((task, work)) = todo.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return;
                };
                let id = task.instance_id.as_str();
                let result = match work {
                    Work::Grade(r) => (**r).clone(),
                    Work::Solve => {
                        on(Event::Started { id });
                        match self.run_task(task, on) {
                            Ok(r) => r,
                            Err(e) => {
                                let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                                p.error.get_or_insert(e);
                                stop.store(true, Ordering::Relaxed);
                                return;
                            }
                        }
                    }
                };
                let report = evaluate.then(|| {
                    on(Event::Grading { id });
                    eval::grade_with(self.envs, task, Some(&result.model_patch), &eval_dir)
                });
                let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                p.summary.add(&result);
                if let Some(report) = report.clone() {
                    p.reports.push(report);
                    p.summary.resolved = Some(p.reports.iter().filter(|r| r.resolved).count());
                }
                if let Err(e) = self.write_predictions() {
                    p.error.get_or_insert(e);
                    stop.store(true, Ordering::Relaxed);
                }
                on(Event::Finished {
                    result: &result,
                    resolved: report.map(|r| r.resolved),
                    summary: &p.summary,
                });
            }
        };
        std::thread::scope(|scope| {
            let jobs = options.jobs.unwrap_or(crate::backing::DEFAULT_JOBS).max(1);
            for _ in 0..jobs.min(todo.len().max(1)) {
                scope.spawn(worker);
            }
        });
        let mut progress = progress.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = progress.error.take() {
            return Err(e);
        }
        self.write_predictions()?;
        if evaluate {
            // Over the whole run: this selection's grades, and the stored
            // ones of tasks graded by earlier runs into the directory.
            let mut reports = std::mem::take(&mut progress.reports);
            for id in &self.ids {
                if !reports.iter().any(|r| &r.instance_id == id) {
                    reports.extend(stored_grade(id, &eval_dir));
                }
            }
            grades::write_summary(&eval_dir, &grades::Summary::new(&self.ids, &reports))?;
        }
        let mut summary = progress.summary;
        summary.elapsed_s = started.elapsed().as_secs_f64();
        Ok(summary)
    }

    /// Runs one task to its result and records its trajectory. Whatever goes
    /// wrong with the task becomes its error; `Err` means only that the run
    /// directory could not be written.
    pub fn run_task(&self, task: &Task, on: &Sink) -> Result<TaskResult, BatchError> {
        let started = Instant::now();
        let mut trajectory = Trajectory::new(&task.instance_id);
        let (id, sink) = (task.instance_id.clone(), on.clone());
        trajectory.observe_stages(StageObserver(Box::new(move |stage| {
            sink(Event::Stage { id: &id, stage })
        })));
        // A panic in one task (a bug) becomes that task's error, not the
        // end of the batch.
        let mut environment = None;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.attempt(task, &mut trajectory, &mut environment)
        }))
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Failure::Panic(what))
        });
        let (status, error, model_patch, metrics) = match outcome {
            Ok((patch, m)) if patch.is_empty() => (Status::NoPatch, None, patch, m),
            Ok((patch, m)) => (Status::Patched, None, patch, m),
            Err(e) => (Status::Error, Some(e.task_error()), String::new(), None),
        };
        let result = TaskResult {
            instance_id: task.instance_id.clone(),
            status,
            error,
            model_patch,
            elapsed_s: started.elapsed().as_secs_f64(),
            model_calls: trajectory.model_calls().count(),
            prompt_tokens: trajectory.model_calls().map(|c| c.prompt_tokens).sum(),
            completion_tokens: trajectory.model_calls().map(|c| c.completion_tokens).sum(),
            metrics,
            environment,
        };
        write_json(
            &self.run.trajectory(&task.instance_id),
            &TrajectoryFile {
                result: Some(result.clone()),
                model: self.model.clone(),
                steps: std::mem::take(&mut trajectory.steps),
            },
        )?;
        // The result is written last: its presence means the task finished.
        write_json(&self.run.result(&task.instance_id), &result)?;
        Ok(result)
    }

    /// Solves `task` in a fresh workspace; `environment` is told the
    /// environment its agents used (MASAI).
    fn attempt(
        &self,
        task: &Task,
        trajectory: &mut Trajectory,
        environment: &mut Option<EnvironmentUsed>,
    ) -> Result<(String, Option<Metrics>), Failure> {
        let source = self.repos.locate(&task.repo)?;
        let workspace = Workspace::create(
            &source,
            &task.base_commit,
            &self.run.workspace(&task.instance_id),
        )?;
        let outcome = match self.settings.pipeline.kind {
            Kind::First => pipeline::first::run(
                self.backend,
                self.settings,
                &task.issue(),
                &workspace,
                trajectory,
            )
            .map(|patch| (patch, None))
            .map_err(Failure::First),
            Kind::Masai => self.masai(task, &workspace, trajectory, environment),
        };
        if !self.settings.keep_workspaces {
            if let Err(e) = workspace.remove() {
                tracing::warn!("{}: {e}", task.instance_id);
            }
        }
        outcome
    }

    fn masai(
        &self,
        task: &Task,
        workspace: &Workspace,
        trajectory: &mut Trajectory,
        environment: &mut Option<EnvironmentUsed>,
    ) -> Result<(String, Option<Metrics>), Failure> {
        let id = &task.instance_id;
        let dirs = pipeline::masai::Dirs {
            artifacts: self.run.artifacts(id),
            scratch: self.run.scratch(id),
            shared: self.shared.clone(),
        };
        let (artifacts, scratch) = (&dirs.artifacts, &dirs.scratch);
        // The task's environment, the repository installed at its commit
        // in the workspace (as grading installs it).
        let (setup, mut used) = self
            .envs
            .for_agents(task, self.settings.environment.as_deref());
        let host = &self.envs.settings.host;
        let env = match &setup {
            Some(setup) => {
                tracing::info!("{id}: installing the repository into its environment");
                trajectory.stage("environment");
                match setup.install(host, workspace.path(), &scratch.join("layer")) {
                    Ok(installed) => installed.task,
                    Err(e) => {
                        tracing::warn!("{id}: {e}; its agents run without their tests");
                        used.error = Some(e.to_string());
                        TaskEnv::bare(host)
                    }
                }
            }
            None => TaskEnv::bare(host),
        };
        *environment = Some(used);
        let outcome = pipeline::masai::run(
            self.backend,
            self.settings,
            &task.issue(),
            workspace,
            &env,
            &dirs,
            trajectory,
        )?;
        // Metrics need the gold patch; computed after the run, never shown
        // to the agents.
        let metrics = (!task.patch.trim().is_empty()).then(|| {
            tracing::info!("{id}: stage metrics");
            trajectory.stage("metrics");
            pipeline::metrics::compute(
                task,
                workspace,
                &env,
                self.envs,
                &outcome,
                &trajectory.steps,
                scratch,
            )
        });
        if let Some(m) = &metrics {
            write_json(&artifacts.join("metrics.json"), m)?;
        }
        // Scratch worktrees are disposable; a leftover is harmless.
        let _ = std::fs::remove_dir_all(scratch);
        Ok((outcome.patch, metrics))
    }

    /// The summary over every task of the run directory ([`Batch::ids`]),
    /// from the stored results, and the stored grades when `graded`.
    pub fn run_summary(&self, graded: bool, elapsed_s: f64) -> Result<Summary, BatchError> {
        let mut summary = Summary {
            elapsed_s,
            ..Summary::default()
        };
        let mut resolved = 0;
        for id in &self.ids {
            if let Some(r) = self.run.finished(id)? {
                summary.add(&r);
            }
            if graded && stored_grade(id, &self.eval_dir()).is_some_and(|g| g.resolved) {
                resolved += 1;
            }
        }
        summary.resolved = graded.then_some(resolved);
        Ok(summary)
    }

    /// Sums the stage metrics of the run's tasks that have them into
    /// `metrics.json`.
    pub fn write_metrics(&self) -> Result<MetricsSummary, BatchError> {
        self.run.write_metrics(self.ids.iter().map(String::as_str))
    }

    /// Rebuilds `predictions.jsonl` from the stored results of the run's
    /// tasks.
    pub fn write_predictions(&self) -> Result<usize, BatchError> {
        // One rebuild at a time: two workers finishing together must not
        // let the older view win the rename.
        static LOCK: Mutex<()> = Mutex::new(());
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        self.run
            .write_predictions(self.ids.iter().map(String::as_str), &self.model_name)
    }
}

/// Why a task failed, as far as the batch can tell.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Environment(#[from] EnvError),
    #[error(transparent)]
    Masai(#[from] MasaiError),
    #[error(transparent)]
    First(pipeline::first::PipelineError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("internal error (a bug in patchwright): {0}")]
    Panic(String),
}

impl Failure {
    /// The stored error: the message, and the kind of failure (the one
    /// place that maps failures to kinds).
    fn task_error(&self) -> TaskError {
        TaskError::new(self.kind(), self.to_string())
    }

    /// The kind of failure, from the error's type down to its cause.
    fn kind(&self) -> TaskErrorKind {
        use crate::agents::{
            fixer::FixError, judge::JudgeError, ranker::RankError, reproduce::ReproduceError,
        };
        use crate::edit::EditError;
        use pipeline::first::PipelineError;
        use TaskErrorKind as K;
        let engine = |e: &EngineError| match e {
            EngineError::TooLong { .. } => K::PromptTooLong,
            _ => K::Engine,
        };
        let env = |e: &EnvError| match e {
            EnvError::Sandbox(_) => K::Sandbox,
            EnvError::Invalid { .. } => K::Environment,
        };
        // A path the model named that is not one inside the worktree, or a
        // file of it that could not be written.
        let edit = |e: &EditError| match e {
            EditError::Io { .. } => K::Io,
            _ => K::Repository,
        };
        match self {
            Failure::Repo(_) => K::Repository,
            Failure::Environment(e) => env(e),
            Failure::Masai(e) => match e {
                MasaiError::Engine(e) => engine(e),
                MasaiError::Index(_) => K::Index,
                MasaiError::Repo(_) => K::Repository,
                MasaiError::Env(e) => env(e),
                MasaiError::Fix(e) => match e {
                    FixError::Engine(e) => engine(e),
                    FixError::Repo(_) => K::Repository,
                    FixError::Grammar(_) => K::Engine,
                    FixError::NoLocations => K::Unknown,
                },
                MasaiError::Rank(e) => match e {
                    RankError::Engine(e) => engine(e),
                    RankError::Grammar(_) => K::Engine,
                    RankError::Judge(e) => match e {
                        JudgeError::Repo(_) => K::Repository,
                        JudgeError::Env(e) => env(e),
                        JudgeError::Sandbox(_) => K::Sandbox,
                        JudgeError::Install(_) => K::Environment,
                        JudgeError::RunTest(RunTestError::Env(e)) => env(e),
                        JudgeError::RunTest(RunTestError::Sandbox(_)) => K::Sandbox,
                        JudgeError::Edit(e) => edit(e),
                    },
                },
                MasaiError::Reproduce(e) => match e {
                    ReproduceError::Engine(e) => engine(e),
                    ReproduceError::NoLocations => K::Unknown,
                },
                MasaiError::Artifact { .. } => K::Io,
            },
            Failure::First(e) => match e {
                PipelineError::Engine(e) => engine(e),
                PipelineError::Index(_) => K::Index,
                PipelineError::Repo(_) => K::Repository,
                PipelineError::NeedsModel => K::Engine,
            },
            Failure::Record(_) => K::Io,
            Failure::Panic(_) => K::Internal,
        }
    }
}

/// RFC 3339 timestamp of now, to the second.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::{fixer::FixError, judge::JudgeError, ranker::RankError};
    use crate::edit::EditError;
    use crate::engine::grammar::GrammarError;
    use crate::index::IndexError;
    use patchwright_sandbox::SandboxError;
    use pipeline::first::PipelineError;
    use TaskErrorKind as K;

    fn too_long() -> EngineError {
        EngineError::TooLong {
            prompt: 10,
            reserved: 5,
            needed: 15,
            context: 12,
            over: 3,
        }
    }
    fn sandbox() -> SandboxError {
        SandboxError::SetupFailed {
            message: "no namespaces".into(),
        }
    }
    fn io() -> std::io::Error {
        std::io::Error::other("disk full")
    }
    fn repo() -> RepoError {
        RepoError::BadName("x".into())
    }

    #[test]
    fn every_failure_maps_to_its_kind() {
        let cases: Vec<(Failure, TaskErrorKind)> = vec![
            (Failure::Repo(repo()), K::Repository),
            (
                Failure::Environment(EnvError::Sandbox(sandbox())),
                K::Sandbox,
            ),
            (
                Failure::Environment(EnvError::Invalid {
                    path: "/venv".into(),
                    message: "no pyvenv.cfg".into(),
                }),
                K::Environment,
            ),
            (
                Failure::Masai(MasaiError::Engine(too_long())),
                K::PromptTooLong,
            ),
            (
                Failure::Masai(MasaiError::Engine(EngineError::Backend("x".into()))),
                K::Engine,
            ),
            (
                Failure::Masai(MasaiError::Index(IndexError::Cache {
                    path: "c".into(),
                    message: "m".into(),
                })),
                K::Index,
            ),
            (Failure::Masai(MasaiError::Repo(repo())), K::Repository),
            (
                Failure::Masai(MasaiError::Env(EnvError::Sandbox(sandbox()))),
                K::Sandbox,
            ),
            (
                Failure::Masai(MasaiError::Fix(FixError::Engine(too_long()))),
                K::PromptTooLong,
            ),
            (
                Failure::Masai(MasaiError::Fix(FixError::Repo(repo()))),
                K::Repository,
            ),
            (
                Failure::Masai(MasaiError::Fix(FixError::Grammar(GrammarError::NoOptions))),
                K::Engine,
            ),
            (
                Failure::Masai(MasaiError::Fix(FixError::NoLocations)),
                K::Unknown,
            ),
            (
                Failure::Masai(MasaiError::Rank(RankError::Engine(too_long()))),
                K::PromptTooLong,
            ),
            (
                Failure::Masai(MasaiError::Rank(RankError::Judge(JudgeError::Repo(repo())))),
                K::Repository,
            ),
            (
                Failure::Masai(MasaiError::Rank(RankError::Judge(JudgeError::Env(
                    EnvError::Sandbox(sandbox()),
                )))),
                K::Sandbox,
            ),
            (
                Failure::Masai(MasaiError::Rank(RankError::Grammar(
                    GrammarError::NoOptions,
                ))),
                K::Engine,
            ),
            (
                Failure::Masai(MasaiError::Rank(RankError::Judge(JudgeError::Sandbox(
                    sandbox(),
                )))),
                K::Sandbox,
            ),
            (
                Failure::Masai(MasaiError::Rank(RankError::Judge(JudgeError::Edit(
                    EditError::BadPath("../x".into()),
                )))),
                K::Repository,
            ),
            (
                Failure::Masai(MasaiError::Rank(RankError::Judge(JudgeError::Edit(
                    EditError::Io {
                        action: "write",
                        path: "t.py".into(),
                        message: "disk full".into(),
                    },
                )))),
                K::Io,
            ),
            (
                Failure::Masai(MasaiError::Artifact {
                    path: "a.json".into(),
                    source: RecordError::Io {
                        action: "write",
                        path: "a.json".into(),
                        source: io(),
                    },
                }),
                K::Io,
            ),
            (
                Failure::First(PipelineError::Engine(too_long())),
                K::PromptTooLong,
            ),
            (
                Failure::First(PipelineError::Index(IndexError::List {
                    dir: "d".into(),
                    message: "m".into(),
                })),
                K::Index,
            ),
            (Failure::First(PipelineError::Repo(repo())), K::Repository),
            (Failure::First(PipelineError::NeedsModel), K::Engine),
            (
                Failure::Record(RecordError::Io {
                    action: "write",
                    path: "r.json".into(),
                    source: io(),
                }),
                K::Io,
            ),
            (Failure::Panic("boom".into()), K::Internal),
        ];
        for (failure, kind) in cases {
            let stored = failure.task_error();
            assert_eq!(stored.kind, kind, "{failure:?}");
            assert_eq!(stored.message, failure.to_string());
        }
    }
}
