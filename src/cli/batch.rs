//! `batch`, `run`, `sweep`, `merge` and `report`: runs over a selection of
//! tasks, and what is made of their run directories.

use std::path::Path;

use anyhow::{bail, Result};

use super::{
    BatchArgs, MergeArgs, ReportArgs, RunArgs, RunnerArgs, SelectArgs, SettingsArgs, SweepArgs,
};
use patchwright::backing::{with_model, Demand};
use patchwright::batch::sweep;
use patchwright::batch::{self, RunContext, RunDir};
use patchwright::config::Settings;
use patchwright::dataset;
use patchwright::dataset::{Selected, Selection};
use patchwright::eval::pool::Pool;
use patchwright::inputs::{Inputs, Sources};
use patchwright::models::ModelRef;
use patchwright::repo::Repos;

/// What `batch` (and so `run`) and `sweep` set up alike, in this order:
/// the selection and where it comes from, the settings (the sweep's base
/// ones), the host's sandbox (its preflight before anything slow), and the
/// environments and models directory on it.
struct Prepared {
    selection: Selection,
    selected: Selected,
    settings: Settings,
    inputs: Inputs,
    repos: Repos,
}

impl Prepared {
    fn new(
        select: &SelectArgs,
        repos: Option<&Path>,
        settings: &SettingsArgs,
        runner: &RunnerArgs,
    ) -> Result<Prepared> {
        let selection = select.selection()?;
        let sources = Sources::resolve(
            select.file.dataset.as_deref(),
            repos,
            runner.env.bundle.as_deref(),
        )?;
        let selected = selection.select(&sources.dataset)?;
        runner.check(&sources.repos)?;
        let mut overrides = settings.overrides();
        overrides.server_kind = runner.server_kind;
        overrides.sandbox = runner.env.sandbox.choice;
        let settings = overrides.resolve()?;
        // Before the model and any task: an unfit host is one error, not a
        // batch whose every command fails. (The settings say which tier;
        // a sweep's grid over `sandbox` is not resolved per point.)
        let host = super::sandbox_host(false, settings.sandbox)?;
        let repos = Repos::new(&sources.repos)?;
        let inputs = Inputs::resolve(sources, &runner.env_options(), &host)?;
        Ok(Prepared {
            selection,
            selected,
            settings,
            inputs,
            repos,
        })
    }

    /// The run context of these tasks with `envs`, built once for every
    /// point of a sweep.
    fn context<'a>(&'a self, runner: &RunnerArgs, envs: &'a Pool<'a>) -> RunContext<'a> {
        RunContext {
            select: &self.selection,
            selected: &self.selected,
            repos_dir: &self.inputs.sources.repos,
            repos: &self.repos,
            models: &self.inputs.models,
            options: runner.options(),
            envs,
            evaluate: runner.evaluate,
            command: std::env::args().collect(),
        }
    }
}

/// `patchwright batch`: the selected tasks into a run directory, or `--list` them.
pub fn batch(args: BatchArgs) -> Result<i32> {
    if args.list {
        let selection = args.select.selection()?;
        let dataset = Sources::dataset(
            args.select.file.dataset.as_deref(),
            args.runner.env.bundle.as_deref(),
        )?;
        let selected = selection.select(&dataset)?;
        for t in &selected.tasks {
            println!("{}", t.instance_id);
        }
        return Ok(0);
    }
    let Some(out) = &args.out else {
        bail!("--out is required unless --list is given");
    };
    let prepared = Prepared::new(
        &args.select,
        args.repos.as_deref(),
        &args.settings,
        &args.runner,
    )?;
    let settings = &prepared.settings;
    let local_model = args
        .runner
        .server
        .is_none()
        .then_some(settings.model.as_str());
    prepared
        .inputs
        .check(&prepared.selected.tasks, local_model)?;
    let model = ModelRef::resolve(
        &prepared.inputs.models,
        &settings.model,
        args.runner.server.as_deref(),
    )?;
    let scratch = env_scratch()?;
    let envs = Pool::new(
        &prepared.inputs.environments,
        &prepared.repos,
        scratch.path(),
    );
    let cx = prepared.context(&args.runner, &envs);
    // A run directory of another run is refused before the model loads.
    RunDir::open(out, &model.identity(settings))?;
    let demand = Demand {
        jobs: args.runner.jobs,
        candidates: settings.most_candidates(),
    };
    let outcome = with_model(
        &model,
        &settings.engine,
        &settings.server,
        demand,
        |backing| {
            batch::run::run(&cx, settings, &model, backing, out, "", None)
                .map_err(anyhow::Error::from)
        },
    )?;
    println!("predictions: {}", out.join("predictions.jsonl").display());
    println!("trajectories: {}", out.join("trajectories").display());
    println!("run: {}", out.join("run.json").display());
    if outcome.metrics.tasks > 0 {
        println!("metrics: {}", out.join("metrics.json").display());
    }
    Ok(0)
}

/// Where environment builds check out their setup commits (removed at the
/// end of the command).
fn env_scratch() -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new()
        .prefix("patchwright-env-")
        .tempdir()?)
}

/// `patchwright run`: one task of a dataset, as a batch of one.
pub fn run(args: RunArgs) -> Result<i32> {
    let dataset = Sources::dataset(args.dataset.as_deref(), args.env.bundle.as_deref())?;
    let tasks = dataset::load(&dataset)?;
    if !tasks.iter().any(|t| t.instance_id == args.task) {
        bail!(
            "no task {} in {}; list them with `patchwright batch --dataset {} --list`",
            args.task,
            dataset.display(),
            dataset.display()
        );
    }
    batch(args.into_batch())
}

/// `patchwright sweep`: one run per grid point, and their table.
pub fn sweep(args: SweepArgs) -> Result<i32> {
    let prepared = Prepared::new(
        &args.select,
        args.repos.as_deref(),
        &args.settings,
        &args.runner,
    )?;
    let selected = &prepared.selected;
    if selected.tasks.is_empty() {
        bail!(
            "no task of {} is selected",
            prepared.inputs.sources.dataset.display()
        );
    }
    let config = args.settings.config.as_deref();
    let sweep = sweep::prepare(&args.out, &prepared.settings, config, &args.grid)?;
    let grid = &sweep.file.grid;
    tracing::info!(
        "sweep of {} points over {} tasks: {}",
        sweep.file.points.len(),
        selected.tasks.len(),
        grid.iter()
            .map(|a| format!("{} ({} values)", a.key, a.values.len()))
            .collect::<Vec<_>>()
            .join(" × ")
    );
    prepared.inputs.check(&selected.tasks, None)?;
    // One pool for every point: environments are built once.
    let scratch = env_scratch()?;
    let envs = Pool::new(
        &prepared.inputs.environments,
        &prepared.repos,
        scratch.path(),
    );
    let cx = prepared.context(&args.runner, &envs);
    let server = args.runner.server.as_deref();
    let rows = sweep::run::<anyhow::Error>(&args.out, &sweep, &args.points, server, &cx)?;
    eprintln!(
        "{:<50} {:>8} {:>8} {:>10} {:>9}",
        "point", "patched", "resolved", "tokens", "seconds"
    );
    for r in &rows {
        eprintln!(
            "{:<50} {:>8} {:>8} {:>10} {:>9.0}",
            r.label,
            format!("{}/{}", r.patched, r.tasks),
            r.resolved
                .map_or("-".into(), |v| format!("{v}/{}", r.tasks)),
            r.prompt_tokens + r.completion_tokens,
            r.elapsed_s
        );
    }
    if args.points.is_empty() {
        for name in ["table.csv", "table.json"] {
            println!("table: {}", args.out.join(name).display());
        }
    } else {
        for r in &rows {
            println!("point: {}", args.out.join(&r.dir).display());
        }
    }
    println!("sweep: {}", args.out.join("sweep.json").display());
    Ok(0)
}

/// `patchwright merge`: shards' run directories into one.
pub fn merge(args: MergeArgs) -> Result<i32> {
    let merged = batch::merge::merge(&args.shards, &args.out)?;
    eprintln!(
        "{} shards: {} tasks ({} patched, {} errors{})",
        args.shards.len(),
        merged.summary.tasks,
        merged.summary.patched,
        merged.summary.errors,
        merged
            .summary
            .resolved
            .map_or(String::new(), |r| format!(", {r} resolved"))
    );
    println!(
        "predictions: {}",
        args.out.join("predictions.jsonl").display()
    );
    println!("run: {}", args.out.join("run.json").display());
    Ok(0)
}

/// `patchwright report`: the HTML report over run and sweep directories.
pub fn report(args: ReportArgs) -> Result<i32> {
    let out = args
        .out
        .unwrap_or_else(|| args.inputs[0].join("report.html"));
    let summary = patchwright::report::write(&args.inputs, &out)?;
    tracing::info!(
        "{} runs, {} tasks, {} plots{}",
        summary.runs,
        summary.tasks,
        summary.plots,
        if summary.missing_points.is_empty() {
            String::new()
        } else {
            format!(
                "; {} sweep points not run yet",
                summary.missing_points.len()
            )
        }
    );
    println!("{}", out.display());
    Ok(0)
}
