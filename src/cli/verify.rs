//! `hefprobe verify DIR`: replay an evidence bundle, and read its command line back.

use crate::error::Result;
use crate::probe::bundle::Manifest;
use crate::probe::record::{ends_in, Record, RunRecord, SweepRecord};
use crate::probe::verify::{command_asks, Check, Verdict};
use crate::report::{deliver, ReportTarget};
use crate::request::verify::Verify;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// How a recorded command line reads here: its record and `--bundle` folder (`cli::asked`).
pub type Asked = fn(&str) -> (Option<PathBuf>, Result<Record>);

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The bundle folder (`hefprobe run --bundle DIR`).
    pub bundle: PathBuf,
}

/// `hefprobe verify DIR`: 0 when everything is the same; 1 when anything differs (a changed
/// file, a swapped HEF, a figure, a document, a device claim, a replay that failed), and 1 when
/// some figures cannot be re-run here: "unverified (N figures)", never "all same".
pub fn run(a: VerifyArgs, asked: Asked) -> Result<ExitCode> {
    let mut verified = Verify { bundle: a.bundle }.run()?;
    let command = recorded_command(&verified.manifest, asked);
    verified.checks.push(command);
    deliver(&mut verified, &ReportTarget::or(Vec::new(), crate::report::Format::Terminal))?;
    Ok(if verified.same() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A bundle's command line read back as this command line reads it, and checked against what
/// the bundle replays ([`crate::probe::verify::command_asks`]): its paths as typed, a probe
/// named by its catalog name as the file that name finds here.
fn recorded_command(m: &Manifest, asked: Asked) -> Check {
    let recorded = match &m.asked {
        Record::Run(r) => Some(&r.probe),
        Record::Sweep(s) => Some(&s.probe),
        Record::Suite(_) => None,
    };
    let located = |p: PathBuf| match recorded {
        Some(r) if !ends_in(r, &p) => crate::probe::catalog::locate(&p).unwrap_or(p),
        _ => p,
    };
    let (folder, mut typed) = asked(&m.command);
    if let Ok(Record::Run(RunRecord { probe, .. }) | Record::Sweep(SweepRecord { probe, .. })) = &mut typed {
        *probe = located(std::mem::take(probe));
    }
    match typed {
        Ok(typed) if std::mem::discriminant(&typed) == std::mem::discriminant(&m.asked) => {
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
