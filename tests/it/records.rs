//! The run files of the previous format (tests/fixtures/v0) read into
//! their record types, and `report`, `merge` and resuming still work on
//! them; the new format round-trips.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use patchwright::batch::{Opened, RunDir};
use patchwright::record::grade::{self, InstanceReport};
use patchwright::record::metrics::{Metrics, Summary as MetricsSummary};
use patchwright::record::result::{self, Prediction, Status, TaskError, TaskErrorKind, TaskResult};
use patchwright::record::run::RunRecord;
use patchwright::record::sweep::{self, SweepFile};
use patchwright::record::trajectory::{
    read_steps, ActionStep, EditOutcome, EpisodeSummary, ExitStatus, ModelCall, RankedEntry,
    ReadStep, Step, TimedStep, TrajectoryFile,
};
use patchwright::record::{read_json, write_json};

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

const IDS: [&str; 3] = ["demo__cachekit-1", "demo__cachekit-2", "demo__missing-1"];

fn fixtures() -> PathBuf {
    common::root().join("tests/fixtures/v0")
}

/// The `.json` files directly in `dir`, sorted.
fn json_files(dir: &Path) -> R<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Copies the directory `from` to `to`.
fn copy_dir(from: &Path, to: &Path) -> R {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// The run directories of the fixture: the batch and the sweep's points.
fn run_dirs() -> R<Vec<PathBuf>> {
    let mut dirs = vec![fixtures().join("run")];
    let sweep = SweepFile::read(&fixtures().join("sweep"))?;
    dirs.extend(
        sweep
            .points
            .iter()
            .map(|p| fixtures().join("sweep").join(&p.dir)),
    );
    Ok(dirs)
}

#[test]
fn every_file_of_the_previous_format_reads_into_its_type() -> R {
    let mut kinds = std::collections::BTreeSet::new();
    for dir in run_dirs()? {
        let run = RunRecord::read(&dir.join("run.json"))?;
        assert!(run.identity.is_object(), "{}", dir.display());
        assert!(run.summary.is_some() && run.model.is_some() && run.dataset.is_some());
        let ids = run.instance_ids().to_vec();
        assert!(!ids.is_empty());
        for id in &ids {
            let result: TaskResult = read_json(&dir.join("results").join(format!("{id}.json")))?;
            assert_eq!(&result.instance_id, id);
            let path = dir.join("trajectories").join(format!("{id}.json"));
            let t = TrajectoryFile::read(&path)?;
            assert_eq!(t.result.as_ref(), Some(&result), "{}", path.display());
            assert!(!t.model.is_empty());
            for step in read_steps(&path)? {
                assert!(matches!(step, ReadStep::Known(_)), "{step:?}");
                kinds.insert(step.kind());
            }
        }
        let summary: MetricsSummary = read_json(&dir.join("metrics.json"))?;
        let artifacts = dir.join("artifacts");
        if artifacts.is_dir() {
            let mut n = 0;
            for id in &ids {
                let m = artifacts.join(id).join("metrics.json");
                if m.is_file() {
                    let _: Metrics = read_json(&m)?;
                    n += 1;
                }
            }
            assert_eq!(n, summary.tasks);
        }
        let predictions = result::load_predictions(&dir.join("predictions.jsonl"))?;
        for line in std::fs::read_to_string(dir.join("predictions.jsonl"))?.lines() {
            let p: Prediction = serde_json::from_str(line)?;
            assert!(predictions.contains_key(&p.instance_id));
        }
        if dir.join("eval/report.json").is_file() {
            let _: grade::Summary = read_json(&dir.join("eval/report.json"))?;
        }
    }
    // Every step kind but `reused` (a MASAI sweep's shared stages).
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "action",
            "diff",
            "edit",
            "episode",
            "model_call",
            "retrieve",
            "stage"
        ]
    );

    let sweep = SweepFile::read(&fixtures().join("sweep"))?;
    assert_eq!(sweep.points.len(), 2);
    let table = sweep::read_table(&fixtures().join("sweep"))?;
    assert_eq!(table.len(), 2);
    assert_eq!(
        table[1].label,
        "sweep.temperature=0.5".replace("sweep", "sampling")
    );

    let eval = fixtures().join("eval");
    let summary: grade::Summary = read_json(&eval.join("report.json"))?;
    assert_eq!(summary.resolved_ids, ["demo__cachekit-1"]);
    let report =
        grade::read_instance_report(&grade::instance_report_path(&eval, "demo__cachekit-1"))?;
    assert!(report.resolved && report.tests_status.is_some());
    Ok(())
}

#[test]
fn a_string_error_reads_as_kind_unknown() -> R {
    let run = fixtures().join("run");
    let r: TaskResult = read_json(&run.join("results/demo__missing-1.json"))?;
    assert_eq!(r.status, Status::Error);
    let e = r.error.ok_or("no error")?;
    assert_eq!(e.kind, TaskErrorKind::Unknown);
    assert!(
        e.message.contains("no repository for `demo/missing`"),
        "{e}"
    );
    Ok(())
}

#[test]
fn the_new_format_round_trips() -> R {
    let dir = tempfile::tempdir()?;
    let mut run = RunRecord::read(&fixtures().join("run/run.json"))?;
    let mut result: TaskResult = read_json(&fixtures().join("run/results/demo__missing-1.json"))?;
    result.error = Some(TaskError::new(TaskErrorKind::Repository, "no repository"));
    let summary = run.summary.as_mut().ok_or("no summary")?;
    summary.errors_by_kind.clear();
    summary.add(&result);
    assert_eq!(
        summary.errors_by_kind[&TaskErrorKind::Repository],
        ["demo__missing-1"]
    );
    let path = dir.path().join("run.json");
    run.write(&path)?;
    assert_eq!(RunRecord::read(&path)?, run);
    let text = std::fs::read_to_string(&path)?;
    assert!(text.contains("\"errors_by_kind\""), "{text}");

    let call: ModelCall =
        match read_steps(&fixtures().join("run/trajectories/demo__cachekit-1.json"))?
            .into_iter()
            .find_map(|s| match s {
                ReadStep::Known(TimedStep {
                    step: Step::ModelCall(c),
                    ..
                }) => Some(*c),
                _ => None,
            }) {
            Some(c) => c,
            None => return Err("no model call in the fixture".into()),
        };
    let steps = vec![
        Step::Stage { name: "fix".into() },
        Step::Reused {
            stage: "localizer".into(),
            from: "shared/x".into(),
        },
        Step::Retrieve {
            ranked: vec![RankedEntry {
                path: "a.py".into(),
                score: 2.5,
            }],
            shown: vec!["a.py".into()],
            truncated: vec![],
        },
        Step::ModelCall(Box::new(call)),
        Step::Action(Box::new(ActionStep {
            agent: "localizer".into(),
            step: 1,
            thought: "look".into(),
            action: "open a.py".into(),
            observation: "1: x".into(),
            format_error: Some("no command".into()),
            exec_s: 0.5,
        })),
        Step::Episode(Box::new(EpisodeSummary {
            agent: "localizer".into(),
            status: ExitStatus::ExitStepLimit,
            steps: 3,
            format_errors: 1,
            truncated: 0,
            tokens_evaluated: 10,
            tokens_reused: 5,
            tokens_generated: 7,
            wall_s: 1.5,
            error: Some("late".into()),
        })),
        Step::Edit {
            blocks: vec![EditOutcome {
                path: "a.py".into(),
                applied_to: Some("b.py".into()),
                matched: Some(patchwright::edit::Matched::Exact),
                error: None,
            }],
            definitions: vec![],
            unterminated: 1,
        },
        Step::Diff {
            files: 1,
            bytes: 20,
        },
    ];
    let file = TrajectoryFile {
        result: Some(result.clone()),
        model: "m.gguf".into(),
        steps: steps
            .into_iter()
            .enumerate()
            .map(|(i, step)| TimedStep {
                at_s: i as f64,
                step,
            })
            .collect(),
    };
    let path = dir.path().join("t.json");
    write_json(&path, &file)?;
    assert_eq!(TrajectoryFile::read(&path)?, file);

    let report = InstanceReport::new("demo__cachekit-1", Some("diff"));
    grade::write_instance_report(dir.path(), &report)?;
    assert_eq!(
        grade::read_instance_report(&dir.path().join("report.json"))?,
        report
    );
    Ok(())
}

fn patchwright(args: &[&std::ffi::OsStr]) -> R<String> {
    let o = Command::new(env!("CARGO_BIN_EXE_patchwright"))
        .current_dir(common::root())
        .args(args)
        .output()?;
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    if !o.status.success() {
        return Err(format!("patchwright {args:?} failed: {log}").into());
    }
    Ok(log)
}

#[test]
fn report_and_merge_read_the_previous_format() -> R {
    let dir = tempfile::tempdir()?;
    let (run, sweep) = (dir.path().join("run"), dir.path().join("sweep"));
    copy_dir(&fixtures().join("run"), &run)?;
    copy_dir(&fixtures().join("sweep"), &sweep)?;
    let html = dir.path().join("report.html");
    patchwright(&[
        "report".as_ref(),
        "--out".as_ref(),
        html.as_os_str(),
        run.as_os_str(),
        sweep.as_os_str(),
    ])?;
    let page = std::fs::read_to_string(&html)?;
    for id in IDS {
        assert!(page.contains(id), "{id}");
    }
    assert!(page.contains("Errors by kind: 1 <code>unknown</code>"));

    let merged = dir.path().join("merged");
    patchwright(&[
        "merge".as_ref(),
        "--out".as_ref(),
        merged.as_os_str(),
        run.as_os_str(),
    ])?;
    let record = RunRecord::read(&merged.join("run.json"))?;
    assert_eq!(record.instance_ids(), IDS);
    let summary = record.summary.ok_or("no summary")?;
    assert_eq!((summary.tasks, summary.errors), (3, 1));
    assert_eq!(
        summary.errors_by_kind[&TaskErrorKind::Unknown],
        ["demo__missing-1"]
    );
    for id in IDS {
        assert!(
            merged.join("results").join(format!("{id}.json")).is_file(),
            "{id}"
        );
    }
    assert_eq!(json_files(&merged.join("results"))?.len(), 3);
    Ok(())
}

#[test]
fn a_run_of_the_previous_format_resumes() -> R {
    let dir = tempfile::tempdir()?;
    let run = dir.path().join("run");
    copy_dir(&fixtures().join("run"), &run)?;
    let identity = RunRecord::read(&run.join("run.json"))?.identity;
    let (opened_run, opened) = RunDir::open(&run, &identity)?;
    assert_eq!(opened, Opened::Resumed);
    for id in IDS {
        assert!(opened_run.finished(id)?.is_some(), "{id} finished");
    }
    Ok(())
}
