//! `hefprobe reduce`: shrink a probe's inputs while the same drift reproduces, and write the
//! minimal probe (`probe::reduce`). The file is rewritten after each smaller reproduction, so
//! Ctrl-C keeps the best found so far.

use crate::backend::BackendSpec;
use crate::error::Result;
use crate::model::CheckpointRef;
use crate::output::Outputs;
use crate::probe::prepare::{prepare, ProbeOverrides, RunOptions};
use crate::probe::reduce::{reduce_into, size, Ran, Reduced};
use crate::probe::spill::CaptureOptions;
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct Reduce {
    /// The probe whose drift to reduce (it needs an [explain] table).
    pub probe: PathBuf,
    /// In place of the probe's backends.
    pub backends: Vec<BackendSpec>,
    /// The most runs the search may spend.
    pub budget: usize,
    /// Where the minimal probe goes (`-`: stdout, once the search ends).
    pub out: PathBuf,
    pub checkpoint: Option<CheckpointRef>,
    pub command: String,
}

impl Reduce {
    pub fn run(&self) -> Result<Reduced> {
        let path = crate::probe::catalog::locate(&self.probe)?;
        let probe = crate::probe::schema::Probe::load(&path)?;
        let original = crate::files::read_text(&path, crate::files::Kind::Probe)?;
        let backends = self.backends.clone();
        let mut outs = Outputs::new();
        crate::probe::prepare::register_inputs(&probe, self.checkpoint.as_ref(), &backends, &mut outs)?;
        outs.file("--out", &self.out);
        outs.check()?;
        let ran = Ran { backends: backends.clone(), checkpoint: self.checkpoint.clone() };
        let opts = RunOptions {
            probe: ProbeOverrides { backends, checkpoint: self.checkpoint.clone(), ..Default::default() },
            captures: CaptureOptions { spill: true, ..Default::default() },
            command: self.command.clone(),
        };
        let mut p = prepare(&probe, &opts)?;
        let (tokens, decode) = size(&p.inputs);
        crate::errln!(
            "reducing {} ({tokens} prompt tokens, {decode} decode steps; budget {} runs)",
            self.probe.display(),
            self.budget
        );
        reduce_into(&mut p, &opts.captures, self.budget, (&original, &path, &ran), &self.out)
    }
}
