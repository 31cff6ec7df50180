//! The thread choice shared by every kernel, and the destination threads write in parts.
//!
//! Threads come from one persistent pool ([`crate::model::pool`]); the calling thread takes
//! chunks too, so a step never waits for a thread to be spawned or woken.

use crate::model::pool;
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
