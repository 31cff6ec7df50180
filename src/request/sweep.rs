//! `hefprobe sweep PROBE.toml`: a probe across its [sweep] grid into one table and plot.

use super::{absolute, asked_checkpoint, new_folder, probe_inputs, PathAs, Request};
use crate::error::Result;
use crate::model::CheckpointRef;
use crate::output::Outputs;
use crate::probe::schema::Probe;
use crate::probe::sweep::{doc, run_sweep, Swept};
use crate::report::{Document, ReportTarget};
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct Sweep {
    /// A probe with a [sweep] section.
    pub probe: PathBuf,
    /// In place of the probe's checkpoint; it also replaces the sweep's model axis.
    pub checkpoint: Option<CheckpointRef>,
    pub reports: Vec<ReportTarget>,
    /// An evidence bundle's new (or empty) folder.
    pub bundle: Option<PathBuf>,
    pub command: String,
}

impl Request for Sweep {
    type Plan = Probe;
    type Output = Swept;

    fn plan(&self) -> Result<Probe> {
        crate::report::check::<Swept>(&self.reports)?;
        let probe = crate::probe::catalog::open(&self.probe)?;
        let mut outs = Outputs::new();
        probe_inputs(&probe, self.checkpoint.as_ref(), &[], &mut outs)?;
        crate::report::register::<Swept>(&self.reports, &mut outs)?;
        outs.check()?;
        if let Some(dir) = &self.bundle {
            new_folder(dir)?;
        }
        Ok(probe)
    }

    fn execute(&self, probe: Probe) -> Result<Swept> {
        let bar = crate::progress::spinner();
        let points = run_sweep(&probe, self.checkpoint.as_ref(), |label| bar.set_message(label.to_string()))?;
        bar.finish_and_clear();
        let swept = Swept { probe, points, command: self.command.clone(), svg: None };
        if let Some(dir) = &self.bundle {
            let md = doc(&swept.probe, &swept.points, &self.command, None).markdown();
            crate::probe::bundle::write_sweep(
                &self.asked(&absolute),
                &self.command,
                &swept.json(),
                &md,
                dir,
            )?;
        }
        Ok(swept)
    }
}

impl Sweep {
    /// What a bundle of this sweep records it asked for, its paths as `path_as` gives them.
    pub fn asked(&self, path_as: PathAs) -> crate::probe::bundle::SweepAsked {
        let (checkpoint, revision) = asked_checkpoint(self.checkpoint.as_ref(), path_as);
        crate::probe::bundle::SweepAsked {
            probe: path_as(&self.probe.display().to_string()),
            checkpoint,
            revision,
        }
    }
}
