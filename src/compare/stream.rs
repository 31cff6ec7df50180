//! Comparison of two `.npz` captures read tap by tap: each worker opens its own lazily indexed
//! readers ([`NpzFile`]) and holds one tap of each side at a time, so peak memory is a few
//! taps, not two whole captures (a 1024-token all-tap capture of SmolLM2's shape is ~3 GB).
//! The rows are the ones [`super::compare`] computes on the same captures, in the same order.

use super::thresholds::Thresholds;
use super::{compare_one, split_key, PairComparison, View};
use crate::capture::npz::NpzFile;
use crate::capture::Capture;
use crate::error::Result;
use crate::tap::key_order;
use rayon::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;

/// The PHASE/TAP keys of two capture files (either side's) in comparison order, and which
/// side holds each: read once from the archives' directories, no array data.
pub struct CaptureKeys {
    pub keys: Vec<String>,
    in_ref: BTreeSet<String>,
    in_cand: BTreeSet<String>,
}

pub fn keys_of(reference: &Path, candidate: &Path) -> Result<CaptureKeys> {
    let in_ref: BTreeSet<String> = NpzFile::open(reference)?.keys().into_iter().collect();
    let in_cand: BTreeSet<String> = NpzFile::open(candidate)?.keys().into_iter().collect();
    let mut keys: Vec<String> = in_ref.union(&in_cand).filter(|k| split_key(k).is_some()).cloned().collect();
    keys.sort_by_cached_key(|k| key_order(k));
    Ok(CaptureKeys { keys, in_ref, in_cand })
}

/// The reference key whose -inf entries mask `key` when `key` is a layer's attention probs.
fn scores_key(key: &str) -> Option<String> {
    let (phase, tap) = split_key(key)?;
    match crate::tap::Tap::parse(tap)? {
        crate::tap::Tap::Layer(l, crate::tap::LayerTap::Probs) => {
            Some(format!("{phase}/{}", crate::tap::Tap::Layer(l, crate::tap::LayerTap::Scores)))
        }
        _ => None,
    }
}

/// [`super::compare`] on two capture files, one tap of each side in memory per worker, the
/// taps spread over rayon's threads. `keys` is [`keys_of`] the same two files.
pub fn compare_files(
    reference: &Path,
    candidate: &Path,
    keys: &CaptureKeys,
    names: (&str, &str),
    view: View,
    thresholds: &Thresholds,
) -> Result<PairComparison> {
    let CaptureKeys { keys, in_ref, in_cand } = keys;
    let workers = rayon::current_num_threads().clamp(1, keys.len().max(1));
    // Round-robin, so every worker gets early (small) and late (large) taps alike.
    let parts: Vec<Vec<(usize, &String)>> =
        (0..workers).map(|w| keys.iter().enumerate().skip(w).step_by(workers).collect()).collect();
    let done: Vec<Vec<(usize, super::TapRow)>> = parts
        .into_par_iter()
        .map(|part| {
            let (mut r, mut c) = (NpzFile::open(reference)?, NpzFile::open(candidate)?);
            part.into_iter()
                .map(|(i, key)| {
                    let (mut one_r, mut one_c) = (Capture::default(), Capture::default());
                    if in_ref.contains(key) {
                        one_r.insert(key.clone(), r.read(key)?);
                        // Attention probs are masked where the reference's scores are -inf
                        // (`attention_mask`): their scores come along, as in memory.
                        if let Some(scores) = scores_key(key).filter(|s| in_ref.contains(s)) {
                            one_r.insert(scores.clone(), r.read(&scores)?);
                        }
                    }
                    if in_cand.contains(key) {
                        one_c.insert(key.clone(), c.read(key)?);
                    }
                    let (phase, tap) = split_key(key).expect("keys_of keeps PHASE/TAP keys");
                    Ok((i, compare_one(&one_r, &one_c, key, phase, tap, thresholds)))
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let mut rows: Vec<(usize, super::TapRow)> = done.into_iter().flatten().collect();
    rows.sort_by_key(|(i, _)| *i);
    Ok(PairComparison {
        reference: names.0.to_string(),
        candidate: names.1.to_string(),
        view,
        rows: rows.into_iter().map(|(_, row)| row).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tap::{Phase, Tap};
    use ndarray::{ArrayD, IxDyn};

    fn arr(n: usize, f: impl Fn(usize) -> f32) -> ArrayD<f32> {
        ArrayD::from_shape_vec(IxDyn(&[1, n]), (0..n).map(f).collect()).unwrap()
    }

    #[test]
    fn streamed_rows_equal_the_in_memory_comparison() {
        let dir = tempfile::tempdir().unwrap();
        let (mut a, mut b) = (Capture::default(), Capture::default());
        for (i, tap) in ["layers.0.out", "layers.1.out", "logits", "embed"].iter().enumerate() {
            let tap = Tap::parse(tap).unwrap();
            a.put(Phase::Prefill, tap, arr(64, |j| ((i * 64 + j) as f32).sin()));
            b.put(Phase::Prefill, tap, arr(64, |j| ((i * 64 + j) as f32).sin() + 0.01 * (j % 3) as f32));
        }
        // Attention probs are masked by the reference's -inf scores: the scores must come
        // along when the probs are compared from the files.
        let masked = |j: usize| if j % 4 == 3 { f32::NEG_INFINITY } else { j as f32 };
        a.put(Phase::Prefill, Tap::parse("layers.0.attn.scores").unwrap(), arr(64, masked));
        b.put(Phase::Prefill, Tap::parse("layers.0.attn.scores").unwrap(), arr(64, masked));
        let probs = |j: usize, d: f32| if j % 4 == 3 { 0.0 } else { 0.1 + d * (j % 5) as f32 };
        a.put(Phase::Prefill, Tap::parse("layers.0.attn.probs").unwrap(), arr(64, |j| probs(j, 0.0)));
        b.put(Phase::Prefill, Tap::parse("layers.0.attn.probs").unwrap(), arr(64, |j| probs(j, 0.01)));
        // One key only in the reference, one only in the candidate.
        a.put(Phase::Decode(0), Tap::parse("logits").unwrap(), arr(64, |j| j as f32));
        b.put(Phase::Decode(1), Tap::parse("logits").unwrap(), arr(64, |j| j as f32));
        let (pa, pb) = (dir.path().join("a.npz"), dir.path().join("b.npz"));
        a.write_npz(&pa).unwrap();
        b.write_npz(&pb).unwrap();
        let t = Thresholds::default();
        let whole = super::super::compare(&a, &b, ("a", "b"), View::Cumulative, &t);
        let keys = keys_of(&pa, &pb).unwrap();
        let streamed = compare_files(&pa, &pb, &keys, ("a", "b"), View::Cumulative, &t).unwrap();
        assert_eq!(format!("{whole:?}"), format!("{streamed:?}"));
        assert_eq!(streamed.rows.len(), 8);
    }
}
