//! The sbatch scripts a Slurm run writes into `RUN_DIR/slurm/`: pure
//! functions from the plan to the text, so that what a user reads (and
//! can submit again by hand) is exactly what was submitted.

use std::path::Path;

use super::settings::SlurmSettings;
use super::SlurmError;

/// What every job of a run shares.
pub struct Job<'a> {
    pub name: &'a str,
    /// Where its log goes (`%A_%a.log` or `env-%j.log` inside it).
    pub log_dir: &'a Path,
    /// The working directory: the submitting command's, where its
    /// relative paths point.
    pub cwd: &'a Path,
    pub settings: &'a SlurmSettings,
    /// The patchwright it runs.
    pub program: &'a Path,
}

/// An array script: element `K-1` runs shard K.
pub struct ArrayScript<'a> {
    pub job: Job<'a>,
    /// The comment at the top: what the elements run.
    pub about: &'a str,
    /// The element's command after the program, before its own flags.
    pub command: &'a [String],
    /// Flags that come after `--shard` and `--out` (a sweep's `--point`).
    pub element_flags: &'a [String],
    /// Each shard's run directory, shard 1 first.
    pub shard_dirs: &'a [std::path::PathBuf],
}

/// The environment job's script: builds what the tasks need, once, before
/// the elements start.
pub struct EnvScript<'a> {
    pub job: Job<'a>,
    /// `env build ...`, after the program.
    pub command: &'a [String],
}

/// `text` as one word of a POSIX shell: as it is when it is plain,
/// else in single quotes.
pub fn quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%^".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// An `#SBATCH` line: sbatch reads these lines itself, word by word, so a
/// value with white space or quotes cannot be written safely.
fn directive(out: &mut String, flag: &str, value: &str) -> Result<(), SlurmError> {
    if value.is_empty()
        || value
            .chars()
            .any(|c| c.is_whitespace() || "'\"\\#".contains(c))
    {
        return Err(SlurmError::Invalid(format!(
            "`{flag}={value}` cannot be an #SBATCH line (white space, quotes or `#`): \
             choose a path or value without them"
        )));
    }
    out.push_str(&format!("#SBATCH {flag}={value}\n"));
    Ok(())
}

fn path_text(path: &Path) -> Result<&str, SlurmError> {
    path.to_str()
        .ok_or_else(|| SlurmError::Invalid(format!("{} is not UTF-8", path.display())))
}

/// The directives every job of a run shares, its log `log` (in the job's
/// log directory); `gres` only for elements.
fn directives(job: &Job<'_>, log: &str, gres: bool) -> Result<String, SlurmError> {
    let settings = job.settings;
    let mut out = String::new();
    directive(&mut out, "--job-name", job.name)?;
    directive(&mut out, "--output", path_text(&job.log_dir.join(log))?)?;
    directive(&mut out, "--chdir", path_text(job.cwd)?)?;
    // Preempted or failed nodes requeue the element; it resumes its shard.
    out.push_str("#SBATCH --requeue\n");
    // A requeued element appends to its log instead of replacing it.
    out.push_str("#SBATCH --open-mode=append\n");
    let optional = [
        ("--partition", settings.partition.clone()),
        ("--account", settings.account.clone()),
        ("--qos", settings.qos.clone()),
        ("--time", settings.time.clone()),
        ("--cpus-per-task", settings.cpus.map(|c| c.to_string())),
        ("--mem", settings.mem.clone()),
        ("--gres", settings.gres.clone().filter(|_| gres)),
    ];
    for (flag, value) in optional {
        if let Some(value) = value {
            directive(&mut out, flag, &value)?;
        }
    }
    for extra in &settings.extra {
        if extra.contains('\n') || !extra.starts_with('-') {
            return Err(SlurmError::Invalid(format!(
                "slurm.extra: `{extra}` is not one sbatch option (as `--constraint=h100`)"
            )));
        }
        out.push_str(&format!("#SBATCH {extra}\n"));
    }
    Ok(out)
}

fn words(program: &Path, args: &[String]) -> Result<String, SlurmError> {
    let mut line = quote(path_text(program)?);
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    Ok(line)
}

impl ArrayScript<'_> {
    /// The script's text.
    pub fn render(&self) -> Result<String, SlurmError> {
        let n = self.shard_dirs.len();
        let mut out = String::from("#!/bin/bash\n");
        for line in self.about.lines() {
            out.push_str(&format!("# {line}\n").replace("# \n", "#\n"));
        }
        out.push_str(&format!(
            "# Element K-1 of the array runs shard K/{n}; submitted with sbatch --array=0-{}\n\
             # (or the unfinished elements' numbers). A finished task is never run again:\n\
             # an element that runs a second time resumes its shard.\n",
            n.saturating_sub(1)
        ));
        out.push_str(&directives(&self.job, "%A_%a.log", true)?);
        out.push_str("set -euo pipefail\n");
        out.push_str(
            "case \"${SLURM_ARRAY_TASK_ID:?submit this script with sbatch --array}\" in\n",
        );
        for (i, dir) in self.shard_dirs.iter().enumerate() {
            out.push_str(&format!(
                "  {i}) shard={}/{n} out={} ;;\n",
                i + 1,
                quote(path_text(dir)?)
            ));
        }
        out.push_str(&format!(
            "  *) echo \"no element $SLURM_ARRAY_TASK_ID in this array (0-{})\" >&2; exit 2 ;;\nesac\n",
            n.saturating_sub(1)
        ));
        let mut line = words(self.job.program, self.command)?;
        line.push_str(" --shard \"$shard\" --out \"$out\"");
        for f in self.element_flags {
            line.push(' ');
            line.push_str(&quote(f));
        }
        out.push_str(&format!("exec {line}\n"));
        Ok(out)
    }
}

impl EnvScript<'_> {
    /// The script's text. `env build` exits 1 when some environment could
    /// not be built: the tasks that need it record why, so the elements
    /// still start; any other failure holds them back.
    pub fn render(&self) -> Result<String, SlurmError> {
        let mut out = String::from(
            "#!/bin/bash\n\
             # The environments the run's tasks need, built once into the directory every\n\
             # element reads, before the elements start (they depend on this job: afterok).\n",
        );
        out.push_str(&directives(&self.job, "env-%j.log", false)?);
        out.push_str(&format!(
            "status=0\n{} || status=$?\n\
             if [ \"$status\" -eq 1 ]; then\n  \
             echo \"some environments could not be built; their tasks will say why\" >&2\n  \
             exit 0\nfi\nexit \"$status\"\n",
            words(self.job.program, self.command)?
        ));
        Ok(out)
    }
}

/// sbatch's `--array` value for these element numbers: ranges where they
/// run on (`0-3,5,7-8`).
pub fn array_spec(indices: &[usize]) -> String {
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn words_are_quoted_only_when_needed() {
        let cases = [
            ("datasets/demo/tasks.jsonl", "datasets/demo/tasks.jsonl"),
            ("fixer.temperature=0.4", "fixer.temperature=0.4"),
            ("a b", "'a b'"),
            ("it's", "'it'\\''s'"),
            ("$HOME", "'$HOME'"),
            ("", "''"),
            ("demo__(cachekit|textkit)", "'demo__(cachekit|textkit)'"),
        ];
        for (text, quoted) in cases {
            assert_eq!(quote(text), quoted, "{text}");
        }
    }

    #[test]
    fn array_specs_are_ranges() {
        let cases: [(&[usize], &str); 5] = [
            (&[0, 1, 2, 3], "0-3"),
            (&[3], "3"),
            (&[5, 0, 7, 8, 1], "0-1,5,7-8"),
            (&[2, 2, 4], "2,4"),
            (&[], ""),
        ];
        for (indices, spec) in cases {
            assert_eq!(array_spec(indices), spec, "{indices:?}");
        }
    }

    fn settings() -> SlurmSettings {
        SlurmSettings {
            partition: Some("gpu".into()),
            time: Some("4:00:00".into()),
            cpus: Some(8),
            mem: Some("32G".into()),
            gres: Some("gpu:1".into()),
            extra: vec!["--constraint=h100".into()],
            ..SlurmSettings::default()
        }
    }

    #[test]
    fn an_array_script_runs_one_shard_per_element() -> Result<(), SlurmError> {
        let command: Vec<String> = [
            "batch",
            "--dataset",
            "lite.jsonl",
            "--filter",
            "django|sympy",
            "--jobs",
            "4",
        ]
        .map(String::from)
        .to_vec();
        let dirs: Vec<PathBuf> = (1..=2)
            .map(|k| PathBuf::from(format!("/runs/lite/slurm/shards/{k}-of-2")))
            .collect();
        let script = ArrayScript {
            job: Job {
                name: "patchwright-lite",
                log_dir: Path::new("/runs/lite/slurm/logs"),
                cwd: Path::new("/home/me"),
                settings: &settings(),
                program: Path::new("/opt/patchwright/bin/patchwright"),
            },
            about: "`patchwright slurm batch` over /runs/lite: one `batch` per shard.",
            command: &command,
            element_flags: &[],
            shard_dirs: &dirs,
        }
        .render()?;
        assert_eq!(
            script,
            "#!/bin/bash\n\
             # `patchwright slurm batch` over /runs/lite: one `batch` per shard.\n\
             # Element K-1 of the array runs shard K/2; submitted with sbatch --array=0-1\n\
             # (or the unfinished elements' numbers). A finished task is never run again:\n\
             # an element that runs a second time resumes its shard.\n\
             #SBATCH --job-name=patchwright-lite\n\
             #SBATCH --output=/runs/lite/slurm/logs/%A_%a.log\n\
             #SBATCH --chdir=/home/me\n\
             #SBATCH --requeue\n\
             #SBATCH --open-mode=append\n\
             #SBATCH --partition=gpu\n\
             #SBATCH --time=4:00:00\n\
             #SBATCH --cpus-per-task=8\n\
             #SBATCH --mem=32G\n\
             #SBATCH --gres=gpu:1\n\
             #SBATCH --constraint=h100\n\
             set -euo pipefail\n\
             case \"${SLURM_ARRAY_TASK_ID:?submit this script with sbatch --array}\" in\n  \
             0) shard=1/2 out=/runs/lite/slurm/shards/1-of-2 ;;\n  \
             1) shard=2/2 out=/runs/lite/slurm/shards/2-of-2 ;;\n  \
             *) echo \"no element $SLURM_ARRAY_TASK_ID in this array (0-1)\" >&2; exit 2 ;;\n\
             esac\n\
             exec /opt/patchwright/bin/patchwright batch --dataset lite.jsonl --filter 'django|sympy' \
             --jobs 4 --shard \"$shard\" --out \"$out\"\n"
        );
        Ok(())
    }

    #[test]
    fn the_env_script_asks_for_no_gpu_and_lets_failed_environments_through(
    ) -> Result<(), SlurmError> {
        let command: Vec<String> = ["env", "build", "--instance-ids", "a__b-1"]
            .map(String::from)
            .to_vec();
        let script = EnvScript {
            job: Job {
                name: "patchwright-env-lite",
                log_dir: Path::new("/runs/lite/slurm/logs"),
                cwd: Path::new("/home/me"),
                settings: &settings(),
                program: Path::new("/opt/pw"),
            },
            command: &command,
        }
        .render()?;
        assert!(!script.contains("--gres"), "{script}");
        assert!(script.contains("#SBATCH --output=/runs/lite/slurm/logs/env-%j.log\n"));
        assert!(script.contains(
            "status=0\n/opt/pw env build --instance-ids a__b-1 || status=$?\nif [ \"$status\" -eq 1 ]; then\n"
        ), "{script}");
        Ok(())
    }

    #[test]
    fn values_an_sbatch_line_cannot_hold_are_refused() {
        let bad = SlurmSettings {
            partition: Some("gpu a100".into()),
            ..SlurmSettings::default()
        };
        let dirs = [PathBuf::from("/r/1")];
        let script = |settings: &SlurmSettings, cwd: &str| {
            ArrayScript {
                job: Job {
                    name: "j",
                    log_dir: Path::new("/r/logs"),
                    cwd: Path::new(cwd),
                    settings,
                    program: Path::new("/pw"),
                },
                about: "",
                command: &[],
                element_flags: &[],
                shard_dirs: &dirs,
            }
            .render()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
        };
        assert!(script(&bad, "/home").contains("`--partition=gpu a100`"));
        assert!(script(&SlurmSettings::default(), "/my home").contains("`--chdir=/my home`"));
        let extra = SlurmSettings {
            extra: vec!["constraint=h100".into()],
            ..SlurmSettings::default()
        };
        assert!(script(&extra, "/home").contains("is not one sbatch option"));
    }
}
