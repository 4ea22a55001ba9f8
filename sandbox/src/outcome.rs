//! What a sandboxed run reports (serialisable to JSON).

use serde::{Deserialize, Serialize};

/// Exit code the CLI uses for a command that ran past its timeout (as
/// coreutils `timeout` does).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// How a limit was enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// A per-run cgroup on a v1 (memory + pids controllers) hierarchy.
    CgroupV1,
    /// A per-run cgroup on the unified v2 hierarchy.
    CgroupV2,
    /// setrlimit(2) on the sandbox's processes.
    Rlimit,
    /// The size= option of the sandbox's tmpfs mounts.
    Tmpfs,
    /// The runner itself (timeout kill, output truncation).
    Runner,
    /// The WASI tier's wasmtime store: its memory limiter (linear memory
    /// and tables) and epoch interruption (wall clock).
    Wasm,
    /// Not enforced by this tier (the value is the policy's, for the
    /// record): the WASI tier has no per-file size cap.
    NotEnforced,
}

/// Which tier ran a command (the [`crate::Tier`] without its paths).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TierKind {
    /// bubblewrap namespaces (also what outcomes written before tiers
    /// existed read as).
    #[default]
    Bubblewrap,
    /// CPython as WebAssembly under wasmtime.
    Wasi,
}

impl TierKind {
    /// `bubblewrap` or `wasi`.
    pub fn name(self) -> &'static str {
        match self {
            TierKind::Bubblewrap => "bubblewrap",
            TierKind::Wasi => "wasi",
        }
    }
}

/// One limit and how it was enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforced {
    /// The value (bytes, processes, files or milliseconds).
    pub value: u64,
    /// How it was enforced.
    pub mechanism: Mechanism,
}

/// The limits that were actually in force for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsInForce {
    /// Memory cap: the cgroup's, or RLIMIT_AS (address space) without one.
    pub memory_bytes: Option<Enforced>,
    /// Process cap: the cgroup's pids.max; `None` when no cgroup could be
    /// created and the runner is root (RLIMIT_NPROC does not bind root).
    pub max_processes: Option<Enforced>,
    /// RLIMIT_FSIZE.
    pub file_size_bytes: Enforced,
    /// RLIMIT_NOFILE.
    pub open_files: Enforced,
    /// RLIMIT_CORE (always 0).
    pub core_dump_bytes: Enforced,
    /// Size of /tmp and /dev/shm.
    pub tmp_bytes: Enforced,
    /// Wall-clock limit.
    pub timeout_ms: Enforced,
    /// Output retained.
    pub output_bytes: Enforced,
    /// Why no cgroup was used, when none was.
    pub cgroup_unavailable: Option<String>,
}

/// What the kernel counted against the cgroup during the run (all `None`
/// without a cgroup).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitEvents {
    /// Processes killed by the OOM killer inside the cgroup.
    pub oom_kills: Option<u64>,
    /// Forks refused because the process cap was reached.
    pub pids_max_hits: Option<u64>,
    /// The WASI tier: the trap that ended the guest (its memory cap
    /// reached, the wall clock passed, a crash), in wasmtime's words with
    /// what it means; `None` when the guest exited by itself, and always
    /// under bubblewrap. Absent in older outcomes.
    #[serde(default)]
    pub trap: Option<String>,
    /// The WASI tier: requests to grow the guest's memory past the cap,
    /// refused (the guest's allocation failed: Python raises MemoryError);
    /// `None` under bubblewrap and in older outcomes.
    #[serde(default)]
    pub memory_denied: Option<u64>,
}

/// A signal that ended the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalInfo {
    /// The signal number, e.g. 9.
    pub number: i32,
    /// Its name, e.g. "SIGKILL".
    pub name: String,
}

impl SignalInfo {
    pub(crate) fn new(number: i32) -> SignalInfo {
        SignalInfo {
            number,
            name: signal_name(number),
        }
    }
}

/// The result of one sandboxed command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The exit code, when the command exited normally.
    pub exit_code: Option<i32>,
    /// The signal that killed it. bubblewrap reports a command killed by
    /// signal N as exit status 128+N (as a shell does), which is decoded
    /// here; a command that itself calls `exit(128+N)` reads the same.
    pub signal: Option<SignalInfo>,
    /// The wall-clock limit was reached and the sandbox was killed.
    pub timed_out: bool,
    /// Seconds from start to exit.
    pub wall_time_secs: f64,
    /// stdout and stderr merged in order: head, an omission marker if
    /// anything was dropped, tail.
    pub output: String,
    /// Bytes of output retained (head plus tail; at most the output limit).
    pub output_bytes_retained: u64,
    /// Bytes of output dropped from the middle.
    pub bytes_omitted: u64,
    /// The limits in force.
    pub limits: LimitsInForce,
    /// What the cgroup counted (and, under WASI, the trap).
    pub events: LimitEvents,
    /// Which tier ran the command; outcomes written before tiers existed
    /// read as bubblewrap.
    #[serde(default)]
    pub tier: TierKind,
}

impl Outcome {
    /// The exit status a CLI wrapper should exit with: 124 after a timeout,
    /// 128+N after signal N, else the command's own code.
    pub fn cli_exit_code(&self) -> i32 {
        if self.timed_out {
            return TIMEOUT_EXIT_CODE;
        }
        if let Some(sig) = &self.signal {
            return 128 + sig.number;
        }
        self.exit_code.unwrap_or(1)
    }

    /// Whether the command exited with status 0 in time.
    pub fn success(&self) -> bool {
        !self.timed_out && self.signal.is_none() && self.exit_code == Some(0)
    }
}

/// The conventional name of a Linux signal number.
pub fn signal_name(number: i32) -> String {
    let name = match number {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        16 => "SIGSTKFLT",
        17 => "SIGCHLD",
        18 => "SIGCONT",
        19 => "SIGSTOP",
        20 => "SIGTSTP",
        21 => "SIGTTIN",
        22 => "SIGTTOU",
        23 => "SIGURG",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        26 => "SIGVTALRM",
        27 => "SIGPROF",
        28 => "SIGWINCH",
        29 => "SIGIO",
        30 => "SIGPWR",
        31 => "SIGSYS",
        n if (34..=64).contains(&n) => return format!("SIGRTMIN+{}", n - 34),
        n => return format!("SIG{n}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> Outcome {
        let e = Enforced {
            value: 0,
            mechanism: Mechanism::Rlimit,
        };
        Outcome {
            exit_code: Some(3),
            signal: None,
            timed_out: false,
            wall_time_secs: 0.1,
            output: String::new(),
            output_bytes_retained: 0,
            bytes_omitted: 0,
            limits: LimitsInForce {
                memory_bytes: None,
                max_processes: None,
                file_size_bytes: e,
                open_files: e,
                core_dump_bytes: e,
                tmp_bytes: e,
                timeout_ms: e,
                output_bytes: e,
                cgroup_unavailable: None,
            },
            events: LimitEvents::default(),
            tier: TierKind::Bubblewrap,
        }
    }

    #[test]
    fn cli_exit_codes() {
        let mut o = outcome();
        assert_eq!(o.cli_exit_code(), 3);
        o.exit_code = None;
        o.signal = Some(SignalInfo::new(9));
        assert_eq!(o.cli_exit_code(), 137);
        o.timed_out = true;
        assert_eq!(o.cli_exit_code(), 124);
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(25), "SIGXFSZ");
        assert_eq!(signal_name(35), "SIGRTMIN+1");
    }

    #[test]
    fn outcomes_written_before_tiers_read_as_bubblewrap() {
        let mut json = serde_json::to_value(outcome()).unwrap();
        let o = json.as_object_mut().unwrap();
        o.remove("tier");
        let events = o["events"].as_object_mut().unwrap();
        events.remove("trap");
        events.remove("memory_denied");
        let back: Outcome = serde_json::from_value(json).unwrap();
        assert_eq!(back, outcome());
        assert_eq!(back.tier, TierKind::Bubblewrap);
        assert_eq!(back.events.trap, None);
    }

    #[test]
    fn serialises_mechanism_kebab_case() {
        let json = serde_json::to_string(&Mechanism::CgroupV1).unwrap_or_default();
        assert_eq!(json, "\"cgroup-v1\"");
    }
}
