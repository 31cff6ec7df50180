//! `hefprobe verify DIR`: replay an evidence bundle, and read its command line back.

use super::run::request;
use super::Command;
use crate::error::Result;
use crate::probe::bundle::Manifest;
use crate::probe::record::{ends_in, Record, RunRecord, SweepRecord};
use crate::probe::verify::{command_asks, Check, Verdict};
use crate::report::{deliver, ReportTarget};
use crate::request::verify::Verify;
use crate::request::Request;
use clap::{Args, Parser};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The bundle folder (`hefprobe run --bundle DIR`).
    pub bundle: PathBuf,
}

/// `hefprobe verify DIR`: 0 when everything is the same; 1 when anything differs (a changed
/// file, a swapped HEF, a figure, a document, a device claim, a replay that failed), and 1 when
/// some figures cannot be re-run here: "unverified (N figures)", never "all same".
pub fn run(a: VerifyArgs) -> Result<ExitCode> {
    let mut verified = Verify { bundle: a.bundle }.run()?;
    let command = recorded_command(&verified.manifest);
    verified.checks.push(command);
    deliver(&mut verified, &ReportTarget::or(Vec::new(), crate::report::Format::Terminal))?;
    Ok(if verified.same() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A bundle's command line read back as this command line reads it, and checked against what
/// the bundle replays ([`crate::probe::verify::command_asks`]): its paths as typed, a probe
/// named by its catalog name as the file that name finds here.
fn recorded_command(m: &Manifest) -> Check {
    let recorded = match &m.asked {
        Record::Run(r) => Some(&r.probe),
        Record::Sweep(s) => Some(&s.probe),
        Record::Suite(_) => None,
    };
    let located = |p: PathBuf| match recorded {
        Some(r) if !ends_in(r, &p) => crate::probe::catalog::locate(&p).unwrap_or(p),
        _ => p,
    };
    let typed = match super::Cli::try_parse_from(unquote(&m.command)).map(|c| c.command) {
        Ok(Command::Run(a)) => (
            a.bundle.clone(),
            request(a).map(|r| Record::Run(RunRecord { probe: located(r.record.probe.clone()), ..r.record })),
        ),
        Ok(Command::Suite(a)) => {
            (a.bundle.clone(), super::suite::request(a).map(|r| Record::Suite(r.record())))
        }
        Ok(Command::Sweep(a)) => {
            let probe = located(a.probe);
            (a.bundle, Ok(Record::Sweep(SweepRecord { probe, checkpoint: a.checkpoint.to_ref() })))
        }
        _ => (None, Err(crate::error::Error::usage("not a bundle's"))),
    };
    match typed {
        (folder, Ok(typed)) if std::mem::discriminant(&typed) == std::mem::discriminant(&m.asked) => {
            command_asks(&m.asked, &typed, (&m.folder, folder.as_deref()))
        }
        _ => {
            let why = format!(
                "`{}` is not the command of a bundle of this kind",
                crate::error::echo(&m.command, 120)
            );
            Check::new("the command", Verdict::Different, why)
        }
    }
}

/// The words of a command line as [`super::run::command_line`] quoted them.
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
