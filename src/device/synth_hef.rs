//! `hefprobe synth-hef`: write a simulated LLM HEF in the real container format, for a
//! checkpoint. The layout (groups, the six genai inputs, logits, KV-cache layers, the four genai
//! resources) comes from the one synthesizer, `hef::synth`; this module adds what needs the
//! model: quant infos calibrated on the checkpoint, the resource contents, one resource of our
//! own (`hefprobe-sim.json`) naming the checkpoint and the emulator configuration the simulated
//! device runs, and, on request, the structural mistakes of the findings table so `audit` can be
//! tested against them.

use crate::error::{Error, Result};
use crate::fault::quant::Affine;
use crate::fault::{catalog, OnDevice};
use crate::hef::llm_config;
use crate::hef::synth::{LlmInput, LlmQuant, LlmResources, LlmSpec};
use crate::hef::{Hef, QuantInfo, Resource};
use crate::model::synth::SynthSpec;
use crate::model::{Checkpoint, Decoder};
use crate::tap::{LayerTap, Tap};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

mod calibrate;
mod written;
use calibrate::{calibrate, Ranges};
pub use calibrate::{
    u16_quant, Calibrate, Calibration, ExposeQuant, CALIBRATION_TEXT, MAX_CALIBRATION_PROMPTS,
    MAX_CALIBRATION_TOKENS,
};
pub use written::Written;

/// The resource naming what the simulated device runs.
pub const SIM_RESOURCE: &str = "hefprobe-sim.json";
pub const SIM_SCHEMA: &str = "hefprobe.sim/1";

crate::named_enum! {
    /// Structural mistakes `synth-hef` can write (findings 1, 2, 3, 5).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Mistake {
        /// The graph stops at the final-norm hidden state (finding 1).
        MissingLmHead = "missing-lm-head",
        /// The prefill output holds every position, [1, P, vocab] (finding 2).
        FullSequenceOutput = "full-sequence-output",
        /// hailo-config.json says `prefill_input_tokens_size` (finding 5).
        MisspelledConfigKey = "misspelled-config-key",
        /// Q RoPE inputs tiled per kv head instead of per head (finding 3).
        WrongRopeWidth = "wrong-rope-width",
    }
}

impl Mistake {
    pub fn parse(s: &str) -> Result<Mistake> {
        Mistake::from_name(s).ok_or_else(|| {
            Error::usage(format!(
                "--mistake `{s}`: expected one of {}",
                Mistake::ALL.map(|m| m.name()).join(", ")
            ))
        })
    }
}

/// How the simulated device re-creates the checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum SimCheckpoint {
    Synth(SynthSpec),
    Path { path: PathBuf, hash: String },
}

impl SimCheckpoint {
    /// How the device re-creates `model` (loaded as `ckpt`): its preset, or its folder's absolute
    /// path and hash.
    pub fn of(model: &crate::model::CheckpointRef, ckpt: &Checkpoint) -> Result<Self> {
        use crate::model::CheckpointRef;
        Ok(match model {
            c @ CheckpointRef::Path { .. } => {
                let dir = c.resolved()?.expect("a path");
                let path = std::fs::canonicalize(&dir).map_err(|e| Error::io(&dir, e))?;
                SimCheckpoint::Path { path, hash: ckpt.hash.clone() }
            }
            CheckpointRef::Synth(s) => SimCheckpoint::Synth(s.clone()),
        })
    }
}

/// `hefprobe-sim.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimSpec {
    pub schema: String,
    pub checkpoint: SimCheckpoint,
    /// Fault specs the device computes (see `hefprobe faults`).
    pub faults: Vec<crate::fault::spec::FaultSpec>,
    /// Quantization of the compiled graph, `quant` fault parameters (e.g. "a16", "w8a16").
    pub quant: String,
    pub mistakes: Vec<Mistake>,
    /// Planted run-to-run noise (tests of the suite's repeatability gate): see [`SimNoise`].
    /// Absent from HEFs written without it, so their resource is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<SimNoise>,
    /// The calibration set the simulated compiler used (its activations and the HEF's quant
    /// infos), so the device and the expected-noise emulation calibrate alike. Absent from HEFs
    /// written before it was recorded: the seeded random set ([`Calibration::random`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
    /// The taps the graph also outputs, in output order after the logits (`--expose`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose: Vec<String>,
    /// The blocks a graph cut from the model runs, first and last (`--layers A..=B`): a prefix
    /// (A = 0) outputs `layers.B.out` instead of the logits, a suffix (B the last block) takes
    /// the hidden state entering block A where genai feeds embeddings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<[usize; 2]>,
    /// Which input the compiled graph takes as which (its own truth, whatever hailo-config.json
    /// says): absent for genai's default suffixes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<crate::hef::llm_config::InputSuffixes>,
    /// Faults only the tbt group computes (`--tbt-fault`: a tbt graph compiled wrong while prefill
    /// is right), on top of `faults`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tbt_faults: Vec<crate::fault::spec::FaultSpec>,
}

impl SimSpec {
    /// The blocks the graph runs, first and last, checked against the model's `layers`.
    pub fn block_range(&self, layers: usize, what: &str) -> Result<(usize, usize)> {
        match self.layers {
            None => Ok((0, layers.saturating_sub(1))),
            Some([a, b]) if a <= b && b < layers => Ok((a, b)),
            Some([a, b]) => Err(Error::input(
                format!("{what} resource {SIM_RESOURCE} `layers`"),
                format!("blocks {a}..={b} are not a range of this {layers}-layer model's blocks"),
            )),
        }
    }

    /// The suffixes the graph's inputs carry, role by role.
    pub fn input_suffixes(&self) -> crate::hef::llm_config::InputSuffixes {
        self.inputs.clone().unwrap_or_else(crate::hef::llm_config::InputSuffixes::genai)
    }

    /// The set the device was calibrated on.
    pub fn calibration(&self, vocab: usize) -> Calibration {
        self.calibration.clone().unwrap_or_else(|| Calibration::random(vocab))
    }
}

/// Run-to-run noise a real device should not have, planted so the suite's repeatability gate
/// can be tested: every output value gets Gaussian noise of standard deviation `std` (output
/// units, i.e. logits), drawn from a ChaCha8 stream seeded with `seed` that continues across
/// runs — two runs of the same inputs differ, and a test sees the same sequence every time.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimNoise {
    pub std: f32,
    pub seed: u64,
}

/// The compiled graph's quantization (`--quant`): the setting as given, which the HEF's sim spec
/// records, and the fault that computes it (none for `none`: float activations).
#[derive(Debug, Clone, PartialEq)]
pub struct Quant {
    pub setting: String,
    pub spec: Option<crate::fault::spec::FaultSpec>,
}

impl Quant {
    /// `a16`, `w8a16`, ... (`quant` fault parameters), or `none`.
    pub fn parse(setting: &str) -> Result<Self> {
        let spec = (setting != "none").then(|| crate::fault::spec::quantization(setting)).transpose()?;
        Ok(Quant { setting: setting.to_string(), spec })
    }
}

#[derive(Debug, Clone)]
pub struct SynthHefOptions {
    /// Group names are `<name>__prefill` and `<name>__tbt`.
    pub name: String,
    pub prefill_tokens: usize,
    pub kv_cache_size: usize,
    pub tbt: bool,
    /// A third, cache-less group of this many positions (`--base-scope`).
    pub base_scope: Option<usize>,
    /// The inputs' suffixes (`--input-map genai|exporter`).
    pub inputs: crate::hef::llm_config::InputSuffixes,
    pub faults: Vec<crate::fault::spec::FaultSpec>,
    /// Faults the tbt group alone computes (`--tbt-fault`).
    pub tbt_faults: Vec<crate::fault::spec::FaultSpec>,
    /// Quantization of the compiled graph.
    pub quant: Quant,
    pub lm_head_shards: usize,
    pub mistakes: Vec<Mistake>,
    /// Calibration prompts (token ids); empty = seeded random prompts.
    /// What the simulated compiler calibrates on (default: [`Calibration::default_for`]).
    pub calibration: Option<Calibration>,
    /// Planted run-to-run noise (see [`SimNoise`]).
    pub noise: Option<SimNoise>,
    /// Taps the graph also outputs (`--expose`), as a compiler's extra output layers, and how
    /// their uint16 values are quantized.
    pub expose: Vec<Tap>,
    pub expose_quant: ExposeQuant,
    /// The blocks of a graph cut from the model (`--layers A..=B`; see [`SimSpec::layers`]).
    pub layers: Option<(usize, usize)>,
}

impl Default for SynthHefOptions {
    fn default() -> Self {
        SynthHefOptions {
            name: "hefprobe_sim".into(),
            // genai's defaults when hailo-config.json is silent (pre_process.hpp).
            prefill_tokens: 96,
            kv_cache_size: 2048,
            tbt: true,
            base_scope: None,
            inputs: crate::hef::llm_config::InputSuffixes::genai(),
            faults: Vec::new(),
            tbt_faults: Vec::new(),
            quant: Quant::parse("a16").expect("a valid setting"),
            lm_head_shards: 1,
            mistakes: Vec::new(),
            calibration: None,
            noise: None,
            expose: Vec::new(),
            expose_quant: ExposeQuant::PerFeature,
            layers: None,
        }
    }
}

/// Add an output per exposed tap to every group: `<group>/<tap>`, [1, rows, width] uint16 (the
/// prefill group's rows are its frame's, tbt's one), quantized as `how` says.
fn expose_outputs(
    hef: &mut Hef,
    spec: &LlmSpec,
    ranges: &Ranges,
    expose: &[Tap],
    how: ExposeQuant,
) -> Result<()> {
    let (heads, kv_heads) = ranges.heads;
    let geometry = crate::device::exposed::Geometry {
        hidden: spec.hidden as usize,
        heads,
        kv_heads,
        head_dim: spec.head_dim as usize,
        slots: spec.kv_cache_size as usize,
    };
    for g in &mut hef.groups {
        let rows = if g.name == spec.prefill_name() { spec.prefill_tokens } else { 1 };
        for &tap in expose {
            let width = geometry.row_width(tap);
            let (scalar, per_feature) = ranges.exposed_quant(tap, width, how);
            let width = size("exposed output width", width)?;
            let logits = crate::hef::synth::data_bytes::LOGITS;
            let output = crate::hef::synth::stream(format!("{}/{tap}", g.name), rows, width, logits, scalar);
            g.outputs.push(crate::hef::Stream { quant_per_feature: per_feature, ..output });
        }
    }
    Ok(())
}

/// A size from the checkpoint or the options as the layout's 32-bit number.
fn size(what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::usage(format!("{what} {n} does not fit a HEF's 32-bit sizes")))
}

/// Build the HEF: the layout from the one synthesizer (`hef::synth`), quant infos calibrated on
/// the checkpoint, then the structural mistakes and the simulator's resource.
pub fn synth_hef(ckpt: &Checkpoint, checkpoint: SimCheckpoint, opts: &SynthHefOptions) -> Result<Hef> {
    let c = &ckpt.config;
    let (first, last) = block_range(c.num_layers, opts.layers)?;
    // A prefix outputs its last block's hidden state in place of the logits.
    let mut expose = opts.expose.clone();
    let prefix_out = Tap::Layer(last, LayerTap::Out);
    if last + 1 < c.num_layers && !expose.contains(&prefix_out) {
        expose.push(prefix_out);
    }
    let spec = llm_spec(c, opts, last + 1 - first)?;
    spec.check()?;
    check_options(c, opts)?;
    let model = Decoder::new(ckpt)?;
    let calibration = opts.calibration.clone().map_or_else(|| Calibration::default_for(ckpt), Ok)?;
    check_expose(&expose, (first, last), c.num_layers)?;
    let ranges = calibrate(&model, &calibration, &expose)?;
    let (quant, resources) = contents(ckpt, &model, &ranges, (first, last))?;
    let mut hef = spec.build_with(&quant, &resources)?;
    hef.sdk_version = format!("hefprobe {} synth-hef", env!("CARGO_PKG_VERSION"));
    for &m in &opts.mistakes {
        write_mistake(&mut hef, &spec, m, ranges.quant("final_norm"))?;
    }
    if last + 1 < c.num_layers {
        for g in &mut hef.groups {
            g.outputs.clear();
        }
    }
    expose_outputs(&mut hef, &spec, &ranges, &expose, opts.expose_quant)?;
    let sim = SimSpec {
        schema: SIM_SCHEMA.into(),
        checkpoint,
        faults: opts.faults.clone(),
        quant: opts.quant.setting.clone(),
        mistakes: opts.mistakes.clone(),
        noise: opts.noise,
        calibration: Some(calibration),
        expose: expose.iter().map(Tap::to_string).collect(),
        layers: opts.layers.map(|_| [first, last]),
        inputs: (opts.inputs != crate::hef::llm_config::InputSuffixes::genai()).then(|| opts.inputs.clone()),
        tbt_faults: opts.tbt_faults.clone(),
    };
    hef.resources.push(Resource::new(SIM_RESOURCE, serde_json::to_vec_pretty(&sim).expect("json")));
    Ok(hef)
}

/// The blocks the graph runs, first and last: all of them, or `--layers A..=B`.
fn block_range(num_layers: usize, layers: Option<(usize, usize)>) -> Result<(usize, usize)> {
    match layers {
        None => Ok((0, num_layers - 1)),
        // 0..=L-1 is the whole model: the last prefix a loop over prefixes asks for.
        Some((a, b)) if a <= b && b < num_layers => Ok((a, b)),
        Some((a, b)) => Err(Error::usage(format!(
            "--layers {a}..={b}: give blocks A..=B of this {num_layers}-layer model (A ≤ B < {num_layers})"
        ))),
    }
}

/// The layout's numbers: the checkpoint's shapes and the options' sizes, for `layers` blocks.
fn llm_spec(c: &crate::model::ModelConfig, opts: &SynthHefOptions, layers: usize) -> Result<LlmSpec> {
    Ok(LlmSpec {
        name: opts.name.clone(),
        vocab: size("vocab_size", c.vocab_size)?,
        hidden: size("hidden_size", c.hidden_size)?,
        heads: size("num_attention_heads", c.num_heads)?,
        kv_heads: size("num_key_value_heads", c.num_kv_heads)?,
        head_dim: size("head_dim", c.head_dim)?,
        layers: size("--layers", layers)?,
        prefill_tokens: size("--prefill-tokens", opts.prefill_tokens)?,
        kv_cache_size: size("--kv-cache-size", opts.kv_cache_size)?,
        with_tbt: opts.tbt,
        base_scope: opts.base_scope.map(|f| size("--base-scope", f)).transpose()?,
        lm_head_shards: size("--lm-head-shards", opts.lm_head_shards)?,
        inputs: opts.inputs.clone(),
        contexts: 1,
    })
}

/// The noise, the faults the device computes and the quantization the graph is compiled with,
/// checked before anything is calibrated.
fn check_options(c: &crate::model::ModelConfig, opts: &SynthHefOptions) -> Result<()> {
    if let Some(n) = opts.noise.filter(|n| !(n.std.is_finite() && n.std > 0.0)) {
        return Err(Error::usage(format!("--noise {}: give a standard deviation above 0", n.std)));
    }
    // The device computes these faults; those acting on positions need positions the device
    // never receives (it gets RoPE tables), so they belong in the emulator.
    if !opts.tbt_faults.is_empty() && !opts.tbt {
        return Err(Error::usage("--tbt-fault plants a fault in the tbt group: drop --no-tbt"));
    }
    for f in opts.faults.iter().chain(&opts.tbt_faults) {
        if opts.tbt_faults.contains(f) && catalog::on_device(f) != OnDevice::Frames {
            return Err(Error::usage(format!(
                "--tbt-fault `{f}`: only a fault the graph computes on its frames can be planted in the tbt \
                 group alone (not one realized in the cache ring, or one on positions)"
            )));
        }
        if catalog::on_device(f) == OnDevice::Never {
            return Err(Error::usage(format!(
                "fault `{f}` acts on positions, which a device never receives (it gets RoPE tables); \
                 use it with the emulator backend"
            )));
        }
        crate::fault::catalog::build(f, c)?;
    }
    // The quantization the graph is compiled with is checked now, not when the HEF is used.
    if let Some(q) = &opts.quant.spec {
        crate::fault::catalog::build(q, c)
            .map_err(|e| Error::usage(format!("--quant {}: {e}", opts.quant.setting)))?;
    }
    Ok(())
}

/// An exposed tap must be one of the graph's own blocks' outputs, or final_norm of a graph that
/// ends with the model.
fn check_expose(expose: &[Tap], (first, last): (usize, usize), num_layers: usize) -> Result<()> {
    for &t in expose {
        let inside = t.layer().map_or(last + 1 == num_layers, |l| (first..=last).contains(&l));
        if !t.exposable() || !inside {
            return Err(Error::usage(format!(
                "--expose `{t}`: a HEF can output its own blocks' taps (layers.I.out, layers.I.attn.probs, ...; \
                 {first} ≤ I ≤ {last}) and, when it ends with the model, final_norm; the embeddings are looked up on \
                 the host and the logits are output anyway"
            )));
        }
    }
    Ok(())
}

/// What the layout carries from the checkpoint: the quant infos calibrated on it (a suffix's
/// first input at the hidden state entering its first block) and the four genai resources.
fn contents(
    ckpt: &Checkpoint,
    model: &Decoder,
    ranges: &Ranges,
    (first, last): (usize, usize),
) -> Result<(LlmQuant, LlmResources)> {
    let c = &ckpt.config;
    // Widened from the stored dtype (exact): the HEF's embedding table is written from f32.
    let embed = ckpt.tensor("model.embed_tokens.weight")?.to_dtype(candle_core::DType::F32)?;
    let (elo, ehi) = (embed.min_all()?.to_scalar::<f32>()?, embed.max_all()?.to_scalar::<f32>()?);
    let emb_q = {
        let a = Affine::calibrate(elo, ehi, 16, false);
        QuantInfo { zp: a.zp, scale: a.scale, min: elo, max: ehi }
    };
    // A suffix's first input is the hidden state entering its first block: that range.
    let input_q = match first {
        0 => emb_q,
        a => ranges.quant(&format!("out.{}", a - 1)),
    };
    let embeddings: Vec<u16> = embed
        .flatten_all()?
        .to_vec1::<f32>()?
        .iter()
        .map(|&x| emb_q.quantize(x).clamp(0.0, 65535.0) as u16)
        .collect();
    // theta: head_dim values, the rotate-half frequencies duplicated, so cos/sin of the
    // whole head come straight out of genai's tables.
    let half = &model.rope.inv_freq;
    let theta: Vec<f32> = (0..c.head_dim).map(|i| half[i % half.len()]).collect();
    let quant = LlmQuant {
        embeddings: input_q,
        mask: LlmQuant::MASK,
        rope: LlmQuant::ROPE,
        logits: ranges.quant("logits"),
        caches: (first..=last).map(|l| ranges.quant(&format!("cache.{l}"))).map(|q| (q, q)).collect(),
    };
    let resources = LlmResources {
        embeddings,
        theta,
        // The checkpoint's own tokenizer, as a compiled LLM HEF carries it; for synthesized
        // weights the synth one, cut to the vocabulary: an id the tokenizer gives must have an
        // embeddings row and a logit (audit's embeddings-rows and logits-width).
        tokenizer: match crate::model::tokenizer::Tokenizer::of_checkpoint(ckpt)? {
            Some(t) => t.to_json()?.into_bytes(),
            None => {
                crate::model::tokenizer::synth_tokenizer_json_within(c.vocab_size).to_string().into_bytes()
            }
        },
        eos_token_id: c.eos_token_id.unwrap_or(2),
        stop_token_ids: Vec::new(),
    };
    Ok((quant, resources))
}

/// Edit a correct layout into one of the findings' mistakes. `final_norm` is the quant info of
/// the hidden state a graph without lm_head would output.
fn write_mistake(hef: &mut Hef, spec: &LlmSpec, mistake: Mistake, final_norm: QuantInfo) -> Result<()> {
    let prefill = spec.prefill_name();
    for g in &mut hef.groups {
        match mistake {
            Mistake::MissingLmHead => {
                g.outputs.truncate(1);
                for s in &mut g.outputs {
                    (s.shape.features, s.padded.features, s.quant) = (spec.hidden, spec.hidden, final_norm);
                }
            }
            Mistake::FullSequenceOutput if g.name == prefill => {
                for s in &mut g.outputs {
                    (s.shape.width, s.padded.width) = (spec.prefill_tokens, spec.prefill_tokens);
                }
            }
            Mistake::FullSequenceOutput | Mistake::MisspelledConfigKey => {}
            Mistake::WrongRopeWidth => {
                let q =
                    [LlmInput::QCos.name(&g.name, &spec.inputs), LlmInput::QSin.name(&g.name, &spec.inputs)];
                for s in g.inputs.iter_mut().filter(|s| q.contains(&s.name)) {
                    let width = spec.head_dim * spec.kv_heads;
                    (s.shape.features, s.padded.features) = (width, width);
                }
            }
        }
    }
    if mistake == Mistake::MisspelledConfigKey {
        misspell_prefill_key(hef)?;
    }
    Ok(())
}

/// hailo-config.json with `prefill_input_tokens_size` for `prefill_input_tokens_count` (finding 5),
/// in the same place among the keys.
fn misspell_prefill_key(hef: &mut Hef) -> Result<()> {
    let what = "synthesized hailo-config.json";
    let r = hef
        .resources
        .iter_mut()
        .find(|r| r.name == llm_config::RESOURCE)
        .ok_or_else(|| Error::input(what, "missing"))?;
    let mut root: serde_json::Value =
        serde_json::from_slice(&r.data).map_err(|e| Error::input(what, e.to_string()))?;
    let Some(serde_json::Value::Object(pre)) = root.get_mut("pre_process_params") else {
        return Err(Error::input(what, "has no pre_process_params"));
    };
    *pre = std::mem::take(pre)
        .into_iter()
        .map(|(k, v)| {
            (if k == "prefill_input_tokens_count" { "prefill_input_tokens_size".into() } else { k }, v)
        })
        .collect();
    *r = Resource::new(llm_config::RESOURCE, serde_json::to_vec_pretty(&root).expect("json"));
    Ok(())
}

/// Read `hefprobe-sim.json` from a HEF: None when the HEF is not one hefprobe wrote.
pub fn sim_spec(hef: &Hef, what: &str) -> Result<Option<SimSpec>> {
    let Some(bytes) = hef.resource(SIM_RESOURCE) else { return Ok(None) };
    let spec: SimSpec = serde_json::from_slice(bytes).map_err(|e| {
        Error::input(format!("{what} resource {SIM_RESOURCE}"), format!("not a valid simulator spec: {e}"))
    })?;
    if spec.schema != SIM_SCHEMA {
        return Err(Error::input(
            format!("{what} resource {SIM_RESOURCE}"),
            format!("schema `{}`; this hefprobe reads `{SIM_SCHEMA}`", spec.schema),
        ));
    }
    Ok(Some(spec))
}

impl SimCheckpoint {
    pub fn load(&self) -> Result<Checkpoint> {
        match self {
            SimCheckpoint::Synth(s) => s.build(),
            SimCheckpoint::Path { path, hash } => {
                let c = Checkpoint::load(path)?;
                if &c.hash != hash {
                    return Err(Error::input(
                        path.display().to_string(),
                        format!(
                            "checkpoint hash {} differs from {hash} the simulated HEF was made from",
                            c.hash
                        ),
                    ));
                }
                Ok(c)
            }
        }
    }
}

crate::named_enum! {
    /// Which input carries what (`--input-map`): genai's default suffixes, or the map the
    /// exporter writes into hailo-config.json (RoPE inputs in another order: finding 51's HEFs).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum InputMap {
        #[default]
        Genai = "genai",
        Exporter = "exporter",
    }
}

impl InputMap {
    pub fn suffixes(self) -> crate::hef::llm_config::InputSuffixes {
        match self {
            InputMap::Genai => crate::hef::llm_config::InputSuffixes::genai(),
            InputMap::Exporter => crate::hef::llm_config::InputSuffixes::exporter(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u16_quant_covers_the_range() {
        let q = u16_quant(-3.0, 5.0);
        assert!(q.dequantize(0.0) < -3.0 && q.dequantize(65535.0) > 5.0);
        assert!((q.dequantize(q.quantize(1.25)) - 1.25).abs() < q.scale);
    }
}
