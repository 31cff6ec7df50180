//! `hefprobe synth-hef`: write a simulated LLM HEF for a checkpoint (see device::synth_hef).

pub use crate::device::synth_hef::Calibrate;
use crate::device::synth_hef::{synth_hef, Calibration, SimCheckpoint, SynthHefOptions, Written};
use crate::error::Result;
use crate::model::CheckpointRef;
use crate::tap::TapSelection;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct SynthHef {
    pub model: CheckpointRef,
    pub out: PathBuf,
    /// What to write, but for what needs the checkpoint: `run` fills `calibration` and `expose`
    /// from the two fields below.
    pub opts: SynthHefOptions,
    pub calibration: Calibrate,
    /// Taps output beside the logits.
    pub expose: Option<TapSelection>,
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
        let expose = self.expose.as_ref().map_or(Ok(Vec::new()), |g| {
            crate::device::exposed::selected(g, ckpt.config.num_layers, self.opts.layers)
        })?;
        let opts = SynthHefOptions { calibration: Some(calibration), expose, ..self.opts.clone() };
        let hef = synth_hef(&ckpt, source, &opts)?;
        crate::files::write_file(&self.out, hef.to_bytes())?;
        Ok(Written::of(&self.out, &hef, &ckpt, &opts, calibration_note))
    }
}
