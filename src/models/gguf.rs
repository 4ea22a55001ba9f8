//! Reading a GGUF file's header: magic, version, and the metadata key-value
//! pairs (architecture, context length, quantisation, ...). Tensor data is
//! never read.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::Path;

/// The four bytes every GGUF file starts with.
pub const MAGIC: &[u8; 4] = b"GGUF";

/// Strings and arrays longer than this are not GGUF metadata we can trust
/// (the largest real ones, tokenizer vocabularies, hold ~250k entries).
const MAX_LEN: u64 = 1 << 26;

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

/// A metadata value. Arrays keep their length and, for short scalar arrays,
/// nothing else: nobody needs a vocabulary printed.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(u64),
}

/// The header of a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub version: u32,
    pub tensor_count: u64,
    pub metadata: BTreeMap<String, Value>,
}

impl Header {
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.metadata.get(key) {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        match self.metadata.get(key) {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        }
    }

    pub fn architecture(&self) -> Option<&str> {
        self.str("general.architecture")
    }

    /// The context length the model was trained with.
    pub fn context_length(&self) -> Option<i64> {
        self.int(&format!("{}.context_length", self.architecture()?))
    }
}

/// Reads the header of the GGUF file at `path`.
pub fn read_header(path: &Path) -> Result<Header, GgufError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| GgufError::Io {
        path: name.clone(),
        source,
    })?;
    let mut r = Reader {
        inner: BufReader::new(file),
        path: name,
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
        let value = r.value(kind)?;
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
        let mut buf = vec![0u8; len as usize];
        self.fill(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    fn value(&mut self, kind: u32) -> Result<Value, GgufError> {
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
                for _ in 0..len {
                    self.value(item)?;
                }
                Value::Array(len)
            }
            10 => Value::Int(i64::try_from(self.u64()?).unwrap_or(i64::MAX)),
            11 => Value::Int(i64::from_le_bytes(self.bytes()?)),
            12 => Value::Float(f64::from_le_bytes(self.bytes()?)),
            other => return Err(self.malformed(format!("unknown value type {other}"))),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
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
}
