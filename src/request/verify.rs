//! `hefprobe verify DIR`: replay an evidence bundle (`run --bundle DIR`, `suite`, `sweep`):
//! hashes, then every figure and document re-run and compared.

use super::Request;
use crate::error::Result;
use crate::probe::bundle::Manifest;
use crate::probe::verify::{Check, Verdict};
use crate::report::doc::{Doc, Table};
use crate::report::{Document, Format};
use serde_json::Value;
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
/// (`recorded`, those paths made absolute: [`super::absolute`]), and the bundle folder it names
/// against the one recorded. Every value must be equal, except that a recorded path need only end
/// in the typed one. A command that names another probe, backend, fault, checkpoint or bound than
/// what ran is a forged claim.
pub fn command_asks(recorded: &Value, typed: &Value, folder: (&str, Option<&Path>)) -> Check {
    let named = folder.1.map_or("none".into(), |f| f.display().to_string());
    let wrong = if named != folder.0 {
        Some(format!("it names the bundle folder {named}, the bundle records {}", folder.0))
    } else {
        differs("", recorded, typed)
    };
    match wrong {
        None => Check::new("the command", Verdict::Same, ""),
        Some(why) => Check::new("the command", Verdict::Different, why),
    }
}

/// The first value of `typed` that is not `recorded`'s, said; `key` is where it is.
fn differs(key: &str, recorded: &Value, typed: &Value) -> Option<String> {
    match (recorded, typed) {
        (Value::Object(r), Value::Object(t)) => {
            r.iter().find_map(|(k, v)| differs(k, v, t.get(k).unwrap_or(&Value::Null)))
        }
        (Value::Array(r), Value::Array(t)) if r.len() == t.len() => {
            r.iter().zip(t).find_map(|(r, t)| differs(key, r, t))
        }
        (Value::String(r), Value::String(t)) if same_words(r, t) => None,
        _ if recorded == typed => None,
        _ => Some(format!(
            "`{key}`: the command asks `{}`, the bundle replays `{}`",
            shown(typed),
            shown(recorded)
        )),
    }
}

/// A value of a bundle's manifest or its command, for a message ([`crate::error::echo`]).
fn shown(v: &Value) -> String {
    crate::error::echo(&v.as_str().map_or_else(|| v.to_string(), String::from), 120)
}

/// A recorded value and a typed one: the same words (split at `,` and `=`, as a backend spec
/// is), each equal or a recorded absolute path that ends in the typed one.
fn same_words(recorded: &str, typed: &str) -> bool {
    let (r, t): (Vec<&str>, Vec<&str>) =
        (recorded.split([',', '=']).collect(), typed.split([',', '=']).collect());
    r.len() == t.len()
        && r.iter().zip(&t).all(|(r, t)| {
            let tail: std::path::PathBuf =
                Path::new(t).components().filter(|c| *c != std::path::Component::CurDir).collect();
            r == t
                || (Path::new(r).is_absolute()
                    && !tail.as_os_str().is_empty()
                    && Path::new(r).ends_with(&tail))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn asked(probe: &str, backends: &[&str]) -> Value {
        json!({"probe": probe, "backends": backends, "checkpoint": null, "thresholds": []})
    }

    #[test]
    fn a_command_asks_what_the_bundle_replays_when_each_recorded_path_ends_in_the_typed_one() {
        let recorded = asked("/w/probes/p.toml", &["hef=/w/m.hef,map=/w/x/n.json", "emulator=rope-stride:2"]);
        let typed = asked("./probes/p.toml", &["hef=m.hef,map=x/n.json", "emulator=rope-stride:2"]);
        let folder = Some(Path::new("out"));
        assert_eq!(command_asks(&recorded, &typed, ("out", folder)).verdict, Verdict::Same);
        for (typed, wrong) in [
            (asked("probes/q.toml", &["hef=m.hef,map=x/n.json", "emulator=rope-stride:2"]), "`probe`"),
            (asked("probes/p.toml", &["hef=other.hef,map=x/n.json", "emulator=rope-stride:2"]), "`backends`"),
            (asked("probes/p.toml", &["hef=m.hef,map=x/n.json", "emulator=rope-stride:3"]), "`backends`"),
            (asked("probes/p.toml", &["hef=m.hef,map=x/n.json"]), "`backends`"),
            (asked("obes/p.toml", &["hef=m.hef,map=x/n.json", "emulator=rope-stride:2"]), "`probe`"),
        ] {
            let check = command_asks(&recorded, &typed, ("out", folder));
            assert_eq!(check.verdict, Verdict::Different, "{typed}");
            assert!(check.why.starts_with(wrong), "{}", check.why);
        }
        let elsewhere = command_asks(&recorded, &recorded, ("out", Some(Path::new("other"))));
        assert!(elsewhere.why.contains("bundle folder other"), "{}", elsewhere.why);
    }
}
