//! The device-side requests: `capture` (replay an InputSet on a device host and record what the
//! HEF returns) and `diagnose` (repeatability, prefill/decode parity, cache diff).

use crate::backend::hef::{open, open_hef};
use crate::capture::MemorySink;
use crate::device::driver::write_frames;
use crate::device::SimProfile;
use crate::diagnose::diagnosis::{Diagnosed, Diagnosis};
use crate::error::{Error, Result};
use crate::inputs::InputSet;
use crate::model::{CheckpointRef, Decoder};
use crate::output::Outputs;
use crate::probe::schema::InputsSpec;
use crate::report::ReportTarget;
use crate::tap::TapSelection;
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct CaptureRun {
    /// The HEF (simulated, or real with --features hailo).
    pub hef: PathBuf,
    /// The InputSet to replay (from `run --save-inputs`).
    pub inputs: PathBuf,
    /// The capture: PHASE/logits per phase, as the device returned them.
    pub out: PathBuf,
    /// Also record every frame sent.
    pub record_frames: Option<PathBuf>,
    pub device: Option<SimProfile>,
    /// The network group to run (`--group`; genai's choice when None).
    pub group: Option<String>,
}

/// What `capture` recorded: the device, the phases it wrote, and what stopped it (what finished
/// is written).
pub struct Captured {
    pub description: String,
    pub phases: usize,
    pub error: Option<Error>,
}

impl CaptureRun {
    pub fn run(&self) -> Result<Captured> {
        let mut outs = Outputs::new();
        outs.input("the HEF", &self.hef).input("--inputs", &self.inputs).binary("-o", &self.out);
        if let Some(p) = &self.record_frames {
            outs.binary("--record-frames", p);
        }
        outs.check()?;
        let inputs = InputSet::from_npz(&self.inputs)?;
        let mut backend = open_hef("device", &self.hef, self.device, self.group.as_deref())?;
        if self.record_frames.is_some() {
            backend.driver.record = Some(Vec::new());
        }
        let mut sink = MemorySink::new(TapSelection::all());
        let result = backend.drive(&inputs, &TapSelection::all(), &mut sink, &mut Default::default());
        let (cap, error) = (sink.capture, result.err());
        let description = backend.description.clone();
        // A run refused or stopped before its first phase writes nothing over the capture; one
        // stopped half-way keeps what finished, and says so (the error follows).
        if cap.phases().is_empty() {
            return Ok(Captured { description, phases: 0, error });
        }
        if error.is_some() {
            crate::errln!("note: the run stopped; {} holds the phases that finished", self.out.display());
        }
        cap.write_npz(&self.out)?;
        if let (Some(p), Some(frames)) = (&self.record_frames, backend.driver.record.as_ref()) {
            write_frames(frames, p)?;
        }
        Ok(Captured { description, phases: cap.phases().len(), error })
    }
}

#[derive(Debug, Clone)]
pub struct Diagnose {
    pub hef: PathBuf,
    /// The checkpoint the HEF was compiled from (the reference for parity and cache diff).
    pub model: CheckpointRef,
    pub inputs: InputsSpec,
    /// Runs of the repeatability gate.
    pub repeat: usize,
    /// Cache entries may differ from the reference's by this many quantization steps.
    pub lsb_tolerance: Option<u32>,
    pub device: Option<SimProfile>,
    /// The prefill group to diagnose (`--group`; genai's choice when None).
    pub group: Option<String>,
    pub reports: Vec<ReportTarget>,
    pub command: String,
}

impl Diagnose {
    pub fn run(&self) -> Result<Diagnosed> {
        let mut outs = Outputs::new();
        outs.input("the HEF", &self.hef);
        self.model.register("the checkpoint", &mut outs)?;
        if let Some(t) = &self.inputs.tokenizer {
            outs.input("the tokenizer", t);
        }
        crate::report::register::<Diagnosed>(&self.reports, &mut outs)?;
        outs.check()?;
        let ckpt = super::load_noting(&self.model)?;
        let mut inputs = self.inputs.input_set(&ckpt)?;
        inputs.chunk = None;
        let model = Decoder::new(&ckpt)?;
        let mut backend = open("device", &self.hef, (self.device, self.group.as_deref()), &ckpt)?;
        let device = backend.description.clone();
        let diagnosis = Diagnosis::of(&mut backend, &model, &inputs, self.repeat, self.lsb_tolerance)?;
        Ok(Diagnosed { diagnosis, device, hef: self.hef.clone(), command: self.command.clone() })
    }
}
