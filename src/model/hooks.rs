//! Points where a run may deviate from the faithful float32 forward pass: fault models,
//! quantization, replace-with-reference overrides, device frames and test perturbations all
//! plug in here, so there is one decoder and every deviation is explicit.

use crate::error::Result;
use crate::model::rope::Rope;
use crate::tap::{Phase, Tap};
use candle_core::Tensor;

/// What the decoder knows about the step being computed.
#[derive(Debug, Clone)]
pub struct StepCtx {
    pub phase: Phase,
    /// Absolute positions of this step's T rows.
    pub positions: Vec<usize>,
}

/// A product over a feature dimension (a projection or lm_head), for faults of how a device
/// computes it ([`Hooks::project`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Projection {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
    LmHead,
}

/// One RMSNorm of the residual stream: a layer's input or post-attention norm, or the final one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormSite {
    Attn(usize),
    Mlp(usize),
    Final,
}

impl NormSite {
    /// The layer of a layer's norm; None for the final norm.
    pub fn layer(self) -> Option<usize> {
        match self {
            NormSite::Attn(l) | NormSite::Mlp(l) => Some(l),
            NormSite::Final => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qk {
    Q,
    K,
}

/// Every method has a faithful default; an implementation overrides what it changes.
/// Methods returning `Option` return `None` for "not mine, use the default".
pub trait Hooks {
    /// Asked once as each step begins (before any block): where the step starts, when the
    /// blocks below a block are known to compute what they computed in an earlier run of the
    /// same inputs — explain starts a candidate that acts from block B on at the clean run's
    /// residual entering B. `Some((b, x))`: the step skips everything before the
    /// `layers.{b}.input` site and goes on from there with `x` [T, hidden] (b = the number of
    /// blocks: after the last one); their taps and cache entries are not made.
    fn resume(&mut self, _ctx: &StepCtx) -> Result<Option<(usize, Tensor)>> {
        Ok(None)
    }

    /// Called with the value just computed at each tap and edit site (see [`crate::tap::LayerTap`]);
    /// the returned tensor is what the model records and uses from there on.
    fn edit(&mut self, _ctx: &StepCtx, _tap: Tap, t: Tensor) -> Result<Tensor> {
        Ok(t)
    }

    /// What a capture records of a tap where it differs from what flows on: a device output's
    /// own quantization (the graph goes on with the value, the host sees it through the output's
    /// quant infos). Called only for taps the sink records, after [`Hooks::edit`].
    fn observe(&mut self, _ctx: &StepCtx, _tap: Tap, _t: &Tensor) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// Rotate queries or keys `x` [heads, T, D] of `layer`.
    fn rope(
        &mut self,
        _ctx: &StepCtx,
        _layer: usize,
        _which: Qk,
        _x: &Tensor,
        _rope: &Rope,
    ) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// The additive attention mask [H, T, S] (or [1, T, S] broadcast to every head), given
    /// `allowed` [T][S] computed from positions (causal and sliding window).
    fn mask(
        &mut self,
        _ctx: &StepCtx,
        _layer: usize,
        _allowed: &[Vec<bool>],
        _heads: usize,
    ) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// Softmax of scores [H, T, S] over S.
    fn softmax(&mut self, _ctx: &StepCtx, _layer: usize, _scores: &Tensor) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// Whether `layer` must compute attention explicitly (scores and probs materialized) for
    /// this hook: true when the hook edits the `scores` or `probs` taps or answers [`Hooks::mask`]
    /// or [`Hooks::softmax`] there. Otherwise the decoder may use its fused kernel, which calls
    /// none of those. The default is the safe answer; a hook that leaves attention alone says
    /// false and lets untapped layers run fused.
    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        true
    }

    /// RMSNorm of the residual stream `x` [T, hidden] with weight `w` at `site` (the width
    /// faults of finding 16 change how its mean is taken).
    fn norm(
        &mut self,
        _ctx: &StepCtx,
        _site: NormSite,
        _x: &Tensor,
        _w: &Tensor,
        _eps: f32,
    ) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// Whether this hook answers [`Hooks::project`] for a projection of `layer` (None: lm_head).
    /// False lets the decoder compute q/k/v and gate/up in one dispatch, without asking.
    fn projects(&self, _layer: Option<usize>) -> bool {
        false
    }

    /// The product `x` [T, in] · `lin`ᵀ of `layer` (None: lm_head), asked when [`Hooks::projects`]
    /// says so (o_proj, down_proj and lm_head are always asked).
    fn project(
        &mut self,
        _ctx: &StepCtx,
        _layer: Option<usize>,
        _which: Projection,
        _x: &Tensor,
        _lin: &crate::model::kernels::Proj,
    ) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// The keys and values [KV, S, D] this step reads back from the cache; `written_in` is
    /// the phase that wrote each of the S entries.
    fn cache_read(
        &mut self,
        _ctx: &StepCtx,
        _layer: usize,
        k: Tensor,
        v: Tensor,
        _written_in: &[Phase],
    ) -> Result<(Tensor, Tensor)> {
        Ok((k, v))
    }

    /// Whether this hook computes each row of a step apart from the others, so that leaving
    /// out rows nothing reads changes no bit of the rows computed (explain's emulation of a
    /// HEF leaves out a prefill frame's padding rows: `device::sim`). False (the safe answer)
    /// for a hook that mixes rows (mask-repeat, first-slot-output), depends on the row count
    /// (a jitter stream, replaced taps) or records whole steps.
    fn rows_apart(&self) -> bool {
        false
    }
}

/// The faithful forward pass.
pub struct NoHooks;
impl Hooks for NoHooks {
    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }
    fn rows_apart(&self) -> bool {
        true
    }
}

/// Several hooks in order: edits and cache reads chain; for the others the first hook that
/// answers wins.
#[derive(Default)]
pub struct HookStack<'a> {
    pub hooks: Vec<&'a mut dyn Hooks>,
}

impl HookStack<'_> {
    /// The first hook's answer to `ask`, asking them in order until one answers.
    fn first(
        &mut self,
        mut ask: impl FnMut(&mut dyn Hooks) -> Result<Option<Tensor>>,
    ) -> Result<Option<Tensor>> {
        self.hooks.iter_mut().find_map(|h| ask(&mut **h).transpose()).transpose()
    }
}

impl Hooks for HookStack<'_> {
    /// Every hook is asked (one that records steps counts them all); the first answer wins.
    fn resume(&mut self, ctx: &StepCtx) -> Result<Option<(usize, Tensor)>> {
        self.hooks.iter_mut().try_fold(None, |first, h| Ok(first.or(h.resume(ctx)?)))
    }
    fn edit(&mut self, ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        self.hooks.iter_mut().try_fold(t, |t, h| h.edit(ctx, tap, t))
    }
    fn observe(&mut self, ctx: &StepCtx, tap: Tap, t: &Tensor) -> Result<Option<Tensor>> {
        let mut seen: Option<Tensor> = None;
        for h in self.hooks.iter_mut() {
            if let Some(o) = h.observe(ctx, tap, seen.as_ref().unwrap_or(t))? {
                seen = Some(o);
            }
        }
        Ok(seen)
    }
    fn rope(
        &mut self,
        ctx: &StepCtx,
        layer: usize,
        which: Qk,
        x: &Tensor,
        rope: &Rope,
    ) -> Result<Option<Tensor>> {
        self.first(|h| h.rope(ctx, layer, which, x, rope))
    }
    fn mask(
        &mut self,
        ctx: &StepCtx,
        layer: usize,
        allowed: &[Vec<bool>],
        heads: usize,
    ) -> Result<Option<Tensor>> {
        self.first(|h| h.mask(ctx, layer, allowed, heads))
    }
    fn softmax(&mut self, ctx: &StepCtx, layer: usize, scores: &Tensor) -> Result<Option<Tensor>> {
        self.first(|h| h.softmax(ctx, layer, scores))
    }
    fn needs_explicit_attention(&self, layer: usize) -> bool {
        self.hooks.iter().any(|h| h.needs_explicit_attention(layer))
    }
    fn rows_apart(&self) -> bool {
        self.hooks.iter().all(|h| h.rows_apart())
    }
    fn norm(
        &mut self,
        ctx: &StepCtx,
        site: NormSite,
        x: &Tensor,
        w: &Tensor,
        eps: f32,
    ) -> Result<Option<Tensor>> {
        self.first(|h| h.norm(ctx, site, x, w, eps))
    }
    fn projects(&self, layer: Option<usize>) -> bool {
        self.hooks.iter().any(|h| h.projects(layer))
    }
    fn project(
        &mut self,
        ctx: &StepCtx,
        layer: Option<usize>,
        which: Projection,
        x: &Tensor,
        lin: &crate::model::kernels::Proj,
    ) -> Result<Option<Tensor>> {
        self.first(|h| h.project(ctx, layer, which, x, lin))
    }
    fn cache_read(
        &mut self,
        ctx: &StepCtx,
        layer: usize,
        k: Tensor,
        v: Tensor,
        written_in: &[Phase],
    ) -> Result<(Tensor, Tensor)> {
        self.hooks.iter_mut().try_fold((k, v), |(k, v), h| h.cache_read(ctx, layer, k, v, written_in))
    }
}
