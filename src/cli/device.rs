//! Device-side commands: `hefprobe capture` (replay an InputSet on a device host and record
//! what the HEF returns) and `hefprobe diagnose` (repeatability, prefill/decode parity, cache
//! diff).

use super::args::{command_line, deprecated, ModelArgs, PromptArgs};
use crate::device::SimProfile;
use crate::error::Result;
use crate::report::{deliver, Format, ReportTarget};
use crate::request::device::{CaptureRun, Diagnose};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct CaptureArgs {
    /// The HEF (simulated, or real with --features hailo).
    pub hef: PathBuf,
    /// The InputSet to replay (from `hefprobe run --save-inputs`).
    #[arg(long, value_name = "NPZ")]
    pub inputs: PathBuf,
    /// Output capture: PHASE/logits per phase, as the device returned them.
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// Also record every frame sent (embeddings, mask, RoPE, positions, cache offsets).
    #[arg(long, value_name = "NPZ")]
    pub record_frames: Option<PathBuf>,
    /// The simulated device for a simulated HEF: `sim` (default) or `sim-h10` (Hailo-10H's RPC
    /// client limits: no cache reads, a failed run poisons the model).
    #[arg(long, value_name = "DEVICE", value_parser = parse_device)]
    pub device: Option<SimProfile>,
    /// The network group to run: a prefill group (with its tbt partner) or a cache-less
    /// base-scope group, re-run whole in its one frame at every step (default: genai's choice).
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
}

pub(super) fn parse_device(s: &str) -> std::result::Result<SimProfile, String> {
    SimProfile::parse(s).map_err(|e| e.to_string())
}

pub fn capture(a: CaptureArgs) -> Result<ExitCode> {
    let out = a.out.clone();
    let request = CaptureRun {
        hef: a.hef,
        inputs: a.inputs,
        out: a.out,
        record_frames: a.record_frames,
        device: a.device,
        group: a.group,
    };
    let captured = request.run()?;
    if captured.phases > 0 {
        crate::outln!("{}: {} phases captured into {}", captured.description, captured.phases, out.display());
    }
    captured.error.map_or(Ok(ExitCode::SUCCESS), Err)
}

#[derive(Args, Debug)]
pub struct DiagnoseArgs {
    /// The HEF to diagnose.
    pub hef: PathBuf,
    /// The checkpoint the HEF was compiled from (the reference for parity and cache diff).
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Runs of the repeatability gate, 2 ..= 100 (each is one prefill and decode on the device).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..=100))]
    pub repeat: u16,
    /// Cache entries may differ from the reference's by this many quantization steps (default:
    /// each cache layer's own tolerance, from its scale and the calibration spread).
    #[arg(long)]
    pub lsb_tolerance: Option<u32>,
    /// The simulated device for a simulated HEF: `sim` (default) or `sim-h10`.
    #[arg(long, value_name = "DEVICE", value_parser = parse_device)]
    pub device: Option<SimProfile>,
    /// The prefill group to diagnose, with its tbt partner (default: genai's choice).
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// FORMAT=PATH, several allowed; FORMAT: terminal (the default, on stdout), markdown, json
    /// (every figure, schema hefprobe.diagnose/1); PATH `-` is stdout.
    #[arg(long = "report", value_name = "FORMAT=PATH", value_parser = ReportTarget::parse)]
    pub reports: Vec<ReportTarget>,
    /// Deprecated: --report json=PATH.
    #[arg(long, value_name = "PATH", hide = true)]
    pub json: Option<PathBuf>,
}

impl DiagnoseArgs {
    /// `--report` targets, the deprecated `--json` folded in (said once on stderr). The terminal
    /// report stays the default unless `--report` asks for something else: `--json PATH` alone
    /// printed it beside the file, and still does.
    fn targets(&self) -> Vec<ReportTarget> {
        let mut t = ReportTarget::or(self.reports.clone(), Format::Terminal);
        t.extend(self.json.as_ref().map(|p| deprecated("--json", Format::Json, Some(p))));
        t
    }
}

pub fn diagnose(a: DiagnoseArgs) -> Result<ExitCode> {
    let request = Diagnose {
        reports: a.targets(),
        hef: a.hef,
        model: a.model.to_ref()?,
        inputs: a.prompt.spec(),
        repeat: usize::from(a.repeat),
        lsb_tolerance: a.lsb_tolerance,
        device: a.device,
        group: a.group,
        command: command_line(),
    };
    let mut diagnosed = request.run()?;
    deliver(&mut diagnosed, &request.reports)?;
    Ok(if diagnosed.diagnosis.problems().is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
