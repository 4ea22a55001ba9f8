//! The replay backend: answers from a recorded trajectory instead of a
//! model, call by call in recorded order, and refuses a call whose messages
//! differ from the recording (the run has diverged). For tests, and for
//! debugging a run without the model.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::engine::{Backend, Candidate, Conversation, EngineError, Generation, Request, Stats};
use crate::record::trajectory::{ModelCall, TrajectoryFile};
use crate::record::RecordError;

/// The model calls of one trajectory file, answered in order.
pub struct ReplayBackend {
    source: PathBuf,
    calls: Vec<ModelCall>,
    next: Mutex<usize>,
}

impl ReplayBackend {
    /// Reads the `model_call` steps of a trajectory file.
    pub fn from_trajectory(path: &Path) -> Result<Self, EngineError> {
        let err = |message: String| EngineError::Replay {
            source_path: path.to_path_buf(),
            message,
        };
        let file = TrajectoryFile::read(path).map_err(|e| match e {
            RecordError::Io { source, .. } => err(format!("cannot read it: {source}")),
            RecordError::Json { source, .. } => err(format!("not a trajectory: {source}")),
            other => err(other.to_string()),
        })?;
        let calls = file.model_calls().cloned().collect();
        Ok(ReplayBackend {
            source: path.to_path_buf(),
            calls,
            next: Mutex::new(0),
        })
    }

    /// Recorded calls not answered yet.
    pub fn remaining(&self) -> usize {
        let next = *self.next.lock().unwrap_or_else(|e| e.into_inner());
        self.calls.len().saturating_sub(next)
    }
}

struct ReplayConversation<'a> {
    backend: &'a ReplayBackend,
}

impl Conversation for ReplayConversation<'_> {
    fn generate(&mut self, request: &Request<'_>) -> Result<Generation, EngineError> {
        let b = self.backend;
        let err = |message: String| EngineError::Replay {
            source_path: b.source.clone(),
            message,
        };
        let mut next = b.next.lock().unwrap_or_else(|e| e.into_inner());
        let index = *next;
        let call = b.calls.get(index).ok_or_else(|| {
            err(format!(
                "the run asked for call {} but the recording has {}",
                index + 1,
                b.calls.len()
            ))
        })?;
        let recorded_n = call.candidates.len().max(1);
        if request.n.max(1) != recorded_n {
            return Err(err(format!(
                "call {} asks for {} candidates; the recording holds {recorded_n}",
                index + 1,
                request.n
            )));
        }
        if call.messages != request.messages {
            let at = call
                .messages
                .iter()
                .zip(request.messages)
                .position(|(a, b)| a != b)
                .unwrap_or(call.messages.len().min(request.messages.len()));
            return Err(err(format!(
                "the run diverged at call {}: message {} differs from the recording",
                index + 1,
                at + 1
            )));
        }
        *next += 1;
        let candidates = if call.candidates.is_empty() {
            vec![Candidate {
                text: call.response.clone(),
                tokens: call.tokens.clone(),
                stop: call.stop,
            }]
        } else {
            call.candidates.clone()
        };
        Ok(Generation {
            candidates,
            stats: Stats {
                prompt_tokens: call.prompt_tokens,
                prompt_tokens_evaluated: 0,
                prompt_tokens_reused: 0,
                generated_tokens: if call.candidates.is_empty() {
                    vec![call.completion_tokens]
                } else {
                    call.candidates.iter().map(|c| c.tokens.len()).collect()
                },
                draft_tokens: 0,
                draft_accepted: 0,
                grammar: Default::default(),
                prompt_s: 0.0,
                decode_s: 0.0,
                total_s: 0.0,
            },
        })
    }
}

impl Backend for ReplayBackend {
    fn conversation(
        &self,
        _n_seq_max: usize,
        _reply_tokens: usize,
    ) -> Result<Box<dyn Conversation + '_>, EngineError> {
        Ok(Box::new(ReplayConversation { backend: self }))
    }
}
