#![no_main]
//! Fuzz target `predictions`: the body is [`patchwright::fuzzing::predictions`], shared
//! with the regression test that replays `fuzz/regressions/predictions/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| patchwright::fuzzing::predictions(data));
