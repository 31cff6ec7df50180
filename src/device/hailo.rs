//! The real device: HailoRT 5.x's C++ InferModel API through the C shim in `shim/` (feature
//! `hailo`).
//!
//! Why a shim and not hailort-sys: on Hailo-10H the VDevice is an RPC client whose `configure()`
//! returns HAILO_NOT_IMPLEMENTED (libhailort/src/vdevice/vdevice_hrpc_client.cpp), so the C API
//! cannot run a network group there; only the C++ InferModel API can. hailort-sys is used for
//! what it gets right: `hailo_status` codes and `hailo_get_library_version` (both match
//! include/hailo/hailort.h of HailoRT v5.2.0). Several of its other declarations do not exist in
//! v5.2.0, so nothing else of it is called.
//!
//! Everything HailoRT-specific below cites the file of hailo-ai/hailort v5.2.0 it comes from.
//! The pure parts (status → message, version check, frame checks) are unit tested; the FFI
//! parts can only run against real HailoRT.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, CString};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::time::Duration;

use super::{ConfiguredModel, Device, FormatType, StreamInfo};
use crate::error::{Error, Result};
use crate::hef::{QuantInfo, Shape3};

/// The HailoRT major version the shim is written for; the API it uses (`set_enable_kv_cache`,
/// the cache calls, `create_infer_model(path, name)`) is 5.x only.
pub const REQUIRED_MAJOR: u32 = 5;
/// The HailoRT release whose headers the shim was type-checked against (scripts/check-shim.sh).
pub const CHECKED_VERSION: &str = "5.2.0";

/// `HAILO_ARCH_HAILO10H` in `hailo_device_architecture_t` (hailort.h:426-438).
const ARCH_HAILO10H: i32 = 6;

/// `REQUEST_PROTO_MAX_SIZE` (hrpc/client.cpp:16): every RPC request, cache writes included, is
/// serialized into a buffer of this many bytes.
const RPC_REQUEST_MAX_BYTES: usize = 256;

/// Room for the shim's error messages (it truncates to fit).
const ERR_CAPACITY: usize = 1024;

/// The C ABI of shim/hefprobe_shim.h. Layouts must match that header field for field.
mod ffi {
    use std::ffi::{c_char, c_int};
    use std::marker::{PhantomData, PhantomPinned};

    pub const HP_NAME_CAPACITY: usize = 256;

    /// Opaque `hp_vdevice`: only ever behind a pointer; not Send/Sync/Unpin.
    #[repr(C)]
    pub struct HpVdevice {
        _data: [u8; 0],
        _marker: PhantomData<(*mut u8, PhantomPinned)>,
    }

    /// Opaque `hp_model`.
    #[repr(C)]
    pub struct HpModel {
        _data: [u8; 0],
        _marker: PhantomData<(*mut u8, PhantomPinned)>,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct HpQuantInfo {
        pub zp: f32,
        pub scale: f32,
        pub min: f32,
        pub max: f32,
    }

    #[repr(C)]
    pub struct HpStreamInfo {
        pub name: [c_char; HP_NAME_CAPACITY],
        pub height: u32,
        pub width: u32,
        pub features: u32,
        pub format_type: u32,
        pub format_order: u32,
        pub frame_size: u64,
        pub quant_info_count: u64,
    }

    #[repr(C)]
    pub struct HpVdeviceInfo {
        pub device_ids: [c_char; HP_NAME_CAPACITY],
        pub architecture: i32,
    }

    #[repr(C)]
    pub struct HpInput {
        pub name: *const c_char,
        pub data: *const u8,
        pub size: usize,
    }

    #[repr(C)]
    pub struct HpOutput {
        pub data: *mut u8,
        pub size: usize,
    }

    extern "C" {
        pub fn hp_vdevice_create(out: *mut *mut HpVdevice, err: *mut c_char, err_len: usize) -> c_int;
        pub fn hp_vdevice_info_get(vdevice: *const HpVdevice, out: *mut HpVdeviceInfo);
        pub fn hp_vdevice_destroy(vdevice: *mut HpVdevice);

        pub fn hp_hef_network_groups(
            hef_path: *const c_char,
            names: *mut c_char,
            capacity: usize,
            needed: *mut usize,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;

        pub fn hp_model_create(
            vdevice: *mut HpVdevice,
            hef_path: *const c_char,
            group: *const c_char,
            float_inputs: *const *const c_char,
            float_input_count: usize,
            out: *mut *mut HpModel,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub fn hp_model_destroy(model: *mut HpModel);

        pub fn hp_model_stream_count(model: *const HpModel, is_output: c_int) -> usize;
        pub fn hp_model_stream_info(
            model: *const HpModel,
            is_output: c_int,
            index: usize,
            out: *mut HpStreamInfo,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub fn hp_model_stream_quant_infos(
            model: *const HpModel,
            is_output: c_int,
            index: usize,
            out: *mut HpQuantInfo,
            capacity: usize,
            count: *mut usize,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;

        pub fn hp_model_run(
            model: *mut HpModel,
            inputs: *const HpInput,
            input_count: usize,
            outputs: *const HpOutput,
            output_count: usize,
            timeout_ms: u32,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;

        pub fn hp_model_init_cache(
            model: *mut HpModel,
            read_offset: u32,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub fn hp_model_update_cache_offset(
            model: *mut HpModel,
            offset_delta_entries: i32,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub fn hp_model_cache_snapshot(
            model: *mut HpModel,
            count: *mut usize,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub fn hp_model_cache_entry(
            model: *const HpModel,
            index: usize,
            cache_id: *mut u32,
            size: *mut u64,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub fn hp_model_cache_copy(
            model: *const HpModel,
            index: usize,
            dst: *mut u8,
            dst_len: usize,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub fn hp_model_cache_release(model: *mut HpModel);
        pub fn hp_model_update_cache_buffer(
            model: *mut HpModel,
            cache_id: u32,
            data: *const u8,
            size: usize,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
    }
}

// ---------------------------------------------------------------------------------------------
// Pure parts: status names, messages, version check, frame checks.

/// `hailo_status` names by value, 0..=97 (`HAILO_STATUS_VARIABLES`, hailort.h:91-188).
/// `hailo_get_status_message` (hailort.cpp:2272) returns exactly these strings, but it needs the
/// library at hand and logs an error for unknown values; this table keeps messages pure.
const STATUS_NAMES: [&str; 98] = [
    "HAILO_SUCCESS",
    "HAILO_UNINITIALIZED",
    "HAILO_INVALID_ARGUMENT",
    "HAILO_OUT_OF_HOST_MEMORY",
    "HAILO_TIMEOUT",
    "HAILO_INSUFFICIENT_BUFFER",
    "HAILO_INVALID_OPERATION",
    "HAILO_NOT_IMPLEMENTED",
    "HAILO_INTERNAL_FAILURE",
    "HAILO_DATA_ALIGNMENT_FAILURE",
    "HAILO_CHUNK_TOO_LARGE",
    "HAILO_INVALID_LOGGER_LEVEL",
    "HAILO_CLOSE_FAILURE",
    "HAILO_OPEN_FILE_FAILURE",
    "HAILO_FILE_OPERATION_FAILURE",
    "HAILO_UNSUPPORTED_CONTROL_PROTOCOL_VERSION",
    "HAILO_UNSUPPORTED_FW_VERSION",
    "HAILO_INVALID_CONTROL_RESPONSE",
    "HAILO_FW_CONTROL_FAILURE",
    "HAILO_ETH_FAILURE",
    "HAILO_ETH_INTERFACE_NOT_FOUND",
    "HAILO_ETH_RECV_FAILURE",
    "HAILO_ETH_SEND_FAILURE",
    "HAILO_INVALID_FIRMWARE",
    "HAILO_INVALID_CONTEXT_COUNT",
    "HAILO_INVALID_FRAME",
    "HAILO_INVALID_HEF",
    "HAILO_PCIE_NOT_SUPPORTED_ON_PLATFORM",
    "HAILO_INTERRUPTED_BY_SIGNAL",
    "HAILO_START_VDMA_CHANNEL_FAIL",
    "HAILO_SYNC_VDMA_BUFFER_FAIL",
    "HAILO_STOP_VDMA_CHANNEL_FAIL",
    "HAILO_CLOSE_VDMA_CHANNEL_FAIL",
    "HAILO_ATR_TABLES_CONF_VALIDATION_FAIL",
    "HAILO_EVENT_CREATE_FAIL",
    "HAILO_READ_EVENT_FAIL",
    "HAILO_DRIVER_OPERATION_FAILED",
    "HAILO_INVALID_FIRMWARE_MAGIC",
    "HAILO_INVALID_FIRMWARE_CODE_SIZE",
    "HAILO_INVALID_KEY_CERTIFICATE_SIZE",
    "HAILO_INVALID_CONTENT_CERTIFICATE_SIZE",
    "HAILO_MISMATCHING_FIRMWARE_BUFFER_SIZES",
    "HAILO_INVALID_FIRMWARE_CPU_ID",
    "HAILO_CONTROL_RESPONSE_MD5_MISMATCH",
    "HAILO_GET_CONTROL_RESPONSE_FAIL",
    "HAILO_GET_D2H_EVENT_MESSAGE_FAIL",
    "HAILO_MUTEX_INIT_FAIL",
    "HAILO_OUT_OF_DESCRIPTORS",
    "HAILO_UNSUPPORTED_OPCODE",
    "HAILO_USER_MODE_RATE_LIMITER_NOT_SUPPORTED",
    "HAILO_RATE_LIMIT_MAXIMUM_BANDWIDTH_EXCEEDED",
    "HAILO_ANSI_TO_UTF16_CONVERSION_FAILED",
    "HAILO_UTF16_TO_ANSI_CONVERSION_FAILED",
    "HAILO_UNEXPECTED_INTERFACE_INFO_FAILURE",
    "HAILO_UNEXPECTED_ARP_TABLE_FAILURE",
    "HAILO_MAC_ADDRESS_NOT_FOUND",
    "HAILO_NO_IPV4_INTERFACES_FOUND",
    "HAILO_SHUTDOWN_EVENT_SIGNALED",
    "HAILO_THREAD_ALREADY_ACTIVATED",
    "HAILO_THREAD_NOT_ACTIVATED",
    "HAILO_THREAD_NOT_JOINABLE",
    "HAILO_NOT_FOUND",
    "HAILO_COMMUNICATION_CLOSED",
    "HAILO_STREAM_ABORT",
    "HAILO_DRIVER_NOT_INSTALLED",
    "HAILO_NOT_AVAILABLE",
    "HAILO_TRAFFIC_CONTROL_FAILURE",
    "HAILO_INVALID_SECOND_STAGE",
    "HAILO_INVALID_PIPELINE",
    "HAILO_NETWORK_GROUP_NOT_ACTIVATED",
    "HAILO_VSTREAM_PIPELINE_NOT_ACTIVATED",
    "HAILO_OUT_OF_FW_MEMORY",
    "HAILO_STREAM_NOT_ACTIVATED",
    "HAILO_DEVICE_IN_USE",
    "HAILO_OUT_OF_PHYSICAL_DEVICES",
    "HAILO_INVALID_DEVICE_ARCHITECTURE",
    "HAILO_INVALID_DRIVER_VERSION",
    "HAILO_RPC_FAILED",
    "HAILO_INVALID_SERVICE_VERSION",
    "HAILO_NOT_SUPPORTED",
    "HAILO_NMS_BURST_INVALID_DATA",
    "HAILO_OUT_OF_HOST_CMA_MEMORY",
    "HAILO_QUEUE_IS_FULL",
    "HAILO_DMA_MAPPING_ALREADY_EXISTS",
    "HAILO_CANT_MEET_BUFFER_REQUIREMENTS",
    "HAILO_DRIVER_INVALID_RESPONSE",
    "HAILO_DRIVER_INVALID_IOCTL",
    "HAILO_DRIVER_TIMEOUT",
    "HAILO_DRIVER_INTERRUPTED",
    "HAILO_CONNECTION_REFUSED",
    "HAILO_DRIVER_WAIT_CANCELED",
    "HAILO_HEF_FILE_CORRUPTED",
    "HAILO_HEF_NOT_SUPPORTED",
    "HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE",
    "HAILO_INVALID_HEF_USE",
    "HAILO_OPERATION_ABORTED",
    "HAILO_DEVICE_NOT_CONNECTED",
    "HAILO_DEVICE_TEMPORARILY_UNAVAILABLE",
];

/// "HAILO_TIMEOUT (4)", or "unknown HailoRT status 120" for values past v5.2.0's list.
pub fn status_label(status: i32) -> String {
    match usize::try_from(status).ok().and_then(|i| STATUS_NAMES.get(i)) {
        Some(name) => format!("{name} ({status})"),
        None => format!("unknown HailoRT status {status}"),
    }
}

/// `hailo_device_architecture_t` (hailort.h:426-438) by value.
pub fn architecture_name(arch: i32) -> Option<&'static str> {
    const NAMES: [&str; 8] =
        ["HAILO8_A0", "HAILO8", "HAILO8L", "HAILO15H", "HAILO15L", "HAILO15M", "HAILO10H", "HAILO12L"];
    usize::try_from(arch).ok().and_then(|i| NAMES.get(i).copied())
}

/// What hefprobe knows about a failing call that HailoRT's status does not say.
#[derive(Debug, Clone, Default)]
pub struct CallContext<'a> {
    /// The call, as the shim names it, e.g. `VDevice::create_infer_model("m.hef", "m__prefill")`.
    pub call: &'a str,
    pub hef: Option<&'a Path>,
    pub group: Option<&'a str>,
    /// The timeout of a `run`.
    pub timeout: Option<Duration>,
}

/// Why a status happened and what would fix it, for the statuses hefprobe can explain.
fn explain(status: i32, ctx: &CallContext) -> String {
    let hef = ctx.hef.map_or_else(|| "the HEF".to_string(), |p| p.display().to_string());
    let group = ctx.group.map_or_else(|| "the network group".to_string(), |g| format!("network group `{g}`"));
    let log = "HailoRT's own log (./hailort.log, or $HAILORT_LOGGER_PATH) has the details";
    match status {
        // Creation: VDeviceHrpcClient::create and VDeviceBase::create_devices both return this
        // when no device is free, which includes "held by another process" (vdevice.cpp:549,
        // vdevice_hrpc_client.cpp:71).
        74 => "no free Hailo device: HailoRT found none, or every device is held by another process. \
               Check that `hailortcli scan` lists the device, and stop other users of it (the genai \
               server or hailo-ollama, another hefprobe)"
            .to_string(),
        96 => "the device is not connected (it disappeared from PCIe): check the card and its link, \
               `dmesg` and `hailortcli scan`, then reset or re-plug it"
            .to_string(),
        64 => "the Hailo PCIe driver is not installed or not running: install the hailort PCIe driver \
               package of the same version as libhailort and load it (or reboot)"
            .to_string(),
        76 => "the Hailo PCIe driver's version differs from libhailort's: install both from the same \
               HailoRT release"
            .to_string(),
        73 => "the device is in use by another process: stop it (the genai server, hailo-ollama, \
               another hefprobe) and retry"
            .to_string(),
        93 | 75 => format!(
            "{hef} was compiled for another Hailo architecture than this device: compile it for \
             hailo10h (the Dataflow Compiler's hw_arch), or run it on the device it was built for"
        ),
        26 => format!(
            "HailoRT rejected {hef} as invalid (one of its structural checks failed; {log}): recompile \
             it, or inspect it with `hailortcli parse-hef`"
        ),
        92 => format!(
            "{hef} uses a format version or a feature this HailoRT does not support (header version, \
             required extensions): compile it with a Dataflow Compiler release that matches HailoRT \
             {REQUIRED_MAJOR}.x, or upgrade HailoRT"
        ),
        91 => format!(
            "{hef} is corrupted: a checksum in its header does not match its contents (MD5/CRC32/XXH3 by \
             header version, hef.cpp). Copy it again (truncated downloads are the usual cause) or recompile it"
        ),
        13 | 14 => format!("{hef} could not be opened or read: check the path and its permissions"),
        4 => match ctx.timeout {
            Some(t) => format!(
                "{group} did not finish within {} ms. If the group has KV-cache layers, the firmware waits \
                 at the end of every inference for a cache-offset update (WaitForCacheUpdatedAction, \
                 resource_manager_builder.cpp): call update_cache_offset (delta 0 to repeat a step) before \
                 every run. Otherwise raise the timeout; if it keeps happening, reset the device",
                t.as_millis()
            ),
            None => format!("HailoRT timed out; {log}"),
        },
        // InferModelBase::create answers a name that is not a network group of the HEF with
        // "Passing network name is not supported yet!" (infer_model.cpp).
        7 => format!(
            "HailoRT does not implement this here: either {group} is not a network group of {hef} (HailoRT \
             takes only exact group names), or the call is one Hailo-10H's RPC client does not support \
             (only the InferModel calls are, vdevice_hrpc_client.cpp). {log}"
        ),
        61 => format!("HailoRT did not find something it was asked for (a group or stream name); {log}"),
        77 | 62 | 89 | 97 => "the connection to the runtime server on the device failed (Hailo-10H runs \
               networks behind an RPC server): check `hailortcli scan`, reset the device, and retry"
            .to_string(),
        _ => log.to_string(),
    }
}

/// The message for a failed HailoRT call: the call, the status name and number, why and what
/// would fix it. Messages of the shim's own checks (they start with `hp_`, the shim's function
/// names) already say what is wrong and get only the status appended.
pub fn status_message(status: i32, ctx: &CallContext) -> String {
    if ctx.call.starts_with("hp_") {
        return format!("{} [{}]", ctx.call, status_label(status));
    }
    let call = if ctx.call.is_empty() { "HailoRT call" } else { ctx.call };
    format!("{call} failed with {}: {}", status_label(status), explain(status, ctx))
}

/// [`status_message`] as an [`Error::Device`].
pub fn status_error(status: i32, ctx: &CallContext) -> Error {
    Error::Device(status_message(status, ctx))
}

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

/// `update_cache_buffer` over Hailo-10H's RPC client must fit the whole ring into one request of
/// [`RPC_REQUEST_MAX_BYTES`]; otherwise serialization fails with HAILO_INTERNAL_FAILURE
/// (`get_serialized_request`, hrpc_protocol/serializer.hpp:171). `architecture` is None when
/// the device did not say.
pub fn cache_write_error(status: i32, bytes: usize, architecture: Option<i32>, ctx: &CallContext) -> Error {
    let rpc = match architecture {
        Some(a) => a == ARCH_HAILO10H,
        None => true,
    };
    if status == 8 && rpc && bytes + 16 > RPC_REQUEST_MAX_BYTES {
        let which = if architecture.is_some() { "" } else { ", which this device most likely is" };
        return Error::Unsupported(format!(
            "{} failed with {}: HailoRT {CHECKED_VERSION}'s RPC client (used for Hailo-10H{which}) sends the \
             whole cache in one request of at most {RPC_REQUEST_MAX_BYTES} bytes (hrpc/client.cpp \
             REQUEST_PROTO_MAX_SIZE) and this cache has {bytes} bytes, so caches cannot be written from the host",
            ctx.call,
            status_label(status)
        ));
    }
    status_error(status, ctx)
}

/// The `hailo_format_type_t` (hailort.h:560-572) the shim reports.
fn format_type(value: u32) -> Option<FormatType> {
    match value {
        0 => Some(FormatType::Auto),
        1 => Some(FormatType::Uint8),
        2 => Some(FormatType::Uint16),
        3 => Some(FormatType::Float32),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// FFI helpers.

/// A buffer for the shim's error message.
struct ErrBuf([c_char; ERR_CAPACITY]);

impl ErrBuf {
    fn new() -> Self {
        ErrBuf([0; ERR_CAPACITY])
    }

    fn ptr(&mut self) -> *mut c_char {
        self.0.as_mut_ptr()
    }

    /// The message, or `fallback` if the shim wrote none.
    fn message(&self, fallback: &str) -> String {
        let msg = c_chars_to_string(&self.0);
        if msg.is_empty() {
            fallback.to_string()
        } else {
            msg
        }
    }
}

/// A NUL-terminated `char` array (the shim always terminates) as a String; the whole array if
/// no NUL is present.
fn c_chars_to_string(chars: &[c_char]) -> String {
    // to_ne_bytes: c_char is i8 on x86_64 and u8 on aarch64; a cast would be flagged as
    // unnecessary on one of them.
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c.to_ne_bytes()[0]).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn c_string(what: &str, value: &str) -> Result<CString> {
    CString::new(value).map_err(|_| Error::usage(format!("{what} `{value}` contains a NUL byte")))
}

fn path_c_string(path: &Path) -> Result<CString> {
    let s = path.to_str().ok_or_else(|| {
        Error::input(path.display().to_string(), "the HEF path is not valid UTF-8; rename or move the file")
    })?;
    c_string("HEF path", s)
}

/// `hailo_get_library_version` (hailort.h:1762); hailort-sys declares it with the same
/// signature and `hailo_version_t {major, minor, revision}` layout.
pub fn library_version() -> Result<(u32, u32, u32)> {
    let mut version = hailort_sys::hailo_version_t { major: 0, minor: 0, revision: 0 };
    // SAFETY: `version` is a valid, writable hailo_version_t for the duration of the call; the
    // function only writes its three u32 fields (hailort.cpp:85-92).
    let status = unsafe { hailort_sys::hailo_get_library_version(&mut version) };
    if status != hailort_sys::HAILO_SUCCESS {
        return Err(status_error(
            status,
            &CallContext { call: "hailo_get_library_version()", ..Default::default() },
        ));
    }
    Ok((version.major, version.minor, version.revision))
}

/// The network group names of a HEF, in `Hef::get_network_groups_names()` order.
fn hef_network_groups(hef: &Path) -> Result<Vec<String>> {
    let path = path_c_string(hef)?;
    let mut capacity = 4096usize;
    loop {
        let mut names: Vec<c_char> = vec![0; capacity];
        let mut needed = 0usize;
        let mut err = ErrBuf::new();
        // SAFETY: `path` is NUL-terminated and outlives the call; `names` has `capacity` writable
        // chars; `needed` and `err` are valid for writes of their sizes.
        let status = unsafe {
            ffi::hp_hef_network_groups(
                path.as_ptr(),
                names.as_mut_ptr(),
                capacity,
                &mut needed,
                err.ptr(),
                ERR_CAPACITY,
            )
        };
        // HAILO_INSUFFICIENT_BUFFER (5): the shim wrote nothing and said how much it needs.
        if status == hailort_sys::HAILO_INSUFFICIENT_BUFFER && needed > capacity {
            capacity = needed;
            continue;
        }
        if status != hailort_sys::HAILO_SUCCESS {
            let call = err.message("Hef::create");
            return Err(status_error(
                status,
                &CallContext { call: &call, hef: Some(hef), ..Default::default() },
            ));
        }
        return Ok(names[..needed]
            .split(|&c| c == 0)
            .filter(|name| !name.is_empty())
            .map(c_chars_to_string)
            .collect());
    }
}

// ---------------------------------------------------------------------------------------------
// Device.

/// A HEF on a real Hailo device: one VDevice (device_count 1) and the HEF's group names.
pub struct HailoDevice {
    vdevice: NonNull<ffi::HpVdevice>,
    hef: PathBuf,
    groups: Vec<String>,
    version: (u32, u32, u32),
    device_ids: String,
    architecture: Option<i32>,
}

impl HailoDevice {
    /// Checks the library version, reads the HEF's group names (on the host, so a bad HEF is
    /// reported before any device is needed), then creates the VDevice.
    pub fn open(hef_path: impl AsRef<Path>) -> Result<Self> {
        let hef = hef_path.as_ref().to_path_buf();
        let version = library_version()?;
        check_library_version(version.0, version.1, version.2)?;
        std::fs::metadata(&hef).map_err(|e| Error::io(&hef, e))?;
        let groups = hef_network_groups(&hef)?;
        if groups.is_empty() {
            return Err(Error::input(
                hef.display().to_string(),
                "HailoRT found no network group in this HEF",
            ));
        }

        let mut raw: *mut ffi::HpVdevice = std::ptr::null_mut();
        let mut err = ErrBuf::new();
        // SAFETY: `raw` and `err` are valid for writes; on success the shim stores an owned
        // handle in `raw`, released in Drop.
        let status = unsafe { ffi::hp_vdevice_create(&mut raw, err.ptr(), ERR_CAPACITY) };
        if status != hailort_sys::HAILO_SUCCESS {
            let call = err.message("VDevice::create_shared");
            return Err(status_error(
                status,
                &CallContext { call: &call, hef: Some(&hef), ..Default::default() },
            ));
        }
        let vdevice = NonNull::new(raw)
            .ok_or_else(|| Error::Device("hp_vdevice_create succeeded but returned no handle".into()))?;

        let mut info = ffi::HpVdeviceInfo { device_ids: [0; ffi::HP_NAME_CAPACITY], architecture: -1 };
        // SAFETY: `vdevice` is a live handle from hp_vdevice_create; `info` is valid for writes.
        unsafe { ffi::hp_vdevice_info_get(vdevice.as_ptr(), &mut info) };
        Ok(HailoDevice {
            vdevice,
            hef,
            groups,
            version,
            device_ids: c_chars_to_string(&info.device_ids),
            architecture: (info.architecture >= 0).then_some(info.architecture),
        })
    }

    fn read_streams(model: NonNull<ffi::HpModel>, is_output: bool) -> Result<Vec<StreamInfo>> {
        let side = c_int::from(is_output);
        // SAFETY: `model` is a live handle from hp_model_create.
        let count = unsafe { ffi::hp_model_stream_count(model.as_ptr(), side) };
        let mut streams = Vec::with_capacity(count);
        for index in 0..count {
            let mut info = ffi::HpStreamInfo {
                name: [0; ffi::HP_NAME_CAPACITY],
                height: 0,
                width: 0,
                features: 0,
                format_type: 0,
                format_order: 0,
                frame_size: 0,
                quant_info_count: 0,
            };
            let mut err = ErrBuf::new();
            // SAFETY: live handle; `index` < count; `info` and `err` are valid for writes.
            let status = unsafe {
                ffi::hp_model_stream_info(model.as_ptr(), side, index, &mut info, err.ptr(), ERR_CAPACITY)
            };
            if status != hailort_sys::HAILO_SUCCESS {
                let call = err.message("hp_model_stream_info");
                return Err(status_error(status, &CallContext { call: &call, ..Default::default() }));
            }
            let name = c_chars_to_string(&info.name);

            // get_quant_infos() returns one element in v5.2.0 (infer_model.cpp:53-57), INVALID
            // {0,0,0,0} for per-feature outputs; per-feature values exist only in the HEF.
            let wanted = usize::try_from(info.quant_info_count).unwrap_or(usize::MAX).min(1 << 20);
            let mut quant = vec![ffi::HpQuantInfo::default(); wanted];
            let mut got = 0usize;
            // SAFETY: live handle; `quant` has `wanted` writable elements; `got`, `err` writable.
            let status = unsafe {
                ffi::hp_model_stream_quant_infos(
                    model.as_ptr(),
                    side,
                    index,
                    quant.as_mut_ptr(),
                    wanted,
                    &mut got,
                    err.ptr(),
                    ERR_CAPACITY,
                )
            };
            if status != hailort_sys::HAILO_SUCCESS {
                let call = err.message("hp_model_stream_quant_infos");
                return Err(status_error(status, &CallContext { call: &call, ..Default::default() }));
            }
            quant.truncate(got.min(wanted));

            let format = format_type(info.format_type).ok_or_else(|| {
                Error::Device(format!(
                    "stream `{name}`: HailoRT reports format type {}, not one of hailo_format_type_t 0..=3",
                    info.format_type
                ))
            })?;
            let stream = StreamInfo {
                name,
                shape: Shape3::new(info.height, info.width, info.features),
                format,
                quant_infos: quant
                    .iter()
                    .map(|q| QuantInfo { zp: q.zp, scale: q.scale, min: q.min, max: q.max })
                    .collect(),
            };
            // hefprobe sizes frames as h·w·f·bytes; HailoRT differs only for NMS and RGB4 streams
            // (hailort_common.hpp get_frame_size), which an LLM does not have.
            if stream.frame_size() as u64 != info.frame_size {
                return Err(Error::Unsupported(format!(
                    "stream `{}`: HailoRT's frame size is {} bytes, hefprobe's h·w·f·bytes is {} (shape {}, {:?}); \
                     NMS and RGB4 streams are not supported",
                    stream.name,
                    info.frame_size,
                    stream.frame_size(),
                    stream.shape,
                    stream.format
                )));
            }
            streams.push(stream);
        }
        Ok(streams)
    }
}

impl Drop for HailoDevice {
    fn drop(&mut self) {
        // SAFETY: the handle came from hp_vdevice_create and is destroyed exactly once; models
        // hold their own reference to the VDevice (shim: hp_model::vdevice), so they stay valid.
        unsafe { ffi::hp_vdevice_destroy(self.vdevice.as_ptr()) };
    }
}

impl Device for HailoDevice {
    fn describe(&self) -> String {
        let (major, minor, revision) = self.version;
        let arch = match self.architecture {
            Some(a) => architecture_name(a).map_or_else(|| format!("architecture {a}"), str::to_string),
            None => "architecture unknown".to_string(),
        };
        let ids = if self.device_ids.is_empty() { "?" } else { &self.device_ids };
        format!(
            "Hailo device {ids} ({arch}) via HailoRT {major}.{minor}.{revision}, HEF {}",
            self.hef.display()
        )
    }

    fn network_groups(&self) -> Vec<String> {
        self.groups.clone()
    }

    fn configure(&mut self, group: &str, float_inputs: &[String]) -> Result<Box<dyn ConfiguredModel>> {
        if !self.groups.iter().any(|g| g == group) {
            let hint = crate::error::closest(group, self.groups.iter().map(String::as_str))
                .map(|c| format!(" Did you mean `{c}`?"))
                .unwrap_or_default();
            return Err(Error::input(
                self.hef.display().to_string(),
                format!("no network group `{group}`; it has: {}.{hint}", self.groups.join(", ")),
            ));
        }
        let hef_c = path_c_string(&self.hef)?;
        let group_c = c_string("network group", group)?;
        let float_c = float_inputs.iter().map(|n| c_string("input name", n)).collect::<Result<Vec<_>>>()?;
        let float_ptrs: Vec<*const c_char> = float_c.iter().map(|c| c.as_ptr()).collect();

        let mut raw: *mut ffi::HpModel = std::ptr::null_mut();
        let mut err = ErrBuf::new();
        // SAFETY: the vdevice handle is live (owned by self); every string is NUL-terminated and
        // outlives the call (`hef_c`, `group_c`, `float_c` back `float_ptrs`); `raw` and `err`
        // are writable. On success the shim stores an owned handle in `raw`.
        let status = unsafe {
            ffi::hp_model_create(
                self.vdevice.as_ptr(),
                hef_c.as_ptr(),
                group_c.as_ptr(),
                float_ptrs.as_ptr(),
                float_ptrs.len(),
                &mut raw,
                err.ptr(),
                ERR_CAPACITY,
            )
        };
        if status != hailort_sys::HAILO_SUCCESS {
            let call = err.message("hp_model_create");
            return Err(status_error(
                status,
                &CallContext { call: &call, hef: Some(&self.hef), group: Some(group), ..Default::default() },
            ));
        }
        let handle = NonNull::new(raw)
            .ok_or_else(|| Error::Device("hp_model_create succeeded but returned no handle".into()))?;
        // From here on the handle is owned by `model`, so an error below still destroys it.
        let mut model = HailoModel {
            model: handle,
            group: group.to_string(),
            hef: self.hef.clone(),
            architecture: self.architecture,
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        model.inputs = Self::read_streams(handle, false)?;
        model.outputs = Self::read_streams(handle, true)?;
        Ok(Box::new(model))
    }
}

// ---------------------------------------------------------------------------------------------
// Configured model.

/// One configured network group: `ConfiguredInferModel` with its bindings (inside the shim).
pub struct HailoModel {
    model: NonNull<ffi::HpModel>,
    group: String,
    hef: PathBuf,
    architecture: Option<i32>,
    inputs: Vec<StreamInfo>,
    outputs: Vec<StreamInfo>,
}

impl HailoModel {
    fn context<'a>(&'a self, call: &'a str) -> CallContext<'a> {
        CallContext { call, hef: Some(&self.hef), group: Some(&self.group), timeout: None }
    }

    /// Reads the cache snapshot the shim holds; the caller releases it.
    fn read_cache_snapshot(&mut self, count: usize) -> Result<BTreeMap<u32, Vec<u8>>> {
        let mut entries = Vec::with_capacity(count);
        for index in 0..count {
            let (mut id, mut size) = (0u32, 0u64);
            let mut err = ErrBuf::new();
            // SAFETY: live handle; `index` < count of the current snapshot; outputs writable.
            let status = unsafe {
                ffi::hp_model_cache_entry(
                    self.model.as_ptr(),
                    index,
                    &mut id,
                    &mut size,
                    err.ptr(),
                    ERR_CAPACITY,
                )
            };
            if status != hailort_sys::HAILO_SUCCESS {
                let call = err.message("hp_model_cache_entry");
                return Err(status_error(status, &self.context(&call)));
            }
            entries.push((id, size));
        }
        check_cache_snapshot(&self.group, &entries)?;

        let mut caches = BTreeMap::new();
        for (index, &(id, size)) in entries.iter().enumerate() {
            let len = usize::try_from(size)
                .map_err(|_| Error::Device(format!("cache {id} of {size} bytes does not fit in memory")))?;
            let mut bytes = vec![0u8; len];
            let mut err = ErrBuf::new();
            // SAFETY: live handle; `bytes` has exactly `len` writable bytes, the entry's size.
            let status = unsafe {
                ffi::hp_model_cache_copy(
                    self.model.as_ptr(),
                    index,
                    bytes.as_mut_ptr(),
                    len,
                    err.ptr(),
                    ERR_CAPACITY,
                )
            };
            if status != hailort_sys::HAILO_SUCCESS {
                let call = err.message("hp_model_cache_copy");
                return Err(status_error(status, &self.context(&call)));
            }
            caches.insert(id, bytes);
        }
        Ok(caches)
    }
}

impl Drop for HailoModel {
    fn drop(&mut self) {
        // SAFETY: the handle came from hp_model_create and is destroyed exactly once.
        unsafe { ffi::hp_model_destroy(self.model.as_ptr()) };
    }
}

impl ConfiguredModel for HailoModel {
    fn inputs(&self) -> &[StreamInfo] {
        &self.inputs
    }

    fn outputs(&self) -> &[StreamInfo] {
        &self.outputs
    }

    fn run(&mut self, inputs: &[(String, Vec<u8>)], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        check_input_frames(&self.group, &self.inputs, inputs)?;
        let names = inputs.iter().map(|(n, _)| c_string("input name", n)).collect::<Result<Vec<_>>>()?;
        let c_inputs: Vec<ffi::HpInput> = inputs
            .iter()
            .zip(&names)
            .map(|((_, bytes), name)| ffi::HpInput {
                name: name.as_ptr(),
                data: bytes.as_ptr(),
                size: bytes.len(),
            })
            .collect();
        let mut outputs: Vec<Vec<u8>> = self.outputs.iter().map(|s| vec![0u8; s.frame_size()]).collect();
        let c_outputs: Vec<ffi::HpOutput> =
            outputs.iter_mut().map(|o| ffi::HpOutput { data: o.as_mut_ptr(), size: o.len() }).collect();
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);

        let mut err = ErrBuf::new();
        // SAFETY: live handle. Every HpInput points into `inputs` and `names`, every HpOutput
        // into `outputs`, all alive and unmoved until the call returns; the shim copies inputs
        // into its own staging buffers and copies outputs back before returning, keeping no
        // pointer to caller memory.
        let status = unsafe {
            ffi::hp_model_run(
                self.model.as_ptr(),
                c_inputs.as_ptr(),
                c_inputs.len(),
                c_outputs.as_ptr(),
                c_outputs.len(),
                timeout_ms,
                err.ptr(),
                ERR_CAPACITY,
            )
        };
        if status != hailort_sys::HAILO_SUCCESS {
            let call = err.message("ConfiguredInferModel::run");
            let mut ctx = self.context(&call);
            ctx.timeout = Some(timeout);
            return Err(status_error(status, &ctx));
        }
        Ok(outputs)
    }

    fn init_cache(&mut self, read_offset: u32) -> Result<()> {
        let mut err = ErrBuf::new();
        // SAFETY: live handle; `err` writable.
        let status =
            unsafe { ffi::hp_model_init_cache(self.model.as_ptr(), read_offset, err.ptr(), ERR_CAPACITY) };
        if status != hailort_sys::HAILO_SUCCESS {
            let call = err.message("ConfiguredInferModel::init_cache");
            return Err(status_error(status, &self.context(&call)));
        }
        Ok(())
    }

    fn update_cache_offset(&mut self, delta_entries: i32) -> Result<()> {
        let mut err = ErrBuf::new();
        // SAFETY: live handle; `err` writable.
        let status = unsafe {
            ffi::hp_model_update_cache_offset(self.model.as_ptr(), delta_entries, err.ptr(), ERR_CAPACITY)
        };
        if status != hailort_sys::HAILO_SUCCESS {
            let call = err.message("ConfiguredInferModel::update_cache_offset");
            return Err(status_error(status, &self.context(&call)));
        }
        Ok(())
    }

    fn cache_buffers(&mut self) -> Result<BTreeMap<u32, Vec<u8>>> {
        let mut count = 0usize;
        let mut err = ErrBuf::new();
        // SAFETY: live handle; `count` and `err` writable. The snapshot is released below on
        // every path.
        let status =
            unsafe { ffi::hp_model_cache_snapshot(self.model.as_ptr(), &mut count, err.ptr(), ERR_CAPACITY) };
        let result = if status != hailort_sys::HAILO_SUCCESS {
            let call = err.message("ConfiguredInferModel::get_cache_buffers");
            Err(status_error(status, &self.context(&call)))
        } else {
            self.read_cache_snapshot(count)
        };
        // SAFETY: live handle; releasing the snapshot (possibly empty) is always allowed.
        unsafe { ffi::hp_model_cache_release(self.model.as_ptr()) };
        result
    }

    fn update_cache_buffer(&mut self, cache_id: u32, bytes: &[u8]) -> Result<()> {
        let mut err = ErrBuf::new();
        // SAFETY: live handle; `bytes` is readable for its length during the call and HailoRT
        // only reads from it (MemoryView::create_const in the shim); `err` writable.
        let status = unsafe {
            ffi::hp_model_update_cache_buffer(
                self.model.as_ptr(),
                cache_id,
                bytes.as_ptr(),
                bytes.len(),
                err.ptr(),
                ERR_CAPACITY,
            )
        };
        if status != hailort_sys::HAILO_SUCCESS {
            let call = err.message("ConfiguredInferModel::update_cache_buffer");
            return Err(cache_write_error(status, bytes.len(), self.architecture, &self.context(&call)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(
            status_message(93, &CallContext::default()).contains("HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE (93)")
        );
        assert!(
            status_message(75, &CallContext::default()).contains("HAILO_INVALID_DEVICE_ARCHITECTURE (75)")
        );
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
            assert!(
                msg.contains("m.hef is") || msg.contains("m.hef uses") || msg.contains("m.hef as"),
                "{msg}"
            );
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
        let err = cache_write_error(8, 65536, Some(ARCH_HAILO10H), &ctx);
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("256 bytes") && err.to_string().contains("65536 bytes"), "{err}");
        assert!(matches!(cache_write_error(8, 65536, None, &ctx), Error::Unsupported(_)));
        // A local device (Hailo-8) has no RPC: a real internal failure stays a device error.
        assert!(matches!(cache_write_error(8, 65536, Some(1), &ctx), Error::Device(_)));
        // Other statuses pass through.
        assert!(matches!(cache_write_error(2, 65536, Some(ARCH_HAILO10H), &ctx), Error::Device(_)));
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
        assert_eq!(ErrBuf::new().message("fallback"), "fallback");
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
}
