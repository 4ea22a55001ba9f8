//! The WASI sandbox tier through the command line: `eval --sandbox wasi`
//! grades the ten demo tasks' gold patches resolved and their empty
//! patches unresolved; `--sandbox auto` chooses the tier (with a warning)
//! when bubblewrap cannot create namespaces, and stays an error when
//! bubblewrap fails another way; a spec the tier cannot serve is an
//! `unsupported_in_tier` error of its tasks with the reason, while the
//! other tasks grade; `aci`'s `run` shows the model the tier's refusal of a
//! shell command. The runtime is the one `scripts/test` fetched
//! (`patchwright sandbox fetch-wasi`, into `$PATCHWRIGHT_CACHE_DIR`); the
//! WASI environments (pytest's wheels) are made once under
//! `$PATCHWRIGHT_ENVS_DIR`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{self, envs_dir};

const DEMO: &str = "datasets/demo/tasks.jsonl";
const REPOS: &str = "datasets/demo/repos";
/// What bubblewrap prints where user namespaces are refused.
const NO_USERNS_RUN: &str = "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1";
/// What a shell prints when the program is not there.
const NOT_FOUND_RUN: &str = "echo 'bwrap: execvp true: No such file or directory' >&2; exit 127";
/// The warning `auto` logs when it chooses the WASI tier.
const CHOSE_WASI: &str = "using the WASI tier: only Python commands run";

/// `patchwright ARGS` from the source tree, with `PATCHWRIGHT_BWRAP` set to
/// `bwrap` (or removed) and the shared test environments.
fn patchwright(bwrap: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_patchwright"));
    cmd.args(args).current_dir(common::root());
    match bwrap {
        Some(b) => cmd.env("PATCHWRIGHT_BWRAP", b),
        None => cmd.env_remove("PATCHWRIGHT_BWRAP"),
    };
    cmd.output().expect("patchwright runs")
}

/// `eval --json` of the demo tasks with `args`, under `bwrap`.
fn eval(bwrap: Option<&Path>, out: &Path, args: &[&str]) -> Output {
    let envs = envs_dir();
    let mut all = vec![
        "eval",
        "--json",
        "--jobs",
        "2",
        "--dataset",
        DEMO,
        "--repos",
        REPOS,
        "--envs",
        envs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    patchwright(bwrap, &all)
}

fn summary(o: &Output) -> Value {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "eval failed: {err}");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {err}"))
}

fn ids(v: &Value, field: &str) -> Vec<String> {
    let mut ids: Vec<String> = v[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} in {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

fn report(out: &Path, id: &str) -> Value {
    let path = out.join("logs").join(id).join("report.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str::<Value>(&text).unwrap()[id].clone()
}

/// The first demo task of each repository, sorted.
fn one_task_per_repository() -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    all_demo_ids()
        .into_iter()
        .filter(|id| {
            seen.insert(
                id.rsplit_once('-')
                    .map_or(id.clone(), |(r, _)| r.to_string()),
            )
        })
        .collect()
}

fn all_demo_ids() -> Vec<String> {
    let text = std::fs::read_to_string(common::root().join(DEMO)).unwrap();
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

/// A fake bubblewrap in `dir`: prints `bubblewrap 0.8.0` for `--version`,
/// runs `run` (shell) otherwise.
fn fake_bwrap(dir: &Path, run: &str) -> PathBuf {
    let path = dir.join("bwrap");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap 0.8.0'; exit 0; fi\n{run}\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn under_wasi_gold_patches_resolve_and_empty_patches_do_not() {
    // One task of each demo repository: each has its own environment and
    // tests, which is what the tier must serve (a second task of a
    // repository proves nothing more).
    let all = one_task_per_repository();
    assert_eq!(all.len(), 5);
    let selected = |mode: &'static str| {
        let mut args = vec![mode, "--sandbox", "wasi", "--instance-ids"];
        args.extend(all.iter().map(String::as_str));
        args
    };
    let dir = tempfile::tempdir().unwrap();

    let gold = dir.path().join("gold");
    let o = eval(None, &gold, &selected("--gold"));
    let s = summary(&o);
    assert_eq!(s["total_instances"], 5, "{s}");
    assert_eq!(s["resolved_instances"], 5, "{s}");
    assert_eq!(s["unresolved_instances"], 0, "{s}");
    assert_eq!(s["error_instances"], 0, "{s}");
    assert_eq!(ids(&s, "resolved_ids"), all);
    for id in &all {
        let r = report(&gold, id);
        assert_eq!(r["applied_with"], "git apply", "{id}: {r}");
        let log =
            std::fs::read_to_string(gold.join("logs").join(id).join("run_instance.log")).unwrap();
        assert!(
            log.contains("(WASI tier: nothing installed; the worktree is on PYTHONPATH"),
            "{id}: {log}"
        );
        // pytest ran in the guest: its `-rA` summary was graded.
        let out =
            std::fs::read_to_string(gold.join("logs").join(id).join("test_output.txt")).unwrap();
        assert!(out.contains("PASSED "), "{id}: {out}");
    }

    let empty = dir.path().join("empty");
    let s = summary(&eval(None, &empty, &selected("--empty")));
    assert_eq!(s["total_instances"], 5, "{s}");
    assert_eq!(s["resolved_instances"], 0, "{s}");
    assert_eq!(s["unresolved_instances"], 5, "{s}");
    assert_eq!(s["error_instances"], 0, "{s}");
    assert_eq!(ids(&s, "unresolved_ids"), all);
    for id in &all {
        let r = report(&empty, id);
        let f2p = &r["tests_status"]["FAIL_TO_PASS"];
        assert!(
            !f2p["failure"].as_array().unwrap().is_empty(),
            "{id}: FAIL_TO_PASS must fail on the base commit: {r}"
        );
    }
}

#[test]
fn auto_chooses_wasi_where_bubblewrap_has_no_namespaces_and_only_there() {
    let dir = tempfile::tempdir().unwrap();
    let one = ["--gold", "--instance-ids", "demo__textkit-1"];

    // No user namespaces: the WASI tier, said once, and the task graded.
    let no_userns = dir.path().join("no-userns");
    std::fs::create_dir_all(&no_userns).unwrap();
    let bwrap = fake_bwrap(&no_userns, NO_USERNS_RUN);
    let o = eval(Some(&bwrap), &dir.path().join("auto"), &one);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let s = summary(&o);
    assert_eq!(err.matches(CHOSE_WASI).count(), 1, "{err}");
    assert!(
        err.contains("bubblewrap cannot create namespaces here (bubblewrap "),
        "{err}"
    );
    assert!(
        err.contains("setting up uid map: Permission denied"),
        "{err}"
    );
    assert_eq!(ids(&s, "resolved_ids"), ["demo__textkit-1"], "{s}");

    // bubblewrap that fails otherwise: an error, as before (exit status
    // 2), and no tier chosen.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let bwrap = fake_bwrap(&other, NOT_FOUND_RUN);
    let o = eval(Some(&bwrap), &dir.path().join("other-out"), &one);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains(CHOSE_WASI), "{err}");
    assert!(
        err.contains("the sandbox cannot run on this host, so nothing was started"),
        "{err}"
    );

    // No bubblewrap at all: an error too (auto is for namespaces only).
    let missing = dir.path().join("nowhere/bwrap");
    let o = eval(Some(&missing), &dir.path().join("missing-out"), &one);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("bubblewrap not found at"), "{err}");
    assert!(!err.contains(CHOSE_WASI), "{err}");
}

#[test]
fn a_spec_the_tier_cannot_serve_is_refused_per_task_and_the_others_grade() {
    let dir = tempfile::tempdir().unwrap();
    // The demo specs, with textkit's asking for Python 2.7 and confkit's
    // with a pre_install step.
    let specs = dir.path().join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    for e in std::fs::read_dir(common::root().join("datasets/envs")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("demo__") {
            continue;
        }
        let mut text = std::fs::read_to_string(e.path()).unwrap();
        if name == "demo__textkit.toml" {
            text = text.replace("python = \"3.11\"", "python = \"2.7\"");
        }
        if name == "demo__confkit.toml" {
            text = text.replace(
                "install = ",
                "pre_install = [\"make -C native\"]\ninstall = ",
            );
        }
        std::fs::write(specs.join(&name), text).unwrap();
    }
    let out = dir.path().join("out");
    let o = eval(
        None,
        &out,
        &[
            "--gold",
            "--sandbox",
            "wasi",
            "--specs",
            specs.to_str().unwrap(),
            "--instance-ids",
            "demo__textkit-1",
            "demo__confkit-1",
            "demo__semverkit-1",
        ],
    );
    let s = summary(&o);
    assert_eq!(s["total_instances"], 3, "{s}");
    assert_eq!(ids(&s, "resolved_ids"), ["demo__semverkit-1"], "{s}");
    assert_eq!(s["error_instances"], 2, "{s}");
    assert_eq!(
        ids(&s["errors_by_kind"], "unsupported_in_tier"),
        ["demo__confkit-1", "demo__textkit-1"],
        "{s}"
    );
    let why = |id: &str| {
        report(&out, id)["error"]["message"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        why("demo__textkit-1"),
        "demo/textkit 0.1: the WASI tier cannot serve this spec: it asks for Python 2.7, and the \
         tier runs CPython 3.15, which lacks what code for Pythons before 3.8 relies on \
         (distutils, imp, ...)"
    );
    assert_eq!(
        why("demo__confkit-1"),
        "demo/confkit 0.1: the WASI tier cannot serve this spec: it has pre_install steps (`make \
         -C native`), which are shell commands, and the tier runs only Python"
    );
}

#[test]
fn the_acis_run_shows_the_tiers_refusal_and_runs_python() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("hello.py"), "print('hello from', 'wasi')\n").unwrap();
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {o:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "base"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .args(["aci", "--sandbox", "wasi", "--repo"])
        .arg(&repo)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"run ls -la | head\nrun python hello.py\n")
            .unwrap();
    }
    let o = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut lines = stdout.lines();
    let refusal = lines.next().unwrap_or_default();
    assert!(
        refusal.starts_with(
            "Error: the sandbox refused to run the command: the wasi sandbox runs only Python"
        ),
        "{stdout}"
    );
    assert!(
        refusal.ends_with(
            "nothing was run — use the ACI's search_dir/find_file/open for exploring, and \
             Python for the rest"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("hello from wasi"), "{stdout}");
}
