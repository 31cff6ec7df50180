//! `hefprobe bisect plan | run | next`: locate the first drifting layer on the device with
//! prefix HEFs (`request::bisect`).

use super::args::ModelArgs;
use crate::diagnose::bisect::Bisected;
use crate::error::Result;
use crate::report::{deliver, Format, ReportTarget};
use crate::request::bisect::{Bisect, BisectPlan};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum BisectCommand {
    /// The cut points of the search for a checkpoint, and how to compile each prefix.
    Plan(PlanArgs),
    /// Run the search over the prefix HEFs in DIR.
    Run(SearchArgs),
    /// Run what DIR already holds and name the prefix to compile next (as `git bisect` does).
    Next(SearchArgs),
}

#[derive(Args, Debug)]
pub struct BisectArgs {
    #[command(subcommand)]
    pub command: BisectCommand,
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Args, Debug)]
pub struct SearchArgs {
    /// The folder of prefix HEFs (any names ending in .hef).
    pub dir: PathBuf,
    /// The probe whose inputs, thresholds and checkpoint each prefix runs with; without one,
    /// the model (--checkpoint or --synth) and the prompt (--tokens or --text) are given here.
    #[arg(long, required_unless_present_any = ["tokens", "text"])]
    pub probe: Option<PathBuf>,
    /// Run on this model instead of the probe's.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt instead of the probe's inputs, as `reference` takes it.
    #[command(flatten)]
    pub prompt: super::args::PromptArgs,
}

pub fn run(a: BisectArgs) -> Result<ExitCode> {
    let mut bisected = match a.command {
        BisectCommand::Plan(p) => BisectPlan { model: p.model.to_ref()? }.run()?,
        BisectCommand::Run(s) => search(s, false)?,
        BisectCommand::Next(s) => search(s, true)?,
    };
    deliver(&mut bisected, &ReportTarget::or(Vec::new(), Format::Terminal))?;
    match (bisected.error, bisected.first) {
        (Some(e), _) => Err(e),
        (None, Some(_)) => Ok(ExitCode::from(1)),
        (None, None) => Ok(ExitCode::SUCCESS),
    }
}

fn search(a: SearchArgs, next: bool) -> Result<Bisected> {
    let request = Bisect {
        dir: a.dir,
        probe: a.probe,
        model: a.model.given().then(|| a.model.to_ref()).transpose()?,
        inputs: a.prompt.given().then(|| a.prompt.spec()),
        next,
        command: super::args::command_line(),
    };
    request.run()
}
