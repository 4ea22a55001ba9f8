//! The model engines: the `patchwright-engine` crate (llama.cpp, candle,
//! inference servers; `engine/` at the repository's root), re-exported
//! whole so the library names it `crate::engine`. How a run is backed by
//! a model is [`crate::backing`].

pub use patchwright_engine::*;
