//! Comparison: pure functions from two captures to rows of figures, verdicts and the
//! located first drift (the Polygraphy split: run everything first, compare second).

pub mod crosscheck;
pub mod lens;
pub mod locate;
pub mod metrics;
mod pair;
mod row;
pub mod shards;
pub mod thresholds;
pub mod tokens;

pub use pair::{PairComparison, View};
pub use row::{Failure, Flip, LogitsSummary, ProbsSummary, RowStatus, TapRow};

use crate::capture::Store;
use crate::error::{Error, Result};
use crate::tap::{Key, LayerTap, Tap, TapSelection};
use metrics::{Basic, LogitsRow};
use ndarray::ArrayD;
use row::Dir;
use std::borrow::Cow;
use thresholds::{Metric, Thresholds};

/// Reference and candidate values, flat and of equal length, and how they were aligned.
pub type Aligned<'a> = (Cow<'a, [f32]>, Cow<'a, [f32]>, Option<String>);

/// Align candidate to reference shapes. A device returns fewer rows than the reference holds:
/// logits for the last position only (HailoRT's server reads one [1, 1, vocab] row), and exposed
/// taps of the last prefill chunk only. A candidate that differs from the reference only in its
/// row axis (0 of `[T, F]`, 1 of `[H, T, ·]`), and holds fewer rows, is compared with the
/// reference's last rows.
pub fn align<'a>(r: &'a ArrayD<f32>, x: &'a ArrayD<f32>) -> Option<Aligned<'a>> {
    // Borrowed when the array is one contiguous standard-layout block (every capture read
    // from an npz is): a 1024-token logits tap of SmolLM2 is 200 MB a side, not worth a copy.
    fn flat(a: &ArrayD<f32>) -> Cow<'_, [f32]> {
        a.as_slice().map_or_else(|| Cow::Owned(a.iter().copied().collect()), Cow::Borrowed)
    }
    if r.shape() == x.shape() {
        return Some((flat(r), flat(x), None));
    }
    let axis = match r.ndim() {
        2 => 0,
        3 => 1,
        _ => return None,
    };
    // Ranks first: a candidate of another rank has no row axis to match (it indexed past its
    // shape, a panic on a hostile capture).
    if x.ndim() != r.ndim() {
        return None;
    }
    let others_agree = (0..r.ndim()).all(|a| a == axis || r.shape()[a] == x.shape()[a]);
    let (rows, have) = (r.shape()[axis], x.shape()[axis]);
    if !others_agree || have == 0 || have > rows {
        return None;
    }
    let tail = r.slice_axis(ndarray::Axis(axis), ndarray::Slice::from(rows - have..));
    let note = match have {
        1 => format!("reference row {} (last position)", rows - 1),
        _ => format!("reference rows {}..{rows} (the last {have} positions)", rows - have),
    };
    Some((Cow::Owned(tail.iter().copied().collect()), flat(x), Some(note)))
}

/// The reference tap whose -inf entries mask an attention tap: its layer's scores.
fn scores_of(key: &Key) -> Option<Key> {
    match key.canonical()? {
        (phase, Tap::Layer(l, LayerTap::Scores | LayerTap::Probs)) => {
            Some(Key::new(phase, Tap::Layer(l, LayerTap::Scores)))
        }
        _ => None,
    }
}

/// Masked entries of an attention tap: where the reference's scores are -inf.
fn attention_mask(scores: Option<&ArrayD<f32>>, len: usize) -> Option<Vec<bool>> {
    let scores = scores?;
    (scores.len() == len).then(|| scores.iter().map(|&s| s == f32::NEG_INFINITY).collect())
}

fn per_split(r: &[f32], x: &[f32], mask: Option<&[bool]>, parts: usize) -> Vec<Basic> {
    if parts == 0 || !r.len().is_multiple_of(parts) {
        return Vec::new();
    }
    let n = r.len() / parts;
    (0..parts)
        .map(|i| {
            metrics::basic(
                &r[i * n..(i + 1) * n],
                &x[i * n..(i + 1) * n],
                mask.map(|m| &m[i * n..(i + 1) * n]),
            )
        })
        .collect()
}

fn logits_summary(r: &[f32], x: &[f32], vocab: usize) -> LogitsSummary {
    let rows: Vec<LogitsRow> =
        r.chunks(vocab).zip(x.chunks(vocab)).map(|(a, b)| metrics::logits_row(a, b)).collect();
    let n = rows.len().max(1) as f64;
    let mut kls: Vec<f64> = rows.iter().map(|r| r.kl).collect();
    let flips: Vec<Flip> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.argmax_ref != r.argmax_cand)
        .map(|(t, r)| Flip {
            position: t,
            margin: r.margin,
            reference_token: r.argmax_ref,
            candidate_token: r.argmax_cand,
        })
        .collect();
    LogitsSummary {
        positions: rows.len(),
        argmax_agreement: rows.iter().filter(|r| r.argmax_ref == r.argmax_cand).count() as f64 / n,
        topk_overlap: rows.iter().map(|r| r.topk_overlap).sum::<f64>() / n,
        kl_mean: kls.iter().sum::<f64>() / n,
        kl_max: kls.iter().copied().fold(0.0, f64::max),
        kl_p99: metrics::quantile(&mut kls, 0.99),
        flips_above_margin: 0,
        flips,
        rows,
        shards: Vec::new(),
    }
}

fn probs_summary(x: &[f32], shape: &[usize], mask: Option<&[bool]>) -> Option<ProbsSummary> {
    let [h, t, s] = shape else { return None };
    let (h, t, s) = (*h, *t, *s);
    let mut per_head = vec![0f64; h];
    for (hh, err) in per_head.iter_mut().enumerate() {
        for tt in 0..t {
            let row = &x[(hh * t + tt) * s..(hh * t + tt + 1) * s];
            let sum: f64 = row.iter().map(|&v| v as f64).sum();
            *err = err.max((sum - 1.0).abs());
        }
    }
    let leak = mask.map_or(0, |m| m.iter().zip(x).filter(|(&masked, &v)| masked && v > 1e-6).count());
    Some(ProbsSummary {
        sum_err_max: per_head.iter().copied().fold(0.0, f64::max),
        sum_err_per_head: per_head,
        mask_leak: leak,
    })
}

/// The failed bounds of a row; with `beyond` (the rows of the candidate's expected
/// quantization and of its spread), each on the excess over them.
fn judge(row: &mut TapRow, thresholds: &Thresholds, beyond: Option<(&TapRow, Option<&TapRow>)>) {
    if row.status == RowStatus::ShapeMismatch {
        row.failures.push(Failure {
            metric: "shape".into(),
            dir: Dir::Max,
            bound: 0.0,
            value: 1.0,
            rule: format!("candidate {:?} vs reference {:?}", row.cand_shape, row.ref_shape),
            expected: None,
        });
        return;
    }
    // On a quantized target, a flip counts only where the reference's margin exceeds what
    // the expected noise can move two logits by: twice (its 99th-percentile |Δ| plus the
    // slack times its spread's).
    let noise_margin = beyond.map_or(0.0, |(e, spread)| {
        let p99 = |r: &TapRow| Metric::P99Abs.value(r).unwrap_or(0.0);
        2.0 * (p99(e) + thresholds::REALIZATION_SLACK * spread.map_or(0.0, p99))
    });
    if let Some(l) = row.logits.as_mut() {
        let margin = thresholds.flip_margin.max(noise_margin);
        l.flips_above_margin = l.flips.iter().filter(|f| f.margin > margin).count();
        let of = |r: &TapRow| r.logits.as_ref().map(|l| l.shards.clone()).filter(|s| !s.is_empty());
        let expected = beyond.and_then(|(e, spread)| Some((of(e)?, spread.and_then(of))));
        let beyond_shards = expected.as_ref().map(|(e, s)| (e.as_slice(), s.as_deref()));
        shards::judge(&mut l.shards, &row.tap.to_string(), thresholds, beyond_shards);
    }
    for (metric, (bound, rule)) in thresholds.bounds_for(&row.tap.to_string()) {
        let Some(value) = metric.value(row) else { continue };
        let expected = beyond.and_then(|(e, spread)| {
            let e = metric.value(e)?;
            let spread = spread.and_then(|s| metric.value(s));
            Some((e, thresholds::excess(metric, value, e, spread)))
        });
        let judged = expected.map_or(value, |(_, x)| x);
        if !metric.dir().passes(judged, bound) {
            row.failures.push(Failure {
                metric: metric.name().to_string(),
                dir: metric.dir(),
                bound,
                value,
                rule,
                expected,
            });
        }
    }
}

/// How a pair is compared: the view it is, the bounds that judge it, the taps it covers
/// (the reference may hold more, e.g. the scores that mask attention probs), and how many
/// threads read and compare taps at once (each holds one tap of each side).
#[derive(Clone, Copy)]
pub struct Settings<'a> {
    pub view: View,
    pub thresholds: &'a Thresholds,
    pub selection: Option<&'a TapSelection>,
    pub workers: usize,
    /// Judge each row on its excess over these comparisons' rows at the same phase and tap.
    pub beyond: Option<Beyond<'a>>,
    /// The candidate's lm_head shard widths, in output order: its logits are also compared
    /// shard by shard ([`shards`]).
    pub shards: Option<&'a [usize]>,
}

/// What a candidate is judged beyond: its expected quantization against the same reference
/// (its own noise), and that emulation against a second draw of it (the spread a draw shows).
#[derive(Clone, Copy)]
pub struct Beyond<'a> {
    pub expected: &'a PairComparison,
    pub spread: Option<&'a PairComparison>,
}

impl<'a> Settings<'a> {
    /// Every tap, cumulative, on one thread.
    pub fn new(thresholds: &'a Thresholds) -> Self {
        Settings {
            view: View::Cumulative,
            thresholds,
            selection: None,
            workers: 1,
            beyond: None,
            shards: None,
        }
    }
}

/// Compare `candidate` against `reference`, tap by tap: every `PHASE/TAP` key either holds
/// (the selected ones), in execution order, a row each. The captures may be in memory or in
/// files: each row reads one tap of each side (and a probs tap's scores) and lets them go.
pub fn compare(
    reference: &dyn Store,
    candidate: &dyn Store,
    names: (&str, &str),
    s: &Settings,
) -> Result<PairComparison> {
    let mut keys: std::collections::BTreeSet<Key> = reference.keys().into_iter().collect();
    keys.extend(candidate.keys());
    let keys: Vec<Key> = keys
        .into_iter()
        .filter(|k| k.phase().is_some() && s.selection.is_none_or(|sel| sel.selects(k)))
        .collect();
    let row = |key: &Key| -> Result<TapRow> {
        crate::error::check_interrupt()?;
        let (r, x) = (reference.get(key)?, candidate.get(key)?);
        // A probs tap's mask comes from its layer's scores (a scores tap masks itself).
        let sk = scores_of(key);
        let other = match &sk {
            Some(sk) if sk != key && r.is_some() => reference.get(sk)?,
            _ => None,
        };
        let scores = match &sk {
            Some(sk) if sk == key => r.as_deref(),
            _ => other.as_deref(),
        };
        let mut row = compare_one(r.as_deref(), x.as_deref(), scores, key, s.shards);
        let beyond = s.beyond.and_then(|b| {
            let spread = b.spread.and_then(|p| p.row(row.phase, &row.tap));
            b.expected.row(row.phase, &row.tap).map(|e| (e, spread))
        });
        judge(&mut row, s.thresholds, beyond);
        Ok(row)
    };
    let rows = if s.workers <= 1 {
        keys.iter().map(row).collect::<Result<Vec<_>>>()?
    } else {
        use rayon::prelude::*;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(s.workers)
            .build()
            .map_err(|e| Error::usage(format!("cannot start {} comparison threads: {e}", s.workers)))?;
        pool.install(|| keys.par_iter().map(row).collect::<Result<Vec<_>>>())?
    };
    Ok(PairComparison {
        reference: names.0.to_string(),
        candidate: names.1.to_string(),
        view: s.view,
        rows,
        on_device: false,
        tokens: None,
    })
}

/// Compare two captures recorded anywhere (`hefprobe compare`, the Python module's `compare`),
/// with the command line's extra `bounds` (METRIC=VALUE or GLOB:METRIC=VALUE): their globs are
/// checked against the taps the captures hold (no model here). `names` are the two sides'
/// labels, `sources` what they were read from (the errors name them); `shards` the
/// candidate's lm_head shard widths (`--shards`), whose sum must be its logits width. Two
/// captures that share no key, or a tap whose shapes cannot be aligned, are input errors
/// naming the candidate.
pub fn captures(
    reference: &dyn Store,
    candidate: &dyn Store,
    (names, sources): ((&str, &str), (&str, &str)),
    bounds: &[thresholds::Bound],
    shards: Option<&[usize]>,
) -> Result<PairComparison> {
    let mut thresholds = Thresholds::default();
    for b in bounds {
        thresholds.add(b);
    }
    let mut taps: Vec<String> = reference
        .keys()
        .into_iter()
        .chain(candidate.keys())
        .filter(|k| k.phase().is_some())
        .filter_map(|k| Some(k.tap()?.to_string()))
        .collect();
    taps.sort();
    taps.dedup();
    let layers = taps.iter().filter_map(|t| Tap::parse(t)?.layer()).max().map_or(0, |l| l + 1);
    thresholds.check_globs(&taps, layers)?;
    let settings = Settings { workers: rayon::current_num_threads(), shards, ..Settings::new(&thresholds) };
    let pair = compare(reference, candidate, names, &settings)?;
    check_shards(&pair, shards, sources.1)?;
    if pair.rows.iter().all(|r| !r.checked()) {
        return Err(Error::input(
            sources.1,
            format!(
                "shares no PHASE/TAP key with {}; give a name map (--map) to name its tensors",
                sources.0
            ),
        ));
    }
    if let Some(bad) = pair.rows.iter().find(|r| r.status == RowStatus::ShapeMismatch) {
        return Err(Error::input(
            format!("{} array `{}`", sources.1, bad.key()),
            format!(
                "shape {:?} cannot be aligned with the reference's {:?}; give a name map (--map) with a \
                 layout transform (squeeze, permute, reshape)",
                bad.cand_shape, bad.ref_shape
            ),
        ));
    }
    Ok(pair)
}

/// Shard widths given for a capture must add up to its logits' width.
fn check_shards(pair: &PairComparison, shards: Option<&[usize]>, source: &str) -> Result<()> {
    let Some(widths) = shards else { return Ok(()) };
    let logits = pair.rows.iter().find(|r| r.tap.canonical() == Some(Tap::Logits) && r.checked());
    match logits {
        Some(r) if r.logits.as_ref().is_some_and(|l| l.shards.is_empty()) => Err(Error::usage(format!(
            "--shards {}: they add up to {}, but {source}'s logits are {} wide: give the HEF's shard widths in \
             output order",
            widths.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
            widths.iter().sum::<usize>(),
            r.cand_shape.last().copied().unwrap_or(0)
        ))),
        _ => Ok(()),
    }
}

/// One row: the reference's and the candidate's tap at `key` (either may be missing), and
/// the reference's scores that mask it when it is an attention tap.
fn compare_one(
    r: Option<&ArrayD<f32>>,
    x: Option<&ArrayD<f32>>,
    scores: Option<&ArrayD<f32>>,
    key: &Key,
    shard_widths: Option<&[usize]>,
) -> TapRow {
    let (phase, tap) =
        (key.phase().expect("compared keys have a phase"), key.tap().expect("phase/tap").clone());
    let mut row = TapRow {
        phase,
        tap,
        status: RowStatus::Compared,
        ref_shape: r.map(|a| a.shape().to_vec()).unwrap_or_default(),
        cand_shape: x.map(|a| a.shape().to_vec()).unwrap_or_default(),
        aligned: None,
        metrics: None,
        cosine_no_outliers: None,
        per_head: Vec::new(),
        per_position: Vec::new(),
        logits: None,
        probs: None,
        failures: Vec::new(),
    };
    let (r, x) = match (r, x) {
        (Some(r), Some(x)) => (r, x),
        (r, _) => {
            row.status = if r.is_some() { RowStatus::OnlyInReference } else { RowStatus::OnlyInCandidate };
            return row;
        }
    };
    let Some((rv, xv, aligned)) = align(r, x) else {
        row.status = RowStatus::ShapeMismatch;
        return row;
    };
    let canon = row.tap.canonical();
    // The reference's scores aligned as the reference was (its last rows), when they were.
    let mask = match (&aligned, scores) {
        (None, s) => attention_mask(s, rv.len()),
        (Some(_), Some(s)) if s.shape() == r.shape() => {
            align(s, x).map(|(sv, _, _)| sv.iter().map(|&v| v == f32::NEG_INFINITY).collect())
        }
        (Some(_), _) => None,
    };
    row.metrics = Some(metrics::compute(&rv, &xv, mask.as_deref()));
    let shape: Vec<usize> = if aligned.is_some() { x.shape().to_vec() } else { r.shape().to_vec() };
    let features = shape.last().copied().unwrap_or(1).max(1);
    match canon {
        Some(t) if t.is_per_head() => {
            row.per_head = per_split(&rv, &xv, mask.as_deref(), shape[0]);
            if matches!(t, Tap::Layer(_, LayerTap::Probs)) {
                row.probs = probs_summary(&xv, &shape, mask.as_deref());
            }
        }
        _ if shape.len() == 2 => {
            row.per_position = per_split(&rv, &xv, None, shape[0]);
            if canon != Some(Tap::Logits) {
                row.cosine_no_outliers =
                    Some(metrics::cosine_without_outliers(&rv, &xv, features, metrics::OUTLIER_CHANNELS));
            }
        }
        _ => {}
    }
    if canon == Some(Tap::Logits) {
        let mut l = logits_summary(&rv, &xv, features);
        l.shards = shard_widths.and_then(|w| shards::figures(&rv, &xv, features, w)).unwrap_or_default();
        row.logits = Some(l);
    }
    row.aligned = aligned;
    row
}
