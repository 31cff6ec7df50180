//! Every hypothesis against a finding's record. A catalog fault (with the parameters explain
//! searches) is composed with the record's baseline quantization and judged per observation:
//! - coherent: base-scope greedy generation must be the baseline's, token for token; a width
//!   fault that is a bit-exact no-op at that hidden size (tests/width_faults.rs) passes without a
//!   run, otherwise a checkpoint of the observation's shape is synthesized and both generate;
//! - degenerate: base-scope greedy generation on the given checkpoint's weights must collapse
//!   (a run of `[generation] run` copies of one token) within the recorded length; observations
//!   of another hidden size than the checkpoint's are not tested (random weights do not collapse:
//!   reports/hidden-size-sweep.md).
//!
//! Generation is the sweep's (`sweep::base_generate_until`, its figures `longest_run`,
//! `distinct_ratio`), stopped once the observation's verdict is settled. The causes the finding
//! cleared are judged as predictions from the recorded shapes.

use super::{Cause, Observation, Outcome, Pattern};
use crate::backend::decoder::DecoderBackend;
use crate::error::{Error, Result};
use crate::fault::catalog::width::{acc_can_saturate, SEARCHED_WIDTHS};
use crate::fault::spec::FaultSpec;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::synth::SynthSpec;
use crate::model::Checkpoint;
use crate::probe::sweep::{base_generate_until, distinct_ratio, longest_run};
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// One hypothesis: the baseline alone, a catalog fault, or a cause the finding cleared.
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

/// One observation under one hypothesis.
#[derive(Debug, Clone, Serialize)]
pub struct ObsResult {
    pub status: Status,
    /// The figures, or why it was not run: "run 16, distinct 0.06, off the reference at step 3".
    pub figures: String,
    /// Longest run of one token (a degenerate observation's emulation).
    pub longest_run: Option<usize>,
    /// Whether a generation ran for it (not a no-op by definition, a prediction, untested).
    #[serde(skip)]
    pub ran: bool,
}

impl ObsResult {
    /// A result no generation of its own decided (a prediction, a no-op, untested).
    fn said(status: Status, figures: impl Into<String>) -> Self {
        ObsResult { status, figures: figures.into(), longest_run: None, ran: false }
    }

    /// A result a generation decided.
    fn ran(status: Status, figures: String, longest_run: Option<usize>) -> Self {
        ObsResult { status, figures, longest_run, ran: true }
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
    /// Reproduces every tested observation; partly: at least one degenerate one and not all;
    /// contradicts: no degenerate one (leaving a model coherent reproduces nothing).
    fn new(
        hypothesis: Hypothesis,
        label: String,
        finding: Option<u32>,
        results: Vec<ObsResult>,
        p: &Pattern,
    ) -> Self {
        let tested: Vec<(&Observation, &ObsResult)> =
            p.observations.iter().zip(&results).filter(|(_, r)| r.status != Status::Untested).collect();
        let hit = |o: &&(&Observation, &ObsResult)| o.1.status == Status::Reproduced;
        let degenerate_hit = tested.iter().filter(hit).any(|(o, _)| o.outcome == Outcome::Degenerate);
        let verdict = if tested.is_empty() {
            Verdict::Untested
        } else if tested.iter().all(|t| hit(&t)) && degenerate_hit {
            Verdict::Reproduces
        } else if degenerate_hit {
            Verdict::Partly
        } else {
            Verdict::Contradicts
        };
        Judged { hypothesis, label, finding, verdict, results }
    }

    pub fn reproduced(&self) -> usize {
        self.results.iter().filter(|r| r.status == Status::Reproduced).count()
    }

    /// The observations (1-based) it misses.
    pub fn misses(&self) -> Vec<usize> {
        self.results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.status == Status::Missed)
            .map(|(i, _)| i + 1)
            .collect()
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

/// The hypotheses ranked on `ckpt`: the baseline alone, then the catalog's grid on this model
/// (every fault over all layers, with its searched parameters; width faults with W ≥ hidden are
/// no-ops on every shape up to this one and are left out, see [`grid_note`]).
pub fn hypotheses(ckpt: &Checkpoint) -> Vec<FaultSpec> {
    crate::fault::catalog::grid(&ckpt.config)
}

/// What the grid holds, for the report.
pub fn grid_note(ckpt: &Checkpoint, n: usize) -> String {
    let widths = crate::fault::catalog::width::widths(&ckpt.config);
    let ws: Vec<String> = widths.iter().map(|w| w.to_string()).collect();
    format!(
        "{n} catalog hypotheses: every fault of the registry over all layers, with the parameters explain \
         searches on this model (widths W ∈ {{{}}}: {:?} and the hidden size's multiple-of-64 divisors, those \
         narrower than hidden {}; a W ≥ {} is a no-op on every shape on record up to it; norm-acc BITS 16, 20, 24 \
         where a row can saturate them)",
        ws.join(", "),
        SEARCHED_WIDTHS,
        ckpt.config.hidden_size,
        ckpt.config.hidden_size
    )
}

/// A shape's stand-in: seeded random llama weights with 4 massive-activation channels (as
/// tests/width_faults.rs); a dimension not on record takes a default (said in the report).
pub fn stand_in(o: &Observation) -> SynthSpec {
    let head_dim =
        [64, 48, 32, 16, 8, 2].into_iter().find(|d| o.hidden.is_multiple_of(*d)).unwrap_or(o.hidden);
    let heads = o.heads.unwrap_or(o.hidden / head_dim);
    let mut s = SynthSpec::arch(crate::model::Arch::Llama, 16);
    (s.hidden, s.layers, s.heads, s.kv_heads) =
        (o.hidden, o.layers.unwrap_or(2), heads, o.kv_heads.unwrap_or(heads));
    s.head_dim = Some(o.hidden / heads);
    s.vocab = Some(o.vocab.unwrap_or(512).min(4096));
    s.massive_channels = 4;
    s
}

/// Where an observation is tested, built once: its checkpoint, prompt and the baseline's tokens.
pub struct Bed {
    pub ckpt: Checkpoint,
    pub inputs: InputSet,
    pub baseline_tokens: Vec<u32>,
    /// The float reference's tokens (the sweep's "first step off the reference").
    pub reference_tokens: Vec<u32>,
    pub label: String,
}

/// One base-scope greedy generation under `faults` (+ `quant`), stopped by `done`, or by a
/// token outside the vocabulary (`no-lm-head`'s hidden-wide output): it cannot be fed back, and
/// ends the generation as its last token.
pub fn generate(
    ckpt: &Checkpoint,
    inputs: &InputSet,
    faults: &[FaultSpec],
    quant: Option<&FaultSpec>,
    steps: usize,
    mut done: impl FnMut(&[u32]) -> bool,
) -> Result<Vec<u32>> {
    let vocab = ckpt.config.vocab_size;
    let mut emu = DecoderBackend::emulator("hypothesis", ckpt, faults, quant)?;
    base_generate_until(&mut emu, inputs, steps, |t| outside(t, vocab).is_some() || done(t))
}

/// The last token when it lies outside the vocabulary.
fn outside(t: &[u32], vocab: usize) -> Option<u32> {
    t.last().copied().filter(|&x| x as usize >= vocab)
}

/// The prompt for `ckpt`: the text where it has a tokenizer, else the token ids.
pub fn prompt(p: &Pattern, ckpt: &Checkpoint, synthesized: bool) -> Result<InputSet> {
    let text = p.prompt.text.clone().filter(|_| !synthesized && has_tokenizer(ckpt));
    let spec = crate::probe::schema::InputsSpec {
        tokens: text.is_none().then(|| p.prompt.tokens.clone()),
        text,
        ..Default::default()
    };
    let mut i = spec
        .input_set(ckpt)
        .map_err(|e| Error::input(format!("{} [prompt]", p.path.display()), e.to_string()))?;
    i.decode = DecodeSpec::Greedy(0);
    Ok(i)
}

fn has_tokenizer(ckpt: &Checkpoint) -> bool {
    use crate::model::weights::CheckpointSource;
    match &ckpt.source {
        CheckpointSource::Dir(d) => d.join("tokenizer.json").is_file(),
        CheckpointSource::Gguf { .. } => true,
        CheckpointSource::Synth(_) => false,
    }
}

/// The trailing run of one token.
fn trailing_run(t: &[u32]) -> usize {
    t.iter().rev().take_while(|x| Some(*x) == t.last()).count()
}

/// A degenerate observation's check under `faults`/`quant` on `bed`.
fn degenerate(
    bed: &Bed,
    faults: &[FaultSpec],
    quant: Option<&FaultSpec>,
    within: usize,
    run: usize,
) -> Result<ObsResult> {
    let settled = |t: &[u32]| longest_run(t) >= run || trailing_run(t) + (within - t.len()) < run;
    let t = generate(&bed.ckpt, &bed.inputs, faults, quant, within, settled)?;
    if let Some(x) = outside(&t, bed.ckpt.config.vocab_size) {
        let figures =
            format!("id {x} at step {}: outside the vocabulary, generation cannot go on", t.len() - 1);
        return Ok(ObsResult::ran(Status::Missed, figures, Some(longest_run(&t[..t.len() - 1]))));
    }
    let longest = longest_run(&t);
    let off = t.iter().zip(&bed.reference_tokens).position(|(a, b)| a != b);
    let figures = format!(
        "run {longest} in {} tokens{}, distinct {:.2}, {}",
        t.len(),
        if t.len() < within { " (settled)" } else { "" },
        distinct_ratio(&t),
        off.map_or("on the reference throughout".into(), |s| format!("off the reference at step {s}"))
    );
    let status = if longest >= run { Status::Reproduced } else { Status::Missed };
    Ok(ObsResult::ran(status, figures, Some(longest)))
}

/// A coherent observation's check: the baseline's tokens, or the step it leaves them.
fn coherent(bed: &Bed, faults: &[FaultSpec], quant: Option<&FaultSpec>) -> Result<ObsResult> {
    let base = &bed.baseline_tokens;
    let off = |t: &[u32]| t.last().is_some_and(|x| *x != base[t.len() - 1]);
    let t = generate(&bed.ckpt, &bed.inputs, faults, quant, base.len(), off)?;
    Ok(match t.iter().zip(base).position(|(a, b)| a != b) {
        None => ObsResult::ran(
            Status::Reproduced,
            format!("the baseline's {} tokens on {}", base.len(), bed.label),
            None,
        ),
        Some(s) => ObsResult::ran(
            Status::Missed,
            format!("leaves the baseline's tokens at step {s} on {}", bed.label),
            None,
        ),
    })
}

/// The tested settings of a catalog hypothesis: its fault and the quantization (a `quant`
/// hypothesis in place of the baseline).
fn setting<'a>(
    spec: Option<&'a FaultSpec>,
    baseline: Option<&'a FaultSpec>,
) -> (Vec<FaultSpec>, Option<&'a FaultSpec>) {
    match spec {
        Some(s) if s.name == "quant" => (Vec::new(), Some(s)),
        Some(s) => (vec![s.clone()], baseline),
        None => (Vec::new(), baseline),
    }
}

/// One observation under one catalog hypothesis (None: the baseline alone).
fn one(p: &Pattern, beds: &[Option<Bed>], spec: Option<&FaultSpec>, i: usize) -> Result<ObsResult> {
    one_checked(p, beds, spec, i)
        .or_else(|e| Ok(ObsResult::ran(Status::Untested, format!("the emulation stopped: {e}"), None)))
}

fn one_checked(p: &Pattern, beds: &[Option<Bed>], spec: Option<&FaultSpec>, i: usize) -> Result<ObsResult> {
    let o = &p.observations[i];
    let Some(bed) = &beds[i] else {
        return Ok(ObsResult::said(
            Status::Untested,
            format!("not tested: a degenerate record needs trained weights of hidden {}", o.hidden),
        ));
    };
    let (faults, quant) = setting(spec, p.baseline.as_ref());
    if let Some(Err(e)) = spec.map(|s| crate::fault::catalog::build(s, &bed.ckpt.config)) {
        return Ok(ObsResult::said(Status::Untested, format!("does not apply on {}: {e}", bed.label)));
    }
    match o.outcome {
        Outcome::Coherent => {
            if spec.and_then(|s| noop_at(s, o.hidden)) == Some(true) {
                return Ok(ObsResult::said(
                    Status::Reproduced,
                    format!("bit-exact no-op at hidden {} (tests/width_faults.rs)", o.hidden),
                ));
            }
            coherent(bed, &faults, quant)
        }
        Outcome::Degenerate => degenerate(bed, &faults, quant, o.within(&p.generation), p.generation.run),
    }
}

/// For each observation, an earlier one whose run is the same (a degenerate outcome within the
/// same length on the same bed): its result is that one's, run once.
fn same_runs(p: &Pattern, beds: &[Option<Bed>]) -> Vec<Option<usize>> {
    let key = |i: usize| {
        let o = &p.observations[i];
        (o.outcome == Outcome::Degenerate)
            .then(|| beds[i].as_ref().map(|b| (b.label.clone(), o.within(&p.generation))))
            .flatten()
    };
    (0..p.observations.len())
        .map(|i| key(i).and_then(|k| (0..i).find(|&j| key(j) == Some(k.clone()))))
        .collect()
}

/// Every (hypothesis, observation) pair, on `threads` threads pulling from one counter (the
/// results are in the grid's order whatever the timing).
pub fn judge_catalog(
    p: &Pattern,
    beds: &[Option<Bed>],
    specs: &[FaultSpec],
    threads: usize,
) -> Result<Vec<Judged>> {
    let n_obs = p.observations.len();
    let same = same_runs(p, beds);
    let jobs = (specs.len() + 1) * n_obs;
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<Result<ObsResult>>>> = Mutex::new((0..jobs).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= jobs {
                    break;
                }
                if same[j % n_obs].is_some() {
                    continue;
                }
                let spec = (j / n_obs).checked_sub(1).map(|k| &specs[k]);
                let r = one(p, beds, spec, j % n_obs);
                out.lock().expect("no thread panics holding it")[j] = Some(r);
            });
        }
    });
    let mut results = out.into_inner().expect("no thread panicked").into_iter();
    let mut judged = Vec::new();
    for h in 0..=specs.len() {
        let mut rs: Vec<Option<ObsResult>> =
            results.by_ref().take(n_obs).map(|r| r.transpose()).collect::<Result<_>>()?;
        for (i, s) in same.iter().enumerate() {
            if let Some(k) = s {
                rs[i] = rs[*k].clone().map(|r| ObsResult { ran: false, ..r });
            }
        }
        let rs: Vec<ObsResult> = rs.into_iter().map(|r| r.expect("every job ran")).collect();
        let (hyp, label, finding) = match h.checked_sub(1).map(|k| &specs[k]) {
            None => (Hypothesis::Baseline, baseline_label(p), None),
            Some(s) => {
                (Hypothesis::Fault(s.to_string()), s.to_string(), crate::fault::catalog::finding_of(&s.name))
            }
        };
        judged.push(Judged::new(hyp, label, finding, rs, p));
    }
    Ok(judged)
}

pub fn baseline_label(p: &Pattern) -> String {
    match &p.baseline {
        Some(b) => format!("none ({b} alone)"),
        None => "none (float)".into(),
    }
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
            let predicted: Option<bool> = match cause {
                Cause::GqaRatio => o.heads.zip(o.kv_heads).map(|(h, k)| !(h / k).is_power_of_two()),
                Cause::Depth => o.layers.map(|l| l > deepest_coherent),
                Cause::LmHeadSplit => o.lm_head_split,
            };
            let Some(degenerate) = predicted else {
                return ObsResult::said(Status::Untested, "shape not on record");
            };
            let said = if degenerate { "degenerate" } else { "coherent" };
            let hit = degenerate == (o.outcome == Outcome::Degenerate);
            let status = if hit { Status::Reproduced } else { Status::Missed };
            ObsResult::said(status, format!("predicts {said} ({})", o.shape()))
        })
        .collect();
    Judged::new(Hypothesis::Cleared(cause), cause.name().into(), Some(p.finding), results, p)
}

/// Best first: verdict, then observations reproduced, then the longest run produced on a
/// degenerate observation; the grid's order otherwise (a stable sort).
pub fn rank(judged: &mut [Judged]) {
    let run = |j: &Judged| j.results.iter().filter_map(|r| r.longest_run).max().unwrap_or(0);
    judged.sort_by(|a, b| {
        a.verdict.cmp(&b.verdict).then(b.reproduced().cmp(&a.reproduced())).then(run(b).cmp(&run(a)))
    });
}

/// Where each observation is tested: the given checkpoint where the hidden sizes agree, a
/// synthesized stand-in of a coherent shape otherwise, nothing for a degenerate one of another
/// width. Each bed's baseline and reference generate once here.
pub fn beds(p: &Pattern, ckpt: &Checkpoint) -> Result<Vec<Option<Bed>>> {
    let mut out = Vec::with_capacity(p.observations.len());
    let mut given: Option<(InputSet, Vec<u32>, Vec<u32>)> = None;
    for o in &p.observations {
        let steps = match o.outcome {
            Outcome::Coherent => p.generation.tokens,
            Outcome::Degenerate => o.within(&p.generation),
        };
        // The prompt on a checkpoint, and the baseline's and the reference's tokens there.
        let run = |ckpt: &Checkpoint, synthesized: bool| -> Result<(InputSet, Vec<u32>, Vec<u32>)> {
            let inputs = prompt(p, ckpt, synthesized)?;
            let base = generate(ckpt, &inputs, &[], p.baseline.as_ref(), steps, |_| false)?;
            let reference = generate(ckpt, &inputs, &[], None, steps, |_| false)?;
            Ok((inputs, base, reference))
        };
        let bed = |ckpt, (inputs, baseline_tokens, reference_tokens): (InputSet, _, _), label| Bed {
            ckpt,
            inputs,
            baseline_tokens,
            reference_tokens,
            label,
        };
        if o.hidden == ckpt.config.hidden_size {
            if given.as_ref().is_none_or(|g| g.1.len() < steps) {
                given = Some(run(ckpt, false)?);
            }
            let label = format!("{} (given)", ckpt.source);
            out.push(Some(bed(ckpt.clone(), given.clone().expect("set above"), label)));
        } else if o.outcome == Outcome::Coherent {
            let spec = stand_in(o);
            let label = format!(
                "synthesized hidden {} × {} layers, heads {}/{}",
                spec.hidden, spec.layers, spec.heads, spec.kv_heads
            );
            let synth = spec.build()?;
            let tokens = run(&synth, true)?;
            out.push(Some(bed(synth, tokens, label)));
        } else {
            out.push(None);
        }
    }
    Ok(out)
}
