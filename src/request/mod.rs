//! Requests: what each command is asked to do, apart from how it was asked. `cli/` builds them
//! from flags, the Python module from keyword arguments; nothing below sees either. Each checks
//! its inputs and outputs in [`Request::plan`], before any compute, and returns typed results
//! from [`Request::execute`]: a result a command writes is a [`crate::report::Document`], which
//! `cli/` hands to [`crate::report::deliver`] and turns into an exit code, and Python into
//! objects (Polygraphy's split of its comparator from the flags that drive it).

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

use crate::backend::BackendSpec;
use crate::error::{Error, Result};
use crate::model::{Checkpoint, CheckpointRef};
use crate::output::Outputs;
use crate::probe::schema::Probe;
use std::path::Path;

/// One command's work: checked, then done.
pub trait Request {
    /// What [`Request::plan`] checked and resolved, for [`Request::execute`].
    type Plan;
    /// What the command returns: a document, a capture, what it wrote.
    type Output;

    /// Check every input and output, before anything is computed or written.
    fn plan(&self) -> Result<Self::Plan>;

    fn execute(&self, plan: Self::Plan) -> Result<Self::Output>;

    /// [`Request::plan`], then [`Request::execute`].
    fn run(&self) -> Result<Self::Output> {
        self.execute(self.plan()?)
    }
}

/// The model, with config.json's unknown keys noted on stderr (stdout may be JSON).
pub fn load_noting(model: &CheckpointRef) -> Result<Checkpoint> {
    let ckpt = model.load()?;
    crate::probe::prepare::note_unknown_keys(&ckpt);
    Ok(ckpt)
}

/// A model given as a checkpoint or a synthesized preset (`--checkpoint`, `--synth` and its
/// seed): the one, or a refusal when neither was given.
pub fn model(checkpoint: Option<CheckpointRef>, synth: Option<&str>, seed: u64) -> Result<CheckpointRef> {
    match (checkpoint, synth) {
        (Some(c), _) => Ok(c),
        (None, Some(p)) => Ok(CheckpointRef::Synth(crate::model::synth::SynthSpec::preset(p, seed)?)),
        (None, None) => {
            Err(Error::usage("no model: give --checkpoint DIR, or --synth PRESET for a synthesized one"))
        }
    }
}

/// Register a checkpoint, when one is given, with the output checks.
pub fn register_checkpoint(checkpoint: Option<&CheckpointRef>, outs: &mut Outputs) -> Result<()> {
    checkpoint.map_or(Ok(()), |c| c.register("the checkpoint", outs))
}

/// What a probe run reads: the probe, its checkpoint (the given `checkpoint` in its place) and
/// tokenizer, every backend's HEF, dump, name map and the HEF a dump came from (the probe's and
/// the given ones).
pub fn probe_inputs(
    probe: &Probe,
    checkpoint: Option<&CheckpointRef>,
    backends: &[BackendSpec],
    outs: &mut Outputs,
) -> Result<()> {
    outs.input("the probe", &probe.path);
    // A checkpoint that does not resolve is the run's to report, naming it.
    let _ = match checkpoint {
        Some(c) => c.register("the checkpoint", outs),
        None => probe.checkpoint.to_ref()?.register("the checkpoint", outs),
    };
    if let Some(t) = &probe.inputs.tokenizer {
        outs.input("the tokenizer", t);
    }
    if let Some(sw) = &probe.sweep {
        for ck in &sw.checkpoints {
            outs.checkpoint("a [sweep] checkpoint", ck);
        }
    }
    for b in probe.backends.iter().chain(backends) {
        if let Some(p) = &b.path {
            outs.input(&format!("backend `{}`'s input", b.label()), p);
        }
        if let Some(m) = &b.map {
            outs.input(&format!("backend `{}`'s name map", b.label()), m);
        }
        if let Some(h) = &b.hef {
            outs.input(&format!("backend `{}`'s HEF", b.label()), h);
        }
    }
    Ok(())
}

/// A bundle's folder, checked before anything runs: a new one in a folder that exists, or an
/// empty one. Nothing is made here: the bundle is written beside it and renamed into place
/// whole ([`crate::probe::bundle::staged`]), so a run that fails leaves no half-made bundle.
fn new_folder(dir: &Path) -> Result<()> {
    let what = dir.display().to_string();
    match std::fs::read_dir(dir).map(|mut e| e.next().is_some()) {
        Ok(true) => Err(Error::input(
            what,
            "--bundle needs a new or empty folder (a bundle's hashes cover every file in it)",
        )),
        Ok(false) => Ok(()),
        Err(_) if dir.exists() => {
            Err(Error::input(what, "--bundle names a file; give a new or empty folder"))
        }
        Err(_) => {
            let parent = crate::probe::bundle::parent(dir);
            match parent.is_dir() {
                true => Ok(()),
                false => Err(Error::input(
                    what,
                    format!(
                        "--bundle: the folder it goes in, {}, does not exist; make it first",
                        parent.display()
                    ),
                )),
            }
        }
    }
}
