//! MASAI's Fixer: from the issue and the code at the localised spans, N
//! candidate edits in one batched generation sharing the prompt (one
//! greedy, N−1 sampled), each a short chain of thought then SEARCH/REPLACE
//! blocks over the located files, enforced by grammar. Candidates that do
//! not apply, break the syntax, or change nothing are dropped; duplicates
//! (the same normalised diff) are merged and counted.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::aci::Location;
use crate::dataset::Issue;
use crate::edit;
use crate::engine::{grammar, Conversation, EngineError, Message, Request, Sampling};
use crate::index::symbols;
use crate::record::trajectory::{ModelCall, Step};
use crate::repo::RepoError;
use crate::trajectory::Trajectory;

/// Lines shown around each located span, so SEARCH can include a line of
/// context and the model sees the surroundings.
pub const CONTEXT_LINES: usize = 5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixerSettings {
    /// Candidates per task (N).
    pub candidates: usize,
    /// Temperature of candidates 2..N (candidate 1 is greedy).
    pub temperature: f32,
    /// Most tokens of one candidate.
    pub max_tokens: u32,
}

impl Default for FixerSettings {
    fn default() -> Self {
        FixerSettings {
            candidates: 4,
            temperature: 0.8,
            max_tokens: 512,
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
    pub temperature: f32,
    pub reply: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// A distinct patch and the candidates that produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distinct {
    pub patch: String,
    /// Candidate indexes (the first is the representative).
    pub members: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fixes {
    pub candidates: Vec<Candidate>,
    pub distinct: Vec<Distinct>,
}

impl Fixes {
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

const SYSTEM: &str = "You are an expert Python developer who fixes bugs. You first explain the \
cause in one line, then write the fix as SEARCH/REPLACE blocks.";

const INSTRUCTIONS: &str = "Fix the issue. Start with `Reasoning:` and one line on the cause. \
Then write each change as a SEARCH/REPLACE block: the file's path on its own line, \
`<<<<<<< SEARCH`, the lines to change copied exactly from the code above (no line numbers), \
`=======`, the new lines, and `>>>>>>> REPLACE`. Keep SEARCH short: the lines that change \
and one line around them.";

/// The code of the located spans, with context, grouped per file.
pub fn code_sections(root: &Path, locations: &[Location]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for loc in locations {
        let Ok(text) = crate::aci::read_text(root, &loc.path) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        let start = loc.start_line.saturating_sub(CONTEXT_LINES).max(1);
        let end = (loc.end_line + CONTEXT_LINES).min(lines.len());
        if start > end {
            continue;
        }
        let snippet = lines[start - 1..end].join("\n");
        let section = format!(
            "{}::{} (lines {start}-{end})\n```python\n{snippet}\n```",
            loc.path, loc.symbol
        );
        match out.iter_mut().find(|(p, _)| *p == loc.path) {
            Some((_, s)) => {
                s.push_str("\n\n");
                s.push_str(&section);
            }
            None => out.push((loc.path.clone(), section)),
        }
    }
    out
}

/// The prompt of the Fixer.
pub fn messages(issue: &Issue, sections: &[(String, String)]) -> Vec<Message> {
    let code: Vec<&str> = sections.iter().map(|(_, s)| s.as_str()).collect();
    vec![
        Message::system(SYSTEM),
        Message::user(format!(
            "ISSUE:\n{}\n\nTHE CODE TO FIX:\n\n{}\n\n{INSTRUCTIONS}",
            issue.problem_statement.trim(),
            code.join("\n\n")
        )),
    ]
}

/// Normalised for deduplication: no `index` lines, no trailing spaces.
fn normalise(patch: &str) -> String {
    patch
        .lines()
        .filter(|l| !l.starts_with("index "))
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Generates and sorts out the candidates. The workspace at `root` is
/// left as it was (each candidate is applied, diffed and undone).
#[allow(clippy::too_many_arguments)]
pub fn run(
    conversation: &mut dyn Conversation,
    root: &Path,
    base: &str,
    issue: &Issue,
    locations: &[Location],
    settings: &FixerSettings,
    sampling: &Sampling,
    trajectory: &mut Trajectory,
) -> Result<Fixes, FixError> {
    if locations.is_empty() {
        return Err(FixError::NoLocations);
    }
    let sections = code_sections(root, locations);
    let paths: Vec<String> = sections.iter().map(|(p, _)| p.clone()).collect();
    if paths.is_empty() {
        return Err(FixError::NoLocations);
    }
    let msgs = messages(issue, &sections);
    let g = grammar::search_replace_with_reasoning(&paths)?;
    let n = settings.candidates.max(1);
    let temperatures: Vec<f32> = (0..n)
        .map(|i| if i == 0 { 0.0 } else { settings.temperature })
        .collect();
    let sampling = Sampling {
        max_tokens: settings.max_tokens,
        ..sampling.clone()
    };
    let request = Request {
        n,
        temperatures: Some(temperatures.clone()),
        grammar: Some(&g),
        ..Request::new(&msgs, sampling.clone())
    };
    let generation = conversation.generate(&request)?;
    let prompt = conversation.render(&msgs);
    trajectory.record(Step::ModelCall(Box::new(ModelCall::from_generation(
        "fixer",
        msgs,
        prompt,
        sampling,
        &generation,
    ))));

    let mut fixes = Fixes {
        candidates: Vec::new(),
        distinct: Vec::new(),
    };
    for (index, c) in generation.candidates.iter().enumerate() {
        let (status, patch) = try_candidate(root, base, &c.text, &paths)?;
        let status = match (&status, &patch) {
            (Status::Kept, Some(p)) => {
                let key = normalise(p);
                match fixes
                    .distinct
                    .iter_mut()
                    .find(|d| normalise(&d.patch) == key)
                {
                    Some(d) => {
                        d.members.push(index);
                        Status::Duplicate(d.members[0])
                    }
                    None => {
                        fixes.distinct.push(Distinct {
                            patch: p.clone(),
                            members: vec![index],
                        });
                        Status::Kept
                    }
                }
            }
            _ => status,
        };
        fixes.candidates.push(Candidate {
            index,
            temperature: temperatures.get(index).copied().unwrap_or(0.0),
            reply: c.text.clone(),
            status,
            patch,
        });
    }
    Ok(fixes)
}

/// Applies one reply's blocks to the workspace, checks and diffs the
/// result, and undoes it.
fn try_candidate(
    root: &Path,
    base: &str,
    reply: &str,
    paths: &[String],
) -> Result<(Status, Option<String>), RepoError> {
    let parsed = edit::parse(reply);
    if parsed.blocks.is_empty() {
        return Ok((Status::NoBlocks, None));
    }
    let before: Vec<(String, usize)> = paths
        .iter()
        .map(|p| {
            let n = crate::aci::read_text(root, p)
                .map(|t| symbols::syntax_errors(&t).len())
                .unwrap_or(0);
            (p.clone(), n)
        })
        .collect();
    let mut failure = None;
    for block in &parsed.blocks {
        if let Err(e) = edit::apply_block_lenient(root, block, paths) {
            failure = Some(e.to_string());
            break;
        }
    }
    let result = match failure {
        Some(why) => (Status::DidNotApply(why), None),
        None => {
            let broken = before.iter().find_map(|(p, n)| {
                let errors = crate::aci::read_text(root, p)
                    .map(|t| symbols::syntax_errors(&t))
                    .unwrap_or_default();
                (errors.len() > *n).then(|| {
                    let e = &errors[0];
                    format!("{p}:{}:{}: {}", e.line, e.column, e.message)
                })
            });
            match broken {
                Some(why) => (Status::SyntaxError(why), None),
                None => {
                    let patch = crate::repo::diff_against(root, base)?;
                    if patch.trim().is_empty() {
                        (Status::NoChange, None)
                    } else {
                        (Status::Kept, Some(patch))
                    }
                }
            }
        }
    };
    crate::repo::reset_worktree(root)?;
    Ok(result)
}
