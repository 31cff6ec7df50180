//! `hefprobe synth-hef`: write a simulated LLM HEF for a checkpoint (see device::synth_hef),
//! with the taps to expose and the calibration set chosen here.

use super::Request;
use crate::device::synth_hef::{
    synth_hef, Calibration, ExposeQuant, Mistake, SimCheckpoint, SimNoise, SynthHefOptions,
    MAX_CALIBRATION_PROMPTS,
};
use crate::error::{Error, Result};
use crate::model::tokenizer::{Tokenizer, SYNTH_TOKENIZER_VOCAB};
use crate::model::{Checkpoint, CheckpointRef};
use crate::tap::{Tap, TapSelection};
use std::path::PathBuf;

/// Where the calibration set comes from.
#[derive(Debug, Clone, Default)]
pub enum Calibrate {
    /// hefprobe's calibration text through the checkpoint's own tokenizer, or 4 seeded random
    /// prompts when it has none.
    #[default]
    Default,
    /// These prompts (token ids).
    Tokens(Vec<Vec<u32>>),
    /// One prompt per paragraph of this text file, through the checkpoint's tokenizer.
    Text(PathBuf),
    /// 4 seeded random prompts of 64 token ids.
    Random,
}

#[derive(Debug, Clone)]
pub struct SynthHef {
    pub model: CheckpointRef,
    pub out: PathBuf,
    pub prefill_tokens: usize,
    pub kv_cache_size: usize,
    pub tbt: bool,
    /// Faults the device computes.
    pub faults: Vec<String>,
    /// Quantization of the compiled graph (`a16`, `w8a16`, ..., `none`).
    pub quant: String,
    pub lm_head_shards: usize,
    pub mistakes: Vec<String>,
    pub calibration: Calibrate,
    /// Run-to-run noise in the logits: its standard deviation and seed.
    pub noise: Option<(f32, u64)>,
    /// Taps output beside the logits (comma-separated globs).
    pub expose: Option<String>,
    pub expose_quant: ExposeQuant,
    /// Only blocks A..=B.
    pub layers: Option<(usize, usize)>,
    /// A third, cache-less group of this many positions (the exporter's base scope).
    pub base_scope: Option<usize>,
    /// Which input is which: genai's default suffixes, or the exporter's map.
    pub input_map: InputMap,
    /// Faults only the tbt group computes.
    pub tbt_faults: Vec<String>,
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

impl SynthHef {
    /// The options a caller leaves at their defaults (the command line's), with a synthesized
    /// checkpoint and no output yet.
    pub fn options() -> Self {
        SynthHef {
            model: CheckpointRef::Synth(
                crate::model::synth::SynthSpec::preset("tinystories", 0).expect("a built-in preset"),
            ),
            out: PathBuf::new(),
            prefill_tokens: 96,
            kv_cache_size: 2048,
            tbt: true,
            faults: Vec::new(),
            quant: "a16".into(),
            lm_head_shards: 1,
            mistakes: Vec::new(),
            calibration: Calibrate::Default,
            noise: None,
            expose: None,
            expose_quant: ExposeQuant::PerFeature,
            layers: None,
            base_scope: None,
            input_map: InputMap::Genai,
            tbt_faults: Vec::new(),
        }
    }
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
    /// What calibrating had to change to fit the model (prompts cut to its positions), if anything.
    pub calibration_note: Option<String>,
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
        lines.extend(self.calibration_note.as_ref().map(|n| format!("calibration: {n}")));
        lines
    }
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

/// The calibration set asked for (the default when none is), cut to the model's positions:
/// what was cut is said in the second value.
fn calibration(how: &Calibrate, ckpt: &Checkpoint) -> Result<(Calibration, Option<String>)> {
    fit_positions(asked_calibration(how, ckpt)?, ckpt.config.max_position_embeddings)
}

/// A calibration prompt whose run (its tokens, then its greedy steps) passes the model's
/// positions is cut into consecutive windows that fit: every token is still calibrated on, in
/// order, and no run asks for a position the model does not have (hefprobe's calibration text
/// through a byte-level tokenizer is 298 tokens a paragraph, past a 256-position model).
fn fit_positions(mut cal: Calibration, positions: usize) -> Result<(Calibration, Option<String>)> {
    let steps = cal.inputs().first().map_or(0, |i| i.decode.steps());
    let room = positions.saturating_sub(steps);
    if room == 0 {
        return Err(Error::usage(format!(
            "the model has {positions} positions (max_position_embeddings), too few for a calibration prompt and \
             its {steps} greedy steps"
        )));
    }
    let long = cal.prompts.iter().filter(|p| p.len() > room).count();
    if long == 0 {
        return Ok((cal, None));
    }
    let before = cal.prompts.len();
    cal.prompts = cal.prompts.iter().flat_map(|p| p.chunks(room).map(<[u32]>::to_vec)).collect();
    if cal.prompts.len() > MAX_CALIBRATION_PROMPTS {
        return Err(Error::usage(format!(
            "{}: cut to the model's {positions} positions it is {} prompts, more than a calibration set's \
             {MAX_CALIBRATION_PROMPTS}; give fewer or shorter prompts",
            cal.source,
            cal.prompts.len()
        )));
    }
    let note = format!(
        "{}; {long} of its {before} prompts, longer than the model's {positions} positions less {steps} greedy \
         steps, cut into windows of at most {room} tokens: {} prompts",
        cal.source,
        cal.prompts.len()
    );
    cal.source = format!("{}, cut into windows of at most {room} tokens", cal.source);
    Ok((cal, Some(note)))
}

/// The calibration set a flag asks for.
fn asked_calibration(how: &Calibrate, ckpt: &Checkpoint) -> Result<Calibration> {
    let path = match how {
        Calibrate::Default => return Calibration::default_for(ckpt),
        Calibrate::Random => return Ok(Calibration::random(ckpt.config.vocab_size)),
        Calibrate::Tokens(prompts) => {
            let source = format!("--calib-tokens: {} prompts", prompts.len());
            return Ok(Calibration { source, prompts: prompts.clone() });
        }
        Calibrate::Text(path) => path,
    };
    let tok = match Tokenizer::of_checkpoint(ckpt)? {
        Some(t) => t,
        None if ckpt.config.vocab_size >= SYNTH_TOKENIZER_VOCAB => Tokenizer::synth(),
        None => {
            return Err(Error::usage(format!(
                "--calib-text {}: the checkpoint has no tokenizer to read it with; give --calib-tokens",
                path.display()
            )))
        }
    };
    let what = path.display().to_string();
    Calibration::from_text(&crate::files::read_text(path, crate::files::Kind::Calibration)?, &tok, &what)
}

impl Request for SynthHef {
    type Plan = (Checkpoint, SimCheckpoint, SynthHefOptions, Option<String>);
    type Output = Written;

    fn plan(&self) -> Result<Self::Plan> {
        let mut outs = crate::output::Outputs::new();
        self.model.register("the checkpoint", &mut outs)?;
        if let Calibrate::Text(t) = &self.calibration {
            outs.input("--calib-text", t);
        }
        outs.binary("-o", &self.out).check()?;
        let ckpt = super::load_noting(&self.model)?;
        let source = match &self.model {
            c @ CheckpointRef::Path { .. } => {
                let dir = c.resolved()?.expect("a path");
                SimCheckpoint::Path {
                    path: std::fs::canonicalize(&dir).map_err(|e| Error::io(&dir, e))?,
                    hash: ckpt.hash.clone(),
                }
            }
            CheckpointRef::Synth(s) => SimCheckpoint::Synth(s.clone()),
        };
        let (calibration, calibration_note) = calibration(&self.calibration, &ckpt)?;
        let opts = SynthHefOptions {
            prefill_tokens: self.prefill_tokens,
            kv_cache_size: self.kv_cache_size,
            tbt: self.tbt,
            faults: crate::fault::spec::parse_all(&self.faults)?,
            quant: self.quant.clone(),
            lm_head_shards: self.lm_head_shards,
            mistakes: self.mistakes.iter().map(|m| Mistake::parse(m)).collect::<Result<_>>()?,
            calibration: Some(calibration),
            noise: self.noise.map(|(std, seed)| SimNoise { std, seed }),
            expose: self
                .expose
                .as_deref()
                .map_or(Ok(Vec::new()), |g| exposed(g, ckpt.config.num_layers, self.layers))?,
            expose_quant: self.expose_quant,
            layers: self.layers,
            base_scope: self.base_scope,
            inputs: self.input_map.suffixes(),
            tbt_faults: crate::fault::spec::parse_all(&self.tbt_faults)?,
            ..Default::default()
        };
        Ok((ckpt, source, opts, calibration_note))
    }

    fn execute(&self, (ckpt, source, opts, calibration_note): Self::Plan) -> Result<Written> {
        let hef = synth_hef(&ckpt, source, &opts)?;
        crate::files::write_file(&self.out, hef.to_bytes())?;
        Ok(Written {
            path: self.out.clone(),
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
            calibration_note,
        })
    }
}
