//! The host check made once before any work: is bubblewrap there, is it new
//! enough for every flag the policy passes it, and can it build the sandbox
//! (user namespaces)? A program that runs many sandboxed commands calls
//! [`preflight`] first, so an unfit host is refused with one message saying
//! what was found and what to install, instead of every command failing.
//!
//! The flags checked are not a hand-kept list: they are read from
//! [`bwrap_args`] of the policy given, and looked up in
//! [`crate::BWRAP_FLAGS`], the version that introduced each.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use crate::bwrap::{
    bwrap_version, flags_in, missing_flags, read_userns_sysctls, BwrapFlag, BwrapVersion,
    PreflightError, MINIMUM_BWRAP, PROBE_COMMAND, PROBE_TIMEOUT_MS,
};
use crate::error::SandboxError;
use crate::policy::{bwrap_args, Policy};

/// What the preflight found on a host that can run the sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct HostReport {
    /// The tier checked.
    pub tier: crate::TierKind,
    /// The bubblewrap binary; for the WASI tier, its python.wasm.
    pub bwrap: PathBuf,
    /// Its version (0.0.0 for the WASI tier).
    pub version: BwrapVersion,
    /// The options the policy uses, all supported (none for the WASI
    /// tier).
    pub flags: Vec<BwrapFlag>,
    /// Why the probe ran without a per-run cgroup (memory and process caps
    /// fall back to rlimits), or `None` when it had one.
    pub cgroup_unavailable: Option<String>,
    /// How long the probe took, in seconds.
    pub probe_secs: f64,
}

/// Checks once that `policy` can run on this host, before any work:
/// bubblewrap exists at `policy.bwrap` and is executable; its version has
/// every option [`bwrap_args`] passes for this policy ([`BWRAP_FLAGS`]);
/// and it can build this sandbox: [`PROBE_COMMAND`] is run under the policy
/// (its timeout capped at [`PROBE_TIMEOUT_MS`]), and a failure names what
/// bubblewrap printed and the host's user-namespace settings.
///
/// A [`crate::Tier::Wasi`] policy is checked by loading its runtime
/// (compiling and caching the module the first time) and running
/// `python -c pass` in it.
pub fn preflight(policy: &Policy) -> Result<HostReport, PreflightError> {
    if let crate::Tier::Wasi(runtime) = &policy.tier {
        let failed = |detail: String| PreflightError::WasiUnavailable {
            path: runtime.python_wasm.clone(),
            detail,
        };
        let outcome = crate::wasi::probe(policy, runtime, PROBE_TIMEOUT_MS)
            .map_err(|e| failed(e.to_string()))?;
        if !outcome.success() {
            return Err(failed(format!(
                "exit {:?}, signal {:?}, timed out {}: {}",
                outcome.exit_code,
                outcome.signal.map(|s| s.name),
                outcome.timed_out,
                outcome.output.trim()
            )));
        }
        return Ok(HostReport {
            tier: crate::TierKind::Wasi,
            bwrap: runtime.python_wasm.clone(),
            version: BwrapVersion::new(0, 0, 0),
            flags: Vec::new(),
            cgroup_unavailable: outcome.limits.cgroup_unavailable,
            probe_secs: outcome.wall_time_secs,
        });
    }
    let path = &policy.bwrap;
    match std::fs::metadata(path) {
        Err(_) => return Err(PreflightError::Missing { path: path.clone() }),
        Ok(m) if !m.is_file() || m.permissions().mode() & 0o111 == 0 => {
            return Err(PreflightError::NotExecutable { path: path.clone() })
        }
        Ok(_) => {}
    }
    let version = bwrap_version(path)?;
    let flags = flags_in(&bwrap_args(policy, version, &[PROBE_COMMAND.to_string()]))?;
    let missing = missing_flags(version, &flags);
    if version < MINIMUM_BWRAP || !missing.is_empty() {
        let needs = missing
            .first()
            .map_or(MINIMUM_BWRAP, |f| f.since.max(MINIMUM_BWRAP));
        return Err(PreflightError::TooOld {
            path: path.clone(),
            found: version,
            needs,
            flags: missing,
        });
    }
    let mut probe = policy.clone();
    probe.limits.timeout_ms = probe.limits.timeout_ms.min(PROBE_TIMEOUT_MS);
    let outcome = match crate::run::run(&probe, &[PROBE_COMMAND.to_string()]) {
        Ok(o) => o,
        Err(SandboxError::SetupFailed { message }) => {
            return Err(PreflightError::NamespacesUnavailable {
                path: path.clone(),
                detail: message,
                sysctls: read_userns_sysctls(),
            })
        }
        Err(source) => return Err(PreflightError::Probe { source }),
    };
    if !outcome.success() {
        return Err(PreflightError::ProbeFailed {
            path: path.clone(),
            detail: format!(
                "exit {:?}, signal {:?}, timed out {}: {}",
                outcome.exit_code,
                outcome.signal.map(|s| s.name),
                outcome.timed_out,
                outcome.output.trim()
            ),
        });
    }
    Ok(HostReport {
        tier: crate::TierKind::Bubblewrap,
        bwrap: path.clone(),
        version,
        flags,
        cgroup_unavailable: outcome.limits.cgroup_unavailable,
        probe_secs: outcome.wall_time_secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bwrap::minimum_version;
    use crate::bwrap::tests::{names, v};
    use std::path::Path;

    /// A fake bubblewrap: a shell script printing `version` for
    /// `--version`, and doing `run` otherwise.
    fn fake_bwrap(dir: &Path, version: &str, run: &str) -> PathBuf {
        let path = dir.join("bwrap");
        std::fs::write(
            &path,
            format!("#!/bin/sh\nif [ \"$1\" = --version ]; then {version}; exit 0; fi\n{run}\n"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn policy_with(bwrap: &Path, worktree: &Path) -> Policy {
        let mut p = Policy::for_worktree(worktree, &crate::Host::default()).unwrap();
        p.bwrap = bwrap.to_path_buf();
        p
    }

    #[test]
    fn an_unfit_bubblewrap_is_refused_with_what_was_found() {
        let dir = tempfile::tempdir().unwrap();
        let wt = tempfile::tempdir().unwrap();
        let made = std::cell::Cell::new(0);
        let fake = |version: &str, run: &str| {
            made.set(made.get() + 1);
            let sub = dir.path().join(format!("fake{}", made.get()));
            std::fs::create_dir(&sub).unwrap();
            fake_bwrap(&sub, version, run)
        };
        let missing = dir.path().join("nowhere/bwrap");
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "").unwrap();
        let cases: Vec<(PathBuf, &str)> = vec![
            (missing.clone(), "Missing"),
            (plain.clone(), "NotExecutable"),
            (dir.path().to_path_buf(), "NotExecutable"),
            (fake("echo bubblewrap 0.5.0", "exit 0"), "TooOld"),
            (fake("echo nonsense", "exit 0"), "Unparsable"),
            (fake("exit 3", "exit 0"), "VersionFailed"),
            (
                fake(
                    "echo bubblewrap 0.8.0",
                    "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1",
                ),
                "NamespacesUnavailable",
            ),
        ];
        for (bwrap, want) in cases {
            let err = preflight(&policy_with(&bwrap, wt.path())).unwrap_err();
            let kind = format!("{err:?}");
            assert!(kind.starts_with(want), "{}: {kind}", bwrap.display());
            let text = err.to_string();
            assert!(text.contains(&bwrap.display().to_string()), "{text}");
            assert!(
                text.contains("install") || text.contains("enable"),
                "{text}"
            );
        }
        let err = preflight(&policy_with(
            &fake(
                "echo bubblewrap 0.8.0",
                "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1",
            ),
            wt.path(),
        ))
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("bwrap: setting up uid map: Permission denied"),
            "{text}"
        );
        assert!(text.contains("user.max_user_namespaces"), "{text}");
    }

    #[test]
    fn namespace_failures_are_told_apart_from_other_failures() {
        let ns = |detail: &str| PreflightError::NamespacesUnavailable {
            path: "/usr/bin/bwrap".into(),
            detail: detail.to_string(),
            sysctls: Vec::new(),
        };
        let cases: Vec<(PreflightError, bool)> = vec![
            (ns("bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces."), true),
            (ns("bwrap: Creating new namespace failed: Operation not permitted"), true),
            (ns("bwrap: Creating new namespace failed, likely because the kernel does not support user namespaces.  bwrap must be installed setuid on such systems."), true),
            (ns("bwrap: setting up uid map: Permission denied"), true),
            (ns("bwrap: unshare user ns: Operation not permitted"), true),
            (ns("bwrap: Can't mount proc on /newroot/proc: Operation not permitted"), true),
            (ns("bwrap: Can't find source path /nonexistent: No such file or directory"), false),
            (PreflightError::Missing { path: "/usr/bin/bwrap".into() }, false),
            (
                PreflightError::TooOld {
                    path: "/usr/bin/bwrap".into(),
                    found: v(0, 4, 0),
                    needs: MINIMUM_BWRAP,
                    flags: Vec::new(),
                },
                false,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.namespaces_unavailable(), want, "{e}");
        }
    }

    #[test]
    fn the_hosts_bubblewrap_passes() {
        let wt = tempfile::tempdir().unwrap();
        let mut policy = Policy::for_worktree(wt.path(), &crate::Host::default()).unwrap();
        // The integration tests' PW_SANDBOX_BWRAP (tests/common) applies
        // here too, so an older bubblewrap can be checked the same way.
        if let Some(b) = std::env::var_os("PW_SANDBOX_BWRAP") {
            policy.bwrap = b.into();
        }
        let report = preflight(&policy).unwrap();
        assert_eq!(report.bwrap, policy.bwrap);
        assert!(report.version >= minimum_version(), "{}", report.version);
        assert_eq!(
            names(&report.flags),
            names(&flags_in(&bwrap_args(&policy, report.version, &["true".to_string()])).unwrap())
        );
    }
}
