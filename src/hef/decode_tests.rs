//! How the reader derives the model from hand-built protos: both layouts, output order sources,
//! transposition, per-feature quant infos, cache layers, and the errors for what cannot be read.

use prost::Message;

use crate::hef::model::{FormatOrder, Hef, QuantInfo};
use crate::hef::proto::*;
use crate::hef::write_v3;

fn layer(name: &str, direction: i32, connection: i32, base: ProtoHefEdgeLayerBase) -> ProtoHefEdgeLayer {
    ProtoHefEdgeLayer {
        direction,
        edge_layer_type: EDGE_LAYER_TYPE_INFO,
        edge: Some(ProtoHefEdge::LayerInfo(ProtoHefEdgeLayerInfo {
            name: name.into(),
            edge_layer_base: Some(base),
            numeric_info: Some(ProtoHefEdgeLayerNumericInfo {
                qp_zp: 3.0,
                qp_scale: 0.5,
                limvals_min: -1.0,
                limvals_max: 1.0,
                ..Default::default()
            }),
            ..Default::default()
        })),
        context_switch_info: Some(ProtoHefContextSwitchInformation {
            edge_connection_type: connection,
            ..Default::default()
        }),
        network_index: 0,
    }
}

fn base(h: u32, w: u32, f: u32, format: u32) -> ProtoHefEdgeLayerBase {
    ProtoHefEdgeLayerBase { height: h, width: w, features: f, data_bytes: 1, format, ..Default::default() }
}

fn context(layers: Vec<ProtoHefEdgeLayer>, sorted: &[&str]) -> ProtoHefContext {
    ProtoHefContext {
        context_index: 0,
        metadata: Some(ProtoHefContextMetadata {
            name: "c".into(),
            edge_layers: layers,
            sorted_outputs_order: sorted.iter().map(|s| s.to_string()).collect(),
        }),
    }
}

fn metadata(name: &str) -> Option<ProtoHefNetworkGroupMetadata> {
    Some(ProtoHefNetworkGroupMetadata { network_group_name: name.into(), ..Default::default() })
}

fn file(groups: Vec<ProtoHefNetworkGroup>, extensions: &[u32], proto_version: u64) -> Vec<u8> {
    let proto = ProtoHefHef {
        header: Some(ProtoHefHeader { hw_arch: 103, version: proto_version, ..Default::default() }),
        network_groups: groups,
        extensions: extensions
            .iter()
            .map(|&type_index| ProtoHefExtension { type_index, name: String::new() })
            .collect(),
        ..Default::default()
    };
    write_v3(&proto.encode_to_vec(), &[], &[])
}

fn read(bytes: &[u8]) -> Hef {
    Hef::from_bytes(bytes, "t.hef").unwrap()
}

fn read_err(bytes: &[u8]) -> String {
    Hef::from_bytes(bytes, "t.hef").unwrap_err().to_string()
}

/// A legacy-layout group (no HAILO_NET_FLOW): two outputs listed in reverse in field 4.
fn legacy_group() -> ProtoHefNetworkGroup {
    ProtoHefNetworkGroup {
        network_group_metadata: metadata("g"),
        contexts: vec![context(
            vec![
                layer("g/in", DIRECTION_HOST_TO_DEVICE, CONNECTION_BOUNDARY, base(1, 4, 8, 0)),
                layer("g/a", DIRECTION_DEVICE_TO_HOST, CONNECTION_BOUNDARY, base(1, 1, 2, 0)),
                layer("g/b", DIRECTION_DEVICE_TO_HOST, CONNECTION_BOUNDARY, base(1, 1, 3, 0)),
                layer("g/inter", DIRECTION_DEVICE_TO_HOST, CONNECTION_INTERMEDIATE, base(1, 1, 1, 0)),
            ],
            &[],
        )],
        sorted_outputs_order: vec!["g/b".into(), "g/a".into()],
        ..Default::default()
    }
}

#[test]
fn legacy_layout_is_read_from_the_group_fields() {
    let hef = read(&file(vec![legacy_group()], &[26], 1));
    let g = &hef.groups[0];
    assert_eq!(g.name, "g");
    assert_eq!(g.inputs.len(), 1);
    let outputs: Vec<&str> = g.outputs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(outputs, ["g/b", "g/a"], "sorted_outputs_order decides the order");
    assert_eq!(g.inputs[0].quant, QuantInfo { zp: 3.0, scale: 0.5, min: -1.0, max: 1.0 });
}

#[test]
fn net_flow_layout_reads_the_core_op_and_ignores_the_legacy_fields() {
    let mut group = legacy_group();
    let core = ProtoHefCoreOp {
        network_group_metadata: metadata("g"),
        contexts: group.contexts.clone(),
        ..Default::default()
    };
    group.contexts.clear();
    group.ops = vec![
        ProtoHefOp { name: "nms".into(), op: None },
        ProtoHefOp { name: "core".into(), op: Some(ProtoHefOpKind::CoreOp(core)) },
    ];
    let hef = read(&file(vec![group.clone()], &[13, 26], 1));
    assert_eq!(hef.groups[0].outputs.len(), 2);
    assert_eq!(hef.groups[0].contexts, 1);
    // Without the extension the (now empty) legacy fields are used.
    let legacy = read(&file(vec![group], &[26], 1));
    assert_eq!((legacy.groups[0].outputs.len(), legacy.groups[0].contexts), (0, 0));
}

#[test]
fn net_flow_group_without_core_op_is_an_error() {
    let mut group = legacy_group();
    group.ops = vec![ProtoHefOp { name: "nms".into(), op: None }];
    let err = read_err(&file(vec![group], &[13, 26], 1));
    assert!(err.contains("network group `g`") && err.contains("no op with a core_op"), "{err}");
}

#[test]
fn extensions_count_only_with_a_proto_format_version() {
    assert_eq!(read(&file(vec![], &[13, 26], 1)).extensions, vec![13, 26]);
    assert!(read(&file(vec![], &[13, 26], 0)).extensions.is_empty());
}

#[test]
fn output_order_falls_back_to_fused_then_last_context() {
    let mut group = legacy_group();
    group.fused_layers_metadata = Some(ProtoHefFusedLayersMetadata {
        network_has_fused_layers: true,
        updated_sorted_output_names: vec!["g/a".into(), "g/b".into()],
    });
    let names = |hef: &Hef| hef.groups[0].outputs.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&read(&file(vec![group.clone()], &[26], 1))), ["g/a", "g/b"]);

    group.fused_layers_metadata = None;
    group.sorted_outputs_order.clear();
    group.contexts[0].metadata.as_mut().unwrap().sorted_outputs_order = vec!["g/b".into(), "g/a".into()];
    assert_eq!(names(&read(&file(vec![group.clone()], &[26], 1))), ["g/b", "g/a"]);

    group.contexts[0].metadata.as_mut().unwrap().sorted_outputs_order = vec!["g/b".into()];
    let hef = read(&file(vec![group], &[26], 1));
    assert_eq!(names(&hef), ["g/b", "g/a"]);
    assert_eq!(hef.groups[0].unordered_outputs, ["g/a"]);
}

#[test]
fn transposed_layers_swap_height_and_width_except_nc() {
    let mut group = legacy_group();
    group.network_group_metadata.as_mut().unwrap().transposed_net = true;
    let nc = layer("g/nc", DIRECTION_HOST_TO_DEVICE, CONNECTION_BOUNDARY, base(2, 5, 8, 2));
    group.contexts[0].metadata.as_mut().unwrap().edge_layers.push(nc);
    let hef = read(&file(vec![group], &[26], 1));
    let input = &hef.groups[0].inputs[0];
    assert_eq!((input.shape.height, input.shape.width, input.transposed), (4, 1, true));
    let nc = &hef.groups[0].inputs[1];
    assert_eq!((nc.shape.height, nc.shape.width, nc.transposed, nc.order), (2, 5, false, FormatOrder::Nc));
}

fn with_lists(mut group: ProtoHefNetworkGroup, index: usize, zps: Vec<f64>) -> ProtoHefNetworkGroup {
    let layers = &mut group.contexts[0].metadata.as_mut().unwrap().edge_layers;
    if let Some(ProtoHefEdge::LayerInfo(info)) = &mut layers[index].edge {
        info.numeric_info.as_mut().unwrap().qp_zps = zps;
    }
    group
}

#[test]
fn per_feature_quant_follows_output_scale_per_feature() {
    let group = with_lists(legacy_group(), 2, vec![1.0, 2.0, 3.0]);
    let hef = read(&file(vec![group.clone()], &[25, 26], 1));
    let b = &hef.groups[0].outputs[0];
    assert_eq!(b.quant, QuantInfo::INVALID, "an output's scalar becomes INVALID_QUANT_INFO");
    let zps: Vec<f32> = b.quant_per_feature.iter().map(|q| q.zp).collect();
    assert_eq!(zps, [1.0, 2.0, 3.0]);
    assert!(b.quant_per_feature.iter().all(|q| q.scale == 0.5 && q.min == -1.0 && q.max == 1.0));
    let input = &hef.groups[0].inputs[0];
    assert_eq!(input.quant.zp, 3.0, "inputs keep their scalar");
    assert_eq!(input.quant_per_feature.len(), 8);
    // Without the extension the lists are ignored.
    let plain = read(&file(vec![group], &[26], 1));
    assert!(plain.groups[0].outputs[0].quant_per_feature.is_empty());
}

#[test]
fn per_feature_list_of_the_wrong_length_is_an_error() {
    let group = with_lists(legacy_group(), 2, vec![1.0, 2.0]);
    let err = read_err(&file(vec![group], &[25, 26], 1));
    assert!(
        err.contains("context 0 edge layer 2 (`g/b`)")
            && err.contains("2 zero points and 0 scales for 3 features"),
        "{err}"
    );
}

#[test]
fn huge_feature_counts_do_not_allocate() {
    let mut group = legacy_group();
    let layers = &mut group.contexts[0].metadata.as_mut().unwrap().edge_layers;
    layers[0] = layer("g/in", DIRECTION_HOST_TO_DEVICE, CONNECTION_BOUNDARY, base(1, 1, u32::MAX, 0));
    let err = read_err(&file(vec![group], &[25, 26], 1));
    assert!(err.contains("4294967295 features"), "{err}");
}

#[test]
fn cache_layers_keep_direction_and_id() {
    let mut group = legacy_group();
    let mut read_side = layer("g/cache_r", DIRECTION_HOST_TO_DEVICE, CONNECTION_CACHE, base(1, 24, 32, 0));
    read_side.context_switch_info.as_mut().unwrap().cache_id = 7;
    let mut write_side = layer("g/cache_w", DIRECTION_DEVICE_TO_HOST, CONNECTION_CACHE, base(1, 8, 32, 0));
    write_side.context_switch_info.as_mut().unwrap().cache_id = 7;
    group.contexts[0].metadata.as_mut().unwrap().edge_layers.extend([read_side, write_side]);
    let hef = read(&file(vec![group.clone()], &[26], 1));
    let caches = &hef.groups[0].caches;
    assert_eq!((caches[0].is_input, caches[0].cache_id, caches[1].is_input), (true, 7, false));
    assert_eq!(hef.groups[0].inputs.len(), 1, "cache layers are not streams");

    group.contexts[0].metadata.as_mut().unwrap().edge_layers[4]
        .context_switch_info
        .as_mut()
        .unwrap()
        .cache_id = -1;
    let err = read_err(&file(vec![group], &[26], 1));
    assert!(err.contains("cache_id is -1"), "{err}");
}

#[test]
fn mux_boundary_layers_are_unsupported() {
    let mut group = legacy_group();
    let mux = ProtoHefEdgeLayer {
        edge_layer_type: EDGE_LAYER_TYPE_MUX,
        edge: Some(ProtoHefEdge::LayerMux(ProtoHefNamedLayer { name: "g/mux".into() })),
        ..Default::default()
    };
    group.contexts[0].metadata.as_mut().unwrap().edge_layers.push(mux);
    let err = read_err(&file(vec![group], &[26], 1));
    assert!(err.starts_with("unsupported:") && err.contains("`g/mux` is a mux edge layer"), "{err}");
}

#[test]
fn resource_past_the_end_of_the_file_names_it() {
    let proto = ProtoHefHef {
        external_resources: vec![ProtoHefExternalResource {
            offset: 0,
            size: 1000,
            name: "embeddings.bin".into(),
            xxhash: 0,
        }],
        ..Default::default()
    };
    let bytes = write_v3(&proto.encode_to_vec(), &[], b"short");
    let err = read_err(&bytes);
    assert!(err.contains("t.hef offset 4096 (external resource `embeddings.bin`)"), "{err}");
    assert!(err.contains("1000 bytes at offset_zero_point 4096 + 0"), "{err}");
}
