//! A per-run cgroup for the memory and process caps (v2, or v1 memory+pids),
//! created under the runner's own cgroup and removed after the run.
//!
//! The child joins it from a `pre_exec` hook by writing "0" (meaning "the
//! writing process") to `cgroup.procs` files the parent opened beforehand, so
//! bubblewrap and everything it starts are inside the cgroup before any
//! command runs; the hook makes only `write` calls.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::HostError;
use crate::outcome::{LimitEvents, Mechanism};

/// Where a unified (v2) hierarchy is mounted on systemd-era hosts.
const CGROUP2_ROOT: &str = "/sys/fs/cgroup";

/// How long the runner waits for the killed processes of a cgroup to be gone
/// before it gives up removing the cgroup: processes killed with SIGKILL exit
/// in milliseconds; two seconds covers a loaded machine.
const CGROUP_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Prefix of the per-run cgroup directory names, so leftovers are obvious.
const CGROUP_PREFIX: &str = "patchwright-sandbox";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A live per-run cgroup (one directory on v2, one per controller on v1).
#[derive(Debug)]
pub(crate) struct Cgroup {
    pub(crate) mechanism: Mechanism,
    dirs: Vec<PathBuf>,
    procs: Vec<File>,
}

fn unique_name() -> String {
    format!(
        "{CGROUP_PREFIX}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn write_file(path: &Path, value: &str) -> Result<(), HostError> {
    std::fs::write(path, value).map_err(|e| HostError::io(format!("writing {value:?} to"), path, e))
}

fn open_procs(dir: &Path) -> Result<File, HostError> {
    let path = dir.join("cgroup.procs");
    OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| HostError::io("opening", &path, e))
}

fn read_u64_field(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        if parts.next()? == key {
            parts.next()?.parse().ok()
        } else {
            None
        }
    })
}

impl Cgroup {
    /// Creates the run's cgroup with the given caps, or says why it cannot.
    pub(crate) fn create(memory_bytes: u64, max_processes: u64) -> Result<Cgroup, HostError> {
        if Path::new(CGROUP2_ROOT).join("cgroup.controllers").exists() {
            Self::create_v2(memory_bytes, max_processes)
        } else {
            Self::create_v1(memory_bytes, max_processes)
        }
    }

    fn create_v2(memory_bytes: u64, max_processes: u64) -> Result<Cgroup, HostError> {
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| HostError::io("reading", "/proc/self/cgroup", e))?;
        let rel = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .ok_or_else(|| HostError::Unfit("no cgroup v2 entry in /proc/self/cgroup".into()))?;
        let parent = Path::new(CGROUP2_ROOT).join(rel.trim_start_matches('/'));
        let control = parent.join("cgroup.subtree_control");
        let enabled =
            std::fs::read_to_string(&control).map_err(|e| HostError::io("reading", &control, e))?;
        let has = |c: &str| enabled.split_whitespace().any(|x| x == c);
        if !(has("memory") && has("pids")) {
            // Fails with EBUSY when the runner's cgroup has processes in it
            // (the "no internal processes" rule); then the rlimit fallback
            // applies.
            write_file(&control, "+memory +pids")?;
        }
        let dir = parent.join(unique_name());
        std::fs::create_dir(&dir).map_err(|e| HostError::io("creating", &dir, e))?;
        let mut cg = Cgroup {
            mechanism: Mechanism::CgroupV2,
            dirs: vec![dir.clone()],
            procs: Vec::new(),
        };
        write_file(&dir.join("memory.max"), &memory_bytes.to_string())?;
        let swap = dir.join("memory.swap.max");
        if swap.exists() {
            write_file(&swap, "0")?;
        }
        write_file(&dir.join("pids.max"), &max_processes.to_string())?;
        cg.procs.push(open_procs(&dir)?);
        Ok(cg)
    }

    fn create_v1(memory_bytes: u64, max_processes: u64) -> Result<Cgroup, HostError> {
        let memory = v1_dir("memory")?;
        let pids = v1_dir("pids")?;
        let name = unique_name();
        let mut cg = Cgroup {
            mechanism: Mechanism::CgroupV1,
            dirs: Vec::new(),
            procs: Vec::new(),
        };
        let mem_dir = memory.join(&name);
        std::fs::create_dir(&mem_dir).map_err(|e| HostError::io("creating", &mem_dir, e))?;
        cg.dirs.push(mem_dir.clone());
        let pid_dir = pids.join(&name);
        std::fs::create_dir(&pid_dir).map_err(|e| HostError::io("creating", &pid_dir, e))?;
        cg.dirs.push(pid_dir.clone());
        write_file(
            &mem_dir.join("memory.limit_in_bytes"),
            &memory_bytes.to_string(),
        )?;
        // Memory+swap equal to memory: no swapping past the cap.
        let memsw = mem_dir.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            write_file(&memsw, &memory_bytes.to_string())?;
        }
        write_file(&pid_dir.join("pids.max"), &max_processes.to_string())?;
        cg.procs.push(open_procs(&mem_dir)?);
        cg.procs.push(open_procs(&pid_dir)?);
        Ok(cg)
    }

    /// The pre-opened `cgroup.procs` descriptors the child writes "0" to.
    pub(crate) fn procs_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(|f| f.as_raw_fd()).collect()
    }

    /// The v1 `tasks` files, opened for writing: a thread that writes "0"
    /// to them moves itself (only itself) into this cgroup.
    pub(crate) fn task_files(&self) -> Result<Vec<(PathBuf, File)>, HostError> {
        self.dirs
            .iter()
            .map(|dir| {
                let path = dir.join("tasks");
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map(|f| (path.clone(), f))
                    .map_err(|e| HostError::io("opening", &path, e))
            })
            .collect()
    }

    /// Sets `pids.max` to `max_processes` above what the cgroup holds now
    /// (the spawner thread, and the zombie inits of earlier commands that
    /// the host's reaper has not collected yet), so a command in a reused
    /// cgroup can start its full `max_processes` tasks.
    pub(crate) fn rebase_pids_max(&self, max_processes: u64) -> Result<(), HostError> {
        for dir in &self.dirs {
            let current = dir.join("pids.current");
            if !current.exists() {
                continue;
            }
            let now: u64 = std::fs::read_to_string(&current)
                .map_err(|e| HostError::io("reading", &current, e))?
                .trim()
                .parse()
                .map_err(|e| HostError::Unfit(format!("parsing {}: {e}", current.display())))?;
            write_file(
                &dir.join("pids.max"),
                &max_processes.saturating_add(now).to_string(),
            )?;
        }
        Ok(())
    }

    /// The processes in the cgroup, except the runner itself (a spawner
    /// thread of the runner makes it listed; it is never killed).
    fn pids(&self) -> Vec<i32> {
        let own = std::process::id() as i32;
        let mut out = Vec::new();
        for dir in &self.dirs {
            if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        out.retain(|p| *p != own);
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Kills every process in the cgroup and waits (bounded) until it is
    /// empty. Returns true when it is.
    pub(crate) fn kill_all(&self) -> bool {
        if self.mechanism == Mechanism::CgroupV2 {
            for dir in &self.dirs {
                let kill = dir.join("cgroup.kill");
                if kill.exists() {
                    let _ = std::fs::write(kill, "1");
                }
            }
        }
        let deadline = Instant::now() + CGROUP_DRAIN_TIMEOUT;
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return true;
            }
            for pid in pids {
                if pid > 0 {
                    // SAFETY: plain kill(2) on a pid listed in our own cgroup.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// What the kernel counted while the command ran.
    pub(crate) fn events(&self) -> LimitEvents {
        let mut ev = LimitEvents::default();
        for dir in &self.dirs {
            match self.mechanism {
                Mechanism::CgroupV2 => {
                    ev.oom_kills = read_u64_field(&dir.join("memory.events"), "oom_kill");
                    ev.pids_max_hits = read_u64_field(&dir.join("pids.events"), "max");
                }
                _ => {
                    if let Some(v) = read_u64_field(&dir.join("memory.oom_control"), "oom_kill") {
                        ev.oom_kills = Some(v);
                    }
                    if let Some(v) = read_u64_field(&dir.join("pids.events"), "max") {
                        ev.pids_max_hits = Some(v);
                    }
                }
            }
        }
        ev
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.procs.clear();
        self.kill_all();
        for dir in &self.dirs {
            for _ in 0..50 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        }
    }
}

/// Removes the empty cgroups this crate left under the runner's own cgroup
/// (v1 memory and pids, or v2) for processes that no longer exist: a
/// process that exits with spawners in use, or is killed, cannot remove
/// them itself. Only empty directories can be removed, so a cgroup with
/// processes in it is left alone. Returns how many were removed.
pub(crate) fn remove_stale() -> usize {
    let mut parents = Vec::new();
    if Path::new(CGROUP2_ROOT).join("cgroup.controllers").exists() {
        if let Some(rel) = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|own| {
                own.lines()
                    .find_map(|l| l.strip_prefix("0::").map(str::to_string))
            })
        {
            parents.push(Path::new(CGROUP2_ROOT).join(rel.trim_start_matches('/')));
        }
    } else {
        parents.extend(["memory", "pids"].iter().filter_map(|c| v1_dir(c).ok()));
    }
    let own = std::process::id();
    let mut removed = 0;
    for parent in parents {
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix(CGROUP_PREFIX)
                .and_then(|rest| rest.strip_prefix('-'))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != own
                && !Path::new(&format!("/proc/{pid}")).exists()
                && std::fs::remove_dir(e.path()).is_ok()
            {
                removed += 1;
            }
        }
    }
    removed
}

/// The runner's own directory in the v1 hierarchy of `controller`.
fn v1_dir(controller: &str) -> Result<PathBuf, HostError> {
    let has = |list: &str| list.split(',').any(|c| c == controller);
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| HostError::io("reading", "/proc/self/cgroup", e))?;
    let rel = own
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let ctrls = parts.next()?;
            let path = parts.next()?;
            has(ctrls).then(|| path.to_string())
        })
        .ok_or_else(|| HostError::Unfit(format!("no {controller} cgroup in /proc/self/cgroup")))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| HostError::io("reading", "/proc/self/mountinfo", e))?;
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let post: Vec<&str> = post.split_whitespace().collect();
        if post.first() != Some(&"cgroup") || !post.get(2).is_some_and(|o| has(o)) {
            continue;
        }
        let pre: Vec<&str> = pre.split_whitespace().collect();
        let (Some(root), Some(mount_point)) = (pre.get(3), pre.get(4)) else {
            continue;
        };
        let inner = if *root == "/" {
            rel.as_str()
        } else {
            rel.strip_prefix(root).unwrap_or(rel.as_str())
        };
        let dir = Path::new(mount_point).join(inner.trim_start_matches('/'));
        if dir.is_dir() {
            return Ok(dir);
        }
        return Err(HostError::Unfit(format!(
            "the {controller} cgroup {} does not exist",
            dir.display()
        )));
    }
    Err(HostError::Unfit(format!(
        "no cgroup v1 {controller} hierarchy is mounted"
    )))
}
