//! Reading run and sweep directories into what the report shows. Only
//! `run.json`, `sweep.json` and `results/` are read here; trajectories,
//! test logs and artifacts are read while rendering, one task at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::ReportError;

/// Everything the report covers.
pub(crate) struct Report {
    pub runs: Vec<Run>,
    /// Parameters that differ among the runs (dotted keys), sweep grid
    /// keys first.
    pub params: Vec<String>,
    pub inputs: Vec<PathBuf>,
    pub missing_points: Vec<PathBuf>,
}

pub(crate) struct Run {
    pub label: String,
    pub dir: PathBuf,
    /// Settings flattened to dotted keys, values as displayed; a sweep
    /// point's values fill in keys the settings lack.
    pub settings: BTreeMap<String, String>,
    pub model: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The batch's wall time (run.json's summary), else the tasks' sum.
    pub elapsed_s: f64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Whether the run was graded (`--evaluate`).
    pub graded: bool,
    /// Resolved tasks, when graded.
    pub resolved: Option<usize>,
    pub tasks: Vec<Task>,
    /// Instance ids selected but without a result (an unfinished run).
    pub unfinished: Vec<String>,
}

pub(crate) struct Task {
    pub id: String,
    pub result: TaskResult,
    /// From `eval/logs/<id>/report.json`.
    pub grade: Option<Value>,
    pub resolved: Option<bool>,
}

/// `results/<id>.json`, read leniently.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TaskResult {
    pub instance_id: String,
    pub status: String,
    pub error: Option<String>,
    pub model_patch: String,
    pub elapsed_s: f64,
    pub model_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub metrics: Option<TaskMetrics>,
}

/// The stage metrics of a task (`pipeline::metrics::Metrics`), read
/// leniently.
/// A task's stage metrics, as the batch stores them.
pub(crate) type TaskMetrics = crate::pipeline::metrics::Metrics;

#[derive(Deserialize)]
struct SweepFile {
    #[serde(default)]
    grid: Vec<GridAxis>,
    points: Vec<SweepPoint>,
}

#[derive(Deserialize)]
struct GridAxis {
    key: String,
}

#[derive(Deserialize)]
struct SweepPoint {
    label: String,
    dir: PathBuf,
    #[serde(default)]
    values: BTreeMap<String, Value>,
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ReportError {
    let path = path.to_path_buf();
    move |source| ReportError::Io {
        action,
        path,
        source,
    }
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ReportError> {
    let bytes = std::fs::read(path).map_err(io("read", path))?;
    serde_json::from_slice(&bytes).map_err(|source| ReportError::Json {
        path: path.to_path_buf(),
        source,
    })
}

pub(crate) fn load(inputs: &[PathBuf]) -> Result<Report, ReportError> {
    let mut runs = Vec::new();
    let mut grid_keys: Vec<String> = Vec::new();
    let mut missing_points = Vec::new();
    for input in inputs {
        if input.join("run.json").is_file() {
            runs.push(load_run(input, None, &BTreeMap::new())?);
        } else if input.join("sweep.json").is_file() {
            let path = input.join("sweep.json");
            let sweep: SweepFile = read_json(&path)?;
            if sweep.points.is_empty() {
                return Err(ReportError::Invalid {
                    path,
                    problem: "the sweep has no points".into(),
                });
            }
            for axis in sweep.grid {
                if !grid_keys.contains(&axis.key) {
                    grid_keys.push(axis.key);
                }
            }
            for point in sweep.points {
                let dir = input.join(&point.dir);
                if dir.join("run.json").is_file() {
                    runs.push(load_run(&dir, Some(&point.label), &point.values)?);
                } else {
                    missing_points.push(dir);
                }
            }
        } else if !input.is_dir() {
            return Err(ReportError::Invalid {
                path: input.clone(),
                problem: "no such directory".into(),
            });
        } else {
            return Err(ReportError::NotARun {
                path: input.clone(),
            });
        }
    }
    if runs.is_empty() {
        return Err(ReportError::Invalid {
            path: inputs.first().cloned().unwrap_or_default(),
            problem: "no sweep point has been run yet (no point directory holds run.json)".into(),
        });
    }
    disambiguate_labels(&mut runs);
    let params = differing(&runs, &grid_keys);
    Ok(Report {
        runs,
        params,
        inputs: inputs.to_vec(),
        missing_points,
    })
}

/// Two runs with one label get their directories as labels.
fn disambiguate_labels(runs: &mut [Run]) {
    let mut seen = BTreeMap::<String, usize>::new();
    for r in runs.iter() {
        *seen.entry(r.label.clone()).or_default() += 1;
    }
    for r in runs.iter_mut() {
        if seen.get(&r.label).copied().unwrap_or(0) > 1 {
            r.label = r.dir.display().to_string();
        }
    }
}

/// Grid keys, then every settings key that at least two runs have and
/// whose value differs among the runs that have it (a key only some runs
/// have is a difference of versions, not a parameter).
fn differing(runs: &[Run], grid: &[String]) -> Vec<String> {
    let mut out: Vec<String> = grid.to_vec();
    let keys: BTreeSet<&String> = runs.iter().flat_map(|r| r.settings.keys()).collect();
    for key in keys {
        if out.contains(key) {
            continue;
        }
        let values: Vec<&String> = runs.iter().filter_map(|r| r.settings.get(key)).collect();
        let distinct: BTreeSet<&String> = values.iter().copied().collect();
        if values.len() > 1 && distinct.len() > 1 {
            out.push(key.clone());
        }
    }
    out
}

fn load_run(
    dir: &Path,
    label: Option<&str>,
    point_values: &BTreeMap<String, Value>,
) -> Result<Run, ReportError> {
    let run_json = dir.join("run.json");
    let run: Value = read_json(&run_json)?;
    let Some(obj) = run.as_object() else {
        return Err(ReportError::Invalid {
            path: run_json,
            problem: "run.json is not a JSON object".into(),
        });
    };
    let mut settings = BTreeMap::new();
    if let Some(s) = obj.get("settings") {
        flatten("", s, &mut settings);
    }
    for (k, v) in point_values {
        settings
            .entry(k.clone())
            .or_insert_with(|| display_value(v));
    }
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(String::from);
    let model = obj
        .get("model")
        .and_then(|m| text(m.get("name_or_path")).or_else(|| m.as_str().map(String::from)));
    let summary = obj.get("summary");
    let num = |key: &str| summary.and_then(|s| s.get(key));

    let tasks = load_tasks(dir)?;
    let have: BTreeSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let unfinished = obj
        .get("selection")
        .and_then(|s| s.get("instance_ids"))
        .and_then(Value::as_array)
        .map(|ids| {
            ids.iter()
                .filter_map(Value::as_str)
                .filter(|id| !have.contains(id))
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();

    let eval_summary = dir.join("eval").join("report.json");
    let graded = tasks.iter().any(|t| t.grade.is_some())
        || eval_summary.is_file()
        || num("resolved").is_some_and(|v| !v.is_null());
    let resolved = if !graded {
        None
    } else if tasks.iter().any(|t| t.resolved.is_some()) {
        Some(tasks.iter().filter(|t| t.resolved == Some(true)).count())
    } else if let Some(n) = num("resolved").and_then(Value::as_u64) {
        Some(n as usize)
    } else {
        let v: Option<Value> = read_json(&eval_summary).ok();
        v.and_then(|v| v.get("resolved_instances").and_then(Value::as_u64))
            .map(|n| n as usize)
    };
    let sum_tasks = |f: fn(&Task) -> u64| tasks.iter().map(f).sum::<u64>();
    Ok(Run {
        label: label.map(String::from).unwrap_or_else(|| {
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| dir.display().to_string())
        }),
        dir: dir.to_path_buf(),
        settings,
        model,
        started_at: text(obj.get("started_at")),
        finished_at: text(obj.get("finished_at")),
        elapsed_s: num("elapsed_s")
            .and_then(Value::as_f64)
            .unwrap_or_else(|| tasks.iter().map(|t| t.result.elapsed_s).sum()),
        prompt_tokens: num("prompt_tokens")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| sum_tasks(|t| t.result.prompt_tokens)),
        completion_tokens: num("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| sum_tasks(|t| t.result.completion_tokens)),
        graded,
        resolved,
        tasks,
        unfinished,
    })
}

fn load_tasks(dir: &Path) -> Result<Vec<Task>, ReportError> {
    let results = dir.join("results");
    let mut files = Vec::new();
    if results.is_dir() {
        for entry in std::fs::read_dir(&results).map_err(io("list", &results))? {
            let path = entry.map_err(io("list", &results))?.path();
            if path.extension().is_some_and(|e| e == "json") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut tasks = Vec::new();
    for path in files {
        let mut result: TaskResult = read_json(&path)?;
        if result.instance_id.is_empty() {
            result.instance_id = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        let id = result.instance_id.clone();
        let report = dir.join("eval").join("logs").join(&id).join("report.json");
        let grade = if report.is_file() {
            let v: Value = read_json(&report)?;
            // SWE-bench's shape: {"<id>": {...}}; a bare report is accepted too.
            Some(v.get(&id).cloned().unwrap_or(v))
        } else {
            None
        };
        let resolved = grade
            .as_ref()
            .and_then(|g| g.get("resolved"))
            .and_then(Value::as_bool);
        tasks.push(Task {
            id,
            result,
            grade,
            resolved,
        });
    }
    Ok(tasks)
}

/// Flattens nested objects to dotted keys; other values are displayed.
pub(crate) fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), display_value(other));
        }
    }
}

/// A setting as shown: numbers with at most six significant digits (a
/// temperature stored as f32 shows as 0.8, not 0.800000011920929).
pub(crate) fn display_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => number(f),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// `f` with at most six significant digits, trailing zeros dropped.
pub(crate) fn number(f: f64) -> String {
    if !f.is_finite() {
        return f.to_string();
    }
    if f == 0.0 {
        return "0".into();
    }
    let magnitude = f.abs().log10().floor() as i32;
    let decimals = (5 - magnitude).clamp(0, 12) as usize;
    let s = format!("{f:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_show_six_significant_digits() {
        for (f, want) in [
            (0.800000011920929, "0.8"),
            (0.4, "0.4"),
            (1382.144931357, "1382.14"),
            (2.0, "2"),
            (0.0, "0"),
            (-0.25, "-0.25"),
            (1e-7, "0.0000001"),
        ] {
            assert_eq!(number(f), want, "{f}");
        }
    }

    fn run(settings: &[(&str, &str)]) -> Run {
        Run {
            label: String::new(),
            dir: PathBuf::new(),
            settings: settings
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            model: None,
            started_at: None,
            finished_at: None,
            elapsed_s: 0.0,
            prompt_tokens: 0,
            completion_tokens: 0,
            graded: false,
            resolved: None,
            tasks: Vec::new(),
            unfinished: Vec::new(),
        }
    }

    #[test]
    fn parameters_are_keys_whose_values_differ() {
        let runs = [
            run(&[("a", "1"), ("b", "x"), ("only_here", "1"), ("c", "2")]),
            run(&[("a", "2"), ("b", "x"), ("c", "2"), ("d", "5")]),
            run(&[("a", "2"), ("b", "x"), ("c", "3"), ("d", "5")]),
        ];
        assert_eq!(differing(&runs, &[]), ["a", "c"]);
        assert_eq!(differing(&runs, &["b".into()]), ["b", "a", "c"]);
        assert_eq!(differing(&runs[..1], &[]), Vec::<String>::new());
    }

    #[test]
    fn settings_flatten_to_dotted_keys() {
        let v = serde_json::json!({"fixer": {"temperature": 0.8, "candidates": 4},
                                   "model": "m", "env": null});
        let mut out = BTreeMap::new();
        flatten("", &v, &mut out);
        let got: Vec<(&str, &str)> = out.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            got,
            [
                ("env", "null"),
                ("fixer.candidates", "4"),
                ("fixer.temperature", "0.8"),
                ("model", "m")
            ]
        );
    }
}
