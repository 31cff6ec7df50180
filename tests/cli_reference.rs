//! `hefprobe synth` and `hefprobe reference` from the outside, including every bad input the
//! reference must refuse with a message naming the culprit (exit code 2, never a panic).

mod common;

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::Path;

fn hefprobe() -> Command {
    Command::cargo_bin("hefprobe").unwrap()
}

fn synth(dir: &Path) {
    hefprobe()
        .args(["synth", "--arch", "llama", "--hidden", "32", "--layers", "2", "--heads", "4"])
        .args(["--kv-heads", "2", "--vocab", "300", "-o"])
        .arg(dir)
        .assert()
        .success()
        .stdout(predicate::str::contains("tokenizer.json"));
}

fn reference(dir: &Path, out: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    hefprobe().arg("reference").arg("--checkpoint").arg(dir).arg("-o").arg(out).args(extra).assert()
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let p = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(v.as_object_mut().unwrap());
    std::fs::write(p, v.to_string()).unwrap();
}

#[test]
fn synth_then_reference_writes_phase_tap_keys() {
    let t = tempfile::tempdir().unwrap();
    let ck = t.path().join("ck");
    synth(&ck);
    let out = t.path().join("cap.npz");
    reference(
        &ck,
        &out,
        &["--text", "Once upon", "--decode", "3", "--chunk", "4", "--taps", "logits", "layers.1.attn.*"],
    )
    .success()
    .stdout(predicate::str::contains("no BOS added"))
    .stdout(predicate::str::contains("decode.2"));
    let cap = common::read_npz(&out).unwrap();
    let keys: Vec<String> = cap.keys().map(ToString::to_string).collect();
    assert!(
        keys.iter().any(|k| k == "prefill.0/logits")
            && keys.iter().any(|k| k == "decode.2/layers.1.attn.probs"),
        "{keys:?}"
    );
    assert!(!keys.iter().any(|k| k.ends_with("/embed")), "only selected taps are written");
    // 9 bytes "Once upon" -> chunks 1, 4, 4 (remainder first).
    assert_eq!(cap.get(&"prefill.0/logits".into()).unwrap().shape(), &[1, 300]);
    reference(&ck, &out, &["--text", "Once upon", "--add-special-tokens"])
        .success()
        .stdout(predicate::str::contains("ADDED a BOS"));
}

#[test]
fn bad_inputs_name_the_culprit() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("cap.npz");
    let fresh = |name: &str| {
        let d = t.path().join(name);
        synth(&d);
        d
    };

    let d = fresh("unknown");
    edit_config(&d, |c| {
        c.insert("rope_scaling_factor".into(), 2.into());
    });
    reference(&d, &out, &["--tokens", "1,2"])
        .code(2)
        .stderr(predicate::str::contains("`rope_scaling_factor`"));

    let d = fresh("missing");
    edit_config(&d, |c| {
        c.remove("num_hidden_layers");
    });
    reference(&d, &out, &["--tokens", "1,2"])
        .code(2)
        .stderr(predicate::str::contains("`num_hidden_layers`").and(predicate::str::contains("missing")));

    let d = fresh("rope");
    edit_config(&d, |c| {
        c.insert(
            "rope_parameters".into(),
            serde_json::json!({"rope_theta": 1e4, "rope_type": "longrope", "factor": 4.0}),
        );
    });
    // yarn and linear are supported now; longrope and dynamic are still refused.
    reference(&d, &out, &["--tokens", "1,2"])
        .code(2)
        .stderr(predicate::str::contains("rope_type `longrope`"));

    let d = fresh("act");
    edit_config(&d, |c| {
        c.insert("hidden_act".into(), "gelu_pytorch_tanh".into());
    });
    reference(&d, &out, &["--tokens", "1,2"]).code(2).stderr(predicate::str::contains("gelu_pytorch_tanh"));

    // Weight of the wrong shape: the config says 3 layers' worth of intermediate size.
    let d = fresh("shape");
    edit_config(&d, |c| {
        c.insert("intermediate_size".into(), 96.into());
    });
    reference(&d, &out, &["--tokens", "1,2"])
        .code(2)
        .stderr(predicate::str::contains("mlp.gate_proj.weight").and(predicate::str::contains("shape")));

    let d = fresh("tensor");
    edit_config(&d, |c| {
        c.insert("num_hidden_layers".into(), 3.into());
    });
    reference(&d, &out, &["--tokens", "1,2"])
        .code(2)
        .stderr(predicate::str::contains("`model.layers.2.").and(predicate::str::contains("missing")));

    let d = fresh("truncated");
    let st = d.join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() / 2]).unwrap();
    reference(&d, &out, &["--tokens", "1,2"])
        .code(2)
        .stderr(predicate::str::contains("model.safetensors").and(predicate::str::contains("truncated")));
    std::fs::write(&st, b"\xff\xff\xff\xff\xff\xff\xff\x7fgarbage").unwrap();
    reference(&d, &out, &["--tokens", "1,2"]).code(2).stderr(predicate::str::contains("corrupt"));

    let d = fresh("ids");
    reference(&d, &out, &["--tokens", "1,300"])
        .code(2)
        .stderr(predicate::str::contains("token id 300").and(predicate::str::contains("300 tokens")));
    reference(&d, &out, &["--tokens", "1,2", "--decode-tokens", "5,999"])
        .code(2)
        .stderr(predicate::str::contains("token id 999"));

    edit_config(&d, |c| {
        c.insert("max_position_embeddings".into(), 8.into());
    });
    reference(&d, &out, &["--tokens", "1,2,3,4,5,6", "--decode", "4"])
        .code(2)
        .stderr(predicate::str::contains("max_position_embeddings = 8"));

    reference(&t.path().join("nowhere"), &out, &["--tokens", "1"])
        .code(2)
        .stderr(predicate::str::contains("nowhere").and(predicate::str::contains("not found")));

    reference(&d, &out, &["--tokens", "1", "--taps", "layer.0.*"])
        .code(2)
        .stderr(predicate::str::contains("`layer.0.*` selects no tap"));
}

#[test]
fn absurd_dimensions_and_nonfinite_weights_exit_2_naming_the_culprit() {
    // Issue 11: a tiny config.json claiming a huge model aborted on allocation, and NaN
    // weights gave exit 0 with "next token 0".
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("cap.npz");
    let d = t.path().join("ck");
    synth(&d);
    for (key, big) in
        [("num_hidden_layers", 1_000_000_000u64), ("hidden_size", 1_000_000), ("vocab_size", 1_000_000_000)]
    {
        let original = std::fs::read_to_string(d.join("config.json")).unwrap();
        edit_config(&d, |c| {
            c.insert(key.into(), big.into());
        });
        reference(&d, &out, &["--tokens", "1,2"])
            .code(2)
            .stderr(predicate::str::contains(format!("`{key}`")).and(predicate::str::contains("disagree")));
        std::fs::write(d.join("config.json"), original).unwrap();
    }

    let mut ck = hefprobe::model::Checkpoint::load(&d).unwrap();
    let name = "model.layers.1.mlp.up_proj.weight";
    let t0 = ck.tensors[name].clone();
    let mut v: Vec<f32> = t0.flatten_all().unwrap().to_vec1().unwrap();
    v[5] = f32::NAN;
    v[7] = f32::INFINITY;
    ck.tensors.insert(name.into(), candle_core::Tensor::from_vec(v, t0.dims(), t0.device()).unwrap());
    for dtype in [candle_core::DType::F32, candle_core::DType::BF16] {
        ck.save(&d, dtype).unwrap();
        reference(&d, &out, &["--tokens", "1,2"]).code(2).stderr(
            predicate::str::contains(format!("`{name}`"))
                .and(predicate::str::contains("2 non-finite values"))
                .and(predicate::str::contains("index 5")),
        );
    }
}
