//! No import circles: the crate's modules form layers. Every `src/**/*.rs`
//! (not `src/main.rs`, the binary) is read, mapped to its module path, and
//! the modules it references are extracted: `use crate::…` trees, `crate::…`
//! paths in code, and `super::…`/`self::…` resolved relative to the file
//! (and to any inline `mod` in it), comments and string literals skipped.
//!
//! Two rules, one check: the top-level modules form a DAG (X → Y when a
//! file under X references anything under Y), and inside every directory
//! module its children do (a child using its parent's `mod.rs` items is no
//! edge, nor is the parent declaring or using its children). A failure
//! prints every circle as a path with the file and line of each edge.
//!
//! The workspace's member crates (`engine/`, `sandbox/`) are read the same
//! way and held to the layer order [`MEMBER_LAYERS`] writes down for each.
//! A name their crate root brings in from one of its modules (`pub use
//! placement::Plan;`, `pub use policy::*;`) counts as that module's, so
//! `crate::Plan` is a use of `placement`, not of the root.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// A module path from the crate root: `[]` is the root, `["batch",
/// "rundir"]` is `crate::batch::rundir`.
type ModPath = Vec<String>;

/// One referenced path, absolute from the crate root, and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    path: ModPath,
    line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// Tokens of Rust source with their lines, without comments, string and
/// character literals (lifetimes are dropped too; numbers become idents
/// that never match a keyword).
fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&chars, i + 1, &mut line);
        } else if c == '\'' {
            if at(i + 1) == '\\' {
                // An escaped character literal: up to the closing quote.
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or label: skip the quote, its name follows.
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            let str_prefix = matches!(word.as_str(), "b" | "c");
            let hashes_then_quote = {
                let mut k = i;
                while at(k) == '#' {
                    k += 1;
                }
                at(k) == '"'
            };
            if raw_prefix && hashes_then_quote {
                // A raw string: r"…", r#"…"#, with as many hashes.
                let mut hashes = 0;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1;
                loop {
                    if i >= chars.len() {
                        break;
                    }
                    if chars[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                        i += 1 + hashes;
                        break;
                    }
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            } else if word == "r" && at(i) == '#' {
                // A raw identifier: r#type.
                i += 1;
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push((Tok::Ident(chars[start..i].iter().collect()), line));
            } else if str_prefix && at(i) == '"' {
                i = skip_string(&chars, i + 1, &mut line);
            } else if word == "b" && at(i) == '\'' {
                i += 1;
                if at(i) == '\\' {
                    i += 1;
                }
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else {
                out.push((Tok::Ident(word), line));
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// Skips a string literal's body from after its opening quote; returns the
/// index after the closing quote.
fn skip_string(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                if chars.get(i + 1) == Some(&'\n') {
                    *line += 1;
                }
                i += 2;
            }
            '"' => return i + 1,
            '\n' => {
                *line += 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    i
}

fn ident(tok: Option<&(Tok, usize)>) -> Option<&str> {
    match tok {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

fn is(tok: Option<&(Tok, usize)>, want: &Tok) -> bool {
    tok.is_some_and(|(t, _)| t == want)
}

/// A path as written (`crate`/`super`/`self` first) made absolute from
/// `module`; `None` for paths of other crates or out of the root. The
/// engine crate counts as the `engine` module that re-exports it.
fn resolve(segments: &[String], module: &[String]) -> Option<ModPath> {
    let first = segments.first()?;
    match first.as_str() {
        "crate" | "$crate" => Some(segments[1..].to_vec()),
        "patchwright_engine" => {
            let mut path = vec!["engine".to_string()];
            path.extend(segments[1..].iter().cloned());
            Some(path)
        }
        "self" => {
            let mut path = module.to_vec();
            path.extend(segments[1..].iter().cloned());
            Some(path)
        }
        "super" => {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            let mut path = module.get(..module.len().checked_sub(ups)?)?.to_vec();
            path.extend(segments[ups..].iter().filter(|s| *s != "self").cloned());
            Some(path)
        }
        _ => None,
    }
}

/// The leaves of the `use` tree starting at `*i` (after `use`), each as
/// the path written; `*i` ends after the tree.
fn use_tree(
    toks: &[(Tok, usize)],
    i: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, usize)>,
) {
    let mut path = prefix.to_vec();
    let line = toks.get(*i).map_or(0, |t| t.1);
    if is(toks.get(*i), &Tok::PathSep) {
        // `use ::extern_crate::…`
        path.push("::".into());
        *i += 1;
    }
    loop {
        match toks.get(*i) {
            Some((Tok::Ident(s), _)) => {
                path.push(s.clone());
                *i += 1;
                if is(toks.get(*i), &Tok::PathSep) {
                    *i += 1;
                    continue;
                }
                break;
            }
            Some((Tok::Punct('{'), _)) => {
                *i += 1;
                while *i < toks.len() && !is(toks.get(*i), &Tok::Punct('}')) {
                    use_tree(toks, i, &path, out);
                    if is(toks.get(*i), &Tok::Punct(',')) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            Some((Tok::Punct('*'), _)) => {
                *i += 1;
                break;
            }
            _ => break,
        }
    }
    if ident(toks.get(*i)) == Some("as") {
        *i += 2;
    }
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    out.push((path, line));
}

/// The references of one file whose module is `module`.
fn references(src: &str, module: &[String]) -> Vec<Reference> {
    let toks = tokens(src);
    let mut refs = Vec::new();
    // Inline modules open here: (name, brace depth inside them).
    let mut scopes: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut pending_mod: Option<String> = None;
    let current = |scopes: &[(String, usize)]| -> ModPath {
        let mut m = module.to_vec();
        m.extend(scopes.iter().map(|(name, _)| name.clone()));
        m
    };
    let mut i = 0;
    while i < toks.len() {
        let (tok, line) = &toks[i];
        match tok {
            Tok::Punct('{') => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    scopes.push((name, depth));
                }
                i += 1;
            }
            Tok::Punct('}') => {
                if scopes.last().is_some_and(|(_, d)| *d == depth) {
                    scopes.pop();
                }
                depth -= 1;
                i += 1;
            }
            Tok::Punct(';') => {
                pending_mod = None;
                i += 1;
            }
            Tok::Ident(word) if word == "mod" => {
                pending_mod = ident(toks.get(i + 1)).map(str::to_string);
                i += 2;
            }
            Tok::Ident(word) if word == "use" => {
                i += 1;
                let mut leaves = Vec::new();
                use_tree(&toks, &mut i, &[], &mut leaves);
                let here = current(&scopes);
                for (path, line) in leaves {
                    if let Some(path) = resolve(&path, &here) {
                        refs.push(Reference { path, line });
                    }
                }
            }
            Tok::Ident(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && is(toks.get(i + 1), &Tok::PathSep)
                    && !(i > 0 && is(toks.get(i - 1), &Tok::PathSep)) =>
            {
                let dollar = i > 0 && is(toks.get(i - 1), &Tok::Punct('$'));
                let mut path = vec![if dollar {
                    format!("${word}")
                } else {
                    word.clone()
                }];
                i += 1;
                while is(toks.get(i), &Tok::PathSep) {
                    match ident(toks.get(i + 1)) {
                        Some(s) => {
                            path.push(s.to_string());
                            i += 2;
                        }
                        None => break,
                    }
                }
                if let Some(path) = resolve(&path, &current(&scopes)) {
                    refs.push(Reference { path, line: *line });
                }
            }
            _ => i += 1,
        }
    }
    refs
}

/// The module path of a file under `src/`, `None` for the binary.
fn module_of(relative: &Path) -> Option<ModPath> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    match (parts.is_empty(), stem) {
        (true, "main") => None,
        (true, "lib") => Some(Vec::new()),
        (_, "mod") => Some(parts),
        _ => {
            parts.push(stem.to_string());
            Some(parts)
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Where an edge comes from: a file (relative to the crate) and a line.
type Site = (String, usize);

/// Edges between the children of every directory module, keyed by that
/// module: child → child → the first site that makes the edge.
type Layers = BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, Site>>>;

/// Each file's module and references → the sibling edges at every level.
fn layers(files: &[(String, ModPath, Vec<Reference>)]) -> Layers {
    let modules: BTreeSet<ModPath> = files.iter().map(|(_, m, _)| m.clone()).collect();
    let mut out = Layers::new();
    for m in &modules {
        if modules
            .iter()
            .any(|c| c.len() == m.len() + 1 && c.starts_with(m))
        {
            out.insert(m.clone(), BTreeMap::new());
        }
    }
    for (file, from, refs) in files {
        for r in refs {
            // The deepest known module the path names.
            let Some(target) = (0..=r.path.len())
                .rev()
                .map(|n| &r.path[..n])
                .find(|p| modules.contains(*p))
            else {
                continue;
            };
            // Their deepest common ancestor is the level where they are
            // siblings; a module using its ancestor (or its descendant) is
            // no sibling edge.
            let common = from.iter().zip(target).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == target.len() {
                continue;
            }
            let level = from[..common].to_vec();
            let edges = out.entry(level).or_default();
            let site = (file.clone(), r.line);
            let to = edges
                .entry(from[common].clone())
                .or_default()
                .entry(target[common].clone())
                .or_insert_with(|| site.clone());
            if site < *to {
                *to = site;
            }
        }
    }
    out
}

/// Every circle among `edges`, as node paths starting and ending at the
/// same node: for each edge inside a circle, the shortest circle through
/// it, each circle once.
fn circles(edges: &BTreeMap<String, BTreeMap<String, Site>>) -> Vec<Vec<String>> {
    let shortest = |from: &str, to: &str| -> Option<Vec<String>> {
        let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = VecDeque::from([from]);
        let mut seen = BTreeSet::from([from]);
        while let Some(node) = queue.pop_front() {
            if node == to {
                let mut path = vec![to.to_string()];
                let mut at = to;
                while let Some(p) = prev.get(at) {
                    path.push(p.to_string());
                    at = p;
                }
                path.reverse();
                return Some(path);
            }
            for next in edges.get(node).into_iter().flat_map(|e| e.keys()) {
                if seen.insert(next) {
                    prev.insert(next, node);
                    queue.push_back(next);
                }
            }
        }
        None
    };
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for (a, targets) in edges {
        for b in targets.keys() {
            if let Some(back) = shortest(b, a) {
                // a → b → … → a, rotated to start at its least node.
                let mut cycle = vec![a.clone()];
                cycle.extend(back[..back.len() - 1].iter().cloned());
                let start = (0..cycle.len()).min_by_key(|&k| &cycle[k]).unwrap_or(0);
                cycle.rotate_left(start);
                cycle.push(cycle[0].clone());
                found.insert(cycle);
            }
        }
    }
    found.into_iter().collect()
}

/// The nodes in topological order (lowest first: a node after everything
/// it references), ties by name; `None` when there is a circle.
fn topological(
    nodes: &BTreeSet<String>,
    edges: &BTreeMap<String, BTreeMap<String, Site>>,
) -> Option<Vec<String>> {
    let mut order = Vec::new();
    let mut done: BTreeSet<&String> = BTreeSet::new();
    while done.len() < nodes.len() {
        let next = nodes.iter().find(|n| {
            !done.contains(n)
                && edges
                    .get(*n)
                    .is_none_or(|e| e.keys().all(|t| done.contains(t) || !nodes.contains(t)))
        })?;
        done.insert(next);
        order.push(next.clone());
    }
    Some(order)
}

/// The top-level modules `src/lib.rs` declares: the library. Files of
/// other modules under `src/` (the binary's `cli`) are not checked.
fn library_modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))?;
            Some(rest.strip_suffix(';')?.trim().to_string())
        })
        .collect()
}

/// The keywords that may stand between `pub` (or `pub(…)`) and the name
/// of a top-level item.
const ITEM_KEYWORDS: &[&str] = &[
    "fn", "struct", "enum", "const", "static", "type", "trait", "mod", "union", "unsafe", "async",
    "extern", "mut",
];

/// The names of a file's top-level items visible outside it (`pub`,
/// `pub(crate)`, …, and what its `pub use` brings in; a rename under its
/// original name): what a glob import of its module brings in.
fn public_items(src: &str) -> Vec<String> {
    let toks = tokens(src);
    let mut out = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => depth -= 1,
            Tok::Ident(word) if word == "pub" && depth == 0 => {
                let mut k = i + 1;
                if is(toks.get(k), &Tok::Punct('(')) {
                    while k < toks.len() && !is(toks.get(k), &Tok::Punct(')')) {
                        k += 1;
                    }
                    k += 1;
                }
                if ident(toks.get(k)) == Some("use") {
                    k += 1;
                    let mut leaves = Vec::new();
                    use_tree(&toks, &mut k, &[], &mut leaves);
                    out.extend(
                        leaves
                            .into_iter()
                            .filter_map(|(path, _)| path.last().cloned()),
                    );
                    i = k;
                    continue;
                }
                while let Some(word) = ident(toks.get(k)) {
                    if !ITEM_KEYWORDS.contains(&word) {
                        out.push(word.to_string());
                        break;
                    }
                    k += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The names the crate root's own top-level `use` declarations (re-exports
/// or not) bring in from the crate's `modules`, each with the path it
/// comes from: `pub use placement::{plan, Plan};` maps `plan` and `Plan` to
/// `placement::plan` and `placement::Plan`; a glob (`pub use policy::*;`)
/// maps every name `items` gives for that module. Names from other crates
/// are left out (a use of them is no edge); a rename (`as`) is read under
/// its original name.
fn root_imports(
    lib: &str,
    modules: &BTreeSet<String>,
    items: impl Fn(&[String]) -> Vec<String>,
) -> BTreeMap<String, ModPath> {
    let toks = tokens(lib);
    let mut out = BTreeMap::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => depth -= 1,
            Tok::Ident(word) if word == "use" && depth == 0 => {
                i += 1;
                let mut leaves = Vec::new();
                use_tree(&toks, &mut i, &[], &mut leaves);
                let glob = is(toks.get(i.wrapping_sub(1)), &Tok::Punct('*'));
                for (written, _) in leaves {
                    // At the root, `use placement::…` names the module.
                    let path = resolve(&written, &[]).unwrap_or(written);
                    if !path.first().is_some_and(|m| modules.contains(m)) {
                        continue;
                    }
                    if glob {
                        for name in items(&path) {
                            let mut to = path.clone();
                            to.push(name.clone());
                            out.insert(name, to);
                        }
                    } else if let Some(name) = path.last().filter(|_| path.len() > 1) {
                        out.insert(name.clone(), path.clone());
                    }
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The files of this crate's library: its module and references each.
fn crate_files() -> Vec<(String, ModPath, Vec<Reference>)> {
    crate_files_in(Path::new(env!("CARGO_MANIFEST_DIR")))
}

/// The files of the library of the crate in `dir` (`src/` under it, the
/// modules `src/lib.rs` declares), each shown relative to the workspace;
/// references to names the crate root imports from its modules point at
/// those modules ([`root_imports`]).
fn crate_files_in(dir: &Path) -> Vec<(String, ModPath, Vec<Reference>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
    let library = library_modules(&lib);
    let mut paths = Vec::new();
    rust_files(&dir.join("src"), &mut paths);
    let mut files = Vec::new();
    let mut sources: BTreeMap<ModPath, String> = BTreeMap::new();
    for path in paths {
        let relative = path.strip_prefix(dir.join("src")).unwrap();
        let Some(module) = module_of(relative) else {
            continue;
        };
        if module.first().is_some_and(|top| !library.contains(top)) {
            continue;
        }
        let src = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let refs = references(&src, &module);
        let shown = path.strip_prefix(root).unwrap().display().to_string();
        files.push((shown, module.clone(), refs));
        sources.insert(module, src);
    }
    let imports = root_imports(&lib, &library, |module| {
        sources
            .get(module)
            .map_or_else(Vec::new, |src| public_items(src))
    });
    for (_, _, refs) in &mut files {
        for r in refs.iter_mut() {
            let Some(first) = r.path.first() else {
                continue;
            };
            if library.contains(first) {
                continue;
            }
            if let Some(to) = imports.get(first) {
                let mut path = to.clone();
                path.extend(r.path[1..].iter().cloned());
                r.path = path;
            }
        }
    }
    files
}

/// Every circle at every level of `files`, a path with the file and line
/// of each edge; `root` names the crate root in the report.
fn circle_report(files: &[(String, ModPath, Vec<Reference>)], root: &str) -> String {
    let mut report = String::new();
    for (level, edges) in layers(files) {
        let level_name = if level.is_empty() {
            root.to_string()
        } else {
            format!("{root}::{}", level.join("::"))
        };
        for cycle in circles(&edges) {
            report.push_str(&format!("circle in {level_name}: {}\n", cycle.join(" → ")));
            for pair in cycle.windows(2) {
                let (file, line) = &edges[&pair[0]][&pair[1]];
                report.push_str(&format!("    {} → {}: {file}:{line}\n", pair[0], pair[1]));
            }
        }
    }
    report
}

#[test]
fn modules_form_layers_without_circles() {
    let files = crate_files();
    assert!(files.len() > 10, "too few modules found: {}", files.len());
    let report = circle_report(&files, "crate");
    assert!(
        report.is_empty(),
        "import circles (a lower layer must not import a higher one):\n{report}"
    );
}

/// The top-level modules from lowest to highest, for ARCHITECTURE.md's
/// "Layers" (`cargo test --test it -- architecture::layer_order --nocapture`).
#[test]
fn layer_order() {
    let files = crate_files();
    let layers = layers(&files);
    let top = layers.get(&Vec::new()).cloned().unwrap_or_default();
    let nodes: BTreeSet<String> = files
        .iter()
        .filter_map(|(_, m, _)| m.first().cloned())
        .collect();
    match topological(&nodes, &top) {
        Some(order) => println!("layers, lowest first: {}", order.join(", ")),
        None => println!("no layer order: the top-level modules have circles"),
    }
    for (dir, _) in MEMBER_LAYERS {
        let (nodes, top) = member_layers(dir);
        match topological(&nodes, &top) {
            Some(order) => println!("{dir} layers, lowest first: {}", order.join(", ")),
            None => println!("no layer order for {dir}: its top-level modules have circles"),
        }
    }
}

/// The top-level modules as ARCHITECTURE.md's "Layers" lists them, lowest
/// first: the indented lines after the section's heading, comma-separated.
fn documented_layers(architecture: &str) -> Vec<String> {
    architecture
        .lines()
        .skip_while(|l| l.trim() != "## Layers")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .skip_while(|l| !l.starts_with("    "))
        .take_while(|l| l.starts_with("    "))
        .flat_map(|l| l.split(','))
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Every use of a top-level module by another that the documented order
/// puts at or above it (the module, the one it uses, and where), and the
/// modules missing from the order or listed without existing.
fn layer_violations(
    documented: &[String],
    nodes: &BTreeSet<String>,
    top: &BTreeMap<String, BTreeMap<String, Site>>,
) -> Vec<String> {
    let mut out = Vec::new();
    let position = |m: &str| documented.iter().position(|d| d == m);
    for m in nodes {
        if position(m).is_none() {
            out.push(format!("{m} is a module but not in the documented layers"));
        }
    }
    for d in documented {
        if !nodes.contains(d) {
            out.push(format!("{d} is in the documented layers but is no module"));
        }
    }
    for (from, edges) in top {
        for (to, (file, line)) in edges {
            if let (Some(f), Some(t)) = (position(from), position(to)) {
                if t >= f {
                    out.push(format!(
                        "{from} uses {to}, which the documented layers put above it: {file}:{line}"
                    ));
                }
            }
        }
    }
    out
}

/// The top-level modules `from` uses, directly or through others.
fn reachable(from: &str, top: &BTreeMap<String, BTreeMap<String, Site>>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(m) = todo.pop() {
        for next in top.get(&m).into_iter().flat_map(|e| e.keys()) {
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    seen
}

/// The run files, the report and grading read model calls through
/// `patchwright-engine-types` only: neither they nor anything they use
/// reaches the engine (llama.cpp, candle).
#[test]
fn records_reports_and_grading_do_not_reach_the_engine() {
    let files = crate_files();
    let layers = layers(&files);
    let top = layers.get(&Vec::new()).cloned().unwrap_or_default();
    for module in ["record", "report", "eval"] {
        let used = reachable(module, &top);
        assert!(
            !used.contains("engine"),
            "{module} reaches the engine (through {:?})",
            used.iter()
                .filter(|m| reachable(m, &top).contains("engine") || *m == "engine")
                .collect::<Vec<_>>()
        );
    }
}

/// The modules keep the order ARCHITECTURE.md documents: no module uses
/// one listed above it, and the list names every module.
#[test]
fn modules_keep_the_documented_layer_order() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let documented = documented_layers(&architecture);
    assert!(
        documented.len() > 10,
        "ARCHITECTURE.md's \"Layers\" lists too few modules: {documented:?}"
    );
    let files = crate_files();
    let layers = layers(&files);
    let top = layers.get(&Vec::new()).cloned().unwrap_or_default();
    let nodes: BTreeSet<String> = files
        .iter()
        .filter_map(|(_, m, _)| m.first().cloned())
        .collect();
    let violations = layer_violations(&documented, &nodes, &top);
    assert!(
        violations.is_empty(),
        "the modules break ARCHITECTURE.md's \"Layers\" (lowest first: {}); move the \
         module or fix the document:\n{}",
        documented.join(", "),
        violations.join("\n")
    );
}

/// The workspace's member crates and the order of their top-level modules,
/// lowest first, as `MEMBER_LAYERS` keeps them (ARCHITECTURE.md's "Layers"
/// is this crate's): a module uses only modules listed before it, and every
/// module is listed. `cargo test --test it -- architecture::layer_order
/// --nocapture` prints an order the code allows.
const MEMBER_LAYERS: &[(&str, &[&str])] = &[
    (
        "engine",
        &[
            "split",
            "grammar",
            "gbnf",
            "prompt",
            "chat",
            "setup",
            "sampler",
            "speculate",
            "placement",
            "tokenizer",
            "session",
            "scheduler",
            "http",
            "candle",
            "bench",
        ],
    ),
    (
        "sandbox",
        &[
            "error",
            "output",
            "outcome",
            "seccomp",
            "bwrap",
            "policy",
            "cgroup",
            "spawner",
            "prepared",
            "wasi",
            "run",
            "preflight",
        ],
    ),
];

/// The files of the member crate in `dir` under the workspace.
fn member_files(dir: &str) -> Vec<(String, ModPath, Vec<Reference>)> {
    crate_files_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
}

/// The top-level modules of the member crate in `dir`, and their edges.
fn member_layers(dir: &str) -> (BTreeSet<String>, BTreeMap<String, BTreeMap<String, Site>>) {
    let files = member_files(dir);
    let top = layers(&files).get(&Vec::new()).cloned().unwrap_or_default();
    let nodes = files
        .iter()
        .filter_map(|(_, m, _)| m.first().cloned())
        .collect();
    (nodes, top)
}

#[test]
fn member_crates_form_layers_without_circles() {
    let mut report = String::new();
    for (dir, _) in MEMBER_LAYERS {
        let files = member_files(dir);
        assert!(
            files.len() > 5,
            "too few modules found in {dir}: {}",
            files.len()
        );
        report.push_str(&circle_report(&files, dir));
    }
    assert!(
        report.is_empty(),
        "import circles (a lower layer must not import a higher one):\n{report}"
    );
}

/// The member crates keep the order `MEMBER_LAYERS` writes down: no module
/// uses one listed above it, and the list names every module.
#[test]
fn member_crates_keep_their_layer_order() {
    let mut report = String::new();
    for (dir, order) in MEMBER_LAYERS {
        let documented: Vec<String> = order.iter().map(|m| m.to_string()).collect();
        let (nodes, top) = member_layers(dir);
        let violations = layer_violations(&documented, &nodes, &top);
        if !violations.is_empty() {
            report.push_str(&format!(
                "{dir} (lowest first: {}):\n    {}\n",
                documented.join(", "),
                violations.join("\n    ")
            ));
        }
    }
    assert!(
        report.is_empty(),
        "the member crates break their layers in tests/it/architecture.rs's MEMBER_LAYERS; \
         move the module or fix the list:\n{report}"
    );
}

/// What a glob import of a module brings in: (source, expected names).
#[test]
fn public_items_are_what_a_glob_brings_in() {
    let cases: &[(&str, &[&str])] = &[
        (
            "pub fn f() {}\nfn private() {}\npub struct S { pub field: u8 }\npub enum E { A }",
            &["f", "S", "E"],
        ),
        (
            "pub const C: u8 = 1;\npub static mut M: u8 = 0;\npub const fn g() {}\npub unsafe fn h() {}",
            &["C", "M", "g", "h"],
        ),
        (
            "pub(crate) fn k() {}\npub(super) type T = u8;\npub trait Tr {}\npub mod inner;",
            &["k", "T", "Tr", "inner"],
        ),
        (
            "pub use crate::a::{B, c::D};\nuse crate::e::F;",
            &["B", "D"],
        ),
        // Items inside other items are not the module's.
        (
            "impl S { pub fn m() {} }\nmod tests { pub fn helper() {} }",
            &[],
        ),
        ("// pub fn commented() {}\nlet s = \"pub fn in_string\";", &[]),
    ];
    for (src, expected) in cases {
        assert_eq!(public_items(src), *expected, "{src:?}");
    }
}

/// Names the crate root imports from its modules: (lib.rs, expected
/// `name → path` pairs); the glob's module `policy` has `Policy` and
/// `Tier`.
#[test]
fn root_imports_point_names_at_their_modules() {
    let modules: BTreeSet<String> = ["placement", "policy", "setup"].map(String::from).into();
    let items = |module: &[String]| -> Vec<String> {
        match module {
            [m] if m == "policy" => vec!["Policy".into(), "Tier".into()],
            _ => Vec::new(),
        }
    };
    let cases: &[(&str, &[&str])] = &[
        (
            "pub mod placement;\npub use placement::{plan, Plan};",
            &["Plan → placement::Plan", "plan → placement::plan"],
        ),
        ("use crate::setup::backend;", &["backend → setup::backend"]),
        (
            "pub use policy::*;",
            &["Policy → policy::Policy", "Tier → policy::Tier"],
        ),
        // Other crates' names and the modules themselves map nothing.
        (
            "pub use other_crate::{Message, Stop};\npub use std::path::Path;\npub use setup;",
            &[],
        ),
        // Only the root's own declarations, not an inline module's.
        ("mod tests {\n    use crate::setup::EngineError;\n}", &[]),
    ];
    for (lib, expected) in cases {
        let got: Vec<String> = root_imports(lib, &modules, items)
            .into_iter()
            .map(|(name, path)| format!("{name} → {}", path.join("::")))
            .collect();
        assert_eq!(got, *expected, "{lib:?}");
    }
}

#[test]
fn layer_violations_name_each_use_of_a_higher_module() {
    let documented: Vec<String> = ["low", "mid", "high"].map(String::from).to_vec();
    let nodes: BTreeSet<String> = ["low", "mid", "high", "new"].map(String::from).into();
    let edge = |to: &str, line: usize| (to.to_string(), ("src/x.rs".to_string(), line));
    // A case: its name, each module's uses, the violations besides `new`.
    type Case<'a> = (&'a str, Vec<(&'a str, Vec<(String, Site)>)>, Vec<&'a str>);
    let cases: &[Case<'_>] = &[
        (
            "downward uses",
            vec![("high", vec![edge("low", 1), edge("mid", 2)])],
            vec![],
        ),
        (
            "an upward use",
            vec![("low", vec![edge("mid", 7)])],
            vec!["low uses mid, which the documented layers put above it: src/x.rs:7"],
        ),
    ];
    for (name, edges, expected) in cases {
        let top: BTreeMap<String, BTreeMap<String, Site>> = edges
            .iter()
            .map(|(from, to)| (from.to_string(), to.iter().cloned().collect()))
            .collect();
        let mut want = vec!["new is a module but not in the documented layers".to_string()];
        want.extend(expected.iter().map(|s| s.to_string()));
        assert_eq!(layer_violations(&documented, &nodes, &top), want, "{name}");
    }
    let doc = "# A\n\n## Layers\n\nText:\n\n    a, b,\n    c\n\nMore.\n\n    d\n## Next\n";
    assert_eq!(documented_layers(doc), ["a", "b", "c"]);
}

/// The parser, snippet by snippet: (module of the file, source, expected
/// references as `path@line`).
#[test]
fn references_are_extracted() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "batch",
            "use crate::eval::grade::Grade;",
            &["eval::grade::Grade@1"],
        ),
        (
            "batch",
            "use crate::{a::b, c::{d, e::{self, f as g}}, *};",
            &["a::b@1", "c::d@1", "c::e@1", "c::e::f@1", "@1"],
        ),
        (
            "batch::rundir",
            "use super::TaskResult;",
            &["batch::TaskResult@1"],
        ),
        ("batch::rundir", "use super::super::eval;", &["eval@1"]),
        (
            "batch::rundir",
            "use super::{self, x};",
            &["batch@1", "batch::x@1"],
        ),
        (
            "batch",
            "use self::rundir::RunDir;",
            &["batch::rundir::RunDir@1"],
        ),
        ("batch", "use std::path::Path;\nuse serde::Serialize;", &[]),
        ("batch", "use ::std::path;", &[]),
        (
            "batch",
            "fn f() {\n    crate::report::write(x);\n}",
            &["report::write@2"],
        ),
        (
            "eval::log",
            "let a = super::grade::Grade::new();",
            &["eval::grade::Grade::new@1"],
        ),
        (
            "eval",
            "let a = self::log::parse();",
            &["eval::log::parse@1"],
        ),
        (
            "eval",
            "let x: Vec<crate::a::B<T>> = crate::c::f::<u8>();",
            &["a::B@1", "c::f@1"],
        ),
        // Comments and strings name nothing.
        (
            "x",
            "// use crate::a;\n/// crate::b::c\n//! crate::d\n",
            &[],
        ),
        (
            "x",
            "/* crate::a /* nested crate::b */ crate::c */ use crate::d;",
            &["d@1"],
        ),
        ("x", r#"let s = "use crate::a; \" crate::b";"#, &[]),
        (
            "x",
            "let s = r#\"crate::a \" crate::b\"#; crate::c::d;",
            &["c::d@1"],
        ),
        (
            "x",
            "let s = b\"crate::a\"; let c = '\"'; let d = b'\"'; crate::e;",
            &["e@1"],
        ),
        (
            "x",
            "fn f<'a>(x: &'a str) -> &'a str { crate::g::h(x) }",
            &["g::h@1"],
        ),
        ("x", "let s = \"line\nline\";\ncrate::a;", &["a@3"]),
        // Inline modules move `super` and `self`.
        (
            "eval::log",
            "mod tests {\n    use super::*;\n    use super::super::grade;\n}\nuse super::x;",
            &["eval::log@2", "eval::grade@3", "eval::x@5"],
        ),
        ("a", "mod inner;\nuse self::inner::X;", &["a::inner::X@2"]),
        // Visibility and `Self` are not paths to modules.
        (
            "a::b",
            "pub(crate) fn f() {} pub(super) fn g() { Self::h(); self.i(); }",
            &[],
        ),
        // A macro's $crate is the crate.
        (
            "a",
            "macro_rules! m { () => { $crate::b::c() } }",
            &["b::c@1"],
        ),
        // A path after another segment is not a new path.
        ("a", "x::crate::y; ", &[]),
        // Multi-line use trees keep each leaf's line.
        (
            "a",
            "use crate::{\n    b,\n    c::d,\n};",
            &["b@2", "c::d@3"],
        ),
    ];
    for (module, src, expected) in cases {
        let module: ModPath = module.split("::").map(str::to_string).collect();
        let got: Vec<String> = references(src, &module)
            .into_iter()
            .map(|r| format!("{}@{}", r.path.join("::"), r.line))
            .collect();
        assert_eq!(&got, expected, "references of {src:?} in {module:?}");
    }
}

#[test]
fn the_library_is_what_lib_rs_declares() {
    let lib = "//! docs\npub mod aci;\nmod private;\npub mod batch;\n\npub fn versions() {}\n";
    let got: Vec<String> = library_modules(lib).into_iter().collect();
    assert_eq!(got, ["aci", "batch", "private"]);
}

#[test]
fn files_map_to_modules() {
    let cases: &[(&str, Option<&str>)] = &[
        ("lib.rs", Some("")),
        ("main.rs", None),
        ("batch/mod.rs", Some("batch")),
        ("batch/rundir.rs", Some("batch::rundir")),
        ("config.rs", Some("config")),
        ("env/build/layer.rs", Some("env::build::layer")),
    ];
    for (file, expected) in cases {
        let got = module_of(Path::new(file)).map(|m| m.join("::"));
        assert_eq!(got.as_deref(), *expected, "{file}");
    }
}

/// Sibling edges at each level, and their circles.
#[test]
fn circles_are_found_per_level() {
    let r = |path: &str, line| Reference {
        path: path.split("::").map(str::to_string).collect(),
        line,
    };
    let m = |path: &str| -> ModPath {
        if path.is_empty() {
            vec![]
        } else {
            path.split("::").map(str::to_string).collect()
        }
    };
    let files = vec![
        ("lib.rs".to_string(), m(""), vec![]),
        ("a/mod.rs".to_string(), m("a"), vec![r("a::x::F", 1)]),
        (
            "a/x.rs".to_string(),
            m("a::x"),
            vec![r("a::y::G", 2), r("a::H", 3)],
        ),
        (
            "a/y.rs".to_string(),
            m("a::y"),
            vec![r("a::x::F", 4), r("b::K", 5)],
        ),
        ("b.rs".to_string(), m("b"), vec![r("c", 6)]),
        ("c.rs".to_string(), m("c"), vec![r("a::y", 7)]),
    ];
    let layers = layers(&files);
    let inner = &layers[&m("a")];
    assert_eq!(
        circles(inner),
        vec![vec!["x".to_string(), "y".into(), "x".into()]]
    );
    assert_eq!(inner["x"]["y"], ("a/x.rs".to_string(), 2));
    let top = &layers[&m("")];
    assert_eq!(
        circles(top),
        vec![vec!["a".to_string(), "b".into(), "c".into(), "a".into()]]
    );
    assert_eq!(top["c"]["a"], ("c.rs".to_string(), 7));
}

/// The agents of the pipeline's stages, in stage order (MASAI's Edit
/// Localizer, Test Template Generator, Issue Reproducer, Fixer, Ranker).
/// Every other module of `agents` is shared by them and sits below them.
const AGENT_STAGES: &[&str] = &["localize", "template", "reproduce", "fixer", "ranker"];

/// Each use inside `agents` that breaks the stage order: a shared module
/// using a stage's module, or a stage using a later stage's.
fn agent_stage_violations(
    stages: &[&str],
    edges: &BTreeMap<String, BTreeMap<String, Site>>,
) -> Vec<String> {
    let stage = |m: &str| stages.iter().position(|s| *s == m);
    let mut out = Vec::new();
    for (from, uses) in edges {
        for (to, (file, line)) in uses {
            match (stage(from), stage(to)) {
                (None, Some(_)) => out.push(format!(
                    "{from} is shared by the stages but uses the stage {to}: {file}:{line}"
                )),
                (Some(f), Some(t)) if t > f => out.push(format!(
                    "the stage {from} uses {to}, a later stage: {file}:{line}"
                )),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn agents_use_shared_modules_and_earlier_stages_only() {
    let layers = layers(&crate_files());
    let agents = vec!["agents".to_string()];
    let edges = layers.get(&agents).cloned().unwrap_or_default();
    for stage in AGENT_STAGES {
        assert!(
            edges.contains_key(*stage) || edges.values().any(|e| e.contains_key(*stage)),
            "{stage} is in AGENT_STAGES but no module of agents uses or is used by it"
        );
    }
    let problems = agent_stage_violations(AGENT_STAGES, &edges);
    assert!(
        problems.is_empty(),
        "the agents break their stage order (AGENT_STAGES in tests/it/architecture.rs; move \
         what two stages share to a module below both):\n{}",
        problems.join("\n")
    );
}

#[test]
fn agent_stage_violations_name_each_use_against_the_order() {
    let site = |line: usize| ("src/agents/x.rs".to_string(), line);
    let edges: BTreeMap<String, BTreeMap<String, Site>> = [
        ("fixer", vec![("ranker", 1), ("reproduce", 2), ("judge", 3)]),
        ("judge", vec![("fixer", 4)]),
        ("react", vec![("budget", 5)]),
        ("localize", vec![("react", 6)]),
    ]
    .into_iter()
    .map(|(from, uses)| {
        (
            from.to_string(),
            uses.into_iter()
                .map(|(to, line)| (to.to_string(), site(line)))
                .collect(),
        )
    })
    .collect();
    assert_eq!(
        agent_stage_violations(AGENT_STAGES, &edges),
        [
            "the stage fixer uses ranker, a later stage: src/agents/x.rs:1",
            "judge is shared by the stages but uses the stage fixer: src/agents/x.rs:4",
        ]
    );
}
