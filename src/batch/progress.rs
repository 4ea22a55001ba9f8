//! What a batch shows while it runs: on a terminal, a progress bar (tasks
//! done/total, ETA, resolved so far, generated tokens per second) with one
//! line per task in flight naming its stage; otherwise one plain log line
//! per finished task. Log lines printed through [`LogWriter`] go above the
//! bar instead of through it.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{Event, Sink, Status};
use crate::engine::scheduler::Meter;

/// How often the bar's figures (tokens per second) are refreshed.
const REFRESH: Duration = Duration::from_secs(1);

/// The window over which tokens per second are measured: long enough to
/// smooth a prompt evaluation, short enough to show a stall.
const RATE_WINDOW: Duration = Duration::from_secs(20);

/// The bars being drawn, if any, so log lines can be printed above them.
static ACTIVE: OnceLock<Mutex<Option<MultiProgress>>> = OnceLock::new();

fn active() -> &'static Mutex<Option<MultiProgress>> {
    ACTIVE.get_or_init(|| Mutex::new(None))
}

/// A `tracing` writer for stderr that suspends the progress bars while it
/// writes a line.
#[derive(Clone, Copy, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let guard = active().lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(multi) => multi.suspend(|| std::io::stderr().write_all(buf))?,
            None => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> Self::Writer {
        LogWriter
    }
}

/// The display of one batch.
pub struct Display {
    bar: ProgressBar,
    multi: Option<MultiProgress>,
    lines: Mutex<BTreeMap<String, ProgressBar>>,
    state: Mutex<State>,
    meter: Option<Meter>,
    label: String,
}

struct State {
    total: usize,
    done: usize,
    run_now: usize,
    done_now: usize,
    started: Instant,
    resolved: Option<(usize, usize)>,
    /// (when, generated tokens) samples for the rate.
    samples: Vec<(Instant, u64)>,
    /// The first sample.
    first: Option<(Instant, u64)>,
}

impl Display {
    /// A display for `total` tasks; `meter` reads the model's load (absent
    /// with a server). `label` prefixes every line (a sweep's grid point).
    pub fn new(total: usize, meter: Option<Meter>, label: &str) -> Arc<Display> {
        let terminal = std::io::stderr().is_terminal();
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::hidden());
        let multi = terminal.then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let bar = multi.add(bar.clone());
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix}{elapsed_precise} [{bar:30}] {pos}/{len} ETA {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(250));
            multi
        });
        if !label.is_empty() {
            bar.set_prefix(format!("{label} "));
        }
        if let Some(m) = &multi {
            *active().lock().unwrap_or_else(|e| e.into_inner()) = Some(m.clone());
        }
        let display = Arc::new(Display {
            bar,
            multi,
            lines: Mutex::new(BTreeMap::new()),
            state: Mutex::new(State {
                total,
                done: 0,
                run_now: total,
                done_now: 0,
                started: Instant::now(),
                resolved: None,
                samples: Vec::new(),
                first: meter
                    .as_ref()
                    .map(|m| (Instant::now(), m.load().generated_tokens)),
            }),
            meter,
            label: label.to_string(),
        });
        if display.multi.is_some() {
            let weak = Arc::downgrade(&display);
            std::thread::spawn(move || {
                while let Some(d) = weak.upgrade() {
                    if d.bar.is_finished() {
                        return;
                    }
                    d.refresh();
                    drop(d);
                    std::thread::sleep(REFRESH);
                }
            });
        }
        display
    }

    /// The sink to give [`super::Batch::run_all`].
    pub fn sink(self: &Arc<Self>) -> Sink {
        let me = Arc::clone(self);
        Arc::new(move |event| me.event(event))
    }

    fn event(&self, event: Event<'_>) {
        match event {
            Event::Planned { run, finished } => {
                let mut s = self.lock();
                s.done = finished;
                s.run_now = run;
                s.total = run + finished;
                self.bar.set_length(s.total as u64);
                self.bar.set_position(finished as u64);
                drop(s);
                if finished > 0 {
                    tracing::info!(
                        "{}{finished} tasks finished by an earlier run are kept; {run} to run",
                        self.prefix()
                    );
                }
            }
            Event::Started { id } => self.line(id, "starting"),
            Event::Stage { id, stage } => self.line(id, stage),
            Event::Grading { id } => self.line(id, "grading"),
            Event::Finished {
                result,
                resolved,
                summary,
            } => {
                if let Some(line) = self
                    .lines
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&result.instance_id)
                {
                    line.finish_and_clear();
                    if let Some(m) = &self.multi {
                        m.remove(&line);
                    }
                }
                let mut s = self.lock();
                s.done += 1;
                s.done_now += 1;
                if let Some(r) = summary.resolved {
                    s.resolved = Some((r, summary.tasks));
                }
                self.bar.set_position(s.done as u64);
                let text = self.figures(&mut s);
                drop(s);
                self.bar.set_message(text.clone());
                let outcome = match (&result.status, &result.error) {
                    (Status::Error, Some(e)) => format!("error: {e}"),
                    (status, _) => format!("{status:?}").to_lowercase(),
                };
                let graded = match resolved {
                    Some(true) => ", resolved",
                    Some(false) => ", not resolved",
                    None => "",
                };
                tracing::info!(
                    "{}{}: {outcome}{graded} in {:.0} s; {text}",
                    self.prefix(),
                    result.instance_id,
                    result.elapsed_s
                );
            }
        }
    }

    fn prefix(&self) -> String {
        if self.label.is_empty() {
            String::new()
        } else {
            format!("[{}] ", self.label)
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shows `stage` on task `id`'s line (terminal only).
    fn line(&self, id: &str, stage: &str) {
        let Some(multi) = &self.multi else {
            return;
        };
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let line = lines.entry(id.to_string()).or_insert_with(|| {
            let line = multi.add(ProgressBar::new_spinner());
            line.set_style(
                ProgressStyle::with_template("  {spinner} {prefix}: {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            line.set_prefix(id.to_string());
            line.enable_steady_tick(Duration::from_millis(250));
            line
        });
        line.set_message(stage.to_string());
    }

    fn refresh(&self) {
        let mut s = self.lock();
        let text = self.figures(&mut s);
        drop(s);
        self.bar.set_message(text);
    }

    /// "ETA …, resolved r/n, x tok/s".
    fn figures(&self, s: &mut State) -> String {
        let elapsed = s.started.elapsed();
        let left = s.total.saturating_sub(s.done);
        let eta = if s.done_now == 0 || left == 0 {
            if left == 0 {
                "0s".to_string()
            } else {
                "?".to_string()
            }
        } else {
            let per = elapsed.as_secs_f64() / s.done_now as f64;
            humantime::format_duration(Duration::from_secs((per * left as f64) as u64)).to_string()
        };
        let mut parts = vec![eta];
        if let Some((r, n)) = s.resolved {
            parts.push(format!("resolved so far {r}/{n}"));
        }
        if let Some(meter) = &self.meter {
            let now = Instant::now();
            let load = meter.load();
            let first = *s.first.get_or_insert((now, load.generated_tokens));
            s.samples.push((now, load.generated_tokens));
            s.samples
                .retain(|(t, _)| now.duration_since(*t) <= RATE_WINDOW);
            // Over the last window when the bar refreshes often enough to
            // fill it, else (plain lines) since the display began.
            let from = match s.samples.first() {
                Some(&(t, n)) if now.duration_since(t) >= RATE_WINDOW / 2 => (t, n),
                _ => first,
            };
            let dt = now.duration_since(from.0).as_secs_f64();
            if dt > 0.0 {
                parts.push(format!(
                    "{:.1} gen tok/s",
                    load.generated_tokens.saturating_sub(from.1) as f64 / dt
                ));
            }
            parts.push(format!("model busy {:.0}%", 100.0 * load.busy_fraction));
        }
        parts.join(", ")
    }

    /// Clears the bars.
    pub fn finish(&self) {
        for (_, line) in std::mem::take(&mut *self.lines.lock().unwrap_or_else(|e| e.into_inner()))
        {
            line.finish_and_clear();
        }
        self.bar.finish_and_clear();
        if let Some(m) = &self.multi {
            let _ = m.clear();
            *active().lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}
