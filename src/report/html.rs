//! The report page: its skeleton (style, sections, the script that
//! measures the plots) and the per-task drill-down.

use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

use super::load::{number, Report, Run, Task};
use super::overview::{configurations, costs, funnels, results};
use super::text::{boundary, cut, cut_middle, esc, seconds, slug, thousands, w};
use super::ReportError;
use crate::record::grade::{InstanceReport, Outcomes};
use crate::record::trajectory::{read_steps, ReadStep, Step, TimedStep};
use crate::record::RecordError;

/// A patch longer than this is cut.
const PATCH_CUT: usize = 60_000;
/// A test log longer than HEAD + TAIL keeps its head and tail.
const LOG_HEAD: usize = 4_000;
const LOG_TAIL: usize = 16_000;
/// Thoughts, observations, responses and the like.
const TEXT_CUT: usize = 2_000;
/// A stage artifact's JSON.
const ARTIFACT_CUT: usize = 6_000;
/// The rendered steps of one trajectory; the rest are counted, not shown.
const STEPS_BUDGET: usize = 80_000;
/// Failing tests listed per grade.
const TESTS_LISTED: usize = 20;
/// Past this page size, tasks' drill-downs keep only their summary line.
const PAGE_BUDGET: usize = 40_000_000;

/// The page's style sheet.
const CSS: &str = include_str!("assets/report.css");
/// Sets `data-plots-rendered` (plots whose marks have non-empty geometry)
/// and `data-plot-boxes` (each plot's page rectangle) on `<body>`.
const SCRIPT: &str = include_str!("assets/report.js");

pub(crate) struct Page {
    pub html: String,
    pub plots: usize,
}

pub(crate) fn render(report: &Report) -> Result<Page, ReportError> {
    let mut body = String::new();
    let mut plots = 0usize;
    let tasks: usize = report.runs.iter().map(|r| r.tasks.len()).sum();

    w!(
        body,
        "<header><h1>patchwright report</h1><p>{} run{} · {} task result{} · from {}</p>",
        report.runs.len(),
        if report.runs.len() == 1 { "" } else { "s" },
        tasks,
        if tasks == 1 { "" } else { "s" },
        report
            .inputs
            .iter()
            .map(|p| format!("<code>{}</code>", esc(&p.display().to_string())))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !report.missing_points.is_empty() {
        w!(
            body,
            "<p class=\"note\">Sweep points not run yet (no run.json), left out: {}</p>",
            report
                .missing_points
                .iter()
                .map(|p| format!("<code>{}</code>", esc(&p.display().to_string())))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    body.push_str("</header>");

    configurations(&mut body, report);
    plots += results(&mut body, report);
    plots += funnels(&mut body, report);
    plots += costs(&mut body, report);
    drill_down(&mut body, report)?;

    let mut html = String::with_capacity(body.len() + 8_000);
    w!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>patchwright report</title><style>\n{CSS}</style></head>\n\
         <body data-plots=\"{plots}\">\n{body}\n<script>\n{SCRIPT}</script>\n</body></html>\n"
    );
    Ok(Page { html, plots })
}

fn drill_down(out: &mut String, report: &Report) -> Result<(), ReportError> {
    out.push_str("<section id=\"tasks\"><h2>Tasks</h2>");
    let mut budget_note = false;
    for (i, run) in report.runs.iter().enumerate() {
        w!(
            out,
            "<h3 id=\"run-{}\">#{} {}</h3><p class=\"meta\"><code>{}</code>{}{}{}</p>",
            i + 1,
            i + 1,
            esc(&run.label),
            esc(&run.dir.display().to_string()),
            run.model
                .as_ref()
                .map(|m| format!(" · model <code>{}</code>", esc(m)))
                .unwrap_or_default(),
            run.started_at
                .as_ref()
                .map(|s| format!(" · started {}", esc(s)))
                .unwrap_or_default(),
            run.finished_at
                .as_ref()
                .map(|s| format!(" · finished {}", esc(s)))
                .unwrap_or_default(),
        );
        if !run.unfinished.is_empty() {
            w!(
                out,
                "<p class=\"note\">Selected but without a result: {}</p>",
                esc(&run.unfinished.join(", "))
            );
        }
        if !run.errors_by_kind.is_empty() {
            let kinds: Vec<String> = run
                .errors_by_kind
                .iter()
                .map(|(kind, n)| format!("{} <code>{}</code>", n, esc(kind.as_str())))
                .collect();
            w!(
                out,
                "<p class=\"meta\">Errors by kind: {}</p>",
                kinds.join(", ")
            );
        }
        for task in &run.tasks {
            let full = out.len() < PAGE_BUDGET;
            if !full && !budget_note {
                budget_note = true;
                out.push_str(
                    "<p class=\"note\">The page is large: from here on, tasks show only their \
                     summary line; open the run directory for the rest.</p>",
                );
            }
            task_details(out, run, i + 1, task, full)?;
        }
    }
    out.push_str("</section>\n");
    Ok(())
}

fn status_class(status: &str) -> String {
    format!("st st-{}", slug(status))
}

fn task_details(
    out: &mut String,
    run: &Run,
    run_no: usize,
    task: &Task,
    full: bool,
) -> Result<(), ReportError> {
    let r = &task.result;
    let status = r.status.as_str();
    let resolved = match task.resolved {
        Some(true) => "<span class=\"res-yes\">resolved</span>",
        Some(false) => "<span class=\"res-no\">not resolved</span>",
        None if run.graded => "<span class=\"meta\">no grade</span>",
        None => "",
    };
    w!(
        out,
        "<details class=\"task\" id=\"task-{run_no}-{}\"><summary><code>{}</code> \
         <span class=\"{}\">{}</span> {resolved} <span class=\"meta\">· {} tokens · {} · \
         {} model calls</span></summary>",
        slug(&task.id),
        esc(&task.id),
        status_class(status),
        esc(status),
        thousands((r.prompt_tokens + r.completion_tokens) as u64),
        seconds(r.elapsed_s),
        r.model_calls
    );
    if !full {
        out.push_str("</details>\n");
        return Ok(());
    }
    if let Some(e) = &r.error {
        w!(
            out,
            "<h4>Error <span class=\"meta\">({})</span></h4><pre>{}</pre>",
            esc(e.kind.as_str()),
            cut(&e.message, TEXT_CUT)
        );
    }
    if let Some(m) = &r.metrics {
        metrics_table(out, m);
    }
    out.push_str("<h4>Patch</h4>");
    if r.model_patch.trim().is_empty() {
        out.push_str("<p class=\"meta\">(empty)</p>");
    } else {
        w!(
            out,
            "<pre class=\"patch\">{}</pre>",
            patch_html(&r.model_patch)
        );
    }
    let logs = run.dir.join("eval").join("logs").join(&task.id);
    if let Some(g) = &task.grade {
        grade_html(out, g);
    }
    let test_log = logs.join("test_output.txt");
    if test_log.is_file() {
        let bytes = std::fs::read(&test_log).map_err(|source| ReportError::Io {
            action: "read",
            path: test_log.clone(),
            source,
        })?;
        let text = String::from_utf8_lossy(&bytes);
        w!(
            out,
            "<h4>Test log <span class=\"meta\">({} bytes)</span></h4><pre>{}</pre>",
            bytes.len(),
            cut_middle(&text, LOG_HEAD, LOG_TAIL)
        );
    }
    artifacts_html(out, &run.dir.join("artifacts").join(&task.id))?;
    trajectory_html(
        out,
        &run.dir
            .join("trajectories")
            .join(format!("{}.json", task.id)),
    )?;
    out.push_str("</details>\n");
    Ok(())
}

fn yes_no(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "—",
    }
}

fn share(f: Option<f64>) -> String {
    f.map_or("—".into(), |f| format!("{:.0}%", f * 100.0))
}

fn metrics_table(out: &mut String, m: &super::load::TaskMetrics) {
    let list = |v: &[String]| {
        if v.is_empty() {
            "—".to_string()
        } else {
            esc(&v.join(", "))
        }
    };
    w!(
        out,
        "<h4>Stage metrics</h4><table>\
         <tr><th>file hit</th><td>{} <span class=\"meta\">gold: {} · located: {}</span></td></tr>\
         <tr><th>function hit</th><td>{} <span class=\"meta\">gold: {} · located: {}</span></td></tr>\
         <tr><th>reproduction fails on base</th><td>{}</td></tr>\
         <tr><th>reproduction passes with gold</th><td>{}</td></tr>\
         <tr><th>candidates generated / applied / parsed / distinct</th><td>{} / {} / {} / {}</td></tr>\
         <tr><th>resolving candidates</th><td>{}</td></tr>\
         <tr><th>any resolves · picked resolves</th><td>{} · {}</td></tr>",
        share(m.file_hit),
        list(&m.gold_files),
        list(&m.located_files),
        share(m.function_hit),
        list(&m.gold_functions),
        list(&m.located_functions),
        yes_no(m.reproduction_fails_on_base),
        yes_no(m.reproduction_passes_with_gold),
        m.candidates_generated,
        m.candidates_applied,
        m.candidates_parsed,
        m.candidates_distinct,
        m.resolving.as_ref().map_or("—".into(), |v| format!("{v:?}")),
        yes_no(m.any_resolves),
        yes_no(m.picked_resolves),
    );
    if !m.notes.is_empty() {
        w!(
            out,
            "<tr><th>notes</th><td>{}</td></tr>",
            cut(&m.notes.join("\n"), TEXT_CUT)
        );
    }
    out.push_str("</table>");
}

fn patch_html(patch: &str) -> String {
    let end = boundary(patch, PATCH_CUT);
    let mut out = String::new();
    for line in patch[..end].split_inclusive('\n') {
        let class = if line.starts_with("+++") || line.starts_with("---") {
            ""
        } else if line.starts_with('+') {
            "add"
        } else if line.starts_with('-') {
            "del"
        } else if line.starts_with("@@") {
            "hunk"
        } else {
            ""
        };
        if class.is_empty() {
            out.push_str(&esc(line));
        } else {
            w!(out, "<span class=\"{class}\">{}</span>", esc(line));
        }
    }
    if end < patch.len() {
        w!(
            out,
            "<span class=\"cut\">\n… cut: {} more bytes of the patch not shown</span>",
            patch.len() - end
        );
    }
    out
}

fn grade_html(out: &mut String, g: &InstanceReport) {
    w!(
        out,
        "<h4>Grade</h4><table><tr><th>resolved</th><td>{}</td></tr>\
         <tr><th>patch applied</th><td>{}{}</td></tr>",
        yes_no(Some(g.resolved)),
        yes_no(Some(g.patch_successfully_applied)),
        g.applied_with
            .as_ref()
            .map(|s| format!(" <span class=\"meta\">({})</span>", esc(s)))
            .unwrap_or_default()
    );
    if let Some(e) = &g.error {
        let e = serde_json::to_value(e).unwrap_or_default();
        w!(
            out,
            "<tr><th>error</th><td><pre>{}</pre></td></tr>",
            cut(&pretty(&e), TEXT_CUT)
        );
    }
    if let Some(ts) = &g.tests_status {
        // In the order SWE-bench's keys sort.
        let lists: [(&str, &Outcomes); 4] = [
            ("FAIL_TO_FAIL", &ts.fail_to_fail),
            ("FAIL_TO_PASS", &ts.fail_to_pass),
            ("PASS_TO_FAIL", &ts.pass_to_fail),
            ("PASS_TO_PASS", &ts.pass_to_pass),
        ];
        for (name, o) in lists {
            let (ok, failed) = (&o.success, &o.failure);
            if ok.is_empty() && failed.is_empty() {
                continue;
            }
            w!(
                out,
                "<tr><th>{}</th><td>{} passed, {} failed",
                esc(name),
                ok.len(),
                failed.len()
            );
            if !failed.is_empty() {
                let shown: Vec<String> = failed.iter().take(TESTS_LISTED).map(|t| esc(t)).collect();
                w!(
                    out,
                    "<br>failed: <code>{}</code>",
                    shown.join("</code>, <code>")
                );
                if failed.len() > TESTS_LISTED {
                    w!(
                        out,
                        " <span class=\"cut\">… and {} more</span>",
                        failed.len() - TESTS_LISTED
                    );
                }
            }
            out.push_str("</td></tr>");
        }
    }
    out.push_str("</table>");
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

fn artifacts_html(out: &mut String, dir: &Path) -> Result<(), ReportError> {
    if !dir.is_dir() {
        return Ok(());
    }
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Io {
            action,
            path,
            source,
        }
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io("list", dir))? {
        let path = entry.map_err(io("list", dir))?.path();
        if path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Ok(());
    }
    files.sort();
    out.push_str("<h4>Stage artifacts</h4>");
    for path in files {
        let bytes = std::fs::read(&path).map_err(io("read", &path))?;
        let text = match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => pretty(&v),
            Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        w!(
            out,
            "<details><summary><code>{}</code></summary><pre>{}</pre></details>",
            esc(&name),
            cut(&text, ARTIFACT_CUT)
        );
    }
    Ok(())
}

fn trajectory_html(out: &mut String, path: &Path) -> Result<(), ReportError> {
    if !path.is_file() {
        out.push_str("<h4>Trajectory</h4><p class=\"meta\">no trajectory file</p>");
        return Ok(());
    }
    let steps = match read_steps(path) {
        Ok(steps) => steps,
        Err(RecordError::Json { source, .. }) => {
            w!(
                out,
                "<h4>Trajectory</h4><p class=\"note\"><code>{}</code> is not valid JSON: {}</p>",
                esc(&path.display().to_string()),
                esc(&source.to_string())
            );
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    w!(
        out,
        "<h4>Trajectory <span class=\"meta\">({} steps)</span></h4><ol class=\"steps\">",
        steps.len()
    );
    let start = out.len();
    for (i, step) in steps.iter().enumerate() {
        if out.len() - start > STEPS_BUDGET {
            w!(
                out,
                "</ol><p class=\"cut\">… cut: {} more steps not shown (the page keeps about \
                 {} KB per trajectory); see <code>{}</code></p>",
                steps.len() - i,
                STEPS_BUDGET / 1000,
                esc(&path.display().to_string())
            );
            return Ok(());
        }
        match step {
            ReadStep::Known(s) => step_html(out, s),
            ReadStep::Other(v) => other_step_html(out, step, v),
        }
    }
    out.push_str("</ol>");
    Ok(())
}

/// A count as shown.
fn count(n: usize) -> String {
    thousands(n as u64)
}

/// A step of a kind this version does not know, as JSON.
fn other_step_html(out: &mut String, step: &ReadStep, v: &Value) {
    let kind = step.kind();
    w!(
        out,
        "<li><span class=\"kind\">{}</span><pre>{}</pre></li>",
        esc(if kind.is_empty() { "step" } else { &kind }),
        cut(&pretty(v), TEXT_CUT)
    );
}

fn step_html(out: &mut String, timed: &TimedStep) {
    let at = format!(" <span class=\"meta\">at {}</span>", seconds(timed.at_s));
    match &timed.step {
        Step::ModelCall(c) => {
            let stop = serde_json::to_value(c.stop).unwrap_or_default();
            w!(
                out,
                "<li><span class=\"kind\">model call</span> <code>{}</code>{at} \
                 <span class=\"meta\">· prompt {} tokens (evaluated {}, reused {}) · completion {} \
                 · stop {} · {}{}</span><pre>{}</pre>",
                esc(&c.purpose),
                count(c.prompt_tokens),
                count(c.prompt_tokens_evaluated),
                count(c.prompt_tokens_reused),
                count(c.completion_tokens),
                esc(&stop.as_str().map_or_else(|| stop.to_string(), String::from)),
                seconds(c.prompt_s + c.decode_s),
                if c.candidates.len() > 1 {
                    format!(" · {} candidates, the first shown", c.candidates.len())
                } else {
                    String::new()
                },
                cut(&c.response, TEXT_CUT)
            );
        }
        Step::Action(a) => {
            w!(
                out,
                "<li><span class=\"kind\">{} step {}</span>{at}",
                esc(&a.agent),
                count(a.step)
            );
            if !a.thought.is_empty() {
                w!(out, "<div>thought: {}</div>", cut(&a.thought, TEXT_CUT));
            }
            w!(
                out,
                "<div>action:</div><pre>{}</pre>",
                cut(&a.action, TEXT_CUT)
            );
            if let Some(e) = &a.format_error {
                w!(
                    out,
                    "<div class=\"res-no\">format error: {}</div>",
                    cut(e, TEXT_CUT)
                );
            }
            w!(
                out,
                "<details class=\"obs\"><summary>observation <span class=\"meta\">({} lines)\
                 </span></summary><pre>{}</pre></details>",
                a.observation.lines().count(),
                cut(&a.observation, TEXT_CUT)
            );
        }
        Step::Episode(e) => {
            w!(
                out,
                "<li><span class=\"kind\">episode end</span> {} <code>{}</code>{at} \
                 <span class=\"meta\">· {} steps · {} format errors · tokens evaluated {}, \
                 reused {}, generated {} · {}</span>",
                esc(&e.agent),
                esc(e.status.as_str()),
                count(e.steps),
                count(e.format_errors),
                thousands(e.tokens_evaluated),
                thousands(e.tokens_reused),
                thousands(e.tokens_generated),
                seconds(e.wall_s)
            );
            if let Some(e) = &e.error {
                w!(out, "<pre>{}</pre>", cut(e, TEXT_CUT));
            }
        }
        Step::Edit {
            blocks,
            definitions,
            unterminated,
        } => {
            w!(
                out,
                "<li><span class=\"kind\">edit</span>{at} <span class=\"meta\">· {} unterminated</span><ul>",
                count(*unterminated)
            );
            for (what, list) in [("block", blocks), ("definition", definitions)] {
                for b in list {
                    let result = match &b.error {
                        Some(e) => format!("<span class=\"res-no\">{}</span>", cut(e, 400)),
                        None => format!(
                            "applied to <code>{}</code>",
                            esc(b.applied_to.as_deref().unwrap_or(&b.path))
                        ),
                    };
                    w!(
                        out,
                        "<li>{what} <code>{}</code>: {result}</li>",
                        esc(&b.path)
                    );
                }
            }
            out.push_str("</ul>");
        }
        Step::Diff { files, bytes } => {
            w!(
                out,
                "<li><span class=\"kind\">diff</span>{at} <span class=\"meta\">· {} files, {} bytes</span>",
                count(*files),
                count(*bytes)
            );
        }
        Step::Retrieve {
            ranked,
            shown,
            truncated,
        } => {
            let paths = |v: &[String]| -> String {
                if v.is_empty() {
                    "—".into()
                } else {
                    v.iter()
                        .map(|p| format!("<code>{}</code>", esc(p)))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            };
            let ranked: Vec<String> = ranked
                .iter()
                .take(10)
                .map(|r| format!("<code>{}</code> {}", esc(&r.path), number(r.score)))
                .collect();
            w!(
                out,
                "<li><span class=\"kind\">retrieve</span>{at}<div>shown: {}</div>\
                 <div>truncated: {}</div><div class=\"meta\">top ranked: {}</div>",
                paths(shown),
                paths(truncated),
                ranked.join(", ")
            );
        }
        Step::Stage { name } => {
            w!(
                out,
                "<li><span class=\"kind\">stage</span> <code>{}</code>{at}",
                esc(name)
            );
        }
        Step::Reused { stage, from } => {
            w!(
                out,
                "<li><span class=\"kind\">reused</span> stage <code>{}</code> from <code>{}</code>{at}",
                esc(stage),
                esc(from)
            );
        }
        Step::Trimmed(t) => {
            w!(
                out,
                "<li><span class=\"kind\">trimmed</span> <code>{}</code>{at} \
                 <span class=\"meta\">· {} → {} prompt tokens, {} kept for the reply, context {}{}</span><ul>",
                esc(&t.purpose),
                count(t.full_tokens),
                count(t.prompt_tokens),
                count(t.reserved),
                count(t.context),
                if t.fits { "" } else { " · does not fit: no call made" }
            );
            for c in &t.cuts {
                w!(out, "<li>{}</li>", esc(&c.describe()));
            }
            out.push_str("</ul>");
        }
    }
    out.push_str("</li>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::trajectory::{Cut, Trim};

    #[test]
    fn a_trimmed_step_shows_its_cuts() {
        let cases = [
            (
                true,
                "<li><span class=\"kind\">trimmed</span> <code>fixer</code> <span class=\"meta\">at 1.5 s</span> \
                 <span class=\"meta\">· 10,997 → 3,577 prompt tokens, 512 kept for the reply, context 4,096</span>\
                 <ul><li>issue: 17120 characters (428 lines) left out, 12880 kept</li>\
                 <li>a.py::&lt;Big&gt;: left out whole</li></ul></li>",
            ),
            (
                false,
                "<li><span class=\"kind\">trimmed</span> <code>fixer</code> <span class=\"meta\">at 1.5 s</span> \
                 <span class=\"meta\">· 10,997 → 3,577 prompt tokens, 512 kept for the reply, context 4,096 \
                 · does not fit: no call made</span>\
                 <ul><li>issue: 17120 characters (428 lines) left out, 12880 kept</li>\
                 <li>a.py::&lt;Big&gt;: left out whole</li></ul></li>",
            ),
        ];
        for (fits, want) in cases {
            let step = TimedStep {
                at_s: 1.5,
                step: Step::Trimmed(Box::new(Trim {
                    purpose: "fixer".into(),
                    context: 4096,
                    reserved: 512,
                    full_tokens: 10_997,
                    prompt_tokens: 3577,
                    fits,
                    cuts: vec![
                        Cut::Issue {
                            kept_chars: 12_880,
                            dropped_chars: 17_120,
                            dropped_lines: 428,
                        },
                        Cut::Location {
                            path: "a.py".into(),
                            symbol: "<Big>".into(),
                        },
                    ],
                })),
            };
            let mut out = String::new();
            step_html(&mut out, &step);
            assert_eq!(out, want, "fits: {fits}");
        }
    }
}
