//! The run report: what `hefprobe run` (and `compare`, `explain`) finds, as plain serializable
//! data the renderers read (`terminal`, `markdown`, `json`, `svg`); `mod.rs` ties it to them.

use super::{format, tokens};
use crate::compare::lens::LensRow;
use crate::compare::locate::Located;
use crate::compare::{Flip, PairComparison, TapRow, View};
use crate::explain::ExplainReport;
use crate::tap::{Phase, Tap, TapName};
use serde::Serialize;

pub const REPORT_SCHEMA: &str = "hefprobe.report/1";

#[derive(Debug, Clone, Serialize)]
pub struct ToolInfo {
    pub hefprobe: String,
    pub candle: String,
    /// What the reference was verified against (references/requirements.txt).
    pub goldens: String,
}

impl Default for ToolInfo {
    fn default() -> Self {
        ToolInfo {
            hefprobe: env!("CARGO_PKG_VERSION").to_string(),
            candle: env!("HEFPROBE_CANDLE_VERSION").to_string(),
            goldens: "transformers 5.23.0, torch 2.15.0 (float32, eager)".to_string(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct ProbeInfo {
    pub name: String,
    pub question: String,
    pub finding: Option<u32>,
    pub file: Option<String>,
    /// The exact command that reproduces this report.
    pub command: String,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct CheckpointInfo {
    pub source: String,
    pub hash: String,
    pub arch: String,
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub stored_dtype: String,
    pub defaults_applied: Vec<(String, String)>,
}

/// What config.json said beyond what the decoder runs (JSON `config`).
#[derive(Debug, Clone, Serialize, Default)]
pub struct ConfigInfo {
    /// Keys hefprobe does not know, accepted because their names give no hint they change the
    /// forward pass (`--strict-config` refuses them).
    pub unknown_keys: Vec<crate::model::config::UnknownKey>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct InputInfo {
    pub prompt_tokens: usize,
    pub bos: String,
    pub chunk: Option<usize>,
    pub phases: Vec<Phase>,
    pub decode_tokens: Vec<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BackendInfo {
    pub name: String,
    pub kind: String,
    pub status: BackendStatus,
}

/// How a backend's run ended. The JSON report carries it as one string: "ok", or what
/// stopped it and where.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendStatus {
    Ok,
    /// `after`: the last phase that finished, if any did.
    Stopped {
        after: Option<Phase>,
        error: String,
    },
}

impl BackendStatus {
    pub fn is_ok(&self) -> bool {
        *self == BackendStatus::Ok
    }
}

impl std::fmt::Display for BackendStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendStatus::Ok => f.write_str("ok"),
            BackendStatus::Stopped { after: Some(p), error } => write!(f, "stopped after {p}: {error}"),
            BackendStatus::Stopped { after: None, error } => {
                write!(f, "stopped before the first phase: {error}")
            }
        }
    }
}

impl Serialize for BackendStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The first drift of one phase as the JSON report carries it: compare's figures, with the
/// failed bounds and the sentence worded here.
#[derive(Debug, Clone, Serialize)]
pub struct LocatedDrift {
    pub phase: Phase,
    pub tap: TapName,
    pub failures: Vec<String>,
    pub cosine: Option<f64>,
    pub worst_heads: Vec<(usize, f64)>,
    pub worst_positions: Vec<(usize, f64)>,
    pub prob_sum_err: Option<f64>,
    pub mask_leak: Option<usize>,
    pub first_flip: Option<Flip>,
    pub sentence: String,
}

impl From<Located> for LocatedDrift {
    fn from(l: Located) -> Self {
        let sentence = format::located_sentence(&l);
        LocatedDrift {
            failures: l.failures.iter().map(format::failure).collect(),
            phase: l.phase,
            tap: l.tap,
            cosine: l.cosine,
            worst_heads: l.worst_heads,
            worst_positions: l.worst_positions,
            prob_sum_err: l.prob_sum_err,
            mask_leak: l.mask_leak,
            first_flip: l.first_flip,
            sentence,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub tool: ToolInfo,
    pub probe: ProbeInfo,
    pub checkpoint: Option<CheckpointInfo>,
    pub config: ConfigInfo,
    pub inputs: Option<InputInfo>,
    pub backends: Vec<BackendInfo>,
    pub comparisons: Vec<PairComparison>,
    /// Per comparison (same order): the first failing tap of each phase.
    pub located: Vec<Vec<LocatedDrift>>,
    /// Per candidate: layers whose own error fails in the local view.
    pub blame: Vec<(String, Vec<usize>)>,
    pub lens: Vec<(String, Vec<LensRow>)>,
    pub explain: Option<ExplainReport>,
    /// What did not finish, if the run failed half-way.
    pub incomplete: Vec<String>,
    /// What the reader must know to read the comparisons (e.g. a reference windowed to a
    /// device's KV cache ring), one sentence each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    pub svg: Vec<String>,
}

impl Report {
    pub fn new(probe: ProbeInfo) -> Self {
        Report { schema: REPORT_SCHEMA, probe, ..Report::default() }
    }

    pub fn add_comparison(&mut self, pair: PairComparison) {
        self.located.push(crate::compare::locate::locate(&pair).into_iter().map(Into::into).collect());
        self.comparisons.push(pair);
    }

    /// Drift beyond a threshold in any judged comparison (an expected quantization's own
    /// noise is shown, not judged).
    pub fn drift(&self) -> bool {
        self.comparisons.iter().any(|p| p.view != View::Expected && !p.passed())
    }

    /// What the run answers: drift beyond a threshold, or a drift below them that explain
    /// attributes to a catalog fault rather than to the target's clean run (its expected
    /// quantization's noise, for a quantized target). At a decode step where the quantization
    /// amplifies float-order differences, twice the spread of two clean draws can exceed what a
    /// fault moves the logits by (cache-layout:transpose@layers=2 on SmolLM2 through an a16
    /// HEF: logits cosine 0.915 against the expected 0.986, within the allowance) while the
    /// fault's emulation reproduces the observation exactly.
    pub fn failed(&self) -> bool {
        self.drift() || self.explain.as_ref().is_some_and(|e| e.best.is_some())
    }

    /// The local-view comparison of `candidate`, if any.
    pub fn local_of(&self, candidate: &str) -> Option<&PairComparison> {
        self.comparisons.iter().find(|p| p.candidate == candidate && p.view == View::Local)
    }

    /// The float reference against `candidate`'s expected quantization, when `candidate` is
    /// judged on its excess over it.
    pub fn expected_of(&self, candidate: &str) -> Option<&PairComparison> {
        let label = expected_label(candidate);
        self.comparisons.iter().find(|p| p.view == View::Expected && p.candidate == label)
    }

    /// Where `candidate` is judged on its excess over its expected quantization: the logits cosine
    /// of each with the reference, at the worst phase.
    pub fn expected_sentence(&self, candidate: &str) -> Option<String> {
        let expected = self.expected_of(candidate)?;
        let judged =
            self.comparisons.iter().find(|p| p.candidate == candidate && p.view == View::Cumulative)?;
        let logits = |p: &PairComparison| {
            p.rows.iter().filter(|r| r.tap.is(Tap::Logits)).filter_map(|r| r.cosine()).min_by(f64::total_cmp)
        };
        Some(format!(
            "judged on the excess over its expected quantization: logits cosine {} for the expected quantization, {} for {candidate}",
            format::cos(logits(expected)),
            format::cos(logits(judged))
        ))
    }

    /// The extra columns of `candidate`'s taps table: its local view, its float figures.
    pub fn beside(&self, candidate: &str) -> Vec<(&'static str, &PairComparison)> {
        let local = self.local_of(candidate).map(|l| ("local cosine", l));
        local.into_iter().chain(self.expected_of(candidate).map(|e| ("expected cosine", e))).collect()
    }

    pub fn cumulative(&self) -> impl Iterator<Item = (usize, &PairComparison)> {
        self.comparisons.iter().enumerate().filter(|(_, p)| p.view == View::Cumulative)
    }

    /// The one-sentence summary of a comparison: its earliest drift, or that it passed.
    pub fn headline(&self, index: usize) -> String {
        let pair = &self.comparisons[index];
        if let Some(t) = pair.tokens.as_ref().filter(|_| pair.rows.is_empty()) {
            return format!("{} vs {}: {}", pair.reference, pair.candidate, tokens::sentence(t));
        }
        let checked = pair.rows.iter().filter(|r| r.checked()).count();
        let unchecked = pair.rows.len() - checked;
        let unchecked = if unchecked > 0 { format!(", {unchecked} unchecked") } else { String::new() };
        match self.located[index].first() {
            None if checked == 0 && !self.incomplete.is_empty() => format!(
                "{} vs {}: nothing compared: the run did not finish (see `incomplete`){unchecked}",
                pair.reference, pair.candidate
            ),
            None => format!(
                "{} vs {}: no drift beyond thresholds ({checked} taps checked{unchecked})",
                pair.reference, pair.candidate
            ),
            Some(l) => format!("{} vs {}: {}", pair.reference, pair.candidate, l.sentence),
        }
    }
}

/// Rows of one comparison aggregated per tap: the worst phase's row (lowest cosine, failures
/// first), with how many phases failed.
pub fn worst_per_tap(pair: &PairComparison) -> Vec<(&TapRow, usize, usize)> {
    let order: std::collections::BTreeSet<&TapName> = pair.rows.iter().map(|r| &r.tap).collect();
    // A row with nothing finite to compare is the worst, not the best.
    let key =
        |r: &TapRow| r.cosine().unwrap_or(if r.has_nonfinite() { f64::NEG_INFINITY } else { f64::INFINITY });
    order
        .into_iter()
        .map(|tap| {
            let rows: Vec<&TapRow> = pair.rows.iter().filter(|r| r.tap == *tap).collect();
            let failed = rows.iter().filter(|r| r.failed()).count();
            let worst = rows
                .iter()
                .copied()
                .min_by(|a, b| b.failed().cmp(&a.failed()).then_with(|| key(a).total_cmp(&key(b))))
                .expect("at least one row per tap");
            (worst, failed, rows.len())
        })
        .collect()
}

/// The rows worth a first look: every tap of the first drifting layer, only `layers.I.out` of
/// the others, and embed, final_norm, logits and any non-canonical tap.
pub fn compact<'a>(rows: &[(&'a TapRow, usize, usize)]) -> Vec<(&'a TapRow, usize, usize)> {
    use crate::tap::LayerTap;
    let first_layer = rows.iter().find(|(r, _, _)| r.failed()).and_then(|(r, _, _)| r.layer());
    rows.iter()
        .filter(|(r, _, _)| match r.tap.canonical() {
            Some(Tap::Layer(l, t)) => Some(l) == first_layer || t == LayerTap::Out,
            _ => true,
        })
        .copied()
        .collect()
}

/// The label of a backend's expected quantization in comparisons (`expected[hef]`).
pub fn expected_label(backend: &str) -> String {
    format!("expected[{backend}]")
}
