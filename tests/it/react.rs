//! The ReAct loop end to end on a demo task: a scripted episode recorded,
//! then replayed from its trajectory to the same patch; and a real
//! SmolLM2 episode of 12 steps under the action grammar.

use crate::common;

use std::path::Path;

use common::Scripted;
use patchwright::aci::{Aci, AciSettings};
use patchwright::agents::{self, history::Keep, react};
use patchwright::dataset::Task;
use patchwright::engine::{Backend, Conversation, Engine, EngineSettings, Request, Sampling};
use patchwright::index::symbols::CodeIndex;
use patchwright::record::trajectory::{EpisodeSummary, ExitStatus, Step};
use patchwright::repo::{Repos, Workspace};
use patchwright::trajectory::replay::ReplayBackend;
use patchwright::trajectory::Trajectory;

fn task(id: &str) -> Task {
    common::demo_task(id)
}

fn workspace(task: &Task, dir: &Path) -> Workspace {
    let repos = Repos::new(&common::root().join("datasets/demo/repos")).unwrap();
    let source = repos.locate(&task.repo).unwrap();
    Workspace::create(&source, &task.base_commit, &dir.join("ws")).unwrap()
}

fn interface(ws: &Workspace, window: usize) -> Aci {
    let index = CodeIndex::build(ws.path()).unwrap();
    let settings = AciSettings {
        window,
        ..AciSettings::default()
    };
    Aci::new(
        ws.path(),
        ws.base_commit(),
        index,
        settings,
        patchwright::env::task::TaskEnv::bare(&patchwright_sandbox::Host::default()),
    )
}

/// An episode of the solver on a fresh workspace of `task`, with the
/// interface's window `window`; returns the workspace (and its directory).
fn episode(
    task: &Task,
    agent: &react::Agent<'_>,
    conversation: &mut dyn Conversation,
    window: usize,
    settings: &react::ReactSettings,
) -> (tempfile::TempDir, Workspace, EpisodeSummary, Trajectory) {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(task, dir.path());
    let mut aci = interface(&ws, window);
    let mut trajectory = Trajectory::new(&task.instance_id);
    let summary = react::run(
        conversation,
        &mut aci,
        agent,
        settings,
        &Sampling::default(),
        &mut trajectory,
    );
    (dir, ws, summary, trajectory)
}

fn scripted(replies: Vec<&'static str>) -> Scripted {
    Scripted::replies(&replies)
}

const EPISODE: &[&str] = &[
    "The issue is about memoize sharing a cache, so I look for memoize.\n\n```\nsearch_method memoize\n```",
    "The default cache={} is shared by every decorated function. I open the file there.\n\n```\nopen cachekit/decorators.py 8\n```",
    "The default must be None, and each function must get its own dict.\n\n```\nedit 8:8\ndef memoize(func=None, *, cache=None, key=make_key, typed=False):\nend_of_edit\n```",
    "Now each decorated function needs a fresh dict when no cache is given.\n\n```\nstr_replace cachekit/decorators.py\n<<<<<<< SEARCH\n        store = cache\n=======\n        store = {} if cache is None else cache\n>>>>>>> REPLACE\n```",
    "I check the example from the issue.\n\n```\nrun python3 -c \"from cachekit import memoize; f = memoize(lambda x: 1); g = memoize(lambda x: 2); print(f(7), g(7))\"\n```",
    "Both functions now keep their own results, so I submit.\n\n```\nsubmit\n```",
];

#[test]
fn a_recorded_episode_replays_to_the_same_patch() {
    let task = task("demo__cachekit-1");
    let agent = agents::solver(&task.issue());
    let settings = react::ReactSettings::default();

    // Record: the scripted backend plays the model.
    let script = scripted(EPISODE.to_vec());
    let mut conversation = script.conversation(1, 512).unwrap();
    let (dir, ws, summary, trajectory) =
        episode(&task, &agent, conversation.as_mut(), 100, &settings);
    drop(conversation);
    assert_eq!(summary.status, ExitStatus::Submitted, "{summary:?}");
    assert_eq!((summary.steps, summary.format_errors), (6, 0));
    let patch = ws.diff().unwrap();
    assert_eq!(patch, task.patch, "the episode must give the gold patch");

    let actions: Vec<_> = trajectory
        .steps
        .iter()
        .filter_map(|s| match &s.step {
            Step::Action(a) => Some(a.as_ref()),
            _ => None,
        })
        .collect();
    assert_eq!(actions.len(), 6);
    assert_eq!(actions[0].action, "search_method memoize\n");
    assert!(actions[0].observation.starts_with(
        "Found 1 functions or methods named \"memoize\":\ncachekit/decorators.py::memoize  (lines 8-"
    ), "{}", actions[0].observation);
    assert_eq!(actions[4].observation, "1 2");
    assert!(actions[5]
        .observation
        .starts_with("diff --git a/cachekit/decorators.py"));
    assert!(matches!(
        trajectory.steps.last().map(|s| &s.step),
        Some(Step::Episode(_))
    ));

    // Replay: the trajectory file answers, and the run must not diverge.
    let file = dir.path().join("trajectory.json");
    std::fs::write(&file, serde_json::to_string_pretty(&trajectory).unwrap()).unwrap();
    let replay = ReplayBackend::from_trajectory(&file).unwrap();
    let mut conversation = replay.conversation(1, 512).unwrap();
    let (_dir2, ws2, again, _) = episode(&task, &agent, conversation.as_mut(), 100, &settings);
    drop(conversation);
    assert_eq!(again.status, ExitStatus::Submitted, "{again:?}");
    assert_eq!(replay.remaining(), 0);
    assert_eq!(ws2.diff().unwrap(), patch);
}

#[test]
fn format_errors_are_told_to_the_model_and_end_the_episode() {
    let task = task("demo__cachekit-1");
    let script = scripted(vec!["no fence at all", "```\nls -la\n```", "still nothing"]);
    let mut conversation = script.conversation(1, 512).unwrap();
    let settings = react::ReactSettings::default();
    let (_dir, _ws, summary, trajectory) = episode(
        &task,
        &agents::solver(&task.issue()),
        conversation.as_mut(),
        100,
        &settings,
    );
    assert_eq!(summary.status, ExitStatus::ExitError);
    assert_eq!(summary.format_errors, 3);
    let second = trajectory
        .steps
        .iter()
        .filter_map(|s| match &s.step {
            Step::Action(a) => Some(a.observation.clone()),
            _ => None,
        })
        .nth(1)
        .unwrap();
    assert!(second.contains("unknown command `ls`"), "{second}");
}

#[test]
fn step_limit_ends_the_episode() {
    let task = task("demo__cachekit-1");
    let script = scripted(vec!["Look.\n\n```\nopen cachekit/decorators.py\n```"; 3]);
    let mut conversation = script.conversation(1, 512).unwrap();
    let settings = react::ReactSettings {
        max_steps: 3,
        ..Default::default()
    };
    let (_dir, _ws, summary, trajectory) = episode(
        &task,
        &agents::solver(&task.issue()),
        conversation.as_mut(),
        100,
        &settings,
    );
    assert_eq!(
        (summary.status, summary.steps),
        (ExitStatus::ExitStepLimit, 3)
    );
    // The same command with the same output again is pointed out.
    let repeated: Vec<bool> = trajectory
        .steps
        .iter()
        .filter_map(|s| match &s.step {
            Step::Action(a) => Some(a.observation.ends_with(react::REPEATED)),
            _ => None,
        })
        .collect();
    assert_eq!(repeated, [false, true, true]);
}

#[test]
fn a_real_model_makes_no_malformed_action_in_12_steps() {
    let engine = Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 8192,
            threads: 0,
            ..EngineSettings::default()
        },
    )
    .unwrap();
    let task = task("demo__semverkit-1");
    // Every command but `submit`, so the episode runs its 12 steps: far
    // past the two steps of history kept below (30 cost the suite 106 s).
    let explore: Vec<&str> = patchwright::aci::command::NAMES
        .iter()
        .copied()
        .filter(|&n| n != "submit")
        .collect();
    let agent = react::Agent {
        commands: &explore,
        ..agents::solver(&task.issue())
    };
    // A small window and history keep the context, and the test, short.
    let settings = react::ReactSettings {
        max_steps: 12,
        reply_tokens: 128,
        history: agents::history::HistorySettings {
            keep: Keep::Last(2),
            block: 2,
        },
        ..Default::default()
    };
    let mut conversation = engine.conversation(1, 0).unwrap();
    let (_dir, _ws, summary, trajectory) =
        episode(&task, &agent, conversation.as_mut(), 20, &settings);
    eprintln!(
        "SmolLM2 episode: {:?}, {} steps, {} format errors, {} cut off, KV reuse {:.1}% ({} reused, {} evaluated, {} generated), {:.1} s",
        summary.status,
        summary.steps,
        summary.format_errors,
        summary.truncated,
        100.0 * summary.kv_reuse(),
        summary.tokens_reused,
        summary.tokens_evaluated,
        summary.tokens_generated,
        summary.wall_s
    );
    let (mut prompt_s, mut decode_s, mut exec_s) = (0.0, 0.0, 0.0);
    for step in &trajectory.steps {
        match &step.step {
            Step::ModelCall(c) => {
                prompt_s += c.prompt_s;
                decode_s += c.decode_s;
            }
            Step::Action(a) => exec_s += a.exec_s,
            _ => {}
        }
    }
    eprintln!("prompt {prompt_s:.1} s, decode {decode_s:.1} s, commands {exec_s:.1} s");
    if let Some(path) = std::env::var_os("PATCHWRIGHT_TEST_TRAJECTORY") {
        std::fs::write(path, serde_json::to_string_pretty(&trajectory).unwrap()).unwrap();
    }
    assert_eq!(summary.status, ExitStatus::ExitStepLimit, "{summary:?}");
    assert_eq!(summary.steps, 12);
    // The grammar admits only well-formed commands of the agent's set.
    assert_eq!(summary.format_errors, 0, "{summary:?}");
    // Every action recorded is a command that parses, or a reply cut off.
    let mut actions = 0;
    for step in &trajectory.steps {
        if let Step::Action(a) = &step.step {
            actions += 1;
            match &a.format_error {
                None => assert!(patchwright::aci::Command::parse(&a.action).is_ok(), "{a:?}"),
                Some(why) => assert!(why.contains("limit of"), "{a:?}"),
            }
        }
    }
    assert_eq!(actions, 12);
    assert!(
        summary.kv_reuse() > 0.5,
        "KV reuse {:.2}",
        summary.kv_reuse()
    );
}

#[test]
fn the_turn_grammar_over_thousands_of_paths_is_sampled_by_llama_cpp() {
    use patchwright::aci::command::{self, Choices};
    use patchwright::engine::{grammar, Message};
    let files: Vec<String> = (0..40)
        .flat_map(|d| (0..100).map(move |f| format!("pkg/sub{d}/mod{f}.py")))
        .collect();
    let choices = Choices {
        python_files: files.clone(),
        dirs: (0..40).map(|d| format!("pkg/sub{d}")).collect(),
        symbols: Vec::new(),
        locatable: Vec::new(),
        locatable_files: files.clone(),
        files,
    };
    let g = grammar::turn(&command::actions(command::NAMES, &choices)).unwrap();
    let engine = Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 2048,
            threads: 0,
            ..EngineSettings::default()
        },
    )
    .unwrap();
    let messages = [Message::user(
        "Reply with one thought, a blank line, then the command `open pkg/sub17/mod42.py` in a ``` fence.",
    )];
    let mut conversation = engine.conversation(1, 0).unwrap();
    let generation = conversation
        .generate(&Request {
            grammar: Some(&g),
            ..Request::new(
                &messages,
                Sampling {
                    max_tokens: 96,
                    ..Sampling::default()
                },
            )
        })
        .unwrap();
    let reply = &generation.candidates[0].text;
    let turn = command::split_turn(reply).unwrap_or_else(|| panic!("not a turn: {reply:?}"));
    let parsed = patchwright::aci::Command::parse(&turn.command).unwrap();
    // Greedy decoding under the grammar: the asked-for path, one of 4000.
    assert_eq!(
        parsed,
        patchwright::aci::Command::Open {
            path: "pkg/sub17/mod42.py".into(),
            line: None
        }
    );
    eprintln!("{reply:?} -> {parsed:?}");
}
