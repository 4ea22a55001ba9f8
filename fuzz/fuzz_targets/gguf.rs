#![no_main]
//! Fuzz target `gguf`: the body is [`patchwright::fuzzing::gguf`], shared
//! with the regression test that replays `fuzz/regressions/gguf/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| patchwright::fuzzing::gguf(data));
