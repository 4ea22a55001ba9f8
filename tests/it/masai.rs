//! The MASAI pipeline end to end on a demo task: all five stages with a
//! scripted model (recorded, then replayed from the trajectory to the same
//! outcome) — the template from the located module's existing test file
//! without the model, the reproduction by the ReAct agent and by sampling
//! — the ranking order, and the fallback without a reproduction test,
//! where agreement and then the model's comparison decide.

use crate::common;

use std::path::{Path, PathBuf};

use common::Scripted;
use patchwright::agents::reproduce::{ReproducerMode, SampleStatus};
use patchwright::config::Settings;
use patchwright::dataset::Task;
use patchwright::engine::Backend;
use patchwright::env::task::TaskEnv;
use patchwright::pipeline::{masai, metrics};
use patchwright::record::trajectory::{ModelCall, Step};
use patchwright::repo::{Repos, Workspace};
use patchwright::trajectory::replay::ReplayBackend;
use patchwright::trajectory::Trajectory;

fn task(id: &str) -> Task {
    common::demo_task(id)
}

/// The task's own environment from the pool (built from its spec on
/// first need), the repository installed into a layer over it in `ws`.
fn task_env(task: &Task, ws: &Workspace, layer: &Path) -> TaskEnv {
    let setup = common::demo_pool().setup(task).unwrap();
    setup
        .install(&patchwright_sandbox::Host::default(), ws.path(), layer)
        .unwrap()
        .task
}

const REPRODUCER: &[&str] = &[
    "I write a test with two memoized functions.\n\n```\ncreate tests/test_issue.py\n```",
    "Each function must keep its own results.\n\n```\nedit 1:1\nfrom cachekit import memoize\n\n\ndef test_functions_keep_their_own_results():\n    @memoize\n    def one(x):\n        return 1\n\n    @memoize\n    def two(x):\n        return 2\n\n    assert one(7) == 1\n    assert two(7) == 2\nend_of_edit\n```",
    "It should fail on this code.\n\n```\nsubmit_test tests/test_issue.py python -m pytest -q tests/test_issue.py\n```",
];

const LOCALIZER: &[&str] = &[
    "I look at the decorators.\n\n```\nview_skeleton cachekit/decorators.py\n```",
    "memoize holds the shared default.\n\n```\nlocate cachekit/decorators.py::memoize\n```",
    "That is the place.\n\n```\nsubmit\n```",
];

const GOLD: &str = "Reasoning: the default cache dict is shared by every decorated function.\n\ncachekit/decorators.py\n<<<<<<< SEARCH\ndef memoize(func=None, *, cache={}, key=make_key, typed=False):\n=======\ndef memoize(func=None, *, cache=None, key=make_key, typed=False):\n>>>>>>> REPLACE\ncachekit/decorators.py\n<<<<<<< SEARCH\n        store = cache\n=======\n        store = {} if cache is None else cache\n>>>>>>> REPLACE\n";
const WRONG: &str = "Reasoning: the key ignores types.\n\ncachekit/decorators.py\n<<<<<<< SEARCH\ndef memoize(func=None, *, cache={}, key=make_key, typed=False):\n=======\ndef memoize(func=None, *, cache={}, key=make_key, typed=True):\n>>>>>>> REPLACE\n";
const MISSES: &str = "Reasoning: a guess.\n\ncachekit/decorators.py\n<<<<<<< SEARCH\n    return nothing_like_this\n=======\n    return None\n>>>>>>> REPLACE\n";

fn settings(reproduce: bool, candidates: usize) -> Settings {
    let mut s = Settings::defaults("unused");
    // The scripted turns are the ReAct localizer's.
    s.localizer.mode = patchwright::agents::localize::LocalizerMode::React;
    s.pipeline.reproduce = reproduce;
    s.pipeline.template = reproduce;
    s.fixer.candidates = candidates;
    // The scripted fixes are SEARCH/REPLACE blocks.
    s.fixer.edit_format = patchwright::agents::fixer::EditFormat::SearchReplace;
    s.ranker.test_timeout_s = 120;
    s.reproducer.mode = ReproducerMode::React;
    s
}

struct Run {
    _dir: tempfile::TempDir,
    ws: Workspace,
    env: TaskEnv,
    outcome: masai::Outcome,
    trajectory: Trajectory,
    artifacts: PathBuf,
}

fn run(task: &Task, settings: &Settings, backend: &dyn Backend) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let repos = Repos::new(&common::root().join("datasets/demo/repos")).unwrap();
    let source = repos.locate(&task.repo).unwrap();
    let ws = Workspace::create(&source, &task.base_commit, &dir.path().join("ws")).unwrap();
    let artifacts = dir.path().join("artifacts");
    let mut trajectory = Trajectory::new(&task.instance_id);
    let env = task_env(task, &ws, &dir.path().join("layer"));
    let outcome = masai::run(
        backend,
        settings,
        &task.issue(),
        &ws,
        &env,
        &masai::Dirs {
            artifacts: artifacts.clone(),
            scratch: dir.path().join("scratch"),
            shared: None,
        },
        &mut trajectory,
    )
    .unwrap();
    Run {
        _dir: dir,
        ws,
        env,
        outcome,
        trajectory,
        artifacts,
    }
}

fn model_calls(t: &Trajectory) -> Vec<(String, usize)> {
    t.steps
        .iter()
        .filter_map(|s| match &s.step {
            Step::ModelCall(c) => Some((c.purpose.clone(), c.candidates.len().max(1))),
            _ => None,
        })
        .collect()
}

fn clean(ws: &Path) -> bool {
    patchwright::repo::diff_against(ws, &patchwright::repo::head_commit(ws).unwrap())
        .unwrap()
        .is_empty()
}

#[test]
fn five_stages_rank_the_reproducing_candidate_first_and_replay_exactly() {
    let task = task("demo__cachekit-1");
    let mut calls: Vec<Vec<&str>> = Vec::new();
    calls.extend(LOCALIZER.iter().map(|t| vec![*t]));
    calls.extend(REPRODUCER.iter().map(|t| vec![*t]));
    calls.push(vec![WRONG, GOLD, MISSES, GOLD]);
    let scripted = Scripted::new(calls);
    let settings = settings(true, 4);
    let r = run(&task, &settings, &scripted);
    let o = &r.outcome;

    // Stages 1-3 and their artifacts. The template is the located
    // module's own test file, which passes: no model call.
    let template = o.template.as_ref().unwrap();
    assert_eq!(template.source, masai::TestSource::Existing);
    assert!(template.episode.is_none());
    let t = template.test.as_ref().unwrap();
    assert_eq!(t.path, "tests/test_decorators.py");
    assert_eq!(t.command, "pytest -rA 'tests/test_decorators.py'\n");
    assert!(t.text.starts_with("from cachekit"), "{}", t.text);
    assert_eq!(template.existing.len(), 1);
    assert_eq!(template.existing[0].verdict, "passed");
    let repro = o.reproduction.as_ref().unwrap().test.as_ref().unwrap();
    // Run the repository's way (the spec's test command), in the task's
    // environment, not as the agent typed it.
    assert_eq!(repro.command, "pytest -rA 'tests/test_issue.py'\n");
    assert!(repro.output.contains("1 failed"), "{}", repro.output);
    assert!(
        repro
            .output
            .contains("FAILED tests/test_issue.py::test_functions_keep_their_own_results"),
        "{}",
        repro.output
    );
    assert_eq!(o.locations.source, "localizer");
    assert_eq!(o.locations.locations[0].symbol, "memoize");
    for name in ["template", "reproduction", "locations", "fixes", "ranking"] {
        assert!(
            r.artifacts.join(format!("{name}.json")).is_file(),
            "{name}.json"
        );
    }
    // No agent's file leaks into the workspace or the patch.
    assert!(clean(r.ws.path()));

    // Stage 4: one call for four candidates; one misses, two agree.
    assert_eq!(
        model_calls(&r.trajectory),
        [("localizer", 1); 3]
            .into_iter()
            .chain([("reproducer", 1); 3])
            .chain([("fixer", 4)])
            .map(|(p, n)| (p.to_string(), n))
            .collect::<Vec<_>>()
    );
    let f = &o.fixes;
    assert_eq!(
        (f.generated(), f.applied(), f.parsed(), f.distinct.len()),
        (4, 3, 3, 2)
    );
    assert_eq!(f.distinct[0].members, [0]);
    assert_eq!(f.distinct[1].members, [1, 3]);

    // Stage 5: the candidate passing the reproduction test comes first.
    let ranking = o.ranking.as_ref().unwrap();
    assert_eq!(ranking.order, [1, 0]);
    assert_eq!(ranking.evaluations[1].reproduction, Some(true));
    assert_eq!(ranking.evaluations[0].reproduction, Some(false));
    // Regression tests by what they import: the decorators' own tests
    // first, then those reaching cachekit.decorators through the package,
    // three at most.
    assert_eq!(
        ranking.regression_files,
        [
            "tests/test_decorators.py",
            "tests/test_keys.py",
            "tests/test_lru.py"
        ]
    );
    assert!(ranking.base_passing > 0);
    assert!(ranking.comparison.is_none());
    assert_eq!(o.patch, task.patch);

    // Metrics, from the gold patch, after the run.
    let m = metrics::compute(
        &task,
        &r.ws,
        &r.env,
        common::demo_pool(),
        o,
        &r.trajectory.steps,
        &r.artifacts.join("m"),
    );
    assert_eq!(m.gold_files, ["cachekit/decorators.py"]);
    assert_eq!(
        m.gold_functions,
        [
            "cachekit/decorators.py::memoize",
            "cachekit/decorators.py::memoize.decorator"
        ]
    );
    assert_eq!((m.file_hit, m.function_hit), (Some(1.0), Some(1.0)));
    assert_eq!(
        (
            m.reproduction_fails_on_base,
            m.reproduction_passes_with_gold
        ),
        (Some(true), Some(true))
    );
    assert_eq!(m.resolving, Some(vec![1]), "{:?}", m.notes);
    assert_eq!(
        (m.any_resolves, m.picked_resolves),
        (Some(true), Some(true))
    );
    assert_eq!(m.env_import_errors, 0);
    // The compute: every candidate's tokens (a call of N candidates counts
    // N replies), every call's seconds.
    let calls: Vec<&ModelCall> = r.trajectory.model_calls().collect();
    let tokens: usize = calls
        .iter()
        .map(|c| match c.candidates.len() {
            0 => c.completion_tokens,
            _ => c.candidates.iter().map(|k| k.tokens.len()).sum(),
        })
        .sum();
    let sampled = calls.iter().find(|c| c.candidates.len() > 1).unwrap();
    assert!(sampled.generated_tokens() > sampled.completion_tokens);
    assert_eq!(m.generated_tokens, tokens);
    let seconds = calls.len() as f64 * (common::SCRIPTED_PROMPT_S + common::SCRIPTED_DECODE_S);
    assert_eq!(m.model_s, seconds);

    // Replayed from the trajectory, the run is the same.
    let file = r.artifacts.join("trajectory.json");
    std::fs::write(&file, serde_json::to_string(&r.trajectory).unwrap()).unwrap();
    let replay = ReplayBackend::from_trajectory(&file).unwrap();
    let again = run(&task, &settings, &replay);
    assert_eq!(replay.remaining(), 0);
    assert_eq!(again.outcome.patch, o.patch);
    assert_eq!(again.outcome.ranking.as_ref().unwrap().order, ranking.order);
}

/// Sample mode's candidates: one passes, one is broken by an import, and
/// three fail on the base commit, two of them with the same failure.
const SAMPLES: [&str; 5] = [
    "```python\nfrom cachekit import memoize\n\n\ndef test_memoize_returns_the_result():\n    @memoize\n    def double(x):\n        return 2 * x\n\n    assert double(3) == 6\n```",
    "```python\nfrom cachekit import no_such_name\n\n\ndef test_it():\n    assert no_such_name(1) == 1\n```",
    "```python\nfrom cachekit import memoize\n\n\ndef test_functions_keep_their_own_results():\n    @memoize\n    def one(x):\n        return 1\n\n    @memoize\n    def two(x):\n        return 2\n\n    assert one(7) == 1\n    assert two(7) == 2\n```",
    "```python\nfrom cachekit import memoize\n\n\ndef test_a_key_error():\n    raise KeyError('nope')\n```",
    "```python\nfrom cachekit import memoize\n\n\ndef test_two_functions():\n    @memoize\n    def ten(x):\n        return 10\n\n    @memoize\n    def twenty(x):\n        return 20\n\n    assert ten(3) == 10\n    assert twenty(3) == 20\n```",
];

#[test]
fn sampled_reproductions_agree_on_the_failure_and_the_template_needs_no_model() {
    let task = task("demo__cachekit-1");
    let mut calls: Vec<Vec<&str>> = LOCALIZER.iter().map(|t| vec![*t]).collect();
    calls.push(SAMPLES.to_vec());
    calls.push(vec![WRONG, GOLD]);
    let scripted = Scripted::new(calls);
    let mut settings = settings(true, 2);
    settings.reproducer.mode = ReproducerMode::Sample;
    settings.reproducer.candidates = SAMPLES.len();
    let r = run(&task, &settings, &scripted);
    let o = &r.outcome;
    // No model call for the template: the existing test file passes.
    assert_eq!(
        model_calls(&r.trajectory),
        [("localizer", 1), ("localizer", 1), ("localizer", 1)]
            .into_iter()
            .chain([("reproducer", SAMPLES.len()), ("fixer", 2)])
            .map(|(p, n)| (p.to_string(), n))
            .collect::<Vec<_>>()
    );
    let template = o.template.as_ref().unwrap();
    assert_eq!(template.source, masai::TestSource::Existing);
    assert_eq!(
        template.test.as_ref().unwrap().path,
        "tests/test_decorators.py"
    );

    let repro = o.reproduction.as_ref().unwrap();
    assert_eq!(repro.source, masai::TestSource::Sample);
    assert!(repro.episode.is_none());
    let statuses: Vec<SampleStatus> = repro.samples.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [
            SampleStatus::Passed,
            SampleStatus::Broken,
            SampleStatus::Failed,
            // A KeyError the test raises itself, which the issue never
            // names: "other issues", not a reproduction.
            SampleStatus::Other,
            SampleStatus::Failed
        ],
        "{:#?}",
        repro.samples
    );
    let signatures: Vec<Option<&str>> = repro
        .samples
        .iter()
        .map(|s| s.signature.as_deref())
        .collect();
    assert_eq!(
        signatures,
        [
            None,
            None,
            Some("assert N == N"),
            None,
            Some("assert N == N")
        ]
    );
    assert!(
        repro.samples[1].reason.contains("no_such_name"),
        "{}",
        repro.samples[1].reason
    );
    assert!(
        repro.samples[3]
            .reason
            .starts_with("other issues: it failed with KeyError"),
        "{}",
        repro.samples[3].reason
    );
    // The majority's failure, its first candidate.
    assert_eq!(repro.chosen, Some(2));
    let test = repro.test.as_ref().unwrap();
    assert_eq!(test.path, "tests/test_reproduce_issue.py");
    assert_eq!(test.command, "pytest -rA 'tests/test_reproduce_issue.py'\n");
    assert!(test
        .text
        .contains("def test_functions_keep_their_own_results"));
    assert!(
        test.output.contains(
            "FAILED tests/test_reproduce_issue.py::test_functions_keep_their_own_results"
        ),
        "{}",
        test.output
    );
    // The artifact reads back, and `test` non-null says accepted.
    let text = std::fs::read_to_string(r.artifacts.join("reproduction.json")).unwrap();
    let back: masai::TestArtifact = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, repro);
    let raw: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(raw["test"].is_object() && raw.get("episode").is_none());
    assert!(clean(r.ws.path()));

    // The other accepted test is kept whole beside it.
    let others: Vec<&str> = repro.other_tests.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(others.len(), 1);
    assert!(
        others[0].contains("def test_two_functions"),
        "{}",
        others[0]
    );

    // The ranker uses both: the gold patch passes them, the wrong one
    // does not: a candidates x tests matrix.
    let ranking = o.ranking.as_ref().unwrap();
    let row = |e: &patchwright::agents::ranker::Evaluation| (e.reproduction, e.other_tests.clone());
    assert_eq!(row(&ranking.evaluations[1]), (Some(true), vec![true]));
    assert_eq!(row(&ranking.evaluations[0]), (Some(false), vec![false]));
    assert_eq!(ranking.order, [1, 0]);
    assert_eq!(o.patch, task.patch);
    let m = metrics::compute(
        &task,
        &r.ws,
        &r.env,
        common::demo_pool(),
        o,
        &r.trajectory.steps,
        &r.artifacts.join("m"),
    );
    assert_eq!(
        (
            m.reproduction_fails_on_base,
            m.reproduction_passes_with_gold
        ),
        (Some(true), Some(true))
    );

    // Replayed from the trajectory, the same samples and choice.
    let file = r.artifacts.join("trajectory.json");
    std::fs::write(&file, serde_json::to_string(&r.trajectory).unwrap()).unwrap();
    let replay = ReplayBackend::from_trajectory(&file).unwrap();
    let again = run(&task, &settings, &replay);
    assert_eq!(replay.remaining(), 0);
    let again_repro = again.outcome.reproduction.as_ref().unwrap();
    assert_eq!(again_repro.chosen, Some(2));
    assert_eq!(again_repro.test.as_ref().unwrap().text, test.text);
    assert_eq!(again.outcome.patch, o.patch);
}

/// Reproduction candidates that fail for reasons the issue does not
/// describe: a fixture that crashes in its set-up, a wrong call.
const OTHER_FAILURES: [&str; 3] = [
    "```python\nimport pytest\nfrom cachekit import memoize\n\n\n@pytest.fixture\ndef store():\n    raise RuntimeError('set-up failed')\n\n\ndef test_uses_store(store):\n    assert memoize(cache=store) is not None\n```",
    "```python\nfrom cachekit import memoize\n\n\ndef test_wrong_call():\n    @memoize(size=3)\n    def one(x):\n        return 1\n\n    assert one(1) == 1\n```",
    "```python\nfrom cachekit import memoize\n\n\ndef test_two_functions():\n    @memoize\n    def user_name(user_id):\n        return f'user-{user_id}'\n\n    @memoize\n    def user_email(user_id):\n        return f'user{user_id}@example.com'\n\n    assert user_name(7) == 'user-7'\n    assert user_email(7) == 'user7@example.com'\n    assert len(user_name.cache) == 2\n```",
];

/// A fix that leaves an indented line under nothing: tree-sitter parses
/// it, Python does not compile it.
const UNINDENTED: &str = "Reasoning: a fresh dict.\n\ncachekit/decorators.py\n<<<<<<< SEARCH\n    def decorator(function):\n        store = cache\n=======\n        store = {}\n>>>>>>> REPLACE\n";

#[test]
fn a_repair_round_fixes_what_the_first_round_did_not() {
    let task = task("demo__cachekit-1");
    let mut calls: Vec<Vec<&str>> = LOCALIZER.iter().map(|t| vec![*t]).collect();
    calls.push(OTHER_FAILURES.to_vec());
    // Round 1: a wrong fix and one that does not compile; round 2: the
    // fix (and the wrong one again, its duplicate).
    calls.push(vec![WRONG, UNINDENTED]);
    calls.push(vec![GOLD, WRONG]);
    let scripted = Scripted::new(calls);
    let mut settings = settings(true, 2);
    settings.reproducer.mode = ReproducerMode::Sample;
    settings.reproducer.candidates = OTHER_FAILURES.len();
    settings.fixer.rounds = 3;
    let r = run(&task, &settings, &scripted);
    let o = &r.outcome;

    // The set-up crash is broken, the wrong call is "other issues"; the
    // test whose expectation is the issue's is accepted.
    let repro = o.reproduction.as_ref().unwrap();
    let statuses: Vec<SampleStatus> = repro.samples.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [
            SampleStatus::Broken,
            SampleStatus::Other,
            SampleStatus::Failed
        ],
        "{:#?}",
        repro.samples
    );
    assert!(
        repro.samples[0].reason.contains("setup"),
        "{}",
        repro.samples[0].reason
    );
    assert!(
        repro.samples[1].reason.contains("TypeError"),
        "{}",
        repro.samples[1].reason
    );
    assert_eq!(repro.samples[2].issue_literals, 2);
    assert_eq!(repro.chosen, Some(2));
    // Cut after the assertion that failed on the base commit: the one
    // after it asks for what the issue never did (the gold patch fails it).
    assert_eq!(repro.samples[2].cut_after, Some(14));
    let accepted = repro.test.as_ref().unwrap();
    assert!(
        !accepted.text.contains("len(user_name.cache)"),
        "{}",
        accepted.text
    );
    assert!(accepted
        .text
        .ends_with("assert user_email(7) == 'user7@example.com'\n"));

    // Two rounds: the second shown the first's failing fix and what the
    // test printed with it, and the fixer stops once one passes.
    assert_eq!(
        model_calls(&r.trajectory),
        [("localizer", 1); 3]
            .into_iter()
            .chain([("reproducer", 3), ("fixer", 2), ("fixer", 2)])
            .map(|(p, n)| (p.to_string(), n))
            .collect::<Vec<_>>()
    );
    let prompts: Vec<String> = r
        .trajectory
        .steps
        .iter()
        .filter_map(|s| match &s.step {
            Step::ModelCall(c) if c.purpose == "fixer" => {
                c.messages.last().map(|m| m.content.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(prompts.len(), 2);
    for p in &prompts {
        assert!(
            p.contains("A TEST THAT REPRODUCES THE ISSUE (tests/test_reproduce_issue.py)"),
            "{p}"
        );
        assert!(
            p.contains("assert user_email(7) == 'user7@example.com'"),
            "{p}"
        );
        assert!(p.contains("AssertionError"), "{p}");
    }
    assert!(!prompts[0].contains("EARLIER FIXES"), "{}", prompts[0]);
    assert!(
        prompts[1].contains("EARLIER FIXES, WHICH DID NOT FIX IT"),
        "{}",
        prompts[1]
    );
    assert!(
        prompts[1].contains("+def memoize(func=None, *, cache={}, key=make_key, typed=True):"),
        "{}",
        prompts[1]
    );
    assert!(
        prompts[1].contains("With it the test still fails"),
        "{}",
        prompts[1]
    );
    assert!(
        prompts[1].contains("It was rejected: it breaks the syntax (cachekit/decorators.py:"),
        "{}",
        prompts[1]
    );
    assert!(prompts[1].contains("IndentationError"), "{}", prompts[1]);
    // Python's compile rejects what tree-sitter let through: it never
    // reaches the Ranker.
    assert!(
        matches!(&o.fixes.candidates[1].status, patchwright::agents::fixer::Status::SyntaxError(e) if e.contains("IndentationError")),
        "{:?}",
        o.fixes.candidates[1].status
    );

    let f = &o.fixes;
    let rounds: Vec<(usize, usize, usize, usize, usize)> = f
        .rounds
        .iter()
        .map(|r| (r.round, r.candidates, r.distinct, r.judged, r.passing))
        .collect();
    assert_eq!(rounds, [(1, 2, 1, 1, 0), (2, 2, 1, 1, 1)]);
    assert_eq!(f.distinct.len(), 2);
    assert_eq!(
        (f.distinct[0].round, f.distinct[0].reproduction),
        (1, Some(false))
    );
    assert_eq!(
        (f.distinct[1].round, f.distinct[1].reproduction),
        (2, Some(true))
    );
    assert_eq!(f.distinct[0].members, [0, 3]);
    let ranking = o.ranking.as_ref().unwrap();
    assert_eq!(ranking.order, [1, 0]);
    assert_eq!(o.patch, task.patch);
    // The whole file was shown (it fits), so every function of it counts.
    assert_eq!(f.shown.len(), 1);
    assert_eq!(f.shown[0].path, "cachekit/decorators.py");
    assert_eq!(f.shown[0].start_line, 1);

    let m = metrics::compute(
        &task,
        &r.ws,
        &r.env,
        common::demo_pool(),
        o,
        &r.trajectory.steps,
        &r.artifacts.join("m"),
    );
    assert_eq!(m.candidates_per_round, [2, 2]);
    assert_eq!(m.passing_per_round, [0, 1]);
    assert_eq!(m.candidates_generated, 4);
    assert_eq!(m.function_hit, Some(1.0));
    assert_eq!(m.reproduction_passes_with_gold, Some(true));
    assert_eq!(m.any_resolves, Some(true));
}

/// An artifact written before the test stages changed (an episode, a
/// test, nothing else) still reads: from an agent, with no samples.
#[test]
fn an_older_test_artifact_reads() {
    let old = r#"{"episode":{"agent":"reproducer","status":"exit_step_limit","steps":3,"format_errors":0,"truncated":0,"tokens_evaluated":900,"tokens_reused":300,"tokens_generated":120,"wall_s":4.5},"test":null}"#;
    let a: masai::TestArtifact = serde_json::from_str(old).unwrap();
    assert_eq!(a.source, masai::TestSource::Agent);
    assert!(a.episode.is_some() && a.test.is_none() && a.samples.is_empty());
}

#[test]
fn without_a_reproduction_test_agreement_then_the_model_decide() {
    let task = task("demo__cachekit-1");
    // Agreement: the wrong patch twice beats the right one once.
    let scripted = Scripted::new(
        LOCALIZER
            .iter()
            .map(|t| vec![*t])
            .chain([vec![GOLD, WRONG, WRONG]])
            .collect(),
    );
    let r = run(&task, &settings(false, 3), &scripted);
    assert!(r.outcome.template.is_none() && r.outcome.reproduction.is_none());
    let ranking = r.outcome.ranking.as_ref().unwrap();
    assert_eq!(ranking.evaluations[0].reproduction, None);
    assert_eq!(ranking.order, [1, 0]);
    assert!(ranking.comparison.is_none());

    // A tie: the model's comparison picks (here, candidate 2 of 2).
    let scripted = Scripted::new(
        LOCALIZER
            .iter()
            .map(|t| vec![*t])
            .chain([
                vec![WRONG, GOLD],
                vec!["Reasoning: only the second gives each function its own dict.\nBest: 2"],
            ])
            .collect(),
    );
    let r = run(&task, &settings(false, 2), &scripted);
    let ranking = r.outcome.ranking.as_ref().unwrap();
    let c = ranking.comparison.as_ref().unwrap();
    assert_eq!((c.tied.as_slice(), c.chosen), (&[0, 1][..], 1));
    assert_eq!(ranking.order, [1, 0]);
    assert_eq!(r.outcome.patch, task.patch);
    assert_eq!(model_calls(&r.trajectory).last().unwrap().0, "ranker");

    // The fallback replays exactly too, the comparison included.
    let file = r.artifacts.join("trajectory.json");
    std::fs::write(&file, serde_json::to_string(&r.trajectory).unwrap()).unwrap();
    let replay = ReplayBackend::from_trajectory(&file).unwrap();
    let again = run(&task, &settings(false, 2), &replay);
    assert_eq!(replay.remaining(), 0);
    assert_eq!(again.outcome.ranking, r.outcome.ranking);
    assert_eq!(again.outcome.patch, task.patch);
}

/// Two location sets: the localizer's greedy reply and a sampled one that
/// differs, each with its share of the Fixer's candidates, every prompt
/// showing its own set, and the whole run replaying exactly.
#[test]
fn two_location_sets_share_the_candidates_and_replay() {
    let task = task("demo__cachekit-1");
    let mut settings = settings(false, 3);
    settings.localizer.mode = patchwright::agents::localize::LocalizerMode::Choose;
    settings.localizer.sets = 2;
    settings.ranker.compare = false;
    // The labels come from the index's ranking of this task: the greedy
    // reply picks the first candidate, the sampled one the second.
    let scripted = Scripted::new(vec![vec!["1", "2"], vec![GOLD, WRONG], vec![MISSES]]);
    let r = run(&task, &settings, &scripted);
    assert_eq!(
        model_calls(&r.trajectory),
        [("localizer", 2), ("fixer", 2), ("fixer", 1)]
            .map(|(p, n)| (p.to_string(), n))
            .to_vec()
    );
    let text = std::fs::read_to_string(r.artifacts.join("locations.json")).unwrap();
    let locations: masai::LocationsArtifact = serde_json::from_str(&text).unwrap();
    assert_eq!(locations.other_sets.len(), 1);
    assert_ne!(locations.other_sets[0], locations.locations);
    let fixes = &r.outcome.fixes;
    let sets: Vec<usize> = fixes.candidates.iter().map(|c| c.set).collect();
    assert_eq!(sets, [0, 0, 1]);
    // Each fixer prompt names its own set's first location.
    let prompts: Vec<String> = r
        .trajectory
        .model_calls()
        .filter(|c| c.purpose == "fixer")
        .map(|c| c.messages.iter().map(|m| m.content.clone()).collect())
        .collect();
    for (prompt, set) in prompts
        .iter()
        .zip([&locations.locations, &locations.other_sets[0]])
    {
        assert!(prompt.contains(&set[0].path), "{}", set[0].path);
    }
    assert_eq!(r.outcome.patch, task.patch);

    let file = r.artifacts.join("trajectory.json");
    std::fs::write(&file, serde_json::to_string(&r.trajectory).unwrap()).unwrap();
    let replay = ReplayBackend::from_trajectory(&file).unwrap();
    let again = run(&task, &settings, &replay);
    assert_eq!(replay.remaining(), 0);
    assert_eq!(again.outcome.fixes, r.outcome.fixes);
}

/// The Fixer's prompt for a 30,000-character issue and a 600-line class,
/// fitted with SmolLM2's own tokenizer into 2,048 tokens less the reply's
/// 512, is accepted by the model: no `prompt does not fit`.
#[test]
fn a_long_issue_and_a_large_class_fit_the_real_model() {
    use patchwright::aci::Location;
    use patchwright::agents::fixer;
    use patchwright::engine::{Engine, EngineSettings, Request, Sampling};
    use patchwright::record::trajectory::Cut;
    let dir = tempfile::tempdir().unwrap();
    let class: String = std::iter::once("class Big:\n".to_string())
        .chain((2..=600).map(|n| match n {
            300 => "    def target_method(self):\n".to_string(),
            n if n % 2 == 0 => format!("    def method_{n}(self):\n"),
            n => format!("        return {n}\n"),
        }))
        .collect();
    std::fs::create_dir_all(dir.path().join("pkg")).unwrap();
    std::fs::write(dir.path().join("pkg/big.py"), class).unwrap();
    let issue = format!(
        "Big.target_method() is wrong.\n{}",
        "Some words about the problem, repeated at length.\n".repeat(600)
    );
    assert!(issue.chars().count() > 30_000);
    let locations = [Location {
        path: "pkg/big.py".into(),
        symbol: "Big".into(),
        start_line: 1,
        end_line: 600,
    }];
    let engine = Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 2048,
            threads: 0,
            ..EngineSettings::default()
        },
    )
    .unwrap();
    let mut conversation = engine.conversation(1, 512).unwrap();
    let prompt = fixer::fit_prompt(
        conversation.as_ref(),
        dir.path(),
        &issue,
        &locations,
        512,
        fixer::EditFormat::SearchReplace,
    )
    .unwrap();
    let trim = prompt.trim.expect("the prompt was cut");
    assert!(trim.fits, "{trim:?}");
    assert!(trim.full_tokens > 2048, "{trim:?}");
    assert_eq!(
        trim.prompt_tokens,
        engine.count_tokens(&prompt.messages).unwrap()
    );
    assert!(trim.prompt_tokens <= 2048 - 512, "{trim:?}");
    assert!(
        matches!(trim.cuts.as_slice(), [Cut::Span { .. }, Cut::Issue { .. }]),
        "{trim:?}"
    );
    let user = &prompt.messages[1].content;
    assert!(user.contains("Big.target_method() is wrong."), "{user}");
    assert!(user.contains("    def target_method(self):"), "{user}");
    assert!(
        user.contains("        # ... lines 12-294 left out ..."),
        "{user}"
    );
    let generation = conversation
        .generate(&Request::new(
            &prompt.messages,
            Sampling {
                max_tokens: 8,
                ..Sampling::default()
            },
        ))
        .unwrap();
    assert_eq!(generation.stats.prompt_tokens, trim.prompt_tokens);
}

/// SmolLM2 at temperature 0.7 (at 1.0 no `definition` reply closed its
/// edit, 0 of 4, and at 1.5 the free text of REPLACE or the new lines runs
/// to any cap), 4 candidates, through the grammar of each
/// format that promises it (all but `search_replace`), on the located
/// `memoize` of a demo task: every candidate that closed its edit applied
/// (a syntax error of the result, or overlapping edits, are the only
/// rejections allowed), and at
/// least one closed, so the check is not empty. The grammar, not the
/// model, is what makes these random replies apply.
#[test]
fn random_replies_through_each_grammar_apply() {
    use patchwright::aci::Location;
    use patchwright::agents::fixer::{self, EditFormat, FixerSettings, Status};
    use patchwright::engine::{Engine, EngineSettings, Sampling};
    let task = task("demo__cachekit-1");
    let dir = tempfile::tempdir().unwrap();
    let repos = Repos::new(&common::root().join("datasets/demo/repos")).unwrap();
    let source = repos.locate(&task.repo).unwrap();
    let ws = Workspace::create(&source, &task.base_commit, &dir.path().join("ws")).unwrap();
    let path = "cachekit/decorators.py";
    let text = std::fs::read_to_string(ws.path().join(path)).unwrap();
    let symbols = patchwright::index::symbols::parse_symbols(path, &text);
    let memoize = symbols
        .symbols
        .iter()
        .find(|s| s.qualname == "memoize")
        .expect("memoize is defined");
    let locations = [Location {
        path: path.into(),
        symbol: "memoize".into(),
        start_line: memoize.start_line,
        end_line: memoize.end_line,
    }];
    let engine = Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 4096,
            threads: 0,
            ..EngineSettings::default()
        },
    )
    .unwrap();
    // SmolLM2 often runs to the cap before closing an edit (here 4 of 4
    // close in `lines`, 3 of 4 in `definition`, none in `anchored`): what
    // must hold is that every closed one applied, and that some did close.
    // Four candidates a format (eight at 1.0 cost the suite 99 s).
    const CANDIDATES: usize = 4;
    let mut closed_in_all = 0;
    // The definition format writes the whole 30-line function.
    for (format, max_tokens) in [
        (EditFormat::Lines, 256),
        (EditFormat::Anchored, 256),
        (EditFormat::Definition, 512),
    ] {
        let settings = FixerSettings {
            candidates: CANDIDATES,
            temperature: 0.7,
            max_tokens,
            edit_format: format,
            ..FixerSettings::default()
        };
        let mut conversation = engine
            .conversation(CANDIDATES, max_tokens as usize)
            .unwrap();
        let mut trajectory = Trajectory::new(&task.instance_id);
        let issue = task.issue();
        let sampling = Sampling {
            seed: 7,
            ..Sampling::default()
        };
        let mut fixes = fixer::Fixes::empty(format);
        fixer::generate_round(
            conversation.as_mut(),
            &fixer::RoundSpec {
                root: ws.path(),
                base: &task.base_commit,
                issue: &issue,
                location_sets: &[locations.to_vec()],
                settings: &settings,
                sampling: &sampling,
                compile: None,
            },
            None,
            &[],
            1,
            &mut fixes,
            &mut trajectory,
        )
        .unwrap();
        assert_eq!(fixes.edit_format, format);
        assert_eq!(fixes.generated(), CANDIDATES, "{format:?}");
        let closed: Vec<&fixer::Candidate> = fixes
            .candidates
            .iter()
            .filter(|c| c.status != Status::NoBlocks)
            .collect();
        // Overlapping edits of one reply are dropped after the first, so
        // a syntax error is the one refusal left.
        for c in &closed {
            assert!(
                !matches!(&c.status, Status::DidNotApply(_)),
                "{format:?}: candidate {} did not apply: {:?}\n{}",
                c.index,
                c.status,
                c.reply
            );
        }
        closed_in_all += closed.len();
        eprintln!(
            "{format:?}: {} of {CANDIDATES} closed, {} applied, {} parsed",
            closed.len(),
            fixes.applied(),
            fixes.parsed()
        );
        assert!(
            clean(ws.path()),
            "{format:?}: the workspace is left as it was"
        );
    }
    assert!(
        closed_in_all > 0,
        "no candidate of any format closed its edit"
    );
}
