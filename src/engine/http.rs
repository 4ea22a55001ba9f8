//! An OpenAI-compatible chat-completions client (`POST /v1/chat/completions`),
//! so many runners can share one inference server (llama.cpp's server,
//! llama-cpp-python's, vLLM) when one machine is not enough.
//!
//! Each candidate is its own request with `n = 1` and seed `seed + i`: not
//! every compatible server implements `n` (llama-cpp-python's answers with
//! one choice), and one request per candidate gives each its exact token
//! count. A server with a prompt cache (llama.cpp's, llama-cpp-python's)
//! still evaluates the shared prompt once. A grammar is passed as the
//! `grammar` field, which llama.cpp-based servers honour. The server's KV
//! reuse is not visible to the client: `prompt_tokens_reused` is 0.
//! Plain `http://` only.

use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{Candidate, Conversation, EngineError, Generation, Request, Stats, Stop};

/// How long one request may take: a long reply from a busy server on a CPU
/// can take minutes, but not an hour.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// A server and the model name to ask it for.
pub struct HttpBackend {
    base_url: String,
    model: String,
    agent: ureq::Agent,
}

#[derive(Deserialize)]
struct Reply {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: usize,
    completion_tokens: usize,
}

impl HttpBackend {
    /// `base_url` is the server's root, e.g. `http://127.0.0.1:8080`.
    pub fn new(base_url: &str, model: &str) -> Result<Self, EngineError> {
        let base_url = base_url
            .trim_end_matches('/')
            .trim_end_matches("/v1")
            .to_string();
        if !base_url.starts_with("http://") {
            return Err(EngineError::Http {
                url: base_url,
                message: "only plain http:// servers are supported".into(),
            });
        }
        Ok(HttpBackend {
            base_url,
            model: model.into(),
            agent: ureq::AgentBuilder::new().timeout(REQUEST_TIMEOUT).build(),
        })
    }

    fn one(&self, request: &Request<'_>, i: usize) -> Result<(Candidate, Usage), EngineError> {
        let url = format!("{}/v1/chat/completions", self.base_url);
        let err = |message: String| EngineError::Http {
            url: url.clone(),
            message,
        };
        let temperature = request
            .temperatures
            .as_ref()
            .and_then(|t| t.get(i).copied())
            .unwrap_or(request.sampling.temperature);
        let mut body = serde_json::json!({
            "model": self.model,
            "messages": request.messages,
            "temperature": temperature,
            "top_p": request.sampling.top_p,
            "seed": request.sampling.seed.wrapping_add(i as u32),
            "max_tokens": request.sampling.max_tokens,
            "n": 1,
        });
        if let Some(g) = request.grammar {
            body["grammar"] = g.into();
        }
        let reply: Reply = match self.agent.post(&url).send_json(body) {
            Ok(r) => r
                .into_json()
                .map_err(|e| err(format!("the reply is not a chat completion: {e}")))?,
            Err(ureq::Error::Status(code, r)) => {
                let text = r.into_string().unwrap_or_default();
                return Err(err(format!("status {code}: {}", text.trim())));
            }
            Err(e) => return Err(err(format!("{e} (is the server running?)"))),
        };
        let usage = reply
            .usage
            .ok_or_else(|| err("the reply has no usage (token counts)".into()))?;
        let choice = reply
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| err("the reply has no choices".into()))?;
        let stop = match choice.finish_reason.as_deref() {
            Some("length") => Stop::MaxTokens,
            _ => Stop::EndOfText,
        };
        Ok((
            Candidate {
                text: choice.message.content.unwrap_or_default(),
                tokens: Vec::new(),
                stop,
            },
            usage,
        ))
    }
}

/// A conversation with a server: stateless on this side.
pub struct HttpConversation<'a> {
    backend: &'a HttpBackend,
}

impl Conversation for HttpConversation<'_> {
    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        let started = Instant::now();
        let mut candidates = Vec::new();
        let mut generated = Vec::new();
        let mut prompt_tokens = 0;
        for i in 0..request.n.max(1) {
            let (candidate, usage) = self.backend.one(request, i)?;
            prompt_tokens = usage.prompt_tokens;
            generated.push(usage.completion_tokens);
            candidates.push(candidate);
        }
        let total_s = started.elapsed().as_secs_f64();
        Ok(Generation {
            candidates,
            stats: Stats {
                prompt_tokens,
                prompt_tokens_evaluated: prompt_tokens,
                prompt_tokens_reused: 0,
                generated_tokens: generated,
                prompt_s: 0.0,
                decode_s: total_s,
                total_s,
            },
        })
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
