//! `patchwright generate`, through the binary, on the SmolLM2 test model.

use crate::common;

use std::process::Command;

fn generate(args: &[&str]) -> std::process::Output {
    common::test_model();
    Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .args([
            "generate",
            "--model",
            "smollm2-135m",
            "--threads",
            "2",
            "--context",
            "2048",
        ])
        .args(args)
        .output()
        .expect("patchwright runs")
}

#[test]
fn json_has_the_candidates_and_the_stats() {
    let o = generate(&[
        "--json",
        "--max-tokens",
        "16",
        "What is the capital of France? Answer in one word.",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["candidates"],
        serde_json::json!(["The capital of France is Paris."])
    );
    let stats = v["stats"].as_object().unwrap();
    let mut keys: Vec<&str> = stats.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "decode_s",
            "draft_accepted",
            "draft_tokens",
            "generated_tokens",
            "grammar",
            "prompt_s",
            "prompt_tokens",
            "prompt_tokens_evaluated",
            "prompt_tokens_reused",
            "total_s"
        ]
    );
    assert_eq!(stats["generated_tokens"], serde_json::json!([7]));
    assert_eq!(stats["prompt_tokens_evaluated"], stats["prompt_tokens"]);
    assert_eq!(stats["prompt_tokens_reused"], 0);
    // No grammar: no token was checked against one.
    assert_eq!(
        stats["grammar"],
        serde_json::json!({"checked": 0, "refused": 0, "masked": 0})
    );
}

#[test]
fn a_grammar_file_constrains_every_candidate() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("yn.gbnf");
    std::fs::write(&g, "root ::= \"yes\" | \"no\"\n").unwrap();
    let o = generate(&[
        "--json",
        "--n",
        "5",
        "--temperature",
        "1.5",
        "--grammar",
        g.to_str().unwrap(),
        "Is the sky blue?",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let candidates = v["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 5);
    assert!(
        candidates.iter().all(|c| c == "yes" || c == "no"),
        "{candidates:?}"
    );
    // Every sampled token was checked against the grammar; refusals and
    // masks are among those checks.
    let stats = &v["stats"];
    let tokens: u64 = stats["generated_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .sum();
    let grammar = &stats["grammar"];
    let count = |k: &str| grammar[k].as_u64().unwrap();
    assert!(count("checked") >= tokens, "{stats}");
    assert!(
        count("masked") <= count("refused") && count("refused") <= count("checked"),
        "{stats}"
    );
}

#[test]
fn a_broken_grammar_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("bad.gbnf");
    std::fs::write(&g, "root ::= (\n").unwrap();
    let o = generate(&["--grammar", g.to_str().unwrap(), "hi"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid GBNF grammar"));
}
