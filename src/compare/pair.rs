//! Reference vs one candidate: a comparison's rows and the view it is in.

use super::row::TapRow;
use super::tokens::TokenComparison;
use crate::tap::{Phase, TapName};
use serde::Serialize;

/// Reference vs one candidate, in one view (cumulative, or local with overrides).
#[derive(Debug, Clone, Serialize)]
pub struct PairComparison {
    pub reference: String,
    pub candidate: String,
    pub view: View,
    pub rows: Vec<TapRow>,
    /// The candidate is a HEF on a device: a tap it holds was measured there (an output), one
    /// only the reference holds can only be inferred (explain).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub on_device: bool,
    /// A served model, token by token (a serving backend: no tap rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenComparison>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum View {
    /// Every layer fed by the candidate's own previous layer: errors accumulate.
    Cumulative,
    /// Every layer fed the reference's input (overrides): each layer's own error.
    Local,
    /// The float reference against the emulation of what a candidate computes when nothing is
    /// wrong (its quantization): the noise the candidate is judged beyond; shown, never judged.
    Expected,
}

impl PairComparison {
    pub fn passed(&self) -> bool {
        !self.rows.iter().any(TapRow::failed) && self.tokens.as_ref().is_none_or(|t| t.failures.is_empty())
    }

    pub fn failed_rows(&self) -> impl Iterator<Item = &TapRow> {
        self.rows.iter().filter(|r| r.failed())
    }

    pub fn row(&self, phase: Phase, tap: &TapName) -> Option<&TapRow> {
        self.rows.iter().find(|r| r.phase == phase && r.tap == *tap)
    }
}
