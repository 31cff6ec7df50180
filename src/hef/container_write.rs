//! Writing the HEF container: a V3 file (header, proto, CCWs, external resources) laid out and
//! hashed as HailoRT checks it on load, and re-sealing after deliberate damage (fuzzing, tests).

use super::container::{be_u32, CCW_ALIGNMENT, MAGIC, RESOURCE_ALIGNMENT};
use xxhash_rust::xxh3::xxh3_64;

/// Lay out external resources in the additional-info region. Returns the region and, per
/// resource, its offset relative to offset_zero_point (the CCW section comes first, `ccws_len` bytes).
pub fn layout_resources(ccws_len: u64, resources: &[&[u8]]) -> (Vec<u8>, Vec<u64>) {
    let mut region = Vec::new();
    let mut offsets = Vec::with_capacity(resources.len());
    for data in resources {
        let misalign = (ccws_len + region.len() as u64) % RESOURCE_ALIGNMENT;
        if misalign != 0 {
            region.resize(region.len() + (RESOURCE_ALIGNMENT - misalign) as usize, 0);
        }
        offsets.push(ccws_len + region.len() as u64);
        region.extend_from_slice(data);
    }
    (region, offsets)
}

/// Write a V3 file: header, proto, padding up to the 4 KiB CCW boundary, CCWs, additional info.
/// Both hashes are set, so HailoRT takes the proto-hash path and the whole-file hash is also right.
///
/// Panics only if the proto is 4 GiB or larger, which the u32 header field cannot express.
pub fn write_v3(proto: &[u8], ccws: &[u8], additional_info: &[u8]) -> Vec<u8> {
    let proto_size = u32::try_from(proto.len()).expect("a HEF proto must be smaller than 4 GiB");
    let padding = (CCW_ALIGNMENT - (56 + proto.len() as u64) % CCW_ALIGNMENT) % CCW_ALIGNMENT;
    let mut body = Vec::with_capacity(proto.len() + padding as usize + ccws.len() + additional_info.len());
    body.extend_from_slice(proto);
    body.resize(body.len() + padding as usize, 0);
    body.extend_from_slice(ccws);
    body.extend_from_slice(additional_info);

    let mut out = Vec::with_capacity(56 + body.len());
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&3u32.to_be_bytes());
    out.extend_from_slice(&proto_size.to_be_bytes());
    out.extend_from_slice(&xxh3_64(&body).to_be_bytes());
    out.extend_from_slice(&(padding + ccws.len() as u64).to_be_bytes());
    out.extend_from_slice(&(padding as u32).to_be_bytes());
    out.extend_from_slice(&(additional_info.len() as u64).to_be_bytes());
    out.extend_from_slice(&xxh3_64(proto).to_be_bytes());
    out.extend_from_slice(&0u64.to_be_bytes()); // reserved1
    out.extend_from_slice(&body);
    out
}

/// Recompute both hashes of a V3 file in place, after deliberately changing its bytes (fuzzing,
/// tests that corrupt a proto on purpose). Returns false (and changes nothing) when the bytes do
/// not start with a V3 header whose proto fits the buffer.
pub fn reseal_v3(bytes: &mut [u8]) -> bool {
    if bytes.len() < 56 || be_u32(bytes, 0) != MAGIC || be_u32(bytes, 4) != 3 {
        return false;
    }
    let proto_end = 56 + be_u32(bytes, 8) as usize;
    if proto_end > bytes.len() {
        return false;
    }
    let proto_hash = xxh3_64(&bytes[56..proto_end]);
    let file_hash = xxh3_64(&bytes[56..]);
    bytes[40..48].copy_from_slice(&proto_hash.to_be_bytes());
    bytes[12..20].copy_from_slice(&file_hash.to_be_bytes());
    true
}
