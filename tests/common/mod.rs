//! Shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The SmolLM2-135M test model. `scripts/test` fetches it; a missing model
/// fails the test with the command to run, it never skips it.
pub fn test_model() -> PathBuf {
    match patchwright::models::resolve("smollm2-135m") {
        Ok(m) => m.path,
        Err(e) => panic!("the test model is missing: {e} (scripts/test fetches it)"),
    }
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
