//! `results/<id>.json` (one task's outcome) and `predictions.jsonl`
//! (SWE-bench's predictions).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::metrics::Metrics;
use super::RecordError;

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

impl Status {
    /// The status as stored (`no_patch`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Patched => "patched",
            Status::NoPatch => "no_patch",
            Status::Error => "error",
        }
    }
}

/// What kind of failure ended a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskErrorKind {
    /// The repository's mirror or base commit is missing, or the
    /// workspace could not be created.
    Repository,
    /// A prompt did not fit the model's context.
    PromptTooLong,
    /// The model (or the server) failed.
    Engine,
    /// The sandbox refused or failed to run a command.
    Sandbox,
    /// The Python environment is missing or broken.
    Environment,
    /// The code index could not be built.
    Index,
    /// A file of the run could not be written.
    Io,
    /// A bug in patchwright (a panic).
    Internal,
    /// Not known: an error stored as plain text by an older patchwright.
    Unknown,
}

impl TaskErrorKind {
    /// The kind as stored (`prompt_too_long`).
    pub fn as_str(&self) -> &'static str {
        match self {
            TaskErrorKind::Repository => "repository",
            TaskErrorKind::PromptTooLong => "prompt_too_long",
            TaskErrorKind::Engine => "engine",
            TaskErrorKind::Sandbox => "sandbox",
            TaskErrorKind::Environment => "environment",
            TaskErrorKind::Index => "index",
            TaskErrorKind::Io => "io",
            TaskErrorKind::Internal => "internal",
            TaskErrorKind::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for TaskErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a task ended in error: `{"kind": ..., "message": ...}`. A plain
/// string (older files) reads as kind `unknown`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredError")]
pub struct TaskError {
    pub kind: TaskErrorKind,
    pub message: String,
}

impl TaskError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: TaskErrorKind, message: impl Into<String>) -> TaskError {
        TaskError {
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A task error as files hold it: typed, or a plain string.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredError {
    Typed {
        kind: TaskErrorKind,
        message: String,
    },
    Plain(String),
}

impl From<StoredError> for TaskError {
    fn from(e: StoredError) -> TaskError {
        match e {
            StoredError::Typed { kind, message } => TaskError { kind, message },
            StoredError::Plain(message) => TaskError {
                kind: TaskErrorKind::Unknown,
                message,
            },
        }
    }
}

/// One task's outcome, as stored in `results/<id>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    #[serde(default)]
    pub instance_id: String,
    pub status: Status,
    #[serde(default)]
    pub error: Option<TaskError>,
    #[serde(default)]
    pub model_patch: String,
    #[serde(default)]
    pub elapsed_s: f64,
    #[serde(default)]
    pub model_calls: usize,
    #[serde(default)]
    pub prompt_tokens: usize,
    #[serde(default)]
    pub completion_tokens: usize,
    /// Stage metrics (MASAI pipeline, gold patch known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
    /// The environment the task's agents and tests ran in (MASAI
    /// pipeline; older results have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<EnvironmentUsed>,
}

/// Where a task's environment came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvironmentSource {
    /// Built from the (repository, version) spec, the repository
    /// installed at the task's commit in a layer over it.
    Spec,
    /// The virtualenv given with `--environment`, as it is.
    Given,
    /// None: the task's commands ran with the system's Python.
    #[default]
    None,
}

/// The environment a task used, as its result records it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EnvironmentUsed {
    pub source: EnvironmentSource,
    #[serde(default)]
    pub repo: String,
    #[serde(default)]
    pub version: String,
    /// The environment's virtualenv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// The spec's build hash (with `source = spec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// Why there is none, or why the repository did not install into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A line of `predictions.jsonl`, in SWE-bench's format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub instance_id: String,
    pub model_name_or_path: String,
    pub model_patch: String,
}

/// Writes `predictions` to `path` atomically, one JSON line each.
pub fn write_predictions(path: &Path, predictions: &[Prediction]) -> Result<(), RecordError> {
    let mut out = String::new();
    for p in predictions {
        let line = serde_json::to_string(p).map_err(|source| RecordError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        out.push_str(&line);
        out.push('\n');
    }
    super::write_atomic(path, out.as_bytes())
}

/// Reads predictions (`.jsonl`, or a `.json` list) into patches by
/// instance id; a missing or null `model_patch` is empty. A line that is
/// not a prediction is an error naming it.
pub fn load_predictions(path: &Path) -> Result<BTreeMap<String, String>, RecordError> {
    #[derive(Deserialize)]
    struct Line {
        instance_id: String,
        #[serde(default)]
        model_patch: Option<String>,
    }
    let text = std::fs::read_to_string(path).map_err(RecordError::io("read predictions", path))?;
    let lines: Vec<Line> = if text.trim_start().starts_with('[') {
        serde_json::from_str(&text).map_err(|source| RecordError::Json {
            path: path.to_path_buf(),
            source,
        })?
    } else {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|source| RecordError::Line {
                    path: path.to_path_buf(),
                    line: i + 1,
                    source,
                })
            })
            .collect::<Result<_, _>>()?
    };
    Ok(lines
        .into_iter()
        .map(|l| (l.instance_id, l.model_patch.unwrap_or_default()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_string_error_reads_as_unknown() -> Result<(), serde_json::Error> {
        let old: TaskResult = serde_json::from_str(
            r#"{"instance_id": "a", "status": "error", "error": "no repository",
                "model_patch": "", "elapsed_s": 0.1, "model_calls": 0,
                "prompt_tokens": 0, "completion_tokens": 0}"#,
        )?;
        assert_eq!(
            old.error,
            Some(TaskError::new(TaskErrorKind::Unknown, "no repository"))
        );
        let new = TaskResult {
            error: Some(TaskError::new(TaskErrorKind::PromptTooLong, "too long")),
            ..old
        };
        let json = serde_json::to_value(&new)?;
        assert_eq!(json["error"]["kind"], "prompt_too_long");
        assert_eq!(json["error"]["message"], "too long");
        assert_eq!(serde_json::from_value::<TaskResult>(json)?, new);
        Ok(())
    }

    #[test]
    fn predictions_round_trip_and_bad_lines_are_named() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("p.jsonl");
        let p = Prediction {
            instance_id: "a".into(),
            model_name_or_path: "m".into(),
            model_patch: "diff".into(),
        };
        write_predictions(&path, std::slice::from_ref(&p))?;
        assert_eq!(load_predictions(&path)?["a"], "diff");
        std::fs::write(&path, "{\"instance_id\": \"a\"}\nnot json\n")?;
        let err = load_predictions(&path).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("line 2")));
        Ok(())
    }
}
