//! HEF-wide checks: required extensions, the four genai resources, hailo-config.json, the
//! tokenizer vocabulary, the RoPE theta, embeddings.bin, and the checkpoint's expectations.

use std::collections::BTreeSet;

use super::{Auditor, EMBEDDINGS, REQUIRED_RESOURCES, THETA, TOKENIZER};
use crate::hef::finding::{Finding, Severity};
use crate::hef::llm_config::{self, ConfigFinding, LlmConfig};
use crate::hef::model::extension;

impl Auditor<'_> {
    /// `validate_hef_extensions` (hef.cpp:445): unknown required extensions and a missing
    /// PERIPH_CALCULATION_IN_HAILORT make HailoRT 5.2 refuse the HEF.
    pub(super) fn check_extensions(&mut self) {
        for &id in &self.hef.extensions {
            if !extension::SUPPORTED.contains(&id) {
                let name = extension::name(id);
                let msg = format!("the HEF requires extension {id} ({name}), which HailoRT 5.2 does not support: HAILO_HEF_NOT_SUPPORTED");
                self.push(Finding::new("unsupported-extension", Severity::Error, msg));
            }
        }
        if !self.hef.extensions.contains(&extension::PERIPH_CALCULATION_IN_HAILORT) {
            let msg = "the HEF lacks PERIPH_CALCULATION_IN_HAILORT (26); HailoRT 5.2 refuses it as outdated (HAILO_HEF_NOT_SUPPORTED) — recompile with a current DFC";
            self.push(Finding::new("missing-extension", Severity::Error, msg));
        }
    }

    pub(super) fn check_resources(&mut self) {
        for name in REQUIRED_RESOURCES {
            if self.hef.resource(name).is_none() {
                let msg = format!("resource `{name}` is missing; genai fetches it at model creation and fails without it (HAILO_NOT_FOUND)");
                self.push(Finding::new("missing-resource", Severity::Error, msg));
            }
        }
        let mut seen = BTreeSet::new();
        for r in &self.hef.resources {
            if !seen.insert(r.name.as_str()) {
                let msg = format!("resource `{}` appears more than once; HailoRT serves the first", r.name);
                self.push(Finding::new("duplicate-resource", Severity::Warning, msg));
            }
            if r.xxhash == 0 {
                let msg =
                    format!("resource `{}` has no stored XXH3, so corruption would go unnoticed", r.name);
                self.push(Finding::new("resource-unhashed", Severity::Info, msg));
            }
        }
    }

    pub(super) fn read_config(&mut self) {
        let Some(bytes) = self.hef.resource(llm_config::RESOURCE) else { return };
        match LlmConfig::parse(bytes, &format!("resource {}", llm_config::RESOURCE)) {
            Ok(config) => {
                self.findings.extend(config.findings.iter().map(config_finding));
                self.params = config.clone();
                self.config = Some(config);
            }
            Err(e) => self.push(Finding::new("config-invalid", Severity::Error, e.to_string())),
        }
    }

    pub(super) fn read_tokenizer(&mut self) {
        let Some(bytes) = self.hef.resource(TOKENIZER) else { return };
        match tokenizer_vocab_size(bytes) {
            Ok(n) => self.tokenizer_vocab = Some(n),
            Err(e) => {
                let msg = format!("resource {TOKENIZER}: {e}; genai's tokenizer cannot load it");
                self.push(Finding::new("tokenizer-invalid", Severity::Error, msg));
            }
        }
        self.vocab.tokenizer = self.tokenizer_vocab;
    }

    /// theta is reinterpreted as float32 (pre_process.cpp:54-59); for an LLM the mrope section is
    /// forced to [L/2] and doubled, so an odd L leaves the last column of every RoPE row unwritten.
    pub(super) fn read_theta(&mut self) {
        let Some(bytes) = self.hef.resource(THETA) else { return };
        let len = bytes.len() as u64;
        if !len.is_multiple_of(4) {
            let msg = format!(
                "{THETA} is {len} bytes, not a whole number of float32; genai drops the last {} bytes",
                len % 4
            );
            self.push(Finding::new("theta-size", Severity::Error, msg));
        }
        let l = len / 4;
        self.theta_length = Some(l);
        self.rope.theta_length = Some(l);
        if l == 0 || l % 2 == 1 {
            let msg = format!("{THETA} holds {l} values; genai needs an even, non-zero count (sections [L/2, L/2] must cover all L columns)");
            self.push(Finding::new("theta-length", Severity::Error, msg).table(3));
        }
    }

    /// embeddings.bin is a row-major [vocab, F] uint16 matrix; rows are looked up by token id with
    /// bounds only asserted (token_embedder.hpp).
    pub(super) fn check_embeddings_resource(&mut self) {
        let (Some(data), Some(f)) = (self.hef.resource(EMBEDDINGS), self.embeddings_features()) else {
            return;
        };
        let row = 2 * u64::from(f);
        let size = data.len() as u64;
        if row == 0 || !size.is_multiple_of(row) {
            let msg = format!(
                "{EMBEDDINGS} is {size} bytes, not a whole number of {f}-wide uint16 rows ({row} bytes each)"
            );
            self.push(Finding::new("embeddings-size", Severity::Error, msg));
            return;
        }
        let rows = size / row;
        self.vocab.embeddings_rows = Some(rows);
        if let Some(t) = self.tokenizer_vocab.filter(|&t| rows < u64::from(t)) {
            let msg = format!("{EMBEDDINGS} has {rows} rows but the tokenizer has {t} tokens; looking up a higher id reads past the table");
            self.push(Finding::new("embeddings-rows", Severity::Error, msg));
        }
        // A padded table (Qwen2.5: 151,936 rows, 151,665 tokens) is normal; a tokenizer covering
        // under half the rows is another model's (a 259-token byte-level test tokenizer beside a
        // 49,152-row table): genai would never produce most of the vocabulary.
        if let Some(t) = self.tokenizer_vocab.filter(|&t| u64::from(t).saturating_mul(2) < rows) {
            let msg = format!(
                "{TOKENIZER} has {t} tokens but {EMBEDDINGS} has {rows} rows: the tokenizer covers under half \
                 the vocabulary, probably another model's"
            );
            self.push(Finding::new("tokenizer-vs-vocab", Severity::Warning, msg));
        }
        if let Some(v) = self.expect.vocab_size.filter(|&v| rows != u64::from(v)) {
            let msg = format!("{EMBEDDINGS} has {rows} rows but the checkpoint's vocab_size is {v}");
            self.push(Finding::new("embeddings-rows", Severity::Warning, msg));
        }
    }

    /// Sizes hailo-config.json claims that no model has (every one is input: the host builds
    /// frames and the simulated device a ring from them): a KV cache past the longest context of
    /// the models a Hailo-10H runs (Llama 3.2: 131,072 positions, its config.json
    /// max_position_embeddings), and a mask frame (prefill rows × kv_cache_size × heads bytes,
    /// llm_server.cpp create_pre_process_future) past 1 GiB.
    pub(super) fn check_sizes(&mut self) {
        const LONGEST_CONTEXT: u64 = 131_072;
        let p = self.params.pre_process_params.clone();
        let kv = u64::from(p.kv_cache_size);
        if kv > LONGEST_CONTEXT {
            let msg = format!(
                "hailo-config.json kv_cache_size is {kv} slots, past the longest context of any model a \
                 Hailo-10H runs ({LONGEST_CONTEXT}); every layer's cache ring holds that many entries"
            );
            self.push(Finding::new("implausible-size", Severity::Warning, msg));
        }
        let mask = u64::from(p.prefill_input_tokens_count)
            .saturating_mul(kv)
            .saturating_mul(u64::from(p.num_attention_heads));
        if mask > 1 << 30 {
            let msg = format!(
                "a prefill mask frame is {} (prefill_input_tokens_count {} × kv_cache_size {kv} × {} heads): \
                 host buffers that large are no compiled model's",
                crate::error::format_size(mask),
                p.prefill_input_tokens_count,
                p.num_attention_heads
            );
            self.push(Finding::new("implausible-size", Severity::Warning, msg));
        }
    }

    /// genai tiles RoPE and the mask with hailo-config.json's head counts, not the checkpoint's.
    pub(super) fn check_expectations(&mut self) {
        let p = self.params.pre_process_params.clone();
        let pairs = [
            ("num_attention_heads", self.expect.num_attention_heads, p.num_attention_heads),
            ("num_key_value_heads", self.expect.num_key_value_heads, p.num_key_value_heads),
        ];
        for (key, expected, actual) in pairs {
            if let Some(e) = expected.filter(|&e| e != actual) {
                let msg = format!(
                    "hailo-config.json {key} is {actual} (what genai tiles with) but the checkpoint has {e}"
                );
                self.push(Finding::new("config-vs-checkpoint", Severity::Error, msg).table(3));
            }
        }
        if let (Some(hd), Some(l)) = (self.expect.head_dim, self.theta_length) {
            if u64::from(hd) != l {
                let msg = format!("{THETA} has {l} values but the checkpoint's head_dim is {hd}");
                self.push(Finding::new("theta-vs-head-dim", Severity::Warning, msg).table(3));
            }
        }
    }
}

fn config_finding(f: &ConfigFinding) -> Finding {
    let msg = format!("{}: {}", llm_config::RESOURCE, f.message);
    match f.kind {
        "converted" => Finding::new("config-converted", f.severity, msg),
        _ => Finding::new("config-unknown-key", f.severity, msg).table(5),
    }
}

/// Count tokenizer.json's vocabulary: `model.vocab` (a map for BPE/WordPiece, a list of
/// [token, score] for Unigram) plus `added_tokens` whose content is not already in it.
pub fn tokenizer_vocab_size(bytes: &[u8]) -> std::result::Result<u32, String> {
    let json: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON ({e})"))?;
    let vocab = json.pointer("/model/vocab").ok_or("no model.vocab")?;
    let mut tokens: BTreeSet<&str> = match vocab {
        serde_json::Value::Object(map) => map.keys().map(String::as_str).collect(),
        serde_json::Value::Array(list) => {
            list.iter().filter_map(|e| e.get(0).and_then(|t| t.as_str())).collect()
        }
        _ => return Err("model.vocab is neither a map nor a list".into()),
    };
    let base = tokens.len();
    let added = json.get("added_tokens").and_then(|a| a.as_array()).map(Vec::as_slice).unwrap_or_default();
    let extra = added
        .iter()
        .filter_map(|t| t.get("content").and_then(|c| c.as_str()))
        .filter(|c| tokens.insert(c))
        .count();
    u32::try_from(base + extra).map_err(|_| "vocabulary larger than 2^32".to_string())
}
