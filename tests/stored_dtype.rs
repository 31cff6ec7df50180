//! Weights kept in their stored dtype (bf16, f16) and widened inside the kernels give the same
//! bits as the same checkpoint widened to f32 up front, at every tap of every phase; weight
//! quantization applied as the kernels read the weights equals quantizing them once.

use candle_core::DType;
use hefprobe::backend::{collect, decoder::DecoderBackend};
use hefprobe::capture::Capture;
use hefprobe::fault::spec::FaultSpec;
use hefprobe::inputs::{DecodeSpec, InputSet};
use hefprobe::model::synth::SynthSpec;
use hefprobe::model::Checkpoint;
use hefprobe::tap::TapSelection;

/// A small qwen2 (q/k/v biases, tied lm_head) saved as `dtype` and loaded back.
fn stored(dtype: DType, dir: &std::path::Path) -> Checkpoint {
    let mut s = SynthSpec::preset("tinystories", 3).unwrap();
    (s.preset, s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.vocab) =
        (None, 64, 2, 4, 2, None, Some(96));
    s.arch = hefprobe::model::config::Arch::Qwen2;
    s.build().unwrap().save(dir, dtype).unwrap();
    Checkpoint::load(dir).unwrap()
}

fn widened(ckpt: &Checkpoint) -> Checkpoint {
    let mut w = ckpt.clone();
    for t in w.tensors.values_mut() {
        *t = t.to_dtype(DType::F32).unwrap();
    }
    w
}

fn run(ckpt: &Checkpoint, faults: &[&str]) -> Capture {
    let specs: Vec<FaultSpec> = faults.iter().map(|f| FaultSpec::parse(f).unwrap()).collect();
    let built = hefprobe::fault::catalog::build_all(&specs, &ckpt.config).unwrap();
    let mut b = DecoderBackend::with_faults("x", ckpt, built).unwrap();
    let mut inputs = InputSet::new(vec![1, 5, 9, 2, 40, 41, 7]);
    inputs.decode = DecodeSpec::Forced(vec![3, 60, 11]);
    let run = collect(&mut b, &inputs, &TapSelection::all(), None);
    assert!(run.error.is_none(), "{:?}", run.error);
    run.capture
}

fn assert_same_bits(a: &Capture, b: &Capture, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: tap counts");
    assert!(a.len() > 30, "{what}: every tap of every phase, got {}", a.len());
    for (key, x) in a.iter() {
        let y = b.get(key).unwrap_or_else(|| panic!("{what}: {key} missing"));
        assert_eq!(x.shape(), y.shape(), "{what}: {key}");
        let differ = x.iter().zip(y.iter()).filter(|(p, q)| p.to_bits() != q.to_bits()).count();
        assert_eq!(differ, 0, "{what}: {key} differs in {differ} of {} values", x.len());
    }
}

#[test]
fn bf16_and_f16_weights_give_the_bits_of_the_same_weights_widened_up_front() {
    for dtype in [DType::BF16, DType::F16] {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = stored(dtype, dir.path());
        let held = ckpt.tensors["model.layers.0.mlp.up_proj.weight"].dtype();
        assert_eq!(held, dtype, "the weights stay in their stored dtype");
        let wide = widened(&ckpt);
        for faults in [&[][..], &["quant:w8"], &["quant:w4a16"]] {
            let what = format!("{dtype:?} {faults:?}");
            assert_same_bits(&run(&ckpt, faults), &run(&wide, faults), &what);
        }
    }
}

#[test]
fn weights_quantized_as_read_equal_weights_quantized_once() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = widened(&stored(DType::BF16, dir.path()));
    // quant:w8 by hand: every projection and an untied lm_head, symmetric per output row.
    let mut by_hand = ckpt.clone();
    by_hand.tensors.insert("lm_head.weight".into(), ckpt.lm_head().unwrap().clone());
    by_hand.config.tie_word_embeddings = false;
    for (name, t) in by_hand.tensors.iter_mut() {
        if name.ends_with("proj.weight") || name == "lm_head.weight" {
            let (rows, cols) = t.dims2().unwrap();
            let mut v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
            v.chunks_mut(cols).for_each(|r| hefprobe::model::kernels::quantize_row(r, 8));
            *t = candle_core::Tensor::from_vec(v, (rows, cols), t.device()).unwrap();
        }
    }
    let as_read = run(&ckpt, &["quant:w8,inputs=none"]);
    assert_same_bits(&as_read, &run(&by_hand, &[]), "quant:w8 as read vs once");
    // And the quantization is not a no-op: the clean run differs.
    let clean = run(&ckpt, &[]);
    let key = as_read.keys().find(|k| k.to_string() == "prefill/logits").unwrap().clone();
    assert_ne!(as_read.get(&key), clean.get(&key), "quant:w8 changed nothing");
}
