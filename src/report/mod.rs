//! Reports: one self-contained HTML file over one or more run directories
//! (or sweeps of them), to compare configurations and read what happened
//! in each task.
//!
//! The page holds, in order:
//!
//! 1. a table of configurations, one row per run: its label, the
//!    parameters that differ among the runs, tasks, patched, resolved and
//!    resolve rate (or "not graded"), errors, tokens and wall time;
//! 2. plots: the outcomes of every run (bars), and the resolve rate (the
//!    patched rate when not every run was graded; the axis says which)
//!    against each parameter whose value differs among the runs — found by
//!    flattening each run's settings to dotted keys, plus a sweep's grid;
//! 3. a stage funnel per run: tasks → localised (file hit > 0) → reproduced
//!    (reproduction test accepted: fails on the base commit) → candidates
//!    applied (> 0) → resolved;
//! 4. tokens and seconds per task, per run (bars);
//! 5. a collapsible drill-down per run and task: status, stage metrics,
//!    the patch, the grade and test log (when graded), the stage artifacts
//!    and the trajectory's steps. Long texts are cut, and each cut says so.
//!
//! Plots are inline SVG drawn here; the only script is a few lines that
//! measure the plots once the page is laid out and set
//! `data-plots-rendered` (plots whose marks have non-empty geometry) and
//! `data-plot-boxes` (`x,y,w,h;...`, page pixels) on `<body>`, so a
//! headless browser's DOM dump can prove the plots rendered. Nothing is
//! fetched: the file opens from disk.
//!
//! Inputs: a directory holding `run.json` is a run (see [`crate::record`]
//! for its files); one holding `sweep.json` is a sweep and stands for its
//! points (`{"grid": [{"key", "values"}], "points": [{"label", "dir",
//! "values"}]}`, `dir` relative to the sweep). Unknown fields are ignored
//! and optional ones may be missing, so reports read older and newer runs.

mod html;
mod load;
mod overview;
mod svg;
mod text;

use std::path::{Path, PathBuf};

/// The colour of the plots' main marks (points, lines, bars): what a
/// screenshot test looks for. Nothing else on the page uses it.
pub const MARK_COLOUR: &str = "#1f77b4";
/// [`MARK_COLOUR`] as RGB.
pub const MARK_RGB: [u8; 3] = [0x1f, 0x77, 0xb4];

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no run or sweep directories given")]
    NoInputs,
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
    #[error("{path}: {problem}")]
    Invalid { path: PathBuf, problem: String },
    #[error(transparent)]
    Record(#[from] crate::record::RecordError),
    #[error(
        "{path} is neither a run directory (no run.json) nor a sweep directory (no sweep.json)"
    )]
    NotARun { path: PathBuf },
}

/// What [`write`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The HTML file.
    pub path: PathBuf,
    /// Runs in the report (a sweep counts its points).
    pub runs: usize,
    /// Tasks over all runs (a task run twice counts twice).
    pub tasks: usize,
    /// SVG plots on the page (what `data-plots-rendered` should reach).
    pub plots: usize,
    /// Sweep points listed in a sweep.json whose directory holds no run
    /// (yet): left out of the report, and named on the page.
    pub missing_points: Vec<PathBuf>,
}

/// Writes one self-contained HTML report over `inputs` (run or sweep
/// directories) to `out`, creating its parent directory if needed.
pub fn write(inputs: &[PathBuf], out: &Path) -> Result<Summary, ReportError> {
    if inputs.is_empty() {
        return Err(ReportError::NoInputs);
    }
    let report = load::load(inputs)?;
    let page = html::render(&report)?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| ReportError::Io {
            action: "create",
            path: parent.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(out, page.html.as_bytes()).map_err(|source| ReportError::Io {
        action: "write",
        path: out.to_path_buf(),
        source,
    })?;
    Ok(Summary {
        path: out.to_path_buf(),
        runs: report.runs.len(),
        tasks: report.runs.iter().map(|r| r.tasks.len()).sum(),
        plots: page.plots,
        missing_points: report.missing_points.clone(),
    })
}
