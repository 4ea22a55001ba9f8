//! patchwright resolves GitHub issues offline: SWE-bench tasks in, patches
//! out, with a GGUF model loaded in-process. See ARCHITECTURE.md for the map.

pub mod aci;
pub mod agents;
pub mod backing;
pub mod batch;
pub mod bundle;
pub mod config;
pub mod confined;
pub mod dataset;
pub mod dirs;
pub mod edit;
pub mod engine;
pub mod env;
pub mod eval;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod inputs;
pub mod models;
pub mod pipeline;
pub mod record;
pub mod repo;
pub mod report;
pub mod slurm;
pub mod trajectory;

/// Versions of what produced a run, for `run.json`.
pub fn versions() -> serde_json::Value {
    serde_json::json!({
        "patchwright": env!("CARGO_PKG_VERSION"),
        "llama-cpp-2": env!("PATCHWRIGHT_LLAMA_CPP_2"),
        "llama-cpp-sys-2": env!("PATCHWRIGHT_LLAMA_CPP_SYS_2"),
    })
}
