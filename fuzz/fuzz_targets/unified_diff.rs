#![no_main]
//! Fuzz target `unified_diff`: the body is [`patchwright::fuzzing::unified_diff`], shared
//! with the regression test that replays `fuzz/regressions/unified_diff/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| patchwright::fuzzing::unified_diff(data));
