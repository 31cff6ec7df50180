//! `hefprobe run` and `hefprobe compare` end to end: exit codes, located drift, local vs
//! cumulative views, and bad inputs.

mod common;

use assert_cmd::Command;
use hefprobe::backend::decoder::DecoderBackend;
use hefprobe::capture::Capture;
use hefprobe::compare::thresholds::Thresholds;
use hefprobe::compare::{compare, locate, Settings, View};
use hefprobe::fault::Fault;
use hefprobe::model::hooks::{Hooks, StepCtx};
use hefprobe::tap::{LayerTap, Tap, TapSelection};
use predicates::prelude::*;
use std::path::{Path, PathBuf};

fn hefprobe() -> Command {
    Command::cargo_bin("hefprobe").unwrap()
}

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn capture(dir: &Path) -> PathBuf {
    let out = dir.join("ref.npz");
    hefprobe()
        .args(["reference", "--checkpoint"])
        .arg(repo("references/llama-tied"))
        .args(["--tokens", "3,17,99,4,250,7", "--decode", "2", "-o"])
        .arg(&out)
        .assert()
        .success();
    out
}

#[test]
fn compare_names_exactly_the_perturbed_tap_first() {
    let t = tempfile::tempdir().unwrap();
    let a = capture(t.path());
    let mut cap = common::read_npz(&a).unwrap();
    let key = "prefill/layers.1.attn.out";
    let mut x = cap.get(&key.into()).unwrap().clone();
    x.iter_mut().step_by(3).for_each(|v| *v += 0.5);
    cap.insert(key.into(), x);
    let b = t.path().join("perturbed.npz");
    cap.write_npz(&b).unwrap();
    hefprobe()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("ref vs perturbed: prefill: first drift at layers.1.attn.out —"));
}

#[test]
fn compare_against_itself_passes_with_every_cosine_one() {
    let t = tempfile::tempdir().unwrap();
    let a = capture(t.path());
    let json = t.path().join("r.json");
    hefprobe()
        .arg("compare")
        .arg(&a)
        .arg(&a)
        .arg("--report")
        .arg(format!("json={}", json.display()))
        .assert()
        .code(0);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let rows = v["comparisons"][0]["rows"].as_array().unwrap();
    assert!(rows.len() > 60);
    for r in rows {
        assert_eq!(r["metrics"]["cosine"].as_f64(), Some(1.0), "{}", r["tap"]);
    }
    assert_eq!(v["schema"], "hefprobe.report/1");
}

/// A dump under its recorder's names and layout ([1, 1, T, F] logits), mapped back through
/// `--map` (read one array at a time into a temporary file): the same figures as the capture.
#[test]
fn compare_through_a_name_map_equals_the_capture_it_was_made_from() {
    let t = tempfile::tempdir().unwrap();
    let a = capture(t.path());
    let cap = common::read_npz(&a).unwrap();
    let logits = cap.get(&"prefill/logits".into()).unwrap().clone();
    let mut dump = Capture::default();
    let nhwc =
        logits.clone().into_shape_with_order(ndarray::IxDyn(&[1, 1, logits.shape()[0], logits.shape()[1]]));
    dump.insert("net/output".into(), nhwc.unwrap());
    dump.insert("net/block1".into(), cap.get(&"prefill/layers.1.out".into()).unwrap().clone());
    let (dpath, map) = (t.path().join("dump.npz"), t.path().join("map.toml"));
    hefprobe::capture::save(&dump, &dpath, false).unwrap();
    std::fs::write(
        &map,
        "[taps]\n\"net/output\" = { tap = \"logits\", squeeze = true }\n\"net/block1\" = \"layers.1.out\"\n",
    )
    .unwrap();
    let json = t.path().join("m.json");
    hefprobe()
        .env("TMPDIR", t.path())
        .arg("compare")
        .arg(&a)
        .arg(&dpath)
        .arg("--map")
        .arg(&map)
        .arg("--report")
        .arg(format!("json={}", json.display()))
        .assert()
        .code(0);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let checked: Vec<&serde_json::Value> = v["comparisons"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["metrics"]["cosine"].as_f64().is_some())
        .collect();
    let taps: Vec<&str> = checked.iter().map(|r| r["tap"].as_str().unwrap()).collect();
    assert_eq!(taps.len(), 2, "{taps:?}");
    assert!(taps.contains(&"logits") && taps.contains(&"layers.1.out"), "{taps:?}");
    assert!(checked.iter().all(|r| r["metrics"]["cosine"].as_f64() == Some(1.0)));
    let left: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("hefprobe-compare-"))
        .collect();
    assert!(left.is_empty(), "the mapped temporary file is gone");
}

/// A test hook: perturbs one block's output inside the forward pass.
struct Perturb(usize, hefprobe::fault::spec::FaultSpec);

impl Perturb {
    fn at(layer: usize) -> Self {
        Perturb(layer, hefprobe::fault::spec::FaultSpec::parse(&format!("perturb@layers={layer}")).unwrap())
    }
}

impl Fault for Perturb {
    fn spec(&self) -> &hefprobe::fault::spec::FaultSpec {
        &self.1
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(PerturbHooks(self.0))
    }
}

struct PerturbHooks(usize);

impl Hooks for PerturbHooks {
    fn edit(
        &mut self,
        _: &StepCtx,
        tap: Tap,
        t: candle_core::Tensor,
    ) -> hefprobe::Result<candle_core::Tensor> {
        if tap == Tap::Layer(self.0, LayerTap::Out) {
            return Ok((t.clone() + ((t * 7.0)?.sin()? * 0.5)?)?);
        }
        Ok(t)
    }
}

#[test]
fn local_view_blames_the_perturbed_layer_alone() {
    let ckpt = hefprobe::model::Checkpoint::load(&repo("references/qwen3")).unwrap();
    let model = std::sync::Arc::new(hefprobe::model::Decoder::new(&ckpt).unwrap());
    let mut inputs = hefprobe::inputs::InputSet::new(vec![5, 9, 200, 31, 77]);
    inputs.decode = hefprobe::inputs::DecodeSpec::Forced(vec![12, 40]);
    let all = TapSelection::all();
    let reference =
        hefprobe::backend::collect(&mut DecoderBackend::reference(model), &inputs, &all, None).capture;
    let mut emu = DecoderBackend::with_faults("perturbed", &ckpt, vec![Box::new(Perturb::at(0))]).unwrap();
    let cumulative = hefprobe::backend::collect(&mut emu, &inputs, &all, None).capture;
    let local = hefprobe::backend::collect(&mut emu, &inputs, &all, Some(&reference)).capture;
    let th = Thresholds::default();
    let cum = compare(
        &reference,
        &cumulative,
        ("reference", "p"),
        &Settings { view: View::Cumulative, ..Settings::new(&th) },
    )
    .unwrap();
    let loc = compare(
        &reference,
        &local,
        ("reference", "p"),
        &Settings { view: View::Local, ..Settings::new(&th) },
    )
    .unwrap();
    // Cumulative: layer 0's output and everything after it drifts.
    assert_eq!(locate::locate(&cum)[0].tap.to_string(), "layers.0.out");
    for tap in ["layers.1.attn_norm", "layers.1.out", "final_norm", "logits"] {
        let name = hefprobe::tap::TapName::parse(tap);
        assert!(cum.row(hefprobe::tap::Phase::Prefill, &name).unwrap().failed(), "{tap} drifts cumulatively");
    }
    // Local: only layer 0 fails on its own.
    assert_eq!(locate::blamed_layers(&loc), vec![0]);
    assert!(!loc.row(hefprobe::tap::Phase::Prefill, &hefprobe::tap::Tap::Logits.into()).unwrap().failed());
}

#[test]
fn run_shared_softmax_probe_locates_and_explains() {
    hefprobe()
        .args(["run"])
        .arg(repo("probes/shared-softmax.toml"))
        .assert()
        .code(1)
        .stdout(predicate::str::contains("first drift at layers.0.attn.probs"))
        .stdout(predicate::str::contains("per-head sums ≠ 1"))
        .stdout(predicate::str::contains("best explanation: shared-softmax@layers=0"));
}

/// A drift the thresholds let through but explain attributes to a fault fails the run: the
/// shared-softmax probe with bounds too loose to catch its planted fault passes on the
/// thresholds (without explain, exit 0), and with explain fails naming the fault.
#[test]
fn a_fault_explain_finds_below_the_thresholds_fails_the_run() {
    let t = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo("probes/shared-softmax.toml")).unwrap();
    let loose = "[thresholds.default]\ncosine = 0.0\nflips = 1000000\n\
                 [thresholds.taps.\"layers.*.attn.probs\"]\ncosine = 0.0\nprob_sum_err = 10\n";
    let text = text.replace("[thresholds.default]\ncosine = 0.999\n", loose);
    assert!(text.contains("prob_sum_err = 10"), "the probe's thresholds moved: {text}");
    let probe = t.path().join("loose.toml");
    std::fs::write(&probe, text).unwrap();
    hefprobe()
        .arg("run")
        .arg(&probe)
        .arg("--no-explain")
        .assert()
        .code(0)
        .stdout(predicate::str::contains("no drift beyond thresholds"));
    hefprobe()
        .arg("run")
        .arg(&probe)
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "drifts less than the thresholds, but explain reproduces it with shared-softmax@layers=0",
        ))
        .stdout(predicate::str::contains("best explanation: shared-softmax@layers=0"));
}

#[test]
fn run_writes_every_report_format() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    hefprobe()
        .args(["run", "--no-explain"])
        .arg(repo("probes/shared-softmax.toml"))
        .arg("--report")
        .arg(format!("markdown={}", d.join("r.md").display()))
        .arg("--report")
        .arg(format!("json={}", d.join("r.json").display()))
        .arg("--report")
        .arg(format!("svg={}", d.join("r").display()))
        .assert()
        .code(1);
    let md = std::fs::read_to_string(d.join("r.md")).unwrap();
    assert!(md.contains("| command | `hefprobe run") && md.contains("![r-layers.svg](r-layers.svg)"), "{md}");
    assert!(d.join("r-layers.svg").is_file() && d.join("r-heads-device.svg").is_file());
}

/// An emulator's faults say what they did (a quantizer its weights, sites and clip rates), under
/// the backend's name, as notes of the report.
#[test]
fn an_emulators_quantization_is_noted_in_the_report() {
    let out = hefprobe()
        .args(["run", "--no-explain"])
        .arg(repo("probes/shared-softmax.toml"))
        .args(["--fault", "quant:w8a16"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let note = "note: backend `emulator[quant:w8a16]`:";
    assert!(text.contains(&format!("{note} weights int8, symmetric per output channel")), "{text}");
    assert!(text.contains(&format!("{note} activations int16 affine per tensor at ")), "{text}");
    assert!(text.contains("clip rate"), "{text}");
}

#[test]
fn bad_inputs_exit_2_with_the_culprit_named() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let probe = d.join("p.toml");
    let base = std::fs::read_to_string(repo("probes/shared-softmax.toml")).unwrap();
    std::fs::write(&probe, base.replace("question =", "questoin =")).unwrap();
    hefprobe().arg("run").arg(&probe).assert().code(2).stderr(predicate::str::contains("questoin"));

    std::fs::write(&probe, base.replace("synth = \"tinystories\"", "path = \"no/such/ckpt\"")).unwrap();
    hefprobe()
        .arg("run")
        .arg(&probe)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no/such/ckpt").and(predicate::str::contains("not found")));

    // An npz whose shapes cannot be aligned.
    let a = capture(d);
    let mut cap = common::read_npz(&a).unwrap();
    cap.insert("prefill/logits".into(), ndarray::ArrayD::zeros(ndarray::IxDyn(&[2, 3, 4])));
    let b = d.join("bad.npz");
    cap.write_npz(&b).unwrap();
    hefprobe()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("prefill/logits").and(predicate::str::contains("[2, 3, 4]")));

    // A name map pointing at nothing.
    let map = d.join("m.toml");
    std::fs::write(&map, "[taps]\n\"net/missing\" = \"logits\"\n").unwrap();
    hefprobe()
        .arg("compare")
        .arg(&a)
        .arg(&a)
        .arg("--map")
        .arg(&map)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("net/missing").and(predicate::str::contains("points at nothing")));

    // An unknown fault lists the known ones; a parameter out of range names its range.
    std::fs::write(&probe, base.replace("shared-softmax@layers=0", "shared-sofmax")).unwrap();
    hefprobe().arg("run").arg(&probe).assert().code(2).stderr(
        predicate::str::contains("did you mean `shared-softmax`")
            .and(predicate::str::contains("known faults:")),
    );
    std::fs::write(&probe, base.replace("shared-softmax@layers=0", "shared-softmax@layers=9")).unwrap();
    hefprobe().arg("run").arg(&probe).assert().code(2).stderr(predicate::str::contains("layers 0..=5"));
    std::fs::write(&probe, base.replace("shared-softmax@layers=0", "lm-head-shards:40")).unwrap();
    hefprobe().arg("run").arg(&probe).assert().code(2).stderr(predicate::str::contains("valid: 2..=16"));
}

#[test]
fn checkpoint_flag_replaces_the_probes_checkpoint() {
    // The probe names a synth preset; --checkpoint points it at a folder on disk instead.
    let t = tempfile::tempdir().unwrap();
    let ck = t.path().join("ck");
    hefprobe()
        .args([
            "synth",
            "--arch",
            "qwen2",
            "--hidden",
            "64",
            "--layers",
            "2",
            "--heads",
            "4",
            "--kv-heads",
            "2",
        ])
        .args(["--vocab", "300", "--seed", "5", "--out"])
        .arg(&ck)
        .assert()
        .success();
    let json = t.path().join("r.json");
    hefprobe()
        .arg("run")
        .arg(repo("probes/shared-softmax.toml"))
        .arg("--checkpoint")
        .arg(&ck)
        .arg("--no-explain")
        .arg("--report")
        .arg(format!("json={}", json.display()))
        .assert()
        .code(1);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let source = r["checkpoint"]["source"].as_str().unwrap();
    assert_eq!(source, ck.display().to_string());
    assert_eq!(r["checkpoint"]["arch"], "qwen2");
}

/// A 6-layer model the size of a unit test on 96 tokens, the taps `taps` (TOML), an emulator
/// with a fault in layer 1. Held in memory its captures plan 13.3 MiB with every tap (11.5 MiB
/// with probs and logits); spilled to disk the run plans ~6 MiB (the weights twice, one tap at
/// a time): an 8 MiB budget allows only the spill.
fn spill_probe(dir: &Path, name: &str, taps: &str) -> PathBuf {
    let tokens: Vec<String> = (0..96).map(|i| ((i * 37 + 5) % 500 + 1).to_string()).collect();
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(
        &p,
        format!(
            "version = 1\nname = \"spill\"\nquestion = \"q?\"\ntaps = {taps}\n[checkpoint]\nsynth = \"tinystories\"\n\
             hidden = 64\nlayers = 6\nheads = 4\nkv_heads = 2\nvocab = 512\n[inputs]\ntokens = [{}]\ndecode = 3\n\
             [[backend]]\nname = \"device\"\nkind = \"emulator\"\nfaults = [\"shared-softmax@layers=1\"]\n",
            tokens.join(", ")
        ),
    )
    .unwrap();
    p
}

/// `run --max-memory SIZE` on the spill probe, with TMPDIR in `tmp`: exit code and JSON report.
fn run_with_budget(probe: &Path, budget: &str, tmp: &Path, json: &Path, extra: &[&str]) -> serde_json::Value {
    hefprobe()
        .env("TMPDIR", tmp)
        .args(["--max-memory", budget, "run"])
        .arg(probe)
        .args(extra)
        .arg("--report")
        .arg(format!("json={}", json.display()))
        .assert()
        .code(1);
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

/// The explain sections of a run held in memory and one spilled: the same, and so is what
/// explain spent on which candidates (emulated, started from the clean run, stopped).
fn same_explain(held: &serde_json::Value, spilled: &serde_json::Value) {
    let (mut e_held, mut e_spilled) = (held["explain"].clone(), spilled["explain"].clone());
    let (s_held, s_spilled) = (e_held["spent"].take(), e_spilled["spent"].take());
    assert_eq!(e_held, e_spilled);
    for part in ["candidates", "stopped_early", "other"] {
        assert_eq!(s_held[part], s_spilled[part], "{part}: {s_held} vs {s_spilled}");
    }
    // A spilled run's clean capture stays in its file, so its candidates start from the clean
    // run's residuals as the held run's do (they once read a copy of every key in memory and,
    // past a quarter of the budget, gave the shortcut up).
    assert!(s_held["note"].is_null() && s_spilled["note"].is_null(), "{s_held} vs {s_spilled}");
    assert_eq!(s_held["from_prefix"], s_spilled["from_prefix"], "{s_held} vs {s_spilled}");
}

#[test]
fn run_over_the_memory_budget_spills_captures_and_reports_the_same_figures() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let probe = spill_probe(d, "spill", r#"["*"]"#);
    let tmp = d.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let held = run_with_budget(&probe, "64M", &tmp, &d.join("held.json"), &[]);
    let spilled = run_with_budget(&probe, "8M", &tmp, &d.join("spilled.json"), &[]);
    // The same rows, blame, located layers and logit lens, figure for figure.
    for part in ["comparisons", "located", "blame", "lens", "backends"] {
        assert_eq!(held[part], spilled[part], "{part} differs between the held and the spilled run");
    }
    assert_eq!(held["comparisons"].as_array().unwrap().len(), 2, "cumulative and local views");
    assert!(held["lens"].as_array().is_some_and(|l| !l.is_empty()));
    // The spilled run says so once, with where and why; the held one says nothing of it.
    let notes = |r: &serde_json::Value| -> Vec<String> {
        r["notes"]
            .as_array()
            .map_or(Vec::new(), |n| n.iter().map(|s| s.as_str().unwrap().to_string()).collect())
    };
    assert!(!notes(&held).iter().any(|n| n.contains("spilled")), "{:?}", notes(&held));
    let said: Vec<String> = notes(&spilled).into_iter().filter(|n| n.contains("spilled")).collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("captures spilled to disk: ") && said[0].contains("budget 8.0 MiB"),
        "{said:?}"
    );
    // The temporary folder was made in TMPDIR, named in the note, and is gone.
    let dir = said[0].split(" in ").nth(1).unwrap().split(" (").next().unwrap();
    assert!(Path::new(dir).starts_with(&tmp), "{dir}");
    assert!(!Path::new(dir).exists(), "{dir} is left behind");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "TMPDIR holds leftovers");

    // --save-captures is the spill folder: kept, with the captures an in-memory run saves.
    let (kept, saved) = (d.join("kept"), d.join("saved"));
    run_with_budget(&probe, "8M", &tmp, &d.join("k.json"), &["--save-captures", kept.to_str().unwrap()]);
    run_with_budget(&probe, "64M", &tmp, &d.join("s.json"), &["--save-captures", saved.to_str().unwrap()]);
    for name in ["reference.npz", "device.npz"] {
        let (a, b) =
            (common::read_npz(&kept.join(name)).unwrap(), common::read_npz(&saved.join(name)).unwrap());
        assert!(a.keys().eq(b.keys()), "{name}");
        assert!(a.iter().all(|(k, v)| b.get(k) == Some(v)), "{name}");
    }
    assert_eq!(std::fs::read_dir(&kept).unwrap().count(), 2, "only the captures are kept");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "TMPDIR holds leftovers");

    // Fewer taps than the reference records (it keeps embed, layers.*.out and scores for the
    // local view and the masks): the spilled comparison holds the probe's taps only, as in memory.
    let narrow = spill_probe(d, "narrow", r#"["layers.*.attn.probs", "logits"]"#);
    let held = run_with_budget(&narrow, "64M", &tmp, &d.join("nh.json"), &[]);
    let spilled = run_with_budget(&narrow, "8M", &tmp, &d.join("ns.json"), &[]);
    assert_eq!(held["comparisons"], spilled["comparisons"]);
    assert_eq!(
        spilled["comparisons"][0]["rows"].as_array().unwrap().len(),
        4 * 7,
        "6 probs + logits, 4 phases"
    );
    assert_eq!(notes(&spilled).iter().filter(|n| n.starts_with("captures spilled to disk")).count(), 1);

    // A probe's [explain] on a spilled run reads the captures from their files, one tap of each
    // side at a time, each emulation in a temporary file: the held run's table, figure for figure
    // (ties: `@layers=1-1` is `@layers=1`; pairs; a quantization attribution), said loudly.
    let with_explain = d.join("explain.toml");
    let explain = "[explain]\nfaults = [\"shared-softmax@layers=1-1\", \"shared-softmax\", \"mask-repeat\", \
                   \"no-lm-head\"]\npairs = true\nquant = \"w8a16\"\n";
    std::fs::write(&with_explain, std::fs::read_to_string(&probe).unwrap() + explain).unwrap();
    let held = run_with_budget(&with_explain, "64M", &tmp, &d.join("eh.json"), &[]);
    let kept = d.join("kept-explain");
    let spilled = run_with_budget(
        &with_explain,
        "8M",
        &tmp,
        &d.join("es.json"),
        &["--save-captures", kept.to_str().unwrap()],
    );
    same_explain(&held, &spilled);
    let rows = held["explain"]["rows"].as_array().unwrap();
    assert_eq!(rows[0]["fault"], "shared-softmax@layers=1");
    assert!(rows[0]["ties"].as_array().is_some_and(|t| !t.is_empty()), "{}", rows[0]);
    assert!(held["explain"]["attribution"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(!notes(&held).iter().any(|n| n.starts_with("EXPLAIN")), "{:?}", notes(&held));
    assert!(notes(&spilled).iter().any(|n| n.starts_with("EXPLAIN READ FROM DISK")), "{:?}", notes(&spilled));
    // The emulations went to the temporary folder, not where the captures are kept, and are gone.
    assert_eq!(std::fs::read_dir(&kept).unwrap().count(), 2, "only the captures are kept");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "TMPDIR holds leftovers");
    // `explain` on a recorded dump over the budget: the dump is read one array at a time into
    // the spill folder, the reference spills, and the ranking is the held one.
    let explain_dump = |budget: &str, tag: &str| -> serde_json::Value {
        let json = d.join(format!("{tag}.json"));
        hefprobe()
            .env("TMPDIR", &tmp)
            .args(["--max-memory", budget, "explain"])
            .arg(&probe)
            .arg("--observed")
            .arg(kept.join("device.npz"))
            .args(["--fault", "shared-softmax@layers=1", "--fault", "mask-repeat", "--report"])
            .arg(format!("json={}", json.display()))
            .assert()
            .code(1);
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
    };
    let (held, spilled) = (explain_dump("64M", "xh"), explain_dump("8M", "xs"));
    same_explain(&held, &spilled);
    assert_eq!(held["explain"]["rows"][0]["fault"], "shared-softmax@layers=1");
    assert!(notes(&spilled).iter().any(|n| n.starts_with("EXPLAIN READ FROM DISK")), "{:?}", notes(&spilled));
    // Its held estimate counts the emulations explain keeps (one, two during a tie check: 3 MiB
    // each) and the weights once (1.4 MiB; the emulations share them): 17.9 MiB where the
    // captures of the run alone, and its weights, are 11.9 MiB.
    let said = notes(&spilled).into_iter().find(|n| n.starts_with("captures spilled to disk")).unwrap();
    assert!(said.contains("(estimate 17.9 MiB > budget 8.0 MiB"), "{said}");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "TMPDIR holds leftovers");

    // A budget that even one tap at a time exceeds is refused before anything runs.
    hefprobe().env("TMPDIR", &tmp).args(["--max-memory", "3M", "run"]).arg(&probe).assert().code(2).stderr(
        predicate::str::contains("even with its captures spilled to disk")
            .and(predicate::str::contains("spill.toml [inputs]")),
    );
}

/// `reduce` on the shared-softmax probe (41 prompt tokens, 4 decode steps): a minimal probe of at
/// most 3 tokens and no decode step that, run on its own, still locates `layers.0.attn.probs` and
/// ranks `shared-softmax@layers=0` first; a budget stops it early, saying so; a probe that does
/// not drift has nothing to reduce.
#[test]
fn reduce_shrinks_the_shared_softmax_probe_and_the_result_still_reproduces() {
    let t = tempfile::tempdir().unwrap();
    let min = t.path().join("min.toml");
    let out = hefprobe()
        .args(["reduce"])
        .arg(repo("probes/shared-softmax.toml"))
        .arg("-o")
        .arg(&min)
        .assert()
        .success();
    let said = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(said.contains("best explanation shared-softmax@layers=0"), "{said}");
    let probe = hefprobe::probe::schema::Probe::load(&min).unwrap();
    let tokens = probe.inputs.tokens.clone().expect("token ids");
    assert!((1..=3).contains(&tokens.len()), "{tokens:?}");
    assert!(probe.inputs.decode.is_none() && probe.inputs.decode_tokens.is_none(), "no decode step");
    assert_eq!(probe.name, "shared-softmax-min");
    let json = t.path().join("min.json");
    hefprobe().arg("run").arg(&min).arg("--report").arg(format!("json={}", json.display())).assert().code(1);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["located"][0][0]["tap"], "layers.0.attn.probs", "{}", r["located"]);
    assert_eq!(r["explain"]["rows"][0]["fault"], "shared-softmax@layers=0");

    let early = hefprobe()
        .args(["reduce"])
        .arg(repo("probes/shared-softmax.toml"))
        .args(["--budget", "2", "-o"])
        .arg(t.path().join("early.toml"))
        .assert()
        .success();
    let said = String::from_utf8_lossy(&early.get_output().stdout).to_string();
    assert!(
        said.contains("in 2 runs") && said.contains("stopped early: the run budget (2) is spent"),
        "{said}"
    );

    hefprobe()
        .args(["reduce"])
        .arg(repo("probes/shared-softmax.toml"))
        .args(["--backend", "emulator", "-o"])
        .arg(t.path().join("none.toml"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nothing to reduce"));
}
