//! The reference and the emulator: the float32 decoder, with fault models (none for the
//! reference) and, for the local view, overrides.

use super::overrides::Overrides;
use super::{Backend, BackendRun, Capabilities};
use crate::capture::Capture;
use crate::error::Result;
use crate::fault::Fault;
use crate::model::hooks::{HookStack, Hooks};
use crate::model::run::{run_inputs, RunRecord};
use crate::model::{Checkpoint, Decoder};
use crate::probe::inputs::InputSet;
use crate::tap::{MemorySink, TapSelection};
use std::sync::Arc;

pub struct DecoderBackend {
    name: String,
    model: Arc<Decoder>,
    faults: Vec<Box<dyn Fault>>,
}

impl DecoderBackend {
    pub fn reference(model: Arc<Decoder>) -> Self {
        DecoderBackend { name: "reference".into(), model, faults: Vec::new() }
    }

    /// The emulator: the reference with `faults` applied, weights transformed first.
    pub fn emulator(name: &str, ckpt: &Checkpoint, faults: Vec<Box<dyn Fault>>) -> Result<Self> {
        let mut ckpt = ckpt.clone();
        for f in &faults {
            f.transform_weights(&mut ckpt)?;
        }
        Ok(DecoderBackend { name: name.to_string(), model: Arc::new(Decoder::new(&ckpt)?), faults })
    }

    /// Add a quantization configuration (`quant` fault spec parameters, e.g. `w8a16`).
    pub fn with_quant(mut self, quant: &str, ckpt: &Checkpoint) -> Result<Self> {
        let spec = if quant.starts_with("quant") { quant.to_string() } else { format!("quant:{quant}") };
        let fault = crate::fault::catalog::parse(&spec, &ckpt.config)?;
        let mut ckpt = ckpt.clone();
        for f in self.faults.iter().chain(std::iter::once(&fault)) {
            f.transform_weights(&mut ckpt)?;
        }
        self.model = Arc::new(Decoder::new(&ckpt)?);
        self.faults.push(fault);
        Ok(self)
    }

    /// What the faults did during the last run (quantizer scales, clip rates).
    pub fn notes(&self) -> Vec<String> {
        self.faults.iter().flat_map(|f| f.notes()).collect()
    }

    pub fn model(&self) -> &Arc<Decoder> {
        &self.model
    }

    fn run_with(&self, inputs: &InputSet, taps: &TapSelection, overrides: Option<&Capture>) -> BackendRun {
        let mut sink = MemorySink::new(taps.clone());
        let mut record = RunRecord::default();
        for f in &self.faults {
            if let Err(error) = f.prepare(&self.model, std::slice::from_ref(inputs)) {
                return BackendRun { capture: Capture::default(), record, error: Some(error) };
            }
        }
        let mut fault_hooks: Vec<Box<dyn Hooks + '_>> = self.faults.iter().map(|f| f.hooks()).collect();
        let mut ov = overrides.map(|reference| Overrides { reference });
        let mut stack = HookStack::default();
        if let Some(o) = ov.as_mut() {
            stack.hooks.push(o);
        }
        for h in fault_hooks.iter_mut() {
            stack.hooks.push(h.as_mut());
        }
        let error = run_inputs(&self.model, inputs, &mut sink, &mut stack, &mut record).err();
        BackendRun { capture: sink.capture, record, error }
    }
}

impl Backend for DecoderBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { all_taps: true, overrides: true }
    }

    fn run(&mut self, inputs: &InputSet, taps: &TapSelection) -> BackendRun {
        self.run_with(inputs, taps, None)
    }

    fn run_local(
        &mut self,
        inputs: &InputSet,
        taps: &TapSelection,
        reference: &Capture,
    ) -> Option<BackendRun> {
        Some(self.run_with(inputs, taps, Some(reference)))
    }
}
