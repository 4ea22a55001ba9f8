//! The Fixer's prompt: each edit format's role and instructions, the
//! evidence and earlier attempts shown in a repair round, and the prompt
//! fitted to the model's context.

use super::*;

/// The role of the `search_replace` and `anchored` formats, after the
/// shared preamble and the code.
pub(super) const ROLE: &str =
    "You fix bugs. You first explain the cause in one line, then write the fix \
as SEARCH/REPLACE blocks.";

/// The `search_replace` format's instructions.
pub(super) const INSTRUCTIONS: &str =
    "Fix the issue. Start with `Reasoning:` and one line on the cause. \
Then write each change as a SEARCH/REPLACE block: the file's path on its own line, \
`<<<<<<< SEARCH`, the lines to change copied exactly from the code above (no line numbers), \
`=======`, the new lines, and `>>>>>>> REPLACE`. Keep SEARCH short: the lines that change \
and one line around them.";

/// The `anchored` format's instructions.
pub(super) const ANCHORED_INSTRUCTIONS: &str =
    "Fix the issue. Start with `Reasoning:` and one short line \
on the cause. Then write each change as a SEARCH/REPLACE block: the file's path on its own line, \
`<<<<<<< SEARCH`, one or more consecutive lines copied exactly from the code above, `=======`, \
the new lines, and `>>>>>>> REPLACE`. Keep SEARCH short: only the lines that change";

/// The `lines` format's instructions.
pub(super) const LINES_INSTRUCTIONS: &str =
    "Fix the issue. Start with `Reasoning:` and one short line on \
the cause. Then write each change as: the file's path on its own line, `replace lines A-B with:` \
(A and B are line numbers shown left of the code above; lines A to B, at most 8, are replaced), \
then the new lines in a ``` fence, exactly as they must be in the file, indentation included, \
without line numbers. Change only the lines that must change; write several short changes \
rather than one long one.";

/// The `definition` format's instructions, before the list of targets.
pub(super) const DEFINITION_INSTRUCTIONS: &str =
    "Fix the issue. Start with `Reasoning:` and one short line \
on the cause. Then write the name of the one function to rewrite on its own line, then the whole \
new function in a ``` fence, decorators included, indented as in the code above. It replaces the \
old function. The functions you can rewrite:";

/// What the prompt asks for in `format` (`targets`: the definitions the
/// `definition` format may rewrite).
pub(super) fn instructions(format: EditFormat, targets: &[Target]) -> String {
    match format {
        EditFormat::SearchReplace => INSTRUCTIONS.to_string(),
        EditFormat::Anchored => format!(
            "{ANCHORED_INSTRUCTIONS}, at most {} lines (several blocks for changes far apart).",
            grammar::MAX_SEARCH_LINES
        ),
        EditFormat::Lines => LINES_INSTRUCTIONS.to_string(),
        EditFormat::Definition => {
            let list: Vec<String> = targets.iter().map(|t| t.label()).collect();
            format!("{DEFINITION_INSTRUCTIONS}\n{}", list.join("\n"))
        }
    }
}

/// The prompt of the Fixer in the `search_replace` format, showing
/// `issue` (the issue's text, whole or cut).
pub fn messages(issue: &str, sections: &[(String, String)]) -> Vec<Message> {
    messages_in(issue, sections, false, ROLE, INSTRUCTIONS)
}

/// The role of `format`.
pub(super) fn role(format: EditFormat) -> &'static str {
    match format {
        EditFormat::SearchReplace | EditFormat::Anchored => ROLE,
        EditFormat::Lines => LINES_ROLE,
        EditFormat::Definition => DEFINITION_ROLE,
    }
}

/// The role of the `lines` format.
pub(super) const LINES_ROLE: &str =
    "You fix bugs. You first explain the cause in one line, then replace \
numbered lines of the code with new ones.";

/// The role of the `definition` format.
pub(super) const DEFINITION_ROLE: &str =
    "You fix bugs. You first explain the cause in one line, then \
rewrite the one function that has the bug.";

/// The shared preamble, the code (the preamble's form: `numbered` in the
/// `lines` format), then the role and the instructions.
pub(super) fn messages_in(
    issue: &str,
    sections: &[(String, String)],
    numbered: bool,
    role: &str,
    instructions: &str,
) -> Vec<Message> {
    messages_with(issue, sections, numbered, "", role, instructions)
}

/// [`messages_in`] with `extra` (the evidence and earlier attempts,
/// [`Extra::text`]) between the code and the role, so the preamble and
/// the code stay the prefix every stage shares.
pub(super) fn messages_with(
    issue: &str,
    sections: &[(String, String)],
    numbered: bool,
    extra: &str,
    role: &str,
    instructions: &str,
) -> Vec<Message> {
    preamble::messages(
        issue,
        &format!(
            "{}{extra}{role}\n\n{instructions}",
            preamble::code(sections, numbered)
        ),
    )
}

/// The accepted reproduction test and the lines of its failure on the
/// base commit, as the Fixer is shown them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    pub path: String,
    pub text: String,
    pub failure: String,
}

/// An earlier candidate shown in a repair round: its diff (or, when it
/// was rejected, its edit) and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub edit: String,
    /// `edit` is a diff (else the reply's edit as written).
    pub diff: bool,
    pub outcome: String,
}

/// What the prompt shows besides the issue and the code.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extra<'a> {
    pub evidence: Option<&'a Evidence>,
    pub attempts: &'a [Attempt],
}

impl Extra<'_> {
    /// The text shown after the code (empty when there is nothing).
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Some(e) = self.evidence {
            out.push_str(&format!(
                "A TEST THAT REPRODUCES THE ISSUE ({}):\n```python\n{}\n```\nON THE CODE ABOVE \
                 IT FAILS:\n```\n{}\n```\n\n",
                e.path,
                e.text.trim_end(),
                e.failure.trim_end()
            ));
        }
        if !self.attempts.is_empty() {
            out.push_str("EARLIER FIXES, WHICH DID NOT FIX IT:\n");
            for (i, a) in self.attempts.iter().enumerate() {
                let fence = if a.diff { "diff" } else { "" };
                out.push_str(&format!(
                    "\nFix {}:\n```{fence}\n{}\n```\n",
                    i + 1,
                    a.edit.trim_end()
                ));
                match a.outcome.split_once('\n') {
                    Some((lead, rest)) if a.diff => {
                        out.push_str(&format!("{lead}\n```\n{}\n```\n", rest.trim_end()))
                    }
                    _ => out.push_str(&format!("{}\n", a.outcome.trim_end())),
                }
            }
            out.push('\n');
        }
        out
    }

    /// What the instructions add: make the test pass; do not repeat an
    /// earlier fix.
    pub(super) fn instruction(&self) -> &'static str {
        match (self.evidence.is_some(), self.attempts.is_empty()) {
            (true, true) => " The fix must make the test above pass.",
            (true, false) => {
                " The fix must make the test above pass and keep the tests that passed before \
                 passing. The earlier fixes did not: write a different one."
            }
            (false, false) => " The earlier fixes did not work: write a different one.",
            (false, true) => "",
        }
    }
}

/// The Fixer's prompt as it will be sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub messages: Vec<Message>,
    /// The files shown, which SEARCH/REPLACE blocks may name.
    pub paths: Vec<String>,
    /// The record of the cuts made to fit the context (`None`: nothing
    /// was cut, or the backend does not say its context).
    pub trim: Option<Trim>,
    /// The format asked for: the one configured, or `anchored` for a
    /// `definition` prompt with no function among the located spans.
    pub format: EditFormat,
    /// What the prompt shows of each file.
    pub code: Vec<ShownCode>,
    /// The definitions the `definition` format may rewrite (empty in the
    /// other formats).
    pub targets: Vec<Target>,
}

impl Prompt {
    /// The grammar every candidate of this prompt follows.
    pub fn grammar(&self) -> Result<String, grammar::GrammarError> {
        match self.format {
            EditFormat::SearchReplace => grammar::search_replace_with_reasoning(&self.paths),
            EditFormat::Anchored => {
                grammar::anchored(&self.code.iter().map(|c| c.runs(true)).collect::<Vec<_>>())
            }
            EditFormat::Lines => {
                grammar::lines(&self.code.iter().map(|c| c.runs(false)).collect::<Vec<_>>())
            }
            EditFormat::Definition => grammar::definition(
                &self
                    .targets
                    .iter()
                    .map(|t| grammar::DefinitionTarget {
                        label: t.label(),
                        indent: t.indent.clone(),
                        lead: t.lead.clone(),
                    })
                    .collect::<Vec<_>>(),
            ),
        }
    }
}

/// The parts of a prompt built for a number of locations.
pub(super) struct Built {
    pub(super) messages: Vec<Message>,
    pub(super) paths: Vec<String>,
    pub(super) cuts: Vec<Cut>,
    pub(super) format: EditFormat,
    pub(super) code: Vec<ShownCode>,
    pub(super) targets: Vec<Target>,
}

impl Built {
    pub(super) fn into_prompt(self, trim: Option<Trim>) -> Prompt {
        Prompt {
            messages: self.messages,
            paths: self.paths,
            trim,
            format: self.format,
            code: self.code,
            targets: self.targets,
        }
    }
}

/// The prompt in `format` over `located`, showing `issue`; spans trimmed
/// to [`kept_lines`] of `identifiers` when given.
pub(super) fn build_prompt(
    issue: &str,
    located: &[Located],
    identifiers: Option<&BTreeSet<String>>,
    format: EditFormat,
    extra: Option<&Extra<'_>>,
) -> Built {
    let numbered = format == EditFormat::Lines;
    let (sections, cuts, code) = sections(located, identifiers, numbered);
    let paths: Vec<String> = sections.iter().map(|(p, _)| p.clone()).collect();
    let targets = if format == EditFormat::Definition {
        definition_targets(&code)
    } else {
        Vec::new()
    };
    let format = if format == EditFormat::Definition && targets.is_empty() {
        EditFormat::Anchored
    } else {
        format
    };
    let (extra_text, also) = extra.map_or((String::new(), ""), |e| (e.text(), e.instruction()));
    Built {
        messages: messages_with(
            issue,
            &sections,
            numbered,
            &extra_text,
            role(format),
            &format!("{}{also}", instructions(format, &targets)),
        ),
        paths,
        cuts,
        format,
        code,
        targets,
    }
}

/// The Fixer's prompt over the located spans alone, with nothing besides
/// the issue and the code: [`fit_prompt_with`] for [`Show::Located`].
pub fn fit_prompt(
    conversation: &dyn Conversation,
    root: &Path,
    issue: &str,
    locations: &[Location],
    reply_tokens: usize,
    format: EditFormat,
) -> Result<Prompt, FixError> {
    fit_prompt_with(
        conversation,
        root,
        issue,
        locations,
        ReplyShape {
            reply_tokens,
            format,
            show: Show::Located,
        },
        &Extra::default(),
    )
}

/// What a Fixer's reply may be: its token cap, its edit format, and which
/// view of the code it is shown.
#[derive(Debug, Clone, Copy)]
pub struct ReplyShape {
    pub reply_tokens: usize,
    pub format: EditFormat,
    pub show: Show,
}

/// The Fixer's prompt fitted to the context: everything whole if it fits
/// (the widest view of the code `show` allows, [`crate::agents::shown::views`],
/// and `extra`); else, in order until it fits with the issue as every
/// stage shows it ([`preamble::shared_issue`]: whole unless it takes more
/// than 40% of the context), with `extra`: each view of the code, widest
/// first, then the located spans trimmed to [`kept_lines`], and the last
/// locations left out; then the same without `extra`; else the located
/// spans with the issue cut further, to a head and a tail
/// ([`budget::fit_issue`]). When even one trimmed span and the shortest
/// issue do not fit, the smallest prompt, with a trim whose `fits` is
/// false.
pub fn fit_prompt_with(
    conversation: &dyn Conversation,
    root: &Path,
    issue: &str,
    locations: &[Location],
    shape: ReplyShape,
    extra: &Extra<'_>,
) -> Result<Prompt, FixError> {
    let ReplyShape {
        reply_tokens,
        format,
        show,
    } = shape;
    let views: Vec<Vec<Located>> = crate::agents::shown::views(root, locations, show)
        .iter()
        .map(|v| read_located(root, v))
        .filter(|v| !v.is_empty())
        .collect();
    let Some(located) = views
        .last()
        .filter(|_| !read_located(root, locations).is_empty())
    else {
        return Err(FixError::NoLocations);
    };
    let issue = issue.trim();
    let identifiers = issue_identifiers(issue);
    let has_extra = extra.evidence.is_some() || !extra.attempts.is_empty();
    let build = |text: &str, spans: &[Located], trim: bool, with_extra: bool| {
        build_prompt(
            text,
            spans,
            trim.then_some(&identifiers),
            format,
            with_extra.then_some(extra),
        )
    };
    let all = located.len();
    let whole = build(issue, &views[0], false, has_extra);
    let Some(budget) = Budget::of(conversation, reply_tokens) else {
        return Ok(whole.into_prompt(None));
    };
    let (full_tokens, fits) = budget.measure(conversation, &whole.messages)?;
    let shared = preamble::shared_issue(conversation, issue)?;
    if fits && shared.cut.is_none() {
        return Ok(whole.into_prompt(None));
    }
    let dropped = |n: usize| {
        located[n..].iter().map(|l| Cut::Location {
            path: l.location.path.clone(),
            symbol: l.location.symbol.clone(),
        })
    };
    // What a narrower view or a prompt without `extra` leaves out: the
    // wider views' spans the chosen one does not show as they are.
    let narrowed = |view: usize, with_extra: bool| {
        let span = |l: &Located| {
            (
                l.location.path.clone(),
                l.location.start_line,
                l.location.end_line,
            )
        };
        let kept: Vec<_> = views[view].iter().map(span).collect();
        let mut cuts: Vec<Cut> = Vec::new();
        for l in views[..view].iter().flatten() {
            let cut = Cut::Location {
                path: l.location.path.clone(),
                symbol: l.location.symbol.clone(),
            };
            if !kept.contains(&span(l)) && !cuts.contains(&cut) {
                cuts.push(cut);
            }
        }
        if has_extra && !with_extra {
            cuts.push(Cut::Location {
                path: extra.evidence.map_or(String::new(), |e| e.path.clone()),
                symbol: "(the reproduction test, its failure and the earlier fixes)".into(),
            });
        }
        cuts
    };
    let finish = |mut built: Built, issue_cut: Option<Cut>, n: usize, before: Vec<Cut>| {
        let mut cuts = before;
        cuts.extend(std::mem::take(&mut built.cuts));
        cuts.extend(issue_cut);
        cuts.extend(dropped(n));
        let tokens = conversation.count_tokens(&built.messages)?;
        let trim = budget.trim("fixer", full_tokens, tokens, cuts);
        Ok::<Prompt, FixError>(built.into_prompt(Some(trim)))
    };
    let last = views.len() - 1;
    let variants: &[bool] = if has_extra { &[true, false] } else { &[false] };
    for &with_extra in variants {
        for (v, view) in views.iter().enumerate() {
            let built = build(&shared.text, view, false, with_extra);
            if budget.measure(conversation, &built.messages)?.1 {
                return finish(built, shared.cut.clone(), all, narrowed(v, with_extra));
            }
        }
        for n in (1..=all).rev() {
            let built = build(&shared.text, &located[..n], true, with_extra);
            if budget.measure(conversation, &built.messages)?.1 {
                return finish(built, shared.cut.clone(), n, narrowed(last, with_extra));
            }
        }
    }
    // Not even one trimmed span fits beside the shared issue: this stage
    // cuts it further, and shares only the issue's head with the others.
    for n in (1..=all).rev() {
        let fitted = budget::fit_issue(conversation, &budget, issue, |t| {
            build(t, &located[..n], true, false).messages
        })?;
        if let Some(cut) = fitted {
            return finish(
                build(&cut.text, &located[..n], true, false),
                cut.cut,
                n,
                narrowed(last, false),
            );
        }
    }
    let shortest = budget::cut_issue(issue, budget::MIN_ISSUE_CHARS);
    finish(
        build(&shortest.text, &located[..1], true, false),
        shortest.cut,
        1,
        narrowed(last, false),
    )
}
