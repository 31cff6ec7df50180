//! The decoder's hot loops on f32 slices: projections (gemm in tiles, or matrix-vector products
//! for a few rows), RMSNorm, silu·up with a vectorized exp, RoPE, the residual adds, and the
//! thread choice shared by every kernel.
//!
//! Each kernel is a plain function over slices with a fixed order of operations, compiled twice
//! (AVX2 and baseline) by [`simd!`]: no fused multiply-add is formed (Rust never contracts
//! `a * b + c`), so both builds give identical bits, and so does aarch64 (NEON is its baseline).
//! The matrix-vector product has AVX-512, AVX2 and NEON builds of one summation order (`dot`);
//! projections of more rows go through gemm in tiles (`tiles`).
//!
//! Products of more rows go through gemm, which picks its micro-kernels by CPU at run time
//! (AVX-512 where the CPU has it, the `x86-v4` feature; AVX2; NEON), each summing an output in
//! depth order. Every call is one depth block of a size fixed by K ([`gemm_fixed`]) and clear
//! of gemm's horizontal kernels, so the reference gives the same bits on every CPU, at every
//! thread count and every cut into tiles (tests/cross_isa.rs: x86_64 against aarch64).

use candle_core::Tensor;

mod data;
mod dot;
mod parts;
mod simd;
mod tiles;

pub use data::{f32_rows, with_data, WeightData};
#[cfg(target_arch = "x86_64")]
pub use dot::PREFETCH_BYTES;
pub use parts::{for_parts, for_rows, set_threads, threads, SharedOut};
#[cfg(target_arch = "x86_64")]
pub use simd::has_avx2;
pub use simd::quantize_row;
pub(crate) use simd::simd;
pub use tiles::{gemm_fixed, gemm_main, GEMM_HORIZONTAL, PANEL_BYTES};

use data::weight_data;
use dot::*;
use tiles::*;

/// Rows of x up to which a projection is a matrix-vector product ([`matvec`]: W read once in
/// its stored dtype) rather than gemm calls on widened panels.
const MATVEC_ROWS: usize = 4;

/// Whether products of `a` rows and of `b` rows onto each of `widths` outputs take the same
/// kernels ([`matvec`]s, gemm's main kernels, or hefprobe's own for a tiny width), so that every
/// row of either comes out with the same bits: neither kernel's sums depend on the rows beside.
pub fn rows_alike(a: usize, b: usize, widths: &[usize]) -> bool {
    let kernel = |t: usize, n: usize| (t <= MATVEC_ROWS, gemm_main(t, n.min(MIN_TILE_COLS), 3, true));
    widths.iter().all(|&n| kernel(a, n) == kernel(b, n))
}

/// One projection as the kernels read it: W [N, K] (checkpoint layout, f32, bf16 or f16), an
/// f32 bias, and `weight_bits`: each row of W quantized as it is read ([`quantize_row`]).
#[derive(Clone, Copy)]
pub struct Proj<'a> {
    pub w: &'a Tensor,
    pub b: Option<&'a Tensor>,
    pub weight_bits: Option<u32>,
}

/// `y = x Wᵀ + b` for x [T, K], y [T, N]: [`linears`] of one projection.
pub fn linear(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    weight_bits: Option<u32>,
) -> candle_core::Result<Tensor> {
    let mut y = linears(x, &[Proj { w, b, weight_bits }])?;
    Ok(y.remove(0))
}

/// `x Wᵢᵀ + bᵢ` for each projection of `ps` (q, k and v; gate and up), each [T, Nᵢ]. Threads
/// split the output features, so each reads its own part of W once (decode is a read of W).
/// For the few rows of decode ([`MATVEC_ROWS`]) every projection's rows go in one dispatch of
/// [`matvec`]s, one part per thread: three small products then cost one hand-over and one
/// wait at the end, not three. For more rows each projection goes to gemm in calls of
/// [`rows_per_call`] rows, widened (and quantized) into a reused buffer unless W is f32 and
/// read as it is.
pub fn linears(x: &Tensor, ps: &[Proj]) -> candle_core::Result<Vec<Tensor>> {
    let x = f32_rows(x)?.contiguous()?;
    let (t, k) = x.dims2()?;
    // candle's `contiguous` is a clone of a contiguous tensor: no copy.
    let ws = ps.iter().map(|p| p.w.contiguous()).collect::<candle_core::Result<Vec<_>>>()?;
    let mut ns = Vec::with_capacity(ws.len());
    for w in &ws {
        let (n, k2) = w.dims2()?;
        if k != k2 {
            candle_core::bail!("linear: input has {k} features, the weight expects {k2}");
        }
        ns.push(n);
    }
    let mut ys: Vec<Vec<f32>> = ns.iter().map(|&n| vec![0f32; t * n]).collect();
    let outs: Vec<SharedOut> = ys.iter_mut().map(|y| SharedOut::new(y)).collect();
    {
        let guards: Vec<_> = ws.iter().map(|w| w.storage_and_layout()).collect();
        let data = guards.iter().map(|(s, l)| weight_data(s, l)).collect::<candle_core::Result<Vec<_>>>()?;
        with_data(&x, |xs, xl| {
            let xs = &xs[xl.start_offset()..];
            if t <= MATVEC_ROWS {
                let total: usize = ns.iter().sum();
                for_rows(total, 16, t * total * k, |rows| {
                    let mut base = 0;
                    for (i, &n) in ns.iter().enumerate() {
                        let (lo, hi) = (rows.start.max(base), rows.end.min(base + n));
                        if lo < hi {
                            let bits = ps[i].weight_bits;
                            matvec_rows(xs, t, k, (data[i], bits), lo - base..hi - base, &outs[i], n);
                        }
                        base += n;
                    }
                });
            } else {
                for ((&d, p), (&n, out)) in data.iter().zip(ps).zip(ns.iter().zip(&outs)) {
                    gemm_rows(xs, t, k, (d, p.weight_bits), n, out);
                }
            }
        })?;
    }
    ys.into_iter()
        .zip(ns)
        .zip(ps)
        .map(|((y, n), p)| {
            let y = Tensor::from_vec(y, (t, n), x.device())?;
            match p.b {
                Some(b) => y.broadcast_add(b),
                None => Ok(y),
            }
        })
        .collect()
}

/// Lanes of every vectorized loop: one AVX2 register of f32.
pub const LANES: usize = 8;

/// e^x for 8 lanes, within 1 ulp of the correctly rounded value over the normal range
/// (Cephes `expf`: Cody–Waite reduction by ln 2, degree-6 polynomial). -inf gives 0, +inf and
/// overflow give +inf, NaN stays NaN, results below f32's normal range flush to 0.
#[inline(always)]
pub fn exp8(x: [f32; LANES]) -> [f32; LANES] {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4; // ln 2 split in two (Cephes): C1 exact in 9 bits
    const C2: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5·2²³: adding it rounds to an integer (ties to even)
    let mut out = [0f32; LANES];
    for i in 0..LANES {
        let v = x[i];
        let c = v.clamp(-87.336_55, 88.722_83);
        let n = (c * LOG2E + ROUND) - ROUND;
        let r = (c - n * C1) - n * C2;
        let mut p = 1.987_569_1e-4f32;
        p = p * r + 1.398_199_9e-3;
        p = p * r + 8.333_452e-3;
        p = p * r + 4.166_579_6e-2;
        p = p * r + 1.666_666_5e-1;
        p = p * r + 0.5; // 5.0000001e-1 in Cephes' expf, the same f32
        p = p * (r * r) + r + 1.0;
        let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
        let e = p * scale;
        out[i] = if v < -87.336_55 {
            0.0
        } else if v > 88.722_83 {
            f32::INFINITY
        } else if v.is_nan() {
            v
        } else {
            e
        };
    }
    out
}

simd! {
    /// `silu(g) · u = g / (1 + e^-g) · u` element-wise (transformers' SiLU times up_proj).
    fn silu_mul_slice(g: &[f32], u: &[f32], out: &mut [f32]) {
        let n = g.len().min(u.len()).min(out.len());
        let full = n / LANES * LANES;
        for i in (0..full).step_by(LANES) {
            let mut neg = [0f32; LANES];
            for j in 0..LANES {
                neg[j] = -g[i + j];
            }
            let e = exp8(neg);
            for j in 0..LANES {
                out[i + j] = g[i + j] / (1.0 + e[j]) * u[i + j];
            }
        }
        for i in full..n {
            let mut neg = [0f32; LANES];
            neg[0] = -g[i];
            out[i] = g[i] / (1.0 + exp8(neg)[0]) * u[i];
        }
    }
}

/// silu(gate) · up for two tensors of the same shape.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> candle_core::Result<Tensor> {
    // An exp costs ~20 multiply-adds: that is the work a thread split is weighed by.
    elementwise2("silu·up: gate and up", gate, up, 20, silu_mul_slice)
}

/// `kernel(a, b, out)` over two f32 tensors of the same shape, split across threads by
/// element ranges; `cost` is an element's work in multiply-adds (what a split is weighed by).
fn elementwise2(
    what: &str,
    a: &Tensor,
    b: &Tensor,
    cost: usize,
    kernel: fn(&[f32], &[f32], &mut [f32]),
) -> candle_core::Result<Tensor> {
    if a.dims() != b.dims() {
        candle_core::bail!("{what}: {:?} and {:?} differ", a.dims(), b.dims());
    }
    let (a, b) = (f32_rows(a)?.contiguous()?, f32_rows(b)?.contiguous()?);
    let n = a.elem_count();
    let mut y = vec![0f32; n];
    let out = SharedOut::new(&mut y);
    with_data(&a, |xs, al| {
        with_data(&b, |ys, bl| {
            let (xs, ys) = (&xs[al.start_offset()..][..n], &ys[bl.start_offset()..][..n]);
            for_parts(n, 64, n * cost, |r| {
                // SAFETY: parts cover disjoint ranges of `y`.
                let o = unsafe { out.slice(r.start, r.len()) };
                kernel(&xs[r.clone()], &ys[r], o);
            })
        })
    })??;
    Tensor::from_vec(y, a.dims(), a.device())
}

simd! {
    /// One row of `rotate_half` RoPE: out[i] = x[i]·cos[i] − x[i+h]·sin[i] and
    /// out[i+h] = x[i]·sin[i] + x[i+h]·cos[i] (h = D/2). The same products and one rounding per
    /// sum as transformers' `q * cos + rotate_half(q) * sin` (a·b + (−c)·d = a·b − c·d exactly).
    fn rope_half_row(x: &[f32], cos: &[f32], sin: &[f32], out: &mut [f32]) {
        let h = cos.len().min(sin.len()).min(x.len() / 2).min(out.len() / 2);
        let (x1, x2) = x.split_at(h);
        let (o1, o2) = out.split_at_mut(h);
        for i in 0..h {
            o1[i] = x1[i] * cos[i] - x2[i] * sin[i];
            o2[i] = x1[i] * sin[i] + x2[i] * cos[i];
        }
    }
}

/// `rotate_half` RoPE of x [heads, T, D] with tables cos, sin [T, D/2].
pub fn rope_half(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let (heads, t, d) = x.dims3()?;
    if d % 2 != 0 || cos.dims() != [t, d / 2] || sin.dims() != [t, d / 2] {
        candle_core::bail!("rope: x {:?} and tables {:?}/{:?} do not pair", x.dims(), cos.dims(), sin.dims());
    }
    let x = f32_rows(x)?.contiguous()?;
    let (cos, sin) = (f32_rows(cos)?.contiguous()?, f32_rows(sin)?.contiguous()?);
    let mut y = vec![0f32; heads * t * d];
    let out = SharedOut::new(&mut y);
    with_data(&x, |xs, xl| {
        with_data(&cos, |cs, cl| {
            with_data(&sin, |ss, sl| {
                let (xs, cs, ss) =
                    (&xs[xl.start_offset()..], &cs[cl.start_offset()..], &ss[sl.start_offset()..]);
                let h = d / 2;
                for_parts(heads * t, 1, heads * t * d * 4, |rows| {
                    for r in rows {
                        let p = r % t;
                        // SAFETY: row r of the output belongs to this part only.
                        let o = unsafe { out.slice(r * d, d) };
                        rope_half_row(
                            &xs[r * d..(r + 1) * d],
                            &cs[p * h..(p + 1) * h],
                            &ss[p * h..(p + 1) * h],
                            o,
                        );
                    }
                })
            })
        })
    })???;
    Tensor::from_vec(y, (heads, t, d), x.device())
}

/// Rows [`rms_rows`] carries at once: each row's sum of squares is one chain of dependent adds
/// (its order is transformers'/candle's, one element after the other); four chains side by
/// side keep the adder busy where one waits on its previous add.
const RMS_ROWS: usize = 4;

simd! {
    /// RMSNorm of `rows.len() / w.len()` rows: `x / √(Σx²/n + eps) · w`, each row's Σx² summed
    /// in element order and each element divided then multiplied, as candle's `rms_norm` does
    /// (so the bits are its bits: tested), [`RMS_ROWS`] rows at a time.
    fn rms_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
        let n = w.len();
        let mut groups = x.chunks(RMS_ROWS * n).zip(out.chunks_mut(RMS_ROWS * n));
        for (xg, og) in &mut groups {
            let rows = xg.len() / n;
            let mut sum2 = [0f32; RMS_ROWS];
            for i in 0..n {
                for r in 0..rows {
                    let v = xg[r * n + i];
                    sum2[r] += v * v;
                }
            }
            for r in 0..rows {
                let m = (sum2[r] / n as f32 + eps).sqrt();
                for ((o, &v), &a) in og[r * n..(r + 1) * n].iter_mut().zip(&xg[r * n..(r + 1) * n]).zip(w) {
                    *o = v / m * a;
                }
            }
        }
    }
}

/// RMSNorm over the last dimension of x with weight w (f32 or stored dtype, widened), split
/// across threads by rows.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> candle_core::Result<Tensor> {
    let n = w.elem_count();
    if x.dims().last() != Some(&n) {
        candle_core::bail!("rms_norm: x {:?} and weight {:?} do not pair", x.dims(), w.dims());
    }
    let (x, w) = (f32_rows(x)?.contiguous()?, f32_rows(w)?.contiguous()?);
    let len = x.elem_count();
    let mut y = vec![0f32; len];
    let out = SharedOut::new(&mut y);
    with_data(&x, |xs, xl| {
        with_data(&w, |ws, wl| {
            let (xs, ws) = (&xs[xl.start_offset()..][..len], &ws[wl.start_offset()..][..n]);
            for_parts(len / n.max(1), RMS_ROWS, len * 3, |rows| {
                let span = rows.start * n..rows.end * n;
                // SAFETY: parts cover disjoint rows of `y`.
                let o = unsafe { out.slice(span.start, span.len()) };
                rms_rows(&xs[span], ws, eps, o);
            })
        })
    })??;
    Tensor::from_vec(y, x.dims(), x.device())
}

simd! {
    fn add_slice(a: &[f32], b: &[f32], out: &mut [f32]) {
        for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
            *o = x + y;
        }
    }
}

/// `a + b` for two f32 tensors of the same shape (the residual adds), in one pass.
pub fn add(a: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    elementwise2("add", a, b, 1, add_slice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn quantize_row_has_the_bits_of_round_ties_even() {
        let obvious = |row: &[f32], bits: u32| -> Vec<f32> {
            let qmax = ((1u32 << (bits - 1)) - 1) as f32;
            let m = row.iter().fold(0f32, |a, &b| a.max(b.abs()));
            let s = if m == 0.0 { 1.0 } else { m / qmax };
            row.iter().map(|x| (x / s).round_ties_even().clamp(-qmax, qmax) * s).collect()
        };
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for case in 0..2000 {
            let row: Vec<f32> = (0..37)
                .map(|i| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let v = (rng >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
                    // Halves on the code grid (ties), signed zeros and tiny values among them.
                    match (case + i) % 9 {
                        0 => (v * 8.0).round() / 8.0 * 127.0 + 0.5,
                        1 => -0.0,
                        2 => v * 1e-30,
                        _ => v * (1 + case % 50) as f32,
                    }
                })
                .collect();
            for bits in [4, 8] {
                let mut got = row.clone();
                quantize_row(&mut got, bits);
                let want = obvious(&row, bits);
                let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "bits {bits}, row {row:?}: {got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn exp8_is_within_one_ulp_and_handles_the_edges() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = exp8([x; LANES])[0];
            let want = (x as f64).exp();
            let ulp = (want as f32).abs() * f32::EPSILON;
            worst = worst.max(((got as f64) - want).abs() / ulp as f64);
            x += 0.0137;
        }
        assert!(worst <= 1.0, "worst error {worst} ulp");
        let e = exp8([f32::NEG_INFINITY, f32::INFINITY, f32::NAN, 0.0, -100.0, 100.0, -0.0, 1.0]);
        assert_eq!(e[0], 0.0);
        assert_eq!(e[1], f32::INFINITY);
        assert!(e[2].is_nan());
        assert_eq!(e[3], 1.0);
        assert_eq!(e[4], 0.0);
        assert_eq!(e[5], f32::INFINITY);
        assert_eq!(e[6], 1.0);
        assert!((e[7] - std::f32::consts::E).abs() <= f32::EPSILON * 3.0);
    }

    #[test]
    fn linear_matches_candle_matmul_on_one_and_many_rows() {
        let dev = Device::Cpu;
        for t in [1usize, 5, 37] {
            let x = Tensor::randn(0f32, 1.0, (t, 96), &dev).unwrap();
            let w = Tensor::randn(0f32, 1.0, (200, 96), &dev).unwrap();
            let b = Tensor::randn(0f32, 1.0, 200, &dev).unwrap();
            let want = x.matmul(&w.t().unwrap()).unwrap().broadcast_add(&b).unwrap();
            let mut runs = Vec::new();
            for threads in [1, 0] {
                set_threads(threads);
                let got = linear(&x, &w, Some(&b), None).unwrap();
                let diff =
                    (&got - &want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(diff < 1e-4, "t={t} threads={threads}: {diff}");
                runs.push(got.flatten_all().unwrap().to_vec1::<f32>().unwrap());
            }
            set_threads(0);
            // The part boundaries do not depend on the thread count: the same bits either way.
            assert_eq!(runs[0], runs[1], "t={t}: one thread and all threads round differently");
        }
    }

    /// Several projections of one input in one dispatch give each projection's own bits, in
    /// decode (matrix-vector, one part per thread) and prefill (gemm), stored as f32 or bf16,
    /// with a bias and with weights quantized as read.
    #[test]
    fn linears_equal_each_linear_bit_for_bit() {
        let dev = Device::Cpu;
        for dtype in [DType::F32, DType::BF16] {
            for t in [1usize, 3, 9] {
                let x = Tensor::randn(0f32, 1.0, (t, 72), &dev).unwrap();
                let ws: Vec<Tensor> = [200usize, 48, 48]
                    .iter()
                    .map(|&n| Tensor::randn(0f32, 1.0, (n, 72), &dev).unwrap().to_dtype(dtype).unwrap())
                    .collect();
                let b = Tensor::randn(0f32, 1.0, 48, &dev).unwrap();
                let ps = [
                    Proj { w: &ws[0], b: None, weight_bits: None },
                    Proj { w: &ws[1], b: Some(&b), weight_bits: None },
                    Proj { w: &ws[2], b: None, weight_bits: Some(8) },
                ];
                let bits = |y: &Tensor| y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let all = linears(&x, &ps).unwrap();
                for (p, y) in ps.iter().zip(&all) {
                    let one = linear(&x, p.w, p.b, p.weight_bits).unwrap();
                    assert_eq!(bits(y), bits(&one), "{dtype:?} t={t}");
                }
                let plain = linear(&x, &ws[2], None, None).unwrap();
                assert_ne!(bits(&all[2]), bits(&plain), "w8 quantizes the third projection");
            }
        }
    }

    /// Every build of the dot product (AVX-512, AVX2, baseline) gives the bits of the scalar
    /// definition, for each stored dtype, with and without a tail, and four rows at once equal
    /// one at a time.
    #[test]
    fn dot_builds_agree_bit_for_bit_with_the_scalar_order() {
        use half::{bf16, f16};
        for k in [1usize, 31, 32, 96, 577, 1000] {
            let x: Vec<f32> = (0..k).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013).collect();
            let wf: Vec<Vec<f32>> = (0..4)
                .map(|r| (0..k).map(|i| (((i + 7 * r) * 53 % 97) as f32 - 48.0) * 0.021).collect())
                .collect();
            fn check<W: DotWeight>(x: &[f32], rows: &[Vec<W>], what: &str) {
                let w = [0, 1, 2, 3].map(|r| rows[r].as_slice());
                let want = w.map(|r| dot_scalar(x, r).to_bits());
                assert_eq!(W::dot4(x, w).map(f32::to_bits), want, "{what}: dispatched build");
                let xa = W::arrange(x, x.len());
                assert_eq!(w.map(|r| W::dot1(&xa, r).to_bits()), want, "{what}: one row at a time");
            }
            let wb: Vec<Vec<bf16>> =
                wf.iter().map(|r| r.iter().map(|&v| bf16::from_f32(v)).collect()).collect();
            let wh: Vec<Vec<f16>> =
                wf.iter().map(|r| r.iter().map(|&v| f16::from_f32(v)).collect()).collect();
            check(&x, &wf, &format!("f32 k={k}"));
            check(&x, &wb, &format!("bf16 k={k}"));
            check(&x, &wh, &format!("f16 k={k}"));
            #[cfg(target_arch = "x86_64")]
            {
                let scalar = |w: [&[f32]; 4]| w.map(|r| dot_scalar(&x, r).to_bits());
                let w = [0, 1, 2, 3].map(|r| wf[r].as_slice());
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2 (checked).
                    assert_eq!(unsafe { dot2_f32(&x, w) }.map(f32::to_bits), scalar(w), "avx2 f32 k={k}");
                    let b = [0, 1, 2, 3].map(|r| wb[r].as_slice());
                    let want = b.map(|r| dot_scalar(&x, r).to_bits());
                    // SAFETY: as above.
                    assert_eq!(unsafe { dot2_bf16(&x, b) }.map(f32::to_bits), want, "avx2 bf16 k={k}");
                    // One row at a time: f32 as it is, bf16 with x arranged.
                    // SAFETY: as above.
                    assert_eq!(
                        w.map(|r| unsafe { dot2r_f32(&x, r) }.to_bits()),
                        scalar(w),
                        "avx2 row f32 k={k}"
                    );
                    let mut xa = vec![0f32; k];
                    arrange_bf16(&x, &mut xa);
                    // SAFETY: as above.
                    assert_eq!(
                        b.map(|r| unsafe { dot2r_bf16(&xa, r) }.to_bits()),
                        want,
                        "avx2 row bf16 k={k}"
                    );
                    if std::is_x86_feature_detected!("f16c") {
                        let h = [0, 1, 2, 3].map(|r| wh[r].as_slice());
                        let want = h.map(|r| dot_scalar(&x, r).to_bits());
                        // SAFETY: the CPU has AVX2 and F16C (checked).
                        assert_eq!(unsafe { dot2_f16(&x, h) }.map(f32::to_bits), want, "avx2 f16 k={k}");
                        // SAFETY: as above.
                        assert_eq!(
                            h.map(|r| unsafe { dot2r_f16(&x, r) }.to_bits()),
                            want,
                            "avx2 row f16 k={k}"
                        );
                    }
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F (checked).
                    assert_eq!(unsafe { dot512_f32(&x, w) }.map(f32::to_bits), scalar(w), "avx512 f32 k={k}");
                    let h = [0, 1, 2, 3].map(|r| wh[r].as_slice());
                    let want = h.map(|r| dot_scalar(&x, r).to_bits());
                    // SAFETY: as above.
                    assert_eq!(unsafe { dot512_f16(&x, h) }.map(f32::to_bits), want, "avx512 f16 k={k}");
                }
            }
        }
    }

    /// NEON widens f16 by bit operations: every one of the 65,536 values as [`Widen`] does.
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_f16_widening_is_exact_for_every_value() {
        use std::arch::aarch64::*;
        for base in (0..=u16::MAX).step_by(4) {
            let h = [base, base + 1, base + 2, base + 3];
            // SAFETY: NEON is part of the aarch64 baseline; `h` holds 4 elements.
            let got: [f32; 4] = unsafe { std::mem::transmute(widen_f16x4(vld1_u16(h.as_ptr()))) };
            for (g, &h) in got.iter().zip(&h) {
                assert_eq!(g.to_bits(), half::f16::from_bits(h).f32().to_bits(), "f16 {h:#06x}");
            }
        }
    }

    #[test]
    fn rope_half_and_add_equal_candle_bit_for_bit() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (3, 37, 64), &dev).unwrap();
        let cos = Tensor::randn(0f32, 1.0, (37, 32), &dev).unwrap();
        let sin = Tensor::randn(0f32, 1.0, (37, 32), &dev).unwrap();
        let want =
            candle_nn::rotary_emb::rope(&x.unsqueeze(0).unwrap(), &cos, &sin).unwrap().squeeze(0).unwrap();
        let got = rope_half(&x, &cos, &sin).unwrap();
        let bits = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(bits(&got), bits(&want));
        let y = Tensor::randn(0f32, 1.0, (3, 37, 64), &dev).unwrap();
        assert_eq!(bits(&add(&x, &y).unwrap()), bits(&(&x + &y).unwrap()));
        assert!(rope_half(&x, &cos.narrow(1, 0, 31).unwrap(), &sin).is_err());
    }

    /// The tiles a product is cut into follow the thread count; its bits must not, nor whether a
    /// tile goes through gemm row-major or into a column-major tile (under [`COLUMN_TILE_ROWS`]
    /// rows: 300 and 128 rows whole against cut into tiles of 32 to 43).
    #[test]
    fn a_product_has_the_same_bits_however_it_is_tiled() {
        assert!(Tiles::new(300, 64, 2048, 64).get(0).0.len() < COLUMN_TILE_ROWS);
        for (t, n, k) in [(5, 576, 576), (128, 576, 1536), (41, 1000, 100), (300, 64, 2048), (9, 4096, 96)] {
            let x: Vec<f32> = (0..t * k).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013).collect();
            let w: Vec<f32> = (0..n * k).map(|i| ((i * 53 % 97) as f32 - 48.0) * 0.021).collect();
            let product = |threads: usize| {
                let tiles = Tiles::new(t, n, k, threads);
                let mut y = vec![0f32; t * n];
                gemm_tiles(&tiles, &x, k, (WeightData::F32(&w), None), &SharedOut::new(&mut y));
                (tiles.count(), y.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
            };
            let (one, want) = product(1);
            for threads in [2, 3, 16, 64] {
                let (count, got) = product(threads);
                assert!(got == want, "{t}x{n}x{k}: {count} tiles ({threads} threads) differ from {one}");
            }
        }
    }

    #[test]
    fn rms_norm_gives_candles_bits_on_one_row_and_many() {
        let dev = Device::Cpu;
        for (rows, n) in [(1, 576), (3, 64), (37, 288), (130, 48)] {
            let x = (Tensor::randn(0f32, 3.0, (rows, n), &dev).unwrap() + 0.5).unwrap();
            let w = Tensor::randn(1f32, 0.2, n, &dev).unwrap();
            let want = candle_nn::ops::rms_norm(&x, &w, 1e-5).unwrap();
            let bits = |t: &Tensor| {
                t.flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&rms_norm(&x, &w, 1e-5).unwrap()), bits(&want), "{rows}x{n}");
        }
        let x = Tensor::zeros((2, 8), DType::F32, &dev).unwrap();
        assert!(rms_norm(&x, &Tensor::ones(7, DType::F32, &dev).unwrap(), 1e-5).is_err());
    }

    #[test]
    fn silu_mul_matches_the_obvious_formula() {
        let dev = Device::Cpu;
        let g = Tensor::randn(0f32, 4.0, (3, 1001), &dev).unwrap();
        let u = Tensor::randn(0f32, 1.0, (3, 1001), &dev).unwrap();
        let got: Vec<f32> = silu_mul(&g, &u).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let gs: Vec<f32> = g.flatten_all().unwrap().to_vec1().unwrap();
        let us: Vec<f32> = u.flatten_all().unwrap().to_vec1().unwrap();
        for ((o, g), u) in got.iter().zip(&gs).zip(&us) {
            let want = (*g as f64) / (1.0 + (-*g as f64).exp()) * *u as f64;
            assert!(
                (*o as f64 - want).abs() <= 4.0 * f32::EPSILON as f64 * want.abs().max(1e-30),
                "{o} vs {want}"
            );
        }
    }
}
