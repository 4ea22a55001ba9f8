//! `slurm batch`, `slurm sweep` and `slurm status`: a batch or a sweep as
//! Slurm job arrays, watched until their shards are merged.

use std::path::Path;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use super::{SlurmArgs, SlurmBatchArgs, SlurmStatusArgs, SlurmSweepArgs};
use patchwright::batch::sweep;
use patchwright::config::Overrides;
use patchwright::dataset::{Selection, Shard};
use patchwright::inputs::Sources;
use patchwright::models::ModelRef;
use patchwright::slurm::settings::is_slurm_key;
use patchwright::slurm::{self, Progress, Request, Slurm, SlurmSettings, Watched, Work};

/// Flags of `slurm batch|sweep` that the elements do not get: the command
/// sets `--out` and `--shard` (and a sweep's `--point`) per element.
const DROPPED_WITH_VALUE: &[&str] = &["--out", "--shards"];
const DROPPED: &[&str] = &["--detach"];

/// Flags of a batch that `env build` takes too (with their values).
const ENV_FLAGS: &[&str] = &[
    "--dataset",
    "--repos",
    "--specs",
    "--envs",
    "--python",
    "--wheels",
    "--bundle",
    "--sandbox",
];

/// `raw` (this process's arguments) split at `slurm batch|sweep`: the
/// global flags before it, the subcommand, and the user's arguments after.
fn split_command(raw: &[String]) -> Result<(Vec<String>, String, Vec<String>)> {
    let at = raw
        .iter()
        .enumerate()
        .skip(1)
        .position(|(i, a)| {
            a == "slurm" && raw.get(i + 1).is_some_and(|c| c == "batch" || c == "sweep")
        })
        .map(|p| p + 1)
        .context("the command line has no `slurm batch` or `slurm sweep`")?;
    Ok((
        raw[1..at].to_vec(),
        raw[at + 1].clone(),
        raw[at + 2..].to_vec(),
    ))
}

/// The flag name of a token (`--out=X` is `--out`), and whether its value
/// is in it.
fn flag(token: &str) -> (&str, bool) {
    match token.split_once('=') {
        Some((name, _)) if token.starts_with("--") => (name, true),
        _ => (token, false),
    }
}

/// Each element's command after the program: the global flags, `batch`
/// or `sweep`, and the user's arguments without the ones the command sets
/// per element (`--out`, `--shards`, `--detach`) and without `--set
/// slurm.*` (the elements' settings ignore them).
fn element_command(raw: &[String]) -> Result<Vec<String>> {
    let (global, command, rest) = split_command(raw)?;
    let mut out = global;
    out.push(command);
    let mut i = 0;
    while i < rest.len() {
        let token = &rest[i];
        let (name, inline) = flag(token);
        if DROPPED_WITH_VALUE.contains(&name) {
            i += if inline { 1 } else { 2 };
            continue;
        }
        if DROPPED.contains(&name) {
            i += 1;
            continue;
        }
        if name == "--set" {
            let (value, width) = match inline {
                true => (token.split_once('=').map_or("", |(_, v)| v), 1),
                false => (rest.get(i + 1).map_or("", String::as_str), 2),
            };
            if value.starts_with("slurm.") {
                i += width;
                continue;
            }
        }
        out.push(token.clone());
        i += 1;
    }
    Ok(out)
}

/// `env build` of the tasks `ids`, with the user's dataset, repository and
/// environment flags.
fn env_command(raw: &[String], ids: &[String]) -> Result<Vec<String>> {
    let (global, _, rest) = split_command(raw)?;
    let mut out = global;
    out.extend(["env".to_string(), "build".to_string()]);
    let mut i = 0;
    while i < rest.len() {
        let token = &rest[i];
        let (name, inline) = flag(token);
        let takes_next = !inline
            && token.starts_with('-')
            && rest.get(i + 1).is_some_and(|v| !v.starts_with('-'));
        if ENV_FLAGS.contains(&name) {
            out.push(token.clone());
            if takes_next {
                out.push(rest[i + 1].clone());
            }
        }
        i += if takes_next { 2 } else { 1 };
    }
    out.push("--instance-ids".into());
    out.extend(ids.iter().cloned());
    Ok(out)
}

fn raw_args() -> Result<Vec<String>> {
    std::env::args_os()
        .map(|a| {
            a.into_string().map_err(|a| {
                anyhow::anyhow!("argument {a:?} is not UTF-8: Slurm scripts need text")
            })
        })
        .collect()
}

/// The selected task ids (the file read once), and the same dealt into
/// `shards` shards as `--shard K/N` deals them ([`Selection::apply`]).
fn selected_ids(
    selection: &Selection,
    dataset: &Path,
    shards: usize,
) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    if shards == 0 {
        bail!("--shards must be at least 1");
    }
    let mut whole = selection.clone();
    whole.shard = None;
    let tasks = whole.apply(patchwright::dataset::load(dataset)?);
    let ids = |tasks: Vec<patchwright::dataset::Task>| -> Vec<String> {
        tasks.into_iter().map(|t| t.instance_id).collect()
    };
    let dealt = (1..=shards)
        .map(|k| {
            let deal = Selection {
                shard: Some(Shard {
                    index: k,
                    count: shards,
                }),
                ..Selection::default()
            };
            ids(deal.apply(tasks.clone()))
        })
        .collect();
    Ok((ids(tasks), dealt))
}

/// The flags `slurm` sets itself, refused when given.
fn refuse_own_flags(shard: bool, redo: bool) -> Result<()> {
    if shard {
        bail!("--shard: `slurm` makes the shards itself; give --shards N");
    }
    if redo {
        bail!(
            "--redo: an element that runs again would redo its finished tasks; \
             choose another --out to start over"
        );
    }
    Ok(())
}

/// What `slurm batch` and `slurm sweep` share: the run's request, checked
/// as far as this host can (the tasks, the settings, the model), then
/// submitted and watched.
struct Common<'a> {
    out: &'a Path,
    slurm: &'a SlurmArgs,
    settings: SlurmSettings,
    shards: Vec<Vec<String>>,
    command: Vec<String>,
    env_command: Vec<String>,
}

fn common<'a>(
    out: &'a Path,
    slurm: &'a SlurmArgs,
    select: &super::SelectArgs,
    repos: Option<&Path>,
    settings: &super::SettingsArgs,
    runner: &super::RunnerArgs,
) -> Result<(Common<'a>, Overrides, Sources)> {
    refuse_own_flags(select.shard.is_some(), runner.redo)?;
    let selection = select.selection()?;
    let sources = Sources::resolve(
        select.file.dataset.as_deref(),
        repos,
        runner.env.bundle.as_deref(),
    )?;
    runner.check(&sources.repos)?;
    let (all, shards) = selected_ids(&selection, &sources.dataset, slurm.shards)?;
    if all.is_empty() {
        bail!("no task of {} is selected", sources.dataset.display());
    }
    let mut overrides = settings.overrides();
    let (slurm_sets, run_sets) = overrides.set.iter().cloned().partition(is_slurm_key);
    overrides.set = run_sets;
    overrides.server_kind = runner.server_kind;
    overrides.sandbox = runner.env.sandbox.choice;
    let slurm_settings = SlurmSettings::resolve(settings.config.as_deref(), &slurm_sets)?;
    let raw = raw_args()?;
    Ok((
        Common {
            out,
            slurm,
            settings: slurm_settings,
            shards,
            command: element_command(&raw)?,
            env_command: env_command(&raw, &all)?,
        },
        overrides,
        sources,
    ))
}

/// `patchwright slurm batch`.
pub fn batch(args: SlurmBatchArgs) -> Result<i32> {
    let b = &args.batch;
    if b.list {
        bail!("--list: run `patchwright batch --list` instead");
    }
    let out = b.out.as_deref().context("--out is required")?;
    let (common, overrides, sources) = common(
        out,
        &args.slurm,
        &b.select,
        b.repos.as_deref(),
        &b.settings,
        &b.runner,
    )?;
    let settings = overrides.resolve()?;
    ModelRef::resolve(
        &sources.models_dir()?,
        &settings.model,
        b.runner.server.as_deref(),
    )?;
    run(common, Work::Batch)
}

/// `patchwright slurm sweep`.
pub fn sweep(args: SlurmSweepArgs) -> Result<i32> {
    let s = &args.sweep;
    if !s.points.is_empty() {
        bail!("--point: `slurm sweep` runs every point, one array each");
    }
    let (common, overrides, sources) = common(
        &s.out,
        &args.slurm,
        &s.select,
        s.repos.as_deref(),
        &s.settings,
        &s.runner,
    )?;
    let base = overrides.resolve()?;
    let prepared = sweep::prepare(&s.out, &base, s.settings.config.as_deref(), &s.grid)?;
    let models = sources.models_dir()?;
    for point in &prepared.settings {
        ModelRef::resolve(&models, &point.model, s.runner.server.as_deref())?;
    }
    run(
        common,
        Work::Sweep {
            file: &prepared.file,
            settings: &prepared.settings,
        },
    )
}

fn run(common: Common<'_>, work: Work<'_>) -> Result<i32> {
    let program = std::env::current_exe().context("cannot find this program's path")?;
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let request = Request {
        out: common.out,
        work,
        program: &program,
        cwd: &cwd,
        command: common.command,
        env_command: common.env_command,
        shards: common.shards,
        settings: &common.settings,
    };
    let lock = slurm::WatchLock::acquire(common.out)?;
    let (file, submission) = slurm::submit(&request, &Slurm, &lock)?;
    match &submission {
        slurm::Submission::Submitted(jobs) => eprintln!(
            "submitted {} array{} of {} shards: {}",
            jobs.len(),
            if jobs.len() == 1 { "" } else { "s" },
            file.shards.len(),
            jobs.join(", ")
        ),
        slurm::Submission::Running => {
            eprintln!(
                "{}'s last round is still queued: watching it",
                common.out.display()
            )
        }
        slurm::Submission::Finished => eprintln!("every shard is finished: merging"),
    }
    for array in &file.arrays {
        println!("script: {}", common.out.join(&array.script).display());
    }
    if common.slurm.detach {
        println!("status: patchwright slurm status {}", common.out.display());
        return Ok(0);
    }
    watch(common.out, false, &lock)
}

/// `patchwright slurm status`.
pub fn status(args: SlurmStatusArgs) -> Result<i32> {
    if !patchwright::record::slurm::path(&args.run).is_file() {
        bail!(
            "{} holds no Slurm run (no slurm/slurm.json): submit one with `patchwright slurm batch`",
            args.run.display()
        );
    }
    match slurm::WatchLock::try_acquire(&args.run)? {
        Some(lock) => watch(&args.run, args.detach, &lock),
        None if args.detach => {
            let p = slurm::look(&args.run, &Slurm)?;
            eprintln!("{} (another patchwright is watching it)", line(&p));
            Ok(0)
        }
        None => Err(slurm::SlurmError::Busy(args.run.clone()).into()),
    }
}

/// One line of progress.
fn line(p: &Progress) -> String {
    let mut s = format!("{}/{} tasks", p.done, p.tasks);
    if p.graded > 0 {
        s.push_str(&format!(", {} of {} graded resolved", p.resolved, p.graded));
    }
    s.push_str(&format!(
        "; elements: {} finished, {} running, {} pending, {} failed of {}",
        p.finished, p.running, p.pending, p.failed, p.elements
    ));
    if p.rounds > 1 {
        s.push_str(&format!("; round {}", p.rounds));
    }
    if !p.queue_known {
        s.push_str("; the queue could not be read");
    }
    s
}

fn watch(run: &Path, detach: bool, lock: &slurm::WatchLock) -> Result<i32> {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut last = String::new();
    let watched = slurm::watch(run, &Slurm, detach, lock, &mut |p| {
        let text = line(p);
        bar.set_length(p.tasks as u64);
        bar.set_position(p.done as u64);
        // A hidden bar (stderr not a terminal): a line when something changed.
        if bar.is_hidden() || detach {
            if text != last {
                eprintln!("{text}");
            }
        } else {
            bar.set_message(text.clone());
        }
        last = text;
    })?;
    bar.finish_and_clear();
    match watched {
        Watched::Running(_) => {
            println!("status: patchwright slurm status {}", run.display());
            Ok(0)
        }
        Watched::Ended {
            merged,
            unfinished,
            report,
            ..
        } => {
            for m in &merged {
                let name = if m.label.is_empty() { "run" } else { &m.label };
                eprintln!(
                    "{name}: {} tasks ({} patched, {} errors{})",
                    m.summary.tasks,
                    m.summary.patched,
                    m.summary.errors,
                    m.summary
                        .resolved
                        .map_or(String::new(), |r| format!(", {r} resolved"))
                );
            }
            if run.join("table.csv").is_file() && merged.iter().any(|m| !m.label.is_empty()) {
                println!("table: {}", run.join("table.csv").display());
            } else if let Some(m) = merged.first() {
                println!("predictions: {}", m.dir.join("predictions.jsonl").display());
                println!("run: {}", m.dir.join("run.json").display());
            }
            if let Some(report) = report {
                println!("report: {}", report.display());
            }
            if unfinished.is_empty() {
                return Ok(0);
            }
            for u in &unfinished {
                eprintln!(
                    "unfinished: {}shard {} ({} tasks left){}",
                    if u.label.is_empty() {
                        String::new()
                    } else {
                        format!("{} ", u.label)
                    },
                    u.shard,
                    u.tasks_left,
                    u.log
                        .as_ref()
                        .map_or(String::new(), |l| format!("; its log: {}", l.display()))
                );
            }
            eprintln!(
                "the retries ran out: read the logs, then `patchwright slurm batch` (or sweep) \
                 with the same flags submits the unfinished elements again"
            );
            Ok(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn elements_get_the_users_flags_without_the_ones_slurm_sets() -> Result<()> {
        let cases = [
            (
                "pw slurm batch --dataset t.jsonl --out /r --shards 4 --jobs 2",
                "batch --dataset t.jsonl --jobs 2",
            ),
            (
                "pw -v slurm batch --out=/r --detach --shards=4 --set slurm.partition=gpu --set fixer.candidates=2",
                "-v batch --set fixer.candidates=2",
            ),
            (
                "pw slurm sweep --grid temperature=0,0.4 --set=slurm.cpus=8 --config c.toml --out /s --shards 2",
                "sweep --grid temperature=0,0.4 --config c.toml",
            ),
        ];
        for (line, want) in cases {
            assert_eq!(element_command(&args(line))?, args(want), "{line}");
        }
        assert!(element_command(&args("pw batch --out /r")).is_err());
        Ok(())
    }

    #[test]
    fn the_env_job_gets_the_dataset_repository_and_environment_flags() -> Result<()> {
        let cases = [
            (
                "pw slurm batch --dataset t.jsonl --repos r --filter x -j 4 --evaluate --envs /e --out /o --shards 2",
                "env build --dataset t.jsonl --repos r --envs /e --instance-ids a b",
            ),
            (
                "pw -v slurm sweep --bundle=/b --grid temperature=0,1 --python /p1 --python /p2 --sandbox wasi",
                "-v env build --bundle=/b --python /p1 --python /p2 --sandbox wasi --instance-ids a b",
            ),
        ];
        for (line, want) in cases {
            assert_eq!(
                env_command(&args(line), &["a".into(), "b".into()])?,
                args(want),
                "{line}"
            );
        }
        Ok(())
    }
}
