//! The sandbox preflight through the real binary: `batch`, `run`, `sweep`,
//! `eval` and `env build` refuse an unfit host with exit status 2 before
//! any work (the model is a file that does not exist, and the refusal must
//! name the sandbox, not the model), and `sandbox exec` says why it
//! refused. The bubblewrap is a fake one named by `PATCHWRIGHT_BWRAP`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common;

const DEMO: &str = "datasets/demo/tasks.jsonl";
const REPOS: &str = "datasets/demo/repos";
const DEMO_TASK: &str = "demo__cachekit-1";

/// What a real bubblewrap 0.6 prints on the policy's newest option.
const OLD_RUN: &str = "echo 'bwrap: Unknown option --disable-userns' >&2; exit 1";
/// What bubblewrap prints where user namespaces are refused.
const NO_USERNS_RUN: &str = "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1";

/// A fake bubblewrap in `dir`: prints `bubblewrap VERSION` for `--version`,
/// runs `run` (shell) otherwise.
fn fake_bwrap(dir: &Path, version: &str, run: &str) -> PathBuf {
    let path = dir.join("bwrap");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap {version}'; exit 0; fi\n{run}\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `patchwright ARGS` from the source tree, with `PATCHWRIGHT_BWRAP` set to
/// `bwrap` (or removed).
fn patchwright(bwrap: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_patchwright"));
    cmd.args(args).current_dir(common::root());
    match bwrap {
        Some(b) => cmd.env("PATCHWRIGHT_BWRAP", b),
        None => cmd.env_remove("PATCHWRIGHT_BWRAP"),
    };
    cmd.output().expect("patchwright runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The five commands that start work, each with a model that does not exist
/// where it takes one, writing under `dir`.
fn commands(dir: &Path, model: &str) -> Vec<(&'static str, Vec<String>)> {
    let out = |name: &str| dir.join(name).display().to_string();
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    vec![
        (
            "batch",
            [
                s(&[
                    "batch",
                    "--dataset",
                    DEMO,
                    "--repos",
                    REPOS,
                    "--model",
                    model,
                ]),
                vec!["--out".into(), out("batch")],
            ]
            .concat(),
        ),
        (
            "run",
            [
                s(&[
                    "run",
                    "--task",
                    DEMO_TASK,
                    "--dataset",
                    DEMO,
                    "--repos",
                    REPOS,
                    "--model",
                    model,
                ]),
                vec!["--out".into(), out("run")],
            ]
            .concat(),
        ),
        (
            "sweep",
            [
                s(&[
                    "sweep",
                    "--dataset",
                    DEMO,
                    "--repos",
                    REPOS,
                    "--model",
                    model,
                    "--grid",
                    "temperature=0,0.5",
                ]),
                vec!["--out".into(), out("sweep")],
            ]
            .concat(),
        ),
        (
            "eval",
            [
                s(&["eval", "--dataset", DEMO, "--repos", REPOS, "--gold"]),
                vec!["--envs".into(), out("envs")],
                vec!["--out".into(), out("eval")],
            ]
            .concat(),
        ),
        (
            "env build",
            [
                s(&["env", "build", "--dataset", DEMO, "--repos", REPOS]),
                vec!["--envs".into(), out("envs")],
            ]
            .concat(),
        ),
    ]
}

#[test]
fn an_old_bubblewrap_is_refused_before_any_work_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let bwrap = fake_bwrap(dir.path(), "0.5.0", OLD_RUN);
    let model = dir.path().join("no-such-model.gguf");
    let model = model.to_str().unwrap();
    for (name, args) in commands(dir.path(), model) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = patchwright(Some(&bwrap), &args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(&format!(
                "bubblewrap 0.5.0 at {} is too old: the sandbox supports bubblewrap >= 0.6.0; \
                 install bubblewrap >= 0.6.0",
                bwrap.display()
            )),
            "{name}: {err}"
        );
        assert!(
            err.contains("; set PATCHWRIGHT_BWRAP to use another): "),
            "{name}: {err}"
        );
        assert!(
            !err.contains("no-such-model"),
            "{name}: the model was never looked at: {err}"
        );
        let written: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "bwrap")
            .collect();
        assert!(
            written.is_empty(),
            "{name}: nothing was started: {written:?}"
        );
    }
}

/// The control of the test above: on this host's own bubblewrap the same
/// `batch` gets past the sandbox and fails on the model, with status 1.
#[test]
fn on_a_fit_host_the_same_batch_fails_on_the_model_instead() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("no-such-model.gguf");
    let (_, args) = commands(dir.path(), model.to_str().unwrap()).remove(0);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = patchwright(None, &args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no-such-model.gguf"), "{err}");
    assert!(
        err.contains("sandbox: bubblewrap "),
        "the check ran and passed: {err}"
    );
}

#[test]
fn a_missing_bubblewrap_is_refused_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let bwrap = dir.path().join("nowhere/bwrap");
    let model = dir.path().join("no-such-model.gguf");
    let (_, args) = commands(dir.path(), model.to_str().unwrap()).remove(0);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = patchwright(Some(&bwrap), &args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "bubblewrap not found at {}: install bubblewrap >= 0.6.0",
            bwrap.display()
        )),
        "{err}"
    );
}

#[test]
fn a_bubblewrap_without_user_namespaces_is_refused_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let bwrap = fake_bwrap(dir.path(), "0.8.0", NO_USERNS_RUN);
    let model = dir.path().join("no-such-model.gguf");
    let (_, args) = commands(dir.path(), model.to_str().unwrap()).remove(0);
    // Without the WASI tier's runtime (an empty cache), `auto` has no tier
    // to fall back to (tests/it/wasi.rs has the fallback).
    let cache = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .args(&args)
        .current_dir(common::root())
        .env("PATCHWRIGHT_BWRAP", &bwrap)
        .env("PATCHWRIGHT_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("and the WASI tier that `--sandbox auto` uses instead is not ready: the WASI tier's Python is not fetched"),
        "{err}"
    );
    assert!(
        err.contains("run `patchwright sandbox fetch-wasi`"),
        "{err}"
    );
    for want in [
        format!(
            "bubblewrap {} could not build the sandbox, so no sandboxed command can run: \
             bwrap: setting up uid map: Permission denied; host user-namespace settings: ",
            bwrap.display()
        ),
        "enable unprivileged user namespaces".to_string(),
    ] {
        assert!(err.contains(&want), "{want:?} in {err}");
    }
    // The settings read are named with the values this host has.
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap();
    assert!(
        err.contains(&format!("user.max_user_namespaces = {}", max.trim())),
        "{err}"
    );
}

#[test]
fn sandbox_exec_says_why_the_host_cannot_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let bwrap = fake_bwrap(dir.path(), "0.5.0", OLD_RUN);
    let work = tempfile::tempdir().unwrap();
    let o = patchwright(
        Some(&bwrap),
        &[
            "sandbox",
            "exec",
            "--dir",
            work.path().to_str().unwrap(),
            "--",
            "true",
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains(&format!(
            "bubblewrap 0.5.0 at {} is too old: the sandbox supports bubblewrap >= 0.6.0",
            bwrap.display()
        )),
        "{err}"
    );
}
