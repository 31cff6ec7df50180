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

mod keys;
mod rope;
mod size;
#[cfg(test)]
mod tests;
mod window;

use crate::error::{Error, Result};
use keys::{Dflt, Read, Unknown};
use serde_json::{Map, Value};
use std::path::Path;

crate::named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Arch {
        Llama = "llama",
        Mistral = "mistral",
        Qwen2 = "qwen2",
        Qwen3 = "qwen3",
    }
}

impl Arch {
    /// The HF class name written in `architectures`.
    pub fn hf_class(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Mistral => "MistralForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
        }
    }

    /// The transformers configuration class that reads config.json.
    pub fn hf_config_class(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaConfig",
            Arch::Mistral => "MistralConfig",
            Arch::Qwen2 => "Qwen2Config",
            Arch::Qwen3 => "Qwen3Config",
        }
    }
}

/// Rotary embedding as configured (`rope_parameters` in transformers 5, `rope_theta` +
/// `rope_scaling` before).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RopeConfig {
    pub theta: f64,
    pub scaling: RopeScaling,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "rope_type", rename_all = "lowercase")]
pub enum RopeScaling {
    Default,
    /// transformers `_compute_linear_scaling_rope_parameters`: every frequency divided by `factor`.
    Linear {
        factor: f64,
    },
    /// transformers `_compute_llama3_parameters`.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
    /// transformers `_compute_yarn_parameters`, with the optional keys as written (`None` =
    /// absent; the defaults are applied where HF applies them, in `model::rope`).
    Yarn {
        factor: f64,
        original_max_position_embeddings: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        attention_factor: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        beta_fast: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        beta_slow: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mscale: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mscale_all_dim: Option<f64>,
        /// Written only when false.
        #[serde(skip_serializing_if = "is_true")]
        truncate: bool,
    },
}

fn is_true(b: &bool) -> bool {
    *b
}

/// A config.json key hefprobe does not know and accepted because its name gives no hint that
/// it changes the forward pass: transformers keeps such a key as an attribute nobody reads.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct UnknownKey {
    pub key: String,
    /// The value as JSON, shortened to 60 characters.
    pub value: String,
    /// Who writes it, or why it is harmless.
    pub note: String,
}

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

/// What the weight files hold, to bound the dimensions config.json claims before anything is
/// sized by them (a 2 KB config.json saying `num_hidden_layers: 1000000000` must not abort).
#[derive(Debug, Clone)]
pub struct WeightBudget {
    /// Total bytes of the weight files.
    pub bytes: u64,
    /// Names them in messages ("the weight files", "model.gguf").
    pub what: String,
}

struct Reader<'a> {
    file: String,
    obj: &'a Map<String, Value>,
    arch: Arch,
    defaults: Vec<(String, String)>,
    /// `num_attention_heads` and `hidden_size`, for the defaults derived from them.
    heads: usize,
    hidden: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, key: &str, msg: impl std::fmt::Display) -> Error {
        Error::input(format!("{} key `{key}`", self.file), msg.to_string())
    }

    fn present(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn as_usize(&self, key: &str, v: &Value) -> Result<usize> {
        v.as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.err(key, format!("expected a non-negative integer, found {v}")))
    }

    fn read(&self, key: &str) -> Read {
        keys::row(key, self.arch).map(|k| k.read).expect("every key read by name has a row for every arch")
    }

    /// A required positive dimension.
    fn dim(&self, key: &str) -> Result<usize> {
        debug_assert!(matches!(self.read(key), Read::Dim));
        match self.present(key) {
            None => Err(self.err(key, "missing; a checkpoint config must give it")),
            Some(v) => self.as_usize(key, v),
        }
    }

    fn resolve(&self, d: Dflt) -> usize {
        match d {
            Dflt::Int(n) => n,
            Dflt::Heads => self.heads,
            Dflt::HiddenOverHeads => self.hidden.checked_div(self.heads).unwrap_or(0),
        }
    }

    fn int(&mut self, key: &str) -> Result<usize> {
        let Read::Int { default, noted, null } = self.read(key) else {
            unreachable!("{key} is not an Int row")
        };
        match self.obj.get(key) {
            Some(Value::Null) if null.is_some() => Ok(self.resolve(null.expect("checked"))),
            Some(v) if !v.is_null() => self.as_usize(key, v),
            _ => {
                let n = self.resolve(default);
                if noted {
                    self.defaults.push((key.into(), n.to_string()));
                }
                Ok(n)
            }
        }
    }

    fn float(&mut self, key: &str) -> Result<f64> {
        let Read::Float { default } = self.read(key) else { unreachable!("{key} is not a Float row") };
        match self.present(key) {
            Some(v) => v.as_f64().ok_or_else(|| self.err(key, format!("expected a number, found {v}"))),
            None => {
                self.defaults.push((key.into(), format!("{default:e}")));
                Ok(default)
            }
        }
    }

    fn flag(&mut self, key: &str) -> Result<bool> {
        let Read::Flag { default, noted } = self.read(key) else { unreachable!("{key} is not a Flag row") };
        match self.present(key) {
            Some(v) => v.as_bool().ok_or_else(|| self.err(key, format!("expected true or false, found {v}"))),
            None => {
                if noted {
                    self.defaults.push((key.into(), default.to_string()));
                }
                Ok(default)
            }
        }
    }

    /// The dimensions, each at least 1 and consistent with the others.
    fn dims(&mut self) -> Result<size::Dims> {
        let hidden_size = self.dim("hidden_size")?;
        let intermediate_size = self.dim("intermediate_size")?;
        let num_layers = self.dim("num_hidden_layers")?;
        let num_heads = self.dim("num_attention_heads")?;
        let vocab_size = self.dim("vocab_size")?;
        (self.heads, self.hidden) = (num_heads, hidden_size);
        let num_kv_heads = self.int("num_key_value_heads")?;
        let head_dim = self.int("head_dim")?;
        for (key, v) in [
            ("hidden_size", hidden_size),
            ("intermediate_size", intermediate_size),
            ("num_hidden_layers", num_layers),
            ("num_attention_heads", num_heads),
            ("num_key_value_heads", num_kv_heads),
            ("head_dim", head_dim),
            ("vocab_size", vocab_size),
        ] {
            if v == 0 {
                return Err(self.err(key, "must be at least 1"));
            }
        }
        if num_heads % num_kv_heads != 0 {
            return Err(self.err(
                "num_key_value_heads",
                format!("{num_kv_heads} does not divide num_attention_heads = {num_heads}"),
            ));
        }
        if head_dim % 2 != 0 {
            return Err(
                self.err("head_dim", format!("{head_dim} is odd; rotate-half RoPE needs an even head_dim"))
            );
        }
        Ok(size::Dims {
            hidden: hidden_size,
            intermediate: intermediate_size,
            layers: num_layers,
            heads: num_heads,
            kv_heads: num_kv_heads,
            head_dim,
            vocab: vocab_size,
            tied: self.flag("tie_word_embeddings")?,
        })
    }

    /// Projection biases (qkv, o, mlp), as the table's attention_bias/mlp_bias rows say.
    fn biases(&mut self) -> Result<(bool, bool, bool)> {
        Ok(match self.arch {
            Arch::Llama => {
                let a = self.flag("attention_bias")?;
                (a, a, self.flag("mlp_bias")?)
            }
            Arch::Qwen3 => {
                let a = self.flag("attention_bias")?;
                (a, a, false)
            }
            Arch::Qwen2 => (true, false, false),
            Arch::Mistral => (false, false, false),
        })
    }

    /// Every key of the file against the table: refusals and unknown keys.
    fn check_keys(&self) -> Result<Vec<UnknownKey>> {
        let mut unknown = Vec::new();
        for (name, value) in self.obj {
            let note = match keys::row(name, self.arch).map(|k| k.read) {
                Some(Read::Only { ok, msg }) => {
                    if !value.is_null() && !ok(value) {
                        let msg = msg.replace("{v}", &short(value)).replace("{arch}", self.arch.name());
                        return Err(self.err(name, msg));
                    }
                    continue;
                }
                Some(Read::Foreign(note)) => note.to_string(),
                Some(_) => continue,
                None => match keys::classify_unknown(name, self.arch) {
                    Unknown::Report(note) => note,
                    Unknown::Refuse(msg) => return Err(self.err(name, msg)),
                },
            };
            unknown.push(UnknownKey { key: name.clone(), value: short(value), note });
        }
        Ok(unknown)
    }
}

/// A JSON value for a message, at most 60 characters.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() <= 60 {
        s
    } else {
        format!("{}…", s.chars().take(59).collect::<String>())
    }
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

    pub fn num_params(&self) -> usize {
        let (h, i, q, kv) = (
            self.hidden_size,
            self.intermediate_size,
            self.num_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
        );
        let per_layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h;
        let lm = if self.tie_word_embeddings { 0 } else { self.vocab_size * h };
        self.vocab_size * h + self.num_layers * per_layer + h + lm
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
