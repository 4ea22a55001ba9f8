//! `models synth`: a synthetic model of the default model's shape has the
//! real file's tensors, types and size, and llama.cpp loads and runs it.

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
