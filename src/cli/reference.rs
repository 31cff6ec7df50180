//! `hefprobe reference`: run the float32 reference and stream its taps into a capture.

use super::{ModelArgs, PromptArgs};
use crate::capture::NpzSink;
use crate::error::Result;
use crate::inputs::InputSet;
use crate::model::hooks::NoHooks;
use crate::model::memory::{self, TapsHeld};
use crate::model::run::{run_inputs, RunRecord};
use crate::model::{Checkpoint, Decoder};
use crate::output::Outputs;
use crate::tap::TapSelection;
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

/// What `reference` runs, checked before any weight is read into the decoder: the checkpoint,
/// its inputs, the taps selected (checked against its layers, and against the memory budget as
/// `held`) and the decoder. The command line's, and the Python module's `reference`.
pub fn prepare(
    model: &ModelArgs,
    prompt: &PromptArgs,
    taps: &[String],
    held: TapsHeld,
) -> Result<(Checkpoint, InputSet, TapSelection, Decoder)> {
    let selection = TapSelection::parse(taps)?;
    let ckpt = model.load_quiet()?;
    let inputs = prompt.input_set(&ckpt)?;
    selection.check_against(ckpt.config.num_layers)?;
    memory::check_run(&ckpt, &inputs, &selection, held)?;
    let decoder = Decoder::new(&ckpt)?;
    Ok((ckpt, inputs, selection, decoder))
}

pub fn run(a: ReferenceArgs) -> Result<ExitCode> {
    let mut outs = Outputs::new();
    a.model.register(&mut outs)?;
    a.prompt.register(&mut outs);
    outs.binary("-o", &a.out).check()?;
    let (ckpt, inputs, selection, model) = prepare(&a.model, &a.prompt, &a.taps, TapsHeld::Streamed)?;
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
        inputs.bos_note(),
        ckpt.hash
    );
    for line in crate::report::format::config_notes(c) {
        println!("  {line}");
    }
    for ((phase, tokens, positions), argmax) in record.phases.iter().zip(&record.argmax) {
        let pos = match (positions.first(), positions.last()) {
            (Some(a), Some(b)) if a != b => format!("{a}..={b}"),
            (Some(a), _) => a.to_string(),
            _ => String::new(),
        };
        println!("  {phase:<10} {:>4} tokens  positions {pos:<10} next token {argmax}", tokens.len());
    }
    #[cfg(feature = "crosscheck")]
    if a.crosscheck && result.is_ok() {
        crosscheck(&ckpt, &model, &inputs, &record)?;
    }
    match result {
        Ok(_) => {
            println!("capture: {} ({} tensors)", a.out.display(), sink.written);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!(
                "note: {} holds the {} phases that finished ({} tensors); the run stopped:",
                a.out.display(),
                record.phases.len(),
                sink.written
            );
            Err(e)
        }
    }
}

/// Last-position logits of every phase against candle-transformers' model on the same weights.
#[cfg(feature = "crosscheck")]
fn crosscheck(
    ckpt: &crate::model::Checkpoint,
    model: &Decoder,
    inputs: &crate::inputs::InputSet,
    record: &RunRecord,
) -> Result<()> {
    use crate::capture::NoTaps;
    use crate::compare::metrics;
    use crate::model::cache::FullCache;
    use crate::model::decoder::StepInput;
    use crate::tap::Phase;
    if inputs.start_position != 0 {
        return Err(crate::error::Error::usage("--crosscheck runs from position 0; drop --start-position"));
    }
    let theirs =
        crate::model::crosscheck::candle_transformers_logits(ckpt, &inputs.prompt, &record.decode_tokens)?;
    let mut cache = FullCache::new(model.cfg.num_layers);
    let mut ours = Vec::new();
    let steps = std::iter::once(inputs.prompt.clone()).chain(record.decode_tokens.iter().map(|&t| vec![t]));
    let mut pos = inputs.start_position;
    for (k, tokens) in steps.enumerate() {
        let phase = if k == 0 { Phase::Prefill } else { Phase::Decode(k - 1) };
        let input = StepInput {
            phase,
            embeds: model.embed_tokens(&tokens)?,
            positions: (pos..pos + tokens.len()).collect(),
            frame: None,
        };
        pos += tokens.len();
        let l = model.step(&input, &mut cache, &mut NoTaps, &mut NoHooks)?;
        ours.push(l.get(tokens.len() - 1)?.to_vec1::<f32>()?);
    }
    let worst = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| metrics::compute(b, a, None))
        .fold((1f64, 0f64), |(c, m), x| (c.min(x.cosine), m.max(x.max_abs)));
    println!(
        "crosscheck vs candle-transformers: {} steps, worst cosine {:.9}, worst max |diff| {:.3e}",
        ours.len(),
        worst.0,
        worst.1
    );
    Ok(())
}
