#![no_main]
//! Fuzz target `test_log`: the body is [`patchwright::fuzzing::test_log`], shared
//! with the regression test that replays `fuzz/regressions/test_log/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| patchwright::fuzzing::test_log(data));
