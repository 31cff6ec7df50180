//! Matching an emulation against an observation, key by key over two [`Store`]s, one tap of
//! each side at a time: the match figures (mean cosine, argmax agreement, KL) and their parts
//! per key (which a run being matched as it goes adds up before it ends), where the
//! observation departs from the reference, its non-finite values, and the cheap fingerprint
//! that tells emulations apart before a tie is checked.

use crate::capture::Store;
use crate::compare::metrics;
use crate::error::Result;
use crate::tap::{Key, Tap, TapName};
use ndarray::ArrayD;

/// How well `emulated` reproduces `observed` on their shared keys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Match {
    pub cosine: f64,
    pub argmax: f64,
    pub kl: f64,
}

/// One key's share of a [`Match`]: its cosine (0 where it cannot be matched) and, for logits,
/// each row's argmax agreement and KL in row order.
#[derive(Debug, Clone, Default)]
pub struct Part {
    pub cosine: f64,
    pub agree: usize,
    pub kls: Vec<f64>,
}

/// Aligned flat values: compare's alignment, with the single row on either side (an
/// emulated fault may return one row where the observation has many, and vice versa).
pub fn aligned<'a>(a: &'a ArrayD<f32>, b: &'a ArrayD<f32>) -> Option<crate::compare::Aligned<'a>> {
    crate::compare::align(a, b).or_else(|| crate::compare::align(b, a).map(|(y, x, note)| (x, y, note)))
}

/// `key`'s part of the match of emulated `e` with observed `o`.
pub fn part(key: &Key, e: &ArrayD<f32>, o: &ArrayD<f32>) -> Part {
    // A shape the observation does not have: no match on this tap.
    let Some((ev, ov, _)) = aligned(e, o) else { return Part::default() };
    let (b, nonfinite) = metrics::basic_counted(&ev, &ov, None);
    if nonfinite > 0 {
        // The observation is finite here (explain leaves out taps where it is not), so an
        // emulation that goes NaN or inf does not reproduce it: no match on this tap.
        return Part::default();
    }
    let mut p = Part { cosine: b.cosine, ..Part::default() };
    if key.tap().is_some_and(|t| t.is(Tap::Logits)) {
        let vocab = *o.shape().last().unwrap_or(&1);
        for (a, b) in ev.chunks(vocab).zip(ov.chunks(vocab)) {
            let r = metrics::logits_row(b, a);
            p.agree += usize::from(r.argmax_ref == r.argmax_cand);
            p.kls.push(r.kl);
        }
    }
    p
}

impl Match {
    /// The match of every key's part, in key order (the order the sums run in).
    pub fn of(parts: &[Part]) -> Match {
        let (mut cos_sum, mut agree, mut kl, mut rows) = (0f64, 0usize, 0f64, 0usize);
        for p in parts {
            cos_sum += p.cosine;
            agree += p.agree;
            for k in &p.kls {
                kl += k;
                rows += 1;
            }
        }
        let (n, rows_f) = (parts.len(), rows.max(1) as f64);
        Match {
            cosine: if n == 0 { 0.0 } else { cos_sum / n as f64 },
            argmax: if rows == 0 { f64::NAN } else { agree as f64 / rows_f },
            kl: if rows == 0 { f64::NAN } else { kl / rows_f },
        }
    }
}

pub fn match_captures(emulated: &dyn Store, observed: &dyn Store, keys: &[Key]) -> Result<Match> {
    let mut parts = Vec::with_capacity(keys.len());
    for key in keys {
        parts.push(match (emulated.get(key)?, observed.get(key)?) {
            (Some(e), Some(o)) => part(key, &e, &o),
            _ => Part::default(),
        });
    }
    Ok(Match::of(&parts))
}

/// The layer of the first layer tap (in execution order) where `observed` departs from the
/// reference beyond float noise.
pub fn first_drift_layer(reference: &dyn Store, observed: &dyn Store, keys: &[Key]) -> Result<Option<usize>> {
    for k in keys {
        let Some(layer) = k.tap().and_then(TapName::layer) else { continue };
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
    reference: &dyn Store,
    observed: &dyn Store,
    keys: &[Key],
) -> Result<Vec<(Key, usize)>> {
    let mut bad = Vec::new();
    for k in keys {
        let Some(o) = observed.get(k)? else { continue };
        let scores = matches!(k.canonical(), Some((_, Tap::Layer(_, crate::tap::LayerTap::Scores))));
        let r = if scores { None } else { reference.get(k)? };
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

/// Keys of `observed` that name canonical taps (what an emulation can reproduce).
pub fn shared_keys(observed: &dyn Store) -> Vec<Key> {
    observed.keys().into_iter().filter(|k| k.canonical().is_some()).collect()
}

/// Cosines within this of 1 (or of each other) are float noise, not a difference.
pub const CLEAN_EPS: f64 = 1e-9;

/// Random projections per tap in an emulation's [`signature`].
const SIGNATURE_PROJECTIONS: u64 = 4;

/// A cheap fingerprint of an emulation on `keys`: per tap, the norm of its finite values, how
/// many are not finite, and their dot products with a few fixed pseudo-random ±1 vectors.
/// Emulations that agree to float noise have fingerprints that agree (cosine of the two ≈ 1);
/// emulations that differ almost surely do not, so the tie check (emulations re-run) is spent
/// only where a tie is possible.
pub fn signature(store: &dyn Store, keys: &[Key]) -> Result<Vec<f64>> {
    let mut sig = Vec::new();
    for key in keys {
        let Some(a) = store.get(key)? else {
            sig.extend(std::iter::repeat_n(0.0, SIGNATURE_PROJECTIONS as usize + 2));
            continue;
        };
        let mut dots = [0f64; SIGNATURE_PROJECTIONS as usize];
        let (mut sq, mut nonfinite) = (0f64, 0f64);
        for (i, &x) in a.iter().enumerate() {
            // A masked score is −inf: counted, not summed (it would make the whole print NaN).
            if !x.is_finite() {
                nonfinite += 1.0;
                continue;
            }
            let x = f64::from(x);
            sq += x * x;
            for (p, d) in dots.iter_mut().enumerate() {
                // splitmix64 of (element, projection): a sign each, the same in every run.
                let z = (i as u64).wrapping_mul(SIGNATURE_PROJECTIONS).wrapping_add(p as u64);
                *d += if crate::fault::expected::splitmix64(z) & 1 == 0 { x } else { -x };
            }
        }
        sig.push(sq.sqrt());
        sig.push(nonfinite);
        sig.extend(dots);
    }
    Ok(sig)
}

/// Whether two fingerprints could be of emulations that agree to float noise (loose: the tie
/// check that follows is exact).
pub fn signatures_agree(a: &[f64], b: &[f64]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let (na, nb) = (a.iter().map(|x| x * x).sum::<f64>().sqrt(), b.iter().map(|x| x * x).sum::<f64>().sqrt());
    (na == 0.0 && nb == 0.0) || dot / (na * nb) >= 1.0 - 1e-6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Capture;
    use ndarray::{ArrayD, IxDyn};

    fn cap(key: &Key, v: &[f32]) -> Capture {
        let mut c = Capture::default();
        c.insert(key.clone(), ArrayD::from_shape_vec(IxDyn(&[1, v.len()]), v.to_vec()).unwrap());
        c
    }

    #[test]
    fn a_wrong_mask_is_drift_but_nan_and_stray_infinities_are_not() {
        let inf = f32::INFINITY;
        let scores = Key::parse("prefill/layers.1.attn.scores");
        // mask-repeat (finding 4) masks entries the reference keeps: −inf in scores is a mask.
        let r = cap(&scores, &[0.5, -inf, 0.25]);
        let o = cap(&scores, &[-inf, -inf, 0.25]);
        let bad = |r: &Capture, o: &Capture, k: &Key| nonfinite_keys(r, o, std::slice::from_ref(k)).unwrap();
        assert!(bad(&r, &o, &scores).is_empty());
        let o = cap(&scores, &[f32::NAN, -inf, inf]);
        assert_eq!(bad(&r, &o, &scores), vec![(scores.clone(), 2)]);
        // Outside scores, −inf where the reference is finite is a non-finite output.
        let out = Key::parse("prefill/layers.1.out");
        let r = cap(&out, &[0.5, 1.0]);
        let o = cap(&out, &[-inf, 1.0]);
        assert_eq!(bad(&r, &o, &out), vec![(out.clone(), 1)]);
    }

    #[test]
    fn an_emulation_that_goes_nan_does_not_match_a_finite_observation() {
        let keys = vec![Key::parse("prefill/layers.0.out")];
        let (observed, nan, half) = (
            cap(&keys[0], &[1.0, 2.0, 3.0]),
            cap(&keys[0], &[f32::NAN; 3]),
            cap(&keys[0], &[1.0, f32::NAN, 3.0]),
        );
        let cosine = |e: &Capture, o: &Capture| match_captures(e, o, &keys).unwrap().cosine;
        assert_eq!(cosine(&nan, &observed), 0.0);
        assert_eq!(cosine(&half, &observed), 0.0, "NaN is never averaged in");
        assert_eq!(cosine(&observed, &observed), 1.0);
        assert_eq!(first_drift_layer(&observed, &half, &keys).unwrap(), Some(0));
    }

    #[test]
    fn signatures_tell_emulations_apart_and_agree_on_float_noise() {
        let keys = vec![Key::parse("prefill/logits"), Key::parse("prefill/layers.0.out")];
        let mk = |xs: &[f32]| {
            let mut c = Capture::default();
            for k in &keys {
                c.insert(k.clone(), ndarray::Array::from_vec(xs.to_vec()).into_dyn());
            }
            c
        };
        let base: Vec<f32> = (0..257).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let noise: Vec<f32> = base.iter().map(|x| x * (1.0 + 1e-7)).collect();
        // The same values, two of them swapped: equal norm, different emulation.
        let mut swapped = base.clone();
        swapped.swap(3, 200);
        let sig = |xs: &[f32]| signature(&mk(xs), &keys).unwrap();
        assert!(signatures_agree(&sig(&base), &sig(&base)));
        assert!(signatures_agree(&sig(&base), &sig(&noise)));
        assert!(!signatures_agree(&sig(&base), &sig(&swapped)));
        // A masked score (−inf) keeps the print finite: equal emulations still agree.
        let mut masked = base.clone();
        masked[7] = f32::NEG_INFINITY;
        assert!(signatures_agree(&sig(&masked), &sig(&masked)));
        assert!(!signatures_agree(&sig(&masked), &sig(&base)));
        let shorter = signature(&mk(&base), &keys[..1]).unwrap();
        assert!(!signatures_agree(&sig(&base), &shorter));
    }
}
