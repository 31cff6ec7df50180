//! `hefprobe verify DIR`: replay an evidence bundle (`run --bundle DIR`, `suite`, `sweep`):
//! hashes, then every figure and document re-run and compared.

use super::Request;
use crate::error::Result;
use crate::probe::verify::{Check, Verdict};
use crate::report::doc::{Doc, Table};
use crate::report::{Document, Format};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default)]
pub struct Verify {
    pub bundle: PathBuf,
}

/// Every check of a replay.
pub struct Verified {
    pub bundle: PathBuf,
    pub checks: Vec<Check>,
}

impl Verified {
    fn count(&self, v: Verdict) -> usize {
        self.checks.iter().filter(|c| c.verdict == v).count()
    }

    /// Everything the same: nothing differs, and every figure could be re-run here ("unverified
    /// (N figures)" is never "all same").
    pub fn same(&self) -> bool {
        self.count(Verdict::Different) + self.count(Verdict::NotHere) == 0
    }
}

impl Document for Verified {
    const COMMAND: &'static str = "verify";
    const FORMATS: &'static [Format] = &[Format::Terminal];

    fn doc(&self, _to: Option<&Path>) -> Doc {
        let (different, absent) = (self.count(Verdict::Different), self.count(Verdict::NotHere));
        let verdict = match (different, absent) {
            (0, 0) => "all same".to_string(),
            (0, n) => format!("unverified ({n} figures not re-runnable here)"),
            (n, _) => format!("different ({n})"),
        };
        let mut d = Doc::new();
        d.line(format!(
            "verify {}: {verdict}: {} same, {different} different, {absent} not re-runnable here",
            self.bundle.display(),
            self.count(Verdict::Same),
        ));
        let mut t = Table::new(["checked", "verdict", "why"]).align("lll");
        for c in self.checks.iter().filter(|c| c.verdict != Verdict::Same) {
            t.row([c.what.clone(), c.verdict.name().to_string(), c.why.clone()]);
        }
        if !self.same() {
            d.table(t);
        }
        d
    }
}

impl Request for Verify {
    type Plan = ();
    type Output = Verified;

    fn plan(&self) -> Result<()> {
        Ok(())
    }

    fn execute(&self, (): ()) -> Result<Verified> {
        let checks = crate::suite::bundle::verify(&self.bundle)?;
        Ok(Verified { bundle: self.bundle.clone(), checks })
    }
}
