//! The instrumented float32 decoder for llama, mistral, qwen2 and qwen3.
//!
//! One forward step (a prefill, a prefill chunk or a decode step) follows transformers'
//! `LlamaDecoderLayer` / `Qwen3DecoderLayer` op for op, in f32, with attention computed
//! explicitly (scores, softmax, probs) so every intermediate can be tapped. Quirks matched:
//! Qwen3 normalizes q and k per head before RoPE; Qwen2 has q/k/v bias; sliding-window
//! layers let a query see `window` keys including itself; a tied lm_head reuses the
//! embedding matrix.

use crate::capture::TapSink;
use crate::error::{ComputeContext, Error, Result};
use crate::model::config::ModelConfig;
use crate::model::hooks::{Hooks, NormSite, Projection, Qk, StepCtx};
use crate::model::profile::{span, Op};
use crate::model::rope::{rotate, Rope, RopeLayout};
use crate::model::weights::Checkpoint;
use crate::model::{attention, kernels};
use crate::tap::{LayerTap, Phase, Tap};
use crate::timed;
use candle_core::{DType, Device, Tensor};
use std::borrow::Cow;

/// A projection `y = x Wᵀ + b`, W [out, in] in the checkpoint's stored dtype (f32, bf16 or
/// f16: the kernel widens it as it reads), b f32.
#[derive(Debug, Clone)]
pub struct Linear {
    pub w: Tensor,
    pub b: Option<Tensor>,
    /// Weight quantization applied as W is read (`quant:w8`: symmetric per output channel), so
    /// an emulator holds no second copy of the weights.
    pub weight_bits: Option<u32>,
}

impl Linear {
    fn forward_as(&self, x: &Tensor, op: Op) -> candle_core::Result<Tensor> {
        let _s = span(op);
        kernels::linear(x, &self.w, self.b.as_ref(), self.weight_bits)
    }

    fn proj(&self) -> kernels::Proj<'_> {
        kernels::Proj { w: &self.w, b: self.b.as_ref(), weight_bits: self.weight_bits }
    }
}

/// `N` projections of the same input (q, k, v; gate, up): one dispatch in decode
/// ([`kernels::linears`]).
fn forward_all<const N: usize>(x: &Tensor, ls: [&Linear; N]) -> candle_core::Result<[Tensor; N]> {
    let _s = span(Op::Linear);
    let ys = kernels::linears(x, &ls.map(Linear::proj))?;
    ys.try_into().map_err(|_| candle_core::Error::Msg("linears: one output per projection".into()))
}

#[derive(Debug, Clone)]
pub struct Block {
    pub attn_norm: Tensor,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    pub mlp_norm: Tensor,
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
    pub window: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct Decoder {
    pub cfg: ModelConfig,
    /// [vocab, hidden] in the stored dtype; rows are widened as they are looked up.
    pub embed: Tensor,
    pub blocks: Vec<Block>,
    pub norm: Tensor,
    pub lm_head: Linear,
    pub rope: Rope,
}

/// Keys and values of earlier steps. The reference keeps every entry; the simulated device
/// implements the runtime's ring.
pub trait KvStore {
    /// Store this step's keys/values [KV, T, D] for `layer`.
    fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
        positions: &[usize],
        phase: Phase,
    ) -> Result<()>;
    /// Everything `layer` can attend to.
    fn read(&self, layer: usize) -> Result<CacheView>;
}

/// What a layer reads back: keys and values [KV, S, D], each entry's absolute position
/// (None for an empty slot) and the phase that wrote it.
pub struct CacheView {
    pub k: Tensor,
    pub v: Tensor,
    pub positions: Vec<Option<usize>>,
    pub writers: Vec<Phase>,
}

/// The inputs of one step.
#[derive(Debug, Clone)]
pub struct StepInput {
    pub phase: Phase,
    /// [T, hidden]: embedding rows (from token ids, or dequantized from a device frame).
    pub embeds: Tensor,
    pub positions: Vec<usize>,
    /// A device frame's own mask and RoPE tables, used instead of those derived from
    /// positions (the simulated device computes what the HEF is fed).
    pub frame: Option<FrameInputs>,
}

/// What a device frame carries besides the embeddings.
#[derive(Debug, Clone)]
pub struct FrameInputs {
    /// [T][S]: which cache slots each row may attend to (head block 0 of the mask frame).
    pub allowed: Vec<Vec<bool>>,
    /// cos, sin over the whole head: [heads, T, D] for queries and [kv_heads, T, D] for keys.
    pub rope_q: (Tensor, Tensor),
    pub rope_k: (Tensor, Tensor),
    /// The blocks a graph cut from the model runs (a prefix or suffix HEF), first and last:
    /// its input is the hidden state entering the first (the embeddings when it is 0), its
    /// output the last one's `out` when that is not the model's last block. None: every block.
    pub layers: Option<(usize, usize)>,
    /// Leading rows of the frame left out of this step (the rows above are its last ones):
    /// nothing reads them, and a residual resumed for the whole frame is cut to the rest.
    pub skip: usize,
    /// Rows the final norm and lm_head compute, the last ones (None: every row): the graph
    /// outputs the last row only.
    pub head_rows: Option<usize>,
}

/// How a step's q and k are rotated (and, for a frame, masked): a device frame's own tables,
/// or the step's tables from its positions (computed once per step by [`Decoder::step`]).
#[derive(Clone, Copy)]
enum Rotation<'a> {
    Frame(&'a FrameInputs),
    Tables(&'a (Tensor, Tensor)),
}

/// x * cos + rotate_half(x) * sin with full-width per-head tables [heads, T, D].
fn rotate_with_tables(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let d = x.dim(2)?;
    let (x1, x2) = (x.narrow(2, 0, d / 2)?, x.narrow(2, d / 2, d / 2)?);
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], 2)?;
    (x * cos)? + (rotated * sin)?
}

fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let _s = span(Op::Norm);
    kernels::rms_norm(x, w, eps as f32)
}

/// RMSNorm at `site`, as `hooks` compute it when one answers (the width faults), else the kernel.
fn norm_at(
    (hooks, ctx): (&mut dyn Hooks, &StepCtx),
    site: NormSite,
    x: &Tensor,
    w: &Tensor,
    eps: f64,
    what: impl FnOnce() -> String,
) -> Result<Tensor> {
    match hooks.norm(ctx, site, x, w, eps as f32)? {
        Some(h) => Ok(h),
        None => rms_norm(x, w, eps).ctx(what),
    }
}

/// One projection `which` of `layer` (None: lm_head), as `hooks` compute it when one answers.
fn project(
    (hooks, ctx): (&mut dyn Hooks, &StepCtx),
    (layer, which): (Option<usize>, Projection),
    x: &Tensor,
    lin: &Linear,
    op: Op,
    what: impl FnOnce() -> String,
) -> Result<Tensor> {
    match hooks.project(ctx, layer, which, x, &lin.proj())? {
        Some(y) => Ok(y),
        None => lin.forward_as(x, op).ctx(what),
    }
}

impl Decoder {
    pub fn new(ckpt: &Checkpoint) -> Result<Self> {
        let cfg = ckpt.config.clone();
        // Matrices stay in their stored dtype (shared with the checkpoint, no copy); norms and
        // biases, a few vectors, are widened to f32 here (exact).
        let f32 = |t: &Tensor| t.to_dtype(DType::F32);
        let t = |name: &str| -> Result<Tensor> { Ok(f32(ckpt.tensor(name)?)?) };
        let opt = |name: &str| ckpt.tensors.get(name).map(f32).transpose();
        let lin = |name: &str| -> Result<Linear> {
            let w = ckpt.tensor(&format!("{name}.weight"))?.clone();
            Ok(Linear { w, b: opt(&format!("{name}.bias"))?, weight_bits: None })
        };
        let mut blocks = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            let p = format!("model.layers.{l}");
            blocks.push(Block {
                attn_norm: t(&format!("{p}.input_layernorm.weight"))?,
                q: lin(&format!("{p}.self_attn.q_proj"))?,
                k: lin(&format!("{p}.self_attn.k_proj"))?,
                v: lin(&format!("{p}.self_attn.v_proj"))?,
                o: lin(&format!("{p}.self_attn.o_proj"))?,
                q_norm: opt(&format!("{p}.self_attn.q_norm.weight"))?,
                k_norm: opt(&format!("{p}.self_attn.k_norm.weight"))?,
                mlp_norm: t(&format!("{p}.post_attention_layernorm.weight"))?,
                gate: lin(&format!("{p}.mlp.gate_proj"))?,
                up: lin(&format!("{p}.mlp.up_proj"))?,
                down: lin(&format!("{p}.mlp.down_proj"))?,
                window: cfg.sliding_window[l],
            });
        }
        Ok(Decoder {
            embed: ckpt.tensor("model.embed_tokens.weight")?.clone(),
            norm: t("model.norm.weight")?,
            lm_head: Linear { w: ckpt.lm_head()?.clone(), b: None, weight_bits: None },
            rope: Rope::new(&cfg.rope, cfg.head_dim),
            blocks,
            cfg,
        })
    }

    /// This model with every layer's attention limited to the last `window` keys, HF's sliding
    /// window (key j visible from query i when i − j < window, as `allowed_keys` applies it to
    /// Mistral/Qwen2 configs); a layer with a narrower window of its own keeps it. What a
    /// device whose KV cache ring holds `window` entries computes once the ring wraps.
    pub fn windowed(&self, window: usize) -> Decoder {
        let mut model = self.clone();
        for b in &mut model.blocks {
            b.window = Some(b.window.map_or(window, |own| own.min(window)));
        }
        model.cfg.sliding_window = model.blocks.iter().map(|b| b.window).collect();
        model
    }

    /// The logit lens of a residual stream [T, hidden]: its last row through the final norm
    /// and lm_head, as the vocabulary's logits.
    pub fn lens_logits(&self, hidden: &ndarray::ArrayD<f32>) -> Result<Vec<f32>> {
        let rows = hidden.shape()[0];
        let last =
            hidden.index_axis(ndarray::Axis(0), rows - 1).to_owned().insert_axis(ndarray::Axis(0)).into_dyn();
        let h = crate::capture::array_to_tensor(&last)?;
        let normed = kernels::rms_norm(&h, &self.norm, self.cfg.rms_norm_eps as f32)?;
        Ok(self.lm_head.forward_as(&normed, Op::Linear)?.flatten_all()?.to_vec1::<f32>()?)
    }

    /// Every projection and lm_head, for a fault that changes how weights are read.
    pub fn linears_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        self.blocks
            .iter_mut()
            .flat_map(|b| [&mut b.q, &mut b.k, &mut b.v, &mut b.o, &mut b.gate, &mut b.up, &mut b.down])
            .chain(std::iter::once(&mut self.lm_head))
    }

    /// Embedding rows of `tokens` [T, hidden]; a token id past the vocabulary is an error.
    pub fn embed_tokens(&self, tokens: &[u32]) -> Result<Tensor> {
        if let Some(bad) = tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(Error::usage(format!(
                "token id {bad} is out of range: the vocabulary has {} tokens (ids 0..{})",
                self.cfg.vocab_size,
                self.cfg.vocab_size - 1
            )));
        }
        let _s = span(Op::Embed);
        let ids = Tensor::new(tokens, &Device::Cpu)?;
        // Rows of the stored matrix, widened to f32 (exact): only the rows looked up.
        self.embed
            .index_select(&ids, 0)
            .and_then(|e| e.to_dtype(DType::F32))
            .ctx(|| "embedding lookup".into())
    }

    /// `tokens` as one step of `phase`, from position `start` (no device frame).
    pub fn step_input(&self, phase: Phase, tokens: &[u32], start: usize) -> Result<StepInput> {
        let positions = (start..start + tokens.len()).collect();
        Ok(StepInput { phase, embeds: self.embed_tokens(tokens)?, positions, frame: None })
    }

    /// Run one step: every block over this step's rows, reading and extending `cache`.
    /// Returns the logits [T, vocab] (as edited by `hooks`).
    pub fn step(
        &self,
        input: &StepInput,
        cache: &mut dyn KvStore,
        sink: &mut dyn TapSink,
        hooks: &mut dyn Hooks,
    ) -> Result<Tensor> {
        let ctx = StepCtx { phase: input.phase, positions: input.positions.clone() };
        // The RoPE tables depend on the positions only: computed once per step, not per layer
        // and projection (they were 3% of a prefill).
        let tables;
        let rope = match &input.frame {
            Some(f) => Rotation::Frame(f),
            None => {
                let _s = span(Op::Rope);
                tables = self.rope.tables(&ctx.positions)?;
                Rotation::Tables(&tables)
            }
        };
        let (first, last) =
            input.frame.as_ref().and_then(|f| f.layers).unwrap_or((0, self.blocks.len().saturating_sub(1)));
        let (start, mut x) = match hooks.resume(&ctx)? {
            Some((b, x)) => (self.check_resume(b, (first, last))?, frame_rows(x, input)?),
            None if first == 0 => (0, emit(&ctx, Tap::Embed, input.embeds.clone(), hooks, sink)?),
            None => (first, input.embeds.clone()),
        };
        for l in start..=last.min(self.blocks.len().saturating_sub(1)) {
            crate::error::check_interrupt()?;
            x = emit(&ctx, Tap::Layer(l, LayerTap::Input), x, hooks, sink)?;
            x = self.block(l, (&ctx, rope), x, cache, sink, hooks)?;
        }
        if last + 1 < self.blocks.len() {
            return Ok(x);
        }
        let l_end = self.blocks.len();
        x = emit(&ctx, Tap::Layer(l_end, LayerTap::Input), x, hooks, sink)?;
        let rows = x.dim(0)?;
        if let Some(r) = input.frame.as_ref().and_then(|f| f.head_rows).filter(|&r| r < rows) {
            x = x.narrow(0, rows - r, r)?;
        }
        let h = norm_at((&mut *hooks, &ctx), NormSite::Final, &x, &self.norm, self.cfg.rms_norm_eps, || {
            "final norm".into()
        })?;
        let h = emit(&ctx, Tap::FinalNorm, h, hooks, sink)?;
        let logits =
            project((&mut *hooks, &ctx), (None, Projection::LmHead), &h, &self.lm_head, Op::LmHead, || {
                "lm_head".into()
            })?;
        emit(&ctx, Tap::Logits, logits, hooks, sink)
    }

    /// A step may resume at a block it runs, or after the last block of the model.
    fn check_resume(&self, b: usize, (first, last): (usize, usize)) -> Result<usize> {
        let n = self.blocks.len();
        if b >= first && (b <= last || b == n && last + 1 == n) {
            return Ok(b);
        }
        Err(Error::usage(format!(
            "a step cannot resume at block {b}: it runs blocks {first}..={last} of {n}"
        )))
    }

    /// Block `l` over this step's rows: attention, then the MLP, each added to the residual.
    fn block(
        &self,
        l: usize,
        (ctx, rope): (&StepCtx, Rotation),
        x: Tensor,
        cache: &mut dyn KvStore,
        sink: &mut dyn TapSink,
        hooks: &mut dyn Hooks,
    ) -> Result<Tensor> {
        let explicit = hooks.needs_explicit_attention(l)
            || sink.wants(Tap::Layer(l, LayerTap::Scores))
            || sink.wants(Tap::Layer(l, LayerTap::Probs));
        let mut run = LayerRun { l, ctx, sink, hooks };
        let o = self.attention(&mut run, (rope, explicit), &x, cache)?;
        let x = timed!(Op::Elementwise, kernels::add(&x, &o).ctx(in_layer(l, "residual add"))?);
        let m = self.mlp(&mut run, &x)?;
        let x = timed!(Op::Elementwise, kernels::add(&x, &m).ctx(in_layer(l, "residual add"))?);
        run.emit(LayerTap::Out, x)
    }

    /// The attention half of block `run.l`: its norm, q/k/v, the cache, attention and o_proj.
    fn attention(
        &self,
        run: &mut LayerRun,
        (rope, explicit): (Rotation, bool),
        x: &Tensor,
        cache: &mut dyn KvStore,
    ) -> Result<Tensor> {
        let (l, ctx, b) = (run.l, run.ctx, &self.blocks[run.l]);
        let h = run.norm(NormSite::Attn(l), x, &b.attn_norm, self.cfg.rms_norm_eps, "input_layernorm")?;
        let h = run.emit(LayerTap::AttnNorm, h)?;
        let [q, k, v] = self.qkv(run, rope, (&h, x.dim(0)?))?;

        cache.append(l, &k, &v, &ctx.positions, ctx.phase)?;
        let CacheView { k: k_all, v: v_all, positions: key_pos, writers } = cache.read(l)?;
        let (k_all, v_all) = run.hooks.cache_read(ctx, l, k_all, v_all, &writers)?;

        let allowed: Cow<[Vec<bool>]> = match rope {
            Rotation::Frame(f) => Cow::Borrowed(&f.allowed),
            Rotation::Tables(_) => Cow::Owned(allowed_keys(&ctx.positions, &key_pos, b.window)),
        };
        // softmax(q·kᵀ / √D + mask)·v; GQA without copies (query head h reads key head
        // h / n_rep, HF's repeat_kv). Materialized only when a tap or a hook needs it.
        let scale = (1.0 / (self.cfg.head_dim as f64).sqrt()) as f32;
        let attn = if explicit {
            let scores = {
                let _s = span(Op::ScoresSoftmax);
                match run.hooks.mask(ctx, l, &allowed, self.cfg.num_heads)? {
                    Some(m) => attention::scores(&q, &k_all, None, scale).and_then(|s| s.broadcast_add(&m)),
                    None => attention::scores(&q, &k_all, Some(&allowed), scale),
                }
                .ctx(in_layer(l, "scores"))?
            };
            let scores = run.emit(LayerTap::Scores, scores)?;
            let probs = {
                let _s = span(Op::ScoresSoftmax);
                match run.hooks.softmax(ctx, l, &scores)? {
                    Some(p) => p,
                    None => attention::softmax(&scores).ctx(in_layer(l, "softmax"))?,
                }
            };
            let probs = run.emit(LayerTap::Probs, probs)?;
            timed!(Op::ProbsV, attention::probs_v(&probs, &v_all).ctx(in_layer(l, "probs @ v"))?)
        } else {
            let _s = span(Op::FusedAttention);
            attention::fused(&q, &k_all, &v_all, &allowed, scale).ctx(in_layer(l, "attention"))?
        };
        let o = run.project(Projection::O, &attn, &b.o, "o_proj")?;
        run.emit(LayerTap::AttnOut, o)
    }

    /// This step's q, k (normed per head where the model does, rotated) and v, [heads, T, D].
    fn qkv(&self, run: &mut LayerRun, rope: Rotation, (h, t_len): (&Tensor, usize)) -> Result<[Tensor; 3]> {
        let (l, cfg, b) = (run.l, &self.cfg, &self.blocks[run.l]);
        let d = cfg.head_dim;
        // [T, heads*D] -> [heads, T, D]
        let heads = |y: Tensor, n: usize| {
            let _s = span(Op::Layout);
            y.reshape((t_len, n, d))?.transpose(0, 1)?.contiguous()
        };
        let [q, k, v] = if run.hooks.projects(Some(l)) {
            [
                run.project(Projection::Q, h, &b.q, "q/k/v_proj")?,
                run.project(Projection::K, h, &b.k, "q/k/v_proj")?,
                run.project(Projection::V, h, &b.v, "q/k/v_proj")?,
            ]
        } else {
            forward_all(h, [&b.q, &b.k, &b.v]).ctx(in_layer(l, "q/k/v_proj"))?
        };
        let mut q = heads(q, cfg.num_heads).ctx(in_layer(l, "q_proj"))?;
        let mut k = heads(k, cfg.num_kv_heads).ctx(in_layer(l, "k_proj"))?;
        let v = heads(v, cfg.num_kv_heads).ctx(in_layer(l, "v_proj"))?;
        if let (Some(qn), Some(kn)) = (&b.q_norm, &b.k_norm) {
            q = rms_norm(&q, qn, cfg.rms_norm_eps).ctx(in_layer(l, "q_norm"))?;
            k = rms_norm(&k, kn, cfg.rms_norm_eps).ctx(in_layer(l, "k_norm"))?;
        }
        let rope_span = span(Op::Rope);
        let q = self.rotated(run, (Qk::Q, q), rope)?;
        let k = self.rotated(run, (Qk::K, k), rope)?;
        drop(rope_span);
        Ok([run.emit(LayerTap::Q, q)?, run.emit(LayerTap::K, k)?, run.emit(LayerTap::V, v)?])
    }

    /// q or k rotated: as `hooks` rotate it when one answers, else by the frame's or the
    /// step's tables.
    fn rotated(&self, run: &mut LayerRun, (which, x): (Qk, Tensor), rope: Rotation) -> Result<Tensor> {
        Ok(match (run.hooks.rope(run.ctx, run.l, which, &x, &self.rope)?, rope) {
            (Some(y), _) => y,
            (None, Rotation::Frame(f)) => {
                let ((cos, sin), what) =
                    if which == Qk::Q { (&f.rope_q, "rope q") } else { (&f.rope_k, "rope k") };
                rotate_with_tables(&x, cos, sin).ctx(in_layer(run.l, what))?
            }
            (None, Rotation::Tables((cos, sin))) => rotate(&x, cos, sin, RopeLayout::Half)?,
        })
    }

    /// The MLP of block `run.l` on the residual `x`: its norm, gate/up, SiLU and down_proj.
    fn mlp(&self, run: &mut LayerRun, x: &Tensor) -> Result<Tensor> {
        let (l, b) = (run.l, &self.blocks[run.l]);
        let h =
            run.norm(NormSite::Mlp(l), x, &b.mlp_norm, self.cfg.rms_norm_eps, "post_attention_layernorm")?;
        let h = run.emit(LayerTap::MlpNorm, h)?;
        let [gate, up] = if run.hooks.projects(Some(l)) {
            [
                run.project(Projection::Gate, &h, &b.gate, "gate/up_proj")?,
                run.project(Projection::Up, &h, &b.up, "gate/up_proj")?,
            ]
        } else {
            forward_all(&h, [&b.gate, &b.up]).ctx(in_layer(l, "gate/up_proj"))?
        };
        let act = timed!(Op::Elementwise, kernels::silu_mul(&gate, &up).ctx(in_layer(l, "silu"))?);
        let act = run.emit(LayerTap::MlpAct, act)?;
        let m = run.project(Projection::Down, &act, &b.down, "down_proj")?;
        run.emit(LayerTap::MlpOut, m)
    }
}

/// One block's run: which block, the step, and what watches and edits its taps.
struct LayerRun<'r> {
    l: usize,
    ctx: &'r StepCtx,
    sink: &'r mut dyn TapSink,
    hooks: &'r mut dyn Hooks,
}

impl LayerRun<'_> {
    fn emit(&mut self, tap: LayerTap, t: Tensor) -> Result<Tensor> {
        emit(self.ctx, Tap::Layer(self.l, tap), t, &mut *self.hooks, &mut *self.sink)
    }

    /// RMSNorm at `site` of this layer ([`norm_at`]).
    fn norm(
        &mut self,
        site: NormSite,
        x: &Tensor,
        w: &Tensor,
        eps: f64,
        what: &'static str,
    ) -> Result<Tensor> {
        norm_at((&mut *self.hooks, self.ctx), site, x, w, eps, in_layer(self.l, what))
    }

    /// Projection `which` of this layer ([`project`]).
    fn project(&mut self, which: Projection, x: &Tensor, lin: &Linear, what: &'static str) -> Result<Tensor> {
        project(
            (&mut *self.hooks, self.ctx),
            (Some(self.l), which),
            x,
            lin,
            Op::Linear,
            in_layer(self.l, what),
        )
    }
}

/// An error's context in layer `l`.
fn in_layer(l: usize, what: &'static str) -> impl FnOnce() -> String {
    move || format!("layer {l} {what}")
}

/// `t` at `tap` as `hooks` edit it, put to `sink` (as `hooks` see it) when it wants the tap.
fn emit(ctx: &StepCtx, tap: Tap, t: Tensor, hooks: &mut dyn Hooks, sink: &mut dyn TapSink) -> Result<Tensor> {
    let _s = span(Op::Taps);
    let t = hooks.edit(ctx, tap, t)?;
    if sink.wants(tap) {
        let seen = hooks.observe(ctx, tap, &t)?;
        sink.put(ctx.phase, tap, seen.as_ref().unwrap_or(&t))?;
    }
    Ok(t)
}

/// A residual resumed for a whole device frame, cut to the rows this step computes (its last
/// ones: [`FrameInputs::skip`]).
fn frame_rows(x: Tensor, input: &StepInput) -> Result<Tensor> {
    let skip = input.frame.as_ref().map_or(0, |f| f.skip);
    let t = input.embeds.dim(0)?;
    match x.dim(0)? {
        n if n == t => Ok(x),
        n if n == skip + t => Ok(x.narrow(0, skip, t)?),
        n => Err(Error::usage(format!(
            "a step of {t} rows (after {skip} left out) resumed at a residual of {n}"
        ))),
    }
}

/// Which keys each query row may see: causal, and within `window` keys (counting itself) on
/// sliding-window layers; an empty slot (None) never.
fn allowed_keys(positions: &[usize], keys: &[Option<usize>], window: Option<usize>) -> Vec<Vec<bool>> {
    positions
        .iter()
        .map(|&qp| {
            keys.iter()
                .map(|kp| match kp {
                    None => false,
                    Some(kp) => *kp <= qp && window.is_none_or(|w| qp - kp < w),
                })
                .collect()
        })
        .collect()
}

/// Last-position argmax, first maximum on ties (HailoRT's greedy and HF's `argmax`).
pub fn argmax_last_row(logits: &Tensor) -> Result<u32> {
    let rows = logits.dim(0)?;
    let row: Vec<f32> = logits.get(rows - 1)?.to_vec1()?;
    Ok(argmax(&row) as u32)
}

/// Index of the first maximum; NaN never wins.
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] || row[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best
}
