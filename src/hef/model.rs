//! The plain-data view of a HEF that the rest of hefprobe uses: network groups with their
//! streams (as HailoRT's InferModel would present them), cache layers, and external resources.
//!
//! Reading (`decode.rs`) derives this view the way HailoRT v5.2.0 does (hef.cpp, see facts §1.5);
//! writing (`encode.rs`) produces a V3 file HailoRT would accept. Nothing here refers to the proto.

use serde::Serialize;

use crate::error::{Error, Result};

/// `hailo_quant_info_t` {qp_zp, qp_scale, limvals_min, limvals_max}, all f32 (hailort.h).
///
/// Equality is bitwise, so NaN and -0.0 survive a round trip comparison.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct QuantInfo {
    pub zp: f32,
    pub scale: f32,
    pub min: f32,
    pub max: f32,
}

impl PartialEq for QuantInfo {
    fn eq(&self, other: &Self) -> bool {
        self.bits() == other.bits()
    }
}

impl Eq for QuantInfo {}

impl QuantInfo {
    /// `INVALID_QUANT_INFO` {0,0,0,0} (hailort.h:82): what HailoRT puts in the scalar quant info of
    /// an output quantized per feature.
    pub const INVALID: QuantInfo = QuantInfo { zp: 0.0, scale: 0.0, min: 0.0, max: 0.0 };

    fn bits(&self) -> [u32; 4] {
        [self.zp.to_bits(), self.scale.to_bits(), self.min.to_bits(), self.max.to_bits()]
    }

    /// `is_identity_qp` (quantization.hpp:194-206): scale 1 and zero point 0. HailoRT then skips
    /// clipping and scaling entirely.
    pub fn is_identity(&self) -> bool {
        self.scale == 1.0 && self.zp == 0.0
    }

    /// `quantize_input_buffer` (quantization.hpp:149-162, 270-274): identity → round only (no clip);
    /// otherwise round(clip(x, min, max) / scale + zp), all in f32, rounding half to even as rintf
    /// does under FE_TONEAREST. The caller casts to the integer type (HailoRT does not saturate).
    pub fn quantize(&self, x: f32) -> f32 {
        if self.is_identity() {
            return x.round_ties_even();
        }
        (self.clip(x) / self.scale + self.zp).round_ties_even()
    }

    /// `dequantize_output` (quantization.hpp:234-237): (q − zp) · scale in f32; identity → q.
    pub fn dequantize(&self, q: f32) -> f32 {
        if self.is_identity() {
            return q;
        }
        (q - self.zp) * self.scale
    }

    /// `x` as the host reads it from a quantized output: quantized, its code saturated to
    /// 0..=`qmax` as the hardware's type holds it, dequantized.
    pub fn seen(&self, x: f32, qmax: f32) -> f32 {
        self.dequantize(self.quantize(x).clamp(0.0, qmax))
    }

    /// `Quantization::clip` (quantization.hpp:239-250): the max test comes first.
    fn clip(&self, x: f32) -> f32 {
        if x >= self.max {
            self.max
        } else if x <= self.min {
            self.min
        } else {
            x
        }
    }
}

/// A stream's device format order, from the compiler's `edge_layer_base.format` code
/// (`HailoRTDefaults::get_device_format_order`, hailort_defaults.cpp:50-99).
///
/// Codes 0 and 13 both mean NHWC to HailoRT; they are kept apart (`Nhwc13`) because the compiler
/// distinguishes them and a prefill/tbt mismatch between them is worth seeing (finding 9 was a
/// cache layout mismatch). A code HailoRT does not know is kept as `Other` — HailoRT itself would
/// refuse the layer (HAILO_INTERNAL_FAILURE), which the audit reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FormatOrder {
    Nhwc,
    Nhcw,
    Nc,
    Fcr,
    BayerRgb,
    Nhw,
    HailoNmsOnChip,
    F8cr,
    Rgb888,
    Yuy2,
    Nhwc13,
    HailoYyuv,
    HailoYyvu,
    HailoYyyyuv,
    Other(u32),
}

/// (code, order, name) for every code HailoRT knows.
const FORMAT_CODES: [(u32, FormatOrder, &str); 14] = [
    (0, FormatOrder::Nhwc, "NHWC"),
    (1, FormatOrder::Nhcw, "NHCW"),
    (2, FormatOrder::Nc, "NC"),
    (3, FormatOrder::Fcr, "FCR"),
    (4, FormatOrder::BayerRgb, "BAYER_RGB"),
    (5, FormatOrder::Nhw, "NHW"),
    (6, FormatOrder::HailoNmsOnChip, "HAILO_NMS_ON_CHIP"),
    (7, FormatOrder::F8cr, "F8CR"),
    (8, FormatOrder::Rgb888, "RGB888"),
    (11, FormatOrder::Yuy2, "YUY2"),
    (13, FormatOrder::Nhwc13, "NHWC (code 13)"),
    (14, FormatOrder::HailoYyuv, "HAILO_YYUV"),
    (15, FormatOrder::HailoYyvu, "HAILO_YYVU"),
    (16, FormatOrder::HailoYyyyuv, "HAILO_YYYYUV"),
];

impl FormatOrder {
    pub fn from_code(code: u32) -> FormatOrder {
        FORMAT_CODES.iter().find(|(c, _, _)| *c == code).map_or(FormatOrder::Other(code), |(_, o, _)| *o)
    }

    pub fn code(self) -> u32 {
        match self {
            FormatOrder::Other(code) => code,
            known => FORMAT_CODES.iter().find(|(_, o, _)| *o == known).map_or(u32::MAX, |(c, _, _)| *c),
        }
    }

    /// HailoRT's name for the order (`HAILO_FORMAT_ORDER_<name>`), or `unknown code N`.
    pub fn name(self) -> String {
        match self {
            FormatOrder::Other(code) => format!("unknown code {code}"),
            known => {
                FORMAT_CODES.iter().find(|(_, o, _)| *o == known).map_or("?", |(_, _, n)| *n).to_string()
            }
        }
    }

    /// Whether HailoRT can open a layer with this order at all.
    pub fn is_known(self) -> bool {
        !matches!(self, FormatOrder::Other(_))
    }
}

impl std::fmt::Display for FormatOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl Serialize for FormatOrder {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

/// `hailo_3d_image_shape_t` {height, width, features}.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Shape3 {
    pub height: u32,
    pub width: u32,
    pub features: u32,
}

impl Shape3 {
    pub fn new(height: u32, width: u32, features: u32) -> Self {
        Shape3 { height, width, features }
    }

    /// height × width × features, saturating (a corrupt HEF may claim 2^96 elements).
    pub fn elements(&self) -> u64 {
        self.rows().saturating_mul(u64::from(self.features))
    }

    /// height × width: the number of token rows of an LLM frame. genai never looks at height or
    /// width separately — it sizes frames as h·w·f·bytes and lays them out as rows × features
    /// (pre_process.cpp `prepare_embeddings_input`, `prepare_attention_mask_input`,
    /// `tile_along_last_axis`), so only the product matters.
    pub fn rows(&self) -> u64 {
        u64::from(self.height) * u64::from(self.width)
    }
}

impl std::fmt::Display for Shape3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}, {}, {}]", self.height, self.width, self.features)
    }
}

/// Element type from `data_bytes` (`HailoRTCommon::get_format_type`, hailort_common.hpp:152):
/// 1 → UINT8, 2 → UINT16; anything else makes HailoRT refuse the layer.
pub fn dtype_name(data_bytes: u32) -> String {
    match data_bytes {
        1 => "UINT8".to_string(),
        2 => "UINT16".to_string(),
        other => format!("invalid ({other} bytes)"),
    }
}

/// One boundary input or output, as InferModel presents it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stream {
    /// The edge layer name, verbatim (the compiler already prefixes `<ng>/`).
    pub name: String,
    /// Host shape; H and W already swapped when `transposed`.
    pub shape: Shape3,
    /// The padded (hardware) dims from the HEF, never swapped.
    pub padded: Shape3,
    pub order: FormatOrder,
    /// Bytes per element (1 = UINT8, 2 = UINT16).
    pub data_bytes: u32,
    /// The scalar quant info; {0,0,0,0} for an output quantized per feature.
    pub quant: QuantInfo,
    /// One entry per feature when the HEF has OUTPUT_SCALE_PER_FEATURE, else empty.
    pub quant_per_feature: Vec<QuantInfo>,
    /// HailoRT swapped H and W (HAILO_FORMAT_FLAGS_TRANSPOSED): the layer or the whole network
    /// is marked transposed and the order is not NC.
    pub transposed: bool,
}

impl Stream {
    pub fn elements(&self) -> u64 {
        self.shape.elements()
    }

    pub fn dtype(&self) -> String {
        dtype_name(self.data_bytes)
    }
}

/// A KV-cache edge layer (connection type CACHE). Read side = HOST_TO_DEVICE direction: HailoRT
/// files H2D cache layers as the core op's "cache input layers" (core_op_metadata.cpp
/// `add_cache_layer`), and the cache manager maps inputs to the read window (cache_manager.cpp).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheLayer {
    pub name: String,
    /// true = read side (H2D, the window the network reads), false = write side (D2H).
    pub is_input: bool,
    pub cache_id: u32,
    pub shape: Shape3,
    /// Hardware dims; `padded.features` is the cache entry size in bytes (cache_manager.cpp:211-235).
    pub padded: Shape3,
    pub order: FormatOrder,
    pub data_bytes: u32,
    /// The HEF's numeric info for the layer (HailoRT itself does not use it for caches).
    pub quant: QuantInfo,
}

/// One network group: its name and what InferModel would show for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NetworkGroup {
    /// `network_group_metadata.network_group_name` (hef.cpp `get_network_group_name`).
    pub name: String,
    /// Boundary inputs, context by context in HEF order (`CoreOpMetadata::get_input_layer_infos`).
    pub inputs: Vec<Stream>,
    /// Boundary outputs in HailoRT's output order (sorted_outputs_order), which is also the order
    /// genai concatenates them in.
    pub outputs: Vec<Stream>,
    /// Names of outputs missing from the sorted output list; they are at the end of `outputs` in
    /// HEF order. HailoRT fails to list outputs for such a group (HAILO_INTERNAL_FAILURE).
    pub unordered_outputs: Vec<String>,
    pub caches: Vec<CacheLayer>,
    /// Number of dynamic contexts.
    pub contexts: usize,
}

/// One external resource (embeddings.bin, tokenizer.json, ...).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resource {
    pub name: String,
    #[serde(skip)]
    pub data: Vec<u8>,
    /// The XXH3-64 stored in the HEF (0 = not checked by HailoRT).
    pub xxhash: u64,
}

impl Resource {
    /// A resource with its hash set, as the writer stores it.
    pub fn new(name: impl Into<String>, data: Vec<u8>) -> Self {
        let xxhash = xxhash_rust::xxh3::xxh3_64(&data);
        Resource { name: name.into(), data, xxhash }
    }
}

/// A whole HEF.
///
/// `Hef::from_bytes(&h.to_bytes()) == h` holds for every `h` that a read can produce from a file
/// the writer made: version 3, extensions containing HAILO_NET_FLOW (13) and
/// PERIPH_CALCULATION_IN_HAILORT (26), each resource's `xxhash` equal to its data's XXH3-64,
/// per-feature lists present exactly when OUTPUT_SCALE_PER_FEATURE (25) is (outputs then carry
/// `QuantInfo::INVALID` as scalar), at least one context per group, and `transposed` never set
/// on an NC stream. Floats survive bit for bit, except that a scalar -0.0 reads back as 0.0
/// (proto3 does not write a field equal to its default).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hef {
    /// Container version (0..3).
    pub version: u32,
    /// `ProtoHEFHwArch` (HAILO1XH = 103 is the Hailo-10H / Hailo-15H family).
    pub hw_arch: i32,
    /// `sdk_version_str`, or "major.minor.revision" when only the structured version is set.
    pub sdk_version: String,
    pub groups: Vec<NetworkGroup>,
    pub resources: Vec<Resource>,
    /// `ProtoHEFExtensionType` ids HailoRT honours (empty when the proto header version is 0,
    /// where HailoRT ignores the list).
    pub extensions: Vec<u32>,
}

/// Extension ids hefprobe relies on (hef.proto `ProtoHEFExtensionType`).
pub mod extension {
    pub const IS_MULTI_CONTEXTS: u32 = 4;
    pub const HAILO_NET_FLOW: u32 = 13;
    pub const OUTPUT_SCALE_PER_FEATURE: u32 = 25;
    pub const PERIPH_CALCULATION_IN_HAILORT: u32 = 26;
    pub const EXTERNAL_RESOURCES: u32 = 31;

    /// `SUPPORTED_EXTENSIONS` (hef_internal.hpp:203-238): any other required extension makes
    /// HailoRT 5.2 refuse the HEF (HAILO_HEF_NOT_SUPPORTED).
    pub const SUPPORTED: [u32; 34] = [
        0, 1, 2, 3, 4, 5, 6, 9, 10, 12, 13, 14, 16, 18, 19, 20, 21, 22, 23, 15, 25, 26, 24, 17, 11, 27, 28,
        29, 30, 31, 32, 33, 34, 35,
    ];

    /// The writer always declares these: PERIPH_CALCULATION_IN_HAILORT is mandatory
    /// (`validate_hef_extensions` hef.cpp:445), HAILO_NET_FLOW selects the ops/core_op layout.
    pub const WRITER_REQUIRED: [u32; 2] = [HAILO_NET_FLOW, PERIPH_CALCULATION_IN_HAILORT];

    /// hef.proto names, for display.
    pub fn name(id: u32) -> String {
        // In id order, 0 to 35.
        const NAMES: &str =
            "ABBALE POSTED_WRITES DDR PADDED_DDR_BUFFERS IS_MULTI_CONTEXTS COMPRESSED_PARAMS \
            TRANSPOSE_COMPONENT TEST_ONE MULTI_NETWORK_VARIABLE_BATCH_SIZE IS_NMS_MULTI_CONTEXT \
            OFFLOAD_ARGMAX HW_PADDING KO_RUN_ASAP HAILO_NET_FLOW HAILO_NET_FLOW_YOLOV5_NMS \
            HAILO_NET_FLOW_YOLOX_NMS HAILO_NET_FLOW_SSD_NMS HAILO_NET_FLOW_IOU_NMS WRITE_DATA_BY_TYPE \
            NMS_OUTPUT_BURST DUAL_DIRECTION_STREAM_INDEX HAILO_NET_FLOW_ARGMAX HAILO_NET_FLOW_SOFTMAX \
            ALIGNED_FORMAT_TYPE HAILO_NET_FLOW_YOLOV5_SEG_NMS OUTPUT_SCALE_PER_FEATURE \
            PERIPH_CALCULATION_IN_HAILORT HAILO_NET_FLOW_YOLOV8_NMS BATCH_REGISTER_CONFIG \
            HAILO_NET_FLOW_BBOX_DECODING CCW_PTR_SQUEEZE EXTERNAL_RESOURCES SHARED_CONFIG CSM_CRC \
            ENABLE_CONFIG_CHANNELS STRICT_RUNTIME_VERSIONING";
        NAMES.split(' ').nth(id as usize).map_or_else(|| format!("UNKNOWN_{id}"), str::to_string)
    }
}

pub use super::arch::hw_arch_name;

/// What a network group is to an LLM host, from its structure: a group without cache layers is
/// run alone in one fixed frame (the exporter's base scope: `s6_compile_hef.py
/// --include-base-scope` of l-nmch/hailo-10h-llm-compiler names it `<scope>`, beside
/// `<scope>__prefill` and `<scope>__tbt`); of the cache-bearing groups genai's tbt suffix always
/// ends in `tbt` and its prefill suffix in `prefill` (llm_server.cpp :46, :58).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupRole {
    Prefill,
    Tbt,
    BaseScope,
}

impl NetworkGroup {
    pub fn role(&self) -> GroupRole {
        if self.caches.is_empty() {
            GroupRole::BaseScope
        } else if self.name.ends_with("tbt") {
            GroupRole::Tbt
        } else {
            GroupRole::Prefill
        }
    }
}

/// The groups a host drives: genai's pair, or the group a user named (`group=NAME`) — a prefill
/// group with the tbt group genai pairs it with, or a base-scope group alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Driven {
    /// The group every prompt goes through (prefill, or the base-scope group).
    pub main: String,
    pub tbt: Option<String>,
    pub base_scope: bool,
}

/// The prefill and tbt network groups genai would pick for a LoRA name ("" = base model).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LlmGroups {
    pub prefill: String,
    pub tbt: Option<String>,
    pub prefill_suffix: String,
    pub tbt_suffix: String,
}

impl Hef {
    /// The first resource with this name, as HailoRT's name lookup returns it.
    pub fn resource(&self, name: &str) -> Option<&[u8]> {
        self.resources.iter().find(|r| r.name == name).map(|r| r.data.as_slice())
    }

    pub fn group(&self, name: &str) -> Option<&NetworkGroup> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// Every group with its role, for messages: `a (prefill, with tbt b), b (tbt), c (base scope)`.
    pub fn group_list(&self) -> String {
        let named: Vec<String> = self
            .groups
            .iter()
            .map(|g| match g.role() {
                GroupRole::Prefill => format!("`{}` (prefill)", g.name),
                GroupRole::Tbt => format!("`{}` (tbt)", g.name),
                GroupRole::BaseScope => format!("`{}` (base scope: no cache)", g.name),
            })
            .collect();
        named.join(", ")
    }

    /// The groups to drive: genai's choice ([`Hef::llm_groups`]) when `named` is None, else the
    /// group named — a prefill group with its tbt partner (its name with `prefill` replaced by
    /// `tbt`, when that group exists), or a base-scope group alone. A name the HEF does not have,
    /// or a tbt group (genai never prefills through one), is a usage error listing the groups.
    pub fn driven_groups(&self, named: Option<&str>) -> Result<Driven> {
        let Some(name) = named else {
            let (main, tbt) = self.llm_groups().map_err(|e| match e {
                Error::Input { what, msg }
                    if self.groups.iter().any(|g| g.role() == GroupRole::BaseScope) =>
                {
                    Error::Input {
                        what,
                        msg: format!(
                            "{msg}. Name the group to run with `group=NAME` on the hef backend (`--group` \
                             elsewhere); the groups: {}",
                            self.group_list()
                        ),
                    }
                }
                e => e,
            })?;
            return Ok(Driven { main, tbt, base_scope: false });
        };
        let g = self.group(name).ok_or_else(|| {
            Error::usage(format!(
                "network group `{name}` is not in this HEF; its groups: {}",
                self.group_list()
            ))
        })?;
        match g.role() {
            GroupRole::BaseScope => Ok(Driven { main: name.to_string(), tbt: None, base_scope: true }),
            GroupRole::Tbt => Err(Error::usage(format!(
                "network group `{name}` is a tbt group (one token per frame over the cache prefill wrote): name \
                 the prefill group it pairs with; the groups: {}",
                self.group_list()
            ))),
            GroupRole::Prefill => {
                let partner = name.strip_suffix("prefill").map(|stem| format!("{stem}tbt"));
                let tbt = partner.filter(|t| self.group(t).is_some_and(|g| g.role() == GroupRole::Tbt));
                Ok(Driven { main: name.to_string(), tbt, base_scope: false })
            }
        }
    }

    /// (prefill, tbt) network group names for the base model, as genai selects them.
    pub fn llm_groups(&self) -> Result<(String, Option<String>)> {
        let groups = self.llm_groups_for_lora("")?;
        Ok((groups.prefill, groups.tbt))
    }

    /// genai's selection (llm_server.cpp `get_prefill_model_name_suffix` :46,
    /// `get_tbt_model_name_suffix` :58, `LLMInferenceManager::create` llm_inference_manager.cpp:22-39):
    /// the suffix depends on the number of groups — "prefill" with ≤ 2 groups, else
    /// "<lora or base_model>__prefill"; "tbt" only with exactly 2 groups, else "<..>__tbt" — and the
    /// **last** group whose name ends with the suffix wins. No tbt group is allowed (base scope).
    pub fn llm_groups_for_lora(&self, lora: &str) -> Result<LlmGroups> {
        let scope = if lora.is_empty() { "base_model" } else { lora };
        let count = self.groups.len();
        let prefill_suffix = if count <= 2 { "prefill".to_string() } else { format!("{scope}__prefill") };
        let tbt_suffix = if count == 2 { "tbt".to_string() } else { format!("{scope}__tbt") };
        let last_with = |suffix: &str| {
            self.groups.iter().rev().find(|g| g.name.ends_with(suffix)).map(|g| g.name.clone())
        };
        let Some(prefill) = last_with(&prefill_suffix) else {
            let names: Vec<&str> = self.groups.iter().map(|g| g.name.as_str()).collect();
            return Err(Error::input(
                "HEF network groups",
                format!(
                    "no group name ends with `{prefill_suffix}` (genai's prefill suffix for a HEF with {count} \
                     group(s)); groups present: {names:?}. genai fails with HAILO_INTERNAL_FAILURE; rename the \
                     groups at compile time"
                ),
            ));
        };
        Ok(LlmGroups { prefill, tbt: last_with(&tbt_suffix), prefill_suffix, tbt_suffix })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(zp: f32, scale: f32, min: f32, max: f32) -> QuantInfo {
        QuantInfo { zp, scale, min, max }
    }

    #[test]
    fn identity_quantize_rounds_half_to_even_without_clipping() {
        let id = q(0.0, 1.0, -1.0, 1.0);
        assert!(id.is_identity());
        assert_eq!(id.quantize(2.5), 2.0);
        assert_eq!(id.quantize(3.5), 4.0);
        assert_eq!(id.quantize(-2.5), -2.0);
        assert_eq!(id.quantize(300.4), 300.0, "identity must not clip to limvals");
        assert_eq!(id.dequantize(7.0), 7.0);
    }

    #[test]
    fn quantize_clips_scales_and_rounds_half_to_even() {
        let qi = q(10.0, 0.5, -4.0, 4.0);
        assert_eq!(qi.quantize(1.0), 12.0); // 1/0.5 + 10
        assert_eq!(qi.quantize(0.25), 10.0); // 0.5 + 10 = 10.5 → 10 (even)
        assert_eq!(qi.quantize(0.75), 12.0); // 1.5 + 10 = 11.5 → 12 (even)
        assert_eq!(qi.quantize(100.0), 18.0); // clipped to 4 → 8 + 10
        assert_eq!(qi.quantize(-100.0), 2.0); // clipped to -4 → -8 + 10
        assert_eq!(qi.dequantize(12.0), 1.0);
        assert_eq!(qi.dequantize(0.0), -5.0);
    }

    #[test]
    fn mask_on_value_for_a_typical_mask_quant() {
        // 1.0 with scale 1/255 and zp 0 is 255, the "on" byte genai writes into the mask.
        let qi = q(0.0, 1.0 / 255.0, 0.0, 1.0);
        assert_eq!(qi.quantize(1.0), 255.0);
    }

    #[test]
    fn format_codes_map_like_hailort() {
        assert_eq!(FormatOrder::from_code(0), FormatOrder::Nhwc);
        assert_eq!(FormatOrder::from_code(7), FormatOrder::F8cr);
        assert_eq!(FormatOrder::from_code(5).name(), "NHW");
        assert_eq!(FormatOrder::from_code(9), FormatOrder::Other(9));
        for code in 0..40 {
            assert_eq!(FormatOrder::from_code(code).code(), code);
        }
    }

    #[test]
    fn quant_equality_is_bitwise() {
        assert_ne!(q(0.0, 1.0, 0.0, 0.0), q(-0.0, 1.0, 0.0, 0.0));
        assert_eq!(q(f32::NAN, 1.0, 0.0, 0.0), q(f32::NAN, 1.0, 0.0, 0.0));
    }

    fn hef_with_groups(names: &[&str]) -> Hef {
        let group = |name: &str| NetworkGroup {
            name: name.to_string(),
            inputs: vec![],
            outputs: vec![],
            unordered_outputs: vec![],
            caches: vec![],
            contexts: 1,
        };
        Hef {
            version: 3,
            hw_arch: 103,
            sdk_version: String::new(),
            groups: names.iter().map(|n| group(n)).collect(),
            resources: vec![],
            extensions: vec![],
        }
    }

    #[test]
    fn one_group_is_prefill_only() {
        let hef = hef_with_groups(&["model__prefill"]);
        assert_eq!(hef.llm_groups().unwrap(), ("model__prefill".into(), None));
    }

    #[test]
    fn two_groups_use_the_short_suffixes() {
        let hef = hef_with_groups(&["qwen_prefill", "qwen_tbt"]);
        assert_eq!(hef.llm_groups().unwrap(), ("qwen_prefill".into(), Some("qwen_tbt".into())));
    }

    #[test]
    fn four_groups_use_scoped_suffixes_and_lora_names() {
        let hef = hef_with_groups(&["base_model__prefill", "base_model__tbt", "lora__prefill", "lora__tbt"]);
        assert_eq!(hef.llm_groups().unwrap(), ("base_model__prefill".into(), Some("base_model__tbt".into())));
        let lora = hef.llm_groups_for_lora("lora").unwrap();
        assert_eq!((lora.prefill.as_str(), lora.tbt.as_deref()), ("lora__prefill", Some("lora__tbt")));
    }

    #[test]
    fn last_match_wins() {
        // With 3 groups the suffix is base_model__prefill; both end with it, the last wins.
        let hef = hef_with_groups(&["a_base_model__prefill", "b_base_model__prefill", "x"]);
        assert_eq!(hef.llm_groups().unwrap().0, "b_base_model__prefill");
    }

    #[test]
    fn three_groups_do_not_match_short_suffixes() {
        let hef = hef_with_groups(&["m_prefill", "m_tbt", "other"]);
        let err = hef.llm_groups().unwrap_err().to_string();
        assert!(err.contains("base_model__prefill") && err.contains("m_prefill"), "{err}");
    }

    #[test]
    fn tbt_needs_exactly_two_groups_for_the_short_suffix() {
        let hef = hef_with_groups(&["m_prefill"]);
        assert_eq!(hef.llm_groups_for_lora("").unwrap().tbt_suffix, "base_model__tbt");
    }
}
