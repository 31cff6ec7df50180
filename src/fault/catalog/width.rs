//! Faults that depend on width (finding 16: base-scope generation degenerates on every
//! checkpoint with hidden ≥ 576, stays coherent on every one with hidden ≤ 288). Each models a
//! device computing a feature dimension in W-wide tiles (or in a fixed-width accumulator), and
//! each is a **bit-exact no-op** when the dimension fits one tile (hidden ≤ W): its hooks do not
//! answer there, so the decoder's own kernels run.
//!
//! Rounding is to nearest, ties to even (as `quant`); "a row" is one token's features. The
//! independent implementation is `references/check_width.py` (numpy, from these definitions).

use crate::error::Result;
use crate::fault::spec::FaultSpec;
use crate::fault::{parse_boxed, Entry, Mechanism, OnDevice, Proof, Run};
use crate::model::config::ModelConfig;
use crate::model::hooks::{Hooks, NormSite, Projection, StepCtx};
use crate::model::kernels;
use crate::tap::{LayerTap, Tap};
use candle_core::{Device, Tensor};

/// The widths explain tries before the hidden size's own divisors.
pub const SEARCHED_WIDTHS: [usize; 5] = [256, 384, 512, 768, 1024];
/// The accumulator sizes explain tries for `norm-acc`.
pub const SEARCHED_BITS: [u32; 3] = [16, 20, 24];
/// explain searches the width faults on models wider than this (finding 16 records every
/// checkpoint up to 288 coherent; the narrowest tile of the grid is 256).
pub const SEARCHED_ABOVE: usize = 256;
/// The largest tile width a spec may name.
const MAX_WIDTH: i64 = 1 << 16;

/// The tile widths explain ranks on `cfg`: [`SEARCHED_WIDTHS`] and the multiples of 64 dividing
/// the hidden size, those narrower than it (a tile as wide as the row leaves every width fault a
/// no-op); none on models of hidden ≤ [`SEARCHED_ABOVE`].
pub fn widths(cfg: &ModelConfig) -> Vec<usize> {
    let h = cfg.hidden_size;
    if h <= SEARCHED_ABOVE {
        return Vec::new();
    }
    let divisors = (1..=h / 64).map(|k| k * 64).filter(|w| h.is_multiple_of(*w));
    let mut ws: Vec<usize> = SEARCHED_WIDTHS.into_iter().chain(divisors).filter(|&w| w < h).collect();
    ws.sort_unstable();
    ws.dedup();
    ws
}

/// The tile width `w` (positional 0): a multiple of 64.
fn width(spec: &FaultSpec) -> Result<usize> {
    let w = spec.int("w", Some(0), 512, 64..=MAX_WIDTH)?;
    if w % 64 != 0 {
        return Err(
            spec.err(format!("`w` = {w} is not a multiple of 64; a tile width is 64·k (e.g. 256, 512)"))
        );
    }
    Ok(w as usize)
}

/// Whether a per-layer fault acts at `layer` (None: the final norm or lm_head, which it reaches
/// only when it names no layers).
fn applies(spec: &FaultSpec, layer: Option<usize>) -> bool {
    match layer {
        Some(l) => spec.applies(l),
        None => spec.layers.is_none(),
    }
}

/// A tensor's values as f32 (a norm weight may be held as stored, bf16 or f16).
fn f32s(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1()?)
}

/// A tensor's rows [rows, last] as f32 values, with its dims.
fn rows_of(t: &Tensor) -> Result<(Vec<f32>, usize, Vec<usize>)> {
    let dims = t.dims().to_vec();
    Ok((f32s(t)?, *dims.last().unwrap_or(&1), dims))
}

fn qmax(bits: u32) -> f32 {
    ((1u32 << (bits - 1)) - 1) as f32
}

/// **tile-sum:W** (finding 16). A product `x Wᵀ` over an input dimension K > W is computed per
/// W-wide tile of K (tile t: features t·W .. min((t+1)·W, K)), each tile's partial sum p_t
/// [rows, out] written in the activation format before the tiles are added:
/// s = max_j |Σ_t p_t[j]| / qmax per row (qmax = 2^(bits−1) − 1, the full sum's range),
/// `mode=requant` (default): q(p) = clamp(round(p / s), ±qmax) · s;
/// `mode=saturate`: q(p) = clamp(p, ±qmax · s); then y = Σ_t q(p_t) + bias (a row whose product
/// is all zero is left as it is). `bits` = 8 (default) or 16. `target=hidden` (default): the
/// products whose input is hidden-wide (q, k, v, o when heads·head_dim = hidden, gate, up,
/// lm_head); `target=all` adds down_proj (input: the intermediate size). Weight quantization,
/// when set, is applied to whole rows of W as without the fault.
pub struct TileSum {
    w: usize,
    bits: u32,
    mode: SumMode,
    all: bool,
    hidden: usize,
}

crate::named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SumMode {
        Requant = "requant",
        Saturate = "saturate",
    }
}

crate::named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SumTarget {
        Hidden = "hidden",
        All = "all",
    }
}

impl Mechanism for TileSum {
    const ENTRY: Entry = Entry {
        name: "tile-sum",
        finding: Some(16),
        summary: "products over a dimension wider than W summed per W-wide tile, each partial requantized",
        keys: &["w", "bits", "mode", "target"],
        positional: 1,
        per_layer: true,
        on_output: false,
        device: OnDevice::Frames,
        proof: Proof::WideMatrix(&[("tile-sum:64", "prefill/logits")]),
        grid: |cfg| widths(cfg).iter().map(|w| w.to_string()).collect(),
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Self> {
        let w = width(spec)?;
        let bits = spec.int("bits", None, 8, 8..=16)?;
        if bits != 8 && bits != 16 {
            return Err(spec.err(format!("`bits` = {bits}: the activation format is 8 or 16 bits")));
        }
        let mode = spec.pick("mode", None, SumMode::Requant)?;
        let all = spec.pick("target", None, SumTarget::Hidden)? == SumTarget::All;
        Ok(TileSum { w, bits: bits as u32, mode, all, hidden: cfg.hidden_size })
    }
}

impl Hooks for Run<'_, TileSum> {
    fn projects(&self, layer: Option<usize>) -> bool {
        self.fault.hidden > self.fault.w && applies(self.spec, layer)
    }

    fn project(
        &mut self,
        _ctx: &StepCtx,
        layer: Option<usize>,
        _which: Projection,
        x: &Tensor,
        lin: &kernels::Proj,
    ) -> Result<Option<Tensor>> {
        let f = self.fault;
        let k = x.dims().last().copied().unwrap_or(0);
        if !applies(self.spec, layer) || k <= f.w || !(f.all || k == f.hidden) {
            return Ok(None);
        }
        tile_sum(x, lin, f).map(Some)
    }

    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    fn rows_apart(&self) -> bool {
        true
    }
}

fn tile_sum(x: &Tensor, lin: &kernels::Proj, f: &TileSum) -> Result<Tensor> {
    let (xs, k, dims) = rows_of(x)?;
    let rows = xs.len() / k.max(1);
    let tiles = k.div_ceil(f.w);
    let mut partials: Vec<Vec<f32>> = Vec::with_capacity(tiles);
    for t in 0..tiles {
        let span = t * f.w..((t + 1) * f.w).min(k);
        let mut masked = vec![0f32; rows * k];
        for r in 0..rows {
            let (a, b) = (r * k + span.start, r * k + span.end);
            masked[a..b].copy_from_slice(&xs[a..b]);
        }
        let xm = Tensor::from_vec(masked, (rows, k), &Device::Cpu)?;
        let p = kernels::linear(&xm, lin.w, None, lin.weight_bits)?;
        partials.push(p.flatten_all()?.to_vec1()?);
    }
    let n = partials[0].len() / rows.max(1);
    let bias: Option<Vec<f32>> =
        lin.b.as_ref().map(|b| b.flatten_all().and_then(|b| b.to_vec1())).transpose()?;
    let qm = qmax(f.bits);
    let mut y = vec![0f32; rows * n];
    for r in 0..rows {
        let row = r * n..(r + 1) * n;
        let mut m = 0f32;
        for j in row.clone() {
            let full = partials.iter().fold(0f32, |a, p| a + p[j]);
            m = m.max(full.abs());
        }
        let s = m / qm;
        for (j, out) in row.clone().zip(y[row].iter_mut()) {
            let mut acc = 0f32;
            for p in &partials {
                let v = p[j];
                acc += match (s > 0.0, f.mode) {
                    (false, _) => v,
                    (true, SumMode::Requant) => (v / s).round_ties_even().clamp(-qm, qm) * s,
                    (true, SumMode::Saturate) => v.clamp(-qm * s, qm * s),
                };
            }
            *out = match &bias {
                Some(b) => acc + b[j - r * n],
                None => acc,
            };
        }
    }
    let mut out_dims = dims;
    *out_dims.last_mut().expect("a product's input has a feature dimension") = n;
    Ok(Tensor::from_vec(y, out_dims, &Device::Cpu)?)
}

/// **norm-acc:BITS** (finding 16). RMSNorm's sum of squares accumulated in a saturating signed
/// fixed-point accumulator of BITS bits (16–32): per row, the input's 8-bit codes
/// c_i = round(x_i / s), s = max|x| / 127, are squared and added into a register that saturates
/// at cap = 2^(BITS−1) − 1 (the terms are non-negative, so saturating at each add is saturating
/// at the end). A row whose Σc² stays ≤ cap is normalized as without the fault (the accumulator
/// only fails by saturating); a saturated row uses Σx² = cap·s², i.e.
/// y_i = x_i · (1/√(cap·s²/H + eps)) · w_i (the factor computed in f64, then f32). A no-op
/// whenever H·127² ≤ cap (BITS 24: H ≤ 520). `target=softmax`: the attention softmax's
/// denominator instead: per row of probabilities p (the decoder's softmax), the terms
/// e_s = p_s / max p (= exp(z_s − max z)) as 16-bit codes round(e_s · 32767) add into the same
/// register; a saturated row becomes p'_s = e_s / (cap / 32767).
pub struct NormAcc {
    cap: i64,
    softmax: bool,
    hidden: usize,
}

crate::named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum AccTarget {
        Norm = "norm",
        Softmax = "softmax",
    }
}

/// Whether a BITS-bit accumulator of squared 8-bit codes can saturate on a `hidden`-wide row.
pub fn acc_can_saturate(hidden: usize, bits: u32) -> bool {
    (hidden as i64) * 127 * 127 > (1i64 << (bits - 1)) - 1
}

impl Mechanism for NormAcc {
    const ENTRY: Entry = Entry {
        name: "norm-acc",
        finding: Some(16),
        summary: "RMSNorm's sum of squares (or softmax's denominator) in a saturating BITS-bit accumulator",
        keys: &["bits", "target"],
        positional: 1,
        per_layer: true,
        on_output: false,
        device: OnDevice::Frames,
        proof: Proof::WideMatrix(&[("norm-acc:16", "prefill/layers.0.attn_norm")]),
        grid: |cfg| {
            if cfg.hidden_size <= SEARCHED_ABOVE {
                return Vec::new();
            }
            SEARCHED_BITS
                .into_iter()
                .filter(|&b| acc_can_saturate(cfg.hidden_size, b))
                .map(|b| b.to_string())
                .collect()
        },
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Self> {
        let bits = spec.int("bits", Some(0), 16, 16..=32)?;
        let softmax = spec.pick("target", None, AccTarget::Norm)? == AccTarget::Softmax;
        Ok(NormAcc { cap: (1i64 << (bits - 1)) - 1, softmax, hidden: cfg.hidden_size })
    }
}

impl Hooks for Run<'_, NormAcc> {
    fn norm(
        &mut self,
        _ctx: &StepCtx,
        site: NormSite,
        x: &Tensor,
        w: &Tensor,
        eps: f32,
    ) -> Result<Option<Tensor>> {
        let f = self.fault;
        if f.softmax || !applies(self.spec, site.layer()) || (f.hidden as i64) * 127 * 127 <= f.cap {
            return Ok(None);
        }
        let (xs, n, dims) = rows_of(x)?;
        let ws = f32s(w)?;
        let mut out: Option<Vec<f32>> = None;
        for (r, row) in xs.chunks(n).enumerate() {
            let m = row.iter().fold(0f32, |a, &v| a.max(v.abs()));
            let s = m / 127.0;
            if s == 0.0 {
                continue;
            }
            let acc: i64 = row.iter().map(|&v| (v / s).round_ties_even() as i64).map(|c| c * c).sum();
            if acc <= f.cap {
                continue;
            }
            let y = match &mut out {
                Some(y) => y,
                None => out.insert(kernels::rms_norm(x, w, eps)?.flatten_all()?.to_vec1()?),
            };
            let ms = f.cap as f64 * (s as f64) * (s as f64) / n as f64;
            let inv = (1.0 / (ms + eps as f64).sqrt()) as f32;
            for (i, o) in y[r * n..(r + 1) * n].iter_mut().enumerate() {
                *o = row[i] * inv * ws[i];
            }
        }
        Ok(out.map(|y| Tensor::from_vec(y, dims, &Device::Cpu)).transpose()?)
    }

    fn softmax(&mut self, _ctx: &StepCtx, layer: usize, scores: &Tensor) -> Result<Option<Tensor>> {
        let f = self.fault;
        if !f.softmax || !self.spec.applies(layer) {
            return Ok(None);
        }
        let p = crate::model::attention::softmax(scores)?;
        let (mut ps, n, dims) = rows_of(&p)?;
        let unit = 32767f64;
        let mut changed = false;
        for row in ps.chunks_mut(n) {
            let m = row.iter().fold(0f32, |a, &v| a.max(v));
            if m <= 0.0 || m.is_nan() {
                continue;
            }
            let acc: i64 = row.iter().map(|&v| ((v / m) as f64 * unit).round_ties_even() as i64).sum();
            if acc <= f.cap {
                continue;
            }
            changed = true;
            let denom = (f.cap as f64 / unit) as f32;
            for v in row.iter_mut() {
                *v = (*v / m) / denom;
            }
        }
        Ok(Some(if changed { Tensor::from_vec(ps, dims, &Device::Cpu)? } else { p }))
    }

    fn needs_explicit_attention(&self, layer: usize) -> bool {
        self.fault.softmax && self.spec.applies(layer)
    }

    fn rows_apart(&self) -> bool {
        true
    }
}

/// **norm-width:W** (finding 16). RMSNorm's mean of squares over the wrong width when the row
/// is wider than one W-wide tile (H > W): `variant=first` (default) ms = Σ_{i<W} x_i² / W (the
/// first tile only); `variant=pad` ms = Σ_i x_i² / (⌈H/W⌉·W) (the width padded up to whole
/// tiles; a no-op when W divides H). y_i = x_i · (1/√(ms + eps)) · w_i, the sum and the factor
/// in f64, then f32. Acts on the layers' input and post-attention norms and the final norm.
pub struct NormWidth {
    w: usize,
    pad: bool,
    hidden: usize,
}

crate::named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum WidthVariant {
        First = "first",
        Pad = "pad",
    }
}

impl Mechanism for NormWidth {
    const ENTRY: Entry = Entry {
        name: "norm-width",
        finding: Some(16),
        summary: "RMSNorm's mean over the first W features, or over the width padded to whole W-wide tiles",
        keys: &["w", "variant"],
        positional: 2,
        per_layer: true,
        on_output: false,
        device: OnDevice::Frames,
        proof: Proof::WideMatrix(&[("norm-width:64", "prefill/layers.0.attn_norm")]),
        grid: |cfg| {
            let h = cfg.hidden_size;
            widths(cfg)
                .into_iter()
                .flat_map(|w| {
                    let pad = (!h.is_multiple_of(w)).then(|| format!("{w},pad"));
                    std::iter::once(w.to_string()).chain(pad)
                })
                .collect()
        },
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Self> {
        let w = width(spec)?;
        let pad = spec.pick("variant", Some(1), WidthVariant::First)? == WidthVariant::Pad;
        Ok(NormWidth { w, pad, hidden: cfg.hidden_size })
    }
}

impl Hooks for Run<'_, NormWidth> {
    fn norm(
        &mut self,
        _ctx: &StepCtx,
        site: NormSite,
        x: &Tensor,
        w: &Tensor,
        eps: f32,
    ) -> Result<Option<Tensor>> {
        let f = self.fault;
        let h = f.hidden;
        if h <= f.w || (f.pad && h.is_multiple_of(f.w)) || !applies(self.spec, site.layer()) {
            return Ok(None);
        }
        let (xs, n, dims) = rows_of(x)?;
        let ws = f32s(w)?;
        let (take, count) = if f.pad { (n, n.div_ceil(f.w) * f.w) } else { (f.w.min(n), f.w) };
        let mut y = vec![0f32; xs.len()];
        for (row, out) in xs.chunks(n).zip(y.chunks_mut(n)) {
            let ss: f64 = row[..take].iter().map(|&v| v as f64 * v as f64).sum();
            let inv = (1.0 / (ss / count as f64 + eps as f64).sqrt()) as f32;
            for ((o, &v), &g) in out.iter_mut().zip(row).zip(&ws) {
                *o = v * inv * g;
            }
        }
        Ok(Some(Tensor::from_vec(y, dims, &Device::Cpu)?))
    }

    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    fn rows_apart(&self) -> bool {
        true
    }
}

/// **tile-scale:W** (finding 16). The activations entering the products over the hidden size
/// (the outputs of the layers' input and post-attention norms and of the final norm) are
/// quantized per W-wide tile, each tile t with its own scale s_t = max |x_tile t| per row, and
/// dequantized with tile 0's scale: x'_i = x_i · (s_0 / s_t) for i in tile t (the ratio in f32;
/// tile 0 and all-zero tiles unchanged). The rounding itself is `quant`'s; this fault is the
/// wrong scale alone, so one tile (H ≤ W) is exactly the identity.
pub struct TileScale {
    w: usize,
    hidden: usize,
}

impl Mechanism for TileScale {
    const ENTRY: Entry = Entry {
        name: "tile-scale",
        finding: Some(16),
        summary: "activations quantized per W-wide tile, every tile dequantized with tile 0's scale",
        keys: &["w"],
        positional: 1,
        per_layer: true,
        on_output: false,
        device: OnDevice::Frames,
        proof: Proof::WideMatrix(&[("tile-scale:64", "prefill/layers.0.attn_norm")]),
        grid: |cfg| widths(cfg).iter().map(|w| w.to_string()).collect(),
        parse: parse_boxed::<Self>,
    };

    fn parse(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Self> {
        Ok(TileScale { w: width(spec)?, hidden: cfg.hidden_size })
    }
}

/// x'_i = x_i · (s_0 / s_t) per row and W-wide tile t (see [`TileScale`]).
pub fn tile_scale_rows(xs: &mut [f32], n: usize, w: usize) {
    for row in xs.chunks_mut(n) {
        let s0 = row[..w.min(n)].iter().fold(0f32, |a, &v| a.max(v.abs()));
        for tile in row[w.min(n)..].chunks_mut(w) {
            let st = tile.iter().fold(0f32, |a, &v| a.max(v.abs()));
            if st == 0.0 {
                continue;
            }
            let r = s0 / st;
            for v in tile.iter_mut() {
                *v *= r;
            }
        }
    }
}

impl Hooks for Run<'_, TileScale> {
    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        let f = self.fault;
        let site = match tap {
            Tap::Layer(l, LayerTap::AttnNorm | LayerTap::MlpNorm) => Some(l),
            Tap::FinalNorm => None,
            _ => return Ok(t),
        };
        if f.hidden <= f.w || !applies(self.spec, site) {
            return Ok(t);
        }
        let (mut xs, n, dims) = rows_of(&t)?;
        tile_scale_rows(&mut xs, n, f.w);
        Ok(Tensor::from_vec(xs, dims, &Device::Cpu)?)
    }

    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    fn rows_apart(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(hidden: usize) -> ModelConfig {
        let mut c = crate::model::synth::preset_config("tinystories").unwrap();
        c.hidden_size = hidden;
        c
    }

    #[test]
    fn grids_search_the_widths_narrower_than_the_row() {
        assert_eq!(widths(&cfg(576)), vec![64, 192, 256, 384, 512]);
        assert_eq!(widths(&cfg(288)), vec![256]);
        assert!(widths(&cfg(256)).is_empty() && widths(&cfg(64)).is_empty());
        let grid = (NormWidth::ENTRY.grid)(&cfg(576));
        assert_eq!(grid, ["64", "192", "256", "256,pad", "384", "384,pad", "512", "512,pad"]);
        assert_eq!((NormAcc::ENTRY.grid)(&cfg(576)), ["16", "20", "24"]);
        assert_eq!((NormAcc::ENTRY.grid)(&cfg(288)), ["16", "20"]);
        assert!(acc_can_saturate(576, 24) && !acc_can_saturate(520, 24) && acc_can_saturate(521, 24));
    }

    #[test]
    fn bad_parameters_are_refused_by_name() {
        let c = cfg(576);
        for (text, says) in [
            ("tile-sum:500", "multiple of 64"),
            ("tile-sum:0", "out of range"),
            ("tile-sum:512,bits=12", "8 or 16"),
            ("tile-sum:512,mode=round", "`mode`"),
            ("norm-acc:12", "16..=32"),
            ("norm-acc:33", "16..=32"),
            ("norm-acc:24,target=probs", "`target`"),
            ("norm-width:512,middle", "`variant`"),
            ("tile-scale:x", "`w` must be an integer"),
        ] {
            let e = crate::fault::catalog::parse(text, &c).err().unwrap_or_else(|| panic!("{text} parsed"));
            let e = e.to_string();
            assert!(e.contains(says) && e.contains(text), "{text}: {e}");
        }
    }

    #[test]
    fn tile_scale_rescales_later_tiles_to_tile_zero() {
        let mut xs = vec![1.0, -2.0, 4.0, 1.0, 0.0, 0.0, 0.5, 0.25];
        tile_scale_rows(&mut xs, 8, 2);
        // Tile 0 max 2: tile 1 (max 4) halves, tile 2 (zero) stays, tile 3 (max 0.5) x4.
        assert_eq!(xs, vec![1.0, -2.0, 2.0, 0.5, 0.0, 0.0, 2.0, 1.0]);
        let mut one = vec![3.0, -7.0];
        tile_scale_rows(&mut one, 2, 2);
        assert_eq!(one, vec![3.0, -7.0]);
    }
}
