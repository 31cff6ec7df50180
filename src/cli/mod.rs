//! Command line: clap derive, one module per command, option groups flattened per concern. A
//! command turns its flags into a request (`crate::request`), runs it, and turns the result into
//! outputs ([`crate::report::deliver`]) and an exit code: nothing else.

mod args;
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
use crate::probe::record::{Record, SweepRecord};
use clap::{Parser, Subcommand};
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

/// Parse and run. Exit codes (README, "Exit codes"): 0 within thresholds, 1 drift or a failed
/// check (the command returns it), 2 input or usage error, 3 device or runtime error (both
/// decided by the error's type, [`Error::exit_code`]).
pub fn main() -> ExitCode {
    ExitCode::from(main_code(std::env::args_os()))
}

/// [`main`] on these arguments (the first is the program's name), its exit code as a number
/// (the Python module's console script returns it).
pub fn main_code<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let _ = args::ARGS.set(args.iter().map(|a| a.to_string_lossy().into_owned()).collect());
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
        Command::Verify(a) => verify::run(a, asked),
    }
}

/// A bundle's recorded command line read as this command line reads it: the record it asks
/// for, and its `--bundle` folder (`verify` compares the record with the bundle's).
fn asked(line: &str) -> (Option<PathBuf>, Result<Record>) {
    match Cli::try_parse_from(args::unquote(line)).map(|c| c.command) {
        Ok(Command::Run(a)) => (a.bundle.clone(), run::request(a).map(|r| Record::Run(r.record))),
        Ok(Command::Suite(a)) => (a.bundle.clone(), suite::request(a).map(|r| Record::Suite(r.record()))),
        Ok(Command::Sweep(a)) => {
            (a.bundle, Ok(Record::Sweep(SweepRecord { probe: a.probe, checkpoint: a.checkpoint.to_ref() })))
        }
        _ => (None, Err(Error::usage("not a bundle's"))),
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
