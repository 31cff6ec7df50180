//! A synthetic LLM-shaped HEF: the interface genai expects (six inputs per group, a [1,1,vocab]
//! logits output, KV-cache layers shared by prefill and tbt, the four resources), sized from a
//! few numbers. Used by tests, as fuzzing seeds, and by the simulator as a stand-in HEF.
//!
//! Widths follow what genai writes (facts §2.4-2.7): embeddings [1, T, hidden] uint16; mask
//! [1, T, kv_cache_size × heads] uint8; RoPE Q [1, T, L × heads], K [1, T, L × kv_heads] with
//! L = head_dim theta values; T = prefill_input_tokens_count for prefill, 1 for tbt.

use serde_json::json;

use super::llm_config;
use super::model::{
    extension, CacheLayer, FormatOrder, Hef, NetworkGroup, QuantInfo, Resource, Shape3, Stream,
};

/// The numbers a synthetic LLM HEF is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmSpec {
    /// Group names are `<name>__prefill` and `<name>__tbt`.
    pub name: String,
    pub vocab: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub layers: u32,
    pub prefill_tokens: u32,
    pub kv_cache_size: u32,
    pub with_tbt: bool,
}

impl LlmSpec {
    /// A model small enough for unit tests (a 256-token vocab, 2 layers).
    pub fn tiny() -> Self {
        LlmSpec {
            name: "tiny_llm".into(),
            vocab: 256,
            hidden: 64,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            layers: 2,
            prefill_tokens: 8,
            kv_cache_size: 32,
            with_tbt: true,
        }
    }

    pub fn prefill_name(&self) -> String {
        format!("{}__prefill", self.name)
    }

    pub fn tbt_name(&self) -> String {
        format!("{}__tbt", self.name)
    }

    pub fn build(&self) -> Hef {
        let mut groups = vec![self.group(&self.prefill_name(), self.prefill_tokens)];
        if self.with_tbt {
            groups.push(self.group(&self.tbt_name(), 1));
        }
        Hef {
            version: 3,
            hw_arch: 103, // HAILO1XH: the Hailo-10H/15H family (device_internal.cpp:749-752)
            sdk_version: "hefprobe-synth".into(),
            groups,
            resources: self.resources(),
            extensions: vec![
                extension::HAILO_NET_FLOW,
                extension::PERIPH_CALCULATION_IN_HAILORT,
                extension::EXTERNAL_RESOURCES,
            ],
        }
    }

    /// One group with T token rows per frame.
    pub fn group(&self, name: &str, rows: u32) -> NetworkGroup {
        let theta = self.head_dim;
        let input = |i: u32, features: u32, data_bytes: u32, quant: QuantInfo| {
            stream(&format!("{name}/input_layer{i}"), rows, features, data_bytes, quant)
        };
        let pe = QuantInfo { zp: 128.0, scale: 1.0 / 127.0, min: -1.0, max: 1.0 };
        NetworkGroup {
            name: name.to_string(),
            inputs: vec![
                input(1, self.hidden, 2, QuantInfo { zp: 32768.0, scale: 1.0 / 4096.0, min: -8.0, max: 8.0 }),
                input(
                    2,
                    self.kv_cache_size * self.heads,
                    1,
                    QuantInfo { zp: 0.0, scale: 1.0 / 255.0, min: 0.0, max: 1.0 },
                ),
                input(3, theta * self.heads, 1, pe),
                input(4, theta * self.heads, 1, pe),
                input(5, theta * self.kv_heads, 1, pe),
                input(6, theta * self.kv_heads, 1, pe),
            ],
            outputs: vec![stream(
                &format!("{name}/output_layer1"),
                1,
                self.vocab,
                2,
                QuantInfo { zp: 32768.0, scale: 1.0 / 1024.0, min: -32.0, max: 32.0 },
            )],
            unordered_outputs: vec![],
            caches: self.caches(name, rows),
            contexts: 2,
        }
    }

    /// Per layer a K and a V cache (ids 2l, 2l+1), each with a read window of KV − T entries and a
    /// write window of T, so every group's ring is kv_cache_size entries (cache_manager.cpp).
    fn caches(&self, group: &str, rows: u32) -> Vec<CacheLayer> {
        let entry = self.kv_heads * self.head_dim;
        let mut caches = Vec::new();
        for id in 0..self.layers * 2 {
            let kind = if id % 2 == 0 { "k" } else { "v" };
            for (is_input, window, side) in
                [(true, self.kv_cache_size - rows, "read"), (false, rows, "write")]
            {
                caches.push(CacheLayer {
                    name: format!("{group}/cache_{kind}{}_{side}", id / 2),
                    is_input,
                    cache_id: id,
                    shape: Shape3::new(1, window, entry),
                    padded: Shape3::new(1, window, entry),
                    order: FormatOrder::Nhwc,
                    data_bytes: 1,
                    quant: QuantInfo { zp: 128.0, scale: 0.05, min: -6.4, max: 6.35 },
                });
            }
        }
        caches
    }

    fn resources(&self) -> Vec<Resource> {
        let embeddings: Vec<u8> =
            (0..self.vocab * self.hidden).flat_map(|i| ((i * 7919) as u16).to_le_bytes()).collect();
        let theta: Vec<u8> = (0..self.head_dim)
            .flat_map(|i| {
                (10000f32.powf(-((i % (self.head_dim / 2).max(1)) as f32) * 2.0 / self.head_dim as f32))
                    .to_le_bytes()
            })
            .collect();
        vec![
            Resource::new("embeddings.bin", embeddings),
            Resource::new("tokenizer.json", self.tokenizer_json().into_bytes()),
            Resource::new("rope_theta_data.bin", theta),
            Resource::new(llm_config::RESOURCE, self.config_json().into_bytes()),
        ]
    }

    /// A tokenizer.json whose vocab (model.vocab plus added tokens) is exactly `vocab`.
    fn tokenizer_json(&self) -> String {
        let base = self.vocab.saturating_sub(2);
        let vocab: serde_json::Map<String, serde_json::Value> =
            (0..base).map(|i| (format!("t{i}"), json!(i))).collect();
        json!({
            "version": "1.0",
            "added_tokens": [
                {"id": base, "content": "<|endoftext|>", "special": true},
                {"id": base + 1, "content": "<|im_end|>", "special": true},
            ],
            "model": {"type": "BPE", "vocab": vocab, "merges": []},
        })
        .to_string()
    }

    fn config_json(&self) -> String {
        json!({
            "eos_token_id": self.vocab.saturating_sub(2),
            "stop_token_id": [self.vocab.saturating_sub(1)],
            "default_generation_params": {"do_sample": false, "temperature": 1.0, "repetition_penalty": 1.0},
            "pre_process_params": {
                "kv_cache_size": self.kv_cache_size,
                "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads,
                "prefill_input_tokens_count": self.prefill_tokens,
            },
        })
        .to_string()
    }
}

/// A [1, rows, features] NHWC stream with padding equal to the shape.
fn stream(name: &str, rows: u32, features: u32, data_bytes: u32, quant: QuantInfo) -> Stream {
    Stream {
        name: name.to_string(),
        shape: Shape3::new(1, rows, features),
        padded: Shape3::new(1, rows, features),
        order: FormatOrder::Nhwc,
        data_bytes,
        quant,
        quant_per_feature: vec![],
        transposed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_hef_round_trips_through_the_file_format() {
        let hef = LlmSpec::tiny().build();
        let bytes = hef.to_bytes();
        assert_eq!(Hef::from_bytes(&bytes, "synth.hef").unwrap(), hef);
    }

    #[test]
    fn synthetic_hef_selects_its_groups() {
        let spec = LlmSpec::tiny();
        let hef = spec.build();
        assert_eq!(hef.llm_groups().unwrap(), (spec.prefill_name(), Some(spec.tbt_name())));
    }
}
