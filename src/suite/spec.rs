//! The suite file (`SUITE.toml`): which probes (globs), against which targets (HEFs, dumps,
//! emulator settings), and the settings that judge them (repeatability gate, noise-band floors,
//! explain). A list of probe files on the command line is a suite too, each probe against its
//! own backends or the `--backend` targets. Unknown keys are errors naming the key.
//!
//! ```toml
//! version = 1
//! name = "nightly"
//! probes = ["probes/*.toml"]          # globs, relative to this file, never leaving its folder
//! exclude = ["probes/hidden-size-*"]
//! # root = "../catalog"               # or relative to (and confined below) this folder instead
//!
//! [[target]]
//! name = "tonight"                    # the label in every report and in the baseline
//! kind = "hef"
//! path = "build/model.hef"
//! revision = "4f2c1e9"                # optional; else PATH.rev, else --hef-revision
//! # checkpoint = "../models/smollm2"   # optional: this target's probes run on it
//!
//! [gate]                              # repeatability gate of device targets
//! runs = 3
//! min_cosine = 0.9999
//!
//! [band]                              # noise-band floors
//! cosine = 1e-4
//!
//! [explain]                           # explain confirmed failures
//! faults = ["shared-softmax@layers=0", "cache-layout:transpose"]
//!
//! [[finding]]                         # claims judged every run (`suite::findings`)
//! id = 11
//! probe = "shared-softmax"
//! expect = "fixed"
//! explained_by = "shared-softmax"
//! ```

use crate::backend::{BackendKind, BackendSpec};
use crate::error::{Error, Result};
use crate::model::CheckpointRef;
use crate::output::Outputs;
use crate::probe::schema::Probe;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const SUITE_VERSION: u32 = 1;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    version: u32,
    name: Option<String>,
    probes: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    /// The folder the globs are relative to and confined below (relative to the suite file);
    /// default: the suite file's own folder.
    root: Option<PathBuf>,
    #[serde(default, rename = "target")]
    targets: Vec<TargetSpec>,
    #[serde(default)]
    gate: GateSpec,
    #[serde(default)]
    band: BandFloors,
    #[serde(default)]
    explain: ExplainSettings,
    /// Findings as assertions (`suite::findings`).
    #[serde(default, rename = "finding")]
    findings: Vec<Claim>,
    /// Extra bounds for every probe, as `--threshold` takes them.
    #[serde(default)]
    thresholds: Vec<String>,
}

/// One `[[target]]`: a probe's `[[backend]]` table, plus the build's revision.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    pub spec: BackendSpec,
    /// The git revision the HEF was built from.
    pub revision: Option<String>,
    /// The checkpoint this target runs every probe on (a folder, a .gguf, a hub id), instead of
    /// `--checkpoint` or each probe's own.
    pub checkpoint: Option<PathBuf>,
}

/// By hand, as `[checkpoint]` is: `revision` is taken out, and [`BackendSpec`] (which refuses
/// unknown keys) reads the rest.
impl<'de> Deserialize<'de> for TargetSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut table = toml::Table::deserialize(d)?;
        let revision = crate::probe::schema::take(&mut table, "revision")?;
        let checkpoint = crate::probe::schema::take(&mut table, "checkpoint")?;
        let spec = BackendSpec::deserialize(toml::Value::Table(table)).map_err(D::Error::custom)?;
        Ok(TargetSpec { spec, revision, checkpoint })
    }
}

/// A target as the suite runs it: its label, the backend it is, the build's revision.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub label: String,
    pub spec: BackendSpec,
    pub revision: Option<String>,
    /// Its own checkpoint (relative paths resolved from the suite file; a hub id as given).
    pub checkpoint: Option<PathBuf>,
}

/// The repeatability gate: the same InputSet `runs` times on a device before any comparison.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GateSpec {
    pub runs: usize,
    /// The lowest logits cosine allowed between two runs of the same inputs. The default keeps
    /// a device's own noise under a tenth of the slack of the default bound (cosine ≥ 0.999,
    /// compare/thresholds.rs), so noise alone cannot carry a pair across a threshold.
    pub min_cosine: f64,
}

impl Default for GateSpec {
    fn default() -> Self {
        GateSpec { runs: 3, min_cosine: 0.9999 }
    }
}

/// The least a figure must worsen, against its baseline, to be a regression; the device's own
/// run-to-run spread widens it (see [`super::figures::Band`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BandFloors {
    /// Cosine points.
    pub cosine: f64,
    /// Decibels.
    pub sqnr_db: f64,
    /// Nats of mean KL divergence.
    pub kl: f64,
    /// Share of positions whose argmax agrees (0.05 = 5 points: one flip in a 20-token prefill).
    pub argmax: f64,
}

impl Default for BandFloors {
    fn default() -> Self {
        BandFloors { cosine: 1e-4, sqnr_db: 1.0, kl: 1e-4, argmax: 0.05 }
    }
}

/// Whether confirmed failures are explained, and against which faults (default: each probe's
/// own `[explain]`, over the whole catalog). Explaining ranks every fault by emulating it, so a
/// nightly job may want a short list.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ExplainSettings {
    pub enabled: bool,
    pub faults: Option<Vec<crate::fault::spec::FaultSpec>>,
}

impl Default for ExplainSettings {
    fn default() -> Self {
        ExplainSettings { enabled: true, faults: None }
    }
}

crate::named_enum! {
    /// What the findings log says of a finding today.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Expect {
        #[default]
        Reproduces = "reproduces",
        Fixed = "fixed",
    }
}

/// A figure past a bound: `below` for cosine, SQNR and argmax agreement; `above` for KL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricClaim {
    pub tap: String,
    pub figure: String,
    pub below: Option<f64>,
    pub above: Option<f64>,
}

/// One `[[finding]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub id: u32,
    #[serde(default)]
    pub title: Option<String>,
    pub probe: String,
    #[serde(default)]
    pub targets: Vec<String>,
    #[serde(default)]
    pub expect: Expect,
    #[serde(default)]
    pub fail_if_stops: bool,
    #[serde(default)]
    pub first_drift: Option<String>,
    #[serde(default)]
    pub explained_by: Option<String>,
    #[serde(default)]
    pub metric: Option<MetricClaim>,
}

/// A suite, loaded: its probes in order and the targets they run against.
#[derive(Debug, Clone, Default)]
pub struct Suite {
    pub name: String,
    pub file: Option<PathBuf>,
    pub probes: Vec<Probe>,
    /// Empty: every probe against its own `[[backend]]`s.
    pub targets: Vec<Target>,
    pub gate: GateSpec,
    pub floors: BandFloors,
    pub explain: ExplainSettings,
    pub thresholds: Vec<crate::compare::thresholds::Bound>,
    pub findings: Vec<Claim>,
}

/// Whether `path` is a suite file (it has a top-level `probes` list) rather than a probe.
pub fn is_suite_file(path: &Path) -> Result<bool> {
    let text = crate::files::read_text(path, crate::files::Kind::Suite)?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| Error::input(path.display().to_string(), e.to_string().trim_end().to_string()))?;
    Ok(table.contains_key("probes"))
}

impl Suite {
    pub fn load(path: &Path) -> Result<Suite> {
        let what = path.display().to_string();
        let text = crate::files::read_text(path, crate::files::Kind::Suite)?;
        let f: SuiteFile =
            toml::from_str(&text).map_err(|e| Error::input(&what, e.to_string().trim_end().to_string()))?;
        if f.version != SUITE_VERSION {
            return Err(Error::input(
                format!("{what} key `version`"),
                format!(
                    "{} is not a suite schema version this hefprobe reads (it reads {SUITE_VERSION})",
                    f.version
                ),
            ));
        }
        let base = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let root = f.root.as_ref().map_or_else(|| base.to_path_buf(), |r| base.join(r));
        if !root.is_dir() {
            return Err(Error::input(
                format!("{what} key `root`"),
                format!("{} is not a folder", root.display()),
            ));
        }
        // The filesystem's root holds /proc and every mount: a `**` glob there walks them all.
        if root.canonicalize().is_ok_and(|r| r.parent().is_none()) {
            return Err(Error::input(
                format!("{what} key `root`"),
                format!("{} is the filesystem's root; name the folder that holds the probes", root.display()),
            ));
        }
        let paths = expand(&f.probes, &f.exclude, &root, &what)?;
        let probes = paths.iter().map(|p| Probe::load(p)).collect::<Result<Vec<_>>>()?;
        let targets = f.targets.iter().map(|t| target_from_file(t, base)).collect::<Result<Vec<_>>>()?;
        let name = f.name.unwrap_or_else(|| {
            path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| "suite".into())
        });
        let suite = Suite {
            name,
            file: Some(path.to_path_buf()),
            probes,
            targets,
            gate: f.gate,
            floors: f.band,
            explain: f.explain,
            thresholds: crate::compare::thresholds::Bound::parse_all(&f.thresholds)
                .map_err(|e| Error::input(format!("{what} key `thresholds`"), e.to_string()))?,
            findings: f.findings,
        };
        suite.check(&what)?;
        suite.check_findings(&what)?;
        Ok(suite)
    }

    /// The probes given on the command line, as a suite with default settings.
    /// The suite a run is given: one SUITE.toml, or probe files, with `backends` (when given)
    /// as its targets.
    pub fn open(inputs: &[PathBuf], backends: &[BackendSpec]) -> Result<Suite> {
        let mut suite = match inputs {
            [one] if is_suite_file(one)? => Suite::load(one)?,
            many => {
                if let Some(s) = many.iter().find(|p| is_suite_file(p).unwrap_or(false)) {
                    return Err(Error::usage(format!(
                        "{} is a suite file: give it alone, or give probe files only",
                        s.display()
                    )));
                }
                Suite::from_probes(many)?
            }
        };
        if !backends.is_empty() {
            suite.set_cli_targets(backends)?;
        }
        Ok(suite)
    }

    /// Everything a suite run reads: the suite file, each probe's inputs, each target's files and
    /// checkpoint, the given checkpoint. A checkpoint that does not resolve is left to the run,
    /// which reports it on its pairs.
    pub fn inputs(&self, checkpoint: Option<&CheckpointRef>, spill_dir: Option<&Path>) -> Result<Outputs> {
        let mut outs = Outputs::new();
        if let Some(f) = &self.file {
            outs.input("the suite", f);
        }
        let specs: Vec<_> = self.targets.iter().map(|t| t.spec.clone()).collect();
        for p in &self.probes {
            outs.input("a probe", &p.path); // named as one of many (probe_inputs says "the probe")
            crate::probe::prepare::register_inputs(p, checkpoint, &specs, &mut outs)?;
        }
        for t in &self.targets {
            if let Some(c) = &t.checkpoint {
                let c = CheckpointRef::at(c, crate::model::hub::DEFAULT_REVISION);
                let _ = c.register(&format!("the checkpoint of target `{}`", t.label), &mut outs);
            }
        }
        if let Some(d) = spill_dir {
            outs.dir("--spill-dir", d);
        }
        Ok(outs)
    }

    pub fn from_probes(paths: &[PathBuf]) -> Result<Suite> {
        let probes = paths.iter().map(|p| crate::probe::catalog::open(p)).collect::<Result<Vec<_>>>()?;
        let suite = Suite { name: "probes".into(), probes, ..Suite::default() };
        suite.check("the command line")?;
        Ok(suite)
    }

    /// Replace the targets with the command line's `--backend` specs.
    pub fn set_cli_targets(&mut self, specs: &[BackendSpec]) -> Result<()> {
        self.targets = specs
            .iter()
            .map(|s| Target { label: default_label(s), spec: s.clone(), revision: None, checkpoint: None })
            .collect();
        self.check("--backend")?;
        self.check_findings("--backend")
    }

    fn check_findings(&self, what: &str) -> Result<()> {
        let probes: Vec<&str> = self.probes.iter().map(|p| p.name.as_str()).collect();
        let targets: Vec<&str> = self.targets.iter().map(|t| t.label.as_str()).collect();
        let mut ids = std::collections::HashSet::new();
        for c in &self.findings {
            if !ids.insert(c.id) {
                return Err(Error::input(
                    format!("{what} [[finding]] id {}", c.id),
                    "is stated twice; one table per finding",
                ));
            }
            c.check(what, &probes, &targets)?;
        }
        Ok(())
    }

    /// Each claim's taps and fault on every model its pairs run on (`checkpoint`: the command
    /// line's in place of each probe's), before anything runs; a checkpoint that does not
    /// resolve is left to the run, which reports it on its pairs.
    pub fn check_claims_on(&self, checkpoint: Option<&CheckpointRef>) -> Result<()> {
        let what = self.file.as_ref().map_or_else(|| "the command line".into(), |f| f.display().to_string());
        for c in &self.findings {
            let Some(probe) = self.probes.iter().find(|p| p.name == c.probe) else { continue };
            let own = checkpoint.cloned().map_or_else(|| probe.checkpoint.to_ref(), Ok);
            let named: Vec<&Target> = self
                .targets
                .iter()
                .filter(|t| c.targets.is_empty() || c.targets.contains(&t.label))
                .collect();
            let mut models: Vec<Result<CheckpointRef>> = named
                .iter()
                .filter_map(|t| t.checkpoint.as_ref())
                .map(|p| Ok(CheckpointRef::at(p, crate::model::hub::DEFAULT_REVISION)))
                .collect();
            if named.is_empty() || named.iter().any(|t| t.checkpoint.is_none()) {
                models.push(own);
            }
            for cfg in models.into_iter().filter_map(|m| m.and_then(|m| m.config()).ok()) {
                c.check_on(&what, Some(cfg.num_layers))?;
            }
        }
        Ok(())
    }

    fn check(&self, what: &str) -> Result<()> {
        if self.probes.is_empty() {
            return Err(Error::input(
                what,
                "names no probe; give probe files or `probes = [\"probes/*.toml\"]`",
            ));
        }
        let pairs = self.probes.len().saturating_mul(self.targets.len().max(1));
        if pairs > MAX_PAIRS {
            return Err(Error::input(
                what,
                format!(
                    "plans {pairs} pairs ({} probes × {} targets); a suite runs at most {MAX_PAIRS}: split it",
                    self.probes.len(),
                    self.targets.len()
                ),
            ));
        }
        let mut seen: std::collections::HashMap<&str, &Path> = std::collections::HashMap::new();
        for p in &self.probes {
            if let Some(other) = seen.get(p.name.as_str()) {
                return Err(Error::input(
                    what,
                    format!(
                        "probes {} and {} are both named `{}`; pairs and baselines are keyed by probe name",
                        other.display(),
                        p.path.display(),
                        p.name
                    ),
                ));
            }
            seen.insert(&p.name, &p.path);
        }
        let mut labels = std::collections::HashSet::new();
        for t in &self.targets {
            if !labels.insert(t.label.as_str()) {
                return Err(Error::input(
                    what,
                    format!("two targets are labelled `{}`; give each a `name` in a suite file", t.label),
                ));
            }
        }
        if self.gate.runs < 2 {
            return Err(Error::input(format!("{what} [gate] runs"), "needs at least 2 runs to compare"));
        }
        Ok(())
    }
}

/// The most probe files a suite's globs may match, and the most pairs (probes × targets) a
/// suite may plan: past these a glob or a target list is a mistake, refused before any work.
pub const MAX_PROBES: usize = 10_000;
pub const MAX_PAIRS: usize = 100_000;

/// Probe files matching `globs` (relative to and confined below `base`: no absolute glob, no
/// `..`), less `exclude`, sorted and de-duplicated (the order of pairs in every report and
/// shard); at most [`MAX_PROBES`] of them.
fn expand(globs: &[String], exclude: &[String], base: &Path, what: &str) -> Result<Vec<PathBuf>> {
    let key = format!("{what} probes");
    let confined = |g: &str| -> Result<PathBuf> {
        let rel = Path::new(g);
        let leaves = rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
        if leaves {
            return Err(Error::input(
                &key,
                format!(
                    "`{g}` leaves the suite's folder {}: globs are relative to it and stay below it (set \
                     `root = \"...\"` to search another folder)",
                    base.display()
                ),
            ));
        }
        Ok(base.join(g))
    };
    let pattern = |g: &str| -> Result<glob::Pattern> {
        glob::Pattern::new(&confined(g)?.to_string_lossy())
            .map_err(|e| Error::input(&key, format!("`{g}` is not a glob: {e}")))
    };
    let excluded = exclude.iter().map(|g| pattern(g)).collect::<Result<Vec<_>>>()?;
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for g in globs {
        let matches = glob::glob(&confined(g)?.to_string_lossy())
            .map_err(|e| Error::input(&key, format!("`{g}` is not a glob: {e}")))?;
        let mut found = Vec::new();
        for p in matches.filter_map(|m| m.ok()).filter(|p| p.is_file()) {
            if found.len() == MAX_PROBES {
                return Err(Error::input(
                    &key,
                    format!(
                        "`{g}` matches more than {MAX_PROBES} files; narrow it (a suite names its probes)"
                    ),
                ));
            }
            found.push(p);
        }
        if found.is_empty() {
            return Err(Error::input(&key, format!("`{g}` matches no file")));
        }
        found.sort();
        for p in found {
            if !excluded.iter().any(|x| x.matches_path(&p)) && seen.insert(p.clone()) {
                out.push(p);
            }
        }
        if out.len() > MAX_PROBES {
            return Err(Error::input(&key, format!("match more than {MAX_PROBES} probe files; narrow them")));
        }
    }
    Ok(out)
}

fn target_from_file(t: &TargetSpec, base: &Path) -> Result<Target> {
    let mut spec = t.spec.clone();
    spec.relative_to(base);
    if matches!(spec.kind, BackendKind::Hef | BackendKind::Dump) {
        spec.path()?;
    }
    let label = spec.name.clone().unwrap_or_else(|| default_label(&spec));
    let checkpoint = t.checkpoint.as_ref().map(|c| match base.join(c) {
        here if c.is_relative() && here.exists() => here,
        _ => c.clone(),
    });
    Ok(Target { label, spec, revision: t.revision.clone(), checkpoint })
}

/// A file's stem for HEFs and dumps (`model.hef` → `model`): nightly builds keep their file
/// names, so the label — and the baseline's key — stays the same from night to night.
fn default_label(spec: &BackendSpec) -> String {
    match (spec.kind, &spec.path) {
        (BackendKind::Hef | BackendKind::Dump, Some(p)) => {
            p.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| spec.label())
        }
        _ => spec.label(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const PROBE: &str =
        "version = 1\nname = \"NAME\"\nquestion = \"q?\"\n[checkpoint]\nsynth = \"tinystories\"\n\
                         [inputs]\ntokens = [1, 2, 3]\n";

    #[test]
    fn a_suite_file_expands_globs_in_order_and_resolves_paths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("p")).unwrap();
        for n in ["b", "a", "skip"] {
            write(&dir.path().join("p"), &format!("{n}.toml"), &PROBE.replace("NAME", n));
        }
        let suite = write(
            dir.path(),
            "SUITE.toml",
            "version = 1\nprobes = [\"p/*.toml\"]\nexclude = [\"p/skip.toml\"]\n\
             [[target]]\nname = \"tonight\"\nkind = \"hef\"\npath = \"m.hef\"\nrevision = \"abc\"\n\
             [gate]\nruns = 2\n",
        );
        assert!(is_suite_file(&suite).unwrap());
        let s = Suite::load(&suite).unwrap();
        let names: Vec<&str> = s.probes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(s.name, "SUITE");
        assert_eq!(s.targets[0].label, "tonight");
        assert_eq!(s.targets[0].spec.path.as_deref(), Some(dir.path().join("m.hef").as_path()));
        assert_eq!((s.gate.runs, s.gate.min_cosine), (2, 0.9999));
    }

    #[test]
    fn mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.toml", &PROBE.replace("NAME", "a"));
        let typo = write(dir.path(), "S.toml", "version = 1\nprobes = [\"a.toml\"]\n[gate]\nrunz = 2\n");
        let e = Suite::load(&typo).unwrap_err().to_string();
        assert!(e.contains("S.toml") && e.contains("runz"), "{e}");
        let none = write(dir.path(), "N.toml", "version = 1\nprobes = [\"nothing/*.toml\"]\n");
        let e = Suite::load(&none).unwrap_err().to_string();
        assert!(e.contains("matches no file"), "{e}");
        let mut s = Suite::from_probes(&[dir.path().join("a.toml")]).unwrap();
        let cli =
            |specs: &[&str]| specs.iter().map(|s| BackendSpec::parse_cli(s).unwrap()).collect::<Vec<_>>();
        let e = s.set_cli_targets(&cli(&["hef=x/m.hef", "hef=y/m.hef"])).unwrap_err().to_string();
        assert!(e.contains("two targets are labelled `m`"), "{e}");
        s.set_cli_targets(&cli(&["hef=x/tonight.hef", "emulator=shared-softmax"])).unwrap();
        let labels: Vec<&str> = s.targets.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["tonight", "emulator[shared-softmax]"]);
    }
}
