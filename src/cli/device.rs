//! Device-side commands: `hefprobe capture` (replay an InputSet on a device host and record
//! what the HEF returns) and `hefprobe diagnose` (repeatability, prefill/decode parity, cache
//! diff).

use super::run::command_line;
use super::{deliver_all, deprecated, ModelArgs, PromptArgs};
use crate::backend::hef::{open_hef, HefBackend};
use crate::capture::MemorySink;
use crate::device::driver::write_frames;
use crate::device::SimProfile;
use crate::diagnose as diag;
use crate::diagnose::diagnosis::Diagnosis;
use crate::error::{Error, Result};
use crate::inputs::InputSet;
use crate::model::Decoder;
use crate::report::doc::{Doc, Text};
use crate::report::{only, Format, ReportTarget};
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
}

pub(super) fn parse_device(s: &str) -> std::result::Result<SimProfile, String> {
    SimProfile::parse(s).map_err(|e| e.to_string())
}

pub fn capture(a: CaptureArgs) -> Result<ExitCode> {
    let mut outs = crate::output::Outputs::new();
    outs.input("the HEF", &a.hef).input("--inputs", &a.inputs).binary("-o", &a.out);
    if let Some(p) = &a.record_frames {
        outs.binary("--record-frames", p);
    }
    outs.check()?;
    let inputs = InputSet::from_npz(&a.inputs)?;
    let mut backend = open_hef("device", &a.hef, a.device)?;
    if a.record_frames.is_some() {
        backend.driver.record = Some(Vec::new());
    }
    let desc = backend.description.clone();
    let mut sink = MemorySink::new(crate::tap::TapSelection::all());
    let result = backend.drive(&inputs, &crate::tap::TapSelection::all(), &mut sink, &mut Default::default());
    let cap = sink.capture;
    // A run refused or stopped before its first phase writes nothing over -o; one stopped
    // half-way keeps what finished, and says so (the error follows).
    if cap.phases().is_empty() {
        return result.map(|_| ExitCode::SUCCESS);
    }
    if result.is_err() {
        eprintln!("note: the run stopped; {} holds the phases that finished", a.out.display());
    }
    cap.write_npz(&a.out)?;
    if let (Some(p), Some(frames)) = (&a.record_frames, backend.driver.record.as_ref()) {
        write_frames(frames, p)?;
    }
    println!("{desc}: {} phases captured into {}", cap.phases().len(), a.out.display());
    result.map(|_| ExitCode::SUCCESS)
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

/// One format of diagnose's report: `device` is the line naming the device and HEF.
fn render(d: &Diagnosis, device: &str, hef: &std::path::Path, t: &ReportTarget) -> String {
    match t.format {
        Format::Json => d.to_json(),
        Format::Markdown => {
            let mut doc = Doc::new();
            doc.heading(1, Text::from("Diagnose ").and(Text::code(hef.display().to_string())));
            doc.fact(format!("device: {device}"))
                .fact(Text::from("command: ").and(Text::code(command_line())))
                .fact(format!("hefprobe {}", env!("CARGO_PKG_VERSION")));
            doc.append(d.markdown_doc());
            doc.markdown()
        }
        _ => {
            let mut doc = Doc::new();
            doc.line(device).append(d.doc());
            doc.terminal(false)
        }
    }
}

pub fn diagnose(a: DiagnoseArgs) -> Result<ExitCode> {
    let targets = a.targets();
    only(&targets, "diagnose", &[Format::Terminal, Format::Markdown, Format::Json])?;
    let mut outs = crate::output::Outputs::new();
    outs.input("the HEF", &a.hef);
    a.model.register(&mut outs)?;
    a.prompt.register(&mut outs);
    crate::report::register(&targets, &mut outs);
    outs.check()?;
    let ckpt = a.model.load()?;
    let mut inputs = a.prompt.input_set(&ckpt)?;
    inputs.chunk = None;
    let model = Decoder::new(&ckpt)?;
    let mut backend = crate::backend::hef::open("device", &a.hef, a.device, &ckpt)?;
    let desc = backend.description.clone();
    let HefBackend { driver, hef, .. } = &mut backend;

    let parity = diag::parity(driver, hef, &model, &inputs.prompt)?;
    let cache_tokens = inputs.prompt.len() - 1;
    // The cache diff never stops diagnose: over RPC it is unavailable, and any other failure is
    // reported beside the figures the other diagnostics have.
    let (cache, cache_unavailable, cache_failed) =
        match diag::cache_diff(driver, hef, &model, &inputs.prompt[..cache_tokens]) {
            Ok(rows) => (rows, None, false),
            Err(e @ Error::Unsupported(_)) => (Vec::new(), Some(diag::unavailable(&e)), false),
            Err(e) => (Vec::new(), Some(e.to_string()), true),
        };
    let repeatability = diag::repeatability(&mut backend, &inputs, usize::from(a.repeat))?;
    let d = Diagnosis {
        repeatability,
        parity,
        cache_tokens,
        cache,
        cache_unavailable,
        cache_failed,
        lsb_tolerance: a.lsb_tolerance,
    };
    deliver_all(&targets, |t| render(&d, &desc, &a.hef, t))?;
    Ok(if d.problems().is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
