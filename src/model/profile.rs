//! A per-op-class timer for the decoder, off unless asked for (`HEFPROBE_PROFILE=1` or
//! `hefprobe bench --profile`). `perf` hardware counters are not available on every machine
//! hefprobe is measured on (a KVM guest reports `<not supported>`), so the decoder times
//! itself: one guard per op, accumulated per class, printed by `bench`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

crate::named_enum! {
    /// What a span of decoder time was spent on.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Op {
        Embed = "embedding lookup",
        Norm = "RMSNorm",
        /// q/k/v/o and gate/up/down projections.
        Linear = "projections (q k v o gate up down)",
        LmHead = "lm_head",
        Rope = "RoPE",
        /// q·kᵀ, the mask and softmax of the explicit path (scores and probs materialized).
        ScoresSoftmax = "scores + mask + softmax (explicit)",
        /// Probabilities times values in the explicit path.
        ProbsV = "probs · v (explicit)",
        /// Scores, softmax and probs·v in one pass (no tap or hook needs them).
        FusedAttention = "attention, fused",
        /// Head splits and merges, transposes, contiguous copies.
        Layout = "head split/merge, copies",
        /// KV cache append and read.
        Cache = "KV cache append/read",
        /// silu(gate)·up and the residual adds.
        Elementwise = "silu·up, residual adds",
        /// Hooks' edits and the sink's copies of tapped tensors.
        Taps = "taps: hooks + sink copies",
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

/// Seconds accumulated per op class since the last reset, in [`Op::ALL`] order; None when off.
pub fn snapshot() -> Option<Vec<(Op, f64)>> {
    enabled().then(|| {
        Op::ALL.iter().zip(&NANOS).map(|(op, n)| (*op, n.load(Ordering::Relaxed) as f64 / 1e9)).collect()
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
            let i = Op::ALL.iter().position(|o| *o == self.op).unwrap_or(0);
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
