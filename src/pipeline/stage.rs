//! A pipeline stage as a type: what it is given by the stages before, what
//! it produces, and the slice of the settings it reads. A stage's `run` is
//! handed that slice and nothing else of the settings, so what it reads is
//! what its key hashes: the key of a stage is derived from its slice, what
//! its run is made from (the model, the engine, the environment), its
//! input, and the key of the stages before it. A sweep's points reuse a
//! shared stage's stored result exactly when the keys match; nothing lists
//! by hand what a stage depends on.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::aci::Aci;
use crate::agents::react::{self, Agent, ReactSettings};
use crate::agents::workplace::Workplace;
use crate::config::{AciConfig, AgentSettings, Settings};
use crate::engine::{Backend, Sampling};
use crate::index::symbols::CodeIndex;
use crate::record::trajectory::{EpisodeSummary, Step};
use crate::trajectory::Trajectory;

/// Why a stage, or the pipeline, failed.
#[derive(Debug, thiserror::Error)]
pub enum MasaiError {
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error(transparent)]
    Index(#[from] crate::index::IndexError),
    #[error(transparent)]
    Repo(#[from] crate::repo::RepoError),
    #[error(transparent)]
    Env(#[from] crate::env::EnvError),
    #[error("fixer: {0}")]
    Fix(#[from] crate::agents::fixer::FixError),
    #[error("ranker: {0}")]
    Rank(#[from] crate::agents::ranker::RankError),
    #[error("reproducer: {0}")]
    Reproduce(#[from] crate::agents::reproduce::ReproduceError),
    #[error("cannot write artifact {path}: {source}")]
    Artifact {
        path: PathBuf,
        source: crate::record::RecordError,
    },
}

/// One stage of the pipeline.
pub trait Stage {
    /// Its name in trajectories and shared-stage files.
    const NAME: &'static str;
    /// Its number in the log's "stage N/5".
    const NUMBER: usize;
    /// The artifact it writes: `<artifacts>/<ARTIFACT>.json`.
    const ARTIFACT: &'static str;
    /// Whether a sweep's points share its result (a stage whose result
    /// later stages' settings cannot change, and costly to make again).
    const SHARED: bool;
    /// The settings it reads: all of them, and only them.
    type Settings: Serialize;
    /// What the stages before give it.
    type Input<'i>: Serialize;
    /// What it produces (its artifact).
    type Output: Serialize + DeserializeOwned;

    /// The slice of `all` the stage reads.
    fn settings(all: &Settings) -> Self::Settings;

    /// What the log says when the stage starts, after "stage N/5, ".
    fn announce(settings: &Self::Settings, input: &Self::Input<'_>) -> String;

    /// Runs the stage; the workspace is left at the base commit.
    fn run(
        cx: &StageContext<'_>,
        settings: &Self::Settings,
        input: Self::Input<'_>,
        trajectory: &mut Trajectory,
    ) -> Result<Self::Output, MasaiError>;
}

/// What every stage of one task is given besides its settings and input.
pub struct StageContext<'a> {
    pub backend: &'a dyn Backend,
    pub task: Workplace<'a>,
    /// The workspace's code index.
    pub index: CodeIndex,
}

/// The settings a ReAct agent's episode reads: its own, the episode's
/// limits, the interface's, and the sampling.
#[derive(Debug, Clone, Serialize)]
pub struct EpisodeSettings {
    pub agent: AgentSettings,
    pub react: ReactSettings,
    pub aci: AciConfig,
    pub sampling: Sampling,
}

impl EpisodeSettings {
    pub fn of(all: &Settings, agent: &AgentSettings) -> EpisodeSettings {
        EpisodeSettings {
            agent: agent.clone(),
            react: all.react,
            aci: all.aci.clone(),
            sampling: all.sampling.clone(),
        }
    }
}

impl StageContext<'_> {
    /// The agent-computer interface over the task's workspace.
    pub fn interface(&self, aci: &AciConfig) -> Aci {
        let ws = self.task.ws;
        Aci::new(
            ws.path(),
            ws.base_commit(),
            self.index.clone(),
            aci.settings(),
            self.task.env.clone(),
        )
    }

    /// Runs one ReAct agent, then puts the workspace back.
    pub fn episode(
        &self,
        agent: &Agent<'_>,
        aci: &mut Aci,
        settings: &EpisodeSettings,
        trajectory: &mut Trajectory,
    ) -> Result<EpisodeSummary, MasaiError> {
        let react = react::ReactSettings {
            max_steps: settings.agent.max_steps,
            ..settings.react
        };
        let sampling = Sampling {
            temperature: settings.agent.temperature,
            ..settings.sampling.clone()
        };
        let mut conversation = self.backend.conversation(1, 0)?;
        let summary = react::run(
            conversation.as_mut(),
            aci,
            agent,
            &react,
            &sampling,
            trajectory,
        );
        crate::repo::reset_worktree(self.task.ws.path())?;
        tracing::info!(
            "  {}: {} after {} steps ({} prompt tokens evaluated, {:.0}% reused)",
            agent.name,
            summary.status.as_str(),
            summary.steps,
            summary.tokens_evaluated,
            100.0 * summary.kv_reuse()
        );
        Ok(summary)
    }
}

/// What every stage's run is made from besides its own settings: the
/// model, the engine (or server) that runs it, and the environment.
pub(crate) fn common(all: &Settings) -> serde_json::Value {
    serde_json::json!({
        "model": all.model,
        "engine": all.engine,
        "server": all.server,
        "environment": all.environment,
    })
}

/// The key of stage `S`: its name, the common settings, its slice, the
/// key of the stages before, and its input (`None`: a key of the settings
/// alone, as a sweep compares its points before running them).
fn key<S: Stage>(
    common: &serde_json::Value,
    settings: &S::Settings,
    before: &str,
    input: Option<&S::Input<'_>>,
) -> String {
    digest(&serde_json::json!({
        "stage": S::NAME,
        "common": common,
        "settings": settings,
        "before": before,
        "input": input,
    }))
}

/// The key of the stages before and stage `S` switched off.
fn key_off<S: Stage>(before: &str) -> String {
    digest(&serde_json::json!({ "stage": S::NAME, "off": true, "before": before }))
}

fn digest(value: &serde_json::Value) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(value.to_string().as_bytes());
    hex::encode(&digest[..8])
}

/// The stages of one task run in order: each one's key chained to the
/// keys before it, a shared stage taken from the sweep's store when one
/// with its key is there (else run and stored), every artifact written.
pub struct Chain<'a> {
    id: &'a str,
    all: &'a Settings,
    common: serde_json::Value,
    before: String,
    artifacts: &'a Path,
    shared: Option<SharedStages>,
}

impl<'a> Chain<'a> {
    /// The chain of task `id` with settings `all`, writing its artifacts
    /// to `artifacts` and sharing stages through `shared`
    /// (`<shared>/<id>/`), when given.
    pub fn new(
        id: &'a str,
        all: &'a Settings,
        artifacts: &'a Path,
        shared: Option<&Path>,
    ) -> Chain<'a> {
        Chain {
            id,
            all,
            common: common(all),
            before: String::new(),
            artifacts,
            shared: shared.map(|d| SharedStages { dir: d.join(id) }),
        }
    }

    /// Runs stage `S` (or takes its shared result) and writes its artifact.
    pub fn run<S: Stage>(
        &mut self,
        cx: &StageContext<'_>,
        input: S::Input<'_>,
        trajectory: &mut Trajectory,
    ) -> Result<S::Output, MasaiError> {
        let settings = S::settings(self.all);
        tracing::info!(
            "{}: stage {}/5, {}",
            self.id,
            S::NUMBER,
            S::announce(&settings, &input)
        );
        trajectory.stage(S::NAME);
        let key = key::<S>(&self.common, &settings, &self.before, Some(&input));
        self.before = key.clone();
        let shared = self.shared.as_ref().filter(|_| S::SHARED);
        let output = match shared.and_then(|s| s.load::<S::Output>(S::NAME, &key)) {
            Some(output) => {
                let from = shared
                    .map(|s| s.path(S::NAME, &key).display().to_string())
                    .unwrap_or_default();
                tracing::info!("{}: {} taken from {from}", self.id, S::NAME);
                trajectory.record(Step::Reused {
                    stage: S::NAME.to_string(),
                    from,
                });
                output
            }
            None => {
                let output = S::run(cx, &settings, input, trajectory)?;
                if let Some(s) = shared {
                    s.store(S::NAME, &key, &output)?;
                }
                output
            }
        };
        write_artifact(self.artifacts, S::ARTIFACT, &output)?;
        Ok(output)
    }

    /// [`Chain::run`] when `on`; else the stage is switched off (which
    /// the keys after it say).
    pub fn run_if<S: Stage>(
        &mut self,
        on: bool,
        cx: &StageContext<'_>,
        input: S::Input<'_>,
        trajectory: &mut Trajectory,
    ) -> Result<Option<S::Output>, MasaiError> {
        if on {
            return self.run::<S>(cx, input, trajectory).map(Some);
        }
        self.before = key_off::<S>(&self.before);
        Ok(None)
    }
}

/// The keys of a pipeline's stages from the settings alone (inputs left
/// out), in order: what a sweep compares between its points.
pub struct SettingsKeys<'a> {
    all: &'a Settings,
    common: serde_json::Value,
    /// (stage, shared, key)
    pub keys: Vec<(&'static str, bool, String)>,
}

impl<'a> SettingsKeys<'a> {
    pub fn new(all: &'a Settings) -> SettingsKeys<'a> {
        SettingsKeys {
            all,
            common: common(all),
            keys: Vec::new(),
        }
    }

    /// Stage `S`, run when `on`.
    pub fn then<S: Stage>(mut self, on: bool) -> SettingsKeys<'a> {
        let before = self.keys.last().map(|k| k.2.as_str()).unwrap_or_default();
        let key = if on {
            key::<S>(&self.common, &S::settings(self.all), before, None)
        } else {
            key_off::<S>(before)
        };
        self.keys.push((S::NAME, S::SHARED, key));
        self
    }
}

/// Shared stages of one task: `<shared>/<instance_id>/<stage>-<key>.json`.
pub(crate) struct SharedStages {
    pub(crate) dir: PathBuf,
}

impl SharedStages {
    pub(crate) fn path(&self, stage: &str, key: &str) -> PathBuf {
        self.dir.join(format!("{stage}-{key}.json"))
    }

    /// The stored stage, if any. One that cannot be read or parsed (a
    /// file cut short, or written by another version) is reported with its
    /// path and why, and the stage runs again (its result then replaces
    /// the file).
    pub(crate) fn load<T: DeserializeOwned>(&self, stage: &str, key: &str) -> Option<T> {
        let path = self.path(stage, key);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(
                    "{}: cannot read the shared stage ({e}); running it again",
                    path.display()
                );
                return None;
            }
        };
        match serde_json::from_str(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(
                    "{}: not a stored {stage} stage ({e}); running it again",
                    path.display()
                );
                None
            }
        }
    }

    pub(crate) fn store(
        &self,
        stage: &str,
        key: &str,
        value: &impl Serialize,
    ) -> Result<(), MasaiError> {
        write_artifact(&self.dir, &format!("{stage}-{key}"), value)
    }
}

/// Writes `value` to `<dir>/<name>.json`.
pub(crate) fn write_artifact(
    dir: &Path,
    name: &str,
    value: &impl Serialize,
) -> Result<(), MasaiError> {
    let path = dir.join(format!("{name}.json"));
    let err = |source| MasaiError::Artifact {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|source| {
        err(crate::record::RecordError::Io {
            action: "create",
            path: dir.to_path_buf(),
            source,
        })
    })?;
    crate::record::write_json(&path, value).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_stage_is_taken_only_when_it_reads_back() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let shared = SharedStages {
            dir: dir.path().to_path_buf(),
        };
        shared.store("localize", "k1", &vec!["a.py".to_string()])?;
        std::fs::write(shared.path("localize", "k2"), "{\"cut short")?;
        std::fs::write(shared.path("localize", "k3"), "{\"other\": 1}")?;
        let cases: [(&str, Option<Vec<String>>); 4] = [
            ("k1", Some(vec!["a.py".to_string()])),
            ("k2", None),
            ("k3", None),
            ("missing", None),
        ];
        for (key, want) in cases {
            assert_eq!(shared.load::<Vec<String>>("localize", key), want, "{key}");
        }
        Ok(())
    }
}
