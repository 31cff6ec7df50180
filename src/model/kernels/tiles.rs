//! Projections of many rows through gemm: output tiles that follow the thread count, each a
//! panel of W widened once (in L2) times a block of rows of x, every gemm call one depth block
//! of a size fixed by K and clear of gemm's horizontal kernels (the same bits on every CPU).

use super::data::{WeightData, WIDE};
use super::dot::matvec_rows;
use super::parts::{for_parts, for_rows, threads, SharedOut};
use super::simd::quantize_row;
use std::ops::Range;

/// Tiles of fewer rows are computed into a column-major buffer ([`TILE`]) and copied out. gemm
/// computes a row-major product as its transpose, packing the panel of W (a scalar gather, every
/// call): for few rows of x that packing outweighs the product (explain's 32-row frames, 2 of 3
/// cycles). Into a column-major tile it packs the rows of x instead. The same sums in the same
/// order either way (each output one chain over its depth): the same bits. `scripts/bench-ab.sh`,
/// 2-core EPYC, SmolLM2's shape, prefill 64/96 rows 22-31%/8-19% faster this way, 128 within
/// ±5% (so not from there on).
pub(super) const COLUMN_TILE_ROWS: usize = 128;

// One tile's product, column-major, per thread and reused across tiles.
thread_local! {
    static TILE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// x Wᵀ for x [t, k] with gemm, into the [t, n] destination `out`, in [`Tiles`]: each tile a
/// block of output rows of W (a panel widened once, in L2) times a block of rows of x.
pub(super) fn gemm_rows(
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
pub(super) fn gemm_tiles(
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
                let (m, c) = (rows.len(), cols.len());
                let column = m < COLUMN_TILE_ROWS;
                TILE.with_borrow_mut(|tile| {
                    // The destination: the tile's own rows × columns of the row-major [t, n]
                    // output, or a column-major [m, c] buffer copied there after.
                    let dst = if column {
                        tile.resize(m * c, 0.0);
                        (tile.as_mut_ptr(), m as isize, 1)
                    } else {
                        // SAFETY: rows `rows` × columns `cols` lie inside the [t, n] output.
                        (unsafe { out.ptr().add(rows.start * n + cols.start) }, 1, n as isize)
                    };
                    // SAFETY: x is [t, k] contiguous, of which rows `rows` are read; `wp` holds
                    // rows `cols` of W [n, k], contiguous; rows `rows` × columns `cols` of the
                    // output belong to this tile alone, and the buffer to this thread.
                    unsafe {
                        gemm_fixed(
                            (m, c, k),
                            dst,
                            (xs.as_ptr().add(rows.start * k), 1, k as isize),
                            (wp.as_ptr(), k as isize, 1),
                            1.0,
                        )
                    }
                    for i in (0..m).filter(|_| column) {
                        // SAFETY: as above, this tile's row i of the output.
                        let row = unsafe { out.slice((rows.start + i) * n + cols.start, c) };
                        for (j, o) in row.iter_mut().enumerate() {
                            *o = tile[j * m + i];
                        }
                    }
                })
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

/// Bytes of f32 weight rows one gemm call reads: a panel that stays in L2 (2 MiB a core on
/// the machines measured) between being widened and being read by gemm.
pub const PANEL_BYTES: usize = 2 << 20;

/// Output rows (rows of W) one gemm call covers, from K alone: never from the dtype or the
/// thread count, so an f32 weight read in place and a bf16 one widened into a buffer make the
/// same gemm calls with the same dims, hence the same bits.
fn rows_per_call(k: usize) -> usize {
    (PANEL_BYTES / 4 / k.max(1)).max(16) / 16 * 16
}

/// How a [t, n] product is cut into tiles: columns (rows of W) in panels of at most
/// [`rows_per_call`] and at least [`MIN_TILE_COLS`], cut further until every thread has
/// [`TILES_PER_THREAD`] tiles, then rows of x when the columns alone are too few (a 576-wide
/// projection of a 128-token prefill on 16 threads). Every tile is one [`gemm_fixed`] call,
/// whose bits do not depend on the tile's size, so neither does anything on the thread count.
pub(super) struct Tiles {
    row_tiles: usize,
    col_tiles: usize,
    t: usize,
    n: usize,
}

/// Fewest columns a tile has (unless W has fewer): narrower panels pack and run below gemm's
/// rate, and keep every tile of 5+ rows clear of gemm's horizontal kernels ([`GEMM_HORIZONTAL`]).
pub(super) const MIN_TILE_COLS: usize = 64;
/// Fewest rows a tile has when rows are cut.
pub(super) const MIN_TILE_ROWS: usize = 32;
/// Tiles per thread: enough that a thread that starts late leaves little for the others.
pub(super) const TILES_PER_THREAD: usize = 3;

impl Tiles {
    pub(super) fn new(t: usize, n: usize, k: usize, threads: usize) -> Tiles {
        let want = threads * TILES_PER_THREAD;
        let widest = rows_per_call(k).max(MIN_TILE_COLS);
        let by_cols = n.div_ceil(widest).max(want.min(n / MIN_TILE_COLS)).max(1);
        let row_tiles =
            if by_cols >= want { 1 } else { want.div_ceil(by_cols).min(t / MIN_TILE_ROWS).max(1) };
        Tiles { row_tiles, col_tiles: by_cols, t, n }
    }

    pub(super) fn count(&self) -> usize {
        self.row_tiles * self.col_tiles
    }

    /// Tile `i`'s rows of x and columns of the output (column bounds on multiples of 16).
    pub(super) fn get(&self, i: usize) -> (Range<usize>, Range<usize>) {
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
pub(super) const GEMM_DEPTH: usize = 512;

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
