//! Settings, resolved once, here: a run's [`Settings`] from defaults, then
//! the configuration file (TOML; it overrides only what it names), then
//! each `--set KEY=VALUE` in order ([`SetArg`]), then the dedicated
//! command-line flags (`--model`, `--environment`, `--keep-workspaces`)
//! ([`Overrides::resolve`]); the environments' and
//! grading's [`EnvSettings`] from their flags ([`EnvOptions::resolve`]).
//! The resolved settings are recorded in the run's `run.json`. This module
//! sits below the pipelines: it holds their settings types, and imports
//! only the settings of lower layers (aci, agents, engine, env, models).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agents::fixer::FixerSettings;
use crate::agents::localize::LocalizerSettings;
use crate::agents::ranker::RankerSettings;
use crate::agents::react::ReactSettings;
use crate::agents::reproduce::ReproducerSettings;
use crate::engine::http::{ServerKind, ServerSettings};
use crate::engine::{EngineSettings, Sampling};
use crate::env::build::{Index, Pythons};
use crate::env::spec::{SpecError, Specs};
pub use crate::env::EnvSettings;
use crate::env::{EnvError, Environment};
use crate::models::{self, ModelError};

/// Why overrides do not make valid settings.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The overrides are not TOML.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// The base settings do not serialise to TOML (a bug).
    #[error("{0}")]
    Base(#[from] toml::ser::Error),
    /// A value does not fit its key (`key` is `.` for the whole table).
    #[error("{}", if key == "." { source.to_string() } else { format!("`{key}`: {source}") })]
    Value {
        key: String,
        source: toml::de::Error,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("configuration file {path}: {source}")]
    Invalid {
        path: PathBuf,
        source: Box<SettingsError>,
    },
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Environment(#[from] EnvError),
    #[error(transparent)]
    Specs(#[from] SpecError),
    #[error("--bundle {path}: {source}")]
    Bundle {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--wheels {path}: {source}")]
    Wheels {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot resolve the environments directory {path}: {source}")]
    EnvsDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A `--set` whose key is not a setting, or whose value does not fit it
    /// (`error` is no `source`: the message already holds it whole).
    #[error("--set {arg}: {}", one_line(&error.to_string()))]
    Set {
        arg: String,
        error: Box<SettingsError>,
    },
}

/// `text` on one line: TOML's messages append `in KEY` on lines of their
/// own.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Why a `--set` argument is not `KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetArgError {
    #[error("`{0}` is not KEY=VALUE (for example fixer.edit_format=anchored)")]
    Form(String),
    #[error("`{0}` is not a dotted settings key (letters, digits, '_' and '-', parts joined by '.', as engine.context)")]
    Key(String),
}

/// One `--set KEY=VALUE`: a dotted key of the configuration file and a
/// value for it. The value is read as TOML (`8192`, `0.4`, `true`,
/// `"text"`, `[1, 2]`); anything that is not TOML is a string, so
/// `fixer.edit_format=anchored` needs no quotes.
#[derive(Debug, Clone, PartialEq)]
pub struct SetArg {
    /// The dotted key, as `reproducer.candidates`.
    pub key: String,
    /// The value, as TOML.
    pub value: toml::Value,
}

impl std::str::FromStr for SetArg {
    type Err = SetArgError;
    fn from_str(text: &str) -> Result<SetArg, SetArgError> {
        let (key, value) = text
            .split_once('=')
            .ok_or_else(|| SetArgError::Form(text.to_string()))?;
        let key = key.trim();
        let part_ok = |p: &str| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !key.split('.').all(part_ok) {
            return Err(SetArgError::Key(key.to_string()));
        }
        Ok(SetArg {
            key: key.to_string(),
            value: toml_value(value.trim()),
        })
    }
}

impl std::fmt::Display for SetArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            toml::Value::String(s) => write!(f, "{}={s}", self.key),
            other => write!(f, "{}={other}", self.key),
        }
    }
}

impl SetArg {
    /// The nested table the dotted key stands for: `a.b=1` is `[a] b = 1`.
    pub fn table(&self) -> toml::Table {
        let mut parts = self.key.rsplit('.');
        let last = parts.next().unwrap_or_default();
        let mut table = toml::Table::new();
        table.insert(last.to_string(), self.value.clone());
        for part in parts {
            let mut outer = toml::Table::new();
            outer.insert(part.to_string(), toml::Value::Table(table));
            table = outer;
        }
        table
    }
}

/// `text` as one TOML value, or as a string when it is not one (or is more
/// than one: `1\nx = 2` is the string it looks like): how `--set` and a
/// sweep's `--grid` read a value.
pub fn toml_value(text: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .filter(|t| t.len() == 1)
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

/// Everything a run can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// A model name from `models/manifest.toml`, or a path to a GGUF file.
    pub model: String,
    /// Keep each task's workspace after the task instead of deleting it.
    pub keep_workspaces: bool,
    pub engine: EngineSettings,
    /// How to talk to an inference server (`--server`): its dialect, API
    /// key, timeouts and retries. Left out of `run.json` while default, so
    /// runs written before it stay resumable.
    #[serde(default, skip_serializing_if = "ServerSettings::is_default")]
    pub server: ServerSettings,
    pub sampling: Sampling,
    pub retrieval: Retrieval,
    pub aci: AciConfig,
    /// Limits and history processing of the agents' ReAct episodes.
    pub react: ReactSettings,
    /// Which pipeline, and which of its stages.
    pub pipeline: PipelineSettings,
    /// The ReAct sub-agents' step limits and sampling.
    pub agents: AgentsSettings,
    /// How the Edit Localizer works: choosing among the code index's
    /// candidates (default) or the ReAct agent of `[agents.localizer]`.
    #[serde(default)]
    pub localizer: LocalizerSettings,
    pub fixer: FixerSettings,
    pub ranker: RankerSettings,
    /// How the Issue Reproducer writes its test (`mode = "sample"`: N
    /// candidates from one prompt; `"react"`: the agent of
    /// `[agents.reproducer]`). Older settings without it read as the
    /// defaults.
    #[serde(default)]
    pub reproducer: ReproducerSettings,
    /// A Python virtualenv that commands in the sandbox use (tests need
    /// their dependencies); without one, the system's Python.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<PathBuf>,
    /// Which sandbox tier runs commands (`auto`: bubblewrap, or the WASI
    /// tier where bubblewrap cannot create namespaces). Left out of
    /// `run.json` while `auto`, so runs written before it stay resumable;
    /// the tier that ran is recorded beside the settings.
    #[serde(default, skip_serializing_if = "SandboxChoice::is_auto")]
    pub sandbox: SandboxChoice,
}

/// The `sandbox` setting (`--sandbox`): which tier runs sandboxed
/// commands. Resolved to a tier once per command, by the binary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxChoice {
    /// bubblewrap when it works here; the WASI tier, with a warning, when
    /// bubblewrap cannot create namespaces (other failures stay errors).
    #[default]
    Auto,
    /// bubblewrap only (any program; needs user namespaces).
    Bubblewrap,
    /// The WASI tier only: Python commands as WebAssembly, in-process.
    Wasi,
}

impl SandboxChoice {
    /// Whether it is the default, `auto`.
    pub fn is_auto(&self) -> bool {
        *self == SandboxChoice::Auto
    }

    /// `auto`, `bubblewrap` or `wasi`.
    pub fn name(self) -> &'static str {
        match self {
            SandboxChoice::Auto => "auto",
            SandboxChoice::Bubblewrap => "bubblewrap",
            SandboxChoice::Wasi => "wasi",
        }
    }
}

/// A `--sandbox` value that names no tier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sandbox `{0}`: choose auto, bubblewrap or wasi")]
pub struct UnknownSandbox(pub String);

impl std::str::FromStr for SandboxChoice {
    type Err = UnknownSandbox;

    fn from_str(s: &str) -> Result<SandboxChoice, UnknownSandbox> {
        match s {
            "auto" => Ok(SandboxChoice::Auto),
            "bubblewrap" | "bwrap" => Ok(SandboxChoice::Bubblewrap),
            "wasi" => Ok(SandboxChoice::Wasi),
            _ => Err(UnknownSandbox(s.to_string())),
        }
    }
}

/// The agent-computer interface.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AciConfig {
    /// Lines of the file viewer's window.
    pub window: usize,
    /// Wall-clock limit of one `run` command, in seconds.
    pub run_timeout_s: u64,
}

impl AciConfig {
    pub fn settings(&self) -> crate::aci::AciSettings {
        crate::aci::AciSettings {
            window: self.window,
            run_timeout_s: self.run_timeout_s,
        }
    }
}

/// How the first pipeline picks the code to show the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retrieval {
    /// Most files shown, best BM25 score first.
    pub files: usize,
}

impl Settings {
    /// The built-in defaults: the manifest's default model.
    pub fn defaults(default_model: &str) -> Settings {
        Settings {
            model: default_model.into(),
            keep_workspaces: false,
            engine: EngineSettings::default(),
            server: ServerSettings::default(),
            sampling: Sampling::default(),
            retrieval: Retrieval { files: 3 },
            aci: AciConfig {
                window: crate::aci::DEFAULT_WINDOW,
                run_timeout_s: crate::aci::DEFAULT_RUN_TIMEOUT_S,
            },
            react: ReactSettings::default(),
            pipeline: PipelineSettings::default(),
            agents: AgentsSettings::default(),
            localizer: LocalizerSettings::default(),
            fixer: FixerSettings::default(),
            ranker: RankerSettings::default(),
            reproducer: ReproducerSettings::default(),
            environment: None,
            sandbox: SandboxChoice::Auto,
        }
    }

    /// The most candidates one model call of a run asks for: the Fixer's,
    /// and the Reproducer's when it samples (what the scheduler's slots
    /// must hold).
    pub fn most_candidates(&self) -> usize {
        let reproducer = match (self.pipeline.reproduce, self.reproducer.mode) {
            (true, crate::agents::reproduce::ReproducerMode::Sample) => self.reproducer.candidates,
            _ => 1,
        };
        self.fixer.candidates.max(reproducer).max(1)
    }

    /// `base` overridden by the TOML file at `path`.
    pub fn with_file(base: &Settings, path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::with_toml(base, &text).map_err(|source| ConfigError::Invalid {
            path: path.to_path_buf(),
            source: Box::new(source),
        })
    }

    /// `base` overridden by the TOML text of a configuration file (its
    /// `[sweep]` table, a sweep's grid, and its `[slurm]` table, a cluster's
    /// resources, left out).
    pub fn with_toml(base: &Settings, text: &str) -> Result<Settings, SettingsError> {
        let mut overrides: toml::Table = toml::from_str(text)?;
        // A sweep's grid (`[sweep.grid]`) and the Slurm resources
        // (`slurm::SlurmSettings`) live in the same file; they are not
        // settings of one run.
        overrides.remove("sweep");
        overrides.remove("slurm");
        Self::with_table(base, overrides)
    }

    /// `base` with each `--set` applied in order (a later one wins); the
    /// first that names no setting, or whose value does not fit, is the
    /// error, naming the argument.
    pub fn with_sets(base: &Settings, sets: &[SetArg]) -> Result<Settings, ConfigError> {
        let mut settings = base.clone();
        for set in sets {
            settings =
                Self::with_table(&settings, set.table()).map_err(|error| ConfigError::Set {
                    arg: set.to_string(),
                    error: Box::new(error),
                })?;
        }
        Ok(settings)
    }

    /// `base` overridden by the keys of `overrides`.
    pub fn with_table(base: &Settings, overrides: toml::Table) -> Result<Settings, SettingsError> {
        let mut merged = toml::Table::try_from(base)?;
        merge(&mut merged, overrides);
        serde_path_to_error::deserialize(toml::Value::Table(merged)).map_err(|e| {
            SettingsError::Value {
                key: e.path().to_string(),
                source: e.into_inner(),
            }
        })
    }
}

/// What the command line says about a run's settings (`--model`,
/// `--config`, `--set`, `--keep-workspaces`, `--environment`).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// A model name or GGUF path; overrides the file's `model`.
    pub model: Option<String>,
    /// The configuration file (TOML).
    pub config_file: Option<PathBuf>,
    /// Keep workspaces even when the file says not to.
    pub keep_workspaces: bool,
    /// A virtualenv; overrides the file's `environment`.
    pub environment: Option<PathBuf>,
    /// `--server-kind`; overrides the file's `server.kind`.
    pub server_kind: Option<ServerKind>,
    /// `--sandbox`; overrides the file's `sandbox`.
    pub sandbox: Option<SandboxChoice>,
    /// `--set KEY=VALUE`, in the order given: after the file, before the
    /// flags above.
    pub set: Vec<SetArg>,
}

impl Overrides {
    /// The run's settings: defaults (the manifest's default model), then the
    /// configuration file, then each `--set` in order, then `--model`,
    /// `--keep-workspaces` and `--environment`. The environment, if any,
    /// must be a usable virtualenv.
    pub fn resolve(&self) -> Result<Settings, ConfigError> {
        let mut settings = Settings::defaults(&models::default_model()?.name);
        self.layer(&mut settings)?;
        if let Some(env) = &settings.environment {
            Environment::open(env)?;
        }
        Ok(settings)
    }

    /// `settings` with the file, the `--set`s and the flags applied over it,
    /// in that order.
    fn layer(&self, settings: &mut Settings) -> Result<(), ConfigError> {
        if let Some(path) = &self.config_file {
            *settings = Settings::with_file(settings, path)?;
        }
        *settings = Settings::with_sets(settings, &self.set)?;
        if let Some(model) = &self.model {
            settings.model = model.clone();
        }
        settings.keep_workspaces |= self.keep_workspaces;
        if let Some(env) = &self.environment {
            settings.environment = Some(env.clone());
        }
        if let Some(kind) = self.server_kind {
            settings.server.kind = kind;
        }
        if let Some(choice) = self.sandbox {
            settings.sandbox = choice;
        }
        Ok(())
    }
}

/// What the command line says about environments and grading; resolved by
/// [`EnvOptions::resolve`].
#[derive(Debug, Clone)]
pub struct EnvOptions {
    /// Directory of environment specs [default: the specs compiled into
    /// the binary, from `datasets/envs`].
    pub specs: Option<PathBuf>,
    /// Where environments are built [default:
    /// [`crate::dirs::envs_dir`]].
    pub envs: Option<PathBuf>,
    /// Python installation prefixes besides pyenv's.
    pub pythons: Vec<PathBuf>,
    /// Install only from this directory of wheels and sdists.
    pub wheels: Option<PathBuf>,
    /// Take wheels and interpreters only from this bundle (`pack`).
    pub bundle: Option<PathBuf>,
    /// Tasks graded at once [default: half the CPUs, at least 1].
    pub jobs: Option<usize>,
    /// Time limit of one task's tests, in seconds.
    pub test_timeout_s: u64,
    /// Run the tests even when the patch is empty.
    pub run_empty: bool,
    /// Keep each task's worktree and layer.
    pub keep_work: bool,
}

impl EnvOptions {
    /// The settings on `host`: specs loaded, interpreters found, the wheel
    /// directory and the environments directory (created) made absolute,
    /// and these directories declared the program's own to the host's
    /// sandbox.
    pub fn resolve(&self, host: &patchwright_sandbox::Host) -> Result<EnvSettings, ConfigError> {
        let mut host = host.clone();
        let specs = Specs::load(self.specs.as_deref())?;
        let index =
            match &self.wheels {
                Some(w) => Index::Wheels(std::fs::canonicalize(w).map_err(|source| {
                    ConfigError::Wheels {
                        path: w.clone(),
                        source,
                    }
                })?),
                None => Index::Online,
            };
        // A bundle's wheels and interpreters, and nothing else.
        let (index, pythons) = match &self.bundle {
            Some(b) => {
                let root = std::fs::canonicalize(b).map_err(|source| ConfigError::Bundle {
                    path: b.clone(),
                    source,
                })?;
                (
                    Index::Bundle(root.join("wheels")),
                    Pythons::discover_at(None, &crate::bundle::python_prefixes(&root)),
                )
            }
            None => (index, Pythons::discover(&self.pythons)),
        };
        let envs_root = self.envs.clone().unwrap_or_else(crate::dirs::envs_dir);
        std::fs::create_dir_all(&envs_root).map_err(|source| ConfigError::CreateDir {
            path: envs_root.clone(),
            source,
        })?;
        let jobs = self.jobs.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
        });
        let envs_root =
            std::fs::canonicalize(&envs_root).map_err(|source| ConfigError::EnvsDir {
                path: envs_root.clone(),
                source,
            })?;
        // Named by the user (or the program's own default): the sandbox's
        // home-directory check lets binds inside them through.
        host.allow_program_dir(&envs_root);
        match &index {
            Index::Wheels(dir) | Index::Bundle(dir) => {
                host.allow_program_dir(dir);
                if let Some(root) = dir.parent().filter(|_| self.bundle.is_some()) {
                    host.allow_program_dir(root);
                }
            }
            Index::Online => {}
        }
        for prefix in &self.pythons {
            if let Ok(prefix) = std::path::absolute(prefix) {
                host.allow_program_dir(prefix);
            }
        }
        Ok(EnvSettings {
            specs,
            pythons,
            host,
            envs_root,
            index,
            jobs,
            test_timeout_s: self.test_timeout_s,
            run_empty: self.run_empty,
            keep_work: self.keep_work,
        })
    }
}

/// Which pipeline, and which MASAI stages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSettings {
    /// `masai` or `first`.
    pub kind: Kind,
    /// Run the Test Template Generator (its test guides the reproducer).
    pub template: bool,
    /// Run the Issue Reproducer (its test ranks the candidates).
    pub reproduce: bool,
    /// Rank the candidates by running tests; off, the first distinct
    /// candidate (the greedy one when it applies) is taken.
    pub rank: bool,
    /// Test runs at once: each a worktree, an install and a test run in a
    /// sandbox, beside the model's threads (the reproducer's candidate
    /// tests, the rounds' and the ranker's candidates). It changes no
    /// result: left out of `run.json` while default, so runs written
    /// before it stay resumable, and settings without it read as the
    /// default.
    #[serde(
        default = "default_parallel_runs",
        skip_serializing_if = "is_default_parallel_runs"
    )]
    pub parallel_runs: usize,
}

/// Three runs keep two cores busy while one waits on its install.
pub const DEFAULT_PARALLEL_RUNS: usize = 3;

fn default_parallel_runs() -> usize {
    DEFAULT_PARALLEL_RUNS
}

fn is_default_parallel_runs(runs: &usize) -> bool {
    *runs == DEFAULT_PARALLEL_RUNS
}

/// Which pipeline a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Masai,
    First,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            kind: Kind::Masai,
            template: true,
            reproduce: true,
            rank: true,
            parallel_runs: DEFAULT_PARALLEL_RUNS,
        }
    }
}

/// The limits and sampling of one ReAct sub-agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    pub max_steps: usize,
    pub temperature: f32,
}

/// The ReAct sub-agents' settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsSettings {
    pub test_template: AgentSettings,
    pub reproducer: AgentSettings,
    pub localizer: AgentSettings,
}

impl Default for AgentsSettings {
    fn default() -> Self {
        let greedy = |max_steps| AgentSettings {
            max_steps,
            temperature: 0.0,
        };
        AgentsSettings {
            test_template: greedy(10),
            reproducer: greedy(12),
            localizer: greedy(12),
        }
    }
}

/// Deep merge: tables merge key by key, anything else replaces.
fn merge(base: &mut toml::Table, overrides: toml::Table) {
    for (key, value) in overrides {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_overrides_only_what_it_names() {
        let base = Settings::defaults("m");
        let s = Settings::with_toml(&base, "[sampling]\ntemperature = 0.4\n").unwrap();
        assert_eq!(s.sampling.temperature, 0.4);
        assert_eq!(s.sampling.max_tokens, base.sampling.max_tokens);
        assert_eq!(s.engine, base.engine);
        assert_eq!(s.model, "m");
        let s = Settings::with_toml(&base, "model = \"x.gguf\"\n[retrieval]\nfiles = 1").unwrap();
        assert_eq!((s.model.as_str(), s.retrieval.files), ("x.gguf", 1));
        let s = Settings::with_toml(
            &base,
            "[aci]\nwindow = 50\n[react.history]\nkeep = \"all\"\n[react]\nmax_steps = 12",
        )
        .unwrap();
        assert_eq!(
            (s.aci.window, s.aci.run_timeout_s),
            (50, base.aci.run_timeout_s)
        );
        assert_eq!(s.react.history.keep, crate::agents::history::Keep::All);
        assert_eq!(s.react.history.block, base.react.history.block);
        assert_eq!(
            (s.react.max_steps, s.react.reply_tokens),
            (12, base.react.reply_tokens)
        );
        let s = Settings::with_toml(
            &base,
            "environment = \"/venv\"\n[pipeline]\nreproduce = false\n[fixer]\ncandidates = 1",
        )
        .unwrap();
        assert_eq!(s.environment.as_deref(), Some(Path::new("/venv")));
        assert!(!s.pipeline.reproduce && s.pipeline.template && s.pipeline.rank);
        assert_eq!(
            (s.fixer.candidates, s.fixer.max_tokens),
            (1, base.fixer.max_tokens)
        );
    }

    #[test]
    fn the_server_table_overrides_by_key_and_stays_out_while_default() {
        use crate::engine::http::{ServerKind, ServerSettings};
        let base = Settings::defaults("m");
        let s = Settings::with_toml(
            &base,
            "[server]\nkind = \"vllm\"\napi_key_env = \"VLLM_KEY\"\nretries = 1",
        )
        .unwrap();
        assert_eq!(
            s.server,
            ServerSettings {
                kind: ServerKind::Vllm,
                api_key_env: Some("VLLM_KEY".into()),
                retries: 1,
                ..ServerSettings::default()
            }
        );
        // Defaults are not serialised, so run.json (and a resumed run's
        // identity) is as before; set ones are.
        let json = |s: &Settings| serde_json::to_value(s).unwrap();
        assert_eq!(json(&base).get("server"), None);
        assert_eq!(json(&s)["server"]["kind"], "vllm");
        let overrides = Overrides {
            server_kind: Some(ServerKind::Sglang),
            ..Overrides::default()
        };
        assert_eq!(overrides.resolve().unwrap().server.kind, ServerKind::Sglang);
    }

    #[test]
    fn the_sandbox_setting_defaults_to_auto_and_the_flag_wins(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let base = Settings::defaults("m");
        assert_eq!(base.sandbox, SandboxChoice::Auto);
        // Left out of run.json while auto: older runs stay resumable.
        assert_eq!(serde_json::to_value(&base)?.get("sandbox"), None);
        let file = Settings::with_toml(&base, "sandbox = \"wasi\"\n")?;
        assert_eq!(file.sandbox, SandboxChoice::Wasi);
        assert_eq!(serde_json::to_value(&file)?["sandbox"], "wasi");
        let bad = Settings::with_toml(&base, "sandbox = \"docker\"\n").map(|_| ());
        assert!(bad.is_err(), "{bad:?}");
        // (text, parsed)
        let cases = [
            ("auto", Ok(SandboxChoice::Auto)),
            ("bubblewrap", Ok(SandboxChoice::Bubblewrap)),
            ("bwrap", Ok(SandboxChoice::Bubblewrap)),
            ("wasi", Ok(SandboxChoice::Wasi)),
            (
                "docker",
                Err("unknown sandbox `docker`: choose auto, bubblewrap or wasi".to_string()),
            ),
        ];
        for (text, want) in cases {
            let got = text.parse::<SandboxChoice>().map_err(|e| e.to_string());
            assert_eq!(got, want, "{text}");
        }
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "sandbox = \"wasi\"\n")?;
        let mut settings = Settings::defaults("m");
        Overrides {
            config_file: Some(path),
            sandbox: Some(SandboxChoice::Bubblewrap),
            ..Overrides::default()
        }
        .layer(&mut settings)?;
        assert_eq!(settings.sandbox, SandboxChoice::Bubblewrap);
        Ok(())
    }

    #[test]
    fn the_reproducer_settings_default_and_override_by_key() {
        use crate::agents::reproduce::ReproducerMode;
        let base = Settings::defaults("m");
        assert_eq!(
            (
                base.reproducer.mode,
                base.reproducer.candidates,
                base.reproducer.temperature,
                base.reproducer.max_tokens
            ),
            (ReproducerMode::Sample, 4, 0.8, 320)
        );
        let cases: &[(&str, ReproducerMode, usize, u32)] = &[
            (
                "[reproducer]\nmode = \"react\"",
                ReproducerMode::React,
                4,
                320,
            ),
            (
                "[reproducer]\ncandidates = 3",
                ReproducerMode::Sample,
                3,
                320,
            ),
            (
                "[reproducer]\nmax_tokens = 200",
                ReproducerMode::Sample,
                4,
                200,
            ),
        ];
        for (text, mode, candidates, max_tokens) in cases {
            let s = Settings::with_toml(&base, text).unwrap();
            assert_eq!(
                (
                    s.reproducer.mode,
                    s.reproducer.candidates,
                    s.reproducer.max_tokens
                ),
                (*mode, *candidates, *max_tokens),
                "{text}"
            );
        }
        // A dotted key, as a sweep's axis sets it.
        let mut table = toml::Table::new();
        let mut r = toml::Table::new();
        r.insert("temperature".into(), toml::Value::Float(0.5));
        table.insert("reproducer".into(), toml::Value::Table(r));
        let s = Settings::with_table(&base, table).unwrap();
        assert_eq!(s.reproducer.temperature, 0.5);
        // Settings written before the section existed still read.
        let mut old = toml::Table::try_from(&base).unwrap();
        old.remove("reproducer");
        let s: Settings = toml::Value::Table(old).try_into().unwrap();
        assert_eq!(s.reproducer, ReproducerSettings::default());
        // The scheduler's slots hold the larger of the two batches (the
        // defaults: 8 fixer candidates, 4 reproduction tests).
        for (text, most) in [
            ("", 8),
            ("[fixer]\ncandidates = 2", 4),
            ("[fixer]\ncandidates = 2\n[reproducer]\ncandidates = 6", 6),
            ("[reproducer]\ncandidates = 12", 12),
            ("[fixer]\ncandidates = 2\n[reproducer]\nmode = \"react\"", 2),
            ("[fixer]\ncandidates = 2\n[pipeline]\nreproduce = false", 2),
        ] {
            let s = Settings::with_toml(&base, text).unwrap();
            assert_eq!(s.most_candidates(), most, "{text}");
        }
        let err = Settings::with_toml(&base, "[reproducer]\nmode = \"guess\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("reproducer.mode"), "{err}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_named() {
        let base = Settings::defaults("m");
        let cases = [
            ("[sampling]\ntemprature = 1.0", "temprature"),
            ("[engine]\ncontext = \"big\"", "context"),
            ("colour = 1", "colour"),
            ("[react.history]\nkeep = \"most\"", "history.keep"),
            ("[server]\nkind = \"tgi\"", "server.kind"),
            ("[server]\nretry = 3", "retry"),
        ];
        for (text, key) in cases {
            let err = Settings::with_toml(&base, text).unwrap_err().to_string();
            assert!(err.contains(key), "{err} should name {key}");
        }
    }

    #[test]
    fn set_args_parse_keys_and_toml_values() {
        use toml::Value;
        let cases: &[(&str, &str, Value)] = &[
            (
                "engine.context=8192",
                "engine.context",
                Value::Integer(8192),
            ),
            (
                "fixer.temperature=0.4",
                "fixer.temperature",
                Value::Float(0.4),
            ),
            (
                "pipeline.rank=false",
                "pipeline.rank",
                Value::Boolean(false),
            ),
            (
                "fixer.edit_format=anchored",
                "fixer.edit_format",
                Value::String("anchored".into()),
            ),
            (
                "fixer.edit_format=\"lines\"",
                "fixer.edit_format",
                Value::String("lines".into()),
            ),
            (
                " model = a/b.gguf ",
                "model",
                Value::String("a/b.gguf".into()),
            ),
            ("model=x=y", "model", Value::String("x=y".into())),
            ("model=", "model", Value::String(String::new())),
            (
                "react.max_steps=1\nmodel = 2",
                "react.max_steps",
                Value::String("1\nmodel = 2".into()),
            ),
        ];
        for (text, key, value) in cases {
            let set: SetArg = text.parse().unwrap();
            assert_eq!((set.key.as_str(), &set.value), (*key, value), "{text:?}");
        }
        let bad: &[(&str, SetArgError)] = &[
            ("engine.context", SetArgError::Form("engine.context".into())),
            ("=3", SetArgError::Key(String::new())),
            (
                "engine..context=3",
                SetArgError::Key("engine..context".into()),
            ),
            (
                "engine.context.=3",
                SetArgError::Key("engine.context.".into()),
            ),
            (
                "engine context=3",
                SetArgError::Key("engine context".into()),
            ),
            (
                "\"engine\".context=3",
                SetArgError::Key("\"engine\".context".into()),
            ),
        ];
        for (text, err) in bad {
            assert_eq!(text.parse::<SetArg>().as_ref(), Err(err), "{text:?}");
        }
    }

    #[test]
    fn set_args_layer_after_the_file_and_before_the_flags() -> Result<(), Box<dyn std::error::Error>>
    {
        use crate::agents::fixer::EditFormat;
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "model = \"from-file\"\n[engine]\ncontext = 4096\n[fixer]\ncandidates = 2\n",
        )?;
        let sets =
            |texts: &[&str]| -> Vec<SetArg> { texts.iter().map(|t| t.parse().unwrap()).collect() };
        let resolve = |overrides: Overrides| -> Result<Settings, ConfigError> {
            let mut settings = Settings::defaults("m");
            overrides.layer(&mut settings)?;
            Ok(settings)
        };
        let s = resolve(Overrides {
            config_file: Some(file.clone()),
            set: sets(&[
                "fixer.edit_format=anchored",
                "engine.context=8192",
                "reproducer.candidates=6",
                "reproducer.candidates=5",
            ]),
            ..Overrides::default()
        })?;
        assert_eq!(
            (
                s.fixer.edit_format,
                s.engine.context,
                s.reproducer.candidates,
                s.fixer.candidates,
                s.model.as_str()
            ),
            (EditFormat::Anchored, 8192, 5, 2, "from-file")
        );
        // What --set does not name stays as the file and defaults say.
        let base = Settings::defaults("m");
        assert_eq!(s.engine.threads, base.engine.threads);
        assert_eq!(s.reproducer.temperature, base.reproducer.temperature);
        // --model and --environment win over --set.
        let s = resolve(Overrides {
            config_file: Some(file),
            model: Some("from-flag".into()),
            environment: Some(PathBuf::from("/flag-venv")),
            set: sets(&[
                "model=from-set",
                "environment=/set-venv",
                "keep_workspaces=true",
            ]),
            ..Overrides::default()
        })?;
        assert_eq!(s.model, "from-flag");
        assert_eq!(s.environment.as_deref(), Some(Path::new("/flag-venv")));
        assert!(s.keep_workspaces);
        let s = resolve(Overrides {
            set: sets(&["environment=/set-venv"]),
            ..Overrides::default()
        })?;
        assert_eq!(s.environment.as_deref(), Some(Path::new("/set-venv")));
        Ok(())
    }

    #[test]
    fn a_set_arg_that_is_no_setting_is_refused_by_name() {
        let base = Settings::defaults("m");
        const TOP: &str = "`model`, `keep_workspaces`, `engine`, `server`, `sampling`, `retrieval`, `aci`, `react`, `pipeline`, `agents`, `localizer`, `fixer`, `ranker`, `reproducer`, `environment`, `sandbox`";
        let cases: &[(&str, String)] = &[
            (
                "fixer.edit_formt=anchored",
                "`fixer.edit_formt`: unknown field `edit_formt`, expected one of `candidates`, `temperature`, `max_tokens`, `edit_format`, `rounds`, `show` in `fixer`".into(),
            ),
            (
                "colour=1",
                format!("`colour`: unknown field `colour`, expected one of {TOP}"),
            ),
            (
                "sweep.grid=1",
                format!("`sweep`: unknown field `sweep`, expected one of {TOP}"),
            ),
            (
                "engine.context=big",
                "`engine.context`: invalid type: string \"big\", expected u32 in `engine.context`".into(),
            ),
            (
                "fixer.edit_format=fancy",
                "`fixer.edit_format`: unknown variant `fancy`, expected one of `search_replace`, `anchored`, `lines`, `definition` in `fixer.edit_format`".into(),
            ),
            (
                "model.name=x",
                "`model`: invalid type: map, expected a string in `model`".into(),
            ),
            (
                "engine=3",
                "`engine`: invalid type: integer `3`, expected struct EngineSettings in `engine`".into(),
            ),
        ];
        for (text, expected) in cases {
            let set: SetArg = text.parse().unwrap();
            let err = Settings::with_sets(&base, &[set])
                .expect_err(text)
                .to_string();
            assert_eq!(err, format!("--set {text}: {expected}"));
        }
        // The first bad one of several is named.
        let sets: Vec<SetArg> = ["engine.context=8192", "aci.windw=9", "aci.window=9"]
            .iter()
            .map(|t| t.parse().unwrap())
            .collect();
        let err = Settings::with_sets(&base, &sets)
            .expect_err("bad key")
            .to_string();
        assert_eq!(
            err,
            "--set aci.windw=9: `aci.windw`: unknown field `windw`, expected `window` or `run_timeout_s` in `aci`"
        );
    }
}
