//! `hefprobe sweep PROBE.toml`: run a probe across its [sweep] grid into one table and plot.

use super::args::command_line;
use super::args::deprecated;
use crate::error::Result;
use crate::probe::record::SweepRecord;
use crate::report::{deliver, Format, ReportTarget};
use crate::request::sweep::Sweep;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// A probe with a [sweep] section.
    pub probe: PathBuf,
    /// FORMAT=PATH, several allowed: markdown (the table), json (every point), svg=FILE.svg
    /// (metric vs hidden size), terminal; PATH `-` is stdout. Default: markdown on stdout.
    #[arg(long = "report", value_name = "FORMAT=PATH", value_parser = ReportTarget::parse)]
    pub reports: Vec<ReportTarget>,
    /// Deprecated: --report markdown=PATH.
    #[arg(long, value_name = "PATH", hide = true)]
    pub markdown: Option<PathBuf>,
    /// Deprecated: --report svg=PATH.
    #[arg(long, value_name = "PATH", hide = true)]
    pub svg: Option<PathBuf>,
    /// Deprecated: --report json=PATH.
    #[arg(long, value_name = "PATH", hide = true)]
    pub json: Option<PathBuf>,
    /// Run on this checkpoint instead of the probe's; it also replaces the sweep's model axis
    /// (`hidden`, `checkpoints`).
    #[command(flatten)]
    pub checkpoint: super::args::CheckpointArgs,
    /// Write an evidence bundle to this new (or empty) folder: the probe, every point, the
    /// table, the checkpoint's files by sha256 (`hefprobe verify DIR` replays it).
    #[arg(long, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
}

impl SweepArgs {
    /// `--report` targets, the deprecated flags folded in (each said once on stderr).
    fn targets(&self) -> Vec<ReportTarget> {
        let mut t = self.reports.clone();
        for (old, format, path) in [
            ("--markdown", Format::Markdown, &self.markdown),
            ("--svg", Format::Svg, &self.svg),
            ("--json", Format::Json, &self.json),
        ] {
            t.extend(path.as_ref().map(|p| deprecated(old, format, Some(p))));
        }
        ReportTarget::or(t, Format::Markdown)
    }
}

/// Exit 1 when any point's teacher-forced logits fail the probe's logits bounds (its
/// `[thresholds]`, default cosine ≥ 0.999): the sweep found drift (README, "Exit codes").
pub fn run(a: SweepArgs) -> Result<ExitCode> {
    let request = Sweep {
        reports: a.targets(),
        record: SweepRecord { probe: a.probe, checkpoint: a.checkpoint.to_ref() },
        bundle: a.bundle,
        command: command_line(),
    };
    let mut swept = request.run()?;
    deliver(&mut swept, &request.reports)?;
    Ok(if swept.points.iter().any(|p| !p.drift.is_empty()) { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
