//! Reading a GGUF file's header: magic, version, and the metadata key-value
//! pairs (architecture, context length, quantisation, ...). Tensor data is
//! never read.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::Path;

/// The four bytes every GGUF file starts with.
pub const MAGIC: &[u8; 4] = b"GGUF";

/// Strings and arrays longer than this, and headers with more metadata
/// entries, are not GGUF metadata we can trust (the largest real ones,
/// tokenizer vocabularies, hold ~250k entries). A string's bytes are read
/// as they arrive, never allocated from its length field up front, so a
/// forged length costs no memory beyond the file's own bytes.
pub const MAX_LEN: u64 = 1 << 26;

/// A `block_count` above this is not a real model's (the largest have a
/// few hundred layers): [`Header::kv_shape`] gives `None` rather than
/// looping over billions of layers of a forged header.
pub const MAX_LAYERS: u32 = 1 << 16;

/// Integer arrays up to this long keep their values ([`Value::Ints`]):
/// per-layer hyperparameters (`head_count_kv` of a model whose layers
/// differ) have one entry per layer, a few hundred at most; longer integer
/// arrays (token types, merges' ranks) are only counted.
pub const MAX_KEPT_INTS: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{path}: not a GGUF file (starts with {found:?}, expected \"GGUF\")")]
    Magic { path: String, found: String },
    #[error("{path}: unsupported GGUF version {version} (this reader knows 2 and 3)")]
    Version { path: String, version: u32 },
    #[error("{path}: malformed GGUF header: {message}")]
    Malformed { path: String, message: String },
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// A metadata value. Arrays keep their length only, except integer arrays
/// of at most [`MAX_KEPT_INTS`] entries (per-layer values), which keep their
/// values: nobody needs a vocabulary printed.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Any integer type.
    Int(i64),
    /// `f32` or `f64`.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A UTF-8 string (invalid bytes replaced).
    Str(String),
    /// An array, by its length.
    Array(u64),
    /// A short integer array, by its values; any integer array whose key
    /// [`read_header_keeping`] was asked to keep.
    Ints(Vec<i64>),
    /// An array of strings whose key [`read_header_keeping`] was asked to
    /// keep (a tokenizer's vocabulary and merges).
    Strs(Vec<String>),
}

/// The KV cache's shape for one token, summed over the layers, as
/// llama.cpp allocates it: keys of `key_length × head_count_kv` elements per
/// layer and values of `value_length × head_count_kv`; for MLA models
/// (DeepSeek-V2/V3: `kv_lora_rank` and `key_length_mla` set) one compressed
/// latent of `kv_lora_rank + rope.dimension_count` elements per layer and no
/// separate values (they are read from the key cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    /// Layers (`block_count`).
    pub layers: u32,
    /// Key elements per token, all layers.
    pub k_elements: u64,
    /// Value elements per token, all layers (0 for MLA).
    pub v_elements: u64,
}

impl KvShape {
    /// The shape from the model's overall sizes, assuming every layer has
    /// `n_head_kv` heads of `n_embd / n_head` elements for keys and values:
    /// the fallback when a file lacks the attention keys (wrong for models
    /// whose head size is set on its own, such as Qwen3).
    pub fn from_dims(n_layer: u32, n_embd: u32, n_head: u32, n_head_kv: u32) -> KvShape {
        let head = n_embd.checked_div(n_head).unwrap_or(0);
        let per_layer = u64::from(head) * u64::from(n_head_kv) * u64::from(n_layer);
        KvShape {
            layers: n_layer,
            k_elements: per_layer,
            v_elements: per_layer,
        }
    }
}

/// The header of a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub version: u32,
    pub tensor_count: u64,
    pub metadata: BTreeMap<String, Value>,
}

impl Header {
    /// The string value of `key`.
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.metadata.get(key) {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The integer value of `key`.
    pub fn int(&self, key: &str) -> Option<i64> {
        match self.metadata.get(key) {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        }
    }

    /// The boolean value of `key`.
    pub fn bool(&self, key: &str) -> Option<bool> {
        match self.metadata.get(key) {
            Some(Value::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    /// The strings of the array `key`, when it was kept
    /// ([`read_header_keeping`]).
    pub fn strs(&self, key: &str) -> Option<&[String]> {
        match self.metadata.get(key) {
            Some(Value::Strs(v)) => Some(v),
            _ => None,
        }
    }

    /// The integers of the array `key`, when it was kept (or is short).
    pub fn ints(&self, key: &str) -> Option<&[i64]> {
        match self.metadata.get(key) {
            Some(Value::Ints(v)) => Some(v),
            _ => None,
        }
    }

    /// `general.architecture` (`qwen2`, `llama`, `deepseek2`, ...).
    pub fn architecture(&self) -> Option<&str> {
        self.str("general.architecture")
    }

    /// The context length the model was trained with.
    pub fn context_length(&self) -> Option<i64> {
        self.int(&format!("{}.context_length", self.architecture()?))
    }

    /// `<arch>.KEY` for layer `layer`: the value itself, or the layer's
    /// entry when the file stores one per layer.
    fn arch_layer_int(&self, key: &str, layer: usize) -> Option<i64> {
        layer_int(self.arch_value(key), layer)
    }

    /// `<arch>.KEY`'s value, if the file has it.
    fn arch_value(&self, key: &str) -> Option<&Value> {
        self.metadata
            .get(&format!("{}.{key}", self.architecture()?))
    }

    /// The KV cache's shape per token from the file's own keys
    /// (`<arch>.block_count`, `.attention.head_count_kv` (a number or one
    /// per layer), `.attention.key_length`, `.attention.value_length`, and
    /// for MLA `.attention.kv_lora_rank` + `.rope.dimension_count`). Missing
    /// head sizes fall back to `embedding_length / head_count`, missing
    /// `head_count_kv` to `head_count`; `None` without `block_count` or the
    /// head counts.
    pub fn kv_shape(&self) -> Option<KvShape> {
        let layers = u32::try_from(self.arch_layer_int("block_count", 0)?).ok()?;
        if layers > MAX_LAYERS {
            return None;
        }
        let mla_rank = self.arch_layer_int("attention.kv_lora_rank", 0);
        let mla =
            mla_rank.is_some() && self.arch_layer_int("attention.key_length_mla", 0).is_some();
        let mut shape = KvShape {
            layers,
            k_elements: 0,
            v_elements: 0,
        };
        if mla {
            let rank = mla_rank.unwrap_or(0);
            let rope = self.arch_layer_int("rope.dimension_count", 0)?;
            let per_layer = u64::try_from(rank.checked_add(rope)?).ok()?;
            shape.k_elements = per_layer.checked_mul(u64::from(layers))?;
            return Some(shape);
        }
        // Each key looked up once, not once per layer.
        let head_count = self.arch_value("attention.head_count");
        let head_count_kv = self.arch_value("attention.head_count_kv");
        let embedding = self.arch_layer_int("embedding_length", 0);
        let key_length = self.arch_value("attention.key_length");
        let value_length = self.arch_value("attention.value_length");
        for layer in 0..layers as usize {
            let heads = layer_int(head_count, layer)?;
            let kv_heads = layer_int(head_count_kv, layer).unwrap_or(heads);
            let fallback = embedding.and_then(|e| e.checked_div(heads));
            let key = layer_int(key_length, layer).or(fallback);
            let value = layer_int(value_length, layer).or(key);
            let (key, value) = (key?, value?);
            let k = u64::try_from(key.checked_mul(kv_heads)?).ok()?;
            let v = u64::try_from(value.checked_mul(kv_heads)?).ok()?;
            shape.k_elements = shape.k_elements.checked_add(k)?;
            shape.v_elements = shape.v_elements.checked_add(v)?;
        }
        Some(shape)
    }
}

/// `value` for layer `layer`: the value itself, or the layer's entry when
/// the file stores one per layer.
fn layer_int(value: Option<&Value>, layer: usize) -> Option<i64> {
    match value? {
        Value::Int(n) => Some(*n),
        Value::Ints(v) => v.get(layer).copied(),
        _ => None,
    }
}

/// Reads the header of the GGUF file at `path`.
pub fn read_header(path: &Path) -> Result<Header, GgufError> {
    read_header_keeping(path, &[])
}

/// Reads the header of the GGUF file at `path`, keeping every value of the
/// arrays named in `keep` (strings as [`Value::Strs`], integers as
/// [`Value::Ints`]; other arrays are still only counted).
pub fn read_header_keeping(path: &Path, keep: &[&str]) -> Result<Header, GgufError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| GgufError::Io {
        path: name.clone(),
        source,
    })?;
    parse_header_keeping(BufReader::new(file), &name, keep)
}

/// Reads a GGUF header from `reader` (the start of a GGUF file); `name`
/// names the file in errors.
pub fn parse_header<R: Read>(reader: R, name: &str) -> Result<Header, GgufError> {
    parse_header_keeping(reader, name, &[])
}

/// [`parse_header`], keeping the arrays named in `keep` whole (see
/// [`read_header_keeping`]).
pub fn parse_header_keeping<R: Read>(
    reader: R,
    name: &str,
    keep: &[&str],
) -> Result<Header, GgufError> {
    let mut r = Reader {
        inner: reader,
        path: name.to_string(),
    };
    let mut magic = [0u8; 4];
    r.fill(&mut magic)?;
    if &magic != MAGIC {
        return Err(GgufError::Magic {
            path: r.path,
            found: String::from_utf8_lossy(&magic).into_owned(),
        });
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::Version {
            path: r.path,
            version,
        });
    }
    let tensor_count = r.u64()?;
    let kv_count = r.u64()?;
    if kv_count > MAX_LEN {
        return Err(r.malformed(format!("{kv_count} metadata entries")));
    }
    let mut metadata = BTreeMap::new();
    for _ in 0..kv_count {
        let key = r.string()?;
        let kind = r.u32()?;
        let value = r.value(kind, keep.contains(&key.as_str()))?;
        metadata.insert(key, value);
    }
    Ok(Header {
        version,
        tensor_count,
        metadata,
    })
}

struct Reader<R> {
    inner: R,
    path: String,
}

impl<R: Read> Reader<R> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), GgufError> {
        self.inner.read_exact(buf).map_err(|source| GgufError::Io {
            path: self.path.clone(),
            source,
        })
    }

    fn malformed(&self, message: String) -> GgufError {
        GgufError::Malformed {
            path: self.path.clone(),
            message,
        }
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut b = [0u8; N];
        self.fill(&mut b)?;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn string(&mut self) -> Result<String, GgufError> {
        let len = self.u64()?;
        if len > MAX_LEN {
            return Err(self.malformed(format!("string of {len} bytes")));
        }
        // Read what is there (at most `len` bytes) rather than allocating
        // `len` bytes a truncated file does not have.
        let mut buf = Vec::new();
        let read = (&mut self.inner)
            .take(len)
            .read_to_end(&mut buf)
            .map_err(|source| GgufError::Io {
                path: self.path.clone(),
                source,
            })?;
        if (read as u64) < len {
            return Err(GgufError::Io {
                path: self.path.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("a string of {len} bytes ends after {read}"),
                ),
            });
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// A value of type `kind`; an array's values are held when `keep` says
    /// so (or it is a short integer array).
    fn value(&mut self, kind: u32, keep: bool) -> Result<Value, GgufError> {
        Ok(match kind {
            0 => Value::Int(u8::from_le_bytes(self.bytes()?).into()),
            1 => Value::Int(i8::from_le_bytes(self.bytes()?).into()),
            2 => Value::Int(u16::from_le_bytes(self.bytes()?).into()),
            3 => Value::Int(i16::from_le_bytes(self.bytes()?).into()),
            4 => Value::Int(self.u32()?.into()),
            5 => Value::Int(i32::from_le_bytes(self.bytes()?).into()),
            6 => Value::Float(f32::from_le_bytes(self.bytes()?).into()),
            7 => Value::Bool(self.bytes::<1>()?[0] != 0),
            8 => Value::Str(self.string()?),
            9 => {
                let item = self.u32()?;
                let len = self.u64()?;
                if len > MAX_LEN || item == 9 {
                    return Err(self.malformed(format!("array of {len} items of type {item}")));
                }
                let integers = matches!(item, 0..=5 | 10 | 11) && (keep || len <= MAX_KEPT_INTS);
                let strings = item == 8 && keep;
                let mut ints = Vec::new();
                let mut strs = Vec::new();
                for _ in 0..len {
                    // Only a kept array's values are stored: another one
                    // is counted, not held in memory.
                    match (self.value(item, false)?, integers, strings) {
                        (Value::Int(n), true, _) => ints.push(n),
                        (Value::Str(s), _, true) => strs.push(s),
                        _ => {}
                    }
                }
                if integers {
                    Value::Ints(ints)
                } else if strings {
                    Value::Strs(strs)
                } else {
                    Value::Array(len)
                }
            }
            10 => Value::Int(i64::try_from(self.u64()?).unwrap_or(i64::MAX)),
            11 => Value::Int(i64::from_le_bytes(self.bytes()?)),
            12 => Value::Float(f64::from_le_bytes(self.bytes()?)),
            other => return Err(self.malformed(format!("unknown value type {other}"))),
        })
    }
}

/// A metadata value for [`header`].
pub enum Meta<'a> {
    Str(&'a str),
    U32(u32),
    U32s(&'a [u32]),
    I32s(&'a [i32]),
    Strs(&'a [&'a str]),
    Bool(bool),
}

/// A GGUF v3 header holding exactly `entries` and no tensors (for the
/// tests of code that reads model headers).
pub fn header(entries: &[(&str, Meta<'_>)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    let s = |b: &mut Vec<u8>, s: &str| {
        b.extend_from_slice(&(s.len() as u64).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
    };
    for (k, v) in entries {
        s(&mut b, k);
        match v {
            Meta::Str(v) => {
                b.extend_from_slice(&8u32.to_le_bytes());
                s(&mut b, v);
            }
            Meta::U32(v) => {
                b.extend_from_slice(&4u32.to_le_bytes());
                b.extend_from_slice(&v.to_le_bytes());
            }
            Meta::U32s(vs) => {
                b.extend_from_slice(&9u32.to_le_bytes());
                b.extend_from_slice(&4u32.to_le_bytes());
                b.extend_from_slice(&(vs.len() as u64).to_le_bytes());
                for v in *vs {
                    b.extend_from_slice(&v.to_le_bytes());
                }
            }
            Meta::I32s(vs) => {
                b.extend_from_slice(&9u32.to_le_bytes());
                b.extend_from_slice(&5u32.to_le_bytes());
                b.extend_from_slice(&(vs.len() as u64).to_le_bytes());
                for v in *vs {
                    b.extend_from_slice(&v.to_le_bytes());
                }
            }
            Meta::Strs(vs) => {
                b.extend_from_slice(&9u32.to_le_bytes());
                b.extend_from_slice(&8u32.to_le_bytes());
                b.extend_from_slice(&(vs.len() as u64).to_le_bytes());
                for v in *vs {
                    s(&mut b, v);
                }
            }
            Meta::Bool(v) => {
                b.extend_from_slice(&7u32.to_le_bytes());
                b.push(u8::from(*v));
            }
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a minimal GGUF v3 header with the given string and u32 pairs.
    pub(crate) fn write_gguf(path: &Path, strings: &[(&str, &str)], ints: &[(&str, u32)]) {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&((strings.len() + ints.len() + 1) as u64).to_le_bytes());
        let s = |b: &mut Vec<u8>, s: &str| {
            b.extend_from_slice(&(s.len() as u64).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
        };
        for (k, v) in strings {
            s(&mut b, k);
            b.extend_from_slice(&8u32.to_le_bytes());
            s(&mut b, v);
        }
        for (k, v) in ints {
            s(&mut b, k);
            b.extend_from_slice(&4u32.to_le_bytes());
            b.extend_from_slice(&v.to_le_bytes());
        }
        // An array of three strings, as tokenizer vocabularies are stored.
        s(&mut b, "tokenizer.ggml.tokens");
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&3u64.to_le_bytes());
        for t in ["a", "bb", "ccc"] {
            s(&mut b, t);
        }
        std::fs::write(path, b).unwrap();
    }

    #[test]
    fn reads_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        write_gguf(
            &path,
            &[("general.architecture", "qwen2"), ("general.name", "tiny")],
            &[("qwen2.context_length", 32768), ("general.file_type", 15)],
        );
        let h = read_header(&path).unwrap();
        assert_eq!(h.version, 3);
        assert_eq!(h.architecture(), Some("qwen2"));
        assert_eq!(h.context_length(), Some(32768));
        assert_eq!(h.str("general.name"), Some("tiny"));
        assert_eq!(
            h.metadata.get("tokenizer.ggml.tokens"),
            Some(&Value::Array(3))
        );
    }

    /// Writes a GGUF v3 header holding exactly `entries` ([`super::header`]).
    pub(crate) fn write_values(path: &Path, entries: &[(&str, Meta<'_>)]) {
        std::fs::write(path, header(entries)).unwrap();
    }

    #[test]
    fn kv_shape_comes_from_the_attention_keys() {
        use Meta::{Str, U32s, U32};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let hybrid_heads: Vec<u32> = (0..4).map(|i| if i % 2 == 0 { 0 } else { 8 }).collect();
        type Case<'a> = (&'a str, Vec<(&'a str, Meta<'a>)>, Option<KvShape>);
        #[rustfmt::skip]
        let cases: Vec<Case<'_>> = vec![
            // Qwen2.5-0.5B: no key_length, head = 896 / 14 = 64, 2 KV heads.
            ("qwen2.5-0.5b", vec![
                ("general.architecture", Str("qwen2")), ("qwen2.block_count", U32(24)),
                ("qwen2.embedding_length", U32(896)), ("qwen2.attention.head_count", U32(14)),
                ("qwen2.attention.head_count_kv", U32(2)),
            ], Some(KvShape { layers: 24, k_elements: 24 * 2 * 64, v_elements: 24 * 2 * 64 })),
            // Qwen3-4B: head 128 set on its own (2560 / 32 would say 80).
            ("qwen3-4b", vec![
                ("general.architecture", Str("qwen3")), ("qwen3.block_count", U32(36)),
                ("qwen3.embedding_length", U32(2560)), ("qwen3.attention.head_count", U32(32)),
                ("qwen3.attention.head_count_kv", U32(8)),
                ("qwen3.attention.key_length", U32(128)), ("qwen3.attention.value_length", U32(128)),
            ], Some(KvShape { layers: 36, k_elements: 36 * 8 * 128, v_elements: 36 * 8 * 128 })),
            // DeepSeek-V2-Lite as llama.cpp converts it today: MLA, one latent
            // of kv_lora_rank 512 + rope 64 per layer, no value cache.
            ("deepseek-v2-lite", vec![
                ("general.architecture", Str("deepseek2")), ("deepseek2.block_count", U32(27)),
                ("deepseek2.embedding_length", U32(2048)), ("deepseek2.attention.head_count", U32(16)),
                ("deepseek2.attention.head_count_kv", U32(1)),
                ("deepseek2.attention.key_length", U32(576)), ("deepseek2.attention.value_length", U32(512)),
                ("deepseek2.attention.key_length_mla", U32(192)), ("deepseek2.attention.value_length_mla", U32(128)),
                ("deepseek2.attention.kv_lora_rank", U32(512)), ("deepseek2.rope.dimension_count", U32(64)),
            ], Some(KvShape { layers: 27, k_elements: 27 * 576, v_elements: 0 })),
            // An older DeepSeek-V2 conversion (no key_length_mla): llama.cpp
            // caches full keys (192) and values (128) per head.
            ("deepseek-v2-old", vec![
                ("general.architecture", Str("deepseek2")), ("deepseek2.block_count", U32(27)),
                ("deepseek2.attention.head_count", U32(16)), ("deepseek2.attention.head_count_kv", U32(16)),
                ("deepseek2.attention.key_length", U32(192)), ("deepseek2.attention.value_length", U32(128)),
                ("deepseek2.attention.kv_lora_rank", U32(512)), ("deepseek2.rope.dimension_count", U32(64)),
            ], Some(KvShape { layers: 27, k_elements: 27 * 16 * 192, v_elements: 27 * 16 * 128 })),
            // Per-layer KV heads (a hybrid: every other layer without attention).
            ("per-layer", vec![
                ("general.architecture", Str("hyb")), ("hyb.block_count", U32(4)),
                ("hyb.attention.head_count", U32(16)), ("hyb.attention.head_count_kv", U32s(&hybrid_heads)),
                ("hyb.attention.key_length", U32(64)),
            ], Some(KvShape { layers: 4, k_elements: 2 * 8 * 64, v_elements: 2 * 8 * 64 })),
            ("no block_count", vec![
                ("general.architecture", Str("qwen2")), ("qwen2.attention.head_count", U32(14)),
            ], None),
            // Forged headers (found by fuzzing): billions of layers, products
            // past i64. None, at once, not a hang or an overflow.
            ("layers past MAX_LAYERS", vec![
                ("general.architecture", Str("x")), ("x.block_count", U32(u32::MAX)),
                ("x.attention.head_count", U32(1)), ("x.attention.key_length", U32(1)),
            ], None),
            ("head size times heads past i64", vec![
                ("general.architecture", Str("x")), ("x.block_count", U32(1)),
                ("x.attention.head_count", U32(u32::MAX)), ("x.attention.key_length", U32(u32::MAX)),
            ], None),
            ("layers at MAX_LAYERS", vec![
                ("general.architecture", Str("x")), ("x.block_count", U32(MAX_LAYERS)),
                ("x.attention.head_count", U32(2)), ("x.attention.key_length", U32(3)),
            ], Some(KvShape { layers: MAX_LAYERS, k_elements: 6 * u64::from(MAX_LAYERS), v_elements: 6 * u64::from(MAX_LAYERS) })),
        ];
        for (name, entries, want) in cases {
            write_values(&path, &entries);
            let h = read_header(&path).unwrap();
            assert_eq!(h.kv_shape(), want, "{name}");
        }
        assert_eq!(
            KvShape::from_dims(24, 896, 14, 2),
            KvShape {
                layers: 24,
                k_elements: 3072,
                v_elements: 3072
            }
        );
    }

    #[test]
    fn arrays_are_kept_only_when_asked() {
        use Meta::{Bool, I32s, Strs};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let types: Vec<i32> = vec![1; MAX_KEPT_INTS as usize + 1];
        write_values(
            &path,
            &[
                ("tokenizer.ggml.tokens", Strs(&["a", "Ġb", "<|im_end|>"])),
                ("tokenizer.ggml.merges", Strs(&["Ġ b"])),
                ("tokenizer.ggml.token_type", I32s(&types)),
                ("tokenizer.ggml.add_bos_token", Bool(false)),
            ],
        );
        let plain = read_header(&path).unwrap();
        assert_eq!(plain.strs("tokenizer.ggml.tokens"), None);
        assert_eq!(
            plain.metadata.get("tokenizer.ggml.token_type"),
            Some(&Value::Array(MAX_KEPT_INTS + 1))
        );
        assert_eq!(plain.bool("tokenizer.ggml.add_bos_token"), Some(false));
        let kept = read_header_keeping(
            &path,
            &["tokenizer.ggml.tokens", "tokenizer.ggml.token_type"],
        )
        .unwrap();
        assert_eq!(
            kept.strs("tokenizer.ggml.tokens"),
            Some(&["a".to_string(), "Ġb".to_string(), "<|im_end|>".to_string()][..])
        );
        assert_eq!(kept.strs("tokenizer.ggml.merges"), None);
        assert_eq!(
            kept.ints("tokenizer.ggml.token_type").map(<[i64]>::len),
            Some(types.len())
        );
    }

    #[test]
    fn refuses_non_gguf_and_truncated_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gguf");
        std::fs::write(&path, b"PK\x03\x04rest").unwrap();
        let err = read_header(&path).unwrap_err().to_string();
        assert!(err.contains("not a GGUF file"), "{err}");
        std::fs::write(&path, b"GGUF\x03\x00\x00\x00\x00").unwrap();
        let err = read_header(&path).unwrap_err().to_string();
        assert!(err.contains("cannot read"), "{err}");
    }

    #[test]
    fn a_string_longer_than_the_file_is_an_error_not_an_allocation() {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        // A key claiming MAX_LEN bytes, followed by three.
        b.extend_from_slice(&MAX_LEN.to_le_bytes());
        b.extend_from_slice(b"abc");
        let err = parse_header(&b[..], "forged.gguf").unwrap_err().to_string();
        assert_eq!(
            err,
            format!("cannot read forged.gguf: a string of {MAX_LEN} bytes ends after 3")
        );
    }
}
