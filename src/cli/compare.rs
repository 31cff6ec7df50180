//! `hefprobe compare A.npz B.npz`: compare two captures recorded anywhere.

use super::run::{command_line, ReportArgs};
use crate::backend::dump::DumpBackend;
use crate::capture::{CaptureFile, Place, Store};
use crate::compare::thresholds::Thresholds;
use crate::compare::{compare, RowStatus, Settings};
use crate::error::{Error, Result};
use crate::inputs::InputSet;
use crate::output::Outputs;
use crate::report::{emit, ProbeInfo, Report};
use crate::tap::TapSelection;
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The reference capture (.npz, keys PHASE/TAP).
    pub reference: PathBuf,
    /// The candidate capture.
    pub candidate: PathBuf,
    /// Name map for the candidate (their name -> canonical tap, with layout transforms).
    #[arg(long, value_name = "FILE")]
    pub map: Option<PathBuf>,
    #[command(flatten)]
    pub out: ReportArgs,
}

fn label(p: &std::path::Path) -> String {
    p.file_stem().map_or_else(|| p.display().to_string(), |s| s.to_string_lossy().to_string())
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let targets = a.out.targets();
    let mut outs = Outputs::new();
    outs.input("the reference capture", &a.reference).input("the candidate capture", &a.candidate);
    if let Some(m) = &a.map {
        outs.input("the name map", m);
    }
    crate::report::register(&targets, &mut outs);
    outs.check()?;
    let mut thresholds = Thresholds::default();
    for t in &a.out.thresholds {
        thresholds.add_cli(t)?;
    }
    let (rl, cl) = (label(&a.reference), label(&a.candidate));
    // Globs are checked against the taps the two captures hold (no model here).
    let check_globs = |thresholds: &mut Thresholds, keys: &[crate::tap::Key]| -> Result<()> {
        let mut taps: Vec<String> = keys.iter().filter_map(|k| Some(k.tap()?.to_string())).collect();
        taps.sort();
        taps.dedup();
        let layers =
            taps.iter().filter_map(|t| crate::tap::Tap::parse(t)?.layer()).max().map_or(0, |l| l + 1);
        thresholds.check_globs(&taps, layers)
    };
    // A dump through a name map (renames, squeezes, permutes) is mapped into a temporary
    // `.npz` one array at a time; then both sides are read tap by tap, one tap of each side in
    // memory per thread.
    let reference = CaptureFile::open(&a.reference)?;
    let candidate: Box<dyn Store> = match &a.map {
        None => Box::new(CaptureFile::open(&a.candidate)?),
        Some(m) => {
            let mut d = DumpBackend::open("candidate", &a.candidate, Some(m))?;
            let all = TapSelection::all();
            let place = Place::Temporary(std::env::temp_dir());
            let run = crate::backend::run_to(&mut d, &InputSet::new(vec![0]), &all, None, &place)?;
            if let Some(e) = run.error {
                return Err(e);
            }
            run.capture
        }
    };
    let mut keys = reference.keys();
    keys.extend(candidate.keys());
    keys.retain(|k| k.phase().is_some());
    check_globs(&mut thresholds, &keys)?;
    let settings = Settings { workers: rayon::current_num_threads(), ..Settings::new(&thresholds) };
    let pair = compare(&reference, candidate.as_ref(), (&rl, &cl), &settings)?;
    if pair.rows.iter().all(|r| !r.checked()) {
        return Err(Error::input(
            a.candidate.display().to_string(),
            format!("shares no PHASE/TAP key with {}; give --map to name its tensors", a.reference.display()),
        ));
    }
    if let Some(bad) = pair.rows.iter().find(|r| r.status == RowStatus::ShapeMismatch) {
        return Err(Error::input(
            format!("{} array `{}`", a.candidate.display(), bad.key()),
            format!(
                "shape {:?} cannot be aligned with the reference's {:?}; give --map with a layout transform \
                 (squeeze, permute, reshape)",
                bad.cand_shape, bad.ref_shape
            ),
        ));
    }
    let mut report = Report::new(ProbeInfo { command: command_line(), ..Default::default() });
    report.add_comparison(pair);
    let color = std::io::stdout().is_terminal();
    print!("{}", emit(&mut report, &targets, color)?);
    Ok(if report.drift() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
