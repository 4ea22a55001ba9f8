//! Snapshot of the default policy's bubblewrap argument list.
//!
//! The policy is built with fixed paths (no host inspection) so the expected
//! file is the same on every machine. To regenerate after an intended
//! change: `UPDATE_SNAPSHOTS=1 cargo test -p patchwright-sandbox --test snapshot`
//! and review the diff.

// A failed assumption in a test is the test failing: the workspace's
// unwrap/expect/panic lints (Cargo.toml) are for library code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use patchwright_sandbox::{
    bwrap_args, bwrap_args_with_etc, etc_layer_unfit, etc_mounts, flags_in, missing_flags,
    BwrapVersion, Mount, Policy, MINIMUM_BWRAP,
};

/// A bubblewrap 0.8 host (Debian 12): every option the sandbox can use.
const V08: BwrapVersion = BwrapVersion::new(0, 8, 0);
/// A bubblewrap 0.6 host (Ubuntu 22.04's 0.6.1).
const V061: BwrapVersion = BwrapVersion::new(0, 6, 1);

fn deterministic_policy() -> Policy {
    // The layout of a merged-/usr Debian 12 host.
    let mut mounts = vec![
        Mount::RoBind {
            src: "/usr".into(),
            dest: "/usr".into(),
        },
        Mount::Symlink {
            target: "usr/bin".into(),
            link: "/bin".into(),
        },
        Mount::Symlink {
            target: "usr/sbin".into(),
            link: "/sbin".into(),
        },
        Mount::Symlink {
            target: "usr/lib".into(),
            link: "/lib".into(),
        },
        Mount::Symlink {
            target: "usr/lib64".into(),
            link: "/lib64".into(),
        },
    ];
    mounts.extend(etc_mounts());
    Policy::new("/work/repo", mounts)
}

#[test]
fn default_policy_argv_matches_snapshot() {
    let argv = bwrap_args(
        &deterministic_policy(),
        V08,
        &["python".to_string(), "-m".to_string(), "pytest".to_string()],
    );
    let actual = argv.join("\n") + "\n";
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/default_policy.argv");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &actual).expect("write snapshot");
    }
    let expected = std::fs::read_to_string(&path).expect("snapshot file exists");
    assert_eq!(
        actual,
        expected,
        "bwrap argv changed; see {}",
        path.display()
    );
}

/// The argv chosen for a bubblewrap 0.6 host: the 0.8 one without
/// `--disable-userns` (0.8) and `--size` (0.7), the seccomp filter still
/// passed; every option it keeps is in 0.6.0 already.
#[test]
fn bwrap06_argv_matches_snapshot() {
    let policy = deterministic_policy();
    let cmd = ["python".to_string(), "-m".to_string(), "pytest".to_string()];
    let argv = bwrap_args(&policy, V061, &cmd);
    let actual = argv.join("\n") + "\n";
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/bwrap06_policy.argv");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &actual).expect("write snapshot");
    }
    let expected = std::fs::read_to_string(&path).expect("snapshot file exists");
    assert_eq!(
        actual,
        expected,
        "bwrap argv changed; see {}",
        path.display()
    );
    let flags = flags_in(&argv).expect("known options");
    assert_eq!(missing_flags(MINIMUM_BWRAP, &flags), vec![]);
    let new = bwrap_args(&policy, V08, &cmd);
    let mut want = new.clone();
    want.retain(|a| a != "--disable-userns");
    // Drop each `--size N` pair.
    let mut i = 0;
    while i < want.len() {
        if want[i] == "--size" {
            want.drain(i..i + 2);
        } else {
            i += 1;
        }
    }
    assert_eq!(argv, want);
    assert_eq!(new.len() - argv.len(), 1 + 2 * 2);
    for a in [&argv, &new] {
        let at = a.iter().position(|x| x == "--seccomp").expect("--seccomp");
        assert_eq!(a[at + 1], "7");
    }
    // 0.7 has --size but not --disable-userns.
    let v07 = bwrap_args(&policy, BwrapVersion::new(0, 7, 0), &cmd);
    assert!(v07.iter().any(|x| x == "--size"));
    assert!(!v07.iter().any(|x| x == "--disable-userns"));
}

/// The fast path's argv: the same as the default one except that the
/// thirteen /etc binds and the three generated-file binds are one
/// read-only bind of the prepared layer at /etc (see
/// `tests/snapshots/prepared_etc.argv`).
#[test]
fn prepared_etc_argv_matches_snapshot() {
    let policy = deterministic_policy();
    assert_eq!(etc_layer_unfit(&policy), None);
    let argv = bwrap_args_with_etc(
        &policy,
        V08,
        Path::new("/tmp/patchwright-sandbox-0/etc-1-0"),
        &["python".to_string(), "-m".to_string(), "pytest".to_string()],
    );
    let actual = argv.join("\n") + "\n";
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/prepared_etc.argv");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &actual).expect("write snapshot");
    }
    let expected = std::fs::read_to_string(&path).expect("snapshot file exists");
    assert_eq!(
        actual,
        expected,
        "bwrap argv changed; see {}",
        path.display()
    );
    // Every option is one the preflight knows, and it is the classic argv
    // with the /etc part swapped.
    assert!(flags_in(&argv).is_ok());
    let classic = bwrap_args(
        &policy,
        V08,
        &["python".to_string(), "-m".to_string(), "pytest".to_string()],
    );
    let strip = |a: &[String]| -> Vec<String> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < a.len() {
            let etc = i + 2 < a.len() && a[i + 2].starts_with("/etc");
            if etc
                && matches!(
                    a[i].as_str(),
                    "--ro-bind" | "--ro-bind-try" | "--ro-bind-data"
                )
            {
                i += 3;
            } else {
                out.push(a[i].clone());
                i += 1;
            }
        }
        out
    };
    assert_eq!(strip(&argv), strip(&classic));
    assert_eq!(
        classic.len() - argv.len(),
        3 * (patchwright_sandbox::ETC_FILES.len() + 3 - 1)
    );
}

#[test]
fn the_etc_layer_is_refused_where_a_bind_needs_a_mount_point_in_etc() {
    type Case = (&'static str, fn(&mut Policy), Option<&'static str>);
    let cases: [Case; 5] = [
        ("default", |_| {}, None),
        (
            "extra bind inside /etc",
            |p| p.extra_ro_binds.push("/etc/ssl/certs".into()),
            Some("/etc/ssl/certs is bound inside /etc"),
        ),
        (
            "writable inside /etc",
            |p| p.writable.push("/etc/pip".into()),
            Some("/etc/pip is bound inside /etc"),
        ),
        (
            "system mount at /etc",
            |p| {
                p.system_mounts.push(Mount::RoBind {
                    src: "/srv/etc".into(),
                    dest: "/etc".into(),
                })
            },
            Some("the system mount at /etc covers /etc itself"),
        ),
        (
            "extra bind beside /etc",
            |p| p.extra_ro_binds.push("/etcetera".into()),
            None,
        ),
    ];
    for (name, change, want) in cases {
        let mut p = deterministic_policy();
        change(&mut p);
        assert_eq!(etc_layer_unfit(&p).as_deref(), want, "{name}");
    }
}

#[test]
fn argv_is_deterministic_and_never_binds_root_or_secrets() {
    let policy = deterministic_policy();
    let cmd = ["true".to_string()];
    let a = bwrap_args(&policy, V08, &cmd);
    assert_eq!(a, bwrap_args(&policy, V08, &cmd));
    let pairs: Vec<(&str, &str)> = a
        .windows(2)
        .map(|w| (w[0].as_str(), w[1].as_str()))
        .collect();
    assert!(!pairs.iter().any(|(f, s)| f.contains("bind") && *s == "/"));
    assert!(!a
        .iter()
        .any(|x| x.contains("shadow") || x == "/root" || x == "/home"));
    assert!(!a
        .iter()
        .any(|x| x == "/etc/ssl" || x.contains("ssl/private")));
    // The .git re-bind comes after the read-write worktree bind.
    let rw = a.iter().position(|x| x == "--bind").expect("rw bind");
    let git = a
        .iter()
        .position(|x| x == "/work/repo/.git")
        .expect(".git bind");
    assert!(git > rw);
    assert_eq!(a[git - 1], "--ro-bind-try");
    // The command comes last, after "--".
    assert_eq!(&a[a.len() - 2..], &["--".to_string(), "true".to_string()]);
}

#[test]
fn policy_round_trips_through_json() {
    let policy = deterministic_policy();
    let json = serde_json::to_string(&policy).expect("serialise");
    let back: Policy = serde_json::from_str(&json).expect("deserialise");
    assert_eq!(policy, back);
}

#[test]
fn validate_rejects_exposing_the_host() {
    let mut p = deterministic_policy();
    p.extra_ro_binds.push("/".into());
    assert!(p.validate().is_err());
    let mut p = deterministic_policy();
    p.extra_ro_binds.push("/etc".into());
    let err = p.validate().expect_err("binding /etc exposes /etc/shadow");
    assert!(err.to_string().contains("/etc/shadow"), "{err}");
    let mut p = deterministic_policy();
    p.worktree = "/".into();
    assert!(p.validate().is_err());
    let mut p = deterministic_policy();
    p.protected.push("../escape".into());
    assert!(p.validate().is_err());
    assert!(deterministic_policy().validate().is_ok());
}

#[test]
fn network_and_writable_binds_are_opt_in() {
    let mut policy = deterministic_policy();
    let a = bwrap_args(&policy, V08, &["true".to_string()]);
    assert!(!a.iter().any(|x| x == "--share-net"));
    policy.network = true;
    policy.writable.push("/envs/flask".into());
    let a = bwrap_args(&policy, V08, &["true".to_string()]);
    let unshare = a
        .iter()
        .position(|x| x == "--unshare-all")
        .expect("unshare");
    assert_eq!(a[unshare + 1], "--share-net");
    let binds: Vec<&[String]> = a.windows(3).filter(|w| w[0] == "--bind").collect();
    assert_eq!(
        binds,
        vec![
            &[
                "--bind".to_string(),
                "/envs/flask".into(),
                "/envs/flask".into()
            ][..],
            &[
                "--bind".to_string(),
                "/work/repo".into(),
                "/work/repo".into()
            ][..],
        ]
    );
}

#[test]
fn local_hosts_resolve_to_loopback_and_are_validated() {
    let mut policy = deterministic_policy();
    assert_eq!(policy.hosts_content(), patchwright_sandbox::HOSTS_CONTENT);
    policy.local_hosts = vec!["httpbin.org".into(), "www.google.co.uk".into()];
    assert!(policy
        .hosts_content()
        .ends_with("127.0.0.1\thttpbin.org www.google.co.uk\n"));
    assert!(policy.validate().is_ok());
    policy.local_hosts.push("evil\n1.2.3.4 pypi.org".into());
    let e = policy.validate().unwrap_err().to_string();
    assert!(e.contains("is not a host name"), "{e}");
}
