//! `hefprobe explain PROBE.toml`: rank the fault catalog by how well each fault reproduces an
//! observed capture (a device capture, a dump, or any backend).

use super::{
    args::command_line,
    run::{finish, ReportArgs},
};
use crate::backend::BackendSpec;
use crate::error::Result;
use crate::report::deliver;
use crate::request::pattern::ExplainPattern;
use crate::request::run::Explain;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The probe whose inputs produced the observation (not with --pattern).
    #[arg(required_unless_present = "pattern", conflicts_with = "pattern")]
    pub probe: Option<PathBuf>,
    /// A finding's record (probes/findings/16.toml): rank every hypothesis of the catalog by how
    /// much of it it reproduces, on --checkpoint's weights (default: a synthesized stand-in of
    /// the record's degenerate shape), and print the experiment that decides between them.
    #[arg(long, value_name = "RECORD", conflicts_with_all = ["observed", "backend", "faults", "pairs", "quant", "exhaustive", "spill_dir"])]
    pub pattern: Option<PathBuf>,
    /// The observed capture (.npz with PHASE/TAP keys, or any names with --map).
    #[arg(long, value_name = "NPZ", conflicts_with = "backend")]
    pub observed: Option<PathBuf>,
    /// Name map for --observed.
    #[arg(long, value_name = "FILE", requires = "observed")]
    pub map: Option<PathBuf>,
    /// The HEF the observation was captured from: the dump is judged beyond, and every
    /// candidate composed with, that HEF's quantization (as `run --backend hef=` does)
    #[arg(long, value_name = "HEF", requires = "observed")]
    pub hef: Option<PathBuf>,
    /// Or observe a backend: emulator=FAULT+FAULT, dump=PATH, hef=PATH.
    #[arg(long, value_name = "SPEC")]
    pub backend: Option<String>,
    /// Faults to rank (default: the whole catalog grid, narrowed per layer).
    #[arg(long = "fault", value_name = "SPEC")]
    pub faults: Vec<String>,
    /// Also rank pairs of the best faults.
    #[arg(long)]
    pub pairs: bool,
    /// Quantization configuration for three-way attribution (e.g. w8a16).
    #[arg(long, value_name = "QUANT")]
    pub quant: Option<String>,
    /// Emulate every candidate whole: no start from the clean run's blocks, no early stop (the
    /// same ranking and figures, slower; a check of those shortcuts).
    #[arg(long)]
    pub exhaustive: bool,
    /// Run on this checkpoint instead of the probe's.
    #[command(flatten)]
    pub checkpoint: super::args::CheckpointArgs,
    /// Where captures go when they do not fit the memory budget (--max-memory): a temporary
    /// folder made in DIR and deleted when done. Default: the system's temporary folder.
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    #[command(flatten)]
    pub out: ReportArgs,
}

pub fn run(a: ExplainArgs) -> Result<ExitCode> {
    let Some(probe) = a.probe else {
        let request = ExplainPattern {
            pattern: a.pattern.unwrap_or_default(),
            checkpoint: a.checkpoint.to_ref(),
            threads: None,
            reports: a.out.targets(),
            command: command_line(),
        };
        let mut explained = request.run()?;
        deliver(&mut explained, &request.reports)?;
        return Ok(ExitCode::SUCCESS);
    };
    let request = Explain {
        probe,
        observed: BackendSpec::observed(a.observed, a.map, a.hef, a.backend.as_deref())?,
        faults: crate::fault::spec::parse_all(&a.faults)?,
        pairs: a.pairs,
        quant: a.quant.as_deref().map(crate::fault::spec::quantization).transpose()?,
        exhaustive: a.exhaustive,
        checkpoint: a.checkpoint.to_ref(),
        thresholds: a.out.bounds()?,
        spill_dir: a.spill_dir,
        reports: a.out.targets(),
        command: command_line(),
    };
    // Exit 1 when the observation drifts from the reference beyond the thresholds, explained
    // or not: the drift is there either way (README, "Exit codes").
    finish(request.run()?, &request.reports)
}
