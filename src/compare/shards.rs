//! The logits shard by shard, at the boundaries of a sharded lm_head (finding 12): how the
//! exporter's team cleared the split on TinyMistral (shard 0 [0:16002) cosine 0.842972, local
//! argmax 272 vs HF 676; shard 1 [16002:32005) 0.917088, 12703 = 12703). A shard's cosine is
//! blind to the shard's scale (a shard dequantized with another shard's scale has cosine 1), so
//! each shard also gets its scale ‖x‖ / ‖r‖, as the probs get their sums (`prob_sum_err`).

use super::metrics;
pub use super::row::ShardFigures;
use super::thresholds::{excess, Metric, Thresholds};

impl ShardFigures {
    fn value(&self, m: Metric) -> Option<f64> {
        match m {
            Metric::ShardCosine => Some(self.cosine),
            Metric::ShardScaleErr => Some(self.scale_err()),
            Metric::ShardArgmax => Some(self.argmax_agreement),
            _ => None,
        }
    }
}

/// Each shard of `widths` (in output order; they must add up to `vocab`) over the rows of
/// `r` and `x` (positions × vocab, row-major). None when the widths do not cover the row.
pub fn figures(r: &[f32], x: &[f32], vocab: usize, widths: &[usize]) -> Option<Vec<ShardFigures>> {
    let tiles = crate::backend::spec::shards_total(widths) == Some(vocab);
    if widths.len() < 2 || !tiles || vocab == 0 || r.len() != x.len() {
        return None;
    }
    let rows = r.len() / vocab;
    let mut start = 0;
    let mut out = Vec::with_capacity(widths.len());
    for &w in widths {
        let end = start + w;
        let cols =
            |a: &[f32]| -> Vec<f32> { a.chunks(vocab).flat_map(|row| row[start..end].to_vec()).collect() };
        let (rs, xs) = (cols(r), cols(x));
        let b = metrics::basic(&rs, &xs, None);
        let norm = |v: &[f32]| v.iter().map(|&a| f64::from(a) * f64::from(a)).sum::<f64>().sqrt();
        let (nr, nx) = (norm(&rs), norm(&xs));
        let scale = match (nr == 0.0, nx == 0.0) {
            (true, true) => 1.0,
            (true, false) => f64::INFINITY,
            _ => nx / nr,
        };
        let local = |v: &[f32], row: usize| start + crate::model::decoder::argmax(&v[row * w..(row + 1) * w]);
        let agree = (0..rows).filter(|&t| local(&rs, t) == local(&xs, t)).count();
        let last = rows.saturating_sub(1);
        out.push(ShardFigures {
            start,
            end,
            cosine: b.cosine,
            sqnr_db: b.sqnr_db,
            scale,
            argmax_agreement: agree as f64 / rows.max(1) as f64,
            reference_argmax: local(&rs, last),
            candidate_argmax: local(&xs, last),
            failed: false,
        });
        start = end;
    }
    Some(out)
}

/// Mark each shard that fails a shard bound of `tap` (`beyond`: the same shards of the
/// expected quantization and its spread, each judged on its excess over them).
pub fn judge(
    shards: &mut [ShardFigures],
    tap: &str,
    thresholds: &Thresholds,
    beyond: Option<(&[ShardFigures], Option<&[ShardFigures]>)>,
) {
    for (metric, (bound, _)) in thresholds.bounds_for(tap) {
        for (i, s) in shards.iter_mut().enumerate() {
            let Some(value) = s.value(metric) else { continue };
            let of = |s: &[ShardFigures]| s.get(i)?.value(metric);
            let expected = beyond.and_then(|(e, spread)| Some((of(e)?, spread.and_then(of))));
            let judged = expected.map_or(value, |(ev, sv)| excess(metric, value, ev, sv));
            s.failed |= !metric.dir().passes(judged, bound);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_with_another_shards_scale_keeps_its_cosine_and_shows_its_scale() {
        // Two positions of a 5-wide vocabulary in shards 2 + 3; shard 1 doubled.
        let r = [1.0, 2.0, 3.0, 4.0, 5.0, 2.0, 1.0, 0.5, 3.0, 1.0];
        let mut x = r;
        for row in x.chunks_mut(5) {
            row[2..].iter_mut().for_each(|v| *v *= 2.0);
        }
        let s = figures(&r, &x, 5, &[2, 3]).unwrap();
        assert_eq!((s[0].start, s[0].end, s[1].start, s[1].end), (0, 2, 2, 5));
        assert_eq!((s[0].cosine, s[0].scale), (1.0, 1.0));
        assert!((s[1].cosine - 1.0).abs() < 1e-12, "scale-blind: {}", s[1].cosine);
        assert!((s[1].scale - 2.0).abs() < 1e-12);
        // Local argmaxes are token ids: shard 1's largest at the last position is column 3.
        assert_eq!((s[1].reference_argmax, s[1].candidate_argmax), (3, 3));
        assert_eq!(s[0].argmax_agreement, 1.0);
        assert_eq!(s.iter().map(|f| f.scale_err()).reduce(f64::max), Some(1.0));
        let mut t = Thresholds::default();
        t.default.insert(Metric::ShardScaleErr, 0.05);
        let mut s = s;
        judge(&mut s, "logits", &t, None);
        assert_eq!((s[0].failed, s[1].failed), (false, true), "shard 1 fails, shard 0 passes");
        // Widths that do not tile the row give no figures.
        assert!(figures(&r, &x, 5, &[2, 2]).is_none());
        assert!(figures(&r, &x, 5, &[5]).is_none());
    }

    #[test]
    fn a_shard_that_picks_another_token_loses_its_local_argmax() {
        let r = [0.0, 9.0, 1.0, 2.0];
        let x = [9.0, 0.0, 1.0, 2.0];
        let s = figures(&r, &x, 4, &[2, 2]).unwrap();
        assert_eq!((s[0].reference_argmax, s[0].candidate_argmax, s[0].argmax_agreement), (1, 0, 0.0));
        assert_eq!((s[1].reference_argmax, s[1].candidate_argmax, s[1].argmax_agreement), (3, 3, 1.0));
    }
}
