//! Tensors as the kernels read them: f32 rows, and a weight's data in its stored dtype.

use candle_core::{CpuStorage, Layout, Storage, Tensor};
use std::ops::Range;

/// `t` as an f32 CPU tensor whose last dimension is contiguous (a copy only when needed).
pub fn f32_rows(t: &Tensor) -> candle_core::Result<Tensor> {
    let t = t.to_dtype(candle_core::DType::F32)?; // a clone when it already is (candle's to_dtype)
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
    pub(super) fn widen(&self, range: Range<usize>, out: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        match self {
            WeightData::F32(v) => out.copy_from_slice(&v[range]),
            WeightData::BF16(v) => v[range].convert_to_f32_slice(out),
            WeightData::F16(v) => v[range].convert_to_f32_slice(out),
        }
    }
}

/// A storage's data in its stored float dtype, from the layout's start offset.
pub(super) fn weight_data<'a>(storage: &'a Storage, layout: &Layout) -> candle_core::Result<WeightData<'a>> {
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

// Widened f32 of the weight rows one gemm call reads, per thread and reused across calls.
thread_local! {
    pub(super) static WIDE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}
