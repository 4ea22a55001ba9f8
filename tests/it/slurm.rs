//! `patchwright slurm` against a real Slurm: a one-node cluster (munged,
//! slurmctld, slurmd from Debian's slurm-wlm and munge, which
//! `scripts/test` installs) started per test in a temporary directory, on
//! ports of its own; nothing of the host's configuration is read or
//! changed. The tiny model (what is compared is the runs around it) with
//! small budgets, greedy where the comparison needs it.

use crate::common;

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

type Error = Box<dyn std::error::Error>;

const DEMO: &str = "datasets/demo/tasks.jsonl";

/// The first pipeline, greedy, short replies: a task in about a second.
const FIRST: &str = "[engine]\ncontext = 1024\n[sampling]\nmax_tokens = 8\n\
    [retrieval]\nfiles = 1\n[pipeline]\nkind = \"first\"\n";

/// The localizer runs (one turn, greedy, shared between points); the
/// Fixer samples two short candidates (what is compared is the table and
/// the sharing, not the patches).
const MASAI: &str = "[engine]\ncontext = 2048\n\
    [react]\nreply_tokens = 32\n[aci]\nwindow = 20\n\
    [pipeline]\ntemplate = false\nreproduce = false\nrank = false\n\
    [agents.localizer]\nmax_steps = 1\ntemperature = 0.0\n\
    [fixer]\ncandidates = 2\nmax_tokens = 16\n";

/// Every element asks for both CPUs of the node, so they run one at a time
/// (two llama.cpp processes would busy-wait against each other); the
/// watcher looks every second.
const SLURM: &str = "[slurm]\ncpus = 2\npoll_s = 1\nretries = 2\n";

/// A one-node Slurm cluster in a temporary directory, stopped on drop.
struct Cluster {
    dir: tempfile::TempDir,
    daemons: Vec<Child>,
}

fn free_port() -> Result<u16, Error> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Cluster {
    fn start() -> Result<Cluster, Error> {
        for program in [
            "munged",
            "slurmctld",
            "slurmd",
            "sbatch",
            "squeue",
            "scancel",
        ] {
            let found = Command::new("sh")
                .args([
                    "-c",
                    &format!("command -v {program} || test -x /usr/sbin/{program}"),
                ])
                .output()?
                .status
                .success();
            assert!(
                found,
                "{program} is missing: scripts/test installs Debian's slurm-wlm and munge"
            );
        }
        let dir = tempfile::Builder::new().prefix("slurm-").tempdir()?;
        let d = dir.path();
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(d.join(sub))?;
        }
        let key = d.join("munge.key");
        let bytes: Vec<u8> = (0..1024u32).map(|i| (i * 7919 % 251) as u8).collect();
        std::fs::write(&key, bytes)?;
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let host = String::from_utf8(Command::new("hostname").output()?.stdout)?
            .trim()
            .to_string();
        let (ctld, slurmd) = (free_port()?, free_port()?);
        let p = |s: &str| d.join(s).display().to_string();
        let conf = format!(
            "ClusterName=patchwright-test\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld}\nSlurmdPort={slurmd}\n\
             AuthType=auth/munge\nAuthInfo=socket={sock}\nCredType=cred/munge\n\
             SlurmUser=root\nSlurmdUser=root\n\
             StateSaveLocation={state}\nSlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={ctld_pid}\nSlurmdPidFile={d_pid}\n\
             SlurmctldLogFile={ctld_log}\nSlurmdLogFile={d_log}\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n\
             SchedulerType=sched/backfill\nSelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
             ReturnToService=2\nJobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n\
             MinJobAge=600\nKillWait=5\n\
             NodeName=pwnode NodeHostname={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=4000 State=UNKNOWN\n\
             PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            sock = p("munge.sock"),
            state = p("state"),
            spool = p("spool"),
            ctld_pid = p("slurmctld.pid"),
            d_pid = p("slurmd.pid"),
            ctld_log = p("log/slurmctld.log"),
            d_log = p("log/slurmd.log"),
        );
        std::fs::write(d.join("slurm.conf"), conf)?;
        let mut cluster = Cluster {
            dir,
            daemons: Vec::new(),
        };
        let d = cluster.dir.path().to_path_buf();
        let log = |name: &str| -> Result<Stdio, Error> {
            Ok(Stdio::from(std::fs::File::create(
                d.join("log").join(name),
            )?))
        };
        cluster.daemons.push(
            Command::new("munged")
                .args(["--foreground", "--force"])
                .arg(format!("--socket={}", d.join("munge.sock").display()))
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--log-file={}", d.join("log/munged.log").display()))
                .arg(format!("--pid-file={}", d.join("munged.pid").display()))
                .arg(format!("--seed-file={}", d.join("munged.seed").display()))
                .stdout(log("munged.out")?)
                .stderr(log("munged.err")?)
                .spawn()?,
        );
        for (program, args) in [
            ("slurmctld", &["-D", "-i"][..]),
            ("slurmd", &["-D", "-N", "pwnode"][..]),
        ] {
            let child = cluster
                .command(program)
                .args(args)
                .stdout(log(&format!("{program}.out"))?)
                .stderr(log(&format!("{program}.err"))?)
                .spawn()?;
            cluster.daemons.push(child);
        }
        let start = Instant::now();
        loop {
            let o = cluster.command("sinfo").args(["-h", "-o", "%T"]).output()?;
            let state = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if state == "idle" {
                return Ok(cluster);
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "the test cluster did not come up (sinfo: {state:?} {}); logs in {}",
                    String::from_utf8_lossy(&o.stderr),
                    d.join("log").display()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A command with this cluster's configuration.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.dir.path().join("slurm.conf"))
            .current_dir(common::root());
        c
    }

    fn patchwright<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Output, Error> {
        Ok(self
            .command(env!("CARGO_BIN_EXE_patchwright"))
            .args(args)
            .output()?)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.daemons.iter_mut().rev() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }
}

fn patchwright<S: AsRef<OsStr>>(args: &[S]) -> Result<Output, Error> {
    Ok(Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .args(args)
        .current_dir(common::root())
        .output()?)
}

/// `head`, then `args`, then `--out out`: one command line.
fn line(head: &[&str], args: &[&str], out: &Path) -> Vec<String> {
    head.iter()
        .chain(args)
        .chain(&["--out", path(out)])
        .map(|s| s.to_string())
        .collect()
}

fn ok(o: &Output, what: &str) -> Result<String, Error> {
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    if !o.status.success() {
        return Err(format!("{what} failed ({}):\n{log}", o.status).into());
    }
    Ok(log)
}

fn read_json(path: &Path) -> Result<Value, Error> {
    Ok(serde_json::from_slice(&std::fs::read(path)?)?)
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// Every model reply of task `id`'s trajectory in `run`, in order.
fn replies(run: &Path, id: &str) -> Result<Vec<Value>, Error> {
    let t = read_json(&run.join("trajectories").join(format!("{id}.json")))?;
    Ok(t["steps"]
        .as_array()
        .ok_or("no steps")?
        .iter()
        .filter(|s| s["kind"] == "model_call")
        .map(|s| s["response"].clone())
        .collect())
}

/// Waits up to `limit` for `done`, checking every 50 ms.
fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) -> Result<(), Error> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return Err(format!("gave up waiting for {what}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn results_in(dir: &Path) -> Vec<(String, SystemTime, Vec<u8>)> {
    let mut found: Vec<(String, SystemTime, Vec<u8>)> = std::fs::read_dir(dir.join("results"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .filter_map(|e| {
                    let meta = e.metadata().ok()?;
                    Some((
                        e.file_name().to_string_lossy().into_owned(),
                        meta.modified().ok()?,
                        std::fs::read(e.path()).ok()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

#[test]
fn a_batch_as_a_job_array_merges_into_the_single_machine_run_with_an_element_cancelled(
) -> Result<(), Error> {
    let model = common::tiny_model();
    let cluster = Cluster::start()?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("first.toml");
    std::fs::write(&config, format!("{FIRST}{SLURM}"))?;
    // Six of the demo's tasks: two elements of three, so one can be
    // cancelled with work done and work left (all ten in four elements
    // cost the suite 93 s).
    let args = [
        "--dataset",
        DEMO,
        "--slice",
        "0:6",
        "--repos",
        "datasets/demo/repos",
        "--model",
        path(&model),
        "--config",
        path(&config),
    ];
    let single = dir.path().join("single");
    ok(&patchwright(&line(&["batch"], &args, &single))?, "batch")?;

    // Two elements of 3 tasks, submitted and left running.
    let run = dir.path().join("array");
    let o = cluster.patchwright(&line(
        &["slurm", "batch", "--shards", "2", "--detach"],
        &args,
        &run,
    ))?;
    ok(&o, "slurm batch --detach")?;
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!(
            "script: {0}/slurm/batch.sbatch\nstatus: patchwright slurm status {0}\n",
            run.display()
        )
    );
    let file = read_json(&run.join("slurm/slurm.json"))?;
    let job = file["rounds"][0]["jobs"][0]["job"]
        .as_str()
        .ok_or("no array job")?
        .to_string();
    assert!(file["rounds"][0]["env_job"].is_string(), "{file}");

    // Element 0 is cancelled once its first task is finished, with the
    // others still to run.
    let shard1 = run.join("slurm/shards/1-of-2");
    wait_for(Duration::from_secs(120), "shard 1's first result", || {
        !results_in(&shard1).is_empty()
    })?;
    ok(
        &cluster
            .command("scancel")
            .arg(format!("{job}_0"))
            .output()?,
        "scancel",
    )?;
    let before = results_in(&shard1);
    assert!(
        !before.is_empty() && before.len() < 3,
        "cancelled with {} of its 3 tasks finished",
        before.len()
    );

    // The watcher resubmits element 0 alone, then merges.
    let o = cluster.patchwright(&["slurm", "status", path(&run)])?;
    let log = ok(&o, "slurm status")?;
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("predictions: {}/predictions.jsonl", run.display())),
        "{stdout}"
    );
    let file = read_json(&run.join("slurm/slurm.json"))?;
    let rounds = file["rounds"].as_array().ok_or("no rounds")?;
    assert_eq!(rounds.len(), 2, "{file}");
    assert_eq!(rounds[1]["retry"], true);
    assert_eq!(rounds[1]["jobs"][0]["shards"], serde_json::json!([1]));
    let retry_job = rounds[1]["jobs"][0]["job"].as_str().ok_or("no retry job")?;
    let retry_log = std::fs::read_to_string(run.join(format!("slurm/logs/{retry_job}_0.log")))?;
    assert!(
        retry_log.contains(&format!(
            "{} tasks finished by an earlier run are kept; {} to run",
            before.len(),
            3 - before.len()
        )),
        "{retry_log}"
    );
    // Exactly once: what finished before the cancel was not run again.
    let after = results_in(&shard1);
    assert_eq!(after.len(), 3, "{log}");
    for finished in &before {
        assert!(after.contains(finished), "{} was written again", finished.0);
    }

    // The merged run is the single machine's: the same predictions, in the
    // same order, and the same model replies in every trajectory.
    assert_eq!(
        std::fs::read_to_string(run.join("predictions.jsonl"))?,
        std::fs::read_to_string(single.join("predictions.jsonl"))?
    );
    let merged = read_json(&run.join("run.json"))?;
    let ids: Vec<String> = merged["selection"]["instance_ids"]
        .as_array()
        .ok_or("no ids")?
        .iter()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    assert_eq!(ids.len(), 6);
    assert_eq!(merged["summary"]["tasks"], 6);
    for id in &ids {
        assert_eq!(replies(&run, id)?, replies(&single, id)?, "{id}");
    }
    assert_eq!(std::fs::read_dir(run.join("results"))?.count(), 6);

    // The report renders.
    let html = dir.path().join("report.html");
    ok(
        &patchwright(&["report", "--out", path(&html), path(&run)])?,
        "report",
    )?;
    let page = std::fs::read_to_string(&html)?;
    assert!(ids.iter().all(|id| page.contains(id.as_str())));
    assert!(run.join("report.html").is_file());
    Ok(())
}

#[test]
fn a_sweep_as_job_arrays_writes_the_table_of_one_machine() -> Result<(), Error> {
    let model = common::tiny_model();
    let cluster = Cluster::start()?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("masai.toml");
    std::fs::write(&config, format!("{MASAI}{SLURM}"))?;
    let args = [
        "--dataset",
        DEMO,
        "--slice",
        "0:2",
        "--repos",
        "datasets/demo/repos",
        "--model",
        path(&model),
        "--config",
        path(&config),
        "--grid",
        "temperature=0.4,0.8",
        // One task at a time on one machine too: the elements run one
        // task each, and a sampled reply depends on which sequences
        // llama.cpp decodes beside it.
        "--jobs",
        "1",
    ];
    let one = dir.path().join("one");
    ok(&patchwright(&line(&["sweep"], &args, &one))?, "sweep")?;

    let arrays = dir.path().join("arrays");
    let o = cluster.patchwright(&line(&["slurm", "sweep", "--shards", "2"], &args, &arrays))?;
    let log = ok(&o, "slurm sweep")?;
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains(&format!("table: {}/table.csv", arrays.display())),
        "{log}"
    );

    // Two arrays of two elements; point 1 waits for point 0, shard by shard.
    let file = read_json(&arrays.join("slurm/slurm.json"))?;
    assert_eq!(file["arrays"][1]["after"], 0, "{file}");
    let rounds = file["rounds"].as_array().ok_or("no rounds")?;
    assert_eq!(rounds.len(), 1, "{file}");
    assert_eq!(rounds[0]["jobs"].as_array().map(Vec::len), Some(2));

    // The table is one machine's, but for the times.
    let table = |d: &Path| -> Result<Vec<Vec<String>>, Error> {
        let csv = std::fs::read_to_string(d.join("table.csv"))?;
        let header: Vec<&str> = csv.lines().next().unwrap_or("").split(',').collect();
        let timed: Vec<usize> = header
            .iter()
            .enumerate()
            .filter(|(_, h)| ["elapsed_s", "model_busy", "model_s_per_task"].contains(*h))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(timed.len(), 3, "{csv}");
        Ok(csv
            .lines()
            .map(|l| {
                l.split(',')
                    .enumerate()
                    .filter(|(i, _)| !timed.contains(i))
                    .map(|(_, c)| c.to_string())
                    .collect()
            })
            .collect())
    };
    let rows = table(&arrays)?;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows, table(&one)?);

    // Point 1 reused point 0's localisations, as on one machine.
    let sweep = read_json(&arrays.join("sweep.json"))?;
    let point1 = arrays.join(sweep["points"][1]["dir"].as_str().ok_or("no dir")?);
    for id in ["demo__cachekit-1", "demo__cachekit-2"] {
        let t = read_json(&point1.join("trajectories").join(format!("{id}.json")))?;
        let reused = t["steps"]
            .as_array()
            .ok_or("no steps")?
            .iter()
            .filter(|s| s["kind"] == "reused" && s["stage"] == "localize")
            .count();
        assert_eq!(reused, 1, "{id}");
        assert_eq!(
            replies(&point1, id)?,
            replies(
                &one.join(sweep["points"][1]["dir"].as_str().unwrap_or("")),
                id
            )?
        );
    }

    // The sweep report covers both points.
    let html = dir.path().join("report.html");
    ok(
        &patchwright(&["report", "--out", path(&html), path(&arrays)])?,
        "report",
    )?;
    let page = std::fs::read_to_string(&html)?;
    for point in sweep["points"].as_array().ok_or("no points")? {
        let label = point["label"].as_str().ok_or("no label")?;
        assert!(page.contains(label), "{label} is not in the report");
    }
    Ok(())
}
