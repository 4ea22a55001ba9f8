//! Grading with SWE-bench's rules, and its report formats.
//!
//! As SWE-bench's `get_eval_tests_report` (PASS_AND_FAIL, the rule of
//! every Python repository) and `get_resolution_status`: a test of
//! FAIL_TO_PASS or PASS_TO_PASS that passed (PASSED or XFAIL) is a success;
//! one missing from the log, FAILED or ERROR is a failure; a SKIPPED one is
//! neither, and does not count. A task is resolved iff neither list has a
//! failure (SWE-bench: both success ratios are 1, and a list with no
//! counted test has ratio 1).
//!
//! patchwright's one addition (docs/grading.md): a log that reports no
//! failure while the test command exited non-zero is not trusted (a patch
//! can print its own "PASSED" lines), and every test then counts as
//! failed.

use std::collections::BTreeMap;

use crate::record::grade::{Outcomes, TestsStatus};

use crate::env::log::TestStatus;

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
            match map.get(t) {
                Some(s) if s.is_pass() => o.success.push(t.clone()),
                None => o.failure.push(t.clone()),
                Some(s) if s.is_failure() => o.failure.push(t.clone()),
                // Skipped: SWE-bench's `check_pass_and_fail` puts it in
                // neither list.
                Some(_) => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::grade::{ErrorKind, InfraError, InstanceReport, Summary};
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
            // A skipped test counts neither way (SWE-bench's
            // check_pass_and_fail), in either list.
            (
                &["a"],
                &["b"],
                vec![("a", Skipped), ("b", Passed)],
                true,
                &[],
                &[],
            ),
            (
                &["a"],
                &["b"],
                vec![("a", Passed), ("b", Skipped)],
                true,
                &[],
                &[],
            ),
            (
                &["a", "c"],
                &["b"],
                vec![("a", Skipped), ("b", Skipped), ("c", Failed)],
                false,
                &["c"],
                &[],
            ),
            (
                &["a"],
                &["b", "c"],
                vec![("a", Passed), ("b", Skipped)],
                false,
                &[],
                &["c"],
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

    /// A Django runner log where SWE-bench's rule and the one patchwright
    /// had before disagree: a PASS_TO_PASS test skipped for a missing
    /// optional dependency. SWE-bench resolves it; the old rule counted
    /// the skip as a failure. (pytest's `-rA` summary names no skipped
    /// test, so there, as in SWE-bench, a skip is a missing test.)
    #[test]
    fn a_skipped_pass_to_pass_test_does_not_count() {
        let log = "\
test_roundtrip (serializers.test_json.JsonTests) ... ok
test_yaml_dump (serializers.test_yaml.YamlTests) ... skipped 'No yaml library detected'
test_fixed (serializers.test_json.JsonTests) ... ok

----------------------------------------------------------------------
Ran 3 tests in 0.012s

OK (skipped=1)
";
        let statuses = crate::env::log::parse(crate::env::spec::LogFormat::Django, log);
        let skipped = "test_yaml_dump (serializers.test_yaml.YamlTests)";
        assert_eq!(statuses.get(skipped), Some(&Skipped), "{statuses:?}");
        let status = grade(
            &s(&["test_fixed (serializers.test_json.JsonTests)"]),
            &s(&["test_roundtrip (serializers.test_json.JsonTests)", skipped]),
            &statuses,
        );
        assert!(status.resolved(), "{status:?}");
        assert_eq!(
            status.pass_to_pass.success,
            s(&["test_roundtrip (serializers.test_json.JsonTests)"])
        );
        assert!(status.pass_to_pass.failure.is_empty(), "{status:?}");
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
        // As SWE-bench's make_run_report: an error is not incomplete, an
        // empty patch is neither completed nor an error, only a task with
        // no prediction is incomplete; a patch that did not apply is an
        // error.
        assert_eq!(sum.completed_ids, s(&["r", "u"]));
        assert_eq!(sum.resolved_ids, s(&["r"]));
        assert_eq!(sum.unresolved_ids, s(&["u"]));
        assert_eq!(sum.error_ids, s(&["n", "e"]));
        assert_eq!(sum.empty_patch_ids, s(&["m"]));
        assert_eq!(sum.incomplete_ids, s(&["missing"]));
        assert_eq!(sum.errors_by_kind["timeout"], s(&["e"]));
        assert_eq!(sum.errors_by_kind["patch_apply_failed"], s(&["n"]));
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
