//! `hefprobe audit FILE.hef [--against B.hef]`: structural checks a HEF shows on its face
//! (findings 1, 2, 3, 5, 12), and a structural diff against a reference HEF.

use super::{deliver_all, deprecated, ModelArgs};
use crate::error::Result;
use crate::hef::{audit_file, diff, Expectations, Hef, Severity};
use crate::output::Outputs;
use crate::report::audit::{audit_doc, diff_doc};
use crate::report::doc::Doc;
use crate::report::{only, Format, ReportTarget};
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
    let targets = a.targets();
    only(&targets, "audit", &[Format::Terminal, Format::Markdown, Format::Json])?;
    let mut outs = Outputs::new();
    outs.input("the HEF", &a.hef);
    if let Some(o) = &a.against {
        outs.input("--against", o);
    }
    a.model.register(&mut outs)?;
    crate::report::register(&targets, &mut outs);
    outs.check()?;
    let mut expect = Expectations::default();
    // A diff compares two HEFs: the checkpoint's shapes are an audit's expectations only.
    if a.model.given() && a.against.is_none() {
        let c = a.model.load()?.config;
        expect.vocab_size = Some(c.vocab_size as u32);
        expect.hidden_size = Some(c.hidden_size as u32);
        expect.num_attention_heads = Some(c.num_heads as u32);
        expect.num_key_value_heads = Some(c.num_kv_heads as u32);
        expect.head_dim = Some(c.head_dim as u32);
    }
    let (json, doc, failed) = outcome(&a.hef, a.against.as_deref(), &expect)?;
    let json = json + "\n";
    deliver_all(&targets, |t| text(&doc, t, &json))?;
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// An audit of `hef` against `expect`, or its diff against the reference HEF `against`: the
/// JSON (schema hefprobe.audit/1, or the differences), the document, and whether a check
/// failed (an error-severity finding or difference). The command line's and the Python
/// module's `audit`.
pub fn outcome(
    hef: &std::path::Path,
    against: Option<&std::path::Path>,
    expect: &Expectations,
) -> Result<(String, Doc, bool)> {
    if let Some(other) = against {
        let diffs = diff(&Hef::read(hef)?, &Hef::read(other)?);
        let json = serde_json::to_string_pretty(&diffs).expect("json");
        let failed = diffs.iter().any(|d| d.severity == Severity::Error);
        return Ok((json, diff_doc(&diffs), failed));
    }
    let report = audit_file(hef, expect)?;
    Ok((report.to_json(), audit_doc(&report), report.has_errors()))
}

fn text(doc: &Doc, t: &ReportTarget, json: &str) -> String {
    match t.format {
        Format::Markdown => doc.markdown(),
        Format::Json => json.to_string(),
        _ => doc.terminal(false),
    }
}
