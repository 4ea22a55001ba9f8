//! Settings, resolved once: defaults, then the configuration file (TOML; it
//! overrides only what it names), then command-line flags. The resolved
//! settings are recorded in the run's `run.json`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agents::fixer::FixerSettings;
use crate::agents::ranker::RankerSettings;
use crate::agents::react::ReactSettings;
use crate::engine::{EngineSettings, Sampling};
use crate::pipeline::{AgentsSettings, PipelineSettings};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("configuration file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
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
    pub sampling: Sampling,
    pub retrieval: Retrieval,
    pub aci: AciConfig,
    /// Limits and history processing of the agents' ReAct episodes.
    pub react: ReactSettings,
    /// Which pipeline, and which of its stages.
    pub pipeline: PipelineSettings,
    /// The ReAct sub-agents' step limits and sampling.
    pub agents: AgentsSettings,
    pub fixer: FixerSettings,
    pub ranker: RankerSettings,
    /// A Python virtualenv that commands in the sandbox use (tests need
    /// their dependencies); without one, the system's Python.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<PathBuf>,
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
            sampling: Sampling::default(),
            retrieval: Retrieval { files: 3 },
            aci: AciConfig {
                window: crate::aci::DEFAULT_WINDOW,
                run_timeout_s: crate::aci::DEFAULT_RUN_TIMEOUT_S,
            },
            react: ReactSettings::default(),
            pipeline: PipelineSettings::default(),
            agents: AgentsSettings::default(),
            fixer: FixerSettings::default(),
            ranker: RankerSettings::default(),
            environment: None,
        }
    }

    /// `base` overridden by the TOML file at `path`.
    pub fn with_file(base: &Settings, path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::with_toml(base, &text).map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    }

    fn with_toml(base: &Settings, text: &str) -> Result<Settings, String> {
        let mut overrides: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        // A sweep's grid (`[sweep.grid]`) lives in the same file; it is not
        // a setting of one run.
        overrides.remove("sweep");
        Self::with_table(base, overrides)
    }

    /// `base` overridden by the keys of `overrides`.
    pub fn with_table(base: &Settings, overrides: toml::Table) -> Result<Settings, String> {
        let mut merged = toml::Table::try_from(base).map_err(|e| e.to_string())?;
        merge(&mut merged, overrides);
        serde_path_to_error::deserialize(toml::Value::Table(merged)).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                e.inner().to_string()
            } else {
                format!("`{path}`: {}", e.inner())
            }
        })
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
    fn unknown_keys_and_wrong_types_are_named() {
        let base = Settings::defaults("m");
        let cases = [
            ("[sampling]\ntemprature = 1.0", "temprature"),
            ("[engine]\ncontext = \"big\"", "context"),
            ("colour = 1", "colour"),
            ("[react.history]\nkeep = \"most\"", "history.keep"),
        ];
        for (text, key) in cases {
            let err = Settings::with_toml(&base, text).unwrap_err();
            assert!(err.contains(key), "{err} should name {key}");
        }
    }
}
