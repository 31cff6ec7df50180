//! Locate: where drift starts (first failing tap in execution order, per phase), which heads
//! and positions are worst there, and where the token decision first flips.

use super::pair::PairComparison;
use super::row::{Failure, Flip, RowStatus, TapRow};
use crate::tap::Phase;

/// The first failing tap of a phase with the figures that say why; `report` words them.
#[derive(Debug, Clone)]
pub struct Located {
    pub phase: Phase,
    pub tap: crate::tap::TapName,
    pub failures: Vec<Failure>,
    /// Candidate and reference shapes, when they could not be aligned.
    pub shape_mismatch: Option<(Vec<usize>, Vec<usize>)>,
    pub cosine: Option<f64>,
    /// Up to three heads with the lowest cosine: (head, cosine).
    pub worst_heads: Vec<(usize, f64)>,
    /// Up to three positions with the lowest cosine: (position, cosine).
    pub worst_positions: Vec<(usize, f64)>,
    /// Positions the tap has figures for (worst positions only mean something past one).
    pub positions: usize,
    pub prob_sum_err: Option<f64>,
    pub mask_leak: Option<usize>,
    /// First position of this phase's logits whose argmax differs.
    pub first_flip: Option<Flip>,
}

fn worst(stats: &[super::metrics::Basic]) -> Vec<(usize, f64)> {
    let mut v: Vec<(usize, f64)> = stats.iter().enumerate().map(|(i, b)| (i, b.cosine)).collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    v.truncate(3);
    v.retain(|(_, c)| *c < 1.0);
    v
}

fn located(row: &TapRow, logits_row: Option<&TapRow>) -> Located {
    let first_flip = logits_row.and_then(|r| r.logits.as_ref()).and_then(|l| l.flips.first().cloned());
    Located {
        phase: row.phase,
        tap: row.tap.clone(),
        failures: row.failures.clone(),
        shape_mismatch: (row.status == RowStatus::ShapeMismatch)
            .then(|| (row.cand_shape.clone(), row.ref_shape.clone())),
        cosine: row.cosine(),
        worst_heads: worst(&row.per_head),
        worst_positions: worst(&row.per_position),
        positions: row.per_position.len(),
        prob_sum_err: row.probs.as_ref().map(|p| p.sum_err_max),
        mask_leak: row.probs.as_ref().map(|p| p.mask_leak),
        first_flip,
    }
}

/// The first failing tap of each phase, in phase order.
pub fn locate(pair: &PairComparison) -> Vec<Located> {
    let mut out: Vec<Located> = Vec::new();
    for row in pair.rows.iter().filter(|r| r.failed()) {
        if out.iter().any(|l| l.phase == row.phase) {
            continue;
        }
        let logits = pair.rows.iter().find(|r| r.phase == row.phase && r.tap.is(crate::tap::Tap::Logits));
        out.push(located(row, logits));
    }
    out
}

/// Layers whose *own* error fails in the local (overrides) view: the blame list.
pub fn blamed_layers(local: &PairComparison) -> Vec<usize> {
    let mut v: Vec<usize> = local.failed_rows().filter_map(TapRow::layer).collect();
    v.sort();
    v.dedup();
    v
}
