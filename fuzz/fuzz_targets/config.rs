#![no_main]
//! Fuzz target `config`: the body is [`patchwright::fuzzing::config`], shared
//! with the regression test that replays `fuzz/regressions/config/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| patchwright::fuzzing::config(data));
