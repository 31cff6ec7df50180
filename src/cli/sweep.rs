//! `hefprobe sweep PROBE.toml`: run a probe across its [sweep] grid into one table and plot.

use super::run::command_line;
use crate::error::Result;
use crate::probe::schema::Probe;
use crate::probe::sweep::{doc, run_sweep, write_svg};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// A probe with a [sweep] section.
    pub probe: PathBuf,
    /// Write the table as Markdown here (default: print it).
    #[arg(long, value_name = "PATH")]
    pub markdown: Option<PathBuf>,
    /// Write the plot (metric vs hidden size) here.
    #[arg(long, value_name = "PATH")]
    pub svg: Option<PathBuf>,
    /// Write every point as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Run on this checkpoint instead of the probe's (a HF folder or a .gguf file); it also
    /// replaces the sweep's model axis (`hidden`, `checkpoints`).
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<PathBuf>,
}

pub fn run(a: SweepArgs) -> Result<ExitCode> {
    let mut probe = Probe::load(&a.probe)?;
    if let Some(c) = &a.checkpoint {
        probe = probe.with_checkpoint(c);
    }
    let bar = indicatif::ProgressBar::new_spinner();
    let points = run_sweep(&probe, |label| bar.set_message(label.to_string()))?;
    bar.finish_and_clear();
    if let Some(p) = &a.svg {
        write_svg(&points, p)?;
    }
    let svg_rel = a.svg.as_deref().map(|s| crate::report::relative_to(s, a.markdown.as_deref()));
    let md = doc(&probe, &points, &command_line(), svg_rel.as_deref()).markdown();
    if let Some(p) = &a.json {
        crate::error::write_file(p, serde_json::to_string_pretty(&points).expect("json") + "\n")?;
    }
    match &a.markdown {
        Some(p) => {
            crate::error::write_file(p, &md)?;
            println!("wrote {} ({} points)", p.display(), points.len());
        }
        None => print!("{md}"),
    }
    Ok(ExitCode::SUCCESS)
}
