//! Spawning bubblewrap, enforcing the limits, capturing the output.

use std::io::{ErrorKind, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::bwrap::{bwrap_version, flag_supported, BwrapVersion, PreflightError, MINIMUM_BWRAP};
use crate::cgroup::Cgroup;
use crate::error::SandboxError;
use crate::outcome::{Enforced, LimitEvents, LimitsInForce, Mechanism, Outcome, SignalInfo};
use crate::output::HeadTail;
use crate::policy::{
    bwrap_args, bwrap_args_with_etc, etc_layer_unfit, Limits, Policy, Tier, CORE_DUMP_BYTES,
    GROUP_CONTENT, GROUP_FD, HOSTS_FD, PASSWD_CONTENT, PASSWD_FD, SECCOMP_FD, STATUS_FD,
};
use crate::prepared;
use crate::spawner::{delta, Spawner};

/// After the sandbox's main process is gone, how long the runner keeps
/// reading output still buffered in the pipe before it stops: the pid
/// namespace is torn down by then, so this only bounds a pathological case.
const OUTPUT_DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How often the runner polls for the child's exit where the kernel has no
/// pidfd (Linux < 5.3); small enough to add no noticeable latency.
const FALLBACK_POLL_INTERVAL: Duration = Duration::from_millis(5);

/// Bytes read from the output pipe per read(2): one pipe's default capacity.
const READ_CHUNK: usize = 64 * 1024;

/// Lowest fd number the runner parks the descriptors it hands to bubblewrap
/// at, so they cannot collide with the fixed numbers 0-6 while being moved.
const PARK_FD_MIN: RawFd = 16;

/// `CLOSE_RANGE_CLOEXEC` from linux/close_range.h (Linux 5.11+).
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 4;

/// The first descriptor above stdin, stdout and stderr.
const FIRST_NON_STDIO_FD: RawFd = 3;

/// The highest fd the fallback (no close_range) marks close-on-exec.
const FALLBACK_MAX_FD: RawFd = 65_536;

/// A tmpfs mounted without `size=` may grow to half the host's memory (the
/// kernel's default): /tmp's cap under a bubblewrap without `--size` and
/// without a cgroup.
const TMPFS_DEFAULT_DIVISOR: u64 = 2;

/// The host's physical memory in bytes (0 when sysconf cannot tell).
fn host_memory_bytes() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages <= 0 || size <= 0 {
        return 0;
    }
    (pages as u64).saturating_mul(size as u64)
}

/// Which way [`run_with`] starts bubblewrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpawnPath {
    /// The default: bubblewrap is forked by a pooled spawner thread that
    /// already sits in a cgroup with the policy's caps (no cgroup migration
    /// per command; cgroup v1), and /etc is one bind of a prepared layer
    /// instead of one bind per file. Where either cannot be had, that part
    /// falls back to the classic way, with one log line per reason.
    Fast,
    /// A fresh per-run cgroup joined by the child before exec, and /etc
    /// built from one bind per file plus generated data files.
    Classic,
}

/// Fallback reasons already logged, so each is said once per process.
static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn log_fallback_once(message: String) {
    if let Ok(mut seen) = LOGGED.lock() {
        if seen.contains(&message) {
            return;
        }
        seen.push(message.clone());
    }
    tracing::warn!(target: "patchwright_sandbox", "{message}");
}

/// Where the command's cgroup comes from.
enum Limiter {
    /// A pooled spawner thread's cgroup (the fast path).
    Spawner(Spawner),
    /// A cgroup made for this run and removed after it.
    PerRun(Cgroup),
}

impl Limiter {
    fn cgroup(&self) -> Option<&Cgroup> {
        match self {
            Limiter::Spawner(s) => s.cgroup(),
            Limiter::PerRun(c) => Some(c),
        }
    }
}

fn last_err(what: &str) -> SandboxError {
    SandboxError::io(what, std::io::Error::last_os_error())
}

/// A pipe as (read end, write end), both close-on-exec.
fn pipe(what: &str) -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(last_err(what));
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Moves a descriptor to a number >= PARK_FD_MIN (close-on-exec).
fn park(fd: OwnedFd, what: &str) -> Result<OwnedFd, SandboxError> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, PARK_FD_MIN) };
    if new < 0 {
        return Err(last_err(what));
    }
    // SAFETY: `new` was just created by fcntl.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn set_nonblocking(fd: &OwnedFd, what: &str) -> Result<(), SandboxError> {
    // SAFETY: fcntl flag manipulation on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(last_err(what));
        }
    }
    Ok(())
}

/// A pipe whose read end yields `content` then EOF.
fn data_pipe(content: &str, what: &str) -> Result<OwnedFd, SandboxError> {
    bytes_pipe(content.as_bytes(), what)
}

/// A pipe holding `content` (at most a pipe's capacity, 64 KiB: written
/// before the reader starts), read end parked.
fn bytes_pipe(content: &[u8], what: &str) -> Result<OwnedFd, SandboxError> {
    let (r, w) = pipe(what)?;
    let mut file = std::fs::File::from(w);
    std::io::Write::write_all(&mut file, content).map_err(|e| SandboxError::io(what, e))?;
    drop(file);
    park(r, what)
}

/// Checks that the policy's bubblewrap binary exists and is executable.
fn check_bwrap_binary(path: &Path) -> Result<(), SandboxError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        _ => Err(SandboxError::BwrapNotFound {
            path: path.to_path_buf(),
        }),
    }
}

#[derive(Clone, Copy)]
enum Rlimit {
    As,
    Fsize,
    Core,
    Nofile,
    Nproc,
}

fn set_rlimit(kind: Rlimit, value: u64) -> libc::c_int {
    let resource = match kind {
        Rlimit::As => libc::RLIMIT_AS,
        Rlimit::Fsize => libc::RLIMIT_FSIZE,
        Rlimit::Core => libc::RLIMIT_CORE,
        Rlimit::Nofile => libc::RLIMIT_NOFILE,
        Rlimit::Nproc => libc::RLIMIT_NPROC,
    };
    let lim = libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: value as libc::rlim_t,
    };
    // SAFETY: setrlimit with a valid struct; async-signal-safe.
    unsafe { libc::setrlimit(resource, &lim) }
}

/// The runner's own hard limit for NOFILE; an unprivileged runner cannot go
/// above it.
// rlim_t is u64 here but not on every target.
#[allow(clippy::useless_conversion)]
fn nofile_hard_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return u64::MAX;
    }
    u64::from(lim.rlim_max)
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Checks that sandboxed commands can run at all: bubblewrap is present and
/// can build the sandbox this policy describes (it runs `true` inside).
pub fn check_available(policy: &Policy) -> Result<(), SandboxError> {
    if let Tier::Wasi(runtime) = &policy.tier {
        let out = crate::wasi::probe(policy, runtime, 30_000)?;
        if out.success() {
            return Ok(());
        }
        return Err(SandboxError::WasiRuntime {
            what: "running `python -c pass` with".into(),
            path: runtime.python_wasm.clone(),
            message: format!(
                "exit {:?}, signal {:?}, timed out {}: {}",
                out.exit_code,
                out.signal.map(|s| s.name),
                out.timed_out,
                out.output.trim()
            ),
        });
    }
    check_bwrap_binary(&policy.bwrap)?;
    let mut probe = policy.clone();
    probe.limits.timeout_ms = probe.limits.timeout_ms.min(30_000);
    let out = run(&probe, &["true".to_string()])?;
    if out.success() {
        Ok(())
    } else {
        Err(SandboxError::SetupFailed {
            message: format!(
                "`true` did not succeed in the sandbox (exit {:?}, signal {:?}): {}",
                out.exit_code,
                out.signal.map(|s| s.name),
                out.output.trim()
            ),
        })
    }
}

/// Runs `command` (program and arguments; the program is looked up on the
/// policy's PATH inside the sandbox) under `policy` and waits for it, the
/// fast way ([`SpawnPath::Fast`]). A [`Tier::Wasi`] policy runs it with
/// [`crate::run_wasi`] instead (Python only).
///
/// Refuses (returns an error, never runs unsandboxed) when the policy is
/// invalid, bubblewrap is missing, or the sandbox cannot be set up.
pub fn run(policy: &Policy, command: &[String]) -> Result<Outcome, SandboxError> {
    run_with(policy, command, SpawnPath::Fast)
}

/// [`run`], starting bubblewrap the way `path` says. Both ways build the
/// same sandbox (namespaces, visible files, limits); they differ in how the
/// cgroup is entered and how /etc is mounted (see [`SpawnPath`]).
///
/// In order: the request is checked (`check_request`); the set-up picks
/// the /etc layer (`prepared_etc_layer`) and the cgroup and limits
/// (`Confinement::plan`), and opens the pipes (`Pipes::open`); the
/// bubblewrap command carries what its child applies between fork and exec
/// (`ChildSetup`, `bwrap_command`); it is started (`spawn`), waited for
/// under the timeout with its output read (`Watch::wait`), and torn down
/// into the outcome (`finish`).
pub fn run_with(
    policy: &Policy,
    command: &[String],
    path: SpawnPath,
) -> Result<Outcome, SandboxError> {
    if let Tier::Wasi(runtime) = &policy.tier {
        return crate::wasi::run_wasi(policy, runtime, command);
    }
    let Checked { version, seccomp } = check_request(policy, command)?;
    let fast = path == SpawnPath::Fast;

    // The prepared /etc layer, or the per-file binds.
    let etc_layer = if fast {
        prepared_etc_layer(policy)
    } else {
        None
    };
    let (confinement, rlimits) = Confinement::plan(policy, version, fast);
    let pipes = Pipes::open(policy, etc_layer.is_none(), &seccomp)?;
    let child_setup = ChildSetup::new(policy, &confinement, rlimits, &pipes.handed);
    let args = match &etc_layer {
        Some(dir) => bwrap_args_with_etc(policy, version, dir, command),
        None => bwrap_args(policy, version, command),
    };
    let cmd = bwrap_command(policy, args, pipes.out_w, child_setup);

    let started = spawn(policy, cmd, confinement.limiter.as_ref(), pipes.handed)?;
    let waited = Watch::new(started, pipes.out_r, confinement.cgroup(), &policy.limits).wait()?;
    finish(confinement, pipes.status_r, waited)
}

/// What [`check_request`] found: the bubblewrap version the argv is built
/// for, and the seccomp filter handed to it.
struct Checked {
    version: BwrapVersion,
    seccomp: Vec<u8>,
}

/// Refuses a request that cannot run sandboxed, before anything is set up:
/// an empty command or one with a NUL byte, an invalid policy, a missing,
/// unreadable or too old bubblewrap, a host without a seccomp filter, a
/// missing worktree.
fn check_request(policy: &Policy, command: &[String]) -> Result<Checked, SandboxError> {
    if command.is_empty() {
        return Err(SandboxError::invalid(
            "the command is empty: pass at least the program to run",
        ));
    }
    if command.iter().any(|a| a.contains('\0')) {
        return Err(SandboxError::invalid(
            "a command argument contains a NUL byte: remove it",
        ));
    }
    policy.validate()?;
    check_bwrap_binary(&policy.bwrap)?;
    let version = bwrap_version(&policy.bwrap).map_err(|e| match e {
        PreflightError::Missing { path } => SandboxError::BwrapNotFound { path },
        other => SandboxError::BwrapUnusable {
            path: policy.bwrap.clone(),
            message: other.to_string(),
        },
    })?;
    if version < MINIMUM_BWRAP {
        // The preflight's own words for it.
        let too_old = PreflightError::TooOld {
            path: policy.bwrap.clone(),
            found: version,
            needs: MINIMUM_BWRAP,
            flags: Vec::new(),
        };
        return Err(SandboxError::BwrapUnusable {
            path: policy.bwrap.clone(),
            message: too_old.to_string(),
        });
    }
    let seccomp = crate::seccomp::seccomp_program()?;
    if !policy.worktree.is_dir() {
        return Err(SandboxError::Worktree {
            path: policy.worktree.clone(),
            reason: "it does not exist or is not a directory".to_string(),
        });
    }
    Ok(Checked { version, seccomp })
}

/// The fast path's prepared /etc layer; `None` (with a log line, once per
/// reason) where the policy or the host cannot have one, and /etc is bound
/// file by file.
fn prepared_etc_layer(policy: &Policy) -> Option<PathBuf> {
    match etc_layer_unfit(policy) {
        Some(reason) => {
            log_fallback_once(format!(
                "sandbox: /etc is bound file by file (the classic way): {reason}"
            ));
            None
        }
        None => match prepared::etc_layer(policy) {
            Ok(dir) => Some(dir),
            Err(reason) => {
                log_fallback_once(format!(
                    "sandbox: /etc is bound file by file (the classic way): the prepared \
                     /etc layer could not be built: {reason}"
                ));
                None
            }
        },
    }
}

/// The spawner's cgroup or a per-run one, or the reason there is none.
fn limiter(policy: &Policy, fast: bool) -> (Option<Limiter>, Option<String>) {
    let limits = &policy.limits;
    if !policy.cgroups {
        return (
            None,
            Some("disabled by the policy (cgroups = false)".to_string()),
        );
    }
    let spawner = if fast {
        match Spawner::acquire(limits.memory_bytes, limits.max_processes) {
            Ok(s) => Some(s),
            Err(reason) => {
                log_fallback_once(format!(
                    "sandbox: each command joins a fresh cgroup (the classic way): no \
                     spawner thread: {reason}"
                ));
                None
            }
        }
    } else {
        None
    };
    match spawner {
        Some(s) => (Some(Limiter::Spawner(s)), None),
        None => match Cgroup::create(limits.memory_bytes, limits.max_processes) {
            Ok(cg) => (Some(Limiter::PerRun(cg)), None),
            Err(reason) => (None, Some(reason.to_string())),
        },
    }
}

/// The limits of one run, decided before anything is spawned: the cgroup
/// that holds the command, and each limit's value and mechanism.
struct Confinement {
    /// The spawner's cgroup or a per-run one; `None` without a cgroup.
    limiter: Option<Limiter>,
    /// A spawner cgroup's counters before the command (the cgroup outlives
    /// it), to subtract from the ones after.
    events_before: Option<LimitEvents>,
    /// What the outcome reports as enforced, and how.
    in_force: LimitsInForce,
}

impl Confinement {
    /// The cgroup ([`limiter`]) and the limits in force; with them the
    /// rlimits the child sets before exec.
    fn plan(
        policy: &Policy,
        version: BwrapVersion,
        fast: bool,
    ) -> (Confinement, Vec<(Rlimit, u64)>) {
        let limits = &policy.limits;
        let (limiter, cgroup_unavailable) = limiter(policy, fast);

        // rlimits: the cheap ones always, address space (and NPROC where it
        // binds) only without a cgroup.
        let open_files = if is_root() {
            limits.open_files
        } else {
            limits.open_files.min(nofile_hard_limit())
        };
        let mut rlimits = vec![
            (Rlimit::Fsize, limits.file_size_bytes),
            (Rlimit::Core, CORE_DUMP_BYTES),
            (Rlimit::Nofile, open_files),
        ];
        let rl = |value| Enforced {
            value,
            mechanism: Mechanism::Rlimit,
        };
        let cgroup = limiter.as_ref().and_then(Limiter::cgroup);
        let events_before = match &limiter {
            Some(Limiter::Spawner(s)) => Some(s.events()),
            _ => None,
        };
        let (memory_in_force, procs_in_force) = match cgroup {
            Some(cg) => (
                Some(Enforced {
                    value: limits.memory_bytes,
                    mechanism: cg.mechanism,
                }),
                Some(Enforced {
                    value: limits.max_processes,
                    mechanism: cg.mechanism,
                }),
            ),
            None => {
                rlimits.push((Rlimit::As, limits.memory_bytes));
                // RLIMIT_NPROC counts every process of the real uid on the host
                // and never binds root, so it is only used for non-root runners.
                let procs = if is_root() {
                    None
                } else {
                    rlimits.push((Rlimit::Nproc, limits.max_processes));
                    Some(rl(limits.max_processes))
                };
                (Some(rl(limits.memory_bytes)), procs)
            }
        };
        // /tmp's cap: the tmpfs size where bubblewrap has --size (0.7+);
        // before, the tmpfs is unsized and its pages only count against the
        // cgroup's memory cap (without a cgroup, the kernel's tmpfs default of
        // half the host's memory applies).
        let tmp_in_force = if flag_supported(version, "--size") {
            Enforced {
                value: limits.tmp_bytes,
                mechanism: Mechanism::Tmpfs,
            }
        } else {
            match cgroup {
                Some(cg) => Enforced {
                    value: limits.memory_bytes,
                    mechanism: cg.mechanism,
                },
                None => Enforced {
                    value: host_memory_bytes() / TMPFS_DEFAULT_DIVISOR,
                    mechanism: Mechanism::Tmpfs,
                },
            }
        };
        let in_force = LimitsInForce {
            memory_bytes: memory_in_force,
            max_processes: procs_in_force,
            file_size_bytes: rl(limits.file_size_bytes),
            open_files: rl(open_files),
            core_dump_bytes: rl(CORE_DUMP_BYTES),
            tmp_bytes: tmp_in_force,
            timeout_ms: Enforced {
                value: limits.timeout_ms,
                mechanism: Mechanism::Runner,
            },
            output_bytes: Enforced {
                value: limits.output_bytes as u64,
                mechanism: Mechanism::Runner,
            },
            cgroup_unavailable,
        };
        let confinement = Confinement {
            limiter,
            events_before,
            in_force,
        };
        (confinement, rlimits)
    }

    /// The cgroup the command runs in, if any.
    fn cgroup(&self) -> Option<&Cgroup> {
        self.limiter.as_ref().and_then(Limiter::cgroup)
    }
}

/// The descriptors handed to bubblewrap at fixed numbers. The parent's
/// copies must go right after the fork ([`spawn`]).
struct Handed {
    /// The generated /etc files and their numbers (none with a prepared
    /// layer, which holds them).
    data: Vec<(OwnedFd, RawFd)>,
    /// The write end of bubblewrap's `--json-status-fd`.
    status_w: OwnedFd,
    /// The read end of the seccomp filter's pipe.
    seccomp: OwnedFd,
}

impl Handed {
    /// (descriptor, fixed number) pairs, in the order the child moves them.
    fn moves(&self) -> Vec<(RawFd, RawFd)> {
        let mut moves: Vec<(RawFd, RawFd)> = self
            .data
            .iter()
            .map(|(fd, to)| (fd.as_raw_fd(), *to))
            .collect();
        moves.push((self.status_w.as_raw_fd(), STATUS_FD));
        moves.push((self.seccomp.as_raw_fd(), SECCOMP_FD));
        moves
    }
}

/// The pipes of one run: what bubblewrap gets at fixed numbers, its status
/// report and the command's output.
struct Pipes {
    handed: Handed,
    /// The read end of the status pipe (non-blocking).
    status_r: OwnedFd,
    /// The read end of the output pipe (non-blocking).
    out_r: OwnedFd,
    /// Its write end twice: the command's stdout and stderr.
    out_w: [OwnedFd; 2],
}

impl Pipes {
    /// Opens the pipes; `per_file_etc` when /etc is bound file by file
    /// and needs the generated /etc files.
    fn open(policy: &Policy, per_file_etc: bool, seccomp: &[u8]) -> Result<Pipes, SandboxError> {
        // Descriptors handed to bubblewrap at fixed numbers: the generated
        // /etc files (only without a prepared layer, which holds them) and the
        // status pipe.
        let data = if per_file_etc {
            vec![
                (
                    data_pipe(PASSWD_CONTENT, "creating the /etc/passwd pipe")?,
                    PASSWD_FD,
                ),
                (
                    data_pipe(GROUP_CONTENT, "creating the /etc/group pipe")?,
                    GROUP_FD,
                ),
                (
                    data_pipe(&policy.hosts_content(), "creating the /etc/hosts pipe")?,
                    HOSTS_FD,
                ),
            ]
        } else {
            Vec::new()
        };
        let seccomp = bytes_pipe(seccomp, "creating the seccomp filter pipe")?;
        let (status_r, status_w) = pipe("creating the status pipe")?;
        let status_w = park(status_w, "creating the status pipe")?;
        let (out_r, out_w) = pipe("creating the output pipe")?;
        let out_w2 = out_w
            .try_clone()
            .map_err(|e| SandboxError::io("duplicating the output pipe", e))?;
        set_nonblocking(&out_r, "making the output pipe non-blocking")?;
        set_nonblocking(&status_r, "making the status pipe non-blocking")?;
        Ok(Pipes {
            handed: Handed {
                data,
                status_w,
                seccomp,
            },
            status_r,
            out_r,
            out_w: [out_w, out_w2],
        })
    }
}

/// What the child applies to itself between fork and exec, all prepared
/// before the fork: [`ChildSetup::apply`] only reads it.
struct ChildSetup {
    /// The command's CPU priority.
    nice: i32,
    /// A per-run cgroup's `cgroup.procs` descriptors, to join it.
    procs_fds: Vec<RawFd>,
    /// The rlimits to set.
    rlimits: Vec<(Rlimit, u64)>,
    /// The descriptors to move to bubblewrap's fixed numbers.
    moves: Vec<(RawFd, RawFd)>,
}

impl ChildSetup {
    fn new(
        policy: &Policy,
        confinement: &Confinement,
        rlimits: Vec<(Rlimit, u64)>,
        handed: &Handed,
    ) -> ChildSetup {
        let moves = handed.moves();
        // Only a per-run cgroup is joined in the child; a spawner's children
        // are born in its cgroup.
        let procs_fds: Vec<RawFd> = match &confinement.limiter {
            Some(Limiter::PerRun(cg)) => cg.procs_fds(),
            _ => Vec::new(),
        };
        ChildSetup {
            nice: policy.limits.nice,
            procs_fds,
            rlimits,
            moves,
        }
    }

    /// Runs in the child between fork and exec: only async-signal-safe
    /// calls (write, setrlimit, setpriority, dup2, close_range, fcntl) on
    /// the data prepared before the fork; it allocates nothing.
    ///
    /// # Safety
    ///
    /// Call it only in the forked child before exec (a `pre_exec` hook):
    /// it moves descriptors onto fixed numbers and marks every other one
    /// close-on-exec.
    unsafe fn apply(&self) -> std::io::Result<()> {
        // Below the runner's priority: the model keeps its speed.
        if self.nice != 0 && libc::setpriority(libc::PRIO_PROCESS, 0, self.nice) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Join the cgroup first, so bwrap and all it starts are inside.
        for fd in &self.procs_fds {
            if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        for (kind, value) in &self.rlimits {
            if set_rlimit(*kind, *value) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        // Nothing above stdio survives exec but the fixed numbers moved
        // there next (dup2 clears close-on-exec on its target). CLOEXEC
        // rather than close, so std's own exec-error pipe keeps working.
        let first = FIRST_NON_STDIO_FD as libc::c_uint;
        if libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            for fd in FIRST_NON_STDIO_FD..FALLBACK_MAX_FD {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        for (from, to) in &self.moves {
            if libc::dup2(*from, *to) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// The bubblewrap command: `args`, no environment, `/` as its directory,
/// no stdin, stdout and stderr into the output pipe (`out_w`), and `setup`
/// applied in the child before exec.
fn bwrap_command(
    policy: &Policy,
    args: Vec<String>,
    out_w: [OwnedFd; 2],
    setup: ChildSetup,
) -> Command {
    let [out_w, out_w2] = out_w;
    let mut cmd = Command::new(&policy.bwrap);
    cmd.args(args)
        // bubblewrap itself gets no environment: the sandbox's pid 1 is a fork
        // of it, and /proc/1/environ would otherwise show the runner's.
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::from(out_w))
        .stderr(Stdio::from(out_w2));
    // SAFETY: the hook runs between fork and exec and makes only
    // async-signal-safe calls (write, setrlimit, setpriority, dup2,
    // close_range, fcntl) on data prepared before the fork; it allocates
    // nothing.
    unsafe {
        cmd.pre_exec(move || setup.apply());
    }
    cmd
}

/// A started bubblewrap: the child, its pidfd where the kernel has them,
/// and when it started.
struct Started {
    child: Child,
    pidfd: Option<OwnedFd>,
    start: Instant,
}

/// Forks bubblewrap, on the spawner's thread or here.
fn spawn(
    policy: &Policy,
    mut cmd: Command,
    limiter: Option<&Limiter>,
    handed: Handed,
) -> Result<Started, SandboxError> {
    let start = Instant::now();
    // The parent's copies of the child's ends must go, or EOF never comes:
    // the command is dropped right after the fork, here or on the spawner.
    let spawned = match limiter {
        Some(Limiter::Spawner(s)) => s.spawn(cmd),
        _ => {
            let spawned = cmd.spawn();
            drop(cmd);
            spawned
        }
    };
    drop(handed);
    let child = spawned.map_err(|e| SandboxError::Io {
        what: format!(
            "starting {} (joining the cgroup, setting rlimits)",
            policy.bwrap.display()
        ),
        source: e,
    })?;

    let pid = child.id() as libc::pid_t;
    // SAFETY: pidfd_open on our own unreaped child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative result is a new descriptor we own.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) });
    Ok(Started {
        child,
        pidfd,
        start,
    })
}

/// The runner's watch over a started sandbox until it is gone and its
/// output read: the exit, the timeout and its kill, the output pipe.
struct Watch<'a> {
    child: Child,
    pidfd: Option<OwnedFd>,
    /// The command's cgroup, whose processes are killed with bubblewrap.
    cgroup: Option<&'a Cgroup>,
    start: Instant,
    deadline: Instant,
    out_file: std::fs::File,
    out_open: bool,
    output: HeadTail,
    status: Option<ExitStatus>,
    exited_at: Option<Instant>,
    timed_out: bool,
}

/// What the wait saw: bubblewrap's exit status, the wall time until it
/// exited, whether the timeout killed it, and the output kept.
struct Waited {
    status: ExitStatus,
    wall: Duration,
    timed_out: bool,
    output: HeadTail,
}

impl<'a> Watch<'a> {
    fn new(
        started: Started,
        out_r: OwnedFd,
        cgroup: Option<&'a Cgroup>,
        limits: &Limits,
    ) -> Watch<'a> {
        let timeout = Duration::from_millis(limits.timeout_ms);
        Watch {
            child: started.child,
            pidfd: started.pidfd,
            cgroup,
            start: started.start,
            deadline: started.start + timeout,
            out_file: std::fs::File::from(out_r),
            out_open: true,
            output: HeadTail::new(limits.output_bytes),
            status: None,
            exited_at: None,
            timed_out: false,
        }
    }

    /// Kills bubblewrap and everything in the command's cgroup.
    fn kill_sandbox(&mut self) {
        let _ = self.child.kill();
        if let Some(cg) = self.cgroup {
            cg.kill_all();
        }
    }

    /// `error`, after the sandbox is killed and reaped.
    fn abandon(&mut self, error: SandboxError) -> SandboxError {
        self.kill_sandbox();
        let _ = self.child.wait();
        error
    }

    /// Waits until bubblewrap has exited and the output pipe is at EOF (or
    /// [`OUTPUT_DRAIN_GRACE`] after the exit), killing the sandbox at the
    /// deadline.
    fn wait(mut self) -> Result<Waited, SandboxError> {
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            if self.status.is_none() {
                self.check_exit()?;
            }
            if self.status.is_some() && !self.out_open {
                break;
            }
            let now = Instant::now();
            if self.status.is_none() && !self.timed_out && now >= self.deadline {
                self.timed_out = true;
                self.kill_sandbox();
            }
            let until = match self.exited_at {
                Some(t) => {
                    if now >= t + OUTPUT_DRAIN_GRACE {
                        break;
                    }
                    t + OUTPUT_DRAIN_GRACE
                }
                None if self.timed_out => now + FALLBACK_POLL_INTERVAL,
                None => self.deadline,
            };
            let mut wait = until.saturating_duration_since(now);
            if self.status.is_none() && self.pidfd.is_none() {
                wait = wait.min(FALLBACK_POLL_INTERVAL);
            }
            if !self.poll(wait)? {
                continue;
            }
            if self.out_open {
                self.read_output(&mut chunk)?;
            }
        }
        let status = match self.status {
            Some(s) => s,
            None => self
                .child
                .wait()
                .map_err(|e| SandboxError::io("waiting for bubblewrap", e))?,
        };
        Ok(Waited {
            status,
            wall: self.exited_at.unwrap_or_else(Instant::now) - self.start,
            timed_out: self.timed_out,
            output: self.output,
        })
    }

    /// Notes bubblewrap's exit, if it has exited.
    fn check_exit(&mut self) -> Result<(), SandboxError> {
        match self.child.try_wait() {
            Ok(Some(st)) => {
                self.status = Some(st);
                self.exited_at = Some(Instant::now());
                // Anything left in the cgroup (there should be nothing:
                // the pid namespace died with its init) is killed now.
                if let Some(cg) = self.cgroup {
                    cg.kill_all();
                }
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(self.abandon(SandboxError::io("waiting for bubblewrap", e))),
        }
    }

    /// Waits up to `wait` for output or bubblewrap's exit; `false` when a
    /// signal interrupted the wait.
    fn poll(&mut self, wait: Duration) -> Result<bool, SandboxError> {
        let mut fds = Vec::with_capacity(2);
        if self.out_open {
            fds.push(libc::pollfd {
                fd: self.out_file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if let (None, Some(p)) = (self.status, &self.pidfd) {
            fds.push(libc::pollfd {
                fd: p.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let ms = wait.as_millis().min(i32::MAX as u128) as libc::c_int;
        let ms = if ms == 0 && !wait.is_zero() { 1 } else { ms };
        // SAFETY: poll on a vector of pollfd we own.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                return Err(self.abandon(SandboxError::io("polling the sandbox", e)));
            }
            return Ok(false);
        }
        Ok(true)
    }

    /// Reads what the output pipe holds now, noting its EOF.
    fn read_output(&mut self, chunk: &mut [u8]) -> Result<(), SandboxError> {
        loop {
            match self.out_file.read(chunk) {
                Ok(0) => {
                    self.out_open = false;
                    return Ok(());
                }
                Ok(n) => self.output.push(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(self.abandon(SandboxError::io("reading the sandbox's output", e)));
                }
            }
        }
    }
}

/// The teardown after the wait: bubblewrap's status report read, the
/// sandbox's init waited for where no cgroup holds it, the cgroup's
/// counters taken, the spawner released or the per-run cgroup removed;
/// then the outcome, or the set-up's failure.
fn finish(
    confinement: Confinement,
    status_r: OwnedFd,
    waited: Waited,
) -> Result<Outcome, SandboxError> {
    let Confinement {
        limiter,
        events_before,
        in_force,
    } = confinement;
    let Waited {
        status,
        wall,
        timed_out,
        output,
    } = waited;
    let cgroup = limiter.as_ref().and_then(Limiter::cgroup);

    let report = read_status(status_r);
    if cgroup.is_none() {
        if let Some(init) = report.child_pid {
            wait_gone(init, OUTPUT_DRAIN_GRACE);
        }
    }
    let events = match (cgroup, &events_before) {
        (Some(cg), Some(before)) => delta(before, cg.events()),
        (Some(cg), None) => cg.events(),
        (None, _) => Default::default(),
    };
    // A spawner goes back to the pool only with its cgroup empty again.
    let clean = cgroup.is_some_and(|cg| cg.kill_all());
    match limiter {
        Some(Limiter::Spawner(s)) => s.release(clean),
        Some(Limiter::PerRun(cg)) => drop(cg),
        None => {}
    }

    let (exit_code, signal) = if let Some(sig) = status.signal() {
        (None, Some(SignalInfo::new(sig)))
    } else {
        let code = status.code().unwrap_or(1);
        if report.exit_code.is_none() && !timed_out {
            return Err(SandboxError::SetupFailed {
                message: output.render().trim().to_string(),
            });
        }
        let code = report.exit_code.unwrap_or(code);
        if (129..=128 + 64).contains(&code) {
            (None, Some(SignalInfo::new(code - 128)))
        } else {
            (Some(code), None)
        }
    };

    Ok(Outcome {
        exit_code,
        signal,
        timed_out,
        wall_time_secs: wall.as_secs_f64(),
        output: output.render(),
        output_bytes_retained: output.retained() as u64,
        bytes_omitted: output.omitted(),
        limits: in_force,
        events,
        tier: crate::outcome::TierKind::Bubblewrap,
    })
}

#[derive(Default)]
struct StatusReport {
    child_pid: Option<i32>,
    exit_code: Option<i32>,
}

/// Parses bubblewrap's `--json-status-fd` documents: `child-pid` once the
/// sandbox's init exists, `exit-code` only if the setup finished.
fn read_status(fd: OwnedFd) -> StatusReport {
    let mut file = std::fs::File::from(fd);
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let mut report = StatusReport::default();
    for doc in serde_json::Deserializer::from_slice(&bytes).into_iter::<serde_json::Value>() {
        let Ok(doc) = doc else { break };
        if let Some(p) = doc.get("child-pid").and_then(|v| v.as_i64()) {
            report.child_pid = i32::try_from(p).ok();
        }
        if let Some(c) = doc.get("exit-code").and_then(|v| v.as_i64()) {
            report.exit_code = i32::try_from(c).ok();
        }
    }
    report
}

/// Waits (bounded) until a host pid is gone or a zombie: the sandbox's init,
/// whose exit tears down its pid namespace.
fn wait_gone(pid: i32, limit: Duration) {
    let deadline = Instant::now() + limit;
    let path = format!("/proc/{pid}/stat");
    while Instant::now() < deadline {
        match std::fs::read_to_string(&path) {
            Err(_) => return,
            Ok(stat) => {
                let state = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next());
                if matches!(state, Some("Z") | Some("X")) {
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
