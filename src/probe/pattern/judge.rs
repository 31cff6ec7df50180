//! Every hypothesis against every observation of a finding's record, on the observation's own
//! bed (its shape's stand-in, its recipe, its prompt, its scope). A catalog fault (with the
//! parameters explain searches) is composed with the observation's recipe (a `quant`
//! hypothesis replaces it) and judged on what the record says happened:
//! - coherent: base-scope greedy generation must be the recipe's own, token for token (a width
//!   fault that is a bit-exact no-op at that hidden size passes without a run);
//! - repeats: a run of at least `run` copies of one token starting by step `from`;
//! - incoherent: off the float reference somewhere, with no run of `[defaults] run` copies;
//! - every figure: its value within `value ± band` (a hypothesis that overshoots is contradicted
//!   like one that undershoots), or its argmax agreeing as recorded.
//!
//! A figure also speaks without a run where a fault's claim about the logits contradicts it
//! (`fault::catalog::logits_claim`): a graph without lm_head cannot give a shard whose argmax
//! is the reference's. Generation stops once an observation's verdict is settled. The causes
//! the finding cleared are judged as predictions from the recorded shapes.

use super::bed::{self, Bed, StoodIn};
use super::record::{At, Cause, Figure, Metric, Observation, Outcome, Pattern};
use crate::error::Result;
use crate::fault::catalog::width::{acc_can_saturate, SEARCHED_WIDTHS};
use crate::fault::catalog::LogitsClaim;
use crate::fault::spec::FaultSpec;
use crate::model::Checkpoint;
use crate::probe::sweep::{distinct_ratio, longest_run};
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// One hypothesis: the recipe alone, a catalog fault, or a cause the finding cleared.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", content = "spec", rename_all = "kebab-case")]
pub enum Hypothesis {
    Baseline,
    Fault(String),
    Cleared(Cause),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Reproduced,
    Missed,
    Untested,
}

/// How a result was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decided {
    /// A generation or a prefill on the observation's bed.
    Run,
    /// A width fault's definition: a bit-exact no-op at that hidden size.
    Definition,
    /// A figure on record against the fault's claim about the logits, no run.
    Structure,
    /// A prediction from the recorded shape (a cleared cause), or nothing (untested).
    Shape,
}

/// One observation under one hypothesis.
#[derive(Debug, Clone, Serialize)]
pub struct ObsResult {
    pub status: Status,
    /// The figures, or why it was not run: "run 16 from step 0, distinct 0.06; shard 0 cosine 0.84".
    pub figures: String,
    /// Longest run of one token, where a generation ran.
    pub longest_run: Option<usize>,
    pub decided: Decided,
}

impl ObsResult {
    fn said(status: Status, decided: Decided, figures: impl Into<String>) -> Self {
        ObsResult { status, figures: figures.into(), longest_run: None, decided }
    }
}

crate::named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Verdict {
        Reproduces = "reproduces",
        Partly = "partly",
        Contradicts = "contradicts",
        Untested = "untested",
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Judged {
    pub hypothesis: Hypothesis,
    pub label: String,
    pub finding: Option<u32>,
    pub verdict: Verdict,
    pub results: Vec<ObsResult>,
}

impl Judged {
    /// Reproduces every tested observation (one that degraded or has figures among them: leaving
    /// a model coherent reproduces nothing); partly: at least one such and not all; contradicts:
    /// none of them.
    fn new(
        hypothesis: Hypothesis,
        label: String,
        finding: Option<u32>,
        results: Vec<ObsResult>,
        p: &Pattern,
    ) -> Self {
        let tested: Vec<(&Observation, &ObsResult)> =
            p.observations.iter().zip(&results).filter(|(_, r)| r.status != Status::Untested).collect();
        let hit = |t: &(&Observation, &ObsResult)| t.1.status == Status::Reproduced;
        let telling = tested.iter().filter(|t| hit(t)).any(|(o, _)| o.outcome != Outcome::Coherent);
        let verdict = if tested.is_empty() {
            Verdict::Untested
        } else if tested.iter().all(hit) && telling {
            Verdict::Reproduces
        } else if telling {
            Verdict::Partly
        } else {
            Verdict::Contradicts
        };
        Judged { hypothesis, label, finding, verdict, results }
    }

    pub fn reproduced(&self) -> usize {
        self.results.iter().filter(|r| r.status == Status::Reproduced).count()
    }

    /// The observations (0-based) it misses.
    pub fn misses(&self) -> Vec<usize> {
        (0..self.results.len()).filter(|&i| self.results[i].status == Status::Missed).collect()
    }

    /// The observations a figure on record contradicts without a run.
    pub fn structural(&self) -> Vec<usize> {
        self.misses().into_iter().filter(|&i| self.results[i].decided == Decided::Structure).collect()
    }
}

/// The tile width or accumulator bits of a width fault, and whether it is a bit-exact no-op on
/// a row of `hidden` features (width.rs's definitions). None: not a width fault, or one whose
/// no-op does not follow from the hidden size alone (`norm-acc` on the softmax).
pub fn noop_at(spec: &FaultSpec, hidden: usize) -> Option<bool> {
    let int = |key: &str, default: i64| spec.int(key, Some(0), default, 1..=1 << 20).ok().map(|v| v as usize);
    match spec.name.as_str() {
        "tile-sum" | "tile-scale" => int("w", 512).map(|w| hidden <= w),
        "norm-width" => {
            let w = int("w", 512)?;
            let pad = spec.get("variant", Some(1)) == Some("pad");
            Some(hidden <= w || (pad && hidden.is_multiple_of(w)))
        }
        "norm-acc" if spec.get("target", None).is_none_or(|t| t == "norm") => {
            int("bits", 16).map(|b| !acc_can_saturate(hidden, b as u32))
        }
        _ => None,
    }
}

/// What the grid holds, for the report.
pub fn grid_note(ckpt: &Checkpoint, n: usize) -> String {
    let widths = crate::fault::catalog::width::widths(&ckpt.config);
    let ws: Vec<String> = widths.iter().map(|w| w.to_string()).collect();
    format!(
        "{n} catalog hypotheses: every fault of the registry over all layers, with the parameters explain \
         searches on hidden {} (widths W ∈ {{{}}}: {:?} and the hidden size's multiple-of-64 divisors below it; \
         norm-acc BITS 16, 20, 24 where a row can saturate them), each composed with the observation's recipe",
        ckpt.config.hidden_size,
        ws.join(", "),
        SEARCHED_WIDTHS,
    )
}

/// The trailing run of one token.
fn trailing_run(t: &[u32]) -> usize {
    t.iter().rev().take_while(|x| Some(*x) == t.last()).count()
}

/// The longest run of one token that starts by step `from`: (its length, its start).
fn run_by(t: &[u32], from: usize) -> (usize, usize) {
    let mut best = (0, 0);
    let mut start = 0;
    for i in 0..t.len() {
        if i > 0 && t[i] != t[i - 1] {
            start = i;
        }
        if start <= from && i + 1 - start > best.0 {
            best = (i + 1 - start, start);
        }
    }
    best
}

/// The figures of a generation: `run 12 from step 4 in 16 tokens, distinct 0.12, off the
/// reference at step 0`.
fn describe_run(t: &[u32], reference: &[u32], steps: usize) -> String {
    let (run, at) = run_by(t, usize::MAX);
    let off = t.iter().zip(reference).position(|(a, b)| a != b);
    format!(
        "run {run} from step {at} in {} tokens{}, distinct {:.2}, {}",
        t.len(),
        if t.len() < steps { " (settled)" } else { "" },
        distinct_ratio(t),
        off.map_or("on the reference throughout".into(), |s| format!("off the reference at step {s}"))
    )
}

/// The generation an observation's outcome is judged on, and whether it holds.
fn outcome(
    p: &Pattern,
    o: &Observation,
    bed: &Bed,
    setting: &Setting,
) -> Result<Option<(bool, String, Option<usize>)>> {
    let d = &p.defaults;
    let steps = o.tokens(d);
    let vocab = bed.ckpt.config.vocab_size;
    let (faults, quant) = (&setting.faults[..], setting.quant);
    let t = match o.outcome {
        Outcome::Figures => return Ok(None),
        Outcome::Coherent => {
            let base = &bed.recipe_tokens;
            let off = |t: &[u32]| t.last().is_some_and(|x| *x != base[t.len() - 1]);
            let t = bed::generate(&bed.ckpt, &bed.inputs, faults, quant, base.len(), off)?;
            let text = match t.iter().zip(base).position(|(a, b)| a != b) {
                None => format!("the recipe's {} tokens", base.len()),
                Some(s) => format!("leaves the recipe's tokens at step {s}"),
            };
            return Ok(Some((t == *base, text, None)));
        }
        Outcome::Repeats => {
            let (run, from) = (o.run.unwrap_or(d.run), o.from.unwrap_or(0));
            let settled = |t: &[u32]| {
                run_by(t, from).0 >= run || (t.len() > from && trailing_run(t) + steps - t.len() < run)
            };
            bed::generate(&bed.ckpt, &bed.inputs, faults, quant, steps, settled)?
        }
        Outcome::Incoherent => {
            bed::generate(&bed.ckpt, &bed.inputs, faults, quant, steps, |t| longest_run(t) >= d.run)?
        }
    };
    if let Some(x) = bed::outside(&t, vocab) {
        let text = format!("id {x} at step {}: outside the vocabulary, generation cannot go on", t.len() - 1);
        return Ok(Some((false, text, Some(longest_run(&t[..t.len() - 1])))));
    }
    let held = match o.outcome {
        Outcome::Repeats => run_by(&t, o.from.unwrap_or(0)).0 >= o.run.unwrap_or(d.run),
        _ => longest_run(&t) < d.run && t != bed.reference_tokens[..t.len().min(bed.reference_tokens.len())],
    };
    Ok(Some((held, describe_run(&t, &bed.reference_tokens, steps), Some(longest_run(&t)))))
}

/// A figure on a stand-in, judged on what the hypothesis adds beyond the recipe there: the
/// chip's recipe moved its trained counterparts by almost nothing (cosine 0.998-1.0, finding
/// 14's page), while random weights amplify 4-bit noise (0.98 on a TinyStories stand-in), so
/// the recipe's own noise on the stand-in is not the chip's. A cosine or pearson is the excess
/// angle over the recipe's (`thresholds::excess`); an argmax agrees when the hypothesis keeps
/// the float reference's token or the recipe's own.
fn figure_holds(
    f: &Figure,
    o: &Observation,
    got: &[f32],
    (want, recipe): (&[f32], &[f32]),
) -> (bool, String) {
    let (lo, hi) = match f.shard.and_then(|s| o.shard_widths().map(|w| (s, w))) {
        Some((s, w)) => (w[..s].iter().sum::<usize>(), w[..=s].iter().sum::<usize>()),
        None => (0, want.len()),
    };
    if hi > want.len() || got.len() != want.len() || recipe.len() != want.len() {
        return (
            false,
            format!("the hypothesis returns {} logits where the stand-in has {}", got.len(), want.len()),
        );
    }
    let (a, b, q) = (&want[lo..hi], &got[lo..hi], &recipe[lo..hi]);
    let of = f.shard.map_or("logits".to_string(), |s| format!("shard {s}"));
    match f.metric {
        Metric::Argmax => {
            let local = |v: &[f32]| crate::model::decoder::argmax(v) + lo;
            let (ra, qa, ga) = (local(a), local(q), local(b));
            let kept = ga == ra || ga == qa;
            (kept == f.agree.unwrap_or(true), format!("{of} argmax {ga} vs {ra}"))
        }
        m => {
            let fig = |x: &[f32]| {
                if m == Metric::Cosine {
                    crate::compare::metrics::basic(a, x, None).cosine
                } else {
                    pearson(a, x)
                }
            };
            let (raw, alone) = (fig(b), fig(q));
            let beyond = crate::compare::thresholds::excess(
                crate::compare::thresholds::Metric::Cosine,
                raw,
                alone,
                None,
            );
            let (want, band) = (f.value.unwrap_or(0.0), f.band.unwrap_or(0.0));
            let name = if m == Metric::Cosine { "cosine" } else { "pearson" };
            // The band's edges are inside it (0.999 ± 0.001 holds 1.0, whatever f64 makes of it).
            (
                (beyond - want).abs() <= band + 1e-12,
                format!("{of} {name} {beyond:.4} beyond the recipe's {alone:.4}"),
            )
        }
    }
}

/// Pearson correlation of two rows.
fn pearson(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().max(1) as f64;
    let (ma, mb) =
        (a.iter().map(|&x| f64::from(x)).sum::<f64>() / n, b.iter().map(|&x| f64::from(x)).sum::<f64>() / n);
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x) - ma, f64::from(y) - mb);
        (ab, aa, bb) = (ab + x * y, aa + x * x, bb + y * y);
    }
    crate::compare::metrics::cosine_from(ab, aa, bb)
}

/// A figure on record that contradicts `spec`'s claim about the logits, without a run.
fn structural(spec: &FaultSpec, o: &Observation) -> Option<String> {
    let claim = crate::fault::catalog::logits_claim(spec)?;
    match claim {
        LogitsClaim::NotVocabulary => {
            o.figures.iter().find(|f| f.metric == Metric::Argmax && f.agree == Some(true)).map(|f| {
                format!(
                    "{}: a graph without lm_head outputs no vocabulary logits to agree with",
                    f.describe()
                )
            })
        }
        LogitsClaim::FirstShardExact => {
            let cos = |s: usize| {
                o.figures
                    .iter()
                    .find(|f| f.metric == Metric::Cosine && f.shard == Some(s) && f.at == At::Last)
                    .and_then(|f| f.value)
            };
            let first = cos(0)?;
            let better = (1..o.shard_widths().map_or(0, |w| w.len()))
                .find_map(|s| cos(s).filter(|&c| c > first).map(|c| (s, c)));
            better.map(|(s, c)| {
                format!("shard 0 keeps its own scale and would be the better shard; the record has shard 0 at {first} below shard {s}'s {c}")
            })
        }
    }
}

/// What one hypothesis runs: its faults and the quantization (a `quant` hypothesis in place of
/// the recipe).
struct Setting<'a> {
    faults: Vec<FaultSpec>,
    quant: Option<&'a FaultSpec>,
}

fn setting<'a>(spec: Option<&'a FaultSpec>, recipe: Option<&'a FaultSpec>) -> Setting<'a> {
    match spec {
        Some(s) if s.name == "quant" => Setting { faults: Vec::new(), quant: Some(s) },
        Some(s) => Setting { faults: vec![s.clone()], quant: recipe },
        None => Setting { faults: Vec::new(), quant: recipe },
    }
}

/// One observation under one catalog hypothesis (None: the recipe alone).
fn one(p: &Pattern, i: usize, bed: &Bed, spec: Option<&FaultSpec>) -> ObsResult {
    one_checked(p, i, bed, spec).unwrap_or_else(|e| {
        ObsResult::said(Status::Untested, Decided::Run, format!("the emulation stopped: {e}"))
    })
}

fn one_checked(p: &Pattern, i: usize, bed: &Bed, spec: Option<&FaultSpec>) -> Result<ObsResult> {
    let o = &p.observations[i];
    if let Some(why) = spec.and_then(|s| structural(s, o)) {
        return Ok(ObsResult::said(Status::Missed, Decided::Structure, why));
    }
    if let Some(Err(e)) = spec.map(|s| crate::fault::catalog::build(s, &bed.ckpt.config)) {
        return Ok(ObsResult::said(
            Status::Untested,
            Decided::Shape,
            format!("does not apply on {}: {e}", bed.stood_in.label),
        ));
    }
    let s = setting(spec, o.recipe(&p.defaults));
    let noop = o.outcome == Outcome::Coherent
        && o.figures.is_empty()
        && spec.and_then(|s| noop_at(s, o.hidden)) == Some(true);
    if noop {
        let text = format!("bit-exact no-op at hidden {} (tests/width_faults.rs)", o.hidden);
        return Ok(ObsResult::said(Status::Reproduced, Decided::Definition, text));
    }
    let mut held = true;
    let mut parts = Vec::new();
    let mut longest = None;
    if let Some((ok, text, run)) = outcome(p, o, bed, &s)? {
        (held, longest) = (ok, run);
        parts.push(text);
    }
    for (at, want, recipe) in &bed.figure_logits {
        let got = bed::logits_at(&bed.ckpt, &bed.inputs, *at, &s.faults, s.quant)?;
        for f in o.figures.iter().filter(|f| f.at == *at) {
            let (ok, text) = figure_holds(f, o, &got, (want, recipe));
            held &= ok;
            parts.push(format!("{text}{}", if ok { "" } else { " (off the record)" }));
        }
    }
    let status = if held { Status::Reproduced } else { Status::Missed };
    Ok(ObsResult { status, figures: parts.join("; "), longest_run: longest, decided: Decided::Run })
}

/// Every (hypothesis, observation) pair: observation by observation, each on a bed built for
/// it and let go before the next (one stand-in held at a time beside the given checkpoint;
/// consecutive observations of one stand-in and prompt share it), the hypotheses on `threads`
/// threads pulling from one counter (the results are in the grid's order whatever the timing).
/// Also what stood in for each observation, and how many emulations ran.
pub fn judge_catalog(
    p: &Pattern,
    given: &Checkpoint,
    specs: &[FaultSpec],
    threads: usize,
) -> Result<(Vec<Judged>, Vec<StoodIn>, usize)> {
    let n = specs.len() + 1;
    let mut grid: Vec<Vec<ObsResult>> = vec![Vec::new(); n];
    let mut stood_in = Vec::new();
    let mut emulations = 0;
    let mut held: Option<(String, Bed)> = None;
    for i in 0..p.observations.len() {
        crate::error::check_interrupt()?;
        let key = bed_key(p, i);
        if held.as_ref().is_none_or(|(k, _)| *k != key) {
            drop(held.take()); // the last stand-in goes before the next is built
            held = Some((key, bed::bed(p, i, given)?));
        }
        let (_, b) = held.as_ref().expect("built above");
        stood_in.push(b.stood_in.clone());
        let results = on_threads(n, threads, |h| one(p, i, b, h.checked_sub(1).map(|k| &specs[k])));
        emulations += 2 + results.iter().filter(|r| r.decided == Decided::Run).count();
        for (h, r) in results.into_iter().enumerate() {
            grid[h].push(r);
        }
    }
    let judged = grid
        .into_iter()
        .enumerate()
        .map(|(h, rs)| {
            let (hyp, label, finding) = match h.checked_sub(1).map(|k| &specs[k]) {
                None => (Hypothesis::Baseline, "none (the recipe alone)".to_string(), None),
                Some(s) => (
                    Hypothesis::Fault(s.to_string()),
                    s.to_string(),
                    crate::fault::catalog::finding_of(&s.name),
                ),
            };
            Judged::new(hyp, label, finding, rs, p)
        })
        .collect();
    Ok((judged, stood_in, emulations))
}

/// What makes two observations' beds the same: the stand-in, the prompt, the recipe and the
/// generation.
fn bed_key(p: &Pattern, i: usize) -> String {
    let o = &p.observations[i];
    let (spec, _) = bed::stand_in(o);
    format!(
        "{}|{:?}|{:?}|{}|{}|{}",
        spec.describe(),
        o.prompt(&p.defaults),
        o.recipe(&p.defaults).map(ToString::to_string),
        o.tokens(&p.defaults),
        o.outcome == Outcome::Figures,
        o.figures.is_empty()
    )
}

/// `f(0..n)` on `threads` threads, in order.
fn on_threads<T: Send>(n: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= n {
                    break;
                }
                let r = f(j);
                out.lock().expect("no thread panics holding it")[j] = Some(r);
            });
        }
    });
    out.into_inner().expect("no thread panicked").into_iter().map(|r| r.expect("every job ran")).collect()
}

/// A cleared cause judged from the recorded shapes: its prediction per observation.
pub fn judge_cause(p: &Pattern, cause: Cause) -> Judged {
    let deepest_coherent = p
        .observations
        .iter()
        .filter(|o| o.outcome == Outcome::Coherent)
        .filter_map(|o| o.layers)
        .max()
        .unwrap_or(0);
    let results = p
        .observations
        .iter()
        .map(|o| {
            if o.outcome == Outcome::Figures {
                return ObsResult::said(Status::Untested, Decided::Shape, "figures, not an outcome");
            }
            let nrep = o.heads.zip(o.kv_heads).map(|(h, k)| h / k);
            let predicted: Option<bool> = match cause {
                Cause::GqaRatio => nrep.map(|r| !matches!(r, 1 | 2)),
                Cause::Depth => o.layers.map(|l| l > deepest_coherent),
                Cause::LmHeadSplit => o.split(),
            };
            let Some(degraded) = predicted else {
                return ObsResult::said(Status::Untested, Decided::Shape, "shape not on record");
            };
            let said = if degraded { "degraded" } else { "coherent" };
            let hit = degraded == (o.outcome != Outcome::Coherent);
            let status = if hit { Status::Reproduced } else { Status::Missed };
            ObsResult::said(status, Decided::Shape, format!("predicts {said} ({})", o.shape()))
        })
        .collect();
    // A cause a finding cleared stands only while no shape on record contradicts it: one
    // observation it mispredicts clears it.
    let mut j = Judged::new(Hypothesis::Cleared(cause), cause.name().into(), Some(p.finding), results, p);
    if !j.misses().is_empty() {
        j.verdict = Verdict::Contradicts;
    } else if j.reproduced() > 0 {
        j.verdict = Verdict::Reproduces;
    }
    j
}

/// Best first: verdict, then observations reproduced, then fewer contradicted without a run,
/// then the longest run produced; the grid's order otherwise (a stable sort).
pub fn rank(judged: &mut [Judged]) {
    let run = |j: &Judged| j.results.iter().filter_map(|r| r.longest_run).max().unwrap_or(0);
    judged.sort_by(|a, b| {
        a.verdict
            .cmp(&b.verdict)
            .then(b.reproduced().cmp(&a.reproduced()))
            .then(a.structural().len().cmp(&b.structural().len()))
            .then(run(b).cmp(&run(a)))
    });
}
