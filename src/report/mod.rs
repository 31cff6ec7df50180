//! Reports: one plain, serializable [`Report`] and the one rendering layer every command
//! prints through: [`doc`] (a small document with terminal, Markdown and JSON back-ends) and
//! [`format`] (every number and the sentences around them). `terminal` and `markdown` build
//! the run report's document, `audit` the HEF audit's and diff's, `json` is the report's own
//! schema and `svg` its plots. Renderers are pure functions of the report, so every one is
//! snapshot-tested on a fixed comparison. Every result a command writes is a [`Document`], and
//! [`deliver`] writes all of its `--report` targets (`document.rs`).

pub mod audit;
pub mod band;
pub mod doc;
mod document;
pub mod format;
pub mod json;
pub mod markdown;
pub mod matrix;
pub mod svg;
mod tables;
pub mod terminal;
pub mod tokens;

use crate::compare::lens::LensRow;
use crate::compare::locate::Located;
use crate::compare::{Flip, PairComparison, TapRow, View};
use crate::error::Result;
pub use crate::explain::{AttributionRow, ExplainReport, ExplainRow};
use crate::tap::{Phase, TapName};
pub use document::{check, deliver, register, render, write, Document, Format, ReportTarget};
use serde::Serialize;
use std::path::Path;

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

    /// The extra columns of `candidate`'s taps table: its local view, its float figures.
    pub fn beside(&self, candidate: &str) -> Vec<(&'static str, &PairComparison)> {
        let mut v = Vec::new();
        if let Some(l) = self.local_of(candidate) {
            v.push(("local cosine", l));
        }
        if let Some(e) = self.expected_of(candidate) {
            v.push(("expected cosine", e));
        }
        v
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
    order
        .into_iter()
        .map(|tap| {
            let rows: Vec<&TapRow> = pair.rows.iter().filter(|r| r.tap == *tap).collect();
            let failed = rows.iter().filter(|r| r.failed()).count();
            let worst = rows
                .iter()
                .copied()
                .min_by(|a, b| {
                    // A row with nothing finite to compare is the worst, not the best.
                    let key = |r: &TapRow| {
                        r.cosine().unwrap_or(if r.has_nonfinite() {
                            f64::NEG_INFINITY
                        } else {
                            f64::INFINITY
                        })
                    };
                    b.failed().cmp(&a.failed()).then_with(|| key(a).total_cmp(&key(b)))
                })
                .expect("at least one row per tap");
            (worst, failed, rows.len())
        })
        .collect()
}

/// The rows worth a first look: every tap of the first drifting layer, only `layers.I.out` of
/// the others, and embed, final_norm, logits and any non-canonical tap.
pub fn compact<'a>(rows: &[(&'a TapRow, usize, usize)]) -> Vec<(&'a TapRow, usize, usize)> {
    use crate::tap::{LayerTap, Tap};
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

impl Document for Report {
    const COMMAND: &'static str = "run";
    const FORMATS: &'static [Format] = &[Format::Terminal, Format::Markdown, Format::Json, Format::Svg];
    const FIGURE_PREFIX: bool = true;

    fn refusal(t: &ReportTarget) -> String {
        format!(
            "--report {}: JUnit and HTML reports are written by `hefprobe suite` and `hefprobe merge`; \
             a single run writes terminal, markdown, json or svg",
            t.format.name()
        )
    }

    fn doc(&self, _to: Option<&Path>) -> doc::Doc {
        terminal::doc(self)
    }

    fn markdown(&self, to: Option<&Path>) -> doc::Doc {
        markdown::doc(self, to)
    }

    fn json(&self) -> String {
        json::render(self)
    }

    /// The plots at `PREFIX-*.svg`, listed in the report (Markdown links them, JSON names them).
    fn figures(&mut self, prefix: &Path) -> Result<()> {
        let written = svg::write(self, prefix)?;
        self.svg.extend(written);
        Ok(())
    }
}

/// Path of `target` relative to the folder `from` is in (for Markdown links).
pub fn relative_to(target: &Path, from: Option<&Path>) -> String {
    let dir = from.and_then(Path::parent).unwrap_or(Path::new(""));
    match target.strip_prefix(dir) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => target.display().to_string(),
    }
}
