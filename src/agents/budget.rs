//! Fitting a prompt into the model's context before the call is made.
//!
//! A prompt's fixed parts (the system prompt, the instructions) are kept;
//! what varies (the issue, the code shown, the candidates compared) is cut
//! until the prompt, rendered with the chat template and counted by the
//! backend, leaves room for the reply. The issue is cut to a head and a
//! tail with a line saying how much was left out between them. Every cut
//! is recorded as a [`Step::Trimmed`](crate::record::trajectory::Step).
//! A backend that does not know its context (a server, a replay) gets the
//! prompt whole, as before.

use crate::engine::{Conversation, EngineError, Message};
use crate::record::trajectory::{Cut, Trim};

/// Characters of the issue's head kept at the least: the first paragraph
/// or two, where an issue says what is wrong.
pub const MIN_ISSUE_HEAD_CHARS: usize = 800;

/// Characters of the issue's tail kept at the least: the end of a
/// traceback or of the expected output, often the most precise part.
pub const MIN_ISSUE_TAIL_CHARS: usize = 400;

/// The shortest an issue is cut to: its head and its tail at their least.
pub const MIN_ISSUE_CHARS: usize = MIN_ISSUE_HEAD_CHARS + MIN_ISSUE_TAIL_CHARS;

/// How far (in characters) a cut moves to fall on a line boundary, so the
/// head and the tail keep whole lines unless a line is very long.
pub const LINE_SNAP_CHARS: usize = 200;

/// The context a prompt must fit in, and the tokens kept for the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The context, in tokens (prompt and reply).
    pub context: usize,
    /// Tokens kept for the reply (the call's `max_tokens`).
    pub reserved: usize,
}

impl Budget {
    /// The budget of a call on `conversation` whose reply may take
    /// `reserved` tokens; `None` when the backend does not say its context
    /// (a server, a replay): the prompt then goes whole.
    pub fn of(conversation: &dyn Conversation, reserved: usize) -> Option<Budget> {
        conversation
            .context_size()
            .map(|context| Budget { context, reserved })
    }

    /// The most tokens the prompt may take.
    pub fn limit(&self) -> usize {
        self.context.saturating_sub(self.reserved)
    }

    /// Whether a prompt of `tokens` tokens fits.
    pub fn fits_tokens(&self, tokens: usize) -> bool {
        tokens <= self.limit()
    }

    /// The prompt's tokens once rendered, and whether it fits.
    pub fn measure(
        &self,
        conversation: &dyn Conversation,
        messages: &[Message],
    ) -> Result<(usize, bool), EngineError> {
        let tokens = conversation.count_tokens(messages)?;
        Ok((tokens, self.fits_tokens(tokens)))
    }

    /// The record of a cut prompt.
    pub fn trim(
        &self,
        purpose: &str,
        full_tokens: usize,
        prompt_tokens: usize,
        cuts: Vec<Cut>,
    ) -> Trim {
        Trim {
            purpose: purpose.to_string(),
            context: self.context,
            reserved: self.reserved,
            full_tokens,
            prompt_tokens,
            fits: self.fits_tokens(prompt_tokens),
            cuts,
        }
    }
}

/// A text as shown, and the cut made to it (none when it is whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutText {
    pub text: String,
    pub cut: Option<Cut>,
}

/// `n` with a comma between thousands (`18,342`).
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The line put where the issue's middle was left out.
pub fn issue_note(chars: usize, lines: usize) -> String {
    format!(
        "[... {} characters ({} line{}) of the issue left out ...]",
        thousands(chars),
        thousands(lines),
        if lines == 1 { "" } else { "s" }
    )
}

/// `issue` cut to about `keep_chars` characters: two thirds from its head
/// and one third from its tail, each moved to a line boundary when one is
/// within [`LINE_SNAP_CHARS`], with [`issue_note`] between them. Whole
/// when it is no longer than `keep_chars`.
pub fn cut_issue(issue: &str, keep_chars: usize) -> CutText {
    let total = issue.chars().count();
    if keep_chars >= total {
        return CutText {
            text: issue.to_string(),
            cut: None,
        };
    }
    let tail_chars = keep_chars / 3;
    let head_chars = keep_chars - tail_chars;
    let byte_at = |chars: usize| {
        issue
            .char_indices()
            .nth(chars)
            .map_or(issue.len(), |(b, _)| b)
    };
    let mut head_end = byte_at(head_chars);
    let mut tail_start = byte_at(total - tail_chars);
    // The head ends after a newline, if one is near.
    if let Some(p) = issue[..head_end].rfind('\n') {
        if issue[p + 1..head_end].chars().count() <= LINE_SNAP_CHARS {
            head_end = p + 1;
        }
    }
    // The tail starts after a newline, if one is near.
    if tail_start > 0 && !issue[..tail_start].ends_with('\n') {
        if let Some(q) = issue[tail_start..].find('\n') {
            if issue[tail_start..tail_start + q].chars().count() <= LINE_SNAP_CHARS {
                tail_start += q + 1;
            }
        }
    }
    let tail_start = tail_start.max(head_end);
    let middle = &issue[head_end..tail_start];
    let dropped_chars = middle.chars().count();
    let dropped_lines = middle.lines().count();
    let head = issue[..head_end]
        .strip_suffix('\n')
        .unwrap_or(&issue[..head_end]);
    let tail = &issue[tail_start..];
    CutText {
        text: format!(
            "{head}\n{}\n{tail}",
            issue_note(dropped_chars, dropped_lines)
        ),
        cut: Some(Cut::Issue {
            kept_chars: total - dropped_chars,
            dropped_chars,
            dropped_lines,
        }),
    }
}

/// The largest `n` in `lo..=hi` for which `fits(n)` holds, by bisection
/// (`fits` is taken to be monotone); `None` when `fits(lo)` does not hold.
pub fn largest<E>(
    lo: usize,
    hi: usize,
    mut fits: impl FnMut(usize) -> Result<bool, E>,
) -> Result<Option<usize>, E> {
    if lo > hi || !fits(lo)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(Some(lo))
}

/// The issue as shown in the prompt `build` makes of it: whole when that
/// fits, otherwise cut to the longest head and tail that fit (at least
/// [`MIN_ISSUE_CHARS`]). `None` when even the shortest cut does not fit.
pub fn fit_issue(
    conversation: &dyn Conversation,
    budget: &Budget,
    issue: &str,
    build: impl Fn(&str) -> Vec<Message>,
) -> Result<Option<CutText>, EngineError> {
    let fits = |text: &str| -> Result<bool, EngineError> {
        Ok(budget.measure(conversation, &build(text))?.1)
    };
    if fits(issue)? {
        return Ok(Some(CutText {
            text: issue.to_string(),
            cut: None,
        }));
    }
    let total = issue.chars().count();
    if total <= MIN_ISSUE_CHARS {
        return Ok(None);
    }
    let keep = largest(MIN_ISSUE_CHARS, total - 1, |n| {
        fits(&cut_issue(issue, n).text)
    })?;
    Ok(keep.map(|n| cut_issue(issue, n)))
}

/// A conversation for tests: a token is four characters of content, and
/// every message costs [`fake::MESSAGE_TOKENS`] more.
#[cfg(test)]
pub(crate) mod fake {
    use crate::engine::{
        check_fits, Candidate, Conversation, EngineError, Generation, Message, Request, Stats, Stop,
    };

    /// Tokens a message costs beyond its content (the template's markers).
    pub const MESSAGE_TOKENS: usize = 4;

    /// Answers candidate `i` of every call with `replies[i % len]`,
    /// refusing a prompt that does not fit like the embedded model does,
    /// and keeps the prompts it was sent.
    pub struct Fake {
        pub context: usize,
        pub replies: Vec<String>,
        pub prompts: Vec<Vec<Message>>,
    }

    impl Fake {
        /// Every candidate replies `reply`.
        pub fn new(context: usize, reply: &str) -> Fake {
            Fake::cycling(context, &[reply])
        }

        /// Candidate `i` replies `replies[i % len]`.
        pub fn cycling(context: usize, replies: &[&str]) -> Fake {
            Fake {
                context,
                replies: replies.iter().map(|r| r.to_string()).collect(),
                prompts: Vec::new(),
            }
        }
    }

    /// Tokens of `messages` by the fake's count.
    pub fn tokens(messages: &[Message]) -> usize {
        messages
            .iter()
            .map(|m| m.content.chars().count() / 4 + MESSAGE_TOKENS)
            .sum()
    }

    impl Conversation for Fake {
        fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
            let prompt = tokens(request.messages);
            check_fits(prompt, request.sampling.max_tokens as usize, self.context)?;
            self.prompts.push(request.messages.to_vec());
            let n = request.n.max(1);
            Ok(Generation {
                candidates: (0..n)
                    .map(|i| Candidate {
                        text: self.replies[i % self.replies.len().max(1)].clone(),
                        tokens: vec![1],
                        stop: Stop::EndOfText,
                    })
                    .collect(),
                stats: Stats {
                    prompt_tokens: prompt,
                    prompt_tokens_evaluated: prompt,
                    prompt_tokens_reused: 0,
                    generated_tokens: vec![1; n],
                    draft_tokens: 0,
                    draft_accepted: 0,
                    grammar: Default::default(),
                    prompt_s: 0.0,
                    decode_s: 0.0,
                    total_s: 0.0,
                },
            })
        }

        fn context_size(&self) -> Option<usize> {
            Some(self.context)
        }

        fn count_tokens(&self, messages: &[Message]) -> Result<usize, EngineError> {
            Ok(tokens(messages))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_separated() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (18342, "18,342"),
            (1234567, "1,234,567"),
        ] {
            assert_eq!(thousands(n), want, "{n}");
        }
    }

    #[test]
    fn an_issue_keeps_its_head_and_tail_on_line_boundaries() {
        // 100 lines of 29 characters and a newline: 3,000 characters.
        let issue: String = (1..=100)
            .map(|i| format!("line {i:03} of the issue text...\n"))
            .collect();
        assert_eq!(issue.chars().count(), 3000);
        let c = cut_issue(&issue, 1200);
        // Head: 800 characters end mid-line 27; it snaps back to line 26's end.
        // Tail: 400 characters start mid-line 87; it snaps on to line 88.
        assert_eq!(
            c.cut,
            Some(Cut::Issue {
                kept_chars: 26 * 30 + 13 * 30,
                dropped_chars: 61 * 30,
                dropped_lines: 61,
            })
        );
        let lines: Vec<&str> = c.text.lines().collect();
        assert_eq!(lines.len(), 26 + 1 + 13);
        assert_eq!(lines[0], "line 001 of the issue text...");
        assert_eq!(lines[25], "line 026 of the issue text...");
        assert_eq!(
            lines[26],
            "[... 1,830 characters (61 lines) of the issue left out ...]"
        );
        assert_eq!(lines[27], "line 088 of the issue text...");
        assert_eq!(lines[39], "line 100 of the issue text...");
        // Whole when short enough.
        assert_eq!(cut_issue(&issue, 3000).text, issue);
        assert_eq!(cut_issue(&issue, 3000).cut, None);
    }

    #[test]
    fn a_long_line_is_cut_where_it_is() {
        let issue = "é".repeat(5000);
        let c = cut_issue(&issue, 1500);
        assert_eq!(
            c.cut,
            Some(Cut::Issue {
                kept_chars: 1500,
                dropped_chars: 3500,
                dropped_lines: 1,
            })
        );
        assert_eq!(
            c.text,
            format!(
                "{}\n[... 3,500 characters (1 line) of the issue left out ...]\n{}",
                "é".repeat(1000),
                "é".repeat(500)
            )
        );
    }

    #[test]
    fn largest_bisects_to_the_last_that_fits() {
        let cases: [(usize, usize, usize, Option<usize>); 5] = [
            (0, 100, 37, Some(37)),
            (0, 100, 100, Some(100)),
            (0, 100, 0, Some(0)),
            (10, 100, 5, None),
            (10, 5, 50, None),
        ];
        for (lo, hi, limit, want) in cases {
            let got: Result<_, ()> = largest(lo, hi, |n| Ok(n <= limit));
            assert_eq!(got, Ok(want), "{lo}..={hi} under {limit}");
        }
    }

    #[test]
    fn an_issue_is_cut_only_as_far_as_needed() -> Result<(), Box<dyn std::error::Error>> {
        let issue = "x".repeat(30_000);
        let build = |text: &str| vec![Message::system("s".repeat(400)), Message::user(text)];
        let conversation = fake::Fake::new(2048, "");
        let budget = Budget {
            context: 2048,
            reserved: 512,
        };
        // 1,536 prompt tokens: 104 for the system, 4 for the user message,
        // so the user message's content may take 1,428 tokens: 5,715
        // characters, of which the note takes 58 and its newlines 2.
        let fitted = fit_issue(&conversation, &budget, &issue, build)?.ok_or("no fit")?;
        assert_eq!(
            fitted.cut,
            Some(Cut::Issue {
                kept_chars: 5655,
                dropped_chars: 30_000 - 5655,
                dropped_lines: 1,
            })
        );
        assert_eq!(fake::tokens(&build(&fitted.text)), 1536);
        assert_eq!(
            fake::tokens(&build(&cut_issue(&issue, 5656).text)),
            1537,
            "one more character does not fit"
        );
        // Whole when it fits.
        let short = "y".repeat(100);
        let whole = fit_issue(&conversation, &budget, &short, build)?.ok_or("no fit")?;
        assert_eq!(whole.text, short);
        assert_eq!(whole.cut, None);
        // Not even the shortest cut fits a 400-token context.
        let tiny = Budget {
            context: 400,
            reserved: 0,
        };
        assert_eq!(fit_issue(&conversation, &tiny, &issue, build)?, None);
        Ok(())
    }
}
