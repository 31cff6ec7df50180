//! Command line: clap derive, one module per command, option groups flattened per concern. A
//! command turns its flags into a request (`crate::request`), runs it, and turns the result into
//! outputs ([`crate::report::deliver`]) and an exit code: nothing else.

pub mod audit;
mod bench;
mod bisect;
mod compare;
mod device;
mod doctor;
pub mod explain;
mod faults;
mod reduce;
pub mod reference;
pub mod run;
mod suite;
mod sweep;
mod synth;
pub mod synth_hef;
mod verify;

use crate::console::Stream;
use crate::error::{Error, Result};
use crate::model::CheckpointRef;
use crate::report::{Format, ReportTarget};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "hefprobe",
    version,
    about = "Numerics diagnostics for LLMs compiled to Hailo-10H HEF files",
    long_about = "Feeds identical inputs to a float32 reference and to other backends (a HEF on a \
                  device, recorded dumps, a fault emulator), compares every layer, head, position \
                  and phase, locates the first drift and ranks the fault models that explain it.\n\n\
                  Exit codes, the same for every command: 0 within thresholds, 1 drift beyond a \
                  threshold or a failed check, 2 input or usage error, 3 device or runtime error."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Memory the command may plan to use (512M, 23G, 8GB); sizes from files, flags and probes
    /// that need more are refused before anything is allocated. Default: what the process may
    /// take (the least of MemAvailable, `ulimit -v` and a container's cgroup limit, less what
    /// each holds); never more than a limit the kernel enforces.
    #[arg(long, global = true, value_name = "SIZE", value_parser = crate::budget::parse_size)]
    pub max_memory: Option<u64>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write a HF-format checkpoint with seeded random weights (no download needed).
    Synth(synth::SynthArgs),
    /// Run the float32 reference and write its taps as a capture (.npz).
    Reference(reference::ReferenceArgs),
    /// Run a probe: reference vs backends, compare, locate the first drift, explain, report.
    Run(run::RunArgs),
    /// Compare two captures (.npz) recorded anywhere.
    Compare(compare::CompareArgs),
    /// Rank the fault catalog by how well each fault reproduces an observed capture.
    Explain(explain::ExplainArgs),
    /// List the fault catalog; --matrix proves each fault is located and ranked first.
    Faults(faults::FaultsArgs),
    /// Run a probe across a grid (hidden sizes, quant settings, faults, prompt lengths).
    Sweep(sweep::SweepArgs),
    /// Check a HEF's structure (findings 1, 2, 3, 5, 12), or diff it against another.
    Audit(audit::AuditArgs),
    /// Write a simulated LLM HEF for a checkpoint (faults, quantization, structural mistakes).
    SynthHef(synth_hef::SynthHefArgs),
    /// On a device host: replay an InputSet through a HEF and record its outputs as a capture.
    Capture(device::CaptureArgs),
    /// Repeatability, prefill/decode parity and cache diff of a HEF against its checkpoint.
    Diagnose(device::DiagnoseArgs),
    /// On a device host, first: HailoRT, the device, the HEF's target and which diagnostics
    /// this device allows, in one table. Never waits on a device for more than 10 s.
    Doctor(doctor::DoctorArgs),
    /// Measure the reference: prefill and decode speed, taps off and on, peak memory.
    Bench(bench::BenchArgs),
    /// Probes × targets against a baseline, for nightly runs: JUnit, JSON, Markdown, HTML, history.
    Suite(suite::SuiteArgs),
    /// Merge the JSON summaries of a sharded suite run into the outputs one run would give.
    Merge(suite::MergeArgs),
    /// Plot a figure over the runs of a suite history, with its baseline band.
    Trend(suite::TrendArgs),
    /// Locate the first drifting layer on the device with prefix HEFs (plan, run, next).
    Bisect(bisect::BisectArgs),
    /// Shrink a probe's inputs while the same drift reproduces; write the minimal probe.
    Reduce(reduce::ReduceArgs),
    /// Replay an evidence bundle (`run --bundle DIR`): hashes, then every figure re-run.
    Verify(verify::VerifyArgs),
}

/// A checkpoint given on the command line: a folder, a `.gguf` file, or a hub id at a
/// revision. Every command that takes `--checkpoint` reads it through this one group.
#[derive(Args, Debug, Clone)]
pub struct CheckpointArgs {
    /// HF checkpoint folder (config.json + model.safetensors or a sharded index), a .gguf file,
    /// or a model id (ORG/NAME) already in the local Hugging Face hub cache (nothing is downloaded).
    #[arg(long, value_name = "DIR|FILE.gguf|ID")]
    pub checkpoint: Option<PathBuf>,
    /// With a model id: the branch, tag or full commit sha in the hub cache.
    #[arg(long, value_name = "REV", default_value = crate::model::hub::DEFAULT_REVISION, requires = "checkpoint")]
    pub revision: String,
    /// config.json keys hefprobe does not know are an error (exit 2) instead of a warning.
    #[arg(long, requires = "checkpoint")]
    pub strict_config: bool,
}

impl CheckpointArgs {
    pub fn to_ref(&self) -> Option<CheckpointRef> {
        self.checkpoint.as_ref().map(|path| CheckpointRef::Path {
            path: path.clone(),
            revision: self.revision.clone(),
            strict_config: self.strict_config,
        })
    }
}

/// Where the model comes from: a checkpoint or a synthesized preset.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    #[command(flatten)]
    pub from: CheckpointArgs,
    /// Synthesize the checkpoint in memory from a preset instead (see `hefprobe synth --help`).
    #[arg(long, value_name = "PRESET", conflicts_with = "checkpoint")]
    pub synth: Option<String>,
    /// Seed for --synth.
    #[arg(long, default_value_t = 0, requires = "synth")]
    pub synth_seed: u64,
}

impl ModelArgs {
    /// Whether a model was given at all.
    pub fn given(&self) -> bool {
        self.from.checkpoint.is_some() || self.synth.is_some()
    }

    pub fn to_ref(&self) -> Result<CheckpointRef> {
        crate::request::model(self.from.to_ref(), self.synth.as_deref(), self.synth_seed)
    }
}

/// Token ids as given on the command line: `1,2,3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids(pub Vec<u32>);

pub fn parse_ids(s: &str) -> std::result::Result<Ids, String> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u32>().map_err(|_| format!("`{t}` is not a token id")))
        .collect::<std::result::Result<Vec<u32>, String>>()
        .map(Ids)
}

/// Parse and run. Exit codes (README, "Exit codes"): 0 within thresholds, 1 drift or a failed
/// check (the command returns it), 2 input or usage error, 3 device or runtime error (both
/// decided by the error's type, [`Error::exit_code`]).
pub fn main() -> ExitCode {
    ExitCode::from(main_code(std::env::args_os()))
}

/// The command line as given (`main_code`'s), for [`run::command_line`]: the Python module's
/// console script runs inside an interpreter, whose own arguments are not hefprobe's.
static ARGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// [`main`] on these arguments (the first is the program's name), its exit code as a number
/// (the Python module's console script returns it).
pub fn main_code<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let _ = ARGS.set(args.iter().map(|a| a.to_string_lossy().into_owned()).collect());
    crate::console::end_process_on_failure(end);
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            if let Err(io) = e.print() {
                let stream = if e.use_stderr() { Stream::Stderr } else { Stream::Stdout };
                crate::console::fail(stream, &io);
            }
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => 2,
            };
        }
    };
    let result = run(cli);
    // Interrupted: the handler removes the spill folders and exits 130 (what the work ended in
    // meanwhile, e.g. a capture file removed under it, is not the run's outcome).
    crate::probe::cleanup::await_handler();
    match result {
        // Every command's code is one of these (an ExitCode cannot be read back, only compared).
        Ok(code) => [0, 1, 2, 3].into_iter().find(|&k| ExitCode::from(k) == code).unwrap_or(1),
        Err(e) => {
            report_error(&e);
            e.exit_code()
        }
    }
}

/// How the command ends when stdout or stderr fails ([`crate::console`]): the spill folders
/// removed, as on Ctrl-C, then the status.
fn end(status: u8) -> ! {
    crate::probe::cleanup::remove_spill_folders();
    std::process::exit(status.into())
}

/// Print an error and the causes its own message does not already say ([`Error::causes`]).
pub fn report_error(e: &Error) {
    crate::errln!("error: {e}");
    for cause in e.causes() {
        crate::errln!("  caused by: {cause}");
    }
}

/// A deprecated report flag was used (with its PATH, if it takes one): say once, on stderr, what
/// replaces it, and return the target it stands for.
pub fn deprecated(old: &str, format: Format, path: Option<&PathBuf>) -> ReportTarget {
    let f = format.name();
    let (old, new) = match path {
        Some(_) => (format!("{old} PATH"), format!("--report {f}=PATH")),
        None => (old.to_string(), format!("--report {f}")),
    };
    crate::errln!("note: {old} is deprecated and goes in the next release; use {new}");
    ReportTarget { format, path: path.cloned() }
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    if let Some(bytes) = cli.max_memory {
        crate::budget::set(crate::budget::Budget::new(bytes, "--max-memory"));
    }
    match cli.command {
        Command::Synth(a) => synth::run(a),
        Command::Reference(a) => reference::run(a),
        Command::Run(a) => run::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Explain(a) => explain::run(a),
        Command::Faults(a) => faults::run(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Audit(a) => audit::run(a),
        Command::SynthHef(a) => synth_hef::run(a),
        Command::Capture(a) => device::capture(a),
        Command::Diagnose(a) => device::diagnose(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Suite(a) => suite::suite(a),
        Command::Merge(a) => suite::merge(a),
        Command::Trend(a) => suite::trend(a),
        Command::Bisect(a) => bisect::run(a),
        Command::Reduce(a) => reduce::run(a),
        Command::Verify(a) => verify::run(a),
    }
}

/// The inputs of a run: prompt (ids or text), chunking and decode steps.
#[derive(Args, Debug, Clone, Default)]
pub struct PromptArgs {
    /// Prompt token ids: 1,2,3.
    #[arg(long, value_name = "IDS", value_parser = parse_ids, conflicts_with = "text")]
    pub tokens: Option<Ids>,
    /// Prompt text, tokenized with the checkpoint's tokenizer.json, a GGUF's own, or --tokenizer.
    #[arg(long)]
    pub text: Option<String>,
    /// tokenizer.json to use with --text (default: the checkpoint folder's).
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
    /// Let the tokenizer's post-processor add special tokens (a BOS). HailoRT's genai server
    /// does not (finding 6), so the default is off.
    #[arg(long)]
    pub add_special_tokens: bool,
    /// Greedy decode steps after the prompt.
    #[arg(long, value_name = "N", conflicts_with = "decode_tokens")]
    pub decode: Option<usize>,
    /// Teacher-forced decode tokens: step K feeds token K.
    #[arg(long, value_name = "IDS", value_parser = parse_ids)]
    pub decode_tokens: Option<Ids>,
    /// Prefill in chunks of N tokens, remainder first (as HailoRT feeds prompts).
    #[arg(long, value_name = "N")]
    pub chunk: Option<usize>,
    /// Absolute position of the first prompt token.
    #[arg(long, default_value_t = 0)]
    pub start_position: usize,
}

impl PromptArgs {
    /// The inputs as a probe's `[inputs]` table states them.
    pub fn spec(&self) -> crate::probe::schema::InputsSpec {
        crate::probe::schema::InputsSpec {
            tokens: self.tokens.as_ref().map(|t| t.0.clone()),
            text: self.text.clone(),
            tokenizer: self.tokenizer.clone(),
            add_special_tokens: self.add_special_tokens,
            chunk: self.chunk,
            decode: self.decode,
            decode_tokens: self.decode_tokens.as_ref().map(|t| t.0.clone()),
            start_position: self.start_position,
        }
    }

    /// Whether a prompt was given (`--tokens` or `--text`).
    pub fn given(&self) -> bool {
        self.tokens.is_some() || self.text.is_some()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
