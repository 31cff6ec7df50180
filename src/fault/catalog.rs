//! The fault catalog. Each fault names the finding it models and defines precisely what it
//! computes, so it can be re-implemented on HF's attention and give the same tensors.

use super::spec::FaultSpec;
use super::Fault;
use crate::error::{Error, Result};
use crate::model::config::ModelConfig;
use crate::model::hooks::{Hooks, Qk, StepCtx};
use crate::model::rope::{rotate, Rope, RopeLayout};
use crate::tap::{Phase, Tap};
use candle_core::{Device, Tensor};

/// Every fault name, with the finding it models and a one-line definition.
pub const CATALOG: &[(&str, Option<u32>, &str)] = &[
    ("shared-softmax", Some(11), "one softmax per query row over all heads' scores together"),
    ("mask-repeat", Some(4), "mask rows repeated per head (AABBCC) instead of tiled (ABCABC)"),
    (
        "rope",
        Some(3),
        "RoPE variant: interleaved pairs, sin sign flipped, or a table at a shifted position; Q, K or both",
    ),
    (
        "position-shift",
        Some(6),
        "later steps rotated at positions offset by K from those the cache was written with",
    ),
    ("cache-layout", Some(9), "decode reads prefill-written KV entries in another feature layout"),
    ("no-lm-head", Some(1), "the output is the final-norm hidden state, not logits"),
    ("first-slot-output", Some(2), "each phase returns its first position's logits instead of its last"),
    (
        "lm-head-shards",
        Some(12),
        "vocab split into N shards quantized with their own scales (or all dequantized with shard 0's)",
    ),
    (
        "quant",
        Some(7),
        "weights int8/int4 per channel, activations uint8/int16 per tensor, runtime input quantization",
    ),
];

pub fn finding_of(name: &str) -> Option<u32> {
    CATALOG.iter().find(|c| c.0 == name).and_then(|c| c.1)
}

/// Parse one spec into a fault, checking it applies to this architecture.
pub fn parse(text: &str, cfg: &ModelConfig) -> Result<Box<dyn Fault>> {
    let spec = FaultSpec::parse(text)?;
    let layers = cfg.num_layers;
    let fault: Box<dyn Fault> = match spec.name.as_str() {
        "shared-softmax" => {
            spec.allow(&[], 0)?;
            spec.check_layers(layers, true)?;
            if cfg.num_heads == 1 {
                return Err(spec.err(
                    "this model has one attention head: a softmax shared across heads is the ordinary one",
                ));
            }
            Box::new(SharedSoftmax { spec })
        }
        "mask-repeat" => {
            spec.allow(&[], 0)?;
            spec.check_layers(layers, true)?;
            if cfg.num_heads == 1 {
                return Err(
                    spec.err("this model has one attention head: repeating and tiling the mask are the same")
                );
            }
            Box::new(MaskRepeat { spec })
        }
        "rope" => {
            spec.allow(&["variant", "target", "shift"], 1)?;
            spec.check_layers(layers, true)?;
            let variant =
                spec.choice("variant", Some(0), "interleaved", &["interleaved", "sin-sign", "shift"])?;
            let target = spec.choice("target", None, "both", &["both", "q", "k"])?;
            let shift = spec.int("shift", None, if variant == "shift" { 1 } else { 0 }, -64..=64)?;
            if variant == "shift" && shift == 0 {
                return Err(spec.err("`shift` must be non-zero for the shift variant"));
            }
            Box::new(RopeFault { variant: variant.to_string(), target: target.to_string(), shift, spec })
        }
        "position-shift" => {
            spec.allow(&["k", "from"], 1)?;
            spec.check_layers(layers, false)?;
            let k = spec.int("k", Some(0), 1, -64..=64)?;
            if k == 0 {
                return Err(spec.err("a shift of 0 is a clean run"));
            }
            let from = spec.get("from", None).unwrap_or("decode").to_string();
            let from_chunk =
                match from.as_str() {
                    "decode" => None,
                    f => Some(f.strip_prefix("chunk").and_then(|c| c.parse::<usize>().ok()).ok_or_else(
                        || spec.err(format!("`from` = `{f}`: expected decode or chunkC (e.g. chunk1)")),
                    )?),
                };
            Box::new(PositionShift { k, from_chunk, spec })
        }
        "cache-layout" => {
            spec.allow(&["layout"], 1)?;
            spec.check_layers(layers, true)?;
            let layout = spec.choice("layout", Some(0), "transpose", &["transpose", "interleave"])?;
            if layout == "transpose" && cfg.num_kv_heads < 2 {
                return Err(spec.err(format!(
                    "`transpose` reads [kv_head][dim] as [dim][kv_head], which needs at least 2 kv heads; this model has {}",
                    cfg.num_kv_heads
                )));
            }
            let perm = cache_permutation(layout, cfg.num_kv_heads, cfg.head_dim);
            Box::new(CacheLayout { spec, perm })
        }
        "no-lm-head" => {
            spec.allow(&[], 0)?;
            spec.check_layers(layers, false)?;
            Box::new(NoLmHead { spec })
        }
        "first-slot-output" => {
            spec.allow(&[], 0)?;
            spec.check_layers(layers, false)?;
            Box::new(FirstSlot { spec })
        }
        "lm-head-shards" => {
            spec.allow(&["n", "scale", "bits"], 1)?;
            spec.check_layers(layers, false)?;
            let n = spec.int("n", Some(0), 2, 2..=16)? as usize;
            if n > cfg.vocab_size {
                return Err(spec.err(format!("{n} shards for a vocabulary of {}", cfg.vocab_size)));
            }
            let scale = spec.choice("scale", None, "own", &["own", "shard0"])?;
            let bits = spec.int("bits", None, 8, 2..=16)? as u32;
            Box::new(LmHeadShards { n, shard0: scale == "shard0", bits, spec })
        }
        "quant" => Box::new(super::quant::QuantFault::parse(spec, cfg)?),
        other => {
            let names: Vec<&str> = CATALOG.iter().map(|c| c.0).collect();
            let hint = crate::error::closest(other, names.iter().copied())
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
            return Err(Error::usage(format!(
                "unknown fault `{other}`{hint}; known faults: {}",
                names.join(", ")
            )));
        }
    };
    Ok(fault)
}

pub fn parse_all(texts: &[String], cfg: &ModelConfig) -> Result<Vec<Box<dyn Fault>>> {
    texts.iter().map(|t| parse(t, cfg)).collect()
}

/// The parameter grid `explain` ranks first: every fault with its main parameters, over all
/// layers. `explain` then refines the best per-layer faults layer by layer ([`per_layer`]).
pub fn grid(cfg: &ModelConfig) -> Vec<String> {
    let mut g = Vec::new();
    if cfg.num_heads > 1 {
        g.extend(["shared-softmax", "mask-repeat"].map(String::from));
    }
    for variant in ["interleaved", "sin-sign", "shift"] {
        for target in ["both", "q", "k"] {
            if variant == "shift" && target == "both" {
                continue; // the same shift on both sides changes nothing under RoPE
            }
            g.push(format!("rope:{variant},target={target}"));
        }
    }
    g.extend(["position-shift:1", "position-shift:-1"].map(String::from));
    g.push("cache-layout:interleave".into());
    if cfg.num_kv_heads >= 2 {
        g.push("cache-layout:transpose".into());
    }
    g.extend(["no-lm-head", "first-slot-output"].map(String::from));
    for n in [2, 3, 4] {
        g.push(format!("lm-head-shards:{n},scale=shard0"));
    }
    g.extend(["quant:w8a16", "quant:w8a8", "quant:w4a16", "quant:w4a8"].map(String::from));
    g
}

/// Faults that act per layer, narrowed to each single layer: `spec@layers=l` for every l.
/// Empty when the spec is not per layer or already names layers.
pub fn per_layer(spec: &str, cfg: &ModelConfig) -> Vec<String> {
    let name = spec.split([':', '@']).next().unwrap_or("");
    let per_layer = matches!(name, "shared-softmax" | "mask-repeat" | "rope" | "cache-layout");
    if !per_layer || spec.contains('@') || cfg.num_layers < 2 {
        return Vec::new();
    }
    (0..cfg.num_layers).map(|l| format!("{spec}@layers={l}")).collect()
}

fn in_layers(spec: &FaultSpec, layer: usize) -> bool {
    spec.applies(layer)
}

/// **shared-softmax** (finding 11). For each query row t, the scores of all heads are
/// normalised together: p[h,t,s] = exp(z[h,t,s] − m_t) / Σ_{h',s'} exp(z[h',t,s'] − m_t),
/// m_t = max_{h',s'} z[h',t,s']; masked (−inf) scores contribute 0. Each head's row then sums
/// to its share of the total instead of 1 (DFC's SoftmaxOp ignoring groups = NHEAD).
struct SharedSoftmax {
    spec: FaultSpec,
}

impl Fault for SharedSoftmax {
    fn spec(&self) -> String {
        self.spec.text.clone()
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(SharedSoftmaxHooks(self))
    }
}

struct SharedSoftmaxHooks<'a>(&'a SharedSoftmax);

impl Hooks for SharedSoftmaxHooks<'_> {
    fn softmax(&mut self, _ctx: &StepCtx, layer: usize, scores: &Tensor) -> Result<Option<Tensor>> {
        if !in_layers(&self.0.spec, layer) {
            return Ok(None);
        }
        let (h, t, s) = scores.dims3()?;
        let rows = scores.transpose(0, 1)?.contiguous()?.reshape((t, h * s))?;
        let p = candle_nn::ops::softmax_last_dim(&rows)?;
        Ok(Some(p.reshape((t, h, s))?.transpose(0, 1)?.contiguous()?))
    }
}

/// **mask-repeat** (finding 4). The [T, S] causal mask is broadcast to heads by repeating
/// rows (AABBCC) instead of tiling (ABCABC): head h, query t gets mask row ⌊(h·T + t)/H⌋.
struct MaskRepeat {
    spec: FaultSpec,
}

impl Fault for MaskRepeat {
    fn spec(&self) -> String {
        self.spec.text.clone()
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(MaskRepeatHooks(self))
    }
}

struct MaskRepeatHooks<'a>(&'a MaskRepeat);

impl Hooks for MaskRepeatHooks<'_> {
    fn mask(
        &mut self,
        _ctx: &StepCtx,
        layer: usize,
        allowed: &[Vec<bool>],
        heads: usize,
    ) -> Result<Option<Tensor>> {
        if !in_layers(&self.0.spec, layer) {
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

/// **rope** (finding 3). Variants, applied to queries, keys or both (`target`):
/// `interleaved` rotates pairs (2i, 2i+1) by frequency i instead of HF's rotate-half pairs
/// (i, i + D/2); `sin-sign` uses −sin (rotation by −angle); `shift` takes the table at
/// position p + `shift`. A shift on both sides is not offered: scores depend on position
/// differences only, so it is indistinguishable from a clean run.
struct RopeFault {
    spec: FaultSpec,
    variant: String,
    target: String,
    shift: i64,
}

impl Fault for RopeFault {
    fn spec(&self) -> String {
        self.spec.text.clone()
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(RopeHooks(self))
    }
}

struct RopeHooks<'a>(&'a RopeFault);

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

impl Hooks for RopeHooks<'_> {
    fn rope(
        &mut self,
        ctx: &StepCtx,
        layer: usize,
        which: Qk,
        x: &Tensor,
        rope: &Rope,
    ) -> Result<Option<Tensor>> {
        let f = self.0;
        let hit = match f.target.as_str() {
            "q" => which == Qk::Q,
            "k" => which == Qk::K,
            _ => true,
        };
        if !hit || !in_layers(&f.spec, layer) {
            return Ok(None);
        }
        let out = match f.variant.as_str() {
            "interleaved" => rope.apply(x, &ctx.positions, RopeLayout::Interleaved)?,
            "sin-sign" => {
                let (cos, sin) = rope.tables(&ctx.positions)?;
                rotate(x, &cos, &sin.neg()?, RopeLayout::Half)?
            }
            _ => rope.apply(x, &shifted(&ctx.positions, f.shift)?, RopeLayout::Half)?,
        };
        Ok(Some(out))
    }
}

/// **position-shift:K** (finding 6). Steps from the first decode step on (or from prefill
/// chunk C, `from=chunkC`) rotate queries and keys at p + K, while the cache keeps the
/// entries written before at their true positions: a BOS counted on one side only.
/// Shifting every position (from the first phase) would change nothing under RoPE, which is
/// why this fault starts later.
struct PositionShift {
    spec: FaultSpec,
    k: i64,
    from_chunk: Option<usize>,
}

impl Fault for PositionShift {
    fn spec(&self) -> String {
        self.spec.text.clone()
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(PositionShiftHooks(self))
    }
}

struct PositionShiftHooks<'a>(&'a PositionShift);

impl Hooks for PositionShiftHooks<'_> {
    fn rope(
        &mut self,
        ctx: &StepCtx,
        _layer: usize,
        _which: Qk,
        x: &Tensor,
        rope: &Rope,
    ) -> Result<Option<Tensor>> {
        let affected = match (ctx.phase, self.0.from_chunk) {
            (Phase::Decode(_), _) => true,
            (Phase::PrefillChunk(c), Some(from)) => c >= from,
            _ => false,
        };
        if !affected {
            return Ok(None);
        }
        Ok(Some(rope.apply(x, &shifted(&ctx.positions, self.0.k)?, RopeLayout::Half)?))
    }
}

/// **cache-layout** (finding 9). Decode steps read the KV entries that prefill wrote (keys and
/// values alike) with each token entry's KV·D features permuted; entries written by decode
/// stay consistent, so prefill is clean and decode drifts. `transpose`: the entry written as
/// [kv_head][dim] is read as [dim][kv_head] (read feature kv·D + d comes from written feature
/// d·KV + kv). `interleave`: each head's rotate-half halves [x1 | x2] are read as interleaved
/// pairs (read feature i < D/2 comes from 2i, D/2 + i from 2i + 1).
struct CacheLayout {
    spec: FaultSpec,
    perm: Vec<u32>,
}

pub fn cache_permutation(layout: &str, kv: usize, d: usize) -> Vec<u32> {
    (0..kv * d)
        .map(|f| {
            let (head, i) = (f / d, f % d);
            let src = match layout {
                "transpose" => i * kv + head,
                _ if i < d / 2 => head * d + 2 * i,
                _ => head * d + 2 * (i - d / 2) + 1,
            };
            src as u32
        })
        .collect()
}

impl Fault for CacheLayout {
    fn spec(&self) -> String {
        self.spec.text.clone()
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(CacheLayoutHooks(self))
    }
}

struct CacheLayoutHooks<'a>(&'a CacheLayout);

impl CacheLayoutHooks<'_> {
    /// Permute the features of the entries `from_prefill` marks, [KV, S, D] in and out.
    fn permute(&self, x: &Tensor, from_prefill: &[bool]) -> Result<Tensor> {
        let (kv, s, d) = x.dims3()?;
        let entries = x.transpose(0, 1)?.contiguous()?.reshape((s, kv * d))?;
        let perm = Tensor::new(self.0.perm.as_slice(), &Device::Cpu)?;
        let permuted = entries.index_select(&perm, 1)?;
        let pick: Vec<u8> = from_prefill.iter().map(|&p| u8::from(p)).collect();
        let pick = Tensor::new(pick.as_slice(), &Device::Cpu)?.reshape((s, 1))?.broadcast_as((s, kv * d))?;
        let mixed = pick.where_cond(&permuted, &entries)?;
        Ok(mixed.reshape((s, kv, d))?.transpose(0, 1)?.contiguous()?)
    }
}

impl Hooks for CacheLayoutHooks<'_> {
    fn cache_read(
        &mut self,
        ctx: &StepCtx,
        layer: usize,
        k: Tensor,
        v: Tensor,
        written_in: &[Phase],
    ) -> Result<(Tensor, Tensor)> {
        if !ctx.phase.is_decode() || !in_layers(&self.0.spec, layer) {
            return Ok((k, v));
        }
        let from_prefill: Vec<bool> = written_in.iter().map(|p| !p.is_decode()).collect();
        if !from_prefill.contains(&true) {
            return Ok((k, v));
        }
        Ok((self.permute(&k, &from_prefill)?, self.permute(&v, &from_prefill)?))
    }
}

/// **no-lm-head** (finding 1). The output is the final-norm hidden state [T, hidden], as a
/// graph that stops before lm_head returns it.
struct NoLmHead {
    spec: FaultSpec,
}

impl Fault for NoLmHead {
    fn spec(&self) -> String {
        self.spec.text.clone()
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(NoLmHeadHooks(None))
    }
}

struct NoLmHeadHooks(Option<Tensor>);

impl Hooks for NoLmHeadHooks {
    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        match tap {
            Tap::FinalNorm => {
                self.0 = Some(t.clone());
                Ok(t)
            }
            Tap::Logits => Ok(self.0.take().unwrap_or(t)),
            _ => Ok(t),
        }
    }
}

/// **first-slot-output** (finding 2). Each phase returns one row, its first position's
/// logits [1, vocab], where the runtime expects the last position's.
struct FirstSlot {
    spec: FaultSpec,
}

impl Fault for FirstSlot {
    fn spec(&self) -> String {
        self.spec.text.clone()
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(FirstSlotHooks)
    }
}

struct FirstSlotHooks;

impl Hooks for FirstSlotHooks {
    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        if tap == Tap::Logits {
            return Ok(t.narrow(0, 0, 1)?);
        }
        Ok(t)
    }
}

/// **lm-head-shards:N** (finding 12). The vocabulary is split into N contiguous shards of
/// ⌈V/N⌉ (the last shorter); each shard's logits are quantized symmetrically to `bits`
/// (default 8) with its own scale s_i = max|x_i| / (2^(bits−1) − 1) over the phase, q =
/// round-half-even(x / s_i). Dequantized with s_i (`scale=own`: quantization noise only) or
/// with shard 0's scale s_0 (`scale=shard0`: every other shard mis-scaled).
struct LmHeadShards {
    spec: FaultSpec,
    n: usize,
    shard0: bool,
    bits: u32,
}

impl Fault for LmHeadShards {
    fn spec(&self) -> String {
        self.spec.text.clone()
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(LmHeadShardsHooks(self))
    }
}

struct LmHeadShardsHooks<'a>(&'a LmHeadShards);

impl Hooks for LmHeadShardsHooks<'_> {
    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        if tap != Tap::Logits {
            return Ok(t);
        }
        let f = self.0;
        let (rows, vocab) = t.dims2()?;
        let mut x: Vec<f32> = t.flatten_all()?.to_vec1()?;
        let width = vocab.div_ceil(f.n);
        let qmax = ((1u32 << (f.bits - 1)) - 1) as f32;
        let scale_of = |x: &[f32], i: usize| -> f32 {
            let lo = i * width;
            let hi = ((i + 1) * width).min(vocab);
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
                let i = c / width;
                let q = (x[r * vocab + c] / scales[i]).round_ties_even().clamp(-qmax, qmax);
                x[r * vocab + c] = q * if f.shard0 { scales[0] } else { scales[i] };
            }
        }
        Ok(Tensor::from_vec(x, (rows, vocab), &Device::Cpu)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_that_do_not_apply_say_why() {
        let mut cfg = crate::model::synth::preset_config("tinystories").unwrap();
        cfg.num_kv_heads = 1;
        let e = parse("cache-layout:transpose", &cfg).err().unwrap().to_string();
        assert!(e.contains("at least 2 kv heads") && e.contains("has 1"), "{e}");
        cfg.num_heads = 1;
        let e = parse("shared-softmax", &cfg).err().unwrap().to_string();
        assert!(e.contains("one attention head"), "{e}");
        let e = parse("no-lm-head@layers=1", &cfg).err().unwrap().to_string();
        assert!(e.contains("not per layer"), "{e}");
        let e = parse("position-shift:0", &cfg).err().unwrap().to_string();
        assert!(e.contains("clean run"), "{e}");
    }

    #[test]
    fn permutations_are_permutations() {
        for (layout, kv, d) in [("transpose", 2, 4), ("transpose", 3, 8), ("interleave", 2, 8)] {
            let mut p = cache_permutation(layout, kv, d);
            p.sort();
            assert_eq!(p, (0..(kv * d) as u32).collect::<Vec<_>>(), "{layout}");
        }
        // interleave, one head of 4: read [m0, m2, m1, m3].
        assert_eq!(cache_permutation("interleave", 1, 4), vec![0, 2, 1, 3]);
        // transpose, 2 heads of 2: read (kv, d) from d*2 + kv.
        assert_eq!(cache_permutation("transpose", 2, 2), vec![0, 2, 1, 3]);
    }
}
