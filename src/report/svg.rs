//! The report's plots, drawn as inline SVG. Every plot is an
//! `<svg class="plot">` whose data-bearing shapes (points, lines, bars)
//! carry `class="mark"`: the page's script measures those.

use std::fmt::Write;

use super::load::number;
use super::text::{esc, seconds, thousands, w};
use super::MARK_COLOUR;

/// Completion tokens (stacked on the prompt's).
const LIGHT: &str = "#aec7e8";
/// Seconds per task.
const TIME: &str = "#ff7f0e";
pub(crate) const RESOLVED: &str = "#2ca02c";
pub(crate) const NO_PATCH: &str = "#8c8c8c";
pub(crate) const ERROR: &str = "#d62728";
const AXIS: &str = "#444";
const GRID: &str = "#e6e6e6";
const FONT: &str = "font-family=\"sans-serif\" font-size=\"11\"";

fn open(out: &mut String, width: f64, height: f64, data: &str, title: &str) {
    w!(
        out,
        "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" \
         height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\" {data}>\
         <title>{}</title>",
        esc(title)
    );
}

/// A run's result at one value of a parameter.
pub(crate) struct Point {
    pub x: String,
    pub y: f64,
    /// Hover text: the run and its numbers.
    pub note: String,
}

/// `y` (a rate, 0..1) against the values of `param`: a point per run and
/// a line through the mean at each value. Numeric values get a linear
/// axis, others one slot each.
pub(crate) fn rate_plot(param: &str, y_label: &str, points: &[Point]) -> String {
    let (w, h) = (420.0, 270.0);
    let (ml, mr, mt, mb) = (58.0, 20.0, 14.0, 48.0);
    let (pw, ph) = (w - ml - mr, h - mt - mb);
    let numeric: Option<Vec<f64>> = points.iter().map(|p| p.x.parse::<f64>().ok()).collect();
    let mut slots: Vec<String> = Vec::new();
    for p in points {
        if !slots.contains(&p.x) {
            slots.push(p.x.clone());
        }
    }
    let x_of: Box<dyn Fn(&str) -> f64> = match &numeric {
        Some(xs) => {
            slots.sort_by(|a, b| {
                let (a, b) = (a.parse::<f64>().ok(), b.parse::<f64>().ok());
                a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
            });
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let (lo, hi) = if hi > lo {
                (lo, hi)
            } else {
                (lo - 1.0, hi + 1.0)
            };
            let pad = (hi - lo) * 0.08;
            let (lo, hi) = (lo - pad, hi + pad);
            Box::new(move |x: &str| {
                let v = x.parse::<f64>().unwrap_or(lo);
                ml + (v - lo) / (hi - lo) * pw
            })
        }
        None => {
            slots.sort();
            let slots = slots.clone();
            let n = slots.len().max(1) as f64;
            Box::new(move |x: &str| {
                let i = slots.iter().position(|s| s == x).unwrap_or(0) as f64;
                ml + (i + 0.5) / n * pw
            })
        }
    };
    let y_of = |y: f64| mt + ph - y.clamp(0.0, 1.0) * ph;

    let mut out = String::new();
    open(
        &mut out,
        w,
        h,
        &format!(
            "data-param=\"{}\" data-points=\"{}\"",
            esc(param),
            points.len()
        ),
        &format!("{y_label} against {param}"),
    );
    // Grid and y axis.
    for i in 0..=4 {
        let v = i as f64 / 4.0;
        let y = y_of(v);
        w!(
            out,
            "<line x1=\"{ml}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{GRID}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" {FONT} fill=\"{AXIS}\">{}%</text>",
            ml + pw,
            ml - 6.0,
            y + 4.0,
            (v * 100.0).round()
        );
    }
    w!(
        out,
        "<line x1=\"{ml}\" x2=\"{ml}\" y1=\"{mt}\" y2=\"{:.1}\" stroke=\"{AXIS}\"/>\
         <line x1=\"{ml}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{AXIS}\"/>",
        mt + ph,
        ml + pw,
        mt + ph,
        mt + ph
    );
    // x ticks: every value when few, else five evenly spaced.
    let ticks: Vec<String> = match &numeric {
        Some(_) if slots.len() > 8 => {
            let lo = slots
                .first()
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or(0.0);
            let hi = slots
                .last()
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or(1.0);
            (0..5)
                .map(|i| number(lo + (hi - lo) * i as f64 / 4.0))
                .collect()
        }
        _ => slots.clone(),
    };
    for t in &ticks {
        let x = x_of(t);
        let shown: String = t.chars().take(14).collect();
        w!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{AXIS}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" {FONT} fill=\"{AXIS}\">{}</text>",
            mt + ph,
            mt + ph + 4.0,
            mt + ph + 16.0,
            esc(&shown)
        );
    }
    w!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" {FONT} font-weight=\"bold\" \
         fill=\"{AXIS}\">{}</text>\
         <text transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\" {FONT} \
         font-weight=\"bold\" fill=\"{AXIS}\">{}</text>",
        ml + pw / 2.0,
        h - 10.0,
        esc(param),
        mt + ph / 2.0,
        esc(y_label)
    );
    // The mean at each value, joined.
    let means: Vec<(f64, f64)> = slots
        .iter()
        .filter_map(|s| {
            let ys: Vec<f64> = points.iter().filter(|p| &p.x == s).map(|p| p.y).collect();
            (!ys.is_empty()).then(|| (x_of(s), y_of(ys.iter().sum::<f64>() / ys.len() as f64)))
        })
        .collect();
    if means.len() > 1 {
        let d: Vec<String> = means
            .iter()
            .enumerate()
            .map(|(i, (x, y))| format!("{}{x:.1},{y:.1}", if i == 0 { "M" } else { "L" }))
            .collect();
        w!(
            out,
            "<path class=\"mark\" d=\"{}\" fill=\"none\" stroke=\"{MARK_COLOUR}\" \
             stroke-width=\"2\" stroke-opacity=\"0.6\"/>",
            d.join(" ")
        );
    }
    // Points; runs at the same spot are spread sideways.
    let mut seen: Vec<(String, i64)> = Vec::new();
    for p in points {
        let key = (p.x.clone(), (p.y * 1e6).round() as i64);
        let k = seen.iter().filter(|s| **s == key).count();
        let twins = points
            .iter()
            .filter(|q| q.x == p.x && (q.y * 1e6).round() as i64 == key.1)
            .count();
        seen.push(key);
        let dx = (k as f64 - (twins as f64 - 1.0) / 2.0) * 9.0;
        w!(
            out,
            "<circle class=\"mark\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"5\" fill=\"{MARK_COLOUR}\">\
             <title>{}</title></circle>",
            x_of(&p.x) + dx,
            y_of(p.y),
            esc(&p.note)
        );
    }
    out.push_str("</svg>");
    out
}

/// One bar of a group.
pub(crate) struct Bar {
    pub name: &'static str,
    pub value: usize,
    pub colour: &'static str,
}

/// Vertical bars in groups (one group per run), counts on top.
pub(crate) fn grouped_bars(y_label: &str, groups: &[(String, String, Vec<Bar>)]) -> String {
    let bars = groups.iter().map(|g| g.2.len()).max().unwrap_or(1).max(1) as f64;
    let (bw, gap) = (16.0, 26.0);
    let gw = bars * bw + gap;
    let (ml, mr, mt, mb) = (48.0, 12.0, 18.0, 34.0);
    let pw = (groups.len() as f64 * gw).max(200.0);
    let (w, h) = (ml + pw + mr, 240.0);
    let ph = h - mt - mb;
    // Whole-number ticks: four steps of a whole size.
    let most = groups
        .iter()
        .flat_map(|g| g.2.iter().map(|b| b.value))
        .max()
        .unwrap_or(0)
        .max(1);
    let top = (most.div_ceil(4) * 4) as f64;
    let y_of = |v: f64| mt + ph - v / top * ph;
    let mut out = String::new();
    open(&mut out, w, h, "data-kind=\"outcomes\"", y_label);
    for i in 0..=4 {
        let v = top * i as f64 / 4.0;
        let y = y_of(v);
        w!(
            out,
            "<line x1=\"{ml}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{GRID}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" {FONT} fill=\"{AXIS}\">{}</text>",
            ml + pw,
            ml - 6.0,
            y + 4.0,
            v.round()
        );
    }
    w!(
        out,
        "<line x1=\"{ml}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{AXIS}\"/>\
         <text transform=\"translate(12 {:.1}) rotate(-90)\" text-anchor=\"middle\" {FONT} \
         font-weight=\"bold\" fill=\"{AXIS}\">{}</text>",
        ml + pw,
        mt + ph,
        mt + ph,
        mt + ph / 2.0,
        esc(y_label)
    );
    for (gi, (short, long, group)) in groups.iter().enumerate() {
        let x0 = ml + gi as f64 * gw + gap / 2.0;
        for (bi, bar) in group.iter().enumerate() {
            let x = x0 + bi as f64 * bw;
            let y = y_of(bar.value as f64);
            w!(
                out,
                "<rect class=\"mark\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" \
                 fill=\"{}\"><title>{}: {} {}</title></rect>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-family=\"sans-serif\" \
                 font-size=\"9\" fill=\"{AXIS}\">{}</text>",
                bw - 2.0,
                mt + ph - y,
                bar.colour,
                esc(long),
                bar.value,
                bar.name,
                x + (bw - 2.0) / 2.0,
                y - 3.0,
                bar.value
            );
        }
        w!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" {FONT} fill=\"{AXIS}\">{}\
             <title>{}</title></text>",
            x0 + group.len() as f64 * bw / 2.0,
            mt + ph + 16.0,
            esc(short),
            esc(long)
        );
    }
    out.push_str("</svg>");
    out
}

/// A run's stages: how many of `total` tasks reached each (None: not
/// known for this run).
pub(crate) fn funnel(title: &str, stages: &[(String, Option<usize>)], total: usize) -> String {
    let (lw, bw, row) = (170.0, 200.0, 24.0);
    let (w, h) = (lw + bw + 90.0, 8.0 + stages.len() as f64 * row + 6.0);
    let data: Vec<String> = stages
        .iter()
        .map(|(_, n)| n.map_or("-".to_string(), |n| n.to_string()))
        .collect();
    let mut out = String::new();
    open(
        &mut out,
        w,
        h,
        &format!("data-kind=\"funnel\" data-funnel=\"{}\"", data.join(" ")),
        title,
    );
    for (i, (name, n)) in stages.iter().enumerate() {
        let y = 8.0 + i as f64 * row;
        w!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" {FONT} fill=\"{AXIS}\">{}</text>",
            lw - 8.0,
            y + 13.0,
            esc(name)
        );
        match n {
            Some(n) => {
                let len = if total == 0 {
                    0.0
                } else {
                    *n as f64 / total as f64 * bw
                };
                let pct = if total == 0 {
                    String::new()
                } else {
                    format!(" ({:.0}%)", *n as f64 * 100.0 / total as f64)
                };
                w!(
                    out,
                    "<rect class=\"mark\" x=\"{lw}\" y=\"{y:.1}\" width=\"{len:.1}\" height=\"18\" \
                     fill=\"{MARK_COLOUR}\"/>\
                     <text x=\"{:.1}\" y=\"{:.1}\" {FONT} fill=\"{AXIS}\">{n}{pct}</text>",
                    lw + len + 5.0,
                    y + 13.0
                );
            }
            None => {
                w!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} fill=\"{AXIS}\">n/a</text>",
                    lw + 5.0,
                    y + 13.0
                );
            }
        }
    }
    out.push_str("</svg>");
    out
}

/// One task's cost.
pub(crate) struct TaskCost {
    pub id: String,
    pub prompt: u64,
    pub completion: u64,
    pub seconds: f64,
}

/// Tokens (prompt, then completion stacked) and seconds per task: one
/// row per task, two panels.
/// `scale` is the largest (tokens, seconds) to draw to, shared by every
/// run's chart so that bars compare across runs.
pub(crate) fn per_task(title: &str, rows: &[TaskCost], scale: (u64, f64)) -> String {
    let (lw, tw, gap, sw, row, head) = (250.0, 330.0, 70.0, 230.0, 16.0, 22.0);
    let (w, h) = (
        lw + tw + gap + sw + 60.0,
        head + rows.len() as f64 * row + 8.0,
    );
    let max_tokens = scale.0.max(1) as f64;
    let max_s = scale.1.max(1e-9);
    let tx = lw;
    let sx = lw + tw + gap;
    let mut out = String::new();
    open(
        &mut out,
        w,
        h,
        &format!("data-kind=\"per-task\" data-rows=\"{}\"", rows.len()),
        title,
    );
    w!(
        out,
        "<text x=\"{tx}\" y=\"13\" {FONT} font-weight=\"bold\" fill=\"{AXIS}\">tokens \
         (prompt + completion)</text>\
         <text x=\"{sx}\" y=\"13\" {FONT} font-weight=\"bold\" fill=\"{AXIS}\">seconds</text>"
    );
    for (i, r) in rows.iter().enumerate() {
        let y = head + i as f64 * row;
        let id: String = if r.id.chars().count() > 38 {
            let head: String = r.id.chars().take(37).collect();
            format!("{head}…")
        } else {
            r.id.clone()
        };
        let p = r.prompt as f64 / max_tokens * tw;
        let c = r.completion as f64 / max_tokens * tw;
        let s = r.seconds.max(0.0) / max_s * sw;
        w!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-family=\"monospace\" \
             font-size=\"11\" fill=\"{AXIS}\">{}<title>{}</title></text>\
             <rect class=\"mark\" x=\"{tx}\" y=\"{y:.1}\" width=\"{p:.1}\" height=\"12\" \
             fill=\"{MARK_COLOUR}\"><title>{} prompt tokens</title></rect>\
             <rect class=\"mark\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{c:.1}\" height=\"12\" \
             fill=\"{LIGHT}\"><title>{} completion tokens</title></rect>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-family=\"sans-serif\" font-size=\"10\" \
             fill=\"{AXIS}\">{}</text>\
             <rect class=\"mark\" x=\"{sx}\" y=\"{y:.1}\" width=\"{s:.1}\" height=\"12\" \
             fill=\"{TIME}\"><title>{} s</title></rect>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-family=\"sans-serif\" font-size=\"10\" \
             fill=\"{AXIS}\">{}</text>",
            lw - 8.0,
            y + 10.0,
            esc(&id),
            esc(&r.id),
            r.prompt,
            tx + p,
            r.completion,
            tx + p + c + 4.0,
            y + 10.0,
            thousands(r.prompt + r.completion),
            number((r.seconds * 10.0).round() / 10.0),
            sx + s + 4.0,
            y + 10.0,
            seconds(r.seconds)
        );
    }
    out.push_str("</svg>");
    out
}

/// A legend entry (HTML, below a plot).
pub(crate) fn swatch(colour: &str, name: &str) -> String {
    format!(
        "<span class=\"key\"><span class=\"sw\" style=\"background:{colour}\"></span>{}</span>",
        esc(name)
    )
}

pub(crate) fn light() -> &'static str {
    LIGHT
}

pub(crate) fn time() -> &'static str {
    TIME
}
