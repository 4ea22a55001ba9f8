//! Which test files exercise a module, found by what they import: the
//! repository's import graph from tree-sitter, walked backwards from the
//! modules a patch touches.
//!
//! A dotted module maps to `a/b/c.py` or `a/b/c/__init__.py` under a source
//! root. A file's root is the directory above its topmost chain of packages
//! (directories with an `__init__.py`): `lib/matplotlib/axes/_base.py` is
//! `matplotlib.axes._base`, `tests/utils_tests/test_text.py` in Django is
//! `utils_tests.test_text` (its runner puts `tests/` on the path), and a
//! `tests/test_x.py` with no `__init__.py` beside it is `test_x`, as pytest's
//! rootdir insertion imports it. Every file is also known by its path from
//! the repository's top, and from under `src/` or `lib/`, for namespace
//! packages without an `__init__.py`.
//!
//! Only import statements are parsed: the lines that start one (at any
//! indentation, so imports inside functions and `try` blocks count), with
//! their continuation lines, are cut out and dedented, and tree-sitter
//! parses that short text. A docstring line that happens to read like an
//! import can add an edge that does not exist; it cannot hide a real one.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::path::Path;

use rayon::prelude::*;
use tree_sitter::Node;

use super::is_test_file;
use super::symbols::parse_tree;

/// Regression test files the Ranker runs per candidate. They run once on
/// the base commit and once per candidate; three files of the closest
/// tests cover the touched module's own tests. Five reached sympy's
/// slowest files at depth 2 (`test_comb_numbers.py`, minutes on two
/// cores) through its package `__init__`.
pub const REGRESSION_FILES: usize = 3;

/// How many import steps from a touched module a test may be: 1 is a test
/// that imports it, 2 a test that imports a non-test module importing it.
/// Beyond two steps nearly every test of a large package qualifies (sympy's
/// `sympy/__init__.py` imports everything), which says nothing.
pub const IMPORT_DEPTH: usize = 2;

/// Lines one import statement may span (a parenthesised name list). A
/// parenthesis that never closes, in text that only looked like an import,
/// stops swallowing the file here.
pub const MAX_IMPORT_LINES: usize = 200;

/// Test files among `files` (repository-relative paths) whose imports reach
/// a module in `touched` (repository-relative paths of changed `.py` files),
/// directly or through at most [`IMPORT_DEPTH`]` - 1` non-test modules.
/// A touched `__init__.py` stands for its whole package. Closest first;
/// among equals, tests sharing more leading directories with a touched
/// module first; then by path. At most `cap` files, each one the runners
/// collect tests from (`test*.py`, `*_test.py`; never `conftest.py`).
/// Unreadable, non-UTF-8 and oversized files import nothing.
pub fn importing_tests(
    root: &Path,
    files: &[String],
    touched: &[String],
    cap: usize,
) -> Vec<String> {
    let python: Vec<&str> = files
        .iter()
        .map(String::as_str)
        .filter(|f| f.ends_with(".py"))
        .collect();
    let graph = Graph::new(root, &python);
    let touched: Vec<&str> = touched
        .iter()
        .map(String::as_str)
        .filter(|t| t.ends_with(".py"))
        .collect();
    let seeds: Vec<usize> = python
        .iter()
        .enumerate()
        .filter(|(_, f)| touched.iter().any(|t| stands_for(t, f)))
        .map(|(i, _)| i)
        .collect();
    let distance = graph.distances_to(&seeds, |i| !is_test_file(python[i]));
    let mut found: Vec<(usize, usize, &str)> = distance
        .iter()
        .enumerate()
        .filter_map(|(i, d)| Some((i, (*d)?)))
        .map(|(i, d)| (d, python[i]))
        .filter(|(d, f)| *d > 0 && is_test_module(f) && !touched.contains(f))
        .map(|(d, f)| (d, shared_dirs(f, &touched), f))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(b.2)));
    found
        .into_iter()
        .take(cap)
        .map(|(_, _, f)| f.to_string())
        .collect()
}

/// Whether touching `touched` touches `file`: the same file, or a non-test
/// file in the package a touched `__init__.py` stands for.
fn stands_for(touched: &str, file: &str) -> bool {
    if touched == file {
        return true;
    }
    touched
        .strip_suffix("__init__.py")
        .is_some_and(|dir| file.starts_with(dir) && !is_test_file(file))
}

/// Whether the runners collect tests from `path`: a test file (see
/// [`is_test_file`]) named `test*.py` (pytest's `test_*.py`, Django's
/// `tests.py`) or `*_test.py`. Helpers under `tests/` and `conftest.py`
/// hold no tests of their own.
fn is_test_module(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    is_test_file(path) && (name.starts_with("test") || name.ends_with("_test.py"))
}

/// The most leading directories `test` shares with any of `touched`.
fn shared_dirs(test: &str, touched: &[&str]) -> usize {
    let dirs = |p: &str| -> Vec<String> {
        let parts: Vec<&str> = p.split('/').collect();
        parts[..parts.len().saturating_sub(1)]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let test_dirs = dirs(test);
    touched
        .iter()
        .map(|t| {
            dirs(t)
                .iter()
                .zip(&test_dirs)
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The files' import edges, reversed: for each file, the files importing it.
struct Graph {
    importers: Vec<Vec<usize>>,
}

impl Graph {
    fn new(root: &Path, files: &[&str]) -> Graph {
        let packages: HashSet<&str> = files
            .iter()
            .filter_map(|f| f.strip_suffix("/__init__.py"))
            .collect();
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            for name in module_names(f, &packages) {
                by_name.entry(name).or_default().push(i);
            }
        }
        let modules = Modules { by_name };
        let imports: Vec<Vec<Import>> = files.par_iter().map(|f| read_imports(root, f)).collect();
        let mut importers = vec![Vec::new(); files.len()];
        for (i, (file, list)) in files.iter().zip(&imports).enumerate() {
            let package = package_of(file, &packages);
            let mut targets = BTreeSet::new();
            for import in list {
                modules.targets(import, &package, &mut targets);
            }
            for t in targets.into_iter().filter(|t| *t != i) {
                importers[t].push(i);
            }
        }
        Graph { importers }
    }

    /// Import steps from each file to the nearest seed (0 for a seed),
    /// within [`IMPORT_DEPTH`]; only files that `passes` lets through are
    /// followed further.
    fn distances_to(&self, seeds: &[usize], passes: impl Fn(usize) -> bool) -> Vec<Option<usize>> {
        let mut distance = vec![None; self.importers.len()];
        let mut queue = VecDeque::new();
        for s in seeds {
            distance[*s] = Some(0);
            queue.push_back(*s);
        }
        while let Some(f) = queue.pop_front() {
            let d = distance[f].unwrap_or(0);
            if d >= IMPORT_DEPTH || (d > 0 && !passes(f)) {
                continue;
            }
            for importer in &self.importers[f] {
                if distance[*importer].is_none() {
                    distance[*importer] = Some(d + 1);
                    queue.push_back(*importer);
                }
            }
        }
        distance
    }
}

/// The dotted names a file is importable by (see the module doc).
fn module_names(path: &str, packages: &HashSet<&str>) -> Vec<String> {
    let Some(stem) = path.strip_suffix(".py") else {
        return Vec::new();
    };
    let parts: Vec<&str> = stem.split('/').collect();
    let chain_root = package_root(&parts, packages);
    let mut roots = vec![chain_root, 0];
    if matches!(parts.first(), Some(&"src" | &"lib")) && parts.len() > 1 {
        roots.push(1);
    }
    let mut names: Vec<String> = roots
        .into_iter()
        .filter_map(|r| dotted(&parts[r..]))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The name `path` is imported by from its source root (the directory
/// above its topmost chain of packages, see the module doc), the packages
/// known from `files` (the repository's `.py` files): `lib/mpl/axes.py` is
/// `mpl.axes`, `tests/test_x.py` with no `__init__.py` beside it `test_x`.
pub fn module_name(path: &str, files: &[String]) -> Option<String> {
    let packages: HashSet<&str> = files
        .iter()
        .filter_map(|f| f.strip_suffix("/__init__.py"))
        .collect();
    let parts: Vec<&str> = path.strip_suffix(".py")?.split('/').collect();
    dotted(&parts[package_root(&parts, &packages)..])
}

/// The index of the first path part below the file's source root: the
/// directory above its topmost unbroken chain of packages.
fn package_root(parts: &[&str], packages: &HashSet<&str>) -> usize {
    let mut root = parts.len().saturating_sub(1);
    while root > 0 && packages.contains(parts[..root].join("/").as_str()) {
        root -= 1;
    }
    root
}

/// `a/b/__init__` → `a.b`; `a/b/c` → `a.b.c`; a bare `__init__` → none.
fn dotted(parts: &[&str]) -> Option<String> {
    let parts = match parts.split_last() {
        Some((&"__init__", rest)) => rest,
        _ => parts,
    };
    (!parts.is_empty()).then(|| parts.join("."))
}

/// The package relative imports in `path` start from: the module itself for
/// an `__init__.py`, its parent otherwise.
fn package_of(path: &str, packages: &HashSet<&str>) -> Vec<String> {
    let Some(stem) = path.strip_suffix(".py") else {
        return Vec::new();
    };
    let parts: Vec<&str> = stem.split('/').collect();
    let root = package_root(&parts, packages);
    parts[root..parts.len().saturating_sub(1)]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// One import statement's module and names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Import {
    /// Leading dots of a relative import; 0 for an absolute one.
    level: usize,
    /// The module: `a.b` of `import a.b` or `from a.b import c`; empty in
    /// `from . import c`.
    module: String,
    /// The names after `from ... import`; empty for `import a.b` and `*`.
    names: Vec<String>,
}

struct Modules {
    by_name: HashMap<String, Vec<usize>>,
}

impl Modules {
    /// The files of the most specific existing module among `name` and its
    /// parents (`a.b.c`, then `a.b`, then `a`).
    fn most_specific(&self, name: &str) -> Option<&[usize]> {
        let mut name = name;
        loop {
            if let Some(files) = self.by_name.get(name) {
                return Some(files);
            }
            name = &name[..name.rfind('.')?];
        }
    }

    /// Adds the files `import` loads, as seen from `package`.
    fn targets(&self, import: &Import, package: &[String], out: &mut BTreeSet<usize>) {
        let base = if import.level == 0 {
            import.module.clone()
        } else {
            let up = import.level - 1;
            if up > package.len() {
                return;
            }
            let mut parts: Vec<&str> = package[..package.len() - up]
                .iter()
                .map(String::as_str)
                .collect();
            if !import.module.is_empty() {
                parts.push(&import.module);
            }
            parts.join(".")
        };
        let mut add = |name: &str| {
            if let Some(files) = self.most_specific(name) {
                out.extend(files.iter().copied());
            }
        };
        if import.names.is_empty() {
            if !base.is_empty() {
                add(&base);
            }
            return;
        }
        for name in &import.names {
            // `from a import b`: the submodule `a.b` when there is one, else
            // the name comes from `a` itself.
            let full = if base.is_empty() {
                name.clone()
            } else {
                format!("{base}.{name}")
            };
            if self.by_name.contains_key(&full) {
                add(&full);
            } else if !base.is_empty() {
                add(&base);
            }
        }
    }
}

/// The imports of one file; none when it cannot be read as UTF-8 text or is
/// larger than [`super::MAX_FILE_BYTES`].
fn read_imports(root: &Path, path: &str) -> Vec<Import> {
    // No link followed (see `symbols::read_source`).
    match super::symbols::read_source(root, path) {
        Some(text) => parse_imports(&text),
        None => Vec::new(),
    }
}

/// The import statements of `source`, at any nesting.
fn parse_imports(source: &str) -> Vec<Import> {
    let snippet = import_lines(source);
    if snippet.is_empty() {
        return Vec::new();
    }
    let Some(tree) = parse_tree(&snippet) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cursor = tree.walk();
    loop {
        let node = cursor.node();
        let descend = match node.kind() {
            "import_statement" | "import_from_statement" => {
                if !node.has_error() {
                    out.extend(import_of(node, &snippet));
                }
                false
            }
            _ => true,
        };
        if descend && cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return out;
            }
        }
    }
}

/// The statements of `source` that start with `import ` or `from ... import`,
/// each dedented onto its own lines with its continuation lines.
fn import_lines(source: &str) -> String {
    let mut out = String::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let start = line.trim_start();
        let is_import = start.starts_with("import ")
            || (start.starts_with("from ") && (start.contains(" import") || ends_continued(start)));
        if !is_import {
            continue;
        }
        let mut statement = start.to_string();
        let mut depth = paren_balance(start);
        let mut continued = ends_continued(start);
        let mut taken = 1;
        while (depth > 0 || continued) && taken < MAX_IMPORT_LINES {
            let Some(next) = lines.next() else { break };
            statement.push('\n');
            statement.push_str(next.trim_start());
            depth += paren_balance(next);
            continued = ends_continued(next);
            taken += 1;
        }
        if depth > 0 || continued {
            // Unterminated: not a real import statement.
            continue;
        }
        out.push_str(&statement);
        out.push('\n');
    }
    out
}

/// Opening minus closing parentheses before any comment.
fn paren_balance(line: &str) -> i64 {
    let code = line.split('#').next().unwrap_or(line);
    code.chars()
        .map(|c| match c {
            '(' => 1,
            ')' => -1,
            _ => 0,
        })
        .sum()
}

fn ends_continued(line: &str) -> bool {
    line.split('#')
        .next()
        .unwrap_or(line)
        .trim_end()
        .ends_with('\\')
}

/// One `import_statement` or `import_from_statement` node as an [`Import`]
/// per module it names.
fn import_of(node: Node, source: &str) -> Vec<Import> {
    let text = |n: Node| n.utf8_text(source.as_bytes()).unwrap_or("").to_string();
    let dotted_of = |n: Node| match n.kind() {
        "aliased_import" => n.child_by_field_name("name").map(text),
        "dotted_name" => Some(text(n)),
        _ => None,
    };
    let mut cursor = node.walk();
    let names: Vec<String> = node
        .children_by_field_name("name", &mut cursor)
        .filter_map(dotted_of)
        .map(|n| without_spaces(&n))
        .collect();
    if node.kind() == "import_statement" {
        return names
            .into_iter()
            .map(|module| Import {
                level: 0,
                module,
                names: Vec::new(),
            })
            .collect();
    }
    let Some(module) = node.child_by_field_name("module_name") else {
        return Vec::new();
    };
    let (level, module) = match module.kind() {
        "relative_import" => {
            let mut c = module.walk();
            let children: Vec<Node> = module.children(&mut c).collect();
            let level = children
                .iter()
                .find(|n| n.kind() == "import_prefix")
                .map_or(0, |p| text(*p).chars().filter(|c| *c == '.').count());
            let name = children
                .iter()
                .find(|n| n.kind() == "dotted_name")
                .map(|n| text(*n))
                .unwrap_or_default();
            (level, name)
        }
        _ => (0, text(module)),
    };
    vec![Import {
        level,
        module: without_spaces(&module),
        names,
    }]
}

/// `a . b` (legal Python) as `a.b`.
fn without_spaces(name: &str) -> String {
    name.chars().filter(|c| !c.is_whitespace()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    type Tree = &'static [(&'static str, &'static str)];

    /// A package with a core module, an API module over it, and a facade
    /// over that.
    const PKG: Tree = &[
        ("pkg/__init__.py", "from pkg.api import run\n"),
        (
            "pkg/core.py",
            "import os\n\ndef thing():\n    return os.sep\n",
        ),
        (
            "pkg/api.py",
            "from pkg.core import thing\n\ndef run():\n    return thing()\n",
        ),
        ("pkg/facade.py", "from . import api\n"),
        ("pkg/tests/__init__.py", ""),
        ("setup.py", "from setuptools import setup\n"),
    ];

    fn check(
        name: &str,
        trees: &[Tree],
        touched: &[&str],
        cap: usize,
        want: &[&str],
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut files = Vec::new();
        for (path, text) in trees.iter().flat_map(|t| t.iter()) {
            let full = dir.path().join(path);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(full, text)?;
            files.push(path.to_string());
        }
        let touched: Vec<String> = touched.iter().map(|t| t.to_string()).collect();
        let got = importing_tests(dir.path(), &files, &touched, cap);
        assert_eq!(got, want, "{name}");
        Ok(())
    }

    /// Name, files, touched files, cap, and the files expected.
    type Case = (
        &'static str,
        &'static [Tree],
        &'static [&'static str],
        usize,
        &'static [&'static str],
    );

    #[rustfmt::skip]
    const CASES: &[Case] = &[
        ("direct import", &[PKG, &[
            ("tests/test_core.py", "import pkg.core\n"),
            ("tests/test_os.py", "import os\n"),
        ]], &["pkg/core.py"], 5, &["tests/test_core.py"]),
        ("import as, in a function, in a try block, parenthesised", &[PKG, &[
            ("tests/test_as.py", "import pkg.core as c\n"),
            ("tests/test_fn.py", "def test_x():\n    from pkg.core import thing\n    assert thing()\n"),
            ("tests/test_try.py", "try:\n    import pkg.core\nexcept ImportError:  # (old\n    pkg = None\n"),
            ("tests/test_paren.py", "from pkg.core import (\n    thing,  # the one\n    other,\n)\n"),
            ("tests/test_doc.py", "def test_y():\n    \"\"\"Checks that import works.\"\"\"\n"),
        ]], &["pkg/core.py"], 5,
            &["tests/test_as.py", "tests/test_fn.py", "tests/test_paren.py", "tests/test_try.py"]),
        ("from-import of a name and of a submodule", &[PKG, &[
            ("tests/test_name.py", "from pkg.core import thing\n"),
            ("tests/test_sub.py", "from pkg import core\n"),
            // `run` is a name in pkg/__init__.py, not the core module.
            ("tests/test_init_name.py", "from pkg import run\n"),
        ]], &["pkg/core.py"], 5, &["tests/test_name.py", "tests/test_sub.py"]),
        ("relative imports", &[PKG, &[
            ("pkg/tests/test_up.py", "from .. import core\n"),
            ("pkg/tests/test_up_name.py", "from ..core import thing\n"),
            ("pkg/tests/test_sibling.py", "from . import test_up\n"),
            ("pkg/tests/test_too_far.py", "from .... import core\n"),
        ]], &["pkg/core.py"], 5, &["pkg/tests/test_up.py", "pkg/tests/test_up_name.py"]),
        ("src layout", &[&[
            ("src/lib2/__init__.py", ""),
            ("src/lib2/models.py", "class Model: pass\n"),
            ("tests/test_models.py", "from lib2.models import Model\n"),
            ("tests/test_other.py", "from lib2 import Model\n"),
        ]], &["src/lib2/models.py"], 5, &["tests/test_models.py"]),
        ("namespace package under src without __init__", &[&[
            ("src/nsp/mod.py", "X = 1\n"),
            ("tests/test_mod.py", "from nsp.mod import X\n"),
        ]], &["src/nsp/mod.py"], 5, &["tests/test_mod.py"]),
        ("through a non-test module, closer first, two steps at most", &[PKG, &[
            ("tests/test_api.py", "import pkg.api\n"),
            ("tests/test_core.py", "from pkg.core import thing\n"),
            ("tests/test_facade.py", "from pkg.facade import api\n"),
            ("tests/helpers.py", "import pkg.core\n"),
            ("tests/test_helped.py", "from helpers import thing\n"),
        ]], &["pkg/core.py"], 5,
            // test_facade is three steps away (facade → api → core); helpers
            // is under tests/, which leads no further, and holds no tests.
            &["tests/test_core.py", "tests/test_api.py"]),
        ("same package tree first, then by path", &[PKG, &[
            ("a_tests/test_a.py", "import pkg.core\n"),
            ("pkg/tests/test_z.py", "import pkg.core\n"),
        ]], &["pkg/core.py"], 5, &["pkg/tests/test_z.py", "a_tests/test_a.py"]),
        ("the cap", &[PKG, &[
            ("tests/test_c.py", "import pkg.core\n"),
            ("tests/test_a.py", "import pkg.core\n"),
            ("tests/test_b.py", "import pkg.core\n"),
        ]], &["pkg/core.py"], 2, &["tests/test_a.py", "tests/test_b.py"]),
        ("conftest excluded, Django's tests.py and *_test.py kept", &[PKG, &[
            ("tests/conftest.py", "import pkg.core\n"),
            ("tests/test_x.py", "import pkg.core\n"),
            ("tests/queries/tests.py", "import pkg.core\n"),
            ("pkg/core_test.py", "import pkg.core\n"),
        ]], &["pkg/core.py"], 5, &["pkg/core_test.py", "tests/queries/tests.py", "tests/test_x.py"]),
        ("a touched __init__.py is its package", &[PKG, &[
            ("tests/test_pkg.py", "import pkg\n"),
            ("tests/test_run.py", "from pkg import run\n"),
            ("tests/test_core.py", "from pkg.core import thing\n"),
            ("pkg/tests/test_inside.py", "from ..core import thing\n"),
            ("tests/test_os.py", "import os\n"),
        ]], &["pkg/__init__.py"], 5,
            &["pkg/tests/test_inside.py", "tests/test_core.py", "tests/test_pkg.py", "tests/test_run.py"]),
        ("Django's tests directory and a lib layout", &[&[
            ("lib/mpl/__init__.py", ""),
            ("lib/mpl/axes.py", "from . import colors\n"),
            ("lib/mpl/colors.py", ""),
            ("lib/mpl/tests/__init__.py", ""),
            ("lib/mpl/tests/test_axes.py", "from mpl.axes import Axes\n"),
            ("tests/utils_tests/__init__.py", ""),
            ("tests/utils_tests/test_colors.py", "from mpl import colors\n"),
            ("tests/utils_tests/test_axes_too.py", "from utils_tests.test_colors import x\n"),
        ]], &["lib/mpl/colors.py"], 5,
            &["tests/utils_tests/test_colors.py", "lib/mpl/tests/test_axes.py"]),
        ("nothing touched, nothing found", &[PKG, &[
            ("tests/test_core.py", "import pkg.core\n"),
        ]], &[], 5, &[]),
    ];

    #[test]
    fn tests_found_by_their_imports() -> Result<(), Box<dyn std::error::Error>> {
        for (name, trees, touched, cap, want) in CASES {
            check(name, trees, touched, *cap, want)?;
        }
        Ok(())
    }

    #[test]
    fn a_files_module_is_named_from_its_source_root() {
        let files: Vec<String> = [
            "lib/mpl/__init__.py",
            "lib/mpl/axes.py",
            "pkg/__init__.py",
            "pkg/sub/__init__.py",
            "pkg/sub/m.py",
            "tests/test_x.py",
            "setup.py",
        ]
        .map(String::from)
        .to_vec();
        let cases = [
            ("lib/mpl/axes.py", Some("mpl.axes")),
            ("lib/mpl/__init__.py", Some("mpl")),
            ("pkg/sub/m.py", Some("pkg.sub.m")),
            ("tests/test_x.py", Some("test_x")),
            ("setup.py", Some("setup")),
            ("README.md", None),
        ];
        for (path, want) in cases {
            assert_eq!(module_name(path, &files).as_deref(), want, "{path}");
        }
    }

    #[test]
    fn module_names_of_layouts() {
        let packages: HashSet<&str> = [
            "lib/mpl",
            "lib/mpl/tests",
            "sympy",
            "sympy/core",
            "tests/utils_tests",
        ]
        .into_iter()
        .collect();
        let cases: &[(&str, &[&str])] = &[
            ("lib/mpl/axes.py", &["lib.mpl.axes", "mpl.axes"]),
            ("lib/mpl/__init__.py", &["lib.mpl", "mpl"]),
            ("sympy/core/basic.py", &["sympy.core.basic"]),
            ("sympy/__init__.py", &["sympy"]),
            (
                "tests/utils_tests/test_text.py",
                &["tests.utils_tests.test_text", "utils_tests.test_text"],
            ),
            ("tests/test_x.py", &["test_x", "tests.test_x"]),
            ("src/nsp/mod.py", &["mod", "nsp.mod", "src.nsp.mod"]),
            ("__init__.py", &[]),
            ("README.md", &[]),
        ];
        for (path, want) in cases {
            assert_eq!(module_names(path, &packages), *want, "{path}");
        }
    }

    #[test]
    fn imports_of_statements() {
        let imp = |level, module: &str, names: &[&str]| Import {
            level,
            module: module.to_string(),
            names: names.iter().map(|n| n.to_string()).collect(),
        };
        let cases: &[(&str, Vec<Import>)] = &[
            (
                "import a.b.c, d as e\n",
                vec![imp(0, "a.b.c", &[]), imp(0, "d", &[])],
            ),
            (
                "from a.b import c as d, e\n",
                vec![imp(0, "a.b", &["c", "e"])],
            ),
            ("from . import x\n", vec![imp(1, "", &["x"])]),
            ("from ..m import y\n", vec![imp(2, "m", &["y"])]),
            ("from a import *\n", vec![imp(0, "a", &[])]),
            ("from a \\\n    import b\n", vec![imp(0, "a", &["b"])]),
            (
                "if x:\n    import a\nelse:\n    import b\n",
                vec![imp(0, "a", &[]), imp(0, "b", &[])],
            ),
            ("s = '''\nfrom the docs, import nothing\n'''\n", vec![]),
            ("from a import (b,\n", vec![]),
        ];
        for (source, want) in cases {
            assert_eq!(parse_imports(source), *want, "{source}");
        }
    }
}
