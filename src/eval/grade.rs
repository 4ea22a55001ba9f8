//! Grading with SWE-bench's rules, and its report formats.
//!
//! A task is resolved iff every FAIL_TO_PASS and every PASS_TO_PASS test
//! passes (PASSED or XFAIL). A test missing from the log counts as failed,
//! and so does a skipped one. A log that reports no failure while the test
//! command exited non-zero is not trusted (a patch can print its own
//! "PASSED" lines): every test counts as failed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::log::TestStatus;

/// Tests of one list that passed and failed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcomes {
    pub success: Vec<String>,
    pub failure: Vec<String>,
}

/// SWE-bench's `tests_status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// Why a log was not trusted, if it was not.
pub fn distrust(map: &BTreeMap<String, TestStatus>, exit_code: Option<i32>) -> Option<String> {
    let code = exit_code?;
    (code != 0 && !map.is_empty() && !map.values().any(|s| s.is_failure())).then(|| {
        format!(
            "the test command exited with status {code} but its log reports no failure: the \
             log is not trusted and every test counts as failed"
        )
    })
}

/// Grades the two lists against the statuses parsed from the log.
pub fn grade(
    fail_to_pass: &[String],
    pass_to_pass: &[String],
    map: &BTreeMap<String, TestStatus>,
) -> TestsStatus {
    let split = |tests: &[String]| {
        let mut o = Outcomes::default();
        for t in tests {
            if map.get(t).is_some_and(|s| s.is_pass()) {
                o.success.push(t.clone());
            } else {
                o.failure.push(t.clone());
            }
        }
        o
    };
    TestsStatus {
        fail_to_pass: split(fail_to_pass),
        pass_to_pass: split(pass_to_pass),
        ..TestsStatus::default()
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
    /// The task's own test patch did not apply.
    TestPatchFailed,
    /// The tests ran past the time limit.
    Timeout,
    /// The sandbox refused or failed to run a command.
    Sandbox,
    /// Only tests the spec lists as needing the real network failed.
    NeedsNetwork,
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
    #[serde(rename = "patch_is_None")]
    pub patch_is_none: bool,
    pub patch_exists: bool,
    pub patch_successfully_applied: bool,
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
    pub test_seconds: f64,
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
            test_seconds: 0.0,
            total_seconds: 0.0,
        }
    }

    /// Graded (tests ran, or the patch did not apply).
    pub fn completed(&self) -> bool {
        self.error.is_none() && (self.tests_status.is_some() || !self.patch_successfully_applied)
    }
}

/// SWE-bench's run summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
            if let Some(e) = &r.error {
                s.error_ids.push(id.clone());
                s.incomplete_ids.push(id.clone());
                let kind = serde_json::to_value(e.kind)
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

#[cfg(test)]
mod tests {
    use super::*;
    use TestStatus::*;

    fn map(entries: &[(&str, TestStatus)]) -> BTreeMap<String, TestStatus> {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn grading_table() {
        // (F2P, P2P, log statuses, resolved, F2P failures, P2P failures)
        type Case = (
            &'static [&'static str],
            &'static [&'static str],
            Vec<(&'static str, TestStatus)>,
            bool,
            &'static [&'static str],
            &'static [&'static str],
        );
        let cases: Vec<Case> = vec![
            (
                &["a"],
                &["b"],
                vec![("a", Passed), ("b", Passed)],
                true,
                &[],
                &[],
            ),
            (
                &["a"],
                &["b"],
                vec![("a", Xfail), ("b", Passed)],
                true,
                &[],
                &[],
            ),
            (
                &["a"],
                &["b"],
                vec![("a", Failed), ("b", Passed)],
                false,
                &["a"],
                &[],
            ),
            (&["a"], &["b"], vec![("a", Passed)], false, &[], &["b"]),
            (
                &["a"],
                &["b"],
                vec![("a", Skipped), ("b", Passed)],
                false,
                &["a"],
                &[],
            ),
            (
                &["a"],
                &["b"],
                vec![("a", Passed), ("b", Skipped)],
                false,
                &[],
                &["b"],
            ),
            (
                &["a"],
                &["b"],
                vec![("a", Passed), ("b", Error)],
                false,
                &[],
                &["b"],
            ),
            (&["a"], &[], vec![], false, &["a"], &[]),
        ];
        for (f2p, p2p, statuses, resolved, f_fail, p_fail) in cases {
            let t = grade(&s(f2p), &s(p2p), &map(&statuses));
            assert_eq!(t.resolved(), resolved, "{statuses:?}");
            assert_eq!(t.fail_to_pass.failure, s(f_fail), "{statuses:?}");
            assert_eq!(t.pass_to_pass.failure, s(p_fail), "{statuses:?}");
        }
    }

    #[test]
    fn failures_of_network_tests_alone_are_singled_out() {
        let net = s(&["n1", "n2"]);
        let only = grade(
            &s(&["a"]),
            &s(&["n1"]),
            &map(&[("a", Passed), ("n1", Failed)]),
        );
        assert_eq!(only.only_network_failures(&net), Some(s(&["n1"])));
        let mixed = grade(
            &s(&["a"]),
            &s(&["n1"]),
            &map(&[("a", Failed), ("n1", Failed)]),
        );
        assert_eq!(mixed.only_network_failures(&net), None);
        let none = grade(
            &s(&["a"]),
            &s(&["n1"]),
            &map(&[("a", Passed), ("n1", Passed)]),
        );
        assert_eq!(none.only_network_failures(&net), None);
    }

    #[test]
    fn a_log_of_only_passes_from_a_failing_command_is_not_trusted() {
        let passes = map(&[("a", Passed)]);
        assert!(distrust(&passes, Some(1)).is_some());
        assert!(distrust(&passes, Some(0)).is_none());
        assert!(distrust(&map(&[("a", Passed), ("b", Failed)]), Some(1)).is_none());
        assert!(distrust(&BTreeMap::new(), Some(1)).is_none());
    }

    #[test]
    fn summary_counts_errors_apart_from_unresolved() -> Result<(), Box<dyn std::error::Error>> {
        let mut resolved = InstanceReport::new("r", Some("diff"));
        resolved.patch_successfully_applied = true;
        resolved.tests_status = Some(TestsStatus::default());
        resolved.resolved = true;
        let mut unresolved = InstanceReport::new("u", Some("diff"));
        unresolved.patch_successfully_applied = true;
        unresolved.tests_status = Some(TestsStatus::default());
        let not_applied = InstanceReport::new("n", Some("diff"));
        let mut infra = InstanceReport::new("e", Some("diff"));
        infra.error = Some(InfraError {
            kind: ErrorKind::Timeout,
            message: "ran past 1800 s".into(),
        });
        let empty = InstanceReport::new("m", Some(""));
        let reports = [resolved, unresolved, not_applied, infra, empty];
        let total = s(&["r", "u", "n", "e", "m", "missing"]);
        let sum = Summary::new(&total, &reports);
        assert_eq!(sum.total_instances, 6);
        assert_eq!(sum.submitted_ids, s(&["r", "u", "n", "e", "m"]));
        assert_eq!(sum.completed_ids, s(&["r", "u", "n"]));
        assert_eq!(sum.resolved_ids, s(&["r"]));
        assert_eq!(sum.unresolved_ids, s(&["u", "n"]));
        assert_eq!(sum.error_ids, s(&["e"]));
        assert_eq!(sum.empty_patch_ids, s(&["m"]));
        assert_eq!(sum.incomplete_ids, s(&["e", "m", "missing"]));
        assert_eq!(sum.errors_by_kind["timeout"], s(&["e"]));
        let json = serde_json::to_value(&sum)?;
        for field in [
            "total_instances",
            "submitted_instances",
            "completed_instances",
            "resolved_instances",
            "unresolved_instances",
            "empty_patch_instances",
            "error_instances",
        ] {
            assert!(json.get(field).is_some(), "{field}");
        }
        Ok(())
    }
}
