//! What a bundled command was asked: the part of its request that decides the numbers. The
//! request holds it (`request::run::Run::record`, the sweep's; a suite's is made from its
//! request in [`SuiteRecord`]'s one place); a bundle's manifest stores it as it ran, its paths
//! absolute; `verify` replays it, and checks that the bundle's command line asks the same
//! ([`Record::differs`]). Backends and bounds are written as the command line writes them and
//! read back by the command line's own parsers.

use super::run::{CaptureOptions, ExplainChoice, ProbeOverrides, RunOptions};
use crate::backend::spec::as_text as specs;
use crate::backend::BackendSpec;
use crate::compare::thresholds::{as_text as bounds, Bound};
use crate::model::CheckpointRef;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One of the three commands that write a bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum Record {
    Run(RunRecord),
    Suite(SuiteRecord),
    Sweep(SweepRecord),
}

/// `hefprobe run PROBE.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    /// The probe file (its relative paths are relative to it).
    pub probe: PathBuf,
    /// In place of the probe's backends (`--backend`, a `--fault` list as one emulator).
    #[serde(with = "specs")]
    pub backends: Vec<BackendSpec>,
    /// In place of the probe's checkpoint.
    #[serde(with = "model")]
    pub checkpoint: Option<CheckpointRef>,
    /// Extra bounds (`--threshold`).
    #[serde(with = "bounds")]
    pub thresholds: Vec<Bound>,
    pub no_explain: bool,
}

/// `hefprobe sweep PROBE.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepRecord {
    pub probe: PathBuf,
    /// In place of the probe's checkpoint, and of the sweep's model axis.
    #[serde(with = "model")]
    pub checkpoint: Option<CheckpointRef>,
}

/// `hefprobe suite`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteRecord {
    /// The suite file, or the probe files.
    pub inputs: Vec<PathBuf>,
    /// Targets in place of the suite's.
    #[serde(with = "specs")]
    pub backends: Vec<BackendSpec>,
    #[serde(with = "model")]
    pub checkpoint: Option<CheckpointRef>,
    pub baseline: Option<PathBuf>,
    pub no_explain: bool,
}

impl RunRecord {
    /// How the probe runs as asked, its captures kept as `captures` says.
    pub fn options(&self, captures: CaptureOptions, command: &str) -> RunOptions {
        RunOptions {
            probe: ProbeOverrides {
                backends: self.backends.clone(),
                checkpoint: self.checkpoint.clone(),
                thresholds: self.thresholds.clone(),
                explain: if self.no_explain { ExplainChoice::Off } else { ExplainChoice::AsProbe },
            },
            captures,
            command: command.to_string(),
        }
    }
}

/// The paths a record names, which a bundle records absolute.
pub trait Paths: Sized {
    /// Every path it names, in one order, to rewrite in place.
    fn paths_mut(&mut self) -> Vec<&mut PathBuf>;

    /// As a bundle records it: each path that names something here made absolute (a hub id
    /// stays as it is), so the bundle replays from any folder. Links are not followed: the
    /// recorded path ends in the path as typed, which is what [`Record::differs`] checks.
    fn absolute(mut self) -> Self {
        for p in self.paths_mut() {
            if let Some(Ok(abs)) = p.exists().then(|| std::path::absolute(&*p)) {
                *p = abs;
            }
        }
        self
    }
}

fn checkpoint_path(c: &mut Option<CheckpointRef>) -> Option<&mut PathBuf> {
    match c {
        Some(CheckpointRef::Path { path, .. }) => Some(path),
        _ => None,
    }
}

impl Paths for RunRecord {
    fn paths_mut(&mut self) -> Vec<&mut PathBuf> {
        let backends = self.backends.iter_mut().flat_map(BackendSpec::paths_mut);
        std::iter::once(&mut self.probe)
            .chain(backends)
            .chain(checkpoint_path(&mut self.checkpoint))
            .collect()
    }
}

impl Paths for SweepRecord {
    fn paths_mut(&mut self) -> Vec<&mut PathBuf> {
        std::iter::once(&mut self.probe).chain(checkpoint_path(&mut self.checkpoint)).collect()
    }
}

impl Paths for SuiteRecord {
    fn paths_mut(&mut self) -> Vec<&mut PathBuf> {
        let backends = self.backends.iter_mut().flat_map(BackendSpec::paths_mut);
        let checkpoint = checkpoint_path(&mut self.checkpoint);
        self.inputs.iter_mut().chain(backends).chain(checkpoint).chain(self.baseline.as_mut()).collect()
    }
}

impl Paths for Record {
    fn paths_mut(&mut self) -> Vec<&mut PathBuf> {
        match self {
            Record::Run(r) => r.paths_mut(),
            Record::Sweep(s) => s.paths_mut(),
            Record::Suite(s) => s.paths_mut(),
        }
    }
}

impl Record {
    /// What a command line asks (`typed`, its paths as typed) that this record, which a bundle
    /// replays, does not: None when every value is the same, a recorded absolute path counting
    /// as the same as a typed one it ends in; else the first value that differs, said.
    pub fn differs(&self, typed: &Record) -> Option<String> {
        if std::mem::discriminant(self) != std::mem::discriminant(typed) {
            return Some("it is a command of another kind".into());
        }
        let mut typed = typed.clone();
        let mut recorded = self.clone();
        for (r, t) in recorded.paths_mut().into_iter().zip(typed.paths_mut()) {
            if ends_in(r, t) {
                *t = r.clone();
            }
        }
        if recorded == typed {
            return None;
        }
        let value = |r: &Record| serde_json::to_value(r).expect("a record serializes");
        let (r, t) = (value(&recorded), value(&typed));
        let fields =
            |v: &serde_json::Value| v.as_object().and_then(|o| o.values().next()?.as_object().cloned());
        let (rf, tf) = (fields(&r).unwrap_or_default(), fields(&t).unwrap_or_default());
        let shown = |v: &serde_json::Value| {
            crate::error::echo(&v.as_str().map_or_else(|| v.to_string(), String::from), 120)
        };
        let first = rf.iter().find(|(k, v)| tf.get(*k) != Some(v));
        first.or_else(|| rf.iter().next()).map(|(k, v)| {
            let asks = tf.get(k).cloned().unwrap_or_default();
            format!("`{k}`: the command asks `{}`, the bundle replays `{}`", shown(&asks), shown(v))
        })
    }
}

/// A recorded absolute path that ends in the typed one (`./` left out of it), or the same.
pub fn ends_in(recorded: &Path, typed: &Path) -> bool {
    let tail: PathBuf = typed.components().filter(|c| *c != std::path::Component::CurDir).collect();
    recorded == typed || (recorded.is_absolute() && !tail.as_os_str().is_empty() && recorded.ends_with(&tail))
}

/// A checkpoint as a record holds it: its path (a folder, a `.gguf`, a hub id), revision and
/// whether unknown config keys are an error; none for a synthesized one (its probe names it).
mod model {
    use crate::model::CheckpointRef;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::path::PathBuf;

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Checkpoint {
        path: PathBuf,
        revision: String,
        #[serde(default)]
        strict_config: bool,
    }

    pub fn serialize<S: Serializer>(c: &Option<CheckpointRef>, s: S) -> Result<S::Ok, S::Error> {
        match c {
            Some(CheckpointRef::Path { path, revision, strict_config }) => Some(Checkpoint {
                path: path.clone(),
                revision: revision.clone(),
                strict_config: *strict_config,
            }),
            _ => None,
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CheckpointRef>, D::Error> {
        Ok(Option::<Checkpoint>::deserialize(d)?.map(|c| CheckpointRef::Path {
            path: c.path,
            revision: c.revision,
            strict_config: c.strict_config,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(probe: &str, backends: &[&str]) -> Record {
        let backends = backends.iter().map(|b| BackendSpec::parse_cli(b).unwrap()).collect();
        Record::Run(RunRecord { probe: probe.into(), backends, ..Default::default() })
    }

    #[test]
    fn a_command_asks_what_the_bundle_replays_when_each_recorded_path_ends_in_the_typed_one() {
        let recorded = run("/w/probes/p.toml", &["hef=/w/m.hef,map=/w/x/n.json", "emulator=rope-stride:2"]);
        let typed = run("./probes/p.toml", &["hef=m.hef,map=x/n.json", "emulator=rope-stride:2"]);
        assert_eq!(recorded.differs(&typed), None);
        for (typed, wrong) in [
            (run("probes/q.toml", &["hef=m.hef,map=x/n.json", "emulator=rope-stride:2"]), "`probe`"),
            (run("probes/p.toml", &["hef=other.hef,map=x/n.json", "emulator=rope-stride:2"]), "`backends`"),
            (run("probes/p.toml", &["hef=m.hef,map=x/n.json", "emulator=rope-stride:3"]), "`backends`"),
            (run("probes/p.toml", &["hef=m.hef,map=x/n.json"]), "`backends`"),
            (run("obes/p.toml", &["hef=m.hef,map=x/n.json", "emulator=rope-stride:2"]), "`probe`"),
        ] {
            let why = recorded.differs(&typed).unwrap_or_default();
            assert!(why.starts_with(wrong), "{typed:?}: {why}");
        }
        let sweep = Record::Sweep(SweepRecord { probe: "/w/probes/p.toml".into(), checkpoint: None });
        assert!(sweep.differs(&recorded).is_some());
    }

    #[test]
    fn a_record_reads_back_what_it_wrote() {
        let mut r = RunRecord {
            probe: "p.toml".into(),
            backends: vec![BackendSpec::parse_cli("dump=d.npz,map=m.toml,shards=3+4").unwrap()],
            checkpoint: Some(CheckpointRef::at("ORG/NAME", "abc")),
            thresholds: vec![Bound::parse("logits:kl_mean=0.01").unwrap()],
            no_explain: true,
        };
        let text = serde_json::to_string(&Record::Run(r.clone())).unwrap();
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), Record::Run(r.clone()));
        r.thresholds.clear();
        assert_ne!(serde_json::from_str::<Record>(&text).unwrap(), Record::Run(r));
        let bad = text.replace("dump=d.npz", "gpu=d.npz");
        assert!(serde_json::from_str::<Record>(&bad).unwrap_err().to_string().contains("--backend `gpu`"));
    }
}
