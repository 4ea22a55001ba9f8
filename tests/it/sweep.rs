//! `patchwright sweep`, `merge` and `report` end to end on the tiny model
//! (what is checked is the sweep around the model, not its words) with
//! small budgets.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

type Error = Box<dyn std::error::Error>;

const DEMO: &str = "datasets/demo/tasks.jsonl";

/// The localizer runs (one turn); the other ReAct stages are off.
const CONFIG: &str = "[engine]\ncontext = 2048\n\
    [react]\nreply_tokens = 48\n[aci]\nwindow = 20\n\
    [pipeline]\ntemplate = false\nreproduce = false\nrank = false\n\
    [agents.localizer]\nmax_steps = 1\ntemperature = 0.0\n\
    [fixer]\ncandidates = 2\nmax_tokens = 48\n";

fn patchwright(args: &[&str]) -> Result<Output, Error> {
    Ok(Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .args(args)
        .current_dir(common::root())
        .output()?)
}

fn ok(o: &Output) -> Result<String, Error> {
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    if !o.status.success() {
        return Err(format!("patchwright failed:\n{log}").into());
    }
    Ok(log)
}

fn read_json(path: &Path) -> Result<Value, Error> {
    Ok(serde_json::from_slice(&std::fs::read(path)?)?)
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

#[test]
fn a_sweep_runs_every_point_shares_stages_and_writes_a_table() -> Result<(), Error> {
    let model = common::tiny_model();
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("small.toml");
    std::fs::write(
        &config,
        format!("{CONFIG}[sweep.grid]\ncandidates = [1, 2]\n"),
    )?;
    let out = dir.path().join("sweep");
    let o = patchwright(&[
        "sweep",
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
        "--jobs",
        "2",
        "--out",
        path(&out),
    ])?;
    let log = ok(&o)?;
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!(
            "table: {0}/table.csv\ntable: {0}/table.json\nsweep: {0}/sweep.json\n",
            out.display()
        )
    );

    // The config's axis first, then the flag's; first axis slowest.
    let csv = std::fs::read_to_string(out.join("table.csv"))?;
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 5, "{csv}");
    assert!(
        lines[0].starts_with("fixer.candidates,fixer.temperature,tasks,patched,"),
        "{csv}"
    );
    let cells: Vec<Vec<&str>> = lines[1..].iter().map(|l| l.split(',').collect()).collect();
    let grid: Vec<(&str, &str)> = cells.iter().map(|c| (c[0], c[1])).collect();
    assert_eq!(
        grid,
        [("1", "0.4"), ("1", "0.8"), ("2", "0.4"), ("2", "0.8")]
    );
    assert!(
        cells.iter().all(|c| c[2] == "2"),
        "two tasks a point: {csv}"
    );

    let sweep = read_json(&out.join("sweep.json"))?;
    let points = sweep["points"].as_array().ok_or("no points")?;
    assert_eq!(points.len(), 4);
    let ids = ["demo__cachekit-1", "demo__cachekit-2"];
    for (i, point) in points.iter().enumerate() {
        let run_dir = out.join(point["dir"].as_str().ok_or("no dir")?);
        let run = read_json(&run_dir.join("run.json"))?;
        assert_eq!(
            run["settings"]["fixer"]["candidates"],
            point["values"]["fixer.candidates"]
        );
        assert_eq!(run["summary"]["tasks"], 2);
        assert!(run["model_load"]["busy_s"].as_f64().unwrap_or(0.0) > 0.0);
        for id in ids {
            // The localizer depends on nothing the grid changes: it runs at
            // the first point and is reused at the others.
            let t = read_json(&run_dir.join("trajectories").join(format!("{id}.json")))?;
            let reused = t["steps"]
                .as_array()
                .ok_or("no steps")?
                .iter()
                .filter(|s| s["kind"] == "reused" && s["stage"] == "localize")
                .count();
            assert_eq!(reused, usize::from(i > 0), "point {i}, {id}");
        }
    }
    for id in ids {
        let shared: Vec<String> = std::fs::read_dir(out.join("shared").join(id))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(shared.len(), 1, "one stored localisation: {shared:?}");
        assert!(shared[0].starts_with("localize-"), "{shared:?}");
    }
    assert!(log.contains("taken from"), "{log}");

    // Running it again resumes: nothing is redone.
    let again = ok(&patchwright(&[
        "sweep",
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
        "--out",
        path(&out),
    ])?)?;
    assert_eq!(
        again
            .matches("2 tasks finished by an earlier run are kept; 0 to run")
            .count(),
        4,
        "{again}"
    );

    // The report covers the four points.
    let html = dir.path().join("report.html");
    let o = patchwright(&["report", "--out", path(&html), path(&out)])?;
    ok(&o)?;
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        html.display().to_string()
    );
    let page = std::fs::read_to_string(&html)?;
    for point in points {
        let label = point["label"].as_str().ok_or("no label")?;
        assert!(page.contains(label), "{label} is not in the report");
    }
    Ok(())
}

#[test]
fn shards_merge_into_one_run() -> Result<(), Error> {
    let model = common::tiny_model();
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("first.toml");
    std::fs::write(
        &config,
        "[engine]\ncontext = 1024\n[sampling]\nmax_tokens = 8\n[retrieval]\nfiles = 1\n\
         [pipeline]\nkind = \"first\"\n",
    )?;
    let shard = |k: usize, name: &str, cfg: &Path| -> Result<std::path::PathBuf, Error> {
        let out = dir.path().join(name);
        ok(&patchwright(&[
            "batch",
            "--dataset",
            DEMO,
            "--slice",
            "0:4",
            "--shard",
            &format!("{k}/2"),
            "--repos",
            "datasets/demo/repos",
            "--model",
            path(&model),
            "--config",
            path(cfg),
            "--out",
            path(&out),
        ])?)?;
        Ok(out)
    };
    let a = shard(1, "a", &config)?;
    let b = shard(2, "b", &config)?;
    let merged = dir.path().join("merged");
    let o = patchwright(&["merge", "--out", path(&merged), path(&a), path(&b)])?;
    let log = ok(&o)?;
    assert!(log.contains("2 shards: 4 tasks"), "{log}");
    let predictions = std::fs::read_to_string(merged.join("predictions.jsonl"))?;
    let ids: Vec<String> = predictions
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).map(|v| v["instance_id"].to_string()))
        .collect::<Result<_, _>>()?;
    assert_eq!(
        ids,
        [
            "\"demo__cachekit-1\"",
            "\"demo__cachekit-2\"",
            "\"demo__confkit-1\"",
            "\"demo__confkit-2\""
        ],
        "the selection's order, as one batch of it writes them"
    );
    let run = read_json(&merged.join("run.json"))?;
    assert_eq!(run["summary"]["tasks"], 4);
    assert_eq!(run["merged_from"].as_array().map(Vec::len), Some(2));
    for id in ["demo__cachekit-1", "demo__confkit-2"] {
        assert_eq!(
            std::fs::read(merged.join("results").join(format!("{id}.json")))?,
            std::fs::read(
                if id.ends_with("-1") { &a } else { &b }
                    .join("results")
                    .join(format!("{id}.json"))
            )?
        );
        assert!(merged
            .join("trajectories")
            .join(format!("{id}.json"))
            .is_file());
    }
    // Merging again is a no-op; a shard of other settings is refused.
    ok(&patchwright(&[
        "merge",
        "--out",
        path(&merged),
        path(&a),
        path(&b),
    ])?)?;
    assert_eq!(
        std::fs::read_to_string(merged.join("predictions.jsonl"))?,
        predictions
    );
    let other = dir.path().join("other.toml");
    std::fs::write(
        &other,
        std::fs::read_to_string(&config)?.replace("max_tokens = 8", "max_tokens = 6"),
    )?;
    let c = shard(1, "c", &other)?;
    let o = patchwright(&["merge", "--out", path(&merged), path(&a), path(&c)])?;
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        log.contains("`settings.sampling.max_tokens` is 8 in the run, 6 now"),
        "{log}"
    );
    Ok(())
}
