//! `hefprobe compare A.npz B.npz`: compare two captures recorded anywhere.

use super::run::{command_line, ReportArgs};
use crate::capture::{CaptureFile, Store};
use crate::error::Result;
use crate::output::Outputs;
use crate::report::{emit, ProbeInfo, Report};
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The reference capture (.npz, keys PHASE/TAP).
    pub reference: PathBuf,
    /// The candidate capture.
    pub candidate: PathBuf,
    /// Name map for the candidate (their name -> canonical tap, with layout transforms).
    #[arg(long, value_name = "FILE")]
    pub map: Option<PathBuf>,
    #[command(flatten)]
    pub out: ReportArgs,
}

fn label(p: &std::path::Path) -> String {
    p.file_stem().map_or_else(|| p.display().to_string(), |s| s.to_string_lossy().to_string())
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let targets = a.out.targets();
    let mut outs = Outputs::new();
    outs.input("the reference capture", &a.reference).input("the candidate capture", &a.candidate);
    if let Some(m) = &a.map {
        outs.input("the name map", m);
    }
    crate::report::register(&targets, &mut outs);
    outs.check()?;
    let (rl, cl) = (label(&a.reference), label(&a.candidate));
    // A dump through a name map is mapped into a temporary `.npz` one array at a time; then
    // both sides are read tap by tap, one tap of each side in memory per thread.
    let reference = CaptureFile::open(&a.reference)?;
    let candidate: Box<dyn Store> = match &a.map {
        None => Box::new(CaptureFile::open(&a.candidate)?),
        Some(m) => crate::backend::dump::mapped(&a.candidate, m, &std::env::temp_dir())?,
    };
    let sources = (a.reference.display().to_string(), a.candidate.display().to_string());
    let pair = crate::compare::captures(
        &reference,
        candidate.as_ref(),
        ((&rl, &cl), (&sources.0, &sources.1)),
        &a.out.thresholds,
    )?;
    let mut report = Report::new(ProbeInfo { command: command_line(), ..Default::default() });
    report.add_comparison(pair);
    let color = std::io::stdout().is_terminal();
    print!("{}", emit(&mut report, &targets, color)?);
    Ok(if report.drift() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
