//! Findings as assertions: a suite's `[[finding]]` tables state what each finding of a findings
//! log claims — a probe, the targets, and what "reproduces" means (the first drift at a tap, the
//! best explanation a fault, a figure past a bound; every criterion given must hold) — and every
//! run gives each finding × target a [`FindingStatus`]. A finding expected fixed that reproduces
//! fails the run as a regression; one expected to reproduce that stops is reported, and fails
//! the run only when its claim says `fail_if_stops`.
//!
//! ```toml
//! [[finding]]
//! id = 11
//! title = "softmax shared across heads"
//! probe = "shared-softmax"
//! targets = ["tonight"]               # default: every target the probe runs against
//! expect = "reproduces"               # or "fixed"
//! first_drift = "layers.0.attn.probs" # the first drifting tap
//! explained_by = "shared-softmax"     # the best explanation (a family or a whole fault spec)
//! metric = { tap = "logits", figure = "cosine", below = 0.999 }
//! ```

use super::figures::{first_seen, Figure};
pub use super::result::{FindingResult, FindingStatus};
use super::result::{PairResult, Status};
pub use super::spec::{Claim, Expect, MetricClaim};
use crate::error::{Error, Result};
use crate::fault::spec::FaultSpec;
use crate::tap::Tap;

impl Claim {
    /// Checked when the suite is read: `what` names the suite file.
    pub fn check(&self, what: &str, probes: &[&str], targets: &[&str]) -> Result<()> {
        let key = |k: &str| format!("{what} [[finding]] id {} key `{k}`", self.id);
        if !probes.contains(&self.probe.as_str()) {
            return Err(Error::input(
                key("probe"),
                format!("`{}` is not a probe of this suite (its probes: {})", self.probe, probes.join(", ")),
            ));
        }
        if let Some(t) = self.targets.iter().find(|t| !targets.is_empty() && !targets.contains(&t.as_str())) {
            return Err(Error::input(
                key("targets"),
                format!("`{t}` is not a target of this suite (its targets: {})", targets.join(", ")),
            ));
        }
        if self.first_drift.is_none() && self.explained_by.is_none() && self.metric.is_none() {
            return Err(Error::input(
                key("first_drift"),
                "a finding states what reproduces means: give `first_drift`, `explained_by` or `metric`",
            ));
        }
        self.check_on(what, None)?;
        if let Some(m) = &self.metric {
            if Figure::parse(&m.figure).is_none() {
                return Err(Error::input(
                    key("metric.figure"),
                    format!("`{}`: cosine, sqnr_db, kl, argmax or (tap `tokens`) agreement", m.figure),
                ));
            }
            match (m.below, m.above) {
                (Some(v), None) | (None, Some(v)) if v.is_finite() => {}
                _ => return Err(Error::input(key("metric"), "give one finite bound: `below` or `above`")),
            }
        }
        Ok(())
    }

    /// The taps and the fault this claim names: canonical taps and a fault of the catalog
    /// (a typo would switch the claim off: it could never hold), and with `layers` (a model the
    /// claim's pairs run on) inside that model's blocks.
    pub fn check_on(&self, what: &str, layers: Option<usize>) -> Result<()> {
        let key = |k: &str| format!("{what} [[finding]] id {} key `{k}`", self.id);
        let taps = [
            ("first_drift", self.first_drift.as_deref()),
            ("metric.tap", self.metric.as_ref().map(|m| m.tap.as_str())),
        ];
        // `tokens`: a served model's token figures, whatever the model.
        let named = taps.into_iter().filter_map(|(k, n)| Some((k, n?)));
        for (k, name) in named.filter(|(_, n)| *n != crate::compare::tokens::TOKENS) {
            let hint = crate::tap::did_you_mean(name, layers.unwrap_or(1));
            let Some(tap) = Tap::parse(name) else {
                return Err(Error::input(key(k), format!("`{name}` is not a tap{hint}")));
            };
            if let (Some(l), Some(n)) = (tap.layer(), layers) {
                if l >= n {
                    return Err(Error::input(
                        key(k),
                        format!(
                            "`{name}` names block {l}, but the probe's model has {n} layers (0..={})",
                            n - 1
                        ),
                    ));
                }
            }
        }
        let Some(text) = &self.explained_by else { return Ok(()) };
        let spec = FaultSpec::parse(text).map_err(|e| Error::input(key("explained_by"), e.to_string()))?;
        let Some(entry) = crate::fault::catalog::entry(&spec.name) else {
            let names = crate::fault::catalog::REGISTRY.iter().map(|e| e.name);
            let hint = crate::tap::suggest(&spec.name, names.clone());
            let all: Vec<&str> = names.collect();
            return Err(Error::input(
                key("explained_by"),
                format!("`{}` is no fault of the catalog{hint}; faults: {}", spec.name, all.join(", ")),
            ));
        };
        let Some(n) = layers else { return Ok(()) };
        spec.check_layers(n, entry.per_layer).map_err(|e| Error::input(key("explained_by"), e.to_string()))
    }

    /// Whether this claim is about `probe` × `target`.
    fn names(&self, probe: &str, target: &str) -> bool {
        probe == self.probe && (self.targets.is_empty() || self.targets.iter().any(|t| t == target))
    }

    /// This claim on one pair: its status, and what the pair said that decided it.
    pub fn judge(&self, p: &PairResult) -> (FindingStatus, String) {
        let drifts = matches!(p.status, Status::Failed | Status::Regressed | Status::Known);
        if !drifts && !matches!(p.status, Status::Pass | Status::Flaky) {
            return (FindingStatus::NotRun, format!("the pair is {}", p.status.name()));
        }
        let mut held = Vec::new();
        let mut missed = Vec::new();
        let mut unmeasured = Vec::new();
        // One criterion: what the pair said, and what the claim wanted where it differs.
        let mut criterion = |holds: bool, said: String, wanted: &str| {
            if holds {
                held.push(said)
            } else {
                missed.push(format!("{said}, not {wanted}"))
            }
        };
        // A tap the target does not return (a HEF gives its logits; per-layer taps only where
        // exposed) says nothing either way: the criterion is left out, and said to be.
        let measured = |tap: &str| p.figures.contains_key(tap);
        if let Some(tap) = self.first_drift.as_deref() {
            match p.first_drift.as_deref() {
                _ if !measured(tap) => unmeasured.push(format!("first drift at {tap}")),
                Some(at) => criterion(at == tap, format!("first drift at {at}"), tap),
                None => criterion(false, "no drift".into(), &format!("first drift at {tap}")),
            }
        }
        if let Some(fault) = &self.explained_by {
            let best = p.best_explanation.as_deref();
            let same = best.is_some_and(|b| b == fault || b.split('@').next() == Some(fault.as_str()));
            criterion(same, format!("best explanation {}", best.unwrap_or("none")), fault);
        }
        if let Some(m) = &self.metric {
            let v = Figure::parse(&m.figure).and_then(|f| p.figures.get(&m.tap).and_then(|x| f.get(x)));
            let bound = m.below.map_or_else(|| format!("> {}", m.above.unwrap_or(0.0)), |b| format!("< {b}"));
            match v {
                None => unmeasured.push(format!("{} {}", m.tap, m.figure)),
                Some(v) => {
                    let past = m.below.is_some_and(|b| v < b) || m.above.is_some_and(|a| v > a);
                    criterion(past, format!("{} {} {v:.6}", m.tap, m.figure), &bound);
                }
            }
        }
        if held.is_empty() && missed.is_empty() {
            return (
                FindingStatus::NotRun,
                format!("{} not measured on this target", unmeasured.join(" and ")),
            );
        }
        let status = match (missed.is_empty(), drifts) {
            (true, _) => FindingStatus::Reproduces,
            (false, true) => FindingStatus::Changed,
            (false, false) => FindingStatus::Fixed,
        };
        if !unmeasured.is_empty() {
            missed.push(format!("{} not measured on this target", unmeasured.join(" and ")));
        }
        held.extend(missed);
        (status, held.join("; "))
    }
}

/// Whether a claim names the best explanation of `probe` × `target` (so its pair is explained
/// even when its drift is known).
pub fn asks_explanation(claims: &[Claim], probe: &str, target: &str) -> bool {
    claims.iter().any(|c| c.explained_by.is_some() && c.names(probe, target))
}

/// Every claim on every pair it names; a claim on a target none of these pairs ran is not run.
pub fn evaluate(claims: &[Claim], pairs: &[PairResult], targets: &[String]) -> Vec<FindingResult> {
    let mut out = Vec::new();
    for c in claims {
        let names: Vec<String> = if c.targets.is_empty() {
            let seen = first_seen(pairs.iter().filter(|p| p.probe == c.probe).map(|p| p.target.clone()));
            if seen.is_empty() {
                targets.to_vec()
            } else {
                seen
            }
        } else {
            c.targets.clone()
        };
        for t in names {
            let (status, why) = match pairs.iter().find(|p| c.names(&p.probe, &p.target) && p.target == t) {
                Some(p) => c.judge(p),
                None => (FindingStatus::NotRun, "not run in this run".into()),
            };
            let fails = match c.expect {
                Expect::Fixed => status == FindingStatus::Reproduces,
                Expect::Reproduces => {
                    c.fail_if_stops && matches!(status, FindingStatus::Fixed | FindingStatus::Changed)
                }
            };
            out.push(FindingResult {
                claim: c.clone(),
                target: t,
                status,
                why,
                fails,
                last_reproduced: None,
                since: None,
            });
        }
    }
    out
}

/// Shards' findings as one run's: per finding × target, the shard that ran it.
pub fn merge(shards: impl IntoIterator<Item = Vec<FindingResult>>) -> Vec<FindingResult> {
    let mut out: Vec<FindingResult> = Vec::new();
    for f in shards.into_iter().flatten() {
        match out.iter_mut().find(|o| o.claim.id == f.claim.id && o.target == f.target) {
            Some(o) if o.status == FindingStatus::NotRun => *o = f,
            Some(_) => {}
            None => out.push(f),
        }
    }
    out
}

/// The sentence of a finding's verdict ("finding 11 on tonight reproduces (expected fixed)").
pub fn sentence(f: &FindingResult) -> String {
    let expected = match (f.claim.expect, f.status) {
        (Expect::Fixed, FindingStatus::Reproduces) => " — expected fixed: a regression",
        (Expect::Reproduces, FindingStatus::Fixed | FindingStatus::Changed) => " — expected to reproduce",
        _ => "",
    };
    format!("finding {} on {}: {}{expected} ({})", f.claim.id, f.target, f.status.name(), f.why)
}

/// The findings table of the terminal and Markdown summaries.
pub fn table(findings: &[FindingResult]) -> crate::report::doc::Table {
    use crate::report::doc::{Cell, Table, Text, Tone};
    let mut t = Table::new(["finding", "target", "expected", "status", "why", "last reproduced", "since"])
        .align("rllllll");
    for f in findings {
        let tone = match (f.fails, f.status) {
            (true, _) => Tone::Bad,
            (false, FindingStatus::NotRun) => Tone::Muted,
            _ => Tone::Good,
        };
        let title = f.claim.title.as_ref().map(|t| format!(" {t}")).unwrap_or_default();
        let status = if f.fails { f.status.name().to_uppercase() } else { f.status.name().to_string() };
        t.row([
            Cell::from(format!("{}{title}", f.claim.id)),
            Cell::from(Text::code(&f.target)),
            f.claim.expect.name().into(),
            Cell::from(Text::strong(status)).tone(tone),
            f.why.clone().into(),
            f.last_reproduced.clone().unwrap_or_else(|| "-".into()).into(),
            f.since.clone().unwrap_or_else(|| "-".into()).into(),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::figures::Figures;

    fn claim(expect: Expect) -> Claim {
        Claim {
            id: 11,
            title: None,
            probe: "shared-softmax".into(),
            targets: vec![],
            expect,
            fail_if_stops: false,
            first_drift: Some("layers.0.attn.probs".into()),
            explained_by: Some("shared-softmax".into()),
            metric: None,
        }
    }

    /// A pair of a per-layer target (every tap measured).
    fn pair(status: Status, tap: Option<&str>, best: Option<&str>) -> PairResult {
        let figures = ["layers.0.attn.probs", "logits"].map(|t| (t.to_string(), Figures::default()));
        PairResult { figures: figures.into_iter().collect(), ..logits_only(status, tap, best) }
    }

    /// A pair of a HEF that returns its logits alone.
    fn logits_only(status: Status, tap: Option<&str>, best: Option<&str>) -> PairResult {
        PairResult {
            probe: "shared-softmax".into(),
            target: "tonight".into(),
            status,
            first_drift: tap.map(String::from),
            best_explanation: best.map(String::from),
            figures: [("logits".to_string(), Figures { cosine: Some(0.5), ..Figures::default() })].into(),
            ..PairResult::default()
        }
    }

    /// NIGHTLY.md's claim on a HEF that has the fault but returns only logits: the first-drift
    /// criterion cannot be measured there, so the claim is judged on the rest (it reproduces,
    /// and expected fixed, fails the run); a pair without drift says so, never "at nowhere".
    #[test]
    fn a_tap_the_target_does_not_return_is_left_out_not_missed() {
        let p = logits_only(Status::Failed, Some("logits"), Some("shared-softmax@layers=0"));
        let got = &evaluate(&[claim(Expect::Fixed)], &[p], &[])[0];
        assert_eq!(got.status, FindingStatus::Reproduces, "{}", got.why);
        assert!(
            got.fails && got.why.contains("first drift at layers.0.attn.probs not measured"),
            "{}",
            got.why
        );
        let only_tap = Claim { explained_by: None, ..claim(Expect::Fixed) };
        let p = logits_only(Status::Failed, Some("logits"), None);
        let got = &evaluate(&[only_tap], &[p], &[])[0];
        assert_eq!(got.status, FindingStatus::NotRun, "{}", got.why);
        let clean = &evaluate(&[claim(Expect::Fixed)], &[pair(Status::Pass, None, None)], &[])[0];
        assert_eq!(clean.status, FindingStatus::Fixed);
        assert!(clean.why.contains("no drift") && !clean.why.contains("nowhere"), "{}", clean.why);
    }

    #[test]
    fn each_status_and_when_it_fails_the_run() {
        let cases = [
            (
                pair(Status::Failed, Some("layers.0.attn.probs"), Some("shared-softmax@layers=0")),
                FindingStatus::Reproduces,
            ),
            (
                pair(Status::Known, Some("layers.0.attn.probs"), Some("rope:interleaved")),
                FindingStatus::Changed,
            ),
            (pair(Status::Failed, Some("logits"), Some("shared-softmax")), FindingStatus::Changed),
            (pair(Status::Pass, None, None), FindingStatus::Fixed),
            (pair(Status::Error, None, None), FindingStatus::NotRun),
        ];
        for (p, want) in cases {
            let got = evaluate(&[claim(Expect::Fixed)], std::slice::from_ref(&p), &[]);
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].status, want, "{:?}: {}", p.status, got[0].why);
            assert_eq!(
                got[0].fails,
                want == FindingStatus::Reproduces,
                "expected fixed fails only when it reproduces"
            );
            let kept = evaluate(&[claim(Expect::Reproduces)], std::slice::from_ref(&p), &[]);
            assert!(!kept[0].fails, "stopping is reported, not failed, without fail_if_stops");
        }
        let strict = Claim { fail_if_stops: true, ..claim(Expect::Reproduces) };
        assert!(evaluate(&[strict], &[pair(Status::Pass, None, None)], &[])[0].fails);
    }

    #[test]
    fn claims_are_checked_against_the_suite() {
        let ok = claim(Expect::Fixed);
        assert!(ok.check("s.toml", &["shared-softmax"], &["tonight"]).is_ok());
        let e = ok.check("s.toml", &["kv-cache-layout"], &[]).unwrap_err().to_string();
        assert!(e.contains("key `probe`") && e.contains("kv-cache-layout"), "{e}");
        let empty = Claim { first_drift: None, explained_by: None, ..claim(Expect::Fixed) };
        assert!(empty.check("s.toml", &["shared-softmax"], &[]).is_err());
        let m = MetricClaim {
            tap: "logits".into(),
            figure: "cosine".into(),
            below: Some(0.99),
            above: Some(1.0),
        };
        let both = Claim { metric: Some(m), ..claim(Expect::Fixed) };
        assert!(both
            .check("s.toml", &["shared-softmax"], &[])
            .unwrap_err()
            .to_string()
            .contains("one finite bound"));
    }
}
