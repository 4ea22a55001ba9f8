//! The run directory: its layout, atomic writes, and resuming a run.

use std::path::{Path, PathBuf};

use super::BatchError;
use crate::record::metrics::{Metrics, Summary as MetricsSummary};
use crate::record::result::{self, Prediction, Status, TaskResult};
use crate::record::run::RunRecord;
use crate::record::{read_json_if_exists, write_json};

/// Whether [`RunDir::open`] found a run to resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    Created,
    Resumed,
}

/// Paths inside a run directory.
pub struct RunDir {
    root: PathBuf,
    /// `ROOT/.lock`, held while this process writes the run
    /// ([`RunDir::open`]): a second writer of the same directory (two
    /// batches, or a requeued Slurm element beside the one it replaces)
    /// is refused instead of running its tasks again beside the first.
    _lock: Option<std::fs::File>,
}

impl RunDir {
    /// Creates the run directory, or opens it to resume the run it holds.
    /// `identity` is what must not change between the two (the settings and
    /// the model): a run directory holding another run's results is
    /// refused, since mixing them would mislabel predictions. Leftover
    /// temporary files of a killed run are removed.
    pub fn open(root: &Path, identity: &serde_json::Value) -> Result<(RunDir, Opened), BatchError> {
        let io = BatchError::io;
        std::fs::create_dir_all(root).map_err(io("create", root))?;
        let lock_path = root.join(".lock");
        let lock = std::fs::File::create(&lock_path).map_err(io("create", &lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(BatchError::Invalid(format!(
                    "another patchwright is writing {} (it holds {}): wait for it to end, \
                     or choose another --out",
                    root.display(),
                    lock_path.display()
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io("lock", &lock_path)(e)),
        }
        let run = RunDir {
            root: root.to_path_buf(),
            _lock: Some(lock),
        };
        let opened = match run.record()? {
            Some(stored) => {
                if let Some(difference) = first_difference(&stored.identity, identity, "") {
                    return Err(BatchError::Different {
                        path: root.to_path_buf(),
                        difference,
                    });
                }
                Opened::Resumed
            }
            None => Opened::Created,
        };
        for sub in ["results", "trajectories"] {
            let dir = root.join(sub);
            std::fs::create_dir_all(&dir).map_err(|source| BatchError::Io {
                action: "create",
                path: dir,
                source,
            })?;
        }
        for dir in [
            root.to_path_buf(),
            root.join("results"),
            root.join("trajectories"),
        ] {
            remove_temporaries(&dir);
        }
        Ok((run, opened))
    }

    /// The run directory at `root`, to read.
    pub fn at(root: &Path) -> RunDir {
        RunDir {
            root: root.to_path_buf(),
            _lock: None,
        }
    }

    /// The stored result of task `id`: `None` when it has not finished.
    pub fn finished(&self, id: &str) -> Result<Option<TaskResult>, BatchError> {
        Ok(read_json_if_exists(&self.result(id))?)
    }

    /// The stored `run.json`: `None` when there is none yet.
    pub fn record(&self) -> Result<Option<RunRecord>, BatchError> {
        let path = self.run_json();
        if !path.exists() {
            return Ok(None);
        }
        Ok(Some(RunRecord::read(&path)?))
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

impl RunDir {
    /// Sums the stage metrics of the tasks `ids` that have them into
    /// `metrics.json`.
    pub fn write_metrics<'a>(
        &self,
        ids: impl Iterator<Item = &'a str>,
    ) -> Result<MetricsSummary, BatchError> {
        let mut all: Vec<Metrics> = Vec::new();
        for id in ids {
            if let Some(m) = self.finished(id)?.and_then(|r| r.metrics) {
                all.push(m);
            }
        }
        let summary = MetricsSummary::of(&all);
        write_json(&self.metrics(), &summary)?;
        Ok(summary)
    }

    /// Rebuilds `predictions.jsonl` from the stored results of the tasks
    /// `ids`, in that order. Tasks without a result, or whose result is an
    /// error, have no line.
    pub fn write_predictions<'a>(
        &self,
        ids: impl Iterator<Item = &'a str>,
        model_name: &str,
    ) -> Result<usize, BatchError> {
        let mut predictions = Vec::new();
        for id in ids {
            let Some(result) = self.finished(id)? else {
                continue;
            };
            if result.status == Status::Error {
                continue;
            }
            predictions.push(Prediction {
                instance_id: result.instance_id,
                model_name_or_path: model_name.to_string(),
                model_patch: result.model_patch,
            });
        }
        result::write_predictions(&self.predictions(), &predictions)?;
        Ok(predictions.len())
    }
}

/// Removes the temporary files (`.tmp*`) an interrupted atomic write leaves.
fn remove_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(".tmp") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The first dotted key where `a` and `b` differ, with both values.
pub fn first_difference(
    a: &serde_json::Value,
    b: &serde_json::Value,
    prefix: &str,
) -> Option<String> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                first_difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &key,
                )
            })
        }
        _ if a == b => None,
        _ => Some(format!(
            "`{}` is {a} in the run, {b} now",
            if prefix.is_empty() { "." } else { prefix }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_name_the_first_dotted_key() {
        let cases = [
            (json!({"a": 1}), json!({"a": 1}), None),
            (
                json!({"s": {"t": 0.4, "u": 1}}),
                json!({"s": {"t": 0.8, "u": 1}}),
                Some("`s.t` is 0.4 in the run, 0.8 now"),
            ),
            (
                json!({"m": "x"}),
                json!({"m": "x", "n": 2}),
                Some("`n` is null in the run, 2 now"),
            ),
            (json!(1), json!(2), Some("`.` is 1 in the run, 2 now")),
        ];
        for (a, b, want) in cases {
            assert_eq!(first_difference(&a, &b, "").as_deref(), want, "{a} vs {b}");
        }
    }

    #[test]
    fn a_run_directory_resumes_only_the_same_run() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("run");
        let identity = json!({"settings": {"window": 30}});
        let (run, opened) = RunDir::open(&root, &identity)?;
        assert_eq!(opened, Opened::Created);
        write_json(
            &run.run_json(),
            &RunRecord {
                identity: identity.clone(),
                ..RunRecord::default()
            },
        )?;
        std::fs::write(root.join("results/.tmpAbC"), "torn")?;
        // A second writer while the first holds it is refused, and removes
        // nothing of the first's.
        let busy = RunDir::open(&root, &identity)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(busy.contains("another patchwright is writing"), "{busy}");
        assert!(root.join("results/.tmpAbC").exists());
        drop(run);
        let (run, opened) = RunDir::open(&root, &identity)?;
        assert_eq!(opened, Opened::Resumed);
        assert!(!root.join("results/.tmpAbC").exists());
        assert!(run.finished("t-1")?.is_none());
        drop(run);
        let err = RunDir::open(&root, &json!({"settings": {"window": 50}}))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("`settings.window` is 30 in the run, 50 now"),
            "{err}"
        );
        Ok(())
    }
}
