#![no_main]
//! Fuzz target `dataset`: the body is [`patchwright::fuzzing::dataset`], shared
//! with the regression test that replays `fuzz/regressions/dataset/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| patchwright::fuzzing::dataset(data));
