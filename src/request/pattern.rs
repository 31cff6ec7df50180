//! `hefprobe explain --pattern RECORD.toml [--checkpoint DIR]`: every hypothesis of the catalog
//! ranked by how much of a finding's record it reproduces (`probe::pattern`), and the
//! experiment that decides between the survivors.

use crate::error::Result;
use crate::model::CheckpointRef;
use crate::output::Outputs;
use crate::probe::pattern::doc::Explained;
use crate::probe::pattern::Pattern;
use crate::report::ReportTarget;
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct ExplainPattern {
    pub pattern: PathBuf,
    /// The trained weights degenerate observations run on. Default: [`default_checkpoint`].
    pub checkpoint: Option<CheckpointRef>,
    /// Threads judging hypotheses (default: the cores available).
    pub threads: Option<usize>,
    pub reports: Vec<ReportTarget>,
    pub command: String,
}

/// Without `--checkpoint`: the synthesized stand-in of the record's first observation that
/// did not stay coherent, so the command runs without downloads (every observation is then
/// judged on a stand-in of its own shape; random weights do not collapse:
/// reports/hidden-size-sweep.md).
pub fn default_checkpoint(p: &Pattern) -> CheckpointRef {
    let o = p
        .observations
        .iter()
        .find(|o| o.outcome != crate::probe::pattern::Outcome::Coherent)
        .unwrap_or(&p.observations[0]);
    CheckpointRef::Synth(crate::probe::pattern::bed::stand_in(o).0)
}

impl ExplainPattern {
    pub fn run(&self) -> Result<Explained> {
        crate::report::check::<Explained>(&self.reports)?;
        // A record not here is looked for in the installed catalog, as a probe is.
        let record = crate::probe::catalog::locate(&self.pattern)?;
        let mut outs = Outputs::new();
        outs.input("the record", &record);
        if let Some(c) = &self.checkpoint {
            c.register("the checkpoint", &mut outs)?;
        }
        crate::report::register::<Explained>(&self.reports, &mut outs)?;
        outs.check()?;
        let pattern = Pattern::load(&record)?;
        let ckpt =
            super::load_noting(&self.checkpoint.clone().unwrap_or_else(|| default_checkpoint(&pattern)))?;
        let threads =
            self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let started = std::time::Instant::now();
        let bar = crate::progress::spinner();
        bar.set_message(format!("finding {}: judging every hypothesis", pattern.finding));
        let mut e = crate::probe::pattern::explain(&pattern, &ckpt, threads)?;
        bar.finish_and_clear();
        e.command = self.command.clone();
        crate::errln!(
            "explain --pattern: {} hypotheses, {} emulations in {:.1} s on {threads} thread(s)",
            e.hypotheses.len() + e.cleared.len(),
            e.emulations,
            started.elapsed().as_secs_f64()
        );
        Ok(e)
    }
}
