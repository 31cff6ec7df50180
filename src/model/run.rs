//! Run an InputSet through the decoder: prefill (whole or chunked), then decode steps.

use crate::capture::TapSink;
use crate::error::Result;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::cache::FullCache;
use crate::model::decoder::{argmax_last_row, Decoder};
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
    // One phase: its tokens at the next positions; the argmax of its last row.
    let mut step = |phase: Phase, tokens: &[u32]| -> Result<u32> {
        if phase.is_decode() {
            record.decode_tokens.push(tokens[0]);
        }
        // `validate` bounded start + total length by max_position_embeddings: no wrap.
        let input = model.step_input(phase, tokens, pos)?;
        let logits = model.step(&input, &mut cache, sink, hooks)?;
        pos += tokens.len();
        let next = argmax_last_row(&logits)?;
        record.phases.push((phase, tokens.to_vec(), input.positions));
        record.argmax.push(next);
        Ok(next)
    };
    let mut last = 0u32;
    for (phase, range) in inputs.prefill_phases() {
        last = step(phase, &inputs.prompt[range])?;
    }
    let steps = inputs.decode.steps();
    let bar = decode_progress(steps);
    for k in 0..steps {
        let token = match &inputs.decode {
            DecodeSpec::Greedy(_) => last,
            DecodeSpec::Forced(t) => t[k],
        };
        last = step(Phase::Decode(k), &[token])?;
        if let Some(b) = &bar {
            b.inc(1);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(cache)
}

/// Decode steps at which a run is long enough to show progress.
const PROGRESS_FROM_STEPS: usize = 64;

/// A progress bar for a long decode (steps are bounded by max_position_embeddings, checked by
/// `validate`, and by the memory budget, checked before the run), on [`crate::progress`]'s target.
fn decode_progress(steps: usize) -> Option<indicatif::ProgressBar> {
    (steps >= PROGRESS_FROM_STEPS)
        .then(|| crate::progress::bar(steps as u64, "decode {pos}/{len} {bar:30} {per_sec} eta {eta}"))
}
