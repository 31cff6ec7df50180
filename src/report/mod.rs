//! Reports: one plain, serializable [`Report`] (`run.rs`) and the one rendering layer every
//! command prints through: [`doc`] (a small document with terminal, Markdown and JSON back-ends) and
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
mod run;
pub mod svg;
mod tables;
pub mod terminal;
pub mod tokens;

pub use crate::explain::{AttributionRow, ExplainReport, ExplainRow};
pub use doc::relative_to;
pub use document::{check, deliver, register, render, write, Document, Format, ReportTarget, SuitePages};
pub use run::{
    compact, expected_label, worst_per_tap, BackendInfo, BackendStatus, CheckpointInfo, ConfigInfo,
    InputInfo, LocatedDrift, ProbeInfo, Report, ToolInfo, REPORT_SCHEMA,
};
use std::path::Path;

impl Document for Report {
    const COMMAND: &'static str = "run";
    const FORMATS: &'static [Format] = &[Format::Terminal, Format::Markdown, Format::Json, Format::Svg];
    const FIGURE_PREFIX: bool = true;

    fn refusal(t: &ReportTarget) -> String {
        format!(
            "--report {}: JUnit and HTML reports are written by `hefprobe suite` and `hefprobe merge`; \
             a single run writes {}",
            t.format.name(),
            Format::listed(Self::FORMATS)
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
    fn figures(&mut self, prefix: &Path) -> crate::error::Result<()> {
        let written = svg::write(self, prefix)?;
        self.svg.extend(written);
        Ok(())
    }
}
