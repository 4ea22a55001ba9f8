//! Air-gapped, for real: `patchwright pack` bundles the tasks of two demo
//! repositories (with the network: PyPI for the wheels), then `env
//! build`, `batch --evaluate`, `eval --gold` and `eval --empty` run from
//! the bundle inside a network namespace with nothing but a loopback
//! interface (`unshare --net`, as root), so any attempt to reach the
//! network fails. A second pack downloads nothing; a damaged file is named
//! by `pack --check` and by the run that needs it, a missing piece by the
//! run, and a third pack replaces the damaged file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common;

/// What is packed: the four tasks of two demo repositories, each its own
/// environment from the bundle's wheels and interpreter (all five
/// repositories cost the suite 219 s, most of it downloading wheels and
/// building environments, one repository after another).
const PACKED: &str = "^demo__(cachekit|textkit)-";

/// The runs from the bundle build, run and grade one task of each. The
/// bundle's task file is the whole demo file, so every run selects (a run
/// of tasks not packed is refused, naming what the bundle lacks).
const TWO_REPOSITORIES: &str = "^demo__(cachekit|textkit)-1$";

fn pw() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_patchwright"));
    c.env_remove("PATCHWRIGHT_BUNDLE");
    c
}

/// `patchwright ARGS` in a new network namespace with no interface but
/// loopback, environments built into `envs`.
fn offline(envs: &Path, args: &[&str], bundle_env: Option<&Path>) -> Output {
    let mut c = Command::new("unshare");
    c.arg("--net")
        .arg(env!("CARGO_BIN_EXE_patchwright"))
        .args(args)
        .env("PATCHWRIGHT_ENVS_DIR", envs)
        // Nothing from the host's models directory: only the bundle's.
        .env("PATCHWRIGHT_MODELS_DIR", envs.join("no-models-here"))
        .env_remove("PATCHWRIGHT_BUNDLE");
    if let Some(b) = bundle_env {
        c.env("PATCHWRIGHT_BUNDLE", b);
    }
    c.output().expect("run unshare (util-linux)")
}

fn ok(out: &Output, what: &str) -> (String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}): {stderr}\n{stdout}",
        out.status
    );
    (stdout, stderr)
}

fn pack(bundle: &Path) -> Value {
    pack_with(bundle, &["--model", "smollm2-135m", "--filter", PACKED])
}

fn pack_with(bundle: &Path, extra: &[&str]) -> Value {
    let root = common::root();
    // The test model must be in the host's models directory (scripts/test
    // fetches it); pack copies it from there.
    common::test_model();
    let out = pw()
        .args(["pack", "--json"])
        .args(extra)
        .arg("--dataset")
        .arg(root.join("datasets/demo/tasks.jsonl"))
        .arg("--repos")
        .arg(root.join("datasets/demo/repos"))
        .arg("--out")
        .arg(bundle)
        .output()
        .expect("run patchwright pack");
    let (stdout, stderr) = ok(&out, "pack");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
        .collect()
}

#[test]
fn the_demo_runs_from_a_bundle_with_no_network() {
    let dir = tempfile::Builder::new()
        .prefix("offline-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let bundle = dir.path().join("demo-bundle");
    let envs = dir.path().join("envs");
    std::fs::create_dir_all(&envs).unwrap();

    // Pack: every piece added, none failed.
    let first = pack(&bundle);
    assert_eq!(strings(&first["errors"]), Vec::<String>::new());
    let added = strings(&first["added"]);
    let python = added
        .iter()
        .find(|a| a.starts_with("Python 3.11."))
        .unwrap_or_else(|| panic!("no interpreter packed: {added:?}"))
        .clone();
    for want in [
        "dataset dataset/tasks.jsonl",
        "model smollm2-135m-instruct-q4_1.gguf",
        "repository demo/textkit (1 commits)",
        "wheels of demo/cachekit 0.1",
        "wheels of demo/textkit 0.1",
    ] {
        assert!(added.iter().any(|a| a == want), "{want} not in {added:?}");
    }
    assert_eq!(added.len(), 1 + 1 + 2 + 1 + 2, "{added:?}");
    for part in ["dataset", "models", "repos", "wheels", "python"] {
        assert!(
            first["sizes"][part].as_u64().unwrap_or(0) > 0,
            "{part}: {}",
            first["sizes"]
        );
    }
    // The git bundles hold one commit each, shallow.
    let heads =
        patchwright::repo::bundle_heads(&bundle.join("repos/demo__textkit.bundle")).unwrap();
    assert_eq!(heads.len(), 1);

    // A second pack adds nothing (no download), and the check passes.
    let second = pack(&bundle);
    assert_eq!(strings(&second["added"]), Vec::<String>::new());
    // Kept: the task file, the model, 2 git bundles, and per environment
    // its interpreter, its wheels and its 2 tasks' commits.
    assert_eq!(second["kept"].as_u64(), Some(1 + 1 + 2 + 2 * (1 + 1 + 2)));
    ok(
        &pw()
            .args(["pack", "--check"])
            .arg(&bundle)
            .output()
            .unwrap(),
        "pack --check",
    );
    // A pack of fewer tasks and no model keeps what the bundle held.
    let subset = pack_with(&bundle, &["--filter", "textkit"]);
    assert_eq!(strings(&subset["added"]), Vec::<String>::new());
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["tasks"].as_array().map(Vec::len), Some(4));
    assert_eq!(manifest["envs"].as_object().map(|o| o.len()), Some(2));
    assert_eq!(manifest["repos"].as_object().map(|o| o.len()), Some(2));
    assert!(
        manifest["models"]["smollm2-135m-instruct-q4_1.gguf"].is_object(),
        "{}",
        manifest["models"]
    );

    // The namespace really has no network: only `lo`, and it is down.
    let devs = Command::new("unshare")
        .args(["--net", "cat", "/proc/net/dev"])
        .output()
        .expect("run unshare");
    let (devs, _) = ok(&devs, "unshare --net (as root)");
    let names: Vec<&str> = devs
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next().map(str::trim))
        .collect();
    assert_eq!(names, ["lo"]);

    let b = bundle.to_str().unwrap();
    // Environments from the bundle's wheels and interpreter.
    let (stdout, _) = ok(
        &offline(
            &envs,
            &["env", "build", "--bundle", b, "--filter", TWO_REPOSITORIES],
            None,
        ),
        "env build",
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        2,
        "{stdout}"
    );
    let version = python.trim_start_matches("Python ");
    let built: Vec<PathBuf> = std::fs::read_dir(envs.join("demo__textkit"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(built.len(), 1, "{built:?}");
    let cfg = std::fs::read_to_string(built[0].join("pyvenv.cfg")).unwrap();
    let home = bundle.join("python").join(version).join("bin");
    assert!(cfg.contains(&format!("home = {}", home.display())), "{cfg}");

    // Gold patches resolve, empty ones do not (the bundle from the
    // environment variable here, the flag below).
    let gold = dir.path().join("gold");
    let (stdout, _) = ok(
        &offline(
            &envs,
            &[
                "eval",
                "--gold",
                "--json",
                "--filter",
                TWO_REPOSITORIES,
                "--out",
                gold.to_str().unwrap(),
            ],
            Some(&bundle),
        ),
        "eval --gold",
    );
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (
            v["resolved_instances"].as_u64(),
            v["error_instances"].as_u64()
        ),
        (Some(2), Some(0)),
        "{v}"
    );
    let empty = dir.path().join("empty");
    let (stdout, _) = ok(
        &offline(
            &envs,
            &[
                "eval",
                "--bundle",
                b,
                "--empty",
                "--json",
                "--filter",
                TWO_REPOSITORIES,
                "--out",
                empty.to_str().unwrap(),
            ],
            None,
        ),
        "eval --empty",
    );
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (
            v["resolved_instances"].as_u64(),
            v["error_instances"].as_u64()
        ),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(v["unresolved_instances"].as_u64(), Some(2), "{v}");

    // A batch on the bundle's model, graded as it goes.
    let config = dir.path().join("first.toml");
    std::fs::write(
        &config,
        "[engine]\ncontext = 1024\nthreads = 2\n[sampling]\nmax_tokens = 8\n[retrieval]\nfiles = 1\n[pipeline]\nkind = \"first\"\n",
    )
    .unwrap();
    let run = dir.path().join("run");
    ok(
        &offline(
            &envs,
            &[
                "batch",
                "--bundle",
                b,
                "--model",
                "smollm2-135m",
                "--filter",
                TWO_REPOSITORIES,
                "--config",
                config.to_str().unwrap(),
                "--evaluate",
                "--out",
                run.to_str().unwrap(),
            ],
            None,
        ),
        "batch --evaluate",
    );
    let results: Vec<PathBuf> = std::fs::read_dir(run.join("results"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(results.len(), 2);
    for r in &results {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(r).unwrap()).unwrap();
        assert!(v["error"].is_null(), "{}: {}", r.display(), v["error"]);
    }
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert!(
        run_json["model"]["path"]
            .as_str()
            .is_some_and(|p| p.starts_with(b)),
        "the model is not the bundle's: {}",
        run_json["model"]
    );

    // A task the bundle was not packed for: refused, naming the task, the
    // piece and the pack command.
    let other = dir.path().join("other.jsonl");
    let task = std::fs::read_to_string(common::root().join("datasets/demo/tasks.jsonl")).unwrap();
    let line = task
        .lines()
        .next()
        .unwrap()
        .replace("\"demo/cachekit\"", "\"demo/elsewhere\"");
    std::fs::write(&other, format!("{line}\n")).unwrap();
    let out = offline(
        &envs,
        &[
            "eval",
            "--bundle",
            b,
            "--dataset",
            other.to_str().unwrap(),
            "--gold",
            "--out",
            dir.path().join("x").to_str().unwrap(),
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("demo__cachekit-1: the repository demo/elsewhere"),
        "{stderr}"
    );
    assert!(stderr.contains("patchwright pack --dataset"), "{stderr}");

    // A damaged wheel: named by the check and by the run that needs it.
    let house = bundle.join("wheels/demo__textkit/0.1");
    let wheel = std::fs::read_dir(&house)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.to_string_lossy().contains("pytest-") && p.extension().is_some_and(|x| x == "whl")
        })
        .expect("pytest's wheel in the textkit wheelhouse");
    let mut bytes = std::fs::read(&wheel).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&wheel, &bytes).unwrap();
    let out = pw()
        .args(["pack", "--check"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("BAD {}", wheel.display())),
        "{stdout}"
    );
    assert_eq!(stdout.matches("BAD ").count(), 1, "{stdout}");
    let out = offline(
        &envs,
        &[
            "eval",
            "--bundle",
            b,
            "--filter",
            "textkit",
            "--gold",
            "--out",
            dir.path().join("y").to_str().unwrap(),
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&wheel.display().to_string()), "{stderr}");
    // ... but not by a run that does not need it.
    ok(
        &offline(
            &envs,
            &[
                "eval",
                "--bundle",
                b,
                "--filter",
                "cachekit-1",
                "--gold",
                "--out",
                dir.path().join("z").to_str().unwrap(),
            ],
            None,
        ),
        "eval of a task that does not need the damaged file",
    );

    // Packing again replaces it.
    let third = pack(&bundle);
    let replaced = strings(
        &third["replaced"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["path"].clone())
            .collect::<Value>(),
    );
    assert_eq!(replaced, [wheel.display().to_string()]);
    assert_eq!(strings(&third["added"]), ["wheels of demo/textkit 0.1"]);
    ok(
        &pw()
            .args(["pack", "--check"])
            .arg(&bundle)
            .output()
            .unwrap(),
        "pack --check after repair",
    );
}

/// What `--bundle` refuses, before any work: a directory that is no
/// bundle, a newer format, and flags that would take pieces from
/// elsewhere.
#[test]
fn bundle_flags_are_checked_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b");
    std::fs::create_dir_all(&bundle).unwrap();
    let manifest = |format: u32| {
        format!(
            r#"{{"format": {format}, "packed_by": "t", "packed_at": "t", "dataset": "dataset/t.jsonl", "tasks": []}}"#
        )
    };
    let b = bundle.to_str().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let cases: [(Option<u32>, Vec<&str>, &str); 4] = [
        (
            None,
            vec!["eval", "--bundle", b, "--gold", "--out", o],
            "is not a bundle (no manifest.json)",
        ),
        (
            Some(99),
            vec!["eval", "--bundle", b, "--gold", "--out", o],
            "bundle format 99 is newer",
        ),
        (
            Some(1),
            vec!["eval", "--bundle", b, "--repos", o, "--gold", "--out", o],
            "with a bundle the repositories are its own",
        ),
        (
            Some(1),
            vec!["env", "build", "--bundle", b, "--wheels", o],
            "'--bundle <BUNDLE>' cannot be used with '--wheels <DIR>'",
        ),
    ];
    for (format, args, want) in cases {
        match format {
            Some(f) => std::fs::write(bundle.join("manifest.json"), manifest(f)).unwrap(),
            None => {
                let _ = std::fs::remove_file(bundle.join("manifest.json"));
            }
        }
        let output = pw().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}
