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

/// A 24-block checkpoint (small: hidden 64) and a probe over it, in `dir`.
fn deep(dir: &Path) -> (PathBuf, PathBuf) {
    let ck = common::small_checkpoint_of(dir, "ck24", 512, 24);
    let probe = dir.join("p.toml");
    std::fs::write(
        &probe,
        "version = 1\nname = \"deep\"\nquestion = \"Where does it drift?\"\n[checkpoint]\npath = \"ck24\"\n\
         [inputs]\ntokens = [1, 5, 9, 33, 70, 2, 100, 401, 7, 8, 300, 12]\ndecode = 2\n",
    )
    .unwrap();
    (ck, probe)
}

/// The prefix of blocks 0..=b (the whole model for the last), planted `fault` when given. Float
/// activations (`--quant none`): the search is about the fault, and 16-bit activation noise
/// through 24 random blocks reaches the logits' default bound on its own (measured: a clean a16
/// whole model at cosine 0.9947 against its emulation's 0.9995).
fn prefix(ck: &Path, dir: &Path, b: usize, fault: Option<&str>) {
    let mut c = hefprobe();
    c.args(["synth-hef", "--checkpoint"]).arg(ck);
    c.args(["--calib-random", "--prefill-tokens", "16", "--kv-cache-size", "128", "--quant", "none", "-o"]);
    c.arg(dir.join(format!("prefix-{b}.hef")));
    if b < 23 {
        c.args(["--layers", &format!("0..={b}")]);
    }
    if let Some(f) = fault {
        c.args(["--fault", f]);
    }
    c.assert().success();
}

#[test]
fn bisect_next_names_each_prefix_in_turn_and_finds_the_faulted_block_in_at_most_six_runs() {
    let t = tempfile::tempdir().unwrap();
    let (ck, probe) = deep(t.path());
    let dir = t.path().join("prefixes");
    std::fs::create_dir(&dir).unwrap();
    let mut compiled = Vec::new();
    loop {
        let out = hefprobe().args(["bisect", "next"]).arg(&dir).arg("--probe").arg(&probe).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let Some(at) = text.find("compile the prefix of blocks 0..=") else {
            assert_eq!(out.status.code(), Some(1), "{text}");
            assert!(text.contains("first drifting layer on the device: block 13"), "{text}");
            break;
        };
        let b: usize = text[at + 33..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap();
        assert!(!compiled.contains(&b), "asked twice for {b}");
        compiled.push(b);
        prefix(&ck, &dir, b, Some("shared-softmax@layers=13"));
        assert!(compiled.len() <= 6, "more than ⌈log2 24⌉ + 1 prefixes: {compiled:?}");
    }
    assert_eq!(compiled[0], 23, "the whole stack is asked first");
    // `run` over the same folder gives the same answer and says how many ran.
    hefprobe()
        .args(["bisect", "run"])
        .arg(&dir)
        .arg("--probe")
        .arg(&probe)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("block 13 (measured: layers.13.out; 6 prefix HEFs run)"));
}

#[test]
fn bisect_over_clean_prefixes_exits_0_and_a_bad_folder_is_refused_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let (ck, probe) = deep(t.path());
    let dir = t.path().join("clean");
    std::fs::create_dir(&dir).unwrap();
    for b in [23, 11] {
        prefix(&ck, &dir, b, None);
    }
    let bisect =
        |sub: &str, d: &Path| hefprobe().args(["bisect", sub]).arg(d).arg("--probe").arg(&probe).assert();
    bisect("run", &dir).code(0).stdout(predicate::str::contains("nothing to bisect (1 HEF run)"));
    // A faulted whole model whose next prefix is missing: run names it.
    let gap = t.path().join("gap");
    std::fs::create_dir(&gap).unwrap();
    prefix(&ck, &gap, 23, Some("shared-softmax@layers=13"));
    bisect("run", &gap).code(2).stderr(predicate::str::contains("holds no prefix ending at block 11"));
    // Two HEFs ending at one block.
    std::fs::copy(gap.join("prefix-23.hef"), gap.join("again.hef")).unwrap();
    bisect("run", &gap).code(2).stderr(predicate::str::contains("ends at block 23, as"));
    // A suffix is not a prefix.
    let bad = t.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    hefprobe()
        .args(["synth-hef", "--checkpoint"])
        .arg(&ck)
        .args([
            "--calib-random",
            "--prefill-tokens",
            "16",
            "--kv-cache-size",
            "128",
            "--layers",
            "4..=23",
            "-o",
        ])
        .arg(bad.join("s.hef"))
        .assert()
        .success();
    bisect("run", &bad).code(2).stderr(predicate::str::contains("a prefix HEF starts at block 0"));
    // A FIFO named like a HEF is refused, never read (the read would block).
    let fifo_dir = t.path().join("fifo");
    std::fs::create_dir(&fifo_dir).unwrap();
    let made = std::process::Command::new("mkfifo").arg(fifo_dir.join("p.hef")).status();
    if made.is_ok_and(|s| s.success()) {
        bisect("run", &fifo_dir)
            .code(2)
            .stderr(predicate::str::contains("is a FIFO (named pipe), not a regular file"));
    }
    hefprobe()
        .args(["bisect", "plan", "--checkpoint"])
        .arg(&ck)
        .assert()
        .success()
        .stdout(predicate::str::contains("at most 6 prefix HEFs run"))
        .stdout(predicate::str::contains("end_node_names"));
}

#[test]
fn a_suffix_hef_fed_the_reference_fails_at_its_own_faulted_block_and_one_after_it_is_clean() {
    let t = tempfile::tempdir().unwrap();
    let at = hef(t.path(), "s3.hef", false, &["--layers", "3..=5", "--expose", "layers.*.out"]);
    run(&at, "")
        .code(1)
        .stdout(predicate::str::contains("first drift at layers.3."))
        .stdout(predicate::str::contains("best explanation: shared-softmax@layers=3"));
    // A declared first block must be the HEF's own.
    run(&at, ",first_layer=2")
        .code(2)
        .stderr(predicate::str::contains("the simulated HEF starts at block 3"));
    let after = hef(t.path(), "s4.hef", false, &["--layers", "4..=5", "--expose", "layers.*.out"]);
    run(&after, "").code(0).stdout(predicate::str::contains("no drift beyond thresholds"));
}

/// The emulator's capture of the shared-softmax probe's inputs, with `fault` (none: clean), as
/// a DFC emulator dump stands in for it: its `.npz`.
fn emulator_dump(dir: &Path, fault: &str) -> PathBuf {
    let caps = dir.join(format!("caps-{}", fault.len()));
    let backend = if fault.is_empty() { "emulator".to_string() } else { format!("emulator={fault}") };
    hefprobe()
        .arg("run")
        .arg(probe())
        .args(["--no-explain", "--backend", &backend, "--save-captures"])
        .arg(&caps)
        .assert()
        .code(predicate::in_iter([0, 1]));
    std::fs::read_dir(&caps)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !p.ends_with("reference.npz"))
        .expect("the emulator's capture")
}

#[test]
fn beside_an_emulator_dump_the_device_shows_only_what_the_emulator_did_not_compute() {
    let t = tempfile::tempdir().unwrap();
    let h = hef(t.path(), "d.hef", false, &["--expose", "layers.*.out,layers.3.attn.probs"]);
    let three = |dump: &Path| {
        let p = t.path().join("three.toml");
        std::fs::write(
            &p,
            format!(
                "version = 1\nname = \"three\"\nquestion = \"q\"\n[checkpoint]\nsynth = \"tinystories\"\n\
                 [inputs]\ntext = \"Once upon a time there was a little robot\"\ndecode = 4\n\
                 [[backend]]\nname = \"dfc\"\nkind = \"dump\"\npath = \"{}\"\n\
                 [[backend]]\nname = \"device\"\nkind = \"hef\"\npath = \"{}\"\nbeside = \"dfc\"\n",
                dump.display(),
                h.display()
            ),
        )
        .unwrap();
        let out = hefprobe().arg("run").arg(&p).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The emulator computes the fault too (finding 11): the device adds nothing beyond it.
    let both = three(&emulator_dump(t.path(), "shared-softmax@layers=3"));
    assert!(both.contains("reference vs dfc: prefill: first drift at layers.3.attn.probs"), "{both}");
    assert!(both.contains("reference vs device: prefill: first drift at layers.3.attn.probs"), "{both}");
    assert!(both.contains("dfc vs device: no drift beyond thresholds"), "{both}");
    // Only the device has it: its excess over the emulator is at the fault's tap.
    let device_only = three(&emulator_dump(t.path(), ""));
    assert!(device_only.contains("reference vs dfc: no drift beyond thresholds"), "{device_only}");
    assert!(
        device_only.contains("dfc vs device: prefill: first drift at layers.3.attn.probs"),
        "{device_only}"
    );
}

#[test]
fn exposed_outputs_holding_only_the_last_row_are_compared_with_the_references_last_row() {
    let t = tempfile::tempdir().unwrap();
    let h = hef(t.path(), "l.hef", false, &["--expose", "layers.3.attn.probs,layers.2.out"]);
    let mut parsed = Hef::read(&h).unwrap();
    for g in &mut parsed.groups {
        for o in g.outputs.iter_mut().filter(|o| o.name.contains("/layers.")) {
            (o.shape.width, o.padded.width) = (1, 1);
        }
    }
    let last = t.path().join("last.hef");
    std::fs::write(&last, parsed.to_bytes()).unwrap();
    let out = run(&last, "").code(1).get_output().stdout.clone();
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("prefill: first drift at layers.3.attn.probs"), "{text}");
    let row = text.lines().find(|r| r.contains("│ layers.2.out ")).expect("a measured row");
    assert!(row.contains("measured") && row.contains("ok"), "{row}");
}
