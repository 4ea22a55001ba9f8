//! Measures the wall time of `/bin/true` through the sandbox against a plain
//! spawn. Used by scripts/bench-sandbox; not a test.
//!
//! Usage: overhead [RUNS] [WORKTREE]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use patchwright_sandbox::{run, Mechanism, Policy};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(300);
    let dir = match args.next() {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir(),
    };
    let policy = Policy::for_worktree(&dir)?;
    let mut no_cgroup = policy.clone();
    no_cgroup.cgroups = false;
    let argv = vec!["/bin/true".to_string()];

    // Warm up both paths (page cache, first cgroup creation).
    for _ in 0..5 {
        Command::new("/bin/true").status()?;
        run(&policy, &argv)?;
    }

    let mut plain = Vec::with_capacity(runs);
    let mut sandboxed = Vec::with_capacity(runs);
    let mut rlimit_only = Vec::with_capacity(runs);
    let mut mechanism = Mechanism::Rlimit;
    for _ in 0..runs {
        let t = Instant::now();
        let st = Command::new("/bin/true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        plain.push(t.elapsed());
        assert!(st.success());

        let t = Instant::now();
        let out = run(&policy, &argv)?;
        sandboxed.push(t.elapsed());
        if !out.success() {
            return Err(format!("sandboxed /bin/true failed: {out:?}").into());
        }
        if let Some(m) = out.limits.memory_bytes {
            mechanism = m.mechanism;
        }

        let t = Instant::now();
        let out = run(&no_cgroup, &argv)?;
        rlimit_only.push(t.elapsed());
        if !out.success() {
            return Err(format!("sandboxed /bin/true failed: {out:?}").into());
        }
    }
    let p = median(plain);
    let s = median(sandboxed);
    println!("runs:                 {runs}");
    println!("limits mechanism:     {mechanism:?}");
    println!("plain spawn median:   {:.3} ms", ms(p));
    println!("sandboxed median:     {:.3} ms", ms(s));
    println!("overhead (median):    {:.3} ms", ms(s.saturating_sub(p)));
    let r = median(rlimit_only);
    println!(
        "sandboxed, no cgroup: {:.3} ms (overhead {:.3} ms)",
        ms(r),
        ms(r.saturating_sub(p))
    );
    Ok(())
}
