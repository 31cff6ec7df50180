//! A configured network group of the simulated device: it decodes the frames the host binds
//! (dequantizing the quantized inputs, quantizing the float ones as the runtime does), runs
//! the emulator over the ring, returns float32 outputs through the HEF's output quant infos,
//! and keeps sim-h10's RPC rules.

use super::core::Core;
use super::ring::RingStep;
use super::trim::Plan;
use crate::capture::MemorySink;
use crate::device::exposed::Layout;
use crate::device::synth_hef::Mistake;
use crate::device::{ConfiguredModel, FormatType, StreamInfo, RPC_CACHE_UNSUPPORTED, RPC_FAILED_RUN};
use crate::error::{Error, Result};
use crate::hef::{GroupRole, NetworkGroup};
use crate::model::decoder::{FrameInputs, StepInput};
use crate::model::hooks::{HookStack, Hooks};
use crate::tap::{Phase, Tap};
use candle_core::{Device as Cpu, Tensor};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

pub struct SimModel {
    pub(super) core: Rc<RefCell<Core>>,
    pub(super) group: NetworkGroup,
    pub(super) inputs: Vec<StreamInfo>,
    pub(super) outputs: Vec<StreamInfo>,
    pub(super) role: GroupRole,
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
        if s.format != FormatType::Float32 {
            return Err(Error::Device(format!("`{}` must be configured FLOAT32 (genai sets it)", s.name)));
        }
        Ok(raw.map(|x| q.dequantize(q.quantize(x))).collect())
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

/// The phase of a base-scope run: the next step of the conversation when its real rows (those
/// after the leading padding rows, which see every column) are the last run's and one more,
/// else the prefill of a new one. The device is not told; the frames say it.
fn base_phase(core: &mut Core, allowed: &[Vec<bool>], embeddings: &[u8]) -> Phase {
    let t = allowed.len();
    let pad = allowed[..t.saturating_sub(1)].iter().take_while(|r| r.iter().all(|&a| a)).count();
    let row = embeddings.len() / t.max(1);
    let real = embeddings[pad * row..].to_vec();
    let step = match &core.base_run {
        Some((prev, k)) if real.len() == prev.len() + row && real.starts_with(prev) => k + 1,
        _ => 0,
    };
    core.base_run = Some((real, step));
    step.checked_sub(1).map_or(Phase::Prefill, Phase::Decode)
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
    /// The rows this frame's step computes: every one, unless this device emulates a candidate
    /// for explain (`trim`), nothing reads rows but the last one's logits, and every hook
    /// computes rows apart.
    fn plan(&self, core: &Core, frame: &FrameInputs, stack: &HookStack) -> Plan {
        let t = frame.allowed.len();
        let full =
            self.role == GroupRole::Prefill && core.spec.mistakes.contains(&Mistake::FullSequenceOutput);
        // A base-scope frame writes no ring: every row is its own key, none left out.
        if !core.trim
            || full
            || self.role == GroupRole::BaseScope
            || core.noise.is_some()
            || !core.exposed.is_empty()
            || !stack.rows_apart()
        {
            return Plan::whole(t);
        }
        Plan::of(&frame.allowed, &core.model.cfg)
    }

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
        let (t, embeds, mut frame) = self.frame(inputs, core)?;
        let phase = match self.role {
            GroupRole::Prefill => Phase::Prefill,
            GroupRole::Tbt => {
                core.tbt_steps += 1;
                Phase::Decode(core.tbt_steps - 1)
            }
            GroupRole::BaseScope => base_phase(
                core,
                &frame.allowed,
                self.bytes(inputs, &core.spec.input_suffixes().embeddings)?.0,
            ),
        };
        // The tbt group computes its own extra faults (SimSpec::tbt_faults) on its own model.
        let (model, extra) = match (self.role, &core.tbt) {
            (GroupRole::Tbt, Some((m, extra))) => (m, extra.as_slice()),
            _ => (&core.model, &[][..]),
        };
        let mut hooks: Vec<Box<dyn crate::model::hooks::Hooks + '_>> =
            core.faults.iter().chain(extra).map(|f| f.hooks()).collect();
        let mut stack = HookStack::default();
        stack.hooks.extend(hooks.iter_mut().map(|h| h.as_mut() as &mut dyn Hooks));
        let plan = self.plan(core, &frame, &stack);
        let cached = self.role != GroupRole::BaseScope;
        if cached {
            core.ring.check_reads(&frame.allowed, &plan.live)?;
        }
        let embeds = plan.cut(embeds, &mut frame)?;
        let input = StepInput { phase, embeds, positions: (plan.skip..t).collect(), frame: Some(frame) };
        // The taps the graph also outputs, caught as the emulator computes them (faults applied).
        let names: Vec<String> = core.exposed.iter().map(Tap::to_string).collect();
        let mut exposed = MemorySink::new(crate::tap::TapSelection::parse(&names)?);
        let out = if cached {
            let writer = if self.role == GroupRole::Prefill { Phase::Prefill } else { Phase::Decode(0) };
            let mut store = RingStep { ring: &mut core.ring, rows: t, skip: plan.skip, writer };
            model.step(&input, &mut store, &mut exposed, &mut stack)?
        } else {
            // A cache-less group: its keys are its own frame's rows, slot j = row j.
            let mut store = crate::model::cache::FullCache::with_capacity(model.cfg.num_layers, t);
            model.step(&input, &mut store, &mut exposed, &mut stack)?
        };
        drop(stack);
        drop(hooks);
        if cached {
            core.ring.mark(&plan.live);
        }
        let mut rows: Vec<Vec<f32>> = out.to_vec2()?;
        if let Some((rng, normal)) = core.noise.as_mut() {
            use rand_distr::Distribution;
            rows.iter_mut().flatten().for_each(|x| *x += normal.sample(rng));
        }
        self.output_frames(core, &rows, &exposed, phase)
    }

    /// What the host bound, as the graph sees it: the frame's rows, its embeddings (dequantized
    /// uint16) and its mask and RoPE tables.
    fn frame(&self, inputs: &[(String, Vec<u8>)], core: &Core) -> Result<(usize, Tensor, FrameInputs)> {
        let c = &core.model.cfg;
        // Which input the graph takes as which: its own truth ([`crate::device::synth_hef::SimSpec::inputs`]),
        // whatever hailo-config.json tells the host.
        let suffixes = core.spec.input_suffixes();
        let (emb, es) = self.bytes(inputs, &suffixes.embeddings)?;
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
        let (mask, ms) = self.bytes(inputs, &suffixes.attention_mask)?;
        let mq = ms.quant_infos[0];
        let width = mask.len() / t;
        // A base-scope frame's keys are its own rows; a cached group's the ring's slots.
        let ring = if self.role == GroupRole::BaseScope { t } else { core.ring.len };
        if width != ring * c.num_heads {
            return Err(Error::Device(format!(
                "mask rows of {width} bytes; the graph reads {ring} slots × {} heads",
                c.num_heads
            )));
        }
        // Head block 0 of each row: genai copies it to every head.
        let allowed: Vec<Vec<bool>> = mask
            .chunks(width)
            .map(|row| row[..ring].iter().map(|&b| mq.dequantize(b as f32) > 0.5).collect())
            .collect();
        let q_cos = self.float_input(inputs, &suffixes.pe_q_cos)?;
        let q_sin = self.float_input(inputs, &suffixes.pe_q_sin)?;
        let k_cos = self.float_input(inputs, &suffixes.pe_k_cos)?;
        let k_sin = self.float_input(inputs, &suffixes.pe_k_sin)?;
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
            skip: 0,
            head_rows: None,
        };
        Ok((t, embeds, frame))
    }

    /// The graph's outputs for one frame of `rows`, as the host receives them: the logits
    /// (through each output's quant info) and the exposed taps `exposed` caught.
    fn output_frames(
        &self,
        core: &Core,
        rows: &[Vec<f32>],
        exposed: &MemorySink,
        phase: Phase,
    ) -> Result<Vec<Vec<u8>>> {
        let c = &core.model.cfg;
        let full =
            self.role == GroupRole::Prefill && core.spec.mistakes.contains(&Mistake::FullSequenceOutput);
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
