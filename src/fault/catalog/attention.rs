//! Faults of the attention probabilities: the softmax's grouping and the mask's broadcast.

use crate::error::Result;
use crate::fault::spec::FaultSpec;
use crate::fault::{parse_boxed, Entry, Mechanism, OnDevice, Proof, Run};
use crate::model::config::ModelConfig;
use crate::model::hooks::{Hooks, StepCtx};
use candle_core::{Device, Tensor};

/// **shared-softmax** (finding 11). For each query row t, the scores of all heads are
/// normalised together: p[h,t,s] = exp(z[h,t,s] − m_t) / Σ_{h',s'} exp(z[h',t,s'] − m_t),
/// m_t = max_{h',s'} z[h',t,s']; masked (−inf) scores contribute 0. Each head's row then sums
/// to its share of the total instead of 1 (DFC's SoftmaxOp ignoring groups = NHEAD).
pub struct SharedSoftmax;

impl Mechanism for SharedSoftmax {
    const ENTRY: Entry = Entry {
        name: "shared-softmax",
        finding: Some(11),
        summary: "one softmax per query row over all heads' scores together",
        keys: &[],
        positional: 0,
        per_layer: true,
        on_output: false,
        device: OnDevice::Frames,
        proof: Proof::Matrix(&[("shared-softmax@layers=1", "prefill/layers.1.attn.probs")]),
        grid: |cfg| if cfg.num_heads > 1 { Entry::bare(cfg) } else { Vec::new() },
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Self> {
        if cfg.num_heads == 1 {
            return Err(spec.err(
                "this model has one attention head: a softmax shared across heads is the ordinary one",
            ));
        }
        Ok(SharedSoftmax)
    }
}

impl Hooks for Run<'_, SharedSoftmax> {
    fn needs_explicit_attention(&self, layer: usize) -> bool {
        self.spec.applies(layer)
    }

    fn rows_apart(&self) -> bool {
        true
    }

    fn softmax(&mut self, _ctx: &StepCtx, layer: usize, scores: &Tensor) -> Result<Option<Tensor>> {
        if !self.spec.applies(layer) {
            return Ok(None);
        }
        let (h, t, s) = scores.dims3()?;
        let rows = scores.transpose(0, 1)?.contiguous()?.reshape((t, h * s))?;
        // The decoder's own softmax (exp8: the same bits on every CPU), over all heads' scores.
        let p = crate::model::attention::softmax(&rows)?;
        Ok(Some(p.reshape((t, h, s))?.transpose(0, 1)?.contiguous()?))
    }
}

/// **mask-repeat** (finding 4). The [T, S] causal mask is broadcast to heads by repeating
/// rows (AABBCC) instead of tiling (ABCABC): head h, query t gets mask row ⌊(h·T + t)/H⌋.
pub struct MaskRepeat;

impl Mechanism for MaskRepeat {
    const ENTRY: Entry = Entry {
        name: "mask-repeat",
        finding: Some(4),
        summary: "mask rows repeated per head (AABBCC) instead of tiled (ABCABC)",
        keys: &[],
        positional: 0,
        per_layer: true,
        on_output: false,
        device: OnDevice::Frames,
        proof: Proof::Matrix(&[("mask-repeat@layers=1", "prefill/layers.1.attn.scores")]),
        grid: |cfg| if cfg.num_heads > 1 { Entry::bare(cfg) } else { Vec::new() },
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Self> {
        if cfg.num_heads == 1 {
            return Err(
                spec.err("this model has one attention head: repeating and tiling the mask are the same")
            );
        }
        Ok(MaskRepeat)
    }
}

impl Hooks for Run<'_, MaskRepeat> {
    fn needs_explicit_attention(&self, layer: usize) -> bool {
        self.spec.applies(layer)
    }

    fn mask(
        &mut self,
        _ctx: &StepCtx,
        layer: usize,
        allowed: &[Vec<bool>],
        heads: usize,
    ) -> Result<Option<Tensor>> {
        if !self.spec.applies(layer) {
            return Ok(None);
        }
        let t = allowed.len();
        let s = allowed.first().map_or(0, Vec::len);
        let mut data = Vec::with_capacity(heads * t * s);
        for h in 0..heads {
            for q in 0..t {
                let row = &allowed[(h * t + q) / heads];
                data.extend(row.iter().map(|&a| if a { 0f32 } else { f32::NEG_INFINITY }));
            }
        }
        Ok(Some(Tensor::from_vec(data, (heads, t, s), &Device::Cpu)?))
    }
}
