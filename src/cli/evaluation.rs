//! `env build`, `eval` and `check`: the test environments, grading
//! patches in them, and checking the pipeline's test stages in them.

use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use super::{CheckArgs, EnvBuildArgs, EvalArgs};
use patchwright::eval::{self, pool::Pool, PatchSource};
use patchwright::inputs::Inputs;
use patchwright::pipeline::check;
use patchwright::repo::Repos;

/// `patchwright env build`: the environments of the tasks; 1 if any failed.
pub fn env_build(args: EnvBuildArgs) -> Result<i32> {
    let (tasks, sources) = args.tasks.tasks(&args.env)?;
    // Builds keep the network: their policy's options are checked.
    let host = super::sandbox_host(true, args.env.sandbox.or_auto())?;
    let options = args.env.options(Some(1), 0, false, false);
    let inputs = Inputs::resolve(sources, &options, &host)?;
    inputs.check(&tasks, None)?;
    let settings = &inputs.environments;
    let repos = Repos::new(&inputs.sources.repos)?;
    let rows = eval::build_envs(
        &tasks,
        settings,
        &repos,
        &mut |i, n, repo, version| eprintln!("[{}/{n}] {repo} {version}", i + 1),
        &mut |row| {
            if args.json {
                return;
            }
            match (&row.dir, &row.error) {
                (Some(dir), _) => println!(
                    "ok     {} {} {}{}",
                    row.repo,
                    row.version,
                    dir.display(),
                    if row.reused == Some(true) {
                        " (built before)"
                    } else {
                        ""
                    }
                ),
                (None, e) => println!(
                    "FAILED {} {}: {}",
                    row.repo,
                    row.version,
                    e.as_deref().unwrap_or("")
                ),
            }
            for e in row.task_dependency_errors.iter().flatten() {
                println!("       {e}");
            }
        },
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    let failed = rows.iter().filter(|r| !r.complete()).count();
    eprintln!("{} environments, {} could not be built", rows.len(), failed);
    Ok(if failed > 0 { 1 } else { 0 })
}

/// `patchwright eval`: grades gold, empty or predicted patches.
pub fn eval(args: EvalArgs) -> Result<i32> {
    let (tasks, in_file, sources) = args.tasks.tasks_of_file(&args.env)?;
    let host = super::sandbox_host(false, args.env.sandbox.or_auto())?;
    let options = args
        .env
        .options(args.jobs, args.timeout, args.empty, args.keep_work);
    let inputs = Inputs::resolve(sources, &options, &host)?;
    inputs.check(&tasks, None)?;
    let (sources, settings) = (&inputs.sources, &inputs.environments);
    let source = if args.gold {
        PatchSource::Gold
    } else if args.empty {
        PatchSource::Empty
    } else {
        PatchSource::Predictions(
            args.predictions
                .as_deref()
                .context("--predictions is required")?,
        )
    };
    let patches = eval::choose_patches(&tasks, &in_file, source)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    // Sandbox binds (each task's layer and inputs) must be absolute.
    let out = std::fs::canonicalize(&args.out)
        .with_context(|| format!("cannot resolve {}", args.out.display()))?;
    let repos = Repos::new(&sources.repos)?;
    let bar = ProgressBar::new(patches.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let resolved = AtomicUsize::new(0);
    let summary = eval::evaluate_all(&tasks, &patches, settings, &repos, &out, &|r| {
        if r.resolved {
            resolved.fetch_add(1, Ordering::SeqCst);
        }
        let verdict = match (&r.error, r.resolved, r.patch_exists || settings.run_empty) {
            (Some(e), _, _) => format!("error ({:?})", e.kind),
            (None, true, _) => "resolved".to_string(),
            (None, false, true) => "unresolved".to_string(),
            (None, false, false) => "no patch".to_string(),
        };
        let line = format!("{} {verdict} ({:.0} s)", r.instance_id, r.total_seconds);
        // A hidden bar (stderr not a terminal) prints nothing: plain lines then.
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
        bar.set_message(format!("resolved {}", resolved.load(Ordering::SeqCst)));
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!("{}", out.join("report.json").display());
    }
    eprintln!(
        "{} tasks: {} resolved, {} unresolved, {} empty patches, {} errors",
        summary.total_instances,
        summary.resolved_instances,
        summary.unresolved_instances,
        summary.empty_patch_instances,
        summary.error_instances
    );
    for (kind, ids) in &summary.errors_by_kind {
        eprintln!("  {kind}: {}", ids.join(" "));
    }
    Ok(0)
}

/// `patchwright check`: the pipeline's test stages in each task's
/// environment, with a scripted model; 1 if a task does not pass.
pub fn check(args: CheckArgs) -> Result<i32> {
    let (tasks, sources) = args.tasks.tasks(&args.env)?;
    let host = super::sandbox_host(false, args.env.sandbox.or_auto())?;
    let options = args
        .env
        .options(Some(1), eval::DEFAULT_TEST_TIMEOUT_S, false, false);
    let inputs = Inputs::resolve(sources, &options, &host)?;
    inputs.check(&tasks, None)?;
    let settings = &inputs.environments;
    let repos = Repos::new(&inputs.sources.repos)?;
    let scratch = tempfile::Builder::new()
        .prefix("patchwright-check-")
        .tempdir()
        .context("cannot create a scratch directory")?;
    let pool = Pool::new(settings, &repos, &scratch.path().join("builds"));
    let mut rows = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        eprintln!("[{}/{}] {}", i + 1, tasks.len(), task.instance_id);
        let row = check::check(task, &repos, &pool, &scratch.path().join("task"));
        eprintln!(
            "  reproduction {}, order {:?}{} ({:.0} s)",
            if row.reproduction_accepted {
                "accepted"
            } else {
                "not accepted"
            },
            row.order,
            row.error
                .as_deref()
                .map(|e| format!(", error: {e}"))
                .unwrap_or_default(),
            row.seconds
        );
        rows.push(row);
    }
    let passed = rows
        .iter()
        .filter(|r| r.reproduction_accepted && r.gold_first && r.error.is_none())
        .count();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("| task | environment | reproduction accepted | gold first | order | seconds |");
        println!("|---|---|---|---|---|---|");
        for r in &rows {
            let env =
                r.environment
                    .as_ref()
                    .map_or("-".to_string(), |e| match (&e.error, &e.dir) {
                        (Some(err), _) => {
                            format!("none: {}", err.lines().next().unwrap_or_default())
                        }
                        (None, Some(dir)) => format!(
                            "{} {}",
                            serde_json::to_value(e.source)
                                .map(|v| v.as_str().unwrap_or_default().to_string())
                                .unwrap_or_default(),
                            dir.file_name()
                                .map(|n| n.to_string_lossy().into_owned())
                                .unwrap_or_default()
                        ),
                        (None, None) => "none".into(),
                    });
            println!(
                "| {} | {env} | {} | {} | {} | {:.0} |",
                r.instance_id,
                if r.reproduction_accepted { "yes" } else { "no" },
                if r.gold_first { "yes" } else { "no" },
                r.order.join(" > "),
                r.seconds
            );
        }
    }
    eprintln!("{passed} of {} tasks pass the check", rows.len());
    Ok(if passed == rows.len() { 0 } else { 1 })
}
