//! A compared tap's row: its figures (logits, attention probabilities, lm_head shards) and
//! the bounds it failed.

use super::metrics::{Basic, LogitsRow, Metrics};
use crate::tap::{Phase, TapName};
use serde::Serialize;

/// Why a row has no figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub enum RowStatus {
    Compared,
    /// Present in the reference only (the candidate cannot produce it, or lost it).
    OnlyInReference,
    /// Present in the candidate only (no reference value to judge it by).
    OnlyInCandidate,
    /// Shapes cannot be aligned: reported, and a failure.
    ShapeMismatch,
}

/// One bound that failed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Failure {
    pub metric: String,
    pub dir: Dir,
    pub bound: f64,
    pub value: f64,
    /// The glob whose bound applied ("default" when none matched).
    pub rule: String,
    /// Judged on the excess over an expected quantization: its own value of the metric, and
    /// the excess the bound applied to ([`super::thresholds::excess`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<(f64, f64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Min,
    Max,
}

impl Dir {
    /// Whether `value` is within `bound`: at least it (`min`) or at most it (`max`).
    pub fn passes(self, value: f64, bound: f64) -> bool {
        match self {
            Dir::Min => value >= bound,
            Dir::Max => value <= bound,
        }
    }
}

/// Logits figures of one tap (docs/METRICS.md: argmax agreement, top-k, KL, margins, Δp).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LogitsSummary {
    pub positions: usize,
    pub argmax_agreement: f64,
    pub topk_overlap: f64,
    pub kl_mean: f64,
    pub kl_max: f64,
    pub kl_p99: f64,
    /// Positions where the argmax differs, with the reference's top-1 margin there.
    pub flips: Vec<Flip>,
    /// Flips whose margin exceeds the threshold set's `flip_margin`.
    pub flips_above_margin: usize,
    pub rows: Vec<LogitsRow>,
    /// Shard by shard, when the candidate's logits come from a sharded lm_head.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardFigures>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Flip {
    pub position: usize,
    pub margin: f64,
    pub reference_token: usize,
    pub candidate_token: usize,
}

/// Attention-probability figures only the probs tap has.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProbsSummary {
    /// Per head: max over query rows of |Σ_keys p − 1| in the candidate.
    pub sum_err_per_head: Vec<f64>,
    pub sum_err_max: f64,
    /// Candidate entries > 1e-6 where the reference masks.
    pub mask_leak: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct TapRow {
    pub phase: Phase,
    pub tap: TapName,
    pub status: RowStatus,
    pub ref_shape: Vec<usize>,
    pub cand_shape: Vec<usize>,
    /// How shapes were aligned when they differ (e.g. a device's single logits row).
    pub aligned: Option<String>,
    pub metrics: Option<Metrics>,
    pub cosine_no_outliers: Option<f64>,
    pub per_head: Vec<Basic>,
    pub per_position: Vec<Basic>,
    pub logits: Option<LogitsSummary>,
    pub probs: Option<ProbsSummary>,
    pub failures: Vec<Failure>,
}

impl TapRow {
    pub fn key(&self) -> String {
        format!("{}/{}", self.phase, self.tap)
    }

    /// A row passes when it was compared and no bound failed; unchecked rows neither pass
    /// nor fail.
    pub fn failed(&self) -> bool {
        !self.failures.is_empty()
    }

    pub fn checked(&self) -> bool {
        matches!(self.status, RowStatus::Compared | RowStatus::ShapeMismatch)
    }

    /// The cosine; None when the row was not compared or had nothing finite to compare.
    pub fn cosine(&self) -> Option<f64> {
        self.metrics.as_ref().and_then(|m| m.cosine_opt())
    }

    /// True when the row holds NaN or one-sided inf values (counted, not averaged in): a
    /// ranking or a verdict must not treat its figures as a measurement of the finite data.
    pub fn has_nonfinite(&self) -> bool {
        self.metrics.as_ref().is_some_and(|m| m.nonfinite() > 0)
    }

    pub fn layer(&self) -> Option<usize> {
        self.tap.layer()
    }
}

/// One shard's figures over every position of a logits tap.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ShardFigures {
    /// Its columns, [start, end).
    pub start: usize,
    pub end: usize,
    pub cosine: f64,
    pub sqnr_db: f64,
    /// ‖x‖ / ‖r‖ over its columns: 1 when its logits carry the right scale.
    pub scale: f64,
    /// Share of positions whose largest logit within the shard is the same column.
    pub argmax_agreement: f64,
    /// At the last position, the largest logit within the shard (a token id): the reference's
    /// and the candidate's.
    pub reference_argmax: usize,
    pub candidate_argmax: usize,
    /// Whether it fails the row's shard bounds (`shard_cosine`, `shard_scale_err`), judged as
    /// the row is (on the excess over an expected quantization where there is one).
    pub failed: bool,
}

impl ShardFigures {
    /// |scale − 1|.
    pub fn scale_err(&self) -> f64 {
        (self.scale - 1.0).abs()
    }
}
