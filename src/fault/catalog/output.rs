//! Faults of the output: which tensor, which position, and how the logits are quantized.

use crate::error::Result;
use crate::fault::spec::FaultSpec;
use crate::fault::{parse_boxed, Entry, Mechanism, OnDevice, Proof, Run};
use crate::model::config::ModelConfig;
use crate::model::hooks::{Hooks, StepCtx};
use crate::tap::Tap;
use candle_core::{Device, Tensor};

/// **no-lm-head** (finding 1). The output is the final-norm hidden state [T, hidden], as a
/// graph that stops before lm_head returns it.
pub struct NoLmHead;

impl Mechanism for NoLmHead {
    const ENTRY: Entry = Entry {
        name: "no-lm-head",
        finding: Some(1),
        summary: "the output is the final-norm hidden state, not logits",
        keys: &[],
        positional: 0,
        per_layer: false,
        on_output: true,
        device: OnDevice::Graph,
        proof: Proof::Matrix(&[("no-lm-head", "prefill/logits")]),
        grid: Entry::bare,
        parse: parse_boxed::<Self>,
    };

    fn parse(_spec: &FaultSpec, _cfg: &ModelConfig) -> Result<Self> {
        Ok(NoLmHead)
    }
}

impl Hooks for Run<'_, NoLmHead> {
    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        match tap {
            Tap::FinalNorm => {
                self.kept = Some(t.clone());
                Ok(t)
            }
            Tap::Logits => Ok(self.kept.take().unwrap_or(t)),
            _ => Ok(t),
        }
    }
}

/// **first-slot-output** (finding 2). Each phase returns one row, its first position's
/// logits [1, vocab], where the runtime expects the last position's.
pub struct FirstSlot;

impl Mechanism for FirstSlot {
    const ENTRY: Entry = Entry {
        name: "first-slot-output",
        finding: Some(2),
        summary: "each phase returns its first position's logits instead of its last",
        keys: &[],
        positional: 0,
        per_layer: false,
        on_output: true,
        device: OnDevice::Frames,
        proof: Proof::Matrix(&[("first-slot-output", "prefill/logits")]),
        grid: Entry::bare,
        parse: parse_boxed::<Self>,
    };

    fn parse(_spec: &FaultSpec, _cfg: &ModelConfig) -> Result<Self> {
        Ok(FirstSlot)
    }
}

impl Hooks for Run<'_, FirstSlot> {
    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        if tap == Tap::Logits {
            return Ok(t.narrow(0, 0, 1)?);
        }
        Ok(t)
    }
}

crate::named_enum! {
    /// The `scale` lm-head-shards dequantizes each shard with.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ShardScale {
        /// Each shard's own scale.
        Own = "own",
        /// Shard 0's scale for every shard.
        Shard0 = "shard0",
    }
}

/// **lm-head-shards:N** (finding 12). The vocabulary is split into N contiguous shards as the
/// exporter splits it (`hef::synth::shard_widths`: ⌊i·V/N⌋ boundaries, narrower first); each shard's logits are quantized symmetrically to `bits`
/// (default 8) with its own scale s_i = max|x_i| / (2^(bits−1) − 1) over the phase, q =
/// round-half-even(x / s_i). Dequantized with s_i (`scale=own`: quantization noise only) or
/// with shard 0's scale s_0 (`scale=shard0`: every other shard mis-scaled).
pub struct LmHeadShards {
    pub n: usize,
    pub scale: ShardScale,
    pub bits: u32,
}

impl Mechanism for LmHeadShards {
    const ENTRY: Entry = Entry {
        name: "lm-head-shards",
        finding: Some(12),
        summary:
            "vocab split into N shards quantized with their own scales (or all dequantized with shard 0's)",
        keys: &["n", "scale", "bits"],
        positional: 1,
        per_layer: false,
        on_output: true,
        device: OnDevice::Frames,
        proof: Proof::Matrix(&[("lm-head-shards:3,scale=shard0", "prefill/logits")]),
        grid: |_| [2, 3, 4].map(|n| format!("{n},scale={}", ShardScale::Shard0.name())).to_vec(),
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Self> {
        let n = spec.int("n", Some(0), 2, 2..=16)? as usize;
        if n > cfg.vocab_size {
            return Err(spec.err(format!("{n} shards for a vocabulary of {}", cfg.vocab_size)));
        }
        let scale = spec.pick("scale", None, ShardScale::Own)?;
        let bits = spec.int("bits", None, 8, 2..=16)? as u32;
        Ok(LmHeadShards { n, scale, bits })
    }
}

impl Hooks for Run<'_, LmHeadShards> {
    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        if tap != Tap::Logits {
            return Ok(t);
        }
        let f = self.fault;
        let (rows, vocab) = t.dims2()?;
        let mut x: Vec<f32> = t.flatten_all()?.to_vec1()?;
        // Split as the exporter's HEFs are (narrower shards first: 16002 + 16003 for 32005).
        let widths = crate::hef::synth::shard_widths(vocab as u32, f.n as u32);
        let mut bounds = vec![0usize];
        for w in widths {
            bounds.push(bounds.last().expect("starts at 0") + w as usize);
        }
        let shard_of = |c: usize| bounds.partition_point(|&b| b <= c) - 1;
        let qmax = ((1u32 << (f.bits - 1)) - 1) as f32;
        let scale_of = |x: &[f32], i: usize| -> f32 {
            let (lo, hi) = (bounds[i], bounds[i + 1]);
            let m = (0..rows)
                .flat_map(|r| x[r * vocab + lo..r * vocab + hi].iter())
                .fold(0f32, |a, &b| a.max(b.abs()));
            if m == 0.0 {
                1.0
            } else {
                m / qmax
            }
        };
        let scales: Vec<f32> = (0..f.n).map(|i| scale_of(&x, i)).collect();
        for r in 0..rows {
            for c in 0..vocab {
                let i = shard_of(c);
                let q = (x[r * vocab + c] / scales[i]).round_ties_even().clamp(-qmax, qmax);
                let s = match f.scale {
                    ShardScale::Own => scales[i],
                    ShardScale::Shard0 => scales[0],
                };
                x[r * vocab + c] = q * s;
            }
        }
        Ok(Tensor::from_vec(x, (rows, vocab), &Device::Cpu)?)
    }
}
