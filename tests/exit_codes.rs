//! The exit-code contract, one test per command (docs/BAD-INPUT.md, "Exit codes"): 0 within thresholds,
//! 1 drift or a failed check, 2 input or usage error, 3 device or runtime error. Every code a
//! command can end with is driven here through the binary, with the message that goes with it.

mod common;

use common::{hefprobe, small_checkpoint};
use hefprobe::inputs::InputSet;
use predicates::prelude::*;
use std::path::{Path, PathBuf};

/// A 2-layer llama the size of a unit test, as a probe's synth overrides.
const TINY: &str = "synth = \"tinystories\"\nhidden = 64\nlayers = 2\nheads = 4\nkv_heads = 2\nvocab = 512";

fn probe(dir: &Path, name: &str, backend: &str, extra: &str) -> PathBuf {
    let p = dir.join(format!("{name}.toml"));
    let text = format!(
        "version = 1\nname = \"{name}\"\nquestion = \"q?\"\n[checkpoint]\n{TINY}\n[inputs]\ntokens = [5, 9, 44, 120, 7]\n\
         decode = 2\n{backend}\n{extra}\n"
    );
    std::fs::write(&p, text).unwrap();
    p
}

fn emulator(faults: &str) -> String {
    format!("[[backend]]\nname = \"device\"\nkind = \"emulator\"\nfaults = [{faults}]")
}

fn synth_small(dir: &Path) -> PathBuf {
    small_checkpoint(dir, "small", 512)
}

fn synth_hef(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let h = dir.join(name);
    hefprobe().args(["synth-hef", "--synth", "tinystories"]).args(extra).arg("-o").arg(&h).assert().code(0);
    h
}

/// A simulated HEF whose "device" computes fewer logits than its output stream holds: the
/// device answers with the wrong number of values, a device error (exit 3).
fn broken_device_hef(dir: &Path) -> PathBuf {
    let h = synth_hef(dir, "broken.hef", &[]);
    let mut hef = hefprobe::hef::Hef::read(&h).unwrap();
    let sim = hef.resources.iter_mut().find(|r| r.name == "hefprobe-sim.json").unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&sim.data).unwrap();
    v["checkpoint"]["synth"]["vocab"] = 16000.into();
    // Its recorded calibration prompts hold ids of the full vocabulary: without them the
    // device calibrates on random ids of its own (the device error is what is tested here).
    v.as_object_mut().unwrap().remove("calibration");
    // The writer recomputes the resource's XXH3 as HailoRT checks it.
    sim.data = serde_json::to_vec(&v).unwrap();
    std::fs::write(&h, hef.to_bytes()).unwrap();
    h
}

/// A simulated HEF of the reference's own checkpoint whose output streams are wider than the
/// logits its "device" computes: the device answers with the wrong number of values (exit 3),
/// while the checkpoint check before it passes.
fn wide_output_hef(dir: &Path) -> PathBuf {
    let h = synth_hef(dir, "wide.hef", &[]);
    let mut hef = hefprobe::hef::Hef::read(&h).unwrap();
    for g in &mut hef.groups {
        for s in &mut g.outputs {
            s.shape.features += 16;
            s.padded.features += 16;
        }
    }
    std::fs::write(&h, hef.to_bytes()).unwrap();
    h
}

/// A simulated HEF whose embeddings inputs (input_layer1, as synth-hef names them) claim 0
/// features: a damaged stream info, refused by name (it was a division by zero).
fn zero_feature_embeddings_hef(dir: &Path) -> PathBuf {
    let h = synth_hef(dir, "zero-features.hef", &[]);
    let mut hef = hefprobe::hef::Hef::read(&h).unwrap();
    for s in
        hef.groups.iter_mut().flat_map(|g| g.inputs.iter_mut()).filter(|s| s.name.ends_with("input_layer1"))
    {
        s.shape.features = 0;
        s.padded.features = 0;
    }
    std::fs::write(&h, hef.to_bytes()).unwrap();
    h
}

#[test]
fn embeddings_of_zero_features_exit_2_naming_the_input() {
    let t = tempfile::tempdir().unwrap();
    hefprobe()
        .arg("diagnose")
        .arg(zero_feature_embeddings_hef(t.path()))
        .args(["--synth", "tinystories", "--tokens", "1,2,3,4"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("input_layer1"))
        .stderr(predicate::str::contains("0 features"));
}

fn inputs_npz(dir: &Path, prompt: Vec<u32>) -> PathBuf {
    let p = dir.join("inputs.npz");
    InputSet::new(prompt).to_npz(&p, false).unwrap();
    p
}

#[test]
fn synth_exits_0_or_2() {
    let t = tempfile::tempdir().unwrap();
    synth_small(t.path());
    hefprobe()
        .args(["synth", "--preset", "tinystories", "--heads", "0", "-o"])
        .arg(t.path().join("x"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--heads 0"));
}

#[test]
fn reference_exits_0_or_2() {
    let t = tempfile::tempdir().unwrap();
    let ck = synth_small(t.path());
    let out = t.path().join("ref.npz");
    hefprobe()
        .args(["reference", "--checkpoint"])
        .arg(&ck)
        .args(["--tokens", "1,2,3", "-o"])
        .arg(&out)
        .assert()
        .code(0);
    hefprobe()
        .args(["reference", "--checkpoint"])
        .arg(&ck)
        .args(["--tokens", "1,2,3", "--taps", "logit", "-o"])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("`logit`").and(predicate::str::contains("did you mean `logits`")));
}

#[test]
fn run_exits_0_1_2_or_3() {
    let t = tempfile::tempdir().unwrap();
    let clean = probe(t.path(), "clean", &emulator(""), "");
    hefprobe()
        .arg("run")
        .arg(&clean)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("no drift beyond thresholds"));
    let fault = probe(t.path(), "fault", &emulator("\"shared-softmax@layers=0\""), "");
    hefprobe().arg("run").arg(&fault).arg("--no-explain").assert().code(1);
    hefprobe()
        .arg("run")
        .arg(&clean)
        .args(["--threshold", "kl_mean=-1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--threshold `kl_mean=-1`"));
    let hef = broken_device_hef(t.path());
    let p = t.path().join("dev.toml");
    std::fs::write(
        &p,
        // The probe's reference is the checkpoint the broken HEF names (vocab 16000), so the
        // checkpoint check passes and the device's short answer is what fails.
        "version = 1\nname = \"dev\"\nquestion = \"q?\"\n[checkpoint]\nsynth = \"tinystories\"\nvocab = 16000\n[inputs]\ntokens = [5, 9, 44]\n",
    )
    .unwrap();
    hefprobe()
        .arg("run")
        .arg(&p)
        .arg("--backend")
        .arg(format!("hef={}", hef.display()))
        .assert()
        .code(3)
        .stderr(predicate::str::contains("device:"));
}

#[test]
fn compare_exits_0_1_or_2() {
    let t = tempfile::tempdir().unwrap();
    let ck = synth_small(t.path());
    let a = t.path().join("a.npz");
    hefprobe()
        .args(["reference", "--checkpoint"])
        .arg(&ck)
        .args(["--tokens", "1,2,3", "-o"])
        .arg(&a)
        .assert()
        .code(0);
    hefprobe().arg("compare").arg(&a).arg(&a).assert().code(0);
    let mut cap = common::read_npz(&a).unwrap();
    let mut x = cap.get(&"prefill/logits".into()).unwrap().clone();
    x.iter_mut().for_each(|v| *v = -*v);
    cap.insert("prefill/logits".into(), x);
    let b = t.path().join("b.npz");
    cap.write_npz(&b).unwrap();
    hefprobe().arg("compare").arg(&a).arg(&b).assert().code(1);
    hefprobe()
        .arg("compare")
        .arg(&a)
        .arg(t.path().join("missing.npz"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("missing.npz"));
}

/// explain exits 1 when the observation drifts from the reference beyond the thresholds,
/// whether or not a fault explains it (it used to exit 0).
#[test]
fn explain_exits_0_1_or_2() {
    let t = tempfile::tempdir().unwrap();
    let p = probe(t.path(), "ex", "", "");
    hefprobe()
        .arg("explain")
        .arg(&p)
        .args(["--backend", "emulator", "--fault", "no-lm-head"])
        .assert()
        .code(0);
    hefprobe()
        .arg("explain")
        .arg(&p)
        .args(["--backend", "emulator=shared-softmax@layers=1"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("best explanation: shared-softmax@layers=1"));
    hefprobe()
        .arg("explain")
        .arg(&p)
        .arg("--observed")
        .arg(t.path().join("nowhere.npz"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nowhere.npz"));
}

fn sweep_probe(dir: &Path, quant: &str, head_dim: usize) -> PathBuf {
    let p = dir.join(format!("sweep-{quant}-{head_dim}.toml"));
    std::fs::write(
        &p,
        format!(
            "version = 1\nname = \"s\"\nquestion = \"q?\"\n[checkpoint]\nsynth = \"tinystories\"\nlayers = 2\nvocab = 300\n\
             [inputs]\ntokens = [5, 9, 44, 120, 7, 7, 31]\n[sweep]\nhidden = [64]\nhead_dim = {head_dim}\n\
             quant = [\"{quant}\"]\ngenerate = 4\n"
        ),
    )
    .unwrap();
    p
}

/// sweep exits 1 when a point's teacher-forced logits fail the probe's logits bounds
/// (default cosine ≥ 0.999), as `run` does on the same drift (it used to exit 0).
#[test]
fn sweep_exits_0_1_or_2() {
    let t = tempfile::tempdir().unwrap();
    hefprobe()
        .arg("sweep")
        .arg(sweep_probe(t.path(), "w8a16", 32))
        .assert()
        .code(0)
        .stdout(predicate::str::contains("0 of 1 points drift"));
    hefprobe()
        .arg("sweep")
        .arg(sweep_probe(t.path(), "w4a8", 32))
        .assert()
        .code(1)
        .stdout(predicate::str::contains("FAIL cosine").and(predicate::str::contains("1 of 1 points drift")));
    hefprobe()
        .arg("sweep")
        .arg(sweep_probe(t.path(), "w8a16", 0))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("[sweep] key `head_dim`"));
}

#[test]
fn faults_exits_0_or_2() {
    hefprobe().arg("faults").assert().code(0).stdout(predicate::str::contains("shared-softmax"));
    hefprobe()
        .args(["faults", "--report", "svg=x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--report svg=x: `faults` writes terminal, markdown, json"));
}

#[test]
fn audit_and_synth_hef_exit_0_1_or_2() {
    let t = tempfile::tempdir().unwrap();
    let clean = synth_hef(t.path(), "clean.hef", &[]);
    hefprobe().arg("audit").arg(&clean).assert().code(0);
    // Logits as wide as the hidden size (288) are finding 1, though the embedded tokenizer's
    // 259 ids would let any wider width read as padding.
    let bad = synth_hef(t.path(), "bad.hef", &["--mistake", "missing-lm-head"]);
    hefprobe()
        .arg("audit")
        .arg(&bad)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("logits-width"))
        .stdout(predicate::str::contains("ends before lm_head"));
    let bad = synth_hef(t.path(), "rows.hef", &["--mistake", "full-sequence-output"]);
    hefprobe().arg("audit").arg(&bad).assert().code(1);
    let junk = t.path().join("junk.hef");
    std::fs::write(&junk, b"not a hef at all").unwrap();
    hefprobe().arg("audit").arg(&junk).assert().code(2).stderr(predicate::str::contains("junk.hef"));
    hefprobe()
        .args(["synth-hef", "--checkpoint"])
        .arg(t.path().join("nowhere"))
        .arg("-o")
        .arg(t.path().join("x.hef"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nowhere"));
}

#[test]
fn synth_hef_of_a_small_vocab_checkpoint_passes_its_own_audit() {
    // vocab 256 is below the 259 ids of the byte tokenizer synth-hef embeds: it is cut to the
    // checkpoint's vocabulary, so the clean HEF's tokenizer has no id past its embeddings.
    let t = tempfile::tempdir().unwrap();
    let ck = t.path().join("ck");
    hefprobe()
        .args(["synth", "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4"])
        .args(["--kv-heads", "2", "--vocab", "256", "-o"])
        .arg(&ck)
        .assert()
        .code(0);
    let hef = t.path().join("x.hef");
    hefprobe().args(["synth-hef", "--checkpoint"]).arg(&ck).arg("-o").arg(&hef).assert().code(0);
    hefprobe()
        .arg("audit")
        .arg(&hef)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("embeddings-rows").not());
    hefprobe().arg("audit").arg(&hef).arg("--checkpoint").arg(&ck).assert().code(0);
    let bad = t.path().join("bad.hef");
    hefprobe()
        .args(["synth-hef", "--checkpoint"])
        .arg(&ck)
        .args(["--mistake", "missing-lm-head", "-o"])
        .arg(&bad)
        .assert()
        .code(0);
    hefprobe().arg("audit").arg(&bad).assert().code(1).stdout(predicate::str::contains("logits-width"));
}

#[test]
fn capture_exits_0_2_or_3() {
    let t = tempfile::tempdir().unwrap();
    let hef = synth_hef(t.path(), "ts.hef", &[]);
    let inputs = inputs_npz(t.path(), vec![5, 9, 44]);
    let out = t.path().join("cap.npz");
    let capture = |h: &Path| {
        let mut c = hefprobe();
        c.arg("capture").arg(h).arg("--inputs").arg(&inputs).arg("-o").arg(&out);
        c
    };
    capture(&hef).assert().code(0);
    capture(&t.path().join("missing.hef")).assert().code(2).stderr(predicate::str::contains("missing.hef"));
    capture(&broken_device_hef(t.path())).assert().code(3).stderr(predicate::str::contains("device:"));
}

#[test]
fn diagnose_exits_2_or_3() {
    let t = tempfile::tempdir().unwrap();
    hefprobe()
        .arg("diagnose")
        .arg(t.path().join("missing.hef"))
        .args(["--synth", "tinystories", "--tokens", "1,2,3"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("missing.hef"));
    // A HEF made from another checkpoint is an input error, named, before the device runs.
    hefprobe()
        .arg("diagnose")
        .arg(broken_device_hef(t.path()))
        .args(["--synth", "tinystories", "--tokens", "1,2,3,4"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("was made from checkpoint"));
    hefprobe()
        .arg("diagnose")
        .arg(wide_output_hef(t.path()))
        .args(["--synth", "tinystories", "--tokens", "1,2,3,4"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("device:"));
    // A format diagnose does not write, and an output folder that does not exist: exit 2,
    // naming the flag, before the device is opened (this HEF's device would exit 3).
    hefprobe()
        .arg("diagnose")
        .arg(wide_output_hef(t.path()))
        .args(["--synth", "tinystories", "--tokens", "1,2,3,4", "--report", "svg=plots"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--report svg=plots"))
        .stderr(predicate::str::contains("writes terminal, markdown, json"));
    hefprobe()
        .arg("diagnose")
        .arg(wide_output_hef(t.path()))
        .args(["--synth", "tinystories", "--tokens", "1,2,3,4", "--report"])
        .arg(format!("json={}", t.path().join("nowhere/d.json").display()))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nowhere"));
}

#[test]
fn bench_exits_0_or_2() {
    hefprobe()
        .args(["bench", "--preset", "tinystories", "--prompt-len", "4", "--decode", "1", "--reps", "1"])
        .assert()
        .code(0);
    hefprobe().args(["bench", "--preset", "gpt2"]).assert().code(2).stderr(predicate::str::contains("gpt2"));
}

#[test]
fn usage_errors_exit_2_and_help_exits_0() {
    hefprobe().arg("--help").assert().code(0);
    hefprobe().arg("no-such-command").assert().code(2);
    hefprobe()
        .args(["--max-memory", "lots", "faults"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("`lots` is not a size"));
}
