//! Locate: where drift starts (first failing tap in execution order, per phase), which heads
//! and positions are worst there, and where the token decision first flips.

use super::{fmt_num, Flip, PairComparison, RowStatus, TapRow};
use crate::tap::Phase;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Located {
    pub phase: Phase,
    pub tap: String,
    pub failures: Vec<String>,
    pub cosine: Option<f64>,
    /// Up to three heads with the lowest cosine: (head, cosine).
    pub worst_heads: Vec<(usize, f64)>,
    /// Up to three positions with the lowest cosine: (position, cosine).
    pub worst_positions: Vec<(usize, f64)>,
    pub prob_sum_err: Option<f64>,
    pub mask_leak: Option<usize>,
    /// First position of this phase's logits whose argmax differs.
    pub first_flip: Option<Flip>,
    pub sentence: String,
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
    let mut l = Located {
        phase: row.phase,
        tap: row.tap.clone(),
        failures: row.failures.iter().map(|f| f.describe()).collect(),
        cosine: row.cosine(),
        worst_heads: worst(&row.per_head),
        worst_positions: worst(&row.per_position),
        prob_sum_err: row.probs.as_ref().map(|p| p.sum_err_max),
        mask_leak: row.probs.as_ref().map(|p| p.mask_leak),
        first_flip,
        sentence: String::new(),
    };
    l.sentence = sentence(&l, row);
    l
}

fn sentence(l: &Located, row: &TapRow) -> String {
    let mut s = format!("{}: first drift at {}", l.phase, l.tap);
    if row.status == RowStatus::ShapeMismatch {
        s += &format!(" — shape {:?} where the reference has {:?}", row.cand_shape, row.ref_shape);
        return s;
    }
    // A failed row-sum bound is said below in words ("per-head sums ≠ 1").
    let said: Vec<String> =
        row.failures.iter().filter(|f| f.metric != "prob_sum_err").map(|f| f.describe()).collect();
    if !said.is_empty() {
        s += &format!(" — {}", said.join("; "));
    } else {
        s += " —";
    }
    if !l.worst_heads.is_empty() {
        let h: Vec<String> = l.worst_heads.iter().map(|(h, c)| format!("{h} ({})", fmt_num(*c))).collect();
        s += &format!("; worst heads {}", h.join(", "));
    }
    if let Some(e) = l.prob_sum_err.filter(|e| *e > 1e-3) {
        let sep = if said.is_empty() { "" } else { ";" };
        s += &format!("{sep} per-head sums ≠ 1 (max |Σp − 1| = {})", fmt_num(e));
    }
    if let Some(n) = l.mask_leak.filter(|n| *n > 0) {
        s += &format!("; {n} probabilities where the reference masks");
    }
    if !l.worst_positions.is_empty() && row.per_position.len() > 1 {
        let p: Vec<String> =
            l.worst_positions.iter().map(|(p, c)| format!("{p} ({})", fmt_num(*c))).collect();
        s += &format!("; worst positions {}", p.join(", "));
    }
    if let Some(f) = &l.first_flip {
        s += &format!(
            "; first argmax flip at position {} (token {} → {}, reference top-1 margin {})",
            f.position,
            f.reference_token,
            f.candidate_token,
            fmt_num(f.margin)
        );
    }
    s
}

/// The first failing tap of each phase, in phase order.
pub fn locate(pair: &PairComparison) -> Vec<Located> {
    let mut out: Vec<Located> = Vec::new();
    for row in pair.rows.iter().filter(|r| r.failed()) {
        if out.iter().any(|l| l.phase == row.phase) {
            continue;
        }
        let logits = pair.rows.iter().find(|r| r.phase == row.phase && r.tap == "logits");
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
