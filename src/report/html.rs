//! The report page: sections, tables, the per-task drill-down, and the
//! script that measures the plots.

use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

use super::load::{number, Report, Run, Task};
use super::svg::{self, Bar, Point, TaskCost};
use super::{ReportError, MARK_COLOUR};
use crate::record::grade::{InstanceReport, Outcomes};
use crate::record::result::Status;
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
/// Parameters shown as columns of the configurations table; the rest
/// share one column.
const PARAM_COLUMNS: usize = 8;
/// Rate plots drawn (sweep grid keys come first).
const PARAM_PLOTS: usize = 12;
/// Past this page size, tasks' drill-downs keep only their summary line.
const PAGE_BUDGET: usize = 40_000_000;

macro_rules! w {
    ($out:expr, $($arg:tt)*) => {
        let _ = write!($out, $($arg)*);
    };
}

pub(crate) struct Page {
    pub html: String,
    pub plots: usize,
}

/// Escapes text for HTML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `1234567` as `1,234,567`.
pub(crate) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration: `4.2 s`, `3m 07s`, `2h 03m`.
pub(crate) fn seconds(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "—".into();
    }
    if s < 60.0 {
        return format!("{s:.1} s");
    }
    let total = s.round() as u64;
    if total < 3600 {
        format!("{}m {:02}s", total / 60, total % 60)
    } else {
        format!("{}h {:02}m", total / 3600, (total % 3600) / 60)
    }
}

fn percent(n: usize, of: usize) -> String {
    if of == 0 {
        "—".into()
    } else {
        format!("{:.1}%", n as f64 * 100.0 / of as f64)
    }
}

/// The largest char boundary at or below `at`.
fn boundary(s: &str, mut at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// `s` cut to `max` bytes, with a note saying how much was cut.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return esc(s);
    }
    let end = boundary(s, max);
    format!(
        "{}<span class=\"cut\">\n… cut: {} more bytes not shown</span>",
        esc(&s[..end]),
        s.len() - end
    )
}

/// `s` keeping its first `head` and last `tail` bytes, with a note.
fn cut_middle(s: &str, head: usize, tail: usize) -> String {
    if s.len() <= head + tail {
        return esc(s);
    }
    let a = boundary(s, head);
    let mut b = s.len() - tail;
    while !s.is_char_boundary(b) {
        b += 1;
    }
    format!(
        "{}<span class=\"cut\">\n… cut: {} bytes in the middle not shown …\n</span>{}",
        esc(&s[..a]),
        b - a,
        esc(&s[b..])
    )
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn status_class(status: &str) -> String {
    format!("st st-{}", slug(status))
}

/// What the rate plots show: the resolve rate when every run was graded.
fn rate_of(report: &Report) -> (&'static str, bool) {
    if report.runs.iter().all(|r| r.graded) {
        ("resolve rate", true)
    } else if report.runs.iter().any(|r| r.graded) {
        ("patched rate (not every run graded)", false)
    } else {
        ("patched rate (not graded)", false)
    }
}

fn patched(run: &Run) -> usize {
    run.tasks
        .iter()
        .filter(|t| t.result.status == Status::Patched)
        .count()
}

fn count_status(run: &Run, status: &str) -> usize {
    run.tasks
        .iter()
        .filter(|t| t.result.status.as_str() == status)
        .count()
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
         <title>patchwright report</title><style>{CSS}</style></head>\n\
         <body data-plots=\"{plots}\">\n{body}\n<script>{SCRIPT}</script>\n</body></html>\n"
    );
    Ok(Page { html, plots })
}

const CSS: &str = "
body{font-family:sans-serif;margin:16px 24px;color:#222;background:#fff;font-size:14px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:22px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:16px 0 6px}h4{font-size:13px;margin:10px 0 4px}
a{color:#0b5394}code{font-size:12px}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.plots{display:flex;flex-wrap:wrap;gap:14px}
figure{margin:0;border:1px solid #e3e3e3;padding:6px 8px;max-width:100%}
figcaption{font-size:13px;font-weight:bold;margin-bottom:4px;max-width:420px;overflow-wrap:anywhere}
.scroll{overflow-x:auto}.legend{font-size:12px;color:#444;margin-top:3px}
.key{margin-right:12px}.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.note{color:#555;font-size:12px}
pre{background:#f7f7f7;border:1px solid #e5e5e5;padding:6px;overflow-x:auto;white-space:pre-wrap;word-break:break-word;font-size:12px;max-height:480px;overflow-y:auto}
.cut{color:#a33;font-style:italic}
.add{color:#116611}.del{color:#aa1111}.hunk{color:#6a3d9a}
details.task{border:1px solid #ddd;margin:4px 0;padding:3px 8px}details.task>summary{cursor:pointer}
details.task[open]{background:#fcfcfc}
.st{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;background:#eee}
.st-patched{background:#d9ead3}.st-no-patch{background:#eeeeee}.st-error{background:#f4cccc}
.res-yes{color:#116611;font-weight:bold}.res-no{color:#aa1111}
ol.steps{padding-left:26px}ol.steps>li{margin:6px 0}
.kind{font-weight:bold}.meta{color:#666;font-size:12px}
";

/// Sets `data-plots-rendered` (plots whose marks have non-empty geometry)
/// and `data-plot-boxes` (each plot's page rectangle) on `<body>`.
const SCRIPT: &str = "
(function () {
  function measure() {
    var plots = document.querySelectorAll('svg.plot');
    var rendered = 0, boxes = [];
    for (var i = 0; i < plots.length; i++) {
      var marks = plots[i].querySelectorAll('.mark');
      var x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      for (var j = 0; j < marks.length; j++) {
        var b = marks[j].getBBox();
        if (b.width <= 0 && b.height <= 0) continue;
        x0 = Math.min(x0, b.x); y0 = Math.min(y0, b.y);
        x1 = Math.max(x1, b.x + b.width); y1 = Math.max(y1, b.y + b.height);
      }
      if (x1 - x0 > 0 && y1 - y0 > 0) rendered++;
      var r = plots[i].getBoundingClientRect();
      boxes.push([Math.round(r.left + window.scrollX), Math.round(r.top + window.scrollY),
                  Math.round(r.width), Math.round(r.height)].join(','));
    }
    document.body.setAttribute('data-plots-rendered', String(rendered));
    document.body.setAttribute('data-plot-boxes', boxes.join(';'));
  }
  measure();
  window.addEventListener('load', measure);
})();
";

fn configurations(out: &mut String, report: &Report) {
    out.push_str("<section id=\"configurations\"><h2>Configurations</h2><table><thead><tr><th>#</th><th>run</th>");
    let (columns, rest) = report
        .params
        .split_at(report.params.len().min(PARAM_COLUMNS));
    for p in columns {
        w!(out, "<th><code>{}</code></th>", esc(p));
    }
    if !rest.is_empty() {
        out.push_str("<th>other differing settings</th>");
    }
    out.push_str(
        "<th>tasks</th><th>patched</th><th>resolved</th><th>errors</th>\
         <th>tokens (prompt + completion)</th><th>wall time</th></tr></thead><tbody>",
    );
    for (i, run) in report.runs.iter().enumerate() {
        let n = run.tasks.len();
        let p = patched(run);
        w!(
            out,
            "<tr><td class=\"n\">{}</td><td><a href=\"#run-{}\">{}</a></td>",
            i + 1,
            i + 1,
            esc(&run.label)
        );
        for key in columns {
            w!(
                out,
                "<td>{}</td>",
                esc(run.settings.get(key).map_or("—", String::as_str))
            );
        }
        if !rest.is_empty() {
            let pairs: Vec<String> = rest
                .iter()
                .map(|k| {
                    format!(
                        "<code>{}={}</code>",
                        esc(k),
                        esc(run.settings.get(k).map_or("—", String::as_str))
                    )
                })
                .collect();
            w!(out, "<td>{}</td>", pairs.join("<br>"));
        }
        let resolved = match run.resolved {
            Some(r) => format!("{r} / {n} ({})", percent(r, n)),
            None if run.graded => "graded, no count".into(),
            None => "not graded".into(),
        };
        w!(
            out,
            "<td class=\"n\">{n}{}</td><td class=\"n\">{p} ({})</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{} ({} + {})</td><td class=\"n\">{}</td></tr>",
            if run.unfinished.is_empty() {
                String::new()
            } else {
                format!(" (+{} unfinished)", run.unfinished.len())
            },
            percent(p, n),
            resolved,
            count_status(run, "error"),
            thousands(run.prompt_tokens + run.completion_tokens),
            thousands(run.prompt_tokens),
            thousands(run.completion_tokens),
            seconds(run.elapsed_s)
        );
    }
    out.push_str("</tbody></table>");
    if report.params.is_empty() && report.runs.len() > 1 {
        out.push_str("<p class=\"note\">The runs' settings do not differ.</p>");
    }
    out.push_str("</section>\n");
}

/// The outcomes chart and a rate plot per differing parameter.
fn results(out: &mut String, report: &Report) -> usize {
    let (rate_name, graded) = rate_of(report);
    let mut plots = 0;
    out.push_str("<section id=\"results\"><h2>Results</h2><div class=\"plots\">");
    let any_graded = report.runs.iter().any(|r| r.graded);
    let groups: Vec<(String, String, Vec<Bar>)> = report
        .runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let mut bars = vec![
                Bar {
                    name: "patched",
                    value: patched(run),
                    colour: MARK_COLOUR,
                },
                Bar {
                    name: "no patch",
                    value: count_status(run, "no_patch"),
                    colour: svg::NO_PATCH,
                },
                Bar {
                    name: "error",
                    value: count_status(run, "error"),
                    colour: svg::ERROR,
                },
            ];
            if any_graded {
                bars.push(Bar {
                    name: "resolved",
                    value: run.resolved.unwrap_or(0),
                    colour: svg::RESOLVED,
                });
            }
            (format!("#{}", i + 1), run.label.clone(), bars)
        })
        .collect();
    let mut legend = vec![
        svg::swatch(MARK_COLOUR, "patched"),
        svg::swatch(svg::NO_PATCH, "no patch"),
        svg::swatch(svg::ERROR, "error"),
    ];
    if any_graded {
        legend.push(svg::swatch(svg::RESOLVED, "resolved"));
    }
    w!(
        out,
        "<figure><figcaption>Outcomes per run (tasks)</figcaption><div class=\"scroll\">{}</div>\
         <div class=\"legend\">{}</div></figure>",
        svg::grouped_bars("tasks", &groups),
        legend.join("")
    );
    plots += 1;
    for param in report.params.iter().take(PARAM_PLOTS) {
        let points: Vec<Point> = report
            .runs
            .iter()
            .enumerate()
            .map(|(i, run)| {
                let n = run.tasks.len();
                let hits = if graded {
                    run.resolved.unwrap_or(0)
                } else {
                    patched(run)
                };
                let y = if n == 0 { 0.0 } else { hits as f64 / n as f64 };
                Point {
                    x: run
                        .settings
                        .get(param)
                        .cloned()
                        .unwrap_or_else(|| "—".into()),
                    y,
                    note: format!(
                        "#{} {}: {hits} / {n} ({})",
                        i + 1,
                        run.label,
                        percent(hits, n)
                    ),
                }
            })
            .collect();
        w!(
            out,
            "<figure><figcaption>{} against <code>{}</code></figcaption>{}\
             <div class=\"legend\">a point per run; the line joins the mean at each value</div>\
             </figure>",
            esc(rate_name),
            esc(param),
            svg::rate_plot(param, rate_name, &points)
        );
        plots += 1;
    }
    out.push_str("</div>");
    if report.params.len() > PARAM_PLOTS {
        w!(
            out,
            "<p class=\"note\">{} more parameters differ; plotted are the first {PARAM_PLOTS} \
             (the table lists them all).</p>",
            report.params.len() - PARAM_PLOTS
        );
    }
    if report.params.is_empty() {
        out.push_str(
            "<p class=\"note\">No parameter differs among the runs, so there is no rate plot.</p>",
        );
    }
    out.push_str("</section>\n");
    plots
}

fn funnel_stages(run: &Run) -> Vec<(String, Option<usize>)> {
    let n = run.tasks.len();
    let metrics: Vec<_> = run
        .tasks
        .iter()
        .filter_map(|t| t.result.metrics.as_ref())
        .collect();
    let known = !metrics.is_empty();
    let count = |f: &dyn Fn(&super::load::TaskMetrics) -> bool| {
        known.then(|| metrics.iter().filter(|m| f(m)).count())
    };
    let last = if run.graded {
        ("resolved (graded)".to_string(), run.resolved)
    } else if known {
        (
            "picked resolves (metrics)".to_string(),
            count(&|m| m.picked_resolves == Some(true)),
        )
    } else {
        ("resolved".to_string(), None)
    };
    vec![
        ("tasks".into(), Some(n)),
        (
            "localised (file hit > 0)".into(),
            count(&|m| m.file_hit.is_some_and(|h| h > 0.0)),
        ),
        (
            "reproduced (fails on base)".into(),
            count(&|m| m.reproduction_fails_on_base == Some(true)),
        ),
        (
            "candidates applied (> 0)".into(),
            count(&|m| m.candidates_applied > 0),
        ),
        last,
    ]
}

fn funnels(out: &mut String, report: &Report) -> usize {
    out.push_str(
        "<section id=\"funnels\"><h2>Stage funnels</h2><p class=\"note\">Each stage counts \
         the run's tasks that reached it, from the stage metrics (a stage is n/a when the run \
         has none, as with the first pipeline); the last is the graded result when the run was \
         graded, else whether the ranker's pick resolves according to the metrics.</p>\
         <div class=\"plots\">",
    );
    for (i, run) in report.runs.iter().enumerate() {
        let title = format!("#{} {}", i + 1, run.label);
        w!(
            out,
            "<figure><figcaption>{}</figcaption>{}</figure>",
            esc(&title),
            svg::funnel(&title, &funnel_stages(run), run.tasks.len())
        );
    }
    out.push_str("</div></section>\n");
    report.runs.len()
}

fn costs(out: &mut String, report: &Report) -> usize {
    out.push_str(
        "<section id=\"costs\"><h2>Tokens and time per task</h2><p class=\"note\">One \
         scale for every run.</p>",
    );
    let all = report.runs.iter().flat_map(|r| r.tasks.iter());
    let scale = (
        all.clone()
            .map(|t| (t.result.prompt_tokens + t.result.completion_tokens) as u64)
            .max()
            .unwrap_or(0),
        all.map(|t| t.result.elapsed_s).fold(0.0, f64::max),
    );
    for (i, run) in report.runs.iter().enumerate() {
        let rows: Vec<TaskCost> = run
            .tasks
            .iter()
            .map(|t| TaskCost {
                id: t.id.clone(),
                prompt: t.result.prompt_tokens as u64,
                completion: t.result.completion_tokens as u64,
                seconds: t.result.elapsed_s,
            })
            .collect();
        let title = format!("#{} {}", i + 1, run.label);
        w!(
            out,
            "<figure><figcaption>{}</figcaption><div class=\"scroll\">{}</div>\
             <div class=\"legend\">{}{}{}</div></figure>",
            esc(&title),
            svg::per_task(&title, &rows, scale),
            svg::swatch(MARK_COLOUR, "prompt tokens"),
            svg::swatch(svg::light(), "completion tokens"),
            svg::swatch(svg::time(), "seconds")
        );
    }
    out.push_str("</section>\n");
    report.runs.len()
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
    }
    out.push_str("</li>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            esc("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
    }

    #[test]
    fn cuts_keep_char_boundaries_and_say_so() {
        let s = "é".repeat(10);
        let c = cut(&s, 5);
        assert!(c.starts_with("éé<span"), "{c}");
        assert!(c.contains("16 more bytes"), "{c}");
        let m = cut_middle(&s, 3, 3);
        assert!(m.starts_with("é<span"), "{m}");
        assert!(
            m.ends_with("</span>é") && m.contains("16 bytes in the middle"),
            "{m}"
        );
        assert_eq!(cut("short", 100), "short");
    }

    #[test]
    fn numbers_and_durations_read_well() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (1234567, "1,234,567"),
        ] {
            assert_eq!(thousands(n), want);
        }
        for (s, want) in [(4.24, "4.2 s"), (187.0, "3m 07s"), (7380.0, "2h 03m")] {
            assert_eq!(seconds(s), want);
        }
    }
}
