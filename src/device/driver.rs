//! The LLM driver: feeds a HEF over any [`Device`](super::Device) exactly as HailoRT's genai LLM server does
//! (hailort_server/genai/llm/{llm_server,pre_process,post_process}.cpp, v5.2.0) and records
//! every frame it sends on request. Unlike upstream, which only asserts, every frame size is
//! checked against the HEF's, and a HEF whose frames disagree with its hailo-config.json is
//! refused with the numbers.

use super::frames::{Frames, PreProcess};
use super::{ConfiguredModel, FormatType, StreamInfo, INFERENCE_TIMEOUT};
use crate::error::{Error, Result};
use crate::hef::llm_config::LlmConfig;
use crate::hef::{Hef, QuantInfo};
use crate::inputs::chunks;
use std::collections::BTreeMap;

mod open;

/// Input names of one group, found by suffix (`get_layer_name_from_suffix`: the first input,
/// in name order, whose name ends with the suffix).
#[derive(Debug, Clone)]
pub struct InputNames {
    pub embeddings: String,
    pub mask: String,
    pub q_cos: String,
    pub q_sin: String,
    pub k_cos: String,
    pub k_sin: String,
}

impl InputNames {
    fn find(group: &str, inputs: &[String], cfg: &LlmConfig) -> Result<Self> {
        let mut sorted = inputs.to_vec();
        sorted.sort();
        let s = &cfg.input_layers_names_suffixes;
        let pick = |role: &str, suffix: &str| -> Result<String> {
            sorted.iter().find(|n| n.ends_with(suffix)).cloned().ok_or_else(|| {
                Error::input(
                    format!("network group `{group}`"),
                    format!("no input ends with `{suffix}` ({role}); inputs: {}", sorted.join(", ")),
                )
            })
        };
        Ok(InputNames {
            embeddings: pick("embeddings", &s.embeddings)?,
            mask: pick("attention_mask", &s.attention_mask)?,
            q_cos: pick("pe_q_cos", &s.pe_q_cos)?,
            q_sin: pick("pe_q_sin", &s.pe_q_sin)?,
            k_cos: pick("pe_k_cos", &s.pe_k_cos)?,
            k_sin: pick("pe_k_sin", &s.pe_k_sin)?,
        })
    }

    fn rope(&self) -> [String; 4] {
        [self.q_cos.clone(), self.q_sin.clone(), self.k_cos.clone(), self.k_sin.clone()]
    }
}

struct Group {
    name: String,
    model: Box<dyn ConfiguredModel>,
    names: InputNames,
    /// Whether the group has cache layers: genai calls `update_cache_offset` before every run
    /// and `init_cache` per conversation, which a cache-less group has nothing for.
    cached: bool,
    /// Per output (in `outputs()` order): whether it is an exposed tap rather than a part of
    /// the logits ([`LlmDriver::set_taps`]; by default, the naming convention of
    /// [`crate::tap::Tap::of_output`]).
    taps: Vec<bool>,
}

/// What one frame returned beyond the logits: every exposed output as float32 (HailoRT
/// dequantized it, genai configures every output FLOAT32), with what selects the capture's part
/// of it ([`super::exposed::for_capture`]).
#[derive(Debug, Clone)]
pub struct Exposed {
    /// (output name, its shape, its values) in output order.
    pub outputs: Vec<(String, crate::hef::Shape3, Vec<f32>)>,
    /// Rows of the frame that carry this step's tokens (its last ones).
    pub real_rows: usize,
    /// The mask's columns that are on for the frame's last row, in column order: the key slots
    /// of the positions seen so far.
    pub cols: Vec<usize>,
}

/// One frame as sent, for the record (`--record-frames`).
#[derive(Debug, Clone)]
pub struct SentFrame {
    pub group: String,
    pub cache_offset_delta: i32,
    pub frames: Frames,
}

/// A base-scope group's conversation: re-run whole in one fixed frame at every step.
struct BaseScope {
    /// Rows of the frame (the group's embeddings input rows).
    frame: usize,
    /// A zero embedding quantized with the embeddings input's quant info: the padding rows.
    pad: u16,
    /// The conversation so far, as embeddings rows.
    rows: Vec<Vec<u16>>,
}

pub struct LlmDriver {
    /// The group every prompt goes through: genai's prefill group, or a base-scope group.
    prefill: Group,
    tbt: Option<Group>,
    base: Option<BaseScope>,
    pub config: LlmConfig,
    pre: PreProcess,
    embeddings: std::sync::Arc<[u16]>,
    vocab_rows: usize,
    pub record: Option<Vec<SentFrame>>,
    pub device: String,
    /// Whether this conversation has said its context is full (genai's client warns once).
    context_full: bool,
    /// The exposed outputs of every frame sent since [`LlmDriver::take_exposed`].
    exposed: Vec<Exposed>,
    /// For a graph that starts past block 0 (a suffix HEF): the hidden state entering its first
    /// block at each position of the conversation, fed where genai feeds embeddings rows.
    pub feed: Option<Vec<Vec<f32>>>,
}

impl LlmDriver {
    /// The quant infos of the HEF's edges as the runtime applies them (the prefill group's:
    /// embeddings, RoPE, every cache layer, the logits outputs column by column), for the
    /// emulation of what the HEF computes when nothing is wrong ([`crate::fault::expected`]).
    /// A stream that lists one quant info per feature gives each column its own.
    pub fn edge_quant(&self, hef: &Hef) -> Result<crate::fault::expected::EdgeQuant> {
        let g = &self.prefill;
        let first = |name: &str| -> Result<QuantInfo> {
            Ok(input(g, name)?.quant_infos.first().copied().unwrap_or(QuantInfo::INVALID))
        };
        let group =
            hef.group(&g.name).ok_or_else(|| Error::Device(format!("no network group `{}`", g.name)))?;
        let cache_of = |id: usize| group.caches.iter().find(|c| c.cache_id as usize == id).map(|c| c.quant);
        let mut cache = Vec::new();
        while let (Some(k), Some(v)) = (cache_of(2 * cache.len()), cache_of(2 * cache.len() + 1)) {
            cache.push((k, v));
        }
        let mut logits = Vec::new();
        for (o, _) in g.model.outputs().iter().zip(&g.taps).filter(|(_, &tap)| !tap) {
            let w = o.shape.features as usize;
            match o.quant_infos.as_slice() {
                q if q.len() == w => logits.extend_from_slice(q),
                q => logits.extend(std::iter::repeat_n(q.first().copied().unwrap_or(QuantInfo::INVALID), w)),
            }
        }
        Ok(crate::fault::expected::EdgeQuant {
            embeddings: first(&g.names.embeddings)?,
            rope: first(&g.names.q_cos)?,
            cache,
            logits,
            exposed: Vec::new(),
        })
    }

    /// Rows of one prefill frame (a base-scope group's whole frame).
    pub fn prefill_tokens(&self) -> usize {
        self.base.as_ref().map_or(self.pre.p, |b| b.frame)
    }

    /// For a base-scope group: the positions its one frame holds (prompt and every step).
    pub fn base_scope_frame(&self) -> Option<usize> {
        self.base.as_ref().map(|b| b.frame)
    }

    /// The shape of what the HEF computes, as its inputs and hailo-config.json give it.
    pub fn geometry(&self) -> super::exposed::Geometry {
        let pp = &self.config.pre_process_params;
        super::exposed::Geometry {
            hidden: self.pre.features,
            heads: pp.num_attention_heads as usize,
            kv_heads: pp.num_key_value_heads as usize,
            head_dim: self.pre.theta.len(),
            slots: self.pre.kv,
        }
    }

    /// The widths of the logits outputs of the group every prompt goes through, in output
    /// order: one per lm_head shard.
    pub fn logits_widths(&self) -> Vec<usize> {
        let g = &self.prefill;
        g.model
            .outputs()
            .iter()
            .zip(&g.taps)
            .filter(|(_, &tap)| !tap)
            .map(|(o, _)| o.shape.features as usize)
            .collect()
    }

    /// Rows of the embeddings table: the vocabulary the device's logits cover.
    pub fn vocab_rows(&self) -> usize {
        self.vocab_rows
    }

    /// Keys a row may see: kv_cache_size, or a base-scope group's frame.
    pub fn kv_cache_size(&self) -> usize {
        self.base.as_ref().map_or(self.pre.kv, |b| b.frame)
    }

    pub fn has_tbt(&self) -> bool {
        self.tbt.is_some()
    }

    /// `reset_cnversation_context`: counters to 0, then init_cache(0) on the prefill model (a
    /// base-scope group has no cache: its conversation is only forgotten).
    pub fn new_conversation(&mut self) -> Result<()> {
        self.pre.reset();
        self.context_full = false;
        if let Some(b) = self.base.as_mut() {
            b.rows.clear();
            return Ok(());
        }
        self.prefill.model.init_cache(0)
    }

    fn rows(&self, tokens: &[u32]) -> Result<Vec<Vec<u16>>> {
        let f = self.pre.features;
        if let Some(feed) = &self.feed {
            // A suffix graph: the hidden state of each position, quantized with the first input's
            // quant info as HailoRT quantizes a float input (clip, round half to even).
            let q = input(&self.prefill, &self.prefill.names.embeddings)?.quant_infos.first().copied();
            let q = q.unwrap_or(QuantInfo::INVALID);
            let at = self.pre.usage;
            return (at..at + tokens.len())
                .map(|p| {
                    let row = feed.get(p).filter(|r| r.len() == f).ok_or_else(|| {
                        Error::usage(format!(
                            "the suffix HEF needs the reference's hidden state of position {p} ({f} values); the \
                             feed holds {} positions",
                            feed.len()
                        ))
                    })?;
                    Ok(row.iter().map(|&x| q.quantize(x).clamp(0.0, 65535.0) as u16).collect())
                })
                .collect();
        }
        tokens
            .iter()
            .map(|&t| {
                let t = t as usize;
                if t >= self.vocab_rows {
                    return Err(Error::usage(format!(
                        "token id {t} has no row in embeddings.bin ({} rows)",
                        self.vocab_rows
                    )));
                }
                Ok(self.embeddings[t * f..(t + 1) * f].to_vec())
            })
            .collect()
    }

    /// The first request of a generation, as genai routes it (llm_server.cpp v5.2.0):
    /// - `generate_next_token_on_demand` (~857-868): a 1-token request goes to the tbt group
    ///   when the HEF has one, even as a first prompt (and then is never split);
    /// - `handle_prefill_phase` (~896-936): on the first prefill of a generation whose tokens
    ///   contain `begin_of_reasoning_token_id`, the part before its first occurrence and the
    ///   part after it are prefilled separately, each remainder-first
    ///   (`get_next_token_prefill` ~782-805), and the token itself is never sent;
    /// - otherwise the whole prompt in chunks, remainder first.
    ///
    /// Returns the logits of every frame sent, in order. genai reads its output buffer even
    /// when a part sends no frame (reasoning token at the end: the logits are the part
    /// before's); a prompt that sends nothing at all is refused here.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        if tokens.is_empty() {
            return Err(Error::usage("an empty prompt: genai asserts a request has at least one token"));
        }
        if self.base.is_some() {
            return Ok(vec![self.base_scope_run(tokens)?]);
        }
        if tokens.len() == 1 && self.tbt.is_some() {
            return Ok(vec![self.step(tokens[0])?]);
        }
        let parts: Vec<&[u32]> = match self.reasoning_split(tokens) {
            Some(at) => vec![&tokens[..at], &tokens[at + 1..]],
            None => vec![tokens],
        };
        let sent: usize = parts.iter().map(|p| p.len()).sum();
        if sent == 0 {
            return Err(Error::usage(format!(
                "the prompt is only begin_of_reasoning_token_id ({}) and the HEF has no tbt group: genai \
                 drops that token and sends no frame, so there are no logits to read",
                self.config.begin_of_reasoning_token_id
            )));
        }
        let logits = parts.into_iter().map(|part| self.prefill_chunks(part)).collect::<Result<Vec<_>>>()?;
        Ok(logits.into_iter().flatten().collect())
    }

    /// Where genai splits a first prompt: the first occurrence of
    /// `begin_of_reasoning_token_id` (`std::find`), when the HEF names one.
    pub fn reasoning_split(&self, tokens: &[u32]) -> Option<usize> {
        let id = self.config.begin_of_reasoning_token_id;
        if id == crate::hef::llm_config::INVALID_TOKEN || id < 0 {
            return None;
        }
        tokens.iter().position(|&t| t as i64 == id as i64)
    }

    /// Tokens seen in this conversation (genai's `m_cache_usage_size`: it keeps counting past
    /// kv_cache_size).
    pub fn usage(&self) -> usize {
        self.pre.usage
    }

    /// Whether the conversation has reached kv_cache_size (and said so).
    pub fn context_full(&self) -> bool {
        self.context_full
    }

    /// Past a full cache genai neither refuses nor stops (HailoRT v5.2.0): the server flags each
    /// reply `is_context_full` once `cache_usage_size >= kv_cache_size`
    /// (hailort_server/genai/llm/llm_server.cpp:616-618) and the client logs a warning the
    /// first time only (libhailort/src/genai/llm/llm.cpp:769-772). Nothing else changes: a
    /// prefill chunk that crosses kv_cache_size is sent like any other (get_next_token_prefill,
    /// llm_server.cpp:764-807, checks no size), the mask caps usage at kv_cache_size
    /// (pre_process.cpp:133-137), positions keep rising (pre_process.cpp:176-186) and
    /// `update_cache_offset` wraps the read offset modulo the ring
    /// (libhailort/src/core_op/resource_manager/cache_manager.cpp:145-162), so each new entry
    /// overwrites the oldest. Said once per conversation here too, on stderr.
    fn note_context_full(&mut self) {
        if !self.context_full && self.pre.usage >= self.pre.kv {
            self.context_full = true;
            crate::errln!(
                "warning: conversation context is full ({} tokens, kv_cache_size {}): like genai, generation \
                 goes on and the device's cache ring overwrites its oldest entries",
                self.pre.usage, self.pre.kv
            );
        }
    }

    /// `get_next_token_prefill`: `tokens` in chunks of at most p rows, remainder first.
    fn prefill_chunks(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::new();
        let mut start = 0;
        for n in chunks(tokens.len(), self.pre.p) {
            let rows = self.rows(&tokens[start..start + n])?;
            start += n;
            let frames = self.pre.prefill(&rows);
            let (logits, exposed) =
                send(&mut self.prefill, frames, n, (self.pre.mask_on, self.pre.kv), &mut self.record)?;
            out.push(logits);
            self.exposed.extend(exposed);
            self.note_context_full();
        }
        Ok(out)
    }

    /// A base-scope group's step: the conversation so far and `tokens` right-aligned in its
    /// one frame ([`PreProcess::base_scope`]), the logits of its last row.
    fn base_scope_run(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let rows = self.rows(tokens)?;
        let group = self.prefill.name.clone();
        let b = self.base.as_mut().expect("a base-scope driver");
        if b.rows.len() + rows.len() > b.frame {
            return Err(Error::usage(format!(
                "base-scope group `{group}` holds {} positions in its one frame; the conversation needs {} (its \
                 {} so far and {} more): shorten the prompt or decode fewer steps",
                b.frame,
                b.rows.len() + rows.len(),
                b.rows.len(),
                rows.len()
            )));
        }
        self.pre.usage += rows.len();
        b.rows.extend(rows);
        let frames = self.pre.base_scope(&b.rows, b.frame, b.pad);
        let n = tokens.len();
        let (logits, exposed) =
            send(&mut self.prefill, frames, n, (self.pre.mask_on, b.frame), &mut self.record)?;
        self.exposed.extend(exposed);
        Ok(logits)
    }

    /// One tbt step whose mask hides the whole cache (the token attends to itself only), for
    /// the cache-free control ([`PreProcess::tbt_self`]): no cache read, and no cache write
    /// from the host, so it runs within Hailo-10H's RPC limits.
    pub fn step_self(&mut self, token: u32) -> Result<Vec<f32>> {
        let rows = self.rows(&[token])?;
        let on = (self.pre.mask_on, self.pre.kv);
        let Some(g) = self.tbt.as_mut() else {
            return Err(Error::usage(format!(
                "the cache-free control runs a tbt step: group `{}` has no tbt partner",
                self.prefill.name
            )));
        };
        let frames = self.pre.tbt_self(rows.into_iter().next().expect("one row"));
        let (logits, exposed) = send(g, frames, 1, on, &mut self.record)?;
        self.exposed.extend(exposed);
        Ok(logits)
    }

    /// One token: tbt when the HEF has it, else prefill (base scope), as
    /// `generate_next_token_on_demand` routes single tokens; a base-scope group re-runs the
    /// whole conversation.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        if self.base.is_some() {
            return self.base_scope_run(&[token]);
        }
        let rows = self.rows(&[token])?;
        let on = (self.pre.mask_on, self.pre.kv);
        let (logits, exposed) = match self.tbt.as_mut() {
            Some(g) => {
                let frames = self.pre.tbt(rows.into_iter().next().expect("one row"));
                send(g, frames, 1, on, &mut self.record)
            }
            None => {
                let frames = self.pre.prefill(&rows);
                send(&mut self.prefill, frames, 1, on, &mut self.record)
            }
        }?;
        self.exposed.extend(exposed);
        self.note_context_full();
        Ok(logits)
    }

    /// Cache buffers of the prefill group's model (the rings are shared with tbt).
    pub fn cache_buffers(&mut self) -> Result<BTreeMap<u32, Vec<u8>>> {
        self.prefill.model.cache_buffers()
    }

    pub fn update_cache_buffer(&mut self, id: u32, bytes: &[u8]) -> Result<()> {
        self.prefill.model.update_cache_buffer(id, bytes)
    }

    pub fn prefill_group(&self) -> &str {
        &self.prefill.name
    }

    /// Every output of both groups: (group, name, shape, whether it is taken as an exposed tap).
    pub fn outputs(&self) -> Vec<(String, StreamInfo, bool)> {
        let groups = std::iter::once(&self.prefill).chain(self.tbt.as_ref());
        groups
            .flat_map(|g| g.model.outputs().iter().zip(&g.taps).map(|(o, &t)| (g.name.clone(), o.clone(), t)))
            .collect()
    }

    /// Take exactly the outputs named in `names` as exposed taps (an output map's), every other
    /// as a part of the logits.
    pub fn set_taps(&mut self, names: &std::collections::BTreeSet<String>) {
        for g in std::iter::once(&mut self.prefill).chain(self.tbt.as_mut()) {
            g.taps = g.model.outputs().iter().map(|o| names.contains(&o.name)).collect();
        }
    }

    /// The exposed outputs of the frames sent since the last call, one per frame (none when
    /// the HEF exposes nothing).
    pub fn take_exposed(&mut self) -> Vec<Exposed> {
        std::mem::take(&mut self.exposed)
    }
}

fn input<'a>(g: &'a Group, name: &str) -> Result<&'a StreamInfo> {
    g.model.inputs().iter().find(|s| s.name == name).ok_or_else(|| {
        Error::Device(format!("network group `{}` lists no input `{name}` after configure", g.name))
    })
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// update_cache_offset(+rows), then run; the float32 logits outputs concatenated in outputs
/// order (llm_inference_manager.cpp generate: output i at byte offset i × frame size), and the
/// exposed ones apart, when the HEF has any.
fn send(
    g: &mut Group,
    frames: Frames,
    rows: usize,
    (mask_on, kv): (u8, usize),
    record: &mut Option<Vec<SentFrame>>,
) -> Result<(Vec<f32>, Option<Exposed>)> {
    let delta = rows as i32;
    let n = &g.names;
    let inputs = vec![
        (n.embeddings.clone(), frames.embeddings.iter().flat_map(|x| x.to_le_bytes()).collect()),
        (n.mask.clone(), frames.mask.clone()),
        (n.q_cos.clone(), f32_bytes(&frames.q_cos)),
        (n.q_sin.clone(), f32_bytes(&frames.q_sin)),
        (n.k_cos.clone(), f32_bytes(&frames.k_cos)),
        (n.k_sin.clone(), f32_bytes(&frames.k_sin)),
    ];
    for (name, bytes) in &inputs {
        let s = input(g, name)?;
        if s.frame_size() != bytes.len() {
            return Err(Error::Device(format!(
                "`{name}`: frame of {} bytes, the HEF expects {}",
                bytes.len(),
                s.frame_size()
            )));
        }
    }
    if g.cached {
        g.model.update_cache_offset(delta)?;
    }
    let outputs = g.model.run(&inputs, INFERENCE_TIMEOUT)?;
    let mut logits = Vec::new();
    let mut exposed = Vec::new();
    for ((o, bytes), &tap) in g.model.outputs().iter().zip(&outputs).zip(&g.taps) {
        if o.format != FormatType::Float32 || bytes.len() != o.frame_size() {
            return Err(Error::Device(format!(
                "output `{}` returned {} bytes as {:?}; expected {} float32 bytes",
                o.name,
                bytes.len(),
                o.format,
                o.frame_size()
            )));
        }
        let values = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        if tap {
            exposed.push((o.name.clone(), o.shape, values.collect()));
        } else {
            logits.extend(values);
        }
    }
    let exposed = (!exposed.is_empty()).then(|| {
        // Head block 0 of the last row: the columns genai turned on (pre_process.cpp:133-174).
        let width = frames.mask.len() / frames.rows.max(1);
        let last = &frames.mask[(frames.rows - 1) * width..][..kv.min(width)];
        let cols = (0..last.len()).filter(|&c| last[c] == mask_on).collect();
        Exposed { outputs: exposed, real_rows: rows, cols }
    });
    if let Some(r) = record.as_mut() {
        let cache_offset_delta = if g.cached { delta } else { 0 };
        r.push(SentFrame { group: g.name.clone(), cache_offset_delta, frames });
    }
    Ok((logits, exposed))
}

/// Write recorded frames as `.npz` (one array per frame and input).
pub fn write_frames(frames: &[SentFrame], path: &std::path::Path) -> Result<()> {
    use ndarray::Array1;
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = ndarray_npy::NpzWriter::new(file);
    let err = |e: ndarray_npy::WriteNpzError| Error::input(path.display().to_string(), e.to_string());
    for (i, f) in frames.iter().enumerate() {
        let p = format!("{i:04}.{}", f.group.rsplit("__").next().unwrap_or("frame"));
        w.add_array(format!("{p}/embeddings"), &Array1::from(f.frames.embeddings.clone())).map_err(err)?;
        w.add_array(format!("{p}/mask"), &Array1::from(f.frames.mask.clone())).map_err(err)?;
        w.add_array(format!("{p}/q_cos"), &Array1::from(f.frames.q_cos.clone())).map_err(err)?;
        w.add_array(format!("{p}/q_sin"), &Array1::from(f.frames.q_sin.clone())).map_err(err)?;
        w.add_array(format!("{p}/k_cos"), &Array1::from(f.frames.k_cos.clone())).map_err(err)?;
        w.add_array(format!("{p}/k_sin"), &Array1::from(f.frames.k_sin.clone())).map_err(err)?;
        w.add_array(format!("{p}/positions"), &Array1::from(f.frames.positions.clone())).map_err(err)?;
        w.add_array(format!("{p}/cache_offset_delta"), &Array1::from(vec![f.cache_offset_delta]))
            .map_err(err)?;
    }
    w.finish().map_err(err)?;
    Ok(())
}
