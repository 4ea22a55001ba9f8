//! The Vulkan build (`--features vulkan`) on SmolLM2 with every layer
//! offloaded: on a machine without a GPU, Mesa's software Vulkan driver
//! (lavapipe) stands in. `scripts/test` installs it, builds the binary in
//! the CPU build's target directory (only what the feature changes is
//! compiled again), copies it to `target/vulkan/patchwright` and names it
//! in `PATCHWRIGHT_TEST_VULKAN_BIN`; without that the test fails with the
//! reason, it never skips.

use crate::common;

use std::process::Command;

/// Greedy tokens compared between the builds.
const TOKENS: usize = 32;

/// A prompt SmolLM2 answers with more than [`TOKENS`] tokens.
const PROMPT: &str = "Count from 1 to 50, separated by commas.";

/// `patchwright generate` of `bin`, as JSON, with `gpu_layers`.
fn generate(bin: &std::ffi::OsStr, gpu_layers: &str) -> serde_json::Value {
    common::test_model();
    let max_tokens = TOKENS.to_string();
    let o = Command::new(bin)
        .args(["generate", "--model", "smollm2-135m", "--threads", "2"])
        .args(["--context", "1024", "--json", "--max-tokens", &max_tokens])
        .args(["--gpu-layers", gpu_layers, PROMPT])
        // lavapipe is a CPU-type Vulkan device, which ggml only uses when
        // named; on a machine with a GPU, device 0 is that GPU.
        .env("GGML_VK_VISIBLE_DEVICES", "0")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.to_string_lossy()));
    assert!(
        o.status.success(),
        "{} generate failed: {}",
        bin.to_string_lossy(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: stdout is not JSON ({e}): {}",
            bin.to_string_lossy(),
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

#[test]
fn offloaded_on_vulkan_the_greedy_tokens_match_the_cpu_build() {
    let Some(vulkan) = std::env::var_os("PATCHWRIGHT_TEST_VULKAN_BIN") else {
        panic!(
            "PATCHWRIGHT_TEST_VULKAN_BIN is not set: it names the binary built with \
             `cargo build --release --features vulkan` (scripts/test builds it, copies it \
             to target/vulkan/patchwright and sets it)"
        );
    };
    let cpu = generate(env!("CARGO_BIN_EXE_patchwright").as_ref(), "none");
    let gpu = generate(&vulkan, "all");

    // SmolLM2-135M: 30 blocks + the output layer.
    assert_eq!(cpu["placement"]["gpu_layers"], 0, "{}", cpu["placement"]);
    assert_eq!(cpu["placement"]["layers"], 31);
    assert_eq!(cpu["placement"]["devices"], serde_json::json!([]));
    assert_eq!(gpu["placement"]["gpu_layers"], 31, "{}", gpu["placement"]);
    assert_eq!(gpu["placement"]["layers"], 31);
    let device = gpu["placement"]["devices"][0]["name"]
        .as_str()
        .unwrap_or("");
    assert_eq!(device, "Vulkan0", "{}", gpu["placement"]);
    // 30 layers × 3 KV heads × 64 × 2 (K and V) × 2 bytes.
    assert_eq!(gpu["placement"]["kv_bytes_per_token"], 23_040);

    let cpu_tokens = cpu["tokens"][0].as_array().cloned().unwrap_or_default();
    let gpu_tokens = gpu["tokens"][0].as_array().cloned().unwrap_or_default();
    assert_eq!(cpu_tokens.len(), TOKENS, "{}", cpu["candidates"]);
    assert_eq!(
        gpu_tokens, cpu_tokens,
        "vulkan {} vs cpu {}",
        gpu["candidates"], cpu["candidates"]
    );
}
