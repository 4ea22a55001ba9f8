//! The per-run cgroup is removed after every run, also after a timeout and
//! after a fork bomb. Its own test binary (own pid) so that no other test's
//! cgroup can be mistaken for a leftover.

mod common;

use std::path::{Path, PathBuf};

use common::Task;
use patchwright_sandbox::Mechanism;

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

#[test]
fn cgroups_are_removed_after_each_run() {
    let mut task = Task::new();
    task.policy.limits.timeout_ms = 1_000;
    task.policy.limits.max_processes = 32;
    let prefix = format!("patchwright-sandbox-{}-", std::process::id());
    for script in [
        "echo fine",
        "sleep 100",
        "(sleep 100 &); (setsid sleep 100 &); exit 0",
        "bomb() { bomb | bomb & sleep 2; }; bomb; wait",
    ] {
        let o = task.sh(script);
        let mech = o.limits.memory_bytes.map(|m| m.mechanism);
        assert!(
            matches!(mech, Some(Mechanism::CgroupV1) | Some(Mechanism::CgroupV2)),
            "a cgroup must be in force here (root, writable cgroup fs): {:?}",
            o.limits
        );
        assert!(o.events.oom_kills.is_some() && o.events.pids_max_hits.is_some());
        let mut found = Vec::new();
        leftovers(Path::new("/sys/fs/cgroup"), &prefix, 6, &mut found);
        assert!(
            found.is_empty(),
            "after {script:?}: leftover cgroups {found:?}"
        );
    }
}
