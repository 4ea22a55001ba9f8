//! The Edit Localizer's `choose` mode: the code index ranks the places to
//! edit ([`crate::index::candidates`]); the model sees the issue and the
//! best [`LocalizerSettings::candidates`] of them, each with a label, and
//! answers with one to [`LocalizerSettings::picks`] labels in one
//! grammar-constrained call. When it names none, or the prompt cannot be
//! fitted to the context, the top-ranked candidates are taken
//! ([`fallback`]), so localisation is never worse than the ranking.

use serde::{Deserialize, Serialize};

use super::budget::{self, Budget};
use super::call::{self, Call};
use super::preamble;
use crate::aci::Location;
use crate::dataset::Issue;
use crate::engine::{grammar, Conversation, EngineError, Message, Sampling};
use crate::index::candidates::{self, Candidate};
use crate::index::symbols::CodeIndex;
use crate::record::trajectory::Step;
use crate::trajectory::Trajectory;

/// Candidates shown to the model by default: enough that the gold
/// function is usually among them, few enough for a small model to read.
pub const SHOWN_CANDIDATES: usize = 10;
/// Most labels the model may pick by default: F1 punishes naming many
/// files, and the fixer shows each located span's code.
pub const MAX_PICKS: usize = 2;
/// Most labels a configuration may allow: the grammar lists every sequence
/// of distinct labels, which grows as candidates^picks.
pub const PICKS_LIMIT: usize = 3;
/// Most candidates a configuration may show: with [`PICKS_LIMIT`] picks
/// that is 20³ sequences in the grammar at the most.
pub const CANDIDATES_LIMIT: usize = 20;
/// Files the fallback takes its locations from. Measured with
/// `scripts/bench-localize` on the 138 SWE-bench Lite test tasks of the nine
/// repositories at hand (mean file-level F1 / gold-function hit): the first
/// function alone 0.471 / 0.18, the first two of the top file 0.471 / 0.27,
/// the first three from at most two files 0.483 / 0.33 (plain BM25's top
/// three files: F1 0.257).
pub const FALLBACK_FILES: usize = 2;
/// Functions the fallback takes from those files (see [`FALLBACK_FILES`]):
/// three spans are still few enough for the fixer's prompt.
pub const FALLBACK_FUNCTIONS: usize = 3;
/// Tokens of the reply: `10, 9, 8` is at most a dozen.
pub const REPLY_TOKENS: u32 = 12;
/// Characters of a candidate's docstring shown.
pub const DOCSTRING_CHARS: usize = 100;
/// Most location sets a configuration may ask for: each is one more
/// localizer reply (a dozen tokens) and one more Fixer prompt per round.
pub const SETS_LIMIT: usize = 8;
/// Temperature of the localizer's replies after the first (greedy) one,
/// which give the location sets after the first: a reply is a few labels,
/// and at 1 the model's second and third choices come up as often as it
/// weighs them.
pub const SET_TEMPERATURE: f32 = 1.0;

/// How the localizer works.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalizerMode {
    /// One call choosing among the index's ranked candidates.
    #[default]
    Choose,
    /// The ReAct agent exploring with commands (`[agents.localizer]`).
    React,
}

/// The `[localizer]` settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalizerSettings {
    pub mode: LocalizerMode,
    /// Candidates shown to the model (K), at most [`CANDIDATES_LIMIT`].
    pub candidates: usize,
    /// Most labels the model may pick (M), at most [`PICKS_LIMIT`].
    pub picks: usize,
    /// Location sets the Fixer's candidates are spread over, at most
    /// [`SETS_LIMIT`] (Agentless samples four): the greedy reply's picks,
    /// then those of sampled replies that differ, then the index's top
    /// candidates when they differ, so that one wrong localisation costs a
    /// share of the candidates and not all of them. 1: the greedy picks.
    pub sets: usize,
}

impl Default for LocalizerSettings {
    fn default() -> Self {
        LocalizerSettings {
            mode: LocalizerMode::Choose,
            candidates: SHOWN_CANDIDATES,
            picks: MAX_PICKS,
            sets: 1,
        }
    }
}

/// Where the localizer's locations came from, and what it was shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub locations: Vec<Location>,
    /// The location sets after `locations` (see [`LocalizerSettings::sets`]).
    pub other_sets: Vec<Vec<Location>>,
    /// `localizer` when the model picked them, `index` for the fallback.
    pub source: String,
    /// The candidates shown (or that would have been), best first.
    pub shown: Vec<Candidate>,
}

/// The localizer's role, after the shared preamble.
const ROLE: &str = "You decide where in the repository's source code the issue must be fixed. \
                    You do not edit anything.";

fn location(c: &Candidate) -> Location {
    Location {
        path: c.path.clone(),
        symbol: c.symbol.clone(),
        start_line: c.start_line,
        end_line: c.end_line,
    }
}

/// The top-ranked candidates as locations: the first
/// [`FALLBACK_FUNCTIONS`] from at most [`FALLBACK_FILES`] files.
pub fn fallback(ranked: &[Candidate]) -> Vec<Location> {
    candidates::top_locations(ranked, FALLBACK_FILES, FALLBACK_FUNCTIONS)
        .iter()
        .map(location)
        .collect()
}

/// The list of candidates as shown: `[N] path::qualname (lines a-b)`, then
/// the signature and the docstring's first line, indented.
pub fn listing(shown: &[Candidate], index: &CodeIndex) -> String {
    let mut out = String::new();
    for (i, c) in shown.iter().enumerate() {
        out.push_str(&format!(
            "[{}] {}::{} (lines {}-{})\n",
            i + 1,
            c.path,
            c.symbol,
            c.start_line,
            c.end_line
        ));
        if let Some(s) = index.symbol(&c.path, &c.symbol) {
            out.push_str(&format!("    {}\n", s.signature));
            if let Some(doc) = &s.docstring {
                let doc: String = doc.chars().take(DOCSTRING_CHARS).collect();
                out.push_str(&format!("    \"{doc}\"\n"));
            }
        }
    }
    out
}

/// The prompt: the shared preamble with the issue (whole or cut), then
/// the role, the listing and the question.
pub fn messages(issue: &str, listing: &str, picks: usize) -> Vec<Message> {
    let more = if picks > 1 {
        format!(
            " If {picks} places must change together, give up to {picks} labels separated by \
             \", \", most important first."
        )
    } else {
        String::new()
    };
    preamble::messages(
        issue,
        &format!(
            "{ROLE}\n\nCANDIDATE PLACES TO EDIT (functions and methods of the repository):\n\
             {listing}\nWhich function or method must be changed to fix the issue? Answer with \
             its label number only.{more}"
        ),
    )
}

/// Every sequence of 1 to `picks` distinct labels among `1..=n`, joined
/// with `, `.
pub fn label_options(n: usize, picks: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<Vec<usize>> = (1..=n).map(|i| vec![i]).collect();
    stack.reverse();
    while let Some(seq) = stack.pop() {
        out.push(
            seq.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        );
        if seq.len() < picks {
            for next in (1..=n).rev().filter(|i| !seq.contains(i)) {
                let mut longer = seq.clone();
                longer.push(next);
                stack.push(longer);
            }
        }
    }
    out
}

/// The labels a reply names, as indices into the `n` shown, in order, each
/// once; anything that is not a label in range is ignored.
pub fn parse_labels(reply: &str, n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for word in reply.split(|c: char| !c.is_ascii_digit()) {
        if let Ok(label) = word.parse::<usize>() {
            if (1..=n).contains(&label) && !out.contains(&(label - 1)) {
                out.push(label - 1);
            }
        }
    }
    out
}

/// Chooses among `ranked` (best first, from
/// [`candidates::rank`]) with one call on `conversation`, recorded in
/// `trajectory`; see the module's documentation.
pub fn choose(
    conversation: &mut dyn Conversation,
    issue: &Issue,
    index: &CodeIndex,
    ranked: &[Candidate],
    settings: &LocalizerSettings,
    sampling: &Sampling,
    trajectory: &mut Trajectory,
) -> Result<Choice, EngineError> {
    let k = settings.candidates.clamp(1, CANDIDATES_LIMIT);
    let picks = settings.picks.clamp(1, PICKS_LIMIT);
    let shown: Vec<Candidate> = ranked.iter().take(k).cloned().collect();
    let fall_back = |shown: Vec<Candidate>| Choice {
        locations: fallback(ranked),
        other_sets: Vec::new(),
        source: "index".into(),
        shown,
    };
    if shown.is_empty() {
        return Ok(fall_back(shown));
    }
    let list = listing(&shown, index);
    let text = issue.problem_statement.trim();
    let build = |t: &str| messages(t, &list, picks);
    let mut msgs = build(text);
    if let Some(budget) = Budget::of(conversation, REPLY_TOKENS as usize) {
        let (full_tokens, fits) = budget.measure(conversation, &msgs)?;
        let shared = preamble::shared_issue(conversation, text)?;
        if !fits || shared.cut.is_some() {
            let shared_msgs = build(&shared.text);
            // The issue as every stage shows it; cut further (for this
            // stage alone) only when the listing does not fit beside it.
            let (cut_msgs, cuts) = if budget.measure(conversation, &shared_msgs)?.1 {
                (shared_msgs, shared.cut.into_iter().collect())
            } else {
                match budget::fit_issue(conversation, &budget, text, build)? {
                    Some(cut) => (build(&cut.text), cut.cut.into_iter().collect()),
                    None => {
                        let shortest = budget::cut_issue(text, budget::MIN_ISSUE_CHARS);
                        (build(&shortest.text), shortest.cut.into_iter().collect())
                    }
                }
            };
            let tokens = conversation.count_tokens(&cut_msgs)?;
            let trim = budget.trim("localizer", full_tokens, tokens, cuts);
            let fits = trim.fits;
            trajectory.record(Step::Trimmed(Box::new(trim)));
            if !fits {
                tracing::warn!(
                    "{}: the localizer's smallest prompt ({tokens} tokens) does not fit the \
                     context of {}: the index's top candidates are taken",
                    issue.instance_id,
                    budget.context
                );
                return Ok(fall_back(shown));
            }
            msgs = cut_msgs;
        }
    }
    let g = grammar::choice(&label_options(shown.len(), picks))
        .map_err(|e| EngineError::Grammar(e.to_string()))?;
    let sets = settings.sets.clamp(1, SETS_LIMIT);
    let generation = call::constrained(
        conversation,
        trajectory,
        Call {
            agent: "localizer",
            messages: msgs,
            sampling: Sampling {
                temperature: 0.0,
                max_tokens: REPLY_TOKENS,
                ..sampling.clone()
            },
            n: sets,
            temperatures: (sets > 1).then(|| call::greedy_first(sets, SET_TEMPERATURE)),
            grammar: &g,
        },
    )?;
    let replies: Vec<Vec<Location>> = generation
        .candidates
        .iter()
        .map(|c| {
            parse_labels(&c.text, shown.len())
                .into_iter()
                .take(picks)
                .map(|i| location(&shown[i]))
                .collect()
        })
        .collect();
    let Some(picked) = replies.first().filter(|p| !p.is_empty()).cloned() else {
        return Ok(fall_back(shown));
    };
    let mut all = vec![picked];
    for set in replies.into_iter().skip(1).chain([fallback(ranked)]) {
        if all.len() < sets && !set.is_empty() && !all.iter().any(|s| same_set(s, &set)) {
            all.push(set);
        }
    }
    let locations = all.remove(0);
    Ok(Choice {
        locations,
        other_sets: all,
        source: "localizer".into(),
        shown,
    })
}

/// Whether two location sets name the same spans, in any order.
fn same_set(a: &[Location], b: &[Location]) -> bool {
    a.len() == b.len() && a.iter().all(|l| b.contains(l))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::budget::fake::Fake;
    use crate::index::symbols::parse_symbols;

    type R = Result<(), Box<dyn std::error::Error>>;

    const SOURCE: &str = "class Card:\n    def _split(self):\n        \"\"\"Splits the card.\"\"\"\n        return 1\n\n    def image(self):\n        return 2\n\n\ndef format_value(v):\n    return v\n";

    fn index() -> CodeIndex {
        CodeIndex {
            files: vec![
                parse_symbols("pkg/card.py", SOURCE),
                parse_symbols("pkg/util.py", "def helper():\n    return 0\n"),
            ],
        }
    }

    fn ranked() -> Vec<Candidate> {
        let c = |path: &str, symbol: &str, lines: (usize, usize), score: f64| Candidate {
            path: path.into(),
            symbol: symbol.into(),
            start_line: lines.0,
            end_line: lines.1,
            score,
            why: "bm25".into(),
        };
        vec![
            c("pkg/util.py", "helper", (1, 2), 3.0),
            c("pkg/card.py", "Card._split", (2, 4), 2.0),
            c("pkg/util.py", "helper2", (4, 5), 1.5),
            c("pkg/card.py", "Card.image", (6, 7), 1.0),
        ]
    }

    fn issue(text: &str) -> Issue {
        Issue {
            instance_id: "t-1".into(),
            repo: "o/r".into(),
            base_commit: "abc".into(),
            problem_statement: text.into(),
            created_at: None,
        }
    }

    fn symbols(l: &[Location]) -> Vec<String> {
        l.iter()
            .map(|l| format!("{}::{}", l.path, l.symbol))
            .collect()
    }

    fn kinds(t: &Trajectory) -> Vec<&'static str> {
        t.steps
            .iter()
            .map(|s| match &s.step {
                Step::ModelCall(_) => "model_call",
                Step::Trimmed(t) if t.fits => "trimmed",
                Step::Trimmed(_) => "trimmed_unfit",
                _ => "other",
            })
            .collect()
    }

    #[test]
    fn the_models_labels_become_the_locations() -> R {
        // (reply, context, locations, source, steps)
        /// (reply, context, locations, source, steps)
        type Case<'a> = (&'a str, usize, &'a [&'a str], &'a str, &'a [&'a str]);
        let cases: &[Case] = &[
            (
                "2",
                4096,
                &["pkg/card.py::Card._split"],
                "localizer",
                &["model_call"],
            ),
            (
                "4, 1",
                4096,
                &["pkg/card.py::Card.image", "pkg/util.py::helper"],
                "localizer",
                &["model_call"],
            ),
            // Out of range and repeated labels are ignored.
            (
                "9, 2, 2",
                4096,
                &["pkg/card.py::Card._split"],
                "localizer",
                &["model_call"],
            ),
            // Nothing named: the first three from at most two files.
            (
                "none",
                4096,
                &[
                    "pkg/util.py::helper",
                    "pkg/card.py::Card._split",
                    "pkg/util.py::helper2",
                ],
                "index",
                &["model_call"],
            ),
            // The prompt does not fit: no call, the same fallback.
            (
                "2",
                60,
                &[
                    "pkg/util.py::helper",
                    "pkg/card.py::Card._split",
                    "pkg/util.py::helper2",
                ],
                "index",
                &["trimmed_unfit"],
            ),
        ];
        for (reply, context, want, source, steps) in cases {
            let mut fake = Fake::new(*context, reply);
            let mut t = Trajectory::new("t-1");
            let choice = choose(
                &mut fake,
                &issue("Card._split returns the wrong value."),
                &index(),
                &ranked(),
                &LocalizerSettings::default(),
                &Sampling::default(),
                &mut t,
            )?;
            assert_eq!(symbols(&choice.locations), *want, "{reply} in {context}");
            assert_eq!(choice.source, *source, "{reply} in {context}");
            assert_eq!(choice.shown, ranked(), "{reply} in {context}");
            assert_eq!(kinds(&t), *steps, "{reply} in {context}");
        }
        Ok(())
    }

    #[test]
    fn location_sets_are_the_distinct_replies_then_the_index() -> R {
        let fallback = "pkg/util.py::helper pkg/card.py::Card._split pkg/util.py::helper2";
        // (sets, the replies of candidates 1.., the sets after the first)
        type Case<'a> = (usize, &'a [&'a str], &'a [&'a str]);
        #[rustfmt::skip]
        let cases: &[Case] = &[
            (1, &["2"], &[]),
            (2, &["2", "2"], &[fallback]),
            (3, &["2", "4, 2", "2"], &["pkg/card.py::Card.image pkg/card.py::Card._split", fallback]),
            // Order does not make a set another one.
            (3, &["2, 4", "4, 2", "2, 4"], &[fallback]),
            (3, &["2", "1", "3"], &["pkg/util.py::helper", "pkg/util.py::helper2"]),
            // A sampled reply naming nothing gives no set.
            (2, &["2", "none"], &[fallback]),
        ];
        for (sets, replies, want) in cases {
            let mut fake = Fake::cycling(4096, replies);
            let mut t = Trajectory::new("t-1");
            let settings = LocalizerSettings {
                sets: *sets,
                ..LocalizerSettings::default()
            };
            let choice = choose(
                &mut fake,
                &issue("Card._split returns the wrong value."),
                &index(),
                &ranked(),
                &settings,
                &Sampling::default(),
                &mut t,
            )?;
            let case = format!("{sets} sets of {replies:?}");
            let first = symbols(&choice.locations).join(" ");
            let greedy = if replies[0].contains('4') {
                "pkg/card.py::Card._split pkg/card.py::Card.image"
            } else {
                "pkg/card.py::Card._split"
            };
            assert_eq!(first, greedy, "{case}");
            let got: Vec<String> = choice
                .other_sets
                .iter()
                .map(|s| symbols(s).join(" "))
                .collect();
            assert_eq!(got, *want, "{case}");
            let call = t.model_calls().next().ok_or("no call")?;
            assert_eq!(call.candidates.len().max(1), *sets, "{case}");
        }
        Ok(())
    }

    #[test]
    fn the_prompt_lists_labels_signatures_and_docstrings() -> R {
        let mut fake = Fake::new(4096, "1");
        let mut t = Trajectory::new("t-1");
        choose(
            &mut fake,
            &issue("Card._split returns the wrong value."),
            &index(),
            &ranked()[..2],
            &LocalizerSettings::default(),
            &Sampling::default(),
            &mut t,
        )?;
        let prompt = &fake.prompts[0][1].content;
        let listing = "[1] pkg/util.py::helper (lines 1-2)\n    def helper():\n\
                       [2] pkg/card.py::Card._split (lines 2-4)\n    def _split(self):\n    \
                       \"Splits the card.\"\n";
        assert!(prompt.contains(listing), "{prompt}");
        assert!(prompt.starts_with("ISSUE:\nCard._split returns the wrong value.\n"));
        assert!(prompt.contains("give up to 2 labels"), "{prompt}");
        Ok(())
    }

    #[test]
    fn a_long_issue_is_cut_to_fit() -> R {
        let long = "The card is wrong. ".repeat(400);
        let mut fake = Fake::new(1200, "2");
        let mut t = Trajectory::new("t-1");
        let choice = choose(
            &mut fake,
            &issue(&long),
            &index(),
            &ranked(),
            &LocalizerSettings::default(),
            &Sampling::default(),
            &mut t,
        )?;
        assert_eq!(kinds(&t), ["trimmed", "model_call"]);
        assert_eq!(symbols(&choice.locations), ["pkg/card.py::Card._split"]);
        assert!(fake.prompts[0][1].content.contains("of the issue left out"));
        Ok(())
    }

    #[test]
    fn no_candidates_no_call() -> R {
        let mut fake = Fake::new(4096, "1");
        let mut t = Trajectory::new("t-1");
        let choice = choose(
            &mut fake,
            &issue("x"),
            &index(),
            &[],
            &LocalizerSettings::default(),
            &Sampling::default(),
            &mut t,
        )?;
        assert_eq!(
            (choice.locations.len(), choice.source.as_str()),
            (0, "index")
        );
        assert!(t.steps.is_empty() && fake.prompts.is_empty());
        Ok(())
    }

    #[test]
    fn label_sequences_and_their_parsing() {
        assert_eq!(label_options(3, 1), ["1", "2", "3"]);
        assert_eq!(
            label_options(3, 2),
            ["1", "1, 2", "1, 3", "2", "2, 1", "2, 3", "3", "3, 1", "3, 2"]
        );
        assert_eq!(label_options(10, 3).len(), 10 + 10 * 9 + 10 * 9 * 8);
        let cases: &[(&str, usize, &[usize])] = &[
            ("2", 3, &[1]),
            ("3, 1", 3, &[2, 0]),
            ("1, 1", 3, &[0]),
            ("0, 4, 2", 3, &[1]),
            ("none", 3, &[]),
            ("", 3, &[]),
        ];
        for (reply, n, want) in cases {
            assert_eq!(parse_labels(reply, *n), *want, "{reply}");
        }
    }

    #[test]
    fn settings_default_to_choose_and_read_from_toml() -> R {
        let s: LocalizerSettings = toml::from_str("mode = \"react\"")?;
        assert_eq!(
            s,
            LocalizerSettings {
                mode: LocalizerMode::React,
                candidates: SHOWN_CANDIDATES,
                picks: MAX_PICKS,
                sets: 1,
            }
        );
        assert_eq!(
            toml::from_str::<LocalizerSettings>("")?,
            LocalizerSettings::default()
        );
        assert!(toml::from_str::<LocalizerSettings>("mode = \"guess\"").is_err());
        Ok(())
    }
}
