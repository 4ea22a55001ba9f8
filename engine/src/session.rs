//! Sessions: a conversation that keeps its KV cache between calls, and
//! generates N candidates from one evaluated prompt.
//!
//! Sequence 0 holds the conversation: after a call it caches the prompt and
//! candidate 0's reply. A new call evaluates only the tokens after the
//! longest common prefix with that cache and drops the divergent tail. For N
//! candidates the evaluated prompt is copied (shared cells of the unified KV
//! cache, not a memory copy) to sequences 1..N, and all N decode in one
//! batch, one token per live sequence per step; a candidate that finishes
//! leaves the batch.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;

use super::gbnf::Grammar;
use super::speculate::{sample_batch, Decoder, DraftCount, Drafts};
use super::{backend, Candidate, Engine, EngineError, Generation, GrammarChecks, Request, Stats};

/// A conversation with its own KV cache.
pub struct Session<'e> {
    engine: &'e Engine,
    ctx: LlamaContext<'e>,
    n_seq_max: usize,
    /// Tokens whose keys and values sequence 0 holds, in order.
    cached: Vec<LlamaToken>,
}

fn llama(action: &'static str) -> impl Fn(&dyn std::fmt::Display) -> EngineError {
    move |e| EngineError::Llama {
        action,
        message: e.to_string(),
    }
}

impl<'e> Session<'e> {
    /// A session for up to `n_seq_max` candidates per call. Its KV cache
    /// holds the engine's context for the conversation plus `reply_tokens`
    /// for each extra candidate.
    pub fn new(
        engine: &'e Engine,
        n_seq_max: usize,
        reply_tokens: usize,
    ) -> Result<Self, EngineError> {
        let n_seq_max = n_seq_max.max(1);
        let cells = engine.context_size() + (n_seq_max - 1) * reply_tokens;
        let ctx = shared_context(engine, cells, n_seq_max, true)?;
        Ok(Session {
            engine,
            ctx,
            n_seq_max,
            cached: Vec::new(),
        })
    }

    /// The engine the session runs on.
    pub fn engine(&self) -> &'e Engine {
        self.engine
    }

    /// KV cells of the session: the most prompt plus reply tokens of all
    /// candidates one call can hold (llama.cpp rounds the size up).
    pub fn capacity(&self) -> usize {
        self.ctx.n_ctx() as usize
    }

    /// Generates `request.n` candidate replies to `request.messages`.
    pub fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        let started = Instant::now();
        let n = request.n.max(1);
        if n > self.n_seq_max {
            return Err(EngineError::Llama {
                action: "generate",
                message: format!(
                    "{n} candidates asked of a session made for {}",
                    self.n_seq_max
                ),
            });
        }
        let prompt = self.engine.tokenize(&self.engine.render(request.messages)?);
        let max_tokens = request.sampling.max_tokens as usize;
        let capacity = self.capacity();
        let reserved = n * max_tokens;
        if prompt.len() + reserved > capacity {
            let needed = prompt.len() + reserved;
            return Err(EngineError::TooLong {
                prompt: prompt.len(),
                reserved,
                needed,
                context: capacity,
                over: needed - capacity,
            });
        }
        let drafts = self.engine.drafts;
        let grammar = parse_grammar(request.grammar, drafts);
        let mut decoders = (0..n)
            .map(|i| {
                self.engine
                    .token_sampler(
                        &request.sampling,
                        request.temperatures.as_deref(),
                        request.grammar,
                        i,
                    )
                    .map(|s| Decoder::new(s, grammar.as_ref(), drafts))
            })
            .collect::<Result<Vec<_>, _>>()?;

        let common = super::prompt::reusable_prefix(&prompt, &self.cached);
        for seq in 1..self.n_seq_max {
            self.ctx
                .clear_kv_cache_seq(Some(seq as u32), None, None)
                .map_err(|e| llama("clear a sequence")(&e))?;
        }
        self.ctx
            .clear_kv_cache_seq(Some(0), Some(common as u32), None)
            .map_err(|e| llama("drop the divergent tail")(&e))?;
        self.cached.truncate(common);

        let prompt_batch = self.engine.batch;
        let mut batch = LlamaBatch::new(prompt_batch.max(n), i32::try_from(n).unwrap_or(i32::MAX));
        let mut last_index = 0;
        for (chunk_index, chunk) in prompt[common..].chunks(prompt_batch).enumerate() {
            batch.clear();
            for (i, &token) in chunk.iter().enumerate() {
                let pos = common + chunk_index * prompt_batch + i;
                let last = pos + 1 == prompt.len();
                batch
                    .add(token, pos as i32, &[0], last)
                    .map_err(|e| llama("fill a batch")(&e))?;
                if last {
                    last_index = i as i32;
                }
            }
            self.ctx
                .decode(&mut batch)
                .map_err(|e| llama("evaluate the prompt")(&e))?;
        }
        self.cached = prompt.clone();
        for seq in 1..n {
            self.ctx
                .copy_kv_cache_seq(0, seq as i32, None, None)
                .map_err(|e| llama("copy the prompt to a sequence")(&e))?;
        }
        let prompt_s = started.elapsed().as_secs_f64();

        let decode_started = Instant::now();
        let model = &self.engine.model;
        for d in &mut decoders {
            d.set_logits(last_index);
        }
        loop {
            let work = decoders.iter_mut().map(|d| (d, max_tokens)).collect();
            let sampled = sample_batch(&self.ctx, model, work);
            for (i, &(_, clear)) in sampled.per_candidate.iter().enumerate() {
                if let Some(from) = clear {
                    self.ctx
                        .clear_kv_cache_seq(
                            Some(i as u32),
                            Some((prompt.len() + from) as u32),
                            None,
                        )
                        .map_err(|e| llama("drop a rejected draft")(&e))?;
                }
            }
            batch.clear();
            let mut in_batch = 0usize;
            let live = decoders.iter().filter(|d| d.pending()).count();
            for (i, d) in decoders.iter_mut().enumerate() {
                if !d.pending() {
                    continue;
                }
                // Share what the batch holds among the live candidates.
                let room = (prompt_batch / live.max(1)).max(1);
                let pos = d.pending_pos(prompt.len());
                let tokens = d.next_batch(model, &prompt, room, max_tokens, live);
                d.set_logits(in_batch as i32);
                for (k, &token) in tokens.iter().enumerate() {
                    batch
                        .add(token, (pos + k) as i32, &[i as i32], true)
                        .map_err(|e| llama("fill a batch")(&e))?;
                    in_batch += 1;
                }
            }
            if in_batch == 0 {
                break;
            }
            self.ctx
                .decode(&mut batch)
                .map_err(|e| llama("decode")(&e))?;
        }
        let decode_s = decode_started.elapsed().as_secs_f64();

        let mut candidates = Vec::with_capacity(n);
        let mut count = DraftCount::default();
        let mut grammar = GrammarChecks::default();
        for d in decoders {
            grammar.add(d.grammar_checks());
            let (tokens, bytes, stop, c) = d.into_parts();
            count.drafted += c.drafted;
            count.accepted += c.accepted;
            candidates.push(Candidate {
                text: String::from_utf8_lossy(&bytes).into_owned(),
                tokens: tokens.iter().map(|t| t.0).collect(),
                stop,
            });
        }
        // Sequence 0 now also holds candidate 0's reply: the next turn of
        // the conversation starts with it.
        self.cached
            .extend(candidates[0].tokens.iter().map(|&t| LlamaToken(t)));
        Ok(Generation {
            stats: Stats {
                prompt_tokens: prompt.len(),
                prompt_tokens_evaluated: prompt.len() - common,
                prompt_tokens_reused: common,
                generated_tokens: candidates.iter().map(|c| c.tokens.len()).collect(),
                draft_tokens: count.drafted,
                draft_accepted: count.accepted,
                grammar,
                prompt_s,
                decode_s,
                total_s: started.elapsed().as_secs_f64(),
            },
            candidates,
        })
    }
}

/// A request's grammar read by the jump-forward matcher, when jump-forward
/// is on. A grammar the matcher cannot read (llama.cpp's sampler still
/// enforces it) only turns jump-forward off for the call.
pub(crate) fn parse_grammar(grammar: Option<&str>, drafts: Drafts) -> Option<Arc<Grammar>> {
    let grammar = grammar.filter(|_| drafts.jump_forward)?;
    match Grammar::parse(grammar) {
        Ok(g) => Some(Arc::new(g)),
        Err(e) => {
            tracing::debug!("jump-forward off for this call: {e}");
            None
        }
    }
}

/// A context of `cells` KV cells for up to `seqs` sequences, evaluating
/// prompts `[engine] batch` tokens at a time: one cache all sequences share
/// (`unified`), or a stream of `cells / seqs` per sequence.
pub(crate) fn shared_context(
    engine: &Engine,
    cells: usize,
    seqs: usize,
    unified: bool,
) -> Result<LlamaContext<'_>, EngineError> {
    let _guard = engine
        .context_lock
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let params = engine
        .context_params()
        .with_n_ctx(NonZeroU32::new(u32::try_from(cells).unwrap_or(u32::MAX)))
        .with_n_seq_max(u32::try_from(seqs).unwrap_or(u32::MAX))
        .with_kv_unified(unified);
    engine
        .model
        .new_context(backend()?, params)
        .map_err(|e| llama("create a context")(&e))
}
