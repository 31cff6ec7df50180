//! `hefprobe synth-hef`: write a simulated LLM HEF for a checkpoint (see device::synth_hef),
//! with the taps to expose and the calibration set chosen here.

use super::Request;
pub use crate::device::synth_hef::Calibrate;
use crate::device::synth_hef::{
    synth_hef, Calibration, ExposeQuant, Mistake, SimCheckpoint, SimNoise, SynthHefOptions,
};
use crate::error::{Error, Result};
use crate::fault::spec::FaultSpec;
use crate::model::CheckpointRef;
use crate::tap::{Tap, TapSelection};
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct SynthHef {
    pub model: CheckpointRef,
    pub out: PathBuf,
    pub prefill_tokens: usize,
    pub kv_cache_size: usize,
    pub tbt: bool,
    /// Faults the device computes.
    pub faults: Vec<FaultSpec>,
    /// Quantization of the compiled graph (`a16`, `w8a16`, ..., `none`).
    pub quant: String,
    pub lm_head_shards: usize,
    pub mistakes: Vec<Mistake>,
    pub calibration: Calibrate,
    /// Run-to-run noise in the logits: its standard deviation and seed.
    pub noise: Option<(f32, u64)>,
    /// Taps output beside the logits.
    pub expose: Option<TapSelection>,
    pub expose_quant: ExposeQuant,
    /// Only blocks A..=B.
    pub layers: Option<(usize, usize)>,
    /// A third, cache-less group of this many positions (the exporter's base scope).
    pub base_scope: Option<usize>,
    /// Which input is which: genai's default suffixes, or the exporter's map.
    pub input_map: InputMap,
    /// Faults only the tbt group computes.
    pub tbt_faults: Vec<FaultSpec>,
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

impl Request for SynthHef {
    type Output = Written;

    fn run(&self) -> Result<Written> {
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
        let (calibration, calibration_note) = Calibration::asked(&self.calibration, &ckpt)?;
        let opts = SynthHefOptions {
            prefill_tokens: self.prefill_tokens,
            kv_cache_size: self.kv_cache_size,
            tbt: self.tbt,
            faults: self.faults.clone(),
            quant: self.quant.clone(),
            lm_head_shards: self.lm_head_shards,
            mistakes: self.mistakes.clone(),
            calibration: Some(calibration),
            noise: self.noise.map(|(std, seed)| SimNoise { std, seed }),
            expose: self.expose.as_ref().map_or(Ok(Vec::new()), |g| {
                crate::device::exposed::selected(g, ckpt.config.num_layers, self.layers)
            })?,
            expose_quant: self.expose_quant,
            layers: self.layers,
            base_scope: self.base_scope,
            inputs: self.input_map.suffixes(),
            tbt_faults: self.tbt_faults.clone(),
            ..Default::default()
        };
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
