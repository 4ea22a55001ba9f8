//! The test template without the model, when the repository has one: the
//! existing test file of the located module (the tests whose imports reach
//! it, else the file named after it: the Ranker's regression tests), run
//! the repository's way (the spec's test command in the task's
//! environment; pytest without one). The first that passes is the
//! template; only when none does, the ReAct Test Template Generator runs.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::judge;
use crate::aci::check::{self, Verdict};
use crate::aci::{Location, SubmittedTest};
use crate::env::task::TaskEnv;

/// Existing test files run before the agent is asked instead: each run is
/// a whole test file, and a third candidate rarely passes when the two
/// closest did not.
pub const MAX_TEMPLATE_RUNS: usize = 2;

/// An existing test file tried as the template, and what its run said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tried {
    pub path: String,
    /// `passed`, `failed`, or `broken: <why>` (or why it could not run).
    pub verdict: String,
}

/// The test files of the modules `locations` names, best first: those the
/// Ranker would run as their regression tests ([`judge::regression_tests`]:
/// by imports, else by name), those named after a located module
/// (`cachekit/lru.py` → `tests/test_lru.py`), then those whose name
/// holds its name, before the others. Test files
/// located themselves are not modules of the code.
pub fn template_files(root: &Path, all_files: &[String], locations: &[Location]) -> Vec<String> {
    let mut modules: Vec<String> = locations
        .iter()
        .map(|l| l.path.clone())
        .filter(|p| p.ends_with(".py") && !crate::index::is_test_file(p))
        .collect();
    modules.dedup();
    if modules.is_empty() {
        return Vec::new();
    }
    let stems: Vec<&str> = modules
        .iter()
        .filter_map(|m| m.rsplit('/').next())
        .map(|n| n.trim_end_matches(".py"))
        .filter(|n| *n != "__init__")
        .collect();
    let is_own = |f: &str| {
        let name = f.rsplit('/').next().unwrap_or(f).trim_end_matches(".py");
        stems.iter().any(|s| {
            name == format!("test_{s}")
                || name == format!("{s}_test")
                || name == format!("test_{s}s")
        })
    };
    // The module's own test files by name first, wherever they are (the
    // importers of a module are capped, and in sympy or flask the first
    // importers are `test_args.py` or an example's tests), closest to the
    // module first.
    let closeness = |f: &str| {
        modules
            .iter()
            .map(|m| {
                m.split('/')
                    .zip(f.split('/'))
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .max()
            .unwrap_or(0)
    };
    let mut own: Vec<String> = all_files
        .iter()
        .filter(|f| crate::index::is_test_file(f) && is_own(f) && !is_aside(f))
        .cloned()
        .collect();
    own.sort_by_key(|f| (std::cmp::Reverse(closeness(f)), f.clone()));
    let mut found = own;
    for f in judge::regression_tests(root, all_files, &modules) {
        if !found.contains(&f) {
            found.push(f);
        }
    }
    // Examples' and documentation's tests run in their own package: a
    // test written beside them cannot import the library the same way.
    let (main, aside): (Vec<String>, Vec<String>) = found.into_iter().partition(|f| !is_aside(f));
    let mut found = main;
    found.extend(aside);
    // 0: the module's own test file by name; 1: a name holding it; 2: others.
    let rank = |f: &String| {
        let name = f.rsplit('/').next().unwrap_or(f).trim_end_matches(".py");
        let own = |s: &&str| {
            name == format!("test_{s}")
                || name == format!("{s}_test")
                || name == format!("test_{s}s")
        };
        if stems.iter().any(own) {
            0
        } else if stems.iter().any(|s| name.contains(s)) {
            1
        } else {
            2
        }
    };
    found.sort_by_key(|f| (is_aside(f), rank(f)));
    found
}

/// Top-level folders whose tests belong to an example or the docs, not the
/// library: tried last.
pub const ASIDE_DIRS: [&str; 4] = ["examples/", "example/", "docs/", "doc/"];

/// Whether `path` is under one of [`ASIDE_DIRS`].
fn is_aside(path: &str) -> bool {
    ASIDE_DIRS.iter().any(|d| path.starts_with(d))
}

/// The script that runs the test file `path` the repository's way: the
/// environment's test script, else [`task::default_test_script`].
pub fn test_command(env: &TaskEnv, path: &str) -> String {
    let files = [path.to_string()];
    env.test_script(&files)
}

/// The first of the located modules' test files (at most
/// [`MAX_TEMPLATE_RUNS`] tried, in [`template_files`]' order) that passes,
/// run in the worktree `root` (installed in `env`) within `timeout_s`, as
/// a handed-in test; and every file tried with its verdict. The worktree
/// is put back to its commit after each run.
pub fn existing(
    root: &Path,
    all_files: &[String],
    locations: &[Location],
    env: &TaskEnv,
    timeout_s: u64,
) -> (Option<SubmittedTest>, Vec<Tried>) {
    let mut tried = Vec::new();
    for path in template_files(root, all_files, locations)
        .into_iter()
        .take(MAX_TEMPLATE_RUNS)
    {
        let text = match crate::aci::read_text(root, &path) {
            Ok(t) => t,
            Err(e) => {
                tried.push(Tried {
                    path,
                    verdict: format!("unreadable: {e}"),
                });
                continue;
            }
        };
        let command = test_command(env, &path);
        let ran = check::run_test(root, env, &command, timeout_s);
        // Whatever the run left (caches, outputs) goes; a failure to clean
        // leaves only untracked files, which the next stage's reset removes.
        let _ = crate::repo::reset_worktree(root);
        let (outcome, verdict) = match ran {
            Ok(r) => r,
            Err(e) => {
                tried.push(Tried {
                    path,
                    verdict: format!("could not run: {e}"),
                });
                continue;
            }
        };
        let said = match &verdict {
            Verdict::Passed => "passed".to_string(),
            Verdict::Failed => "failed".to_string(),
            Verdict::Broken(why) => format!("broken: {why}"),
        };
        tried.push(Tried {
            path: path.clone(),
            verdict: said,
        });
        if verdict == Verdict::Passed {
            let test = SubmittedTest {
                path,
                command,
                text,
                output: outcome.output,
                files: Vec::new(),
            };
            return (Some(test), tried);
        }
    }
    (None, tried)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(path: &str) -> Location {
        Location {
            path: path.into(),
            symbol: "f".into(),
            start_line: 1,
            end_line: 2,
        }
    }

    #[test]
    fn the_located_modules_own_tests_come_first() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let files: &[(&str, &str)] = &[
            (
                "pkg/__init__.py",
                "from pkg.lru import LRU\nfrom pkg.ttl import TTL\n",
            ),
            ("pkg/lru.py", "class LRU:\n    pass\n"),
            ("pkg/ttl.py", "class TTL:\n    pass\n"),
            ("pkg/plugin.py", "def hook():\n    pass\n"),
            ("tests/test_a_uses_lru.py", "from pkg.lru import LRU\n"),
            ("tests/test_lru.py", "from pkg.lru import LRU\n"),
            ("tests/test_ttl.py", "from pkg import TTL\n"),
            ("tests/test_plugin_hooks.py", "import importlib\n"),
            ("tests/conftest.py", "from pkg.lru import LRU\n"),
            ("other/sub/hyper.py", "def coth():\n    pass\n"),
            ("tests/test_args.py", "from other.sub.hyper import coth\n"),
            ("other/sub/tests/test_hyper.py", "import other\n"),
            ("examples/app/tests/test_hyper.py", "import app\n"),
        ];
        for (path, text) in files {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().ok_or("no parent")?)?;
            std::fs::write(full, text)?;
        }
        let all: Vec<String> = files.iter().map(|(p, _)| p.to_string()).collect();
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "imports: the one named after the module first",
                &["pkg/lru.py"],
                &[
                    "tests/test_lru.py",
                    "tests/test_a_uses_lru.py",
                    "tests/test_ttl.py",
                ],
            ),
            (
                "through the package",
                &["pkg/ttl.py"],
                &["tests/test_ttl.py"],
            ),
            (
                "no import reaches it: by name",
                &["pkg/plugin.py"],
                &["tests/test_plugin_hooks.py"],
            ),
            (
                "a located test file is no module",
                &["tests/test_lru.py"],
                &[],
            ),
            ("nothing located", &[], &[]),
            (
                "by name beside the module before an importer; an example's is none",
                &["other/sub/hyper.py"],
                &["other/sub/tests/test_hyper.py", "tests/test_args.py"],
            ),
        ];
        for (name, located, want) in cases {
            let locations: Vec<Location> = located.iter().map(|p| location(p)).collect();
            assert_eq!(
                template_files(dir.path(), &all, &locations),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{name}"
            );
        }
        Ok(())
    }

    #[test]
    fn without_an_environment_the_command_is_pytest() {
        assert_eq!(
            test_command(
                &TaskEnv::bare(&patchwright_sandbox::Host::default()),
                "tests/test_lru.py"
            ),
            format!(
                "{} 'tests/test_lru.py'\n",
                crate::env::task::DEFAULT_TEST_COMMAND
            )
        );
    }
}
