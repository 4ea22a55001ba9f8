#![no_main]
//! Fuzz target `aci_command`: the body is [`patchwright::fuzzing::aci_command`], shared
//! with the regression test that replays `fuzz/regressions/aci_command/`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| patchwright::fuzzing::aci_command(data));
