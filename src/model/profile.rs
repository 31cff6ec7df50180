//! A per-op-class timer for the decoder, off unless asked for (`HEFPROBE_PROFILE=1` or
//! `hefprobe bench --profile`). `perf` hardware counters are not available on every machine
//! hefprobe is measured on (a KVM guest reports `<not supported>`), so the decoder times
//! itself: one guard per op, accumulated per class, printed by `bench`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// What a span of decoder time was spent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Embed,
    Norm,
    /// q/k/v/o and gate/up/down projections.
    Linear,
    LmHead,
    Rope,
    /// q·kᵀ, the mask and softmax of the explicit path (scores and probs materialized).
    ScoresSoftmax,
    /// Probabilities times values in the explicit path.
    ProbsV,
    /// Scores, softmax and probs·v in one pass (no tap or hook needs them).
    FusedAttention,
    /// Head splits and merges, transposes, contiguous copies.
    Layout,
    /// KV cache append and read.
    Cache,
    /// silu(gate)·up and the residual adds.
    Elementwise,
    /// Hooks' edits and the sink's copies of tapped tensors.
    Taps,
}

pub const OPS: [Op; 12] = [
    Op::Embed,
    Op::Norm,
    Op::Linear,
    Op::LmHead,
    Op::Rope,
    Op::ScoresSoftmax,
    Op::ProbsV,
    Op::FusedAttention,
    Op::Layout,
    Op::Cache,
    Op::Elementwise,
    Op::Taps,
];

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Embed => "embedding lookup",
            Op::Norm => "RMSNorm",
            Op::Linear => "projections (q k v o gate up down)",
            Op::LmHead => "lm_head",
            Op::Rope => "RoPE",
            Op::ScoresSoftmax => "scores + mask + softmax (explicit)",
            Op::ProbsV => "probs · v (explicit)",
            Op::FusedAttention => "attention, fused",
            Op::Layout => "head split/merge, copies",
            Op::Cache => "KV cache append/read",
            Op::Elementwise => "silu·up, residual adds",
            Op::Taps => "taps: hooks + sink copies",
        }
    }
}

static NANOS: [AtomicU64; 12] = [const { AtomicU64::new(0) }; 12];
static FORCED: AtomicBool = AtomicBool::new(false);

fn enabled() -> bool {
    static ENV: OnceLock<bool> = OnceLock::new();
    FORCED.load(Ordering::Relaxed)
        || *ENV.get_or_init(|| std::env::var("HEFPROBE_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// Turn the timer on (bench `--profile`).
pub fn enable() {
    FORCED.store(true, Ordering::Relaxed);
}

/// Turn the timer off again (unless `HEFPROBE_PROFILE` asks for it).
pub fn disable() {
    FORCED.store(false, Ordering::Relaxed);
}

pub fn reset() {
    for n in &NANOS {
        n.store(0, Ordering::Relaxed);
    }
}

/// Seconds accumulated per op class since the last reset, in [`OPS`] order; None when off.
pub fn snapshot() -> Option<Vec<(Op, f64)>> {
    enabled().then(|| {
        OPS.iter().zip(&NANOS).map(|(op, n)| (*op, n.load(Ordering::Relaxed) as f64 / 1e9)).collect()
    })
}

/// Times the rest of the enclosing scope as `op` (nothing when profiling is off).
pub struct Span {
    op: Op,
    start: Option<Instant>,
}

pub fn span(op: Op) -> Span {
    Span { op, start: enabled().then(Instant::now) }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(s) = self.start {
            let i = OPS.iter().position(|o| *o == self.op).unwrap_or(0);
            NANOS[i].fetch_add(s.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }
}

/// Time one expression as `op`.
#[macro_export]
macro_rules! timed {
    ($op:expr, $e:expr) => {{
        let _span = $crate::model::profile::span($op);
        $e
    }};
}
