//! The sections over all runs, before the drill-down: the configurations
//! table, the outcomes and rate plots, the stage funnels, and tokens and
//! time per task.

use std::fmt::Write;

use super::load::{Report, Run};
use super::svg::{self, Bar, Point, TaskCost};
use super::text::{esc, percent, seconds, thousands, w};
use super::MARK_COLOUR;
use crate::record::result::Status;

/// Parameters shown as columns of the configurations table; the rest
/// share one column.
const PARAM_COLUMNS: usize = 8;
/// Rate plots drawn (sweep grid keys come first).
const PARAM_PLOTS: usize = 12;

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

/// Tasks of `run` with a patch.
fn patched(run: &Run) -> usize {
    run.tasks
        .iter()
        .filter(|t| t.result.status == Status::Patched)
        .count()
}

/// Tasks of `run` whose status is `status`.
fn count_status(run: &Run, status: &str) -> usize {
    run.tasks
        .iter()
        .filter(|t| t.result.status.as_str() == status)
        .count()
}

/// The configurations table: one row per run.
pub(super) fn configurations(out: &mut String, report: &Report) {
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
pub(super) fn results(out: &mut String, report: &Report) -> usize {
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

/// A run's funnel: each stage and how many tasks reached it, `None` when
/// unknown.
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

/// A stage funnel per run.
pub(super) fn funnels(out: &mut String, report: &Report) -> usize {
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

/// Tokens and seconds per task, per run, on one scale.
pub(super) fn costs(out: &mut String, report: &Report) -> usize {
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
