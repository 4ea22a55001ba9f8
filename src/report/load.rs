//! Reading run and sweep directories into what the report shows. Only
//! `run.json`, `sweep.json`, `results/` and the grades are read here;
//! trajectories, test logs and artifacts are read while rendering, one task
//! at a time. Every file is read through its type in `record`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::ReportError;
use crate::record::grade::{self as grades, InstanceReport};
use crate::record::result::TaskErrorKind;
pub(crate) use crate::record::result::TaskResult;
use crate::record::run::RunRecord;
use crate::record::sweep::SweepFile;

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
    /// Tasks in error, by the kind of their error.
    pub errors_by_kind: BTreeMap<TaskErrorKind, usize>,
}

pub(crate) struct Task {
    pub id: String,
    pub result: TaskResult,
    /// From `eval/logs/<id>/report.json`.
    pub grade: Option<InstanceReport>,
    pub resolved: Option<bool>,
}

/// A task's stage metrics, as the batch stores them.
pub(crate) type TaskMetrics = crate::record::metrics::Metrics;

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ReportError {
    let path = path.to_path_buf();
    move |source| ReportError::Io {
        action,
        path,
        source,
    }
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
            let sweep = SweepFile::read(input)?;
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
                    let values = point.values.into_iter().collect();
                    runs.push(load_run(&dir, Some(&point.label), &values)?);
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
    let run = RunRecord::read(&dir.join("run.json"))?;
    let mut settings = BTreeMap::new();
    if !run.settings.is_null() {
        flatten("", &run.settings, &mut settings);
    }
    for (k, v) in point_values {
        settings
            .entry(k.clone())
            .or_insert_with(|| display_value(v));
    }
    let model = run.model_name().map(String::from);
    let summary = run.summary.as_ref();

    let tasks = load_tasks(dir)?;
    let have: BTreeSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let unfinished = run
        .instance_ids()
        .iter()
        .filter(|id| !have.contains(id.as_str()))
        .cloned()
        .collect();
    let mut errors_by_kind = BTreeMap::new();
    for t in &tasks {
        if let Some(e) = &t.result.error {
            *errors_by_kind.entry(e.kind).or_default() += 1;
        }
    }

    let eval_summary = dir.join("eval").join("report.json");
    let graded = tasks.iter().any(|t| t.grade.is_some())
        || eval_summary.is_file()
        || summary.is_some_and(|s| s.resolved.is_some());
    let resolved = if !graded {
        None
    } else if tasks.iter().any(|t| t.resolved.is_some()) {
        Some(tasks.iter().filter(|t| t.resolved == Some(true)).count())
    } else if let Some(n) = summary.and_then(|s| s.resolved) {
        Some(n)
    } else {
        crate::record::read_json::<grades::Summary>(&eval_summary)
            .ok()
            .map(|s| s.resolved_instances)
    };
    let sum_tasks = |f: fn(&Task) -> usize| tasks.iter().map(f).sum::<usize>() as u64;
    Ok(Run {
        label: label.map(String::from).unwrap_or_else(|| {
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| dir.display().to_string())
        }),
        dir: dir.to_path_buf(),
        settings,
        model,
        started_at: run.started_at.clone(),
        finished_at: run.finished_at.clone(),
        elapsed_s: summary.map_or_else(
            || tasks.iter().map(|t| t.result.elapsed_s).sum(),
            |s| s.elapsed_s,
        ),
        prompt_tokens: summary.map_or_else(
            || sum_tasks(|t| t.result.prompt_tokens),
            |s| s.prompt_tokens as u64,
        ),
        completion_tokens: summary.map_or_else(
            || sum_tasks(|t| t.result.completion_tokens),
            |s| s.completion_tokens as u64,
        ),
        graded,
        resolved,
        tasks,
        unfinished,
        errors_by_kind,
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
        let mut result: TaskResult = crate::record::read_json(&path)?;
        if result.instance_id.is_empty() {
            result.instance_id = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        let id = result.instance_id.clone();
        let report = grades::instance_report_path(&dir.join("eval"), &id);
        let grade = if report.is_file() {
            Some(grades::read_instance_report(&report)?)
        } else {
            None
        };
        let resolved = grade.as_ref().map(|g| g.resolved);
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
            errors_by_kind: BTreeMap::new(),
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
