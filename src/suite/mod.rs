//! Nightly regression runs: many probes × targets (HEFs, dumps, emulator settings), judged
//! against a baseline with a noise band from each device's own repeatability, reported as JUnit,
//! JSON (`hefprobe.suite/1`), Markdown for a pull request, and one offline HTML page, with a
//! JSONL history for trends. Sharded by the CI system's matrix (`--shard K/N`), merged back
//! byte for byte (`hefprobe merge`).
//!
//! - [`spec`]: SUITE.toml, targets, settings;   [`shard`]: which pairs this host runs;
//! - [`run`]: the probe stages per pair, the gate ([`gate`]), re-runs, explain; [`options`]: its settings;
//! - [`figures`]: per-tap figures, the noise band, regressions;   [`baseline`]: the ratchet;
//! - [`result`]: what a run decides, as data;   [`merge`]: shards back into one result;
//! - [`check`]: baselines, histories and shard files validated as they are read;
//! - [`summary`] (terminal, Markdown), [`junit`], [`html`], [`history`] (JSONL, trend plots).

pub mod baseline;
pub mod bundle;
pub mod check;
pub mod figures;
pub mod findings;
pub mod gate;
pub mod history;
pub mod html;
pub mod junit;
pub mod merge;
pub mod options;
pub mod outputs;
pub mod result;
pub mod run;
pub mod shard;
pub mod spec;
pub mod summary;

use crate::report::doc::Doc;
use crate::report::{Document, Format, ReportTarget, SuitePages};
use result::SuiteResult;
use std::path::Path;

/// Why a suite refuses `--report svg` (before it runs, and when it renders).
pub const SVG_INLINE: &str =
    "--report svg: a suite's plots are inline in its HTML report (--report html=PATH); `hefprobe trend` \
     writes SVG";

impl Document for SuiteResult {
    const COMMAND: &'static str = "suite";
    const FORMATS: &'static [Format] =
        &[Format::Terminal, Format::Markdown, Format::Json, Format::Junit, Format::Html];
    const SUITE_PAGES: Option<SuitePages<Self>> =
        Some(SuitePages { junit: junit::render, html: html::render });

    /// Only SVG is refused: a suite's plots are in its HTML.
    fn refusal(_: &ReportTarget) -> String {
        SVG_INLINE.to_string()
    }

    fn doc(&self, _to: Option<&Path>) -> Doc {
        summary::doc(self)
    }

    fn json(&self) -> String {
        self.to_json()
    }
}
