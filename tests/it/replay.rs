//! The replay backend reproduces a recorded run exactly, and refuses a run
//! that diverges from the recording.

use crate::common;

use std::process::Command;

use patchwright::engine::{
    Backend, Engine, EngineError, EngineSettings, Message, Request, Sampling,
};
use patchwright::pipeline::apply_reply;
use patchwright::repo::{Repos, Workspace};
use patchwright::trajectory::replay::ReplayBackend;
use serde_json::Value;

#[test]
fn a_recorded_batch_replays_exactly_without_the_model() {
    common::test_model();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "[engine]\ncontext = 4096\nthreads = 2\n[sampling]\nmax_tokens = 64\n[retrieval]\nfiles = 1\n[pipeline]\nkind = \"first\"\n").unwrap();
    let out = dir.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .current_dir(common::root())
        .args([
            "batch",
            "--dataset",
            "datasets/demo/tasks.jsonl",
            "--repos",
            "datasets/demo/repos",
            "--filter",
            "textkit-1",
            "--model",
            "smollm2-135m",
        ])
        .arg("--config")
        .arg(&config)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let path = out.join("trajectories/demo__textkit-1.json");
    let recorded: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let call = &recorded["steps"][1];
    let messages: Vec<Message> = serde_json::from_value(call["messages"].clone()).unwrap();
    let sampling: Sampling = serde_json::from_value(call["sampling"].clone()).unwrap();

    let replay = ReplayBackend::from_trajectory(&path).unwrap();
    assert_eq!(replay.remaining(), 1);
    let mut conversation = replay.conversation(1, 64).unwrap();
    let g = conversation
        .generate(&Request::new(&messages, sampling.clone()))
        .unwrap();
    assert_eq!(replay.remaining(), 0);
    let c = &g.candidates[0];
    assert_eq!(Value::from(c.text.clone()), call["response"]);
    assert_eq!(serde_json::to_value(&c.tokens).unwrap(), call["tokens"]);

    // The recording is what the model says: the live model agrees.
    let engine = Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 4096,
            threads: 2,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        engine.complete(&messages, &sampling).unwrap().tokens,
        c.tokens
    );

    // Applying the replayed reply to a fresh workspace gives the recorded patch.
    let tasks =
        patchwright::dataset::load(&common::root().join("datasets/demo/tasks.jsonl")).unwrap();
    let task = tasks
        .iter()
        .find(|t| t.instance_id == "demo__textkit-1")
        .unwrap();
    let repos = Repos::new(&common::root().join("datasets/demo/repos")).unwrap();
    let ws = Workspace::create(
        &repos.locate(&task.repo).unwrap(),
        &task.base_commit,
        &dir.path().join("ws"),
    )
    .unwrap();
    let shown: Vec<String> = serde_json::from_value(recorded["steps"][0]["shown"].clone()).unwrap();
    apply_reply(ws.path(), &c.text, &shown);
    assert_eq!(Value::from(ws.diff().unwrap()), recorded["model_patch"]);

    // Past the end of the recording, the replay says so.
    match conversation.generate(&Request::new(&messages, sampling)) {
        Err(EngineError::Replay { message, .. }) => {
            assert!(message.contains("the recording has 1"), "{message}")
        }
        other => panic!("{:?}", other.map(|g| g.stats)),
    }
}

#[test]
fn a_diverging_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let recorded = serde_json::json!({"steps": [{"kind": "retrieve"}, {"kind": "model_call",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "fix it"}],
        "response": "done", "tokens": [1, 2], "prompt_tokens": 9, "completion_tokens": 2, "stop": "end_of_text"}]});
    std::fs::write(&path, recorded.to_string()).unwrap();
    let replay = ReplayBackend::from_trajectory(&path).unwrap();
    let other = [Message::system("s"), Message::user("fix something else")];
    match replay
        .conversation(1, 8)
        .unwrap()
        .generate(&Request::new(&other, Sampling::default()))
    {
        Err(EngineError::Replay { message, .. }) => {
            assert_eq!(
                message,
                "the run diverged at call 1: message 2 differs from the recording"
            )
        }
        other => panic!("{:?}", other.map(|g| g.stats)),
    }
    let same = [Message::system("s"), Message::user("fix it")];
    let g = replay
        .conversation(1, 8)
        .unwrap()
        .generate(&Request::new(&same, Sampling::default()))
        .unwrap();
    assert_eq!(g.candidates[0].text, "done");
    assert_eq!(g.candidates[0].tokens, vec![1, 2]);
    assert!(ReplayBackend::from_trajectory(&dir.path().join("absent.json")).is_err());
}
