//! The edit half of the first pipeline on a real demo workspace: a reply in,
//! the exact patch out.

use crate::common;

use patchwright::dataset;
use patchwright::pipeline::apply_reply;
use patchwright::record::trajectory::Step;
use patchwright::repo::{Repos, Workspace};

fn textkit() -> (tempfile::TempDir, Workspace, dataset::Task) {
    let tasks = dataset::load(&common::root().join("datasets/demo/tasks.jsonl")).unwrap();
    let task = tasks
        .into_iter()
        .find(|t| t.instance_id == "demo__textkit-1")
        .unwrap();
    let repos = Repos::new(&common::root().join("datasets/demo/repos")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let source = repos.locate(&task.repo).unwrap();
    let ws = Workspace::create(&source, &task.base_commit, &dir.path().join("ws")).unwrap();
    (dir, ws, task)
}

fn shown() -> Vec<String> {
    vec!["textkit/truncate.py".to_string()]
}

#[test]
fn a_search_replace_reply_gives_the_gold_patch() {
    let (_dir, ws, task) = textkit();
    let reply = "The comparison excludes text of exactly `width`.\n\ntextkit/truncate.py\n<<<<<<< SEARCH\n    if len(text) < width:\n=======\n    if len(text) <= width:\n>>>>>>> REPLACE\n";
    match apply_reply(ws.path(), reply, &shown()) {
        Step::Edit {
            blocks,
            definitions,
            unterminated,
        } => {
            assert_eq!(blocks.len(), 1);
            assert_eq!(blocks[0].applied_to.as_deref(), Some("textkit/truncate.py"));
            assert!(definitions.is_empty());
            assert_eq!(unterminated, 0);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ws.diff().unwrap(), task.patch);
}

#[test]
fn a_whole_function_in_a_code_fence_gives_the_gold_patch() {
    let (_dir, ws, task) = textkit();
    let original = std::fs::read_to_string(ws.path().join("textkit/truncate.py")).unwrap();
    let start = original.find("def truncate(").unwrap();
    let end = original[start..]
        .find("\n\n\n")
        .map_or(original.len(), |e| start + e + 1);
    let fixed = original[start..end].replace("if len(text) < width:", "if len(text) <= width:");
    let reply = format!("Here is the fixed function:\n\n```python\n{fixed}```\n");
    match apply_reply(ws.path(), &reply, &shown()) {
        Step::Edit {
            blocks,
            definitions,
            ..
        } => {
            assert!(blocks.is_empty());
            assert_eq!(definitions.len(), 1);
            assert_eq!(
                definitions[0].applied_to.as_deref(),
                Some("textkit/truncate.py"),
                "{:?}",
                definitions[0]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ws.diff().unwrap(), task.patch);
}

#[test]
fn a_reply_without_edits_changes_nothing() {
    let (_dir, ws, _) = textkit();
    apply_reply(ws.path(), "I am not sure what causes this.", &shown());
    assert_eq!(ws.diff().unwrap(), "");
}
