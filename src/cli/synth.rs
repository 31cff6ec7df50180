//! `hefprobe synth`: write a complete HF checkpoint with seeded random weights.

use crate::error::{Error, Result};
use crate::model::synth::{SynthOverrides, SynthSpec, PRESETS};
use crate::model::tokenizer::{synth_tokenizer_json, SYNTH_TOKENIZER_VOCAB};
use candle_core::DType;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// A real model's config: tinystories, smollm2-135m, qwen2.5-0.5b, qwen3-0.6b, tinymistral-248m,
    /// qwen2.5-1.5b, llama3.2-3b.
    #[arg(long, conflicts_with = "arch")]
    pub preset: Option<String>,
    #[command(flatten)]
    pub overrides: SynthOverrides,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Weight dtype on disk: f32, f16 or bf16 (the reference always computes in f32).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Output folder (its parent must exist).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// Overwrite the checkpoint already in the output folder.
    #[arg(long)]
    pub force: bool,
}

impl SynthArgs {
    pub fn spec(&self) -> Result<SynthSpec> {
        let o = &self.overrides;
        o.check_cli()?;
        let mut spec = match (&self.preset, o.arch) {
            (Some(p), _) => SynthSpec::preset(p, self.seed)?,
            (None, Some(arch)) => {
                let missing: Vec<&str> = [
                    ("--hidden", o.hidden),
                    ("--layers", o.layers),
                    ("--heads", o.heads),
                    ("--kv-heads", o.kv_heads),
                ]
                .into_iter()
                .filter(|(_, v)| v.is_none())
                .map(|(n, _)| n)
                .collect();
                if !missing.is_empty() {
                    return Err(Error::usage(format!(
                        "--arch {} needs explicit dims: also give {}",
                        arch.name(),
                        missing.join(", ")
                    )));
                }
                SynthSpec::arch(arch, self.seed)
            }
            (None, None) => {
                return Err(Error::usage(format!(
                    "give --preset NAME ({}) or --arch with --hidden --layers --heads --kv-heads",
                    PRESETS.join(", ")
                )))
            }
        };
        spec.apply(&SynthOverrides { arch: None, ..o.clone() });
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
    crate::output::check_checkpoint_out("-o", &a.out, a.force)?;
    crate::model::memory::check_synth(&spec.config()?, &format!("synth {}", spec.describe()))?;
    let ckpt = spec.build()?;
    ckpt.save(&a.out, dtype)?;
    let tok = if ckpt.config.vocab_size >= SYNTH_TOKENIZER_VOCAB {
        let json = serde_json::to_string_pretty(&synth_tokenizer_json()).expect("json");
        crate::files::write_file(a.out.join("tokenizer.json"), json)?;
        "tokenizer.json (byte-level, <s> = 1 added with --add-special-tokens)".to_string()
    } else {
        format!(
            "no tokenizer.json (vocab {} < {SYNTH_TOKENIZER_VOCAB}; give token ids)",
            ckpt.config.vocab_size
        )
    };
    let c = &ckpt.config;
    crate::outln!(
        "wrote {}: {} hidden={} layers={} heads={}/{} head_dim={} vocab={} ({:.1} M params, {})",
        a.out.display(),
        c.arch.name(),
        c.hidden_size,
        c.num_layers,
        c.num_heads,
        c.num_kv_heads,
        c.head_dim,
        c.vocab_size,
        crate::model::memory::params(c).get().unwrap_or(u64::MAX) as f64 / 1e6,
        a.dtype
    );
    crate::outln!("  {}", spec.describe());
    crate::outln!("  config.json, model.safetensors, {tok}");
    Ok(ExitCode::SUCCESS)
}
