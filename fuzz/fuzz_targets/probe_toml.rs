//! Fuzz the probe file: any text must give a probe or a typed error naming the file and key,
//! never a panic. Whatever parses is taken as far as a run would take it before a model
//! exists: thresholds, synth overrides and the synth config, the InputSet's positions, the
//! tap and threshold globs, and the memory estimate (against a small budget, so absurd dims
//! are refused instead of allocated).

#![no_main]

use hefprobe::budget::{self, Budget};
use hefprobe::inputs::{DecodeSpec, InputSet};
use hefprobe::model::memory::{self, TapsHeld};
use hefprobe::probe::schema::Probe;
use hefprobe::tap::{tap_names, TapSelection};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fn exercise(text: &str) {
    budget::set(Budget::new(64 << 20, "fuzz"));
    let Ok(p) = Probe::parse(text, Path::new("fuzz.toml")) else { return };
    let Ok(thresholds) = p.thresholds.build() else { return };
    let _ = thresholds.bounds_for("logits");
    if p.checkpoint.synth.is_none() {
        return;
    }
    let Ok(spec) = p.checkpoint.synth_spec() else { return };
    let Ok(cfg) = spec.config() else { return };
    let layers = cfg.num_layers.min(64);
    let _ = thresholds.check_globs(&tap_names(layers), layers);
    let Ok(sel) = TapSelection::parse(&p.taps) else { return };
    let _ = sel.check_against(layers);
    let mut inputs = InputSet::new(p.inputs.tokens.clone().unwrap_or_else(|| vec![1]));
    inputs.chunk = p.inputs.chunk;
    inputs.start_position = p.inputs.start_position;
    inputs.decode = match (&p.inputs.decode_tokens, p.inputs.decode) {
        (Some(t), _) => DecodeSpec::Forced(t.clone()),
        (None, Some(n)) => DecodeSpec::Greedy(n),
        _ => DecodeSpec::Forced(vec![]),
    };
    if inputs.validate(cfg.vocab_size, cfg.max_position_embeddings).is_ok() {
        let _ = inputs.prefill_phases();
        let _ = memory::check_run(&cfg, &inputs, &sel, TapsHeld::InMemory { captures: 3 });
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        exercise(text);
    }
});
