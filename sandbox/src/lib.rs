//! Run one command in a bubblewrap sandbox.
//!
//! The policy is data ([`Policy`]); [`bwrap_args`] turns it into
//! bubblewrap's argument list without touching the system; [`run`] executes
//! it with resource limits and returns an [`Outcome`]. There is no
//! unsandboxed fallback: if bubblewrap is missing or cannot build the
//! sandbox, [`run`] and [`check_available`] return an error. [`preflight`]
//! checks a host once, before any work: bubblewrap present, new enough for
//! every option the policy uses, and able to build the sandbox.
//!
//! [`run`] takes the fast path ([`SpawnPath::Fast`]): bubblewrap is forked
//! by a pooled spawner thread that already sits in a cgroup with the
//! policy's caps (no cgroup migration per command on cgroup v1), and /etc
//! is one read-only bind of a prepared layer ([`bwrap_args_with_etc`])
//! instead of one bind per file. [`run_with`] with [`SpawnPath::Classic`]
//! is the per-run-cgroup, per-file-/etc way, which the fast path falls back
//! to (with a log line) where it cannot work.
//!
//! A policy's [`Tier`] chooses the isolation: bubblewrap (the default), or
//! [`Tier::Wasi`], where Python commands run as WebAssembly under wasmtime
//! in this process ([`run_wasi`]) on hosts that cannot create namespaces.
//!
//! See README.md in this crate for what the sandbox does and does not
//! protect against.

mod bwrap;
mod cgroup;
mod error;
mod outcome;
mod output;
mod policy;
mod preflight;
mod prepared;
mod run;
mod seccomp;
mod spawner;
mod wasi;

pub use bwrap::*;
pub use error::SandboxError;
pub use outcome::{
    signal_name, Enforced, LimitEvents, LimitsInForce, Mechanism, Outcome, SignalInfo, TierKind,
    TIMEOUT_EXIT_CODE,
};
pub use output::HeadTail;
pub use policy::*;
pub use preflight::*;
pub use prepared::{LAYER_BASE_PREFIX, MAX_PREPARED_LAYERS};
pub use run::{check_available, run, run_with, SpawnPath};
pub use seccomp::{
    build_program, describe_seccomp, evaluate, program_bytes, seccomp_program, Blocked, Insn, Rule,
    ADDR_NO_RANDOMIZE, AUDIT_ARCH_AARCH64, AUDIT_ARCH_X86_64, BLOCKED_ERRNO, BLOCKED_SYSCALLS,
    CLONE3_ERRNO, CLONE_NEW_FLAGS, NATIVE_AUDIT_ARCH, PERSONALITY_QUERY, RET_ALLOW, RET_ERRNO,
    RET_KILL_PROCESS, TIOCLINUX, TIOCSTI, X32_SYSCALL_BIT,
};
pub use spawner::{release_spawners, MAX_IDLE_SPAWNERS, SPAWNER_IDLE_TIMEOUT, SPAWNER_TASKS};
pub use wasi::*;
