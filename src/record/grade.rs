//! An eval directory's files, in SWE-bench's report formats:
//! `logs/<id>/report.json` (`{"<id>": InstanceReport}`) and the summary
//! `report.json`. Grading itself is `eval::grade`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::RecordError;

/// Tests of one list that passed and failed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Outcomes {
    pub success: Vec<String>,
    pub failure: Vec<String>,
}

/// SWE-bench's `tests_status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TestsStatus {
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Outcomes,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Outcomes,
    #[serde(rename = "FAIL_TO_FAIL")]
    pub fail_to_fail: Outcomes,
    #[serde(rename = "PASS_TO_FAIL")]
    pub pass_to_fail: Outcomes,
}

impl TestsStatus {
    pub fn resolved(&self) -> bool {
        self.fail_to_pass.failure.is_empty() && self.pass_to_pass.failure.is_empty()
    }

    /// The failing tests, when there are some and every one of them is in
    /// `network_tests`.
    pub fn only_network_failures(&self, network_tests: &[String]) -> Option<Vec<String>> {
        let failures: Vec<String> = self
            .fail_to_pass
            .failure
            .iter()
            .chain(&self.pass_to_pass.failure)
            .cloned()
            .collect();
        (!failures.is_empty() && failures.iter().all(|t| network_tests.contains(t)))
            .then_some(failures)
    }
}

/// What kept a task from being graded: never counted as unresolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// No spec, no interpreter, or the environment did not build.
    EnvironmentMissing,
    /// The repository or its base commit is not in `--repos`.
    RepositoryMissing,
    /// The repository did not install at its base commit.
    InstallFailed,
    /// The model patch applied neither with `git apply`, `git apply
    /// --reject` nor `patch --fuzz=5` (SWE-bench: `APPLY_PATCH_FAIL`, an
    /// error, not an unresolved task).
    PatchApplyFailed,
    /// The task's own test patch did not apply.
    TestPatchFailed,
    /// The tests ran past the time limit.
    Timeout,
    /// The sandbox refused or failed to run a command.
    Sandbox,
    /// Only tests the spec lists as needing the real network failed.
    NeedsNetwork,
    /// The sandbox's tier cannot serve the task (the WASI tier: a Python
    /// older than it serves, an install or step that is not Python); the
    /// message says why. Nothing was run.
    UnsupportedInTier,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfraError {
    pub kind: ErrorKind,
    pub message: String,
}

/// One task's report: SWE-bench's fields, then patchwright's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceReport {
    pub instance_id: String,
    #[serde(rename = "patch_is_None", default)]
    pub patch_is_none: bool,
    #[serde(default)]
    pub patch_exists: bool,
    #[serde(default)]
    pub patch_successfully_applied: bool,
    #[serde(default)]
    pub resolved: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests_status: Option<TestsStatus>,
    /// How the model patch applied: `git apply`, `git apply --reject` or
    /// `patch --fuzz=5`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_with: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<InfraError>,
    /// Set when the log was not trusted (see [`distrust`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untrusted_log: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_exit_code: Option<i32>,
    /// The patch applied but the repository did not install with it: the
    /// tests were not run (they would see the base install's copy), and
    /// the task is unresolved.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub patched_install_failed: bool,
    #[serde(default)]
    pub test_seconds: f64,
    #[serde(default)]
    pub total_seconds: f64,
}

impl InstanceReport {
    pub fn new(instance_id: &str, patch: Option<&str>) -> InstanceReport {
        InstanceReport {
            instance_id: instance_id.to_string(),
            patch_is_none: patch.is_none(),
            patch_exists: patch.is_some_and(|p| !p.trim().is_empty()),
            patch_successfully_applied: false,
            resolved: false,
            tests_status: None,
            applied_with: None,
            error: None,
            untrusted_log: None,
            test_exit_code: None,
            patched_install_failed: false,
            test_seconds: 0.0,
            total_seconds: 0.0,
        }
    }

    /// Graded: the tests ran, or the patch applied and broke the install.
    pub fn completed(&self) -> bool {
        self.error().is_none() && (self.tests_status.is_some() || self.patched_install_failed)
    }

    /// What kept the task from being graded. Reports written before a
    /// patch that did not apply was an error say so only by
    /// `patch_successfully_applied`: they read as [`ErrorKind::PatchApplyFailed`].
    pub fn error(&self) -> Option<ErrorKind> {
        match &self.error {
            Some(e) => Some(e.kind),
            None if self.patch_exists
                && !self.patch_successfully_applied
                && self.tests_status.is_none() =>
            {
                Some(ErrorKind::PatchApplyFailed)
            }
            None => None,
        }
    }
}

/// SWE-bench's run summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    pub total_instances: usize,
    pub submitted_instances: usize,
    pub completed_instances: usize,
    pub resolved_instances: usize,
    pub unresolved_instances: usize,
    pub empty_patch_instances: usize,
    pub error_instances: usize,
    pub completed_ids: Vec<String>,
    pub incomplete_ids: Vec<String>,
    pub empty_patch_ids: Vec<String>,
    pub submitted_ids: Vec<String>,
    pub resolved_ids: Vec<String>,
    pub unresolved_ids: Vec<String>,
    pub error_ids: Vec<String>,
    /// Error ids by kind (patchwright's addition).
    pub errors_by_kind: BTreeMap<String, Vec<String>>,
    pub schema_version: u32,
}

impl Summary {
    /// Summarises `reports` over the `total` ids of the selection.
    pub fn new(total: &[String], reports: &[InstanceReport]) -> Summary {
        let by_id: BTreeMap<&str, &InstanceReport> = reports
            .iter()
            .map(|r| (r.instance_id.as_str(), r))
            .collect();
        let mut s = Summary {
            total_instances: total.len(),
            schema_version: 2,
            ..Summary::default()
        };
        for id in total {
            let Some(r) = by_id.get(id.as_str()) else {
                s.incomplete_ids.push(id.clone());
                continue;
            };
            if !r.patch_is_none {
                s.submitted_ids.push(id.clone());
            }
            if !r.patch_exists {
                s.empty_patch_ids.push(id.clone());
            }
            if !r.patch_exists && r.error.is_none() && r.tests_status.is_none() {
                // SWE-bench: an empty patch is not run, and is neither
                // completed nor an error (`--empty` runs it: completed).
                continue;
            }
            if let Some(kind) = r.error() {
                s.error_ids.push(id.clone());
                let kind = serde_json::to_value(kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                s.errors_by_kind.entry(kind).or_default().push(id.clone());
            } else if r.completed() && (r.patch_exists || r.tests_status.is_some()) {
                s.completed_ids.push(id.clone());
                if r.resolved {
                    s.resolved_ids.push(id.clone());
                } else {
                    s.unresolved_ids.push(id.clone());
                }
            } else {
                s.incomplete_ids.push(id.clone());
            }
        }
        s.submitted_instances = s.submitted_ids.len();
        s.completed_instances = s.completed_ids.len();
        s.resolved_instances = s.resolved_ids.len();
        s.unresolved_instances = s.unresolved_ids.len();
        s.empty_patch_instances = s.empty_patch_ids.len();
        s.error_instances = s.error_ids.len();
        s
    }
}

/// `out/logs/<id>/report.json`.
pub fn instance_report_path(out: &Path, id: &str) -> PathBuf {
    out.join("logs").join(id).join("report.json")
}

/// Writes `report` to `logdir/report.json` in SWE-bench's shape,
/// `{"<id>": report}`.
pub fn write_instance_report(logdir: &Path, report: &InstanceReport) -> Result<(), RecordError> {
    let keyed: BTreeMap<&str, &InstanceReport> =
        BTreeMap::from([(report.instance_id.as_str(), report)]);
    super::write_json(&logdir.join("report.json"), &keyed)
}

/// Reads an instance report file: SWE-bench's `{"<id>": {...}}`, or a bare
/// report.
pub fn read_instance_report(path: &Path) -> Result<InstanceReport, RecordError> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Bare(Box<InstanceReport>),
        Keyed(BTreeMap<String, InstanceReport>),
    }
    match super::read_json::<Stored>(path)? {
        Stored::Bare(r) => Ok(*r),
        Stored::Keyed(map) => map
            .into_values()
            .next()
            .ok_or_else(|| RecordError::Invalid {
                path: path.to_path_buf(),
                problem: "the report holds no task".into(),
            }),
    }
}

/// The stored report of task `id` under the eval directory `out`: `None`
/// when it was not graded, or its report cannot be read.
pub fn stored_report(out: &Path, id: &str) -> Option<InstanceReport> {
    let path = instance_report_path(out, id);
    path.is_file()
        .then(|| read_instance_report(&path).ok())
        .flatten()
        .filter(|r| r.instance_id == id)
}

/// Reads the summary `out/report.json`; `None` when there is none.
pub fn read_summary(out: &Path) -> Result<Option<Summary>, RecordError> {
    super::read_json_if_exists(&out.join("report.json"))
}

/// Writes the summary `out/report.json`.
pub fn write_summary(out: &Path, summary: &Summary) -> Result<(), RecordError> {
    super::write_json(&out.join("report.json"), summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_completed_when_graded_whatever_the_verdict() {
        let applied = |r: &mut InstanceReport| r.patch_successfully_applied = true;
        type Case = (&'static str, fn(&mut InstanceReport), bool);
        let cases: [Case; 4] = [
            ("the patch did not apply", |_| {}, false),
            ("applied, tests not run yet", applied, false),
            (
                "applied, the install with it failed",
                |r| {
                    r.patch_successfully_applied = true;
                    r.patched_install_failed = true;
                },
                true,
            ),
            (
                "applied, tests ran",
                |r| {
                    r.patch_successfully_applied = true;
                    r.tests_status = Some(TestsStatus::default());
                },
                true,
            ),
        ];
        for (what, set, completed) in cases {
            let mut r = InstanceReport::new("x__y-1", Some("diff"));
            set(&mut r);
            assert_eq!(r.completed(), completed, "{what}");
            assert!(!r.resolved, "{what}");
        }
    }

    #[test]
    fn a_patch_that_did_not_apply_is_an_error() {
        let mut now = InstanceReport::new("x__y-1", Some("diff"));
        now.error = Some(InfraError {
            kind: ErrorKind::PatchApplyFailed,
            message: "did not apply".into(),
        });
        // As a report written before this was an error reads.
        let before = InstanceReport::new("x__y-2", Some("diff"));
        let empty = InstanceReport::new("x__y-3", Some(""));
        for (r, error) in [
            (&now, Some(ErrorKind::PatchApplyFailed)),
            (&before, Some(ErrorKind::PatchApplyFailed)),
            (&empty, None),
        ] {
            assert_eq!(r.error(), error, "{}", r.instance_id);
            assert!(!r.completed(), "{}", r.instance_id);
        }
        let total = ["x__y-1", "x__y-2", "x__y-3"].map(String::from);
        let sum = Summary::new(&total, &[now, before, empty]);
        assert_eq!(sum.error_ids, ["x__y-1", "x__y-2"]);
        assert_eq!(
            sum.errors_by_kind["patch_apply_failed"],
            ["x__y-1", "x__y-2"]
        );
        assert_eq!(sum.empty_patch_ids, ["x__y-3"]);
        assert!(sum.completed_ids.is_empty() && sum.unresolved_ids.is_empty());
        assert!(sum.incomplete_ids.is_empty(), "{sum:?}");
    }
}
