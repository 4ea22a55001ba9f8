//! SWE-bench tasks: loading `.json` / `.jsonl` / `.parquet` task files and
//! selecting a subset of them (`--filter`, `--slice`, `--shard`).
//!
//! A task file is validated completely before any work starts: the first bad
//! record is reported with the file, the line (jsonl), index (json list) or
//! row (parquet), and the field.
//!
//! A `.parquet` file is what SWE-bench publishes on Hugging Face
//! (`princeton-nlp/SWE-bench_Lite`'s `data/test-00000-of-00001.parquet`,
//! Verified's, the full set's): one column per field, as in the JSON files,
//! every one a string (`FAIL_TO_PASS` and `PASS_TO_PASS` JSON-encoded lists,
//! as in the JSON files). Each row becomes the JSON object it would be in a
//! `.json` file and goes through the same parsing and validation, so both
//! forms of one dataset load to the same tasks. Only the snappy codec (what
//! Hugging Face's `datasets` writes) and uncompressed files are read.

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
    #[error("task file {path}: unsupported extension; expected .json (a list of tasks), .jsonl (one task a line) or .parquet (one task a row)")]
    Extension { path: PathBuf },
    /// The file is not parquet this reader can read (a bad footer, an
    /// unsupported codec); `column` names the column being read, if any.
    #[error("task file {path}: {}cannot read it as parquet: {message}; convert it to .jsonl (for example with pandas: `pd.read_parquet(f).to_json(out, orient=\"records\", lines=True)`)", column.as_deref().map_or(String::new(), |c| format!("column `{c}`: ")))]
    Parquet {
        path: PathBuf,
        column: Option<String>,
        message: String,
    },
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
    /// 0-based row of a `.parquet` file.
    Row(usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Line(n) => write!(f, "line {n}"),
            Location::Index(n) => write!(f, "index {n}"),
            Location::Row(n) => write!(f, "row {n}"),
        }
    }
}

/// Reads and validates a whole task file: `.jsonl`, `.json` (a list) or
/// `.parquet`, by its extension.
pub fn load(path: &Path) -> Result<Vec<Task>, DatasetError> {
    if path.extension().and_then(|e| e.to_str()) == Some("parquet") {
        return load_parquet(path);
    }
    let text = std::fs::read_to_string(path).map_err(|source| DatasetError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// Parses and validates the text of a `.jsonl` or `.json` task file, as
/// [`load`] does after reading it: `path`'s extension picks the form and
/// `path` names the file in errors.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Task>, DatasetError> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let records: Vec<(Location, &str)> = match ext {
        "jsonl" => text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(i, line)| (Location::Line(i + 1), line))
            .collect(),
        "json" => return load_list(path, text),
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

/// The columns of a parquet task file that are read: the fields of
/// [`Task`]. Other columns (a dataframe's index, newer SWE-bench fields) are
/// skipped unread, as unknown keys of a JSON task are ignored.
pub const PARQUET_COLUMNS: &[&str] = &[
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "hints_text",
    "version",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
    "created_at",
];

/// The parquet codecs read: snappy, which Hugging Face's `datasets` (and
/// pyarrow's and pandas' defaults) write, and none. Others (zstd, gzip,
/// brotli, lz4) would each add a C or Rust codec to the build for files
/// SWE-bench does not publish.
pub const PARQUET_CODECS: &[parquet::basic::Compression] = &[
    parquet::basic::Compression::SNAPPY,
    parquet::basic::Compression::UNCOMPRESSED,
];

fn load_parquet(path: &Path) -> Result<Vec<Task>, DatasetError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::schema::types::Type;

    let bad = |column: Option<&str>, message: String| DatasetError::Parquet {
        path: path.to_path_buf(),
        column: column.map(str::to_string),
        message,
    };
    let file = std::fs::File::open(path).map_err(|source| DatasetError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = SerializedFileReader::new(file).map_err(|e| bad(None, e.to_string()))?;
    let rows = usize::try_from(reader.metadata().file_metadata().num_rows())
        .map_err(|_| bad(None, "a negative row count in the footer".into()))?;
    let root = reader.metadata().file_metadata().schema().clone();
    // A codec this build lacks fails mid-read with a terse message; say
    // which column and codec up front instead.
    for group in reader.metadata().row_groups() {
        for chunk in group.columns() {
            let codec = chunk.compression();
            let column = chunk.column_path().string();
            let wanted = chunk
                .column_path()
                .parts()
                .first()
                .is_some_and(|top| PARQUET_COLUMNS.contains(&top.as_str()));
            if wanted && !PARQUET_CODECS.contains(&codec) {
                let name = format!("{codec:?}");
                let name = name.split('(').next().unwrap_or(&name).to_string();
                return Err(bad(
                    Some(&column),
                    format!(
                        "it is compressed with {name}, and this build reads only snappy-compressed and uncompressed parquet"
                    ),
                ));
            }
        }
    }
    let mut records: Vec<serde_json::Map<String, serde_json::Value>> =
        vec![serde_json::Map::new(); rows];
    // One column at a time, so that a column that does not decode is named.
    for field in root.get_fields() {
        let name = field.name();
        if !PARQUET_COLUMNS.contains(&name) {
            continue;
        }
        let projection = Type::group_type_builder(root.name())
            .with_fields(vec![field.clone()])
            .build()
            .map_err(|e| bad(Some(name), e.to_string()))?;
        let iter = reader
            .get_row_iter(Some(projection))
            .map_err(|e| bad(Some(name), e.to_string()))?;
        let mut read = 0;
        for (i, row) in iter.enumerate() {
            let row = row.map_err(|e| bad(Some(name), format!("row {i}: {e}")))?;
            let record = records
                .get_mut(i)
                .ok_or_else(|| bad(Some(name), format!("more rows than the footer's {rows}")))?;
            for (column, value) in row.into_columns() {
                let value = parquet_value(value).map_err(|e| DatasetError::Field {
                    path: path.to_path_buf(),
                    location: Location::Row(i),
                    field: column.clone(),
                    message: e.to_string(),
                })?;
                // A null cell is an absent field: its default, or `missing`.
                if !value.is_null() {
                    record.insert(column, value);
                }
            }
            read = i + 1;
        }
        if read != rows {
            return Err(bad(
                Some(name),
                format!("{read} rows where the footer says {rows}"),
            ));
        }
    }
    let mut tasks = Vec::with_capacity(rows);
    for (i, record) in records.into_iter().enumerate() {
        let location = Location::Row(i);
        tasks.push((
            location,
            parse_record(path, location, serde_json::Value::Object(record))?,
        ));
    }
    finish(path, tasks)
}

/// A parquet cell that no task field can be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadCell {
    #[error("a byte array that is not UTF-8 text")]
    NotUtf8,
    #[error("a list that is not of strings: {0}")]
    List(String),
    #[error("{0} in parquet; expected a string")]
    Kind(&'static str),
}

/// One parquet cell as the JSON value it would be in a `.json` task file:
/// strings (and UTF-8 byte arrays), numbers, booleans, lists of them.
fn parquet_value(field: parquet::record::Field) -> Result<serde_json::Value, BadCell> {
    use parquet::record::{Field, ListAccessor};
    use serde_json::Value;
    Ok(match field {
        Field::Null => Value::Null,
        Field::Bool(b) => Value::Bool(b),
        Field::Str(s) => Value::String(s),
        Field::Bytes(b) => {
            Value::String(String::from_utf8(b.data().to_vec()).map_err(|_| BadCell::NotUtf8)?)
        }
        Field::Byte(n) => n.into(),
        Field::Short(n) => n.into(),
        Field::Int(n) => n.into(),
        Field::Long(n) => n.into(),
        Field::UByte(n) => n.into(),
        Field::UShort(n) => n.into(),
        Field::UInt(n) => n.into(),
        Field::ULong(n) => n.into(),
        Field::Float(x) => {
            serde_json::Number::from_f64(f64::from(x)).map_or(Value::Null, Value::Number)
        }
        Field::Double(x) => serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number),
        Field::ListInternal(list) => {
            let mut items = Vec::with_capacity(list.len());
            for i in 0..list.len() {
                let item = list
                    .get_string(i)
                    .map_err(|e| BadCell::List(e.to_string()))?;
                items.push(Value::String(item.clone()));
            }
            Value::Array(items)
        }
        other => {
            let kind = match other {
                Field::Float16(_) => "a half float",
                Field::Decimal(_) => "a decimal",
                Field::Date(_) => "a date",
                Field::TimeMillis(_) | Field::TimeMicros(_) => "a time of day",
                Field::TimestampMillis(_) | Field::TimestampMicros(_) => "a timestamp",
                Field::Group(_) => "a struct",
                Field::MapInternal(_) => "a map",
                _ => "an unsupported type",
            };
            return Err(BadCell::Kind(kind));
        }
    })
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

    /// A parquet column for [`write_parquet`]: its cells, `None` a null.
    enum Column {
        Str(Vec<Option<String>>),
        Long(Vec<Option<i64>>),
        Date(Vec<Option<i32>>),
    }

    /// Writes `columns` as one snappy-compressed row group, as Hugging
    /// Face's `datasets` writes SWE-bench (every column optional).
    fn write_parquet(
        path: &Path,
        columns: &[(&str, Column)],
    ) -> Result<(), Box<dyn std::error::Error>> {
        use parquet::basic::Compression;
        use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
        use parquet::file::properties::WriterProperties;
        use parquet::file::writer::SerializedFileWriter;
        use std::sync::Arc;

        let fields: Vec<String> = columns
            .iter()
            .map(|(name, column)| match column {
                Column::Str(_) => format!("optional binary {name} (STRING);"),
                Column::Long(_) => format!("optional int64 {name};"),
                Column::Date(_) => format!("optional int32 {name} (DATE);"),
            })
            .collect();
        let schema = parquet::schema::parser::parse_message_type(&format!(
            "message schema {{ {} }}",
            fields.join(" ")
        ))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let file = std::fs::File::create(path)?;
        let mut writer = SerializedFileWriter::new(file, Arc::new(schema), Arc::new(props))?;
        let mut group = writer.next_row_group()?;
        fn levels<T: Clone>(cells: &[Option<T>]) -> (Vec<T>, Vec<i16>) {
            let values = cells.iter().flatten().cloned().collect();
            let defs = cells.iter().map(|c| i16::from(c.is_some())).collect();
            (values, defs)
        }
        for (_, column) in columns {
            let mut out = group
                .next_column()?
                .ok_or("fewer columns than the schema")?;
            match column {
                Column::Str(cells) => {
                    let cells: Vec<Option<ByteArray>> = cells
                        .iter()
                        .map(|c| c.as_deref().map(ByteArray::from))
                        .collect();
                    let (values, defs) = levels(&cells);
                    out.typed::<ByteArrayType>()
                        .write_batch(&values, Some(&defs), None)?;
                }
                Column::Long(cells) => {
                    let (values, defs) = levels(cells);
                    out.typed::<Int64Type>()
                        .write_batch(&values, Some(&defs), None)?;
                }
                Column::Date(cells) => {
                    let (values, defs) = levels(cells);
                    out.typed::<Int32Type>()
                        .write_batch(&values, Some(&defs), None)?;
                }
            }
            out.close()?;
        }
        group.close()?;
        writer.close()?;
        Ok(())
    }

    /// SWE-bench's columns, in its order, for `records` (JSON task
    /// objects): every value a string, lists JSON-encoded, as on Hugging
    /// Face.
    fn swe_bench_columns(records: &[serde_json::Value]) -> Vec<(&'static str, Column)> {
        const ORDER: &[&str] = &[
            "repo",
            "instance_id",
            "base_commit",
            "patch",
            "test_patch",
            "problem_statement",
            "hints_text",
            "created_at",
            "version",
            "FAIL_TO_PASS",
            "PASS_TO_PASS",
            "environment_setup_commit",
        ];
        ORDER
            .iter()
            .map(|name| {
                let cells = records
                    .iter()
                    .map(|r| match &r[*name] {
                        serde_json::Value::Null => None,
                        serde_json::Value::String(s) => Some(s.clone()),
                        other => Some(other.to_string()),
                    })
                    .collect();
                (*name, Column::Str(cells))
            })
            .collect()
    }

    #[test]
    fn parquet_reads_the_tasks_the_json_holds() -> Result<(), Box<dyn std::error::Error>> {
        let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/demo/tasks.jsonl");
        let records: Vec<serde_json::Value> = std::fs::read_to_string(&demo)?
            .lines()
            .take(3)
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
        let dir = tempfile::tempdir()?;
        let json = dir.path().join("tasks.json");
        std::fs::write(&json, serde_json::to_string(&records)?)?;
        let parquet = dir.path().join("tasks.parquet");
        let mut columns = swe_bench_columns(&records);
        // A dataframe's index: not a task field, skipped unread.
        columns.push((
            "__index_level_0__",
            Column::Long(vec![Some(0), Some(1), Some(2)]),
        ));
        write_parquet(&parquet, &columns)?;
        let from_json = load(&json)?;
        let from_parquet = load(&parquet)?;
        assert_eq!(from_json.len(), 3);
        assert_eq!(from_parquet, from_json);
        assert_eq!(
            ids(&from_parquet),
            ["demo__cachekit-1", "demo__cachekit-2", "demo__confkit-1"]
        );
        assert!(!from_parquet[0].fail_to_pass.is_empty());
        // Selection hashes and records the parquet file like any other.
        let selected = Selection::default().select(&parquet)?;
        assert_eq!(selected.in_file, 3);
        assert_eq!(selected.sha256.len(), 64);
        Ok(())
    }

    #[test]
    fn parquet_errors_name_the_file_row_and_column() -> Result<(), Box<dyn std::error::Error>> {
        let good: serde_json::Value = serde_json::from_str(GOOD)?;
        let second = {
            let mut r = good.clone();
            r["instance_id"] = "a__b-2".into();
            r
        };
        let str_col = |cells: &[Option<&str>]| {
            Column::Str(cells.iter().map(|c| c.map(str::to_string)).collect())
        };
        let base = || swe_bench_columns(&[good.clone(), second.clone()]);
        let with = |name: &'static str, column: Column| {
            let mut columns = base();
            columns.retain(|(n, _)| *n != name);
            columns.push((name, column));
            columns
        };
        let without = |name: &str| {
            let mut columns = base();
            columns.retain(|(n, _)| *n != name);
            columns
        };
        let cases: Vec<(Vec<(&str, Column)>, &str)> = vec![
            (without("repo"), "row 0: field `repo`: missing"),
            (
                with("repo", str_col(&[Some("a/b"), None])),
                "row 1: field `repo`: missing",
            ),
            (
                with("FAIL_TO_PASS", str_col(&[Some("[]"), Some("[oops")])),
                "row 1: field `FAIL_TO_PASS`: expected a list of test names or a JSON-encoded list: expected value at line 1 column 2",
            ),
            (
                with("instance_id", Column::Long(vec![Some(1), Some(2)])),
                "row 0: field `instance_id`: invalid type: integer `1`, expected a string",
            ),
            (
                with("created_at", Column::Date(vec![Some(1), Some(2)])),
                "row 0: field `created_at`: a date in parquet; expected a string",
            ),
            (
                with("instance_id", str_col(&[Some("a__b-1"), Some("a__b-1")])),
                "row 1: duplicate instance_id `a__b-1` (first seen at row 0)",
            ),
            (
                with("base_commit", str_col(&[Some("zz"), Some("zz")])),
                "row 0: field `base_commit`: `zz` is not a hexadecimal commit id",
            ),
        ];
        let dir = tempfile::tempdir()?;
        for (i, (columns, expected)) in cases.into_iter().enumerate() {
            let path = dir.path().join(format!("case{i}.parquet"));
            write_parquet(&path, &columns)?;
            let err = load(&path).expect_err(expected).to_string();
            assert_eq!(
                err,
                format!("task file {}: {expected}", path.display()),
                "case {i}"
            );
        }
        let path = dir.path().join("text.parquet");
        std::fs::write(&path, GOOD)?;
        let err = load(&path).expect_err("not parquet").to_string();
        assert!(
            err.starts_with(&format!(
                "task file {}: cannot read it as parquet: ",
                path.display()
            )),
            "{err}"
        );
        Ok(())
    }

    /// Files pyarrow wrote (`tests/fixtures/parquet/make.py`), as Hugging
    /// Face publishes SWE-bench.
    #[test]
    fn parquet_written_by_pyarrow_reads_as_its_json() -> Result<(), Box<dyn std::error::Error>> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let all = load(&root.join("datasets/demo/tasks.jsonl"))?;
        let fixtures = root.join("tests/fixtures/parquet");
        let snappy = load(&fixtures.join("demo-2.parquet"))?;
        assert_eq!(snappy, all[8..10]);
        assert_eq!(ids(&snappy), ["demo__textkit-1", "demo__textkit-2"]);
        let zstd = fixtures.join("demo-2-zstd.parquet");
        let err = load(&zstd).expect_err("zstd is not built in").to_string();
        let expected = format!(
            "task file {}: column `repo`: cannot read it as parquet: ",
            zstd.display()
        );
        assert!(err.starts_with(&expected), "{err}");
        assert!(
            err.ends_with("it is compressed with ZSTD, and this build reads only snappy-compressed and uncompressed parquet; convert it to .jsonl (for example with pandas: `pd.read_parquet(f).to_json(out, orient=\"records\", lines=True)`)"),
            "{err}"
        );
        Ok(())
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
