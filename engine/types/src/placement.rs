//! Where a model runs, as settings (`[engine] gpu_layers`, `kv_type`,
//! `kv_budget`, `flash_attn`, `split_mode`) and as recorded once it is
//! loaded ([`Placement`]). The engine works them out; these are the data.

use serde::{Deserialize, Serialize};

/// How many of the model's layers go to the GPU (`[engine] gpu_layers`):
/// `"all"`, `"none"`, a number, or `"auto"` (as many as fit in the
/// device's free memory beside the KV cache; none on a build without a GPU
/// backend, or when no GPU is found).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuLayers {
    /// As many as fit (the engine's `placement::plan_layers`).
    #[default]
    Auto,
    /// Every layer, the output layer included.
    All,
    /// None: the CPU only.
    None,
    /// This many layers (the output layer counts as the last one).
    Count(u32),
}

impl Serialize for GpuLayers {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            GpuLayers::Auto => s.serialize_str("auto"),
            GpuLayers::All => s.serialize_str("all"),
            GpuLayers::None => s.serialize_str("none"),
            GpuLayers::Count(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for GpuLayers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match WordOrNumber::deserialize(d)? {
            WordOrNumber::Number(n) => u32::try_from(n)
                .map(GpuLayers::Count)
                .map_err(|_| serde::de::Error::custom(format!("gpu_layers {n} is too large"))),
            WordOrNumber::Word(w) => match w.as_str() {
                "auto" => Ok(GpuLayers::Auto),
                "all" => Ok(GpuLayers::All),
                "none" => Ok(GpuLayers::None),
                other => Err(serde::de::Error::custom(format!(
                    "gpu_layers = {other:?}: expected \"auto\", \"all\", \"none\" or a number of layers"
                ))),
            },
            WordOrNumber::Bool(b) => Err(serde::de::Error::custom(format!(
                "gpu_layers = {b}: expected \"auto\", \"all\", \"none\" or a number of layers"
            ))),
        }
    }
}

/// A setting written as a word, a number or a boolean.
#[derive(Deserialize)]
#[serde(untagged)]
enum WordOrNumber {
    Number(u64),
    Bool(bool),
    Word(String),
}

/// How layers are spread over several GPUs (`[engine] split_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SplitMode {
    /// Everything on `main_gpu`.
    None,
    /// Whole layers per GPU (llama.cpp's default).
    #[default]
    Layer,
    /// Rows of each weight matrix across GPUs.
    Row,
}

/// Flash attention (`[engine] flash_attn`): `"auto"` (llama.cpp decides
/// per device), `"on"`/`true`, `"off"`/`false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlashAttn {
    /// llama.cpp turns it on where the device supports it.
    #[default]
    Auto,
    /// Always (required for a quantised V cache).
    On,
    /// Never.
    Off,
}

impl Serialize for FlashAttn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            FlashAttn::Auto => "auto",
            FlashAttn::On => "on",
            FlashAttn::Off => "off",
        })
    }
}

impl<'de> Deserialize<'de> for FlashAttn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bad = |v: String| {
            serde::de::Error::custom(format!(
                "flash_attn = {v}: expected \"auto\", \"on\", \"off\", true or false"
            ))
        };
        match WordOrNumber::deserialize(d)? {
            WordOrNumber::Bool(true) => Ok(FlashAttn::On),
            WordOrNumber::Bool(false) => Ok(FlashAttn::Off),
            WordOrNumber::Word(w) => match w.as_str() {
                "auto" => Ok(FlashAttn::Auto),
                "on" => Ok(FlashAttn::On),
                "off" => Ok(FlashAttn::Off),
                _ => Err(bad(format!("{w:?}"))),
            },
            WordOrNumber::Number(n) => Err(bad(n.to_string())),
        }
    }
}

/// The KV cache's element type (`[engine] kv_type`), for keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvType {
    /// 16-bit floats (llama.cpp's default).
    #[default]
    F16,
    /// 8-bit blocks: half the memory, quality close to f16.
    Q8_0,
    /// 4-bit blocks: a quarter of the memory, some loss.
    Q4_0,
}

impl KvType {
    /// Bytes that `elements` elements take (q8_0 and q4_0 store blocks of
    /// 32 elements in 34 and 18 bytes).
    pub fn bytes(self, elements: u64) -> u64 {
        match self {
            KvType::F16 => elements * 2,
            KvType::Q8_0 => elements.div_ceil(32) * 34,
            KvType::Q4_0 => elements.div_ceil(32) * 18,
        }
    }

    /// The name as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }
}

/// Bytes of KV cache the engine may allocate (`[engine] kv_budget`): a
/// number of bytes, or `"auto"` (`KV_BUDGET_BYTES` and
/// `SCHEDULER_KV_BUDGET_BYTES` on the CPU; `GPU_KV_FRACTION` of the
/// GPU memory left after the offloaded weights when layers are offloaded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvBudget {
    /// Derived from where the layers are (the engine's `placement::kv_budgets`).
    #[default]
    Auto,
    /// This many bytes, for a conversation's context and the scheduler.
    Bytes(u64),
}

impl Serialize for KvBudget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            KvBudget::Auto => s.serialize_str("auto"),
            KvBudget::Bytes(n) => s.serialize_u64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for KvBudget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match WordOrNumber::deserialize(d)? {
            WordOrNumber::Number(n) => Ok(KvBudget::Bytes(n)),
            WordOrNumber::Word(w) if w == "auto" => Ok(KvBudget::Auto),
            WordOrNumber::Word(w) => Err(serde::de::Error::custom(format!(
                "kv_budget = {w:?}: expected \"auto\" or a number of bytes"
            ))),
            WordOrNumber::Bool(b) => Err(serde::de::Error::custom(format!(
                "kv_budget = {b}: expected \"auto\" or a number of bytes"
            ))),
        }
    }
}

/// A device llama.cpp can run on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// ggml's name (`CUDA0`, `Vulkan0`, `CPU`).
    pub name: String,
    /// What the driver calls it (`NVIDIA GeForce RTX 4090`).
    #[serde(default)]
    pub description: String,
    /// Free memory in bytes when the model was loaded.
    #[serde(default)]
    pub memory_free: u64,
    /// Total memory in bytes.
    #[serde(default)]
    pub memory_total: u64,
}

/// Where a loaded model's layers went and what KV cache it may use: shown
/// by `models list` and recorded in `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// Layers offloaded to the GPUs, the output layer counting as one (as
    /// llama.cpp counts them).
    pub gpu_layers: u32,
    /// All layers: the model's blocks plus the output layer.
    pub layers: u32,
    /// The GPUs the offloaded layers went to; empty when none were.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// The KV cache's element type.
    pub kv_type: KvType,
    /// Bytes of KV cache per token of context.
    pub kv_bytes_per_token: u64,
    /// Bytes of KV cache a conversation's context may take (`context = 0`
    /// is cut to it).
    pub kv_budget: u64,
    /// Bytes of KV cache the scheduler may take over all its streams.
    pub scheduler_kv_budget: u64,
    /// Flash attention as asked.
    pub flash_attn: FlashAttn,
}
