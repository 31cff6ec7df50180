//! Attention kernels: q·kᵀ, softmax and probs·v, in two paths built from the same functions.
//!
//! - explicit: scores [H, T, S] and probs [H, T, S] are materialized, so they can be tapped and
//!   so hooks can replace the mask or the softmax (faults, device injection);
//! - fused: scores and probs live in a scratch block (or row) and are never materialized; used
//!   when no tap and no hook needs them.
//!
//! Both paths run the same functions in the same order, so with the default mask and softmax
//! they give identical bits (a test checks it). GQA without copies: query head h reads key/value
//! head h / n_rep (transformers' `repeat_kv`).
//!
//! Two kernels, chosen by the number of query rows (the same choice in both paths):
//! - **rows** (decode, under [`BLOCK_MIN_ROWS`] rows): one query row at a time. Masked keys are
//!   skipped, never multiplied: their score is -inf and their probability exactly 0. Sums over
//!   keys accumulate key j in lane j mod 8 whichever keys are skipped, and adding a 0 is exact,
//!   so skipping masked keys does not change a sum.
//! - **blocks** (prefill): [`BLOCK`] query rows of one head at a time through gemm (q·kᵀ, then
//!   probs·v), over the keys up to the last one any row of the block sees (causal prefill
//!   computes about half the square). Masked scores are set to -inf after the product; a
//!   masked key's probability is exactly 0 and is multiplied, which is exact unless its value
//!   is not finite, so a value block with a NaN or an infinity takes the rows kernel instead
//!   (the device's empty cache slots may hold anything).

use crate::model::kernels::{
    exp8, f32_rows, for_parts, gemm_fixed, gemm_main, simd, with_data, SharedOut, LANES,
};
use candle_core::Tensor;
use std::ops::Range;

/// Query rows from which attention runs in blocks through gemm: below it (decode, short
/// chunks) a block would be a matrix-vector product that the rows kernel does as fast.
pub const BLOCK_MIN_ROWS: usize = 8;

/// Query rows per block: small enough that a causal block's key range is close to its rows'
/// own (little of the masked half is computed), large enough for gemm to run at its rate.
const BLOCK: usize = 32;

/// Whether `b` query rows, the last `b` of `a` (the leading `a − b` left out), fall into blocks
/// of the same rows as they do among `a`, on the same kernel: each row's scores, probabilities
/// and output then come out with the same bits (a block's key range and kernel follow its rows).
pub fn blocks_alike(a: usize, b: usize) -> bool {
    b <= a
        && (a >= BLOCK_MIN_ROWS) == (b >= BLOCK_MIN_ROWS)
        && (a < BLOCK_MIN_ROWS || (a - b).is_multiple_of(BLOCK))
}

/// Whether the last `b` of `a` query rows that make one block take the block's kernel alone:
/// one block either way, on the blocked kernel. Each row's bits then follow the block's key range
/// alone (the last key any row sees, and the last with a probability that is not 0), which the
/// caller keeps.
pub fn block_tail_alike(a: usize, b: usize) -> bool {
    b <= a && a <= BLOCK && b >= BLOCK_MIN_ROWS
}

/// A [N, R, D] tensor's data (D contiguous): row r of head n starts at `start + n·head + r·row`.
#[derive(Clone, Copy)]
struct Rows<'a> {
    data: &'a [f32],
    start: usize,
    head: usize,
    row: usize,
}

impl<'a> Rows<'a> {
    fn new(data: &'a [f32], layout: &candle_core::Layout) -> Self {
        let s = layout.stride();
        Rows { data, start: layout.start_offset(), head: s[0], row: s[1] }
    }
    /// Head `n`'s rows from row 0: row j at `j * self.row`.
    fn head(&self, n: usize) -> &'a [f32] {
        &self.data[self.start + n * self.head..]
    }
}

/// Σ a[i]·b[i] with 16 lanes, then a fixed pairwise reduction. Written over exact chunks so
/// the AVX2 build is vector code: indexing `a[i + j]` left a bounds check per element and the
/// compiler emitted scalar multiplies and adds (decode's attention ran at a third of its speed).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (mut acc0, mut acc1) = ([0f32; LANES], [0f32; LANES]);
    let (mut xs, mut ys) = (a[..n].chunks_exact(2 * LANES), b[..n].chunks_exact(2 * LANES));
    for (x, y) in (&mut xs).zip(&mut ys) {
        let (x0, x1) = x.split_at(LANES);
        let (y0, y1) = y.split_at(LANES);
        for j in 0..LANES {
            acc0[j] += x0[j] * y0[j];
            acc1[j] += x1[j] * y1[j];
        }
    }
    for (lane, (x, y)) in xs.remainder().iter().zip(ys.remainder()).enumerate() {
        if lane < LANES {
            acc0[lane] += x * y;
        } else {
            acc1[lane - LANES] += x * y;
        }
    }
    for j in 0..LANES {
        acc0[j] += acc1[j];
    }
    hsum(acc0)
}

#[inline(always)]
fn hsum(a: [f32; LANES]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

simd! {
    /// Scores of one query row against S keys (`k` rows `row` apart, `d` wide): q·k · scale for
    /// allowed keys, -inf for the others (`allowed` None: every key).
    fn scores_row(q: &[f32], k: &[f32], row: usize, allowed: Option<&[bool]>, scale: f32, out: &mut [f32]) {
        let d = q.len();
        for (j, o) in out.iter_mut().enumerate() {
            *o = if allowed.is_none_or(|a| a[j]) {
                dot(q, &k[j * row..j * row + d]) * scale
            } else {
                f32::NEG_INFINITY
            };
        }
    }
}

simd! {
    /// Softmax of one row in place: e^(x - max) / Σ. -inf entries give exactly 0; a row with no
    /// finite entry gives NaN everywhere (as torch and candle do for an all -inf row).
    fn softmax_row(x: &mut [f32]) {
        let max = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        if max == f32::NEG_INFINITY {
            x.fill(f32::NAN);
            return;
        }
        let mut acc = [0f32; LANES];
        let full = x.len() / LANES * LANES;
        for i in (0..full).step_by(LANES) {
            let chunk = &mut x[i..i + LANES];
            if chunk.iter().all(|&v| v == f32::NEG_INFINITY) {
                chunk.fill(0.0);
                continue;
            }
            let mut shifted = [0f32; LANES];
            for j in 0..LANES {
                shifted[j] = chunk[j] - max;
            }
            let e = exp8(shifted);
            chunk.copy_from_slice(&e);
            for (a, v) in acc.iter_mut().zip(e) {
                *a += v;
            }
        }
        for i in full..x.len() {
            let mut shifted = [f32::NEG_INFINITY; LANES];
            shifted[0] = x[i] - max;
            x[i] = exp8(shifted)[0];
            acc[i - full] += x[i];
        }
        let sum = hsum(acc);
        for v in x.iter_mut() {
            *v /= sum;
        }
    }
}

simd! {
    /// out[..d] = Σ_j p[j]·v_j over the keys whose probability is not 0, in key order. The
    /// output is summed [`PV_CHUNK`] values at a time in a local array the compiler keeps in
    /// registers, every key's values added before it is stored: summed in `out` itself, each
    /// key paid a store and a reload of all d sums. Each sum keeps its key order.
    fn probs_v_row(p: &[f32], v: &[f32], row: usize, out: &mut [f32]) {
        let d = out.len();
        let mut c0 = 0;
        while c0 < d {
            let w = PV_CHUNK.min(d - c0);
            let mut acc = [0f32; PV_CHUNK];
            for (j, &pj) in p.iter().enumerate() {
                if pj == 0.0 {
                    continue;
                }
                let vj = &v[j * row + c0..j * row + c0 + w];
                // A whole chunk as an array: a fixed trip count the compiler unrolls into registers.
                if let Ok(vj) = <&[f32; PV_CHUNK]>::try_from(vj) {
                    for i in 0..PV_CHUNK {
                        acc[i] += pj * vj[i];
                    }
                } else {
                    for (a, &x) in acc.iter_mut().zip(vj) {
                        *a += pj * x;
                    }
                }
            }
            out[c0..c0 + w].copy_from_slice(&acc[..w]);
            c0 += w;
        }
    }
}

/// Output values [`probs_v_row`] sums at a time: four AVX2 registers.
const PV_CHUNK: usize = 32;

/// Shapes of one attention call, checked once.
struct Dims {
    h: usize,
    t: usize,
    s: usize,
    d: usize,
    n_rep: usize,
}

fn dims(q: &Tensor, kv: &Tensor) -> candle_core::Result<Dims> {
    let (h, t, d) = q.dims3()?;
    let (kvn, s, d2) = kv.dims3()?;
    if d != d2 || kvn == 0 || h % kvn != 0 {
        candle_core::bail!(
            "attention: q {:?} and k/v {:?} do not pair (GQA needs heads % kv_heads = 0)",
            q.dims(),
            kv.dims()
        );
    }
    Ok(Dims { h, t, s, d, n_rep: h / kvn })
}

fn check_allowed(allowed: &[Vec<bool>], t: usize, s: usize) -> candle_core::Result<()> {
    if allowed.len() != t || allowed.iter().any(|r| r.len() != s) {
        candle_core::bail!("attention: the mask is not [{t}][{s}]");
    }
    Ok(())
}

/// One past the last key any of `rows` may see (all `s` keys when there is no mask).
fn key_end(allowed: Option<&[Vec<bool>]>, rows: Range<usize>, s: usize) -> usize {
    match allowed {
        None => s,
        Some(a) => rows.map(|t| a[t].iter().rposition(|&x| x).map_or(0, |j| j + 1)).max().unwrap_or(0),
    }
}

/// Scaled scores of one head's query rows `rows` (q: those rows, D apart) against keys `k` (key
/// j at `j·krow`) into `out` ([rows, S], S apart): gemm over the keys up to [`key_end`], -inf
/// past it and wherever `allowed` forbids.
fn scores_block(
    q: &[f32],
    (k, krow): (&[f32], usize),
    g: &Dims,
    rows: Range<usize>,
    allowed: Option<&[Vec<bool>]>,
    scale: f32,
    out: &mut [f32],
) {
    let (m, d, s) = (rows.len(), g.d, g.s);
    let end = key_end(allowed, rows.clone(), s);
    assert!(q.len() >= m * d && out.len() >= m * s && (end == 0 || k.len() >= (end - 1) * krow + d));
    if !gemm_main(m, end, d, true) {
        // Too small for gemm's main kernels (their other kernels round per CPU): the rows kernel.
        for (i, t) in rows.enumerate() {
            let a = allowed.map(|a| a[t].as_slice());
            scores_row(&q[i * d..(i + 1) * d], k, krow, a, scale, &mut out[i * s..(i + 1) * s]);
        }
        return;
    }
    // SAFETY: the bounds above: q is [m, d] row-major, keys 0..end are rows of k `krow` apart
    // (read as kᵀ: column j at j·krow), out is [m, s] row-major of which columns 0..end are
    // written.
    unsafe {
        gemm_fixed(
            (m, end, d),
            (out.as_mut_ptr(), 1, s as isize),
            (q.as_ptr(), 1, d as isize),
            (k.as_ptr(), krow as isize, 1),
            scale,
        )
    }
    for (i, t) in rows.enumerate() {
        let o = &mut out[i * s..(i + 1) * s];
        o[end..].fill(f32::NEG_INFINITY);
        if let Some(a) = allowed {
            for (x, &ok) in o[..end].iter_mut().zip(&a[t][..end]) {
                if !ok {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
    }
}

/// probs of `m` query rows of one head (`p`: [m, S], S apart) times values `v` (value j at
/// `j·vrow`, D wide) into `out` (row i at `out + i·out_row`), over the keys up to the last
/// non-zero probability of the block. Values that are not finite there take the rows kernel,
/// which skips zero probabilities (0·NaN would be NaN).
///
/// # Safety
/// `out + i·out_row .. + d` for i < m lies in a buffer only this call writes there.
unsafe fn probs_v_block(
    (p, m): (&[f32], usize),
    (v, vrow): (&[f32], usize),
    g: &Dims,
    out: SharedOut,
    at: usize,
    out_row: usize,
) {
    let (s, d) = (g.s, g.d);
    let end =
        (0..m).map(|i| p[i * s..(i + 1) * s].iter().rposition(|&x| x != 0.0).map_or(0, |j| j + 1)).max();
    let end = end.unwrap_or(0);
    let finite = (0..end).all(|j| v[j * vrow..j * vrow + d].iter().all(|x| x.is_finite()));
    if !finite || !gemm_main(m, d, end, false) {
        for i in 0..m {
            probs_v_row(&p[i * s..(i + 1) * s], v, vrow, out.slice(at + i * out_row, d));
        }
        return;
    }
    assert!(p.len() >= m * s && v.len() >= (end - 1) * vrow + d);
    gemm_fixed(
        (m, d, end),
        (out.ptr().add(at), 1, out_row as isize),
        (p.as_ptr(), 1, s as isize),
        (v.as_ptr(), 1, vrow as isize),
        1.0,
    )
}

/// The (head, block of [`BLOCK`] rows) items of a blocked call: item i is head `i / blocks`,
/// rows of block `i % blocks`.
fn block_rows(t: usize, item: usize) -> (usize, Range<usize>) {
    let blocks = t.div_ceil(BLOCK);
    let b = item % blocks;
    (item / blocks, b * BLOCK..((b + 1) * BLOCK).min(t))
}

/// Scaled scores [H, T, S] of q [H, T, D] against k [KV, S, D]: -inf where `allowed` forbids
/// (`allowed` None: every entry computed, for a hook's own additive mask).
pub fn scores(
    q: &Tensor,
    k: &Tensor,
    allowed: Option<&[Vec<bool>]>,
    scale: f32,
) -> candle_core::Result<Tensor> {
    let (q, k) = (f32_rows(q)?.contiguous()?, f32_rows(k)?);
    let g = dims(&q, &k)?;
    if let Some(a) = allowed {
        check_allowed(a, g.t, g.s)?;
    }
    let mut out = vec![0f32; g.h * g.t * g.s];
    let shared = SharedOut::new(&mut out);
    with_data(&q, |qs, ql| {
        with_data(&k, |ks, kl| {
            let (qs, kr) = (&qs[ql.start_offset()..], Rows::new(ks, kl));
            let work = g.h * g.t * g.s * g.d;
            if g.t >= BLOCK_MIN_ROWS {
                return for_parts(g.h * g.t.div_ceil(BLOCK), 1, work, |items| {
                    for item in items {
                        let (h, rows) = block_rows(g.t, item);
                        let r0 = h * g.t + rows.start;
                        // SAFETY: rows `rows` of head h of the [H·T, S] output belong to this item.
                        let o = unsafe { shared.slice(r0 * g.s, rows.len() * g.s) };
                        let keys = (kr.head(h / g.n_rep), kr.row);
                        scores_block(&qs[r0 * g.d..], keys, &g, rows, allowed, scale, o);
                    }
                });
            }
            for_parts(g.h * g.t, 1, work, |rows| {
                for r in rows {
                    let (h, t) = (r / g.t, r % g.t);
                    // SAFETY: row r of the [H·T, S] output belongs to this part only.
                    let o = unsafe { shared.slice(r * g.s, g.s) };
                    let a = allowed.map(|a| a[t].as_slice());
                    scores_row(&qs[r * g.d..(r + 1) * g.d], kr.head(h / g.n_rep), kr.row, a, scale, o);
                }
            })
        })
    })??;
    Tensor::from_vec(out, (g.h, g.t, g.s), q.device())
}

/// Softmax over the last dimension of scores [H, T, S].
pub fn softmax(scores: &Tensor) -> candle_core::Result<Tensor> {
    let x = f32_rows(scores)?.contiguous()?;
    let s = *x.dims().last().unwrap_or(&1);
    let n = x.elem_count();
    let mut out = with_data(&x, |xs, l| xs[l.start_offset()..l.start_offset() + n].to_vec())?;
    let rows = n / s.max(1);
    let shared = SharedOut::new(&mut out);
    for_parts(rows, 1, n * 8, |part| {
        for r in part {
            // SAFETY: row r belongs to this part only.
            softmax_row(unsafe { shared.slice(r * s, s) });
        }
    });
    Tensor::from_vec(out, x.dims(), x.device())
}

/// probs [H, T, S] times v [KV, S, D], as [T, H·D] (heads side by side, o_proj's input).
pub fn probs_v(probs: &Tensor, v: &Tensor) -> candle_core::Result<Tensor> {
    let (p, v) = (f32_rows(probs)?.contiguous()?, f32_rows(v)?);
    let (h, t, s) = p.dims3()?;
    let (kvn, s2, d) = v.dims3()?;
    if s != s2 || kvn == 0 || h % kvn != 0 {
        candle_core::bail!("probs·v: probs {:?} and v {:?} do not pair", p.dims(), v.dims());
    }
    let g = Dims { h, t, s, d, n_rep: h / kvn };
    let mut out = vec![0f32; g.t * g.h * g.d];
    let shared = SharedOut::new(&mut out);
    with_data(&p, |ps, pl| {
        with_data(&v, |vs, vl| {
            let (ps, vr) = (&ps[pl.start_offset()..], Rows::new(vs, vl));
            let work = g.h * g.t * s * g.d;
            if g.t >= BLOCK_MIN_ROWS {
                return for_parts(g.h * g.t.div_ceil(BLOCK), 1, work, |items| {
                    for item in items {
                        let (h, rows) = block_rows(g.t, item);
                        let r0 = h * g.t + rows.start;
                        let (at, row) = ((rows.start * g.h + h) * g.d, g.h * g.d);
                        // SAFETY: rows `rows` of head h of the [T, H·D] output belong to this item.
                        unsafe {
                            probs_v_block(
                                (&ps[r0 * s..], rows.len()),
                                (vr.head(h / g.n_rep), vr.row),
                                &g,
                                shared,
                                at,
                                row,
                            )
                        };
                    }
                });
            }
            for_parts(g.h * g.t, 1, work, |rows| {
                for r in rows {
                    let (h, t) = (r / g.t, r % g.t);
                    // SAFETY: output row t, head h (d values) belongs to this part only.
                    let o = unsafe { shared.slice((t * g.h + h) * g.d, g.d) };
                    probs_v_row(&ps[r * s..(r + 1) * s], vr.head(h / g.n_rep), vr.row, o);
                }
            })
        })
    })??;
    Tensor::from_vec(out, (g.t, g.h * g.d), p.device())
}

/// softmax(q·kᵀ·scale, masked by `allowed`)·v without materializing scores or probs, as
/// [T, H·D]; equal bit for bit to [`scores`] → [`softmax`] → [`probs_v`].
pub fn fused(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    allowed: &[Vec<bool>],
    scale: f32,
) -> candle_core::Result<Tensor> {
    let (q, k, v) = (f32_rows(q)?.contiguous()?, f32_rows(k)?, f32_rows(v)?);
    let g = dims(&q, &k)?;
    if v.dims() != k.dims() {
        candle_core::bail!("attention: k {:?} and v {:?} differ", k.dims(), v.dims());
    }
    check_allowed(allowed, g.t, g.s)?;
    let mut out = vec![0f32; g.t * g.h * g.d];
    let shared = SharedOut::new(&mut out);
    with_data(&q, |qs, ql| {
        with_data(&k, |ks, kl| {
            with_data(&v, |vs, vl| {
                let (qs, kr, vr) = (&qs[ql.start_offset()..], Rows::new(ks, kl), Rows::new(vs, vl));
                let work = 2 * g.h * g.t * g.s * g.d;
                if g.t >= BLOCK_MIN_ROWS {
                    return for_parts(g.h * g.t.div_ceil(BLOCK), 1, work, |items| {
                        let mut block = vec![0f32; BLOCK * g.s];
                        for item in items {
                            let (h, rows) = block_rows(g.t, item);
                            let (r0, m, kv, d, s) = (h * g.t + rows.start, rows.len(), h / g.n_rep, g.d, g.s);
                            let at = (rows.start * g.h + h) * d;
                            scores_block(
                                &qs[r0 * d..],
                                (kr.head(kv), kr.row),
                                &g,
                                rows,
                                Some(allowed),
                                scale,
                                &mut block,
                            );
                            for r in 0..m {
                                softmax_row(&mut block[r * s..(r + 1) * s]);
                            }
                            // SAFETY: rows `rows` of head h of the [T, H·D] output belong to this item.
                            unsafe {
                                probs_v_block((&block, m), (vr.head(kv), vr.row), &g, shared, at, g.h * d)
                            };
                        }
                    });
                }
                for_parts(g.h * g.t, 1, work, |rows| {
                    let mut row = vec![0f32; g.s];
                    for r in rows {
                        let (h, t) = (r / g.t, r % g.t);
                        let kv = h / g.n_rep;
                        let q_row = &qs[r * g.d..(r + 1) * g.d];
                        scores_row(q_row, kr.head(kv), kr.row, Some(&allowed[t]), scale, &mut row);
                        softmax_row(&mut row);
                        // SAFETY: output row t, head h (d values) belongs to this part only.
                        let o = unsafe { shared.slice((t * g.h + h) * g.d, g.d) };
                        probs_v_row(&row, vr.head(kv), vr.row, o);
                    }
                })
            })
        })
    })???;
    Tensor::from_vec(out, (g.t, g.h * g.d), q.device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernels::set_threads;
    use candle_core::Device;

    /// 0 where allowed, -inf where masked: [1, T, S]. HF adds finfo(f32).min instead of -inf;
    /// after softmax both give exactly 0, and -inf marks masked scores unambiguously in taps.
    fn additive_mask(allowed: &[Vec<bool>]) -> Tensor {
        let t = allowed.len();
        let s = allowed.first().map_or(0, Vec::len);
        let data: Vec<f32> = allowed
            .iter()
            .flat_map(|row| row.iter().map(|&a| if a { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        Tensor::from_vec(data, (1, t, s), &Device::Cpu).unwrap()
    }

    /// The obvious computation with candle ops: q·kᵀ·scale + mask, softmax, ·v.
    fn slow(q: &Tensor, k: &Tensor, v: &Tensor, allowed: &[Vec<bool>], scale: f64) -> Tensor {
        let (h, t, d) = q.dims3().unwrap();
        let n_rep = h / k.dim(0).unwrap();
        let rep = |x: &Tensor| {
            let x = x.unsqueeze(1).unwrap();
            let (kv, _, s, d) = x.dims4().unwrap();
            x.broadcast_as((kv, n_rep, s, d)).unwrap().reshape((kv * n_rep, s, d)).unwrap()
        };
        let (k, v) = (rep(k), rep(v));
        let mask = additive_mask(allowed);
        let s = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap().broadcast_add(&mask).unwrap();
        let p = candle_nn::ops::softmax_last_dim(&s).unwrap();
        p.matmul(&v.contiguous().unwrap()).unwrap().transpose(0, 1).unwrap().reshape((t, h * d)).unwrap()
    }

    fn case(h: usize, kv: usize, t: usize, s: usize, d: usize) -> (Tensor, Tensor, Tensor, Vec<Vec<bool>>) {
        let dev = Device::Cpu;
        let q = Tensor::randn(0f32, 1.0, (h, t, d), &dev).unwrap();
        // Keys and values as a cache view: a narrow of a longer buffer (rows `cap` apart).
        let cap = s + 5;
        let k = Tensor::randn(0f32, 1.0, (kv, cap, d), &dev).unwrap().narrow(1, 0, s).unwrap();
        let v = Tensor::randn(0f32, 1.0, (kv, cap, d), &dev).unwrap().narrow(1, 0, s).unwrap();
        // Causal with a window of 6, queries at the last t positions.
        let allowed = (0..t)
            .map(|i| {
                let qp = s - t + i;
                (0..s).map(|kp| kp <= qp && qp - kp < 6).collect()
            })
            .collect();
        (q, k, v, allowed)
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar().unwrap()
    }

    #[test]
    fn fused_and_explicit_agree_bit_for_bit_and_match_the_slow_path() {
        // Rows kernel (t < BLOCK_MIN_ROWS) and blocks (one, several, a partial last one).
        let shapes =
            [(9, 3, 13, 13, 64), (14, 2, 1, 40, 64), (4, 4, 7, 19, 24), (6, 2, 3, 9, 10), (4, 2, 70, 75, 32)];
        for (h, kv, t, s, d) in shapes {
            let (q, k, v, allowed) = case(h, kv, t, s, d);
            let scale = 1.0 / (d as f64).sqrt();
            for threads in [1, 0] {
                set_threads(threads);
                let fused = fused(&q, &k, &v, &allowed, scale as f32).unwrap();
                let sc = scores(&q, &k, Some(&allowed), scale as f32).unwrap();
                let explicit = probs_v(&softmax(&sc).unwrap(), &v).unwrap();
                let (a, b): (Vec<f32>, Vec<f32>) = (
                    fused.flatten_all().unwrap().to_vec1().unwrap(),
                    explicit.flatten_all().unwrap().to_vec1().unwrap(),
                );
                assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{h}/{kv}/{t}/{s}/{d}");
                let want = slow(&q, &k, &v, &allowed, scale);
                assert!(max_diff(&fused, &want) < 1e-5, "{h}/{kv}/{t}/{s}/{d}: {}", max_diff(&fused, &want));
            }
            set_threads(0);
        }
    }

    #[test]
    fn masked_scores_are_minus_infinity_and_their_probs_exactly_zero() {
        let (q, k, _, allowed) = case(2, 1, 4, 10, 8);
        let sc = scores(&q, &k, Some(&allowed), 0.5).unwrap();
        let p = softmax(&sc).unwrap();
        let sc: Vec<Vec<Vec<f32>>> = sc.to_vec3().unwrap();
        let p: Vec<Vec<Vec<f32>>> = p.to_vec3().unwrap();
        for h in 0..2 {
            for (t, row) in allowed.iter().enumerate() {
                for (j, &a) in row.iter().enumerate() {
                    assert_eq!(sc[h][t][j] == f32::NEG_INFINITY, !a);
                    assert_eq!(p[h][t][j] == 0.0, !a);
                }
                assert!((p[h][t].iter().sum::<f32>() - 1.0).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn a_value_that_is_not_finite_in_a_masked_slot_does_not_leak_into_blocks() {
        for t in [3, 40] {
            // Queries at positions 10 and later: slot 0 is outside every row's window of 6.
            let (q, k, v, allowed) = case(2, 1, t, t + 10, 8);
            let mut vs: Vec<f32> = v.flatten_all().unwrap().to_vec1().unwrap();
            vs[0] = f32::NAN;
            let bad = Tensor::from_vec(vs, v.dims(), &Device::Cpu).unwrap();
            let clean =
                fused(&q, &k, &v, &allowed, 0.3).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let got =
                fused(&q, &k, &bad, &allowed, 0.3).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert!(allowed.iter().all(|row| !row[0]), "the case must mask slot 0");
            // The rows kernel takes over for that block: other rounding, no NaN.
            let worst = clean.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(got.iter().all(|x| x.is_finite()) && worst < 1e-5, "t={t}: {worst}");
        }
    }

    #[test]
    fn a_row_with_every_key_masked_is_nan() {
        let mut row = vec![f32::NEG_INFINITY; 11];
        softmax_row(&mut row);
        assert!(row.iter().all(|x| x.is_nan()));
    }
}
