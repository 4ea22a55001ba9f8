//! Environment specs: how to build the Python environment one version of a
//! repository is tested in, and how its tests run. The data lives in
//! `datasets/envs/<owner>__<name>.toml` (format in that folder's README),
//! transcribed from SWE-bench's public specs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read environment specs {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("environment spec {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error(
        "no environment spec for {repo}: add datasets/envs/{file} (see datasets/envs/README.md)"
    )]
    NoRepo { repo: String, file: String },
    #[error("no environment spec for {repo} version {version} (the spec covers {known})")]
    NoVersion {
        repo: String,
        version: String,
        known: String,
    },
}

/// Which test runner produced a log, i.e. which SWE-bench parser applies
/// (`env::log` holds the parsers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// pytest `-rA` short summary lines: `STATUS test_id [- message]`.
    Pytest,
    /// As `Pytest`, but a parameter that is an absolute path is shortened to
    /// its last component (`test[/a/b/c.txt]` becomes `test[/c.txt]`).
    PytestOptions,
    /// As `Pytest` after stripping colour codes, plus `test_id STATUS` lines.
    PytestV2,
    /// Django's `runtests.py --verbosity 2` output.
    Django,
    /// sympy's `bin/test -C --verbose` output.
    Sympy,
    /// pytest `-rA -v` output as read by SWE-bench's seaborn parser.
    Seaborn,
    /// As `Pytest`, with `MouseButton.LEFT`/`RIGHT` ids renamed to `1`/`3`.
    Matplotlib,
}

/// How the test files of a test patch become the test command's arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Directives {
    /// The paths as written in the patch.
    #[default]
    Files,
    /// Django's dotted labels: `tests/a/b.py` → `a.b`.
    Django,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RepoFile {
    repo: String,
    log_format: LogFormat,
    #[serde(default)]
    requirements_files: Vec<String>,
    #[serde(default)]
    test_directives: Directives,
    env: Vec<Entry>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    versions: Vec<String>,
    python: String,
    #[serde(default)]
    requirements: bool,
    #[serde(default)]
    packages: Vec<String>,
    #[serde(default)]
    pip_packages: Vec<String>,
    #[serde(default)]
    pre_install: Vec<String>,
    install: String,
    test_cmd: String,
    #[serde(default)]
    eval_commands: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
    #[serde(default)]
    system: Vec<String>,
    #[serde(default)]
    local_hosts: Vec<String>,
    #[serde(default)]
    network_tests: Vec<String>,
    #[serde(default)]
    notes: String,
}

/// The spec of one (repository, version), defaults applied and `{version}`
/// substituted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    pub repo: String,
    pub version: String,
    pub log_format: LogFormat,
    pub test_directives: Directives,
    /// Requirement files tried in order at the environment setup commit
    /// (only when `requirements` is true).
    pub requirements_files: Vec<String>,
    pub requirements: bool,
    /// `major.minor` of the interpreter.
    pub python: String,
    pub packages: Vec<String>,
    pub pip_packages: Vec<String>,
    pub pre_install: Vec<String>,
    pub install: String,
    pub test_cmd: String,
    pub eval_commands: Vec<String>,
    pub exclude: Vec<String>,
    pub vars: BTreeMap<String, String>,
    pub system: Vec<String>,
    /// Host names resolved to 127.0.0.1 while the tests run (servers the
    /// `eval_commands` start stand in for them).
    pub local_hosts: Vec<String>,
    /// Tests that need the real network (a tarpit address, say): when they
    /// are a task's only failures, the task is reported as not gradable
    /// offline (an infrastructure error), never as unresolved.
    pub network_tests: Vec<String>,
    pub notes: String,
}

/// Every spec of a directory, by repository.
#[derive(Debug, Default)]
pub struct Specs {
    repos: BTreeMap<String, (PathBuf, RepoFile)>,
}

impl Specs {
    /// The default directory: `datasets/envs` of this source tree.
    pub fn default_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/envs")
    }

    /// Reads every `*.toml` in `dir`. A malformed file is an error naming it.
    pub fn load_dir(dir: &Path) -> Result<Specs, SpecError> {
        let io = |source| SpecError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        paths.sort();
        let mut specs = Specs::default();
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|source| SpecError::Io {
                path: path.clone(),
                source,
            })?;
            let file = parse(&path, &text)?;
            if let Some((other, _)) = specs.repos.get(&file.repo) {
                return Err(SpecError::Invalid {
                    path,
                    message: format!("{} is also specified in {}", file.repo, other.display()),
                });
            }
            specs.repos.insert(file.repo.clone(), (path, file));
        }
        Ok(specs)
    }

    /// The repositories with a spec.
    pub fn repos(&self) -> impl Iterator<Item = &str> {
        self.repos.keys().map(String::as_str)
    }

    /// The versions specified for `repo`.
    pub fn versions(&self, repo: &str) -> Vec<String> {
        self.repos
            .get(repo)
            .map(|(_, f)| {
                f.env
                    .iter()
                    .flat_map(|e| e.versions.iter().cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The spec of `repo` at `version`.
    pub fn get(&self, repo: &str, version: &str) -> Result<Spec, SpecError> {
        let (_, file) = self.repos.get(repo).ok_or_else(|| SpecError::NoRepo {
            repo: repo.into(),
            file: format!("{}.toml", repo.replace('/', "__")),
        })?;
        let entry = file
            .env
            .iter()
            .find(|e| e.versions.iter().any(|v| v == version))
            .ok_or_else(|| SpecError::NoVersion {
                repo: repo.into(),
                version: version.into(),
                known: self.versions(repo).join(", "),
            })?;
        let subst = |s: &String| s.replace("{version}", version);
        Ok(Spec {
            repo: file.repo.clone(),
            version: version.to_string(),
            log_format: file.log_format,
            test_directives: file.test_directives,
            requirements_files: file.requirements_files.clone(),
            requirements: entry.requirements,
            python: entry.python.clone(),
            packages: entry.packages.clone(),
            pip_packages: entry.pip_packages.clone(),
            pre_install: entry.pre_install.clone(),
            install: entry.install.clone(),
            test_cmd: entry.test_cmd.clone(),
            eval_commands: entry.eval_commands.clone(),
            exclude: entry.exclude.clone(),
            vars: entry
                .vars
                .iter()
                .map(|(k, v)| (k.clone(), subst(v)))
                .collect(),
            system: entry.system.clone(),
            local_hosts: entry.local_hosts.clone(),
            network_tests: entry.network_tests.clone(),
            notes: entry.notes.clone(),
        })
    }
}

fn parse(path: &Path, text: &str) -> Result<RepoFile, SpecError> {
    let invalid = |message: String| SpecError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file: RepoFile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    if crate::repo::mirror_name(&file.repo).is_none() {
        return Err(invalid(format!("repo {:?} is not owner/name", file.repo)));
    }
    let mut seen = BTreeMap::new();
    for (i, e) in file.env.iter().enumerate() {
        if e.versions.is_empty() {
            return Err(invalid(format!(
                "[[env]] number {} lists no versions",
                i + 1
            )));
        }
        if !is_major_minor(&e.python) {
            return Err(invalid(format!(
                "python {:?} of versions {:?} is not major.minor (e.g. \"3.9\")",
                e.python, e.versions
            )));
        }
        for v in &e.versions {
            if let Some(j) = seen.insert(v.clone(), i) {
                return Err(invalid(format!(
                    "version {v} is in [[env]] number {} and number {}",
                    j + 1,
                    i + 1
                )));
            }
        }
    }
    Ok(file)
}

fn is_major_minor(s: &str) -> bool {
    s.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty()
            && !b.is_empty()
            && a.chars().all(|c| c.is_ascii_digit())
            && b.chars().all(|c| c.is_ascii_digit())
    })
}

/// Requirement lines from a requirements file's text, SWE-bench's way:
/// comments, blank lines, `-e .` and `.[test]` dropped; `-r other.txt`
/// replaced by the lines of `include(other.txt)` (one level, as SWE-bench
/// does); names in `exclude` dropped.
pub fn requirement_lines(
    text: &str,
    exclude: &[String],
    include: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let keep = |line: &str| {
        let t = line.trim();
        !(t.is_empty() || t.starts_with('#') || t.starts_with("-e .") || t.starts_with(".[test"))
    };
    let excluded = |line: &str| {
        let name: String = line
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
            .collect();
        exclude
            .iter()
            .any(|x| normalize(x) == normalize(&name) && !name.is_empty())
    };
    let mut included = Vec::new();
    let mut own = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("-r") {
            if let Some(body) = include(rest.trim()) {
                included.extend(body.lines().filter(|l| keep(l)).map(str::to_string));
            }
        } else if keep(line) {
            own.push(line.trim().to_string());
        }
    }
    included
        .into_iter()
        .chain(own)
        .filter(|l| !excluded(l))
        .collect()
}

/// PEP 503 name normalisation.
fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLASK: &str = r#"
repo = "pallets/flask"
log_format = "pytest"
requirements_files = ["requirements/dev.txt"]

[[env]]
versions = ["2.0"]
python = "3.9"
requirements = true
pip_packages = ["Werkzeug==2.3.7"]
install = "python -m pip install -e ."
test_cmd = "pytest -rA"
vars = { SETUPTOOLS_SCM_PRETEND_VERSION = "{version}.0" }

[[env]]
versions = ["2.2", "2.3"]
python = "3.11"
install = "python -m pip install -e ."
test_cmd = "pytest -rA"
"#;

    fn specs(text: &str) -> Result<Specs, SpecError> {
        let dir = tempfile::tempdir().map_err(|source| SpecError::Io {
            path: "tmp".into(),
            source,
        })?;
        std::fs::write(dir.path().join("pallets__flask.toml"), text).map_err(|source| {
            SpecError::Io {
                path: "tmp".into(),
                source,
            }
        })?;
        Specs::load_dir(dir.path())
    }

    #[test]
    fn versions_resolve_with_defaults_and_substitution() -> Result<(), Box<dyn std::error::Error>> {
        let specs = specs(FLASK)?;
        let s = specs.get("pallets/flask", "2.0")?;
        assert_eq!(s.python, "3.9");
        assert!(s.requirements);
        assert_eq!(s.vars["SETUPTOOLS_SCM_PRETEND_VERSION"], "2.0.0");
        assert_eq!(s.test_directives, Directives::Files);
        let s = specs.get("pallets/flask", "2.3")?;
        assert_eq!(s.python, "3.11");
        assert!(!s.requirements && s.pip_packages.is_empty());
        let e = specs.get("pallets/flask", "9.9").unwrap_err().to_string();
        assert_eq!(
            e,
            "no environment spec for pallets/flask version 9.9 (the spec covers 2.0, 2.2, 2.3)"
        );
        let e = specs.get("psf/requests", "2.0").unwrap_err().to_string();
        assert!(e.contains("add datasets/envs/psf__requests.toml"), "{e}");
        Ok(())
    }

    #[test]
    fn bad_files_are_named_and_explained() {
        let cases = [
            (
                FLASK.replace("versions = [\"2.0\"]", "versions = [\"2.2\"]"),
                "version 2.2 is in [[env]] number 1 and number 2",
            ),
            (
                FLASK.replace("python = \"3.9\"", "python = \"3\""),
                "is not major.minor",
            ),
            (
                FLASK.replace("requirements = true", "requirments = true"),
                "unknown field `requirments`",
            ),
            (
                FLASK.replace("log_format = \"pytest\"", "log_format = \"nose\""),
                "unknown variant `nose`",
            ),
        ];
        for (text, want) in cases {
            let e = specs(&text).unwrap_err().to_string();
            assert!(
                e.contains("pallets__flask.toml") && e.contains(want),
                "{want}: {e}"
            );
        }
    }

    #[test]
    fn requirement_files_follow_swe_bench_rules() {
        let text = "# dev\n-r tests.txt\n-e .\nblack==22.1\n\ntypes-pkg_resources\nSphinx>=4\n";
        let include =
            |name: &str| (name == "tests.txt").then(|| "pytest\n# c\nnumpy<2\n".to_string());
        let lines = requirement_lines(text, &["types_pkg_resources".into()], &include);
        assert_eq!(lines, ["pytest", "numpy<2", "black==22.1", "Sphinx>=4"]);
    }

    #[test]
    fn the_shipped_specs_load() -> Result<(), Box<dyn std::error::Error>> {
        let specs = Specs::load_dir(&Specs::default_dir())?;
        for repo in [
            "pallets/flask",
            "sympy/sympy",
            "django/django",
            "demo/cachekit",
        ] {
            assert!(!specs.versions(repo).is_empty(), "{repo}");
        }
        let s = specs.get("django/django", "3.0")?;
        assert_eq!(s.test_directives, Directives::Django);
        assert_eq!(s.log_format, LogFormat::Django);
        Ok(())
    }
}
