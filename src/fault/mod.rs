//! Fault models: known mechanisms of numeric drift, each injectable into the reference so the
//! emulator can reproduce (and `explain` can rank) what a device does.

pub mod catalog;
pub mod quant;
pub mod spec;

use crate::error::Result;
use crate::inputs::InputSet;
use crate::model::hooks::Hooks;
use crate::model::{Checkpoint, Decoder};

/// A fault model. `hooks` is called once per run, so stateful hooks start fresh.
pub trait Fault: Send + Sync {
    /// The spec that reproduces this fault: `NAME[:PARAMS][@layers=RANGE]`.
    fn spec(&self) -> String;
    /// Change the weights before the run (weight quantization, sharded lm_head scales).
    fn transform_weights(&self, _ckpt: &mut Checkpoint) -> Result<()> {
        Ok(())
    }
    /// Calibrate on these inputs (quantization); called before every run with the run's own.
    fn prepare(&self, _model: &Decoder, _inputs: &[InputSet]) -> Result<()> {
        Ok(())
    }
    fn hooks(&self) -> Box<dyn Hooks + '_>;
    /// What the fault did, for reports (e.g. each quantizer's scale, zero point, clip rate).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}
