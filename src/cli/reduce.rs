//! `hefprobe reduce`: shrink a probe's inputs while the same drift reproduces, and write the
//! minimal probe (`probe::reduce`). The file is rewritten after each smaller reproduction, so
//! Ctrl-C keeps the best found so far.

use super::run::probe_inputs;
use crate::error::Result;
use crate::output::Outputs;
use crate::probe::prepare::{prepare, ExplainChoice, ProbeOverrides, RunOptions};
use crate::probe::reduce::{probe_toml, reduce, size};
use crate::probe::spill::CaptureOptions;
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
    pub checkpoint: super::CheckpointArgs,
}

pub fn run(a: ReduceArgs) -> Result<ExitCode> {
    use crate::probe::cleanup;
    let path = crate::probe::catalog::locate(&a.probe)?;
    let probe = crate::probe::schema::Probe::load(&path)?;
    let original = crate::files::read_text(&path, crate::files::Kind::Probe)?;
    let backends = a.backend.specs()?;
    let checkpoint = a.checkpoint.to_ref();
    let mut outs = Outputs::new();
    probe_inputs(&probe, checkpoint.as_ref(), &backends, &mut outs)?;
    outs.file("--out", &a.out);
    outs.check()?;
    let opts = RunOptions {
        probe: ProbeOverrides {
            backends,
            checkpoint,
            thresholds: Vec::new(),
            explain: ExplainChoice::AsProbe,
        },
        captures: CaptureOptions { spill: true, ..Default::default() },
        command: super::run::command_line(),
    };
    let mut p = prepare(&probe, &opts)?;
    let (tokens, decode) = size(&p.inputs);
    eprintln!(
        "reducing {} ({tokens} prompt tokens, {decode} decode steps; budget {} runs)",
        a.probe.display(),
        a.budget
    );
    cleanup::install();
    let out = a.out.clone();
    let mut keep = |r: &crate::probe::reduce::Reduced| -> Result<()> {
        if out == std::path::Path::new("-") {
            return Ok(()); // stdout gets the final probe only
        }
        let text = probe_toml(&original, &a.probe, &out, r)?;
        cleanup::writing(|| crate::files::write_file_quiet(&out, text))?;
        let (t, d) = size(&r.inputs);
        cleanup::leave(format!(
            "{} holds the smallest reproduction found so far ({t} tokens, {d} decode steps, after {} runs)",
            out.display(),
            r.runs
        ));
        Ok(())
    };
    let r = reduce(&mut p, &opts.captures, a.budget, &mut keep)?;
    let (t, d) = size(&r.inputs);
    crate::files::write_file(&a.out, probe_toml(&original, &a.probe, &a.out, &r)?)?;
    let why = r.stopped.map(|s| format!(", stopped early: {s}")).unwrap_or_default();
    let line = format!(
        "reduced to {t} prompt tokens and {d} decode steps in {} runs ({}){why}; chunk {}, start position {}",
        r.runs,
        r.drift,
        r.inputs.chunk.map_or("none".into(), |c| c.to_string()),
        r.inputs.start_position
    );
    // With the probe on stdout, the sentence goes beside it on stderr.
    match a.out == std::path::Path::new("-") {
        true => eprintln!("{line}"),
        false => println!("{line}"),
    }
    Ok(ExitCode::SUCCESS)
}
