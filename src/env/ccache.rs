//! The compiler cache of an environment: repositories with C extensions
//! (scikit-learn, astropy, matplotlib) compile them again in every task's
//! install, minutes each on a small machine, from sources that are mostly
//! the ones the environment's build compiled. When the host has ccache
//! (its compiler wrappers in [`WRAPPERS`]), the build fills a cache inside
//! the environment and every task's commands read it, read-only: a task's
//! code (a model's patch, its `setup.py`) can never write what another
//! task's build will take. Without ccache nothing changes but the time.

use std::path::{Path, PathBuf};

use patchwright_sandbox as sandbox;

/// Where Debian's ccache puts its `gcc`, `g++`, `cc` wrappers; first on
/// PATH before the system's compilers, they make every compile cached.
pub const WRAPPERS: &str = "/usr/lib/ccache";

/// The cache of the environment at `env_dir`, under its own files.
pub fn dir(env_dir: &Path) -> PathBuf {
    env_dir.join("patchwright").join("ccache")
}

/// Whether the host has ccache's wrappers.
pub fn available() -> bool {
    Path::new(WRAPPERS).join("gcc").exists()
}

/// The variables that make the cache's entries hit from any checkout:
/// paths inside the checkout rewritten relative to the working directory,
/// which is not hashed (each task's checkout has its own path), while the
/// environment's and the interpreter's headers keep the absolute paths
/// every checkout shares (a base directory of `/` would make them relative
/// too, and different for checkouts at different depths); temporary files
/// outside the cache.
fn common(policy: &mut sandbox::Policy, cache: &Path) {
    let checkout = policy.worktree.display().to_string();
    for (k, v) in [
        ("CCACHE_DIR", cache.display().to_string()),
        ("CCACHE_BASEDIR", checkout),
        ("CCACHE_NOHASHDIR", "1".to_string()),
        ("CCACHE_TEMPDIR", "/tmp".to_string()),
    ] {
        policy.env.insert(k.into(), v);
    }
    let path = policy
        .env
        .get("PATH")
        .cloned()
        .unwrap_or_else(|| sandbox::DEFAULT_PATH.to_string());
    policy.env.insert("PATH".into(), with_wrappers(&path));
}

/// `path` with [`WRAPPERS`] before the system's directories (after the
/// environment's `bin/`s, which hold no compilers).
pub fn with_wrappers(path: &str) -> String {
    let system = format!(":{}", sandbox::DEFAULT_PATH);
    match path.strip_suffix(&system) {
        Some(head) => format!("{head}:{WRAPPERS}{system}"),
        None => format!("{WRAPPERS}:{path}"),
    }
}

/// The environment build's policy, given the cache to fill (in the
/// environment's directory, which the build writes).
pub fn for_build(policy: &mut sandbox::Policy, env_dir: &Path) {
    if available() {
        common(policy, &dir(env_dir));
    }
}

/// A task's policy: the environment's cache read, never written (it is
/// bound read-only with the environment).
pub fn for_task(policy: &mut sandbox::Policy, env_dir: &Path) {
    let cache = dir(env_dir);
    if available() && cache.is_dir() {
        common(policy, &cache);
        policy.env.insert("CCACHE_READONLY".into(), "1".into());
        policy.env.insert("CCACHE_NOSTATS".into(), "1".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrappers_come_before_the_system_compilers() {
        let d = sandbox::DEFAULT_PATH;
        assert_eq!(
            with_wrappers(&format!("/l/bin:/e/bin:{d}")),
            format!("/l/bin:/e/bin:{WRAPPERS}:{d}")
        );
        assert_eq!(with_wrappers(d), format!("{WRAPPERS}:{d}"));
    }
}
