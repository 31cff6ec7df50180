//! `hefprobe faults`: the fault catalog, and with `matrix` the proof that each fault is located
//! and ranked first (reports/fault-localization.md is its output).

use crate::error::Result;
use crate::explain::matrix::{run_matrix, run_matrix_on, setup_of, synth_setup};
use crate::model::CheckpointRef;
use crate::output::Outputs;
use crate::probe::schema::InputsSpec;
use crate::report::matrix::{catalog, doc, Faults};
use crate::report::ReportTarget;

#[derive(Debug, Clone, Default)]
pub struct FaultList {
    /// Inject every fault into a model and check it is located and ranked first.
    pub matrix: bool,
    /// The matrix's model instead of the synthesized one.
    pub checkpoint: Option<CheckpointRef>,
    /// Prompt text for `checkpoint` (default: 12 fixed token ids), and its greedy decode steps.
    pub text: Option<String>,
    pub decode: usize,
    pub reports: Vec<ReportTarget>,
    pub command: String,
}

impl FaultList {
    pub fn run(&self) -> Result<Faults> {
        let mut outs = Outputs::new();
        super::register_checkpoint(self.checkpoint.as_ref(), &mut outs)?;
        crate::report::register::<Faults>(&self.reports, &mut outs)?;
        outs.check()?;
        if !self.matrix {
            return Ok(Faults { doc: catalog(), failed: false });
        }
        let (rows, setup, candidates) = match &self.checkpoint {
            None => {
                let rows = run_matrix()?;
                let (ckpt, _) = crate::explain::matrix::matrix_model()?;
                (rows, synth_setup(), crate::fault::catalog::grid(&ckpt.config).len())
            }
            Some(c) => {
                let ckpt = c.load()?;
                // Without text: the synthesized matrix's token pattern, within this vocabulary.
                let vocab = ckpt.config.vocab_size as u32;
                let spec = InputsSpec {
                    tokens: self.text.is_none().then(|| (0..12).map(|i| (i * 41 + 7) % vocab).collect()),
                    text: self.text.clone(),
                    decode: Some(self.decode),
                    ..Default::default()
                };
                let inputs = spec.input_set(&ckpt)?;
                let setup = setup_of(&ckpt, &inputs);
                (run_matrix_on(&ckpt, &inputs)?, setup, crate::fault::catalog::grid(&ckpt.config).len())
            }
        };
        let failed = !rows.iter().all(|r| r.ok);
        Ok(Faults { doc: doc(&rows, &self.command, &setup, candidates), failed })
    }
}
