//! Code-index benchmark (run by `scripts/bench-index`; figures go to
//! BENCHMARKS.md). Not a test: it measures, it asserts nothing.
//!
//!   bench_index REPO_DIR [QUERY]
//!
//! Builds the tree-sitter index of a checked-out repository without a cache
//! (once untimed, so the files are in the page cache, then timed), writes the
//! cache to a temporary directory, loads it back through
//! `CodeIndex::load_or_build` (timed), and ranks the functions against QUERY
//! (timed). Prints one JSON line; `cpu_seconds_cold` is the build's CPU
//! time over all threads. `RAYON_NUM_THREADS` sets the threads.

use std::path::Path;
use std::time::Instant;

use patchwright::index::symbols::{cache_path, CodeIndex};

/// A query of the kind an issue gives, for timing `rank_functions`.
const DEFAULT_QUERY: &str = "simplify returns the wrong result for a nested expression";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (root, query) = match args.as_slice() {
        [_, root] => (Path::new(root), DEFAULT_QUERY),
        [_, root, query] => (Path::new(root), query.as_str()),
        _ => return Err("usage: bench_index REPO_DIR [QUERY]".into()),
    };
    let (repo, commit) = ("bench/repo", "bench");

    CodeIndex::build(root)?; // warm the page cache
    let (start, cpu_start) = (Instant::now(), cpu_seconds());
    let index = CodeIndex::build(root)?;
    let cold = start.elapsed().as_secs_f64();
    let cold_cpu = cpu_seconds()
        .zip(cpu_start)
        .map(|(end, start)| round(end - start));

    let cache = tempfile::tempdir()?;
    let path = cache_path(cache.path(), repo, commit);
    let start = Instant::now();
    index.write_cache(&path, repo, commit)?;
    let write = start.elapsed().as_secs_f64();
    let cache_bytes = std::fs::metadata(&path)?.len();

    let start = Instant::now();
    let (loaded, from_cache) = CodeIndex::load_or_build(root, cache.path(), repo, commit)?;
    let cached = start.elapsed().as_secs_f64();
    if !from_cache || loaded != index {
        return Err("the cached index differs from the built one".into());
    }

    let start = Instant::now();
    let ranked = index.rank_functions(root, query, 10);
    let rank = start.elapsed().as_secs_f64();

    let lines: usize = index.files.iter().map(|f| f.lines).sum();
    let line = serde_json::json!({
        "repo_dir": root.display().to_string(),
        "files": index.files.len(),
        "lines": lines,
        "symbols": index.symbol_count(),
        "threads": rayon::current_num_threads(),
        "seconds_cold": round(cold),
        "cpu_seconds_cold": cold_cpu,
        "seconds_write_cache": round(write),
        "seconds_cached": round(cached),
        "cache_bytes": cache_bytes,
        "seconds_rank_functions": round(rank),
        "top_function": ranked.first().map(|(p, q, _)| format!("{p}:{q}")),
    });
    println!("{line}");
    Ok(())
}

/// CPU time (user + system, all threads) of this process so far, from
/// /proc/self/stat: less disturbed than wall time by other work on a shared
/// machine. `None` where /proc is not Linux's.
fn cpu_seconds() -> Option<f64> {
    /// The kernel's clock tick (USER_HZ), 100 on every Linux architecture
    /// this runs on.
    const TICKS_PER_SECOND: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) in ")".
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / TICKS_PER_SECOND)
}

fn round(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}
