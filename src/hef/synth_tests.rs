//! The synthesizer's own tests: the file format keeps what it builds, bad numbers are usage
//! errors, and the fuzzing seeds are its output.

use std::path::PathBuf;

use super::*;

#[test]
fn synthetic_hef_round_trips_through_the_file_format() {
    let hef = LlmSpec::tiny().build().unwrap();
    let bytes = hef.to_bytes();
    assert_eq!(Hef::from_bytes(&bytes, "synth.hef").unwrap(), hef);
}

#[test]
fn synthetic_hef_selects_its_groups() {
    let spec = LlmSpec::tiny();
    let hef = spec.build().unwrap();
    assert_eq!(hef.llm_groups().unwrap(), (spec.prefill_name(), Some(spec.tbt_name())));
}

#[test]
fn caches_share_ids_and_rings_hold_kv_cache_size_entries_of_uint16() {
    let spec = LlmSpec::tiny();
    let hef = spec.build().unwrap();
    for (g, rows) in hef.groups.iter().zip([spec.prefill_tokens, 1]) {
        assert_eq!(g.caches.len(), 4 * spec.layers as usize);
        for pair in g.caches.chunks(2) {
            let (read, write) = (&pair[0], &pair[1]);
            assert!(read.is_input && !write.is_input && read.cache_id == write.cache_id);
            assert_eq!((read.shape.rows() + write.shape.rows(), write.shape.rows()), (32, u64::from(rows)));
            // 2 kv heads × 16 values of 2 bytes; the runtime pads the entry to 64 bytes.
            assert_eq!((read.shape.features, read.padded.features, read.data_bytes), (32, 64, 2));
            assert_eq!(padded_entry_bytes(read.padded.features as usize), 64);
        }
    }
    let ids = |g: &NetworkGroup| g.caches.iter().map(|c| c.cache_id).collect::<Vec<_>>();
    assert_eq!(ids(&hef.groups[0]), ids(&hef.groups[1]));
}

#[test]
fn a_base_scope_group_is_cacheless_its_mask_covers_its_frame_and_the_exporters_map_is_written() {
    use crate::hef::llm_config::{InputSuffixes, LlmConfig, RESOURCE};
    let empty = LlmSpec { base_scope: Some(0), ..LlmSpec::tiny() }.build().unwrap_err().to_string();
    assert!(empty.contains("base-scope frame of 0 positions: give at least 1"), "{empty}");
    let spec = LlmSpec { base_scope: Some(24), inputs: InputSuffixes::exporter(), ..LlmSpec::tiny() };
    let hef = spec.build().unwrap();
    let names: Vec<&str> = hef.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["tiny_llm__prefill", "tiny_llm__tbt", "tiny_llm"]);
    let base = hef.group("tiny_llm").unwrap();
    assert_eq!(base.role(), crate::hef::GroupRole::BaseScope);
    assert!(base.caches.is_empty());
    let input = |g: &crate::hef::NetworkGroup, i: LlmInput| {
        g.inputs.iter().find(|s| s.name == i.name(&g.name, &spec.inputs)).unwrap().shape
    };
    assert_eq!(input(base, LlmInput::Embeddings).rows(), 24);
    assert_eq!(input(base, LlmInput::Mask).features, 24 * spec.heads, "frame columns × heads");
    // input_layer3 = K cos (kv_heads × head_dim wide), input_layer4 = Q cos.
    let by_name =
        |n: &str| base.inputs.iter().find(|s| s.name == format!("tiny_llm/{n}")).unwrap().shape.features;
    assert_eq!((by_name("input_layer3"), by_name("input_layer4")), (2 * 16, 4 * 16));
    let cfg = LlmConfig::parse(hef.resource(RESOURCE).unwrap(), "t").unwrap();
    assert_eq!(cfg.input_layers_names_suffixes, InputSuffixes::exporter());
    // genai cannot pick among three groups (it looks for `base_model__prefill`); a named group can.
    assert!(hef.driven_groups(None).unwrap_err().to_string().contains("group=NAME"));
    let d = hef.driven_groups(Some("tiny_llm__prefill")).unwrap();
    assert_eq!((d.tbt.as_deref(), d.base_scope), (Some("tiny_llm__tbt"), false));
    assert!(hef.driven_groups(Some("tiny_llm")).unwrap().base_scope);
    let e = hef.driven_groups(Some("nope")).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("`tiny_llm` (base scope: no cache)"), "{e}");
    assert!(hef.driven_groups(Some("tiny_llm__tbt")).unwrap_err().to_string().contains("tbt group"));
}

#[test]
fn rope_inputs_are_uint16_and_sized_per_head() {
    let spec = LlmSpec::tiny();
    let hef = spec.build().unwrap();
    let g = &hef.groups[0];
    let width = |i: LlmInput| g.inputs.iter().find(|s| s.name == i.name(&g.name, &spec.inputs)).unwrap();
    assert_eq!((width(LlmInput::QSin).shape.features, width(LlmInput::KCos).shape.features), (64, 32));
    for i in [LlmInput::QCos, LlmInput::QSin, LlmInput::KCos, LlmInput::KSin] {
        assert_eq!(width(i).data_bytes, data_bytes::ROPE);
        assert_eq!(width(i).quant, LlmQuant::ROPE);
    }
    assert_eq!(LlmQuant::ROPE.quantize(1.0), 65534.0, "the uint16 range holds [-1, 1]");
}

#[test]
fn padded_entries_follow_the_cache_manager() {
    assert_eq!(padded_entry_bytes(8), 64);
    assert_eq!(padded_entry_bytes(96), 128);
    assert_eq!(padded_entry_bytes(512), 512);
    assert_eq!(padded_entry_bytes(513), 1024);
    assert_eq!(padded_entry_bytes(1100), 1536);
}

#[test]
fn sharded_logits_cover_the_vocab() {
    // The exporter's split, narrower shards first (s3_surgery_and_resources.py lm_head_split).
    assert_eq!(shard_widths(32005, 2), vec![16002, 16003]);
    assert_eq!(shard_widths(151936, 5), vec![30387, 30387, 30387, 30387, 30388]);
    assert_eq!(shard_widths(49152, 2), vec![24576, 24576]);
    assert_eq!(shard_widths(10, 3), vec![3, 3, 4]);
    assert_eq!(shard_widths(9, 3), vec![3, 3, 3]);
    assert_eq!(shard_widths(7, 1), vec![7]);
    let hef = LlmSpec { lm_head_shards: 3, ..LlmSpec::tiny() }.build().unwrap();
    let names: Vec<(&str, u32)> =
        hef.groups[1].outputs.iter().map(|s| (s.name.as_str(), s.shape.features)).collect();
    assert_eq!(
        names,
        [
            ("tiny_llm__tbt/output_layer1", 85),
            ("tiny_llm__tbt/output_layer2", 85),
            ("tiny_llm__tbt/output_layer3", 86)
        ]
    );
}

#[test]
fn numbers_the_layout_cannot_hold_are_usage_errors() {
    let err = |spec: LlmSpec| spec.build().unwrap_err().to_string();
    let e = err(LlmSpec { kv_cache_size: 8, ..LlmSpec::tiny() });
    assert!(e.contains("kv_cache_size (8) must exceed prefill_input_tokens_count (8)"), "{e}");
    let e = err(LlmSpec { prefill_tokens: 0, ..LlmSpec::tiny() });
    assert!(e.contains("at least 1"), "{e}");
    let e = err(LlmSpec { lm_head_shards: 0, ..LlmSpec::tiny() });
    assert!(e.contains("lm_head_shards 0: expected 1..=256"), "{e}");
    let e = err(LlmSpec { kv_cache_size: u32::MAX, ..LlmSpec::tiny() });
    assert!(e.contains("mask width kv_cache_size × num_attention_heads is 17179869180"), "{e}");
    let spec = LlmSpec::tiny();
    let quant = LlmQuant { caches: vec![], ..LlmQuant::fixed(spec.layers) };
    let e = spec.build_with(&quant, &LlmResources::synthetic(&spec)).unwrap_err().to_string();
    assert!(e.contains("0 cache quant infos (one pair per layer) given; the layout needs 2 (layers)"), "{e}");
    let res = LlmResources { theta: vec![1.0; 8], ..LlmResources::synthetic(&spec) };
    let e = spec.build_with(&LlmQuant::fixed(spec.layers), &res).unwrap_err().to_string();
    assert!(e.contains("8 rope_theta_data.bin values given; the layout needs 16 (head_dim)"), "{e}");
}

/// The fuzzing seeds: two groups, base scope, per-feature output quantization, and LoRA with
/// four groups, all small enough for libFuzzer to mutate quickly.
fn seeds() -> Vec<(&'static str, Hef)> {
    let small = LlmSpec {
        vocab: 16,
        hidden: 8,
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        layers: 1,
        prefill_tokens: 2,
        kv_cache_size: 4,
        ..LlmSpec::tiny()
    };
    let build = |spec: &LlmSpec| spec.build().unwrap();
    let mut per_feature = build(&small);
    per_feature.extensions.push(extension::OUTPUT_SCALE_PER_FEATURE);
    // With the extension every stream carries a list; an output's scalar is then INVALID.
    for g in &mut per_feature.groups {
        for s in &mut g.inputs {
            s.quant_per_feature = vec![s.quant; s.shape.features as usize];
        }
        for s in &mut g.outputs {
            s.quant_per_feature = (0..s.shape.features)
                .map(|f| QuantInfo { scale: (1 + f % 3) as f32 / 1024.0, ..s.quant })
                .collect();
            s.quant = QuantInfo::INVALID;
        }
    }
    let mut lora = build(&LlmSpec { name: "base_model".into(), ..small.clone() });
    lora.groups.extend(build(&LlmSpec { name: "lora".into(), ..small.clone() }).groups);
    vec![
        ("llm_small.hef", build(&small)),
        ("llm_base_scope.hef", build(&LlmSpec { with_tbt: false, ..small.clone() })),
        ("llm_per_feature.hef", per_feature),
        ("llm_four_groups.hef", lora),
    ]
}

/// `fuzz/seeds` holds exactly what the synthesizer writes; `HEFPROBE_BLESS=1` rewrites them after
/// an intended layout change.
#[test]
fn fuzz_seeds_are_the_synthesizers_output() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz").join("seeds");
    let bless = std::env::var_os("HEFPROBE_BLESS").is_some();
    for (name, hef) in seeds() {
        let bytes = hef.to_bytes();
        assert!(Hef::from_bytes(&bytes, name).unwrap() == hef, "{name} does not round trip");
        let path = dir.join(name);
        if bless {
            std::fs::write(&path, &bytes).unwrap();
        }
        let committed = std::fs::read(&path).unwrap();
        assert!(
            committed == bytes,
            "fuzz/seeds/{name} is not the synthesizer's output; rerun with HEFPROBE_BLESS=1"
        );
    }
}
