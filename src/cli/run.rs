//! `hefprobe run PROBE.toml`: run a probe, compare, locate, explain, report; `hefprobe verify`.

use super::Command;
use crate::error::Result;
use crate::probe::run::ProbeRun;
use crate::probe::verify::{Check, Verdict};
use crate::report::{deliver, ReportTarget};
use crate::request::run::Run;
use crate::request::sweep::Sweep;
use crate::request::verify::{command_asks, Verify};
use crate::request::Request;
use clap::{Args, Parser};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The probe file (probes/*.toml).
    pub probe: PathBuf,
    #[command(flatten)]
    pub backend: BackendArgs,
    #[command(flatten)]
    pub out: ReportArgs,
    /// Write the InputSet as .npz (for `hefprobe capture` on a device host).
    #[arg(long, value_name = "PATH")]
    pub save_inputs: Option<PathBuf>,
    /// Write every backend's capture into this folder. When the captures do not fit the memory
    /// budget and are spilled to disk, they are written here directly (and kept).
    #[arg(long, value_name = "DIR")]
    pub save_captures: Option<PathBuf>,
    /// Where captures go when they do not fit the memory budget (--max-memory): a temporary
    /// folder made in DIR and deleted when the run ends. Default: the system's temporary folder.
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Skip ranking fault models even if the probe asks for it.
    #[arg(long)]
    pub no_explain: bool,
    /// Run on this checkpoint instead of the probe's.
    #[command(flatten)]
    pub checkpoint: super::CheckpointArgs,
    /// Write an evidence bundle to this new (or empty) folder: the command, probe, InputSet,
    /// reports, captures, device facts and sha256 of every file (`hefprobe verify DIR` replays it).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["save_inputs", "save_captures"])]
    pub bundle: Option<PathBuf>,
    /// Captures past this size in all are left out of the bundle, their hashes kept.
    #[arg(long, value_name = "SIZE", value_parser = crate::budget::parse_size, requires = "bundle")]
    pub bundle_cap: Option<u64>,
}

/// The backends a command line gives in place of the probe's (`run`, `reduce`).
#[derive(Args, Debug, Clone)]
pub struct BackendArgs {
    /// Replace the probe's backends: emulator[=FAULT+FAULT], dump=PATH[,map=MAP], hef=PATH.
    #[arg(long = "backend", value_name = "SPEC")]
    pub backends: Vec<String>,
    /// Shorthand for one emulator backend with these faults: NAME[:PARAMS][@layers=RANGE].
    #[arg(long = "fault", value_name = "SPEC", conflicts_with = "backends")]
    pub faults: Vec<String>,
}

/// Report options shared by run, compare and explain.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// FORMAT=PATH, several allowed; FORMAT: terminal, markdown, json, svg; PATH `-` is stdout.
    /// Default: terminal on stdout.
    #[arg(long = "report", value_name = "FORMAT=PATH", value_parser = ReportTarget::parse)]
    pub reports: Vec<ReportTarget>,
    /// Extra bounds: METRIC=VALUE or GLOB:METRIC=VALUE (e.g. logits:kl_mean=0.01).
    #[arg(long = "threshold", value_name = "BOUND")]
    pub thresholds: Vec<String>,
}

impl ReportArgs {
    pub fn targets(&self) -> Vec<ReportTarget> {
        ReportTarget::or(self.reports.clone(), crate::report::Format::Terminal)
    }
}

/// Write the reports of a probe run, then end it: the reports first, whatever happened, so a
/// run that stopped half-way still leaves what it finished (docs/ARCHITECTURE.md). Exit 1 on
/// drift beyond the thresholds, or a fault explain finds (README, "Exit codes").
pub fn finish(mut result: ProbeRun, targets: &[ReportTarget]) -> Result<ExitCode> {
    deliver(&mut result.report, targets)?;
    if let Some(e) = result.error {
        eprintln!("note: the run did not finish; the reports hold what did (see `incomplete`)");
        return Err(e);
    }
    Ok(if result.report.failed() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The command line as typed, quoted where needed, for the Markdown report.
pub fn command_line() -> String {
    let args = super::ARGS.get().cloned().unwrap_or_else(|| std::env::args().collect());
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            let a = if i == 0 { "hefprobe".to_string() } else { a };
            if a.chars().any(|c| c.is_whitespace() || "\"'$`|&;<>()".contains(c)) {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn run(a: RunArgs) -> Result<ExitCode> {
    let request = request(a);
    finish(request.run()?, &request.reports)
}

fn request(a: RunArgs) -> Run {
    Run {
        backends: a.backend.backends,
        faults: a.backend.faults,
        checkpoint: a.checkpoint.to_ref(),
        thresholds: a.out.thresholds.clone(),
        no_explain: a.no_explain,
        reports: a.out.targets(),
        save_inputs: a.save_inputs,
        save_captures: a.save_captures,
        spill_dir: a.spill_dir,
        bundle: a.bundle.map(|d| (d, a.bundle_cap.unwrap_or(crate::probe::bundle::DEFAULT_CAP))),
        command: command_line(),
        probe: a.probe,
    }
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The bundle folder (`hefprobe run --bundle DIR`).
    pub bundle: PathBuf,
}

/// `hefprobe verify DIR`: 0 when everything is the same; 1 when anything differs (a changed
/// file, a swapped HEF, a figure, a document, a device claim, a replay that failed), and 1 when
/// some figures cannot be re-run here: "unverified (N figures)", never "all same".
pub fn verify(a: VerifyArgs) -> Result<ExitCode> {
    let mut verified = Verify { bundle: a.bundle.clone() }.run()?;
    verified.checks.push(recorded_command(&a.bundle)?);
    deliver(&mut verified, &ReportTarget::or(Vec::new(), crate::report::Format::Terminal))?;
    Ok(if verified.same() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A bundle's command line read back as this command line reads it, and checked against what
/// the bundle replays ([`crate::request::verify::command_asks`]): its paths as typed.
fn recorded_command(dir: &std::path::Path) -> Result<Check> {
    let m = crate::probe::verify::read_manifest(dir)?;
    let as_typed = |p: &str| p.to_string();
    let parsed = super::Cli::try_parse_from(unquote(&m.command)).map(|c| c.command);
    let (recorded, typed, folder) = match (parsed, &m.suite, &m.sweep) {
        (Ok(Command::Run(a)), None, None) => {
            let folder = a.bundle.clone();
            (value(&m.asked), value(&request(a).asked(&as_typed)), folder)
        }
        (Ok(Command::Suite(a)), Some(s), None) => {
            let folder = a.bundle.clone();
            (value(s), value(&super::suite::request(a).asked(&as_typed)), folder)
        }
        (Ok(Command::Sweep(a)), None, Some(s)) => {
            let sweep = Sweep { probe: a.probe, checkpoint: a.checkpoint.to_ref(), ..Default::default() };
            (value(s), value(&sweep.asked(&as_typed)), a.bundle)
        }
        _ => {
            let why = format!("`{}` is not the command of a bundle of this kind", m.command);
            return Ok(Check { what: "the command".into(), verdict: Verdict::Different, why });
        }
    };
    Ok(command_asks(&recorded, &typed, (&m.folder, folder.as_deref())))
}

fn value<T: serde::Serialize>(asked: &T) -> serde_json::Value {
    serde_json::to_value(asked).expect("what a bundle asked serializes")
}

/// The words of a command line as [`command_line`] quoted them.
fn unquote(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut started) = (Vec::new(), String::new(), false, false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => (quoted, started) = (!quoted, true),
            '\\' if !quoted => word.extend(chars.next()),
            ' ' if !quoted => {
                if started || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            c => word.push(c),
        }
    }
    if started || !word.is_empty() {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_quoted_command_line_reads_back_word_for_word() {
        let line = r"hefprobe run 'my probes/p.toml' --threshold 'it'\''s' '' --fault a";
        let words = super::unquote(line);
        assert_eq!(words, ["hefprobe", "run", "my probes/p.toml", "--threshold", "it's", "", "--fault", "a"]);
    }
}
