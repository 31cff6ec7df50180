//! A suite's evidence bundle (`suite --bundle DIR`) and its replay: the suite's reports, the
//! suite file and every probe (copied, and pinned where they are), each target's HEF and
//! checkpoint files, the baseline, and the device facts, all by sha256. `verify` checks the
//! hashes, runs the suite again as it was asked, and compares every pair's status and figures.
//! A suite keeps no captures, so a suite bundle holds none.

use super::result::SuiteResult;
use super::run::{run_suite, SuiteOptions};
use super::spec::Suite;
use crate::error::{Error, Result};
use crate::probe::bundle::{
    check_hashes, not_here, pin, pin_checkpoint, read_manifest, same, sha256_file, Check, Manifest,
    SuiteAsked, Verdict, BUNDLE_SCHEMA, MANIFEST,
};
use std::collections::BTreeMap;
use std::path::Path;

/// Write the bundle of `r` (a finished run of `suite`) to `dir`, a new or empty folder.
pub fn write(r: &SuiteResult, suite: &Suite, asked: &SuiteAsked, dir: &Path) -> Result<()> {
    let probes = dir.join("probes");
    std::fs::create_dir_all(&probes).map_err(|e| Error::io(&probes, e))?;
    crate::files::write_file_quiet(dir.join("report.json"), r.to_json())?;
    crate::files::write_file_quiet(dir.join("summary.md"), super::summary::doc(r).markdown())?;
    let mut files = BTreeMap::new();
    let mut pinned = Vec::new();
    if let Some(f) = &suite.file {
        std::fs::copy(f, dir.join("suite.toml")).map_err(|e| Error::io(f, e))?;
        files.insert("suite.toml".to_string(), sha256_file(&dir.join("suite.toml"))?.0);
        pinned.push(pin("the suite file", f)?);
    }
    for p in &suite.probes {
        let name = format!("probes/{}.toml", p.name);
        std::fs::copy(&p.path, dir.join(&name)).map_err(|e| Error::io(&p.path, e))?;
        files.insert(name.clone(), sha256_file(&dir.join(&name))?.0);
        pinned.push(pin(&format!("probe `{}`", p.name), &p.path)?);
    }
    for t in &suite.targets {
        if let (crate::backend::BackendKind::Hef, Some(p)) = (t.spec.kind, t.spec.path.as_ref()) {
            pinned.push(pin(&format!("the HEF of `{}`", t.label), p)?);
        }
        if let Some(c) = t.checkpoint.as_ref().filter(|c| c.is_file()) {
            pinned.push(pin(&format!("the checkpoint of `{}`", t.label), c)?);
        }
    }
    if let Some(c) = &asked.checkpoint {
        pinned.extend(pin_checkpoint(Path::new(c))?);
    }
    if let Some(b) = &asked.baseline {
        pinned.push(pin("the baseline", Path::new(b))?);
    }
    for name in ["report.json", "summary.md"] {
        files.insert(name.into(), sha256_file(&dir.join(name))?.0);
    }
    let devices = r.pairs.iter().filter_map(|p| p.device.clone().map(|d| (p.target.clone(), d))).collect();
    let manifest = Manifest {
        schema: BUNDLE_SCHEMA.into(),
        hefprobe: env!("CARGO_PKG_VERSION").into(),
        command: r.command.clone(),
        asked: Default::default(),
        files,
        left_out: Vec::new(),
        pinned,
        devices,
        suite: Some(asked.clone()),
        sweep: None,
    };
    let text = serde_json::to_string_pretty(&manifest).expect("a manifest serializes") + "\n";
    crate::files::write_file(dir.join(MANIFEST), text)
}

/// Each pair's status and figures, by `probe × target [tap figure]`.
fn figures(r: &SuiteResult) -> BTreeMap<String, Result<f64, String>> {
    use super::figures::Figure;
    let mut out = BTreeMap::new();
    for p in &r.pairs {
        let pair = format!("{} × {}", p.probe, p.target);
        out.insert(format!("{pair} status"), Err(p.status.name().to_string()));
        for (tap, f) in &p.figures {
            for fig in [Figure::Cosine, Figure::SqnrDb, Figure::Kl, Figure::Argmax] {
                if let Some(v) = fig.get(f) {
                    out.insert(format!("{pair} {tap} {}", fig.name()), Ok(v));
                }
            }
        }
    }
    out
}

/// `verify` of a bundle: a run's (`probe::bundle::verify`) or a suite's.
pub fn verify(dir: &Path) -> Result<Vec<Check>> {
    let m = read_manifest(dir)?;
    let Some(asked) = &m.suite else { return crate::probe::bundle::verify(dir) };
    let mut out = Vec::new();
    check_hashes(dir, &m, &mut out);
    if out.iter().any(|c| c.verdict == Verdict::Different) {
        return Ok(out);
    }
    let mut suite = match asked.inputs.as_slice() {
        [one] if super::spec::is_suite_file(Path::new(one))? => Suite::load(Path::new(one))?,
        many => Suite::from_probes(&many.iter().map(std::path::PathBuf::from).collect::<Vec<_>>())?,
    };
    if !asked.backends.is_empty() {
        suite.set_cli_targets(&asked.backends)?;
    }
    let opts = SuiteOptions {
        baseline: asked.baseline.as_ref().map(std::path::PathBuf::from),
        no_explain: asked.no_explain,
        checkpoint: asked.checkpoint.as_ref().map(|c| crate::model::CheckpointRef::at(c, &asked.revision)),
        ..SuiteOptions::default()
    };
    let now = run_suite(&suite, &opts)?;
    let text = crate::files::read_text(dir.join("report.json"))?;
    let then: SuiteResult = serde_json::from_str(&text)
        .map_err(|e| Error::input(dir.join("report.json").display().to_string(), e.to_string()))?;
    let not_here = not_here(&m.devices, |target| {
        now.pairs.iter().find(|p| p.target == target).and_then(|p| p.device.as_ref())
    });
    let (then, now) = (figures(&then), figures(&now));
    for (key, v) in &then {
        let target = key.split(" × ").nth(1).and_then(|s| s.split(' ').next()).unwrap_or("");
        let (verdict, why) = match (not_here.get(target), v, now.get(key)) {
            (Some(why), _, _) => (Verdict::NotHere, why.clone()),
            (None, Ok(a), Some(Ok(b))) if same(*a, *b) => (Verdict::Same, format!("{a:.6}")),
            (None, Err(a), Some(Err(b))) if a == b => (Verdict::Same, a.clone()),
            (None, a, b) => (Verdict::Different, format!("{} in the bundle, {} now", show(Some(a)), show(b))),
        };
        out.push(Check { what: key.clone(), verdict, why });
    }
    Ok(out)
}

fn show(v: Option<&Result<f64, String>>) -> String {
    match v {
        Some(Ok(x)) => format!("{x:.6}"),
        Some(Err(s)) => s.clone(),
        None => "not measured".into(),
    }
}
