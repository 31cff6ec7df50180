//! Model → V3 file, in the HAILO_NET_FLOW layout real LLM HEFs use: each network group carries its
//! metadata, output order and network names, and one `ops[0].core_op` holding the contexts.
//!
//! All edge layers go into the first context (later contexts are empty): the model keeps stream
//! order, not which context a layer came from, and this keeps that order exact on re-read.
//! The CCW section is empty, so a written HEF describes the interface of a model (enough for the
//! simulator and for audits), not a program a device could run.

use prost::Message;
use xxhash_rust::xxh3::xxh3_64;

use super::model::{extension, CacheLayer, FormatOrder, Hef, NetworkGroup, QuantInfo, Shape3, Stream};
use super::proto::*;

/// The proto header's format version. HailoRT honours the `extensions` list only when it is > 0
/// (hef.cpp `check_hef_extension` :1925).
const PROTO_FORMAT_VERSION: u64 = 1;

pub(crate) fn encode(hef: &Hef) -> Vec<u8> {
    let datas: Vec<&[u8]> = hef.resources.iter().map(|r| r.data.as_slice()).collect();
    let (region, offsets) = super::layout_resources(0, &datas);
    let extensions = extensions(hef);
    let per_feature = extensions.contains(&extension::OUTPUT_SCALE_PER_FEATURE);
    let proto = ProtoHefHef {
        header: Some(ProtoHefHeader {
            hw_arch: hef.hw_arch,
            sdk_version_str: hef.sdk_version.clone(),
            version: PROTO_FORMAT_VERSION,
            ..Default::default()
        }),
        network_groups: hef.groups.iter().enumerate().map(|(i, g)| encode_group(g, i, per_feature)).collect(),
        extensions: extensions
            .iter()
            .map(|&type_index| ProtoHefExtension { type_index, name: extension::name(type_index) })
            .collect(),
        optional_extensions: Vec::new(),
        external_resources: hef
            .resources
            .iter()
            .zip(offsets)
            .map(|(r, offset)| ProtoHefExternalResource {
                offset,
                size: r.data.len() as u64,
                name: r.name.clone(),
                xxhash: xxh3_64(&r.data),
            })
            .collect(),
    };
    super::write_v3(&proto.encode_to_vec(), &[], &region)
}

/// The HEF's extensions, then the ones the writer needs that are missing: HAILO_NET_FLOW and
/// PERIPH_CALCULATION_IN_HAILORT always, OUTPUT_SCALE_PER_FEATURE when any stream has per-feature
/// quant infos (without it HailoRT would ignore the lists).
fn extensions(hef: &Hef) -> Vec<u32> {
    let mut ids = hef.extensions.clone();
    let per_feature_used = hef
        .groups
        .iter()
        .flat_map(|g| g.inputs.iter().chain(&g.outputs))
        .any(|s| !s.quant_per_feature.is_empty());
    let mut needed = extension::WRITER_REQUIRED.to_vec();
    if per_feature_used {
        needed.push(extension::OUTPUT_SCALE_PER_FEATURE);
    }
    for id in needed {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

fn encode_group(g: &NetworkGroup, index: usize, per_feature: bool) -> ProtoHefNetworkGroup {
    let metadata = ProtoHefNetworkGroupMetadata {
        network_group_name: g.name.clone(),
        network_group_index: index as u32,
        transposed_net: false,
    };
    let sorted: Vec<String> =
        g.outputs.iter().filter(|s| !g.unordered_outputs.contains(&s.name)).map(|s| s.name.clone()).collect();
    let core_op = ProtoHefCoreOp {
        network_group_metadata: Some(metadata.clone()),
        contexts: encode_contexts(g, per_feature),
        sorted_outputs_order: sorted.clone(),
        fused_layers_metadata: None,
        networks_names: vec![g.name.clone()],
    };
    ProtoHefNetworkGroup {
        network_group_metadata: Some(metadata),
        sorted_outputs_order: sorted,
        networks_names: vec![g.name.clone()],
        ops: vec![ProtoHefOp {
            name: format!("{}/core_op", g.name),
            op: Some(ProtoHefOpKind::CoreOp(core_op)),
        }],
        network_group_name: g.name.clone(),
        network_group_index: index as u32,
        ..Default::default()
    }
}

fn encode_contexts(g: &NetworkGroup, per_feature: bool) -> Vec<ProtoHefContext> {
    let has_layers = !(g.inputs.is_empty() && g.outputs.is_empty() && g.caches.is_empty());
    let count = if has_layers { g.contexts.max(1) } else { g.contexts };
    let streams = g.inputs.iter().map(|s| (s, false)).chain(g.outputs.iter().map(|s| (s, true)));
    let mut edge_layers: Vec<_> = (0..)
        .zip(streams)
        .map(|(sys_index, (s, is_output))| stream_layer(s, is_output, sys_index, per_feature))
        .collect();
    let first_cache_index = edge_layers.len() as u32;
    edge_layers.extend((first_cache_index..).zip(&g.caches).map(|(sys_index, c)| cache_layer(c, sys_index)));
    (0..count)
        .map(|i| ProtoHefContext {
            context_index: i as u32,
            metadata: Some(ProtoHefContextMetadata {
                name: format!("context_{i}"),
                edge_layers: if i == 0 { std::mem::take(&mut edge_layers) } else { Vec::new() },
                sorted_outputs_order: Vec::new(),
            }),
        })
        .collect()
}

fn edge_layer(
    direction: i32,
    connection: i32,
    cache_id: i32,
    info: ProtoHefEdgeLayerInfo,
) -> ProtoHefEdgeLayer {
    ProtoHefEdgeLayer {
        direction,
        edge_layer_type: EDGE_LAYER_TYPE_INFO,
        edge: Some(ProtoHefEdge::LayerInfo(info)),
        context_switch_info: Some(ProtoHefContextSwitchInformation {
            edge_connection_type: connection,
            cache_id,
            ..Default::default()
        }),
        network_index: 0,
    }
}

fn base(
    shape: Shape3,
    padded: Shape3,
    order: FormatOrder,
    data_bytes: u32,
    sys: u32,
) -> ProtoHefEdgeLayerBase {
    ProtoHefEdgeLayerBase {
        height: shape.height,
        width: shape.width,
        features: shape.features,
        padded_height: padded.height,
        padded_width: padded.width,
        padded_features: padded.features,
        format: order.code(),
        sys_index: sys,
        data_bytes,
        // One entry, as HailoRT's parser requires (see the field's doc).
        buffer_indices: vec![ProtoHefResourceIndices { index: sys, cluster_index: 0 }],
        ..Default::default()
    }
}

fn stream_layer(s: &Stream, is_output: bool, sys_index: u32, per_feature: bool) -> ProtoHefEdgeLayer {
    // The reader swaps H and W back for transposed layers (hef.cpp:2098-2101).
    let (h, w) = if s.transposed { (s.shape.width, s.shape.height) } else { (s.shape.height, s.shape.width) };
    let shape = Shape3::new(h, w, s.shape.features);
    let info = ProtoHefEdgeLayerInfo {
        name: s.name.clone(),
        edge_layer_base: Some(base(shape, s.padded, s.order, s.data_bytes, sys_index)),
        numeric_info: Some(numeric_info(s, per_feature)),
        transposed: s.transposed,
        ..Default::default()
    };
    let direction = if is_output { DIRECTION_DEVICE_TO_HOST } else { DIRECTION_HOST_TO_DEVICE };
    edge_layer(direction, CONNECTION_BOUNDARY, 0, info)
}

/// Scalar zp/scale from `quant`; limvals from the per-feature entries when present (an output's
/// scalar is INVALID_QUANT_INFO but HailoRT gives each feature the file's limvals). The lists are
/// omitted when every feature equals the scalar, which HailoRT then expands from it.
fn numeric_info(s: &Stream, per_feature: bool) -> ProtoHefEdgeLayerNumericInfo {
    let limits = s.quant_per_feature.first().copied().unwrap_or(s.quant);
    let mut numeric = scalar_numeric(s.quant, limits);
    let same_as_scalar = |q: &QuantInfo| {
        q.zp.to_bits() == s.quant.zp.to_bits() && q.scale.to_bits() == s.quant.scale.to_bits()
    };
    if per_feature && !s.quant_per_feature.iter().all(same_as_scalar) {
        numeric.qp_zps = s.quant_per_feature.iter().map(|q| f64::from(q.zp)).collect();
        numeric.qp_scales = s.quant_per_feature.iter().map(|q| f64::from(q.scale)).collect();
    }
    numeric
}

/// zp and scale from `quant`, limvals from `limits`.
fn scalar_numeric(quant: QuantInfo, limits: QuantInfo) -> ProtoHefEdgeLayerNumericInfo {
    ProtoHefEdgeLayerNumericInfo {
        qp_zp: quant.zp,
        qp_scale: quant.scale,
        limvals_min: limits.min,
        limvals_max: limits.max,
        ..Default::default()
    }
}

fn cache_layer(c: &CacheLayer, sys_index: u32) -> ProtoHefEdgeLayer {
    let info = ProtoHefEdgeLayerInfo {
        name: c.name.clone(),
        edge_layer_base: Some(base(c.shape, c.padded, c.order, c.data_bytes, sys_index)),
        numeric_info: Some(scalar_numeric(c.quant, c.quant)),
        ..Default::default()
    };
    let direction = if c.is_input { DIRECTION_HOST_TO_DEVICE } else { DIRECTION_DEVICE_TO_HOST };
    // The proto field is int32; ids above i32::MAX cannot be expressed (HailoRT would read them as
    // negative and refuse the HEF), so they are clamped.
    let cache_id = i32::try_from(c.cache_id).unwrap_or(i32::MAX);
    edge_layer(direction, CONNECTION_CACHE, cache_id, info)
}

impl Hef {
    /// Write a V3 HEF HailoRT would accept (see the type's doc for what survives a round trip).
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }
}
