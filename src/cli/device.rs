//! Device-side commands: `hefprobe capture` (replay an InputSet on a device host and record
//! what the HEF returns) and `hefprobe diagnose` (repeatability, prefill/decode parity, cache
//! diff).

use super::{ModelArgs, PromptArgs};
use crate::backend::hef::{open_device, HefBackend};
use crate::capture::Capture;
use crate::device::driver::{write_frames, LlmDriver};
use crate::error::Result;
use crate::explain::diag;
use crate::inputs::InputSet;
use crate::model::Decoder;
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
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
}

pub fn capture(a: CaptureArgs) -> Result<ExitCode> {
    let inputs = InputSet::from_npz(&a.inputs)?;
    let (mut device, hef) = open_device(&a.hef)?;
    let mut driver = LlmDriver::open(device.as_mut(), &hef, &a.hef.display().to_string())?;
    if a.record_frames.is_some() {
        driver.record = Some(Vec::new());
    }
    let desc = device.describe();
    let mut backend = HefBackend::from_parts("device", device, driver);
    let mut cap = Capture::default();
    let mut record = Default::default();
    let result = backend.drive(&inputs, &mut cap, &mut record);
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
    /// Runs of the repeatability gate.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Cache entries may differ from the reference's by this many quantization steps.
    #[arg(long, default_value_t = 8)]
    pub lsb_tolerance: u32,
    /// Write every figure as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

fn table() -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).force_no_tty();
    t
}

pub fn diagnose(a: DiagnoseArgs) -> Result<ExitCode> {
    let ckpt = a.model.load()?;
    let mut inputs = a.prompt.input_set(&ckpt)?;
    inputs.chunk = None;
    let model = Decoder::new(&ckpt)?;
    let (mut device, hef) = open_device(&a.hef)?;
    let mut driver = LlmDriver::open(device.as_mut(), &hef, &a.hef.display().to_string())?;
    println!("{}", device.describe());
    let mut problems = Vec::new();

    let parity = diag::parity(&mut driver, &hef, &model, &inputs.prompt)?;
    let cache = diag::cache_diff(&mut driver, &hef, &model, &inputs.prompt[..inputs.prompt.len() - 1])?;
    let mut backend = HefBackend::from_parts("device", device, driver);
    let rep = diag::repeatability(&mut backend, &inputs, a.repeat)?;

    println!(
        "\nrepeatability: {} runs, max |Δ logit| between runs {}{}",
        rep.runs,
        crate::compare::fmt_num(rep.max_abs),
        rep.worst_key.as_ref().map(|k| format!(" (at {k})")).unwrap_or_default()
    );
    if rep.max_abs > 0.0 {
        problems.push("runs differ: compare figures carry run-to-run noise".to_string());
    }
    println!("\nprefill/decode parity at position {} (logits vs the reference):", parity.position);
    let mut t = table();
    t.set_header(vec!["path", "cosine", "KL", "argmax"]);
    for r in &parity.rows {
        match &r.unavailable {
            Some(why) => {
                t.add_row(vec![r.path.clone(), "-".into(), "-".into(), format!("unavailable: {why}")])
            }
            None => t.add_row(vec![
                r.path.clone(),
                format!("{:.6}", r.cosine.unwrap_or(f64::NAN)),
                crate::compare::fmt_num(r.kl.unwrap_or(f64::NAN)),
                if r.argmax_matches == Some(true) { "same".into() } else { "DIFFERS".into() },
            ]),
        };
    }
    println!("{t}\n{}", parity.verdict);
    if !parity.verdict.starts_with("prefill and tbt agree") {
        problems.push(parity.verdict.clone());
    }
    println!(
        "\ncache diff after prefilling {} tokens (LSB = one quantization step of the cache layer):",
        inputs.prompt.len() - 1
    );
    let mut t = table();
    t.set_header(vec!["layer", "k/v", "max LSB", "mean LSB", "worst kv head (max LSB)"]);
    for r in &cache {
        t.add_row(vec![
            r.layer.to_string(),
            r.kind.to_string(),
            r.max_lsb.to_string(),
            format!("{:.2}", r.mean_lsb),
            format!("{} ({})", r.worst_head, r.worst_head_max_lsb),
        ]);
    }
    println!("{t}");
    if let Some(r) = cache.iter().find(|r| r.max_lsb > a.lsb_tolerance) {
        problems.push(format!(
            "layer {} {} cache entries differ from the reference by up to {} LSB (tolerance {})",
            r.layer, r.kind, r.max_lsb, a.lsb_tolerance
        ));
    }
    if let Some(p) = &a.json {
        let v = serde_json::json!({"schema": "hefprobe.diagnose/1", "repeatability": rep, "parity": parity, "cache_diff": cache});
        crate::error::write_file(p, serde_json::to_string_pretty(&v).expect("json") + "\n")?;
    }
    if problems.is_empty() {
        println!("\nno problem found");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("\nproblems:\n- {}", problems.join("\n- "));
        Ok(ExitCode::from(1))
    }
}
