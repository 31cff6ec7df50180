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
pub mod result;
pub mod run;
pub mod shard;
pub mod spec;
pub mod summary;

use crate::error::{Error, Result};
use crate::report::doc::Doc;
use crate::report::{Document, Format, ReportTarget, SuitePages};
use result::SuiteResult;
use std::path::{Path, PathBuf};

/// Why a suite refuses `--report svg` (before it runs, and when it renders).
pub const SVG_INLINE: &str =
    "--report svg: a suite's plots are inline in its HTML report (--report html=PATH); `hefprobe trend` \
     writes SVG";

/// What a finished result updates besides its reports.
#[derive(Debug, Clone, Default)]
pub struct Finish {
    pub baseline: Option<PathBuf>,
    pub update_baseline: bool,
    pub accept: bool,
    /// Failing pairs a person accepts as known (`--known PROBE/TARGET`).
    pub known: Vec<String>,
    pub history: Option<PathBuf>,
}

/// Ratchet the baseline and append the history, as asked; returns the lines to print.
pub fn finish(r: &SuiteResult, f: &Finish) -> Result<Vec<String>> {
    let mut said = Vec::new();
    if f.update_baseline {
        let path =
            f.baseline.as_ref().ok_or_else(|| Error::usage("--update-baseline needs --baseline FILE"))?;
        let mut b = baseline::Baseline::load_or_new(path, true)?;
        let keys: Vec<(String, String)> = r.pairs.iter().map(|p| p.key()).collect();
        let known = f.known.iter().map(|n| baseline::known_pair(n, &keys)).collect::<Result<Vec<_>>>()?;
        let u = b.update(&r.pairs, f.accept, &known);
        b.save(path)?;
        let how = if f.accept { "accepted as they are" } else { "ratcheted: improvements only" };
        let known_said = if u.known > 0 {
            format!("; {} failing pairs accepted as known", u.known)
        } else {
            String::new()
        };
        said.push(format!(
            "baseline {}: {} pairs added, {} changed, {} with worse figures kept as they were ({how}){known_said}",
            path.display(),
            u.added,
            u.changed,
            u.held
        ));
        let failing = r.pairs.iter().filter(|p| p.status.is_failure()).count();
        if failing > 0 && !f.accept && known.is_empty() {
            said.push(format!(
                "baseline {}: tonight's {failing} failing pairs stay failures on later nights (exit 1) until fixed \
                 or accepted with --known PROBE/TARGET",
                path.display()
            ));
        }
    }
    if let Some(h) = &f.history {
        let n = history::append(h, r)?;
        said.push(format!("history {}: {n} lines appended", h.display()));
    }
    Ok(said)
}

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
