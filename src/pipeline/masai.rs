//! The MASAI pipeline: Edit Localizer → Test Template Generator → Issue
//! Reproducer → Fixer (N candidates from one prompt) → Ranker. The
//! localizer runs first so that the test stages can start from the located
//! code and the tests that exercise it: the template is the located
//! module's existing test file when it passes (the agent only when none
//! does), and the reproducer samples N test files from one prompt and
//! keeps the failure they agree on (`[reproducer] mode = "sample"`), or
//! runs its ReAct agent (`"react"`). Each stage's
//! output is written as an artifact (`<artifacts>/<stage>.json`) and the
//! workspace is put back to the base commit between stages, so what one
//! agent wrote never leaks into the next one's patch.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::aci::{Aci, Location, SubmittedTest, TestCheck};
use crate::agents::fixer::{self, Fixes};
use crate::agents::localize::{self, LocalizerMode};
use crate::agents::ranker::{self, Ranking};
use crate::agents::react::{self, Agent};
use crate::agents::reproduce::{self, ReproducerMode};
use crate::agents::template;
use crate::agents::{self as agent_defs};
use crate::config::{AgentSettings, Settings};
use crate::dataset::Issue;
use crate::engine::{Backend, EngineError, Sampling};
use crate::env::task::TaskEnv;
use crate::index::candidates::{self, Candidate};
use crate::index::symbols::CodeIndex;
use crate::index::IndexError;
use crate::record::trajectory::EpisodeSummary;
use crate::record::trajectory::Step;
use crate::repo::{RepoError, Workspace};
use crate::trajectory::Trajectory;

#[derive(Debug, thiserror::Error)]
pub enum MasaiError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Env(#[from] crate::env::EnvError),
    #[error("fixer: {0}")]
    Fix(#[from] fixer::FixError),
    #[error("ranker: {0}")]
    Rank(#[from] ranker::RankError),
    #[error("reproducer: {0}")]
    Reproduce(#[from] reproduce::ReproduceError),
    #[error("cannot write artifact {path}: {source}")]
    Artifact {
        path: PathBuf,
        source: crate::record::RecordError,
    },
}

/// Where a test stage's test came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestSource {
    /// An existing test file of the located code that passes (the
    /// template, without the model).
    Existing,
    /// A ReAct agent handed it in (older artifacts say nothing: this).
    #[default]
    Agent,
    /// Chosen among sampled candidates (the reproducer's sample mode).
    Sample,
}

/// A test stage's artifact (`template.json`, `reproduction.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestArtifact {
    /// The ReAct agent's episode, when one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode: Option<EpisodeSummary>,
    /// The accepted test (the template passes; a reproduction fails on
    /// the base commit), or none.
    pub test: Option<SubmittedTest>,
    #[serde(default)]
    pub source: TestSource,
    /// The existing test files run as the template, and their verdicts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub existing: Vec<template::Tried>,
    /// Sample mode's candidates: each reply, its run's verdict and
    /// failure signature.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<reproduce::Sample>,
    /// The accepted sample's index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<usize>,
}

impl TestArtifact {
    /// The artifact of a ReAct agent's episode.
    fn agent(episode: EpisodeSummary, test: Option<SubmittedTest>) -> TestArtifact {
        TestArtifact {
            episode: Some(episode),
            test,
            source: TestSource::Agent,
            existing: Vec::new(),
            samples: Vec::new(),
            chosen: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocationsArtifact {
    /// The ReAct localizer's episode (`react` mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode: Option<EpisodeSummary>,
    /// `localizer` when the model chose the locations, `index` when they are
    /// the code index's top-ranked candidates (the model named none), `bm25`
    /// in runs written before the candidate ranking.
    pub source: String,
    pub locations: Vec<Location>,
    /// The code index's ranked candidates the model was shown (`choose`
    /// mode) or could compare with (`react` mode), best first.
    #[serde(default)]
    pub candidates: Vec<Candidate>,
    /// The function where the accepted reproduction test's traceback
    /// ends, added first to `locations` because no location covered it
    /// ([`crate::agents::evidence::traceback_location`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<Location>,
}

/// What the pipeline produced for one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub patch: String,
    pub template: Option<TestArtifact>,
    pub reproduction: Option<TestArtifact>,
    pub locations: LocationsArtifact,
    pub fixes: Fixes,
    pub ranking: Option<Ranking>,
    /// Index into `fixes.distinct` of the patch chosen.
    pub chosen: Option<usize>,
}

/// Where a task's run writes, and where it may find stages shared with
/// other runs.
#[derive(Debug, Clone)]
pub struct Dirs {
    /// Stage outputs (`<stage>.json`).
    pub artifacts: PathBuf,
    /// Candidates' worktrees while the task runs.
    pub scratch: PathBuf,
    /// Stages shared between runs (a sweep's grid points): a ReAct stage
    /// whose settings, task and inputs match one stored here is taken from
    /// it instead of run again; one that runs is stored.
    pub shared: Option<PathBuf>,
}

/// Whether a run with settings `b` can reuse every shared stage a run with
/// settings `a` stores (the same task, the same stages before): the
/// settings [`SharedStages::key`] reads are all equal, and both run the
/// MASAI pipeline. `slurm sweep` starts such a point's elements after the
/// earlier point's.
pub fn shares_stages(a: &Settings, b: &Settings) -> bool {
    let read = |s: &Settings| {
        serde_json::json!({
            "kind": s.pipeline.kind,
            "template": s.pipeline.template,
            "reproduce": s.pipeline.reproduce,
            "model": s.model,
            "engine": s.engine,
            "sampling": s.sampling,
            "aci": s.aci,
            "react": s.react,
            "agents": s.agents,
            "localizer": s.localizer,
            "reproducer": s.reproducer,
            "environment": s.environment,
        })
    };
    a.pipeline.kind == crate::config::Kind::Masai && read(a) == read(b)
}

/// Shared stages of one task: `<shared>/<instance_id>/<stage>-<key>.json`,
/// the key a hash of everything the stage's outcome depends on.
struct SharedStages {
    dir: PathBuf,
}

impl SharedStages {
    /// The key of a stage: the model, the settings every agent shares,
    /// the stage's own (`agent`: a ReAct agent's, or sample mode's), the
    /// environment, and what it was given from the stages before (the
    /// locations, the template).
    fn key(
        settings: &Settings,
        stage: &str,
        agent: &impl Serialize,
        before: Option<&impl Serialize>,
    ) -> String {
        use sha2::Digest;
        let identity = serde_json::json!({
            "stage": stage,
            "model": settings.model,
            "engine": settings.engine,
            "sampling": settings.sampling,
            "aci": settings.aci,
            "react": settings.react,
            "agent": agent,
            "environment": settings.environment,
            "before": before.and_then(|b| serde_json::to_value(b).ok()),
        });
        let digest = sha2::Sha256::digest(identity.to_string().as_bytes());
        hex::encode(&digest[..8])
    }

    fn path(&self, stage: &str, key: &str) -> PathBuf {
        self.dir.join(format!("{stage}-{key}.json"))
    }

    /// The stored stage, if any. One that cannot be read or parsed (a
    /// file cut short, or written by another version) is reported with its
    /// path and why, and the stage runs again (its result then replaces
    /// the file).
    fn load<T: serde::de::DeserializeOwned>(&self, stage: &str, key: &str) -> Option<T> {
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

    fn store(&self, stage: &str, key: &str, value: &impl Serialize) -> Result<(), MasaiError> {
        write_artifact(&self.dir, &format!("{stage}-{key}"), value)
    }
}

/// Where code indexes are cached: `index` in [`crate::dirs::cache_dir`].
pub fn index_cache_dir() -> PathBuf {
    crate::dirs::cache_dir().join("index")
}

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

struct Context<'a> {
    backend: &'a dyn Backend,
    settings: &'a Settings,
    ws: &'a Workspace,
    env: &'a TaskEnv,
    index: CodeIndex,
}

impl Context<'_> {
    fn interface(&self) -> Result<Aci, MasaiError> {
        Ok(Aci::new(
            self.ws.path(),
            self.ws.base_commit(),
            self.index.clone(),
            self.settings.aci.settings(),
            self.env.clone(),
        ))
    }

    /// Runs one ReAct agent, then puts the workspace back.
    fn episode(
        &self,
        agent: &Agent<'_>,
        aci: &mut Aci,
        agent_settings: &AgentSettings,
        trajectory: &mut Trajectory,
    ) -> Result<EpisodeSummary, MasaiError> {
        let react = react::ReactSettings {
            max_steps: agent_settings.max_steps,
            ..self.settings.react
        };
        let sampling = Sampling {
            temperature: agent_settings.temperature,
            ..self.settings.sampling.clone()
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
        crate::repo::reset_worktree(self.ws.path())?;
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

    fn test_stage(
        &self,
        agent: &Agent<'_>,
        check: TestCheck,
        agent_settings: &AgentSettings,
        trajectory: &mut Trajectory,
    ) -> Result<TestArtifact, MasaiError> {
        let mut aci = self.interface()?;
        aci.set_test_check(check);
        let episode = self.episode(agent, &mut aci, agent_settings, trajectory)?;
        Ok(TestArtifact::agent(episode, aci.submitted_test().cloned()))
    }

    /// The test template: the located code's existing test file when one
    /// passes, else the ReAct agent's.
    fn template_stage(
        &self,
        issue: &Issue,
        locations: &[Location],
        trajectory: &mut Trajectory,
    ) -> Result<TestArtifact, MasaiError> {
        let all = crate::index::python_files(self.ws.path()).unwrap_or_default();
        let (test, existing) = template::existing(
            self.ws.path(),
            &all,
            locations,
            self.env,
            self.settings.aci.run_timeout_s,
        );
        for t in &existing {
            tracing::info!("  test template: existing {}: {}", t.path, t.verdict);
        }
        if test.is_some() {
            return Ok(TestArtifact {
                episode: None,
                test,
                source: TestSource::Existing,
                existing,
                samples: Vec::new(),
                chosen: None,
            });
        }
        let test_cmd = self.env.spec().map(|s| s.test_cmd.as_str());
        let mut a = self.test_stage(
            &agent_defs::test_template(issue, test_cmd),
            TestCheck::Passes,
            &self.settings.agents.test_template,
            trajectory,
        )?;
        a.existing = existing;
        Ok(a)
    }

    /// The reproduction test: sampled candidates or the ReAct agent, as
    /// `[reproducer] mode` says.
    fn reproduce_stage(
        &self,
        issue: &Issue,
        locations: &[Location],
        template: Option<&SubmittedTest>,
        scratch: &Path,
        trajectory: &mut Trajectory,
    ) -> Result<TestArtifact, MasaiError> {
        let settings = &self.settings.reproducer;
        if settings.mode == ReproducerMode::React {
            // The agent sees the template's imports and first tests, not a
            // whole existing file.
            let shown = template.map(|t| SubmittedTest {
                text: reproduce::excerpt(&t.path, &t.text, reproduce::EXCERPT_TESTS),
                ..t.clone()
            });
            let test_cmd = self.env.spec().map(|s| s.test_cmd.as_str());
            return self.test_stage(
                &agent_defs::reproducer(issue, shown.as_ref(), test_cmd),
                TestCheck::Fails,
                &self.settings.agents.reproducer,
                trajectory,
            );
        }
        let mut conversation = self
            .backend
            .conversation(settings.candidates.max(1), settings.max_tokens as usize)?;
        let r = reproduce::run(
            conversation.as_mut(),
            issue,
            &reproduce::Inputs {
                ws: self.ws,
                env: self.env,
                locations,
                template,
                scratch,
                timeout_s: self.settings.aci.run_timeout_s,
            },
            settings,
            &self.settings.sampling,
            trajectory,
        )?;
        Ok(TestArtifact {
            episode: None,
            test: r.test,
            source: TestSource::Sample,
            existing: Vec::new(),
            samples: r.samples,
            chosen: r.chosen,
        })
    }
}

/// Runs the pipeline on `issue` in `ws`; artifacts go to `artifacts`,
/// scratch worktrees under `scratch`. Returns the outcome (its `patch` is
/// empty when no candidate survived).
#[allow(clippy::too_many_arguments)]
pub fn run(
    backend: &dyn Backend,
    settings: &Settings,
    issue: &Issue,
    ws: &Workspace,
    env: &TaskEnv,
    dirs: &Dirs,
    trajectory: &mut Trajectory,
) -> Result<Outcome, MasaiError> {
    let id = &issue.instance_id;
    let artifacts = dirs.artifacts.as_path();
    let scratch = dirs.scratch.as_path();
    let shared = dirs
        .shared
        .as_ref()
        .map(|d| SharedStages { dir: d.join(id) });
    // A ReAct stage from the shared stages when one matches, else run (and
    // stored for the next run).
    macro_rules! shared_stage {
        ($stage:expr, $agent:expr, $before:expr, $run:expr) => {{
            let key = SharedStages::key(settings, $stage, $agent, $before);
            match shared.as_ref().and_then(|s| s.load(&$stage, &key)) {
                Some(artifact) => {
                    let from = shared
                        .as_ref()
                        .map(|s| s.path($stage, &key).display().to_string())
                        .unwrap_or_default();
                    tracing::info!("{id}: {} taken from {from}", $stage);
                    trajectory.record(Step::Reused {
                        stage: $stage.to_string(),
                        from,
                    });
                    artifact
                }
                None => {
                    let artifact = $run;
                    if let Some(s) = &shared {
                        s.store($stage, &key, &artifact)?;
                    }
                    artifact
                }
            }
        }};
    }
    let (index, cached) =
        CodeIndex::load_or_build(ws.path(), &index_cache_dir(), &issue.repo, ws.base_commit())?;
    tracing::info!(
        "{id}: code index {} ({} files, {} symbols)",
        if cached { "from cache" } else { "built" },
        index.files.len(),
        index.symbol_count()
    );
    let cx = Context {
        backend,
        settings,
        ws,
        env,
        index,
    };
    let stages = &settings.pipeline;
    let agents = &settings.agents;

    tracing::info!("{id}: stage 1/5, edit localizer");
    trajectory.stage("localize");
    let localizer = &settings.localizer;
    let mut locations: LocationsArtifact =
        shared_stage!("localize", &agents.localizer, Some(localizer), {
            let ranked =
                candidates::rank(&cx.index, ws.path(), &issue.problem_statement).candidates;
            match localizer.mode {
                LocalizerMode::Choose => {
                    let mut conversation =
                        backend.conversation(1, localize::REPLY_TOKENS as usize)?;
                    let choice = localize::choose(
                        conversation.as_mut(),
                        issue,
                        &cx.index,
                        &ranked,
                        localizer,
                        &settings.sampling,
                        trajectory,
                    )?;
                    tracing::info!(
                        "  localizer: {} location(s) from the {} among {} candidates",
                        choice.locations.len(),
                        choice.source,
                        choice.shown.len()
                    );
                    LocationsArtifact {
                        episode: None,
                        source: choice.source,
                        locations: choice.locations,
                        candidates: choice.shown,
                        traceback: None,
                    }
                }
                LocalizerMode::React => {
                    let mut aci = cx.interface()?;
                    let episode = cx.episode(
                        &agent_defs::localizer(issue),
                        &mut aci,
                        &agents.localizer,
                        trajectory,
                    )?;
                    let mut locations = LocationsArtifact {
                        episode: Some(episode),
                        source: "localizer".into(),
                        locations: aci.locations().to_vec(),
                        candidates: ranked.iter().take(localizer.candidates).cloned().collect(),
                        traceback: None,
                    };
                    if locations.locations.is_empty() {
                        locations.source = "index".into();
                        locations.locations = localize::fallback(&ranked);
                    }
                    locations
                }
            }
        });
    write_artifact(artifacts, "locations", &locations)?;

    let template = if stages.template {
        tracing::info!("{id}: stage 2/5, test template");
        trajectory.stage("template");
        let a: TestArtifact = shared_stage!(
            "template",
            &agents.test_template,
            Some(&locations.locations),
            cx.template_stage(issue, &locations.locations, trajectory)?
        );
        write_artifact(artifacts, "template", &a)?;
        Some(a)
    } else {
        None
    };

    let reproduction = if stages.reproduce {
        tracing::info!(
            "{id}: stage 3/5, issue reproducer ({})",
            match settings.reproducer.mode {
                ReproducerMode::Sample => format!(
                    "{} sampled candidates",
                    settings.reproducer.candidates.max(1)
                ),
                ReproducerMode::React => "agent".to_string(),
            }
        );
        trajectory.stage("reproduce");
        let t = template.as_ref().and_then(|t| t.test.as_ref());
        let own = match settings.reproducer.mode {
            ReproducerMode::Sample => serde_json::json!(settings.reproducer),
            ReproducerMode::React => serde_json::json!({
                "mode": settings.reproducer.mode,
                "agent": agents.reproducer,
            }),
        };
        let a: TestArtifact = shared_stage!(
            "reproduce",
            &own,
            Some(&(&locations.locations, t)),
            cx.reproduce_stage(issue, &locations.locations, t, scratch, trajectory)?
        );
        write_artifact(artifacts, "reproduction", &a)?;
        Some(a)
    } else {
        None
    };

    let test = reproduction.as_ref().and_then(|a| a.test.as_ref());
    // The accepted test's traceback confirms the location, or corrects it.
    if let Some(t) = test {
        let files: Vec<String> = cx.index.files.iter().map(|f| f.path.clone()).collect();
        if let Some(found) = crate::agents::evidence::traceback_location(
            ws.path(),
            &files,
            &t.output,
            &t.path,
            &locations.locations,
        ) {
            tracing::info!(
                "  the reproduction's traceback ends in {}::{}, which no location covers: added",
                found.path,
                found.symbol
            );
            locations.locations.insert(0, found.clone());
            locations.traceback = Some(found);
            write_artifact(artifacts, "locations", &locations)?;
        }
    }

    tracing::info!(
        "{id}: stage 4/5, fixer ({} candidates from {} location(s), {} round(s) at most)",
        settings.fixer.candidates,
        locations.locations.len(),
        if test.is_some() {
            settings.fixer.rounds.max(1)
        } else {
            1
        }
    );
    trajectory.stage("fix");
    let fixes = {
        let mut conversation = backend.conversation(
            settings.fixer.candidates.max(1),
            settings.fixer.max_tokens as usize,
        )?;
        crate::agents::repair::run(
            conversation.as_mut(),
            ws,
            env,
            issue,
            &locations.locations,
            test,
            &settings.fixer,
            &settings.sampling,
            scratch,
            settings.ranker.test_timeout_s,
            trajectory,
        )?
    };
    write_artifact(artifacts, "fixes", &fixes)?;
    tracing::info!(
        "  fixer: {} generated, {} applied, {} parse, {} distinct",
        fixes.generated(),
        fixes.applied(),
        fixes.parsed(),
        fixes.distinct.len()
    );

    let (ranking, chosen) = if fixes.distinct.is_empty() {
        tracing::info!("{id}: stage 5/5, ranker: no candidate survived, nothing to rank");
        (None, None)
    } else if stages.rank {
        tracing::info!(
            "{id}: stage 5/5, ranker ({} distinct candidates)",
            fixes.distinct.len()
        );
        trajectory.stage("rank");
        let mut conversation = backend.conversation(1, 0)?;
        let r = ranker::rank(
            conversation.as_mut(),
            ws,
            issue,
            &fixes,
            reproduction.as_ref().and_then(|a| a.test.as_ref()),
            env,
            &settings.ranker,
            &settings.sampling,
            scratch,
            trajectory,
        )?;
        write_artifact(artifacts, "ranking", &r)?;
        let chosen = r.order.first().copied();
        (Some(r), chosen)
    } else {
        tracing::info!(
            "{id}: stage 5/5, ranker switched off: the first distinct candidate is taken"
        );
        (None, Some(0))
    };
    let patch = chosen
        .and_then(|i| fixes.distinct.get(i))
        .map(|d| d.patch.clone())
        .unwrap_or_default();
    Ok(Outcome {
        patch,
        template,
        reproduction,
        locations,
        fixes,
        ranking,
        chosen,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_share_stages_when_only_later_stages_settings_differ(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let base = Settings::defaults("m");
        let with =
            |key: &str, value: toml::Value| -> Result<Settings, Box<dyn std::error::Error>> {
                let set: crate::config::SetArg = format!("{key}={value}").parse()?;
                Ok(Settings::with_table(&base, set.table())?)
            };
        let cases = [
            ("fixer.temperature", toml::Value::from(0.8), true),
            ("fixer.candidates", 2.into(), true),
            ("ranker.compare", false.into(), true),
            ("agents.localizer.max_steps", 3.into(), false),
            ("reproducer.candidates", 2.into(), false),
            ("aci.window", 30.into(), false),
            ("model", "other".into(), false),
        ];
        for (key, value, shared) in cases {
            let other = with(key, value)?;
            assert_eq!(shares_stages(&base, &other), shared, "{key}");
        }
        let first = with("pipeline.kind", "first".into())?;
        assert!(
            !shares_stages(&first, &first),
            "the first pipeline stores no stage"
        );
        Ok(())
    }

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
