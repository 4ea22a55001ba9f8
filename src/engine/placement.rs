//! Where a model runs: the GPUs of this build, how many layers go to
//! them (`[engine] gpu_layers`), the KV cache's element type and budget,
//! and the KV bytes per token from the GGUF's own attention keys. Worked
//! out once, before the model is loaded ([`plan`]), and recorded as a
//! [`Placement`] (`models list`, `run.json`).

use std::path::Path;

use llama_cpp_2::context::params::KvCacheType;

use serde::{Deserialize, Serialize};

use super::{backend, EngineError, EngineSettings};
use crate::models::gguf::{self, KvShape};

/// Memory the KV cache of one conversation may take when the context size is
/// left to the model (`context = 0`) and the model runs on the CPU: 2 GiB
/// keeps a 32k-token context of a 0.5–1.5B model whole and stops a
/// 128k-context 7B model from asking for tens of GiB on a 24 GiB machine.
pub const KV_BUDGET_BYTES: u64 = 2 << 30;

/// Memory the scheduler's KV cache may take on the CPU: a stream of the
/// context's length per sequence (tasks in flight × candidates). 8 GiB holds
/// 4 × 4 streams of 32k tokens of a 0.5B model, and leaves most of a 24 GiB
/// machine to the model and the tests.
pub const SCHEDULER_KV_BUDGET_BYTES: u64 = 8 << 30;

/// Share of a GPU's free memory, after the offloaded weights and
/// [`GPU_HEADROOM_BYTES`], that `kv_budget = "auto"` gives the KV cache: the
/// rest covers what the estimate of the weights misses (the output layer,
/// per-context buffers that grow with `ubatch`).
pub const GPU_KV_FRACTION: f64 = 0.9;

/// GPU memory kept free for llama.cpp's compute buffers (one `ubatch` of
/// activations: ~0.3 GiB for a 7B model at ubatch 512, ~0.8 GiB for a 32B)
/// and the driver, when choosing `gpu_layers = "auto"` and the KV budget.
pub const GPU_HEADROOM_BYTES: u64 = 1 << 30;

/// Context assumed when `gpu_layers = "auto"` sizes the layers and
/// `context = 0` (the model's own): the KV cache of this many tokens is kept
/// free beside the weights.
pub const AUTO_LAYERS_CONTEXT: u64 = 8192;

/// `n_gpu_layers` that asks llama.cpp for every layer (it clamps to the
/// model's count; the output layer counts as one more).
const ALL_LAYERS: u32 = 9999;

/// Bytes of KV cache per token, keys and values of every layer, in
/// `kv_type` (see [`KvShape`]).
pub fn kv_bytes_per_token(shape: &KvShape, kv_type: KvType) -> u64 {
    kv_type.bytes(shape.k_elements) + kv_type.bytes(shape.v_elements)
}

/// The trained context, cut to what `budget` bytes of KV cache hold.
pub fn context_within_budget(trained: u32, per_token: u64, budget: u64) -> u32 {
    match budget.checked_div(per_token) {
        Some(fits) => trained.min(u32::try_from(fits).unwrap_or(u32::MAX)).max(1),
        None => trained,
    }
}

/// How many of the model's layers go to the GPU (`[engine] gpu_layers`):
/// `"all"`, `"none"`, a number, or `"auto"` (as many as fit in the
/// device's free memory beside the KV cache; none on a build without a GPU
/// backend, or when no GPU is found).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuLayers {
    /// As many as fit ([`plan_layers`]).
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

impl FlashAttn {
    /// llama.cpp's `llama_flash_attn_type` value.
    pub(crate) fn llama(self) -> i32 {
        match self {
            FlashAttn::Auto => -1,
            FlashAttn::Off => 0,
            FlashAttn::On => 1,
        }
    }
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

    pub(crate) fn llama(self) -> KvCacheType {
        match self {
            KvType::F16 => KvCacheType::F16,
            KvType::Q8_0 => KvCacheType::Q8_0,
            KvType::Q4_0 => KvCacheType::Q4_0,
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
/// number of bytes, or `"auto"` ([`KV_BUDGET_BYTES`] and
/// [`SCHEDULER_KV_BUDGET_BYTES`] on the CPU; [`GPU_KV_FRACTION`] of the
/// GPU memory left after the offloaded weights when layers are offloaded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvBudget {
    /// Derived from where the layers are ([`kv_budgets`]).
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

/// The GPUs of this build (ggml's backend devices of type GPU, integrated
/// GPU or accelerator), in llama.cpp's order; empty on a CPU-only build.
pub fn gpus() -> Result<Vec<Device>, EngineError> {
    backend()?;
    use llama_cpp_2::LlamaBackendDeviceType as T;
    Ok(llama_cpp_2::list_llama_ggml_backend_devices()
        .into_iter()
        .filter(|d| matches!(d.device_type, T::Gpu | T::IntegratedGpu | T::Accelerator))
        .map(|d| Device {
            name: d.name,
            description: d.description,
            memory_free: d.memory_free as u64,
            memory_total: d.memory_total as u64,
        })
        .collect())
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

/// Layers of `total` (blocks + output) to offload for `asked`, given
/// `gpu_free` bytes free over the GPUs that will take layers (`None`
/// without any GPU), a file of `model_bytes` and `kv_per_token` bytes of KV
/// cache for `context` tokens. `"auto"` keeps [`GPU_HEADROOM_BYTES`] and
/// the KV cache of `context` tokens free and fills the rest with layers,
/// each taken as `model_bytes / total`.
pub fn plan_layers(
    asked: GpuLayers,
    total: u32,
    gpu_free: Option<u64>,
    model_bytes: u64,
    kv_per_token: u64,
    context: u64,
) -> u32 {
    let Some(free) = gpu_free else {
        return 0;
    };
    match asked {
        GpuLayers::None => 0,
        GpuLayers::All => total,
        GpuLayers::Count(n) => n.min(total),
        GpuLayers::Auto => {
            let per_layer = model_bytes.div_ceil(u64::from(total.max(1))).max(1);
            let room = free
                .saturating_sub(GPU_HEADROOM_BYTES)
                .saturating_sub(kv_per_token * context);
            u32::try_from(room / per_layer)
                .unwrap_or(u32::MAX)
                .min(total)
        }
    }
}

/// The KV budgets (a conversation's, the scheduler's) for `asked`, with
/// `offloaded` of `total` layers on GPUs that had `gpu_free` bytes free,
/// for a file of `model_bytes`. On the CPU, and with `"auto"` when nothing
/// is offloaded: [`KV_BUDGET_BYTES`] and [`SCHEDULER_KV_BUDGET_BYTES`].
/// With layers offloaded, `"auto"` gives both [`GPU_KV_FRACTION`] of the
/// GPU memory left after the weights placed there and
/// [`GPU_HEADROOM_BYTES`], scaled up by `total / offloaded` (the cache of
/// the layers left on the CPU lives in RAM) but by at most
/// [`SCHEDULER_KV_BUDGET_BYTES`] of RAM.
pub fn kv_budgets(
    asked: KvBudget,
    offloaded: u32,
    total: u32,
    gpu_free: u64,
    model_bytes: u64,
) -> (u64, u64) {
    match asked {
        KvBudget::Bytes(n) => (n, n),
        KvBudget::Auto if offloaded == 0 => (KV_BUDGET_BYTES, SCHEDULER_KV_BUDGET_BYTES),
        KvBudget::Auto => {
            let total = u64::from(total.max(1));
            let offloaded = u64::from(offloaded).min(total);
            let weights = model_bytes / total * offloaded;
            let left = gpu_free
                .saturating_sub(weights)
                .saturating_sub(GPU_HEADROOM_BYTES);
            let on_gpu = (left as f64 * GPU_KV_FRACTION) as u64;
            let whole = if offloaded == total {
                on_gpu
            } else {
                (on_gpu / offloaded * total).min(on_gpu + SCHEDULER_KV_BUDGET_BYTES)
            };
            (whole, whole)
        }
    }
}

/// What [`Engine::load`] will do with a file, worked out from its GGUF
/// header and the devices without loading it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `n_gpu_layers` to ask llama.cpp for.
    pub offload: u32,
    /// The KV cache's shape, when the header has the keys.
    pub shape: Option<KvShape>,
    /// The GPUs that take layers (`main_gpu` alone with `split_mode =
    /// "none"`); empty without a GPU.
    pub gpus: Vec<Device>,
    /// The file's size in bytes.
    pub model_bytes: u64,
}

impl Plan {
    /// The placement once the model's KV `shape` is known.
    pub fn placement(&self, shape: &KvShape, settings: &EngineSettings) -> Placement {
        let layers = shape.layers + 1;
        let gpu_layers = if self.gpus.is_empty() {
            0
        } else {
            self.offload.min(layers)
        };
        let gpu_free = self.gpus.iter().map(|d| d.memory_free).sum::<u64>();
        let (kv_budget, scheduler_kv_budget) = kv_budgets(
            settings.kv_budget,
            gpu_layers,
            layers,
            gpu_free,
            self.model_bytes,
        );
        Placement {
            gpu_layers,
            layers,
            devices: if gpu_layers > 0 {
                self.gpus.clone()
            } else {
                Vec::new()
            },
            kv_type: settings.kv_type,
            kv_bytes_per_token: kv_bytes_per_token(shape, settings.kv_type),
            kv_budget,
            scheduler_kv_budget,
            flash_attn: settings.flash_attn,
        }
    }
}

/// Plans loading the GGUF file at `path` with `settings`: how many layers
/// go to which GPUs ([`plan_layers`]). Errors when `main_gpu` names no GPU.
pub fn plan(path: &Path, settings: &EngineSettings) -> Result<Plan, EngineError> {
    let header = gguf::read_header(path).ok();
    let shape = header.as_ref().and_then(|h| h.kv_shape());
    let model_bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    let all_gpus = gpus()?;
    let gpus: Vec<Device> = match settings.split_mode {
        SplitMode::None if !all_gpus.is_empty() => {
            let main = all_gpus.get(settings.main_gpu as usize).ok_or_else(|| {
                EngineError::Settings(format!(
                    "main_gpu = {} but this machine has {} GPU(s) ({}): use an index below {}",
                    settings.main_gpu,
                    all_gpus.len(),
                    all_gpus
                        .iter()
                        .map(|d| d.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    all_gpus.len()
                ))
            })?;
            vec![main.clone()]
        }
        _ => all_gpus,
    };
    let gpu_free = (!gpus.is_empty()).then(|| gpus.iter().map(|d| d.memory_free).sum::<u64>());
    let trained = header
        .as_ref()
        .and_then(|h| h.context_length())
        .and_then(|c| u64::try_from(c).ok())
        .unwrap_or(AUTO_LAYERS_CONTEXT);
    let context = match settings.context {
        0 => trained.min(AUTO_LAYERS_CONTEXT),
        c => u64::from(c),
    };
    let offload = match (shape, settings.gpu_layers) {
        (Some(shape), asked) => plan_layers(
            asked,
            shape.layers + 1,
            gpu_free,
            model_bytes,
            kv_bytes_per_token(&shape, settings.kv_type),
            context,
        ),
        // Without the layer count, "auto" cannot size anything.
        (None, GpuLayers::Auto | GpuLayers::None) => 0,
        (None, GpuLayers::All) => gpu_free.map_or(0, |_| ALL_LAYERS),
        (None, GpuLayers::Count(n)) => gpu_free.map_or(0, |_| n),
    };
    if gpu_free.is_none() && matches!(settings.gpu_layers, GpuLayers::All | GpuLayers::Count(1..)) {
        tracing::warn!(
            "gpu_layers = {:?} but this build sees no GPU (build with --features cuda, vulkan, rocm or metal; for Vulkan check `vulkaninfo --summary`): running on the CPU",
            settings.gpu_layers
        );
    }
    Ok(Plan {
        offload,
        shape,
        gpus,
        model_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn kv_bytes_per_token_by_model_and_type() {
        let qwen25 = KvShape::from_dims(24, 896, 14, 2);
        let qwen3_8b = KvShape {
            layers: 36,
            k_elements: 36 * 8 * 128,
            v_elements: 36 * 8 * 128,
        };
        let deepseek_v2_lite = KvShape {
            layers: 27,
            k_elements: 27 * (512 + 64),
            v_elements: 0,
        };
        #[rustfmt::skip]
        let cases = [
            ("qwen2.5-0.5b f16", qwen25, KvType::F16, 12_288),
            ("qwen2.5-0.5b q8_0", qwen25, KvType::Q8_0, 2 * 96 * 34),
            ("qwen2.5-0.5b q4_0", qwen25, KvType::Q4_0, 2 * 96 * 18),
            ("qwen3-8b f16", qwen3_8b, KvType::F16, 147_456),
            ("qwen3-8b q8_0", qwen3_8b, KvType::Q8_0, 78_336),
            ("deepseek-v2-lite f16", deepseek_v2_lite, KvType::F16, 31_104),
            ("deepseek-v2-lite q8_0", deepseek_v2_lite, KvType::Q8_0, 16_524),
        ];
        for (name, shape, kv_type, want) in cases {
            assert_eq!(kv_bytes_per_token(&shape, kv_type), want, "{name}");
        }
    }

    #[test]
    fn layers_offloaded_by_setting_and_free_memory() {
        // A 32B-like model: 64 blocks + output, 19 GiB file (0.3 GiB per
        // layer), 256 KiB of KV cache per token.
        let (total, bytes, kv) = (65, 19 * GIB + GIB / 2, 256 << 10);
        #[rustfmt::skip]
        let cases = [
            ("no GPU, auto", GpuLayers::Auto, None, 8192, 0),
            ("no GPU, all", GpuLayers::All, None, 8192, 0),
            ("all", GpuLayers::All, Some(4 * GIB), 8192, 65),
            ("none", GpuLayers::None, Some(80 * GIB), 8192, 0),
            ("count", GpuLayers::Count(20), Some(4 * GIB), 8192, 20),
            ("count over total", GpuLayers::Count(200), Some(4 * GIB), 8192, 65),
            // 24 GiB - 1 headroom - 2 KV (8192 tokens) = 21 GiB / 0.3 GiB: all.
            ("auto 24 GiB", GpuLayers::Auto, Some(24 * GIB), 8192, 65),
            // 16 GiB - 1 - 2 = 13 GiB / 0.3 GiB = 43 layers.
            ("auto 16 GiB", GpuLayers::Auto, Some(16 * GIB), 8192, 43),
            // 16 GiB - 1 - 8 (32k tokens) = 7 GiB: 23 layers.
            ("auto 16 GiB 32k", GpuLayers::Auto, Some(16 * GIB), 32768, 23),
            ("auto too small", GpuLayers::Auto, Some(GIB / 2), 8192, 0),
        ];
        for (name, asked, free, context, want) in cases {
            assert_eq!(
                plan_layers(asked, total, free, bytes, kv, context),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn kv_budget_follows_where_the_layers_are() {
        let (total, bytes) = (65, 19 * GIB + GIB / 2);
        #[rustfmt::skip]
        let cases = [
            ("cpu", KvBudget::Auto, 0, 0, (KV_BUDGET_BYTES, SCHEDULER_KV_BUDGET_BYTES)),
            ("bytes", KvBudget::Bytes(3 * GIB), 65, 80 * GIB, (3 * GIB, 3 * GIB)),
            // 80 GiB - 19.5 weights - 1 headroom = 59.5 GiB × 0.9.
            ("all on 80 GiB", KvBudget::Auto, 65, 80 * GIB,
             ((59 * GIB + GIB / 2) / 10 * 9, (59 * GIB + GIB / 2) / 10 * 9)),
            // 13 of 65 layers: 24 - 3.9 - 1 = 19.1 GiB × 0.9 = 17.19 GiB on
            // the GPU, ×5 over all layers, capped at that + 8 GiB of RAM.
            ("partial", KvBudget::Auto, 13, 24 * GIB,
             (17_190 * GIB / 1000 + 8 * GIB, 17_190 * GIB / 1000 + 8 * GIB)),
        ];
        for (name, asked, offloaded, free, want) in cases {
            let (a, b) = kv_budgets(asked, offloaded, total, free, bytes);
            // Within a MiB: the float fraction rounds.
            assert!(
                a.abs_diff(want.0) < 1 << 20 && b.abs_diff(want.1) < 1 << 20,
                "{name}: {a} {b} vs {want:?}"
            );
        }
    }

    #[test]
    fn context_is_capped_by_the_kv_budget() {
        // Qwen2.5-Coder-0.5B: 24 layers, 896 wide, 14 heads, 2 KV heads.
        let qwen = kv_bytes_per_token(&KvShape::from_dims(24, 896, 14, 2), KvType::F16);
        assert_eq!(qwen, 12 * 1024);
        assert_eq!(context_within_budget(32768, qwen, KV_BUDGET_BYTES), 32768);
        // A 7B-like model: 32 layers, 4096 wide, 32 heads, 8 KV heads.
        let big = kv_bytes_per_token(&KvShape::from_dims(32, 4096, 32, 8), KvType::F16);
        assert_eq!(big, 128 * 1024);
        assert_eq!(context_within_budget(131072, big, KV_BUDGET_BYTES), 16384);
        assert_eq!(context_within_budget(4096, 0, KV_BUDGET_BYTES), 4096);
    }
}
