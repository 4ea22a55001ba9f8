//! Every file patchwright writes into a run, sweep or eval directory, as
//! one Rust type that both writes and reads it, and the atomic writes.
//!
//! - `run.json`: [`run::RunRecord`]; `results/<id>.json`:
//!   [`result::TaskResult`]; `predictions.jsonl`: [`result::Prediction`].
//! - `trajectories/<id>.json`: [`trajectory::TrajectoryFile`] and its
//!   [`trajectory::Step`]s.
//! - `metrics.json`, `artifacts/<id>/metrics.json`: [`metrics::Summary`],
//!   [`metrics::Metrics`].
//! - `sweep.json`, `table.json`: [`sweep::SweepFile`], [`sweep::Row`].
//! - an eval directory's `report.json` and `logs/<id>/report.json`:
//!   [`grade::Summary`], [`grade::InstanceReport`].
//! - `slurm/slurm.json` of a run submitted to Slurm: [`slurm::SlurmFile`].
//!
//! Files of older versions lack some fields: those read as their default.
//! This module sits below everything that runs tasks: it imports only data
//! types of the engine, the edit matcher and the dataset.

pub mod grade;
pub mod metrics;
pub mod result;
pub mod run;
pub mod slurm;
pub mod sweep;
pub mod trajectory;

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A run file that could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON of the expected shape: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path} line {line} is not valid JSON of the expected shape: {source}")]
    Line {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("{path}: {problem}")]
    Invalid { path: PathBuf, problem: String },
}

impl RecordError {
    fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RecordError {
        let path = path.to_path_buf();
        move |source| RecordError::Io {
            action,
            path,
            source,
        }
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, flushed, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    let io = |action| RecordError::io(action, path);
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(io("create a temporary file beside"))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(io("write"))?;
    tmp.as_file().sync_all().map_err(io("sync"))?;
    tmp.persist(path)
        .map_err(|e| RecordError::io("rename into place", path)(e.error))?;
    Ok(())
}

/// Serialises `value` as pretty JSON and writes it atomically.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), RecordError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| RecordError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Reads the JSON file `path` as a `T`.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, RecordError> {
    let bytes = std::fs::read(path).map_err(RecordError::io("read", path))?;
    serde_json::from_slice(&bytes).map_err(|source| RecordError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// [`read_json`], with `None` when `path` does not exist.
pub fn read_json_if_exists<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, RecordError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| RecordError::Json {
                path: path.to_path_buf(),
                source,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(RecordError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_path() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("x.json");
        let missing = read_json::<serde_json::Value>(&path)
            .err()
            .map(|e| e.to_string());
        assert!(missing.is_some_and(|e| e.contains(&path.display().to_string())));
        assert!(read_json_if_exists::<serde_json::Value>(&path)?.is_none());
        std::fs::write(&path, "{not json")?;
        let bad = read_json::<serde_json::Value>(&path)
            .err()
            .map(|e| e.to_string());
        assert!(bad.is_some_and(|e| e.contains(&path.display().to_string())));
        write_json(&path, &serde_json::json!({"a": 1}))?;
        assert_eq!(read_json::<serde_json::Value>(&path)?["a"], 1);
        Ok(())
    }
}
