//! `hefprobe bench --suite`: one table for the shapes the targets are set on (SmolLM2-135M
//! and Qwen2.5-0.5B, random weights): prefill 128 and 1024 tokens, decode, taps off and on,
//! at each count of the `--threads` list (default 1 and every core: one table at the last
//! count, and a scaling table of every row at every count with its speedup over the first);
//! each figure beside the limit measured in the same run and, when
//! `--hf-python` is given, beside transformers' eager f32 forward on the same shape and
//! threads (scripts/bench-hf.py), so every ratio comes from one run on one machine.

use super::limits::{self, Limits};
use super::measure::{self, median, peak_rss_mib, Settings};
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
    /// What the limit bounds: flops (sgemm) or bytes read (bandwidth); turned into the time
    /// it allows with the best limits the run measured ([`print_table`]).
    limit: Option<Demand>,
    hf_ms: Option<f64>,
    note: String,
    /// The time at each count of the thread list, in the list's order.
    by_count: Vec<f64>,
}

impl Row {
    /// The time at the last count of the thread list, the main table's.
    fn ms(&self) -> f64 {
        self.by_count.last().copied().unwrap_or(f64::NAN)
    }
}

pub fn run(a: &Settings) -> Result<ExitCode> {
    let all = kernels::threads();
    let counts = thread_counts(&a.threads, all);
    // The main table (limits, HF, taps overhead) is at the last count; every count of the
    // list is measured side by side for the scaling table.
    let main = *counts.last().unwrap_or(&all);
    let hf_script = Path::new(HF_SCRIPT);
    if a.hf_python.is_some() && !hf_script.is_file() {
        return Err(Error::usage(format!(
            "--hf-python: {HF_SCRIPT} not found; run the suite from the repository root"
        )));
    }
    let shapes: Vec<String> = match &a.suite_preset {
        Some(p) => vec![p.clone()],
        None => SHAPES.iter().map(|s| s.to_string()).collect(),
    };
    // The limits are measured before every shape and once more at the end, and the best of
    // each is used: a neighbour's memory traffic moved the read bandwidth by ±30% between
    // measurements minutes apart, and a limit measured in a busy moment is no limit.
    measure::warn_emulated();
    crate::errln!("measuring the machine's limits ...");
    let mut lim = limits::measure(main);
    let mut rows = Vec::new();
    for (k, shape) in shapes.iter().enumerate() {
        if k > 0 {
            lim = lim.best(&limits::measure(main));
        }
        rows.extend(shape_rows(a, shape, (&counts, main), hf_script)?);
        kernels::set_threads(all);
        let rss = peak_rss_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"));
        crate::errln!("{shape}: done, peak RSS so far {rss}");
    }
    let lim = lim.best(&limits::measure(main));
    print_table(&rows, &lim, main);
    print_scaling(&rows, &counts);
    Ok(ExitCode::SUCCESS)
}

/// A prefill and decode timed on one model at every count of the thread list, one count after
/// the other, so the ratios between counts come from the same minutes of the machine.
struct Timer<'a> {
    shape: &'a str,
    counts: &'a [usize],
    reps: usize,
    /// The warm-up prompt.
    warm: &'a [u32],
}

impl Timer<'_> {
    /// (prefill ms, decode ms per step), the medians of the repetitions, at each count.
    fn at_counts(
        &self,
        model: &Decoder,
        prompt: &[u32],
        decode: usize,
        taps: bool,
        label: &str,
    ) -> Result<Vec<(f64, f64)>> {
        self.counts.iter().map(|&t| self.at(model, t, prompt, decode, taps, label)).collect()
    }

    fn at(
        &self,
        model: &Decoder,
        threads: usize,
        prompt: &[u32],
        decode: usize,
        taps: bool,
        label: &str,
    ) -> Result<(f64, f64)> {
        let (shape, reps) = (self.shape, self.reps);
        kernels::set_threads(threads);
        let dir = measure::tempfile_dir()?;
        measure::measure(model, self.warm, 1, &mut NoTaps)?;
        let (mut p, mut d) = (Vec::new(), Vec::new());
        for r in 0..reps {
            crate::err!("\r{shape}: {label}, {threads} thread(s), rep {}/{reps}   ", r + 1);
            let mut none = NoTaps;
            let mut npz =
                if taps { Some(NpzSink::create(&dir.join("suite.npz"), TapSelection::all())?) } else { None };
            let sink: &mut dyn TapSink = match npz.as_mut() {
                Some(s) => s,
                None => &mut none,
            };
            let f = measure::measure(model, prompt, decode, sink)?;
            if let Some(s) = npz.as_mut() {
                s.finish()?;
            }
            p.push(f.prefill_ms);
            d.push(f.decode_ms);
        }
        let _ = std::fs::remove_dir_all(&dir);
        crate::errln!();
        Ok((median(p), median(d)))
    }
}

/// The rows of one shape (a synth preset): f32 and bf16 weights, taps off and on, each at
/// every count of the list.
fn shape_rows(
    a: &Settings,
    shape: &str,
    (counts, main): (&[usize], usize),
    hf_script: &Path,
) -> Result<Vec<Row>> {
    crate::errln!("{shape}: synthesizing ...");
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
    // A small preset (`--preset` with `--suite`) may hold fewer positions than 1024.
    let short_n = SHORT.min(c.max_position_embeddings.saturating_sub(DECODE)).max(1);
    let long_n = LONG.min(c.max_position_embeddings).max(1);
    let hf =
        a.hf_python.as_ref().map(|py| run_hf(py, hf_script, c, main, a.reps, short_n, long_n)).transpose()?;
    let prompt = |n: usize| -> Vec<u32> { (0..n).map(|i| ((i * 7919 + 13) % c.vocab_size) as u32).collect() };
    let (short, long) = (prompt(short_n), prompt(long_n));
    let timer = Timer { shape, counts, reps: a.reps, warm: &short[..8.min(short.len())] };
    let off = timer.at_counts(&model, &short, DECODE, false, "prefill + decode, taps off")?;
    let on = timer.at_counts(&model, &short, DECODE, true, "prefill + decode, all taps")?;
    let long_off = timer.at_counts(&model, &long, 0, false, "long prefill, taps off")?;
    let bf_off = timer.at_counts(&bf16, &short, DECODE, false, "bf16 weights: prefill + decode")?;
    let bf_long = timer.at_counts(&bf16, &long, 0, false, "bf16 weights: long prefill")?;
    let measured = Measured { off, on, long_off, bf_off, bf_long };
    Ok(rows(shape, c, (short_n, long_n), hf, &measured))
}

/// One shape's times (prefill ms, decode ms per step) at each count of the thread list.
struct Measured {
    /// f32 weights, the short prefill and decode, taps off and on.
    off: Vec<(f64, f64)>,
    on: Vec<(f64, f64)>,
    long_off: Vec<(f64, f64)>,
    /// bf16 weights, taps off.
    bf_off: Vec<(f64, f64)>,
    bf_long: Vec<(f64, f64)>,
}

/// The table's rows of one shape: each figure at the last count, beside its limit and
/// transformers' figure, with every count's time for the scaling table.
fn rows(
    shape: &str,
    c: &ModelConfig,
    (short_n, long_n): (usize, usize),
    hf: Option<Hf>,
    m: &Measured,
) -> Vec<Row> {
    let Measured { off, on, long_off, bf_off, bf_long } = m;
    let last = |v: &[(f64, f64)]| *v.last().unwrap_or(&(f64::NAN, f64::NAN));
    let (off_m, on_m, long_m, bf_m, bf_long_m) =
        (last(off), last(on), last(long_off), last(bf_off), last(bf_long));
    let pre = |t: usize| Some(Demand::Flops(limits::prefill_flops(c, t)));
    let dec = || Some(Demand::Bytes(limits::decode_bytes(c, short_n, 4.0)));
    let dec_bf16 = Some(Demand::Bytes(limits::decode_bytes(c, short_n, 2.0)));
    // transformers loads a bf16 folder with dtype=float32 as f32 weights: its figure is
    // the f32 one (the values do not change its time).
    let vs_f32 = |bf: f64, f: f64| format!("bf16 weights; hefprobe f32 / bf16: {:.2}×", f / bf);
    let overhead = |on: f64, off: f64| format!("all-tap overhead {:+.1}%", 100.0 * (on / off - 1.0));
    let name = |what: String| format!("{shape} {what}");
    let prefill = |v: &[(f64, f64)]| v.iter().map(|x| x.0).collect::<Vec<f64>>();
    let decode = |v: &[(f64, f64)]| v.iter().map(|x| x.1).collect::<Vec<f64>>();
    let row = |what: String, limit, hf_ms, note: String, by_count: Vec<f64>| Row {
        what: name(what),
        limit,
        hf_ms,
        note,
        by_count,
    };
    vec![
        row(format!("prefill {short_n}"), pre(short_n), hf.map(|h| h.short), String::new(), prefill(off)),
        row(format!("prefill {short_n}, all taps"), None, None, overhead(on_m.0, off_m.0), prefill(on)),
        row(format!("prefill {long_n}"), pre(long_n), hf.map(|h| h.long), String::new(), prefill(long_off)),
        row(format!("decode @{short_n}"), dec(), hf.map(|h| h.decode), String::new(), decode(off)),
        row(format!("decode @{short_n}, all taps"), None, None, overhead(on_m.1, off_m.1), decode(on)),
        row(
            format!("bf16 prefill {short_n}"),
            pre(short_n),
            hf.map(|h| h.short),
            vs_f32(bf_m.0, off_m.0),
            prefill(bf_off),
        ),
        row(
            format!("bf16 prefill {long_n}"),
            pre(long_n),
            hf.map(|h| h.long),
            vs_f32(bf_long_m.0, long_m.0),
            prefill(bf_long),
        ),
        row(
            format!("bf16 decode @{short_n}"),
            dec_bf16,
            hf.map(|h| h.decode),
            vs_f32(bf_m.1, off_m.1),
            decode(bf_off),
        ),
    ]
}

/// The thread counts the suite measures: the `--threads` list as given, or 1 and every core.
fn thread_counts(list: &[usize], all: usize) -> Vec<usize> {
    if list.is_empty() {
        let mut v = vec![1, all];
        v.dedup();
        v
    } else {
        list.to_vec()
    }
}

/// Per row, the time at each count of the list and the speedup over the first count.
fn print_scaling(rows: &[Row], counts: &[usize]) {
    let first = counts.first().copied().unwrap_or(1);
    crate::outln!();
    crate::outln!(
        "Thread scaling (each row at every count, side by side in this run; speedup over {first} thread(s)):"
    );
    crate::outln!();
    let mut head = String::from("| measurement |");
    let mut rule = String::from("|---|");
    for t in counts {
        head.push_str(&format!(" {t} thread(s) |"));
        rule.push_str("---:|");
    }
    for t in counts.iter().skip(1) {
        head.push_str(&format!(" {t} vs {first} |"));
        rule.push_str("---:|");
    }
    crate::outln!("{head}");
    crate::outln!("{rule}");
    for r in rows {
        let mut line = format!("| {} |", r.what);
        for ms in &r.by_count {
            line.push_str(&format!(" {ms:.2} ms |"));
        }
        let base = r.by_count.first().copied().unwrap_or(f64::NAN);
        for ms in r.by_count.iter().skip(1) {
            line.push_str(&format!(" {:.2}× |", base / ms));
        }
        crate::outln!("{line}");
    }
}

fn print_table(rows: &[Row], l: &Limits, main: usize) {
    crate::outln!(
        "Limits (the best of the run's measurements, before each shape and at the end): sgemm {:.1} GFLOP/s, read bandwidth {:.2} GB/s ({main} thread(s)).",
        l.sgemm_gflops, l.read_gbs
    );
    crate::outln!();
    crate::outln!("| measurement | threads | hefprobe | rate | limit allows | of limit | HF eager f32 | HF / hefprobe (> 1: hefprobe faster) | note |");
    crate::outln!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in rows {
        let limit = r.limit.map(|d| match d {
            Demand::Flops(f) => (l.sgemm_ms(f), "sgemm"),
            Demand::Bytes(b) => (l.read_ms(b), "bandwidth"),
        });
        let (lim, pct) = match limit {
            Some((ms, by)) => (format!("{ms:.2} ms ({by})"), format!("{:.0}%", limits::pct(ms, r.ms()))),
            None => ("".into(), "".into()),
        };
        let rate = match r.limit {
            Some(Demand::Flops(f)) => format!("{:.1} GFLOP/s", f / (r.ms() * 1e-3) / 1e9),
            Some(Demand::Bytes(b)) => format!("{:.2} GB/s", b / (r.ms() * 1e-3) / 1e9),
            None => String::new(),
        };
        let (hf, ratio) = match r.hf_ms {
            Some(h) => (format!("{h:.2} ms"), format!("{:.2}×", h / r.ms())),
            None => ("".into(), "".into()),
        };
        crate::outln!(
            "| {} | {} | {:.2} ms | {rate} | {lim} | {pct} | {hf} | {ratio} | {} |",
            r.what,
            main,
            r.ms(),
            r.note
        );
    }
    let rss = peak_rss_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"));
    crate::outln!();
    crate::outln!("Peak RSS of the whole suite (VmHWM): {rss}. Decode: per token after a 128-token prefill, {DECODE} steps. Rate: flops per second (prefill), bytes of weights and KV cache read per second (decode; bf16 weights are read as 2 bytes).");
}

/// Run scripts/bench-hf.py on `c`'s shape with `threads` threads; its last stdout line is a
/// JSON object {"prefill_128": ms, "prefill_1024": ms, "decode": ms}.
fn run_hf(
    python: &Path,
    script: &Path,
    c: &ModelConfig,
    threads: usize,
    reps: usize,
    short: usize,
    long: usize,
) -> Result<Hf> {
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
    crate::errln!("transformers: {} threads ...", threads);
    let out = std::process::Command::new(python)
        .arg(script)
        .args(["--shape", &shape.to_string()])
        .args(["--threads", &threads.to_string(), "--reps", &reps.to_string()])
        .args(["--prompt-lens", &format!("{short},{long}"), "--decode", &DECODE.to_string()])
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
        short: get(&format!("prefill_{short}"))?,
        long: get(&format!("prefill_{long}"))?,
        decode: get("decode")?,
    })
}
