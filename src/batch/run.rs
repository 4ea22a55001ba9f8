//! One run: a selection run (or resumed) into a run directory against a
//! loaded model, with the run directory's `run.json` written before the
//! tasks and again, with the summary, after them.

use std::path::{Path, PathBuf};

use super::progress::Display;
use super::{now, Batch, BatchError, Opened, Options, RunDir, Summary};
use crate::backing::Backing;
use crate::config::Settings;
use crate::dataset::{Selected, Selection};
use crate::engine::Load;
use crate::eval::pool::Pool;
use crate::models::ModelRef;
use crate::record::metrics::Summary as MetricsSummary;
use crate::record::run::{ModelInfo, RunRecord, RunSelection};
use crate::record::RecordError;
use crate::repo::Repos;

/// Everything one run needs besides its settings and model.
pub struct RunContext<'a> {
    /// The selection as given, and the tasks it selected.
    pub select: &'a Selection,
    pub selected: &'a Selected,
    /// The `--repos` directory, for run.json.
    pub repos_dir: &'a Path,
    pub repos: &'a Repos,
    /// Where model names are looked up (the user's models directory or a
    /// bundle's).
    pub models: &'a Path,
    /// Tasks in flight and whether finished tasks run again.
    pub options: Options,
    /// The tasks' environments (built once for every point of a sweep).
    pub envs: &'a Pool<'a>,
    /// Grade patches as tasks finish.
    pub evaluate: bool,
    /// The command line, for run.json.
    pub command: Vec<String>,
}

/// What one run produced.
pub struct RunOutcome {
    pub summary: Summary,
    /// The stage metrics over the run's tasks (metrics.json).
    pub metrics: MetricsSummary,
    /// The model's load during the run; none for a server.
    pub load: Option<Load>,
}

/// Runs (or resumes) the selection of `cx` into `out` with `backing` and
/// writes its run.json; `label` prefixes its log lines (a sweep point's),
/// `shared` holds stages shared with other runs.
pub fn run(
    cx: &RunContext<'_>,
    settings: &Settings,
    model: &ModelRef,
    backing: &Backing<'_>,
    out: &Path,
    label: &str,
    shared: Option<PathBuf>,
) -> Result<RunOutcome, BatchError> {
    let tasks = &cx.selected.tasks;
    let identity = model.identity(settings);
    let (run, opened) = RunDir::open(out, &identity)?;
    let previous: Option<RunRecord> = match opened {
        // An unreadable run.json was refused by `open`.
        Opened::Resumed => run.record().ok().flatten(),
        Opened::Created => None,
    };
    let started_at = previous
        .as_ref()
        .and_then(|p| p.started_at.clone())
        .unwrap_or_else(now);
    let mut resumed_at = previous
        .as_ref()
        .map(|p| p.resumed_at.clone())
        .unwrap_or_default();
    if opened == Opened::Resumed {
        resumed_at.push(now());
    }
    // The run's tasks: those of earlier runs into this directory, then
    // this selection's new ones.
    let mut ids: Vec<String> = previous
        .as_ref()
        .map(|p| p.instance_ids().to_vec())
        .unwrap_or_default();
    for t in tasks {
        if !ids.contains(&t.instance_id) {
            ids.push(t.instance_id.clone());
        }
    }
    let run_json = run.run_json();
    let unrecordable = |what: &str, e: serde_json::Error| RecordError::Invalid {
        path: run_json.clone(),
        problem: format!("cannot record {what}: {e}"),
    };
    let selected: RunSelection = serde_json::from_value(cx.select.json(cx.selected))
        .map_err(|e| unrecordable("the selection", e))?;
    let model_info: ModelInfo =
        serde_json::from_value(model.json.clone()).map_err(|e| unrecordable("the model", e))?;
    let settings_json =
        serde_json::to_value(settings).map_err(|e| unrecordable("the settings", e))?;
    let mut record = RunRecord {
        command: cx.command.clone(),
        dataset: selected.dataset,
        environments: Vec::new(),
        finished_at: None,
        identity: identity.clone(),
        jobs: Some(backing.jobs),
        merged_from: None,
        model: Some(model_info),
        model_load: None,
        placement: backing.backend.placement().cloned(),
        repos: Some(cx.repos_dir.to_path_buf()),
        resumed_at,
        sandbox_tier: cx.envs.settings.host.tier.kind(),
        selection: selected.selection.map(|mut s| {
            s.instance_ids = ids.clone();
            s
        }),
        settings: settings_json,
        started_at: Some(started_at),
        summary: None,
        versions: crate::versions(),
    };
    record.write(&run_json)?;
    let batch = Batch {
        backend: backing.backend,
        settings,
        repos: cx.repos,
        run: &run,
        model_name: model.name.clone(),
        model: model.location.clone(),
        shared,
        ids: ids.clone(),
        envs: cx.envs,
    };
    let meter = backing.meter.clone();
    let before = meter.as_ref().map(|m| m.load());
    let display = Display::new(tasks.len(), meter.clone(), label);
    let options = super::Options {
        jobs: Some(backing.jobs),
        ..cx.options
    };
    let outcome = batch.run_all(tasks, options, cx.evaluate, &display.sink());
    display.finish();
    let summary = batch.run_summary(cx.evaluate, outcome?.elapsed_s)?;
    let load = match (&meter, &before) {
        (Some(m), Some(b)) => Some(m.load().since(b)),
        _ => None,
    };
    let metrics = batch.write_metrics()?;
    let prefix = if label.is_empty() {
        String::new()
    } else {
        format!("[{label}] ")
    };
    if metrics.tasks > 0 {
        tracing::info!(
            "{prefix}stage metrics over {} tasks: file hit {}, function hit {}, reproduced {} (valid {}), \
             candidates {} generated / {} applied / {} parse / {} distinct, any resolves {}, picked resolves {}",
            metrics.tasks,
            metrics.mean_file_hit.map_or("n/a".into(), |v| format!("{:.0}%", 100.0 * v)),
            metrics.mean_function_hit.map_or("n/a".into(), |v| format!("{:.0}%", 100.0 * v)),
            metrics.reproduced,
            metrics.reproduction_valid,
            metrics.candidates_generated,
            metrics.candidates_applied,
            metrics.candidates_parsed,
            metrics.candidates_distinct,
            metrics.any_resolves,
            metrics.picked_resolves
        );
    }
    let mut results = Vec::new();
    for id in &ids {
        results.extend(run.finished(id)?);
    }
    record.environments = crate::record::run::environments(&results);
    record.summary = Some(summary.clone());
    record.model_load = load.clone();
    record.finished_at = Some(now());
    record.write(&run_json)?;
    tracing::info!(
        "{prefix}{} tasks: {} patched, {} without a patch, {} errors{}{}{}",
        summary.tasks,
        summary.patched,
        summary.no_patch,
        summary.errors,
        if summary.errors > 0 {
            format!(" ({})", summary.error_ids.join(", "))
        } else {
            String::new()
        },
        summary
            .resolved
            .map_or(String::new(), |r| format!(", {r} resolved")),
        load.as_ref().map_or(String::new(), |l| format!(
            "; model busy {:.0}% of {:.0} s",
            100.0 * l.busy_fraction,
            l.wall_s
        )),
    );
    Ok(RunOutcome {
        summary,
        metrics,
        load,
    })
}
