//! `patchwright batch` end to end, through the real binary.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn patchwright(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .args(args)
        .current_dir(common::root())
        .output()
        .expect("patchwright runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const DEMO: &str = "datasets/demo/tasks.jsonl";

fn list(extra: &[&str]) -> Vec<String> {
    let mut args = vec!["batch", "--dataset", DEMO, "--list"];
    args.extend_from_slice(extra);
    let o = patchwright(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o).lines().map(String::from).collect()
}

#[test]
fn shards_cover_every_demo_task_exactly_once() {
    let all = list(&[]);
    assert!(all.len() >= 6, "the demo set has at least 6 tasks: {all:?}");
    let mut union: Vec<String> = (1..=3)
        .flat_map(|k| list(&["--shard", &format!("{k}/3")]))
        .collect();
    assert_eq!(union.len(), all.len(), "no task is in two shards");
    union.sort();
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(union, sorted);
    // Filter and slice compose with the listing.
    assert_eq!(list(&["--slice", "1:3"]), all[1..3].to_vec());
    assert_eq!(
        list(&["--filter", &format!("^{}$", regex_escape(&all[0]))]),
        vec![all[0].clone()]
    );
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '_' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

#[test]
fn a_broken_task_file_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(common::root().join(DEMO)).unwrap();
    let first = good.lines().next().unwrap();
    let mut broken: Value = serde_json::from_str(first).unwrap();
    broken["instance_id"] = "other-1".into();
    broken["FAIL_TO_PASS"] = 5.into();
    let file = dir.path().join("tasks.jsonl");
    std::fs::write(&file, format!("{first}\n{broken}\n")).unwrap();
    let out = dir.path().join("run");
    let o = patchwright(&[
        "batch",
        "--dataset",
        file.to_str().unwrap(),
        "--repos",
        "datasets/demo/repos",
        "--out",
        out.to_str().unwrap(),
        "--model",
        "smollm2-135m",
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert!(err.contains("line 2: field `FAIL_TO_PASS`"), "{err}");
    assert!(!out.exists(), "nothing was started");
}

/// One demo task and one task whose repository is missing, on SmolLM2.
fn run_batch(dir: &Path, name: &str, extra: &[&str]) -> (PathBuf, String, Output) {
    let demo = std::fs::read_to_string(common::root().join(DEMO)).unwrap();
    let first: Value = serde_json::from_str(demo.lines().next().unwrap()).unwrap();
    let id = first["instance_id"].as_str().unwrap().to_string();
    let mut ghost = first.clone();
    ghost["instance_id"] = "ghost__repo-1".into();
    ghost["repo"] = "ghost/repo".into();
    let tasks = dir.join("tasks.jsonl");
    std::fs::write(&tasks, format!("{ghost}\n{first}\n")).unwrap();
    let config = dir.join("test.toml");
    std::fs::write(
        &config,
        "[engine]\ncontext = 4096\nthreads = 2\n[sampling]\nmax_tokens = 48\n[retrieval]\nfiles = 1\n[pipeline]\nkind = \"first\"\n",
    )
    .unwrap();
    let out = dir.join(name);
    let mut args = vec![
        "batch",
        "--dataset",
        tasks.to_str().unwrap(),
        "--repos",
        "datasets/demo/repos",
        "--out",
        out.to_str().unwrap(),
        "--model",
        "smollm2-135m",
        "--config",
        config.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = patchwright(&args);
    assert!(o.status.success(), "batch failed: {}", stderr(&o));
    (out, id, o)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_batch_writes_predictions_trajectories_and_run_json() {
    common::test_model();
    let dir = tempfile::tempdir().unwrap();
    let (out, id, o) = run_batch(dir.path(), "a", &[]);

    // stdout names the outputs.
    assert_eq!(
        stdout(&o),
        format!(
            "predictions: {0}/predictions.jsonl\ntrajectories: {0}/trajectories\nrun: {0}/run.json\n",
            out.display()
        )
    );

    // One prediction: the task with a repository. The missing one is an error.
    let predictions = std::fs::read_to_string(out.join("predictions.jsonl")).unwrap();
    let lines: Vec<Value> = predictions
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{predictions}");
    let p = lines[0].as_object().unwrap();
    assert_eq!(
        p.keys().collect::<Vec<_>>(),
        ["instance_id", "model_name_or_path", "model_patch"]
    );
    assert_eq!(p["instance_id"], id.as_str());
    assert_eq!(p["model_name_or_path"], "patchwright__smollm2-135m");
    assert!(p["model_patch"].is_string());

    let ghost = read_json(&out.join("results/ghost__repo-1.json"));
    assert_eq!(ghost["status"], "error");
    assert_eq!(ghost["error"]["kind"], "repository");
    assert!(
        ghost["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no repository for `ghost/repo`"),
        "{ghost}"
    );
    assert!(stderr(&o).contains("ghost__repo-1"), "the error is logged");

    // The trajectory records the real model call.
    let t = read_json(&out.join(format!("trajectories/{id}.json")));
    let steps = t["steps"].as_array().unwrap();
    let kinds: Vec<&str> = steps.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["retrieve", "model_call", "edit", "diff"]);
    let call = &steps[1];
    assert!(call["prompt_tokens"].as_u64().unwrap() > 100);
    let generated = call["completion_tokens"].as_u64().unwrap();
    assert!(generated > 0 && generated <= 48);
    assert_eq!(call["tokens"].as_array().unwrap().len() as u64, generated);
    assert_eq!(call["sampling"]["max_tokens"], 48);
    let task: Value = serde_json::from_str(
        std::fs::read_to_string(common::root().join(DEMO))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let user = call["messages"][1]["content"].as_str().unwrap();
    assert!(user.contains(task["problem_statement"].as_str().unwrap().trim()));
    assert_eq!(
        steps[0]["shown"].as_array().unwrap().len(),
        1,
        "retrieval.files = 1"
    );
    assert_eq!(t["model_patch"], p["model_patch"]);

    // run.json: resolved settings, the model's checksum, the selection.
    let run = read_json(&out.join("run.json"));
    let known = patchwright::models::manifest().unwrap();
    let smol = known.iter().find(|k| k.name == "smollm2-135m").unwrap();
    assert_eq!(run["model"]["sha256"], smol.sha256.as_str());
    assert_eq!(run["settings"]["sampling"]["max_tokens"], 48);
    assert_eq!(run["settings"]["engine"]["context"], 4096);
    assert_eq!(
        run["settings"]["sampling"]["temperature"], 0.0,
        "untouched defaults stay"
    );
    assert_eq!(
        run["selection"]["instance_ids"],
        serde_json::json!(["ghost__repo-1", id])
    );
    assert_eq!(run["summary"]["errors"], 1);
    assert!(run["finished_at"].is_string());
    assert!(
        !out.join("workspaces").join(&id).exists(),
        "workspaces are removed"
    );

    // Greedy decoding: a second run writes the same predictions.
    let (again, _, _) = run_batch(dir.path(), "b", &["--keep-workspaces"]);
    assert_eq!(
        std::fs::read_to_string(again.join("predictions.jsonl")).unwrap(),
        predictions
    );
    assert!(
        again.join("workspaces").join(&id).join(".git").exists(),
        "--keep-workspaces keeps it"
    );
}

/// The MASAI pipeline, the default, through `patchwright run` on SmolLM2
/// with small budgets: every stage runs in the task's own environment
/// (from its spec, no `--environment`), the Fixer's candidates come from
/// one prompt evaluation, the artifacts and metrics are written, and the
/// metrics' grade of the picked patch is the grader's.
#[test]
fn run_drives_the_masai_pipeline_on_one_task() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("masai.toml");
    std::fs::write(
        &config,
        "[engine]\ncontext = 4096\n[react]\nreply_tokens = 96\n[aci]\nwindow = 20\n\
         [agents.test_template]\nmax_steps = 2\ntemperature = 0.0\n\
         [agents.reproducer]\nmax_steps = 2\ntemperature = 0.0\n\
         [agents.localizer]\nmax_steps = 3\ntemperature = 0.0\n\
         [fixer]\ncandidates = 3\nmax_tokens = 96\nrounds = 1\n",
    )
    .unwrap();
    let out = dir.path().join("run");
    let envs = std::env::var("PATCHWRIGHT_ENVS_DIR")
        .unwrap_or_else(|_| format!("{}/envs", env!("CARGO_TARGET_TMPDIR")));
    let o = patchwright(&[
        "run",
        "--evaluate",
        "--envs",
        &envs,
        "--task",
        "demo__cachekit-1",
        "--dataset",
        DEMO,
        "--repos",
        "datasets/demo/repos",
        "--model",
        "smollm2-135m",
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let log = stderr(&o);
    assert!(o.status.success(), "run failed: {log}");
    for stage in [
        "stage 1/5, edit localizer",
        "stage 2/5, test template",
        // The located module's own test file passes: the template, no model.
        "  test template: existing tests/test_decorators.py: passed",
        // The default reproducer: four sampled test files, each run.
        "stage 3/5, issue reproducer (4 sampled candidates)",
        "  reproducer: 4 candidates (",
        "stage 4/5, fixer (3 candidates",
        "stage 5/5, ranker",
    ] {
        assert!(log.contains(stage), "no `{stage}` in the log:\n{log}");
    }
    let artifacts = out.join("artifacts/demo__cachekit-1");
    for name in ["template", "reproduction", "locations", "fixes", "metrics"] {
        assert!(
            artifacts.join(format!("{name}.json")).is_file(),
            "{name}.json:\n{log}"
        );
    }
    let trajectory = read_json(&out.join("trajectories/demo__cachekit-1.json"));
    let fixer: Vec<&Value> = trajectory["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "model_call" && s["purpose"] == "fixer")
        .collect();
    assert_eq!(fixer.len(), 1, "one prompt evaluation for all candidates");
    assert_eq!(fixer[0]["candidates"].as_array().unwrap().len(), 3);
    let calls = |purpose: &str| -> Vec<&Value> {
        trajectory["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["kind"] == "model_call" && s["purpose"] == purpose)
            .collect()
    };
    assert!(
        calls("test_template").is_empty(),
        "the template needs no model"
    );
    let reproducer = calls("reproducer");
    assert_eq!(reproducer.len(), 1, "one prompt for all test candidates");
    assert_eq!(reproducer[0]["candidates"].as_array().unwrap().len(), 4);
    let reproduction = read_json(&artifacts.join("reproduction.json"));
    assert_eq!(reproduction["source"], "sample");
    assert_eq!(reproduction["samples"].as_array().unwrap().len(), 4);
    let template = read_json(&artifacts.join("template.json"));
    assert_eq!(template["source"], "existing");
    assert_eq!(template["test"]["path"], "tests/test_decorators.py");
    let metrics = read_json(&artifacts.join("metrics.json"));
    assert_eq!(metrics["candidates_generated"], 3);
    assert_eq!(
        metrics["gold_files"],
        serde_json::json!(["cachekit/decorators.py"])
    );
    let summary = read_json(&out.join("metrics.json"));
    assert_eq!(summary["tasks"], 1);
    assert!(out.join("predictions.jsonl").is_file());
    // --evaluate graded the task as `patchwright eval` would.
    assert!(log.contains("resolved so far"), "{log}");
    let result = read_json(&out.join("results/demo__cachekit-1.json"));
    let graded = read_json(&out.join("eval/report.json"));
    assert_eq!(graded["total_instances"], 1);
    let patched = !result["model_patch"].as_str().unwrap().is_empty();
    assert_eq!(
        graded["empty_patch_instances"],
        if patched { 0 } else { 1 },
        "{graded:#}"
    );
    assert_eq!(
        graded["completed_instances"],
        if patched { 1 } else { 0 },
        "{graded:#}"
    );
    assert_eq!(graded["error_instances"], 0, "{graded:#}");
    // The environment: the task's own, named in its result and run.json.
    assert_eq!(result["environment"]["source"], "spec", "{result:#}");
    assert_eq!(result["environment"]["repo"], "demo/cachekit");
    assert!(result["environment"]["error"].is_null(), "{result:#}");
    let run_json = read_json(&out.join("run.json"));
    assert_eq!(
        run_json["environments"][0]["source"], "spec",
        "{run_json:#}"
    );
    assert!(metrics["env_import_errors"].is_u64(), "{metrics:#}");
    // One grader: the metrics' picked_resolves is eval's verdict.
    let resolved = graded["resolved_ids"]
        .as_array()
        .unwrap()
        .iter()
        .any(|id| id == "demo__cachekit-1");
    assert_eq!(
        metrics["picked_resolves"], resolved,
        "{metrics:#} {graded:#}"
    );
}
