//! Measures the wall time of `/bin/true` through the sandbox against a plain
//! spawn, for both spawn paths, with and without the cgroup, interleaved so
//! that load changes hit every variant alike. Used by scripts/bench-sandbox;
//! not a test.
//!
//! Usage: overhead [RUNS] [WORKTREE]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use patchwright_sandbox::{run_with, Mechanism, Policy, SpawnPath};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Variant {
    name: &'static str,
    policy: Policy,
    path: SpawnPath,
    times: Vec<Duration>,
    mechanism: Option<Mechanism>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(300);
    let dir = match args.next() {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir(),
    };
    let policy = Policy::for_worktree(&dir, &patchwright_sandbox::Host::default())?;
    let mut no_cgroup = policy.clone();
    no_cgroup.cgroups = false;
    let argv = vec!["/bin/true".to_string()];
    let mut variants = vec![
        Variant {
            name: "classic (per-run cgroup, per-file /etc)",
            policy: policy.clone(),
            path: SpawnPath::Classic,
            times: Vec::with_capacity(runs),
            mechanism: None,
        },
        Variant {
            name: "fast (spawner cgroup, prepared /etc)",
            policy: policy.clone(),
            path: SpawnPath::Fast,
            times: Vec::with_capacity(runs),
            mechanism: None,
        },
        Variant {
            name: "classic, no cgroup",
            policy: no_cgroup.clone(),
            path: SpawnPath::Classic,
            times: Vec::with_capacity(runs),
            mechanism: None,
        },
        Variant {
            name: "fast, no cgroup",
            policy: no_cgroup,
            path: SpawnPath::Fast,
            times: Vec::with_capacity(runs),
            mechanism: None,
        },
    ];

    // Warm up every path (page cache, spawner, prepared /etc).
    for _ in 0..5 {
        Command::new("/bin/true").status()?;
        for v in &variants {
            run_with(&v.policy, &argv, v.path)?;
        }
    }

    let mut plain = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let st = Command::new("/bin/true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        plain.push(t.elapsed());
        if !st.success() {
            return Err("plain /bin/true failed".into());
        }
        for v in &mut variants {
            let t = Instant::now();
            let out = run_with(&v.policy, &argv, v.path)?;
            v.times.push(t.elapsed());
            if !out.success() {
                return Err(format!("sandboxed /bin/true failed ({}): {out:?}", v.name).into());
            }
            v.mechanism = out.limits.memory_bytes.map(|m| m.mechanism);
        }
    }
    let p = median(plain);
    println!("runs:               {runs}");
    println!("plain spawn median: {:.3} ms", ms(p));
    println!(
        "{:<42} {:>10} {:>10} {:>8}  limits",
        "path", "median ms", "overhead", "x plain"
    );
    let mut medians = Vec::new();
    for v in variants {
        let m = median(v.times);
        medians.push(m);
        println!(
            "{:<42} {:>10.3} {:>10.3} {:>8.2}  {:?}",
            v.name,
            ms(m),
            ms(m.saturating_sub(p)),
            ms(m) / ms(p),
            v.mechanism
        );
    }
    let over = |m: Duration| ms(m.saturating_sub(p));
    println!(
        "fast/classic overhead ratio: {:.2} (with cgroup), {:.2} (without)",
        over(medians[1]) / over(medians[0]),
        over(medians[3]) / over(medians[2])
    );
    Ok(())
}
