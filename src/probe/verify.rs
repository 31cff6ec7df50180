//! `hefprobe verify DIR`: an evidence bundle replayed. The manifest is checked (its schema, its
//! paths inside the bundle, every hash 64 hex digits); every file's size and then its sha256 are
//! compared (a file of another size is named without being read); then the run, suite or sweep
//! is replayed as the bundle asked it, and everything is derived again from the replay and
//! compared with the bundle's: its inputs and every capture bit for bit ([`super::rederive`]),
//! each figure by name, and every document (report.json, report.md, evidence.md, the SVGs; a
//! suite's summary.md, a sweep's sweep.md) character by character: the same bits give the
//! same text on every CPU (docs/ARCHITECTURE.md, "The same bits on every CPU"), so no line is
//! exempt and no figure may round to a neighbour. A bundle holds only what its manifest lists,
//! and was recorded by this version of hefprobe. Where the bundle says a backend ran is checked
//! field by field against the device its pinned HEF runs on here: only a compiled HEF recorded on
//! a `hailo` device, with no such device here, is "not re-runnable here", and the verdict is
//! then "unverified".

use super::bundle::{sha256_file, Manifest, BUNDLE_SCHEMA, MANIFEST};
use super::record::{Record, RunRecord, SweepRecord};
use super::run::{run_probe, CaptureOptions};
use super::schema::Probe;
use crate::backend::{BackendKind, BackendSpec};
use crate::device::DeviceFacts;
use crate::error::{Error, Result};
use crate::files::Kind;
use std::collections::BTreeMap;
use std::path::Path;

pub use super::checks::{Check, Verdict};

/// A sha256 as the manifest must hold it: 64 lowercase hex digits.
fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST);
    let text = crate::files::read_text(&path, Kind::Manifest)?;
    let not_manifest = |e: serde_json::Error| {
        Error::input(path.display().to_string(), format!("not a bundle manifest: {e}"))
    };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(not_manifest)?;
    let key = |k: &str| format!("{} key `{k}`", path.display());
    if v["schema"] != BUNDLE_SCHEMA {
        return Err(Error::input(
            key("schema"),
            format!(
                "{}; this hefprobe reads `{BUNDLE_SCHEMA}` (record the bundle again with it)",
                v["schema"]
            ),
        ));
    }
    let m: Manifest = serde_json::from_value(v).map_err(not_manifest)?;
    for name in m.files.keys() {
        let p = Path::new(name);
        if p.is_absolute() || p.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            return Err(Error::input(key("files"), format!("`{name}` is not a path inside the bundle")));
        }
    }
    let hashes = m.files.iter().map(|(n, h)| ("files", n.as_str(), h.sha256.as_str()));
    let pinned = m.pinned.iter().chain(&m.left_out).map(|p| ("pinned", p.path.as_str(), p.sha256.as_str()));
    if let Some((k, name, sha)) = hashes.chain(pinned).find(|(_, _, sha)| !is_sha256(sha)) {
        return Err(Error::input(
            key(k),
            format!("the sha256 of `{name}` is `{}`, not 64 hex digits", sha.escape_debug()),
        ));
    }
    Ok(m)
}

/// The hashes: every file of the bundle, every pinned file outside it, each size compared
/// before anything is read, so a file of another size is named without hashing it.
pub fn check_hashes(dir: &Path, m: &Manifest, out: &mut Vec<Check>) {
    let mut hash = |what: String, path: &Path, want: &str, bytes: u64| {
        let (verdict, why) = match std::fs::metadata(path) {
            Err(e) => (Verdict::Different, format!("{} cannot be read: {e}", path.display())),
            Ok(meta) if !meta.is_file() => {
                (Verdict::Different, format!("{} is not a regular file", path.display()))
            }
            Ok(meta) if meta.len() != bytes => (
                Verdict::Different,
                format!("{} changed: {} bytes where the bundle pinned {bytes}", path.display(), meta.len()),
            ),
            Ok(_) => match sha256_file(path) {
                Ok((sha, _)) if sha == want => (Verdict::Same, format!("sha256 {}", &sha[..12])),
                Ok((sha, _)) => (
                    Verdict::Different,
                    format!(
                        "{} changed: sha256 {} where the bundle pinned {}",
                        path.display(),
                        &sha[..12],
                        &want[..12]
                    ),
                ),
                Err(e) => (Verdict::Different, format!("{} cannot be read: {e}", path.display())),
            },
        };
        out.push(Check { what, verdict, why });
    };
    for (name, h) in &m.files {
        hash(format!("bundle file {name}"), &dir.join(name), &h.sha256, h.bytes);
    }
    for p in &m.pinned {
        hash(p.what.clone(), Path::new(&p.path), &p.sha256, p.bytes);
    }
}

/// What is checked before a replay: every file's size and hash ([`check_hashes`]), no file the
/// manifest does not list ([`super::rederive::unlisted`]), and the version that recorded it
/// (a string, equal or not: another version may print other documents from the same figures).
pub fn check_bundle(dir: &Path, m: &Manifest, out: &mut Vec<Check>) {
    check_hashes(dir, m, out);
    super::rederive::unlisted(dir, m, out);
    let this = env!("CARGO_PKG_VERSION");
    out.push(match m.hefprobe == this {
        true => Check::new("the bundle's hefprobe version", Verdict::Same, this),
        false => Check::new(
            "the bundle's hefprobe version",
            Verdict::Different,
            format!(
                "recorded by hefprobe {}; this is {this}: verify it with the version that recorded it",
                crate::error::echo(&m.hefprobe, 40)
            ),
        ),
    });
}

/// How one backend (a suite's pair) of the bundle fared in the replay.
pub enum Replayed {
    /// It ran, on this device (None: a backend without one).
    Ran(Option<DeviceFacts>),
    /// It could not run: why, and whether its device is absent here (a compiled HEF, which
    /// only a Hailo device runs, with none here to open).
    Failed { error: String, absent: bool },
    /// The replay has no such backend.
    Missing,
}

/// A compiled HEF's device, if it cannot be opened here: what opening it said.
pub fn absent_device(spec: &BackendSpec) -> Option<String> {
    let path = spec.path.as_ref().filter(|_| spec.kind == BackendKind::Hef)?;
    let hef = crate::hef::Hef::read(path).ok()?;
    if crate::device::synth_hef::sim_spec(&hef, "").ok()?.is_some() {
        return None; // a simulated HEF runs on the simulated device, here as anywhere
    }
    crate::backend::hef::open_hef(&spec.label(), path, None, spec.group.as_deref())
        .err()
        .map(|e| e.to_string())
}

/// What the bundle says of each backend, checked against the replay: by owner (a backend's
/// label, a suite's `probe × target`; `recorded` holds every owner of the bundle's figures and
/// the device the bundle says it ran on), the verdict every figure of it gets when it cannot be
/// compared (not re-runnable here, or a replay that failed), and a check of each device claim.
pub fn judge_devices(
    recorded: &BTreeMap<String, Option<DeviceFacts>>,
    replay: &BTreeMap<String, Replayed>,
    out: &mut Vec<Check>,
) -> BTreeMap<String, (Verdict, String)> {
    let mut owners = BTreeMap::new();
    let labels: std::collections::BTreeSet<&String> = recorded.keys().chain(replay.keys()).collect();
    for label in labels {
        let (known, rec) = (recorded.contains_key(label), recorded.get(label).and_then(Option::as_ref));
        let what = format!("device of `{label}`");
        match (replay.get(label).unwrap_or(&Replayed::Missing), known) {
            (Replayed::Missing, false) => {}
            (Replayed::Missing, true) => {
                let why =
                    format!("the replay runs no `{label}`: the bundle's backends or inputs were edited");
                out.push(Check::new(what, Verdict::Different, why.clone()));
                owners.insert(label.clone(), (Verdict::Different, why));
            }
            (Replayed::Failed { error, absent: true }, _) if rec.is_some_and(|r| r.kind == "hailo") => {
                let r = rec.expect("matched on it");
                let on = r.device_id.clone().or(r.architecture.clone()).unwrap_or_default();
                let why = format!("ran on hailo {on}; this machine cannot run it: {error}");
                owners.insert(label.clone(), (Verdict::NotHere, why));
            }
            (Replayed::Failed { error, .. }, _) => {
                let why = format!("the replay of `{label}` failed: {error}");
                out.push(Check::new(format!("replay of `{label}`"), Verdict::Different, why.clone()));
                owners.insert(label.clone(), (Verdict::Different, why));
            }
            (Replayed::Ran(now), _) => {
                let (verdict, why) = match (rec, now) {
                    (Some(r), Some(n)) if r.kind == n.kind => match super::rederive::device_differs(r, n) {
                        None => (Verdict::Same, format!("ran on {}", r.kind)),
                        Some(why) => (Verdict::Different, why),
                    },
                    (Some(r), Some(n)) => (Verdict::Different, format!(
                        "the bundle says it ran on {}, but its pinned files run on {} (a simulated HEF runs only on \
                         the simulated device): that claim is false", r.kind, n.kind
                    )),
                    (Some(r), None) => (Verdict::Different, format!("the bundle says it ran on {}, but it is a backend without a device", r.kind)),
                    (None, Some(n)) => (Verdict::Different, format!("the bundle records no device for it; it runs on {}", n.kind)),
                    (None, None) => continue,
                };
                out.push(Check::new(what, verdict, why));
            }
        }
    }
    owners
}

/// Each recorded figure compared with the replay's: by owner, key and value.
pub fn compare_figures<T: std::fmt::Display + PartialEq>(
    then: &[(String, String, Result<f64, T>)],
    now: &BTreeMap<String, Result<f64, T>>,
    owners: &BTreeMap<String, (Verdict, String)>,
    out: &mut Vec<Check>,
) {
    let show = |v: Option<&Result<f64, T>>| match v {
        Some(Ok(x)) => format!("{x}"),
        Some(Err(s)) => s.to_string(),
        None => "not measured".into(),
    };
    for (owner, key, v) in then {
        let (verdict, why) = match (owners.get(owner), v, now.get(key)) {
            (Some((verdict, why)), _, _) => (*verdict, why.clone()),
            (None, Ok(a), Some(Ok(b))) if a == b => (Verdict::Same, format!("{a}")),
            (None, Err(a), Some(Err(b))) if a == b => (Verdict::Same, a.to_string()),
            (None, a, b) => (
                Verdict::Different,
                format!("{} in the bundle, {} now", crate::error::echo(&show(Some(a)), 80), show(b)),
            ),
        };
        out.push(Check::new(key.clone(), verdict, why));
    }
}

/// A document of the bundle against the one regenerated from the replay: the same text, line
/// by line; the first line that differs is quoted from both, escaped.
pub fn compare_text(name: &str, then: &str, now: &str) -> Check {
    let (a, b): (Vec<&str>, Vec<&str>) = (then.lines().collect(), now.lines().collect());
    if let Some((i, (x, y))) = a.iter().zip(&b).enumerate().find(|(_, (x, y))| x != y) {
        // From the first character that differs, so a long line shows where.
        let at = x.char_indices().zip(y.chars()).find(|((_, p), q)| p != q).map_or(0, |((i, _), _)| i);
        let start = x[..at].char_indices().rev().nth(20).map_or(0, |(i, _)| i);
        let why = format!(
            "line {}: `{}` in the bundle, `{}` regenerated from the replay",
            i + 1,
            crate::error::echo(&x[start..], 80),
            crate::error::echo(y.get(start..).unwrap_or(y), 80)
        );
        return Check::new(name, Verdict::Different, why);
    }
    if a.len() != b.len() || then.ends_with('\n') != now.ends_with('\n') {
        let why = format!("{} lines in the bundle, {} regenerated from the replay", a.len(), b.len());
        return Check::new(name, Verdict::Different, why);
    }
    Check::new(name, Verdict::Same, "every character as regenerated from the replay")
}

/// The bundle's documents against `docs`, regenerated from the replay (None: some figure in
/// them cannot be replayed here, which `unverifiable` says); a document of the bundle that
/// the replay does not draw is named too.
pub fn compare_documents(
    dir: &Path,
    m: &Manifest,
    docs: Option<Vec<(String, String)>>,
    unverifiable: Option<&str>,
    out: &mut Vec<Check>,
) -> Result<()> {
    let is_doc = |n: &&String| {
        !n.starts_with("captures/") && (n.ends_with(".md") || n.ends_with(".svg") || n.ends_with(".json"))
    };
    let Some(docs) = docs else {
        for name in m.files.keys().filter(is_doc) {
            let why = format!("it holds figures not re-runnable here ({})", unverifiable.unwrap_or("-"));
            out.push(Check::new(name.clone(), Verdict::NotHere, why));
        }
        return Ok(());
    };
    for (name, now) in &docs {
        out.push(match m.files.get(name) {
            Some(_) => compare_text(name, &crate::files::read_text(dir.join(name), Kind::Report)?, now),
            None => Check::new(name.clone(), Verdict::Different, "the replay draws it; the bundle has none"),
        });
    }
    for name in m.files.keys().filter(is_doc) {
        if !docs.iter().any(|(n, _)| n == name) {
            out.push(Check::new(name.clone(), Verdict::Different, "the replay draws no such document"));
        }
    }
    Ok(())
}

/// Every compared figure of a run report's JSON: its backend, and `candidate view phase tap
/// figure`.
fn figures(report: &serde_json::Value) -> Vec<(String, String, Result<f64, String>)> {
    let backends: Vec<&str> =
        report["backends"].as_array().into_iter().flatten().filter_map(|b| b["name"].as_str()).collect();
    let mut out = Vec::new();
    for c in report["comparisons"].as_array().into_iter().flatten() {
        let candidate = c["candidate"].as_str().unwrap_or("?");
        // The expected view of a backend is that backend's: it is emulated from its HEF.
        let owner = backends
            .iter()
            .find(|b| **b == candidate || crate::report::expected_label(b) == candidate)
            .map_or(candidate, |b| *b)
            .to_string();
        let pair = format!("{candidate} {}", c["view"].as_str().unwrap_or("?"));
        for r in c["rows"].as_array().into_iter().flatten() {
            let at =
                format!("{pair} {}/{}", r["phase"].as_str().unwrap_or("?"), r["tap"].as_str().unwrap_or("?"));
            for k in ["cosine", "sqnr_db", "max_abs"] {
                out.extend(r["metrics"][k].as_f64().map(|v| (owner.clone(), format!("{at} {k}"), Ok(v))));
            }
        }
    }
    out
}

/// `name` in the bundle `dir`, read as JSON (a suite's report.json too: [`crate::suite`]).
pub fn read_json<T: serde::de::DeserializeOwned>(dir: &Path, name: &str) -> Result<T> {
    serde_json::from_str(&crate::files::read_text(dir.join(name), Kind::Report)?)
        .map_err(|e| Error::input(dir.join(name).display().to_string(), e.to_string()))
}

/// Re-run the probe as the bundle asked it (a backend whose device is absent left out) and
/// compare every figure and document.
fn rerun(dir: &Path, (m, asked): (&Manifest, &RunRecord), out: &mut Vec<Check>) -> Result<()> {
    let text = crate::files::read_text(dir.join("probe.toml"), Kind::Probe)?;
    // The bundle's copy, read as if it were at the probe's own place (its relative paths).
    let probe = Probe::parse(&text, &asked.probe)?;
    let mut opts = asked.options(CaptureOptions { spill: true, ..Default::default() }, &m.command);
    let specs =
        if opts.probe.backends.is_empty() { probe.backends.clone() } else { opts.probe.backends.clone() };
    let mut replay = BTreeMap::new();
    let (absent, runnable): (Vec<_>, Vec<_>) = specs.into_iter().partition(|s| {
        absent_device(s)
            .map(|error| replay.insert(s.label(), Replayed::Failed { error, absent: true }))
            .is_some()
    });
    let then: serde_json::Value = read_json(dir, "report.json")?;
    let mut now = BTreeMap::new();
    let mut docs = None;
    if !runnable.is_empty() {
        if !absent.is_empty() {
            opts.probe.backends = runnable;
        }
        match run_probe(&probe, &opts) {
            Ok(run) => {
                for b in &run.runs.backends {
                    let state = match b.status.is_ok() {
                        true => Replayed::Ran(b.device.clone()),
                        false => Replayed::Failed { error: b.status.to_string(), absent: false },
                    };
                    replay.insert(b.label.clone(), state);
                }
                if let Some(e) = &run.error {
                    out.push(Check::new("replay", Verdict::Different, format!("it stopped: {e}")));
                }
                super::rederive::inputs(dir, &run.inputs, out);
                let skip: Vec<String> = absent.iter().map(BackendSpec::label).collect();
                super::rederive::captures(dir, m, &run, &skip, out);
                let json: serde_json::Value = serde_json::from_str(&crate::report::json::render(&run.report))
                    .expect("a report renders");
                now = figures(&json).into_iter().map(|(_, k, v)| (k, v)).collect();
                docs = Some(super::bundle::documents(&m.command, &run, &m.pinned, &m.devices, &m.folder)?);
            }
            Err(e) => out.push(Check::new("replay", Verdict::Different, format!("it could not run: {e}"))),
        }
    }
    let then = figures(&then);
    let recorded = then
        .iter()
        .map(|(o, _, _)| o)
        .chain(m.devices.keys())
        .map(|o| (o.clone(), m.devices.get(o).cloned()))
        .collect();
    let owners = judge_devices(&recorded, &replay, out);
    compare_figures(&then, &now, &owners, out);
    let unverifiable =
        owners.iter().find(|(_, (v, _))| *v == Verdict::NotHere).map(|(l, _)| format!("`{l}`"));
    compare_documents(dir, m, docs.filter(|_| unverifiable.is_none()), unverifiable.as_deref(), out)
}

/// `hefprobe verify DIR` of a run's or a sweep's bundle (`m`, its manifest, [`read_manifest`]):
/// the hashes, then (when they hold) the replay.
pub fn verify(dir: &Path, m: &Manifest) -> Result<Vec<Check>> {
    let mut out = Vec::new();
    check_bundle(dir, m, &mut out);
    if out.iter().any(|c| c.verdict == Verdict::Different) {
        return Ok(out);
    }
    match &m.asked {
        Record::Sweep(asked) => rerun_sweep(dir, m, asked, &mut out)?,
        Record::Run(asked) => rerun(dir, (m, asked), &mut out)?,
        // `suite::bundle::verify` replays a suite's, and hands the others here.
        Record::Suite(_) => {
            return Err(Error::input(dir.display().to_string(), "a suite's bundle: replay it as one"))
        }
    }
    Ok(out)
}

/// Every number of a JSON document, by its path (`[3].logits_cosine`).
fn numbers(v: &serde_json::Value, at: String, out: &mut Vec<(String, String, Result<f64, String>)>) {
    match v {
        serde_json::Value::Number(n) => out.push((String::new(), at, Ok(n.as_f64().unwrap_or(f64::NAN)))),
        serde_json::Value::Array(a) => {
            a.iter().enumerate().for_each(|(i, x)| numbers(x, format!("{at}[{i}]"), out))
        }
        serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| numbers(x, format!("{at}.{k}"), out)),
        _ => {}
    }
}

/// A sweep bundle replayed: the sweep run again, every number of its points and its table
/// compared.
fn rerun_sweep(dir: &Path, m: &Manifest, asked: &SweepRecord, out: &mut Vec<Check>) -> Result<()> {
    let text = crate::files::read_text(dir.join("probe.toml"), Kind::Probe)?;
    let probe = Probe::parse(&text, &asked.probe)?;
    let points = super::sweep::run_sweep(&probe, asked.checkpoint.as_ref(), |_| {})?;
    let named = |v: &serde_json::Value| {
        let mut all = Vec::new();
        numbers(v, "point".into(), &mut all);
        all
    };
    let now: BTreeMap<String, Result<f64, String>> =
        named(&serde_json::to_value(&points).expect("points serialize"))
            .into_iter()
            .map(|(_, k, v)| (k, v))
            .collect();
    compare_figures(&named(&read_json(dir, "points.json")?), &now, &BTreeMap::new(), out);
    let docs = vec![
        ("points.json".to_string(), serde_json::to_string_pretty(&points).expect("json") + "\n"),
        ("sweep.md".to_string(), super::sweep::doc(&probe, &points, &m.command, None).markdown()),
    ];
    compare_documents(dir, m, Some(docs), None, out)
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
    fn documents_compare_character_by_character_with_no_line_exempt() {
        let v = |a: &str, b: &str| compare_text("r.md", a, b).verdict;
        assert_eq!(v("cosine 0.526301, 5/5 taps\n", "cosine 0.526301, 5/5 taps\n"), Verdict::Same);
        for (bundle, replay) in [
            ("SQNR 0.2 dB", "SQNR 0.3 dB"),
            ("hefprobe 0.1.0", "hefprobe 0.2.0"),
            ("cosine 0.526301", "cosine 0.526302"),
            ("max 4.38e0", "max 4.39e0"),
            ("a\nb", "a"),
            ("a\n", "a"),
            (
                "x\ncaptures spilled to disk: forged verdict\ny",
                "x\ncaptures spilled to disk: budget 8 MiB\ny",
            ),
        ] {
            assert_eq!(v(bundle, replay), Verdict::Different, "{bundle:?} against {replay:?}");
        }
        let c = compare_text("r.md", "first drift \u{1b}[2J at logits", "first drift at logits");
        assert!(c.why.contains("\\u{1b}") && !c.why.contains('\u{1b}'), "{}", c.why);
    }

    #[test]
    fn a_command_that_names_another_bundle_folder_is_named() {
        let r =
            Record::Sweep(crate::probe::record::SweepRecord { probe: "/w/p.toml".into(), checkpoint: None });
        assert_eq!(command_asks(&r, &r, ("out", Some(Path::new("out")))).verdict, Verdict::Same);
        let elsewhere = command_asks(&r, &r, ("out", Some(Path::new("other"))));
        assert!(elsewhere.why.contains("bundle folder other"), "{}", elsewhere.why);
    }
}
