//! The run directory: its layout, atomic writes, and resuming a run.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{BatchError, Prediction, Status, TaskResult};
use crate::pipeline::metrics::{Metrics, Summary as MetricsSummary};

/// Whether [`RunDir::open`] found a run to resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    Created,
    Resumed,
}

/// Paths inside a run directory.
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// Creates the run directory, or opens it to resume the run it holds.
    /// `identity` is what must not change between the two (the settings and
    /// the model): a run directory holding another run's results is
    /// refused, since mixing them would mislabel predictions. Leftover
    /// temporary files of a killed run are removed.
    pub fn open(root: &Path, identity: &serde_json::Value) -> Result<(RunDir, Opened), BatchError> {
        let run = RunDir {
            root: root.to_path_buf(),
        };
        let opened = match std::fs::read_to_string(run.run_json()) {
            Ok(text) => {
                let stored: serde_json::Value =
                    serde_json::from_str(&text).map_err(|source| BatchError::Json {
                        what: run.run_json().display().to_string(),
                        source,
                    })?;
                let stored = stored.get("identity").cloned().unwrap_or_default();
                if let Some(difference) = first_difference(&stored, identity, "") {
                    return Err(BatchError::Different {
                        path: root.to_path_buf(),
                        difference,
                    });
                }
                Opened::Resumed
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Opened::Created,
            Err(source) => {
                return Err(BatchError::Io {
                    action: "read",
                    path: run.run_json(),
                    source,
                })
            }
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
        }
    }

    /// The stored result of task `id`: `None` when it has not finished.
    pub fn finished(&self, id: &str) -> Result<Option<TaskResult>, BatchError> {
        let path = self.result(id);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|source| BatchError::Json {
                    what: path.display().to_string(),
                    source,
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(BatchError::Io {
                action: "read",
                path,
                source,
            }),
        }
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
        let mut out = String::new();
        let mut lines = 0;
        for id in ids {
            let Some(result) = self.finished(id)? else {
                continue;
            };
            if result.status == Status::Error {
                continue;
            }
            let line = serde_json::to_string(&Prediction {
                instance_id: result.instance_id,
                model_name_or_path: model_name.to_string(),
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
        write_atomic(&self.predictions(), out.as_bytes())?;
        Ok(lines)
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
        write_json(&run.run_json(), &json!({"identity": identity}))?;
        std::fs::write(root.join("results/.tmpAbC"), "torn")?;
        let (run, opened) = RunDir::open(&root, &identity)?;
        assert_eq!(opened, Opened::Resumed);
        assert!(!root.join("results/.tmpAbC").exists());
        assert!(run.finished("t-1")?.is_none());
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
