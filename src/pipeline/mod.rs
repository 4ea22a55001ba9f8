//! The pipelines a task can run: MASAI's five sub-agents (`masai`, the
//! default) or the first, single-call pipeline (`first`), chosen in the
//! configuration file; the MASAI stages can be switched off one by one.

pub mod check;
pub mod first;
pub mod masai;
pub mod metrics;
pub mod stage;

pub use first::{apply_reply, PipelineError};
