//! `hefprobe compare A.npz B.npz`: compare two captures recorded anywhere.

use super::run::{command_line, ReportArgs};
use crate::error::Result;
use crate::report::deliver;
use crate::request::run::Compare;
use crate::request::Request;
use clap::Args;
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

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let request = Compare {
        reference: a.reference,
        candidate: a.candidate,
        map: a.map,
        thresholds: a.out.thresholds.clone(),
        reports: a.out.targets(),
        command: command_line(),
    };
    let mut report = request.run()?;
    deliver(&mut report, &request.reports)?;
    Ok(if report.drift() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
