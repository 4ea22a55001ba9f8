//! One grammar-constrained model call, recorded in the trajectory: how the
//! sampling agents (localizer, reproducer, fixer, ranker) ask the model.

use crate::engine::{Conversation, EngineError, Generation, Message, Request, Sampling};
use crate::record::trajectory::{ModelCall, Step};
use crate::trajectory::Trajectory;

/// A request of one agent: `n` candidates of `messages`, each following
/// `grammar` (GBNF, root rule `root`).
pub struct Call<'g> {
    /// The agent, recorded as the call's purpose.
    pub agent: &'static str,
    /// The prompt.
    pub messages: Vec<Message>,
    /// Sampling, with the agent's reply cap and temperature already set.
    pub sampling: Sampling,
    /// Candidates to draw.
    pub n: usize,
    /// Per-candidate temperatures; none: all use `sampling.temperature`.
    pub temperatures: Option<Vec<f32>>,
    /// The grammar every candidate follows.
    pub grammar: &'g str,
}

impl<'g> Call<'g> {
    /// `candidates` candidates (at least one) of at most `max_tokens`, the
    /// first greedy and the others at `temperature` ([`greedy_first`]): how
    /// the fixer and the reproducer sample.
    pub fn spread(
        agent: &'static str,
        messages: Vec<Message>,
        sampling: &Sampling,
        max_tokens: u32,
        candidates: usize,
        temperature: f32,
        grammar: &'g str,
    ) -> Call<'g> {
        let n = candidates.max(1);
        Call {
            agent,
            messages,
            sampling: Sampling {
                max_tokens,
                ..sampling.clone()
            },
            n,
            temperatures: Some(greedy_first(n, temperature)),
            grammar,
        }
    }
}

/// Temperatures for `n` candidates: the first greedy, so one candidate is
/// the model's most likely reply, the others at `temperature`.
pub fn greedy_first(n: usize, temperature: f32) -> Vec<f32> {
    (0..n)
        .map(|i| if i == 0 { 0.0 } else { temperature })
        .collect()
}

/// Makes `call` and records it in `trajectory` (prompt as rendered, every
/// candidate, token counts) before returning the candidates.
pub fn constrained(
    conversation: &mut dyn Conversation,
    trajectory: &mut Trajectory,
    call: Call<'_>,
) -> Result<Generation, EngineError> {
    let request = Request {
        n: call.n.max(1),
        temperatures: call.temperatures,
        grammar: Some(call.grammar),
        ..Request::new(&call.messages, call.sampling.clone())
    };
    let generation = conversation.generate(&request)?;
    let rendered = conversation.render(&call.messages);
    trajectory.record(Step::ModelCall(Box::new(ModelCall::from_generation(
        call.agent,
        call.messages,
        rendered,
        call.sampling,
        &generation,
    ))));
    Ok(generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_first_keeps_one_greedy_candidate() {
        let cases: &[(usize, f32, &[f32])] = &[
            (0, 0.8, &[]),
            (1, 0.8, &[0.0]),
            (4, 0.8, &[0.0, 0.8, 0.8, 0.8]),
            (3, 0.0, &[0.0, 0.0, 0.0]),
        ];
        for (n, t, want) in cases {
            assert_eq!(greedy_first(*n, *t), want.to_vec(), "n = {n}, t = {t}");
        }
    }
}
