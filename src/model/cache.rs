//! The reference's KV cache: every entry kept, in order, in buffers that grow geometrically.
//!
//! Each layer keeps keys and values in one [KV, capacity, D] buffer; a step writes its rows
//! in place after the last entry and reads back a view of the first S rows, so no step copies
//! the cache (a `Tensor::cat` per step did, which made decode quadratic in the context).
//! When a buffer is full it is replaced by one twice as large (one copy, amortized O(1)).
//! Views handed out earlier stay valid: writes only go past their end, and a grown buffer is a
//! new allocation.

use crate::error::{ComputeContext, Error, Result};
use crate::model::decoder::{CacheView, KvStore};
use crate::model::profile::{span, Op};
use crate::tap::Phase;
use candle_core::{DType, Device, Tensor};

/// The smallest buffer allocated (entries), so short decodes do not regrow at every step.
const MIN_CAPACITY: usize = 64;

#[derive(Debug, Default)]
struct LayerCache {
    /// [KV, capacity, D]; entries 0..len are written.
    k: Option<Tensor>,
    v: Option<Tensor>,
    len: usize,
    positions: Vec<usize>,
    writers: Vec<Phase>,
}

/// The reference's cache: every entry kept, in order.
#[derive(Debug, Default)]
pub struct FullCache {
    layers: Vec<LayerCache>,
    /// Entries to allocate room for at the first write (the run's length when known).
    reserve: usize,
}

impl Clone for FullCache {
    /// A deep copy: two caches must never share a buffer they both append to.
    fn clone(&self) -> Self {
        let copy = |t: &Option<Tensor>| t.as_ref().map(|t| t.copy().expect("copying a CPU tensor"));
        FullCache {
            layers: self
                .layers
                .iter()
                .map(|l| LayerCache {
                    k: copy(&l.k),
                    v: copy(&l.v),
                    len: l.len,
                    positions: l.positions.clone(),
                    writers: l.writers.clone(),
                })
                .collect(),
            reserve: self.reserve,
        }
    }
}

impl FullCache {
    pub fn new(layers: usize) -> Self {
        Self::with_capacity(layers, 0)
    }

    /// A cache that will hold `entries` without regrowing.
    pub fn with_capacity(layers: usize, entries: usize) -> Self {
        FullCache { layers: (0..layers).map(|_| LayerCache::default()).collect(), reserve: entries }
    }

    /// The stored keys/values of `layer` [KV, S, D] (views, no copy).
    pub fn layer(&self, layer: usize) -> Option<(Tensor, Tensor)> {
        let l = self.layers.get(layer)?;
        let view = |t: &Option<Tensor>| t.as_ref().and_then(|t| t.narrow(1, 0, l.len).ok());
        Some((view(&l.k)?, view(&l.v)?))
    }
}

/// Room for `needed` entries in `buf` [KV, cap, D] holding `len`: the buffer itself, or a new
/// one at least twice as large with the first `len` entries copied.
fn ensure(
    buf: &Option<Tensor>,
    like: &Tensor,
    len: usize,
    needed: usize,
    reserve: usize,
) -> candle_core::Result<Tensor> {
    let cap = buf.as_ref().map_or(0, |b| b.dim(1).unwrap_or(0));
    if let Some(b) = buf.as_ref().filter(|_| needed <= cap) {
        return Ok(b.clone());
    }
    let (kv, _, d) = like.dims3()?;
    let new_cap = needed.max(2 * cap).max(reserve).max(MIN_CAPACITY);
    let grown = Tensor::zeros((kv, new_cap, d), DType::F32, &Device::Cpu)?;
    if let (Some(b), true) = (buf, len > 0) {
        grown.slice_set(&b.narrow(1, 0, len)?.contiguous()?, 1, 0)?;
    }
    Ok(grown)
}

impl KvStore for FullCache {
    fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
        positions: &[usize],
        phase: Phase,
    ) -> Result<()> {
        let _s = span(Op::Cache);
        let (reserve, n_layers) = (self.reserve, self.layers.len());
        let l = self
            .layers
            .get_mut(layer)
            .ok_or_else(|| Error::usage(format!("layer {layer}: the cache has {n_layers} layers")))?;
        let t = positions.len();
        let needed = l.len.checked_add(t).ok_or_else(|| Error::usage("cache length overflows"))?;
        let c = || format!("layer {layer} cache append");
        for (buf, new) in [(&mut l.k, k), (&mut l.v, v)] {
            let new = new.to_dtype(DType::F32).and_then(|n| n.contiguous()).ctx(c)?;
            if new.dim(1).ctx(c)? != t {
                return Err(Error::usage(format!("layer {layer}: {t} positions for {:?} rows", new.dims())));
            }
            let target = ensure(buf, &new, l.len, needed, reserve).ctx(c)?;
            target.slice_set(&new, 1, l.len).ctx(c)?;
            *buf = Some(target);
        }
        l.len = needed;
        l.positions.extend_from_slice(positions);
        l.writers.extend(std::iter::repeat_n(phase, t));
        Ok(())
    }

    fn read(&self, layer: usize) -> Result<CacheView> {
        let _s = span(Op::Cache);
        let (k, v) = self
            .layer(layer)
            .ok_or_else(|| Error::usage(format!("layer {layer}: cache read before any write")))?;
        let l = &self.layers[layer];
        Ok(CacheView {
            k,
            v,
            positions: l.positions.iter().map(|p| Some(*p)).collect(),
            writers: l.writers.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(kv: usize, t: usize, d: usize, base: f32) -> Tensor {
        let data: Vec<f32> = (0..kv * t * d).map(|i| base + i as f32).collect();
        Tensor::from_vec(data, (kv, t, d), &Device::Cpu).unwrap()
    }

    #[test]
    fn appends_read_back_as_concatenation_across_growth() {
        let mut c = FullCache::new(1);
        let mut want: Option<Tensor> = None;
        let mut pos = 0;
        // 70 + 1 + ... crosses the 64-entry minimum and one doubling.
        for (step, t) in [70usize, 1, 1, 60, 1].into_iter().enumerate() {
            let k = rows(2, t, 3, step as f32 * 1000.0);
            let v = (k.clone() * 2.0).unwrap();
            let positions: Vec<usize> = (pos..pos + t).collect();
            let view_before = c.layer(0);
            c.append(0, &k, &v, &positions, Phase::Decode(step)).unwrap();
            pos += t;
            want = Some(match want {
                None => k.clone(),
                Some(w) => Tensor::cat(&[&w, &k], 1).unwrap(),
            });
            let view = c.read(0).unwrap();
            assert_eq!(view.k.dims(), &[2, pos, 3]);
            let diff = (&view.k - want.as_ref().unwrap()).unwrap().abs().unwrap().sum_all().unwrap();
            assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0);
            let dv = ((&view.v / 2.0).unwrap() - want.as_ref().unwrap())
                .unwrap()
                .abs()
                .unwrap()
                .sum_all()
                .unwrap();
            assert_eq!(dv.to_scalar::<f32>().unwrap(), 0.0);
            assert_eq!(view.positions.len(), pos);
            // A view taken before the append still shows what it showed.
            if let Some((k_before, _)) = view_before {
                assert_eq!(k_before.dim(1).unwrap(), pos - t);
            }
        }
        assert_eq!(c.layers[0].len, pos);
    }

    #[test]
    fn a_clone_does_not_share_buffers() {
        let mut a = FullCache::new(1);
        a.append(0, &rows(1, 2, 2, 0.0), &rows(1, 2, 2, 0.0), &[0, 1], Phase::Prefill).unwrap();
        let mut b = a.clone();
        a.append(0, &rows(1, 1, 2, 100.0), &rows(1, 1, 2, 100.0), &[2], Phase::Decode(0)).unwrap();
        b.append(0, &rows(1, 1, 2, 200.0), &rows(1, 1, 2, 200.0), &[2], Phase::Decode(0)).unwrap();
        let ka: Vec<f32> = a.read(0).unwrap().k.flatten_all().unwrap().to_vec1().unwrap();
        let kb: Vec<f32> = b.read(0).unwrap().k.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(ka[4..], [100.0, 101.0]);
        assert_eq!(kb[4..], [200.0, 201.0]);
    }
}
