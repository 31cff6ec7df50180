//! Tap names, phases and selection globs: naming only. The sinks that receive tapped tensors
//! live with the data they fill, in `capture.rs`.
//!
//! A tap is a named intermediate tensor of the decoder (docs/ARCHITECTURE.md, "Canonical taps").
//! Captures key them `PHASE/TAP`, e.g. `prefill/layers.3.attn.probs` or `decode.0/logits`.

use crate::error::{Error, Result};
use std::fmt;

/// One phase of a run: a whole prefill, chunk C of a chunked prefill, or decode step K.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Prefill,
    PrefillChunk(usize),
    Decode(usize),
}

impl Phase {
    pub fn is_decode(self) -> bool {
        matches!(self, Phase::Decode(_))
    }

    pub fn parse(s: &str) -> Option<Phase> {
        if s == "prefill" {
            return Some(Phase::Prefill);
        }
        if let Some(c) = s.strip_prefix("prefill.") {
            return c.parse().ok().map(Phase::PrefillChunk);
        }
        s.strip_prefix("decode.")?.parse().ok().map(Phase::Decode)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::Prefill => write!(f, "prefill"),
            Phase::PrefillChunk(c) => write!(f, "prefill.{c}"),
            Phase::Decode(k) => write!(f, "decode.{k}"),
        }
    }
}

/// Phases, taps and keys serialize as they display (`prefill/logits`).
macro_rules! serialize_as_display {
    ($($t:ty),+) => {$(
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    )+};
}

serialize_as_display!(Phase, Tap, TapName, Key);

crate::named_enum! {
    /// Per-layer tap kinds, in execution order within a layer (`ALL`: edit sites included),
    /// each named by its suffix (`layers.I.SUFFIX`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum LayerTap {
        /// Input of the block (the residual stream entering it). An edit site for overrides and
        /// quantization, not a capture tap: it equals the previous block's `out`.
        Input = "input",
        AttnNorm = "attn_norm",
        Q = "attn.q",
        K = "attn.k",
        V = "attn.v",
        Scores = "attn.scores",
        Probs = "attn.probs",
        AttnOut = "attn.out",
        MlpNorm = "mlp_norm",
        /// silu(gate) * up, the MLP intermediate. An edit site (quantization), not a capture tap.
        MlpAct = "mlp.act",
        MlpOut = "mlp.out",
        Out = "out",
    }
}

impl LayerTap {
    /// The taps a capture holds: every one but the edit sites (`input`, `mlp.act`).
    pub fn is_captured(self) -> bool {
        !matches!(self, LayerTap::Input | LayerTap::MlpAct)
    }
}

/// A canonical tap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tap {
    Embed,
    Layer(usize, LayerTap),
    FinalNorm,
    Logits,
}

impl Tap {
    pub fn parse(s: &str) -> Option<Tap> {
        match s {
            "embed" => Some(Tap::Embed),
            "final_norm" => Some(Tap::FinalNorm),
            "logits" => Some(Tap::Logits),
            _ => {
                let rest = s.strip_prefix("layers.")?;
                let (idx, suffix) = rest.split_once('.')?;
                Some(Tap::Layer(idx.parse().ok()?, LayerTap::from_name(suffix)?))
            }
        }
    }

    /// Whether a HEF can output this tap (an exposed output): a block's captured taps and the
    /// final norm. The embeddings are the host's (genai looks them up), the logits are the logits.
    pub fn exposable(self) -> bool {
        self.is_captured() && !matches!(self, Tap::Embed | Tap::Logits)
    }

    /// The tap a HEF output is by the naming convention `<group>/<tap>` (the name after its last
    /// `/`; docs/HAILO-RUNTIME.md, "Exposed outputs"), when it is one a HEF can output.
    pub fn of_output(name: &str) -> Option<Tap> {
        Tap::parse(name.rsplit('/').next()?).filter(|&t| t.exposable())
    }

    /// Whether captures hold this tap (layer edit sites are not captured).
    pub fn is_captured(self) -> bool {
        match self {
            Tap::Layer(_, t) => t.is_captured(),
            _ => true,
        }
    }

    pub fn layer(self) -> Option<usize> {
        match self {
            Tap::Layer(l, _) => Some(l),
            _ => None,
        }
    }

    /// Attention taps are [H, T, S] or [KV, T, D]: metrics are also split per head.
    pub fn is_per_head(self) -> bool {
        matches!(
            self,
            Tap::Layer(_, LayerTap::Q | LayerTap::K | LayerTap::V | LayerTap::Scores | LayerTap::Probs)
        )
    }

    /// Hidden-state and logits taps are [T, F]: metrics are also split per position.
    pub fn is_per_position(self) -> bool {
        !self.is_per_head()
    }

    /// Every capture tap of a model with `layers` blocks, in execution order.
    pub fn all(layers: usize) -> Vec<Tap> {
        let mut v = vec![Tap::Embed];
        for l in 0..layers {
            v.extend(LayerTap::ALL.into_iter().filter(|t| t.is_captured()).map(|t| Tap::Layer(l, t)));
        }
        v.push(Tap::FinalNorm);
        v.push(Tap::Logits);
        v
    }
}

impl fmt::Display for Tap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tap::Embed => write!(f, "embed"),
            Tap::Layer(l, t) => write!(f, "layers.{l}.{}", t.name()),
            Tap::FinalNorm => write!(f, "final_norm"),
            Tap::Logits => write!(f, "logits"),
        }
    }
}

/// What a capture calls a tap: a canonical tap, or a name hefprobe does not know (a dump's
/// own, kept as written). Canonical taps sort in execution order, before any other name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TapName {
    Canonical(Tap),
    Other(String),
}

impl TapName {
    /// Canonical only when the name is spelled as hefprobe spells it (`layers.01.out` is
    /// another name), so that a key read from a file is written back unchanged.
    pub fn parse(s: &str) -> TapName {
        match Tap::parse(s).filter(|t| t.to_string() == s) {
            Some(t) => TapName::Canonical(t),
            None => TapName::Other(s.to_string()),
        }
    }

    pub fn canonical(&self) -> Option<Tap> {
        match self {
            TapName::Canonical(t) => Some(*t),
            TapName::Other(_) => None,
        }
    }

    pub fn is(&self, tap: Tap) -> bool {
        self.canonical() == Some(tap)
    }

    pub fn layer(&self) -> Option<usize> {
        self.canonical().and_then(Tap::layer)
    }
}

impl From<&str> for TapName {
    fn from(s: &str) -> TapName {
        TapName::parse(s)
    }
}

impl From<Tap> for TapName {
    fn from(t: Tap) -> Self {
        TapName::Canonical(t)
    }
}

impl fmt::Display for TapName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TapName::Canonical(t) => t.fmt(f),
            TapName::Other(s) => f.write_str(s),
        }
    }
}

/// A capture key: `PHASE/TAP`, or (a recorded file's own naming) a name without a phase
/// hefprobe reads, kept whole. Keys order as a run executes: phases in run order (prefill,
/// prefill chunks, decode steps), taps in execution order within a phase; names without a
/// known phase come last, by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    Tap(Phase, TapName),
    Other(String),
}

impl Key {
    pub fn new(phase: Phase, tap: impl Into<TapName>) -> Key {
        Key::Tap(phase, tap.into())
    }

    /// A key as an `.npz` or a map spells it.
    pub fn parse(s: &str) -> Key {
        let phase = |p: &str| Phase::parse(p).filter(|ph| ph.to_string() == p);
        match s.split_once('/').and_then(|(p, t)| Some((phase(p)?, t))) {
            Some((phase, tap)) => Key::Tap(phase, TapName::parse(tap)),
            None => Key::Other(s.to_string()),
        }
    }

    pub fn phase(&self) -> Option<Phase> {
        match self {
            Key::Tap(p, _) => Some(*p),
            Key::Other(_) => None,
        }
    }

    pub fn tap(&self) -> Option<&TapName> {
        match self {
            Key::Tap(_, t) => Some(t),
            Key::Other(_) => None,
        }
    }

    /// The canonical tap of a `PHASE/TAP` key.
    pub fn canonical(&self) -> Option<(Phase, Tap)> {
        match self {
            Key::Tap(p, TapName::Canonical(t)) => Some((*p, *t)),
            _ => None,
        }
    }

    /// The tap part a selection glob is matched against: the tap of `PHASE/TAP`, else the
    /// part after the first `/`, else the whole name.
    pub fn tap_text(&self) -> String {
        match self {
            Key::Tap(_, t) => t.to_string(),
            Key::Other(s) => s.split_once('/').map_or(s.as_str(), |(_, t)| t).to_string(),
        }
    }

    /// The order of a name without a known phase: after every `PHASE/TAP` key; with a `/`,
    /// by its canonical tap part if any, then by name; without one, last.
    fn other_rank(s: &str) -> (u8, u8, Option<Tap>) {
        match s.split_once('/') {
            Some((_, t)) => {
                let tap = Tap::parse(t);
                (1, u8::from(tap.is_none()), tap)
            }
            None => (2, 1, None),
        }
    }
}

/// A key as written (`"prefill/logits"`), for callers that read names from text.
impl From<&str> for Key {
    fn from(s: &str) -> Key {
        Key::parse(s)
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (Key::Tap(p, t), Key::Tap(q, u)) => (p, t).cmp(&(q, u)),
            (Key::Tap(..), Key::Other(_)) => std::cmp::Ordering::Less,
            (Key::Other(_), Key::Tap(..)) => std::cmp::Ordering::Greater,
            (Key::Other(a), Key::Other(b)) => (Key::other_rank(a), a).cmp(&(Key::other_rank(b), b)),
        }
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Tap(p, t) => write!(f, "{p}/{t}"),
            Key::Other(s) => f.write_str(s),
        }
    }
}

/// How a tap lays out one frame in a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `[T, F]`.
    Rows,
    /// `[H, T, D]` for H heads.
    Heads(usize),
    /// `[H, T, S]`: attention scores and probabilities over S key slots.
    Keys(usize),
}

impl Layout {
    pub fn of(tap: Tap, heads: usize, kv_heads: usize) -> Layout {
        match tap {
            Tap::Layer(_, LayerTap::Q) => Layout::Heads(heads),
            Tap::Layer(_, LayerTap::K | LayerTap::V) => Layout::Heads(kv_heads),
            Tap::Layer(_, LayerTap::Scores | LayerTap::Probs) => Layout::Keys(heads),
            _ => Layout::Rows,
        }
    }

    /// The axis rows (positions) run along in the capture layout.
    pub fn row_axis(self) -> usize {
        match self {
            Layout::Rows => 0,
            Layout::Heads(_) | Layout::Keys(_) => 1,
        }
    }

    /// Values of one row on the wire for a tap whose per-head width is `inner` (D or S), or
    /// `hidden` for row taps.
    pub fn row_width(self, hidden: usize, inner: usize) -> usize {
        match self {
            Layout::Rows => hidden,
            Layout::Heads(h) | Layout::Keys(h) => h * inner,
        }
    }

    /// A frame's rows on the wire (`rows` × width) in the capture layout.
    pub fn from_rows(self, values: Vec<f32>, rows: usize, what: &str) -> Result<ndarray::ArrayD<f32>> {
        let width = values.len().checked_div(rows).unwrap_or(0);
        let bad = |why: String| Error::input(what, why);
        if rows == 0 || width * rows != values.len() {
            return Err(bad(format!("{} values are not {rows} whole rows", values.len())));
        }
        let a =
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[rows, width]), values).expect("checked size");
        match self {
            Layout::Rows => Ok(a),
            Layout::Heads(h) | Layout::Keys(h) => {
                if h == 0 || !width.is_multiple_of(h) {
                    return Err(bad(format!("rows of {width} values do not split over {h} heads")));
                }
                let a = a.into_shape_with_order(ndarray::IxDyn(&[rows, h, width / h])).expect("checked size");
                Ok(a.permuted_axes(ndarray::IxDyn(&[1, 0, 2])).as_standard_layout().into_owned())
            }
        }
    }

    /// The capture layout of one frame back to wire rows: what a device computing `tap` sends.
    pub fn to_rows(self, a: &ndarray::ArrayD<f32>) -> Vec<Vec<f32>> {
        let a = match self {
            Layout::Rows => a.view(),
            Layout::Heads(_) | Layout::Keys(_) => a.view().permuted_axes(ndarray::IxDyn(&[1, 0, 2])),
        };
        a.outer_iter().map(|row| row.iter().copied().collect()).collect()
    }
}

/// A glob over tap names, the one meaning every tap pattern has (`--taps`, a probe's `taps`,
/// `--expose`, `[thresholds.taps]`, `--threshold GLOB:...`): names are dotted segments, and `*`,
/// `?` and `[...]` match within one segment, so `layers.*.out` is each layer's output and never
/// its `attn.out`; a `*` that is the whole last segment takes every segment after it, so `*` is
/// every tap, `layers.*` every layer's and `layers.3.*` layer 3's.
#[derive(Debug, Clone)]
pub struct TapGlob {
    text: String,
    segments: Vec<glob::Pattern>,
    /// The last segment is a lone `*`: one or more segments.
    rest: bool,
}

impl TapGlob {
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let mut parts: Vec<&str> = text.split('.').collect();
        let rest = parts.last() == Some(&"*");
        if rest {
            parts.pop();
        }
        let segments = parts
            .iter()
            .map(|p| glob::Pattern::new(p).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        Ok(TapGlob { text: text.to_string(), segments, rest })
    }

    pub fn matches(&self, name: &str) -> bool {
        let names: Vec<&str> = name.split('.').collect();
        let n = self.segments.len();
        let count = if self.rest { names.len() > n } else { names.len() == n };
        count && self.segments.iter().zip(&names).all(|(p, s)| p.matches(s))
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Which taps to record: tap globs ([`TapGlob`]: `layers.*.attn.probs`, `logits`).
#[derive(Debug, Clone)]
pub struct TapSelection {
    patterns: Vec<TapGlob>,
    source: Vec<String>,
}

impl TapSelection {
    pub fn all() -> Self {
        Self::parse(&["*".to_string()]).expect("`*` is a valid glob")
    }

    pub fn none() -> Self {
        TapSelection { patterns: Vec::new(), source: Vec::new() }
    }

    pub fn parse(globs: &[String]) -> Result<Self> {
        let invalid = |part: &str, e| Error::usage(format!("tap glob `{part}` is not a valid pattern: {e}"));
        let patterns = globs
            .iter()
            .flat_map(|g| g.split(',').map(str::trim).filter(|p| !p.is_empty()))
            .map(|part| TapGlob::parse(part).map_err(|e| invalid(part, e)))
            .collect::<Result<_>>()?;
        Ok(TapSelection { patterns, source: globs.to_vec() })
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Each glob, parsed, in the order given.
    pub fn patterns(&self) -> &[TapGlob] {
        &self.patterns
    }

    pub fn matches(&self, tap: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(tap))
    }

    /// Whether the key's tap part is selected (a key is matched by its tap, whatever its phase).
    pub fn selects(&self, key: &Key) -> bool {
        self.matches(&key.tap_text())
    }

    pub fn globs(&self) -> &[String] {
        &self.source
    }

    /// Check every glob selects at least one tap of a model with `layers` blocks, so a
    /// typo (`layer.0.*`) is an error instead of an empty capture.
    pub fn check_against(&self, layers: usize) -> Result<()> {
        let names = tap_names(layers);
        for p in &self.patterns {
            if !names.iter().any(|n| p.matches(n)) {
                return Err(Error::usage(format!(
                    "tap glob `{}` selects no tap of this {layers}-layer model{}; taps look like \
                     embed, layers.0.attn.probs, layers.1.out, final_norm, logits",
                    p.as_str(),
                    did_you_mean(p.as_str(), layers)
                )));
            }
        }
        Ok(())
    }
}

/// Every capture tap name of a model with `layers` blocks.
pub fn tap_names(layers: usize) -> Vec<String> {
    Tap::all(layers).iter().map(Tap::to_string).collect()
}

/// " (did you mean `layers.*.attn.probs`?)" for a glob that selects nothing, or "": the
/// closest tap name or per-layer glob by edit distance.
pub fn did_you_mean(glob: &str, layers: usize) -> String {
    let mut candidates = tap_names(layers.min(32));
    candidates
        .extend(LayerTap::ALL.iter().filter(|t| t.is_captured()).map(|t| format!("layers.*.{}", t.name())));
    candidates.extend((0..layers.min(32)).map(|l| format!("layers.{l}.*")));
    candidates.push("layers.*".into());
    suggest(glob, candidates.iter().map(String::as_str))
}

/// " (did you mean `c`?)" naming the candidate closest to `word`, or "" when none is close.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, candidates).map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default()
}

/// The closest candidate by edit distance, for "did you mean" hints (finding 5 was a
/// misspelled key that nobody noticed).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::levenshtein(word, c), c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_finds_the_finding_5_misspelling() {
        let keys = ["prefill_input_tokens_count", "kv_cache_size", "num_attention_heads"];
        assert_eq!(closest("prefill_input_tokens_size", keys), Some("prefill_input_tokens_count"));
        assert_eq!(closest("completely_else", keys), None);
    }

    #[test]
    fn names_round_trip() {
        for tap in Tap::all(3) {
            assert_eq!(Tap::parse(&tap.to_string()), Some(tap));
        }
        for p in [Phase::Prefill, Phase::PrefillChunk(2), Phase::Decode(11)] {
            assert_eq!(Phase::parse(&p.to_string()), Some(p));
        }
        assert_eq!(Tap::parse("layers.x.out"), None);
    }

    #[test]
    fn keys_sort_in_execution_order() {
        let mut keys: Vec<Key> = [
            "decode.0/logits",
            "prefill/logits",
            "decode.10/embed",
            "decode.2/embed",
            "prefill/layers.10.out",
            "prefill/layers.2.attn.q",
            "prefill/layers.2.attn_norm",
            "prefill/embed",
            "prefill/custom",
            "noslash",
            "x/logits",
            "x/custom",
        ]
        .map(Key::parse)
        .to_vec();
        keys.sort();
        assert_eq!(
            keys.iter().map(Key::to_string).collect::<Vec<_>>(),
            vec![
                "prefill/embed",
                "prefill/layers.2.attn_norm",
                "prefill/layers.2.attn.q",
                "prefill/layers.10.out",
                "prefill/logits",
                "prefill/custom",
                "decode.0/logits",
                "decode.2/embed",
                "decode.10/embed",
                "x/logits",
                "x/custom",
                "noslash",
            ]
        );
    }

    #[test]
    fn a_star_between_dots_is_one_segment_and_a_last_star_the_rest() {
        let g = |s: &str| TapGlob::parse(s).unwrap();
        let outs: Vec<String> = tap_names(6).into_iter().filter(|n| g("layers.*.out").matches(n)).collect();
        assert_eq!(outs, (0..6).map(|l| format!("layers.{l}.out")).collect::<Vec<_>>());
        assert!(tap_names(6).iter().all(|n| g("*").matches(n)), "`*` is every tap");
        let layers = tap_names(6).into_iter().filter(|n| g("layers.*").matches(n)).count();
        assert_eq!(layers, tap_names(6).len() - 3, "`layers.*` is every tap but embed, final_norm, logits");
        assert!(g("layers.3.*").matches("layers.3.attn.probs") && !g("layers.3.*").matches("layers.30.out"));
        assert!(g("layers.1?.out").matches("layers.12.out") && !g("layers.1?.out").matches("layers.1.out"));
        assert!(!g("layers.*").matches("layers"), "a last `*` takes at least one segment");
    }

    #[test]
    fn selection_globs_and_typos() {
        let s = TapSelection::parse(&["layers.*.attn.probs,logits".into()]).unwrap();
        assert!(s.matches("layers.12.attn.probs"));
        assert!(s.matches("logits"));
        assert!(!s.matches("layers.1.attn.scores"));
        let typo = TapSelection::parse(&["layer.0.*".into()]).unwrap();
        let e = typo.check_against(2).unwrap_err().to_string();
        assert!(e.contains("layer.0.*"), "{e}");
        assert!(e.contains("did you mean `layers.0.*`"), "{e}");
        assert_eq!(did_you_mean("layers.*.attn.prob", 6), " (did you mean `layers.*.attn.probs`?)");
    }
}
