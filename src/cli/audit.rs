//! `hefprobe audit FILE.hef [--against B.hef]`: structural checks a HEF shows on its face
//! (findings 1, 2, 3, 5, 12), and a structural diff against a reference HEF.

use super::ModelArgs;
use crate::error::Result;
use crate::hef::{audit_file, diff, Expectations, Hef, Severity};
use crate::report::audit::{audit_doc, diff_doc};
use crate::report::doc::Doc;
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
    /// Print JSON (schema hefprobe.audit/1) instead of tables.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print Markdown, ready for a findings page.
    #[arg(long)]
    pub markdown: bool,
    /// The checkpoint the HEF was compiled from: its vocab, hidden size and heads are checked too.
    #[command(flatten)]
    pub model: ModelArgs,
}

pub fn run(a: AuditArgs) -> Result<ExitCode> {
    if let Some(other) = &a.against {
        let (x, y) = (Hef::read(&a.hef)?, Hef::read(other)?);
        let diffs = diff(&x, &y);
        if a.json {
            println!("{}", serde_json::to_string_pretty(&diffs).expect("json"));
        } else {
            print!("{}", text(&diff_doc(&diffs), a.markdown));
        }
        let errors = diffs.iter().any(|d| d.severity == Severity::Error);
        return Ok(if errors { ExitCode::from(1) } else { ExitCode::SUCCESS });
    }
    let mut expect = Expectations::default();
    if a.model.checkpoint.is_some() || a.model.synth.is_some() {
        let c = a.model.load()?.config;
        expect.vocab_size = Some(c.vocab_size as u32);
        expect.hidden_size = Some(c.hidden_size as u32);
        expect.num_attention_heads = Some(c.num_heads as u32);
        expect.num_key_value_heads = Some(c.num_kv_heads as u32);
        expect.head_dim = Some(c.head_dim as u32);
    }
    let report = audit_file(&a.hef, &expect)?;
    if a.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", text(&audit_doc(&report), a.markdown));
    }
    Ok(if report.has_errors() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn text(doc: &Doc, markdown: bool) -> String {
    if markdown {
        doc.markdown()
    } else {
        doc.terminal(false)
    }
}
