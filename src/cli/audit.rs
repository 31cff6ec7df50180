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
    if let Some(other) = &a.against {
        let (x, y) = (Hef::read(&a.hef)?, Hef::read(other)?);
        let diffs = diff(&x, &y);
        let json = serde_json::to_string_pretty(&diffs).expect("json") + "\n";
        deliver_all(&targets, |t| text(&diff_doc(&diffs), t, &json))?;
        let errors = diffs.iter().any(|d| d.severity == Severity::Error);
        return Ok(if errors { ExitCode::from(1) } else { ExitCode::SUCCESS });
    }
    let mut expect = Expectations::default();
    if a.model.given() {
        let c = a.model.load()?.config;
        expect.vocab_size = Some(c.vocab_size as u32);
        expect.hidden_size = Some(c.hidden_size as u32);
        expect.num_attention_heads = Some(c.num_heads as u32);
        expect.num_key_value_heads = Some(c.num_kv_heads as u32);
        expect.head_dim = Some(c.head_dim as u32);
    }
    let report = audit_file(&a.hef, &expect)?;
    let json = report.to_json() + "\n";
    deliver_all(&targets, |t| text(&audit_doc(&report), t, &json))?;
    Ok(if report.has_errors() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn text(doc: &Doc, t: &ReportTarget, json: &str) -> String {
    match t.format {
        Format::Markdown => doc.markdown(),
        Format::Json => json.to_string(),
        _ => doc.terminal(false),
    }
}
