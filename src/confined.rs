//! Confined file access: reading, writing and removing files of a worktree
//! from the host process without ever leaving the worktree.
//!
//! Sandboxed code (a model's commands, a model's patch, a repository's
//! install) can plant symbolic links in a worktree: `tests` made a link to
//! `/root`, `a.py` a link to `/etc/shadow`. The runner then reads, writes
//! and removes files there *outside* the sandbox, so a plain
//! `std::fs::remove_file(worktree.join("tests/new_test.py"))` would delete
//! a host file. Every such access goes through a [`Root`] instead:
//!
//! - the worktree's directory is opened once, as a descriptor;
//! - a path is relative to it: `..`, an absolute path and the empty path
//!   are refused ([`ConfinedError::BadPath`]);
//! - the directories on the way are opened one at a time with
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
//!   where the kernel has it (Linux 5.6), else component by component with
//!   `openat(O_NOFOLLOW | O_DIRECTORY)`: **no symbolic link is followed**,
//!   not even one that stays inside the worktree (a link is diagnosed, and
//!   the error says whether it leads out of the worktree);
//! - the final operation is the `*at` call on the parent's descriptor
//!   (`openat(O_NOFOLLOW)`, `mkdirat`, `unlinkat`, `renameat`), so a link as
//!   the final component is removed as a link (never its target) and never
//!   read or written through.
//!
//! Following no in-tree link is a decision, not a limit of the method: the
//! files an agent reads and edits are named by their real paths (the
//! viewer lists them without following links), and a rule with no
//! exception cannot be talked around by a chain of links.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

/// Permissions of a file [`Root::write`] creates, before the umask: those
/// of `std::fs::write`.
pub const FILE_MODE: libc::mode_t = 0o666;

/// Permissions of a directory [`Root::create_dir_all`] creates, before the
/// umask: those of `std::fs::create_dir_all`.
pub const DIR_MODE: libc::mode_t = 0o777;

/// Deepest directory tree [`Root::remove_dir_all`] descends: each level
/// holds a descriptor and a stack frame, and no repository of SWE-bench
/// nests a tenth as deep. A deeper tree is refused, not half removed.
pub const MAX_REMOVE_DEPTH: usize = 256;

/// What went wrong with a confined access; every variant names the
/// worktree and the path relative to it.
#[derive(Debug, thiserror::Error)]
pub enum ConfinedError {
    /// The worktree itself could not be opened.
    #[error("cannot open the worktree {root}: {source}")]
    Open {
        root: PathBuf,
        source: std::io::Error,
    },
    /// `..`, an absolute path or the empty path.
    #[error(
        "cannot {action} `{path}` in the worktree {root}: not a relative path inside it \
         (`..`, absolute and empty paths are refused)"
    )]
    BadPath {
        action: &'static str,
        root: PathBuf,
        path: PathBuf,
    },
    /// A component of the path is a symbolic link leading out of the worktree.
    #[error(
        "cannot {action} `{path}` in the worktree {root}: `{link}` is a symbolic link to \
         `{target}`, which leads out of the worktree; refused (nothing outside a worktree \
         is read, written or removed)"
    )]
    LeadsOut {
        action: &'static str,
        root: PathBuf,
        path: PathBuf,
        link: PathBuf,
        target: PathBuf,
    },
    /// A component of the path is a symbolic link inside the worktree.
    #[error(
        "cannot {action} `{path}` in the worktree {root}: `{link}` is a symbolic link (to \
         `{target}`, inside the worktree) and no link is followed; name the file by its real path"
    )]
    Symlink {
        action: &'static str,
        root: PathBuf,
        path: PathBuf,
        link: PathBuf,
        target: PathBuf,
    },
    /// The path is not a regular file where one is needed (a directory, a
    /// FIFO, a device).
    #[error("cannot {action} `{path}` in the worktree {root}: not a regular file")]
    NotRegular {
        action: &'static str,
        root: PathBuf,
        path: PathBuf,
    },
    /// A directory tree deeper than [`MAX_REMOVE_DEPTH`].
    #[error(
        "cannot remove `{path}` in the worktree {root}: deeper than {MAX_REMOVE_DEPTH} \
         directories; remove it by hand"
    )]
    TooDeep { root: PathBuf, path: PathBuf },
    /// The system call failed (a missing file, a permission).
    #[error("cannot {action} `{path}` in the worktree {root}: {source}")]
    Io {
        action: &'static str,
        root: PathBuf,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ConfinedError {
    /// Whether the path (or a directory on its way) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ConfinedError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Whether a directory on the way is not a directory (`ENOTDIR`).
    pub fn is_not_a_directory(&self) -> bool {
        matches!(self, ConfinedError::Io { source, .. }
            if source.raw_os_error() == Some(libc::ENOTDIR))
    }

    /// Whether a symbolic link was refused (leading out or not).
    pub fn is_symlink(&self) -> bool {
        matches!(
            self,
            ConfinedError::LeadsOut { .. } | ConfinedError::Symlink { .. }
        )
    }
}

/// What kind of thing a path names, seen without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// A path's kind and size, from `fstatat(AT_SYMLINK_NOFOLLOW)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    pub len: u64,
}

/// A worktree opened for confined access; see the module's documentation.
#[derive(Debug)]
pub struct Root {
    path: PathBuf,
    fd: OwnedFd,
}

/// A relative path split into the directories on its way and its last name.
struct Split {
    dirs: Vec<CString>,
    name: CString,
}

/// Whether `openat2` works here: unknown, yes, no.
static OPENAT2: AtomicU8 = AtomicU8::new(OPENAT2_UNKNOWN);
const OPENAT2_UNKNOWN: u8 = 0;
const OPENAT2_YES: u8 = 1;
const OPENAT2_NO: u8 = 2;

impl Root {
    /// Opens the worktree at `path` (which the program created; links on
    /// the way to it are the host's own and are followed).
    pub fn open(path: &Path) -> Result<Root, ConfinedError> {
        let open = |source| ConfinedError::Open {
            root: path.to_path_buf(),
            source,
        };
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| open(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
        // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        let fd = owned(fd).map_err(open)?;
        Ok(Root {
            path: path.to_path_buf(),
            fd,
        })
    }

    /// The worktree's path, as given to [`Root::open`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The kind and size of `rel`, or `None` when it (or a directory on its
    /// way) does not exist. A link as the last component is a
    /// [`Kind::Symlink`]; a link on the way is an error.
    pub fn metadata(&self, rel: impl AsRef<Path>) -> Result<Option<Meta>, ConfinedError> {
        let rel = rel.as_ref();
        let action = "look at";
        let (parent, split) = match self.parent(action, rel) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        match stat_at(&parent, &split.name) {
            Ok(st) => Ok(Some(meta_of(&st))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(self.io(action, rel, source)),
        }
    }

    /// Refuses `rel` when any component of it, the last included, is a
    /// symbolic link (the error names the link, its target and whether it
    /// leads out of the worktree); a path that does not exist yet passes.
    pub fn check(&self, rel: impl AsRef<Path>) -> Result<(), ConfinedError> {
        let rel = rel.as_ref();
        let action = "reach";
        let (parent, split) = match self.parent(action, rel) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        match stat_at(&parent, &split.name) {
            Ok(st) if meta_of(&st).kind == Kind::Symlink => {
                let mut all = split.dirs.clone();
                all.push(split.name.clone());
                let loop_error = std::io::Error::from_raw_os_error(libc::ELOOP);
                Err(self.diagnose(action, rel, &parent, &all, loop_error))
            }
            _ => Ok(()),
        }
    }

    /// Whether `rel` exists (a dangling link as the last component does).
    pub fn exists(&self, rel: impl AsRef<Path>) -> Result<bool, ConfinedError> {
        Ok(self.metadata(rel)?.is_some())
    }

    /// The bytes of the regular file `rel`.
    pub fn read(&self, rel: impl AsRef<Path>) -> Result<Vec<u8>, ConfinedError> {
        let rel = rel.as_ref();
        let action = "read";
        let mut file = self.open_file(action, rel, libc::O_RDONLY, 0)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| self.io(action, rel, e))?;
        Ok(bytes)
    }

    /// The text of the regular file `rel` (UTF-8).
    pub fn read_to_string(&self, rel: impl AsRef<Path>) -> Result<String, ConfinedError> {
        let rel = rel.as_ref();
        String::from_utf8(self.read(rel)?).map_err(|_| {
            self.io(
                "read",
                rel,
                std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"),
            )
        })
    }

    /// Writes `bytes` to `rel`, creating or truncating a regular file; its
    /// directory must exist. A link at `rel` is refused, never written
    /// through.
    pub fn write(
        &self,
        rel: impl AsRef<Path>,
        bytes: impl AsRef<[u8]>,
    ) -> Result<(), ConfinedError> {
        let rel = rel.as_ref();
        let action = "write";
        let mut file = self.open_file(
            action,
            rel,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            FILE_MODE,
        )?;
        file.write_all(bytes.as_ref())
            .map_err(|e| self.io(action, rel, e))
    }

    /// Creates the directory `rel` and those on its way that are missing.
    pub fn create_dir_all(&self, rel: impl AsRef<Path>) -> Result<(), ConfinedError> {
        let rel = rel.as_ref();
        let action = "create the directory";
        let names = self.components(action, rel)?;
        let mut dir = self.dup(action, rel)?;
        for (i, name) in names.iter().enumerate() {
            dir = match open_dir_at(&dir, name) {
                Ok(next) => next,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // SAFETY: `dir` is an open directory descriptor and
                    // `name` a NUL-terminated single component.
                    let r = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), DIR_MODE) };
                    if r != 0 {
                        let e = std::io::Error::last_os_error();
                        if e.kind() != std::io::ErrorKind::AlreadyExists {
                            return Err(self.io(action, rel, e));
                        }
                    }
                    open_dir_at(&dir, name)
                        .map_err(|e| self.diagnose(action, rel, &dir, &names[..=i], e))?
                }
                Err(e) => return Err(self.diagnose(action, rel, &dir, &names[..=i], e)),
            };
        }
        Ok(())
    }

    /// Removes `rel` if it is a file or a link (the link itself, never its
    /// target); a directory is refused.
    pub fn remove_file(&self, rel: impl AsRef<Path>) -> Result<(), ConfinedError> {
        let rel = rel.as_ref();
        let action = "remove";
        let (parent, split) = self.parent(action, rel)?;
        unlink_at(&parent, &split.name, 0).map_err(|e| self.io(action, rel, e))
    }

    /// Removes `rel` whatever it is: a directory with everything in it
    /// (links inside removed as links, never followed), a file, a link.
    pub fn remove_dir_all(&self, rel: impl AsRef<Path>) -> Result<(), ConfinedError> {
        let rel = rel.as_ref();
        let action = "remove";
        let (parent, split) = self.parent(action, rel)?;
        self.remove_entry(rel, &parent, &split.name, 0)
    }

    /// Renames `from` to `to` (both relative to the worktree); a link is
    /// moved as a link.
    pub fn rename(
        &self,
        from: impl AsRef<Path>,
        to: impl AsRef<Path>,
    ) -> Result<(), ConfinedError> {
        let (from, to) = (from.as_ref(), to.as_ref());
        let action = "rename";
        let (from_dir, from_split) = self.parent(action, from)?;
        let (to_dir, to_split) = self.parent(action, to)?;
        // SAFETY: both descriptors are open directories and both names
        // NUL-terminated single components that outlive the call.
        let r = unsafe {
            libc::renameat(
                from_dir.as_raw_fd(),
                from_split.name.as_ptr(),
                to_dir.as_raw_fd(),
                to_split.name.as_ptr(),
            )
        };
        if r != 0 {
            return Err(self.io(action, from, std::io::Error::last_os_error()));
        }
        Ok(())
    }

    fn remove_entry(
        &self,
        rel: &Path,
        parent: &OwnedFd,
        name: &CStr,
        depth: usize,
    ) -> Result<(), ConfinedError> {
        let action = "remove";
        let st = stat_at(parent, name).map_err(|e| self.io(action, rel, e))?;
        if meta_of(&st).kind != Kind::Dir {
            return unlink_at(parent, name, 0).map_err(|e| self.io(action, rel, e));
        }
        if depth >= MAX_REMOVE_DEPTH {
            return Err(ConfinedError::TooDeep {
                root: self.path.clone(),
                path: rel.to_path_buf(),
            });
        }
        let dir = open_dir_at(parent, name).map_err(|e| self.io(action, rel, e))?;
        for entry in list_dir(&dir).map_err(|e| self.io("list", rel, e))? {
            let child = rel.join(OsStr::from_bytes(entry.as_bytes()));
            self.remove_entry(&child, &dir, &entry, depth + 1)?;
        }
        unlink_at(parent, name, libc::AT_REMOVEDIR).map_err(|e| self.io(action, rel, e))
    }

    /// Opens the regular file `rel` with `flags` (plus `O_NOFOLLOW`,
    /// `O_CLOEXEC`, `O_NONBLOCK` so a FIFO cannot hang the runner).
    fn open_file(
        &self,
        action: &'static str,
        rel: &Path,
        flags: libc::c_int,
        mode: libc::mode_t,
    ) -> Result<File, ConfinedError> {
        let (parent, split) = self.parent(action, rel)?;
        let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: `parent` is an open directory and `split.name` a
        // NUL-terminated single component; the mode is passed as the
        // variadic argument `openat` reads when O_CREAT is set.
        let fd = unsafe {
            libc::openat(
                parent.as_raw_fd(),
                split.name.as_ptr(),
                flags,
                libc::c_uint::from(mode),
            )
        };
        let fd = match owned(fd) {
            Ok(fd) => fd,
            Err(e) => {
                let mut all = split.dirs.clone();
                all.push(split.name.clone());
                return Err(self.diagnose(action, rel, &parent, &all, e));
            }
        };
        let file = File::from(fd);
        let meta = file.metadata().map_err(|e| self.io(action, rel, e))?;
        if !meta.is_file() {
            return Err(ConfinedError::NotRegular {
                action,
                root: self.path.clone(),
                path: rel.to_path_buf(),
            });
        }
        Ok(file)
    }

    /// The directory holding `rel`'s last component, opened without
    /// following any link, and the split path.
    fn parent(&self, action: &'static str, rel: &Path) -> Result<(OwnedFd, Split), ConfinedError> {
        let mut dirs = self.components(action, rel)?;
        let Some(name) = dirs.pop() else {
            return Err(self.bad(action, rel));
        };
        let split = Split { dirs, name };
        if split.dirs.is_empty() {
            return Ok((self.dup(action, rel)?, split));
        }
        if let Some(fd) = self.openat2_dirs(&split.dirs) {
            return Ok((fd, split));
        }
        let mut dir = self.dup(action, rel)?;
        for (i, name) in split.dirs.iter().enumerate() {
            dir = open_dir_at(&dir, name)
                .map_err(|e| self.diagnose(action, rel, &dir, &split.dirs[..=i], e))?;
        }
        Ok((dir, split))
    }

    /// The directories `dirs` opened in one `openat2` call, or `None`
    /// when the kernel lacks it or it failed (the walk then says why).
    fn openat2_dirs(&self, dirs: &[CString]) -> Option<OwnedFd> {
        if OPENAT2.load(Ordering::Relaxed) == OPENAT2_NO {
            return None;
        }
        let joined: Vec<&[u8]> = dirs.iter().map(|d| d.as_bytes()).collect();
        let path = CString::new(joined.join(&b'/')).ok()?;
        // SAFETY: an all-zero `open_how` is valid (no flags, no mode).
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
        how.resolve =
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: `path` is NUL-terminated, `how` a valid `open_how` whose
        // size is passed; both outlive the call, and the kernel writes
        // nothing through either.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.fd.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        match owned(fd as libc::c_int) {
            Ok(fd) => {
                OPENAT2.store(OPENAT2_YES, Ordering::Relaxed);
                Some(fd)
            }
            Err(e) => {
                // ENOSYS: a kernel before 5.6; EPERM: a seccomp profile
                // (older container runtimes) that does not know the call.
                if OPENAT2.load(Ordering::Relaxed) == OPENAT2_UNKNOWN
                    && matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM))
                {
                    OPENAT2.store(OPENAT2_NO, Ordering::Relaxed);
                }
                None
            }
        }
    }

    /// `rel`'s components as C strings; `..`, absolute paths and the empty
    /// path refused, `.` dropped.
    fn components(&self, action: &'static str, rel: &Path) -> Result<Vec<CString>, ConfinedError> {
        let mut out = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(name) => {
                    out.push(CString::new(name.as_bytes()).map_err(|_| self.bad(action, rel))?)
                }
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(self.bad(action, rel))
                }
            }
        }
        if out.is_empty() {
            return Err(self.bad(action, rel));
        }
        Ok(out)
    }

    /// Why opening the last of `walked` (a component of `rel`, opened in
    /// `dir`) failed: a link named with its target and whether it leads
    /// out of the worktree, else the system's error.
    fn diagnose(
        &self,
        action: &'static str,
        rel: &Path,
        dir: &OwnedFd,
        walked: &[CString],
        error: std::io::Error,
    ) -> ConfinedError {
        let Some(name) = walked.last() else {
            return self.io(action, rel, error);
        };
        let is_link = stat_at(dir, name).is_ok_and(|st| meta_of(&st).kind == Kind::Symlink);
        if !is_link {
            return self.io(action, rel, error);
        }
        let target = read_link_at(dir, name).unwrap_or_default();
        let link: PathBuf = walked
            .iter()
            .map(|c| OsStr::from_bytes(c.as_bytes()))
            .collect();
        let inside = leads_inside(&self.path, &link, &target);
        let (root, path) = (self.path.clone(), rel.to_path_buf());
        if inside {
            ConfinedError::Symlink {
                action,
                root,
                path,
                link,
                target,
            }
        } else {
            ConfinedError::LeadsOut {
                action,
                root,
                path,
                link,
                target,
            }
        }
    }

    fn dup(&self, action: &'static str, rel: &Path) -> Result<OwnedFd, ConfinedError> {
        self.fd.try_clone().map_err(|e| self.io(action, rel, e))
    }

    fn bad(&self, action: &'static str, rel: &Path) -> ConfinedError {
        ConfinedError::BadPath {
            action,
            root: self.path.clone(),
            path: rel.to_path_buf(),
        }
    }

    fn io(&self, action: &'static str, rel: &Path, source: std::io::Error) -> ConfinedError {
        ConfinedError::Io {
            action,
            root: self.path.clone(),
            path: rel.to_path_buf(),
            source,
        }
    }
}

/// Whether the link at `link` (relative to the worktree at `root`) with
/// `target` points inside the worktree, judged from the text alone: an
/// absolute target under `root`, or a relative one that never climbs
/// above the worktree. Only the error's wording depends on it.
fn leads_inside(root: &Path, link: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return target.starts_with(root) && !target.components().any(|c| c == Component::ParentDir);
    }
    let mut depth: usize = link.components().count().saturating_sub(1);
    for c in target.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// `fd` as an owned descriptor, or the error `errno` holds when it is -1.
fn owned(fd: libc::c_int) -> std::io::Result<OwnedFd> {
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned open by the kernel and nothing else
    // owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_dir_at(dir: &OwnedFd, name: &CStr) -> std::io::Result<OwnedFd> {
    // SAFETY: `dir` is an open directory, `name` a NUL-terminated single
    // component.
    owned(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })
}

fn stat_at(dir: &OwnedFd, name: &CStr) -> std::io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of the plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is open, `name` NUL-terminated, `st` a valid
    // destination the kernel fills.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

fn meta_of(st: &libc::stat) -> Meta {
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    };
    Meta {
        kind,
        len: u64::try_from(st.st_size).unwrap_or(0),
    }
}

fn unlink_at(dir: &OwnedFd, name: &CStr, flags: libc::c_int) -> std::io::Result<()> {
    // SAFETY: `dir` is open, `name` a NUL-terminated single component;
    // `unlinkat` never follows a link.
    let r = unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn read_link_at(dir: &OwnedFd, name: &CStr) -> std::io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `buf` is writable for its whole length, which is passed.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    buf.truncate(n);
    Ok(PathBuf::from(OsStr::from_bytes(&buf)))
}

/// The names in the directory `dir` but `.` and `..`.
fn list_dir(dir: &OwnedFd) -> std::io::Result<Vec<CString>> {
    let raw = dir.try_clone()?.into_raw_fd();
    // SAFETY: `raw` is an open directory descriptor owned here; on
    // success `fdopendir` takes it over (closed by `closedir`).
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        let e = std::io::Error::last_os_error();
        // SAFETY: `fdopendir` failed, so `raw` is still ours to close.
        unsafe { libc::close(raw) };
        return Err(e);
    }
    // SAFETY: `stream` is a valid open directory stream; the duplicate
    // shares its offset with `dir`, so start from the beginning.
    unsafe { libc::rewinddir(stream) };
    let mut names = Vec::new();
    let result = loop {
        // SAFETY: errno is thread-local; clearing it tells the end of the
        // stream from an error, as readdir(3) prescribes.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `stream` is valid until `closedir` below.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let e = std::io::Error::last_os_error();
            break if e.raw_os_error() == Some(0) {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: `entry` points to a dirent whose `d_name` is
        // NUL-terminated, valid until the next `readdir` on `stream`.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            names.push(name.to_owned());
        }
    };
    // SAFETY: `stream` is valid and closed exactly once.
    unsafe { libc::closedir(stream) };
    result.map(|()| names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::os::unix::fs::MetadataExt;

    /// What an operation came to.
    #[derive(Debug, PartialEq, Eq)]
    enum Got {
        Ok,
        Bad,
        LeadsOut(&'static str),
        Inside(&'static str),
        NotFound,
        NotADirectory,
        Other,
    }

    fn got(r: Result<(), ConfinedError>) -> String {
        match r {
            Ok(()) => "ok".into(),
            Err(ConfinedError::BadPath { .. }) => "bad".into(),
            Err(ConfinedError::LeadsOut { link, .. }) => format!("out:{}", link.display()),
            Err(ConfinedError::Symlink { link, .. }) => format!("in:{}", link.display()),
            Err(e) if e.is_not_found() => "missing".into(),
            Err(e) if e.is_not_a_directory() => "not a directory".into(),
            Err(e) => format!("other:{e}"),
        }
    }

    fn expect(g: &Got) -> String {
        match g {
            Got::Ok => "ok".into(),
            Got::Bad => "bad".into(),
            Got::LeadsOut(l) => format!("out:{l}"),
            Got::Inside(l) => format!("in:{l}"),
            Got::NotFound => "missing".into(),
            Got::NotADirectory => "not a directory".into(),
            Got::Other => "other".into(),
        }
    }

    type Op = fn(&Root, &Path) -> Result<(), ConfinedError>;

    /// The outside directory's files: name, bytes, mtime.
    fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, i64)> {
        let mut out: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let meta = e.metadata().unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                    meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
                )
            })
            .collect();
        out.sort();
        out
    }

    /// Every operation on every kind of path, with `openat2` and with the
    /// component walk.
    fn table() {
        let base = tempfile::tempdir().unwrap();
        let wt = base.path().join("wt");
        let outside = base.path().join("outside");
        std::fs::create_dir_all(wt.join("pkg/sub")).unwrap();
        std::fs::create_dir_all(wt.join("tree/inner")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "TOP SECRET\n").unwrap();
        std::fs::write(wt.join("pkg/a.py"), "a = 1\n").unwrap();
        std::fs::write(wt.join("pkg/sub/b.py"), "b = 1\n").unwrap();
        std::fs::write(wt.join("tree/inner/c.py"), "c = 1\n").unwrap();
        symlink("../outside", wt.join("out")).unwrap();
        symlink(outside.join("secret"), wt.join("f_out")).unwrap();
        symlink("pkg", wt.join("inlink")).unwrap();
        symlink("nowhere", wt.join("dangling")).unwrap();
        symlink("../../../outside", wt.join("tree/inner/l")).unwrap();
        let before = snapshot(&outside);
        let root = Root::open(&wt).unwrap();
        let abs = outside.join("secret");
        let abs: &'static str = Box::leak(abs.to_string_lossy().into_owned().into_boxed_str());
        let write: Op = |r, p| r.write(p, "pwned\n");
        let read: Op = |r, p| r.read(p).map(|_| ());
        let remove: Op = |r, p| r.remove_file(p);
        let remove_all: Op = |r, p| r.remove_dir_all(p);
        let mkdirs: Op = |r, p| r.create_dir_all(p);
        let meta: Op = |r, p| r.metadata(p).map(|_| ());
        let check: Op = |r, p| r.check(p);
        let rename_to_top: Op = |r, p| r.rename(p, "renamed");
        let cases: &[(&str, Op, &str, Got)] = &[
            ("write a new file", write, "new.py", Got::Ok),
            ("write an existing file", write, "pkg/a.py", Got::Ok),
            ("read a plain file", read, "pkg/sub/b.py", Got::Ok),
            ("read with ./", read, "./pkg/./a.py", Got::Ok),
            ("nested directories", mkdirs, "x/y/z", Got::Ok),
            ("write in them", write, "x/y/z/f.py", Got::Ok),
            ("existing directories", mkdirs, "pkg/sub", Got::Ok),
            ("read a missing file", read, "pkg/none.py", Got::NotFound),
            (
                "write in a missing directory",
                write,
                "none/f.py",
                Got::NotFound,
            ),
            ("a file on the way", read, "pkg/a.py/x", Got::NotADirectory),
            ("read a directory", read, "pkg", Got::Other),
            (
                "remove a directory as a file",
                remove,
                "pkg/sub",
                Got::Other,
            ),
            (".. to outside", write, "../outside/secret", Got::Bad),
            (".. inside", read, "pkg/../pkg/a.py", Got::Bad),
            ("absolute", write, abs, Got::Bad),
            ("empty", write, "", Got::Bad),
            ("only .", remove_all, ".", Got::Bad),
            (
                "parent a link out: write",
                write,
                "out/secret",
                Got::LeadsOut("out"),
            ),
            (
                "parent a link out: read",
                read,
                "out/secret",
                Got::LeadsOut("out"),
            ),
            (
                "parent a link out: remove",
                remove,
                "out/secret",
                Got::LeadsOut("out"),
            ),
            (
                "parent a link out: remove all",
                remove_all,
                "out/secret",
                Got::LeadsOut("out"),
            ),
            (
                "parent a link out: mkdir",
                mkdirs,
                "out/new",
                Got::LeadsOut("out"),
            ),
            (
                "parent a link out: metadata",
                meta,
                "out/secret",
                Got::LeadsOut("out"),
            ),
            (
                "parent a link out: rename",
                rename_to_top,
                "out/secret",
                Got::LeadsOut("out"),
            ),
            (
                "last a link out: read",
                read,
                "f_out",
                Got::LeadsOut("f_out"),
            ),
            (
                "last a link out: write",
                write,
                "f_out",
                Got::LeadsOut("f_out"),
            ),
            (
                "last a link out: check",
                check,
                "f_out",
                Got::LeadsOut("f_out"),
            ),
            (
                "parent a link inside: read",
                read,
                "inlink/a.py",
                Got::Inside("inlink"),
            ),
            (
                "parent a link inside: write",
                write,
                "inlink/a.py",
                Got::Inside("inlink"),
            ),
            (
                "last a dangling link: write",
                write,
                "dangling",
                Got::Inside("dangling"),
            ),
            ("last a dangling link: metadata", meta, "dangling", Got::Ok),
            ("last a dangling link: remove", remove, "dangling", Got::Ok),
            (
                "last a link out: removed as a link",
                remove,
                "f_out",
                Got::Ok,
            ),
            ("a tree holding a link out", remove_all, "tree", Got::Ok),
            ("the link out itself", remove_all, "out", Got::Ok),
            ("rename a file", rename_to_top, "pkg/sub/b.py", Got::Ok),
            ("a plain path passes the check", check, "pkg/a.py", Got::Ok),
            (
                "a missing path passes the check",
                check,
                "no/such/file",
                Got::Ok,
            ),
        ];
        for (name, op, path, want) in cases {
            let result = got(op(&root, Path::new(path)));
            let want = expect(want);
            let same = if want == "other" {
                result.starts_with("other:")
            } else {
                result == want
            };
            assert!(same, "{name} ({path}): got {result}, want {want}");
        }
        assert_eq!(std::fs::read(wt.join("new.py")).unwrap(), b"pwned\n");
        assert_eq!(std::fs::read(wt.join("x/y/z/f.py")).unwrap(), b"pwned\n");
        assert_eq!(std::fs::read(wt.join("renamed")).unwrap(), b"b = 1\n");
        for gone in ["f_out", "dangling", "tree", "out"] {
            assert!(
                wt.join(gone).symlink_metadata().is_err(),
                "{gone} was not removed"
            );
        }
        assert_eq!(snapshot(&outside), before, "the outside directory changed");
    }

    #[test]
    fn every_operation_stays_inside_the_worktree() {
        table();
    }

    #[test]
    fn the_component_walk_alone_stays_inside_too() {
        OPENAT2.store(OPENAT2_NO, Ordering::Relaxed);
        table();
        OPENAT2.store(OPENAT2_UNKNOWN, Ordering::Relaxed);
    }

    #[test]
    fn errors_name_the_worktree_the_path_and_the_link() {
        let base = tempfile::tempdir().unwrap();
        let wt = base.path().join("wt");
        std::fs::create_dir_all(&wt).unwrap();
        symlink("/etc", wt.join("tests")).unwrap();
        let root = Root::open(&wt).unwrap();
        let e = root.remove_file("tests/new_test.py").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot remove `tests/new_test.py` in the worktree {}: `tests` is a symbolic link \
                 to `/etc`, which leads out of the worktree; refused (nothing outside a worktree \
                 is read, written or removed)",
                wt.display()
            )
        );
    }

    #[test]
    fn links_are_judged_inside_or_out_by_their_text() {
        let root = Path::new("/w");
        let cases = [
            ("a", "b", true),
            ("d/a", "../b", true),
            ("d/a", "../../b", false),
            ("a", "../w/b", false),
            ("a", "/w/b", true),
            ("a", "/etc/shadow", false),
            ("a", "/w/../etc", false),
            ("d/e/a", "./../../x", true),
        ];
        for (link, target, inside) in cases {
            assert_eq!(
                leads_inside(root, Path::new(link), Path::new(target)),
                inside,
                "{link} -> {target}"
            );
        }
    }
}
