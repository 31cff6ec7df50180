//! The pure parts of the real device: what hefprobe checks and translates on the host, before
//! or after a shim call, so that it is tested without HailoRT or a device.

use hailort_sys::hailo_device_architecture_t;

use crate::device::{FormatType, StreamInfo, RPC_CACHE_UNSUPPORTED};
use crate::error::{Error, Result};

/// The HailoRT major version the shim is written for; the API it uses (`set_enable_kv_cache`,
/// the cache calls, `create_infer_model(path, name)`) is 5.x only.
pub const REQUIRED_MAJOR: u32 = 5;
/// The HailoRT release whose headers the shim was type-checked against (scripts/check-shim.sh).
pub const CHECKED_VERSION: &str = "5.2.0";

/// The shim is written for HailoRT 5.x: refuse anything else before touching a device.
pub fn check_library_version(major: u32, minor: u32, revision: u32) -> Result<()> {
    if major == REQUIRED_MAJOR {
        return Ok(());
    }
    Err(Error::Device(format!(
        "HailoRT library version {major}.{minor}.{revision} found, but hefprobe's hailo backend needs HailoRT \
         {REQUIRED_MAJOR}.x (it was checked against {CHECKED_VERSION}): install HailoRT {REQUIRED_MAJOR}.x \
         (libhailort and the PCIe driver from the same release), or rebuild hefprobe with HAILORT_INCLUDE_DIR \
         and HAILORT_LIB_DIR pointing at a {REQUIRED_MAJOR}.x installation"
    )))
}

/// Every input given exactly once with exactly its frame size, before anything reaches HailoRT
/// (upstream only checks sizes deep inside run, and over RPC a failed run shuts the configured
/// model down: configured_infer_model_hrpc_client.cpp `run_async`).
pub fn check_input_frames(group: &str, streams: &[StreamInfo], given: &[(String, Vec<u8>)]) -> Result<()> {
    let names = || streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ");
    for (name, bytes) in given {
        let Some(stream) = streams.iter().find(|s| &s.name == name) else {
            return Err(Error::Device(format!(
                "run of group `{group}`: `{name}` is not one of its inputs ({})",
                names()
            )));
        };
        if given.iter().filter(|(n, _)| n == name).count() > 1 {
            return Err(Error::Device(format!("run of group `{group}`: input `{name}` is given twice")));
        }
        if bytes.len() != stream.frame_size() {
            return Err(Error::Device(format!(
                "run of group `{group}`: input `{name}` has {} bytes, its frame is {} bytes \
                 (shape {} × {} bytes of {:?})",
                bytes.len(),
                stream.frame_size(),
                stream.shape,
                stream.format.bytes(),
                stream.format
            )));
        }
    }
    let missing: Vec<&str> = streams
        .iter()
        .filter(|s| !given.iter().any(|(n, _)| n == &s.name))
        .map(|s| s.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(Error::Device(format!(
            "run of group `{group}`: inputs missing: {} (every input must be bound for every run)",
            missing.join(", ")
        )));
    }
    Ok(())
}

/// A `get_cache_buffers` result whose entries carry no data is the v5.2.0 RPC bug, not a cache:
/// `ConfiguredInferModelHrpcClient::get_cache_buffers` parses its own request as the reply
/// (configured_infer_model_hrpc_client.cpp:585-598), which yields one entry keyed by the
/// configured model's handle id with empty data. A real ring is never empty (cache_manager.cpp).
pub fn check_cache_snapshot(group: &str, entries: &[(u32, u64)]) -> Result<()> {
    if let Some((id, _)) = entries.iter().find(|(_, size)| *size == 0) {
        return Err(Error::Unsupported(format!(
            "reading the KV cache of group `{group}`: get_cache_buffers() returned cache id {id} with no \
             data. Over Hailo-10H's RPC client HailoRT {CHECKED_VERSION} parses its own request as the reply \
             (configured_infer_model_hrpc_client.cpp), so cache contents cannot be read from the host; \
             compare caches on the simulated device instead"
        )));
    }
    Ok(())
}

/// The KV-cache calls are made only where the VDevice is local. On Hailo-10H it is an RPC
/// client (vdevice.cpp `VDevice::create` picks VDeviceHrpcClient when the device is
/// HAILO10H), and an architecture HailoRT did not report may be one: both are refused before
/// the FFI call, with the reason ([`RPC_CACHE_UNSUPPORTED`]).
pub fn check_cache_access(architecture: Option<i32>, call: &str) -> Result<()> {
    match architecture {
        Some(hailort_sys::HAILO_ARCH_HAILO10H) => {
            Err(Error::Unsupported(format!("{call} on HAILO10H: {RPC_CACHE_UNSUPPORTED}")))
        }
        Some(a) if architecture_name(a).is_some() => Ok(()),
        _ => Err(Error::Unsupported(format!(
            "{call} on a device whose architecture HailoRT did not report (it may be an RPC client): \
             {RPC_CACHE_UNSUPPORTED}"
        ))),
    }
}

/// `hailo_device_architecture_t` (hailort.h:426-438) by value.
pub fn architecture_name(arch: hailo_device_architecture_t) -> Option<&'static str> {
    match arch {
        hailort_sys::HAILO_ARCH_HAILO8_A0 => Some("HAILO8_A0"),
        hailort_sys::HAILO_ARCH_HAILO8 => Some("HAILO8"),
        hailort_sys::HAILO_ARCH_HAILO8L => Some("HAILO8L"),
        hailort_sys::HAILO_ARCH_HAILO15H => Some("HAILO15H"),
        hailort_sys::HAILO_ARCH_HAILO15L => Some("HAILO15L"),
        hailort_sys::HAILO_ARCH_HAILO15M => Some("HAILO15M"),
        hailort_sys::HAILO_ARCH_HAILO10H => Some("HAILO10H"),
        hailort_sys::HAILO_ARCH_HAILO12L => Some("HAILO12L"),
        _ => None,
    }
}

/// The `hailo_format_type_t` (hailort.h:560-572) the shim reports (as the header's `uint32_t`).
pub(super) fn format_type(value: u32) -> Option<FormatType> {
    match hailort_sys::hailo_format_type_t::try_from(value).ok()? {
        hailort_sys::HAILO_FORMAT_TYPE_AUTO => Some(FormatType::Auto),
        hailort_sys::HAILO_FORMAT_TYPE_UINT8 => Some(FormatType::Uint8),
        hailort_sys::HAILO_FORMAT_TYPE_UINT16 => Some(FormatType::Uint16),
        hailort_sys::HAILO_FORMAT_TYPE_FLOAT32 => Some(FormatType::Float32),
        _ => None,
    }
}
