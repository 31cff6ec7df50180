//! Thresholds: bounds per metric, per tap glob, with a default. By default the most specific
//! glob that bounds a metric wins; a probe may ask for the tightest matching bound instead.

use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::BTreeMap;

/// The metrics a bound can name. `min` bounds pass when value ≥ bound, `max` when ≤; the
/// range is what a bound may be (checked when the bound is read, so `cosine=nan` or
/// `flips=-1` is refused instead of silently passing or failing everything).
pub const METRICS: &[(&str, Dir, &str, Range)] = &[
    ("cosine", Dir::Min, "cosine similarity", Range::Cosine),
    ("cosine_no_outliers", Dir::Min, "cosine without the 4 largest reference channels", Range::Cosine),
    ("sqnr", Dir::Min, "SQNR in dB", Range::Finite),
    ("max_abs", Dir::Max, "max |r - x|", Range::NonNegative),
    ("mean_abs", Dir::Max, "mean |r - x|", Range::NonNegative),
    ("p99_abs", Dir::Max, "99th percentile of |r - x|", Range::NonNegative),
    ("rel_max", Dir::Max, "max relative error", Range::NonNegative),
    ("rel_median", Dir::Max, "median relative error", Range::NonNegative),
    ("close", Dir::Min, "share of elements within numpy.isclose tolerances", Range::Share),
    ("nonfinite", Dir::Max, "NaN or one-sided inf entries", Range::Count),
    ("argmax", Dir::Min, "share of positions with the reference's argmax (logits)", Range::Share),
    ("topk", Dir::Min, "mean top-5 overlap (logits)", Range::Share),
    ("kl_mean", Dir::Max, "mean KL divergence in nats (logits)", Range::NonNegative),
    ("kl_max", Dir::Max, "max KL divergence (logits)", Range::NonNegative),
    ("kl_p99", Dir::Max, "99th percentile KL (logits)", Range::NonNegative),
    (
        "flips",
        Dir::Max,
        "argmax flips where the reference top-1 margin exceeds flip_margin (logits)",
        Range::Count,
    ),
    ("prob_sum_err", Dir::Max, "max |sum over keys - 1| of a head's probs (attn.probs)", Range::NonNegative),
    (
        "mask_leak",
        Dir::Max,
        "probability mass entries > 1e-6 where the reference masks (attn.probs)",
        Range::Count,
    ),
];

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Min,
    Max,
}

pub fn metric_dir(name: &str) -> Option<Dir> {
    METRICS.iter().find(|m| m.0 == name).map(|m| m.1)
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
pub fn excess(metric: &str, value: f64, expected: f64, spread: Option<f64>) -> f64 {
    let k = REALIZATION_SLACK;
    match (metric, metric_dir(metric)) {
        ("cosine", _) => (cosine_angle(value) - allowed_angle(expected, spread)).max(0.0).cos(),
        ("sqnr", _) => {
            let noise = |db: f64| 10f64.powf(-db / 10.0);
            let beyond = noise(value) - noise(expected) - k * spread.map_or(0.0, noise);
            if beyond > 0.0 {
                -10.0 * beyond.log10()
            } else {
                f64::INFINITY
            }
        }
        (_, Some(Dir::Min)) => {
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

/// Check a bound's value against its metric's range: the message says the valid range.
pub fn check_bound(metric: &str, value: f64) -> Result<()> {
    check_metric(metric)?;
    let range = METRICS.iter().find(|m| m.0 == metric).map(|m| m.3).expect("checked");
    if range.admits(value) {
        Ok(())
    } else {
        Err(Error::usage(format!("{metric} = {value}: a bound on {metric} is {}", range.describe())))
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
    pub bounds: BTreeMap<String, f64>,
    /// Where the rule was written (`--threshold ...`, `[thresholds.taps]`), for messages;
    /// empty for the built-in rules, which are not checked against a model's taps.
    #[serde(skip)]
    pub origin: String,
}

impl Rule {
    pub fn new(glob: &str, bounds: BTreeMap<String, f64>) -> Result<Self> {
        for (name, &v) in &bounds {
            check_bound(name, v).map_err(|e| Error::usage(format!("threshold glob `{glob}`: {e}")))?;
        }
        let pattern = crate::tap::TapGlob::parse(glob)
            .map_err(|e| Error::usage(format!("threshold glob `{glob}` is not a valid pattern: {e}")))?;
        Ok(Rule { glob: glob.to_string(), pattern, bounds, origin: format!("threshold glob `{glob}`") })
    }

    /// Literal characters of the glob: more means more specific.
    fn specificity(&self) -> usize {
        self.glob.chars().filter(|c| !matches!(c, '*' | '?' | '[' | ']')).count()
    }
}

fn check_metric(name: &str) -> Result<()> {
    if metric_dir(name).is_none() {
        let names: Vec<&str> = METRICS.iter().map(|m| m.0).collect();
        let hint = crate::tap::closest(name, names.iter().copied())
            .map(|c| format!(" (did you mean `{c}`?)"))
            .unwrap_or_default();
        return Err(Error::usage(format!("unknown metric `{name}`{hint}; metrics: {}", names.join(", "))));
    }
    Ok(())
}

#[derive(Debug, Clone, Serialize)]
pub struct Thresholds {
    pub default: BTreeMap<String, f64>,
    pub rules: Vec<Rule>,
    pub policy: Policy,
    /// Argmax flips count only where the reference's top-1 margin exceeds this.
    pub flip_margin: f64,
}

impl Default for Thresholds {
    /// cosine ≥ 0.999 everywhere, no NaN or one-sided inf, no argmax flip where the
    /// reference's top-1 margin exceeds 1e-3, and attention rows that sum to 1 within 0.05
    /// (cosine is blind to a head's probabilities all scaled by the same factor, which is
    /// what a softmax shared across heads does; 0.05 leaves room for 8-bit probs).
    fn default() -> Self {
        let mut default = BTreeMap::new();
        default.insert("cosine".to_string(), 0.999);
        default.insert("nonfinite".to_string(), 0.0);
        default.insert("flips".to_string(), 0.0);
        let mut probs =
            Rule::new("layers.*.attn.probs", [("prob_sum_err".to_string(), 0.05)].into_iter().collect())
                .expect("valid rule");
        probs.origin.clear();
        Thresholds { default, rules: vec![probs], policy: Policy::MostSpecific, flip_margin: 1e-3 }
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
        let own = |m: &String| m.as_str() == "prob_sum_err";
        let mut t = self.clone();
        t.default.retain(|m, _| !own(m));
        for r in &mut t.rules {
            r.bounds.retain(|m, _| !own(m));
        }
        t
    }

    /// The bounds applying to `tap`: metric → bound (and the glob it came from).
    pub fn bounds_for(&self, tap: &str) -> BTreeMap<String, (f64, String)> {
        let mut out: BTreeMap<String, (f64, String, usize)> =
            self.default.iter().map(|(k, v)| (k.clone(), (*v, "default".to_string(), 0))).collect();
        for rule in self.rules.iter().filter(|r| r.pattern.matches(tap)) {
            let spec = rule.specificity() + 1;
            for (metric, &bound) in &rule.bounds {
                let dir = metric_dir(metric).expect("checked at construction");
                let replace = match out.get(metric) {
                    None => true,
                    Some(&(old, _, old_spec)) => match self.policy {
                        Policy::MostSpecific => spec >= old_spec,
                        Policy::Tightest => match dir {
                            Dir::Min => bound > old,
                            Dir::Max => bound < old,
                        },
                    },
                };
                if replace {
                    out.insert(metric.clone(), (bound, rule.glob.clone(), spec));
                }
            }
        }
        out.into_iter().map(|(k, (v, g, _))| (k, (v, g))).collect()
    }

    /// Parse a command-line bound: `cosine=0.99` or `GLOB:metric=value`.
    pub fn add_cli(&mut self, spec: &str) -> Result<()> {
        let (glob, rest) = match spec.rsplit_once(':') {
            Some((g, r)) => (Some(g), r),
            None => (None, spec),
        };
        let (metric, value) = rest.split_once('=').ok_or_else(|| {
            Error::usage(format!("--threshold `{spec}`: expected METRIC=VALUE or GLOB:METRIC=VALUE"))
        })?;
        let value: f64 = value
            .trim()
            .parse()
            .map_err(|_| Error::usage(format!("--threshold `{spec}`: `{value}` is not a number")))?;
        let metric = metric.trim();
        check_bound(metric, value).map_err(|e| Error::usage(format!("--threshold `{spec}`: {e}")))?;
        match glob {
            None => {
                self.default.insert(metric.to_string(), value);
            }
            Some(g) => {
                let mut b = BTreeMap::new();
                b.insert(metric.to_string(), value);
                let mut rule = Rule::new(g, b)?;
                rule.origin = format!("--threshold `{spec}`");
                self.rules.push(rule);
            }
        }
        Ok(())
    }

    /// Check that every rule written by the user matches at least one of `taps` (the model's
    /// tap names, or the taps two captures hold), so a misspelled glob is an error with a
    /// did-you-mean, as a misspelled tap selection is, instead of a bound silently never applied.
    /// `layers` sizes the suggestions.
    pub fn check_globs(&self, taps: &[String], layers: usize) -> Result<()> {
        for rule in self.rules.iter().filter(|r| !r.origin.is_empty()) {
            if !taps.iter().any(|t| rule.pattern.matches(t)) {
                return Err(Error::usage(format!(
                    "{}: glob `{}` matches no tap{}; taps look like embed, layers.0.attn.probs, \
                     layers.*.out, final_norm, logits",
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

    fn rule(g: &str, m: &str, v: f64) -> Rule {
        Rule::new(g, [(m.to_string(), v)].into_iter().collect()).unwrap()
    }

    #[test]
    fn the_excess_allows_the_expected_noise_and_twice_the_spread_of_two_draws() {
        let cos = |a: f64| a.cos();
        // Angles add: expected 0.1 rad off, two draws 0.05 apart: up to 0.2 rad is no excess.
        assert_eq!(excess("cosine", cos(0.2), cos(0.1), Some(cos(0.05))), 1.0);
        // 0.3 rad is 0.1 beyond it.
        assert!((excess("cosine", cos(0.3), cos(0.1), Some(cos(0.05))) - cos(0.1)).abs() < 1e-12);
        // Without a spread, only the expected's own angle is allowed.
        assert!((excess("cosine", cos(0.3), cos(0.1), None) - cos(0.2)).abs() < 1e-12);
        // A share loses what it loses beyond the expected's loss plus twice the spread's.
        assert!((excess("argmax", 0.5, 0.9, Some(0.95)) - 0.7).abs() < 1e-12);
        // An error has what it has beyond the expected plus twice the spread.
        assert!((excess("max_abs", 1.0, 0.3, Some(0.1)) - 0.5).abs() < 1e-12);
        assert_eq!(excess("flips", 1.0, 0.0, Some(1.0)), 0.0);
        // An SQNR is that of the noise power beyond: 20 dB expected, 30 dB spread, 10 dB seen.
        let n = |db: f64| 10f64.powf(-db / 10.0);
        let want = -10.0 * (n(10.0) - n(20.0) - 2.0 * n(30.0)).log10();
        assert!((excess("sqnr", 10.0, 20.0, Some(30.0)) - want).abs() < 1e-9);
        assert_eq!(excess("sqnr", 25.0, 20.0, None), f64::INFINITY);
    }

    #[test]
    fn most_specific_wins_unless_tightest_asked() {
        let mut t = Thresholds::default();
        t.rules.push(rule("layers.*", "cosine", 0.9));
        t.rules.push(rule("layers.*.attn.probs", "cosine", 0.5));
        t.rules.push(rule("*", "cosine", 0.99));
        let b = t.bounds_for("layers.0.attn.probs");
        assert_eq!(b["cosine"], (0.5, "layers.*.attn.probs".to_string()));
        assert_eq!(t.bounds_for("layers.0.out")["cosine"].0, 0.9);
        assert_eq!(t.bounds_for("logits")["cosine"].0, 0.99);
        t.policy = Policy::Tightest;
        assert_eq!(t.bounds_for("layers.0.attn.probs")["cosine"].0, 0.999, "default is tightest");
    }

    #[test]
    fn cli_bounds_and_unknown_metrics() {
        let mut t = Thresholds::default();
        t.add_cli("cosine=0.9").unwrap();
        t.add_cli("logits:kl_mean=0.01").unwrap();
        assert_eq!(t.bounds_for("logits")["kl_mean"].0, 0.01);
        assert_eq!(t.bounds_for("embed")["cosine"].0, 0.9);
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
        let e = Rule::new("logits", [("argmax".to_string(), -0.5)].into_iter().collect()).unwrap_err();
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
