//! A suite's evidence bundle (`suite --bundle DIR`) and its replay: the suite's reports, the
//! suite file and every probe (copied, and pinned where they are), each target's HEF and
//! checkpoint files, the baseline, and the device facts, all by sha256. `verify` checks the
//! hashes, runs the suite again as it was asked, and compares every pair's status and figures.
//! A suite keeps no captures, so a suite bundle holds none.

use super::result::SuiteResult;
use super::run::{run_suite, SuiteOptions};
use super::spec::Suite;
use crate::error::{Error, Result};
use crate::probe::bundle::{hashed, pin, pin_checkpoint, Manifest};
use crate::probe::record::{Record, SuiteRecord};
use crate::probe::verify::{
    absent_device, check_bundle, compare_documents, compare_figures, judge_devices, read_json, Check,
    Replayed, Verdict,
};
use std::collections::BTreeMap;
use std::path::Path;

/// Write the bundle of `r` (a finished run of `suite`) to `dir`, a new or empty folder.
pub fn write(r: &SuiteResult, suite: &Suite, asked: &SuiteRecord, dir: &Path) -> Result<()> {
    crate::probe::bundle::staged(dir, |tmp| write_into(r, suite, asked, (dir, tmp)).map(|()| ((), true)))
}

/// [`write`] into `tmp`, the bundle's temporary folder, its manifest naming `dir`.
fn write_into(r: &SuiteResult, suite: &Suite, asked: &SuiteRecord, (dir, tmp): (&Path, &Path)) -> Result<()> {
    let probes = tmp.join("probes");
    std::fs::create_dir_all(&probes).map_err(|e| Error::io(&probes, e))?;
    let r = &as_evidence(r);
    crate::files::write_file_quiet(tmp.join("report.json"), r.to_json())?;
    crate::files::write_file_quiet(tmp.join("summary.md"), super::summary::doc(r).markdown())?;
    let mut files = BTreeMap::new();
    let mut pinned = Vec::new();
    // A file copied into the bundle as `name`, and pinned where it is.
    let mut copy = |from: &Path, name: String, what: &str| -> Result<()> {
        std::fs::copy(from, tmp.join(&name)).map_err(|e| Error::io(from, e))?;
        files.insert(name.clone(), hashed(&tmp.join(&name))?);
        pinned.push(pin(what, from)?);
        Ok(())
    };
    if let Some(f) = &suite.file {
        copy(f, "suite.toml".into(), "the suite file")?;
    }
    for p in &suite.probes {
        copy(&p.path, format!("probes/{}.toml", p.name), &format!("probe `{}`", p.name))?;
    }
    for t in &suite.targets {
        if let (crate::backend::BackendKind::Hef, Some(p)) = (t.spec.kind, t.spec.path.as_ref()) {
            pinned.push(pin(&format!("the HEF of `{}`", t.label), p)?);
        }
        if let Some(c) = t.checkpoint.as_ref().filter(|c| c.is_file()) {
            pinned.push(pin(&format!("the checkpoint of `{}`", t.label), c)?);
        }
    }
    pinned.extend(pin_checkpoint(asked.checkpoint.as_ref())?);
    if let Some(b) = &asked.baseline {
        pinned.push(pin("the baseline", b)?);
    }
    for name in ["report.json", "summary.md"] {
        files.insert(name.into(), hashed(&tmp.join(name))?);
    }
    let devices = r.pairs.iter().filter_map(|p| p.device.clone().map(|d| (p.target.clone(), d))).collect();
    let asked = Record::Suite(asked.clone());
    Manifest { devices, ..Manifest::new((&r.command, asked), dir, files, pinned) }.write(tmp)
}

/// `r` as its bundle's documents show it: without the notes that say how this machine ran a
/// pair (its captures spilled), which a replay elsewhere would not give again.
fn as_evidence(r: &SuiteResult) -> SuiteResult {
    let mut r = r.clone();
    for p in &mut r.pairs {
        p.note = p.note.take().filter(|n| !crate::probe::spill::says_how_it_ran(n));
    }
    r
}

/// Each pair's status and figures: its pair (`probe × target`), and `probe × target [tap figure]`.
fn figures(r: &SuiteResult) -> Vec<(String, String, Result<f64, String>)> {
    use super::figures::Figure;
    let mut out = Vec::new();
    for p in &r.pairs {
        let pair = format!("{} × {}", p.probe, p.target);
        out.push((pair.clone(), format!("{pair} status"), Err(p.status.name().to_string())));
        for (tap, f) in &p.figures {
            for fig in Figure::ALL {
                if let Some(v) = fig.get(f) {
                    out.push((pair.clone(), format!("{pair} {tap} {}", fig.name()), Ok(v)));
                }
            }
        }
    }
    out
}

/// What says when and where a night ran rather than what it measured, taken from the bundle's
/// result into the replay's before the documents are compared: the command and the paths as
/// they were typed, the date and timings and the build revisions. Each device's facts are the
/// replay's own, checked field by field by [`judge_devices`].
fn as_recorded(now: &mut SuiteResult, then: &SuiteResult) {
    now.command.clone_from(&then.command);
    now.date.clone_from(&then.date);
    now.file.clone_from(&then.file);
    now.baseline.clone_from(&then.baseline);
    now.timing = then.timing;
    for t in &mut now.targets {
        if let Some(x) = then.targets.iter().find(|x| x.label == t.label) {
            (t.path, t.revision) = (x.path.clone(), x.revision.clone());
        }
    }
    for p in &mut now.pairs {
        if let Some(x) = then.pairs.iter().find(|x| x.probe == p.probe && x.target == p.target) {
            p.seconds = x.seconds;
            p.probe_file.clone_from(&x.probe_file);
            p.hef_revision.clone_from(&x.hef_revision);
        }
    }
}

/// `verify` of a bundle: a run's or a sweep's ([`crate::probe::verify::verify`]) or a suite's:
/// the hashes, then the suite run again as it was asked, every pair's status and figures and
/// both documents (report.json, summary.md) compared.
pub fn verify(dir: &Path, m: &Manifest) -> Result<Vec<Check>> {
    let Record::Suite(asked) = &m.asked else { return crate::probe::verify::verify(dir, m) };
    let mut out = Vec::new();
    check_bundle(dir, m, &mut out);
    if out.iter().any(|c| c.verdict == Verdict::Different) {
        return Ok(out);
    }
    let then: SuiteResult = read_json(dir, "report.json")?;
    let mut suite = match asked.inputs.as_slice() {
        [one] if super::spec::is_suite_file(one)? => Suite::load(one)?,
        many => Suite::from_probes(many)?,
    };
    if !asked.backends.is_empty() {
        suite.set_cli_targets(&asked.backends)?;
    }
    let opts = SuiteOptions {
        baseline: asked.baseline.clone(),
        no_explain: asked.no_explain,
        checkpoint: asked.checkpoint.clone(),
        command: then.command.clone(),
        ..SuiteOptions::default()
    };
    let mut now = match run_suite(&suite, &opts) {
        Ok(r) => Some(r),
        Err(e) => {
            out.push(Check {
                what: "replay".into(),
                verdict: Verdict::Different,
                why: format!("it could not run: {e}"),
            });
            None
        }
    };
    let pair = |p: &super::result::PairResult| format!("{} × {}", p.probe, p.target);
    let recorded = then.pairs.iter().map(|p| (pair(p), m.devices.get(&p.target).cloned())).collect();
    let absent: BTreeMap<String, String> = super::run::plan(&suite)
        .into_iter()
        .filter_map(|(_, t)| t)
        .filter_map(|t| Some((t.label.clone(), absent_device(&t.spec)?)))
        .collect();
    let replay: BTreeMap<String, Replayed> = now
        .iter()
        .flat_map(|r| &r.pairs)
        .map(|p| {
            let state = match &p.error {
                Some(e) => {
                    Replayed::Failed { error: e.message.clone(), absent: absent.contains_key(&p.target) }
                }
                None => Replayed::Ran(p.device.clone()),
            };
            (pair(p), state)
        })
        .collect();
    let owners = judge_devices(&recorded, &replay, &mut out);
    let measured: BTreeMap<String, Result<f64, String>> =
        now.iter().flat_map(figures).map(|(_, k, v)| (k, v)).collect();
    compare_figures(&figures(&then), &measured, &owners, &mut out);
    let unverifiable =
        owners.iter().find(|(_, (v, _))| *v == Verdict::NotHere).map(|(p, _)| format!("`{p}`"));
    let docs = now.as_mut().filter(|_| unverifiable.is_none()).map(|now| {
        as_recorded(now, &then);
        *now = as_evidence(now);
        vec![
            ("report.json".to_string(), now.to_json()),
            ("summary.md".to_string(), super::summary::doc(now).markdown()),
        ]
    });
    compare_documents(dir, m, docs, unverifiable.as_deref(), &mut out)?;
    Ok(out)
}
