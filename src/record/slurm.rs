//! `RUN_DIR/slurm/slurm.json`: a run submitted to Slurm as job arrays
//! ([`SlurmFile`]): what each array element runs, and every submission
//! made for it. Planning, submitting and watching are `slurm`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::RecordError;

/// The file's path under a run (or sweep) directory.
pub fn path(run: &Path) -> PathBuf {
    run.join("slurm").join("slurm.json")
}

/// `RUN_DIR/slurm/slurm.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmFile {
    /// `batch` or `sweep`.
    pub kind: String,
    /// Each element's command after the program: the user's `batch` or
    /// `sweep` arguments without the ones the elements set themselves
    /// (a later submission of another command is refused).
    pub command: Vec<String>,
    /// The task ids of each shard, in the order the shard runs them
    /// (shard K is `shards[K-1]`).
    pub shards: Vec<Vec<String>>,
    /// One array per grid point (a batch: one array); its element `K-1`
    /// runs shard K.
    pub arrays: Vec<ArrayPlan>,
    /// The environment job's script, relative to the run directory.
    #[serde(default)]
    pub env_script: Option<PathBuf>,
    /// The `[slurm]` settings the run was submitted with (`slurm`'s type).
    #[serde(default)]
    pub settings: serde_json::Value,
    /// Every submission, oldest first.
    #[serde(default)]
    pub rounds: Vec<Round>,
    /// When the shards were merged for the last time.
    #[serde(default)]
    pub merged_at: Option<String>,
}

/// One job array of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArrayPlan {
    /// The grid point it runs (its number in sweep.json), for a sweep.
    #[serde(default)]
    pub point: Option<usize>,
    /// The point's label, for a sweep.
    #[serde(default)]
    pub label: String,
    /// The sbatch script, relative to the run directory.
    pub script: PathBuf,
    /// The merged run directory, relative to the run directory (empty: the
    /// run directory itself).
    pub merged: PathBuf,
    /// Where shard K's element writes its run directory, relative to the
    /// run directory, with `{K}` for the shard.
    pub shard_dir: String,
    /// In the first round, element K starts after element K of this array
    /// finished (an earlier point whose shared stages this one reuses).
    #[serde(default)]
    pub after: Option<usize>,
}

impl ArrayPlan {
    /// Shard `k`'s run directory, relative to the run directory.
    pub fn shard_dir(&self, k: usize) -> PathBuf {
        PathBuf::from(self.shard_dir.replace("{K}", &k.to_string()))
    }
}

/// One submission: the environment job (the first round's) and the
/// arrays of the elements still unfinished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    pub submitted_at: String,
    /// A resubmission made by the watcher (not by a command the user ran).
    #[serde(default)]
    pub retry: bool,
    #[serde(default)]
    pub env_job: Option<String>,
    pub jobs: Vec<Submitted>,
}

/// One array job of a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Submitted {
    /// Its index in [`SlurmFile::arrays`].
    pub array: usize,
    /// Slurm's job id of the array.
    pub job: String,
    /// The shards (K, from 1) of its elements; element K-1 runs shard K.
    pub shards: Vec<usize>,
}

impl SlurmFile {
    /// Reads `RUN_DIR/slurm/slurm.json`.
    pub fn read(run: &Path) -> Result<SlurmFile, RecordError> {
        super::read_json(&path(run))
    }

    /// [`SlurmFile::read`], with `None` when the run has no such file.
    pub fn read_if_exists(run: &Path) -> Result<Option<SlurmFile>, RecordError> {
        super::read_json_if_exists(&path(run))
    }

    /// Writes it atomically.
    pub fn write(&self, run: &Path) -> Result<(), RecordError> {
        super::write_json(&path(run), self)
    }
}
