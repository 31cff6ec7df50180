//! Every layer measured on the device (simulated): HEF outputs beyond the logits become taps,
//! by the naming convention or an output map, quantized as HailoRT returns them.

mod common;

use common::hefprobe;
use hefprobe::hef::Hef;
use predicates::prelude::*;
use std::path::{Path, PathBuf};

fn probe() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/shared-softmax.toml")
}

/// A TinyStories HEF (shared softmax in layer 3 unless `clean`) written with `extra`.
fn hef(dir: &Path, name: &str, clean: bool, extra: &[&str]) -> PathBuf {
    let h = dir.join(name);
    let fault: &[&str] = if clean { &[] } else { &["--fault", "shared-softmax@layers=3"] };
    hefprobe()
        .args(["synth-hef", "--synth", "tinystories", "-o"])
        .arg(&h)
        .args(fault)
        .args(extra)
        .assert()
        .success();
    h
}

fn run(h: &Path, backend_extra: &str) -> assert_cmd::assert::Assert {
    hefprobe()
        .arg("run")
        .arg(probe())
        .arg("--backend")
        .arg(format!("hef={}{backend_extra}", h.display()))
        .assert()
}

#[test]
fn exposed_outputs_locate_the_fault_from_measured_taps_with_per_head_figures() {
    let t = tempfile::tempdir().unwrap();
    let h = hef(t.path(), "x.hef", false, &["--expose", "layers.*.out,layers.3.attn.probs"]);
    run(&h, "")
        .code(1)
        .stdout(predicate::str::contains("prefill: first drift at layers.3.attn.probs"))
        .stdout(predicate::str::contains("worst heads"))
        .stdout(predicate::str::contains("per-head sums ≠ 1"))
        .stdout(predicate::str::contains("measured on the device"))
        .stdout(predicate::str::contains("best explanation: shared-softmax@layers=3"));
    // Layers before the fault are measured clean: the located layer is the fault's, not inferred.
    let out = run(&h, "").get_output().stdout.clone();
    let text = String::from_utf8_lossy(&out);
    for l in 0..3 {
        let row = text.lines().find(|r| r.contains(&format!("│ layers.{l}.out "))).expect("a measured row");
        assert!(row.contains("ok"), "layer {l} before the fault: {row}");
    }
}

#[test]
fn per_tensor_quantized_exposed_outputs_locate_the_same_tap_and_a_clean_hef_passes() {
    let t = tempfile::tempdir().unwrap();
    let h =
        hef(t.path(), "pt.hef", false, &["--expose", "layers.3.attn.probs", "--expose-quant", "per-tensor"]);
    run(&h, "").code(1).stdout(predicate::str::contains("first drift at layers.3.attn.probs"));
    let clean = hef(t.path(), "clean.hef", true, &["--expose", "layers.*.out,layers.*.attn.probs"]);
    run(&clean, "")
        .code(0)
        .stdout(predicate::str::contains("no drift beyond thresholds"))
        .stdout(predicate::str::contains("measured on the device"));
}

#[test]
fn an_output_map_names_outputs_and_every_bad_entry_is_refused_naming_it() {
    let t = tempfile::tempdir().unwrap();
    // Outputs the convention would not know: rename the exposed ones.
    let h = hef(t.path(), "m.hef", false, &["--expose", "layers.3.attn.probs"]);
    let mut parsed = Hef::read(&h).unwrap();
    for g in &mut parsed.groups {
        for o in &mut g.outputs {
            o.name = o.name.replace("layers.3.attn.probs", "softmax7");
        }
    }
    let renamed = t.path().join("renamed.hef");
    std::fs::write(&renamed, parsed.to_bytes()).unwrap();
    // Without a map the outputs are unnamed: taken as logits, whose width then disagrees.
    let map = t.path().join("map.toml");
    std::fs::write(
        &map,
        "[taps]\n\"hefprobe_sim__prefill/softmax7\" = { tap = \"layers.3.attn.probs\", squeeze = true }\n\
         \"hefprobe_sim__tbt/softmax7\" = { tap = \"layers.3.attn.probs\", reshape = [1, -1] }\n",
    )
    .unwrap();
    run(&renamed, &format!(",map={}", map.display()))
        .code(1)
        .stdout(predicate::str::contains("first drift at layers.3.attn.probs"))
        .stdout(predicate::str::contains("named by"));
    let bad = [
        ("\"nope/softmax7\" = \"layers.3.attn.probs\"", "points at nothing"),
        ("\"hefprobe_sim__prefill/softmax7\" = \"layers.3.out\"", "rows of 288 values"),
        ("\"hefprobe_sim__prefill/softmax7\" = \"decode.0/layers.3.attn.probs\"", "names phase decode.0"),
        ("\"hefprobe_sim__prefill/softmax7\" = \"embed\"", "cannot be a HEF's output"),
    ];
    for (entry, why) in bad {
        std::fs::write(&map, format!("[taps]\n{entry}\n")).unwrap();
        run(&renamed, &format!(",map={}", map.display()))
            .code(2)
            .stderr(predicate::str::contains("map.toml entry").and(predicate::str::contains(why)));
    }
}

#[test]
fn damaged_exposed_outputs_are_input_errors_naming_the_output() {
    let t = tempfile::tempdir().unwrap();
    let h = hef(t.path(), "q.hef", true, &["--expose", "layers.1.out"]);
    let mut parsed = Hef::read(&h).unwrap();
    let o = parsed.groups[0].outputs.iter_mut().find(|o| o.name.ends_with("/layers.1.out")).unwrap();
    o.quant_per_feature[5].scale = 0.0;
    let zero = t.path().join("zero.hef");
    std::fs::write(&zero, parsed.to_bytes()).unwrap();
    run(&zero, "")
        .code(2)
        .stderr(predicate::str::contains("output `hefprobe_sim__prefill/layers.1.out`"))
        .stderr(predicate::str::contains("quant info 5 has scale 0"));
    // An output named as a tap whose size is not the tap's.
    let mut parsed = Hef::read(&h).unwrap();
    let o = parsed.groups[0].outputs.iter_mut().find(|o| o.name.ends_with("/layers.1.out")).unwrap();
    o.name = o.name.replace("layers.1.out", "layers.1.attn.probs");
    let wrong = t.path().join("wrong.hef");
    std::fs::write(&wrong, parsed.to_bytes()).unwrap();
    run(&wrong, "")
        .code(2)
        .stderr(predicate::str::contains("is named as tap layers.1.attn.probs"))
        .stderr(predicate::str::contains("map it with an output map"));
    hefprobe()
        .args(["synth-hef", "--synth", "tinystories", "--expose", "embed", "-o"])
        .arg(t.path().join("e.hef"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--expose `embed` selects no tap"));
}
