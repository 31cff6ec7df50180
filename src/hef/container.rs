//! The HEF container: header versions 0..3, where the proto, CCWs and external resources sit,
//! the integrity checks HailoRT makes on load. The V3 writer is in `container_write.rs`.
//!
//! Layout facts are from HailoRT v5.2.0 `hailort/libhailort/src/hef/hef_internal.hpp` (header
//! structs, lines 116-184) and `hef.cpp` (`parse_hef_file` :542-632, `parse_hef_memview` :654-757,
//! `validate_hef_header` :385-440, `get_external_resources` :4023-4047). Every integer in the
//! header is big-endian on disk.
//!
//! Every size or offset read from the file is untrusted: it is checked against the file size with
//! overflow-checked arithmetic *before* anything is allocated or read, and a violation is an
//! `Error::input` that names the file, the byte offset of the header field and the field.
//! (Upstream's memview path hashes `hef_proto_size` bytes without bounding them first.)
//!
//! Every header version's layout, its integrity rule and the bounds that protect it sit side by
//! side here; the writer and the tests live beside it.

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::Serialize;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::error::{Error, Result};

/// `HEADER_MAGIC` (hef_internal.hpp): the bytes `01 48 45 46`, "\x01HEF".
pub const MAGIC: u32 = 0x0148_4546;
/// `HEF_COMMON_SIZE` (hef_internal.hpp): magic, version, hef_proto_size.
const COMMON_SIZE: u64 = 12;
/// The CCW section of a V3 file starts on this boundary: HailoRT maps aligned V3 CCWs straight
/// into DMA descriptors (hef.cpp `zero_copy_config_over_descs` :3572-3586), which work in pages.
pub const CCW_ALIGNMENT: u64 = 4096;
/// External resources are aligned so the genai server can reinterpret them in place as
/// float32/uint16 arrays (`generate_theta_from_memview` pre_process.cpp:54-59, token_embedder.hpp).
pub(super) const RESOURCE_ALIGNMENT: u64 = 64;
/// Hashes stream the file in chunks this large instead of loading CCWs (hundreds of MB) at once.
const HASH_CHUNK: u64 = 1 << 20;

/// `HEF_HEADER_SIZE_V0..V3` (hef_internal.hpp): 32, 28, 44 and 56 bytes.
pub fn header_size(version: u32) -> Option<u64> {
    [32, 28, 44, 56].get(usize::try_from(version).ok()?).copied()
}

/// The version-specific part of the header, host order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "version", rename_all = "snake_case")]
pub enum VersionFields {
    /// V0: MD5 of the proto (hefprobe does not compute MD5; see [`Integrity::Md5NotVerified`]).
    V0 { md5: [u8; 16] },
    /// V1: CRC-32 over proto + CCWs.
    V1 { crc: u32, ccws_size: u64 },
    /// V2: XXH3-64 over proto + CCWs.
    V2 { xxh3_64bits: u64, ccws_size: u64 },
    /// V3: `ccws_size_with_padding` includes `hef_padding_size`; the proto hash, when non-zero,
    /// replaces the whole-file check.
    V3 {
        xxh3_64bits: u64,
        ccws_size_with_padding: u64,
        hef_padding_size: u32,
        additional_info_size: u64,
        proto_xxh3_64bits: u64,
    },
}

/// The decoded header.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Header {
    pub version: u32,
    pub hef_proto_size: u32,
    pub fields: VersionFields,
}

/// Where each region of the file is (absolute byte offsets).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layout {
    pub file_size: u64,
    pub header_size: u64,
    /// The proto always starts right after the header.
    pub proto_offset: u64,
    pub proto_size: u64,
    pub padding_size: u64,
    /// Start of the CCWs; external resource offsets are relative to it. HailoRT sets it to 0 for V0.
    pub offset_zero_point: u64,
    /// CCW bytes without the padding.
    pub ccws_size: u64,
    pub additional_info_size: u64,
    /// The size the header implies. HailoRT requires it to equal the file size except in the V3
    /// proto-hash path, where a mismatch goes unnoticed (so it is reported here, not rejected).
    pub declared_file_size: u64,
}

/// Which integrity check was made, mirroring HailoRT per version (hef.cpp :542-632).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum Integrity {
    /// V0 stores an MD5 of the proto; hefprobe does not implement MD5, so it is not verified.
    Md5NotVerified,
    /// V1: CRC-32 over everything after the header matched.
    Crc32 { value: u32 },
    /// V2, or V3 with a zero proto hash: XXH3-64 over everything after the header matched.
    Xxh3File { value: u64 },
    /// V3 with a proto hash: only the proto bytes were hashed (as HailoRT does); the header's
    /// whole-file hash is stored but, like upstream, not verified.
    Xxh3Proto { value: u64, file_xxh3_unverified: u64 },
}

/// What the container says about a file, before the proto is interpreted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Container {
    pub header: Header,
    pub layout: Layout,
    pub integrity: Integrity,
}

/// Random access to the bytes of a HEF, so a multi-GB file need not be loaded to read its proto
/// and resources.
pub trait ByteSource {
    fn size(&self) -> u64;
    /// Fill `buf` from `offset`; callers have already checked `offset + buf.len() <= size()`.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;
}

/// A HEF held in memory.
pub struct SliceSource<'a>(pub &'a [u8]);

impl ByteSource for SliceSource<'_> {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let start = usize::try_from(offset).ok();
        let part = start.and_then(|s| self.0.get(s..s.checked_add(buf.len())?));
        let part =
            part.ok_or_else(|| Error::input("HEF buffer", format!("read past the end at offset {offset}")))?;
        buf.copy_from_slice(part);
        Ok(())
    }
}

/// A HEF read from disk with seeks.
pub struct FileSource {
    file: File,
    path: PathBuf,
    size: u64,
}

impl FileSource {
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = crate::files::open(&path)?;
        let size = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        Ok(FileSource { file, path, size })
    }
}

impl ByteSource for FileSource {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        self.file.seek(SeekFrom::Start(offset)).map_err(|e| Error::io(&self.path, e))?;
        self.file.read_exact(buf).map_err(|e| Error::io(&self.path, e))
    }
}

/// Read `len` bytes at `offset` after checking the range lies inside the source; `field` names
/// what the range is for the error message.
pub fn read_range(
    src: &mut dyn ByteSource,
    offset: u64,
    len: u64,
    what: &str,
    field: &str,
) -> Result<Vec<u8>> {
    let size = src.size();
    let end = offset.checked_add(len).filter(|&end| end <= size);
    if end.is_none() {
        return Err(Error::input(
            format!("{what} offset {offset} ({field})"),
            format!("{len} bytes are needed here but the file is only {size} bytes long: it is truncated"),
        ));
    }
    let len = usize::try_from(len).map_err(|_| {
        Error::input(format!("{what} ({field})"), format!("{len} bytes do not fit in memory"))
    })?;
    let mut buf = vec![0u8; len];
    src.read_at(offset, &mut buf)?;
    Ok(buf)
}

/// Parse and verify the container; returns it with the serialized proto.
pub fn parse(src: &mut dyn ByteSource, what: &str) -> Result<(Container, Vec<u8>)> {
    let file_size = src.size();
    let header = read_header(src, what)?;
    let header_size = header_size(header.version).unwrap_or(COMMON_SIZE);
    let remaining = file_size - header_size; // read_header checked file_size >= header_size
    let proto_size = u64::from(header.hef_proto_size);
    if proto_size > remaining {
        let msg = format!(
            "says {proto_size} bytes but only {remaining} remain after the {header_size}-byte header: \
             the file is truncated or its header is corrupt"
        );
        return Err(field_err(what, 8, "hef_proto_size", msg));
    }
    let (layout, integrity) = match header.fields {
        VersionFields::V0 { .. } => check_v0(&header, file_size, what)?,
        VersionFields::V1 { .. } | VersionFields::V2 { .. } => check_v1_v2(src, &header, what)?,
        VersionFields::V3 { .. } => check_v3(src, &header, what)?,
    };
    let proto = read_range(src, layout.proto_offset, layout.proto_size, what, "proto")?;
    Ok((Container { header, layout, integrity }, proto))
}

fn read_header(src: &mut dyn ByteSource, what: &str) -> Result<Header> {
    let file_size = src.size();
    if file_size < COMMON_SIZE {
        return Err(Error::input(
            format!("{what} offset 0 (header)"),
            format!("the file is {file_size} bytes; a HEF header needs at least {COMMON_SIZE} (magic, version, hef_proto_size): it is truncated or not a HEF"),
        ));
    }
    let mut common = [0u8; COMMON_SIZE as usize];
    src.read_at(0, &mut common)?;
    let magic = be_u32(&common, 0);
    if magic != MAGIC {
        let msg = format!("is 0x{magic:08x}, expected 0x{MAGIC:08x} (\"\\x01HEF\"): this is not a HEF file");
        return Err(field_err(what, 0, "magic", msg));
    }
    let version = be_u32(&common, 4);
    let Some(size) = header_size(version) else {
        let msg = format!(
            "is {version}; HailoRT 5.2 and hefprobe read HEF versions 0..3 (a newer compiler wrote it?)"
        );
        return Err(field_err(what, 4, "version", msg));
    };
    if file_size < size {
        return Err(Error::input(
            format!("{what} offset {COMMON_SIZE} (header fields of version {version})"),
            format!(
                "the V{version} header is {size} bytes but the file has only {file_size}: it is truncated"
            ),
        ));
    }
    let mut rest = vec![0u8; (size - COMMON_SIZE) as usize];
    src.read_at(COMMON_SIZE, &mut rest)?;
    Ok(Header { version, hef_proto_size: be_u32(&common, 8), fields: version_fields(version, &rest) })
}

/// Decode the version-specific part; `b` starts at file offset 12 and has the version's length.
fn version_fields(version: u32, b: &[u8]) -> VersionFields {
    match version {
        0 => VersionFields::V0 { md5: b[4..20].try_into().expect("16 bytes") },
        1 => VersionFields::V1 { crc: be_u32(b, 0), ccws_size: be_u64(b, 4) },
        2 => VersionFields::V2 { xxh3_64bits: be_u64(b, 0), ccws_size: be_u64(b, 8) },
        _ => VersionFields::V3 {
            xxh3_64bits: be_u64(b, 0),
            ccws_size_with_padding: be_u64(b, 8),
            hef_padding_size: be_u32(b, 16),
            additional_info_size: be_u64(b, 20),
            proto_xxh3_64bits: be_u64(b, 28),
        },
    }
}

/// V0: the proto must fill the file (validate_hef_header, MD5 overload, hef.cpp:385).
fn check_v0(header: &Header, file_size: u64, what: &str) -> Result<(Layout, Integrity)> {
    let proto_size = u64::from(header.hef_proto_size);
    if file_size - 32 != proto_size {
        let msg = format!(
            "says {proto_size} bytes but {} follow the 32-byte V0 header; a V0 file is header + proto only",
            file_size - 32
        );
        return Err(field_err(what, 8, "hef_proto_size", msg));
    }
    Ok((unpadded_layout(file_size, 32, proto_size, 0, 0), Integrity::Md5NotVerified))
}

/// V1/V2 share the body shape, header + proto + CCWs and nothing else, and hash everything after
/// the header: CRC-32 (V1) or XXH3-64 (V2).
fn check_v1_v2(src: &mut dyn ByteSource, header: &Header, what: &str) -> Result<(Layout, Integrity)> {
    let (header_size, ccws_field_offset, ccws_size, stored, field, algo) = match header.fields {
        VersionFields::V1 { crc, ccws_size } => (28, 16, ccws_size, u64::from(crc), "crc", "CRC-32"),
        VersionFields::V2 { xxh3_64bits, ccws_size } => {
            (44, 20, ccws_size, xxh3_64bits, "xxh3_64bits", "XXH3-64")
        }
        _ => unreachable!("check_v1_v2 is only called for V1 and V2 headers"),
    };
    let file_size = src.size();
    let proto_size = u64::from(header.hef_proto_size);
    if proto_size.checked_add(ccws_size) != Some(file_size - header_size) {
        let msg = format!(
            "proto ({proto_size}) + ccws_size ({ccws_size}) must equal the {} bytes after the \
             {header_size}-byte header: the file is truncated or corrupt",
            file_size - header_size
        );
        return Err(field_err(what, ccws_field_offset, "ccws_size", msg));
    }
    let layout = unpadded_layout(file_size, header_size, proto_size, header_size + proto_size, ccws_size);
    let (computed, integrity) = if header.version == 1 {
        let crc = crc32_range(src, header_size, file_size)?;
        (u64::from(crc), Integrity::Crc32 { value: crc })
    } else {
        let hash = xxh3_range(src, header_size, file_size)?;
        (hash, Integrity::Xxh3File { value: hash })
    };
    if computed != stored {
        return Err(hash_mismatch(what, 12, field, algo, stored, computed, "everything after the header"));
    }
    Ok((layout, integrity))
}

/// The layout of a V0..V2 file: header, proto, CCWs (V0: none, and a zero point of 0), filling
/// the file exactly, as their checks require.
fn unpadded_layout(
    file_size: u64,
    header_size: u64,
    proto_size: u64,
    zero_point: u64,
    ccws_size: u64,
) -> Layout {
    Layout {
        file_size,
        header_size,
        proto_offset: header_size,
        proto_size,
        padding_size: 0,
        offset_zero_point: zero_point,
        ccws_size,
        additional_info_size: 0,
        declared_file_size: file_size,
    }
}

/// V3: proto + padding + CCWs + additional info. With a non-zero proto hash HailoRT checks only
/// the proto; otherwise the exact length and the hash of everything after the header.
fn check_v3(src: &mut dyn ByteSource, header: &Header, what: &str) -> Result<(Layout, Integrity)> {
    let layout = v3_layout(header, src.size(), what)?;
    let VersionFields::V3 { xxh3_64bits, proto_xxh3_64bits, .. } = header.fields else {
        unreachable!("check_v3 is only called for V3 headers")
    };
    let proto_hash = proto_xxh3_64bits != 0;
    if !proto_hash && layout.declared_file_size != layout.file_size {
        let msg = format!(
            "the header adds up to {} bytes (56 + proto + ccws_size_with_padding + additional_info_size) \
             but the file has {}; without a proto hash HailoRT requires them to match",
            layout.declared_file_size, layout.file_size
        );
        return Err(field_err(what, 32, "additional_info_size", msg));
    }
    let (offset, field, stored, end, over) = if proto_hash {
        (40, "proto_xxh3_64bits", proto_xxh3_64bits, 56 + layout.proto_size, "the proto")
    } else {
        (12, "xxh3_64bits", xxh3_64bits, layout.file_size, "everything after the header")
    };
    let computed = xxh3_range(src, 56, end)?;
    if computed != stored {
        return Err(hash_mismatch(what, offset, field, "XXH3-64", stored, computed, over));
    }
    let integrity = if proto_hash {
        Integrity::Xxh3Proto { value: computed, file_xxh3_unverified: xxh3_64bits }
    } else {
        Integrity::Xxh3File { value: computed }
    };
    Ok((layout, integrity))
}

fn v3_layout(header: &Header, file_size: u64, what: &str) -> Result<Layout> {
    let VersionFields::V3 { ccws_size_with_padding, hef_padding_size, additional_info_size, .. } =
        header.fields
    else {
        unreachable!("v3_layout is only called for V3 headers")
    };
    let padding = u64::from(hef_padding_size);
    let proto_size = u64::from(header.hef_proto_size);
    // hef.cpp :731 (memview path) rejects this; the file path would underflow.
    let Some(ccws_size) = ccws_size_with_padding.checked_sub(padding) else {
        let msg = format!(
            "is {ccws_size_with_padding}, smaller than hef_padding_size {padding} which it must include"
        );
        return Err(field_err(what, 20, "ccws_size_with_padding", msg));
    };
    let zero_point = 56 + proto_size + padding; // u32 + u32 + 56 cannot overflow u64
    if zero_point > file_size {
        let msg = format!("{padding} bytes of padding put the CCW start at {zero_point}, past the end of the {file_size}-byte file");
        return Err(field_err(what, 28, "hef_padding_size", msg));
    }
    if ccws_size > file_size - zero_point {
        let msg = format!(
            "says {ccws_size} bytes of CCWs at offset {zero_point}, but only {} remain: the file is truncated",
            file_size - zero_point
        );
        return Err(field_err(what, 20, "ccws_size_with_padding", msg));
    }
    let declared = (56 + proto_size)
        .checked_add(ccws_size_with_padding)
        .and_then(|s| s.checked_add(additional_info_size));
    Ok(Layout {
        file_size,
        header_size: 56,
        proto_offset: 56,
        proto_size,
        padding_size: padding,
        offset_zero_point: zero_point,
        ccws_size,
        additional_info_size,
        declared_file_size: declared.unwrap_or(u64::MAX),
    })
}

fn hash_mismatch(
    what: &str,
    offset: u64,
    field: &str,
    algo: &str,
    stored: u64,
    computed: u64,
    over: &str,
) -> Error {
    let msg = format!(
        "stores {algo} 0x{stored:016x} but {over} hashes to 0x{computed:016x}: the file is corrupted \
         (HailoRT refuses it with HAILO_HEF_FILE_CORRUPTED); copy or export it again"
    );
    field_err(what, offset, field, msg)
}

/// An error in the header field `field` at byte `offset`.
fn field_err(what: &str, offset: u64, field: &str, msg: String) -> Error {
    Error::input(format!("{what} offset {offset} (header field {field})"), msg)
}

/// Read one external resource: absolute offset = offset_zero_point + resource offset
/// (hef.cpp `get_external_resources` :4023-4047); its XXH3-64 is checked when the stored hash is
/// non-zero, as HailoRT does when the resource is fetched.
pub fn read_resource(
    src: &mut dyn ByteSource,
    layout: &Layout,
    name: &str,
    offset: u64,
    size: u64,
    xxhash: u64,
    what: &str,
) -> Result<Vec<u8>> {
    let field = format!("external resource `{name}`");
    let Some(start) = layout.offset_zero_point.checked_add(offset) else {
        return Err(Error::input(format!("{what} ({field})"), format!("offset {offset} overflows")));
    };
    if start.checked_add(size).is_none_or(|end| end > layout.file_size) {
        return Err(Error::input(
            format!("{what} offset {start} ({field})"),
            format!(
                "{size} bytes at offset_zero_point {} + {offset} run past the end of the {}-byte file: \
                 the file is truncated",
                layout.offset_zero_point, layout.file_size
            ),
        ));
    }
    let data = read_range(src, start, size, what, &field)?;
    if xxhash != 0 {
        let computed = xxh3_64(&data);
        if computed != xxhash {
            return Err(Error::input(
                format!("{what} offset {start} ({field})"),
                format!(
                    "stored XXH3-64 0x{xxhash:016x} but the {size} bytes hash to 0x{computed:016x}: the resource \
                     is corrupted (HailoRT: HAILO_HEF_FILE_CORRUPTED when genai fetches it)"
                ),
            ));
        }
    }
    Ok(data)
}

/// Stream [start, end) of the source through `f` in bounded chunks.
fn for_each_chunk(src: &mut dyn ByteSource, start: u64, end: u64, mut f: impl FnMut(&[u8])) -> Result<()> {
    let mut buf = vec![0u8; HASH_CHUNK.min(end.saturating_sub(start)) as usize];
    let mut pos = start;
    while pos < end {
        let n = HASH_CHUNK.min(end - pos) as usize;
        src.read_at(pos, &mut buf[..n])?;
        f(&buf[..n]);
        pos += n as u64;
    }
    Ok(())
}

/// XXH3-64 with seed 0, as `Xxhash::calc_xxh3_on_stream` (hailort/common/utils.hpp ~:571-605).
fn xxh3_range(src: &mut dyn ByteSource, start: u64, end: u64) -> Result<u64> {
    let mut hasher = Xxh3::new();
    for_each_chunk(src, start, end, |chunk| hasher.update(chunk))?;
    Ok(hasher.digest())
}

fn crc32_range(src: &mut dyn ByteSource, start: u64, end: u64) -> Result<u32> {
    let mut crc = Crc32::new();
    for_each_chunk(src, start, end, |chunk| crc.update(chunk))?;
    Ok(crc.finalize())
}

/// The standard reflected CRC-32 (polynomial 0xEDB88320, init and final xor 0xFFFFFFFF), i.e.
/// zlib's crc32, which HEF V1 uses (hailort/common/utils.hpp:50, 505-569).
pub use crc32fast::Hasher as Crc32;

pub(super) fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
#[path = "container_tests.rs"]
mod tests;
