//! Evidence bundles (`run --bundle DIR`) and their replay (`hefprobe verify DIR`). A bundle holds
//! what a reader needs to re-check a result: the command and hefprobe's version, the probe and
//! the InputSet, the reports, the captures up to a size cap (only their hashes past it), the
//! device facts, and the sha256 of every file in it, of the HEFs and of the checkpoint's files.
//! `verify` checks the hashes (a changed report or a swapped HEF is named), re-runs the probe
//! as it was run, and compares every figure of the bundle's report with the new one: same
//! (within [`TOLERANCE`]), different, or not re-runnable here and why.

use super::run::{run_probe, CaptureOptions, ExplainChoice, ProbeOverrides, RunOptions};
use super::schema::Probe;
use crate::device::DeviceFacts;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const BUNDLE_SCHEMA: &str = "hefprobe.bundle/1";
pub const MANIFEST: &str = "bundle.json";
/// Captures past this many bytes in all are left out, only their hashes kept.
pub const DEFAULT_CAP: u64 = 256 << 20;
/// Two runs of the same probe on the same inputs agree to this much on every figure: the
/// reference and the emulators are deterministic for a given thread count, and a figure is
/// printed to 6 decimals (docs/METRICS.md, "Reproducibility").
pub const TOLERANCE: f64 = 1e-6;

/// A file outside the bundle, pinned by its hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pinned {
    pub what: String,
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
}

/// How the run was asked for, so `verify` asks the same.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Asked {
    /// The probe file as given (its relative paths are relative to it).
    pub probe: String,
    pub backends: Vec<String>,
    pub checkpoint: Option<String>,
    pub revision: String,
    pub thresholds: Vec<String>,
    pub no_explain: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema: String,
    pub hefprobe: String,
    pub command: String,
    pub asked: Asked,
    /// sha256 of every file in the bundle, by its path in it.
    pub files: BTreeMap<String, String>,
    /// Captures over the cap: their hashes only.
    pub left_out: Vec<Pinned>,
    pub pinned: Vec<Pinned>,
    /// The device each HEF backend ran on.
    pub devices: BTreeMap<String, DeviceFacts>,
    /// A suite's bundle (`suite --bundle`): how the suite was asked for; `asked` is then unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<SuiteAsked>,
    /// A sweep's bundle (`sweep --bundle`): the probe and the checkpoint it replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepAsked>,
}

/// How a sweep was asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepAsked {
    pub probe: String,
    pub checkpoint: Option<String>,
    pub revision: String,
}

/// How a suite was asked for, so `verify` asks the same.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteAsked {
    /// The suite file or the probe files, absolute.
    pub inputs: Vec<String>,
    pub backends: Vec<String>,
    pub checkpoint: Option<String>,
    pub revision: String,
    pub baseline: Option<String>,
    pub no_explain: bool,
}

pub fn sha256_file(path: &Path) -> Result<(String, u64)> {
    use std::io::Read;
    let mut f = crate::files::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((format!("{:x}", h.finalize()), n))
}

pub fn pin(what: &str, path: &Path) -> Result<Pinned> {
    let (sha256, bytes) = sha256_file(path)?;
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf()).display().to_string();
    Ok(Pinned { what: what.into(), path, sha256, bytes })
}

/// The files of the checkpoint a run used (none for a synthesized one: its spec is its source).
pub fn checkpoint_files(source: &crate::model::weights::CheckpointSource) -> Vec<PathBuf> {
    use crate::model::weights::CheckpointSource as S;
    match source {
        S::Synth(_) => Vec::new(),
        S::Gguf { path, .. } => vec![path.clone()],
        S::Dir(d) => {
            let mut v: Vec<PathBuf> = std::fs::read_dir(d)
                .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
                .unwrap_or_default();
            v.retain(|p| {
                p.is_file()
                    && p.extension()
                        .is_some_and(|e| e == "json" || e == "safetensors" || e == "txt" || e == "model")
            });
            v.sort();
            v
        }
    }
}

/// The files of the checkpoint a command line named (a folder's or a `.gguf`), pinned; none
/// for a hub id, which is not a path here.
pub fn pin_checkpoint(path: &Path) -> Result<Vec<Pinned>> {
    use crate::model::weights::CheckpointSource as S;
    let source = if path.is_dir() {
        S::Dir(path.to_path_buf())
    } else {
        S::Gguf { path: path.to_path_buf(), quant: String::new() }
    };
    checkpoint_files(&source).iter().filter(|f| f.is_file()).map(|f| pin("a checkpoint file", f)).collect()
}

fn options(a: &Asked, captures: CaptureOptions) -> Result<RunOptions> {
    use crate::backend::BackendSpec;
    Ok(RunOptions {
        probe: ProbeOverrides {
            backends: a.backends.iter().map(|b| BackendSpec::parse_cli(b)).collect::<Result<_>>()?,
            checkpoint: a.checkpoint.as_ref().map(|c| crate::model::CheckpointRef::at(c, &a.revision)),
            thresholds: a.thresholds.clone(),
            explain: if a.no_explain { ExplainChoice::Off } else { ExplainChoice::AsProbe },
        },
        captures,
        command: String::new(),
    })
}

/// Run the probe as `asked` and write the bundle to `dir` (created; an existing folder must be
/// empty). Returns the run, for the command's own reports.
pub fn write(asked: &Asked, command: &str, dir: &Path, cap: u64) -> Result<super::run::ProbeRun> {
    let probe_path = Path::new(&asked.probe);
    let probe = Probe::load(probe_path)?;
    let captures = dir.join("captures");
    std::fs::create_dir_all(&captures).map_err(|e| Error::io(&captures, e))?;
    let mut opts = options(
        asked,
        CaptureOptions {
            spill: true,
            save_captures: Some(captures.clone()),
            save_inputs: Some(dir.join("inputs.npz")),
            ..Default::default()
        },
    )?;
    opts.command = command.to_string();
    let mut run = run_probe(&probe, &opts)?;
    std::fs::copy(probe_path, dir.join("probe.toml")).map_err(|e| Error::io(probe_path, e))?;
    crate::files::write_file_quiet(dir.join("report.json"), crate::report::json::render(&run.report))?;
    crate::files::write_file_quiet(
        dir.join("report.md"),
        crate::report::markdown::render(&run.report, Some(&dir.join("report.md"))),
    )?;
    let mut pinned = Vec::new();
    let mut devices = BTreeMap::new();
    for b in &run.runs.backends {
        if let (crate::backend::BackendKind::Hef, Some(p)) = (b.spec.kind, b.spec.path.as_ref()) {
            pinned.push(pin(&format!("the HEF of `{}`", b.label), p)?);
        }
        if let Some(f) = &b.device {
            devices.insert(b.label.clone(), f.clone());
        }
    }
    for f in checkpoint_files(&run.source) {
        pinned.push(pin("a checkpoint file", &f)?);
    }
    let (mut files, left_out) = keep_captures(&captures, cap)?;
    // The page's figures: the run's SVGs, linked from the evidence block.
    let svgs = crate::report::svg::write(&run.report, &dir.join("figure"))?;
    let svgs: Vec<String> = svgs
        .iter()
        .filter_map(|p| Path::new(p).file_name().map(|n| n.to_string_lossy().to_string()))
        .collect();
    crate::files::write_file_quiet(
        dir.join("evidence.md"),
        evidence(command, &run, &pinned, &svgs, &devices, dir),
    )?;
    for name in ["probe.toml", "inputs.npz", "report.json", "report.md", "evidence.md"]
        .iter()
        .copied()
        .chain(svgs.iter().map(String::as_str))
    {
        files.insert(name.into(), sha256_file(&dir.join(name))?.0);
    }
    let manifest = Manifest {
        schema: BUNDLE_SCHEMA.into(),
        hefprobe: env!("CARGO_PKG_VERSION").into(),
        command: command.into(),
        asked: asked.clone(),
        files,
        left_out,
        pinned,
        devices,
        suite: None,
        sweep: None,
    };
    let text = serde_json::to_string_pretty(&manifest).expect("a manifest serializes") + "\n";
    crate::files::write_file(dir.join(MANIFEST), text)?;
    run.report.notes.push(format!(
        "evidence bundle: {} (replay with `hefprobe verify {}`)",
        dir.display(),
        dir.display()
    ));
    Ok(run)
}

/// The captures' hashes, by their paths in the bundle; those past `cap` bytes in all are
/// removed and listed apart.
fn keep_captures(captures: &Path, cap: u64) -> Result<(BTreeMap<String, String>, Vec<Pinned>)> {
    let mut files = BTreeMap::new();
    let mut left_out = Vec::new();
    let mut held = 0u64;
    let mut names: Vec<PathBuf> = std::fs::read_dir(captures)
        .map_err(|e| Error::io(captures, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    names.sort();
    for p in names {
        let (sha, bytes) = sha256_file(&p)?;
        let name = format!("captures/{}", p.file_name().unwrap_or_default().to_string_lossy());
        if held.saturating_add(bytes) > cap {
            std::fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
            left_out.push(Pinned {
                what: "a capture past the size cap".into(),
                path: name,
                sha256: sha,
                bytes,
            });
        } else {
            held += bytes;
            files.insert(name, sha);
        }
    }
    Ok((files, left_out))
}

/// A findings page's evidence block: what ran, on what (hashes), the headline, and the command
/// that replays it.
fn evidence(
    command: &str,
    run: &super::run::ProbeRun,
    pinned: &[Pinned],
    svgs: &[String],
    devices: &BTreeMap<String, DeviceFacts>,
    dir: &Path,
) -> String {
    use crate::report::doc::{Doc, Table, Text};
    let mut d = Doc::new();
    d.heading(3, format!("Evidence: {}", run.report.probe.name));
    d.fact(Text::from("command: ").and(Text::code(command)));
    d.fact(format!("hefprobe {}, checkpoint {}", env!("CARGO_PKG_VERSION"), run.source));
    for (label, f) in devices {
        let id = f.device_id.clone().or(f.architecture.clone()).unwrap_or_default();
        d.fact(Text::from("device of ").and(Text::code(label)).and(format!(": {} {id}", f.kind)));
    }
    let located = run.report.located.iter().flatten().next();
    if let Some(l) = located {
        d.fact(format!("first drift: {} {}", l.phase, l.tap));
    }
    if let Some(e) = &run.report.explain {
        d.fact(format!("explain: {}", e.conclusion));
    }
    d.blank();
    if !pinned.is_empty() {
        let mut t = Table::new(["file", "sha256", "bytes"]).align("llr");
        for p in pinned {
            t.row([format!("{} ({})", p.what, p.path), p.sha256.clone(), p.bytes.to_string()]);
        }
        d.table(t).blank();
    }
    for s in svgs {
        d.figure(s.clone()).blank();
    }
    d.line(
        Text::from("Replay: ")
            .and(Text::code(format!("hefprobe verify {}", dir.display())))
            .and(" — the full report is `report.md` beside this file."),
    );
    d.markdown()
}

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

pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST);
    let text = crate::files::read_text(&path)?;
    let m: Manifest = serde_json::from_str(&text)
        .map_err(|e| Error::input(path.display().to_string(), format!("not a bundle manifest: {e}")))?;
    if m.schema != BUNDLE_SCHEMA {
        return Err(Error::input(
            format!("{} key `schema`", path.display()),
            format!("`{}`; this hefprobe reads `{BUNDLE_SCHEMA}`", m.schema),
        ));
    }
    for name in m.files.keys() {
        let p = Path::new(name);
        if p.is_absolute() || p.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            return Err(Error::input(
                format!("{} key `files`", path.display()),
                format!("`{name}` is not a path inside the bundle"),
            ));
        }
    }
    Ok(m)
}

/// The hashes: every file of the bundle, every pinned file outside it.
pub fn check_hashes(dir: &Path, m: &Manifest, out: &mut Vec<Check>) {
    let mut hash = |what: String, path: &Path, want: &str| {
        let (verdict, why) = match sha256_file(path) {
            Ok((sha, _)) if sha == want => (Verdict::Same, format!("sha256 {}", &sha[..12])),
            Ok((sha, _)) => (
                Verdict::Different,
                format!(
                    "{} changed: sha256 {} where the bundle pinned {}",
                    path.display(),
                    &sha[..12],
                    &want[..12.min(want.len())]
                ),
            ),
            Err(e) => (Verdict::Different, format!("{} cannot be read: {e}", path.display())),
        };
        out.push(Check { what, verdict, why });
    };
    for (name, sha) in &m.files {
        hash(format!("bundle file {name}"), &dir.join(name), sha);
    }
    for p in &m.pinned {
        hash(p.what.clone(), Path::new(&p.path), &p.sha256);
    }
}

/// Every compared figure of a run report's JSON, by `candidate view phase tap figure`.
fn figures(report: &serde_json::Value) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for c in report["comparisons"].as_array().into_iter().flatten() {
        let pair =
            format!("{} {}", c["candidate"].as_str().unwrap_or("?"), c["view"].as_str().unwrap_or("?"));
        for r in c["rows"].as_array().into_iter().flatten() {
            let at =
                format!("{pair} {}/{}", r["phase"].as_str().unwrap_or("?"), r["tap"].as_str().unwrap_or("?"));
            for k in ["cosine", "sqnr_db", "max_abs"] {
                if let Some(v) = r["metrics"][k].as_f64() {
                    out.insert(format!("{at} {k}"), v);
                }
            }
        }
    }
    out
}

pub fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= TOLERANCE * a.abs().max(b.abs()).max(1.0)
}

/// The recorded devices this machine cannot re-run, each with why: by label, where the device
/// `now` gives that label is not of the recorded kind.
pub fn not_here<'a>(
    recorded: &BTreeMap<String, DeviceFacts>,
    now: impl Fn(&str) -> Option<&'a DeviceFacts>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (label, facts) in recorded {
        let here = now(label);
        if here.map(|f| &f.kind) != Some(&facts.kind) {
            let on =
                facts.device_id.clone().or(facts.architecture.clone()).unwrap_or_else(|| facts.kind.clone());
            let has = here.map_or("no such device".to_string(), |f| format!("a {} device", f.kind));
            out.insert(label.clone(), format!("ran on {} {on}; this machine has {has}", facts.kind));
        }
    }
    out
}

/// Re-run the probe as the bundle asked it and compare every figure.
fn rerun(dir: &Path, m: &Manifest, out: &mut Vec<Check>) -> Result<()> {
    let text = crate::files::read_text(dir.join("probe.toml"))?;
    // The bundle's copy, read as if it were at the probe's own place (its relative paths).
    let probe = Probe::parse(&text, Path::new(&m.asked.probe))?;
    let opts = options(&m.asked, CaptureOptions { spill: true, ..Default::default() })?;
    let run = run_probe(&probe, &opts)?;
    let mut not_here = not_here(&m.devices, |label| run.runs.backend(label).and_then(|b| b.device.as_ref()));
    if let Some(e) = &run.error {
        for b in run.runs.backends.iter().filter(|b| b.error.is_some()) {
            not_here.entry(b.label.clone()).or_insert_with(|| format!("it stopped here: {e}"));
        }
    }
    let then: serde_json::Value = serde_json::from_str(&crate::files::read_text(dir.join("report.json"))?)
        .map_err(|e| Error::input(dir.join("report.json").display().to_string(), e.to_string()))?;
    let now: serde_json::Value =
        serde_json::from_str(&crate::report::json::render(&run.report)).expect("a report renders as JSON");
    let (then, now) = (figures(&then), figures(&now));
    for (key, v) in &then {
        let candidate = key.split(' ').next().unwrap_or("");
        let (verdict, why) = match (not_here.get(candidate), now.get(key)) {
            (Some(why), _) => (Verdict::NotHere, why.clone()),
            (None, Some(w)) if same(*v, *w) => (Verdict::Same, format!("{v:.6}")),
            (None, Some(w)) => (Verdict::Different, format!("{v:.6} in the bundle, {w:.6} now")),
            (None, None) => (Verdict::Different, format!("{v:.6} in the bundle, not measured now")),
        };
        out.push(Check { what: key.clone(), verdict, why });
    }
    Ok(())
}

/// `hefprobe verify DIR`: the hashes, then (when they hold) the re-run.
pub fn verify(dir: &Path) -> Result<Vec<Check>> {
    let m = read_manifest(dir)?;
    let mut out = Vec::new();
    check_hashes(dir, &m, &mut out);
    if out.iter().any(|c| c.verdict == Verdict::Different) {
        return Ok(out);
    }
    match &m.sweep {
        Some(asked) => rerun_sweep(dir, asked, &mut out)?,
        None => rerun(dir, &m, &mut out)?,
    }
    Ok(out)
}

/// Write a sweep's bundle: the probe (copied and pinned), its points (`points.json`), the
/// Markdown table, the checkpoint's files by sha256.
pub fn write_sweep(
    asked: &SweepAsked,
    command: &str,
    points_json: &str,
    markdown: &str,
    dir: &Path,
) -> Result<()> {
    crate::files::write_file_quiet(dir.join("points.json"), points_json)?;
    crate::files::write_file_quiet(dir.join("sweep.md"), markdown)?;
    std::fs::copy(&asked.probe, dir.join("probe.toml")).map_err(|e| Error::io(&asked.probe, e))?;
    let mut files = BTreeMap::new();
    for name in ["points.json", "sweep.md", "probe.toml"] {
        files.insert(name.to_string(), sha256_file(&dir.join(name))?.0);
    }
    let mut pinned = vec![pin("the probe", Path::new(&asked.probe))?];
    if let Some(c) = &asked.checkpoint {
        pinned.extend(pin_checkpoint(Path::new(c))?);
    }
    let manifest = Manifest {
        schema: BUNDLE_SCHEMA.into(),
        hefprobe: env!("CARGO_PKG_VERSION").into(),
        command: command.into(),
        asked: Asked::default(),
        files,
        left_out: Vec::new(),
        pinned,
        devices: BTreeMap::new(),
        suite: None,
        sweep: Some(asked.clone()),
    };
    let text = serde_json::to_string_pretty(&manifest).expect("a manifest serializes") + "\n";
    crate::files::write_file(dir.join(MANIFEST), text)
}

/// Every number of a JSON document, by its path (`[3].logits_cosine`).
fn numbers(v: &serde_json::Value, at: String, out: &mut BTreeMap<String, f64>) {
    match v {
        serde_json::Value::Number(n) => {
            out.insert(at, n.as_f64().unwrap_or(f64::NAN));
        }
        serde_json::Value::Array(a) => {
            a.iter().enumerate().for_each(|(i, x)| numbers(x, format!("{at}[{i}]"), out))
        }
        serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| numbers(x, format!("{at}.{k}"), out)),
        _ => {}
    }
}

/// A sweep bundle replayed: the sweep run again, every number of its points compared.
fn rerun_sweep(dir: &Path, asked: &SweepAsked, out: &mut Vec<Check>) -> Result<()> {
    let text = crate::files::read_text(dir.join("probe.toml"))?;
    let probe = Probe::parse(&text, Path::new(&asked.probe))?;
    let checkpoint = asked.checkpoint.as_ref().map(|c| crate::model::CheckpointRef::at(c, &asked.revision));
    let points = super::sweep::run_sweep(&probe, checkpoint.as_ref(), |_| {})?;
    let now = serde_json::to_value(&points).expect("points serialize");
    let what = dir.join("points.json").display().to_string();
    let then: serde_json::Value = serde_json::from_str(&crate::files::read_text(dir.join("points.json"))?)
        .map_err(|e| Error::input(&what, e.to_string()))?;
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    numbers(&then, String::new(), &mut a);
    numbers(&now, String::new(), &mut b);
    for (key, v) in &a {
        let (verdict, why) = match b.get(key) {
            Some(w) if same(*v, *w) || (v.is_nan() && w.is_nan()) => (Verdict::Same, format!("{v:.6}")),
            Some(w) => (Verdict::Different, format!("{v:.6} in the bundle, {w:.6} now")),
            None => (Verdict::Different, format!("{v:.6} in the bundle, not measured now")),
        };
        out.push(Check { what: format!("point{key}"), verdict, why });
    }
    Ok(())
}
