//! One measurement of the reference: what `bench` is asked to measure, prefill and decode timed
//! on one prompt, the median of repetitions, the process's peak memory; shared by `bench` and
//! its suite of shapes.

use crate::capture::TapSink;
use crate::error::{Error, Result};
use crate::model::cache::FullCache;
use crate::model::decoder::Decoder;
use crate::model::hooks::NoHooks;
use crate::model::CheckpointRef;
use crate::tap::Phase;
use std::path::PathBuf;
use std::time::Instant;

/// Most repetitions accepted: the median of more does not move, and a typo (`--reps 1000000`)
/// should not hold the machine for hours.
const MAX_REPS: usize = 100;

/// What to measure (the command line's `bench` flags).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The model measured: a synth preset's shape (random weights), or a checkpoint.
    pub model: CheckpointRef,
    pub prompt_len: usize,
    /// Decode steps measured after the prefill.
    pub decode: usize,
    /// Repetitions (the median is reported).
    pub reps: usize,
    /// Threads for the decoder's kernels (empty: every core). More than one count only with
    /// the suite, which measures each row at each count.
    pub threads: Vec<usize>,
    /// The suite's one shape (a synth preset) instead of its default shapes.
    pub suite_preset: Option<String>,
    /// Time the decoder per op class and print the table.
    pub profile: bool,
    /// Run the benchmark suite ([`suite`]) instead.
    pub suite: bool,
    /// Time explain on simulated HEFs of the model ([`explain`]) instead.
    pub explain: bool,
    /// Python with torch and transformers, for the suite's side-by-side figures.
    pub hf_python: Option<PathBuf>,
}

pub struct Figures {
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

/// One prefill of `prompt` then `decode` greedy steps; times of the prefill and of one step.
pub fn measure(model: &Decoder, prompt: &[u32], decode: usize, sink: &mut dyn TapSink) -> Result<Figures> {
    let mut cache = FullCache::with_capacity(model.cfg.num_layers, prompt.len() + decode);
    let t0 = Instant::now();
    let input = model.step_input(Phase::Prefill, prompt, 0)?;
    let logits = model.step(&input, &mut cache, sink, &mut NoHooks)?;
    let mut next = crate::model::decoder::argmax_last_row(&logits)?;
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    for k in 0..decode {
        let input = model.step_input(Phase::Decode(k), &[next], prompt.len() + k)?;
        let logits = model.step(&input, &mut cache, sink, &mut NoHooks)?;
        next = crate::model::decoder::argmax_last_row(&logits)?;
    }
    let decode_ms = t1.elapsed().as_secs_f64() * 1e3 / decode.max(1) as f64;
    Ok(Figures { prefill_ms, decode_ms })
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Peak resident set size so far (VmHWM), in MiB.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// The flags' bounds, checked before anything is built: each error names its flag.
pub fn check_args(a: &Settings, max_positions: Option<usize>) -> Result<()> {
    if a.reps == 0 || a.reps > MAX_REPS {
        return Err(Error::usage(format!("--reps {} is out of range: give 1 ..= {MAX_REPS}", a.reps)));
    }
    // More threads than 4 per core only measures the scheduler.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if a.threads.len() > 1 && !a.suite {
        return Err(Error::usage(format!(
            "--threads {}: a list of counts is measured by `bench --suite` only; give one count",
            a.threads.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(",")
        )));
    }
    if let Some(&t) = a.threads.iter().find(|&&t| t == 0 || t > 4 * cores) {
        return Err(Error::usage(format!(
            "--threads {t}: give 1 ..= {} (4 per core of this machine's {cores}; omit the flag for every core)",
            4 * cores
        )));
    }
    if a.prompt_len == 0 {
        return Err(Error::usage("--prompt-len 0: the prefill needs at least 1 token"));
    }
    if let Some(max) = max_positions {
        let total = a.prompt_len.saturating_add(a.decode);
        if total > max {
            return Err(Error::usage(format!(
                "--prompt-len {} plus --decode {} = {total} positions, beyond the model's \
                 max_position_embeddings = {max}: lower --prompt-len or --decode",
                a.prompt_len, a.decode
            )));
        }
    }
    Ok(())
}

pub fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("hefprobe-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    Ok(dir)
}

/// Say loudly, before any figure, that an emulator's figures mean nothing for a real CPU.
pub fn warn_emulated() {
    if let Some(why) = super::limits::emulation() {
        crate::outln!("note: {why}; every figure below measures the emulator, not a CPU, and means nothing");
    }
}
