//! Attacks a sandboxed command might make, each of which must be contained.
//! Every test asserts the specific containment (errno text, signal, limit
//! counter), not just a non-zero exit. They run as root, as CI does.

// A failed assumption in a test is the test failing: the workspace's
// unwrap/expect/panic lints (Cargo.toml) are for library code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{argv, host_processes_with, python, run, sh_with, unique, Task};
use patchwright_sandbox::{
    check_available, Mechanism, SandboxError, DEFAULT_OUTPUT_BYTES, TIMEOUT_EXIT_CODE,
};

fn assert_cgroup(o: &patchwright_sandbox::Outcome) {
    let mech = o.limits.memory_bytes.map(|e| e.mechanism);
    assert!(
        matches!(mech, Some(Mechanism::CgroupV1) | Some(Mechanism::CgroupV2)),
        "this test needs the runner to be able to create a cgroup (run as root with a writable \
         cgroup hierarchy); limits were {:?}",
        o.limits
    );
}

// ---------------------------------------------------------------- refusal

#[test]
fn missing_bwrap_is_refused_with_install_hint() {
    let mut task = Task::new();
    task.policy.bwrap = PathBuf::from("/nonexistent/bin/bwrap");
    let err = run(&task.policy, &argv(&["true"])).expect_err("must refuse");
    assert!(matches!(err, SandboxError::BwrapNotFound { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("bubblewrap not found"), "{msg}");
    assert!(msg.contains("apt-get install bubblewrap"), "{msg}");
    let err = check_available(&task.policy).expect_err("must refuse");
    assert!(matches!(err, SandboxError::BwrapNotFound { .. }), "{err:?}");
}

#[test]
fn failed_sandbox_setup_is_refused_not_run() {
    let mut task = Task::new();
    let marker = task.wt().join("ran");
    task.policy
        .extra_ro_binds
        .push("/nonexistent-pw-toolchain".into());
    let script = format!("touch {}", marker.display());
    let err = run(&task.policy, &argv(&["bash", "-c", &script])).expect_err("must refuse");
    match &err {
        SandboxError::SetupFailed { message } => {
            assert!(message.contains("nonexistent-pw-toolchain"), "{message}")
        }
        other => panic!("expected SetupFailed, got {other:?}"),
    }
    assert!(err.to_string().contains("namespaces"), "{err}");
    assert!(!marker.exists(), "the command must not have run");
}

#[test]
fn available_on_this_host() {
    let task = Task::new();
    check_available(&task.policy).expect("bubblewrap works here");
}

#[test]
fn empty_command_is_refused() {
    let task = Task::new();
    let err = run(&task.policy, &[]).expect_err("must refuse");
    assert!(matches!(err, SandboxError::InvalidPolicy { .. }), "{err:?}");
}

// ---------------------------------------------------------------- basics

#[test]
fn basic_run_reports_status_output_and_identity() {
    let task = Task::new();
    let o = task.sh("echo out; echo err >&2; pwd; id -u; id -g; hostname; cat hello.txt; exit 3");
    let wt = task.wt();
    assert_eq!(o.exit_code, Some(3));
    assert!(o.signal.is_none());
    assert!(!o.timed_out);
    assert_eq!(o.cli_exit_code(), 3);
    assert_eq!(
        o.output,
        format!(
            "out\nerr\n{}\n1000\n1000\nsandbox\nhello from the worktree\n",
            wt.display()
        )
    );
    assert_eq!(o.bytes_omitted, 0);
    assert!(o.wall_time_secs > 0.0 && o.wall_time_secs < 10.0);
    assert_eq!(o.limits.core_dump_bytes.value, 0);
    let json = serde_json::to_value(&o).expect("serialise");
    for key in [
        "exit_code",
        "signal",
        "timed_out",
        "wall_time_secs",
        "output",
        "bytes_omitted",
        "limits",
    ] {
        assert!(json.get(key).is_some(), "missing {key} in {json}");
    }
}

#[test]
fn environment_is_exactly_the_policys() {
    let mut task = Task::new();
    task.policy
        .env
        .insert("PW_TASK".to_string(), "django-123".to_string());
    let o = run(&task.policy, &argv(&["env"])).expect("runs");
    let mut lines: Vec<String> = o.output.lines().map(String::from).collect();
    lines.sort_unstable();
    // bubblewrap's --chdir also sets PWD.
    assert_eq!(
        lines,
        vec![
            "HOME=/tmp".to_string(),
            "LANG=C.UTF-8".to_string(),
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
            "PWD=".to_string() + &task.wt().to_string_lossy(),
            "PW_TASK=django-123".to_string(),
        ]
    );
}

#[test]
fn no_inherited_descriptors_beyond_stdio() {
    let task = Task::new();
    // ls holds one descriptor of its own open: the /proc/self/fd directory.
    let o = run(&task.policy, &argv(&["ls", "-1", "/proc/self/fd"])).expect("runs");
    let fds: Vec<&str> = o.output.lines().collect();
    assert_eq!(fds, vec!["0", "1", "2", "3"], "{}", o.output);
    let o = run(&task.policy, &argv(&["readlink", "/proc/self/fd/0"])).expect("runs");
    assert_eq!(o.output, "/dev/null\n", "{}", o.output);
}

#[test]
fn stdin_reads_eof_immediately() {
    let task = Task::new();
    let start = Instant::now();
    let o = task.sh("cat; echo cat=$?; read -r line; echo read=$?; wc -c");
    assert_eq!(o.output, "cat=0\nread=1\n0\n");
    assert!(start.elapsed() < Duration::from_secs(5));
}

// ---------------------------------------------------------------- resources

#[test]
fn commands_run_below_the_runners_priority() {
    let mut task = Task::new();
    for (nice, want) in [
        (patchwright_sandbox::DEFAULT_NICE, "10"),
        (0, "0"),
        (19, "19"),
    ] {
        task.policy.limits.nice = nice;
        // The runner's own niceness is 0 (tests run at normal priority).
        let o = task.sh("nice");
        assert_eq!(o.output.trim(), want, "nice {nice}: {}", o.output);
    }
}

#[test]
fn fork_bomb_hits_the_pids_limit_and_is_cleaned_up() {
    let mut task = Task::new();
    task.policy.limits.max_processes = 64;
    task.policy.limits.timeout_ms = 4_000;
    let marker = unique("forkbomb");
    // Each bomb stays alive for a while after forking, so the number of
    // live processes doubles every generation and must hit the cap (a bomb
    // whose processes exit at once can, on a fast machine, stay under it).
    let script = format!("m={marker}; bomb() {{ bomb | bomb & sleep 2; }}; bomb; wait");
    let start = Instant::now();
    let o = task.sh(&script);
    let elapsed = start.elapsed();
    assert_cgroup(&o);
    assert_eq!(o.limits.max_processes.map(|e| e.value), Some(64));
    assert!(
        o.events.pids_max_hits.unwrap_or(0) > 0,
        "pids limit never hit: {:?}\n{}",
        o.events,
        o.output
    );
    assert!(
        o.output.contains("Resource temporarily unavailable"),
        "{}",
        o.output
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert!(host_processes_with(&marker).is_empty());
    // The machine survives: the next command runs normally.
    let o = task.sh("echo alive");
    assert_eq!(o.output, "alive\n");
}

#[test]
fn memory_bomb_is_oom_killed_under_the_cgroup_cap() {
    let py = python().expect("/usr/bin/python3 is needed for this test");
    let mut task = Task::new();
    task.policy.limits.memory_bytes = 64 << 20;
    task.policy.limits.timeout_ms = 60_000;
    let script = "chunks = []\nwhile True:\n    chunks.append(b'x' * (1 << 20))\n";
    let o = run(&task.policy, &argv(&[&py.to_string_lossy(), "-c", script])).expect("runs");
    assert_cgroup(&o);
    assert_eq!(o.limits.memory_bytes.map(|e| e.value), Some(64 << 20));
    assert!(!o.timed_out, "{}", o.output);
    let killed = o.signal.as_ref().map(|s| s.name.as_str()) == Some("SIGKILL");
    let oom = o.events.oom_kills.unwrap_or(0) > 0;
    assert!(
        (killed && oom) || o.output.contains("MemoryError"),
        "not contained by the memory cap: {o:?}"
    );
}

#[test]
fn memory_bomb_fails_allocation_under_rlimit_fallback() {
    let py = python().expect("/usr/bin/python3 is needed for this test");
    let mut task = Task::new();
    task.policy.cgroups = false;
    task.policy.limits.memory_bytes = 256 << 20;
    let script = "chunks = []\nwhile True:\n    chunks.append(b'x' * (1 << 20))\n";
    let o = run(&task.policy, &argv(&[&py.to_string_lossy(), "-c", script])).expect("runs");
    let mem = o.limits.memory_bytes.expect("memory limit in force");
    assert_eq!(mem.mechanism, Mechanism::Rlimit);
    assert_eq!(mem.value, 256 << 20);
    assert!(o.limits.cgroup_unavailable.is_some());
    assert!(o.output.contains("MemoryError"), "{}", o.output);
    assert_eq!(o.exit_code, Some(1));
}

#[test]
fn huge_output_is_bounded() {
    let mut task = Task::new();
    task.policy.limits.timeout_ms = 2_000;
    let o = run(&task.policy, &argv(&["yes"])).expect("runs");
    assert!(o.timed_out);
    assert!(o.output_bytes_retained <= DEFAULT_OUTPUT_BYTES as u64);
    assert_eq!(o.output_bytes_retained, DEFAULT_OUTPUT_BYTES as u64);
    assert!(
        o.bytes_omitted > 10 << 20,
        "omitted only {}",
        o.bytes_omitted
    );
    assert!(o.output.starts_with("y\ny\ny\n"));
    assert!(o
        .output
        .contains(&format!("[... {} bytes omitted ...]", o.bytes_omitted)));
    // Marker line plus at most the cap.
    assert!(o.output.len() <= DEFAULT_OUTPUT_BYTES + 64);
}

#[test]
fn infinite_loop_is_killed_at_the_timeout() {
    let mut task = Task::new();
    task.policy.limits.timeout_ms = 1_000;
    let start = Instant::now();
    let o = task.sh("while :; do :; done");
    let elapsed = start.elapsed();
    assert!(o.timed_out);
    assert_eq!(o.signal.as_ref().map(|s| s.name.as_str()), Some("SIGKILL"));
    assert_eq!(o.cli_exit_code(), TIMEOUT_EXIT_CODE);
    assert!(
        o.wall_time_secs >= 1.0 && o.wall_time_secs < 1.5,
        "{}",
        o.wall_time_secs
    );
    assert!(elapsed < Duration::from_millis(2_500), "{elapsed:?}");
}

#[test]
fn sleep_past_the_timeout_is_killed_with_its_tree() {
    let mut task = Task::new();
    task.policy.limits.timeout_ms = 1_000;
    let marker = unique("sleeper");
    let script = format!("(exec -a {marker} sleep 100) & exec -a {marker}-main sleep 100");
    let start = Instant::now();
    let o = task.sh(&script);
    let elapsed = start.elapsed();
    assert!(o.timed_out);
    assert_eq!(o.cli_exit_code(), 124);
    assert!(o.wall_time_secs < 1.5, "{}", o.wall_time_secs);
    assert!(elapsed < Duration::from_millis(3_500), "{elapsed:?}");
    assert!(host_processes_with(&marker).is_empty());
}

#[test]
fn daemonised_grandchild_does_not_outlive_the_command() {
    let task = Task::new();
    let quiet = unique("daemon-quiet");
    let loud = unique("daemon-loud");
    let script = format!(
        "setsid nohup bash -c 'exec -a {quiet} sleep 1000' >/dev/null 2>&1 < /dev/null &\n\
         setsid nohup bash -c 'exec -a {loud} sleep 1000' &\n\
         sleep 0.3; ps -eo args | grep -c '^pw-daemon'; echo started"
    );
    let start = Instant::now();
    let o = task.sh(&script);
    assert_eq!(o.exit_code, Some(0), "{}", o.output);
    assert!(o.output.ends_with("2\nstarted\n"), "{}", o.output);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(
        host_processes_with(&quiet).is_empty(),
        "quiet daemon survived"
    );
    assert!(
        host_processes_with(&loud).is_empty(),
        "loud daemon survived"
    );
}

#[test]
fn filling_tmp_stops_at_the_tmpfs_cap() {
    let mut task = Task::new();
    task.policy.limits.tmp_bytes = 4 << 20;
    let o = task.sh(
        "dd if=/dev/zero of=/tmp/fill bs=1M count=16 2>&1 | head -1; \
         stat -c %s /tmp/fill; \
         dd if=/dev/zero of=/dev/shm/fill bs=1M count=16 2>&1 | head -1",
    );
    let version = patchwright_sandbox::bwrap_version(&task.policy.bwrap).expect("version");
    if !patchwright_sandbox::flag_supported(version, "--size") {
        // bubblewrap < 0.7 has no --size: the tmpfs is bounded by the
        // memory cap, and the outcome says so instead of claiming 4 MiB.
        assert_ne!(
            o.limits.tmp_bytes.mechanism,
            patchwright_sandbox::Mechanism::Tmpfs
        );
        assert_eq!(o.limits.tmp_bytes.value, task.policy.limits.memory_bytes);
        assert!(o.output.contains("16777216"), "{}", o.output);
        return;
    }
    assert_eq!(o.limits.tmp_bytes.value, 4 << 20);
    let lines: Vec<&str> = o.output.lines().collect();
    assert_eq!(lines.len(), 3, "{}", o.output);
    assert!(lines[0].contains("No space left on device"), "{}", o.output);
    let size: u64 = lines[1].parse().expect("size");
    assert!(size <= 4 << 20, "{size}");
    assert!(lines[2].contains("No space left on device"), "{}", o.output);
}

#[test]
fn large_file_hits_the_file_size_cap() {
    let mut task = Task::new();
    task.policy.limits.file_size_bytes = 1 << 20;
    let o = run(
        &task.policy,
        &argv(&["dd", "if=/dev/zero", "of=big", "bs=64k", "count=64"]),
    )
    .expect("runs");
    assert_eq!(
        o.signal.as_ref().map(|s| s.name.as_str()),
        Some("SIGXFSZ"),
        "{o:?}"
    );
    let size = std::fs::metadata(task.wt().join("big")).expect("big").len();
    assert_eq!(size, 1 << 20);
    // With SIGXFSZ ignored the write fails with EFBIG instead.
    let py = python().expect("/usr/bin/python3 is needed for this test");
    let script = "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n\
                  open('big2', 'wb').write(b'x' * (2 << 20))\n";
    let o = run(&task.policy, &argv(&[&py.to_string_lossy(), "-c", script])).expect("runs");
    assert!(
        o.output.contains("[Errno 27] File too large"),
        "{}",
        o.output
    );
    assert!(
        std::fs::metadata(task.wt().join("big2"))
            .map(|m| m.len())
            .unwrap_or(0)
            <= 1 << 20
    );
}

// ---------------------------------------------------------------- filesystem

#[test]
fn cannot_write_outside_the_worktree() {
    let task = Task::new();
    let host_tmp_name = unique("hosttmp");
    let host_tmp = PathBuf::from("/tmp").join(&host_tmp_name);
    std::fs::write(&host_tmp, "host tmp secret\n").expect("write host tmp file");
    let in_sandbox = unique("sandboxtmp");
    let script = format!(
        "touch /etc/pw-x 2>&1; touch /usr/pw-x 2>&1; touch /pw-x 2>&1; \
         touch /root/pw-x 2>&1; mkdir /home/pw 2>&1; \
         cat /tmp/{host_tmp_name} 2>&1; echo pwned > /tmp/{host_tmp_name}; \
         echo mine > /tmp/{in_sandbox}; echo home=$HOME; \
         touch {outside}/pw-x 2>&1; echo ok > inside.txt; true",
        outside = task.outside().display()
    );
    let o = task.sh(&script);
    let out = &o.output;
    assert!(
        out.contains("cannot touch '/etc/pw-x': Read-only file system"),
        "{out}"
    );
    assert!(
        out.contains("cannot touch '/usr/pw-x': Read-only file system"),
        "{out}"
    );
    assert!(
        out.contains("cannot touch '/pw-x': Read-only file system"),
        "{out}"
    );
    assert!(
        out.contains("cannot touch '/root/pw-x': No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains("/home/pw’: No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains(&format!("/tmp/{host_tmp_name}: No such file or directory")),
        "{out}"
    );
    assert!(!out.contains("host tmp secret"), "{out}");
    assert!(out.contains("home=/tmp"), "{out}");
    assert!(out.contains("pw-x': No such file or directory"), "{out}");
    // The host saw none of it, except the write inside the worktree.
    assert_eq!(
        std::fs::read_to_string(&host_tmp).expect("host file"),
        "host tmp secret\n"
    );
    assert!(!PathBuf::from("/tmp").join(&in_sandbox).exists());
    assert!(!PathBuf::from("/etc/pw-x").exists());
    assert!(!PathBuf::from("/root/pw-x").exists());
    assert!(!task.outside().join("pw-x").exists());
    assert_eq!(
        std::fs::read_to_string(task.wt().join("inside.txt")).expect("inside"),
        "ok\n"
    );
    let _ = std::fs::remove_file(&host_tmp);
}

#[test]
fn git_metadata_is_read_only() {
    let task = Task::new();
    let o = task.sh("echo '[alias] x = !evil' >> .git/config 2>&1; \
         mkdir .git/hooks 2>&1; rm -rf .git 2>&1; mv .git moved 2>&1; \
         echo edit >> hello.txt && echo worktree-writable");
    let out = &o.output;
    assert!(out.contains(".git/config: Read-only file system"), "{out}");
    assert!(out.contains(".git/hooks’: Read-only file system"), "{out}");
    assert!(
        out.contains("cannot remove '.git/config': Read-only file system"),
        "{out}"
    );
    assert!(
        out.contains("cannot move '.git' to 'moved': Device or resource busy"),
        "{out}"
    );
    assert!(out.contains("worktree-writable"), "{out}");
    assert_eq!(
        std::fs::read_to_string(task.wt().join(".git/config")).expect("config"),
        "[core]\n\tbare = false\n"
    );
    assert!(task.wt().join(".git").is_dir());
}

#[test]
fn symlinks_cannot_escape_the_worktree() {
    let task = Task::new();
    let secret = task.outside().join("secret.txt");
    std::fs::write(&secret, "outside secret\n").expect("write secret");
    let wt = task.wt();
    std::os::unix::fs::symlink(&secret, wt.join("abs-link")).expect("symlink");
    std::os::unix::fs::symlink("../outside/secret.txt", wt.join("rel-link")).expect("symlink");
    std::os::unix::fs::symlink("/etc/shadow", wt.join("shadow-link")).expect("symlink");
    std::os::unix::fs::symlink("/root", wt.join("root-link")).expect("symlink");
    let o = task.sh(
        "for l in abs-link rel-link shadow-link; do cat $l 2>&1; done; ls root-link/ 2>&1; \
         echo pwned > abs-link 2>&1; echo pwned > rel-link 2>&1; echo pwned > shadow-link 2>&1; \
         ln -s / rootlink 2>&1; cat rootlink/etc/shadow 2>&1; true",
    );
    let out = &o.output;
    assert!(!out.contains("outside secret"), "{out}");
    assert!(!out.contains("root:"), "{out}");
    assert!(
        out.contains("cat: abs-link: No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains("cat: rel-link: No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains("cat: shadow-link: No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains("ls: cannot access 'root-link/': No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains("rootlink/etc/shadow: No such file or directory"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(&secret).expect("secret"),
        "outside secret\n"
    );
}

#[test]
fn host_secrets_are_not_visible() {
    let task = Task::new();
    let secret = unique("SECRETVALUE");
    // Set for this process (and every child it spawns): must not leak.
    std::env::set_var("PW_TEST_SECRET_TOKEN", &secret);
    let o = task.sh(
        "cat /etc/shadow 2>&1; ls /root 2>&1; ls /home 2>&1; ls /root/.pyenv 2>&1; \
         ls /root/.ssh 2>&1; ls /etc/ssl/private 2>&1; env; \
         cat /proc/1/environ /proc/self/environ 2>&1 | tr '\\0' '\\n'; \
         grep -c '^sandbox:' /etc/passwd; grep -c root /etc/passwd; true",
    );
    let out = &o.output;
    assert!(
        out.contains("cat: /etc/shadow: No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains("ls: cannot access '/root': No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains("ls: cannot access '/home': No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains("'/root/.pyenv': No such file or directory"),
        "{out}"
    );
    assert!(
        out.contains("'/etc/ssl/private': No such file or directory"),
        "{out}"
    );
    assert!(!out.contains(&secret), "secret leaked: {out}");
    assert!(!out.contains("PW_TEST_SECRET_TOKEN"), "{out}");
    // The generated passwd has the sandbox user and only the root line.
    assert!(out.ends_with("1\n1\n"), "{out}");
}

#[test]
fn extra_read_only_bind_exposes_only_that_directory() {
    let mut task = Task::new();
    let tool = tempfile::Builder::new()
        .prefix("pw-sbx-tool-")
        .tempdir()
        .expect("tempdir");
    let bin = tool.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::fs::write(bin.join("tool"), "#!/bin/sh\necho tool ran\n").expect("write");
    let mut perm = std::fs::metadata(bin.join("tool"))
        .expect("meta")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(bin.join("tool"), perm).expect("chmod");
    let tool_dir = std::fs::canonicalize(tool.path()).expect("canon");
    task.policy.extra_ro_binds.push(tool_dir.clone());
    let o = task.sh(&format!(
        "{d}/bin/tool; touch {d}/bin/x 2>&1; ls {parent} | wc -l",
        d = tool_dir.display(),
        parent = tool_dir
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    ));
    let out = &o.output;
    assert!(out.starts_with("tool ran\n"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    // Of the host's parent directory only the bound entries are visible:
    // the toolchain and the worktree's ancestor.
    let visible: usize = out
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(99);
    assert!(visible <= 2, "{out}");
}

// ---------------------------------------------------------------- network

#[test]
fn network_egress_fails() {
    let task = Task::new();
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let o = task.sh(&format!(
        "echo hi > /dev/tcp/127.0.0.1/{port}; echo tcp=$?; \
         echo hi > /dev/tcp/1.1.1.1/53; echo ext=$?; \
         getent hosts example.com; echo dns=$?; \
         getent hosts localhost; true"
    ));
    let out = &o.output;
    assert!(
        out.contains(&format!("/dev/tcp/127.0.0.1/{port}: Connection refused")),
        "{out}"
    );
    assert!(out.contains("tcp=1"), "{out}");
    assert!(
        out.contains("/dev/tcp/1.1.1.1/53: Network is unreachable"),
        "{out}"
    );
    assert!(out.contains("ext=1"), "{out}");
    // getent exits 2 when the name is not found: no resolver is reachable.
    assert!(out.contains("dns=2"), "{out}");
    // Loopback inside the sandbox is its own.
    assert!(out.contains("localhost"), "{out}");
    listener.set_nonblocking(true).expect("nonblocking");
    assert_eq!(
        listener.accept().map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock),
        "the host listener was reached"
    );
    let py = python().expect("/usr/bin/python3 is needed for the DNS part of this test");
    let o = run(
        &task.policy,
        &argv(&[
            &py.to_string_lossy(),
            "-c",
            "import socket\ntry:\n    socket.getaddrinfo('pypi.org', 443)\nexcept socket.gaierror as e:\n    print('gaierror', e.errno)\n",
        ]),
    )
    .expect("runs");
    assert!(o.output.starts_with("gaierror"), "{}", o.output);
}

// ---------------------------------------------------------------- processes

#[test]
fn host_processes_are_invisible() {
    let task = Task::new();
    let marker = unique("hostproc");
    let mut host = Command::new("bash")
        .args(["-c", &format!("exec -a {marker} sleep 30")])
        .spawn()
        .expect("spawn host process");
    std::thread::sleep(Duration::from_millis(100));
    assert!(!host_processes_with(&marker).is_empty());
    let o = task.sh(
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done; \
         echo count=$(ls -d /proc/[0-9]* | wc -l); cat /proc/1/comm",
    );
    let _ = host.kill();
    let _ = host.wait();
    let out = &o.output;
    assert!(!out.contains(&marker), "{out}");
    let count: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("count="))
        .and_then(|c| c.parse().ok())
        .unwrap_or(999);
    assert!(count <= 6, "saw {count} pids: {out}");
    assert!(out.ends_with("bwrap\n"), "{out}");
}

#[test]
fn no_privileges_inside() {
    let task = Task::new();
    let o = task.sh(
        "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd|CapAmb):' /proc/self/status; \
         unshare --user true 2>&1; echo unshare=$?; \
         unshare --mount --map-root-user true 2>&1; echo unshare2=$?; \
         mount -t tmpfs none /tmp 2>&1; echo mount=$?; \
         su -c true 2>&1 </dev/null; echo su=$?",
    );
    let out = &o.output;
    assert!(out.contains("NoNewPrivs:\t1\n"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000\n"), "{out}");
    assert!(out.contains("CapPrm:\t0000000000000000\n"), "{out}");
    assert!(out.contains("CapBnd:\t0000000000000000\n"), "{out}");
    assert!(out.contains("unshare: unshare failed"), "{out}");
    assert!(out.contains("unshare=1"), "{out}");
    assert!(out.contains("unshare2=1"), "{out}");
    assert!(out.contains("must be superuser to use mount"), "{out}");
    assert!(out.contains("mount=32"), "{out}");
    assert!(!out.contains("su=0"), "{out}");
    // The mount(2) syscall itself is refused with EPERM.
    let py = python().expect("/usr/bin/python3 is needed for this test");
    let script = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
                  r = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\n\
                  print(r, os.strerror(ctypes.get_errno()))\n";
    let o = run(&task.policy, &argv(&[&py.to_string_lossy(), "-c", script])).expect("runs");
    assert_eq!(o.output, "-1 Operation not permitted\n");
}

/// TIOCSTI pushes characters into a terminal's input queue. With
/// `--new-session` the sandbox has no controlling terminal and its stdio are
/// /dev/null and a pipe, so there is no terminal to inject into. (This test
/// runs without a terminal; tests/sandbox_cli.rs repeats it from a runner
/// that has one, with a control showing the terminal is reachable without
/// the sandbox.)
#[test]
fn tiocsti_injection_fails() {
    let mut task = Task::new();
    let (program, _keep) = tiocsti_helper(&mut task);
    let o = run(&task.policy, &program).expect("runs");
    let out = &o.output;
    assert!(out.contains("tty: errno 6"), "{out}"); // ENXIO: no controlling tty
    for fd in 0..3 {
        // EPERM: the seccomp filter refuses TIOCSTI before the kernel
        // would answer ENOTTY (25) for a non-terminal.
        assert!(out.contains(&format!("fd{fd}: errno 1\n")), "{out}");
    }
    assert!(!out.contains("injected"), "{out}");
}

/// A program that tries TIOCSTI on /dev/tty and fds 0-2 and prints errnos:
/// python via ctypes-free fcntl when /usr/bin/python3 exists, otherwise a C
/// helper compiled with `cc` and bound in read-only.
fn tiocsti_helper(task: &mut Task) -> (Vec<String>, Option<tempfile::TempDir>) {
    if let Some(py) = python() {
        let script = "import fcntl, os, termios\n\
try:\n    fd = os.open('/dev/tty', os.O_RDWR)\n    fcntl.ioctl(fd, termios.TIOCSTI, b'x')\n    print('injected via tty')\n\
except OSError as e:\n    print('tty: errno', e.errno)\n\
for fd in range(3):\n    try:\n        fcntl.ioctl(fd, termios.TIOCSTI, b'x')\n        print('injected via', fd)\n    except OSError as e:\n        print('fd%d: errno %d' % (fd, e.errno))\n";
        return (argv(&[&py.to_string_lossy(), "-c", script]), None);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("tiocsti.c");
    std::fs::write(
        &src,
        "#include <errno.h>\n#include <fcntl.h>\n#include <stdio.h>\n#include <sys/ioctl.h>\n\
int main(void){char c='x';int fd=open(\"/dev/tty\",O_RDWR);\
if(fd<0)printf(\"tty: errno %d\\n\",errno);else if(ioctl(fd,TIOCSTI,&c)==0)puts(\"injected via tty\");\
else printf(\"tty: errno %d\\n\",errno);\
for(int i=0;i<3;i++){if(ioctl(i,TIOCSTI,&c)==0)printf(\"injected via %d\\n\",i);\
else printf(\"fd%d: errno %d\\n\",i,errno);}return 0;}\n",
    )
    .expect("write helper");
    let exe = dir.path().join("tiocsti");
    let st = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("neither /usr/bin/python3 nor cc is available for the TIOCSTI test");
    assert!(st.success(), "compiling the TIOCSTI helper failed");
    let canon = std::fs::canonicalize(dir.path()).expect("canon");
    task.policy.extra_ro_binds.push(canon.clone());
    (
        vec![canon.join("tiocsti").to_string_lossy().into_owned()],
        Some(dir),
    )
}

#[test]
fn many_runs_in_parallel_do_not_interfere() {
    let task = Task::new();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let policy = task.policy.clone();
            std::thread::spawn(move || sh_with(&policy, &format!("echo run{i}; exit {i}")))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let o = h.join().expect("thread");
        assert_eq!(o.output, format!("run{i}\n"));
        assert_eq!(o.exit_code, Some(i as i32));
    }
    let mut f = std::fs::File::open("/proc/self/status").expect("status");
    let mut s = String::new();
    f.read_to_string(&mut s).expect("read");
    assert!(s.contains("Threads:"));
}
