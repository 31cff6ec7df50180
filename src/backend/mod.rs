//! Backends: everything that turns an InputSet into a Capture. One trait, in the spirit of
//! Polygraphy's runners: name, check, capabilities, run.

pub mod decoder;
pub mod dump;
pub mod overrides;

use crate::capture::Capture;
use crate::error::Error;
use crate::model::run::RunRecord;
use crate::probe::inputs::InputSet;
use crate::tap::TapSelection;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Produces every canonical tap (false: only what it records, e.g. a device's logits).
    pub all_taps: bool,
    /// Accepts overrides (each layer fed the reference's input) for the local view.
    pub overrides: bool,
}

/// What a run produced. On failure `error` is set and `capture` holds what finished.
pub struct BackendRun {
    pub capture: Capture,
    pub record: RunRecord,
    pub error: Option<Error>,
}

pub trait Backend {
    fn name(&self) -> &str;
    /// Whether it can run here, and if not, why, in one sentence.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
    fn capabilities(&self) -> Capabilities;
    /// Run every phase of `inputs` (decode teacher-forced: greedy is resolved beforehand).
    fn run(&mut self, inputs: &InputSet, taps: &TapSelection) -> BackendRun;
    /// Run with every layer fed the reference's own input (`reference` holds `embed` and
    /// `layers.*.out`). Only for backends whose capabilities say `overrides`.
    fn run_local(
        &mut self,
        _inputs: &InputSet,
        _taps: &TapSelection,
        _reference: &Capture,
    ) -> Option<BackendRun> {
        None
    }
}
