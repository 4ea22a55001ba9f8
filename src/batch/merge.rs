//! Merging the run directories of a batch's shards (`--shard K/N` on
//! several machines) into one run directory, as if one batch had run them.
//!
//! The shards must be the same run (settings and model, the `identity` of
//! their run.json). Each finished task's files (result, trajectory,
//! artifacts, grade) are copied; a task finished in two shards with
//! different results is refused rather than one silently winning.
//! Merging again (more shards finished) adds what is new.

use std::path::{Path, PathBuf};

use super::rundir::first_difference;
use super::{BatchError, RunDir, Summary};
use crate::record::grade::{self as grades, InstanceReport, Summary as GradeSummary};
use crate::record::run::RunRecord;
use crate::record::write_atomic;

/// What a merge produced.
#[derive(Debug, Clone)]
pub struct Merged {
    pub summary: Summary,
    /// Tasks copied from the shards by this merge (not already there).
    pub copied: usize,
}

/// Copies `from` (a file or directory) to `to`, replacing what is there.
fn copy_tree(from: &Path, to: &Path) -> Result<(), BatchError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| BatchError::Io {
            action,
            path,
            source,
        }
    };
    if from.is_dir() {
        std::fs::create_dir_all(to).map_err(io("create", to))?;
        for entry in std::fs::read_dir(from).map_err(io("read", from))? {
            let entry = entry.map_err(io("read", from))?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        let bytes = std::fs::read(from).map_err(io("read", from))?;
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(io("create", parent))?;
        }
        Ok(write_atomic(to, &bytes)?)
    }
}

/// Merges the run directories `shards` into `out`.
pub fn merge(shards: &[PathBuf], out: &Path) -> Result<Merged, BatchError> {
    let Some(first) = shards.first() else {
        return Err(BatchError::Invalid("no shard to merge".into()));
    };
    let runs: Vec<RunRecord> = shards
        .iter()
        .map(|s| RunRecord::read(&s.join("run.json")))
        .collect::<Result<_, _>>()?;
    let identity = runs[0].identity.clone();
    if identity.is_null() {
        return Err(BatchError::Invalid(format!(
            "{}: run.json has no identity (written by an older patchwright?)",
            first.display()
        )));
    }
    for (shard, run) in shards.iter().zip(&runs).skip(1) {
        if let Some(difference) = first_difference(&identity, &run.identity, "") {
            return Err(BatchError::Different {
                path: shard.clone(),
                difference: format!("against {}: {difference}", first.display()),
            });
        }
    }
    let (merged, _) = RunDir::open(out, &identity)?;
    // Task order: each shard's selection in turn, first seen first.
    let mut ids: Vec<String> = Vec::new();
    if let Ok(Some(old)) = merged.record() {
        ids.extend(old.instance_ids().iter().cloned());
    }
    for run in &runs {
        for id in run.instance_ids() {
            if !ids.contains(id) {
                ids.push(id.clone());
            }
        }
    }
    let mut copied = 0;
    let mut graded = false;
    for id in &ids {
        for shard in shards {
            let from = RunDir::at(shard);
            let Some(result) = from.finished(id)? else {
                continue;
            };
            if let Some(existing) = merged.finished(id)? {
                if existing != result {
                    return Err(BatchError::Invalid(format!(
                        "task {id} finished with different results in {} and in {} (or in the merged run): \
                         merge shards of one run, each task in one shard",
                        shard.display(),
                        out.display()
                    )));
                }
                continue;
            }
            for (a, b) in [
                (from.trajectory(id), merged.trajectory(id)),
                (from.artifacts(id), merged.artifacts(id)),
                (
                    shard.join("eval").join("logs").join(id),
                    out.join("eval").join("logs").join(id),
                ),
            ] {
                if a.exists() {
                    copy_tree(&a, &b)?;
                }
            }
            // The result last: its presence means the task is merged.
            copy_tree(&from.result(id), &merged.result(id))?;
            copied += 1;
        }
        graded |= out.join("eval").join("logs").join(id).exists();
    }
    let model_name = runs[0].model_name().unwrap_or("patchwright").to_string();
    merged.write_predictions(ids.iter().map(String::as_str), &model_name)?;
    merged.write_metrics(ids.iter().map(String::as_str))?;

    let mut summary = Summary::default();
    let mut reports: Vec<InstanceReport> = Vec::new();
    for id in &ids {
        if let Some(r) = merged.finished(id)? {
            summary.add(&r);
            summary.elapsed_s += r.elapsed_s;
        }
        if let Some(report) = grades::stored_report(&out.join("eval"), id) {
            reports.push(report);
        }
    }
    if graded {
        summary.resolved = Some(reports.iter().filter(|r| r.resolved).count());
        grades::write_summary(&out.join("eval"), &GradeSummary::new(&ids, &reports))?;
    }
    let mut record = runs[0].clone();
    record.command = std::env::args().collect();
    record.merged_from = Some(shards.to_vec());
    record.summary = Some(summary.clone());
    record.finished_at = Some(super::now());
    record.model_load = None;
    if let Some(selection) = record.selection.as_mut() {
        selection.shard = None;
        selection.instance_ids = ids;
    }
    record.write(&merged.run_json())?;
    Ok(Merged { summary, copied })
}
