//! `hefprobe run PROBE.toml`: run a probe, compare, locate, explain, report.

use crate::backend::BackendSpec;
use crate::error::Result;
use crate::model::CheckpointRef;
use crate::output::Outputs;
use crate::probe::run::{run_probe, CaptureOptions, ExplainChoice, ProbeOverrides, RunOptions};
use crate::probe::schema::Probe;
use crate::report::{emit, ReportTarget};
use clap::Args;
use std::io::IsTerminal;
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

impl BackendArgs {
    /// The backend specs, a `--fault` list as one emulator.
    pub fn specs(&self) -> Result<Vec<BackendSpec>> {
        let mut backends: Vec<BackendSpec> =
            self.backends.iter().map(|b| BackendSpec::parse_cli(b)).collect::<Result<_>>()?;
        if !self.faults.is_empty() {
            let mut b = BackendSpec::parse_cli("emulator")?;
            b.faults = crate::fault::spec::parse_all(&self.faults)?;
            backends.push(b);
        }
        Ok(backends)
    }
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

/// What a probe run reads: the probe, its checkpoint (the command line's `checkpoint` in its
/// place, when given) and tokenizer, every backend's HEF, dump, name map and the HEF a dump came
/// from (the probe's and the command line's).
pub fn probe_inputs(
    probe: &Probe,
    checkpoint: Option<&CheckpointRef>,
    backends: &[BackendSpec],
    outs: &mut Outputs,
) -> Result<()> {
    outs.input("the probe", &probe.path);
    // A checkpoint that does not resolve is the run's to report, naming it.
    let _ = match checkpoint {
        Some(c) => c.register("the checkpoint", outs),
        None => probe.checkpoint.to_ref()?.register("the checkpoint", outs),
    };
    if let Some(t) = &probe.inputs.tokenizer {
        outs.input("the tokenizer", t);
    }
    if let Some(sw) = &probe.sweep {
        for ck in &sw.checkpoints {
            outs.checkpoint("a [sweep] checkpoint", ck);
        }
    }
    for b in probe.backends.iter().chain(backends) {
        if let Some(p) = &b.path {
            outs.input(&format!("backend `{}`'s input", b.label()), p);
        }
        if let Some(m) = &b.map {
            outs.input(&format!("backend `{}`'s name map", b.label()), m);
        }
        if let Some(h) = &b.hef {
            outs.input(&format!("backend `{}`'s HEF", b.label()), h);
        }
    }
    Ok(())
}

/// Write the reports of a probe run, then end it: the reports first, whatever happened, so a
/// run that stopped half-way still leaves what it finished (docs/ARCHITECTURE.md).
pub fn finish(
    mut result: crate::probe::run::ProbeRun,
    targets: &[ReportTarget],
    drift: bool,
) -> Result<ExitCode> {
    let color = std::io::stdout().is_terminal();
    print!("{}", emit(&mut result.report, targets, color)?);
    if let Some(e) = result.error {
        eprintln!("note: the run did not finish; the reports hold what did (see `incomplete`)");
        return Err(e);
    }
    Ok(if drift && result.report.failed() { ExitCode::from(1) } else { ExitCode::SUCCESS })
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

/// The probe and the options `run` runs it with (its outputs checked): the command line's and
/// the Python module's `run` (which fills a `RunArgs`).
pub fn plan(a: &RunArgs) -> Result<(Probe, RunOptions)> {
    let probe = crate::probe::catalog::open(&a.probe)?;
    let backends = a.backend.specs()?;
    let checkpoint = a.checkpoint.to_ref();
    let mut outs = Outputs::new();
    probe_inputs(&probe, checkpoint.as_ref(), &backends, &mut outs)?;
    crate::report::register(&a.out.targets(), &mut outs);
    if let Some(p) = &a.save_inputs {
        outs.binary("--save-inputs", p);
    }
    if let Some(d) = &a.save_captures {
        outs.dir("--save-captures", d);
    }
    if let Some(d) = &a.spill_dir {
        outs.dir("--spill-dir", d);
    }
    outs.check()?;
    let opts = RunOptions {
        probe: ProbeOverrides {
            backends,
            checkpoint,
            thresholds: a.out.thresholds.clone(),
            explain: if a.no_explain { ExplainChoice::Off } else { ExplainChoice::AsProbe },
        },
        captures: CaptureOptions {
            spill: true,
            spill_dir: a.spill_dir.clone(),
            save_captures: a.save_captures.clone(),
            save_inputs: a.save_inputs.clone(),
        },
        command: command_line(),
    };
    Ok((probe, opts))
}

pub fn run(a: RunArgs) -> Result<ExitCode> {
    let targets = a.out.targets();
    let (probe, opts) = plan(&a)?;
    if let Some(dir) = &a.bundle {
        let asked = crate::probe::bundle::Asked {
            probe: absolute(&a.probe.display().to_string()),
            backends: bundle_backends(&a.backend.backends, &a.backend.faults),
            checkpoint: a.checkpoint.checkpoint.as_ref().map(|c| absolute(&c.display().to_string())),
            revision: a.checkpoint.revision.clone(),
            thresholds: a.out.thresholds.clone(),
            no_explain: a.no_explain,
        };
        new_folder(dir)?;
        let cap = a.bundle_cap.unwrap_or(crate::probe::bundle::DEFAULT_CAP);
        return finish(crate::probe::bundle::write(&asked, &command_line(), dir, cap)?, &targets, true);
    }
    finish(run_probe(&probe, &opts)?, &targets, true)
}

/// `path` made absolute when it names something here (a hub id or a fault stays as it is), so
/// a bundle replays from any folder.
pub(super) fn absolute(path: &str) -> String {
    std::path::Path::new(path).canonicalize().map_or_else(|_| path.to_string(), |p| p.display().to_string())
}

/// The backends a bundle asks for, as `--backend` specs with absolute paths (a `--fault` is an
/// emulator's).
pub(super) fn bundle_backends(backends: &[String], faults: &[String]) -> Vec<String> {
    let mut v: Vec<String> = backends
        .iter()
        .map(|spec| {
            spec.split(',')
                .map(|part| match part.split_once('=') {
                    Some((k, v)) if ["hef", "dump", "map"].contains(&k) => {
                        format!("{k}={}", absolute(v))
                    }
                    _ => part.to_string(),
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    if !faults.is_empty() {
        v.push(format!("emulator={}", faults.join("+")));
    }
    v
}

/// A bundle's folder: made here, or an empty one.
pub(super) fn new_folder(dir: &std::path::Path) -> Result<()> {
    match std::fs::read_dir(dir).map(|mut e| e.next().is_some()) {
        Ok(true) => Err(crate::error::Error::input(
            dir.display().to_string(),
            "--bundle needs a new or empty folder (a bundle's hashes cover every file in it)",
        )),
        Ok(false) => Ok(()),
        Err(_) => std::fs::create_dir(dir).map_err(|e| crate::error::Error::io(dir, e)),
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
    use crate::probe::verify::Verdict;
    use crate::report::doc::{Doc, Table};
    let checks = crate::suite::bundle::verify(&a.bundle)?;
    let count = |v: Verdict| checks.iter().filter(|c| c.verdict == v).count();
    let (different, absent) = (count(Verdict::Different), count(Verdict::NotHere));
    let verdict = match (different, absent) {
        (0, 0) => "all same".to_string(),
        (0, n) => format!("unverified ({n} figures not re-runnable here)"),
        (n, _) => format!("different ({n})"),
    };
    let mut d = Doc::new();
    d.line(format!(
        "verify {}: {verdict}: {} same, {different} different, {absent} not re-runnable here",
        a.bundle.display(),
        count(Verdict::Same),
    ));
    let mut t = Table::new(["checked", "verdict", "why"]).align("lll");
    for c in checks.iter().filter(|c| c.verdict != Verdict::Same) {
        t.row([c.what.clone(), c.verdict.name().to_string(), c.why.clone()]);
    }
    if checks.iter().any(|c| c.verdict != Verdict::Same) {
        d.table(t);
    }
    print!("{}", d.terminal(std::io::stdout().is_terminal()));
    Ok(if different + absent > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
