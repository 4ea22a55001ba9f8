//! The sha256 of model files, cached by (path, size, mtime) in
//! `<models dir>/.cache/sha256.json`, so that a multi-gigabyte GGUF is
//! hashed once rather than on every run. A file whose size or
//! modification time changed is hashed again; a cache file that cannot be
//! read is ignored with a warning (and rewritten).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use super::ModelError;

/// Where the cache lives, relative to the models directory (beside the
/// download cache `fetch` uses, which is gitignored with it).
pub const CACHE_FILE: &str = ".cache/sha256.json";

/// `<models dir>/.cache/sha256.json`: the digests computed so far, by
/// canonical path.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestCache {
    /// Canonical path of each hashed file, with what it was when hashed.
    #[serde(default)]
    pub files: BTreeMap<PathBuf, CachedDigest>,
}

/// A file's digest, valid while its size and modification time are these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedDigest {
    /// Size in bytes when hashed.
    pub size: u64,
    /// Modification time when hashed: whole seconds since the Unix epoch.
    pub mtime_s: u64,
    /// Modification time when hashed: the nanoseconds past `mtime_s`.
    pub mtime_ns: u32,
    /// The sha256, hex-encoded.
    pub sha256: String,
}

/// The cache file of the models directory `models_dir`.
pub fn cache_file(models_dir: &Path) -> PathBuf {
    models_dir.join(CACHE_FILE)
}

impl DigestCache {
    /// Reads the cache at `path`; a missing file is an empty cache, an
    /// unreadable or malformed one an error (which callers report and then
    /// treat as empty).
    pub fn load(path: &Path) -> Result<DigestCache, ModelError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(DigestCache::default()),
            Err(source) => {
                return Err(ModelError::Io {
                    action: "read",
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        serde_json::from_str(&text).map_err(|e| ModelError::DigestCache {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Writes the cache to `path` atomically (a temporary file beside it,
    /// renamed over it), creating its directory; entries whose file is gone
    /// are dropped first.
    pub fn save(&mut self, path: &Path) -> Result<(), ModelError> {
        self.files.retain(|file, _| file.is_file());
        let io = |action: &'static str| {
            move |source| ModelError::Io {
                action,
                path: path.to_path_buf(),
                source,
            }
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|source| ModelError::Io {
            action: "create",
            path: dir.to_path_buf(),
            source,
        })?;
        let json = serde_json::to_vec_pretty(self).map_err(|e| ModelError::DigestCache {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io("create a file beside"))?;
        std::io::Write::write_all(&mut tmp, &json).map_err(io("write"))?;
        tmp.persist(path)
            .map_err(|e| io("rename into place")(e.error))?;
        Ok(())
    }
}

/// The cache key of `path` and what its entry must match: the canonical
/// path and a digest-less entry with the file's size and mtime.
fn stamp(path: &Path) -> Result<(PathBuf, CachedDigest), ModelError> {
    let io = |action: &'static str| {
        move |source| ModelError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    };
    let canonical = std::fs::canonicalize(path).map_err(io("resolve"))?;
    let meta = std::fs::metadata(&canonical).map_err(io("stat"))?;
    let mtime = meta
        .modified()
        .map_err(io("read the modification time of"))?
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Ok((
        canonical,
        CachedDigest {
            size: meta.len(),
            mtime_s: mtime.as_secs(),
            mtime_ns: mtime.subsec_nanos(),
            sha256: String::new(),
        },
    ))
}

/// The sha256 of `path`, from the cache of the models directory `dir`
/// when the file's size and mtime are those recorded, else computed and
/// recorded there.
pub fn sha256(dir: &Path, path: &Path) -> Result<String, ModelError> {
    sha256_with(&cache_file(dir), path, &super::sha256_file)
}

/// [`sha256`] with the cache at `cache` and `hash` computing a digest (the
/// tests count its calls).
pub fn sha256_with(
    cache: &Path,
    path: &Path,
    hash: &dyn Fn(&Path) -> Result<String, ModelError>,
) -> Result<String, ModelError> {
    let (key, now) = stamp(path)?;
    let mut entries = DigestCache::load(cache).unwrap_or_else(|e| {
        tracing::warn!("{e}; ignoring it and hashing again");
        DigestCache::default()
    });
    if let Some(hit) = entries.files.get(&key) {
        if (hit.size, hit.mtime_s, hit.mtime_ns) == (now.size, now.mtime_s, now.mtime_ns) {
            return Ok(hit.sha256.clone());
        }
    }
    tracing::info!(
        "hashing {} (once: the digest is cached in {})",
        path.display(),
        cache.display()
    );
    let sha256 = hash(path)?;
    entries.files.insert(
        key,
        CachedDigest {
            sha256: sha256.clone(),
            ..now
        },
    );
    if let Err(e) = entries.save(cache) {
        tracing::warn!("{e}; the model's sha256 will be computed again next time");
    }
    Ok(sha256)
}

/// Records that `path` (as it is now) has digest `sha256`, computed while
/// writing it; a failure to record is only warned about.
pub fn remember(cache: &Path, path: &Path, sha256: &str) {
    let result = stamp(path).and_then(|(key, now)| {
        let mut entries = DigestCache::load(cache).unwrap_or_default();
        entries.files.insert(
            key,
            CachedDigest {
                sha256: sha256.to_string(),
                ..now
            },
        );
        entries.save(cache)
    });
    if let Err(e) = result {
        tracing::warn!("{e}; the model's sha256 will be computed on its first use");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::time::{Duration, SystemTime};

    type R = Result<(), Box<dyn std::error::Error>>;

    /// A hash function that counts its calls and otherwise hashes for real.
    fn counting(calls: &Cell<usize>) -> impl Fn(&Path) -> Result<String, ModelError> + '_ {
        move |p| {
            calls.set(calls.get() + 1);
            crate::models::sha256_file(p)
        }
    }

    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    fn set_mtime(path: &Path, secs: u64) -> R {
        let f = std::fs::File::options().write(true).open(path)?;
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))?;
        Ok(())
    }

    #[test]
    fn a_cached_digest_is_not_recomputed_until_the_file_changes() -> R {
        let dir = tempfile::tempdir()?;
        let cache = cache_file(dir.path());
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, "abc")?;
        set_mtime(&model, 1_700_000_000)?;
        let calls = Cell::new(0);
        let hash = counting(&calls);
        // (what changes before the call, digest, hashes so far)
        let cases: [(&str, &str, usize); 5] = [
            ("first use", ABC, 1),
            ("nothing", ABC, 1),
            ("mtime", ABC, 2),
            ("nothing", ABC, 2),
            (
                "size",
                "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589",
                3,
            ),
        ];
        for (change, digest, hashed) in cases {
            match change {
                "mtime" => set_mtime(&model, 1_700_000_001)?,
                "size" => {
                    std::fs::write(&model, "abcd")?;
                    set_mtime(&model, 1_700_000_001)?;
                }
                _ => {}
            }
            assert_eq!(sha256_with(&cache, &model, &hash)?, digest, "{change}");
            assert_eq!(calls.get(), hashed, "{change}");
        }
        let stored = DigestCache::load(&cache)?;
        assert_eq!(
            stored.files,
            BTreeMap::from([(
                std::fs::canonicalize(&model)?,
                CachedDigest {
                    size: 4,
                    mtime_s: 1_700_000_001,
                    mtime_ns: 0,
                    sha256: "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589"
                        .into(),
                }
            )])
        );
        Ok(())
    }

    #[test]
    fn the_cached_value_is_what_is_returned() -> R {
        // A planted entry with the file's stamp is believed: the proof
        // that a hit does not read the file.
        let dir = tempfile::tempdir()?;
        let cache = cache_file(dir.path());
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, "abc")?;
        let (key, now) = stamp(&model)?;
        let mut planted = DigestCache::default();
        planted.files.insert(
            key,
            CachedDigest {
                sha256: "planted".into(),
                ..now
            },
        );
        planted.save(&cache)?;
        let calls = Cell::new(0);
        assert_eq!(sha256_with(&cache, &model, &counting(&calls))?, "planted");
        assert_eq!(calls.get(), 0);
        Ok(())
    }

    #[test]
    fn a_corrupt_cache_is_ignored_and_rewritten() -> R {
        let dir = tempfile::tempdir()?;
        let cache = cache_file(dir.path());
        std::fs::create_dir_all(dir.path().join(".cache"))?;
        std::fs::write(&cache, "{\"files\": {")?;
        let err = DigestCache::load(&cache)
            .err()
            .ok_or("a corrupt cache loaded")?
            .to_string();
        assert_eq!(
            err,
            format!(
                "the sha256 cache {} is unreadable: EOF while parsing an object at line 1 column 11",
                cache.display()
            )
        );
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, "abc")?;
        let calls = Cell::new(0);
        assert_eq!(sha256_with(&cache, &model, &counting(&calls))?, ABC);
        assert_eq!(calls.get(), 1);
        assert_eq!(DigestCache::load(&cache)?.files.len(), 1);
        assert_eq!(sha256_with(&cache, &model, &counting(&calls))?, ABC);
        assert_eq!(calls.get(), 1);
        Ok(())
    }

    #[test]
    fn remember_records_a_digest_and_save_drops_missing_files() -> R {
        let dir = tempfile::tempdir()?;
        let cache = cache_file(dir.path());
        let (a, b) = (dir.path().join("a.gguf"), dir.path().join("b.gguf"));
        std::fs::write(&a, "abc")?;
        std::fs::write(&b, "abc")?;
        remember(&cache, &a, "from-fetch");
        remember(&cache, &b, ABC);
        let calls = Cell::new(0);
        assert_eq!(sha256_with(&cache, &a, &counting(&calls))?, "from-fetch");
        assert_eq!(calls.get(), 0);
        std::fs::remove_file(&b)?;
        let mut stored = DigestCache::load(&cache)?;
        assert_eq!(stored.files.len(), 2);
        stored.save(&cache)?;
        assert_eq!(
            DigestCache::load(&cache)?.files.keys().collect::<Vec<_>>(),
            [&std::fs::canonicalize(&a)?]
        );
        Ok(())
    }
}
