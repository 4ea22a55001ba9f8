//! Spawner threads that already sit in a cgroup, so the commands they start
//! are in it from their first instruction with no migration.
//!
//! Moving a process into a cgroup (a write to `cgroup.procs`) waits for an
//! RCU grace period on cgroup v1: 1-9 ms per command on a busy host, most of
//! the sandbox's overhead. A child is created in the cgroup of the *thread*
//! that forks it, and cgroup v1 lets a single thread of a process join a
//! cgroup. So a spawner is one runner thread, moved once into a cgroup of
//! its own (memory + pids) at creation, that forks bubblewrap for each
//! command handed to it. The runner's memory stays charged where it was
//! (v1 charges memory to the cgroup of the process's leader, which stays
//! put), and the memcg OOM killer only considers process leaders, so the
//! runner is never its victim. The thread counts as one task in `pids.max`,
//! which is raised by [`SPAWNER_TASKS`] to leave the command its full cap.
//!
//! bubblewrap returns as soon as its init reports the command's exit; the
//! init, killed then, is reparented to the host's reaper and stays counted
//! in `pids.current` until that reaps it (two seconds on some hosts). So
//! before each command `pids.max` is set to the cap plus the tasks the
//! cgroup holds at that moment: the command gets its full cap, and at
//! most that many more if the reaper collects those zombies while it runs
//! (one per command the spawner ran in the reaper's last interval).
//!
//! A spawner runs one command at a time; between commands every process
//! left in its cgroup is killed (the pid namespace has already killed them),
//! so command N+1 starts in an empty cgroup with the same caps; its limit
//! counters are reported as differences. What carries over is page cache
//! charged to the cgroup by earlier commands (reclaimable, so it is
//! reclaimed before an OOM kill).
//!
//! Idle spawners are pooled by their caps (memory, processes) and reused by
//! any later command with the same caps; at most [`MAX_IDLE_SPAWNERS`] are
//! kept, none longer than [`SPAWNER_IDLE_TIMEOUT`], and [`release_spawners`]
//! (also run at process exit) removes them with their cgroups.
//!
//! cgroup v2 does not allow a thread in a domain cgroup other than its
//! process's, so there the runner keeps today's per-run cgroup; the v2
//! equivalent is `clone3(CLONE_INTO_CGROUP)` with a cgroup fd kept per
//! spawner (not implemented here).

use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cgroup::Cgroup;
use crate::error::HostError;
use crate::outcome::{LimitEvents, Mechanism};

/// Tasks a spawner adds to its cgroup's process count: its own thread.
pub const SPAWNER_TASKS: u64 = 1;

/// Idle spawners kept for reuse: enough for the concurrent sandboxes of a
/// batch on a small host (one per worker and limit set), few enough that
/// the idle cgroups and threads cost nothing noticeable.
pub const MAX_IDLE_SPAWNERS: usize = 8;

/// A spawner unused this long is removed on the next pool access: a batch
/// runs commands seconds apart, so a minute idle means its task is over.
pub const SPAWNER_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The caps a spawner's cgroup enforces: (memory bytes, processes).
type Key = (u64, u64);

/// A command to fork and where to send it back with the result.
type Job = (Command, mpsc::Sender<std::io::Result<Child>>);

/// One spawner thread and its cgroup.
pub(crate) struct Spawner {
    key: Key,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    // Dropped after the thread has left it (see Drop).
    cgroup: Option<Cgroup>,
    idle_since: Instant,
}

static POOL: Mutex<Vec<Spawner>> = Mutex::new(Vec::new());
static AT_EXIT: Once = Once::new();
static SWEEP: Once = Once::new();

extern "C" fn release_at_exit() {
    // Another thread may hold the lock while the process exits: then the
    // next process's stale-cgroup sweep removes what is left.
    let idle = match POOL.try_lock() {
        Ok(mut pool) => std::mem::take(&mut *pool),
        Err(_) => return,
    };
    drop(idle);
}

/// Removes every idle spawner now (threads ended, cgroups removed). The
/// process calls it itself at exit; a program may call it when its tasks
/// are done. Spawners in use are removed when their command ends.
pub fn release_spawners() {
    let idle = match POOL.lock() {
        Ok(mut pool) => std::mem::take(&mut *pool),
        Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
    };
    drop(idle);
}

impl Spawner {
    /// Takes an idle spawner with these caps, or creates one; the error
    /// says why none can be had (the caller falls back to a per-run cgroup).
    pub(crate) fn acquire(memory_bytes: u64, max_processes: u64) -> Result<Spawner, HostError> {
        let key = (memory_bytes, max_processes);
        let (found, expired) = {
            let mut pool = POOL
                .lock()
                .map_err(|_| HostError::Unfit("the spawner pool is poisoned".into()))?;
            let now = Instant::now();
            let (expired, kept): (Vec<Spawner>, Vec<Spawner>) = std::mem::take(&mut *pool)
                .into_iter()
                .partition(|s| now.duration_since(s.idle_since) > SPAWNER_IDLE_TIMEOUT);
            *pool = kept;
            let found = pool
                .iter()
                .rposition(|s| s.key == key)
                .map(|i| pool.remove(i));
            (found, expired)
        };
        drop(expired);
        match found {
            Some(s) => Ok(s),
            None => Spawner::create(key),
        }
    }

    fn create(key: Key) -> Result<Spawner, HostError> {
        SWEEP.call_once(|| {
            crate::cgroup::remove_stale();
        });
        let cgroup = Cgroup::create(key.0, key.1.saturating_add(SPAWNER_TASKS))?;
        if cgroup.mechanism != Mechanism::CgroupV1 {
            return Err(HostError::Unfit(
                "cgroup v2 keeps a process's threads in one domain cgroup, so a spawner thread \
                 cannot join its own; clone3(CLONE_INTO_CGROUP) would be the v2 way"
                    .to_string(),
            ));
        }
        let tasks = cgroup.task_files()?;
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), HostError>>();
        let thread = std::thread::Builder::new()
            .name("sandbox-spawner".to_string())
            .spawn(move || {
                for (path, mut file) in tasks {
                    // "0": the writing thread (only this one, on the tasks file).
                    if let Err(e) = std::io::Write::write_all(&mut file, b"0") {
                        let _ = ready_tx.send(Err(HostError::io(
                            "moving the spawner thread into",
                            path,
                            e,
                        )));
                        return;
                    }
                }
                let _ = ready_tx.send(Ok(()));
                while let Ok((mut cmd, reply)) = jobs_rx.recv() {
                    let spawned = cmd.spawn();
                    drop(cmd);
                    let _ = reply.send(spawned);
                }
            })
            .map_err(|e| HostError::Unfit(format!("starting a spawner thread: {e}")))?;
        AT_EXIT.call_once(|| {
            // SAFETY: registering a plain extern "C" function.
            unsafe {
                libc::atexit(release_at_exit);
            }
        });
        let mut spawner = Spawner {
            key,
            jobs: Some(jobs_tx),
            thread: Some(thread),
            cgroup: Some(cgroup),
            idle_since: Instant::now(),
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(spawner),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                spawner.jobs = None;
                Err(HostError::Unfit(
                    "the spawner thread ended before joining its cgroup".into(),
                ))
            }
        }
    }

    /// The spawner's cgroup.
    pub(crate) fn cgroup(&self) -> Option<&Cgroup> {
        self.cgroup.as_ref()
    }

    /// Forks `cmd` on the spawner thread; the command (and with it the
    /// parent's copies of the child's descriptors) is dropped there.
    pub(crate) fn spawn(&self, cmd: Command) -> std::io::Result<Child> {
        if let Some(cg) = &self.cgroup {
            cg.rebase_pids_max(self.key.1)
                .map_err(std::io::Error::other)?;
        }
        let gone = || std::io::Error::other("the sandbox spawner thread has ended");
        let jobs = self.jobs.as_ref().ok_or_else(gone)?;
        let (tx, rx) = mpsc::channel();
        jobs.send((cmd, tx)).map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())?
    }

    /// Returns the spawner to the pool after a command whose processes are
    /// all gone (`clean`); otherwise it is removed.
    pub(crate) fn release(mut self, clean: bool) {
        if !clean {
            return;
        }
        self.idle_since = Instant::now();
        let surplus = match POOL.lock() {
            Ok(mut pool) => {
                pool.push(self);
                let n = pool.len().saturating_sub(MAX_IDLE_SPAWNERS);
                pool.drain(..n).collect::<Vec<_>>()
            }
            Err(_) => Vec::new(),
        };
        drop(surplus);
    }

    /// The cgroup's counters now, to subtract from the ones after a command.
    pub(crate) fn events(&self) -> LimitEvents {
        self.cgroup().map(|c| c.events()).unwrap_or_default()
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        // The thread ends when its job channel closes, and leaves the
        // cgroup as it exits; only then can the cgroup be removed.
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.cgroup = None;
    }
}

/// The counters of a command: `after - before` for each that both have.
pub(crate) fn delta(before: &LimitEvents, after: LimitEvents) -> LimitEvents {
    let sub = |b: Option<u64>, a: Option<u64>| match (b, a) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b)),
        (_, a) => a,
    };
    LimitEvents {
        oom_kills: sub(before.oom_kills, after.oom_kills),
        pids_max_hits: sub(before.pids_max_hits, after.pids_max_hits),
        trap: None,
        memory_denied: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_differences_where_both_are_known() {
        let ev = |o: Option<u64>, p: Option<u64>| LimitEvents {
            oom_kills: o,
            pids_max_hits: p,
            trap: None,
            memory_denied: None,
        };
        let cases = [
            (
                ev(Some(2), Some(5)),
                ev(Some(3), Some(5)),
                ev(Some(1), Some(0)),
            ),
            (ev(None, None), ev(Some(1), Some(4)), ev(Some(1), Some(4))),
            (ev(Some(1), Some(1)), ev(None, None), ev(None, None)),
            // A counter never goes down; if it seems to, report 0.
            (
                ev(Some(4), Some(4)),
                ev(Some(3), Some(3)),
                ev(Some(0), Some(0)),
            ),
        ];
        for (before, after, want) in cases {
            assert_eq!(
                delta(&before, after.clone()),
                want,
                "{before:?} -> {after:?}"
            );
        }
    }
}
