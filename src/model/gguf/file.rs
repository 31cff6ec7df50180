//! A GGUF file opened: its header and metadata read by candle's reader, every tensor's byte
//! size computed with checked arithmetic and bounded by the file's length before it is read.

use crate::error::{Error, Result};
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value};
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

/// The first four bytes of every GGUF file (gguf.md: `GGUF` as a little-endian u32).
pub const MAGIC: &[u8; 4] = b"GGUF";

/// The tensor count a GGUF header declares (gguf.md: magic, u32 version, then the tensor count:
/// u32 in version 1, u64 from version 2), the reader put back at the start; `None` when the
/// file is too short or not GGUF (candle's reader then says what is wrong).
fn declared_tensors(reader: &mut BufReader<std::fs::File>) -> std::io::Result<Option<u64>> {
    let mut head = [0u8; 16];
    let read = reader.read_exact(&mut head);
    reader.seek(std::io::SeekFrom::Start(0))?;
    match read {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
        Ok(()) if &head[..4] != MAGIC => return Ok(None),
        Ok(()) => {}
    }
    let version = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    Ok(Some(match version {
        1 => u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) as u64,
        _ => u64::from_le_bytes(head[8..16].try_into().expect("8 bytes")),
    }))
}

/// An open GGUF file: its parsed header and its length.
pub struct GgufFile {
    pub path: PathBuf,
    pub content: Content,
    pub len: u64,
    reader: BufReader<std::fs::File>,
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::files::open(path)?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut reader = BufReader::new(file);
        let declared = declared_tensors(&mut reader).map_err(|e| Error::io(path, e))?;
        // candle's header reader divides by `general.alignment` without checking it for zero;
        // a crafted header must be an input error, never a panic.
        let what = path.display().to_string();
        let content = crate::error::contained(|| Content::read(&mut reader))
            .ok_or_else(|| {
                Error::input(&what, "malformed GGUF header (general.alignment must be a power of two)")
            })?
            .map_err(|e| Error::input(&what, format!("not a readable GGUF file: {e}")))?;
        if content.tensor_data_offset > len {
            return Err(Error::input(
                what,
                format!(
                    "tensor data starts at byte {} past the end of the file ({len} bytes)",
                    content.tensor_data_offset
                ),
            ));
        }
        let mut file = GgufFile { path: path.to_path_buf(), content, len, reader };
        if let Some(n) = declared.filter(|&n| n != file.content.tensor_infos.len() as u64) {
            return Err(file.duplicates(n));
        }
        Ok(file)
    }

    /// The error of a header declaring `declared` tensors under fewer distinct names (candle's
    /// reader keeps the last of a repeated name): the repeated name, found in the header bytes as
    /// GGUF writes a name (u64 length, then the bytes), where it can be.
    pub(super) fn duplicates(&mut self, declared: u64) -> Error {
        let what = self.path.display().to_string();
        let distinct = self.content.tensor_infos.len();
        let mut header = Vec::new();
        let read = self
            .reader
            .seek(std::io::SeekFrom::Start(0))
            .and_then(|_| (&mut self.reader).take(self.content.tensor_data_offset).read_to_end(&mut header));
        let twice = read.ok().and_then(|_| {
            let mut names: Vec<&String> = self.content.tensor_infos.keys().collect();
            names.sort();
            names.into_iter().find(|n| {
                let mut needle = (n.len() as u64).to_le_bytes().to_vec();
                needle.extend_from_slice(n.as_bytes());
                memchr::memmem::find_iter(&header, &needle).nth(1).is_some()
            })
        });
        let named = twice.map(|n| format!(": tensor `{n}` is named twice")).unwrap_or_default();
        Error::input(
            what,
            format!(
                "the header declares {declared} tensors but holds {distinct} distinct names{named}; a GGUF \
                 tensor name appears once (the file is damaged or was written by a broken converter)"
            ),
        )
    }

    pub(super) fn what(&self, key: &str) -> String {
        format!("{} key `{key}`", self.path.display())
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    /// A non-negative integer of any GGUF integer type.
    pub fn uint(&self, key: &str) -> Result<Option<u64>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let n = match v {
            Value::U8(x) => Some(*x as u64),
            Value::U16(x) => Some(*x as u64),
            Value::U32(x) => Some(*x as u64),
            Value::U64(x) => Some(*x),
            Value::I8(x) => u64::try_from(*x).ok(),
            Value::I16(x) => u64::try_from(*x).ok(),
            Value::I32(x) => u64::try_from(*x).ok(),
            Value::I64(x) => u64::try_from(*x).ok(),
            _ => None,
        };
        n.map(Some).ok_or_else(|| {
            Error::input(self.what(key), format!("expected a non-negative integer, found {v:?}"))
        })
    }

    /// A number (float or integer).
    pub fn float(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::F32(x)) => Ok(Some(*x as f64)),
            Some(Value::F64(x)) => Ok(Some(*x)),
            Some(_) => Ok(self.uint(key)?.map(|n| n as f64)),
        }
    }

    pub fn string(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(Error::input(self.what(key), format!("expected a string, found {v:?}"))),
        }
    }

    pub fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(Error::input(self.what(key), format!("expected true or false, found {v:?}"))),
        }
    }

    pub fn strings(&self, key: &str) -> Result<Option<Vec<&str>>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let bad = || Error::input(self.what(key), "expected an array of strings");
        let Value::Array(items) = v else { return Err(bad()) };
        items
            .iter()
            .map(|x| match x {
                Value::String(s) => Ok(s.as_str()),
                _ => Err(bad()),
            })
            .collect::<Result<_>>()
            .map(Some)
    }

    pub fn ints(&self, key: &str) -> Result<Option<Vec<i64>>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let bad = || Error::input(self.what(key), "expected an array of integers");
        let Value::Array(items) = v else { return Err(bad()) };
        items
            .iter()
            .map(|x| match x {
                Value::I8(n) => Ok(*n as i64),
                Value::I16(n) => Ok(*n as i64),
                Value::I32(n) => Ok(*n as i64),
                Value::I64(n) => Ok(*n),
                Value::U8(n) => Ok(*n as i64),
                Value::U16(n) => Ok(*n as i64),
                Value::U32(n) => Ok(*n as i64),
                _ => Err(bad()),
            })
            .collect::<Result<_>>()
            .map(Some)
    }

    /// Tensor names, sorted (the header's own order is not kept by candle's reader).
    pub fn tensor_names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.content.tensor_infos.keys().map(String::as_str).collect();
        v.sort();
        v
    }

    /// Read one tensor and dequantize it to float32, its byte size bounded by the file first.
    pub fn dequantize(&mut self, name: &str) -> Result<candle_core::Tensor> {
        let what = format!("{} tensor `{name}`", self.path.display());
        let info =
            self.content.tensor_infos.get(name).ok_or_else(|| Error::input(&what, "not in the file"))?;
        bound_tensor(info, self.content.tensor_data_offset, self.len).map_err(|m| Error::input(&what, m))?;
        let q = info
            .read(&mut self.reader, self.content.tensor_data_offset, &candle_core::Device::Cpu)
            .map_err(|e| Error::input(&what, format!("unreadable: {e}")))?;
        let t = q
            .dequantize(&candle_core::Device::Cpu)
            .and_then(|t| t.to_dtype(candle_core::DType::F32))
            .map_err(|e| Error::input(&what, format!("cannot dequantize {:?}: {e}", info.ggml_dtype)))?;
        // As for safetensors: a NaN or ±Inf weight (a stored one, or a block scale that makes
        // one) is a damaged checkpoint, refused before any tap turns NaN.
        let values = t
            .flatten_all()
            .and_then(|f| f.to_vec1::<f32>())
            .map_err(|e| Error::input(&what, e.to_string()))?;
        let mut bad = values.iter().enumerate().filter(|(_, v)| !v.is_finite());
        if let Some((first, _)) = bad.next() {
            return Err(crate::model::weights::nonfinite_error(what, (bad.count() + 1, first)));
        }
        Ok(t)
    }

    /// xxh3-64 of the whole file, streamed.
    pub fn hash(&mut self) -> Result<String> {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        self.reader.seek(std::io::SeekFrom::Start(0)).map_err(|e| Error::io(&self.path, e))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = self.reader.read(&mut buf).map_err(|e| Error::io(&self.path, e))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(format!("xxh3:{:016x}", h.digest()))
    }
}

/// The tensor's byte size from its shape and type, with overflow-checked arithmetic, and the
/// check that it lies inside the file (candle's reader computes the element count unchecked).
fn bound_tensor(info: &TensorInfo, data_offset: u64, file_len: u64) -> std::result::Result<u64, String> {
    let dims = info.shape.dims();
    let elems = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| format!("shape {dims:?} overflows"))?;
    let block = info.ggml_dtype.block_size() as u64;
    if elems % block != 0 {
        return Err(format!(
            "{elems} elements are not a whole number of {:?} blocks of {block}",
            info.ggml_dtype
        ));
    }
    let bytes = (elems / block)
        .checked_mul(info.ggml_dtype.type_size() as u64)
        .ok_or_else(|| format!("shape {dims:?} overflows"))?;
    let start = data_offset.checked_add(info.offset).ok_or("tensor offset overflows")?;
    let end = start.checked_add(bytes).ok_or("tensor offset overflows")?;
    if end > file_len {
        return Err(format!(
            "needs bytes {start}..{end} ({:?}, shape {dims:?}) but the file has {file_len} bytes (truncated?)",
            info.ggml_dtype
        ));
    }
    Ok(bytes)
}
