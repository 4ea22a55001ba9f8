//! `patchwright check` on one task of each demo repository: with a
//! scripted model that answers the Reproducer's sample prompt with the
//! task's own test file (as its test patch leaves it) and offers the gold
//! patch and a wrong one, the Reproducer accepts the test, written as a
//! new file beside the located code's tests and run in the task's own
//! environment (built from its spec), and the Ranker puts the gold patch
//! first. `scripts/check-pipeline` runs the same command on real SWE-bench
//! tasks.

use std::process::Command;

use serde_json::Value;

use crate::common::{envs_dir, root};

#[test]
fn the_reproducer_accepts_the_tasks_test_and_the_ranker_puts_gold_first() {
    let o = Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .current_dir(root())
        .args([
            "check",
            "--json",
            "--dataset",
            "datasets/demo/tasks.jsonl",
            "--repos",
            "datasets/demo/repos",
            // One task per repository (each its own environment and
            // tests); all ten cost the suite twice the time.
            "--filter=-1$",
            "--envs",
        ])
        .arg(envs_dir())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "check failed:\n{stderr}");
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["instance_id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "demo__cachekit-1",
            "demo__confkit-1",
            "demo__semverkit-1",
            "demo__tablefmt-1",
            "demo__textkit-1"
        ],
        "{stderr}"
    );
    for r in &rows {
        let id = &r["instance_id"];
        assert_eq!(r["environment"]["source"], "spec", "{id}: {r:#}");
        assert_eq!(r["reproduction_accepted"], true, "{id}: {r:#}");
        assert_eq!(
            r["order"],
            serde_json::json!(["gold", "wrong"]),
            "{id}: {r:#}"
        );
        assert_eq!(
            (&r["reproduction_with_gold"], &r["reproduction_with_wrong"]),
            (&Value::Bool(true), &Value::Bool(false)),
            "{id}: {r:#}"
        );
        assert_eq!(r["reproducer_mode"], "sample", "{id}: {r:#}");
        assert_eq!(
            r["reproduction_path"], "tests/test_reproduce_issue.py",
            "{id}: {r:#}"
        );
        assert_eq!(
            r["reproduction_command"], "pytest -rA 'tests/test_reproduce_issue.py'\n",
            "{id}: {r:#}"
        );
        let said = r["reproducer_said"].as_str().unwrap();
        assert!(said.starts_with("failed: "), "{id}: {said}");
    }
}
