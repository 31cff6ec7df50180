//! [`simd!`], which compiles a kernel for AVX2 and for the baseline, and the weight
//! quantization built with it.

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

simd! {
    /// Symmetric round-to-nearest-even of one output channel (a row of W) to `bits`, in place:
    /// scale max|w| / (2^(bits-1) − 1), an all-zero row kept (scale 1). The weight quantization
    /// of `quant:w8` / `quant:w4` (docs/QUANTIZATION.md), applied as each row is read; in AVX2
    /// where the CPU has it (a third of `explain --pattern`'s time on SmolLM2 in SSE2).
    pub fn quantize_row(row: &mut [f32], bits: u32) {
        let qmax = ((1u32 << (bits - 1)) - 1) as f32;
        let m = row.iter().fold(0f32, |a, &b| a.max(b.abs()));
        let s = if m == 0.0 { 1.0 } else { m / qmax };
        // |x / s| ≤ qmax < 2^22: adding and taking away 1.5·2^23 rounds half to even, the bits of
        // `round_ties_even` (fault::quant's `round_ties_even`, tested there), without libm's
        // `rintf` per weight on baseline x86-64: it was 70% of a `quant:w8` prefill's time.
        const MAGIC: f32 = 12_582_912.0;
        for x in row.iter_mut() {
            let y = *x / s;
            *x = ((y + MAGIC) - MAGIC).copysign(y).clamp(-qmax, qmax) * s;
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}
