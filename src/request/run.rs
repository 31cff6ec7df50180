//! The three requests whose result is a probe report: `run` (a probe: reference vs backends),
//! `explain` (the fault catalog ranked against an observation) and `compare` (two captures).

use crate::backend::BackendSpec;
use crate::capture::{CaptureFile, Store};
use crate::compare::thresholds::Bound;
use crate::error::{Error, Result};
use crate::explain::ExplainSpec;
use crate::fault::spec::FaultSpec;
use crate::model::CheckpointRef;
use crate::output::Outputs;
use crate::probe::record::{Paths, RunRecord};
use crate::probe::run::{run_probe, CaptureOptions, ExplainChoice, ProbeOverrides, ProbeRun, RunOptions};
use crate::probe::schema::Probe;
use crate::report::{ProbeInfo, Report, ReportTarget};
use std::path::PathBuf;

/// `hefprobe run PROBE.toml`.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// What decides the numbers: the probe, and what replaces its backends, checkpoint and
    /// bounds (a bundle records it).
    pub record: RunRecord,
    pub reports: Vec<ReportTarget>,
    pub save_inputs: Option<PathBuf>,
    pub save_captures: Option<PathBuf>,
    pub spill_dir: Option<PathBuf>,
    /// An evidence bundle's new (or empty) folder, and the size past which captures are left out.
    pub bundle: Option<(PathBuf, u64)>,
    /// The command that reproduces the run, for the Markdown report.
    pub command: String,
}

impl Run {
    /// The probe and its options, every input and output checked (the Python module adds a
    /// served model's backend to them before it runs).
    pub fn plan(&self) -> Result<(Probe, RunOptions)> {
        let r = &self.record;
        let at = crate::probe::catalog::locate(&r.probe)?;
        // A bundled run reads the probe where the bundle records it (absolute), as its replay does.
        let at = if self.bundle.is_some() { std::path::absolute(&at).unwrap_or(at) } else { at };
        let probe = Probe::load(&at)?;
        let mut outs = Outputs::new();
        crate::probe::prepare::register_inputs(&probe, r.checkpoint.as_ref(), &r.backends, &mut outs)?;
        crate::report::register::<Report>(&self.reports, &mut outs)?;
        if let Some(p) = &self.save_inputs {
            outs.binary("--save-inputs", p);
        }
        for (flag, dir) in [("--save-captures", &self.save_captures), ("--spill-dir", &self.spill_dir)] {
            if let Some(d) = dir {
                outs.dir(flag, d);
            }
        }
        outs.check()?;
        if let Some((dir, _)) = &self.bundle {
            crate::probe::bundle::check_new_folder(dir)?;
        }
        let captures = CaptureOptions {
            spill: true,
            spill_dir: self.spill_dir.clone(),
            save_captures: self.save_captures.clone(),
            save_inputs: self.save_inputs.clone(),
            quiet: false,
        };
        Ok((probe, r.options(captures, &self.command)))
    }

    pub fn run(&self) -> Result<ProbeRun> {
        let (probe, opts) = self.plan()?;
        let Some((dir, cap)) = &self.bundle else { return run_probe(&probe, &opts) };
        // The probe file that ran (a catalog name is recorded as the file it named).
        let asked = RunRecord { probe: probe.path.clone(), ..self.record.clone() }.absolute();
        crate::probe::bundle::write((&probe, &asked), &self.command, dir, *cap)
    }
}

/// `hefprobe explain PROBE.toml`: the observation is a backend ([`BackendSpec::observed`]),
/// or else the probe's first backend.
#[derive(Debug, Clone, Default)]
pub struct Explain {
    pub probe: PathBuf,
    pub observed: Option<BackendSpec>,
    /// Faults to rank (default: the whole catalog grid, narrowed per layer).
    pub faults: Vec<FaultSpec>,
    pub pairs: bool,
    pub quant: Option<FaultSpec>,
    /// Every candidate emulated in full: explain's shortcuts (reuse, early stops) off.
    pub exhaustive: bool,
    pub checkpoint: Option<CheckpointRef>,
    pub thresholds: Vec<Bound>,
    pub spill_dir: Option<PathBuf>,
    pub reports: Vec<ReportTarget>,
    pub command: String,
}

impl Explain {
    pub fn run(&self) -> Result<ProbeRun> {
        let probe = crate::probe::catalog::open(&self.probe)?;
        let observed =
            self.observed.clone().or_else(|| probe.backends.first().cloned()).ok_or_else(|| {
                Error::usage("give --observed NPZ or --backend SPEC: the probe has no backend to observe")
            })?;
        let mut outs = Outputs::new();
        crate::probe::prepare::register_inputs(
            &probe,
            self.checkpoint.as_ref(),
            std::slice::from_ref(&observed),
            &mut outs,
        )?;
        crate::report::register::<Report>(&self.reports, &mut outs)?;
        if let Some(d) = &self.spill_dir {
            outs.dir("--spill-dir", d);
        }
        outs.check()?;
        let spec = ExplainSpec {
            observed: Some(observed.label()),
            faults: (!self.faults.is_empty()).then(|| self.faults.clone()),
            pairs: self.pairs,
            quant: self.quant.clone(),
            exhaustive: self.exhaustive,
        };
        let opts = RunOptions {
            probe: ProbeOverrides {
                backends: vec![observed],
                checkpoint: self.checkpoint.clone(),
                thresholds: self.thresholds.clone(),
                explain: ExplainChoice::With(spec),
            },
            // The observation (a dump read one array at a time, or any backend) and the reference
            // spill as in `run` when they do not fit, and are explained from the files.
            captures: CaptureOptions { spill: true, spill_dir: self.spill_dir.clone(), ..Default::default() },
            command: self.command.clone(),
        };
        run_probe(&probe, &opts)
    }
}

/// `hefprobe compare A.npz B.npz`: two captures recorded anywhere, the candidate through a name
/// map when given.
#[derive(Debug, Clone, Default)]
pub struct Compare {
    pub reference: PathBuf,
    pub candidate: PathBuf,
    pub map: Option<PathBuf>,
    pub thresholds: Vec<Bound>,
    /// The candidate's lm_head shard widths, in output order (`--shards`).
    pub shards: Option<Vec<usize>>,
    pub reports: Vec<ReportTarget>,
    pub command: String,
}

impl Compare {
    pub fn run(&self) -> Result<Report> {
        let mut outs = Outputs::new();
        outs.input("the reference capture", &self.reference).input("the candidate capture", &self.candidate);
        if let Some(m) = &self.map {
            outs.input("the name map", m);
        }
        crate::report::register::<Report>(&self.reports, &mut outs)?;
        outs.check()?;
        let label = |p: &std::path::Path| {
            p.file_stem().map_or_else(|| p.display().to_string(), |s| s.to_string_lossy().to_string())
        };
        let (rl, cl) = (label(&self.reference), label(&self.candidate));
        // A dump through a name map is mapped into a temporary `.npz` one array at a time; then
        // both sides are read tap by tap, one tap of each side in memory per thread.
        let reference = CaptureFile::open(&self.reference)?;
        let candidate: Box<dyn Store> = match &self.map {
            None => Box::new(CaptureFile::open(&self.candidate)?),
            Some(m) => crate::backend::dump::mapped(&self.candidate, m, &std::env::temp_dir())?,
        };
        let sources = (self.reference.display().to_string(), self.candidate.display().to_string());
        let names = ((rl.as_str(), cl.as_str()), (sources.0.as_str(), sources.1.as_str()));
        let pair = crate::compare::captures(
            &reference,
            candidate.as_ref(),
            names,
            &self.thresholds,
            self.shards.as_deref(),
        )?;
        let mut report = Report::new(ProbeInfo { command: self.command.clone(), ..Default::default() });
        report.add_comparison(pair);
        Ok(report)
    }
}
