//! What every part of the engine is set up with: the `[engine]` settings
//! ([`EngineSettings`], [`EngineKind`]), fixed for the life of a loaded
//! model; llama.cpp's backend, initialised once per process; and the error
//! every part returns ([`EngineError`]). Below the modules that load, place
//! and run the model; the crate root re-exports its public items.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use llama_cpp_2::llama_backend::LlamaBackend;
use patchwright_engine_types::placement::{FlashAttn, GpuLayers, KvBudget, KvType, SplitMode};
use serde::{Deserialize, Serialize};

use crate::chat;

/// Tokens evaluated per `decode` call while reading a prompt, unless
/// `[engine] batch` says otherwise. Larger batches use more scratch memory
/// for little gain on a CPU.
pub(crate) const PROMPT_BATCH: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot initialise llama.cpp: {0}")]
    Backend(String),
    #[error("cannot load model {path}: {message} (is it a GGUF file llama.cpp supports?)")]
    Load { path: PathBuf, message: String },
    #[error("model {path} has no chat template in its metadata: set [engine] chat_template to a llama.cpp template name (chatml, llama3, gemma, ...) or a Jinja template file, or use an instruct model")]
    NoTemplate { path: PathBuf },
    #[error("chat_template = {name:?} is neither a llama.cpp built-in template name (chatml, llama3, llama2, mistral-v7, phi3, gemma, deepseek2, deepseek3, command-r, ...) nor an existing template file")]
    UnknownTemplateName { name: String },
    #[error("chat template for {path}: {source}")]
    Chat {
        path: PathBuf,
        source: chat::ChatError,
    },
    #[error("cannot apply the chat template of {path}: {message}")]
    Template { path: PathBuf, message: String },
    #[error("prompt does not fit: {prompt} prompt tokens + {reserved} reserved for the reply = {needed}, but the context holds {context}: {over} tokens too many (shorten the prompt, lower max_tokens or raise the context size)")]
    TooLong {
        prompt: usize,
        reserved: usize,
        needed: usize,
        context: usize,
        over: usize,
    },
    #[error(
        "{conversations} conversations × {candidates} candidates × {context} tokens of context \
         would take {:.1} GiB of KV cache (at most {:.1} GiB, engine.kv_budget): lower --jobs, \
         fixer.candidates or engine.context, or raise engine.kv_budget",
        *bytes as f64 / f64::from(1u32 << 30),
        *budget as f64 / f64::from(1u32 << 30)
    )]
    KvBudget {
        conversations: usize,
        candidates: usize,
        context: usize,
        bytes: u64,
        budget: u64,
    },
    #[error("context size {requested} is larger than {model}'s trained context {trained}")]
    ContextTooLarge {
        requested: u32,
        trained: u32,
        model: String,
    },
    #[error(
        "invalid GBNF grammar (llama.cpp could not parse it; check the rule named `root`): {0}"
    )]
    Grammar(String),
    #[error("replay of {source_path}: {message}")]
    Replay {
        source_path: PathBuf,
        message: String,
    },
    #[error("request to {url} failed: {message}")]
    Http { url: String, message: String },
    #[error("this backend cannot {what}: it needs the model in this process (--model with a GGUF file, not a server or a replay)")]
    Unsupported { what: &'static str },
    #[error("invalid [engine] settings: {0}")]
    Settings(String),
    #[error("candle engine: {0}")]
    Candle(String),
    #[error("llama.cpp failed to {action}: {message}")]
    Llama {
        action: &'static str,
        message: String,
    },
}

/// How the engine is set up: fixed for the life of the loaded model. Every
/// field but `context` and `threads` came later and has a default, so
/// older configs and run records read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// Which implementation runs the model: `"llama"` (llama.cpp, the
    /// default: GPUs, the batching scheduler, drafts) or `"candle"` (pure
    /// Rust on the CPU, [`candle`](crate::candle); `qwen2` and `llama` models, one call at a
    /// time). The GPU, KV and draft settings below are llama.cpp's.
    #[serde(default)]
    pub kind: EngineKind,
    /// Context size in tokens (prompt + reply). 0 means the model's own
    /// trained context, cut to what the KV budget holds.
    pub context: u32,
    /// CPU threads; 0 means all available cores.
    pub threads: u32,
    /// Layers offloaded to the GPU.
    #[serde(default)]
    pub gpu_layers: GpuLayers,
    /// The GPU (index among the GPUs) for the whole model with
    /// `split_mode = "none"`, and for scratch buffers otherwise.
    #[serde(default)]
    pub main_gpu: u32,
    /// How layers are spread over several GPUs.
    #[serde(default)]
    pub split_mode: SplitMode,
    /// Flash attention.
    #[serde(default)]
    pub flash_attn: FlashAttn,
    /// The KV cache's element type; a quantised one needs flash attention
    /// (`flash_attn` not `"off"`).
    #[serde(default)]
    pub kv_type: KvType,
    /// Bytes of KV cache the engine may allocate.
    #[serde(default)]
    pub kv_budget: KvBudget,
    /// Prompt tokens evaluated per `decode` call (llama.cpp's `n_batch`).
    #[serde(default = "default_batch")]
    pub batch: u32,
    /// Tokens per compute step inside a batch (llama.cpp's `n_ubatch`; at
    /// most `batch`). Larger is faster on a GPU and takes more memory.
    #[serde(default = "default_ubatch")]
    pub ubatch: u32,
    /// The chat template: `auto` (the GGUF's own, through llama.cpp when
    /// its matcher knows it, else rendered as Jinja), a llama.cpp built-in
    /// name (`chatml`, `llama3`, ...), or a path to a Jinja template or a
    /// tokenizer_config.json.
    #[serde(default = "default_chat_template")]
    pub chat_template: String,
    /// Prompt-lookup speculative decoding: guess a candidate's next tokens
    /// from where its last tokens occur earlier in the prompt or reply, and
    /// check the guess in one batch ([`speculate`](crate::speculate)). The output is the
    /// same either way; off only costs time.
    #[serde(default = "default_true")]
    pub prompt_lookup: bool,
    /// Jump-forward decoding: text a grammar admits as the only
    /// continuation is evaluated in one batch instead of token by token
    /// (checked like a prompt-lookup guess, so the output is the same).
    #[serde(default = "default_true")]
    pub jump_forward: bool,
    /// Grammar-first sampling: a token is picked from the unconstrained
    /// distribution and only it is checked against the grammar; the
    /// vocabulary is masked only when the grammar refuses it
    /// ([`sampler`](crate::sampler)). Greedy replies are the same either way and sampled
    /// ones follow the same distribution; off only costs time (about a
    /// third of a decoding step on a CPU).
    #[serde(default = "default_true")]
    pub grammar_first: bool,
}

/// The implementation behind `[engine] kind`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// llama.cpp in-process (`llama-cpp-2`).
    #[default]
    Llama,
    /// candle-core on the CPU ([`candle::CandleEngine`](crate::candle::CandleEngine)).
    Candle,
}

fn default_true() -> bool {
    true
}

fn default_batch() -> u32 {
    PROMPT_BATCH as u32
}

fn default_ubatch() -> u32 {
    PROMPT_BATCH as u32
}

fn default_chat_template() -> String {
    chat::AUTO.to_string()
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            kind: EngineKind::Llama,
            context: 8192,
            threads: 0,
            gpu_layers: GpuLayers::Auto,
            main_gpu: 0,
            split_mode: SplitMode::Layer,
            flash_attn: FlashAttn::Auto,
            kv_type: KvType::F16,
            kv_budget: KvBudget::Auto,
            batch: default_batch(),
            ubatch: default_ubatch(),
            chat_template: default_chat_template(),
            prompt_lookup: true,
            jump_forward: true,
            grammar_first: true,
        }
    }
}

/// llama.cpp's backend may be initialised once per process.
static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();
static BACKEND_INIT: Mutex<()> = Mutex::new(());

pub(crate) fn backend() -> Result<&'static LlamaBackend, EngineError> {
    let _guard = BACKEND_INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = BACKEND.get() {
        return Ok(b);
    }
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
    let b = LlamaBackend::init().map_err(|e| EngineError::Backend(e.to_string()))?;
    Ok(BACKEND.get_or_init(|| b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_old_and_new_forms() {
        let old: EngineSettings = toml::from_str("context = 4096\nthreads = 2").unwrap();
        assert_eq!(
            old,
            EngineSettings {
                context: 4096,
                threads: 2,
                ..EngineSettings::default()
            }
        );
        #[rustfmt::skip]
        let cases: [(&str, Result<EngineSettings, &str>); 11] = [
            ("kind = \"candle\"", Ok(EngineSettings { kind: EngineKind::Candle, ..EngineSettings::default() })),
            ("kind = \"llama\"", Ok(EngineSettings::default())),
            ("kind = \"onnx\"", Err("unknown variant `onnx`, expected `llama` or `candle`")),
            ("gpu_layers = \"all\"\nflash_attn = true\nkv_type = \"q8_0\"\nkv_budget = 1000\nsplit_mode = \"row\"\nmain_gpu = 1\nbatch = 2048\nubatch = 1024",
             Ok(EngineSettings { gpu_layers: GpuLayers::All, flash_attn: FlashAttn::On, kv_type: KvType::Q8_0,
                 kv_budget: KvBudget::Bytes(1000), split_mode: SplitMode::Row, main_gpu: 1, batch: 2048,
                 ubatch: 1024, ..EngineSettings::default() })),
            ("gpu_layers = 30\nflash_attn = \"off\"\nkv_budget = \"auto\"",
             Ok(EngineSettings { gpu_layers: GpuLayers::Count(30), flash_attn: FlashAttn::Off, ..EngineSettings::default() })),
            ("gpu_layers = \"none\"\nflash_attn = false",
             Ok(EngineSettings { gpu_layers: GpuLayers::None, flash_attn: FlashAttn::Off, ..EngineSettings::default() })),
            ("gpu_layers = \"most\"", Err("gpu_layers = \"most\": expected")),
            ("flash_attn = \"yes\"", Err("flash_attn = \"yes\": expected")),
            ("kv_type = \"q5_1\"", Err("unknown variant `q5_1`")),
            ("kv_budget = \"lots\"", Err("kv_budget = \"lots\": expected")),
            ("split_mode = \"tensor\"", Err("unknown variant `tensor`")),
        ];
        for (text, want) in cases {
            let text = format!("context = 8192\nthreads = 0\n{text}");
            match (toml::from_str::<EngineSettings>(&text), want) {
                (Ok(got), Ok(want)) => {
                    assert_eq!(got, want, "{text}");
                    let back = toml::to_string(&got).unwrap();
                    assert_eq!(
                        toml::from_str::<EngineSettings>(&back).unwrap(),
                        got,
                        "{back}"
                    );
                }
                (Err(e), Err(want)) => assert!(e.to_string().contains(want), "{text}: {e}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }
}
