//! **quant** (finding 7; the hypotheses for findings 14 and 16): quantization emulation.
//!
//! - weights: symmetric per output channel, int8 (±127) or int4 (±7): w' = round(w / s_c)·s_c,
//!   s_c = max_j |w_cj| / qmax; lm_head included (a tied lm_head gets its own quantized copy).
//! - activations: affine per tensor (one scale and zero point per site and layer), uint8
//!   [0, 255] or int16 [−32768, 32767], calibrated as the min/max of the finite values seen
//!   at that site over the calibration runs (the run's own inputs, or the simulated device's
//!   calibration prompts), widened by 10% of the range on each side for headroom (a run may
//!   see values its calibration did not): s = (max − min)/(qmax − qmin),
//!   zp = qmin − round(min / s), q = clamp(round-half-even(x / s + zp), qmin, qmax),
//!   x' = (q − zp)·s. Masked (−inf) scores stay −inf.
//! - a site's channels: the last axis of the [tokens, features] sites (block-input, norm,
//!   attn-out, mlp-act, mlp-out, logits); (head, head-dim) pairs of q/k/v ([heads, tokens, D]).
//!   scores and probs have no feature axis (their last axis is key positions, which grows with
//!   the cache) and are one channel. Calibration keeps a min/max per channel; per tensor uses
//!   their joint range, so it is exactly the per-tensor quantizer above.
//! - `granularity=channel`: one affine per channel instead, each from its own min/max with
//!   the same headroom (per-channel activation scales).
//! - `keep=K` (K ≥ 1): at every site with more than K channels, the K channels of largest
//!   calibrated magnitude max(|min|, |max|) (ties: lower index) are quantized in int16 over
//!   their own joint range (per channel with `granularity=channel`), and the per-tensor range
//!   of the others no longer contains them: the "massive activation" channels of trained LLMs
//!   (a few residual-stream channels orders of magnitude above the rest) kept in 16 bits.
//! - inputs, as HailoRT's runtime makes them: embeddings as uint16 affine over the embedding
//!   table's range (embeddings.bin), RoPE cos/sin clipped to [−1, 1] and rounded half to even
//!   in `rope_bits` (default 16) affine steps (quantization.hpp); the 0/1 mask is exact.
//!
//! Spec: `quant:w8a16` (shorthand: w4|w8, a8|a16, either may be absent) or
//! `quant:weights=int8,acts=int16,points=qkv+probs,inputs=runtime,rope_bits=16`, plus
//! `granularity=tensor|channel` and `keep=K` on either form (`quant:w8a8,granularity=channel`).
//! Points: block-input, norm, qkv, scores, probs, attn-out, mlp-act, mlp-out, logits.

use super::spec::FaultSpec;
use super::{parse_boxed, Entry, Mechanism, OnDevice, Proof, Run};
use crate::capture::NoTaps;
use crate::error::Result;
use crate::inputs::InputSet;
use crate::model::config::ModelConfig;
use crate::model::hooks::{Hooks, NoHooks, Qk, StepCtx};
use crate::model::rope::{rotate, Rope, RopeLayout};
use crate::model::Decoder;
use crate::tap::{LayerTap, Tap};
use candle_core::{Device, Tensor};
use std::collections::BTreeMap;
use std::sync::Mutex;

pub const POINTS: &[&str] =
    &["block-input", "norm", "qkv", "scores", "probs", "attn-out", "mlp-act", "mlp-out", "logits"];

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Affine {
    pub scale: f32,
    pub zp: f32,
    pub qmin: f32,
    pub qmax: f32,
}

impl Affine {
    /// Affine quantizer covering [min, max] (widened to include 0, so zeros stay exact).
    pub fn calibrate(min: f32, max: f32, bits: u32, signed: bool) -> Self {
        let levels = ((1u64 << bits) - 1) as f32;
        let qmin = if signed { -((1u64 << (bits - 1)) as f32) } else { 0.0 };
        let qmax = qmin + levels;
        let (min, max) = (min.min(0.0), max.max(0.0));
        let scale = if max > min { (max - min) / levels } else { 1.0 };
        let zp = qmin - (min / scale).round_ties_even();
        Affine { scale, zp, qmin, qmax }
    }

    /// Quantize-dequantize; returns the value and whether it was clipped.
    pub fn apply(&self, x: f32) -> (f32, bool) {
        if !x.is_finite() {
            return (x, false);
        }
        let q = round_ties_even(x / self.scale + self.zp);
        let c = q.clamp(self.qmin, self.qmax);
        ((c - self.zp) * self.scale, c != q)
    }
}

/// [`Affine::apply`] on `x` in place, for the quantizer (scale, zp, qmin, qmax), without
/// branches (selects, so a loop of it vectorizes); returns whether it clipped. The clamp is
/// written as `clamp` computes it, not with `max`/`min`: those may pick either zero of
/// `max(-0.0, 0.0)` (x86's `maxss` keeps -0.0, aarch64's `fmaxnm` gives +0.0), which made a
/// tiny negative value quantized to code 0 of a range starting there -0.0 on one CPU and +0.0
/// on the other. `q` is NaN only for a non-finite `x`, which stays as it is.
#[inline(always)]
fn apply_in_place(x: &mut f32, scale: f32, zp: f32, qmin: f32, qmax: f32) -> bool {
    let v = *x;
    let q = round_ties_even(v / scale + zp);
    let c = if q < qmin {
        qmin
    } else if q > qmax {
        qmax
    } else {
        q
    };
    let finite = v.is_finite();
    *x = if finite { (c - zp) * scale } else { v };
    finite & (c != q)
}

crate::model::kernels::simd! {
    /// One quantizer over `xs` (a site with one: scores and probs, the largest), its clip count
    /// in 32-bit lanes of 8 so the loop vectorizes; AVX2 where the CPU has it (the same
    /// operations, so the same bits).
    fn quantize_all(q: &Affine, xs: &mut [f32]) -> u64 {
        let mut chunks = xs.chunks_exact_mut(8);
        let mut lanes = [0u32; 8];
        for chunk in &mut chunks {
            for (x, lane) in chunk.iter_mut().zip(lanes.iter_mut()) {
                *lane += u32::from(apply_in_place(x, q.scale, q.zp, q.qmin, q.qmax));
            }
        }
        let tail = chunks.into_remainder().iter_mut();
        let tail: u64 = tail.map(|x| u64::from(apply_in_place(x, q.scale, q.zp, q.qmin, q.qmax))).sum();
        lanes.iter().map(|&n| u64::from(n)).sum::<u64>() + tail
    }
}

/// One quantizer per channel, field by field (so a row's loop vectorizes).
struct PerChannel {
    scale: Vec<f32>,
    zp: Vec<f32>,
    qmin: Vec<f32>,
    qmax: Vec<f32>,
}

impl PerChannel {
    fn of(q: &[Affine]) -> Self {
        let field = |f: fn(&Affine) -> f32| q.iter().map(f).collect();
        PerChannel {
            scale: field(|a| a.scale),
            zp: field(|a| a.zp),
            qmin: field(|a| a.qmin),
            qmax: field(|a| a.qmax),
        }
    }
}

crate::model::kernels::simd! {
    /// `xs` as rows of `q`'s channels, each value by its channel's quantizer; returns how many
    /// clipped.
    fn quantize_rows(q: &PerChannel, xs: &mut [f32]) -> u64 {
        let mut clipped = 0u64;
        for row in xs.chunks_mut(q.scale.len().max(1)) {
            let mut n = 0u32;
            let channels = q.scale.iter().zip(&q.zp).zip(&q.qmin).zip(&q.qmax);
            for (x, (((s, z), lo), hi)) in row.iter_mut().zip(channels) {
                n += u32::from(apply_in_place(x, *s, *z, *lo, *hi));
            }
            clipped += u64::from(n);
        }
        clipped
    }
}

/// `y.round_ties_even()` wherever the result is clamped to a code range within ±2^22 (every
/// quantizer here): the float addition of 1.5·2^23 rounds half to even in one instruction,
/// where the std method calls libm's `rintf` per value on baseline x86-64 (no SSE4.1), a
/// tenth of a simulated HEF's frame. Beyond ±2^22 `y` is returned as is: out of every code
/// range either way, so the clamp and the clip flag are the same. The sign of a zero is kept.
#[inline(always)]
fn round_ties_even(y: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    let r = ((y + MAGIC) - MAGIC).copysign(y);
    if y.abs() < 4_194_304.0 {
        r
    } else {
        y
    }
}

/// How a site's flat values map onto its channels (module doc).
#[derive(Debug, Clone, Copy)]
enum Channels {
    One,
    Last(usize),
    /// [heads, tokens, d]: channel = head·d + j.
    HeadDim {
        tokens: usize,
        d: usize,
        heads: usize,
    },
}

impl Channels {
    fn of(tap: Tap, dims: &[usize]) -> Self {
        match (QuantFault::point_of(tap), dims) {
            (Some("scores" | "probs"), _) | (_, []) => Channels::One,
            (Some("qkv"), &[heads, tokens, d]) => Channels::HeadDim { tokens, d, heads },
            (_, d) => Channels::Last(d[d.len() - 1].max(1)),
        }
    }

    fn count(self) -> usize {
        match self {
            Channels::One => 1,
            Channels::Last(n) => n,
            Channels::HeadDim { d, heads, .. } => heads * d,
        }
    }

    fn index(self, i: usize) -> usize {
        match self {
            Channels::One => 0,
            Channels::Last(n) => i % n,
            Channels::HeadDim { tokens, d, .. } => (i / (tokens * d)) * d + i % d,
        }
    }

    /// Quantize `v` in place with `q` (one quantizer per channel, [`Channels::index`]'s
    /// order), walking the channels rather than dividing each index; returns how many were
    /// clipped. One quantizer (scores and probs, the largest sites) runs as one loop.
    fn apply(self, q: &[Affine], v: &mut [f32]) -> u64 {
        match (self, q) {
            (_, [one]) => quantize_all(one, v),
            (Channels::One | Channels::Last(_), _) => quantize_rows(&PerChannel::of(q), v),
            (Channels::HeadDim { tokens, d, .. }, _) => v
                .chunks_mut((tokens * d).max(1))
                .zip(q.chunks(d.max(1)))
                .map(|(head, q)| quantize_rows(&PerChannel::of(q), head))
                .sum(),
        }
    }
}

/// Calibrated range per channel (lo > hi: no finite value seen) and clip counts of one site.
#[derive(Debug, Clone, Default)]
struct SiteStat {
    lo: Vec<f32>,
    hi: Vec<f32>,
    clipped: u64,
    total: u64,
}

impl SiteStat {
    /// The joint range of the given channels, if any of them saw a finite value.
    fn range(&self, channels: impl Iterator<Item = usize>) -> Option<(f32, f32)> {
        let (lo, hi) = channels
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), c| (lo.min(self.lo[c]), hi.max(self.hi[c])));
        (lo <= hi).then_some((lo, hi))
    }

    fn all(&self) -> Option<(f32, f32)> {
        self.range(0..self.lo.len())
    }
}

pub struct QuantFault {
    weight_bits: Option<u32>,
    act: Option<(u32, bool)>,
    points: Vec<String>,
    runtime_inputs: bool,
    rope_bits: u32,
    per_channel: bool,
    /// Channels per site kept in int16 (module doc); 0: none.
    keep: usize,
    /// Calibrated ranges and clip counts per site ("layers.3.attn.probs").
    stats: Mutex<BTreeMap<String, SiteStat>>,
    embed_range: Mutex<Option<(f32, f32)>>,
}

impl QuantFault {
    fn point_of(tap: Tap) -> Option<&'static str> {
        Some(match tap {
            Tap::Layer(_, LayerTap::Input) => "block-input",
            Tap::Layer(_, LayerTap::AttnNorm | LayerTap::MlpNorm) | Tap::FinalNorm => "norm",
            Tap::Layer(_, LayerTap::Q | LayerTap::K | LayerTap::V) => "qkv",
            Tap::Layer(_, LayerTap::Scores) => "scores",
            Tap::Layer(_, LayerTap::Probs) => "probs",
            Tap::Layer(_, LayerTap::AttnOut) => "attn-out",
            Tap::Layer(_, LayerTap::MlpAct) => "mlp-act",
            Tap::Layer(_, LayerTap::MlpOut) => "mlp-out",
            Tap::Logits => "logits",
            _ => return None,
        })
    }

    fn quantized_site(&self, tap: Tap) -> bool {
        self.act.is_some() && Self::point_of(tap).is_some_and(|p| self.points.iter().any(|q| q == p))
    }
}

/// HEADROOM of the calibrated range on each side.
const HEADROOM: f32 = 0.1;

fn calibrated((min, max): (f32, f32), bits: u32, signed: bool) -> Affine {
    let pad = (max - min) * HEADROOM;
    Affine::calibrate(min - pad, max + pad, bits, signed)
}

impl QuantFault {
    /// One quantizer per channel of a calibrated site (module doc); None: nothing seen there.
    fn site_quantizers(&self, s: &SiteStat) -> Option<Vec<Affine>> {
        let (bits, signed) = self.act.expect("act set");
        let all = s.all()?;
        let n = s.lo.len();
        let mut kept = vec![false; n];
        if self.keep > 0 && n > self.keep {
            let mag = |c: usize| if s.lo[c] <= s.hi[c] { s.lo[c].abs().max(s.hi[c].abs()) } else { 0.0 };
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| mag(b).total_cmp(&mag(a)).then(a.cmp(&b)));
            for &c in &order[..self.keep] {
                kept[c] = true;
            }
        }
        let group = |k: bool| s.range((0..n).filter(|&c| kept[c] == k)).unwrap_or(all);
        let (rest, wide) = (group(false), group(true));
        Some(
            (0..n)
                .map(|c| {
                    let own = if self.per_channel { s.range(std::iter::once(c)).unwrap_or(all) } else { all };
                    match (kept[c], self.per_channel) {
                        (true, true) => calibrated(own, 16, true),
                        (true, false) => calibrated(wide, 16, true),
                        (false, true) => calibrated(own, bits, signed),
                        (false, false) => calibrated(rest, bits, signed),
                    }
                })
                .collect(),
        )
    }
}

/// Records the finite min/max at every site during calibration.
struct Calibrate<'a>(&'a QuantFault);

impl Hooks for Calibrate<'_> {
    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        if self.0.quantized_site(tap) {
            let ch = Channels::of(tap, t.dims());
            let v: Vec<f32> = t.flatten_all()?.to_vec1()?;
            let mut stats = self.0.stats.lock().expect("stats lock");
            let e = stats.entry(tap.to_string()).or_default();
            if e.lo.len() != ch.count() {
                (e.lo, e.hi) = (vec![f32::INFINITY; ch.count()], vec![f32::NEG_INFINITY; ch.count()]);
            }
            for (i, x) in v.into_iter().enumerate().filter(|(_, x)| x.is_finite()) {
                let c = ch.index(i);
                e.lo[c] = e.lo[c].min(x);
                e.hi[c] = e.hi[c].max(x);
            }
        }
        Ok(t)
    }
}

/// `t` with each of its values `x` replaced by `f(i, x)` (`i`: its index in row-major order).
pub(super) fn map_values(t: &Tensor, mut f: impl FnMut(usize, f32) -> f32) -> Result<Tensor> {
    let v: Vec<f32> = t.flatten_all()?.to_vec1()?;
    let out: Vec<f32> = v.into_iter().enumerate().map(|(i, x)| f(i, x)).collect();
    Ok(Tensor::from_vec(out, t.dims(), &Device::Cpu)?)
}

impl QuantFault {
    fn rope_table(&self, t: &Tensor) -> Result<Tensor> {
        // Runtime input quantization (quantization.hpp): clip to limvals [-1, 1], round half
        // to even in the input's affine steps.
        let q = Affine::calibrate(-1.0, 1.0, self.rope_bits, false);
        map_values(t, |_, x| q.apply(x.clamp(-1.0, 1.0)).0)
    }
}

impl Hooks for Run<'_, QuantFault> {
    /// Each value through its site's quantizer, calibrated before the run (only the clip
    /// counts of the notes follow the rows computed).
    fn rows_apart(&self) -> bool {
        true
    }

    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        let f = self.fault;
        let ch = Channels::of(tap, t.dims());
        let (q, ch) = if tap == Tap::Embed && f.runtime_inputs {
            let (lo, hi) = f.embed_range.lock().expect("lock").unwrap_or((-1.0, 1.0));
            (vec![Affine::calibrate(lo, hi, 16, false)], Channels::One)
        } else if f.quantized_site(tap) {
            let stats = f.stats.lock().expect("lock");
            match stats.get(&tap.to_string()).filter(|s| s.lo.len() == ch.count()) {
                Some(s) => match f.site_quantizers(s) {
                    Some(q) => (q, ch),
                    None => return Ok(t),
                },
                // Not calibrated at this shape (a site the calibration runs never reached).
                None => return Ok(t),
            }
        } else {
            return Ok(t);
        };
        let dims = t.dims().to_vec();
        let mut v: Vec<f32> = t.flatten_all()?.to_vec1()?;
        let clipped = ch.apply(&q, &mut v);
        if tap != Tap::Embed {
            let mut stats = f.stats.lock().expect("lock");
            let e = stats.entry(tap.to_string()).or_default();
            e.clipped += clipped;
            e.total += v.len() as u64;
        }
        Ok(Tensor::from_vec(v, dims, &Device::Cpu)?)
    }

    fn rope(
        &mut self,
        ctx: &StepCtx,
        _layer: usize,
        _which: Qk,
        x: &Tensor,
        rope: &Rope,
    ) -> Result<Option<Tensor>> {
        let f = self.fault;
        if !f.runtime_inputs {
            return Ok(None);
        }
        let (cos, sin) = rope.tables(&ctx.positions)?;
        Ok(Some(rotate(x, &f.rope_table(&cos)?, &f.rope_table(&sin)?, RopeLayout::Half)?))
    }
}

impl Mechanism for QuantFault {
    const ENTRY: Entry = Entry {
        name: "quant",
        finding: Some(7),
        summary: "weights int8/int4 per channel, activations uint8/int16 per tensor (or per channel, \
                  or with the top-K channels in int16), runtime input quantization",
        keys: &["preset", "weights", "acts", "points", "inputs", "rope_bits", "granularity", "keep"],
        positional: 1,
        per_layer: false,
        on_output: false,
        device: OnDevice::Frames,
        proof: Proof::Matrix(&[("quant:w4a8", "prefill/layers.0.*")]),
        grid: |_| ["w8a16", "w8a8", "w4a16", "w4a8"].map(String::from).to_vec(),
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, _cfg: &ModelConfig) -> Result<Self> {
        let mut weight_bits = None;
        let mut act = None;
        if let Some(short) = spec.get("preset", Some(0)) {
            let bad = || spec.err(format!("`{short}` is not a shorthand like w8a16, w4a16, w8, a8"));
            let mut rest = short;
            if let Some(r) = rest.strip_prefix('w') {
                let n: String = r.chars().take_while(char::is_ascii_digit).collect();
                weight_bits = Some(match n.as_str() {
                    "8" => 8,
                    "4" => 4,
                    _ => return Err(bad()),
                });
                rest = &r[n.len()..];
            }
            if let Some(r) = rest.strip_prefix('a') {
                act = Some(match r {
                    "8" => (8, false),
                    "16" => (16, true),
                    _ => return Err(bad()),
                });
                rest = "";
            }
            if !rest.is_empty() || (weight_bits.is_none() && act.is_none()) {
                return Err(bad());
            }
        }
        if spec.get("weights", None).is_some() {
            weight_bits = match spec.choice("weights", None, "none", &["int8", "int4", "none"])? {
                "int8" => Some(8),
                "int4" => Some(4),
                _ => None,
            };
        }
        if spec.get("acts", None).is_some() {
            act = match spec.choice("acts", None, "none", &["uint8", "int16", "none"])? {
                "uint8" => Some((8, false)),
                "int16" => Some((16, true)),
                _ => None,
            };
        }
        let points: Vec<String> = match spec.get("points", None) {
            None => POINTS.iter().map(|p| p.to_string()).collect(),
            Some(p) => p.split('+').map(String::from).collect(),
        };
        if let Some(bad) = points.iter().find(|p| !POINTS.contains(&p.as_str())) {
            return Err(spec.err(format!("point `{bad}` is not one of {}", POINTS.join(", "))));
        }
        let runtime_inputs = spec.choice("inputs", None, "runtime", &["runtime", "none"])? == "runtime";
        let rope_bits = spec.int("rope_bits", None, 16, 4..=16)? as u32;
        let per_channel = spec.choice("granularity", None, "tensor", &["tensor", "channel"])? == "channel";
        let keep = spec.int("keep", None, 0, 0..=65536)? as usize;
        if (per_channel || keep > 0) && act.is_none() {
            return Err(
                spec.err("granularity and keep shape the activation quantizer: give acts too (e.g. w8a8)")
            );
        }
        Ok(QuantFault {
            per_channel,
            keep,
            weight_bits,
            act,
            points,
            runtime_inputs,
            rope_bits,
            stats: Mutex::new(BTreeMap::new()),
            embed_range: Mutex::new(None),
        })
    }

    fn transform_weights(&self, model: &mut Decoder) -> Result<()> {
        // The embedding table's range, for the runtime's input quantization only, and once: a
        // fault is built for one checkpoint, and a frozen one (a HEF's expected quantization)
        // is composed with every candidate explain emulates (two passes over the table each).
        let mut embed_range = self.embed_range.lock().expect("lock");
        if self.runtime_inputs && embed_range.is_none() {
            // min/max of the stored dtype widen exactly.
            let range = |t: Tensor| t.to_dtype(candle_core::DType::F32).and_then(|t| t.to_scalar::<f32>());
            *embed_range = Some((range(model.embed.min_all()?)?, range(model.embed.max_all()?)?));
        }
        drop(embed_range);
        // Every projection and lm_head quantized as it is read (a tied lm_head too; the
        // embedding lookup stays unquantized): no quantized copy of the weights is held.
        if let Some(bits) = self.weight_bits {
            model.linears_mut().for_each(|l| l.weight_bits = Some(bits));
        }
        Ok(())
    }

    fn prepare(&self, model: &Decoder, inputs: &[InputSet]) -> Result<()> {
        if self.act.is_none() {
            return Ok(());
        }
        self.stats.lock().expect("lock").clear();
        for i in inputs {
            let mut stack = crate::model::hooks::HookStack::default();
            let mut cal = Calibrate(self);
            let mut plain = NoHooks;
            stack.hooks.push(&mut cal);
            stack.hooks.push(&mut plain);
            crate::model::run::run_inputs(
                model,
                i,
                &mut NoTaps,
                &mut stack,
                &mut crate::model::run::RunRecord::default(),
            )?;
        }
        Ok(())
    }

    fn notes(&self) -> Vec<String> {
        let stats = self.stats.lock().expect("lock");
        let mut v = Vec::new();
        if let Some(b) = self.weight_bits {
            v.push(format!("weights int{b}, symmetric per output channel"));
        }
        if let Some((bits, signed)) = self.act {
            let kind = if signed { "int" } else { "uint" };
            let mut worst: Vec<(&String, f64, Affine)> = stats
                .iter()
                .filter_map(|(k, s)| {
                    let rate = if s.total > 0 { s.clipped as f64 / s.total as f64 } else { 0.0 };
                    Some((k, rate, calibrated(s.all()?, bits, signed)))
                })
                .collect();
            worst.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
            let how = if self.per_channel { "per channel" } else { "per tensor" };
            let kept = if self.keep > 0 {
                format!(", the top {} channels of each site in int16", self.keep)
            } else {
                String::new()
            };
            v.push(format!(
                "activations {kind}{bits} affine {how}{kept} at {} sites ({})",
                worst.len(),
                self.points.join("+")
            ));
            for (site, rate, q) in worst.iter().take(3) {
                v.push(format!(
                    "{site}: scale {:.3e}, zero point {}, clip rate {:.2}%",
                    q.scale,
                    q.zp,
                    rate * 100.0
                ));
            }
        }
        if self.runtime_inputs {
            v.push(format!(
                "inputs: embeddings uint16, RoPE {}-bit clipped to [-1, 1], mask exact",
                self.rope_bits
            ));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch-free rounding and in-place quantizer against the std method and `apply`:
    /// ties, signed zeros, the ±2^22 edge, huge and non-finite values, bit for bit.
    #[test]
    fn fast_rounding_and_in_place_quantizing_equal_the_obvious_ones() {
        let mut xs: Vec<f32> = vec![0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 4_194_303.5, -4_194_303.5];
        xs.extend([4_194_304.0, 4_194_304.5, 8_388_607.5, 1e9, -1e30, f32::MAX, f32::MIN_POSITIVE, -1e-40]);
        xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        xs.extend((0..20_000).map(|i| (crate::fault::expected::splitmix64(i) as i64 as f32) * 1e-15));
        for &y in xs.iter().filter(|y| y.abs() < 4_194_304.0) {
            assert_eq!(round_ties_even(y).to_bits(), y.round_ties_even().to_bits(), "{y}");
        }
        for q in [Affine::calibrate(-3.0, 2.0, 16, true), Affine::calibrate(0.0, 2.55, 8, false)] {
            for &x in &xs {
                let (want, clipped) = q.apply(x);
                let mut got = x;
                assert_eq!(apply_in_place(&mut got, q.scale, q.zp, q.qmin, q.qmax), clipped, "{x}");
                assert!(
                    got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                    "{x}: {got} vs {want}"
                );
            }
            let mut all = xs.clone();
            let clipped = xs.iter().filter(|&&x| q.apply(x).1).count() as u64;
            assert_eq!(quantize_all(&q, &mut all), clipped);
            assert!(all.iter().zip(&xs).all(|(a, &x)| a.to_bits() == q.apply(x).0.to_bits() || a.is_nan()));
        }
        // Per channel: 7 quantizers over rows of 7 (and a short last row), each value by its own.
        let qs: Vec<Affine> =
            (0..7).map(|c| Affine::calibrate(-1.0 - c as f32, 0.5 + c as f32, 8 + c, c % 2 == 0)).collect();
        let mut all = xs.clone();
        let clipped = xs.iter().enumerate().filter(|(i, &x)| qs[i % 7].apply(x).1).count() as u64;
        assert_eq!(Channels::Last(7).apply(&qs, &mut all), clipped);
        for (i, (a, &x)) in all.iter().zip(&xs).enumerate() {
            assert!(a.to_bits() == qs[i % 7].apply(x).0.to_bits() || a.is_nan(), "{x} in channel {}", i % 7);
        }
    }

    #[test]
    fn affine_hand_values() {
        // uint8 over [0, 2.55]: scale 0.01, zp 0.
        let q = Affine::calibrate(0.0, 2.55, 8, false);
        assert!((q.scale - 0.01).abs() < 1e-7 && q.zp == 0.0);
        assert!((q.apply(0.014).0 - 0.01).abs() < 1e-6);
        let (v, clipped) = q.apply(3.0);
        assert!(clipped && (v - 2.55).abs() < 1e-5, "{v}");
        // int16 symmetric-ish range keeps zero exact.
        let q = Affine::calibrate(-1.0, 3.0, 16, true);
        assert_eq!(q.apply(0.0).0, 0.0);
        assert_eq!(q.apply(f32::NEG_INFINITY).0, f32::NEG_INFINITY);
    }

    #[test]
    fn weight_quant_is_per_channel() {
        let mut q = [vec![1.0f32, 0.3, -0.25], vec![100.0, 1.0, 0.0]];
        q.iter_mut().for_each(|row| crate::model::kernels::quantize_row(row, 4));
        assert_eq!(q[0][0], 1.0, "row max survives exactly");
        assert!((q[0][1] - 2.0 / 7.0).abs() < 1e-6, "0.3 -> 2/7 in steps of 1/7");
        assert!((q[0][2] + 2.0 / 7.0).abs() < 1e-6, "-0.25 -> -2/7");
        assert_eq!(q[1][1], 0.0, "1.0 is below half a step of 100/7");
    }

    fn fault(spec: &str) -> QuantFault {
        let cfg = crate::model::synth::preset_config("tinystories").unwrap();
        QuantFault::parse(&FaultSpec::parse(spec).unwrap(), &cfg).unwrap()
    }

    /// Channels 0..3 with ranges [0, 1], [-1, 1], [0, 100]: a massive-activation channel.
    fn site() -> SiteStat {
        SiteStat { lo: vec![0.0, -1.0, 0.0], hi: vec![1.0, 1.0, 100.0], ..Default::default() }
    }

    #[test]
    fn per_tensor_per_channel_and_kept_channels() {
        let pad = |lo: f32, hi: f32| (lo - (hi - lo) * HEADROOM, hi + (hi - lo) * HEADROOM);
        let tensor = fault("quant:a8").site_quantizers(&site()).unwrap();
        let joint = calibrated((-1.0, 100.0), 8, false);
        assert_eq!(tensor, vec![joint; 3], "per tensor: one quantizer over the joint range");
        let (lo, hi) = pad(-1.0, 100.0);
        assert_eq!(joint, Affine::calibrate(lo, hi, 8, false));

        let chan = fault("quant:a8,granularity=channel").site_quantizers(&site()).unwrap();
        assert_eq!(chan[0], calibrated((0.0, 1.0), 8, false));
        assert_eq!(chan[2], calibrated((0.0, 100.0), 8, false));
        assert!(chan[0].scale < joint.scale / 50.0, "a small channel gets its own fine scale");

        let kept = fault("quant:a8,keep=1").site_quantizers(&site()).unwrap();
        assert_eq!(kept[2], calibrated((0.0, 100.0), 16, true), "the massive channel in int16");
        let rest = calibrated((-1.0, 1.0), 8, false);
        assert_eq!((kept[0], kept[1]), (rest, rest), "the others share a range without it");
        // 0.5 survives to within half a step of [-1.2, 1.2]/255, not of [-11.1, 110.1]/255.
        assert!((kept[0].apply(0.5).0 - 0.5).abs() <= rest.scale / 2.0 + 1e-6);
        assert!((tensor[0].apply(0.5).0 - 0.5).abs() > rest.scale);

        // keep needs more channels than it keeps: one-channel sites (scores, probs) are as per tensor.
        let one = SiteStat { lo: vec![-3.0], hi: vec![4.0], ..Default::default() };
        assert_eq!(
            fault("quant:a8,keep=1").site_quantizers(&one).unwrap(),
            vec![calibrated((-3.0, 4.0), 8, false)]
        );
    }

    #[test]
    fn channels_of_each_site_kind() {
        let q = Channels::of(Tap::Layer(0, LayerTap::Q), &[2, 3, 4]);
        assert_eq!(q.count(), 8);
        // [head 1, token 2, j 3] is flat index 1·12 + 2·4 + 3 = 23 -> channel 1·4 + 3.
        assert_eq!(q.index(23), 7);
        assert_eq!(Channels::of(Tap::Layer(0, LayerTap::Scores), &[2, 3, 5]).count(), 1);
        let x = Channels::of(Tap::Layer(0, LayerTap::MlpAct), &[3, 6]);
        assert_eq!((x.count(), x.index(13)), (6, 1));
    }

    #[test]
    fn shorthand_and_errors() {
        let cfg = crate::model::synth::preset_config("tinystories").unwrap();
        let e =
            QuantFault::parse(&FaultSpec::parse("quant:w8,keep=4").unwrap(), &cfg).err().unwrap().to_string();
        assert!(e.contains("acts"), "{e}");
        let e = QuantFault::parse(&FaultSpec::parse("quant:a8,granularity=row").unwrap(), &cfg)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("channel"), "{e}");
        let cfg = crate::model::synth::preset_config("tinystories").unwrap();
        let f = QuantFault::parse(&FaultSpec::parse("quant:w8a16").unwrap(), &cfg).unwrap();
        assert_eq!((f.weight_bits, f.act), (Some(8), Some((16, true))));
        let e = QuantFault::parse(&FaultSpec::parse("quant:w3").unwrap(), &cfg).err().unwrap().to_string();
        assert!(e.contains("shorthand"), "{e}");
        let e = QuantFault::parse(&FaultSpec::parse("quant:a8,points=qkv+softmax").unwrap(), &cfg)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("`softmax`") && e.contains("probs"), "{e}");
    }
}
