//! GGUF files written here with candle's writer from a synthesized checkpoint, the way
//! llama.cpp's converter lays them out (names, llama's Q/K permutation, metadata), then read
//! back: the loader must return the checkpoint it started from.

use super::*;
use crate::model::config::Arch;
use crate::model::synth::SynthSpec;
use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Tensor;
use std::path::PathBuf;

fn synth(arch: Arch) -> Checkpoint {
    let mut s = SynthSpec::preset("tinystories", 3).unwrap();
    (s.preset, s.arch, s.hidden, s.layers, s.heads, s.kv_heads) = (None, arch, 64, 2, 4, 2);
    (s.head_dim, s.intermediate, s.vocab) = (None, Some(96), Some(261));
    s.build().unwrap()
}

/// llama.cpp's `LlamaModel.permute`: per head, row `a·D/2 + i` moves to `2i + a`.
fn permute(t: &Tensor, n_head: usize) -> Tensor {
    let rows = t.dim(0).unwrap();
    let rest = t.elem_count() / rows;
    t.reshape((n_head, 2, rows / n_head / 2, rest))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap()
        .reshape(t.dims())
        .unwrap()
}

fn gguf_name(hf: &str) -> String {
    let (stem, kind) = hf.rsplit_once('.').unwrap();
    let top = [("model.embed_tokens", "token_embd"), ("model.norm", "output_norm"), ("lm_head", "output")];
    if let Some((_, g)) = top.iter().find(|(h, _)| *h == stem) {
        return format!("{g}.{kind}");
    }
    let rest = stem.strip_prefix("model.layers.").unwrap();
    let (layer, leaf) = rest.split_once('.').unwrap();
    let g = tensors_names().into_iter().find(|(_, h)| *h == leaf).unwrap().0;
    format!("blk.{layer}.{g}.{kind}")
}

fn tensors_names() -> Vec<(&'static str, &'static str)> {
    vec![
        ("attn_norm", "input_layernorm"),
        ("attn_q", "self_attn.q_proj"),
        ("attn_k", "self_attn.k_proj"),
        ("attn_v", "self_attn.v_proj"),
        ("attn_output", "self_attn.o_proj"),
        ("attn_q_norm", "self_attn.q_norm"),
        ("attn_k_norm", "self_attn.k_norm"),
        ("ffn_norm", "post_attention_layernorm"),
        ("ffn_gate", "mlp.gate_proj"),
        ("ffn_up", "mlp.up_proj"),
        ("ffn_down", "mlp.down_proj"),
    ]
}

/// A byte-level vocabulary: the 256 byte symbols, two merges, and three control tokens.
fn vocab() -> (Vec<String>, Vec<i32>, Vec<String>) {
    let mut tokens: Vec<String> = vec!["<|endoftext|>".into(), "<|im_start|>".into(), "<|im_end|>".into()];
    let mut types = vec![3, 3, 3];
    for c in super::tokenizer::byte_level_alphabet() {
        tokens.push(c.to_string());
        types.push(1);
    }
    tokens.push("Ġt".into());
    tokens.push("he".into());
    types.extend([1, 1]);
    (tokens, types, vec!["Ġ t".into(), "h e".into()])
}

fn metadata(ckpt: &Checkpoint, arch: &str, extra: &[(&str, Value)]) -> Vec<(String, Value)> {
    let c = &ckpt.config;
    let (tokens, types, merges) = vocab();
    let mut m: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String("test".into())),
        (format!("{arch}.context_length"), Value::U32(c.max_position_embeddings as u32)),
        (format!("{arch}.embedding_length"), Value::U32(c.hidden_size as u32)),
        (format!("{arch}.block_count"), Value::U32(c.num_layers as u32)),
        (format!("{arch}.feed_forward_length"), Value::U32(c.intermediate_size as u32)),
        (format!("{arch}.attention.head_count"), Value::U32(c.num_heads as u32)),
        (format!("{arch}.attention.head_count_kv"), Value::U32(c.num_kv_heads as u32)),
        (format!("{arch}.rope.freq_base"), Value::F32(c.rope.theta as f32)),
        (format!("{arch}.attention.layer_norm_rms_epsilon"), Value::F32(c.rms_norm_eps as f32)),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("qwen2".into())),
        ("tokenizer.ggml.tokens".into(), Value::Array(tokens.into_iter().map(Value::String).collect())),
        ("tokenizer.ggml.token_type".into(), Value::Array(types.into_iter().map(Value::I32).collect())),
        ("tokenizer.ggml.merges".into(), Value::Array(merges.into_iter().map(Value::String).collect())),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
    ];
    if arch == "llama" {
        m.push((format!("{arch}.rope.dimension_count"), Value::U32(c.head_dim as u32)));
    }
    for (k, v) in extra {
        m.retain(|(key, _)| key != k);
        m.push((k.to_string(), v.clone()));
    }
    m
}

/// Write `ckpt` as llama.cpp would: GGUF names, q/k permuted for llama, `dtype` for matrices.
fn write(ckpt: &Checkpoint, arch: &str, dtype: GgmlDType, extra: &[(&str, Value)], path: &Path) {
    let c = &ckpt.config;
    let mut qs: Vec<(String, QTensor)> = Vec::new();
    for (name, t) in &ckpt.tensors {
        let mut t = t.clone();
        if arch == "llama" && name.contains("q_proj") {
            t = permute(&t, c.num_heads);
        } else if arch == "llama" && name.contains("k_proj") {
            t = permute(&t, c.num_kv_heads);
        }
        let dt = if t.rank() == 2 { dtype } else { GgmlDType::F32 };
        qs.push((gguf_name(name), QTensor::quantize(&t, dt).unwrap()));
    }
    let meta = metadata(ckpt, arch, extra);
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = qs.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    candle_core::quantized::gguf_file::write(&mut f, &meta_refs, &tensor_refs).unwrap();
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
}

#[test]
fn llama_qwen2_qwen3_round_trip_exactly_and_llama_qk_are_unpermuted() {
    for (arch, name) in [(Arch::Llama, "llama"), (Arch::Qwen2, "qwen2"), (Arch::Qwen3, "qwen3")] {
        let ckpt = synth(arch);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        // qwen3's HF config defaults head_dim to 128; a file must state the same or be refused.
        let extra =
            if arch == Arch::Qwen3 { vec![("qwen3.attention.key_length", Value::U32(16))] } else { vec![] };
        write(&ckpt, name, GgmlDType::F32, &extra, &path);
        if arch == Arch::Qwen3 {
            let e = load(&path).unwrap_err().to_string();
            assert!(e.contains("qwen3.attention.key_length") && e.contains("head_dim 128"), "{e}");
            continue;
        }
        let back = load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            back.source.to_string().starts_with("gguf ")
                && back.source.to_string().ends_with("(F32 dequantized)")
        );
        assert_eq!(back.config.arch, arch);
        assert_eq!(
            (back.config.hidden_size, back.config.num_heads, back.config.num_kv_heads, back.config.head_dim),
            (64, 4, 2, 16)
        );
        assert_eq!(back.config.tie_word_embeddings, ckpt.config.tie_word_embeddings, "{name}");
        assert_eq!(back.config.bos_token_id, Some(1));
        for (k, t) in &ckpt.tensors {
            assert_eq!(max_diff(t, &back.tensors[k]), 0.0, "{name} {k}");
        }
    }
}

#[test]
fn qwen3_with_the_default_head_dim_loads() {
    let mut s = SynthSpec::preset("tinystories", 3).unwrap();
    (s.preset, s.arch, s.hidden, s.layers, s.heads, s.kv_heads) = (None, Arch::Qwen3, 64, 1, 2, 1);
    (s.head_dim, s.intermediate, s.vocab) = (Some(128), Some(96), Some(261));
    let ckpt = s.build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write(&ckpt, "qwen3", GgmlDType::F32, &[("qwen3.attention.key_length", Value::U32(128))], &path);
    let back = load(&path).unwrap();
    assert!(back.config.qk_norm && back.config.head_dim == 128);
    assert!(
        back.config.defaults_applied.iter().any(|(k, _)| k == "head_dim"),
        "HF's class default, reported"
    );
    for (k, t) in &ckpt.tensors {
        assert_eq!(max_diff(t, &back.tensors[k]), 0.0, "{k}");
    }
}

#[test]
fn every_supported_ggml_type_dequantizes() {
    // K-quants need rows of 256; one matrix per type, compared with the f32 original within
    // a bound on that type's rounding.
    let w = Tensor::randn(0f32, 1.0, (4, 256), &candle_core::Device::Cpu).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (dt, tol) in [
        (GgmlDType::F32, 0.0),
        (GgmlDType::F16, 2e-3),
        (GgmlDType::BF16, 2e-2),
        (GgmlDType::Q8_0, 0.03),
        (GgmlDType::Q5_0, 0.2),
        (GgmlDType::Q5_1, 0.2),
        (GgmlDType::Q4_0, 0.4),
        (GgmlDType::Q4_1, 0.4),
        (GgmlDType::Q6K, 0.1),
        (GgmlDType::Q5K, 0.2),
        (GgmlDType::Q4K, 0.4),
        (GgmlDType::Q3K, 0.8),
        (GgmlDType::Q2K, 1.5),
    ] {
        let path = dir.path().join(format!("{dt:?}.gguf"));
        let q = QTensor::quantize(&w, dt).unwrap();
        let mut f = std::fs::File::create(&path).unwrap();
        candle_core::quantized::gguf_file::write(&mut f, &[], &[("w", &q)]).unwrap();
        drop(f);
        let mut g = GgufFile::open(&path).unwrap();
        let back = g.dequantize("w").unwrap();
        assert_eq!(back.dims(), &[4, 256]);
        let d = max_diff(&w, &back);
        assert!(d <= tol, "{dt:?}: max |diff| {d}");
    }
}

#[test]
fn truncated_files_and_bad_headers_are_input_errors() {
    let ckpt = synth(Arch::Llama);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write(&ckpt, "llama", GgmlDType::Q8_0, &[], &path);
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let e = load(&cut).unwrap_err().to_string();
    assert!(e.contains("cut.gguf") && e.contains("tensor `") && e.contains("truncated"), "{e}");
    std::fs::write(&cut, &bytes[..200]).unwrap();
    let e = load(&cut).unwrap_err().to_string();
    assert!(e.contains("cut.gguf") && e.contains("GGUF"), "{e}");
    // A zero alignment would divide by zero inside candle's reader.
    write(&ckpt, "llama", GgmlDType::F32, &[("general.alignment", Value::U32(0))], &cut);
    let e = load(&cut).unwrap_err().to_string();
    assert!(e.contains("alignment"), "{e}");
    assert!(!is_gguf(&dir.path().join("absent.gguf")));
    assert!(is_gguf(&path));
}

/// True when `path` is a file that starts with the GGUF magic.
fn is_gguf(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 4];
    path.is_file()
        && std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok()
        && &head == MAGIC
}

#[test]
fn keys_that_change_the_forward_pass_are_refused_by_name() {
    let ckpt = synth(Arch::Llama);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    for (key, v, says) in [
        ("llama.rope.scaling.type", Value::String("linear".into()), "RoPE scaling"),
        ("llama.attention.sliding_window", Value::U32(4), "sliding-window"),
        ("llama.mystery_knob", Value::U32(1), "refuses to guess"),
        ("general.architecture", Value::String("gemma2".into()), "not supported"),
        // Mistral is one of `Arch`'s names, but a GGUF says it only through a llama file's name.
        ("general.architecture", Value::String("mistral".into()), "not supported"),
    ] {
        write(&ckpt, "llama", GgmlDType::F32, &[(key, v)], &path);
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains(says), "{key}: {e}");
    }
    // The neutral value of a refused key is fine.
    write(
        &ckpt,
        "llama",
        GgmlDType::F32,
        &[("llama.rope.scaling.type", Value::String("none".into()))],
        &path,
    );
    load(&path).unwrap();
}

#[test]
fn the_gguf_tokenizer_is_byte_level_bpe_with_its_control_tokens() {
    let ckpt = synth(Arch::Qwen2);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write(&ckpt, "qwen2", GgmlDType::F32, &[], &path);
    let tok = crate::model::tokenizer::Tokenizer::from_gguf(&path).unwrap();
    let enc = tok.encode("<|im_start|>the t", true).unwrap();
    // <|im_start|> whole, "t" "he" (merged), "Ġt" (merged); no BOS added (add_bos_token unset).
    assert_eq!(enc.ids, vec![1, 3 + u32::from(b't'), 260, 259]);
    assert!(!enc.bos_added);
    assert_eq!(tok.decode(&enc.ids[1..]), "the t");
    write(&ckpt, "qwen2", GgmlDType::F32, &[("tokenizer.ggml.add_bos_token", Value::Bool(true))], &path);
    let tok = crate::model::tokenizer::Tokenizer::from_gguf(&path).unwrap();
    let enc = tok.encode("the", true).unwrap();
    assert_eq!(enc.ids[0], 1);
    assert!(enc.bos_added);
    write(&ckpt, "qwen2", GgmlDType::F32, &[("tokenizer.ggml.model", Value::String("llama".into()))], &path);
    let e = crate::model::tokenizer::Tokenizer::from_gguf(&path).err().unwrap().to_string();
    assert!(e.contains("tokenizer.ggml.model `llama`") && e.contains("--tokenizer"), "{e}");
}

/// A GGUF that lies (issue 22): NaN weights, a tensor name given twice. Each is an input error
/// naming the tensor, as safetensors' are.
#[test]
fn nan_weights_and_repeated_tensor_names_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut ckpt = synth(Arch::Qwen2);
    let norm = ckpt.tensors["model.norm.weight"].clone();
    let nan = Tensor::full(f32::NAN, norm.dims(), norm.device()).unwrap();
    ckpt.tensors.insert("model.norm.weight".into(), nan);
    let path = dir.path().join("nan.gguf");
    write(&ckpt, "qwen2", GgmlDType::F32, &[], &path);
    let e = load(&path).unwrap_err().to_string();
    assert!(e.contains("tensor `output_norm.weight`") && e.contains("non-finite"), "{e}");

    let path = dir.path().join("dup.gguf");
    write(&synth(Arch::Qwen2), "qwen2", GgmlDType::F32, &[], &path);
    let mut bytes = std::fs::read(&path).unwrap();
    let from = b"blk.0.attn_k.weight";
    let at = bytes.windows(from.len()).position(|w| w == from).unwrap();
    bytes[at..at + from.len()].copy_from_slice(b"blk.0.attn_q.weight");
    std::fs::write(&path, bytes).unwrap();
    let e = load(&path).unwrap_err().to_string();
    assert!(e.contains("tensor `blk.0.attn_q.weight` is named twice"), "{e}");
}

/// Writes the GGUF reader's fuzz seeds (`fuzz/seeds/gguf_reader/`) when
/// `HEFPROBE_FUZZ_SEEDS=FOLDER` is set: one small model per architecture and storage type,
/// each loaded back before it is kept.
/// `HEFPROBE_FUZZ_SEEDS=fuzz/seeds/gguf_reader cargo test --lib write_fuzz_seeds -- --ignored`
#[test]
#[ignore = "writes fuzz seeds; run by hand"]
fn write_fuzz_seeds() {
    let dir = PathBuf::from(std::env::var("HEFPROBE_FUZZ_SEEDS").expect("HEFPROBE_FUZZ_SEEDS=FOLDER"));
    std::fs::create_dir_all(&dir).unwrap();
    for (arch, name, dt) in [
        (Arch::Llama, "llama", GgmlDType::Q8_0),
        (Arch::Qwen2, "qwen2", GgmlDType::F16),
        (Arch::Qwen3, "qwen3", GgmlDType::Q4_0),
    ] {
        let mut s = SynthSpec::preset("tinystories", 5).unwrap();
        (s.preset, s.arch, s.hidden, s.layers, s.heads, s.kv_heads) = (None, arch, 32, 1, 2, 1);
        (s.head_dim, s.intermediate, s.vocab) = (None, Some(32), Some(261));
        let ckpt = s.build().unwrap();
        let path = dir.join(format!("{name}-{dt:?}.gguf").to_lowercase());
        write(&ckpt, name, dt, &[], &path);
        let back = load(&path).unwrap();
        assert_eq!(back.config.hidden_size, 32, "{}", path.display());
    }
}
