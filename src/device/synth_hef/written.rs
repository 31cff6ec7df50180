//! What `synth-hef` says it wrote.

use super::SynthHefOptions;
use crate::hef::Hef;
use crate::model::Checkpoint;
use crate::tap::Tap;
use std::path::{Path, PathBuf};

/// What `synth-hef` wrote: the facts its summary lines give (the command line prints them; the
/// Python module's `synth_hef` returns them).
#[derive(Debug, serde::Serialize)]
pub struct Written {
    pub path: PathBuf,
    pub groups: Vec<String>,
    pub checkpoint: String,
    pub hash: String,
    pub prefill_tokens: usize,
    pub kv_cache_size: usize,
    pub quant: String,
    pub faults: Vec<String>,
    pub mistakes: Vec<String>,
    pub exposed: Vec<String>,
    pub expose_quant: String,
    /// What calibrating had to change to fit the model (prompts cut to its positions), if anything.
    pub calibration_note: Option<String>,
}

impl Written {
    /// What writing `hef` (for `ckpt`, with `opts`) to `path` says.
    pub fn of(
        path: &Path,
        hef: &Hef,
        ckpt: &Checkpoint,
        opts: &SynthHefOptions,
        note: Option<String>,
    ) -> Self {
        Written {
            path: path.to_path_buf(),
            groups: hef.groups.iter().map(|g| g.name.clone()).collect(),
            checkpoint: ckpt.source.to_string(),
            hash: ckpt.hash.clone(),
            prefill_tokens: opts.prefill_tokens,
            kv_cache_size: opts.kv_cache_size,
            quant: opts.quant.setting.clone(),
            faults: opts.faults.iter().map(|f| f.text.clone()).collect(),
            mistakes: opts.mistakes.iter().map(|m| m.name().to_string()).collect(),
            exposed: opts.expose.iter().map(Tap::to_string).collect(),
            expose_quant: opts.expose_quant.name().to_string(),
            calibration_note: note,
        }
    }

    /// The summary lines `synth-hef` prints.
    pub fn lines(&self) -> Vec<String> {
        let listed = |what: &str, v: &[String]| {
            if v.is_empty() {
                String::new()
            } else {
                format!(", {what} {}", v.join(", "))
            }
        };
        let mut lines = vec![format!(
            "wrote {}: {} for {} ({}), prefill {} rows, kv cache {} slots, quant {}{}{}",
            self.path.display(),
            self.groups.join(" + "),
            self.checkpoint,
            self.hash,
            self.prefill_tokens,
            self.kv_cache_size,
            self.quant,
            listed("faults", &self.faults),
            listed("mistakes", &self.mistakes),
        )];
        if !self.exposed.is_empty() {
            lines.push(format!(
                "exposed outputs ({} quant infos): {}",
                self.expose_quant,
                self.exposed.join(", ")
            ));
        }
        lines.extend(self.calibration_note.as_ref().map(|n| format!("calibration: {n}")));
        lines
    }
}
