//! Logit lens: each layer's residual stream projected through the final norm and lm_head,
//! on both sides, at the last position of every phase — at which layer the token decision
//! of the candidate parts from the reference's.

use crate::capture::npz::NpzFile;
use crate::capture::{array_to_tensor, Capture};
use crate::error::Result;
use crate::model::Decoder;
use crate::tap::{LayerTap, Phase, Tap};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::Path;

#[derive(Debug, Clone, Serialize)]
pub struct LensRow {
    pub phase: Phase,
    pub layer: usize,
    /// Top-1 token of the reference's lens and the candidate's.
    pub reference_top1: usize,
    pub candidate_top1: usize,
    pub kl: f64,
}

fn lens_logits(model: &Decoder, hidden: &ndarray::ArrayD<f32>) -> Result<Vec<f32>> {
    let rows = hidden.shape()[0];
    let last =
        hidden.index_axis(ndarray::Axis(0), rows - 1).to_owned().insert_axis(ndarray::Axis(0)).into_dyn();
    let h = array_to_tensor(&last)?;
    let normed = candle_nn::ops::rms_norm(&h, &model.norm, model.cfg.rms_norm_eps as f32)?;
    Ok(model.lm_head.forward(&normed)?.flatten_all()?.to_vec1::<f32>()?)
}

/// Lens rows for every phase and layer where both captures hold `layers.I.out`.
pub fn logit_lens(model: &Decoder, reference: &Capture, candidate: &Capture) -> Result<Vec<LensRow>> {
    lens_rows(model, &reference.phases(), |phase, tap| {
        Ok(reference
            .get(phase, tap)
            .zip(candidate.get(phase, tap))
            .map(|(r, x)| (Cow::Borrowed(r), Cow::Borrowed(x))))
    })
}

/// [`logit_lens`] on two capture files, one `layers.I.out` of each side in memory at a time
/// (a run whose captures were spilled to disk).
pub fn logit_lens_files(model: &Decoder, reference: &Path, candidate: &Path) -> Result<Vec<LensRow>> {
    let (mut r, mut x) = (NpzFile::open(reference)?, NpzFile::open(candidate)?);
    let (in_r, in_x): (BTreeSet<String>, BTreeSet<String>) =
        (r.keys().into_iter().collect(), x.keys().into_iter().collect());
    let mut phases: Vec<Phase> =
        in_r.iter().filter_map(|k| k.split_once('/').and_then(|(p, _)| Phase::parse(p))).collect();
    phases.sort();
    phases.dedup();
    lens_rows(model, &phases, |phase, tap| {
        let key = format!("{phase}/{tap}");
        if in_r.contains(&key) && in_x.contains(&key) {
            Ok(Some((Cow::Owned(r.read(&key)?), Cow::Owned(x.read(&key)?))))
        } else {
            Ok(None)
        }
    })
}

/// One `layers.I.out` of each side, borrowed from a capture or read from a file.
type Pair<'a> = (Cow<'a, ndarray::ArrayD<f32>>, Cow<'a, ndarray::ArrayD<f32>>);

fn lens_rows<'a>(
    model: &Decoder,
    phases: &[Phase],
    mut pair: impl FnMut(Phase, Tap) -> Result<Option<Pair<'a>>>,
) -> Result<Vec<LensRow>> {
    let mut out = Vec::new();
    for &phase in phases {
        for layer in 0..model.cfg.num_layers {
            let tap = Tap::Layer(layer, LayerTap::Out);
            let Some((r, x)) = pair(phase, tap)? else { continue };
            if r.ndim() != 2 || x.ndim() != 2 || r.shape()[1] != x.shape()[1] {
                continue;
            }
            let (lr, lx) = (lens_logits(model, &r)?, lens_logits(model, &x)?);
            let row = super::metrics::logits_row(&lr, &lx);
            out.push(LensRow {
                phase,
                layer,
                reference_top1: row.argmax_ref,
                candidate_top1: row.argmax_cand,
                kl: row.kl,
            });
        }
    }
    Ok(out)
}

/// Per phase: the first layer whose lens top-1 differs between the two sides.
pub fn first_lens_flip(rows: &[LensRow]) -> Vec<(Phase, usize)> {
    let mut out: Vec<(Phase, usize)> = Vec::new();
    for r in rows.iter().filter(|r| r.reference_top1 != r.candidate_top1) {
        if !out.iter().any(|(p, _)| *p == r.phase) {
            out.push((r.phase, r.layer));
        }
    }
    out
}
