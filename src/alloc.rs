//! The process's allocator: the system's, with every block of [`ALIGNED_FROM`] bytes or more
//! starting on a cache line, and an allocation the system refuses ended as exit 3 with its size
//! and what was being built ([`building`]), never Rust's abort ("memory allocation of N bytes
//! failed", signal 6). Sizes from input are checked against the budget before they are
//! allocated (`budget`); this is what remains when the machine still runs short.
//!
//! glibc's malloc puts a large block 16 bytes past a page boundary (its header comes first), so
//! every 64-byte load of a weight row in the matrix-vector product of decode straddled two cache
//! lines. On a 2-core AVX-512 (Zen 4) guest, streaming 540 MB of f32 rows four at a time took
//! 19.6-21.4 ms misaligned by 16 bytes against 17.5-18.1 ms on cache lines (x's alignment made
//! no difference), and decode per token follows (docs/PERFORMANCE.md). Alignment changes no
//! arithmetic: the same bits either way.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::error::Size;

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

/// What the process is building now, said when an allocation fails: set by [`building`] for
/// the stage that holds the most (one pointer, so a reader never sees half of a change).
static WHAT: AtomicPtr<&'static str> = AtomicPtr::new(std::ptr::null_mut());
/// The memory budget in force (`budget` notes it), said beside a refusal.
static BUDGET: AtomicU64 = AtomicU64::new(0);

/// While the guard lives, a failed allocation says it happened building `what`
/// (`&"the checkpoint's weights"`); the stage before is said again after.
pub fn building(what: &'static &'static str) -> Building {
    let before = WHAT.swap(std::ptr::from_ref(what).cast_mut(), Ordering::Relaxed);
    Building { before }
}

/// The stage [`building`] set; the one before it comes back when dropped.
pub struct Building {
    before: *mut &'static str,
}

impl Drop for Building {
    fn drop(&mut self) {
        WHAT.store(self.before, Ordering::Relaxed);
    }
}

/// The budget a failed allocation is said beside (bytes).
pub fn note_budget(bytes: u64) {
    BUDGET.store(bytes, Ordering::Relaxed);
}

/// The stage being built, as [`building`] set it.
fn what() -> &'static str {
    let p = WHAT.load(Ordering::Relaxed);
    // SAFETY: a non-null `p` was stored from a `&'static &'static str`, valid forever.
    if p.is_null() {
        "hefprobe's working memory"
    } else {
        unsafe { *p }
    }
}

/// A message written into a fixed buffer: formatting in an allocator that just failed cannot
/// allocate.
struct Fixed {
    buf: [u8; 512],
    len: usize,
}

impl std::fmt::Write for Fixed {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// What a refused allocation of `bytes` says.
fn refusal(bytes: usize, what: &str, budget: u64) -> Fixed {
    use std::fmt::Write;
    let mut m = Fixed { buf: [0; 512], len: 0 };
    let _ = write!(m, "error: out of memory: {} for {what} could not be allocated", Size(bytes as u64));
    if budget > 0 {
        let _ = write!(m, " (the memory budget was {})", Size(budget));
    }
    let _ = writeln!(
        m,
        "; free memory, raise the process's limits, or ask for less (a shorter prompt, fewer taps,          a smaller --max-memory so that captures spill to disk)"
    );
    m
}

/// An allocation of `layout` the system refused: said on stderr, and the process ends with
/// exit 3 (a runtime failure) without running anything that could allocate again.
#[cold]
fn out_of_memory(layout: Layout) -> ! {
    let m = refusal(layout.size(), what(), BUDGET.load(Ordering::Relaxed));
    // SAFETY: write(2) of a buffer this function owns, and _exit, which never returns; neither
    // allocates.
    unsafe {
        libc::write(2, m.buf.as_ptr().cast(), m.len);
        libc::_exit(3)
    }
}

/// `p`, unless the system refused the block.
fn granted(p: *mut u8, layout: Layout) -> *mut u8 {
    if p.is_null() {
        out_of_memory(layout)
    }
    p
}

// SAFETY: every method forwards to `System` with the layout `actual` gives, which is a valid
// layout for the same size with an alignment at least the caller's; a block is freed or
// reallocated with the layout it was allocated with, because `actual` depends on the caller's
// layout alone, which GlobalAlloc's contract makes the same at alloc and dealloc. A refused
// block ends the process rather than return null.
unsafe impl GlobalAlloc for CacheLineAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        granted(System.alloc(actual(layout)), layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        granted(System.alloc_zeroed(actual(layout)), layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, actual(layout))
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (old, new) =
            (actual(layout), actual(Layout::from_size_align_unchecked(new_size, layout.align())));
        if old.align() == new.align() {
            return granted(System.realloc(ptr, old, new_size), new);
        }
        // Crossing ALIGNED_FROM: a new block of the other alignment, the bytes moved over.
        let p = granted(System.alloc(new), new);
        std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
        System.dealloc(ptr, old);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_allocation_says_its_size_what_was_built_and_the_budget() {
        let m = refusal(3 << 29, "the weights of the checkpoint", 2 << 30);
        let text = std::str::from_utf8(&m.buf[..m.len]).unwrap();
        assert!(
            text.starts_with("error: out of memory: 1.5 GiB for the weights of the checkpoint could not be")
                && text.contains("(the memory budget was 2.0 GiB)")
                && text.ends_with('\n'),
            "{text}"
        );
        let _stage = building(&"explain's emulations");
        assert_eq!(what(), "explain's emulations");
        drop(_stage);
        assert_eq!(what(), "hefprobe's working memory");
    }

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
