//! What `diagnose` concludes from its three measurements ([`super::diag`]): the problems, as
//! typed values that decide the exit code, and the document that prints them.

use super::diag::{CacheDiffRow, Parity, ParityVerdict, Repeatability};
use crate::report::doc::{Doc, Table};
use crate::report::format::{cos, num};

#[derive(Debug, Clone)]
pub struct Diagnosis {
    pub repeatability: Repeatability,
    pub parity: Parity,
    /// Tokens prefilled before the cache diff.
    pub cache_tokens: usize,
    pub cache: Vec<CacheDiffRow>,
    /// Cache entries may differ from the reference's by this many quantization steps.
    pub lsb_tolerance: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// Runs of one InputSet differ: every comparison carries run-to-run noise.
    RunsDiffer,
    /// Any verdict but [`ParityVerdict::Agree`].
    Parity(ParityVerdict),
    /// The first cache layer whose entries differ beyond the tolerance.
    CacheBeyondTolerance { layer: usize, kind: &'static str, max_lsb: u32, tolerance: u32 },
}

impl Problem {
    pub fn sentence(&self) -> String {
        match self {
            Problem::RunsDiffer => "runs differ: compare figures carry run-to-run noise".into(),
            Problem::Parity(v) => v.sentence().into(),
            Problem::CacheBeyondTolerance { layer, kind, max_lsb, tolerance } => format!(
                "layer {layer} {kind} cache entries differ from the reference by up to {max_lsb} LSB (tolerance {tolerance})"
            ),
        }
    }
}

impl Diagnosis {
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if self.repeatability.max_abs > 0.0 {
            problems.push(Problem::RunsDiffer);
        }
        if self.parity.verdict != ParityVerdict::Agree {
            problems.push(Problem::Parity(self.parity.verdict));
        }
        if let Some(r) = self.cache.iter().find(|r| r.max_lsb > self.lsb_tolerance) {
            problems.push(Problem::CacheBeyondTolerance {
                layer: r.layer,
                kind: r.kind,
                max_lsb: r.max_lsb,
                tolerance: self.lsb_tolerance,
            });
        }
        problems
    }

    pub fn doc(&self) -> Doc {
        let mut d = Doc::new();
        let rep = &self.repeatability;
        d.blank().line(format!(
            "repeatability: {} runs, max |Δ logit| between runs {}{}",
            rep.runs,
            num(rep.max_abs),
            rep.worst_key.as_ref().map(|k| format!(" (at {k})")).unwrap_or_default()
        ));
        d.blank().line(format!(
            "prefill/decode parity at position {} (logits vs the reference):",
            self.parity.position
        ));
        let mut t = Table::new(["path", "cosine", "KL", "argmax"]);
        for r in &self.parity.rows {
            match &r.unavailable {
                Some(why) => t.row([r.path.clone(), "-".into(), "-".into(), format!("unavailable: {why}")]),
                None => t.row([
                    r.path.clone(),
                    cos(r.cosine),
                    num(r.kl.unwrap_or(f64::NAN)),
                    if r.argmax_matches == Some(true) { "same" } else { "DIFFERS" }.to_string(),
                ]),
            }
        }
        d.table(t).line(self.parity.verdict.sentence());
        d.blank().line(format!(
            "cache diff after prefilling {} tokens (LSB = one quantization step of the cache layer):",
            self.cache_tokens
        ));
        let mut t = Table::new(["layer", "k/v", "max LSB", "mean LSB", "worst kv head (max LSB)"]);
        for r in &self.cache {
            t.row([
                r.layer.to_string(),
                r.kind.to_string(),
                r.max_lsb.to_string(),
                format!("{:.2}", r.mean_lsb),
                format!("{} ({})", r.worst_head, r.worst_head_max_lsb),
            ]);
        }
        d.table(t);
        let problems = self.problems();
        if problems.is_empty() {
            d.blank().line("no problem found");
        } else {
            d.blank().line("problems:");
            for p in &problems {
                d.line(format!("- {}", p.sentence()));
            }
        }
        d
    }

    /// Every figure, schema `hefprobe.diagnose/1`.
    pub fn to_json(&self) -> String {
        let v = serde_json::json!({
            "schema": "hefprobe.diagnose/1",
            "repeatability": self.repeatability,
            "parity": self.parity,
            "cache_diff": self.cache,
        });
        serde_json::to_string_pretty(&v).expect("json") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::diag::ParityRow;

    fn diagnosis(verdict: ParityVerdict, max_abs: f64, max_lsb: u32) -> Diagnosis {
        let row = |path: &str| ParityRow {
            path: path.into(),
            cosine: Some(1.0),
            kl: Some(0.0),
            argmax_matches: Some(true),
            unavailable: None,
        };
        Diagnosis {
            repeatability: Repeatability { runs: 3, max_abs, worst_key: None },
            parity: Parity { position: 4, rows: vec![row("(a)"), row("(b)")], verdict },
            cache_tokens: 4,
            cache: vec![CacheDiffRow {
                layer: 0,
                kind: "k",
                entries: 4,
                max_lsb,
                mean_lsb: 0.5,
                worst_head: 1,
                worst_head_max_lsb: max_lsb,
            }],
            lsb_tolerance: 8,
        }
    }

    #[test]
    fn problems_come_from_the_typed_verdict_not_its_sentence() {
        assert!(diagnosis(ParityVerdict::Agree, 0.0, 8).problems().is_empty());
        let d = diagnosis(ParityVerdict::CacheWriteReadDisagree, 0.5, 9);
        assert_eq!(
            d.problems(),
            vec![
                Problem::RunsDiffer,
                Problem::Parity(ParityVerdict::CacheWriteReadDisagree),
                Problem::CacheBeyondTolerance { layer: 0, kind: "k", max_lsb: 9, tolerance: 8 },
            ]
        );
        let text = d.doc().terminal(false);
        assert!(text.ends_with(&format!("\nproblems:\n- runs differ: compare figures carry run-to-run noise\n- {}\n- layer 0 k cache entries differ from the reference by up to 9 LSB (tolerance 8)\n", ParityVerdict::CacheWriteReadDisagree.sentence())), "{text}");
        assert!(diagnosis(ParityVerdict::Agree, 0.0, 0)
            .doc()
            .terminal(false)
            .ends_with("\nno problem found\n"));
    }

    #[test]
    fn the_json_carries_the_verdict_sentence() {
        let v: serde_json::Value =
            serde_json::from_str(&diagnosis(ParityVerdict::Agree, 0.0, 0).to_json()).unwrap();
        assert_eq!(v["parity"]["verdict"], "prefill and tbt agree with the reference");
        assert_eq!(v["schema"], "hefprobe.diagnose/1");
    }
}
