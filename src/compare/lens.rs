//! Logit lens: each layer's residual stream projected through the final norm and lm_head,
//! on both sides, at the last position of every phase — at which layer the token decision
//! of the candidate parts from the reference's.

use crate::capture::Store;
use crate::error::Result;
use crate::tap::{Key, LayerTap, Phase, Tap};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct LensRow {
    pub phase: Phase,
    pub layer: usize,
    /// Top-1 token of the reference's lens and the candidate's.
    pub reference_top1: usize,
    pub candidate_top1: usize,
    pub kl: f64,
}

/// A residual stream's last row through the final norm and lm_head: the caller's model.
pub type Projection<'a> = dyn Fn(&ndarray::ArrayD<f32>) -> Result<Vec<f32>> + 'a;

/// Lens rows for every phase of the reference and each of `layers` layers where both
/// captures hold `layers.I.out`, one such tap of each side read at a time.
pub fn logit_lens(
    project: &Projection,
    layers: usize,
    reference: &dyn Store,
    candidate: &dyn Store,
) -> Result<Vec<LensRow>> {
    let mut out = Vec::new();
    for phase in crate::capture::phases(reference) {
        for layer in 0..layers {
            let key = Key::new(phase, Tap::Layer(layer, LayerTap::Out));
            if !(reference.contains(&key) && candidate.contains(&key)) {
                continue;
            }
            let (Some(r), Some(x)) = (reference.get(&key)?, candidate.get(&key)?) else { continue };
            if r.ndim() != 2 || x.ndim() != 2 || r.shape()[1] != x.shape()[1] {
                continue;
            }
            let (lr, lx) = (project(&r)?, project(&x)?);
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
