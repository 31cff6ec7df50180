//! Benchmarking (`hefprobe bench`): speed and memory of the reference (figures, not a
//! pass/fail test). Build with `--release`; the README records the figures. Every figure is
//! printed beside the machine limit it is bounded by (measured in the same run, see [`limits`]).

pub mod explain;
pub mod limits;
pub mod measure;
pub mod suite;

pub use measure::{
    check_args, measure, median, peak_rss_mib, tempfile_dir, warn_emulated, Figures, Settings,
};

use crate::capture::{NoTaps, NpzSink, TapSink};
use crate::error::Result;
use crate::model::cache::FullCache;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::hooks::NoHooks;
use crate::model::kernels;
use crate::model::CheckpointRef;
use crate::tap::{Phase, TapSelection};
use limits::Limits;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

pub fn run(a: Settings) -> Result<ExitCode> {
    check_args(&a, None)?;
    if let Some(&n) = a.threads.last() {
        kernels::set_threads(n);
    }
    if a.suite {
        return suite::run(&a);
    }
    if a.explain {
        return explain::run(&a.model, a.profile);
    }
    let (ckpt, model) = load(&a)?;
    let c = &model.cfg;
    let prompt: Vec<u32> = (0..a.prompt_len).map(|i| ((i * 7919 + 13) % c.vocab_size) as u32).collect();
    warn_emulated();
    let threads = kernels::threads();
    let lim = limits::measure(threads);
    crate::outln!(
        "limits (measured now, {threads} thread{}): sgemm {:.1} GFLOP/s, read bandwidth {:.2} GB/s",
        if threads == 1 { "" } else { "s" },
        lim.sgemm_gflops,
        lim.read_gbs
    );
    measure(&model, &prompt, 1, &mut NoTaps)?; // warm-up
    let off = repeat(&model, &prompt, &a, None)?;
    let rss_off = peak_rss_mib();
    if a.profile {
        print_profile(&model, &prompt, a.decode)?;
    }
    let dir = tempfile_dir()?;
    let on = repeat(&model, &prompt, &a, Some(&dir.join("bench.npz")))?;
    let npz_mib = std::fs::metadata(dir.join("bench.npz")).map_or(0.0, |m| m.len() as f64 / 1048576.0);
    let _ = std::fs::remove_dir_all(&dir);
    let measured = Measured { off, on, rss: (rss_off, peak_rss_mib()), npz_mib };
    print_figures(&a, (c, weight_bytes(&ckpt)), &lim, measured);
    Ok(ExitCode::SUCCESS)
}

/// The checkpoint and its decoder, `--prompt-len` and `--decode` checked against it, and the
/// line naming what is measured.
fn load(a: &Settings) -> Result<(crate::model::Checkpoint, Decoder)> {
    let t = Instant::now();
    let name = match &a.model {
        CheckpointRef::Path { path, .. } => path.display().to_string(),
        CheckpointRef::Synth(s) => s.preset.clone().unwrap_or_default(),
    };
    let ckpt = a.model.load()?;
    let model = Decoder::new(&ckpt)?;
    check_args(a, Some(model.cfg.max_position_embeddings))?;
    let build_s = t.elapsed().as_secs_f64();
    let c = &model.cfg;
    let threads = kernels::threads();
    crate::outln!(
        "bench: {name} ({:.1} M params, {} layers, hidden {}, weights {} read as stored), {threads} thread{}, loaded in {build_s:.1} s",
        crate::model::memory::params(c).get().unwrap_or(u64::MAX) as f64 / 1e6,
        c.num_layers,
        c.hidden_size,
        ckpt.stored_dtype,
        if threads == 1 { "" } else { "s" }
    );
    Ok((ckpt, model))
}

/// Prefill and decode times (ms) of `--reps` runs, with taps off, or with every tap written
/// to a fresh npz at `npz`.
fn repeat(model: &Decoder, prompt: &[u32], a: &Settings, npz: Option<&Path>) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut times = (Vec::new(), Vec::new());
    for r in 0..a.reps {
        let f = match npz {
            None => {
                crate::err!("\rtaps off: rep {}/{}", r + 1, a.reps);
                measure(model, prompt, a.decode, &mut NoTaps)?
            }
            Some(path) => {
                crate::err!("\rall taps: rep {}/{}", r + 1, a.reps);
                let mut sink = NpzSink::create(path, TapSelection::all())?;
                let f = measure(model, prompt, a.decode, &mut sink)?;
                sink.finish()?;
                f
            }
        };
        times.0.push(f.prefill_ms);
        times.1.push(f.decode_ms);
    }
    crate::errln!();
    Ok(times)
}

/// What the runs measured: prefill and decode times with taps off and with all taps, the
/// peak RSS after each, and the size of one all-taps capture.
struct Measured {
    off: (Vec<f64>, Vec<f64>),
    on: (Vec<f64>, Vec<f64>),
    rss: (Option<f64>, Option<f64>),
    npz_mib: f64,
}

/// The table of medians beside the limits, of a model `c` whose weights are `wbytes` wide.
fn print_figures(a: &Settings, (c, wbytes): (&ModelConfig, f64), lim: &Limits, m: Measured) {
    let (pre_off, dec_off) = (median(m.off.0), median(m.off.1));
    let fmt_rss = |r: Option<f64>| r.map_or("n/a".to_string(), |m| format!("{m:.0} MiB"));
    let flops = limits::prefill_flops(c, a.prompt_len);
    let bytes = limits::decode_bytes(c, a.prompt_len, wbytes);
    crate::outln!(
        "{:<28}{:>14}{:>22}{:>22}{:>14}",
        "",
        "taps off",
        "all taps -> npz",
        "rate (taps off)",
        "of limit"
    );
    crate::outln!(
        "{:<28}{:>11.1} ms{:>19.1} ms{:>15.1} GFLOP/s{:>13.0}%",
        format!("prefill {} tokens", a.prompt_len),
        pre_off,
        median(m.on.0),
        flops / (pre_off * 1e-3) / 1e9,
        limits::pct(lim.sgemm_ms(flops), pre_off)
    );
    crate::outln!(
        "{:<28}{:>11.2} ms{:>19.2} ms{:>18.2} GB/s{:>13.0}%",
        "decode (per token)",
        dec_off,
        median(m.on.1),
        bytes / (dec_off * 1e-3) / 1e9,
        limits::pct(lim.read_ms(bytes), dec_off)
    );
    crate::outln!("{:<28}{:>14}{:>22}", "peak RSS (VmHWM, cumulative)", fmt_rss(m.rss.0), fmt_rss(m.rss.1));
    crate::outln!(
        "all-taps capture of one run: {:.0} MiB on disk (median of {} runs reported)",
        m.npz_mib,
        a.reps
    );
    crate::outln!(
        "rate: prefill's flops per second; decode's bytes read per second (weights {wbytes:.0} bytes each, as \
         stored, and the f32 KV cache). of limit: the time the sgemm (prefill) or read-bandwidth (decode) \
         limit allows, as % of the time taken"
    );
}

/// Bytes per weight of the checkpoint's largest tensor kind, as the decoder reads it: 2 for
/// bf16/f16, 4 for f32 (a GGUF and a synth are f32 in memory).
pub fn weight_bytes(ckpt: &crate::model::Checkpoint) -> f64 {
    ckpt.lm_head().map_or(4.0, |t| t.dtype().size_in_bytes() as f64)
}

/// Time per op class of one prefill and of `decode` steps, taps off and all taps streamed to
/// an npz, as one table (where the all-tap overhead goes).
fn print_profile(model: &Decoder, prompt: &[u32], decode: usize) -> Result<()> {
    use crate::model::profile;
    let path = tempfile_dir()?.join("profile.npz");
    let off = profile_run(model, prompt, decode, &mut NoTaps)?;
    let mut sink = NpzSink::create(&path, TapSelection::all())?;
    let on = profile_run(model, prompt, decode, &mut sink)?;
    sink.finish()?;
    let _ = std::fs::remove_file(&path);
    let n = decode.max(1) as f64;
    let p = prompt.len();
    crate::outln!(
        "{:<38}{:>16}{:>16}{:>16}{:>16}",
        "profile (ms)",
        format!("prefill {p}"),
        "+ all taps",
        "decode / token",
        "+ all taps"
    );
    let cell = |v: f64, total: f64| format!("{:.1} {:>3.0}%", v * 1e3, 100.0 * v / total);
    let cell_d = |v: f64, total: f64| format!("{:.3} {:>3.0}%", v * 1e3 / n, 100.0 * v / total);
    for (i, (op, _)) in off.0 .1.iter().enumerate() {
        crate::outln!(
            "{:<38}{:>16}{:>16}{:>16}{:>16}",
            op.name(),
            cell(off.0 .1[i].1, off.0 .0),
            cell(on.0 .1[i].1, on.0 .0),
            cell_d(off.1 .1[i].1, off.1 .0),
            cell_d(on.1 .1[i].1, on.1 .0)
        );
    }
    crate::outln!(
        "{:<38}{:>16.1}{:>16.1}{:>16.3}{:>16.3}",
        "total (wall)",
        off.0 .0 * 1e3,
        on.0 .0 * 1e3,
        off.1 .0 * 1e3 / n,
        on.1 .0 * 1e3 / n
    );
    profile::disable();
    print_scaling(model, prompt, decode, &off)
}

/// Share of the time above which an op class must scale ([`SCALING_GOAL`]): below it, a serial
/// op costs little even on many threads.
const SCALING_SHARE: f64 = 0.02;
/// Speedup at 2 threads over 1 every op class above [`SCALING_SHARE`] should reach (the
/// proxy on 2 cores for scaling to 16: an op split well in two splits well in sixteen).
const SCALING_GOAL: f64 = 1.8;

/// Per op class, taps off: the time at 1 thread beside the time at this run's threads
/// (`at_n`, measured by [`print_profile`]), and the speedup; then the classes above
/// [`SCALING_SHARE`] of the time that fall short of [`SCALING_GOAL`] at 2 threads.
fn print_scaling(model: &Decoder, prompt: &[u32], decode: usize, at_n: &(Profiled, Profiled)) -> Result<()> {
    let n = kernels::threads();
    if n == 1 {
        return Ok(());
    }
    kernels::set_threads(1);
    let one = profile_run(model, prompt, decode, &mut NoTaps);
    kernels::set_threads(n);
    let one = one?;
    let steps = decode.max(1) as f64;
    crate::outln!();
    crate::outln!(
        "{:<38}{:>14}{:>14}{:>9}{:>16}{:>16}{:>9}",
        format!("scaling (ms), taps off, 1 vs {n} threads"),
        "prefill @1",
        format!("@{n}"),
        "speedup",
        "decode/tok @1",
        format!("@{n}"),
        "speedup"
    );
    let mut short = Vec::new();
    for (i, (op, pre_n)) in at_n.0 .1.iter().enumerate() {
        let (pre_1, dec_1, dec_n) = (one.0 .1[i].1, one.1 .1[i].1, at_n.1 .1[i].1);
        let speed = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        crate::outln!(
            "{:<38}{:>14.2}{:>14.2}{:>8.2}×{:>16.3}{:>16.3}{:>8.2}×",
            op.name(),
            pre_1 * 1e3,
            pre_n * 1e3,
            speed(pre_1, *pre_n),
            dec_1 * 1e3 / steps,
            dec_n * 1e3 / steps,
            speed(dec_1, dec_n)
        );
        for (phase, t1, tn, total) in
            [("prefill", pre_1, *pre_n, one.0 .0), ("decode", dec_1, dec_n, one.1 .0)]
        {
            if n == 2 && t1 > SCALING_SHARE * total && speed(t1, tn) < SCALING_GOAL {
                short.push(format!(
                    "{} ({phase}, {:.0}% of the time, {:.2}×)",
                    op.name(),
                    100.0 * t1 / total,
                    t1 / tn
                ));
            }
        }
    }
    crate::outln!(
        "{:<38}{:>14.1}{:>14.1}{:>8.2}×{:>16.3}{:>16.3}{:>8.2}×",
        "total (wall)",
        one.0 .0 * 1e3,
        at_n.0 .0 * 1e3,
        one.0 .0 / at_n.0 .0,
        one.1 .0 * 1e3 / steps,
        at_n.1 .0 * 1e3 / steps,
        one.1 .0 / at_n.1 .0
    );
    if n == 2 {
        let verdict = if short.is_empty() { "none".to_string() } else { short.join("; ") };
        crate::outln!(
            "op classes above {:.0}% of the time below {SCALING_GOAL}× at 2 threads: {verdict}",
            SCALING_SHARE * 100.0
        );
    }
    Ok(())
}

/// Wall time and time per op class of one prefill, then of `decode` steps, into `sink`.
type Profiled = (f64, Vec<(crate::model::profile::Op, f64)>);
fn profile_run(
    model: &Decoder,
    prompt: &[u32],
    decode: usize,
    sink: &mut dyn TapSink,
) -> Result<(Profiled, Profiled)> {
    use crate::model::profile;
    profile::enable();
    profile::reset();
    let mut cache = FullCache::with_capacity(model.cfg.num_layers, prompt.len() + decode);
    let input = model.step_input(Phase::Prefill, prompt, 0)?;
    let t = Instant::now();
    model.step(&input, &mut cache, sink, &mut NoHooks)?;
    let pre = (t.elapsed().as_secs_f64(), profile::snapshot().unwrap_or_default());
    profile::reset();
    let t = Instant::now();
    for k in 0..decode {
        let input = model.step_input(Phase::Decode(k), &[1], prompt.len() + k)?;
        model.step(&input, &mut cache, sink, &mut NoHooks)?;
    }
    let dec = (t.elapsed().as_secs_f64(), profile::snapshot().unwrap_or_default());
    profile::disable();
    Ok((pre, dec))
}
