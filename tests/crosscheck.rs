#![cfg(feature = "crosscheck")]
//! The reference against candle-transformers' llama and qwen2 (independent implementations)
//! on the same synthesized weights: last-position logits after a prompt and decode steps.

use hefprobe::capture::NoTaps;
use hefprobe::compare::metrics;
use hefprobe::model::cache::FullCache;
use hefprobe::model::crosscheck::candle_transformers_logits;
use hefprobe::model::decoder::{Decoder, StepInput};
use hefprobe::model::hooks::NoHooks;
use hefprobe::model::synth::SynthSpec;
use hefprobe::model::Arch;
use hefprobe::tap::Phase;

fn ours(model: &Decoder, prompt: &[u32], decode: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = FullCache::new(model.cfg.num_layers);
    let mut out = Vec::new();
    let mut pos = 0;
    let mut feed = |phase: Phase, toks: &[u32], out: &mut Vec<Vec<f32>>| {
        let input = StepInput {
            phase,
            embeds: model.embed_tokens(toks).unwrap(),
            positions: (pos..pos + toks.len()).collect(),
            frame: None,
        };
        pos += toks.len();
        let logits = model.step(&input, &mut cache, &mut NoTaps, &mut NoHooks).unwrap();
        out.push(logits.get(toks.len() - 1).unwrap().to_vec1::<f32>().unwrap());
    };
    feed(Phase::Prefill, prompt, &mut out);
    for (k, t) in decode.iter().enumerate() {
        feed(Phase::Decode(k), &[*t], &mut out);
    }
    out
}

fn check(arch: Arch, tie: bool) {
    let mut spec = SynthSpec::preset("tinystories", 3).unwrap();
    (spec.arch, spec.preset, spec.hidden, spec.layers, spec.heads, spec.kv_heads) = (arch, None, 96, 3, 6, 2);
    (spec.head_dim, spec.intermediate, spec.vocab) = (None, Some(160), Some(400));
    let mut ckpt = spec.build().unwrap();
    if tie {
        ckpt.config.tie_word_embeddings = true;
        ckpt.tensors.remove("lm_head.weight");
    }
    let model = Decoder::new(&ckpt).unwrap();
    let prompt: Vec<u32> = (0..19).map(|i| (i * 37 + 5) % 400).collect();
    let decode = [7, 99, 311, 4];
    let a = ours(&model, &prompt, &decode);
    let b = candle_transformers_logits(&ckpt, &prompt, &decode).unwrap();
    assert_eq!(a.len(), b.len());
    for (step, (x, y)) in a.iter().zip(&b).enumerate() {
        let m = metrics::compute(y, x, None);
        let row = metrics::logits_row(y, x);
        assert!(m.cosine > 0.999999, "{arch:?} step {step}: cosine {}", m.cosine);
        assert!(m.max_abs < 1e-4, "{arch:?} step {step}: max abs {}", m.max_abs);
        assert!(row.argmax_ref == row.argmax_cand || row.margin < 1e-4, "{arch:?} step {step}: argmax");
    }
}

#[test]
fn llama_agrees_with_candle_transformers() {
    check(Arch::Llama, false);
    check(Arch::Llama, true);
}

#[test]
fn qwen2_agrees_with_candle_transformers() {
    check(Arch::Qwen2, true);
}
