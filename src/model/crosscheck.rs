//! Cross-check the reference against candle-transformers' own llama and qwen2 models on the
//! same weights: an independent implementation that only returns last-position logits.
//! Agreement here guards the reference against a shared misreading of HF's code.

use crate::error::{Error, Result};
use crate::model::config::{Arch, ModelConfig, RopeScaling};
use crate::model::Checkpoint;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use std::collections::HashMap;

/// Logits [vocab] after the prompt and after each teacher-forced decode token.
pub fn candle_transformers_logits(
    ckpt: &Checkpoint,
    prompt: &[u32],
    decode: &[u32],
) -> Result<Vec<Vec<f32>>> {
    let c = &ckpt.config;
    if c.sliding_window.iter().any(Option::is_some) || c.qk_norm || c.o_bias || c.mlp_bias {
        return Err(Error::Unsupported(
            "the candle-transformers cross-check covers llama and qwen2 without sliding windows, \
             biases on o_proj/MLP or q/k norms"
                .into(),
        ));
    }
    let dev = Device::Cpu;
    // candle-transformers' models read f32 here; the stored bf16/f16 widens exactly.
    let tensors: HashMap<String, Tensor> = ckpt
        .tensors
        .iter()
        .map(|(n, t)| Ok((n.clone(), t.to_dtype(DType::F32)?)))
        .collect::<candle_core::Result<_>>()?;
    let vb = VarBuilder::from_tensors(tensors, DType::F32, &dev);
    match c.arch {
        Arch::Llama if !c.qkv_bias => {
            use candle_transformers::models::llama;
            let cfg = llama_config(c)?;
            let model = llama::Llama::load(vb, &cfg)?;
            let mut cache = llama::Cache::new(true, DType::F32, &cfg, &dev)?;
            teacher_forced(prompt, decode, |x, pos| model.forward(x, pos, &mut cache))
        }
        Arch::Qwen2 if matches!(c.rope.scaling, RopeScaling::Default) => {
            let mut model = candle_transformers::models::qwen2::ModelForCausalLM::new(&qwen2_config(c), vb)?;
            teacher_forced(prompt, decode, |x, pos| model.forward(x, pos))
        }
        _ => Err(Error::Unsupported(format!(
            "no candle-transformers cross-check for this {} configuration",
            c.arch.name()
        ))),
    }
}

/// The last-position logits of `forward` (input [1, T], first position) over the prompt, then
/// over each decode token in turn.
fn teacher_forced(
    prompt: &[u32],
    decode: &[u32],
    mut forward: impl FnMut(&Tensor, usize) -> candle_core::Result<Tensor>,
) -> Result<Vec<Vec<f32>>> {
    let input = |ids: &[u32]| Tensor::new(ids, &Device::Cpu).and_then(|t| t.unsqueeze(0));
    let flat = |t: Tensor| t.flatten_all().and_then(|t| t.to_vec1::<f32>());
    let mut out = vec![flat(forward(&input(prompt)?, 0)?)?];
    for (k, &t) in decode.iter().enumerate() {
        out.push(flat(forward(&input(&[t])?, prompt.len() + k)?)?);
    }
    Ok(out)
}

/// candle-transformers' llama config of `c`: default and llama3 RoPE, head_dim = hidden / heads.
fn llama_config(c: &ModelConfig) -> Result<candle_transformers::models::llama::Config> {
    use candle_transformers::models::llama;
    let rope_scaling = match &c.rope.scaling {
        RopeScaling::Default => None,
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => Some(llama::Llama3RopeConfig {
            factor: *factor as f32,
            low_freq_factor: *low_freq_factor as f32,
            high_freq_factor: *high_freq_factor as f32,
            original_max_position_embeddings: *original_max_position_embeddings,
            rope_type: llama::Llama3RopeType::Llama3,
        }),
        RopeScaling::Linear { .. } | RopeScaling::Yarn { .. } => {
            return Err(Error::Unsupported(
                "candle-transformers' llama implements default and llama3 RoPE only".into(),
            ))
        }
    };
    if c.head_dim * c.num_heads != c.hidden_size {
        return Err(Error::Unsupported("candle-transformers' llama needs head_dim = hidden / heads".into()));
    }
    Ok(llama::Config {
        hidden_size: c.hidden_size,
        intermediate_size: c.intermediate_size,
        vocab_size: c.vocab_size,
        num_hidden_layers: c.num_layers,
        num_attention_heads: c.num_heads,
        num_key_value_heads: c.num_kv_heads,
        use_flash_attn: false,
        rms_norm_eps: c.rms_norm_eps,
        // candle's LlamaConfig only reads a top-level rope_theta (transformers 5 puts it
        // in rope_parameters), so the value is passed explicitly.
        rope_theta: c.rope.theta as f32,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling,
        max_position_embeddings: c.max_position_embeddings,
        tie_word_embeddings: c.tie_word_embeddings,
    })
}

/// candle-transformers' qwen2 config of `c`, with no sliding window.
fn qwen2_config(c: &ModelConfig) -> candle_transformers::models::qwen2::Config {
    candle_transformers::models::qwen2::Config {
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        intermediate_size: c.intermediate_size,
        num_hidden_layers: c.num_layers,
        num_attention_heads: c.num_heads,
        num_key_value_heads: c.num_kv_heads,
        max_position_embeddings: c.max_position_embeddings,
        sliding_window: c.max_position_embeddings,
        max_window_layers: c.num_layers,
        tie_word_embeddings: c.tie_word_embeddings,
        rope_theta: c.rope.theta,
        rms_norm_eps: c.rms_norm_eps,
        use_sliding_window: false,
        hidden_act: candle_nn::Activation::Silu,
    }
}
