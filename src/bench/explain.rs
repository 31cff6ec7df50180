//! `bench --explain`: explain timed on two simulated HEFs of the measured model (a preset's
//! shape with random weights, or a checkpoint), made as `synth-hef` makes them (a16, prefill
//! frames of 96 rows, a ring of 2048): one with `shared-softmax@layers=2` planted, one clean,
//! each fed the shared-softmax probe's 9 prompt tokens and 4 teacher-forced decode steps. The
//! run before explain (reference, device, expected quantization) is timed apart; the planted
//! HEF is also explained exhaustively (no reuse, no stopping), and its ranking checked equal.

use crate::device::synth_hef::{synth_hef, Calibration, SimCheckpoint, SynthHefOptions};
use crate::error::{Error, Result};
use crate::explain::{ExplainReport, ExplainSpec};
use crate::model::{Checkpoint, CheckpointRef};
use crate::probe::backends::run_backends;
use crate::probe::compared::{compare_runs, Compared};
use crate::probe::explained::explain_stage;
use crate::probe::prepare::{prepare, Prepared};
use crate::probe::run::{ProbeOverrides, RunOptions};
use crate::probe::runs::Runs;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// The planted fault (finding 11 at layer 2, as scripts/hef-real-weights.sh plants it).
const PLANTED: &str = "shared-softmax@layers=2";

pub fn run(model: &CheckpointRef, profile: bool) -> Result<ExitCode> {
    let ckpt = model.load()?;
    let dir = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    crate::outln!(
        "bench --explain: {} ({} layers), simulated HEFs a16, prefill frames of 96 rows, ring 2048; 9 prompt \
         tokens, 4 decode steps",
        ckpt.source, ckpt.config.num_layers
    );
    for (name, faults) in [("planted", vec![PLANTED]), ("clean", vec![])] {
        let hef = dir.path().join(format!("{name}.hef"));
        write_hef(&ckpt, model, &faults, &hef)?;
        let t = Instant::now();
        let run = Before::run(&probe_for(model, &hef, dir.path())?, model, Vec::new())?;
        let before = t.elapsed().as_secs_f64();
        let planted = if faults.is_empty() { "nothing planted".to_string() } else { faults.join(", ") };
        crate::outln!("{name} HEF ({planted}): the run before explain {before:.1} s");
        let (fast, secs) = run.explain(false, profile)?;
        print_explain("  explain", &fast, secs);
        if name == "planted" {
            let (full, full_secs) = run.explain(true, profile)?;
            print_explain("  explain --exhaustive", &full, full_secs);
            let same = match fast.same_ranking(&full) {
                Ok(n) => format!("the same ranking ({n} stopped candidates rank below the contenders)"),
                Err(e) => format!("THE RANKING DIFFERS: {e}"),
            };
            crate::outln!("  shortcuts: {:.1}× faster; {same}", full_secs / secs.max(1e-9));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A HEF of `ckpt` as `synth-hef` writes it, with `faults` planted.
fn write_hef(ckpt: &Checkpoint, model: &CheckpointRef, faults: &[&str], to: &Path) -> Result<()> {
    let source = SimCheckpoint::of(model, ckpt)?;
    let opts = SynthHefOptions {
        faults: crate::fault::spec::parse_all(&faults.iter().map(|f| f.to_string()).collect::<Vec<_>>())?,
        calibration: Some(Calibration::default_for(ckpt)?),
        ..Default::default()
    };
    std::fs::write(to, synth_hef(ckpt, source, &opts)?.to_bytes()).map_err(|e| Error::io(to, e))
}

/// The run explain follows (a probe prepared, the reference and its backends run and
/// compared), kept to explain it as often as asked: `bench --explain`, and the real-weights
/// tier's check that the shortcuts leave the ranking as the exhaustive path has it.
pub struct Before {
    p: Prepared,
    runs: Runs,
    compared: Vec<Compared>,
    /// The explain settings the probe (or the command line) gave.
    pub spec: ExplainSpec,
}

impl Before {
    /// `probe` on `model` against `backends` (empty: the probe's own).
    pub fn run(
        probe: &crate::probe::schema::Probe,
        model: &CheckpointRef,
        backends: Vec<crate::backend::spec::BackendSpec>,
    ) -> Result<Self> {
        let opts = RunOptions {
            probe: ProbeOverrides { checkpoint: Some(model.clone()), backends, ..Default::default() },
            ..Default::default()
        };
        let mut p = prepare(probe, &opts)?;
        let spec = p.explain.clone().unwrap_or_default();
        let runs = run_backends(&mut p, &opts.captures, &mut crate::backend::make_backend)?;
        let mut compared = Vec::new();
        compare_runs(&p, &runs, &mut compared)?;
        Ok(Before { p, runs, compared, spec })
    }

    /// Explain the run (with the shortcuts, or `exhaustive`), timed; with `profile`, each op
    /// class's time printed.
    pub fn explain(&self, exhaustive: bool, profile: bool) -> Result<(ExplainReport, f64)> {
        use crate::model::profile as ops;
        let spec = ExplainSpec { exhaustive, ..self.spec.clone() };
        if profile {
            ops::enable();
            ops::reset();
        }
        let t = Instant::now();
        let e = explain_stage(&self.p, &self.runs, &self.compared, Some(&spec))?;
        let secs = t.elapsed().as_secs_f64();
        if let Some(times) = ops::snapshot().filter(|_| profile) {
            let times: Vec<String> = times.iter().map(|(op, s)| format!("{} {s:.1} s", op.name())).collect();
            crate::outln!("    per op class, summed over threads: {}", times.join(", "));
            ops::disable();
        }
        Ok((e.ok_or_else(|| Error::usage("explain: the observed backend did not run"))?.report, secs))
    }
}

/// The bench's probe: 9 prompt tokens and 4 teacher-forced decode steps against the HEF at
/// `hef`, explained.
fn probe_for(model: &CheckpointRef, hef: &Path, dir: &Path) -> Result<crate::probe::schema::Probe> {
    let vocab = model.load()?.config.vocab_size;
    let ids =
        |n: usize, seed: usize| (0..n).map(|i| ((i * 7919 + seed) % vocab).to_string()).collect::<Vec<_>>();
    let text = format!(
        "version = 1\nname = \"bench-explain\"\nquestion = \"How fast is explain?\"\n[checkpoint]\nsynth = \
         \"tinystories\"\n[inputs]\ntokens = [{}]\ndecode_tokens = [{}]\n[[backend]]\nname = \"hef\"\nkind = \
         \"hef\"\npath = {:?}\n[explain]\nobserved = \"hef\"\n",
        ids(9, 13).join(", "),
        ids(4, 101).join(", "),
        hef.display().to_string()
    );
    crate::probe::schema::Probe::parse(&text, &dir.join("bench-explain.toml"))
}

fn print_explain(what: &str, e: &ExplainReport, secs: f64) {
    let s = &e.spent;
    let runs = s.candidates + s.other;
    crate::outln!(
        "{what}: {secs:.1} s, {runs} emulations ({:.2}/s); best {}",
        runs as f64 / secs.max(1e-9),
        e.rows.first().map_or("-", |r| r.fault.as_str())
    );
    crate::outln!("    {}", s.summary());
}
