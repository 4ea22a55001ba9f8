//! The seccomp filter from inside: each blocked call, attempted by a Python
//! program through ctypes' `syscall()`, fails with EPERM (ENOSYS for
//! clone3), on whichever bubblewrap the tests run (`PW_SANDBOX_BWRAP`, see
//! tests/common); ordinary work (threads, fork/exec, git, pip, pytest)
//! still runs.

// A failed assumption in a test is the test failing: the workspace's
// unwrap/expect/panic lints (Cargo.toml) are for library code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{argv, python, run, Task};

/// `(name, number, arguments)` of each attempted call; the numbers come
/// from libc for this architecture, so the script is arch-neutral.
fn attempts() -> Vec<(&'static str, i64, Vec<i64>)> {
    let sigchld = libc::SIGCHLD as i64;
    vec![
        // PTRACE_TRACEME
        ("ptrace_traceme", libc::SYS_ptrace, vec![0, 0, 0, 0]),
        // PTRACE_ATTACH to the sandbox's pid 1
        ("ptrace_attach", libc::SYS_ptrace, vec![16, 1, 0, 0]),
        (
            "process_vm_readv",
            libc::SYS_process_vm_readv,
            vec![1, 0, 0, 0, 0, 0],
        ),
        // KEYCTL_GET_KEYRING_ID of KEY_SPEC_SESSION_KEYRING (-3)
        ("keyctl", libc::SYS_keyctl, vec![0, -3, 0]),
        ("add_key", libc::SYS_add_key, vec![0, 0, 0, 0, 0]),
        ("request_key", libc::SYS_request_key, vec![0, 0, 0, 0]),
        // BPF_MAP_CREATE with no attributes
        ("bpf", libc::SYS_bpf, vec![0, 0, 0]),
        (
            "perf_event_open",
            libc::SYS_perf_event_open,
            vec![0, 0, -1, -1, 0],
        ),
        ("userfaultfd", libc::SYS_userfaultfd, vec![0]),
        ("mount", libc::SYS_mount, vec![0, 0, 0, 0, 0]),
        ("umount2", libc::SYS_umount2, vec![0, 0]),
        ("pivot_root", libc::SYS_pivot_root, vec![0, 0]),
        ("fsopen", libc::SYS_fsopen, vec![0, 0]),
        ("open_tree", libc::SYS_open_tree, vec![-100, 0, 0]),
        (
            "unshare_user",
            libc::SYS_unshare,
            vec![libc::CLONE_NEWUSER as i64],
        ),
        (
            "unshare_ns",
            libc::SYS_unshare,
            vec![libc::CLONE_NEWNS as i64],
        ),
        ("setns", libc::SYS_setns, vec![-1, 0]),
        (
            "clone_newns",
            libc::SYS_clone,
            vec![libc::CLONE_NEWNS as i64 | sigchld, 0, 0, 0, 0],
        ),
        (
            "clone_newuser",
            libc::SYS_clone,
            vec![libc::CLONE_NEWUSER as i64 | sigchld, 0, 0, 0, 0],
        ),
        ("clone3", libc::SYS_clone3, vec![0, 0]),
        ("kexec_load", libc::SYS_kexec_load, vec![0, 0, 0, 0]),
        ("init_module", libc::SYS_init_module, vec![0, 0, 0]),
        ("delete_module", libc::SYS_delete_module, vec![0, 0]),
        ("acct", libc::SYS_acct, vec![0]),
        ("swapoff", libc::SYS_swapoff, vec![0]),
        ("reboot", libc::SYS_reboot, vec![0, 0, 0, 0]),
        // ADDR_NO_RANDOMIZE, as `setarch -R` does
        ("personality", libc::SYS_personality, vec![0x0040000]),
        // TIOCSTI on stdin
        ("ioctl_tiocsti", libc::SYS_ioctl, vec![0, 0x5412, 0]),
    ]
}

/// Runs every attempt in one Python process; a call that succeeds in a
/// child (a clone nobody refused) exits that child at once.
fn script() -> String {
    let mut s = String::from(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         libc.syscall.restype = ctypes.c_long\n\
         def attempt(name, nr, *args):\n\
         \x20   ctypes.set_errno(0)\n\
         \x20   r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])\n\
         \x20   e = ctypes.get_errno()\n\
         \x20   if r == 0 and name.startswith('clone') and os.getpid() != parent:\n\
         \x20       os._exit(0)\n\
         \x20   print(name, r, e)\n\
         parent = os.getpid()\n",
    );
    for (name, nr, args) in attempts() {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        s += &format!("attempt('{name}', {nr}, {})\n", args.join(", "));
    }
    s
}

#[test]
fn every_blocked_call_fails_with_eperm_and_clone3_with_enosys() {
    let task = Task::new();
    let py = python().expect("/usr/bin/python3 is needed for this test");
    let o = run(
        &task.policy,
        &argv(&[&py.to_string_lossy(), "-c", &script()]),
    )
    .expect("runs");
    assert_eq!(o.exit_code, Some(0), "{}", o.output);
    let mut want = String::new();
    for (name, _, _) in attempts() {
        let errno = if name == "clone3" {
            libc::ENOSYS
        } else {
            libc::EPERM
        };
        want += &format!("{name} -1 {errno}\n");
    }
    assert_eq!(o.output, want);
}

/// The nested-user-namespace block: `unshare -U` fails on every bubblewrap
/// version (on 0.8+ also by --disable-userns, on 0.6/0.7 by the filter
/// alone), and so does `unshare -m`.
#[test]
fn unshare_commands_are_refused() {
    let task = Task::new();
    let o = task.sh(
        "unshare -U true 2>&1; echo user=$?; unshare -Ur true 2>&1; echo root=$?; \
         unshare -m true 2>&1; echo mnt=$?",
    );
    assert_eq!(
        o.output,
        "unshare: unshare failed: Operation not permitted\nuser=1\n\
         unshare: unshare failed: Operation not permitted\nroot=1\n\
         unshare: unshare failed: Operation not permitted\nmnt=1\n"
    );
}

#[test]
fn ordinary_work_still_runs() {
    let task = Task::new();
    let py = python().expect("/usr/bin/python3 is needed for this test");
    let py = py.to_string_lossy();
    let script = "import threading, subprocess, os, sys\n\
        out = []\n\
        ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]\n\
        [t.start() for t in ts]; [t.join() for t in ts]\n\
        print('threads', sorted(out) == list(range(8)))\n\
        pid = os.fork()\n\
        if pid == 0:\n    os.execv('/bin/true', ['true'])\n\
        print('fork/exec', os.waitpid(pid, 0)[1])\n\
        r = subprocess.run([sys.executable, '-c', 'print(6*7)'], capture_output=True, text=True)\n\
        print('subprocess', r.stdout.strip())\n\
        r = subprocess.run([sys.executable, '-m', 'pip', '--version'], capture_output=True, text=True)\n\
        print('pip', r.returncode)\n\
        r = subprocess.run(['git', 'init', '-q', '/tmp/g'], capture_output=True, text=True)\n\
        print('git', r.returncode, r.stderr)\n\
        print('personality', __import__('ctypes').CDLL(None).personality(0xffffffff) >= 0)\n";
    let o = run(&task.policy, &argv(&[&py, "-c", script])).expect("runs");
    assert_eq!(
        o.output,
        "threads True\nfork/exec 0\nsubprocess 42\npip 0\ngit 0 \npersonality True\n"
    );
}

/// `python -m pytest` on a tiny test file, in the test venv
/// (`PATCHWRIGHT_TEST_VENV`, a venv with pytest; its interpreter prefix is
/// bound too).
#[test]
fn pytest_runs_under_the_filter() {
    let Some(venv) = std::env::var_os("PATCHWRIGHT_TEST_VENV") else {
        panic!("set PATCHWRIGHT_TEST_VENV to a virtualenv with pytest for this test");
    };
    let venv = std::fs::canonicalize(venv).expect("venv");
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).expect("pyvenv.cfg");
    let home = cfg
        .lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == "home")
        .map(|(_, v)| std::path::PathBuf::from(v.trim()))
        .expect("home line");
    let prefix = std::fs::canonicalize(&home)
        .expect("home")
        .parent()
        .expect("prefix")
        .to_path_buf();
    let mut task = Task::new();
    std::fs::write(
        task.wt().join("test_tiny.py"),
        "import threading\n\ndef test_add():\n    assert 1 + 1 == 2\n\n\
         def test_thread():\n    t = threading.Thread(target=lambda: None)\n    t.start()\n    t.join()\n",
    )
    .expect("write test");
    for p in [&venv, &prefix] {
        task.policy.extra_ro_binds.push(p.clone());
        task.policy.allowed_in_home.push(p.clone());
    }
    let python = venv.join("bin/python");
    let o = run(
        &task.policy,
        &argv(&[
            &python.to_string_lossy(),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_tiny.py",
        ]),
    )
    .expect("runs");
    assert_eq!(o.exit_code, Some(0), "{}", o.output);
    assert!(o.output.contains("2 passed"), "{}", o.output);
}
