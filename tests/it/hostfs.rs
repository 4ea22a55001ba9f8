//! No host path is touched outside a worktree (issue 20, item 3): a model's
//! patch or command that plants symbolic links to host directories cannot
//! make the runner remove, write or read a host file, and the workspace
//! reset removes everything the base commit does not have but the
//! install's products.

use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use patchwright::aci::{Aci, AciSettings, Command};
use patchwright::index::symbols::CodeIndex;
use patchwright::repo::{self, RepoError};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Runs git in `dir` with no host configuration; fails the test on an error.
fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Process::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// A one-commit repository at `dir` holding `files`.
fn repository(dir: &Path, files: &[(&str, &str)]) -> Result<()> {
    for (path, text) in files {
        let full = dir.join(path);
        std::fs::create_dir_all(full.parent().ok_or("no parent")?)?;
        std::fs::write(full, text)?;
    }
    git(dir, &["init", "--quiet", "--template="])?;
    git(dir, &["add", "--all"])?;
    git(dir, &["commit", "--quiet", "-m", "base"])?;
    Ok(())
}

/// Every file under `dir` (links not followed): path, bytes, mtime in ns.
fn snapshot(dir: &Path) -> Result<Vec<(PathBuf, Vec<u8>, i64)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.path().symlink_metadata()?;
            let mtime = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
            if meta.is_dir() {
                stack.push(entry.path());
                out.push((entry.path(), Vec::new(), mtime));
            } else {
                out.push((entry.path(), std::fs::read(entry.path())?, mtime));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A host directory outside the worktree with the test patch's new file
/// and a sentinel.
fn host_dir(base: &Path) -> Result<PathBuf> {
    let host = base.join("host");
    std::fs::create_dir_all(&host)?;
    std::fs::write(host.join("new_test.py"), "# the host's own file\n")?;
    std::fs::write(host.join("sentinel"), "do not touch\n")?;
    Ok(host)
}

const TEST_PATCH: &str = "diff --git a/tests/new_test.py b/tests/new_test.py
new file mode 100644
--- /dev/null
+++ b/tests/new_test.py
@@ -0,0 +1 @@
+def test_new(): pass
";

/// The case: a model patch made `tests` a link to a host directory
/// holding a `new_test.py`; restoring the test patch's files, applying the
/// test patch and resetting touch nothing there.
#[test]
fn a_test_patchs_directory_made_a_link_to_the_host_is_never_followed() -> Result<()> {
    let base = tempfile::tempdir()?;
    let wt = base.path().join("wt");
    repository(
        &wt,
        &[
            ("tests/test_old.py", "def test_old(): pass\n"),
            ("pkg/a.py", "a = 1\n"),
        ],
    )?;
    let host = host_dir(base.path())?;
    let before = snapshot(&host)?;
    // What a model patch with `tests` as a link (mode 120000) leaves.
    std::fs::remove_dir_all(wt.join("tests"))?;
    symlink(&host, wt.join("tests"))?;

    // The eval's step 4: the test patch's files as HEAD has them.
    let err = repo::restore_paths(&wt, &["tests/new_test.py".to_string()])
        .err()
        .ok_or("restore_paths followed the link")?;
    assert!(matches!(err, RepoError::Confined(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot remove `tests/new_test.py` in the worktree {}: `tests` is a symbolic link to \
             `{}`, which leads out of the worktree; refused (nothing outside a worktree is read, \
             written or removed)",
            wt.display(),
            host.display()
        )
    );
    // The test patch: git refuses to write beyond a link.
    let applied = repo::apply_patch(&wt, TEST_PATCH);
    assert!(
        applied
            .as_ref()
            .is_err_and(|e| e.to_string().contains("beyond a symbolic link")),
        "{applied:?}"
    );
    // The reset between attempts: the link removed as a link, `tests` back.
    repo::reset_worktree(&wt)?;
    assert!(wt.join("tests").symlink_metadata()?.is_dir());
    assert_eq!(
        std::fs::read_to_string(wt.join("tests/test_old.py"))?,
        "def test_old(): pass\n"
    );
    // Now the test patch applies inside the worktree, and is restored away.
    repo::apply_patch(&wt, TEST_PATCH)?;
    repo::restore_paths(&wt, &["tests/new_test.py".to_string()])?;
    assert!(!wt.join("tests/new_test.py").exists());
    assert_eq!(snapshot(&host)?, before, "a host file was changed");
    Ok(())
}

/// The viewer and the editing commands on paths through a link to a host
/// directory, and on a file replaced by such a link after it was opened.
#[test]
fn the_interface_refuses_links_out_of_the_worktree_with_the_reason() -> Result<()> {
    let base = tempfile::tempdir()?;
    let wt = base.path().join("wt");
    repository(&wt, &[("pkg/a.py", "a = 1\n"), ("b.py", "b = 1\n")])?;
    let host = host_dir(base.path())?;
    std::fs::write(host.join("a.py"), "a = 1\n")?;
    let before = snapshot(&host)?;
    symlink(&host, wt.join("out"))?;
    let head = repo::head_commit(&wt)?;
    let settings = AciSettings {
        window: 20,
        run_timeout_s: 10,
    };
    let env = patchwright::env::task::TaskEnv::bare(&patchwright_sandbox::Host::default());
    let mut aci = Aci::new(&wt, &head, CodeIndex::build(&wt)?, settings, env);
    // `b.py` open, then made a link to the host's `a.py` (what a sandboxed
    // `run` could do between two turns).
    let opened = aci.execute(&Command::Open {
        path: "b.py".into(),
        line: None,
    });
    assert!(opened.text.contains("b = 1"), "{}", opened.text);
    std::fs::remove_file(wt.join("b.py"))?;
    symlink(host.join("a.py"), wt.join("b.py"))?;
    let out_reason = |path: &str, link: &str, target: &Path| {
        format!(
            "`{path}` in the worktree {}: `{link}` is a symbolic link to `{}`, which leads out of \
             the worktree; refused",
            wt.display(),
            target.display()
        )
    };
    let cases: Vec<(Command, String)> = vec![
        (
            Command::Open {
                path: "out/a.py".into(),
                line: None,
            },
            out_reason("out/a.py", "out", &host),
        ),
        (
            Command::StrReplace {
                path: "out/a.py".into(),
                old: "a = 1\n".into(),
                new: "a = 2\n".into(),
            },
            out_reason("out/a.py", "out", &host),
        ),
        (
            Command::Create {
                path: "out/new.py".into(),
            },
            out_reason("out/new.py", "out", &host),
        ),
        (
            Command::Edit {
                start: 1,
                end: 1,
                text: "b = 2\n".into(),
            },
            out_reason("b.py", "b.py", &host.join("a.py")),
        ),
        (
            Command::Open {
                path: "b.py".into(),
                line: None,
            },
            out_reason("b.py", "b.py", &host.join("a.py")),
        ),
    ];
    for (command, reason) in cases {
        let o = aci.execute(&command);
        assert!(
            o.text.starts_with("Error: ") && o.text.contains(&reason),
            "{command:?}: {}",
            o.text
        );
    }
    assert_eq!(snapshot(&host)?, before, "a host file was changed");
    Ok(())
}

/// The reset removes everything the base commit does not have — ignored
/// files, nested repositories, untracked directories, links to the host —
/// restores tracked files, and keeps what the install left.
#[test]
fn the_reset_removes_all_but_the_base_commit_and_the_install() -> Result<()> {
    let base = tempfile::tempdir()?;
    let wt = base.path().join("wt");
    repository(
        &wt,
        &[
            (".gitignore", "*.log\n*.so\nbuild/\n*.egg-info/\n"),
            ("pkg/__init__.py", ""),
            ("pkg/a.py", "a = 1\n"),
            ("lib/b.py", "b = 1\n"),
        ],
    )?;
    let host = host_dir(base.path())?;
    let before = snapshot(&host)?;
    // What an install leaves: ignored and untracked build products.
    std::fs::create_dir_all(wt.join("pkg.egg-info"))?;
    std::fs::write(wt.join("pkg.egg-info/PKG-INFO"), "Name: pkg\n")?;
    std::fs::write(wt.join("pkg/_ext.so"), "ELF")?;
    std::fs::write(wt.join("pkg/version.py"), "v = '1'\n")?;
    std::fs::write(wt.join("odd *[name]?.txt"), "odd")?;
    repo::keep_install_products(&wt)?;
    // What an agent leaves.
    std::fs::write(wt.join("pkg/a.py"), "a = 2\n")?;
    std::fs::write(wt.join("debug.log"), "ignored")?;
    // Kept only if a kept name's wildcards were left unescaped.
    std::fs::write(wt.join("odd zzn!.txt"), "untracked")?;
    std::fs::create_dir_all(wt.join("build/lib"))?;
    std::fs::write(wt.join("build/lib/x.py"), "ignored dir")?;
    std::fs::create_dir_all(wt.join("scratch/deep"))?;
    std::fs::write(wt.join("scratch/deep/t.py"), "untracked")?;
    let nested = wt.join("vendored");
    std::fs::create_dir_all(&nested)?;
    std::fs::write(nested.join("v.py"), "v = 1\n")?;
    git(&nested, &["init", "--quiet", "--template="])?;
    git(&nested, &["add", "--all"])?;
    git(&nested, &["commit", "--quiet", "-m", "nested"])?;
    std::fs::create_dir_all(wt.join("linked"))?;
    std::fs::write(
        wt.join("linked/.git"),
        format!("gitdir: {}\n", host.display()),
    )?;
    std::fs::write(wt.join("linked/w.py"), "w = 1\n")?;
    symlink(&host, wt.join("hostlink"))?;
    std::fs::remove_dir_all(wt.join("lib"))?;
    symlink(&host, wt.join("lib"))?;

    repo::reset_worktree(&wt)?;

    for gone in [
        "debug.log",
        "build",
        "scratch",
        "vendored",
        "linked",
        "hostlink",
        "odd zzn!.txt",
    ] {
        assert!(
            wt.join(gone).symlink_metadata().is_err(),
            "{gone} survived the reset"
        );
    }
    assert_eq!(std::fs::read_to_string(wt.join("pkg/a.py"))?, "a = 1\n");
    assert!(wt.join("lib").symlink_metadata()?.is_dir());
    assert_eq!(std::fs::read_to_string(wt.join("lib/b.py"))?, "b = 1\n");
    for kept in [
        "pkg.egg-info/PKG-INFO",
        "pkg/_ext.so",
        "pkg/version.py",
        "odd *[name]?.txt",
    ] {
        assert!(
            wt.join(kept).is_file(),
            "{kept} (the install's) was removed"
        );
    }
    assert_eq!(repo::diff_against(&wt, &repo::head_commit(&wt)?)?, "");
    assert_eq!(snapshot(&host)?, before, "a host file was changed");
    Ok(())
}

const NEW_TEST_FILE: &str = "diff --git a/tests/new_test.py b/tests/new_test.py
new file mode 100644
--- /dev/null
+++ b/tests/new_test.py
@@ -0,0 +1 @@
+def test_new(): pass
";

/// The whole grading path (`patchwright eval`, the sandbox, the test patch's
/// restore) on a demo task whose test patch adds `tests/new_test.py`, with
/// a prediction that also makes `tests` a link to a host directory holding
/// a `new_test.py`: the host directory is left as it was, byte for byte.
#[test]
fn grading_a_patch_that_links_the_tests_to_the_host_touches_no_host_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host_dir(dir.path())?;
    let before = snapshot(&host)?;
    let mut task = crate::common::demo_task("demo__cachekit-1");
    task.test_patch = format!("{}{NEW_TEST_FILE}", task.test_patch);
    // The prediction: the gold patch, and `tests` a link to the host.
    let repos = repo::Repos::new(&crate::common::root().join("datasets/demo/repos"))?;
    let ws = repo::Workspace::create(
        &repos.locate(&task.repo)?,
        &task.base_commit,
        &dir.path().join("ws"),
    )?;
    repo::apply_patch(ws.path(), &task.patch)?;
    std::fs::remove_dir_all(ws.path().join("tests"))?;
    symlink(&host, ws.path().join("tests"))?;
    let prediction = ws.diff()?;
    assert!(prediction.contains("new file mode 120000"), "{prediction}");

    let dataset = dir.path().join("tasks.jsonl");
    std::fs::write(&dataset, serde_json::to_string(&task)?)?;
    let predictions = dir.path().join("predictions.jsonl");
    let line = serde_json::json!({
        "instance_id": task.instance_id,
        "model_name_or_path": "test",
        "model_patch": prediction,
    });
    std::fs::write(&predictions, line.to_string())?;
    let out = dir.path().join("out");
    let output = Process::new(env!("CARGO_BIN_EXE_patchwright"))
        .args(["eval", "--json", "--jobs", "1", "--dataset"])
        .arg(&dataset)
        .arg("--repos")
        .arg(crate::common::root().join("datasets/demo/repos"))
        .arg("--envs")
        .arg(crate::common::envs_dir())
        .arg("--out")
        .arg(&out)
        .arg("--predictions")
        .arg(&predictions)
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "eval failed: {stderr}");
    let report = std::fs::read_to_string(
        out.join("logs")
            .join(&task.instance_id)
            .join("run_instance.log"),
    )?;
    assert!(report.contains("apply the test patch"), "{report}");
    assert_eq!(snapshot(&host)?, before, "a host file was changed");
    Ok(())
}
