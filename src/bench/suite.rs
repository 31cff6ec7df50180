//! `hefprobe bench --suite`: one table for the shapes the targets are set on (SmolLM2-135M
//! and Qwen2.5-0.5B, random weights): prefill 128 and 1024 tokens, decode, taps off and on,
//! one thread and all; each figure beside the limit measured in the same run and, when
//! `--hf-python` is given, beside transformers' eager f32 forward on the same shape and
//! threads (scripts/bench-hf.py), so every ratio comes from one run on one machine.

use super::limits::{self, Limits};
use super::{median, peak_rss_mib, Settings};
use crate::capture::{NoTaps, NpzSink, TapSink};
use crate::error::{Error, Result};
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::kernels;
use crate::model::synth::SynthSpec;
use crate::tap::TapSelection;
use std::path::Path;
use std::process::ExitCode;

/// The shapes measured, as synth presets.
const SHAPES: [&str; 2] = ["smollm2-135m", "qwen2.5-0.5b"];
/// The short and long prefill.
const SHORT: usize = 128;
const LONG: usize = 1024;
/// Decode steps timed after the short prefill.
const DECODE: usize = 16;
/// Where the transformers side lives, relative to the repository root (the working directory).
const HF_SCRIPT: &str = "scripts/bench-hf.py";

/// transformers' figures for one shape: ms for prefill 128, prefill 1024, one decode step.
#[derive(Debug, Clone, Copy)]
struct Hf {
    short: f64,
    long: f64,
    decode: f64,
}

#[derive(Clone, Copy)]
enum Demand {
    Flops(f64),
    Bytes(f64),
}

struct Row {
    what: String,
    threads: usize,
    ms: f64,
    /// What the limit bounds: flops (sgemm) or bytes read (bandwidth); turned into the time
    /// it allows with the best limits the run measured ([`print_table`]).
    limit: Option<Demand>,
    hf_ms: Option<f64>,
    note: String,
}

pub fn run(a: &Settings) -> Result<ExitCode> {
    let all = kernels::threads();
    let reps = a.reps;
    let hf_script = Path::new(HF_SCRIPT);
    if a.hf_python.is_some() && !hf_script.is_file() {
        return Err(Error::usage(format!(
            "--hf-python: {HF_SCRIPT} not found; run the suite from the repository root"
        )));
    }
    // The limits are measured before every shape and once more at the end, and the best of
    // each is used: a neighbour's memory traffic moved the read bandwidth by ±30% between
    // measurements minutes apart, and a limit measured in a busy moment is no limit.
    super::warn_emulated();
    eprintln!("measuring the machine's limits ...");
    let (mut lim_all, mut lim_one) = (limits::measure(all), limits::measure(1));
    let mut rows = Vec::new();
    for shape in SHAPES {
        if shape != SHAPES[0] {
            lim_all = lim_all.best(&limits::measure(all));
            lim_one = lim_one.best(&limits::measure(1));
        }
        eprintln!("{shape}: synthesizing ...");
        let ckpt = SynthSpec::preset(shape, 0)?.build()?;
        let model = Decoder::new(&ckpt)?;
        // The same weights held as bf16, as a published bf16 folder loads (read as stored,
        // widened in the kernels); drawn in f32 and rounded, so the shape and values match.
        let mut bf16 = ckpt.clone();
        for t in bf16.tensors.values_mut() {
            *t = t.to_dtype(candle_core::DType::BF16)?;
        }
        let bf16 = Decoder::new(&bf16)?;
        drop(ckpt);
        let c = &model.cfg;
        let hf = match &a.hf_python {
            Some(py) => Some(run_hf(py, hf_script, c, all, reps)?),
            None => None,
        };
        let prompt =
            |n: usize| -> Vec<u32> { (0..n).map(|i| ((i * 7919 + 13) % c.vocab_size) as u32).collect() };
        let (short, long) = (prompt(SHORT), prompt(LONG));
        let timed_on = |model: &Decoder,
                        threads: usize,
                        prompt: &[u32],
                        decode: usize,
                        taps: bool,
                        label: &str|
         -> Result<(f64, f64)> {
            kernels::set_threads(threads);
            let dir = super::tempfile_dir()?;
            super::measure(model, &short[..8], 1, &mut NoTaps)?; // warm-up
            let (mut p, mut d) = (Vec::new(), Vec::new());
            for r in 0..reps {
                eprint!("\r{shape}: {label}, {threads} thread(s), rep {}/{reps}   ", r + 1);
                let mut none = NoTaps;
                let mut npz = if taps {
                    Some(NpzSink::create(&dir.join("suite.npz"), TapSelection::all())?)
                } else {
                    None
                };
                let sink: &mut dyn TapSink = match npz.as_mut() {
                    Some(s) => s,
                    None => &mut none,
                };
                let f = super::measure(model, prompt, decode, sink)?;
                if let Some(s) = npz.as_mut() {
                    s.finish()?;
                }
                p.push(f.prefill_ms);
                d.push(f.decode_ms);
            }
            let _ = std::fs::remove_dir_all(&dir);
            eprintln!();
            Ok((median(p), median(d)))
        };
        let timed = |threads: usize, prompt: &[u32], decode: usize, taps: bool, label: &str| {
            timed_on(&model, threads, prompt, decode, taps, label)
        };
        let off = timed(all, &short, DECODE, false, "prefill 128 + decode, taps off")?;
        let one = timed(1, &short, DECODE, false, "prefill 128 + decode, taps off")?;
        let on = timed(all, &short, DECODE, true, "prefill 128 + decode, all taps")?;
        let long_off = timed(all, &long, 0, false, "prefill 1024, taps off")?;
        let bf_off = timed_on(&bf16, all, &short, DECODE, false, "bf16 weights: prefill 128 + decode")?;
        let bf_long = timed_on(&bf16, all, &long, 0, false, "bf16 weights: prefill 1024")?;
        kernels::set_threads(all);
        let pre = |t: usize| Some(Demand::Flops(limits::prefill_flops(c, t)));
        let dec = || Some(Demand::Bytes(limits::decode_bytes(c, SHORT, 4.0)));
        let dec_bf16 = Some(Demand::Bytes(limits::decode_bytes(c, SHORT, 2.0)));
        // transformers loads a bf16 folder with dtype=float32 as f32 weights: its figure is
        // the f32 one (the values do not change its time).
        let vs_f32 = |bf: f64, f: f64| format!("bf16 weights; hefprobe f32 / bf16: {:.2}×", f / bf);
        let overhead = |on: f64, off: f64| format!("all-tap overhead {:+.1}%", 100.0 * (on / off - 1.0));
        let name = |what: &str| format!("{shape} {what}");
        rows.extend([
            Row {
                what: name("prefill 128"),
                threads: all,
                ms: off.0,
                limit: pre(SHORT),
                hf_ms: hf.map(|h| h.short),
                note: String::new(),
            },
            Row {
                what: name("prefill 128"),
                threads: 1,
                ms: one.0,
                limit: pre(SHORT),
                hf_ms: None,
                note: format!("{all} vs 1 thread: {:.2}×", one.0 / off.0),
            },
            Row {
                what: name("prefill 128, all taps"),
                threads: all,
                ms: on.0,
                limit: None,
                hf_ms: None,
                note: overhead(on.0, off.0),
            },
            Row {
                what: name("prefill 1024"),
                threads: all,
                ms: long_off.0,
                limit: pre(LONG),
                hf_ms: hf.map(|h| h.long),
                note: String::new(),
            },
            Row {
                what: name("decode @128"),
                threads: all,
                ms: off.1,
                limit: dec(),
                hf_ms: hf.map(|h| h.decode),
                note: String::new(),
            },
            Row {
                what: name("decode @128"),
                threads: 1,
                ms: one.1,
                limit: dec(),
                hf_ms: None,
                note: format!("{all} vs 1 thread: {:.2}×", one.1 / off.1),
            },
            Row {
                what: name("decode @128, all taps"),
                threads: all,
                ms: on.1,
                limit: None,
                hf_ms: None,
                note: overhead(on.1, off.1),
            },
            Row {
                what: name("bf16 prefill 128"),
                threads: all,
                ms: bf_off.0,
                limit: pre(SHORT),
                hf_ms: hf.map(|h| h.short),
                note: vs_f32(bf_off.0, off.0),
            },
            Row {
                what: name("bf16 prefill 1024"),
                threads: all,
                ms: bf_long.0,
                limit: pre(LONG),
                hf_ms: hf.map(|h| h.long),
                note: vs_f32(bf_long.0, long_off.0),
            },
            Row {
                what: name("bf16 decode @128"),
                threads: all,
                ms: bf_off.1,
                limit: dec_bf16,
                hf_ms: hf.map(|h| h.decode),
                note: vs_f32(bf_off.1, off.1),
            },
        ]);
        let rss = peak_rss_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"));
        eprintln!("{shape}: done, peak RSS so far {rss}");
    }
    let (lim_all, lim_one) = (lim_all.best(&limits::measure(all)), lim_one.best(&limits::measure(1)));
    print_table(&rows, &lim_all, &lim_one, all);
    Ok(ExitCode::SUCCESS)
}

fn print_table(rows: &[Row], lim_all: &Limits, lim_one: &Limits, all: usize) {
    println!(
        "Limits (the best of the run's measurements, before each shape and at the end): sgemm {:.1} GFLOP/s ({all} threads), {:.1} (1); read bandwidth {:.2} GB/s ({all}), {:.2} (1).",
        lim_all.sgemm_gflops, lim_one.sgemm_gflops, lim_all.read_gbs, lim_one.read_gbs
    );
    println!();
    println!("| measurement | threads | hefprobe | rate | limit allows | of limit | HF eager f32 | HF / hefprobe (> 1: hefprobe faster) | note |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in rows {
        let l = if r.threads == 1 { lim_one } else { lim_all };
        let limit = r.limit.map(|d| match d {
            Demand::Flops(f) => (f / (l.sgemm_gflops * 1e9) * 1e3, "sgemm"),
            Demand::Bytes(b) => (b / (l.read_gbs * 1e9) * 1e3, "bandwidth"),
        });
        let (lim, pct) = match limit {
            Some((ms, by)) => (format!("{ms:.2} ms ({by})"), format!("{:.0}%", limits::pct(ms, r.ms))),
            None => ("".into(), "".into()),
        };
        let rate = match r.limit {
            Some(Demand::Flops(f)) => format!("{:.1} GFLOP/s", f / (r.ms * 1e-3) / 1e9),
            Some(Demand::Bytes(b)) => format!("{:.2} GB/s", b / (r.ms * 1e-3) / 1e9),
            None => String::new(),
        };
        let (hf, ratio) = match r.hf_ms {
            Some(h) => (format!("{h:.2} ms"), format!("{:.2}×", h / r.ms)),
            None => ("".into(), "".into()),
        };
        println!(
            "| {} | {} | {:.2} ms | {rate} | {lim} | {pct} | {hf} | {ratio} | {} |",
            r.what, r.threads, r.ms, r.note
        );
    }
    let rss = peak_rss_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"));
    println!();
    println!("Peak RSS of the whole suite (VmHWM): {rss}. Decode: per token after a 128-token prefill, {DECODE} steps. Rate: flops per second (prefill), bytes of weights and KV cache read per second (decode; bf16 weights are read as 2 bytes).");
}

/// Run scripts/bench-hf.py on `c`'s shape with `threads` threads; its last stdout line is a
/// JSON object {"prefill_128": ms, "prefill_1024": ms, "decode": ms}.
fn run_hf(python: &Path, script: &Path, c: &ModelConfig, threads: usize, reps: usize) -> Result<Hf> {
    let shape = serde_json::json!({
        "arch": c.arch.name(),
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "vocab_size": c.vocab_size,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope.theta,
        "tie_word_embeddings": c.tie_word_embeddings,
        "max_position_embeddings": c.max_position_embeddings,
    });
    eprintln!("transformers: {} threads ...", threads);
    let out = std::process::Command::new(python)
        .arg(script)
        .args(["--shape", &shape.to_string()])
        .args(["--threads", &threads.to_string(), "--reps", &reps.to_string()])
        .args(["--prompt-lens", &format!("{SHORT},{LONG}"), "--decode", &DECODE.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::io(python, e))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fail = |why: String| Error::input(script.display().to_string(), why);
    if !out.status.success() {
        return Err(fail(format!("exited with {}", out.status)));
    }
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(last).map_err(|e| fail(format!("last line is not the JSON figures: {e}")))?;
    let get = |k: &str| v.get(k).and_then(|x| x.as_f64()).ok_or_else(|| fail(format!("no `{k}` in {last}")));
    Ok(Hf {
        short: get(&format!("prefill_{SHORT}"))?,
        long: get(&format!("prefill_{LONG}"))?,
        decode: get("decode")?,
    })
}
