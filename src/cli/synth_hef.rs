//! `hefprobe synth-hef`: write a simulated LLM HEF for a checkpoint (see device::synth_hef).

use super::args::{parse_ids, Ids, ModelArgs};
use crate::device::synth_hef::{ExposeQuant, InputMap, Mistake, Quant, SimNoise, SynthHefOptions};
use crate::error::Result;
use crate::named::Named;
use crate::request::synth_hef::{Calibrate, SynthHef};
use crate::tap::TapSelection;
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
    #[arg(long, default_value = "per-feature", value_parser = parse_named::<ExposeQuant>, requires = "expose")]
    pub expose_quant: ExposeQuant,
    /// Only blocks A..=B, as a graph cut from the model: a prefix (A = 0) outputs layers.B.out in
    /// place of the logits (for `bisect`); a suffix (B the last block) takes the hidden state
    /// entering block A where genai feeds embeddings (the host feeds the reference's).
    #[arg(long, value_name = "A..=B", value_parser = parse_block_range)]
    pub layers: Option<(usize, usize)>,
    /// Also write a third, cache-less group `hefprobe_sim` (the scope of `hefprobe_sim__prefill`), whose one frame
    /// of N positions is re-run whole at every step: the exporter's base scope (finding 16 was
    /// observed on it; the exporter's frames are 24). Run it with `--backend hef=X.hef,group=NAME`.
    #[arg(long, value_name = "N")]
    pub base_scope: Option<usize>,
    /// Which input is which: `genai` (its default suffixes input_layer1..6 = embeddings, mask,
    /// Q cos, Q sin, K cos, K sin) or `exporter` (input_layer3 = K cos, 4 = Q cos, 5 = K sin,
    /// 6 = Q sin, declared in hailo-config.json `input_layers_names_suffixes`).
    #[arg(long, default_value = "genai", value_parser = parse_named::<InputMap>)]
    pub input_map: InputMap,
    /// A fault only the tbt group computes (a tbt graph compiled otherwise than prefill);
    /// several allowed.
    #[arg(long = "tbt-fault", value_name = "SPEC")]
    pub tbt_faults: Vec<String>,
}

/// A `named_enum!` value, for clap: an unknown word lists the known ones.
fn parse_named<T: Named>(s: &str) -> std::result::Result<T, String> {
    T::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
        let names: Vec<&str> = T::ALL.iter().map(|v| v.name()).collect();
        format!("expected one of {}", names.join(", "))
    })
}

fn parse_block_range(s: &str) -> std::result::Result<(usize, usize), String> {
    let (a, b) = s.split_once("..=").ok_or_else(|| format!("`{s}`: give A..=B, e.g. 0..=12"))?;
    let n = |x: &str| x.trim().parse::<usize>().map_err(|e| format!("`{x}` in `{s}`: {e}"));
    Ok((n(a)?, n(b)?))
}

pub fn run(a: SynthHefArgs) -> Result<ExitCode> {
    let calibration = match (a.calibration.is_empty(), a.calib_text, a.calib_random) {
        (false, _, _) => Calibrate::Tokens(a.calibration.into_iter().map(|i| i.0).collect()),
        (true, Some(text), _) => Calibrate::Text(text),
        (true, None, true) => Calibrate::Random,
        (true, None, false) => Calibrate::Default,
    };
    let model = a.model.to_ref()?;
    let mut opts = SynthHefOptions {
        prefill_tokens: a.prefill_tokens,
        kv_cache_size: a.kv_cache_size,
        tbt: !a.no_tbt,
        faults: crate::fault::spec::parse_all(&a.faults)?,
        quant: Quant::parse(&a.quant)?,
        lm_head_shards: a.lm_head_shards,
        mistakes: a.mistakes.iter().map(|m| Mistake::parse(m)).collect::<Result<_>>()?,
        noise: a.noise.map(|std| SimNoise { std, seed: a.noise_seed }),
        expose_quant: a.expose_quant,
        layers: a.layers,
        base_scope: a.base_scope,
        inputs: a.input_map.suffixes(),
        ..Default::default()
    };
    // --expose is read before --tbt-fault, so a line with both wrong names the same one first.
    let expose = a.expose.map(|g| TapSelection::parse(&[g])).transpose()?;
    opts.tbt_faults = crate::fault::spec::parse_all(&a.tbt_faults)?;
    let request = SynthHef { model, out: a.out, opts, calibration, expose };
    for line in request.run()?.lines() {
        crate::outln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
