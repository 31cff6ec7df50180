//! The one synthesizer of the LLM HEF layout HailoRT's genai server drives (hailort v5.2.0,
//! `hailort_server/genai/llm`): a `…prefill` and an optional `…tbt` network group, the six inputs
//! genai finds by suffix, the logits output (one, or a sharded lm_head), KV-cache layers shared
//! by id between the groups, and the four resources genai reads.
//!
//! The layout is decided here, from a few numbers ([`LlmSpec`]); what depends on a model comes
//! from the caller: the quant infos ([`LlmQuant`], a compiler's calibration) and the resource
//! contents ([`LlmResources`]). Unit tests, audits and the fuzzing seeds in `fuzz/seeds` use
//! [`LlmSpec::build`] with fixed ones; `synth-hef` (`device::synth_hef`) calibrates them on a
//! checkpoint, adds the simulator's own resource and writes the simulated device's HEF.
//!
//! Widths are what genai writes (pre_process.cpp), with T = prefill_input_tokens_count rows for
//! prefill and 1 for tbt: embeddings [1, T, hidden], mask [1, T, kv_cache_size × heads], RoPE Q
//! [1, T, L × heads] and K [1, T, L × kv_heads] with L = head_dim theta values. The hardware
//! types are in [`data_bytes`].

use serde_json::json;

use super::llm_config;
use super::model::{
    extension, CacheLayer, FormatOrder, Hef, NetworkGroup, QuantInfo, Resource, Shape3, Stream,
};
use crate::error::{Error, Result};

/// Bytes per element on the hardware (`data_bytes` of the edge layer; HailoRT takes the layer's
/// type from it, hef.cpp `get_cache_layer_info` / `fill_layer_info_with_base_info` →
/// `HailoRTCommon::get_format_type`: 1 → UINT8, 2 → UINT16).
pub mod data_bytes {
    /// genai accepts only UINT16 embeddings and copies `embeddings.bin` rows into the frame as
    /// they are (pre_process.cpp:87, :124-130).
    pub const EMBEDDINGS: u32 = 2;
    /// genai writes the mask byte by byte, "on" being 1.0 quantized to uint8 with the mask's
    /// quant info (llm_server.cpp:332, pre_process.cpp:133-174).
    pub const MASK: u32 = 1;
    /// The host sends float32 (genai sets FLOAT32 on every positional-embedding input,
    /// llm_server.cpp:211-214, :228-231) and the runtime quantizes it into this type with the
    /// layer's quant info, so the frame genai builds (L × heads float32 per row,
    /// pre_process.cpp:31) does not depend on it. HailoRT v5.2.0 does not fix it; 16 bits keep
    /// cos/sin within 1/32767 (an 8-bit layer over [-1, 1] would be 1/127 coarse).
    pub const ROPE: u32 = 2;
    /// Logits: genai reads every output as float32 (llm_server.cpp:216-218, :233-235); the
    /// runtime dequantizes from this type.
    pub const LOGITS: u32 = 2;
    /// KV-cache entries hold uint16 values. HailoRT sizes a ring entry from the layer's hardware
    /// features taken as bytes (cache_manager.cpp:221), so `padded.features` is
    /// `CACHE × kv_heads × head_dim`.
    pub const CACHE: u32 = 2;
}

/// Bytes of one cache ring entry as HailoRT pads it: the entry's bytes (the layer's
/// `padded.features`) rounded up to a power of two of at least 64 while ≤ 512, else to a multiple
/// of 512 (cache_manager.cpp:223-228 with `get_nearest_powerof_2(entry, 64)` and the default SG
/// page size 512, memory_requirements_calculator.cpp:28).
pub fn padded_entry_bytes(feature_bytes: usize) -> usize {
    if feature_bytes <= 512 {
        feature_bytes.next_power_of_two().max(64)
    } else {
        feature_bytes.div_ceil(512) * 512
    }
}

/// genai's six inputs, each found by its suffix (genai's defaults `input_layer1..6`,
/// pre_process.hpp:27-32, or a HEF's own map in hailo-config.json); the synthesizer names them
/// `<group>/input_layerN` with N from the map it writes ([`LlmSpec::inputs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmInput {
    Embeddings,
    Mask,
    QCos,
    QSin,
    KCos,
    KSin,
}

impl LlmInput {
    pub const ALL: [LlmInput; 6] = [
        LlmInput::Embeddings,
        LlmInput::Mask,
        LlmInput::QCos,
        LlmInput::QSin,
        LlmInput::KCos,
        LlmInput::KSin,
    ];

    /// The input's name in `group` under the map `suffixes`.
    pub fn name(self, group: &str, suffixes: &llm_config::InputSuffixes) -> String {
        format!("{group}/{}", self.suffix(suffixes))
    }

    /// The input's suffix under `suffixes` (its role's, [`LlmInput::ALL`] being in the roles' order).
    pub fn suffix(self, s: &llm_config::InputSuffixes) -> &str {
        s.roles()[self as usize].1
    }
}

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
    /// `prefill_input_tokens_count`: rows of a prefill frame.
    pub prefill_tokens: u32,
    /// `kv_cache_size`: entries of every cache ring.
    pub kv_cache_size: u32,
    /// false: no tbt group, every step re-runs prefill (genai's base scope).
    pub with_tbt: bool,
    /// A third, cache-less group named `<name>` whose one frame holds this many positions, re-run
    /// whole at every step (the exporter's base scope, `s6_compile_hef.py --include-base-scope`).
    pub base_scope: Option<u32>,
    /// Outputs the logits are split over, as the exporter splits them ([`shard_widths`]: a
    /// sharded lm_head, finding 12).
    pub lm_head_shards: u32,
    /// Which input is which: genai's default suffixes, or a map of the HEF's own (written into
    /// hailo-config.json `input_layers_names_suffixes` when it is not genai's).
    pub inputs: llm_config::InputSuffixes,
    /// Dynamic contexts per group. genai never looks; more than one exercises the reader.
    pub contexts: usize,
}

/// Quant infos of the layers: what a compiler's calibration would choose.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmQuant {
    pub embeddings: QuantInfo,
    pub mask: QuantInfo,
    /// All four RoPE inputs.
    pub rope: QuantInfo,
    /// Every logits output.
    pub logits: QuantInfo,
    /// Per layer: the key cache's and the value cache's.
    pub caches: Vec<(QuantInfo, QuantInfo)>,
}

impl LlmQuant {
    /// The mask: uint8 over [0, 1], so genai's "on" value quantize(1.0) is 255.
    pub const MASK: QuantInfo = QuantInfo { zp: 0.0, scale: 1.0 / 255.0, min: 0.0, max: 1.0 };

    /// RoPE: cos and sin lie in [-1, 1]; uint16 over it ([`data_bytes::ROPE`]).
    pub const ROPE: QuantInfo = QuantInfo { zp: 32767.0, scale: 1.0 / 32767.0, min: -1.0, max: 1.0 };

    /// Fixed uint16 ranges for tests and fuzzing seeds: [-8, 8) for embeddings and caches,
    /// [-32, 32) for logits (limvals end at the largest value 65535 stands for).
    pub fn fixed(layers: u32) -> Self {
        let pm8 = QuantInfo { zp: 32768.0, scale: 1.0 / 4096.0, min: -8.0, max: 32767.0 / 4096.0 };
        LlmQuant {
            embeddings: pm8,
            mask: Self::MASK,
            rope: Self::ROPE,
            logits: QuantInfo { zp: 32768.0, scale: 1.0 / 1024.0, min: -32.0, max: 32767.0 / 1024.0 },
            caches: vec![(pm8, pm8); layers as usize],
        }
    }
}

/// The contents of the resources that depend on the model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmResources {
    /// `embeddings.bin`: vocab rows of hidden values in the embeddings input's quantized domain.
    pub embeddings: Vec<u16>,
    /// `rope_theta_data.bin`: L = head_dim frequencies.
    pub theta: Vec<f32>,
    /// `tokenizer.json`.
    pub tokenizer: Vec<u8>,
    /// hailo-config.json `eos_token_id` (the one key genai requires) and `stop_token_id`
    /// (written only when not empty).
    pub eos_token_id: u32,
    pub stop_token_ids: Vec<u32>,
}

impl LlmResources {
    /// Patterned embeddings, standard RoPE frequencies, and a tokenizer whose vocabulary is
    /// exactly `vocab` (its last two ids are the eos and stop tokens).
    pub fn synthetic(spec: &LlmSpec) -> Self {
        let half = (spec.head_dim / 2).max(1);
        LlmResources {
            embeddings: (0..u64::from(spec.vocab) * u64::from(spec.hidden))
                .map(|i| (i as u32).wrapping_mul(7919) as u16)
                .collect(),
            theta: (0..spec.head_dim)
                .map(|i| 10000f32.powf(-((i % half) as f32) * 2.0 / spec.head_dim as f32))
                .collect(),
            tokenizer: tokenizer_json(spec.vocab).into_bytes(),
            eos_token_id: spec.vocab.saturating_sub(2),
            stop_token_ids: vec![spec.vocab.saturating_sub(1)],
        }
    }
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
            base_scope: None,
            lm_head_shards: 1,
            inputs: llm_config::InputSuffixes::genai(),
            contexts: 2,
        }
    }

    pub fn prefill_name(&self) -> String {
        format!("{}__prefill", self.name)
    }

    pub fn tbt_name(&self) -> String {
        format!("{}__tbt", self.name)
    }

    /// The HEF with fixed quant infos ([`LlmQuant::fixed`]) and synthetic resources
    /// ([`LlmResources::synthetic`]).
    pub fn build(&self) -> Result<Hef> {
        self.check()?;
        self.build_with(&LlmQuant::fixed(self.layers), &LlmResources::synthetic(self))
    }

    /// The HEF with the caller's quant infos and resources.
    pub fn build_with(&self, quant: &LlmQuant, res: &LlmResources) -> Result<Hef> {
        self.check()?;
        self.check_parts(quant, res)?;
        let mut groups = vec![self.group(&self.prefill_name(), self.prefill_tokens, quant)];
        if self.with_tbt {
            groups.push(self.group(&self.tbt_name(), 1, quant));
        }
        if let Some(frame) = self.base_scope {
            // The base-scope group is named the scope itself, no suffix (s6_compile_hef.py 064d2314).
            let mut g = self.group(&self.name, frame, quant);
            // Its mask covers its own frame (build_mask(SEQ, n, SEQ), runtime_inputs.py), and it
            // has no cache: each step re-runs the whole conversation.
            let mask = g.inputs.iter_mut().find(|s| s.name == LlmInput::Mask.name(&g.name, &self.inputs));
            let mask = mask.expect("every group has a mask input");
            mask.shape.features = frame * self.heads;
            mask.padded = mask.shape;
            g.caches.clear();
            groups.push(g);
        }
        let embeddings = res.embeddings.iter().flat_map(|x| x.to_le_bytes()).collect();
        let theta = res.theta.iter().flat_map(|x| x.to_le_bytes()).collect();
        Ok(Hef {
            version: 3,
            hw_arch: 103, // HAILO1XH: the Hailo-10H/15H family (device_internal.cpp:749-752)
            sdk_version: "hefprobe-synth".into(),
            groups,
            resources: vec![
                Resource::new("embeddings.bin", embeddings),
                Resource::new("tokenizer.json", res.tokenizer.clone()),
                Resource::new("rope_theta_data.bin", theta),
                Resource::new(llm_config::RESOURCE, self.config_json(res).into_bytes()),
            ],
            extensions: vec![
                extension::HAILO_NET_FLOW,
                extension::PERIPH_CALCULATION_IN_HAILORT,
                extension::EXTERNAL_RESOURCES,
            ],
        })
    }

    /// Numbers the layout cannot be built from, as usage errors naming the field.
    pub fn check(&self) -> Result<()> {
        if self.prefill_tokens == 0 || self.kv_cache_size <= self.prefill_tokens {
            return Err(Error::usage(format!(
                "kv_cache_size ({}) must exceed prefill_input_tokens_count ({}), which must be at least 1: \
                 a prefill group reads kv_cache_size − prefill_input_tokens_count cache entries",
                self.kv_cache_size, self.prefill_tokens
            )));
        }
        if let Some(f) =
            self.base_scope.filter(|&f| f == 0 || u64::from(f) * u64::from(self.heads) > u64::from(u32::MAX))
        {
            return Err(Error::usage(format!(
                "the base-scope frame of {f} positions: give at least 1, and no more than a 32-bit mask row holds"
            )));
        }
        if self.lm_head_shards == 0 || self.lm_head_shards > self.vocab {
            return Err(Error::usage(format!(
                "lm_head_shards {}: expected 1..={} (the vocabulary)",
                self.lm_head_shards, self.vocab
            )));
        }
        let (cache, heads, kv_heads) =
            (u64::from(data_bytes::CACHE), u64::from(self.heads), u64::from(self.kv_heads));
        let products = [
            ("mask width kv_cache_size × num_attention_heads", u64::from(self.kv_cache_size) * heads),
            ("Q RoPE width head_dim × num_attention_heads", u64::from(self.head_dim) * heads),
            (
                "cache entry bytes 2 × num_key_value_heads × head_dim",
                cache * kv_heads * u64::from(self.head_dim),
            ),
            ("embeddings.bin values vocab × hidden", u64::from(self.vocab) * u64::from(self.hidden)),
        ];
        for (what, n) in products {
            if n > u64::from(u32::MAX) {
                return Err(Error::usage(format!("{what} is {n}; a HEF shape holds 32-bit sizes")));
            }
        }
        Ok(())
    }

    /// The caller's quant infos and resources must fit the layout.
    fn check_parts(&self, quant: &LlmQuant, res: &LlmResources) -> Result<()> {
        let lengths = [
            ("cache quant infos (one pair per layer)", quant.caches.len(), self.layers as usize, "layers"),
            (
                "embeddings.bin values",
                res.embeddings.len(),
                (self.vocab * self.hidden) as usize,
                "vocab × hidden",
            ),
            ("rope_theta_data.bin values", res.theta.len(), self.head_dim as usize, "head_dim"),
        ];
        for (what, got, want, of) in lengths {
            if got != want {
                return Err(Error::usage(format!("{got} {what} given; the layout needs {want} ({of})")));
            }
        }
        Ok(())
    }

    /// One group with T token rows per frame.
    fn group(&self, name: &str, rows: u32, quant: &LlmQuant) -> NetworkGroup {
        let inputs = LlmInput::ALL
            .into_iter()
            .map(|input| {
                let (features, bytes, q) = match input {
                    LlmInput::Embeddings => (self.hidden, data_bytes::EMBEDDINGS, quant.embeddings),
                    LlmInput::Mask => (self.kv_cache_size * self.heads, data_bytes::MASK, quant.mask),
                    LlmInput::QCos | LlmInput::QSin => {
                        (self.head_dim * self.heads, data_bytes::ROPE, quant.rope)
                    }
                    LlmInput::KCos | LlmInput::KSin => {
                        (self.head_dim * self.kv_heads, data_bytes::ROPE, quant.rope)
                    }
                };
                stream(input.name(name, &self.inputs), rows, features, bytes, q)
            })
            .collect();
        // genai reads one [1, 1, vocab] row: the graph's output is the frame's last position.
        let outputs = shard_widths(self.vocab, self.lm_head_shards)
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                stream(format!("{name}/output_layer{}", i + 1), 1, w, data_bytes::LOGITS, quant.logits)
            })
            .collect();
        NetworkGroup {
            name: name.to_string(),
            inputs,
            outputs,
            unordered_outputs: vec![],
            caches: self.caches(name, rows, quant),
            contexts: self.contexts,
        }
    }

    /// Per layer a K and a V cache (ids 2l, 2l+1), each with a read window of KV − T entries and a
    /// write window of T, so every group's ring is kv_cache_size entries (cache_manager.cpp:237-268
    /// requires one length for all). Entries are kv_heads × head_dim values; the hardware width is
    /// their bytes ([`data_bytes::CACHE`]).
    fn caches(&self, group: &str, rows: u32, quant: &LlmQuant) -> Vec<CacheLayer> {
        let entry = self.kv_heads * self.head_dim;
        let mut caches = Vec::new();
        for (layer, &(k, v)) in quant.caches.iter().enumerate() {
            for (kind, id, q) in [("k", 2 * layer, k), ("v", 2 * layer + 1, v)] {
                for (is_input, window, side) in
                    [(true, self.kv_cache_size - rows, "read"), (false, rows, "write")]
                {
                    caches.push(CacheLayer {
                        name: format!("{group}/cache_{kind}{layer}_{side}"),
                        is_input,
                        cache_id: id as u32,
                        shape: Shape3::new(1, window, entry),
                        padded: Shape3::new(1, window, data_bytes::CACHE * entry),
                        order: FormatOrder::Nhwc,
                        data_bytes: data_bytes::CACHE,
                        quant: q,
                    });
                }
            }
        }
        caches
    }

    fn config_json(&self, res: &LlmResources) -> String {
        let mut root = serde_json::Map::new();
        root.insert("eos_token_id".into(), res.eos_token_id.into());
        if !res.stop_token_ids.is_empty() {
            root.insert("stop_token_id".into(), res.stop_token_ids.clone().into());
        }
        // Greedy, untempered, unpenalised: the settings comparisons need (genai applies the
        // repetition penalty even without sampling, post_process.cpp).
        root.insert(
            "default_generation_params".into(),
            json!({"do_sample": false, "temperature": 1.0, "repetition_penalty": 1.0}),
        );
        root.insert(
            "pre_process_params".into(),
            json!({
                "kv_cache_size": self.kv_cache_size,
                "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads,
                "prefill_input_tokens_count": self.prefill_tokens,
            }),
        );
        if self.inputs != llm_config::InputSuffixes::genai() {
            let map = serde_json::to_value(&self.inputs).expect("six strings serialize");
            root.insert("input_layers_names_suffixes".into(), map);
        }
        serde_json::to_string_pretty(&root).expect("a map of numbers serializes")
    }
}

/// Shard widths as the exporter splits a vocabulary of V into N (l-nmch/hailo-10h-llm-compiler
/// `s3_surgery_and_resources.py` `lm_head_split`, 0111deb6: boundaries
/// `np.linspace(0, V, N+1, dtype=int)`, i.e. ⌊i·V/N⌋, so narrower shards come first: 32005 in 2
/// is 16002 + 16003, 151936 in 5 is 4 × 30387 + 30388). The lm-head-shards fault splits alike.
/// numpy truncates i·(V/N) computed in float64; the integer floor here is the split it means
/// (the same on every vocabulary the exporter's pages name).
pub fn shard_widths(vocab: u32, n: u32) -> Vec<u32> {
    let n = u64::from(n.max(1).min(vocab.max(1)));
    let bound = |i: u64| (i * u64::from(vocab) / n) as u32;
    (0..n).map(|i| bound(i + 1) - bound(i)).collect()
}

/// A tokenizer.json whose vocab (model.vocab plus added tokens) is exactly `vocab`.
fn tokenizer_json(vocab: u32) -> String {
    let base = vocab.saturating_sub(2);
    let words: serde_json::Map<String, serde_json::Value> =
        (0..base).map(|i| (format!("t{i}"), json!(i))).collect();
    json!({
        "version": "1.0",
        "added_tokens": [
            {"id": base, "content": "<|endoftext|>", "special": true},
            {"id": base + 1, "content": "<|im_end|>", "special": true},
        ],
        "model": {"type": "BPE", "vocab": words, "merges": []},
    })
    .to_string()
}

/// A [1, rows, features] NHWC stream with padding equal to the shape.
pub fn stream(name: String, rows: u32, features: u32, data_bytes: u32, quant: QuantInfo) -> Stream {
    let shape = Shape3::new(1, rows, features);
    Stream {
        name,
        shape,
        padded: shape,
        order: FormatOrder::Nhwc,
        data_bytes,
        quant,
        quant_per_feature: vec![],
        transposed: false,
    }
}

#[cfg(test)]
#[path = "synth_tests.rs"]
mod tests;
