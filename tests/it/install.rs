//! The binary runs anywhere, not only in its source tree: `cargo install
//! --path . --root TMP --locked` (which reuses the release build in the
//! workspace's target directory: seconds, llama.cpp is not rebuilt), then,
//! from `/`, `env build` of a demo task with the compiled-in specs, and
//! `models list` in the user's data directory and in
//! `$PATCHWRIGHT_MODELS_DIR`. And no library source names
//! `CARGO_MANIFEST_DIR` outside its tests, so no run-time path points into
//! the checkout.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

type R = Result<(), Box<dyn std::error::Error>>;

/// `cargo install --path <checkout> --root <root> --locked`; the installed
/// binary.
fn install(root: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = std::time::Instant::now();
    let mut cmd = Command::new(cargo);
    cmd.args(["install", "--locked", "--quiet", "--path"])
        .arg(common::root())
        .arg("--root")
        .arg(root);
    // Without the variables cargo sets for a test (CARGO_PKG_NAME,
    // CARGO_MANIFEST_DIR, OUT_DIR, ...): build scripts such as ring's
    // rerun when they change (`rerun-if-env-changed`), so with them this
    // install compiled ring, rustls, ureq and patchwright again, and the
    // next build of the suite compiled them back.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if is_set_by_cargo_for_tests(&name) {
            cmd.env_remove(&*name);
        }
    }
    let out = cmd.output()?;
    assert!(
        out.status.success(),
        "cargo install failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "cargo install took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(root.join("bin/patchwright"))
}

/// The environment variables cargo (or nextest) sets for a test process,
/// which a cargo started by the test must not see.
fn is_set_by_cargo_for_tests(name: &str) -> bool {
    [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_BIN_",
        "CARGO_CRATE_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
        || [
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
            "OUT_DIR",
        ]
        .contains(&name)
}

/// Runs the installed binary from `/` with the models environment
/// variables replaced by `env` (unset when `None`).
fn run_from_root(
    bin: &Path,
    args: &[&str],
    env: &[(&str, Option<&Path>)],
) -> std::io::Result<Output> {
    let mut cmd = Command::new(bin);
    cmd.current_dir("/").args(args);
    for (name, value) in env {
        match value {
            Some(v) => cmd.env(name, v),
            None => cmd.env_remove(name),
        };
    }
    cmd.output()
}

fn succeeded(what: &str, out: &Output) -> Result<Value, Box<dyn std::error::Error>> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
    Ok(serde_json::from_slice(&out.stdout).map_err(|e| format!("{what}: {e}: {stderr}"))?)
}

/// `(name, present, path)` of each row of `models list --json`.
fn rows(listing: &Value) -> Vec<(String, bool, String)> {
    listing
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| {
                    (
                        m["name"].as_str().unwrap_or("?").to_string(),
                        m["present"].as_bool().unwrap_or(false),
                        m["path"].as_str().unwrap_or("?").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_installed_binary_works_from_outside_the_checkout() -> R {
    let tmp = tempfile::tempdir()?;
    let bin = install(&tmp.path().join("install"))?;
    let root = common::root();

    // Environments: the compiled-in specs (no --specs, and `/` has no
    // datasets/envs), the demo repositories given by path.
    let dataset = root.join("datasets/demo/tasks.jsonl");
    let repos = root.join("datasets/demo/repos");
    let envs = common::envs_dir();
    let built = run_from_root(
        &bin,
        &[
            "env",
            "build",
            "--json",
            "--filter",
            "^demo__cachekit-1$",
            "--dataset",
            &dataset.to_string_lossy(),
            "--repos",
            &repos.to_string_lossy(),
            "--envs",
            &envs.to_string_lossy(),
        ],
        &[],
    )?;
    let built = succeeded("env build", &built)?;
    let built = built.as_array().ok_or("env build --json is not a list")?;
    assert_eq!(built.len(), 1, "{built:?}");
    assert_eq!(
        (&built[0]["repo"], &built[0]["version"], &built[0]["ok"]),
        (
            &Value::from("demo/cachekit"),
            &Value::from("0.1"),
            &Value::from(true)
        ),
        "{built:?}"
    );

    let manifest = patchwright::models::manifest()?;
    // No models directory configured: the user's data directory.
    let home = tmp.path().join("home");
    std::fs::create_dir(&home)?;
    let fresh = run_from_root(
        &bin,
        &["models", "list", "--json"],
        &[
            ("PATCHWRIGHT_MODELS_DIR", None),
            ("XDG_DATA_HOME", None),
            ("HOME", Some(&home)),
        ],
    )?;
    let want: Vec<(String, bool, String)> = manifest
        .iter()
        .map(|k| {
            let path = home.join(".local/share/patchwright/models").join(&k.file);
            (k.name.clone(), false, path.display().to_string())
        })
        .collect();
    assert_eq!(rows(&succeeded("models list (fresh home)", &fresh)?), want);

    // The models directory of this test run (where scripts/test fetched
    // the test model): the test model is there.
    common::test_model();
    let dir = patchwright::models::models_dir()?;
    let dir = std::fs::canonicalize(&dir)?;
    let fetched = run_from_root(
        &bin,
        &["models", "list", "--json"],
        &[("PATCHWRIGHT_MODELS_DIR", Some(&dir))],
    )?;
    let listed = rows(&succeeded("models list", &fetched)?);
    let smol = manifest
        .iter()
        .find(|k| k.name == "smollm2-135m")
        .ok_or("no smollm2-135m in the manifest")?;
    assert!(
        listed.contains(&(
            smol.name.clone(),
            true,
            dir.join(&smol.file).display().to_string()
        )),
        "{listed:?}"
    );
    Ok(())
}

/// Library source files, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

#[test]
fn no_run_time_path_comes_from_the_source_tree() -> R {
    let root = common::root();
    let mut files = Vec::new();
    for dir in ["src", "sandbox/src"] {
        rust_files(&root.join(dir), &mut files)?;
    }
    assert!(files.len() > 50, "{}", files.len());
    let mut offenders = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        // The code before the file's test module (tests may read the
        // checkout: they run in it).
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (i, line) in code.lines().enumerate() {
            if line.contains("CARGO_MANIFEST_DIR") {
                offenders.push(format!(
                    "{}:{}: {}",
                    file.strip_prefix(&root)?.display(),
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    assert_eq!(offenders, Vec::<String>::new());
    Ok(())
}
