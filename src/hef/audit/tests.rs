//! Audit tests: a clean synthetic LLM HEF passes, and each structural mistake from the findings
//! table is caught under its own finding id.

use super::*;
use crate::hef::model::{FormatOrder, Resource, Shape3};
use crate::hef::synth::LlmSpec;

impl AuditReport {
    /// Findings with this id (tests match on ids).
    fn findings_with(&self, id: &str) -> Vec<&Finding> {
        self.findings.iter().filter(|f| f.id == id).collect()
    }
}

fn clean() -> (LlmSpec, Hef) {
    let spec = LlmSpec::tiny();
    let hef = spec.build().unwrap();
    (spec, hef)
}

fn set_resource(hef: &mut Hef, name: &str, data: Vec<u8>) {
    hef.resources.retain(|r| r.name != name);
    hef.resources.push(Resource::new(name, data));
}

fn ids(report: &AuditReport, severity: Severity) -> Vec<&'static str> {
    report.findings.iter().filter(|f| f.severity == severity).map(|f| f.id).collect()
}

fn only_finding<'r>(report: &'r AuditReport, id: &str) -> &'r Finding {
    let found = report.findings_with(id);
    assert_eq!(found.len(), 1, "expected one `{id}` finding, got {:#?}", report.findings);
    found[0]
}

#[test]
fn clean_synthetic_llm_has_no_errors() {
    let (spec, hef) = clean();
    let report = audit(&hef, &Expectations { vocab_size: Some(spec.vocab), ..Default::default() });
    assert!(!report.has_errors(), "{:#?}", report.findings);
    assert!(ids(&report, Severity::Warning).is_empty(), "{:#?}", report.findings);
    assert_eq!(report.selection.prefill.as_deref(), Some("tiny_llm__prefill"));
    assert_eq!(report.selection.tbt.as_deref(), Some("tiny_llm__tbt"));
    assert_eq!(report.caches.shared, Some(true));
    assert_eq!(report.caches.prefill_ids, vec![0, 1, 2, 3]);
    assert_eq!(report.vocab.tokenizer, Some(256));
    assert_eq!(report.vocab.embeddings_rows, Some(256));
    assert_eq!(report.rope.theta_length, Some(16));
    assert_eq!(report.rope.mask_on_value, Some(255.0));
    let roles: Vec<Option<&str>> = report.groups[0].inputs.iter().map(|l| l.role.as_deref()).collect();
    assert_eq!(roles[0], Some("embeddings"));
    assert_eq!(roles[5], Some("pe_k_sin"));
}

#[test]
fn missing_lm_head_is_finding_1() {
    let (spec, mut hef) = clean();
    for g in &mut hef.groups {
        g.outputs[0].shape.features = spec.hidden;
    }
    let report = audit(&hef, &Expectations::default());
    let f = &report.findings_with("logits-width")[0];
    assert_eq!((f.severity, f.finding), (Severity::Error, Some(1)));
    assert!(f.message.contains("64 wide but the tokenizer's vocabulary is 256"), "{}", f.message);
    assert!(f.message.contains("ends before lm_head"), "{}", f.message);
}

#[test]
fn hidden_wide_logits_are_finding_1_even_when_the_tokenizer_is_smaller_than_the_hidden_size() {
    // A tokenizer of 16 ids and logits 64 wide: without the checkpoint's vocab_size, a width
    // above the tokenizer's vocabulary is padding, but not the hidden size's width.
    let (spec, mut hef) = clean();
    // (Built here: the hef layer sits below model/, where the synthesized tokenizers live.)
    let vocab: serde_json::Map<String, serde_json::Value> =
        (0..16).map(|i| (format!("t{i}"), serde_json::Value::from(i))).collect();
    let small = serde_json::json!({"model": {"type": "BPE", "vocab": vocab}, "added_tokens": []})
        .to_string()
        .into_bytes();
    set_resource(&mut hef, TOKENIZER, small);
    for g in &mut hef.groups {
        g.outputs[0].shape.features = spec.hidden;
    }
    let report = audit(&hef, &Expectations::default());
    let f = &report.findings_with("logits-width")[0];
    assert_eq!((f.severity, f.finding), (Severity::Error, Some(1)));
    assert!(f.message.contains("64 wide but the tokenizer's vocabulary is 16"), "{}", f.message);
    assert!(f.message.contains("ends before lm_head"), "{}", f.message);
    assert!(report.findings_with("logits-padded").is_empty(), "{:#?}", report.findings);
    // Any other width above the tokenizer's vocabulary is still padding.
    for g in &mut hef.groups {
        g.outputs[0].shape.features = spec.hidden + 32;
    }
    let report = audit(&hef, &Expectations::default());
    assert!(report.findings_with("logits-width").is_empty(), "{:#?}", report.findings);
    let padded = report.findings_with("logits-padded");
    assert_eq!(padded.len(), 2, "one per group: {:#?}", report.findings);
    assert!(padded.iter().all(|f| f.severity == Severity::Info));
}

#[test]
fn full_sequence_logits_are_finding_2() {
    let (spec, mut hef) = clean();
    hef.groups[0].outputs[0].shape = Shape3::new(1, spec.prefill_tokens, spec.vocab);
    let report = audit(&hef, &Expectations { vocab_size: Some(spec.vocab), ..Default::default() });
    let f = only_finding(&report, "logits-rows");
    assert_eq!((f.severity, f.finding), (Severity::Error, Some(2)));
    assert!(f.message.contains("[1, 8, 256] (8 positions)"), "{}", f.message);
    assert!(report.findings_with("logits-width").is_empty(), "the width itself is right");
}

#[test]
fn misspelled_prefill_key_is_finding_5() {
    let (spec, mut hef) = clean();
    let config = serde_json::json!({
        "eos_token_id": 1,
        "pre_process_params": {
            "kv_cache_size": spec.kv_cache_size, "num_attention_heads": spec.heads,
            "num_key_value_heads": spec.kv_heads, "prefill_input_tokens_size": spec.prefill_tokens,
        },
    });
    set_resource(&mut hef, "hailo-config.json", config.to_string().into_bytes());
    let report = audit(&hef, &Expectations::default());
    let f = only_finding(&report, "config-unknown-key");
    assert_eq!((f.severity, f.finding), (Severity::Error, Some(5)));
    assert!(f.message.contains("did you mean `prefill_input_tokens_count`?"), "{}", f.message);
    assert!(f.message.contains("the default 96 applies instead of 8"), "{}", f.message);
    // The consequence: genai writes 96-row prefill frames into 8-row inputs.
    let rows = report.findings_with("input-rows");
    assert_eq!(rows.len(), 6);
    assert!(rows[0].message.contains("prefill_input_tokens_count = 96"), "{}", rows[0].message);
}

#[test]
fn untiled_rope_input_is_finding_3() {
    let (spec, mut hef) = clean();
    hef.groups[0].inputs[2].shape.features = spec.head_dim; // pe_q_cos not tiled per head
    let report = audit(&hef, &Expectations::default());
    let f = only_finding(&report, "rope-width");
    assert_eq!((f.severity, f.finding), (Severity::Error, Some(3)));
    assert!(
        f.message.contains("16 wide but genai writes theta length × num_attention_heads = 16 × 4 = 64"),
        "{}",
        f.message
    );
    // tbt still has the right width, so the two groups disagree too.
    assert_eq!(report.findings_with("prefill-tbt-mismatch").len(), 1);
}

#[test]
fn rope_k_width_uses_kv_heads() {
    let (spec, mut hef) = clean();
    for g in &mut hef.groups {
        g.inputs[4].shape.features = spec.head_dim * spec.heads; // K tiled with Q's head count
    }
    let report = audit(&hef, &Expectations::default());
    let found = report.findings_with("rope-width");
    assert_eq!(found.len(), 2);
    assert!(found[0].message.contains("num_key_value_heads = 16 × 2 = 32"), "{}", found[0].message);
}

fn shard(hef: &mut Hef, widths: &[u32]) {
    for g in &mut hef.groups {
        let template = g.outputs[0].clone();
        g.outputs = widths
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let mut s = template.clone();
                s.name = format!("{}/output_layer{}", g.name, i + 1);
                s.shape.features = w;
                s.padded.features = w;
                s
            })
            .collect();
    }
}

#[test]
fn sharded_logits_are_finding_12_info_when_they_add_up() {
    let (spec, mut hef) = clean();
    shard(&mut hef, &[128, 128]);
    let report = audit(&hef, &Expectations { vocab_size: Some(spec.vocab), ..Default::default() });
    assert!(!report.has_errors(), "{:#?}", report.findings);
    let f = &report.findings_with("logits-sharded")[0];
    assert_eq!((f.severity, f.finding), (Severity::Info, Some(12)));
    assert!(
        f.message.contains(
            "`tiny_llm__prefill/output_layer1` (128) + `tiny_llm__prefill/output_layer2` (128); total 256"
        ),
        "{}",
        f.message
    );
    assert_eq!(report.groups[0].outputs[1].role.as_deref(), Some("logits[1]"));
}

#[test]
fn sharded_logits_that_do_not_add_up_are_errors() {
    let (spec, mut hef) = clean();
    shard(&mut hef, &[128, 100]);
    let report = audit(&hef, &Expectations { vocab_size: Some(spec.vocab), ..Default::default() });
    let width = &report.findings_with("logits-width")[0];
    assert_eq!((width.severity, width.finding), (Severity::Error, Some(12)));
    assert!(!report.findings_with("logits-shard-sizes").is_empty());
}

#[test]
fn missing_resources_and_inputs_are_errors() {
    let (_, mut hef) = clean();
    hef.resources.retain(|r| r.name != "rope_theta_data.bin");
    hef.groups[1].inputs.remove(1);
    let report = audit(&hef, &Expectations::default());
    assert!(only_finding(&report, "missing-resource").message.contains("rope_theta_data.bin"));
    let f = only_finding(&report, "missing-input");
    assert_eq!(f.group.as_deref(), Some("tiny_llm__tbt"));
    assert!(f.message.contains("`input_layer2` (the attention_mask suffix)"), "{}", f.message);
}

#[test]
fn embeddings_dtype_and_size_are_checked() {
    let (_, mut hef) = clean();
    hef.groups[0].inputs[0].data_bytes = 1;
    set_resource(&mut hef, "embeddings.bin", vec![0; 1000]);
    let report = audit(&hef, &Expectations::default());
    assert_eq!(only_finding(&report, "embeddings-dtype").severity, Severity::Error);
    assert!(only_finding(&report, "embeddings-size").message.contains("1000 bytes"));
}

#[test]
fn odd_theta_length_is_an_error() {
    let (_, mut hef) = clean();
    set_resource(&mut hef, "rope_theta_data.bin", vec![0; 4 * 15]);
    let report = audit(&hef, &Expectations::default());
    assert!(only_finding(&report, "theta-length").message.contains("holds 15 values"));
}

#[test]
fn no_prefill_group_names_the_groups() {
    let (_, mut hef) = clean();
    hef.groups[0].name = "tiny_llm__context".into();
    let report = audit(&hef, &Expectations::default());
    let f = only_finding(&report, "no-prefill-group");
    assert!(f.message.contains("`prefill`") && f.message.contains("tiny_llm__context"), "{}", f.message);
}

#[test]
fn mask_width_uses_kv_cache_size_times_heads() {
    let (spec, mut hef) = clean();
    hef.groups[0].inputs[1].shape.features = spec.kv_cache_size;
    let report = audit(&hef, &Expectations::default());
    assert!(only_finding(&report, "mask-width").message.contains("32 × 4 = 128"));
}

#[test]
fn cache_problems_are_found() {
    let (_, mut hef) = clean();
    for c in &mut hef.groups[1].caches {
        c.cache_id += 10;
    }
    hef.groups[0].caches.retain(|c| c.cache_id != 3 || c.is_input); // drop cache 3's write side
    let report = audit(&hef, &Expectations::default());
    assert_eq!(only_finding(&report, "cache-ids-differ").finding, Some(9));
    assert!(only_finding(&report, "cache-unpaired").message.contains("cache id 3 has no write"));
    assert_eq!(report.caches.shared, Some(false));
}

#[test]
fn cache_layout_mismatch_between_groups_is_finding_9() {
    let (_, mut hef) = clean();
    hef.groups[1].caches[0].order = FormatOrder::Nhwc13;
    let report = audit(&hef, &Expectations::default());
    assert_eq!(only_finding(&report, "cache-layout").finding, Some(9));
}

#[test]
fn checkpoint_heads_must_match_the_config() {
    let (_, hef) = clean();
    let expect = Expectations { num_attention_heads: Some(8), head_dim: Some(32), ..Default::default() };
    let report = audit(&hef, &expect);
    assert_eq!(only_finding(&report, "config-vs-checkpoint").severity, Severity::Error);
    assert_eq!(only_finding(&report, "theta-vs-head-dim").severity, Severity::Warning);
}

#[test]
fn tokenizer_vocab_counts_added_tokens_once() {
    let json = br#"{"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": [{"content": "b"}, {"content": "<s>"}, {"content": "<s>"}]}"#;
    assert_eq!(tokenizer_vocab_size(json), Ok(3));
    let unigram = br#"{"model": {"vocab": [["a", -1.0], ["b", -2.0]]}}"#;
    assert_eq!(tokenizer_vocab_size(unigram), Ok(2));
    assert!(tokenizer_vocab_size(b"{}").is_err());
}

#[test]
fn json_report_is_versioned_with_stable_key_order() {
    let (_, hef) = clean();
    let json = audit(&hef, &Expectations::default()).to_json();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "schema",
            "source",
            "container",
            "header",
            "selection",
            "groups",
            "caches",
            "resources",
            "vocab",
            "config",
            "rope",
            "findings",
            "summary"
        ]
    );
    assert_eq!(value["schema"], "hefprobe.audit/1");
    assert_eq!(value["groups"][0]["inputs"][0]["shape"], serde_json::json!([1, 8, 64]));
}

#[test]
fn audit_file_reports_the_container() {
    let (_, hef) = clean();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.hef");
    std::fs::write(&path, hef.to_bytes()).unwrap();
    let report = audit_file(&path, &Expectations::default(), None).unwrap();
    assert!(report.source.as_deref().unwrap().ends_with("tiny.hef"));
    let container = report.container.as_ref().unwrap();
    assert_eq!(container.layout.offset_zero_point % 4096, 0);
    assert!(!report.has_errors());
}

/// The fuzzing seed with LoRA groups (it was also the input libFuzzer flagged when ASAN's
/// quarantine pushed RSS past 512 MB; alone it runs in ~30 ms).
#[test]
fn four_group_hef_selects_the_base_model() {
    let (spec, mut hef) = clean();
    let mut lora = hef.groups.clone();
    for (g, name) in hef.groups.iter_mut().chain(lora.iter_mut()).zip([
        "base_model__prefill",
        "base_model__tbt",
        "lora__prefill",
        "lora__tbt",
    ]) {
        g.name = name.into();
    }
    hef.groups.extend(lora);
    let report = audit(&hef, &Expectations { vocab_size: Some(spec.vocab), ..Default::default() });
    assert_eq!(report.selection.prefill.as_deref(), Some("base_model__prefill"));
    assert_eq!(report.selection.tbt.as_deref(), Some("base_model__tbt"));
    assert!(!report.has_errors(), "{:#?}", report.findings);
}
