//! Evidence bundles (`run --bundle DIR`, and the suite's and sweep's): what a reader needs to
//! re-check a result: the command and hefprobe's version, the probe and the InputSet, the
//! reports and figures a person reads, the captures up to a size cap (only their hashes past
//! it), the device facts, and the sha256 and size of every file in it, of the HEFs and of the
//! checkpoint's files. [`super::verify`] replays one.

use super::record::{Record, RunRecord, SweepRecord};
use super::run::{run_probe, CaptureOptions};
use super::schema::Probe;
use crate::device::DeviceFacts;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Version 2 gave every file of the bundle its size, checked before it is hashed; version 3
/// records what was asked as one record of its command ([`Record`]).
pub const BUNDLE_SCHEMA: &str = "hefprobe.bundle/3";
pub const MANIFEST: &str = "bundle.json";
/// Captures past this many bytes in all are left out, only their hashes kept.
pub const DEFAULT_CAP: u64 = 256 << 20;

/// A file of the bundle: its sha256 and its size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hashed {
    pub sha256: String,
    pub bytes: u64,
}

/// A file outside the bundle, pinned by its hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pinned {
    pub what: String,
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema: String,
    pub hefprobe: String,
    pub command: String,
    /// What the command asked, as it ran (its paths absolute).
    pub asked: Record,
    /// The bundle's folder as the recording command named it (the evidence's replay line).
    pub folder: String,
    /// sha256 and size of every file in the bundle, by its path in it.
    pub files: BTreeMap<String, Hashed>,
    /// Captures over the cap: their hashes only.
    pub left_out: Vec<Pinned>,
    pub pinned: Vec<Pinned>,
    /// The device each HEF backend ran on.
    pub devices: BTreeMap<String, DeviceFacts>,
}

impl Manifest {
    /// A manifest of this hefprobe, with no captures left out and no devices.
    pub fn new(
        (command, asked): (&str, Record),
        dir: &Path,
        files: BTreeMap<String, Hashed>,
        pinned: Vec<Pinned>,
    ) -> Manifest {
        Manifest {
            schema: BUNDLE_SCHEMA.into(),
            hefprobe: env!("CARGO_PKG_VERSION").into(),
            command: command.into(),
            asked,
            folder: dir.display().to_string(),
            files,
            left_out: Vec::new(),
            pinned,
            devices: BTreeMap::new(),
        }
    }

    /// Write it as `dir`'s manifest.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).expect("a manifest serializes") + "\n";
        crate::files::write_file_quiet(dir.join(MANIFEST), text)
    }
}

pub fn sha256_file(path: &Path) -> Result<(String, u64)> {
    let mut f = crate::files::open(path)?;
    let mut h = sha2::Sha256::new();
    let n = std::io::copy(&mut f, &mut h).map_err(|e| Error::io(path, e))?;
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
/// for a hub id, which is not a path here, or none named.
pub fn pin_checkpoint(checkpoint: Option<&crate::model::CheckpointRef>) -> Result<Vec<Pinned>> {
    use crate::model::weights::CheckpointSource as S;
    let Some(crate::model::CheckpointRef::Path { path, .. }) = checkpoint else { return Ok(Vec::new()) };
    let source = if path.is_dir() {
        S::Dir(path.to_path_buf())
    } else {
        S::Gguf { path: path.to_path_buf(), quant: String::new() }
    };
    checkpoint_files(&source).iter().filter(|f| f.is_file()).map(|f| pin("a checkpoint file", f)).collect()
}

/// The folder `dir` goes in (`.` for a bare name).
pub fn parent(dir: &Path) -> &Path {
    dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// A bundle's folder, checked before anything runs: a new one in a folder that exists, or an
/// empty one. Nothing is made here: the bundle is written beside it and renamed into place
/// whole ([`staged`]), so a run that fails leaves no half-made bundle.
pub fn check_new_folder(dir: &Path) -> Result<()> {
    let what = dir.display().to_string();
    match std::fs::read_dir(dir).map(|mut e| e.next().is_some()) {
        Ok(true) => Err(Error::input(
            what,
            "--bundle needs a new or empty folder (a bundle's hashes cover every file in it)",
        )),
        Ok(false) => Ok(()),
        Err(_) if dir.exists() => {
            Err(Error::input(what, "--bundle names a file; give a new or empty folder"))
        }
        Err(_) if parent(dir).is_dir() => Ok(()),
        Err(_) => Err(Error::input(
            what,
            format!(
                "--bundle: the folder it goes in, {}, does not exist; make it first",
                parent(dir).display()
            ),
        )),
    }
}

/// A bundle at `dir`, whole or not at all: `f` writes it into a temporary folder beside `dir`
/// (`.NAME.tmp-XXXXXX`), renamed to `dir` once `f` returned whole (`true`; an empty folder at
/// `dir` is replaced). On any failure (a full disk, a run that stopped, an interrupt) the
/// temporary folder is removed and `dir` left as it was.
pub fn staged<T>(dir: &Path, f: impl FnOnce(&Path) -> Result<(T, bool)>) -> Result<T> {
    let parent = parent(dir);
    let name = dir.file_name().map_or("bundle".into(), |n| n.to_string_lossy().into_owned());
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}.tmp-"))
        .tempdir_in(parent)
        .map_err(|e| Error::io(parent, e))?;
    super::cleanup::staging(tmp.path());
    let done = f(tmp.path()).and_then(|(out, whole)| {
        if whole {
            std::fs::rename(tmp.path(), dir).map_err(|e| Error::io(dir, e))?;
            crate::files::announce(dir);
        }
        Ok((out, whole))
    });
    super::cleanup::unwatch(tmp.path());
    if let Ok((_, true)) = &done {
        let _ = tmp.keep();
    }
    done.map(|(out, _)| out)
}

/// Run `probe` as `asked` (its paths absolute) and write the bundle to `dir` (a new folder, or
/// an empty one, [`staged`]). Returns the run, for the command's own reports.
pub fn write(
    (probe, asked): (&Probe, &RunRecord),
    command: &str,
    dir: &Path,
    cap: u64,
) -> Result<super::run::ProbeRun> {
    let mut run = staged(dir, |tmp| {
        let mut run = write_into((probe, asked), command, (dir, tmp), cap)?;
        let whole = run.error.is_none();
        // A spilled run's captures went into the temporary folder: where they are once it is renamed.
        let (from, to) = (tmp.display().to_string(), dir.display().to_string());
        run.report.notes.iter_mut().filter(|n| n.contains(&from)).for_each(|n| *n = n.replace(&from, &to));
        Ok((run, whole))
    })?;
    run.report.notes.push(match run.error {
        None => {
            format!("evidence bundle: {} (replay with `hefprobe verify {}`)", dir.display(), dir.display())
        }
        Some(_) => format!("no evidence bundle written to {}: the run did not finish", dir.display()),
    });
    Ok(run)
}

/// [`write`] into `tmp`, the bundle's temporary folder, its documents naming `dir`; a run that
/// stopped is returned as it is, with nothing more written.
fn write_into(
    (probe, asked): (&Probe, &RunRecord),
    command: &str,
    (dir, tmp): (&Path, &Path),
    cap: u64,
) -> Result<super::run::ProbeRun> {
    let probe_path = probe.path.as_path();
    let captures = tmp.join("captures");
    std::fs::create_dir_all(&captures).map_err(|e| Error::io(&captures, e))?;
    let keep = CaptureOptions {
        spill: true,
        save_captures: Some(captures.clone()),
        save_inputs: Some(tmp.join("inputs.npz")),
        quiet: true,
        ..Default::default()
    };
    let run = run_probe(probe, &asked.options(keep, command))?;
    if run.error.is_some() {
        return Ok(run);
    }
    std::fs::copy(probe_path, tmp.join("probe.toml")).map_err(|e| Error::io(probe_path, e))?;
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
    let docs = documents(command, &run, &pinned, &devices, &dir.display().to_string())?;
    for (name, text) in &docs {
        crate::files::write_file_quiet(tmp.join(name), text)?;
    }
    for name in ["probe.toml", "inputs.npz"].into_iter().chain(docs.iter().map(|(n, _)| n.as_str())) {
        files.insert(name.into(), hashed(&tmp.join(name))?);
    }
    let asked = Record::Run(asked.clone());
    Manifest { left_out, devices, ..Manifest::new((command, asked), dir, files, pinned) }.write(tmp)?;
    Ok(run)
}

/// The sha256 and size of a file written into the bundle.
pub fn hashed(path: &Path) -> Result<Hashed> {
    let (sha256, bytes) = sha256_file(path)?;
    Ok(Hashed { sha256, bytes })
}

/// What a person reads of a run, by its name in the bundle: `report.json`, `report.md`, the
/// figures (`figure-*.svg`) and `evidence.md`, rendered from the run. `verify` renders them
/// again from its replay and compares them with the bundle's, word by word and figure by figure.
pub fn documents(
    command: &str,
    run: &super::run::ProbeRun,
    pinned: &[Pinned],
    devices: &BTreeMap<String, DeviceFacts>,
    folder: &str,
) -> Result<Vec<(String, String)>> {
    let folder = Path::new(folder);
    let mut report = run.report.clone();
    report.notes.retain(|n| !super::spill::says_how_it_ran(n));
    let mut docs = vec![
        ("report.json".to_string(), crate::report::json::render(&report)),
        ("report.md".to_string(), crate::report::markdown::render(&report, Some(&folder.join("report.md")))),
    ];
    let svgs: Vec<(String, String)> = crate::report::svg::render(&report, &folder.join("figure"))?
        .into_iter()
        .map(|(p, svg)| (p.file_name().unwrap_or_default().to_string_lossy().to_string(), svg))
        .collect();
    let names: Vec<String> = svgs.iter().map(|(n, _)| n.clone()).collect();
    docs.extend(svgs);
    docs.push(("evidence.md".to_string(), evidence(command, run, pinned, &names, devices, folder)));
    Ok(docs)
}

/// The captures' hashes, by their paths in the bundle; those past `cap` bytes in all are
/// removed and listed apart.
fn keep_captures(captures: &Path, cap: u64) -> Result<(BTreeMap<String, Hashed>, Vec<Pinned>)> {
    let mut files = BTreeMap::new();
    let mut left_out = Vec::new();
    let mut held = 0u64;
    let mut names: Vec<PathBuf> = std::fs::read_dir(captures)
        .map_err(|e| Error::io(captures, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    names.sort();
    for p in names {
        let (sha256, bytes) = sha256_file(&p)?;
        let name = format!("captures/{}", p.file_name().unwrap_or_default().to_string_lossy());
        if held.saturating_add(bytes) > cap {
            std::fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
            left_out.push(Pinned { what: "a capture past the size cap".into(), path: name, sha256, bytes });
        } else {
            held += bytes;
            files.insert(name, Hashed { sha256, bytes });
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

/// Write a sweep's bundle: the probe (copied and pinned), its points (`points.json`), the
/// Markdown table, the checkpoint's files by sha256.
pub fn write_sweep(
    asked: &SweepRecord,
    command: &str,
    points_json: &str,
    markdown: &str,
    dir: &Path,
) -> Result<()> {
    staged(dir, |tmp| {
        crate::files::write_file_quiet(tmp.join("points.json"), points_json)?;
        crate::files::write_file_quiet(tmp.join("sweep.md"), markdown)?;
        std::fs::copy(&asked.probe, tmp.join("probe.toml")).map_err(|e| Error::io(&asked.probe, e))?;
        let mut files = BTreeMap::new();
        for name in ["points.json", "sweep.md", "probe.toml"] {
            files.insert(name.to_string(), hashed(&tmp.join(name))?);
        }
        let mut pinned = vec![pin("the probe", &asked.probe)?];
        pinned.extend(pin_checkpoint(asked.checkpoint.as_ref())?);
        let asked = Record::Sweep(asked.clone());
        Manifest::new((command, asked), dir, files, pinned).write(tmp)?;
        Ok(((), true))
    })
}
