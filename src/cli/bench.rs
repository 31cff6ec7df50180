//! `hefprobe bench`: speed and memory of the reference (figures, not a pass/fail test).
//! Build with `--release`; the README records the figures.

use crate::capture::{NoTaps, NpzSink, TapSink};
use crate::error::Result;
use crate::model::decoder::{Decoder, FullCache, StepInput};
use crate::model::hooks::NoHooks;
use crate::model::synth::SynthSpec;
use crate::tap::{Phase, TapSelection};
use clap::Args;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Synth preset to measure.
    #[arg(long, default_value = "smollm2-135m")]
    pub preset: String,
    /// Prompt length for the prefill measurement.
    #[arg(long, default_value_t = 128)]
    pub prompt_len: usize,
    /// Decode steps measured after the prefill.
    #[arg(long, default_value_t = 16)]
    pub decode: usize,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Threads for the decoder's kernels (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Time the decoder per op class (prefill and decode, taps off) and print the table.
    #[arg(long)]
    pub profile: bool,
}

struct Figures {
    prefill_ms: f64,
    decode_ms: f64,
}

fn measure(model: &Decoder, prompt: &[u32], decode: usize, sink: &mut dyn TapSink) -> Result<Figures> {
    let mut cache = FullCache::new(model.cfg.num_layers);
    let t0 = Instant::now();
    let input = StepInput {
        phase: Phase::Prefill,
        embeds: model.embed_tokens(prompt)?,
        positions: (0..prompt.len()).collect(),
        frame: None,
    };
    let logits = model.step(&input, &mut cache, sink, &mut NoHooks)?;
    let mut next = crate::model::decoder::argmax_last_row(&logits)?;
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    for k in 0..decode {
        let input = StepInput {
            phase: Phase::Decode(k),
            embeds: model.embed_tokens(&[next])?,
            positions: vec![prompt.len() + k],
            frame: None,
        };
        let logits = model.step(&input, &mut cache, sink, &mut NoHooks)?;
        next = crate::model::decoder::argmax_last_row(&logits)?;
    }
    let decode_ms = t1.elapsed().as_secs_f64() * 1e3 / decode.max(1) as f64;
    Ok(Figures { prefill_ms, decode_ms })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Peak resident set size so far (VmHWM), in MiB.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    if let Some(n) = a.threads {
        crate::model::kernels::set_threads(n);
    }
    let t = Instant::now();
    let ckpt = SynthSpec::preset(&a.preset, 0)?.build()?;
    let model = Decoder::new(&ckpt)?;
    let build_s = t.elapsed().as_secs_f64();
    let c = &model.cfg;
    let prompt: Vec<u32> = (0..a.prompt_len).map(|i| ((i * 7919 + 13) % c.vocab_size) as u32).collect();
    let threads = crate::model::kernels::threads();
    println!(
        "bench: {} ({:.1} M params, {} layers, hidden {}), {threads} threads, synthesized in {build_s:.1} s",
        a.preset,
        c.num_params() as f64 / 1e6,
        c.num_layers,
        c.hidden_size
    );
    let reps = a.reps.max(1);
    let mut off = (Vec::new(), Vec::new());
    measure(&model, &prompt, 1, &mut NoTaps)?; // warm-up
    for _ in 0..reps {
        let f = measure(&model, &prompt, a.decode, &mut NoTaps)?;
        off.0.push(f.prefill_ms);
        off.1.push(f.decode_ms);
    }
    let rss_off = peak_rss_mib();
    if a.profile {
        crate::model::profile::enable();
        crate::model::profile::reset();
        let mut cache = FullCache::new(model.cfg.num_layers);
        let input = StepInput {
            phase: Phase::Prefill,
            embeds: model.embed_tokens(&prompt)?,
            positions: (0..prompt.len()).collect(),
            frame: None,
        };
        let t = Instant::now();
        model.step(&input, &mut cache, &mut NoTaps, &mut NoHooks)?;
        let pre = (t.elapsed().as_secs_f64(), crate::model::profile::snapshot().unwrap_or_default());
        crate::model::profile::reset();
        let t = Instant::now();
        for k in 0..a.decode {
            let input = StepInput {
                phase: Phase::Decode(k),
                embeds: model.embed_tokens(&[1])?,
                positions: vec![prompt.len() + k],
                frame: None,
            };
            model.step(&input, &mut cache, &mut NoTaps, &mut NoHooks)?;
        }
        let dec = (t.elapsed().as_secs_f64(), crate::model::profile::snapshot().unwrap_or_default());
        println!("{:<40}{:>16}{:>22}", "profile (taps off)", format!("prefill {}", a.prompt_len), "decode (per token)");
        for ((op, p), (_, d)) in pre.1.iter().zip(&dec.1) {
            let n = a.decode.max(1) as f64;
            println!("{:<40}{:>10.1} ms {:>3.0}%{:>15.2} ms {:>3.0}%", op.name(), p * 1e3, 100.0 * p / pre.0, d * 1e3 / n, 100.0 * d / dec.0);
        }
        println!("{:<40}{:>10.1} ms{:>22.2} ms", "total (wall)", pre.0 * 1e3, dec.0 * 1e3 / a.decode.max(1) as f64);
    }
    let dir = tempfile_dir()?;
    let mut on = (Vec::new(), Vec::new());
    for r in 0..reps {
        let mut sink = NpzSink::create(&dir.join(format!("bench-{r}.npz")), TapSelection::all())?;
        let f = measure(&model, &prompt, a.decode, &mut sink)?;
        sink.finish()?;
        on.0.push(f.prefill_ms);
        on.1.push(f.decode_ms);
    }
    let npz_mib = std::fs::metadata(dir.join("bench-0.npz")).map_or(0.0, |m| m.len() as f64 / 1048576.0);
    let _ = std::fs::remove_dir_all(&dir);
    let rss_on = peak_rss_mib();
    let fmt_rss = |r: Option<f64>| r.map_or("n/a".to_string(), |m| format!("{m:.0} MiB"));
    println!("{:<28}{:>14}{:>22}", "", "taps off", "all taps -> npz");
    println!(
        "{:<28}{:>11.1} ms{:>19.1} ms",
        format!("prefill {} tokens", a.prompt_len),
        median(off.0),
        median(on.0)
    );
    println!("{:<28}{:>11.1} ms{:>19.1} ms", "decode (per token)", median(off.1), median(on.1));
    println!("{:<28}{:>14}{:>22}", "peak RSS (VmHWM, cumulative)", fmt_rss(rss_off), fmt_rss(rss_on));
    println!("all-taps capture of one run: {npz_mib:.0} MiB on disk (median of {reps} runs reported)");
    Ok(ExitCode::SUCCESS)
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("hefprobe-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| crate::error::Error::io(&dir, e))?;
    Ok(dir)
}
