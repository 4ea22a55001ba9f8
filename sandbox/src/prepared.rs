//! The prepared /etc layer of the fast path: one host directory holding
//! copies of the policy's /etc pieces ([`crate::ETC_FILES`], the network
//! files of [`crate::Policy::allow_network`]) and the generated passwd,
//! group and hosts files, bound read-only at /etc with one mount instead of
//! about sixteen (each bubblewrap bind is a mount plus a read-only remount).
//!
//! The directory is built once per process for each distinct layer and
//! reused by every later command; it is rebuilt when the status of a source
//! (inode, size, modification and change times of the top-level path)
//! changes. A file edited in place inside a bound directory (say a new
//! `/etc/ld.so.conf.d/x.conf` written without touching the directory) is
//! only seen by a process started after the edit; the per-file path
//! ([`crate::SpawnPath::Classic`]) shows the host's files live.
//!
//! Layers live in `$TMPDIR/patchwright-sandbox-<euid>/` (mode 0700, owned by
//! the runner, checked before use); a process removes the layers of
//! processes that no longer exist when it builds its first one.

use std::collections::hash_map::DefaultHasher;
use std::fs::DirBuilder;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::HostError;
use crate::policy::{is_etc_mount, Mount, Policy, ETC_DIR, GROUP_CONTENT, PASSWD_CONTENT};

/// Prefix of the per-user directory (under the temporary directory) that
/// holds the prepared layers, so leftovers are recognisable.
pub const LAYER_BASE_PREFIX: &str = "patchwright-sandbox-";

/// How many prepared layers one process keeps: one per distinct /etc
/// content (host files plus local host names); more than a handful means
/// the policies differ in local hosts, and old layers are removed.
pub const MAX_PREPARED_LAYERS: usize = 16;

/// Mode of the layer's own directories (/etc, and parents such as /etc/ssl
/// that are not copied): what bubblewrap gives the directories it creates
/// on its root, so /etc looks the same on both paths.
const LAYER_DIR_MODE: u32 = 0o700;

/// Mode of the generated passwd, group and hosts files: what bubblewrap's
/// `--ro-bind-data` files have.
const GENERATED_FILE_MODE: u32 = 0o600;

/// Mode of the per-user base directory: only the runner may list or enter it.
const BASE_DIR_MODE: u32 = 0o700;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// (fingerprint, directory) of the layers this process built, oldest first.
static LAYERS: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());

/// One thing placed in the layer, relative to /etc.
enum Entry {
    /// Copy a host path (file, directory tree, or symlink as a symlink).
    Copy {
        src: PathBuf,
        rel: PathBuf,
        required: bool,
    },
    /// Create a symbolic link.
    Symlink { target: PathBuf, rel: PathBuf },
    /// Write generated content.
    Data { content: String, rel: PathBuf },
}

fn rel_to_etc(dest: &Path) -> Option<PathBuf> {
    dest.strip_prefix(ETC_DIR).ok().map(Path::to_path_buf)
}

/// What the layer of `policy` holds, in mount order (later entries replace
/// earlier ones at the same path, as later mounts cover earlier ones).
fn entries(policy: &Policy) -> Vec<Entry> {
    let mut out = Vec::new();
    for m in policy.system_mounts.iter().filter(|m| is_etc_mount(m)) {
        match m {
            Mount::RoBind { src, dest } | Mount::RoBindTry { src, dest } => {
                if let Some(rel) = rel_to_etc(dest) {
                    out.push(Entry::Copy {
                        src: src.clone(),
                        rel,
                        required: matches!(m, Mount::RoBind { .. }),
                    });
                }
            }
            Mount::Symlink { target, link } => {
                if let Some(rel) = rel_to_etc(link) {
                    out.push(Entry::Symlink {
                        target: target.clone(),
                        rel,
                    });
                }
            }
        }
    }
    for (content, name) in [
        (PASSWD_CONTENT.to_string(), "passwd"),
        (GROUP_CONTENT.to_string(), "group"),
        (policy.hosts_content(), "hosts"),
    ] {
        out.push(Entry::Data {
            content,
            rel: PathBuf::from(name),
        });
    }
    out
}

/// A hash of everything the layer's content depends on: the entries and
/// the status of each source path.
fn fingerprint(entries: &[Entry]) -> u64 {
    let mut h = DefaultHasher::new();
    for e in entries {
        match e {
            Entry::Copy { src, rel, required } => {
                (0u8, src, rel, required).hash(&mut h);
                match std::fs::symlink_metadata(src) {
                    Ok(m) => (
                        m.dev(),
                        m.ino(),
                        m.size(),
                        m.mtime(),
                        m.mtime_nsec(),
                        m.ctime(),
                        m.ctime_nsec(),
                        m.mode(),
                    )
                        .hash(&mut h),
                    Err(e) => e.kind().hash(&mut h),
                }
            }
            Entry::Symlink { target, rel } => (1u8, target, rel).hash(&mut h),
            Entry::Data { content, rel } => (2u8, content, rel).hash(&mut h),
        }
    }
    h.finish()
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// The per-user base directory, created if needed and checked: a real
/// directory (not a link) owned by the runner, writable by nobody else.
fn base_dir() -> Result<PathBuf, HostError> {
    let dir = std::env::temp_dir().join(format!("{LAYER_BASE_PREFIX}{}", euid()));
    match DirBuilder::new().mode(BASE_DIR_MODE).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(HostError::io("creating", &dir, e)),
    }
    let meta = std::fs::symlink_metadata(&dir)
        .map_err(|e| HostError::io("reading the status of", &dir, e))?;
    if !meta.file_type().is_dir() || meta.uid() != euid() || meta.mode() & 0o022 != 0 {
        return Err(HostError::Unfit(format!(
            "{} is not a directory owned by uid {} and writable only by it: remove it",
            dir.display(),
            euid()
        )));
    }
    Ok(dir)
}

/// Removes the layers of processes that no longer exist.
fn remove_stale_layers(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let own = std::process::id();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("etc-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != own && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn remove_any(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// Copies `src` to `dst` without following symbolic links: files with
/// their permission bits, directories recursively, links as links; other
/// kinds (devices, sockets) are left out, as no /etc piece bound is one.
fn copy_tree(src: &Path, dst: &Path) -> Result<(), HostError> {
    let meta = std::fs::symlink_metadata(src)
        .map_err(|e| HostError::io("reading the status of", src, e))?;
    let ft = meta.file_type();
    if ft.is_symlink() {
        let target = std::fs::read_link(src).map_err(|e| HostError::io("reading", src, e))?;
        std::os::unix::fs::symlink(&target, dst)
            .map_err(|e| HostError::io("creating the link", dst, e))?;
    } else if ft.is_dir() {
        std::fs::create_dir(dst).map_err(|e| HostError::io("creating", dst, e))?;
        let list = std::fs::read_dir(src).map_err(|e| HostError::io("listing", src, e))?;
        for e in list {
            let e = e.map_err(|e| HostError::io("listing", src, e))?;
            copy_tree(&e.path(), &dst.join(e.file_name()))?;
        }
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(meta.mode() & 0o7777))
            .map_err(|e| HostError::io("setting the mode of", dst, e))?;
    } else if ft.is_file() {
        std::fs::copy(src, dst)
            .map_err(|e| HostError::io(format!("copying {} to", src.display()), dst, e))?;
    }
    Ok(())
}

fn build(dir: &Path, entries: &[Entry]) -> Result<(), HostError> {
    DirBuilder::new()
        .mode(LAYER_DIR_MODE)
        .create(dir)
        .map_err(|e| HostError::io("creating", dir, e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(LAYER_DIR_MODE))
        .map_err(|e| HostError::io("setting the mode of", dir, e))?;
    for e in entries {
        let rel = match e {
            Entry::Copy { rel, .. } | Entry::Symlink { rel, .. } | Entry::Data { rel, .. } => rel,
        };
        let dst = dir.join(rel);
        if let Some(parent) = dst.parent() {
            DirBuilder::new()
                .recursive(true)
                .mode(LAYER_DIR_MODE)
                .create(parent)
                .map_err(|e| HostError::io("creating", parent, e))?;
        }
        match e {
            Entry::Copy { src, required, .. } => {
                if std::fs::symlink_metadata(src).is_err() {
                    if *required {
                        return Err(HostError::Unfit(format!(
                            "the system mount source {} does not exist",
                            src.display()
                        )));
                    }
                    continue;
                }
                remove_any(&dst);
                copy_tree(src, &dst)?;
            }
            Entry::Symlink { target, .. } => {
                remove_any(&dst);
                std::os::unix::fs::symlink(target, &dst)
                    .map_err(|e| HostError::io("creating the link", &dst, e))?;
            }
            Entry::Data { content, .. } => {
                remove_any(&dst);
                std::fs::write(&dst, content).map_err(|e| HostError::io("writing", &dst, e))?;
                std::fs::set_permissions(
                    &dst,
                    std::fs::Permissions::from_mode(GENERATED_FILE_MODE),
                )
                .map_err(|e| HostError::io("setting the mode of", &dst, e))?;
            }
        }
    }
    Ok(())
}

/// The prepared /etc layer for `policy`: an existing one when the sources
/// have not changed, else a new one. Errors say what could not be built;
/// the caller then uses the per-file path.
pub(crate) fn etc_layer(policy: &Policy) -> Result<PathBuf, HostError> {
    let entries = entries(policy);
    let fp = fingerprint(&entries);
    let mut layers = LAYERS
        .lock()
        .map_err(|_| HostError::Unfit("the prepared-layer cache is poisoned".into()))?;
    if let Some((_, dir)) = layers.iter().find(|(f, _)| *f == fp) {
        return Ok(dir.clone());
    }
    let base = base_dir()?;
    if layers.is_empty() {
        remove_stale_layers(&base);
    }
    let dir = base.join(format!(
        "etc-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    if let Err(e) = build(&dir, &entries) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    layers.push((fp, dir.clone()));
    if layers.len() > MAX_PREPARED_LAYERS {
        // A layer still bound by a running sandbox stays visible there:
        // removing its host directory does not unmount it.
        let (_, old) = layers.remove(0);
        let _ = std::fs::remove_dir_all(old);
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn policy_with(mounts: Vec<Mount>) -> Policy {
        Policy::new("/work/repo", mounts)
    }

    #[test]
    fn a_layer_copies_the_etc_mounts_and_the_generated_files() {
        let src = std::env::temp_dir().join(format!("pw-layer-src-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&src);
        std::fs::create_dir_all(src.join("conf.d")).unwrap();
        std::fs::write(src.join("ld.so.cache"), "cache").unwrap();
        std::fs::write(src.join("conf.d/a.conf"), "a").unwrap();
        symlink("/usr/lib/x", src.join("conf.d/link")).unwrap();
        let mounts = vec![
            Mount::RoBind {
                src: "/usr".into(),
                dest: "/usr".into(),
            },
            Mount::RoBind {
                src: src.join("ld.so.cache"),
                dest: "/etc/ld.so.cache".into(),
            },
            Mount::RoBindTry {
                src: src.join("conf.d"),
                dest: "/etc/ld.so.conf.d".into(),
            },
            Mount::RoBindTry {
                src: src.join("missing"),
                dest: "/etc/ssl/missing".into(),
            },
            Mount::Symlink {
                target: "/usr/share/zoneinfo/Etc/UTC".into(),
                link: "/etc/localtime".into(),
            },
            // A host file at /etc/passwd is covered by the generated one.
            Mount::RoBind {
                src: src.join("ld.so.cache"),
                dest: "/etc/passwd".into(),
            },
        ];
        let mut policy = policy_with(mounts);
        policy.local_hosts = vec!["example.org".into()];
        let dir = etc_layer(&policy).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        assert_eq!(read("ld.so.cache"), "cache");
        assert_eq!(read("ld.so.conf.d/a.conf"), "a");
        assert_eq!(
            std::fs::read_link(dir.join("ld.so.conf.d/link")).unwrap(),
            PathBuf::from("/usr/lib/x")
        );
        assert_eq!(
            std::fs::read_link(dir.join("localtime")).unwrap(),
            PathBuf::from("/usr/share/zoneinfo/Etc/UTC")
        );
        assert_eq!(read("passwd"), PASSWD_CONTENT);
        assert_eq!(read("group"), GROUP_CONTENT);
        assert_eq!(read("hosts"), policy.hosts_content());
        assert!(!dir.join("ssl/missing").exists());
        assert!(!dir.join("usr").exists());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), LAYER_DIR_MODE);
        assert_eq!(mode(&dir.join("ssl")), LAYER_DIR_MODE);
        assert_eq!(mode(&dir.join("passwd")), GENERATED_FILE_MODE);
        // Unchanged sources: the same layer; a changed source: a new one.
        assert_eq!(etc_layer(&policy).unwrap(), dir);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(src.join("ld.so.cache"), "cache, rebuilt").unwrap();
        let again = etc_layer(&policy).unwrap();
        assert_ne!(again, dir);
        assert_eq!(
            std::fs::read_to_string(again.join("ld.so.cache")).unwrap(),
            "cache, rebuilt"
        );
        // A required source that is missing: no layer, and why.
        policy.system_mounts.push(Mount::RoBind {
            src: src.join("gone"),
            dest: "/etc/gone".into(),
        });
        let err = etc_layer(&policy).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "the system mount source {} does not exist",
                src.join("gone").display()
            )
        );
        let _ = std::fs::remove_dir_all(&src);
    }
}
