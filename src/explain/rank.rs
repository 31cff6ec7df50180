//! `explain`: run the reference with each catalog fault injected and rank the faults by how
//! closely each emulation reproduces the observed capture — the step every row of the
//! findings table was solved by, done by the tool.
//!
//! The captures are [`Source`]s matched key by key: in memory, or (a run spilled to disk)
//! `.npz` files read one tap at a time, each emulation written to a temporary file and
//! deleted once matched. Both give the same figures: the same f32 values in the same order.

use crate::backend::decoder::DecoderBackend;
use crate::backend::Backend;
use crate::capture::source::Source;
use crate::capture::Capture;
use crate::compare::metrics;
use crate::error::{Error, Result};
use crate::explain::ExplainSpec;
use crate::inputs::InputSet;
use crate::model::{Checkpoint, Decoder};
use crate::report::{AttributionRow, ExplainReport, ExplainRow};
use crate::tap::{Phase, TapSelection};
use ndarray::ArrayD;
use std::path::Path;
use std::sync::Arc;

/// How well `emulated` reproduces `observed` on their shared keys.
#[derive(Debug, Clone, Copy)]
pub struct Match {
    pub cosine: f64,
    pub argmax: f64,
    pub kl: f64,
}

/// Aligned flat values: compare's alignment, with the single row on either side (an
/// emulated fault may return one row where the observation has many, and vice versa).
fn aligned<'a>(a: &'a ArrayD<f32>, b: &'a ArrayD<f32>) -> Option<crate::compare::Aligned<'a>> {
    crate::compare::align(a, b).or_else(|| crate::compare::align(b, a).map(|(y, x, note)| (x, y, note)))
}

pub fn match_captures(emulated: &Source, observed: &Source, keys: &[String]) -> Result<Match> {
    let (mut cos_sum, mut n) = (0f64, 0usize);
    let (mut agree, mut kl, mut rows) = (0usize, 0f64, 0usize);
    for key in keys {
        let (Some(e), Some(o)) = (emulated.get(key)?, observed.get(key)?) else {
            n += 1;
            continue;
        };
        let Some((ev, ov, _)) = aligned(&e, &o) else {
            n += 1; // a shape the observation does not have: no match on this tap
            continue;
        };
        let (b, nonfinite) = metrics::basic_counted(&ev, &ov, None);
        n += 1;
        if nonfinite > 0 {
            // The observation is finite here (explain leaves out taps where it is not), so an
            // emulation that goes NaN or inf does not reproduce it: no match on this tap.
            continue;
        }
        cos_sum += b.cosine;
        if key.ends_with("/logits") {
            let vocab = *o.shape().last().unwrap_or(&1);
            for (a, b) in ev.chunks(vocab).zip(ov.chunks(vocab)) {
                let r = metrics::logits_row(b, a);
                agree += usize::from(r.argmax_ref == r.argmax_cand);
                kl += r.kl;
                rows += 1;
            }
        }
    }
    let rows_f = rows.max(1) as f64;
    Ok(Match {
        cosine: if n == 0 { 0.0 } else { cos_sum / n as f64 },
        argmax: if rows == 0 { f64::NAN } else { agree as f64 / rows_f },
        kl: if rows == 0 { f64::NAN } else { kl / rows_f },
    })
}

/// The layer of the first layer tap (in execution order) where `observed` departs from the
/// reference beyond float noise.
fn first_drift_layer(reference: &Source, observed: &Source, keys: &[String]) -> Result<Option<usize>> {
    for k in keys {
        let Some(layer) = k.split_once('/').and_then(|(_, t)| crate::tap::Tap::parse(t)?.layer()) else {
            continue;
        };
        let (Some(r), Some(o)) = (reference.get(k)?, observed.get(k)?) else { continue };
        let Some((rv, ov, _)) = aligned(&r, &o) else { continue };
        let (b, nonfinite) = metrics::basic_counted(&rv, &ov, None);
        if nonfinite > 0 || b.cosine < 1.0 - 1e-6 {
            return Ok(Some(layer));
        }
    }
    Ok(None)
}

/// Non-finite entries of the observation, per key, in key order: NaN anywhere, and ±inf where
/// the reference does not hold the same infinity (masked scores are −inf on both sides). In an
/// `attn.scores` tap −inf is a mask entry by the tap's definition, so a wrong mask (the
/// `mask-repeat` fault of the catalog, finding 4) is drift to rank, not a non-finite output.
pub fn nonfinite_keys(
    reference: &Source,
    observed: &Source,
    keys: &[String],
) -> Result<Vec<(String, usize)>> {
    let mut bad = Vec::new();
    for k in keys {
        let Some(o) = observed.get(k)? else { continue };
        let r = if k.ends_with("attn.scores") { None } else { reference.get(k)? };
        let n = match r.filter(|r| r.shape() == o.shape()) {
            Some(r) => {
                o.iter().zip(r.iter()).filter(|(x, y)| !(x.is_finite() || x.is_infinite() && x == y)).count()
            }
            None => o.iter().filter(|x| x.is_nan() || (x.is_infinite() && **x > 0.0)).count(),
        };
        if n > 0 {
            bad.push((k.clone(), n));
        }
    }
    Ok(bad)
}

/// The verdict when the observation holds non-finite values: no fault is ranked, because no
/// numeric fault the catalog emulates produces NaN, and a cosine over NaN means nothing.
fn refuse_nonfinite(observed_name: &str, taps: Vec<String>, bad: &[(String, usize)]) -> ExplainReport {
    let total: usize = bad.iter().map(|(_, n)| n).sum();
    let (first, n) = &bad[0];
    let more =
        if bad.len() > 1 { format!("; {} keys in all, {total} values", bad.len()) } else { String::new() };
    ExplainReport {
        observed: observed_name.to_string(),
        taps,
        rows: Vec::new(),
        baseline: None,
        conclusion: format!(
            "explain refuses to rank: `{observed_name}` holds non-finite values (NaN or ±inf where the reference is \
             finite), first at {first} ({n} values{more}). No fault in the catalog computes NaN or inf, so none is \
             ranked; a non-finite output is a device or runtime failure (overflow, a wrong output quantization, \
             uninitialized memory) to fix before explaining drift."
        ),
        attribution: Vec::new(),
        nonfinite: bad.to_vec(),
    }
}

/// Keys of `observed` that name canonical taps (what an emulation can reproduce).
pub fn shared_keys(observed: &Source) -> Vec<String> {
    observed
        .keys()
        .into_iter()
        .filter(|k| {
            k.split_once('/')
                .is_some_and(|(p, t)| Phase::parse(p).is_some() && crate::tap::Tap::parse(t).is_some())
        })
        .collect()
}

struct Candidate {
    spec: String,
    m: Match,
    /// The emulation equals the clean reference on the shared taps (to float noise).
    clean_like: bool,
}

/// Cosines within this of 1 (or of each other) are float noise, not a difference.
const CLEAN_EPS: f64 = 1e-9;
/// How many of the best per-layer faults are narrowed to single layers.
const REFINE: usize = 4;
/// Rows whose ties are resolved (each tie check re-runs two emulations).
const TIE_ROWS: usize = 5;

fn sort(results: &mut [Candidate]) {
    results.sort_by(|a, b| {
        b.m.cosine.total_cmp(&a.m.cosine).then(a.m.kl.total_cmp(&b.m.kl)).then(a.spec.cmp(&b.spec))
    });
}

fn split(spec: &str) -> Vec<String> {
    spec.split(" + ").map(String::from).collect()
}

/// Runs the reference with faults injected, on the inputs and taps being explained.
struct Emulator<'a> {
    ckpt: &'a Checkpoint,
    inputs: &'a InputSet,
    taps: TapSelection,
    /// Where emulations are written (a spilled run's temporary folder); None: kept in memory.
    scratch: Option<&'a Path>,
}

/// One emulated run: in memory, or a temporary `.npz` deleted when this is dropped.
enum Emulation {
    Memory(Capture),
    File(tempfile::TempPath),
}

impl Emulation {
    fn source(&self) -> Result<Source<'_>> {
        match self {
            Emulation::Memory(c) => Ok(Source::Memory(c)),
            Emulation::File(path) => Source::open(path),
        }
    }
}

impl Emulator<'_> {
    fn run(&self, specs: &[String]) -> Result<Emulation> {
        let mut b = DecoderBackend::emulator(&specs.join("+"), self.ckpt, specs, None)?;
        let Some(dir) = self.scratch else {
            let run = b.run(self.inputs, &self.taps);
            return run.error.map_or(Ok(Emulation::Memory(run.capture)), Err);
        };
        let path = tempfile::Builder::new()
            .prefix("explain-")
            .suffix(".npz")
            .tempfile_in(dir)
            .map_err(|e| Error::io(dir, e))?
            .into_temp_path();
        let run = b.run_to_file(self.inputs, &self.taps, &path)?;
        run.error.map_or(Ok(Emulation::File(path)), Err)
    }
}

/// Rank the faults against captures held in memory.
pub fn explain(
    ckpt: &Checkpoint,
    model: &Arc<Decoder>,
    inputs: &InputSet,
    reference: &Capture,
    observed_name: &str,
    observed: &Capture,
    spec: &ExplainSpec,
) -> Result<ExplainReport> {
    let (reference, observed) = (Source::Memory(reference), Source::Memory(observed));
    explain_from(ckpt, model, inputs, &reference, observed_name, &observed, spec, None)
}

/// Rank the faults against captures read tap by tap from `reference` and `observed`, each
/// emulation written to a temporary file in `scratch` (in memory when None) and matched one
/// tap of each side at a time.
#[allow(clippy::too_many_arguments)]
pub fn explain_from(
    ckpt: &Checkpoint,
    model: &Arc<Decoder>,
    inputs: &InputSet,
    reference: &Source,
    observed_name: &str,
    observed: &Source,
    spec: &ExplainSpec,
    scratch: Option<&Path>,
) -> Result<ExplainReport> {
    let keys = shared_keys(observed);
    if keys.is_empty() {
        return Err(Error::usage(format!(
            "explain: `{observed_name}` holds no canonical PHASE/TAP keys to match emulations against"
        )));
    }
    let mut tap_names: Vec<String> =
        keys.iter().map(|k| k.split_once('/').expect("key").1.to_string()).collect();
    tap_names.sort_by_cached_key(|t| crate::tap::key_order(&format!("prefill/{t}")));
    tap_names.dedup();
    let bad = nonfinite_keys(reference, observed, &keys)?;
    if !bad.is_empty() {
        return Ok(refuse_nonfinite(observed_name, tap_names, &bad));
    }
    let emu = Emulator { ckpt, inputs, taps: TapSelection::parse(&tap_names)?, scratch };
    let candidates: Vec<String> =
        spec.faults.clone().unwrap_or_else(|| crate::fault::catalog::grid(&model.cfg));

    let base = match_captures(reference, observed, &keys)?;
    let mut results: Vec<Candidate> = Vec::new();
    // Each candidate is one emulated run: a minute or more on a real model, so say where it is
    // (indicatif draws nothing when stderr is not a terminal).
    let bar = indicatif::ProgressBar::new(candidates.len() as u64);
    bar.set_style(indicatif::ProgressStyle::with_template("explain {pos}/{len} {msg}").expect("template"));
    let evaluate = |specs: Vec<String>| -> Result<Candidate> {
        bar.set_message(specs.join(" + "));
        bar.inc(1);
        let emulation = emu.run(&specs)?;
        let cap = emulation.source()?;
        Ok(Candidate {
            spec: specs.join(" + "),
            m: match_captures(&cap, observed, &keys)?,
            clean_like: match_captures(&cap, reference, &keys)?.cosine >= 1.0 - CLEAN_EPS,
        })
    };
    for c in &candidates {
        results.push(evaluate(vec![c.clone()])?);
    }
    sort(&mut results);
    // Narrow per-layer faults to single layers: at the layer where the observation first
    // departs from the reference (when it holds layer taps), and at every layer for the best
    // few families (the family finds the mechanism, the sweep finds where).
    let mut narrowed: Vec<String> = Vec::new();
    if let Some(layer) = first_drift_layer(reference, observed, &keys)? {
        for c in &candidates {
            if let Some(s) = crate::fault::catalog::per_layer(c, &model.cfg).into_iter().nth(layer) {
                narrowed.push(s);
            }
        }
    }
    for c in results.iter().filter(|c| !c.clean_like).take(REFINE) {
        narrowed.extend(crate::fault::catalog::per_layer(&c.spec, &model.cfg));
    }
    bar.inc_length(narrowed.len() as u64);
    for spec in narrowed {
        if !results.iter().any(|c| c.spec == spec) {
            results.push(evaluate(vec![spec])?);
        }
    }
    if spec.pairs {
        sort(&mut results);
        let top: Vec<String> =
            results.iter().filter(|c| !c.clean_like).take(5).map(|c| c.spec.clone()).collect();
        bar.inc_length((top.len() * top.len().saturating_sub(1) / 2) as u64);
        for i in 0..top.len() {
            for j in i + 1..top.len() {
                results.push(evaluate(vec![top[i].clone(), top[j].clone()])?);
            }
        }
    }
    sort(&mut results);
    bar.finish_and_clear();

    // Faults whose emulations agree on these inputs (to float noise) are one row with ties.
    let mut rows: Vec<ExplainRow> = Vec::new();
    let mut used = vec![false; results.len()];
    for i in 0..results.len() {
        if used[i] {
            continue;
        }
        used[i] = true;
        let mut ties = Vec::new();
        if rows.len() < TIE_ROWS {
            for j in i + 1..results.len() {
                if !used[j] && (results[j].m.cosine - results[i].m.cosine).abs() <= CLEAN_EPS {
                    let a = emu.run(&split(&results[i].spec))?;
                    let b = emu.run(&split(&results[j].spec))?;
                    if match_captures(&a.source()?, &b.source()?, &keys)?.cosine >= 1.0 - CLEAN_EPS {
                        used[j] = true;
                        ties.push(results[j].spec.clone());
                    }
                }
            }
        }
        let c = &results[i];
        let name = c.spec.split([':', '@', ' ']).next().unwrap_or("");
        rows.push(ExplainRow {
            rank: rows.len() + 1,
            fault: c.spec.clone(),
            finding: crate::fault::catalog::finding_of(name),
            match_cosine: c.m.cosine,
            argmax_agreement: c.m.argmax,
            kl_mean: c.m.kl,
            ties,
            note: c.clean_like.then(|| "indistinguishable from a clean run on these inputs".to_string()),
        });
    }
    let baseline = ExplainRow {
        rank: 0,
        fault: "(clean reference)".into(),
        finding: None,
        match_cosine: base.cosine,
        argmax_agreement: base.argmax,
        kl_mean: base.kl,
        ties: Vec::new(),
        note: None,
    };
    let conclusion = conclude(&rows, &baseline, observed_name);
    let attribution = match &spec.quant {
        Some(q) => attribute(&emu, reference, observed, &keys, q)?,
        None => Vec::new(),
    };
    Ok(ExplainReport {
        observed: observed_name.to_string(),
        taps: tap_names,
        rows,
        baseline: Some(baseline),
        conclusion,
        attribution,
        nonfinite: Vec::new(),
    })
}

/// Share of the observed drift (1 − baseline cosine) a match removes.
pub fn explained_share(best: f64, baseline: f64) -> f64 {
    let drift = 1.0 - baseline;
    if drift <= 1e-12 {
        return 1.0;
    }
    (1.0 - (1.0 - best) / drift).clamp(0.0, 1.0)
}

fn conclude(rows: &[ExplainRow], baseline: &ExplainRow, observed: &str) -> String {
    if baseline.match_cosine >= 1.0 - 1e-9
        && (baseline.argmax_agreement.is_nan() || baseline.argmax_agreement >= 1.0)
    {
        return format!("`{observed}` matches the clean reference: nothing to explain.");
    }
    let Some(best) = rows.first() else { return "no fault was ranked.".into() };
    let share = explained_share(best.match_cosine, baseline.match_cosine);
    let ties =
        if best.ties.is_empty() { String::new() } else { format!(" (tied with {})", best.ties.join(", ")) };
    if best.note.is_some() {
        return format!(
            "nothing in the catalog explains `{observed}`: the best match is indistinguishable from a clean run (match cosine {:.6}).",
            best.match_cosine
        );
    }
    if share >= 0.9 && best.match_cosine > baseline.match_cosine {
        format!(
            "best explanation: {}{ties} — match cosine {:.6} (clean reference {:.6}; explains {:.0}% of the drift)",
            best.fault,
            best.match_cosine,
            baseline.match_cosine,
            share * 100.0
        )
    } else {
        format!(
            "nothing in the catalog explains `{observed}`: the best, {}, reaches match cosine {:.6} against the clean reference's {:.6} ({:.0}% of the drift).",
            best.fault,
            best.match_cosine,
            baseline.match_cosine,
            share * 100.0
        )
    }
}

/// Three-way attribution: per shared key, fp32 ↔ quant emulation ↔ observed.
fn attribute(
    emu: &Emulator,
    reference: &Source,
    observed: &Source,
    keys: &[String],
    quant: &str,
) -> Result<Vec<AttributionRow>> {
    let spec = if quant.starts_with("quant") { quant.to_string() } else { format!("quant:{quant}") };
    let emulation = emu.run(&[spec])?;
    let emulated = emulation.source()?;
    let cos = |a: Option<&ArrayD<f32>>, b: Option<&ArrayD<f32>>| -> f64 {
        match (a, b) {
            (Some(x), Some(y)) => aligned(x, y).map_or(0.0, |(x, y, _)| metrics::basic(&x, &y, None).cosine),
            _ => f64::NAN,
        }
    };
    let mut rows = Vec::new();
    for k in keys {
        let Some((phase, t)) = k.split_once('/').and_then(|(p, t)| Some((Phase::parse(p)?, t))) else {
            continue;
        };
        // One tap of each of the three captures at a time.
        let (r, o, q) = (reference.get(k)?, observed.get(k)?, emulated.get(k)?);
        let (r, o, q) = (r.as_deref(), o.as_deref(), q.as_deref());
        let (ro, rq, qo) = (cos(r, o), cos(r, q), cos(q, o));
        rows.push(AttributionRow {
            phase,
            tap: t.to_string(),
            reference_vs_observed: ro,
            reference_vs_quant: rq,
            quant_vs_observed: qo,
            explained: explained_share(qo, ro),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, IxDyn};

    fn cap(key: &str, v: &[f32]) -> Capture {
        let mut c = Capture::default();
        c.insert(key.to_string(), ArrayD::from_shape_vec(IxDyn(&[1, v.len()]), v.to_vec()).unwrap());
        c
    }

    #[test]
    fn a_wrong_mask_is_drift_but_nan_and_stray_infinities_are_not() {
        let inf = f32::INFINITY;
        let scores = "prefill/layers.1.attn.scores".to_string();
        // mask-repeat (finding 4) masks entries the reference keeps: −inf in scores is a mask.
        let r = cap(&scores, &[0.5, -inf, 0.25]);
        let o = cap(&scores, &[-inf, -inf, 0.25]);
        let bad = |r: &Capture, o: &Capture, k: &String| {
            nonfinite_keys(&Source::Memory(r), &Source::Memory(o), std::slice::from_ref(k)).unwrap()
        };
        assert!(bad(&r, &o, &scores).is_empty());
        let o = cap(&scores, &[f32::NAN, -inf, inf]);
        assert_eq!(bad(&r, &o, &scores), vec![(scores.clone(), 2)]);
        // Outside scores, −inf where the reference is finite is a non-finite output.
        let out = "prefill/layers.1.out".to_string();
        let r = cap(&out, &[0.5, 1.0]);
        let o = cap(&out, &[-inf, 1.0]);
        assert_eq!(bad(&r, &o, &out), vec![(out.clone(), 1)]);
    }

    #[test]
    fn an_emulation_that_goes_nan_does_not_match_a_finite_observation() {
        let keys = vec!["prefill/layers.0.out".to_string()];
        let (observed, nan, half) = (
            cap(&keys[0], &[1.0, 2.0, 3.0]),
            cap(&keys[0], &[f32::NAN; 3]),
            cap(&keys[0], &[1.0, f32::NAN, 3.0]),
        );
        let (observed, nan, half) = (Source::Memory(&observed), Source::Memory(&nan), Source::Memory(&half));
        let cosine = |e: &Source, o: &Source| match_captures(e, o, &keys).unwrap().cosine;
        assert_eq!(cosine(&nan, &observed), 0.0);
        assert_eq!(cosine(&half, &observed), 0.0, "NaN is never averaged in");
        assert_eq!(cosine(&observed, &observed), 1.0);
        assert_eq!(first_drift_layer(&observed, &half, &keys).unwrap(), Some(0));
    }

    #[test]
    fn ranking_from_files_equals_ranking_in_memory_and_leaves_no_emulation_behind() {
        let (ckpt, inputs) = crate::explain::matrix::matrix_model().unwrap();
        let model = Arc::new(Decoder::new(&ckpt).unwrap());
        let all = TapSelection::all();
        let reference = DecoderBackend::reference(model.clone()).run(&inputs, &all).capture;
        let fault = ["shared-softmax@layers=1".to_string()];
        let observed =
            DecoderBackend::emulator("obs", &ckpt, &fault, None).unwrap().run(&inputs, &all).capture;
        // `@layers=1-1` is `@layers=1`: a tie, checked on two emulations at once.
        let faults = ["shared-softmax@layers=1-1", "shared-softmax", "mask-repeat", "no-lm-head"];
        let spec = ExplainSpec {
            faults: Some(faults.map(String::from).to_vec()),
            pairs: true,
            quant: Some("w8a16".into()),
            ..Default::default()
        };
        let held = explain(&ckpt, &model, &inputs, &reference, "obs", &observed, &spec).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (r, o, scratch) =
            (dir.path().join("r.npz"), dir.path().join("o.npz"), dir.path().join("scratch"));
        reference.write_npz_quiet(&r).unwrap();
        observed.write_npz_quiet(&o).unwrap();
        std::fs::create_dir(&scratch).unwrap();
        let (r, o) = (Source::open(&r).unwrap(), Source::open(&o).unwrap());
        let from_files = explain_from(&ckpt, &model, &inputs, &r, "obs", &o, &spec, Some(&scratch)).unwrap();
        assert_eq!(format!("{held:?}"), format!("{from_files:?}"));
        assert!(!held.rows[0].ties.is_empty() && !held.attribution.is_empty(), "{held:?}");
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0, "an emulation was left behind");
    }
}
