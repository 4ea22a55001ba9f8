//! Decoding one candidate with drafts: each step evaluates the candidate's
//! last sampled token together with a guess at the tokens that follow it,
//! all in one batch, then samples position after position and keeps the
//! guess for as long as the sampler picks exactly the guessed token.
//!
//! The guesses (drafts) come from two places:
//! - **prompt lookup**: the last few tokens of the candidate appear earlier
//!   in the prompt or the reply; the tokens that followed them there are the
//!   draft (a SEARCH section copying the file, a test reusing its lines);
//! - **jump-forward**: where the grammar admits exactly one continuation
//!   (the rest of a keyword, a `>>>>>>> REPLACE` marker), that text,
//!   tokenized, is the draft ([`super::gbnf`]).
//!
//! Every token is still chosen by the candidate's own sampler from the
//! logits at its position, one sampler call per token, in order; a draft
//! only decides how many positions one batch evaluates. So the output is the
//! token-by-token output, with the same seeds at any temperature (the
//! sampler's random state advances once per generated token either way),
//! and the grammar sampler only ever sees tokens that were kept. What
//! changes is the number of batches: on a CPU one batch of a few tokens
//! costs little more than one token.

use std::sync::Arc;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use patchwright_engine_types::{GrammarChecks, Stop};
use rayon::prelude::*;

use super::gbnf::{Grammar, Matcher};
use super::sampler::TokenSampler;

/// Longest run of the candidate's last tokens looked up in its history: a
/// longer match is a surer guess, so the longest is tried first.
pub const LOOKUP_MAX_NGRAM: usize = 4;
/// Shortest run looked up: one token alone matches too often by chance to
/// be worth the extra positions.
pub const LOOKUP_MIN_NGRAM: usize = 2;
/// Most tokens of a prompt-lookup draft; the length actually drafted is
/// chosen per step from the candidate's record ([`lookup_length`]).
pub const LOOKUP_MAX_DRAFT: usize = 8;
/// What one more position in a batch costs, as a fraction of a one-token
/// decoding step, on the CPU: Qwen2.5-Coder-0.5B on 2 cores reads a prompt
/// at about 87 tokens/s (11.5 ms a position) and decodes one token in
/// about 48 ms, so a step is ~37 ms of fixed cost (reading the weights)
/// plus ~11.5 ms a position. On a GPU the fraction is far smaller and
/// drafts are nearly free; this value keeps the CPU from losing time.
pub const POSITION_COST: f64 = 0.3;
/// The chance a candidate's next draft token is kept, before it has
/// drafted anything, and what its estimate drifts back to while it does
/// not draft (so a candidate that stopped drafting tries again).
pub const PRIOR_KEPT: f64 = 0.7;
/// Weight of the latest draft in a candidate's running estimate of the
/// chance a draft token is kept.
pub const KEPT_UPDATE: f64 = 0.5;
/// How far a candidate's estimate drifts back to [`PRIOR_KEPT`] per step
/// without a lookup draft.
pub const KEPT_DRIFT: f64 = 0.1;
/// Most tokens of a jump-forward draft: forced text is kept unless the
/// model spells it with other tokens, so it may run longer.
pub const FORCED_MAX_DRAFT: usize = 24;
/// Most characters of forced text asked of the grammar matcher per step
/// (a token is rarely more than 8 characters).
pub const FORCED_MAX_CHARS: usize = 4 * FORCED_MAX_DRAFT;
/// The chance a token of a jump-forward draft is kept: the grammar admits
/// nothing else, so it is refused only when the model spells the text with
/// other tokens.
pub const FORCED_KEPT: f64 = 0.95;

/// Which drafts a generation uses (`[engine] prompt_lookup` and
/// `jump_forward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drafts {
    pub prompt_lookup: bool,
    pub jump_forward: bool,
}

impl Drafts {
    /// The most tokens one candidate adds to a batch in a step: its last
    /// sampled token and a draft.
    pub fn most_per_step(&self) -> usize {
        let forced = if self.jump_forward {
            FORCED_MAX_DRAFT
        } else {
            0
        };
        let lookup = if self.prompt_lookup {
            LOOKUP_MAX_DRAFT
        } else {
            0
        };
        1 + forced.max(lookup)
    }
}

/// The draft that prompt lookup proposes after `history` (prompt, then the
/// reply so far): the tokens that followed the latest earlier occurrence of
/// the history's last `n` tokens, for the largest `n` from
/// [`LOOKUP_MAX_NGRAM`] down to [`LOOKUP_MIN_NGRAM`] that occurs; at most
/// `max` tokens. Empty when no run occurs earlier.
pub fn lookup(history: &[LlamaToken], max: usize) -> Vec<LlamaToken> {
    if max == 0 {
        return Vec::new();
    }
    for n in (LOOKUP_MIN_NGRAM..=LOOKUP_MAX_NGRAM).rev() {
        if history.len() <= n {
            continue;
        }
        let tail = &history[history.len() - n..];
        // Latest start before the tail itself whose run is followed by at
        // least one token.
        let found = (0..history.len() - n)
            .rev()
            .find(|&start| &history[start..start + n] == tail);
        if let Some(start) = found {
            let from = start + n;
            let to = (from + max).min(history.len());
            return history[from..to].to_vec();
        }
    }
    Vec::new()
}

/// How many tokens of a prompt-lookup draft are worth evaluating for a
/// candidate whose draft tokens are kept with chance `kept` (each given the
/// ones before it), in a step where `decoding` candidates share the batch.
///
/// A step costs `1 + POSITION_COST × (positions - 1)` single-token steps, so
/// with `B` candidates decoding, one generated token costs
/// `(1 + POSITION_COST × (B - 1)) / B` of a step; the `i`-th draft token
/// is kept with chance `kept^i` and saves that much, and costs
/// `POSITION_COST` to evaluate. Tokens are added while they save more than
/// they cost, at most [`LOOKUP_MAX_DRAFT`].
pub fn lookup_length(kept: f64, decoding: usize) -> usize {
    let b = decoding.max(1) as f64;
    let per_token = (1.0 + POSITION_COST * (b - 1.0)) / b;
    let mut length = 0;
    let mut chance = kept;
    while length < LOOKUP_MAX_DRAFT && chance * per_token > POSITION_COST {
        length += 1;
        chance *= kept;
    }
    length
}

/// The draft length every decoding candidate of a step gets (longer drafts
/// cut, shorter ones padded) so that the step is one forward pass, for
/// candidates whose drafts have `(length, chance a token is kept)` in a
/// step of `rows` sequences (the candidates and any padded between them):
/// of 0 and the drafts' own lengths, the one that generates the most tokens
/// per unit of the step's cost, `1 + POSITION_COST × (positions - 1)`;
/// the shorter among equals.
pub fn common_draft_length(drafts: &[(usize, f64)], rows: usize) -> usize {
    let rate = |d: usize| {
        let gain: f64 = drafts
            .iter()
            .map(|&(len, kept)| {
                let mut chance = 1.0;
                1.0 + (0..len.min(d))
                    .map(|_| {
                        chance *= kept;
                        chance
                    })
                    .sum::<f64>()
            })
            .sum();
        let positions = (rows.max(1) * (1 + d)) as f64;
        gain / (1.0 + POSITION_COST * (positions - 1.0))
    };
    let mut best = 0;
    let mut best_rate = rate(0);
    let mut lengths: Vec<usize> = drafts.iter().map(|&(len, _)| len).collect();
    lengths.sort_unstable();
    lengths.dedup();
    for d in lengths.into_iter().filter(|&d| d > 0) {
        let r = rate(d);
        if r > best_rate {
            best = d;
            best_rate = r;
        }
    }
    best
}

/// What one candidate's drafts did over a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DraftCount {
    /// Draft tokens evaluated.
    pub drafted: usize,
    /// Draft tokens kept (the sampler chose them).
    pub accepted: usize,
}

/// One candidate being decoded: its sampler, what it generated, and the
/// batch positions it is waiting on.
pub struct Decoder {
    sampler: TokenSampler,
    pub tokens: Vec<LlamaToken>,
    pub bytes: Vec<u8>,
    pub stop: Option<Stop>,
    /// Tokens of `tokens` whose keys and values the sequence holds; the one
    /// after them (if any) is evaluated in the next batch.
    in_kv: usize,
    /// Batch index of the first logits this candidate samples from; the
    /// draft's positions follow it (1 + the draft's length in all).
    logits_first: Option<i32>,
    /// The draft in the batch just built, after the last sampled token.
    draft: Vec<LlamaToken>,
    /// The grammar's state after `tokens` (jump-forward), and bytes of an
    /// incomplete UTF-8 character not yet fed to it.
    matcher: Option<Matcher>,
    partial: Vec<u8>,
    /// Running estimate of the chance one of its lookup draft tokens is
    /// kept.
    kept: f64,
    /// Whether the draft in the batch came from prompt lookup (the
    /// estimate learns from those only; forced text is nearly always kept).
    looked_up: bool,
    drafts: Drafts,
    pub count: DraftCount,
}

impl Decoder {
    /// A candidate sampling with `sampler`; `grammar` (parsed) when the
    /// request has one and jump-forward is on.
    pub fn new(sampler: TokenSampler, grammar: Option<&Arc<Grammar>>, drafts: Drafts) -> Self {
        Decoder {
            sampler,
            tokens: Vec::new(),
            bytes: Vec::new(),
            stop: None,
            in_kv: 0,
            logits_first: None,
            draft: Vec::new(),
            matcher: grammar
                .filter(|_| drafts.jump_forward)
                .map(|g| Matcher::new(Arc::clone(g))),
            partial: Vec::new(),
            kept: PRIOR_KEPT,
            looked_up: false,
            drafts,
            count: DraftCount::default(),
        }
    }

    /// Whether the candidate's last token waits to be evaluated.
    pub fn pending(&self) -> bool {
        self.stop.is_none() && self.tokens.len() > self.in_kv
    }

    /// Position of the candidate's pending token in its sequence.
    pub fn pending_pos(&self, prompt_len: usize) -> usize {
        prompt_len + self.in_kv
    }

    /// The tokens this candidate adds to the next batch, from position
    /// [`Self::pending_pos`] on: its pending token, then a draft of at most
    /// `room - 1` tokens that does not run past `max_tokens`, sized for a
    /// step where `decoding` candidates share the batch. `prompt` is the
    /// call's prompt (prompt lookup searches it and the reply).
    pub fn next_batch(
        &mut self,
        model: &LlamaModel,
        prompt: &[LlamaToken],
        room: usize,
        max_tokens: usize,
        decoding: usize,
    ) -> Vec<LlamaToken> {
        let Some(&last) = self.tokens.last() else {
            return Vec::new();
        };
        // Tokens still allowed after the pending one.
        let left = max_tokens.saturating_sub(self.tokens.len());
        let cap = room.saturating_sub(1).min(left);
        let mut draft = Vec::new();
        if let Some(matcher) = &self.matcher {
            let forced = matcher.forced(FORCED_MAX_CHARS);
            if !forced.is_empty() {
                draft = model
                    .vocab()
                    .tokenize(forced.as_bytes(), false, false)
                    .into_iter()
                    .take(FORCED_MAX_DRAFT.min(cap))
                    .collect();
            }
        }
        self.looked_up = false;
        if draft.is_empty() && self.drafts.prompt_lookup {
            let length = lookup_length(self.kept, decoding).min(cap);
            if length > 0 {
                let mut history = Vec::with_capacity(prompt.len() + self.tokens.len());
                history.extend_from_slice(prompt);
                history.extend_from_slice(&self.tokens);
                draft = lookup(&history, length);
                self.looked_up = !draft.is_empty();
            }
            if !self.looked_up {
                self.kept += KEPT_DRIFT * (PRIOR_KEPT - self.kept);
            }
        }
        self.draft = draft;
        let mut out = Vec::with_capacity(1 + self.draft.len());
        out.push(last);
        out.extend_from_slice(&self.draft);
        out
    }

    /// The draft of the batch being built and the chance each of its tokens
    /// is kept (its running estimate for a prompt-lookup draft).
    pub fn draft(&self) -> (usize, f64) {
        let kept = if self.looked_up {
            self.kept
        } else {
            FORCED_KEPT
        };
        (self.draft.len(), kept)
    }

    /// Cuts the draft of the batch being built to `length` tokens.
    pub fn cut_draft(&mut self, length: usize) {
        self.draft.truncate(length);
    }

    /// Where the logits of this candidate's next batch start: the prompt's
    /// last token (first step) or its pending token.
    pub fn set_logits(&mut self, first: i32) {
        self.logits_first = Some(first);
    }

    /// Whether the batch just evaluated holds logits for this candidate.
    pub fn has_logits(&self) -> bool {
        self.logits_first.is_some()
    }

    /// The batch rows this candidate samples from, when the batch just
    /// evaluated holds its logits: the first, and how many (its pending
    /// token's and its draft's).
    pub fn logit_rows(&self) -> Option<(i32, usize)> {
        self.logits_first.map(|first| (first, self.draft.len() + 1))
    }

    /// Samples after a batch from `rows`, the logits of the positions
    /// [`Self::logit_rows`] names: position after position, for as long as
    /// the sampled token is the draft's. Returns how many tokens it
    /// generated and, when part of the draft was not kept (or the candidate
    /// stopped with one in the cache), the index into the reply from which
    /// the sequence's cache must be cleared (`prompt_len + index` on).
    pub fn sample(
        &mut self,
        rows: &[&[f32]],
        model: &LlamaModel,
        max_tokens: usize,
    ) -> (usize, Option<usize>) {
        if self.logits_first.take().is_none() {
            return (0, None);
        }
        if self.stop.is_some() {
            return (0, None);
        }
        // The pending token was in the batch: its keys and values are now.
        if self.tokens.len() > self.in_kv {
            self.in_kv += 1;
        }
        let vocab = model.vocab();
        let draft = std::mem::take(&mut self.draft);
        let mut generated = 0;
        let mut kept = 0;
        for (k, logits) in rows.iter().take(draft.len() + 1).enumerate() {
            if self.tokens.len() >= max_tokens {
                self.stop = Some(Stop::MaxTokens);
                break;
            }
            let token = self.sampler.sample(logits, |t| vocab.is_eog(t));
            if vocab.is_eog(token) {
                self.stop = Some(Stop::EndOfText);
                break;
            }
            self.push(model, token);
            generated += 1;
            if draft.get(k) == Some(&token) {
                // Already evaluated at its position in the batch.
                self.in_kv += 1;
                kept += 1;
            } else {
                break;
            }
        }
        self.count.drafted += draft.len();
        self.count.accepted += kept;
        if self.looked_up && self.stop.is_none() {
            // The tokens checked: the kept ones and the first refused one
            // (a draft kept whole says nothing about the token after it).
            let checked = (kept + usize::from(kept < draft.len())).max(1);
            let rate = kept as f64 / checked as f64;
            self.kept += KEPT_UPDATE * (rate - self.kept);
        }
        let clear = (kept < draft.len()).then_some(self.in_kv);
        (generated, clear)
    }

    fn push(&mut self, model: &LlamaModel, token: LlamaToken) {
        self.tokens.push(token);
        let piece = model.vocab().token_to_piece(token, false, None);
        self.bytes.extend(&piece);
        if let Some(matcher) = &mut self.matcher {
            self.partial.extend(piece);
            let complete = match std::str::from_utf8(&self.partial) {
                Ok(text) => text.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => {
                    // Not UTF-8 at all: the matcher cannot follow.
                    self.matcher = None;
                    return;
                }
            };
            let text = String::from_utf8_lossy(&self.partial[..complete]).into_owned();
            if !matcher.accept(&text) {
                // The two grammar readers disagree: stop guessing rather
                // than guess wrong; the sampler still enforces the grammar.
                tracing::debug!(
                    "jump-forward: the grammar matcher refused {text:?}; off for this candidate"
                );
                self.matcher = None;
                return;
            }
            self.partial.drain(..complete);
        }
    }

    /// How its sampler consulted the grammar.
    pub fn grammar_checks(&self) -> GrammarChecks {
        self.sampler.count
    }

    /// Takes the candidate's result.
    pub fn into_parts(self) -> (Vec<LlamaToken>, Vec<u8>, Stop, DraftCount) {
        (
            self.tokens,
            self.bytes,
            self.stop.unwrap_or(Stop::MaxTokens),
            self.count,
        )
    }
}

/// What sampling one batch's logits did: per candidate (in the order
/// given) the tokens it generated and where its cache must be cleared
/// from ([`Decoder::sample`]), and the seconds it took.
pub struct Sampled {
    pub per_candidate: Vec<(usize, Option<usize>)>,
    pub seconds: f64,
}

/// Samples every candidate of `work` (each with its call's `max_tokens`)
/// whose logits the batch just evaluated in `ctx` holds. The candidates
/// are independent (each its own sampler, grammar and random state), so
/// they are sampled in parallel: the model's threads are idle meanwhile,
/// and on a GPU the sampling of tens of candidates one after another
/// would otherwise take longer than the decoding step itself.
pub fn sample_batch(
    ctx: &LlamaContext<'_>,
    model: &LlamaModel,
    work: Vec<(&mut Decoder, usize)>,
) -> Sampled {
    let started = Instant::now();
    let rows: Vec<Vec<&[f32]>> = work
        .iter()
        .map(|(d, _)| match d.logit_rows() {
            Some((first, n)) => (0..n)
                .map(|k| ctx.get_logits_ith(first + k as i32))
                .collect(),
            None => Vec::new(),
        })
        .collect();
    let sample = |((d, max_tokens), rows): ((&mut Decoder, usize), Vec<&[f32]>)| {
        d.sample(&rows, model, max_tokens)
    };
    let per_candidate = if work.len() > 1 {
        work.into_par_iter().zip(rows).map(sample).collect()
    } else {
        work.into_iter().zip(rows).map(sample).collect()
    };
    Sampled {
        per_candidate,
        seconds: started.elapsed().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ids: &[i32]) -> Vec<LlamaToken> {
        ids.iter().map(|&i| LlamaToken(i)).collect()
    }

    #[test]
    fn lookup_drafts_what_followed_the_latest_longest_match() {
        #[rustfmt::skip]
        let cases: &[(&[i32], usize, &[i32])] = &[
            // The last 2 tokens (3 4) occurred at the start: 5 6 7 follow.
            (&[3, 4, 5, 6, 7, 9, 3, 4], 8, &[5, 6, 7, 9, 3, 4]),
            // Cut to max.
            (&[3, 4, 5, 6, 7, 9, 3, 4], 2, &[5, 6]),
            // The latest occurrence wins: 1 2 is followed by 8 last time.
            (&[1, 2, 5, 1, 2, 8, 0, 1, 2], 1, &[8]),
            // A longer match is preferred over a later shorter one:
            // (7 1 2) occurs at 0, (1 2) alone later at 4.
            (&[7, 1, 2, 3, 1, 2, 4, 7, 1, 2], 1, &[3]),
            // A single token repeated is not enough (n >= 2).
            (&[5, 9, 6, 9], 4, &[]),
            // No history to speak of.
            (&[1, 2], 4, &[]),
            (&[], 4, &[]),
            // max 0: no draft.
            (&[3, 4, 5, 3, 4], 0, &[]),
        ];
        for (history, max, want) in cases {
            assert_eq!(lookup(&t(history), *max), t(want), "{history:?} max {max}");
        }
    }

    #[test]
    fn lookup_drafts_are_as_long_as_they_pay() {
        #[rustfmt::skip]
        let cases = [
            // (chance kept, candidates decoding, tokens drafted)
            (0.95, 1, 8), (0.85, 1, 7), (0.6, 1, 2), (0.35, 1, 1), (0.3, 1, 0),
            (0.95, 4, 8), (0.85, 4, 2), (PRIOR_KEPT, 4, 1), (0.6, 4, 0),
            (0.95, 16, 2), (0.85, 16, 0), (0.0, 1, 0), (1.0, 64, 8),
        ];
        for (kept, decoding, want) in cases {
            assert_eq!(
                lookup_length(kept, decoding),
                want,
                "kept {kept}, {decoding} decoding"
            );
        }
    }

    /// Drafts (length, chance kept), rows of the step, the common length.
    type Case = (&'static [(usize, f64)], usize, usize);

    #[test]
    fn a_step_drafts_one_length_for_all() {
        #[rustfmt::skip]
        let cases: &[Case] = &[
            // (drafts, rows, common length)
            (&[], 1, 0),
            // One candidate: its whole draft when it pays.
            (&[(8, FORCED_KEPT)], 1, 8),
            (&[(4, 0.2)], 1, 0),
            // Sixteen candidates, one with a forced draft: padding the
            // other fifteen costs more than the draft saves.
            (&[(10, FORCED_KEPT), (0, 0.7), (0, 0.7), (0, 0.7), (0, 0.7), (0, 0.7), (0, 0.7),
               (0, 0.7), (0, 0.7), (0, 0.7), (0, 0.7), (0, 0.7), (0, 0.7), (0, 0.7), (0, 0.7),
               (0, 0.7)], 16, 0),
            // Two candidates with sure drafts of 3 and 6: 3 is the best rate.
            (&[(3, 0.99), (6, 0.99)], 2, 3),
            // Rows padded between the candidates make drafting dearer.
            (&[(3, 0.9), (3, 0.9)], 2, 3),
            (&[(3, 0.9), (3, 0.9)], 16, 0),
        ];
        for &(drafts, rows, want) in cases {
            assert_eq!(
                common_draft_length(drafts, rows),
                want,
                "{drafts:?} rows {rows}"
            );
        }
    }

    #[test]
    fn most_tokens_per_step_follow_the_settings() {
        let cases = [
            (false, false, 1),
            (true, false, 1 + LOOKUP_MAX_DRAFT),
            (false, true, 1 + FORCED_MAX_DRAFT),
            (true, true, 1 + FORCED_MAX_DRAFT),
        ];
        for (prompt_lookup, jump_forward, want) in cases {
            let d = Drafts {
                prompt_lookup,
                jump_forward,
            };
            assert_eq!(d.most_per_step(), want, "{d:?}");
        }
    }
}
