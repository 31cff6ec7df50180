//! `hefprobe audit FILE.hef [--against B.hef]`: structural checks a HEF shows on its face
//! (findings 1, 2, 3, 5, 12), and a structural diff against a reference HEF.

use super::args::{deprecated, ModelArgs};
use crate::error::Result;
use crate::report::{deliver, Format, ReportTarget};
use crate::request::audit::Audit;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct AuditArgs {
    /// The HEF to audit.
    pub hef: PathBuf,
    /// Diff against a reference HEF (e.g. an official Hailo LLM HEF) instead.
    #[arg(long, value_name = "HEF")]
    pub against: Option<PathBuf>,
    /// FORMAT=PATH, several allowed; FORMAT: terminal, markdown (ready for a findings page),
    /// json (schema hefprobe.audit/1); PATH `-` is stdout. Default: terminal tables.
    #[arg(long = "report", value_name = "FORMAT=PATH", value_parser = ReportTarget::parse)]
    pub reports: Vec<ReportTarget>,
    /// Deprecated: --report json.
    #[arg(long, conflicts_with = "markdown", hide = true)]
    pub json: bool,
    /// Deprecated: --report markdown.
    #[arg(long, hide = true)]
    pub markdown: bool,
    /// The checkpoint the HEF was compiled from: its vocab, hidden size and heads are checked too.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Check the LLM interface of this network group only: a prefill group (with its tbt
    /// partner) or a base-scope group (default: genai's pick and every base-scope group).
    #[arg(long, value_name = "NAME", conflicts_with = "against")]
    pub group: Option<String>,
}

impl AuditArgs {
    fn targets(&self) -> Vec<ReportTarget> {
        let mut t = self.reports.clone();
        t.extend(self.json.then(|| deprecated("--json", Format::Json, None)));
        t.extend(self.markdown.then(|| deprecated("--markdown", Format::Markdown, None)));
        ReportTarget::or(t, Format::Terminal)
    }
}

/// Exit 1 when a check fails (an error-severity finding, or an error-severity difference).
pub fn run(a: AuditArgs) -> Result<ExitCode> {
    let request = Audit {
        reports: a.targets(),
        model: a.model.given().then(|| a.model.to_ref()).transpose()?,
        hef: a.hef,
        against: a.against,
        group: a.group,
    };
    let mut audited = request.run()?;
    deliver(&mut audited, &request.reports)?;
    Ok(if audited.failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
