//! Explaining drift: rank the fault catalog against an observation ([`rank`]) and prove every
//! fault is located and ranked first ([`matrix`]). Its results are plain data, rendered by
//! `report`; `probe` calls it as one stage of a run.

mod emulate;
pub mod matching;
pub mod matrix;
mod prefix;
pub mod rank;
pub mod tokens;

pub use rank::explain;

use crate::tap::{Phase, TapName};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ExplainSpec {
    /// The backend whose capture the fault models are ranked against (default: the first).
    pub observed: Option<String>,
    /// Fault specs to rank (default: the whole catalog with its parameter grid).
    pub faults: Option<Vec<crate::fault::spec::FaultSpec>>,
    /// Also rank pairs of faults.
    #[serde(default)]
    pub pairs: bool,
    /// Quantization configuration for three-way attribution (`w8a16`, or `quant:...`).
    #[serde(default, deserialize_with = "crate::fault::spec::de_quantization")]
    pub quant: Option<crate::fault::spec::FaultSpec>,
    /// Emulate every candidate from its first block to its last step: no reuse of the clean
    /// run's blocks, no stopping (the same ranking and figures, slower; a check of the
    /// shortcuts).
    #[serde(default)]
    pub exhaustive: bool,
}

/// One fault's match against the observed capture (filled by `explain`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ExplainRow {
    pub rank: usize,
    pub fault: String,
    pub finding: Option<u32>,
    /// Cosine between the emulated and the observed capture over the shared taps.
    pub match_cosine: f64,
    pub argmax_agreement: f64,
    pub kl_mean: f64,
    /// Faults whose emulation is identical on these inputs.
    pub ties: Vec<String>,
    pub note: Option<String>,
}

/// What explain measures every candidate against: the float reference, or, for a quantized
/// target, its expected quantization (every candidate is then that quantization with the fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Baseline {
    #[default]
    CleanReference,
    ExpectedQuantization,
}

impl Baseline {
    pub fn name(self) -> &'static str {
        match self {
            Baseline::CleanReference => "clean reference",
            Baseline::ExpectedQuantization => "expected quantization",
        }
    }
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct ExplainReport {
    pub observed: String,
    pub taps: Vec<TapName>,
    pub rows: Vec<ExplainRow>,
    /// The baseline's match: what "no fault" looks like (its row is labelled with its name).
    pub baseline: Option<ExplainRow>,
    /// Which baseline that row is.
    #[serde(skip)]
    pub against: Baseline,
    pub conclusion: String,
    /// The fault ranked first, when it explains the drift (the conclusion's "best explanation").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best: Option<String>,
    pub attribution: Vec<AttributionRow>,
    /// Keys of the observation holding non-finite values (with how many): when any does,
    /// explain ranks nothing and `conclusion` says why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nonfinite: Vec<(String, usize)>,
    /// How the layers of per-layer faults were searched, when nothing located them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// What the emulations cost and what reuse and stopping saved.
    pub spent: Spent,
    /// Ranked by the tokens each fault predicts (a served model: [`tokens`]); the rows' match
    /// is then the served tokens reproduced, their KL the served tokens' mean negative
    /// log-probability.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub by_tokens: bool,
}

impl ExplainReport {
    /// Whether this ranking (made with explain's shortcuts) is `exhaustive`'s (made without):
    /// the same rows in the same order once the candidates stopped early here are left out of
    /// it, each figure within 1e-6, the same ties and notes, baseline, search and conclusion;
    /// and every stopped candidate ranks there below the fifth row that is not clean-like (the
    /// rows explain reads). How many were stopped, or what differs.
    pub fn same_ranking(&self, exhaustive: &ExplainReport) -> std::result::Result<usize, String> {
        let stopped = &self.spent.stopped_early;
        let kept: Vec<&ExplainRow> = exhaustive.rows.iter().filter(|r| !stopped.contains(&r.fault)).collect();
        if self.rows.len() != kept.len() {
            return Err(format!("{} rows, {} exhaustive less the stopped", self.rows.len(), kept.len()));
        }
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 || a.is_nan() && b.is_nan();
        let same = |a: &ExplainRow, b: &ExplainRow| {
            (&a.fault, a.finding, &a.ties, &a.note) == (&b.fault, b.finding, &b.ties, &b.note)
                && close(a.match_cosine, b.match_cosine)
                && close(a.argmax_agreement, b.argmax_agreement)
                && close(a.kl_mean, b.kl_mean)
        };
        if let Some((a, b)) = self.rows.iter().zip(&kept).find(|(a, b)| !same(a, b)) {
            return Err(format!("{a:?} where the exhaustive ranking has {b:?}"));
        }
        let base = match (&self.baseline, &exhaustive.baseline) {
            (Some(a), Some(b)) => same(a, b),
            (a, b) => a == b,
        };
        let text = (&self.conclusion, &self.best, &self.search)
            == (&exhaustive.conclusion, &exhaustive.best, &exhaustive.search);
        if !base || !text || self.attribution != exhaustive.attribution {
            return Err(format!("baseline, conclusion, search or attribution differ: {:?}", self.conclusion));
        }
        let fifth =
            exhaustive.rows.iter().enumerate().filter(|(_, r)| r.note.is_none()).nth(4).map(|(i, _)| i);
        for s in stopped {
            let at = exhaustive.rows.iter().position(|r| &r.fault == s);
            if !matches!((at, fifth), (Some(at), Some(f)) if at > f) {
                return Err(format!("{s} was stopped, but ranks {at:?} in the exhaustive ranking"));
            }
        }
        Ok(stopped.len())
    }
}

/// What explain's emulations cost: candidates, and blocks × steps (one block of the model run
/// for one step of the conversation: a prefill frame or chunk, or a decode step).
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct Spent {
    /// Candidates emulated (ranked or stopped early), one emulation each.
    pub candidates: usize,
    /// Of them: started at the first block, and at a later one from the clean run's residual.
    pub from_first_block: usize,
    pub from_prefix: usize,
    /// Candidates stopped once their best possible match could not reach the rows whose
    /// figures explain reads: not in the ranking.
    pub stopped_early: Vec<String>,
    /// Other emulations: each route's clean run, tie checks, the attribution's.
    pub other: usize,
    /// Block-steps the candidates computed, and what they would have computed run whole.
    pub block_steps: usize,
    pub block_steps_whole: usize,
    /// Of the difference: skipped by starting at a later block, and by stopping early (once
    /// matched, or out of contention).
    pub saved_by_reuse: usize,
    pub saved_by_stopping: usize,
    /// Why no candidate started from the clean run's residuals where that was not possible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The shortcuts were off (`exhaustive`).
    pub exhaustive: bool,
}

impl Spent {
    /// The report's sentence.
    pub fn summary(&self) -> String {
        let plural = if self.other == 1 { "" } else { "s" };
        let other = format!("{} other emulation{plural} (clean runs, tie checks)", self.other);
        if self.exhaustive {
            return format!(
                "{} candidates, each emulated whole (exhaustive): {} block-steps; {other}",
                self.candidates, self.block_steps
            );
        }
        let mut s = format!(
            "{} candidates: {} from the first block, {} from the clean run's residual at a later block; {} stopped \
             early, out of contention (not ranked); {} of {} block-steps computed (reuse saved {}, stopping {}); \
             {other}",
            self.candidates,
            self.from_first_block,
            self.from_prefix,
            self.stopped_early.len(),
            self.block_steps,
            self.block_steps_whole,
            self.saved_by_reuse,
            self.saved_by_stopping
        );
        if let Some(n) = &self.note {
            s += &format!("; {n}");
        }
        s
    }
}

/// Three-way attribution per layer: fp32 ↔ quant emulation ↔ observed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AttributionRow {
    pub phase: Phase,
    pub tap: TapName,
    pub reference_vs_observed: f64,
    pub reference_vs_quant: f64,
    pub quant_vs_observed: f64,
    /// Share of the observed drift (1 − cosine) the quantization emulation reproduces.
    pub explained: f64,
}
