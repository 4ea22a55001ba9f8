//! `models synth`: a synthetic model of the default model's shape has the
//! real file's tensors, types and size, and llama.cpp loads and runs it;
//! `models bench` measures a model's every figure in one process.

use crate::common;

use std::process::Command;

use patchwright::models::synth::{self, read_layout};

#[test]
fn a_synthetic_half_billion_model_is_the_real_files_layout_and_runs() {
    let real = match patchwright::models::resolve(&common::models_dir(), "qwen2.5-coder-0.5b") {
        Ok(m) => m.path,
        Err(e) => panic!("the default model is missing: {e} (scripts/test fetches it)"),
    };
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = dir.path().join("tokenizer.gguf");
    let pw = env!("CARGO_BIN_EXE_patchwright");
    let ok = |args: &[&str]| {
        let o = Command::new(pw).args(args).output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    ok(&[
        "models",
        "tokenizer",
        real.to_str().unwrap(),
        "--out",
        tokenizer.to_str().unwrap(),
    ]);
    assert!(std::fs::metadata(&tokenizer).unwrap().len() < 8 << 20);
    let model = dir.path().join("synthetic.gguf");
    ok(&[
        "models",
        "synth",
        "qwen2.5-coder-0.5b",
        "--tokenizer",
        tokenizer.to_str().unwrap(),
        "--out",
        model.to_str().unwrap(),
    ]);
    // The real file's tensors and shapes, and as many of each type, by
    // llama.cpp's Q4_K_M rules alone (which layers got Q6_K differs: the
    // file's quantiser picked others).
    let (a, b) = (read_layout(&model).unwrap(), read_layout(&real).unwrap());
    let names = |l: &synth::Layout| {
        let mut v: Vec<(String, Vec<u64>)> = l
            .tensors
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&a), names(&b));
    let kinds = |l: &synth::Layout| {
        let mut v: Vec<(Vec<u64>, u32)> =
            l.tensors.iter().map(|t| (t.dims.clone(), t.kind)).collect();
        v.sort();
        v
    };
    assert_eq!(kinds(&a), kinds(&b));
    let size = |p: &std::path::Path| std::fs::metadata(p).unwrap().len() as i64;
    assert!((size(&model) - size(&real)).abs() < 4096);
    // The same seed writes the same file.
    let again = dir.path().join("again.gguf");
    synth::write(
        &synth::Shape::named("qwen2.5-coder-0.5b").unwrap(),
        synth::Quant::Q4KM,
        None,
        &tokenizer,
        0,
        &again,
    )
    .unwrap();
    assert_eq!(
        std::fs::read(&model).unwrap(),
        std::fs::read(&again).unwrap()
    );
    // llama.cpp loads it and decodes every token asked for.
    let out = ok(&[
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--context",
        "512",
        "--n",
        "2",
        "--temperature",
        "0.8",
        "--max-tokens",
        "4",
        "--no-drafts",
        "--json",
        "def f(x): return x",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["stats"]["generated_tokens"],
        serde_json::json!([4, 4]),
        "{v}"
    );
    assert_eq!(v["stats"]["draft_tokens"], 0);
}

/// `models bench` on SmolLM2 (CPU build): every figure asked for, in
/// order; each prompt as long as asked or at most one line of code
/// shorter, and all of it evaluated (none from the KV cache); each
/// candidate at most `--max-tokens`, every token picked under the grammar
/// counted where it is on; the scheduler figures' conversations sharing a
/// prefix, each decoding step one forward pass.
#[test]
fn models_bench_measures_every_figure_in_one_process() {
    let o = Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .args(["models", "bench"])
        .arg(common::test_model())
        .args(["--prompts", "48,96", "--generation-prompt", "64"])
        .args(["--candidates", "1,3", "--max-tokens", "4"])
        .args(["--context", "512", "--threads", "2", "--json"])
        .args(["--conversations", "1,2", "--scheduler-candidates", "3"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "models bench: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["placement"]["gpu_layers"], 0, "{r}");
    assert!(r["warmup_s"].as_f64().unwrap() > 0.0, "{r}");
    let prompt = r["prompt"].as_array().unwrap();
    assert_eq!(prompt.len(), 2, "{r}");
    for (figure, target) in prompt.iter().zip([48u64, 96]) {
        assert_eq!(figure["target_tokens"], target);
        let tokens = figure["tokens"].as_u64().unwrap();
        // A line of the code is at most 20 of SmolLM2's tokens.
        assert!(tokens <= target && tokens + 20 > target, "{figure}");
        assert!(figure["tokens_per_s"].as_f64().unwrap() > 0.0, "{figure}");
    }
    let generation = r["generation"].as_array().unwrap();
    let shape: Vec<(u64, bool)> = generation
        .iter()
        .map(|g| {
            (
                g["candidates"].as_u64().unwrap(),
                g["grammar"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(shape, [(1, false), (3, false), (1, true), (3, true)]);
    for g in generation {
        let n = g["candidates"].as_u64().unwrap();
        let tokens = g["tokens"].as_u64().unwrap();
        let steps = g["steps"].as_u64().unwrap();
        assert!(
            (n..=4 * n).contains(&tokens) && (1..=4).contains(&steps),
            "{g}"
        );
        assert!(g["tokens_per_s"].as_f64().unwrap() > 0.0, "{g}");
        let checked = g["grammar_checked"].as_u64().unwrap();
        let on = g["grammar"].as_bool().unwrap();
        assert_eq!(checked, if on { tokens } else { 0 }, "{g}");
    }
    let scheduler = r["scheduler"].as_array().unwrap();
    let ks: Vec<u64> = scheduler
        .iter()
        .map(|f| f["conversations"].as_u64().unwrap())
        .collect();
    assert_eq!(ks, [1, 2], "{r}");
    for f in scheduler {
        let k = f["conversations"].as_u64().unwrap();
        assert_eq!(f["candidates"], 3, "{f}");
        let tokens = f["tokens"].as_u64().unwrap();
        assert!((3 * k..=3 * k * 4).contains(&tokens), "{f}");
        let prompt = f["prompt_tokens"].as_u64().unwrap();
        assert!(prompt <= 64 && prompt + 20 > 64, "{f}");
        let shared = f["shared_tokens"].as_u64().unwrap();
        assert!(
            if k == 1 {
                shared == 0
            } else {
                shared > 8 && shared < prompt
            },
            "{f}"
        );
        assert!(f["decode_steps"].as_u64().unwrap() > 0, "{f}");
        assert_eq!(f["decode_micro_batches"], f["decode_steps"], "{f}");
        assert!(f["sampling_s"].as_f64().unwrap() > 0.0, "{f}");
        assert!(f["tokens_per_s"].as_f64().unwrap() > 0.0, "{f}");
    }
}
