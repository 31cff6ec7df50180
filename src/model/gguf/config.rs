//! The model config from GGUF metadata, as transformers 5.23 builds it: `general.architecture`
//! is the `model_type`, `{arch}.KEY` maps onto config.json keys by `GGUF_CONFIG_MAPPING`
//! (`integrations/ggml.py`), the tokenizer's special ids become `bos/eos/pad_token_id`, tying is
//! "no `output.weight` tensor", and a missing `{arch}.vocab_size` is the length of
//! `tokenizer.ggml.tokens` (`modeling_gguf_pytorch_utils.load_gguf_checkpoint`). The config.json
//! map built here then goes through [`ModelConfig::from_map`], so the class defaults (and their
//! reporting) are the same as for a folder.
//!
//! transformers silently drops every other `{arch}.*` key. Those that change the forward pass
//! (RoPE scaling, sliding windows, softcapping, experts) are refused here, naming the key: HF
//! would run a different model from the one llama.cpp runs, and hefprobe will not pick one
//! silently (finding 5). Keys it cannot classify are refused too, for the same reason.

use super::file::GgufFile;
use crate::error::{Error, Result};
use crate::model::config::{Arch, ModelConfig};
use serde_json::{Map, Value};

/// What a `{arch}.SUFFIX` key does.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// transformers reads it into this config.json key.
    Mapped(&'static str),
    /// llama only: `rope.dimension_count` is read as `head_dim`; qwen2/qwen3 ignore it, and it
    /// must then equal the head_dim HF derives (a smaller one would be partial rotary).
    RopeDims,
    /// Not read by transformers; must equal the head_dim HF derives, or HF's model would not
    /// have the file's shapes.
    HeadDim,
    /// Changes the forward pass and transformers ignores it; allowed only at its neutral value.
    Refused { neutral: Neutral, why: &'static str },
    /// Does not change the float32 forward pass.
    Harmless,
}

#[derive(Debug, Clone, Copy)]
enum Neutral {
    Never,
    Zero,
    One,
    NoneString,
}

/// `{arch}.*` keys llama.cpp's converter writes for these architectures (gguf-py
/// `constants.Keys.LLM/Attention/Rope`), with what each does. Source of the mapped names:
/// transformers 5.23 `integrations/ggml.py` `GGUF_CONFIG_MAPPING["llama"|"qwen2"|"qwen3"]`.
const KEYS: &[(&str, Rule)] = &[
    ("context_length", Rule::Mapped("max_position_embeddings")),
    ("block_count", Rule::Mapped("num_hidden_layers")),
    ("feed_forward_length", Rule::Mapped("intermediate_size")),
    ("embedding_length", Rule::Mapped("hidden_size")),
    ("rope.freq_base", Rule::Mapped("rope_theta")),
    ("attention.head_count", Rule::Mapped("num_attention_heads")),
    ("attention.head_count_kv", Rule::Mapped("num_key_value_heads")),
    ("attention.layer_norm_rms_epsilon", Rule::Mapped("rms_norm_eps")),
    ("vocab_size", Rule::Mapped("vocab_size")),
    ("rope.dimension_count", Rule::RopeDims),
    ("attention.key_length", Rule::HeadDim),
    ("attention.value_length", Rule::HeadDim),
    ("rope.scaling.type", Rule::Refused { neutral: Neutral::NoneString, why: "RoPE scaling" }),
    (
        "rope.scaling.factor",
        Rule::Refused {
            neutral: Neutral::One,
            why: "RoPE scaling (llama.cpp applies linear scaling for a factor without a type)",
        },
    ),
    ("rope.scaling.attn_factor", Rule::Refused { neutral: Neutral::One, why: "YaRN attention scaling" }),
    ("rope.scaling.original_context_length", Rule::Harmless),
    ("rope.scaling.finetuned", Rule::Harmless),
    ("attention.sliding_window", Rule::Refused { neutral: Neutral::Never, why: "sliding-window attention" }),
    ("attn_logit_softcapping", Rule::Refused { neutral: Neutral::Zero, why: "attention logit softcapping" }),
    ("final_logit_softcapping", Rule::Refused { neutral: Neutral::Zero, why: "final logit softcapping" }),
    ("attention.scale", Rule::Refused { neutral: Neutral::Never, why: "a custom attention scale" }),
    ("logit_scale", Rule::Refused { neutral: Neutral::One, why: "logit scaling" }),
    ("residual_scale", Rule::Refused { neutral: Neutral::One, why: "residual scaling" }),
    ("embedding_scale", Rule::Refused { neutral: Neutral::One, why: "embedding scaling" }),
    ("expert_count", Rule::Refused { neutral: Neutral::Zero, why: "mixture of experts" }),
    ("expert_used_count", Rule::Refused { neutral: Neutral::Zero, why: "mixture of experts" }),
    // Embedding-model pooling: not used by a causal LM's logits.
    ("pooling_type", Rule::Harmless),
];

fn neutral(v: &Value, n: Neutral) -> bool {
    match n {
        Neutral::Never => false,
        Neutral::Zero => v.as_f64() == Some(0.0),
        // llama.cpp writes factor 0 for "unset" as well as 1.
        Neutral::One => matches!(v.as_f64(), Some(x) if x == 1.0 || x == 0.0),
        Neutral::NoneString => v.as_str() == Some("none"),
    }
}

/// A metadata value as JSON (scalars only; arrays are not config values here).
fn json(file: &GgufFile, key: &str) -> Result<Value> {
    use candle_core::quantized::gguf_file::Value as G;
    Ok(match file.get(key) {
        Some(G::F32(_) | G::F64(_)) => file.float(key)?.map(Value::from).unwrap_or(Value::Null),
        Some(G::Bool(b)) => Value::Bool(*b),
        Some(G::String(s)) => Value::String(s.clone()),
        Some(G::Array(_)) => {
            return Err(Error::input(file.what(key), "expected a single value, found an array"))
        }
        Some(_) => file.uint(key)?.map(Value::from).unwrap_or(Value::Null),
        None => Value::Null,
    })
}

/// The normalized config of a GGUF file: the config.json map transformers would build, read
/// by [`ModelConfig::from_map`].
pub fn from_metadata(file: &GgufFile) -> Result<ModelConfig> {
    let (arch_name, arch) = architecture(file)?;
    let mut m = Map::new();
    m.insert("model_type".into(), arch.name().into());
    let checks = map_arch_keys(file, (&arch_name, arch), &mut m)?;
    for (gguf_key, to) in [
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id"),
        ("tokenizer.ggml.padding_token_id", "pad_token_id"),
    ] {
        if let Some(id) = file.uint(gguf_key)? {
            m.insert(to.into(), id.into());
        }
    }
    let names = file.tensor_names();
    m.insert("tie_word_embeddings".into(), (!names.contains(&"output.weight")).into());
    if !m.contains_key("vocab_size") {
        if let Some(tokens) = file.strings("tokenizer.ggml.tokens")? {
            m.insert("vocab_size".into(), tokens.len().into());
        }
    }
    for (gguf, hf) in [
        ("embedding_length", "hidden_size"),
        ("block_count", "num_hidden_layers"),
        ("feed_forward_length", "intermediate_size"),
        ("attention.head_count", "num_attention_heads"),
        ("vocab_size", "vocab_size"),
    ] {
        if !m.contains_key(hf) {
            let hint = if hf == "vocab_size" { " (nor tokenizer.ggml.tokens to count)" } else { "" };
            return Err(Error::input(
                file.what(&format!("{arch_name}.{gguf}")),
                format!("missing{hint}; a GGUF model must give it"),
            ));
        }
    }
    // Checked after the defaults: transformers' head_dim is the config's, not these keys'.
    let cfg = ModelConfig::from_map(&m, &format!("{} metadata", file.path.display()))?;
    for (key, v, what) in checks {
        if v as usize != cfg.head_dim {
            return Err(Error::input(
                file.what(&key),
                format!(
                    "{v} {what}, but the {} config transformers builds from this file has head_dim {} \
                     (it does not read this key); the file and HF's model would disagree",
                    arch.name(),
                    cfg.head_dim
                ),
            ));
        }
    }
    Ok(cfg)
}

/// `general.architecture` and the config class transformers picks for it; a part of a split
/// file is refused.
fn architecture(file: &GgufFile) -> Result<(String, Arch)> {
    let arch_name = file
        .string("general.architecture")?
        .ok_or_else(|| {
            Error::input(file.what("general.architecture"), "missing; every GGUF names its architecture")
        })?
        .to_string();
    // The architectures read here (`general.architecture`): llama, qwen2 and qwen3, each the config
    // class transformers picks; a Mistral file is a llama one (below).
    let mut arch = Arch::from_name(&arch_name).filter(|&a| a != Arch::Mistral).ok_or_else(|| {
        Error::input(
            file.what("general.architecture"),
            format!("`{arch_name}` is not supported; hefprobe reads llama, qwen2 and qwen3 GGUF files"),
        )
    })?;
    // load_gguf_checkpoint tests `"mistral" in model_name` where model_name is a one-element
    // list, so only a `general.name` of exactly "mistral" makes a llama file a Mistral config.
    if arch == Arch::Llama && file.string("general.name")? == Some("mistral") {
        arch = Arch::Mistral;
    }
    if let Some(n) = file.uint("split.count")?.filter(|&n| n > 1) {
        return Err(Error::input(
            file.what("split.count"),
            format!(
                "this is one part of a {n}-part split GGUF; merge the parts first (llama-gguf-split --merge)"
            ),
        ));
    }
    Ok((arch_name, arch))
}

/// Every `{arch}.*` key by its [`Rule`]: the mapped ones into `m`, a refused one at another
/// value than its neutral one an error. Returns the keys that must equal the head_dim HF
/// derives (key, value, what it is), checked once the config is built.
fn map_arch_keys(
    file: &GgufFile,
    (arch_name, arch): (&str, Arch),
    m: &mut Map<String, Value>,
) -> Result<Vec<(String, u64, &'static str)>> {
    let prefix = format!("{arch_name}.");
    let mut checks = Vec::new();
    let mut keys: Vec<&String> = file.content.metadata.keys().filter(|k| k.starts_with(&prefix)).collect();
    keys.sort();
    for key in keys {
        let suffix = &key[prefix.len()..];
        let rule = KEYS.iter().find(|(k, _)| *k == suffix).map(|(_, r)| *r).ok_or_else(|| {
            Error::input(
                file.what(key),
                "hefprobe does not know whether this key changes the forward pass, and transformers \
                 ignores it, so it refuses to guess",
            )
        })?;
        match rule {
            Rule::Mapped(to) => {
                m.insert(to.into(), json(file, key)?);
            }
            Rule::RopeDims if matches!(arch, Arch::Llama | Arch::Mistral) => {
                m.insert("head_dim".into(), json(file, key)?);
            }
            Rule::RopeDims => checks.push((key.clone(), file.uint(key)?.unwrap_or(0), "rotary dimensions")),
            Rule::HeadDim => checks.push((key.clone(), file.uint(key)?.unwrap_or(0), "head dimension")),
            Rule::Refused { neutral: n, why } => {
                let v = json(file, key)?;
                if !neutral(&v, n) {
                    return Err(Error::input(
                        file.what(key),
                        format!(
                            "{v} asks for {why}, which transformers' GGUF loader ignores (its model would \
                             differ from llama.cpp's) and hefprobe does not implement for GGUF files; \
                             load the original HF checkpoint folder instead"
                        ),
                    ));
                }
            }
            Rule::Harmless => {}
        }
    }
    Ok(checks)
}
