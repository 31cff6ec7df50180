//! The reference against HF transformers' own tensors (references/, made by
//! references/make_goldens.py with pinned torch and transformers, float32, eager attention).
//!
//! Per tap and phase: cosine ≥ 0.999999, max |diff| ≤ 1e-5 · max(1, max |ref|), identical
//! argmax wherever the reference's top-1 margin exceeds 1e-4, masked entries identical.

mod common;

use hefprobe::capture::Capture;
use hefprobe::capture::MemorySink;
use hefprobe::compare::metrics;
use hefprobe::inputs::{DecodeSpec, InputSet};
use hefprobe::model::hooks::NoHooks;
use hefprobe::model::rope::Rope;
use hefprobe::model::run::{run_inputs, RunRecord};
use hefprobe::model::{Checkpoint, Decoder, ModelConfig};
use hefprobe::tap::TapSelection;
use std::path::{Path, PathBuf};

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("references");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("case.json").is_file())
        .collect();
    v.sort();
    assert!(v.len() >= 10, "expected the 10 golden cases in {}", root.display());
    v
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Compare every golden tensor; returns a list of failures (empty = pass).
fn check(golden: &Capture, ours: &Capture) -> Vec<String> {
    let mut failures = Vec::new();
    let (mut worst_cos, mut worst_ratio) = (1f64, 0f64);
    for key in golden.keys() {
        let g = golden.get(key).unwrap();
        let Some(o) = ours.get(key) else {
            failures.push(format!("{key}: missing from our capture"));
            continue;
        };
        if g.shape() != o.shape() {
            failures.push(format!("{key}: shape {:?} vs golden {:?}", o.shape(), g.shape()));
            continue;
        }
        let (g, o) = (g.as_slice().unwrap(), o.as_slice().unwrap());
        let m = metrics::compute(g, o, None);
        let max_ref = g.iter().filter(|x| x.is_finite()).fold(0f32, |a, &b| a.max(b.abs())) as f64;
        let tol = 1e-5 * max_ref.max(1.0);
        if m.nonfinite() > 0 {
            failures.push(format!("{key}: {} NaN/one-sided inf (masks differ)", m.nonfinite()));
        }
        worst_cos = worst_cos.min(m.cosine);
        worst_ratio = worst_ratio.max(m.max_abs / tol);
        if m.cosine < 0.999999 {
            failures.push(format!("{key}: cosine {:.9}", m.cosine));
        }
        if m.max_abs > tol {
            failures.push(format!("{key}: max |diff| {:.3e} > {tol:.3e}", m.max_abs));
        }
        if key.tap().is_some_and(|t| t.is(hefprobe::tap::Tap::Logits)) {
            let vocab = *ours.get(key).unwrap().shape().last().unwrap();
            for (t, (gr, or)) in g.chunks(vocab).zip(o.chunks(vocab)).enumerate() {
                let row = metrics::logits_row(gr, or);
                if row.margin > 1e-4 && row.argmax_ref != row.argmax_cand {
                    failures
                        .push(format!("{key}: argmax differs at position {t} (margin {:.2e})", row.margin));
                }
            }
        }
    }
    eprintln!(
        "  {} taps: worst cosine {worst_cos:.9}, worst max|diff|/tolerance {worst_ratio:.3}",
        golden.len()
    );
    failures
}

fn case_json(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("case.json")).unwrap()).unwrap()
}

fn run_case(dir: &Path, chunked: bool) -> Vec<String> {
    let case = case_json(dir);
    let ckpt = Checkpoint::load(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let model = Decoder::new(&ckpt).unwrap();
    let mut inputs = InputSet::new(ids(&case["prompt_ids"]));
    inputs.decode = DecodeSpec::Forced(ids(&case["decode_ids"]));
    if chunked {
        let sizes = ids(&case["chunk_sizes"]);
        inputs.chunk = Some(*sizes.iter().max().unwrap() as usize);
        let ours: Vec<usize> = inputs.prefill_phases().iter().map(|(_, r)| r.len()).collect();
        assert_eq!(ours, sizes.iter().map(|&s| s as usize).collect::<Vec<_>>(), "remainder-first chunks");
    }
    let mut sink = MemorySink::new(TapSelection::all());
    run_inputs(&model, &inputs, &mut sink, &mut NoHooks, &mut RunRecord::default()).unwrap();
    let file = if chunked { "golden-chunked.npz" } else { "golden.npz" };
    let golden = common::read_npz(&dir.join(file)).unwrap();
    assert!(golden.len() > 50, "{file} looks empty");
    check(&golden, &sink.capture)
        .into_iter()
        .map(|f| format!("{}/{file}: {f}", dir.file_name().unwrap().to_string_lossy()))
        .collect()
}

#[test]
fn reference_matches_hf_on_every_golden_tap() {
    let mut failures = Vec::new();
    for dir in cases() {
        failures.extend(run_case(&dir, false));
        failures.extend(run_case(&dir, true));
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn the_golden_check_catches_a_perturbed_tap() {
    // The check above must be able to fail: nudge one logit and one masked score.
    let dir = &cases()[0];
    let golden = common::read_npz(&dir.join("golden.npz")).unwrap();
    let mut ours = golden.clone();
    let key = "prefill/logits";
    let mut a = ours.get(&key.into()).unwrap().clone();
    a.as_slice_mut().unwrap()[3] += 1e-3;
    ours.insert(key.into(), a);
    let f = check(&golden, &ours);
    assert!(f.iter().any(|f| f.contains("prefill/logits") && f.contains("max |diff|")), "{f:?}");
    assert_eq!(check(&golden, &golden), Vec::<String>::new());
}

/// Distance in units in the last place between two positive finite f32.
fn ulps(a: f32, b: f32) -> u32 {
    a.to_bits().abs_diff(b.to_bits())
}

/// Our frequencies and attention factor against HF's float32 ones (`inv_freq` buffer and
/// `attention_scaling`), within an ulp (the pow is computed in f64 and rounded; torch's f32
/// pow is within an ulp of that).
fn check_rope(what: &str, rope: &Rope, inv_freq: &serde_json::Value, scaling: f64) -> Vec<String> {
    let hf: Vec<f32> = inv_freq.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    let mut failures = Vec::new();
    if hf.len() != rope.inv_freq.len() {
        failures.push(format!("{what}: {} frequencies, HF has {}", rope.inv_freq.len(), hf.len()));
    }
    let worst = rope.inv_freq.iter().zip(&hf).map(|(a, b)| ulps(*a, *b)).max().unwrap_or(0);
    if worst > 1 {
        failures.push(format!("{what}: inv_freq {:?} vs HF {hf:?} ({worst} ulps)", rope.inv_freq));
    }
    if rope.attention_factor != scaling as f32 {
        failures.push(format!("{what}: attention factor {} vs HF {scaling}", rope.attention_factor));
    }
    failures
}

#[test]
fn rope_frequencies_and_attention_factor_match_hf() {
    let mut failures = Vec::new();
    for dir in cases() {
        let case = case_json(&dir);
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let ckpt = Checkpoint::load(&dir).unwrap();
        let rope = Rope::new(&ckpt.config.rope, ckpt.config.head_dim);
        let scaling = case["scaled_rope"]["attention_scaling"].as_f64().unwrap_or(1.0);
        failures.extend(check_rope(&name, &rope, &case["rope_inv_freq_f32"], scaling));
        // Every optional YaRN key (and linear) on its own, as HF computes it.
        for (i, v) in case["scaled_rope"]["rope_variants"].as_array().into_iter().flatten().enumerate() {
            let text = format!(
                r#"{{"model_type":"qwen2","hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,
                    "num_attention_heads":2,"num_key_value_heads":1,"vocab_size":256,
                    "max_position_embeddings":{},"rope_parameters":{}}}"#,
                v["max_position_embeddings"], v["rope_parameters"]
            );
            let what = format!("{name} variant {i} {}", v["rope_parameters"]);
            let cfg = ModelConfig::from_json_str(&text, &what).unwrap_or_else(|e| panic!("{e}"));
            let rope = Rope::new(&cfg.rope, cfg.head_dim);
            failures.extend(check_rope(
                &what,
                &rope,
                &v["inv_freq_f32"],
                v["attention_scaling"].as_f64().unwrap(),
            ));
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn smollm2_published_keys_are_accepted_and_listed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("references/llama-smollm2-keys");
    let ckpt = Checkpoint::load(&dir).unwrap();
    let keys: Vec<&str> = ckpt.config.unknown_keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(keys, ["is_llama_config", "rope_interleaved"]);
}
