//! `patchwright eval` on the demo tasks, through the command line: the
//! environments are built from datasets/envs (pip, in the sandbox), then
//! gold patches resolve, empty patches do not, a patch printing fake
//! "PASSED" lines does not, a patch that does not apply is an error (as in
//! SWE-bench), fuzz application works, a task without an environment is an
//! error, not an unresolved task, only predicted tasks are graded, and a
//! prediction for an instance the task file lacks is refused.

use crate::common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::envs_dir;

/// Runs `patchwright eval` with `args`; returns the summary (--json).
fn eval(dataset: &Path, out: &Path, args: &[&str]) -> Value {
    let output = eval_output(dataset, out, args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "eval failed: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// Runs `patchwright eval` with `args` (and the shared test environments
/// unless `args` names `--envs`).
fn eval_output(dataset: &Path, out: &Path, args: &[&str]) -> std::process::Output {
    let root = common::root();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_patchwright"));
    cmd.args(["eval", "--json", "--jobs", "2", "--dataset"])
        .arg(dataset)
        .arg("--repos")
        .arg(root.join("datasets/demo/repos"));
    if !args.contains(&"--envs") {
        cmd.arg("--envs").arg(envs_dir());
    }
    cmd.arg("--out")
        .arg(out)
        .args(args)
        .output()
        .expect("run patchwright eval")
}

fn ids(v: &Value, field: &str) -> Vec<String> {
    v[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} in {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

fn report(out: &Path, id: &str) -> Value {
    let text = std::fs::read_to_string(out.join("logs").join(id).join("report.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v[id].clone()
}

fn all_demo_ids() -> Vec<String> {
    let text = std::fs::read_to_string(common::root().join("datasets/demo/tasks.jsonl")).unwrap();
    let mut ids: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["instance_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids.sort();
    ids
}

#[test]
fn gold_patches_resolve_and_empty_patches_do_not() {
    let dataset = common::root().join("datasets/demo/tasks.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let all = all_demo_ids();

    let gold = eval(&dataset, &dir.path().join("gold"), &["--gold"]);
    assert_eq!(gold["total_instances"], 10);
    assert_eq!(ids(&gold, "resolved_ids"), all, "{gold:#}");
    assert_eq!(gold["error_instances"], 0);
    // The summary on stdout is the one written to report.json.
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("gold/report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(written, gold);
    let r = report(&dir.path().join("gold"), "demo__cachekit-1");
    assert_eq!(r["patch_successfully_applied"], true);
    assert_eq!(r["applied_with"], "git apply");
    assert_eq!(
        r["tests_status"]["FAIL_TO_PASS"]["failure"],
        serde_json::json!([])
    );
    let log = std::fs::read_to_string(
        dir.path()
            .join("gold/logs/demo__cachekit-1/test_output.txt"),
    )
    .unwrap();
    assert!(
        log.contains(
            "PASSED tests/test_decorators.py::test_separate_functions_do_not_share_results"
        ),
        "{log}"
    );

    let empty = eval(&dataset, &dir.path().join("empty"), &["--empty"]);
    assert_eq!(empty["resolved_instances"], 0, "{empty:#}");
    assert_eq!(ids(&empty, "unresolved_ids"), all);
    assert_eq!(ids(&empty, "empty_patch_ids"), all);
    for id in &all {
        let r = report(&dir.path().join("empty"), id);
        let f2p = &r["tests_status"]["FAIL_TO_PASS"];
        assert_eq!(
            f2p["success"],
            serde_json::json!([]),
            "{id}: FAIL_TO_PASS must fail at base"
        );
        assert_eq!(
            r["tests_status"]["PASS_TO_PASS"]["failure"],
            serde_json::json!([]),
            "{id}"
        );
    }
}

#[test]
fn predictions_are_graded_and_infrastructure_failures_labelled() {
    let task = common::demo_task("demo__cachekit-1");
    let dir = tempfile::tempdir().unwrap();
    // A patch that prints a PASSED line for every FAIL_TO_PASS test after
    // pytest's own summary, without fixing anything.
    let mut spoof = String::from(
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1,4 @@\n+def pytest_unconfigure(config):\n",
    );
    spoof += &format!("+    for t in {:?}:\n", task.fail_to_pass);
    spoof += "+        print('PASSED', t)\n+    print('PASSED everything')\n";
    // The gold patch with its context lines shifted: `git apply` refuses
    // it, `patch --fuzz=5` applies it.
    let fuzzed = task
        .patch
        .replacen("@@ -5,7 +5,7 @@", "@@ -9,7 +9,7 @@", 1)
        .replacen(
            "\n \n \n-def memoize",
            "\n # drifted context\n \n-def memoize",
            1,
        );
    assert_ne!(fuzzed, task.patch);
    let not_applying =
        "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n";
    let mut unknown = common::demo_task("demo__cachekit-2");
    unknown.instance_id = "demo__cachekit-99".into();
    unknown.version = "9.9".into();

    let dataset = dir.path().join("tasks.jsonl");
    let lines: Vec<String> = [
        task.clone(),
        {
            let mut t = task.clone();
            t.instance_id = "demo__cachekit-101".into();
            t
        },
        {
            let mut t = task.clone();
            t.instance_id = "demo__cachekit-102".into();
            t
        },
        unknown,
        {
            // No prediction: not graded, incomplete (not an empty patch).
            let mut t = task.clone();
            t.instance_id = "demo__cachekit-103".into();
            t
        },
    ]
    .iter()
    .map(|t| serde_json::to_string(t).unwrap())
    .collect();
    std::fs::write(&dataset, lines.join("\n")).unwrap();
    let predictions = dir.path().join("predictions.jsonl");
    let pred = |id: &str, patch: &str| {
        serde_json::json!({"instance_id": id, "model_name_or_path": "test", "model_patch": patch})
            .to_string()
    };
    std::fs::write(
        &predictions,
        [
            pred("demo__cachekit-1", &spoof),
            pred("demo__cachekit-101", &fuzzed),
            pred("demo__cachekit-102", not_applying),
            pred("demo__cachekit-99", &task.patch),
        ]
        .join("\n"),
    )
    .unwrap();
    let out = dir.path().join("out");
    let sum = eval(
        &dataset,
        &out,
        &["--predictions", predictions.to_str().unwrap()],
    );

    assert_eq!(ids(&sum, "resolved_ids"), ["demo__cachekit-101"], "{sum:#}");
    assert_eq!(ids(&sum, "unresolved_ids"), ["demo__cachekit-1"]);
    assert_eq!(
        ids(&sum, "error_ids"),
        ["demo__cachekit-102", "demo__cachekit-99"]
    );
    assert_eq!(
        ids(&sum["errors_by_kind"], "environment_missing"),
        ["demo__cachekit-99"]
    );
    assert_eq!(
        ids(&sum["errors_by_kind"], "patch_apply_failed"),
        ["demo__cachekit-102"]
    );
    assert_eq!(sum["total_instances"], 5);
    assert_eq!(sum["submitted_instances"], 4);
    assert_eq!(ids(&sum, "incomplete_ids"), ["demo__cachekit-103"]);
    assert_eq!(ids(&sum, "empty_patch_ids"), Vec::<String>::new());
    assert!(!out.join("logs/demo__cachekit-103").exists());

    let spoofed = report(&out, "demo__cachekit-1");
    let log = std::fs::read_to_string(out.join("logs/demo__cachekit-1/test_output.txt")).unwrap();
    assert!(
        log.contains(&format!("PASSED {}", task.fail_to_pass[0])),
        "the spoof ran: {log}"
    );
    assert_eq!(spoofed["resolved"], false);
    assert_eq!(
        spoofed["tests_status"]["FAIL_TO_PASS"]["failure"],
        serde_json::json!(task.fail_to_pass)
    );
    let fuzz = report(&out, "demo__cachekit-101");
    assert_eq!(fuzz["applied_with"], "patch --fuzz=5", "{fuzz:#}");
    let failed = report(&out, "demo__cachekit-102");
    assert_eq!(failed["patch_successfully_applied"], false);
    assert_eq!(failed["resolved"], false);
    assert_eq!(failed["error"]["kind"], "patch_apply_failed");
    let infra = report(&out, "demo__cachekit-99");
    assert_eq!(infra["error"]["kind"], "environment_missing");
    assert!(
        infra["error"]["message"]
            .as_str()
            .unwrap()
            .contains("version 9.9"),
        "{infra:#}"
    );
}

#[test]
fn a_prediction_for_an_instance_the_task_file_lacks_is_refused() {
    let dataset = common::root().join("datasets/demo/tasks.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let predictions = dir.path().join("predictions.jsonl");
    std::fs::write(
        &predictions,
        [
            r#"{"instance_id": "demo__cachekit-1", "model_patch": ""}"#,
            r#"{"instance_id": "astropy__astropy-12907", "model_patch": "diff"}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let out = dir.path().join("out");
    let output = eval_output(
        &dataset,
        &out,
        &["--predictions", predictions.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("predictions for instances not in the task file: astropy__astropy-12907"),
        "{stderr}"
    );
    assert!(!out.join("report.json").exists());

    // `--instance-ids` names tasks of the file, or is refused.
    let output = eval_output(
        &dataset,
        &out,
        &[
            "--empty",
            "--instance-ids",
            "demo__cachekit-1",
            "demo__nope-7",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("--instance-ids: not in "), "{stderr}");
    assert!(stderr.contains(": demo__nope-7"), "{stderr}");

    let two = eval(
        &dataset,
        &dir.path().join("two"),
        &[
            "--gold",
            "--instance-ids",
            "demo__cachekit-2",
            "demo__cachekit-1",
        ],
    );
    assert_eq!(two["total_instances"], 2, "{two:#}");
    assert_eq!(
        ids(&two, "resolved_ids"),
        ["demo__cachekit-1", "demo__cachekit-2"]
    );
}

/// Serves `body` to one connection on 127.0.0.1; the URL.
fn serve_once(body: &'static [u8]) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Some(Ok(mut stream)) = listener.incoming().next() {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body);
        }
    });
    format!("http://127.0.0.1:{port}/blob.tgz")
}

/// A spec's `downloads` (matplotlib's qhull and FreeType sources) are
/// fetched once, kept in the environment, and every task's install, which
/// runs `pre_install` again with the network off, reads them there.
#[test]
fn downloads_reach_each_task_install_offline() {
    use sha2::Digest;
    let body: &'static [u8] = b"the sources pre_install unpacks\n";
    let sha = hex::encode(sha2::Sha256::digest(body));
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    let spec = std::fs::read_to_string(common::root().join("datasets/envs/demo__cachekit.toml"))
        .unwrap()
        .replace(
            "[[env]]\n",
            &format!(
                "[[env]]\ndownloads = [{{ url = \"{}\", sha256 = \"{sha}\", file = \"blob.tgz\" }}]\n\
                 pre_install = [\"echo \\\"{sha}  $PATCHWRIGHT_DOWNLOADS/blob.tgz\\\" | sha256sum -c -\"]\n",
                serve_once(body)
            ),
        );
    std::fs::write(specs.join("demo__cachekit.toml"), spec).unwrap();
    let envs = dir.path().join("envs");
    let sum = eval(
        &common::root().join("datasets/demo/tasks.jsonl"),
        &dir.path().join("out"),
        &[
            "--gold",
            "--instance-ids",
            "demo__cachekit-1",
            "--specs",
            specs.to_str().unwrap(),
            "--envs",
            envs.to_str().unwrap(),
        ],
    );
    assert_eq!(ids(&sum, "resolved_ids"), ["demo__cachekit-1"], "{sum:#}");
    let log = std::fs::read_to_string(
        dir.path()
            .join("out/logs/demo__cachekit-1/run_instance.log"),
    )
    .unwrap();
    assert!(log.contains("blob.tgz: OK"), "{log}");
    let kept: Vec<_> = walk(&envs)
        .into_iter()
        .filter(|p| p.ends_with("patchwright/downloads/blob.tgz"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read(&kept[0]).unwrap(), body);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
