//! The device path end to end on the simulated device: genai's host pre-processing, the
//! driver, the KV ring, quantized inputs and outputs — against the float32 reference.

use hefprobe::backend::decoder::DecoderBackend;
use hefprobe::backend::hef::HefBackend;
use hefprobe::backend::Backend;
use hefprobe::capture::Capture;
use hefprobe::compare::metrics;
use hefprobe::device::driver::LlmDriver;
use hefprobe::device::sim::SimDevice;
use hefprobe::device::synth_hef::{sim_spec, synth_hef, Mistake, SimCheckpoint, SynthHefOptions};
use hefprobe::explain::diag::{self, ParityVerdict};
use hefprobe::hef::Hef;
use hefprobe::inputs::{DecodeSpec, InputSet};
use hefprobe::model::synth::SynthSpec;
use hefprobe::model::{Arch, Checkpoint, Decoder};
use hefprobe::tap::{Phase, Tap, TapSelection};
use std::sync::Arc;

fn spec() -> SynthSpec {
    let mut s = SynthSpec::preset("tinystories", 5).unwrap();
    (s.preset, s.arch, s.hidden, s.layers, s.heads, s.kv_heads) = (None, Arch::Llama, 64, 2, 4, 2);
    (s.head_dim, s.intermediate, s.vocab) = (None, Some(128), Some(300));
    s
}

fn hef(opts: SynthHefOptions) -> (Checkpoint, Hef) {
    let s = spec();
    let ckpt = s.build().unwrap();
    let h = synth_hef(&ckpt, SimCheckpoint::Synth(s), &opts).unwrap();
    // Through the file format, as a device host would read it: every field survives.
    let back = Hef::from_bytes(&h.to_bytes(), "sim.hef").unwrap();
    assert_eq!(back, h);
    (ckpt, back)
}

fn small() -> SynthHefOptions {
    SynthHefOptions { prefill_tokens: 16, kv_cache_size: 128, ..Default::default() }
}

fn backend(h: &Hef) -> HefBackend {
    let spec = sim_spec(h, "sim.hef").unwrap().unwrap();
    let mut dev: Box<dyn hefprobe::device::Device> =
        Box::new(SimDevice::from_hef(h.clone(), spec, "sim.hef".into()).unwrap());
    let driver = LlmDriver::open(dev.as_mut(), h, "sim.hef").unwrap();
    HefBackend::from_parts("device", dev, driver)
}

fn prompt(n: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 37 + 5) % 300) as u32).collect()
}

/// Reference greedy run (prompt, decode steps) with logits at every phase.
fn reference(ckpt: &Checkpoint, inputs: &InputSet) -> (Capture, Vec<u32>) {
    let model = Arc::new(Decoder::new(ckpt).unwrap());
    let run =
        DecoderBackend::reference(model).run(inputs, &TapSelection::parse(&["logits".to_string()]).unwrap());
    assert!(run.error.is_none());
    (run.capture, run.record.decode_tokens)
}

fn last_row(c: &Capture, phase: Phase) -> Vec<f32> {
    let a = c.get(phase, Tap::Logits).unwrap();
    let v = *a.shape().last().unwrap();
    a.iter().copied().skip(a.len() - v).collect()
}

#[test]
fn clean_hef_matches_the_reference_through_prefill_chunks_and_32_decode_steps() {
    let (ckpt, h) = hef(small());
    let mut inputs = InputSet::new(prompt(40));
    inputs.chunk = Some(16);
    inputs.decode = DecodeSpec::Greedy(32);
    let (reference, greedy) = reference(&ckpt, &inputs);
    inputs.decode = DecodeSpec::Forced(greedy.clone());
    let mut dev = backend(&h);
    let mut cap = Capture::default();
    dev.drive(&inputs, &mut cap, &mut Default::default()).unwrap();
    assert_eq!(cap.phases().len(), 3 + 32, "three prefill chunks (8, 16, 16) and 32 decode steps");
    let mut steps = 0;
    for phase in cap.phases() {
        let (r, x) = (last_row(&reference, phase), last_row(&cap, phase));
        let m = metrics::basic(&r, &x, None);
        let row = metrics::logits_row(&r, &x);
        assert!(m.cosine >= 0.999, "{phase}: logits cosine {}", m.cosine);
        assert!(
            row.margin <= 1e-3 || row.argmax_ref == row.argmax_cand,
            "{phase}: argmax differs at margin {}",
            row.margin
        );
        steps += 1;
    }
    assert_eq!(steps, 35);

    // Greedy on the device reproduces the reference's tokens up to the first step whose
    // reference top-1 margin is below 1e-3.
    inputs.decode = DecodeSpec::Greedy(32);
    let mut own = Capture::default();
    let mut record = Default::default();
    dev.drive(&inputs, &mut own, &mut record).unwrap();
    let tight = (0..32).find(|&k| {
        let l = last_row(&reference, if k == 0 { Phase::PrefillChunk(2) } else { Phase::Decode(k - 1) });
        metrics::logits_row(&l, &l).margin < 1e-3
    });
    let upto = tight.unwrap_or(32);
    assert_eq!(record.decode_tokens[..upto], greedy[..upto], "token for token up to step {upto}");
    eprintln!(
        "greedy generation matches the reference for {upto} of 32 steps (first tight margin: {tight:?})"
    );
}

#[test]
fn cache_layout_fault_drifts_only_in_decode_and_parity_names_the_cache() {
    let (ckpt, h) = hef(SynthHefOptions { faults: vec!["cache-layout:transpose".into()], ..small() });
    let mut inputs = InputSet::new(prompt(24));
    inputs.chunk = Some(16);
    inputs.decode = DecodeSpec::Greedy(4);
    let (reference, greedy) = reference(&ckpt, &inputs);
    inputs.decode = DecodeSpec::Forced(greedy);
    let mut dev = backend(&h);
    let mut cap = Capture::default();
    dev.drive(&inputs, &mut cap, &mut Default::default()).unwrap();
    for phase in cap.phases() {
        let c = metrics::basic(&last_row(&reference, phase), &last_row(&cap, phase), None).cosine;
        if phase.is_decode() {
            assert!(c < 0.99, "{phase} should drift, cosine {c}");
        } else {
            assert!(c >= 0.999, "{phase} should be clean, cosine {c}");
        }
    }
    let model = Decoder::new(&ckpt).unwrap();
    let p = diag::parity(&mut dev.driver, &h, &model, &prompt(24)).unwrap();
    assert_eq!(p.verdict, ParityVerdict::CacheWriteReadDisagree, "{p:?}");
    let sentence = p.verdict.sentence();
    assert!(sentence.contains("the cache write (prefill) and read (tbt) disagree"), "{sentence}");
    let diff = diag::cache_diff(&mut dev.driver, &h, &model, &prompt(23)).unwrap();
    assert!(diff.iter().all(|r| r.max_lsb > 100), "{diff:?}");
    // And the clean HEF's parity agrees, its cache within a few LSB.
    let (_, clean) = hef(small());
    let mut dev = backend(&clean);
    let p = diag::parity(&mut dev.driver, &clean, &model, &prompt(24)).unwrap();
    assert_eq!(p.verdict, ParityVerdict::Agree, "{p:?}");
    assert!(p.verdict.sentence().starts_with("prefill and tbt agree"), "{}", p.verdict.sentence());
    let diff = diag::cache_diff(&mut dev.driver, &clean, &model, &prompt(23)).unwrap();
    assert!(diff.iter().all(|r| r.max_lsb <= 8), "{diff:?}");
}

#[test]
fn base_scope_hef_runs_prefill_for_every_step() {
    let (ckpt, h) = hef(SynthHefOptions { tbt: false, ..small() });
    assert_eq!(h.groups.len(), 1);
    let mut inputs = InputSet::new(prompt(10));
    inputs.decode = DecodeSpec::Greedy(6);
    let (reference, greedy) = reference(&ckpt, &inputs);
    inputs.decode = DecodeSpec::Forced(greedy);
    let mut dev = backend(&h);
    assert!(!dev.driver.has_tbt());
    let mut cap = Capture::default();
    dev.drive(&inputs, &mut cap, &mut Default::default()).unwrap();
    for phase in cap.phases() {
        let c = metrics::basic(&last_row(&reference, phase), &last_row(&cap, phase), None).cosine;
        assert!(c >= 0.999, "{phase}: {c}");
    }
}

#[test]
fn frames_that_disagree_with_hailo_config_are_refused_with_the_numbers() {
    // The misspelled key leaves genai on its default of 96 rows; the HEF's frames hold 16.
    let (_, h) = hef(SynthHefOptions { mistakes: vec![Mistake::MisspelledConfigKey], ..small() });
    let spec = sim_spec(&h, "sim.hef").unwrap().unwrap();
    let mut dev = SimDevice::from_hef(h.clone(), spec, "sim.hef".into()).unwrap();
    let e = LlmDriver::open(&mut dev, &h, "sim.hef").err().unwrap().to_string();
    assert!(
        e.contains("input_layer1") && e.contains("bytes") && e.contains("prefill_input_tokens_size"),
        "{e}"
    );
    let (_, h) = hef(SynthHefOptions { mistakes: vec![Mistake::WrongRopeWidth], ..small() });
    let spec = sim_spec(&h, "sim.hef").unwrap().unwrap();
    let mut dev = SimDevice::from_hef(h.clone(), spec, "sim.hef".into()).unwrap();
    let e = LlmDriver::open(&mut dev, &h, "sim.hef").err().unwrap().to_string();
    assert!(e.contains("input_layer3") && e.contains("Q RoPE"), "{e}");
}

#[test]
fn a_prompt_longer_than_the_kv_cache_says_so() {
    let (_, h) = hef(small());
    let mut dev = backend(&h);
    let inputs = InputSet::new(prompt(140));
    let e = dev.drive(&inputs, &mut Capture::default(), &mut Default::default()).unwrap_err().to_string();
    assert!(e.contains("kv_cache_size = 128"), "{e}");
}
