//! Where the program keeps its own files, one function per directory,
//! each read from the environment the same way (an empty variable counts
//! as unset): the cache ([`cache_dir`]: code indexes, the WASI runtime)
//! and the task environments ([`envs_dir`]). The models directory is
//! [`crate::models::models_dir`]; a bundle brings its own, which the
//! command layer passes down.

use std::ffi::OsString;
use std::path::PathBuf;

/// Moves the cache directory.
pub const CACHE_DIR_ENV: &str = "PATCHWRIGHT_CACHE_DIR";

/// Moves the environments directory.
pub const ENVS_DIR_ENV: &str = "PATCHWRIGHT_ENVS_DIR";

/// The cache under the home directory, the default root of the cache and
/// the environments.
pub const HOME_CACHE: &str = ".cache/patchwright";

/// The program's cache directory: `$PATCHWRIGHT_CACHE_DIR`, else
/// `~/.cache/patchwright`, else `patchwright-cache` in the temporary
/// directory.
pub fn cache_dir() -> PathBuf {
    cache_dir_from(&|name| std::env::var_os(name))
}

/// Where task environments are built: `$PATCHWRIGHT_ENVS_DIR`, else
/// `~/.cache/patchwright/envs` (also when `$PATCHWRIGHT_CACHE_DIR` moves
/// the cache: environments are large and outlive a cache), else `envs` in
/// the temporary directory's `patchwright-cache`.
pub fn envs_dir() -> PathBuf {
    envs_dir_from(&|name| std::env::var_os(name))
}

/// The cache directory under the home directory, else in the temporary
/// directory.
pub fn home_cache_dir() -> PathBuf {
    home_cache_from(&|name| std::env::var_os(name))
}

type Vars<'a> = &'a dyn Fn(&str) -> Option<OsString>;

fn set(var: Vars<'_>, name: &str) -> Option<PathBuf> {
    var(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn home_cache_from(var: Vars<'_>) -> PathBuf {
    set(var, "HOME").map_or_else(
        || std::env::temp_dir().join("patchwright-cache"),
        |home| home.join(HOME_CACHE),
    )
}

fn cache_dir_from(var: Vars<'_>) -> PathBuf {
    set(var, CACHE_DIR_ENV).unwrap_or_else(|| home_cache_from(var))
}

fn envs_dir_from(var: Vars<'_>) -> PathBuf {
    set(var, ENVS_DIR_ENV).unwrap_or_else(|| home_cache_from(var).join("envs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_directory_follows_its_variable_and_an_empty_one_is_unset() {
        let tmp = std::env::temp_dir().join("patchwright-cache");
        // (cache, envs, home) → (cache dir, envs dir)
        type Case = (
            Option<&'static str>,
            Option<&'static str>,
            Option<&'static str>,
            PathBuf,
            PathBuf,
        );
        let cases: &[Case] = &[
            (
                None,
                None,
                Some("/h"),
                "/h/.cache/patchwright".into(),
                "/h/.cache/patchwright/envs".into(),
            ),
            (
                Some("/c"),
                None,
                Some("/h"),
                "/c".into(),
                "/h/.cache/patchwright/envs".into(),
            ),
            (Some("/c"), Some("/e"), Some("/h"), "/c".into(), "/e".into()),
            (
                Some(""),
                Some(""),
                Some("/h"),
                "/h/.cache/patchwright".into(),
                "/h/.cache/patchwright/envs".into(),
            ),
            (None, None, None, tmp.clone(), tmp.join("envs")),
            (None, None, Some(""), tmp.clone(), tmp.join("envs")),
        ];
        for (cache, envs, home, want_cache, want_envs) in cases {
            let var = |name: &str| -> Option<OsString> {
                match name {
                    CACHE_DIR_ENV => cache.map(OsString::from),
                    ENVS_DIR_ENV => envs.map(OsString::from),
                    "HOME" => home.map(OsString::from),
                    _ => None,
                }
            };
            let case = format!("{cache:?} {envs:?} {home:?}");
            assert_eq!(&cache_dir_from(&var), want_cache, "{case}");
            assert_eq!(&envs_dir_from(&var), want_envs, "{case}");
        }
    }
}
