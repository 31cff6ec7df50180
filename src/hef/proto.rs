//! The subset of HailoRT's `hef.proto` that hefprobe reads and writes, as prost messages.
//!
//! Field numbers and wire types follow `hailort/libhailort/hef.proto` (HailoRT v5.2.0); the
//! definitions are our own and list only what the reader or writer uses. Everything else in a real
//! HEF (operations, CCW pointers, NMS ops, pads, ...) is an unknown field to prost and is skipped,
//! which is what lets hefprobe read HEFs from newer compilers without knowing their additions.
//!
//! Enums are kept as raw `int32` with named constants instead of prost enumerations: a HEF may
//! carry values we do not know, and the audit must report them rather than fail on them.

// Names of proto3 enum values, hef.proto `ProtoHEFEdgeLayerDirection` / `ProtoHEFEdgeLayerType` /
// `ProtoHEFEdgeConnectionType`.
pub const DIRECTION_HOST_TO_DEVICE: i32 = 0;
pub const DIRECTION_DEVICE_TO_HOST: i32 = 1;
pub const EDGE_LAYER_TYPE_INFO: i32 = 0;
pub const EDGE_LAYER_TYPE_MUX: i32 = 1;
pub const EDGE_LAYER_TYPE_PLANES: i32 = 2;
pub const CONNECTION_BOUNDARY: i32 = 0;
pub const CONNECTION_INTERMEDIATE: i32 = 1;
pub const CONNECTION_DDR: i32 = 2;
pub const CONNECTION_CACHE: i32 = 3;

/// hef.proto `ProtoHEFHef`: the root message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefHef {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ProtoHefHeader>,
    #[prost(message, repeated, tag = "2")]
    pub network_groups: Vec<ProtoHefNetworkGroup>,
    #[prost(message, repeated, tag = "5")]
    pub extensions: Vec<ProtoHefExtension>,
    #[prost(message, repeated, tag = "6")]
    pub optional_extensions: Vec<ProtoHefExtension>,
    #[prost(message, repeated, tag = "7")]
    pub external_resources: Vec<ProtoHefExternalResource>,
}

/// hef.proto `ProtoHEFHeader`. `version` is the *proto format* version: HailoRT honours the
/// `extensions` list only when it is > 0 (hef.cpp `check_hef_extension`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefHeader {
    #[prost(int32, tag = "1")]
    pub hw_arch: i32,
    #[prost(uint64, tag = "2")]
    pub timestamp: u64,
    #[prost(string, tag = "3")]
    pub sdk_version_str: String,
    #[prost(uint64, tag = "4")]
    pub version: u64,
    #[prost(message, optional, tag = "5")]
    pub sdk_version: Option<ProtoHefSdkVersion>,
}

/// hef.proto `ProtoHEFSdkVersion`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefSdkVersion {
    #[prost(uint32, tag = "1")]
    pub sdk_version_major: u32,
    #[prost(uint32, tag = "2")]
    pub sdk_version_minor: u32,
    #[prost(uint32, tag = "3")]
    pub sdk_version_revision: u32,
}

/// hef.proto `ProtoHEFExtension` (and `ProtoHEFOptionalExtension`, which has the same fields).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefExtension {
    #[prost(uint32, tag = "1")]
    pub type_index: u32,
    #[prost(string, tag = "2")]
    pub name: String,
}

/// hef.proto `ProtoHEFExternalResource`. `offset` is relative to the CCW start
/// (offset_zero_point), not to the file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefExternalResource {
    #[prost(uint64, tag = "1")]
    pub offset: u64,
    #[prost(uint64, tag = "2")]
    pub size: u64,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(uint64, tag = "4")]
    pub xxhash: u64,
}

/// hef.proto `ProtoHEFNetworkGroup`. Fields 1-6 are the legacy layout (the network group is its own
/// core op); with the HAILO_NET_FLOW extension the core op lives in `ops[..].core_op` instead.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefNetworkGroup {
    #[prost(message, optional, tag = "1")]
    pub network_group_metadata: Option<ProtoHefNetworkGroupMetadata>,
    #[prost(message, repeated, tag = "3")]
    pub contexts: Vec<ProtoHefContext>,
    #[prost(string, repeated, tag = "4")]
    pub sorted_outputs_order: Vec<String>,
    #[prost(message, optional, tag = "5")]
    pub fused_layers_metadata: Option<ProtoHefFusedLayersMetadata>,
    #[prost(string, repeated, tag = "6")]
    pub networks_names: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    pub ops: Vec<ProtoHefOp>,
    /// Not read by HailoRT (the name comes from `network_group_metadata`); written for humans.
    #[prost(string, tag = "10")]
    pub network_group_name: String,
    #[prost(uint32, tag = "11")]
    pub network_group_index: u32,
}

/// hef.proto `ProtoHEFOp`: only the `core_op` arm of the `op` oneof is modelled; NMS and logits
/// post-processing ops are skipped as unknown fields.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefOp {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(oneof = "ProtoHefOpKind", tags = "4")]
    pub op: Option<ProtoHefOpKind>,
}

/// The `op` oneof of `ProtoHEFOp`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ProtoHefOpKind {
    #[prost(message, tag = "4")]
    CoreOp(ProtoHefCoreOp),
}

/// hef.proto `ProtoHEFCoreOp`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefCoreOp {
    #[prost(message, optional, tag = "1")]
    pub network_group_metadata: Option<ProtoHefNetworkGroupMetadata>,
    #[prost(message, repeated, tag = "3")]
    pub contexts: Vec<ProtoHefContext>,
    #[prost(string, repeated, tag = "4")]
    pub sorted_outputs_order: Vec<String>,
    #[prost(message, optional, tag = "5")]
    pub fused_layers_metadata: Option<ProtoHefFusedLayersMetadata>,
    #[prost(string, repeated, tag = "6")]
    pub networks_names: Vec<String>,
}

/// hef.proto `ProtoHEFNetworkGroupMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefNetworkGroupMetadata {
    #[prost(string, tag = "1")]
    pub network_group_name: String,
    #[prost(uint32, tag = "2")]
    pub network_group_index: u32,
    #[prost(bool, tag = "3")]
    pub transposed_net: bool,
}

/// hef.proto `ProtoHEFFusedLayersMetadata`: when `network_has_fused_layers` is set, its names are
/// HailoRT's output order ahead of every other source (hef.cpp `fill_networks_metadata`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefFusedLayersMetadata {
    #[prost(bool, tag = "1")]
    pub network_has_fused_layers: bool,
    #[prost(string, repeated, tag = "2")]
    pub updated_sorted_output_names: Vec<String>,
}

/// hef.proto `ProtoHEFContext`: one dynamic context (its `operations`, field 2, are skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefContext {
    #[prost(uint32, tag = "1")]
    pub context_index: u32,
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<ProtoHefContextMetadata>,
}

/// hef.proto `ProtoHEFContextMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefContextMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub edge_layers: Vec<ProtoHefEdgeLayer>,
    #[prost(string, repeated, tag = "5")]
    pub sorted_outputs_order: Vec<String>,
}

/// hef.proto `ProtoHEFEdgeLayer`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefEdgeLayer {
    #[prost(int32, tag = "1")]
    pub direction: i32,
    #[prost(int32, tag = "2")]
    pub edge_layer_type: i32,
    #[prost(oneof = "ProtoHefEdge", tags = "3, 4, 8")]
    pub edge: Option<ProtoHefEdge>,
    #[prost(message, optional, tag = "5")]
    pub context_switch_info: Option<ProtoHefContextSwitchInformation>,
    #[prost(uint32, tag = "6")]
    pub network_index: u32,
}

/// The `edge` oneof of `ProtoHEFEdgeLayer`. Mux and planes layers are kept only by name so the
/// reader can say which layer it does not support.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ProtoHefEdge {
    #[prost(message, tag = "3")]
    LayerInfo(ProtoHefEdgeLayerInfo),
    #[prost(message, tag = "4")]
    LayerMux(ProtoHefNamedLayer),
    #[prost(message, tag = "8")]
    LayerPlanes(ProtoHefNamedLayer),
}

/// The `name` (field 1) of `ProtoHEFEdgeLayerMux` / `ProtoHEFEdgeLayerPlanes`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefNamedLayer {
    #[prost(string, tag = "1")]
    pub name: String,
}

/// hef.proto `ProtoHEFEdgeLayerInfo`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefEdgeLayerInfo {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub edge_layer_base: Option<ProtoHefEdgeLayerBase>,
    #[prost(message, optional, tag = "3")]
    pub numeric_info: Option<ProtoHefEdgeLayerNumericInfo>,
    #[prost(string, tag = "4")]
    pub hn_output_layer_name: String,
    #[prost(string, repeated, tag = "5")]
    pub original_names: Vec<String>,
    #[prost(bool, tag = "6")]
    pub transposed: bool,
}

/// hef.proto `ProtoHEFResourceIndices`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefResourceIndices {
    #[prost(uint32, tag = "1")]
    pub index: u32,
    #[prost(uint32, tag = "2")]
    pub cluster_index: u32,
}

/// hef.proto `ProtoHEFEdgeLayerBase`. `format` is the compiler's format code, not
/// `ProtoHEFFormatOrder` (see `model::FormatOrder::from_code`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefEdgeLayerBase {
    #[prost(uint32, tag = "1")]
    pub height: u32,
    #[prost(uint32, tag = "2")]
    pub padded_height: u32,
    #[prost(uint32, tag = "3")]
    pub width: u32,
    #[prost(uint32, tag = "4")]
    pub padded_width: u32,
    #[prost(uint32, tag = "5")]
    pub features: u32,
    #[prost(uint32, tag = "6")]
    pub padded_features: u32,
    #[prost(uint32, tag = "7")]
    pub format: u32,
    #[prost(uint32, tag = "8")]
    pub sys_index: u32,
    #[prost(uint32, tag = "9")]
    pub core_bytes_per_buffer: u32,
    #[prost(uint32, tag = "10")]
    pub core_buffers_per_frame: u32,
    #[prost(uint32, tag = "12")]
    pub data_bytes: u32,
    /// HailoRT's parser asserts exactly one entry per edge layer (hef.cpp, the "Simulation
    /// info" of `fill_layer_info`: `assert(1 == buffer_indices_size())`); without it a release
    /// build of HailoRT reads past an empty list and crashes (measured: `hailortcli parse-hef`
    /// on a HEF without them dies with SIGSEGV).
    #[prost(message, repeated, tag = "13")]
    pub buffer_indices: Vec<ProtoHefResourceIndices>,
    #[prost(bool, tag = "14")]
    pub host_argmax: bool,
    #[prost(uint32, tag = "15")]
    pub max_shmifo_size: u32,
    #[prost(uint32, tag = "16")]
    pub engine_id: u32,
}

/// hef.proto `ProtoHEFEdgeLayerNumericInfo`. The per-feature lists are `repeated double` upstream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefEdgeLayerNumericInfo {
    #[prost(float, tag = "1")]
    pub qp_zp: f32,
    #[prost(float, tag = "2")]
    pub qp_scale: f32,
    #[prost(float, tag = "3")]
    pub limvals_min: f32,
    #[prost(float, tag = "4")]
    pub limvals_max: f32,
    #[prost(double, repeated, tag = "5")]
    pub qp_zps: Vec<f64>,
    #[prost(double, repeated, tag = "6")]
    pub qp_scales: Vec<f64>,
}

/// hef.proto `ProtoHEFContextSwitchInformation`. `cache_id` is `int32` upstream; HailoRT rejects
/// negative ids on cache layers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoHefContextSwitchInformation {
    #[prost(uint32, tag = "1")]
    pub context_index: u32,
    #[prost(string, tag = "2")]
    pub context_name: String,
    #[prost(int32, tag = "3")]
    pub edge_connection_type: i32,
    #[prost(uint32, tag = "4")]
    pub connected_context_index: u32,
    #[prost(string, tag = "5")]
    pub connected_context_name: String,
    #[prost(uint32, tag = "6")]
    pub buffers: u32,
    #[prost(uint32, tag = "7")]
    pub connected_sys_index: u32,
    #[prost(int32, tag = "9")]
    pub cache_id: i32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// A field this subset does not model (here `mapping`, field 3, and `operations` inside a
    /// context) must be skipped, not rejected: real HEFs are full of them.
    #[test]
    fn unknown_fields_are_skipped() {
        let mut bytes = Vec::new();
        // field 3 (mapping), wire type 2, 3 bytes
        bytes.extend_from_slice(&[0x1a, 3, b'a', b'b', b'c']);
        let header = ProtoHefHeader { hw_arch: 103, version: 1, ..Default::default() };
        let hef = ProtoHefHef { header: Some(header), ..Default::default() };
        hef.encode(&mut bytes).unwrap();
        let back = ProtoHefHef::decode(bytes.as_slice()).unwrap();
        assert_eq!(back, hef);
    }

    /// The per-feature lists are packed doubles; the encoder must write what upstream's parser reads.
    #[test]
    fn per_feature_lists_are_doubles() {
        let info = ProtoHefEdgeLayerNumericInfo { qp_zps: vec![1.5, 2.0], ..Default::default() };
        let bytes = info.encode_to_vec();
        // tag 5, wire type 2 (packed), 16 bytes of two f64
        assert_eq!(&bytes[..2], &[0x2a, 16]);
        assert_eq!(ProtoHefEdgeLayerNumericInfo::decode(bytes.as_slice()).unwrap(), info);
    }
}
