//! `hefprobe run PROBE.toml`: run a probe, compare, locate, explain, report.

use super::args::command_line;
use crate::backend::BackendSpec;
use crate::compare::thresholds::Bound;
use crate::error::Result;
use crate::probe::record::RunRecord;
use crate::probe::run::ProbeRun;
use crate::report::{deliver, ReportTarget};
use crate::request::run::Run;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The probe file (probes/*.toml).
    pub probe: PathBuf,
    #[command(flatten)]
    pub backend: BackendArgs,
    #[command(flatten)]
    pub out: ReportArgs,
    /// Write the InputSet as .npz (for `hefprobe capture` on a device host).
    #[arg(long, value_name = "PATH")]
    pub save_inputs: Option<PathBuf>,
    /// Write every backend's capture into this folder. When the captures do not fit the memory
    /// budget and are spilled to disk, they are written here directly (and kept).
    #[arg(long, value_name = "DIR")]
    pub save_captures: Option<PathBuf>,
    /// Where captures go when they do not fit the memory budget (--max-memory): a temporary
    /// folder made in DIR and deleted when the run ends. Default: the system's temporary folder.
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Skip ranking fault models even if the probe asks for it.
    #[arg(long)]
    pub no_explain: bool,
    /// Run on this checkpoint instead of the probe's.
    #[command(flatten)]
    pub checkpoint: super::args::CheckpointArgs,
    /// Write an evidence bundle to this new (or empty) folder: the command, probe, InputSet,
    /// reports, captures, device facts and sha256 of every file (`hefprobe verify DIR` replays it).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["save_inputs", "save_captures"])]
    pub bundle: Option<PathBuf>,
    /// Captures past this size in all are left out of the bundle, their hashes kept.
    #[arg(long, value_name = "SIZE", value_parser = crate::budget::parse_size, requires = "bundle")]
    pub bundle_cap: Option<u64>,
}

/// The backends a command line gives in place of the probe's (`run`, `reduce`).
#[derive(Args, Debug, Clone)]
pub struct BackendArgs {
    /// Replace the probe's backends: emulator[=FAULT+FAULT], dump=PATH[,map=MAP], hef=PATH.
    #[arg(long = "backend", value_name = "SPEC")]
    pub backends: Vec<String>,
    /// Shorthand for one emulator backend with these faults: NAME[:PARAMS][@layers=RANGE].
    #[arg(long = "fault", value_name = "SPEC", conflicts_with = "backends")]
    pub faults: Vec<String>,
}

/// Report options shared by run, compare and explain.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// FORMAT=PATH, several allowed; FORMAT: terminal, markdown, json, svg; PATH `-` is stdout.
    /// Default: terminal on stdout.
    #[arg(long = "report", value_name = "FORMAT=PATH", value_parser = ReportTarget::parse)]
    pub reports: Vec<ReportTarget>,
    /// Extra bounds: METRIC=VALUE or GLOB:METRIC=VALUE (e.g. logits:kl_mean=0.01).
    #[arg(long = "threshold", value_name = "BOUND")]
    pub thresholds: Vec<String>,
}

impl ReportArgs {
    pub fn targets(&self) -> Vec<ReportTarget> {
        ReportTarget::or(self.reports.clone(), crate::report::Format::Terminal)
    }

    /// The `--threshold`s, read.
    pub fn bounds(&self) -> Result<Vec<Bound>> {
        Bound::parse_all(&self.thresholds)
    }
}

impl BackendArgs {
    /// The `--backend`s, then one emulator with the `--fault`s, read.
    pub fn specs(&self) -> Result<Vec<BackendSpec>> {
        BackendSpec::from_flags(&self.backends, &self.faults)
    }
}

/// Write the reports of a probe run, then end it: the reports first, whatever happened, so a
/// run that stopped half-way still leaves what it finished (docs/ARCHITECTURE.md). Exit 1 on
/// drift beyond the thresholds, or a fault explain finds (README, "Exit codes").
pub fn finish(mut result: ProbeRun, targets: &[ReportTarget]) -> Result<ExitCode> {
    deliver(&mut result.report, targets)?;
    if let Some(e) = result.error {
        crate::errln!("note: the run did not finish; the reports hold what did (see `incomplete`)");
        return Err(e);
    }
    Ok(if result.report.failed() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

pub fn run(a: RunArgs) -> Result<ExitCode> {
    let request = request(a)?;
    finish(request.run()?, &request.reports)
}

pub(super) fn request(a: RunArgs) -> Result<Run> {
    let record = RunRecord {
        probe: a.probe,
        backends: a.backend.specs()?,
        checkpoint: a.checkpoint.to_ref(),
        thresholds: a.out.bounds()?,
        no_explain: a.no_explain,
    };
    Ok(Run {
        record,
        reports: a.out.targets(),
        save_inputs: a.save_inputs,
        save_captures: a.save_captures,
        spill_dir: a.spill_dir,
        bundle: a.bundle.map(|d| (d, a.bundle_cap.unwrap_or(crate::probe::bundle::DEFAULT_CAP))),
        command: command_line(),
    })
}
