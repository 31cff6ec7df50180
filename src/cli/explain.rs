//! `hefprobe explain PROBE.toml`: rank the fault catalog by how well each fault reproduces an
//! observed capture (a device capture, a dump, or any backend).

use super::run::{command_line, finish, probe_inputs, ReportArgs};
use crate::backend::{BackendKind, BackendSpec};
use crate::error::{Error, Result};
use crate::explain::ExplainSpec;
use crate::output::Outputs;
use crate::probe::run::{run_probe, CaptureOptions, ExplainChoice, ProbeOverrides, RunOptions};
use crate::probe::schema::Probe;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The probe whose inputs produced the observation.
    pub probe: PathBuf,
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
    pub checkpoint: super::CheckpointArgs,
    /// Where captures go when they do not fit the memory budget (--max-memory): a temporary
    /// folder made in DIR and deleted when done. Default: the system's temporary folder.
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    #[command(flatten)]
    pub out: ReportArgs,
}

/// The probe and the options `explain` runs it with (its outputs checked): the command line's
/// and the Python module's `explain` (which fills an `ExplainArgs`).
pub fn plan(a: &ExplainArgs) -> Result<(Probe, RunOptions)> {
    let probe = crate::probe::catalog::open(&a.probe)?;
    let observed = match (&a.observed, &a.backend) {
        (Some(p), _) => BackendSpec {
            name: Some("observed".into()),
            path: Some(p.clone()),
            map: a.map.clone(),
            hef: a.hef.clone(),
            ..BackendSpec::new(BackendKind::Dump)
        },
        (None, Some(b)) => BackendSpec::parse_cli(b)?,
        (None, None) => match probe.backends.first() {
            Some(b) => b.clone(),
            None => {
                return Err(Error::usage(
                    "give --observed NPZ or --backend SPEC: the probe has no backend to observe",
                ))
            }
        },
    };
    let targets = a.out.targets();
    let checkpoint = a.checkpoint.to_ref();
    let mut outs = Outputs::new();
    probe_inputs(&probe, checkpoint.as_ref(), std::slice::from_ref(&observed), &mut outs)?;
    crate::report::register(&targets, &mut outs);
    if let Some(d) = &a.spill_dir {
        outs.dir("--spill-dir", d);
    }
    outs.check()?;
    let spec = ExplainSpec {
        observed: Some(observed.label()),
        faults: (!a.faults.is_empty()).then(|| crate::fault::spec::parse_all(&a.faults)).transpose()?,
        pairs: a.pairs,
        quant: a.quant.as_deref().map(crate::fault::spec::quantization).transpose()?,
        exhaustive: a.exhaustive,
    };
    let opts = RunOptions {
        probe: ProbeOverrides {
            backends: vec![observed],
            checkpoint,
            thresholds: a.out.thresholds.clone(),
            explain: ExplainChoice::With(spec),
        },
        // The observation (a dump read one array at a time, or any backend) and the reference
        // spill as in `run` when they do not fit, and are explained from the files.
        captures: CaptureOptions { spill: true, spill_dir: a.spill_dir.clone(), ..Default::default() },
        command: command_line(),
    };
    Ok((probe, opts))
}

pub fn run(a: ExplainArgs) -> Result<ExitCode> {
    let (probe, opts) = plan(&a)?;
    // Exit 1 when the observation drifts from the reference beyond the thresholds, explained
    // or not: the drift is there either way (README, "Exit codes").
    finish(run_probe(&probe, &opts)?, &a.out.targets(), true)
}
