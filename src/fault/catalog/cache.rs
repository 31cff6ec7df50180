//! The KV-cache fault: decode reading what prefill wrote in another layout. The device
//! simulator realizes it in its cache ring (`parse_as::<CacheLayout>`), the emulator here.

use crate::error::Result;
use crate::fault::spec::FaultSpec;
use crate::fault::{parse_boxed, Entry, Mechanism, OnDevice, Proof, Run};
use crate::model::config::ModelConfig;
use crate::model::hooks::{Hooks, StepCtx};
use crate::tap::Phase;
use candle_core::{Device, Tensor};

crate::named_enum! {
    /// The `layout` decode reads prefill's cache entries in.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum CacheLayoutKind {
        Transpose = "transpose",
        Interleave = "interleave",
    }
}

impl CacheLayoutKind {
    /// For each read feature of a token entry's KV·D, the written feature it comes from.
    pub fn permutation(self, kv: usize, d: usize) -> Vec<u32> {
        (0..kv * d)
            .map(|f| {
                let (head, i) = (f / d, f % d);
                let src = match self {
                    Self::Transpose => i * kv + head,
                    Self::Interleave if i < d / 2 => head * d + 2 * i,
                    Self::Interleave => head * d + 2 * (i - d / 2) + 1,
                };
                src as u32
            })
            .collect()
    }
}

/// **cache-layout** (finding 9). Decode steps read the KV entries that prefill wrote (keys and
/// values alike) with each token entry's KV·D features permuted; entries written by decode
/// stay consistent, so prefill is clean and decode drifts. `transpose`: the entry written as
/// [kv_head][dim] is read as [dim][kv_head] (read feature kv·D + d comes from written feature
/// d·KV + kv). `interleave`: each head's rotate-half halves [x1 | x2] are read as interleaved
/// pairs (read feature i < D/2 comes from 2i, D/2 + i from 2i + 1).
pub struct CacheLayout {
    pub layout: CacheLayoutKind,
    perm: Vec<u32>,
}

impl Mechanism for CacheLayout {
    const ENTRY: Entry = Entry {
        name: "cache-layout",
        finding: Some(9),
        summary: "decode reads prefill-written KV entries in another feature layout",
        keys: &["layout"],
        positional: 1,
        per_layer: true,
        on_output: false,
        device: OnDevice::Ring,
        proof: Proof::Matrix(&[
            ("cache-layout:transpose", "decode.0/layers.0.attn.scores"),
            ("cache-layout:interleave", "decode.0/layers.0.attn.scores"),
        ]),
        grid: |cfg| {
            let mut g = vec![CacheLayoutKind::Interleave.name().to_string()];
            if cfg.num_kv_heads >= 2 {
                g.push(CacheLayoutKind::Transpose.name().to_string());
            }
            g
        },
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Self> {
        let layout = spec.pick("layout", Some(0), CacheLayoutKind::Transpose)?;
        if layout == CacheLayoutKind::Transpose && cfg.num_kv_heads < 2 {
            return Err(spec.err(format!(
                "`transpose` reads [kv_head][dim] as [dim][kv_head], which needs at least 2 kv heads; this model has {}",
                cfg.num_kv_heads
            )));
        }
        Ok(CacheLayout { layout, perm: layout.permutation(cfg.num_kv_heads, cfg.head_dim) })
    }
}

impl CacheLayout {
    /// Permute the features of the entries `from_prefill` marks, [KV, S, D] in and out.
    fn permute(&self, x: &Tensor, from_prefill: &[bool]) -> Result<Tensor> {
        let (kv, s, d) = x.dims3()?;
        let entries = x.transpose(0, 1)?.contiguous()?.reshape((s, kv * d))?;
        let perm = Tensor::new(self.perm.as_slice(), &Device::Cpu)?;
        let permuted = entries.index_select(&perm, 1)?;
        let pick: Vec<u8> = from_prefill.iter().map(|&p| u8::from(p)).collect();
        let pick = Tensor::new(pick.as_slice(), &Device::Cpu)?.reshape((s, 1))?.broadcast_as((s, kv * d))?;
        let mixed = pick.where_cond(&permuted, &entries)?;
        Ok(mixed.reshape((s, kv, d))?.transpose(0, 1)?.contiguous()?)
    }
}

impl Hooks for Run<'_, CacheLayout> {
    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    /// Per cache entry; a row reads the entries its mask allows.
    fn rows_apart(&self) -> bool {
        true
    }

    fn cache_read(
        &mut self,
        ctx: &StepCtx,
        layer: usize,
        k: Tensor,
        v: Tensor,
        written_in: &[Phase],
    ) -> Result<(Tensor, Tensor)> {
        if !ctx.phase.is_decode() || !self.spec.applies(layer) {
            return Ok((k, v));
        }
        let from_prefill: Vec<bool> = written_in.iter().map(|p| !p.is_decode()).collect();
        if !from_prefill.contains(&true) {
            return Ok((k, v));
        }
        Ok((self.fault.permute(&k, &from_prefill)?, self.fault.permute(&v, &from_prefill)?))
    }
}

#[cfg(test)]
mod tests {
    use super::CacheLayoutKind::{Interleave, Transpose};

    #[test]
    fn permutations_are_permutations() {
        for (layout, kv, d) in [(Transpose, 2, 4), (Transpose, 3, 8), (Interleave, 2, 8)] {
            let mut p = layout.permutation(kv, d);
            p.sort();
            assert_eq!(p, (0..(kv * d) as u32).collect::<Vec<_>>(), "{layout:?}");
        }
        // interleave, one head of 4: read [m0, m2, m1, m3].
        assert_eq!(Interleave.permutation(1, 4), vec![0, 2, 1, 3]);
        // transpose, 2 heads of 2: read (kv, d) from d*2 + kv.
        assert_eq!(Transpose.permutation(2, 2), vec![0, 2, 1, 3]);
    }
}
