//! `run.json`: what ran (command, versions, settings, model, selection),
//! when, and the summary over the run's tasks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::result::{EnvironmentUsed, Status, TaskErrorKind, TaskResult};
use super::RecordError;
use patchwright_engine_types::{Load, Placement};

/// `RUN_DIR/run.json`. Fields are in the order the file has always had
/// (alphabetical). `settings` and `identity` stay JSON: the settings'
/// type sits above this layer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The command line that wrote the file.
    #[serde(default)]
    pub command: Vec<String>,
    /// The tasks file.
    #[serde(default)]
    pub dataset: Option<DatasetInfo>,
    /// When the batch ended; `None` while it runs.
    /// The environments the run's tasks used, one per (repository,
    /// version, source, directory): built from a spec, given with
    /// `--environment`, or none and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environments: Vec<EnvironmentUsed>,
    #[serde(default)]
    pub finished_at: Option<String>,
    /// What a resumed run must share with this one (settings and model).
    #[serde(default)]
    pub identity: serde_json::Value,
    /// Tasks in flight at once.
    #[serde(default)]
    pub jobs: Option<usize>,
    /// The shards a merged run came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_from: Option<Vec<PathBuf>>,
    #[serde(default)]
    pub model: Option<ModelInfo>,
    /// What the model did over the batch (the scheduler's meter).
    #[serde(default)]
    pub model_load: Option<Load>,
    /// Where the in-process model's layers went (GPU layers of all, the
    /// devices) and its KV cache's type and budgets; `None` for a server,
    /// a replay, and runs written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// `--repos`.
    #[serde(default)]
    pub repos: Option<PathBuf>,
    /// When the run was resumed, in order.
    #[serde(default)]
    pub resumed_at: Vec<String>,
    /// The sandbox tier the run's commands ran in (resolved once by the
    /// command from the `sandbox` setting); runs written before tiers read
    /// as bubblewrap.
    #[serde(default)]
    pub sandbox_tier: patchwright_sandbox::TierKind,
    #[serde(default)]
    pub selection: Option<SelectionInfo>,
    /// The resolved settings.
    #[serde(default)]
    pub settings: serde_json::Value,
    #[serde(default)]
    pub started_at: Option<String>,
    /// Counts over the run's tasks; `None` while it runs.
    #[serde(default)]
    pub summary: Option<Summary>,
    /// Versions of what produced the run.
    #[serde(default)]
    pub versions: serde_json::Value,
}

/// The distinct environments of `results` (the first error of each kept).
pub fn environments<'a>(results: impl IntoIterator<Item = &'a TaskResult>) -> Vec<EnvironmentUsed> {
    let mut out: Vec<EnvironmentUsed> = Vec::new();
    for e in results.into_iter().filter_map(|r| r.environment.as_ref()) {
        let same = |o: &EnvironmentUsed| {
            (&o.repo, &o.version, o.source, &o.dir, &o.hash)
                == (&e.repo, &e.version, e.source, &e.dir, &e.hash)
        };
        if !out.iter().any(same) {
            out.push(e.clone());
        }
    }
    out
}

impl RunRecord {
    /// Reads `path`, which must hold a JSON object.
    pub fn read(path: &Path) -> Result<RunRecord, RecordError> {
        let value: serde_json::Value = super::read_json(path)?;
        if !value.is_object() {
            return Err(RecordError::Invalid {
                path: path.to_path_buf(),
                problem: "run.json is not a JSON object".into(),
            });
        }
        serde_json::from_value(value).map_err(|source| RecordError::Json {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Writes it to `path` atomically.
    pub fn write(&self, path: &Path) -> Result<(), RecordError> {
        super::write_json(path, self)
    }

    /// The instance ids selected into the run, in order.
    pub fn instance_ids(&self) -> &[String] {
        self.selection
            .as_ref()
            .map_or(&[], |s| s.instance_ids.as_slice())
    }

    /// `model_name_or_path` of the run's predictions.
    pub fn model_name(&self) -> Option<&str> {
        self.model.as_ref().map(|m| m.name_or_path.as_str())
    }
}

/// The tasks file a run read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DatasetInfo {
    pub path: PathBuf,
    #[serde(default)]
    pub sha256: String,
    /// Tasks in the file, before selection.
    #[serde(default)]
    pub tasks_in_file: usize,
}

/// Which tasks of the file a run selected.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SelectionInfo {
    /// `--filter`.
    #[serde(default)]
    pub filter: Option<String>,
    /// Every task of the run directory, in order.
    #[serde(default)]
    pub instance_ids: Vec<String>,
    /// `--shard`.
    #[serde(default)]
    pub shard: Option<ShardInfo>,
    /// `--slice`.
    #[serde(default)]
    pub slice: Option<SliceInfo>,
}

/// `--slice START:END` as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceInfo {
    pub start: usize,
    pub end: Option<usize>,
}

/// `--shard K/N` as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    pub index: usize,
    pub count: usize,
}

/// The dataset and selection parts of `run.json`, as one object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSelection {
    pub dataset: Option<DatasetInfo>,
    pub selection: Option<SelectionInfo>,
}

/// The model a run used: a GGUF file or a server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredModel")]
pub struct ModelInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// The manifest name, with a server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `model_name_or_path` of the predictions.
    pub name_or_path: String,
    /// The GGUF file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The server's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The file's size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// A model as files hold it: an object, or (older files) its name alone.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredModel {
    Object {
        #[serde(default)]
        architecture: Option<String>,
        #[serde(default)]
        name: Option<String>,
        name_or_path: String,
        #[serde(default)]
        path: Option<PathBuf>,
        #[serde(default)]
        server: Option<String>,
        #[serde(default)]
        sha256: Option<String>,
        #[serde(default)]
        size: Option<u64>,
    },
    Name(String),
}

impl From<StoredModel> for ModelInfo {
    fn from(m: StoredModel) -> ModelInfo {
        match m {
            StoredModel::Object {
                architecture,
                name,
                name_or_path,
                path,
                server,
                sha256,
                size,
            } => ModelInfo {
                architecture,
                name,
                name_or_path,
                path,
                server,
                sha256,
                size,
            },
            StoredModel::Name(name_or_path) => ModelInfo {
                name_or_path,
                ..ModelInfo::default()
            },
        }
    }
}

/// Counts over a batch's tasks (`summary` of `run.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    pub tasks: usize,
    pub patched: usize,
    pub no_patch: usize,
    pub errors: usize,
    pub error_ids: Vec<String>,
    /// The ids of the tasks in error, by the kind of their error.
    pub errors_by_kind: BTreeMap<TaskErrorKind, Vec<String>>,
    pub elapsed_s: f64,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Tasks resolved, when the batch grades them (`--evaluate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<usize>,
}

impl Summary {
    /// Counts `r` in.
    pub fn add(&mut self, r: &TaskResult) {
        self.tasks += 1;
        match r.status {
            Status::Patched => self.patched += 1,
            Status::NoPatch => self.no_patch += 1,
            Status::Error => {
                self.errors += 1;
                self.error_ids.push(r.instance_id.clone());
                let kind = r.error.as_ref().map_or(TaskErrorKind::Unknown, |e| e.kind);
                self.errors_by_kind
                    .entry(kind)
                    .or_default()
                    .push(r.instance_id.clone());
            }
        }
        self.prompt_tokens += r.prompt_tokens;
        self.completion_tokens += r.completion_tokens;
    }
}

#[cfg(test)]
mod placement_tests {
    use super::*;
    use patchwright_engine_types::{Device, FlashAttn, KvType};

    #[test]
    fn placement_is_recorded_and_older_files_read() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("run.json");
        std::fs::write(&path, r#"{"command": ["patchwright", "run"], "jobs": 2}"#)?;
        let old = RunRecord::read(&path)?;
        assert_eq!(old.placement, None);
        assert_eq!(old.jobs, Some(2));
        let placement = Placement {
            gpu_layers: 31,
            layers: 31,
            devices: vec![Device {
                name: "Vulkan0".into(),
                description: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
                memory_free: 1 << 34,
                memory_total: 1 << 35,
            }],
            kv_type: KvType::Q8_0,
            kv_bytes_per_token: 24_480,
            kv_budget: 2 << 30,
            scheduler_kv_budget: 8 << 30,
            flash_attn: FlashAttn::Auto,
        };
        let record = RunRecord {
            placement: Some(placement.clone()),
            ..old
        };
        record.write(&path)?;
        let text = std::fs::read_to_string(&path)?;
        assert!(text.contains(r#""gpu_layers": 31"#), "{text}");
        assert!(text.contains(r#""kv_type": "q8_0""#), "{text}");
        assert_eq!(RunRecord::read(&path)?.placement, Some(placement));
        Ok(())
    }
}
