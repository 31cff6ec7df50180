//! The decoder's hot loops on f32 slices: projections (gemm in tiles, or matrix-vector products
//! for a few rows), RMSNorm, silu·up with a vectorized exp, RoPE, the residual adds, and the
//! thread choice shared by every kernel.
//!
//! Threads come from one persistent pool ([`crate::model::pool`]); the calling thread takes
//! chunks too, so a step never waits for a thread to be spawned or woken.
//!
//! Each kernel is a plain function over slices with a fixed order of operations, compiled twice
//! (AVX2 and baseline) by [`simd!`]: no fused multiply-add is formed (Rust never contracts
//! `a * b + c`), so both builds give identical bits, and so does aarch64 (NEON is its baseline).
//! The matrix-vector product has AVX-512, AVX2 and NEON builds of one summation order.
//!
//! Products of more rows go through gemm, which picks its micro-kernels by CPU at run time
//! (AVX-512 where the CPU has it, the `x86-v4` feature; AVX2; NEON), each summing an output in
//! depth order. Every call is one depth block of a size fixed by K ([`gemm_fixed`]) and clear
//! of gemm's horizontal kernels, so the reference gives the same bits on every CPU, at every
//! thread count and every cut into tiles (tests/cross_isa.rs: x86_64 against aarch64).

use crate::model::pool;
use candle_core::{CpuStorage, Layout, Storage, Tensor};
use std::borrow::Cow;
use std::ops::Range;

/// Below this many multiply-adds an op runs on one thread: measured on a 2-core Zen 3 guest,
/// handing chunks of a 576×192 matrix-vector product (110 k) to the pool's spinning worker
/// still pays off, a few thousand does not.
const MIN_PARALLEL_WORK: usize = 32 * 1024;

/// Fewest parts an op is cut into (two a thread on more threads): enough that a thread that
/// starts late or is descheduled leaves little for the others to wait on. No kernel's result
/// depends on where parts are cut.
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
    let threads = if work >= MIN_PARALLEL_WORK { threads() } else { 1 };
    let chunk = n_items.div_ceil(PARTS.max(2 * threads)).div_ceil(align).max(1) * align;
    if threads <= 1 {
        return pool::in_chunks(n_items, chunk, &f);
    }
    pool::pool().run(n_items, chunk, &f);
}

/// Call `f` on one part of `0..n_items` per thread (boundaries on multiples of `align`), in
/// parallel when `work` is worth a second thread: for work whose results do not depend on where
/// the parts are cut (each output row computed alone, as [`matvec`] does), where fewer, longer
/// parts read faster (measured on a 2-core Zen guest, bf16 decode: 4% faster than [`PARTS`]
/// parts, each part's first bytes being read before the prefetchers catch up).
pub fn for_rows(n_items: usize, align: usize, work: usize, f: impl Fn(Range<usize>) + Sync) {
    let align = align.max(1);
    let threads = if work >= MIN_PARALLEL_WORK { threads() } else { 1 };
    let chunk = n_items.div_ceil(threads).div_ceil(align).max(1) * align;
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
    /// The same buffer seen from element `n` on (the caller keeps within it).
    pub fn offset(&self, n: usize) -> SharedOut {
        SharedOut(self.0.wrapping_add(n))
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

/// A weight matrix's data as stored: f32, or bf16 / f16 widened to f32 inside the kernels
/// (both widenings are exact, so every product equals the one on weights widened up front).
#[derive(Clone, Copy)]
pub enum WeightData<'a> {
    F32(&'a [f32]),
    BF16(&'a [half::bf16]),
    F16(&'a [half::f16]),
}

impl WeightData<'_> {
    /// Elements `range` as f32 into `out` (its length).
    fn widen(&self, range: Range<usize>, out: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        match self {
            WeightData::F32(v) => out.copy_from_slice(&v[range]),
            WeightData::BF16(v) => v[range].convert_to_f32_slice(out),
            WeightData::F16(v) => v[range].convert_to_f32_slice(out),
        }
    }
}

/// Borrow a CPU tensor's data in its stored float dtype (f32, bf16 or f16), from its start offset.
pub fn with_weight<R>(t: &Tensor, f: impl FnOnce(WeightData) -> R) -> candle_core::Result<R> {
    let (storage, layout) = t.storage_and_layout();
    Ok(f(weight_data(&storage, layout)?))
}

/// A storage's data in its stored float dtype, from the layout's start offset.
fn weight_data<'a>(storage: &'a Storage, layout: &Layout) -> candle_core::Result<WeightData<'a>> {
    let o = layout.start_offset();
    match storage {
        Storage::Cpu(CpuStorage::F32(v)) => Ok(WeightData::F32(&v[o..])),
        Storage::Cpu(CpuStorage::BF16(v)) => Ok(WeightData::BF16(&v[o..])),
        Storage::Cpu(CpuStorage::F16(v)) => Ok(WeightData::F16(&v[o..])),
        _ => {
            candle_core::bail!("decoder weights are f32, bf16 or f16 CPU tensors, got {:?}", storage.dtype())
        }
    }
}

/// Symmetric round-to-nearest-even of one output channel (a row of W) to `bits`, in place:
/// scale max|w| / (2^(bits-1) − 1), an all-zero row kept (scale 1). The weight quantization of
/// `quant:w8` / `quant:w4` (docs/QUANTIZATION.md), applied as each row is read.
pub fn quantize_row(row: &mut [f32], bits: u32) {
    let qmax = ((1u32 << (bits - 1)) - 1) as f32;
    let m = row.iter().fold(0f32, |a, &b| a.max(b.abs()));
    let s = if m == 0.0 { 1.0 } else { m / qmax };
    for x in row.iter_mut() {
        *x = (*x / s).round_ties_even().clamp(-qmax, qmax) * s;
    }
}

/// A stored weight element, widened to f32 exactly by bit operations that vectorize (bf16: the
/// top half of an f32; f16: exponent rebiased by a multiply by 2^112, subnormals included).
trait Widen: Copy {
    fn f32(self) -> f32;
}

impl Widen for f32 {
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
}

impl Widen for half::bf16 {
    #[inline(always)]
    fn f32(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }
}

impl Widen for half::f16 {
    #[inline(always)]
    fn f32(self) -> f32 {
        let h = self.to_bits() as u32;
        let sign = (h & 0x8000) << 16;
        let em = h & 0x7fff;
        // 2^112 = 2^(127 − 15): moves the 5-bit exponent (and a subnormal's scale) into f32's.
        let mag = f32::from_bits(em << 13) * f32::from_bits(0x7780_0000);
        let mag = if em >= 0x7c00 { f32::from_bits(0x7f80_0000 | ((em & 0x3ff) << 13)) } else { mag };
        f32::from_bits(sign | mag.to_bits())
    }
}

/// Lanes of the matrix-vector dot product: four AVX2 registers, two AVX-512 ones.
const DOT_LANES: usize = 32;

/// x · w in the order every build of it follows: 32 lane sums over the full blocks (a
/// product, then an add: no FMA), folded pairwise (lane l + lane l+16, then +8, +4, +2, +1),
/// then the tail added in order. The baseline; [`dot_avx2`] and [`dot_avx512`] give its bits.
#[inline(always)]
fn dot_scalar<W: Widen>(x: &[f32], w: &[W]) -> f32 {
    let n = x.len().min(w.len());
    let full = n / DOT_LANES * DOT_LANES;
    let mut acc = [0f32; DOT_LANES];
    for (xb, wb) in x[..full].chunks_exact(DOT_LANES).zip(w[..full].chunks_exact(DOT_LANES)) {
        for l in 0..DOT_LANES {
            acc[l] += xb[l] * wb[l].f32();
        }
    }
    fold_tail(acc, &x[full..n], &w[full..n])
}

#[inline(always)]
fn fold_tail<W: Widen>(mut acc: [f32; DOT_LANES], x: &[f32], w: &[W]) -> f32 {
    let mut width = DOT_LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] += acc[l + width];
        }
    }
    let mut sum = acc[0];
    for (a, b) in x.iter().zip(w) {
        sum += a * b.f32();
    }
    sum
}

/// Four rows of W dotted with x at once (x loaded once for the four; four streams from
/// memory), each row in exactly [`dot_scalar`]'s order: lane l of the accumulators holds its
/// `acc[l]`, the fold adds the same lanes pairwise (l + 16, + 8, + 4, + 2, + 1), then the tail
/// in order, so every build gives the same bits. Per stored dtype, for AVX-512 (two 16-lane
/// accumulators a row) and AVX2 (four 8-lane ones); `$load16`/`$load8` widen 16 / 8 stored
/// elements at a pointer to f32 lanes (bf16: zero-extend and shift by 16; f16: the F16C
/// conversion, exact).
#[cfg(target_arch = "x86_64")]
macro_rules! dot_x86 {
    ($t:ty, $avx512:ident, $avx512_1:ident, $avx2:ident, $avx2_features:literal, |$p:ident| $load16:expr, |$q:ident| $load8:expr) => {
        /// One row (what a widened dtype reads fastest at small K, measured).
        #[target_feature(enable = "avx512f")]
        unsafe fn $avx512_1(x: &[f32], row: &[$t]) -> f32 {
            use std::arch::x86_64::*;
            let n = x.len().min(row.len());
            let full = n / DOT_LANES * DOT_LANES;
            let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            let mut i = 0;
            while i < full {
                let xp = x.as_ptr().add(i);
                let $p = row.as_ptr().add(i);
                let w0 = $load16;
                let $p = $p.add(16);
                let w1 = $load16;
                a0 = _mm512_add_ps(a0, _mm512_mul_ps(_mm512_loadu_ps(xp), w0));
                a1 = _mm512_add_ps(a1, _mm512_mul_ps(_mm512_loadu_ps(xp.add(16)), w1));
                i += DOT_LANES;
            }
            let s16 = _mm512_add_ps(a0, a1);
            let s8 = _mm256_add_ps(_mm512_castps512_ps256(s16), _mm512_extractf32x8_ps::<1>(s16));
            fold8_tail(s8, &x[full..n], &row[full..n])
        }

        #[target_feature(enable = "avx512f")]
        unsafe fn $avx512(x: &[f32], w: [&[$t]; 4]) -> [f32; 4] {
            use std::arch::x86_64::*;
            let n = w.iter().fold(x.len(), |n, r| n.min(r.len()));
            let full = n / DOT_LANES * DOT_LANES;
            let mut a = [[_mm512_setzero_ps(); 2]; 4];
            let mut i = 0;
            while i < full {
                let xp = x.as_ptr().add(i);
                let (x0, x1) = (_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16)));
                for (acc, row) in a.iter_mut().zip(&w) {
                    let $p = row.as_ptr().add(i);
                    let w0 = $load16;
                    let $p = $p.add(16);
                    let w1 = $load16;
                    acc[0] = _mm512_add_ps(acc[0], _mm512_mul_ps(x0, w0));
                    acc[1] = _mm512_add_ps(acc[1], _mm512_mul_ps(x1, w1));
                }
                i += DOT_LANES;
            }
            let mut out = [0f32; 4];
            for ((o, acc), row) in out.iter_mut().zip(&a).zip(&w) {
                let s16 = _mm512_add_ps(acc[0], acc[1]);
                let s8 = _mm256_add_ps(_mm512_castps512_ps256(s16), _mm512_extractf32x8_ps::<1>(s16));
                *o = fold8_tail(s8, &x[full..n], &row[full..n]);
            }
            out
        }

        #[target_feature(enable = $avx2_features)]
        unsafe fn $avx2(x: &[f32], w: [&[$t]; 4]) -> [f32; 4] {
            use std::arch::x86_64::*;
            let n = w.iter().fold(x.len(), |n, r| n.min(r.len()));
            let full = n / DOT_LANES * DOT_LANES;
            let mut a = [[_mm256_setzero_ps(); 4]; 4];
            let mut i = 0;
            while i < full {
                let xp = x.as_ptr().add(i);
                let xs = [
                    _mm256_loadu_ps(xp),
                    _mm256_loadu_ps(xp.add(8)),
                    _mm256_loadu_ps(xp.add(16)),
                    _mm256_loadu_ps(xp.add(24)),
                ];
                for (acc, row) in a.iter_mut().zip(&w) {
                    for (l, (v, xv)) in acc.iter_mut().zip(xs).enumerate() {
                        let $q = row.as_ptr().add(i + 8 * l);
                        *v = _mm256_add_ps(*v, _mm256_mul_ps(xv, $load8));
                    }
                }
                i += DOT_LANES;
            }
            let mut out = [0f32; 4];
            for ((o, acc), row) in out.iter_mut().zip(&a).zip(&w) {
                // Lanes 0-15 are acc[0..2], 16-31 acc[2..4]: + 16, then + 8.
                let s8 = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
                *o = fold8_tail(s8, &x[full..n], &row[full..n]);
            }
            out
        }
    };
}

/// The last three folds of [`dot_scalar`] on 8 lanes (+ 4, + 2, + 1), then the tail in order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn fold8_tail<W: Widen>(s8: std::arch::x86_64::__m256, x: &[f32], w: &[W]) -> f32 {
    use std::arch::x86_64::*;
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2));
    let mut sum = _mm_cvtss_f32(s1);
    for (a, b) in x.iter().zip(w) {
        sum += a * b.f32();
    }
    sum
}

#[cfg(target_arch = "x86_64")]
dot_x86!(f32, dot512_f32, dot512r_f32, dot2_f32, "avx2", |p| _mm512_loadu_ps(p), |q| _mm256_loadu_ps(q));
#[cfg(target_arch = "x86_64")]
dot_x86!(
    half::bf16,
    dot512_bf16,
    dot512r_bf16,
    dot2_bf16,
    "avx2",
    |p| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast())))),
    |q| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(q.cast()))))
);
#[cfg(target_arch = "x86_64")]
dot_x86!(
    half::f16,
    dot512_f16,
    dot512r_f16,
    dot2_f16,
    "avx2,f16c",
    |p| _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())),
    |q| _mm256_cvtph_ps(_mm_loadu_si128(q.cast()))
);

/// One row of W dotted with x on NEON (every aarch64 CPU has it: the Raspberry Pi 5's
/// Cortex-A76 included), in [`dot_scalar`]'s order: eight 4-lane accumulators, accumulator a
/// holding `acc[4a..4a + 4]`, each a product then an add (`fmul`, `fadd`: no `fmla`, which
/// would round once where the other builds round twice). `$load4` widens 4 stored elements at
/// a pointer to f32 lanes. One row at a time: four rows would need 32 accumulators, every
/// register NEON has.
#[cfg(target_arch = "aarch64")]
macro_rules! dot_neon_row {
    ($t:ty, $name:ident, |$q:ident| $load4:expr) => {
        #[inline]
        fn $name(x: &[f32], row: &[$t]) -> f32 {
            use std::arch::aarch64::*;
            let n = x.len().min(row.len());
            let full = n / DOT_LANES * DOT_LANES;
            // SAFETY: NEON is part of the aarch64 baseline; every load reads 4 elements of a
            // full block of 32 at `i + 4a`, inside both slices (i + 32 <= full <= n).
            unsafe {
                let mut acc = [vdupq_n_f32(0.0); 8];
                let mut i = 0;
                while i < full {
                    let xp = x.as_ptr().add(i);
                    let rp = row.as_ptr().add(i);
                    for (a, v) in acc.iter_mut().enumerate() {
                        let $q = rp.add(4 * a);
                        *v = vaddq_f32(*v, vmulq_f32(vld1q_f32(xp.add(4 * a)), $load4));
                    }
                    i += DOT_LANES;
                }
                // + 16, + 8, + 4: lanes 0-15 (acc 0-3) + 16-31 (acc 4-7), then halves again.
                let s16 = [0, 1, 2, 3].map(|a| vaddq_f32(acc[a], acc[a + 4]));
                let s8 = [vaddq_f32(s16[0], s16[2]), vaddq_f32(s16[1], s16[3])];
                let s4 = vaddq_f32(s8[0], s8[1]);
                // + 2, + 1.
                let s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
                let mut sum = vget_lane_f32::<0>(s2) + vget_lane_f32::<1>(s2);
                for (a, b) in x[full..n].iter().zip(&row[full..n]) {
                    sum += a * b.f32();
                }
                sum
            }
        }
    };
}
#[cfg(target_arch = "aarch64")]
dot_neon_row!(f32, dotn_f32, |q| vld1q_f32(q));
// bf16: the top half of an f32, so widening is a shift left by 16 of each 16-bit word.
#[cfg(target_arch = "aarch64")]
dot_neon_row!(half::bf16, dotn_bf16, |q| vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(q.cast()))));
// f16: [`Widen`]'s bit operations on 4 lanes (exponent rebiased by a multiply by 2^112,
// subnormals included; infinity and NaN rebuilt), exact as `fcvtl` is, with stable intrinsics.
#[cfg(target_arch = "aarch64")]
dot_neon_row!(half::f16, dotn_f16, |q| widen_f16x4(vld1_u16(q.cast())));

#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn widen_f16x4(h: std::arch::aarch64::uint16x4_t) -> std::arch::aarch64::float32x4_t {
    use std::arch::aarch64::*;
    let h = vmovl_u16(h);
    let sign = vshlq_n_u32::<16>(vandq_u32(h, vdupq_n_u32(0x8000)));
    let em = vandq_u32(h, vdupq_n_u32(0x7fff));
    let finite =
        vmulq_f32(vreinterpretq_f32_u32(vshlq_n_u32::<13>(em)), vdupq_n_f32(f32::from_bits(0x7780_0000)));
    let special = vorrq_u32(vdupq_n_u32(0x7f80_0000), vshlq_n_u32::<13>(vandq_u32(em, vdupq_n_u32(0x3ff))));
    let mag = vbslq_u32(vcgeq_u32(em, vdupq_n_u32(0x7c00)), special, vreinterpretq_u32_f32(finite));
    vreinterpretq_f32_u32(vorrq_u32(sign, mag))
}

/// Which build of the dot product this CPU runs (checked once).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Isa {
    Avx512,
    Avx2,
    Neon,
    Baseline,
}

fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
                return Isa::Avx2;
            }
        }
        if cfg!(target_arch = "aarch64") {
            return Isa::Neon;
        }
        Isa::Baseline
    })
}

/// How far ahead of its loads a one-row AVX2 dot product asks for the row's bytes: the
/// hardware prefetcher alone left a 2-core AMD EPYC (Zen, AVX2) guest at 19-21 GB/s for bf16
/// rows and 22-24 for f32 with two threads; asking 1 KiB ahead read 23-26 and 24-26, as fast as
/// a plain sum over the same bytes without hints (the bench's read limit now asks ahead too).
#[cfg(target_arch = "x86_64")]
pub const PREFETCH_BYTES: usize = 1024;

/// One row of W dotted with x on AVX2, in [`dot_scalar`]'s order (four 8-lane accumulators:
/// lane l of accumulator a holds `acc[8a + l]`), asking for the row's bytes
/// [`PREFETCH_BYTES`] ahead. `$load8` widens 8 stored elements at a pointer to f32 lanes.
#[cfg(target_arch = "x86_64")]
macro_rules! dot_avx2_row {
    ($t:ty, $name:ident, $features:literal, |$q:ident| $load8:expr) => {
        #[target_feature(enable = $features)]
        unsafe fn $name(x: &[f32], row: &[$t]) -> f32 {
            use std::arch::x86_64::*;
            let n = x.len().min(row.len());
            let full = n / DOT_LANES * DOT_LANES;
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < full {
                let xp = x.as_ptr().add(i);
                let rp = row.as_ptr().add(i);
                // A hint: it never faults, so reading past the row's end is harmless. Every
                // cache line of the block (f32: two; the hardware prefetcher alone does not
                // fill the other, measured 18 GB/s with one hint per block, 23 with both).
                for line in (0..DOT_LANES * std::mem::size_of::<$t>()).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(rp.cast::<i8>().wrapping_add(PREFETCH_BYTES + line));
                }
                for (l, v) in acc.iter_mut().enumerate() {
                    let $q = rp.add(8 * l);
                    *v = _mm256_add_ps(*v, _mm256_mul_ps(_mm256_loadu_ps(xp.add(8 * l)), $load8));
                }
                i += DOT_LANES;
            }
            let s8 = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
            fold8_tail(s8, &x[full..n], &row[full..n])
        }
    };
}
#[cfg(target_arch = "x86_64")]
dot_avx2_row!(f32, dot2r_f32, "avx2", |q| _mm256_loadu_ps(q));
#[cfg(target_arch = "x86_64")]
dot_avx2_row!(half::f16, dot2r_f16, "avx2,f16c", |q| _mm256_cvtph_ps(_mm_loadu_si128(q.cast())));

/// x as [`dot2r_bf16`] reads it: each full block of 32 as its even elements of the first half,
/// its odd ones, then the same for the second half (0, 2, …, 14, 1, 3, …, 15, 16, 18, …, 30,
/// 17, …, 31); the tail as it is.
fn arrange_bf16(x: &[f32], out: &mut [f32]) {
    let full = x.len() / DOT_LANES * DOT_LANES;
    for (xb, ob) in x[..full].chunks_exact(DOT_LANES).zip(out.chunks_exact_mut(DOT_LANES)) {
        for j in 0..8 {
            ob[j] = xb[2 * j];
            ob[8 + j] = xb[2 * j + 1];
            ob[16 + j] = xb[16 + 2 * j];
            ob[24 + j] = xb[17 + 2 * j];
        }
    }
    out[full..x.len()].copy_from_slice(&x[full..]);
}

/// One bf16 row dotted with x ([`arrange_bf16`]'s order) on AVX2, in [`dot_scalar`]'s order.
/// A 32-bit word of 16 stored elements holds element 2j in its low half and 2j + 1 in its high
/// half: shifted left by 16 the word is element 2j as f32, masked to its high half element
/// 2j + 1 (one integer op per 8 elements where zero-extending took two, and half the loads;
/// the widening was what bound this kernel, 10 GB/s a core on the Zen guest, now 12-14).
/// Accumulator a holds the scalar lanes of x's arrangement: 0: 0, 2, …, 14; 1: 1, …, 15;
/// 2: 16, …, 30; 3: 17, …, 31. The fold adds them as the scalar order does (l + 16: a0 + a2,
/// a1 + a3; l + 8: each result's halves), interleaves the 8 lanes back to 0..8 and finishes in
/// [`fold8_tail`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot2r_bf16(xa: &[f32], row: &[half::bf16]) -> f32 {
    use std::arch::x86_64::*;
    let n = xa.len().min(row.len());
    let full = n / DOT_LANES * DOT_LANES;
    let high = _mm256_set1_epi32(0xffff_0000_u32 as i32);
    let mut a = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < full {
        let xp = xa.as_ptr().add(i);
        let rp = row.as_ptr().add(i);
        // A hint: it never faults, so reading past the row's end is harmless.
        _mm_prefetch::<_MM_HINT_T0>(rp.cast::<i8>().wrapping_add(PREFETCH_BYTES));
        let (v0, v1) = (_mm256_loadu_si256(rp.cast()), _mm256_loadu_si256(rp.add(16).cast()));
        let w = [
            _mm256_slli_epi32::<16>(v0),
            _mm256_and_si256(v0, high),
            _mm256_slli_epi32::<16>(v1),
            _mm256_and_si256(v1, high),
        ];
        for (l, (v, w)) in a.iter_mut().zip(w).enumerate() {
            *v = _mm256_add_ps(*v, _mm256_mul_ps(_mm256_loadu_ps(xp.add(8 * l)), _mm256_castsi256_ps(w)));
        }
        i += DOT_LANES;
    }
    // + 16: even lanes 0..14 and 16..30, odd lanes 1..15 and 17..31.
    let (even, odd) = (_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
    // + 8: lanes 0, 2, 4, 6 (+ 8, 10, 12, 14) and 1, 3, 5, 7 (+ 9, …, 15).
    let e4 = _mm_add_ps(_mm256_castps256_ps128(even), _mm256_extractf128_ps::<1>(even));
    let o4 = _mm_add_ps(_mm256_castps256_ps128(odd), _mm256_extractf128_ps::<1>(odd));
    let s8 = _mm256_set_m128(_mm_unpackhi_ps(e4, o4), _mm_unpacklo_ps(e4, o4));
    fold8_tail(s8, &xa[full..n], &row[full..n])
}

/// A stored dtype the dot product reads.
trait DotWeight: Widen {
    /// From this K on, AVX-512 reads rows four at a time ([`DotWeight::dot4`]); below it one at
    /// a time ([`DotWeight::dot1`]). Measured on a 2-core AVX-512 guest, one thread, weights in
    /// DRAM: f32 reads 13.5-15.5 GB/s four rows at a time at K = 576-4864; bf16 12.1 GB/s one
    /// row at a time at K = 576-896 (four: 9.5) but 13.0 four at a time at K = 4864 (one:
    /// 10.9). The grouping never changes a row's order of operations, only speed.
    const GROUP_FROM_K: usize;
    /// Whether rows are read four at a time at this K on this CPU. AVX2 reads one at a time at
    /// every K: four rows need 16 accumulators and 4 x registers, more than its 16, and spill
    /// (measured on the Zen guest, two threads: f32 19.6 GB/s four at a time at K = 576, 23.5
    /// one at a time; bf16 12.0 and 17.2).
    fn four_rows(k: usize) -> bool {
        isa() == Isa::Avx512 && k >= Self::GROUP_FROM_K
    }
    /// x as [`DotWeight::dot1`] reads it on this CPU, for each of its rows of `k` (a copy only
    /// where the build reads another order: bf16 on AVX2, [`arrange_bf16`]).
    fn arrange(x: &[f32], _k: usize) -> Cow<'_, [f32]> {
        Cow::Borrowed(x)
    }
    /// x · w for four rows w.
    fn dot4(x: &[f32], w: [&[Self]; 4]) -> [f32; 4];
    /// x · w for one row, x as [`DotWeight::arrange`] gave it: the bits of its place in
    /// [`DotWeight::dot4`].
    fn dot1(x: &[f32], w: &[Self]) -> f32;
}

macro_rules! dot_weight {
    ($t:ty, $group_from_k:expr, $avx512:ident, $avx512_1:ident, $avx2:ident, $avx2_1:ident, $neon:ident $(, $arrange:ident)?) => {
        impl DotWeight for $t {
            const GROUP_FROM_K: usize = $group_from_k;
            $(
            fn arrange(x: &[f32], k: usize) -> Cow<'_, [f32]> {
                if isa() != Isa::Avx2 {
                    return Cow::Borrowed(x);
                }
                let mut out = vec![0f32; x.len()];
                for (xr, or) in x.chunks(k.max(1)).zip(out.chunks_mut(k.max(1))) {
                    $arrange(xr, or);
                }
                Cow::Owned(out)
            }
            )?

            #[inline]
            fn dot1(x: &[f32], w: &[Self]) -> f32 {
                #[cfg(target_arch = "x86_64")]
                match isa() {
                    // SAFETY: the CPU has the features each build enables (checked by `isa`).
                    Isa::Avx512 => return unsafe { $avx512_1(x, w) },
                    Isa::Avx2 => return unsafe { $avx2_1(x, w) },
                    Isa::Neon | Isa::Baseline => {}
                }
                #[cfg(target_arch = "aarch64")]
                if isa() == Isa::Neon {
                    return $neon(x, w);
                }
                dot_scalar(x, w)
            }

            #[inline]
            fn dot4(x: &[f32], w: [&[Self]; 4]) -> [f32; 4] {
                #[cfg(target_arch = "x86_64")]
                match isa() {
                    // SAFETY: the CPU has the features each build enables (checked by `isa`).
                    Isa::Avx512 => return unsafe { $avx512(x, w) },
                    Isa::Avx2 => return unsafe { $avx2(x, w) },
                    Isa::Neon | Isa::Baseline => {}
                }
                w.map(|r| Self::dot1(x, r))
            }
        }
    };
}
dot_weight!(f32, 0, dot512_f32, dot512r_f32, dot2_f32, dot2r_f32, dotn_f32);
dot_weight!(half::bf16, 2048, dot512_bf16, dot512r_bf16, dot2_bf16, dot2r_bf16, dotn_bf16, arrange_bf16);
dot_weight!(half::f16, 2048, dot512_f16, dot512r_f16, dot2_f16, dot2r_f16, dotn_f16);

/// Rows `rows` of y = x Wᵀ for the few rows of x (decode): each row of W is read once, from
/// memory in its stored dtype, and dotted with every row of x while it sits in L1.
fn matvec<W: DotWeight>(
    x: &[f32],
    t: usize,
    w: &[W],
    k: usize,
    rows: Range<usize>,
    out: &SharedOut,
    n: usize,
) {
    let row = |j: usize| &w[j * k..(j + 1) * k];
    if !W::four_rows(k) {
        let xa = W::arrange(&x[..t * k], k);
        for j in rows {
            for r in 0..t {
                let v = W::dot1(&xa[r * k..(r + 1) * k], row(j));
                // SAFETY: element (r, j) of the [t, n] destination belongs to this part only.
                unsafe { *out.ptr().add(r * n + j) = v };
            }
        }
        return;
    }
    let mut j = rows.start;
    while j < rows.end {
        // Four rows at a time; the last group repeats its final row (computed, not stored).
        let take = (rows.end - j).min(4);
        let group = [0, 1, 2, 3].map(|g| row(j + g.min(take - 1)));
        for r in 0..t {
            let v = W::dot4(&x[r * k..(r + 1) * k], group);
            for (g, &v) in v.iter().enumerate().take(take) {
                // SAFETY: element (r, j + g) of the [t, n] destination belongs to this part only.
                unsafe { *out.ptr().add(r * n + j + g) = v };
            }
        }
        j += take;
    }
}

/// Rows of x up to which a projection is a matrix-vector product ([`matvec`]: W read once in
/// its stored dtype) rather than gemm calls on widened panels.
const MATVEC_ROWS: usize = 4;

// Widened f32 of the weight rows one gemm call reads, per thread and reused across calls.
thread_local! {
    static WIDE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Bytes of f32 weight rows one gemm call reads: a panel that stays in L2 (2 MiB a core on
/// the machines measured) between being widened and being read by gemm.
pub const PANEL_BYTES: usize = 2 << 20;

/// Output rows (rows of W) one gemm call covers, from K alone: never from the dtype or the
/// thread count, so an f32 weight read in place and a bf16 one widened into a buffer make the
/// same gemm calls with the same dims, hence the same bits.
fn rows_per_call(k: usize) -> usize {
    (PANEL_BYTES / 4 / k.max(1)).max(16) / 16 * 16
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
    let ws = ps
        .iter()
        .map(|p| if p.w.is_contiguous() { Ok(p.w.clone()) } else { p.w.contiguous() })
        .collect::<candle_core::Result<Vec<_>>>()?;
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

/// Rows `rows` of x Wᵀ for the few rows of x, into the [t, n] destination `out`.
fn matvec_rows(
    xs: &[f32],
    t: usize,
    k: usize,
    (ws, weight_bits): (WeightData, Option<u32>),
    rows: Range<usize>,
    out: &SharedOut,
    n: usize,
) {
    match (ws, weight_bits) {
        (WeightData::F32(v), None) => matvec(xs, t, v, k, rows, out, n),
        (WeightData::BF16(v), None) => matvec(xs, t, v, k, rows, out, n),
        (WeightData::F16(v), None) => matvec(xs, t, v, k, rows, out, n),
        // Quantized as read: each row widened and quantized into a buffer, then the f32
        // product, as an f32 weight holding those values gives.
        (_, Some(bits)) => WIDE.with_borrow_mut(|buf| {
            buf.resize(k, 0.0);
            for j in rows {
                ws.widen(j * k..(j + 1) * k, buf);
                quantize_row(buf, bits);
                matvec(xs, t, buf.as_slice(), k, 0..1, &out.offset(j), n);
            }
        }),
    }
}

/// x Wᵀ for x [t, k] with gemm, into the [t, n] destination `out`, in [`Tiles`]: each tile a
/// block of output rows of W (a panel widened once, in L2) times a block of rows of x.
fn gemm_rows(
    xs: &[f32],
    t: usize,
    k: usize,
    (ws, weight_bits): (WeightData, Option<u32>),
    n: usize,
    out: &SharedOut,
) {
    if !gemm_main(t, n.min(MIN_TILE_COLS), k, true) {
        // Too few outputs for gemm's main kernels (a tiny model's projection): hefprobe's own.
        return for_rows(n, 16, t * n * k, |rows| matvec_rows(xs, t, k, (ws, weight_bits), rows, out, n));
    }
    gemm_tiles(&Tiles::new(t, n, k, threads()), xs, k, (ws, weight_bits), out)
}

/// [`gemm_rows`] in the given tiles.
fn gemm_tiles(
    tiles: &Tiles,
    xs: &[f32],
    k: usize,
    (ws, weight_bits): (WeightData, Option<u32>),
    out: &SharedOut,
) {
    let (t, n) = (tiles.t, tiles.n);
    for_parts(tiles.count(), 1, t * n * k, |items| {
        for item in items {
            let (rows, cols) = tiles.get(item);
            let gemm_on = |wp: &[f32]| {
                // SAFETY: x is [t, k] contiguous, of which rows `rows` are read; `wp` holds
                // rows `cols` of W [n, k], contiguous; this tile writes rows `rows` × columns
                // `cols` of the row-major [t, n] destination, which no other tile writes.
                unsafe {
                    gemm_fixed(
                        (rows.len(), cols.len(), k),
                        (out.ptr().add(rows.start * n + cols.start), 1, n as isize),
                        (xs.as_ptr().add(rows.start * k), 1, k as isize),
                        (wp.as_ptr(), k as isize, 1),
                        1.0,
                    )
                }
            };
            let span = cols.start * k..cols.end * k;
            match (ws, weight_bits) {
                (WeightData::F32(v), None) => gemm_on(&v[span]),
                _ => WIDE.with_borrow_mut(|buf| {
                    buf.resize(span.len(), 0.0);
                    ws.widen(span, buf);
                    if let Some(bits) = weight_bits {
                        buf.chunks_mut(k).for_each(|row| quantize_row(row, bits));
                    }
                    gemm_on(buf)
                }),
            }
        }
    })
}

/// How a [t, n] product is cut into tiles: columns (rows of W) in panels of at most
/// [`rows_per_call`] and at least [`MIN_TILE_COLS`], cut further until every thread has
/// [`TILES_PER_THREAD`] tiles, then rows of x when the columns alone are too few (a 576-wide
/// projection of a 128-token prefill on 16 threads). Every tile is one [`gemm_fixed`] call,
/// whose bits do not depend on the tile's size, so neither does anything on the thread count.
struct Tiles {
    row_tiles: usize,
    col_tiles: usize,
    t: usize,
    n: usize,
}

/// Fewest columns a tile has (unless W has fewer): narrower panels pack and run below gemm's
/// rate, and keep every tile of 5+ rows clear of gemm's horizontal kernels ([`GEMM_HORIZONTAL`]).
const MIN_TILE_COLS: usize = 64;
/// Fewest rows a tile has when rows are cut.
const MIN_TILE_ROWS: usize = 32;
/// Tiles per thread: enough that a thread that starts late leaves little for the others.
const TILES_PER_THREAD: usize = 3;

impl Tiles {
    fn new(t: usize, n: usize, k: usize, threads: usize) -> Tiles {
        let want = threads * TILES_PER_THREAD;
        let widest = rows_per_call(k).max(MIN_TILE_COLS);
        let by_cols = n.div_ceil(widest).max(want.min(n / MIN_TILE_COLS)).max(1);
        let row_tiles =
            if by_cols >= want { 1 } else { want.div_ceil(by_cols).min(t / MIN_TILE_ROWS).max(1) };
        Tiles { row_tiles, col_tiles: by_cols, t, n }
    }

    fn count(&self) -> usize {
        self.row_tiles * self.col_tiles
    }

    /// Tile `i`'s rows of x and columns of the output (column bounds on multiples of 16).
    fn get(&self, i: usize) -> (Range<usize>, Range<usize>) {
        let (r, c) = (i / self.col_tiles, i % self.col_tiles);
        let cut = |j: usize, parts: usize, len: usize, align: usize| {
            if j == parts {
                len
            } else {
                (len * j / parts).div_ceil(align) * align
            }
        };
        let rows = cut(r, self.row_tiles, self.t, 1)..cut(r + 1, self.row_tiles, self.t, 1);
        let cols = cut(c, self.col_tiles, self.n, 16).min(self.n)
            ..cut(c + 1, self.col_tiles, self.n, 16).min(self.n);
        (rows, cols)
    }
}

/// Depth of one gemm call: K cut into ⌈K / 512⌉ equal parts, each summed in one chain per
/// output and added to the output. gemm cuts the depth itself when it exceeds its block, by
/// the CPU's L1 geometry for large products and by 512 for small ones, so one product rounded
/// differently on another CPU, and at another tile size; cut here, every call is one block
/// wherever it runs (512 is gemm's own block on the machines measured).
const GEMM_DEPTH: usize = 512;

/// gemm computes products of at most this many outputs whose lhs and rhs are both contiguous
/// along K with its "horizontal" kernels: dot products of an ISA-specific lane count, so their
/// bits differ between CPUs. Callers keep every call above it (or use hefprobe's own kernels).
pub const GEMM_HORIZONTAL: usize = 16 * 16;

/// Whether an (m × k)(k × n) product takes gemm's main kernels, which [`gemm_fixed`] needs:
/// gemm hands k ≤ 2 to an outer-product kernel, m or n of 1 to matrix-vector ones, and at most
/// [`GEMM_HORIZONTAL`] outputs to horizontal ones when both operands run along K (`along_k`).
pub fn gemm_main(m: usize, n: usize, k: usize, along_k: bool) -> bool {
    m > 1 && n > 1 && k > 2 && (!along_k || m * n > GEMM_HORIZONTAL)
}

/// `dst = beta · lhs · rhs` for an (m × k)(k × n) product, each operand given as (pointer,
/// column stride, row stride), through gemm's main kernels in [`GEMM_DEPTH`] calls: the same
/// bits on every CPU whose gemm kernels sum each output in depth order (AVX-512, AVX2 and NEON:
/// tests/cross_isa.rs). Only for products that take the main kernels ([`gemm_main`]).
///
/// # Safety
/// As `gemm::gemm`: every operand's strides address memory of its own, and only this call
/// writes the destination's elements.
pub unsafe fn gemm_fixed(
    (m, n, k): (usize, usize, usize),
    (dst, dst_cs, dst_rs): (*mut f32, isize, isize),
    (lhs, lhs_cs, lhs_rs): (*const f32, isize, isize),
    (rhs, rhs_cs, rhs_rs): (*const f32, isize, isize),
    beta: f32,
) {
    debug_assert!(
        gemm_main(m, n, k, lhs_cs == 1 && rhs_rs == 1),
        "gemm_fixed: {m}x{n}x{k} takes gemm's other kernels"
    );
    let kc = k.div_ceil(k.div_ceil(GEMM_DEPTH).max(1)).max(1);
    let mut d = 0;
    loop {
        let kb = kc.min(k - d);
        gemm::gemm(
            m,
            n,
            kb,
            dst,
            dst_cs,
            dst_rs,
            d > 0,
            lhs.wrapping_offset(d as isize * lhs_cs),
            lhs_cs,
            lhs_rs,
            rhs.wrapping_offset(d as isize * rhs_rs),
            rhs_cs,
            rhs_rs,
            if d > 0 { 1.0 } else { 0.0 },
            beta,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
        d += kb;
        if d >= k {
            break;
        }
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

    /// The tiles a product is cut into follow the thread count; its bits must not.
    #[test]
    fn a_product_has_the_same_bits_however_it_is_tiled() {
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
