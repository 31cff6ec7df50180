//! `hefprobe sweep PROBE.toml`: a probe across its [sweep] grid into one table and plot.

use crate::error::Result;
use crate::output::Outputs;
use crate::probe::record::{Paths, SweepRecord};
use crate::probe::sweep::{doc, run_sweep, Swept};
use crate::report::{Document, ReportTarget};
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct Sweep {
    /// A probe with a [sweep] section, and the checkpoint in place of its own (which also
    /// replaces the sweep's model axis).
    pub record: SweepRecord,
    pub reports: Vec<ReportTarget>,
    /// An evidence bundle's new (or empty) folder.
    pub bundle: Option<PathBuf>,
    pub command: String,
}

impl Sweep {
    pub fn run(&self) -> Result<Swept> {
        crate::report::check::<Swept>(&self.reports)?;
        let probe = crate::probe::catalog::open(&self.record.probe)?;
        let mut outs = Outputs::new();
        crate::probe::prepare::register_inputs(&probe, self.record.checkpoint.as_ref(), &[], &mut outs)?;
        crate::report::register::<Swept>(&self.reports, &mut outs)?;
        outs.check()?;
        if let Some(dir) = &self.bundle {
            crate::probe::bundle::check_new_folder(dir)?;
        }
        let bar = crate::progress::spinner();
        let checkpoint = self.record.checkpoint.as_ref();
        let points = run_sweep(&probe, checkpoint, |label| bar.set_message(label.to_string()))?;
        bar.finish_and_clear();
        let swept = Swept { probe, points, command: self.command.clone(), svg: None };
        if let Some(dir) = &self.bundle {
            let md = doc(&swept.probe, &swept.points, &self.command, None).markdown();
            crate::probe::bundle::write_sweep(
                &SweepRecord { probe: swept.probe.path.clone(), ..self.record.clone() }.absolute(),
                &self.command,
                &swept.json(),
                &md,
                dir,
            )?;
        }
        Ok(swept)
    }
}
