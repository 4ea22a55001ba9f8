//! The integration tests: one binary, so llama.cpp is linked once (ripgrep's
//! layout). Each module tests one command or concept end to end.

// A failed assumption in a test is the test failing: the workspace's
// unwrap/expect/panic lints (Cargo.toml) are for library code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod aci;
mod architecture;
mod batch;
mod candle;
mod chat_template;
mod check;
mod decode;
mod engine;
mod eval;
mod fuzz_regressions;
mod gbnf;
mod generate_cli;
mod hostfs;
mod http_backend;
mod install;
mod localize;
mod masai;
mod offline;
mod pipeline;
mod preflight;
mod react;
mod records;
mod replay;
mod report;
mod resume;
mod sandbox_cli;
mod scheduler;
mod session;
mod slurm;
mod sweep;
mod synth;
mod tokenizer;
mod vulkan;
mod wasi;
