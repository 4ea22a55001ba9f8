//! Snapshot tests of the agent-computer interface: scripts of commands run
//! on a copy of `tests/fixtures/aci-repo`, each transcript compared with
//! `tests/snapshots/aci/<case>.txt`. After an intended change of output,
//! rerun with `PATCHWRIGHT_UPDATE_SNAPSHOTS=1` and review the diff.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use patchwright::aci::{command, Aci, AciSettings, Command};
use patchwright::env::task::TaskEnv;
use patchwright::index::symbols::CodeIndex;
use patchwright_sandbox::Host;

struct Case {
    name: &'static str,
    window: usize,
    run_timeout_s: u64,
    setup: fn(&Path),
    script: &'static str,
}

fn no_setup(_: &Path) {}

/// 60 files holding "needle", and one file with 60 such lines.
fn many_needles(root: &Path) {
    std::fs::create_dir_all(root.join("data")).unwrap();
    for i in 0..60 {
        std::fs::write(root.join(format!("data/file_{i:02}.txt")), "a needle\n").unwrap();
    }
    std::fs::write(root.join("data/haystack.txt"), "needle\n".repeat(60)).unwrap();
}

const CASES: &[Case] = &[
    Case {
        name: "viewer",
        window: 20,
        run_timeout_s: 10,
        setup: no_setup,
        script: "scroll_down
open inventory/report.py
scroll_down
scroll_down
scroll_down
scroll_down
scroll_up
goto 60
goto 500
open inventory/stock.py 40
open inventory/stock.py 999
open missing.py
open inventory
open ../outside.py
",
    },
    Case {
        name: "search",
        window: 100,
        run_timeout_s: 10,
        setup: no_setup,
        script: "find_file stock.py
find_file *.py
find_file test_*.py tests
find_file nothing.txt
find_file *.py nowhere
search_dir count
search_dir \"def section\" inventory
search_dir zebra
search_file quantity
search_file quantity inventory/stock.py
open inventory/stock.py
search_file self._counts
search_file zebra
",
    },
    Case {
        name: "search_cap",
        window: 100,
        run_timeout_s: 10,
        setup: many_needles,
        script: "search_dir needle
search_dir needle data
find_file file_*.txt
find_file file_0*.txt
search_file needle data/haystack.txt
",
    },
    Case {
        name: "lazy_views",
        window: 100,
        run_timeout_s: 10,
        setup: no_setup,
        script: "view_skeleton inventory/stock.py
view_skeleton inventory/__init__.py
view_symbol inventory/stock.py::Stock.total_value
view_symbol inventory/stock.py::Stock.Snapshot
view_symbol inventory/stock.py::Stock.nothing
view_symbol inventory/report.py::render
search_class Stock
search_class Snapshot
search_class Missing
search_method count
search_method count Snapshot
search_method __init__
search_method nothing
",
    },
    Case {
        name: "editing",
        window: 10,
        run_timeout_s: 10,
        setup: no_setup,
        script: "edit 1:1
x = 1
end_of_edit
open inventory/stock.py 37
edit 37:40
    def total_value(self, prices):
        return sum(prices[name] * n for name, n in self._counts.items())
end_of_edit
edit 25:25
        if quantity < 0
end_of_edit
edit 90:91
x = 1
end_of_edit
str_replace inventory/stock.py
<<<<<<< SEARCH
            raise ValueError(f\"only {have} of {item.name} in stock\")
=======
            raise ValueError(f\"only {have} of {item.name!r} in stock\")
>>>>>>> REPLACE
str_replace inventory/stock.py
<<<<<<< SEARCH
    def missing(self):
=======
    def present(self):
>>>>>>> REPLACE
str_replace inventory/stock.py
<<<<<<< SEARCH

=======
# blank
>>>>>>> REPLACE
str_replace inventory/stock.py
<<<<<<< SEARCH
class Item:
=======
class Item(
>>>>>>> REPLACE
create inventory/stock.py
create inventory/extra.py
edit 1:1
def double(x):
    return 2 * x
end_of_edit
edit 3:2
def triple(x):
    return 3 * x
end_of_edit
create .git/config
search_method double
submit
",
    },
    Case {
        name: "outputs",
        window: 10,
        run_timeout_s: 10,
        setup: no_setup,
        script: "locate inventory/stock.py::Stock.total_value
locate inventory/stock.py::Stock.total_value
locate inventory/stock.py::Stock.nothing
locate inventory/report.py::Report.render
locate tests/test_stock.py::test_add_and_count
create tests/check_count.py
edit 1:1
import sys
from inventory import Item, Stock
stock = Stock()
stock.add(Item(\"a\", 1), 2)
print(\"count:\", stock.count(Item(\"a\", 1)))
sys.exit(0 if stock.count(Item(\"a\", 1)) == 3 else 1)
end_of_edit
submit_test tests/check_count.py PYTHONPATH=. python3 tests/check_count.py
submit_test tests/check_count.py python3 -c \"import no_such_module\"
edit 6:6
sys.exit(0 if stock.count(Item(\"a\", 1)) == 2 else 1)
end_of_edit
submit_test tests/check_count.py PYTHONPATH=. python3 tests/check_count.py
",
    },
    Case {
        name: "run",
        window: 100,
        run_timeout_s: 2,
        setup: no_setup,
        script: "run python3 -c \"print(6 * 7)\"
run true
run echo oops >&2; exit 3
run sleep 30
run touch .git/planted
run printf 'def made_by_run():\\n    pass\\n' > inventory/made.py
search_method made_by_run
run for i in $(seq 1 130); do echo line $i; done
",
    },
];

/// A git repository holding the fixture, committed.
fn fixture_repo(dir: &Path) -> PathBuf {
    let root = dir.join("repo");
    copy_dir(&common::root().join("tests/fixtures/aci-repo"), &root);
    let git = |args: &[&str]| {
        let out = Process::new("git")
            .current_dir(&root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "--quiet", "--template="]);
    git(&["add", "--all"]);
    git(&["commit", "--quiet", "-m", "fixture"]);
    root
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn head(root: &Path) -> String {
    patchwright::repo::head_commit(root).unwrap()
}

fn interface(root: &Path, case: &Case) -> Aci {
    let settings = AciSettings {
        window: case.window,
        run_timeout_s: case.run_timeout_s,
    };
    Aci::new(
        root,
        &head(root),
        CodeIndex::build(root).unwrap(),
        settings,
        TaskEnv::bare(&Host::default()),
    )
}

fn commands(script: &str) -> Vec<String> {
    let mut lines = script.lines().map(|l| Ok(l.to_string()));
    let mut out = Vec::new();
    while let Some(text) = command::read_command(&mut lines) {
        out.push(text.unwrap());
    }
    out
}

/// Runs a case and returns its transcript and its observations.
fn transcript(case: &Case) -> (String, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_repo(dir.path());
    (case.setup)(&root);
    let mut aci = interface(&root, case);
    let mut out = String::new();
    let mut observations = Vec::new();
    for text in commands(case.script) {
        let observation = match Command::parse(&text) {
            Ok(c) => aci.execute(&c).text,
            Err(e) => format!("Error: {e}"),
        };
        for (i, line) in text.trim_end().lines().enumerate() {
            out.push_str(if i == 0 { ">>> " } else { "... " });
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&observation);
        out.push_str("\n\n");
        observations.push(observation);
    }
    (out, observations)
}

fn check_snapshot(name: &str, actual: &str) {
    let path = common::root().join(format!("tests/snapshots/aci/{name}.txt"));
    if std::env::var_os("PATCHWRIGHT_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with PATCHWRIGHT_UPDATE_SNAPSHOTS=1 to write it)",
            path.display()
        )
    });
    if expected != actual {
        let at = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name}: the transcript differs from {} at line {}:\nexpected: {:?}\nactual:   {:?}\n\
             (if the change is intended, rerun with PATCHWRIGHT_UPDATE_SNAPSHOTS=1 and review the diff)",
            path.display(),
            at + 1,
            expected.lines().nth(at),
            actual.lines().nth(at)
        );
    }
}

#[test]
fn every_command_matches_its_snapshot() {
    for case in CASES {
        let (text, _) = transcript(case);
        check_snapshot(case.name, &text);
    }
}

#[test]
fn every_command_is_covered_by_a_snapshot() {
    let used: Vec<String> = CASES
        .iter()
        .flat_map(|c| commands(c.script))
        .filter_map(|t| Command::parse(&t).ok().map(|c| c.name().to_string()))
        .collect();
    for name in command::NAMES {
        assert!(
            used.iter().any(|u| u == name),
            "no snapshot case uses `{name}`"
        );
    }
}

#[test]
fn the_cli_prints_exactly_what_the_model_sees() {
    let case = CASES.iter().find(|c| c.name == "editing").unwrap();
    let (_, observations) = transcript(case);
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_repo(dir.path());
    let mut child = Process::new(env!("CARGO_BIN_EXE_patchwright"))
        .args(["aci", "--repo"])
        .arg(&root)
        .args(["--window", &case.window.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(case.script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let expected: String = observations.iter().map(|o| format!("{o}\n")).collect();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
}

#[test]
fn edits_that_break_the_syntax_leave_the_file_alone() {
    let case = CASES.iter().find(|c| c.name == "editing").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_repo(dir.path());
    let before = std::fs::read_to_string(root.join("inventory/stock.py")).unwrap();
    let mut aci = interface(&root, case);
    aci.execute(&Command::Open {
        path: "inventory/stock.py".into(),
        line: None,
    });
    let o = aci.execute(&Command::Edit {
        start: 25,
        end: 25,
        text: "        if quantity < 0\n".into(),
    });
    assert!(
        o.text.contains("Your changes have NOT been applied"),
        "{}",
        o.text
    );
    assert_eq!(
        std::fs::read_to_string(root.join("inventory/stock.py")).unwrap(),
        before
    );
}

#[test]
fn the_interface_never_follows_a_symbolic_link() {
    let case = CASES.iter().find(|c| c.name == "viewer").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_repo(dir.path());
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "TOP SECRET\n").unwrap();
    std::os::unix::fs::symlink(&secret, root.join("link.txt")).unwrap();
    let mut aci = interface(&root, case);
    let cases = [
        Command::Open {
            path: "link.txt".into(),
            line: None,
        },
        Command::SearchFile {
            text: "SECRET".into(),
            path: Some("link.txt".into()),
        },
        Command::SearchDir {
            text: "SECRET".into(),
            dir: None,
        },
        Command::StrReplace {
            path: "link.txt".into(),
            old: "TOP SECRET\n".into(),
            new: "x\n".into(),
        },
    ];
    for c in cases {
        let o = aci.execute(&c);
        assert!(!o.text.contains("TOP SECRET"), "{c:?}: {}", o.text);
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "TOP SECRET\n");
    assert!(!aci.choices().files.iter().any(|f| f == "link.txt"));
}

#[test]
fn submit_leaves_the_repositorys_own_index_alone() {
    let case = CASES.iter().find(|c| c.name == "editing").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_repo(dir.path());
    std::fs::write(root.join("README.md"), "staged change\n").unwrap();
    let status = |root: &Path| {
        let out = Process::new("git")
            .current_dir(root)
            .args(["status", "--porcelain"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(Process::new("git")
        .current_dir(&root)
        .args(["add", "README.md"])
        .status()
        .unwrap()
        .success());
    std::fs::write(root.join("new.txt"), "untracked\n").unwrap();
    let before = status(&root);
    assert_eq!(before, "M  README.md\n?? new.txt\n");
    let mut aci = interface(&root, case);
    let o = aci.execute(&Command::Submit);
    assert!(o.submitted);
    assert!(
        o.text.contains("diff --git a/README.md b/README.md"),
        "{}",
        o.text
    );
    assert!(
        o.text.contains("diff --git a/new.txt b/new.txt"),
        "{}",
        o.text
    );
    assert_eq!(status(&root), before);
}

/// The programs `strace -f` saw `patchwright aci` start (successful
/// `execve` calls, the first its own start), with `script` on its stdin.
fn execs_of_cli(root: &Path, script: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.log");
    let mut child = Process::new("strace")
        .args(["-f", "-qq", "-e", "trace=execve,execveat", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_patchwright"))
        .args(["aci", "--repo"])
        .arg(root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("strace (scripts/test installs it): {e}"));
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "strace patchwright aci: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains("execve") && l.trim_end().ends_with("= 0"))
        .map(str::to_string)
        .collect()
}

/// The agents' exploring commands (open, goto, scroll, find_file,
/// search_dir, search_file, the view_* and search_* commands) run in the
/// program itself: over the snapshot cases' scripts, `strace -f` sees the
/// same programs started as for an empty script (the program itself, the
/// base commit's `git rev-parse`, the index's `git ls-files` and the
/// sandbox's preflight), so they work the same under either sandbox tier,
/// and where none can run.
#[test]
fn exploring_commands_start_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_repo(dir.path());
    let exploring: String = ["viewer", "search", "search_cap", "lazy_views"]
        .iter()
        .map(|name| CASES.iter().find(|c| c.name == *name).unwrap().script)
        .collect();
    many_needles(&root);
    let names: Vec<String> = commands(&exploring)
        .iter()
        .filter_map(|t| Command::parse(t).ok().map(|c| c.name().to_string()))
        .collect();
    for name in [
        "open",
        "goto",
        "scroll_up",
        "scroll_down",
        "find_file",
        "search_dir",
        "search_file",
        "view_skeleton",
        "view_symbol",
        "search_class",
        "search_method",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} is not exercised");
    }
    let baseline = execs_of_cli(&root, "");
    assert!(baseline.len() >= 3, "{}", baseline.join("\n"));
    let explored = execs_of_cli(&root, &exploring);
    assert_eq!(
        explored.len(),
        baseline.len(),
        "exploring commands started processes:\n{}\nbaseline:\n{}",
        explored.join("\n"),
        baseline.join("\n")
    );
    // The check sees a command that does start one.
    let ran = execs_of_cli(&root, "run true\n");
    assert!(ran.len() > baseline.len(), "{}", ran.join("\n"));
}
