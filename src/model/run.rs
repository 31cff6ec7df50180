//! Run an InputSet through the decoder: prefill (whole or chunked), then decode steps.

use crate::capture::TapSink;
use crate::error::Result;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::decoder::{argmax_last_row, Decoder, FullCache, StepInput};
use crate::model::hooks::Hooks;
use crate::tap::Phase;

/// What a run fed and produced, phase by phase.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunRecord {
    /// (phase, tokens fed, positions) in run order.
    pub phases: Vec<(Phase, Vec<u32>, Vec<usize>)>,
    /// The token each decode step fed (greedy or forced).
    pub decode_tokens: Vec<u32>,
    /// Greedy argmax of the last row of every phase's logits.
    pub argmax: Vec<u32>,
}

/// Run every phase. On failure, the phases finished so far are in `record` and their taps
/// have already reached `sink`.
pub fn run_inputs(
    model: &Decoder,
    inputs: &InputSet,
    sink: &mut dyn TapSink,
    hooks: &mut dyn Hooks,
    record: &mut RunRecord,
) -> Result<FullCache> {
    inputs.validate(model.cfg.vocab_size, model.cfg.max_position_embeddings)?;
    let mut cache = FullCache::with_capacity(model.cfg.num_layers, inputs.total_len());
    let mut pos = inputs.start_position;
    let mut last = 0u32;
    for (phase, range) in inputs.prefill_phases() {
        let tokens = inputs.prompt[range].to_vec();
        last = step(model, phase, &tokens, &mut pos, &mut cache, sink, hooks, record)?;
    }
    for k in 0..inputs.decode.steps() {
        let token = match &inputs.decode {
            DecodeSpec::Greedy(_) => last,
            DecodeSpec::Forced(t) => t[k],
        };
        record.decode_tokens.push(token);
        last = step(model, Phase::Decode(k), &[token], &mut pos, &mut cache, sink, hooks, record)?;
    }
    Ok(cache)
}

#[allow(clippy::too_many_arguments)]
fn step(
    model: &Decoder,
    phase: Phase,
    tokens: &[u32],
    pos: &mut usize,
    cache: &mut FullCache,
    sink: &mut dyn TapSink,
    hooks: &mut dyn Hooks,
    record: &mut RunRecord,
) -> Result<u32> {
    let positions: Vec<usize> = (*pos..*pos + tokens.len()).collect();
    let input =
        StepInput { phase, embeds: model.embed_tokens(tokens)?, positions: positions.clone(), frame: None };
    let logits = model.step(&input, cache, sink, hooks)?;
    *pos += tokens.len();
    let next = argmax_last_row(&logits)?;
    record.phases.push((phase, tokens.to_vec(), positions));
    record.argmax.push(next);
    Ok(next)
}
