//! Explaining drift: rank the fault catalog against an observation ([`rank`]) and prove every
//! fault is located and ranked first ([`matrix`]). Its results are plain data, rendered by
//! `report`; `probe` calls it as one stage of a run.

pub mod matrix;
pub mod rank;

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
