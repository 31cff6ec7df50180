//! `hefprobe bisect plan | run | next`: locate the first drifting layer on the device with
//! prefix HEFs ([`crate::diagnose::bisect`]); `next` names the one to compile when they are
//! compiled on demand.

use crate::diagnose::bisect::{cut_points, prefixes, Bisected, Search};
use crate::error::{Error, Result};
use crate::model::CheckpointRef;
use crate::probe::schema::{InputsSpec, Probe};
use std::path::PathBuf;

/// `bisect plan`: the cut points of the search for a model, and how to compile each prefix.
#[derive(Debug, Clone)]
pub struct BisectPlan {
    pub model: CheckpointRef,
}

/// `bisect run` (`next`: run what the folder holds and name the prefix to compile next, as
/// `git bisect` does).
#[derive(Debug, Clone, Default)]
pub struct Bisect {
    /// The folder of prefix HEFs (any names ending in .hef).
    pub dir: PathBuf,
    /// The probe whose inputs, thresholds and checkpoint each prefix runs with.
    pub probe: Option<PathBuf>,
    /// The model in place of the probe's.
    pub model: Option<CheckpointRef>,
    /// The prompt in place of the probe's inputs.
    pub inputs: Option<InputsSpec>,
    pub next: bool,
    pub command: String,
}

impl BisectPlan {
    pub fn run(&self) -> Result<Bisected> {
        let ckpt = super::load_noting(&self.model)?;
        Ok(cut_points(&ckpt))
    }
}

impl Bisect {
    /// The probe each prefix runs: the `probe` file (its inputs replaced by a prompt given
    /// here), or one made of the model and prompt given here, with the default thresholds.
    fn probe(&self) -> Result<Probe> {
        let mut probe = match (&self.probe, &self.inputs) {
            (Some(p), _) => crate::probe::catalog::open(p)?,
            (None, Some(inputs)) if self.model.is_some() => {
                Probe::of_inputs("bisect", Default::default(), inputs.clone())
            }
            _ => {
                return Err(Error::usage(
                    "bisect without --probe needs the model: give --checkpoint DIR or --synth PRESET",
                ))
            }
        };
        if let Some(inputs) = &self.inputs {
            probe.inputs = inputs.clone();
        }
        Ok(probe)
    }

    pub fn run(&self) -> Result<Bisected> {
        let probe = self.probe()?;
        let ckpt = match &self.model {
            Some(c) => c.load()?,
            None => probe.checkpoint.to_ref()?.load()?,
        };
        let l = ckpt.config.num_layers;
        let have = prefixes(&self.dir, l)?;
        let search = Search {
            dir: &self.dir,
            probe: &probe,
            model: self.model.as_ref(),
            next: self.next,
            command: &self.command,
        };
        search.run(l, &have)
    }
}
