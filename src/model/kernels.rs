//! The decoder's hot loops on f32 slices: projections (gemm, split across threads by output
//! rows), silu·up with a vectorized exp, and the thread choice shared by every kernel.
//!
//! Threads come from one persistent pool ([`crate::model::pool`]); the calling thread takes
//! chunks too, so a step never waits for a thread to be spawned or woken.
//!
//! Each kernel is a plain function over slices with a fixed order of operations, compiled twice
//! (AVX2 and baseline) by [`simd!`]: no fused multiply-add is formed (Rust never contracts
//! `a * b + c`), so both builds give identical bits.
//!
//! Products go through gemm, which picks its micro-kernels by CPU at run time (AVX-512 where
//! the CPU has it, the `x86-v4` feature; AVX2 otherwise) and blocks by the CPU's cache sizes.
//! The reference is bit-for-bit repeatable on one machine (any thread count, see `PARTS`);
//! across CPUs its float32 sums may round differently in the last bits.

use crate::model::pool;
use candle_core::{CpuStorage, Layout, Storage, Tensor};
use std::ops::Range;

/// Below this many multiply-adds an op runs on one thread: measured on a 2-core Zen 3 guest,
/// handing chunks of a 576×192 matrix-vector product (110 k) to the pool's spinning worker
/// still pays off, a few thousand does not.
const MIN_PARALLEL_WORK: usize = 32 * 1024;

/// Parts an op is cut into, whatever the thread count: enough that a thread that starts late
/// or is descheduled leaves little for the others to wait on. Fixed, so the part boundaries (and
/// with them gemm's blocking, hence every rounding) are the same on 1 thread, on many, and when
/// the pool is busy with another caller's job: the reference is bit-for-bit repeatable.
const PARTS: usize = 8;

/// Run kernels on `n` threads (the caller included), at most the pool's size; the first call
/// before any kernel runs fixes that size (`hefprobe bench --threads`).
pub fn set_threads(n: usize) {
    pool::configure(n);
}

/// Threads a kernel may use now.
pub fn threads() -> usize {
    pool::pool().threads()
}

/// Call `f` on disjoint parts of `0..n_items` (part boundaries on multiples of `align`), in
/// parallel when `work` (multiply-adds or element ops) is worth a second thread.
pub fn for_parts(n_items: usize, align: usize, work: usize, f: impl Fn(Range<usize>) + Sync) {
    let align = align.max(1);
    let chunk = n_items.div_ceil(PARTS).div_ceil(align).max(1) * align;
    let threads = if work >= MIN_PARALLEL_WORK { threads() } else { 1 };
    if threads <= 1 {
        return pool::in_chunks(n_items, chunk, &f);
    }
    pool::pool().run(n_items, chunk, &f);
}

/// A destination several threads write disjoint parts of.
#[derive(Clone, Copy)]
pub struct SharedOut(*mut f32);
// SAFETY: every user writes only the part of the buffer its `for_parts` range owns, and the
// buffer outlives the `for_parts` call (it returns after every part finished).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    pub fn new(v: &mut [f32]) -> Self {
        SharedOut(v.as_mut_ptr())
    }
    /// # Safety
    /// `start..start + len` lies in the buffer and no other part touches it.
    // The buffer is shared through a raw pointer on purpose: each thread borrows its own part.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [f32] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
    pub fn ptr(&self) -> *mut f32 {
        self.0
    }
}

/// `t` as an f32 CPU tensor whose last dimension is contiguous (a copy only when needed).
pub fn f32_rows(t: &Tensor) -> candle_core::Result<Tensor> {
    let t =
        if t.dtype() == candle_core::DType::F32 { t.clone() } else { t.to_dtype(candle_core::DType::F32)? };
    let last_unit = t.layout().stride().last().is_none_or(|&s| s == 1);
    if last_unit {
        Ok(t)
    } else {
        t.contiguous()
    }
}

/// Borrow the f32 data of a CPU tensor with its layout.
pub fn with_data<R>(t: &Tensor, f: impl FnOnce(&[f32], &Layout) -> R) -> candle_core::Result<R> {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(CpuStorage::F32(v)) => Ok(f(v, layout)),
        _ => candle_core::bail!("decoder kernels run on f32 CPU tensors, got {:?}", t.dtype()),
    }
}

/// `y = x Wᵀ + b` for x [T, K] and W [N, K] (checkpoint layout), y [T, N]. Threads split the
/// output features, so each reads its own half of W once (decode is a read of W).
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let (x, w) = (f32_rows(x)?.contiguous()?, f32_rows(w)?.contiguous()?);
    let (t, k) = x.dims2()?;
    let (n, k2) = w.dims2()?;
    if k != k2 {
        candle_core::bail!("linear: input has {k} features, the weight expects {k2}");
    }
    let mut y = vec![0f32; t * n];
    let out = SharedOut::new(&mut y);
    with_data(&x, |xs, xl| {
        with_data(&w, |ws, wl| {
            let (xs, ws) = (&xs[xl.start_offset()..], &ws[wl.start_offset()..]);
            for_parts(n, 16, t * n * k, |cols| {
                // SAFETY: x is [t, k] and W is [n, k], both contiguous from their start offsets;
                // this part writes columns `cols` of the row-major [t, n] destination, which no
                // other part writes; gemm reads lhs/rhs and writes dst through these strides only.
                unsafe {
                    gemm::gemm(
                        t,
                        cols.len(),
                        k,
                        out.ptr().add(cols.start),
                        1,
                        n as isize,
                        false,
                        xs.as_ptr(),
                        1,
                        k as isize,
                        ws.as_ptr().add(cols.start * k),
                        k as isize,
                        1,
                        0.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    )
                }
            })
        })
    })??;
    let y = Tensor::from_vec(y, (t, n), x.device())?;
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// Compile `fn name(args) -> ret { body }` for AVX2 (chosen at run time) and for the baseline;
/// the body is the same code, so results are bit-identical (no FMA is formed).
macro_rules! simd {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                if $crate::model::kernels::has_avx2() {
                    // SAFETY: the CPU has AVX2 and FMA (checked at run time).
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use simd;

#[cfg(target_arch = "x86_64")]
pub fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
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
    use candle_core::Device;

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
                let got = linear(&x, &w, Some(&b)).unwrap();
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
