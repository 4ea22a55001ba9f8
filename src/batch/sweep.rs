//! Sweeps: the same task selection run once per point of a grid of
//! settings, each point a run directory of its own, and one table of what
//! each point achieved.
//!
//! ```text
//! SWEEP_DIR/sweep.json            the grid and its points
//! SWEEP_DIR/points/<NN>_<label>/  one run directory per point (resumable)
//! SWEEP_DIR/shared/               stages shared between points (MASAI's ReAct
//!                                 stages whose settings a point does not change)
//! SWEEP_DIR/table.csv, table.json one row per point
//! ```
//!
//! A grid axis is a dotted settings key (`fixer.temperature`, `aci.window`,
//! anything `--config` can set), one of the short names in [`ALIASES`], or
//! [`BUDGET`] (the Fixer's candidates and rounds as one value), with its
//! values; points are every combination, first axis slowest.

use std::path::{Path, PathBuf};

use crate::record::sweep::{Axis, Point, Row, SweepFile};

use super::{BatchError, RunContext};
use crate::backing::{with_model, Demand};
use crate::config::Settings;
use crate::engine::{EngineError, EngineSettings};
use crate::models::{ModelError, ModelRef};

/// Short names for the keys swept most.
pub const ALIASES: &[(&str, &str)] = &[
    ("temperature", "fixer.temperature"),
    ("candidates", "fixer.candidates"),
    ("window", "aci.window"),
    ("history", "react.history.keep"),
    ("steps", "react.max_steps"),
    ("model", "model"),
];

/// The Fixer's budget as one axis: `budget=4x3,8x1,16x1` sets
/// `fixer.candidates` (per round) and `fixer.rounds` (at most) together,
/// so that a curve of compute against resolves is one grid axis.
pub const BUDGET: &str = "budget";

/// A budget value, `CANDIDATESxROUNDS` (both at least 1).
pub fn parse_budget(value: &toml::Value) -> Option<(i64, i64)> {
    let (c, r) = value.as_str()?.split_once(['x', 'X'])?;
    let (c, r) = (c.trim().parse::<i64>().ok()?, r.trim().parse::<i64>().ok()?);
    (c >= 1 && r >= 1).then_some((c, r))
}

/// Why a key and its values do not make an [`Axis`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AxisError {
    #[error("no values")]
    NoValues,
    #[error("`{0}` is not a dotted settings key")]
    NotAKey(String),
    #[error("`{0}` is not a budget: write CANDIDATESxROUNDS, e.g. 4x3")]
    NotABudget(String),
}

impl Axis {
    /// Parses `key=v1,v2,...`; values are TOML (`0.4`, `true`, `"all"`),
    /// a bare word being a string.
    pub fn parse(text: &str) -> Result<Axis, BatchError> {
        let (key, values) = text.split_once('=').ok_or_else(|| {
            BatchError::Invalid(format!(
                "--grid {text}: expected KEY=V1,V2,... (e.g. temperature=0,0.4,0.8)"
            ))
        })?;
        let key = key.trim();
        let values: Vec<toml::Value> = values
            .split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(crate::config::toml_value)
            .collect();
        Axis::new(key, values).map_err(|e| BatchError::Invalid(format!("--grid {text}: {e}")))
    }

    /// An axis over `key` (an alias or a dotted key).
    pub fn new(key: &str, values: Vec<toml::Value>) -> Result<Axis, AxisError> {
        if values.is_empty() {
            return Err(AxisError::NoValues);
        }
        let key = ALIASES
            .iter()
            .find(|(alias, _)| *alias == key)
            .map_or(key, |(_, full)| full);
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(AxisError::NotAKey(key.to_string()));
        }
        if key == BUDGET {
            if let Some(bad) = values.iter().find(|v| parse_budget(v).is_none()) {
                return Err(AxisError::NotABudget(show(bad)));
            }
        }
        Ok(Axis {
            key: key.to_string(),
            values,
        })
    }
}

/// The grid given in a configuration file's `[sweep.grid]` table
/// (`"fixer.temperature" = [0.4, 0.8]`), which [`Settings`] ignores.
pub fn grid_from_config(path: &Path) -> Result<Vec<Axis>, BatchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BatchError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    })?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| BatchError::Invalid(format!("{}: {e}", path.display())))?;
    let Some(grid) = table
        .get("sweep")
        .and_then(|s| s.as_table())
        .and_then(|s| s.get("grid"))
    else {
        return Ok(Vec::new());
    };
    let grid = grid.as_table().ok_or_else(|| {
        BatchError::Invalid(format!("{}: `sweep.grid` must be a table", path.display()))
    })?;
    grid.iter()
        .map(|(key, values)| {
            let values = match values {
                toml::Value::Array(a) => a.clone(),
                one => vec![one.clone()],
            };
            Axis::new(key, values).map_err(|e| {
                BatchError::Invalid(format!("{}: sweep.grid.{key}: {e}", path.display()))
            })
        })
        .collect()
}

/// Every combination of the axes' values, first axis slowest.
pub fn points(grid: &[Axis]) -> Vec<Point> {
    let mut combos: Vec<Vec<(String, toml::Value)>> = vec![Vec::new()];
    for axis in grid {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                axis.values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((axis.key.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    combos
        .into_iter()
        .enumerate()
        .map(|(i, combo)| {
            let label = combo
                .iter()
                .map(|(k, v)| format!("{k}={}", show(v)))
                .collect::<Vec<_>>()
                .join(",");
            let safe: String = label
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "._=-".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            Point {
                dir: PathBuf::from("points").join(format!("{i:02}_{safe}")),
                values: combo
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            serde_json::to_value(v).unwrap_or(serde_json::Value::Null),
                        )
                    })
                    .collect(),
                label,
            }
        })
        .collect()
}

fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Point {
    /// `base` with this point's values set.
    pub fn settings(&self, base: &Settings) -> Result<Settings, BatchError> {
        let mut table = toml::Table::new();
        let mut set: Vec<(String, toml::Value)> = Vec::new();
        for (key, value) in &self.values {
            let value: toml::Value = serde_json::from_value(value.clone())
                .map_err(|e| BatchError::Invalid(format!("{}: {e}", self.label)))?;
            match (key.as_str(), parse_budget(&value)) {
                (BUDGET, Some((candidates, rounds))) => {
                    set.push(("fixer.candidates".into(), candidates.into()));
                    set.push(("fixer.rounds".into(), rounds.into()));
                }
                (BUDGET, None) => {
                    return Err(BatchError::Invalid(format!(
                        "{}: {}",
                        self.label,
                        AxisError::NotABudget(show(&value))
                    )))
                }
                _ => set.push((key.clone(), value)),
            }
        }
        for (key, value) in set {
            let mut parts: Vec<&str> = key.split('.').collect();
            let last = parts.pop().unwrap_or_default();
            let mut at = &mut table;
            for part in parts {
                at = at
                    .entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                    .as_table_mut()
                    .ok_or_else(|| {
                        BatchError::Invalid(format!("{}: `{key}` crosses a value", self.label))
                    })?;
            }
            at.insert(last.to_string(), value);
        }
        Settings::with_table(base, table)
            .map_err(|e| BatchError::Invalid(format!("grid point {}: {e}", self.label)))
    }
}

/// Writes `table.csv` and `table.json` into `dir`; the grid's keys are the
/// first columns.
pub fn write_table(dir: &Path, grid: &[Axis], rows: &[Row]) -> Result<(), BatchError> {
    crate::record::write_json(&dir.join("table.json"), &rows)?;
    let mut header: Vec<String> = grid.iter().map(|a| a.key.clone()).collect();
    header.extend(
        [
            "tasks",
            "patched",
            "no_patch",
            "errors",
            "resolved",
            "resolve_rate",
            "mean_file_hit",
            "mean_function_hit",
            "reproduced",
            "candidates_generated",
            "candidates_applied",
            "candidates_parsed",
            "candidates_distinct",
            "any_resolves",
            "picked_resolves",
            "model_s_per_task",
            "generated_tokens_per_task",
            "prompt_tokens",
            "completion_tokens",
            "elapsed_s",
            "model_busy",
            "dir",
        ]
        .map(String::from),
    );
    let mut out = csv_line(&header);
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
    for r in rows {
        let mut cells: Vec<String> = grid
            .iter()
            .map(|a| match r.values.get(&a.key) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            })
            .collect();
        cells.extend([
            r.tasks.to_string(),
            r.patched.to_string(),
            r.no_patch.to_string(),
            r.errors.to_string(),
            r.resolved.map_or(String::new(), |v| v.to_string()),
            opt(r.resolve_rate),
            opt(r.mean_file_hit),
            opt(r.mean_function_hit),
            r.reproduced.to_string(),
            r.candidates_generated.to_string(),
            r.candidates_applied.to_string(),
            r.candidates_parsed.to_string(),
            r.candidates_distinct.to_string(),
            r.any_resolves.to_string(),
            r.picked_resolves.to_string(),
            format!("{:.1}", r.model_s_per_task),
            format!("{:.0}", r.generated_tokens_per_task),
            r.prompt_tokens.to_string(),
            r.completion_tokens.to_string(),
            format!("{:.1}", r.elapsed_s),
            opt(r.model_busy),
            r.dir.display().to_string(),
        ]);
        out.push_str(&csv_line(&cells));
    }
    crate::record::write_atomic(&dir.join("table.csv"), out.as_bytes())?;
    Ok(())
}

/// One CSV line (RFC 4180 quoting).
fn csv_line(cells: &[String]) -> String {
    let quoted: Vec<String> = cells
        .iter()
        .map(|c| {
            if c.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.clone()
            }
        })
        .collect();
    format!("{}\n", quoted.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_parse_aliases_and_toml_values() -> Result<(), BatchError> {
        let cases: [(&str, &str, Vec<toml::Value>); 4] = [
            (
                "temperature=0,0.4,0.8",
                "fixer.temperature",
                vec![0.into(), 0.4.into(), 0.8.into()],
            ),
            ("window=50,100", "aci.window", vec![50.into(), 100.into()]),
            (
                "history=all,3",
                "react.history.keep",
                vec!["all".into(), 3.into()],
            ),
            (
                "pipeline.rank = true, false",
                "pipeline.rank",
                vec![true.into(), false.into()],
            ),
        ];
        for (text, key, values) in cases {
            let axis = Axis::parse(text)?;
            assert_eq!((axis.key.as_str(), &axis.values), (key, &values), "{text}");
        }
        for bad in ["temperature", "=1", "a..b=1", "window="] {
            assert!(Axis::parse(bad).is_err(), "{bad} should be refused");
        }
        Ok(())
    }

    #[test]
    fn points_are_the_product_first_axis_slowest() -> Result<(), BatchError> {
        let grid = [
            Axis::parse("temperature=0.4,0.8")?,
            Axis::parse("window=30,50")?,
        ];
        let labels: Vec<String> = points(&grid).into_iter().map(|p| p.label).collect();
        assert_eq!(
            labels,
            [
                "fixer.temperature=0.4,aci.window=30",
                "fixer.temperature=0.4,aci.window=50",
                "fixer.temperature=0.8,aci.window=30",
                "fixer.temperature=0.8,aci.window=50",
            ]
        );
        let p = &points(&grid)[3];
        assert_eq!(
            p.dir,
            PathBuf::from("points/03_fixer.temperature=0.8_aci.window=50")
        );
        let s = p.settings(&Settings::defaults("m"))?;
        assert_eq!((s.fixer.temperature, s.aci.window), (0.8, 50));
        Ok(())
    }

    #[test]
    fn a_point_with_an_unknown_key_or_wrong_type_is_refused() -> Result<(), BatchError> {
        let base = Settings::defaults("m");
        for (axis, named) in [
            ("fixer.temprature=0.4", "temprature"),
            ("window=wide", "window"),
        ] {
            let grid = [Axis::parse(axis)?];
            let err = points(&grid)[0]
                .settings(&base)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(named), "{err} should name {named}");
        }
        Ok(())
    }

    #[test]
    fn a_budget_sets_candidates_and_rounds_together() -> Result<(), BatchError> {
        let base = Settings::defaults("m");
        let grid = [Axis::parse("budget=4x3,8x1,32X1")?];
        let got: Vec<(usize, usize, String)> = points(&grid)
            .iter()
            .map(|p| {
                let s = p.settings(&base)?;
                Ok((s.fixer.candidates, s.fixer.rounds, p.label.clone()))
            })
            .collect::<Result<_, BatchError>>()?;
        #[rustfmt::skip]
        assert_eq!(got, [
            (4, 3, "budget=4x3".to_string()), (8, 1, "budget=8x1".into()), (32, 1, "budget=32X1".into()),
        ]);
        for bad in ["budget=4", "budget=0x2", "budget=4x", "budget=2.5"] {
            let err = Axis::parse(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("CANDIDATESxROUNDS"), "{bad}: {err}");
        }
        Ok(())
    }

    #[test]
    fn csv_cells_are_quoted_when_needed() {
        let line = csv_line(&["a".into(), "b,c".into(), "say \"hi\"".into()]);
        assert_eq!(line, "a,\"b,c\",\"say \"\"hi\"\"\"\n");
    }
}

/// A sweep ready to run: its file (written) and each point's settings.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub file: SweepFile,
    /// The settings of each point, in the order of `file.points`.
    pub settings: Vec<Settings>,
}

/// The grid (the config file's `[sweep.grid]`, then `axes`, each replacing
/// an axis of the same key), its points and their settings over `base`;
/// writes `out/sweep.json`, refusing a directory that holds a sweep over
/// another grid.
pub fn prepare(
    out: &Path,
    base: &Settings,
    config_file: Option<&Path>,
    axes: &[String],
) -> Result<Prepared, BatchError> {
    let mut grid = match config_file {
        Some(path) => grid_from_config(path)?,
        None => Vec::new(),
    };
    for text in axes {
        let axis = Axis::parse(text)?;
        grid.retain(|a| a.key != axis.key);
        grid.push(axis);
    }
    if grid.is_empty() {
        return Err(BatchError::Invalid(
            "no grid: give --grid KEY=V1,V2,... or [sweep.grid] in the config file".into(),
        ));
    }
    let points = points(&grid);
    let settings: Vec<Settings> = points
        .iter()
        .map(|p| p.settings(base))
        .collect::<Result<_, _>>()?;
    std::fs::create_dir_all(out).map_err(|source| BatchError::Io {
        action: "create",
        path: out.to_path_buf(),
        source,
    })?;
    let file = SweepFile {
        grid,
        points,
        shared: PathBuf::from("shared"),
    };
    if let Ok(old) = SweepFile::read(out) {
        if old.grid != file.grid {
            return Err(BatchError::Invalid(format!(
                "{} holds a sweep over another grid: choose another --out, or delete it to start over",
                out.display()
            )));
        }
    }
    super::write_json(&out.join("sweep.json"), &file)?;
    Ok(Prepared { file, settings })
}

/// Runs every point of `sweep` (or only the points numbered in `only`,
/// when it is not empty) into its run directory under `out` (the
/// selection and options of `cx`), and writes the table after each when
/// every point runs. Points that load the same model the same way share
/// one load (or `server`), its scheduler keeping `cx`'s jobs as
/// conversations sized for the group's largest fixer.
pub fn run<E>(
    out: &Path,
    sweep: &Prepared,
    only: &[usize],
    server: Option<&str>,
    cx: &RunContext<'_>,
) -> Result<Vec<Row>, E>
where
    E: From<BatchError> + From<ModelError> + From<EngineError>,
{
    let (points, settings) = (&sweep.file.points, &sweep.settings);
    if let Some(&bad) = only.iter().find(|&&i| i >= points.len()) {
        return Err(BatchError::Invalid(format!(
            "--point {bad}: the grid has {} points (0 to {})",
            points.len(),
            points.len().saturating_sub(1)
        ))
        .into());
    }
    // A sweep of some points leaves the table to whoever runs them all
    // (`slurm sweep`, after merging).
    let whole = only.is_empty();
    let mut groups: Vec<(String, EngineSettings, Vec<usize>)> = Vec::new();
    for (i, s) in settings.iter().enumerate() {
        if !whole && !only.contains(&i) {
            continue;
        }
        match groups
            .iter_mut()
            .find(|(m, e, _)| *m == s.model && *e == s.engine)
        {
            Some(g) => g.2.push(i),
            None => groups.push((s.model.clone(), s.engine.clone(), vec![i])),
        }
    }
    let mut rows: Vec<Option<Row>> = vec![None; points.len()];
    for (model_spec, engine, members) in &groups {
        let model = ModelRef::resolve(cx.models, model_spec, server)?;
        let candidates = members
            .iter()
            .map(|&i| settings[i].most_candidates())
            .max()
            .unwrap_or(1);
        let demand = Demand {
            jobs: cx.options.jobs,
            candidates: candidates.max(1),
        };
        // One server connection per group: its settings are the first
        // member's (a grid over `server.*` keys is not a useful sweep).
        let server = members
            .first()
            .map(|&i| settings[i].server.clone())
            .unwrap_or_default();
        with_model(&model, engine, &server, demand, |backing| {
            for &i in members {
                let point = &points[i];
                tracing::info!("point {}/{}: {}", i + 1, points.len(), point.label);
                let o = super::run::run(
                    cx,
                    &settings[i],
                    &model,
                    backing,
                    &out.join(&point.dir),
                    &point.label,
                    Some(out.join(&sweep.file.shared)),
                )?;
                rows[i] = Some(Row::new(point, &o.summary, &o.metrics, o.load.as_ref()));
                if whole {
                    let done: Vec<Row> = rows.iter().flatten().cloned().collect();
                    write_table(out, &sweep.file.grid, &done)?;
                }
            }
            Ok::<_, E>(())
        })?;
    }
    let rows: Vec<Row> = rows.into_iter().flatten().collect();
    if whole {
        write_table(out, &sweep.file.grid, &rows)?;
    }
    Ok(rows)
}
