//! Exactly once: a real batch (the tiny model, the MASAI pipeline with small
//! budgets, two tasks in flight) is killed with SIGKILL at several points and
//! run again each time. At every kill point: every stored result and
//! prediction line parses (nothing torn), no task has two lines, and every
//! result finished before the kill is still there, byte for byte, and is not
//! redone. The last run finishes every task; `--redo` then redoes one.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error>;

const DEMO: &str = "datasets/demo/tasks.jsonl";

/// The tasks the batch runs: four of the demo's ten, enough for a kill
/// before any result, after the first, after half, and work left to resume
/// (what is tested is the kill points, not the number of tasks).
const TASKS: &str = "^demo__(cachekit|confkit)-";

/// Small budgets: a task takes seconds, so the kills land mid-batch.
const CONFIG: &str = "[engine]\ncontext = 2048\n\
    [react]\nreply_tokens = 48\n[aci]\nwindow = 20\n\
    [pipeline]\ntemplate = false\nreproduce = false\nrank = false\n\
    [agents.localizer]\nmax_steps = 1\ntemperature = 0.0\n\
    [fixer]\ncandidates = 2\nmax_tokens = 48\n";

/// The longest a run may take before the test gives up on it.
const RUN_LIMIT: Duration = Duration::from_secs(900);

fn start(out: &Path, config: &Path, extra: &[&str]) -> Result<Child, Error> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_patchwright"));
    cmd.args(["batch", "--dataset", DEMO, "--repos", "datasets/demo/repos"])
        .arg("--model")
        .arg(common::tiny_model())
        .args(["--jobs", "2"])
        .args(if extra.contains(&"--filter") {
            &[][..]
        } else {
            &["--filter", TASKS][..]
        })
        .arg("--config")
        .arg(config)
        .arg("--out")
        .arg(out)
        .args(extra)
        .current_dir(common::root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Ok(cmd.spawn()?)
}

/// The stored results: instance id → file bytes.
fn results(out: &Path) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let mut found = BTreeMap::new();
    let dir = out.join("results");
    if !dir.is_dir() {
        return Ok(found);
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(id) = name.strip_suffix(".json") {
            if !name.starts_with('.') {
                found.insert(id.to_string(), std::fs::read(&path)?);
            }
        }
    }
    Ok(found)
}

/// Checks what a killed (or finished) run left: whole files, one
/// prediction line per task at most, each for a finished task.
fn check_consistent(out: &Path) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let found = results(out)?;
    for (id, bytes) in &found {
        let v: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("results/{id}.json is not whole JSON: {e}"))?;
        assert_eq!(v["instance_id"], id.as_str());
        let trajectory = out.join("trajectories").join(format!("{id}.json"));
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(&trajectory)?)
            .map_err(|e| format!("{} is not whole JSON: {e}", trajectory.display()))?;
    }
    let predictions = out.join("predictions.jsonl");
    if predictions.exists() {
        let text = std::fs::read_to_string(&predictions)?;
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "torn last line: {text:?}"
        );
        let mut seen = Vec::new();
        for line in text.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("torn line {line:?}: {e}"))?;
            let id = v["instance_id"].as_str().unwrap_or_default().to_string();
            assert!(!seen.contains(&id), "{id} has two lines:\n{text}");
            assert!(
                found.contains_key(&id),
                "{id} is predicted without a result"
            );
            seen.push(id);
        }
    }
    Ok(found)
}

/// How many resumptions `out`'s run.json records (`None` before it exists
/// or while it is being replaced).
fn resumptions(out: &Path) -> Option<usize> {
    let bytes = std::fs::read(out.join("run.json")).ok()?;
    let run: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    Some(run["resumed_at"].as_array().map_or(0, Vec::len))
}

/// Waits until this run has recorded itself (run.json with `resumed`
/// resumptions) and `out` holds at least `n` results (or `delay` has
/// passed, for a time-based kill point), then kills the run with SIGKILL.
/// Without the first condition a kill point the previous run had already
/// reached would kill this one before it started.
fn kill_when(
    mut child: Child,
    out: &Path,
    resumed: usize,
    n: usize,
    delay: Option<Duration>,
) -> Result<(), Error> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(format!("the run ended ({status}) before the kill point").into());
        }
        let reached = resumptions(out) == Some(resumed)
            && match delay {
                Some(d) => started.elapsed() >= d,
                None => results(out)?.len() >= n,
            };
        if reached {
            break;
        }
        if started.elapsed() > RUN_LIMIT {
            child.kill()?;
            return Err("no kill point within the time limit".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill()?; // SIGKILL
    child.wait()?;
    Ok(())
}

fn finish(child: Child) -> Result<String, Error> {
    let o = child.wait_with_output()?;
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "the run failed:\n{log}");
    Ok(log)
}

/// The ids [`TASKS`] selects.
fn all_ids() -> Result<Vec<String>, Error> {
    let selected = regex::Regex::new(TASKS)?;
    let ids: Vec<String> = patchwright::dataset::load(&common::root().join(DEMO))?
        .into_iter()
        .map(|t| t.instance_id)
        .filter(|id| selected.is_match(id))
        .collect();
    assert_eq!(ids.len(), 4, "{TASKS} selects four demo tasks: {ids:?}");
    Ok(ids)
}

#[test]
fn a_batch_killed_at_any_point_resumes_exactly_once() -> Result<(), Error> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("small.toml");
    std::fs::write(&config, CONFIG)?;
    let out: PathBuf = dir.path().join("run");
    let ids = all_ids()?;

    // Kill points: before any task finished (1.5 s in), after the first
    // result, after half of them.
    let mut kept: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (resumed, (n, delay)) in [
        (0, Some(Duration::from_millis(1500))),
        (1, None),
        (ids.len() / 2, None),
    ]
    .into_iter()
    .enumerate()
    {
        let child = start(&out, &config, &[])?;
        kill_when(child, &out, resumed, n, delay)?;
        let now = check_consistent(&out)?;
        for (id, bytes) in &kept {
            assert_eq!(
                now.get(id),
                Some(bytes),
                "{id} finished before the kill and must be kept as it was"
            );
        }
        assert!(
            now.len() >= n,
            "{} results, expected at least {n}",
            now.len()
        );
        kept = now;
    }
    assert!(
        kept.len() < ids.len(),
        "the last kill left tasks to do: {kept:?}"
    );

    // The rerun skips what finished and does the rest.
    let log = finish(start(&out, &config, &[])?)?;
    assert!(
        log.contains(&format!(
            "{} tasks finished by an earlier run are kept; {} to run",
            kept.len(),
            ids.len() - kept.len()
        )),
        "{log}"
    );
    let done = check_consistent(&out)?;
    assert_eq!(
        done.keys().cloned().collect::<Vec<_>>(),
        {
            let mut sorted = ids.clone();
            sorted.sort();
            sorted
        },
        "every task finished"
    );
    for (id, bytes) in &kept {
        assert_eq!(done.get(id), Some(bytes), "{id} was redone");
    }
    let errors: Vec<&String> = done
        .iter()
        .filter(|(_, b)| {
            serde_json::from_slice::<serde_json::Value>(b)
                .map(|v| v["status"] == "error")
                .unwrap_or(true)
        })
        .map(|(id, _)| id)
        .collect();
    assert!(errors.is_empty(), "tasks ended in error: {errors:?}");
    let lines = std::fs::read_to_string(out.join("predictions.jsonl"))?
        .lines()
        .count();
    assert_eq!(lines, ids.len(), "one prediction per task");
    let run: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("run.json"))?)?;
    assert_eq!(run["summary"]["tasks"], ids.len());
    assert_eq!(
        run["resumed_at"].as_array().map(Vec::len),
        Some(3),
        "three resumptions are recorded"
    );

    // Running again does nothing; --redo redoes the selected task.
    let log = finish(start(&out, &config, &[])?)?;
    assert!(
        log.contains(&format!(
            "{} tasks finished by an earlier run are kept; 0 to run",
            ids.len()
        )),
        "{log}"
    );
    assert_eq!(results(&out)?, done, "nothing was redone");
    let first = &ids[0];
    let filter = format!("^{first}$");
    let before =
        std::fs::metadata(out.join("results").join(format!("{first}.json")))?.modified()?;
    finish(start(&out, &config, &["--redo", "--filter", &filter])?)?;
    let after = std::fs::metadata(out.join("results").join(format!("{first}.json")))?.modified()?;
    assert!(after > before, "--redo wrote {first}'s result again");
    check_consistent(&out)?;
    let lines = std::fs::read_to_string(out.join("predictions.jsonl"))?
        .lines()
        .count();
    assert_eq!(
        lines,
        ids.len(),
        "a run of one task keeps the others' predictions"
    );
    let run: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("run.json"))?)?;
    assert_eq!(
        run["summary"]["tasks"],
        ids.len(),
        "the summary covers the whole run"
    );

    // Other settings are refused, naming the difference.
    let other = dir.path().join("other.toml");
    std::fs::write(&other, CONFIG.replace("window = 20", "window = 30"))?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_patchwright"));
    let o = cmd
        .args(["batch", "--dataset", DEMO, "--repos", "datasets/demo/repos"])
        .arg("--model")
        .arg(common::tiny_model())
        .arg("--config")
        .arg(&other)
        .arg("--out")
        .arg(&out)
        .current_dir(common::root())
        .output()?;
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        log.contains("`settings.aci.window` is 20 in the run, 30 now"),
        "{log}"
    );
    Ok(())
}
