//! Devices: what HailoRT's InferModel gives, behind one trait, and the LLM driver that feeds
//! a HEF exactly as HailoRT's genai server does. Everything above the [`Device`] trait is
//! tested on the simulated device; the real one (feature `hailo`) goes through a small C++
//! shim over the InferModel API, because on Hailo-10H HailoRT's C API cannot configure a
//! network group (VDeviceHrpcClient::configure returns HAILO_NOT_IMPLEMENTED).

#[cfg(test)]
mod base_scope_tests;
pub mod doctor;
pub mod driver;
pub mod exposed;
pub mod frames;
#[cfg(feature = "hailo")]
pub mod hailo;
#[cfg(test)]
mod layout_tests;
pub mod open;
pub mod sim;
pub mod synth_hef;

use crate::error::{Error, Result};
use crate::hef::{NetworkGroup, QuantInfo, Shape3, Stream};
use std::collections::BTreeMap;
use std::time::Duration;

/// `hailo_format_type_t` (hailort.h): the values the runtime hands to and from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum FormatType {
    Auto = 0,
    Uint8 = 1,
    Uint16 = 2,
    Float32 = 3,
}

impl FormatType {
    pub fn bytes(self) -> usize {
        match self {
            FormatType::Uint8 => 1,
            FormatType::Uint16 => 2,
            FormatType::Float32 => 4,
            FormatType::Auto => 0,
        }
    }

    /// The hardware type of a layer with `data_bytes` bytes per element (hailort_common.hpp
    /// `get_format_type`: 1 → UINT8, 2 → UINT16).
    pub fn from_data_bytes(data_bytes: u32) -> Option<FormatType> {
        match data_bytes {
            1 => Some(FormatType::Uint8),
            2 => Some(FormatType::Uint16),
            _ => None,
        }
    }
}

/// One input or output as `InferModel::InferStream` presents it after `set_format_type`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StreamInfo {
    pub name: String,
    pub shape: Shape3,
    pub format: FormatType,
    /// One scalar quant info, or one per feature for per-feature outputs.
    pub quant_infos: Vec<QuantInfo>,
}

impl StreamInfo {
    /// `get_frame_size()`: h·w·f·bytes(format) (hailort_common.hpp `get_frame_size`).
    pub fn frame_size(&self) -> usize {
        self.shape.elements() as usize * self.format.bytes()
    }
}

crate::named_enum! {
    /// Which simulated device runs a simulated HEF (`--device`, a `hef` backend's `device=`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum SimProfile {
        /// A local device (PCIe, Hailo-8/15 style): every InferModel call is available.
        #[default]
        Sim = "sim",
        /// Hailo-10H, where the VDevice is an RPC client to hailort_server on the chip: the cache
        /// reads and writes are unsupported ([`RPC_CACHE_UNSUPPORTED`]) and any failed run poisons
        /// the configured model ([`RPC_FAILED_RUN`]).
        SimH10 = "sim-h10",
    }
}

impl SimProfile {
    pub fn parse(s: &str) -> Result<Self> {
        Self::from_name(s).ok_or_else(|| {
            Error::usage(format!(
                "device `{s}`: expected one of {} (a compiled HEF picks the real device by itself)",
                Self::ALL.map(Self::name).join(", ")
            ))
        })
    }

    /// Whether the device is reached over HailoRT's RPC client (Hailo-10H).
    pub fn over_rpc(self) -> bool {
        self == SimProfile::SimH10
    }
}

/// Why the KV-cache calls are never made over RPC. Every caller prints this as the reason a
/// diagnostic is unavailable; it starts with the phrase `diagnose` shows.
pub const RPC_CACHE_UNSUPPORTED: &str = "unavailable on this device (HailoRT 5.2 RPC): on Hailo-10H the \
     VDevice is an RPC client, and get_cache_buffers makes hailort_server pack every cache ring into one \
     reply copied into a pool buffer of header + 2048 bytes (hailort_server/hailort_server.cpp \
     ~569-580, hrpc/response_writer.hpp, hrpc/rpc_connection.cpp): real rings are megabytes, so the \
     server's heap overflows and the client closes its loop (HAILO_COMMUNICATION_CLOSED for every later \
     call); update_cache_buffer is refused on the host before sending \
     (configured_infer_model_hrpc_client.cpp). hefprobe never makes either call there";

/// What a failed run does over RPC: hailort_server shuts the configured model down
/// (configured_infer_model_hrpc_client.cpp `run_async` / hailort_server.cpp's
/// ConfiguredInferModel_RUN_ASYNC handler), so every later call on it fails.
pub const RPC_FAILED_RUN: &str = "a failed run over HailoRT's RPC client shuts the configured model down \
     on the server (configured_infer_model_hrpc_client.cpp run_async); every later call fails, so \
     hefprobe refuses them with the first failure";

/// What a device reports about itself, recorded with every suite result so a figure can be
/// traced to the library, chip and temperature (or simulator) that produced it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeviceFacts {
    /// `sim` or `hailo`.
    pub kind: String,
    /// HailoRT's version (`hailo_get_library_version`).
    pub library_version: Option<String>,
    pub device_id: Option<String>,
    /// The device architecture as HailoRT names it (`HAILO10H`, ...).
    pub architecture: Option<String>,
    pub temperature_c: Option<f32>,
    /// For the simulated device: hefprobe's version and what the simulated HEF computes.
    pub simulator: Option<String>,
}

/// What a real device said when asked (feature `hailo`), as plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealDevice {
    pub device_ids: String,
    /// `hailo_device_architecture_t` name (HAILO10H, ...), or None when HailoRT did not say.
    pub architecture: Option<String>,
    /// Whether the VDevice is local, so the cache calls may be made (`hailo::check_cache_access`:
    /// not on Hailo-10H, not on an architecture HailoRT did not name).
    pub cache_local: bool,
}

/// A HEF on a device: `VDevice` + `Hef`.
pub trait Device {
    /// One sentence naming the device (and library version for the real one).
    fn describe(&self) -> String;
    /// The facts a nightly record keeps: library version, device id, architecture.
    fn facts(&self) -> DeviceFacts;
    /// `create_infer_model(hef, group)`, `set_enable_kv_cache(true)`, float32 for `float_inputs`
    /// and every output, then `configure()` — what genai's LLM server does per group.
    fn configure(&mut self, group: &str, float_inputs: &[String]) -> Result<Box<dyn ConfiguredModel>>;
}

/// `ConfiguredInferModel`: bindings, run and the KV-cache calls.
pub trait ConfiguredModel {
    fn inputs(&self) -> &[StreamInfo];
    /// In `outputs()` order: the order genai concatenates them in.
    fn outputs(&self) -> &[StreamInfo];
    /// Bind every input (name → bytes of exactly its frame size), run, return every output's
    /// bytes in `outputs()` order.
    fn run(&mut self, inputs: &[(String, Vec<u8>)], timeout: Duration) -> Result<Vec<Vec<u8>>>;
    fn init_cache(&mut self, read_offset: u32) -> Result<()>;
    fn update_cache_offset(&mut self, delta_entries: i32) -> Result<()>;
    /// `get_cache_buffers()`: cache id → the whole backing ring, raw.
    fn cache_buffers(&mut self) -> Result<BTreeMap<u32, Vec<u8>>>;
    /// `update_cache_buffer(id, bytes)`: overwrite one ring.
    fn update_cache_buffer(&mut self, cache_id: u32, bytes: &[u8]) -> Result<()>;
}

/// Bytes of one cache ring entry as HailoRT pads it (the HEF layout's rule, kept with the
/// synthesizer that writes the cache layers).
pub use crate::hef::synth::padded_entry_bytes;

/// The inputs and outputs of `g` as `InferModel` presents them once genai has set its formats
/// (llm_server.cpp:209-218): FLOAT32 for `float_inputs` and every output, the hardware type
/// (`data_bytes`) for every other input.
pub fn configured_streams(
    g: &NetworkGroup,
    float_inputs: &[String],
) -> Result<(Vec<StreamInfo>, Vec<StreamInfo>)> {
    let info = |s: &Stream, format: FormatType| StreamInfo {
        name: s.name.clone(),
        shape: s.shape,
        format,
        quant_infos: if s.quant_per_feature.is_empty() { vec![s.quant] } else { s.quant_per_feature.clone() },
    };
    let inputs = g
        .inputs
        .iter()
        .map(|s| {
            if float_inputs.contains(&s.name) {
                return Ok(info(s, FormatType::Float32));
            }
            let hw = FormatType::from_data_bytes(s.data_bytes).ok_or_else(|| {
                Error::Device(format!(
                    "`{}`: {} bytes per element is not a HailoRT type",
                    s.name, s.data_bytes
                ))
            })?;
            Ok(info(s, hw))
        })
        .collect::<Result<Vec<_>>>()?;
    let outputs = g.outputs.iter().map(|s| info(s, FormatType::Float32)).collect();
    Ok((inputs, outputs))
}

/// How long one inference may take: genai's INFERENCE_TIMEOUT (inference_manager.hpp:24).
pub const INFERENCE_TIMEOUT: Duration = Duration::from_secs(15);
