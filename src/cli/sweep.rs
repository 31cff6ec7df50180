//! `hefprobe sweep PROBE.toml`: run a probe across its [sweep] grid into one table and plot.

use super::deprecated;
use super::run::command_line;
use crate::error::Result;
use crate::output::Outputs;
use crate::probe::sweep::{doc, run_sweep, write_svg};
use crate::report::{deliver, Format, ReportTarget};
use clap::Args;
use std::io::IsTerminal;
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
    pub checkpoint: super::CheckpointArgs,
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
    let targets = a.targets();
    crate::report::only(&targets, "sweep", &[Format::Terminal, Format::Markdown, Format::Json, Format::Svg])?;
    let probe = crate::probe::catalog::open(&a.probe)?;
    let checkpoint = a.checkpoint.to_ref();
    let mut outs = Outputs::new();
    super::run::probe_inputs(&probe, checkpoint.as_ref(), &[], &mut outs)?;
    for t in &targets {
        if let Some(p) = &t.path {
            outs.file(&t.flag(), p);
        }
    }
    outs.check()?;
    if let Some(dir) = &a.bundle {
        super::run::new_folder(dir)?;
    }
    let bar = crate::progress::spinner();
    let points = run_sweep(&probe, checkpoint.as_ref(), |label| bar.set_message(label.to_string()))?;
    bar.finish_and_clear();
    for p in targets.iter().filter(|t| t.format == Format::Svg).filter_map(|t| t.path.as_ref()) {
        write_svg(&points, p)?;
    }
    // The Markdown links the (first) plot.
    let svg = targets.iter().find(|t| t.format == Format::Svg).and_then(|t| t.path.clone());
    let mut stdout = String::new();
    for t in targets.iter().filter(|t| t.format != Format::Svg) {
        let svg_rel = svg.as_deref().map(|s| crate::report::relative_to(s, t.path.as_deref()));
        let d = doc(&probe, &points, &command_line(), svg_rel.as_deref());
        let text = match t.format {
            Format::Markdown => d.markdown(),
            Format::Terminal => d.terminal(t.path.is_none() && std::io::stdout().is_terminal()),
            Format::Json => serde_json::to_string_pretty(&points).expect("json") + "\n",
            Format::Svg => unreachable!("written above"),
            Format::Junit | Format::Html => unreachable!("refused by only() above"),
        };
        deliver(t, &text, &mut stdout)?;
    }
    print!("{stdout}");
    if let Some(dir) = &a.bundle {
        let asked = crate::probe::bundle::SweepAsked {
            probe: super::run::absolute(&a.probe.display().to_string()),
            checkpoint: a
                .checkpoint
                .checkpoint
                .as_ref()
                .map(|c| super::run::absolute(&c.display().to_string())),
            revision: a.checkpoint.revision.clone(),
        };
        let json = serde_json::to_string_pretty(&points).expect("json") + "\n";
        let md = doc(&probe, &points, &command_line(), None).markdown();
        crate::probe::bundle::write_sweep(&asked, &command_line(), &json, &md, dir)?;
    }
    Ok(if points.iter().any(|p| !p.drift.is_empty()) { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
