//! `hefprobe reference`: the float32 reference's taps, streamed into a capture file or held.

use crate::capture::{Capture, MemorySink, NpzSink};
use crate::error::{Error, Result};
use crate::inputs::InputSet;
use crate::model::hooks::NoHooks;
use crate::model::memory::{self, TapsHeld};
use crate::model::run::{run_inputs, RunRecord};
use crate::model::{Checkpoint, CheckpointRef, Decoder};
use crate::output::Outputs;
use crate::probe::schema::InputsSpec;
use crate::tap::TapSelection;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct Reference {
    pub model: CheckpointRef,
    pub inputs: InputsSpec,
    /// Taps to record.
    pub taps: TapSelection,
    /// The capture file the taps stream into; None holds them in memory.
    pub out: Option<PathBuf>,
    /// Also run candle-transformers' own model on the same weights (an independent check).
    pub crosscheck: bool,
}

/// What `reference` ran and recorded.
pub struct Referenced {
    pub ckpt: Checkpoint,
    pub inputs: InputSet,
    pub record: RunRecord,
    /// The taps, when held in memory.
    pub capture: Option<Capture>,
    /// Tensors written into the capture file.
    pub written: usize,
    /// Candle-transformers' last-position logits against the reference's: steps, worst cosine,
    /// worst max |diff|.
    pub crosscheck: Option<(usize, f64, f64)>,
    /// What stopped the run; what finished is kept.
    pub error: Option<Error>,
}

impl Reference {
    pub fn run(&self) -> Result<Referenced> {
        if let Some(o) = &self.out {
            let mut outs = Outputs::new();
            self.model.register("the checkpoint", &mut outs)?;
            if let Some(t) = &self.inputs.tokenizer {
                outs.input("the tokenizer", t);
            }
            outs.binary("-o", o).check()?;
        }
        let selection = self.taps.clone();
        let ckpt = self.model.load()?;
        let inputs = self.inputs.input_set(&ckpt)?;
        if self.crosscheck && inputs.start_position != 0 {
            return Err(Error::usage("--crosscheck runs from position 0; drop --start-position"));
        }
        selection.check_against(ckpt.config.num_layers)?;
        let held = if self.out.is_some() { TapsHeld::Streamed } else { TapsHeld::InMemory { captures: 1 } };
        memory::check_run(&ckpt, &inputs, &selection, held)?;
        let model = Decoder::new(&ckpt)?;
        let mut record = RunRecord::default();
        let (capture, written, error) = match &self.out {
            Some(path) => {
                let mut sink = NpzSink::create(path, selection)?;
                let result = run_inputs(&model, &inputs, &mut sink, &mut NoHooks, &mut record);
                // Keep what was finished even when a later phase failed.
                sink.finish()?;
                (None, sink.written, result.err())
            }
            None => {
                let mut sink = MemorySink::new(selection);
                let result = run_inputs(&model, &inputs, &mut sink, &mut NoHooks, &mut record);
                (Some(sink.capture), 0, result.err())
            }
        };
        let crosscheck = match (self.crosscheck, &error) {
            (true, None) => Some(crate::compare::crosscheck::logits(&ckpt, &model, &inputs, &record)?),
            _ => None,
        };
        Ok(Referenced { ckpt, inputs, record, capture, written, crosscheck, error })
    }
}
