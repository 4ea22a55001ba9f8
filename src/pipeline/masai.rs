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

pub use super::stage::MasaiError;
use super::stage::{write_artifact, Chain, EpisodeSettings, SettingsKeys, Stage, StageContext};
use crate::aci::{Location, SubmittedTest, TestCheck};
use crate::agents::fixer::{self, Fixes};
use crate::agents::localize::{self, LocalizerMode, LocalizerSettings};
use crate::agents::ranker::{self, RankerSettings, Ranking};
use crate::agents::react::Agent;
use crate::agents::reproduce::{self, ReproducerMode, ReproducerSettings};
use crate::agents::template;
use crate::agents::workplace::Workplace;
use crate::agents::{self as agent_defs};
use crate::config::Settings;
use crate::dataset::Issue;
use crate::engine::{Backend, Sampling};
use crate::env::task::TaskEnv;
use crate::index::candidates::{self, Candidate};
use crate::index::symbols::CodeIndex;
use crate::record::trajectory::EpisodeSummary;
use crate::repo::Workspace;
use crate::trajectory::Trajectory;

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
    /// Sample mode: the other accepted reproduction tests, by which the
    /// candidates are judged too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_tests: Vec<SubmittedTest>,
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
            other_tests: Vec::new(),
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
    /// The location sets after `locations` that the Fixer's candidates are
    /// spread over (`[localizer] sets`); empty with one set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_sets: Vec<Vec<Location>>,
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
/// settings `a` stores (the same task): both run the MASAI pipeline and
/// their shared stages' keys ([`stage_keys`]) are equal. `slurm sweep`
/// starts such a point's elements after the earlier point's.
pub fn shares_stages(a: &Settings, b: &Settings) -> bool {
    let masai = |s: &Settings| s.pipeline.kind == crate::config::Kind::Masai;
    let shared = |s: &Settings| -> Vec<String> {
        stage_keys(s)
            .into_iter()
            .filter(|(_, shared, _)| *shared)
            .map(|(_, _, key)| key)
            .collect()
    };
    masai(a) && masai(b) && shared(a) == shared(b)
}

/// The keys of the five stages from the settings alone, in order:
/// (stage, shared, key). A stage's key changes with its own settings and
/// with every key before it.
pub fn stage_keys(settings: &Settings) -> Vec<(&'static str, bool, String)> {
    let on = &settings.pipeline;
    SettingsKeys::new(settings)
        .then::<Localize>(true)
        .then::<Template>(on.template)
        .then::<Reproduce>(on.reproduce)
        .then::<Fix>(true)
        .then::<Rank>(on.rank)
        .keys
}

/// Where code indexes are cached: `index` in [`crate::dirs::cache_dir`].
pub fn index_cache_dir() -> PathBuf {
    crate::dirs::cache_dir().join("index")
}

/// Stage 1, the Edit Localizer: the code index's ranked candidates, and
/// the model's choice among them (or the ReAct agent's locations).
pub struct Localize;

/// The Localizer's settings: its own, and the agent's in `react` mode.
#[derive(Debug, Clone, Serialize)]
pub enum LocalizeSettings {
    Choose {
        localizer: LocalizerSettings,
        sampling: Sampling,
    },
    React {
        localizer: LocalizerSettings,
        episode: EpisodeSettings,
    },
}

impl Stage for Localize {
    const NAME: &'static str = "localize";
    const NUMBER: usize = 1;
    const ARTIFACT: &'static str = "locations";
    const SHARED: bool = true;
    type Settings = LocalizeSettings;
    type Input<'i> = ();
    type Output = LocationsArtifact;

    fn settings(all: &Settings) -> LocalizeSettings {
        let localizer = all.localizer.clone();
        match localizer.mode {
            LocalizerMode::Choose => LocalizeSettings::Choose {
                localizer,
                sampling: all.sampling.clone(),
            },
            LocalizerMode::React => LocalizeSettings::React {
                localizer,
                episode: EpisodeSettings::of(all, &all.agents.localizer),
            },
        }
    }

    fn announce(_: &LocalizeSettings, _: &()) -> String {
        "edit localizer".into()
    }

    fn run(
        cx: &StageContext<'_>,
        settings: &LocalizeSettings,
        _: (),
        trajectory: &mut Trajectory,
    ) -> Result<LocationsArtifact, MasaiError> {
        let issue = cx.task.issue;
        let ranked =
            candidates::rank(&cx.index, cx.task.ws.path(), &issue.problem_statement).candidates;
        match settings {
            LocalizeSettings::Choose {
                localizer,
                sampling,
            } => {
                let mut conversation = cx.backend.conversation(
                    localizer.sets.clamp(1, localize::SETS_LIMIT),
                    localize::REPLY_TOKENS as usize,
                )?;
                let choice = localize::choose(
                    conversation.as_mut(),
                    issue,
                    &cx.index,
                    &ranked,
                    localizer,
                    sampling,
                    trajectory,
                )?;
                tracing::info!(
                    "  localizer: {} location(s) from the {} among {} candidates",
                    choice.locations.len(),
                    choice.source,
                    choice.shown.len()
                );
                Ok(LocationsArtifact {
                    episode: None,
                    source: choice.source,
                    locations: choice.locations,
                    other_sets: choice.other_sets,
                    candidates: choice.shown,
                    traceback: None,
                })
            }
            LocalizeSettings::React { localizer, episode } => {
                let mut aci = cx.interface(&episode.aci);
                let summary =
                    cx.episode(&agent_defs::localizer(issue), &mut aci, episode, trajectory)?;
                let mut locations = LocationsArtifact {
                    episode: Some(summary),
                    source: "localizer".into(),
                    locations: aci.locations().to_vec(),
                    other_sets: Vec::new(),
                    candidates: ranked.iter().take(localizer.candidates).cloned().collect(),
                    traceback: None,
                };
                if locations.locations.is_empty() {
                    locations.source = "index".into();
                    locations.locations = localize::fallback(&ranked);
                }
                Ok(locations)
            }
        }
    }
}

/// Stage 2, the Test Template Generator: the located code's existing test
/// file when one passes, else the ReAct agent's.
pub struct Template;

impl Stage for Template {
    const NAME: &'static str = "template";
    const NUMBER: usize = 2;
    const ARTIFACT: &'static str = "template";
    const SHARED: bool = true;
    type Settings = EpisodeSettings;
    type Input<'i> = &'i [Location];
    type Output = TestArtifact;

    fn settings(all: &Settings) -> EpisodeSettings {
        EpisodeSettings::of(all, &all.agents.test_template)
    }

    fn announce(_: &EpisodeSettings, _: &&[Location]) -> String {
        "test template".into()
    }

    fn run(
        cx: &StageContext<'_>,
        settings: &EpisodeSettings,
        locations: &[Location],
        trajectory: &mut Trajectory,
    ) -> Result<TestArtifact, MasaiError> {
        let Workplace { issue, ws, env, .. } = cx.task;
        let all = crate::index::python_files(ws.path()).unwrap_or_default();
        let (test, existing) =
            template::existing(ws.path(), &all, locations, env, settings.aci.run_timeout_s);
        for t in &existing {
            tracing::info!("  test template: existing {}: {}", t.path, t.verdict);
        }
        if test.is_some() {
            return Ok(TestArtifact {
                episode: None,
                test,
                other_tests: Vec::new(),
                source: TestSource::Existing,
                existing,
                samples: Vec::new(),
                chosen: None,
            });
        }
        let test_cmd = env.spec().map(|s| s.test_cmd.as_str());
        let agent = agent_defs::test_template(issue, test_cmd);
        let mut a = test_episode(cx, &agent, TestCheck::Passes, settings, trajectory)?;
        a.existing = existing;
        Ok(a)
    }
}

/// A test stage's ReAct agent: its episode and the test it handed in.
fn test_episode(
    cx: &StageContext<'_>,
    agent: &Agent<'_>,
    check: TestCheck,
    settings: &EpisodeSettings,
    trajectory: &mut Trajectory,
) -> Result<TestArtifact, MasaiError> {
    let mut aci = cx.interface(&settings.aci);
    aci.set_test_check(check);
    let episode = cx.episode(agent, &mut aci, settings, trajectory)?;
    Ok(TestArtifact::agent(episode, aci.submitted_test().cloned()))
}

/// Stage 3, the Issue Reproducer: sampled candidates or the ReAct agent,
/// as `[reproducer] mode` says.
pub struct Reproduce;

/// The Reproducer's settings, by mode.
#[derive(Debug, Clone, Serialize)]
pub enum ReproduceSettings {
    Sample {
        reproducer: ReproducerSettings,
        sampling: Sampling,
        /// The limit of one test run.
        run_timeout_s: u64,
    },
    React {
        episode: EpisodeSettings,
    },
}

/// What the Reproducer is given: the located spans and the template's
/// test.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReproduceInput<'a> {
    pub locations: &'a [Location],
    pub template: Option<&'a SubmittedTest>,
}

impl Stage for Reproduce {
    const NAME: &'static str = "reproduce";
    const NUMBER: usize = 3;
    const ARTIFACT: &'static str = "reproduction";
    const SHARED: bool = true;
    type Settings = ReproduceSettings;
    type Input<'i> = ReproduceInput<'i>;
    type Output = TestArtifact;

    fn settings(all: &Settings) -> ReproduceSettings {
        match all.reproducer.mode {
            ReproducerMode::Sample => ReproduceSettings::Sample {
                reproducer: all.reproducer.clone(),
                sampling: all.sampling.clone(),
                run_timeout_s: all.aci.run_timeout_s,
            },
            ReproducerMode::React => ReproduceSettings::React {
                episode: EpisodeSettings::of(all, &all.agents.reproducer),
            },
        }
    }

    fn announce(settings: &ReproduceSettings, _: &ReproduceInput<'_>) -> String {
        match settings {
            ReproduceSettings::Sample { reproducer, .. } => format!(
                "issue reproducer ({} sampled candidates)",
                reproducer.candidates.max(1)
            ),
            ReproduceSettings::React { .. } => "issue reproducer (agent)".into(),
        }
    }

    fn run(
        cx: &StageContext<'_>,
        settings: &ReproduceSettings,
        input: ReproduceInput<'_>,
        trajectory: &mut Trajectory,
    ) -> Result<TestArtifact, MasaiError> {
        let Workplace {
            issue,
            ws,
            env,
            scratch,
            parallel_runs,
        } = cx.task;
        let (reproducer, sampling, timeout_s) = match settings {
            ReproduceSettings::React { episode } => {
                // The agent sees the template's imports and first tests,
                // not a whole existing file.
                let shown = input.template.map(|t| SubmittedTest {
                    text: reproduce::excerpt(&t.path, &t.text, reproduce::EXCERPT_TESTS),
                    ..t.clone()
                });
                let test_cmd = env.spec().map(|s| s.test_cmd.as_str());
                let agent = agent_defs::reproducer(issue, shown.as_ref(), test_cmd);
                return test_episode(cx, &agent, TestCheck::Fails, episode, trajectory);
            }
            ReproduceSettings::Sample {
                reproducer,
                sampling,
                run_timeout_s,
            } => (reproducer, sampling, *run_timeout_s),
        };
        let mut conversation = cx
            .backend
            .conversation(reproducer.candidates.max(1), reproducer.max_tokens as usize)?;
        let r = reproduce::run(
            conversation.as_mut(),
            issue,
            &reproduce::Inputs {
                ws,
                env,
                locations: input.locations,
                template: input.template,
                scratch,
                timeout_s,
                parallel_runs,
            },
            reproducer,
            sampling,
            trajectory,
        )?;
        Ok(TestArtifact {
            episode: None,
            test: r.test,
            other_tests: r.others,
            source: TestSource::Sample,
            existing: Vec::new(),
            samples: r.samples,
            chosen: r.chosen,
        })
    }
}

/// Stage 4, the Fixer: candidates in rounds, judged by the reproduction
/// test ([`fixer::run`]).
pub struct Fix;

/// The Fixer's settings: its own, the sampling, and the limit of one test
/// run when candidates are judged.
#[derive(Debug, Clone, Serialize)]
pub struct FixSettings {
    pub fixer: fixer::FixerSettings,
    pub sampling: Sampling,
    pub test_timeout_s: u64,
}

impl Stage for Fix {
    const NAME: &'static str = "fix";
    const NUMBER: usize = 4;
    const ARTIFACT: &'static str = "fixes";
    const SHARED: bool = false;
    type Settings = FixSettings;
    type Input<'i> = fixer::Inputs<'i>;
    type Output = Fixes;

    fn settings(all: &Settings) -> FixSettings {
        FixSettings {
            fixer: all.fixer.clone(),
            sampling: all.sampling.clone(),
            test_timeout_s: all.ranker.test_timeout_s,
        }
    }

    fn announce(settings: &FixSettings, input: &fixer::Inputs<'_>) -> String {
        format!(
            "fixer ({} candidates from {} location(s) in {} set(s), {} round(s) at most)",
            settings.fixer.candidates,
            input.location_sets.first().map_or(0, Vec::len),
            input.location_sets.len(),
            if input.test.is_some() {
                settings.fixer.rounds.max(1)
            } else {
                1
            }
        )
    }

    fn run(
        cx: &StageContext<'_>,
        settings: &FixSettings,
        input: fixer::Inputs<'_>,
        trajectory: &mut Trajectory,
    ) -> Result<Fixes, MasaiError> {
        let mut conversation = cx.backend.conversation(
            settings.fixer.candidates.max(1),
            settings.fixer.max_tokens as usize,
        )?;
        let fixes = fixer::run(
            conversation.as_mut(),
            &cx.task,
            input,
            &settings.fixer,
            &settings.sampling,
            settings.test_timeout_s,
            trajectory,
        )?;
        tracing::info!(
            "  fixer: {} generated, {} applied, {} parse, {} distinct",
            fixes.generated(),
            fixes.applied(),
            fixes.parsed(),
            fixes.distinct.len()
        );
        Ok(fixes)
    }
}

/// Stage 5, the Ranker: every distinct candidate tried, then ordered.
pub struct Rank;

/// The Ranker's settings: its own and the sampling.
#[derive(Debug, Clone, Serialize)]
pub struct RankSettings {
    pub ranker: RankerSettings,
    pub sampling: Sampling,
}

/// What the Ranker is given: the Fixer's candidates and the accepted
/// reproduction test.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RankInput<'a> {
    pub fixes: &'a Fixes,
    pub test: Option<&'a SubmittedTest>,
    pub other_tests: &'a [SubmittedTest],
}

impl Stage for Rank {
    const NAME: &'static str = "rank";
    const NUMBER: usize = 5;
    const ARTIFACT: &'static str = "ranking";
    const SHARED: bool = false;
    type Settings = RankSettings;
    type Input<'i> = RankInput<'i>;
    type Output = Ranking;

    fn settings(all: &Settings) -> RankSettings {
        RankSettings {
            ranker: all.ranker.clone(),
            sampling: all.sampling.clone(),
        }
    }

    fn announce(_: &RankSettings, input: &RankInput<'_>) -> String {
        format!(
            "ranker ({} distinct candidates)",
            input.fixes.distinct.len()
        )
    }

    fn run(
        cx: &StageContext<'_>,
        settings: &RankSettings,
        input: RankInput<'_>,
        trajectory: &mut Trajectory,
    ) -> Result<Ranking, MasaiError> {
        let mut conversation = cx.backend.conversation(1, 0)?;
        Ok(ranker::rank(
            conversation.as_mut(),
            &cx.task,
            input.fixes,
            ranker::Tests {
                reproduction: input.test,
                others: input.other_tests,
            },
            &settings.ranker,
            &settings.sampling,
            trajectory,
        )?)
    }
}

/// The accepted test's traceback confirms the location, or corrects it:
/// the function where it ends goes first when no location covers it.
fn confirm_location(
    cx: &StageContext<'_>,
    test: &SubmittedTest,
    locations: &mut LocationsArtifact,
    artifacts: &Path,
) -> Result<(), MasaiError> {
    let files: Vec<String> = cx.index.files.iter().map(|f| f.path.clone()).collect();
    let Some(found) = crate::agents::evidence::traceback_location(
        cx.task.ws.path(),
        &files,
        &test.output,
        &test.path,
        &locations.locations,
    ) else {
        return Ok(());
    };
    tracing::info!(
        "  the reproduction's traceback ends in {}::{}, which no location covers: added",
        found.path,
        found.symbol
    );
    locations.locations.insert(0, found.clone());
    for set in &mut locations.other_sets {
        if !set.contains(&found) {
            set.insert(0, found.clone());
        }
    }
    locations.traceback = Some(found);
    write_artifact(artifacts, Localize::ARTIFACT, locations)
}

/// Runs the pipeline on `issue` in `ws`; artifacts go to `dirs.artifacts`,
/// scratch worktrees under `dirs.scratch`. Returns the outcome (its
/// `patch` is empty when no candidate survived).
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
    let (index, cached) =
        CodeIndex::load_or_build(ws.path(), &index_cache_dir(), &issue.repo, ws.base_commit())?;
    tracing::info!(
        "{id}: code index {} ({} files, {} symbols)",
        if cached { "from cache" } else { "built" },
        index.files.len(),
        index.symbol_count()
    );
    let task = Workplace {
        issue,
        ws,
        env,
        scratch: &dirs.scratch,
        parallel_runs: settings.pipeline.parallel_runs,
    };
    let cx = StageContext {
        backend,
        task,
        index,
    };
    let on = &settings.pipeline;
    let mut chain = Chain::new(id, settings, &dirs.artifacts, dirs.shared.as_deref());
    let mut locations = chain.run::<Localize>(&cx, (), trajectory)?;
    let template = chain.run_if::<Template>(on.template, &cx, &locations.locations, trajectory)?;
    let input = ReproduceInput {
        locations: &locations.locations,
        template: template.as_ref().and_then(|t| t.test.as_ref()),
    };
    let reproduction = chain.run_if::<Reproduce>(on.reproduce, &cx, input, trajectory)?;
    let test = reproduction.as_ref().and_then(|a| a.test.as_ref());
    if let Some(t) = test {
        confirm_location(&cx, t, &mut locations, &dirs.artifacts)?;
    }
    let sets: Vec<Vec<Location>> = std::iter::once(locations.locations.clone())
        .chain(locations.other_sets.iter().cloned())
        .collect();
    let other_tests = reproduction
        .as_ref()
        .map_or(&[][..], |a| &a.other_tests[..]);
    let input = fixer::Inputs {
        location_sets: &sets,
        test,
        other_tests,
    };
    let fixes = chain.run::<Fix>(&cx, input, trajectory)?;
    let (ranking, chosen) = if fixes.distinct.is_empty() {
        tracing::info!("{id}: stage 5/5, ranker: no candidate survived, nothing to rank");
        (None, None)
    } else if on.rank {
        let input = RankInput {
            fixes: &fixes,
            test,
            other_tests,
        };
        let r = chain.run::<Rank>(&cx, input, trajectory)?;
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
    use super::super::stage::common;
    use super::*;

    type Error = Box<dyn std::error::Error>;

    fn with(base: &Settings, key: &str, value: toml::Value) -> Result<Settings, Error> {
        let set: crate::config::SetArg = format!("{key}={value}").parse()?;
        Ok(Settings::with_table(base, set.table())?)
    }

    /// Which of the five stages' keys (localize, template, reproduce,
    /// fix, rank) differ between `a` and `b`.
    fn rerun(a: &Settings, b: &Settings) -> Vec<&'static str> {
        stage_keys(a)
            .into_iter()
            .zip(stage_keys(b))
            .filter(|(x, y)| x.2 != y.2)
            .map(|(x, _)| x.0)
            .collect()
    }

    #[test]
    fn a_setting_reruns_its_stage_and_every_stage_after_it() -> Result<(), Error> {
        let base = Settings::defaults("m");
        let all = ["localize", "template", "reproduce", "fix", "rank"];
        let cases: [(&str, toml::Value, &[&str]); 12] = [
            ("ranker.compare", false.into(), &all[4..]),
            ("ranker.test_timeout_s", 60.into(), &all[3..]),
            ("fixer.temperature", 0.5.into(), &all[3..]),
            ("fixer.candidates", 2.into(), &all[3..]),
            ("reproducer.candidates", 2.into(), &all[2..]),
            ("reproducer.max_tokens", 100.into(), &all[2..]),
            ("agents.test_template.max_steps", 3.into(), &all[1..]),
            ("aci.window", 30.into(), &all[1..]),
            ("localizer.candidates", 3.into(), &all[..]),
            ("sampling.seed", 3.into(), &all[..]),
            ("model", "other".into(), &all[..]),
            ("pipeline.rank", false.into(), &all[4..]),
        ];
        for (key, value, want) in cases {
            let other = with(&base, key, value)?;
            assert_eq!(rerun(&base, &other), want, "{key}");
        }
        // The localizer's agent is read only in `react` mode.
        let react = with(&base, "localizer.mode", "react".into())?;
        let cases: [(&Settings, &[&str]); 2] = [(&base, &[]), (&react, &all[..])];
        for (settings, want) in cases {
            let other = with(settings, "agents.localizer.max_steps", 3.into())?;
            assert_eq!(
                rerun(settings, &other),
                want,
                "{:?}",
                settings.localizer.mode
            );
        }
        Ok(())
    }

    /// Every value of the settings, by its path in their JSON.
    fn leaves(value: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    leaves(v, &format!("{path}/{k}"), out);
                }
            }
            _ => out.push(path.to_string()),
        }
    }

    /// Another value of the same type (`None` for what has no other).
    fn changed(value: &serde_json::Value) -> Option<serde_json::Value> {
        use serde_json::Value as V;
        match value {
            V::Bool(b) => Some(V::Bool(!b)),
            V::Number(n) if n.is_u64() => Some(V::from(n.as_u64()? + 1)),
            V::Number(n) => Some(V::from(n.as_f64()? + 0.25)),
            V::String(s) => Some(V::String(format!("{s}x"))),
            _ => None,
        }
    }

    /// Over every setting: when a stage's slice changes, its key and every
    /// key after it change; when no slice up to a stage changes, its key
    /// does not. A key left out of the chain, or a slice left out of a
    /// key, fails here.
    #[test]
    fn every_setting_a_stage_reads_is_in_its_key() -> Result<(), Error> {
        let base = Settings::defaults("m");
        let json = serde_json::to_value(&base)?;
        let mut paths = Vec::new();
        leaves(&json, "", &mut paths);
        // What each stage reads (its slice, and whether it runs), with
        // what every stage's run is made from counted in the first.
        let slices = |s: &Settings| -> Result<Vec<serde_json::Value>, Error> {
            let on = &s.pipeline;
            Ok(vec![
                serde_json::json!([common(s), Localize::settings(s)]),
                serde_json::json!([on.template, Template::settings(s)]),
                serde_json::json!([on.reproduce, Reproduce::settings(s)]),
                serde_json::to_value(Fix::settings(s))?,
                serde_json::json!([on.rank, Rank::settings(s)]),
            ])
        };
        let before = slices(&base)?;
        let mut tried = 0;
        for path in &paths {
            let mut other = json.clone();
            let Some(leaf) = other.pointer_mut(path) else {
                continue;
            };
            let Some(value) = changed(leaf) else {
                continue;
            };
            *leaf = value;
            // A value the settings do not accept (an enum's name) is no
            // setting a run can have.
            let Ok(settings) = serde_json::from_value::<Settings>(other) else {
                continue;
            };
            tried += 1;
            let after = slices(&settings)?;
            let keys = rerun(&base, &settings);
            let first = before.iter().zip(&after).position(|(a, b)| a != b);
            let want: Vec<&str> = match first {
                Some(i) => ["localize", "template", "reproduce", "fix", "rank"][i..].to_vec(),
                None => Vec::new(),
            };
            assert_eq!(keys, want, "{path}");
        }
        assert!(tried > 30, "only {tried} settings were changed");
        Ok(())
    }

    #[test]
    fn points_share_stages_when_only_later_stages_settings_differ() -> Result<(), Error> {
        let base = Settings::defaults("m");
        let cases = [
            ("fixer.temperature", toml::Value::from(0.8), true),
            ("fixer.candidates", 2.into(), true),
            ("ranker.compare", false.into(), true),
            ("pipeline.rank", false.into(), true),
            ("reproducer.candidates", 2.into(), false),
            ("aci.window", 30.into(), false),
            ("model", "other".into(), false),
        ];
        for (key, value, shared) in cases {
            let other = with(&base, key, value)?;
            assert_eq!(shares_stages(&base, &other), shared, "{key}");
        }
        let first = with(&base, "pipeline.kind", "first".into())?;
        assert!(
            !shares_stages(&first, &first),
            "the first pipeline stores no stage"
        );
        Ok(())
    }
}
