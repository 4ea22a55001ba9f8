//! MASAI's lazy views — a file's skeleton, one symbol's source — and
//! AutoCodeRover's `search_class` / `search_method`, over the code index.
//! Views of one file parse it afresh, so they show the file as it is now.

use std::path::Path;

use super::{read_text, MAX_SEARCH_RESULTS, MAX_SYMBOL_LINES};
use crate::index::symbols::{self, CodeIndex, FileSymbols, Symbol, SymbolKind};

/// Results of `search_method` up to which their source is shown too.
pub const SEARCH_METHOD_BODIES: usize = 3;

fn depth(symbol: &Symbol) -> usize {
    symbol.qualname.matches('.').count()
}

fn outline_line(symbol: &Symbol, indent: usize) -> String {
    let pad = "    ".repeat(indent);
    let mut out = format!(
        "{}:{pad}{}  # lines {}-{}",
        symbol.def_line, symbol.signature, symbol.start_line, symbol.end_line
    );
    if let Some(doc) = &symbol.docstring {
        out.push_str(&format!(
            "\n{}{pad}    \"\"\"{doc}\"\"\"",
            " ".repeat(symbol.def_line.to_string().len() + 1)
        ));
    }
    out
}

pub fn skeleton(root: &Path, path: &str) -> String {
    let text = match read_text(root, path) {
        Ok(t) => t,
        Err(e) => return e.to_string(),
    };
    let file = symbols::parse_symbols(path, &text);
    let mut out = format!(
        "[Skeleton of {path} ({} lines total): classes and functions, bodies left out]",
        file.lines
    );
    if file.symbols.is_empty() {
        out.push_str(&format!("\n(no classes or functions in {path})"));
    }
    for s in &file.symbols {
        out.push('\n');
        out.push_str(&outline_line(s, depth(s)));
    }
    out
}

/// Numbered source lines `start..=end` (1-based) of `text`, at most
/// [`MAX_SYMBOL_LINES`], with a note on how to see the rest.
fn numbered(text: &str, path: &str, start: usize, end: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let end = end.min(lines.len());
    let shown_end = end.min(start + MAX_SYMBOL_LINES - 1);
    let mut out: Vec<String> = (start..=shown_end)
        .map(|n| format!("{n}:{}", lines[n - 1]))
        .collect();
    if shown_end < end {
        out.push(format!(
            "({} more lines; use open {path} {} to see them)",
            end - shown_end,
            shown_end + 1
        ));
    }
    out.join("\n")
}

pub fn symbol(root: &Path, path: &str, qualname: &str) -> String {
    let text = match read_text(root, path) {
        Ok(t) => t,
        Err(e) => return e.to_string(),
    };
    let file = symbols::parse_symbols(path, &text);
    let Some(s) = file.symbols.iter().find(|s| s.qualname == qualname) else {
        let names: Vec<&str> = file.symbols.iter().map(|s| s.qualname.as_str()).collect();
        let list = if names.is_empty() {
            "none".to_string()
        } else if names.len() > MAX_SEARCH_RESULTS {
            format!(
                "{}, … ({} in all)",
                names[..MAX_SEARCH_RESULTS].join(", "),
                names.len()
            )
        } else {
            names.join(", ")
        };
        return format!("Error: no symbol \"{qualname}\" in {path}. Its symbols: {list}");
    };
    format!(
        "[Symbol {path}::{qualname} (lines {}-{} of {})]\n{}",
        s.start_line,
        s.end_line,
        file.lines,
        numbered(&text, path, s.start_line, s.end_line)
    )
}

/// The methods defined directly in `class`.
fn methods<'a>(file: &'a FileSymbols, class: &Symbol) -> impl Iterator<Item = &'a Symbol> {
    let prefix = format!("{}.", class.qualname);
    file.symbols.iter().filter(move |s| {
        s.kind == SymbolKind::Method
            && s.qualname
                .strip_prefix(&prefix)
                .is_some_and(|rest| !rest.contains('.'))
    })
}

pub fn search_class(index: &CodeIndex, name: &str) -> String {
    let found = index.find_class(name);
    if found.is_empty() {
        return format!("No class named \"{name}\" found.");
    }
    if found.len() > MAX_SEARCH_RESULTS {
        return format!(
            "More than {MAX_SEARCH_RESULTS} classes named \"{name}\". Please narrow your search."
        );
    }
    let mut out = format!(
        "Found {} class{} named \"{name}\":",
        found.len(),
        if found.len() == 1 { "" } else { "es" }
    );
    for (file, class) in found {
        out.push_str(&format!("\n{}:{}", file.path, outline_line(class, 0)));
        for m in methods(file, class) {
            out.push('\n');
            out.push_str(&outline_line(m, 1));
        }
    }
    out
}

pub fn search_method(root: &Path, index: &CodeIndex, name: &str, class: Option<&str>) -> String {
    let found = index.find_method(name, class);
    let what = match class {
        Some(c) => format!("methods named \"{name}\" in class \"{c}\""),
        None => format!("functions or methods named \"{name}\""),
    };
    if found.is_empty() {
        return format!("No {what} found.");
    }
    if found.len() > MAX_SEARCH_RESULTS {
        return format!("More than {MAX_SEARCH_RESULTS} {what}. Please narrow your search.");
    }
    let mut out = format!("Found {} {what}:", found.len());
    let bodies = found.len() <= SEARCH_METHOD_BODIES;
    for (file, s) in found {
        out.push_str(&format!(
            "\n{}::{}  (lines {}-{})",
            file.path, s.qualname, s.start_line, s.end_line
        ));
        if bodies {
            match read_text(root, &file.path) {
                Ok(text) => {
                    out.push('\n');
                    out.push_str(&numbered(&text, &file.path, s.start_line, s.end_line));
                }
                Err(e) => out.push_str(&format!("\n{e}")),
            }
        } else {
            out.push_str(&format!("\n{}:{}", s.def_line, s.signature));
        }
    }
    if !bodies {
        out.push_str("\nUse view_symbol PATH::NAME to see one.");
    }
    out
}
