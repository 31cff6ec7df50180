//! The simulated device's KV cache: HailoRT's ring, and the ring as one step's KV store.

use crate::budget::Bytes;
use crate::device::padded_entry_bytes;
use crate::device::synth_hef::SimSpec;
use crate::error::{Error, Result};
use crate::fault::catalog::cache::CacheLayout;
use crate::fault::spec::FaultSpec;
use crate::hef::model::dtype_name;
use crate::hef::synth::data_bytes;
use crate::hef::{Hef, NetworkGroup, QuantInfo};
use crate::model::config::ModelConfig;
use crate::model::decoder::{CacheView, KvStore};
use crate::tap::Phase;
use candle_core::{Device as Cpu, Tensor};

/// HailoRT's cache ring (cache_manager.cpp, cache_buffer.cpp): `len` one-token entries per
/// cache id, one read offset for every group; a group with a T-row frame reads `len − T`
/// entries from the read offset and writes T entries right after them.
pub(super) struct Ring {
    pub len: usize,
    pub read_offset: usize,
    /// Per layer: keys and values, each `len` entries of kv_heads × head_dim values (as the
    /// device holds them: quantized with the cache layer's quant info, kept dequantized), one
    /// flat buffer per layer: entry e is `[e·n, (e+1)·n)` for n = kv_heads × head_dim. Zeroed
    /// pages cost nothing until a layer is written (explain's candidates that start at a later
    /// block never touch the layers below it).
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// The phase kind that wrote each entry (prefill or decode), for fault models.
    writers: Vec<Phase>,
    /// Entries a frame row left out or not needed would have written (`trim`): what they hold
    /// is not what the device computes, so a needed row may not read one.
    pub(super) stale: Vec<bool>,
    quant: Vec<(QuantInfo, QuantInfo)>,
    kv_heads: usize,
    head_dim: usize,
    /// Bytes of one entry as the runtime pads it (cache_manager.cpp get_cache_ios_infos), from
    /// the HEF's cache layers.
    pad: usize,
    /// The cache-layout fault (finding 9), realized where it happens: the prefill group
    /// writes each entry's features in another order than tbt reads them. Per layer:
    /// stored[f] = written[perm[f]]; prefill reads its own entries back through the inverse.
    prefill_layout: Vec<Option<Vec<usize>>>,
}

impl Ring {
    fn new(
        len: usize,
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        pad: usize,
        quant: Vec<(QuantInfo, QuantInfo)>,
    ) -> Self {
        let empty = || (0..layers).map(|_| vec![0f32; len * kv_heads * head_dim]).collect();
        Ring {
            len,
            read_offset: 0,
            k: empty(),
            v: empty(),
            writers: vec![Phase::Decode(0); len],
            stale: vec![false; len],
            quant,
            kv_heads,
            head_dim,
            pad,
            prefill_layout: vec![None; layers],
        }
    }

    /// The ring of `hef`'s prefill group for `c`'s caches, sized by the HEF's cache layers and
    /// checked against the memory budget first, with the cache-layout faults `layouts` realized
    /// in how prefill writes it; and the blocks the graph runs, first and last (`spec.layers`).
    pub(super) fn of_hef(
        hef: &Hef,
        spec: &SimSpec,
        c: &ModelConfig,
        layouts: &[FaultSpec],
        what: &str,
    ) -> Result<(Ring, (usize, usize))> {
        // The ring is shared by every cache-bearing group: its prefill group's layers size it
        // (genai's pick; else, in a HEF that also holds a base-scope group, the first such group).
        let prefill = hef.llm_groups().ok().map(|(p, _)| p);
        let g = prefill.as_deref().and_then(|p| hef.group(p));
        let g = g.or_else(|| hef.groups.iter().find(|g| g.role() == crate::hef::GroupRole::Prefill));
        let Some(g) = g else {
            // Only base-scope groups: nothing reads a ring.
            let quant = vec![(crate::hef::QuantInfo::INVALID, crate::hef::QuantInfo::INVALID); c.num_layers];
            let ring = Ring::new(0, c.num_layers, c.num_kv_heads, c.head_dim, 0, quant);
            return Ok((ring, spec.block_range(c.num_layers, what)?));
        };
        let ring_len = ring_length(g, what)?;
        let pad = cache_entry_bytes(hef, c.num_kv_heads, c.head_dim, what)?;
        // A graph cut from the model (SimSpec::layers) numbers its caches from its first block.
        let (first, last) = spec.block_range(c.num_layers, what)?;
        let quant = (0..c.num_layers)
            .map(|l| {
                let hef_layer = l.clamp(first, last) - first;
                let q = |id: usize| {
                    g.caches.iter().find(|x| x.cache_id as usize == id).map(|x| x.quant).ok_or_else(|| {
                        Error::input(what, format!("group `{}` has no cache id {id} (layer {l})", g.name))
                    })
                };
                Ok((q(2 * hef_layer)?, q(2 * hef_layer + 1)?))
            })
            .collect::<Result<Vec<_>>>()?;
        // The ring is sized by the HEF's cache layers (input): checked against the budget first.
        let entry = Bytes::product(&[c.num_kv_heads, c.head_dim]).times(4);
        let ring_bytes = Bytes::product(&[ring_len, c.num_layers, 2]).times(entry.get().unwrap_or(u64::MAX));
        crate::budget::current().check(
        format!("{what}: the simulated device's KV cache ring ({ring_len} entries × {} layers × K and V)", c.num_layers),
        ring_bytes,
        "the HEF's cache layers (kv_cache_size) are larger than any model needs: rebuild it with a smaller \
         --kv-cache-size, or raise --max-memory",
    )?;
        let mut ring = Ring::new(ring_len, c.num_layers, c.num_kv_heads, c.head_dim, pad, quant);
        for f in layouts {
            let fs = crate::fault::catalog::parse_as::<CacheLayout>(f, c)?;
            let perm: Vec<usize> = fs
                .mechanism
                .layout
                .permutation(c.num_kv_heads, c.head_dim)
                .into_iter()
                .map(|x| x as usize)
                .collect();
            for (l, slot) in ring.prefill_layout.iter_mut().enumerate() {
                if fs.spec.applies(l) {
                    *slot = Some(perm.clone());
                }
            }
        }
        Ok((ring, (first, last)))
    }

    fn permute(entry: &[f32], perm: &[usize]) -> Vec<f32> {
        perm.iter().map(|&src| entry[src]).collect()
    }

    fn unpermute(entry: &[f32], perm: &[usize]) -> Vec<f32> {
        let mut out = vec![0f32; entry.len()];
        for (f, &src) in perm.iter().enumerate() {
            out[src] = entry[f];
        }
        out
    }

    /// Values of one entry.
    fn width(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// One ring (cache id 2l = keys of layer l, 2l + 1 = values) as raw bytes, entries in ring
    /// order, uint16 little-endian, each padded.
    pub fn raw(&self, id: u32) -> Option<Vec<u8>> {
        let (layer, is_v) = (id as usize / 2, id % 2 == 1);
        let entries = if is_v { self.v.get(layer)? } else { self.k.get(layer)? };
        let q = if is_v { self.quant[layer].1 } else { self.quant[layer].0 };
        let pad = self.pad;
        let mut out = Vec::with_capacity(self.len * pad);
        for e in entries.chunks_exact(self.width()) {
            let start = out.len();
            out.extend(e.iter().flat_map(|&x| (q.quantize(x).clamp(0.0, 65535.0) as u16).to_le_bytes()));
            out.resize(start + pad, 0);
        }
        Some(out)
    }

    pub(super) fn write_raw(&mut self, id: u32, bytes: &[u8]) -> Result<()> {
        let pad = self.pad;
        if bytes.len() != self.len * pad {
            return Err(Error::Device(format!(
                "update_cache_buffer({id}): {} bytes, the ring holds {} entries of {pad} bytes",
                bytes.len(),
                self.len
            )));
        }
        let (layer, is_v) = (id as usize / 2, id % 2 == 1);
        if layer >= self.k.len() {
            return Err(Error::Device(format!("update_cache_buffer: no cache id {id}")));
        }
        let q = if is_v { self.quant[layer].1 } else { self.quant[layer].0 };
        let n = self.width();
        for (i, chunk) in bytes.chunks(pad).enumerate() {
            let entries = if is_v { &mut self.v[layer] } else { &mut self.k[layer] };
            for (x, b) in entries[i * n..(i + 1) * n].iter_mut().zip(chunk[..n * 2].chunks_exact(2)) {
                *x = q.dequantize(u16::from_le_bytes([b[0], b[1]]) as f32);
            }
            // Written by the host in the layout tbt reads.
            self.writers[i] = Phase::Decode(0);
            self.stale[i] = false;
        }
        Ok(())
    }

    /// The entry row `row` of a frame of `rows` writes (right after the read window).
    fn entry(&self, rows: usize, row: usize) -> usize {
        (self.read_offset + self.len - rows + row) % self.len
    }

    /// Refuses a step in which a row `live` marks reads (as `allowed` lets it) an entry of an
    /// earlier frame that was not computed: leaving that frame's rows out was wrong.
    pub(super) fn check_reads(&self, allowed: &[Vec<bool>], live: &[bool]) -> Result<()> {
        let t = allowed.len();
        for (r, row) in allowed.iter().enumerate().filter(|&(r, _)| live[r]) {
            let earlier = row.len().saturating_sub(t);
            if let Some(j) = (0..earlier).find(|&j| row[j] && self.stale[(self.read_offset + j) % self.len]) {
                return Err(Error::Device(format!(
                    "frame row {r} reads ring slot {j}, which a row left out of an earlier frame would have \
                     written: explain's emulation cannot leave rows out of this HEF's frames (run explain with \
                     --exhaustive)"
                )));
            }
        }
        Ok(())
    }

    /// After a step of the rows `live` marks needed: the entries of the others are stale.
    pub(super) fn mark(&mut self, live: &[bool]) {
        for (r, &l) in live.iter().enumerate() {
            let e = self.entry(live.len(), r);
            self.stale[e] = !l;
        }
    }
}

/// The ring as one step's KV store: writes land after the read window. The step computes the
/// last `rows − skip` rows of a frame of `rows`.
pub(super) struct RingStep<'a> {
    pub(super) ring: &'a mut Ring,
    pub(super) rows: usize,
    pub(super) skip: usize,
    pub(super) writer: Phase,
}

impl KvStore for RingStep<'_> {
    fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
        _positions: &[usize],
        _phase: Phase,
    ) -> Result<()> {
        let r = &mut *self.ring;
        let (qk, qv) = r.quant[layer];
        // [KV, T, D] -> per row t: [kv][d] flattened, quantized as the cache holds it.
        let rows = |x: &Tensor, q: QuantInfo| -> Result<Vec<Vec<f32>>> {
            let x = x.transpose(0, 1)?.contiguous()?.flatten_from(1)?;
            let rows: Vec<Vec<f32>> = x.to_vec2()?;
            Ok(rows
                .into_iter()
                .map(|row| row.into_iter().map(|v| q.dequantize(q.quantize(v))).collect())
                .collect())
        };
        let (kr, vr) = (rows(k, qk)?, rows(v, qv)?);
        let layout = if self.writer.is_decode() { None } else { r.prefill_layout[layer].clone() };
        let n = r.width();
        for (t, (kk, vv)) in kr.into_iter().zip(vr).enumerate() {
            let entry = r.entry(self.rows, self.skip + t);
            let (kk, vv) = match &layout {
                Some(p) => (Ring::permute(&kk, p), Ring::permute(&vv, p)),
                None => (kk, vv),
            };
            r.k[layer][entry * n..(entry + 1) * n].copy_from_slice(&kk);
            r.v[layer][entry * n..(entry + 1) * n].copy_from_slice(&vv);
            r.writers[entry] = self.writer;
        }
        Ok(())
    }

    fn read(&self, layer: usize) -> Result<CacheView> {
        let r = &*self.ring;
        let order: Vec<usize> = (0..r.len).map(|j| (r.read_offset + j) % r.len).collect();
        // The prefill group reads its own entries in the layout it wrote them.
        let own = if self.writer.is_decode() { None } else { r.prefill_layout[layer].as_ref() };
        let (n, d) = (r.width(), r.head_dim);
        // [KV, S, D] written in order (no zeroing first): head h of slot j is entry order[j]'s
        // h-th D values.
        let gather = |entries: &[f32]| -> Result<Tensor> {
            // Entries prefill wrote in its own layout, unpermuted (none without a layout fault).
            let unpermuted: Vec<Option<Vec<f32>>> = match own {
                None => Vec::new(),
                Some(p) => order
                    .iter()
                    .map(|&e| {
                        (!r.writers[e].is_decode()).then(|| Ring::unpermute(&entries[e * n..(e + 1) * n], p))
                    })
                    .collect(),
            };
            let mut out = Vec::with_capacity(r.len * n);
            for h in 0..r.kv_heads {
                for (j, &e) in order.iter().enumerate() {
                    let own = unpermuted.get(j).and_then(Option::as_deref);
                    let entry = own.unwrap_or(&entries[e * n..(e + 1) * n]);
                    out.extend_from_slice(&entry[h * d..(h + 1) * d]);
                }
            }
            Ok(Tensor::from_vec(out, (r.kv_heads, r.len, d), &Cpu::Cpu)?)
        };
        Ok(CacheView {
            k: gather(&r.k[layer])?,
            v: gather(&r.v[layer])?,
            positions: vec![None; r.len],
            writers: order.iter().map(|&e| r.writers[e]).collect(),
        })
    }
}

fn ring_length(g: &NetworkGroup, what: &str) -> Result<usize> {
    let read = g.caches.iter().find(|c| c.is_input).map(|c| c.shape.rows() as usize);
    let write = g.caches.iter().find(|c| !c.is_input).map(|c| c.shape.rows() as usize);
    match (read, write) {
        (Some(r), Some(w)) => Ok(r + w),
        _ => Err(Error::input(what, format!("group `{}` has no cache layers to simulate", g.name))),
    }
}

/// The padded entry bytes of the HEF's cache rings. The device holds uint16 entries of
/// kv_heads × head_dim values, and HailoRT sizes an entry by the layer's hardware features taken
/// as bytes (cache_manager.cpp:221): a cache layer laid out otherwise cannot be simulated.
fn cache_entry_bytes(hef: &Hef, kv_heads: usize, head_dim: usize, what: &str) -> Result<usize> {
    let bytes = data_bytes::CACHE as usize * kv_heads * head_dim;
    for c in hef.groups.iter().flat_map(|g| g.caches.iter()) {
        if c.data_bytes != data_bytes::CACHE || c.padded.features as usize != bytes {
            return Err(Error::input(
                what,
                format!(
                    "cache layer `{}` has entries of {} bytes ({}); the simulated device holds UINT16 entries of \
                     kv_heads × head_dim = {kv_heads} × {head_dim} values, {bytes} bytes",
                    c.name,
                    c.padded.features,
                    dtype_name(c.data_bytes)
                ),
            ));
        }
    }
    Ok(padded_entry_bytes(bytes))
}
