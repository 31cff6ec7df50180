//! Running a probe, in named stages that can each be called (and tested) alone, one file each:
//! [`prepare`](super::prepare) (checkpoint, InputSet, taps, thresholds, backends, where captures
//! live), [`backends`](super::backends) (the reference and every backend into captures, the
//! Polygraphy split), [`compared`](super::compared) (compare, locate, local view, logit lens),
//! [`explained`](super::explained) and [`assemble`](super::assemble) (captures saved, the report
//! built from what the stages returned). Whatever finished is kept when something fails.
//!
//! Captures are held in memory while they fit the memory budget. When they do not, a run
//! that may spill ([`CaptureOptions::spill`]) streams every capture to an `.npz` in a
//! temporary folder as it is produced ([`SpillPlan`]); every later stage reads captures
//! through [`Store`](crate::capture::Store), one tap of each side at a time, whichever they are.

use super::assemble::{report, save, Results};
use super::backends::{run_backends, OpenBackend};
use super::compared::compare_runs;
use super::explained::explain_stage;
use super::prepare::prepare;
pub use super::prepare::{ExplainChoice, ProbeOverrides, RunOptions};
use super::runs::Runs;
use super::schema::Probe;
pub use super::spill::{CaptureOptions, SpillPlan};
use crate::error::{Error, Result};
use crate::inputs::InputSet;
use crate::report::Report;

pub struct ProbeRun {
    pub report: Report,
    pub runs: Runs,
    pub inputs: InputSet,
    /// Where the checkpoint came from (for an evidence bundle's hashes).
    pub source: crate::model::weights::CheckpointSource,
    /// The first error that stopped a backend (the report is still complete up to it).
    pub error: Option<Error>,
}

impl ProbeRun {
    /// The run, or the error that stopped it.
    pub fn ok(mut self) -> Result<Self> {
        self.error.take().map_or(Ok(self), Err)
    }
}

/// Every stage in order. Once the backends have run, a stage that fails does not lose the
/// report: the run returns it with what finished, the failure in `incomplete` and in `error`,
/// so the command still writes its reports before it exits non-zero.
pub fn run_probe(probe: &Probe, opts: &RunOptions) -> Result<ProbeRun> {
    run_probe_with(probe, opts, &mut crate::backend::make_backend)
}

/// [`run_probe`], each backend made by `open` (the Python module hands over an `LLM` object
/// as a served model this way).
pub fn run_probe_with(probe: &Probe, opts: &RunOptions, open: &mut OpenBackend) -> Result<ProbeRun> {
    let mut p = prepare(probe, opts)?;
    let stage = crate::alloc::building(&"the backends' runs and their captures");
    let mut runs = run_backends(&mut p, &opts.captures, open)?;
    drop(stage);
    // The stages run in order; the first to fail names itself.
    let (mut compared, mut explained) = (Vec::new(), None);
    let stopped = match compare_runs(&p, &runs, &mut compared) {
        Err(e) => Some(("compare", e)),
        Ok(()) => match explain_stage(&p, &runs, &compared, p.explain.as_ref()) {
            Err(e) => Some(("explain", e)),
            Ok(e) => {
                explained = e;
                save(&runs, &opts.captures).err().map(|e| ("save", e))
            }
        },
    };
    let results = Results {
        prepared: &p,
        runs: &runs,
        compared: &compared,
        explained: explained.as_ref(),
        stopped: stopped.as_ref().map(|(s, e)| (*s, e)),
    };
    let report = report(&results);
    // A stage error names the input at fault; it outranks a backend that stopped.
    let error = stopped.map(|(_, e)| e).or_else(|| runs.backends.iter_mut().find_map(|b| b.error.take()));
    Ok(ProbeRun { report, runs, inputs: p.inputs, source: p.ckpt.source, error })
}
