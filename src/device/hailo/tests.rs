//! Unit tests of the real device's pure parts: status names and messages, the version check,
//! frame and cache checks, enum names, C strings and the FFI layouts. They need neither HailoRT
//! nor a device; the FFI calls themselves can only run against real HailoRT.

use std::ffi::c_char;
use std::path::Path;
use std::time::Duration;

use super::checks::format_type;
use super::ffi::{self, c_chars_to_string};
use super::status::STATUS_NAMES;
use super::*;
use crate::device::FormatType;
use crate::hef::Shape3;

fn stream(name: &str, h: u32, w: u32, f: u32, format: FormatType) -> StreamInfo {
    StreamInfo { name: name.into(), shape: Shape3::new(h, w, f), format, quant_infos: vec![] }
}

#[test]
fn status_names_match_hailort_h() {
    assert_eq!(STATUS_NAMES.len(), 98);
    for (code, name) in [
        (hailort_sys::HAILO_SUCCESS, "HAILO_SUCCESS"),
        (hailort_sys::HAILO_TIMEOUT, "HAILO_TIMEOUT"),
        (hailort_sys::HAILO_INTERNAL_FAILURE, "HAILO_INTERNAL_FAILURE"),
        (hailort_sys::HAILO_INVALID_HEF, "HAILO_INVALID_HEF"),
        (hailort_sys::HAILO_DRIVER_NOT_INSTALLED, "HAILO_DRIVER_NOT_INSTALLED"),
        (hailort_sys::HAILO_OUT_OF_PHYSICAL_DEVICES, "HAILO_OUT_OF_PHYSICAL_DEVICES"),
        (hailort_sys::HAILO_INVALID_DEVICE_ARCHITECTURE, "HAILO_INVALID_DEVICE_ARCHITECTURE"),
        (hailort_sys::HAILO_NOT_SUPPORTED, "HAILO_NOT_SUPPORTED"),
        (hailort_sys::HAILO_HEF_FILE_CORRUPTED, "HAILO_HEF_FILE_CORRUPTED"),
        (hailort_sys::HAILO_HEF_NOT_SUPPORTED, "HAILO_HEF_NOT_SUPPORTED"),
        (hailort_sys::HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE, "HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE"),
        (hailort_sys::HAILO_DEVICE_NOT_CONNECTED, "HAILO_DEVICE_NOT_CONNECTED"),
        (hailort_sys::HAILO_DEVICE_TEMPORARILY_UNAVAILABLE, "HAILO_DEVICE_TEMPORARILY_UNAVAILABLE"),
    ] {
        assert_eq!(STATUS_NAMES[code as usize], name);
    }
    assert_eq!(status_label(4), "HAILO_TIMEOUT (4)");
    assert_eq!(status_label(98), "unknown HailoRT status 98");
    assert_eq!(status_label(-1), "unknown HailoRT status -1");
}

#[test]
fn no_device_says_how_to_find_one() {
    for status in [74, 96, 64] {
        let msg = status_message(
            status,
            &CallContext { call: "VDevice::create_shared(device_count 1)", ..Default::default() },
        );
        assert!(msg.starts_with("VDevice::create_shared(device_count 1) failed with HAILO_"), "{msg}");
        assert!(msg.contains(&format!("({status})")), "{msg}");
    }
    let msg = status_message(74, &CallContext { call: "VDevice::create_shared", ..Default::default() });
    assert!(msg.contains("HAILO_OUT_OF_PHYSICAL_DEVICES (74)"), "{msg}");
    assert!(msg.contains("hailortcli scan") && msg.contains("another process"), "{msg}");
    assert!(status_message(96, &CallContext::default()).contains("not connected"));
    assert!(status_message(64, &CallContext::default()).contains("driver is not installed"));
}

#[test]
fn wrong_architecture_names_the_hef_and_the_fix() {
    let hef = Path::new("/models/qwen-h8.hef");
    for status in [93, 75] {
        let ctx = CallContext {
            call: "InferModel::configure()",
            hef: Some(hef),
            group: Some("g"),
            ..Default::default()
        };
        let msg = status_message(status, &ctx);
        assert!(msg.contains("/models/qwen-h8.hef"), "{msg}");
        assert!(msg.contains("another Hailo architecture") && msg.contains("hailo10h"), "{msg}");
    }
    assert!(status_message(93, &CallContext::default()).contains("HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE (93)"));
    assert!(status_message(75, &CallContext::default()).contains("HAILO_INVALID_DEVICE_ARCHITECTURE (75)"));
}

#[test]
fn hef_problems_are_told_apart() {
    let hef = Path::new("m.hef");
    let ctx = CallContext { call: "Hef::create(\"m.hef\")", hef: Some(hef), ..Default::default() };
    let invalid = status_message(26, &ctx);
    let unsupported = status_message(92, &ctx);
    let corrupted = status_message(91, &ctx);
    assert!(invalid.contains("HAILO_INVALID_HEF (26)") && invalid.contains("invalid"), "{invalid}");
    assert!(
        unsupported.contains("HAILO_HEF_NOT_SUPPORTED (92)") && unsupported.contains("Dataflow Compiler")
    );
    assert!(corrupted.contains("HAILO_HEF_FILE_CORRUPTED (91)") && corrupted.contains("checksum"));
    for msg in [&invalid, &unsupported, &corrupted] {
        assert!(msg.starts_with("Hef::create(\"m.hef\") failed with "), "{msg}");
        assert!(msg.contains("m.hef is") || msg.contains("m.hef uses") || msg.contains("m.hef as"), "{msg}");
    }
}

#[test]
fn timeout_names_group_and_timeout() {
    let ctx = CallContext {
        call: "ConfiguredInferModel::run(bindings, 15000 ms) for group \"m__tbt\" of m.hef",
        hef: Some(Path::new("m.hef")),
        group: Some("m__tbt"),
        timeout: Some(Duration::from_secs(15)),
    };
    let msg = status_message(4, &ctx);
    assert!(msg.contains("HAILO_TIMEOUT (4)"), "{msg}");
    assert!(msg.contains("network group `m__tbt` did not finish within 15000 ms"), "{msg}");
    assert!(msg.contains("update_cache_offset"), "{msg}");
    // A timeout outside run still says what it is.
    assert!(status_message(4, &CallContext { call: "x", ..Default::default() }).contains("timed out"));
}

#[test]
fn unknown_status_points_at_the_log() {
    let msg = status_message(120, &CallContext { call: "InferModel::configure()", ..Default::default() });
    assert_eq!(
        msg,
        "InferModel::configure() failed with unknown HailoRT status 120: HailoRT's own log \
         (./hailort.log, or $HAILORT_LOGGER_PATH) has the details"
    );
    assert!(matches!(status_error(8, &CallContext::default()), Error::Device(_)));
}

#[test]
fn shim_check_messages_get_only_the_status() {
    let ctx = CallContext {
        call: "hp_model_run: input \"x\" has 3 bytes, its frame size (InferStream::get_frame_size) is 4",
        ..Default::default()
    };
    assert_eq!(
        status_message(2, &ctx),
        "hp_model_run: input \"x\" has 3 bytes, its frame size (InferStream::get_frame_size) is 4 \
         [HAILO_INVALID_ARGUMENT (2)]"
    );
}

#[test]
fn version_check_requires_major_5() {
    assert!(check_library_version(5, 2, 0).is_ok());
    assert!(check_library_version(5, 0, 1).is_ok());
    for (major, minor, revision) in [(4, 20, 0), (6, 0, 0)] {
        let err = check_library_version(major, minor, revision).unwrap_err().to_string();
        assert!(err.contains(&format!("{major}.{minor}.{revision} found")), "{err}");
        assert!(err.contains("needs HailoRT 5.x") && err.contains("5.2.0"), "{err}");
    }
}

#[test]
fn input_frames_are_checked_with_numbers() {
    let streams = [
        stream("m/input_layer1", 1, 96, 1536, FormatType::Uint16),
        stream("m/input_layer3", 1, 96, 128, FormatType::Float32),
    ];
    let good = vec![
        ("m/input_layer3".to_string(), vec![0u8; 96 * 128 * 4]),
        ("m/input_layer1".to_string(), vec![0u8; 96 * 1536 * 2]),
    ];
    assert!(check_input_frames("m", &streams, &good).is_ok());

    let mut short = good.clone();
    short[1].1.pop();
    let err = check_input_frames("m", &streams, &short).unwrap_err().to_string();
    assert!(err.contains("`m/input_layer1` has 294911 bytes, its frame is 294912 bytes"), "{err}");

    let err = check_input_frames("m", &streams, &good[..1]).unwrap_err().to_string();
    assert!(err.contains("inputs missing: m/input_layer1"), "{err}");

    let mut twice = good.clone();
    twice.push(good[0].clone());
    assert!(check_input_frames("m", &streams, &twice).unwrap_err().to_string().contains("given twice"));

    let unknown = vec![("m/input_layer9".to_string(), vec![])];
    let err = check_input_frames("m", &streams, &unknown).unwrap_err().to_string();
    assert!(err.contains("not one of its inputs (m/input_layer1, m/input_layer3)"), "{err}");
}

#[test]
fn bogus_rpc_cache_snapshot_is_unsupported() {
    assert!(check_cache_snapshot("m__prefill", &[(0, 4096), (1, 4096)]).is_ok());
    assert!(check_cache_snapshot("m__prefill", &[]).is_ok());
    // What v5.2.0's RPC client returns: its own request parsed as a reply.
    let err = check_cache_snapshot("m__prefill", &[(7, 0)]).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)));
    let msg = err.to_string();
    assert!(msg.contains("cache id 7 with no data") && msg.contains("RPC"), "{msg}");
}

#[test]
fn big_cache_writes_over_rpc_are_unsupported() {
    let ctx = CallContext {
        call: "ConfiguredInferModel::update_cache_buffer(0, 65536 bytes)",
        ..Default::default()
    };
    let err = cache_write_error(8, 65536, Some(hailort_sys::HAILO_ARCH_HAILO10H), &ctx);
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("256 bytes") && err.to_string().contains("65536 bytes"), "{err}");
    assert!(matches!(cache_write_error(8, 65536, None, &ctx), Error::Unsupported(_)));
    // A local device (Hailo-8) has no RPC: a real internal failure stays a device error.
    assert!(matches!(cache_write_error(8, 65536, Some(1), &ctx), Error::Device(_)));
    // Other statuses pass through.
    assert!(matches!(
        cache_write_error(2, 65536, Some(hailort_sys::HAILO_ARCH_HAILO10H), &ctx),
        Error::Device(_)
    ));
}

#[test]
fn architectures_and_format_types() {
    assert_eq!(architecture_name(6), Some("HAILO10H"));
    assert_eq!(architecture_name(8), None);
    assert_eq!(architecture_name(-1), None);
    assert_eq!(format_type(3), Some(FormatType::Float32));
    assert_eq!(format_type(2), Some(FormatType::Uint16));
    assert_eq!(format_type(4), None);
}

#[test]
fn c_chars_stop_at_nul() {
    let to_c = |bytes: &[u8]| bytes.iter().map(|&b| c_char::from_ne_bytes([b])).collect::<Vec<c_char>>();
    let chars = to_c(b"m/input_layer1\0junk");
    assert_eq!(c_chars_to_string(&chars), "m/input_layer1");
    let no_nul = to_c(b"abc");
    assert_eq!(c_chars_to_string(&no_nul), "abc");
    // A failing call whose shim wrote no message is named by its fallback.
    let failure = ffi::call("fallback", |_, _| hailort_sys::HAILO_INVALID_ARGUMENT).unwrap_err();
    assert_eq!(failure.call, "fallback");
}

#[test]
fn ffi_layouts_match_the_header() {
    // hefprobe_shim.h: 256-char name, five u32, two u64 (with 4 bytes of padding before them).
    assert_eq!(std::mem::size_of::<ffi::HpQuantInfo>(), 16);
    assert_eq!(std::mem::offset_of!(ffi::HpStreamInfo, frame_size), 256 + 5 * 4 + 4);
    assert_eq!(std::mem::size_of::<ffi::HpStreamInfo>(), 256 + 5 * 4 + 4 + 16);
    assert_eq!(std::mem::size_of::<ffi::HpVdeviceInfo>(), 256 + 4);
    assert_eq!(std::mem::size_of::<ffi::HpInput>(), 3 * std::mem::size_of::<usize>());
}

#[test]
fn cache_calls_are_refused_over_rpc_and_on_unknown_architectures() {
    use crate::error::Error;
    assert!(check_cache_access(Some(hailort_sys::HAILO_ARCH_HAILO8), "get_cache_buffers").is_ok());
    for arch in [Some(hailort_sys::HAILO_ARCH_HAILO10H), None, Some(99)] {
        match check_cache_access(arch, "get_cache_buffers") {
            Err(Error::Unsupported(m)) => {
                assert!(m.contains("unavailable on this device (HailoRT 5.2 RPC)"), "{m}")
            }
            other => panic!("{arch:?}: {other:?}"),
        }
    }
}
