//! Rotary position embedding as transformers computes it.
//!
//! `inv_freq` follows `compute_default_rope_parameters`, `_compute_linear_scaling_rope_parameters`,
//! `_compute_llama3_parameters` and `_compute_yarn_parameters` (transformers 5.23,
//! modeling_rope_utils.py), evaluated in float32 like torch does: a Python-float scalar meeting
//! a float32 tensor is rounded to f32 before the op. cos/sin of `pos·inv_freq` are the float32
//! product's cosine, correctly rounded (computed in f64, then rounded): torch's vectorized cosf
//! is within an ulp of that. YaRN's attention factor then scales cos and sin
//! (`cos = emb.cos() * self.attention_scaling` in every `*RotaryEmbedding.forward`).

use crate::error::Result;
use crate::model::config::{RopeConfig, RopeScaling};
use crate::model::kernels;
use candle_core::{Device, Tensor};

#[derive(Debug, Clone)]
pub struct Rope {
    /// One frequency per rotated pair: `head_dim / 2` values.
    pub inv_freq: Vec<f32>,
    /// Multiplies cos and sin (`attention_scaling`); 1 except for YaRN.
    pub attention_factor: f32,
}

/// How a rotation pairs the features of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// HF's `rotate_half`: feature i pairs with i + D/2.
    Half,
    /// GPT-J / Meta's original: feature 2i pairs with 2i+1.
    Interleaved,
}

impl Rope {
    pub fn new(cfg: &RopeConfig, head_dim: usize) -> Self {
        // pos_freqs = base ** (arange(0, dim, 2).float() / dim), all in float32.
        let base = cfg.theta as f32;
        let pos_freqs: Vec<f32> = (0..head_dim / 2)
            .map(|i| {
                let exponent = (2 * i) as f32 / head_dim as f32;
                (base as f64).powf(exponent as f64) as f32
            })
            .collect();
        // inv_freq = 1 / pos_freqs.
        let mut inv_freq: Vec<f32> = pos_freqs.iter().map(|p| 1.0f32 / p).collect();
        let mut attention_factor = 1.0f32;
        match cfg.scaling {
            RopeScaling::Default => {}
            // `inv_freq /= factor`.
            RopeScaling::Linear { factor } => inv_freq.iter_mut().for_each(|f| *f /= factor as f32),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => llama3(
                &mut inv_freq,
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            ),
            RopeScaling::Yarn { .. } => {
                let (f, a) = yarn(&cfg.scaling, cfg.theta, head_dim, &pos_freqs);
                (inv_freq, attention_factor) = (f, a);
            }
        }
        Rope { inv_freq, attention_factor }
    }

    /// cos and sin tables, each [positions.len(), D/2].
    pub fn tables(&self, positions: &[usize]) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            for &f in &self.inv_freq {
                let angle = (p as f32 * f) as f64;
                // `emb.cos() * attention_scaling`: the f32 cosine, then an f32 product (exact
                // when the factor is 1).
                cos.push(angle.cos() as f32 * self.attention_factor);
                sin.push(angle.sin() as f32 * self.attention_factor);
            }
        }
        let dev = Device::Cpu;
        Ok((
            Tensor::from_vec(cos, (positions.len(), half), &dev)?,
            Tensor::from_vec(sin, (positions.len(), half), &dev)?,
        ))
    }

    /// Rotate `x` [heads, T, D] at `positions` (length T).
    pub fn apply(&self, x: &Tensor, positions: &[usize], layout: RopeLayout) -> Result<Tensor> {
        let (cos, sin) = self.tables(positions)?;
        rotate(x, &cos, &sin, layout)
    }
}

/// x [heads, T, D] rotated by tables [T, D/2]. Same float ops as HF's
/// `q * cos + rotate_half(q) * sin` (no fused multiply-add).
pub fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Tensor> {
    if layout == RopeLayout::Half {
        return Ok(kernels::rope_half(x, cos, sin)?);
    }
    let x4 = x.unsqueeze(0)?.contiguous()?;
    Ok(candle_nn::rotary_emb::rope_i(&x4, cos, sin)?.squeeze(0)?)
}

/// `_compute_llama3_parameters`: Python-float scalars meet float32 tensors, so each scalar is
/// rounded to f32 before the op.
fn llama3(inv_freq: &mut [f32], factor: f64, low_freq_factor: f64, high_freq_factor: f64, original: usize) {
    let (factor, low, high) = (factor as f32, low_freq_factor as f32, high_freq_factor as f32);
    let old_ctx = original as f32;
    let low_freq_wavelen = (original as f64 / low_freq_factor) as f32;
    let high_freq_wavelen = (original as f64 / high_freq_factor) as f32;
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    for f in inv_freq.iter_mut() {
        let wavelen = two_pi / *f;
        let scaled = if wavelen > low_freq_wavelen { *f / factor } else { *f };
        let smooth = (old_ctx / wavelen - low) / (high - low);
        let smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled;
        // HF: ~(wavelen < high) * ~(wavelen > low); wavelen is never NaN here.
        let medium = wavelen >= high_freq_wavelen && wavelen <= low_freq_wavelen;
        *f = if medium { smoothed } else { scaled };
    }
}

/// `_compute_yarn_parameters` (transformers 5.23): frequencies blended between the original
/// (extrapolation) and divided by `factor` (interpolation) along a ramp over the dimensions
/// whose wavelength falls between `beta_fast` and `beta_slow` rotations of the original
/// context; and the attention factor that scales cos and sin. The correction range is Python
/// float arithmetic (f64, with the unrounded theta); the blend is float32 tensor arithmetic.
fn yarn(scaling: &RopeScaling, theta: f64, dim: usize, pos_freqs: &[f32]) -> (Vec<f32>, f32) {
    let RopeScaling::Yarn {
        factor,
        original_max_position_embeddings,
        attention_factor,
        beta_fast,
        beta_slow,
        mscale,
        mscale_all_dim,
        truncate,
    } = *scaling
    else {
        unreachable!("called for yarn only")
    };
    // get_mscale(scale, mscale=1): 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
    let get_mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
    // `if mscale and mscale_all_dim`: both present and non-zero.
    let attention = attention_factor.unwrap_or_else(|| match (mscale, mscale_all_dim) {
        (Some(m), Some(a)) if m != 0.0 && a != 0.0 => get_mscale(factor, m) / get_mscale(factor, a),
        _ => get_mscale(factor, 1.0),
    });
    // `rope_parameters.get("beta_fast") or 32`, `... or 1`: absent or 0 take the paper's values.
    let beta_fast = beta_fast.filter(|b| *b != 0.0).unwrap_or(32.0);
    let beta_slow = beta_slow.filter(|b| *b != 0.0).unwrap_or(1.0);
    let d = dim as f64;
    let original = original_max_position_embeddings as f64;
    // find_correction_dim: the dimension whose wavelength makes `rotations` turns in the
    // original context.
    let correction_dim = |rotations: f64| {
        (d * (original / (rotations * 2.0 * std::f64::consts::PI)).ln()) / (2.0 * theta.ln())
    };
    let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
    if truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
    // linear_ramp_factor: `if min == max: max += 0.001` (prevents a division by zero).
    if low == high {
        high += 0.001;
    }
    let (low32, span32, factor32) = (low as f32, (high - low) as f32, factor as f32);
    let inv_freq = pos_freqs
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let ramp = ((i as f32 - low32) / span32).clamp(0.0, 1.0);
            let extrapolation_factor = 1.0 - ramp;
            let extrapolation = 1.0 / p;
            let interpolation = 1.0 / (factor32 * p);
            interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor
        })
        .collect();
    (inv_freq, attention as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_inv_freq_matches_formula() {
        let r = Rope::new(&RopeConfig { theta: 10000.0, scaling: RopeScaling::Default }, 8);
        let expect: Vec<f32> = (0..4).map(|i| 1.0 / 10000f32.powf(2.0 * i as f32 / 8.0)).collect();
        for (a, b) in r.inv_freq.iter().zip(&expect) {
            assert!((a - b).abs() <= f32::EPSILON * b.abs() * 2.0, "{a} vs {b}");
        }
    }

    #[test]
    fn llama3_bands() {
        // head_dim 16, theta 10000, original context 64: wavelengths span the three bands.
        let cfg = RopeConfig {
            theta: 10000.0,
            scaling: RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 64,
            },
        };
        let plain = Rope::new(&RopeConfig { theta: 10000.0, scaling: RopeScaling::Default }, 16);
        let scaled = Rope::new(&cfg, 16);
        let two_pi = 2.0 * std::f32::consts::PI;
        for (p, s) in plain.inv_freq.iter().zip(&scaled.inv_freq) {
            let wavelen = two_pi / p;
            if wavelen < 16.0 {
                assert_eq!(p, s, "high frequencies are kept");
            } else if wavelen > 64.0 {
                assert!((p / 8.0 - s).abs() < 1e-9, "low frequencies are divided by factor");
            } else {
                assert!(s < p && *s > p / 8.0, "medium frequencies are interpolated");
            }
        }
    }

    #[test]
    fn rotation_matches_rotate_half_by_hand() {
        let r = Rope::new(&RopeConfig { theta: 100.0, scaling: RopeScaling::Default }, 4);
        let x = Tensor::new(&[[[1f32, 2., 3., 4.]]], &Device::Cpu).unwrap(); // [1 head, 1 token, 4]
        let y = r.apply(&x, &[3], RopeLayout::Half).unwrap();
        let y: Vec<f32> = y.flatten_all().unwrap().to_vec1().unwrap();
        let (c0, s0) = ((3.0f32 * r.inv_freq[0]).cos(), (3.0f32 * r.inv_freq[0]).sin());
        let (c1, s1) = ((3.0f32 * r.inv_freq[1]).cos(), (3.0f32 * r.inv_freq[1]).sin());
        let expect = [1. * c0 - 3. * s0, 2. * c1 - 4. * s1, 3. * c0 + 1. * s0, 4. * c1 + 2. * s1];
        for (a, b) in y.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{y:?} vs {expect:?}");
        }
    }
}
