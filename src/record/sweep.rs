//! A sweep directory's files: `sweep.json` (the grid and its points) and
//! `table.json` (one row per point). Parsing axes and a point's settings
//! is `batch::sweep`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::metrics::Summary as MetricsSummary;
use super::run::Summary;
use super::RecordError;
use patchwright_engine_types::Load;

/// One axis of the grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    /// The dotted settings key.
    pub key: String,
    #[serde(default)]
    pub values: Vec<toml::Value>,
}

/// One point of the grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// `key=value` pairs joined by commas.
    pub label: String,
    /// Its run directory, relative to the sweep directory.
    pub dir: PathBuf,
    /// The value of every axis.
    #[serde(default)]
    pub values: serde_json::Map<String, serde_json::Value>,
}

/// `SWEEP_DIR/sweep.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepFile {
    #[serde(default)]
    pub grid: Vec<Axis>,
    pub points: Vec<Point>,
    /// Stages shared between points, relative to the sweep directory.
    #[serde(default)]
    pub shared: PathBuf,
}

impl SweepFile {
    /// Reads `dir/sweep.json`.
    pub fn read(dir: &Path) -> Result<SweepFile, RecordError> {
        super::read_json(&dir.join("sweep.json"))
    }

    /// Writes `dir/sweep.json` atomically.
    pub fn write(&self, dir: &Path) -> Result<(), RecordError> {
        super::write_json(&dir.join("sweep.json"), self)
    }
}

/// One row of the sweep's table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub label: String,
    pub dir: PathBuf,
    pub values: serde_json::Map<String, serde_json::Value>,
    pub tasks: usize,
    pub patched: usize,
    pub no_patch: usize,
    pub errors: usize,
    /// Resolved tasks, when graded.
    pub resolved: Option<usize>,
    pub resolve_rate: Option<f64>,
    pub mean_file_hit: Option<f64>,
    pub mean_function_hit: Option<f64>,
    pub reproduced: usize,
    pub candidates_generated: usize,
    pub candidates_applied: usize,
    pub any_resolves: usize,
    pub picked_resolves: usize,
    /// Model seconds and tokens generated (every candidate) per task.
    #[serde(default)]
    pub model_s_per_task: f64,
    #[serde(default)]
    pub generated_tokens_per_task: f64,
    /// Candidates that applied and parse, of those generated.
    #[serde(default)]
    pub candidates_parsed: usize,
    #[serde(default)]
    pub candidates_distinct: usize,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub elapsed_s: f64,
    /// The model's busy fraction over the point's batch.
    pub model_busy: Option<f64>,
}

impl Row {
    /// The row of `point`, from its run's summaries.
    pub fn new(
        point: &Point,
        summary: &Summary,
        metrics: &MetricsSummary,
        load: Option<&Load>,
    ) -> Row {
        Row {
            label: point.label.clone(),
            dir: point.dir.clone(),
            values: point.values.clone(),
            tasks: summary.tasks,
            patched: summary.patched,
            no_patch: summary.no_patch,
            errors: summary.errors,
            resolved: summary.resolved,
            resolve_rate: summary
                .resolved
                .map(|r| r as f64 / summary.tasks.max(1) as f64),
            mean_file_hit: metrics.mean_file_hit,
            mean_function_hit: metrics.mean_function_hit,
            reproduced: metrics.reproduced,
            candidates_generated: metrics.candidates_generated,
            candidates_applied: metrics.candidates_applied,
            any_resolves: metrics.any_resolves,
            picked_resolves: metrics.picked_resolves,
            model_s_per_task: metrics.model_s / metrics.tasks.max(1) as f64,
            generated_tokens_per_task: metrics.generated_tokens as f64
                / metrics.tasks.max(1) as f64,
            candidates_parsed: metrics.candidates_parsed,
            candidates_distinct: metrics.candidates_distinct,
            prompt_tokens: summary.prompt_tokens,
            completion_tokens: summary.completion_tokens,
            elapsed_s: summary.elapsed_s,
            model_busy: load.map(|l| l.busy_fraction),
        }
    }
}

/// Reads `dir/table.json`.
pub fn read_table(dir: &Path) -> Result<Vec<Row>, RecordError> {
    super::read_json(&dir.join("table.json"))
}
