//! The engine: a GGUF model loaded in-process through llama.cpp
//! (`llama-cpp-2`), turning chat messages into completions; also the
//! pure-Rust candle engine ([`candle`]) and inference servers ([`http`]).
//! Everything of patchwright that touches llama.cpp or candle is in this
//! crate; the data its callers record are `patchwright-engine-types`,
//! re-exported here.
//!
//! The model is loaded once and shared. [`Engine::complete`] is the plain
//! path: one reply in a fresh context. A [`Session`] keeps its KV cache
//! across calls and decodes N candidates from one evaluated prompt; a request
//! may carry a GBNF grammar ([`grammar`] builds the common ones). Prompts are
//! rendered with the chat template stored in the model's metadata.

pub mod bench;
pub mod candle;
pub mod chat;
pub mod gbnf;
pub use patchwright_engine_types::gguf;
pub mod grammar;
pub mod http;
pub mod placement;
pub mod prompt;
pub mod sampler;
pub mod scheduler;
mod session;
mod setup;
pub mod speculate;
pub mod split;
pub mod tokenizer;

pub use patchwright_engine_types::{
    Candidate, Completion, Generation, GrammarChecks, Load, Message, Request, Sampling, Stats, Stop,
};
pub use placement::{
    context_within_budget, gpus, kv_budgets, kv_bytes_per_token, plan, plan_layers, Device,
    FlashAttn, GpuLayers, KvBudget, KvType, Placement, Plan, SplitMode, AUTO_LAYERS_CONTEXT,
    GPU_HEADROOM_BYTES, GPU_KV_FRACTION, KV_BUDGET_BYTES, SCHEDULER_KV_BUDGET_BYTES,
};
pub use scheduler::{serve, Scheduler, Slots};
pub use session::Session;
pub use setup::{EngineError, EngineKind, EngineSettings};
pub use tokenizer::{ChatTokenizer, GgufTokenizer, LlamaTokenizer, TokenizerError};

/// Log filter directives that show llama.cpp's messages (the
/// `llama-cpp-2` crate's tracing targets) from `level` up.
pub fn llama_log_directives(level: &str) -> String {
    format!("llama_cpp_2={level},llama-cpp-2={level}")
}

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::{LlamaModelParams, LlamaSplitMode};
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;

use crate::gguf::KvShape;
use crate::prompt::{without_template_bos, ControlTexts};
use crate::setup::backend;

/// One step of a greedy decoding with the two highest logits, for
/// comparing two engines on the same tokens (`greedy_trace`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceStep {
    /// The token chosen: the highest logit, the lowest id among equals.
    pub token: u32,
    /// Its logit.
    pub top1: f32,
    /// The second-highest logit.
    pub top2: f32,
}

impl TraceStep {
    /// The greedy step over `logits`.
    pub fn of(logits: &[f32]) -> TraceStep {
        let mut best = (0u32, f32::NEG_INFINITY);
        let mut second = f32::NEG_INFINITY;
        for (i, &l) in logits.iter().enumerate() {
            if l > best.1 {
                second = best.1;
                best = (i as u32, l);
            } else if l > second {
                second = l;
            }
        }
        TraceStep {
            token: best.0,
            top1: best.1,
            top2: second,
        }
    }

    /// The gap between the two highest logits.
    pub fn gap(&self) -> f32 {
        self.top1 - self.top2
    }
}

/// Something that answers requests: the model in this process, or a server.
pub trait Backend: Sync {
    /// A conversation that can ask for up to `n_seq_max` candidates of at
    /// most `reply_tokens` tokens per call.
    fn conversation(
        &self,
        n_seq_max: usize,
        reply_tokens: usize,
    ) -> Result<Box<dyn Conversation + '_>, EngineError>;

    /// Where the model's layers went; `None` for a server or a replay.
    fn placement(&self) -> Option<&Placement> {
        None
    }
}

/// A sequence of calls sharing what the backend can keep between them (the
/// embedded engine keeps the KV cache).
pub trait Conversation {
    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError>;

    /// `messages` as the model reads them (its chat template applied), for
    /// the trajectory; `None` when the backend does not know (a server).
    fn render(&self, _messages: &[Message]) -> Option<String> {
        None
    }

    /// The context a prompt and its reply must fit in, in tokens; `None`
    /// when the backend does not know (a server, a replay).
    fn context_size(&self) -> Option<usize> {
        None
    }

    /// Tokens of `messages` once rendered with the chat template; an
    /// [`EngineError::Unsupported`] error when the backend cannot count them
    /// (a server, a replay).
    fn count_tokens(&self, _messages: &[Message]) -> Result<usize, EngineError> {
        Err(EngineError::Unsupported {
            what: "count a prompt's tokens",
        })
    }
}

impl Backend for Engine {
    fn conversation(
        &self,
        n_seq_max: usize,
        reply_tokens: usize,
    ) -> Result<Box<dyn Conversation + '_>, EngineError> {
        Ok(Box::new(Session::new(self, n_seq_max, reply_tokens)?))
    }

    fn placement(&self) -> Option<&Placement> {
        Some(&self.placement)
    }
}

impl Conversation for Session<'_> {
    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        Session::generate(self, request)
    }

    fn render(&self, messages: &[Message]) -> Option<String> {
        self.engine().render(messages).ok()
    }

    fn context_size(&self) -> Option<usize> {
        Some(self.engine().context_size())
    }

    fn count_tokens(&self, messages: &[Message]) -> Result<usize, EngineError> {
        self.engine().count_tokens(messages)
    }
}

/// Checks that a prompt of `prompt` tokens leaves room for `reserved` in a
/// context of `context` tokens.
pub fn check_fits(prompt: usize, reserved: usize, context: usize) -> Result<(), EngineError> {
    let needed = prompt + reserved;
    if needed > context {
        return Err(EngineError::TooLong {
            prompt,
            reserved,
            needed,
            context,
            over: needed - context,
        });
    }
    Ok(())
}

/// How messages become the prompt text.
enum ChatFormat {
    /// llama.cpp's built-in rendering of a template it recognises.
    Llama(LlamaChatTemplate),
    /// A Jinja template rendered with minijinja ([`chat`]).
    Jinja(Box<chat::JinjaTemplate>),
}

/// A loaded model, shared by every task of a run.
pub struct Engine {
    pub(crate) model: LlamaModel,
    template: ChatFormat,
    /// Texts of the vocabulary's control tokens (`<|im_end|>`, ...), which
    /// message content must not be able to produce.
    control_texts: ControlTexts,
    path: PathBuf,
    context: u32,
    pub(crate) threads: i32,
    /// Prompt tokens per `decode` call (`[engine] batch`).
    pub(crate) batch: usize,
    pub(crate) ubatch: u32,
    placement: Placement,
    /// Which drafts decoding uses (`prompt_lookup`, `jump_forward`).
    pub(crate) drafts: speculate::Drafts,
    /// Whether a grammar is checked after the pick (`grammar_first`).
    pub(crate) grammar_first: bool,
    /// The vocabulary by first byte, built on the first grammar's use.
    first_bytes: OnceLock<Arc<sampler::FirstBytes>>,
    /// llama.cpp's context creation is not safe to run concurrently.
    pub(crate) context_lock: Mutex<()>,
}

/// Checks the settings that do not depend on the model or the device.
fn check_settings(settings: &EngineSettings) -> Result<(), EngineError> {
    if settings.batch == 0 || settings.ubatch == 0 {
        return Err(EngineError::Settings(format!(
            "batch = {} and ubatch = {} must both be at least 1",
            settings.batch, settings.ubatch
        )));
    }
    if settings.ubatch > settings.batch {
        return Err(EngineError::Settings(format!(
            "ubatch = {} is larger than batch = {}: a compute step cannot hold more tokens than the batch it splits (lower ubatch or raise batch)",
            settings.ubatch, settings.batch
        )));
    }
    if settings.kv_type != KvType::F16 && settings.flash_attn == FlashAttn::Off {
        return Err(EngineError::Settings(format!(
            "kv_type = \"{}\" needs flash attention (llama.cpp cannot store a quantised V cache without it), but flash_attn = \"off\": set flash_attn = \"auto\" or \"on\", or kv_type = \"f16\"",
            settings.kv_type.name()
        )));
    }
    Ok(())
}

impl Engine {
    /// Loads the GGUF file at `path` with `settings`: offloads the layers
    /// `gpu_layers` asks for (see [`plan_layers`]), sizes the KV budget
    /// ([`kv_budgets`]) and the context.
    pub fn load(path: &Path, settings: &EngineSettings) -> Result<Engine, EngineError> {
        check_settings(settings)?;
        let backend = backend()?;
        let plan = plan(path, settings)?;
        let split = match settings.split_mode {
            SplitMode::None => LlamaSplitMode::None,
            SplitMode::Layer => LlamaSplitMode::Layer,
            SplitMode::Row => LlamaSplitMode::Row,
        };
        let model_params = LlamaModelParams::default()
            .with_n_gpu_layers(plan.offload)
            .with_main_gpu(i32::try_from(settings.main_gpu).unwrap_or(i32::MAX))
            .with_split_mode(split);
        let model = LlamaModel::load_from_file(backend, path, &model_params).map_err(|e| {
            EngineError::Load {
                path: path.to_path_buf(),
                message: e.to_string(),
            }
        })?;
        let template = chat_format(&model, path, &settings.chat_template)?;
        let vocab = model.vocab();
        let control_texts = ControlTexts::new(
            vocab
                .tokens()
                .filter(|&t| vocab.is_control(t))
                .filter_map(|t| vocab.text(t).map(|c| c.to_string_lossy().into_owned())),
        );
        let trained = model.n_ctx_train();
        let shape = plan.shape.unwrap_or_else(|| {
            KvShape::from_dims(
                model.n_layer(),
                u32::try_from(model.n_embd()).unwrap_or(0),
                model.n_head(),
                model.n_head_kv(),
            )
        });
        let placement = plan.placement(&shape, settings);
        let (per_token, kv_budget) = (placement.kv_bytes_per_token, placement.kv_budget);
        let context = match settings.context {
            0 => context_within_budget(trained, per_token, kv_budget),
            c if c > trained => {
                return Err(EngineError::ContextTooLarge {
                    requested: c,
                    trained,
                    model: path.display().to_string(),
                })
            }
            c => c,
        };
        let threads = match settings.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            t => t as usize,
        };
        tracing::info!(
            "{}: {}/{} layers on {}, KV cache {} ({} bytes/token, budget {:.1} GiB)",
            path.display(),
            placement.gpu_layers,
            placement.layers,
            if placement.devices.is_empty() {
                "the CPU".to_string()
            } else {
                placement
                    .devices
                    .iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            placement.kv_type.name(),
            per_token,
            kv_budget as f64 / f64::from(1u32 << 30)
        );
        Ok(Engine {
            model,
            template,
            control_texts,
            path: path.to_path_buf(),
            context,
            threads: i32::try_from(threads).unwrap_or(i32::MAX),
            batch: settings.batch as usize,
            ubatch: settings.ubatch,
            placement,
            drafts: speculate::Drafts {
                prompt_lookup: settings.prompt_lookup,
                jump_forward: settings.jump_forward,
            },
            grammar_first: settings.grammar_first,
            first_bytes: OnceLock::new(),
            context_lock: Mutex::new(()),
        })
    }

    /// Context parameters every context of this engine shares: batch
    /// sizes, threads, flash attention and the KV cache's type.
    pub(crate) fn context_params(&self) -> LlamaContextParams {
        let kv = placement::kv_cache_type(self.placement.kv_type);
        LlamaContextParams::default()
            .with_n_batch(u32::try_from(self.batch).unwrap_or(u32::MAX))
            .with_n_ubatch(self.ubatch)
            .with_n_threads(self.threads)
            .with_n_threads_batch(self.threads)
            .with_flash_attention_policy(placement::flash_attn_type(self.placement.flash_attn))
            .with_type_k(kv)
            .with_type_v(kv)
    }

    /// Where the layers went, and the KV cache's type and budgets.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Context size in tokens.
    pub fn context_size(&self) -> usize {
        self.context as usize
    }

    /// Bytes of KV cache one token takes (keys and values in `kv_type`).
    pub fn kv_bytes_per_token(&self) -> u64 {
        self.placement.kv_bytes_per_token
    }

    /// Renders messages with the model's chat template, ready for the
    /// assistant's reply.
    pub fn render(&self, messages: &[Message]) -> Result<String, EngineError> {
        let template_err = |message: String| EngineError::Template {
            path: self.path.clone(),
            message,
        };
        match &self.template {
            ChatFormat::Llama(template) => {
                let chat = messages
                    .iter()
                    .map(|m| {
                        LlamaChatMessage::new(
                            m.role.clone(),
                            self.control_texts.neutralise(&m.content),
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| template_err(e.to_string()))?;
                self.model
                    .apply_chat_template(template, &chat, true)
                    .map_err(|e| template_err(e.to_string()))
            }
            ChatFormat::Jinja(template) => {
                let rendered = template
                    .render(&self.control_texts.messages(messages))
                    .map_err(|source| EngineError::Chat {
                        path: self.path.clone(),
                        source,
                    })?;
                let vocab = self.model.vocab();
                Ok(without_template_bos(
                    rendered,
                    &token_text(&self.model, vocab.bos()),
                    vocab.should_add_bos(),
                ))
            }
        }
    }

    pub(crate) fn tokenize(&self, text: &str) -> Vec<LlamaToken> {
        self.model.vocab().tokenize(text.as_bytes(), true, true)
    }

    /// The token ids of `messages` rendered with the chat template.
    pub fn tokenize_messages(&self, messages: &[Message]) -> Result<Vec<i32>, EngineError> {
        Ok(self
            .tokenize(&self.render(messages)?)
            .iter()
            .map(|t| t.0)
            .collect())
    }

    /// The token whose text is exactly `piece`, if the vocabulary has one.
    pub fn token_of(&self, piece: &str) -> Option<i32> {
        let vocab = self.model.vocab();
        match vocab.tokenize(piece.as_bytes(), false, false).as_slice() {
            [one] if vocab.token_to_piece(*one, false, None) == piece.as_bytes() => Some(one.0),
            _ => None,
        }
    }

    /// Tokens in the vocabulary (the length of a position's logits).
    pub fn vocab_size(&self) -> usize {
        self.model.vocab().n_tokens() as usize
    }

    /// A candidate's sampler with this engine's settings: what
    /// [`Session`] and the scheduler give candidate 0 of a request with
    /// `sampling` and `grammar` (a test's way to sample given logits).
    pub fn sampler(
        &self,
        sampling: &Sampling,
        grammar: Option<&str>,
    ) -> Result<sampler::TokenSampler, EngineError> {
        self.token_sampler(sampling, None, grammar, 0)
    }

    /// Candidate `i`'s sampler ([`sampler::TokenSampler::new`]): `grammar`
    /// checked first unless `[engine] grammar_first` is off, then greedy
    /// at temperature 0, else the chain at its temperature (the
    /// candidate's own from `temperatures`) seeded with `seed + i`.
    pub(crate) fn token_sampler(
        &self,
        sampling: &Sampling,
        temperatures: Option<&[f32]>,
        grammar: Option<&str>,
        i: usize,
    ) -> Result<sampler::TokenSampler, EngineError> {
        let first_bytes = self
            .first_bytes
            .get_or_init(|| Arc::new(sampler::FirstBytes::of(&self.model)));
        sampler::TokenSampler::new(
            &self.model,
            first_bytes,
            sampling,
            temperatures,
            grammar,
            i,
            self.grammar_first,
        )
    }

    /// Whether `token` ends generation.
    pub fn is_eog(&self, token: i32) -> bool {
        self.model.vocab().is_eog(LlamaToken(token))
    }

    /// Tokens in `messages` once rendered with the chat template.
    pub fn count_tokens(&self, messages: &[Message]) -> Result<usize, EngineError> {
        Ok(self.tokenize(&self.render(messages)?).len())
    }

    /// Checks that a prompt of `prompt` tokens leaves room for `reserved`.
    pub fn check_fits(&self, prompt: usize, reserved: usize) -> Result<(), EngineError> {
        check_fits(prompt, reserved, self.context_size())
    }

    /// Greedy decoding of `n` tokens after `tokens` in a fresh context,
    /// with each step's top two logits (an inspection of the model, for the
    /// differential test against the candle engine); an end-of-generation
    /// token does not stop it.
    pub fn greedy_trace(&self, tokens: &[u32], n: usize) -> Result<Vec<TraceStep>, EngineError> {
        let llama = |action: &'static str| {
            move |e: &dyn std::fmt::Display| EngineError::Llama {
                action,
                message: e.to_string(),
            }
        };
        let prompt: Vec<LlamaToken> = tokens
            .iter()
            .map(|&t| LlamaToken(i32::try_from(t).unwrap_or(i32::MAX)))
            .collect();
        self.check_fits(prompt.len(), n)?;
        let mut ctx = {
            let _guard = self.context_lock.lock().unwrap_or_else(|e| e.into_inner());
            let params = self
                .context_params()
                .with_n_ctx(NonZeroU32::new(self.context));
            self.model
                .new_context(backend()?, params)
                .map_err(|e| llama("create a context")(&e))?
        };
        let mut batch = LlamaBatch::new(self.batch.max(1), 1);
        for (chunk_index, chunk) in prompt.chunks(self.batch.max(1)).enumerate() {
            batch.clear();
            for (i, &token) in chunk.iter().enumerate() {
                let pos = chunk_index * self.batch + i;
                batch
                    .add(token, pos as i32, &[0], pos + 1 == prompt.len())
                    .map_err(|e| llama("fill a batch")(&e))?;
            }
            ctx.decode(&mut batch)
                .map_err(|e| llama("evaluate the prompt")(&e))?;
        }
        let mut steps = Vec::with_capacity(n);
        for k in 0..n {
            let step = TraceStep::of(ctx.get_logits_ith(batch.n_tokens() - 1));
            steps.push(step);
            let token = LlamaToken(i32::try_from(step.token).unwrap_or(i32::MAX));
            if k + 1 == n {
                break;
            }
            batch.clear();
            batch
                .add(token, (prompt.len() + k) as i32, &[0], true)
                .map_err(|e| llama("fill a batch")(&e))?;
            ctx.decode(&mut batch).map_err(|e| llama("decode")(&e))?;
        }
        Ok(steps)
    }

    /// Generates the assistant's reply to `messages`.
    pub fn complete(
        &self,
        messages: &[Message],
        sampling: &Sampling,
    ) -> Result<Completion, EngineError> {
        let prompt = self.tokenize(&self.render(messages)?);
        let max_tokens = sampling.max_tokens as usize;
        self.check_fits(prompt.len(), max_tokens)?;
        let llama = |action: &'static str| {
            move |e: &dyn std::fmt::Display| EngineError::Llama {
                action,
                message: e.to_string(),
            }
        };
        let mut ctx = {
            let _guard = self.context_lock.lock().unwrap_or_else(|e| e.into_inner());
            let params = self
                .context_params()
                .with_n_ctx(NonZeroU32::new(self.context));
            self.model
                .new_context(backend()?, params)
                .map_err(|e| llama("create a context")(&e))?
        };

        let started = Instant::now();
        let mut batch = LlamaBatch::new(self.batch, 1);
        for (chunk_index, chunk) in prompt.chunks(self.batch).enumerate() {
            batch.clear();
            let offset = chunk_index * self.batch;
            for (i, &token) in chunk.iter().enumerate() {
                let pos = offset + i;
                let last = pos + 1 == prompt.len();
                batch
                    .add(token, pos as i32, &[0], last)
                    .map_err(|e| llama("fill a batch")(&e))?;
            }
            ctx.decode(&mut batch)
                .map_err(|e| llama("evaluate the prompt")(&e))?;
        }
        let prompt_s = started.elapsed().as_secs_f64();

        let mut sampler = self.token_sampler(sampling, None, None, 0)?;
        let vocab = self.model.vocab();
        let decode_started = Instant::now();
        let mut tokens = Vec::new();
        let mut bytes = Vec::new();
        let mut pos = prompt.len();
        let mut stop = Stop::MaxTokens;
        while tokens.len() < max_tokens {
            let token = sampler.sample(ctx.get_logits_ith(batch.n_tokens() - 1), |t| {
                vocab.is_eog(t)
            });
            if vocab.is_eog(token) {
                stop = Stop::EndOfText;
                break;
            }
            tokens.push(token.0);
            bytes.extend(vocab.token_to_piece(token, false, None));
            batch.clear();
            batch
                .add(token, pos as i32, &[0], true)
                .map_err(|e| llama("fill a batch")(&e))?;
            pos += 1;
            ctx.decode(&mut batch).map_err(|e| llama("decode")(&e))?;
        }
        Ok(Completion {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            completion_tokens: tokens.len(),
            tokens,
            prompt_tokens: prompt.len(),
            stop,
            prompt_s,
            decode_s: decode_started.elapsed().as_secs_f64(),
        })
    }
}

/// Messages llama.cpp renders once at load to tell whether it knows a
/// template: it refuses (a negative status) the ones its matcher does not
/// recognise.
fn probe_messages() -> Vec<LlamaChatMessage> {
    [
        ("system", "s"),
        ("user", "u"),
        ("assistant", "a"),
        ("user", "u"),
    ]
    .into_iter()
    .filter_map(|(role, content)| LlamaChatMessage::new(role.into(), content.into()).ok())
    .collect()
}

/// The text of a vocabulary token (`<|begin_of_text|>`); empty when the
/// model has none.
fn token_text(model: &LlamaModel, token: LlamaToken) -> String {
    if token.0 < 0 {
        return String::new();
    }
    model
        .vocab()
        .text(token)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// How `model` renders messages under `[engine] chat_template = setting`.
fn chat_format(model: &LlamaModel, path: &Path, setting: &str) -> Result<ChatFormat, EngineError> {
    let chat_err = |source| EngineError::Chat {
        path: path.to_path_buf(),
        source,
    };
    let jinja = |source: &str| {
        let vocab = model.vocab();
        chat::JinjaTemplate::new(
            source,
            &token_text(model, vocab.bos()),
            &token_text(model, vocab.eos()),
        )
        .map(|t| ChatFormat::Jinja(Box::new(t)))
        .map_err(chat_err)
    };
    let known = |template: &LlamaChatTemplate| {
        model
            .apply_chat_template(template, &probe_messages(), true)
            .is_ok()
    };
    match chat::TemplateSetting::parse(setting) {
        chat::TemplateSetting::Auto => {
            let template = model
                .chat_template(None)
                .map_err(|_| EngineError::NoTemplate {
                    path: path.to_path_buf(),
                })?;
            if known(&template) {
                return Ok(ChatFormat::Llama(template));
            }
            let source = template.to_string().map_err(|e| EngineError::Template {
                path: path.to_path_buf(),
                message: format!("the GGUF's chat template is not UTF-8: {e}"),
            })?;
            jinja(&source)
        }
        chat::TemplateSetting::Name(name) => match LlamaChatTemplate::new(&name) {
            Ok(template) if known(&template) => Ok(ChatFormat::Llama(template)),
            _ => Err(EngineError::UnknownTemplateName { name }),
        },
        chat::TemplateSetting::File(file) => {
            jinja(&chat::read_template_file(&file).map_err(chat_err)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_cannot_work_are_refused() {
        #[rustfmt::skip]
        let cases = [
            (EngineSettings::default(), None),
            (EngineSettings { kv_type: KvType::Q8_0, ..EngineSettings::default() }, None),
            (EngineSettings { kv_type: KvType::Q4_0, flash_attn: FlashAttn::Off, ..EngineSettings::default() },
             Some("kv_type = \"q4_0\" needs flash attention")),
            (EngineSettings { ubatch: 1024, ..EngineSettings::default() },
             Some("ubatch = 1024 is larger than batch = 512")),
            (EngineSettings { batch: 0, ..EngineSettings::default() },
             Some("batch = 0 and ubatch = 512 must both be at least 1")),
        ];
        for (settings, want) in cases {
            let got = check_settings(&settings).err().map(|e| e.to_string());
            match want {
                None => assert_eq!(got, None),
                Some(w) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(w)),
                    "{got:?} vs {w}"
                ),
            }
        }
    }
}
