//! The baseline: the figures of the last accepted run, per probe × target × tap. Plain JSON
//! with a versioned schema, pretty-printed with sorted keys and one figure per line, so a
//! change to it reads well in review:
//!
//! ```json
//! {
//!   "schema": "hefprobe.baseline/1",
//!   "pairs": {
//!     "shared-softmax": {
//!       "tonight": {
//!         "logits": { "argmax": 1.0, "cosine": 0.9999994, "kl": 1.2e-6, "sqnr_db": 58.3 }
//!       }
//!     }
//!   }
//! }
//! ```
//!
//! `--update-baseline` ratchets: a figure is rewritten only where it improved (and new pairs
//! and taps are added), so a bad night cannot lower the bar; `--accept` writes the new figures
//! whatever they are, for a change that is intended. A failing pair is "known" only where a
//! person named it (`--known PROBE/TARGET`, kept under `known`): a first night's
//! `--update-baseline` records every pair's figures, and its failures still fail every night
//! after until they are fixed or accepted by name. A known pair that passes leaves `known`.

use super::figures::Figures;
use super::result::{PairResult, Status};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

pub const BASELINE_SCHEMA: &str = "hefprobe.baseline/1";

/// probe → target → tap → figures.
pub type PairFigures = BTreeMap<String, Figures>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    pub schema: String,
    pub pairs: BTreeMap<String, BTreeMap<String, PairFigures>>,
    /// The failing pairs a person accepted as known, by name: probe → targets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub known: BTreeMap<String, std::collections::BTreeSet<String>>,
}

impl Default for Baseline {
    fn default() -> Self {
        Baseline { schema: BASELINE_SCHEMA.into(), pairs: BTreeMap::new(), known: BTreeMap::new() }
    }
}

/// A pair named on the command line (`--known PROBE/TARGET`), checked against `pairs` (probe,
/// target): a name that is no pair of the run would accept nothing.
pub fn known_pair(name: &str, pairs: &[(String, String)]) -> Result<(String, String)> {
    let listed = || pairs.iter().map(|(p, t)| format!("{p}/{t}")).collect::<Vec<_>>().join(", ");
    let Some((probe, target)) = name.split_once('/') else {
        return Err(Error::usage(format!(
            "--known `{name}`: give PROBE/TARGET (this run's pairs: {})",
            listed()
        )));
    };
    if !pairs.iter().any(|(p, t)| p == probe && t == target) {
        return Err(Error::usage(format!(
            "--known `{name}`: no such pair in this run (its pairs: {})",
            listed()
        )));
    }
    Ok((probe.to_string(), target.to_string()))
}

/// What an update changed, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Update {
    /// Pairs new to the baseline.
    pub added: usize,
    /// Pairs with at least one figure rewritten.
    pub changed: usize,
    /// Pairs whose figures were worse and were kept as they were (no `--accept`).
    pub held: usize,
    /// Pairs newly accepted as known failures, by name.
    pub known: usize,
}

impl Baseline {
    pub fn load(path: &Path) -> Result<Baseline> {
        let what = path.display().to_string();
        let text = crate::files::read_text(path, crate::files::Kind::Baseline)?;
        let b: Baseline =
            serde_json::from_str(&text).map_err(|e| Error::input(&what, format!("not a baseline: {e}")))?;
        if b.schema != BASELINE_SCHEMA {
            return Err(Error::input(
                format!("{what} key `schema`"),
                format!("`{}`; this hefprobe reads `{BASELINE_SCHEMA}`", b.schema),
            ));
        }
        for (probe, targets) in &b.pairs {
            for (target, taps) in targets {
                super::check::taps(&format!("{what} pair {probe} × {target}"), taps)?;
            }
        }
        Ok(b)
    }

    /// The baseline at `path`; a file that does not exist yet is an empty baseline when it is
    /// about to be written (`--update-baseline`), an error otherwise.
    pub fn load_or_new(path: &Path, creating: bool) -> Result<Baseline> {
        match path.try_exists() {
            Ok(false) if creating => Ok(Baseline::default()),
            Ok(false) => Err(Error::input(
                path.display().to_string(),
                "no baseline there yet; write the first one with --update-baseline",
            )),
            _ => Baseline::load(path),
        }
    }

    pub fn get(&self, probe: &str, target: &str) -> Option<&PairFigures> {
        self.pairs.get(probe)?.get(target)
    }

    /// Whether a person accepted this pair's failure as known.
    pub fn is_known(&self, probe: &str, target: &str) -> bool {
        self.known.get(probe).is_some_and(|t| t.contains(target))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("baselines serialize") + "\n"
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        crate::files::write_file(path, self.to_json())
    }

    /// Fold a run's figures in: only improvements unless `accept`. Pairs that did not produce
    /// trustworthy figures (unstable, flaky, errors, skipped) leave the baseline alone. `known`:
    /// the failing pairs a person accepts as known, by name; a known pair that passes now is
    /// known no more.
    pub fn update(&mut self, pairs: &[PairResult], accept: bool, known: &[(String, String)]) -> Update {
        let mut u = Update::default();
        for (probe, target) in known {
            u.known += usize::from(self.known.entry(probe.clone()).or_default().insert(target.clone()));
        }
        for p in pairs.iter().filter(|p| p.status == Status::Pass) {
            let now_empty = self.known.get_mut(&p.probe).is_some_and(|t| t.remove(&p.target) && t.is_empty());
            if now_empty {
                self.known.remove(&p.probe);
            }
        }
        for p in pairs {
            let usable =
                matches!(p.status, Status::Pass | Status::Known | Status::Regressed | Status::Failed);
            if !usable || p.figures.is_empty() {
                continue;
            }
            let slot = self.pairs.entry(p.probe.clone()).or_default();
            match slot.get_mut(&p.target) {
                None => {
                    slot.insert(p.target.clone(), p.figures.clone());
                    u.added += 1;
                }
                Some(old) if accept => {
                    if *old != p.figures {
                        *old = p.figures.clone();
                        u.changed += 1;
                    }
                }
                Some(old) => {
                    let mut changed = false;
                    for (tap, new) in &p.figures {
                        let merged = old.get(tap).map_or(*new, |o| o.ratchet(new));
                        if old.get(tap) != Some(&merged) {
                            old.insert(tap.clone(), merged);
                            changed = true;
                        }
                    }
                    u.changed += usize::from(changed);
                    u.held += usize::from(!p.regressions.is_empty());
                }
            }
        }
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_pretty_sorted_and_round_trips() {
        let mut b = Baseline::default();
        let fig =
            Figures { argmax: Some(1.0), cosine: Some(0.5), kl: None, sqnr_db: Some(40.0), agreement: None };
        b.pairs
            .entry("z-probe".into())
            .or_default()
            .insert("tonight".into(), BTreeMap::from([("logits".into(), fig)]));
        b.pairs.entry("a-probe".into()).or_default().insert("tonight".into(), BTreeMap::new());
        let text = b.to_json();
        assert!(text.find("a-probe").unwrap() < text.find("z-probe").unwrap());
        assert!(text.contains("\"argmax\": 1.0,\n") && !text.contains("\"kl\""), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.json");
        b.save(&p).unwrap();
        assert_eq!(Baseline::load(&p).unwrap(), b);
        let e = Baseline::load_or_new(&dir.path().join("none.json"), false).unwrap_err().to_string();
        assert!(e.contains("--update-baseline"), "{e}");
        assert_eq!(Baseline::load_or_new(&dir.path().join("none.json"), true).unwrap(), Baseline::default());
        std::fs::write(&p, text.replace("baseline/1", "baseline/9")).unwrap();
        assert!(Baseline::load(&p).unwrap_err().to_string().contains("hefprobe.baseline/1"));
    }
}
