//! Synthetic models: a GGUF file with the architecture, tensor shapes and
//! quantisation of a real model, reproducible pseudo-random weights of a
//! sane scale, and the tokenizer (vocabulary, merges, chat template)
//! copied from a small GGUF of the same family. An engine's speed depends
//! on the shapes and the quantisation, not on what the weights say, so a
//! synthetic model measures what the real one would where the real one
//! cannot be carried (`scripts/gpu-payload`).

use std::path::Path;

use patchwright_engine_types::gguf::GgufError;
use patchwright_engine_types::gguf_file::{self, RawEntry, TensorInfo, TensorType};
pub use patchwright_engine_types::gguf_file::{read_layout, Layout};

/// A model family's shape: what llama.cpp's `qwen2` architecture reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub name: &'static str,
    pub layers: u64,
    pub embd: u64,
    pub ff: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub vocab: u64,
}

/// The Qwen2.5-Coder shapes (their `config.json`s), and a tiny one.
pub const SHAPES: &[Shape] = &[
    Shape {
        name: "qwen2.5-coder-0.5b",
        layers: 24,
        embd: 896,
        ff: 4864,
        heads: 14,
        kv_heads: 2,
        vocab: 151_936,
    },
    Shape {
        name: "qwen2.5-coder-1.5b",
        layers: 28,
        embd: 1536,
        ff: 8960,
        heads: 12,
        kv_heads: 2,
        vocab: 151_936,
    },
    Shape {
        name: "qwen2.5-coder-7b",
        layers: 28,
        embd: 3584,
        ff: 18944,
        heads: 28,
        kv_heads: 4,
        vocab: 152_064,
    },
    Shape {
        name: "qwen2.5-coder-32b",
        layers: 64,
        embd: 5120,
        ff: 27648,
        heads: 40,
        kv_heads: 8,
        vocab: 152_064,
    },
    // Not a Qwen2.5 model: the `qwen2` architecture two layers deep and
    // 128 wide, which llama.cpp runs in milliseconds a call. The model
    // of the tests that check what the pipeline does around the model
    // (sweeps, Slurm arrays, resuming), where the words do not matter.
    Shape {
        name: "qwen2-tiny",
        layers: 2,
        embd: 128,
        ff: 256,
        heads: 2,
        kv_heads: 1,
        vocab: 151_936,
    },
];

/// How the weight matrices are quantised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quant {
    /// Every matrix Q4_0, the output Q6_K (llama.cpp's Q4_0 files).
    Q4_0,
    /// llama.cpp's Q4_K_M mix: Q4_K, with Q6_K for the output and for
    /// `attn_v` and `ffn_down` in the first and last eighth of the layers
    /// and every third layer between (`use_more_bits`): as many of each
    /// type as llama.cpp's files of these models hold, though their
    /// quantiser may have picked other layers for Q6_K (`--like` copies
    /// a file's own choice).
    Q4KM,
}

impl std::str::FromStr for Quant {
    type Err = SynthError;
    fn from_str(s: &str) -> Result<Quant, SynthError> {
        match s.to_ascii_lowercase().as_str() {
            "q4_0" => Ok(Quant::Q4_0),
            "q4_k_m" => Ok(Quant::Q4KM),
            _ => Err(SynthError::Invalid(format!(
                "quantisation `{s}`: q4_0 or q4_k_m"
            ))),
        }
    }
}

/// What could not be synthesised.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{0}")]
    Invalid(String),
}

impl Shape {
    /// The shape named `name` (`qwen2.5-coder-7b`).
    pub fn named(name: &str) -> Result<Shape, SynthError> {
        SHAPES
            .iter()
            .copied()
            .find(|s| s.name == name)
            .ok_or_else(|| {
                SynthError::Invalid(format!(
                    "no shape `{name}`: one of {}",
                    SHAPES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
                ))
            })
    }

    /// The tensors of a `qwen2` model of this shape, in llama.cpp's
    /// names and order, quantised as `quant` says.
    pub fn tensors(&self, quant: Quant) -> Vec<TensorInfo> {
        let kv = self.embd / self.heads * self.kv_heads;
        let (e, f) = (self.embd, self.ff);
        let matrix = match quant {
            Quant::Q4_0 => TensorType::Q4_0,
            Quant::Q4KM => TensorType::Q4K,
        };
        // llama.cpp's use_more_bits(i_layer, n_layers).
        let n = self.layers;
        let more = |i: u64| i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
        let sensitive = |i: u64| match quant {
            Quant::Q4KM if more(i) => TensorType::Q6K,
            _ => matrix,
        };
        let mut t = vec![TensorInfo::new(
            "token_embd.weight",
            &[e, self.vocab],
            matrix,
        )];
        for i in 0..n {
            let b = |s: &str| format!("blk.{i}.{s}");
            t.extend([
                TensorInfo::new(&b("attn_norm.weight"), &[e], TensorType::F32),
                TensorInfo::new(&b("attn_q.weight"), &[e, e], matrix),
                TensorInfo::new(&b("attn_q.bias"), &[e], TensorType::F32),
                TensorInfo::new(&b("attn_k.weight"), &[e, kv], matrix),
                TensorInfo::new(&b("attn_k.bias"), &[kv], TensorType::F32),
                TensorInfo::new(&b("attn_v.weight"), &[e, kv], sensitive(i)),
                TensorInfo::new(&b("attn_v.bias"), &[kv], TensorType::F32),
                TensorInfo::new(&b("attn_output.weight"), &[e, e], matrix),
                TensorInfo::new(&b("ffn_norm.weight"), &[e], TensorType::F32),
                TensorInfo::new(&b("ffn_gate.weight"), &[e, f], matrix),
                TensorInfo::new(&b("ffn_up.weight"), &[e, f], matrix),
                TensorInfo::new(&b("ffn_down.weight"), &[f, e], sensitive(i)),
            ]);
        }
        t.push(TensorInfo::new("output_norm.weight", &[e], TensorType::F32));
        // The converted Qwen2.5 files all carry their output projection,
        // the smaller models' tied embedding too.
        t.push(TensorInfo::new(
            "output.weight",
            &[e, self.vocab],
            TensorType::Q6K,
        ));
        for x in &mut t {
            x.kind = fallback(x).id();
        }
        t
    }

    /// The metadata llama.cpp's `qwen2` loader reads, for `quant`.
    fn entries(&self, quant: Quant) -> Vec<RawEntry> {
        let u = |k: &str, v: u64| RawEntry::u32(k, v as u32);
        vec![
            RawEntry::str("general.architecture", "qwen2"),
            RawEntry::str("general.name", &format!("{} (synthetic)", self.name)),
            u("qwen2.block_count", self.layers),
            u("qwen2.context_length", 32768),
            u("qwen2.embedding_length", self.embd),
            u("qwen2.feed_forward_length", self.ff),
            u("qwen2.attention.head_count", self.heads),
            u("qwen2.attention.head_count_kv", self.kv_heads),
            RawEntry::f32("qwen2.rope.freq_base", 1_000_000.0),
            RawEntry::f32("qwen2.attention.layer_norm_rms_epsilon", 1e-6),
            // llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_0 and _Q4_K_M.
            u(
                "general.file_type",
                match quant {
                    Quant::Q4_0 => 2,
                    Quant::Q4KM => 15,
                },
            ),
        ]
    }
}

/// llama.cpp's fallback for a k-quant whose rows are no whole number of
/// 256-element blocks (the 0.5B's 896): Q4_K becomes Q5_0 and Q6_K Q8_0.
fn fallback(t: &TensorInfo) -> TensorType {
    let kind = TensorType::from_id(t.kind).unwrap_or(TensorType::F32);
    let row = t.dims.first().copied().unwrap_or(0);
    match kind {
        TensorType::Q4K if row % 256 != 0 => TensorType::Q5_0,
        TensorType::Q6K if row % 256 != 0 => TensorType::Q8_0,
        other => other,
    }
}

/// SplitMix64: a reproducible stream of pseudo-random words, seeded per
/// tensor.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `x` as an IEEE half (normal numbers, as the scales here are).
fn f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    if exp <= 0 {
        return sign;
    }
    let mantissa = ((bits >> 13) & 0x3ff) as u16;
    sign | ((exp.min(30) as u16) << 10) | mantissa
}

/// The scale of a block's `d` for type `t`, so that weights come out near
/// a standard deviation of 0.02 (a trained model's order): the quant's
/// range times its sub-scale's.
fn block_scale(t: TensorType) -> f32 {
    match t {
        TensorType::Q4_0 | TensorType::Q4_1 | TensorType::Q5_0 | TensorType::Q5_1 => 0.004,
        TensorType::Q8_0 => 0.0003,
        _ => 0.000_1,
    }
}

/// Fills `buf`, the data of `tensor`, with reproducible pseudo-random
/// weights of `seed`: quants at random, every block's f16 scales finite
/// and small; norms 1 and biases near 0 (f32).
pub fn fill(tensor: &TensorInfo, seed: u64, buf: &mut [u8]) {
    let mut h: u64 = seed ^ 0x5EED;
    for b in tensor.name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
    }
    let mut rng = Stream(h);
    let Some(kind) = TensorType::from_id(tensor.kind) else {
        return;
    };
    if kind == TensorType::F32 {
        let norm = tensor.name.ends_with("norm.weight");
        for chunk in buf.chunks_exact_mut(4) {
            let v = if norm {
                1.0
            } else {
                ((rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.02
            };
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        return;
    }
    if kind == TensorType::F16 || kind == TensorType::BF16 {
        // Random bits would be NaN or infinity one time in 32: small
        // finite values instead.
        for chunk in buf.chunks_exact_mut(2) {
            let v = ((rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.02;
            let half = match kind {
                TensorType::F16 => f16_bits(v),
                _ => (v.to_bits() >> 16) as u16,
            };
            chunk.copy_from_slice(&half.to_le_bytes());
        }
        return;
    }
    for chunk in buf.chunks_mut(8) {
        let word = rng.next().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    let (_, size) = kind.block();
    let scale = f16_bits(block_scale(kind)).to_le_bytes();
    for block in buf.chunks_exact_mut(size as usize) {
        for &at in kind.scale_offsets() {
            block[at..at + 2].copy_from_slice(&scale);
        }
        if kind == TensorType::Q6K {
            // Its 16 sub-scales are signed bytes: small positive ones
            // keep the weights near the others' scale.
            for s in &mut block[192..208] {
                *s = (*s & 0x0f) + 1;
            }
        }
    }
}

/// The tokenizer's entries of the GGUF at `path` (`tokenizer.*`): the
/// vocabulary, merges, token types, special tokens and chat template.
pub fn tokenizer_entries(path: &Path) -> Result<Vec<RawEntry>, SynthError> {
    let layout = gguf_file::read_layout(path)?;
    let entries: Vec<RawEntry> = layout
        .entries
        .into_iter()
        .filter(|e| e.key.starts_with("tokenizer."))
        .collect();
    if !entries.iter().any(|e| e.key == "tokenizer.ggml.tokens") {
        return Err(SynthError::Invalid(format!(
            "{}: no tokenizer.ggml.tokens: give a GGUF of the same family (a model, or the \
             tokenizer file `models tokenizer` writes)",
            path.display()
        )));
    }
    Ok(entries)
}

/// Writes the tokenizer entries of `model` alone, as a GGUF of no tensors
/// (a few MiB, where the model is hundreds), for [`write`] to read.
pub fn write_tokenizer(model: &Path, out: &Path) -> Result<(), SynthError> {
    let entries = tokenizer_entries(model)?;
    gguf_file::write_file(out, &entries, &[], &mut |_, _| {})?;
    Ok(())
}

/// What [`write`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub tensors: usize,
    /// The file's tensor data, in bytes.
    pub bytes: u64,
}

/// Writes a synthetic model of `shape`, quantised as `quant` (or with the
/// tensor types of the GGUF `like`, when given: the same tensors must
/// exist there), with the tokenizer of `tokenizer`, weights from `seed`.
pub fn write(
    shape: &Shape,
    quant: Quant,
    like: Option<&Layout>,
    tokenizer: &Path,
    seed: u64,
    out: &Path,
) -> Result<Written, SynthError> {
    let tokens = tokenizer_entries(tokenizer)?;
    let mut tensors = shape.tensors(quant);
    if let Some(like) = like {
        if like.tensors.len() != tensors.len() {
            return Err(SynthError::Invalid(format!(
                "the model to copy the types of has {} tensors, a {} {}",
                like.tensors.len(),
                shape.name,
                tensors.len()
            )));
        }
        for t in &mut tensors {
            let real = like
                .tensors
                .iter()
                .find(|r| r.name == t.name)
                .ok_or_else(|| {
                    SynthError::Invalid(format!(
                        "{} is not a tensor of the model to copy the types of: is it a {}?",
                        t.name, shape.name
                    ))
                })?;
            if real.dims != t.dims {
                return Err(SynthError::Invalid(format!(
                    "{}: {:?} in the model to copy, {:?} in {}",
                    t.name, real.dims, t.dims, shape.name
                )));
            }
            t.kind = real.kind;
        }
    }
    let mut entries = shape.entries(quant);
    entries.extend(tokens);
    let bytes = tensors.iter().filter_map(TensorInfo::bytes).sum();
    gguf_file::write_file(out, &entries, &tensors, &mut |t, buf| fill(t, seed, buf))?;
    Ok(Written {
        tensors: tensors.len(),
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_have_llama_cpps_tensors_and_sizes() -> Result<(), SynthError> {
        // The rule's types: Q4_K, Q6_K in the layers use_more_bits picks,
        // and the 0.5B's 896-element rows falling back as llama.cpp's do
        // (its file holds Q5_0 and Q8_0 there, and as many of each type:
        // tests/it/synth.rs).
        let cases = [
            ("qwen2.5-coder-1.5b", "blk.0.attn_v.weight", TensorType::Q6K),
            ("qwen2.5-coder-1.5b", "blk.3.attn_v.weight", TensorType::Q4K),
            (
                "qwen2.5-coder-1.5b",
                "blk.5.ffn_down.weight",
                TensorType::Q6K,
            ),
            (
                "qwen2.5-coder-1.5b",
                "blk.27.ffn_down.weight",
                TensorType::Q6K,
            ),
            ("qwen2.5-coder-1.5b", "blk.0.attn_q.weight", TensorType::Q4K),
            ("qwen2.5-coder-1.5b", "token_embd.weight", TensorType::Q4K),
            ("qwen2.5-coder-1.5b", "output.weight", TensorType::Q6K),
            (
                "qwen2.5-coder-0.5b",
                "blk.0.attn_v.weight",
                TensorType::Q8_0,
            ),
            (
                "qwen2.5-coder-0.5b",
                "blk.3.attn_v.weight",
                TensorType::Q5_0,
            ),
            (
                "qwen2.5-coder-0.5b",
                "blk.5.ffn_down.weight",
                TensorType::Q6K,
            ),
            (
                "qwen2.5-coder-0.5b",
                "blk.4.ffn_down.weight",
                TensorType::Q4K,
            ),
            ("qwen2.5-coder-0.5b", "output.weight", TensorType::Q8_0),
            ("qwen2.5-coder-0.5b", "token_embd.weight", TensorType::Q5_0),
            // The tiny shape's 128-element rows fall back, its 256 do not.
            ("qwen2-tiny", "blk.0.attn_q.weight", TensorType::Q5_0),
            ("qwen2-tiny", "blk.0.ffn_down.weight", TensorType::Q4K),
            ("qwen2-tiny", "blk.1.ffn_down.weight", TensorType::Q6K),
        ];
        for (shape, name, kind) in cases {
            let t = Shape::named(shape)?.tensors(Quant::Q4KM);
            // 12 per layer, the embedding, the output norm and projection.
            assert_eq!(t.len() % 12, 3, "{shape}");
            let found = t.iter().find(|x| x.name == name).map(|x| x.kind);
            assert_eq!(found, Some(kind.id()), "{shape} {name}");
        }
        // 14 of 28 layers' attn_v and ffn_down, and the output.
        let q6 = Shape::named("qwen2.5-coder-1.5b")?
            .tensors(Quant::Q4KM)
            .iter()
            .filter(|x| x.kind == TensorType::Q6K.id())
            .count();
        assert_eq!(q6, 29);
        let seven = Shape::named("qwen2.5-coder-7b")?;
        let t7 = seven.tensors(Quant::Q4_0);
        let bytes: u64 = t7.iter().filter_map(TensorInfo::bytes).sum();
        // About 4.4 GB, as llama.cpp's Q4_0 of the 7B.
        assert!((4_100_000_000..4_700_000_000).contains(&bytes), "{bytes}");
        assert!(t7.iter().any(|x| x.name == "output.weight"));
        assert!(Shape::named("qwen9").is_err());
        Ok(())
    }

    #[test]
    fn weights_are_reproducible_with_finite_scales() {
        let t = TensorInfo::new("blk.0.attn_q.weight", &[256, 2], TensorType::Q4K);
        let mut a = vec![0u8; 288];
        let mut b = vec![0u8; 288];
        fill(&t, 7, &mut a);
        fill(&t, 7, &mut b);
        assert_eq!(a, b);
        fill(&t, 8, &mut b);
        assert_ne!(a, b);
        for block in a.chunks_exact(144) {
            for at in [0, 2] {
                let h = u16::from_le_bytes([block[at], block[at + 1]]);
                assert_eq!(h, f16_bits(0.0001), "d and dmin set");
                assert_ne!(h & 0x7c00, 0x7c00, "finite");
            }
        }
        assert_eq!(f16_bits(1.0), 0x3c00);
        assert_eq!(f16_bits(0.5), 0x3800);
        let norm = TensorInfo::new("output_norm.weight", &[4], TensorType::F32);
        let mut n = vec![0u8; 16];
        fill(&norm, 1, &mut n);
        assert_eq!(n[..4], 1.0f32.to_le_bytes());
    }
}
