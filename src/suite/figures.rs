//! The figures a suite keeps per probe × target × tap — the worst cosine, SQNR, KL and argmax
//! agreement over the phases of a run — and the rule that turns them into a verdict against a
//! baseline: a figure is a regression when it is worse than its baseline by more than the noise
//! band, which is the device's own run-to-run spread with a floor under it.

use super::spec::BandFloors;
use crate::compare::{PairComparison, TapRow};
use crate::diagnose::Spread;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// SQNR is kept up to this many dB: identical tensors (infinite SQNR) are stored as 200, as the
/// SVG plots draw them, so every figure is a finite JSON number.
pub const SQNR_CAP_DB: f64 = 200.0;

/// One tap's worst figures over the phases of a run. Fields in alphabetical order, so the
/// baseline file's keys are sorted; a figure the tap does not have (KL of a hidden state) is
/// left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figures {
    /// A served model's greedy agreement (the `tokens` pseudo-tap only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreement: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argmax: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosine: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqnr_db: Option<f64>,
}

crate::named_enum! {
    /// The figures, by name.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Figure {
        Cosine = "cosine",
        SqnrDb = "sqnr_db",
        Kl = "kl",
        Argmax = "argmax",
        Agreement = "agreement",
    }
}

impl Figure {
    /// How reports say it.
    pub fn title(self) -> &'static str {
        match self {
            Figure::Cosine => "cosine",
            Figure::SqnrDb => "SQNR dB",
            Figure::Kl => "KL",
            Figure::Argmax => "argmax agreement",
            Figure::Agreement => "greedy agreement",
        }
    }

    pub fn parse(s: &str) -> Option<Figure> {
        match s {
            "sqnr" | "sqnr_db" => Some(Figure::SqnrDb),
            "argmax" | "argmax_agreement" => Some(Figure::Argmax),
            _ => Figure::from_name(s),
        }
    }

    /// Higher is better (all but KL).
    pub fn higher_is_better(self) -> bool {
        self != Figure::Kl
    }

    pub fn get(self, f: &Figures) -> Option<f64> {
        let mut f = *f;
        *self.slot(&mut f)
    }

    fn slot(self, f: &mut Figures) -> &mut Option<f64> {
        match self {
            Figure::Cosine => &mut f.cosine,
            Figure::SqnrDb => &mut f.sqnr_db,
            Figure::Kl => &mut f.kl,
            Figure::Argmax => &mut f.argmax,
            Figure::Agreement => &mut f.agreement,
        }
    }

    /// How much worse `value` is than `base` (negative: better).
    pub fn worse_by(self, value: f64, base: f64) -> f64 {
        if self.higher_is_better() {
            base - value
        } else {
            value - base
        }
    }
}

impl Figures {
    /// Keep the worse of each figure.
    fn widen(&mut self, other: &Figures) {
        for f in Figure::ALL {
            let merged = match (f.get(self), f.get(other)) {
                (Some(a), Some(b)) => Some(if f.worse_by(a, b) > 0.0 { a } else { b }),
                (a, b) => a.or(b),
            };
            *f.slot(self) = merged;
        }
    }

    /// This set with every figure that `other` beats replaced by `other`'s: the ratchet.
    pub fn ratchet(&self, other: &Figures) -> Figures {
        let mut out = *self;
        for f in Figure::ALL {
            match (f.get(self), f.get(other)) {
                (Some(a), Some(b)) if f.worse_by(b, a) < 0.0 => *f.slot(&mut out) = Some(b),
                (None, Some(b)) => *f.slot(&mut out) = Some(b),
                _ => {}
            }
        }
        out
    }
}

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

fn row_figures(row: &TapRow) -> Figures {
    let m = row.metrics.as_ref();
    let l = row.logits.as_ref();
    Figures {
        agreement: None,
        argmax: l.and_then(|l| finite(l.argmax_agreement)),
        cosine: m.and_then(|m| finite(m.cosine)),
        kl: l.and_then(|l| finite(l.kl_mean)),
        sqnr_db: m.map(|m| if m.sqnr_db.is_nan() { 0.0 } else { m.sqnr_db.min(SQNR_CAP_DB) }),
    }
}

/// Per tap, the worst figures over the phases of one comparison (cumulative view). Taps that
/// were not compared (present on one side only) have none and are left out. A served model's
/// are under `tokens`: its greedy agreement, the share of positions with the reference's top-1
/// (from its log-probabilities, else its one-token continuations) and its KLD.
pub fn figures(pair: &PairComparison) -> BTreeMap<String, Figures> {
    let mut out: BTreeMap<String, Figures> = BTreeMap::new();
    for row in pair.rows.iter().filter(|r| r.metrics.is_some()) {
        let f = row_figures(row);
        out.entry(row.tap.to_string()).and_modify(|e| e.widen(&f)).or_insert(f);
    }
    if let Some(t) = &pair.tokens {
        use crate::compare::{thresholds::Metric, tokens};
        let top1 = tokens::value(Metric::SameTop1, t).or(tokens::value(Metric::ForcedAgreement, t));
        let f = Figures {
            agreement: finite(t.agreement_share),
            argmax: top1.and_then(finite),
            kl: tokens::value(Metric::Kld, t).and_then(finite),
            ..Figures::default()
        };
        out.insert(tokens::TOKENS.to_string(), f);
    }
    out
}

/// Tap names in the order of the network (embed, layers 0.., final_norm, logits).
pub fn tap_order<'a>(taps: impl IntoIterator<Item = &'a String>) -> Vec<&'a String> {
    let mut v: Vec<&String> = taps.into_iter().collect();
    v.sort_by_cached_key(|t| crate::tap::TapName::parse(t));
    v
}

/// `items` in the order first seen, each once.
pub fn first_seen<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// How far each figure may worsen against its baseline before it is a regression: the floor,
/// widened by what the device's own run-to-run spread does to that figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Band {
    pub cosine: f64,
    pub kl: f64,
    pub argmax: f64,
    /// The floor in dB; see [`Band::sqnr_for`].
    pub sqnr_db: f64,
    /// The SQNR between two runs of the device (None: runs identical, or not a device).
    pub noise_sqnr_db: Option<f64>,
}

impl Band {
    /// The floors alone (a deterministic backend), or widened by a device's spread.
    pub fn new(floors: &BandFloors, spread: Option<&Spread>) -> Band {
        let s = spread.copied().unwrap_or_default();
        Band {
            cosine: floors.cosine.max(1.0 - s.cosine),
            kl: floors.kl.max(s.kl),
            argmax: floors.argmax.max(1.0 - s.argmax_agreement),
            sqnr_db: floors.sqnr_db,
            noise_sqnr_db: finite(s.sqnr_db),
        }
    }

    /// The SQNR band below a baseline of `base` dB: the floor, or what independent noise at the
    /// run-to-run level takes from it — error powers add, so SQNR falls by
    /// 10·log10(1 + 10^((base − noise)/10)) dB.
    pub fn sqnr_for(&self, base: f64) -> f64 {
        let widened = |n: f64| self.sqnr_db.max(10.0 * (1.0 + 10f64.powf((base - n) / 10.0)).log10());
        self.noise_sqnr_db.map_or(self.sqnr_db, widened)
    }

    pub fn of(&self, figure: Figure, base: f64) -> f64 {
        match figure {
            Figure::Cosine => self.cosine,
            Figure::SqnrDb => self.sqnr_for(base),
            Figure::Kl => self.kl,
            // A share of tokens, as argmax agreement is a share of positions.
            Figure::Argmax | Figure::Agreement => self.argmax,
        }
    }
}

/// One figure worse than its baseline by more than the band.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regression {
    pub tap: String,
    pub figure: Figure,
    pub value: f64,
    pub baseline: f64,
    pub band: f64,
}

/// Every regression of `now` against `base`, taps in network order. Taps or figures the
/// baseline does not have are new, not regressions.
pub fn regressions(
    now: &BTreeMap<String, Figures>,
    base: &BTreeMap<String, Figures>,
    band: &Band,
) -> Vec<Regression> {
    let mut out = Vec::new();
    for tap in tap_order(now.keys()) {
        let (Some(n), Some(b)) = (now.get(tap), base.get(tap)) else { continue };
        for f in Figure::ALL {
            let (Some(v), Some(bv)) = (f.get(n), f.get(b)) else { continue };
            let width = band.of(f, bv);
            if f.worse_by(v, bv) > width {
                out.push(Regression { tap: tap.clone(), figure: f, value: v, baseline: bv, band: width });
            }
        }
    }
    out
}

/// A tap's cosine per phase (for the plots of a failing pair).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseSeries {
    pub tap: String,
    /// (phase, cosine) in phase order.
    pub points: Vec<(String, f64)>,
}

/// The cosine of `tap` in every phase of `pair`.
pub fn phase_series(pair: &PairComparison, tap: &str) -> Option<PhaseSeries> {
    let name = crate::tap::TapName::parse(tap);
    let points: Vec<(String, f64)> = pair
        .rows
        .iter()
        .filter(|r| r.tap == name)
        .filter_map(|r| r.cosine().and_then(finite).map(|c| (r.phase.to_string(), c)))
        .collect();
    (!points.is_empty()).then(|| PhaseSeries { tap: tap.to_string(), points })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(cosine: f64, sqnr: f64, kl: f64, argmax: f64) -> Figures {
        Figures {
            argmax: Some(argmax),
            cosine: Some(cosine),
            kl: Some(kl),
            sqnr_db: Some(sqnr),
            agreement: None,
        }
    }

    #[test]
    fn a_regression_is_worse_than_baseline_by_more_than_the_band() {
        let band = Band::new(&BandFloors::default(), None);
        let base = BTreeMap::from([("logits".to_string(), f(0.99999, 50.0, 1e-6, 1.0))]);
        let same = BTreeMap::from([("logits".to_string(), f(0.99995, 49.5, 5e-5, 1.0))]);
        assert!(regressions(&same, &base, &band).is_empty(), "within every floor");
        let worse = BTreeMap::from([("logits".to_string(), f(0.9990, 40.0, 1e-2, 0.5))]);
        let r = regressions(&worse, &base, &band);
        let names: Vec<Figure> = r.iter().map(|r| r.figure).collect();
        assert_eq!(names, Figure::ALL[..4].to_vec(), "a tap row has no greedy agreement");
        let better = BTreeMap::from([("logits".to_string(), f(1.0, 60.0, 0.0, 1.0))]);
        assert!(regressions(&better, &base, &band).is_empty());
    }

    #[test]
    fn the_band_widens_with_the_run_to_run_spread() {
        let floors = BandFloors::default();
        let quiet = Band::new(&floors, Some(&Spread::default()));
        assert_eq!((quiet.cosine, quiet.sqnr_for(60.0)), (1e-4, 1.0));
        let noisy = Spread { cosine: 0.9995, sqnr_db: 40.0, kl: 1e-3, argmax_agreement: 1.0 };
        let b = Band::new(&floors, Some(&noisy));
        assert!((b.cosine - 5e-4).abs() < 1e-12 && b.kl == 1e-3 && b.argmax == 0.05);
        // Noise 20 dB under a 60 dB baseline costs ~20 dB; far below it, the floor.
        assert!((b.sqnr_for(60.0) - 20.0434).abs() < 1e-3, "{}", b.sqnr_for(60.0));
        assert_eq!(b.sqnr_for(20.0), 1.0);
    }

    #[test]
    fn the_ratchet_only_takes_improvements() {
        let old = f(0.999, 50.0, 1e-3, 1.0);
        let new = Figures {
            argmax: Some(0.9),
            cosine: Some(0.9999),
            kl: Some(1e-2),
            sqnr_db: None,
            agreement: None,
        };
        assert_eq!(old.ratchet(&new), f(0.9999, 50.0, 1e-3, 1.0));
    }
}
