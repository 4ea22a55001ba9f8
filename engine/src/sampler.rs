//! One candidate's choice of its next token from a position's logits, on
//! the llama.cpp path: greedy at temperature 0, else llama.cpp's chain
//! (nucleus and min-p floor over the untempered distribution, the
//! temperature, a seeded draw); under a grammar, **grammar-first**.
//!
//! Masking the vocabulary with llama.cpp's grammar sampler checks every
//! token (151,936 for Qwen) against the grammar: about 15 ms a token on
//! this project's CPU, a third of a 1.5B model's decoding step, paid by
//! every candidate of every step. Grammar-first picks the token from the
//! unconstrained distribution and checks only that token, with the same
//! grammar sampler applied to a one-token array (so the check and the mask
//! are one reader and cannot disagree). Only when the grammar refuses it
//! does the sampler look further:
//! - greedy: the [`CHECKED`] likeliest tokens, in greedy order, are
//!   checked in one call and the first admitted wins; the vocabulary is
//!   masked only when none is;
//! - sampled: the [`CHECKED`] likeliest tokens are checked in one call,
//!   the refused ones are removed, and the draw is repeated (a token
//!   outside them checked alone), at most [`MAX_REDRAWS`] times; then the
//!   vocabulary is masked and the draw made from what is left.
//!
//! The mask itself checks only the tokens that can be admitted
//! ([`FirstBytes`]): a token is admitted only if its first byte alone is
//! (what a grammar admits is closed under prefixes, a partial UTF-8
//! character admitted when one of its completions is), so the 256
//! single-byte tokens are checked first and only the tokens that start
//! with an admitted byte after them. Where the grammar forces a marker or a
//! newline that is a few thousand tokens instead of 151,936.
//!
//! Why it is exact (ARCHITECTURE.md, "Grammar-first sampling"): greedy
//! takes the highest admitted logit, the lowest id among equals, exactly as
//! the mask then argmax does. A draw from `p` that is kept when admitted
//! and otherwise repeated without the refused tokens ends on an admitted
//! `t` with probability `p(t) / Z` (`Z` the admitted mass), the masked
//! distribution: removing refused tokens never changes the odds between
//! admitted ones. With `top_p` < 1 or `min_p` > 0 it is not exact: the
//! nucleus and the min-p floor are cut from the distribution the draw is
//! made from (the whole vocabulary first, without the refused tokens
//! after), where the mask-first chain cuts them from the admitted tokens
//! alone.

use std::cmp::Ordering;
use std::sync::Arc;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
pub use llama_cpp_2::token::LlamaToken;

use super::{EngineError, GrammarChecks, Sampling};

/// Likeliest tokens checked against the grammar in one call once the first
/// pick is refused: the admitted token is almost always among them (a
/// grammar refuses a few spellings, not the model's whole top), and one
/// call over 32 tokens costs about what a few single checks do.
pub const CHECKED: usize = 32;

/// Redraws of a sampled candidate, after its likeliest refused tokens are
/// removed, before the whole vocabulary is masked: each costs a pass over
/// the vocabulary (the draw itself), about a twentieth of a mask.
pub const MAX_REDRAWS: usize = 4;

/// The vocabulary by the first byte of each token's text (as llama.cpp's
/// grammar reads it: control tokens by their text), built once per model:
/// what the grammar mask needs to check only the tokens that can pass.
#[derive(Debug, Default)]
pub struct FirstBytes {
    /// The token whose text is exactly this byte, where there is one.
    single: Vec<Option<i32>>,
    /// Tokens whose text starts with this byte.
    starting: Vec<Vec<u32>>,
    /// End-of-generation tokens (admitted by whether the grammar can end,
    /// whatever their text).
    eog: Vec<u32>,
}

impl FirstBytes {
    pub fn of(model: &LlamaModel) -> FirstBytes {
        let vocab = model.vocab();
        let mut index = FirstBytes {
            single: vec![None; 256],
            starting: vec![Vec::new(); 256],
            eog: Vec::new(),
        };
        for id in 0..vocab.n_tokens() {
            let token = LlamaToken(id);
            if vocab.is_eog(token) {
                index.eog.push(id as u32);
                continue;
            }
            let piece = vocab.token_to_piece(token, true, None);
            // An empty text or one starting with NUL is never admitted.
            let Some(&first) = piece.first().filter(|&&b| b != 0) else {
                continue;
            };
            index.starting[usize::from(first)].push(id as u32);
            if piece.len() == 1 && index.single[usize::from(first)].is_none() {
                index.single[usize::from(first)] = Some(id);
            }
        }
        index
    }

    /// Tokens the grammar may admit: the end-of-generation tokens, and
    /// those starting with a byte whose single-byte token `admits` (or
    /// that has none).
    fn candidates(&self, mut admits: impl FnMut(&[u32]) -> Vec<bool>) -> Vec<u32> {
        let singles: Vec<u32> = self.single.iter().flatten().map(|&t| t as u32).collect();
        let admitted = admits(&singles);
        let mut open = vec![false; 256];
        for (b, t) in self.single.iter().enumerate() {
            open[b] = match t {
                None => true,
                Some(t) => singles
                    .iter()
                    .position(|&s| s == *t as u32)
                    .is_some_and(|k| admitted[k]),
            };
        }
        let mut out = self.eog.clone();
        for (b, tokens) in self.starting.iter().enumerate() {
            if open[b] {
                out.extend_from_slice(tokens);
            }
        }
        out
    }
}

/// How a candidate picks its tokens: the grammar (if any), and greedy or
/// llama.cpp's sampling chain.
pub struct TokenSampler {
    grammar: Option<LlamaSampler>,
    /// The vocabulary by first byte, for the mask.
    first_bytes: Arc<FirstBytes>,
    /// `None`: greedy.
    chain: Option<LlamaSampler>,
    /// Whether a grammar is checked first (the default) or masks every
    /// token (`[engine] grammar_first = false`, the reference path).
    first: bool,
    /// The whole vocabulary's logits, reused between picks.
    all: LlamaTokenDataArray,
    pub count: GrammarChecks,
}

impl TokenSampler {
    /// Candidate `i`'s sampler for a request: `grammar` (GBNF, rule
    /// `root`) when given, then greedy at temperature 0 (the candidate's
    /// own from `temperatures`, else the request's), else the chain seeded
    /// with `seed + i`.
    pub fn new(
        model: &LlamaModel,
        first_bytes: &Arc<FirstBytes>,
        sampling: &Sampling,
        temperatures: Option<&[f32]>,
        grammar: Option<&str>,
        i: usize,
        first: bool,
    ) -> Result<TokenSampler, EngineError> {
        let temperature = temperatures
            .and_then(|t| t.get(i).copied())
            .unwrap_or(sampling.temperature);
        let grammar = grammar
            .map(|g| {
                LlamaSampler::grammar(model, g, "root")
                    .map_err(|e| EngineError::Grammar(e.to_string()))
            })
            .transpose()?;
        let chain = (temperature > 0.0).then(|| {
            LlamaSampler::chain_simple([
                LlamaSampler::top_p(sampling.top_p, 1),
                LlamaSampler::min_p(sampling.min_p, 1),
                LlamaSampler::temp(temperature),
                LlamaSampler::dist(sampling.seed.wrapping_add(i as u32)),
            ])
        });
        Ok(TokenSampler {
            grammar,
            first_bytes: Arc::clone(first_bytes),
            chain,
            first,
            all: LlamaTokenDataArray::new(Vec::new(), false),
            count: GrammarChecks::default(),
        })
    }

    /// Picks the next token from one position's `logits` and advances the
    /// grammar past it (an end-of-generation token ends the candidate and
    /// is not fed to it).
    pub fn sample(&mut self, logits: &[f32], is_eog: impl Fn(LlamaToken) -> bool) -> LlamaToken {
        let token = match self.grammar.is_some() {
            false => self.unconstrained(logits),
            true => {
                self.count.checked += 1;
                if self.first {
                    self.grammar_first(logits)
                } else {
                    self.masked(logits)
                }
            }
        };
        if let Some(chain) = &mut self.chain {
            chain.accept(token);
        }
        if let Some(grammar) = &mut self.grammar {
            if !is_eog(token) {
                grammar.accept(token);
            }
        }
        token
    }

    /// The pick without a grammar.
    fn unconstrained(&mut self, logits: &[f32]) -> LlamaToken {
        if self.chain.is_none() {
            return LlamaToken(argmax(logits));
        }
        self.fill(logits, &[]);
        self.draw()
    }

    fn grammar_first(&mut self, logits: &[f32]) -> LlamaToken {
        let first = self.unconstrained(logits);
        if self.admits(first) {
            return first;
        }
        self.count.refused += 1;
        let likeliest = likeliest(logits, CHECKED);
        let admitted = self.admitted(&likeliest, logits);
        if self.chain.is_none() {
            // Greedy order: the first admitted of the likeliest is the
            // highest admitted logit of the whole vocabulary.
            if let Some(&t) = likeliest
                .iter()
                .zip(&admitted)
                .find(|(_, &a)| a)
                .map(|(t, _)| t)
            {
                return LlamaToken(t as i32);
            }
            return self.masked(logits);
        }
        let mut refused: Vec<u32> = likeliest
            .iter()
            .zip(&admitted)
            .filter(|(_, &a)| !a)
            .map(|(&t, _)| t)
            .collect();
        if !refused.contains(&(first.0 as u32)) {
            refused.push(first.0 as u32);
        }
        for _ in 0..MAX_REDRAWS {
            self.fill(logits, &refused);
            let t = self.draw();
            let known = likeliest.iter().position(|&l| l == t.0 as u32);
            // A token of the likeliest that is still drawable was admitted.
            if known.is_some() || self.admits(t) {
                return t;
            }
            refused.push(t.0 as u32);
        }
        self.masked(logits)
    }

    /// The pick from the vocabulary masked by the grammar: with
    /// grammar-first, only the tokens [`FirstBytes`] leaves are checked;
    /// the reference path checks them all, as llama.cpp's grammar sampler
    /// in a chain does.
    fn masked(&mut self, logits: &[f32]) -> LlamaToken {
        self.count.masked += 1;
        if self.first {
            let first_bytes = Arc::clone(&self.first_bytes);
            let candidates = first_bytes.candidates(|t| self.admitted(t, logits));
            let admitted = self.admitted(&candidates, logits);
            let data = &mut self.all.data;
            data.clear();
            data.extend(
                (0..logits.len())
                    .map(|i| LlamaTokenData::new(LlamaToken(i as i32), f32::NEG_INFINITY, 0.0)),
            );
            for (&t, _) in candidates.iter().zip(&admitted).filter(|(_, &a)| a) {
                if let (Some(d), Some(&l)) = (data.get_mut(t as usize), logits.get(t as usize)) {
                    d.set_logit(l);
                }
            }
            self.all.selected = None;
            self.all.sorted = false;
        } else {
            self.fill(logits, &[]);
            if let Some(grammar) = &mut self.grammar {
                grammar.apply(&mut self.all);
            }
        }
        match &mut self.chain {
            Some(_) => self.draw(),
            None => {
                // llama.cpp's greedy sampler: the first highest logit.
                let mut best = 0;
                for (i, d) in self.all.data.iter().enumerate() {
                    if d.logit() > self.all.data[best].logit() {
                        best = i;
                    }
                }
                self.all
                    .data
                    .get(best)
                    .map_or(LlamaToken(0), LlamaTokenData::id)
            }
        }
    }

    /// The whole vocabulary's logits in `self.all`, `refused` ones at
    /// minus infinity.
    fn fill(&mut self, logits: &[f32], refused: &[u32]) {
        let data = &mut self.all.data;
        data.clear();
        data.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| LlamaTokenData::new(LlamaToken(i as i32), l, 0.0)),
        );
        for &t in refused {
            if let Some(d) = data.get_mut(t as usize) {
                d.set_logit(f32::NEG_INFINITY);
            }
        }
        self.all.selected = None;
        self.all.sorted = false;
    }

    /// The chain's draw from `self.all`.
    fn draw(&mut self) -> LlamaToken {
        if let Some(chain) = &mut self.chain {
            chain.apply(&mut self.all);
        }
        self.all.selected_token().unwrap_or(LlamaToken(0))
    }

    /// Whether the grammar admits `token` next.
    fn admits(&mut self, token: LlamaToken) -> bool {
        self.admitted(&[token.0 as u32], &[]).first() == Some(&true)
    }

    /// Which of `tokens` the grammar admits next (in one call).
    fn admitted(&mut self, tokens: &[u32], logits: &[f32]) -> Vec<bool> {
        let Some(grammar) = &mut self.grammar else {
            return vec![true; tokens.len()];
        };
        let mut some = LlamaTokenDataArray::new(
            tokens
                .iter()
                .map(|&t| {
                    let logit = logits.get(t as usize).copied().unwrap_or(0.0);
                    LlamaTokenData::new(LlamaToken(t as i32), logit, 0.0)
                })
                .collect(),
            false,
        );
        grammar.apply(&mut some);
        some.data
            .iter()
            .map(|d| d.logit() != f32::NEG_INFINITY)
            .collect()
    }
}

/// llama.cpp's greedy pick: the highest logit, the first among equals.
pub fn argmax(logits: &[f32]) -> i32 {
    let mut best = 0usize;
    for (i, &l) in logits.iter().enumerate().skip(1) {
        if l > logits[best] {
            best = i;
        }
    }
    best as i32
}

/// The `k` likeliest tokens in greedy order: highest logit first, the
/// lower id first among equals.
pub fn likeliest(logits: &[f32], k: usize) -> Vec<u32> {
    let mut top: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
    for (i, &l) in logits.iter().enumerate() {
        if k == 0 || (top.len() == k && l.partial_cmp(&top[k - 1].0) != Some(Ordering::Greater)) {
            continue;
        }
        // After every kept logit at least as high (earlier ids first).
        let at = top.partition_point(|&(kept, _)| kept.partial_cmp(&l) != Some(Ordering::Less));
        top.insert(at, (l, i as u32));
        top.truncate(k);
    }
    top.into_iter().map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_first_highest() {
        let cases: [(&[f32], i32); 5] = [
            (&[0.0, 2.0, 1.0], 1),
            (&[3.0, 3.0, 1.0], 0),
            (&[1.0, 2.0, 2.0], 1),
            (&[f32::NEG_INFINITY, -1.0], 1),
            (&[5.0], 0),
        ];
        for (logits, want) in cases {
            assert_eq!(argmax(logits), want, "{logits:?}");
        }
    }

    #[test]
    fn likeliest_is_greedy_order() {
        #[rustfmt::skip]
        let cases: [(&[f32], usize, &[u32]); 6] = [
            (&[0.0, 2.0, 1.0, 3.0], 2, &[3, 1]),
            (&[0.0, 2.0, 1.0, 3.0], 9, &[3, 1, 2, 0]),
            // Equal logits: the lower id first, at the cut too.
            (&[1.0, 2.0, 2.0, 2.0], 2, &[1, 2]),
            (&[2.0, 1.0, 2.0, 1.0], 3, &[0, 2, 1]),
            (&[f32::NEG_INFINITY, 0.5], 1, &[1]),
            (&[1.0, 2.0], 0, &[]),
        ];
        for (logits, k, want) in cases {
            assert_eq!(likeliest(logits, k), want, "{logits:?} k {k}");
            // Its first is the greedy pick.
            if k > 0 {
                assert_eq!(likeliest(logits, k)[0] as i32, argmax(logits));
            }
        }
    }
}
