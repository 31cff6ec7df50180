//! proptest strategies for small random `Hef` values that the file format can represent (see the
//! invariants on [`Hef`]): version 3, the writer's required extensions present, resources hashed,
//! per-feature lists exactly when OUTPUT_SCALE_PER_FEATURE is declared, outputs listed in order
//! except a trailing unordered tail.

use proptest::collection::vec;
use proptest::prelude::*;

use super::model::{
    extension, CacheLayer, FormatOrder, Hef, NetworkGroup, QuantInfo, Resource, Shape3, Stream,
};

fn shape() -> impl Strategy<Value = Shape3> {
    (0u32..4, 0u32..6, 0u32..24).prop_map(|(h, w, f)| Shape3::new(h, w, f))
}

fn order() -> impl Strategy<Value = FormatOrder> {
    prop_oneof![(0u32..17).prop_map(FormatOrder::from_code), (17u32..200).prop_map(FormatOrder::from_code)]
}

/// Any f32 bit pattern for scalars (stored as proto `float`, so exact) except -0.0, which
/// proto3 treats as the default and does not write (it reads back as 0.0).
fn any_float() -> impl Strategy<Value = f32> {
    any::<f32>().prop_map(|x| if x == 0.0 { 0.0 } else { x })
}

fn any_quant() -> impl Strategy<Value = QuantInfo> {
    (any_float(), any_float(), any_float(), any_float()).prop_map(|(zp, scale, min, max)| QuantInfo {
        zp,
        scale,
        min,
        max,
    })
}

/// Finite values for per-feature lists (stored as proto `double`; a signalling NaN would be
/// quietened by the f32 → f64 → f32 trip).
fn finite() -> impl Strategy<Value = f32> {
    prop_oneof![Just(0.0f32), Just(1.0f32), -1e6f32..1e6f32]
}

fn stream(name: String, is_output: bool, per_feature: bool) -> impl Strategy<Value = Stream> {
    (
        shape(),
        shape(),
        order(),
        0u32..4,
        any_quant(),
        any::<bool>(),
        vec((finite(), finite()), 24),
        any::<bool>(),
    )
        .prop_map(move |(shape, padded, order, data_bytes, quant, transposed, lists, uniform)| {
            let transposed = transposed && order != FormatOrder::Nc;
            let per: Vec<QuantInfo> = if per_feature {
                (0..shape.features as usize)
                    .map(|i| {
                        let (zp, scale) = if uniform { (quant.zp, quant.scale) } else { lists[i] };
                        QuantInfo { zp, scale, min: quant.min, max: quant.max }
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let quant = if per_feature && is_output { QuantInfo::INVALID } else { quant };
            Stream {
                name: name.clone(),
                shape,
                padded,
                order,
                data_bytes,
                quant,
                quant_per_feature: per,
                transposed,
            }
        })
}

fn cache(name: String) -> impl Strategy<Value = CacheLayer> {
    (any::<bool>(), 0u32..=i32::MAX as u32, shape(), shape(), order(), 0u32..4, any_quant()).prop_map(
        move |(is_input, cache_id, shape, padded, order, data_bytes, quant)| CacheLayer {
            name: name.clone(),
            is_input,
            cache_id,
            shape,
            padded,
            order,
            data_bytes,
            quant,
        },
    )
}

fn group(index: usize, per_feature: bool) -> impl Strategy<Value = NetworkGroup> {
    ("[a-z_]{0,10}", 0usize..4, 0usize..4, 0usize..4, 1usize..4, 0usize..3).prop_flat_map(
        move |(base, n_in, n_out, n_cache, contexts, unordered)| {
            let name = format!("{base}{index}");
            let inputs: Vec<_> =
                (0..n_in).map(|i| stream(format!("{name}/input_layer{i}"), false, per_feature)).collect();
            let outputs: Vec<_> =
                (0..n_out).map(|i| stream(format!("{name}/output{i}"), true, per_feature)).collect();
            let caches: Vec<_> = (0..n_cache).map(|i| cache(format!("{name}/cache{i}"))).collect();
            (Just(name), inputs, outputs, caches).prop_map(move |(name, inputs, outputs, caches)| {
                let tail = unordered.min(outputs.len());
                let unordered_outputs =
                    outputs[outputs.len() - tail..].iter().map(|s| s.name.clone()).collect();
                NetworkGroup { name, inputs, outputs, unordered_outputs, caches, contexts }
            })
        },
    )
}

fn resource() -> impl Strategy<Value = Resource> {
    ("[a-z.\\-]{1,12}", vec(any::<u8>(), 0..64)).prop_map(|(name, data)| Resource::new(name, data))
}

fn extensions() -> impl Strategy<Value = Vec<u32>> {
    (vec(0u32..40, 0..4), any::<bool>()).prop_map(|(mut ids, per_feature)| {
        ids.retain(|&id| id != extension::OUTPUT_SCALE_PER_FEATURE);
        if per_feature {
            ids.push(extension::OUTPUT_SCALE_PER_FEATURE);
        }
        for id in extension::WRITER_REQUIRED {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    })
}

/// A small random HEF the writer can represent exactly.
pub fn hef() -> impl Strategy<Value = Hef> {
    (extensions(), any::<i32>(), "\\PC{0,12}", vec(resource(), 0..4), 0usize..4).prop_flat_map(
        |(extensions, hw_arch, sdk_version, resources, n_groups)| {
            let per_feature = extensions.contains(&extension::OUTPUT_SCALE_PER_FEATURE);
            let groups: Vec<_> = (0..n_groups).map(|i| group(i, per_feature)).collect();
            (Just((extensions, hw_arch, sdk_version, resources)), groups).prop_map(
                |((extensions, hw_arch, sdk_version, resources), groups)| Hef {
                    version: 3,
                    hw_arch,
                    sdk_version,
                    groups,
                    resources,
                    extensions,
                },
            )
        },
    )
}
