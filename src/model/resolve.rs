//! One checkpoint resolver for every command, probe, sweep and suite: a checkpoint as a user
//! names it ([`CheckpointRef`]: a folder, a `.gguf` file, a hub id at a revision, or a synth
//! preset), resolved and loaded in one place, so they all accept and refuse the same things.

use super::synth::SynthSpec;
use super::Checkpoint;
use crate::error::Result;
use crate::output::Outputs;
use std::path::{Path, PathBuf};

/// Where a checkpoint comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckpointRef {
    /// A HF folder, a `.gguf` file, or a model id (ORG/NAME) in the local hub cache at
    /// `revision`; `strict_config`: config.json keys hefprobe does not know are an error.
    Path { path: PathBuf, revision: String, strict_config: bool },
    /// Weights hefprobe synthesizes from a preset.
    Synth(SynthSpec),
}

impl CheckpointRef {
    /// A model given as a checkpoint or a synthesized preset (`--checkpoint`, `--synth` and its
    /// seed): the one, or a refusal when neither was given.
    pub fn given(checkpoint: Option<CheckpointRef>, synth: Option<&str>, seed: u64) -> Result<Self> {
        match (checkpoint, synth) {
            (Some(c), _) => Ok(c),
            (None, Some(p)) => Ok(CheckpointRef::Synth(SynthSpec::preset(p, seed)?)),
            (None, None) => Err(crate::error::Error::usage(
                "no model: give --checkpoint DIR, or --synth PRESET for a synthesized one",
            )),
        }
    }

    /// A folder, `.gguf` file or hub id at `revision`, unknown config keys a warning (what a
    /// suite target's `checkpoint` key and a replayed bundle name).
    pub fn at(path: impl Into<PathBuf>, revision: &str) -> Self {
        CheckpointRef::Path { path: path.into(), revision: revision.into(), strict_config: false }
    }
}

impl Checkpoint {
    /// A HF folder (`config.json` and its weights), or a GGUF file (see [`super::gguf`]).
    pub fn load(path: &Path) -> Result<Self> {
        if path.is_dir() || !path.exists() {
            return Checkpoint::load_dir(path);
        }
        // A file: a GGUF, or named for what it is instead (never "directory not found").
        let head = crate::files::read_prefix(path, super::gguf::MAGIC.len() as u64)?;
        if head == super::gguf::MAGIC {
            return super::gguf::load(path);
        }
        let what = match head.len() {
            0 => "is an empty file".to_string(),
            _ => format!(
                "is not a GGUF file (it starts with bytes {}, not `GGUF`)",
                head.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
            ),
        };
        Err(crate::error::Error::input(
            path.display().to_string(),
            format!(
                "{what}: a checkpoint is a .gguf file, or a folder with config.json and model.safetensors"
            ),
        ))
    }
}

impl CheckpointRef {
    /// A folder, file or id at the default revision, unknown config keys accepted.
    pub fn path(path: &Path) -> Self {
        Self::at(path, super::hub::DEFAULT_REVISION)
    }

    /// The folder or file the argument names: a model id resolved to its hub-cache snapshot.
    pub fn resolved(&self) -> Result<Option<PathBuf>> {
        match self {
            CheckpointRef::Path { path, revision, .. } => Ok(Some(super::hub::resolve(path, revision)?)),
            CheckpointRef::Synth(_) => Ok(None),
        }
    }

    /// The checkpoint, loaded (refused with `strict_config` when config.json has keys hefprobe
    /// does not know).
    pub fn load(&self) -> Result<Checkpoint> {
        let _stage = crate::alloc::building(&"the checkpoint's weights");
        match self {
            CheckpointRef::Path { strict_config, .. } => {
                let dir = self.resolved()?.expect("a path resolves to a path");
                let ckpt = Checkpoint::load(&dir)?;
                if *strict_config {
                    ckpt.config.refuse_unknown_keys(&dir.join("config.json").display().to_string())?;
                }
                Ok(ckpt)
            }
            CheckpointRef::Synth(s) => s.build(),
        }
    }

    /// The checkpoint's config alone, no weight read: a preset's, a folder's config.json, a
    /// GGUF header's (what a suite checks its claims' taps against before anything runs).
    pub fn config(&self) -> Result<super::config::ModelConfig> {
        match self {
            CheckpointRef::Synth(s) => s.config(),
            CheckpointRef::Path { .. } => {
                let p = self.resolved()?.expect("a path resolves to a path");
                if p.is_dir() || !p.exists() {
                    super::config::ModelConfig::from_file(&p.join("config.json"))
                } else {
                    super::gguf::config::from_metadata(&super::gguf::GgufFile::open(&p)?)
                }
            }
        }
    }

    /// Register what this reads with the output checks (no output may be a file of it).
    pub fn register(&self, what: &str, outs: &mut Outputs) -> Result<()> {
        if let Some(dir) = self.resolved()? {
            outs.checkpoint(what, &dir);
        }
        Ok(())
    }
}
