//! The `patchwright` command line: parses flags (their types are in
//! `cli`), has the library resolve settings once (`config`), calls into the
//! library, and prints the results. Results go to stdout, logs to stderr.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use cli::{
    AciArgs, BatchArgs, Cli, Command, EnvBuildArgs, EnvCommand, EvalArgs, ExecArgs, GenerateArgs,
    MergeArgs, ModelsCommand, ReportArgs, RunnerArgs, SandboxCommand, SweepArgs,
};
use patchwright::batch::progress::Display;
use patchwright::batch::sweep::{self, Row};
use patchwright::batch::{self, Batch, Grader, Opened, Options, RunDir, Summary};
use patchwright::config::Settings;
use patchwright::dataset::{self, Selected, Selection};
use patchwright::engine::backing::{with_model, Backing};
use patchwright::engine::scheduler::Meter;
use patchwright::engine::{EngineSettings, Load, Slots};
use patchwright::eval;
use patchwright::models::{self, ModelRef};
use patchwright::record::run::{ModelInfo, RunRecord, RunSelection};
use patchwright::repo::Repos;
use patchwright_sandbox as sandbox;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Batch(args) => cmd_batch(args),
        Command::Sweep(args) => cmd_sweep(args),
        Command::Merge(args) => cmd_merge(args),
        Command::Report(args) => cmd_report(args),
        Command::Models(ModelsCommand::List { json }) => cmd_models_list(json),
        Command::Models(ModelsCommand::Fetch { name }) => cmd_models_fetch(&name),
        Command::Generate(args) => cmd_generate(args),
        Command::Sandbox(SandboxCommand::Exec(args)) => cmd_sandbox_exec(args),
        Command::Aci(args) => cmd_aci(args),
        Command::Run(args) => cmd_run(args),
        Command::Env(EnvCommand::Build(args)) => cmd_env_build(args),
        Command::Eval(args) => cmd_eval(args),
    };
    match result {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each cause left out when the message before it
/// already quotes it (library errors name their cause in their message).
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "patchwright=info,llama_cpp_2=error,llama-cpp-2=error",
        1 => "patchwright=debug,llama_cpp_2=warn,llama-cpp-2=warn",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("PATCHWRIGHT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(batch::progress::LogWriter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

/// Everything one run needs besides its settings.
struct RunContext<'a> {
    select: &'a Selection,
    selected: &'a Selected,
    repos_dir: &'a std::path::Path,
    repos: &'a Repos,
    runner: &'a RunnerArgs,
    grader: Option<&'a Grader<'a>>,
}

/// What one run produced.
struct RunOutcome {
    summary: Summary,
    metrics: patchwright::pipeline::metrics::Summary,
    load: Option<Load>,
}

/// Runs (or resumes) one batch into `out` and writes its run.json.
fn run_batch(
    cx: &RunContext<'_>,
    settings: &Settings,
    model: &ModelRef,
    backing: &Backing<'_>,
    out: &std::path::Path,
    label: &str,
    shared: Option<PathBuf>,
) -> Result<RunOutcome> {
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
        .unwrap_or_else(batch::now);
    let mut resumed_at = previous
        .as_ref()
        .map(|p| p.resumed_at.clone())
        .unwrap_or_default();
    if opened == Opened::Resumed {
        resumed_at.push(batch::now());
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
    let selected: RunSelection = serde_json::from_value(cx.select.json(cx.selected))?;
    let mut record = RunRecord {
        command: std::env::args().collect(),
        dataset: selected.dataset,
        finished_at: None,
        identity: identity.clone(),
        jobs: Some(cx.runner.jobs),
        merged_from: None,
        model: Some(serde_json::from_value::<ModelInfo>(model.json.clone())?),
        model_load: None,
        repos: Some(cx.repos_dir.to_path_buf()),
        resumed_at,
        selection: selected.selection.map(|mut s| {
            s.instance_ids = ids.clone();
            s
        }),
        settings: serde_json::to_value(settings)?,
        started_at: Some(started_at),
        summary: None,
        versions: patchwright::versions(),
    };
    record.write(&run.run_json())?;
    let batch = Batch {
        backend: backing.backend,
        settings,
        repos: cx.repos,
        run: &run,
        model_name: model.name.clone(),
        model: model.location.clone(),
        shared,
        ids: ids.clone(),
    };
    let meter = backing.meter.clone();
    let before = meter.as_ref().map(Meter::load);
    let display = Display::new(tasks.len(), meter.clone(), label);
    let outcome = batch.run_all(
        tasks,
        Options {
            jobs: cx.runner.jobs,
            redo: cx.runner.redo,
        },
        cx.grader,
        &display.sink(),
    );
    display.finish();
    let summary = batch.run_summary(cx.grader.is_some(), outcome?.elapsed_s)?;
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
    record.summary = Some(summary.clone());
    record.model_load = load.clone();
    record.finished_at = Some(batch::now());
    record.write(&run.run_json())?;
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

fn cmd_batch(args: BatchArgs) -> Result<i32> {
    let selection = args.select.selection()?;
    let selected = selection.select(&args.select.dataset)?;
    if args.list {
        for t in &selected.tasks {
            println!("{}", t.instance_id);
        }
        return Ok(0);
    }
    let (Some(repos_dir), Some(out)) = (&args.repos, &args.out) else {
        bail!("--repos and --out are required unless --list is given");
    };
    args.runner.check(repos_dir)?;
    let settings = args.settings.overrides().resolve()?;
    let model = ModelRef::resolve(&settings.model, args.runner.server.as_deref())?;
    let repos = Repos::new(repos_dir)?;
    let grading = args.runner.grading()?;
    let grader = grading.as_ref().map(|g| Grader::new(g, &repos));
    let cx = RunContext {
        select: &selection,
        selected: &selected,
        repos_dir,
        repos: &repos,
        runner: &args.runner,
        grader: grader.as_ref(),
    };
    // A run directory of another run is refused before the model loads.
    RunDir::open(out, &model.identity(&settings))?;
    let slots = Slots {
        conversations: args.runner.jobs,
        candidates: settings.fixer.candidates,
    };
    let outcome = with_model(&model, &settings.engine, slots, |backing| {
        run_batch(&cx, &settings, &model, backing, out, "", None)
    })?;
    println!("predictions: {}", out.join("predictions.jsonl").display());
    println!("trajectories: {}", out.join("trajectories").display());
    println!("run: {}", out.join("run.json").display());
    if outcome.metrics.tasks > 0 {
        println!("metrics: {}", out.join("metrics.json").display());
    }
    Ok(0)
}

fn cmd_sweep(args: SweepArgs) -> Result<i32> {
    let selection = args.select.selection()?;
    let selected = selection.select(&args.select.dataset)?;
    if selected.tasks.is_empty() {
        bail!("no task of {} is selected", args.select.dataset.display());
    }
    args.runner.check(&args.repos)?;
    let base = args.settings.overrides().resolve()?;
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
    let repos = Repos::new(&args.repos)?;
    let grading = args.runner.grading()?;
    // One grader for every point: environments are built once.
    let grader = grading.as_ref().map(|g| Grader::new(g, &repos));
    let cx = RunContext {
        select: &selection,
        selected: &selected,
        repos_dir: &args.repos,
        repos: &repos,
        runner: &args.runner,
        grader: grader.as_ref(),
    };
    let shared = args.out.join(&sweep.file.shared);
    let server = args.runner.server.as_deref();
    let rows = sweep::run(
        &args.out,
        &sweep,
        server,
        args.runner.jobs,
        |point, settings, model, backing| {
            let dir = args.out.join(&point.dir);
            let o = run_batch(
                &cx,
                settings,
                model,
                backing,
                &dir,
                &point.label,
                Some(shared.clone()),
            )?;
            Ok::<_, anyhow::Error>(Row::new(point, &o.summary, &o.metrics, o.load.as_ref()))
        },
    )?;
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

fn cmd_merge(args: MergeArgs) -> Result<i32> {
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

fn cmd_report(args: ReportArgs) -> Result<i32> {
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

fn cmd_models_list(json: bool) -> Result<i32> {
    let listing = models::list()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&listing)?);
        return Ok(0);
    }
    println!(
        "{:<22} {:<8} {:<10} {:>9} {:>8} {:<8} {:<8} PATH",
        "NAME", "PRESENT", "ARCH", "SIZE", "CONTEXT", "QUANT", "PARAMS"
    );
    for m in listing {
        let dash = || "-".to_string();
        println!(
            "{:<22} {:<8} {:<10} {:>9} {:>8} {:<8} {:<8} {}{}",
            m.name,
            if m.present { "yes" } else { "no" },
            m.architecture.unwrap_or_else(dash),
            m.size
                .map_or_else(dash, |s| format!("{:.0} MiB", s as f64 / (1 << 20) as f64)),
            m.context_length.map_or_else(dash, |c| c.to_string()),
            m.quantization.unwrap_or_else(dash),
            m.parameters.unwrap_or_else(dash),
            m.path.display(),
            if m.default { "  (default)" } else { "" },
        );
    }
    Ok(0)
}

fn cmd_models_fetch(name: &str) -> Result<i32> {
    let spinner = ProgressBar::new_spinner();
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    let path = models::fetch(name, &|step| {
        spinner.set_message(step.to_string());
        spinner.suspend(|| tracing::info!("{step}"));
    })?;
    spinner.finish_and_clear();
    println!("{}", path.display());
    Ok(0)
}

fn cmd_generate(args: GenerateArgs) -> Result<i32> {
    use patchwright::engine::{backing, Sampling};
    if args.n == 0 {
        bail!("--n must be at least 1");
    }
    let grammar = match &args.grammar {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read grammar file {}", path.display()))?,
        ),
        None => None,
    };
    let engine = EngineSettings {
        context: args.context,
        threads: args.threads,
    };
    let backend =
        backing::open::<anyhow::Error>(args.model.as_deref(), args.server.as_deref(), &engine)?;
    let sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        seed: args.seed,
        max_tokens: args.max_tokens,
    };
    let generation = backing::ask(
        backend.as_ref(),
        args.system,
        args.prompt,
        sampling,
        args.n,
        grammar.as_deref(),
    )?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "candidates": generation.candidates.iter().map(|c| c.text.as_str()).collect::<Vec<_>>(),
                "stats": generation.stats,
            }))?
        );
    } else {
        for (i, c) in generation.candidates.iter().enumerate() {
            if args.n > 1 {
                println!(
                    "=== candidate {} ({} tokens, {:?}) ===",
                    i + 1,
                    c.tokens.len(),
                    c.stop
                );
            }
            println!("{}", c.text);
        }
        let s = &generation.stats;
        tracing::info!(
            "{} prompt tokens ({} evaluated) in {:.2}s, {:?} generated in {:.2}s",
            s.prompt_tokens,
            s.prompt_tokens_evaluated,
            s.prompt_s,
            s.generated_tokens,
            s.decode_s
        );
    }
    Ok(0)
}

fn cmd_run(args: cli::RunArgs) -> Result<i32> {
    let tasks = dataset::load(&args.dataset)?;
    if !tasks.iter().any(|t| t.instance_id == args.task) {
        bail!(
            "no task {} in {}; list them with `patchwright batch --dataset {} --list`",
            args.task,
            args.dataset.display(),
            args.dataset.display()
        );
    }
    cmd_batch(args.into_batch())
}

fn cmd_aci(args: AciArgs) -> Result<i32> {
    use patchwright::aci::{self, Aci, AciSettings, Command as AciCommand};
    use std::io::{BufRead, Write};

    if args.window == 0 {
        bail!("--window must be at least 1");
    }
    let repo = &args.repo;
    let base = patchwright::repo::head_commit(repo).with_context(|| {
        format!(
            "--repo {} must be a git work tree with a commit",
            repo.display()
        )
    })?;
    let index = patchwright::index::symbols::CodeIndex::build(repo)
        .with_context(|| format!("cannot index {}", repo.display()))?;
    let settings = AciSettings {
        window: args.window,
        run_timeout_s: args.run_timeout,
    };
    let mut interface = Aci::new(repo, &base, index, settings);
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout().lock();
    while let Some(text) = aci::command::read_command(&mut lines) {
        let text = text.context("cannot read stdin")?;
        let observation = match AciCommand::parse(&text) {
            Ok(command) => interface.execute(&command),
            Err(e) => aci::Observation {
                text: format!("Error: {e}"),
                submitted: false,
            },
        };
        writeln!(out, "{}", observation.text)?;
        out.flush()?;
        if observation.submitted {
            break;
        }
    }
    Ok(0)
}

/// Exit status of `sandbox exec` when the sandbox could not run the command.
const SANDBOX_REFUSED: i32 = 125;

fn cmd_sandbox_exec(args: ExecArgs) -> Result<i32> {
    use std::io::Write;
    // Every refusal (bad flags, bad directory, no sandbox) exits 125, as
    // `timeout` and `docker run` do: the command never ran.
    let outcome = match args
        .policy()
        .and_then(|p| sandbox::run(&p, &args.command).map_err(|e| e.to_string()))
    {
        Ok(o) => o,
        Err(message) => {
            eprintln!("error: {message}");
            return Ok(SANDBOX_REFUSED);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(outcome.output.as_bytes())?;
        out.flush()?;
        if outcome.bytes_omitted > 0 {
            tracing::warn!(
                "{} bytes of output omitted from the middle",
                outcome.bytes_omitted
            );
        }
        if outcome.timed_out {
            tracing::warn!("timed out after {:.1}s", outcome.wall_time_secs);
        } else if let Some(sig) = &outcome.signal {
            tracing::warn!("killed by {}", sig.name);
        }
    }
    Ok(outcome.cli_exit_code())
}

fn cmd_env_build(args: EnvBuildArgs) -> Result<i32> {
    let tasks = args.tasks.tasks()?;
    let settings = args.env.options(Some(1), 0, false, false).resolve()?;
    let repos = Repos::new(&args.tasks.repos)?;
    let rows = eval::build_envs(
        &tasks,
        &settings,
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

fn cmd_eval(args: EvalArgs) -> Result<i32> {
    let tasks = args.tasks.tasks()?;
    let options = args
        .env
        .options(args.jobs, args.timeout, args.empty, args.keep_work);
    let settings = options.resolve()?;
    let patches: std::collections::BTreeMap<String, String> = if args.gold {
        tasks
            .iter()
            .map(|t| (t.instance_id.clone(), t.patch.clone()))
            .collect()
    } else if args.empty {
        tasks
            .iter()
            .map(|t| (t.instance_id.clone(), String::new()))
            .collect()
    } else {
        let path = args
            .predictions
            .clone()
            .context("--predictions is required")?;
        eval::load_predictions(&path)?
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let repos = Repos::new(&args.tasks.repos)?;
    let bar = ProgressBar::new(tasks.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let resolved = std::sync::atomic::AtomicUsize::new(0);
    let summary = eval::evaluate_all(&tasks, &patches, &settings, &repos, &args.out, &|r| {
        if r.resolved {
            resolved.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
        bar.set_message(format!(
            "resolved {}",
            resolved.load(std::sync::atomic::Ordering::SeqCst)
        ));
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!("{}", args.out.join("report.json").display());
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
