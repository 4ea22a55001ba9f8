//! Recording a task's trajectory: every model call and every other step,
//! with the seconds since the task began. The file and its step kinds are
//! `record::trajectory`; `replay` answers model calls from a recorded file.

pub mod replay;

use std::time::Instant;

use serde::Serialize;

use crate::record::trajectory::{ModelCall, Step, TimedStep};

/// A trajectory being recorded: steps with the seconds since the task began.
#[derive(Debug, Serialize)]
pub struct Trajectory {
    pub instance_id: String,
    pub steps: Vec<TimedStep>,
    #[serde(skip)]
    started: Option<Instant>,
    #[serde(skip)]
    on_stage: Option<StageObserver>,
}

/// Told the name of each stage as it begins (a progress display).
pub struct StageObserver(pub Box<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for StageObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StageObserver")
    }
}

impl Trajectory {
    pub fn new(instance_id: &str) -> Self {
        Trajectory {
            instance_id: instance_id.into(),
            steps: Vec::new(),
            started: Some(Instant::now()),
            on_stage: None,
        }
    }

    /// Calls `observer` with each stage's name as it begins.
    pub fn observe_stages(&mut self, observer: StageObserver) {
        self.on_stage = Some(observer);
    }

    /// Records that stage `name` begins, and tells the observer.
    pub fn stage(&mut self, name: &str) {
        if let Some(o) = &self.on_stage {
            (o.0)(name);
        }
        self.record(Step::Stage { name: name.into() });
    }

    pub fn record(&mut self, step: Step) {
        let at_s = self.started.map_or(0.0, |s| s.elapsed().as_secs_f64());
        self.steps.push(TimedStep { at_s, step });
    }

    pub fn model_calls(&self) -> impl Iterator<Item = &ModelCall> {
        self.steps.iter().filter_map(|s| match &s.step {
            Step::ModelCall(c) => Some(c.as_ref()),
            _ => None,
        })
    }
}
