//! Requests: what each command is asked to do, apart from how it was asked. `cli/` builds them
//! from flags, the Python module from keyword arguments; nothing below sees either. Each has one
//! `run`, which checks every input and output before anything is computed or written and returns
//! typed results: a result a command writes is a [`crate::report::Document`], which `cli/` hands
//! to [`crate::report::deliver`] and turns into an exit code, and Python into objects
//! (Polygraphy's split of its comparator from the flags that drive it).

pub mod audit;
pub mod bisect;
pub mod device;
pub mod faults;
pub mod pattern;
pub mod reduce;
pub mod reference;
pub mod run;
pub mod suite;
pub mod sweep;
pub mod synth_hef;
pub mod trend;
pub mod verify;

use crate::error::Result;
use crate::model::{Checkpoint, CheckpointRef};
use crate::output::Outputs;

/// The model, with config.json's unknown keys noted on stderr (stdout may be JSON).
pub fn load_noting(model: &CheckpointRef) -> Result<Checkpoint> {
    let ckpt = model.load()?;
    crate::probe::prepare::note_unknown_keys(&ckpt);
    Ok(ckpt)
}

/// Register a checkpoint, when one is given, with the output checks.
pub fn register_checkpoint(checkpoint: Option<&CheckpointRef>, outs: &mut Outputs) -> Result<()> {
    checkpoint.map_or(Ok(()), |c| c.register("the checkpoint", outs))
}
