//! The data a patchwright run exchanges with its model and records: the
//! messages and sampling of a call, its candidates and their cost, the
//! scheduler's load, where the model was placed, and the GGUF header a
//! model file is described by ([`gguf`], read in pure Rust). No inference library
//! is linked here, so the records, reports and grading that read these
//! types do not depend on llama.cpp or candle (the `patchwright-engine`
//! crate, which re-exports them).

mod call;
pub mod gguf;
pub mod gguf_file;
mod load;
pub mod placement;

pub use call::{
    Candidate, Completion, Generation, GrammarChecks, Message, Request, Sampling, Stats, Stop,
};
pub use load::Load;
pub use placement::{Device, FlashAttn, GpuLayers, KvBudget, KvType, Placement, SplitMode};
