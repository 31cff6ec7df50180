//! `config.json` of a Hugging Face decoder checkpoint, read the way transformers 5.23 reads it.
//!
//! Supported `model_type`s: llama, mistral, qwen2, qwen3. What hefprobe knows about each key —
//! how it is read, the class default transformers applies when it is absent, which
//! architectures it is for — is the table in [`keys`]. From it:
//! - a key that changes the forward pass is parsed; where it is missing, transformers' class
//!   default applies (as HF would) and is recorded in [`ModelConfig::defaults_applied`];
//! - a value hefprobe does not implement (a `quantization_config`, a RoPE type other than
//!   default/linear/llama3/yarn, softcapping, another activation, mrope) is an error naming
//!   the key, the value and what is supported;
//! - a key the table does not know is refused if its name hints at the forward pass (finding 5
//!   of the findings table was a key silently ignored), and otherwise accepted and listed in
//!   [`ModelConfig::unknown_keys`], which every report shows (`--strict-config` refuses them).
//!
//! Every dimension is bounded before anything is sized by it: the parameters the config
//! implies cannot take more bytes than the weight files hold ([`WeightBudget`]).

mod arch;
mod keys;
mod reader;
mod rope;
mod size;
#[cfg(test)]
mod tests;
mod window;

pub use arch::Arch;
pub use keys::UnknownKey;
pub use rope::{RopeConfig, RopeScaling};
pub use size::WeightBudget;

use crate::error::{Error, Result};
use reader::Reader;
use serde_json::{Map, Value};
use std::path::Path;

/// The normalized configuration the decoder runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelConfig {
    pub arch: Arch,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: f64,
    pub rope: RopeConfig,
    pub max_position_embeddings: usize,
    /// Bias on q/k/v projections (Qwen2 always; llama/qwen3 with `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on o_proj (llama/qwen3 with `attention_bias`; never on qwen2).
    pub o_bias: bool,
    pub mlp_bias: bool,
    /// Qwen3's per-head RMSNorm on queries and keys, before RoPE.
    pub qk_norm: bool,
    pub tie_word_embeddings: bool,
    /// Per layer: `Some(w)` when the layer attends to the last `w` keys including itself.
    pub sliding_window: Vec<Option<usize>>,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    /// Numerics keys missing from config.json, with the HF class default that was applied.
    pub defaults_applied: Vec<(String, String)>,
    /// Keys hefprobe does not know, accepted (see [`UnknownKey`]).
    pub unknown_keys: Vec<UnknownKey>,
}

/// A special token id: a number, or the first of a list (transformers keeps several eos ids).
fn token_id(obj: &Map<String, Value>, key: &str) -> Option<u32> {
    match obj.get(key) {
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Some(Value::Array(a)) => a.first().and_then(|v| v.as_u64()).and_then(|n| u32::try_from(n).ok()),
        _ => None,
    }
}

impl ModelConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = crate::files::read_text(path, crate::files::Kind::Config)?;
        Self::from_json_str(&text, &path.display().to_string())
    }

    /// `file` names the source in error messages.
    pub fn from_json_str(text: &str, file: &str) -> Result<Self> {
        Self::from_json_str_within(text, file, None)
    }

    /// As [`Self::from_json_str`], with the dimensions bounded by what the weights hold.
    pub fn from_json_str_within(text: &str, file: &str, budget: Option<&WeightBudget>) -> Result<Self> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| Error::input(file, format!("not valid JSON: {e}")))?;
        let obj =
            value.as_object().ok_or_else(|| Error::input(file, "expected a JSON object at the top level"))?;
        Self::from_map_within(obj, file, budget)
    }

    pub fn from_map(obj: &Map<String, Value>, file: &str) -> Result<Self> {
        Self::from_map_within(obj, file, None)
    }

    pub fn from_map_within(
        obj: &Map<String, Value>,
        file: &str,
        budget: Option<&WeightBudget>,
    ) -> Result<Self> {
        let arch = read_arch(obj, file)?;
        let mut r = Reader { file: file.to_string(), obj, arch, defaults: Vec::new(), heads: 0, hidden: 0 };
        let unknown_keys = r.check_keys()?;

        let dims = r.dims()?;
        size::check_size(&r, &dims, budget)?;

        let rms_norm_eps = r.float("rms_norm_eps")?;
        let max_position_embeddings = r.int("max_position_embeddings")?;
        let default_theta = 10000.0; // RotaryEmbeddingConfigMixin.default_theta
        let rope = rope::read_rope(&mut r, default_theta, dims.head_dim, max_position_embeddings)?;
        let (qkv_bias, o_bias, mlp_bias) = r.biases()?;
        let sliding_window = window::read_sliding_window(&mut r, arch, dims.layers)?;

        Ok(ModelConfig {
            arch,
            hidden_size: dims.hidden,
            intermediate_size: dims.intermediate,
            num_layers: dims.layers,
            num_heads: dims.heads,
            num_kv_heads: dims.kv_heads,
            head_dim: dims.head_dim,
            vocab_size: dims.vocab,
            rms_norm_eps,
            rope,
            max_position_embeddings,
            qkv_bias,
            o_bias,
            mlp_bias,
            qk_norm: arch == Arch::Qwen3,
            tie_word_embeddings: dims.tied,
            sliding_window,
            bos_token_id: token_id(obj, "bos_token_id"),
            eos_token_id: token_id(obj, "eos_token_id"),
            defaults_applied: r.defaults,
            unknown_keys,
        })
    }

    /// `--strict-config` / a probe's `strict_config = true`: unknown keys are an error.
    pub fn refuse_unknown_keys(&self, file: &str) -> Result<()> {
        if self.unknown_keys.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = self.unknown_keys.iter().map(|k| format!("`{}`", k.key)).collect();
        Err(Error::input(
            file,
            format!(
                "strict config: {} unknown key{} ({}); hefprobe would accept and report {} \
                 without --strict-config (strict_config = true in a probe)",
                keys.len(),
                if keys.len() == 1 { "" } else { "s" },
                keys.join(", "),
                if keys.len() == 1 { "it" } else { "them" },
            ),
        ))
    }

    /// The config.json transformers 5 would write for this configuration.
    pub fn to_hf_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("architectures".into(), serde_json::json!([self.arch.hf_class()]));
        m.insert("model_type".into(), self.arch.name().into());
        m.insert("hidden_size".into(), self.hidden_size.into());
        m.insert("intermediate_size".into(), self.intermediate_size.into());
        m.insert("num_hidden_layers".into(), self.num_layers.into());
        m.insert("num_attention_heads".into(), self.num_heads.into());
        m.insert("num_key_value_heads".into(), self.num_kv_heads.into());
        m.insert("head_dim".into(), self.head_dim.into());
        m.insert("vocab_size".into(), self.vocab_size.into());
        m.insert("hidden_act".into(), "silu".into());
        m.insert("rms_norm_eps".into(), self.rms_norm_eps.into());
        m.insert("max_position_embeddings".into(), self.max_position_embeddings.into());
        m.insert("tie_word_embeddings".into(), self.tie_word_embeddings.into());
        m.insert("rope_parameters".into(), rope::to_hf_json(&self.rope));
        match self.arch {
            Arch::Llama => {
                m.insert("attention_bias".into(), self.qkv_bias.into());
                m.insert("mlp_bias".into(), self.mlp_bias.into());
            }
            Arch::Qwen3 => {
                m.insert("attention_bias".into(), self.qkv_bias.into());
            }
            _ => {}
        }
        match self.arch {
            Arch::Llama => {}
            Arch::Mistral => {
                m.insert("sliding_window".into(), self.sliding_window.first().copied().flatten().into());
            }
            Arch::Qwen2 | Arch::Qwen3 => {
                let window = self.sliding_window.iter().flatten().next().copied();
                m.insert("use_sliding_window".into(), window.is_some().into());
                m.insert("sliding_window".into(), window.into());
                let types: Vec<Value> = self
                    .sliding_window
                    .iter()
                    .map(|w| if w.is_some() { "sliding_attention" } else { "full_attention" }.into())
                    .collect();
                let first_sliding = self.sliding_window.iter().position(|w| w.is_some());
                m.insert("max_window_layers".into(), first_sliding.unwrap_or(self.num_layers).into());
                m.insert("layer_types".into(), Value::Array(types));
            }
        }
        if let Some(b) = self.bos_token_id {
            m.insert("bos_token_id".into(), b.into());
        }
        if let Some(e) = self.eos_token_id {
            m.insert("eos_token_id".into(), e.into());
        }
        m.insert("dtype".into(), "float32".into());
        Value::Object(m)
    }
}

/// `model_type`, which picks the class (and so the table rows) for everything else.
fn read_arch(obj: &Map<String, Value>, file: &str) -> Result<Arch> {
    let err = |msg: String| Error::input(format!("{file} key `model_type`"), msg);
    let model_type = match obj.get("model_type").filter(|v| !v.is_null()) {
        None => return Err(err("missing; expected one of llama, mistral, qwen2, qwen3".into())),
        Some(v) => v.as_str().unwrap_or_default().to_string(),
    };
    Arch::from_name(&model_type).ok_or_else(|| {
        err(format!("`{model_type}` is not supported; expected one of llama, mistral, qwen2, qwen3"))
    })
}
