//! Every config.json key hefprobe knows, as a table: how it is read, the default transformers
//! 5.23 applies when it is absent (with the class field that says so), and which architectures
//! the row is for. A key may have one row per group of architectures (`attention_bias` is read
//! on llama and qwen3, fixed on qwen2 and mistral).
//!
//! Keys not in the table are judged by their name ([`classify_unknown`]): one that hints at the
//! forward pass (`rope`, `norm`, `window`, ...) or is a near miss of a forward-pass key is
//! refused, because guessing would change the numbers silently; any other is accepted and
//! reported, since transformers stores it as a plain attribute that its modeling code never reads.

use super::arch::Arch;
use crate::tap::{closest, suggest};
use serde_json::Value;

/// A set of architectures, one bit each.
#[derive(Clone, Copy)]
pub(super) struct Arches(u8);

pub(super) const LLAMA: Arches = Arches(1);
pub(super) const MISTRAL: Arches = Arches(2);
pub(super) const QWEN2: Arches = Arches(4);
pub(super) const QWEN3: Arches = Arches(8);
pub(super) const ALL: Arches = Arches(15);

impl Arches {
    const fn or(self, other: Arches) -> Arches {
        Arches(self.0 | other.0)
    }

    fn has(self, arch: Arch) -> bool {
        let bit = match arch {
            Arch::Llama => LLAMA,
            Arch::Mistral => MISTRAL,
            Arch::Qwen2 => QWEN2,
            Arch::Qwen3 => QWEN3,
        };
        self.0 & bit.0 != 0
    }
}

/// The value transformers uses when the key is absent.
#[derive(Clone, Copy, Debug)]
pub(super) enum Dflt {
    Int(usize),
    /// `num_attention_heads` (LlamaConfig.__post_init__ fills `None` with it).
    Heads,
    /// `hidden_size // num_attention_heads`, derived rather than defaulted, so not reported.
    HiddenOverHeads,
}

/// How a key is read.
#[derive(Clone, Copy)]
pub(super) enum Read {
    /// A required positive integer (HF's class defaults are a 7B model's; a checkpoint gives them).
    Dim,
    /// A non-negative integer, `default` when absent; `noted` puts an absent key in
    /// `defaults_applied`. `null` is what an explicit `null` means (HF `None`), if not absent's.
    Int {
        default: Dflt,
        noted: bool,
        null: Option<Dflt>,
    },
    Float {
        default: f64,
    },
    /// true/false; `noted` as for `Int`.
    Flag {
        default: bool,
        noted: bool,
    },
    /// Read by its own function in config.rs (model_type, RoPE, sliding window).
    Special,
    /// A token id or a list of them (the first is used); metadata for the inputs.
    TokenId,
    /// Must hold a value that leaves the forward pass as hefprobe computes it. `msg` is the
    /// error; `{v}` is replaced by the value, `{arch}` by the model type.
    Only {
        ok: fn(&Value) -> bool,
        msg: &'static str,
    },
    /// Known not to change the float32 forward pass (metadata, training, generation, dtype
    /// hints — weights are computed in f32 whatever their stored dtype): accepted silently.
    Ignored,
    /// Not a transformers field for this architecture: transformers keeps it as an attribute
    /// nobody reads. Accepted and reported as an unknown key, with this note.
    Foreign(&'static str),
}

pub(super) struct Key {
    pub name: &'static str,
    pub arches: Arches,
    pub read: Read,
    /// Where the behaviour comes from (transformers 5.23 unless said otherwise).
    #[allow(dead_code)]
    pub source: &'static str,
}

const fn key(name: &'static str, arches: Arches, read: Read, source: &'static str) -> Key {
    Key { name, arches, read, source }
}

const fn int(default: Dflt, noted: bool) -> Read {
    Read::Int { default, noted, null: None }
}

const fn flag(default: bool, noted: bool) -> Read {
    Read::Flag { default, noted }
}

fn is_silu(v: &Value) -> bool {
    v.as_str() == Some("silu")
}
fn is_false(v: &Value) -> bool {
    v.as_bool() == Some(false)
}
fn not_true(v: &Value) -> bool {
    v.as_bool() != Some(true)
}
fn true_or_not_bool(v: &Value) -> bool {
    v.as_bool() != Some(false)
}
fn is_null(v: &Value) -> bool {
    v.is_null()
}
fn is_one(v: &Value) -> bool {
    v.is_null() || v.as_f64() == Some(1.0)
}

const DENSE_QWEN: Arches = QWEN2.or(QWEN3);
const NOT_LLAMA: Arches = MISTRAL.or(QWEN2).or(QWEN3);
const LLAMA_MISTRAL: Arches = LLAMA.or(MISTRAL);

/// Every key hefprobe knows. Sources are transformers 5.23 `models/*/configuration_*.py`
/// (field defaults) and `modeling_*.py` (what reads them) unless said otherwise.
pub(super) const KEYS: &[Key] = &[
    // --- shapes
    key("model_type", ALL, Read::Special, "PreTrainedConfig.model_type; picks the class"),
    key("hidden_size", ALL, Read::Dim, "every *Config field"),
    key("intermediate_size", ALL, Read::Dim, "every *Config field"),
    key("num_hidden_layers", ALL, Read::Dim, "every *Config field"),
    key("num_attention_heads", ALL, Read::Dim, "every *Config field"),
    key("vocab_size", ALL, Read::Dim, "every *Config field"),
    key(
        "num_key_value_heads",
        LLAMA,
        Read::Int { default: Dflt::Heads, noted: true, null: Some(Dflt::Heads) },
        "LlamaConfig: None; __post_init__ sets num_attention_heads",
    ),
    key(
        "num_key_value_heads",
        MISTRAL,
        Read::Int { default: Dflt::Int(8), noted: true, null: Some(Dflt::Heads) },
        "MistralConfig: 8; None → num_attention_heads in __post_init__",
    ),
    key(
        "num_key_value_heads",
        DENSE_QWEN,
        Read::Int { default: Dflt::Int(32), noted: true, null: Some(Dflt::Heads) },
        "Qwen2Config/Qwen3Config: 32; None → num_attention_heads in __post_init__",
    ),
    key(
        "head_dim",
        LLAMA_MISTRAL,
        int(Dflt::HiddenOverHeads, false),
        "LlamaConfig/MistralConfig: None → hidden_size // num_attention_heads (__post_init__)",
    ),
    key(
        "head_dim",
        QWEN2,
        int(Dflt::HiddenOverHeads, false),
        "no Qwen2Config field; Qwen2Attention: getattr(config, 'head_dim', hidden // heads)",
    ),
    key(
        "head_dim",
        QWEN3,
        Read::Int { default: Dflt::Int(128), noted: true, null: Some(Dflt::HiddenOverHeads) },
        "Qwen3Config: 128; Qwen3Attention: `getattr(config, 'head_dim', None) or hidden // heads`",
    ),
    // --- numerics
    key("rms_norm_eps", ALL, Read::Float { default: 1e-6 }, "every *Config: 1e-6"),
    key("max_position_embeddings", LLAMA, int(Dflt::Int(2048), true), "LlamaConfig: 2048"),
    key("max_position_embeddings", MISTRAL, int(Dflt::Int(4096 * 32), true), "MistralConfig: 4096 * 32"),
    key("max_position_embeddings", DENSE_QWEN, int(Dflt::Int(32768), true), "Qwen2Config/Qwen3Config: 32768"),
    key("tie_word_embeddings", ALL, flag(false, true), "every *Config: False"),
    key(
        "hidden_act",
        ALL,
        Read::Only { ok: is_silu, msg: "{v} is not supported; only \"silu\" is" },
        "every *Config: \"silu\" (ACT2FN in the MLP)",
    ),
    // --- biases: modeling_llama uses attention_bias for q/k/v/o and mlp_bias for the MLP;
    // modeling_qwen2 hard-codes bias=True on q/k/v and False on o_proj; modeling_qwen3 uses
    // attention_bias for q/k/v/o; modeling_mistral has no biases.
    key("attention_bias", LLAMA.or(QWEN3), flag(false, true), "LlamaConfig/Qwen3Config: False"),
    key(
        "attention_bias",
        QWEN2,
        Read::Only {
            ok: true_or_not_bool,
            msg: "{arch} ignores this key in transformers (its biases are fixed); found {v}",
        },
        "no Qwen2Config field; Qwen2Attention: q/k/v bias=True, o_proj bias=False",
    ),
    key(
        "attention_bias",
        MISTRAL,
        Read::Only {
            ok: not_true,
            msg: "{arch} ignores this key in transformers (its biases are fixed); found {v}",
        },
        "no MistralConfig field; MistralAttention: bias=False",
    ),
    key("mlp_bias", LLAMA, flag(false, true), "LlamaConfig: False"),
    key(
        "mlp_bias",
        NOT_LLAMA,
        Read::Only { ok: not_true, msg: "{arch} has no MLP bias in transformers" },
        "no field; their MLPs are bias=False",
    ),
    // --- rotary embedding (config/rope.rs)
    key("rope_theta", ALL, Read::Special, "RotaryEmbeddingConfigMixin.default_theta = 10000.0"),
    key("rope_parameters", ALL, Read::Special, "transformers 5 form: {rope_type, rope_theta, ...}"),
    key("rope_scaling", ALL, Read::Special, "transformers 4 form; convert_rope_params_to_dict moves it"),
    key(
        "original_max_position_embeddings",
        ALL,
        Read::Special,
        "standardize_rope_params: a top-level value wins for llama3/yarn (the Phi3 exception)",
    ),
    key(
        "partial_rotary_factor",
        ALL,
        Read::Only {
            ok: is_one,
            msg: "{v} is not supported; hefprobe rotates the whole head (only 1 is), as every \
                  supported architecture does",
        },
        "convert_rope_params_to_dict moves it into rope_parameters",
    ),
    key(
        "use_mrope",
        ALL,
        Read::Only { ok: is_false, msg: "multimodal RoPE is not supported; only false is" },
        "Qwen2-VL style; not a text-model field",
    ),
    key(
        "mrope_section",
        ALL,
        Read::Only { ok: is_null, msg: "{v}: multimodal RoPE (mrope) is not supported" },
        "Qwen2-VL's rope_scaling; rotates sections of the head by separate position ids",
    ),
    // --- attention window (read_sliding_window)
    key("sliding_window", ALL, Read::Special, "MistralConfig/Qwen2Config/Qwen3Config: 4096; none on llama"),
    key("use_sliding_window", DENSE_QWEN, flag(false, false), "Qwen2Config/Qwen3Config: False"),
    key("use_sliding_window", LLAMA_MISTRAL, Read::Ignored, "not a field; never read"),
    key("max_window_layers", DENSE_QWEN, int(Dflt::Int(28), false), "Qwen2Config/Qwen3Config: 28"),
    key("max_window_layers", LLAMA_MISTRAL, Read::Ignored, "not a field; never read"),
    key("layer_types", DENSE_QWEN, Read::Special, "Qwen2Config/Qwen3Config __post_init__ fills it"),
    key(
        "layer_types",
        LLAMA_MISTRAL,
        Read::Foreign(
            "transformers does not read `layer_types` for llama or mistral (MistralConfig warns \
             and ignores it): every layer attends as the other keys say",
        ),
        "no field (MistralConfig.__post_init__ warns)",
    ),
    // --- refused: each changes the forward pass in a way hefprobe does not implement
    key(
        "quantization_config",
        ALL,
        Read::Only {
            ok: is_null,
            msg: "{v}: quantized checkpoints are not supported; hefprobe reads float weights \
                  (f32, f16, bf16) — dequantize and save_pretrained first, or give the GGUF file",
        },
        "PreTrainedModel.from_pretrained hands it to a quantizer",
    ),
    key(
        "final_logit_softcapping",
        ALL,
        Read::Only { ok: is_null, msg: "{v}: logit softcapping is not supported; only null is" },
        "Gemma2-style tanh capping of the logits",
    ),
    key(
        "attn_logit_softcapping",
        ALL,
        Read::Only { ok: is_null, msg: "{v}: attention-score softcapping is not supported; only null is" },
        "Gemma2-style tanh capping of the scores",
    ),
    // --- token ids (read as the first id of a list)
    key("bos_token_id", ALL, Read::TokenId, "generation metadata; reported with the inputs"),
    key("eos_token_id", ALL, Read::TokenId, "generation metadata; reported with the inputs"),
    // --- known not to change the f32 forward pass
    key("pad_token_id", ALL, Read::Ignored, "padding id; no padding in a probe"),
    key("_name_or_path", ALL, Read::Ignored, "PreTrainedConfig metadata"),
    key("architectures", ALL, Read::Ignored, "the model class name; model_type picks the class"),
    key("attention_dropout", ALL, Read::Ignored, "dropout; off at inference (eval mode)"),
    key("dtype", ALL, Read::Ignored, "storage dtype hint; the reference computes in f32"),
    key("torch_dtype", ALL, Read::Ignored, "transformers 4 name of dtype (PreTrainedConfig pops it)"),
    key("transformers_version", ALL, Read::Ignored, "metadata"),
    key("initializer_range", ALL, Read::Ignored, "init std; used only by _init_weights"),
    key("use_cache", ALL, Read::Ignored, "KV cache on/off; same numbers (probes control caching)"),
    key(
        "pretraining_tp",
        ALL,
        Read::Ignored,
        "LlamaConfig field (default 1) that modeling_llama 5.23 never reads; transformers 4 split \
         the projections into that many slices, the same sums in another order",
    ),
    key("output_attentions", ALL, Read::Ignored, "output selection"),
    key("output_hidden_states", ALL, Read::Ignored, "output selection"),
    key("return_dict", ALL, Read::Ignored, "output container"),
    key("is_decoder", ALL, Read::Ignored, "encoder-decoder plumbing"),
    key("is_encoder_decoder", ALL, Read::Ignored, "encoder-decoder plumbing"),
    key("tie_encoder_decoder", ALL, Read::Ignored, "encoder-decoder plumbing"),
    key("cross_attention_hidden_size", ALL, Read::Ignored, "encoder-decoder plumbing"),
    key("add_cross_attention", ALL, Read::Ignored, "encoder-decoder plumbing"),
    key("decoder_start_token_id", ALL, Read::Ignored, "encoder-decoder plumbing"),
    key("chunk_size_feed_forward", ALL, Read::Ignored, "chunking; same numbers"),
    key("id2label", ALL, Read::Ignored, "classification heads"),
    key("label2id", ALL, Read::Ignored, "classification heads"),
    key("problem_type", ALL, Read::Ignored, "classification heads"),
    key("finetuning_task", ALL, Read::Ignored, "metadata"),
    key("task_specific_params", ALL, Read::Ignored, "metadata"),
    key("prefix", ALL, Read::Ignored, "metadata"),
    key("tokenizer_class", ALL, Read::Ignored, "tokenizer metadata"),
    key("sep_token_id", ALL, Read::Ignored, "tokenizer metadata"),
    // Generation parameters: PreTrainedConfig.__post_init__ pops every
    // GenerationConfig._get_default_generation_params() key from a config.
    key("max_length", ALL, Read::Ignored, "generation parameter"),
    key("min_length", ALL, Read::Ignored, "generation parameter"),
    key("do_sample", ALL, Read::Ignored, "generation parameter"),
    key("temperature", ALL, Read::Ignored, "generation parameter"),
    key("top_p", ALL, Read::Ignored, "generation parameter"),
    key("top_k", ALL, Read::Ignored, "generation parameter"),
    key("repetition_penalty", ALL, Read::Ignored, "generation parameter"),
    key("bad_words_ids", ALL, Read::Ignored, "generation parameter"),
    key("num_beams", ALL, Read::Ignored, "generation parameter"),
    key("_attn_implementation_autoset", ALL, Read::Ignored, "attention kernel choice; same math"),
    // --- written by other tools; transformers keeps them as attributes nobody reads
    key(
        "rope_interleaved",
        ALL,
        Read::Foreign(
            "nanotron's flag (SmolLM2 publishes false); transformers has no such field and always \
             rotates halves (rotate_half), as hefprobe does",
        ),
        "no field in any of the four configs",
    ),
    key(
        "rope_interleave",
        ALL,
        Read::Foreign(
            "DeepseekV3Config's flag; these architectures have no such field and transformers \
             always rotates halves (rotate_half), as hefprobe does",
        ),
        "no field in any of the four configs",
    ),
    key("is_llama_config", ALL, Read::Foreign("nanotron's marker for its LlamaConfig"), "nanotron"),
    key(
        "auto_map",
        ALL,
        Read::Foreign(
            "names custom modeling code, which transformers runs only with trust_remote_code=True; \
             hefprobe runs the built-in model_type, as transformers does without it",
        ),
        "AutoConfig/AutoModel with trust_remote_code",
    ),
];

/// Name fragments that say a key is about the forward pass. A key segment (split at `_`)
/// starting with one of them makes an unknown key a refusal rather than a report.
const HINTS: &str = "rope rotary theta scal quant softcap logit act norm eps window sliding attention attn \
                     bias head hidden layer position embed vocab intermediate mlp ffn expert moe partial mrope \
                     alibi dim kv qk";

/// The table row for `name` on `arch`.
pub(super) fn row(name: &str, arch: Arch) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name && k.arches.has(arch))
}

/// The hint fragment in `name`, if any.
fn hint(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    lower.split(['_', '-', '.']).find_map(|seg| HINTS.split(' ').find(|h| seg.starts_with(h)))
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

/// What to do with a key that has no row.
pub(super) enum Unknown {
    /// Accept and report, with this note.
    Report(String),
    /// Refuse; the message names what is supported.
    Refuse(String),
}

/// Judge a key the table does not know, for `arch`'s transformers class `class`.
pub(super) fn classify_unknown(name: &str, arch: Arch) -> Unknown {
    let forward: Vec<&str> = KEYS
        .iter()
        .filter(|k| k.arches.has(arch) && !matches!(k.read, Read::Ignored | Read::Foreign(_) | Read::TokenId))
        .map(|k| k.name)
        .collect();
    let near_forward = closest(name, forward.iter().copied());
    let did_you_mean = suggest(name, KEYS.iter().filter(|k| k.arches.has(arch)).map(|k| k.name));
    if hint(name).is_some() || near_forward.is_some() {
        let why = match hint(name) {
            Some(h) => format!("its name mentions `{h}`, so it may change the forward pass"),
            None => "it is a near miss of a key that changes the forward pass".to_string(),
        };
        return Unknown::Refuse(format!(
            "unknown key{did_you_mean}; {why}, and hefprobe cannot tell whether it does, so it \
             refuses to guess. Supported keys: {}",
            forward.join(", ")
        ));
    }
    Unknown::Report(format!(
        "not a {} field: transformers keeps it as an attribute its modeling code never reads{did_you_mean}",
        arch.hf_config_class()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_exactly_one_row_per_architecture() {
        let mut names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        names.dedup();
        for name in names {
            for arch in Arch::ALL {
                let n = KEYS.iter().filter(|k| k.name == name && k.arches.has(arch)).count();
                assert_eq!(n, 1, "`{name}` has {n} rows for {}", arch.name());
            }
        }
    }

    #[test]
    fn hints_split_at_segments() {
        assert_eq!(hint("rms_norm_epsilon"), Some("norm"));
        assert_eq!(hint("rope_scaling_factor"), Some("rope"));
        assert_eq!(hint("hidden_activation"), Some("hidden"));
        assert_eq!(hint("unsloth_version"), None);
        assert_eq!(hint("_model_name_or_path"), None);
        assert_eq!(hint("unk_token_id"), None);
        assert_eq!(hint("auto_map"), None);
        // `factor` does not start with `act`.
        assert_eq!(hint("some_factor"), None);
    }

    #[test]
    fn unknown_keys_are_reported_or_refused_by_name() {
        assert!(matches!(classify_unknown("unsloth_version", Arch::Llama), Unknown::Report(_)));
        assert!(matches!(classify_unknown("_model_name_or_path", Arch::Qwen2), Unknown::Report(_)));
        assert!(matches!(classify_unknown("eos_token_ids", Arch::Qwen2), Unknown::Report(_)));
        assert!(matches!(classify_unknown("qk_layernorm", Arch::Llama), Unknown::Refuse(_)));
        // A near miss of a forward-pass key without a hint word is still refused.
        match classify_unknown("model_typ", Arch::Llama) {
            Unknown::Refuse(m) => assert!(m.contains("did you mean `model_type`"), "{m}"),
            Unknown::Report(m) => panic!("accepted: {m}"),
        }
        // A near miss of a harmless key is reported with the hint.
        match classify_unknown("transformer_version", Arch::Llama) {
            Unknown::Report(m) => assert!(m.contains("did you mean `transformers_version`"), "{m}"),
            Unknown::Refuse(m) => panic!("refused: {m}"),
        }
    }
}
