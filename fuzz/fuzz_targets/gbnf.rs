#![no_main]
//! Fuzz target `gbnf`: the body is [`patchwright::fuzzing::gbnf`], shared
//! with the regression test that replays `fuzz/regressions/gbnf/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| patchwright::fuzzing::gbnf(data));
