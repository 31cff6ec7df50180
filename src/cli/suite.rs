//! `hefprobe suite` (probes × targets against a baseline, for nightly jobs), `hefprobe merge`
//! (shards back into one result) and `hefprobe trend` (a figure over the history's runs).

use crate::error::{Error, Result};
use crate::model::CheckpointRef;
use crate::report::{Format, ReportTarget};
use crate::suite::figures::Figure;
use crate::suite::history::{self, TrendSpec};
use crate::suite::run::{run_suite_with, Clock, SuiteOptions};
use crate::suite::shard::Shard;
use crate::suite::spec::{is_suite_file, Suite};
use crate::suite::{emit, finish, merge, render, Finish};
use clap::Args;
use std::io::IsTerminal;
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
    pub checkpoint: super::CheckpointArgs,
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
    let line = super::run::command_line();
    let mut out: Vec<&str> = Vec::new();
    let mut skip = false;
    for w in line.split(' ') {
        if skip {
            skip = false;
            continue;
        }
        if w == "--shard" || w == "--shard-total" {
            skip = true;
            continue;
        }
        if w.starts_with("--shard=") || w.starts_with("--shard-total=") {
            continue;
        }
        out.push(w);
    }
    out.join(" ")
}

fn step_summary() -> Option<PathBuf> {
    std::env::var_os("GITHUB_STEP_SUMMARY").filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Refuse a report format a suite does not write before anything runs.
fn check_formats(out: &SuiteOutputArgs) -> Result<()> {
    match out.reports.iter().find(|t| t.format == Format::Svg) {
        Some(_) => Err(Error::usage(crate::suite::SVG_INLINE)),
        None => Ok(()),
    }
}

/// Refuse, before anything runs, an output that is a file the command reads (`outs` lists
/// them): a report or the history written over the suite, a probe, a target's HEF or checkpoint,
/// the baseline or a shard (`./p/../x` is `x`). The baseline is written only by
/// `--update-baseline`, which is what it asks for.
fn check_paths(mut outs: crate::output::Outputs, out: &SuiteOutputArgs) -> Result<()> {
    if let Some(b) = &out.baseline {
        outs.input("the baseline (--baseline)", b);
    }
    crate::report::register(&out.reports, &mut outs);
    if let Some(h) = &out.history {
        outs.file("--history", h);
    }
    outs.check()?;
    // The history a run appends to is read now, so a damaged one fails before the night's work.
    if let Some(h) = &out.history {
        crate::suite::history::check(h)?;
    }
    Ok(())
}

/// Everything a suite run reads: the suite file, each probe's inputs, each target's files and
/// checkpoint, `--checkpoint`. A checkpoint that does not resolve is left to the run, which
/// reports it on its pairs.
fn suite_inputs(suite: &Suite, checkpoint: Option<&CheckpointRef>) -> Result<crate::output::Outputs> {
    let mut outs = crate::output::Outputs::new();
    if let Some(f) = &suite.file {
        outs.input("the suite", f);
    }
    let specs: Vec<_> = suite.targets.iter().map(|t| t.spec.clone()).collect();
    for p in &suite.probes {
        outs.input("a probe", &p.path); // named as one of many (probe_inputs says "the probe")
        super::run::probe_inputs(p, checkpoint, &specs, &mut outs)?;
    }
    for t in &suite.targets {
        if let Some(c) = &t.checkpoint {
            let c = CheckpointRef::at(c, crate::model::hub::DEFAULT_REVISION);
            let _ = c.register(&format!("the checkpoint of target `{}`", t.label), &mut outs);
        }
    }
    Ok(outs)
}

fn targets(out: &SuiteOutputArgs) -> Vec<ReportTarget> {
    ReportTarget::or(out.reports.clone(), Format::Terminal)
}

fn report(r: &crate::suite::result::SuiteResult, out: &SuiteOutputArgs) -> Result<ExitCode> {
    let finished = finish(
        r,
        &Finish {
            baseline: out.baseline.clone(),
            update_baseline: out.update_baseline,
            accept: out.accept,
            history: out.history.clone(),
        },
    )?;
    // A finding's last reproduction and the date its status began come from the history, this
    // run's lines included.
    let mut r = r.clone();
    if let (Some(h), false) = (&out.history, r.findings.is_empty()) {
        history::annotate(&mut r.findings, &history::read(h)?);
    }
    let color = std::io::stdout().is_terminal();
    print!("{}", emit(&r, &targets(out), color, step_summary().as_deref())?);
    for line in finished {
        eprintln!("{line}");
    }
    for f in r.findings.iter().filter(|f| f.fails) {
        eprintln!("{}", crate::suite::findings::sentence(f));
    }
    Ok(ExitCode::from(r.exit_code()))
}

pub fn suite(a: SuiteArgs) -> Result<ExitCode> {
    check_formats(&a.out)?;
    let mut suite = match a.inputs.as_slice() {
        [one] if is_suite_file(one)? => Suite::load(one)?,
        many => {
            if let Some(s) = many.iter().find(|p| is_suite_file(p).unwrap_or(false)) {
                return Err(Error::usage(format!(
                    "{} is a suite file: give it alone, or give probe files only",
                    s.display()
                )));
            }
            Suite::from_probes(many)?
        }
    };
    if !a.backends.is_empty() {
        suite.set_cli_targets(&a.backends)?;
    }
    let mut outs = suite_inputs(&suite, a.checkpoint.to_ref().as_ref())?;
    if let Some(d) = &a.spill_dir {
        outs.dir("--spill-dir", d);
    }
    check_paths(outs, &a.out)?;
    let env = |k: &str| std::env::var(k).ok();
    let shard = Shard::resolve(a.shard.as_deref(), a.shard_total, &env)?;
    let opts = SuiteOptions {
        baseline: a.out.baseline.clone(),
        update_baseline: a.out.update_baseline,
        shard,
        hef_revision: a.hef_revision.clone(),
        command: whole_command(),
        clock: Clock::System,
        no_explain: a.no_explain,
        spill_dir: a.spill_dir.clone(),
        checkpoint: a.checkpoint.to_ref(),
    };
    if let Some(dir) = &a.bundle {
        super::run::new_folder(dir)?;
    }
    let result = run_suite_with(&suite, &opts, &mut partial_reports(&a.out))?;
    if let Some(dir) = &a.bundle {
        let abs = |p: &std::path::Path| super::run::absolute(&p.display().to_string());
        let asked = crate::probe::bundle::SuiteAsked {
            inputs: a.inputs.iter().map(|p| abs(p)).collect(),
            backends: super::run::bundle_backends(&a.backends, &[]),
            checkpoint: a.checkpoint.checkpoint.as_deref().map(abs),
            revision: a.checkpoint.revision.clone(),
            baseline: a.out.baseline.as_deref().map(abs),
            no_explain: a.no_explain,
        };
        crate::suite::bundle::write(&result, &suite, &asked, dir)?;
    }
    report(&result, &a.out)
}

/// After each probe of a run still going: the file reports rewritten with what finished, and
/// what they hold said if the run is interrupted (stdout and $GITHUB_STEP_SUMMARY get the
/// finished run only; the history and baseline are written at the end).
fn partial_reports(out: &SuiteOutputArgs) -> impl FnMut(&crate::suite::result::SuiteResult) -> Result<()> {
    use crate::probe::cleanup;
    cleanup::install();
    let files: Vec<ReportTarget> = out.reports.iter().filter(|t| t.path.is_some()).cloned().collect();
    move |r| {
        if r.unfinished.is_empty() {
            return Ok(()); // the finished run's reports follow at once
        }
        let mut note = format!("{} not run", r.unfinished.len());
        if !files.is_empty() {
            cleanup::writing(|| -> Result<()> {
                for (t, path) in files.iter().filter_map(|t| Some((t, t.path.as_ref()?))) {
                    // Quiet: "wrote" is said once, for the finished run's files.
                    crate::files::write_file_quiet(path, render(r, t.format, false)?)?;
                }
                Ok(())
            })?;
            let names: Vec<String> =
                files.iter().filter_map(|t| t.path.as_ref()).map(|p| p.display().to_string()).collect();
            note = format!("{} hold the {} pairs that finished ({note})", names.join(", "), r.pairs.len());
        }
        cleanup::leave(format!("{note}; no history appended, the baseline unchanged"));
        Ok(())
    }
}

pub fn merge(a: MergeArgs) -> Result<ExitCode> {
    check_formats(&a.out)?;
    let mut outs = crate::output::Outputs::new();
    for s in &a.shards {
        outs.input("a shard", s);
    }
    check_paths(outs, &a.out)?;
    let result = merge::merge_files(&a.shards, a.out.baseline.as_deref())?;
    report(&result, &a.out)
}

pub fn trend(a: TrendArgs) -> Result<ExitCode> {
    let figure = Figure::parse(&a.figure).ok_or_else(|| {
        Error::usage(format!("--figure `{}`: expected cosine, sqnr_db, kl or argmax", a.figure))
    })?;
    let mut outs = crate::output::Outputs::new();
    outs.input("the history", &a.history);
    // trend's svg=PATH is one file, not a prefix as in `run`.
    for t in &a.reports {
        if let Some(p) = &t.path {
            outs.file(&t.flag(), p);
        }
    }
    outs.check()?;
    let spec = TrendSpec { figure, tap: a.tap.clone(), pairs: a.pairs.clone() };
    let lines = history::read(&a.history)?;
    if let Some(id) = a.finding {
        return trend_finding(&a.history, &lines, id, &a.reports);
    }
    let trends = history::trends(&lines, &spec);
    if trends.is_empty() {
        return Err(Error::input(
            a.history.display().to_string(),
            format!(
                "no run has a {} of tap `{}`{}",
                figure.title(),
                spec.tap,
                if spec.pairs.is_empty() { "" } else { " for those pairs" }
            ),
        ));
    }
    let reports = ReportTarget::or(a.reports, Format::Terminal);
    for t in &reports {
        match (t.format, &t.path) {
            (Format::Svg, Some(path)) => {
                let svg = crate::report::band::render(&history::plot(&trends, &spec)).map_err(|e| {
                    Error::input(path.display().to_string(), format!("drawing the plot: {e}"))
                })?;
                crate::files::write_file(path, svg)?;
            }
            (Format::Terminal, None) => {
                print!("{}", history::doc(&trends, &spec).terminal(std::io::stdout().is_terminal()))
            }
            (Format::Terminal, Some(path)) => {
                crate::files::write_file(path, history::doc(&trends, &spec).terminal(false))?
            }
            (Format::Markdown, path) => {
                let md = history::doc(&trends, &spec).markdown();
                match path {
                    Some(p) => crate::files::write_file(p, md)?,
                    None => print!("{md}"),
                }
            }
            (f, _) => {
                return Err(Error::usage(format!(
                    "--report {}: trend writes svg=PATH, terminal or markdown",
                    f.name()
                )))
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `trend --finding ID`: the finding's status over the runs, as a table or an SVG.
fn trend_finding(
    path: &std::path::Path,
    lines: &[history::HistoryLine],
    id: u32,
    reports: &[ReportTarget],
) -> Result<ExitCode> {
    use crate::suite::history::{trend_doc, trend_plot};
    let doc = trend_doc(lines, id).ok_or_else(|| {
        Error::input(
            path.display().to_string(),
            format!("no run judged finding {id} (a suite's [[finding]] id {id})"),
        )
    })?;
    for t in &ReportTarget::or(reports.to_vec(), Format::Terminal) {
        let text = match t.format {
            Format::Svg => crate::report::band::render(&trend_plot(lines, id))
                .map_err(|e| Error::input(format!("finding {id}"), format!("drawing the plot: {e}")))?,
            Format::Terminal => doc.terminal(t.path.is_none() && std::io::stdout().is_terminal()),
            Format::Markdown => doc.markdown(),
            f => {
                return Err(Error::usage(format!(
                    "--report {}: trend writes svg=PATH, terminal or markdown",
                    f.name()
                )))
            }
        };
        match &t.path {
            Some(p) => crate::files::write_file(p, text)?,
            None => print!("{text}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
