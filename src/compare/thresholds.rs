//! Thresholds: bounds per metric, per tap glob, with a default. By default the most specific
//! glob that bounds a metric wins; a probe may ask for the tightest matching bound instead.

pub use super::row::Dir;
use super::row::{LogitsSummary, ProbsSummary, TapRow};
use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

crate::named_enum! {
    /// The metrics a bound can name, each with its direction (`min` bounds pass when value ≥
    /// bound, `max` when ≤), what it is, the values a bound may take (checked when the bound is
    /// read, so `cosine=nan` or `flips=-1` is refused instead of silently passing or failing
    /// everything) and how it is read off a row: one row of [`SPECS`] each, so a metric
    /// without a value does not compile. Ordered by name, as bounds are listed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Metric {
        Cosine = "cosine",
        CosineNoOutliers = "cosine_no_outliers",
        Sqnr = "sqnr",
        MaxAbs = "max_abs",
        MeanAbs = "mean_abs",
        P99Abs = "p99_abs",
        RelMax = "rel_max",
        RelMedian = "rel_median",
        Close = "close",
        Nonfinite = "nonfinite",
        Argmax = "argmax",
        Topk = "topk",
        KlMean = "kl_mean",
        KlMax = "kl_max",
        KlP99 = "kl_p99",
        Flips = "flips",
        ProbSumErr = "prob_sum_err",
        MaskLeak = "mask_leak",
        ShardCosine = "shard_cosine",
        ShardScaleErr = "shard_scale_err",
        ShardArgmax = "shard_argmax",
        Agreement = "agreement",
        ForcedAgreement = "forced_agreement",
        SameTop1 = "same_top1",
        Kld = "kld",
        TokenGap = "token_gap",
        RepeatRun = "repeat_run",
    }
}

/// A metric's value on a row (None: the row has no figure for it).
type Value = fn(&TapRow) -> Option<f64>;

/// What a metric is: its direction, its description, the bounds it admits, its value on a row.
type Spec = (Metric, Dir, &'static str, Range, Value);

/// Each metric's [`Spec`], one row per metric in declaration order (checked when compiling).
const SPECS: [Spec; Metric::ALL.len()] = {
    use Dir::{Max, Min};
    use Metric::*;
    [
        (Cosine, Min, "cosine similarity", Range::Cosine, |r| r.metrics.as_ref()?.cosine_opt()),
        (CosineNoOutliers, Min, "cosine without the 4 largest reference channels", Range::Cosine, |r| {
            r.metrics.as_ref().and(r.cosine_no_outliers)
        }),
        (Sqnr, Min, "SQNR in dB", Range::Finite, |r| r.metrics.as_ref()?.sqnr_opt()),
        (MaxAbs, Max, "max |r - x|", Range::NonNegative, |r| Some(r.metrics.as_ref()?.max_abs)),
        (MeanAbs, Max, "mean |r - x|", Range::NonNegative, |r| Some(r.metrics.as_ref()?.mean_abs)),
        (P99Abs, Max, "99th percentile of |r - x|", Range::NonNegative, |r| {
            Some(r.metrics.as_ref()?.p99_abs)
        }),
        (RelMax, Max, "max relative error", Range::NonNegative, |r| Some(r.metrics.as_ref()?.rel_max)),
        (RelMedian, Max, "median relative error", Range::NonNegative, |r| {
            Some(r.metrics.as_ref()?.rel_median)
        }),
        (Close, Min, "share of elements within numpy.isclose tolerances", Range::Share, |r| {
            Some(r.metrics.as_ref()?.close_frac)
        }),
        (Nonfinite, Max, "NaN or one-sided inf entries", Range::Count, |r| {
            Some(r.metrics.as_ref()?.nonfinite() as f64)
        }),
        (Argmax, Min, "share of positions with the reference's argmax (logits)", Range::Share, |r| {
            Some(logits(r)?.argmax_agreement)
        }),
        (Topk, Min, "mean top-5 overlap (logits)", Range::Share, |r| Some(logits(r)?.topk_overlap)),
        (KlMean, Max, "mean KL divergence in nats (logits)", Range::NonNegative, |r| {
            Some(logits(r)?.kl_mean)
        }),
        (KlMax, Max, "max KL divergence (logits)", Range::NonNegative, |r| Some(logits(r)?.kl_max)),
        (KlP99, Max, "99th percentile KL (logits)", Range::NonNegative, |r| Some(logits(r)?.kl_p99)),
        (
            Flips,
            Max,
            "argmax flips where the reference top-1 margin exceeds flip_margin (logits)",
            Range::Count,
            |r| Some(logits(r)?.flips_above_margin as f64),
        ),
        (
            ProbSumErr,
            Max,
            "max |sum over keys - 1| of a head's probs (attn.probs)",
            Range::NonNegative,
            |r| Some(probs(r)?.sum_err_max),
        ),
        (
            MaskLeak,
            Max,
            "probability mass entries > 1e-6 where the reference masks (attn.probs)",
            Range::Count,
            |r| Some(probs(r)?.mask_leak as f64),
        ),
        (ShardCosine, Min, "cosine of the worst lm_head shard (sharded logits)", Range::Cosine, |r| {
            logits(r)?.shards.iter().map(|s| s.cosine).reduce(f64::min)
        }),
        (
            ShardScaleErr,
            Max,
            "largest |‖x‖/‖r‖ − 1| of an lm_head shard: a shard's scale, to which its cosine is blind",
            Range::NonNegative,
            |r| logits(r)?.shards.iter().map(|s| s.scale_err()).reduce(f64::max),
        ),
        (
            ShardArgmax,
            Min,
            "argmax agreement within the worst lm_head shard (sharded logits)",
            Range::Share,
            |r| logits(r)?.shards.iter().map(|s| s.argmax_agreement).reduce(f64::min),
        ),
        // A served model's figures, which compare::tokens reads (bounds on `tokens`): no tap row has them.
        (
            Agreement,
            Min,
            "share of the greedy continuation agreeing before it parts (tokens)",
            Range::Share,
            |_| None,
        ),
        (
            ForcedAgreement,
            Min,
            "share of one-token continuations of the reference's prefixes agreeing (tokens)",
            Range::Share,
            |_| None,
        ),
        (
            SameTop1,
            Min,
            "share of positions with the reference's top-1, from server logprobs (tokens)",
            Range::Share,
            |_| None,
        ),
        (
            Kld,
            Max,
            "mean KL(reference ‖ server) from server logprobs, in nats (tokens)",
            Range::NonNegative,
            |_| None,
        ),
        (
            TokenGap,
            Max,
            "the reference's top-1 logit minus that of the most confident token the server lost (tokens)",
            Range::NonNegative,
            |_| None,
        ),
        (
            RepeatRun,
            Max,
            "longest run of one repeated token the server generated (tokens)",
            Range::Count,
            |_| None,
        ),
    ]
};

// A row out of place does not compile (a missing one does not either: SPECS has one per metric).
const _: () = {
    let mut i = 0;
    while i < SPECS.len() {
        assert!(SPECS[i].0 as usize == i, "SPECS lists the metrics in declaration order");
        i += 1;
    }
};

impl Metric {
    fn spec(self) -> &'static Spec {
        &SPECS[self as usize]
    }

    pub fn dir(self) -> Dir {
        self.spec().1
    }

    /// What it measures, in a few words.
    pub fn about(self) -> &'static str {
        self.spec().2
    }

    /// Its value on a compared row, when the row has it (logits figures on the logits tap,
    /// probability figures on attention probs).
    pub fn value(self, row: &TapRow) -> Option<f64> {
        (self.spec().4)(row)
    }

    /// The metric named `name`, or a refusal listing them (with the nearest name).
    pub fn parse(name: &str) -> Result<Metric> {
        Metric::from_name(name).ok_or_else(|| {
            let names = Metric::ALL.map(Metric::name);
            let hint = crate::tap::suggest(name, names.iter().copied());
            Error::usage(format!("unknown metric `{name}`{hint}; metrics: {}", names.join(", ")))
        })
    }
}

/// The pseudo-tap a served model's token bounds are written for (`--threshold
/// tokens:agreement=0.5`; [`crate::compare::tokens`]).
pub const TOKENS: &str = "tokens";

/// The default `token_gap` bound, in logits (nats): a served token the reference gives at
/// least 1/e of its top-1's probability is a near-tie.
pub const DEFAULT_TOKEN_GAP: f64 = 1.0;

/// A compared row's logits figures (the logits tap only).
fn logits(r: &TapRow) -> Option<&LogitsSummary> {
    r.metrics.as_ref().and(r.logits.as_ref())
}

/// A compared row's attention-probability figures (the probs taps only).
fn probs(r: &TapRow) -> Option<&ProbsSummary> {
    r.metrics.as_ref().and(r.probs.as_ref())
}

impl Ord for Metric {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name().cmp(other.name())
    }
}

impl PartialOrd for Metric {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The values a bound on a metric may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// −1 ≤ v ≤ 1.
    Cosine,
    /// A share: 0 ≤ v ≤ 1.
    Share,
    /// 0 ≤ v, finite.
    NonNegative,
    /// A count: a whole number ≥ 0.
    Count,
    /// Any finite number (dB).
    Finite,
}

impl Range {
    fn admits(self, v: f64) -> bool {
        v.is_finite()
            && match self {
                Range::Cosine => (-1.0..=1.0).contains(&v),
                Range::Share => (0.0..=1.0).contains(&v),
                Range::NonNegative => v >= 0.0,
                Range::Count => v >= 0.0 && v.fract() == 0.0,
                Range::Finite => true,
            }
    }

    fn describe(self) -> &'static str {
        match self {
            Range::Cosine => "a number from -1 to 1",
            Range::Share => "a share from 0 to 1",
            Range::NonNegative => "a finite number ≥ 0",
            Range::Count => "a count: a whole number ≥ 0",
            Range::Finite => "a finite number",
        }
    }
}

/// How many times the spread between two draws of the expected quantization a candidate may
/// differ from the expected by before the excess counts. The expected emulation is one draw
/// of the quantization noise and the device another: the float order of a 96-row prefill
/// frame differs from that of T rows, and every int16 rounding of a block input amplifies the
/// difference (docs/METRICS.md, "Judging on the excess"). A second draw of the emulation,
/// jittered by float-order-sized steps, measures that amplification at every tap and phase;
/// the spread is one sample, so the candidate gets twice it.
pub const REALIZATION_SLACK: f64 = 2.0;

/// What a candidate adds to an expected value of `metric` (the same figure of its expected
/// quantization against the same reference), in the metric's own units so that its bound
/// applies unchanged. `spread` is the figure of a second draw of the expected against the
/// first; [`REALIZATION_SLACK`] times it is allowed on top of the expected. A cosine is
/// judged as an angle (angles add: the candidate's angle to the reference is at most the
/// expected's plus its own to the expected); a share (perfect 1) falls by what it loses beyond
/// the allowed loss; an error (perfect 0) is what it has beyond the allowed; an SQNR is that
/// of the noise power beyond the allowed.
pub fn excess(metric: Metric, value: f64, expected: f64, spread: Option<f64>) -> f64 {
    let k = REALIZATION_SLACK;
    match (metric, metric.dir()) {
        (Metric::Cosine | Metric::ShardCosine, _) => {
            (cosine_angle(value) - allowed_angle(expected, spread)).max(0.0).cos()
        }
        (Metric::Sqnr, _) => {
            let noise = |db: f64| 10f64.powf(-db / 10.0);
            let beyond = noise(value) - noise(expected) - k * spread.map_or(0.0, noise);
            if beyond > 0.0 {
                -10.0 * beyond.log10()
            } else {
                f64::INFINITY
            }
        }
        (_, Dir::Min) => {
            let loss = (1.0 - value) - (1.0 - expected) - k * spread.map_or(0.0, |s| 1.0 - s);
            1.0 - loss.max(0.0)
        }
        _ => (value - expected - k * spread.unwrap_or(0.0)).max(0.0),
    }
}

/// The angle of a cosine (clamped into [-1, 1]).
fn cosine_angle(c: f64) -> f64 {
    c.clamp(-1.0, 1.0).acos()
}

/// The angle a quantized candidate may lie from the reference without excess: the expected
/// quantization's own angle to it plus [`REALIZATION_SLACK`] times the angle between two draws
/// of that quantization (`spread`, a cosine).
pub fn allowed_angle(expected: f64, spread: Option<f64>) -> f64 {
    cosine_angle(expected) + REALIZATION_SLACK * spread.map_or(0.0, cosine_angle)
}

/// The metric a bound names, its value checked against the metric's range: the message says
/// the valid range.
pub fn check_bound(name: &str, value: f64) -> Result<Metric> {
    let metric = Metric::parse(name)?;
    let range = metric.spec().3;
    if range.admits(value) {
        Ok(metric)
    } else {
        Err(Error::usage(format!("{name} = {value}: a bound on {name} is {}", range.describe())))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    #[default]
    MostSpecific,
    Tightest,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rule {
    pub glob: String,
    #[serde(skip)]
    pattern: crate::tap::TapGlob,
    pub bounds: BTreeMap<Metric, f64>,
    /// Where the rule was written (`--threshold ...`, `[thresholds.taps]`), for messages;
    /// empty for the built-in rules, which are not checked against a model's taps.
    #[serde(skip)]
    pub origin: String,
}

impl Rule {
    pub fn new(glob: &str, bounds: &BTreeMap<String, f64>) -> Result<Self> {
        let bounds = bounds
            .iter()
            .map(|(name, &v)| Ok((check_bound(name, v)?, v)))
            .collect::<Result<_>>()
            .map_err(|e| Error::usage(format!("threshold glob `{glob}`: {e}")))?;
        let pattern = crate::tap::TapGlob::parse(glob)
            .map_err(|e| Error::usage(format!("threshold glob `{glob}` is not a valid pattern: {e}")))?;
        Ok(Rule { glob: glob.to_string(), pattern, bounds, origin: format!("threshold glob `{glob}`") })
    }

    /// Literal characters of the glob: more means more specific.
    fn specificity(&self) -> usize {
        self.glob.chars().filter(|c| !matches!(c, '*' | '?' | '[' | ']')).count()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Thresholds {
    pub default: BTreeMap<Metric, f64>,
    pub rules: Vec<Rule>,
    pub policy: Policy,
    /// Argmax flips count only where the reference's top-1 margin exceeds this.
    pub flip_margin: f64,
}

impl Default for Thresholds {
    /// cosine ≥ 0.999 everywhere, no NaN or one-sided inf, no served token lost where the
    /// reference's top-1 beats it by more than one nat, no argmax flip where the
    /// reference's top-1 margin exceeds 1e-3, and attention rows that sum to 1 within 0.05
    /// (cosine is blind to a head's probabilities all scaled by the same factor, which is
    /// what a softmax shared across heads does; 0.05 leaves room for 8-bit probs). Sharded
    /// logits: every lm_head shard's cosine ≥ 0.999 too, and its scale within 1 % (its cosine
    /// is blind to a shard dequantized with another's scale, finding 12; a 16-bit output moves
    /// a shard's norm by ~1e-4).
    fn default() -> Self {
        // A served model loses no token the reference's top-1 beats by more than one nat.
        let default = [
            (Metric::Cosine, 0.999),
            (Metric::Nonfinite, 0.0),
            (Metric::Flips, 0.0),
            (Metric::ShardCosine, 0.999),
            (Metric::ShardScaleErr, 0.01),
            (Metric::TokenGap, DEFAULT_TOKEN_GAP),
        ]
        .into();
        let mut probs = Rule::new("layers.*.attn.probs", &[("prob_sum_err".to_string(), 0.05)].into())
            .expect("valid rule");
        probs.origin.clear();
        Thresholds { default, rules: vec![probs], policy: Policy::MostSpecific, flip_margin: 1e-3 }
    }
}

/// A bound as a command line gives it, `METRIC=VALUE` or `GLOB:METRIC=VALUE`: checked when
/// read (`--threshold`, the Python module's `thresholds`), written back as it was given.
#[derive(Debug, Clone)]
pub struct Bound {
    text: String,
    metric: Metric,
    value: f64,
    /// The rule a glob makes of it (None: everywhere).
    glob: Option<Rule>,
}

impl PartialEq for Bound {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Bound {
    pub fn parse(spec: &str) -> Result<Bound> {
        let (glob, rest) = spec.rsplit_once(':').map_or((None, spec), |(g, r)| (Some(g), r));
        let (metric, value) = rest.split_once('=').ok_or_else(|| {
            Error::usage(format!("--threshold `{spec}`: expected METRIC=VALUE or GLOB:METRIC=VALUE"))
        })?;
        let value: f64 = value
            .trim()
            .parse()
            .map_err(|_| Error::usage(format!("--threshold `{spec}`: `{value}` is not a number")))?;
        let name = metric.trim();
        let metric =
            check_bound(name, value).map_err(|e| Error::usage(format!("--threshold `{spec}`: {e}")))?;
        let glob = glob
            .map(|g| {
                let mut rule = Rule::new(g, &[(name.to_string(), value)].into())?;
                rule.origin = format!("--threshold `{spec}`");
                Ok::<_, Error>(rule)
            })
            .transpose()?;
        Ok(Bound { text: spec.to_string(), metric, value, glob })
    }

    /// Each of `specs` read ([`Bound::parse`]), the first bad one refused.
    pub fn parse_all(specs: &[String]) -> Result<Vec<Bound>> {
        specs.iter().map(|s| Bound::parse(s)).collect()
    }
}

/// Bounds as text in a bundle's record: [`Bound::parse`] reads them back.
pub mod as_text {
    use crate::compare::thresholds::Bound;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bounds: &[Bound], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(bounds.iter().map(ToString::to_string))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Bound>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts.iter().map(|t| Bound::parse(t).map_err(serde::de::Error::custom)).collect()
    }
}

impl Thresholds {
    /// No bound at all (the same flip margin): figures shown beside a judged comparison, never
    /// judged themselves.
    pub fn unbounded(&self) -> Self {
        Thresholds { default: BTreeMap::new(), rules: Vec::new(), ..self.clone() }
    }

    /// These bounds without those on the candidate's own figures (a head's probabilities
    /// summing to 1): for a comparison with a reference that shares them (the device beside an
    /// emulator that computes the same fault), where only the difference is judged.
    pub fn relative(&self) -> Self {
        let own = |m: &Metric| *m == Metric::ProbSumErr;
        let mut t = self.clone();
        t.default.retain(|m, _| !own(m));
        for r in &mut t.rules {
            r.bounds.retain(|m, _| !own(m));
        }
        t
    }

    /// The bounds applying to `tap`: metric → bound (and the glob it came from).
    pub fn bounds_for(&self, tap: &str) -> BTreeMap<Metric, (f64, String)> {
        let mut out: BTreeMap<Metric, (f64, String, usize)> =
            self.default.iter().map(|(k, v)| (*k, (*v, "default".to_string(), 0))).collect();
        for rule in self.rules.iter().filter(|r| r.pattern.matches(tap)) {
            let spec = rule.specificity() + 1;
            for (metric, &bound) in &rule.bounds {
                let replace = match out.get(metric) {
                    None => true,
                    Some(&(old, _, old_spec)) => match self.policy {
                        Policy::MostSpecific => spec >= old_spec,
                        Policy::Tightest => match metric.dir() {
                            Dir::Min => bound > old,
                            Dir::Max => bound < old,
                        },
                    },
                };
                if replace {
                    out.insert(*metric, (bound, rule.glob.clone(), spec));
                }
            }
        }
        out.into_iter().map(|(k, (v, g, _))| (k, (v, g))).collect()
    }

    /// Add a bound a command line gave ([`Bound`]): everywhere, or as a rule for its glob.
    pub fn add(&mut self, b: &Bound) {
        match &b.glob {
            None => {
                self.default.insert(b.metric, b.value);
            }
            Some(rule) => self.rules.push(rule.clone()),
        }
    }

    /// Check that every rule written by the user matches at least one of `taps` (the model's
    /// tap names, or the taps two captures hold), so a misspelled glob is an error with a
    /// did-you-mean, as a misspelled tap selection is, instead of a bound silently never applied.
    /// `layers` sizes the suggestions.
    pub fn check_globs(&self, taps: &[String], layers: usize) -> Result<()> {
        for rule in self.rules.iter().filter(|r| !r.origin.is_empty()) {
            // `tokens`: a served model's token figures (compare::tokens), whatever the model.
            if !taps.iter().any(|t| rule.pattern.matches(t)) && !rule.pattern.matches(TOKENS) {
                return Err(Error::usage(format!(
                    "{}: glob `{}` matches no tap{}; taps look like embed, layers.0.attn.probs, \
                     layers.*.out, final_norm, logits (and a served model's `tokens`)",
                    rule.origin,
                    rule.glob,
                    crate::tap::did_you_mean(&rule.glob, layers)
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Thresholds {
        /// [`Bound::parse`], then [`Thresholds::add`] (the tests' shorthand).
        pub(crate) fn add_cli(&mut self, spec: &str) -> Result<()> {
            self.add(&Bound::parse(spec)?);
            Ok(())
        }
    }

    #[test]
    fn a_metric_serializes_as_its_name() {
        for m in Metric::ALL {
            assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{}\"", m.name()));
            let keyed = BTreeMap::from([(m, 1.0)]);
            assert_eq!(serde_json::to_string(&keyed).unwrap(), format!("{{\"{}\":1.0}}", m.name()));
        }
    }

    fn rule(g: &str, m: &str, v: f64) -> Rule {
        Rule::new(g, &[(m.to_string(), v)].into()).unwrap()
    }

    #[test]
    fn the_excess_allows_the_expected_noise_and_twice_the_spread_of_two_draws() {
        let cos = |a: f64| a.cos();
        // Angles add: expected 0.1 rad off, two draws 0.05 apart: up to 0.2 rad is no excess.
        assert_eq!(excess(Metric::Cosine, cos(0.2), cos(0.1), Some(cos(0.05))), 1.0);
        // 0.3 rad is 0.1 beyond it.
        assert!((excess(Metric::Cosine, cos(0.3), cos(0.1), Some(cos(0.05))) - cos(0.1)).abs() < 1e-12);
        // Without a spread, only the expected's own angle is allowed.
        assert!((excess(Metric::Cosine, cos(0.3), cos(0.1), None) - cos(0.2)).abs() < 1e-12);
        // A share loses what it loses beyond the expected's loss plus twice the spread's.
        assert!((excess(Metric::Argmax, 0.5, 0.9, Some(0.95)) - 0.7).abs() < 1e-12);
        // An error has what it has beyond the expected plus twice the spread.
        assert!((excess(Metric::MaxAbs, 1.0, 0.3, Some(0.1)) - 0.5).abs() < 1e-12);
        assert_eq!(excess(Metric::Flips, 1.0, 0.0, Some(1.0)), 0.0);
        // An SQNR is that of the noise power beyond: 20 dB expected, 30 dB spread, 10 dB seen.
        let n = |db: f64| 10f64.powf(-db / 10.0);
        let want = -10.0 * (n(10.0) - n(20.0) - 2.0 * n(30.0)).log10();
        assert!((excess(Metric::Sqnr, 10.0, 20.0, Some(30.0)) - want).abs() < 1e-9);
        assert_eq!(excess(Metric::Sqnr, 25.0, 20.0, None), f64::INFINITY);
    }

    /// Every metric with its value: the figure of a compared row it is. A new metric is listed
    /// here, or this does not compile.
    #[test]
    fn every_metric_reads_its_own_figure() {
        use crate::capture::Capture;
        use crate::tap::Key;
        let a = |shape: &[usize], v: &[f32]| ndarray::ArrayD::from_shape_vec(shape, v.to_vec()).unwrap();
        let (mut r, mut x) = (Capture::default(), Capture::default());
        let logits = [3.0, 1.0, 0.0, 0.5, 0.2, 0.1, 0.0, 0.3, 0.0, 2.0, 1.0, 0.0, 0.4, 0.0, 0.2, 0.1];
        r.insert(Key::parse("prefill/logits"), a(&[2, 8], &logits));
        let shifted = [1.0, 3.0, 0.0, 0.5, 0.2, 0.1, 0.0, 0.3, 0.0, 2.0, 1.5, 0.0, 0.4, 0.0, 0.2, 0.6];
        x.insert(Key::parse("prefill/logits"), a(&[2, 8], &shifted));
        r.insert(Key::parse("prefill/layers.0.out"), a(&[2, 8], &logits));
        x.insert(Key::parse("prefill/layers.0.out"), a(&[2, 8], &shifted));
        r.insert(
            Key::parse("prefill/layers.0.attn.scores"),
            a(&[1, 2, 2], &[0.0, f32::NEG_INFINITY, 0.0, 0.0]),
        );
        r.insert(Key::parse("prefill/layers.0.attn.probs"), a(&[1, 2, 2], &[1.0, 0.0, 0.5, 0.5]));
        x.insert(Key::parse("prefill/layers.0.attn.probs"), a(&[1, 2, 2], &[0.9, 0.1, 0.5, 0.4]));
        let thresholds = Thresholds::default();
        let shards = [3usize, 5];
        let settings =
            super::super::Settings { shards: Some(&shards), ..super::super::Settings::new(&thresholds) };
        let pair = super::super::compare(&r, &x, ("r", "x"), &settings).unwrap();
        let row = |tap: &str| pair.rows.iter().find(|r| r.tap.to_string() == tap).unwrap();
        let (l, p, out) = (row("logits"), row("layers.0.attn.probs"), row("layers.0.out"));
        let (m, lf, pf) =
            (l.metrics.as_ref().unwrap(), l.logits.as_ref().unwrap(), p.probs.as_ref().unwrap());
        let sh = &lf.shards;
        assert_eq!(sh.len(), 2);
        for metric in Metric::ALL {
            let (on, want) = match metric {
                Metric::Cosine => (l, m.cosine),
                Metric::CosineNoOutliers => (out, out.cosine_no_outliers.unwrap()),
                Metric::Sqnr => (l, m.sqnr_opt().unwrap()),
                Metric::MaxAbs => (l, m.max_abs),
                Metric::MeanAbs => (l, m.mean_abs),
                Metric::P99Abs => (l, m.p99_abs),
                Metric::RelMax => (l, m.rel_max),
                Metric::RelMedian => (l, m.rel_median),
                Metric::Close => (l, m.close_frac),
                Metric::Nonfinite => (l, 0.0),
                Metric::Argmax => (l, lf.argmax_agreement),
                Metric::Topk => (l, lf.topk_overlap),
                Metric::KlMean => (l, lf.kl_mean),
                Metric::KlMax => (l, lf.kl_max),
                Metric::KlP99 => (l, lf.kl_p99),
                Metric::Flips => (l, lf.flips_above_margin as f64),
                Metric::ProbSumErr => (p, pf.sum_err_max),
                Metric::MaskLeak => (p, 1.0),
                Metric::ShardCosine => (l, sh[0].cosine.min(sh[1].cosine)),
                Metric::ShardScaleErr => (l, sh[0].scale_err().max(sh[1].scale_err())),
                Metric::ShardArgmax => (l, sh[0].argmax_agreement.min(sh[1].argmax_agreement)),
                // Token figures are read off a served model's comparison (tokens_tests.rs).
                Metric::Agreement
                | Metric::ForcedAgreement
                | Metric::SameTop1
                | Metric::Kld
                | Metric::TokenGap
                | Metric::RepeatRun => {
                    assert!([l, p, out].iter().all(|r| metric.value(r).is_none()), "{}", metric.name());
                    continue;
                }
            };
            assert_eq!(metric.value(on), Some(want), "{}", metric.name());
            assert!(!metric.about().is_empty() && Metric::parse(metric.name()).unwrap() == metric);
        }
        // The figures differ, so a metric that read another's would be caught.
        assert!(lf.kl_mean != lf.kl_max && m.max_abs != m.mean_abs && lf.argmax_agreement == 0.5);
        assert!((pf.sum_err_max - 0.1).abs() < 1e-6);
        // A row's logits figures are not a probs tap's, and the other way round.
        assert_eq!((Metric::KlMean.value(p), Metric::MaskLeak.value(l)), (None, None));
    }

    #[test]
    fn most_specific_wins_unless_tightest_asked() {
        let mut t = Thresholds::default();
        t.rules.push(rule("layers.*", "cosine", 0.9));
        t.rules.push(rule("layers.*.attn.probs", "cosine", 0.5));
        t.rules.push(rule("*", "cosine", 0.99));
        let b = t.bounds_for("layers.0.attn.probs");
        assert_eq!(b[&Metric::Cosine], (0.5, "layers.*.attn.probs".to_string()));
        assert_eq!(t.bounds_for("layers.0.out")[&Metric::Cosine].0, 0.9);
        assert_eq!(t.bounds_for("logits")[&Metric::Cosine].0, 0.99);
        t.policy = Policy::Tightest;
        assert_eq!(t.bounds_for("layers.0.attn.probs")[&Metric::Cosine].0, 0.999, "default is tightest");
    }

    #[test]
    fn cli_bounds_and_unknown_metrics() {
        let mut t = Thresholds::default();
        t.add_cli("cosine=0.9").unwrap();
        t.add_cli("logits:kl_mean=0.01").unwrap();
        assert_eq!(t.bounds_for("logits")[&Metric::KlMean].0, 0.01);
        assert_eq!(t.bounds_for("embed")[&Metric::Cosine].0, 0.9);
        let e = t.add_cli("cosin=0.9").unwrap_err().to_string();
        assert!(e.contains("did you mean `cosine`"), "{e}");
    }

    #[test]
    fn bounds_out_of_range_are_refused_with_the_range() {
        let mut t = Thresholds::default();
        for (spec, range) in [
            ("cosine=nan", "from -1 to 1"),
            ("cosine=1.5", "from -1 to 1"),
            ("flips=-1", "whole number ≥ 0"),
            ("flips=0.5", "whole number ≥ 0"),
            ("topk=2", "from 0 to 1"),
            ("logits:kl_mean=inf", "finite number ≥ 0"),
            ("sqnr=-inf", "finite number"),
        ] {
            let e = t.add_cli(spec).unwrap_err().to_string();
            assert!(e.contains(&format!("--threshold `{spec}`")) && e.contains(range), "{spec}: {e}");
        }
        let e = t.add_cli("top_k=2").unwrap_err().to_string();
        assert!(e.contains("unknown metric `top_k`") && e.contains("did you mean `topk`"), "{e}");
        let e = Rule::new("logits", &[("argmax".to_string(), -0.5)].into()).unwrap_err();
        assert!(e.to_string().contains("argmax = -0.5"), "{e}");
        t.add_cli("sqnr=-3").unwrap();
    }

    #[test]
    fn globs_that_match_no_tap_are_named_with_a_suggestion() {
        let taps = crate::tap::tap_names(2);
        let mut t = Thresholds::default();
        t.check_globs(&taps, 2).unwrap();
        t.add_cli("layers.*.attn.prob:cosine=0.9").unwrap();
        let e = t.check_globs(&taps, 2).unwrap_err().to_string();
        assert!(e.contains("--threshold `layers.*.attn.prob:cosine=0.9`"), "{e}");
        assert!(e.contains("did you mean `layers.*.attn.probs`"), "{e}");
        let mut t = Thresholds::default();
        t.add_cli("logits:cosine=0.9").unwrap();
        t.check_globs(&taps, 2).unwrap();
        // The built-in attention rule does not need the taps: a logits-only capture passes.
        t.check_globs(&["logits".to_string()], 0).unwrap();
    }
}
