//! Slurm's own commands, run on this host: `sbatch` submits, `squeue`
//! (and `sacct`, where accounting is on) says what each job is doing.
//! Their outputs are parsed by pure functions.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use super::SlurmError;

/// A job's (or array element's) state, as far as the run cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Running,
    Completed,
    /// Ended without completing: FAILED, CANCELLED, TIMEOUT, PREEMPTED,
    /// NODE_FAIL, OUT_OF_MEMORY, ... (Slurm's word).
    Failed(String),
}

impl JobState {
    /// The state of Slurm's word for it (`squeue`'s `%T`, `sacct`'s
    /// State, whose `CANCELLED by 0` keeps its first word).
    pub fn parse(word: &str) -> JobState {
        let word = word.split_whitespace().next().unwrap_or("");
        match word {
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD"
            | "SPECIAL_EXIT" | "SUSPENDED" | "STOPPED" => JobState::Pending,
            "RUNNING" | "CONFIGURING" | "COMPLETING" | "RESIZING" | "SIGNALING" | "STAGE_OUT" => {
                JobState::Running
            }
            "COMPLETED" => JobState::Completed,
            other => JobState::Failed(other.to_string()),
        }
    }

    /// Still in the queue or running: its round has not ended.
    pub fn active(&self) -> bool {
        matches!(self, JobState::Pending | JobState::Running)
    }
}

/// Where the run's jobs go: Slurm, or a stand-in in tests.
pub trait Scheduler {
    /// Submits `script`, as an array of `array` (sbatch's `--array`) when
    /// given, after `dependency` (sbatch's `--dependency`); the job id.
    fn submit(
        &self,
        script: &Path,
        array: Option<&str>,
        dependency: Option<&str>,
    ) -> Result<String, SlurmError>;

    /// The state of every element of `jobs` the scheduler still knows, by
    /// `JOB_INDEX` for array elements and `JOB` for other jobs. `None`
    /// when the controller cannot be asked now (try again later).
    fn states(&self, jobs: &[String]) -> Result<Option<HashMap<String, JobState>>, SlurmError>;
}

/// The commands on `PATH` (`SLURM_CONF` and the rest of the environment
/// as the user set them).
pub struct Slurm;

fn run(program: &str, args: &[&str]) -> Result<std::process::Output, SlurmError> {
    Command::new(program)
        .args(args)
        .output()
        .map_err(|source| SlurmError::Spawn {
            program: program.to_string(),
            source,
        })
}

impl Scheduler for Slurm {
    fn submit(
        &self,
        script: &Path,
        array: Option<&str>,
        dependency: Option<&str>,
    ) -> Result<String, SlurmError> {
        let mut args: Vec<String> = vec!["--parsable".into()];
        if let Some(array) = array {
            args.push(format!("--array={array}"));
        }
        if let Some(dependency) = dependency {
            args.push(format!("--dependency={dependency}"));
            // A dependency that fails cancels the job rather than leaving
            // it pending for ever; the watcher then resubmits it.
            args.push("--kill-on-invalid-dep=yes".into());
        }
        args.push(script.display().to_string());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run("sbatch", &refs)?;
        if !out.status.success() {
            return Err(SlurmError::Command {
                command: format!("sbatch {}", args.join(" ")),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        parse_sbatch(&String::from_utf8_lossy(&out.stdout))
    }

    fn states(&self, jobs: &[String]) -> Result<Option<HashMap<String, JobState>>, SlurmError> {
        if jobs.is_empty() {
            return Ok(Some(HashMap::new()));
        }
        let list = jobs.join(",");
        let out = run(
            "squeue",
            &[
                "--noheader",
                "--array",
                "--states=all",
                "--jobs",
                &list,
                "--format=%i|%T",
            ],
        )?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut states = if out.status.success() {
            parse_states(&String::from_utf8_lossy(&out.stdout))
        } else if stderr.contains("Invalid job id") {
            // Every job has left the controller's memory (MinJobAge).
            HashMap::new()
        } else {
            tracing::warn!("squeue failed ({}): {}", out.status, stderr.trim());
            return Ok(None);
        };
        // Jobs the controller forgot: accounting, where the cluster keeps it.
        let forgotten: Vec<&String> = jobs
            .iter()
            .filter(|j| {
                !states
                    .keys()
                    .any(|k| k == *j || k.starts_with(&format!("{j}_")))
            })
            .collect();
        if !forgotten.is_empty() {
            let list = forgotten
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(",");
            if let Ok(out) = run(
                "sacct",
                &[
                    "--noheader",
                    "--parsable2",
                    "--allocations",
                    "--jobs",
                    &list,
                    "--format=JobID,State",
                ],
            ) {
                if out.status.success() {
                    for (id, state) in parse_states(&String::from_utf8_lossy(&out.stdout)) {
                        states.entry(id).or_insert(state);
                    }
                }
            }
        }
        Ok(Some(states))
    }
}

/// The job id `sbatch --parsable` prints (`ID` or `ID;CLUSTER`).
pub fn parse_sbatch(stdout: &str) -> Result<String, SlurmError> {
    let id = stdout
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .and_then(|l| l.split(';').next())
        .unwrap_or("");
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        return Err(SlurmError::Parse {
            command: "sbatch --parsable".into(),
            output: stdout.to_string(),
        });
    }
    Ok(id.to_string())
}

/// `ID|STATE` lines (`squeue --format=%i|%T`, `sacct --parsable2
/// --format=JobID,State`) by id; lines of unexpanded arrays (`12_[3-5]`)
/// and job steps (`12.batch`) are skipped.
pub fn parse_states(stdout: &str) -> HashMap<String, JobState> {
    stdout
        .lines()
        .filter_map(|l| {
            let (id, state) = l.trim().split_once('|')?;
            let plain = !id.is_empty() && id.chars().all(|c| c.is_ascii_digit() || c == '_');
            plain.then(|| (id.to_string(), JobState::parse(state)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_prints_the_job_id() {
        let cases = [
            ("1234\n", Some("1234")),
            ("1234;cluster\n", Some("1234")),
            ("Submitted batch job 12\n", None),
            ("", None),
        ];
        for (out, want) in cases {
            assert_eq!(parse_sbatch(out).ok().as_deref(), want, "{out:?}");
        }
    }

    #[test]
    fn queue_lines_give_each_elements_state() {
        let out = "7_0|COMPLETED\n7_1|RUNNING\n7_2|PENDING\n7_[3-5]|PENDING\n8|CANCELLED by 0\n\
                   8.batch|CANCELLED\n9_1|TIMEOUT\n9_2|COMPLETING\n";
        let states = parse_states(out);
        let want = [
            ("7_0", JobState::Completed),
            ("7_1", JobState::Running),
            ("7_2", JobState::Pending),
            ("8", JobState::Failed("CANCELLED".into())),
            ("9_1", JobState::Failed("TIMEOUT".into())),
            ("9_2", JobState::Running),
        ];
        assert_eq!(states.len(), want.len(), "{states:?}");
        for (id, state) in want {
            assert_eq!(states.get(id), Some(&state), "{id}");
        }
        assert!(JobState::parse("REQUEUED").active());
        assert!(!JobState::parse("PREEMPTED").active());
        assert!(!JobState::parse("COMPLETED").active());
    }
}
