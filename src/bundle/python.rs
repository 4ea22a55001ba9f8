//! Interpreters in a bundle: a copy of the host's Python installation
//! (pyenv's, or any `--python PREFIX`), made relocatable, so that the
//! offline machine needs no Python of its own and no pyenv.
//!
//! Why a copy of the host's tree rather than python-build-standalone:
//! those builds come from GitHub releases, which the connected hosts this
//! program is made for may not reach (PyPI is reachable, GitHub's release
//! assets are not, here); the host's interpreters are the ones the
//! environments were validated with, and CPython finds its standard
//! library relative to its executable. What is not relative is the
//! absolute RUNPATH an `--enable-shared` build (pyenv's default) gives the
//! executable and its extension modules; it is rewritten to `$ORIGIN`-
//! relative paths ([`super::elf`]). Left out of the copy: the standard
//! library's own test suite, `__pycache__`, the static `libpython*.a`, and
//! whatever was installed into the interpreter's `site-packages`
//! (environments are virtualenvs that never see it).

use std::path::{Path, PathBuf};

use super::elf;
use super::BundleError;
use crate::env::build::Interpreter;

/// Written last into a copied interpreter's directory.
pub const MARKER: &str = ".patchwright-python.json";

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Copied {
    pub version: String,
    /// The prefix it was copied from.
    pub source: PathBuf,
    /// Files whose RUNPATH was rewritten.
    pub relocated: usize,
}

/// Whether the copy at `dest` is complete.
pub fn is_copied(dest: &Path) -> bool {
    dest.join(MARKER).is_file()
}

/// Copies `interpreter`'s installation to `dest` (replacing an incomplete
/// copy) and makes it relocatable.
pub fn copy(interpreter: &Interpreter, dest: &Path) -> Result<Copied, BundleError> {
    if dest.exists() {
        std::fs::remove_dir_all(dest).map_err(super::io("remove the incomplete", dest))?;
    }
    let prefix = &interpreter.prefix;
    let mut relocated = 0;
    copy_tree(prefix, dest, Path::new(""), &mut |rel, data| {
        let dir = rel.parent().unwrap_or(Path::new(""));
        let changed = elf::rewrite_search_paths(data, &|entry| {
            let inside = Path::new(entry).strip_prefix(prefix).ok()?;
            Some(elf::origin_relative(dir, inside))
        })
        .map_err(|e| BundleError::Relocate {
            path: prefix.join(rel),
            message: e.to_string(),
        })?;
        relocated += changed as usize;
        Ok(())
    })?;
    let copied = Copied {
        version: interpreter.version.clone(),
        source: prefix.clone(),
        relocated,
    };
    crate::record::write_json(&dest.join(MARKER), &copied)?;
    Ok(copied)
}

/// Whether `rel` (a path inside an installation prefix) is left out of the
/// copy.
fn excluded(rel: &Path) -> bool {
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let name = parts.last().map(String::as_str).unwrap_or("");
    if name == "__pycache__" {
        return true;
    }
    // lib/pythonX.Y/{test,site-packages/*}, lib/pythonX.Y/config-*/libpython*.a
    if parts.len() >= 3 && parts[0] == "lib" && parts[1].starts_with("python") {
        if parts.len() == 3 && parts[2] == "test" {
            return true;
        }
        if parts.len() == 4 && parts[2] == "site-packages" {
            return true;
        }
        if parts.len() == 4 && parts[2].starts_with("config-") && name.ends_with(".a") {
            return true;
        }
    }
    false
}

/// Copies `src` to `dest` recursively: directories, regular files (their
/// permissions kept, each passed through `fix` first), and symbolic links
/// as they are (pyenv's and CPython's own `make install` links are
/// relative, so they stay inside the copy).
/// What [`copy_tree`] passes each file's path and bytes through.
type Fix<'a> = dyn FnMut(&Path, &mut Vec<u8>) -> Result<(), BundleError> + 'a;

fn copy_tree(src: &Path, dest: &Path, rel: &Path, fix: &mut Fix<'_>) -> Result<(), BundleError> {
    std::fs::create_dir_all(dest).map_err(super::io("create", dest))?;
    let mut entries: Vec<_> = std::fs::read_dir(src)
        .map_err(super::io("read", src))?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let rel = rel.join(&name);
        if excluded(&rel) {
            continue;
        }
        let from = entry.path();
        let to = dest.join(&name);
        let meta = std::fs::symlink_metadata(&from).map_err(super::io("stat", &from))?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&from).map_err(super::io("read the link", &from))?;
            std::os::unix::fs::symlink(&target, &to).map_err(super::io("link", &to))?;
        } else if meta.is_dir() {
            copy_tree(&from, &to, &rel, fix)?;
        } else if meta.is_file() {
            let mut data = std::fs::read(&from).map_err(super::io("read", &from))?;
            fix(&rel, &mut data)?;
            std::fs::write(&to, &data).map_err(super::io("write", &to))?;
            std::fs::set_permissions(&to, meta.permissions()).map_err(super::io("chmod", &to))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_copy_leaves_out() {
        let cases = [
            ("lib/python3.9/test", true),
            ("lib/python3.9/test/test_os.py", false), // never reached: its directory is out
            ("lib/python3.9/site-packages/numpy", true),
            ("lib/python3.9/site-packages", false),
            ("lib/python3.9/os.py", false),
            ("lib/python3.9/json/__pycache__", true),
            (
                "lib/python3.9/config-3.9-x86_64-linux-gnu/libpython3.9.a",
                true,
            ),
            ("lib/python3.9/config-3.9-x86_64-linux-gnu/Makefile", false),
            ("lib/libpython3.9.so.1.0", false),
            ("bin/python3.9", false),
        ];
        for (rel, want) in cases {
            assert_eq!(excluded(Path::new(rel)), want, "{rel}");
        }
    }
}
