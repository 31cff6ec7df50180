//! `hefprobe bench`: the flags of [`crate::bench`], which measures and prints.

use crate::error::Result;
use crate::model::synth::SynthSpec;
use crate::model::CheckpointRef;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Synth preset to measure (random weights of that shape; default smollm2-135m). With
    /// --suite: the suite's only shape instead of SmolLM2-135M and Qwen2.5-0.5B.
    #[arg(long, conflicts_with = "checkpoint")]
    pub preset: Option<String>,
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
    /// Threads for the decoder's kernels (default: every core). With --suite, a list
    /// (`1,2,4`) of at most 8 different counts: every row is measured at each count, side by
    /// side (each count is a whole suite's time).
    #[arg(long, value_name = "N[,N...]", value_parser = parse_threads)]
    pub threads: Option<ThreadList>,
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

/// The preset measured when neither --preset nor --checkpoint is given.
const DEFAULT_PRESET: &str = "smollm2-135m";

/// The most counts `--threads` takes: each count measures the whole suite again.
pub const MAX_COUNTS: usize = 8;

/// `--threads`: one count or a comma-separated list of at most [`MAX_COUNTS`] different counts,
/// each at least 1 (clap turns an error into exit 2 naming the flag).
pub fn parse_threads(s: &str) -> std::result::Result<ThreadList, String> {
    let fix = "give thread counts of at least 1, one or comma-separated (e.g. `--threads 1,2,4`)";
    if s.trim().is_empty() {
        return Err(format!("--threads is empty: {fix}"));
    }
    // Bounded before a count is read: a list of any length was a suite's time that many times.
    let n = s.split(',').count();
    if n > MAX_COUNTS {
        return Err(format!(
            "--threads lists {n} counts; at most {MAX_COUNTS} (each is a whole suite's time): {fix}"
        ));
    }
    let counts = s
        .split(',')
        .map(|part| {
            let p = part.trim();
            match p.parse::<usize>() {
                Ok(0) => Err(format!("--threads {s}: 0 threads measures nothing; {fix}")),
                Ok(n) => Ok(n),
                Err(_) if p.is_empty() => Err(format!("--threads {s}: an empty count in the list; {fix}")),
                Err(_) => Err(format!("--threads {s}: `{p}` is not a number; {fix}")),
            }
        })
        .collect::<std::result::Result<Vec<usize>, String>>()?;
    if let Some((i, t)) = counts.iter().enumerate().find(|(i, t)| counts[..*i].contains(t)) {
        return Err(format!("--threads {s}: {t} is listed twice (count {}); {fix}", i + 1));
    }
    Ok(ThreadList(counts))
}

/// The counts `--threads` gave, in order (a newtype: clap reads a bare Vec as repeated flags).
#[derive(Debug, Clone)]
pub struct ThreadList(pub Vec<usize>);

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    let model = match &a.checkpoint {
        Some(p) => CheckpointRef::path(p),
        None => CheckpointRef::Synth(SynthSpec::preset(a.preset.as_deref().unwrap_or(DEFAULT_PRESET), 0)?),
    };
    crate::bench::run(crate::bench::Settings {
        model,
        prompt_len: a.prompt_len,
        decode: a.decode,
        reps: a.reps,
        threads: a.threads.map(|t| t.0).unwrap_or_default(),
        suite_preset: if a.suite { a.preset } else { None },
        profile: a.profile,
        suite: a.suite,
        explain: a.explain,
        hf_python: a.hf_python,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_threads;

    #[test]
    fn threads_list_parses() {
        assert_eq!(parse_threads("4").unwrap().0, vec![4]);
        assert_eq!(parse_threads("1,2,4").unwrap().0, vec![1, 2, 4]);
        assert_eq!(parse_threads(" 1, 2 ").unwrap().0, vec![1, 2]);
    }

    #[test]
    fn threads_list_refuses_zero_empty_and_words() {
        for (bad, says) in [
            ("0", "0 threads"),
            ("1,0", "0 threads"),
            ("", "empty"),
            ("1,,2", "empty count"),
            ("1,two", "`two`"),
            ("-1", "`-1`"),
            ("1,2,3,4,5,6,7,8,9", "at most 8"),
            ("2,1,2", "listed twice"),
        ] {
            let e = parse_threads(bad).unwrap_err();
            assert!(
                e.contains("--threads") && e.contains(says) && e.contains("--threads 1,2,4"),
                "{bad}: {e}"
            );
        }
    }
}
