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
//! whatever they are, for a change that is intended.

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
}

impl Default for Baseline {
    fn default() -> Self {
        Baseline { schema: BASELINE_SCHEMA.into(), pairs: BTreeMap::new() }
    }
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

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("baselines serialize") + "\n"
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        crate::files::write_file(path, self.to_json())
    }

    /// Fold a run's figures in: only improvements unless `accept`. Pairs that did not produce
    /// trustworthy figures (unstable, flaky, errors, skipped) leave the baseline alone.
    pub fn update(&mut self, pairs: &[PairResult], accept: bool) -> Update {
        let mut u = Update::default();
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
