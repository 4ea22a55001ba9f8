//! `report::write` over synthetic run directories (four runs of a 2×2 grid
//! over `fixer.temperature` and `fixer.candidates`, the same four as a
//! sweep, and one ungraded run): the page's exact content, then the page
//! rendered by headless Chromium — its DOM after the page's script ran,
//! and a screenshot whose plots must hold pixels of the marks' colour.
//!
//! Chromium is required: without it the test fails and says to install
//! Debian's `chromium` (`scripts/test` installs it).

use std::path::{Path, PathBuf};
use std::process::Command;

use patchwright::report::{self, ReportError, MARK_RGB};
use serde_json::{json, Value};

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

const IDS: [&str; 3] = ["demo__alpha-1", "demo__beta-2", "demo__gamma-3"];
/// A patch whose text must come out escaped.
const HOSTILE: &str = "<script>alert(\"x\")</script>";

fn write_json(path: &Path, value: &Value) -> R {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, serde_json::to_vec_pretty(value)?)?;
    Ok(())
}

/// The configuration of one synthetic run.
struct RunSpec {
    /// As an f32 widened to f64, the way run.json stores it.
    temperature: f32,
    candidates: u64,
    graded: bool,
    /// Which of IDS the grade resolves.
    resolves: [bool; 3],
}

fn settings(temperature: f32, candidates: u64) -> Value {
    json!({
        "model": "qwen2.5-coder-0.5b",
        "engine": {"context": 4096, "threads": 0},
        "sampling": {"temperature": 0.0, "top_p": 1.0, "seed": 0, "max_tokens": 256},
        "aci": {"window": 30, "run_timeout_s": 120},
        "react": {"max_steps": 30, "history": {"keep": 3, "block": 3}},
        "pipeline": {"kind": "masai", "template": true, "reproduce": true, "rank": true},
        "agents": {"test_template": {"max_steps": 3, "temperature": 0.0}},
        "fixer": {"candidates": candidates, "temperature": f64::from(temperature), "max_tokens": 192},
        "ranker": {"compare": true, "test_timeout_s": 300},
    })
}

/// The steps of a trajectory; `long` makes one past the page's budget.
fn steps(long: bool) -> Vec<Value> {
    let mut steps = vec![
        json!({"kind": "stage", "at_s": 0.0, "name": "template"}),
        json!({"kind": "reused", "at_s": 0.1, "stage": "localizer", "from": "shared/x"}),
        json!({"kind": "retrieve", "at_s": 0.2, "ranked": [{"path": "alpha/core.py", "score": 3.5}],
               "shown": ["alpha/core.py"], "truncated": []}),
        json!({"kind": "model_call", "at_s": 1.0, "purpose": "reproducer",
               "messages": [{"role": "user", "content": "fix it"}], "prompt": "PROMPT TEXT",
               "sampling": {"temperature": 0.0}, "response": "I will open <b>core.py</b>",
               "tokens": [1, 2, 3], "prompt_tokens": 1200, "prompt_tokens_evaluated": 200,
               "prompt_tokens_reused": 1000, "completion_tokens": 30, "stop": "end_of_text",
               "prompt_s": 1.5, "decode_s": 0.5}),
        json!({"kind": "action", "at_s": 2.0, "agent": "reproducer", "step": 1,
               "thought": "Look at the parser first.", "action": "open alpha/core.py\n",
               "observation": format!("[File: alpha/core.py]\n{}", "x = 1\n".repeat(1000)),
               "exec_s": 0.01}),
        json!({"kind": "episode", "at_s": 3.0, "agent": "reproducer", "status": "submitted",
               "steps": 1, "format_errors": 0, "truncated": 0, "tokens_evaluated": 200,
               "tokens_reused": 1000, "tokens_generated": 30, "wall_s": 3.0}),
        json!({"kind": "edit", "at_s": 4.0, "unterminated": 0, "definitions": [],
               "blocks": [{"path": "alpha/core.py", "applied_to": "alpha/core.py",
                           "matched": "exact", "error": null}]}),
        json!({"kind": "diff", "at_s": 4.5, "files": 1, "bytes": 120}),
        json!({"kind": "future_thing", "at_s": 5.0, "payload": "<i>new</i>"}),
    ];
    if long {
        for i in 0..100 {
            steps.push(
                json!({"kind": "action", "at_s": 6.0 + f64::from(i), "agent": "localizer",
                              "step": i + 2, "thought": "again", "action": "search x\n",
                              "observation": "y".repeat(3000), "exec_s": 0.0}),
            );
        }
    }
    steps
}

/// Writes a run directory: run.json, results/ (with stage metrics),
/// trajectories/, artifacts/, and eval/ when graded.
fn make_run(dir: &Path, spec: &RunSpec) -> R {
    let statuses = ["patched", "patched", "error"];
    let mut summary = json!({
        "tasks": 3, "patched": 2, "no_patch": 0, "errors": 1, "error_ids": [IDS[2]],
        "elapsed_s": 754.5, "prompt_tokens": 30_000, "completion_tokens": 900,
        "a_field_from_the_future": {"x": 1},
    });
    if spec.graded {
        summary["resolved"] = json!(spec.resolves.iter().filter(|r| **r).count());
    }
    write_json(
        &dir.join("run.json"),
        &json!({
            "command": ["patchwright", "batch"],
            "versions": {"patchwright": "0.1.0"},
            "dataset": {"path": "tasks.jsonl", "sha256": "00", "tasks_in_file": 3},
            "selection": {"filter": null, "instance_ids": IDS},
            "settings": settings(spec.temperature, spec.candidates),
            "model": {"name_or_path": "patchwright__qwen", "path": "/m.gguf", "sha256": "11",
                      "size": 1, "architecture": "qwen2"},
            "started_at": "2026-11-30T07:00:50Z",
            "finished_at": "2026-11-30T07:23:54Z",
            "summary": summary,
        }),
    )?;
    for (i, id) in IDS.iter().enumerate() {
        let patch = match i {
            0 => "diff --git a/alpha/core.py b/alpha/core.py\n--- a/alpha/core.py\n+++ b/alpha/core.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n".to_string(),
            1 => format!("diff --git a/beta.py b/beta.py\n--- a/beta.py\n+++ b/beta.py\n@@ -1 +1 @@\n-a\n+{HOSTILE}\n"),
            _ => String::new(),
        };
        // alpha: located, reproduced, 2 applied; beta: located, 1 applied;
        // gamma: an error before the pipeline finished (no metrics).
        let metrics = match i {
            0 => json!({"gold_files": ["alpha/core.py"], "located_files": ["alpha/core.py"],
                        "file_hit": 1.0, "function_hit": 0.5, "reproduction_fails_on_base": true,
                        "reproduction_passes_with_gold": true, "candidates_generated": 4,
                        "candidates_applied": 2, "candidates_parsed": 2, "candidates_distinct": 2,
                        "resolving": [0], "any_resolves": true, "picked_resolves": true}),
            1 => json!({"gold_files": ["beta.py"], "located_files": ["beta.py", "other.py"],
                        "file_hit": 0.5, "reproduction_fails_on_base": false,
                        "candidates_generated": 4, "candidates_applied": 1,
                        "any_resolves": false, "picked_resolves": false}),
            _ => Value::Null,
        };
        let mut result = json!({
            "instance_id": id, "status": statuses[i],
            "error": if i == 2 { json!("prompt too long: 9000 > 4096 tokens") } else { Value::Null },
            "model_patch": patch, "elapsed_s": 100.0 + 50.0 * i as f64, "model_calls": 10,
            "prompt_tokens": 10_000 * (i as u64 + 1), "completion_tokens": 300,
        });
        if !metrics.is_null() {
            result["metrics"] = metrics;
        }
        write_json(&dir.join("results").join(format!("{id}.json")), &result)?;
        let mut trajectory = result.clone();
        trajectory["model"] = json!("patchwright__qwen");
        trajectory["steps"] = json!(steps(i == 0));
        write_json(
            &dir.join("trajectories").join(format!("{id}.json")),
            &trajectory,
        )?;
        write_json(
            &dir.join("artifacts").join(id).join("reproduction.json"),
            &json!({"episode": {"agent": "reproducer", "status": "submitted"}, "test": null}),
        )?;
        if spec.graded {
            let logs = dir.join("eval").join("logs").join(id);
            write_json(
                &logs.join("report.json"),
                &json!({ *id: {
                    "instance_id": id, "patch_is_None": false, "patch_exists": i < 2,
                    "patch_successfully_applied": i < 2, "resolved": spec.resolves[i],
                    "tests_status": {
                        "FAIL_TO_PASS": {"success": if spec.resolves[i] { json!(["t.py::test_fix"]) } else { json!([]) },
                                         "failure": if spec.resolves[i] { json!([]) } else { json!(["t.py::test_fix"]) }},
                        "PASS_TO_PASS": {"success": ["t.py::test_old"], "failure": []}},
                    "test_seconds": 1.0, "total_seconds": 2.0}}),
            )?;
            let log = if i == 0 {
                format!(
                    "START OF LOG\n{}END OF LOG\n",
                    "collected 1 item\n".repeat(3000)
                )
            } else {
                "t.py::test_fix FAILED\n".to_string()
            };
            std::fs::write(logs.join("test_output.txt"), log)?;
        }
    }
    if spec.graded {
        write_json(
            &dir.join("eval").join("report.json"),
            &json!({"total_instances": 3,
                    "resolved_instances": spec.resolves.iter().filter(|r| **r).count()}),
        )?;
    }
    Ok(())
}

/// The 2×2 grid: temperature × candidates, first axis slowest.
fn grid() -> Vec<RunSpec> {
    let mut specs = Vec::new();
    for (t, temperature) in [0.4f32, 0.8].into_iter().enumerate() {
        for (c, candidates) in [2u64, 4].into_iter().enumerate() {
            let k = 2 * t + c;
            specs.push(RunSpec {
                temperature,
                candidates,
                graded: true,
                // Resolved: 1, 2, 0, 1 of 3.
                resolves: [k != 2, k == 1, false],
            });
        }
    }
    specs
}

/// Four run directories, the same four as a sweep (plus a point never
/// run), and one ungraded run.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    runs: Vec<PathBuf>,
    sweep: PathBuf,
    single: PathBuf,
}

fn fixture() -> R<Fixture> {
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().to_path_buf();
    let mut runs = Vec::new();
    let sweep = root.join("sweep");
    let mut points = Vec::new();
    for (i, spec) in grid().iter().enumerate() {
        let dir = root.join(format!("run-{i}"));
        make_run(&dir, spec)?;
        runs.push(dir);
        let label = format!(
            "fixer.temperature={},fixer.candidates={}",
            spec.temperature, spec.candidates
        );
        let rel = format!("points/{i:02}_{label}");
        make_run(&sweep.join(&rel), spec)?;
        points.push(json!({"label": label, "dir": rel, "values": {
            "fixer.temperature": f64::from(spec.temperature), "fixer.candidates": spec.candidates}}));
    }
    points.push(json!({"label": "fixer.temperature=1.2,fixer.candidates=2",
                       "dir": "points/04_never_run", "values": {}}));
    write_json(
        &sweep.join("sweep.json"),
        &json!({"grid": [{"key": "fixer.temperature", "values": [0.4, 0.8]},
                         {"key": "fixer.candidates", "values": [2, 4]}],
                "points": points, "shared": "shared"}),
    )?;
    let single = root.join("single");
    make_run(
        &single,
        &RunSpec {
            temperature: 0.8,
            candidates: 4,
            graded: false,
            resolves: [false; 3],
        },
    )?;
    Ok(Fixture {
        _tmp: tmp,
        root,
        runs,
        sweep,
        single,
    })
}

/// What one layout's report must show.
struct Case {
    name: &'static str,
    inputs: Vec<PathBuf>,
    runs: usize,
    tasks: usize,
    plots: usize,
    missing_points: usize,
    /// `data-param` of each rate plot, in order.
    params: &'static [&'static str],
    /// `data-funnel` of each run, in order.
    funnels: &'static [&'static str],
    /// Text the page must hold.
    contains: &'static [&'static str],
    /// Text it must not.
    absent: &'static [&'static str],
}

const FOUR_FUNNELS: &[&str] = &["3 2 1 2 1", "3 2 1 2 2", "3 2 1 2 0", "3 2 1 2 1"];
const COMMON: &[&str] = &[
    // The hostile patch, escaped.
    "+&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;",
    // Drill-down: a collapsible block per task, with every part.
    "<details class=\"task\" id=\"task-1-demo--beta-2\"><summary><code>demo__beta-2</code>",
    "<h4>Stage metrics</h4>",
    "<h4>Stage artifacts</h4>",
    "<span class=\"kind\">model call</span> <code>reproducer</code>",
    "prompt 1,200 tokens (evaluated 200, reused 1,000) · completion 30",
    "I will open &lt;b&gt;core.py&lt;/b&gt;",
    "thought: Look at the parser first.",
    "<span class=\"kind\">episode end</span> reproducer <code>submitted</code>",
    "<span class=\"kind\">reused</span> stage <code>localizer</code>",
    // A step kind the report does not know, as escaped JSON.
    "<span class=\"kind\">future_thing</span>",
    "&lt;i&gt;new&lt;/i&gt;",
    // Cuts say so.
    "more bytes not shown",
    "more steps not shown",
    "prompt too long: 9000 &gt; 4096 tokens",
];

fn cases(f: &Fixture) -> Vec<Case> {
    vec![
        Case {
            name: "four run directories",
            inputs: f.runs.clone(),
            runs: 4,
            tasks: 12,
            // Outcomes + a rate plot per parameter + a funnel and a cost
            // chart per run.
            plots: 1 + 2 + 4 + 4,
            missing_points: 0,
            params: &["fixer.candidates", "fixer.temperature"],
            funnels: FOUR_FUNNELS,
            contains: &[
                "<th><code>fixer.candidates</code></th><th><code>fixer.temperature</code></th>",
                // An f32 temperature shows as it was set.
                "<td>0.4</td>",
                "1 / 3 (33.3%)",
                "2 / 3 (66.7%)",
                "0 / 3 (0.0%)",
                "resolve rate against <code>fixer.temperature</code>",
                "resolved (graded)",
                "bytes in the middle not shown",
                "FAIL_TO_PASS</th><td>0 passed, 1 failed<br>failed: <code>t.py::test_fix</code>",
            ],
            absent: &["not graded", "data-param=\"sampling.seed\""],
        },
        Case {
            name: "a sweep directory",
            inputs: vec![f.sweep.clone()],
            runs: 4,
            tasks: 12,
            plots: 1 + 2 + 4 + 4,
            missing_points: 1,
            // The grid's order.
            params: &["fixer.temperature", "fixer.candidates"],
            funnels: FOUR_FUNNELS,
            contains: &[
                ">fixer.temperature=0.4,fixer.candidates=2</a>",
                "<td>0.4</td>",
                "Sweep points not run yet",
                "04_never_run",
            ],
            absent: &["not graded"],
        },
        Case {
            name: "one ungraded run",
            inputs: vec![f.single.clone()],
            runs: 1,
            tasks: 3,
            // Outcomes, one funnel, one cost chart; nothing differs.
            plots: 3,
            missing_points: 0,
            params: &[],
            funnels: &["3 2 1 2 1"],
            contains: &[
                "not graded",
                "picked resolves (metrics)",
                "No parameter differs among the runs",
            ],
            absent: &["<h4>Grade</h4>", "resolved (graded)"],
        },
    ]
}

/// Every value of `attr="..."` in `html`, in order.
fn attrs(html: &str, attr: &str) -> Vec<String> {
    let pat = format!("{attr}=\"");
    html.match_indices(&pat)
        .filter_map(|(i, _)| {
            let rest = &html[i + pat.len()..];
            rest.find('"').map(|end| rest[..end].to_string())
        })
        .collect()
}

fn check_content(case: &Case, html: &str) -> R {
    let name = case.name;
    assert_eq!(attrs(html, "data-param"), case.params, "{name}: rate plots");
    assert_eq!(attrs(html, "data-funnel"), case.funnels, "{name}: funnels");
    assert_eq!(
        html.matches("<details class=\"task\"").count(),
        case.tasks,
        "{name}: a drill-down per task"
    );
    assert_eq!(
        html.matches("<svg class=\"plot\"").count(),
        case.plots,
        "{name}: plots on the page"
    );
    for want in COMMON.iter().chain(case.contains) {
        assert!(html.contains(want), "{name}: the page lacks {want:?}");
    }
    for unwanted in case.absent {
        assert!(
            !html.contains(unwanted),
            "{name}: the page holds {unwanted:?}"
        );
    }
    // Nothing from the files runs as markup, and nothing is fetched.
    assert!(!html.contains(HOSTILE), "{name}: an unescaped <script>");
    assert_eq!(html.matches("<script").count(), 1, "{name}: one script");
    assert!(!html.contains("<link") && !html.contains(" src="), "{name}");
    let http = html.matches("http").count();
    let xmlns = html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count();
    assert_eq!(http, xmlns, "{name}: no URL but the SVG namespace");
    Ok(())
}

/// Debian's chromium, or an error saying to install it.
fn chromium() -> R<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "headless Chromium is needed to check that the report renders, and `chromium` is \
             not on PATH: install Debian's `chromium` (apt-get install -y chromium; scripts/test \
             does this)"
                .into()
        })
}

fn run_chromium(chromium: &Path, profile: &Path, args: &[String]) -> R<Vec<u8>> {
    let out = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--window-size=1280,1800",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "chromium {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(out.stdout)
}

struct Screenshot {
    width: usize,
    height: usize,
    rgb: Vec<[u8; 3]>,
}

fn decode_png(path: &Path) -> R<Screenshot> {
    let mut decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path)?));
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().ok_or("PNG too large")?];
    let info = reader.next_frame(&mut buf)?;
    if info.bit_depth != png::BitDepth::Eight {
        return Err(format!("unexpected PNG bit depth {:?}", info.bit_depth).into());
    }
    let samples = info.color_type.samples();
    if samples < 3 {
        return Err(format!("unexpected PNG colour type {:?}", info.color_type).into());
    }
    let (width, height) = (info.width as usize, info.height as usize);
    let mut rgb = Vec::with_capacity(width * height);
    for row in buf[..info.buffer_size()].chunks(info.line_size) {
        for px in row.chunks(samples).take(width) {
            rgb.push([px[0], px[1], px[2]]);
        }
    }
    Ok(Screenshot { width, height, rgb })
}

/// Pixels of the marks' colour inside `(x, y, w, h)`, clipped to the image.
fn mark_pixels(shot: &Screenshot, (x, y, w, h): (usize, usize, usize, usize)) -> usize {
    let near = |a: u8, b: u8| a.abs_diff(b) <= 6;
    let mut n = 0;
    for row in y..(y + h).min(shot.height) {
        for col in x..(x + w).min(shot.width) {
            let p = shot.rgb[row * shot.width + col];
            if near(p[0], MARK_RGB[0]) && near(p[1], MARK_RGB[1]) && near(p[2], MARK_RGB[2]) {
                n += 1;
            }
        }
    }
    n
}

/// Renders the page in headless Chromium: every plot drew its marks (the
/// page's script counted them in the DOM), and every plot inside the
/// screenshot shows pixels of the marks' colour.
fn check_rendering(case: &Case, page: &Path, work: &Path) -> R {
    let name = case.name;
    let chromium = chromium()?;
    let url = format!("file://{}", page.display());
    let dom = run_chromium(
        &chromium,
        &work.join("profile-dom"),
        &["--dump-dom".into(), url.clone()],
    )?;
    let dom = String::from_utf8(dom)?;
    let rendered = attrs(&dom, "data-plots-rendered");
    assert_eq!(
        rendered,
        [case.plots.to_string()],
        "{name}: plots rendered, by the page's own count"
    );
    let boxes: Vec<(usize, usize, usize, usize)> = attrs(&dom, "data-plot-boxes")
        .first()
        .ok_or("no data-plot-boxes")?
        .split(';')
        .map(|b| {
            let v: Vec<usize> = b
                .split(',')
                .map(|n| n.parse::<f64>().map(|f| f.max(0.0) as usize))
                .collect::<Result<_, _>>()?;
            match v[..] {
                [x, y, w, h] => Ok((x, y, w, h)),
                _ => Err(format!("bad box {b:?}").into()),
            }
        })
        .collect::<R<_>>()?;
    assert_eq!(boxes.len(), case.plots, "{name}: a box per plot");

    let png = work.join("shot.png");
    run_chromium(
        &chromium,
        &work.join("profile-shot"),
        &[format!("--screenshot={}", png.display()), url],
    )?;
    let shot = decode_png(&png)?;
    assert_eq!(
        (shot.width, shot.height),
        (1280, 1800),
        "{name}: screenshot size"
    );
    let visible: Vec<_> = boxes
        .iter()
        .filter(|b| b.1 + b.3 <= shot.height && b.0 < shot.width)
        .collect();
    assert!(
        visible.len() >= case.plots.min(3),
        "{name}: only {} plots inside the screenshot: {boxes:?}",
        visible.len()
    );
    for b in visible {
        let n = mark_pixels(&shot, *b);
        assert!(
            n >= 30,
            "{name}: the plot at {b:?} shows {n} pixels of the marks' colour"
        );
    }
    // A blank stretch of the page has none (the check can fail).
    assert_eq!(mark_pixels(&shot, (0, 0, 1280, 40)), 0, "{name}: header");
    Ok(())
}

#[test]
fn reports_hold_every_section_and_render_in_chromium() -> R {
    let f = fixture()?;
    for case in cases(&f) {
        let work = f.root.join(format!("out-{}", case.name.replace(' ', "-")));
        let out = work.join("report.html");
        let summary = report::write(&case.inputs, &out)?;
        assert_eq!(summary.path, out, "{}", case.name);
        assert_eq!(
            (summary.runs, summary.tasks, summary.plots),
            (case.runs, case.tasks, case.plots),
            "{}: summary counts",
            case.name
        );
        assert_eq!(
            summary.missing_points.len(),
            case.missing_points,
            "{}",
            case.name
        );
        let html = std::fs::read_to_string(&out)?;
        assert!(
            html.contains(&format!("<body data-plots=\"{}\">", case.plots)),
            "{}",
            case.name
        );
        check_content(&case, &html)?;
        let rendered = check_rendering(&case, &out, &work);
        // To look at the pages: PATCHWRIGHT_REPORT_TEST_KEEP=DIR.
        if let Some(keep) = std::env::var_os("PATCHWRIGHT_REPORT_TEST_KEEP") {
            let keep = PathBuf::from(keep).join(work.file_name().ok_or("no name")?);
            std::fs::create_dir_all(&keep)?;
            for f in ["report.html", "shot.png"] {
                if work.join(f).is_file() {
                    std::fs::copy(work.join(f), keep.join(f))?;
                }
            }
        }
        rendered?;
    }
    Ok(())
}

#[test]
fn bad_inputs_are_errors_naming_the_path() -> R {
    let tmp = tempfile::tempdir()?;
    let root = tmp.path();
    let empty = root.join("empty");
    std::fs::create_dir_all(&empty)?;
    let bad_sweep = root.join("bad-sweep");
    std::fs::create_dir_all(&bad_sweep)?;
    std::fs::write(
        bad_sweep.join("sweep.json"),
        "{\"grid\": [], \"points\": 3}",
    )?;
    let bad_run = root.join("bad-run");
    std::fs::create_dir_all(&bad_run)?;
    std::fs::write(bad_run.join("run.json"), "[1, 2]")?;
    let bad_result = root.join("bad-result");
    make_run(
        &bad_result,
        &RunSpec {
            temperature: 0.0,
            candidates: 1,
            graded: false,
            resolves: [false; 3],
        },
    )?;
    std::fs::write(bad_result.join("results").join("broken.json"), "{not json")?;
    let missing = root.join("missing");

    let cases: [(&str, Vec<PathBuf>, Option<PathBuf>, &str); 6] = [
        ("no inputs", vec![], None, "no run or sweep directories"),
        (
            "no such directory",
            vec![missing.clone()],
            Some(missing),
            "no such directory",
        ),
        (
            "neither a run nor a sweep",
            vec![empty.clone()],
            Some(empty),
            "neither a run directory",
        ),
        (
            "sweep.json of the wrong shape",
            vec![bad_sweep.clone()],
            Some(bad_sweep.join("sweep.json")),
            "not valid JSON",
        ),
        (
            "run.json not an object",
            vec![bad_run.clone()],
            Some(bad_run.join("run.json")),
            "not a JSON object",
        ),
        (
            "a result that is not JSON",
            vec![bad_result.clone()],
            Some(bad_result.join("results").join("broken.json")),
            "not valid JSON",
        ),
    ];
    for (name, inputs, path, words) in cases {
        let out = root.join("never.html");
        let err = match report::write(&inputs, &out) {
            Ok(s) => return Err(format!("{name}: wrote {s:?}").into()),
            Err(e) => e,
        };
        let text = err.to_string();
        if let Some(path) = path {
            assert!(
                text.contains(&path.display().to_string()),
                "{name}: {text:?} does not name {}",
                path.display()
            );
        }
        assert!(text.contains(words), "{name}: {text:?}");
        assert!(!out.exists(), "{name}: no file on error");
        if name == "no inputs" {
            assert!(matches!(err, ReportError::NoInputs), "{name}");
        }
    }
    Ok(())
}
