//! `hefprobe synth-hef`: write a simulated LLM HEF for a checkpoint (see device::synth_hef).

pub use crate::device::synth_hef::Calibrate;
use crate::device::synth_hef::{
    synth_hef, Calibration, ExposeQuant, InputMap, Mistake, Quant, SimCheckpoint, SimNoise, SynthHefOptions,
    Written,
};
use crate::error::Result;
use crate::fault::spec::FaultSpec;
use crate::model::CheckpointRef;
use crate::tap::TapSelection;
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
    pub quant: Quant,
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

impl SynthHef {
    pub fn run(&self) -> Result<Written> {
        let mut outs = crate::output::Outputs::new();
        self.model.register("the checkpoint", &mut outs)?;
        if let Calibrate::Text(t) = &self.calibration {
            outs.input("--calib-text", t);
        }
        outs.binary("-o", &self.out).check()?;
        let ckpt = super::load_noting(&self.model)?;
        let source = SimCheckpoint::of(&self.model, &ckpt)?;
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
        Ok(Written::of(&self.out, &hef, &ckpt, &opts, calibration_note))
    }
}
