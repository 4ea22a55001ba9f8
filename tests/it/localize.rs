//! The choosing localizer on a demo task with SmolLM2: the code index's
//! candidates, one grammar-constrained greedy call, the same locations
//! every time; and the candidate ranking finds the demo's gold function.

use crate::common;

use patchwright::agents::localize::{self, LocalizerSettings};
use patchwright::engine::{Backend, Engine, EngineSettings, Sampling};
use patchwright::index::candidates;
use patchwright::index::symbols::CodeIndex;
use patchwright::record::trajectory::Step;
use patchwright::repo::{Repos, Workspace};
use patchwright::trajectory::Trajectory;

type R = Result<(), Box<dyn std::error::Error>>;

#[test]
fn smollm2_chooses_the_same_candidates_every_time() -> R {
    let task = common::demo_task("demo__cachekit-1");
    let dir = tempfile::tempdir()?;
    let repos = Repos::new(&common::root().join("datasets/demo/repos"))?;
    let ws = Workspace::create(
        &repos.locate(&task.repo)?,
        &task.base_commit,
        &dir.path().join("ws"),
    )?;
    let index = CodeIndex::build(ws.path())?;
    let ranked = candidates::rank(&index, ws.path(), &task.problem_statement).candidates;
    // The gold patch changes memoize; the ranking alone puts it first.
    assert_eq!(
        (ranked[0].path.as_str(), ranked[0].symbol.as_str()),
        ("cachekit/decorators.py", "memoize")
    );
    let engine = Engine::load(
        &common::test_model(),
        &EngineSettings {
            context: 4096,
            threads: 0,
            ..Default::default()
        },
    )?;
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut conversation = engine.conversation(1, localize::REPLY_TOKENS as usize)?;
        let mut trajectory = Trajectory::new(&task.instance_id);
        let choice = localize::choose(
            conversation.as_mut(),
            &task.issue(),
            &index,
            &ranked,
            &LocalizerSettings::default(),
            &Sampling::default(),
            &mut trajectory,
        )?;
        let replies: Vec<String> = trajectory
            .steps
            .iter()
            .filter_map(|s| match &s.step {
                Step::ModelCall(c) => Some(c.response.clone()),
                _ => None,
            })
            .collect();
        // One call, its reply a label sequence the grammar allows.
        assert_eq!(replies.len(), 1);
        let shown = choice.shown.len();
        assert!(
            localize::label_options(shown, localize::MAX_PICKS).contains(&replies[0]),
            "{replies:?}"
        );
        assert_eq!(choice.source, "localizer");
        assert!(!choice.locations.is_empty() && choice.locations.len() <= localize::MAX_PICKS);
        runs.push((replies, choice.locations));
    }
    assert_eq!(runs[0], runs[1]);
    Ok(())
}
