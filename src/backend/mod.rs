//! Backends: everything that turns an InputSet into a Capture. One trait, in the spirit of
//! Polygraphy's runners: name, check, capabilities, run.

pub mod decoder;
pub mod dump;
pub mod hef;
pub mod overrides;
pub mod spec;

pub use spec::{BackendKind, BackendSpec};

use crate::capture::Capture;
use crate::error::{Error, Result};
use crate::inputs::InputSet;
use crate::model::run::RunRecord;
use crate::model::{Checkpoint, Decoder};
use crate::tap::TapSelection;
use decoder::DecoderBackend;
use std::path::Path;
use std::sync::Arc;

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

/// What a run into a file produced ([`Backend::run_to_file`]): the capture is the `.npz`,
/// complete up to `error` when the run stopped.
pub struct FileRun {
    pub record: RunRecord,
    pub error: Option<Error>,
}

impl BackendRun {
    /// Write the capture to `path` (quietly: the caller says where captures went) and keep
    /// only the record: the default of the `_to_file` methods, for backends that build their
    /// capture in memory.
    fn into_file(self, path: &Path) -> Result<FileRun> {
        self.capture.write_npz_quiet(path)?;
        Ok(FileRun { record: self.record, error: self.error })
    }
}

pub trait Backend {
    fn name(&self) -> &str;
    /// Whether it can run here, and if not, why, in one sentence.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
    fn capabilities(&self) -> Capabilities;
    /// When this backend is only comparable with a reference whose attention sees the last K
    /// keys (a device whose KV cache ring is shorter than the conversation): K, and the note
    /// the report shows about it.
    fn reference_window(&self, _inputs: &InputSet) -> Option<(usize, String)> {
        None
    }
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
    /// [`Backend::run`] with the capture written to the `.npz` at `path` instead of returned
    /// (`run` over the memory budget spills captures to disk). This default builds the whole
    /// capture in memory first and writes it after: right for backends whose capture comes
    /// whole anyway (a dump file, read at open) or is small (a HEF's outputs, a few taps per
    /// phase). The decoder streams each tap to the file as it is produced instead.
    fn run_to_file(&mut self, inputs: &InputSet, taps: &TapSelection, path: &Path) -> Result<FileRun> {
        self.run(inputs, taps).into_file(path)
    }
    /// [`Backend::run_local`] into the `.npz` at `path`; same default as [`Backend::run_to_file`].
    fn run_local_to_file(
        &mut self,
        inputs: &InputSet,
        taps: &TapSelection,
        reference: &Capture,
        path: &Path,
    ) -> Option<Result<FileRun>> {
        self.run_local(inputs, taps, reference).map(|r| r.into_file(path))
    }
}

/// Build a backend from its spec. `model` is the reference decoder of `ckpt`.
pub fn make_backend(spec: &BackendSpec, ckpt: &Checkpoint, model: &Arc<Decoder>) -> Result<Box<dyn Backend>> {
    let label = spec.label();
    Ok(match spec.kind {
        BackendKind::Reference => Box::new(DecoderBackend::reference(model.clone())),
        BackendKind::Emulator => {
            Box::new(DecoderBackend::emulator(&label, ckpt, &spec.faults, spec.quant.as_deref())?)
        }
        BackendKind::Dump => Box::new(dump::DumpBackend::open(&label, spec.path()?, spec.map.as_deref())?),
        BackendKind::Hef => Box::new(hef::open(&label, spec.path()?, spec.sim_profile()?, ckpt)?),
    })
}
