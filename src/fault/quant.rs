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
//! - inputs, as HailoRT's runtime makes them: embeddings as uint16 affine over the embedding
//!   table's range (embeddings.bin), RoPE cos/sin clipped to [−1, 1] and rounded half to even
//!   in `rope_bits` (default 16) affine steps (quantization.hpp); the 0/1 mask is exact.
//!
//! Spec: `quant:w8a16` (shorthand: w4|w8, a8|a16, either may be absent) or
//! `quant:weights=int8,acts=int16,points=qkv+probs,inputs=runtime,rope_bits=16`.
//! Points: block-input, norm, qkv, scores, probs, attn-out, mlp-act, mlp-out, logits.

use super::spec::FaultSpec;
use super::{parse_boxed, Entry, Mechanism};
use crate::capture::NoTaps;
use crate::error::Result;
use crate::inputs::InputSet;
use crate::model::config::ModelConfig;
use crate::model::hooks::{Hooks, NoHooks, Qk, StepCtx};
use crate::model::rope::{rotate, Rope, RopeLayout};
use crate::model::{Checkpoint, Decoder};
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
        let q = (x / self.scale + self.zp).round_ties_even();
        let c = q.clamp(self.qmin, self.qmax);
        ((c - self.zp) * self.scale, c != q)
    }
}

#[derive(Debug, Clone, Default)]
struct SiteStat {
    min: f32,
    max: f32,
    seen: bool,
    clipped: u64,
    total: u64,
}

pub struct QuantFault {
    weight_bits: Option<u32>,
    act: Option<(u32, bool)>,
    points: Vec<String>,
    runtime_inputs: bool,
    rope_bits: u32,
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

fn quantize_weight(w: &Tensor, bits: u32) -> Result<Tensor> {
    let qmax = ((1u32 << (bits - 1)) - 1) as f32;
    let (rows, cols) = w.dims2()?;
    let mut v: Vec<f32> = w.flatten_all()?.to_vec1()?;
    for row in v.chunks_mut(cols) {
        let m = row.iter().fold(0f32, |a, &b| a.max(b.abs()));
        let s = if m == 0.0 { 1.0 } else { m / qmax };
        for x in row.iter_mut() {
            *x = (*x / s).round_ties_even().clamp(-qmax, qmax) * s;
        }
    }
    Ok(Tensor::from_vec(v, (rows, cols), &Device::Cpu)?)
}

/// HEADROOM of the calibrated range on each side.
const HEADROOM: f32 = 0.1;

fn calibrated(s: &SiteStat, bits: u32, signed: bool) -> Affine {
    let pad = (s.max - s.min) * HEADROOM;
    Affine::calibrate(s.min - pad, s.max + pad, bits, signed)
}

/// Records the finite min/max at every site during calibration.
struct Calibrate<'a>(&'a QuantFault);

impl Hooks for Calibrate<'_> {
    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        if self.0.quantized_site(tap) {
            let v: Vec<f32> = t.flatten_all()?.to_vec1()?;
            let mut stats = self.0.stats.lock().expect("stats lock");
            let e = stats.entry(tap.to_string()).or_default();
            for x in v.into_iter().filter(|x| x.is_finite()) {
                if !e.seen {
                    (e.min, e.max, e.seen) = (x, x, true);
                }
                e.min = e.min.min(x);
                e.max = e.max.max(x);
            }
        }
        Ok(t)
    }
}

struct QuantHooks<'a>(&'a QuantFault);

impl QuantHooks<'_> {
    fn rope_table(&self, t: &Tensor) -> Result<Tensor> {
        // Runtime input quantization (quantization.hpp): clip to limvals [-1, 1], round half
        // to even in the input's affine steps.
        let q = Affine::calibrate(-1.0, 1.0, self.0.rope_bits, false);
        let v: Vec<f32> = t.flatten_all()?.to_vec1()?;
        let v: Vec<f32> = v.into_iter().map(|x| q.apply(x.clamp(-1.0, 1.0)).0).collect();
        Ok(Tensor::from_vec(v, t.dims(), &Device::Cpu)?)
    }
}

impl Hooks for QuantHooks<'_> {
    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        let f = self.0;
        let q = if tap == Tap::Embed && f.runtime_inputs {
            let (lo, hi) = f.embed_range.lock().expect("lock").unwrap_or((-1.0, 1.0));
            Affine::calibrate(lo, hi, 16, false)
        } else if f.quantized_site(tap) {
            let (bits, signed) = f.act.expect("act set");
            let stats = f.stats.lock().expect("lock");
            match stats.get(&tap.to_string()) {
                Some(s) if s.seen => calibrated(s, bits, signed),
                _ => return Ok(t),
            }
        } else {
            return Ok(t);
        };
        let dims = t.dims().to_vec();
        let v: Vec<f32> = t.flatten_all()?.to_vec1()?;
        let mut clipped = 0u64;
        let out: Vec<f32> = v
            .iter()
            .map(|&x| {
                let (y, c) = q.apply(x);
                clipped += u64::from(c);
                y
            })
            .collect();
        if tap != Tap::Embed {
            let mut stats = f.stats.lock().expect("lock");
            let e = stats.entry(tap.to_string()).or_default();
            e.clipped += clipped;
            e.total += v.len() as u64;
        }
        Ok(Tensor::from_vec(out, dims, &Device::Cpu)?)
    }

    fn rope(
        &mut self,
        ctx: &StepCtx,
        _layer: usize,
        _which: Qk,
        x: &Tensor,
        rope: &Rope,
    ) -> Result<Option<Tensor>> {
        if !self.0.runtime_inputs {
            return Ok(None);
        }
        let (cos, sin) = rope.tables(&ctx.positions)?;
        Ok(Some(rotate(x, &self.rope_table(&cos)?, &self.rope_table(&sin)?, RopeLayout::Half)?))
    }
}

impl Mechanism for QuantFault {
    const ENTRY: Entry = Entry {
        name: "quant",
        finding: Some(7),
        summary:
            "weights int8/int4 per channel, activations uint8/int16 per tensor, runtime input quantization",
        keys: &["preset", "weights", "acts", "points", "inputs", "rope_bits"],
        positional: 1,
        per_layer: false,
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
        Ok(QuantFault {
            weight_bits,
            act,
            points,
            runtime_inputs,
            rope_bits,
            stats: Mutex::new(BTreeMap::new()),
            embed_range: Mutex::new(None),
        })
    }

    fn transform_weights(&self, ckpt: &mut Checkpoint) -> Result<()> {
        let embed = ckpt.tensor("model.embed_tokens.weight")?;
        let lo = embed.min_all()?.to_scalar::<f32>()?;
        let hi = embed.max_all()?.to_scalar::<f32>()?;
        *self.embed_range.lock().expect("lock") = Some((lo, hi));
        let Some(bits) = self.weight_bits else { return Ok(()) };
        if ckpt.config.tie_word_embeddings {
            let lm = ckpt.lm_head()?.clone();
            ckpt.tensors.insert("lm_head.weight".into(), lm);
            ckpt.config.tie_word_embeddings = false;
        }
        let names: Vec<String> = ckpt
            .tensors
            .keys()
            .filter(|n| n.ends_with("proj.weight") || n.as_str() == "lm_head.weight")
            .cloned()
            .collect();
        for n in names {
            let q = quantize_weight(&ckpt.tensors[&n], bits)?;
            ckpt.tensors.insert(n, q);
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

    fn hooks<'a>(&'a self, _spec: &'a FaultSpec) -> Box<dyn Hooks + 'a> {
        Box::new(QuantHooks(self))
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
                .filter(|(_, s)| s.seen)
                .map(|(k, s)| {
                    let rate = if s.total > 0 { s.clipped as f64 / s.total as f64 } else { 0.0 };
                    (k, rate, calibrated(s, bits, signed))
                })
                .collect();
            worst.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
            v.push(format!(
                "activations {kind}{bits} affine per tensor at {} sites ({})",
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
        let w = Tensor::new(&[[1.0f32, 0.3, -0.25], [100.0, 1.0, 0.0]], &Device::Cpu).unwrap();
        let q: Vec<Vec<f32>> = quantize_weight(&w, 4).unwrap().to_vec2().unwrap();
        assert_eq!(q[0][0], 1.0, "row max survives exactly");
        assert!((q[0][1] - 2.0 / 7.0).abs() < 1e-6, "0.3 -> 2/7 in steps of 1/7");
        assert!((q[0][2] + 2.0 / 7.0).abs() < 1e-6, "-0.25 -> -2/7");
        assert_eq!(q[1][1], 0.0, "1.0 is below half a step of 100/7");
    }

    #[test]
    fn shorthand_and_errors() {
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
