//! Localisation benchmark without a model (run by `scripts/bench-localize`;
//! figures go to the report). Not a test: it measures, it asserts nothing.
//!
//!   bench_localize DATASET REPOS_DIR [INSTANCE_ID_SUBSTRING...]
//!
//! For every task of DATASET whose repository is under REPOS_DIR (and whose
//! id contains one of the substrings, when given): a workspace at the
//! task's base commit, its code index (cached like the pipeline's, under
//! `$PATCHWRIGHT_CACHE_DIR/index`), and the places each method names, scored
//! against the gold patch the way `shared/tools/yields` does: file-level
//! precision, recall and F1 between the gold patch's files and the named
//! files, and the share of the gold patch's functions named (a method named
//! `C` counts for `C.m`). Methods: `bm25@3` (plain BM25 over whole files,
//! the issue as the query, top 3), `cand@1` and `cand@3` (the candidate
//! ranking's top files, with its top 1 and 3 functions), and `loc(F,N)` (the
//! first N candidates drawn from at most F files: what the pipeline's
//! fallback returns). One JSON line per task, then one with the means.

use std::collections::BTreeSet;
use std::path::Path;

use patchwright::index::candidates::{self, Candidate};
use patchwright::index::symbols::CodeIndex;
use patchwright::pipeline::masai::index_cache_dir;
use patchwright::pipeline::metrics::gold_functions;
use patchwright::repo::touched_files;
use patchwright::repo::{Repos, Workspace};

/// The methods' names, in output order.
const METHODS: [&str; 6] = [
    "bm25@3", "cand@1", "cand@3", "loc(1,1)", "loc(1,2)", "loc(2,3)",
];

fn prf(gold: &BTreeSet<String>, named: &BTreeSet<String>) -> [f64; 3] {
    let hit = gold.intersection(named).count() as f64;
    let p = if named.is_empty() {
        0.0
    } else {
        hit / named.len() as f64
    };
    let r = if gold.is_empty() {
        0.0
    } else {
        hit / gold.len() as f64
    };
    let f = if p + r > 0.0 {
        2.0 * p * r / (p + r)
    } else {
        0.0
    };
    [p, r, f]
}

fn function_hit(gold: &[String], named: &[String]) -> f64 {
    if gold.is_empty() {
        return 0.0;
    }
    let hit = gold
        .iter()
        .filter(|g| {
            named
                .iter()
                .any(|f| *g == f || g.starts_with(&format!("{f}.")))
        })
        .count();
    hit as f64 / gold.len() as f64
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: bench_localize DATASET REPOS_DIR [INSTANCE_ID_SUBSTRING...]".into());
    }
    let tasks: Vec<serde_json::Value> = {
        let text = std::fs::read_to_string(&args[1])?;
        if args[1].ends_with(".jsonl") {
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(serde_json::from_str)
                .collect::<Result<_, _>>()?
        } else {
            serde_json::from_str(&text)?
        }
    };
    let repos = Repos::new(Path::new(&args[2]))?;
    let filters = &args[3..];
    let scratch = tempfile::tempdir()?;
    let mut sums = [[0.0f64; 4]; METHODS.len()];
    let mut n = 0usize;
    for task in &tasks {
        let field = |k: &str| task[k].as_str().unwrap_or_default().to_string();
        let (id, repo, commit) = (field("instance_id"), field("repo"), field("base_commit"));
        let (patch, issue) = (field("patch"), field("problem_statement"));
        if !filters.is_empty() && !filters.iter().any(|f| id.contains(f.as_str())) {
            continue;
        }
        let Ok(source) = repos.locate(&repo) else {
            continue;
        };
        let started = std::time::Instant::now();
        let ws = match Workspace::create(&source, &commit, &scratch.path().join("ws")) {
            Ok(ws) => ws,
            Err(e) => {
                println!("{}", serde_json::json!({"id": id, "error": e.to_string()}));
                continue;
            }
        };
        let (index, _) = CodeIndex::load_or_build(ws.path(), &index_cache_dir(), &repo, &commit)?;
        let gold: BTreeSet<String> = touched_files(&patch).into_iter().collect();
        let gold_fns = gold_functions(ws.path(), &patch);
        let ranking = candidates::rank(&index, ws.path(), &issue);
        let baseline = candidates::bm25_files(&index, ws.path(), &issue, 3);
        let files_of =
            |c: &[Candidate]| -> BTreeSet<String> { c.iter().map(|c| c.path.clone()).collect() };
        let fns_of = |c: &[Candidate]| -> Vec<String> {
            c.iter()
                .map(|c| format!("{}::{}", c.path, c.symbol))
                .collect()
        };
        let top = |k: usize| {
            ranking
                .files
                .iter()
                .take(k)
                .map(|r| r.path.clone())
                .collect()
        };
        let top_fns = |k: usize| fns_of(&ranking.candidates[..k.min(ranking.candidates.len())]);
        let loc = |f, k| candidates::top_locations(&ranking.candidates, f, k);
        let results: [(BTreeSet<String>, Option<Vec<String>>); METHODS.len()] = [
            (baseline.iter().cloned().collect(), None),
            (top(1), Some(top_fns(1))),
            (top(3), Some(top_fns(3))),
            (files_of(&loc(1, 1)), Some(fns_of(&loc(1, 1)))),
            (files_of(&loc(1, 2)), Some(fns_of(&loc(1, 2)))),
            (files_of(&loc(2, 3)), Some(fns_of(&loc(2, 3)))),
        ];
        let mut row = serde_json::Map::new();
        row.insert("id".into(), id.clone().into());
        row.insert(
            "gold_files".into(),
            gold.iter().cloned().collect::<Vec<_>>().into(),
        );
        row.insert("gold_functions".into(), gold_fns.clone().into());
        for (i, (files, fns)) in results.iter().enumerate() {
            let [p, r, f] = prf(&gold, files);
            let fh = fns.as_ref().map(|fns| function_hit(&gold_fns, fns));
            for (j, v) in [p, r, f, fh.unwrap_or(0.0)].into_iter().enumerate() {
                sums[i][j] += v;
            }
            row.insert(
                METHODS[i].into(),
                serde_json::json!({
                    "files": files, "f1": round(f), "function_hit": fh.map(round),
                }),
            );
        }
        row.insert(
            "top".into(),
            ranking
                .candidates
                .iter()
                .take(3)
                .map(|c| format!("{}::{} {:.2} {}", c.path, c.symbol, c.score, c.why))
                .collect::<Vec<_>>()
                .into(),
        );
        row.insert(
            "seconds".into(),
            round(started.elapsed().as_secs_f64()).into(),
        );
        println!("{}", serde_json::Value::Object(row));
        ws.remove()?;
        n += 1;
    }
    let nf = n.max(1) as f64;
    let mut total = serde_json::Map::new();
    total.insert("tasks".into(), n.into());
    for (i, name) in METHODS.iter().enumerate() {
        let [p, r, f, fh] = sums[i].map(|s| round(s / nf));
        total.insert(
            (*name).into(),
            serde_json::json!({"precision": p, "recall": r, "f1": f,
                "function_hit": if i == 0 { None } else { Some(fh) }}),
        );
    }
    println!("{}", serde_json::json!({ "total": total }));
    Ok(())
}
