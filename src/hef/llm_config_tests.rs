//! Unit tests of llm_config.rs: every key as genai reads it, finding 5's misspelling, wrong types.

use super::*;

fn parse(text: &str) -> LlmConfig {
    LlmConfig::parse(text.as_bytes(), "hailo-config.json").unwrap()
}

#[test]
fn absent_keys_take_hailort_defaults() {
    let c = parse(r#"{"eos_token_id": 2}"#);
    assert_eq!(c.eos_token_id, 2);
    assert_eq!(c.pre_process_params.kv_cache_size, 2048);
    assert_eq!(c.pre_process_params.num_attention_heads, 12);
    assert_eq!(c.pre_process_params.num_key_value_heads, 2);
    assert_eq!(c.pre_process_params.prefill_input_tokens_count, 96);
    assert_eq!(c.pre_process_params.mrope_section, vec![16, 24, 24]);
    assert_eq!(c.input_layers_names_suffixes.embeddings, "input_layer1");
    assert_eq!(c.input_layers_names_suffixes.pe_k_sin, "input_layer6");
    assert_eq!(c.default_generation_params.max_new_tokens, 1024);
    assert_eq!(c.default_generation_params.temperature, 0.7);
    assert_eq!(c.default_generation_params.top_k, 20);
    assert!(c.default_generation_params.do_sample);
    assert_eq!(c.begin_of_reasoning_token_id, INVALID_TOKEN);
    assert_eq!(c.defaults_applied.len(), 21);
    assert!(c.findings.is_empty());
}

#[test]
fn given_keys_override_defaults() {
    let c = parse(
        r#"{"eos_token_id": 7, "stop_token_id": [7, 8],
            "pre_process_params": {"kv_cache_size": 1024, "prefill_input_tokens_count": 32},
            "default_generation_params": {"do_sample": false, "temperature": 1}}"#,
    );
    assert_eq!(c.stop_token_id, vec![7, 8]);
    assert_eq!(c.pre_process_params.kv_cache_size, 1024);
    assert_eq!(c.pre_process_params.prefill_input_tokens_count, 32);
    assert!(!c.default_generation_params.do_sample);
    assert_eq!(c.default_generation_params.temperature, 1.0);
    assert!(!c.defaults_applied.contains(&"pre_process_params.kv_cache_size".to_string()));
}

#[test]
fn finding_5_misspelled_prefill_key_is_an_error_naming_the_default() {
    let c = parse(r#"{"eos_token_id": 2, "pre_process_params": {"prefill_input_tokens_size": 128}}"#);
    assert_eq!(c.pre_process_params.prefill_input_tokens_count, 96);
    let f = &c.findings[0];
    assert_eq!(f.key, "pre_process_params.prefill_input_tokens_size");
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.did_you_mean.as_deref(), Some("pre_process_params.prefill_input_tokens_count"));
    assert_eq!(f.applies_instead.as_deref(), Some("96"));
    assert!(f.message.contains("did you mean `prefill_input_tokens_count`?"), "{}", f.message);
    assert!(f.message.contains("the default 96 applies instead of 128"), "{}", f.message);
}

#[test]
fn misspelling_with_the_default_value_is_only_a_warning() {
    let c = parse(r#"{"eos_token_id": 2, "pre_process_params": {"prefill_input_tokens_size": 96}}"#);
    assert_eq!(c.findings[0].severity, Severity::Warning);
}

#[test]
fn key_in_the_wrong_section_is_found() {
    let c = parse(r#"{"eos_token_id": 2, "kv_cache_size": 4096}"#);
    let f = &c.findings[0];
    assert_eq!(f.did_you_mean.as_deref(), Some("pre_process_params.kv_cache_size"));
    assert_eq!(f.severity, Severity::Error);
    assert!(f.message.contains("only under `pre_process_params`"), "{}", f.message);
    assert!(f.message.contains("the default 2048 applies instead of 4096"), "{}", f.message);
}

#[test]
fn misspelled_section_hides_all_its_keys() {
    let c = parse(r#"{"eos_token_id": 2, "pre_process_param": {"kv_cache_size": 4096}}"#);
    let f = &c.findings[0];
    assert_eq!(f.did_you_mean.as_deref(), Some("pre_process_params"));
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(c.pre_process_params.kv_cache_size, 2048);
}

#[test]
fn known_key_nested_in_an_unknown_object_is_found() {
    let c = parse(r#"{"eos_token_id": 2, "extra": {"inner": {"prefill_input_tokens_count": 128}}}"#);
    let keys: Vec<&str> = c.findings.iter().map(|f| f.key.as_str()).collect();
    assert_eq!(keys, ["extra", "extra.inner", "extra.inner.prefill_input_tokens_count"]);
    let f = &c.findings[2];
    assert_eq!(f.severity, Severity::Error);
    assert!(f.message.contains("only under `pre_process_params`"), "{}", f.message);
}

#[test]
fn unrelated_unknown_key_is_info() {
    let c = parse(r#"{"eos_token_id": 2, "model_family": "qwen"}"#);
    assert_eq!(c.findings[0].severity, Severity::Info);
}

#[test]
fn wrong_types_are_errors_naming_the_key() {
    let err = LlmConfig::parse(br#"{"eos_token_id": [1, 2]}"#, "cfg").unwrap_err().to_string();
    assert!(err.contains("key `eos_token_id`") && err.contains("a list"), "{err}");
    let err =
        LlmConfig::parse(br#"{"eos_token_id": 1, "pre_process_params": {"kv_cache_size": "2048"}}"#, "cfg")
            .unwrap_err()
            .to_string();
    assert!(err.contains("`pre_process_params.kv_cache_size`") && err.contains("uint32_t"), "{err}");
    let err = LlmConfig::parse(br#"{"eos_token_id": 1, "stop_token_id": [1, "x"]}"#, "cfg").unwrap_err();
    assert!(err.to_string().contains("`stop_token_id[1]`"));
    let err =
        LlmConfig::parse(br#"{"eos_token_id": 1, "default_generation_params": {"do_sample": 0}}"#, "cfg");
    assert!(err.unwrap_err().to_string().contains("get<bool>"));
}

#[test]
fn missing_eos_and_bad_json_are_errors() {
    assert!(LlmConfig::parse(b"{}", "cfg").unwrap_err().to_string().contains("`eos_token_id`"));
    assert!(LlmConfig::parse(b"{", "cfg").unwrap_err().to_string().contains("not valid JSON"));
    assert!(LlmConfig::parse(b"[]", "cfg").unwrap_err().to_string().contains("not a JSON object"));
}

#[test]
fn c_style_conversions_are_reported() {
    let c = parse(
        r#"{"eos_token_id": 2.9, "pre_process_params": {"kv_cache_size": -1, "num_attention_heads": true}}"#,
    );
    assert_eq!(c.eos_token_id, 2);
    assert_eq!(c.pre_process_params.kv_cache_size, u32::MAX);
    assert_eq!(c.pre_process_params.num_attention_heads, 1);
    let keys: Vec<&str> =
        c.findings.iter().filter(|f| f.kind == "converted").map(|f| f.key.as_str()).collect();
    assert_eq!(
        keys,
        ["eos_token_id", "pre_process_params.kv_cache_size", "pre_process_params.num_attention_heads"]
    );
}

#[test]
fn section_of_the_wrong_type_is_reported() {
    let c = parse(r#"{"eos_token_id": 2, "pre_process_params": [1]}"#);
    assert_eq!(c.findings[0].key, "pre_process_params");
    assert_eq!(c.pre_process_params.prefill_input_tokens_count, 96);
}

#[test]
fn with_defaults_matches_a_minimal_file() {
    assert_eq!(LlmConfig::with_defaults(5).pre_process_params.kv_cache_size, 2048);
}
