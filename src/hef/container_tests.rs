//! Unit tests of container.rs: header versions, integrity checks, bounds on every region.

use super::*;
use crate::hef::write_v3;

fn parse_bytes(bytes: &[u8]) -> Result<(Container, Vec<u8>)> {
    parse(&mut SliceSource(bytes), "model.hef")
}

fn message(r: Result<(Container, Vec<u8>)>) -> String {
    r.expect_err("parsing should fail").to_string()
}

fn v3_file() -> Vec<u8> {
    write_v3(b"proto bytes", b"", b"resource")
}

#[test]
fn crc32_matches_the_zlib_check_value() {
    let mut c = Crc32::new();
    c.update(b"123456789");
    assert_eq!(c.finalize(), 0xCBF4_3926);
}

#[test]
fn written_v3_parses_with_ccws_aligned() {
    let bytes = v3_file();
    let (c, proto) = parse_bytes(&bytes).unwrap();
    assert_eq!(proto, b"proto bytes");
    assert_eq!(c.layout.offset_zero_point % CCW_ALIGNMENT, 0);
    assert_eq!(c.layout.declared_file_size, bytes.len() as u64);
    assert!(matches!(c.integrity, Integrity::Xxh3Proto { .. }));
}

#[test]
fn truncated_header_names_the_offset() {
    let bytes = v3_file();
    let msg = message(parse_bytes(&bytes[..30]));
    assert!(msg.contains("model.hef offset 12"), "{msg}");
    assert!(msg.contains("56 bytes but the file has only 30"), "{msg}");
    let msg = message(parse_bytes(&bytes[..5]));
    assert!(msg.contains("offset 0") && msg.contains("5 bytes"), "{msg}");
}

#[test]
fn oversized_proto_length_names_the_field() {
    let mut bytes = v3_file();
    bytes[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    let msg = message(parse_bytes(&bytes[..176]));
    assert!(
        msg.contains("offset 8 (header field hef_proto_size): says 4294967295 bytes but only 120 remain after the 56-byte header"),
        "{msg}"
    );
}

#[test]
fn wrong_magic_is_rejected() {
    let mut bytes = v3_file();
    bytes[0] = 0x7f;
    let msg = message(parse_bytes(&bytes));
    assert!(msg.contains("offset 0 (header field magic)") && msg.contains("0x7f484546"), "{msg}");
}

#[test]
fn unknown_version_is_rejected() {
    let mut bytes = v3_file();
    bytes[4..8].copy_from_slice(&4u32.to_be_bytes());
    let msg = message(parse_bytes(&bytes));
    assert!(msg.contains("offset 4 (header field version)") && msg.contains("is 4"), "{msg}");
}

#[test]
fn proto_hash_mismatch_is_rejected() {
    let mut bytes = v3_file();
    bytes[56] ^= 1;
    let msg = message(parse_bytes(&bytes));
    assert!(msg.contains("offset 40 (header field proto_xxh3_64bits)"), "{msg}");
}

#[test]
fn whole_file_hash_is_checked_when_the_proto_hash_is_zero() {
    let mut bytes = v3_file();
    bytes[40..48].fill(0);
    assert!(matches!(parse_bytes(&bytes).unwrap().0.integrity, Integrity::Xxh3File { .. }));
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let msg = message(parse_bytes(&bytes));
    assert!(msg.contains("offset 12 (header field xxh3_64bits)"), "{msg}");
}

#[test]
fn padding_smaller_than_ccws_is_rejected() {
    let mut bytes = v3_file();
    bytes[20..28].copy_from_slice(&0u64.to_be_bytes());
    let msg = message(parse_bytes(&bytes));
    assert!(msg.contains("ccws_size_with_padding"), "{msg}");
}

/// V1 and V2 bodies are proto + CCWs with the hash over both; build them by hand.
fn v1_v2_file(version: u32, proto: &[u8], ccws: &[u8]) -> Vec<u8> {
    let mut body = proto.to_vec();
    body.extend_from_slice(ccws);
    let mut out = MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&(proto.len() as u32).to_be_bytes());
    if version == 1 {
        let mut crc = Crc32::new();
        crc.update(&body);
        out.extend_from_slice(&crc.finalize().to_be_bytes());
        out.extend_from_slice(&(ccws.len() as u64).to_be_bytes());
        out.extend_from_slice(&[0; 4]);
    } else {
        out.extend_from_slice(&xxh3_64(&body).to_be_bytes());
        out.extend_from_slice(&(ccws.len() as u64).to_be_bytes());
        out.extend_from_slice(&[0; 16]);
    }
    out.extend_from_slice(&body);
    out
}

#[test]
fn v1_and_v2_hash_everything_after_the_header() {
    for version in [1, 2] {
        let mut bytes = v1_v2_file(version, b"proto", b"ccws");
        let (c, proto) = parse_bytes(&bytes).unwrap();
        assert_eq!(proto, b"proto");
        assert_eq!(c.layout.offset_zero_point, c.layout.header_size + 5);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let msg = message(parse_bytes(&bytes));
        assert!(msg.contains("offset 12"), "{msg}");
        let msg = message(parse_bytes(&bytes[..bytes.len() - 1]));
        assert!(msg.contains("ccws_size"), "{msg}");
    }
}

#[test]
fn v0_is_read_but_md5_is_not_verified() {
    let mut bytes = MAGIC.to_be_bytes().to_vec();
    bytes.extend_from_slice(&0u32.to_be_bytes());
    bytes.extend_from_slice(&3u32.to_be_bytes());
    bytes.extend_from_slice(&[0; 20]);
    bytes.extend_from_slice(b"abc");
    let (c, proto) = parse_bytes(&bytes).unwrap();
    assert_eq!((c.integrity, proto.as_slice()), (Integrity::Md5NotVerified, &b"abc"[..]));
}

#[test]
fn resource_past_eof_names_the_resource_and_offset() {
    let bytes = v3_file();
    let (c, _) = parse_bytes(&bytes).unwrap();
    let err = read_resource(&mut SliceSource(&bytes), &c.layout, "embeddings.bin", 4, 100, 0, "model.hef")
        .unwrap_err()
        .to_string();
    let start = c.layout.offset_zero_point + 4;
    assert!(err.contains(&format!("offset {start} (external resource `embeddings.bin`)")), "{err}");
    let err =
        read_resource(&mut SliceSource(&bytes), &c.layout, "x", u64::MAX, 1, 0, "model.hef").unwrap_err();
    assert!(err.to_string().contains("overflows"));
}

#[test]
fn resource_hash_mismatch_is_rejected() {
    let bytes = v3_file();
    let (c, _) = parse_bytes(&bytes).unwrap();
    let ok = read_resource(&mut SliceSource(&bytes), &c.layout, "r", 0, 8, xxh3_64(b"resource"), "m.hef");
    assert_eq!(ok.unwrap(), b"resource");
    let bad = read_resource(&mut SliceSource(&bytes), &c.layout, "r", 0, 8, 1, "m.hef").unwrap_err();
    assert!(bad.to_string().contains("external resource `r`"));
}
