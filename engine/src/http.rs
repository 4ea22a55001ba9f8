//! A chat-completions client (`POST /v1/chat/completions`) that speaks each
//! inference server's dialect, so many runners can share one server (or a
//! GPU box serves a model too large for this machine).
//!
//! What differs between servers, and how each is asked:
//!
//! | kind | grammar field | `n` (candidates in one request) |
//! |---|---|---|
//! | `llama-cpp` (llama.cpp's `llama-server`) | `grammar` (GBNF) | yes on recent builds with as many slots (`--parallel`) as candidates; older builds answer "Only one completion choice is allowed", recent ones with fewer slots "Field 'n': Value must be between 1 <= value <= 1", and either is then asked one candidate per request |
//! | `llama-cpp` (llama-cpp-python's server) | `grammar` (GBNF) | no: `n` is dropped (`exclude = {"n", ...}` in `llama_cpp/server/app.py`), one choice comes back |
//! | `vllm` | `structured_outputs: {"grammar": ...}` (vLLM ≥ 0.10.2); `guided_grammar` before (deprecated, removed in 0.12) | yes |
//! | `sglang` | `ebnf` (`ChatCompletionRequest.ebnf` in `sglang/srt/entrypoints/openai/protocol.py`; its xgrammar backend reads GBNF) | yes |
//! | `openai` | none: the grammar is dropped with a warning (OpenAI's API has no grammar) | yes |
//!
//! `auto` (the default) asks `GET /v1/models` who owns the model: vLLM's
//! `ModelCard` says `"vllm"`, SGLang's `"sglang"`, llama.cpp's server
//! `"llamacpp"`, llama-cpp-python's `"me"`; anything else is tried on
//! SGLang's `GET /get_server_info`, then taken as `openai` with a warning.
//! For vLLM, `GET /version` picks the grammar field.
//!
//! A request's candidates are grouped by temperature (`request.temperatures`
//! may differ per candidate and one request has one temperature); each group
//! is one request with `n` = its size and the seed of its first candidate,
//! so the server evaluates the shared prompt once. When the server does not
//! honour `n` (fewer choices than asked), the missing candidates are asked
//! one per request with their own seeds (`seed + i`).
//!
//! Token counts: `usage` gives a request's total. A candidate stopped by the
//! token cap generated exactly `max_tokens`; with one choice per request the
//! count is exact; otherwise the rest of the total is split among the other
//! choices in proportion to their text length (the sum stays exact).
//! `prompt_tokens_reused` is the server's `usage.prompt_tokens_details
//! .cached_tokens` when it reports one (vLLM with prefix caching, recent
//! llama.cpp), else 0.
//!
//! `http://` and `https://` (rustls, webpki roots); `Authorization: Bearer`
//! from the environment variable named by [`ServerSettings::api_key_env`];
//! retries with exponential backoff on 429, 5xx and dropped connections
//! (honouring `Retry-After`); a server's "prompt too long" answer becomes
//! [`EngineError::TooLong`], as the local engine's check, so the agents
//! squeeze their history instead of failing the episode.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::tokenizer::ChatTokenizer;
use super::{
    check_fits, Candidate, Conversation, EngineError, Generation, Message, Request, Stats, Stop,
};

/// Default wait for a reply's first byte: a long reply from a busy server
/// on a CPU can take minutes, but not an hour.
pub const DEFAULT_READ_TIMEOUT_S: u64 = 1800;

/// Default wait for a TCP (and TLS) connection: a reachable server answers
/// in milliseconds; 30 s covers a congested link without hanging a batch.
pub const DEFAULT_CONNECT_TIMEOUT_S: u64 = 30;

/// Default retries after a failed attempt (429, 5xx, dropped connection):
/// with [`BACKOFF_FIRST`] doubling, 4 retries wait 0.5 + 1 + 2 + 4 = 7.5 s,
/// enough for a server restart or a burst of load to pass.
pub const DEFAULT_RETRIES: u32 = 4;

/// The wait before the first retry; each further retry doubles it.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(500);

/// The longest wait between two attempts, however many retries are set.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The longest `Retry-After` honoured: a server asking for more is waited
/// on this long, so one answer cannot stall a batch for an hour.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(120);

/// Most bytes of an error body quoted in an error message.
pub const ERROR_BODY_QUOTE: usize = 500;

/// The first vLLM release reading `structured_outputs` (its rename of
/// `guided_*`); older ones read `guided_grammar`.
pub const VLLM_STRUCTURED_OUTPUTS_SINCE: (u32, u32, u32) = (0, 10, 2);

/// Lower-cased fragments of the servers' "prompt does not fit" messages:
/// vLLM and llama-cpp-python ("This model's maximum context length is N
/// tokens. However, ..."), llama.cpp's server ("the request exceeds the
/// available context size", error type `exceed_context_size_error`),
/// SGLang ("The input (N tokens) is longer than the model's context length
/// (M tokens)." and "Requested token count exceeds the model's maximum
/// context length of M tokens"), older vLLM ("The decoder prompt (length N)
/// is longer than the maximum model length of M"), OpenAI
/// (`context_length_exceeded`).
pub const CONTEXT_ERROR_PATTERNS: [&str; 6] = [
    "maximum context length",
    "exceeds the available context size",
    "exceed_context_size_error",
    "longer than the model's context length",
    "longer than the maximum model length",
    "context_length_exceeded",
];

/// How llama.cpp's server refuses `n` > 1 (lower-cased): before it
/// implemented `n` (`oaicompat_chat_params_parse` in `tools/server`), and
/// since, when it has fewer slots than `n` (its default is one slot), from
/// its request validation.
const N_REFUSED: &[&str] = &[
    "only one completion choice is allowed",
    "field 'n': value must be between 1 <= value <= 1",
];

/// Whether a server's error body refuses `n` > 1.
fn refuses_n(body: &str) -> bool {
    let body = body.to_lowercase();
    N_REFUSED.iter().any(|m| body.contains(m))
}

/// Which server dialect to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerKind {
    /// Ask the server what it is (`GET /v1/models`).
    #[default]
    Auto,
    /// llama.cpp's `llama-server`, or llama-cpp-python's server.
    LlamaCpp,
    /// vLLM's OpenAI-compatible server.
    Vllm,
    /// SGLang's server.
    Sglang,
    /// Any other OpenAI-compatible API: no grammar.
    Openai,
}

impl ServerKind {
    /// The name used in settings and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Auto => "auto",
            ServerKind::LlamaCpp => "llama-cpp",
            ServerKind::Vllm => "vllm",
            ServerKind::Sglang => "sglang",
            ServerKind::Openai => "openai",
        }
    }
}

/// A server kind that is none of [`ServerKind`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown server kind {0:?}: use auto, llama-cpp, vllm, sglang or openai")]
pub struct UnknownServerKind(pub String);

impl FromStr for ServerKind {
    type Err = UnknownServerKind;
    fn from_str(s: &str) -> Result<Self, UnknownServerKind> {
        [
            ServerKind::Auto,
            ServerKind::LlamaCpp,
            ServerKind::Vllm,
            ServerKind::Sglang,
            ServerKind::Openai,
        ]
        .into_iter()
        .find(|k| k.name() == s)
        .ok_or_else(|| UnknownServerKind(s.to_string()))
    }
}

/// How to talk to a server (`[server]` in the configuration file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// The dialect; `auto` asks the server.
    pub kind: ServerKind,
    /// The environment variable holding the API key, sent as
    /// `Authorization: Bearer KEY`; none sends no key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Seconds to wait for a connection.
    pub connect_timeout_s: u64,
    /// Seconds to wait for a reply.
    pub read_timeout_s: u64,
    /// Retries of a request after 429, 5xx or a dropped connection.
    pub retries: u32,
    /// A tokenizer for counting the prompts' tokens (a GGUF or a
    /// tokenizer.json with its tokenizer_config.json beside it), when the
    /// served model is not a manifest name or a GGUF file here; none:
    /// prompts go unbudgeted unless the model is found locally.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<std::path::PathBuf>,
    /// The server's context in tokens; 0 asks the server (llama.cpp's
    /// `/props`, vLLM's `max_model_len`). llama-cpp-python's server does
    /// not say: set it to its `--n_ctx`.
    #[serde(skip_serializing_if = "is_zero")]
    pub context: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ServerSettings {
    /// Whether these are the defaults (left out of `run.json`).
    pub fn is_default(&self) -> bool {
        *self == ServerSettings::default()
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            kind: ServerKind::Auto,
            api_key_env: None,
            connect_timeout_s: DEFAULT_CONNECT_TIMEOUT_S,
            read_timeout_s: DEFAULT_READ_TIMEOUT_S,
            retries: DEFAULT_RETRIES,
            tokenizer: None,
            context: 0,
        }
    }
}

/// Where a grammar goes in the request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrammarField {
    /// `"grammar": G` (llama.cpp, llama-cpp-python).
    Grammar,
    /// `"structured_outputs": {"grammar": G}` (vLLM ≥ 0.10.2).
    StructuredOutputs,
    /// `"guided_grammar": G` (vLLM before 0.10.2).
    GuidedGrammar,
    /// `"ebnf": G` (SGLang).
    Ebnf,
    /// Not sent (OpenAI).
    None,
}

/// A server's dialect, resolved from [`ServerKind`] (and what the server
/// says about itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// The kind resolved (never `auto`).
    pub kind: ServerKind,
    /// Where the grammar goes.
    pub grammar: GrammarField,
    /// Whether to ask for several candidates in one request.
    pub n: bool,
}

impl Dialect {
    /// The dialect of `kind` as its current releases speak it.
    pub fn of(kind: ServerKind) -> Dialect {
        let grammar = match kind {
            ServerKind::Auto | ServerKind::LlamaCpp => GrammarField::Grammar,
            ServerKind::Vllm => GrammarField::StructuredOutputs,
            ServerKind::Sglang => GrammarField::Ebnf,
            ServerKind::Openai => GrammarField::None,
        };
        Dialect {
            kind,
            grammar,
            n: true,
        }
    }
}

/// A server, the model name to ask it for, and how.
pub struct HttpBackend {
    base_url: String,
    model: String,
    agent: ureq::Agent,
    api_key: Option<String>,
    retries: u32,
    dialect: Dialect,
    /// Set when the server refused `n` > 1: later requests ask one
    /// candidate each.
    n_refused: AtomicBool,
    /// Set once the "grammar dropped" warning has been given.
    grammar_warned: AtomicBool,
    /// Counts prompts as the server will ([`HttpBackend::set_tokenizer`]).
    counter: Option<ChatTokenizer>,
    /// The server's context in tokens, when known.
    context: Option<usize>,
    /// Set once the "prompts are not budgeted" line has been logged.
    unbudgeted_logged: AtomicBool,
}

#[derive(Debug, Deserialize)]
struct Reply {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    index: usize,
    message: ChoiceMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Usage {
    prompt_tokens: usize,
    completion_tokens: usize,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Debug, Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<usize>,
}

#[derive(Deserialize)]
struct ModelList {
    #[serde(default)]
    data: Vec<ModelCard>,
}

#[derive(Deserialize)]
struct ModelCard {
    #[serde(default)]
    owned_by: Option<String>,
    /// vLLM's context length.
    #[serde(default)]
    max_model_len: Option<usize>,
}

/// llama.cpp's `GET /props`, the part that gives the context.
#[derive(Deserialize)]
struct Props {
    default_generation_settings: PropsSettings,
}

#[derive(Deserialize)]
struct PropsSettings {
    n_ctx: usize,
}

#[derive(Deserialize)]
struct Version {
    version: String,
}

/// Why an attempt failed, before it becomes an [`EngineError`].
#[derive(Debug)]
enum Failure {
    /// The server answered with an error status.
    Status { code: u16, body: String },
    /// No answer: connection refused, reset, timed out, TLS.
    Transport(String),
}

/// One request's candidates as parsed from its reply.
#[derive(Debug)]
struct Parsed {
    candidates: Vec<Candidate>,
    generated: Vec<usize>,
    prompt_tokens: usize,
    cached_tokens: usize,
}

impl HttpBackend {
    /// Connects to `base_url` (the server's root, e.g.
    /// `https://gpu-box:8000`; a trailing `/v1` is dropped) for `model`,
    /// reading the API key from the variable `settings.api_key_env` names,
    /// and resolving `auto` by asking the server.
    pub fn new(
        base_url: &str,
        model: &str,
        settings: &ServerSettings,
    ) -> Result<Self, EngineError> {
        let api_key = match &settings.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(key) if !key.trim().is_empty() => Some(key.trim().to_string()),
                _ => {
                    return Err(EngineError::Http {
                        url: base_url.to_string(),
                        message: format!(
                            "the API key variable {var} (server.api_key_env) is not set or empty: export it, or remove api_key_env"
                        ),
                    })
                }
            },
        };
        Self::with_key(base_url, model, settings, api_key)
    }

    /// As [`HttpBackend::new`], with the API key given.
    pub fn with_key(
        base_url: &str,
        model: &str,
        settings: &ServerSettings,
        api_key: Option<String>,
    ) -> Result<Self, EngineError> {
        let base_url = base_url
            .trim_end_matches('/')
            .trim_end_matches("/v1")
            .to_string();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(EngineError::Http {
                url: base_url,
                message: "the server must be an http:// or https:// URL".into(),
            });
        }
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(settings.connect_timeout_s.max(1)))
            .timeout_read(Duration::from_secs(settings.read_timeout_s.max(1)))
            .build();
        let mut backend = HttpBackend {
            base_url,
            model: model.into(),
            agent,
            api_key,
            retries: settings.retries,
            dialect: Dialect::of(settings.kind),
            n_refused: AtomicBool::new(false),
            grammar_warned: AtomicBool::new(false),
            counter: None,
            context: None,
            unbudgeted_logged: AtomicBool::new(false),
        };
        backend.dialect = match settings.kind {
            ServerKind::Auto => backend.detect()?,
            ServerKind::Vllm => backend.vllm_dialect(),
            kind => Dialect::of(kind),
        };
        // The server is asked for its context only once a tokenizer can
        // count prompts (`set_tokenizer`): without one it is never used.
        backend.context = (settings.context != 0).then_some(settings.context as usize);
        if let Some(path) = &settings.tokenizer {
            backend.set_tokenizer(path)?;
        }
        tracing::info!(
            "server {} speaks {} (grammar as {:?}, n {})",
            backend.base_url,
            backend.dialect.kind.name(),
            backend.dialect.grammar,
            if backend.dialect.n {
                "in one request"
            } else {
                "one per request"
            }
        );
        Ok(backend)
    }

    /// The dialect in use.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Counts prompts with the tokenizer and chat template of `path` (a
    /// GGUF, or a tokenizer.json), so that they are fitted to the server's
    /// context before they are sent.
    pub fn set_tokenizer(&mut self, path: &std::path::Path) -> Result<(), EngineError> {
        let counter = ChatTokenizer::from_file(path).map_err(|e| {
            EngineError::Settings(format!("server.tokenizer = {}: {e}", path.display()))
        })?;
        tracing::info!(
            "prompts to {} counted with the tokenizer of {}",
            self.base_url,
            path.display()
        );
        self.counter = Some(counter);
        if self.context.is_none() {
            self.context = self.server_context();
        }
        Ok(())
    }

    /// Whether a tokenizer counts the prompts.
    pub fn has_tokenizer(&self) -> bool {
        self.counter.is_some()
    }

    /// The server's context in tokens, when known (`[server] context`, or
    /// what the server reports).
    pub fn context(&self) -> Option<usize> {
        self.context
    }

    /// The context the server reports: llama.cpp's `GET /props`
    /// (`default_generation_settings.n_ctx`), vLLM's `max_model_len` in
    /// `GET /v1/models`; `None` when it says nothing (llama-cpp-python,
    /// SGLang, OpenAI).
    fn server_context(&self) -> Option<usize> {
        if let Ok(text) = self.send(&format!("{}/props", self.base_url), None) {
            if let Ok(props) = serde_json::from_str::<Props>(&text) {
                return Some(props.default_generation_settings.n_ctx);
            }
        }
        let text = self
            .send(&format!("{}/v1/models", self.base_url), None)
            .ok()?;
        let list = serde_json::from_str::<ModelList>(&text).ok()?;
        list.data.into_iter().find_map(|m| m.max_model_len)
    }

    /// The tokenizer and the context, when both are known: the prompts are
    /// then budgeted. Logs once when they are not.
    fn budgeted(&self) -> Option<(&ChatTokenizer, usize)> {
        match (&self.counter, self.context) {
            (Some(counter), Some(context)) => Some((counter, context)),
            (counter, context) => {
                if !self.unbudgeted_logged.swap(true, Ordering::Relaxed) {
                    let missing = match (counter.is_some(), context.is_some()) {
                        (false, false) => "no tokenizer (the model is not a local GGUF: set [server] tokenizer) and no context (set [server] context)",
                        (false, true) => "no tokenizer (the model is not a local GGUF: set [server] tokenizer)",
                        _ => "the server does not report its context (set [server] context)",
                    };
                    tracing::info!(
                        "prompts to {} are not fitted to its context before sending: {missing}",
                        self.base_url
                    );
                }
                None
            }
        }
    }

    /// What the server says it is: `owned_by` of `GET /v1/models`, then
    /// SGLang's `GET /get_server_info`, else `openai`.
    fn detect(&self) -> Result<Dialect, EngineError> {
        let url = format!("{}/v1/models", self.base_url);
        let owner = match self.send(&url, None) {
            Ok(text) => serde_json::from_str::<ModelList>(&text)
                .ok()
                .and_then(|l| l.data.into_iter().find_map(|m| m.owned_by)),
            Err(Failure::Status { .. }) => None,
            Err(Failure::Transport(message)) => {
                return Err(EngineError::Http {
                    url,
                    message: format!("{message} (is the server running?)"),
                })
            }
        };
        match owner.as_deref() {
            Some("vllm") => return Ok(self.vllm_dialect()),
            Some("sglang") => return Ok(Dialect::of(ServerKind::Sglang)),
            Some("llamacpp") => return Ok(Dialect::of(ServerKind::LlamaCpp)),
            // llama-cpp-python's server drops `n`.
            Some("me") => {
                return Ok(Dialect {
                    n: false,
                    ..Dialect::of(ServerKind::LlamaCpp)
                })
            }
            _ => {}
        }
        if self
            .send(&format!("{}/get_server_info", self.base_url), None)
            .is_ok()
        {
            return Ok(Dialect::of(ServerKind::Sglang));
        }
        tracing::warn!(
            "server {} did not say what it is (owned_by {:?}): speaking plain OpenAI, without grammars; set server.kind (--server-kind) if it is llama-cpp, vllm or sglang",
            self.base_url,
            owner
        );
        Ok(Dialect::of(ServerKind::Openai))
    }

    /// vLLM's grammar field by its `GET /version`; the current one when it
    /// does not say.
    fn vllm_dialect(&self) -> Dialect {
        let version = self
            .send(&format!("{}/version", self.base_url), None)
            .ok()
            .and_then(|t| serde_json::from_str::<Version>(&t).ok())
            .map(|v| v.version);
        let grammar = match version.as_deref().and_then(parse_version) {
            Some(v) if v < VLLM_STRUCTURED_OUTPUTS_SINCE => GrammarField::GuidedGrammar,
            _ => GrammarField::StructuredOutputs,
        };
        Dialect {
            grammar,
            ..Dialect::of(ServerKind::Vllm)
        }
    }

    /// One HTTP exchange with retries: GET without `body`, POST with it.
    /// Returns the reply's text.
    fn send(&self, url: &str, body: Option<&serde_json::Value>) -> Result<String, Failure> {
        let mut attempt = 0;
        loop {
            let mut req = match body {
                Some(_) => self.agent.post(url),
                None => self.agent.get(url),
            };
            if let Some(key) = &self.api_key {
                req = req.set("Authorization", &format!("Bearer {key}"));
            }
            let result = match body {
                Some(b) => req.send_json(b),
                None => req.call(),
            };
            let (failure, retry_after) = match result {
                Ok(r) => {
                    return r
                        .into_string()
                        .map_err(|e| Failure::Transport(format!("cannot read the reply: {e}")))
                }
                Err(ureq::Error::Status(code, r)) => {
                    let retry_after = r
                        .header("retry-after")
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let body = r.into_string().unwrap_or_default();
                    (Failure::Status { code, body }, retry_after)
                }
                Err(ureq::Error::Transport(t)) => (Failure::Transport(t.to_string()), None),
            };
            let retryable = match &failure {
                Failure::Status { code, body } => {
                    (*code == 429 || *code >= 500) && !refuses_n(body) && !is_context_error(body)
                }
                Failure::Transport(_) => true,
            };
            if !retryable || attempt >= self.retries {
                return Err(failure);
            }
            let wait = backoff(attempt, retry_after);
            tracing::warn!(
                "{url}: {failure:?}; retry {} of {} in {wait:?}",
                attempt + 1,
                self.retries
            );
            std::thread::sleep(wait);
            attempt += 1;
        }
    }

    /// The request body for candidates `indices` of `request` (one
    /// temperature), `n` = their number.
    fn body(&self, request: &Request<'_>, indices: &[usize]) -> serde_json::Value {
        let grammar = match (request.grammar, self.dialect.grammar) {
            (Some(_), GrammarField::None) => {
                if !self.grammar_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "server {} ({}) takes no grammar: replies are unconstrained and may not follow the expected format",
                        self.base_url,
                        self.dialect.kind.name()
                    );
                }
                None
            }
            (g, _) => g,
        };
        request_body(&self.dialect, &self.model, request, indices, grammar)
    }

    /// Asks for candidates `indices`; the reply's choices in order.
    fn ask(&self, request: &Request<'_>, indices: &[usize]) -> Result<Parsed, EngineError> {
        let url = format!("{}/v1/chat/completions", self.base_url);
        let body = self.body(request, indices);
        match self.send(&url, Some(&body)) {
            Ok(text) => parse_reply(&text, request.sampling.max_tokens as usize).map_err(|e| {
                EngineError::Http {
                    url,
                    message: e.to_string(),
                }
            }),
            Err(Failure::Status { code, body }) if indices.len() > 1 && refuses_n(&body) => {
                tracing::warn!(
                    "server {} refuses n > 1 (status {code}): asking one candidate per request",
                    self.base_url
                );
                self.n_refused.store(true, Ordering::Relaxed);
                let mut all = Parsed {
                    candidates: Vec::new(),
                    generated: Vec::new(),
                    prompt_tokens: 0,
                    cached_tokens: 0,
                };
                for &i in indices {
                    let one = self.ask(request, &[i])?;
                    all.merge(one);
                }
                Ok(all)
            }
            Err(Failure::Status { code, body }) => {
                if is_context_error(&body) {
                    Err(too_long(&body, request.sampling.max_tokens as usize))
                } else {
                    Err(EngineError::Http {
                        url,
                        message: format!("status {code}: {}", quote(&body)),
                    })
                }
            }
            Err(Failure::Transport(message)) => Err(EngineError::Http {
                url,
                message: format!("{message} (is the server running?)"),
            }),
        }
    }
}

impl Parsed {
    fn merge(&mut self, other: Parsed) {
        if self.candidates.is_empty() {
            self.prompt_tokens = other.prompt_tokens;
            self.cached_tokens = other.cached_tokens;
        }
        self.candidates.extend(other.candidates);
        self.generated.extend(other.generated);
    }
}

/// `major.minor.patch` of a version string such as `0.10.2` or
/// `0.11.0rc1`.
fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.trim().trim_start_matches('v').split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .ok()
    });
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// The wait before retry `attempt` (0-based): [`BACKOFF_FIRST`] doubled per
/// attempt, at most [`BACKOFF_MAX`]; the server's `Retry-After` instead
/// when it gives one (at most [`RETRY_AFTER_MAX`]).
pub fn backoff(attempt: u32, retry_after: Option<Duration>) -> Duration {
    if let Some(wait) = retry_after {
        return wait.min(RETRY_AFTER_MAX);
    }
    BACKOFF_FIRST
        .saturating_mul(2u32.saturating_pow(attempt))
        .min(BACKOFF_MAX)
}

/// Candidates grouped by temperature, in order of first appearance: each
/// group can be one request.
pub fn temperature_groups(request: &Request<'_>) -> Vec<Vec<usize>> {
    let mut groups: Vec<(f32, Vec<usize>)> = Vec::new();
    for i in 0..request.n.max(1) {
        let t = temperature(request, i);
        match groups.iter_mut().find(|(g, _)| g.to_bits() == t.to_bits()) {
            Some(g) => g.1.push(i),
            None => groups.push((t, vec![i])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

fn temperature(request: &Request<'_>, i: usize) -> f32 {
    request
        .temperatures
        .as_ref()
        .and_then(|t| t.get(i).copied())
        .unwrap_or(request.sampling.temperature)
}

/// The JSON body asking `model` for candidates `indices` of `request` in
/// `dialect`: `n` = their number, the first one's temperature and seed
/// (`seed + index`), `min_p` when set, `grammar` where the dialect puts
/// it.
pub fn request_body(
    dialect: &Dialect,
    model: &str,
    request: &Request<'_>,
    indices: &[usize],
    grammar: Option<&str>,
) -> serde_json::Value {
    let first = indices.first().copied().unwrap_or(0);
    let mut body = serde_json::json!({
        "model": model,
        "messages": request.messages,
        "temperature": temperature(request, first),
        "top_p": request.sampling.top_p,
        "seed": request.sampling.seed.wrapping_add(first as u32),
        "max_tokens": request.sampling.max_tokens,
        "n": indices.len().max(1),
    });
    // llama-server, vLLM and SGLang read `min_p`; OpenAI's API does not
    // know it, so it is sent only when set.
    if request.sampling.min_p > 0.0 {
        body["min_p"] = request.sampling.min_p.into();
    }
    if let Some(g) = grammar {
        match dialect.grammar {
            GrammarField::Grammar => body["grammar"] = g.into(),
            GrammarField::StructuredOutputs => {
                body["structured_outputs"] = serde_json::json!({ "grammar": g })
            }
            GrammarField::GuidedGrammar => body["guided_grammar"] = g.into(),
            GrammarField::Ebnf => body["ebnf"] = g.into(),
            GrammarField::None => {}
        }
    }
    body
}

/// Why a server's reply is not a usable chat completion.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadReply {
    #[error("the reply is not a chat completion ({error}): {quoted}")]
    NotJson { error: String, quoted: String },
    #[error("the reply has no usage (token counts)")]
    NoUsage,
    #[error("the reply has no choices")]
    NoChoices,
}

/// A chat completion's choices (in `index` order) and token counts;
/// `max_tokens` is what a choice stopped by the cap generated.
fn parse_reply(text: &str, max_tokens: usize) -> Result<Parsed, BadReply> {
    let reply: Reply = serde_json::from_str(text).map_err(|e| BadReply::NotJson {
        error: e.to_string(),
        quoted: quote(text),
    })?;
    let usage = reply.usage.ok_or(BadReply::NoUsage)?;
    let mut choices = reply.choices;
    if choices.is_empty() {
        return Err(BadReply::NoChoices);
    }
    choices.sort_by_key(|c| c.index);
    let candidates: Vec<Candidate> = choices
        .into_iter()
        .map(|c| Candidate {
            text: c.message.content.unwrap_or_default(),
            tokens: Vec::new(),
            stop: match c.finish_reason.as_deref() {
                Some("length") => Stop::MaxTokens,
                _ => Stop::EndOfText,
            },
        })
        .collect();
    let generated = split_tokens(&candidates, usage.completion_tokens, max_tokens);
    Ok(Parsed {
        candidates,
        generated,
        prompt_tokens: usage.prompt_tokens,
        cached_tokens: usage
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0)
            .min(usage.prompt_tokens),
    })
}

/// `total` generated tokens split among `candidates`: one gets all; one
/// stopped by the cap gets `max_tokens`; the others one each, and what is
/// left in proportion to text length, the remainder to the first ones, so
/// the sum is `total`.
pub fn split_tokens(candidates: &[Candidate], total: usize, max_tokens: usize) -> Vec<usize> {
    if candidates.len() == 1 {
        return vec![total];
    }
    let mut out = vec![0; candidates.len()];
    let mut left = total;
    for (o, c) in out.iter_mut().zip(candidates) {
        if c.stop == Stop::MaxTokens {
            *o = max_tokens.min(left);
            left -= *o;
        }
    }
    let rest: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].stop != Stop::MaxTokens)
        .collect();
    if rest.is_empty() {
        return out;
    }
    let chars: Vec<usize> = rest
        .iter()
        .map(|&i| candidates[i].text.chars().count().max(1))
        .collect();
    let all_chars: usize = chars.iter().sum();
    // A reply that ended by itself has at least one token.
    let floor = usize::from(left >= rest.len());
    let share = left - floor * rest.len();
    let mut given = 0;
    for (&i, &c) in rest.iter().zip(&chars) {
        out[i] = floor + share * c / all_chars;
        given += out[i];
    }
    for &i in rest.iter().cycle().take(left - given) {
        out[i] += 1;
    }
    out
}

/// Whether an error body is a server's "prompt does not fit".
pub fn is_context_error(body: &str) -> bool {
    let lower = body.to_lowercase();
    CONTEXT_ERROR_PATTERNS.iter().any(|p| lower.contains(p))
}

/// A server's context error as the local engine's: the context and prompt
/// sizes where the message states them (0 where it does not), `reserved`
/// the reply's `max_tokens`.
pub fn too_long(body: &str, max_tokens: usize) -> EngineError {
    let lower = body.to_lowercase();
    let context = number_after(
        &lower,
        &[
            "maximum context length is ",
            "maximum context length of ",
            "context length (",
            "maximum model length of ",
            "\"n_ctx\":",
        ],
    )
    .unwrap_or(0);
    let prompt = number_after(
        &lower,
        &[
            "your request has ",
            "the input (",
            "tokens from the input",
            "decoder prompt (length ",
            "\"n_prompt_tokens\":",
        ],
    )
    .or_else(|| number_before(&lower, " in the messages"))
    .or_else(|| number_before(&lower, " tokens from the input"))
    .unwrap_or(0);
    tracing::warn!("the server refused the prompt as too long: {}", quote(body));
    let needed = prompt + max_tokens;
    EngineError::TooLong {
        prompt,
        reserved: max_tokens,
        needed,
        context,
        over: needed.saturating_sub(context),
    }
}

fn number_after(text: &str, markers: &[&str]) -> Option<usize> {
    markers.iter().find_map(|m| {
        let (_, tail) = text.split_once(m)?;
        let digits: String = tail
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

fn number_before(text: &str, marker: &str) -> Option<usize> {
    let (head, _) = text.split_once(marker)?;
    let digits: String = head
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

fn quote(body: &str) -> String {
    let body = body.trim();
    match body.char_indices().nth(ERROR_BODY_QUOTE) {
        Some((cut, _)) => format!("{}…", &body[..cut]),
        None => body.to_string(),
    }
}

/// A conversation with a server: stateless on this side.
pub struct HttpConversation<'a> {
    backend: &'a HttpBackend,
}

impl Conversation for HttpConversation<'_> {
    fn render(&self, messages: &[Message]) -> Option<String> {
        self.counter()?.render(messages).ok()
    }

    /// Known only when the prompts can be counted too: the agents budget a
    /// prompt only when both are.
    fn context_size(&self) -> Option<usize> {
        self.backend.budgeted().map(|(_, c)| c)
    }

    fn count_tokens(&self, messages: &[Message]) -> Result<usize, EngineError> {
        self.count(messages)
    }

    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        let backend = self.backend;
        // A prompt that cannot fit is refused here, as the local engine
        // refuses it, so the agents squeeze their history before the
        // server sees it.
        if let Some((counter, context)) = backend.budgeted() {
            let prompt = counter
                .tokens(request.messages)
                .map_err(|e| EngineError::Settings(format!("counting the prompt's tokens: {e}")))?
                .len();
            check_fits(prompt, request.sampling.max_tokens as usize, context)?;
        }
        let started = Instant::now();
        let n = request.n.max(1);
        let mut slots: Vec<Option<(Candidate, usize)>> = (0..n).map(|_| None).collect();
        let mut prompt_tokens = 0;
        let mut cached_tokens = None;
        let one_each = !backend.dialect.n || backend.n_refused.load(Ordering::Relaxed);
        for group in temperature_groups(request) {
            let batches: Vec<Vec<usize>> = if one_each {
                group.iter().map(|&i| vec![i]).collect()
            } else {
                vec![group]
            };
            for batch in batches {
                let parsed = backend.ask(request, &batch)?;
                prompt_tokens = parsed.prompt_tokens;
                cached_tokens.get_or_insert(parsed.cached_tokens);
                let got = parsed.candidates.len();
                for ((&i, c), g) in batch.iter().zip(parsed.candidates).zip(parsed.generated) {
                    slots[i] = Some((c, g));
                }
                // The server gave fewer choices than asked (it ignores `n`):
                // the rest one per request, each with its own seed.
                for &i in batch.iter().skip(got) {
                    let mut one = backend.ask(request, &[i])?;
                    if let (Some(c), Some(g)) = (one.candidates.pop(), one.generated.pop()) {
                        slots[i] = Some((c, g));
                    }
                }
            }
        }
        let mut candidates = Vec::with_capacity(n);
        let mut generated = Vec::with_capacity(n);
        for (i, slot) in slots.into_iter().enumerate() {
            let (c, g) = slot.ok_or_else(|| EngineError::Http {
                url: format!("{}/v1/chat/completions", backend.base_url),
                message: format!("the server returned no choice for candidate {}", i + 1),
            })?;
            candidates.push(c);
            generated.push(g);
        }
        let reused = cached_tokens.unwrap_or(0);
        let total_s = started.elapsed().as_secs_f64();
        Ok(Generation {
            candidates,
            stats: Stats {
                prompt_tokens,
                prompt_tokens_evaluated: prompt_tokens - reused.min(prompt_tokens),
                prompt_tokens_reused: reused.min(prompt_tokens),
                generated_tokens: generated,
                draft_tokens: 0,
                draft_accepted: 0,
                grammar: Default::default(),
                prompt_s: 0.0,
                decode_s: total_s,
                total_s,
            },
        })
    }
}

impl HttpConversation<'_> {
    /// The tokenizer, when the prompts are budgeted.
    fn counter(&self) -> Option<&ChatTokenizer> {
        self.backend.budgeted().map(|(c, _)| c)
    }
}

impl HttpConversation<'_> {
    fn count(&self, messages: &[Message]) -> Result<usize, EngineError> {
        let counter = self.counter().ok_or(EngineError::Unsupported {
            what: "count a prompt's tokens",
        })?;
        counter
            .tokens(messages)
            .map(|t| t.len())
            .map_err(|e| EngineError::Settings(format!("counting the prompt's tokens: {e}")))
    }
}

impl super::Backend for HttpBackend {
    fn conversation(
        &self,
        _n_seq_max: usize,
        _reply_tokens: usize,
    ) -> Result<Box<dyn Conversation + '_>, EngineError> {
        Ok(Box::new(HttpConversation { backend: self }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, Sampling};
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A server on loopback answering one connection per reply in
    /// `replies` (status line and body), then stopping; the handle returns
    /// the requests it read (head and body).
    fn serve(
        replies: Vec<(&'static str, &'static str)>,
    ) -> Result<(String, std::thread::JoinHandle<Vec<String>>), std::io::Error> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        listener.set_nonblocking(true)?;
        let handle = std::thread::spawn(move || {
            let mut seen = Vec::new();
            // A client that makes fewer connections than expected must not
            // hang the test: wait at most this long for each.
            let patience = Duration::from_secs(10);
            for (status, body) in replies {
                let waiting = Instant::now();
                let stream = loop {
                    match listener.accept() {
                        Ok((stream, _)) => break Some(stream),
                        Err(_) if waiting.elapsed() < patience => {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        Err(_) => break None,
                    }
                };
                let Some(stream) = stream else {
                    break;
                };
                let _ = stream.set_nonblocking(false);
                let mut reader = BufReader::new(stream);
                let mut head = String::new();
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    head.push_str(&line);
                }
                let mut request_body = vec![0; length];
                let _ = reader.read_exact(&mut request_body);
                seen.push(format!(
                    "{head}\r\n{}",
                    String::from_utf8_lossy(&request_body)
                ));
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = reader.get_mut().write_all(reply.as_bytes());
            }
            seen
        });
        Ok((url, handle))
    }

    fn settings(kind: ServerKind) -> ServerSettings {
        ServerSettings {
            kind,
            retries: 0,
            ..ServerSettings::default()
        }
    }

    fn sampling() -> Sampling {
        Sampling {
            temperature: 0.7,
            top_p: 0.95,
            min_p: 0.0,
            seed: 10,
            max_tokens: 64,
        }
    }

    const GBNF: &str = "root ::= \"yes\" | \"no\"";

    /// The exact body for each kind, a grammar and N = 4.
    #[test]
    fn request_bodies_per_dialect() {
        let messages = [Message::system("Be brief."), Message::user("Is it?")];
        let request = Request {
            n: 4,
            grammar: Some(GBNF),
            ..Request::new(&messages, sampling())
        };
        let base = serde_json::json!({
            "model": "qwen",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Is it?"}
            ],
            "temperature": 0.7f32,
            "top_p": 0.95f32,
            "seed": 10,
            "max_tokens": 64,
            "n": 4,
        });
        let with = |key: &str, value: serde_json::Value| {
            let mut b = base.clone();
            if !value.is_null() {
                b[key] = value;
            }
            b
        };
        let vllm_old = Dialect {
            grammar: GrammarField::GuidedGrammar,
            ..Dialect::of(ServerKind::Vllm)
        };
        let cases = [
            (
                Dialect::of(ServerKind::LlamaCpp),
                with("grammar", GBNF.into()),
            ),
            (
                Dialect::of(ServerKind::Vllm),
                with("structured_outputs", serde_json::json!({ "grammar": GBNF })),
            ),
            (vllm_old, with("guided_grammar", GBNF.into())),
            (Dialect::of(ServerKind::Sglang), with("ebnf", GBNF.into())),
            (Dialect::of(ServerKind::Openai), base.clone()),
        ];
        for (dialect, expected) in cases {
            let body = request_body(&dialect, "qwen", &request, &[0, 1, 2, 3], request.grammar);
            assert_eq!(body, expected, "{dialect:?}");
        }
    }

    #[test]
    fn candidates_are_grouped_by_temperature() {
        let messages = [Message::user("x")];
        /// Candidates, their temperatures, the groups expected.
        type Case = (usize, Option<Vec<f32>>, Vec<Vec<usize>>);
        let cases: [Case; 4] = [
            (4, None, vec![vec![0, 1, 2, 3]]),
            (1, None, vec![vec![0]]),
            (
                4,
                Some(vec![0.2, 0.8, 0.2, 0.8]),
                vec![vec![0, 2], vec![1, 3]],
            ),
            // Candidates past the list use the sampling's temperature.
            (3, Some(vec![0.0]), vec![vec![0], vec![1, 2]]),
        ];
        for (n, temperatures, expected) in cases {
            let request = Request {
                n,
                temperatures: temperatures.clone(),
                ..Request::new(&messages, sampling())
            };
            assert_eq!(temperature_groups(&request), expected, "{temperatures:?}");
        }
        // The second group's body: its first candidate's seed and temperature.
        let request = Request {
            n: 4,
            temperatures: Some(vec![0.2, 0.8, 0.2, 0.8]),
            ..Request::new(&messages, sampling())
        };
        let body = request_body(&Dialect::of(ServerKind::Vllm), "m", &request, &[1, 3], None);
        assert_eq!(body["seed"], 11);
        assert_eq!(body["temperature"], serde_json::json!(0.8f32));
        assert_eq!(body["n"], 2);
    }

    /// vLLM's chat completion as its OpenAI-compatible server writes it
    /// (`ChatCompletionResponse` in `vllm/entrypoints/openai/protocol.py`).
    const VLLM_REPLY: &str = r#"{
      "id": "chatcmpl-9f1c", "object": "chat.completion", "created": 1733100000,
      "model": "Qwen/Qwen2.5-Coder-7B-Instruct",
      "choices": [
        {"index": 1, "message": {"role": "assistant", "content": "no", "reasoning_content": null, "tool_calls": []},
         "logprobs": null, "finish_reason": "stop", "stop_reason": null},
        {"index": 0, "message": {"role": "assistant", "content": "yes", "reasoning_content": null, "tool_calls": []},
         "logprobs": null, "finish_reason": "stop", "stop_reason": null},
        {"index": 2, "message": {"role": "assistant", "content": "yesyesyesyes", "tool_calls": []},
         "logprobs": null, "finish_reason": "length", "stop_reason": null}
      ],
      "usage": {"prompt_tokens": 31, "total_tokens": 41, "completion_tokens": 10,
                "prompt_tokens_details": {"cached_tokens": 16}},
      "prompt_logprobs": null, "kv_transfer_params": null
    }"#;

    /// SGLang's (`ChatCompletionResponse` in
    /// `sglang/srt/entrypoints/openai/protocol.py`): `matched_stop`, and
    /// `prompt_tokens_details` null without `--enable-cache-report`.
    const SGLANG_REPLY: &str = r#"{
      "id": "4f6d2c", "object": "chat.completion", "created": 1733100000,
      "model": "default",
      "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "no", "reasoning_content": null, "tool_calls": null},
         "logprobs": null, "finish_reason": "stop", "matched_stop": 151645},
        {"index": 1, "message": {"role": "assistant", "content": "yes", "reasoning_content": null, "tool_calls": null},
         "logprobs": null, "finish_reason": "stop", "matched_stop": 151645}
      ],
      "usage": {"prompt_tokens": 25, "total_tokens": 29, "completion_tokens": 4, "prompt_tokens_details": null},
      "metadata": {"weight_version": "default"}
    }"#;

    #[test]
    fn replies_are_parsed() -> TestResult {
        let cases = [
            (
                VLLM_REPLY,
                vec![
                    ("yes", Stop::EndOfText),
                    ("no", Stop::EndOfText),
                    ("yesyesyesyes", Stop::MaxTokens),
                ],
                vec![1, 1, 8],
                31,
                16,
            ),
            (
                SGLANG_REPLY,
                vec![("no", Stop::EndOfText), ("yes", Stop::EndOfText)],
                vec![2, 2],
                25,
                0,
            ),
        ];
        for (text, expected, generated, prompt, cached) in cases {
            let parsed = parse_reply(text, 8)?;
            let got: Vec<(&str, Stop)> = parsed
                .candidates
                .iter()
                .map(|c| (c.text.as_str(), c.stop))
                .collect();
            assert_eq!(got, expected);
            assert_eq!(parsed.generated, generated);
            assert_eq!(
                (parsed.prompt_tokens, parsed.cached_tokens),
                (prompt, cached)
            );
        }
        assert_eq!(
            parse_reply(r#"{"choices": []}"#, 8).err(),
            Some(BadReply::NoUsage)
        );
        Ok(())
    }

    #[test]
    fn token_totals_are_split_exactly() {
        let c = |text: &str, stop| Candidate {
            text: text.into(),
            tokens: Vec::new(),
            stop,
        };
        let end = Stop::EndOfText;
        let cases = [
            (vec![c("abc", end)], 7, vec![7]),
            (vec![c("ab", end), c("abcdef", end)], 10, vec![3, 7]),
            (
                vec![c("a", end), c("a", end), c("a", end)],
                10,
                vec![4, 3, 3],
            ),
            (vec![c("yes", end), c("no", end)], 2, vec![1, 1]),
            (vec![c("x", Stop::MaxTokens), c("ab", end)], 70, vec![64, 6]),
        ];
        for (candidates, total, expected) in cases {
            let split = split_tokens(&candidates, total, 64);
            assert_eq!(split, expected);
            assert_eq!(split.iter().sum::<usize>(), total);
        }
    }

    #[test]
    fn context_errors_become_too_long() {
        // (error body, prompt tokens, context) as each server words it.
        let cases = [
            // vLLM, current.
            (
                r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}"#,
                5000,
                4096,
            ),
            // vLLM before 0.8 and llama-cpp-python.
            (
                r#"{"error":{"message":"This model's maximum context length is 2048 tokens. However, you requested 3016 tokens (3000 in the messages, 16 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
                3000,
                2048,
            ),
            // llama.cpp's server.
            (
                r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#,
                9000,
                8192,
            ),
            // SGLang.
            (
                r#"{"object":"error","message":"The input (40000 tokens) is longer than the model's context length (32768 tokens).","type":"BadRequestError","param":null,"code":400}"#,
                40000,
                32768,
            ),
            (
                r#"{"object":"error","message":"Requested token count exceeds the model's maximum context length of 32768 tokens. You requested a total of 33000 tokens: 32000 tokens from the input messages and 1000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","code":400}"#,
                32000,
                32768,
            ),
            // Older vLLM.
            (
                r#"{"message":"The decoder prompt (length 9001) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens."}"#,
                9001,
                8192,
            ),
        ];
        for (body, prompt, context) in cases {
            assert!(is_context_error(body), "{body}");
            match too_long(body, 64) {
                EngineError::TooLong {
                    prompt: p,
                    reserved,
                    needed,
                    context: c,
                    over,
                } => {
                    assert_eq!((p, c, reserved), (prompt, context, 64), "{body}");
                    assert_eq!(needed, prompt + 64);
                    assert_eq!(over, (prompt + 64).saturating_sub(context));
                }
                other => panic!("{other}"),
            }
        }
        assert!(!is_context_error(
            r#"{"error":{"message":"model not found","code":404}}"#
        ));
    }

    #[test]
    fn a_context_error_from_the_server_is_too_long() -> TestResult {
        let (url, server) = serve(vec![
            ("404 Not Found", r#"{"detail":"Not Found"}"#),
            (
                "400 Bad Request",
                r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens.","type":"BadRequestError","code":400}"#,
            ),
        ])?;
        let backend = HttpBackend::new(&url, "m", &settings(ServerKind::Vllm))?;
        let messages = [Message::user("long")];
        let result = super::super::Backend::conversation(&backend, 1, 64)?.generate(&Request {
            grammar: Some(GBNF),
            ..Request::new(&messages, sampling())
        });
        match result {
            Err(EngineError::TooLong {
                prompt, context, ..
            }) => assert_eq!((prompt, context), (5000, 4096)),
            other => panic!("expected TooLong, got {:?}", other.map(|g| g.stats)),
        }
        // GET /version (unknown: the current field), then the request.
        let seen = server.join().map_err(|_| "server thread")?;
        assert_eq!(seen.len(), 2);
        assert!(seen[0].starts_with("GET /version "), "{}", seen[0]);
        assert!(
            seen[1].contains(r#""structured_outputs":{"grammar":"root ::="#),
            "{}",
            seen[1]
        );
        Ok(())
    }

    const ONE_CHOICE: &str = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"yes"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1}}"#;

    #[test]
    fn retries_after_503_then_succeeds() -> TestResult {
        let (url, server) = serve(vec![
            ("503 Service Unavailable", r#"{"error":"loading"}"#),
            ("200 OK", ONE_CHOICE),
        ])?;
        let backend = HttpBackend::with_key(
            &url,
            "m",
            &ServerSettings {
                retries: 2,
                ..settings(ServerKind::LlamaCpp)
            },
            Some("sekret".into()),
        )?;
        let messages = [Message::user("hi")];
        let started = Instant::now();
        let g = super::super::Backend::conversation(&backend, 1, 64)?
            .generate(&Request::new(&messages, sampling()))?;
        assert_eq!(g.candidates[0].text, "yes");
        assert_eq!(g.stats.generated_tokens, vec![1]);
        assert!(started.elapsed() >= BACKOFF_FIRST);
        let seen = server.join().map_err(|_| "server thread")?;
        assert_eq!(seen.len(), 2);
        for request in &seen {
            assert!(
                request.starts_with("POST /v1/chat/completions "),
                "{request}"
            );
            assert!(
                request
                    .lines()
                    .any(|l| l.eq_ignore_ascii_case("authorization: Bearer sekret")),
                "{request}"
            );
        }
        Ok(())
    }

    #[test]
    fn gives_up_after_the_retries() -> TestResult {
        let (url, server) = serve(vec![
            (
                "429 Too Many Requests\r\nRetry-After: 0",
                r#"{"error":"busy"}"#,
            ),
            ("502 Bad Gateway", r#"{"error":"upstream"}"#),
        ])?;
        let backend = HttpBackend::with_key(
            &url,
            "m",
            &ServerSettings {
                retries: 1,
                ..settings(ServerKind::Sglang)
            },
            None,
        )?;
        let messages = [Message::user("hi")];
        let result = super::super::Backend::conversation(&backend, 1, 64)?
            .generate(&Request::new(&messages, sampling()));
        match result {
            Err(EngineError::Http { message, .. }) => {
                assert_eq!(message, r#"status 502: {"error":"upstream"}"#)
            }
            other => panic!("expected an HTTP error, got {:?}", other.map(|g| g.stats)),
        }
        let seen = server.join().map_err(|_| "server thread")?;
        assert_eq!(seen.len(), 2);
        assert!(!seen[0].to_lowercase().contains("authorization"));
        Ok(())
    }

    #[test]
    fn fewer_choices_than_asked_are_completed_one_by_one() -> TestResult {
        let (url, server) = serve(vec![
            ("200 OK", ONE_CHOICE),
            ("200 OK", ONE_CHOICE),
            ("200 OK", ONE_CHOICE),
        ])?;
        let backend = HttpBackend::with_key(&url, "m", &settings(ServerKind::LlamaCpp), None)?;
        let messages = [Message::user("hi")];
        let g = super::super::Backend::conversation(&backend, 3, 64)?.generate(&Request {
            n: 3,
            ..Request::new(&messages, sampling())
        })?;
        assert_eq!(g.candidates.len(), 3);
        assert_eq!(g.stats.generated_tokens, vec![1, 1, 1]);
        let seen = server.join().map_err(|_| "server thread")?;
        let asked: Vec<(serde_json::Value, serde_json::Value)> = seen
            .iter()
            .map(|r| {
                let body: serde_json::Value =
                    serde_json::from_str(r.split("\r\n\r\n").nth(1).unwrap_or("null"))
                        .unwrap_or_default();
                (body["n"].clone(), body["seed"].clone())
            })
            .collect();
        let expected: Vec<(serde_json::Value, serde_json::Value)> = [(3, 10), (1, 11), (1, 12)]
            .iter()
            .map(|&(n, s)| (n.into(), s.into()))
            .collect();
        assert_eq!(asked, expected);
        Ok(())
    }

    #[test]
    fn both_of_llama_cpps_refusals_of_n_are_recognised() {
        for (body, refused) in [
            (
                r#"{"error":{"code":500,"message":"Only one completion choice is allowed","type":"server_error"}}"#,
                true,
            ),
            (
                r#"{"error":{"code":400,"message":"Field 'n': Value must be between 1 <= value <= 1, but got 4","type":"invalid_request_error"}}"#,
                true,
            ),
            (
                r#"{"error":{"code":400,"message":"Field 'max_tokens': Value must be between 1 <= value <= 1, but got 4","type":"invalid_request_error"}}"#,
                false,
            ),
            (
                r#"{"error":{"code":400,"message":"request (3031 tokens) exceeds the available context size (2048 tokens)","type":"exceed_context_size_error"}}"#,
                false,
            ),
        ] {
            assert_eq!(super::refuses_n(body), refused, "{body}");
        }
    }

    #[test]
    fn a_server_refusing_n_is_asked_one_by_one() -> TestResult {
        let (url, server) = serve(vec![
            (
                "500 Internal Server Error",
                r#"{"error":{"code":500,"message":"Only one completion choice is allowed","type":"server_error"}}"#,
            ),
            ("200 OK", ONE_CHOICE),
            ("200 OK", ONE_CHOICE),
            ("200 OK", ONE_CHOICE),
        ])?;
        let backend = HttpBackend::with_key(
            &url,
            "m",
            &ServerSettings {
                retries: 3,
                ..settings(ServerKind::LlamaCpp)
            },
            None,
        )?;
        let messages = [Message::user("hi")];
        let request = Request {
            n: 2,
            ..Request::new(&messages, sampling())
        };
        let mut conversation = super::super::Backend::conversation(&backend, 2, 64)?;
        assert_eq!(conversation.generate(&request)?.candidates.len(), 2);
        // Remembered: the next call asks one candidate per request at once.
        let single = Request::new(&messages, sampling());
        assert_eq!(conversation.generate(&single)?.candidates.len(), 1);
        let seen = server.join().map_err(|_| "server thread")?;
        let ns: Vec<serde_json::Value> = seen
            .iter()
            .map(|r| {
                serde_json::from_str::<serde_json::Value>(
                    r.split("\r\n\r\n").nth(1).unwrap_or("null"),
                )
                .map(|b| b["n"].clone())
                .unwrap_or_default()
            })
            .collect();
        assert_eq!(ns, [2, 1, 1, 1].map(serde_json::Value::from));
        Ok(())
    }

    #[test]
    fn servers_are_recognised() -> TestResult {
        let vllm_models = r#"{"object":"list","data":[{"id":"Qwen/Qwen2.5-7B","object":"model","created":1,"owned_by":"vllm","root":"Qwen/Qwen2.5-7B","parent":null,"max_model_len":32768,"permission":[]}]}"#;
        let cases: [(Vec<(&'static str, &'static str)>, Dialect); 6] = [
            (
                vec![
                    ("200 OK", vllm_models),
                    ("200 OK", r#"{"version":"0.11.0"}"#),
                ],
                Dialect::of(ServerKind::Vllm),
            ),
            (
                vec![
                    ("200 OK", vllm_models),
                    ("200 OK", r#"{"version":"0.9.2"}"#),
                ],
                Dialect {
                    grammar: GrammarField::GuidedGrammar,
                    ..Dialect::of(ServerKind::Vllm)
                },
            ),
            (
                vec![(
                    "200 OK",
                    r#"{"object":"list","data":[{"id":"default","object":"model","created":1,"owned_by":"sglang","root":"default","max_model_len":32768}]}"#,
                )],
                Dialect::of(ServerKind::Sglang),
            ),
            (
                vec![(
                    "200 OK",
                    r#"{"object":"list","data":[{"id":"m.gguf","object":"model","created":1,"owned_by":"llamacpp","meta":{"n_ctx_train":32768}}]}"#,
                )],
                Dialect::of(ServerKind::LlamaCpp),
            ),
            (
                vec![(
                    "200 OK",
                    r#"{"object":"list","data":[{"id":"m.gguf","object":"model","owned_by":"me","permissions":[]}]}"#,
                )],
                Dialect {
                    n: false,
                    ..Dialect::of(ServerKind::LlamaCpp)
                },
            ),
            (
                vec![
                    ("404 Not Found", r#"{"detail":"Not Found"}"#),
                    ("404 Not Found", r#"{"detail":"Not Found"}"#),
                ],
                Dialect::of(ServerKind::Openai),
            ),
        ];
        for (replies, expected) in cases {
            let (url, server) = serve(replies)?;
            let backend = HttpBackend::with_key(&url, "m", &settings(ServerKind::Auto), None)?;
            assert_eq!(backend.dialect(), expected);
            server.join().map_err(|_| "server thread")?;
        }
        Ok(())
    }

    #[test]
    fn backoff_doubles_to_a_cap_and_honours_retry_after() {
        let cases = [
            (0, None, Duration::from_millis(500)),
            (1, None, Duration::from_secs(1)),
            (3, None, Duration::from_secs(4)),
            (10, None, BACKOFF_MAX),
            (40, None, BACKOFF_MAX),
            (0, Some(Duration::from_secs(7)), Duration::from_secs(7)),
            (0, Some(Duration::from_secs(3600)), RETRY_AFTER_MAX),
        ];
        for (attempt, retry_after, expected) in cases {
            assert_eq!(
                backoff(attempt, retry_after),
                expected,
                "{attempt} {retry_after:?}"
            );
        }
    }

    #[test]
    fn versions_and_kinds_parse() {
        assert_eq!(parse_version("0.10.2"), Some((0, 10, 2)));
        assert_eq!(parse_version("0.11.0rc1"), Some((0, 11, 0)));
        assert_eq!(parse_version("v1.2"), Some((1, 2, 0)));
        assert_eq!(parse_version("dev"), None);
        for kind in ["auto", "llama-cpp", "vllm", "sglang", "openai"] {
            assert_eq!(kind.parse::<ServerKind>().map(|k| k.name()), Ok(kind));
        }
        assert!("tgi".parse::<ServerKind>().is_err());
        let parsed: Result<ServerSettings, _> =
            toml::from_str("kind = \"sglang\"\napi_key_env = \"SGLANG_KEY\"\nread_timeout_s = 600");
        assert_eq!(
            parsed.ok(),
            Some(ServerSettings {
                kind: ServerKind::Sglang,
                api_key_env: Some("SGLANG_KEY".into()),
                read_timeout_s: 600,
                ..ServerSettings::default()
            })
        );
    }

    #[test]
    fn a_missing_key_variable_is_refused() {
        let result = HttpBackend::new(
            "http://127.0.0.1:9",
            "m",
            &ServerSettings {
                api_key_env: Some("PATCHWRIGHT_TEST_NO_SUCH_KEY_VAR".into()),
                ..settings(ServerKind::Openai)
            },
        );
        match result {
            Err(EngineError::Http { message, .. }) => assert_eq!(
                message,
                "the API key variable PATCHWRIGHT_TEST_NO_SUCH_KEY_VAR (server.api_key_env) is not set or empty: export it, or remove api_key_env"
            ),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("a backend without its key"),
        }
    }
}
