//! The Fixer's rounds: its candidates judged by execution, then repaired.
//! Each round's new distinct patches are run against the accepted
//! reproduction test, each in its own worktree and sandbox, prepared like
//! the task's. When none passes and rounds are left (`[fixer] rounds`), a
//! repair round shows the Fixer the nearest misses (a patch of any round
//! that passes the test but breaks other tests, with what the first of
//! those printed; then the round's failing patches, with what the test
//! printed; or, when none applied cleanly, the rejected edits and why)
//! and samples new candidates from the same
//! conversation, so the shared prompt is not evaluated again. It stops at
//! the first round with a passing candidate. Without a reproduction test
//! there is nothing to judge by, and one round is all.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

use super::{
    generate_round, Attempt, Distinct, Evidence, FixError, FixerSettings, Fixes, Round, RoundSpec,
    Status,
};
use crate::aci::{check, Location, SubmittedTest};
use crate::agents::judge::{Regression, Trial};
use crate::agents::workplace::Workplace;
use crate::agents::{evidence, parallel};
use crate::engine::{Conversation, Sampling};
use crate::env::task::TaskEnv;
use crate::trajectory::Trajectory;

/// Earlier candidates shown in a repair round: the best few, so the
/// prompt stays within a small model's context.
pub const MAX_ATTEMPTS_SHOWN: usize = 2;

/// Lines of an earlier candidate's diff shown.
pub const ATTEMPT_PATCH_LINES: usize = 30;

/// Lines of an earlier candidate's failing run shown.
pub const ATTEMPT_FAILURE_LINES: usize = 12;

/// Broken regression tests named per earlier candidate.
pub const MAX_REGRESSIONS_SHOWN: usize = 5;

/// A distinct patch's judgement: its index, whether the reproduction test
/// passes (None: it could not be run), the failure's lines (or why it
/// could not run), the regression tests it breaks, whether each other
/// accepted test passes.
type Judgement = (usize, Option<bool>, String, Vec<String>, Vec<bool>);

/// Where candidates are judged: the trial, and where worktrees go.
struct Judge<'a> {
    trial: Trial<'a>,
    /// Worktrees and layers go under it.
    scratch: &'a Path,
    /// Test runs at once.
    runs: usize,
}

impl Judge<'_> {
    /// Runs the test with each patch ([`parallel::map`]): whether it
    /// passes, and the failure's lines (or why it could not run).
    fn all(
        &self,
        round: usize,
        patches: &[(usize, String)],
        files: &BTreeSet<&str>,
    ) -> Vec<Judgement> {
        let judged = parallel::map(self.runs, patches, |_, (i, patch)| {
            let dir = self.scratch.join(format!("judge-{round}-{i}"));
            let layer = self.scratch.join(format!("judge-{round}-{i}-layer"));
            self.trial.judge(patch, &dir, &layer)
        });
        patches
            .iter()
            .zip(judged)
            .map(|((i, _), judged)| match judged {
                Some(Ok(j)) => {
                    // What failed: the reproduction test, else the first
                    // regression test broken.
                    let failure = match j.regressions.first() {
                        _ if j.fixed != Some(true) => evidence::excerpt_in(&j.output, files),
                        Some(id) => evidence::test_excerpt_in(&j.regression_output, id, files)
                            .unwrap_or_default(),
                        None => String::new(),
                    };
                    (*i, j.fixed, failure, j.regressions, j.others)
                }
                Some(Err(e)) => (
                    *i,
                    None,
                    format!("it could not be run: {e}"),
                    Vec::new(),
                    Vec::new(),
                ),
                None => (*i, None, "its run panicked".into(), Vec::new(), Vec::new()),
            })
            .collect()
    }
}

/// The earlier candidates a repair round shows, at most
/// [`MAX_ATTEMPTS_SHOWN`]: first those of any round up to `round` that
/// pass the reproduction test but break regression tests (one step from
/// a fix: fewest broken, then latest, then most votes), then the
/// distinct patches of `round` that failed the test, most votes first;
/// when fewer, the candidates of `round` rejected for a syntax error.
pub fn attempts(fixes: &Fixes, round: usize) -> Vec<Attempt> {
    let mut breaking: Vec<&Distinct> = fixes
        .distinct
        .iter()
        .filter(|d| d.round <= round && d.reproduction == Some(true) && !d.regressions.is_empty())
        .collect();
    breaking.sort_by_key(|d| {
        (
            d.regressions.len(),
            std::cmp::Reverse(d.round),
            std::cmp::Reverse(d.members.len()),
        )
    });
    let mut failed: Vec<&Distinct> = fixes
        .distinct
        .iter()
        .filter(|d| d.round == round && d.reproduction == Some(false))
        .collect();
    failed.sort_by_key(|d| std::cmp::Reverse(d.members.len()));
    let mut out: Vec<Attempt> = breaking
        .into_iter()
        .chain(failed)
        .take(MAX_ATTEMPTS_SHOWN)
        .map(|d| Attempt {
            edit: head(&d.patch, ATTEMPT_PATCH_LINES),
            diff: true,
            outcome: if d.reproduction == Some(true) {
                let shown: Vec<&str> = d
                    .regressions
                    .iter()
                    .take(MAX_REGRESSIONS_SHOWN)
                    .map(String::as_str)
                    .collect();
                let mut outcome = format!(
                    "With it the test passes, but these tests, which passed before, now fail:\n{}",
                    shown.join("\n")
                );
                if !d.failure.is_empty() {
                    outcome.push_str("\n\n");
                    outcome.push_str(&tail(&d.failure, ATTEMPT_FAILURE_LINES));
                }
                outcome
            } else {
                format!(
                    "With it the test still fails:\n{}",
                    tail(&d.failure, ATTEMPT_FAILURE_LINES)
                )
            },
        })
        .collect();
    for c in fixes.candidates.iter().filter(|c| c.round == round) {
        if out.len() >= MAX_ATTEMPTS_SHOWN {
            break;
        }
        if let Status::SyntaxError(why) = &c.status {
            let edit = c
                .reply
                .split_once('\n')
                .map_or(c.reply.as_str(), |(_, rest)| rest);
            out.push(Attempt {
                edit: head(edit.trim(), ATTEMPT_PATCH_LINES),
                diff: false,
                outcome: format!("It was rejected: it breaks the syntax ({why})."),
            });
        }
    }
    out
}

fn head(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let mut out = all[..all.len().min(lines)].join("\n");
    if all.len() > lines {
        out.push_str(&format!("\n... ({} more lines)", all.len() - lines));
    }
    out
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Python's compile of `paths` in `root`, in the sandbox with the task's
/// interpreter ([`check::compile_error`]); a check that cannot run says
/// nothing.
fn compile_error(root: &Path, env: &TaskEnv, paths: &[String]) -> Option<String> {
    match check::compile_error(root, env, paths) {
        Ok(e) => e,
        Err(e) => {
            tracing::debug!("the compile check could not run: {e}");
            None
        }
    }
}

/// What the Fixer is given by the stages before it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Inputs<'a> {
    /// The location sets (the first is the localizer's choice), each's
    /// spans best first; the candidates of a round are spread over them.
    pub location_sets: &'a [Vec<Location>],
    /// The accepted reproduction test, if any.
    pub test: Option<&'a SubmittedTest>,
    /// The other accepted reproduction tests.
    pub other_tests: &'a [SubmittedTest],
}

/// The Fixer: its rounds (see the module's documentation). `inputs.test`
/// is the accepted reproduction test; the Fixer is shown it and its
/// failure on the base commit, and candidates are judged by it, each test
/// run limited to `timeout_s`. The workspace is left as it was.
pub fn run(
    conversation: &mut dyn Conversation,
    task: &Workplace<'_>,
    inputs: Inputs<'_>,
    settings: &FixerSettings,
    sampling: &Sampling,
    timeout_s: u64,
    trajectory: &mut Trajectory,
) -> Result<Fixes, FixError> {
    let Workplace {
        issue,
        ws,
        env,
        scratch,
        parallel_runs,
    } = *task;
    let Inputs {
        location_sets,
        test,
        other_tests,
    } = inputs;
    let all = crate::index::python_files(ws.path()).unwrap_or_default();
    let files: BTreeSet<&str> = all.iter().map(String::as_str).collect();
    let evidence = test.map(|t| Evidence {
        path: t.path.clone(),
        text: t.text.clone(),
        failure: evidence::excerpt_in(&t.output, &files),
    });
    let mut fixes = Fixes::empty(settings.edit_format);
    // Files that do not compile on the base commit (Python 2 code, a file
    // for another interpreter) are not held against a candidate.
    let mut located: Vec<String> = Vec::new();
    for l in location_sets.iter().flatten() {
        if !located.contains(&l.path) {
            located.push(l.path.clone());
        }
    }
    let broken_at_base: Vec<String> = located
        .iter()
        .filter(|p| compile_error(ws.path(), env, std::slice::from_ref(*p)).is_some())
        .cloned()
        .collect();
    let compile = |root: &Path, paths: &[String]| -> Option<String> {
        let paths: Vec<String> = paths
            .iter()
            .filter(|p| p.ends_with(".py") && !broken_at_base.contains(p))
            .cloned()
            .collect();
        if paths.is_empty() {
            return None;
        }
        compile_error(root, env, &paths)
    };
    let rounds = if test.is_some() {
        settings.rounds.max(1)
    } else {
        1
    };
    let mut shown: Vec<Attempt> = Vec::new();
    let mut regression: Option<Regression> = None;
    for round in 1..=rounds {
        let before = fixes.distinct.len();
        let spec = RoundSpec {
            root: ws.path(),
            base: ws.base_commit(),
            issue,
            location_sets,
            settings,
            sampling,
            compile: Some(&compile),
        };
        generate_round(
            conversation,
            &spec,
            evidence.as_ref(),
            &shown,
            round,
            &mut fixes,
            trajectory,
        )?;
        let candidates = fixes.candidates.iter().filter(|c| c.round == round).count();
        let mut summary = Round {
            round,
            candidates,
            distinct: fixes.distinct.len() - before,
            judged: 0,
            passing: 0,
        };
        if let Some(test) = test {
            let patches: Vec<(usize, String)> = (before..fixes.distinct.len())
                .map(|i| (i, fixes.distinct[i].patch.clone()))
                .collect();
            // The regression tests of the located files, run once on the
            // base commit.
            if regression.is_none() {
                regression = Some(Regression::baseline(ws, env, &located, timeout_s));
            }
            let judge = Judge {
                trial: Trial {
                    ws,
                    env,
                    test: Some(test),
                    others: other_tests,
                    regression: regression.as_ref(),
                    timeout_s,
                },
                scratch,
                runs: parallel_runs,
            };
            for (i, passes, failure, regressions, others) in judge.all(round, &patches, &files) {
                let clean = passes == Some(true) && regressions.is_empty();
                if let Some(d) = fixes.distinct.get_mut(i) {
                    d.reproduction = passes;
                    d.failure = failure;
                    d.regressions = regressions;
                    d.other_tests = others;
                }
                summary.judged += usize::from(passes.is_some());
                summary.passing += usize::from(clean);
            }
        }
        tracing::info!(
            "  fixer round {round}: {} candidates, {} new distinct, {} judged, {} pass the \
             reproduction test and break no regression test",
            summary.candidates,
            summary.distinct,
            summary.judged,
            summary.passing
        );
        let passing = summary.passing;
        fixes.rounds.push(summary);
        fixes.regression = regression.as_ref().map(Regression::record);
        if passing > 0 || round == rounds {
            break;
        }
        shown = attempts(&fixes, round);
    }
    Ok(fixes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::fixer::{Candidate, EditFormat};

    #[test]
    fn a_repair_round_shows_the_nearest_misses_then_rejected_edits() {
        let distinct = |patch: &str, members: Vec<usize>, round: usize, reproduction| Distinct {
            patch: patch.into(),
            meaning: String::new(),
            inert: false,
            members,
            round,
            reproduction,
            failure: format!("failure of {patch}"),
            regressions: Vec::new(),
            other_tests: Vec::new(),
        };
        let candidate = |index: usize, round: usize, status: Status| Candidate {
            index,
            round,
            set: 0,
            temperature: 0.0,
            reply: format!("Reasoning: r{index}\nedit {index}"),
            status,
            patch: None,
            dropped: Vec::new(),
        };
        let fixes = Fixes {
            candidates: vec![
                candidate(0, 1, Status::SyntaxError("a.py:3:1: bad".into())),
                candidate(1, 2, Status::SyntaxError("a.py:9:1: bad".into())),
                candidate(2, 2, Status::Kept),
            ],
            distinct: vec![
                distinct("p0", vec![0], 1, Some(false)),
                distinct("p1", vec![2], 2, None),
                distinct("p2", vec![3, 4], 2, Some(false)),
            ],
            ..Fixes::empty(EditFormat::Anchored)
        };
        let got: Vec<(String, bool, String)> = attempts(&fixes, 2)
            .into_iter()
            .map(|a| (a.edit, a.diff, a.outcome))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "p2".to_string(),
                    true,
                    "With it the test still fails:\nfailure of p2".to_string()
                ),
                (
                    "edit 1".to_string(),
                    false,
                    "It was rejected: it breaks the syntax (a.py:9:1: bad).".to_string()
                ),
            ]
        );
        assert_eq!(attempts(&fixes, 1).len(), 2);
        assert!(attempts(&fixes, 3).is_empty());
        // One that passes the test but breaks a regression test comes
        // first, with the tests it breaks.
        let mut more = fixes.clone();
        let mut p3 = distinct("p3", vec![5], 2, Some(true));
        p3.regressions = vec!["tests/test_a.py::test_x".into()];
        more.distinct.push(p3);
        let got: Vec<String> = attempts(&more, 2).into_iter().map(|a| a.outcome).collect();
        assert_eq!(
            got,
            [
                "With it the test passes, but these tests, which passed before, now fail:\n\
                 tests/test_a.py::test_x\n\nfailure of p3",
                "With it the test still fails:\nfailure of p2",
            ]
        );
        // It stays in view in later rounds, before what they failed with;
        // of two, the one that breaks fewer tests first.
        let mut p4 = distinct("p4", vec![6], 1, Some(true));
        p4.regressions = vec![
            "tests/test_a.py::test_x".into(),
            "tests/test_a.py::test_y".into(),
        ];
        more.distinct.push(p4);
        more.distinct.push(distinct("p5", vec![7], 3, Some(false)));
        let got: Vec<String> = attempts(&more, 3).into_iter().map(|a| a.edit).collect();
        assert_eq!(got, ["p3", "p4"]);
        let got: Vec<String> = attempts(&more, 1).into_iter().map(|a| a.edit).collect();
        assert_eq!(got, ["p4", "p0"]);
    }
}
