//! The device path end to end on the simulated device: genai's host pre-processing, the
//! driver, the KV ring, quantized inputs and outputs — against the float32 reference.

mod common;

use common::{prompt, sim_backend as backend};
use hefprobe::backend::decoder::DecoderBackend;
use hefprobe::backend::hef::HefBackend;
use hefprobe::capture::Capture;
use hefprobe::compare::metrics;
use hefprobe::device::driver::LlmDriver;
use hefprobe::device::sim::SimDevice;
use hefprobe::device::synth_hef::{sim_spec, synth_hef, Mistake, SimCheckpoint, SynthHefOptions};
use hefprobe::diagnose::{self as diag, ParityVerdict};
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

/// Reference greedy run (prompt, decode steps) with logits at every phase.
fn reference(ckpt: &Checkpoint, inputs: &InputSet) -> (Capture, Vec<u32>) {
    let model = Arc::new(Decoder::new(ckpt).unwrap());
    let run = hefprobe::backend::collect(
        &mut DecoderBackend::reference(model),
        inputs,
        &TapSelection::parse(&["logits".to_string()]).unwrap(),
        None,
    );
    assert!(run.error.is_none());
    (run.capture, run.record.decode_tokens)
}

fn last_row(c: &Capture, phase: Phase) -> Vec<f32> {
    let a = c.at(phase, Tap::Logits).unwrap();
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
    let cap = common::drive(&mut dev, &inputs, &mut Default::default());
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
    let mut record = Default::default();
    common::drive(&mut dev, &inputs, &mut record);
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
    let (ckpt, h) = hef(SynthHefOptions {
        faults: vec![hefprobe::fault::spec::FaultSpec::parse("cache-layout:transpose").unwrap()],
        ..small()
    });
    let mut inputs = InputSet::new(prompt(24));
    inputs.chunk = Some(16);
    inputs.decode = DecodeSpec::Greedy(4);
    let (reference, greedy) = reference(&ckpt, &inputs);
    inputs.decode = DecodeSpec::Forced(greedy);
    let mut dev = backend(&h);
    let cap = common::drive(&mut dev, &inputs, &mut Default::default());
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
    let cap = common::drive(&mut dev, &inputs, &mut Default::default());
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

/// What one recorded frame carries that genai's routing decides: the group (`prefill`/`tbt`),
/// the cache offset delta, and the positions and embeddings rows of the rows it adds.
type Sent = (String, i32, Vec<u32>, Vec<u16>);

fn sent_frames(dev: &mut HefBackend) -> Vec<Sent> {
    let frames = dev.driver.record.take().unwrap();
    frames
        .into_iter()
        .map(|s| {
            let n = s.cache_offset_delta as usize;
            let rows = s.frames.rows;
            let features = s.frames.embeddings.len() / rows;
            let group = s.group.rsplit("__").next().unwrap().to_string();
            (
                group,
                s.cache_offset_delta,
                s.frames.positions[rows - n..].to_vec(),
                s.frames.embeddings[(rows - n) * features..].to_vec(),
            )
        })
        .collect()
}

/// The frames genai's rules say: `(group, tokens, first position)` per frame.
fn expected(h: &Hef, frames: &[(&str, &[u32], u32)]) -> Vec<Sent> {
    let emb: Vec<u16> = h
        .resource("embeddings.bin")
        .unwrap()
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    let features = 64;
    frames
        .iter()
        .map(|(g, tokens, start)| {
            let rows: Vec<u16> = tokens
                .iter()
                .flat_map(|&t| emb[t as usize * features..(t as usize + 1) * features].to_vec())
                .collect();
            (g.to_string(), tokens.len() as i32, (*start..*start + tokens.len() as u32).collect(), rows)
        })
        .collect()
}

fn first_prompt(h: &Hef, tokens: &[u32], reasoning: Option<u32>) -> (HefBackend, Vec<Vec<f32>>) {
    let mut dev = backend(h);
    if let Some(r) = reasoning {
        dev.driver.config.begin_of_reasoning_token_id = r as i32;
    }
    dev.driver.record = Some(Vec::new());
    dev.driver.new_conversation().unwrap();
    let logits = dev.driver.prefill(tokens).unwrap();
    (dev, logits)
}

#[test]
fn reasoning_prompts_are_split_around_the_token_which_is_dropped_each_part_remainder_first() {
    // llm_server.cpp handle_prefill_phase (~896-936): prefill before, prefill after, each
    // through get_next_token_prefill (remainder first, chunks of p = 16); the token is never sent.
    let (_, h) = hef(small());
    let p = prompt(40);
    let r = 299;
    assert!(!p.contains(&r));
    // In the middle: 7 before (one chunk of 7), 32 after (two chunks of 16).
    let mut tokens = p.clone();
    tokens[7] = r;
    let (mut dev, logits) = first_prompt(&h, &tokens, Some(r));
    let want = expected(
        &h,
        &[("prefill", &tokens[..7], 0), ("prefill", &tokens[8..24], 7), ("prefill", &tokens[24..], 23)],
    );
    assert_eq!(sent_frames(&mut dev), want);
    assert_eq!(logits.len(), 3);
    // The next token goes to tbt at position 39: the cache holds 39 tokens, not 40.
    dev.driver.record = Some(Vec::new());
    dev.driver.step(5).unwrap();
    assert_eq!(sent_frames(&mut dev), expected(&h, &[("tbt", &[5], 39)]));

    // At the start: nothing before (no frame), 39 after: a remainder of 7, then two of 16.
    let mut tokens = p.clone();
    tokens[0] = r;
    let (mut dev, _) = first_prompt(&h, &tokens, Some(r));
    let want = expected(
        &h,
        &[("prefill", &tokens[1..8], 0), ("prefill", &tokens[8..24], 7), ("prefill", &tokens[24..], 23)],
    );
    assert_eq!(sent_frames(&mut dev), want);

    // At the end: 39 before; nothing after, so genai reads the logits of the part before.
    let mut tokens = p.clone();
    tokens[39] = r;
    let (mut dev, logits) = first_prompt(&h, &tokens, Some(r));
    let want = expected(
        &h,
        &[("prefill", &tokens[..7], 0), ("prefill", &tokens[7..23], 7), ("prefill", &tokens[23..39], 23)],
    );
    assert_eq!(sent_frames(&mut dev), want);
    assert_eq!(logits.len(), 3);

    // Only the first occurrence splits; later ones are fed like any token.
    let mut tokens = p[..20].to_vec();
    (tokens[3], tokens[10]) = (r, r);
    let (mut dev, _) = first_prompt(&h, &tokens, Some(r));
    let want = expected(&h, &[("prefill", &tokens[..3], 0), ("prefill", &tokens[4..], 3)]);
    assert_eq!(sent_frames(&mut dev), want);

    // A HEF without the key (INVALID_TOKEN_VALUE) never splits.
    let (mut dev, _) = first_prompt(&h, &tokens, None);
    let want = expected(&h, &[("prefill", &tokens[..4], 0), ("prefill", &tokens[4..], 4)]);
    assert_eq!(sent_frames(&mut dev), want);
}

#[test]
fn a_one_token_request_takes_tbt_when_the_hef_has_it_even_as_a_first_prompt() {
    // llm_server.cpp generate_next_token_on_demand (~857-868).
    let (_, h) = hef(small());
    let (mut dev, logits) = first_prompt(&h, &[42], None);
    assert_eq!(sent_frames(&mut dev), expected(&h, &[("tbt", &[42], 0)]));
    assert_eq!(logits.len(), 1);
    // The 1-token routing comes before the reasoning check: the token is sent, not dropped.
    let (mut dev, _) = first_prompt(&h, &[42], Some(42));
    assert_eq!(sent_frames(&mut dev), expected(&h, &[("tbt", &[42], 0)]));
    // Without a tbt group the prefill group takes it.
    let (_, base) = hef(SynthHefOptions { tbt: false, ..small() });
    let (mut dev, _) = first_prompt(&base, &[42], None);
    assert_eq!(sent_frames(&mut dev), expected(&base, &[("prefill", &[42], 0)]));
    // And a reasoning-only prompt there sends nothing: refused, not a stale read.
    let mut dev = backend(&base);
    dev.driver.config.begin_of_reasoning_token_id = 42;
    dev.driver.new_conversation().unwrap();
    let e = dev.driver.prefill(&[42]).unwrap_err().to_string();
    assert!(e.contains("begin_of_reasoning_token_id") && e.contains("no tbt group"), "{e}");
}

fn backend_h10(h: &Hef) -> HefBackend {
    let spec = sim_spec(h, "sim.hef").unwrap().unwrap();
    let mut dev: Box<dyn hefprobe::device::Device> = Box::new(
        SimDevice::with_profile(h.clone(), spec, "sim.hef".into(), hefprobe::device::SimProfile::SimH10)
            .unwrap(),
    );
    let driver = LlmDriver::open(dev.as_mut(), h, "sim.hef").unwrap();
    HefBackend::from_parts("device", dev, driver, h.clone())
}

#[test]
fn sim_h10_refuses_cache_calls_and_a_failed_run_poisons_the_model() {
    use hefprobe::device::Device;
    use hefprobe::error::Error;
    let (ckpt, h) = hef(small());
    let mut dev = backend_h10(&h);
    match dev.driver.cache_buffers() {
        Err(Error::Unsupported(m)) => {
            assert!(m.starts_with("get_cache_buffers: unavailable on this device (HailoRT 5.2 RPC)"), "{m}")
        }
        other => panic!("{:?}", other.map(|b| b.len())),
    }
    assert!(matches!(dev.driver.update_cache_buffer(0, &[]), Err(Error::Unsupported(_))));
    // Parity runs (a) and (b); (c) is unavailable, and a clean HEF still agrees.
    let model = Decoder::new(&ckpt).unwrap();
    let p = diag::parity(&mut dev.driver, &h, &model, &prompt(24)).unwrap();
    assert_eq!(p.verdict, ParityVerdict::Agree, "{p:?}");
    assert_eq!(p.rows[2].unavailable.as_deref(), Some(diag::UNAVAILABLE_OVER_RPC));

    // A failed run (an input left unbound) poisons the configured model: every later call names
    // the first failure.
    let spec = sim_spec(&h, "sim.hef").unwrap().unwrap();
    let mut sim =
        SimDevice::with_profile(h.clone(), spec, "sim.hef".into(), hefprobe::device::SimProfile::SimH10)
            .unwrap();
    let (prefill, _) = h.llm_groups().unwrap();
    let mut m = sim.configure(&prefill, &[]).unwrap();
    let first = m.run(&[], std::time::Duration::from_secs(1)).unwrap_err().to_string();
    assert!(first.contains("was not bound"), "{first}");
    let later = m.init_cache(0).unwrap_err().to_string();
    assert!(
        later.contains("unusable after an earlier failure") && later.contains("was not bound"),
        "{later}"
    );
    // The plain simulator keeps going after a failed run, as a local device does.
    let spec = sim_spec(&h, "sim.hef").unwrap().unwrap();
    let mut sim = SimDevice::from_hef(h.clone(), spec, "sim.hef".into()).unwrap();
    let mut m = sim.configure(&prefill, &[]).unwrap();
    assert!(m.run(&[], std::time::Duration::from_secs(1)).is_err());
    m.init_cache(0).unwrap();
}

#[test]
fn sim_h10_parity_still_catches_the_cache_layout_fault_without_the_cache() {
    let (ckpt, h) = hef(SynthHefOptions {
        faults: vec![hefprobe::fault::spec::FaultSpec::parse("cache-layout:transpose").unwrap()],
        ..small()
    });
    let model = Decoder::new(&ckpt).unwrap();
    let mut dev = backend_h10(&h);
    let p = diag::parity(&mut dev.driver, &h, &model, &prompt(24)).unwrap();
    // (c) is unavailable over RPC; the cache-free control (d) runs there and clears the tbt
    // graph, so the drift is put on what tbt reads from the cache.
    assert_eq!(p.verdict, ParityVerdict::TbtCacheReadDrifts, "{p:?}");
}
