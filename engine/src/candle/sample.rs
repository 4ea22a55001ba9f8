//! Choosing the next token from a step's logits, as the llama.cpp path's
//! sampler chain does (`session::sampler`): greedy at temperature 0; else
//! nucleus sampling (`top_p` over the untempered distribution), then the
//! temperature, then a seeded draw. A request's grammar masks the tokens
//! it does not admit ([`GrammarState`]).
//!
//! The mask is computed lazily: checking all ~150k tokens against the
//! grammar every step would cost more than the model. Tokens are taken in
//! the sampler's order and the first admitted one wins:
//! - greedy: by logit, highest first;
//! - sampled (`top_p` = 1): a token is drawn from the whole distribution;
//!   a token the grammar refuses is masked and the draw repeated, which
//!   samples exactly from the masked distribution. After
//!   [`MAX_REDRAWS`] refusals every token is checked once instead;
//! - sampled (`top_p` < 1): tokens are checked by probability, highest
//!   first, until the admitted ones hold `top_p` of the admitted mass
//!   counting every unchecked token as admitted; the draw is among them.
//!   Exact when the refused mass is all checked; otherwise the nucleus can
//!   keep a few more tokens than llama.cpp's, never fewer.

use std::cmp::Ordering;
use std::sync::Arc;

use super::super::gbnf::{Grammar, Matcher};

/// Refused draws before a sampled step checks every token against the
/// grammar instead: a grammar that admits a small part of the
/// distribution's mass would otherwise take many draws of O(vocabulary)
/// each.
pub const MAX_REDRAWS: usize = 32;

/// Tokens sorted first when the sampler's order is needed; the rest are
/// sorted only when these are used up (a grammar refusing all of them).
/// A token past the 64 likeliest is rarely the answer.
pub const FIRST_SORTED: usize = 64;

/// Most code points checked for a token that ends inside a UTF-8
/// character (a byte-fallback token): all of them for a 2- or 3-byte
/// character with one byte missing (64 or 4,096), evenly spaced ones for a
/// 4-byte character's lone lead byte.
pub const MAX_PARTIAL_SCAN: u32 = 4096;

/// What a sampler needs of the vocabulary.
pub trait Vocab {
    /// The bytes a token writes (empty for a control token).
    fn bytes(&self, token: u32) -> &[u8];
    /// Whether the token ends generation.
    fn is_eog(&self, token: u32) -> bool;
}

/// A grammar's state after the text generated so far: the matcher, and the
/// bytes of an incomplete UTF-8 character not fed to it yet.
#[derive(Debug, Clone)]
pub struct GrammarState {
    matcher: Matcher,
    partial: Vec<u8>,
}

impl GrammarState {
    /// The start of `grammar`.
    pub fn new(grammar: Arc<Grammar>) -> GrammarState {
        GrammarState {
            matcher: Matcher::new(grammar),
            partial: Vec::new(),
        }
    }

    /// Whether the text so far is a whole match (the end of generation is
    /// admitted).
    pub fn can_end(&self) -> bool {
        self.partial.is_empty() && self.matcher.can_end()
    }

    /// The state after `bytes`, or `None` when the grammar does not admit
    /// them. An incomplete UTF-8 character at the end is admitted when the
    /// grammar allows a code point it can begin (see [`MAX_PARTIAL_SCAN`]).
    pub fn advance(&self, bytes: &[u8]) -> Option<GrammarState> {
        if bytes.is_empty() {
            return None;
        }
        let mut buf = Vec::with_capacity(self.partial.len() + bytes.len());
        buf.extend_from_slice(&self.partial);
        buf.extend_from_slice(bytes);
        let (text, tail) = match std::str::from_utf8(&buf) {
            Ok(text) => (text, &[][..]),
            Err(e) if e.error_len().is_none() => {
                let (head, tail) = buf.split_at(e.valid_up_to());
                (std::str::from_utf8(head).ok()?, tail)
            }
            Err(_) => return None,
        };
        // Cheap refusal first: most tokens fail on their first character.
        if let Some(first) = text.chars().next() {
            if !self.matcher.allows(first) {
                return None;
            }
        }
        let mut matcher = self.matcher.clone();
        if !matcher.accept(text) {
            return None;
        }
        if !tail.is_empty() {
            let (lo, hi) = completions(tail)?;
            let span = hi as u32 - lo as u32;
            // Every code point the prefix can begin, or evenly spaced
            // ones past MAX_PARTIAL_SCAN (a lone 4-byte lead byte).
            let step = (span / MAX_PARTIAL_SCAN).max(1) as usize;
            let admitted = (lo as u32..=hi as u32)
                .step_by(step)
                .chain([hi as u32])
                .filter_map(char::from_u32)
                .any(|c| matcher.allows(c));
            if !admitted {
                return None;
            }
        }
        Some(GrammarState {
            matcher,
            partial: tail.to_vec(),
        })
    }
}

/// The smallest and largest code points whose UTF-8 encoding starts with
/// `prefix` (an incomplete character).
fn completions(prefix: &[u8]) -> Option<(char, char)> {
    let lead = *prefix.first()?;
    let len = match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return None,
    };
    let fill = |byte: u8| {
        let mut b = prefix.to_vec();
        b.resize(len, byte);
        std::str::from_utf8(&b).ok()?.chars().next()
    };
    // The extreme continuation bytes can make an invalid sequence (an
    // overlong or surrogate form); search inwards for a valid one.
    let lo = (0x80..=0xBF).find_map(fill)?;
    let hi = (0x80..=0xBF).rev().find_map(fill)?;
    Some((lo, hi))
}

/// A small seeded generator (SplitMix64): reproducible draws per seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The sampler's order: logit, highest first; ties by token id.
fn by_logit(logits: &[f32]) -> impl Fn(&u32, &u32) -> Ordering + '_ {
    move |&a, &b| {
        let (la, lb) = (logits[a as usize], logits[b as usize]);
        lb.total_cmp(&la).then(a.cmp(&b))
    }
}

/// Token ids in the sampler's order, sorted lazily: the first
/// [`FIRST_SORTED`], then all the rest when asked past them.
struct Order<'a> {
    logits: &'a [f32],
    ids: Vec<u32>,
    sorted: usize,
}

impl<'a> Order<'a> {
    fn new(logits: &'a [f32]) -> Order<'a> {
        Order {
            logits,
            ids: (0..logits.len() as u32).collect(),
            sorted: 0,
        }
    }

    fn get(&mut self, k: usize) -> Option<u32> {
        if k >= self.ids.len() {
            return None;
        }
        if k >= self.sorted {
            let cmp = by_logit(self.logits);
            if self.sorted == 0 && self.ids.len() > FIRST_SORTED {
                self.ids.select_nth_unstable_by(FIRST_SORTED - 1, &cmp);
                self.ids[..FIRST_SORTED].sort_unstable_by(&cmp);
                self.sorted = FIRST_SORTED;
            } else {
                self.ids[self.sorted..].sort_unstable_by(&cmp);
                self.sorted = self.ids.len();
            }
        }
        self.ids.get(k).copied()
    }
}

/// How one candidate picks its tokens.
#[derive(Debug, Clone)]
pub struct Sampler {
    /// 0 or below: greedy.
    pub temperature: f32,
    pub top_p: f32,
    /// Admitted tokens less likely than this fraction of the likeliest
    /// admitted one are never drawn (0: off).
    pub min_p: f32,
    pub rng: Rng,
}

/// The token picked and, under a grammar, the grammar's state after it.
#[derive(Debug)]
pub struct Pick {
    pub token: u32,
    pub grammar: Option<GrammarState>,
}

/// Whether `token` is admitted after `grammar`'s state: its next state
/// (`Some(None)` for an end-of-generation token the grammar lets end), or
/// `None` when refused.
fn admit(
    grammar: Option<&GrammarState>,
    vocab: &dyn Vocab,
    token: u32,
) -> Option<Option<GrammarState>> {
    let Some(state) = grammar else {
        return Some(None);
    };
    if vocab.is_eog(token) {
        return state.can_end().then_some(None);
    }
    state.advance(vocab.bytes(token)).map(Some)
}

impl Sampler {
    /// Greedy decoding.
    pub fn greedy() -> Sampler {
        Sampler {
            temperature: 0.0,
            top_p: 1.0,
            min_p: 0.0,
            rng: Rng::new(0),
        }
    }

    /// Picks the next token from `logits`, admitted by `grammar` when
    /// given. `None` when the grammar admits no token at all.
    pub fn pick(
        &mut self,
        logits: &[f32],
        vocab: &dyn Vocab,
        grammar: Option<&GrammarState>,
    ) -> Option<Pick> {
        if self.temperature <= 0.0 {
            return self.pick_greedy(logits, vocab, grammar);
        }
        if grammar.is_none() || self.top_p < 1.0 || self.min_p > 0.0 {
            return self.pick_nucleus(logits, vocab, grammar);
        }
        self.pick_redraw(logits, vocab, grammar)
    }

    fn pick_greedy(
        &mut self,
        logits: &[f32],
        vocab: &dyn Vocab,
        grammar: Option<&GrammarState>,
    ) -> Option<Pick> {
        if grammar.is_none() {
            let cmp = by_logit(logits);
            let token = (0..logits.len() as u32).min_by(|a, b| cmp(a, b))?;
            return Some(Pick {
                token,
                grammar: None,
            });
        }
        let mut order = Order::new(logits);
        (0..)
            .map_while(|k| order.get(k))
            .filter(|&t| logits[t as usize] > f32::NEG_INFINITY)
            .find_map(|token| admit(grammar, vocab, token).map(|grammar| Pick { token, grammar }))
    }

    /// The nucleus (tokens by probability until `top_p` of the admitted
    /// mass, none below `min_p` times the likeliest admitted one's
    /// probability), then a draw among them at the temperature.
    fn pick_nucleus(
        &mut self,
        logits: &[f32],
        vocab: &dyn Vocab,
        grammar: Option<&GrammarState>,
    ) -> Option<Pick> {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            return None;
        }
        let raw: Vec<f64> = logits.iter().map(|&l| f64::from(l - max).exp()).collect();
        let total: f64 = raw.iter().sum();
        let top_p = f64::from(self.top_p.min(1.0));
        let min_p = f64::from(self.min_p.max(0.0));
        let mut kept: Vec<(u32, Option<GrammarState>)> = Vec::new();
        let mut order = Order::new(logits);
        let (mut admitted, mut visited) = (0.0f64, 0.0f64);
        // No nucleus and no mask: every token, in id order.
        let everything = grammar.is_none() && top_p >= 1.0 && min_p <= 0.0;
        if everything {
            kept = (0..logits.len() as u32).map(|t| (t, None)).collect();
        }
        for k in (0..).take_while(|_| !everything) {
            let Some(token) = order.get(k) else { break };
            let p = raw[token as usize] / total;
            // Tokens come likeliest first: once one is under the floor,
            // every later one is too.
            if let Some(&(likeliest, _)) = kept.first() {
                if p < min_p * raw[likeliest as usize] / total {
                    break;
                }
            }
            visited += p;
            if let Some(state) = admit(grammar, vocab, token) {
                admitted += p;
                kept.push((token, state));
            }
            let unvisited = (1.0 - visited).max(0.0);
            if !kept.is_empty() && top_p < 1.0 && admitted >= top_p * (admitted + unvisited) {
                break;
            }
        }
        if kept.is_empty() {
            return None;
        }
        let weights: Vec<f64> = kept
            .iter()
            .map(|&(t, _)| f64::from((logits[t as usize] - max) / self.temperature).exp())
            .collect();
        let sum: f64 = weights.iter().sum();
        let mut u = self.rng.next_f64() * sum;
        let mut chosen = kept.len() - 1;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                chosen = i;
                break;
            }
            u -= w;
        }
        let (token, grammar) = kept.swap_remove(chosen);
        Some(Pick { token, grammar })
    }

    /// A draw at the temperature from the whole distribution; a refused
    /// token is masked and the draw repeated.
    fn pick_redraw(
        &mut self,
        logits: &[f32],
        vocab: &dyn Vocab,
        grammar: Option<&GrammarState>,
    ) -> Option<Pick> {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            return None;
        }
        let mut weights: Vec<f64> = logits
            .iter()
            .map(|&l| f64::from((l - max) / self.temperature).exp())
            .collect();
        let mut order = Order::new(logits);
        let mut sum: f64 = weights.iter().sum();
        for _ in 0..MAX_REDRAWS {
            if sum <= 0.0 {
                return None;
            }
            let mut u = self.rng.next_f64() * sum;
            let mut drawn = None;
            let mut last = None;
            for k in 0.. {
                let Some(token) = order.get(k) else { break };
                let w = weights[token as usize];
                if w <= 0.0 {
                    continue;
                }
                last = Some(token);
                if u < w {
                    drawn = Some(token);
                    break;
                }
                u -= w;
            }
            // Rounding can leave `u` past the last weight: the last token.
            let token = drawn.or(last)?;
            match admit(grammar, vocab, token) {
                Some(state) => {
                    return Some(Pick {
                        token,
                        grammar: state,
                    })
                }
                None => {
                    sum -= weights[token as usize];
                    weights[token as usize] = 0.0;
                }
            }
        }
        // Too many refusals: check every token once and draw among those
        // admitted.
        let mut kept = Vec::new();
        let mut kept_sum = 0.0;
        for token in 0..logits.len() as u32 {
            let w = weights[token as usize];
            if w <= 0.0 {
                continue;
            }
            if let Some(state) = admit(grammar, vocab, token) {
                kept_sum += w;
                kept.push((token, w, state));
            }
        }
        let mut u = self.rng.next_f64() * kept_sum;
        let mut chosen = kept.len().checked_sub(1)?;
        for (i, (_, w, _)) in kept.iter().enumerate() {
            if u < *w {
                chosen = i;
                break;
            }
            u -= w;
        }
        let (token, _, grammar) = kept.swap_remove(chosen);
        Some(Pick { token, grammar })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary of single characters; token 0 ends generation.
    struct Chars(Vec<Vec<u8>>);

    impl Vocab for Chars {
        fn bytes(&self, token: u32) -> &[u8] {
            self.0.get(token as usize).map_or(&[], |b| b.as_slice())
        }
        fn is_eog(&self, token: u32) -> bool {
            token == 0
        }
    }

    fn vocab(pieces: &[&str]) -> Chars {
        Chars(pieces.iter().map(|p| p.as_bytes().to_vec()).collect())
    }

    fn grammar(src: &str) -> GrammarState {
        GrammarState::new(Arc::new(Grammar::parse(src).unwrap()))
    }

    #[test]
    fn greedy_takes_the_highest_admitted_logit() {
        let v = vocab(&["", "a", "b", "yes", "no", "y"]);
        let logits = [0.5, 3.0, 2.0, 1.0, 0.9, 1.5];
        #[rustfmt::skip]
        let cases: [(Option<&str>, Option<u32>); 5] = [
            (None, Some(1)),
            (Some(r#"root ::= "yes" | "no""#), Some(5)),
            (Some(r#"root ::= "no""#), Some(4)),
            (Some(r#"root ::= "b" "a""#), Some(2)),
            (Some(r#"root ::= "z""#), None),
        ];
        for (g, want) in cases {
            let state = g.map(grammar);
            let got = Sampler::greedy()
                .pick(&logits, &v, state.as_ref())
                .map(|p| p.token);
            assert_eq!(got, want, "{g:?}");
        }
    }

    #[test]
    fn the_end_is_admitted_only_where_the_grammar_can_end() {
        let v = vocab(&["", "a", "b"]);
        // The end token has the highest logit throughout.
        let logits = [9.0, 1.0, 2.0];
        let mut state = grammar(r#"root ::= "a" "b"?"#);
        let mut out = Vec::new();
        loop {
            let pick = Sampler::greedy().pick(&logits, &v, Some(&state)).unwrap();
            if pick.token == 0 {
                break;
            }
            out.push(pick.token);
            state = pick.grammar.unwrap();
        }
        assert_eq!(out, vec![1]);
    }

    #[test]
    fn partial_utf8_is_checked_by_the_characters_it_can_begin() {
        // "é" is C3 A9: split over two tokens.
        let state = grammar(r#"root ::= "é" "x""#);
        let half = state.advance(&[0xC3]).expect("a prefix of é");
        assert!(half.advance(&[0xA9, b'x']).is_some());
        assert!(half.advance(&[0xA8]).is_none(), "è is not admitted");
        assert!(state.advance(&[0xE2]).is_none(), "no 3-byte char admitted");
        assert!(state.advance(b"x").is_none());
        assert!(state.advance(&[0xFF]).is_none(), "not UTF-8");
    }

    #[test]
    fn sampled_picks_follow_the_masked_distribution() {
        let v = vocab(&["", "a", "b", "c", "d"]);
        let logits = [f32::NEG_INFINITY, 0.0, 0.0, (2.0f32).ln(), 5.0];
        // "d" (most of the mass) is refused; a, b, c admitted with weights
        // 1 : 1 : 2 at temperature 1.
        let g = grammar(r#"root ::= [abc]"#);
        for top_p in [1.0, 0.999] {
            let mut sampler = Sampler {
                temperature: 1.0,
                top_p,
                min_p: 0.0,
                rng: Rng::new(7),
            };
            let mut counts = [0usize; 5];
            for _ in 0..4000 {
                let pick = sampler.pick(&logits, &v, Some(&g)).unwrap();
                counts[pick.token as usize] += 1;
            }
            assert_eq!((counts[0], counts[4]), (0, 0), "top_p {top_p}");
            let share = |n: usize| n as f64 / 4000.0;
            assert!((share(counts[1]) - 0.25).abs() < 0.03, "{counts:?}");
            assert!((share(counts[2]) - 0.25).abs() < 0.03, "{counts:?}");
            assert!((share(counts[3]) - 0.5).abs() < 0.03, "{counts:?}");
        }
    }

    #[test]
    fn top_p_keeps_the_nucleus_only() {
        let v = vocab(&["", "a", "b", "c"]);
        // Probabilities about 0.665, 0.245, 0.090 for a, b, c.
        let logits = [f32::NEG_INFINITY, 2.0, 1.0, 0.0];
        #[rustfmt::skip]
        let cases: [(f32, &[u32]); 3] = [(0.5, &[1]), (0.8, &[1, 2]), (1.0, &[1, 2, 3])];
        for (top_p, want) in cases {
            let mut sampler = Sampler {
                temperature: 1.0,
                top_p,
                min_p: 0.0,
                rng: Rng::new(1),
            };
            let mut seen: Vec<u32> = (0..2000)
                .filter_map(|_| sampler.pick(&logits, &v, None).map(|p| p.token))
                .collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen, want, "top_p {top_p}");
        }
    }

    #[test]
    fn min_p_keeps_tokens_near_the_likeliest_admitted_one() {
        let v = vocab(&["", "a", "b", "c", "d"]);
        // Probabilities about 0.61, 0.22, 0.08, 0.08 for d, a, b, c: b and
        // c are 0.37 of a, a is 0.37 of d.
        let logits = [f32::NEG_INFINITY, 1.0, 0.0, 0.0, 2.0];
        let only_abc = grammar(r#"root ::= [abc]"#);
        #[rustfmt::skip]
        let cases: [(f32, bool, &[u32]); 5] = [
            (0.0, false, &[1, 2, 3, 4]),
            (0.3, false, &[1, 4]),
            (0.5, false, &[4]),
            // The floor is cut from the admitted tokens: a is the likeliest.
            (0.3, true, &[1, 2, 3]),
            (0.5, true, &[1]),
        ];
        for (min_p, masked, want) in cases {
            let mut sampler = Sampler {
                temperature: 1.0,
                top_p: 1.0,
                min_p,
                rng: Rng::new(3),
            };
            let g = masked.then_some(&only_abc);
            let mut seen: Vec<u32> = (0..2000)
                .filter_map(|_| sampler.pick(&logits, &v, g).map(|p| p.token))
                .collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen, want, "min_p {min_p}, masked {masked}");
        }
    }

    #[test]
    fn seeded_draws_repeat() {
        let v = vocab(&["", "a", "b", "c"]);
        let logits = [0.0, 1.0, 1.0, 1.0];
        let run = |seed| {
            let mut s = Sampler {
                temperature: 1.0,
                top_p: 1.0,
                min_p: 0.0,
                rng: Rng::new(seed),
            };
            (0..20)
                .map(|_| s.pick(&logits, &v, None).map(|p| p.token))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }
}
