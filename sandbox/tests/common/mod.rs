//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use patchwright_sandbox::{run_with, Host, Outcome, Policy, SandboxError, SpawnPath};

/// The environment variable that makes the tests run the classic path
/// (`PW_SANDBOX_TEST_PATH=classic`); the default is the fast path, as for
/// `patchwright_sandbox::run`. CI runs the suites both ways.
pub const PATH_VAR: &str = "PW_SANDBOX_TEST_PATH";

/// The environment variable naming the bubblewrap binary the tests run
/// (`PW_SANDBOX_BWRAP=/work/bwrap06/bin/bwrap` checks the sandbox against
/// an older bubblewrap); unset, the default ([`Host::default`]'s).
pub const BWRAP_VAR: &str = "PW_SANDBOX_BWRAP";

/// The bubblewrap binary under test.
pub fn bwrap() -> PathBuf {
    std::env::var_os(BWRAP_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| Host::default().bwrap)
}

/// The spawn path under test.
pub fn path() -> SpawnPath {
    match std::env::var(PATH_VAR).as_deref() {
        Ok("classic") => SpawnPath::Classic,
        _ => SpawnPath::Fast,
    }
}

/// `run` on the path under test.
pub fn run(policy: &Policy, command: &[String]) -> Result<Outcome, SandboxError> {
    run_with(policy, command, path())
}

/// A temporary directory holding a worktree `wt/` (with a `.git/config`)
/// next to a directory `outside/` that the sandbox must not see.
pub struct Task {
    pub dir: tempfile::TempDir,
    pub policy: Policy,
}

impl Task {
    pub fn new() -> Task {
        let dir = tempfile::Builder::new()
            .prefix("pw-sbx-test-")
            .tempdir()
            .expect("tempdir");
        let wt = dir.path().join("wt");
        std::fs::create_dir_all(wt.join(".git")).expect("mkdir .git");
        std::fs::write(wt.join(".git/config"), "[core]\n\tbare = false\n").expect("write config");
        std::fs::write(wt.join("hello.txt"), "hello from the worktree\n").expect("write file");
        std::fs::create_dir_all(dir.path().join("outside")).expect("mkdir outside");
        let mut policy = Policy::for_worktree(&wt, &Host::default()).expect("policy");
        policy.bwrap = bwrap();
        Task { dir, policy }
    }

    pub fn wt(&self) -> PathBuf {
        self.policy.worktree.clone()
    }

    pub fn outside(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path().join("outside")).expect("outside")
    }

    /// Runs `bash -c script` under the task's policy.
    pub fn sh(&self, script: &str) -> Outcome {
        sh_with(&self.policy, script)
    }
}

pub fn sh_with(policy: &Policy, script: &str) -> Outcome {
    let argv = ["bash", "-c", script].map(String::from);
    run(policy, &argv).expect("the sandbox runs")
}

pub fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Host pids whose command line contains `marker`.
pub fn host_processes_with(marker: &str) -> Vec<u32> {
    let own = std::process::id();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == own {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let state = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = state
            .rsplit_once(')')
            .map(|(_, r)| r.trim_start().starts_with('Z'))
            .unwrap_or(false);
        if !zombie && String::from_utf8_lossy(&cmd).contains(marker) {
            found.push(pid);
        }
    }
    found
}

pub fn unique(tag: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("pw-{tag}-{}-{nanos}", std::process::id())
}

pub fn python() -> Option<&'static Path> {
    let p = Path::new("/usr/bin/python3");
    p.exists().then_some(p)
}
