//! The scheduler: one llama.cpp context serving the conversations of many
//! tasks at once, so the model keeps working while some tasks run tests.
//!
//! A thread owns the context (one sequence per candidate of every open
//! conversation) and a queue of requests. Each step it builds one batch:
//! the next token of every candidate being decoded, across all requests,
//! then as many prompt tokens of waiting requests as fit in `[engine]
//! batch` (continuous batching, as llama.cpp's server does). A request
//! whose prompt is read has it copied to its candidates' sequences and
//! joins the decoding set in the next step. The decoding rows are one
//! forward pass: llama.cpp evaluates a batch over streams as one pass per
//! run of consecutive sequence ids with as many tokens each, so the rows
//! go in sequence order, every draft of the step is cut to one length and
//! shorter ones padded, and a sequence between two candidates' gets a
//! padding token too, dropped after the batch. The candidates are then
//! sampled in parallel.
//!
//! Conversations keep their KV cache between calls exactly as a [`Session`]
//! does: the next call evaluates only the tokens after the longest common
//! prefix. Each sequence has a KV stream of its own, the engine's context
//! long (llama.cpp's non-unified cache): attention then costs what one
//! sequence holds, where one cache shared by K tasks makes every token
//! attend over all K histories (masked) and one conversation's greedy reply
//! depend on what the others hold; in sequence order, streams measured
//! 5–10% faster at K = 4 (BENCHMARKS.md, issue 44). A candidate's stream
//! gets a copy of the prompt's.
//! A conversation is admitted when it has as many free sequences as
//! candidates, so the cache can never overflow mid-request; a task opening a
//! conversation while all are taken waits.
//!
//! [`Session`]: super::Session

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;

use super::prompt::reusable_prefix;
use super::session::{parse_grammar, shared_context};
use super::speculate::{common_draft_length, sample_batch, Decoder, DraftCount};
use super::split::micro_batches;
use super::{
    Backend, Candidate, Conversation, Engine, EngineError, Generation, GrammarChecks, Load,
    Message, Request, Sampling, Stats,
};

/// Fewest prompt tokens worth copying from another conversation's cache:
/// the copy moves a whole KV stream (the engine's context long), which
/// costs about what evaluating a few dozen tokens does on a CPU.
pub const MIN_SHARED_PREFIX: usize = 64;

/// How many conversations the scheduler holds at once, and how many
/// candidates each may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// Conversations open at once (one per task in flight).
    pub conversations: usize,
    /// Most candidates one call of a conversation may ask for.
    pub candidates: usize,
}

/// Conversations of `candidates` candidates whose streams (`context`
/// tokens each) fit `budget` bytes of KV cache at `bytes_per_token`, at
/// least 1 and at most `limit`: what `--jobs` defaults to on a GPU.
pub fn conversations_within(
    budget: u64,
    bytes_per_token: u64,
    context: usize,
    candidates: usize,
    limit: usize,
) -> usize {
    let one = (candidates.max(1) * context) as u64 * bytes_per_token;
    let fit = budget.checked_div(one).unwrap_or(u64::MAX);
    usize::try_from(fit)
        .unwrap_or(usize::MAX)
        .clamp(1, limit.max(1))
}

#[derive(Default)]
struct Counters {
    busy_us: AtomicU64,
    /// Of `busy_us`, the time spent sampling.
    sample_us: AtomicU64,
    prompt_tokens: AtomicU64,
    generated: AtomicU64,
    requests: AtomicU64,
    steps: AtomicU64,
    max_decoding: AtomicU64,
    micro_batches: AtomicU64,
    decode_steps: AtomicU64,
    decode_micro_batches: AtomicU64,
}

type ConvId = u64;

/// A conversation waiting to be admitted: its candidates, and where to send
/// its id.
type Waiting = (usize, Sender<Result<ConvId, EngineError>>);

enum Msg {
    Open {
        candidates: usize,
        reply: Sender<Result<ConvId, EngineError>>,
    },
    Generate {
        conv: ConvId,
        job: JobSpec,
        reply: Sender<Result<Generation, EngineError>>,
    },
    Close {
        conv: ConvId,
    },
}

struct JobSpec {
    prompt: Vec<LlamaToken>,
    sampling: Sampling,
    n: usize,
    temperatures: Option<Vec<f32>>,
    grammar: Option<String>,
    submitted: Instant,
}

/// The handle tasks use: a [`Backend`] whose conversations share one
/// context.
pub struct Scheduler<'e> {
    engine: &'e Engine,
    tx: Sender<Msg>,
    counters: Arc<Counters>,
    started: Instant,
    slots: Slots,
}

/// Runs `body` with a scheduler serving `engine` in a thread of its own; the
/// thread ends when `body` returns and every conversation is closed.
pub fn serve<T>(
    engine: &Engine,
    slots: Slots,
    body: impl FnOnce(&Scheduler<'_>) -> T,
) -> Result<T, EngineError> {
    let slots = Slots {
        conversations: slots.conversations.max(1),
        candidates: slots.candidates.max(1),
    };
    let streams = (slots.conversations * slots.candidates) as u64;
    let bytes = streams * engine.context_size() as u64 * engine.kv_bytes_per_token();
    let budget = engine.placement().scheduler_kv_budget;
    if bytes > budget {
        return Err(EngineError::KvBudget {
            conversations: slots.conversations,
            candidates: slots.candidates,
            context: engine.context_size(),
            bytes,
            budget,
        });
    }
    let counters = Arc::new(Counters::default());
    let (tx, rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let worker_counters = Arc::clone(&counters);
        let worker = std::thread::Builder::new()
            .name("patchwright-model".into())
            .spawn_scoped(scope, move || {
                match Worker::new(engine, slots, rx, worker_counters) {
                    Ok(mut w) => {
                        let _ = ready_tx.send(Ok(()));
                        w.run();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| EngineError::Llama {
                action: "start the model thread",
                message: e.to_string(),
            })?;
        let ready = ready_rx.recv().map_err(|_| EngineError::Llama {
            action: "start the model thread",
            message: "it stopped before creating its context".into(),
        });
        if let Err(e) = ready.and_then(|r| r) {
            let _ = worker.join();
            return Err(e);
        }
        let scheduler = Scheduler {
            engine,
            tx,
            counters,
            started: Instant::now(),
            slots,
        };
        let out = body(&scheduler);
        drop(scheduler);
        worker.join().map_err(|_| EngineError::Llama {
            action: "run the model thread",
            message: "it panicked".into(),
        })?;
        Ok(out)
    })
}

/// Reads a scheduler's [`Load`] from any thread, for as long as wanted.
#[derive(Clone)]
pub struct Meter {
    counters: Arc<Counters>,
    started: Instant,
}

impl Meter {
    /// What the model has done so far.
    pub fn load(&self) -> Load {
        let c = &self.counters;
        let wall_s = self.started.elapsed().as_secs_f64();
        let busy_s = c.busy_us.load(Ordering::Relaxed) as f64 / 1e6;
        Load {
            wall_s,
            busy_s,
            busy_fraction: if wall_s > 0.0 { busy_s / wall_s } else { 0.0 },
            prompt_tokens_evaluated: c.prompt_tokens.load(Ordering::Relaxed),
            generated_tokens: c.generated.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            steps: c.steps.load(Ordering::Relaxed),
            max_decoding: c.max_decoding.load(Ordering::Relaxed),
            sampling_s: c.sample_us.load(Ordering::Relaxed) as f64 / 1e6,
            micro_batches: c.micro_batches.load(Ordering::Relaxed),
            decode_steps: c.decode_steps.load(Ordering::Relaxed),
            decode_micro_batches: c.decode_micro_batches.load(Ordering::Relaxed),
        }
    }
}

impl Scheduler<'_> {
    pub fn meter(&self) -> Meter {
        Meter {
            counters: Arc::clone(&self.counters),
            started: self.started,
        }
    }

    /// What the model has done so far.
    pub fn load(&self) -> Load {
        self.meter().load()
    }

    pub fn engine(&self) -> &Engine {
        self.engine
    }

    fn stopped() -> EngineError {
        EngineError::Llama {
            action: "reach the model thread",
            message: "it has stopped".into(),
        }
    }
}

impl Backend for Scheduler<'_> {
    fn conversation(
        &self,
        n_seq_max: usize,
        reply_tokens: usize,
    ) -> Result<Box<dyn Conversation + '_>, EngineError> {
        let candidates = n_seq_max.max(1);
        if candidates > self.slots.candidates {
            return Err(EngineError::Llama {
                action: "open a conversation",
                message: format!(
                    "{candidates} candidates (of {reply_tokens} tokens) asked of a scheduler \
                     made for {}",
                    self.slots.candidates
                ),
            });
        }
        let (reply, rx) = mpsc::channel();
        self.tx
            .send(Msg::Open { candidates, reply })
            .map_err(|_| Self::stopped())?;
        let id = rx.recv().map_err(|_| Self::stopped())??;
        Ok(Box::new(Shared {
            scheduler: self,
            id,
            candidates,
        }))
    }

    fn placement(&self) -> Option<&super::Placement> {
        Some(self.engine.placement())
    }
}

/// A conversation held by the scheduler's thread.
struct Shared<'s, 'e> {
    scheduler: &'s Scheduler<'e>,
    id: ConvId,
    candidates: usize,
}

impl Conversation for Shared<'_, '_> {
    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        let engine = self.scheduler.engine;
        let n = request.n.max(1);
        if n > self.candidates {
            return Err(EngineError::Llama {
                action: "generate",
                message: format!(
                    "{n} candidates asked of a conversation made for {}",
                    self.candidates
                ),
            });
        }
        let prompt = engine.tokenize(&engine.render(request.messages)?);
        // Each candidate's stream holds the prompt and its reply.
        engine.check_fits(prompt.len(), request.sampling.max_tokens as usize)?;
        let (reply, rx) = mpsc::channel();
        self.scheduler
            .tx
            .send(Msg::Generate {
                conv: self.id,
                job: JobSpec {
                    prompt,
                    sampling: request.sampling.clone(),
                    n,
                    temperatures: request.temperatures.clone(),
                    grammar: request.grammar.map(str::to_string),
                    submitted: Instant::now(),
                },
                reply,
            })
            .map_err(|_| Scheduler::stopped())?;
        rx.recv().map_err(|_| Scheduler::stopped())?
    }

    fn render(&self, messages: &[Message]) -> Option<String> {
        self.scheduler.engine.render(messages).ok()
    }

    fn context_size(&self) -> Option<usize> {
        Some(self.scheduler.engine.context_size())
    }

    fn count_tokens(&self, messages: &[Message]) -> Result<usize, EngineError> {
        self.scheduler.engine.count_tokens(messages)
    }
}

impl Drop for Shared<'_, '_> {
    fn drop(&mut self) {
        let _ = self.scheduler.tx.send(Msg::Close { conv: self.id });
    }
}

fn llama(action: &'static str) -> impl Fn(&dyn std::fmt::Display) -> EngineError {
    move |e| EngineError::Llama {
        action,
        message: e.to_string(),
    }
}

/// An open conversation on the worker's side.
struct Conv {
    /// Its sequences: the first holds the conversation, the others the
    /// extra candidates of a call.
    seqs: Vec<i32>,
    /// Tokens the first sequence holds, in order.
    cached: Vec<LlamaToken>,
    busy: bool,
}

/// One sequence's rows of a decoding batch: its tokens from position
/// `pos`, the first `real` of them evaluated for their logits (the rest
/// padding, dropped after the batch), and the candidate it decodes, if any.
struct Row {
    seq: i32,
    pos: usize,
    tokens: Vec<LlamaToken>,
    real: usize,
    candidate: Option<(usize, usize)>,
}

/// A call being served.
struct Job {
    conv: ConvId,
    seqs: Vec<i32>,
    prompt: Vec<LlamaToken>,
    /// Next prompt position to evaluate; `prompt.len()` once read.
    next: usize,
    reused: usize,
    max_tokens: usize,
    /// One per candidate.
    decoders: Vec<Decoder>,
    submitted: Instant,
    prompt_done: Option<Instant>,
    reply: Sender<Result<Generation, EngineError>>,
}

struct Worker<'e> {
    engine: &'e Engine,
    ctx: LlamaContext<'e>,
    rx: Receiver<Msg>,
    counters: Arc<Counters>,
    free_seqs: Vec<i32>,
    convs: BTreeMap<ConvId, Conv>,
    next_id: ConvId,
    waiting: VecDeque<Waiting>,
    jobs: Vec<Job>,
    batch: LlamaBatch<'static>,
    /// Free sequences that still hold a closed conversation's cache, and
    /// the tokens they hold: the next conversation given the sequence
    /// starts from it, and any conversation may copy a shared prefix
    /// from it until then.
    parked: BTreeMap<i32, Vec<LlamaToken>>,
}

impl<'e> Worker<'e> {
    fn new(
        engine: &'e Engine,
        slots: Slots,
        rx: Receiver<Msg>,
        counters: Arc<Counters>,
    ) -> Result<Self, EngineError> {
        let seqs = slots.conversations * slots.candidates;
        let ctx = shared_context(engine, seqs * engine.context_size(), seqs, false)?;
        // Decoding tokens share the batch with prompt tokens: at least one
        // per candidate, drafts as far as `[engine] batch` leaves room.
        let batch_size = engine.batch + seqs;
        Ok(Worker {
            engine,
            ctx,
            rx,
            counters,
            // Popped from the end: lowest ids first.
            free_seqs: (0..i32::try_from(seqs).unwrap_or(i32::MAX)).rev().collect(),
            convs: BTreeMap::new(),
            next_id: 0,
            waiting: VecDeque::new(),
            jobs: Vec::new(),
            batch: LlamaBatch::new(batch_size, 1),
            parked: BTreeMap::new(),
        })
    }

    fn run(&mut self) {
        let mut disconnected = false;
        loop {
            if self.jobs.is_empty() {
                if disconnected {
                    return;
                }
                match self.rx.recv() {
                    Ok(msg) => self.handle(msg),
                    Err(_) => disconnected = true,
                }
            }
            loop {
                match self.rx.try_recv() {
                    Ok(msg) => self.handle(msg),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        disconnected = true;
                        break;
                    }
                }
            }
            if !self.jobs.is_empty() {
                let started = Instant::now();
                self.step();
                self.counters.busy_us.fetch_add(
                    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                    Ordering::Relaxed,
                );
            }
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Open { candidates, reply } => {
                self.waiting.push_back((candidates, reply));
                self.admit();
            }
            Msg::Close { conv } => {
                if let Some(c) = self.convs.remove(&conv) {
                    for (k, &seq) in c.seqs.iter().enumerate() {
                        if k == 0 && !c.cached.is_empty() {
                            // Its cache stays for later conversations.
                            self.parked.insert(seq, c.cached.clone());
                        } else {
                            let _ =
                                self.ctx
                                    .clear_kv_cache_seq(u32::try_from(seq).ok(), None, None);
                        }
                        self.free_seqs.push(seq);
                    }
                    self.free_seqs.sort_unstable_by(|a, b| b.cmp(a));
                }
                self.admit();
            }
            Msg::Generate { conv, job, reply } => {
                if let Err(e) = self.start(conv, job, reply.clone()) {
                    let _ = reply.send(Err(e));
                }
            }
        }
    }

    /// Opens waiting conversations, first come first served, while their
    /// sequences are free.
    fn admit(&mut self) {
        while let Some(&(candidates, _)) = self.waiting.front() {
            if candidates > self.free_seqs.len() {
                return;
            }
            let Some((_, reply)) = self.waiting.pop_front() else {
                return;
            };
            let seqs: Vec<i32> = (0..candidates)
                .filter_map(|_| self.free_seqs.pop())
                .collect();
            // The first sequence keeps what it holds as the conversation's
            // cache; the others are cleared when a call starts.
            let cached = seqs
                .first()
                .and_then(|s| self.parked.remove(s))
                .unwrap_or_default();
            for s in seqs.iter().skip(1) {
                if self.parked.remove(s).is_some() {
                    let _ = self
                        .ctx
                        .clear_kv_cache_seq(u32::try_from(*s).ok(), None, None);
                }
            }
            let id = self.next_id;
            self.next_id += 1;
            self.convs.insert(
                id,
                Conv {
                    seqs,
                    cached,
                    busy: false,
                },
            );
            if reply.send(Ok(id)).is_err() {
                // The asker is gone: close at once.
                self.handle(Msg::Close { conv: id });
            }
        }
    }

    fn start(
        &mut self,
        conv_id: ConvId,
        spec: JobSpec,
        reply: Sender<Result<Generation, EngineError>>,
    ) -> Result<(), EngineError> {
        let drafts = self.engine.drafts;
        let grammar = parse_grammar(spec.grammar.as_deref(), drafts);
        let n = spec.n;
        let mut decoders = Vec::with_capacity(n);
        for i in 0..n {
            let s = self.engine.token_sampler(
                &spec.sampling,
                spec.temperatures.as_deref(),
                spec.grammar.as_deref(),
                i,
            )?;
            decoders.push(Decoder::new(s, grammar.as_ref(), drafts));
        }
        let prompt = spec.prompt;
        let donor = self.donor(conv_id, &prompt);
        let conv = self
            .convs
            .get_mut(&conv_id)
            .ok_or_else(|| EngineError::Llama {
                action: "generate",
                message: "unknown conversation".into(),
            })?;
        if conv.busy {
            return Err(EngineError::Llama {
                action: "generate",
                message: "the conversation already has a call in progress".into(),
            });
        }
        let seqs: Vec<i32> = conv.seqs.iter().copied().take(n).collect();
        // Reuse the longest common prefix; keep at least the last prompt
        // token to evaluate, since its logits start the reply.
        let own = reusable_prefix(&prompt, &conv.cached);
        for &seq in conv.seqs.iter().skip(1) {
            self.ctx
                .clear_kv_cache_seq(u32::try_from(seq).ok(), None, None)
                .map_err(|e| llama("clear a sequence")(&e))?;
        }
        let home = conv.seqs[0];
        let common = match donor {
            Some((seq, shared))
                if shared >= own + MIN_SHARED_PREFIX
                    // Another conversation holds a longer prefix: copy its
                    // stream (the whole buffer; llama.cpp copies between
                    // streams no other way) and keep the shared part.
                    && self.ctx.copy_kv_cache_seq(seq, home, None, None).is_ok() =>
            {
                tracing::debug!(
                    "model: conversation {conv_id} copies {shared} prompt tokens from sequence {seq} (its own cache had {own})"
                );
                conv.cached = prompt[..shared].to_vec();
                shared
            }
            _ => own,
        };
        self.ctx
            .clear_kv_cache_seq(u32::try_from(home).ok(), Some(common as u32), None)
            .map_err(|e| llama("drop the divergent tail")(&e))?;
        conv.cached.truncate(common);
        conv.busy = true;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            "model: conversation {conv_id} asks {n} of {} tokens after {} prompt tokens ({common} cached); {} other requests",
            spec.sampling.max_tokens,
            prompt.len(),
            self.jobs.len()
        );
        self.jobs.push(Job {
            conv: conv_id,
            seqs,
            next: common,
            reused: common,
            max_tokens: spec.sampling.max_tokens as usize,
            decoders,
            submitted: spec.submitted,
            prompt_done: None,
            prompt,
            reply,
        });
        Ok(())
    }

    /// The sequence outside conversation `conv` whose cache shares the
    /// longest prefix with `prompt` (another open conversation's first
    /// sequence, or a parked one), and the length it shares.
    fn donor(&self, conv: ConvId, prompt: &[LlamaToken]) -> Option<(i32, usize)> {
        let open = self
            .convs
            .iter()
            .filter(|(id, _)| **id != conv)
            .filter_map(|(_, c)| Some((*c.seqs.first()?, c.cached.as_slice())));
        let parked = self.parked.iter().map(|(s, t)| (*s, t.as_slice()));
        open.chain(parked)
            .map(|(seq, cached)| (seq, reusable_prefix(prompt, cached)))
            .filter(|(_, shared)| *shared > 0)
            .max_by_key(|(seq, shared)| (*shared, std::cmp::Reverse(*seq)))
    }

    /// The decoding rows of the next batch, one entry per sequence, in
    /// sequence-id order and of one length, so that llama.cpp evaluates
    /// them in one forward pass (a stream per sequence takes a pass per run
    /// of consecutive ids with equal token counts, [`micro_batches`]):
    /// every decoding candidate's pending token and its draft, all drafts
    /// cut to one length ([`common_draft_length`]) and shorter ones padded;
    /// and the sequences between two candidates' ids padded too (a token
    /// after all of theirs, dropped after the batch). Marks the jobs that
    /// decode.
    fn decoding_rows(&mut self, in_this: &mut [bool]) -> Vec<Row> {
        let pending: usize = self
            .jobs
            .iter()
            .filter(|j| j.next >= j.prompt.len())
            .map(|j| j.decoders.iter().filter(|d| d.pending()).count())
            .sum();
        if pending == 0 {
            return Vec::new();
        }
        // Each candidate's share of the batch for its draft.
        let room = (self.engine.batch / pending).max(1);
        let model = &self.engine.model;
        let mut rows: Vec<Row> = Vec::new();
        for (j, job) in self.jobs.iter_mut().enumerate() {
            if job.next < job.prompt.len() {
                continue;
            }
            for (i, d) in job.decoders.iter_mut().enumerate() {
                if !d.pending() {
                    continue;
                }
                let pos = d.pending_pos(job.prompt.len());
                let tokens = d.next_batch(model, &job.prompt, room, job.max_tokens, pending);
                rows.push(Row {
                    seq: job.seqs[i],
                    pos,
                    real: tokens.len(),
                    tokens,
                    candidate: Some((j, i)),
                });
                in_this[j] = true;
            }
        }
        rows.sort_by_key(|r| r.seq);
        // The sequences between the candidates' that padding may use: not
        // a candidate's, not one a prompt is read into this step.
        let reading: Vec<i32> = self
            .jobs
            .iter()
            .filter(|j| j.next < j.prompt.len())
            .filter_map(|j| j.seqs.first().copied())
            .collect();
        let (lo, hi) = (rows[0].seq, rows[rows.len() - 1].seq);
        let holes: Vec<i32> = (lo..=hi)
            .filter(|s| rows.binary_search_by_key(s, |r| r.seq).is_err())
            .collect();
        let drafts: Vec<(usize, f64)> = rows
            .iter()
            .filter_map(|r| r.candidate)
            .map(|(j, i)| self.jobs[j].decoders[i].draft())
            .collect();
        let length = common_draft_length(&drafts, rows.len() + holes.len());
        // Holes are padded unless a prompt is read into one this step
        // (that step takes a second pass for the prompt anyway). Measured
        // (BENCHMARKS.md, issue 44): padding every hole is as fast as
        // padding only a few on this CPU, and a pass costs more on a GPU.
        let pad_holes = holes.iter().all(|h| !reading.contains(h));
        for row in &mut rows {
            let Some((j, i)) = row.candidate else {
                continue;
            };
            self.jobs[j].decoders[i].cut_draft(length);
            row.real = row.real.min(1 + length);
            row.tokens.truncate(row.real);
            let last = row.tokens[0];
            row.tokens.resize(1 + length, last);
        }
        if pad_holes {
            let context = self.engine.context_size();
            for h in holes {
                let pos = usize::try_from(self.ctx.kv_cache_seq_pos_max(h) + 1).unwrap_or(0);
                if pos + 1 + length > context {
                    // No room in its stream: the step takes two passes.
                    continue;
                }
                let at = rows.partition_point(|r| r.seq < h);
                rows.insert(
                    at,
                    Row {
                        seq: h,
                        pos,
                        real: 0,
                        tokens: vec![LlamaToken(0); 1 + length],
                        candidate: None,
                    },
                );
            }
        }
        rows
    }

    /// One batch: the tokens of every decoding candidate (its last sampled
    /// token and a draft), then prompt tokens.
    fn step(&mut self) {
        self.batch.clear();
        // The sequence of every row, for the count of forward passes.
        let mut rows: Vec<i32> = Vec::new();
        let mut in_batch: i32 = 0;
        let mut failed: Option<EngineError> = None;
        let mut in_this: Vec<bool> = vec![false; self.jobs.len()];
        let decoding = self.decoding_rows(&mut in_this);
        // Padding rows to drop once the batch is evaluated: (sequence,
        // first position).
        let mut padding: Vec<(i32, usize)> = Vec::new();
        'rows: for row in &decoding {
            let (seq, pos, tokens, real) = (row.seq, row.pos, &row.tokens, row.real);
            if let Some((j, i)) = row.candidate {
                self.jobs[j].decoders[i].set_logits(in_batch);
            }
            if real < tokens.len() {
                padding.push((seq, pos + real));
            }
            for (k, &token) in tokens.iter().enumerate() {
                if let Err(e) = self.batch.add(token, (pos + k) as i32, &[seq], k < real) {
                    failed = Some(llama("fill a batch")(&e));
                    break 'rows;
                }
                rows.push(seq);
                in_batch += 1;
            }
        }
        let decoding = decoding.iter().filter(|r| r.candidate.is_some()).count() as u64;
        let mut budget = self.engine.batch.saturating_sub(in_batch as usize);
        let mut prompt_tokens = 0u64;
        for (j, job) in self.jobs.iter_mut().enumerate() {
            if budget == 0 || failed.is_some() {
                break;
            }
            if job.next >= job.prompt.len() {
                continue;
            }
            let end = (job.next + budget).min(job.prompt.len());
            for pos in job.next..end {
                let last = pos + 1 == job.prompt.len();
                if let Err(e) = self
                    .batch
                    .add(job.prompt[pos], pos as i32, &[job.seqs[0]], last)
                {
                    failed = Some(llama("fill a batch")(&e));
                    break;
                }
                if last {
                    for d in &mut job.decoders {
                        d.set_logits(in_batch);
                    }
                }
                rows.push(job.seqs[0]);
                in_batch += 1;
            }
            prompt_tokens += (end - job.next) as u64;
            budget -= end - job.next;
            job.next = end;
            in_this[j] = true;
        }
        if failed.is_none() && in_batch == 0 {
            // Every job waits on something no batch will bring: a bug, but
            // one that must fail the calls rather than spin forever.
            failed = Some(EngineError::Llama {
                action: "schedule",
                message: format!(
                    "no request could make progress ({})",
                    self.jobs
                        .iter()
                        .map(|j| format!(
                            "prompt {}/{}, tokens {:?}, stops {:?}, pending {:?}",
                            j.next,
                            j.prompt.len(),
                            j.decoders
                                .iter()
                                .map(|d| d.tokens.len())
                                .collect::<Vec<_>>(),
                            j.decoders.iter().map(|d| d.stop).collect::<Vec<_>>(),
                            j.decoders.iter().map(Decoder::pending).collect::<Vec<_>>(),
                        ))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            });
            in_this = vec![true; self.jobs.len()];
        }
        if failed.is_none() && in_batch > 0 {
            if let Err(e) = self.ctx.decode(&mut self.batch) {
                failed = Some(llama("decode")(&e));
            }
        }
        // Padding is dropped before anything reads or copies its sequence.
        for (seq, from) in padding {
            let _ = self.ctx.clear_kv_cache_seq(
                u32::try_from(seq).ok(),
                u32::try_from(from).ok(),
                None,
            );
        }
        self.counters.steps.fetch_add(1, Ordering::Relaxed);
        let passes = micro_batches(&rows, self.engine.ubatch as usize, false) as u64;
        self.counters
            .micro_batches
            .fetch_add(passes, Ordering::Relaxed);
        if prompt_tokens == 0 && decoding > 0 {
            self.counters.decode_steps.fetch_add(1, Ordering::Relaxed);
            self.counters
                .decode_micro_batches
                .fetch_add(passes, Ordering::Relaxed);
        }
        self.counters
            .prompt_tokens
            .fetch_add(prompt_tokens, Ordering::Relaxed);
        self.counters
            .max_decoding
            .fetch_max(decoding, Ordering::Relaxed);
        if let Some(e) = failed {
            // Every request in the failed batch fails; their conversations
            // start over with an empty cache.
            let mut j = 0;
            while j < self.jobs.len() {
                if in_this[j] {
                    in_this.remove(j);
                    let job = self.jobs.remove(j);
                    self.forget(job.conv);
                    let _ = job.reply.send(Err(EngineError::Llama {
                        action: "decode",
                        message: e.to_string(),
                    }));
                } else {
                    j += 1;
                }
            }
            return;
        }
        self.after_decode(&in_this);
        let mut j = 0;
        while j < self.jobs.len() {
            if self.jobs[j].decoders.iter().all(|d| d.stop.is_some()) {
                let job = self.jobs.remove(j);
                self.finish(job);
            } else {
                j += 1;
            }
        }
    }

    /// After a batch: the prompts it finished are copied to their
    /// candidates' sequences, and every candidate whose logits it computed
    /// is sampled (all of them at once, [`sample_batch`]).
    fn after_decode(&mut self, in_this: &[bool]) {
        for (j, job) in self.jobs.iter_mut().enumerate() {
            if !in_this[j] || job.next < job.prompt.len() || job.prompt_done.is_some() {
                continue;
            }
            job.prompt_done = Some(Instant::now());
            if let Some(conv) = self.convs.get_mut(&job.conv) {
                conv.cached = job.prompt.clone();
            }
            for &seq in job.seqs.iter().skip(1) {
                let _ = self.ctx.copy_kv_cache_seq(job.seqs[0], seq, None, None);
            }
        }
        // (job, candidate) of each sampled candidate, in `work`'s order.
        let mut whose = Vec::new();
        let mut work = Vec::new();
        for (j, job) in self.jobs.iter_mut().enumerate() {
            if !in_this[j] || job.next < job.prompt.len() {
                continue;
            }
            for (i, d) in job.decoders.iter_mut().enumerate() {
                if d.has_logits() {
                    whose.push((j, i));
                    work.push((d, job.max_tokens));
                }
            }
        }
        let sampled = sample_batch(&self.ctx, &self.engine.model, work);
        self.counters
            .sample_us
            .fetch_add((sampled.seconds * 1e6) as u64, Ordering::Relaxed);
        let mut generated = 0u64;
        for (&(j, i), &(made, clear)) in whose.iter().zip(&sampled.per_candidate) {
            generated += made as u64;
            if let Some(from) = clear {
                let job = &self.jobs[j];
                let _ = self.ctx.clear_kv_cache_seq(
                    u32::try_from(job.seqs[i]).ok(),
                    Some((job.prompt.len() + from) as u32),
                    None,
                );
            }
        }
        self.counters
            .generated
            .fetch_add(generated, Ordering::Relaxed);
    }

    fn finish(&mut self, job: Job) {
        let now = Instant::now();
        let prompt_done = job.prompt_done.unwrap_or(now);
        let mut candidates = Vec::with_capacity(job.decoders.len());
        let mut count = DraftCount::default();
        let mut grammar = GrammarChecks::default();
        for d in job.decoders {
            grammar.add(d.grammar_checks());
            let (tokens, bytes, stop, c) = d.into_parts();
            count.drafted += c.drafted;
            count.accepted += c.accepted;
            candidates.push((tokens, bytes, stop));
        }
        if let Some(conv) = self.convs.get_mut(&job.conv) {
            // The first sequence also holds candidate 0's reply: the next
            // turn of the conversation starts with it.
            if let Some((tokens, _, _)) = candidates.first() {
                conv.cached.extend(tokens);
            }
            conv.busy = false;
        }
        let candidates: Vec<Candidate> = candidates
            .into_iter()
            .map(|(t, b, stop)| Candidate {
                text: String::from_utf8_lossy(&b).into_owned(),
                tokens: t.iter().map(|t| t.0).collect(),
                stop,
            })
            .collect();
        let generation = Generation {
            stats: Stats {
                prompt_tokens: job.prompt.len(),
                prompt_tokens_evaluated: job.prompt.len() - job.reused,
                prompt_tokens_reused: job.reused,
                generated_tokens: candidates.iter().map(|c| c.tokens.len()).collect(),
                draft_tokens: count.drafted,
                draft_accepted: count.accepted,
                grammar,
                prompt_s: (prompt_done - job.submitted).as_secs_f64(),
                decode_s: (now - prompt_done).as_secs_f64(),
                total_s: (now - job.submitted).as_secs_f64(),
            },
            candidates,
        };
        let _ = job.reply.send(Ok(generation));
    }

    /// Drops what a conversation's sequences hold, after a failed batch.
    fn forget(&mut self, conv: ConvId) {
        if let Some(c) = self.convs.get_mut(&conv) {
            for &seq in &c.seqs {
                let _ = self
                    .ctx
                    .clear_kv_cache_seq(u32::try_from(seq).ok(), None, None);
            }
            c.cached.clear();
            c.busy = false;
        }
    }
}
