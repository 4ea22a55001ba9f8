//! No cgroup outlives its use, also after a timeout and after a fork bomb:
//! the classic path's per-run cgroup after each run, the fast path's
//! spawner cgroup (empty between runs) when the spawners are released. Its own test binary (own pid) so that no other test's
//! cgroup can be mistaken for a leftover.

// A failed assumption in a test is the test failing: the workspace's
// unwrap/expect/panic lints (Cargo.toml) are for library code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};

use common::{argv, Task};
use patchwright_sandbox::{release_spawners, run_with, Mechanism, SpawnPath};

fn leftovers(dir: &Path, prefix: &str, depth: usize, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        if !ft.is_dir() {
            continue;
        }
        if e.file_name().to_string_lossy().starts_with(prefix) {
            found.push(e.path());
        } else if depth > 0 {
            leftovers(&e.path(), prefix, depth - 1, found);
        }
    }
}

/// Host pids listed in a cgroup directory's `cgroup.procs`.
fn procs_in(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

const SCRIPTS: [&str; 4] = [
    "echo fine",
    "sleep 100",
    "(sleep 100 &); (setsid sleep 100 &); exit 0",
    "bomb() { bomb | bomb & sleep 2; }; bomb; wait",
];

/// The classic path makes a cgroup per run and removes it after the run;
/// the fast path keeps one spawner cgroup (the same one, reused) with no
/// process but the runner's spawner thread in it after every run, and
/// removes it when the spawners are released. One test, so the two paths
/// do not run at once and each sees only its own cgroups.
#[test]
fn cgroups_are_removed_after_each_run() {
    let mut task = Task::new();
    task.policy.limits.timeout_ms = 1_000;
    task.policy.limits.max_processes = 32;
    let prefix = format!("patchwright-sandbox-{}-", std::process::id());
    let own = std::process::id();
    for path in [SpawnPath::Classic, SpawnPath::Fast] {
        let mut spawner_dirs: Option<Vec<PathBuf>> = None;
        for script in SCRIPTS {
            let o = run_with(&task.policy, &argv(&["bash", "-c", script]), path)
                .expect("the sandbox runs");
            let mech = o.limits.memory_bytes.map(|m| m.mechanism);
            assert!(
                matches!(mech, Some(Mechanism::CgroupV1) | Some(Mechanism::CgroupV2)),
                "a cgroup must be in force here (root, writable cgroup fs): {:?}",
                o.limits
            );
            assert!(o.events.oom_kills.is_some() && o.events.pids_max_hits.is_some());
            let mut found = Vec::new();
            leftovers(Path::new("/sys/fs/cgroup"), &prefix, 6, &mut found);
            found.sort();
            match (path, mech) {
                (SpawnPath::Fast, Some(Mechanism::CgroupV1)) => {
                    // One spawner: its memory and pids directories.
                    assert_eq!(found.len(), 2, "after {script:?}: {found:?}");
                    for dir in &found {
                        let procs = procs_in(dir);
                        assert!(
                            procs.iter().all(|p| *p == own),
                            "after {script:?}: {} still holds {procs:?}",
                            dir.display()
                        );
                    }
                    if let Some(before) = &spawner_dirs {
                        assert_eq!(before, &found, "the spawner is reused");
                    }
                    spawner_dirs = Some(found);
                }
                _ => assert!(
                    found.is_empty(),
                    "after {script:?} ({path:?}): leftover cgroups {found:?}"
                ),
            }
        }
        release_spawners();
        let mut found = Vec::new();
        leftovers(Path::new("/sys/fs/cgroup"), &prefix, 6, &mut found);
        assert!(
            found.is_empty(),
            "{path:?}: leftover cgroups after release_spawners: {found:?}"
        );
    }
}
