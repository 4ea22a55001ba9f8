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
//! ```
//!
//! Every file is written atomically (to a temporary name, then renamed), so
//! a killed run never leaves a half-written file. One task's failure is
//! recorded as that task's error; the batch goes on.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::config::Settings;
use crate::dataset::Task;
use crate::engine::Engine;
use crate::env::Environment;
use crate::pipeline::{self, metrics::Metrics, metrics::Summary as MetricsSummary, Kind};
use crate::repo::{Repos, Workspace};
use crate::trajectory::Trajectory;

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode {what} as JSON: {source}")]
    Json {
        what: String,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Repo(#[from] crate::repo::RepoError),
    #[error("{path} already holds a run (run.json exists): choose another --out, or delete it to start over")]
    Exists { path: PathBuf },
}

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The pipeline produced a non-empty patch.
    Patched,
    /// The pipeline ran but no edit applied.
    NoPatch,
    /// Something failed before the pipeline could finish (missing mirror,
    /// prompt too long, ...): see `error`.
    Error,
}

/// One task's outcome, as stored in `results/<id>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    pub instance_id: String,
    pub status: Status,
    pub error: Option<String>,
    pub model_patch: String,
    pub elapsed_s: f64,
    pub model_calls: usize,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Stage metrics (MASAI pipeline, gold patch known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
}

/// A line of `predictions.jsonl`, in SWE-bench's format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub instance_id: String,
    pub model_name_or_path: String,
    pub model_patch: String,
}

/// Counts over a finished batch.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub tasks: usize,
    pub patched: usize,
    pub no_patch: usize,
    pub errors: usize,
    pub error_ids: Vec<String>,
    pub elapsed_s: f64,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Tasks resolved, when the batch grades them (`--evaluate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<usize>,
}

/// Paths inside a run directory.
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// Creates the run directory. A directory that already holds a run is
    /// refused: mixing two runs' results would mislabel predictions.
    pub fn create(root: &Path) -> Result<RunDir, BatchError> {
        if root.join("run.json").exists() {
            return Err(BatchError::Exists {
                path: root.to_path_buf(),
            });
        }
        for sub in ["results", "trajectories"] {
            let dir = root.join(sub);
            std::fs::create_dir_all(&dir).map_err(|source| BatchError::Io {
                action: "create",
                path: dir,
                source,
            })?;
        }
        Ok(RunDir {
            root: root.to_path_buf(),
        })
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn run_json(&self) -> PathBuf {
        self.root.join("run.json")
    }
    pub fn predictions(&self) -> PathBuf {
        self.root.join("predictions.jsonl")
    }
    pub fn result(&self, id: &str) -> PathBuf {
        self.root.join("results").join(format!("{id}.json"))
    }
    pub fn trajectory(&self, id: &str) -> PathBuf {
        self.root.join("trajectories").join(format!("{id}.json"))
    }
    pub fn trajectories(&self) -> PathBuf {
        self.root.join("trajectories")
    }
    pub fn workspace(&self, id: &str) -> PathBuf {
        self.root.join("workspaces").join(id)
    }
    /// The stage outputs of a task (`template.json`, `reproduction.json`,
    /// `locations.json`, `fixes.json`, `ranking.json`, `metrics.json`).
    pub fn artifacts(&self, id: &str) -> PathBuf {
        self.root.join("artifacts").join(id)
    }
    /// Candidates' worktrees while a task runs (deleted after it).
    pub fn scratch(&self, id: &str) -> PathBuf {
        self.root.join("scratch").join(id)
    }
    /// The stage metrics summed over the run.
    pub fn metrics(&self) -> PathBuf {
        self.root.join("metrics.json")
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, flushed, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BatchError> {
    let io = |action: &'static str| {
        let path = path.to_path_buf();
        move |source| BatchError::Io {
            action,
            path,
            source,
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(io("create a temporary file beside"))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(io("write"))?;
    tmp.as_file().sync_all().map_err(io("sync"))?;
    tmp.persist(path).map_err(|e| BatchError::Io {
        action: "rename into place",
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

/// Serialises `value` as pretty JSON and writes it atomically.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), BatchError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| BatchError::Json {
        what: path.display().to_string(),
        source,
    })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// What a batch needs besides its tasks.
pub struct Batch<'a> {
    pub engine: &'a Engine,
    pub settings: &'a Settings,
    pub repos: &'a Repos,
    pub run: &'a RunDir,
    /// `model_name_or_path` for the predictions.
    pub model_name: String,
}

impl Batch<'_> {
    /// Runs one task to its result and records its trajectory. Whatever goes
    /// wrong with the task becomes its error; `Err` means only that the run
    /// directory could not be written.
    pub fn run_task(&self, task: &Task) -> Result<TaskResult, BatchError> {
        let started = Instant::now();
        let mut trajectory = Trajectory::new(&task.instance_id);
        // A panic in one task (a bug) becomes that task's error, not the
        // end of the batch.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.attempt(task, &mut trajectory)
        }))
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(format!("internal error (a bug in patchwright): {what}"))
        });
        let (status, error, model_patch, metrics) = match outcome {
            Ok((patch, m)) if patch.is_empty() => (Status::NoPatch, None, patch, m),
            Ok((patch, m)) => (Status::Patched, None, patch, m),
            Err(e) => (Status::Error, Some(e), String::new(), None),
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
        };
        #[derive(Serialize)]
        struct Record<'a> {
            #[serde(flatten)]
            result: &'a TaskResult,
            model: String,
            steps: &'a [crate::trajectory::TimedStep],
        }
        write_json(
            &self.run.trajectory(&task.instance_id),
            &Record {
                result: &result,
                model: self.engine.path().display().to_string(),
                steps: &trajectory.steps,
            },
        )?;
        // The result is written last: its presence means the task finished.
        write_json(&self.run.result(&task.instance_id), &result)?;
        Ok(result)
    }

    fn attempt(
        &self,
        task: &Task,
        trajectory: &mut Trajectory,
    ) -> Result<(String, Option<Metrics>), String> {
        let source = self.repos.locate(&task.repo).map_err(|e| e.to_string())?;
        let workspace = Workspace::create(
            &source,
            &task.base_commit,
            &self.run.workspace(&task.instance_id),
        )
        .map_err(|e| e.to_string())?;
        let outcome = match self.settings.pipeline.kind {
            Kind::First => {
                pipeline::first::run(self.engine, self.settings, task, &workspace, trajectory)
                    .map(|patch| (patch, None))
                    .map_err(|e| e.to_string())
            }
            Kind::Masai => self.masai(task, &workspace, trajectory),
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
    ) -> Result<(String, Option<Metrics>), String> {
        let id = &task.instance_id;
        let env = match &self.settings.environment {
            Some(dir) => Some(Environment::open(dir).map_err(|e| e.to_string())?),
            None => None,
        };
        let artifacts = self.run.artifacts(id);
        let scratch = self.run.scratch(id);
        let outcome = pipeline::masai::run(
            self.engine,
            self.settings,
            task,
            workspace,
            env.as_ref(),
            &artifacts,
            &scratch,
            trajectory,
        )
        .map_err(|e| e.to_string())?;
        // Metrics need the gold patch; computed after the run, never shown
        // to the agents.
        let metrics = (!task.patch.trim().is_empty()).then(|| {
            tracing::info!("{id}: stage metrics");
            pipeline::metrics::compute(task, workspace, env.as_ref(), &outcome, &scratch)
        });
        if let Some(m) = &metrics {
            write_json(&artifacts.join("metrics.json"), m).map_err(|e| e.to_string())?;
        }
        // Scratch worktrees are disposable; a leftover is harmless.
        let _ = std::fs::remove_dir_all(&scratch);
        Ok((outcome.patch, metrics))
    }

    /// Sums the stage metrics of `tasks` that have them into
    /// `metrics.json`.
    pub fn write_metrics(&self, tasks: &[Task]) -> Result<MetricsSummary, BatchError> {
        let all: Vec<Metrics> = tasks
            .iter()
            .filter_map(|t| std::fs::read_to_string(self.run.result(&t.instance_id)).ok())
            .filter_map(|text| serde_json::from_str::<TaskResult>(&text).ok())
            .filter_map(|r| r.metrics)
            .collect();
        let summary = MetricsSummary::of(&all);
        write_json(&self.run.metrics(), &summary)?;
        Ok(summary)
    }

    /// Rebuilds `predictions.jsonl` from the stored results of `tasks`, in
    /// task order. Tasks without a result, or whose result is an error, have
    /// no line.
    pub fn write_predictions(&self, tasks: &[Task]) -> Result<usize, BatchError> {
        let mut out = String::new();
        let mut lines = 0;
        for task in tasks {
            let path = self.run.result(&task.instance_id);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let result: TaskResult =
                serde_json::from_str(&text).map_err(|source| BatchError::Json {
                    what: path.display().to_string(),
                    source,
                })?;
            if result.status == Status::Error {
                continue;
            }
            let line = serde_json::to_string(&Prediction {
                instance_id: result.instance_id,
                model_name_or_path: self.model_name.clone(),
                model_patch: result.model_patch,
            })
            .map_err(|source| BatchError::Json {
                what: "a prediction".into(),
                source,
            })?;
            out.push_str(&line);
            out.push('\n');
            lines += 1;
        }
        write_atomic(&self.run.predictions(), out.as_bytes())?;
        Ok(lines)
    }
}

impl Summary {
    pub fn add(&mut self, r: &TaskResult) {
        self.tasks += 1;
        match r.status {
            Status::Patched => self.patched += 1,
            Status::NoPatch => self.no_patch += 1,
            Status::Error => {
                self.errors += 1;
                self.error_ids.push(r.instance_id.clone());
            }
        }
        self.prompt_tokens += r.prompt_tokens;
        self.completion_tokens += r.completion_tokens;
    }
}

/// RFC 3339 timestamp of now, to the second.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}
