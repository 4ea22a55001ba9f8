//! Batches and sweeps on a Slurm cluster: one job array element per shard
//! (per grid point and shard for a sweep), each an ordinary `batch` or
//! `sweep --point` of its shard; Slurm schedules, requeues and accounts
//! for them. This module plans the arrays, writes their scripts, submits
//! them, watches the queue and the shards' run directories, resubmits the
//! elements whose shards are unfinished, and merges the shards.
//!
//! ```text
//! RUN_DIR/slurm/slurm.json           the plan and every submission (record::slurm)
//! RUN_DIR/slurm/batch.sbatch         a batch's array (a sweep: point-NN.sbatch each)
//! RUN_DIR/slurm/env.sbatch           the environment job the arrays depend on
//! RUN_DIR/slurm/logs/                each job's log (%A_%a.log, env-%j.log)
//! RUN_DIR/slurm/shards/K-of-N/       shard K's run directory (a sweep's: a sweep
//!                                    directory, its points/ and shared/)
//! RUN_DIR/...                        the merged run (a sweep's points/NN_label/,
//!                                    table.csv), as `merge` writes it; report.html
//! ```
//!
//! Exactly once: a task is finished when its result is in its shard's run
//! directory, and a batch that runs again skips it. An element that is
//! requeued, cancelled, timed out or failed is resubmitted as it is, and
//! resumes where it stopped. One watcher at a time holds
//! `slurm/watch.lock`, so no two submit the same element.

pub mod scheduler;
pub mod script;
pub mod settings;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::batch::merge::merge;
use crate::batch::sweep::write_table;
use crate::batch::BatchError;
use crate::config::Settings;
use crate::record::grade;
use crate::record::run::Summary;
use crate::record::slurm::{ArrayPlan, Round, SlurmFile, Submitted};
use crate::record::sweep::{Row, SweepFile};
use crate::record::RecordError;
use crate::report::ReportError;

pub use scheduler::{JobState, Scheduler, Slurm};
pub use settings::SlurmSettings;

/// What went wrong submitting or watching a run on Slurm.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot run `{program}` ({source}): run this where Slurm's commands are \
         (a login node), or put them on PATH"
    )]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("`{command}` printed no job id: {output:?}")]
    Parse { command: String, output: String },
    #[error("[slurm] settings: {0}")]
    Settings(String),
    #[error("{0}")]
    Invalid(String),
    #[error(
        "another patchwright is watching {0} (it holds slurm/watch.lock): \
         let it finish, or stop it and run `patchwright slurm status` again"
    )]
    Busy(PathBuf),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Report(#[from] ReportError),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SlurmError {
    let path = path.to_path_buf();
    move |source| SlurmError::Io {
        action,
        path,
        source,
    }
}

/// What a run executes, element by element.
pub enum Work<'a> {
    /// `batch`: one array, element K-1 a `batch --shard K/N`.
    Batch,
    /// `sweep`: one array per point, element K-1 a `sweep --point P
    /// --shard K/N`; `settings` are each point's, in the file's order.
    Sweep {
        file: &'a SweepFile,
        settings: &'a [Settings],
    },
}

/// A run to submit, as the command layer resolved it.
pub struct Request<'a> {
    /// The run (or sweep) directory, absolute.
    pub out: &'a Path,
    pub work: Work<'a>,
    /// The patchwright every element runs (on storage every node sees).
    pub program: &'a Path,
    /// The elements' working directory, where relative paths point.
    pub cwd: &'a Path,
    /// The element's command after the program: `batch ...` or
    /// `sweep ...`, without `--out`, `--shard` or `--point`.
    pub command: Vec<String>,
    /// `env build ...` for the selected tasks, after the program.
    pub env_command: Vec<String>,
    /// The task ids of each shard (shard K: `shards[K-1]`).
    pub shards: Vec<Vec<String>>,
    pub settings: &'a SlurmSettings,
}

/// Held while one process submits to or watches a run.
pub struct WatchLock {
    _file: std::fs::File,
}

impl WatchLock {
    /// The run's lock, or `None` when another process holds it.
    pub fn try_acquire(run: &Path) -> Result<Option<WatchLock>, SlurmError> {
        let dir = run.join("slurm");
        std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let path = dir.join("watch.lock");
        let file = std::fs::File::create(&path).map_err(io("create", &path))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(WatchLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(io("lock", &path)(e)),
        }
    }

    /// The run's lock, or [`SlurmError::Busy`].
    pub fn acquire(run: &Path) -> Result<WatchLock, SlurmError> {
        Self::try_acquire(run)?.ok_or_else(|| SlurmError::Busy(run.to_path_buf()))
    }
}

/// The arrays of `request`, with their scripts' texts (relative path,
/// text).
fn plan(request: &Request<'_>) -> Result<(SlurmFile, Vec<(PathBuf, String)>), SlurmError> {
    let n = request.shards.len();
    let name = request
        .out
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into());
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let log_dir = request.out.join("slurm").join("logs");
    let shards = |point_dir: Option<&Path>| -> String {
        let mut dir = format!("slurm/shards/{{K}}-of-{n}");
        if let Some(p) = point_dir {
            dir.push('/');
            dir.push_str(&p.to_string_lossy());
        }
        dir
    };
    let (kind, arrays) = match &request.work {
        Work::Batch => (
            "batch",
            vec![ArrayPlan {
                point: None,
                label: String::new(),
                script: PathBuf::from("slurm/batch.sbatch"),
                merged: PathBuf::new(),
                shard_dir: shards(None),
                after: None,
            }],
        ),
        Work::Sweep { file, settings } => {
            let arrays = file
                .points
                .iter()
                .enumerate()
                .map(|(i, point)| ArrayPlan {
                    point: Some(i),
                    label: point.label.clone(),
                    script: PathBuf::from(format!("slurm/point-{i:02}.sbatch")),
                    merged: point.dir.clone(),
                    shard_dir: shards(Some(&point.dir)),
                    // The first earlier point whose stored stages this one
                    // reuses: its elements go first.
                    after: (0..i).find(|&q| {
                        crate::pipeline::masai::shares_stages(&settings[q], &settings[i])
                    }),
                })
                .collect();
            ("sweep", arrays)
        }
    };
    let mut scripts = Vec::new();
    for array in &arrays {
        // A sweep element's run directory is the point's inside its shard's
        // sweep directory; `--out` is that sweep directory.
        let outs: Vec<PathBuf> = (1..=n)
            .map(|k| match array.point {
                Some(_) => request.out.join(format!("slurm/shards/{k}-of-{n}")),
                None => request.out.join(array.shard_dir(k)),
            })
            .collect();
        let (about, flags) = match array.point {
            None => (
                format!(
                    "`patchwright slurm batch` over {}: one `batch` per shard.",
                    request.out.display()
                ),
                Vec::new(),
            ),
            Some(p) => (
                format!(
                    "`patchwright slurm sweep` over {}: point {p} ({}), one `sweep --point {p}` per shard.",
                    request.out.display(),
                    array.label
                ),
                vec!["--point".to_string(), p.to_string()],
            ),
        };
        let job_name = match array.point {
            None => format!("pw-{safe}"),
            Some(p) => format!("pw-{safe}-{p:02}"),
        };
        let text = script::ArrayScript {
            job: script::Job {
                name: &job_name,
                log_dir: &log_dir,
                cwd: request.cwd,
                settings: request.settings,
                program: request.program,
            },
            about: &about,
            command: &request.command,
            element_flags: &flags,
            shard_dirs: &outs,
        }
        .render()?;
        scripts.push((array.script.clone(), text));
    }
    let env_script = PathBuf::from("slurm/env.sbatch");
    let env_job_name = format!("pw-env-{safe}");
    scripts.push((
        env_script.clone(),
        script::EnvScript {
            job: script::Job {
                name: &env_job_name,
                log_dir: &log_dir,
                cwd: request.cwd,
                settings: request.settings,
                program: request.program,
            },
            command: &request.env_command,
        }
        .render()?,
    ));
    let settings = serde_json::to_value(request.settings)
        .map_err(|e| SlurmError::Invalid(format!("the [slurm] settings do not serialise: {e}")))?;
    let file = SlurmFile {
        kind: kind.to_string(),
        command: request.command.clone(),
        shards: request.shards.clone(),
        arrays,
        env_script: Some(env_script),
        settings,
        rounds: Vec::new(),
        merged_at: None,
    };
    Ok((file, scripts))
}

/// What [`submit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submission {
    /// A round was submitted: its array jobs' ids.
    Submitted(Vec<String>),
    /// The run's last round is still in the queue: nothing submitted.
    Running,
    /// Every shard is finished: nothing to submit.
    Finished,
}

/// Writes the run's scripts and submits them: the environment job, then
/// the arrays after it. A run directory that already holds this Slurm run
/// (the same command and shards) gets a new round for its unfinished
/// elements, unless its last round is still queued; one of another
/// command is refused.
pub fn submit(
    request: &Request<'_>,
    slurm: &dyn Scheduler,
    _lock: &WatchLock,
) -> Result<(SlurmFile, Submission), SlurmError> {
    let (planned, scripts) = plan(request)?;
    let out = request.out;
    if let Some(mut file) = SlurmFile::read_if_exists(out)? {
        if file.command != planned.command
            || file.shards != planned.shards
            || file.arrays != planned.arrays
        {
            return Err(SlurmError::Invalid(format!(
                "{} holds a Slurm run of another command or selection (see {}): \
                 choose another --out, or watch it with `patchwright slurm status {}`",
                out.display(),
                crate::record::slurm::path(out).display(),
                out.display()
            )));
        }
        match slurm.states(&latest_jobs(&file))? {
            Some(states) if !round_active(&file, &states) => {}
            _ if file.rounds.is_empty() => {}
            _ => return Ok((file, Submission::Running)),
        }
        let unfinished = unfinished(out, &file)?;
        if unfinished.is_empty() {
            return Ok((file, Submission::Finished));
        }
        let jobs = submit_round(out, &mut file, slurm, &unfinished, false)?;
        return Ok((file, Submission::Submitted(jobs)));
    }
    for dir in [
        out.join("slurm").join("logs"),
        out.join("slurm").join("shards"),
    ] {
        std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    }
    for (rel, text) in &scripts {
        let path = out.join(rel);
        crate::record::write_atomic(&path, text.as_bytes())?;
    }
    let mut file = planned;
    file.write(out)?;
    let unfinished = unfinished(out, &file)?;
    if unfinished.is_empty() {
        return Ok((file, Submission::Finished));
    }
    let jobs = submit_round(out, &mut file, slurm, &unfinished, false)?;
    Ok((file, Submission::Submitted(jobs)))
}

/// Every element: (array, shard K).
fn elements(file: &SlurmFile) -> Vec<(usize, usize)> {
    (0..file.arrays.len())
        .flat_map(|a| (1..=file.shards.len()).map(move |k| (a, k)))
        .collect()
}

/// Tasks of shard `k` of `array` with a result in its run directory.
fn done_in(run: &Path, array: &ArrayPlan, k: usize, tasks: &[String]) -> usize {
    let dir = run.join(array.shard_dir(k)).join("results");
    tasks
        .iter()
        .filter(|id| dir.join(format!("{id}.json")).is_file())
        .count()
}

/// The elements whose shards have tasks without a result.
pub fn unfinished(run: &Path, file: &SlurmFile) -> Result<Vec<(usize, usize)>, SlurmError> {
    Ok(elements(file)
        .into_iter()
        .filter(|&(a, k)| {
            let tasks = &file.shards[k - 1];
            done_in(run, &file.arrays[a], k, tasks) < tasks.len()
        })
        .collect())
}

/// Submits one round: the environment job first when it is the run's first
/// round, then one array per array plan with unfinished elements. In the
/// first round an array whose points share stages with an earlier one
/// starts each element after that array's element of the same shard
/// (`aftercorr`); resubmissions wait for nothing.
fn submit_round(
    run: &Path,
    file: &mut SlurmFile,
    slurm: &dyn Scheduler,
    unfinished: &[(usize, usize)],
    retry: bool,
) -> Result<Vec<String>, SlurmError> {
    let first = file.rounds.is_empty();
    file.rounds.push(Round {
        submitted_at: crate::batch::now(),
        retry,
        env_job: None,
        jobs: Vec::new(),
    });
    let round = file.rounds.len() - 1;
    if first {
        if let Some(script) = &file.env_script {
            let job = slurm.submit(&run.join(script), None, None)?;
            tracing::info!("environment job {job}: {}", run.join(script).display());
            file.rounds[round].env_job = Some(job);
            file.write(run)?;
        }
    }
    let env_job = file.rounds[round].env_job.clone();
    let mut ids = Vec::new();
    for (a, array) in file.arrays.clone().iter().enumerate() {
        let shards: Vec<usize> = unfinished
            .iter()
            .filter(|(ua, _)| *ua == a)
            .map(|&(_, k)| k)
            .collect();
        if shards.is_empty() {
            continue;
        }
        let mut after: Vec<String> = Vec::new();
        if let Some(env) = &env_job {
            after.push(format!("afterok:{env}"));
        }
        if let Some(leader) = array.after.filter(|_| first) {
            if let Some(s) = file.rounds[round].jobs.iter().find(|s| s.array == leader) {
                after.push(format!("aftercorr:{}", s.job));
            }
        }
        let indices: Vec<usize> = shards.iter().map(|k| k - 1).collect();
        let spec = script::array_spec(&indices);
        let dependency = (!after.is_empty()).then(|| after.join(","));
        let job = slurm.submit(&run.join(&array.script), Some(&spec), dependency.as_deref())?;
        tracing::info!(
            "array {job} ({}): elements {spec}{}",
            run.join(&array.script).display(),
            dependency.map_or(String::new(), |d| format!(" after {d}"))
        );
        file.rounds[round].jobs.push(Submitted {
            array: a,
            job: job.clone(),
            shards,
        });
        file.write(run)?;
        ids.push(job);
    }
    Ok(ids)
}

/// The jobs of the last round (its environment job too).
fn latest_jobs(file: &SlurmFile) -> Vec<String> {
    file.rounds
        .last()
        .map(|r| {
            r.env_job
                .iter()
                .cloned()
                .chain(r.jobs.iter().map(|s| s.job.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The state of element `k-1` of job `job`, or of the job itself.
fn state_of<'a>(
    states: &'a HashMap<String, JobState>,
    job: &str,
    k: Option<usize>,
) -> Option<&'a JobState> {
    match k {
        Some(k) => states
            .get(&format!("{job}_{}", k - 1))
            // An array of one element may be shown as its job alone.
            .or_else(|| states.get(job)),
        None => states.get(job),
    }
}

/// Whether a job of the last round is still queued or running.
fn round_active(file: &SlurmFile, states: &HashMap<String, JobState>) -> bool {
    let Some(round) = file.rounds.last() else {
        return false;
    };
    let env = round
        .env_job
        .as_deref()
        .and_then(|j| state_of(states, j, None))
        .is_some_and(JobState::active);
    env || round.jobs.iter().any(|s| {
        s.shards
            .iter()
            .any(|&k| state_of(states, &s.job, Some(k)).is_some_and(JobState::active))
    })
}

/// Where a run stands.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Submissions so far.
    pub rounds: usize,
    /// Tasks of every element, and those with a result.
    pub tasks: usize,
    pub done: usize,
    /// Tasks graded resolved so far (with `--evaluate`).
    pub resolved: usize,
    pub graded: usize,
    /// Elements of the last round by state; `finished`: every task of its
    /// shard has a result, whatever Slurm says.
    pub elements: usize,
    pub finished: usize,
    pub pending: usize,
    pub running: usize,
    /// Ended in the last round with tasks left (failed, cancelled, timed
    /// out, preempted).
    pub failed: usize,
    /// Whether the scheduler could be asked this time.
    pub queue_known: bool,
}

/// The run's progress from its shards' directories and `states`.
fn progress(run: &Path, file: &SlurmFile, states: Option<&HashMap<String, JobState>>) -> Progress {
    let mut p = Progress {
        rounds: file.rounds.len(),
        queue_known: states.is_some(),
        ..Progress::default()
    };
    let last = file.rounds.last();
    for (a, k) in elements(file) {
        let array = &file.arrays[a];
        let tasks = &file.shards[k - 1];
        let done = done_in(run, array, k, tasks);
        p.tasks += tasks.len();
        p.done += done;
        p.elements += 1;
        let eval = run.join(array.shard_dir(k)).join("eval");
        for id in tasks {
            if let Some(report) = grade::stored_report(&eval, id) {
                p.graded += 1;
                p.resolved += usize::from(report.resolved);
            }
        }
        if done == tasks.len() {
            p.finished += 1;
            continue;
        }
        let job = last.and_then(|r| {
            r.jobs
                .iter()
                .find(|s| s.array == a && s.shards.contains(&k))
        });
        match job.and_then(|s| states.and_then(|st| state_of(st, &s.job, Some(k)))) {
            Some(JobState::Pending) => p.pending += 1,
            Some(JobState::Running) => p.running += 1,
            Some(_) => p.failed += 1,
            // Submitted, but the scheduler no longer knows it: it ended.
            None if job.is_some() && states.is_some() => p.failed += 1,
            None => p.pending += 1,
        }
    }
    p
}

/// An element that did not finish its shard.
#[derive(Debug, Clone, PartialEq)]
pub struct Unfinished {
    /// The point's label (a sweep), else empty.
    pub label: String,
    pub shard: usize,
    pub tasks_left: usize,
    /// Its last log, when it was submitted.
    pub log: Option<PathBuf>,
}

/// One merged run directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub label: String,
    pub dir: PathBuf,
    pub summary: Summary,
}

/// How a watch ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Watched {
    /// Asked not to wait (`--detach`), and the run has not ended.
    Running(Progress),
    /// Every round ended: the shards are merged; `unfinished` is empty
    /// unless the retries ran out.
    Ended {
        progress: Progress,
        merged: Vec<Merged>,
        unfinished: Vec<Unfinished>,
        report: Option<PathBuf>,
    },
}

/// The run's progress now, without waiting, submitting or merging (while
/// another process watches it).
pub fn look(run: &Path, slurm: &dyn Scheduler) -> Result<Progress, SlurmError> {
    let file = SlurmFile::read(run)?;
    let states = slurm.states(&latest_jobs(&file))?;
    Ok(progress(run, &file, states.as_ref()))
}

/// Watches the run at `run` until it ends, calling `show` after each look:
/// when a round ends with unfinished elements it resubmits them (up to the
/// settings' `retries` resubmissions in a row), then merges the shards.
/// `detach`: one look (and the step a round's end calls for), no waiting.
pub fn watch(
    run: &Path,
    slurm: &dyn Scheduler,
    detach: bool,
    _lock: &WatchLock,
    show: &mut dyn FnMut(&Progress),
) -> Result<Watched, SlurmError> {
    loop {
        let mut file = SlurmFile::read(run)?;
        let settings: SlurmSettings =
            serde_json::from_value(file.settings.clone()).map_err(|e| {
                SlurmError::Invalid(format!(
                    "{}: `settings`: {e}",
                    crate::record::slurm::path(run).display()
                ))
            })?;
        let states = slurm.states(&latest_jobs(&file))?;
        let p = progress(run, &file, states.as_ref());
        show(&p);
        let ended = states.as_ref().is_some_and(|s| !round_active(&file, s));
        if ended {
            let mut unfinished = unfinished(run, &file)?;
            if !unfinished.is_empty() {
                // Slurm requeues a preempted element itself, and shows it
                // ended for a moment before: look again before taking the
                // round as over (a requeued element and its resubmission
                // would both run the shard; the second is refused by the
                // run directory's lock, but its element is wasted).
                std::thread::sleep(std::time::Duration::from_secs(settings.poll_s.clamp(1, 5)));
                match slurm.states(&latest_jobs(&file))? {
                    Some(again) if !round_active(&file, &again) => {}
                    _ => continue,
                }
                unfinished = self::unfinished(run, &file)?;
                warn_env_failed(run, &file, states.as_ref());
            }
            let retries = file.rounds.iter().rev().take_while(|r| r.retry).count();
            if !unfinished.is_empty() && retries < settings.retries {
                tracing::info!(
                    "{} elements unfinished after round {}: resubmitting them ({} of {} retries)",
                    unfinished.len(),
                    file.rounds.len(),
                    retries + 1,
                    settings.retries
                );
                submit_round(run, &mut file, slurm, &unfinished, true)?;
                if detach {
                    return Ok(Watched::Running(progress(run, &file, None)));
                }
                std::thread::sleep(std::time::Duration::from_secs(settings.poll_s.max(1)));
                continue;
            }
            let merged = finish(run, &mut file)?;
            let left = unfinished
                .iter()
                .map(|&(a, k)| {
                    let array = &file.arrays[a];
                    let tasks = &file.shards[k - 1];
                    let log = file.rounds.iter().rev().find_map(|r| {
                        r.jobs
                            .iter()
                            .find(|s| s.array == a && s.shards.contains(&k))
                            .map(|s| {
                                run.join("slurm").join("logs").join(format!(
                                    "{}_{}.log",
                                    s.job,
                                    k - 1
                                ))
                            })
                    });
                    Unfinished {
                        label: array.label.clone(),
                        shard: k,
                        tasks_left: tasks.len() - done_in(run, array, k, tasks),
                        log,
                    }
                })
                .collect();
            let report = merged.1;
            return Ok(Watched::Ended {
                progress: progress(run, &file, states.as_ref()),
                merged: merged.0,
                unfinished: left,
                report,
            });
        }
        if detach {
            return Ok(Watched::Running(p));
        }
        std::thread::sleep(std::time::Duration::from_secs(settings.poll_s.max(1)));
    }
}

/// Says so when the last round's environment job failed: its elements were
/// cancelled (their dependency failed), and are resubmitted without it;
/// each builds the environments it needs itself.
fn warn_env_failed(run: &Path, file: &SlurmFile, states: Option<&HashMap<String, JobState>>) {
    let Some(job) = file.rounds.last().and_then(|r| r.env_job.as_deref()) else {
        return;
    };
    if let Some(JobState::Failed(state)) = states.and_then(|s| state_of(s, job, None)) {
        tracing::warn!(
            "the environment job {job} ended {state} (its log: {}); the elements that \
             waited for it are resubmitted, and build what they need themselves",
            run.join("slurm")
                .join("logs")
                .join(format!("env-{job}.log"))
                .display()
        );
    }
}

/// Merges each array's shards into its run directory (a sweep: each
/// point's, then the table), and writes `report.html` over the run.
fn finish(run: &Path, file: &mut SlurmFile) -> Result<(Vec<Merged>, Option<PathBuf>), SlurmError> {
    let mut merged = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    let sweep = match file.kind.as_str() {
        "sweep" => Some(SweepFile::read(run)?),
        _ => None,
    };
    for array in &file.arrays {
        let shards: Vec<PathBuf> = (1..=file.shards.len())
            .map(|k| run.join(array.shard_dir(k)))
            .filter(|d| d.join("run.json").is_file())
            .collect();
        if shards.is_empty() {
            continue;
        }
        let dir = run.join(&array.merged);
        let m = merge(&shards, &dir)?;
        if let (Some(sweep), Some(p)) = (&sweep, array.point) {
            if let Some(point) = sweep.points.get(p) {
                rows.push(Row::new(point, &m.summary, &m.metrics, None));
            }
        }
        merged.push(Merged {
            label: array.label.clone(),
            dir,
            summary: m.summary,
        });
    }
    if let Some(sweep) = &sweep {
        write_table(run, &sweep.grid, &rows)?;
    }
    file.merged_at = Some(crate::batch::now());
    file.write(run)?;
    if merged.is_empty() {
        return Ok((merged, None));
    }
    let report = run.join("report.html");
    crate::report::write(&[run.to_path_buf()], &report)?;
    Ok((merged, Some(report)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A submission: the script, `--array`, `--dependency`.
    type Sbatch = (PathBuf, Option<String>, Option<String>);

    /// A scheduler that hands out job ids and reports the states it is
    /// told.
    #[derive(Default)]
    struct Fake {
        submitted: RefCell<Vec<Sbatch>>,
        states: RefCell<HashMap<String, JobState>>,
    }

    impl Scheduler for Fake {
        fn submit(
            &self,
            script: &Path,
            array: Option<&str>,
            dependency: Option<&str>,
        ) -> Result<String, SlurmError> {
            let mut s = self.submitted.borrow_mut();
            s.push((
                script.to_path_buf(),
                array.map(String::from),
                dependency.map(String::from),
            ));
            Ok((100 + s.len()).to_string())
        }
        fn states(&self, _: &[String]) -> Result<Option<HashMap<String, JobState>>, SlurmError> {
            Ok(Some(self.states.borrow().clone()))
        }
    }

    fn finish_task(
        run: &Path,
        file: &SlurmFile,
        a: usize,
        k: usize,
        id: &str,
    ) -> std::io::Result<()> {
        let dir = run.join(file.arrays[a].shard_dir(k)).join("results");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("{id}.json")), "{}")
    }

    #[test]
    fn a_round_submits_the_env_job_then_the_unfinished_elements_after_it(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let run = dir.path().join("run");
        let settings = SlurmSettings {
            poll_s: 1,
            ..SlurmSettings::default()
        };
        let request = Request {
            out: &run,
            work: Work::Batch,
            program: Path::new("/pw"),
            cwd: dir.path(),
            command: vec!["batch".into(), "--dataset".into(), "t.jsonl".into()],
            env_command: vec!["env".into(), "build".into()],
            shards: vec![
                vec!["a".into(), "d".into()],
                vec!["b".into()],
                vec!["c".into()],
            ],
            settings: &settings,
        };
        let fake = Fake::default();
        let lock = WatchLock::acquire(&run)?;
        let (file, submission) = submit(&request, &fake, &lock)?;
        assert_eq!(submission, Submission::Submitted(vec!["102".into()]));
        let env = run.join("slurm/env.sbatch");
        let array = run.join("slurm/batch.sbatch");
        assert_eq!(
            *fake.submitted.borrow(),
            [
                (env, None, None),
                (
                    array.clone(),
                    Some("0-2".into()),
                    Some("afterok:101".into())
                )
            ]
        );
        assert!(std::fs::read_to_string(&array)?.contains("exec /pw batch --dataset t.jsonl"));

        // Shard 2 finished, shard 1 half: the round ends (the scheduler no
        // longer knows it) and only the unfinished elements go again, after
        // nothing.
        finish_task(&run, &file, 0, 2, "b")?;
        finish_task(&run, &file, 0, 1, "a")?;
        fake.states
            .borrow_mut()
            .insert("102_1".into(), JobState::Completed);
        fake.states
            .borrow_mut()
            .insert("102_0".into(), JobState::Failed("CANCELLED".into()));
        fake.states
            .borrow_mut()
            .insert("102_2".into(), JobState::Running);
        let mut seen = Vec::new();
        let watched = watch(&run, &fake, true, &lock, &mut |p| seen.push(p.clone()))?;
        assert!(
            matches!(watched, Watched::Running(_)),
            "element 2 still runs"
        );
        assert_eq!(
            (
                seen[0].tasks,
                seen[0].done,
                seen[0].finished,
                seen[0].running,
                seen[0].failed
            ),
            (4, 2, 1, 1, 1)
        );
        fake.states
            .borrow_mut()
            .insert("102_2".into(), JobState::Failed("TIMEOUT".into()));
        let _ = watch(&run, &fake, true, &lock, &mut |_| {})?;
        assert_eq!(
            fake.submitted.borrow().last().cloned(),
            Some((array.clone(), Some("0,2".into()), None))
        );
        let file = SlurmFile::read(&run)?;
        assert_eq!(file.rounds.len(), 2);
        assert!(file.rounds[1].retry);
        assert_eq!(file.rounds[1].jobs[0].shards, [1, 3]);

        // Submitting the same run again while its round runs does nothing;
        // another command is refused.
        fake.states
            .borrow_mut()
            .insert("103_0".into(), JobState::Running);
        assert_eq!(submit(&request, &fake, &lock)?.1, Submission::Running);
        let other = Request {
            command: vec!["batch".into(), "--dataset".into(), "other.jsonl".into()],
            ..request
        };
        let err = submit(&other, &fake, &lock)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("another command or selection"), "{err}");
        Ok(())
    }

    #[test]
    fn one_watcher_at_a_time() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let held = WatchLock::acquire(dir.path())?;
        assert!(WatchLock::try_acquire(dir.path())?.is_none());
        drop(held);
        assert!(WatchLock::try_acquire(dir.path())?.is_some());
        Ok(())
    }
}
