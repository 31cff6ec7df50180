//! The width faults of finding 16 (`tile-sum`, `norm-acc`, `norm-width`, `tile-scale`): each a
//! bit-exact no-op on a 288-wide model and a change on a 576-wide one; each planted in a
//! simulated HEF of a 576-wide checkpoint and ranked first by `run` with explain. Their
//! independent numpy implementation is checked by python/tests/test_width_reference.py.

mod common;

use common::hefprobe;
use hefprobe::backend::collect;
use hefprobe::backend::decoder::DecoderBackend;
use hefprobe::capture::Capture;
use hefprobe::fault::spec::FaultSpec;
use hefprobe::inputs::{DecodeSpec, InputSet};
use hefprobe::model::synth::SynthSpec;
use hefprobe::model::Checkpoint;
use hefprobe::tap::TapSelection;
use predicates::prelude::*;
use std::path::Path;

/// Each fault as a no-op at 288 and as it acts at 576: W = 512 for the tiled ones. norm-acc has
/// no tile: BITS 24 cannot saturate a row of 288 8-bit codes (288·127² < 2^23), and on these
/// rows (4 massive channels, so most codes are small) only BITS 16 saturates at 576.
const FAULTS: &[(&str, &str)] = &[
    ("tile-sum:512", "tile-sum:512"),
    ("tile-sum:512,mode=saturate,bits=16", "tile-sum:512,mode=saturate,bits=16"),
    ("norm-acc:24", "norm-acc:16"),
    ("norm-width:512", "norm-width:512"),
    ("norm-width:512,pad", "norm-width:512,pad"),
    ("tile-scale:512", "tile-scale:512"),
];

/// A 2-layer llama of this width (SmolLM2's head_dim 64 and 3:1 GQA at 576; TinyStories' 6
/// heads of 48 at 288) with 4 massive-activation channels, so rows are not flat.
fn model(hidden: usize) -> Checkpoint {
    let mut s = SynthSpec::preset(if hidden == 576 { "smollm2-135m" } else { "tinystories" }, 3).unwrap();
    s.layers = 2;
    s.vocab = Some(512);
    s.massive_channels = 4;
    s.build().unwrap()
}

fn inputs() -> InputSet {
    let mut i = InputSet::new((0..10).map(|k| (k * 53 + 11) % 512).collect());
    i.decode = DecodeSpec::Forced(vec![7, 300]);
    i
}

fn capture(ckpt: &Checkpoint, faults: &[FaultSpec]) -> Capture {
    let mut e = DecoderBackend::emulator("emu", ckpt, faults, None).unwrap();
    collect(&mut e, &inputs(), &TapSelection::all(), None).capture
}

fn differing(a: &Capture, b: &Capture) -> Vec<String> {
    let mut out = Vec::new();
    for (k, x) in a.iter() {
        let y = b.get(k).unwrap_or_else(|| panic!("{k:?} missing"));
        let same = x.shape() == y.shape() && x.iter().zip(y.iter()).all(|(p, q)| p.to_bits() == q.to_bits());
        if !same {
            out.push(format!("{k:?}"));
        }
    }
    out
}

#[test]
fn each_width_fault_is_a_bit_exact_no_op_at_288_and_changes_576() {
    for hidden in [288, 576] {
        let ckpt = model(hidden);
        assert_eq!(ckpt.config.hidden_size, hidden);
        let clean = capture(&ckpt, &[]);
        for (at_288, at_576) in FAULTS {
            let f = if hidden == 288 { at_288 } else { at_576 };
            let faulty = capture(&ckpt, &[FaultSpec::parse(f).unwrap()]);
            let diff = differing(&clean, &faulty);
            eprintln!("hidden {hidden} {f}: {} of {} taps differ", diff.len(), clean.len());
            if hidden == 288 {
                assert!(diff.is_empty(), "{f} changed the 288-wide model at {diff:?}");
            } else {
                assert!(!diff.is_empty(), "{f} left the 576-wide model unchanged");
            }
        }
    }
}

#[test]
fn norm_acc_in_narrow_accumulators_and_the_softmax_target_act() {
    let ckpt = model(576);
    let clean = capture(&ckpt, &[]);
    for f in ["norm-acc:16", "norm-acc:16,target=softmax"] {
        let faulty = capture(&ckpt, &[FaultSpec::parse(f).unwrap()]);
        let diff = differing(&clean, &faulty);
        assert!(!diff.is_empty(), "{f} left the model unchanged");
        if f.ends_with("softmax") {
            // The first tap it changes is an attention probability; every norm before it is clean.
            assert!(diff[0].contains("Probs") || diff.iter().any(|d| d.contains("Probs")), "{diff:?}");
        }
    }
    // Layers: narrowed to layer 1, layer 0's taps stay bit-exact.
    let faulty = capture(&ckpt, &[FaultSpec::parse("norm-width:512@layers=1").unwrap()]);
    let diff = differing(&clean, &faulty);
    assert!(
        !diff.is_empty() && diff.iter().all(|d| !d.contains("Layer(0,") && !d.contains("Embed")),
        "{diff:?}"
    );
}

#[test]
fn bad_width_parameters_exit_2_naming_the_parameter() {
    for (fault, says) in [
        ("tile-sum:500", "not a multiple of 64"),
        ("norm-acc:40", "`bits` = 40 is out of range; valid: 16..=32"),
        ("norm-width:512,middle", "`variant` = `middle` is not valid"),
    ] {
        hefprobe()
            .args(["synth-hef", "--synth", "tinystories", "--fault", fault, "-o", "never-written.hef"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(says).and(predicate::str::contains(fault)));
    }
}

/// `hefprobe synth` of a 2-layer, 576-wide SmolLM2-shaped checkpoint into `dir`.
fn synth_576(dir: &Path) -> std::path::PathBuf {
    let ck = dir.join("ck576");
    hefprobe()
        .args([
            "synth",
            "--preset",
            "smollm2-135m",
            "--layers",
            "2",
            "--vocab",
            "512",
            "--massive-channels",
            "4",
        ])
        .args(["--seed", "3", "-o"])
        .arg(&ck)
        .assert()
        .success();
    ck
}

/// Each width fault planted in a simulated HEF (a16, the synth-hef default) at layer 1 of a
/// 576-wide checkpoint: `run` locates the drift and explain, searching the whole catalog with
/// its width grid, ranks the planted fault first (from the device's logits alone).
#[test]
fn each_width_fault_planted_in_a_simulated_hef_is_ranked_first_by_run() {
    let t = tempfile::tempdir().unwrap();
    let ck = synth_576(t.path());
    let probe = t.path().join("width.toml");
    std::fs::write(
        &probe,
        format!(
            "version = 1\nname = \"width\"\nquestion = \"Which width fault does the HEF compute?\"\nfinding = 16\n\n\
             [checkpoint]\npath = {:?}\n\n[inputs]\ntokens = [11, 64, 117, 170, 223, 276, 329, 382, 435, 488]\ndecode = 2\n\n[explain]\n",
            ck.display().to_string()
        ),
    )
    .unwrap();
    for fault in [
        "tile-sum:512@layers=1",
        "norm-acc:16@layers=1",
        "norm-width:256,pad@layers=1",
        "tile-scale:384@layers=1",
    ] {
        let h = t.path().join(format!("{}.hef", fault.replace([':', ',', '@', '='], "_")));
        hefprobe()
            .arg("synth-hef")
            .arg("--checkpoint")
            .arg(&ck)
            .args([
                "--calib-random",
                "--prefill-tokens",
                "16",
                "--kv-cache-size",
                "128",
                "--fault",
                fault,
                "-o",
            ])
            .arg(&h)
            .assert()
            .success();
        let out =
            hefprobe().arg("run").arg(&probe).arg("--backend").arg(format!("hef={}", h.display())).assert();
        let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
        assert!(text.contains(&format!("best explanation: {fault}")), "{fault}:\n{text}");
    }
}
