//! `hefprobe reference`: run the float32 reference and stream its taps into a capture.

use super::args::{ModelArgs, PromptArgs};
use crate::error::Result;
use crate::request::reference::{Reference, Referenced};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ReferenceArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Taps to record, as globs (`layers.*.attn.probs`, `logits`); default all.
    #[arg(long, value_name = "GLOB", num_args = 1.., default_value = "*")]
    pub taps: Vec<String>,
    /// Output capture (.npz, keys PHASE/TAP).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// Also run candle-transformers' own llama/qwen2 on the same weights and report how its
    /// last-position logits agree with the reference's (an independent implementation).
    #[cfg(feature = "crosscheck")]
    #[arg(long)]
    pub crosscheck: bool,
}

pub fn run(a: ReferenceArgs) -> Result<ExitCode> {
    let request = Reference {
        model: a.model.to_ref()?,
        inputs: a.prompt.spec(),
        taps: crate::tap::TapSelection::parse(&a.taps)?,
        out: Some(a.out.clone()),
        #[cfg(feature = "crosscheck")]
        crosscheck: a.crosscheck,
        #[cfg(not(feature = "crosscheck"))]
        crosscheck: false,
    };
    let Referenced { ckpt, inputs, record, written, crosscheck, error, .. } = request.run()?;
    let c = &ckpt.config;
    crate::outln!(
        "reference: {} ({}, {} layers, hidden {}) · {} prompt tokens, {} · {}",
        ckpt.source,
        c.arch.name(),
        c.num_layers,
        c.hidden_size,
        inputs.prompt.len(),
        inputs.bos_note(),
        ckpt.hash
    );
    for line in crate::report::format::config_notes(c) {
        crate::outln!("  {line}");
    }
    for ((phase, tokens, positions), argmax) in record.phases.iter().zip(&record.argmax) {
        let pos = match (positions.first(), positions.last()) {
            (Some(a), Some(b)) if a != b => format!("{a}..={b}"),
            (Some(a), _) => a.to_string(),
            _ => String::new(),
        };
        crate::outln!("  {phase:<10} {:>4} tokens  positions {pos:<10} next token {argmax}", tokens.len());
    }
    if let Some((steps, cos, max)) = crosscheck {
        crate::outln!(
            "crosscheck vs candle-transformers: {steps} steps, worst cosine {cos:.9}, worst max |diff| {max:.3e}"
        );
    }
    match error {
        None => {
            crate::outln!("capture: {} ({written} tensors)", a.out.display());
            Ok(ExitCode::SUCCESS)
        }
        Some(e) => {
            crate::errln!(
                "note: {} holds the {} phases that finished ({written} tensors); the run stopped:",
                a.out.display(),
                record.phases.len(),
            );
            Err(e)
        }
    }
}
