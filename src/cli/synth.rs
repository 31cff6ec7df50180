//! `hefprobe synth`: write a complete HF checkpoint with seeded random weights.

use super::parse_arch;
use crate::error::{Error, Result};
use crate::model::synth::{SynthOverrides, SynthSpec, PRESETS};
use crate::model::tokenizer::{synth_tokenizer_json, SYNTH_TOKENIZER_VOCAB};
use crate::model::Arch;
use candle_core::DType;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// A real model's config: tinystories, smollm2-135m, qwen2.5-0.5b, qwen3-0.6b, tinymistral-248m.
    #[arg(long, conflicts_with = "arch")]
    pub preset: Option<String>,
    /// Architecture for explicit dims: llama, mistral, qwen2, qwen3.
    #[arg(long, value_parser = parse_arch, requires_all = ["hidden", "layers", "heads", "kv_heads"])]
    pub arch: Option<Arch>,
    #[arg(long)]
    pub hidden: Option<usize>,
    #[arg(long)]
    pub layers: Option<usize>,
    #[arg(long)]
    pub heads: Option<usize>,
    #[arg(long)]
    pub kv_heads: Option<usize>,
    /// Default: hidden / heads.
    #[arg(long)]
    pub head_dim: Option<usize>,
    /// Default: 8/3 · hidden rounded up to a multiple of 64.
    #[arg(long)]
    pub intermediate: Option<usize>,
    /// Default: the preset's, or 512.
    #[arg(long)]
    pub vocab: Option<usize>,
    /// Sliding window (mistral: every layer; qwen2/3: the upper half of the layers).
    #[arg(long)]
    pub sliding_window: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Multiplies every weight's standard deviation.
    #[arg(long, default_value_t = 1.0)]
    pub weight_scale: f64,
    /// Plant N massive-activation channels in the residual stream.
    #[arg(long, default_value_t = 0)]
    pub massive_channels: usize,
    /// Size of the planted channels relative to an ordinary one.
    #[arg(long, default_value_t = 32.0)]
    pub massive_scale: f64,
    /// Weight dtype on disk: f32, f16 or bf16 (the reference always computes in f32).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Output folder.
    #[arg(short = 'o', long)]
    pub out: PathBuf,
}

impl SynthArgs {
    pub fn spec(&self) -> Result<SynthSpec> {
        let mut spec = match (&self.preset, self.arch) {
            (Some(p), _) => SynthSpec::preset(p, self.seed)?,
            (None, Some(arch)) => SynthSpec::arch(arch, self.seed),
            (None, None) => {
                return Err(Error::usage(format!(
                    "give --preset NAME ({}) or --arch with --hidden --layers --heads --kv-heads",
                    PRESETS.join(", ")
                )))
            }
        };
        spec.apply(&SynthOverrides {
            arch: None,
            hidden: self.hidden,
            layers: self.layers,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            intermediate: self.intermediate,
            vocab: self.vocab,
            sliding_window: self.sliding_window,
            weight_scale: Some(self.weight_scale),
            massive_channels: Some(self.massive_channels),
            massive_scale: Some(self.massive_scale),
        });
        Ok(spec)
    }
}

pub fn run(a: SynthArgs) -> Result<ExitCode> {
    let dtype = match a.dtype.as_str() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => return Err(Error::usage(format!("--dtype {other}: expected f32, f16 or bf16"))),
    };
    let spec = a.spec()?;
    let ckpt = spec.build()?;
    ckpt.save(&a.out, dtype)?;
    let tok = if ckpt.config.vocab_size >= SYNTH_TOKENIZER_VOCAB {
        let json = serde_json::to_string_pretty(&synth_tokenizer_json()).expect("json");
        crate::error::write_file(a.out.join("tokenizer.json"), json)?;
        "tokenizer.json (byte-level, <s> = 1 added with --add-special-tokens)".to_string()
    } else {
        format!(
            "no tokenizer.json (vocab {} < {SYNTH_TOKENIZER_VOCAB}; give token ids)",
            ckpt.config.vocab_size
        )
    };
    let c = &ckpt.config;
    println!(
        "wrote {}: {} hidden={} layers={} heads={}/{} head_dim={} vocab={} ({:.1} M params, {})",
        a.out.display(),
        c.arch.name(),
        c.hidden_size,
        c.num_layers,
        c.num_heads,
        c.num_kv_heads,
        c.head_dim,
        c.vocab_size,
        c.num_params() as f64 / 1e6,
        a.dtype
    );
    println!("  {}", spec.describe());
    println!("  config.json, model.safetensors, {tok}");
    Ok(ExitCode::SUCCESS)
}
