//! A finding's record as data (`probes/findings/N.toml`): the checkpoint shapes on record and
//! what each did (coherent, or degenerate into one repeated token within N tokens), and the
//! causes the finding cleared. `hefprobe explain --pattern` ranks every hypothesis of the catalog
//! by how much of the record it reproduces ([`judge`]) and names the shapes whose outcomes would
//! decide between the survivors ([`decide`]). Unknown keys and values out of bounds are refused
//! naming the file and the key, with the fix (exit 2).

pub mod decide;
pub mod doc;
pub mod judge;

use crate::error::{Error, Result};
use crate::fault::spec::FaultSpec;
use serde::Deserialize;
use std::path::{Path, PathBuf};

pub const PATTERN_VERSION: u32 = 1;
/// The most observations one record holds (each may be an emulation per hypothesis).
pub const MAX_OBSERVATIONS: usize = 64;
/// The longest generation a record may ask for (base scope re-runs the sequence per token).
pub const MAX_TOKENS: usize = 256;
/// The longest prompt.
pub const MAX_PROMPT: usize = 512;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pattern {
    pub version: u32,
    /// The row of the findings table this record is of.
    pub finding: u32,
    /// What the finding says, in one line.
    pub summary: String,
    /// The clean quantized emulation every hypothesis is composed with (a `quant` setting, e.g.
    /// "w8"); a `quant` hypothesis replaces it. Absent: float.
    #[serde(default, deserialize_with = "crate::fault::spec::de_quantization")]
    pub baseline: Option<FaultSpec>,
    pub generation: Generation,
    pub prompt: Prompt,
    #[serde(rename = "observation")]
    pub observations: Vec<Observation>,
    #[serde(default, rename = "cleared")]
    pub cleared: Vec<Cleared>,
    #[serde(skip)]
    pub path: PathBuf,
}

/// How a degenerate outcome is read from base-scope greedy generation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generation {
    /// Greedy tokens generated (an observation's `within` overrides it).
    pub tokens: usize,
    /// A collapse: a run of at least this many copies of one token.
    pub run: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// Used on a checkpoint with a tokenizer (a GGUF, a folder with tokenizer.json).
    pub text: Option<String>,
    /// Used on synthesized checkpoints and on a checkpoint without a tokenizer.
    pub tokens: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Coherent,
    Degenerate,
}

/// One checkpoint shape on record and what it did. Only `hidden` and `outcome` are required: a
/// dimension the record does not state is left out (shape hypotheses cannot be judged on it,
/// and a synthesized stand-in takes a default, said in the report).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    pub hidden: usize,
    pub layers: Option<usize>,
    pub heads: Option<usize>,
    pub kv_heads: Option<usize>,
    pub vocab: Option<usize>,
    /// Whether the lm_head was split into shards (finding 12's surgery).
    pub lm_head_split: Option<bool>,
    pub outcome: Outcome,
    /// Degenerate: collapsed within this many tokens (default: `[generation] tokens`).
    pub within: Option<usize>,
    /// Where the record says it.
    pub note: Option<String>,
}

crate::named_enum! {
    /// A cause the finding cleared: a hypothesis about the checkpoint's shape.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Cause {
        /// Degenerates iff heads / kv_heads is not a power of two.
        GqaRatio = "gqa-ratio",
        /// Degenerates iff deeper than every coherent checkpoint on record.
        Depth = "depth",
        /// Degenerates iff its lm_head was split into shards.
        LmHeadSplit = "lm-head-split",
    }
}

impl Cause {
    pub fn predicts(self) -> &'static str {
        match self {
            Cause::GqaRatio => "degenerate iff heads / kv_heads is not a power of 2",
            Cause::Depth => "degenerate iff deeper than every coherent checkpoint on record",
            Cause::LmHeadSplit => "degenerate iff the lm_head was split into shards",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cleared {
    pub cause: Cause,
    pub note: Option<String>,
}

impl Observation {
    /// The tokens within which a degenerate outcome collapsed.
    pub fn within(&self, g: &Generation) -> usize {
        self.within.unwrap_or(g.tokens)
    }

    /// `hidden 576, 6 layers, 9/9 heads, vocab ?`: the shape as recorded.
    pub fn shape(&self) -> String {
        let n = |v: Option<usize>| v.map_or("?".to_string(), |v| v.to_string());
        format!(
            "hidden {}, layers {}, heads {}/{}, vocab {}{}",
            self.hidden,
            n(self.layers),
            n(self.heads),
            n(self.kv_heads),
            n(self.vocab),
            match self.lm_head_split {
                Some(true) => ", lm_head split",
                Some(false) => ", lm_head whole",
                None => "",
            }
        )
    }

    pub fn outcome_text(&self, g: &Generation) -> String {
        match self.outcome {
            Outcome::Coherent => "coherent".into(),
            Outcome::Degenerate => format!("degenerate within {}", self.within(g)),
        }
    }
}

impl Pattern {
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::files::read_text(path, crate::files::Kind::Probe)?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let what = path.display().to_string();
        let mut p: Pattern = toml::from_str(text).map_err(|e| {
            Error::input(
                &what,
                format!(
                    "{}; a finding's record holds version, finding, summary, baseline, [generation], [prompt], \
                     [[observation]] and [[cleared]] (probes/findings/16.toml is one)",
                    e.to_string().trim_end()
                ),
            )
        })?;
        p.check(&what)?;
        p.path = path.to_path_buf();
        Ok(p)
    }

    fn check(&self, what: &str) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::input(format!("{what} key `{key}`"), msg));
        if self.version != PATTERN_VERSION {
            return bad(
                "version",
                format!("is {}: this hefprobe reads version {PATTERN_VERSION}", self.version),
            );
        }
        let g = &self.generation;
        if g.tokens == 0 || g.tokens > MAX_TOKENS {
            return bad("generation.tokens", format!("is {}: give 1..={MAX_TOKENS} tokens", g.tokens));
        }
        if g.run < 2 || g.run > g.tokens {
            return bad(
                "generation.run",
                format!("is {}: a collapse is a run of 2..={} (generation.tokens) copies", g.run, g.tokens),
            );
        }
        let t = &self.prompt.tokens;
        if t.is_empty() || t.len() > MAX_PROMPT {
            return bad("prompt.tokens", format!("holds {} ids: give 1..={MAX_PROMPT}", t.len()));
        }
        if self.prompt.text.as_ref().is_some_and(|s| s.is_empty() || s.len() > 16 * MAX_PROMPT) {
            return bad(
                "prompt.text",
                format!("give 1..={} bytes of text, or leave it out", 16 * MAX_PROMPT),
            );
        }
        if self.observations.is_empty() || self.observations.len() > MAX_OBSERVATIONS {
            return bad(
                "observation",
                format!(
                    "{} observations: give 1..={MAX_OBSERVATIONS} [[observation]] tables",
                    self.observations.len()
                ),
            );
        }
        for (i, o) in self.observations.iter().enumerate() {
            o.check(&format!("{what} [[observation]] {}", i + 1), g)?;
        }
        let mut seen = Vec::new();
        for c in &self.cleared {
            if seen.contains(&c.cause) {
                return bad(
                    "cleared.cause",
                    format!("`{}` is listed twice; list each cause once", c.cause.name()),
                );
            }
            seen.push(c.cause);
        }
        Ok(())
    }
}

impl Observation {
    fn check(&self, what: &str, g: &Generation) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::input(format!("{what} key `{key}`"), msg));
        let range = |key: &str, v: Option<usize>, max: usize| -> Result<()> {
            match v {
                Some(v) if v == 0 || v > max => {
                    bad(key, format!("is {v}: give 1..={max}, or leave it out when not recorded"))
                }
                _ => Ok(()),
            }
        };
        range("hidden", Some(self.hidden), 1 << 16)?;
        range("layers", self.layers, 512)?;
        range("heads", self.heads, 1024)?;
        range("kv_heads", self.kv_heads, 1024)?;
        range("vocab", self.vocab, 1 << 22)?;
        range("within", self.within, MAX_TOKENS)?;
        if let (Some(h), Some(k)) = (self.heads, self.kv_heads) {
            if !h.is_multiple_of(k) {
                return bad("kv_heads", format!("is {k}: it must divide heads ({h})"));
            }
        }
        if let Some(h) = self.heads {
            if !self.hidden.is_multiple_of(h) || !(self.hidden / h).is_multiple_of(2) {
                return bad(
                    "heads",
                    format!("is {h}: hidden ({}) must be heads × an even head dim", self.hidden),
                );
            }
        }
        if self.outcome == Outcome::Coherent && self.within.is_some() {
            return bad("within", "applies to a degenerate outcome; leave it out of a coherent one".into());
        }
        if self.outcome == Outcome::Degenerate && self.within(g) < g.run {
            return bad(
                "within",
                format!(
                    "is {}: a collapse of {} tokens (generation.run) needs at least that many",
                    self.within(g),
                    g.run
                ),
            );
        }
        Ok(())
    }
}

/// Judge every hypothesis of the catalog and every cleared cause against `p` on `ckpt`, on
/// `threads` threads, and name the deciding experiment.
pub fn explain(p: &Pattern, ckpt: &crate::model::Checkpoint, threads: usize) -> Result<doc::Explained> {
    if let Some(b) = &p.baseline {
        crate::fault::catalog::build(b, &ckpt.config)
            .map_err(|e| Error::input(format!("{} key `baseline`", p.path.display()), e.to_string()))?;
    }
    let beds = judge::beds(p, ckpt)?;
    let specs = judge::hypotheses(ckpt);
    let tested_on = beds
        .iter()
        .zip(&p.observations)
        .map(|(b, o)| match b {
            Some(b) => b.label.clone(),
            None => format!("not tested (no trained checkpoint of hidden {} given)", o.hidden),
        })
        .collect();
    let mut e =
        doc::Explained::new(p, ckpt.source.to_string(), tested_on, judge::grid_note(ckpt, specs.len()));
    let mut judged = judge::judge_catalog(p, &beds, &specs, threads)?;
    judge::rank(&mut judged);
    e.emulations =
        beds.iter().flatten().count() * 2 + judged.iter().flat_map(|j| &j.results).filter(|r| r.ran).count();
    e.cleared = p.cleared.iter().map(|c| judge::judge_cause(p, c.cause)).collect();
    e.experiment = decide::experiment(p, &judged);
    e.hypotheses = judged;
    Ok(e)
}

#[cfg(test)]
mod tests;
