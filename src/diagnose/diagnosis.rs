//! What `diagnose` concludes from its three measurements ([`super::diag`]): the problems, as
//! typed values that decide the exit code, and the document that prints them.

use super::{CacheDiffRow, Parity, ParityVerdict, Repeatability, UNAVAILABLE_OVER_RPC};
use crate::backend::hef::HefBackend;
use crate::error::{Error, Result};
use crate::inputs::InputSet;
use crate::model::Decoder;
use crate::report::doc::{Block, Doc, Table, Text};
use crate::report::format::{cos, num};
use crate::report::{Document, Format};
use std::path::{Path, PathBuf};

/// What `diagnose` writes: the diagnosis, the line naming the device, and the HEF.
pub struct Diagnosed {
    pub diagnosis: Diagnosis,
    pub device: String,
    pub hef: PathBuf,
    pub command: String,
}

impl Document for Diagnosed {
    const COMMAND: &'static str = "diagnose";
    const FORMATS: &'static [Format] = &[Format::Terminal, Format::Markdown, Format::Json];

    fn doc(&self, _to: Option<&Path>) -> Doc {
        let mut doc = Doc::new();
        doc.line(self.device.as_str()).append(self.diagnosis.doc());
        doc
    }

    fn markdown(&self, _to: Option<&Path>) -> Doc {
        let mut doc = Doc::new();
        doc.heading(1, Text::from("Diagnose ").and(Text::code(self.hef.display().to_string())));
        doc.fact(format!("device: {}", self.device))
            .fact(Text::from("command: ").and(Text::code(self.command.as_str())))
            .fact(format!("hefprobe {}", env!("CARGO_PKG_VERSION")));
        doc.append(self.diagnosis.markdown_doc());
        doc
    }

    fn json(&self) -> String {
        self.diagnosis.to_json()
    }
}

#[derive(Debug, Clone)]
pub struct Diagnosis {
    pub repeatability: Repeatability,
    pub parity: Parity,
    /// Tokens prefilled before the cache diff.
    pub cache_tokens: usize,
    pub cache: Vec<CacheDiffRow>,
    /// Why the cache diff could not run (then `cache` is empty): the RPC limit on Hailo-10H,
    /// or the error it met. `cache_failed` says which.
    pub cache_unavailable: Option<String>,
    pub cache_failed: bool,
    /// `--lsb-tolerance`: one tolerance for every cache layer, instead of each row's own.
    pub lsb_tolerance: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// Runs of one InputSet differ: every comparison carries run-to-run noise.
    RunsDiffer,
    /// Any verdict but [`ParityVerdict::Agree`].
    Parity(ParityVerdict),
    /// The worst cache layer (largest max LSB over its tolerance) among `over` layers beyond
    /// their tolerance.
    CacheBeyondTolerance { layer: usize, kind: &'static str, max_lsb: u32, tolerance: u32, over: usize },
    /// The cache diff failed for another reason than the RPC limit.
    CacheDiffFailed(String),
}

impl Problem {
    pub fn sentence(&self) -> String {
        match self {
            Problem::RunsDiffer => "runs differ: compare figures carry run-to-run noise".into(),
            Problem::Parity(v) => v.sentence().into(),
            Problem::CacheBeyondTolerance { layer, kind, max_lsb, tolerance, over } => {
                let worst = if *over > 1 {
                    format!("; the worst of {over} layers over tolerance")
                } else {
                    String::new()
                };
                format!(
                    "layer {layer} {kind} cache entries differ from the reference by up to {max_lsb} LSB (tolerance {tolerance}){worst}"
                )
            }
            Problem::CacheDiffFailed(why) => format!("the cache diff failed: {why}"),
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
        let over: Vec<(&CacheDiffRow, u32)> =
            self.cache.iter().map(|r| (r, self.tolerance(r))).filter(|(r, t)| r.max_lsb > *t).collect();
        // The worst layer by how far past its own tolerance it is, not the first one.
        let worst = over.iter().max_by(|(a, ta), (b, tb)| {
            (a.max_lsb as f64 / (*ta).max(1) as f64).total_cmp(&(b.max_lsb as f64 / (*tb).max(1) as f64))
        });
        if let Some((r, t)) = worst {
            problems.push(Problem::CacheBeyondTolerance {
                layer: r.layer,
                kind: r.kind,
                max_lsb: r.max_lsb,
                tolerance: *t,
                over: over.len(),
            });
        }
        if let (true, Some(why)) = (self.cache_failed, &self.cache_unavailable) {
            problems.push(Problem::CacheDiffFailed(why.clone()));
        }
        problems
    }

    /// The tolerance a cache row is judged by: `--lsb-tolerance` when given, else its own.
    pub fn tolerance(&self, r: &CacheDiffRow) -> u32 {
        self.lsb_tolerance.unwrap_or(r.tolerance_lsb)
    }

    /// The terminal document: tables right under the line that introduces them.
    pub fn doc(&self) -> Doc {
        self.build(false)
    }

    /// The same document for Markdown: a blank line around every table, which Markdown needs
    /// to end a paragraph before a table and the table before the next line.
    pub fn markdown_doc(&self) -> Doc {
        self.build(true)
    }

    fn build(&self, spaced: bool) -> Doc {
        let mut d = Doc::new();
        let rep = &self.repeatability;
        d.blank().line(format!(
            "repeatability: {} runs, max |Δ logit| between runs {}{}",
            rep.runs,
            num(rep.max_abs),
            rep.worst_key.as_ref().map(|k| format!(" (at {k})")).unwrap_or_default()
        ));
        self.parity_section(&mut d, spaced);
        match &self.cache_unavailable {
            Some(why) => {
                d.blank().line(format!("cache diff: {why}"));
            }
            None => self.cache_section(&mut d, spaced),
        }
        let rpc = self.cache_unavailable.as_deref() == Some(UNAVAILABLE_OVER_RPC)
            || self.parity.rows.iter().any(|r| r.unavailable.as_deref() == Some(UNAVAILABLE_OVER_RPC));
        if rpc {
            after_table(&mut d, spaced);
            d.line(format!("({})", crate::device::RPC_CACHE_UNSUPPORTED));
        }
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

    /// The parity table of each path and its verdict.
    fn parity_section(&self, d: &mut Doc, spaced: bool) {
        d.blank().line(format!(
            "prefill/decode parity at position {} (logits vs the reference):",
            self.parity.position
        ));
        space(d, spaced);
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
        d.table(t);
        space(d, spaced);
        d.line(self.parity.verdict.sentence());
    }

    /// The cache diff's table of layers, and the clipped values when there are any.
    fn cache_section(&self, d: &mut Doc, spaced: bool) {
        d.blank().line(format!(
            "cache diff after prefilling {} tokens (LSB = one quantization step of the cache layer):",
            self.cache_tokens
        ));
        space(d, spaced);
        let mut t = Table::new([
            "layer",
            "k/v",
            "max LSB",
            "tolerance",
            "mean LSB",
            "worst kv head (max LSB)",
            "clipped",
        ]);
        for r in &self.cache {
            t.row([
                r.layer.to_string(),
                r.kind.to_string(),
                r.max_lsb.to_string(),
                self.tolerance(r).to_string(),
                format!("{:.2}", r.mean_lsb),
                format!("{} ({})", r.worst_head, r.worst_head_max_lsb),
                r.clipped.to_string(),
            ]);
        }
        d.table(t);
        let clipped: usize = self.cache.iter().map(|r| r.clipped).sum();
        if clipped > 0 {
            after_table(d, spaced);
            d.line(format!(
                "({clipped} reference values lie outside their cache layer's calibrated range: the cache \
                 clips them, and every later layer attends over the clipped entries; the HEF's cache \
                 calibration is narrower than this prompt)"
            ));
        }
    }

    /// Every figure, schema `hefprobe.diagnose/1`, and the problems' sentences (empty: none
    /// found), as the other formats print them.
    pub fn to_json(&self) -> String {
        let problems: Vec<String> = self.problems().iter().map(Problem::sentence).collect();
        let v = serde_json::json!({
            "schema": "hefprobe.diagnose/1",
            "repeatability": self.repeatability,
            "parity": self.parity,
            "cache_diff": self.cache,
            "cache_diff_unavailable": self.cache_unavailable,
            "problems": problems,
        });
        serde_json::to_string_pretty(&v).expect("json") + "\n"
    }
}

/// A blank line in the Markdown document (which needs one around a table), none in the terminal's.
fn space(d: &mut Doc, spaced: bool) {
    if spaced {
        d.blank();
    }
}

/// [`space`] before a line after a table, when the table is the last thing so far.
fn after_table(d: &mut Doc, spaced: bool) {
    if matches!(d.blocks.last(), Some(Block::Table(_))) {
        space(d, spaced);
    }
}

impl Diagnosis {
    /// Every diagnostic of `backend` against `model` on `inputs`: prefill/decode parity, the
    /// cache diff, and `repeat` runs of the repeatability gate.
    pub fn of(
        backend: &mut HefBackend,
        model: &Decoder,
        inputs: &InputSet,
        repeat: usize,
        lsb_tolerance: Option<u32>,
    ) -> Result<Self> {
        let HefBackend { driver, hef, .. } = backend;
        let parity = super::parity(driver, hef, model, &inputs.prompt)?;
        let cache_tokens = inputs.prompt.len() - 1;
        // The cache diff never stops diagnose: over RPC it is unavailable, and any other failure is
        // reported beside the figures the other diagnostics have.
        let (cache, cache_unavailable, cache_failed) =
            match super::cache_diff(driver, hef, model, &inputs.prompt[..cache_tokens]) {
                Ok(rows) => (rows, None, false),
                Err(e @ Error::Unsupported(_)) => (Vec::new(), Some(super::unavailable(&e)), false),
                Err(e) => (Vec::new(), Some(e.to_string()), true),
            };
        let repeatability = super::repeatability(backend, inputs, repeat)?;
        Ok(Diagnosis {
            repeatability,
            parity,
            cache_tokens,
            cache,
            cache_unavailable,
            cache_failed,
            lsb_tolerance,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::ParityRow;

    fn diagnosis(verdict: ParityVerdict, max_abs: f64, max_lsb: u32) -> Diagnosis {
        let row = |path: &str| ParityRow {
            path: path.into(),
            cosine: Some(1.0),
            kl: Some(0.0),
            argmax_matches: Some(true),
            unavailable: None,
        };
        Diagnosis {
            repeatability: Repeatability { runs: 3, max_abs, worst_key: None, spread: Default::default() },
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
                tolerance_lsb: 8,
                clipped: 0,
            }],
            cache_unavailable: None,
            cache_failed: false,
            lsb_tolerance: None,
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
                Problem::CacheBeyondTolerance { layer: 0, kind: "k", max_lsb: 9, tolerance: 8, over: 1 },
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
    fn the_worst_cache_layer_is_named_not_the_first_over_tolerance() {
        let mut d = diagnosis(ParityVerdict::Agree, 0.0, 0);
        let row = |layer: usize, kind: &'static str, max_lsb: u32, tolerance_lsb: u32| CacheDiffRow {
            layer,
            kind,
            entries: 39,
            max_lsb,
            mean_lsb: 1.0,
            worst_head: 0,
            worst_head_max_lsb: max_lsb,
            tolerance_lsb,
            clipped: 0,
        };
        // Layer 3 is over first; layer 5 is furthest over its own tolerance, layer 4 has the
        // largest LSB count but a tolerance that covers most of it.
        d.cache = vec![row(2, "v", 5, 8), row(3, "k", 12, 8), row(4, "k", 900, 800), row(5, "v", 176, 20)];
        assert_eq!(
            d.problems(),
            vec![Problem::CacheBeyondTolerance { layer: 5, kind: "v", max_lsb: 176, tolerance: 20, over: 3 }]
        );
        let text = d.doc().terminal(false);
        assert!(
            text.contains("layer 5 v cache entries differ from the reference by up to 176 LSB (tolerance 20); the worst of 3 layers over tolerance"),
            "{text}"
        );
        // Each row is judged by its own tolerance; --lsb-tolerance replaces them all.
        d.cache = vec![row(4, "k", 142, 513), row(5, "v", 176, 513)];
        assert!(d.problems().is_empty());
        d.lsb_tolerance = Some(150);
        assert_eq!(
            d.problems(),
            vec![Problem::CacheBeyondTolerance {
                layer: 5,
                kind: "v",
                max_lsb: 176,
                tolerance: 150,
                over: 1
            }]
        );
    }

    #[test]
    fn the_json_carries_the_verdict_sentence() {
        let v: serde_json::Value =
            serde_json::from_str(&diagnosis(ParityVerdict::Agree, 0.0, 0).to_json()).unwrap();
        assert_eq!(v["parity"]["verdict"], "prefill and tbt agree with the reference");
        assert_eq!(v["schema"], "hefprobe.diagnose/1");
        assert_eq!(v["problems"], serde_json::json!([]));
        let bad = diagnosis(ParityVerdict::Agree, 0.5, 0);
        let v: serde_json::Value = serde_json::from_str(&bad.to_json()).unwrap();
        assert_eq!(v["problems"], serde_json::json!([Problem::RunsDiffer.sentence()]));
    }

    #[test]
    fn markdown_sets_every_table_apart_and_the_terminal_keeps_its_layout() {
        let mut d = diagnosis(ParityVerdict::Agree, 0.0, 0);
        d.cache[0].clipped = 2;
        let md = d.markdown_doc().markdown();
        assert!(md.contains("|\n\n(2 reference values lie outside"), "{md}");
        assert!(!md.contains("\n\n\n"), "{md}");
        // A line right after a table would be read as one more row of it.
        let lines: Vec<&str> = md.lines().collect();
        for w in lines.windows(2) {
            let (a, b) = (w[0].starts_with('|'), w[1].starts_with('|'));
            assert!(a == b || w[0].is_empty() || w[1].is_empty(), "no blank line between {w:?}\n{md}");
        }
        assert!(md.contains(&format!("\n\n{}\n", ParityVerdict::Agree.sentence())), "{md}");
        let term = d.doc().terminal(false);
        assert!(term.contains(&format!("┘\n{}\n", ParityVerdict::Agree.sentence())), "{term}");
    }
}
