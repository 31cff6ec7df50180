//! The reference and the emulator: the float32 decoder, with fault models (none for the
//! reference) and, for the local view, overrides.

use super::overrides::Overrides;
use super::runner::{Backend, Capabilities, Ran};
use crate::capture::{Store, TapSink};
use crate::error::Result;
use crate::fault::spec::FaultSpec;
use crate::fault::Fault;
use crate::inputs::InputSet;
use crate::model::hooks::{HookStack, Hooks};
use crate::model::run::{run_inputs, RunRecord};
use crate::model::{Checkpoint, Decoder};
use crate::tap::TapSelection;
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

    /// The emulator: the reference with the faults of `specs` (`NAME[:PARAMS][@layers=RANGE]`)
    /// and an optional quantization setting (`w8a16`, or a full `quant:...` spec), weights
    /// transformed first. The one builder run, sweep and explain share.
    pub fn emulator(
        name: &str,
        ckpt: &Checkpoint,
        specs: &[FaultSpec],
        quant: Option<&FaultSpec>,
    ) -> Result<Self> {
        let specs: Vec<FaultSpec> = specs.iter().chain(quant).cloned().collect();
        Self::with_faults(name, ckpt, crate::fault::catalog::build_all(&specs, &ckpt.config)?)
    }

    /// The emulator over faults already parsed.
    pub fn with_faults(name: &str, ckpt: &Checkpoint, faults: Vec<Box<dyn Fault>>) -> Result<Self> {
        let mut model = Decoder::new(ckpt)?;
        for f in &faults {
            f.transform_weights(&mut model)?;
        }
        Ok(DecoderBackend { name: name.to_string(), model: Arc::new(model), faults })
    }

    /// This backend with every layer's attention limited to the last `window` keys.
    pub fn windowed(mut self, window: usize) -> Self {
        self.model = Arc::new(self.model.windowed(window));
        self
    }

    pub fn model(&self) -> &Arc<Decoder> {
        &self.model
    }
}

impl Backend for DecoderBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { all_taps: true, overrides: true, fed: false }
    }

    /// What the faults did during the last run (quantizer scales, clip rates).
    fn notes(&self) -> Vec<String> {
        self.faults.iter().flat_map(|f| f.notes()).collect()
    }

    fn run(
        &mut self,
        inputs: &InputSet,
        _taps: &TapSelection,
        feed: Option<&dyn Store>,
        sink: &mut dyn TapSink,
    ) -> Ran {
        let mut record = RunRecord::default();
        for f in &self.faults {
            if let Err(error) = f.prepare(&self.model, std::slice::from_ref(inputs)) {
                return Ran { record, error: Some(error) };
            }
        }
        let mut fault_hooks: Vec<Box<dyn Hooks + '_>> = self.faults.iter().map(|f| f.hooks()).collect();
        let mut ov = feed.map(|reference| Overrides { reference });
        let mut stack = HookStack::default();
        if let Some(o) = ov.as_mut() {
            stack.hooks.push(o);
        }
        stack.hooks.extend(fault_hooks.iter_mut().map(|h| h.as_mut() as &mut dyn Hooks));
        let error = run_inputs(&self.model, inputs, sink, &mut stack, &mut record).err();
        Ran { record, error }
    }
}
