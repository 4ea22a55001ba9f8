//! The Issue Reproducer by sampling: one prompt (the issue, the located
//! code, an existing test file of that code as the example of the
//! repository's conventions) and N test files decoded in one batch (the
//! first greedy), each a fenced Python block enforced by grammar. Each
//! candidate is written as a new test file in its own worktree, installed
//! like the task's, and run the repository's way in its own sandbox, in
//! parallel. A candidate is accepted when it fails on the base commit
//! inside a test's body (`aci::check::verdict_in`'s `Failed`, not a
//! collection, import or set-up error) as the issue describes
//! ([`evidence::judge`]: in an assertion, or with an exception the issue
//! names; anything else is "other issues"); among several, the one whose
//! assertions take most from the issue, then the one whose failure most
//! accepted candidates share. A candidate broken by a name it used without
//! importing runs again with the import, when one module of the
//! repository defines the name ([`missing`]). The accepted test is cut after the statement that
//! failed ([`evidence::cut_after`]) when the cut one still fails so.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::budget::{self, Budget};
use super::call::{self, Call};
use super::{code, evidence, judge, missing, parallel, preamble, template};
use crate::aci::check::{self, Verdict};
use crate::aci::{Location, SubmittedTest};
use crate::dataset::Issue;
use crate::engine::{Conversation, EngineError, Message, Sampling};
use crate::env::task::TaskEnv;
use crate::index::symbols::{self, SymbolKind};
use crate::record::trajectory::{Cut, Step, Trim};
use crate::repo::Workspace;
use crate::trajectory::Trajectory;

/// How the Issue Reproducer writes its test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReproducerMode {
    /// N test files from one prompt, each run; the agreeing failure wins.
    #[default]
    Sample,
    /// The ReAct agent (`[agents.reproducer]`): explores, writes and hands
    /// a test in with `submit_test`.
    React,
}

/// The Issue Reproducer's settings (`[reproducer]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReproducerSettings {
    pub mode: ReproducerMode,
    /// Candidates of sample mode (N).
    pub candidates: usize,
    /// Temperature of candidates 2..N (candidate 1 is greedy).
    pub temperature: f32,
    /// Most tokens of one candidate: a short test file (imports and one
    /// or two test functions) takes 100 to 300.
    pub max_tokens: u32,
    /// Which failing candidates are accepted ([`Accept`]): `issue`, the
    /// issue reproduced (an assertion, or an exception the issue names),
    /// or `failure`, any failure in a test's body.
    pub accept: Accept,
}

impl Default for ReproducerSettings {
    fn default() -> Self {
        ReproducerSettings {
            mode: ReproducerMode::Sample,
            // Measured on the demo with the 0.5B model: the greedy test is
            // 92-150 tokens, sampled ones run to 384; six took 73 s of a
            // 200 s task, and the sample's wall time is its longest reply.
            candidates: 4,
            temperature: 0.8,
            max_tokens: 320,
            accept: Accept::Issue,
        }
    }
}

/// Lines of the template's head (its imports) shown in the prompt.
pub const EXCERPT_HEAD_LINES: usize = 30;

/// Lines of one example test of the template shown in the prompt.
pub const EXCERPT_TEST_LINES: usize = 30;

/// Example tests of the template shown when they fit.
pub const EXCERPT_TESTS: usize = 2;

/// The new test file's name, in the template's directory.
pub const TEST_FILE_NAME: &str = "test_reproduce_issue.py";

pub use super::evidence::{test_bug, Accept, TEST_BUG_EXCEPTIONS};

/// Characters of a candidate's test output kept in its sample (the end,
/// where the failure or the error is).
pub const SAMPLE_OUTPUT_CHARS: usize = 2000;

/// Grammar bounds of a reply: import lines (and blank lines among them),
/// lines before the first test function, lines from it on, and the
/// longest line. Enough for a short test file; few enough that a small
/// model closes the block within [`ReproducerSettings::max_tokens`] or is
/// cut off at a line's end.
pub const MAX_IMPORT_LINES: usize = 16;
/// See [`MAX_IMPORT_LINES`].
pub const MAX_LINES_BEFORE_TEST: usize = 24;
/// See [`MAX_IMPORT_LINES`].
pub const MAX_TEST_LINES: usize = 48;
/// See [`MAX_IMPORT_LINES`].
pub const MAX_CODE_LINE_CHARS: usize = 160;

/// Why the reproducer could not run (a candidate that cannot be tried is
/// a sample with status `error`, not this).
#[derive(Debug, thiserror::Error)]
pub enum ReproduceError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("no location to reproduce the issue at: the localizer found none")]
    NoLocations,
}

/// What became of one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleStatus {
    /// It failed on the base commit inside a test's body, as `accept`
    /// asks (the issue reproduced): accepted.
    Failed,
    /// It failed, but not as the issue describes (Agentless's "other
    /// issues": a wrong call, an exception the issue does not name).
    Other,
    /// It passed: it does not reproduce the issue.
    Passed,
    /// Its run was broken (an import or syntax error, no test ran, a
    /// timeout).
    Broken,
    /// The reply holds no test function.
    NoTest,
    /// It could not be tried (its worktree or install failed).
    Error,
}

/// One candidate test and its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub index: usize,
    pub temperature: f32,
    pub reply: String,
    pub status: SampleStatus,
    /// Why it is broken or could not be tried.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// What it failed with ([`check::failure_signature`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Literals of its assertions found in the issue's text
    /// ([`evidence::issue_literals`]): an expectation from the issue.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub issue_literals: usize,
    /// The accepted test was cut after this line (1-based), the statement
    /// where it failed on the base commit ([`evidence::cut_after`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_after: Option<usize>,
    /// The same file as an earlier candidate (its index), run once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_as: Option<usize>,
    /// Imports added to its file before the run that counts: names it used
    /// without importing ([`missing`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<String>,
    /// The end of its test run's output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Other accepted tests kept beside the chosen one at most: each is one
/// more test run per candidate patch.
pub const MAX_OTHER_TESTS: usize = 3;

/// The reproducer's result: the accepted test (if any), the other
/// accepted ones, and every sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Reproduction {
    pub test: Option<SubmittedTest>,
    /// The other distinct files accepted as reproducing the issue (at most
    /// [`MAX_OTHER_TESTS`], in sample order), whole: candidates are judged
    /// by every one, so that one test that is wrong does not decide alone.
    pub others: Vec<SubmittedTest>,
    pub samples: Vec<Sample>,
    /// Index of the accepted sample.
    pub chosen: Option<usize>,
}

/// The reproducer's role, after the shared preamble and the code.
const ROLE: &str = "You write tests that reproduce reported bugs.";

/// The template's imports and up to `tests` of its test functions (each
/// cut to [`EXCERPT_TEST_LINES`], a method with its class's line), as the
/// example of how the repository's tests import and call its code.
pub fn excerpt(path: &str, text: &str, tests: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let file = symbols::parse_symbols(path, text);
    let first_def = file
        .symbols
        .first()
        .map_or(lines.len() + 1, |s| s.start_line);
    let head_len = first_def.saturating_sub(1).min(lines.len());
    let mut out: Vec<String> = lines[..head_len.min(EXCERPT_HEAD_LINES)]
        .iter()
        .map(|l| l.to_string())
        .collect();
    if head_len > EXCERPT_HEAD_LINES {
        out.push("# ...".into());
    }
    while out.last().is_some_and(|l| l.trim().is_empty()) {
        out.pop();
    }
    let examples = file
        .symbols
        .iter()
        .filter(|s| s.kind != SymbolKind::Class && s.name.starts_with("test"))
        .take(tests);
    let mut classes_shown: Vec<&str> = Vec::new();
    for s in examples {
        out.push(String::new());
        if s.kind == SymbolKind::Method {
            let class = file.symbols.iter().find(|c| {
                c.kind == SymbolKind::Class
                    && c.start_line <= s.start_line
                    && s.end_line <= c.end_line
                    && s.qualname.starts_with(&format!("{}.", c.qualname))
            });
            if let Some(c) = class.filter(|c| !classes_shown.contains(&c.qualname.as_str())) {
                if let Some(line) = lines.get(c.def_line.saturating_sub(1)) {
                    out.push(line.to_string());
                }
                classes_shown.push(&c.qualname);
            }
        }
        let start = s.start_line.max(1);
        let end = s
            .end_line
            .min(start + EXCERPT_TEST_LINES - 1)
            .min(lines.len());
        for line in lines.get(start - 1..end).unwrap_or_default() {
            out.push(line.to_string());
        }
        if end < s.end_line {
            let indent: String = lines
                .get(end.saturating_sub(1))
                .map(|l| l.chars().take_while(|c| c.is_whitespace()).collect())
                .unwrap_or_default();
            out.push(format!("{indent}# ..."));
        }
    }
    out.join("\n")
}

/// The repository's path of the new test file: [`TEST_FILE_NAME`] in the
/// template's directory (else that of the located modules' first test
/// file, else `tests/` when the repository has one, else its root),
/// numbered when a file of that name exists.
pub fn test_path(template: Option<&str>, module_tests: &[String], all_files: &[String]) -> String {
    let dir_of = |p: &str| p.rsplit_once('/').map(|(d, _)| format!("{d}/"));
    let dir = template
        .and_then(dir_of)
        .or_else(|| module_tests.first().and_then(|p| dir_of(p)))
        .or_else(|| {
            all_files
                .iter()
                .any(|f| f.starts_with("tests/"))
                .then(|| "tests/".to_string())
        })
        .unwrap_or_default();
    let stem = TEST_FILE_NAME.trim_end_matches(".py");
    (1..)
        .map(|n| match n {
            1 => format!("{dir}{TEST_FILE_NAME}"),
            n => format!("{dir}{stem}_{n}.py"),
        })
        .find(|p| !all_files.contains(p))
        .unwrap_or_default()
}

/// The grammar of a reply: a fenced Python block that starts with import
/// lines and holds at least one `def test_` line (indented or not), every
/// repetition bounded (see [`MAX_IMPORT_LINES`]).
pub fn grammar() -> String {
    let rest = MAX_CODE_LINE_CHARS - 1;
    format!(
        "root ::= \"```python\\n\" imports body \"```\"\n\
         imports ::= import (import | \"\\n\"){{0,{imports}}}\n\
         import ::= (\"import \" | \"from \") [^\\n]{{1,{rest}}} \"\\n\"\n\
         body ::= line{{0,{before}}} test line{{1,{after}}}\n\
         test ::= [ \\t]{{0,8}} \"def test\" [A-Za-z0-9_]{{1,60}} \"(\" [^\\n]{{0,{rest}}} \"\\n\"\n\
         line ::= ([^`\\n] [^\\n]{{0,{rest}}})? \"\\n\"\n",
        imports = MAX_IMPORT_LINES - 1,
        before = MAX_LINES_BEFORE_TEST,
        after = MAX_TEST_LINES,
    )
}

/// The test file a reply holds: the fenced block's code (a reply cut off
/// by the token limit loses its unfinished last line); `None` when it
/// has no test function.
pub fn code_of(reply: &str) -> Option<String> {
    let body = reply
        .trim_start()
        .strip_prefix("```python")
        .or_else(|| reply.trim_start().strip_prefix("```"))
        .map(|b| b.strip_prefix('\n').unwrap_or(b));
    let code = match body {
        Some(b) => match b.find("```") {
            Some(0) => String::new(),
            Some(end) => b[..end].to_string(),
            None => b
                .rfind('\n')
                .map_or(String::new(), |end| b[..=end].to_string()),
        },
        None => format!("{}\n", reply.trim_end()),
    };
    code.lines()
        .any(|l| l.trim_start().starts_with("def test"))
        .then_some(code)
}

/// The accepted sample to keep (index into `samples`): among those that
/// failed on the base commit, one whose assertions take most literals
/// from the issue, then one of the signature most of them share (a
/// sample without one shares with none); ties, and several of the
/// winning signature, go to the lowest index.
pub fn choose(samples: &[Sample]) -> Option<usize> {
    let accepted: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.status == SampleStatus::Failed)
        .collect();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &accepted {
        if let Some(sig) = &s.signature {
            *counts.entry(sig.as_str()).or_default() += 1;
        }
    }
    let mut best: Option<(usize, (usize, usize))> = None;
    for s in &accepted {
        let votes = s
            .signature
            .as_deref()
            .and_then(|sig| counts.get(sig).copied())
            .unwrap_or(1);
        let score = (s.issue_literals, votes);
        if best.is_none_or(|(_, v)| score > v) {
            best = Some((s.index, score));
        }
    }
    best.map(|(i, _)| i)
}

/// The prompt, showing `issue` (whole or cut), the code `sections` (with
/// line numbers, as the fixer shows them, so that both prompts share the
/// preamble and the code), and the template's excerpt (its path and text)
/// when there is one; then the role and what to write.
pub fn messages(
    issue: &str,
    sections: &[(String, String)],
    template: Option<(&str, &str)>,
    new_path: &str,
) -> Vec<Message> {
    let example = match template {
        Some((path, text)) => format!(
            "\n\nAN EXISTING TEST FILE OF THIS CODE ({path}), to show how its tests import and \
             call it:\n```python\n{}\n```",
            text.trim_end()
        ),
        None => String::new(),
    };
    preamble::messages(
        issue,
        &format!(
            "{}{ROLE}{example}\n\nWrite a NEW test file, {new_path}, with one or two test \
             functions that reproduce the issue: each calls the code as the issue describes and \
             asserts the behaviour the issue expects, with the expected values taken from the \
             issue's text, so that it FAILS in that assertion on the code above and passes once \
             the issue is fixed. Import what you need as the existing tests do. \
             Reply with the whole file in one ```python block that starts with its imports.",
            preamble::code(sections, true)
        ),
    )
}

/// The prompt as it will be sent, and the record of its cuts.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub messages: Vec<Message>,
    pub trim: Option<Trim>,
}

/// The prompt fitted to the context (less `reply_tokens`): everything
/// whole if it fits; else, in order until it fits with the issue as every
/// stage shows it ([`preamble::shared_issue`]: whole unless it takes more
/// than 40% of the context), everything else whole, one example test of the
/// template instead of two, the last locations left out, and the
/// template's head alone; else the same shapes with the issue cut further,
/// to a head and a tail ([`budget::fit_issue`]); else the smallest prompt,
/// with a trim whose `fits` is false.
pub fn fit_prompt(
    conversation: &dyn Conversation,
    root: &Path,
    issue: &str,
    locations: &[Location],
    template: Option<&SubmittedTest>,
    new_path: &str,
    reply_tokens: usize,
) -> Result<Prompt, ReproduceError> {
    let sections = code::code_sections(root, locations, true);
    if sections.is_empty() {
        return Err(ReproduceError::NoLocations);
    }
    let issue = issue.trim();
    let examples: Vec<String> = (0..=EXCERPT_TESTS)
        .map(|k| template.map_or(String::new(), |t| excerpt(&t.path, &t.text, k)))
        .collect();
    let build = |text: &str, files: usize, tests: usize| {
        let example = template.map(|t| (t.path.as_str(), examples[tests].as_str()));
        messages(text, &sections[..files], example, new_path)
    };
    let all = sections.len();
    let full = build(issue, all, EXCERPT_TESTS);
    let Some(budget) = Budget::of(conversation, reply_tokens) else {
        return Ok(Prompt {
            messages: full,
            trim: None,
        });
    };
    let (full_tokens, fits) = budget.measure(conversation, &full)?;
    let shared = preamble::shared_issue(conversation, issue)?;
    if fits && shared.cut.is_none() {
        return Ok(Prompt {
            messages: full,
            trim: None,
        });
    }
    let mut shapes: Vec<(usize, usize)> = vec![(all, EXCERPT_TESTS), (all, 1)];
    shapes.extend((1..all).rev().map(|n| (n, 1)));
    shapes.push((1, 0));
    let cuts_of = |files: usize, tests: usize| -> Vec<Cut> {
        let mut cuts: Vec<Cut> = Vec::new();
        if let Some(t) = template.filter(|_| tests < EXCERPT_TESTS) {
            cuts.push(Cut::Span {
                path: t.path.clone(),
                symbol: format!("example tests after the first {tests}"),
                kept_lines: examples[tests].lines().count(),
                left_out: Vec::new(),
            });
        }
        cuts.extend(sections[files..].iter().map(|(path, _)| Cut::Location {
            path: path.clone(),
            symbol: String::new(),
        }));
        cuts
    };
    let done = |msgs: Vec<Message>, cuts: Vec<Cut>| -> Result<Prompt, ReproduceError> {
        let tokens = conversation.count_tokens(&msgs)?;
        Ok(Prompt {
            trim: Some(budget.trim("reproducer", full_tokens, tokens, cuts)),
            messages: msgs,
        })
    };
    for &(files, tests) in &shapes {
        let msgs = build(&shared.text, files, tests);
        if budget.measure(conversation, &msgs)?.1 {
            let mut cuts: Vec<Cut> = shared.cut.clone().into_iter().collect();
            cuts.extend(cuts_of(files, tests));
            return done(msgs, cuts);
        }
    }
    // Not even the smallest shape fits beside the shared issue: this stage
    // cuts it further, and shares only the issue's head with the others.
    for &(files, tests) in &shapes[1..] {
        let fitted = budget::fit_issue(conversation, &budget, issue, |t| build(t, files, tests))?;
        if let Some(cut) = fitted {
            let mut cuts = cuts_of(files, tests);
            cuts.extend(cut.cut);
            return done(build(&cut.text, files, tests), cuts);
        }
    }
    let shortest = budget::cut_issue(issue, budget::MIN_ISSUE_CHARS);
    let mut cuts = cuts_of(1, 0);
    cuts.extend(shortest.cut);
    done(build(&shortest.text, 1, 0), cuts)
}

/// Where the reproducer works and what it is given besides the issue.
pub struct Inputs<'a> {
    /// The task's workspace at the base commit, installed in `env`.
    pub ws: &'a Workspace,
    pub env: &'a TaskEnv,
    pub locations: &'a [Location],
    /// The test template (an existing test file of the located code, or
    /// the template agent's test).
    pub template: Option<&'a SubmittedTest>,
    /// Candidates' worktrees and layers go under it.
    pub scratch: &'a Path,
    /// Wall-clock limit of one candidate's test run, in seconds.
    pub timeout_s: u64,
    /// Test runs at once (`[pipeline] parallel_runs`).
    pub parallel_runs: usize,
}

/// How one distinct candidate file fared on the base commit.
struct Tried {
    status: SampleStatus,
    reason: String,
    output: String,
}

/// Generates the candidates, tries them, and keeps the one to use. The
/// workspace is left as it was: every candidate runs in its own worktree.
/// Without located code to show (none, or none readable) no call is made
/// and no test is returned.
pub fn run(
    conversation: &mut dyn Conversation,
    issue: &Issue,
    inputs: &Inputs<'_>,
    settings: &ReproducerSettings,
    sampling: &Sampling,
    trajectory: &mut Trajectory,
) -> Result<Reproduction, ReproduceError> {
    let mut out = Reproduction {
        test: None,
        others: Vec::new(),
        samples: Vec::new(),
        chosen: None,
    };
    let root = inputs.ws.path();
    let all = crate::index::python_files(root).unwrap_or_default();
    let module_tests = template::template_files(root, &all, inputs.locations);
    let path = test_path(
        inputs.template.map(|t| t.path.as_str()),
        &module_tests,
        &all,
    );
    let Some(msgs) = prompt_for(conversation, issue, inputs, &path, settings, trajectory)? else {
        return Ok(out);
    };
    let g = grammar();
    let call = Call::spread(
        "reproducer",
        msgs,
        sampling,
        settings.max_tokens,
        settings.candidates,
        settings.temperature,
        &g,
    );
    let temperatures = call.temperatures.clone().unwrap_or_default();
    let generation = call::constrained(conversation, trajectory, call)?;

    // One run per distinct file.
    let (mut distinct, first_of) = distinct_files(&generation.candidates);
    let trier = Trier {
        inputs,
        judging: Judging {
            issue: &issue.problem_statement,
            accept: settings.accept,
        },
        command: template::test_command(inputs.env, &path),
        path,
    };
    let mut tried = trier.try_all(&distinct);
    let completed = trier.complete_imports(&all, &mut distinct, &mut tried);
    let runs = Runs {
        distinct: &distinct,
        first_of: &first_of,
        tried: &tried,
        completed: &completed,
    };
    out.samples = runs.samples(&generation.candidates, &temperatures, issue);
    out.chosen = choose(&out.samples);
    if let Some(i) = out.chosen {
        out.test = trier.accepted(&runs, i, &mut out.samples);
        out.others = trier.others(&runs, i);
    }
    log_summary(&out, distinct.len());
    Ok(out)
}

/// The reproducer's prompt fitted to the context, or `None` (said in the
/// log) when nothing located can be shown or even the smallest prompt does
/// not fit.
fn prompt_for(
    conversation: &dyn Conversation,
    issue: &Issue,
    inputs: &Inputs<'_>,
    path: &str,
    settings: &ReproducerSettings,
    trajectory: &mut Trajectory,
) -> Result<Option<Vec<Message>>, ReproduceError> {
    let fitted = fit_prompt(
        conversation,
        inputs.ws.path(),
        &issue.problem_statement,
        inputs.locations,
        inputs.template,
        path,
        settings.max_tokens as usize,
    );
    let Prompt { messages, trim } = match fitted {
        Ok(p) => p,
        // Nothing located can be shown: no test, and the task goes on.
        Err(ReproduceError::NoLocations) => {
            tracing::info!("  reproducer: no located code to show: no test");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if let Some(t) = trim {
        let fits = t.fits;
        if !fits {
            tracing::warn!(
                "{}: the reproducer's smallest prompt ({} tokens) does not fit the context of \
                 {} with {} kept for the reply: no test",
                issue.instance_id,
                t.prompt_tokens,
                t.context,
                t.reserved
            );
        }
        trajectory.record(Step::Trimmed(Box::new(t)));
        if !fits {
            return Ok(None);
        }
    }
    Ok(Some(messages))
}

/// The distinct test files among the replies, and for each reply the
/// index of its file among them (`None`: no test in the reply).
fn distinct_files(candidates: &[crate::engine::Candidate]) -> (Vec<String>, Vec<Option<usize>>) {
    let mut distinct: Vec<String> = Vec::new();
    let mut first_of: Vec<Option<usize>> = Vec::new();
    for c in candidates {
        first_of.push(
            code_of(&c.text).map(|c| match distinct.iter().position(|d| *d == c) {
                Some(k) => k,
                None => {
                    distinct.push(c);
                    distinct.len() - 1
                }
            }),
        );
    }
    (distinct, first_of)
}

/// How candidate files are tried: as the test file `path`, run by
/// `command`, each in its own worktree.
struct Trier<'a> {
    inputs: &'a Inputs<'a>,
    judging: Judging<'a>,
    path: String,
    command: String,
}

/// The candidate files and how they fared.
struct Runs<'a> {
    distinct: &'a [String],
    /// Per reply, its file's index in `distinct`.
    first_of: &'a [Option<usize>],
    tried: &'a [Tried],
    /// Per file, the imports added to it.
    completed: &'a [Vec<String>],
}

impl Trier<'_> {
    fn try_all(&self, files: &[String]) -> Vec<Tried> {
        try_all(self.inputs, &self.judging, &self.path, &self.command, files)
    }

    /// A test broken by a name it forgot to import runs again with the
    /// import (see [`missing`]); returns, per file, the imports added.
    fn complete_imports(
        &self,
        all: &[String],
        distinct: &mut [String],
        tried: &mut [Tried],
    ) -> Vec<Vec<String>> {
        let root = self.inputs.ws.path();
        let mut completed: Vec<Vec<String>> = vec![Vec::new(); distinct.len()];
        for _ in 0..missing::COMPLETION_ROUNDS {
            let mended: Vec<(usize, String, String)> = tried
                .iter()
                .enumerate()
                .filter(|(_, t)| t.status == SampleStatus::Broken)
                .filter_map(|(k, t)| {
                    let name = missing::undefined_name(&t.output)?;
                    let line = missing::import_for(root, all, name, &self.path)?;
                    let text = missing::with_import(&distinct[k], &line);
                    (!distinct[k].lines().any(|l| l == line)).then_some((k, line, text))
                })
                .collect();
            if mended.is_empty() {
                break;
            }
            let texts: Vec<String> = mended.iter().map(|(_, _, text)| text.clone()).collect();
            let again = self.try_all(&texts);
            for ((k, line, text), t) in mended.into_iter().zip(again) {
                tracing::info!("  reproducer: candidate file {k} run again with `{line}` added");
                distinct[k] = text;
                tried[k] = t;
                completed[k].push(line);
            }
        }
        completed
    }

    /// The test of accepted sample `i`: its file, cut after the statement
    /// that failed when the cut file still fails on the base commit the
    /// way it is accepted (`samples[i].cut_after` then says where).
    fn accepted(&self, runs: &Runs<'_>, i: usize, samples: &mut [Sample]) -> Option<SubmittedTest> {
        let k = runs.first_of.get(i).copied().flatten()?;
        let t = runs.tried.get(k)?;
        let mut text = runs.distinct[k].clone();
        let mut output = t.output.clone();
        let cut = evidence::failing_line(&output, &self.path)
            .and_then(|line| evidence::cut_after(&text, line).map(|c| (line, c)));
        if let Some((line, cut)) = cut {
            let again = self.try_all(std::slice::from_ref(&cut));
            match again.first() {
                Some(a) if a.status == SampleStatus::Failed => {
                    tracing::info!(
                        "  reproducer: the accepted test cut after line {line}, where it \
                         failed on the base commit"
                    );
                    text = cut;
                    output = a.output.clone();
                    if let Some(s) = samples.get_mut(i) {
                        s.cut_after = Some(line);
                    }
                }
                _ => tracing::info!(
                    "  reproducer: the accepted test cut after line {line} no longer fails \
                     as it did: kept whole"
                ),
            }
        }
        Some(SubmittedTest {
            path: self.path.clone(),
            command: self.command.clone(),
            text,
            output,
            files: Vec::new(),
        })
    }
}

impl Trier<'_> {
    /// The accepted files other than sample `chosen`'s, whole, at most
    /// [`MAX_OTHER_TESTS`].
    fn others(&self, runs: &Runs<'_>, chosen: usize) -> Vec<SubmittedTest> {
        let mine = runs.first_of.get(chosen).copied().flatten();
        runs.tried
            .iter()
            .enumerate()
            .filter(|(k, t)| Some(*k) != mine && t.status == SampleStatus::Failed)
            .take(MAX_OTHER_TESTS)
            .map(|(k, t)| SubmittedTest {
                path: self.path.clone(),
                command: self.command.clone(),
                text: runs.distinct[k].clone(),
                output: t.output.clone(),
                files: Vec::new(),
            })
            .collect()
    }
}

impl Runs<'_> {
    /// Each reply as a sample: its file's run, or why it had none.
    fn samples(
        &self,
        candidates: &[crate::engine::Candidate],
        temperatures: &[f32],
        issue: &Issue,
    ) -> Vec<Sample> {
        let mut seen: Vec<Option<usize>> = vec![None; self.distinct.len()];
        let mut samples = Vec::new();
        for (index, c) in candidates.iter().enumerate() {
            let temperature = temperatures.get(index).copied().unwrap_or(0.0);
            let mut sample = Sample {
                index,
                temperature,
                reply: c.text.clone(),
                status: SampleStatus::NoTest,
                reason: String::new(),
                signature: None,
                issue_literals: 0,
                cut_after: None,
                same_as: None,
                imports: Vec::new(),
                output: String::new(),
            };
            if let Some(k) = self.first_of.get(index).copied().flatten() {
                sample.same_as = seen[k];
                seen[k].get_or_insert(index);
                sample.imports = self.completed[k].clone();
                if let Some(t) = self.tried.get(k) {
                    sample.status = t.status;
                    sample.reason = t.reason.clone();
                    sample.output = tail(&t.output, SAMPLE_OUTPUT_CHARS);
                    if t.status == SampleStatus::Failed {
                        sample.signature = check::failure_signature(&t.output);
                        sample.issue_literals =
                            evidence::issue_literals(&self.distinct[k], &issue.problem_statement);
                    }
                }
            } else {
                sample.reason = "the reply holds no test function".into();
            }
            samples.push(sample);
        }
        samples
    }
}

/// The reproducer's line in the log: how the samples fared.
fn log_summary(out: &Reproduction, distinct: usize) {
    let count = |s: SampleStatus| out.samples.iter().filter(|x| x.status == s).count();
    tracing::info!(
        "  reproducer: {} candidates ({} distinct): {} reproduce the issue on the base \
         commit, {} fail otherwise, {} pass, {} broken, {} without a test, {} not tried; {}",
        out.samples.len(),
        distinct,
        count(SampleStatus::Failed),
        count(SampleStatus::Other),
        count(SampleStatus::Passed),
        count(SampleStatus::Broken),
        count(SampleStatus::NoTest),
        count(SampleStatus::Error),
        match out.chosen {
            Some(i) => format!("candidate {i} accepted"),
            None => "none accepted".into(),
        }
    );
}

/// The last `chars` characters of `text`.
fn tail(text: &str, chars: usize) -> String {
    let total = text.chars().count();
    text.chars().skip(total.saturating_sub(chars)).collect()
}

/// What a failing candidate is judged by.
struct Judging<'a> {
    issue: &'a str,
    accept: Accept,
}

/// Runs each of `files` as the test file `path` in its own worktree and
/// sandbox ([`parallel::map`]); one result per file, in order.
fn try_all(
    inputs: &Inputs<'_>,
    judging: &Judging<'_>,
    path: &str,
    command: &str,
    files: &[String],
) -> Vec<Tried> {
    parallel::map(inputs.parallel_runs, files, |k, text| {
        try_one(inputs, judging, k, path, command, text)
    })
    .into_iter()
    .map(|t| {
        t.unwrap_or_else(|| Tried {
            status: SampleStatus::Error,
            reason: "its run panicked".into(),
            output: String::new(),
        })
    })
    .collect()
}

/// One candidate file run on the base commit in a worktree of its own,
/// prepared like the task's.
fn try_one(
    inputs: &Inputs<'_>,
    judging: &Judging<'_>,
    k: usize,
    path: &str,
    command: &str,
    text: &str,
) -> Tried {
    let dir = inputs.scratch.join(format!("reproduce-{k}"));
    let layer = inputs.scratch.join(format!("reproduce-{k}-layer"));
    let error = |reason: String| Tried {
        status: SampleStatus::Error,
        reason,
        output: String::new(),
    };
    let cand = match inputs.ws.clone_to(&dir) {
        Ok(c) => c,
        Err(e) => return error(e.to_string()),
    };
    let ran =
        (|| -> Result<(patchwright_sandbox::Outcome, Verdict), Box<dyn std::error::Error>> {
            let env = judge::prepare_like(inputs.env, cand.path(), &layer)?;
            let test = SubmittedTest {
                path: path.to_string(),
                command: command.to_string(),
                text: text.to_string(),
                output: String::new(),
                files: Vec::new(),
            };
            test.place(cand.path())?;
            Ok(check::run_test(
                cand.path(),
                &env,
                command,
                inputs.timeout_s,
            )?)
        })();
    // Scratch: a failure to delete it is harmless.
    let _ = cand.remove();
    let _ = std::fs::remove_dir_all(&layer);
    match ran {
        Err(e) => error(e.to_string()),
        Ok((outcome, verdict)) => {
            let (status, reason) = match verdict {
                // The judge tells the test's own bug (broken) from a wrong
                // use of the code (other issues).
                Verdict::Failed => {
                    match evidence::judge(&outcome.output, path, judging.issue, judging.accept) {
                        Ok(()) => (SampleStatus::Failed, String::new()),
                        Err(why @ evidence::OtherIssues::TestBug { .. }) => {
                            (SampleStatus::Broken, why.to_string())
                        }
                        Err(why) => (SampleStatus::Other, why.to_string()),
                    }
                }
                Verdict::Passed => (SampleStatus::Passed, String::new()),
                Verdict::Broken(why) => (SampleStatus::Broken, why),
            };
            Tried {
                status,
                reason,
                output: outcome.output,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_bugs_are_told_from_reproductions() {
        let p = "tests/test_reproduce_issue.py";
        let cases: [(&str, &str, Option<&str>); 6] = [
            (
                "name never imported",
                "tests/test_reproduce_issue.py:7: NameError",
                Some("NameError"),
            ),
            (
                "a missing file",
                "test_reproduce_issue.py:12: FileNotFoundError",
                Some("FileNotFoundError"),
            ),
            (
                "raised in the library",
                "cachekit/lru.py:40: NameError",
                None,
            ),
            (
                "an assertion in the test",
                "tests/test_reproduce_issue.py:9: AssertionError",
                None,
            ),
            (
                "another test file",
                "tests/test_other.py:3: NameError",
                None,
            ),
            (
                "no location",
                "E   NameError: name 'x' is not defined",
                None,
            ),
        ];
        for (what, output, want) in cases {
            let output = format!("____ test_x ____\n{output}\n=== short test summary info ===");
            assert_eq!(test_bug(&output, p), want, "{what}");
        }
    }

    fn sample(index: usize, status: SampleStatus, signature: Option<&str>) -> Sample {
        Sample {
            index,
            temperature: 0.0,
            reply: String::new(),
            status,
            reason: String::new(),
            signature: signature.map(str::to_string),
            issue_literals: 0,
            cut_after: None,
            same_as: None,
            imports: Vec::new(),
            output: String::new(),
        }
    }

    #[test]
    fn the_failure_most_accepted_candidates_share_wins() {
        use SampleStatus::*;
        let a = Some("assert N == N");
        let b = Some("KeyError: 'x'");
        type Case<'a> = (
            &'a str,
            &'a [(SampleStatus, Option<&'a str>)],
            Option<usize>,
        );
        let cases: &[Case] = &[
            ("none accepted", &[(Passed, None), (Broken, None)], None),
            ("nothing at all", &[], None),
            ("one accepted", &[(Broken, None), (Failed, a)], Some(1)),
            (
                "the majority's signature, its lowest index",
                &[(Failed, a), (Failed, b), (Passed, None), (Failed, b)],
                Some(1),
            ),
            (
                "a tie goes to the lowest index",
                &[(Failed, b), (Failed, a)],
                Some(0),
            ),
            (
                "a tie between groups: the group with the lowest index",
                &[
                    (Passed, None),
                    (Failed, a),
                    (Failed, b),
                    (Failed, b),
                    (Failed, a),
                ],
                Some(1),
            ),
            (
                "no signature shares with nothing",
                &[(Failed, None), (Failed, None), (Failed, a)],
                Some(0),
            ),
            (
                "broken ones do not vote",
                &[(Failed, a), (Broken, b), (Broken, b), (Failed, b)],
                Some(0),
            ),
        ];
        for (name, statuses, want) in cases {
            let samples: Vec<Sample> = statuses
                .iter()
                .enumerate()
                .map(|(i, (s, sig))| sample(i, *s, *sig))
                .collect();
            assert_eq!(choose(&samples), *want, "{name}");
        }
    }

    #[test]
    fn a_reply_becomes_its_code() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            (
                "closed",
                "```python\nimport m\n\ndef test_a():\n    assert m.f() == 1\n```",
                Some("import m\n\ndef test_a():\n    assert m.f() == 1\n"),
            ),
            (
                "cut off mid-line",
                "```python\nimport m\n\ndef test_a():\n    assert m.f() ==",
                Some("import m\n\ndef test_a():\n"),
            ),
            (
                "a method",
                "```python\nimport m\n\nclass T:\n    def test_a(self):\n        pass\n```",
                Some("import m\n\nclass T:\n    def test_a(self):\n        pass\n"),
            ),
            ("no test", "```python\nimport m\n\nx = 1\n```", None),
            (
                "unfenced",
                "import m\ndef test_a():\n    pass",
                Some("import m\ndef test_a():\n    pass\n"),
            ),
        ];
        for (name, reply, want) in cases {
            assert_eq!(code_of(reply).as_deref(), *want, "{name}");
        }
    }

    #[test]
    fn the_new_file_goes_beside_the_tests() {
        let all: Vec<String> = ["tests/test_lru.py", "tests/unit/test_reproduce_issue.py"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // (case, template, the module's tests, the repository's files, the path)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            &'a [&'a str],
            &'a [String],
            &'a str,
        );
        let cases: &[Case] = &[
            (
                "the template's directory",
                Some("tests/unit/test_x.py"),
                &["tests/test_lru.py"],
                &all,
                "tests/unit/test_reproduce_issue_2.py",
            ),
            (
                "the module's tests",
                None,
                &["pkg/tests/test_lru.py"],
                &all,
                "pkg/tests/test_reproduce_issue.py",
            ),
            ("tests/", None, &[], &all, "tests/test_reproduce_issue.py"),
            ("the root", None, &[], &[], "test_reproduce_issue.py"),
            (
                "a template at the root",
                Some("test_all.py"),
                &[],
                &all,
                "tests/test_reproduce_issue.py",
            ),
        ];
        for (name, template, module_tests, files, want) in cases {
            let module_tests: Vec<String> = module_tests.iter().map(|s| s.to_string()).collect();
            assert_eq!(test_path(*template, &module_tests, files), *want, "{name}");
        }
    }

    #[test]
    fn the_excerpt_keeps_imports_and_the_first_tests() {
        let text = "\"\"\"Tests.\"\"\"\nimport pytest\n\nfrom pkg import f\n\n\ndef helper():\n    return 1\n\n\ndef test_one():\n    assert f(1) == 1\n\n\nclass TestMore:\n    def test_two(self):\n        assert f(2) == 2\n\n    def test_three(self):\n        assert f(3) == 3\n";
        let cases: &[(usize, &str)] = &[
            (0, "\"\"\"Tests.\"\"\"\nimport pytest\n\nfrom pkg import f"),
            (
                1,
                "\"\"\"Tests.\"\"\"\nimport pytest\n\nfrom pkg import f\n\ndef test_one():\n    assert f(1) == 1",
            ),
            (
                2,
                "\"\"\"Tests.\"\"\"\nimport pytest\n\nfrom pkg import f\n\ndef test_one():\n    assert f(1) == 1\n\nclass TestMore:\n    def test_two(self):\n        assert f(2) == 2",
            ),
        ];
        for (tests, want) in cases {
            assert_eq!(excerpt("tests/test_f.py", text, *tests), *want, "{tests}");
        }
    }

    #[test]
    fn the_grammar_is_bounded_and_names_its_rules() {
        let g = grammar();
        for rule in [
            "root ::=",
            "imports ::=",
            "import ::=",
            "body ::=",
            "test ::=",
            "line ::=",
        ] {
            assert!(g.contains(rule), "{rule}: {g}");
        }
        assert!(!g.contains('*') && !g.contains('+'), "unbounded: {g}");
    }

    #[test]
    fn the_prompt_shows_the_issue_the_code_and_the_template(
    ) -> Result<(), Box<dyn std::error::Error>> {
        use crate::agents::budget::fake::Fake;
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("pkg"))?;
        std::fs::write(
            dir.path().join("pkg/m.py"),
            "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x\n",
        )?;
        let locations = [
            Location {
                path: "pkg/m.py".into(),
                symbol: "f".into(),
                start_line: 1,
                end_line: 2,
            },
            Location {
                path: "pkg/n.py".into(),
                symbol: "h".into(),
                start_line: 1,
                end_line: 2,
            },
        ];
        let body: String = (0..40)
            .map(|i| format!("    assert f({i}) == {i}\n"))
            .collect();
        let template = SubmittedTest {
            path: "tests/test_m.py".into(),
            command: "pytest tests/test_m.py".into(),
            text: format!(
                "from pkg.m import f\n\n\ndef test_one():\n{body}\n\ndef test_two():\n{body}"
            ),
            output: String::new(),
            files: Vec::new(),
        };
        let issue = "f(1) returns 2; it should return 1.";
        // Large enough for everything: nothing cut.
        let fake = Fake::new(100_000, "");
        let p = fit_prompt(
            &fake,
            dir.path(),
            issue,
            &locations,
            Some(&template),
            "tests/test_reproduce_issue.py",
            384,
        )?;
        assert_eq!(p.trim, None);
        let user = &p.messages[1].content;
        for part in [
            "ISSUE:\nf(1) returns 2; it should return 1.",
            "pkg/m.py::f (lines 1-6)",
            "AN EXISTING TEST FILE OF THIS CODE (tests/test_m.py)",
            "from pkg.m import f",
            "def test_one():",
            "def test_two():",
            "    # ...",
            "Write a NEW test file, tests/test_reproduce_issue.py,",
        ] {
            assert!(user.contains(part), "{part}: {user}");
        }
        // Room for one example test only.
        let one = fit_prompt(
            &Fake::new(budget::fake::tokens(&p.messages) + 384 - 50, ""),
            dir.path(),
            issue,
            &locations,
            Some(&template),
            "tests/test_reproduce_issue.py",
            384,
        )?;
        let trim = one.trim.ok_or("no trim")?;
        assert!(trim.fits);
        let user = &one.messages[1].content;
        assert!(user.contains("def test_one():") && !user.contains("def test_two():"));
        assert!(user.contains(issue));
        assert!(
            matches!(trim.cuts.as_slice(), [Cut::Span { .. }]),
            "{trim:?}"
        );
        // Nothing readable located: no prompt.
        assert!(matches!(
            fit_prompt(&fake, dir.path(), issue, &locations[1..], None, "t.py", 384),
            Err(ReproduceError::NoLocations)
        ));
        Ok(())
    }
}
