//! The model answering a run's calls: the scheduler over the embedded
//! engine (loaded once), or an inference server in its dialect
//! ([`crate::engine::http`]); and the one-request
//! path of `patchwright generate`.

use std::path::Path;

use crate::engine::candle::CandleEngine;
use crate::engine::http::{HttpBackend, ServerSettings};
use crate::engine::scheduler::{conversations_within, Meter};
use crate::engine::{
    serve, Backend, Engine, EngineError, EngineKind, EngineSettings, Generation, Message, Request,
    Sampling, Slots,
};
use crate::models::{self, ModelError, ModelRef};

/// Tasks in flight when `--jobs` is not given and the model runs on the
/// CPU (or a server). On the 2-core machine of BENCHMARKS.md
/// ("Scheduler") the demo batch keeps the model 98.5% busy with one task;
/// more pay where the model waits (`model_load.busy_fraction` in run.json
/// well below 1).
pub const DEFAULT_JOBS: usize = 1;

/// Most tasks in flight that `--jobs` defaults to on a GPU, however many
/// conversations the KV budget holds: each task runs its tests in sandboxes
/// on the host's CPUs, and llama.cpp decodes at most 256 sequences in one
/// context (`LLAMA_MAX_SEQ`), shared by every candidate of every task.
pub const MAX_DEFAULT_JOBS: usize = 32;

/// What a run asks of its model: tasks in flight (`--jobs`; none: the
/// default for where the model runs) and the largest call they make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    pub jobs: Option<usize>,
    /// Most candidates of one call.
    pub candidates: usize,
}

/// What a run's calls go to, while [`with_model`] holds it.
pub struct Backing<'a> {
    /// Where the pipelines' calls go.
    pub backend: &'a dyn Backend,
    /// The scheduler's busy fraction and token counters; none for a server.
    pub meter: Option<Meter>,
    /// Tasks to keep in flight: `--jobs`, or the default for where the
    /// model runs ([`jobs_for`]).
    pub jobs: usize,
}

/// Tasks in flight for `demand` on a model placed as `engine` is: the
/// asked number, else on a GPU as many conversations of the largest call
/// as the scheduler's KV budget holds (at most [`MAX_DEFAULT_JOBS`]), else
/// [`DEFAULT_JOBS`].
pub fn jobs_for(engine: &Engine, demand: Demand) -> usize {
    if let Some(jobs) = demand.jobs {
        return jobs.max(1);
    }
    let placement = engine.placement();
    if placement.gpu_layers == 0 {
        return DEFAULT_JOBS;
    }
    let limit = (256 / demand.candidates.max(1)).min(MAX_DEFAULT_JOBS);
    conversations_within(
        placement.scheduler_kv_budget,
        placement.kv_bytes_per_token,
        engine.context_size(),
        demand.candidates,
        limit,
    )
}

/// Loads `model` with `settings` (or connects to its server, speaking as
/// `server` says) and runs `body` with it; the scheduler holds the
/// conversations of `demand` (one per task in flight, each with up to that
/// many candidates).
pub fn with_model<T, E: From<EngineError>>(
    model: &ModelRef,
    settings: &EngineSettings,
    server: &ServerSettings,
    demand: Demand,
    body: impl FnOnce(&Backing<'_>) -> Result<T, E>,
) -> Result<T, E> {
    let Some(path) = &model.path else {
        let http = server_backend(&model.location, &model.spec, model.local.as_deref(), server)?;
        return body(&Backing {
            backend: &http,
            meter: None,
            jobs: demand.jobs.unwrap_or(DEFAULT_JOBS).max(1),
        });
    };
    tracing::info!("loading {}", path.display());
    if settings.kind == EngineKind::Candle {
        // No scheduler: the candle engine serves each conversation itself,
        // one call at a time.
        let engine = CandleEngine::load(path, settings)?;
        return body(&Backing {
            backend: &engine,
            meter: None,
            jobs: demand.jobs.unwrap_or(DEFAULT_JOBS).max(1),
        });
    }
    let engine = Engine::load(path, settings)?;
    let jobs = jobs_for(&engine, demand);
    if demand.jobs.is_none() && jobs != DEFAULT_JOBS {
        tracing::info!(
            "{jobs} tasks in flight: what {:.1} GiB of KV cache holds (--jobs sets it)",
            engine.placement().scheduler_kv_budget as f64 / f64::from(1u32 << 30)
        );
    }
    let slots = Slots {
        conversations: jobs,
        candidates: demand.candidates,
    };
    serve(&engine, slots, |scheduler| {
        body(&Backing {
            backend: scheduler,
            meter: Some(scheduler.meter()),
            jobs,
        })
    })?
}

/// The server at `url` serving `model`: its prompts counted with
/// `[server] tokenizer` when set, else with `local`, the GGUF file `model`
/// names here (a manifest name or a `.gguf` path, when the file is
/// present), so that they are fitted to the server's context like the
/// local engine's.
pub fn server_backend(
    url: &str,
    model: &str,
    local: Option<&Path>,
    settings: &ServerSettings,
) -> Result<HttpBackend, EngineError> {
    let mut http = HttpBackend::new(url, model, settings)?;
    if settings.tokenizer.is_none() {
        if let Some(local) = local {
            if let Err(e) = http.set_tokenizer(local) {
                tracing::warn!(
                    "the served model's file {} cannot count tokens: {e}",
                    local.display()
                );
            }
        }
    }
    Ok(http)
}

/// A model for one conversation (`patchwright generate`): with `server`,
/// the model named `model` there ("default" when none), spoken to as
/// `server_settings` say; else `model` (a manifest name in the models
/// directory `dir` or a GGUF path; none: the manifest's default) loaded
/// here with `settings`.
pub fn open<E: From<EngineError> + From<ModelError>>(
    dir: &Path,
    model: Option<&str>,
    server: Option<&str>,
    server_settings: &ServerSettings,
    settings: &EngineSettings,
) -> Result<Box<dyn Backend>, E> {
    if let Some(url) = server {
        let name = model.unwrap_or("default");
        let local = models::resolve(dir, name).ok().map(|r| r.path);
        return Ok(Box::new(server_backend(
            url,
            name,
            local.as_deref(),
            server_settings,
        )?));
    }
    let spec = match model {
        Some(m) => m.to_string(),
        None => models::default_model()?.name,
    };
    let resolved = models::resolve(dir, &spec)?;
    Ok(match settings.kind {
        EngineKind::Llama => Box::new(Engine::load(&resolved.path, settings)?),
        EngineKind::Candle => Box::new(CandleEngine::load(&resolved.path, settings)?),
    })
}

/// One request in a fresh conversation: an optional system message, then
/// `user`; `n` candidates sampled with `sampling`, each following `grammar`
/// (GBNF, root rule `root`) when given.
pub fn ask(
    backend: &dyn Backend,
    system: Option<String>,
    user: String,
    sampling: Sampling,
    n: usize,
    grammar: Option<&str>,
) -> Result<Generation, EngineError> {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(Message::system(system));
    }
    messages.push(Message::user(user));
    let max_tokens = sampling.max_tokens as usize;
    let request = Request {
        messages: &messages,
        sampling,
        n,
        temperatures: None,
        grammar,
    };
    backend.conversation(n, max_tokens)?.generate(&request)
}
