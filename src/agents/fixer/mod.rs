//! MASAI's Fixer: [`run`], its rounds ([`rounds`]). One round: from the
//! issue, the code at and around the localised spans ([`Show`]), and when given the reproduction test with
//! its failure and the earlier rounds' fixes ([`Extra`]), N candidate
//! edits in one batched generation sharing the prompt (one greedy, N−1
//! sampled), each a short chain of thought then edits in the
//! configured [`EditFormat`], enforced by grammar. Candidates that do
//! not apply, break the syntax, or change nothing are dropped; duplicates
//! (the same tree-sitter normal form) are merged and counted, and a patch
//! meaning what the base does is marked [`Distinct::inert`].
//!
//! In the `anchored`, `lines` and `definition` formats every reply the
//! grammar allows names real lines of the shown code, so it applies; the
//! only rejections left are a syntax error of the result and a
//! reply cut by the token cap before its first edit closed (`no_blocks`:
//! there is no separate "truncated" status, so `Fixes::applied` keeps its
//! meaning).
//!
//! Here: the settings, the records of `fixes.json` and one round
//! ([`generate_round`]); [`rounds`] the rounds, judged by execution and
//! repaired; [`super::code`] the code a prompt shows, [`prompt`] the
//! instructions and the prompt fitted to the context, [`reply`] a reply
//! read as edits and applied.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::budget::{self, Budget};
use super::call::{self, Call};
use super::judge::RegressionRecord;
use super::preamble;
pub use super::shown::Show;
use crate::aci::Location;
use crate::dataset::Issue;
use crate::edit;
use crate::engine::{grammar, Conversation, EngineError, Message, Sampling};
use crate::index::symbols;
use crate::record::trajectory::{Cut, Step, Trim};
use crate::repo::RepoError;
use crate::trajectory::Trajectory;

pub use super::shown::CONTEXT_LINES;

/// How a candidate writes its edit. Each is enforced by a grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EditFormat {
    /// SEARCH/REPLACE blocks over the shown files, SEARCH free text
    /// (matched exactly, then ignoring whitespace).
    #[default]
    SearchReplace,
    /// SEARCH/REPLACE blocks whose SEARCH the grammar restricts to a
    /// contiguous run of the shown lines of the named file; when the run
    /// occurs more than once among the shown lines, the first occurrence
    /// not overlapping an earlier block of the reply is taken.
    Anchored,
    /// `replace lines A-B with:` and the new lines in a fence, A and B
    /// numbers of one run of shown lines of the named file (the code is
    /// shown numbered). A > B is normalised: the lines between them are
    /// replaced. An edit overlapping an earlier one of the reply is
    /// dropped ([`apart`]).
    Lines,
    /// One located function or method rewritten whole: its
    /// `path::qualname`, then the new definition (decorators included) in
    /// a fence, which replaces its span from the tree-sitter index. With
    /// no function or method among the located spans, `anchored` is used.
    Definition,
}

impl EditFormat {
    /// The setting's value as written in a config (`search_replace`, ...).
    pub fn name(self) -> &'static str {
        match self {
            EditFormat::SearchReplace => "search_replace",
            EditFormat::Anchored => "anchored",
            EditFormat::Lines => "lines",
            EditFormat::Definition => "definition",
        }
    }
}

/// The Fixer's settings (`[fixer]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixerSettings {
    /// Candidates per task (N).
    pub candidates: usize,
    /// Temperature of candidates 2..N (candidate 1 is greedy).
    pub temperature: f32,
    /// Most tokens of one candidate.
    pub max_tokens: u32,
    /// How candidates write their edits (`search_replace` when absent).
    #[serde(default)]
    pub edit_format: EditFormat,
    /// Rounds at most: the first, then repair rounds while no candidate
    /// passes the reproduction test ([`super::repair`]); 1 when absent.
    #[serde(default = "one_round")]
    pub rounds: usize,
    /// What code the prompt shows ([`Show`]); `file` when absent.
    #[serde(default)]
    pub show: Show,
}

fn one_round() -> usize {
    1
}

fn is_first_set(set: &usize) -> bool {
    *set == 0
}

impl Default for FixerSettings {
    fn default() -> Self {
        FixerSettings {
            // The budget, chosen from issue 47's curve (BENCHMARKS.md): 8
            // candidates in one round resolve what 4 x 3 rounds did in 56%
            // of the model time, and no repair round has produced a
            // resolving patch in any run measured.
            candidates: 8,
            temperature: 0.8,
            max_tokens: 384,
            // Chosen by what resolves (issue 32, BENCHMARKS.md): `lines`
            // applies more often, but a wrong line number applies to the
            // wrong lines; a setting written before there was a choice
            // reads as `search_replace` (the field's serde default).
            edit_format: EditFormat::Anchored,
            rounds: 1,
            show: Show::File,
        }
    }
}

/// What became of one candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "detail")]
pub enum Status {
    /// Applied, parses, changes something: `patch` holds it.
    Kept,
    NoBlocks,
    DidNotApply(String),
    SyntaxError(String),
    NoChange,
    /// The same patch as an earlier candidate (its index).
    Duplicate(usize),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub index: usize,
    /// The round that sampled it (1 is the first; 1 in files written
    /// before there were rounds).
    #[serde(default = "one_round")]
    pub round: usize,
    /// The location set its prompt showed (0: the localizer's choice).
    #[serde(default, skip_serializing_if = "is_first_set")]
    pub set: usize,
    pub temperature: f32,
    pub reply: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// Edits of its reply left out of `patch` because they did not apply
    /// or broke the syntax, each with why (see [`try_candidate`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

/// A distinct patch and the candidates that produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distinct {
    /// The first candidate's patch.
    pub patch: String,
    /// What it means: the candidates whose patches differ from it only in
    /// comments, docstrings and formatting are its members (empty in files
    /// written before: there, the same diff text).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub meaning: String,
    /// Whether it means what the base does: every file it changes has the
    /// base's normal form (only comments, docstrings or formatting
    /// changed). The ranker puts it below every patch that changes code
    /// and passes as many tests.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inert: bool,
    /// Candidate indexes (the first is the representative).
    pub members: Vec<usize>,
    /// The round of its first candidate.
    #[serde(default = "one_round")]
    pub round: usize,
    /// Whether the reproduction test passes with it, as judged after its
    /// round (None: not judged: no test, or its run failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reproduction: Option<bool>,
    /// The lines of the reproduction test's failure with it, or why it
    /// could not run; when it passes the test, the failure of the first
    /// regression test it breaks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure: String,
    /// Regression tests that passed on the base commit and fail with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regressions: Vec<String>,
    /// Whether each of the other accepted reproduction tests passes with
    /// it, as judged after its round (empty: none, or not judged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_tests: Vec<bool>,
}

impl Distinct {
    /// A patch first written by candidate `member` of round 1, not judged.
    pub fn new(patch: String, member: usize) -> Distinct {
        Distinct {
            patch,
            meaning: String::new(),
            inert: false,
            members: vec![member],
            round: 1,
            reproduction: None,
            failure: String::new(),
            regressions: Vec::new(),
            other_tests: Vec::new(),
        }
    }
}

/// One round of the Fixer: its candidates, the new distinct patches among
/// them, and how many of those were judged, and pass the reproduction
/// test without breaking a regression test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    pub round: usize,
    pub candidates: usize,
    pub distinct: usize,
    pub judged: usize,
    pub passing: usize,
}

/// The Fixer's outcome (`fixes.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fixes {
    pub candidates: Vec<Candidate>,
    pub distinct: Vec<Distinct>,
    /// The format the candidates were asked for (`search_replace` in
    /// files written before there was a choice).
    #[serde(default)]
    pub edit_format: EditFormat,
    /// Each round's counts (empty in files written before there were
    /// rounds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Round>,
    /// The runs of lines the first round's prompt showed, per file (its
    /// edits may touch only these); empty in files written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shown: Vec<Location>,
    /// The regression tests the rounds judged candidates by (None: no
    /// round judged any, or a file written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regression: Option<RegressionRecord>,
}

impl Fixes {
    /// No candidates yet, asked in `format`.
    pub fn empty(format: EditFormat) -> Fixes {
        Fixes {
            candidates: Vec::new(),
            distinct: Vec::new(),
            edit_format: format,
            rounds: Vec::new(),
            shown: Vec::new(),
            regression: None,
        }
    }
    pub fn generated(&self) -> usize {
        self.candidates.len()
    }
    /// Candidates whose blocks applied.
    pub fn applied(&self) -> usize {
        self.candidates
            .iter()
            .filter(|c| !matches!(c.status, Status::NoBlocks | Status::DidNotApply(_)))
            .count()
    }
    /// Candidates that applied and parse.
    pub fn parsed(&self) -> usize {
        self.candidates
            .iter()
            .filter(|c| {
                matches!(
                    c.status,
                    Status::Kept | Status::Duplicate(_) | Status::NoChange
                )
            })
            .count()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FixError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Grammar(#[from] grammar::GrammarError),
    #[error("no location to fix: the localizer found none")]
    NoLocations,
}

mod prompt;
mod reply;
pub mod rounds;

pub use super::code::*;
pub use prompt::*;
pub use reply::*;
pub use rounds::{run, Inputs};

/// Normalised for deduplication: no `index` lines, no trailing spaces.
fn normalise(patch: &str) -> String {
    patch
        .lines()
        .filter(|l| !l.starts_with("index "))
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Python's own compile of the files a candidate changed (paths in the
/// worktree `root`): the first error, or `None`. It catches what
/// tree-sitter's tolerant parse lets through (an unexpected indent, a
/// `return` outside a function).
pub type CompileCheck<'a> = dyn Fn(&Path, &[String]) -> Option<String> + Sync + 'a;

/// The seed of round `round`'s sampled candidates: a repair round whose
/// prompt is the first's (nothing to show of the earlier round) still
/// draws new ones.
pub fn round_seed(seed: u32, round: usize) -> u32 {
    seed.wrapping_add((round.saturating_sub(1) as u32).wrapping_mul(1_000_003))
}

/// What every round of one task's Fixer works from.
#[derive(Clone, Copy)]
pub struct RoundSpec<'a> {
    /// The task's worktree at the base commit `base`.
    pub root: &'a Path,
    pub base: &'a str,
    pub issue: &'a Issue,
    /// The location sets, each's spans best first; the first is the
    /// localizer's choice.
    pub location_sets: &'a [Vec<Location>],
    pub settings: &'a FixerSettings,
    pub sampling: &'a Sampling,
    /// Python's compile of a candidate's files, when the environment can
    /// run it.
    pub compile: Option<&'a CompileCheck<'a>>,
}

/// The seed stride between location sets: sets whose prompts come out
/// the same (two spans of one file shown whole) still draw different
/// candidates.
const SET_SEED_STRIDE: u32 = 7_919;

/// How many of `n` candidates each of `sets` location sets gets: as even
/// as can be, the earlier sets first.
pub fn shares(n: usize, sets: usize) -> Vec<usize> {
    let sets = sets.max(1);
    (0..sets)
        .map(|j| n / sets + usize::from(j < n % sets))
        .collect()
}

/// One round: for each location set, the prompt (`settings.show`'s code,
/// the `evidence` and the earlier `attempts`) and its share of the N
/// candidates ([`shares`]), each applied, checked and diffed, added to
/// `fixes` (indexes after those of earlier rounds; a patch meaning the
/// same as an earlier one is its duplicate).
pub fn generate_round(
    conversation: &mut dyn Conversation,
    spec: &RoundSpec<'_>,
    evidence: Option<&Evidence>,
    attempts: &[Attempt],
    round: usize,
    fixes: &mut Fixes,
    trajectory: &mut Trajectory,
) -> Result<(), FixError> {
    let sets: Vec<&Vec<Location>> = spec
        .location_sets
        .iter()
        .filter(|s| !s.is_empty())
        .collect();
    if sets.is_empty() {
        return Err(FixError::NoLocations);
    }
    let n = spec.settings.candidates.max(1);
    for (set, (locations, share)) in sets.iter().zip(shares(n, sets.len())).enumerate() {
        if share == 0 {
            continue;
        }
        let group = Group {
            set,
            locations,
            candidates: share,
        };
        generate_group(
            conversation,
            spec,
            &group,
            (evidence, attempts),
            round,
            fixes,
            trajectory,
        )?;
    }
    Ok(())
}

/// One location set's candidates of a round.
struct Group<'a> {
    /// Its index among the sets (0: the localizer's choice).
    set: usize,
    locations: &'a [Location],
    candidates: usize,
}

fn generate_group(
    conversation: &mut dyn Conversation,
    spec: &RoundSpec<'_>,
    group: &Group<'_>,
    (evidence, attempts): (Option<&Evidence>, &[Attempt]),
    round: usize,
    fixes: &mut Fixes,
    trajectory: &mut Trajectory,
) -> Result<(), FixError> {
    let RoundSpec {
        root,
        base,
        issue,
        settings,
        sampling,
        compile,
        ..
    } = *spec;
    let show = settings.show;
    let prompt = fit_prompt_with(
        conversation,
        root,
        &issue.problem_statement,
        group.locations,
        ReplyShape {
            reply_tokens: settings.max_tokens as usize,
            format: settings.edit_format,
            show,
        },
        &Extra { evidence, attempts },
    )?;
    if prompt.format != settings.edit_format && round == 1 {
        tracing::warn!(
            "{}: no function or method among the located spans to rewrite: the fixer asks for \
             the {} format instead of {}",
            issue.instance_id,
            prompt.format.name(),
            settings.edit_format.name()
        );
    }
    let g = prompt.grammar()?;
    if round == 1 {
        if group.set == 0 {
            fixes.edit_format = prompt.format;
        }
        for run in prompt.code.iter().flat_map(ShownCode::visible_runs) {
            if !fixes.shown.contains(&run) {
                fixes.shown.push(run);
            }
        }
    }
    if let Some(t) = prompt.trim.clone() {
        let fits = t.fits;
        if !fits {
            tracing::warn!(
                "{}: the fixer's smallest prompt ({} tokens) does not fit the context of {} \
                 with {} kept for the reply: no candidates",
                issue.instance_id,
                t.prompt_tokens,
                t.context,
                t.reserved
            );
        }
        trajectory.record(Step::Trimmed(Box::new(t)));
        if !fits {
            return Ok(());
        }
    }
    let sampling = Sampling {
        seed: round_seed(sampling.seed, round)
            .wrapping_add((group.set as u32).wrapping_mul(SET_SEED_STRIDE)),
        ..sampling.clone()
    };
    let call = Call::spread(
        "fixer",
        prompt.messages.clone(),
        &sampling,
        settings.max_tokens,
        group.candidates,
        settings.temperature,
        &g,
    );
    let temperatures = call.temperatures.clone().unwrap_or_default();
    let generation = call::constrained(conversation, trajectory, call)?;

    let first = fixes.candidates.len();
    let before = befores(root, &prompt.paths);
    for (k, c) in generation.candidates.iter().enumerate() {
        let index = first + k;
        let Tried {
            status,
            patch,
            meaning,
            inert,
            dropped,
        } = try_candidate(root, base, &c.text, &prompt, &before, compile)?;
        let status = match (&status, &patch) {
            (Status::Kept, Some(p)) => {
                let key = normalise(p);
                match fixes.distinct.iter_mut().find(|d| {
                    if d.meaning.is_empty() {
                        normalise(&d.patch) == key
                    } else {
                        d.meaning == meaning
                    }
                }) {
                    Some(d) => {
                        d.members.push(index);
                        Status::Duplicate(d.members[0])
                    }
                    None => {
                        fixes.distinct.push(Distinct {
                            patch: p.clone(),
                            meaning,
                            inert,
                            members: vec![index],
                            round,
                            reproduction: None,
                            failure: String::new(),
                            regressions: Vec::new(),
                            other_tests: Vec::new(),
                        });
                        Status::Kept
                    }
                }
            }
            _ => status,
        };
        fixes.candidates.push(Candidate {
            index,
            round,
            set: group.set,
            temperature: temperatures.get(k).copied().unwrap_or(0.0),
            reply: c.text.clone(),
            status,
            patch,
            dropped,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One round with nothing shown besides the issue and the code, and
    /// the default sampling, as the tests drive it.
    fn round_alone(
        conversation: &mut dyn Conversation,
        (root, base): (&Path, &str),
        issue: &Issue,
        locations: &[Location],
        settings: &FixerSettings,
        trajectory: &mut Trajectory,
    ) -> Result<Fixes, FixError> {
        let mut fixes = Fixes::empty(settings.edit_format);
        let sets = [locations.to_vec()];
        let spec = RoundSpec {
            root,
            base,
            issue,
            location_sets: &sets,
            settings,
            sampling: &Sampling::default(),
            compile: None,
        };
        generate_round(conversation, &spec, None, &[], 1, &mut fixes, trajectory)?;
        Ok(fixes)
    }
    use crate::agents::budget::fake::{self, Fake};
    use crate::record::trajectory::Cut;

    type R = Result<(), Box<dyn std::error::Error>>;

    /// A 600-line class: `class Big:` on line 1, `target_method` defined on
    /// line 300, other methods around it.
    fn big_class() -> String {
        (1..=600)
            .map(|n| match n {
                1 => "class Big:".to_string(),
                300 => "    def target_method(self):".to_string(),
                301 => "        return 'wrong'".to_string(),
                n if n % 2 == 0 => format!("    def method_{n}(self):"),
                n => format!("        return {n}"),
            })
            .map(|l| l + "\n")
            .collect()
    }

    /// A 30,000-character issue: a head naming `Big.target_method()`,
    /// filler lines, and a tail.
    fn long_issue() -> String {
        let head = "HEAD: calling Big.target_method() returns 'wrong'.\n";
        let tail = "\nTAIL: expected 'right'.";
        let filler_len = 30_000 - head.len() - tail.len();
        let filler: String = (0..)
            .map(|i| format!("filler line {i:04} with plain words in it\n"))
            .flat_map(|l| l.chars().collect::<Vec<_>>())
            .take(filler_len)
            .collect();
        format!("{head}{filler}{tail}")
    }

    fn workspace(files: &[(&str, &str)]) -> Result<tempfile::TempDir, std::io::Error> {
        let dir = tempfile::tempdir()?;
        for (path, text) in files {
            let full = dir.path().join(path);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(full, text)?;
        }
        Ok(dir)
    }

    fn location(path: &str, symbol: &str, start_line: usize, end_line: usize) -> Location {
        Location {
            path: path.into(),
            symbol: symbol.into(),
            start_line,
            end_line,
        }
    }

    /// A 200-line function every line of which names `target_method`.
    fn busy_function() -> String {
        let mut out = String::from("def helper():\n");
        for n in 2..=200 {
            out.push_str(&format!("    x{n} = target_method({n})\n"));
        }
        out
    }

    fn issue_of(text: &str) -> Issue {
        Issue {
            instance_id: "demo__big-1".into(),
            repo: "demo/big".into(),
            base_commit: "0".repeat(40),
            problem_statement: text.into(),
            created_at: None,
        }
    }

    #[test]
    fn a_long_issue_and_a_large_class_fit() -> R {
        let dir = workspace(&[("pkg/big.py", &big_class())])?;
        let issue = long_issue();
        assert_eq!(issue.chars().count(), 30_000);
        let locs = [location("pkg/big.py", "Big", 1, 600)];
        let conversation = Fake::new(4096, "");
        let untrimmed = messages(&issue, &code_sections(dir.path(), &locs, false));
        assert_eq!(fake::tokens(&untrimmed), 11_008);

        let p = fit_prompt(
            &conversation,
            dir.path(),
            &issue,
            &locs,
            512,
            EditFormat::SearchReplace,
        )?;
        let trim = p.trim.ok_or("nothing was cut")?;
        assert_eq!(
            trim,
            Trim {
                purpose: "fixer".into(),
                context: 4096,
                reserved: 512,
                full_tokens: 11_008,
                prompt_tokens: 1958,
                fits: true,
                cuts: vec![
                    Cut::Span {
                        path: "pkg/big.py".into(),
                        symbol: "Big".into(),
                        kept_lines: 26,
                        left_out: vec![(12, 294), (306, 596)],
                    },
                    // Cut as every stage of the task cuts it: to 40% of
                    // the context.
                    Cut::Issue {
                        kept_chars: 6360,
                        dropped_chars: 23_640,
                        dropped_lines: 591,
                    },
                ],
            }
        );
        assert_eq!(fake::tokens(&p.messages), 1958);
        assert_eq!(p.paths, ["pkg/big.py"]);
        let user = &p.messages[1].content;
        let lines: Vec<&str> = user.lines().collect();
        for wanted in [
            // The issue's head and tail, and the note between them.
            "HEAD: calling Big.target_method() returns 'wrong'.",
            "[... 23,640 characters (591 lines) of the issue left out ...]",
            "TAIL: expected 'right'.",
            // The signature, the located method and the span's end.
            "class Big:",
            "    def target_method(self):",
            "        return 'wrong'",
            "    def method_600(self):",
            // The notes, indented like the line after them.
            "        # ... lines 12-294 left out ...",
            "        # ... lines 306-596 left out ...",
            TRIMMED_NOTE,
        ] {
            assert_eq!(
                lines.iter().filter(|l| **l == wanted).count(),
                1,
                "{wanted:?} in\n{user}"
            );
        }
        // Lines 11 and 12: the last before the first note, and one left out.
        assert!(lines.contains(&"        return 11"));
        assert!(!lines.contains(&"    def method_12(self):"));
        Ok(())
    }

    #[test]
    fn the_last_locations_go_when_the_shortest_issue_does_not_fit() -> R {
        let dir = workspace(&[
            ("pkg/big.py", &big_class()),
            ("pkg/busy.py", &busy_function()),
        ])?;
        let issue = long_issue();
        let locs = [
            location("pkg/big.py", "Big", 1, 600),
            location("pkg/busy.py", "helper", 1, 200),
        ];
        // Both spans trimmed and the shortest issue take 833 tokens; the
        // Big class alone and the shortest issue, 658.
        let conversation = Fake::new(700 + 512, "");
        let p = fit_prompt(
            &conversation,
            dir.path(),
            &issue,
            &locs,
            512,
            EditFormat::SearchReplace,
        )?;
        let trim = p.trim.ok_or("nothing was cut")?;
        let shortest = budget::cut_issue(&issue, budget::MIN_ISSUE_CHARS);
        let located = read_located(dir.path(), &locs);
        let (both, _, _) = sections(&located, Some(&issue_identifiers(&issue)), false);
        assert_eq!(fake::tokens(&messages(&shortest.text, &both)), 833);
        assert_eq!(
            (trim.fits, trim.prompt_tokens, trim.full_tokens),
            (true, 698, 12_463)
        );
        assert_eq!(
            trim.cuts,
            [
                Cut::Span {
                    path: "pkg/big.py".into(),
                    symbol: "Big".into(),
                    kept_lines: 26,
                    left_out: vec![(12, 294), (306, 596)],
                },
                Cut::Issue {
                    kept_chars: 1320,
                    dropped_chars: 28_680,
                    dropped_lines: 717,
                },
                Cut::Location {
                    path: "pkg/busy.py".into(),
                    symbol: "helper".into(),
                },
            ]
        );
        assert_eq!(p.paths, ["pkg/big.py"]);
        Ok(())
    }

    #[test]
    fn with_no_room_no_call_is_made_and_no_candidate_comes() -> R {
        let dir = workspace(&[("pkg/big.py", &big_class())])?;
        let issue = issue_of(&long_issue());
        let locs = [location("pkg/big.py", "Big", 1, 600)];
        let mut conversation = Fake::new(700, "Reasoning: x");
        let mut trajectory = Trajectory::new("demo__big-1");
        let settings = FixerSettings {
            edit_format: EditFormat::SearchReplace,
            ..FixerSettings::default()
        };
        let fixes = round_alone(
            &mut conversation,
            (dir.path(), "HEAD"),
            &issue,
            &locs,
            &settings,
            &mut trajectory,
        )?;
        assert_eq!(fixes.candidates, []);
        assert_eq!(fixes.distinct, []);
        assert_eq!(conversation.prompts.len(), 0);
        let steps: Vec<&Step> = trajectory.steps.iter().map(|s| &s.step).collect();
        let [Step::Trimmed(t)] = steps.as_slice() else {
            return Err(format!("one trimmed step expected: {steps:?}").into());
        };
        assert_eq!(
            (t.fits, t.prompt_tokens, t.context, t.reserved),
            (false, 658, 700, 384)
        );
        assert_eq!(
            t.cuts[1],
            Cut::Issue {
                kept_chars: 1160,
                dropped_chars: 28_840,
                dropped_lines: 721,
            }
        );
        Ok(())
    }

    #[test]
    fn a_fitted_prompt_is_the_one_sent_and_its_cut_is_recorded_first() -> R {
        let dir = workspace(&[("pkg/big.py", &big_class())])?;
        let issue = issue_of(&long_issue());
        let locs = [location("pkg/big.py", "Big", 1, 600)];
        let mut conversation = Fake::new(4096, "Reasoning: no blocks");
        let mut trajectory = Trajectory::new("demo__big-1");
        let settings = FixerSettings {
            candidates: 2,
            edit_format: EditFormat::SearchReplace,
            ..FixerSettings::default()
        };
        let fixes = round_alone(
            &mut conversation,
            (dir.path(), "HEAD"),
            &issue,
            &locs,
            &settings,
            &mut trajectory,
        )?;
        let statuses: Vec<&Status> = fixes.candidates.iter().map(|c| &c.status).collect();
        assert_eq!(statuses, [&Status::NoBlocks, &Status::NoBlocks]);
        let expected = fit_prompt(
            &conversation,
            dir.path(),
            &issue.problem_statement,
            &locs,
            512,
            EditFormat::SearchReplace,
        )?;
        assert_eq!(conversation.prompts, [expected.messages]);
        let kinds: Vec<&str> = trajectory
            .steps
            .iter()
            .map(|s| match &s.step {
                Step::Trimmed(_) => "trimmed",
                Step::ModelCall(_) => "model_call",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["trimmed", "model_call"]);
        Ok(())
    }

    #[test]
    fn a_prompt_that_fits_is_left_whole() -> R {
        let dir = workspace(&[("pkg/big.py", &big_class())])?;
        let locs = [location("pkg/big.py", "Big", 1, 600)];
        let conversation = Fake::new(32_768, "");
        let issue = "Big.target_method() returns 'wrong'.";
        let p = fit_prompt(
            &conversation,
            dir.path(),
            issue,
            &locs,
            512,
            EditFormat::SearchReplace,
        )?;
        assert_eq!(p.trim, None);
        assert_eq!(
            p.messages,
            messages(issue, &code_sections(dir.path(), &locs, false))
        );
        Ok(())
    }

    #[test]
    fn identifiers_are_the_code_like_words() {
        let cases: [(&str, &[&str]); 5] = [
            ("Square.area() is wrong", &["area"]),
            ("the get_value of a QuerySet", &["QuerySet", "get_value"]),
            ("call len(x) and run(", &["len", "run"]),
            ("plain words only, Square too", &[]),
            ("ab_ is short? no: _x and 9_lives", &["ab_"]),
        ];
        for (text, want) in cases {
            let got: Vec<String> = issue_identifiers(text).into_iter().collect();
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn a_short_span_keeps_every_line() {
        let lines: Vec<String> = (1..=30).map(|n| format!("line {n}")).collect();
        let loc = location("a.py", "f", 10, 20);
        let none = BTreeSet::new();
        // Shown 5-25; kept: 5-20 (signature window) and 17-25 (end).
        assert_eq!(
            kept_lines(&lines, &loc, &none),
            (5..=25).collect::<BTreeSet<_>>()
        );
        // A 40-line span: 5-20 and 47-55 kept; 21-46 left out.
        let lines: Vec<String> = (1..=60).map(|n| format!("line {n}")).collect();
        let loc = location("a.py", "f", 10, 50);
        let kept = kept_lines(&lines, &loc, &none);
        assert_eq!(kept, (5..=20).chain(47..=55).collect::<BTreeSet<_>>());
        // A line naming `line_30`... none does; `30` is a word of line 30.
        let ids: BTreeSet<String> = ["30".to_string()].into();
        let kept = kept_lines(&lines, &loc, &ids);
        assert_eq!(
            kept,
            (5..=20)
                .chain(25..=35)
                .chain(47..=55)
                .collect::<BTreeSet<_>>()
        );
    }

    /// A module with a class of a decorated property and a method, and a
    /// decorated function with a nested one.
    const SHAPES: &str = "import functools\n\n\nclass Shape:\n    @property\n    def area(self):\n        return self.w * self.h\n\n    def scale(self, k):\n        self.w *= k\n        return self\n\n\n@functools.lru_cache(maxsize=None)\ndef helper(x):\n    def inner(y):\n        return y\n    return inner(x)\n";

    /// Two functions with the same two-line body, 20 lines apart.
    fn twins() -> String {
        let mut out = String::from("def a(w, k):\n    w *= k\n    return w\n\n\n");
        for n in 6..=20 {
            out.push_str(&format!("x{n} = {n}\n"));
        }
        out.push_str("def b(w, k):\n    w *= k\n    return w\n");
        out
    }

    /// The prompt of `format` over `locs`, whole, or trimmed to the
    /// identifiers of `issue` with `trim`.
    fn prompt_of(
        root: &Path,
        issue: &str,
        locs: &[Location],
        format: EditFormat,
        trim: bool,
    ) -> Prompt {
        let ids = issue_identifiers(issue);
        build_prompt(
            issue,
            &read_located(root, locs),
            trim.then_some(&ids),
            format,
            None,
        )
        .into_prompt(None)
    }

    /// The files after applying `reply` (read in `prompt`'s format) to a
    /// copy of `files`.
    fn applied(
        files: &[(&str, &str)],
        prompt: &Prompt,
        reply: &str,
    ) -> Result<Vec<String>, String> {
        let dir = workspace(files).map_err(|e| e.to_string())?;
        match edits_of(reply, prompt) {
            Edits::Lines(edits) => {
                edit::apply_line_edits(dir.path(), &apart(&edits)).map_err(|e| e.to_string())?
            }
            other => return Err(format!("{other:?}")),
        };
        Ok(files
            .iter()
            .map(|(p, _)| std::fs::read_to_string(dir.path().join(p)).unwrap_or_default())
            .collect())
    }

    #[test]
    fn an_anchored_search_takes_the_occurrence_inside_the_shown_range() -> R {
        let text = twins();
        let files = [("t.py", text.as_str())];
        let dir = workspace(&files)?;
        // b (21-23) is shown with lines 16-23: its body, not a's.
        let locs = [location("t.py", "b", 21, 23)];
        let p = prompt_of(dir.path(), "b is wrong", &locs, EditFormat::Anchored, false);
        assert_eq!(p.code[0].shown, (16..=23).collect::<BTreeSet<_>>());
        let reply = "Reasoning: k is ignored.\n\nt.py\n<<<<<<< SEARCH\n    w *= k\n    return w\n=======\n    return w * k\n>>>>>>> REPLACE\n";
        let got = applied(&files, &p, reply)?;
        assert_eq!(
            got[0],
            text.replace(
                "x20 = 20\ndef b(w, k):\n    w *= k\n    return w\n",
                "x20 = 20\ndef b(w, k):\n    return w * k\n"
            )
        );
        // With both shown, two blocks of the same run take both places.
        let locs = [location("t.py", "a", 1, 23)];
        let p = prompt_of(dir.path(), "both", &locs, EditFormat::Anchored, false);
        let reply = "Reasoning: both.\n\nt.py\n<<<<<<< SEARCH\n    return w\n=======\n    return -w\n>>>>>>> REPLACE\nt.py\n<<<<<<< SEARCH\n    return w\n=======\n    return +w\n>>>>>>> REPLACE\n";
        let got = applied(&files, &p, reply)?;
        assert_eq!(got[0].matches("    return -w\n").count(), 1, "{}", got[0]);
        assert_eq!(got[0].matches("    return +w\n").count(), 1, "{}", got[0]);
        assert!(got[0].find("-w") < got[0].find("+w"), "{}", got[0]);
        // A run that is not shown, and one that cannot be placed apart:
        // the first block is kept and the one overlapping it dropped.
        let reply = "Reasoning: x.\n\nt.py\n<<<<<<< SEARCH\n    w *= k\n    w *= k\n=======\n>>>>>>> REPLACE\n";
        assert_eq!(
            edits_of(reply, &p),
            Edits::Refused("SEARCH is not a run of the lines shown of t.py".into())
        );
        let reply = "Reasoning: x.\n\nt.py\n<<<<<<< SEARCH\ndef b(w, k):\n=======\ndef b(w, k=1):\n>>>>>>> REPLACE\nt.py\n<<<<<<< SEARCH\ndef b(w, k):\n    w *= k\n=======\n>>>>>>> REPLACE\n";
        assert_eq!(
            applied(&files, &p, reply)?[0],
            text.replace("def b(w, k):\n", "def b(w, k=1):\n")
        );
        Ok(())
    }

    #[test]
    fn lines_edits_name_shown_numbers_and_a_reversed_range_is_normalised() -> R {
        let files = [("m.py", SHAPES)];
        let dir = workspace(&files)?;
        let locs = [location("m.py", "Shape", 4, 11)];
        let p = prompt_of(
            dir.path(),
            "Shape.area is wrong",
            &locs,
            EditFormat::Lines,
            false,
        );
        let user = &p.messages[1].content;
        assert!(user.contains("\n 1| import functools\n 2| \n"), "{user}");
        assert!(
            user.contains("\n 7|         return self.w * self.h\n"),
            "{user}"
        );
        assert!(user.contains("\n16|     def inner(y):\n```"), "{user}");
        assert!(user.contains("replace lines A-B with:"), "{user}");
        let cases: [(&str, Result<&str, &str>); 4] = [
            (
                "m.py\nreplace lines 7-7 with:\n```\n        return self.w * self.h * 2\n```\n",
                Ok("        return self.w * self.h * 2\n\n    def scale"),
            ),
            // 11-10: lines 10 to 11.
            (
                "m.py\nreplace lines 11-10 with:\n```\n        return self.scaled(k)\n```\n",
                Ok("    def scale(self, k):\n        return self.scaled(k)\n\n\n@functools"),
            ),
            // 7-9 overlaps 6-7: the first edit stands, the second is dropped.
            (
                "m.py\nreplace lines 6-7 with:\n```\n```\nm.py\nreplace lines 7-9 with:\n```\n```\n",
                Ok("class Shape:\n    @property\n\n    def scale(self, k):"),
            ),
            (
                "m.py\nreplace lines 17-17 with:\n```\n```\n",
                Err("Refused(\"line 17 of m.py is not shown\")"),
            ),
        ];
        for (edits, want) in cases {
            let reply = format!("Reasoning: x.\n\n{edits}");
            let got = applied(&files, &p, &reply);
            match want {
                Ok(part) => {
                    let got = got?;
                    assert!(got[0].contains(part), "{edits}:\n{}", got[0]);
                }
                Err(e) => assert_eq!(got, Err(e.to_string()), "{edits}"),
            }
        }
        Ok(())
    }

    #[test]
    fn definitions_are_the_located_functions_and_methods_outermost() -> R {
        let files = [("m.py", SHAPES)];
        let dir = workspace(&files)?;
        let locs = [
            location("m.py", "Shape", 4, 11),
            location("m.py", "helper", 14, 18),
        ];
        let p = prompt_of(dir.path(), "area", &locs, EditFormat::Definition, false);
        assert_eq!(p.format, EditFormat::Definition);
        let got: Vec<(String, usize, usize, &str, &str)> = p
            .targets
            .iter()
            .map(|t| {
                (
                    t.label(),
                    t.start_line,
                    t.end_line,
                    t.indent.as_str(),
                    t.lead.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "m.py::Shape.area".to_string(),
                    5,
                    7,
                    "    ",
                    "    def area("
                ),
                (
                    "m.py::Shape.scale".to_string(),
                    9,
                    11,
                    "    ",
                    "    def scale("
                ),
                ("m.py::helper".to_string(), 14, 18, "", "def helper("),
            ]
        );
        let user = &p.messages[1].content;
        assert!(
            user.ends_with(
                "The functions you can rewrite:\nm.py::Shape.area\nm.py::Shape.scale\nm.py::helper"
            ),
            "{user}"
        );
        // The decorated property, rewritten with its decorator.
        let reply = "Reasoning: x.\n\nm.py::Shape.area\n```\n    @property\n    def area(self):\n\n        return self.w * self.h * 2\n```\n";
        assert_eq!(
            applied(&files, &p, reply)?[0],
            SHAPES.replace(
                "        return self.w * self.h\n",
                "\n        return self.w * self.h * 2\n"
            )
        );
        // Written without its decorator, it loses it.
        let reply = "Reasoning: x.\n\nm.py::helper\n```\ndef helper(x):\n    return x\n```\n";
        assert_eq!(
            applied(&files, &p, reply)?[0],
            SHAPES.replace(
                "@functools.lru_cache(maxsize=None)\ndef helper(x):\n    def inner(y):\n        return y\n    return inner(x)\n",
                "def helper(x):\n    return x\n"
            )
        );
        // The lines are kept as written at the forced indentation; a line
        // under it is put at it.
        let reply = "Reasoning: x.\n\nm.py::Shape.scale\n```\n    def scale(self, k):\n      self.w *= k * 2\n  return self\n```\n";
        assert_eq!(
            applied(&files, &p, reply)?[0],
            SHAPES.replace(
                "        self.w *= k\n        return self\n",
                "      self.w *= k * 2\n    return self\n"
            )
        );
        // No function among the spans: anchored instead.
        let p = prompt_of(
            dir.path(),
            "x",
            &[location("m.py", "imports", 1, 1)],
            EditFormat::Definition,
            false,
        );
        assert_eq!((p.format, p.targets.len()), (EditFormat::Anchored, 0));
        Ok(())
    }

    /// A xorshift64 generator: the property tests' seeded randomness.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        /// A number in `0..n` (`n` > 0).
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Random replacement lines at `indent`: 0-4 statements (some opening
    /// a block or a parenthesis, so some results do not parse), blank
    /// lines among them.
    fn random_lines(rng: &mut Rng, indent: &str) -> String {
        const POOL: &[&str] = &[
            "pass",
            "x = 1",
            "return None",
            "",
            "y = [1, 2]",
            "if x:",
            "self.w = 0  # note",
            "y = (1,",
        ];
        (0..rng.below(5))
            .map(|_| {
                let line = POOL[rng.below(POOL.len())];
                if line.is_empty() {
                    "\n".to_string()
                } else {
                    format!("{indent}{line}\n")
                }
            })
            .collect()
    }

    /// A property case: the files, the located spans, the issue, and
    /// whether the spans are trimmed.
    type PropertyCase = (
        Vec<(&'static str, String)>,
        Vec<Location>,
        &'static str,
        bool,
    );

    /// The cases of the property tests: a small module shown whole, and a
    /// large class trimmed around the issue's names (gaps in the runs).
    fn property_cases() -> Vec<PropertyCase> {
        vec![
            (
                vec![("m.py", SHAPES.to_string()), ("t.py", twins())],
                vec![
                    location("m.py", "Shape", 4, 11),
                    location("m.py", "helper", 14, 18),
                    location("t.py", "b", 1, 23),
                ],
                "Shape.area",
                false,
            ),
            (
                vec![("pkg/big.py", big_class())],
                vec![location("pkg/big.py", "Big", 1, 600)],
                "Big.target_method() returns 'wrong'",
                true,
            ),
        ]
    }

    /// Applies `reply`; the only failure allowed is a syntax error of the
    /// result (counted), anything else fails the test.
    fn check_property(
        files: &[(&str, String)],
        prompt: &Prompt,
        reply: &str,
        syntax_errors: &mut usize,
    ) -> R {
        let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
        let after =
            applied(&refs, prompt, reply).map_err(|e| format!("{e}\nin reply:\n{reply}"))?;
        let broken = after
            .iter()
            .zip(files)
            .any(|(a, (_, b))| symbols::syntax_errors(a).len() > symbols::syntax_errors(b).len());
        if broken {
            *syntax_errors += 1;
        }
        Ok(())
    }

    /// Replies per format and case in the property tests.
    const PROPERTY_REPLIES: usize = 200;

    #[test]
    fn every_conforming_anchored_reply_applies() -> R {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut syntax = 0;
        for (files, locs, issue, trim) in property_cases() {
            let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
            let dir = workspace(&refs)?;
            let p = prompt_of(dir.path(), issue, &locs, EditFormat::Anchored, trim);
            let shown: Vec<grammar::ShownFile> = p.code.iter().map(|c| c.runs(true)).collect();
            for _ in 0..PROPERTY_REPLIES {
                let mut reply = String::from("Reasoning: a random edit.\n\n");
                let mut taken: Vec<(usize, usize, usize)> = Vec::new();
                for _ in 0..1 + rng.below(3) {
                    let f = rng.below(shown.len());
                    let run = &shown[f].runs[rng.below(shown[f].runs.len())];
                    let at = rng.below(run.lines.len());
                    let len = 1 + rng.below((run.lines.len() - at).min(6));
                    let (a, b) = (run.first + at, run.first + at + len - 1);
                    if taken.iter().any(|&(g, s, e)| g == f && a <= e && s <= b) {
                        continue;
                    }
                    taken.push((f, a, b));
                    let search: String = run.lines[at..at + len]
                        .iter()
                        .map(|l| format!("{l}\n"))
                        .collect();
                    let indent: String = run.lines[at]
                        .chars()
                        .take_while(|c| c.is_whitespace())
                        .collect();
                    reply.push_str(&format!(
                        "{}\n<<<<<<< SEARCH\n{search}=======\n{}>>>>>>> REPLACE\n",
                        shown[f].path,
                        random_lines(&mut rng, &indent)
                    ));
                }
                check_property(&files, &p, &reply, &mut syntax)?;
            }
        }
        // Some random replacements break the syntax: the generator is not
        // trivially safe.
        assert!(syntax > 0);
        Ok(())
    }

    #[test]
    fn every_conforming_lines_reply_applies() -> R {
        let mut rng = Rng(0xD1B5_4A32_D192_ED03);
        let mut syntax = 0;
        for (files, locs, issue, trim) in property_cases() {
            let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
            let dir = workspace(&refs)?;
            let p = prompt_of(dir.path(), issue, &locs, EditFormat::Lines, trim);
            let shown: Vec<grammar::ShownFile> = p.code.iter().map(|c| c.runs(false)).collect();
            for _ in 0..PROPERTY_REPLIES {
                let mut reply = String::from("Reasoning: a random edit.\n\n");
                let mut taken: Vec<(usize, usize, usize)> = Vec::new();
                for _ in 0..1 + rng.below(3) {
                    let f = rng.below(shown.len());
                    let run = &shown[f].runs[rng.below(shown[f].runs.len())];
                    let a = run.first + rng.below(run.lines.len());
                    let b = run.first + rng.below(run.lines.len());
                    let (lo, hi) = (a.min(b), a.max(b));
                    if taken.iter().any(|&(g, s, e)| g == f && lo <= e && s <= hi) {
                        continue;
                    }
                    taken.push((f, lo, hi));
                    let first = &run.lines[lo - run.first];
                    let indent: String = first.chars().take_while(|c| c.is_whitespace()).collect();
                    reply.push_str(&format!(
                        "{}\nreplace lines {a}-{b} with:\n```\n{}```\n",
                        shown[f].path,
                        random_lines(&mut rng, &indent)
                    ));
                }
                check_property(&files, &p, &reply, &mut syntax)?;
            }
        }
        assert!(syntax > 0);
        Ok(())
    }

    #[test]
    fn every_conforming_definition_reply_applies() -> R {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut syntax = 0;
        for (files, locs, issue, trim) in property_cases() {
            let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
            let dir = workspace(&refs)?;
            let p = prompt_of(dir.path(), issue, &locs, EditFormat::Definition, trim);
            assert_eq!(p.format, EditFormat::Definition);
            for _ in 0..PROPERTY_REPLIES {
                let t = &p.targets[rng.below(p.targets.len())];
                let decorators: String = (0..rng.below(3))
                    .map(|i| format!("{}@decorator_{i}\n", t.indent))
                    .collect();
                let body = random_lines(&mut rng, &format!("{}    ", t.indent));
                let reply = format!(
                    "Reasoning: a random rewrite.\n\n{}\n```\n{decorators}{}self, x):\n{}    return x\n{body}```\n",
                    t.label(),
                    t.lead,
                    t.indent
                );
                check_property(&files, &p, &reply, &mut syntax)?;
            }
        }
        assert!(syntax > 0);
        Ok(())
    }

    /// `files` committed in a new git repository; its head commit.
    fn git_workspace(
        files: &[(&str, &str)],
    ) -> Result<(tempfile::TempDir, String), Box<dyn std::error::Error>> {
        let dir = workspace(files)?;
        for args in [
            &["init", "-q"][..],
            &["add", "-A"],
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "base",
            ],
        ] {
            let status = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .status()?;
            assert!(status.success(), "git {args:?}");
        }
        let head = crate::repo::head_commit(dir.path())?;
        Ok((dir, head))
    }

    #[test]
    fn an_edit_that_breaks_the_syntax_or_does_not_apply_is_dropped_alone() -> R {
        let (dir, head) = git_workspace(&[("m.py", SHAPES)])?;
        let locs = [location("m.py", "Shape", 4, 11)];
        let block = |search: &str, replace: &str| {
            format!("m.py\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n")
        };
        let good = block(
            "        return self.w * self.h\n",
            "        return self.w * self.h * 2\n",
        );
        // A REPLACE of prose where code was: tree-sitter refuses it.
        let prose = block("        self.w *= k\n", "Replace with:\nm.py\n");
        let missing = block("        return None\n", "        return 0\n");
        // The fix written one level too deep throughout: moved left.
        let deep = block(
            "        return self.w * self.h\n",
            "            return self.w * self.h * 2\n",
        );
        let fixed = "        return self.w * self.h * 2\n";
        type Case<'a> = (EditFormat, Vec<&'a str>, &'a str, usize);
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            (EditFormat::Anchored, vec![&good], "kept", 0),
            (EditFormat::Anchored, vec![&deep], "kept", 0),
            (EditFormat::Anchored, vec![&prose, &deep], "kept", 1),
            (EditFormat::Anchored, vec![&good, &prose], "kept", 1),
            (EditFormat::Anchored, vec![&prose, &good], "kept", 1),
            (EditFormat::Anchored, vec![&prose], "syntax_error", 0),
            (EditFormat::Anchored, vec![&prose, &prose], "syntax_error", 0),
            (EditFormat::SearchReplace, vec![&missing, &good], "kept", 1),
            (EditFormat::SearchReplace, vec![&good, &prose, &missing], "kept", 2),
            (EditFormat::SearchReplace, vec![&missing], "did_not_apply", 0),
        ];
        for (format, blocks, want, dropped) in cases {
            let prompt = prompt_of(dir.path(), "Shape.area is wrong", &locs, format, false);
            let reply = format!("Reasoning: x.\n\n{}", blocks.concat());
            let before = reply::befores(dir.path(), &prompt.paths);
            let got = reply::try_candidate(dir.path(), &head, &reply, &prompt, &before, None)?;
            let status = serde_json::to_value(&got.status)?;
            let case = format!("{format:?} {blocks:?}");
            assert_eq!(status["status"], want, "{case}: {got:?}");
            assert_eq!(got.dropped.len(), dropped, "{case}: {got:?}");
            if want == "kept" {
                let patch = got.patch.clone().unwrap_or_default();
                assert!(patch.contains(&format!("+{fixed}")), "{case}: {patch}");
                assert!(!patch.contains("Replace with"), "{case}: {patch}");
            }
            assert_eq!(std::fs::read_to_string(dir.path().join("m.py"))?, SHAPES);
        }
        Ok(())
    }

    #[test]
    fn patches_differing_only_in_comments_docstrings_or_formatting_are_one_vote() -> R {
        let (dir, head) = git_workspace(&[("m.py", SHAPES)])?;
        let issue = issue_of("Shape.area is wrong");
        let locs = [location("m.py", "Shape", 4, 11)];
        let reply = |replace: &str| {
            format!(
                "Reasoning: x.\n\nm.py\n<<<<<<< SEARCH\n    def area(self):\n        return self.w * self.h\n=======\n{replace}>>>>>>> REPLACE\n"
            )
        };
        #[rustfmt::skip]
        let replies = [
            reply("    def area(self):\n        return self.w * self.h * 2\n"),
            reply("    def area(self):\n        # twice: the issue says so\n        return self.w * self.h * 2\n"),
            reply("    def area(self):\n        \"\"\"The area.\"\"\"\n        return self.w*self.h*2\n"),
            reply("    def area(self):\n\n        return self.w  *  self.h * 2\n"),
            reply("    def area(self):\n        return self.w * self.h * 3\n"),
            // Only a comment added: a patch of its own (what `check`'s
            // wrong candidate is), whose meaning is the base's.
            reply("    def area(self):\n        # width times height\n        return self.w * self.h\n"),
        ];
        let replies: Vec<&str> = replies.iter().map(String::as_str).collect();
        let mut conversation = Fake::cycling(32_768, &replies);
        let settings = FixerSettings {
            candidates: replies.len(),
            ..FixerSettings::default()
        };
        let fixes = round_alone(
            &mut conversation,
            (dir.path(), &head),
            &issue,
            &locs,
            &settings,
            &mut Trajectory::new("demo__shapes-1"),
        )?;
        let statuses: Vec<&Status> = fixes.candidates.iter().map(|c| &c.status).collect();
        #[rustfmt::skip]
        assert_eq!(statuses, [
            &Status::Kept, &Status::Duplicate(0), &Status::Duplicate(0), &Status::Duplicate(0),
            &Status::Kept, &Status::Kept,
        ]);
        let members: Vec<&[usize]> = fixes.distinct.iter().map(|d| &d.members[..]).collect();
        assert_eq!(members, [&[0, 1, 2, 3][..], &[4], &[5]]);
        assert_ne!(fixes.distinct[0].meaning, fixes.distinct[1].meaning);
        let inert: Vec<bool> = fixes.distinct.iter().map(|d| d.inert).collect();
        assert_eq!(inert, [false, false, true]);
        Ok(())
    }

    #[test]
    fn candidates_are_spread_over_the_location_sets() -> R {
        #[rustfmt::skip]
        let cases: [(usize, usize, &[usize]); 5] = [
            (4, 1, &[4]), (4, 2, &[2, 2]), (5, 2, &[3, 2]), (8, 3, &[3, 3, 2]), (2, 3, &[1, 1, 0]),
        ];
        for (n, sets, want) in cases {
            assert_eq!(shares(n, sets), want, "{n} over {sets}");
        }
        let (dir, head) = git_workspace(&[("m.py", SHAPES)])?;
        let issue = issue_of("Shape.area is wrong");
        let sets = [
            vec![location("m.py", "Shape.area", 6, 7)],
            vec![location("m.py", "helper", 15, 18)],
        ];
        let mut conversation = Fake::new(32_768, "Reasoning: x.\n\nnothing");
        let settings = FixerSettings {
            candidates: 3,
            show: Show::Located,
            ..FixerSettings::default()
        };
        let mut fixes = Fixes::empty(settings.edit_format);
        let spec = RoundSpec {
            root: dir.path(),
            base: &head,
            issue: &issue,
            location_sets: &sets,
            settings: &settings,
            sampling: &Sampling::default(),
            compile: None,
        };
        let mut trajectory = Trajectory::new("demo__shapes-1");
        generate_round(
            &mut conversation,
            &spec,
            None,
            &[],
            1,
            &mut fixes,
            &mut trajectory,
        )?;
        let of_set: Vec<(usize, f32)> = fixes
            .candidates
            .iter()
            .map(|c| (c.set, c.temperature))
            .collect();
        assert_eq!(of_set, [(0, 0.0), (0, 0.8), (1, 0.0)]);
        let prompts: Vec<String> = conversation
            .prompts
            .iter()
            .map(|m| m.iter().map(|m| m.content.as_str()).collect())
            .collect();
        assert_eq!(prompts.len(), 2);
        assert!(prompts[0].contains("return self.w * self.h") && !prompts[0].contains("def inner"));
        assert!(prompts[1].contains("def inner") && !prompts[1].contains("return self.w * self.h"));
        // What the Fixer was shown is every set's code.
        let shown: Vec<&str> = fixes.shown.iter().map(|l| l.symbol.as_str()).collect();
        assert_eq!(shown.len(), 2, "{:?}", fixes.shown);
        Ok(())
    }

    #[test]
    fn each_format_runs_through_the_fixer_and_is_recorded() -> R {
        let (dir, head) = git_workspace(&[("m.py", SHAPES)])?;
        let issue = issue_of("Shape.area is wrong");
        let locs = [location("m.py", "Shape", 4, 11)];
        let patch = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -4,7 +4,7 @@ import functools\n class Shape:\n     @property\n     def area(self):\n-        return self.w * self.h\n+        return self.w * self.h * 2\n \n     def scale(self, k):\n         self.w *= k\n";
        let cases = [
            (
                EditFormat::SearchReplace,
                "Reasoning: x.\n\nm.py\n<<<<<<< SEARCH\n        return self.w * self.h\n=======\n        return self.w * self.h * 2\n>>>>>>> REPLACE\n",
            ),
            (
                EditFormat::Anchored,
                "Reasoning: x.\n\nm.py\n<<<<<<< SEARCH\n        return self.w * self.h\n=======\n        return self.w * self.h * 2\n>>>>>>> REPLACE\n",
            ),
            (
                EditFormat::Lines,
                "Reasoning: x.\n\nm.py\nreplace lines 7-7 with:\n```\n        return self.w * self.h * 2\n```\n",
            ),
            (
                EditFormat::Definition,
                "Reasoning: x.\n\nm.py::Shape.area\n```\n    @property\n    def area(self):\n        return self.w * self.h * 2\n```\n",
            ),
        ];
        for (format, reply) in cases {
            let mut conversation = Fake::new(32_768, reply);
            let mut trajectory = Trajectory::new("demo__big-1");
            let settings = FixerSettings {
                candidates: 2,
                edit_format: format,
                ..FixerSettings::default()
            };
            let fixes = round_alone(
                &mut conversation,
                (dir.path(), &head),
                &issue,
                &locs,
                &settings,
                &mut trajectory,
            )?;
            let statuses: Vec<&Status> = fixes.candidates.iter().map(|c| &c.status).collect();
            assert_eq!(
                statuses,
                [&Status::Kept, &Status::Duplicate(0)],
                "{format:?}"
            );
            let got = fixes.candidates[0].patch.as_deref().map(normalise);
            assert_eq!(got, Some(normalise(patch)), "{format:?}");
            assert_eq!((fixes.edit_format, fixes.applied()), (format, 2));
            let json = serde_json::to_value(&fixes)?;
            assert_eq!(json["edit_format"], format.name(), "{format:?}");
            // The workspace is left as it was.
            assert_eq!(crate::repo::diff_against(dir.path(), &head)?, "");
        }
        // A reply cut before its edit closed is `no_blocks`.
        let mut conversation = Fake::new(
            32_768,
            "Reasoning: x.\n\nm.py\nreplace lines 7-7 with:\n```\n        return",
        );
        let settings = FixerSettings {
            candidates: 1,
            edit_format: EditFormat::Lines,
            ..FixerSettings::default()
        };
        let fixes = round_alone(
            &mut conversation,
            (dir.path(), &head),
            &issue,
            &locs,
            &settings,
            &mut Trajectory::new("demo__big-1"),
        )?;
        assert_eq!(fixes.candidates[0].status, Status::NoBlocks);
        assert_eq!(fixes.applied(), 0);
        Ok(())
    }

    #[test]
    fn older_records_and_settings_read_as_search_replace() -> R {
        let fixes: Fixes = serde_json::from_str(r#"{"candidates": [], "distinct": []}"#)?;
        assert_eq!(fixes.edit_format, EditFormat::SearchReplace);
        let cases = [
            ("candidates = 2\ntemperature = 0.5\nmax_tokens = 9", EditFormat::SearchReplace),
            ("candidates = 2\ntemperature = 0.5\nmax_tokens = 9\nedit_format = \"lines\"", EditFormat::Lines),
            ("candidates = 2\ntemperature = 0.5\nmax_tokens = 9\nedit_format = \"anchored\"", EditFormat::Anchored),
            ("candidates = 2\ntemperature = 0.5\nmax_tokens = 9\nedit_format = \"definition\"", EditFormat::Definition),
            ("candidates = 2\ntemperature = 0.5\nmax_tokens = 9\nedit_format = \"search_replace\"", EditFormat::SearchReplace),
        ];
        for (text, want) in cases {
            let s: FixerSettings = toml::from_str(text)?;
            assert_eq!(s.edit_format, want, "{text}");
            assert_eq!(serde_json::to_value(want)?, want.name());
        }
        assert!(toml::from_str::<FixerSettings>(
            "candidates = 2\ntemperature = 0.5\nmax_tokens = 9\nedit_format = \"diff\""
        )
        .is_err());
        Ok(())
    }
}
