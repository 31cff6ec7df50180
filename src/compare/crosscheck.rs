//! The reference against candle-transformers' own model on the same weights
//! ([`crate::model::crosscheck`]), `reference --crosscheck`: the last-position logits of every
//! phase compared.

use crate::error::Result;
use crate::inputs::InputSet;
use crate::model::run::RunRecord;
use crate::model::{Checkpoint, Decoder};

/// Last-position logits of every phase against candle-transformers' model on the same weights.
#[cfg(feature = "crosscheck")]
pub fn logits(
    ckpt: &Checkpoint,
    model: &Decoder,
    inputs: &InputSet,
    record: &RunRecord,
) -> Result<(usize, f64, f64)> {
    use crate::capture::NoTaps;
    use crate::compare::metrics;
    use crate::model::cache::FullCache;
    use crate::model::hooks::NoHooks;
    use crate::tap::Phase;
    let theirs =
        crate::model::crosscheck::candle_transformers_logits(ckpt, &inputs.prompt, &record.decode_tokens)?;
    let mut cache = FullCache::new(model.cfg.num_layers);
    let mut ours = Vec::new();
    let steps = std::iter::once(inputs.prompt.clone()).chain(record.decode_tokens.iter().map(|&t| vec![t]));
    let mut pos = inputs.start_position;
    for (k, tokens) in steps.enumerate() {
        let phase = if k == 0 { Phase::Prefill } else { Phase::Decode(k - 1) };
        let input = model.step_input(phase, &tokens, pos)?;
        pos += tokens.len();
        let l = model.step(&input, &mut cache, &mut NoTaps, &mut NoHooks)?;
        ours.push(l.get(tokens.len() - 1)?.to_vec1::<f32>()?);
    }
    let (cos, max) = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| metrics::compute(b, a, None))
        .fold((1f64, 0f64), |(c, m), x| (c.min(x.cosine), m.max(x.max_abs)));
    Ok((ours.len(), cos, max))
}

#[cfg(not(feature = "crosscheck"))]
pub fn logits(_: &Checkpoint, _: &Decoder, _: &InputSet, _: &RunRecord) -> Result<(usize, f64, f64)> {
    Err(crate::error::Error::usage("--crosscheck needs hefprobe built with the `crosscheck` feature"))
}
