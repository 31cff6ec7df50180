//! `hefprobe reference`: run the float32 reference and stream its taps into a capture.

use super::{bos_note, ModelArgs, PromptArgs};
use crate::error::Result;
use crate::model::hooks::NoHooks;
use crate::model::run::{run_inputs, RunRecord};
use crate::model::Decoder;
use crate::tap::{NpzSink, TapSelection};
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
}

pub fn run(a: ReferenceArgs) -> Result<ExitCode> {
    let ckpt = a.model.load()?;
    let inputs = a.prompt.input_set(&ckpt)?;
    let selection = TapSelection::parse(&a.taps)?;
    selection.check_against(ckpt.config.num_layers)?;
    let model = Decoder::new(&ckpt)?;
    let mut sink = NpzSink::create(&a.out, selection)?;
    let mut record = RunRecord::default();
    let result = run_inputs(&model, &inputs, &mut sink, &mut NoHooks, &mut record);
    // Keep what was finished even when a later phase failed.
    sink.finish()?;
    let c = &ckpt.config;
    println!(
        "reference: {} ({}, {} layers, hidden {}) · {} prompt tokens, {} · {}",
        ckpt.source,
        c.arch.name(),
        c.num_layers,
        c.hidden_size,
        inputs.prompt.len(),
        bos_note(inputs.bos_added),
        ckpt.hash
    );
    for (k, v) in &c.defaults_applied {
        println!("  config.json has no `{k}`: transformers' default {v} applied");
    }
    for ((phase, tokens, positions), argmax) in record.phases.iter().zip(&record.argmax) {
        let pos = match (positions.first(), positions.last()) {
            (Some(a), Some(b)) if a != b => format!("{a}..={b}"),
            (Some(a), _) => a.to_string(),
            _ => String::new(),
        };
        println!("  {phase:<10} {:>4} tokens  positions {pos:<10} next token {argmax}", tokens.len());
    }
    match result {
        Ok(_) => {
            println!("wrote {} ({} tensors)", a.out.display(), sink.written.len());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!(
                "wrote {} with the {} phases that finished ({} tensors); the run stopped:",
                a.out.display(),
                record.phases.len(),
                sink.written.len()
            );
            Err(e)
        }
    }
}
