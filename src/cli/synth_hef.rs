//! `hefprobe synth-hef`: write a simulated LLM HEF for a checkpoint (see device::synth_hef).

use super::{parse_ids, Ids, ModelArgs};
use crate::device::synth_hef::{synth_hef, Mistake, SimCheckpoint, SimNoise, SynthHefOptions};
use crate::error::{Error, Result};
use crate::model::CheckpointRef;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct SynthHefArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Output .hef.
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// prefill_input_tokens_count: rows of a prefill frame.
    #[arg(long, default_value_t = 96)]
    pub prefill_tokens: usize,
    /// kv_cache_size: slots of the cache ring.
    #[arg(long, default_value_t = 2048)]
    pub kv_cache_size: usize,
    /// No tbt group ("base scope"): every step re-runs prefill.
    #[arg(long)]
    pub no_tbt: bool,
    /// Faults the device computes (NAME[:PARAMS][@layers=RANGE]); several allowed.
    #[arg(long = "fault", value_name = "SPEC")]
    pub faults: Vec<String>,
    /// Quantization of the compiled graph (quant fault parameters): a16 (16-bit activations), w8a16, w8a8, ...
    #[arg(long, default_value = "a16")]
    pub quant: String,
    /// Split the logits over N outputs (a sharded lm_head, finding 12).
    #[arg(long, default_value_t = 1)]
    pub lm_head_shards: usize,
    /// Write a structural mistake: missing-lm-head, full-sequence-output, misspelled-config-key, wrong-rope-width.
    #[arg(long = "mistake", value_name = "NAME")]
    pub mistakes: Vec<String>,
    /// Calibration prompt (token ids); several allowed; default two seeded random prompts.
    #[arg(long = "calib-tokens", value_name = "IDS", value_parser = parse_ids)]
    pub calibration: Vec<Ids>,
    /// Plant run-to-run noise: Gaussian, this standard deviation in logits, different on every
    /// run (for testing `hefprobe suite`'s repeatability gate; a real device has none).
    #[arg(long, value_name = "STD")]
    pub noise: Option<f32>,
    /// Seed of --noise's stream.
    #[arg(long, default_value_t = 0, requires = "noise")]
    pub noise_seed: u64,
}

pub fn run(a: SynthHefArgs) -> Result<ExitCode> {
    let mut outs = crate::output::Outputs::new();
    a.model.register(&mut outs)?;
    outs.file("-o", &a.out).check()?;
    let ckpt = a.model.load()?;
    let source = match a.model.to_ref()? {
        c @ CheckpointRef::Path { .. } => {
            let dir = c.resolved()?.expect("a path");
            SimCheckpoint::Path {
                path: std::fs::canonicalize(&dir).map_err(|e| Error::io(&dir, e))?,
                hash: ckpt.hash.clone(),
            }
        }
        CheckpointRef::Synth(s) => SimCheckpoint::Synth(s),
    };
    let opts = SynthHefOptions {
        prefill_tokens: a.prefill_tokens,
        kv_cache_size: a.kv_cache_size,
        tbt: !a.no_tbt,
        faults: crate::fault::spec::parse_all(&a.faults)?,
        quant: a.quant.clone(),
        lm_head_shards: a.lm_head_shards,
        mistakes: a.mistakes.iter().map(|m| Mistake::parse(m)).collect::<Result<_>>()?,
        calibration: a.calibration.iter().map(|i| i.0.clone()).collect(),
        noise: a.noise.map(|std| SimNoise { std, seed: a.noise_seed }),
        ..Default::default()
    };
    let hef = synth_hef(&ckpt, source, &opts)?;
    crate::files::write_file(&a.out, hef.to_bytes())?;
    let groups: Vec<&str> = hef.groups.iter().map(|g| g.name.as_str()).collect();
    println!(
        "wrote {}: {} for {} ({}), prefill {} rows, kv cache {} slots, quant {}{}{}",
        a.out.display(),
        groups.join(" + "),
        ckpt.source,
        ckpt.hash,
        opts.prefill_tokens,
        opts.kv_cache_size,
        opts.quant,
        if opts.faults.is_empty() {
            String::new()
        } else {
            format!(", faults {}", crate::fault::spec::join(&opts.faults, ", "))
        },
        if opts.mistakes.is_empty() {
            String::new()
        } else {
            format!(", mistakes {}", opts.mistakes.iter().map(|m| m.name()).collect::<Vec<_>>().join(", "))
        }
    );
    Ok(ExitCode::SUCCESS)
}
