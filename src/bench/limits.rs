//! The machine's limits, measured in the same process as the figures they judge: sgemm
//! throughput (prefill is a chain of matrix products) and read bandwidth (decode reads every
//! weight once per token). A figure is then printed as a fraction of its limit, so a slow
//! or busy machine shows up as a low limit rather than as a slow decoder.

use crate::model::config::ModelConfig as Config;
#[cfg(target_arch = "x86_64")]
use crate::model::kernels::PREFETCH_BYTES;
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Best f32 matrix-product rate, in GFLOP/s (gemm crate, the one candle uses, on a
    /// 1024³ product, `threads` threads).
    pub sgemm_gflops: f64,
    /// Best rate of summing a buffer much larger than the caches, in GB/s (10⁹ bytes).
    pub read_gbs: f64,
}

/// Side of the square product timed for the sgemm limit: large enough that packing and
/// thread start-up are a few percent of it.
const GEMM_N: usize = 1024;
/// Bytes read for the bandwidth limit: far beyond any last-level cache.
const READ_BYTES: usize = 256 << 20;
/// Best of this many timings (a shared machine: the best is the least disturbed).
const TRIES: usize = 5;

impl Limits {
    /// The higher of each limit: the least disturbed of two measurements.
    pub fn best(&self, other: &Limits) -> Limits {
        Limits {
            sgemm_gflops: self.sgemm_gflops.max(other.sgemm_gflops),
            read_gbs: self.read_gbs.max(other.read_gbs),
        }
    }

    /// The fastest `flops` could be computed at the sgemm rate, in ms.
    pub fn sgemm_ms(&self, flops: f64) -> f64 {
        flops / (self.sgemm_gflops * 1e9) * 1e3
    }

    /// The fastest `bytes` could be read at the read bandwidth, in ms.
    pub fn read_ms(&self, bytes: f64) -> f64 {
        bytes / (self.read_gbs * 1e9) * 1e3
    }
}

/// Measure both limits with `threads` threads.
pub fn measure(threads: usize) -> Limits {
    Limits { sgemm_gflops: sgemm_gflops(threads.max(1)), read_gbs: read_gbs(threads.max(1)) }
}

fn sgemm_gflops(threads: usize) -> f64 {
    let n = GEMM_N;
    let a: Vec<f32> = (0..n * n).map(|i| (i % 13) as f32 * 0.25).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.5).collect();
    let mut c = vec![0f32; n * n];
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    let mut best = f64::INFINITY;
    for _ in 0..=TRIES {
        let t = Instant::now();
        // SAFETY: a, b and c are n×n row-major buffers; the strides below address only them.
        unsafe {
            gemm::gemm(
                n,
                n,
                n,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                n as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                par,
            )
        };
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&c);
    2.0 * (n * n * n) as f64 / best / 1e9
}

fn read_gbs(threads: usize) -> f64 {
    let buf = vec![1f32; READ_BYTES / 4];
    let part = buf.len().div_ceil(threads);
    let mut best = f64::INFINITY;
    for _ in 0..=TRIES {
        let t = Instant::now();
        let total: f32 = std::thread::scope(|s| {
            let handles: Vec<_> = buf.chunks(part).map(|c| s.spawn(move || sum(c))).collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        std::hint::black_box(total);
        best = best.min(t.elapsed().as_secs_f64());
    }
    READ_BYTES as f64 / best / 1e9
}

crate::model::kernels::simd! {
    /// Σ x with 32 independent accumulators in AVX2 registers (where the CPU has them), so
    /// the loop is bound by memory, not by add latency or instruction count: a baseline build
    /// of a 16-accumulator loop read slower than the decoder's own matrix-vector products do,
    /// which made "the limit" lower than what decode achieved. It asks for every cache line
    /// [`PREFETCH_BYTES`] ahead as the decoder's AVX2 dot products do: without that the limit
    /// read 21-22 GB/s on a 2-core Zen guest where those products read 24-26; with it, 24-29.
    fn sum(x: &[f32]) -> f32 {
        let mut acc = [[0f32; 8]; 4];
        let mut it = x.chunks_exact(32);
        for c in &mut it {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint and never faults, wherever it points.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                // Both cache lines of the 128 bytes (one hint per block left every other line
                // to the hardware prefetcher: the decoder's f32 rows read faster than this).
                for line in [0, 64] {
                    _mm_prefetch::<_MM_HINT_T0>(c.as_ptr().cast::<i8>().wrapping_add(PREFETCH_BYTES + line));
                }
            }
            for (a, c) in acc.iter_mut().zip(c.chunks_exact(8)) {
                for j in 0..8 {
                    a[j] += c[j];
                }
            }
        }
        let lanes: f32 = acc.iter().flatten().sum();
        lanes + it.remainder().iter().sum::<f32>()
    }
}

/// Why these figures describe an emulator rather than this CPU, when they do: a binary run by
/// qemu-user sees the host's `/proc/cpuinfo` (an aarch64 build reading an x86 CPU's
/// `vendor_id`, or the reverse), or qemu's own CPU model, which reports implementer 0x00 where
/// every real Arm core names its maker.
pub fn emulation() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    emulation_in(&info, std::env::consts::ARCH)
}

fn emulation_in(cpuinfo: &str, arch: &str) -> Option<String> {
    let field = |name: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    match (arch, field("vendor_id"), field("CPU implementer")) {
        ("aarch64", Some(vendor), _) => {
            Some(format!("this aarch64 build runs on an x86 CPU ({vendor}) through an emulator"))
        }
        ("aarch64", None, Some(imp)) if imp == "0x00" => {
            Some("the CPU reports implementer 0x00, as only an emulator's CPU model does".into())
        }
        ("x86_64", None, Some(imp)) => {
            Some(format!("this x86_64 build runs on an Arm CPU (implementer {imp}) through an emulator"))
        }
        _ => None,
    }
}

/// Weights every token multiplies by: the projections of every layer and the lm_head.
fn linear_params(c: &Config) -> usize {
    let (h, i, q, kv) =
        (c.hidden_size, c.intermediate_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
    c.num_layers * (h * q + 2 * h * kv + q * h + 3 * h * i) + c.vocab_size * h
}

/// Floating-point operations of a `t`-token prefill from position 0: 2 per weight per token
/// (logits are computed for every row, as transformers does by default), plus q·kᵀ and
/// probs·v over the causal triangle (2·D per pair, for each).
pub fn prefill_flops(c: &Config, t: usize) -> f64 {
    let pairs = (t * (t + 1) / 2) as f64;
    2.0 * (linear_params(c) * t) as f64 + 4.0 * (c.num_layers * c.num_heads * c.head_dim) as f64 * pairs
}

/// Bytes one decode step at context `s` must read: the weights (every projection and the
/// lm_head once, each weight `weight_bytes` wide: 4 for f32, 2 for bf16/f16, as the kernels
/// read the stored dtype), plus the cached f32 keys and values of every layer.
pub fn decode_bytes(c: &Config, s: usize, weight_bytes: f64) -> f64 {
    weight_bytes * linear_params(c) as f64 + 4.0 * (2 * c.num_layers * c.num_kv_heads * c.head_dim * s) as f64
}

/// `value` (ms) against the best time `limit_ms` the limit allows: the fraction, in percent.
pub fn pct(limit_ms: f64, value_ms: f64) -> f64 {
    100.0 * limit_ms / value_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emulator_is_told_from_cpuinfo() {
        let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2\n";
        let pi5 = "processor\t: 0\nBogoMIPS\t: 108.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0b\n";
        let qemu = "processor\t: 0\nCPU implementer\t: 0x00\n";
        assert!(emulation_in(x86, "aarch64").is_some_and(|m| m.contains("AuthenticAMD")));
        assert_eq!(emulation_in(pi5, "aarch64"), None);
        assert!(emulation_in(qemu, "aarch64").is_some());
        assert_eq!(emulation_in(x86, "x86_64"), None);
        assert!(emulation_in(pi5, "x86_64").is_some());
    }

    #[test]
    fn sum_adds_every_element() {
        let x: Vec<f32> = (0..1001).map(|i| i as f32).collect();
        assert_eq!(sum(&x), 500_500.0);
    }

    #[test]
    fn flops_and_bytes_follow_the_shape() {
        let c = crate::model::synth::SynthSpec::preset("smollm2-135m", 0).unwrap().config().unwrap();
        // 2 flops per weight per token dominate; attention adds the causal triangle.
        let one = prefill_flops(&c, 1);
        assert!(one > 2.0 * 1.3e8 && one < 2.0 * 1.4e8, "{one}");
        assert!(prefill_flops(&c, 128) > 128.0 * one);
        // Decode reads ~135 M f32 weights: ~0.54 GB.
        let b = decode_bytes(&c, 0, 4.0);
        assert!(b > 0.5e9 && b < 0.6e9, "{b}");
        // bf16 weights: half the weight bytes; the f32 cache the same.
        assert_eq!(decode_bytes(&c, 0, 2.0), b / 2.0);
        assert!(decode_bytes(&c, 128, 2.0) - decode_bytes(&c, 0, 2.0) > 0.0);
    }
}
