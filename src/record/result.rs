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

/// Reads predictions into patches by instance id, in any of the shapes
/// SWE-bench's harness (`get_predictions_from_file`) accepts:
///
/// - JSON lines, one prediction a line (`predictions.jsonl`, as `batch`
///   writes it);
/// - a JSON list of predictions;
/// - a JSON object of predictions by instance id, as SWE-agent and
///   mini-swe-agent write `preds.json`
///   (`{"ID": {"instance_id": "ID", "model_name_or_path": ..., "model_patch": ...}}`);
///   as in the harness, each prediction's own `instance_id` counts, not
///   its key.
///
/// The shape is told from the content, whatever the extension. Each
/// prediction is an object with a string `instance_id`; a missing or null
/// `model_patch` is empty (the harness grades it as an empty patch). When
/// an id appears twice, the later prediction wins, as in the harness. A
/// prediction that is not of this form is an error naming the file and
/// the line, index or key.
pub fn load_predictions(path: &Path) -> Result<BTreeMap<String, String>, RecordError> {
    let text = std::fs::read_to_string(path).map_err(RecordError::io("read predictions", path))?;
    parse_predictions(path, &text)
}

/// Parses the text of a predictions file as [`load_predictions`] does after
/// reading it; `path` names the file in errors.
pub fn parse_predictions(path: &Path, text: &str) -> Result<BTreeMap<String, String>, RecordError> {
    let invalid = |problem: String| RecordError::Invalid {
        path: path.to_path_buf(),
        problem,
    };
    let entries: Vec<(String, serde_json::Value)> = if text.trim_start().starts_with('[') {
        let list: Vec<serde_json::Value> =
            serde_json::from_str(text).map_err(|source| RecordError::Json {
                path: path.to_path_buf(),
                source,
            })?;
        list.into_iter()
            .enumerate()
            .map(|(i, v)| (format!("index {i}"), v))
            .collect()
    } else {
        match serde_json::from_str::<serde_json::Value>(text) {
            // One JSON object that is not itself a prediction: SWE-agent's
            // dict of predictions by instance id.
            Ok(serde_json::Value::Object(dict)) if !dict.contains_key("instance_id") => dict
                .into_iter()
                .map(|(key, v)| (format!("key `{key}`"), v))
                .collect(),
            // Anything else is JSON lines (one line is one object).
            _ => text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, l)| {
                    serde_json::from_str(l)
                        .map(|v| (format!("line {}", i + 1), v))
                        .map_err(|source| RecordError::Line {
                            path: path.to_path_buf(),
                            line: i + 1,
                            source,
                        })
                })
                .collect::<Result<_, _>>()?,
        }
    };
    let mut patches = BTreeMap::new();
    for (at, value) in entries {
        let serde_json::Value::Object(mut prediction) = value else {
            return Err(invalid(format!(
                "{at}: a prediction must be a JSON object with instance_id and model_patch"
            )));
        };
        let id = match prediction.remove("instance_id") {
            Some(serde_json::Value::String(id)) => id,
            Some(other) => {
                return Err(invalid(format!(
                    "{at}: `instance_id` must be a string, not {}",
                    json_kind(&other)
                )))
            }
            None => return Err(invalid(format!("{at}: no `instance_id`"))),
        };
        let patch = match prediction.remove("model_patch") {
            None | Some(serde_json::Value::Null) => String::new(),
            Some(serde_json::Value::String(patch)) => patch,
            Some(other) => {
                return Err(invalid(format!(
                    "{at} (`{id}`): `model_patch` must be a string or null, not {}",
                    json_kind(&other)
                )))
            }
        };
        patches.insert(id, patch);
    }
    Ok(patches)
}

/// What kind of JSON value this is, for messages.
fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
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

    #[test]
    fn predictions_in_each_shape_swe_bench_accepts() -> Result<(), Box<dyn std::error::Error>> {
        let expected: BTreeMap<String, String> = [
            ("a__b-1", "diff --git a/x b/x\n"),
            ("a__b-2", ""),
            ("a__b-3", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let one = r#"{"instance_id": "a__b-1", "model_name_or_path": "m", "model_patch": "diff --git a/x b/x\n"}"#;
        let two = r#"{"instance_id": "a__b-2", "model_name_or_path": "m", "model_patch": null}"#;
        let three = r#"{"instance_id": "a__b-3", "model_name_or_path": "m"}"#;
        let cases: &[(&str, String)] = &[
            ("preds.jsonl", format!("{one}\n\n{two}\n{three}\n")),
            ("preds.json", format!("[{one},\n {two}, {three}]")),
            (
                "preds.json",
                format!(r#"{{"a__b-1": {one}, "a__b-2": {two}, "a__b-3": {three}}}"#),
            ),
            // The harness takes each prediction's own id, not its key.
            (
                "preds.json",
                format!(r#"{{"x": {one}, "y": {two}, "z": {three}}}"#),
            ),
            // Extensions do not decide the shape.
            ("preds.txt", format!("  [{one}, {two}, {three}]")),
            ("preds.json", format!("{one}\n{two}\n{three}")),
            // A later prediction of the same id wins.
            (
                "preds.jsonl",
                format!(
                    "{}\n{one}\n{two}\n{three}",
                    one.replace("diff --git", "old")
                ),
            ),
        ];
        let dir = tempfile::tempdir()?;
        for (name, body) in cases {
            let path = dir.path().join(name);
            std::fs::write(&path, body)?;
            assert_eq!(load_predictions(&path)?, expected, "{name}: {body}");
        }
        let path = dir.path().join("one.jsonl");
        std::fs::write(&path, one)?;
        assert_eq!(load_predictions(&path)?.len(), 1);
        Ok(())
    }

    #[test]
    fn bad_predictions_name_the_file_and_the_entry() -> Result<(), Box<dyn std::error::Error>> {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"a": {"model_patch": "d"}}"#,
                ": key `a`: no `instance_id`",
            ),
            (
                r#"{"a": "diff"}"#,
                ": key `a`: a prediction must be a JSON object with instance_id and model_patch",
            ),
            (
                r#"[{"instance_id": "a"}, {"instance_id": 7}]"#,
                ": index 1: `instance_id` must be a string, not a number",
            ),
            (
                "{\"instance_id\": \"a\"}\n[1]",
                ": line 2: a prediction must be a JSON object with instance_id and model_patch",
            ),
            (
                "{\"instance_id\": \"a\"}\n{\"instance_id\": \"b\", \"model_patch\": [\"d\"]}",
                ": line 2 (`b`): `model_patch` must be a string or null, not a list",
            ),
            (
                "{\"instance_id\": \"a\"}\n{\"instance_id\": \"b\",",
                " line 2 is not valid JSON of the expected shape: EOF while parsing a value at line 1 column 20",
            ),
            (
                "[{\"instance_id\": \"a\"},",
                " is not valid JSON of the expected shape: EOF while parsing a value at line 1 column 22",
            ),
        ];
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("preds.json");
        for (body, expected) in cases {
            std::fs::write(&path, body)?;
            let err = load_predictions(&path).err().map(|e| e.to_string());
            assert_eq!(err, Some(format!("{}{expected}", path.display())), "{body}");
        }
        Ok(())
    }
}
