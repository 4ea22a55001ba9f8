//! Decoding benchmark (run by `scripts/bench-decode`; figures go to
//! BENCHMARKS.md). Not a test: it measures, and it reports whether the
//! outputs with drafts equal the outputs without.
//!
//!   bench_decode MODEL.gguf THREADS DEMO_DIR [TASK...]
//!
//! For each demo task (default: all of DEMO_DIR/tasks.jsonl): the Fixer's
//! prompt for the file the gold patch edits (shown whole), then one call of
//! 4 candidates (the first greedy, three at temperature 0.8, as the Fixer
//! asks them) and one call of 1 greedy candidate, under the plain
//! SEARCH/REPLACE grammar and the anchored one, through the scheduler the
//! batch uses; each with drafts off, prompt lookup only, jump-forward only,
//! and both. Prints per call the wall time, tokens generated, drafts
//! evaluated and kept, and whether every candidate's text equals the
//! drafts-off one; then the ratios of the sums.

use std::path::Path;
use std::time::Instant;

use patchwright::agents::fixer;
use patchwright::engine::grammar::{self, ShownFile, ShownRun};
use patchwright::engine::{serve, Backend, Engine, EngineSettings, Request, Sampling, Slots};

/// Candidates per call: as `[fixer] candidates` in the demo config, and one.
const CANDIDATES: [usize; 2] = [4, 1];
/// Most tokens per candidate: enough for one SEARCH/REPLACE block of a few
/// lines with its reasoning line.
const MAX_TOKENS: u32 = 256;

struct Task {
    id: String,
    issue: String,
    path: String,
    text: String,
}

fn tasks(demo: &Path, only: &[String]) -> Result<Vec<Task>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for line in std::fs::read_to_string(demo.join("tasks.jsonl"))?.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        let id = v["instance_id"].as_str().unwrap_or_default().to_string();
        if !only.is_empty() && !only.contains(&id) {
            continue;
        }
        let patch = v["patch"].as_str().unwrap_or_default();
        let path = patch
            .lines()
            .find_map(|l| l.strip_prefix("+++ b/"))
            .ok_or("a gold patch without a file")?
            .to_string();
        let repo = v["repo"].as_str().unwrap_or_default();
        let package = repo.rsplit('/').next().unwrap_or(repo);
        let text = std::fs::read_to_string(demo.join("src").join(package).join(&path))?;
        out.push(Task {
            id,
            issue: v["problem_statement"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            path,
            text,
        });
    }
    Ok(out)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, threads, demo, only @ ..] = args.as_slice() else {
        return Err("usage: bench_decode MODEL.gguf THREADS DEMO_DIR [TASK...]".into());
    };
    let threads: u32 = threads.parse()?;
    let tasks = tasks(Path::new(demo), only)?;
    let modes = [
        ("off", false, false),
        ("lookup", true, false),
        ("jump", false, true),
        ("both", true, true),
    ];
    let engines = modes
        .iter()
        .map(|&(_, prompt_lookup, jump_forward)| {
            Engine::load(
                Path::new(model),
                &EngineSettings {
                    context: 8192,
                    threads,
                    prompt_lookup,
                    jump_forward,
                    ..Default::default()
                },
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let sampling = Sampling {
        max_tokens: MAX_TOKENS,
        ..Sampling::default()
    };
    // Sums per (format and candidates, mode): seconds, and calls whose
    // output equals off.
    let labels = ["plain, 4", "plain, 1", "anchored, 4", "anchored, 1"];
    let mut sums = vec![[0.0f64; 4]; labels.len()];
    let mut same = vec![[0usize; 4]; labels.len()];
    println!(
        "task | format, candidates | mode | wall s | decoding s | generated | drafted | kept | same as off"
    );
    for task in &tasks {
        let section = format!("{}\n```python\n{}```", task.path, task.text);
        let messages = fixer::messages(&task.issue, &[(task.path.clone(), section)]);
        let lines: Vec<String> = task.text.lines().map(str::to_string).collect();
        let formats = [
            ("plain", grammar::search_replace(&[task.path.as_str()])?),
            (
                "anchored",
                grammar::anchored(&[ShownFile {
                    path: task.path.clone(),
                    runs: vec![ShownRun { first: 1, lines }],
                }])?,
            ),
        ];
        for (f, (format, grammar)) in formats.iter().enumerate() {
            for (k, &n) in CANDIDATES.iter().enumerate() {
                let row = 2 * f + k;
                let temperatures = std::iter::once(0.0)
                    .chain(std::iter::repeat_n(0.8, n - 1))
                    .collect::<Vec<f32>>();
                let mut reference: Option<Vec<String>> = None;
                for (m, (mode, _, _)) in modes.iter().enumerate() {
                    let slots = Slots {
                        conversations: 1,
                        candidates: n,
                    };
                    let started = Instant::now();
                    let generation = serve(&engines[m], slots, |s| {
                        let request = Request {
                            messages: &messages,
                            sampling: sampling.clone(),
                            n,
                            temperatures: Some(temperatures.clone()),
                            grammar: Some(grammar),
                        };
                        s.conversation(n, MAX_TOKENS as usize)?.generate(&request)
                    })??;
                    let wall = started.elapsed().as_secs_f64();
                    let texts: Vec<String> = generation
                        .candidates
                        .iter()
                        .map(|c| c.text.clone())
                        .collect();
                    let equal = match &reference {
                        None => {
                            reference = Some(texts);
                            true
                        }
                        Some(r) => *r == texts,
                    };
                    sums[row][m] += generation.stats.decode_s;
                    same[row][m] += usize::from(equal);
                    let s = &generation.stats;
                    println!(
                        "{} | {format}, {n} | {mode} | {wall:.1} | {:.1} | {} | {} | {} | {}",
                        task.id,
                        s.decode_s,
                        s.generated_tokens.iter().sum::<usize>(),
                        s.draft_tokens,
                        s.draft_accepted,
                        if equal { "yes" } else { "no" }
                    );
                }
            }
        }
    }
    println!();
    println!("format, candidates | mode | decoding s | vs off | calls equal to off");
    for (f, label) in labels.iter().enumerate() {
        for (m, (mode, _, _)) in modes.iter().enumerate() {
            println!(
                "{label} | {mode} | {:.1} | {:.2}x | {}/{}",
                sums[f][m],
                sums[f][m] / sums[f][0].max(1e-9),
                same[f][m],
                tasks.len()
            );
        }
    }
    Ok(())
}
