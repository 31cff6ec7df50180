//! `config.json` of a Hugging Face decoder checkpoint, read the way transformers 5 reads it.
//!
//! Supported `model_type`s: llama, mistral, qwen2, qwen3. Every key that changes the forward
//! pass is parsed; keys known not to change it are listed in [`IGNORED_KEYS`]; any other key
//! is an error naming it, because a key we do not understand may change the numerics
//! (finding 5 of the findings table was a key silently ignored). Where a numerics key is
//! missing, transformers' class default applies (as HF would) and is recorded in
//! [`ModelConfig::defaults_applied`] so reports can say so.

use crate::error::{closest, Error, Result};
use serde_json::{Map, Value};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
}

impl Arch {
    pub const ALL: [Arch; 4] = [Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3];

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Mistral => "mistral",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }

    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == s)
    }

    /// The HF class name written in `architectures`.
    pub fn hf_class(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Mistral => "MistralForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
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
    /// transformers `_compute_llama3_parameters`.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
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
}

/// Keys that do not change the float32 forward pass at inference (metadata, training,
/// generation, caching, dtype hints — weights are computed in f32 whatever their dtype).
pub const IGNORED_KEYS: &[&str] = &[
    "_name_or_path",
    "architectures",
    "attention_dropout",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "dtype",
    "torch_dtype",
    "transformers_version",
    "initializer_range",
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "is_decoder",
    "is_encoder_decoder",
    "tie_encoder_decoder",
    "chunk_size_feed_forward",
    "pretraining_tp",
    "model_type",
    "id2label",
    "label2id",
    "problem_type",
    "tokenizer_class",
    "max_length",
    "min_length",
    "do_sample",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "bad_words_ids",
    "cross_attention_hidden_size",
    "add_cross_attention",
    "prefix",
    "sep_token_id",
    "decoder_start_token_id",
    "task_specific_params",
    "finetuning_task",
    "num_beams",
    "_attn_implementation_autoset",
    "rope_interleave",
];

const NUMERIC_KEYS: &[&str] = &[
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "max_position_embeddings",
    "attention_bias",
    "mlp_bias",
    "tie_word_embeddings",
    "hidden_act",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "use_mrope",
];

struct Reader<'a> {
    file: String,
    obj: &'a Map<String, Value>,
    defaults: Vec<(String, String)>,
}

impl<'a> Reader<'a> {
    fn err(&self, key: &str, msg: impl std::fmt::Display) -> Error {
        Error::input(format!("{} key `{key}`", self.file), msg.to_string())
    }

    fn present(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn usize_req(&self, key: &str) -> Result<usize> {
        match self.present(key) {
            None => Err(self.err(key, "missing; a checkpoint config must give it")),
            Some(v) => self.as_usize(key, v),
        }
    }

    fn as_usize(&self, key: &str, v: &Value) -> Result<usize> {
        v.as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| self.err(key, format!("expected a non-negative integer, found {v}")))
    }

    fn usize_or(&mut self, key: &str, default: usize) -> Result<usize> {
        match self.present(key) {
            Some(v) => self.as_usize(key, v),
            None => {
                self.defaults.push((key.into(), default.to_string()));
                Ok(default)
            }
        }
    }

    fn f64_or(&mut self, key: &str, default: f64) -> Result<f64> {
        match self.present(key) {
            Some(v) => v.as_f64().ok_or_else(|| self.err(key, format!("expected a number, found {v}"))),
            None => {
                self.defaults.push((key.into(), format!("{default:e}")));
                Ok(default)
            }
        }
    }

    fn bool_or(&mut self, key: &str, default: bool) -> Result<bool> {
        match self.present(key) {
            Some(v) => v.as_bool().ok_or_else(|| self.err(key, format!("expected true or false, found {v}"))),
            None => {
                self.defaults.push((key.into(), default.to_string()));
                Ok(default)
            }
        }
    }
}

/// transformers 5 class defaults, per model type (configuration_*.py `__init__` signatures).
struct ArchDefaults {
    rms_norm_eps: f64,
    rope_theta: f64,
    tie_word_embeddings: bool,
    max_position_embeddings: usize,
    /// Qwen3Config defaults `head_dim` to 128; the others derive hidden/heads.
    head_dim: Option<usize>,
    /// MistralConfig defaults `sliding_window` to 4096; Qwen2/3 use it only with
    /// `use_sliding_window` (default false).
    sliding_window: Option<usize>,
    max_window_layers: usize,
}

fn arch_defaults(arch: Arch) -> ArchDefaults {
    match arch {
        Arch::Llama => ArchDefaults {
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            tie_word_embeddings: false,
            max_position_embeddings: 2048,
            head_dim: None,
            sliding_window: None,
            max_window_layers: 0,
        },
        Arch::Mistral => ArchDefaults {
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            tie_word_embeddings: false,
            max_position_embeddings: 4096 * 32,
            head_dim: None,
            sliding_window: Some(4096),
            max_window_layers: 0,
        },
        Arch::Qwen2 => ArchDefaults {
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            tie_word_embeddings: false,
            max_position_embeddings: 32768,
            head_dim: None,
            sliding_window: Some(4096),
            max_window_layers: 28,
        },
        Arch::Qwen3 => ArchDefaults {
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            tie_word_embeddings: false,
            max_position_embeddings: 32768,
            head_dim: Some(128),
            sliding_window: Some(4096),
            max_window_layers: 28,
        },
    }
}

impl ModelConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = crate::error::read_text(path)?;
        Self::from_json_str(&text, &path.display().to_string())
    }

    /// `file` names the source in error messages.
    pub fn from_json_str(text: &str, file: &str) -> Result<Self> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| Error::input(file, format!("not valid JSON: {e}")))?;
        let obj =
            value.as_object().ok_or_else(|| Error::input(file, "expected a JSON object at the top level"))?;
        Self::from_map(obj, file)
    }

    pub fn from_map(obj: &Map<String, Value>, file: &str) -> Result<Self> {
        let mut r = Reader { file: file.to_string(), obj, defaults: Vec::new() };
        for key in obj.keys() {
            if !IGNORED_KEYS.contains(&key.as_str()) && !NUMERIC_KEYS.contains(&key.as_str()) {
                let hint = closest(key, IGNORED_KEYS.iter().chain(NUMERIC_KEYS).copied())
                    .map(|k| format!(" (did you mean `{k}`?)"))
                    .unwrap_or_default();
                return Err(r.err(
                    key,
                    format!(
                        "unknown key{hint}; hefprobe cannot tell whether it changes the forward \
                         pass, so it refuses to guess. Supported keys: {}",
                        NUMERIC_KEYS.join(", ")
                    ),
                ));
            }
        }
        let model_type = match r.present("model_type") {
            None => return Err(r.err("model_type", "missing; expected one of llama, mistral, qwen2, qwen3")),
            Some(v) => v.as_str().unwrap_or_default().to_string(),
        };
        let arch = Arch::parse(&model_type).ok_or_else(|| {
            r.err(
                "model_type",
                format!("`{model_type}` is not supported; expected one of llama, mistral, qwen2, qwen3"),
            )
        })?;
        let d = arch_defaults(arch);

        if let Some(act) = r.present("hidden_act") {
            if act.as_str() != Some("silu") {
                return Err(r.err("hidden_act", format!("{act} is not supported; only \"silu\" is")));
            }
        }
        if let Some(v) = r.present("use_mrope") {
            if v.as_bool() != Some(false) {
                return Err(r.err("use_mrope", "multimodal RoPE is not supported; only false is"));
            }
        }

        let hidden_size = r.usize_req("hidden_size")?;
        let intermediate_size = r.usize_req("intermediate_size")?;
        let num_layers = r.usize_req("num_hidden_layers")?;
        let num_heads = r.usize_req("num_attention_heads")?;
        let vocab_size = r.usize_req("vocab_size")?;
        // MistralConfig defaults num_key_value_heads to 8; the others to num_attention_heads.
        let kv_default = if arch == Arch::Mistral { 8 } else { num_heads };
        let num_kv_heads = r.usize_or("num_key_value_heads", kv_default)?;
        let head_dim = match d.head_dim {
            Some(hd) => r.usize_or("head_dim", hd)?,
            None => match r.present("head_dim") {
                Some(v) => r.as_usize("head_dim", v)?,
                None if num_heads > 0 => hidden_size / num_heads,
                None => 0,
            },
        };
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
                return Err(r.err(key, "must be at least 1"));
            }
        }
        if num_heads % num_kv_heads != 0 {
            return Err(r.err(
                "num_key_value_heads",
                format!("{num_kv_heads} does not divide num_attention_heads = {num_heads}"),
            ));
        }
        if head_dim % 2 != 0 {
            return Err(
                r.err("head_dim", format!("{head_dim} is odd; rotate-half RoPE needs an even head_dim"))
            );
        }

        let rms_norm_eps = r.f64_or("rms_norm_eps", d.rms_norm_eps)?;
        let max_position_embeddings = r.usize_or("max_position_embeddings", d.max_position_embeddings)?;
        let rope = read_rope(&mut r, d.rope_theta, head_dim, max_position_embeddings)?;
        let tie_word_embeddings = r.bool_or("tie_word_embeddings", d.tie_word_embeddings)?;

        // Projection biases: modeling_llama uses attention_bias for q/k/v/o and mlp_bias for
        // the MLP; modeling_qwen2 hard-codes bias=True on q/k/v and False on o_proj;
        // modeling_qwen3 uses attention_bias for q/k/v/o; modeling_mistral has no biases.
        let (qkv_bias, o_bias, mlp_bias) = match arch {
            Arch::Llama => {
                let a = r.bool_or("attention_bias", false)?;
                (a, a, r.bool_or("mlp_bias", false)?)
            }
            Arch::Qwen3 => {
                let a = r.bool_or("attention_bias", false)?;
                (a, a, false)
            }
            Arch::Qwen2 => (true, false, false),
            Arch::Mistral => (false, false, false),
        };
        if !matches!(arch, Arch::Llama) {
            if let Some(v) = r.present("mlp_bias") {
                if v.as_bool() == Some(true) {
                    return Err(r.err("mlp_bias", format!("{} has no MLP bias in transformers", arch.name())));
                }
            }
        }
        if matches!(arch, Arch::Qwen2 | Arch::Mistral) {
            if let Some(v) = r.present("attention_bias") {
                let expected = arch == Arch::Qwen2;
                if v.as_bool() != Some(expected) && v.as_bool().is_some() {
                    return Err(r.err(
                        "attention_bias",
                        format!(
                            "{} ignores this key in transformers (its biases are fixed); found {v}",
                            arch.name()
                        ),
                    ));
                }
            }
        }

        let sliding_window = read_sliding_window(&mut r, arch, &d, num_layers)?;
        let token_id = |key: &str| -> Option<u32> {
            match obj.get(key) {
                Some(Value::Number(n)) => n.as_u64().map(|n| n as u32),
                Some(Value::Array(a)) => a.first().and_then(|v| v.as_u64()).map(|n| n as u32),
                _ => None,
            }
        };
        let bos_token_id = token_id("bos_token_id");
        let eos_token_id = token_id("eos_token_id");

        Ok(ModelConfig {
            arch,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size,
            rms_norm_eps,
            rope,
            max_position_embeddings,
            qkv_bias,
            o_bias,
            mlp_bias,
            qk_norm: arch == Arch::Qwen3,
            tie_word_embeddings,
            sliding_window,
            bos_token_id,
            eos_token_id,
            defaults_applied: r.defaults,
        })
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
        let mut rope = Map::new();
        rope.insert("rope_theta".into(), self.rope.theta.into());
        match &self.rope.scaling {
            RopeScaling::Default => {
                rope.insert("rope_type".into(), "default".into());
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                rope.insert("rope_type".into(), "llama3".into());
                rope.insert("factor".into(), (*factor).into());
                rope.insert("low_freq_factor".into(), (*low_freq_factor).into());
                rope.insert("high_freq_factor".into(), (*high_freq_factor).into());
                rope.insert(
                    "original_max_position_embeddings".into(),
                    (*original_max_position_embeddings).into(),
                );
            }
        }
        m.insert("rope_parameters".into(), Value::Object(rope));
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

fn read_rope(
    r: &mut Reader,
    default_theta: f64,
    head_dim: usize,
    max_positions: usize,
) -> Result<RopeConfig> {
    // transformers 5 writes `rope_parameters` {rope_theta, rope_type, ...}; transformers 4
    // wrote top-level `rope_theta` and `rope_scaling` {rope_type|type, ...}. Both are read;
    // if both give a theta they must agree.
    let params = r.present("rope_parameters");
    let legacy_scaling = r.present("rope_scaling");
    let top_theta = match r.present("rope_theta") {
        Some(v) => {
            Some(v.as_f64().ok_or_else(|| r.err("rope_theta", format!("expected a number, found {v}")))?)
        }
        None => None,
    };
    let (key, scaling_obj) = match (params, legacy_scaling) {
        (Some(p), None) => ("rope_parameters", Some(p)),
        (None, Some(s)) => ("rope_scaling", Some(s)),
        (None, None) => ("rope_parameters", None),
        (Some(_), Some(_)) => {
            return Err(r.err(
                "rope_scaling",
                "both `rope_parameters` and `rope_scaling` are present; keep one (transformers 5 writes rope_parameters)",
            ))
        }
    };
    let obj = match scaling_obj {
        None => None,
        Some(Value::Object(o)) => Some(o),
        Some(v) => return Err(r.err(key, format!("expected an object, found {v}"))),
    };
    let param_theta = match obj.and_then(|o| o.get("rope_theta")) {
        Some(v) => {
            Some(v.as_f64().ok_or_else(|| r.err(key, format!("rope_theta: expected a number, found {v}")))?)
        }
        None => None,
    };
    let theta = match (top_theta, param_theta) {
        (Some(a), Some(b)) if a != b => {
            return Err(r.err(key, format!("rope_theta {b} disagrees with top-level rope_theta {a}")))
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => {
            r.defaults.push(("rope_theta".into(), format!("{default_theta}")));
            default_theta
        }
    };
    if theta <= 0.0 {
        return Err(r.err("rope_theta", format!("{theta} must be positive")));
    }
    let rope_type = obj
        .and_then(|o| o.get("rope_type").or_else(|| o.get("type")))
        .and_then(|v| v.as_str())
        .unwrap_or("default");
    let num = |name: &str| -> Result<f64> {
        obj.and_then(|o| o.get(name))
            .and_then(|v| v.as_f64())
            .ok_or_else(|| r.err(key, format!("rope_type {rope_type} needs a numeric `{name}`")))
    };
    let scaling = match rope_type {
        "default" => RopeScaling::Default,
        "llama3" => RopeScaling::Llama3 {
            factor: num("factor")?,
            low_freq_factor: num("low_freq_factor")?,
            high_freq_factor: num("high_freq_factor")?,
            // transformers fills a missing original_max_position_embeddings with
            // max_position_embeddings (RotaryEmbeddingConfigMixin).
            original_max_position_embeddings: match obj
                .and_then(|o| o.get("original_max_position_embeddings"))
            {
                Some(_) => num("original_max_position_embeddings")? as usize,
                None => max_positions,
            },
        },
        other => {
            return Err(
                r.err(key, format!("rope_type `{other}` is not supported; supported: default, llama3"))
            )
        }
    };
    if let Some(o) = obj {
        if let Some(f) = o.get("partial_rotary_factor").and_then(|v| v.as_f64()) {
            if f != 1.0 {
                return Err(r.err(
                    key,
                    format!("partial_rotary_factor {f} is not supported (head_dim {head_dim} fully rotated)"),
                ));
            }
        }
    }
    Ok(RopeConfig { theta, scaling })
}

fn read_sliding_window(
    r: &mut Reader,
    arch: Arch,
    d: &ArchDefaults,
    num_layers: usize,
) -> Result<Vec<Option<usize>>> {
    let window = match r.obj.get("sliding_window") {
        Some(Value::Null) => None,
        Some(v) => Some(r.as_usize("sliding_window", v)?),
        None => d.sliding_window,
    };
    if window == Some(0) {
        return Err(r.err("sliding_window", "0 would hide every key; use null for no window"));
    }
    match arch {
        Arch::Llama => {
            if window.is_some() {
                return Err(r.err("sliding_window", "llama has no sliding-window attention in transformers"));
            }
            Ok(vec![None; num_layers])
        }
        // modeling_mistral: every layer uses config.sliding_window (null = full attention).
        Arch::Mistral => {
            if !r.obj.contains_key("sliding_window") {
                r.defaults.push(("sliding_window".into(), format!("{window:?}")));
            }
            Ok(vec![window; num_layers])
        }
        // configuration_qwen2/3: sliding_window applies only with use_sliding_window; the
        // layers that slide are given by layer_types, which defaults to "sliding_attention"
        // for layer indices >= max_window_layers.
        Arch::Qwen2 | Arch::Qwen3 => {
            let use_sw = match r.present("use_sliding_window") {
                Some(v) => v.as_bool().ok_or_else(|| {
                    r.err("use_sliding_window", format!("expected true or false, found {v}"))
                })?,
                None => false,
            };
            let window = if use_sw { window } else { None };
            let types: Vec<bool> = match r.present("layer_types") {
                Some(Value::Array(a)) => {
                    if a.len() != num_layers {
                        return Err(r.err(
                            "layer_types",
                            format!("has {} entries, num_hidden_layers is {num_layers}", a.len()),
                        ));
                    }
                    a.iter()
                        .map(|t| match t.as_str() {
                            Some("sliding_attention") => Ok(true),
                            Some("full_attention") => Ok(false),
                            _ => Err(r.err(
                                "layer_types",
                                format!("{t} is not \"full_attention\" or \"sliding_attention\""),
                            )),
                        })
                        .collect::<Result<_>>()?
                }
                Some(v) => return Err(r.err("layer_types", format!("expected a list, found {v}"))),
                None => {
                    let mwl = match r.present("max_window_layers") {
                        Some(v) => r.as_usize("max_window_layers", v)?,
                        None => d.max_window_layers,
                    };
                    (0..num_layers).map(|i| i >= mwl).collect()
                }
            };
            Ok(types.into_iter().map(|s| if s { window } else { None }).collect())
        }
    }
}

#[cfg(test)]
mod tests {
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
        let e = cfg(r#","rope_parameters":{"rope_theta":1.0,"rope_type":"yarn","factor":2.0}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rope_type `yarn` is not supported"), "{e}");
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
            "num_hidden_layers":3,"num_attention_heads":4,"vocab_size":256,
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
}
