//! `hefprobe compare A.npz B.npz`: compare two captures recorded anywhere.

use super::{args::command_line, run::ReportArgs};
use crate::error::Result;
use crate::report::deliver;
use crate::request::run::Compare;
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
    /// The candidate's lm_head shard widths in output order (`16002,16003`): its logits are
    /// also compared shard by shard, at those boundaries (a HEF's own come from its outputs).
    #[arg(long, value_name = "W,W,...", value_parser = parse_shards)]
    pub shards: Option<Widths>,
    #[command(flatten)]
    pub out: ReportArgs,
}

/// Shard widths as one value (clap would read a `Vec` as repeated values).
#[derive(Debug, Clone)]
pub struct Widths(pub Vec<usize>);

fn parse_shards(s: &str) -> std::result::Result<Widths, String> {
    crate::backend::spec::parse_shards(s).map(Widths).map_err(|e| e.to_string())
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let request = Compare {
        reference: a.reference,
        candidate: a.candidate,
        map: a.map,
        shards: a.shards.map(|w| w.0),
        thresholds: a.out.bounds()?,
        reports: a.out.targets(),
        command: command_line(),
    };
    let mut report = request.run()?;
    deliver(&mut report, &request.reports)?;
    Ok(if report.drift() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
