//! The matrix-vector dot product of decode: one summation order (32 lane sums folded
//! pairwise, then the tail in order) in its baseline, AVX-512, AVX2 and NEON builds, over the
//! stored dtypes widened exactly (f32, bf16, f16), and the product of a few rows of x with W.

use super::data::{WeightData, WIDE};
use super::parts::SharedOut;
use super::simd::quantize_row;
use std::borrow::Cow;
use std::ops::Range;

/// A stored weight element, widened to f32 exactly by bit operations that vectorize (bf16: the
/// top half of an f32; f16: exponent rebiased by a multiply by 2^112, subnormals included).
pub(super) trait Widen: Copy {
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
pub(super) const DOT_LANES: usize = 32;

/// x · w in the order every build of it follows: 32 lane sums over the full blocks (a
/// product, then an add: no FMA), folded pairwise (lane l + lane l+16, then +8, +4, +2, +1),
/// then the tail added in order. The baseline; [`dot_avx2`] and [`dot_avx512`] give its bits.
#[inline(always)]
pub(super) fn dot_scalar<W: Widen>(x: &[f32], w: &[W]) -> f32 {
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
pub(super) fn fold_tail<W: Widen>(mut acc: [f32; DOT_LANES], x: &[f32], w: &[W]) -> f32 {
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
        pub(super) unsafe fn $avx512_1(x: &[f32], row: &[$t]) -> f32 {
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
            let s8 = _mm256_add_ps(
                _mm512_castps512_ps256(s16),
                _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s16))),
            );
            fold8_tail(s8, &x[full..n], &row[full..n])
        }

        #[target_feature(enable = "avx512f")]
        pub(super) unsafe fn $avx512(x: &[f32], w: [&[$t]; 4]) -> [f32; 4] {
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
                let s8 = _mm256_add_ps(
                    _mm512_castps512_ps256(s16),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s16))),
                );
                *o = fold8_tail(s8, &x[full..n], &row[full..n]);
            }
            out
        }

        #[target_feature(enable = $avx2_features)]
        pub(super) unsafe fn $avx2(x: &[f32], w: [&[$t]; 4]) -> [f32; 4] {
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
pub(super) unsafe fn fold8_tail<W: Widen>(s8: std::arch::x86_64::__m256, x: &[f32], w: &[W]) -> f32 {
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
        pub(super) fn $name(x: &[f32], row: &[$t]) -> f32 {
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
pub(super) unsafe fn widen_f16x4(h: std::arch::aarch64::uint16x4_t) -> std::arch::aarch64::float32x4_t {
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
pub(super) enum Isa {
    Avx512,
    Avx2,
    Neon,
    Baseline,
}

pub(super) fn isa() -> Isa {
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
        pub(super) unsafe fn $name(x: &[f32], row: &[$t]) -> f32 {
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
pub(super) fn arrange_bf16(x: &[f32], out: &mut [f32]) {
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
pub(super) unsafe fn dot2r_bf16(xa: &[f32], row: &[half::bf16]) -> f32 {
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
pub(super) trait DotWeight: Widen {
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
pub(super) fn matvec<W: DotWeight>(
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
        let last = j + take - 1;
        let group = [row(j), row((j + 1).min(last)), row((j + 2).min(last)), row(last)];
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

/// Rows `rows` of x Wᵀ for the few rows of x, into the [t, n] destination `out`.
pub(super) fn matvec_rows(
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
