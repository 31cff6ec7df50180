//! `hefprobe suite` (probes × targets against a baseline, for nightly jobs), `hefprobe merge`
//! (shards back into one result) and `hefprobe trend` (a figure over the history's runs).

use crate::backend::BackendSpec;
use crate::error::Result;
use crate::report::{deliver, render, Format, ReportTarget};
use crate::request::suite::{Merge, SuiteRun};
use crate::request::trend::Trend;
use crate::suite::outputs::{Night, SuiteOutputs};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Baseline, history and reports: what `suite` and `merge` both write.
#[derive(Args, Debug, Clone)]
pub struct SuiteOutputArgs {
    /// The baseline (hefprobe.baseline/1 JSON): per probe × target × tap, the figures of the
    /// last accepted run.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Write this run's figures into the baseline where they improved (the file is created if
    /// missing).
    #[arg(long, requires = "baseline")]
    pub update_baseline: bool,
    /// With --update-baseline: write the new figures even where they are worse (an intended change).
    #[arg(long, requires = "update_baseline")]
    pub accept: bool,
    /// With --update-baseline: accept this failing pair as known (PROBE/TARGET; several allowed).
    /// Later runs call its drift "known" (exit 0) while it is no worse; a failure nobody named
    /// stays "failed" (exit 1) whatever the baseline holds.
    #[arg(long = "known", value_name = "PROBE/TARGET", requires = "update_baseline")]
    pub known: Vec<String>,
    /// Append one JSON line per pair to this history (for `hefprobe trend`).
    #[arg(long, value_name = "FILE.jsonl")]
    pub history: Option<PathBuf>,
    /// FORMAT=PATH, several allowed; FORMAT: terminal, markdown, json, junit, html; PATH `-` is
    /// stdout. Default: terminal on stdout. Markdown is also appended to $GITHUB_STEP_SUMMARY
    /// when that is set.
    #[arg(long = "report", value_name = "FORMAT=PATH", value_parser = ReportTarget::parse)]
    pub reports: Vec<ReportTarget>,
}

#[derive(Args, Debug)]
pub struct SuiteArgs {
    /// A SUITE.toml, or probe files (probes/*.toml).
    #[arg(required = true, value_name = "SUITE.toml | PROBE.toml")]
    pub inputs: Vec<PathBuf>,
    /// Targets instead of the suite's (or each probe's own backends): hef=PATH (several allowed,
    /// labelled by file stem), dump=PATH[,map=MAP], emulator[=FAULT+FAULT].
    #[arg(long = "backend", value_name = "SPEC")]
    pub backends: Vec<String>,
    /// Run shard K of N (1-based). Default: from CI_NODE_INDEX/CI_NODE_TOTAL (GitLab) or
    /// JOB_COMPLETION_INDEX (Kubernetes, 0-based; N from --shard-total or HEFPROBE_SHARD_TOTAL).
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
    /// The number of shards when the index comes from JOB_COMPLETION_INDEX.
    #[arg(long, value_name = "N")]
    pub shard_total: Option<usize>,
    /// The git revision the HEFs were built from, for targets whose suite entry and
    /// `HEF.rev` sidecar do not say.
    #[arg(long, value_name = "REV")]
    pub hef_revision: Option<String>,
    /// Do not explain confirmed failures (explain emulates the fault catalog: the slow part).
    #[arg(long)]
    pub no_explain: bool,
    /// Where a probe's captures go when they do not fit the memory budget (--max-memory): a
    /// temporary folder made in DIR and deleted when the probe is done. Default: the system's
    /// temporary folder.
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Every probe runs on this checkpoint instead of its own (the catalog on your model).
    #[command(flatten)]
    pub checkpoint: super::args::CheckpointArgs,
    #[command(flatten)]
    pub out: SuiteOutputArgs,
    /// Write an evidence bundle of the night to this new (or empty) folder: the reports, the
    /// suite and its probes, and sha256 of each HEF, checkpoint file and the baseline
    /// (`hefprobe verify DIR` replays it). Not with --update-baseline: the baseline it pins must
    /// stay what the night was judged against.
    #[arg(long, value_name = "DIR", conflicts_with = "update_baseline")]
    pub bundle: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The shards' JSON summaries (`hefprobe suite --shard K/N --report json=PATH`).
    #[arg(required = true, value_name = "SHARD.json")]
    pub shards: Vec<PathBuf>,
    #[command(flatten)]
    pub out: SuiteOutputArgs,
}

#[derive(Args, Debug)]
pub struct TrendArgs {
    /// The history (`hefprobe suite --history FILE.jsonl`).
    pub history: PathBuf,
    /// svg=PATH writes the plot; terminal (default) prints each pair's latest figure.
    #[arg(long = "report", value_name = "FORMAT=PATH", value_parser = ReportTarget::parse)]
    pub reports: Vec<ReportTarget>,
    /// cosine, sqnr_db, kl or argmax.
    #[arg(long, default_value = "cosine")]
    pub figure: String,
    /// The tap whose figure is plotted.
    #[arg(long, default_value = "logits")]
    pub tap: String,
    /// Only these pairs, PROBE/TARGET; several allowed.
    #[arg(long = "pair", value_name = "PROBE/TARGET")]
    pub pairs: Vec<String>,
    /// A finding's status over the runs instead of a figure (the suite's `[[finding]]` id).
    #[arg(long, value_name = "ID")]
    pub finding: Option<u32>,
}

/// The command line without `--shard`: the command that runs the whole suite, the same in
/// every shard and in the merge.
fn whole_command() -> String {
    let line = super::args::command_line();
    let (mut words, mut out) = (line.split(' '), Vec::new());
    while let Some(w) = words.next() {
        match w {
            "--shard" | "--shard-total" => _ = words.next(),
            w if w.starts_with("--shard=") || w.starts_with("--shard-total=") => {}
            w => out.push(w),
        }
    }
    out.join(" ")
}

impl SuiteOutputArgs {
    fn outputs(self) -> SuiteOutputs {
        SuiteOutputs {
            baseline: self.baseline,
            update_baseline: self.update_baseline,
            accept: self.accept,
            known: self.known,
            history: self.history,
            reports: self.reports,
        }
    }
}

/// The night's reports (markdown also appended to $GITHUB_STEP_SUMMARY when that is set), what
/// updating the baseline and the history said, each failing finding; its exit code.
fn report(night: Night, reports: &[ReportTarget]) -> Result<ExitCode> {
    let Night { mut result, said } = night;
    deliver(&mut result, &ReportTarget::or(reports.to_vec(), Format::Terminal))?;
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|v| !v.is_empty()) {
        let markdown = ReportTarget { format: Format::Markdown, path: None };
        crate::files::append(std::path::Path::new(&path), &render(&result, &markdown, false)?)?;
    }
    for line in said {
        crate::errln!("{line}");
    }
    for f in result.findings.iter().filter(|f| f.fails) {
        crate::errln!("{}", crate::suite::findings::sentence(f));
    }
    if let (Some(s), true) = (result.shard, result.drifts()) {
        crate::errln!(
            "shard {s}: {}; a shard exits 0 on drift: `hefprobe merge` of every shard judges the night (exit 1 there)",
            crate::suite::summary::counts_sentence(&result)
        );
    }
    Ok(ExitCode::from(result.exit_code()))
}

pub fn suite(a: SuiteArgs) -> Result<ExitCode> {
    let request = request(a)?;
    report(request.run()?, &request.out.reports)
}

pub(super) fn request(a: SuiteArgs) -> Result<SuiteRun> {
    Ok(SuiteRun {
        inputs: a.inputs,
        backends: a.backends.iter().map(|b| BackendSpec::parse_cli(b)).collect::<Result<_>>()?,
        shard: a.shard.as_deref().map(crate::suite::shard::Shard::parse).transpose()?,
        shard_total: a.shard_total,
        hef_revision: a.hef_revision,
        no_explain: a.no_explain,
        spill_dir: a.spill_dir,
        checkpoint: a.checkpoint.to_ref(),
        out: a.out.outputs(),
        bundle: a.bundle,
        command: whole_command(),
    })
}

pub fn merge(a: MergeArgs) -> Result<ExitCode> {
    let request = Merge { shards: a.shards, out: a.out.outputs() };
    report(request.run()?, &request.out.reports)
}

pub fn trend(a: TrendArgs) -> Result<ExitCode> {
    let request = Trend {
        history: a.history,
        reports: ReportTarget::or(a.reports, Format::Terminal),
        figure: crate::suite::figures::Figure::parse(&a.figure).ok_or_else(|| {
            crate::error::Error::usage(format!(
                "--figure `{}`: expected cosine, sqnr_db, kl or argmax",
                a.figure
            ))
        })?,
        tap: a.tap,
        pairs: a.pairs,
        finding: a.finding,
    };
    deliver(&mut request.run()?, &request.reports)?;
    Ok(ExitCode::SUCCESS)
}
