//! The start every stage's prompt shares: one system message, then the
//! user message's task preamble (`ISSUE:\n<issue>\n\n`), then — for the
//! stages that show the located code (the reproducer and the fixer) — the
//! code in one form. What a stage is asked to do comes after, so the
//! prompts of one task differ only at their ends and the engine's prefix
//! cache can copy the shared part from one conversation into the next
//! instead of evaluating it again.
//!
//! When the issue must be cut, [`shared_issue`] cuts it the same way for
//! every stage of a task (it depends on the issue and the context alone),
//! so the preamble's bytes stay shared; a stage cuts further only when its
//! own smallest part does not fit beside that.

use super::budget::{self, Budget, CutText};
use crate::engine::{Conversation, EngineError, Message};

/// The system message of every stage and every ReAct agent.
pub const SYSTEM: &str = "You are an expert Python developer working on an issue in a repository.";

/// The shared preamble (the system message and the issue) takes at most
/// this percentage of the context; the rest is left to the stage's own
/// part and its reply. The largest default stage is a ReAct agent: its
/// guide (~750 tokens), a 768-token reply and a third of the context for
/// its turns leave 48% of the default 8,192 tokens to the issue, so at 40%
/// the issue cut once, the same way for all, fits every default stage
/// (the fixer keeps 4,400 tokens for code and reply). An issue longer than
/// that would be cut by those stages anyway.
pub const PREAMBLE_CONTEXT_PERCENT: usize = 40;

/// The heading of the located code.
pub const CODE_HEADING: &str = "THE CODE THE ISSUE IS ABOUT";

/// The heading's note when each line shows its number.
pub const NUMBERED_NOTE: &str =
    " (the numbers left of `| ` are line numbers, not part of the files)";

/// The start of the first user message: the issue (whole or cut, trimmed)
/// and a blank line; the same bytes for every stage given the same text.
pub fn task_preamble(issue: &str) -> String {
    format!("ISSUE:\n{}\n\n", issue.trim())
}

/// The located code as the reproducer and the fixer show it, right after
/// the task preamble: the heading, then each file's `sections` (from
/// `fixer::code_sections`), then a blank line.
pub fn code(sections: &[(String, String)], numbered: bool) -> String {
    let code: Vec<&str> = sections.iter().map(|(_, s)| s.as_str()).collect();
    let note = if numbered { NUMBERED_NOTE } else { "" };
    format!("{CODE_HEADING}{note}:\n\n{}\n\n", code.join("\n\n"))
}

/// A stage's prompt: the shared system message, and the user message of
/// the task preamble over `issue` followed by `rest` (the stage's own
/// part: code, role, instructions).
pub fn messages(issue: &str, rest: &str) -> Vec<Message> {
    vec![
        Message::system(SYSTEM),
        Message::user(format!("{}{rest}", task_preamble(issue))),
    ]
}

/// The issue as every stage of the task shows it: whole when the shared
/// preamble takes at most [`PREAMBLE_CONTEXT_PERCENT`] of the context
/// (or the backend does not say its context), otherwise cut to the longest
/// head and tail that fit there (at the least [`budget::MIN_ISSUE_CHARS`]).
/// Depends only on `issue` and the backend, so every stage gets the same.
pub fn shared_issue(conversation: &dyn Conversation, issue: &str) -> Result<CutText, EngineError> {
    let issue = issue.trim();
    let whole = CutText {
        text: issue.to_string(),
        cut: None,
    };
    let Some(context) = conversation.context_size() else {
        return Ok(whole);
    };
    let share = context * PREAMBLE_CONTEXT_PERCENT / 100;
    let budget = Budget {
        context,
        reserved: context - share,
    };
    let build = |t: &str| messages(t, "");
    Ok(budget::fit_issue(conversation, &budget, issue, build)?
        .unwrap_or_else(|| budget::cut_issue(issue, budget::MIN_ISSUE_CHARS)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::budget::fake::{self, Fake};
    use crate::record::trajectory::Cut;

    #[test]
    fn the_issue_is_cut_to_its_share_of_the_context_the_same_way_each_time() {
        // 1,000 lines of 31 characters, trimmed of the last newline.
        let long = "a line of the issue, thirty ch\n".repeat(1000);
        let cases: [(usize, &str, Option<Cut>); 5] = [
            (4096, "f(1) returns 2.", None),
            // 31,000 characters, about 7,750 tokens, over 40% of 8,192.
            (
                8192,
                &long,
                Some(Cut::Issue {
                    kept_chars: 12_926,
                    dropped_chars: 18_073,
                    dropped_lines: 583,
                }),
            ),
            (32_768, &long, None),
            (
                1000,
                &long,
                Some(Cut::Issue {
                    kept_chars: 1425,
                    dropped_chars: 29_574,
                    dropped_lines: 954,
                }),
            ),
            // 200 tokens cannot hold the shortest cut: it is taken.
            (
                500,
                &long,
                Some(Cut::Issue {
                    kept_chars: 1146,
                    dropped_chars: 29_853,
                    dropped_lines: 963,
                }),
            ),
        ];
        for (context, issue, cut) in cases {
            let conversation = Fake::new(context, "");
            let first = shared_issue(&conversation, issue).map_err(|e| e.to_string());
            let again = shared_issue(&conversation, issue).map_err(|e| e.to_string());
            assert_eq!(first, again, "{context}");
            let shared = first.unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_eq!(shared.cut, cut, "{context}");
            let tokens = fake::tokens(&messages(&shared.text, ""));
            if cut.is_none() {
                assert_eq!(shared.text, issue.trim(), "{context}");
            } else if context > 500 {
                assert!(
                    tokens <= context * PREAMBLE_CONTEXT_PERCENT / 100,
                    "{context}: {tokens}"
                );
            }
        }
    }

    #[test]
    fn the_preamble_and_the_code_are_fixed_texts() {
        assert_eq!(task_preamble("  f(1) is 2.\n"), "ISSUE:\nf(1) is 2.\n\n");
        let sections = vec![
            ("a.py".to_string(), "a.py::f (lines 1-2)\nA".to_string()),
            ("b.py".to_string(), "b.py::g (lines 3-4)\nB".to_string()),
        ];
        let cases = [
            (
                false,
                "THE CODE THE ISSUE IS ABOUT:\n\na.py::f (lines 1-2)\nA\n\nb.py::g (lines 3-4)\nB\n\n",
            ),
            (
                true,
                "THE CODE THE ISSUE IS ABOUT (the numbers left of `| ` are line numbers, not part \
                 of the files):\n\na.py::f (lines 1-2)\nA\n\nb.py::g (lines 3-4)\nB\n\n",
            ),
        ];
        for (numbered, expected) in cases {
            assert_eq!(code(&sections, numbered), expected);
        }
        let msgs = messages("f(1) is 2.", "Do it.");
        assert_eq!(
            msgs,
            vec![
                Message::system(SYSTEM),
                Message::user("ISSUE:\nf(1) is 2.\n\nDo it.")
            ]
        );
    }
}
