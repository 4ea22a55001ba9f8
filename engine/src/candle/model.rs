//! The transformer of the candle engine: a GGUF's quantized weights read
//! with `candle_core::quantized::gguf_file` and run with candle's CPU ops,
//! for the two architectures the engine serves (`qwen2`, `llama`).
//!
//! candle-transformers' `quantized_qwen2` and `quantized_llama` keep the KV
//! cache inside their private layer structs: it can be dropped but not cut
//! to a prefix, and `quantized_qwen2`'s model cannot be cloned. A
//! conversation needs both (keep the common prefix of two turns; copy an
//! evaluated prompt for N candidates), so the forward pass is written here
//! with the cache outside the weights ([`Cache`]), using candle's building
//! blocks (quantized matmuls and embeddings, `rms_norm`, `rope`/`rope_i`,
//! `softmax_last_dim`, candle-transformers' `repeat_kv`) in the order those
//! models use them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::{gguf_file, QMatMul, QTensor};
use candle_core::{DType, Device, IndexOp, Module, Tensor};

use super::super::TraceStep;

/// The architectures (`general.architecture`) the candle engine runs.
pub const SUPPORTED_ARCHITECTURES: [&str; 2] = ["qwen2", "llama"];

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path} as GGUF with candle: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path} is a `{arch}` model; the candle engine runs {supported} (use [engine] kind = \"llama\" for this model)", supported = SUPPORTED_ARCHITECTURES.join(", "))]
    Architecture { path: PathBuf, arch: String },
    #[error("{path}: metadata key `{key}` is missing or has the wrong type: {message}")]
    Metadata {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("{path}: cannot load tensor `{name}`: {message}")]
    Tensor {
        path: PathBuf,
        name: String,
        message: String,
    },
    #[error("candle failed to {action}: {message}")]
    Compute {
        action: &'static str,
        message: String,
    },
}

/// Maps a candle error to [`ModelError::Compute`].
pub(crate) fn compute(action: &'static str) -> impl Fn(candle_core::Error) -> ModelError {
    move |e| ModelError::Compute {
        action,
        message: e.to_string(),
    }
}

/// The supported architectures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Qwen2: biases on Q, K and V; NEOX rotary embeddings.
    Qwen2,
    /// Llama (SmolLM2): no biases; interleaved (NORM) rotary embeddings.
    Llama,
}

impl Arch {
    fn name(self) -> &'static str {
        match self {
            Arch::Qwen2 => "qwen2",
            Arch::Llama => "llama",
        }
    }
}

/// The shape of a model, from its GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub embedding: usize,
    pub rms_eps: f64,
    pub rope_base: f32,
    /// The context the model was trained with (`{arch}.context_length`).
    pub trained_context: usize,
}

struct Layer {
    wq: QMatMul,
    wk: QMatMul,
    wv: QMatMul,
    wo: QMatMul,
    /// Q, K and V biases (Qwen2 only).
    bias: Option<(Tensor, Tensor, Tensor)>,
    attn_norm: Tensor,
    ffn_norm: Tensor,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
}

/// A loaded model: its weights, shared by every conversation (read-only).
pub struct Model {
    pub config: Config,
    embed: QMatMul,
    layers: Vec<Layer>,
    norm: Tensor,
    output: QMatMul,
    cos: Tensor,
    sin: Tensor,
    device: Device,
}

/// The keys and values a sequence (or a batch of sequences of equal
/// length) holds, per layer, outside the weights: cloning it is cheap
/// (tensors are reference-counted), cutting it is a `narrow`.
#[derive(Clone, Default)]
pub struct Cache {
    /// Per layer: keys and values, `(rows, kv_heads, len, head_dim)`.
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl Cache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps the first `len` positions.
    pub fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        if len >= self.len {
            return Ok(());
        }
        if len == 0 {
            *self = Cache::default();
            return Ok(());
        }
        for (k, v) in self.layers.iter_mut().flatten() {
            *k = k.narrow(2, 0, len).map_err(compute("cut the KV cache"))?;
            *v = v.narrow(2, 0, len).map_err(compute("cut the KV cache"))?;
        }
        self.len = len;
        Ok(())
    }

    /// The cache of one row repeated `n` times (the prompt, once per
    /// candidate).
    pub fn repeat(&self, n: usize) -> Result<Cache, ModelError> {
        let mut layers = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            layers.push(match layer {
                Some((k, v)) => Some((
                    k.repeat((n, 1, 1, 1))
                        .map_err(compute("copy the prompt's cache"))?,
                    v.repeat((n, 1, 1, 1))
                        .map_err(compute("copy the prompt's cache"))?,
                )),
                None => None,
            });
        }
        Ok(Cache {
            layers,
            len: self.len,
        })
    }

    /// Keeps the rows (sequences) listed in `rows`, in that order.
    pub fn select(&self, rows: &[u32]) -> Result<Cache, ModelError> {
        let Some(device) = self.layers.iter().flatten().next().map(|(k, _)| k.device()) else {
            return Ok(self.clone());
        };
        let index = Tensor::new(rows, device).map_err(compute("select cache rows"))?;
        let mut layers = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            layers.push(match layer {
                Some((k, v)) => Some((
                    k.index_select(&index, 0)
                        .map_err(compute("select cache rows"))?,
                    v.index_select(&index, 0)
                        .map_err(compute("select cache rows"))?,
                )),
                None => None,
            });
        }
        Ok(Cache {
            layers,
            len: self.len,
        })
    }
}

/// Reads metadata key `key` with `get`.
fn meta<'a, T>(
    content: &'a gguf_file::Content,
    path: &Path,
    key: &str,
    get: impl Fn(&'a gguf_file::Value) -> candle_core::Result<T>,
) -> Result<T, ModelError> {
    let err = |message: String| ModelError::Metadata {
        path: path.to_path_buf(),
        key: key.to_string(),
        message,
    };
    let value = content
        .metadata
        .get(key)
        .ok_or_else(|| err("not present".into()))?;
    get(value).map_err(|e| err(e.to_string()))
}

/// The architecture named in a GGUF's `general.architecture`.
pub fn architecture(content: &gguf_file::Content, path: &Path) -> Result<Arch, ModelError> {
    let arch = meta(content, path, "general.architecture", |v| v.to_string())?;
    match arch.as_str() {
        "qwen2" => Ok(Arch::Qwen2),
        "llama" => Ok(Arch::Llama),
        other => Err(ModelError::Architecture {
            path: path.to_path_buf(),
            arch: other.to_string(),
        }),
    }
}

/// Reads the GGUF header (metadata and tensor index) of `path`.
pub fn read_content(path: &Path) -> Result<(gguf_file::Content, File), ModelError> {
    let mut file = File::open(path).map_err(|source| ModelError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let content = gguf_file::Content::read(&mut file).map_err(|e| ModelError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok((content, file))
}

impl Model {
    /// Loads the model in `path` on the CPU.
    pub fn load(path: &Path) -> Result<Model, ModelError> {
        let (content, mut file) = read_content(path)?;
        let arch = architecture(&content, path)?;
        let a = arch.name();
        let u = |key: &str| {
            meta(&content, path, &format!("{a}.{key}"), |v| v.to_u32()).map(|n| n as usize)
        };
        let heads = u("attention.head_count")?;
        let embedding = u("embedding_length")?;
        let head_dim = match u("attention.key_length") {
            Ok(d) => d,
            Err(_) => embedding / heads.max(1),
        };
        let config = Config {
            arch,
            layers: u("block_count")?,
            heads,
            kv_heads: u("attention.head_count_kv")?,
            head_dim,
            embedding,
            rms_eps: f64::from(meta(
                &content,
                path,
                &format!("{a}.attention.layer_norm_rms_epsilon"),
                |v| v.to_f32(),
            )?),
            rope_base: meta(&content, path, &format!("{a}.rope.freq_base"), |v| {
                v.to_f32()
            })
            .unwrap_or(10_000.0),
            trained_context: u("context_length")?,
        };
        let device = Device::Cpu;
        let mut tensor = |name: &str| -> Result<QTensor, ModelError> {
            content
                .tensor(&mut file, name, &device)
                .map_err(|e| ModelError::Tensor {
                    path: path.to_path_buf(),
                    name: name.to_string(),
                    message: e.to_string(),
                })
        };
        let tensor_err = |name: &str| {
            let path = path.to_path_buf();
            let name = name.to_string();
            move |e: candle_core::Error| ModelError::Tensor {
                path: path.clone(),
                name: name.clone(),
                message: e.to_string(),
            }
        };
        let matmul = |q: QTensor, name: &str| QMatMul::from_qtensor(q).map_err(tensor_err(name));
        let dense = |q: QTensor, name: &str| q.dequantize(&device).map_err(tensor_err(name));

        let embed_q = Arc::new(tensor("token_embd.weight")?);
        let embed = QMatMul::from_arc(Arc::clone(&embed_q)).map_err(tensor_err("token_embd"))?;
        let output = match content.tensor_infos.contains_key("output.weight") {
            true => matmul(tensor("output.weight")?, "output.weight")?,
            // Tied embeddings: the output projection is the embedding.
            false => QMatMul::from_arc(embed_q).map_err(tensor_err("token_embd"))?,
        };
        let norm = dense(tensor("output_norm.weight")?, "output_norm.weight")?;
        let mut layers = Vec::with_capacity(config.layers);
        for i in 0..config.layers {
            let mut w = |part: &str| {
                let name = format!("blk.{i}.{part}");
                tensor(&name).map(|t| (t, name))
            };
            let (q, n) = w("attn_q.weight")?;
            let wq = matmul(q, &n)?;
            let (q, n) = w("attn_k.weight")?;
            let wk = matmul(q, &n)?;
            let (q, n) = w("attn_v.weight")?;
            let wv = matmul(q, &n)?;
            let (q, n) = w("attn_output.weight")?;
            let wo = matmul(q, &n)?;
            let bias = match arch {
                Arch::Qwen2 => {
                    let (q, n) = w("attn_q.bias")?;
                    let bq = dense(q, &n)?;
                    let (q, n) = w("attn_k.bias")?;
                    let bk = dense(q, &n)?;
                    let (q, n) = w("attn_v.bias")?;
                    let bv = dense(q, &n)?;
                    Some((bq, bk, bv))
                }
                Arch::Llama => None,
            };
            let (q, n) = w("attn_norm.weight")?;
            let attn_norm = dense(q, &n)?;
            let (q, n) = w("ffn_norm.weight")?;
            let ffn_norm = dense(q, &n)?;
            let (q, n) = w("ffn_gate.weight")?;
            let gate = matmul(q, &n)?;
            let (q, n) = w("ffn_up.weight")?;
            let up = matmul(q, &n)?;
            let (q, n) = w("ffn_down.weight")?;
            let down = matmul(q, &n)?;
            layers.push(Layer {
                wq,
                wk,
                wv,
                wo,
                bias,
                attn_norm,
                ffn_norm,
                gate,
                up,
                down,
            });
        }
        let (cos, sin) = rope_tables(&config, &device).map_err(compute("build the RoPE tables"))?;
        Ok(Model {
            config,
            embed,
            layers,
            norm,
            output,
            cos,
            sin,
            device,
        })
    }

    /// An empty cache for this model.
    pub fn new_cache(&self) -> Cache {
        Cache {
            layers: vec![None; self.layers.len()],
            len: 0,
        }
    }

    /// Evaluates `tokens` (`rows` sequences of equal length, row-major)
    /// after what `cache` holds, appending their keys and values to it.
    /// Returns the logits at each row's last position, `(rows, vocab)`.
    pub fn forward(
        &self,
        tokens: &[u32],
        rows: usize,
        cache: &mut Cache,
    ) -> Result<Tensor, ModelError> {
        let seq = tokens.len() / rows.max(1);
        self.forward_inner(tokens, rows, seq, cache)
            .map_err(compute("evaluate tokens"))
    }

    fn forward_inner(
        &self,
        tokens: &[u32],
        rows: usize,
        seq: usize,
        cache: &mut Cache,
    ) -> candle_core::Result<Tensor> {
        let c = &self.config;
        let start = cache.len;
        if cache.layers.len() != self.layers.len() {
            cache.layers = vec![None; self.layers.len()];
        }
        let ids = Tensor::from_slice(tokens, (rows, seq), &self.device)?;
        let mask = if seq > 1 {
            Some(causal_mask(seq, start, &self.device)?)
        } else {
            None
        };
        let cos = self.cos.narrow(0, start, seq)?;
        let sin = self.sin.narrow(0, start, seq)?;
        let mut x = self.embed.embedding(&ids)?;
        for (layer, slot) in self.layers.iter().zip(cache.layers.iter_mut()) {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, c.rms_eps as f32)?;
            let mut q = layer.wq.forward(&h)?;
            let mut k = layer.wk.forward(&h)?;
            let mut v = layer.wv.forward(&h)?;
            if let Some((bq, bk, bv)) = &layer.bias {
                q = q.broadcast_add(bq)?;
                k = k.broadcast_add(bk)?;
                v = v.broadcast_add(bv)?;
            }
            let q = q
                .reshape((rows, seq, c.heads, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()?;
            let k = k
                .reshape((rows, seq, c.kv_heads, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()?;
            let v = v
                .reshape((rows, seq, c.kv_heads, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()?;
            let (q, k) = match c.arch {
                Arch::Qwen2 => (
                    candle_nn::rotary_emb::rope(&q, &cos, &sin)?,
                    candle_nn::rotary_emb::rope(&k, &cos, &sin)?,
                ),
                Arch::Llama => (
                    candle_nn::rotary_emb::rope_i(&q, &cos, &sin)?,
                    candle_nn::rotary_emb::rope_i(&k, &cos, &sin)?,
                ),
            };
            // llama.cpp keeps keys and values in f16 (`kv_type = "f16"`) and
            // multiplies queries at that precision: rounding them alike
            // brings the two engines' logits closer (measured: without it,
            // SmolLM2's divergences included one at a 0.34 gap).
            let f16 = |t: Tensor| t.to_dtype(DType::F16).and_then(|t| t.to_dtype(DType::F32));
            let (q, k, v) = (f16(q)?, f16(k)?, f16(v)?);
            let (k, v) = match slot.take() {
                Some((ck, cv)) => (Tensor::cat(&[&ck, &k], 2)?, Tensor::cat(&[&cv, &v], 2)?),
                None => (k, v),
            };
            *slot = Some((k.clone(), v.clone()));
            let groups = c.heads / c.kv_heads.max(1);
            let k = candle_transformers::utils::repeat_kv(k, groups)?;
            let v = candle_transformers::utils::repeat_kv(v, groups)?;
            let att = (q.matmul(&k.t()?)? / (c.head_dim as f64).sqrt())?;
            let att = match &mask {
                Some(mask) => att.broadcast_add(mask)?,
                None => att,
            };
            let att = candle_nn::ops::softmax_last_dim(&att)?;
            let y = att.matmul(&v.contiguous()?)?;
            let y = y
                .transpose(1, 2)?
                .reshape((rows, seq, c.heads * c.head_dim))?;
            let x1 = (layer.wo.forward(&y)? + &x)?;
            let h = candle_nn::ops::rms_norm(&x1, &layer.ffn_norm, c.rms_eps as f32)?;
            let gate = candle_nn::ops::silu(&layer.gate.forward(&h)?)?;
            let up = layer.up.forward(&h)?;
            x = (layer.down.forward(&(gate * up)?)? + x1)?;
        }
        cache.len = start + seq;
        let x = candle_nn::ops::rms_norm(&x, &self.norm, c.rms_eps as f32)?;
        let last = x.i((.., seq - 1, ..))?.contiguous()?;
        self.output.forward(&last)?.to_dtype(DType::F32)
    }

    /// Evaluates `tokens` (one sequence) after `cache`, `batch` at a time;
    /// the logits after the last.
    pub fn eval(
        &self,
        tokens: &[u32],
        cache: &mut Cache,
        batch: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let mut last = None;
        for chunk in tokens.chunks(batch.max(1)) {
            last = Some(self.forward(chunk, 1, cache)?);
        }
        let last = last.ok_or(ModelError::Compute {
            action: "evaluate a prompt",
            message: "no tokens".into(),
        })?;
        row(&last, 0)
    }

    /// Greedy decoding of `n` tokens after `tokens` (evaluated `batch` at a
    /// time) in a fresh cache, with each step's top two logits: an
    /// inspection of the model, for the differential test against
    /// llama.cpp (`Engine::greedy_trace`). An end-of-generation token does
    /// not stop it.
    pub fn greedy_trace(
        &self,
        tokens: &[u32],
        n: usize,
        batch: usize,
    ) -> Result<Vec<TraceStep>, ModelError> {
        self.greedy_trace_while(tokens, n, batch, |_, _| true)
    }

    /// [`Model::greedy_trace`] that ends early, after the first step `k`
    /// for which `go_on(k, &step)` is false (that step included): a
    /// comparison with another engine's trace stops where they part.
    pub fn greedy_trace_while(
        &self,
        tokens: &[u32],
        n: usize,
        batch: usize,
        mut go_on: impl FnMut(usize, &TraceStep) -> bool,
    ) -> Result<Vec<TraceStep>, ModelError> {
        let mut cache = self.new_cache();
        let mut logits = self.eval(tokens, &mut cache, batch)?;
        let mut steps = Vec::with_capacity(n);
        for k in 0..n {
            let step = TraceStep::of(&logits);
            steps.push(step);
            if k + 1 == n || !go_on(k, &step) {
                break;
            }
            logits = row(&self.forward(&[step.token], 1, &mut cache)?, 0)?;
        }
        Ok(steps)
    }

    /// The vocabulary size (rows of the embedding).
    pub fn vocab_size(&self) -> usize {
        match &self.embed {
            QMatMul::QTensor(t) => t.shape().dims().first().copied().unwrap_or(0),
            QMatMul::Tensor(t) | QMatMul::TensorF16(t) => t.dims().first().copied().unwrap_or(0),
        }
    }
}

/// Logits as a vector (one row).
pub fn row(logits: &Tensor, i: usize) -> Result<Vec<f32>, ModelError> {
    logits
        .i(i)
        .and_then(|r| r.to_vec1::<f32>())
        .map_err(compute("read logits"))
}

/// `(seq, start + seq)`: 0 where query `i` (at position `start + i`) may
/// see key `j`, −∞ after it.
fn causal_mask(seq: usize, start: usize, device: &Device) -> candle_core::Result<Tensor> {
    let total = start + seq;
    let values: Vec<f32> = (0..seq)
        .flat_map(|i| {
            (0..total).map(move |j| {
                if j <= start + i {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    Tensor::from_vec(values, (seq, total), device)
}

/// The cosines and sines of the rotary embedding for every position of the
/// trained context, `(context, head_dim / 2)`.
fn rope_tables(config: &Config, device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
    let dim = config.head_dim;
    let theta: Vec<f32> = (0..dim)
        .step_by(2)
        .map(|i| 1.0 / config.rope_base.powf(i as f32 / dim as f32))
        .collect();
    let theta = Tensor::new(theta.as_slice(), device)?;
    let positions = Tensor::arange(0u32, config.trained_context as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((config.trained_context, 1))?;
    let angles = positions.broadcast_mul(&theta.reshape((1, dim / 2))?)?;
    Ok((angles.cos()?, angles.sin()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF file of metadata only.
    fn gguf(metadata: &[(&str, gguf_file::Value)]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let refs: Vec<(&str, &gguf_file::Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
        gguf_file::write(file.as_file_mut(), &refs, &[]).unwrap();
        file
    }

    #[test]
    fn only_the_supported_architectures_load() {
        let string = |s: &str| gguf_file::Value::String(s.into());
        #[rustfmt::skip]
        let cases: [(Vec<(&str, gguf_file::Value)>, &str); 4] = [
            (vec![("general.architecture", string("gpt2"))],
             "is a `gpt2` model; the candle engine runs qwen2, llama (use [engine] kind = \"llama\" for this model)"),
            (vec![("general.architecture", string("deepseek2"))], "is a `deepseek2` model"),
            (vec![], "metadata key `general.architecture` is missing or has the wrong type: not present"),
            // A supported architecture without its shape.
            (vec![("general.architecture", string("qwen2"))],
             "metadata key `qwen2.attention.head_count` is missing"),
        ];
        for (metadata, want) in cases {
            let file = gguf(&metadata);
            let err = Model::load(file.path()).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains(want)),
                "{metadata:?}: {err:?}"
            );
        }
    }

    #[test]
    fn caches_cut_repeat_and_select_rows() {
        // One layer, one head of width 1: keys 0, 1, 2 at three positions.
        let k = Tensor::new(&[0f32, 1., 2.], &Device::Cpu)
            .unwrap()
            .reshape((1, 1, 3, 1))
            .unwrap();
        let mut cache = Cache {
            layers: vec![Some((k.clone(), (k * 10.).unwrap()))],
            len: 3,
        };
        let keys = |c: &Cache| {
            let (k, v) = c.layers[0].clone().unwrap();
            (
                k.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                v.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            )
        };
        cache.truncate(2).unwrap();
        assert_eq!(
            (cache.len(), keys(&cache)),
            (2, (vec![0., 1.], vec![0., 10.]))
        );
        let two = cache.repeat(2).unwrap();
        assert_eq!(two.layers[0].as_ref().unwrap().0.dims(), &[2, 1, 2, 1]);
        assert_eq!(keys(&two).0, vec![0., 1., 0., 1.]);
        let one = two.select(&[1]).unwrap();
        assert_eq!((one.len(), keys(&one)), (2, (vec![0., 1.], vec![0., 10.])));
        cache.truncate(0).unwrap();
        assert!(cache.is_empty());
        assert!(cache.layers.is_empty());
    }

    #[test]
    fn the_causal_mask_lets_each_position_see_its_past() {
        let mask = causal_mask(2, 1, &Device::Cpu)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let inf = f32::NEG_INFINITY;
        assert_eq!(mask, vec![vec![0.0, 0.0, inf], vec![0.0, 0.0, 0.0]]);
    }
}
