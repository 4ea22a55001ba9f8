//! Repositories, offline: finding a task's repository under `--repos DIR` and
//! making an isolated workspace at `base_commit`.
//!
//! Layout of `--repos DIR`, for the task repository `owner/name`, first match
//! wins:
//!
//! - `DIR/owner__name.git`     a bare mirror (`git clone --mirror`);
//! - `DIR/owner__name`         a plain clone (with a `.git` directory);
//! - `DIR/owner__name.bundle`  a git bundle, unpacked once per process into
//!   a temporary bare repository.
//!
//! A workspace is not a `git worktree` of the mirror: a worktree shares the
//! mirror's object store, so an agent could read the fix from later history.
//! Instead the workspace is a fresh repository holding exactly one commit,
//! `base_commit`, fetched shallow (`--depth 1`) from the mirror: no parents,
//! no branches, no tags, no reflogs, no objects of later commits. Fetching
//! transfers only the objects of one tree, so creating it costs about the
//! size of one checkout, never a copy of the history.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("no repository for `{repo}` under {dir}: expected {dir}/{name}.git (bare mirror), {dir}/{name} (clone) or {dir}/{name}.bundle")]
    Missing {
        repo: String,
        dir: PathBuf,
        name: String,
    },
    #[error("`{0}` is not a repository name of the form owner/name")]
    BadName(String),
    #[error("commit {commit} is not in {source_path}: update the mirror (git fetch) or check the task's base_commit")]
    MissingCommit {
        commit: String,
        source_path: PathBuf,
    },
    #[error("git {args} failed in {dir}: {message}")]
    Git {
        args: String,
        dir: PathBuf,
        message: String,
    },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A confined access to a worktree's file was refused or failed (a
    /// symbolic link leading out of it, a missing directory).
    #[error(transparent)]
    Confined(Box<crate::confined::ConfinedError>),
}

impl From<crate::confined::ConfinedError> for RepoError {
    fn from(e: crate::confined::ConfinedError) -> Self {
        // Boxed: the error's paths would make every `RepoError` large.
        RepoError::Confined(Box::new(e))
    }
}

/// The paths a patch changes.
pub fn touched_files(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = patch
        .lines()
        .filter_map(|l| l.strip_prefix("diff --git a/"))
        .filter_map(|l| l.split(" b/").next())
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `owner/name` → `owner__name`, SWE-bench's convention for instance ids.
pub fn mirror_name(repo: &str) -> Option<String> {
    let (owner, name) = repo.split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    (ok(owner) && ok(name)).then(|| format!("{owner}__{name}"))
}

/// The repositories of one `--repos DIR`.
pub struct Repos {
    dir: PathBuf,
    /// Bundles unpacked so far, by mirror name; lives as long as `Repos`.
    unpacked: Mutex<HashMap<String, PathBuf>>,
    scratch: tempfile::TempDir,
}

impl Repos {
    pub fn new(dir: &Path) -> Result<Self, RepoError> {
        let scratch = tempfile::Builder::new()
            .prefix("patchwright-bundles-")
            .tempdir()
            .map_err(|source| RepoError::Io {
                action: "create a temporary directory for",
                path: std::env::temp_dir(),
                source,
            })?;
        Ok(Repos {
            dir: dir.to_path_buf(),
            unpacked: Mutex::new(HashMap::new()),
            scratch,
        })
    }

    /// The git directory (or clone) that holds `repo`'s history.
    pub fn locate(&self, repo: &str) -> Result<PathBuf, RepoError> {
        let name = mirror_name(repo).ok_or_else(|| RepoError::BadName(repo.into()))?;
        let bare = self.dir.join(format!("{name}.git"));
        if bare.is_dir() {
            return Ok(bare);
        }
        let clone = self.dir.join(&name);
        if clone.join(".git").exists() {
            return Ok(clone);
        }
        let bundle = self.dir.join(format!("{name}.bundle"));
        if bundle.is_file() {
            return self.unbundle(&name, &bundle);
        }
        Err(RepoError::Missing {
            repo: repo.into(),
            dir: self.dir.clone(),
            name,
        })
    }

    fn unbundle(&self, name: &str, bundle: &Path) -> Result<PathBuf, RepoError> {
        let mut unpacked = self.unpacked.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(path) = unpacked.get(name) {
            return Ok(path.clone());
        }
        let dest = self.scratch.path().join(format!("{name}.git"));
        unbundle(bundle, &dest)?;
        unpacked.insert(name.to_string(), dest.clone());
        Ok(dest)
    }
}

/// Unpacks the git bundle at `bundle` into a new bare repository `dest`,
/// its heads as refs. A shallow bundle (as [`bundle_commits`] writes: its
/// commits without their parents) cannot be cloned, since a clone checks
/// that history is complete; its objects are indexed instead, and every
/// commit whose parent is missing is recorded as a shallow boundary, as a
/// `--depth` fetch would have.
pub fn unbundle(bundle: &Path, dest: &Path) -> Result<(), RepoError> {
    let bundle = absolute(bundle)?;
    std::fs::create_dir_all(dest).map_err(|source| RepoError::Io {
        action: "create",
        path: dest.to_path_buf(),
        source,
    })?;
    git(
        dest,
        &["init", "--quiet", "--bare", "--template="].map(AsRef::as_ref),
    )?;
    let heads = git(
        dest,
        &["bundle".as_ref(), "unbundle".as_ref(), bundle.as_os_str()],
    )?;
    for line in heads.lines() {
        if let Some((id, name)) = line.split_once(' ') {
            if name.starts_with("refs/") {
                git(dest, &["update-ref", name, id].map(AsRef::as_ref))?;
            }
        }
    }
    let objects = git(
        dest,
        &["cat-file", "--batch-all-objects", "--batch-check"].map(AsRef::as_ref),
    )?;
    let commits: Vec<&str> = objects.lines().filter_map(commit_id).collect();
    if commits.is_empty() {
        return Ok(());
    }
    let present: std::collections::HashSet<&str> = commits.iter().copied().collect();
    let mut args = vec!["log", "--no-walk=unsorted", "--format=%H %P"];
    args.extend(commits.iter().copied());
    let parents = git(dest, &args.iter().map(AsRef::as_ref).collect::<Vec<_>>())?;
    let shallow: Vec<&str> = parents
        .lines()
        .filter_map(|l| {
            let mut ids = l.split(' ').filter(|s| !s.is_empty());
            let id = ids.next()?;
            ids.any(|p| !present.contains(p)).then_some(id)
        })
        .collect();
    if !shallow.is_empty() {
        let path = dest.join("shallow");
        let text: String = shallow.iter().map(|id| format!("{id}\n")).collect();
        std::fs::write(&path, text).map_err(|source| RepoError::Io {
            action: "write",
            path,
            source,
        })?;
    }
    Ok(())
}

/// The object id of a `git cat-file --batch-check` line naming a commit.
fn commit_id(line: &str) -> Option<&str> {
    let mut parts = line.split(' ');
    let id = parts.next()?;
    (parts.next() == Some("commit")).then_some(id)
}

/// Writes to `dest` a git bundle of exactly `commits` of the repository at
/// `source`, shallow: each commit with its tree, no parents, no other
/// history (the fix of a task lives in later commits; an air-gapped copy
/// needs only the commits its tasks start from). Each commit is a ref
/// `refs/patchwright/<id>` of the bundle. Returns the full ids.
pub fn bundle_commits(
    source: &Path,
    commits: &[String],
    dest: &Path,
) -> Result<Vec<String>, RepoError> {
    let source = absolute(source)?;
    let mut full: Vec<String> = commits
        .iter()
        .map(|c| resolve_commit(&source, c))
        .collect::<Result<_, _>>()?;
    full.sort();
    full.dedup();
    let scratch = tempfile::Builder::new()
        .prefix("patchwright-bundle-")
        .tempdir()
        .map_err(|source| RepoError::Io {
            action: "create a temporary directory for",
            path: std::env::temp_dir(),
            source,
        })?;
    let repo = scratch.path();
    git(
        repo,
        &["init", "--quiet", "--bare", "--template="].map(AsRef::as_ref),
    )?;
    fetch_shallow(repo, &source, &full)?;
    for id in &full {
        git(
            repo,
            &["update-ref", &format!("refs/patchwright/{id}"), id].map(AsRef::as_ref),
        )?;
    }
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|source| RepoError::Io {
            action: "create",
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let tmp = dest.with_extension("bundle.part");
    let dest_tmp = absolute(&tmp)?;
    git(
        repo,
        &[
            "bundle".as_ref(),
            "create".as_ref(),
            "--quiet".as_ref(),
            dest_tmp.as_os_str(),
            "--all".as_ref(),
        ],
    )?;
    std::fs::rename(&tmp, dest).map_err(|source| RepoError::Io {
        action: "rename into place",
        path: dest.to_path_buf(),
        source,
    })?;
    Ok(full)
}

/// Fetches `commits` (full ids) of the repository at `source` into the
/// repository at `dest`, each with its tree and no parents (`--depth=1`).
fn fetch_shallow(dest: &Path, source: &Path, commits: &[String]) -> Result<(), RepoError> {
    let fetch = git_command()
        .current_dir(dest)
        // upload-pack (run on the source) must allow a want by object id.
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "uploadpack.allowAnySHA1InWant")
        .env("GIT_CONFIG_VALUE_0", "true")
        .args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--depth=1",
        ])
        .arg(source)
        .args(commits)
        .output();
    check("fetch --depth=1", dest, fetch)?;
    Ok(())
}

/// The commits a git bundle file names as its heads.
pub fn bundle_heads(bundle: &Path) -> Result<Vec<String>, RepoError> {
    let text = std::fs::read(bundle).map_err(|source| RepoError::Io {
        action: "read",
        path: bundle.to_path_buf(),
        source,
    })?;
    // The header: a signature line, then `[-]<id> <ref>` lines, then an
    // empty line before the pack.
    let end = text
        .windows(2)
        .position(|w| w == b"\n\n")
        .unwrap_or(text.len().min(1 << 20));
    let header = String::from_utf8_lossy(&text[..end]);
    let mut lines = header.lines();
    if !lines
        .next()
        .is_some_and(|l| l.starts_with("# v2 git bundle") || l.starts_with("# v3 git bundle"))
    {
        return Err(RepoError::Git {
            args: "bundle".into(),
            dir: bundle.to_path_buf(),
            message: "not a git bundle (no `# v2 git bundle` signature)".into(),
        });
    }
    Ok(lines
        .filter(|l| !l.starts_with('-') && !l.starts_with('@'))
        .filter_map(|l| l.split_once(' ').map(|(id, _)| id.to_string()))
        .collect())
}

/// A task's working copy: a one-commit repository at `base_commit`.
pub struct Workspace {
    path: PathBuf,
    base_commit: String,
}

impl Workspace {
    /// Creates `dest` (replacing whatever is there) holding `commit` of the
    /// repository at `source`.
    pub fn create(source: &Path, commit: &str, dest: &Path) -> Result<Workspace, RepoError> {
        if dest.exists() {
            remove_dir(dest)?;
        }
        std::fs::create_dir_all(dest).map_err(|source| RepoError::Io {
            action: "create workspace",
            path: dest.to_path_buf(),
            source,
        })?;
        let source = absolute(source)?;
        // No template: no sample hooks. No reflogs: nothing records history.
        git(
            dest,
            &["init", "--quiet", "--template=", "--initial-branch=base"].map(AsRef::as_ref),
        )?;
        git(
            dest,
            &["config", "core.logAllRefUpdates", "false"].map(AsRef::as_ref),
        )?;
        git(dest, &["config", "gc.auto", "0"].map(AsRef::as_ref))?;
        let full = resolve_commit(&source, commit)?;
        fetch_shallow(dest, &source, std::slice::from_ref(&full))?;
        git(
            dest,
            &["checkout", "--quiet", "--detach", full.as_str()].map(AsRef::as_ref),
        )?;
        Ok(Workspace {
            path: dest.to_path_buf(),
            base_commit: full,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn base_commit(&self) -> &str {
        &self.base_commit
    }

    /// `git diff` against `base_commit` of everything in the working tree,
    /// new files included, in the form SWE-bench expects (a/ b/ prefixes).
    pub fn diff(&self) -> Result<String, RepoError> {
        diff_against(&self.path, &self.base_commit)
    }

    /// A second workspace at `dest` with the same commit (a local clone
    /// sharing this one's objects), for trying a candidate patch.
    pub fn clone_to(&self, dest: &Path) -> Result<Workspace, RepoError> {
        if dest.exists() {
            remove_dir(dest)?;
        }
        let out = git_command()
            .args([
                "clone",
                "--quiet",
                "--shared",
                "--no-checkout",
                "--template=",
            ])
            .arg(&self.path)
            .arg(dest)
            .output();
        check("clone --shared", &self.path, out)?;
        git(
            dest,
            &["checkout", "--quiet", "--detach", self.base_commit.as_str()].map(AsRef::as_ref),
        )?;
        Ok(Workspace {
            path: dest.to_path_buf(),
            base_commit: self.base_commit.clone(),
        })
    }

    /// Deletes the workspace directory.
    pub fn remove(self) -> Result<(), RepoError> {
        remove_dir(&self.path)
    }
}

/// `git diff` of the working tree of the repository at `dir` against
/// `base`, new files included, in the form SWE-bench expects (a/ b/
/// prefixes, binary changes as binary patches). It stages into a
/// temporary index, so the repository's own index (what a person using
/// `patchwright aci` on their clone has staged) is left alone.
pub fn diff_against(dir: &Path, base: &str) -> Result<String, RepoError> {
    let scratch = tempfile::tempdir().map_err(|source| RepoError::Io {
        action: "create a temporary git index for",
        path: dir.to_path_buf(),
        source,
    })?;
    let index = scratch.path().join("index");
    let run = |args: &[&str]| {
        let out = git_command()
            .current_dir(dir)
            .env("GIT_INDEX_FILE", &index)
            .args(args)
            .output();
        check(args.first().copied().unwrap_or("git"), dir, out)
    };
    run(&["read-tree", base])?;
    run(&["add", "--all"])?;
    run(&[
        "diff",
        "--cached",
        "--binary",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        base,
    ])
}

/// Puts the working tree of the repository at `dir` back to its HEAD:
/// changes to tracked files undone, and everything HEAD does not have
/// removed — untracked and ignored files, nested repositories (a directory
/// with a `.git` directory or file), links (as links: `git clean` never
/// follows one) — except the products of the repository's install that
/// [`keep_install_products`] listed: an editable install's `*.egg-info`,
/// compiled extensions built in place, `build/`. The environment needs
/// those, and removing them would make every later test run import a
/// broken package.
pub fn reset_worktree(dir: &Path) -> Result<(), RepoError> {
    git(
        dir,
        &["checkout", "--quiet", "--force", "--", "."].map(AsRef::as_ref),
    )?;
    let mut args: Vec<String> = ["clean", "-ffdxq"].map(String::from).to_vec();
    for pattern in kept_patterns(dir)? {
        args.push("-e".into());
        args.push(pattern);
    }
    let args: Vec<&std::ffi::OsStr> = args.iter().map(AsRef::as_ref).collect();
    git(dir, &args)?;
    Ok(())
}

/// The heading in `.git/info/exclude` under which [`keep_install_products`]
/// lists what the install left in the worktree.
pub const INSTALL_PRODUCTS_HEADING: &str = "# left by patchwright's install of the repository";

/// Where the list of install products lives, relative to the worktree:
/// git's own exclude file, so `git status`, `git add --all` and the patch
/// (`diff_against`) leave them out too.
const EXCLUDE_FILE: &str = ".git/info/exclude";

/// Lists in `.git/info/exclude` everything the repository's install left
/// in the worktree at `dir` (untracked and ignored files; whole untracked
/// directories as one entry), so [`reset_worktree`] keeps them and the
/// patch leaves them out. Written through [`crate::confined`]: the install
/// ran repository code that could have planted links.
pub fn keep_install_products(dir: &Path) -> Result<(), RepoError> {
    let out = git(
        dir,
        &["ls-files", "--others", "--directory", "-z"].map(AsRef::as_ref),
    )?;
    let listed: Vec<&str> = out.split('\0').filter(|p| !p.is_empty()).collect();
    if listed.is_empty() {
        return Ok(());
    }
    let root = crate::confined::Root::open(dir)?;
    let mut text = match root.read_to_string(EXCLUDE_FILE) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => String::new(),
        Err(e) => return Err(e.into()),
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(INSTALL_PRODUCTS_HEADING);
    text.push('\n');
    for path in listed {
        text.push_str(&exclude_pattern(path));
        text.push('\n');
    }
    root.create_dir_all(".git/info")?;
    root.write(EXCLUDE_FILE, text)?;
    Ok(())
}

/// The patterns listed under [`INSTALL_PRODUCTS_HEADING`] in the worktree's
/// exclude file (none when it has none).
fn kept_patterns(dir: &Path) -> Result<Vec<String>, RepoError> {
    let root = crate::confined::Root::open(dir)?;
    let text = match root.read_to_string(EXCLUDE_FILE) {
        Ok(t) => t,
        // No list, or `.git` a file (a `git worktree` someone made): no
        // install of patchwright's ran here.
        Err(e) if e.is_not_found() || e.is_not_a_directory() => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut kept = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with('#') {
            inside = line == INSTALL_PRODUCTS_HEADING;
        } else if inside && !line.trim().is_empty() {
            kept.push(line.to_string());
        }
    }
    Ok(kept)
}

/// A gitignore pattern matching exactly the repository path `path`
/// (anchored at the root; wildcards, backslashes and trailing spaces
/// escaped).
fn exclude_pattern(path: &str) -> String {
    let mut out = String::from("/");
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | '\\' | ' ') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The untracked files of the working tree at `dir` (ignored ones not
/// listed), as repository paths.
pub fn untracked_files(dir: &Path) -> Result<Vec<String>, RepoError> {
    let out = git(
        dir,
        &["ls-files", "--others", "--exclude-standard", "-z"].map(AsRef::as_ref),
    )?;
    Ok(out
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect())
}

/// Commits everything in the working tree at `dir` (ignored files stay
/// out), so that [`reset_worktree`] comes back to this state.
pub fn commit_all(dir: &Path, message: &str) -> Result<(), RepoError> {
    git(dir, &["add", "--all"].map(AsRef::as_ref))?;
    git(
        dir,
        &[
            "-c",
            "user.name=patchwright",
            "-c",
            "user.email=patchwright@localhost",
            "commit",
            "--quiet",
            "--allow-empty",
            "--no-verify",
            "-m",
            message,
        ]
        .map(AsRef::as_ref),
    )?;
    Ok(())
}

/// Puts `paths` (relative to the worktree at `dir`) back as they are at
/// HEAD; a path HEAD does not have is removed (a link as a link). The
/// removal goes through [`crate::confined`]: when a model's patch made a
/// directory on the way a symbolic link, nothing is followed and the
/// error names the link.
pub fn restore_paths(dir: &Path, paths: &[String]) -> Result<(), RepoError> {
    let root = crate::confined::Root::open(dir)?;
    for p in paths {
        let at_head = git_command()
            .current_dir(dir)
            .args(["cat-file", "-e", &format!("HEAD:{p}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if at_head {
            git(
                dir,
                &["checkout", "--quiet", "HEAD", "--", p].map(AsRef::as_ref),
            )?;
        } else {
            match root.remove_dir_all(p) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Applies `patch` to the working tree at `dir` (`git apply`).
pub fn apply_patch(dir: &Path, patch: &str) -> Result<(), RepoError> {
    use std::io::Write;
    let mut child = git_command()
        .current_dir(dir)
        .args(["apply", "--whitespace=nowarn", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| RepoError::Git {
            args: "apply".into(),
            dir: dir.to_path_buf(),
            message: format!("cannot run git: {e} (install git)"),
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A write error shows up as git's own failure below.
        let _ = stdin.write_all(patch.as_bytes());
    }
    check("apply", dir, child.wait_with_output())?;
    Ok(())
}

/// The content of `path` at `commit` in the repository at `source`.
pub fn show_file(source: &Path, commit: &str, path: &str) -> Result<String, RepoError> {
    let out = git_command()
        .arg("--git-dir")
        .arg(git_dir(source))
        .args(["show", &format!("{commit}:{path}")])
        .output();
    check("show", source, out)
}

/// Whether any of `paths` differs between commits `a` and `b` of the
/// repository at `source`.
pub fn paths_differ(source: &Path, a: &str, b: &str, paths: &[&str]) -> Result<bool, RepoError> {
    let out = git_command()
        .arg("--git-dir")
        .arg(git_dir(source))
        .args(["diff", "--quiet", a, b, "--"])
        .args(paths)
        .output()
        .map_err(|e| RepoError::Git {
            args: "diff --quiet".into(),
            dir: source.to_path_buf(),
            message: format!("cannot run git: {e} (install git)"),
        })?;
    match out.status.code() {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(RepoError::Git {
            args: "diff --quiet".into(),
            dir: source.to_path_buf(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }),
    }
}

/// The full id of the commit checked out in the repository at `dir`.
pub fn head_commit(dir: &Path) -> Result<String, RepoError> {
    Ok(
        git(dir, &["rev-parse", "--verify", "HEAD"].map(AsRef::as_ref))?
            .trim()
            .to_string(),
    )
}

/// Expands an abbreviated commit id and checks it exists in `source`.
fn resolve_commit(source: &Path, commit: &str) -> Result<String, RepoError> {
    let spec = format!("{commit}^{{commit}}");
    let out = git_command()
        .arg("--git-dir")
        .arg(git_dir(source))
        .args(["rev-parse", "--verify", "--quiet", &spec])
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        Ok(_) => Err(RepoError::MissingCommit {
            commit: commit.into(),
            source_path: source.to_path_buf(),
        }),
        Err(e) => Err(RepoError::Git {
            args: "rev-parse".into(),
            dir: source.to_path_buf(),
            message: format!("cannot run git: {e} (install git)"),
        }),
    }
}

/// `git` isolated from the host's git setup: no system or user config (no
/// `core.hooksPath`, no aliases, no diff drivers), no repository named by
/// the environment, no prompts.
pub(crate) fn git_command() -> Command {
    let mut cmd = Command::new("git");
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CEILING_DIRECTORIES",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0");
    cmd
}

fn git_dir(source: &Path) -> PathBuf {
    let dotgit = source.join(".git");
    if dotgit.exists() {
        dotgit
    } else {
        source.to_path_buf()
    }
}

fn absolute(path: &Path) -> Result<PathBuf, RepoError> {
    std::path::absolute(path).map_err(|source| RepoError::Io {
        action: "resolve",
        path: path.to_path_buf(),
        source,
    })
}

fn remove_dir(path: &Path) -> Result<(), RepoError> {
    std::fs::remove_dir_all(path).map_err(|source| RepoError::Io {
        action: "remove workspace",
        path: path.to_path_buf(),
        source,
    })
}

/// Runs a git command in `dir` and returns its stdout.
fn git(dir: &Path, args: &[&std::ffi::OsStr]) -> Result<String, RepoError> {
    let out = git_command().current_dir(dir).args(args).output();
    let name = args
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    check(&name, dir, out)
}

fn check(args: &str, dir: &Path, out: std::io::Result<Output>) -> Result<String, RepoError> {
    match out {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(RepoError::Git {
            args: args.into(),
            dir: dir.to_path_buf(),
            message: String::from_utf8_lossy(&o.stderr).trim().to_string(),
        }),
        Err(e) => Err(RepoError::Git {
            args: args.into(),
            dir: dir.to_path_buf(),
            message: format!("cannot run git: {e} (install git)"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, script: &str) -> String {
        let out = Command::new("sh")
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .args(["-ec", script])
            .output()
            .expect("sh runs");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A repository with a base commit and a later "fix" commit on a branch
    /// and a tag, like a SWE-bench mirror.
    fn upstream(root: &Path) -> (PathBuf, String, String) {
        let up = root.join("up");
        std::fs::create_dir_all(&up).unwrap();
        sh(&up, "git init -q -b main . && echo 'x = 1' > a.py && mkdir pkg && echo 'y = 2' > pkg/b.py && git add -A && git commit -qm base");
        let base = sh(&up, "git rev-parse HEAD");
        sh(
            &up,
            "echo 'x = 2  # the fix' > a.py && git commit -qam fix && git tag v1",
        );
        let fix = sh(&up, "git rev-parse HEAD");
        (up, base, fix)
    }

    #[test]
    fn mirror_names() {
        let cases = [
            ("django/django", Some("django__django")),
            ("psf/requests", Some("psf__requests")),
            ("a/b/c", None),
            ("noslash", None),
            ("../x", None),
            ("a/..", None),
            ("a/ b", None),
        ];
        for (repo, expected) in cases {
            assert_eq!(mirror_name(repo).as_deref(), expected, "{repo}");
        }
    }

    #[test]
    fn a_shallow_bundle_holds_exactly_its_commits_and_makes_workspaces() {
        let root = tempfile::tempdir().unwrap();
        let (up, base, fix) = upstream(root.path());
        // A middle commit, so that `base` is not the root and `fix` has a
        // parent outside the bundle.
        sh(
            &up,
            "echo 'z = 3' > c.py && git add c.py && git commit -qm more",
        );
        let more = sh(&up, "git rev-parse HEAD");
        let bundle = root.path().join("repos/o__r.bundle");
        let ids = bundle_commits(&up, &[more.clone(), base[..10].to_string()], &bundle).unwrap();
        let mut want = vec![base.clone(), more.clone()];
        want.sort();
        assert_eq!(ids, want);
        let mut heads = bundle_heads(&bundle).unwrap();
        heads.sort();
        assert_eq!(heads, want);

        let repos = Repos::new(&root.path().join("repos")).unwrap();
        let source = repos.locate("o/r").unwrap();
        // Both commits are there, shallow; the one between them is not.
        let shallow = std::fs::read_to_string(source.join("shallow")).unwrap();
        assert_eq!(shallow.lines().count(), 1, "{shallow}");
        assert!(shallow.contains(&more));
        let present = |id: &str| {
            git_command()
                .arg("--git-dir")
                .arg(&source)
                .args(["cat-file", "-e", id])
                .status()
                .unwrap()
                .success()
        };
        assert!(present(&base) && present(&more));
        assert!(!present(&fix));
        for (commit, a) in [(&base, "x = 1\n"), (&more, "x = 2  # the fix\n")] {
            let ws = Workspace::create(&source, commit, &root.path().join("ws")).unwrap();
            assert_eq!(std::fs::read_to_string(ws.path().join("a.py")).unwrap(), a);
            ws.remove().unwrap();
        }
        assert!(!paths_differ(&source, &base, &more, &["pkg/b.py"]).unwrap());
        assert!(paths_differ(&source, &base, &more, &["a.py"]).unwrap());
        // Not a bundle: refused with the reason.
        std::fs::write(root.path().join("junk.bundle"), "junk").unwrap();
        assert!(bundle_heads(&root.path().join("junk.bundle")).is_err());
    }

    #[test]
    fn workspace_cannot_reach_later_history() {
        let root = tempfile::tempdir().unwrap();
        let (up, base, fix) = upstream(root.path());
        let mirror = root.path().join("repos/o__r.git");
        sh(
            root.path(),
            &format!(
                "git clone -q --mirror {} {}",
                up.display(),
                mirror.display()
            ),
        );
        let repos = Repos::new(&root.path().join("repos")).unwrap();
        let source = repos.locate("o/r").unwrap();
        let ws = Workspace::create(&source, &base[..10], &root.path().join("ws")).unwrap();
        let dir = ws.path();
        assert_eq!(ws.base_commit(), base);
        assert_eq!(
            std::fs::read_to_string(dir.join("a.py")).unwrap(),
            "x = 1\n"
        );
        assert_eq!(sh(dir, "git rev-parse HEAD"), base);
        // The fix commit and its objects are absent; no refs, tags or logs.
        let fix_blob = sh(&up, "git rev-parse HEAD:a.py");
        for object in [&fix, &fix_blob] {
            let found = git_command()
                .current_dir(dir)
                .args(["cat-file", "-e", object])
                .status()
                .unwrap();
            assert!(!found.success(), "{object} must not be reachable");
        }
        assert_eq!(sh(dir, "git for-each-ref"), "");
        assert_eq!(sh(dir, "git log --all --format=%H"), base);
        assert!(!dir.join(".git/logs").exists());
        assert!(!dir.join(".git/FETCH_HEAD").exists());
        let hooks = std::fs::read_dir(dir.join(".git/hooks"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(hooks, 0);
    }

    #[test]
    fn diff_includes_new_files_and_clone_and_bundle_layouts_work() {
        let root = tempfile::tempdir().unwrap();
        let (up, base, _) = upstream(root.path());
        let repos_dir = root.path().join("repos");
        std::fs::create_dir_all(&repos_dir).unwrap();
        sh(
            root.path(),
            &format!("git clone -q {} repos/o__clone", up.display()),
        );
        sh(
            &up,
            &format!(
                "git bundle create {}/o__bundled.bundle --all 2>/dev/null",
                repos_dir.display()
            ),
        );
        let repos = Repos::new(&repos_dir).unwrap();
        for name in ["o/clone", "o/bundled"] {
            let source = repos.locate(name).unwrap();
            let ws = Workspace::create(&source, &base, &root.path().join("ws")).unwrap();
            std::fs::write(ws.path().join("a.py"), "x = 3\n").unwrap();
            std::fs::write(ws.path().join("pkg/new.py"), "z = 1\n").unwrap();
            let diff = ws.diff().unwrap();
            assert!(diff.contains("diff --git a/a.py b/a.py\n"), "{diff}");
            assert!(diff.contains("-x = 1\n+x = 3\n"), "{diff}");
            assert!(
                diff.contains("diff --git a/pkg/new.py b/pkg/new.py\nnew file mode 100644\n"),
                "{diff}"
            );
            // The diff applies to the base commit.
            let check = root.path().join("check");
            let _ = std::fs::remove_dir_all(&check);
            sh(
                root.path(),
                &format!(
                    "git clone -q {} check && cd check && git checkout -q {base}",
                    up.display()
                ),
            );
            std::fs::write(check.join("p.diff"), &diff).unwrap();
            sh(&check, "git apply p.diff && grep -q 'x = 3' a.py");
            let path = ws.path().to_path_buf();
            ws.remove().unwrap();
            assert!(!path.exists());
        }
    }

    #[test]
    fn missing_repository_and_commit_are_named() {
        let root = tempfile::tempdir().unwrap();
        let (up, _, _) = upstream(root.path());
        let repos_dir = root.path().join("repos");
        std::fs::create_dir_all(&repos_dir).unwrap();
        sh(
            root.path(),
            &format!("git clone -q --mirror {} repos/o__r.git", up.display()),
        );
        let repos = Repos::new(&repos_dir).unwrap();
        let err = repos.locate("o/absent").unwrap_err().to_string();
        assert!(
            err.contains("no repository for `o/absent`") && err.contains("o__absent.git"),
            "{err}"
        );
        let source = repos.locate("o/r").unwrap();
        let bogus = "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef";
        let err = Workspace::create(&source, bogus, &root.path().join("ws"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(&format!("commit {bogus} is not in")), "{err}");
    }
}
