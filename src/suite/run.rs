//! Running a suite: every probe of the plan through the probe's own named stages
//! (`probe::{prepare, backends, compared, explained}`), once per probe
//! with every target of this shard as a backend (so the reference runs once per probe), then
//! per pair: the repeatability gate (device targets), the verdict against the baseline, one
//! re-run of a failing pair, and the explanation of a failure the re-run confirmed.

use super::baseline::Baseline;
use super::figures::{figures, phase_series, regressions, Band};
use super::findings::asks_explanation;
use super::gate::{gate, open, OpenDevice, Shared};
pub use super::options::{rfc3339, Clock, SuiteOptions};
use super::result::*;
use super::spec::{Suite, Target};
use crate::backend::{make_backend, Backend, BackendKind, BackendSpec};
use crate::error::Result;
use crate::explain::ExplainSpec;
use crate::model::{Checkpoint, Decoder};
use crate::probe::backends::run_backends;
use crate::probe::compared::{compare_runs, Compared};
use crate::probe::explained::explain_stage;
use crate::probe::prepare::{prepare, ExplainChoice, Prepared, ProbeOverrides, RunOptions};
use crate::probe::runs::Runs;
use crate::probe::schema::Probe;
use crate::probe::spill::CaptureOptions;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Every pair of the suite in report order: probe × target, or probe × its own backends.
/// `None` as the target: a probe with nothing to run against.
pub fn plan(suite: &Suite) -> Vec<(usize, Option<Target>)> {
    let mut out = Vec::new();
    for (i, probe) in suite.probes.iter().enumerate() {
        let own: Vec<Target> = probe
            .backends
            .iter()
            .map(|b| Target { label: b.label(), spec: b.clone(), revision: None, checkpoint: None })
            .collect();
        let targets = if suite.targets.is_empty() { own } else { suite.targets.clone() };
        if targets.is_empty() {
            out.push((i, None));
        }
        out.extend(targets.into_iter().map(|t| (i, Some(t))));
    }
    out
}

/// The label a plan entry is keyed by.
fn label(t: &Option<Target>) -> String {
    t.as_ref().map_or_else(|| "-".to_string(), |t| t.label.clone())
}

/// A probe that asks a grid question (`hefprobe sweep`), not a pairwise one.
fn is_sweep_only(p: &Probe) -> bool {
    p.sweep.is_some() && p.backends.is_empty()
}

fn revision(t: &Target, fallback: Option<&String>) -> Option<String> {
    if t.spec.kind != BackendKind::Hef {
        return None;
    }
    let sidecar = || {
        let path = t.spec.path.as_ref()?;
        let mut side = path.clone().into_os_string();
        side.push(".rev");
        let text = crate::files::read_text(PathBuf::from(side), crate::files::Kind::Revision).ok()?;
        text.lines().next().map(|l| l.trim().to_string()).filter(|l| !l.is_empty())
    };
    t.revision.clone().or_else(sidecar).or_else(|| fallback.cloned())
}

struct Ctx<'a> {
    suite: &'a Suite,
    opts: &'a SuiteOptions,
    baseline: Option<Baseline>,
    devices: BTreeMap<String, std::result::Result<OpenDevice, PairError>>,
    timing: Timing,
}

/// Run the suite (this shard of it).
pub fn run_suite(suite: &Suite, opts: &SuiteOptions) -> Result<SuiteResult> {
    run_suite_with(suite, opts, &mut |_| Ok(()))
}

/// Run the suite, handing `finished` the result so far after each probe's pairs (its
/// `unfinished` lists the pairs of this shard still to run): the CLI writes the file reports
/// there, so an interrupted night leaves what finished.
pub fn run_suite_with(
    suite: &Suite,
    opts: &SuiteOptions,
    finished: &mut dyn FnMut(&SuiteResult) -> Result<()>,
) -> Result<SuiteResult> {
    suite.check_claims_on(opts.checkpoint.as_ref())?;
    let total = opts.clock.start();
    let baseline =
        opts.baseline.as_ref().map(|p| Baseline::load_or_new(p, opts.update_baseline)).transpose()?;
    let plan = plan(suite);
    let keys: Vec<(String, String)> =
        plan.iter().map(|(i, t)| (suite.probes[*i].name.clone(), label(t))).collect();
    let mine = opts.shard.map_or_else(|| vec![true; plan.len()], |s| s.select(&keys));
    let mut result = empty_result(suite, opts, &keys);
    result.unfinished = keys
        .iter()
        .zip(&mine)
        .filter(|(_, m)| **m)
        .map(|((probe, target), _)| PlanEntry::new(probe, target))
        .collect();
    let mut ctx = Ctx { suite, opts, baseline, devices: BTreeMap::new(), timing: Timing::default() };
    for (i, probe) in suite.probes.iter().enumerate() {
        let here: Vec<&Option<Target>> =
            plan.iter().zip(&mine).filter(|((pi, _), m)| *pi == i && **m).map(|((_, t), _)| t).collect();
        if here.is_empty() {
            continue;
        }
        let done = probe_pairs(&mut ctx, probe, &here);
        for p in &done {
            crate::errln!("{} × {}: {}", p.probe, p.target, p.status.name());
        }
        result.unfinished.retain(|e| e.probe != probe.name);
        result.pairs.extend(done);
        result.counts = Counts::of(&result.pairs);
        result.findings = super::findings::evaluate(&suite.findings, &result.pairs, &labels(suite));
        ctx.timing.total = total.secs();
        result.timing = ctx.timing;
        finished(&result)?;
    }
    ctx.timing.total = total.secs();
    result.timing = ctx.timing;
    result.findings = super::findings::evaluate(&suite.findings, &result.pairs, &labels(suite));
    Ok(result)
}

/// The suite's target labels (a claim without targets on a probe that ran nowhere is not run
/// on each of them).
pub fn labels(suite: &Suite) -> Vec<String> {
    suite.targets.iter().map(|t| t.label.clone()).collect()
}

/// The result of a run before any pair: what it is of (suite, plan, targets, gate, baseline).
fn empty_result(suite: &Suite, opts: &SuiteOptions, keys: &[(String, String)]) -> SuiteResult {
    SuiteResult {
        schema: SUITE_SCHEMA.into(),
        hefprobe: env!("CARGO_PKG_VERSION").into(),
        suite: suite.name.clone(),
        file: suite.file.as_ref().map(|f| f.display().to_string()),
        command: opts.command.clone(),
        date: opts.clock.date(),
        shard: opts.shard,
        plan: keys.iter().map(|(probe, target)| PlanEntry::new(probe, target)).collect(),
        targets: suite
            .targets
            .iter()
            .map(|t| TargetInfo {
                label: t.label.clone(),
                kind: t.spec.kind,
                path: t.spec.path.as_ref().map(|p| p.display().to_string()),
                revision: revision(t, opts.hef_revision.as_ref()),
            })
            .collect(),
        gate: suite.gate,
        floors: suite.floors,
        baseline: opts.baseline.as_ref().map(|p| p.display().to_string()),
        ..SuiteResult::default()
    }
}

/// A run of one probe against some of its targets: the stages up to compare.
struct ProbeRun {
    p: Prepared,
    runs: Runs,
    compared: Vec<Compared>,
}

impl ProbeRun {
    fn compared(&self, label: &str) -> Option<&Compared> {
        self.compared.iter().find(|c| c.label == label)
    }
}

/// The checkpoint a target runs the probe on: its own `checkpoint`, else `--checkpoint`, else
/// the probe's.
fn checkpoint_of(ctx: &Ctx, t: &Target) -> Option<crate::model::CheckpointRef> {
    match &t.checkpoint {
        Some(path) => Some(crate::model::CheckpointRef::at(path, crate::model::hub::DEFAULT_REVISION)),
        None => ctx.opts.checkpoint.clone(),
    }
}

/// Prepare a probe against `targets` and run every backend: a device target drives the device
/// opened once for the suite (refused when the probe's reference is another checkpoint).
fn run_stages(ctx: &Ctx, probe: &Probe, targets: &[(usize, Target)]) -> Result<(Prepared, Runs)> {
    let specs =
        targets.iter().map(|(_, t)| BackendSpec { name: Some(t.label.clone()), ..t.spec.clone() }).collect();
    let checkpoint = targets.first().and_then(|(_, t)| checkpoint_of(ctx, t));
    let opts = RunOptions {
        probe: ProbeOverrides {
            backends: specs,
            checkpoint,
            thresholds: ctx.suite.thresholds.clone(),
            explain: ExplainChoice::Off,
        },
        // Long prompts with every tap outgrow memory before a nightly machine does: spill as
        // `hefprobe run` does, and say so on each pair.
        captures: CaptureOptions { spill: true, spill_dir: ctx.opts.spill_dir.clone(), ..Default::default() },
        command: String::new(),
    };
    let mut p = prepare(probe, &opts)?;
    let devices = &ctx.devices;
    let mut open_backend =
        |spec: &BackendSpec, ckpt: &Checkpoint, model: &Arc<Decoder>| -> Result<Box<dyn Backend>> {
            let label = spec.label();
            match devices.get(&label) {
                Some(Ok(d)) if spec.kind == BackendKind::Hef => {
                    d.borrow().check_made_from(spec.path()?, ckpt)?;
                    Ok(Box::new(Shared { device: d.clone(), label }) as Box<dyn Backend>)
                }
                _ => make_backend(spec, ckpt, model),
            }
        };
    let runs = run_backends(&mut p, &opts.captures, &mut open_backend)?;
    Ok((p, runs))
}

/// Judge `pair` on one target's comparison in a probe run: its verdict against its baseline
/// and thresholds, where it drifts, its figures and plots.
fn evaluate(pair: &mut PairResult, compared: &Compared, band: &Band, baseline: Option<&Baseline>) {
    let cmp = &compared.cumulative;
    let figs = figures(cmp);
    let located = crate::compare::locate::locate(cmp).into_iter().next();
    let regs = pair.baseline.as_ref().map(|b| regressions(&figs, b, band)).unwrap_or_default();
    let accepted = baseline.is_some_and(|b| b.is_known(&pair.probe, &pair.target));
    pair.status = Status::judged(cmp.passed(), accepted, !regs.is_empty());
    let mut taps = vec!["logits".to_string()];
    taps.extend(located.as_ref().filter(|l| !l.tap.is(crate::tap::Tap::Logits)).map(|l| l.tap.to_string()));
    pair.series = taps.iter().filter_map(|t| phase_series(cmp, t)).collect();
    pair.first_drift = located.as_ref().map(|l| l.tap.to_string());
    // The bound a reader looks for first: a figure's, before the row sums said in words.
    pair.failed_bound = located.as_ref().and_then(|l| {
        let mut f = l.failures.iter();
        f.clone().find(|f| f.metric != "prob_sum_err").or(f.next()).map(crate::report::format::failure_short)
    });
    pair.located = located.map(|l| crate::report::format::located_sentence(&l));
    // A served model drifts at its tokens.
    if let Some(t) = cmp.tokens.as_ref().filter(|t| !t.failures.is_empty()) {
        pair.first_drift = Some(crate::compare::tokens::TOKENS.to_string());
        pair.located = Some(crate::report::tokens::sentence(t));
    }
    pair.regressions = regs;
    pair.figures = figs;
}

/// One line on what a run of a pair said (kept in `first_run` when it is re-run).
fn said(pair: &PairResult) -> String {
    let mut s = pair.status.name().to_string();
    if let Some(r) = pair.regressions.first() {
        s += &format!(": {}", super::summary::regression_sentence(r));
    } else if let Some(l) = &pair.located {
        s += &format!(": {l}");
    }
    s
}

/// Mark `pair` as stopped by `e`.
fn fail(pair: &mut PairResult, e: PairError) {
    pair.status = Status::Error;
    pair.error = Some(e);
}

/// Mark every pair of `which` as stopped by `e` (those not already in error).
fn fail_all(pairs: &mut [PairResult], which: &[(usize, Target)], e: &crate::error::Error) {
    for (i, _) in which {
        if pairs[*i].error.is_none() {
            fail(&mut pairs[*i], PairError::from_error(e));
        }
    }
}

/// One pair per target of `here`, and the targets that can run (a sweep probe is skipped, a
/// probe with no target or a device that did not open is an error).
fn classify(
    ctx: &mut Ctx,
    probe: &Probe,
    here: &[&Option<Target>],
) -> (Vec<PairResult>, Vec<(usize, Target)>) {
    let mut pairs: Vec<PairResult> = Vec::new();
    let mut runnable: Vec<(usize, Target)> = Vec::new();
    for t in here {
        let mut pair = PairResult::new(probe, &label(t), t.as_ref().map(|t| t.spec.kind));
        match t {
            _ if is_sweep_only(probe) => {
                pair.status = Status::Skipped;
                pair.note =
                    Some("a sweep probe ([sweep], no [[backend]]): run it with `hefprobe sweep`".into());
            }
            None => fail(
                &mut pair,
                PairError {
                    kind: ErrorKind::Input,
                    message: format!(
                        "{}: no backend to compare with the reference; add a [[backend]] or give the suite targets",
                        probe.path.display()
                    ),
                },
            ),
            Some(t) => {
                pair.hef_revision = revision(t, ctx.opts.hef_revision.as_ref());
                pair.baseline = ctx.baseline.as_ref().and_then(|b| b.get(&probe.name, &t.label)).cloned();
                if t.spec.kind == BackendKind::Hef {
                    let watch = ctx.opts.clock.start();
                    let dev = ctx
                        .devices
                        .entry(t.label.clone())
                        .or_insert_with(|| open(t).map_err(|e| PairError::from_error(&e)));
                    ctx.timing.devices += watch.secs();
                    match dev {
                        Ok(d) => pair.device = Some(d.borrow().facts.clone()),
                        Err(e) => fail(&mut pair, e.clone()),
                    }
                }
                if pair.error.is_none() {
                    runnable.push((pairs.len(), t.clone()));
                }
            }
        }
        pairs.push(pair);
    }
    (pairs, runnable)
}

/// Gate every device target before anything is compared: each pair's noise band, and the
/// seconds its own gate took.
fn gate_all(
    ctx: &mut Ctx,
    runs: &Runs,
    inputs: &crate::inputs::InputSet,
    pairs: &mut [PairResult],
    runnable: &[(usize, Target)],
) -> (BTreeMap<usize, Band>, BTreeMap<usize, f64>) {
    let mut bands: BTreeMap<usize, Band> = BTreeMap::new();
    let mut own: BTreeMap<usize, f64> = BTreeMap::new();
    for (i, t) in runnable {
        if let Some(e) = runs.backend(&t.label).and_then(|b| b.error.as_ref()) {
            fail(&mut pairs[*i], PairError::from_error(e));
            continue;
        }
        let mut spread = None;
        if let Some(Ok(d)) = ctx.devices.get(&t.label).filter(|_| t.spec.kind == BackendKind::Hef) {
            let g = ctx.opts.clock.start();
            match gate(d, inputs, &ctx.suite.gate) {
                Ok((result, s)) => {
                    if !result.stable {
                        pairs[*i].status = Status::Unstable;
                    }
                    pairs[*i].gate = Some(result);
                    spread = Some(s);
                }
                Err(e) => fail(&mut pairs[*i], PairError::from_error(&e)),
            }
            let secs = g.secs();
            ctx.timing.gate += secs;
            *own.entry(*i).or_default() += secs;
        }
        bands.insert(*i, Band::new(&ctx.suite.floors, spread.as_ref()));
    }
    (bands, own)
}

fn probe_pairs(ctx: &mut Ctx, probe: &Probe, here: &[&Option<Target>]) -> Vec<PairResult> {
    let (mut pairs, runnable) = classify(ctx, probe, here);
    // Targets on their own checkpoints run the probe once per checkpoint.
    let mut groups: Vec<Vec<(usize, Target)>> = Vec::new();
    for r in runnable {
        match groups.iter_mut().find(|g| g[0].1.checkpoint == r.1.checkpoint) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    for group in groups {
        group_pairs(ctx, probe, &mut pairs, &group);
    }
    pairs
}

/// The pairs of `runnable` (targets sharing one checkpoint): run, gate, compare, judge, re-run
/// and explain what failed.
fn group_pairs(ctx: &mut Ctx, probe: &Probe, pairs: &mut [PairResult], runnable: &[(usize, Target)]) {
    let watch = ctx.opts.clock.start();
    let (p, runs) = match run_stages(ctx, probe, runnable) {
        Ok(r) => r,
        Err(e) => {
            fail_all(pairs, runnable, &e);
            return;
        }
    };
    // A run over the memory budget compared from files: each pair says so.
    if let (Some(plan), Some(dir)) = (&p.spill, &runs.spill) {
        let note = crate::probe::spill::spill_note(plan, dir, runs.stores());
        for (i, _) in runnable {
            pairs[*i].note = Some(note.clone());
        }
    }
    let (bands, own) = gate_all(ctx, &runs, &p.inputs, pairs, runnable);
    let mut compared = Vec::new();
    let result = compare_runs(&p, &runs, &mut compared);
    let probe_secs = watch.secs() - own.values().sum::<f64>();
    ctx.timing.probes += probe_secs;
    if let Err(e) = result {
        fail_all(pairs, runnable, &e);
        return;
    }
    let run = ProbeRun { p, runs, compared };
    let mut failing: Vec<(usize, Target)> = Vec::new();
    for (i, t) in runnable {
        pairs[*i].seconds = probe_secs / runnable.len() as f64 + own.get(i).copied().unwrap_or(0.0);
        let Some(band) = bands.get(i).copied() else { continue };
        pairs[*i].band = Some(band);
        if pairs[*i].status != Status::Pass {
            continue; // unstable: not compared
        }
        if let Some(c) = run.compared(&t.label) {
            evaluate(&mut pairs[*i], c, &band, ctx.baseline.as_ref());
        }
        if matches!(pairs[*i].status, Status::Regressed | Status::Failed) {
            failing.push((*i, t.clone()));
        }
    }
    if !failing.is_empty() {
        rerun(ctx, probe, pairs, &failing, &bands);
    }
    // A known drift is not re-run, and explained only when a finding claims its explanation.
    let claimed: Vec<(usize, String)> = runnable
        .iter()
        .filter(|(i, t)| {
            pairs[*i].status == Status::Known && asks_explanation(&ctx.suite.findings, &probe.name, &t.label)
        })
        .map(|(i, t)| (*i, t.label.clone()))
        .collect();
    explain_confirmed(ctx, probe, pairs, &run, claimed);
}

/// Re-run the failing pairs once: passing now makes them flaky; failing again confirms them,
/// and a confirmed failure is explained.
fn rerun(
    ctx: &mut Ctx,
    probe: &Probe,
    pairs: &mut [PairResult],
    failing: &[(usize, Target)],
    bands: &BTreeMap<usize, Band>,
) {
    let watch = ctx.opts.clock.start();
    let again = run_stages(ctx, probe, failing).and_then(|(p, runs)| {
        let mut compared = Vec::new();
        compare_runs(&p, &runs, &mut compared).map(|_| ProbeRun { p, runs, compared })
    });
    let secs = watch.secs();
    ctx.timing.reruns += secs;
    let again = match again {
        Ok(r) => r,
        Err(e) => {
            for (i, _) in failing {
                pairs[*i].first_run = Some(said(&pairs[*i]));
            }
            fail_all(pairs, failing, &e);
            return;
        }
    };
    let mut confirmed = Vec::new();
    for (i, t) in failing {
        let pair = &mut pairs[*i];
        pair.seconds += secs / failing.len() as f64;
        let first = said(pair);
        pair.first_run = Some(first);
        if let Some(e) = again.runs.backend(&t.label).and_then(|b| b.error.as_ref()) {
            fail(pair, PairError::from_error(e));
            continue;
        }
        if let Some(c) = again.compared(&t.label) {
            evaluate(pair, c, &bands[i], ctx.baseline.as_ref());
        }
        if matches!(pair.status, Status::Pass | Status::Known) {
            pair.status = Status::Flaky;
        } else {
            confirmed.push((*i, t.label.clone()));
        }
    }
    explain_confirmed(ctx, probe, pairs, &again, confirmed);
}

/// Explain each confirmed failure (when the suite and the probe ask for it).
fn explain_confirmed(
    ctx: &mut Ctx,
    probe: &Probe,
    pairs: &mut [PairResult],
    run: &ProbeRun,
    confirmed: Vec<(usize, String)>,
) {
    let settings = &ctx.suite.explain;
    let wanted = |target: &str| {
        settings.enabled
            && !ctx.opts.no_explain
            && (probe.explain.is_some()
                || settings.faults.is_some()
                || asks_explanation(&ctx.suite.findings, &probe.name, target))
    };
    let confirmed: Vec<(usize, String)> = confirmed.into_iter().filter(|(_, t)| wanted(t)).collect();
    for (i, target) in confirmed {
        let watch = ctx.opts.clock.start();
        let mut spec: ExplainSpec = probe.explain.clone().unwrap_or_default();
        spec.observed = Some(target);
        spec.faults = settings.faults.clone().or(spec.faults);
        match explain_stage(&run.p, &run.runs, &run.compared, Some(&spec)) {
            Ok(e) => {
                pairs[i].best_explanation = e.as_ref().and_then(|e| e.report.best.clone());
                pairs[i].explanation = e.map(|e| e.report.conclusion);
            }
            Err(e) => pairs[i].explanation = Some(format!("explain could not run: {e}")),
        }
        let secs = watch.secs();
        ctx.timing.explain += secs;
        pairs[i].seconds += secs;
    }
}
