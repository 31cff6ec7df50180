//! Proto → model: derive network groups, streams, caches and resources the way HailoRT v5.2.0
//! does (hef.cpp `fill_core_ops` :945, `fill_networks_metadata` :849-877,
//! `parse_single_dynamic_context` :3076, `fill_layer_info` :2154-2236, `get_cache_layer_info`
//! :3436-3483).
//!
//! Policy: the reader fails only when the file cannot be read or cannot be represented in the
//! model (truncation, bad hashes, a per-feature list of the wrong length, a negative cache id, mux
//! layers). Everything HailoRT would refuse but that *can* be represented (unknown format codes,
//! bad data_bytes, duplicate names, missing output order, unsupported extensions) is kept, so the
//! audit can report it with context instead of stopping at the first problem.

use prost::Message;

use super::container::{self, ByteSource, Container};
use super::model::{
    extension, CacheLayer, FormatOrder, Hef, NetworkGroup, QuantInfo, Resource, Shape3, Stream,
};
use super::proto::*;
use crate::error::{Error, Result};
use std::path::Path;

/// Upper bound on per-feature quant infos expanded for the whole HEF. HailoRT makes one per
/// feature of every stream when OUTPUT_SCALE_PER_FEATURE is set, even when the HEF stores none; a
/// corrupt `features` of 4·10^9 must not make hefprobe allocate 64 GB. 4 Mi entries (64 MiB) is
/// far above a real LLM (vocab 152K outputs plus a few inputs per group).
const PER_FEATURE_BUDGET: usize = 1 << 22;

/// Decode a whole HEF from a byte source; `what` names it in errors.
pub(crate) fn decode(src: &mut dyn ByteSource, what: &str) -> Result<(Hef, Container)> {
    let (container, proto_bytes) = container::parse(src, what)?;
    let proto = ProtoHefHef::decode(proto_bytes.as_slice()).map_err(|e| {
        Error::input(
            format!("{what} offset {} (proto)", container.layout.proto_offset),
            format!(
                "the {}-byte proto does not parse ({e}); HailoRT: HAILO_HEF_FILE_CORRUPTED",
                proto_bytes.len()
            ),
        )
    })?;
    let header = proto.header.clone().unwrap_or_default();
    // check_hef_extension (hef.cpp:1925): the list counts only when the proto format version > 0.
    let extensions: Vec<u32> =
        if header.version > 0 { proto.extensions.iter().map(|e| e.type_index).collect() } else { Vec::new() };
    let mut ctx = GroupContext {
        net_flow: extensions.contains(&extension::HAILO_NET_FLOW),
        per_feature: extensions.contains(&extension::OUTPUT_SCALE_PER_FEATURE),
        budget: PER_FEATURE_BUDGET,
        what,
    };
    let groups = proto
        .network_groups
        .iter()
        .enumerate()
        .map(|(i, g)| decode_group(g, i, &mut ctx))
        .collect::<Result<_>>()?;
    let resources = proto
        .external_resources
        .iter()
        .map(|r| {
            let layout = &container.layout;
            let data = container::read_resource(src, layout, &r.name, r.offset, r.size, r.xxhash, what)?;
            Ok(Resource { name: r.name.clone(), data, xxhash: r.xxhash })
        })
        .collect::<Result<_>>()?;
    let hef = Hef {
        version: container.header.version,
        hw_arch: header.hw_arch,
        sdk_version: sdk_version(&header),
        groups,
        resources,
        extensions,
    };
    Ok((hef, container))
}

fn sdk_version(header: &ProtoHefHeader) -> String {
    match (&header.sdk_version_str, &header.sdk_version) {
        (s, _) if !s.is_empty() => s.clone(),
        (_, Some(v)) => format!("{}.{}.{}", v.sdk_version_major, v.sdk_version_minor, v.sdk_version_revision),
        _ => String::new(),
    }
}

/// What every group decode needs: the HEF-wide features and the remaining per-feature budget.
struct GroupContext<'a> {
    net_flow: bool,
    per_feature: bool,
    budget: usize,
    what: &'a str,
}

/// The fields of a core op, whichever layout they came from.
struct CoreView<'a> {
    metadata: Option<&'a ProtoHefNetworkGroupMetadata>,
    contexts: &'a [ProtoHefContext],
    fused: Option<&'a ProtoHefFusedLayersMetadata>,
}

/// With HAILO_NET_FLOW the first op whose oneof is `core_op` holds the core op; otherwise the
/// network group's own legacy fields are the core op (hef.cpp `fill_core_ops` :945).
fn core_view<'a>(g: &'a ProtoHefNetworkGroup, name: &str, ctx: &GroupContext) -> Result<CoreView<'a>> {
    if !ctx.net_flow {
        return Ok(CoreView {
            metadata: g.network_group_metadata.as_ref(),
            contexts: &g.contexts,
            fused: g.fused_layers_metadata.as_ref(),
        });
    }
    // The oneof models only `core_op`; NMS and logits ops decode to `None` and are skipped.
    let core = g.ops.iter().find_map(|op| op.op.as_ref().map(|ProtoHefOpKind::CoreOp(core)| core));
    let Some(core) = core else {
        return Err(Error::input(
            format!("{}: network group `{name}`", ctx.what),
            "the HEF declares HAILO_NET_FLOW but the group has no op with a core_op; HailoRT cannot open it",
        ));
    };
    Ok(CoreView {
        metadata: core.network_group_metadata.as_ref(),
        contexts: &core.contexts,
        fused: core.fused_layers_metadata.as_ref(),
    })
}

fn decode_group(g: &ProtoHefNetworkGroup, index: usize, ctx: &mut GroupContext) -> Result<NetworkGroup> {
    let name = g.network_group_metadata.as_ref().map(|m| m.network_group_name.clone()).unwrap_or_default();
    let core = core_view(g, &name, ctx)?;
    let transposed_net = core.metadata.is_some_and(|m| m.transposed_net);
    let mut group = NetworkGroup { name: name.clone(), contexts: core.contexts.len(), ..Default::default() };
    for (ci, context) in core.contexts.iter().enumerate() {
        let Some(metadata) = &context.metadata else { continue };
        for (li, layer) in metadata.edge_layers.iter().enumerate() {
            let at =
                format!("{}: network group `{name}` (index {index}) context {ci} edge layer {li}", ctx.what);
            decode_edge_layer(layer, transposed_net, ctx, &at, &mut group)?;
        }
    }
    let order = sorted_output_names(g, &core);
    group.unordered_outputs = sort_outputs(&mut group.outputs, order);
    Ok(group)
}

/// Dispatch on the connection type like `parse_single_dynamic_context` (hef.cpp:3076).
fn decode_edge_layer(
    layer: &ProtoHefEdgeLayer,
    transposed_net: bool,
    ctx: &mut GroupContext,
    at: &str,
    group: &mut NetworkGroup,
) -> Result<()> {
    let connection =
        layer.context_switch_info.as_ref().map_or(CONNECTION_BOUNDARY, |c| c.edge_connection_type);
    match connection {
        CONNECTION_BOUNDARY => {
            let info = info_layer(layer, at)?;
            let is_output = layer.direction == DIRECTION_DEVICE_TO_HOST;
            let stream = decode_stream(&info, is_output, transposed_net, ctx, at)?;
            if is_output {
                group.outputs.push(stream);
            } else {
                group.inputs.push(stream);
            }
        }
        CONNECTION_CACHE => group.caches.push(decode_cache(layer, at)?),
        CONNECTION_INTERMEDIATE | CONNECTION_DDR => {}
        other => {
            return Err(Error::input(
                at,
                format!("edge_connection_type {other} is not BOUNDARY/INTERMEDIATE/DDR/CACHE; HailoRT: HAILO_INVALID_HEF"),
            ))
        }
    }
    Ok(())
}

/// The plain edge-layer info of an INFO layer; mux and planes layers are not supported.
/// Like protobuf's C++ accessor, a missing `layer_info` reads as an empty one.
fn info_layer(layer: &ProtoHefEdgeLayer, at: &str) -> Result<ProtoHefEdgeLayerInfo> {
    if layer.edge_layer_type != EDGE_LAYER_TYPE_INFO {
        let (kind, name) = match &layer.edge {
            Some(ProtoHefEdge::LayerMux(m)) => ("mux", m.name.as_str()),
            Some(ProtoHefEdge::LayerPlanes(p)) => ("planes", p.name.as_str()),
            _ => ("non-INFO", ""),
        };
        let layer_type = layer.edge_layer_type;
        return Err(Error::Unsupported(format!(
            "{at}: `{name}` is a {kind} edge layer (edge_layer_type {layer_type}); hefprobe reads only plain \
             INFO edge layers, which is all LLM HEFs use"
        )));
    }
    Ok(match &layer.edge {
        Some(ProtoHefEdge::LayerInfo(info)) => info.clone(),
        _ => ProtoHefEdgeLayerInfo::default(),
    })
}

fn scalar_quant(info: &ProtoHefEdgeLayerInfo) -> QuantInfo {
    let n = info.numeric_info.clone().unwrap_or_default();
    QuantInfo { zp: n.qp_zp, scale: n.qp_scale, min: n.limvals_min, max: n.limvals_max }
}

fn shapes(base: &ProtoHefEdgeLayerBase) -> (Shape3, Shape3) {
    (
        Shape3::new(base.height, base.width, base.features),
        Shape3::new(base.padded_height, base.padded_width, base.padded_features),
    )
}

/// `fill_layer_info` + `fill_layer_info_with_base_info` (hef.cpp:2085-2236).
fn decode_stream(
    info: &ProtoHefEdgeLayerInfo,
    is_output: bool,
    transposed_net: bool,
    ctx: &mut GroupContext,
    at: &str,
) -> Result<Stream> {
    let base = info.edge_layer_base.clone().unwrap_or_default();
    let order = FormatOrder::from_code(base.format);
    let (mut shape, padded) = shapes(&base);
    // The host shape swaps H and W for transposed layers, except NC (hef.cpp:2098-2101).
    let transposed = (transposed_net || info.transposed) && order != FormatOrder::Nc;
    if transposed {
        std::mem::swap(&mut shape.height, &mut shape.width);
    }
    let scalar = scalar_quant(info);
    let (quant, quant_per_feature) = if ctx.per_feature {
        let at = format!("{at} (`{}`)", info.name);
        per_feature_quants(info, scalar, base.features, is_output, ctx, &at)?
    } else {
        (scalar, Vec::new())
    };
    Ok(Stream {
        name: info.name.clone(),
        shape,
        padded,
        order,
        data_bytes: base.data_bytes,
        quant,
        quant_per_feature,
        transposed,
    })
}

/// With OUTPUT_SCALE_PER_FEATURE, HailoRT builds one quant info per feature from `qp_zps` /
/// `qp_scales` (or the scalar when a list is empty), limvals from the scalar; outputs must have
/// lists of length 0 or `features` and their scalar becomes INVALID_QUANT_INFO (hef.cpp:2190-2220).
fn per_feature_quants(
    info: &ProtoHefEdgeLayerInfo,
    scalar: QuantInfo,
    features: u32,
    is_output: bool,
    ctx: &mut GroupContext,
    at: &str,
) -> Result<(QuantInfo, Vec<QuantInfo>)> {
    let numeric = info.numeric_info.clone().unwrap_or_default();
    let (zps, scales) = (&numeric.qp_zps, &numeric.qp_scales);
    let n = features as usize;
    let fits = |len: usize| len == 0 || if is_output { len == n } else { len >= n };
    if !fits(zps.len()) || !fits(scales.len()) {
        let (z, s) = (zps.len(), scales.len());
        return Err(Error::input(
            at,
            format!(
                "per-feature lists have {z} zero points and {s} scales for {n} features; HailoRT needs 0 or \
                 {n} entries (HAILO_INVALID_HEF for outputs, out-of-bounds reads for inputs)"
            ),
        ));
    }
    if n > ctx.budget {
        return Err(Error::input(
            at,
            format!(
                "{n} features would expand to more per-feature quant infos than hefprobe allows for one HEF \
                 ({PER_FEATURE_BUDGET}); the features count is probably corrupt"
            ),
        ));
    }
    ctx.budget -= n;
    let pick = |list: &[f64], i: usize, fallback: f32| list.get(i).map_or(fallback, |&v| v as f32);
    let per = (0..n)
        .map(|i| QuantInfo {
            zp: pick(zps, i, scalar.zp),
            scale: pick(scales, i, scalar.scale),
            min: scalar.min,
            max: scalar.max,
        })
        .collect();
    Ok((if is_output { QuantInfo::INVALID } else { scalar }, per))
}

/// `get_cache_layer_info` (hef.cpp:3436-3483): INFO layers only, no H/W swap, cache_id >= 0.
fn decode_cache(layer: &ProtoHefEdgeLayer, at: &str) -> Result<CacheLayer> {
    if layer.edge_layer_type != EDGE_LAYER_TYPE_INFO {
        return Err(Error::input(
            at,
            "a cache layer must be an INFO edge layer (HailoRT: HAILO_INVALID_HEF)",
        ));
    }
    let info = info_layer(layer, at)?;
    let cache_id = layer.context_switch_info.as_ref().map_or(0, |c| c.cache_id);
    let cache_id = u32::try_from(cache_id).map_err(|_| {
        Error::input(
            format!("{at} (`{}`)", info.name),
            format!("cache_id is {cache_id}; HailoRT rejects negative cache ids (HAILO_INVALID_HEF)"),
        )
    })?;
    let base = info.edge_layer_base.clone().unwrap_or_default();
    let (shape, padded) = shapes(&base);
    Ok(CacheLayer {
        name: info.name.clone(),
        is_input: layer.direction != DIRECTION_DEVICE_TO_HOST,
        cache_id,
        shape,
        padded,
        order: FormatOrder::from_code(base.format),
        data_bytes: base.data_bytes,
        quant: scalar_quant(&info),
    })
}

/// The output order source, first match wins (hef.cpp `fill_networks_metadata` :849-877): the
/// core op's fused-layers list when it has fused layers, the group's `sorted_outputs_order`
/// (field 4), then the last context's list. (The legacy partial-network-group source is for
/// multi-layout HAILO8L/HAILO15M HEFs, which hefprobe does not read.)
fn sorted_output_names<'a>(g: &'a ProtoHefNetworkGroup, core: &CoreView<'a>) -> &'a [String] {
    if let Some(fused) = core.fused.filter(|f| f.network_has_fused_layers) {
        return &fused.updated_sorted_output_names;
    }
    if !g.sorted_outputs_order.is_empty() {
        return &g.sorted_outputs_order;
    }
    core.contexts.last().and_then(|c| c.metadata.as_ref()).map_or(&[], |m| &m.sorted_outputs_order)
}

/// Sort outputs by their position in `order` (`get_output_vstream_infos`,
/// core_op_metadata.cpp:440-491). Outputs not in the list stay at the end in HEF order and are
/// returned: HailoRT fails on them.
fn sort_outputs(outputs: &mut Vec<Stream>, order: &[String]) -> Vec<String> {
    let position = |s: &Stream| order.iter().position(|n| *n == s.name);
    let (mut listed, unlisted): (Vec<Stream>, Vec<Stream>) =
        outputs.drain(..).partition(|s| position(s).is_some());
    listed.sort_by_key(|s| position(s));
    let missing = unlisted.iter().map(|s| s.name.clone()).collect();
    outputs.extend(listed);
    outputs.extend(unlisted);
    missing
}

impl Hef {
    /// Read and verify a HEF file. Only the header, the proto and the external resources are
    /// read; the CCWs are hashed in chunks when the version requires it, never held in memory.
    pub fn read(path: impl AsRef<Path>) -> Result<Hef> {
        Ok(Self::read_with_container(path)?.0)
    }

    /// Like [`Hef::read`], also returning the container facts (header, layout, integrity check).
    pub fn read_with_container(path: impl AsRef<Path>) -> Result<(Hef, container::Container)> {
        let path = path.as_ref();
        let mut src = container::FileSource::open(path)?;
        decode(&mut src, &path.display().to_string())
    }

    /// Parse a HEF held in memory; `what` names it in errors (a file name, "HEF buffer", ...).
    pub fn from_bytes(bytes: &[u8], what: &str) -> Result<Hef> {
        Ok(decode(&mut container::SliceSource(bytes), what)?.0)
    }
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
