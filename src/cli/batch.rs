//! `batch`, `run`, `sweep`, `merge` and `report`: runs over a selection of
//! tasks, and what is made of their run directories.

use anyhow::{bail, Result};

use super::{BatchArgs, MergeArgs, ReportArgs, RunArgs, Sources, SweepArgs};
use patchwright::backing::with_model;
use patchwright::batch::sweep;
use patchwright::batch::{self, RunContext, RunDir};
use patchwright::dataset;
use patchwright::engine::Slots;
use patchwright::eval::pool::Pool;
use patchwright::models::ModelRef;
use patchwright::repo::Repos;

/// `patchwright batch`: the selected tasks into a run directory, or `--list` them.
pub fn batch(args: BatchArgs) -> Result<i32> {
    let selection = args.select.selection()?;
    if args.list {
        let dataset = Sources::dataset(args.select.dataset.as_deref(), &args.runner.env)?;
        let selected = selection.select(&dataset)?;
        for t in &selected.tasks {
            println!("{}", t.instance_id);
        }
        return Ok(0);
    }
    let sources = Sources::resolve(
        args.select.dataset.as_deref(),
        args.repos.as_deref(),
        &args.runner.env,
    )?;
    let selected = selection.select(&sources.dataset)?;
    let Some(out) = &args.out else {
        bail!("--out is required unless --list is given");
    };
    let repos_dir = &sources.repos;
    args.runner.check(repos_dir)?;
    let mut overrides = args.settings.overrides();
    overrides.server_kind = args.runner.server_kind;
    overrides.sandbox = args.runner.env.sandbox.choice;
    let settings = overrides.resolve()?;
    // Before the model and any task: an unfit host is one error, not a
    // batch whose every command fails. (The settings say which tier.)
    super::preflight(false, settings.sandbox)?;
    let environments = args.runner.environments()?;
    let local_model = args
        .runner
        .server
        .is_none()
        .then_some(settings.model.as_str());
    sources.check(&selected.tasks, &environments.specs, local_model)?;
    let models = sources.models_dir()?;
    let model = ModelRef::resolve(&models, &settings.model, args.runner.server.as_deref())?;
    let repos = Repos::new(repos_dir)?;
    let scratch = env_scratch()?;
    let envs = Pool::new(&environments, &repos, scratch.path());
    let cx = RunContext {
        select: &selection,
        selected: &selected,
        repos_dir,
        repos: &repos,
        models: &models,
        options: args.runner.options(),
        envs: &envs,
        evaluate: args.runner.evaluate,
        command: std::env::args().collect(),
    };
    // A run directory of another run is refused before the model loads.
    RunDir::open(out, &model.identity(&settings))?;
    let slots = Slots {
        conversations: args.runner.jobs,
        candidates: settings.most_candidates(),
    };
    let outcome = with_model(
        &model,
        &settings.engine,
        &settings.server,
        slots,
        |backing| {
            batch::run::run(&cx, &settings, &model, backing, out, "", None)
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
    let sources = Sources::resolve(args.dataset.as_deref(), args.repos.as_deref(), &args.env)?;
    let tasks = dataset::load(&sources.dataset)?;
    if !tasks.iter().any(|t| t.instance_id == args.task) {
        bail!(
            "no task {} in {}; list them with `patchwright batch --dataset {} --list`",
            args.task,
            sources.dataset.display(),
            sources.dataset.display()
        );
    }
    batch(args.into_batch())
}

/// `patchwright sweep`: one run per grid point, and their table.
pub fn sweep(args: SweepArgs) -> Result<i32> {
    let selection = args.select.selection()?;
    let sources = Sources::resolve(
        args.select.dataset.as_deref(),
        args.repos.as_deref(),
        &args.runner.env,
    )?;
    let selected = selection.select(&sources.dataset)?;
    if selected.tasks.is_empty() {
        bail!("no task of {} is selected", sources.dataset.display());
    }
    args.runner.check(&sources.repos)?;
    let mut overrides = args.settings.overrides();
    overrides.server_kind = args.runner.server_kind;
    overrides.sandbox = args.runner.env.sandbox.choice;
    let base = overrides.resolve()?;
    // One tier for every point (a grid over `sandbox` is not resolved
    // per point).
    super::preflight(false, base.sandbox)?;
    let config = args.settings.config.as_deref();
    let sweep = sweep::prepare(&args.out, &base, config, &args.grid)?;
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
    let repos = Repos::new(&sources.repos)?;
    let models = sources.models_dir()?;
    let environments = args.runner.environments()?;
    sources.check(&selected.tasks, &environments.specs, None)?;
    // One pool for every point: environments are built once.
    let scratch = env_scratch()?;
    let envs = Pool::new(&environments, &repos, scratch.path());
    let cx = RunContext {
        select: &selection,
        selected: &selected,
        repos_dir: &sources.repos,
        repos: &repos,
        models: &models,
        options: args.runner.options(),
        envs: &envs,
        evaluate: args.runner.evaluate,
        command: std::env::args().collect(),
    };
    let server = args.runner.server.as_deref();
    let rows = sweep::run::<anyhow::Error>(&args.out, &sweep, server, &cx)?;
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
    for name in ["table.csv", "table.json"] {
        println!("table: {}", args.out.join(name).display());
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
