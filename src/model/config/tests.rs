//! config.json parsing: defaults, refusals, RoPE forms, unknown keys, size bounds.

use super::*;

fn cfg(extra: &str) -> Result<ModelConfig> {
    let text = format!(
        r#"{{"model_type":"llama","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":256{extra}}}"#
    );
    ModelConfig::from_json_str(&text, "config.json")
}

#[test]
fn rope_theta_in_rope_parameters_is_read() {
    let c = cfg(r#","rope_parameters":{"rope_theta":500000.0,"rope_type":"default"}"#).unwrap();
    assert_eq!(c.rope.theta, 500000.0);
    assert!(!c.defaults_applied.iter().any(|(k, _)| k == "rope_theta"));
}

#[test]
fn missing_theta_is_an_applied_default_not_a_silent_one() {
    let c = cfg("").unwrap();
    assert_eq!(c.rope.theta, 10000.0);
    assert!(c.defaults_applied.iter().any(|(k, _)| k == "rope_theta"));
    assert_eq!(c.num_kv_heads, 4);
    assert_eq!(c.head_dim, 16);
}

#[test]
fn unknown_key_is_named_with_a_hint() {
    let e = cfg(r#","rms_norm_epsilon":1e-5"#).unwrap_err().to_string();
    assert!(e.contains("`rms_norm_epsilon`"), "{e}");
    assert!(e.contains("did you mean `rms_norm_eps`"), "{e}");
}

#[test]
fn unsupported_rope_type_and_activation_are_named() {
    // yarn became supported; dynamic (NTK) is the first type still refused.
    let e = cfg(r#","rope_parameters":{"rope_theta":1.0,"rope_type":"dynamic","factor":2.0}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rope_type `dynamic` is not supported"), "{e}");
    let e = cfg(r#","hidden_act":"gelu""#).unwrap_err().to_string();
    assert!(e.contains("hidden_act") && e.contains("gelu"), "{e}");
}

#[test]
fn missing_required_field_is_named() {
    let e = ModelConfig::from_json_str(r#"{"model_type":"qwen2","hidden_size":64}"#, "c.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`intermediate_size`") && e.contains("missing"), "{e}");
}

#[test]
fn qwen2_window_applies_from_max_window_layers() {
    let text = r#"{"model_type":"qwen2","hidden_size":64,"intermediate_size":128,
        "num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":4,"vocab_size":256,
        "use_sliding_window":true,"sliding_window":4,"max_window_layers":1}"#;
    let c = ModelConfig::from_json_str(text, "c").unwrap();
    assert_eq!(c.sliding_window, vec![None, Some(4), Some(4)]);
    assert!(c.qkv_bias && !c.o_bias);
}

#[test]
fn hf_json_round_trips() {
    let c = cfg(r#","rope_parameters":{"rope_theta":10000.0,"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":64}"#).unwrap();
    let back = ModelConfig::from_map(c.to_hf_json().as_object().unwrap(), "rt").unwrap();
    assert_eq!(back.rope, c.rope);
    assert_eq!(back.head_dim, c.head_dim);
}

/// SmolLM2-135M's published config.json (HuggingFaceTB/SmolLM2-135M, written by nanotron's
/// converter with transformers 4.40), with the Unsloth and tool keys seen on other exports.
const SMOLLM2: &str = r#"{
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
  "initializer_range": 0.041666666666666664, "intermediate_size": 1536, "is_llama_config": true,
  "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 9,
  "num_hidden_layers": 30, "num_key_value_heads": 3, "pad_token_id": null, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05, "rope_interleaved": false, "rope_scaling": null, "rope_theta": 100000,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.40.1",
  "use_cache": true, "vocab_size": 49152
}"#;

#[test]
fn smollm2_published_keys_are_accepted_and_listed() {
    let c = ModelConfig::from_json_str(SMOLLM2, "config.json").unwrap();
    let keys: Vec<&str> = c.unknown_keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(keys, ["is_llama_config", "rope_interleaved"]);
    assert!(c.unknown_keys[1].note.contains("rotate_half"), "{:?}", c.unknown_keys[1]);
    assert_eq!(c.unknown_keys[1].value, "false");
    assert_eq!((c.head_dim, c.num_kv_heads, c.rope.theta), (64, 3, 100000.0));
    assert_eq!(c.rope.scaling, RopeScaling::Default);
    let e = c.refuse_unknown_keys("config.json").unwrap_err().to_string();
    assert!(e.contains("`is_llama_config`, `rope_interleaved`") && e.contains("strict"), "{e}");
}

#[test]
fn tool_keys_are_reported_not_refused() {
    let c = cfg(r#","unsloth_version":"2024.9","unk_token_id":0,"_model_name_or_path":"x/y","auto_map":{"AutoModel":"m.M"}"#)
        .unwrap();
    let keys: Vec<&str> = c.unknown_keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(keys, ["unsloth_version", "unk_token_id", "_model_name_or_path", "auto_map"]);
    assert!(c.unknown_keys[0].note.contains("LlamaConfig"), "{:?}", c.unknown_keys[0]);
    assert!(c.unknown_keys[3].note.contains("trust_remote_code"), "{:?}", c.unknown_keys[3]);
    assert!(cfg("").unwrap().refuse_unknown_keys("c").is_ok());
}

#[test]
fn what_is_not_implemented_is_refused_with_key_value_and_what_is_supported() {
    let cases = [
        (r#","quantization_config":{"quant_method":"gptq","bits":4}"#, "quantization_config", "gptq"),
        (
            r#","rope_scaling":{"type":"dynamic","factor":2.0}"#,
            "rope_type `dynamic`",
            "default, linear, llama3, yarn",
        ),
        (
            r#","rope_parameters":{"rope_type":"longrope","short_factor":[1],"long_factor":[1]}"#,
            "`longrope`",
            "yarn",
        ),
        (r#","rope_scaling":{"type":"mrope","mrope_section":[2,3,3]}"#, "rope_scaling", "mrope"),
        (r#","partial_rotary_factor":0.5"#, "partial_rotary_factor", "0.5"),
        (
            r#","rope_parameters":{"rope_type":"default","partial_rotary_factor":0.25}"#,
            "partial_rotary_factor 0.25",
            "fully rotated",
        ),
        (r#","final_logit_softcapping":30.0"#, "final_logit_softcapping", "30.0"),
        (r#","attn_logit_softcapping":50.0"#, "attn_logit_softcapping", "only null"),
        (r#","hidden_act":"gelu_pytorch_tanh""#, "hidden_act", "only \"silu\""),
        (r#","mrope_section":[16,24,24]"#, "mrope_section", "mrope"),
    ];
    for (extra, key, detail) in cases {
        let e = cfg(extra).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains(detail), "{extra}: {e}");
    }
    // The same keys at their no-op values are fine.
    cfg(r#","final_logit_softcapping":null,"quantization_config":null,"partial_rotary_factor":1.0"#).unwrap();
}

#[test]
fn a_typo_inside_the_rope_block_is_refused() {
    let e = cfg(r#","rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factors":1.0,"high_freq_factor":4.0}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`low_freq_factors`") && e.contains("did you mean `low_freq_factor`"), "{e}");
}

#[test]
fn linear_and_yarn_read_in_both_forms() {
    let c = cfg(r#","rope_parameters":{"rope_type":"linear","rope_theta":10000.0,"factor":4.0}"#).unwrap();
    assert_eq!(c.rope.scaling, RopeScaling::Linear { factor: 4.0 });
    let legacy = cfg(r#","rope_theta":10000.0,"rope_scaling":{"type":"linear","factor":4}"#).unwrap();
    assert_eq!(legacy.rope, c.rope);

    // Qwen2.5's published form: `type` (not rope_type), no optional keys.
    let q = cfg(r#","max_position_embeddings":131072,"rope_scaling":{"type":"yarn","factor":4.0,"original_max_position_embeddings":32768}"#)
        .unwrap();
    let yarn = RopeScaling::Yarn {
        factor: 4.0,
        original_max_position_embeddings: 32768,
        attention_factor: None,
        beta_fast: None,
        beta_slow: None,
        mscale: None,
        mscale_all_dim: None,
        truncate: true,
    };
    assert_eq!(q.rope.scaling, yarn);
    let back = ModelConfig::from_map(q.to_hf_json().as_object().unwrap(), "rt").unwrap();
    assert_eq!(back.rope, q.rope);

    // standardize_rope_params: a missing original_max_position_embeddings is
    // max_position_embeddings; a top-level one wins over the block's.
    let c = cfg(r#","max_position_embeddings":4096,"rope_parameters":{"rope_type":"yarn","factor":2.0}"#)
        .unwrap();
    assert!(matches!(c.rope.scaling, RopeScaling::Yarn { original_max_position_embeddings: 4096, .. }));
    let c = cfg(r#","original_max_position_embeddings":1024,"rope_parameters":{"rope_type":"yarn","factor":2.0,"original_max_position_embeddings":2048}"#)
        .unwrap();
    assert!(matches!(c.rope.scaling, RopeScaling::Yarn { original_max_position_embeddings: 1024, .. }));
    // An explicit null factor is max_position_embeddings / original (`_compute_yarn_parameters`).
    let c = cfg(r#","max_position_embeddings":8192,"rope_parameters":{"rope_type":"yarn","factor":null,"original_max_position_embeddings":2048}"#)
        .unwrap();
    assert!(matches!(c.rope.scaling, RopeScaling::Yarn { factor, .. } if factor == 4.0));
    let e = cfg(r#","rope_parameters":{"rope_type":"yarn","factor":-2.0}"#).unwrap_err().to_string();
    assert!(e.contains("`factor` -2 must be positive"), "{e}");
}

#[test]
fn qwen_kv_heads_default_is_the_class_default() {
    // Qwen2Config/Qwen3Config: num_key_value_heads = 32 (not num_attention_heads).
    let text = r#"{"model_type":"qwen2","hidden_size":64,"intermediate_size":128,
        "num_hidden_layers":2,"num_attention_heads":32,"vocab_size":256}"#;
    let c = ModelConfig::from_json_str(text, "c").unwrap();
    assert_eq!(c.num_kv_heads, 32);
    assert!(c.defaults_applied.contains(&("num_key_value_heads".into(), "32".into())));
    // An explicit null is HF's None: num_attention_heads (__post_init__).
    let text = text.replace("\"vocab_size\":256", "\"vocab_size\":256,\"num_key_value_heads\":null");
    let text = text.replace("\"num_attention_heads\":32", "\"num_attention_heads\":4");
    assert_eq!(ModelConfig::from_json_str(&text, "c").unwrap().num_kv_heads, 4);
}

fn budget(bytes: u64) -> WeightBudget {
    WeightBudget { bytes, what: "the weight files".into() }
}

/// The llama config of `cfg`, with some keys set (as JSON values).
fn llama_with(set: &[(&str, serde_json::Value)]) -> String {
    let mut m: Map<String, Value> = serde_json::from_str(
        r#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":256}"#,
    )
    .unwrap();
    for (k, v) in set {
        m.insert(k.to_string(), v.clone());
    }
    Value::Object(m).to_string()
}

#[test]
fn dimensions_beyond_the_weight_files_name_the_key() {
    use serde_json::json;
    let base = llama_with(&[]);
    // The real count: 2·256·64 + 2·(4·64·64 + 3·64·128 + 2·64) + 64 = 115_008 parameters.
    let ok = ModelConfig::from_json_str_within(&base, "c", Some(&budget(2 * 115_008))).unwrap();
    assert_eq!(crate::model::memory::params(&ok).get(), Some(115_008));
    let e = ModelConfig::from_json_str_within(&base, "c", Some(&budget(2 * 115_008 - 1))).unwrap_err();
    assert!(e.to_string().contains("disagree"), "{e}");
    for (key, big, extra) in [
        ("num_hidden_layers", 1_000_000_000u64, None),
        ("hidden_size", 1_000_000, Some(("head_dim", json!(16)))),
        ("vocab_size", 1_000_000_000, None),
        ("intermediate_size", 100_000_000_000, None),
    ] {
        let mut set = vec![(key, json!(big))];
        set.extend(extra);
        let e = ModelConfig::from_json_str_within(&llama_with(&set), "c", Some(&budget(1 << 20)))
            .unwrap_err()
            .to_string();
        let named = e.contains(&format!("`{key}`")) && e.contains(&big.to_string());
        assert!(named && e.contains("take 1048576 bytes"), "{key}: {e}");
    }
    // Products beyond u128 and, with no weights to measure, absurd layer counts are refused too.
    let huge = llama_with(&[
        ("hidden_size", json!(u64::MAX)),
        ("num_attention_heads", json!(1)),
        ("head_dim", json!(u64::MAX - 1)),
    ]);
    let e = ModelConfig::from_json_str(&huge, "c").unwrap_err().to_string();
    assert!(e.contains("128 bits"), "{e}");
    let many = llama_with(&[("num_hidden_layers", json!(1_000_000_000))]);
    let e = ModelConfig::from_json_str(&many, "c").unwrap_err().to_string();
    assert!(e.contains("`num_hidden_layers`") && e.contains("65536"), "{e}");
}
