//! The simulated device: opens a HEF written by `synth-hef` and runs it the way the chip
//! would see it — it decodes the frames the host sends (dequantizing the quantized inputs and
//! quantizing the float ones exactly as the runtime does), runs the emulator (the HEF's faults
//! and quantization) with a KV cache that behaves as HailoRT's ring (one ring per cache id,
//! shared by prefill and tbt, one read offset, writes right after the read window), and
//! returns float32 outputs through the HEF's output quant infos.
//!
//! (Over 600 lines on purpose: the frame decoding, the ring and the sim-h10 RPC rules are one
//! device's behaviour, each read against the driver's frame code; split, every part would
//! import the other two.)

use super::exposed::Layout;
use super::synth_hef::{sim_spec, Mistake, SimSpec};
use super::{
    configured_streams, padded_entry_bytes, ConfiguredModel, Device, DeviceFacts, FormatType, SimProfile,
    StreamInfo, RPC_CACHE_UNSUPPORTED, RPC_FAILED_RUN,
};
use crate::budget::Bytes;
use crate::error::{Error, Result};
use crate::fault::catalog::{self, cache::CacheLayout};
use crate::fault::spec::FaultSpec;
use crate::fault::{Fault, OnDevice};
use crate::hef::model::dtype_name;
use crate::hef::synth::data_bytes;
use crate::hef::{Hef, NetworkGroup, QuantInfo};
use crate::model::decoder::{CacheView, FrameInputs, KvStore, StepInput};
use crate::model::hooks::HookStack;
use crate::model::{Checkpoint, Decoder};
use crate::tap::{Phase, Tap};
use candle_core::{Device as Cpu, Tensor};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// HailoRT's cache ring (cache_manager.cpp, cache_buffer.cpp): `len` one-token entries per
/// cache id, one read offset for every group; a group with a T-row frame reads `len − T`
/// entries from the read offset and writes T entries right after them.
pub struct Ring {
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
    quant: Vec<(QuantInfo, QuantInfo)>,
    kv_heads: usize,
    head_dim: usize,
    /// Bytes of one entry as the runtime pads it.
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
            quant,
            kv_heads,
            head_dim,
            pad,
            prefill_layout: vec![None; layers],
        }
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

    /// Entry bytes as the runtime pads them (cache_manager.cpp get_cache_ios_infos), from the
    /// HEF's cache layers.
    pub fn padded_entry_bytes(&self) -> usize {
        self.pad
    }

    /// One ring (cache id 2l = keys of layer l, 2l + 1 = values) as raw bytes, entries in ring
    /// order, uint16 little-endian, each padded.
    pub fn raw(&self, id: u32) -> Option<Vec<u8>> {
        let (layer, is_v) = (id as usize / 2, id % 2 == 1);
        let entries = if is_v { self.v.get(layer)? } else { self.k.get(layer)? };
        let q = if is_v { self.quant[layer].1 } else { self.quant[layer].0 };
        let pad = self.padded_entry_bytes();
        let mut out = Vec::with_capacity(self.len * pad);
        for e in entries.chunks_exact(self.width()) {
            let start = out.len();
            out.extend(e.iter().flat_map(|&x| (q.quantize(x).clamp(0.0, 65535.0) as u16).to_le_bytes()));
            out.resize(start + pad, 0);
        }
        Some(out)
    }

    fn write_raw(&mut self, id: u32, bytes: &[u8]) -> Result<()> {
        let pad = self.padded_entry_bytes();
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
        }
        Ok(())
    }
}

/// The ring as one step's KV store: writes land after the read window.
struct RingStep<'a> {
    ring: &'a mut Ring,
    rows: usize,
    writer: Phase,
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
            let entry = (r.read_offset + r.len - self.rows + t) % r.len;
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
        // [KV, S, D] written directly: head h of slot j is entry order[j]'s h-th D values.
        let gather = |entries: &[f32]| -> Result<Tensor> {
            let mut out = vec![0f32; r.len * n];
            for (j, &e) in order.iter().enumerate() {
                let unpermuted;
                let entry = match own {
                    Some(p) if !r.writers[e].is_decode() => {
                        unpermuted = Ring::unpermute(&entries[e * n..(e + 1) * n], p);
                        &unpermuted[..]
                    }
                    _ => &entries[e * n..(e + 1) * n],
                };
                for (h, head) in entry.chunks_exact(d).enumerate() {
                    out[(h * r.len + j) * d..(h * r.len + j + 1) * d].copy_from_slice(head);
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

/// Faults whose hooks go ahead of the device's own (explain's instrument).
type Faults = Vec<Box<dyn Fault>>;

struct Core {
    model: Decoder,
    faults: Vec<Box<dyn Fault>>,
    ring: Ring,
    tbt_steps: usize,
    spec: SimSpec,
    profile: SimProfile,
    /// sim-h10: the first failed run, after which every call on the configured models fails
    /// (one server-side shutdown takes both groups' rings with it in this model).
    poisoned: Option<String>,
    /// The planted noise's stream (SimSpec::noise), continued across runs.
    noise: Option<(rand_chacha::ChaCha8Rng, rand_distr::Normal<f32>)>,
    /// The taps the graph also outputs (SimSpec::expose).
    exposed: Vec<Tap>,
    /// The blocks the graph runs, first and last (SimSpec::layers).
    layers: (usize, usize),
}

pub struct SimDevice {
    /// Shared with the backend that drives it, and with explain's emulations of it.
    hef: Arc<Hef>,
    what: String,
    core: Rc<RefCell<Core>>,
    pub checkpoint: Checkpoint,
}

impl SimDevice {
    pub fn open(path: &Path) -> Result<Self> {
        let what = path.display().to_string();
        let hef = Hef::read(path)?;
        let spec = sim_spec(&hef, &what)?.ok_or_else(|| {
            Error::input(
                &what,
                "is not a simulated HEF (no hefprobe-sim.json resource); a real HEF needs a Hailo device: \
                 build with --features hailo on the device host",
            )
        })?;
        Self::from_hef(hef, spec, what)
    }

    /// [`SimDevice::from_hef`] as the Hailo-10H RPC client (`SimProfile::SimH10`) or a local
    /// device.
    pub fn with_profile(
        hef: impl Into<Arc<Hef>>,
        spec: SimSpec,
        what: String,
        profile: SimProfile,
    ) -> Result<Self> {
        let dev = Self::from_hef(hef, spec, what)?;
        dev.core.borrow_mut().profile = profile;
        Ok(dev)
    }

    pub fn profile(&self) -> SimProfile {
        self.core.borrow().profile
    }

    pub fn from_hef(hef: impl Into<Arc<Hef>>, spec: SimSpec, what: String) -> Result<Self> {
        let ckpt = spec.checkpoint.load()?;
        Self::on(hef.into(), spec, what, ckpt, (Vec::new(), None))
    }

    /// The frames and the ring of `hef` (any LLM HEF genai runs, simulated or compiled) on
    /// `ckpt`'s weights, computing `spec`'s faults through `quantized` (a frozen quantization:
    /// explain's expected one) in place of a quantization calibrated here: how `explain`
    /// emulates a candidate fault as a HEF computes it, padding rows, ring and all. `first`:
    /// faults whose hooks go ahead of all others (explain's instrument, which records or
    /// resumes the steps).
    pub fn emulating(
        hef: Arc<Hef>,
        spec: SimSpec,
        what: String,
        ckpt: Checkpoint,
        (first, quantized): (Faults, Box<dyn Fault>),
    ) -> Result<Self> {
        Self::on(hef, spec, what, ckpt, (first, Some(quantized)))
    }

    fn on(
        hef: Arc<Hef>,
        spec: SimSpec,
        what: String,
        ckpt: Checkpoint,
        (first, frozen): (Faults, Option<Box<dyn Fault>>),
    ) -> Result<Self> {
        let c = &ckpt.config;
        // cache-layout is realized in the ring itself (how prefill writes), so the cache
        // buffers show it as a device's would; the other faults run in the emulator.
        let (layouts, mut specs): (Vec<FaultSpec>, Vec<FaultSpec>) =
            spec.faults.iter().cloned().partition(|f| catalog::on_device(f) == OnDevice::Ring);
        if spec.mistakes.contains(&Mistake::MissingLmHead) {
            specs.push(FaultSpec::parse("no-lm-head")?);
        }
        // The device gets its inputs already quantized by the runtime: the emulator must not
        // quantize them again.
        if spec.quant != "none" && frozen.is_none() {
            specs.push(crate::fault::spec::quantization(&spec.quant)?.with_param("inputs", "none"));
        }
        let mut faults = first;
        faults.extend(crate::fault::catalog::build_all(&specs, c)?);
        faults.extend(frozen);
        let mut model = Decoder::new(&ckpt)?;
        for f in &faults {
            f.transform_weights(&mut model)?;
        }
        let calibration = spec.calibration(c.vocab_size);
        check_calibration(&calibration.prompts, c.vocab_size, &what)?;
        let calib = calibration.inputs();
        for f in &faults {
            f.prepare(&model, &calib)?;
        }
        let (prefill, _) = hef.llm_groups()?;
        let g = hef.group(&prefill).expect("selected group exists");
        let ring_len = ring_length(g, &what)?;
        let pad = cache_entry_bytes(&hef, c.num_kv_heads, c.head_dim, &what)?;
        // A graph cut from the model (SimSpec::layers) numbers its caches from its first block.
        let (first, last) = spec.block_range(c.num_layers, &what)?;
        let quant = (0..c.num_layers)
            .map(|l| {
                let hef_layer = l.clamp(first, last) - first;
                let q = |id: usize| {
                    g.caches.iter().find(|x| x.cache_id as usize == id).map(|x| x.quant).ok_or_else(|| {
                        Error::input(&what, format!("group `{}` has no cache id {id} (layer {l})", g.name))
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
        for f in &layouts {
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
        let exposed = spec
            .expose
            .iter()
            .map(|t| {
                Tap::parse(t)
                    .filter(|&t| super::exposed::exposable(t) && t.layer().is_none_or(|l| l < c.num_layers))
                    .ok_or_else(|| {
                        Error::input(
                            format!("{what} resource {} `expose`", super::synth_hef::SIM_RESOURCE),
                            format!("`{t}` is not a tap this {}-layer graph can output", c.num_layers),
                        )
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let noise = match spec.noise {
            Some(n) => {
                use rand::SeedableRng;
                let normal = rand_distr::Normal::new(0.0, n.std).map_err(|e| {
                    Error::input(
                        format!("{what} resource {}", super::synth_hef::SIM_RESOURCE),
                        format!("noise: {e}"),
                    )
                })?;
                Some((rand_chacha::ChaCha8Rng::seed_from_u64(n.seed), normal))
            }
            None => None,
        };
        Ok(SimDevice {
            hef,
            what,
            core: Rc::new(RefCell::new(Core {
                model,
                faults,
                ring,
                tbt_steps: 0,
                spec,
                profile: SimProfile::Sim,
                poisoned: None,
                noise,
                exposed,
                layers: (first, last),
            })),
            checkpoint: ckpt,
        })
    }

    pub fn hef(&self) -> &Hef {
        &self.hef
    }

    pub fn spec(&self) -> SimSpec {
        self.core.borrow().spec.clone()
    }
}

use super::synth_hef::{MAX_CALIBRATION_PROMPTS, MAX_CALIBRATION_TOKENS};

/// The calibration prompts a simulated HEF records are input: each id inside the vocabulary,
/// none empty, and a bounded total, named by the resource they come from.
fn check_calibration(prompts: &[Vec<u32>], vocab: usize, what: &str) -> Result<()> {
    let resource = || format!("{what} resource {} `calibration`", super::synth_hef::SIM_RESOURCE);
    let total = prompts.iter().map(Vec::len).fold(0usize, usize::saturating_add);
    if prompts.is_empty() || prompts.len() > MAX_CALIBRATION_PROMPTS || total > MAX_CALIBRATION_TOKENS {
        return Err(Error::input(
            resource(),
            format!(
                "{} prompts of {total} tokens: give 1 ..= {MAX_CALIBRATION_PROMPTS} prompts of at most \
                 {MAX_CALIBRATION_TOKENS} tokens",
                prompts.len()
            ),
        ));
    }
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(Error::input(resource(), format!("prompt {i} is empty")));
        }
        if let Some(&id) = p.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::input(
                resource(),
                format!(
                    "prompt {i} holds token id {id}, beyond the checkpoint's vocabulary of {vocab}: \
                     the HEF was calibrated for another checkpoint (write it again with synth-hef)"
                ),
            ));
        }
    }
    Ok(())
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

impl Device for SimDevice {
    fn describe(&self) -> String {
        let s = self.core.borrow();
        let faults = if s.spec.faults.is_empty() {
            "no faults".to_string()
        } else {
            crate::fault::spec::join(&s.spec.faults, ", ")
        };
        let profile = match s.profile {
            SimProfile::Sim => "simulated device",
            SimProfile::SimH10 => "simulated Hailo-10H (RPC client limits)",
        };
        format!("{profile} for {} (quant {}, {faults})", self.what, s.spec.quant)
    }

    fn facts(&self) -> DeviceFacts {
        let s = self.core.borrow();
        let mut about =
            format!("hefprobe {} simulated Hailo-10H, quant {}", env!("CARGO_PKG_VERSION"), s.spec.quant);
        if !s.spec.faults.is_empty() {
            about += &format!(", faults {}", crate::fault::spec::join(&s.spec.faults, " "));
        }
        if let Some(n) = s.spec.noise {
            about += &format!(", planted noise std {}", n.std);
        }
        DeviceFacts {
            // `sim` or `sim-h10` (the RPC client's limits).
            kind: s.profile.name().into(),
            // The simulator executes HEFs for the Hailo-10H (hw_arch HAILO1XH, as synth-hef writes).
            architecture: Some("HAILO10H".into()),
            device_id: Some("simulated".into()),
            simulator: Some(about),
            ..DeviceFacts::default()
        }
    }

    fn network_groups(&self) -> Vec<String> {
        self.hef.groups.iter().map(|g| g.name.clone()).collect()
    }

    fn configure(&mut self, group: &str, float_inputs: &[String]) -> Result<Box<dyn ConfiguredModel>> {
        let g = self.hef.group(group).ok_or_else(|| {
            Error::Device(format!("create_infer_model: {} has no network group `{group}`", self.what))
        })?;
        let (inputs, outputs) = configured_streams(g, float_inputs)?;
        let prefill = self.hef.llm_groups()?.0 == group;
        Ok(Box::new(SimModel { core: self.core.clone(), group: g.clone(), inputs, outputs, prefill }))
    }
}

pub struct SimModel {
    core: Rc<RefCell<Core>>,
    group: NetworkGroup,
    inputs: Vec<StreamInfo>,
    outputs: Vec<StreamInfo>,
    prefill: bool,
}

impl SimModel {
    fn bytes<'a>(&self, inputs: &'a [(String, Vec<u8>)], suffix: &str) -> Result<(&'a [u8], &StreamInfo)> {
        let s = self.inputs.iter().find(|s| s.name.ends_with(suffix)).ok_or_else(|| {
            Error::Device(format!("group `{}` has no input ending in {suffix}", self.group.name))
        })?;
        let (_, b) = inputs
            .iter()
            .find(|(n, _)| *n == s.name)
            .ok_or_else(|| Error::Device(format!("run: input `{}` was not bound", s.name)))?;
        if b.len() != s.frame_size() {
            return Err(Error::Device(format!(
                "run: `{}` bound {} bytes, frame size {}",
                s.name,
                b.len(),
                s.frame_size()
            )));
        }
        Ok((b, s))
    }

    /// A float32 input as the device sees it: quantized by the runtime (clip to limvals,
    /// round half to even), dequantized by the graph.
    fn float_input(&self, inputs: &[(String, Vec<u8>)], suffix: &str) -> Result<Vec<f32>> {
        let (b, s) = self.bytes(inputs, suffix)?;
        let q = s.quant_infos[0];
        let raw = b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        Ok(match s.format {
            FormatType::Float32 => raw.map(|x| q.dequantize(q.quantize(x))).collect(),
            _ => {
                return Err(Error::Device(format!("`{}` must be configured FLOAT32 (genai sets it)", s.name)))
            }
        })
    }

    /// [T][heads][L] floats -> [heads, T, L] tensor.
    fn table(&self, v: Vec<f32>, t: usize, heads: usize, what: &str) -> Result<Tensor> {
        if heads == 0 || !v.len().is_multiple_of(t * heads) {
            return Err(Error::Device(format!(
                "{what}: {} values do not tile over {t} rows × {heads} heads",
                v.len()
            )));
        }
        let l = v.len() / (t * heads);
        Ok(Tensor::from_vec(v, (t, heads, l), &Cpu::Cpu)?.transpose(0, 1)?.contiguous()?)
    }
}

impl ConfiguredModel for SimModel {
    fn inputs(&self) -> &[StreamInfo] {
        &self.inputs
    }

    fn outputs(&self) -> &[StreamInfo] {
        &self.outputs
    }

    fn run(&mut self, inputs: &[(String, Vec<u8>)], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        self.check_usable()?;
        let result = self.run_inner(inputs, timeout);
        if let Err(e) = &result {
            let mut core = self.core.borrow_mut();
            if core.profile.over_rpc() && core.poisoned.is_none() {
                core.poisoned = Some(format!("run of group `{}`: {e}", self.group.name));
            }
        }
        result
    }

    fn init_cache(&mut self, read_offset: u32) -> Result<()> {
        self.check_usable()?;
        let mut core = self.core.borrow_mut();
        let len = core.ring.len;
        if read_offset as usize >= len {
            return Err(Error::Device(format!(
                "init_cache({read_offset}): the ring has {len} entries (HAILO_INVALID_ARGUMENT)"
            )));
        }
        core.ring.read_offset = read_offset as usize;
        core.tbt_steps = 0;
        Ok(())
    }

    fn update_cache_offset(&mut self, delta: i32) -> Result<()> {
        self.check_usable()?;
        let mut core = self.core.borrow_mut();
        let len = core.ring.len as i64;
        core.ring.read_offset = ((core.ring.read_offset as i64 + delta as i64).rem_euclid(len)) as usize;
        Ok(())
    }

    fn cache_buffers(&mut self) -> Result<BTreeMap<u32, Vec<u8>>> {
        self.check_cache_access("get_cache_buffers")?;
        let core = self.core.borrow();
        let (first, last) = core.layers;
        let ids = 2 * (last + 1 - first) as u32;
        let base = 2 * first as u32;
        Ok((0..ids).filter_map(|id| core.ring.raw(id + base).map(|b| (id, b))).collect())
    }

    fn update_cache_buffer(&mut self, cache_id: u32, bytes: &[u8]) -> Result<()> {
        self.check_cache_access("update_cache_buffer")?;
        let mut core = self.core.borrow_mut();
        let base = 2 * core.layers.0 as u32;
        core.ring.write_raw(cache_id.saturating_add(base), bytes)
    }
}

/// An exposed output's float32 frame: every row of the frame, or its last when the output has
/// one row; each value through its feature's quant info as the hardware's uint16 (saturating)
/// and HailoRT's dequantization (transform.cpp `dequantize_output_by_feature`: feature = index
/// mod F for NHWC).
fn exposed_bytes(o: &StreamInfo, rows: Vec<Vec<f32>>) -> Result<Vec<u8>> {
    let w = o.shape.features as usize;
    let keep = if o.shape.rows() == 1 { rows.len().saturating_sub(1) } else { 0 };
    let mut bytes = Vec::with_capacity(o.frame_size());
    for row in &rows[keep..] {
        if row.len() != w {
            return Err(Error::Device(format!(
                "output `{}`: the graph computes {} values per row, the output holds {w}",
                o.name,
                row.len()
            )));
        }
        for (f, &x) in row.iter().enumerate() {
            let q = o.quant_infos[if o.quant_infos.len() == w { f } else { 0 }];
            bytes.extend(q.seen(x, 65535.0).to_le_bytes());
        }
    }
    if bytes.len() != o.frame_size() {
        return Err(Error::Device(format!(
            "output `{}`: {} rows computed for a frame of {}",
            o.name,
            rows.len() - keep,
            o.shape.rows()
        )));
    }
    Ok(bytes)
}

impl SimModel {
    /// sim-h10: refuse every call after a failed run, naming it.
    fn check_usable(&self) -> Result<()> {
        match &self.core.borrow().poisoned {
            Some(first) => Err(Error::Device(format!(
                "group `{}` is unusable after an earlier failure ({first}); {RPC_FAILED_RUN}",
                self.group.name
            ))),
            None => Ok(()),
        }
    }

    /// sim-h10: the cache calls are unsupported before anything is sent.
    fn check_cache_access(&self, call: &str) -> Result<()> {
        self.check_usable()?;
        if self.core.borrow().profile.over_rpc() {
            return Err(Error::Unsupported(format!("{call}: {RPC_CACHE_UNSUPPORTED}")));
        }
        Ok(())
    }

    fn run_inner(&mut self, inputs: &[(String, Vec<u8>)], _timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let mut guard = self.core.borrow_mut();
        let core = &mut *guard;
        let c = core.model.cfg.clone();
        let (emb, es) = self.bytes(inputs, "input_layer1")?;
        let t = es.shape.rows() as usize;
        let eq = es.quant_infos[0];
        let embeds: Vec<f32> =
            emb.chunks_exact(2).map(|b| eq.dequantize(u16::from_le_bytes([b[0], b[1]]) as f32)).collect();
        if embeds.len() != t * c.hidden_size {
            return Err(Error::Device(format!(
                "embeddings: {} values for {t} rows of {}",
                embeds.len(),
                c.hidden_size
            )));
        }
        let embeds = Tensor::from_vec(embeds, (t, c.hidden_size), &Cpu::Cpu)?;
        let (mask, ms) = self.bytes(inputs, "input_layer2")?;
        let mq = ms.quant_infos[0];
        let width = mask.len() / t;
        let ring = core.ring.len;
        if width != ring * c.num_heads {
            return Err(Error::Device(format!(
                "mask rows of {width} bytes; the ring has {ring} slots × {} heads",
                c.num_heads
            )));
        }
        // Head block 0 of each row: genai copies it to every head.
        let allowed: Vec<Vec<bool>> = mask
            .chunks(width)
            .map(|row| row[..ring].iter().map(|&b| mq.dequantize(b as f32) > 0.5).collect())
            .collect();
        let q_cos = self.float_input(inputs, "input_layer3")?;
        let q_sin = self.float_input(inputs, "input_layer4")?;
        let k_cos = self.float_input(inputs, "input_layer5")?;
        let k_sin = self.float_input(inputs, "input_layer6")?;
        let frame = FrameInputs {
            allowed,
            rope_q: (
                self.table(q_cos, t, c.num_heads, "Q cos")?,
                self.table(q_sin, t, c.num_heads, "Q sin")?,
            ),
            rope_k: (
                self.table(k_cos, t, c.num_kv_heads, "K cos")?,
                self.table(k_sin, t, c.num_kv_heads, "K sin")?,
            ),
            layers: Some(core.layers),
        };
        let phase = if self.prefill {
            Phase::Prefill
        } else {
            core.tbt_steps += 1;
            Phase::Decode(core.tbt_steps - 1)
        };
        let input = StepInput { phase, embeds, positions: (0..t).collect(), frame: Some(frame) };
        let mut hooks: Vec<Box<dyn crate::model::hooks::Hooks + '_>> =
            core.faults.iter().map(|f| f.hooks()).collect();
        let mut stack = HookStack::default();
        for h in hooks.iter_mut() {
            stack.hooks.push(h.as_mut());
        }
        let mut store = RingStep {
            ring: &mut core.ring,
            rows: t,
            writer: if self.prefill { Phase::Prefill } else { Phase::Decode(0) },
        };
        // The taps the graph also outputs, caught as the emulator computes them (faults applied).
        let names: Vec<String> = core.exposed.iter().map(Tap::to_string).collect();
        let mut exposed = crate::capture::MemorySink::new(crate::tap::TapSelection::parse(&names)?);
        let out = core.model.step(&input, &mut store, &mut exposed, &mut stack)?;
        drop(stack);
        drop(hooks);
        let mut rows: Vec<Vec<f32>> = out.to_vec2()?;
        if let Some((rng, normal)) = core.noise.as_mut() {
            use rand_distr::Distribution;
            rows.iter_mut().flatten().for_each(|x| *x += normal.sample(rng));
        }
        let full = self.prefill && core.spec.mistakes.contains(&Mistake::FullSequenceOutput);
        // The graph's output is the frame's last position (genai reads one [1, 1, vocab] row).
        let picked: Vec<&Vec<f32>> =
            if full { rows.iter().collect() } else { vec![rows.last().expect("rows")] };
        let mut outputs = Vec::with_capacity(self.outputs.len());
        let mut col = 0;
        // The graph's exposed taps are its last outputs, in the order synth-hef wrote them.
        let first_exposed = self.outputs.len().saturating_sub(core.exposed.len());
        for (i, o) in self.outputs.iter().enumerate() {
            if let Some(&tap) = i.checked_sub(first_exposed).and_then(|k| core.exposed.get(k)) {
                let a = exposed.capture.get(&crate::tap::Key::new(phase, tap)).ok_or_else(|| {
                    Error::Device(format!("output `{}`: the graph computed no {tap}", o.name))
                })?;
                outputs.push(exposed_bytes(o, Layout::of(tap, c.num_heads, c.num_kv_heads).to_rows(a))?);
                continue;
            }
            let w = o.shape.features as usize;
            let q = o.quant_infos[0];
            let mut bytes = Vec::with_capacity(o.frame_size());
            for row in &picked {
                if col + w > row.len() {
                    return Err(Error::Device(format!(
                        "output `{}`: the graph computes {} values per row",
                        o.name,
                        row.len()
                    )));
                }
                bytes.extend(
                    row[col..col + w].iter().flat_map(|&x| q.dequantize(q.quantize(x)).to_le_bytes()),
                );
            }
            col += w;
            outputs.push(bytes);
        }
        Ok(outputs)
    }
}
