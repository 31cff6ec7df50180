//! What `verify` says of each thing it checks: a verdict and why ([`super::verify`] decides
//! them, [`super::rederive`] too), and the replay's document of them all.

use super::bundle::Manifest;
use crate::report::doc::{Doc, Table};
use crate::report::{Document, Format};
use serde::Serialize;
use std::path::{Path, PathBuf};

crate::named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Verdict {
        Same = "same",
        Different = "different",
        NotHere = "not re-runnable here",
    }
}

/// One line of `verify`: what was checked, the verdict, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub what: String,
    pub verdict: Verdict,
    pub why: String,
}

impl Check {
    pub fn new(what: impl Into<String>, verdict: Verdict, why: impl Into<String>) -> Self {
        Check { what: what.into(), verdict, why: why.into() }
    }
}

/// Every check of a replay, and the manifest it replayed.
pub struct Verified {
    pub bundle: PathBuf,
    pub checks: Vec<Check>,
    pub manifest: Manifest,
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
        // Everything quoted comes from the bundle: escaped, whatever check quoted it.
        use crate::error::printable;
        d.line(format!(
            "verify {}: {verdict}: {} same, {different} different, {absent} not re-runnable here",
            printable(&self.bundle.display().to_string()),
            self.count(Verdict::Same),
        ));
        let mut t = Table::new(["checked", "verdict", "why"]).align("lll");
        for c in self.checks.iter().filter(|c| c.verdict != Verdict::Same) {
            t.row([printable(&c.what), c.verdict.name().to_string(), printable(&c.why)]);
        }
        if !self.same() {
            d.table(t);
        }
        d
    }
}
