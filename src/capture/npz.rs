//! A lazily indexed `.npz` reader: the zip central directory is read once at open, each
//! member is read on demand, so a caller can hold one array at a time.
//!
//! Nothing is allocated on a header's word: every npy header's shape × dtype size is
//! computed with checked arithmetic and compared with the bytes the member really holds
//! before the data is read (a 300-byte file claiming shape (10**12,) is an error, not an
//! allocation abort). Each kind of damage has its own message: not a zip, a member that is
//! not an npy array, a bad header, an unsupported dtype (named), truncated data.
//!
//! The npy format: numpy's `numpy/lib/format.py` (magic `\x93NUMPY`, version 1.0 with a u16
//! header length, 2.0/3.0 with u32, then a Python dict literal with `descr`, `fortran_order`
//! and `shape`, padded with spaces and ending in a newline).

use crate::error::{Error, Result};
use ndarray::{ArrayD, IxDyn, ShapeBuilder};
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

/// Longest header accepted: numpy itself refuses headers over 10 000 bytes by default
/// (`format.py`, `_MAX_HEADER_SIZE`); a larger one is damage, not data.
const MAX_HEADER: usize = 10_000;

/// An opened `.npz`: its member names, read once; arrays on demand.
pub struct NpzFile<R: Read + Seek = BufReader<File>> {
    what: String,
    archive: zip::ZipArchive<R>,
    /// Member names in archive order.
    members: Vec<String>,
}

impl NpzFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::files::open(path)?;
        Self::from_reader(BufReader::new(file), path.to_path_buf())
    }
}

impl<R: Read + Seek> NpzFile<R> {
    pub fn from_reader(r: R, path: PathBuf) -> Result<Self> {
        let what = path.display().to_string();
        let archive = zip::ZipArchive::new(r)
            .map_err(|e| Error::input(&what, format!("not a readable .npz archive (zip): {e}")))?;
        let members = archive.file_names().map(str::to_string).collect::<Vec<_>>();
        // The central directory order is the writer's order (numpy and ndarray-npy write keys
        // in order); file_names() iterates a hash map, so sort by archive index instead.
        let mut indexed: Vec<(usize, String)> =
            members.into_iter().filter_map(|n| archive.index_for_name(&n).map(|i| (i, n))).collect();
        indexed.sort();
        Ok(NpzFile { what, archive, members: indexed.into_iter().map(|(_, n)| n).collect() })
    }

    /// The keys (member names without `.npy`), in archive order.
    pub fn keys(&self) -> Vec<String> {
        self.members.iter().map(|n| n.strip_suffix(".npy").unwrap_or(n).to_string()).collect()
    }

    /// Read key `key` (a member name with or without `.npy`) as f32.
    pub fn read(&mut self, key: &str) -> Result<ArrayD<f32>> {
        self.with_member(key, |mut r, len| {
            let (h, n, bytes) = read_header(&mut r, len)?;
            read_data(&mut r, h, n, bytes)
        })
    }

    /// The shape of key `key`, from its header alone (the data is not read, but its size is
    /// checked against the header).
    pub fn shape(&mut self, key: &str) -> Result<Vec<usize>> {
        self.with_member(key, |mut r, len| read_header(&mut r, len).map(|(h, _, _)| h.shape))
    }

    fn with_member<T>(
        &mut self,
        key: &str,
        f: impl FnOnce(&mut dyn Read, u64) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let name = if self.members.iter().any(|m| m == key) { key.to_string() } else { format!("{key}.npy") };
        let fail = |msg: String| Error::input(format!("{} member `{key}`", self.what), msg);
        let mut member = match self.archive.by_name(&name) {
            Ok(m) => m,
            Err(e) => return Err(fail(format!("cannot be read from the archive: {e}"))),
        };
        let size = member.size();
        f(&mut member, size).map_err(fail)
    }
}

/// The element types an npy member may hold, and how each becomes f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl Kind {
    fn size(self) -> usize {
        match self {
            Kind::I8 | Kind::U8 | Kind::Bool => 1,
            Kind::I16 | Kind::U16 => 2,
            Kind::F32 | Kind::I32 | Kind::U32 => 4,
            Kind::F64 | Kind::I64 | Kind::U64 => 8,
        }
    }
}

/// A parsed header: element type, byte order, layout, shape.
#[derive(Debug, PartialEq)]
struct Header {
    kind: Kind,
    big_endian: bool,
    fortran: bool,
    shape: Vec<usize>,
}

/// Read an npy header from `r` (`len` bytes in all) and check the data that follows has the
/// size it claims: the header, its element count and its data bytes.
fn read_header(r: &mut impl Read, len: u64) -> std::result::Result<(Header, usize, usize), String> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).map_err(|_| "is not an npy array (shorter than the npy magic)".to_string())?;
    if &magic[..6] != b"\x93NUMPY" {
        return Err("is not an npy array (no \\x93NUMPY magic at its start)".into());
    }
    // Version 1.0 stores the header length as a little-endian u16, 2.0 and 3.0 as a u32.
    let (width, prefix) = match magic[6] {
        1 => (2, 10usize),
        2 | 3 => (4, 12usize),
        v => {
            return Err(format!("bad npy header: format version {v}.{} (numpy writes 1.0 to 3.0)", magic[7]))
        }
    };
    let mut b = [0u8; 4];
    r.read_exact(&mut b[..width]).map_err(|_| "bad npy header: truncated header length".to_string())?;
    let header_len = u32::from_le_bytes(b) as usize;
    if header_len > MAX_HEADER {
        return Err(format!("bad npy header: {header_len} bytes long (numpy's limit is {MAX_HEADER})"));
    }
    let mut text = vec![0u8; header_len];
    r.read_exact(&mut text)
        .map_err(|_| format!("bad npy header: the member ends inside its {header_len}-byte header"))?;
    let text = std::str::from_utf8(&text).map_err(|_| "bad npy header: not text".to_string())?;
    let h = parse_header(text).map_err(|e| format!("bad npy header: {e} (header: {})", text.trim_end()))?;
    let n = h.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let bytes = n.and_then(|n| n.checked_mul(h.kind.size()));
    let have = len.saturating_sub((prefix + header_len) as u64);
    let Some(bytes) = bytes.filter(|&b| b as u64 == have) else {
        let claim = bytes.map_or("more bytes than this machine can address".into(), |b| format!("{b} bytes"));
        return Err(format!(
            "truncated or damaged: its header claims shape {:?} of {}-byte elements ({claim}), the member \
             holds {have} bytes of data",
            h.shape,
            h.kind.size()
        ));
    };
    Ok((h, n.unwrap_or(0), bytes))
}

/// The `n` elements (`bytes` bytes) after header `h`, as f32 in standard layout.
fn read_data(
    r: &mut impl Read,
    h: Header,
    n: usize,
    bytes: usize,
) -> std::result::Result<ArrayD<f32>, String> {
    let values = if matches!(h.kind, Kind::F32) && !h.big_endian && cfg!(target_endian = "little") {
        // Little-endian f32 (every capture hefprobe writes): read straight into the values, no
        // second buffer of the same size (a 1024-token logits tap is 200 MB).
        let mut values = vec![0f32; n];
        // SAFETY: `values` owns n f32 = `bytes` bytes (checked above: bytes = n · 4); every bit
        // pattern is a valid f32, and the byte view is dropped before `values` is used again.
        let buf = unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), bytes) };
        r.take(bytes as u64)
            .read_exact(buf)
            .map_err(|e| format!("truncated: reading its {bytes} data bytes: {e}"))?;
        values
    } else {
        let mut data = Vec::with_capacity(bytes);
        r.take(bytes as u64).read_to_end(&mut data).map_err(|e| format!("reading its data: {e}"))?;
        if data.len() != bytes {
            return Err(format!("truncated: {} of the {bytes} data bytes its header promises", data.len()));
        }
        convert(&data, h.kind, h.big_endian)
    };
    debug_assert_eq!(values.len(), n);
    let shape = IxDyn(&h.shape);
    let arr = if h.fortran {
        ArrayD::from_shape_vec(shape.f(), values).map(|a| a.as_standard_layout().into_owned())
    } else {
        ArrayD::from_shape_vec(shape, values)
    };
    arr.map_err(|e| format!("shape {:?} does not fit its data: {e}", h.shape))
}

fn convert(data: &[u8], kind: Kind, be: bool) -> Vec<f32> {
    macro_rules! each {
        ($t:ty, $n:expr) => {
            data.chunks_exact($n)
                .map(|c| {
                    let b: [u8; $n] = c.try_into().unwrap_or([0; $n]);
                    (if be { <$t>::from_be_bytes(b) } else { <$t>::from_le_bytes(b) }) as f32
                })
                .collect()
        };
    }
    match kind {
        Kind::F32 => each!(f32, 4),
        Kind::F64 => each!(f64, 8),
        Kind::I8 => each!(i8, 1),
        Kind::I16 => each!(i16, 2),
        Kind::I32 => each!(i32, 4),
        Kind::I64 => each!(i64, 8),
        Kind::U8 => each!(u8, 1),
        Kind::U16 => each!(u16, 2),
        Kind::U32 => each!(u32, 4),
        Kind::U64 => each!(u64, 8),
        Kind::Bool => data.iter().map(|&b| if b != 0 { 1.0 } else { 0.0 }).collect(),
    }
}

/// Parse `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
fn parse_header(text: &str) -> std::result::Result<Header, String> {
    let body = text.trim().strip_prefix('{').and_then(|t| t.strip_suffix('}')).ok_or("not a {...} dict")?;
    let value = |key: &str| -> std::result::Result<&str, String> {
        let at = body.find(&format!("'{key}'")).ok_or(format!("no '{key}' entry"))?;
        let rest = body[at + key.len() + 2..].trim_start();
        Ok(rest.strip_prefix(':').ok_or(format!("no ':' after '{key}'"))?.trim_start())
    };
    let descr = value("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or("'descr' is not a quoted dtype string (structured dtypes are not supported)")?;
    let fortran = match value("fortran_order")? {
        v if v.starts_with("True") => true,
        v if v.starts_with("False") => false,
        _ => return Err("'fortran_order' is neither True nor False".into()),
    };
    let shape = value("shape")?;
    let shape = shape.strip_prefix('(').and_then(|s| s.split(')').next()).ok_or("'shape' is not a tuple")?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_end_matches('L').parse::<usize>().map_err(|_| format!("shape entry `{s}` is not a size"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let (order, code) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('=', descr),
    };
    let kind = match code {
        "f4" => Kind::F32,
        "f8" => Kind::F64,
        "i1" => Kind::I8,
        "i2" => Kind::I16,
        "i4" => Kind::I32,
        "i8" => Kind::I64,
        "u1" => Kind::U8,
        "u2" => Kind::U16,
        "u4" => Kind::U32,
        "u8" => Kind::U64,
        "b1" | "?" => Kind::Bool,
        "f2" => return Err("unsupported dtype float16 ('<f2'): convert it to float32 before saving".into()),
        other => {
            return Err(format!(
                "unsupported dtype '{descr}' ({}): expected float32, float64, an integer type or bool",
                dtype_name(other)
            ))
        }
    };
    Ok(Header { kind, big_endian: order == '>', fortran, shape })
}

/// numpy's name of a type code, for messages.
fn dtype_name(code: &str) -> &'static str {
    match code.chars().next() {
        Some('c') => "complex",
        Some('U') => "unicode string",
        Some('S') | Some('a') => "byte string",
        Some('O') => "Python object",
        Some('V') => "void/structured",
        Some('M') => "datetime",
        Some('m') => "timedelta",
        Some('f') => "a float width other than 32 or 64 bits",
        _ => "unknown",
    }
}

/// Read every member of an in-memory `.npz` (the fuzz target's entry): never panics, whatever
/// the bytes.
pub fn read_all_from_bytes(bytes: &[u8]) -> Result<Vec<(String, ArrayD<f32>)>> {
    let mut f = NpzFile::from_reader(std::io::Cursor::new(bytes), PathBuf::from("<bytes>"))?;
    f.keys().into_iter().map(|k| Ok((k.clone(), f.read(&k)?))).collect()
}

#[cfg(test)]
#[path = "npz_tests.rs"]
mod tests;
