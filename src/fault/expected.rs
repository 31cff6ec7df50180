//! The quantization a compiled target computes with, emulated: what "clean" means for a HEF.
//!
//! A HEF is never unquantized. Its edges carry quant infos the runtime applies exactly: the
//! embeddings rows are uint16 in the embeddings input's quant info, the float32 RoPE tables
//! are quantized by the runtime with the RoPE inputs' (quantization.hpp, `quantize_input`), the
//! KV cache holds each layer's keys and values in its cache layer's (cache_manager.cpp), and
//! the float32 logits come back through the outputs' (`dequantize_output`). Inside the graph
//! the activations are quantized by the compiler; a HEF states that only through what it was
//! compiled with, so it is given: a simulated HEF records it, a compiled one is declared (or
//! left out, and the emulation is of its edges alone).
//!
//! [`Expected`] is that quantization as one fault, composed after every other fault as the
//! device applies it: the activation part is the `quant` fault (its `inputs` off: the edges do
//! that here), calibrated once on the target's calibration set and then frozen, so every
//! emulation of the target (clean, or with each fault `explain` ranks) quantizes alike.
//!
//! [`Realization`] is the same quantization with a relative 1e-6 jitter after every edited
//! site: a second draw of the noise, as the device's float order is (docs/METRICS.md,
//! "Judging on the excess"). How far the two draws fall apart is the spread a target's own
//! draw may show beside the expected one.

use super::quant::{map_values, QuantFault};
use super::spec::FaultSpec;
use super::{Fault, Parsed};
use crate::error::Result;
use crate::hef::QuantInfo;
use crate::inputs::InputSet;
use crate::model::hooks::{Hooks, Qk, StepCtx};
use crate::model::rope::{rotate, Rope, RopeLayout};
use crate::model::{Checkpoint, Decoder};
use crate::tap::{Phase, Tap};
use candle_core::Tensor;
use std::sync::Arc;

/// The quant infos of a target's edges, as its HEF states them.
#[derive(Debug, Clone)]
pub struct EdgeQuant {
    pub embeddings: QuantInfo,
    /// The RoPE inputs' (all four share one in the HEFs genai runs).
    pub rope: QuantInfo,
    /// Per layer: the keys' and the values' cache layers.
    pub cache: Vec<(QuantInfo, QuantInfo)>,
    /// Per logits column, in the order genai concatenates the outputs.
    pub logits: Vec<QuantInfo>,
    /// The exposed outputs (taps measured on the device): what the host sees of each.
    pub exposed: Vec<(Tap, ExposedQuant)>,
}

/// An exposed output's quantization: the host sees the tap through it, the graph goes on with
/// the value ([`Hooks::observe`]).
#[derive(Debug, Clone)]
pub struct ExposedQuant {
    pub layout: crate::tap::Layout,
    /// Key slots of an attention tap's rows (the ring's).
    pub slots: usize,
    /// One per feature of a wire row, or one for all.
    pub infos: Vec<QuantInfo>,
    /// The largest code of the output's type (65535 for uint16): the hardware saturates there.
    pub qmax: f32,
}

impl ExposedQuant {
    /// `t` in its capture layout as the host reads it: each value through the quant info of
    /// its wire feature (an attention tap's column j of S keys sits in slot slots − S + j, the
    /// mask's layout), its code saturated to the type.
    pub fn seen(&self, t: &Tensor) -> Result<Tensor> {
        use crate::tap::Layout;
        let dims = t.dims().to_vec();
        let inner = *dims.last().unwrap_or(&1);
        let per_row = match self.layout {
            Layout::Rows => inner,
            Layout::Heads(_) | Layout::Keys(_) => dims.get(1).copied().unwrap_or(1) * inner,
        };
        let feature = |i: usize| -> usize {
            match self.layout {
                Layout::Rows => i % inner,
                Layout::Heads(_) => (i / per_row) * inner + i % inner,
                Layout::Keys(_) => {
                    let j = i % inner;
                    (i / per_row) * self.slots + (self.slots + j).saturating_sub(inner).min(self.slots - 1)
                }
            }
        };
        let n = self.infos.len();
        let qmax = self.qmax;
        map_values(t, |i, x| {
            if !x.is_finite() {
                return x;
            }
            self.infos[if n == 1 { 0 } else { feature(i) % n }].seen(x, qmax)
        })
    }
}

/// A target's quantization: its edges, and its activations when known.
pub struct Expected {
    spec: FaultSpec,
    /// What it is, in a sentence for the report.
    pub description: String,
    acts: Option<Parsed<QuantFault>>,
    edges: EdgeQuant,
}

impl Expected {
    /// The target's quantization: `edges`, and `acts` (a `quant:...` spec, e.g. `quant:a16`)
    /// calibrated on `calibration` (described by `calibrated_on`) with `ckpt`'s weights.
    pub fn new(
        edges: EdgeQuant,
        acts: Option<&FaultSpec>,
        (calibration, calibrated_on): (&[InputSet], &str),
        ckpt: &Checkpoint,
    ) -> Result<Self> {
        let acts = match acts {
            None => None,
            Some(a) => {
                let q =
                    super::catalog::parse_as::<QuantFault>(&a.with_param("inputs", "none"), &ckpt.config)?;
                let mut model = Decoder::new(ckpt)?;
                q.transform_weights(&mut model)?;
                q.prepare(&model, calibration)?;
                Some(q)
            }
        };
        let description = match &acts {
            Some(q) => format!(
                "{} (activations calibrated on {calibrated_on}) with the HEF's input, cache and output quant infos",
                q.spec().text.trim_end_matches(",inputs=none")
            ),
            None => "the HEF's input, cache and output quant infos (no activation quantization declared)".to_string(),
        };
        let spec = FaultSpec::parse("expected-quantization")?;
        Ok(Expected { spec, description, acts, edges })
    }
}

/// Quantize and dequantize every value of `t` with `q` (its clip first, as the runtime does).
fn through(t: &Tensor, q: impl Fn(usize) -> QuantInfo) -> Result<Tensor> {
    map_values(t, |i, x| if x.is_finite() { q(i).dequantize(q(i).quantize(x)) } else { x })
}

impl Fault for Arc<Expected> {
    fn spec(&self) -> &FaultSpec {
        &self.spec
    }
    fn transform_weights(&self, model: &mut Decoder) -> Result<()> {
        self.acts.as_ref().map_or(Ok(()), |q| q.transform_weights(model))
    }
    // `prepare` is the trait's no-op: calibrated once, when made, the target's quantization
    // does not follow the inputs (nor do `Activations` and `Realization`, made from it).
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(ExpectedHooks { e: self, acts: self.acts.as_ref().map(|q| q.hooks()), jitter: None })
    }
    fn notes(&self) -> Vec<String> {
        self.acts.as_ref().map_or_else(Vec::new, |q| q.notes())
    }
}

/// A second draw of an [`Expected`] quantization's noise: every edited site but the logits
/// moves by a relative jitter of at most [`JITTER`] after it is quantized, from a fixed seed.
pub struct Realization(pub Arc<Expected>);

/// An [`Expected`] quantization's activation part alone, frozen: what a simulated device
/// composes with a candidate fault when it emulates the target (its own quant infos already
/// quantize the edges: the embeddings rows, the RoPE tables it is fed, the cache, the outputs).
pub struct Activations(pub Arc<Expected>);

impl Fault for Activations {
    fn spec(&self) -> &FaultSpec {
        &self.0.spec
    }
    fn transform_weights(&self, model: &mut Decoder) -> Result<()> {
        self.0.transform_weights(model)
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        match &self.0.acts {
            Some(q) => q.hooks(),
            None => Box::new(crate::model::hooks::NoHooks),
        }
    }
    fn notes(&self) -> Vec<String> {
        self.0.notes()
    }
}

/// The jitter of a [`Realization`]: ten times f32's epsilon, the size of the float-order
/// differences between a 96-row frame and a T-row pass (measured: 1e-7..1e-6 relative).
pub const JITTER: f32 = 1e-6;

impl Fault for Realization {
    fn spec(&self) -> &FaultSpec {
        &self.0.spec
    }
    fn transform_weights(&self, model: &mut Decoder) -> Result<()> {
        self.0.transform_weights(model)
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        let e: &Expected = &self.0;
        Box::new(ExpectedHooks {
            e,
            acts: e.acts.as_ref().map(|q| q.hooks()),
            jitter: Some(0x9e37_79b9_7f4a_7c15),
        })
    }
    fn notes(&self) -> Vec<String> {
        self.0.notes()
    }
}

/// splitmix64's increment (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", 2014).
pub const SPLITMIX_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64's output for the state `x` (advanced by [`SPLITMIX_GAMMA`] first): the
/// realization's jitter stream, and explain's fingerprint signs.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(SPLITMIX_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct ExpectedHooks<'a> {
    e: &'a Expected,
    acts: Option<Box<dyn Hooks + 'a>>,
    /// A realization's generator state (splitmix64), none for the expected draw itself.
    jitter: Option<u64>,
}

impl ExpectedHooks<'_> {
    fn jittered(&mut self, t: Tensor) -> Result<Tensor> {
        let Some(state) = self.jitter.as_mut() else { return Ok(t) };
        map_values(&t, |_, x| {
            let z = splitmix64(*state);
            *state = state.wrapping_add(SPLITMIX_GAMMA);
            let u = (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            x * (1.0 + JITTER * u)
        })
    }
}

impl Hooks for ExpectedHooks<'_> {
    fn observe(&mut self, _ctx: &StepCtx, tap: Tap, t: &Tensor) -> Result<Option<Tensor>> {
        match self.e.edges.exposed.iter().find(|(x, _)| *x == tap) {
            Some((_, q)) => q.seen(t).map(Some),
            None => Ok(None),
        }
    }

    fn edit(&mut self, ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        let e: &Expected = self.e;
        let edges = &e.edges;
        let t = if tap == Tap::Embed { through(&t, |_| edges.embeddings)? } else { t };
        let t = match self.acts.as_mut() {
            Some(a) => a.edit(ctx, tap, t)?,
            None => t,
        };
        // Per column of the logits; a graph whose output is not vocab-wide (a missing lm_head)
        // is not the one these quant infos describe.
        let n = edges.logits.len();
        match tap {
            Tap::Logits if n > 0 && t.dims().last() == Some(&n) => through(&t, |i| edges.logits[i % n]),
            Tap::Logits => Ok(t),
            _ => self.jittered(t),
        }
    }

    fn rope(
        &mut self,
        ctx: &StepCtx,
        _layer: usize,
        _which: Qk,
        x: &Tensor,
        rope: &Rope,
    ) -> Result<Option<Tensor>> {
        let (cos, sin) = rope.tables(&ctx.positions)?;
        let q = |_| self.e.edges.rope;
        Ok(Some(rotate(x, &through(&cos, q)?, &through(&sin, q)?, RopeLayout::Half)?))
    }

    fn needs_explicit_attention(&self, layer: usize) -> bool {
        self.acts.as_ref().is_some_and(|a| a.needs_explicit_attention(layer))
    }

    /// A realization's jitter is one stream over every value of a step, so it follows the rows.
    fn rows_apart(&self) -> bool {
        self.jitter.is_none() && self.acts.as_ref().is_none_or(|a| a.rows_apart())
    }

    fn cache_read(
        &mut self,
        ctx: &StepCtx,
        layer: usize,
        k: Tensor,
        v: Tensor,
        written: &[Phase],
    ) -> Result<(Tensor, Tensor)> {
        let (k, v) = match self.acts.as_mut() {
            Some(a) => a.cache_read(ctx, layer, k, v, written)?,
            None => (k, v),
        };
        match self.e.edges.cache.get(layer) {
            Some(&(qk, qv)) => Ok((through(&k, |_| qk)?, through(&v, |_| qv)?)),
            None => Ok((k, v)),
        }
    }
}
