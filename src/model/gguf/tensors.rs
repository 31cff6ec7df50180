//! GGUF tensors as HF checkpoint tensors: llama.cpp's names mapped to transformers' (gguf-py
//! `tensor_mapping`, which transformers' `get_gguf_hf_weights_map` inverts), every tensor
//! dequantized to float32, and the Q/K row permutation of llama files undone.
//!
//! llama.cpp's converter (`convert_hf_to_gguf.py` `LlamaModel.permute`) reorders the rows of
//! every llama `attn_q`/`attn_k` tensor from HF's rotate-half layout to its interleaved RoPE
//! layout: per head, row `a·D/2 + i` moves to `2i + a`. transformers 5.23 undoes it in
//! `LlamaTensorProcessor._reverse_permute_weights` with n_head = num_attention_heads for q and
//! num_key_value_heads for k, on weights and biases alike. Its tensor processors are keyed by
//! `general.architecture`, and only "llama" has this one: qwen2 and qwen3 files are written in
//! HF's layout (llama.cpp runs them with NEOX-style RoPE) and are read unchanged.

use super::file::GgufFile;
use crate::error::{Error, Result};
use crate::model::config::ModelConfig;
use candle_core::Tensor;
use std::collections::{BTreeMap, BTreeSet};

/// GGUF leaf name under `blk.N.` → HF name under `model.layers.N.`.
const BLOCK_NAMES: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// The HF name of a GGUF tensor; `None` when HF has no such tensor (it is kept under its GGUF
/// name, so the unused-tensor check names it).
pub fn hf_name(gguf: &str) -> Option<String> {
    let (stem, kind) = gguf.rsplit_once('.')?;
    if !matches!(kind, "weight" | "bias") {
        return None;
    }
    let top = match stem {
        "token_embd" => Some("model.embed_tokens"),
        "output_norm" => Some("model.norm"),
        "output" => Some("lm_head"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(format!("{t}.{kind}"));
    }
    let rest = stem.strip_prefix("blk.")?;
    let (layer, leaf) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let hf = BLOCK_NAMES.iter().find(|(g, _)| *g == leaf)?.1;
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// Undo llama.cpp's interleaving permutation of the rows of a q/k weight or bias: rows come in
/// `n_head` groups of `D`; within a group, row `2i + a` goes back to `a·D/2 + i`.
pub fn unpermute_rows(t: &Tensor, n_head: usize) -> Result<Tensor> {
    let rows = t.dim(0)?;
    if n_head == 0 || rows % (2 * n_head) != 0 {
        return Err(Error::usage(format!("{rows} rows are not {n_head} heads of an even dimension")));
    }
    let half = rows / n_head / 2;
    let rest = t.elem_count() / rows;
    Ok(t.reshape((n_head, half, 2, rest))?.transpose(1, 2)?.contiguous()?.reshape(t.dims())?)
}

/// Every tensor dequantized and under its HF name; also the dominant quantized type of the
/// weights (for the source's name) and the set of stored types.
pub fn read_all(
    file: &mut GgufFile,
    cfg: &ModelConfig,
) -> Result<(BTreeMap<String, Tensor>, String, String)> {
    let names: Vec<String> = file.tensor_names().into_iter().map(String::from).collect();
    if names.iter().any(|n| n == "rope_freqs.weight") {
        return Err(Error::input(
            format!("{} tensor `rope_freqs.weight`", file.path.display()),
            "llama.cpp stores llama3 RoPE scaling as this tensor; transformers' GGUF loader drops it and \
             runs unscaled RoPE, so HF's model and llama.cpp's differ. hefprobe refuses to pick one: load \
             the original HF checkpoint folder (its config.json carries rope_scaling)",
        ));
    }
    let permuted = file.string("general.architecture")? == Some("llama");
    let mut out = BTreeMap::new();
    let mut stored = BTreeSet::new();
    let mut weight_types: BTreeMap<String, usize> = BTreeMap::new();
    for name in names {
        let dtype = format!("{:?}", file.content.tensor_infos[&name].ggml_dtype);
        stored.insert(dtype.to_lowercase());
        if file.content.tensor_infos[&name].shape.rank() == 2 {
            *weight_types.entry(dtype).or_default() += 1;
        }
        let mut t = file.dequantize(&name)?;
        let hf = hf_name(&name);
        if permuted {
            let heads = match hf.as_deref() {
                Some(h) if h.contains(".self_attn.q_proj.") => Some(cfg.num_heads),
                Some(h) if h.contains(".self_attn.k_proj.") => Some(cfg.num_kv_heads),
                _ => None,
            };
            if let Some(n) = heads {
                t = unpermute_rows(&t, n).map_err(|e| {
                    Error::input(format!("{} tensor `{name}`", file.path.display()), e.to_string())
                })?;
            }
        }
        out.insert(hf.unwrap_or(name), t);
    }
    let quant = weight_types
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(t, _)| t.to_uppercase())
        .unwrap_or_else(|| "F32".into());
    Ok((out, quant, stored.into_iter().collect::<Vec<_>>().join("+")))
}
