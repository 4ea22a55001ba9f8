//! A whole GGUF file beyond its header's values ([`crate::gguf`]): the
//! metadata entries as raw bytes (to copy them into another file
//! unchanged), the tensor infos, the ggml tensor types' block sizes, and
//! writing a file of given metadata and tensors whose data a callback
//! fills.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use crate::gguf::{GgufError, MAGIC, MAX_LEN};

/// Where tensor data starts, and each tensor's, unless
/// `general.alignment` says otherwise: ggml's default.
pub const ALIGNMENT: u64 = 32;

/// A ggml tensor type this module knows the block layout of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    BF16,
}

impl TensorType {
    /// ggml's number for it.
    pub fn id(self) -> u32 {
        match self {
            TensorType::F32 => 0,
            TensorType::F16 => 1,
            TensorType::Q4_0 => 2,
            TensorType::Q4_1 => 3,
            TensorType::Q5_0 => 6,
            TensorType::Q5_1 => 7,
            TensorType::Q8_0 => 8,
            TensorType::Q2K => 10,
            TensorType::Q3K => 11,
            TensorType::Q4K => 12,
            TensorType::Q5K => 13,
            TensorType::Q6K => 14,
            TensorType::BF16 => 30,
        }
    }

    /// The type of ggml's number `id`.
    pub fn from_id(id: u32) -> Option<TensorType> {
        ALL.iter().copied().find(|t| t.id() == id)
    }

    /// ggml's name (`q4_K`).
    pub fn name(self) -> &'static str {
        match self {
            TensorType::F32 => "f32",
            TensorType::F16 => "f16",
            TensorType::Q4_0 => "q4_0",
            TensorType::Q4_1 => "q4_1",
            TensorType::Q5_0 => "q5_0",
            TensorType::Q5_1 => "q5_1",
            TensorType::Q8_0 => "q8_0",
            TensorType::Q2K => "q2_K",
            TensorType::Q3K => "q3_K",
            TensorType::Q4K => "q4_K",
            TensorType::Q5K => "q5_K",
            TensorType::Q6K => "q6_K",
            TensorType::BF16 => "bf16",
        }
    }

    /// Elements per block, and bytes per block (ggml's `blck_size`,
    /// `type_size`).
    pub fn block(self) -> (u64, u64) {
        match self {
            TensorType::F32 => (1, 4),
            TensorType::F16 | TensorType::BF16 => (1, 2),
            TensorType::Q4_0 => (32, 18),
            TensorType::Q4_1 => (32, 20),
            TensorType::Q5_0 => (32, 22),
            TensorType::Q5_1 => (32, 24),
            TensorType::Q8_0 => (32, 34),
            TensorType::Q2K => (256, 84),
            TensorType::Q3K => (256, 110),
            TensorType::Q4K => (256, 144),
            TensorType::Q5K => (256, 176),
            TensorType::Q6K => (256, 210),
        }
    }

    /// Byte offsets of a block's f16 scales (`d`, `dmin`), which must be
    /// finite numbers; every other byte of a quantised block is a quant or
    /// a packed sub-scale, valid whatever its value.
    pub fn scale_offsets(self) -> &'static [usize] {
        match self {
            TensorType::Q4_0 | TensorType::Q5_0 | TensorType::Q8_0 => &[0],
            TensorType::Q4_1 | TensorType::Q5_1 | TensorType::Q4K | TensorType::Q5K => &[0, 2],
            TensorType::Q2K => &[80, 82],
            TensorType::Q3K => &[108],
            TensorType::Q6K => &[208],
            TensorType::F32 | TensorType::F16 | TensorType::BF16 => &[],
        }
    }
}

const ALL: [TensorType; 13] = [
    TensorType::F32,
    TensorType::F16,
    TensorType::Q4_0,
    TensorType::Q4_1,
    TensorType::Q5_0,
    TensorType::Q5_1,
    TensorType::Q8_0,
    TensorType::Q2K,
    TensorType::Q3K,
    TensorType::Q4K,
    TensorType::Q5K,
    TensorType::Q6K,
    TensorType::BF16,
];

/// One tensor's info: its name, its dimensions (ggml's order: the first
/// is the row), its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<u64>,
    /// ggml's type number (see [`TensorType::from_id`]).
    pub kind: u32,
}

impl TensorInfo {
    pub fn new(name: &str, dims: &[u64], kind: TensorType) -> TensorInfo {
        TensorInfo {
            name: name.to_string(),
            dims: dims.to_vec(),
            kind: kind.id(),
        }
    }

    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Its data's size in bytes, or `None` for a type this module does not
    /// know or rows that are no whole number of blocks.
    pub fn bytes(&self) -> Option<u64> {
        let (block, size) = TensorType::from_id(self.kind)?.block();
        let row = *self.dims.first()?;
        (row % block == 0).then(|| self.elements() / block * size)
    }
}

/// A metadata entry as it is encoded: the key, and the bytes of its type
/// and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    pub key: String,
    pub encoded: Vec<u8>,
}

impl RawEntry {
    /// A string value.
    pub fn str(key: &str, value: &str) -> RawEntry {
        let mut v = (value.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(value.as_bytes());
        RawEntry::of(key, 8, &v)
    }

    /// A `u32` value.
    pub fn u32(key: &str, value: u32) -> RawEntry {
        RawEntry::of(key, 4, &value.to_le_bytes())
    }

    /// An `f32` value.
    pub fn f32(key: &str, value: f32) -> RawEntry {
        RawEntry::of(key, 6, &value.to_le_bytes())
    }

    /// A value of GGUF type `kind`, encoded as `value`.
    fn of(key: &str, kind: u32, value: &[u8]) -> RawEntry {
        let mut encoded = kind.to_le_bytes().to_vec();
        encoded.extend_from_slice(value);
        RawEntry {
            key: key.into(),
            encoded,
        }
    }
}

/// The metadata entries (raw) and tensor infos of a GGUF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub entries: Vec<RawEntry>,
    pub tensors: Vec<TensorInfo>,
}

/// Reads the metadata and tensor infos of the GGUF file at `path` (not its
/// tensor data).
pub fn read_layout(path: &Path) -> Result<Layout, GgufError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| GgufError::Io {
        path: name.clone(),
        source,
    })?;
    parse_layout(BufReader::new(file), &name)
}

struct Raw<R> {
    inner: R,
    path: String,
}

impl<R: Read> Raw<R> {
    fn take(&mut self, n: u64, out: &mut Vec<u8>) -> Result<(), GgufError> {
        let read = (&mut self.inner)
            .take(n)
            .read_to_end(out)
            .map_err(|source| GgufError::Io {
                path: self.path.clone(),
                source,
            })?;
        if (read as u64) < n {
            return Err(self.malformed(format!("ends inside a value ({read} of {n} bytes)")));
        }
        Ok(())
    }

    fn malformed(&self, message: String) -> GgufError {
        GgufError::Malformed {
            path: self.path.clone(),
            message,
        }
    }

    /// The next `N` bytes, also appended to `out`.
    fn bytes<const N: usize>(&mut self, out: &mut Vec<u8>) -> Result<[u8; N], GgufError> {
        let at = out.len();
        self.take(N as u64, out)?;
        let mut b = [0u8; N];
        b.copy_from_slice(&out[at..at + N]);
        Ok(b)
    }

    fn u32(&mut self, out: &mut Vec<u8>) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.bytes(out)?))
    }

    fn u64(&mut self, out: &mut Vec<u8>) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.bytes(out)?))
    }

    fn string(&mut self, out: &mut Vec<u8>) -> Result<String, GgufError> {
        let len = self.u64(out)?;
        if len > MAX_LEN {
            return Err(self.malformed(format!("string of {len} bytes")));
        }
        let at = out.len();
        self.take(len, out)?;
        Ok(String::from_utf8_lossy(&out[at..]).into_owned())
    }

    /// A value of type `kind`, its bytes appended to `out`.
    fn value(&mut self, kind: u32, out: &mut Vec<u8>) -> Result<(), GgufError> {
        match kind {
            0 | 1 | 7 => self.take(1, out),
            2 | 3 => self.take(2, out),
            4..=6 => self.take(4, out),
            10..=12 => self.take(8, out),
            8 => self.string(out).map(|_| ()),
            9 => {
                let item = self.u32(out)?;
                let len = self.u64(out)?;
                if len > MAX_LEN || item == 9 {
                    return Err(self.malformed(format!("array of {len} items of type {item}")));
                }
                for _ in 0..len {
                    self.value(item, out)?;
                }
                Ok(())
            }
            other => Err(self.malformed(format!("unknown value type {other}"))),
        }
    }
}

/// [`read_layout`] of any reader; `name` names it in errors.
pub fn parse_layout<R: Read>(reader: R, name: &str) -> Result<Layout, GgufError> {
    let mut r = Raw {
        inner: reader,
        path: name.to_string(),
    };
    let mut scratch = Vec::new();
    r.take(4, &mut scratch)?;
    if scratch.as_slice() != MAGIC {
        return Err(GgufError::Magic {
            path: name.to_string(),
            found: String::from_utf8_lossy(&scratch).into_owned(),
        });
    }
    let version = r.u32(&mut scratch)?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::Version {
            path: name.to_string(),
            version,
        });
    }
    let tensor_count = r.u64(&mut scratch)?;
    let kv_count = r.u64(&mut scratch)?;
    if kv_count > MAX_LEN || tensor_count > MAX_LEN {
        return Err(r.malformed(format!("{kv_count} entries, {tensor_count} tensors")));
    }
    let mut entries = Vec::new();
    for _ in 0..kv_count {
        let mut key = Vec::new();
        let key = r.string(&mut key)?;
        let mut encoded = Vec::new();
        let kind = r.u32(&mut encoded)?;
        r.value(kind, &mut encoded)?;
        entries.push(RawEntry { key, encoded });
    }
    let mut tensors = Vec::new();
    for _ in 0..tensor_count {
        let mut s = Vec::new();
        let name = r.string(&mut s)?;
        let n_dims = r.u32(&mut s)?;
        if n_dims > 4 {
            return Err(r.malformed(format!("tensor {name} of {n_dims} dimensions")));
        }
        let dims = (0..n_dims)
            .map(|_| r.u64(&mut s))
            .collect::<Result<Vec<u64>, _>>()?;
        let kind = r.u32(&mut s)?;
        let _offset = r.u64(&mut s)?;
        tensors.push(TensorInfo { name, dims, kind });
    }
    Ok(Layout { entries, tensors })
}

fn write_str(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

/// Writes a GGUF v3 file at `path`: `entries`, then `tensors`' infos, then
/// each tensor's data, which `fill` writes into a buffer of its size
/// ([`TensorInfo::bytes`]), aligned to [`ALIGNMENT`]. A tensor of a type or
/// shape [`TensorInfo::bytes`] cannot size is refused.
pub fn write_file(
    path: &Path,
    entries: &[RawEntry],
    tensors: &[TensorInfo],
    fill: &mut dyn FnMut(&TensorInfo, &mut [u8]),
) -> Result<(), GgufError> {
    let name = path.display().to_string();
    let io = |source| GgufError::Io {
        path: name.clone(),
        source,
    };
    let sizes: Vec<u64> = tensors
        .iter()
        .map(|t| {
            t.bytes().ok_or_else(|| GgufError::Malformed {
                path: name.clone(),
                message: format!(
                    "tensor {} of type {} and shape {:?} has no whole number of blocks",
                    t.name, t.kind, t.dims
                ),
            })
        })
        .collect::<Result<_, _>>()?;
    let pad = |n: u64| n.div_ceil(ALIGNMENT) * ALIGNMENT;
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = BufWriter::with_capacity(1 << 22, file);
    let mut header = Vec::new();
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&3u32.to_le_bytes());
    header.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    header.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for e in entries {
        write_str(&mut header, &e.key).map_err(io)?;
        header.extend_from_slice(&e.encoded);
    }
    let mut offset = 0u64;
    for (t, size) in tensors.iter().zip(&sizes) {
        write_str(&mut header, &t.name).map_err(io)?;
        header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            header.extend_from_slice(&d.to_le_bytes());
        }
        header.extend_from_slice(&t.kind.to_le_bytes());
        header.extend_from_slice(&offset.to_le_bytes());
        offset = pad(offset + size);
    }
    let start = pad(header.len() as u64);
    header.resize(start as usize, 0);
    w.write_all(&header).map_err(io)?;
    let mut buf = Vec::new();
    for (t, &size) in tensors.iter().zip(&sizes) {
        buf.clear();
        buf.resize(size as usize, 0);
        fill(t, &mut buf);
        w.write_all(&buf).map_err(io)?;
        let padding = (pad(size) - size) as usize;
        w.write_all(&vec![0u8; padding]).map_err(io)?;
    }
    w.flush().map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::read_header;

    #[test]
    fn a_written_file_reads_back_with_its_entries_tensors_and_alignment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        let entries = vec![
            RawEntry::str("general.architecture", "qwen2"),
            RawEntry::u32("qwen2.block_count", 2),
            RawEntry::f32("qwen2.rope.freq_base", 1e6),
        ];
        let tensors = vec![
            TensorInfo::new("a", &[64, 3], TensorType::Q4_0),
            TensorInfo::new("b", &[5], TensorType::F32),
            TensorInfo::new("c", &[256, 2], TensorType::Q6K),
        ];
        let mut filled = Vec::new();
        write_file(&path, &entries, &tensors, &mut |t, buf| {
            filled.push((t.name.clone(), buf.len()));
            buf.fill(7);
        })
        .unwrap();
        assert_eq!(
            filled,
            [
                ("a".to_string(), 2 * 3 * 18),
                ("b".to_string(), 20),
                ("c".to_string(), 2 * 210)
            ]
        );
        let layout = read_layout(&path).unwrap();
        assert_eq!(layout.entries, entries);
        assert_eq!(layout.tensors, tensors);
        let header = read_header(&path).unwrap();
        assert_eq!(header.tensor_count, 3);
        assert_eq!(header.int("qwen2.block_count"), Some(2));
        // Data aligned: the file is the padded header plus each padded
        // tensor (108 -> 128, 20 -> 32, 420 -> 448).
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(len % ALIGNMENT, 0);
        assert!(len >= 128 + 32 + 448);
        let odd = [TensorInfo::new("x", &[30, 2], TensorType::Q4_0)];
        assert!(write_file(&path, &[], &odd, &mut |_, _| {}).is_err());
    }

    #[test]
    fn block_sizes_are_ggmls() {
        for (t, block, bytes) in [
            (TensorType::Q4_0, 32, 18),
            (TensorType::Q8_0, 32, 34),
            (TensorType::Q4K, 256, 144),
            (TensorType::Q6K, 256, 210),
        ] {
            assert_eq!(t.block(), (block, bytes), "{}", t.name());
            assert_eq!(TensorType::from_id(t.id()), Some(t));
        }
    }
}
