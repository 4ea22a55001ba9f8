//! What the fast path adds (a pooled spawner thread in a reused cgroup, a
//! prepared /etc layer) must not let one command affect the next, nor show
//! a different filesystem. Each test asserts the specific containment.

// A failed assumption in a test is the test failing: the workspace's
// unwrap/expect/panic lints (Cargo.toml) are for library code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{argv, host_processes_with, python, unique, Task};
use patchwright_sandbox::{
    run_with, Mechanism, Outcome, Policy, SpawnPath, GROUP_CONTENT, PASSWD_CONTENT,
};

fn fast(policy: &Policy, script: &str) -> Outcome {
    run_with(policy, &argv(&["bash", "-c", script]), SpawnPath::Fast).expect("the sandbox runs")
}

fn classic(policy: &Policy, script: &str) -> Outcome {
    run_with(policy, &argv(&["bash", "-c", script]), SpawnPath::Classic).expect("the sandbox runs")
}

/// The prepared layers of this process.
fn layers() -> Vec<PathBuf> {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    let base = std::env::temp_dir().join(format!("patchwright-sandbox-{euid}"));
    let prefix = format!("etc-{}-", std::process::id());
    let mut out: Vec<PathBuf> = std::fs::read_dir(base)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn a_process_left_by_one_command_is_gone_before_the_next() {
    let task = Task::new();
    let marker = unique("leftover");
    let o = fast(
        &task.policy,
        &format!(
            "setsid nohup bash -c 'exec -a {marker} sleep 1000' >/dev/null 2>&1 </dev/null &\n\
             (exec -a {marker} sleep 1000 &); sleep 0.2; echo started"
        ),
    );
    assert_eq!(o.output, "started\n");
    assert!(
        host_processes_with(&marker).is_empty(),
        "a leftover survived"
    );
    let o = fast(
        &task.policy,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done; \
         echo count=$(ls -d /proc/[0-9]* | wc -l)",
    );
    assert!(!o.output.contains(&marker), "{}", o.output);
    // bwrap's init, bash, and the listing's own subshells.
    let count: usize = o
        .output
        .lines()
        .find_map(|l| l.strip_prefix("count="))
        .and_then(|c| c.parse().ok())
        .unwrap_or(999);
    assert!(count <= 6, "{}", o.output);
}

#[test]
fn tmp_and_shm_start_empty_for_every_command() {
    let task = Task::new();
    let o = fast(
        &task.policy,
        "echo secret > /tmp/note; echo secret > /dev/shm/note; cat /tmp/note",
    );
    assert_eq!(o.output, "secret\n");
    let o = fast(
        &task.policy,
        "ls -A /dev/shm; cat /tmp/note 2>&1; find /tmp -maxdepth 1 -type f | wc -l",
    );
    assert_eq!(
        o.output, "cat: /tmp/note: No such file or directory\n0\n",
        "{}",
        o.output
    );
    assert_eq!(o.exit_code, Some(0));
}

#[test]
fn etc_looks_the_same_on_both_paths() {
    let task = Task::new();
    // Directory sizes differ (tmpfs against the layer's file system).
    let list = "(find /etc -type d -printf '%p %y %m\\n'; \
                find /etc ! -type d -printf '%p %y %m %s %l\\n') | sort";
    let a = fast(&task.policy, list);
    let b = classic(&task.policy, list);
    assert_eq!(a.exit_code, Some(0), "{}", a.output);
    let only_fast: Vec<&str> = a
        .output
        .lines()
        .filter(|l| !b.output.lines().any(|m| m == *l))
        .collect();
    let only_classic: Vec<&str> = b
        .output
        .lines()
        .filter(|l| !a.output.lines().any(|m| m == *l))
        .collect();
    assert_eq!((only_fast, only_classic), (vec![], vec![]));
    assert!(a.output.contains("/etc/passwd f "), "{}", a.output);
    let sums = "sha256sum /etc/ld.so.cache /etc/nsswitch.conf /etc/ssl/certs/ca-certificates.crt \
                2>&1; cat /etc/passwd /etc/group";
    let a = fast(&task.policy, sums);
    let b = classic(&task.policy, sums);
    assert_eq!(a.output, b.output);
    assert!(
        a.output
            .ends_with(&format!("{PASSWD_CONTENT}{GROUP_CONTENT}")),
        "{}",
        a.output
    );
    let host = Command::new("sha256sum")
        .arg("/etc/ld.so.cache")
        .output()
        .expect("sha256sum on the host");
    assert!(
        a.output
            .starts_with(&String::from_utf8_lossy(&host.stdout).to_string()),
        "{}",
        a.output
    );
}

#[test]
fn the_prepared_etc_cannot_be_changed_from_inside() {
    let task = Task::new();
    let o = fast(
        &task.policy,
        "echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd; echo append=$?; \
         touch /etc/new 2>&1; echo touch=$?; rm -f /etc/hosts 2>&1; echo rm=$?; \
         chmod 777 /etc/group 2>&1; echo chmod=$?; \
         mount -o remount,rw /etc 2>&1; echo mount=$?; cat /etc/passwd",
    );
    let out = &o.output;
    for want in [
        "append=1",
        "touch=1",
        "rm=1",
        "chmod=1",
        "mount=32",
        "Read-only file system",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    assert!(out.ends_with(PASSWD_CONTENT), "{out}");
    for layer in layers() {
        assert_eq!(
            std::fs::read_to_string(layer.join("passwd")).expect("layer passwd"),
            PASSWD_CONTENT
        );
        assert!(std::fs::read_to_string(layer.join("hosts")).is_ok());
        assert!(!layer.join("new").exists());
    }
}

#[test]
fn a_command_cannot_reach_the_spawner_or_the_runner() {
    let task = Task::new();
    // Signal everything it can see, then look for anything outside itself.
    let o = fast(
        &task.policy,
        "kill -9 -1 2>/dev/null; ls /sys/fs/cgroup 2>&1; cat /proc/1/cgroup | head -3; \
         ls /proc/$PPID/task >/dev/null; echo alive",
    );
    assert!(
        o.output.contains("No such file or directory"),
        "{}",
        o.output
    );
    // The cgroup namespace shows the command its own cgroup as the root.
    assert!(!o.output.contains("patchwright-sandbox"), "{}", o.output);
    // The runner and its spawner survive and serve the next command.
    let o = fast(&task.policy, "echo next");
    assert_eq!(o.output, "next\n");
    assert!(o.success());
}

#[test]
fn limit_counters_are_per_command() {
    let mut task = Task::new();
    task.policy.limits.max_processes = 32;
    task.policy.limits.timeout_ms = 10_000;
    let o = fast(
        &task.policy,
        "bomb() { bomb | bomb & sleep 2; }; bomb; wait",
    );
    if o.limits.max_processes.map(|e| e.mechanism) != Some(Mechanism::CgroupV1) {
        panic!("this test needs cgroup v1 (root): {:?}", o.limits);
    }
    assert!(o.events.pids_max_hits.unwrap_or(0) > 0, "{:?}", o.events);
    let o = fast(&task.policy, "true");
    assert_eq!(o.events.pids_max_hits, Some(0));
    assert_eq!(o.events.oom_kills, Some(0));
    // The command still has its whole cap of 32: bubblewrap, its init,
    // bash and 29 sleeps (the spawner thread is counted on top).
    let o = fast(
        &task.policy,
        "for i in $(seq 29); do sleep 5 & done; echo started",
    );
    assert_eq!(o.output, "started\n");
    assert_eq!(o.events.pids_max_hits, Some(0));
}

#[test]
fn the_memory_cap_holds_for_the_command_after_an_oom_kill() {
    let Some(py) = python() else {
        panic!("needs /usr/bin/python3");
    };
    let mut task = Task::new();
    task.policy.limits.memory_bytes = 128 << 20;
    let py = py.to_string_lossy().to_string();
    let hog = "b = bytearray(512 << 20); print('allocated')";
    let o = run_with(&task.policy, &argv(&[&py, "-c", hog]), SpawnPath::Fast).expect("runs");
    assert_eq!(o.signal.as_ref().map(|s| s.number), Some(9), "{o:?}");
    assert_eq!(o.events.oom_kills, Some(1), "{:?}", o.events);
    let fits = "b = bytearray(32 << 20); print('allocated')";
    let o = run_with(&task.policy, &argv(&[&py, "-c", fits]), SpawnPath::Fast).expect("runs");
    assert_eq!(o.output, "allocated\n");
    assert_eq!(o.events.oom_kills, Some(0));
    let o = run_with(&task.policy, &argv(&[&py, "-c", hog]), SpawnPath::Fast).expect("runs");
    assert_eq!(o.events.oom_kills, Some(1), "{:?}", o.events);
}

#[test]
fn a_bind_inside_etc_falls_back_to_per_file_etc() {
    let mut task = Task::new();
    let certs = Path::new("/etc/ssl/certs");
    if !certs.is_dir() {
        panic!("needs /etc/ssl/certs on the host");
    }
    task.policy.extra_ro_binds.push(certs.to_path_buf());
    assert!(patchwright_sandbox::etc_layer_unfit(&task.policy).is_some());
    let o = fast(
        &task.policy,
        "ls /etc/ssl/certs | grep -c . ; cat /etc/hosts",
    );
    assert_eq!(o.exit_code, Some(0), "{}", o.output);
    assert!(
        o.output.ends_with(patchwright_sandbox::HOSTS_CONTENT),
        "{}",
        o.output
    );
}
