//! SWE-bench tasks: loading `.json` / `.jsonl` task files and selecting a
//! subset of them (`--filter`, `--slice`, `--shard`).
//!
//! A task file is validated completely before any work starts: the first bad
//! record is reported with the file, the line (jsonl) or index (json list),
//! and the field.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use regex::Regex;
use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};

/// One SWE-bench task, the answer included (the gold patch, the test patch,
/// FAIL_TO_PASS, PASS_TO_PASS): only grading and the metrics computed after
/// a run read it. What a solver may see is its [`Issue`]. Unknown fields are
/// ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub instance_id: String,
    /// `owner/name` on GitHub.
    pub repo: String,
    pub base_commit: String,
    pub problem_statement: String,
    #[serde(default)]
    pub hints_text: String,
    #[serde(default, deserialize_with = "string_or_number")]
    pub version: String,
    /// The gold patch. Never shown to the agents.
    #[serde(default)]
    pub patch: String,
    #[serde(default)]
    pub test_patch: String,
    #[serde(rename = "FAIL_TO_PASS", default, deserialize_with = "test_list")]
    pub fail_to_pass: Vec<String>,
    #[serde(rename = "PASS_TO_PASS", default, deserialize_with = "test_list")]
    pub pass_to_pass: Vec<String>,
    #[serde(default)]
    pub environment_setup_commit: String,
    /// When the issue was opened, as SWE-bench writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

/// What a solver may see of a task: the issue and where it applies. It has
/// no field for the answer, so an agent or a pipeline given an `Issue`
/// cannot name the gold patch or the tests that check it:
///
/// ```
/// # let task: patchwright::dataset::Task = serde_json::from_str(
/// #     r#"{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "c0ffee",
/// #         "problem_statement": "It breaks.", "patch": "diff --git ..."}"#)?;
/// let issue = task.issue();
/// assert_eq!(issue.problem_statement, "It breaks.");
/// # Ok::<(), serde_json::Error>(())
/// ```
///
/// ```compile_fail,E0609
/// # let task: patchwright::dataset::Task = serde_json::from_str(
/// #     r#"{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "c0ffee",
/// #         "problem_statement": "It breaks.", "patch": "diff --git ..."}"#)?;
/// let issue = task.issue();
/// let _gold = issue.patch; // no field `patch` on type `Issue`
/// # Ok::<(), serde_json::Error>(())
/// ```
///
/// ```compile_fail,E0609
/// # let task: patchwright::dataset::Task = serde_json::from_str(
/// #     r#"{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "c0ffee",
/// #         "problem_statement": "It breaks.", "FAIL_TO_PASS": "[]"}"#)?;
/// let issue = task.issue();
/// let _tests = issue.fail_to_pass; // no field `fail_to_pass` on type `Issue`
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Issue {
    pub instance_id: String,
    /// `owner/name` on GitHub.
    pub repo: String,
    pub base_commit: String,
    pub problem_statement: String,
    /// When the issue was opened, where the task file says.
    pub created_at: Option<String>,
}

impl Task {
    /// The part of the task a solver may see.
    pub fn issue(&self) -> Issue {
        Issue {
            instance_id: self.instance_id.clone(),
            repo: self.repo.clone(),
            base_commit: self.base_commit.clone(),
            problem_statement: self.problem_statement.clone(),
            created_at: self.created_at.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("`{0}` is not START:END (for example 0:10, 5:, :20)")]
    SliceForm(String),
    #[error("`{part}` in slice `{slice}` is not a non-negative integer")]
    SliceNumber { part: String, slice: String },
    #[error("slice `{0}` ends before it starts")]
    SliceOrder(String),
    #[error("`{0}` is not K/N with 1 <= K <= N (for example 2/8 for the second of eight shards)")]
    Shard(String),
    #[error("cannot read task file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("task file {path}: unsupported extension; expected .json (a list of tasks) or .jsonl (one task a line)")]
    Extension { path: PathBuf },
    #[error("task file {path}: {location}: {message}")]
    Syntax {
        path: PathBuf,
        location: Location,
        message: String,
    },
    #[error("task file {path}: {location}: field `{field}`: {message}")]
    Field {
        path: PathBuf,
        location: Location,
        field: String,
        message: String,
    },
    #[error("task file {path}: {location}: duplicate instance_id `{id}` (first seen at {first})")]
    Duplicate {
        path: PathBuf,
        location: Location,
        id: String,
        first: Location,
    },
}

/// Where a record sits in its file, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// 1-based line of a `.jsonl` file.
    Line(usize),
    /// 0-based index into a `.json` list.
    Index(usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Line(n) => write!(f, "line {n}"),
            Location::Index(n) => write!(f, "index {n}"),
        }
    }
}

/// Reads and validates a whole task file.
pub fn load(path: &Path) -> Result<Vec<Task>, DatasetError> {
    let text = std::fs::read_to_string(path).map_err(|source| DatasetError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let records: Vec<(Location, &str)> = match ext {
        "jsonl" => text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(i, line)| (Location::Line(i + 1), line))
            .collect(),
        "json" => return load_list(path, &text),
        _ => {
            return Err(DatasetError::Extension {
                path: path.to_path_buf(),
            })
        }
    };
    let mut tasks = Vec::with_capacity(records.len());
    for (location, line) in records {
        let mut de = serde_json::Deserializer::from_str(line);
        let task = parse_record(path, location, &mut de)?;
        de.end().map_err(|e| DatasetError::Syntax {
            path: path.to_path_buf(),
            location,
            message: format!("text after the task object: {e}"),
        })?;
        tasks.push((location, task));
    }
    finish(path, tasks)
}

fn load_list(path: &Path, text: &str) -> Result<Vec<Task>, DatasetError> {
    let values: Vec<serde_json::Value> =
        serde_json::from_str(text).map_err(|e| DatasetError::Syntax {
            path: path.to_path_buf(),
            location: Location::Line(e.line()),
            message: format!("not a JSON list of task objects: {e}"),
        })?;
    let mut tasks = Vec::with_capacity(values.len());
    for (i, value) in values.into_iter().enumerate() {
        tasks.push((
            Location::Index(i),
            parse_record(path, Location::Index(i), value)?,
        ));
    }
    finish(path, tasks)
}

fn parse_record<'de, D>(path: &Path, location: Location, de: D) -> Result<Task, DatasetError>
where
    D: Deserializer<'de>,
    D::Error: fmt::Display,
{
    let task: Task = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let message = e.inner().to_string();
        if field == "." || field.is_empty() {
            match missing_field(&message) {
                Some(field) => DatasetError::Field {
                    path: path.to_path_buf(),
                    location,
                    field,
                    message: "missing".into(),
                },
                None => DatasetError::Syntax {
                    path: path.to_path_buf(),
                    location,
                    message,
                },
            }
        } else {
            DatasetError::Field {
                path: path.to_path_buf(),
                location,
                field,
                message,
            }
        }
    })?;
    validate(&task).map_err(|(field, message)| DatasetError::Field {
        path: path.to_path_buf(),
        location,
        field: field.into(),
        message,
    })?;
    Ok(task)
}

/// serde reports a missing field at the parent's path; pull its name out.
fn missing_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_string())
}

fn validate(task: &Task) -> Result<(), (&'static str, String)> {
    let id_ok = !task.instance_id.is_empty()
        && task
            .instance_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !id_ok {
        return Err((
            "instance_id",
            format!(
                "`{}` is not a usable id (letters, digits, '.', '_', '-')",
                task.instance_id
            ),
        ));
    }
    if crate::repo::mirror_name(&task.repo).is_none() {
        return Err((
            "repo",
            format!("`{}` is not of the form owner/name", task.repo),
        ));
    }
    let commit_ok = (7..=40).contains(&task.base_commit.len())
        && task.base_commit.chars().all(|c| c.is_ascii_hexdigit());
    if !commit_ok {
        return Err((
            "base_commit",
            format!("`{}` is not a hexadecimal commit id", task.base_commit),
        ));
    }
    if task.problem_statement.trim().is_empty() {
        return Err(("problem_statement", "is empty".into()));
    }
    Ok(())
}

fn finish(path: &Path, tasks: Vec<(Location, Task)>) -> Result<Vec<Task>, DatasetError> {
    let mut seen: HashMap<&str, Location> = HashMap::new();
    for (location, task) in &tasks {
        if let Some(first) = seen.insert(&task.instance_id, *location) {
            return Err(DatasetError::Duplicate {
                path: path.to_path_buf(),
                location: *location,
                id: task.instance_id.clone(),
                first,
            });
        }
    }
    Ok(tasks.into_iter().map(|(_, t)| t).collect())
}

/// `FAIL_TO_PASS` / `PASS_TO_PASS`: a list, or a JSON-encoded string of one.
fn test_list<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        List(Vec<String>),
        Encoded(String),
    }
    let form = Form::deserialize(de).map_err(|_| {
        serde::de::Error::custom("expected a list of test names or a JSON-encoded string of one")
    })?;
    match form {
        Form::List(list) => Ok(list),
        Form::Encoded(s) if s.trim().is_empty() => Ok(Vec::new()),
        Form::Encoded(s) => serde_json::from_str(&s).map_err(|e| {
            serde::de::Error::custom(format!(
                "expected a list of test names or a JSON-encoded list: {e}"
            ))
        }),
    }
}

/// `version` is a string in SWE-bench ("3.0") but some exports write 3.0.
fn string_or_number<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        S(String),
        N(serde_json::Number),
    }
    Ok(match Form::deserialize(de)? {
        Form::S(s) => s,
        Form::N(n) => n.to_string(),
    })
}

/// `--slice START:END` (0-based, END exclusive, either side may be empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Slice {
    pub start: usize,
    pub end: Option<usize>,
}

impl FromStr for Slice {
    type Err = DatasetError;
    fn from_str(s: &str) -> Result<Self, DatasetError> {
        let (a, b) = s
            .split_once(':')
            .ok_or_else(|| DatasetError::SliceForm(s.to_string()))?;
        let num = |x: &str| -> Result<Option<usize>, DatasetError> {
            if x.is_empty() {
                Ok(None)
            } else {
                x.parse().map(Some).map_err(|_| DatasetError::SliceNumber {
                    part: x.to_string(),
                    slice: s.to_string(),
                })
            }
        };
        let start = num(a)?.unwrap_or(0);
        let end = num(b)?;
        if matches!(end, Some(e) if e < start) {
            return Err(DatasetError::SliceOrder(s.to_string()));
        }
        Ok(Slice { start, end })
    }
}

/// `--shard K/N`: the K-th (1-based) of N disjoint shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl FromStr for Shard {
    type Err = DatasetError;
    fn from_str(s: &str) -> Result<Self, DatasetError> {
        let parsed = s
            .split_once('/')
            .and_then(|(k, n)| Some((k.parse::<usize>().ok()?, n.parse::<usize>().ok()?)));
        match parsed {
            Some((index, count)) if count >= 1 && (1..=count).contains(&index) => {
                Ok(Shard { index, count })
            }
            _ => Err(DatasetError::Shard(s.to_string())),
        }
    }
}

/// Which tasks of a file to run. Applied in order: filter, slice, shard.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub filter: Option<Regex>,
    pub slice: Option<Slice>,
    pub shard: Option<Shard>,
}

impl Selection {
    /// Shards are assigned round-robin over the filtered, sliced list in file
    /// order: task i (0-based) belongs to shard `i mod N + 1`. The N shards are
    /// disjoint, cover the list, and differ in size by at most one; a shard's
    /// content depends only on the file and the other selection flags.
    pub fn apply(&self, tasks: Vec<Task>) -> Vec<Task> {
        let filtered = tasks.into_iter().filter(|t| {
            self.filter
                .as_ref()
                .is_none_or(|re| re.is_match(&t.instance_id))
        });
        let sliced: Vec<Task> = match self.slice {
            Some(Slice { start, end }) => filtered
                .skip(start)
                .take(end.map_or(usize::MAX, |e| e - start))
                .collect(),
            None => filtered.collect(),
        };
        match self.shard {
            Some(Shard { index, count }) => sliced
                .into_iter()
                .enumerate()
                .filter(|(i, _)| i % count == index - 1)
                .map(|(_, t)| t)
                .collect(),
            None => sliced,
        }
    }
}

/// The tasks a selection keeps of a task file, and what identifies the file.
#[derive(Debug, Clone)]
pub struct Selected {
    /// The task file.
    pub path: PathBuf,
    /// The selected tasks, in file order.
    pub tasks: Vec<Task>,
    /// Tasks in the whole file.
    pub in_file: usize,
    /// The file's sha256, hex-encoded.
    pub sha256: String,
}

impl Selection {
    /// Loads the task file at `path` and keeps this selection of it.
    pub fn select(&self, path: &Path) -> Result<Selected, DatasetError> {
        let all = load(path)?;
        let bytes = std::fs::read(path).map_err(|source| DatasetError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Selected {
            path: path.to_path_buf(),
            in_file: all.len(),
            tasks: self.apply(all),
            sha256: hex::encode(Sha256::digest(&bytes)),
        })
    }

    /// What `run.json` records of the task file and this selection of it.
    pub fn json(&self, selected: &Selected) -> serde_json::Value {
        serde_json::json!({
            "dataset": {
                "path": selected.path,
                "sha256": selected.sha256,
                "tasks_in_file": selected.in_file,
            },
            "selection": {
                "filter": self.filter.as_ref().map(Regex::as_str),
                "slice": self.slice,
                "shard": self.shard,
                "instance_ids": selected.tasks.iter().map(|t| t.instance_id.as_str()).collect::<Vec<_>>(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const GOOD: &str = r#"{"instance_id":"a__b-1","repo":"a/b","base_commit":"0123456789abcdef0123456789abcdef01234567","problem_statement":"it breaks","FAIL_TO_PASS":"[\"t::x\"]","PASS_TO_PASS":["t::y","t::z"],"version":3.1}"#;

    fn file(ext: &str, body: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new()
            .suffix(ext)
            .tempfile()
            .expect("temp file");
        f.write_all(body.as_bytes()).expect("write");
        f
    }

    #[test]
    fn test_lists_accept_both_forms() {
        let f = file(".jsonl", GOOD);
        let tasks = load(f.path()).expect("loads");
        assert_eq!(tasks[0].fail_to_pass, vec!["t::x"]);
        assert_eq!(tasks[0].pass_to_pass, vec!["t::y", "t::z"]);
        assert_eq!(tasks[0].version, "3.1");
    }

    #[test]
    fn json_list_and_jsonl_agree() {
        let jsonl = file(".jsonl", &format!("{GOOD}\n\n"));
        let json = file(".json", &format!("[{GOOD}]"));
        assert_eq!(load(jsonl.path()).unwrap(), load(json.path()).unwrap());
    }

    #[test]
    fn errors_name_location_and_field() {
        let second = GOOD.replace("a__b-1", "a__b-2");
        let cases: &[(&str, String, &str)] = &[
            (
                ".jsonl",
                format!("{GOOD}\n{{\"instance_id\": 3}}"),
                "line 2: field `instance_id`",
            ),
            (
                ".jsonl",
                format!(
                    "{GOOD}\n\n{}",
                    GOOD.replace(r#""repo":"a/b","#, "").replace("a__b-1", "x")
                ),
                "line 3: field `repo`: missing",
            ),
            (
                ".jsonl",
                GOOD.replace(
                    r#""FAIL_TO_PASS":"[\"t::x\"]""#,
                    r#""FAIL_TO_PASS":"[oops""#,
                ),
                "line 1: field `FAIL_TO_PASS`",
            ),
            (".jsonl", format!("{GOOD}\n{{not json"), "line 2: "),
            (
                ".jsonl",
                format!("{GOOD} trailing"),
                "line 1: text after the task object",
            ),
            (
                ".jsonl",
                format!("{GOOD}{}", GOOD.replace("a__b-1", "a__b-2")),
                "line 1: text after the task object",
            ),
            (
                ".jsonl",
                GOOD.replace(r#""FAIL_TO_PASS":"[\"t::x\"]""#, r#""FAIL_TO_PASS":5"#),
                "field `FAIL_TO_PASS`: expected a list of test names",
            ),
            (
                ".json",
                format!("[{GOOD},\n{{oops]"),
                "line 2: not a JSON list",
            ),
            (
                ".json",
                format!(
                    "[{GOOD}, {}]",
                    second.replace("0123456789abcdef0123456789abcdef01234567", "zz")
                ),
                "index 1: field `base_commit`",
            ),
            (
                ".jsonl",
                GOOD.replace(r#""repo":"a/b""#, r#""repo":"ab""#),
                "line 1: field `repo`",
            ),
            (
                ".jsonl",
                format!("{GOOD}\n{GOOD}"),
                "line 2: duplicate instance_id `a__b-1` (first seen at line 1)",
            ),
            (".txt", GOOD.to_string(), "unsupported extension"),
        ];
        for (ext, body, expected) in cases {
            let f = file(ext, body);
            let err = load(f.path()).expect_err(expected).to_string();
            assert!(
                err.contains(expected),
                "{err:?} should contain {expected:?}"
            );
            assert!(
                err.contains(&f.path().display().to_string()),
                "{err} names the file"
            );
        }
    }

    fn tasks(n: usize) -> Vec<Task> {
        let base: Task = serde_json::from_str(GOOD).unwrap();
        (0..n)
            .map(|i| Task {
                instance_id: format!("t-{i}"),
                ..base.clone()
            })
            .collect()
    }

    fn ids(tasks: &[Task]) -> Vec<&str> {
        tasks.iter().map(|t| t.instance_id.as_str()).collect()
    }

    #[test]
    fn selection_cases() {
        let sel = |f: Option<&str>, s: Option<&str>, h: Option<&str>| Selection {
            filter: f.map(|f| Regex::new(f).unwrap()),
            slice: s.map(|s| s.parse().unwrap()),
            shard: h.map(|h| h.parse().unwrap()),
        };
        let cases: &[(Selection, &[&str])] = &[
            (sel(None, None, None), &["t-0", "t-1", "t-2", "t-3", "t-4"]),
            (sel(Some("[13]$"), None, None), &["t-1", "t-3"]),
            (sel(None, Some("1:3"), None), &["t-1", "t-2"]),
            (sel(None, Some(":2"), None), &["t-0", "t-1"]),
            (sel(None, Some("3:"), None), &["t-3", "t-4"]),
            (sel(None, Some("4:99"), None), &["t-4"]),
            (sel(None, None, Some("1/2")), &["t-0", "t-2", "t-4"]),
            (sel(None, None, Some("2/2")), &["t-1", "t-3"]),
            (sel(Some("[^0]$"), Some("1:"), Some("1/2")), &["t-2", "t-4"]),
        ];
        for (selection, expected) in cases {
            assert_eq!(ids(&selection.apply(tasks(5))), *expected, "{selection:?}");
        }
    }

    #[test]
    fn shards_partition_the_set() {
        for n in 1..=7 {
            let mut all: Vec<String> = (1..=n)
                .flat_map(|k| {
                    let s = Selection {
                        shard: Some(Shard { index: k, count: n }),
                        ..Default::default()
                    };
                    s.apply(tasks(23)).into_iter().map(|t| t.instance_id)
                })
                .collect();
            all.sort();
            let mut expected: Vec<String> = tasks(23).into_iter().map(|t| t.instance_id).collect();
            expected.sort();
            assert_eq!(all, expected, "{n} shards");
        }
    }

    #[test]
    fn bad_flags_are_refused() {
        for bad in ["0/3", "4/3", "1/0", "x/2", "3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        for bad in ["5", "a:b", "5:2"] {
            assert!(bad.parse::<Slice>().is_err(), "{bad}");
        }
    }
}
