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
use crate::record::metrics::Summary as MetricsSummary;
use crate::record::run::RunRecord;
use crate::record::write_atomic;

/// What a merge produced.
#[derive(Debug, Clone)]
pub struct Merged {
    pub summary: Summary,
    /// The stage metrics over the merged run's tasks (`metrics.json`).
    pub metrics: MetricsSummary,
    /// Tasks copied from the shards by this merge (not already there).
    pub copied: usize,
}

/// Copies `from` (a file or directory) to `to`, replacing what is there.
fn copy_tree(from: &Path, to: &Path) -> Result<(), BatchError> {
    let io = BatchError::io;
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
    let mut ids: Vec<String> = Vec::new();
    let old = match merged.record() {
        Ok(Some(old)) => old.instance_ids().to_vec(),
        _ => Vec::new(),
    };
    match dealt_order(&runs) {
        // Shards of one selection: the order one batch of it runs them in,
        // then what an earlier merge held besides.
        Some(order) => ids.extend(order.into_iter().chain(old)),
        // Otherwise each shard's selection in turn.
        None => ids.extend(
            old.into_iter()
                .chain(runs.iter().flat_map(|r| r.instance_ids().iter().cloned())),
        ),
    }
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(id.clone()));
    let mut copied = 0;
    // Graded shards (`--evaluate`) have a summary, even when no task had a
    // patch to run; its empty patches have no report of their own.
    let mut graded = false;
    let mut empty: Vec<InstanceReport> = Vec::new();
    for shard in shards {
        if let Some(s) = grades::read_summary(&shard.join("eval"))? {
            graded = true;
            empty.extend(s.empty_patch_ids.iter().map(|id| {
                let patch = s.submitted_ids.contains(id).then_some("");
                InstanceReport::new(id, patch)
            }));
        }
    }
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
    let metrics = merged.write_metrics(ids.iter().map(String::as_str))?;

    let mut summary = Summary::default();
    let mut reports: Vec<InstanceReport> = Vec::new();
    for id in &ids {
        if let Some(r) = merged.finished(id)? {
            summary.add(&r);
            summary.elapsed_s += r.elapsed_s;
        }
        match grades::stored_report(&out.join("eval"), id) {
            Some(report) => reports.push(report),
            None => reports.extend(empty.iter().find(|r| &r.instance_id == id).cloned()),
        }
    }
    if graded {
        summary.resolved = Some(reports.iter().filter(|r| r.resolved).count());
        let eval = out.join("eval");
        std::fs::create_dir_all(&eval).map_err(BatchError::io("create", &eval))?;
        grades::write_summary(&eval, &GradeSummary::new(&ids, &reports))?;
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
    Ok(Merged {
        summary,
        metrics,
        copied,
    })
}

/// The tasks of `runs` in the order one batch of their whole selection
/// runs them, when they are shards K/N of one selection (the same filter
/// and slice, the same N, each K at most once): `--shard` deals task i to
/// shard `i mod N + 1`, so shard K's j-th task was the selection's
/// `j·N + K − 1`-th. `None` for any other set of runs.
fn dealt_order(runs: &[RunRecord]) -> Option<Vec<String>> {
    let first = runs.first()?.selection.as_ref()?;
    let count = first.shard?.count;
    let mut indices = std::collections::HashSet::new();
    let mut dealt: Vec<(usize, String)> = Vec::new();
    for run in runs {
        let s = run.selection.as_ref()?;
        let shard = s.shard?;
        if shard.count != count
            || s.filter != first.filter
            || s.slice != first.slice
            || !indices.insert(shard.index)
        {
            return None;
        }
        for (j, id) in s.instance_ids.iter().enumerate() {
            dealt.push((j * count + shard.index - 1, id.clone()));
        }
    }
    dealt.sort();
    Some(dealt.into_iter().map(|(_, id)| id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::run::{SelectionInfo, ShardInfo, SliceInfo};

    fn shard(index: usize, count: usize, ids: &[&str], filter: Option<&str>) -> RunRecord {
        RunRecord {
            selection: Some(SelectionInfo {
                filter: filter.map(String::from),
                instance_ids: ids.iter().map(|s| s.to_string()).collect(),
                shard: Some(ShardInfo { index, count }),
                slice: Some(SliceInfo {
                    start: 0,
                    end: None,
                }),
            }),
            ..RunRecord::default()
        }
    }

    /// A shard's run directory: its run.json (shard `index` of 2 over
    /// `ids`), a result per task, and with `graded` the summary of
    /// `--evaluate` over tasks that all had empty patches.
    fn shard_dir(
        dir: &Path,
        index: usize,
        ids: &[&str],
        graded: bool,
    ) -> Result<PathBuf, Box<dyn std::error::Error>> {
        let root = dir.join(format!("{index}-of-2"));
        let mut run = shard(index, 2, ids, None);
        run.identity = serde_json::json!({"settings": {"x": 1}});
        std::fs::create_dir_all(root.join("results"))?;
        run.write(&root.join("run.json"))?;
        for id in ids {
            std::fs::write(
                root.join("results").join(format!("{id}.json")),
                format!("{{\"instance_id\": \"{id}\", \"status\": \"no_patch\"}}"),
            )?;
        }
        if graded {
            let reports: Vec<InstanceReport> = ids
                .iter()
                .map(|id| InstanceReport::new(id, Some("")))
                .collect();
            let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
            std::fs::create_dir_all(root.join("eval"))?;
            grades::write_summary(&root.join("eval"), &GradeSummary::new(&ids, &reports))?;
        }
        Ok(root)
    }

    #[test]
    fn graded_shards_of_empty_patches_merge_into_the_summary_one_batch_writes(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let a = shard_dir(dir.path(), 1, &["a", "c"], true)?;
        let b = shard_dir(dir.path(), 2, &["b"], true)?;
        let out = dir.path().join("merged");
        let merged = merge(&[b, a], &out)?;
        assert_eq!(merged.summary.resolved, Some(0));
        let all = ["a", "b", "c"].map(String::from).to_vec();
        let reports: Vec<InstanceReport> = all
            .iter()
            .map(|id| InstanceReport::new(id, Some("")))
            .collect();
        assert_eq!(
            grades::read_summary(&out.join("eval"))?,
            Some(GradeSummary::new(&all, &reports))
        );
        // Shards run without --evaluate: no grading summary.
        let plain = tempfile::tempdir()?;
        let a = shard_dir(plain.path(), 1, &["a"], false)?;
        let out = plain.path().join("merged");
        assert_eq!(merge(&[a], &out)?.summary.resolved, None);
        assert_eq!(grades::read_summary(&out.join("eval"))?, None);
        Ok(())
    }

    #[test]
    fn shards_of_one_selection_merge_in_the_order_they_were_dealt() {
        type Case<'a> = (&'a str, Vec<RunRecord>, Option<Vec<&'a str>>);
        let cases: [Case<'_>; 5] = [
            (
                "three shards of seven, given out of order",
                vec![
                    shard(2, 3, &["b", "e"], None),
                    shard(1, 3, &["a", "d", "g"], None),
                    shard(3, 3, &["c", "f"], None),
                ],
                Some(vec!["a", "b", "c", "d", "e", "f", "g"]),
            ),
            (
                "a shard missing: the others keep their places",
                vec![
                    shard(3, 3, &["c", "f"], None),
                    shard(1, 3, &["a", "d", "g"], None),
                ],
                Some(vec!["a", "c", "d", "f", "g"]),
            ),
            (
                "the same shard twice",
                vec![shard(1, 2, &["a"], None), shard(1, 2, &["a"], None)],
                None,
            ),
            (
                "shards of different counts",
                vec![shard(1, 2, &["a"], None), shard(2, 3, &["b"], None)],
                None,
            ),
            (
                "shards of different filters",
                vec![shard(1, 2, &["a"], Some("x")), shard(2, 2, &["b"], None)],
                None,
            ),
        ];
        for (case, runs, want) in cases {
            let want = want.map(|w| w.into_iter().map(String::from).collect::<Vec<_>>());
            assert_eq!(dealt_order(&runs), want, "{case}");
        }
        let unsharded = RunRecord {
            selection: Some(SelectionInfo::default()),
            ..RunRecord::default()
        };
        assert_eq!(dealt_order(&[unsharded]), None, "a run that is no shard");
    }
}
