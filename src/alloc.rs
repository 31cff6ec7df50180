//! The process's allocator: the system's, with every block of [`ALIGNED_FROM`] bytes or more
//! starting on a cache line.
//!
//! glibc's malloc puts a large block 16 bytes past a page boundary (its header comes first), so
//! every 64-byte load of a weight row in the matrix-vector product of decode straddled two cache
//! lines. On a 2-core AVX-512 (Zen 4) guest, streaming 540 MB of f32 rows four at a time took
//! 19.6-21.4 ms misaligned by 16 bytes against 17.5-18.1 ms on cache lines (x's alignment made
//! no difference), and decode per token follows (docs/PERFORMANCE.md). Alignment changes no
//! arithmetic: the same bits either way.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks from this size on start on a cache line (smaller ones keep malloc's 16 bytes: they are
/// many and short-lived, and a row of a weight is never among them).
pub const ALIGNED_FROM: usize = 16 * 1024;

/// A cache line on every CPU hefprobe runs on (x86_64, aarch64 cores of the Pi 5).
pub const LINE: usize = 64;

/// The system allocator with large blocks on cache lines ([`ALIGNED_FROM`]). A binary opts in
/// with `#[global_allocator]`.
pub struct CacheLineAligned;

/// The layout a block of `layout` is allocated with: a function of its size and alignment
/// only, so `dealloc` and `realloc` find the one `alloc` used.
fn actual(layout: Layout) -> Layout {
    if layout.size() >= ALIGNED_FROM && layout.align() < LINE {
        // A power of two at least as large as the original alignment, and size < isize::MAX
        // rounded to 64 cannot overflow where the original layout was valid.
        Layout::from_size_align(layout.size(), LINE).unwrap_or(layout)
    } else {
        layout
    }
}

// SAFETY: every method forwards to `System` with the layout `actual` gives, which is a valid
// layout for the same size with an alignment at least the caller's; a block is freed or
// reallocated with the layout it was allocated with, because `actual` depends on the caller's
// layout alone, which GlobalAlloc's contract makes the same at alloc and dealloc.
unsafe impl GlobalAlloc for CacheLineAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        System.alloc(actual(layout))
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        System.alloc_zeroed(actual(layout))
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, actual(layout))
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (old, new) =
            (actual(layout), actual(Layout::from_size_align_unchecked(new_size, layout.align())));
        if old.align() == new.align() {
            return System.realloc(ptr, old, new_size);
        }
        // Crossing ALIGNED_FROM: a new block of the other alignment, the bytes moved over.
        let p = System.alloc(new);
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
            System.dealloc(ptr, old);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_start_on_a_cache_line_and_keep_their_bytes_through_realloc() {
        let a = CacheLineAligned;
        // SAFETY: layouts of non-zero size; each block is freed once with the layout of its
        // last size; reads stay within the bytes written.
        unsafe {
            let small = Layout::from_size_align(100, 4).unwrap();
            let p = a.alloc(small);
            assert!(!p.is_null());
            for i in 0..100 {
                *p.add(i) = i as u8;
            }
            // Small -> large: crosses ALIGNED_FROM, so a new block on a cache line.
            let q = a.realloc(p, small, 3 * ALIGNED_FROM);
            assert_eq!(q as usize % LINE, 0, "a grown block is on a cache line");
            assert!((0..100).all(|i| *q.add(i) == i as u8), "bytes kept");
            let large = Layout::from_size_align(3 * ALIGNED_FROM, 4).unwrap();
            // Large -> larger, and back under the threshold.
            let r = a.realloc(q, large, 40 * ALIGNED_FROM);
            assert_eq!(r as usize % LINE, 0);
            assert!((0..100).all(|i| *r.add(i) == i as u8));
            let larger = Layout::from_size_align(40 * ALIGNED_FROM, 4).unwrap();
            let s = a.realloc(r, larger, 50);
            assert!((0..50).all(|i| *s.add(i) == i as u8));
            a.dealloc(s, Layout::from_size_align(50, 4).unwrap());
            for size in [ALIGNED_FROM, 1 << 20, 113 << 20] {
                let l = Layout::from_size_align(size, 4).unwrap();
                let z = a.alloc_zeroed(l);
                assert_eq!(z as usize % LINE, 0, "{size} bytes");
                assert_eq!(*z.add(size - 1), 0);
                a.dealloc(z, l);
            }
        }
    }
}
