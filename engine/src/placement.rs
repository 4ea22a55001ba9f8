//! Where a model runs: the GPUs of this build, how many layers go to
//! them (`[engine] gpu_layers`), the KV cache's element type and budget,
//! and the KV bytes per token from the GGUF's own attention keys. Worked
//! out once, before the model is loaded ([`plan`]), and recorded as a
//! [`Placement`] (`models list`, `run.json`).

use std::path::Path;

use llama_cpp_2::context::params::KvCacheType;

use crate::gguf::{self, KvShape};
use crate::setup::{backend, EngineError, EngineSettings};
pub use patchwright_engine_types::placement::{
    Device, FlashAttn, GpuLayers, KvBudget, KvType, Placement, SplitMode,
};

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

/// llama.cpp's `llama_flash_attn_type` value of `f`.
pub(crate) fn flash_attn_type(f: FlashAttn) -> i32 {
    match f {
        FlashAttn::Auto => -1,
        FlashAttn::Off => 0,
        FlashAttn::On => 1,
    }
}

/// llama.cpp's KV cache type of `k`.
pub(crate) fn kv_cache_type(k: KvType) -> KvCacheType {
    match k {
        KvType::F16 => KvCacheType::F16,
        KvType::Q8_0 => KvCacheType::Q8_0,
        KvType::Q4_0 => KvCacheType::Q4_0,
    }
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
