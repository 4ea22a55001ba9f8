//! The first pipeline: retrieve, show, edit. It ranks the repository's
//! Python files against the issue with BM25, shows the model the best ones,
//! asks for SEARCH/REPLACE blocks, and applies them. One model call per task;
//! it runs no code. (`kind = "first"`; the MASAI pipeline is the default.)

use std::path::Path;

use crate::agents::budget::{self, Budget};
use crate::config::Settings;
use crate::dataset::Issue;
use crate::edit;
use crate::engine::{Backend, Conversation, EngineError, Message, Request};
use crate::index::{self, IndexError, RankedFile};
use crate::record::trajectory::{EditOutcome, ModelCall, RankedEntry, Step, Trim};
use crate::repo::{RepoError, Workspace};
use crate::trajectory::Trajectory;

/// Ranked files recorded in the trajectory, beyond those shown.
const RANKED_RECORDED: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error("the first pipeline needs the embedded model, not a server: it counts the prompt's tokens to fit the files it shows (use --model with a GGUF file, or the MASAI pipeline)")]
    NeedsModel,
}

const SYSTEM: &str =
    "You are an expert Python developer who fixes bugs in open-source repositories. \
You answer with a short explanation of the cause, then the edits, as SEARCH/REPLACE blocks.";

const INSTRUCTIONS: &str = "Fix the issue. First say in one or two sentences what causes it. \
Then write each change as a SEARCH/REPLACE block: the file's path on its own line, \
then `<<<<<<< SEARCH`, the lines to change copied exactly from the file, `=======`, \
the new lines, and `>>>>>>> REPLACE`. Keep SEARCH short: only the lines that change \
and one line around them. Here is an example from another project (do not copy it):

stats/basic.py
<<<<<<< SEARCH
def mean(values):
    return sum(values) / (len(values) + 1)
=======
def mean(values):
    return sum(values) / len(values)
>>>>>>> REPLACE

Copy the SEARCH lines exactly, indentation included. Only edit the files shown above.";

/// Runs the pipeline on `issue` in `workspace` and returns the patch (empty
/// when no edit applied). The backend must count tokens (the embedded
/// model): a server is refused with [`PipelineError::NeedsModel`].
pub fn run(
    backend: &dyn Backend,
    settings: &Settings,
    issue: &Issue,
    workspace: &Workspace,
    trajectory: &mut Trajectory,
) -> Result<String, PipelineError> {
    let ranked = index::rank_files(workspace.path(), &issue.problem_statement)?;
    let mut conversation = backend.conversation(1, settings.sampling.max_tokens as usize)?;
    let (messages, shown, truncated, trim) =
        build_prompt(conversation.as_ref(), settings, issue, &ranked)?;
    let shown_paths = shown.clone();
    let fits = trim.as_ref().is_none_or(|t| t.fits);
    trajectory.record(Step::Retrieve {
        ranked: ranked
            .iter()
            .take(RANKED_RECORDED)
            .map(|f| RankedEntry {
                path: f.path.clone(),
                score: f.score,
            })
            .collect(),
        shown,
        truncated,
    });
    if let Some(t) = trim {
        trajectory.record(Step::Trimmed(Box::new(t)));
    }
    if !fits {
        tracing::warn!(
            "{}: even the shortest cut of the issue does not fit the context: no call, no patch",
            issue.instance_id
        );
        return Ok(String::new());
    }

    let generation = conversation.generate(&Request::new(&messages, settings.sampling.clone()))?;
    let reply = generation
        .candidates
        .first()
        .map(|c| c.text.clone())
        .unwrap_or_default();
    let prompt = conversation.render(&messages);
    trajectory.record(Step::ModelCall(Box::new(ModelCall::from_generation(
        "edit",
        messages,
        prompt,
        settings.sampling.clone(),
        &generation,
    ))));

    trajectory.record(apply_reply(workspace.path(), &reply, &shown_paths));

    let patch = workspace.diff()?;
    trajectory.record(Step::Diff {
        files: patch.matches("\ndiff --git ").count()
            + usize::from(patch.starts_with("diff --git ")),
        bytes: patch.len(),
    });
    Ok(patch)
}

/// Applies a reply's edits to the repository at `root`: its SEARCH/REPLACE
/// blocks, or, when none of them applies, the whole definitions it wrote in
/// code fences. `shown` are the files the model saw. Returns the record of
/// what became of each edit.
pub fn apply_reply(root: &Path, reply: &str, shown: &[String]) -> Step {
    let parsed = edit::parse(reply);
    let blocks: Vec<EditOutcome> = parsed
        .blocks
        .iter()
        .map(|block| {
            let result = edit::apply_block_lenient(root, block, shown);
            EditOutcome {
                path: block.path.clone(),
                applied_to: result.as_ref().ok().map(|(_, p)| p.clone()),
                matched: result.as_ref().ok().map(|(m, _)| *m),
                error: result.err().map(|e| e.to_string()),
            }
        })
        .collect();
    let any_applied = blocks.iter().any(|b| b.applied_to.is_some());
    let definitions = if any_applied {
        Vec::new()
    } else {
        edit::parse_definitions(reply)
            .iter()
            .map(|def| {
                let result = edit::apply_definition(root, def, shown);
                EditOutcome {
                    path: def.name.clone(),
                    applied_to: result.as_ref().ok().cloned(),
                    matched: result.as_ref().ok().map(|_| edit::Matched::Definition),
                    error: result.err().map(|e| e.to_string()),
                }
            })
            .collect()
    };
    Step::Edit {
        blocks,
        definitions,
        unterminated: parsed.unterminated,
    }
}

fn file_section(path: &str, text: &str, note: &str) -> String {
    let fence = if text.contains("```") { "````" } else { "```" };
    format!(
        "{path}{note}\n{fence}python\n{text}{}{fence}\n\n",
        if text.ends_with('\n') { "" } else { "\n" }
    )
}

fn messages(repo: &str, issue: &str, files: &str) -> Vec<Message> {
    vec![
        Message::system(SYSTEM),
        Message::user(format!(
            "Issue in the repository {repo}:\n\n<issue>\n{issue}\n</issue>\n\nThe files most related to the issue:\n\n{files}{INSTRUCTIONS}",
        )),
    ]
}

/// Tokens kept for the files when the issue must be cut (or half the
/// prompt's room, when that is less): the issue is cut to leave this much,
/// so the best file's first lines still show.
pub const FILE_ROOM_TOKENS: usize = 1024;

/// The issue as shown: whole if the prompt with no file fits; else cut
/// to leave [`FILE_ROOM_TOKENS`] (at most half the prompt's room) for
/// files, or failing that to fit at all; else its shortest cut, with a
/// trim whose `fits` is false.
fn fit_issue(
    conversation: &dyn Conversation,
    budget: &Budget,
    repo: &str,
    issue: &str,
) -> Result<(String, Option<Trim>), EngineError> {
    let build = |text: &str| messages(repo, text, "");
    let (full_tokens, fits) = budget.measure(conversation, &build(issue))?;
    if fits {
        return Ok((issue.to_string(), None));
    }
    let roomy = Budget {
        reserved: budget.reserved + FILE_ROOM_TOKENS.min(budget.limit() / 2),
        ..*budget
    };
    let cut = match budget::fit_issue(conversation, &roomy, issue, build)? {
        Some(c) => c,
        None => budget::fit_issue(conversation, budget, issue, build)?
            .unwrap_or_else(|| budget::cut_issue(issue, budget::MIN_ISSUE_CHARS)),
    };
    let tokens = conversation.count_tokens(&build(&cut.text))?;
    let trim = budget.trim("edit", full_tokens, tokens, cut.cut.into_iter().collect());
    Ok((cut.text, Some(trim)))
}

/// The prompt with as many of the best files as fit in the context (after
/// reserving the reply's tokens), and the record of the issue's cut if it
/// had to be cut ([`fit_issue`]). If even the best file does not fit, its
/// head is shown, cut at a line boundary.
#[allow(clippy::type_complexity)]
fn build_prompt(
    conversation: &dyn Conversation,
    settings: &Settings,
    issue: &Issue,
    ranked: &[RankedFile],
) -> Result<(Vec<Message>, Vec<String>, Vec<String>, Option<Trim>), PipelineError> {
    let reserved = settings.sampling.max_tokens as usize;
    let budget = Budget::of(conversation, reserved).ok_or(PipelineError::NeedsModel)?;
    let (issue_text, trim) = fit_issue(
        conversation,
        &budget,
        &issue.repo,
        issue.problem_statement.trim(),
    )?;
    let fits = |files: &str| -> Result<bool, EngineError> {
        Ok(budget
            .measure(conversation, &messages(&issue.repo, &issue_text, files))?
            .1)
    };
    if trim.as_ref().is_some_and(|t| !t.fits) {
        let messages = messages(&issue.repo, &issue_text, "");
        return Ok((messages, Vec::new(), Vec::new(), trim));
    }
    let mut files = String::new();
    let mut shown = Vec::new();
    let mut truncated = Vec::new();
    for file in ranked.iter().take(settings.retrieval.files) {
        let whole = file_section(&file.path, &file.text, "");
        if fits(&format!("{files}{whole}"))? {
            files.push_str(&whole);
            shown.push(file.path.clone());
            continue;
        }
        if shown.is_empty() {
            // Binary search for the longest head that fits.
            let lines: Vec<&str> = file.text.split_inclusive('\n').collect();
            let head = |n: usize| {
                file_section(
                    &file.path,
                    &lines[..n].concat(),
                    &format!(" (first {n} of {} lines)", lines.len()),
                )
            };
            let (mut lo, mut hi) = (0usize, lines.len());
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if fits(&head(mid))? {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            if lo > 0 {
                files.push_str(&head(lo));
                shown.push(file.path.clone());
                truncated.push(file.path.clone());
            }
        }
        break;
    }
    let messages = messages(&issue.repo, &issue_text, &files);
    let trim = match trim {
        Some(t) => Some(Trim {
            prompt_tokens: conversation.count_tokens(&messages)?,
            ..t
        }),
        None => None,
    };
    Ok((messages, shown, truncated, trim))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::budget::fake::{self, Fake};
    use crate::record::trajectory::Cut;

    #[test]
    fn a_long_issue_is_cut_to_leave_room_for_the_files() -> Result<(), Box<dyn std::error::Error>> {
        let mut settings = Settings::defaults("m");
        settings.sampling.max_tokens = 512;
        let issue = Issue {
            instance_id: "demo__first-1".into(),
            repo: "demo/first".into(),
            base_commit: "0".repeat(40),
            problem_statement: "an issue line of forty characters, long\n".repeat(750),
            created_at: None,
        };
        let file: String = (1..=400).map(|n| format!("x{n} = {n}\n")).collect();
        let ranked = [RankedFile {
            path: "m.py".into(),
            score: 1.0,
            text: file,
        }];
        // (context, tokens of the prompt, issue's kept characters and left
        // out lines, the file's head shown); at most context − 512 tokens
        // but in the last, where not even the shortest issue fits.
        let cases = [
            (4096, 3582, (9199, 520), true),
            (2048, 1534, (2039, 699), true),
            (1000, 553, (1199, 720), false),
        ];
        for (context, tokens, (kept_chars, dropped_lines), shown) in cases {
            let conversation = Fake::new(context, "");
            let (messages, shown_paths, truncated, trim) =
                build_prompt(&conversation, &settings, &issue, &ranked)?;
            assert_eq!(fake::tokens(&messages), tokens, "{context}");
            let t = trim.ok_or("the issue was not cut")?;
            assert_eq!(t.fits, context > 1000, "{context}");
            assert_eq!(t.prompt_tokens, tokens, "{context}");
            // 750 lines of 40 characters, trimmed of the last newline.
            let expected = Cut::Issue {
                kept_chars,
                dropped_chars: 29_999 - kept_chars,
                dropped_lines,
            };
            assert_eq!(t.cuts, [expected], "{context}");
            // The 400-line file shows only as a head, when it shows.
            let paths: &[&str] = if shown { &["m.py"] } else { &[] };
            assert_eq!(shown_paths, paths, "{context}");
            assert_eq!(truncated, paths, "{context}");
        }
        Ok(())
    }
}
