//! The ReAct loop: the shared system message, a first user message with
//! the issue (the preamble every stage of a task starts with), the agent's
//! guide (role, the commands' documentation, a demonstration) and its
//! task, then turns of (thought, one command) from the model and the
//! interface's observation back.
//!
//! Every turn is generated under a grammar built from the commands the
//! agent may use and the files that exist at that moment, so a reply is
//! always one well-formed command. Only a reply cut off by the token cap
//! (counted as `truncated`) or one from a backend that ignores grammars
//! (counted as a format error) can fail to parse; either is told to the
//! model, and three in a row end the episode.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::budget::{self, Budget};
use super::history::{self, History, HistorySettings};
use super::preamble;
use crate::aci::{command, Aci, Command};
use crate::dataset::Issue;
use crate::engine::{grammar, Conversation, EngineError, Message, Request, Sampling, Stop};
use crate::record::trajectory::{ActionStep, ModelCall, Step, Trim};
use crate::record::trajectory::{EpisodeSummary, ExitStatus};
use crate::trajectory::Trajectory;

/// Format errors in a row after which the episode ends: the model is not
/// following the format and more turns only burn tokens.
pub const MAX_CONSECUTIVE_FORMAT_ERRORS: usize = 3;

/// Limits and history settings of a ReAct episode.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReactSettings {
    /// Most turns (model calls).
    pub max_steps: usize,
    /// Most tokens the model may process in the episode: prompt tokens
    /// evaluated plus tokens generated (reused prompt tokens are free).
    /// 0 means no limit.
    pub max_tokens: u64,
    /// Most seconds of wall time; 0 means no limit.
    pub max_wall_s: u64,
    /// Most tokens of one reply.
    pub reply_tokens: u32,
    pub history: HistorySettings,
}

impl Default for ReactSettings {
    fn default() -> Self {
        ReactSettings {
            max_steps: 30,
            max_tokens: 0,
            max_wall_s: 1800,
            reply_tokens: 768,
            history: HistorySettings::default(),
        }
    }
}

/// What an agent is: its role, the commands it may use, a demonstration of
/// the format on another repository, and its task.
#[derive(Debug, Clone)]
pub struct Agent<'a> {
    /// Names the agent in the trajectory ("localizer", "reproducer").
    pub name: &'a str,
    /// The first paragraph of the agent's guide (after the issue).
    pub role: &'a str,
    /// The command names it may use.
    pub commands: &'a [&'a str],
    /// One worked example, in the reply format, with observations.
    pub demonstration: &'a str,
    /// The first user message: the issue and what to do about it.
    pub task: TaskText,
}

/// An agent's task: the issue, which alone is cut when the first prompt
/// would not fit the context, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskText {
    /// The issue's text, trimmed.
    pub issue: String,
    /// What to do, after the agent's guide (role, commands, demonstration).
    pub after: String,
}

impl TaskText {
    /// The task of `issue`'s text.
    pub fn new(issue: &Issue, after: impl Into<String>) -> Self {
        TaskText {
            issue: issue.problem_statement.trim().to_string(),
            after: after.into(),
        }
    }
}

/// The first user message's text (before the state): the shared task
/// preamble with `issue` (whole or cut), the agent's `guide`
/// ([`guide`]), and the task's instructions; it starts like every other
/// stage's prompt of the task.
pub fn task_message(task: &TaskText, guide: &str, issue: &str) -> String {
    format!(
        "{}{guide}\n\n{}",
        preamble::task_preamble(issue),
        task.after
    )
}

/// The task's text for the first prompt: the issue whole when the first
/// prompt fits with `reply_tokens` to spare, else cut to fit (the cut
/// recorded in `trajectory`). When even the shortest cut does not fit, or
/// the backend cannot count, the shortest cut or the whole issue: the
/// first call then ends the episode with `exit_context` as before.
/// A third of the context is kept for an episode's turns when its first
/// prompt is fitted: at 4,096 tokens, 1,365, room for three observations
/// of a 30-line window with their replies before history collapses. The
/// 24,770-character issue of pylint-dev__pylint-7080, cut only to fit the
/// first reply, ended the episode after one step.
pub const EPISODE_ROOM_DIVISOR: usize = 3;

fn fit_task(
    conversation: &dyn Conversation,
    agent: &Agent<'_>,
    guide: &str,
    first_state: &str,
    reply_tokens: usize,
    trajectory: &mut Trajectory,
) -> String {
    let task = &agent.task;
    let with_issue = |issue: &str| task_message(task, guide, issue);
    let build = |issue: &str| messages(&with_issue(issue), first_state, &[], &History::default());
    // The issue leaves room for the episode's turns, not only the first
    // reply: a first prompt that fills the context ends the episode after
    // one step.
    let room = conversation
        .context_size()
        .map_or(0, |c| c / EPISODE_ROOM_DIVISOR);
    let Some(budget) = Budget::of(conversation, reply_tokens + room) else {
        return with_issue(&task.issue);
    };
    let fitted = (|| -> Result<Option<(String, Trim)>, EngineError> {
        let (full_tokens, fits) = budget.measure(conversation, &build(&task.issue))?;
        let shared = preamble::shared_issue(conversation, &task.issue)?;
        if fits && shared.cut.is_none() {
            return Ok(None);
        }
        // The issue as every stage shows it; cut further (for this agent
        // alone) only when the guide does not fit beside it.
        let cut = if budget.measure(conversation, &build(&shared.text))?.1 {
            shared
        } else {
            budget::fit_issue(conversation, &budget, &task.issue, build)?
                .unwrap_or_else(|| budget::cut_issue(&task.issue, budget::MIN_ISSUE_CHARS))
        };
        let tokens = conversation.count_tokens(&build(&cut.text))?;
        let trim = budget.trim(
            agent.name,
            full_tokens,
            tokens,
            cut.cut.into_iter().collect(),
        );
        Ok(Some((with_issue(&cut.text), trim)))
    })();
    match fitted {
        Ok(Some((text, trim))) => {
            trajectory.record(Step::Trimmed(Box::new(trim)));
            text
        }
        // Fits whole; or the count failed, and the call will say why.
        Ok(None) | Err(_) => with_issue(&task.issue),
    }
}

/// The agent's guide, after the shared task preamble in the first user
/// message (the system message is the one every stage shares,
/// [`preamble::SYSTEM`]): its role, how to reply, its commands and the
/// demonstration.
pub fn guide(agent: &Agent<'_>) -> String {
    format!(
        "{role}\n\n\
         You work in a repository through the commands below. Each reply is one short thought \
         on one line, a blank line, then exactly one command in a ``` fence, for example:\n\n\
         I will read the parser first.\n\n```\nopen src/parser.py\n```\n\n\
         After each command you see its output. Paths are relative to the repository root.\n\n\
         COMMANDS:\n{docs}\n\n\
         DEMONSTRATION (another repository; do not repeat it):\n{demo}",
        role = agent.role,
        docs = command::docs(agent.commands),
        demo = agent.demonstration.trim_end(),
    )
}

fn state(aci: &Aci) -> String {
    format!("(Open file: {})", aci.open_file().unwrap_or("n/a"))
}

/// One finished turn.
struct Past {
    reply: String,
    /// The command's text (the whole reply when it was not a command).
    action: String,
    /// What the command showed, before any note was added.
    raw_observation: String,
    observation: String,
    state: String,
}

/// Added to an observation when the agent repeats its previous command and
/// gets the same output: small models loop, and a plain statement of it
/// is often enough to break the loop.
pub const REPEATED: &str = "(You ran this same command in your previous turn, and its output \
has not changed. Do something else: look elsewhere, or take the next step.)";

fn messages(task: &str, first_state: &str, past: &[Past], history: &History) -> Vec<Message> {
    let mut out = vec![
        Message::system(preamble::SYSTEM),
        Message::user(format!("{task}\n\n{first_state}")),
    ];
    for (i, p) in past.iter().enumerate() {
        out.push(Message::assistant(p.reply.clone()));
        let observation = if i < history.collapsed() {
            history::collapsed(p.observation.lines().count())
        } else {
            p.observation.clone()
        };
        out.push(Message::user(format!("{observation}\n{}", p.state)));
    }
    out
}

/// Runs one episode of `agent` on `aci` with `conversation` and records it
/// in `trajectory`. The episode always ends with a summary (errors of the
/// backend end it with `exit_error`); the agent's changes stay in the
/// repository for the caller to diff.
pub fn run(
    conversation: &mut dyn Conversation,
    aci: &mut Aci,
    agent: &Agent<'_>,
    settings: &ReactSettings,
    sampling: &Sampling,
    trajectory: &mut Trajectory,
) -> EpisodeSummary {
    let started = Instant::now();
    let guide = guide(agent);
    let first_state = state(aci);
    let task = fit_task(
        conversation,
        agent,
        &guide,
        &first_state,
        settings.reply_tokens as usize,
        trajectory,
    );
    let sampling = Sampling {
        max_tokens: settings.reply_tokens,
        ..sampling.clone()
    };
    let mut past: Vec<Past> = Vec::new();
    let mut history = History::default();
    let mut summary = new_summary(agent.name);
    let mut errors_in_row = 0;
    let status = loop {
        if let Some(limit) = limit_reached(settings, started, &summary) {
            break limit;
        }
        history.update(&settings.history, past.len());
        let actions = command::actions(agent.commands, &aci.choices());
        let grammar = match grammar::turn(&actions) {
            Ok(g) => g,
            Err(e) => {
                summary.error = Some(format!("cannot build the action grammar: {e}"));
                break ExitStatus::ExitError;
            }
        };
        let (msgs, generation) = loop {
            let msgs = messages(&task, &first_state, &past, &history);
            let request = Request {
                grammar: Some(&grammar),
                ..Request::new(&msgs, sampling.clone())
            };
            match conversation.generate(&request) {
                Err(EngineError::TooLong { .. })
                    if history.squeeze(&settings.history, past.len()) =>
                {
                    continue
                }
                result => break (msgs, result),
            }
        };
        let generation = match generation {
            Ok(g) => g,
            Err(EngineError::TooLong { over, .. }) => {
                summary.error = Some(format!(
                    "the conversation no longer fits the context, even with old output collapsed ({over} tokens over)"
                ));
                break ExitStatus::ExitContext;
            }
            Err(e) => {
                summary.error = Some(e.to_string());
                break ExitStatus::ExitError;
            }
        };
        summary.steps += 1;
        let s = &generation.stats;
        summary.tokens_evaluated += s.prompt_tokens_evaluated as u64;
        summary.tokens_reused += s.prompt_tokens_reused as u64;
        summary.tokens_generated += s.generated_tokens.first().copied().unwrap_or(0) as u64;
        let prompt = conversation.render(&msgs);
        let call =
            ModelCall::from_generation(agent.name, msgs, prompt, sampling.clone(), &generation);
        let reply = call.response.clone();
        trajectory.record(Step::ModelCall(Box::new(call)));

        let cut_off = generation
            .candidates
            .first()
            .is_some_and(|c| c.stop == Stop::MaxTokens);
        let exec_started = Instant::now();
        let Acted {
            thought,
            action,
            observation,
            format_error,
            submitted,
        } = act(
            aci,
            agent,
            &reply,
            cut_off,
            past.last(),
            settings,
            &mut summary,
        );
        if format_error.is_some() {
            errors_in_row += 1;
        } else {
            errors_in_row = 0;
        }
        let action_text = action.clone();
        trajectory.record(Step::Action(Box::new(ActionStep {
            agent: agent.name.to_string(),
            step: summary.steps,
            thought,
            action,
            observation: observation.clone(),
            format_error,
            exec_s: exec_started.elapsed().as_secs_f64(),
        })));
        if submitted {
            break ExitStatus::Submitted;
        }
        let raw_observation = observation
            .strip_suffix(&format!("\n{REPEATED}"))
            .unwrap_or(&observation)
            .to_string();
        past.push(Past {
            reply,
            action: action_text,
            raw_observation,
            observation,
            state: state(aci),
        });
        if errors_in_row >= MAX_CONSECUTIVE_FORMAT_ERRORS {
            summary.error = Some(format!(
                "{MAX_CONSECUTIVE_FORMAT_ERRORS} replies in a row were not a complete command"
            ));
            break ExitStatus::ExitError;
        }
    };
    summary.status = status;
    summary.wall_s = started.elapsed().as_secs_f64();
    trajectory.record(Step::Episode(Box::new(summary.clone())));
    summary
}

/// The summary of an episode of `agent` that has not yet taken a step.
fn new_summary(agent: &str) -> EpisodeSummary {
    EpisodeSummary {
        agent: agent.to_string(),
        status: ExitStatus::ExitStepLimit,
        steps: 0,
        format_errors: 0,
        truncated: 0,
        tokens_evaluated: 0,
        tokens_reused: 0,
        tokens_generated: 0,
        wall_s: 0.0,
        error: None,
    }
}

/// Whether a limit of the episode is reached, and which.
fn limit_reached(
    settings: &ReactSettings,
    started: Instant,
    summary: &EpisodeSummary,
) -> Option<ExitStatus> {
    if summary.steps >= settings.max_steps {
        return Some(ExitStatus::ExitStepLimit);
    }
    if settings.max_wall_s > 0 && started.elapsed().as_secs() >= settings.max_wall_s {
        return Some(ExitStatus::ExitTime);
    }
    let used = summary.tokens_evaluated + summary.tokens_generated;
    if settings.max_tokens > 0 && used >= settings.max_tokens {
        return Some(ExitStatus::ExitTokenLimit);
    }
    None
}

/// One turn's reply acted on: its command run, or why it was not one.
struct Acted {
    thought: String,
    action: String,
    observation: String,
    /// Why the reply was not a complete command (counted in `summary`).
    format_error: Option<String>,
    submitted: bool,
}

/// Runs the command of `reply` on `aci` when it is one of the agent's
/// (`cut_off`: the reply reached the token limit); else says why not, in
/// the observation, and counts it in `summary`. `last` is the turn before.
fn act(
    aci: &mut Aci,
    agent: &Agent<'_>,
    reply: &str,
    cut_off: bool,
    last: Option<&Past>,
    settings: &ReactSettings,
    summary: &mut EpisodeSummary,
) -> Acted {
    let parsed = command::split_turn(reply)
        .ok_or_else(|| "the reply has no command in a ``` fence".to_string())
        .and_then(|t| {
            let allowed = |c: &Command| agent.commands.contains(&c.name());
            match Command::parse(&t.command) {
                Ok(c) if allowed(&c) => Ok((t, c)),
                Ok(c) => Err(format!("`{}` is not one of your commands", c.name())),
                Err(e) => Err(e.to_string()),
            }
        });
    let refused = |observation: String, why: String| Acted {
        thought: String::new(),
        action: reply.to_string(),
        observation,
        format_error: Some(why),
        submitted: false,
    };
    match parsed {
        Ok((turn, cmd)) => {
            let o = aci.execute(&cmd);
            let mut text = o.text;
            // Small models loop on one command; say so, as one line.
            let repeated =
                last.is_some_and(|p| p.action == turn.command && p.raw_observation == text);
            if repeated {
                text.push('\n');
                text.push_str(REPEATED);
            }
            Acted {
                thought: turn.thought,
                action: turn.command,
                observation: text,
                format_error: None,
                submitted: o.submitted,
            }
        }
        Err(_) if cut_off => {
            summary.truncated += 1;
            let why = format!(
                "the reply reached the limit of {} tokens",
                settings.reply_tokens
            );
            let text = format!(
                "Your reply was cut off: it reached the limit of {} tokens before the command \
                 ended. Write a shorter thought, and edit fewer lines at a time.",
                settings.reply_tokens
            );
            refused(text, why)
        }
        Err(why) => {
            summary.format_errors += 1;
            let text = format!(
                "Your reply was not in the required format ({why}). Reply with one short thought \
                 on one line, a blank line, then exactly one command in a ``` fence."
            );
            refused(text, why)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::budget::fake::{self, Fake};
    use crate::record::trajectory::Cut;

    fn issue(text: &str) -> Issue {
        Issue {
            instance_id: "demo__react-1".into(),
            repo: "demo/react".into(),
            base_commit: "0".repeat(40),
            problem_statement: text.into(),
            created_at: None,
        }
    }

    #[test]
    fn the_first_prompt_is_fitted_by_cutting_the_issue() {
        let long = issue(&"a line of the issue, thirty ch\n".repeat(1000));
        let short = issue("Square.area() returns the perimeter.");
        let agent_long = crate::agents::localizer(&long);
        let guide = guide(&agent_long);
        let state = "(Open file: n/a)";
        let reply = 768;
        let fixed = fake::tokens(&messages(
            &task_message(&agent_long.task, &guide, ""),
            state,
            &[],
            &History::default(),
        ));
        assert_eq!(fixed, 735);
        // 1,000 lines of 31 characters; trimmed of its last newline.
        let cut = |kept_chars, dropped_lines| {
            Some(Cut::Issue {
                kept_chars,
                dropped_chars: 30_999 - kept_chars,
                dropped_lines,
            })
        };
        // (context, issue, tokens of the first prompt, the cut, fits)
        let cases: [(usize, &Issue, usize, Option<Cut>, bool); 5] = [
            (4096, &short, 744, None, true),
            // The issue as every stage shows it (40% of the context, 3,276
            // tokens), which fits the 8,192 − 768 − 2,730 left here.
            (8192, &long, 3982, cut(12_926, 583), true),
            // Likewise: 2,457 tokens of the 6,144 − 768 − 2,048 = 3,328.
            (6144, &long, 3160, cut(9640, 689), true),
            // Not beside the guide: cut further, to at most
            // 2,841 − 768 − 947 = 1,126.
            (2841, &long, 1122, cut(1487, 952), true),
            // At most 632 < 735: not even the shortest cut fits.
            (2100, &long, 1037, cut(1146, 963), false),
        ];
        for (context, which, tokens, cut, fits) in cases {
            let agent = crate::agents::localizer(which);
            let conversation = Fake::new(context, "");
            let mut trajectory = Trajectory::new("demo__react-1");
            let task = fit_task(&conversation, &agent, &guide, state, reply, &mut trajectory);
            let preamble = preamble::task_preamble(&agent.task.issue);
            let shared = preamble::shared_issue(&conversation, &agent.task.issue)
                .map(|c| preamble::task_preamble(&c.text))
                .unwrap_or_default();
            assert!(task.starts_with("ISSUE:\n"), "{context}");
            assert!(task.ends_with(&agent.task.after), "{context}");
            let first = messages(&task, state, &[], &History::default());
            assert_eq!(first[0], Message::system(preamble::SYSTEM), "{context}");
            assert_eq!(fake::tokens(&first), tokens, "{context}");
            let trims: Vec<&Trim> = trajectory
                .steps
                .iter()
                .filter_map(|s| match &s.step {
                    Step::Trimmed(t) => Some(t.as_ref()),
                    _ => None,
                })
                .collect();
            match (&cut, trims.as_slice()) {
                (None, []) => {
                    assert!(task.starts_with(&preamble), "{context}");
                    assert_eq!(task, task_message(&agent.task, &guide, &agent.task.issue));
                }
                (Some(c), [t]) => {
                    assert_eq!(t.cuts, std::slice::from_ref(c), "{context}");
                    assert_eq!(
                        (t.purpose.as_str(), t.fits, t.prompt_tokens),
                        ("localizer", fits, tokens)
                    );
                    assert!(task.contains("of the issue left out ...]"));
                    // The shared cut when the guide fits beside it.
                    assert_eq!(task.starts_with(&shared), context >= 6144, "{context}");
                }
                (c, t) => panic!("{context}: expected {c:?}, recorded {t:?}"),
            }
        }
    }
}
