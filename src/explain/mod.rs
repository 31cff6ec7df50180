//! Explaining drift: rank the fault catalog against an observation ([`rank`]), prove every
//! fault is located and ranked first ([`matrix`]), and the device diagnostics that separate a
//! cache write from a decode compute ([`diag`], concluded in [`diagnosis`]). Above `report`
//! (it fills report types and renders through its document) and below `probe` (which calls it
//! as one stage of a run).

pub mod diag;
pub mod diagnosis;
pub mod matrix;
pub mod rank;

pub use rank::explain;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ExplainSpec {
    /// The backend whose capture the fault models are ranked against (default: the first).
    pub observed: Option<String>,
    /// Fault specs to rank (default: the whole catalog with its parameter grid).
    pub faults: Option<Vec<String>>,
    /// Also rank pairs of faults.
    #[serde(default)]
    pub pairs: bool,
    /// Quantization configuration for three-way attribution.
    pub quant: Option<String>,
}
