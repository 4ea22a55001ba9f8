//! Stage metrics: a task's (`artifacts/<id>/metrics.json` and the
//! `metrics` of its result) and their sum over a run (`metrics.json`).
//! Computed by `pipeline::metrics`.

use serde::{Deserialize, Serialize};

/// One task's stage metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Metrics {
    pub gold_files: Vec<String>,
    /// `path::Class.method` of the functions the gold patch changes.
    pub gold_functions: Vec<String>,
    pub located_files: Vec<String>,
    pub located_functions: Vec<String>,
    /// Share of the gold files among the located ones.
    pub file_hit: Option<f64>,
    /// Share of the gold functions the Fixer was shown whole: located, or
    /// shown beside the located code (its whole file, a callee, a
    /// sibling: `[fixer] show`). Runs written before the Fixer's shown
    /// code was recorded: among the located ones.
    pub function_hit: Option<f64>,
    /// Share of the gold functions among the located ones (a located class
    /// covers its methods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub located_function_hit: Option<f64>,
    /// The reproduction test fails on the base commit (it was accepted so).
    pub reproduction_fails_on_base: Option<bool>,
    /// … and passes with the gold patch.
    pub reproduction_passes_with_gold: Option<bool>,
    pub candidates_generated: usize,
    pub candidates_applied: usize,
    pub candidates_parsed: usize,
    pub candidates_distinct: usize,
    /// The Fixer's rounds: candidates sampled in each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates_per_round: Vec<usize>,
    /// … and new distinct candidates passing the reproduction test in each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passing_per_round: Vec<usize>,
    /// Candidates whose edit touches none of the located lines (the
    /// located spans themselves, not the code shown beside them).
    #[serde(default)]
    pub candidates_off_located: usize,
    /// Distinct candidates that resolve the task (every FAIL_TO_PASS and
    /// PASS_TO_PASS test passes); None when it could not be checked.
    pub resolving: Option<Vec<usize>>,
    pub any_resolves: Option<bool>,
    pub picked_resolves: Option<bool>,
    /// Agent observations showing the repository or its dependencies
    /// missing (`ModuleNotFoundError`/`ImportError` of a module the agent
    /// did not write): the environment failing the agents.
    #[serde(default)]
    pub env_import_errors: usize,
    /// The compute the task's model calls took: seconds of prompt
    /// evaluation and decoding, and tokens generated over every candidate.
    #[serde(default)]
    pub model_s: f64,
    #[serde(default)]
    pub generated_tokens: usize,
    /// Why something could not be computed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Metrics summed over a run's tasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    pub tasks: usize,
    pub mean_file_hit: Option<f64>,
    pub mean_function_hit: Option<f64>,
    pub reproduced: usize,
    pub reproduction_valid: usize,
    pub candidates_generated: usize,
    pub candidates_applied: usize,
    pub candidates_parsed: usize,
    pub candidates_distinct: usize,
    pub any_resolves: usize,
    pub picked_resolves: usize,
    pub env_import_errors: usize,
    /// The tasks' model seconds and generated tokens, summed.
    pub model_s: f64,
    pub generated_tokens: usize,
}

impl Summary {
    /// The sum of `all`.
    pub fn of<'a>(all: impl IntoIterator<Item = &'a Metrics>) -> Summary {
        let all: Vec<&Metrics> = all.into_iter().collect();
        let mean = |f: &dyn Fn(&Metrics) -> Option<f64>| {
            let v: Vec<f64> = all.iter().filter_map(|m| f(m)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        Summary {
            tasks: all.len(),
            mean_file_hit: mean(&|m| m.file_hit),
            mean_function_hit: mean(&|m| m.function_hit),
            reproduced: all
                .iter()
                .filter(|m| m.reproduction_fails_on_base == Some(true))
                .count(),
            reproduction_valid: all
                .iter()
                .filter(|m| m.reproduction_passes_with_gold == Some(true))
                .count(),
            candidates_generated: all.iter().map(|m| m.candidates_generated).sum(),
            candidates_applied: all.iter().map(|m| m.candidates_applied).sum(),
            candidates_parsed: all.iter().map(|m| m.candidates_parsed).sum(),
            candidates_distinct: all.iter().map(|m| m.candidates_distinct).sum(),
            env_import_errors: all.iter().map(|m| m.env_import_errors).sum(),
            any_resolves: all.iter().filter(|m| m.any_resolves == Some(true)).count(),
            picked_resolves: all
                .iter()
                .filter(|m| m.picked_resolves == Some(true))
                .count(),
            model_s: all.iter().map(|m| m.model_s).sum(),
            generated_tokens: all.iter().map(|m| m.generated_tokens).sum(),
        }
    }
}
