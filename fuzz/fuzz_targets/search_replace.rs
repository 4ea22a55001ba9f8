#![no_main]
//! Fuzz target `search_replace`: the body is [`patchwright::fuzzing::search_replace`], shared
//! with the regression test that replays `fuzz/regressions/search_replace/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| patchwright::fuzzing::search_replace(data));
