//! The pipelines a task can run: MASAI's five sub-agents (`masai`, the
//! default) or the first, single-call pipeline (`first`), chosen in the
//! configuration file; the MASAI stages can be switched off one by one.

pub mod first;
pub mod masai;
pub mod metrics;

use serde::{Deserialize, Serialize};

pub use first::{apply_reply, PipelineError};

/// Which pipeline, and which MASAI stages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSettings {
    /// `masai` or `first`.
    pub kind: Kind,
    /// Run the Test Template Generator (its test guides the reproducer).
    pub template: bool,
    /// Run the Issue Reproducer (its test ranks the candidates).
    pub reproduce: bool,
    /// Rank the candidates by running tests; off, the first distinct
    /// candidate (the greedy one when it applies) is taken.
    pub rank: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Masai,
    First,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            kind: Kind::Masai,
            template: true,
            reproduce: true,
            rank: true,
        }
    }
}

/// The limits and sampling of one ReAct sub-agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    pub max_steps: usize,
    pub temperature: f32,
}

/// The ReAct sub-agents' settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsSettings {
    pub test_template: AgentSettings,
    pub reproducer: AgentSettings,
    pub localizer: AgentSettings,
}

impl Default for AgentsSettings {
    fn default() -> Self {
        let greedy = |max_steps| AgentSettings {
            max_steps,
            temperature: 0.0,
        };
        AgentsSettings {
            test_template: greedy(10),
            reproducer: greedy(12),
            localizer: greedy(12),
        }
    }
}
