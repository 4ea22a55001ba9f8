//! The pure-Rust engine (`[engine] kind = "candle"`): a GGUF model run with
//! candle on the CPU ([`model`]), tokenized with the GGUF's own vocabulary
//! ([`super::tokenizer`]), its prompts rendered with the GGUF's Jinja chat
//! template ([`super::chat`]), behind the same [`Backend`]/[`Conversation`]
//! traits as the llama.cpp engine.
//!
//! A conversation keeps its KV cache ([`model::Cache`]) and the token ids it
//! holds; a call evaluates only the prompt tokens after the longest common
//! prefix (the cache is cut to that prefix with a `narrow`). N candidates
//! decode from copies of the evaluated prompt's cache in one batch, one row
//! per live candidate, a finished candidate's row dropped. Sampling and the
//! grammar's token mask are in [`sample`].
//!
//! One engine computes one call at a time (a mutex around the model's use):
//! conversations of concurrent tasks each keep their own cache, and their
//! calls take turns. There is no scheduler batching calls of different
//! conversations, no prompt-lookup or jump-forward drafts, and no GPU.

pub mod model;
pub mod sample;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use candle_core::quantized::gguf_file;

use self::model::{Cache, Model};
use self::sample::{GrammarState, Sampler, Vocab};
use super::chat::{self, JinjaTemplate};
use super::gbnf::Grammar;
use super::prompt::{without_template_bos, ControlTexts};
use super::tokenizer::GgufTokenizer;
use super::{
    Backend, Candidate, Conversation, EngineError, EngineSettings, Generation, Message, Request,
    Stats, Stop, TraceStep,
};

/// GGUF token type of a control token (`<|im_end|>`), as llama.cpp numbers
/// them (`LLAMA_TOKEN_TYPE_CONTROL`).
pub const TOKEN_TYPE_CONTROL: i32 = 3;

fn candle_err(e: impl std::fmt::Display) -> EngineError {
    EngineError::Candle(e.to_string())
}

/// The vocabulary as the sampler sees it: each token's bytes, read once.
struct Pieces {
    bytes: Vec<Vec<u8>>,
    eog: Vec<bool>,
}

impl Vocab for Pieces {
    fn bytes(&self, token: u32) -> &[u8] {
        self.bytes.get(token as usize).map_or(&[], Vec::as_slice)
    }

    fn is_eog(&self, token: u32) -> bool {
        self.eog.get(token as usize).copied().unwrap_or(false)
    }
}

/// A GGUF model loaded with candle, shared by every conversation of a run.
pub struct CandleEngine {
    model: Model,
    tokenizer: GgufTokenizer,
    pieces: Pieces,
    template: JinjaTemplate,
    /// Texts of the control tokens (see [`Self::render`]).
    control_texts: ControlTexts,
    path: PathBuf,
    context: usize,
    /// Prompt tokens evaluated per forward pass (`[engine] batch`).
    batch: usize,
    /// The threads candle's CPU kernels run on (`[engine] threads`).
    pool: rayon::ThreadPool,
    /// One call computes at a time.
    busy: Mutex<()>,
}

/// The strings of array `key` in a GGUF's metadata.
fn strings(content: &gguf_file::Content, key: &str) -> Vec<String> {
    content
        .metadata
        .get(key)
        .and_then(|v| v.to_vec().ok())
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.to_string().ok().cloned())
                .collect()
        })
        .unwrap_or_default()
}

impl CandleEngine {
    /// Loads the GGUF file at `path` for `settings` (`context`, `threads`,
    /// `batch`, `chat_template`; the GPU and KV settings are llama.cpp's).
    pub fn load(path: &Path, settings: &EngineSettings) -> Result<CandleEngine, EngineError> {
        if settings.batch == 0 {
            return Err(EngineError::Settings(
                "batch = 0: the candle engine evaluates at least 1 prompt token per pass".into(),
            ));
        }
        let started = Instant::now();
        let (content, _) = model::read_content(path).map_err(candle_err)?;
        model::architecture(&content, path).map_err(candle_err)?;
        let tokenizer = GgufTokenizer::from_gguf(path).map_err(|e| EngineError::Load {
            path: path.to_path_buf(),
            message: format!("its tokenizer: {e}"),
        })?;
        let model = Model::load(path).map_err(candle_err)?;
        let vocab = tokenizer.vocab_size();
        let pieces = Pieces {
            bytes: (0..vocab as u32)
                .map(|t| tokenizer.token_bytes(t).unwrap_or_default())
                .collect(),
            eog: (0..vocab as u32).map(|t| tokenizer.is_eog(t)).collect(),
        };
        let types: Vec<i32> = content
            .metadata
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.to_vec().ok())
            .map(|v| v.iter().map(|t| t.to_i32().unwrap_or(0)).collect())
            .unwrap_or_default();
        let texts = strings(&content, "tokenizer.ggml.tokens");
        let control_texts = ControlTexts::new(
            texts
                .iter()
                .zip(&types)
                .filter(|(_, &ty)| ty == TOKEN_TYPE_CONTROL)
                .map(|(text, _)| text.clone()),
        );
        let token_text = |key: &str| {
            content
                .metadata
                .get(key)
                .and_then(|v| v.to_u32().ok())
                .and_then(|id| tokenizer.token_text(id))
                .unwrap_or_default()
                .to_string()
        };
        let (bos, eos) = (
            token_text("tokenizer.ggml.bos_token_id"),
            token_text("tokenizer.ggml.eos_token_id"),
        );
        let chat_err = |source| EngineError::Chat {
            path: path.to_path_buf(),
            source,
        };
        let source = match chat::TemplateSetting::parse(&settings.chat_template) {
            chat::TemplateSetting::Auto => content
                .metadata
                .get("tokenizer.chat_template")
                .and_then(|v| v.to_string().ok())
                .cloned()
                .ok_or_else(|| EngineError::NoTemplate {
                    path: path.to_path_buf(),
                })?,
            chat::TemplateSetting::File(file) => {
                chat::read_template_file(&file).map_err(chat_err)?
            }
            chat::TemplateSetting::Name(name) => {
                return Err(EngineError::Settings(format!(
                    "chat_template = {name:?} names a llama.cpp built-in template, which only kind = \"llama\" renders: with kind = \"candle\" use \"auto\" (the GGUF's own template) or a Jinja template file"
                )))
            }
        };
        let template = JinjaTemplate::new(&source, &bos, &eos).map_err(chat_err)?;
        let trained = model.config.trained_context;
        let context = match settings.context as usize {
            0 => trained,
            c if c > trained => {
                return Err(EngineError::ContextTooLarge {
                    requested: settings.context,
                    trained: u32::try_from(trained).unwrap_or(u32::MAX),
                    model: path.display().to_string(),
                })
            }
            c => c,
        };
        let threads = match settings.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            t => t as usize,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("candle-{i}"))
            .build()
            .map_err(|e| EngineError::Backend(format!("cannot start {threads} threads: {e}")))?;
        tracing::info!(
            "{}: {} layers on the CPU with candle, {threads} threads, context {context}, loaded in {:.1}s",
            path.display(),
            model.config.layers,
            started.elapsed().as_secs_f64()
        );
        Ok(CandleEngine {
            model,
            tokenizer,
            pieces,
            template,
            control_texts,
            path: path.to_path_buf(),
            context,
            batch: settings.batch as usize,
            pool,
            busy: Mutex::new(()),
        })
    }

    /// The model file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Context size in tokens.
    pub fn context_size(&self) -> usize {
        self.context
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &GgufTokenizer {
        &self.tokenizer
    }

    /// Renders messages with the chat template, ready for the assistant's
    /// reply. Control-token texts in message content are broken with a
    /// zero-width space (as the llama.cpp engine does), and a BOS text the
    /// template writes is dropped where tokenizing adds the BOS token.
    pub fn render(&self, messages: &[Message]) -> Result<String, EngineError> {
        let rendered = self
            .template
            .render(&self.control_texts.messages(messages))
            .map_err(|source| EngineError::Chat {
                path: self.path.clone(),
                source,
            })?;
        let bos = self
            .tokenizer
            .bos()
            .and_then(|b| self.tokenizer.token_text(b))
            .unwrap_or_default();
        Ok(without_template_bos(
            rendered,
            bos,
            self.tokenizer.add_bos(),
        ))
    }

    /// The token ids of `text` with special tokens parsed, after the BOS
    /// token where the model asks for one (as llama.cpp tokenizes prompts).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, EngineError> {
        let mut ids = Vec::new();
        if self.tokenizer.add_bos() {
            ids.extend(self.tokenizer.bos());
        }
        ids.extend(
            self.tokenizer
                .encode(text, true)
                .map_err(|e| EngineError::Candle(format!("tokenize a prompt: {e}")))?,
        );
        Ok(ids)
    }

    /// The token ids of `messages` rendered with the chat template.
    pub fn tokenize_messages(&self, messages: &[Message]) -> Result<Vec<u32>, EngineError> {
        self.tokenize(&self.render(messages)?)
    }

    /// Tokens in `messages` once rendered with the chat template.
    pub fn count_tokens(&self, messages: &[Message]) -> Result<usize, EngineError> {
        Ok(self.tokenize_messages(messages)?.len())
    }

    /// Greedy decoding of `n` tokens after `tokens` in a fresh cache, with
    /// each step's top two logits ([`Model::greedy_trace`]).
    pub fn greedy_trace(&self, tokens: &[u32], n: usize) -> Result<Vec<TraceStep>, EngineError> {
        let _busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        self.pool
            .install(|| self.model.greedy_trace(tokens, n, self.batch))
            .map_err(candle_err)
    }

    /// Evaluates `tokens` (one sequence) after `cache`, `batch` at a time;
    /// the logits after the last.
    fn eval(&self, tokens: &[u32], cache: &mut Cache) -> Result<Vec<f32>, EngineError> {
        self.model
            .eval(tokens, cache, self.batch)
            .map_err(candle_err)
    }
}

impl Backend for CandleEngine {
    fn conversation(
        &self,
        n_seq_max: usize,
        reply_tokens: usize,
    ) -> Result<Box<dyn Conversation + '_>, EngineError> {
        Ok(Box::new(CandleConversation {
            engine: self,
            n_seq_max: n_seq_max.max(1),
            reply_tokens,
            cache: self.model.new_cache(),
            cached: Vec::new(),
        }))
    }
}

/// A conversation on the candle engine: its KV cache and the tokens it
/// holds.
pub struct CandleConversation<'e> {
    engine: &'e CandleEngine,
    n_seq_max: usize,
    reply_tokens: usize,
    cache: Cache,
    /// Tokens whose keys and values `cache` holds, in order.
    cached: Vec<u32>,
}

/// One candidate being decoded.
struct Decoding {
    sampler: Sampler,
    grammar: Option<GrammarState>,
    tokens: Vec<u32>,
    bytes: Vec<u8>,
    stop: Option<Stop>,
}

impl CandleConversation<'_> {
    /// Tokens whose keys and values the conversation's cache holds.
    pub fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }

    fn capacity(&self) -> usize {
        self.engine.context + (self.n_seq_max - 1) * self.reply_tokens
    }
}

impl Conversation for CandleConversation<'_> {
    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        let started = Instant::now();
        let engine = self.engine;
        let n = request.n.max(1);
        if n > self.n_seq_max {
            return Err(EngineError::Candle(format!(
                "{n} candidates asked of a conversation made for {}",
                self.n_seq_max
            )));
        }
        let prompt = engine.tokenize_messages(request.messages)?;
        let max_tokens = request.sampling.max_tokens as usize;
        let capacity = self.capacity();
        let reserved = n * max_tokens;
        // Each candidate's positions must also stay within the context
        // (the rotary tables end at the trained context).
        if prompt.len() + reserved > capacity || prompt.len() + max_tokens > engine.context {
            let (reserved, context) = if prompt.len() + reserved > capacity {
                (reserved, capacity)
            } else {
                (max_tokens, engine.context)
            };
            let needed = prompt.len() + reserved;
            return Err(EngineError::TooLong {
                prompt: prompt.len(),
                reserved,
                needed,
                context,
                over: needed - context,
            });
        }
        let grammar = match request.grammar {
            Some(g) => Some(Arc::new(
                Grammar::parse(g).map_err(|e| EngineError::Grammar(e.to_string()))?,
            )),
            None => None,
        };
        let mut decoding: Vec<Decoding> = (0..n)
            .map(|i| Decoding {
                sampler: Sampler {
                    temperature: request
                        .temperatures
                        .as_deref()
                        .and_then(|t| t.get(i).copied())
                        .unwrap_or(request.sampling.temperature),
                    top_p: request.sampling.top_p,
                    min_p: request.sampling.min_p,
                    rng: sample::Rng::new(u64::from(request.sampling.seed.wrapping_add(i as u32))),
                },
                grammar: grammar.clone().map(GrammarState::new),
                tokens: Vec::new(),
                bytes: Vec::new(),
                stop: None,
            })
            .collect();

        let _busy = engine.busy.lock().unwrap_or_else(|e| e.into_inner());
        engine.pool.install(|| {
            let common = super::prompt::reusable_prefix(&prompt, &self.cached);
            self.cache.truncate(common).map_err(candle_err)?;
            self.cached.truncate(common);
            let first = engine.eval(&prompt[common..], &mut self.cache)?;
            self.cached = prompt.clone();
            let prompt_s = started.elapsed().as_secs_f64();

            let decode_started = Instant::now();
            // Rows of the batch: the live candidates, in order.
            let mut rows: Vec<usize> = (0..n).collect();
            let mut batch = if n == 1 {
                self.cache.clone()
            } else {
                self.cache.repeat(n).map_err(candle_err)?
            };
            let mut logits: Vec<Vec<f32>> = vec![first; 1];
            let mut shared_first = true;
            loop {
                // Sample each live candidate's next token.
                let mut feed = Vec::with_capacity(rows.len());
                let mut keep = Vec::with_capacity(rows.len());
                for (r, &i) in rows.iter().enumerate() {
                    let row = if shared_first { &logits[0] } else { &logits[r] };
                    let d = &mut decoding[i];
                    if d.tokens.len() >= max_tokens {
                        d.stop = Some(Stop::MaxTokens);
                    } else {
                        match d.sampler.pick(row, &engine.pieces, d.grammar.as_ref()) {
                            Some(pick) if engine.pieces.is_eog(pick.token) => {
                                d.stop = Some(Stop::EndOfText);
                            }
                            Some(pick) => {
                                d.tokens.push(pick.token);
                                d.bytes.extend_from_slice(engine.pieces.bytes(pick.token));
                                d.grammar = pick.grammar;
                                if d.tokens.len() >= max_tokens {
                                    d.stop = Some(Stop::MaxTokens);
                                }
                            }
                            None => {
                                tracing::warn!(
                                    "candle: the grammar admits no token after {:?}; candidate {i} ends there",
                                    String::from_utf8_lossy(&d.bytes)
                                );
                                d.stop = Some(Stop::EndOfText);
                            }
                        }
                    }
                    if d.stop.is_some() {
                        if i == 0 {
                            // The conversation continues from candidate 0:
                            // keep its row (prompt + the tokens evaluated).
                            let evaluated = batch.len() - prompt.len();
                            self.cache = if n == 1 {
                                batch.clone()
                            } else {
                                batch.select(&[r as u32]).map_err(candle_err)?
                            };
                            self.cached = prompt.clone();
                            self.cached.extend_from_slice(&d.tokens[..evaluated]);
                        }
                    } else {
                        keep.push(r as u32);
                        feed.push(d.tokens.last().copied().unwrap_or(0));
                    }
                }
                shared_first = false;
                if feed.is_empty() {
                    break;
                }
                if keep.len() < rows.len() {
                    batch = batch.select(&keep).map_err(candle_err)?;
                    rows = keep.iter().map(|&r| rows[r as usize]).collect();
                }
                let out = engine
                    .model
                    .forward(&feed, rows.len(), &mut batch)
                    .map_err(candle_err)?;
                logits = (0..rows.len())
                    .map(|r| model::row(&out, r))
                    .collect::<Result<_, _>>()
                    .map_err(candle_err)?;
            }
            let decode_s = decode_started.elapsed().as_secs_f64();
            let candidates: Vec<Candidate> = decoding
                .into_iter()
                .map(|d| Candidate {
                    text: String::from_utf8_lossy(&d.bytes).into_owned(),
                    tokens: d
                        .tokens
                        .iter()
                        .map(|&t| i32::try_from(t).unwrap_or(i32::MAX))
                        .collect(),
                    stop: d.stop.unwrap_or(Stop::MaxTokens),
                })
                .collect();
            Ok(Generation {
                stats: Stats {
                    prompt_tokens: prompt.len(),
                    prompt_tokens_evaluated: prompt.len() - common,
                    prompt_tokens_reused: common,
                    generated_tokens: candidates.iter().map(|c| c.tokens.len()).collect(),
                    draft_tokens: 0,
                    draft_accepted: 0,
                    grammar: Default::default(),
                    prompt_s,
                    decode_s,
                    total_s: started.elapsed().as_secs_f64(),
                },
                candidates,
            })
        })
    }

    fn render(&self, messages: &[Message]) -> Option<String> {
        self.engine.render(messages).ok()
    }

    fn context_size(&self) -> Option<usize> {
        Some(self.engine.context)
    }

    fn count_tokens(&self, messages: &[Message]) -> Result<usize, EngineError> {
        self.engine.count_tokens(messages)
    }
}
