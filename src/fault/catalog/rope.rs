//! Faults of the rotary position embedding: the wrong rotation, or the right one at the wrong
//! positions.

use crate::error::{Error, Result};
use crate::fault::spec::FaultSpec;
use crate::fault::{parse_boxed, Entry, Mechanism, OnDevice, Proof, Run};
use crate::model::config::ModelConfig;
use crate::model::hooks::{Hooks, Qk, StepCtx};
use crate::model::rope::{rotate, Rope, RopeLayout};
use crate::tap::Phase;
use candle_core::Tensor;

crate::named_enum! {
    /// The `variant` of the rope fault.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RopeVariant {
        Interleaved = "interleaved",
        SinSign = "sin-sign",
        Shift = "shift",
    }
}

crate::named_enum! {
    /// The `target` of the rope fault: what the variant rotates.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RopeTarget {
        Both = "both",
        Q = "q",
        K = "k",
    }
}

/// **rope** (finding 3). Variants, applied to queries, keys or both (`target`):
/// `interleaved` rotates pairs (2i, 2i+1) by frequency i instead of HF's rotate-half pairs
/// (i, i + D/2); `sin-sign` uses −sin (rotation by −angle); `shift` takes the table at
/// position p + `shift`. A shift on both sides is not offered: scores depend on position
/// differences only, so it is indistinguishable from a clean run.
pub struct RopeFault {
    pub variant: RopeVariant,
    pub target: RopeTarget,
    pub shift: i64,
}

impl Mechanism for RopeFault {
    const ENTRY: Entry = Entry {
        name: "rope",
        finding: Some(3),
        summary: "RoPE variant: interleaved pairs, sin sign flipped, or a table at a shifted position; Q, K or both",
        keys: &["variant", "target", "shift"],
        positional: 1,
        per_layer: true,
        on_output: false,
        device: OnDevice::Never,
        proof: Proof::Matrix(&[
            ("rope:interleaved,target=q@layers=1", "prefill/layers.1.attn.q"),
            ("rope:sin-sign,target=k@layers=2", "prefill/layers.2.attn.k"),
            ("rope:shift,target=q", "prefill/layers.0.attn.q"),
        ]),
        grid: |_| {
            let mut g = Vec::new();
            for variant in RopeVariant::ALL {
                for target in RopeTarget::ALL {
                    if variant == RopeVariant::Shift && target == RopeTarget::Both {
                        continue; // the same shift on both sides changes nothing under RoPE
                    }
                    g.push(format!("{},target={}", variant.name(), target.name()));
                }
            }
            g
        },
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, _cfg: &ModelConfig) -> Result<Self> {
        let variant = spec.pick("variant", Some(0), RopeVariant::Interleaved)?;
        let target = spec.pick("target", None, RopeTarget::Both)?;
        let is_shift = variant == RopeVariant::Shift;
        let shift = spec.int("shift", None, if is_shift { 1 } else { 0 }, -64..=64)?;
        if is_shift && shift == 0 {
            return Err(spec.err("`shift` must be non-zero for the shift variant"));
        }
        Ok(RopeFault { variant, target, shift })
    }
}

fn shifted(positions: &[usize], k: i64) -> Result<Vec<usize>> {
    positions
        .iter()
        .map(|&p| {
            usize::try_from(p as i64 + k).map_err(|_| {
                Error::usage(format!(
                    "a position shift of {k} moves position {p} below 0; start the prompt later"
                ))
            })
        })
        .collect()
}

impl Hooks for Run<'_, RopeFault> {
    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    fn rope(
        &mut self,
        ctx: &StepCtx,
        layer: usize,
        which: Qk,
        x: &Tensor,
        rope: &Rope,
    ) -> Result<Option<Tensor>> {
        let f = self.fault;
        let hit = match f.target {
            RopeTarget::Q => which == Qk::Q,
            RopeTarget::K => which == Qk::K,
            RopeTarget::Both => true,
        };
        if !hit || !self.spec.applies(layer) {
            return Ok(None);
        }
        let out = match f.variant {
            RopeVariant::Interleaved => rope.apply(x, &ctx.positions, RopeLayout::Interleaved)?,
            RopeVariant::SinSign => {
                let (cos, sin) = rope.tables(&ctx.positions)?;
                rotate(x, &cos, &sin.neg()?, RopeLayout::Half)?
            }
            RopeVariant::Shift => rope.apply(x, &shifted(&ctx.positions, f.shift)?, RopeLayout::Half)?,
        };
        Ok(Some(out))
    }
}

/// **position-shift:K** (finding 6). Steps from the first decode step on (or from prefill
/// chunk C, `from=chunkC`) rotate queries and keys at p + K, while the cache keeps the
/// entries written before at their true positions: a BOS counted on one side only.
/// Shifting every position (from the first phase) would change nothing under RoPE, which is
/// why this fault starts later.
pub struct PositionShift {
    pub k: i64,
    /// The prefill chunk the shift starts at; None: the first decode step.
    pub from_chunk: Option<usize>,
}

impl Mechanism for PositionShift {
    const ENTRY: Entry = Entry {
        name: "position-shift",
        finding: Some(6),
        summary: "later steps rotated at positions offset by K from those the cache was written with",
        keys: &["k", "from"],
        positional: 1,
        per_layer: false,
        on_output: false,
        device: OnDevice::Never,
        proof: Proof::Matrix(&[("position-shift:1", "decode.0/layers.0.attn.q")]),
        grid: |_| vec!["1".into(), "-1".into()],
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, _cfg: &ModelConfig) -> Result<Self> {
        let k = spec.int("k", Some(0), 1, -64..=64)?;
        if k == 0 {
            return Err(spec.err("a shift of 0 is a clean run"));
        }
        let from_chunk = match spec.get("from", None).unwrap_or("decode") {
            "decode" => None,
            f => Some(f.strip_prefix("chunk").and_then(|c| c.parse::<usize>().ok()).ok_or_else(|| {
                spec.err(format!("`from` = `{f}`: expected decode or chunkC (e.g. chunk1)"))
            })?),
        };
        Ok(PositionShift { k, from_chunk })
    }
}

impl Hooks for Run<'_, PositionShift> {
    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    fn rope(
        &mut self,
        ctx: &StepCtx,
        _layer: usize,
        _which: Qk,
        x: &Tensor,
        rope: &Rope,
    ) -> Result<Option<Tensor>> {
        let affected = match (ctx.phase, self.fault.from_chunk) {
            (Phase::Decode(_), _) => true,
            (Phase::PrefillChunk(c), Some(from)) => c >= from,
            _ => false,
        };
        if !affected {
            return Ok(None);
        }
        Ok(Some(rope.apply(x, &shifted(&ctx.positions, self.fault.k)?, RopeLayout::Half)?))
    }
}
