//! HailoRT status codes → typed errors whose message names the failing call, the status and,
//! where hefprobe can tell, why it happened and what would fix it.
//!
//! Status values are hailort-sys' named constants; its `hailo_status` list equals
//! `HAILO_STATUS_VARIABLES` of include/hailo/hailort.h in HailoRT v5.2.0, value for value.

use std::path::Path;
use std::time::Duration;

use hailort_sys::{hailo_device_architecture_t, hailo_status};

use super::checks::{CHECKED_VERSION, REQUIRED_MAJOR};
use crate::error::Error;

/// `REQUEST_PROTO_MAX_SIZE` (hrpc/client.cpp:16): every RPC request, cache writes included, is
/// serialized into a buffer of this many bytes.
const RPC_REQUEST_MAX_BYTES: usize = 256;

/// Builds `STATUS_NAMES` from the constants' own names, so a name can only be spelled as
/// hailort-sys spells it, and checks at compile time that the n-th name is status n.
macro_rules! status_names {
    ($($name:ident),* $(,)?) => {
        /// `hailo_status` names by value, 0..=97 (`HAILO_STATUS_VARIABLES`, hailort.h:91-188).
        /// `hailo_get_status_message` (hailort.cpp:2272) returns exactly these strings, but it
        /// needs the library at hand and logs an error for unknown values; this table keeps
        /// messages pure.
        pub(super) const STATUS_NAMES: [&str; 98] = [$(stringify!($name)),*];

        const _: () = {
            let values: [hailo_status; 98] = [$(hailort_sys::$name),*];
            let mut i = 0;
            while i < values.len() {
                assert!(values[i] as usize == i, "STATUS_NAMES must list hailo_status names in value order");
                i += 1;
            }
        };
    };
}

status_names![
    HAILO_SUCCESS,
    HAILO_UNINITIALIZED,
    HAILO_INVALID_ARGUMENT,
    HAILO_OUT_OF_HOST_MEMORY,
    HAILO_TIMEOUT,
    HAILO_INSUFFICIENT_BUFFER,
    HAILO_INVALID_OPERATION,
    HAILO_NOT_IMPLEMENTED,
    HAILO_INTERNAL_FAILURE,
    HAILO_DATA_ALIGNMENT_FAILURE,
    HAILO_CHUNK_TOO_LARGE,
    HAILO_INVALID_LOGGER_LEVEL,
    HAILO_CLOSE_FAILURE,
    HAILO_OPEN_FILE_FAILURE,
    HAILO_FILE_OPERATION_FAILURE,
    HAILO_UNSUPPORTED_CONTROL_PROTOCOL_VERSION,
    HAILO_UNSUPPORTED_FW_VERSION,
    HAILO_INVALID_CONTROL_RESPONSE,
    HAILO_FW_CONTROL_FAILURE,
    HAILO_ETH_FAILURE,
    HAILO_ETH_INTERFACE_NOT_FOUND,
    HAILO_ETH_RECV_FAILURE,
    HAILO_ETH_SEND_FAILURE,
    HAILO_INVALID_FIRMWARE,
    HAILO_INVALID_CONTEXT_COUNT,
    HAILO_INVALID_FRAME,
    HAILO_INVALID_HEF,
    HAILO_PCIE_NOT_SUPPORTED_ON_PLATFORM,
    HAILO_INTERRUPTED_BY_SIGNAL,
    HAILO_START_VDMA_CHANNEL_FAIL,
    HAILO_SYNC_VDMA_BUFFER_FAIL,
    HAILO_STOP_VDMA_CHANNEL_FAIL,
    HAILO_CLOSE_VDMA_CHANNEL_FAIL,
    HAILO_ATR_TABLES_CONF_VALIDATION_FAIL,
    HAILO_EVENT_CREATE_FAIL,
    HAILO_READ_EVENT_FAIL,
    HAILO_DRIVER_OPERATION_FAILED,
    HAILO_INVALID_FIRMWARE_MAGIC,
    HAILO_INVALID_FIRMWARE_CODE_SIZE,
    HAILO_INVALID_KEY_CERTIFICATE_SIZE,
    HAILO_INVALID_CONTENT_CERTIFICATE_SIZE,
    HAILO_MISMATCHING_FIRMWARE_BUFFER_SIZES,
    HAILO_INVALID_FIRMWARE_CPU_ID,
    HAILO_CONTROL_RESPONSE_MD5_MISMATCH,
    HAILO_GET_CONTROL_RESPONSE_FAIL,
    HAILO_GET_D2H_EVENT_MESSAGE_FAIL,
    HAILO_MUTEX_INIT_FAIL,
    HAILO_OUT_OF_DESCRIPTORS,
    HAILO_UNSUPPORTED_OPCODE,
    HAILO_USER_MODE_RATE_LIMITER_NOT_SUPPORTED,
    HAILO_RATE_LIMIT_MAXIMUM_BANDWIDTH_EXCEEDED,
    HAILO_ANSI_TO_UTF16_CONVERSION_FAILED,
    HAILO_UTF16_TO_ANSI_CONVERSION_FAILED,
    HAILO_UNEXPECTED_INTERFACE_INFO_FAILURE,
    HAILO_UNEXPECTED_ARP_TABLE_FAILURE,
    HAILO_MAC_ADDRESS_NOT_FOUND,
    HAILO_NO_IPV4_INTERFACES_FOUND,
    HAILO_SHUTDOWN_EVENT_SIGNALED,
    HAILO_THREAD_ALREADY_ACTIVATED,
    HAILO_THREAD_NOT_ACTIVATED,
    HAILO_THREAD_NOT_JOINABLE,
    HAILO_NOT_FOUND,
    HAILO_COMMUNICATION_CLOSED,
    HAILO_STREAM_ABORT,
    HAILO_DRIVER_NOT_INSTALLED,
    HAILO_NOT_AVAILABLE,
    HAILO_TRAFFIC_CONTROL_FAILURE,
    HAILO_INVALID_SECOND_STAGE,
    HAILO_INVALID_PIPELINE,
    HAILO_NETWORK_GROUP_NOT_ACTIVATED,
    HAILO_VSTREAM_PIPELINE_NOT_ACTIVATED,
    HAILO_OUT_OF_FW_MEMORY,
    HAILO_STREAM_NOT_ACTIVATED,
    HAILO_DEVICE_IN_USE,
    HAILO_OUT_OF_PHYSICAL_DEVICES,
    HAILO_INVALID_DEVICE_ARCHITECTURE,
    HAILO_INVALID_DRIVER_VERSION,
    HAILO_RPC_FAILED,
    HAILO_INVALID_SERVICE_VERSION,
    HAILO_NOT_SUPPORTED,
    HAILO_NMS_BURST_INVALID_DATA,
    HAILO_OUT_OF_HOST_CMA_MEMORY,
    HAILO_QUEUE_IS_FULL,
    HAILO_DMA_MAPPING_ALREADY_EXISTS,
    HAILO_CANT_MEET_BUFFER_REQUIREMENTS,
    HAILO_DRIVER_INVALID_RESPONSE,
    HAILO_DRIVER_INVALID_IOCTL,
    HAILO_DRIVER_TIMEOUT,
    HAILO_DRIVER_INTERRUPTED,
    HAILO_CONNECTION_REFUSED,
    HAILO_DRIVER_WAIT_CANCELED,
    HAILO_HEF_FILE_CORRUPTED,
    HAILO_HEF_NOT_SUPPORTED,
    HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE,
    HAILO_INVALID_HEF_USE,
    HAILO_OPERATION_ABORTED,
    HAILO_DEVICE_NOT_CONNECTED,
    HAILO_DEVICE_TEMPORARILY_UNAVAILABLE
];

/// "HAILO_TIMEOUT (4)", or "unknown HailoRT status 120" for values past v5.2.0's list.
pub fn status_label(status: hailo_status) -> String {
    match usize::try_from(status).ok().and_then(|i| STATUS_NAMES.get(i)) {
        Some(name) => format!("{name} ({status})"),
        None => format!("unknown HailoRT status {status}"),
    }
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
fn explain(status: hailo_status, ctx: &CallContext) -> String {
    let hef = ctx.hef.map_or_else(|| "the HEF".to_string(), |p| p.display().to_string());
    let group = ctx.group.map_or_else(|| "the network group".to_string(), |g| format!("network group `{g}`"));
    let log = "HailoRT's own log (./hailort.log, or $HAILORT_LOGGER_PATH) has the details";
    match status {
        // Creation: VDeviceHrpcClient::create and VDeviceBase::create_devices both return this
        // when no device is free, which includes "held by another process" (vdevice.cpp:549,
        // vdevice_hrpc_client.cpp:71).
        hailort_sys::HAILO_OUT_OF_PHYSICAL_DEVICES => "no free Hailo device: HailoRT found none, or every device is held by another process. \
               Check that `hailortcli scan` lists the device, and stop other users of it (the genai \
               server or hailo-ollama, another hefprobe)"
            .to_string(),
        hailort_sys::HAILO_DEVICE_NOT_CONNECTED => "the device is not connected (it disappeared from PCIe): check the card and its link, \
               `dmesg` and `hailortcli scan`, then reset or re-plug it"
            .to_string(),
        hailort_sys::HAILO_DRIVER_NOT_INSTALLED => "the Hailo PCIe driver is not installed or not running: install the hailort PCIe driver \
               package of the same version as libhailort and load it (or reboot)"
            .to_string(),
        hailort_sys::HAILO_INVALID_DRIVER_VERSION => "the Hailo PCIe driver's version differs from libhailort's: install both from the same \
               HailoRT release"
            .to_string(),
        hailort_sys::HAILO_DEVICE_IN_USE => "the device is in use by another process: stop it (the genai server, hailo-ollama, \
               another hefprobe) and retry"
            .to_string(),
        hailort_sys::HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE | hailort_sys::HAILO_INVALID_DEVICE_ARCHITECTURE => format!(
            "{hef} was compiled for another Hailo architecture than this device: compile it for \
             hailo10h (the Dataflow Compiler's hw_arch), or run it on the device it was built for"
        ),
        hailort_sys::HAILO_INVALID_HEF => format!(
            "HailoRT rejected {hef} as invalid (one of its structural checks failed; {log}): recompile \
             it, or inspect it with `hailortcli parse-hef`"
        ),
        hailort_sys::HAILO_HEF_NOT_SUPPORTED => format!(
            "{hef} uses a format version or a feature this HailoRT does not support (header version, \
             required extensions): compile it with a Dataflow Compiler release that matches HailoRT \
             {REQUIRED_MAJOR}.x, or upgrade HailoRT"
        ),
        hailort_sys::HAILO_HEF_FILE_CORRUPTED => format!(
            "{hef} is corrupted: a checksum in its header does not match its contents (MD5/CRC32/XXH3 by \
             header version, hef.cpp). Copy it again (truncated downloads are the usual cause) or recompile it"
        ),
        hailort_sys::HAILO_OPEN_FILE_FAILURE | hailort_sys::HAILO_FILE_OPERATION_FAILURE => format!("{hef} could not be opened or read: check the path and its permissions"),
        hailort_sys::HAILO_TIMEOUT => match ctx.timeout {
            Some(t) => format!(
                "{group} did not finish within {} ms. If the group has KV-cache layers, the firmware waits \
                 at the end of every inference for a cache-offset update (WaitForCacheUpdatedAction, \
                 resource_manager_builder.cpp): call update_cache_offset (delta 0 to repeat a step) before \
                 every run. Otherwise raise the timeout; if it keeps happening, reset the device",
                t.as_millis()
            ),
            // create_infer_model/configure over RPC wait LONG_RPC_ACTION_TIMEOUT = 45 s
            // (hrpc_protocol/serializer.hpp 28); HAILO_REQUEST_TIMEOUT_SECONDS replaces every RPC
            // deadline (hrpc/client.cpp 18-25).
            None => format!(
                "HailoRT timed out. Over Hailo-10H's RPC client, creating or configuring a model is given 45 s; \
                 for a large HEF set HAILO_REQUEST_TIMEOUT_SECONDS=300 in the environment and retry; {log}"
            ),
        },
        // InferModelBase::create answers a name that is not a network group of the HEF with
        // "Passing network name is not supported yet!" (infer_model.cpp).
        hailort_sys::HAILO_NOT_IMPLEMENTED => format!(
            "HailoRT does not implement this here: either {group} is not a network group of {hef} (HailoRT \
             takes only exact group names), or the call is one Hailo-10H's RPC client does not support \
             (only the InferModel calls are, vdevice_hrpc_client.cpp). {log}"
        ),
        hailort_sys::HAILO_NOT_FOUND => format!("HailoRT did not find something it was asked for (a group or stream name); {log}"),
        hailort_sys::HAILO_RPC_FAILED
        | hailort_sys::HAILO_COMMUNICATION_CLOSED
        | hailort_sys::HAILO_CONNECTION_REFUSED
        | hailort_sys::HAILO_DEVICE_TEMPORARILY_UNAVAILABLE => "the connection to the runtime server on the device failed (Hailo-10H runs \
               networks behind an RPC server): check `hailortcli scan`, reset the device, and retry"
            .to_string(),
        _ => log.to_string(),
    }
}

/// The message for a failed HailoRT call: the call, the status name and number, why and what
/// would fix it. Messages of the shim's own checks (they start with `hp_`, the shim's function
/// names) already say what is wrong and get only the status appended.
pub fn status_message(status: hailo_status, ctx: &CallContext) -> String {
    if ctx.call.starts_with("hp_") {
        return format!("{} [{}]", ctx.call, status_label(status));
    }
    let call = if ctx.call.is_empty() { "HailoRT call" } else { ctx.call };
    format!("{call} failed with {}: {}", status_label(status), explain(status, ctx))
}

/// [`status_message`] as an [`Error::Device`].
pub fn status_error(status: hailo_status, ctx: &CallContext) -> Error {
    Error::Device(status_message(status, ctx))
}

/// A shim call that failed (see [`super::ffi::call`]): HailoRT's status and the shim's message.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) status: hailo_status,
    /// The failing HailoRT call as the shim names it, or the shim's own check (`hp_...`).
    pub(super) call: String,
}

impl Failure {
    /// What hefprobe knows around the call (HEF, group, timeout), with this failure's call.
    pub(super) fn context<'a>(&'a self, around: CallContext<'a>) -> CallContext<'a> {
        CallContext { call: &self.call, ..around }
    }

    /// [`status_error`] for this failure.
    pub(super) fn error(&self, around: CallContext) -> Error {
        status_error(self.status, &self.context(around))
    }
}

/// `update_cache_buffer` over Hailo-10H's RPC client must fit the whole ring into one request of
/// [`RPC_REQUEST_MAX_BYTES`]; otherwise serialization fails with HAILO_INTERNAL_FAILURE
/// (`get_serialized_request`, hrpc_protocol/serializer.hpp:171). `architecture` is None when
/// the device did not say.
pub fn cache_write_error(
    status: hailo_status,
    bytes: usize,
    architecture: Option<hailo_device_architecture_t>,
    ctx: &CallContext,
) -> Error {
    let rpc = match architecture {
        Some(a) => a == hailort_sys::HAILO_ARCH_HAILO10H,
        None => true,
    };
    if status == hailort_sys::HAILO_INTERNAL_FAILURE && rpc && bytes + 16 > RPC_REQUEST_MAX_BYTES {
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
