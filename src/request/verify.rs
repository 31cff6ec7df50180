//! `hefprobe verify DIR`: replay an evidence bundle (`run --bundle DIR`, `suite`, `sweep`):
//! hashes, then every figure and document re-run and compared.

use super::Request;
use crate::error::Result;
use crate::probe::bundle::Manifest;
use crate::probe::record::Record;
use crate::probe::verify::{Check, Verdict};
use crate::report::doc::{Doc, Table};
use crate::report::{Document, Format};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default)]
pub struct Verify {
    pub bundle: PathBuf,
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

impl Request for Verify {
    type Plan = Manifest;
    type Output = Verified;

    fn plan(&self) -> Result<Manifest> {
        crate::probe::verify::read_manifest(&self.bundle)
    }

    fn execute(&self, manifest: Manifest) -> Result<Verified> {
        let checks = crate::suite::bundle::verify(&self.bundle, &manifest)?;
        Ok(Verified { bundle: self.bundle.clone(), checks, manifest })
    }
}

/// `verify`'s check of a bundle's command line, the one claim of a manifest its replay does not
/// re-run: what the command asks (`typed`, its paths as typed) against what the manifest replays
/// ([`Record::differs`]), and the bundle folder it names against the one recorded. A command
/// that names another probe, backend, fault, checkpoint or bound than what ran is a forged claim.
pub fn command_asks(recorded: &Record, typed: &Record, folder: (&str, Option<&Path>)) -> Check {
    let named = folder.1.map_or("none".into(), |f| f.display().to_string());
    let wrong = match named == folder.0 {
        false => Some(format!("it names the bundle folder {named}, the bundle records {}", folder.0)),
        true => recorded.differs(typed),
    };
    match wrong {
        None => Check::new("the command", Verdict::Same, ""),
        Some(why) => Check::new("the command", Verdict::Different, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_names_another_bundle_folder_is_named() {
        let r =
            Record::Sweep(crate::probe::record::SweepRecord { probe: "/w/p.toml".into(), checkpoint: None });
        assert_eq!(command_asks(&r, &r, ("out", Some(Path::new("out")))).verdict, Verdict::Same);
        let elsewhere = command_asks(&r, &r, ("out", Some(Path::new("other"))));
        assert!(elsewhere.why.contains("bundle folder other"), "{}", elsewhere.why);
    }
}
