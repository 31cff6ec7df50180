//! `hefprobe reduce`: shrink a probe's inputs while the same drift reproduces, and write the
//! minimal probe (`request::reduce`).

use crate::error::Result;
use crate::probe::reduce::size;
use crate::request::reduce::Reduce;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ReduceArgs {
    /// The probe whose drift to reduce (it needs an [explain] table).
    pub probe: PathBuf,
    #[command(flatten)]
    pub backend: super::run::BackendArgs,
    /// The most runs the search may spend (each runs the reference and the backends; explain
    /// only where the first drifting tap already matches).
    #[arg(long, default_value_t = 200)]
    pub budget: usize,
    /// Where the minimal probe goes (`-`: stdout, once the search ends).
    #[arg(short = 'o', long = "out", value_name = "MIN.toml")]
    pub out: PathBuf,
    #[command(flatten)]
    pub checkpoint: super::args::CheckpointArgs,
}

pub fn run(a: ReduceArgs) -> Result<ExitCode> {
    let request = Reduce {
        probe: a.probe,
        backends: a.backend.specs()?,
        budget: a.budget,
        out: a.out,
        checkpoint: a.checkpoint.to_ref(),
        command: super::args::command_line(),
    };
    let r = request.run()?;
    let (t, d) = size(&r.inputs);
    let why = r.stopped.map(|s| format!(", stopped early: {s}")).unwrap_or_default();
    let line = format!(
        "reduced to {t} prompt tokens and {d} decode steps in {} runs ({}){why}; chunk {}, start position {}",
        r.runs,
        r.drift,
        r.inputs.chunk.map_or("none".into(), |c| c.to_string()),
        r.inputs.start_position
    );
    // With the probe on stdout, the sentence goes beside it on stderr.
    match request.out == std::path::Path::new("-") {
        true => crate::errln!("{line}"),
        false => crate::outln!("{line}"),
    }
    Ok(ExitCode::SUCCESS)
}
