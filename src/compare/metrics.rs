//! The metrics, one definition each (docs/METRICS.md). `r` is the reference, `x` the candidate,
//! both flattened and accumulated in f64. Masked entries and entries that are ±inf (same
//! sign) on both sides are excluded first; NaN anywhere, and inf on one side only, are
//! counted and reported, never averaged in.

use serde::Serialize;
use std::mem::MaybeUninit;

/// Tolerances of the close fraction: numpy.isclose's defaults.
pub const CLOSE_RTOL: f64 = 1e-5;
pub const CLOSE_ATOL: f64 = 1e-8;
/// ε of the relative error |r − x| / max(|r|, ε).
pub const REL_EPS: f64 = 1e-6;
/// Channels of largest reference magnitude removed for the outlier-excluded cosine.
pub const OUTLIER_CHANNELS: usize = 4;
/// k of the top-k overlap (AI Hub's convention).
pub const TOP_K: usize = 5;

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Metrics {
    /// Elements compared.
    pub n: usize,
    /// Elements excluded as masked or ±inf on both sides.
    pub excluded: usize,
    pub nan_ref: usize,
    pub nan_cand: usize,
    /// Elements infinite on one side only (or with opposite signs).
    pub inf_mismatch: usize,
    pub cosine: f64,
    pub sqnr_db: f64,
    pub max_abs: f64,
    pub mean_abs: f64,
    pub p99_abs: f64,
    pub rel_max: f64,
    pub rel_median: f64,
    pub close_frac: f64,
}

impl Metrics {
    pub fn nonfinite(&self) -> usize {
        self.nan_ref + self.nan_cand + self.inf_mismatch
    }

    /// The cosine, or None when no element was comparable because every one was non-finite
    /// (docs/METRICS.md: NaN is counted, never averaged in; such a row has no cosine).
    pub fn cosine_opt(&self) -> Option<f64> {
        (!self.cosine.is_nan()).then_some(self.cosine)
    }

    /// The SQNR, or None on the same condition as [`Metrics::cosine_opt`].
    pub fn sqnr_opt(&self) -> Option<f64> {
        (!self.sqnr_db.is_nan()).then_some(self.sqnr_db)
    }

    /// Whether an element is left out of the sums: masked or same-sign inf on both sides
    /// (excluded), or NaN or one-sided inf (counted).
    fn leaves_out(&mut self, masked: bool, a: f64, b: f64) -> bool {
        if masked {
            self.excluded += 1;
        } else if a.is_nan() || b.is_nan() {
            self.nan_ref += usize::from(a.is_nan());
            self.nan_cand += usize::from(b.is_nan());
        } else if a.is_infinite() || b.is_infinite() {
            if a == b {
                self.excluded += 1;
            } else {
                self.inf_mismatch += 1;
            }
        } else {
            return false;
        }
        true
    }
}

/// Cosine with the conventions: both zero → 1; one zero → 0; clamped to [−1, 1].
pub fn cosine_from(dot: f64, rr: f64, xx: f64) -> f64 {
    match (rr == 0.0, xx == 0.0) {
        (true, true) => 1.0,
        (true, false) | (false, true) => 0.0,
        // sqrt(rr·xx) rather than sqrt(rr)·sqrt(xx): identical vectors give exactly 1.
        _ => (dot / (rr * xx).sqrt()).clamp(-1.0, 1.0),
    }
}

/// 20·log10(‖r‖ / ‖r − x‖); +inf when equal.
pub fn sqnr_from(rr: f64, dd: f64) -> f64 {
    if dd == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (rr / dd).log10()
    }
}

/// numpy.quantile with the default linear interpolation; `v` is reordered in place.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    let (a, b) = ranked(v, lo, hi > lo);
    a + (b - a) * (pos - lo as f64)
}

/// The element of rank `k` of `v` (0 = smallest, in `f64::total_cmp` order) and, when
/// `next`, the one of rank k + 1 (else the same). Large inputs are first narrowed by a sample:
/// its order statistics bracket rank k, one pass counts what lies below the bracket and keeps
/// what lies inside, and only that (a few % of `v`) is selected in. If the bracket missed (a
/// sample is never guaranteed), the whole of `v` is selected in: always exact.
fn ranked(v: &mut [f64], k: usize, next: bool) -> (f64, f64) {
    const SAMPLE: usize = 4096;
    let n = v.len();
    let want = k + usize::from(next);
    if n >= 16 * SAMPLE {
        let mut sample: Vec<f64> = (0..SAMPLE).map(|i| v[i * (n / SAMPLE)]).collect();
        sample.sort_unstable_by(f64::total_cmp);
        // ±4 standard deviations of a sample rank around k's expected place.
        let p = k as f64 / n as f64;
        let spread = (4.0 * (SAMPLE as f64 * p * (1.0 - p)).sqrt()) as usize + 4;
        let at = (p * SAMPLE as f64) as usize;
        let low = at.checked_sub(spread).map(|i| sample[i]);
        let high = sample.get(at + spread).copied();
        // Plain comparisons (they vectorize): they agree with total_cmp except on NaN (then
        // the whole of `v` is selected in) and on -0 against +0, which only moves a zero
        // inside the bracket, where the selection orders it by total_cmp.
        let (l, h) = (low.unwrap_or(f64::NEG_INFINITY), high.unwrap_or(f64::INFINITY));
        let (mut count_below, mut count_above, mut nan) = (0usize, 0usize, 0usize);
        for &x in v.iter() {
            count_below += usize::from(x < l);
            count_above += usize::from(x > h);
            nan += usize::from(x.is_nan());
        }
        let below = |x: &f64| *x < l;
        let above = |x: &f64| *x > h;
        let inside = n - count_below - count_above;
        if nan == 0 && count_below <= k && want < count_below + inside {
            // Every element inside a bracket of one value is that value (identical captures:
            // every difference is 0).
            if let (Some(l), Some(h)) = (low, high) {
                if l.total_cmp(&h).is_eq() {
                    return (l, l);
                }
            }
            if inside <= n / 4 {
                let mut inside: Vec<f64> = v.iter().copied().filter(|x| !below(x) && !above(x)).collect();
                return select_pair(&mut inside, k - count_below, next);
            }
        }
    }
    select_pair(v, k, next)
}

fn select_pair(v: &mut [f64], k: usize, next: bool) -> (f64, f64) {
    let (_, &mut a, rest) = v.select_nth_unstable_by(k, f64::total_cmp);
    let b = if next { rest.iter().copied().min_by(f64::total_cmp).unwrap_or(a) } else { a };
    (a, b)
}

/// Cosine, SQNR and max |r − x| only: the cheap figures kept per head and per position.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Basic {
    pub cosine: f64,
    pub sqnr_db: f64,
    pub max_abs: f64,
}

pub fn basic(r: &[f32], x: &[f32], masked: Option<&[bool]>) -> Basic {
    basic_counted(r, x, masked).0
}

/// [`basic`] and the count of non-finite elements (NaN on either side, inf on one side only)
/// it left out. When nothing finite was left to compare the cosine and SQNR are NaN ("no
/// figure", as in [`compute`]), never the "both zero → 1" of an empty sum.
pub fn basic_counted(r: &[f32], x: &[f32], masked: Option<&[bool]>) -> (Basic, usize) {
    let (mut dot, mut rr, mut xx, mut dd, mut max_abs) = (0f64, 0f64, 0f64, 0f64, 0f64);
    let (mut n, mut nonfinite) = (0usize, 0usize);
    for i in 0..r.len() {
        let (a, b) = (r[i] as f64, x[i] as f64);
        if masked.is_some_and(|mk| mk[i]) {
            continue;
        }
        if !a.is_finite() || !b.is_finite() {
            // Same-sign inf on both sides is excluded like a mask (compute's convention).
            nonfinite += usize::from(a.is_nan() || b.is_nan() || a != b);
            continue;
        }
        let d = a - b;
        dot += a * b;
        rr += a * a;
        xx += b * b;
        dd += d * d;
        max_abs = max_abs.max(d.abs());
        n += 1;
    }
    let b = if n == 0 && nonfinite > 0 {
        Basic { cosine: f64::NAN, sqnr_db: f64::NAN, max_abs }
    } else {
        Basic { cosine: cosine_from(dot, rr, xx), sqnr_db: sqnr_from(rr, dd), max_abs }
    };
    (b, nonfinite)
}

/// All element-wise metrics. `masked[i]` excludes element i. Lengths must match (the caller
/// aligns shapes first and reports a mismatch as an error).
pub fn compute(r: &[f32], x: &[f32], masked: Option<&[bool]>) -> Metrics {
    assert_eq!(r.len(), x.len(), "metrics::compute needs aligned inputs");
    // The |r − x| and relative-error lists the quantiles need, reused from the last call on
    // this thread: a fresh 8-bytes-per-element pair per tap cost more in page faults (the
    // kernel zeroing new pages) than the metrics themselves on a large capture.
    SCRATCH.with_borrow_mut(|(abs, rel)| {
        abs.clear();
        rel.clear();
        abs.reserve(r.len());
        rel.reserve(r.len());
        compute_into(r, x, masked, abs, rel)
    })
}

thread_local! {
    static SCRATCH: std::cell::RefCell<(Vec<f64>, Vec<f64>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

fn compute_into(
    r: &[f32],
    x: &[f32],
    masked: Option<&[bool]>,
    abs: &mut Vec<f64>,
    rel: &mut Vec<f64>,
) -> Metrics {
    let mut m = Metrics::default();
    let mut sums = Lanes::default();
    // Written in place of pushes (a push per element kept the loop from vectorizing), into
    // the lists' spare capacity: `compute` reserved r.len() for each.
    let (ab_all, rl_all) =
        (&mut abs.spare_capacity_mut()[..r.len()], &mut rel.spare_capacity_mut()[..r.len()]);
    let mut n = 0;
    for (c, (rc, xc)) in r.chunks(8).zip(x.chunks(8)).enumerate() {
        let mk = masked.map(|mk| &mk[c * 8..c * 8 + rc.len()]);
        let clean = rc.len() == 8
            && mk.is_none_or(|mk| !mk.iter().any(|&b| b))
            && rc.iter().chain(xc).all(|v| v.is_finite());
        if clean {
            let (ab, rl) = (&mut ab_all[n..n + 8], &mut rl_all[n..n + 8]);
            for j in 0..8 {
                sums.add(j, (rc[j] as f64, xc[j] as f64), (&mut ab[j], &mut rl[j]));
            }
            n += 8;
            continue;
        }
        for j in 0..rc.len() {
            let (a, b) = (rc[j] as f64, xc[j] as f64);
            if m.leaves_out(mk.is_some_and(|mk| mk[j]), a, b) {
                continue;
            }
            sums.add(j, (a, b), (&mut ab_all[n], &mut rl_all[n]));
            n += 1;
        }
    }
    // SAFETY: elements 0..n of both lists were written above (n counts exactly the writes),
    // and n ≤ r.len() ≤ their capacity.
    unsafe {
        abs.set_len(n);
        rel.set_len(n);
    }
    m.n = abs.len();
    sums.finish(&mut m, abs, rel);
    m
}

/// The sums of [`compute`] in 8 lanes (element i in lane i mod 8), so a block of 8 finite,
/// unmasked elements vectorizes; a block with a masked or non-finite element goes element by
/// element.
#[derive(Default)]
struct Lanes {
    dot: [f64; 8],
    rr: [f64; 8],
    xx: [f64; 8],
    dd: [f64; 8],
    close: [usize; 8],
}

impl Lanes {
    /// Element (a, b) into lane `j`, its |r − x| and relative error written to `ab` and `rl`.
    #[inline(always)]
    fn add(
        &mut self,
        j: usize,
        (a, b): (f64, f64),
        (ab, rl): (&mut MaybeUninit<f64>, &mut MaybeUninit<f64>),
    ) {
        let d = a - b;
        self.dot[j] += a * b;
        self.rr[j] += a * a;
        self.xx[j] += b * b;
        self.dd[j] += d * d;
        ab.write(d.abs());
        rl.write(d.abs() / a.abs().max(REL_EPS));
        self.close[j] += usize::from(d.abs() <= CLOSE_ATOL + CLOSE_RTOL * a.abs());
    }

    /// The figures of `m` from the lanes and the `m.n` differences and relative errors.
    fn finish(self, m: &mut Metrics, abs: &mut [f64], rel: &mut [f64]) {
        let lanes = |v: [f64; 8]| ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
        let (dot, rr, xx, dd) = (lanes(self.dot), lanes(self.rr), lanes(self.xx), lanes(self.dd));
        let close = self.close.iter().sum::<usize>();
        if m.n == 0 && m.nonfinite() > 0 {
            // Nothing finite to compare: "both zero → 1" must not turn an all-NaN tensor into a
            // perfect match. NaN here means "no figure" (cosine_opt / sqnr_opt give None).
            m.cosine = f64::NAN;
            m.sqnr_db = f64::NAN;
        } else {
            m.cosine = cosine_from(dot, rr, xx);
            m.sqnr_db = sqnr_from(rr, dd);
        }
        if m.n > 0 {
            m.max_abs = abs.iter().copied().fold(0.0, f64::max);
            m.mean_abs = abs.iter().sum::<f64>() / m.n as f64;
            m.p99_abs = quantile(abs, 0.99);
            m.rel_max = rel.iter().copied().fold(0.0, f64::max);
            m.rel_median = quantile(rel, 0.5);
            m.close_frac = close as f64 / m.n as f64;
        } else {
            m.close_frac = 1.0;
        }
    }
}

/// Cosine of [T, F] rows with the `k` channels of largest reference RMS removed: the
/// residual stream's massive-activation channels can make the plain cosine 0.999 while the
/// rest is noise.
pub fn cosine_without_outliers(r: &[f32], x: &[f32], features: usize, k: usize) -> f64 {
    if features == 0 || !r.len().is_multiple_of(features) || features <= k {
        return f64::NAN;
    }
    let rows = r.len() / features;
    let mut energy: Vec<(f64, usize)> = (0..features)
        .map(|c| ((0..rows).map(|t| (r[t * features + c] as f64).powi(2)).sum::<f64>(), c))
        .collect();
    energy.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut drop = vec![false; features];
    for &(_, c) in energy.iter().take(k) {
        drop[c] = true;
    }
    let (mut dot, mut rr, mut xx) = (0f64, 0f64, 0f64);
    for (i, (&a, &b)) in r.iter().zip(x).enumerate() {
        let (a, b) = (a as f64, b as f64);
        if drop[i % features] || !a.is_finite() || !b.is_finite() {
            continue;
        }
        dot += a * b;
        rr += a * a;
        xx += b * b;
    }
    cosine_from(dot, rr, xx)
}

/// Per-position logits metrics (one row of [T, vocab]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LogitsRow {
    pub argmax_ref: usize,
    pub argmax_cand: usize,
    /// r's top-1 minus top-2 logit: qualifies every argmax flip.
    pub margin: f64,
    pub topk_overlap: f64,
    pub kl: f64,
    /// q(t) − p(t) for t = r's argmax.
    pub delta_p: f64,
}

pub(crate) fn log_softmax(v: &[f32]) -> Vec<f64> {
    let max = v.iter().copied().filter(|x| !x.is_nan()).fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = v.iter().map(|&x| ((x as f64) - max).exp()).sum::<f64>().ln() + max;
    v.iter().map(|&x| x as f64 - lse).collect()
}

/// Indices of the k largest values, descending, ties by lower index (first maximum first).
/// One pass with a k-slot insertion list: the vocabulary is large, k is 5.
fn topk(v: &[f32], k: usize) -> Vec<usize> {
    let mut top: Vec<usize> = Vec::with_capacity(k + 1);
    let before = |a: usize, b: usize| v[a].total_cmp(&v[b]).is_gt();
    for i in 0..v.len() {
        if top.len() == k && !before(i, top[k - 1]) {
            continue;
        }
        let at = top.iter().position(|&j| before(i, j)).unwrap_or(top.len());
        top.insert(at, i);
        top.truncate(k);
    }
    top
}

pub fn logits_row(r: &[f32], x: &[f32]) -> LogitsRow {
    let argmax_ref = crate::model::decoder::argmax(r);
    let argmax_cand = crate::model::decoder::argmax(x);
    let top_r = topk(r, TOP_K.max(2));
    let margin = if r.len() > 1 { r[top_r[0]] as f64 - r[top_r[1]] as f64 } else { f64::INFINITY };
    let k = TOP_K.min(r.len());
    let top_x = topk(x, k);
    let overlap = top_r[..k].iter().filter(|i| top_x.contains(i)).count() as f64 / k as f64;
    let (lp, lq) = (log_softmax(r), log_softmax(x));
    let kl =
        lp.iter().zip(&lq).map(|(&a, &b)| if a.exp() == 0.0 { 0.0 } else { a.exp() * (a - b) }).sum::<f64>();
    LogitsRow {
        argmax_ref,
        argmax_cand,
        margin,
        topk_overlap: overlap,
        kl: kl.max(0.0),
        delta_p: lq[argmax_ref].exp() - lp[argmax_ref].exp(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_equals_the_sorted_definition_on_large_inputs_with_ties() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for (n, levels) in [(70_001usize, 0u32), (100_000, 50), (65_536, 3), (200_003, 0)] {
            let v: Vec<f64> = (0..n)
                .map(|_| {
                    if levels == 0 {
                        rng.random::<f64>().powi(3)
                    } else {
                        rng.random_range(0..levels) as f64
                    }
                })
                .collect();
            let mut sorted = v.clone();
            sorted.sort_by(f64::total_cmp);
            for q in [0.0, 0.01, 0.5, 0.99, 0.999_99, 1.0] {
                let pos = q * (n - 1) as f64;
                let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
                let want = sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64);
                assert_eq!(quantile(&mut v.clone(), q), want, "n={n} levels={levels} q={q}");
            }
        }
        // All equal (a capture against itself: every difference 0), and nearly all equal.
        assert_eq!(quantile(&mut vec![0.0; 100_000], 0.99), 0.0);
        let mut v = vec![0.0; 100_000];
        v[99_999] = 5.0;
        assert_eq!(quantile(&mut v, 1.0), 5.0);
        // A sorted input (the sample's stride sees a skewed picture) is still exact.
        let mut v: Vec<f64> = (0..100_000).map(f64::from).collect();
        assert_eq!(quantile(&mut v, 0.99), 0.99 * 99_999.0);
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12 || a == b
    }

    #[test]
    fn hand_computed_values() {
        // r = (1, 2, 2), x = (1, 2, 3): r·x = 11, ‖r‖ = 3, ‖x‖ = √14, ‖r−x‖ = 1.
        let m = compute(&[1., 2., 2.], &[1., 2., 3.], None);
        assert!(close(m.cosine, 11.0 / (3.0 * 14f64.sqrt())));
        assert!(close(m.sqnr_db, 20.0 * 3f64.log10()));
        assert_eq!((m.max_abs, m.n), (1.0, 3));
        assert!(close(m.mean_abs, 1.0 / 3.0));
        assert!(close(m.rel_max, 0.5));
        assert!(close(m.rel_median, 0.0));
        assert!(close(m.close_frac, 2.0 / 3.0));
        // p99 of [0, 0, 1] with linear interpolation: position 1.98 -> 0.98.
        assert!(close(m.p99_abs, 0.98));
    }

    #[test]
    fn zero_and_constant_vectors() {
        let m = compute(&[0., 0.], &[0., 0.], None);
        assert_eq!((m.cosine, m.sqnr_db), (1.0, f64::INFINITY));
        let m = compute(&[0., 0.], &[1., 0.], None);
        assert_eq!(m.cosine, 0.0);
        assert_eq!(m.sqnr_db, f64::NEG_INFINITY);
        let m = compute(&[2., 2., 2.], &[3., 3., 3.], None);
        assert!(close(m.cosine, 1.0), "constant vectors are parallel");
        assert!(close(m.sqnr_db, 20.0 * (2.0f64 / 1.0).log10()));
        let m = compute(&[1., 1.], &[-1., -1.], None);
        assert!(close(m.cosine, -1.0) || (m.cosine + 1.0).abs() < 1e-15);
    }

    #[test]
    fn an_all_nan_candidate_has_no_cosine_and_no_sqnr() {
        let r = [1.0f32, 2.0, 3.0];
        let x = [f32::NAN; 3];
        let m = compute(&r, &x, None);
        assert_eq!((m.n, m.nan_cand, m.nonfinite()), (0, 3, 3));
        assert_eq!((m.cosine_opt(), m.sqnr_opt()), (None, None));
        // Every element masked (nothing non-finite) keeps the "both zero → 1" convention.
        let m = compute(&r, &r, Some(&[true; 3]));
        assert_eq!(m.cosine_opt(), Some(1.0));
    }

    #[test]
    fn basic_counts_nonfinite_and_has_no_cosine_when_nothing_finite_is_left() {
        let inf = f32::INFINITY;
        let (b, bad) = basic_counted(&[1.0, 2.0, inf, inf], &[1.0, f32::NAN, inf, -inf], None);
        assert_eq!(bad, 2, "one NaN and one opposite-sign inf; the same-sign inf is excluded");
        assert_eq!(b.cosine, 1.0);
        let (b, bad) = basic_counted(&[1.0, 2.0], &[f32::NAN, f32::NAN], None);
        assert_eq!(bad, 2);
        assert!(b.cosine.is_nan() && b.sqnr_db.is_nan(), "{b:?}");
        assert!(basic(&[0.0, 0.0], &[0.0, 0.0], None).cosine == 1.0, "both zero is still a match");
    }

    #[test]
    fn nan_inf_and_masks_are_excluded_and_counted() {
        let inf = f32::INFINITY;
        let r = [1.0, f32::NAN, -inf, inf, 5.0, 2.0];
        let x = [1.0, 0.0, -inf, 3.0, f32::NAN, 9.0];
        let m = compute(&r, &x, Some(&[false, false, false, false, false, true]));
        assert_eq!((m.nan_ref, m.nan_cand, m.inf_mismatch), (1, 1, 1));
        assert_eq!(m.excluded, 2, "masked entry and -inf on both sides");
        assert_eq!(m.n, 1);
        assert_eq!(m.cosine, 1.0);
        assert_eq!(m.nonfinite(), 3);
    }

    #[test]
    #[should_panic(expected = "aligned")]
    fn length_mismatch_is_caught() {
        compute(&[1.0], &[1.0, 2.0], None);
    }

    #[test]
    fn logits_row_metrics() {
        // p = softmax(ln 1, ln 3) = (0.25, 0.75); q = (0.5, 0.5).
        let r = [0f32, 3f32.ln()];
        let x = [0f32, 0f32];
        let l = logits_row(&r, &x);
        assert_eq!((l.argmax_ref, l.argmax_cand), (1, 0), "q ties: first maximum");
        assert!((l.margin - 3f64.ln()).abs() < 1e-6);
        let kl = 0.25 * (0.25f64 / 0.5).ln() + 0.75 * (0.75f64 / 0.5).ln();
        assert!((l.kl - kl).abs() < 1e-6);
        assert!((l.delta_p - (0.5 - 0.75)).abs() < 1e-6);
        assert_eq!(logits_row(&r, &r).kl, 0.0);
    }

    #[test]
    fn topk_is_descending_with_first_index_on_ties() {
        assert_eq!(topk(&[1.0, 3.0, 3.0, 0.5, 2.0], 3), vec![1, 2, 4]);
        assert_eq!(topk(&[1.0], 5), vec![0]);
    }

    #[test]
    fn outlier_excluded_cosine_sees_noise_under_a_massive_channel() {
        // Channel 0 is huge and identical; channels 1..=5 disagree completely.
        let r: Vec<f32> = vec![1000., 1., 1., 1., 1., 1.];
        let x: Vec<f32> = vec![1000., -1., -1., -1., -1., -1.];
        let plain = compute(&r, &x, None).cosine;
        assert!(plain > 0.99998);
        assert!(cosine_without_outliers(&r, &x, 6, 1) < -0.99);
    }
}
