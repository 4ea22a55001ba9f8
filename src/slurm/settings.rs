//! `[slurm]`: the resources of a run's array elements and how the watcher
//! resubmits them, from the configuration file's `[slurm]` table and
//! `--set slurm.KEY=VALUE` (a run's own settings ignore the table).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::SlurmError;
use crate::config::SetArg;

/// How many times the watcher resubmits the unfinished elements of a run
/// before it gives up and merges what finished: a preempted or timed-out
/// element resumes where it stopped, so a few rounds finish most runs; an
/// element that fails every time is a bug to read in its log, not to retry
/// forever.
pub const DEFAULT_RETRIES: usize = 2;

/// Seconds between two looks at the queue and the shards: `squeue` is a
/// call to the controller, which busy clusters ask users to make rarely.
pub const DEFAULT_POLL_S: u64 = 30;

/// The `[slurm]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlurmSettings {
    /// `--partition` of every job.
    pub partition: Option<String>,
    /// `--account` of every job.
    pub account: Option<String>,
    /// `--qos` of every job.
    pub qos: Option<String>,
    /// `--time` of an element, in Slurm's forms (`4:00:00`, `1-00:00:00`).
    pub time: Option<String>,
    /// `--cpus-per-task` of an element (and of the environment job).
    pub cpus: Option<u32>,
    /// `--mem` of an element (`24G`).
    pub mem: Option<String>,
    /// `--gres` of an array element (`gpu:1`); the environment job asks
    /// for none.
    pub gres: Option<String>,
    /// More sbatch options, each as on sbatch's command line
    /// (`--constraint=h100`), for every job.
    pub extra: Vec<String>,
    /// Resubmissions of the unfinished elements after a round ends.
    pub retries: usize,
    /// Seconds between looks at the queue and the shards.
    pub poll_s: u64,
}

impl Default for SlurmSettings {
    fn default() -> SlurmSettings {
        SlurmSettings {
            partition: None,
            account: None,
            qos: None,
            time: None,
            cpus: None,
            mem: None,
            gres: None,
            extra: Vec::new(),
            retries: DEFAULT_RETRIES,
            poll_s: DEFAULT_POLL_S,
        }
    }
}

/// Whether `--set KEY=VALUE` sets a `[slurm]` key (`slurm.partition`).
pub fn is_slurm_key(set: &SetArg) -> bool {
    set.key.starts_with("slurm.")
}

impl SlurmSettings {
    /// The defaults, then the `[slurm]` table of `config_file`, then each
    /// `--set slurm.KEY=VALUE` of `sets` in order (the others are a run's
    /// settings, not these).
    pub fn resolve(
        config_file: Option<&Path>,
        sets: &[SetArg],
    ) -> Result<SlurmSettings, SlurmError> {
        let mut table = toml::Table::new();
        let mut source = String::from("the defaults");
        if let Some(path) = config_file {
            let text = std::fs::read_to_string(path).map_err(|e| SlurmError::Io {
                action: "read",
                path: path.to_path_buf(),
                source: e,
            })?;
            let file: toml::Table = toml::from_str(&text).map_err(|e| {
                SlurmError::Settings(format!("configuration file {}: {e}", path.display()))
            })?;
            match file.get("slurm") {
                Some(toml::Value::Table(t)) => {
                    table = t.clone();
                    source = format!("configuration file {}", path.display());
                }
                Some(_) => {
                    return Err(SlurmError::Settings(format!(
                        "configuration file {}: `slurm` must be a table",
                        path.display()
                    )))
                }
                None => {}
            }
        }
        let settings = Self::from_table(table.clone())
            .map_err(|e| SlurmError::Settings(format!("{source}: [slurm] {e}")))?;
        let mut settings = settings;
        for set in sets.iter().filter(|s| is_slurm_key(s)) {
            let key = &set.key["slurm.".len()..];
            if key.contains('.') {
                return Err(SlurmError::Settings(format!(
                    "--set {set}: `{key}` is not a [slurm] key"
                )));
            }
            table.insert(key.to_string(), set.value.clone());
            settings = Self::from_table(table.clone())
                .map_err(|e| SlurmError::Settings(format!("--set {set}: {e}")))?;
        }
        Ok(settings)
    }

    fn from_table(table: toml::Table) -> Result<SlurmSettings, String> {
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                e.into_inner().to_string()
            } else {
                format!("`{path}`: {}", e.into_inner())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_file_then_each_set() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("c.toml");
        std::fs::write(
            &config,
            "[engine]\ncontext = 4096\n[slurm]\npartition = \"gpu\"\ngres = \"gpu:1\"\nretries = 5\n",
        )?;
        let sets: Vec<SetArg> = [
            "slurm.partition=debug",
            "fixer.candidates=2",
            "slurm.cpus=8",
        ]
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
        let s = SlurmSettings::resolve(Some(&config), &sets)?;
        assert_eq!(
            (
                s.partition.as_deref(),
                s.gres.as_deref(),
                s.cpus,
                s.retries,
                s.poll_s
            ),
            (Some("debug"), Some("gpu:1"), Some(8), 5, DEFAULT_POLL_S)
        );
        assert_eq!(SlurmSettings::resolve(None, &[])?, SlurmSettings::default());

        let cases = [
            ("slurm.partiton=gpu", "unknown field `partiton`"),
            ("slurm.cpus=many", "--set slurm.cpus=many: `cpus`"),
            ("slurm.a.b=1", "`a.b` is not a [slurm] key"),
        ];
        for (set, says) in cases {
            let err = SlurmSettings::resolve(None, &[set.parse()?])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(says), "{set}: {err}");
        }
        std::fs::write(&config, "[slurm]\ntime = 4\n")?;
        let err = SlurmSettings::resolve(Some(&config), &[])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains(&config.display().to_string()) && err.contains("`time`"),
            "{err}"
        );
        Ok(())
    }
}
