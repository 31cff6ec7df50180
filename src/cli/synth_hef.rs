//! `hefprobe synth-hef`: write a simulated LLM HEF for a checkpoint (see device::synth_hef).

use super::{parse_ids, Ids, ModelArgs};
use crate::device::synth_hef::{
    synth_hef, Calibration, ExposeQuant, Mistake, SimCheckpoint, SimNoise, SynthHefOptions,
};
use crate::error::{Error, Result};
use crate::model::CheckpointRef;
use crate::tap::{Tap, TapSelection};
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
    /// Quantization of the compiled graph (quant fault parameters): a16 (16-bit activations),
    /// w8a16, w8a8, ..., or none (float activations; the inputs, cache and outputs keep the
    /// HEF's 16-bit quant infos).
    #[arg(long, default_value = "a16")]
    pub quant: String,
    /// Split the logits over N outputs (a sharded lm_head, finding 12).
    #[arg(long, default_value_t = 1)]
    pub lm_head_shards: usize,
    /// Write a structural mistake: missing-lm-head, full-sequence-output, misspelled-config-key, wrong-rope-width.
    #[arg(long = "mistake", value_name = "NAME")]
    pub mistakes: Vec<String>,
    /// Calibration prompt (token ids); several allowed. Default: hefprobe's calibration text
    /// through the checkpoint's own tokenizer, or 4 seeded random prompts when it has none.
    #[arg(long = "calib-tokens", value_name = "IDS", value_parser = parse_ids, conflicts_with = "calib_text")]
    pub calibration: Vec<Ids>,
    /// Calibrate on this text instead (one prompt per paragraph, blank lines between them),
    /// tokenized with the checkpoint's tokenizer.
    #[arg(long, value_name = "FILE", conflicts_with = "calib_random")]
    pub calib_text: Option<PathBuf>,
    /// Calibrate on 4 seeded random prompts of 64 token ids (what synth-hef did before it had
    /// a corpus): to measure what the calibration source changes.
    #[arg(long, conflicts_with = "calibration")]
    pub calib_random: bool,
    /// Plant run-to-run noise: Gaussian, this standard deviation in logits, different on every
    /// run (for testing `hefprobe suite`'s repeatability gate; a real device has none).
    #[arg(long, value_name = "STD")]
    pub noise: Option<f32>,
    /// Seed of --noise's stream.
    #[arg(long, default_value_t = 0, requires = "noise")]
    pub noise_seed: u64,
    /// Also output these taps (globs, comma-separated: `layers.*.out,layers.3.attn.probs`), as
    /// a compiler's extra output layers named `<group>/<tap>`: every layer measured on the device.
    #[arg(long, value_name = "TAPS")]
    pub expose: Option<String>,
    /// How exposed outputs are quantized: per-feature (one quant info per feature) or per-tensor.
    #[arg(long, default_value = "per-feature", value_parser = parse_expose_quant, requires = "expose")]
    pub expose_quant: ExposeQuant,
    /// Only blocks A..=B, as a graph cut from the model: a prefix (A = 0) outputs layers.B.out in
    /// place of the logits (for `bisect`); a suffix (B the last block) takes the hidden state
    /// entering block A where genai feeds embeddings (the host feeds the reference's).
    #[arg(long, value_name = "A..=B", value_parser = parse_block_range)]
    pub layers: Option<(usize, usize)>,
}

fn parse_block_range(s: &str) -> std::result::Result<(usize, usize), String> {
    let (a, b) = s.split_once("..=").ok_or_else(|| format!("`{s}`: give A..=B, e.g. 0..=12"))?;
    let n = |x: &str| x.trim().parse::<usize>().map_err(|e| format!("`{x}` in `{s}`: {e}"));
    Ok((n(a)?, n(b)?))
}

fn parse_expose_quant(s: &str) -> std::result::Result<ExposeQuant, String> {
    ExposeQuant::from_name(s)
        .ok_or_else(|| format!("expected one of {}", ExposeQuant::ALL.map(ExposeQuant::name).join(", ")))
}

/// The taps `--expose` selects on a model of `layers` blocks, in execution order: each glob
/// must select one that a HEF can output.
fn exposed(globs: &str, layers: usize, range: Option<(usize, usize)>) -> Result<Vec<Tap>> {
    let (first, last) = range.unwrap_or((0, layers.saturating_sub(1)));
    let mut taps = Vec::new();
    for g in globs.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        let sel = TapSelection::parse(&[g.to_string()])?;
        let hit: Vec<Tap> = Tap::all(layers)
            .into_iter()
            .filter(|&t| crate::device::exposed::exposable(t) && sel.matches(&t.to_string()))
            .filter(|t| t.layer().map_or(last + 1 == layers, |l| (first..=last).contains(&l)))
            .collect();
        if hit.is_empty() {
            return Err(Error::usage(format!(
                "--expose `{g}` selects no tap a HEF of blocks {first}..={last} of this {layers}-layer model can \
                 output (layers.I.out, layers.I.attn.probs, ..., final_norm; not embed or logits)"
            )));
        }
        taps.extend(hit.into_iter().filter(|t| !taps.contains(t)).collect::<Vec<_>>());
    }
    taps.sort();
    Ok(taps)
}

/// The calibration set the flags ask for, or None for the default.
fn calibration(a: &SynthHefArgs, ckpt: &crate::model::Checkpoint) -> Result<Option<Calibration>> {
    if !a.calibration.is_empty() {
        let prompts: Vec<Vec<u32>> = a.calibration.iter().map(|i| i.0.clone()).collect();
        let source = format!("--calib-tokens: {} prompts", prompts.len());
        return Ok(Some(Calibration { source, prompts }));
    }
    if a.calib_random {
        return Ok(Some(Calibration::random(ckpt.config.vocab_size)));
    }
    let Some(path) = &a.calib_text else { return Ok(None) };
    let tok = match crate::model::tokenizer::Tokenizer::of_checkpoint(ckpt)? {
        Some(t) => t,
        None if ckpt.config.vocab_size >= crate::model::tokenizer::SYNTH_TOKENIZER_VOCAB => {
            crate::model::tokenizer::Tokenizer::synth()
        }
        None => {
            return Err(Error::usage(format!(
                "--calib-text {}: the checkpoint has no tokenizer to read it with; give --calib-tokens",
                path.display()
            )))
        }
    };
    let what = path.display().to_string();
    Calibration::from_text(&crate::files::read_text(path, crate::files::Kind::Calibration)?, &tok, &what)
        .map(Some)
}

/// What `synth-hef` wrote: the facts its summary lines give (the command line prints them; the
/// Python module's `synth_hef` returns them).
#[derive(Debug, serde::Serialize)]
pub struct Written {
    pub path: PathBuf,
    pub groups: Vec<String>,
    pub checkpoint: String,
    pub hash: String,
    pub prefill_tokens: usize,
    pub kv_cache_size: usize,
    pub quant: String,
    pub faults: Vec<String>,
    pub mistakes: Vec<String>,
    pub exposed: Vec<String>,
    pub expose_quant: String,
}

impl Written {
    /// The summary lines `synth-hef` prints.
    pub fn lines(&self) -> Vec<String> {
        let listed = |what: &str, v: &[String]| {
            if v.is_empty() {
                String::new()
            } else {
                format!(", {what} {}", v.join(", "))
            }
        };
        let mut lines = vec![format!(
            "wrote {}: {} for {} ({}), prefill {} rows, kv cache {} slots, quant {}{}{}",
            self.path.display(),
            self.groups.join(" + "),
            self.checkpoint,
            self.hash,
            self.prefill_tokens,
            self.kv_cache_size,
            self.quant,
            listed("faults", &self.faults),
            listed("mistakes", &self.mistakes),
        )];
        if !self.exposed.is_empty() {
            lines.push(format!(
                "exposed outputs ({} quant infos): {}",
                self.expose_quant,
                self.exposed.join(", ")
            ));
        }
        lines
    }
}

pub fn run(a: SynthHefArgs) -> Result<ExitCode> {
    for line in write(&a)?.lines() {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Check `a`'s files, write its HEF and say what was written: the command line's and the Python
/// module's `synth_hef`.
pub fn write(a: &SynthHefArgs) -> Result<Written> {
    let mut outs = crate::output::Outputs::new();
    a.model.register(&mut outs)?;
    if let Some(t) = &a.calib_text {
        outs.input("--calib-text", t);
    }
    outs.binary("-o", &a.out).check()?;
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
        calibration: calibration(a, &ckpt)?,
        noise: a.noise.map(|std| SimNoise { std, seed: a.noise_seed }),
        expose: a
            .expose
            .as_deref()
            .map_or(Ok(Vec::new()), |g| exposed(g, ckpt.config.num_layers, a.layers))?,
        expose_quant: a.expose_quant,
        layers: a.layers,
        ..Default::default()
    };
    let hef = synth_hef(&ckpt, source, &opts)?;
    crate::files::write_file(&a.out, hef.to_bytes())?;
    Ok(Written {
        path: a.out.clone(),
        groups: hef.groups.iter().map(|g| g.name.clone()).collect(),
        checkpoint: ckpt.source.to_string(),
        hash: ckpt.hash.clone(),
        prefill_tokens: opts.prefill_tokens,
        kv_cache_size: opts.kv_cache_size,
        quant: opts.quant.clone(),
        faults: opts.faults.iter().map(|f| f.text.clone()).collect(),
        mistakes: opts.mistakes.iter().map(|m| m.name().to_string()).collect(),
        exposed: opts.expose.iter().map(Tap::to_string).collect(),
        expose_quant: opts.expose_quant.name().to_string(),
    })
}
