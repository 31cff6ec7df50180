//! `hefprobe audit FILE.hef [--against B.hef]`: structural checks a HEF shows on its face
//! (findings 1, 2, 3, 5, 12), or a structural diff against a reference HEF.

use crate::error::Result;
use crate::hef::{audit_file, diff, Expectations, Hef, Severity};
use crate::model::CheckpointRef;
use crate::output::Outputs;
use crate::report::audit::{audit_doc, diff_doc, Audited};
use crate::report::ReportTarget;
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct Audit {
    pub hef: PathBuf,
    /// Diff against this reference HEF instead.
    pub against: Option<PathBuf>,
    /// The checkpoint the HEF was compiled from: its vocab, hidden size and heads are checked too.
    pub model: Option<CheckpointRef>,
    /// The network group whose LLM interface to check (`--group`; default: genai's choice and
    /// every base-scope group).
    pub group: Option<String>,
    pub reports: Vec<ReportTarget>,
}

impl Audit {
    pub fn run(&self) -> Result<Audited> {
        let mut outs = Outputs::new();
        outs.input("the HEF", &self.hef);
        if let Some(o) = &self.against {
            outs.input("--against", o);
        }
        super::register_checkpoint(self.model.as_ref(), &mut outs)?;
        crate::report::register::<Audited>(&self.reports, &mut outs)?;
        outs.check()?;
        let mut expect = Expectations::default();
        // A diff compares two HEFs: the checkpoint's shapes are an audit's expectations only.
        if let (Some(model), None) = (&self.model, &self.against) {
            let c = super::load_noting(model)?.config;
            expect.vocab_size = Some(c.vocab_size as u32);
            expect.hidden_size = Some(c.hidden_size as u32);
            expect.num_attention_heads = Some(c.num_heads as u32);
            expect.num_key_value_heads = Some(c.num_kv_heads as u32);
            expect.head_dim = Some(c.head_dim as u32);
        }
        if let Some(other) = &self.against {
            let diffs = diff(&Hef::read(&self.hef)?, &Hef::read(other)?);
            let json = serde_json::to_string_pretty(&diffs).expect("json");
            let failed = diffs.iter().any(|d| d.severity == Severity::Error);
            return Ok(Audited { json, doc: diff_doc(&diffs), failed });
        }
        let report = audit_file(&self.hef, &expect, self.group.as_deref())?;
        Ok(Audited { json: report.to_json(), doc: audit_doc(&report), failed: report.has_errors() })
    }
}
