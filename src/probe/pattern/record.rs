//! The record's schema (version 2) and its checks: every value bounded, every inconsistency
//! named by file, observation and key.

use crate::error::{Error, Result};
use crate::fault::spec::FaultSpec;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const PATTERN_VERSION: u32 = 2;
/// The most observations one record holds.
pub const MAX_OBSERVATIONS: usize = 64;
/// The longest generation a record may ask for (base scope re-runs the sequence per token).
pub const MAX_TOKENS: usize = 256;
/// The longest prompt.
pub const MAX_PROMPT: usize = 512;
/// The most multiply-adds a record may ask for, over every hypothesis and observation, counted
/// up front from the shapes ([`Pattern::cost`]): 4·10^13, about 20 minutes of one
/// release build on 2 cores (the committed record of finding 16 asks for 1.3·10^13).
pub const MAX_COST: f64 = 4e13;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pattern {
    pub version: u32,
    /// The row of the findings table this record is of.
    pub finding: u32,
    /// What the finding says, in one line.
    pub summary: String,
    pub defaults: Defaults,
    #[serde(rename = "observation")]
    pub observations: Vec<Observation>,
    #[serde(default, rename = "cleared")]
    pub cleared: Vec<Cleared>,
    #[serde(skip)]
    pub path: PathBuf,
}

/// What applies to every observation that does not say otherwise.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// The quantization every hypothesis is composed with (a `quant` setting: "w4a8" is 4-bit
    /// weights and 8-bit activations with the runtime's 16-bit embeddings input); a `quant`
    /// hypothesis replaces it. Absent: float.
    #[serde(default, deserialize_with = "crate::fault::spec::de_quantization")]
    pub recipe: Option<FaultSpec>,
    pub scope: Scope,
    /// Base scope: the positions of the one frame (prompt and generation together).
    pub frame: Option<usize>,
    /// Greedy tokens generated, within the frame.
    pub tokens: usize,
    /// What repetition is: a run of at least this many copies of one token.
    pub run: usize,
    /// The prompt of an observation that records none (token ids: stand-ins have no tokenizer).
    pub prompt: Vec<u32>,
}

/// What ran on the chip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The cache-less group, the whole conversation re-run per token in one frame.
    Base,
    /// A prefill of the prompt (a KV HEF's `__prefill`): figures at its positions.
    Prefill,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Greedy generation stayed coherent: a hypothesis must leave the recipe's tokens as they are.
    Coherent,
    /// One token repeated: a run of at least `run` copies starting no later than step `from`.
    Repeats,
    /// Off the reference, and no token repeated (no run of `[defaults] run` copies).
    Incoherent,
    /// Only the figures on record are judged.
    Figures,
}

/// One checkpoint on record and what it did. Only `id`, `source`, `hidden` and `outcome` are
/// required: a dimension the record does not state is left out (a stand-in takes a default,
/// said in the report, and shape hypotheses cannot be judged on it).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    /// Its name on the record's pages or digest (C1, D4, N1 …).
    pub id: String,
    /// The page and commit that records it.
    pub source: String,
    /// The checkpoint's name on the hub, as recorded.
    pub checkpoint: Option<String>,
    pub hidden: usize,
    pub layers: Option<usize>,
    pub heads: Option<usize>,
    pub kv_heads: Option<usize>,
    pub vocab: Option<usize>,
    /// The lm_head shards' widths in output order, when recorded.
    pub shards: Option<Vec<usize>>,
    /// How many shards, where the widths are not recorded (1: whole).
    pub shard_count: Option<usize>,
    /// Whether the lm_head is tied to the embeddings.
    pub tied: Option<bool>,
    #[serde(default, deserialize_with = "crate::fault::spec::de_quantization", skip_serializing)]
    pub recipe: Option<FaultSpec>,
    pub scope: Option<Scope>,
    pub frame: Option<usize>,
    /// The prompt on record, as ids, and as text where the page gives it.
    pub prompt: Option<Vec<u32>>,
    pub prompt_text: Option<String>,
    /// Greedy tokens generated on record (default `[defaults] tokens`).
    pub tokens: Option<usize>,
    /// The tokens the chip generated, where recorded (shown; a stand-in's own ids differ).
    pub generated: Option<Vec<u32>>,
    pub outcome: Outcome,
    /// Repeats: the run's length, and the step it starts by.
    pub run: Option<usize>,
    pub from: Option<usize>,
    #[serde(default, rename = "figure")]
    pub figures: Vec<Figure>,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Cosine of the logits (or a shard's columns) against the float reference.
    Cosine,
    /// Pearson correlation of the logits against the float reference.
    Pearson,
    /// Whether the largest logit (within a shard: its local argmax) is the reference's.
    Argmax,
}

/// A position: the prompt's last, or one of its positions (0-based).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum At {
    #[default]
    Last,
    Position(usize),
}

impl<'de> Deserialize<'de> for At {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Word(String),
            Index(usize),
        }
        match Raw::deserialize(d)? {
            Raw::Word(w) if w == "last" => Ok(At::Last),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "`{w}`: give \"last\" (the prompt's last position) or a 0-based position"
            ))),
            Raw::Index(i) => Ok(At::Position(i)),
        }
    }
}

/// A figure on record: a value judged within `value ± band` (cosine, pearson), or an argmax
/// that agreed or not (`agree`, with the ids on record where given).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    pub metric: Metric,
    /// The shard (0-based, of the observation's `shards`) whose columns it covers; absent:
    /// the whole logits.
    pub shard: Option<usize>,
    pub value: Option<f64>,
    pub band: Option<f64>,
    pub agree: Option<bool>,
    /// Argmax: the reference's and the chip's token ids on record.
    pub reference: Option<u32>,
    pub observed: Option<u32>,
    #[serde(default)]
    pub at: At,
}

crate::named_enum! {
    /// A cause the finding cleared: a hypothesis about the checkpoint's shape.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Cause {
        /// Degrades iff NREP = heads / kv_heads is not 1 or 2 (the team's hypothesis, finding
        /// 16's page at 44a1dbd1).
        GqaRatio = "gqa-ratio",
        /// Degrades iff deeper than every coherent checkpoint on record.
        Depth = "depth",
        /// Degrades iff its lm_head was split into shards.
        LmHeadSplit = "lm-head-split",
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cleared {
    pub cause: Cause,
    pub note: Option<String>,
}

impl Observation {
    pub fn scope(&self, d: &Defaults) -> Scope {
        self.scope.unwrap_or(d.scope)
    }

    pub fn recipe<'a>(&'a self, d: &'a Defaults) -> Option<&'a FaultSpec> {
        self.recipe.as_ref().or(d.recipe.as_ref())
    }

    /// The prompt it runs: its own ids, or the default stand-in prompt.
    pub fn prompt<'a>(&'a self, d: &'a Defaults) -> &'a [u32] {
        self.prompt.as_deref().unwrap_or(&d.prompt)
    }

    /// Greedy tokens it generates: as recorded (or the default), within the frame.
    pub fn tokens(&self, d: &Defaults) -> usize {
        let want = self.tokens.unwrap_or(d.tokens);
        match (self.scope(d), self.frame.or(d.frame)) {
            (Scope::Base, Some(f)) => want.min(f.saturating_sub(self.prompt(d).len())),
            _ => want,
        }
    }

    /// The lm_head's shard widths: as recorded, or split as the exporter splits `shard_count`.
    pub fn shard_widths(&self) -> Option<Vec<usize>> {
        self.shards.clone().or_else(|| {
            let (n, v) = (self.shard_count?, self.vocab?);
            (n > 1).then(|| {
                crate::hef::synth::shard_widths(v as u32, n as u32).into_iter().map(|w| w as usize).collect()
            })
        })
    }

    /// Whether the lm_head was split, where recorded.
    pub fn split(&self) -> Option<bool> {
        self.shards.as_ref().map(|s| s.len() > 1).or(self.shard_count.map(|n| n > 1))
    }

    /// `hidden 576, 30 layers, heads 9/3, vocab 49152, 2 shards, tied`: the shape as recorded.
    pub fn shape(&self) -> String {
        let n = |v: Option<usize>| v.map_or("?".to_string(), |v| v.to_string());
        let mut s = format!(
            "hidden {}, layers {}, heads {}/{}, vocab {}",
            self.hidden,
            n(self.layers),
            n(self.heads),
            n(self.kv_heads),
            n(self.vocab)
        );
        match (&self.shards, self.shard_count) {
            (Some(w), _) if w.len() > 1 => {
                s += &format!(", shards {}", w.iter().map(usize::to_string).collect::<Vec<_>>().join(" + "))
            }
            (_, Some(c)) if c > 1 => s += &format!(", {c} shards"),
            (Some(_), _) | (_, Some(_)) => s += ", lm_head whole",
            _ => {}
        }
        if self.tied == Some(true) {
            s += ", tied";
        }
        s
    }

    /// What it did, as recorded: `repeats (run 12 from step 4)`, with its figures.
    pub fn outcome_text(&self, d: &Defaults) -> String {
        let mut s = match self.outcome {
            Outcome::Coherent => "coherent".to_string(),
            Outcome::Repeats => format!(
                "repeats (a run of {} from step {})",
                self.run.unwrap_or(d.run),
                self.from.unwrap_or(0)
            ),
            Outcome::Incoherent => format!("incoherent (no run of {})", d.run),
            Outcome::Figures => String::new(),
        };
        for f in &self.figures {
            if !s.is_empty() {
                s += "; ";
            }
            s += &f.describe();
        }
        s
    }
}

impl Figure {
    /// `shard 0 cosine 0.842972 ± 0.05 at the last position`.
    pub fn describe(&self) -> String {
        let of = self.shard.map_or("logits".to_string(), |i| format!("shard {i}"));
        let at = match self.at {
            At::Last => String::new(),
            At::Position(p) => format!(" at position {p}"),
        };
        match self.metric {
            Metric::Argmax => {
                let ids = match (self.observed, self.reference) {
                    (Some(o), Some(r)) => format!(" ({o} vs {r})"),
                    _ => String::new(),
                };
                let agrees =
                    if self.agree == Some(true) { "= the reference's" } else { "≠ the reference's" };
                format!("{of} argmax {agrees}{ids}{at}")
            }
            m => format!(
                "{of} {} {} ± {}{at}",
                if m == Metric::Cosine { "cosine" } else { "pearson" },
                self.value.unwrap_or(f64::NAN),
                self.band.unwrap_or(f64::NAN)
            ),
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
                    "{}; a finding's record (version {PATTERN_VERSION}) holds version, finding, summary, [defaults], \
                     [[observation]] (with [[observation.figure]]) and [[cleared]] (probes/findings/16.toml is one)",
                    e.to_string().trim_end()
                ),
            )
        })?;
        p.check(&what)?;
        p.path = path.to_path_buf();
        Ok(p)
    }

    /// `[[observation]] 3 (D1)`, for messages.
    pub fn observation_name(&self, i: usize) -> String {
        format!("[[observation]] {} ({})", i + 1, self.observations[i].id)
    }

    fn check(&self, what: &str) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::input(format!("{what} key `{key}`"), msg));
        if self.version != PATTERN_VERSION {
            return bad(
                "version",
                format!("is {}: this hefprobe reads version {PATTERN_VERSION}", self.version),
            );
        }
        self.defaults.check(what)?;
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
            o.check(&format!("{what} {}", self.observation_name(i)), &self.defaults)?;
            if self.observations[..i].iter().any(|p| p.id == o.id) {
                return bad(
                    "observation.id",
                    format!("`{}` is given twice; give each observation its own", o.id),
                );
            }
        }
        for (i, c) in self.cleared.iter().enumerate() {
            if self.cleared[..i].iter().any(|p| p.cause == c.cause) {
                return bad(
                    "cleared.cause",
                    format!("`{}` is listed twice; list each cause once", c.cause.name()),
                );
            }
        }
        Ok(())
    }
}

impl Defaults {
    fn check(&self, what: &str) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::input(format!("{what} key `defaults.{key}`"), msg));
        if self.tokens == 0 || self.tokens > MAX_TOKENS {
            return bad("tokens", format!("is {}: give 1..={MAX_TOKENS} tokens", self.tokens));
        }
        if self.run < 2 || self.run > MAX_TOKENS {
            return bad("run", format!("is {}: a repetition is a run of 2..={MAX_TOKENS} copies", self.run));
        }
        if self.prompt.is_empty() || self.prompt.len() > MAX_PROMPT {
            return bad("prompt", format!("holds {} ids: give 1..={MAX_PROMPT}", self.prompt.len()));
        }
        if self.frame.is_some_and(|f| !(2..=MAX_TOKENS + MAX_PROMPT).contains(&f)) {
            return bad("frame", format!("is {:?}: give 2..={}", self.frame, MAX_TOKENS + MAX_PROMPT));
        }
        Ok(())
    }
}

impl Observation {
    fn check(&self, what: &str, d: &Defaults) -> Result<()> {
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
        range("tokens", self.tokens, MAX_TOKENS)?;
        range("shard_count", self.shard_count, 64)?;
        range("frame", self.frame, MAX_TOKENS + MAX_PROMPT)?;
        if self.id.is_empty() || self.source.is_empty() {
            return bad(
                "id",
                "give the observation's name on record and its `source` (page and commit)".into(),
            );
        }
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
        if let Some(w) = &self.shards {
            if w.is_empty() || w.len() > 64 || w.contains(&0) {
                return bad("shards", format!("{w:?}: give each shard's width, 1..=64 shards"));
            }
            let Some(total) = crate::backend::spec::shards_total(w) else {
                return bad("shards", format!("{w:?}: the widths add up past any vocabulary"));
            };
            if self.vocab.is_some_and(|v| v != total) {
                return bad(
                    "shards",
                    format!("add up to {total}, not the vocab ({:?}): they must tile it", self.vocab),
                );
            }
            if self.shard_count.is_some() {
                return bad("shard_count", "give the widths (`shards`) or only their count, not both".into());
            }
        }
        let prompt = self.prompt(d);
        if prompt.is_empty() || prompt.len() > MAX_PROMPT {
            return bad("prompt", format!("holds {} ids: give 1..={MAX_PROMPT}", prompt.len()));
        }
        if let Some(v) = self.vocab {
            if let Some(&id) = prompt.iter().find(|&&t| t as usize >= v) {
                return bad("prompt", format!("holds id {id}, past the vocab of {v}"));
            }
        }
        self.check_outcome(what, d)
    }

    fn check_outcome(&self, what: &str, d: &Defaults) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::input(format!("{what} key `{key}`"), msg));
        let generated = self.tokens(d);
        if self.scope(d) == Scope::Base && self.outcome != Outcome::Figures && generated == 0 {
            return bad(
                "prompt",
                format!(
                    "fills the base-scope frame{}: nothing is left to generate",
                    self.frame.or(d.frame).map_or_else(String::new, |f| format!(" of {f} positions"))
                ),
            );
        }
        match self.outcome {
            Outcome::Repeats => {
                let run = self.run.unwrap_or(d.run);
                if run < 2 || run + self.from.unwrap_or(0) > generated {
                    return bad(
                        "run",
                        format!(
                            "a run of {run} from step {} does not fit the {generated} tokens generated (2 ≤ run, \
                             from + run ≤ tokens)",
                            self.from.unwrap_or(0)
                        ),
                    );
                }
            }
            _ if self.run.is_some() || self.from.is_some() => {
                return bad("run", "`run` and `from` belong to a `repeats` outcome".into())
            }
            Outcome::Figures if self.figures.is_empty() => {
                return bad("figure", "a `figures` outcome needs at least one [[observation.figure]]".into())
            }
            _ => {}
        }
        for (k, f) in self.figures.iter().enumerate() {
            f.check(&format!("{what} [[observation.figure]] {}", k + 1), self)?;
        }
        Ok(())
    }
}

impl Figure {
    fn check(&self, what: &str, o: &Observation) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::input(format!("{what} key `{key}`"), msg));
        match self.metric {
            Metric::Argmax if self.agree.is_none() || self.value.is_some() || self.band.is_some() => {
                return bad(
                    "agree",
                    "an argmax figure says whether it `agree`s (and no value or band)".into(),
                )
            }
            Metric::Cosine | Metric::Pearson => {
                let (Some(v), Some(b)) = (self.value, self.band) else {
                    return bad(
                        "value",
                        "a cosine or pearson figure gives its `value` and the `band` it is judged in".into(),
                    );
                };
                if !(-1.0..=1.0).contains(&v) || !(0.0..=2.0).contains(&b) || b <= 0.0 {
                    return bad(
                        "band",
                        format!("value {v} ± {b}: give a value in [-1, 1] and a band in (0, 2]"),
                    );
                }
                if self.agree.is_some() {
                    return bad("agree", "belongs to an argmax figure".into());
                }
            }
            Metric::Argmax => {}
        }
        if let Some(s) = self.shard {
            let n = o.shard_widths().map_or(0, |w| w.len());
            if s >= n {
                return bad("shard", format!("is {s}: the observation records {n} shard widths"));
            }
        }
        if let At::Position(p) = self.at {
            if p >= o.prompt.as_ref().map_or(MAX_PROMPT, Vec::len) && o.prompt.is_some() {
                return bad("at", format!("position {p} is past the prompt on record"));
            }
        }
        Ok(())
    }
}
