//! Replace-with-reference overrides (tract's non-cumulative compare): before each block, the
//! residual stream is replaced by the reference's value at that point, so a block's error is
//! its own and not inherited.

use crate::capture::{array_to_tensor, Store};
use crate::error::{Error, Result};
use crate::model::hooks::{Hooks, StepCtx};
use crate::tap::{Key, LayerTap, Tap};
use candle_core::Tensor;

pub struct Overrides<'a> {
    pub reference: &'a dyn Store,
}

impl Overrides<'_> {
    /// The reference taps the local view needs.
    pub fn required_taps(layers: usize) -> Vec<String> {
        let mut v = vec!["embed".to_string()];
        v.extend((0..layers).map(|l| format!("layers.{l}.out")));
        v
    }
}

impl Hooks for Overrides<'_> {
    /// Overrides replace block inputs only; attention is left to the decoder.
    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    fn edit(&mut self, ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        let Tap::Layer(l, LayerTap::Input) = tap else { return Ok(t) };
        let source = if l == 0 { Tap::Embed } else { Tap::Layer(l - 1, LayerTap::Out) };
        let value = self.reference.get(&Key::new(ctx.phase, source))?.ok_or_else(|| {
            Error::usage(format!("local view: the reference capture has no {}/{source}", ctx.phase))
        })?;
        if value.shape() != t.dims() {
            return Err(Error::usage(format!(
                "local view: reference {}/{source} has shape {:?}, the backend computes {:?}",
                ctx.phase,
                value.shape(),
                t.dims()
            )));
        }
        array_to_tensor(&value)
    }
}
