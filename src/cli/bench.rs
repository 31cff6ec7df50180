//! `hefprobe bench`: the flags of [`crate::bench`], which measures and prints.

use crate::error::Result;
use crate::model::synth::SynthSpec;
use crate::model::CheckpointRef;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Synth preset to measure (random weights of that shape).
    #[arg(long, default_value = "smollm2-135m", conflicts_with = "checkpoint")]
    pub preset: String,
    /// Measure a checkpoint instead of a preset: a HF directory (or a .gguf file where
    /// `Checkpoint::load` reads them).
    #[arg(long, value_name = "DIR|FILE.gguf")]
    pub checkpoint: Option<PathBuf>,
    /// Prompt length for the prefill measurement (1 ..= max_position_embeddings - decode).
    #[arg(long, default_value_t = 128)]
    pub prompt_len: usize,
    /// Decode steps measured after the prefill.
    #[arg(long, default_value_t = 16)]
    pub decode: usize,
    /// Repetitions (the median is reported), 1 ..= 100.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Threads for the decoder's kernels (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Time the decoder per op class (prefill and decode, taps off) and print the table.
    #[arg(long)]
    pub profile: bool,
    /// Run the benchmark suite (SmolLM2-135M and Qwen2.5-0.5B shapes, prefill 128/1024,
    /// decode, taps off/on, 1 vs all threads) and print one table.
    #[arg(long)]
    pub suite: bool,
    /// Time explain on two simulated HEFs of the model (shared-softmax planted at layer 2, and
    /// clean): emulations per second, what reuse and early stopping saved, the exhaustive
    /// explain of the planted one beside it (with --profile: each explain's time per op class).
    #[arg(long, conflicts_with = "suite")]
    pub explain: bool,
    /// Python interpreter with torch and transformers (pins in references/requirements.txt):
    /// the suite then runs scripts/bench-hf.py on the same shapes and threads, side by side.
    #[arg(long, value_name = "PYTHON")]
    pub hf_python: Option<PathBuf>,
}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    let model = match &a.checkpoint {
        Some(p) => CheckpointRef::path(p),
        None => CheckpointRef::Synth(SynthSpec::preset(&a.preset, 0)?),
    };
    crate::bench::run(crate::bench::Settings {
        model,
        prompt_len: a.prompt_len,
        decode: a.decode,
        reps: a.reps,
        threads: a.threads,
        profile: a.profile,
        suite: a.suite,
        explain: a.explain,
        hf_python: a.hf_python,
    })
}
