//! MASAI's Ranker: every distinct candidate is judged — the accepted
//! reproduction tests, and the regression tests (tests of the touched
//! modules that pass on the base commit) — by the Fixer's rounds or, for
//! those the rounds did not judge, in its own worktree in parallel
//! sandboxes; the candidates are ordered: most accepted tests passed,
//! then changing code (a patch that rewrites only comments, docstrings or
//! formatting comes after), then breaking no test that passed before,
//! then most candidates agreeing, then fewest regressions, then most
//! lines written alike by the other candidates (a partial vote), then the
//! model's chain-of-thought comparison of those still tied. It never sees
//! FAIL_TO_PASS, PASS_TO_PASS or the gold patch.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::budget::{self, Budget};
use super::call::{self, Call};
use super::fixer::{Distinct, Fixes};
use super::judge::{JudgeError, Regression, Trial};
use super::parallel;
use super::preamble;
use super::workplace::Workplace;
use crate::aci::SubmittedTest;
use crate::dataset::Issue;
use crate::engine::{grammar, Conversation, EngineError, Message, Sampling};
use crate::record::trajectory::{Cut, Step, Trim};
use crate::trajectory::Trajectory;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankerSettings {
    /// Ask the model to choose among candidates still tied.
    pub compare: bool,
    /// Wall-clock limit of one test command, in seconds.
    pub test_timeout_s: u64,
}

impl Default for RankerSettings {
    fn default() -> Self {
        RankerSettings {
            compare: true,
            test_timeout_s: 300,
        }
    }
}

/// How one distinct candidate fared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Index into `Fixes::distinct`.
    pub distinct: usize,
    /// Candidates that produced this patch.
    pub votes: usize,
    /// Whether it means what the base does ([`Distinct::inert`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inert: bool,
    /// Whether the reproduction test passes with it (None: no test).
    pub reproduction: Option<bool>,
    /// Whether each other accepted test passes with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_tests: Vec<bool>,
    /// Regression tests that pass on the base commit and not with it.
    pub regressions: Vec<String>,
    /// How far the other candidates write what it writes: [`agreement`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub agreement: f64,
    /// Why it could not be tried, if it could not (a [`RankError`]'s
    /// message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Evaluation {
    /// Distinct candidate `i`, `d`, not tried yet.
    fn of(i: usize, d: &Distinct) -> Evaluation {
        Evaluation {
            distinct: i,
            votes: d.members.len(),
            inert: d.inert,
            reproduction: None,
            other_tests: Vec::new(),
            regressions: Vec::new(),
            agreement: 0.0,
            error: None,
        }
    }

    /// The accepted tests it passes: its row of the candidates x tests
    /// matrix, summed. A test that is wrong (one no fix can pass, or one
    /// every patch passes) moves every candidate alike, so it cannot
    /// decide alone.
    pub fn tests_passed(&self) -> usize {
        usize::from(self.reproduction == Some(true))
            + self.other_tests.iter().filter(|&&p| p).count()
    }
}

/// The model's choice among tied candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The tied candidates (indexes into `Fixes::distinct`), as numbered
    /// for the model (1-based).
    pub tied: Vec<usize>,
    pub chosen: usize,
    pub reasoning: String,
    /// Tied candidates left out of the prompt because they did not fit the
    /// context (the last in `tied`'s order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<usize>,
    /// Why the model was not asked (fewer than two candidates fit): the
    /// first of `tied` is chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    /// Indexes into `Fixes::distinct`, best first.
    pub order: Vec<usize>,
    pub evaluations: Vec<Evaluation>,
    /// Regression test files the candidates were judged by: the rounds'
    /// (those of the located files) when the rounds judged every
    /// candidate, else those of the files the unjudged ones touch.
    pub regression_files: Vec<String>,
    /// Tests among them passing on the base commit.
    pub base_passing: usize,
    /// Why no regression test was run per candidate, when some were found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regression_skipped: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
}

#[derive(Debug, thiserror::Error)]
pub enum RankError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Grammar(#[from] grammar::GrammarError),
    /// A candidate or the base commit could not be tried.
    #[error(transparent)]
    Judge(#[from] JudgeError),
}

/// Tries every distinct candidate and orders them. A candidate the
/// Fixer's rounds already judged (its `reproduction`, other tests and
/// regressions) is not run again; the others are each tried in a
/// worktree prepared like the task's, at most the workplace's
/// `parallel_runs` at once, against the regression tests of the files
/// they touch (run on the base commit only when some candidate is
/// unjudged).
pub fn rank(
    conversation: &mut dyn Conversation,
    task: &Workplace<'_>,
    fixes: &Fixes,
    tests: Tests<'_>,
    settings: &RankerSettings,
    sampling: &Sampling,
    trajectory: &mut Trajectory,
) -> Result<Ranking, RankError> {
    let judged = |d: &Distinct| tests.reproduction.is_some() && d.reproduction.is_some();
    let unjudged: Vec<(usize, &Distinct)> = fixes
        .distinct
        .iter()
        .enumerate()
        .filter(|(_, d)| !judged(d))
        .collect();
    let (fresh, regression) = if unjudged.is_empty() {
        (Vec::new(), fixes.regression.clone())
    } else {
        let touched: Vec<String> = unjudged
            .iter()
            .flat_map(|(_, d)| crate::repo::touched_files(&d.patch))
            .collect();
        let baseline = Regression::baseline(task.ws, task.env, &touched, settings.test_timeout_s);
        let fresh = try_all(task, &baseline, tests, settings.test_timeout_s, &unjudged);
        (fresh, Some(baseline.record()))
    };
    let mut evaluations: Vec<Evaluation> = fixes
        .distinct
        .iter()
        .enumerate()
        .map(|(i, d)| Evaluation {
            reproduction: d.reproduction,
            other_tests: d.other_tests.clone(),
            regressions: d.regressions.clone(),
            ..Evaluation::of(i, d)
        })
        .collect();
    for e in fresh {
        if let Some(slot) = evaluations.get_mut(e.distinct) {
            *slot = e;
        }
    }
    let agreements = agreement(fixes, &evaluations);
    for (e, a) in evaluations.iter_mut().zip(agreements) {
        e.agreement = a;
    }
    let regression = regression.unwrap_or_default();

    let (mut order, tied) = order_of(&evaluations);
    let mut comparison = None;
    if settings.compare && tied.len() > 1 {
        let c = compare(conversation, task.issue, fixes, &tied, sampling, trajectory)?;
        order.retain(|&i| i != c.chosen);
        order.insert(0, c.chosen);
        comparison = Some(c);
    }
    Ok(Ranking {
        order,
        evaluations,
        regression_files: regression.files,
        base_passing: regression.base_passing,
        regression_skipped: regression.skipped,
        comparison,
    })
}

/// The candidates not judged in the rounds (index, patch), each tried in
/// its own worktree: the accepted tests, then the regression tests of
/// `baseline`.
fn try_all(
    task: &Workplace<'_>,
    baseline: &Regression,
    tests: Tests<'_>,
    timeout_s: u64,
    unjudged: &[(usize, &Distinct)],
) -> Vec<Evaluation> {
    let trial = Trial {
        ws: task.ws,
        env: task.env,
        test: tests.reproduction,
        others: if tests.reproduction.is_some() {
            tests.others
        } else {
            &[]
        },
        regression: Some(baseline),
        timeout_s,
    };
    let tried = parallel::map(task.parallel_runs, unjudged, |_, &(i, d)| {
        let dir = task.scratch.join(format!("candidate-{i}"));
        let layer = task.scratch.join(format!("candidate-{i}-layer"));
        trial.judge(&d.patch, &dir, &layer)
    });
    unjudged
        .iter()
        .zip(tried)
        .map(|(&(i, d), tried)| {
            let of = Evaluation::of(i, d);
            match tried {
                Some(Ok(j)) => Evaluation {
                    reproduction: j.fixed,
                    other_tests: j.others,
                    regressions: j.regressions,
                    ..of
                },
                Some(Err(e)) => Evaluation {
                    error: Some(e.to_string()),
                    ..of
                },
                None => Evaluation {
                    error: Some("its run panicked".into()),
                    ..of
                },
            }
        })
        .collect()
}

/// How an evaluation ranks: tried, then most accepted tests passed (its
/// row of the candidates x tests matrix), then changing code (a patch
/// meaning what the base does — a docstring or a comment rewritten —
/// cannot fix a behaviour, however many candidates wrote it, and breaks
/// no test because it changes nothing), then breaking no test that passed
/// before, then most candidates agreeing (votes weigh where the tests
/// cannot tell candidates apart), then fewest regressions, then the most
/// [`agreement`] ([`thousandths`]).
///
/// Among patches that break tests, how many they break says less than how
/// many samples agree: an issue that asks for new behaviour breaks the
/// tests pinning the old one, and every fix breaks them (pytest-5227, a
/// new log format: the 3 resolving samples broke 5 tests, a wrong patch
/// of 2 votes broke 4).
fn key(
    e: &Evaluation,
) -> (
    bool,
    std::cmp::Reverse<usize>,
    bool,
    bool,
    std::cmp::Reverse<usize>,
    usize,
    std::cmp::Reverse<u64>,
) {
    (
        e.error.is_some(),
        std::cmp::Reverse(e.tests_passed()),
        e.inert,
        !e.regressions.is_empty(),
        std::cmp::Reverse(e.votes),
        e.regressions.len(),
        std::cmp::Reverse(thousandths(e.agreement)),
    )
}

/// An agreement in thousandths: sums equal but for rounding tie.
fn thousandths(agreement: f64) -> u64 {
    (agreement * 1000.0).round() as u64
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// A partial vote, for candidates no test and no whole vote tells apart:
/// for each distinct candidate, the other code-changing, tried candidates'
/// [`written_lines`] it shares, each other patch counting the Jaccard
/// index of the two sets (shared lines over all lines either writes)
/// times the candidates that wrote it. Samples that fix the same thing
/// write some of the same lines even when they differ elsewhere
/// (sphinx-8721 at 8 x 1: the three resolving patches each write the
/// `viewcode_enable_epub` check that some others write too, and no two are
/// one meaning); a patch no other sample comes near scores 0.
fn agreement(fixes: &Fixes, evaluations: &[Evaluation]) -> Vec<f64> {
    let lines: Vec<Option<BTreeSet<String>>> = evaluations
        .iter()
        .map(|e| {
            let voter = !e.inert && e.error.is_none();
            let d = fixes.distinct.get(e.distinct).filter(|_| voter)?;
            Some(written_lines(&d.patch))
        })
        .collect();
    let jaccard = |a: &BTreeSet<String>, b: &BTreeSet<String>| {
        let either = a.union(b).count();
        match either {
            0 => 0.0,
            _ => a.intersection(b).count() as f64 / either as f64,
        }
    };
    lines
        .iter()
        .enumerate()
        .map(|(i, mine)| {
            let Some(mine) = mine else { return 0.0 };
            lines
                .iter()
                .zip(evaluations)
                .enumerate()
                .filter_map(|(j, (theirs, other))| {
                    let theirs = theirs.as_ref().filter(|_| j != i)?;
                    Some(other.votes as f64 * jaccard(mine, theirs))
                })
                .sum()
        })
        .collect()
}

/// The lines a patch adds, each as Python's tokens read it: a trailing
/// comment dropped, the tokens one space apart (so `y=f( x )` and
/// `y = f(x)` are one line), blank and comment-only lines left out.
fn written_lines(patch: &str) -> BTreeSet<String> {
    patch
        .lines()
        .filter(|l| !l.starts_with("+++ "))
        .filter_map(|l| l.strip_prefix('+'))
        .map(|l| tokens(l).join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

/// A line's tokens up to a comment: words (letters, digits, `_`), string
/// literals whole, and each other character alone.
fn tokens(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut chars = line.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let end = match c {
            '#' => break,
            c if c.is_whitespace() => continue,
            '"' | '\'' => {
                let mut escaped = false;
                let mut end = line.len();
                for (i, d) in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if d == '\\' {
                        escaped = true;
                    } else if d == c {
                        end = i + d.len_utf8();
                        break;
                    }
                }
                end
            }
            c if c.is_alphanumeric() || c == '_' => {
                let mut end = at + c.len_utf8();
                while let Some(&(i, d)) = chars.peek() {
                    if !(d.is_alphanumeric() || d == '_') {
                        break;
                    }
                    end = i + d.len_utf8();
                    chars.next();
                }
                end
            }
            c => at + c.len_utf8(),
        };
        out.push(&line[at..end]);
    }
    out
}

/// The evaluations' indexes best first (ties by index), and those tied
/// with the best.
pub fn order_of(evaluations: &[Evaluation]) -> (Vec<usize>, Vec<usize>) {
    let mut order: Vec<usize> = (0..evaluations.len()).collect();
    order.sort_by_key(|&i| (key(&evaluations[i]), i));
    let tied = match order.first() {
        Some(&best) => order
            .iter()
            .copied()
            .take_while(|&i| key(&evaluations[i]) == key(&evaluations[best]))
            .collect(),
        None => Vec::new(),
    };
    (order, tied)
}

/// The accepted reproduction tests a candidate is judged by.
#[derive(Debug, Clone, Copy)]
pub struct Tests<'a> {
    /// The chosen one, shown to the Fixer.
    pub reproduction: Option<&'a SubmittedTest>,
    /// The others.
    pub others: &'a [SubmittedTest],
}

/// Most tokens of the comparison's reasoning and choice.
const COMPARE_TOKENS: u32 = 192;

/// The comparison's prompt over `tied` (indexes into `fixes.distinct`),
/// showing `issue` (whole or cut): the shared preamble, then the role, the
/// candidates' diffs and the question.
pub fn compare_messages(issue: &str, fixes: &Fixes, tied: &[usize]) -> Vec<Message> {
    let listed: Vec<String> = tied
        .iter()
        .enumerate()
        .map(|(n, &i)| {
            format!(
                "Candidate {}:\n```diff\n{}```",
                n + 1,
                fixes.distinct.get(i).map_or("", |d| d.patch.as_str())
            )
        })
        .collect();
    preamble::messages(
        issue,
        &format!(
            "You review patches.\n\n{}\n\nWhich candidate fixes the issue best? Start with \
             `Reasoning:` and one line comparing them, then `Best:` and the candidate's number.",
            listed.join("\n\n")
        ),
    )
}

/// A comparison's prompt and how many of the tied candidates it shows.
type Shown = (Vec<Message>, usize);

/// The comparison's prompt fitted to the context: as many of `tied` as
/// fit, in their order (at least two), beside the issue as every stage
/// shows it ([`preamble::shared_issue`]); when not even two fit there, two
/// beside the issue cut further. `None` (with the record of why) when
/// fewer than two fit.
fn fit_compare(
    conversation: &dyn Conversation,
    issue: &str,
    fixes: &Fixes,
    tied: &[usize],
) -> Result<(Option<Shown>, Option<Trim>), RankError> {
    let issue = issue.trim();
    let full = compare_messages(issue, fixes, tied);
    let Some(budget) = Budget::of(conversation, COMPARE_TOKENS as usize) else {
        return Ok((Some((full, tied.len())), None));
    };
    let (full_tokens, fits) = budget.measure(conversation, &full)?;
    let shared = preamble::shared_issue(conversation, issue)?;
    if fits && shared.cut.is_none() {
        return Ok((Some((full, tied.len())), None));
    }
    let left_out = |k: usize| {
        tied[k..]
            .iter()
            .map(|&distinct| Cut::Candidate { distinct })
            .collect::<Vec<_>>()
    };
    let shown_with = |msgs: Vec<Message>, cut: Option<Cut>, k: usize| {
        let tokens = conversation.count_tokens(&msgs)?;
        let mut cuts: Vec<Cut> = cut.into_iter().collect();
        cuts.extend(left_out(k));
        Ok::<_, RankError>((
            Some((msgs, k)),
            Some(budget.trim("ranker", full_tokens, tokens, cuts)),
        ))
    };
    for k in (2..=tied.len()).rev() {
        let msgs = compare_messages(&shared.text, fixes, &tied[..k]);
        if budget.measure(conversation, &msgs)?.1 {
            return shown_with(msgs, shared.cut.clone(), k);
        }
    }
    // Not even two candidates fit beside the shared issue: this stage cuts
    // it further, and shares only the issue's head with the others.
    let two = &tied[..tied.len().min(2)];
    let fitted = budget::fit_issue(conversation, &budget, issue, |t| {
        compare_messages(t, fixes, two)
    })?;
    if let Some(cut) = fitted {
        return shown_with(compare_messages(&cut.text, fixes, two), cut.cut, two.len());
    }
    let shortest = budget::cut_issue(issue, budget::MIN_ISSUE_CHARS);
    let smallest = compare_messages(&shortest.text, fixes, &tied[..tied.len().min(2)]);
    let tokens = conversation.count_tokens(&smallest)?;
    let mut cuts: Vec<Cut> = shortest.cut.into_iter().collect();
    cuts.extend(left_out(1));
    Ok((None, Some(budget.trim("ranker", full_tokens, tokens, cuts))))
}

/// Asks the model which of the `tied` candidates is best, showing as many
/// as fit the context; with fewer than two fitting, the first is taken
/// without a call.
fn compare(
    conversation: &mut dyn Conversation,
    issue: &Issue,
    fixes: &Fixes,
    tied: &[usize],
    sampling: &Sampling,
    trajectory: &mut Trajectory,
) -> Result<Comparison, RankError> {
    let (fitted, trim) = fit_compare(conversation, &issue.problem_statement, fixes, tied)?;
    if let Some(t) = &trim {
        trajectory.record(Step::Trimmed(Box::new(t.clone())));
    }
    let Some((msgs, shown)) = fitted else {
        let (tokens, context) = trim.map_or((0, 0), |t| (t.prompt_tokens, t.context));
        return Ok(Comparison {
            tied: tied.to_vec(),
            chosen: tied.first().copied().unwrap_or(0),
            reasoning: String::new(),
            left_out: tied.get(1..).unwrap_or_default().to_vec(),
            skipped: Some(format!(
                "two candidates and the shortest issue take {tokens} tokens, more than the \
                 context of {context} holds with {COMPARE_TOKENS} kept for the reply: the first \
                 in order is taken"
            )),
        });
    };
    let left_out = tied[shown..].to_vec();
    let tied_all = tied;
    let tied = &tied[..shown];
    let numbers: Vec<String> = (1..=tied.len()).map(|n| n.to_string()).collect();
    let g = format!(
        "root ::= \"Reasoning: \" [^\\n]{{1,{}}} \"\\nBest: \" ({})\n",
        grammar::MAX_THOUGHT_CHARS,
        numbers
            .iter()
            .map(|n| grammar::literal(n))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let generation = call::constrained(
        conversation,
        trajectory,
        Call {
            agent: "ranker",
            messages: msgs,
            sampling: Sampling {
                max_tokens: COMPARE_TOKENS,
                temperature: 0.0,
                ..sampling.clone()
            },
            n: 1,
            temperatures: None,
            grammar: &g,
        },
    )?;
    let text = generation
        .candidates
        .first()
        .map(|c| c.text.clone())
        .unwrap_or_default();
    let number = text
        .rsplit_once("Best: ")
        .and_then(|(_, n)| n.trim().parse::<usize>().ok())
        .filter(|n| (1..=tied.len()).contains(n))
        .unwrap_or(1);
    let reasoning = text
        .strip_prefix("Reasoning: ")
        .and_then(|t| t.split_once("\nBest:"))
        .map(|(r, _)| r.trim().to_string())
        .unwrap_or_default();
    Ok(Comparison {
        tied: tied_all.to_vec(),
        chosen: tied[number - 1],
        reasoning,
        left_out,
        skipped: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_rank_by_the_tests_they_pass_so_one_wrong_test_cannot_decide() {
        // (reproduction, other tests, regressions, inert, votes) per
        // candidate; the order wanted.
        type Row<'a> = (Option<bool>, &'a [bool], usize, bool, usize);
        #[rustfmt::skip]
        let cases: &[(&str, &[Row], &[usize])] = &[
            ("one test: it decides, then breaking no test, then votes",
             &[(Some(false), &[], 0, false, 5), (Some(true), &[], 1, false, 1),
               (Some(true), &[], 0, false, 1)], &[2, 1, 0]),
            // The chosen test is wrong (no candidate passes it): the two
            // others pick the candidate that passes both.
            ("an invalid chosen test",
             &[(Some(false), &[false, false], 0, false, 4), (Some(false), &[true, true], 0, false, 1),
               (Some(false), &[true, false], 0, false, 2)], &[1, 2, 0]),
            // The chosen test passes a wrong candidate: two tests to one.
            ("the chosen test outvoted",
             &[(Some(true), &[false, false], 0, false, 3), (Some(false), &[true, true], 0, false, 1)],
             &[1, 0]),
            // Every test alike: breaking none, then votes.
            ("tests cannot tell them apart",
             &[(Some(true), &[true], 2, false, 9), (Some(true), &[true], 0, false, 1),
               (Some(true), &[true], 0, false, 3)], &[2, 1, 0]),
            // Both break tests: votes before the count, the count last.
            ("no test: among patches that break tests, votes",
             &[(None, &[], 1, false, 1), (None, &[], 3, false, 2), (None, &[], 2, false, 2)],
             &[2, 1, 0]),
            ("no test: votes",
             &[(None, &[], 0, false, 1), (None, &[], 0, false, 2)], &[1, 0]),
            // scikit-learn-13439 at 16 x 1: six samples rewrote a docstring
            // alone; the one that changed code comes first all the same.
            ("no test: a docstring-only patch's votes do not count",
             &[(None, &[], 0, true, 6), (None, &[], 0, false, 1), (None, &[], 0, false, 2)],
             &[2, 1, 0]),
            // A test that an inert patch passes (a docstring the test reads)
            // still decides.
            ("a test decides before what a patch means",
             &[(Some(false), &[], 0, false, 3), (Some(true), &[], 0, true, 1)], &[1, 0]),
            // pytest-5227 at 8 x 1: every patch that changes the log format
            // breaks tests pinning the old one, the 3 resolving samples 5 of
            // them; the inert patch breaks none because it changes nothing,
            // and comes last all the same.
            ("no test: an inert patch that breaks nothing comes after code that breaks tests",
             &[(None, &[], 5, false, 3), (None, &[], 4, false, 2), (None, &[], 0, true, 1)],
             &[0, 1, 2]),
        ];
        for (name, rows, want) in cases {
            let evaluations: Vec<Evaluation> = rows
                .iter()
                .enumerate()
                .map(
                    |(i, &(reproduction, others, regressions, inert, votes))| Evaluation {
                        distinct: i,
                        votes,
                        inert,
                        reproduction,
                        other_tests: others.to_vec(),
                        regressions: (0..regressions).map(|k| format!("t{k}")).collect(),
                        agreement: 0.0,
                        error: None,
                    },
                )
                .collect();
            assert_eq!(order_of(&evaluations).0, *want, "{name}");
        }
    }

    #[test]
    fn written_lines_are_read_as_python_reads_them() {
        let patch = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,6 @@\n \
                     def f(x):\n-    return x\n+    y  =  x # why\n+\n+    # only a comment\n+    \
                     s = '#not a comment' # but this is\n+    t = \"a\\\"#b\"\n+    z=f( x )\n+++x\n+    return y\n";
        let lines: Vec<String> = written_lines(patch).into_iter().collect();
        assert_eq!(
            lines,
            [
                "+ + x",
                "return y",
                "s = '#not a comment'",
                "t = \"a\\\"#b\"",
                "y = x",
                "z = f ( x )"
            ]
        );
    }

    #[test]
    fn candidates_no_test_or_vote_tells_apart_rank_by_the_lines_others_write_alike() {
        // (patch lines written, votes, inert, tried) per candidate; the
        // agreement of each, in thousandths; the order wanted.
        type Row<'a> = (&'a [&'a str], usize, bool, bool);
        type Case<'a> = (&'a str, &'a [Row<'a>], &'a [u64], &'a [usize]);
        #[rustfmt::skip]
        let cases: &[Case] = &[
            // sphinx-8721's shape: the resolving patches share a check.
            ("a line two patches write",
             &[(&["if a:", "return"], 1, false, true), (&["if b:", "x = 1"], 1, false, true),
               (&["if b:", "continue"], 1, false, true)],
             &[0, 333, 333], &[1, 2, 0]),
            // A comment or spacing does not make a line another.
            ("the same line, commented and spaced otherwise",
             &[(&["y = f(x)"], 1, false, true), (&["y=f( x ) # fix"], 1, false, true),
               (&["y = g(x)"], 1, false, true)],
             &[1000, 1000, 0], &[0, 1, 2]),
            // Each other candidate weighs by the samples that wrote it; a
            // patch's own votes count in `votes`, not here, and come first.
            ("a patch written by three samples weighs three",
             &[(&["a = 1"], 1, false, true), (&["b = 1"], 1, false, true),
               (&["a = 1", "c = 1"], 1, false, true), (&["b = 1", "d = 1"], 3, false, true)],
             &[500, 1500, 500, 500], &[3, 1, 0, 2]),
            // Neither a patch meaning the base's nor one that could not be
            // tried votes; they score 0 themselves.
            ("an inert or untried patch has no say",
             &[(&["a = 1"], 1, false, true), (&["b = 1"], 1, false, true),
               (&["a = 1"], 4, true, true), (&["a = 1"], 4, false, false)],
             &[0, 0, 0, 0], &[0, 1, 2, 3]),
        ];
        for (name, rows, want_agreement, want_order) in cases {
            let fixes = Fixes {
                candidates: Vec::new(),
                distinct: rows
                    .iter()
                    .enumerate()
                    .map(|(i, (lines, ..))| {
                        let added: String = lines.iter().map(|l| format!("+{l}\n")).collect();
                        let patch = format!("--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-old\n{added}");
                        super::super::fixer::Distinct::new(patch, i)
                    })
                    .collect(),
                ..Fixes::empty(Default::default())
            };
            let mut evaluations: Vec<Evaluation> = rows
                .iter()
                .enumerate()
                .map(|(i, &(_, votes, inert, tried))| Evaluation {
                    votes,
                    inert,
                    error: (!tried).then(|| "its run panicked".into()),
                    ..Evaluation::of(i, &fixes.distinct[i])
                })
                .collect();
            let agreements = agreement(&fixes, &evaluations);
            let milli: Vec<u64> = agreements.iter().map(|&a| thousandths(a)).collect();
            assert_eq!(milli, *want_agreement, "{name}");
            for (e, a) in evaluations.iter_mut().zip(agreements) {
                e.agreement = a;
            }
            assert_eq!(order_of(&evaluations).0, *want_order, "{name}");
        }
    }

    /// Five distinct candidates of about 2,000 characters each.
    fn long_fixes() -> Fixes {
        Fixes {
            candidates: Vec::new(),
            distinct: (0..5)
                .map(|i| {
                    super::super::fixer::Distinct::new(
                        format!("diff --git a/m{i}.py b/m{i}.py\n{}", "+x = 1\n".repeat(280)),
                        i,
                    )
                })
                .collect(),
            ..Fixes::empty(Default::default())
        }
    }

    fn issue() -> Issue {
        Issue {
            instance_id: "demo__rank-1".into(),
            repo: "demo/rank".into(),
            base_commit: "0".repeat(40),
            problem_statement: "m.x is wrong.".into(),
            created_at: None,
        }
    }

    #[test]
    fn compare_shows_as_many_tied_candidates_as_fit() -> Result<(), Box<dyn std::error::Error>> {
        use crate::agents::budget::fake::{self, Fake};
        use crate::record::trajectory::Cut;
        let fixes = long_fixes();
        let tied = [4, 2, 0, 1, 3];
        // Each candidate takes 503 tokens; three and the question fit
        // 1,800 − 192.
        // (context, whether the model is asked, the choice, left out)
        let cases: [(usize, bool, usize, &[usize]); 4] = [
            (1_000_000, true, 2, &[]),
            (1800, true, 2, &[1, 3]),
            (1300, true, 2, &[0, 1, 3]),
            (1000, false, 4, &[2, 0, 1, 3]),
        ];
        for (context, asked, chosen, left_out) in cases {
            let mut conversation = Fake::new(context, "Reasoning: the second is right.\nBest: 2");
            let mut trajectory = crate::trajectory::Trajectory::new("demo__rank-1");
            let c = compare(
                &mut conversation,
                &issue(),
                &fixes,
                &tied,
                &Sampling::default(),
                &mut trajectory,
            )?;
            assert_eq!(c.tied, tied, "{context}");
            assert_eq!(c.left_out, left_out, "{context}");
            assert_eq!(c.chosen, chosen, "{context}");
            let trims: Vec<&Trim> = trajectory
                .steps
                .iter()
                .filter_map(|s| match &s.step {
                    Step::Trimmed(t) => Some(t.as_ref()),
                    _ => None,
                })
                .collect();
            match asked {
                false => {
                    assert_eq!(conversation.prompts.len(), 0, "{context}");
                    assert_eq!(c.reasoning, "");
                    assert_eq!(
                        c.skipped.as_deref(),
                        Some(
                            "two candidates and the shortest issue take 1075 tokens, more than \
                             the context of 1000 holds with 192 kept for the reply: the first in \
                             order is taken"
                        )
                    );
                    assert_eq!(trims.len(), 1);
                    assert!(!trims[0].fits);
                }
                true => {
                    assert_eq!(conversation.prompts.len(), 1, "{context}");
                    assert_eq!(c.skipped, None);
                    assert_eq!(c.reasoning, "the second is right.");
                    let prompt = &conversation.prompts[0];
                    let shown = tied.len() - left_out.len();
                    assert!(fake::tokens(prompt) <= context - COMPARE_TOKENS as usize);
                    assert!(prompt[1].content.contains(&format!("Candidate {shown}:")));
                    assert!(!prompt[1]
                        .content
                        .contains(&format!("Candidate {}:", shown + 1)));
                    let cuts: Vec<Cut> = left_out
                        .iter()
                        .map(|&distinct| Cut::Candidate { distinct })
                        .collect();
                    match trims.as_slice() {
                        [] => assert!(left_out.is_empty()),
                        [t] => assert_eq!((t.fits, &t.cuts), (true, &cuts), "{context}"),
                        more => return Err(format!("{} trims", more.len()).into()),
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn compare_cuts_a_long_issue_after_fitting_candidates() -> Result<(), Box<dyn std::error::Error>>
    {
        use crate::agents::budget::fake::Fake;
        use crate::record::trajectory::Cut;
        let fixes = long_fixes();
        let tied = [4, 2, 0, 1, 3];
        let mut long = issue();
        long.problem_statement = "an issue line of forty characters, long\n".repeat(750);
        assert_eq!(long.problem_statement.chars().count(), 30_000);
        let mut conversation = Fake::new(1800, "Reasoning: r\nBest: 1");
        let mut trajectory = crate::trajectory::Trajectory::new("demo__rank-1");
        let c = compare(
            &mut conversation,
            &long,
            &fixes,
            &tied,
            &Sampling::default(),
            &mut trajectory,
        )?;
        assert_eq!((c.chosen, c.left_out.as_slice()), (4, &[0, 1, 3][..]));
        let Some(Step::Trimmed(t)) = trajectory.steps.first().map(|s| &s.step) else {
            return Err("no trimmed step first".into());
        };
        assert_eq!(
            t.cuts,
            [
                // The issue, trimmed of its last newline: 29,999 characters,
                // cut as every stage cuts it (to 40% of the context).
                Cut::Issue {
                    kept_chars: 2079,
                    dropped_chars: 27_920,
                    dropped_lines: 698,
                },
                Cut::Candidate { distinct: 0 },
                Cut::Candidate { distinct: 1 },
                Cut::Candidate { distinct: 3 },
            ]
        );
        // 1,800 − 192 = 1,608 tokens at most.
        assert_eq!(
            (t.fits, t.prompt_tokens, t.full_tokens),
            (true, 1607, 10_081)
        );
        Ok(())
    }

    #[test]
    fn an_older_comparison_reads_with_nothing_left_out() -> Result<(), serde_json::Error> {
        let c: Comparison =
            serde_json::from_str(r#"{"tied":[0,2],"chosen":2,"reasoning":"shorter"}"#)?;
        assert_eq!(
            c,
            Comparison {
                tied: vec![0, 2],
                chosen: 2,
                reasoning: "shorter".into(),
                left_out: Vec::new(),
                skipped: None,
            }
        );
        assert_eq!(
            serde_json::to_string(&c)?,
            r#"{"tied":[0,2],"chosen":2,"reasoning":"shorter"}"#
        );
        Ok(())
    }
}
