//! Hostile and careless input (issue 11): every finding of that issue that this crate's
//! inputs, budget, validation and output checks cover, as a regression test. Each asserts the
//! exit code and that the message names the flag, key or file at fault; each runs in seconds
//! (a hang would be a test timeout; the budget refusals happen before any allocation).

mod common;

use assert_cmd::Command;
use hefprobe::capture::Capture;
use hefprobe::inputs::{DecodeSpec, InputSet};
use predicates::prelude::*;
use std::path::{Path, PathBuf};

fn hefprobe() -> Command {
    Command::cargo_bin("hefprobe").unwrap()
}

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const HEAD: &str = "version = 1\nname = \"h\"\nquestion = \"q?\"\n";
const TINY: &str =
    "[checkpoint]\nsynth = \"tinystories\"\nhidden = 64\nlayers = 2\nheads = 4\nkv_heads = 2\nvocab = 512\n";
const INPUTS: &str = "[inputs]\ntokens = [5, 9, 44, 120, 7]\ndecode = 2\n";
const EMULATOR: &str = "[[backend]]\nname = \"device\"\nkind = \"emulator\"\n";

fn tiny_probe(dir: &Path, extra: &str) -> PathBuf {
    write(dir, "tiny.toml", &format!("{HEAD}{TINY}{INPUTS}{EMULATOR}{extra}"))
}

#[test]
fn positions_that_wrap_are_refused_not_decoded_forever() {
    // `start_position + total_len()` wrapped, so the position check passed and decoding ran on.
    hefprobe()
        .args(["reference", "--synth", "tinystories", "--tokens", "1,2", "--decode", "18446744073709551615"])
        .arg("-o")
        .arg(std::env::temp_dir().join("hefprobe-never.npz"))
        .timeout(limit(60))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--decode").and(predicate::str::contains("overflows")));
    // Died inside candle, its backtrace printed twice.
    hefprobe()
        .args([
            "reference",
            "--synth",
            "tinystories",
            "--tokens",
            "1,2",
            "--start-position",
            "18446744073709551615",
        ])
        .arg("-o")
        .arg(std::env::temp_dir().join("hefprobe-never.npz"))
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("--start-position")
                .and(predicate::str::contains("backtrace").not())
                .and(predicate::str::contains("caused by").not()),
        );
    let t = tempfile::tempdir().unwrap();
    let max = i64::MAX;
    let p = write(
        t.path(),
        "long.toml",
        &format!("{HEAD}{TINY}[inputs]\ntokens = [1, 2]\nstart_position = {max}\ndecode = {max}\n{EMULATOR}"),
    );
    hefprobe()
        .arg("run")
        .arg(&p)
        .timeout(limit(60))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("start_position").and(predicate::str::contains("decode")));
    assert!(!std::env::temp_dir().join("hefprobe-never.npz").exists());
}

#[test]
fn models_beyond_the_memory_budget_are_refused_before_allocation() {
    let t = tempfile::tempdir().unwrap();
    hefprobe()
        .args(["synth", "--preset", "tinystories", "--hidden", "1000000", "-o"])
        .arg(t.path().join("big"))
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("hidden=1000000")
                .and(predicate::str::contains("needs 262.2 TiB, budget"))
                .and(predicate::str::contains("--max-memory")),
        );
    let p = write(
        t.path(),
        "big.toml",
        &format!("{HEAD}[checkpoint]\nsynth = \"tinystories\"\nhidden = 1000000\n{INPUTS}{EMULATOR}"),
    );
    hefprobe().arg("run").arg(&p).assert().code(2).stderr(
        predicate::str::contains("big.toml [checkpoint]").and(predicate::str::contains("hidden=1000000")),
    );
    // The budget is a flag: a model that fits the machine is refused under a small one.
    hefprobe()
        .args(["--max-memory", "16M", "reference", "--synth", "tinystories", "--tokens", "1,2", "-o"])
        .arg(t.path().join("x.npz"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("budget 16.0 MiB (--max-memory)"));
    // Taps a run keeps in memory count too: a long greedy decode over every tap. Weights and KV
    // cache are ~97 MiB, the taps of the captures ~360 MiB more (457 MiB held). Spilled to disk,
    // one tap at a time, `explain` plans ~101 MiB (the weights once: its emulations share them):
    // a 99 MiB budget is refused before anything runs, with both figures.
    let p = write(
        t.path(),
        "taps.toml",
        &format!("{HEAD}[checkpoint]\nsynth = \"tinystories\"\n[inputs]\ntokens = [1, 2]\ndecode = 250\n{EMULATOR}"),
    );
    hefprobe().args(["--max-memory", "99M", "explain"]).arg(&p).assert().code(2).stderr(
        predicate::str::contains("taps.toml [inputs]")
            .and(predicate::str::contains("even with its captures spilled to disk"))
            .and(predicate::str::contains("taps "))
            .and(predicate::str::contains("with the captures in memory")),
    );
}

#[test]
fn thresholds_are_checked_when_read() {
    let t = tempfile::tempdir().unwrap();
    let p = tiny_probe(t.path(), "");
    for (bound, says) in [
        ("cosine=nan", "from -1 to 1"),
        ("flips=-1", "whole number ≥ 0"),
        ("topk=2", "share from 0 to 1"),
        ("top5=0.9", "unknown metric `top5`"),
    ] {
        hefprobe().arg("run").arg(&p).args(["--threshold", bound]).assert().code(2).stderr(
            predicate::str::contains(format!("--threshold `{bound}`")).and(predicate::str::contains(says)),
        );
    }
    // A glob matching no tap is an error with a suggestion, as the same typo in `taps` is.
    hefprobe()
        .arg("run")
        .arg(&p)
        .args(["--threshold", "layers.*.attn.prob:cosine=0.9"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("did you mean `layers.*.attn.probs`"));
    let p = tiny_probe(t.path(), "[thresholds.taps]\n\"logit\" = { cosine = 0.9 }\n");
    hefprobe().arg("run").arg(&p).assert().code(2).stderr(
        predicate::str::contains("tiny.toml: [thresholds.taps] `logit`")
            .and(predicate::str::contains("`logits`")),
    );
}

#[test]
fn synth_flags_and_sweep_grids_are_checked_when_read() {
    let t = tempfile::tempdir().unwrap();
    for (flag, value) in [
        ("--weight-scale", "nan"),
        ("--sliding-window", "0"),
        ("--intermediate", "0"),
        ("--hidden", "0"),
        ("--head-dim", "7"),
    ] {
        hefprobe()
            .args(["synth", "--preset", "qwen2.5-0.5b", flag, value, "-o"])
            .arg(t.path().join("x"))
            .assert()
            .code(2)
            .stderr(predicate::str::contains(flag));
    }
    // A remainder by zero in probe/sweep.rs.
    let p = write(
        t.path(),
        "sw.toml",
        &format!("{HEAD}{TINY}{INPUTS}[sweep]\nhidden = [64]\nhead_dim = 0\nquant = [\"w8a16\"]\n"),
    );
    hefprobe()
        .arg("sweep")
        .arg(&p)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("sw.toml [sweep] key `head_dim`"));
}

#[test]
fn inputset_files_with_an_empty_prompt_or_a_bad_chunk_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let hef = t.path().join("ts.hef");
    hefprobe().args(["synth-hef", "--synth", "tinystories", "-o"]).arg(&hef).assert().code(0);
    let write_npz = |prompt: Vec<i64>, chunk: Vec<i64>| {
        use ndarray::Array1;
        let p = t.path().join("in.npz");
        let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&p).unwrap());
        w.add_array("prompt", &Array1::from(prompt)).unwrap();
        w.add_array("decode_tokens", &Array1::<i64>::from(vec![])).unwrap();
        w.add_array("greedy_steps", &Array1::from(vec![0i64])).unwrap();
        w.add_array("chunk", &Array1::from(chunk)).unwrap();
        w.add_array("start_position", &Array1::from(vec![0i64])).unwrap();
        w.finish().unwrap();
        p
    };
    for (prompt, chunk, says) in
        [(vec![], vec![], "`prompt`"), (vec![1, 2], vec![0], "`chunk`"), (vec![1, 2], vec![-4], "`chunk`")]
    {
        let inputs = write_npz(prompt, chunk);
        hefprobe()
            .arg("capture")
            .arg(&hef)
            .arg("--inputs")
            .arg(&inputs)
            .arg("-o")
            .arg(t.path().join("cap.npz"))
            .assert()
            .code(2)
            .stderr(predicate::str::contains("in.npz").and(predicate::str::contains(says)));
    }
}

#[test]
fn an_output_never_destroys_an_input() {
    let t = tempfile::tempdir().unwrap();
    let hef = t.path().join("x.hef");
    hefprobe().args(["synth-hef", "--synth", "tinystories", "-o"]).arg(&hef).assert().code(0);
    let before = std::fs::read(&hef).unwrap();
    let mut s = InputSet::new(vec![5, 9]);
    s.decode = DecodeSpec::Forced(vec![]);
    let inputs = t.path().join("inputs.npz");
    s.to_npz(&inputs, false).unwrap();
    hefprobe()
        .arg("capture")
        .arg(&hef)
        .arg("--inputs")
        .arg(&inputs)
        .arg("-o")
        .arg(t.path().join(".").join("x.hef"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("-o").and(predicate::str::contains("the HEF")));
    assert_eq!(std::fs::read(&hef).unwrap(), before);

    let ck = t.path().join("ck");
    let synth = |force: bool| {
        let mut c = hefprobe();
        c.args([
            "synth",
            "--arch",
            "llama",
            "--hidden",
            "32",
            "--layers",
            "1",
            "--heads",
            "2",
            "--kv-heads",
            "1",
        ]);
        c.arg("-o").arg(&ck);
        if force {
            c.arg("--force");
        }
        c.assert()
    };
    synth(false).code(0);
    synth(false).code(2).stderr(predicate::str::contains("--force"));
    synth(true).code(0);
    let weights = std::fs::read(ck.join("model.safetensors")).unwrap();
    hefprobe()
        .args(["reference", "--checkpoint"])
        .arg(&ck)
        .args(["--tokens", "1,2", "-o"])
        .arg(ck.join("model.safetensors"))
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("model.safetensors").and(predicate::str::contains("the checkpoint")),
        );
    assert_eq!(std::fs::read(ck.join("model.safetensors")).unwrap(), weights);

    let p = tiny_probe(t.path(), "");
    let text = std::fs::read_to_string(&p).unwrap();
    hefprobe()
        .arg("run")
        .arg(&p)
        .arg("--report")
        .arg(format!("markdown={}", p.display()))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("the probe"));
    assert_eq!(std::fs::read_to_string(&p).unwrap(), text);
    hefprobe()
        .arg("run")
        .arg(&p)
        .arg("--report")
        .arg(format!("markdown={}", t.path().join("no/such/dir/r.md").display()))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("does not exist"));
}

#[test]
fn an_empty_report_path_is_refused_when_the_flags_are_read() {
    let t = tempfile::tempdir().unwrap();
    let p = tiny_probe(t.path(), "");
    hefprobe()
        .arg("run")
        .arg(&p)
        .args(["--report", "markdown="])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("`markdown=`").and(predicate::str::contains("empty")));
}

#[test]
fn file_only_reports_are_announced_and_temporary_files_are_gone() {
    let t = tempfile::tempdir().unwrap();
    let p = tiny_probe(t.path(), "");
    let (md, json) = (t.path().join("r.md"), t.path().join("r.json"));
    hefprobe()
        .arg("run")
        .arg(&p)
        .arg("--report")
        .arg(format!("markdown={}", md.display()))
        .arg("--report")
        .arg(format!("json={}", json.display()))
        .assert()
        .code(0)
        .stdout(predicate::str::is_empty())
        .stderr(
            predicate::str::contains(format!("wrote {}", md.display()))
                .and(predicate::str::contains(format!("wrote {}", json.display()))),
        );
    let leftovers: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_run_whose_comparison_fails_still_writes_its_reports() {
    let t = tempfile::tempdir().unwrap();
    let mut dump = Capture::default();
    dump.insert("prefill/logits".into(), ndarray::ArrayD::zeros(ndarray::IxDyn(&[3, 7])));
    dump.write_npz(&t.path().join("dump.npz")).unwrap();
    let p = write(
        t.path(),
        "dump.toml",
        &format!("{HEAD}{TINY}{INPUTS}[[backend]]\nname = \"rec\"\nkind = \"dump\"\npath = \"dump.npz\"\n"),
    );
    let md = t.path().join("r.md");
    hefprobe()
        .arg("run")
        .arg(&p)
        .arg("--report")
        .arg(format!("markdown={}", md.display()))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("prefill/logits").and(predicate::str::contains("shape")));
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("the compare stage stopped"), "{text}");
}

#[test]
fn explain_refuses_to_rank_a_non_finite_observation() {
    let t = tempfile::tempdir().unwrap();
    let p = tiny_probe(t.path(), "");
    let caps = t.path().join("caps");
    hefprobe().arg("run").arg(&p).arg("--save-captures").arg(&caps).arg("--no-explain").assert().code(0);
    let mut cap = common::read_npz(&caps.join("device.npz")).unwrap();
    let key = "prefill/layers.1.attn.out";
    let mut x = cap.get(&key.into()).unwrap().clone();
    x.iter_mut().for_each(|v| *v = f32::NAN);
    cap.insert(key.into(), x);
    let observed = t.path().join("nan.npz");
    cap.write_npz(&observed).unwrap();
    let json = t.path().join("r.json");
    hefprobe()
        .arg("explain")
        .arg(&p)
        .arg("--observed")
        .arg(&observed)
        .arg("--report")
        .arg("terminal")
        .arg("--report")
        .arg(format!("json={}", json.display()))
        .assert()
        .code(1)
        .stdout(
            predicate::str::contains("explain refuses to rank")
                .and(predicate::str::contains(key))
                .and(predicate::str::contains("nothing in the catalog explains").not()),
        );
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(v["explain"]["rows"].as_array().unwrap().len(), 0);
    assert_eq!(v["explain"]["nonfinite"][0][0], key);
}

#[test]
fn deprecated_output_flags_still_work_and_say_so() {
    let t = tempfile::tempdir().unwrap();
    let hef = t.path().join("ts.hef");
    hefprobe().args(["synth-hef", "--synth", "tinystories", "-o"]).arg(&hef).assert().code(0);
    hefprobe()
        .arg("audit")
        .arg(&hef)
        .arg("--json")
        .assert()
        .code(0)
        .stdout(predicate::str::contains("hefprobe.audit/1"))
        .stderr(
            predicate::str::contains("--json is deprecated").and(predicate::str::contains("--report json")),
        );
    let md = t.path().join("a.md");
    hefprobe()
        .arg("audit")
        .arg(&hef)
        .arg("--report")
        .arg(format!("markdown={}", md.display()))
        .assert()
        .code(0)
        .stderr(predicate::str::contains(format!("wrote {}", md.display())));
    assert!(std::fs::read_to_string(&md).unwrap().contains('|'));
}

#[test]
fn diagnose_refuses_a_hef_of_another_checkpoint_and_an_unbounded_repeat() {
    let t = tempfile::tempdir().unwrap();
    let small = t.path().join("small");
    hefprobe()
        .args(["synth", "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4"])
        .args(["--kv-heads", "2", "--vocab", "512", "-o"])
        .arg(&small)
        .assert()
        .code(0);
    let hef = t.path().join("small.hef");
    hefprobe().arg("synth-hef").arg("--checkpoint").arg(&small).arg("-o").arg(&hef).assert().code(0);
    // Issue 11: this pairing panicked with an index out of bounds in the metrics.
    hefprobe()
        .arg("diagnose")
        .arg(&hef)
        .args(["--synth", "tinystories", "--tokens", "1,2,3"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("small.hef").and(predicate::str::contains("was made from checkpoint")),
        );
    // The matching checkpoint passes that check.
    hefprobe()
        .arg("diagnose")
        .arg(&hef)
        .arg("--checkpoint")
        .arg(&small)
        .args(["--tokens", "1,2,3"])
        .assert()
        .code(0);
    // Issue 11: --repeat 1000000 ran without bound or progress.
    hefprobe()
        .arg("diagnose")
        .arg(&hef)
        .arg("--checkpoint")
        .arg(&small)
        .args(["--tokens", "1,2,3", "--repeat", "1000000"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--repeat"));
}

/// Round two's sizes and counts: each is refused with exit 2 naming it, before anything is
/// allocated or run.
#[test]
fn layer_ranges_thread_counts_shard_totals_and_quant_settings_are_bounded_when_read() {
    let t = tempfile::tempdir().unwrap();
    let probe = tiny_probe(t.path(), "");
    for range in ["0-99999999999", "0-4294967295", "0-18446744073709551615", "18446744073709551616"] {
        let fault = format!("shared-softmax@layers={range}");
        hefprobe()
            .arg("run")
            .arg(&probe)
            .args(["--fault", &fault])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("@layers"));
        hefprobe()
            .args(["synth-hef", "--synth", "tinystories", "--fault", &fault, "-o"])
            .arg(t.path().join("x.hef"))
            .assert()
            .code(2);
    }
    let in_toml = write(
        t.path(),
        "layers.toml",
        &format!("{HEAD}{TINY}{INPUTS}[[backend]]\nkind = \"emulator\"\nfaults = [\"shared-softmax@layers=0-99999999999\"]\n"),
    );
    hefprobe().arg("run").arg(&in_toml).assert().code(2).stderr(predicate::str::contains("beyond any model"));
    hefprobe()
        .args(["synth-hef", "--synth", "tinystories", "--quant", "w0a0", "-o"])
        .arg(t.path().join("q.hef"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--quant w0a0"));
    assert!(!t.path().join("q.hef").exists());
    hefprobe()
        .args(["bench", "--preset", "tinystories", "--threads", "100000"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--threads 100000"));
    hefprobe().arg("suite").arg(&probe).args(["--shard-total", "0"]).assert().code(2);
    hefprobe()
        .arg("suite")
        .arg(&probe)
        .env("JOB_COMPLETION_INDEX", "0")
        .env("HEFPROBE_SHARD_TOTAL", "0")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("HEFPROBE_SHARD_TOTAL=0"));
}

/// The calibration a simulated HEF records is input: an id past the vocabulary, an empty
/// prompt or an unbounded set is refused naming the resource, before the device calibrates.
#[test]
fn a_simulated_hefs_recorded_calibration_is_checked_when_the_hef_is_opened() {
    let t = tempfile::tempdir().unwrap();
    let h = t.path().join("m.hef");
    hefprobe().args(["synth-hef", "--synth", "tinystories", "-o"]).arg(&h).assert().success();
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/shared-softmax.toml");
    let cases: [(serde_json::Value, &str); 3] = [
        (serde_json::json!([[1, 2, 4_000_000_000u32]]), "token id 4000000000"),
        (serde_json::json!([[1, 2], []]), "prompt 1 is empty"),
        (serde_json::json!([]), "0 prompts"),
    ];
    for (prompts, says) in cases {
        let mut hef = hefprobe::hef::Hef::read(&h).unwrap();
        let sim = hef.resources.iter_mut().find(|r| r.name == "hefprobe-sim.json").unwrap();
        let mut v: serde_json::Value = serde_json::from_slice(&sim.data).unwrap();
        v["calibration"]["prompts"] = prompts;
        sim.data = serde_json::to_vec(&v).unwrap();
        let bad = t.path().join("bad.hef");
        std::fs::write(&bad, hef.to_bytes()).unwrap();
        hefprobe()
            .arg("run")
            .arg(&probe)
            .args(["--no-explain", "--backend"])
            .arg(format!("hef={}", bad.display()))
            .assert()
            .code(2)
            .stderr(predicate::str::contains("hefprobe-sim.json `calibration`"))
            .stderr(predicate::str::contains(says));
    }
}

/// Round two (issue 22): catalog probes run against any HEF. kv-cache-layout prefills in chunks
/// of 16; a default HEF's frame is 96 rows: the HEF is fed as genai feeds it, and says so.
#[test]
fn a_catalog_probe_follows_the_hefs_prefill_frame() {
    let t = tempfile::tempdir().unwrap();
    let hef = t.path().join("clean.hef");
    hefprobe().args(["synth-hef", "--synth", "tinystories", "-o"]).arg(&hef).assert().success();
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/kv-cache-layout.toml");
    hefprobe()
        .arg("run")
        .arg(&probe)
        .args(["--no-explain", "--backend"])
        .arg(format!("hef={}", hef.display()))
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("it ran as genai feeds it")
                .and(predicate::str::contains("reference[chunk=96]")),
        );
}

/// SIGTERM half-way through a suite: the file reports hold the pairs that finished and name the
/// rest; merge refuses the file as an interrupted shard.
#[cfg(unix)]
#[test]
fn an_interrupted_suite_leaves_reports_of_what_finished() {
    let t = tempfile::tempdir().unwrap();
    let hef = t.path().join("clean.hef");
    hefprobe().args(["synth-hef", "--synth", "tinystories", "-o"]).arg(&hef).assert().success();
    // The catalog's probe files (probes/findings/ holds findings' records, not probes).
    let probes: Vec<PathBuf> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("probes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    let json = t.path().join("s.json");
    // Through cargo's runner where one is set (qemu-aarch64 for the arm64 tier of .ci/run).
    let child = <std::process::Command as assert_cmd::cargo::CommandCargoExt>::cargo_bin("hefprobe")
        .unwrap()
        .arg("suite")
        .args(&probes)
        .arg("--backend")
        .arg(format!("hef={}", hef.display()))
        .arg("--no-explain")
        .arg("--report")
        .arg(format!("json={}", json.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !json.exists() && start.elapsed().as_secs() < 300 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("hold the") && stderr.contains("not run"), "{stderr}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(!r["unfinished"].as_array().unwrap().is_empty(), "{r}");
    hefprobe().arg("merge").arg(&json).assert().code(2).stderr(predicate::str::contains("interrupted shard"));
}

/// Readers that doubt their file: a FIFO is refused before `open` blocks; a `.gguf` that is
/// empty or has another magic says so; hub refs and revisions never leave the cache.
#[cfg(unix)]
#[test]
fn fifos_bad_gguf_files_and_hub_refs_that_leave_the_cache_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let fifo = t.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let f = fifo.display().to_string();
    for args in [
        vec!["run", &f],
        vec!["audit", &f],
        vec!["compare", &f, &f],
        vec!["suite", &f],
        vec!["reference", "--checkpoint", &f, "--tokens", "1", "-o", "never.npz"],
    ] {
        hefprobe()
            .args(&args)
            .timeout(limit(60))
            .assert()
            .code(2)
            .stderr(predicate::str::contains("is a FIFO").and(predicate::str::contains("fifo")));
    }
    for (name, bytes, says) in
        [("e.gguf", &b""[..], "is an empty file"), ("b.gguf", &b"GGUXxxxx"[..], "not a GGUF file")]
    {
        let p = t.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        hefprobe()
            .args(["reference", "--tokens", "1", "-o", "never.npz", "--checkpoint"])
            .arg(&p)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(name).and(predicate::str::contains(says)));
    }
    let hub = t.path().join("hub");
    let repo = hub.join("models--o--m");
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::create_dir_all(repo.join("snapshots")).unwrap();
    let ck = common::small_checkpoint(t.path(), "ck", 300);
    let sha = "0123456789abcdef0123456789abcdef01234567";
    std::os::unix::fs::symlink(&ck, repo.join("snapshots").join(sha)).unwrap();
    let reference = |rev: &str| {
        let mut c = hefprobe();
        c.env("HF_HUB_CACHE", &hub).args([
            "reference",
            "--tokens",
            "1",
            "--checkpoint",
            "o/m",
            "--revision",
            rev,
            "-o",
        ]);
        c.arg(t.path().join("r.npz"));
        c.timeout(limit(60)).assert()
    };
    reference("/etc/hostname").code(2).stderr(predicate::str::contains("never a path"));
    let refs = repo.join("refs/main");
    for (text, says) in
        [("../../x\n".to_string(), "not a commit sha"), ("a".repeat(100_000), "more than 256 bytes")]
    {
        std::fs::write(&refs, &text).unwrap();
        reference("main").code(2).stderr(predicate::str::contains(says));
    }
    std::fs::write(&refs, format!("{sha}\n")).unwrap();
    reference("main").code(2).stderr(predicate::str::contains("outside the model's hub cache folder"));
    std::fs::remove_file(&refs).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&refs).status().unwrap().success());
    reference("main").code(2).stderr(predicate::str::contains("is a FIFO"));
}

/// Baselines, histories and shard files are validated as they are read, and a history whose
/// last line was cut off is never appended to; no input file changes.
#[test]
fn baselines_histories_and_shards_are_checked_when_read() {
    let t = tempfile::tempdir().unwrap();
    let p = tiny_probe(t.path(), "");
    let (base, hist, shard) = (t.path().join("b.json"), t.path().join("h.jsonl"), t.path().join("s.json"));
    hefprobe()
        .arg("suite")
        .arg(&p)
        .arg("--baseline")
        .arg(&base)
        .args(["--update-baseline", "--history"])
        .arg(&hist)
        .arg("--report")
        .arg(format!("json={}", shard.display()))
        .assert()
        .code(0);
    let edit = |path: &Path, name: &str, f: &dyn Fn(&mut serde_json::Value)| {
        let text = std::fs::read_to_string(path).unwrap();
        let one = if name.ends_with(".jsonl") { text.lines().next().unwrap().to_string() } else { text };
        let mut v: serde_json::Value = serde_json::from_str(&one).unwrap();
        f(&mut v);
        write(t.path(), name, &format!("{v}\n"))
    };
    let cos = edit(&base, "b1.json", &|v| v["pairs"]["h"]["device"]["logits"]["cosine"] = 1e300.into());
    let b1 = std::fs::read(&cos).unwrap();
    hefprobe()
        .arg("suite")
        .arg(&p)
        .arg("--baseline")
        .arg(&cos)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("key `cosine`"));
    assert_eq!(std::fs::read(&cos).unwrap(), b1);
    let kl = edit(&base, "b2.json", &|v| v["pairs"]["h"]["device"]["logits"]["kl"] = (-1e300).into());
    hefprobe()
        .arg("merge")
        .arg(&shard)
        .arg("--baseline")
        .arg(&kl)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("key `kl`"));
    let date = edit(&hist, "h1.jsonl", &|v| v["date"] = "not a date".into());
    let big = edit(&hist, "h2.jsonl", &|v| v["figures"]["logits"]["cosine"] = 1e308.into());
    let line = std::fs::read_to_string(&hist).unwrap();
    let cut = write(t.path(), "h3.jsonl", &format!("{line}{}", &line[..40]));
    for (h, says) in [(&date, "RFC 3339"), (&big, "key `cosine`"), (&cut, "is cut off")] {
        let before = std::fs::read(h).unwrap();
        hefprobe()
            .arg("suite")
            .arg(&p)
            .arg("--history")
            .arg(h)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(says));
        hefprobe().arg("trend").arg(h).assert().code(2).stderr(predicate::str::contains(says));
        assert_eq!(std::fs::read(h).unwrap(), before);
    }
    let s52 = edit(&shard, "s1.json", &|v| v["shard"] = serde_json::json!({"index": 5, "total": 2}));
    let sec = edit(&shard, "s2.json", &|v| v["timing"]["total"] = 1e308.into());
    for (s, says) in [(&s52, "5/2 is not a shard"), (&sec, "key `total`")] {
        hefprobe().arg("merge").arg(s).assert().code(2).stderr(predicate::str::contains(says));
    }
    // A hard link to the baseline is the baseline.
    let link = t.path().join("link.json");
    std::fs::hard_link(&base, &link).unwrap();
    hefprobe()
        .arg("suite")
        .arg(&p)
        .arg("--baseline")
        .arg(&base)
        .arg("--report")
        .arg(format!("json={}", link.display()))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is the baseline"));
}

/// Sizes a file claims, checked before anything that large exists: a HEF's 10^8-slot cache, a
/// 10^6-point sweep, an InputSet's 2^62 greedy steps, a glob over the whole filesystem.
#[test]
fn sizes_claimed_by_hefs_sweeps_inputsets_and_globs_are_bounded() {
    let t = tempfile::tempdir().unwrap();
    let hef = t.path().join("big.hef");
    hefprobe()
        .args(["synth-hef", "--synth", "tinystories", "--kv-cache-size", "100000000", "-o"])
        .arg(&hef)
        .assert()
        .success();
    hefprobe().arg("audit").arg(&hef).assert().stdout(predicate::str::contains("implausible-size"));
    hefprobe()
        .args(["diagnose", "--synth", "tinystories", "--tokens", "1,2,3"])
        .arg(&hef)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("big.hef").and(predicate::str::contains("budget")));
    let grid: Vec<String> = (1..=1000).map(|i| (64 * i).to_string()).collect();
    let quant = vec!["\"w8a16\""; 1000].join(",");
    let sweep = write(
        t.path(),
        "grid.toml",
        &format!(
            "{HEAD}{TINY}{INPUTS}[sweep]\nhidden = [{}]\nhead_dim = 16\nquant = [{quant}]\n",
            grid.join(",")
        ),
    );
    hefprobe()
        .arg("sweep")
        .arg(&sweep)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("grid of 1000000 points"));
    let mut s = InputSet::new(vec![1, 2, 3]);
    s.decode = DecodeSpec::Greedy(1 << 62);
    let inputs = t.path().join("g.npz");
    s.to_npz(&inputs, false).unwrap();
    let clean = t.path().join("clean.hef");
    hefprobe().args(["synth-hef", "--synth", "tinystories", "-o"]).arg(&clean).assert().success();
    let out = t.path().join("o.npz");
    hefprobe()
        .arg("capture")
        .arg(&clean)
        .arg("--inputs")
        .arg(&inputs)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("decode steps"));
    assert!(!out.exists());
    for glob in ["/**/*.toml", "../*.toml"] {
        let suite = write(t.path(), "s.toml", &format!("version = 1\nprobes = [\"{glob}\"]\n"));
        hefprobe()
            .arg("suite")
            .arg(&suite)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("leaves the suite's folder"));
    }
    let suite = write(t.path(), "s.toml", "version = 1\nroot = \"/\"\nprobes = [\"**/*.toml\"]\n");
    hefprobe()
        .arg("suite")
        .arg(&suite)
        .timeout(limit(60))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("key `root`").and(predicate::str::contains("filesystem's root")));
}

/// Crafted evidence bundles, findings, and reductions: `verify` of a folder without a manifest,
/// with another schema or a `files` path leaving the bundle; a suite's `[[finding]]` naming no
/// probe of it, stated twice or claiming nothing; `reduce` of a probe without `[explain]`.
#[test]
fn crafted_bundles_findings_and_reductions_are_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let verify = |dir: &Path| hefprobe().arg("verify").arg(dir).assert().code(2);
    std::fs::create_dir_all(d.join("empty")).unwrap();
    verify(&d.join("empty")).stderr(predicate::str::contains("bundle.json"));
    let manifest = |text: &str| {
        let b = d.join("b");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(b.join("bundle.json"), text).unwrap();
        b
    };
    let m = r#"{"schema": "SCHEMA", "hefprobe": "0", "command": "", "asked": {"run": {"probe": "p.toml",
        "backends": [], "checkpoint": null, "thresholds": [], "no_explain": false}}, "folder": "b",
        "files": {FILES}, "left_out": [], "pinned": [], "devices": {}}"#;
    verify(&manifest(&m.replace("SCHEMA", "hefprobe.bundle/9").replace("FILES", "")))
        .stderr(predicate::str::contains("key `schema`"));
    verify(&manifest(
        &m.replace("SCHEMA", "hefprobe.bundle/3")
            .replace("FILES", r#""../../etc/passwd": {"sha256": "00", "bytes": 2}"#),
    ))
    .stderr(predicate::str::contains("not a path inside the bundle"));
    verify(&manifest("{")).stderr(predicate::str::contains("not a bundle manifest"));

    let probes = d.join("probes");
    std::fs::create_dir_all(&probes).unwrap();
    std::fs::copy(repo("probes/shared-softmax.toml"), probes.join("s.toml")).unwrap();
    let suite = |findings: &str| {
        let p = d.join("suite.toml");
        std::fs::write(&p, format!("version = 1\nprobes = [\"probes/*.toml\"]\n{findings}")).unwrap();
        hefprobe().arg("suite").arg(&p).assert().code(2)
    };
    suite("[[finding]]\nid = 4\nprobe = \"kv-cache-layout\"\nexplained_by = \"x\"\n")
        .stderr(predicate::str::contains("id 4 key `probe`"));
    suite("[[finding]]\nid = 4\nprobe = \"shared-softmax\"\n")
        .stderr(predicate::str::contains("what reproduces means"));
    suite("[[finding]]\nid = 4\nprobe = \"shared-softmax\"\nfirst_drift = \"logits\"\n[[finding]]\nid = 4\nprobe = \"shared-softmax\"\nfirst_drift = \"logits\"\n")
        .stderr(predicate::str::contains("stated twice"));
    suite("[[finding]]\nid = 4\nprobe = \"shared-softmax\"\nmetric = { tap = \"logits\", figure = \"cos\", below = 0.9 }\n")
        .stderr(predicate::str::contains("metric.figure"));

    let plain = d.join("plain.toml");
    let text = std::fs::read_to_string(repo("probes/shared-softmax.toml")).unwrap();
    std::fs::write(&plain, text.replace("[explain]\nobserved = \"device\"\n", "")).unwrap();
    hefprobe()
        .arg("reduce")
        .arg(&plain)
        .arg("-o")
        .arg(d.join("min.toml"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("[explain]"));
    assert!(!d.join("min.toml").exists(), "nothing written");
}

// ---- Round three (issue 42): evidence that cannot be forged, and the rough edges ----------

fn timeout() -> std::time::Duration {
    limit(120)
}

/// A hang guard of `secs`, stretched 20-fold where the binary runs under an emulator (cargo's
/// runner for the target: qemu-aarch64 runs code 20-30x slower than the CPU it emulates).
fn limit(secs: u64) -> std::time::Duration {
    let emulated = std::env::vars().any(|(k, _)| k.starts_with("CARGO_TARGET_") && k.ends_with("_RUNNER"));
    std::time::Duration::from_secs(if emulated { secs * 20 } else { secs })
}

/// The manifest of a bundle, edited by `f` and written back.
fn edit_manifest(bundle: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = bundle.join("bundle.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut m);
    std::fs::write(&p, serde_json::to_string_pretty(&m).unwrap()).unwrap();
}

/// Replace `old` by `new` in a file of the bundle and pin the forged file's hash and size, as a
/// forger who rewrites the manifest would.
fn forge(bundle: &Path, name: &str, old: &str, new: &str) {
    let p = bundle.join(name);
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.contains(old), "{name} holds `{old}`");
    std::fs::write(&p, text.replacen(old, new, 1)).unwrap();
    let (sha, bytes) = hefprobe::probe::bundle::sha256_file(&p).unwrap();
    edit_manifest(bundle, |m| m["files"][name] = serde_json::json!({"sha256": sha, "bytes": bytes}));
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_tree(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

/// A bundle of the tiny probe against an emulator with a planted fault (figures that drift).
fn tiny_bundle(dir: &Path) -> PathBuf {
    let p = tiny_probe(dir, "");
    let b = dir.join("b");
    hefprobe()
        .arg("run")
        .arg(&p)
        .args(["--backend", "emulator=shared-softmax@layers=0", "--no-explain", "--bundle"])
        .arg(&b)
        .timeout(timeout())
        .assert()
        .code(1);
    b
}

fn verify(dir: &Path) -> assert_cmd::assert::Assert {
    hefprobe().arg("verify").arg(dir).timeout(timeout()).assert()
}

/// Every document a person reads is regenerated and compared, so a figure rewritten in
/// report.md or evidence.md (its hash re-pinned) is named; an honest bundle moved to another
/// folder is still the same, and a figure off in its last digit is not (the same bits on every
/// CPU: nothing rounds to a neighbour).
#[test]
fn verify_regenerates_every_document_and_figure_a_person_reads() {
    let t = tempfile::tempdir().unwrap();
    let b = tiny_bundle(t.path());
    let moved = t.path().join("elsewhere/b");
    copy_tree(&b, &moved);
    verify(&moved).code(0).stdout(predicate::str::contains("all same: "));
    let report = std::fs::read_to_string(moved.join("report.json")).unwrap();
    let at = report.find("\"cosine\": 0.").unwrap() + "\"cosine\": 0.".len();
    let digits: String = report[at..].chars().take_while(char::is_ascii_digit).collect();
    let last = digits.chars().last().unwrap().to_digit(10).unwrap();
    let nudged = format!("{}{}", &digits[..digits.len() - 1], (last + 1) % 10);
    forge(&moved, "report.json", &format!("\"cosine\": 0.{digits}"), &format!("\"cosine\": 0.{nudged}"));
    verify(&moved)
        .code(1)
        .stdout(predicate::str::contains("│ report.json").and(predicate::str::contains("cosine")));
    let md = std::fs::read_to_string(b.join("report.md")).unwrap();
    let cosine = md.lines().find(|l| l.contains("| `logits` |")).unwrap().split('|').nth(4).unwrap().trim();
    for (name, old, new) in [
        ("report.md", cosine.to_string(), "0.999999".to_string()),
        ("evidence.md", "first drift: ".to_string(), "first drift: nowhere, ".to_string()),
    ] {
        let forged = t.path().join(format!("forged-{name}"));
        copy_tree(&b, &forged);
        forge(&forged, name, &old, &new);
        verify(&forged).code(1).stdout(
            predicate::str::contains(format!("│ {name}")).and(predicate::str::contains("regenerated")),
        );
    }
}

/// The command a bundle shows is checked against what it replays: one that names a HEF where an
/// emulator with a planted fault ran, its documents rewritten to show it and their hashes
/// re-pinned, is named; the honest bundle's command is the same.
#[test]
fn a_bundles_command_must_ask_what_it_replays() {
    let t = tempfile::tempdir().unwrap();
    let b = tiny_bundle(t.path());
    verify(&b).code(0).stdout(predicate::str::contains("all same: "));
    let forged = t.path().join("forged");
    copy_tree(&b, &forged);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(b.join("bundle.json")).unwrap()).unwrap();
    let command = manifest["command"].as_str().unwrap().to_string();
    let claimed = command.replace("emulator=shared-softmax@layers=0", "hef=model.hef");
    assert_ne!(claimed, command);
    edit_manifest(&forged, |m| m["command"] = claimed.clone().into());
    for name in ["report.json", "report.md", "evidence.md"] {
        let text = std::fs::read_to_string(forged.join(name)).unwrap();
        if text.contains(&command) {
            forge(&forged, name, &text, &text.replace(&command, &claimed));
        }
    }
    verify(&forged)
        .code(1)
        .stdout(predicate::str::contains("│ the command").and(predicate::str::contains("hef=model.hef")))
        .stdout(predicate::str::contains("regenerated").not());
}

/// A manifest's claim that a backend ran on a `hailo` device is checked against the pinned HEF:
/// a simulated HEF runs on the simulated device here, so a forged figure is named and the claim
/// called false. Only a compiled HEF with no device here is "not re-runnable", and that is
/// "unverified", exit 1, never "all same".
#[test]
fn a_device_claim_is_checked_and_only_an_absent_device_is_unverified() {
    let t = tempfile::tempdir().unwrap();
    let h = t.path().join("ts.hef");
    hefprobe()
        .args(["synth-hef", "--synth", "tinystories", "--fault", "shared-softmax@layers=0", "-o"])
        .arg(&h)
        .assert()
        .success();
    let b = t.path().join("b");
    hefprobe()
        .arg("run")
        .arg(repo("probes/shared-softmax.toml"))
        .args(["--no-explain", "--backend"])
        .arg(format!("hef={}", h.display()))
        .arg("--bundle")
        .arg(&b)
        .timeout(timeout())
        .assert()
        .code(1);
    // Every recorded fact of the device is compared, not its kind alone.
    for (field, value) in
        [("temperature_c", serde_json::json!(99.5)), ("device_id", serde_json::json!("0001:01:00.0"))]
    {
        let facts = t.path().join(format!("facts-{field}"));
        copy_tree(&b, &facts);
        edit_manifest(&facts, |m| m["devices"]["hef"][field] = value.clone());
        verify(&facts).code(1).stdout(predicate::str::contains(format!("`{field}`")));
    }
    let forged = t.path().join("forged");
    copy_tree(&b, &forged);
    edit_manifest(&forged, |m| m["devices"]["hef"]["kind"] = "hailo".into());
    let report = std::fs::read_to_string(forged.join("report.json")).unwrap();
    let at = report.find("\"cosine\": ").unwrap() + "\"cosine\": ".len();
    let cos: String = report[at..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    forge(&forged, "report.json", &format!("\"cosine\": {cos}"), "\"cosine\": 0.5");
    verify(&forged)
        .code(1)
        .stdout(
            predicate::str::contains("that claim is false").and(predicate::str::contains("│ report.json")),
        )
        .stdout(predicate::str::contains("not re-runnable here").count(1));
    // The same bundle as a compiled HEF recorded on a device: its hash re-pinned, no device here.
    let mut hef = hefprobe::hef::Hef::read(&h).unwrap();
    hef.resources.retain(|r| r.name != "hefprobe-sim.json");
    std::fs::write(&h, hef.to_bytes()).unwrap();
    let (sha, bytes) = hefprobe::probe::bundle::sha256_file(&h).unwrap();
    edit_manifest(&b, |m| {
        m["pinned"][0]["sha256"] = sha.into();
        m["pinned"][0]["bytes"] = bytes.into();
        m["devices"]["hef"]["kind"] = "hailo".into();
    });
    verify(&b)
        .code(1)
        .stdout(predicate::str::contains("unverified (").and(predicate::str::contains("ran on hailo")))
        .stdout(predicate::str::contains("all same").not());
}

/// A suite bundle whose backends were edited replays other targets: each recorded pair is named
/// as not replayed (never "not re-runnable here" for the simulated device that is right here),
/// and the replay's own error is said.
#[test]
fn an_edited_suite_bundle_names_what_its_replay_ran_and_why_it_failed() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    tiny_probe(d, "");
    let suite = write(d, "s.toml", "version = 1\nprobes = [\"tiny.toml\"]\n");
    hefprobe()
        .arg("suite")
        .arg(&suite)
        .args(["--no-explain", "--bundle"])
        .arg(d.join("night"))
        .timeout(timeout())
        .assert()
        .code(0);
    let gone = d.join("gone.hef");
    edit_manifest(&d.join("night"), |m| {
        m["asked"]["suite"]["backends"] = serde_json::json!([format!("hef={}", gone.display())])
    });
    verify(&d.join("night"))
        .code(1)
        .stdout(predicate::str::contains("the replay runs no `h × device`"))
        .stdout(predicate::str::contains("replay of `h × gone`").and(predicate::str::contains("gone.hef")))
        .stdout(predicate::str::contains("not re-runnable here").count(1));
}

/// A manifest is input: a hash that is not hex (once a panic slicing inside a character), and
/// a file whose size is not the pinned one, named without being read (a 1 TiB sparse file in
/// place of a 10-byte one).
#[test]
fn crafted_manifests_are_named_and_sizes_come_before_hashes() {
    let t = tempfile::tempdir().unwrap();
    let b = tiny_bundle(t.path());
    let odd = t.path().join("odd");
    copy_tree(&b, &odd);
    edit_manifest(&odd, |m| m["files"]["report.md"]["sha256"] = "é".repeat(32).into());
    verify(&odd)
        .code(2)
        .stderr(predicate::str::contains("key `files`").and(predicate::str::contains("64 hex")));
    let big = b.join("captures/reference.npz");
    std::fs::File::create(&big).unwrap().set_len(1 << 40).unwrap();
    edit_manifest(&b, |m| m["files"]["captures/reference.npz"]["bytes"] = 10.into());
    let start = std::time::Instant::now();
    verify(&b).code(1).stdout(predicate::str::contains("1099511627776 bytes where the bundle pinned 10"));
    assert!(start.elapsed().as_secs() < 60, "not hashed");
}

/// Outputs never replace what is not a regular file: a link to a device stays a link (the
/// device written into), a FIFO nobody reads is refused at once, a capture (written with
/// seeks) is refused on a FIFO, `-` is stdout, a link to /proc/self/fd/1 writes stdout.
#[cfg(unix)]
#[test]
fn outputs_write_into_special_files_or_refuse_them_never_replace_them() {
    let t = tempfile::tempdir().unwrap();
    let p = tiny_probe(t.path(), "");
    let null = t.path().join("null");
    std::os::unix::fs::symlink("/dev/null", &null).unwrap();
    let stdout_link = t.path().join("out");
    std::os::unix::fs::symlink("/proc/self/fd/1", &stdout_link).unwrap();
    let fifo = t.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let run = |report: &Path| {
        hefprobe()
            .arg("run")
            .arg(&p)
            .arg("--report")
            .arg(format!("json={}", report.display()))
            .timeout(timeout())
            .assert()
    };
    run(&null).code(0);
    run(&stdout_link).code(0).stdout(predicate::str::contains("\"schema\": \"hefprobe.report/1\""));
    run(&fifo).code(2).stderr(predicate::str::contains("a FIFO that nobody reads"));
    hefprobe()
        .arg("run")
        .arg(&p)
        .args(["--report", "json=-"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("\"schema\": \"hefprobe.report/1\""));
    hefprobe()
        .args(["reference", "--synth", "tinystories", "--tokens", "1,2", "-o"])
        .arg(&fifo)
        .timeout(timeout())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be written with seeks"));
    for link in [&null, &stdout_link] {
        assert!(std::fs::symlink_metadata(link).unwrap().file_type().is_symlink(), "{} kept", link.display());
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
}

/// A target's own checkpoint is an input however the report path spells it, and an output
/// folder that cannot be written is refused before any probe runs.
#[test]
fn a_targets_checkpoint_and_an_unwritable_folder_are_refused_before_the_suite_runs() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let ck = common::small_checkpoint(d, "ck", 300);
    write(d, "p.toml", &format!("{HEAD}{TINY}[inputs]\ntokens = [1, 2, 3]\n{EMULATOR}"));
    let suite = write(
        d,
        "s.toml",
        "version = 1\nprobes = [\"p.toml\"]\n[[target]]\nname = \"emu\"\nkind = \"emulator\"\ncheckpoint = \"ck\"\n",
    );
    let config = std::fs::read(ck.join("config.json")).unwrap();
    hefprobe()
        .arg("suite")
        .arg(&suite)
        .arg("--report")
        .arg(format!("json={}/./ck/config.json", d.display()))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("the checkpoint of target `emu`"));
    assert_eq!(std::fs::read(ck.join("config.json")).unwrap(), config);
    let start = std::time::Instant::now();
    hefprobe()
        .arg("suite")
        .arg(&suite)
        .args(["--report", "json=/proc/hefprobe-never.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be written").and(predicate::str::contains("h × emu").not()));
    assert!(start.elapsed().as_secs() < 30);
}

/// A claim names taps and faults that exist for its probe and checkpoint, or the suite is refused
/// naming the key, with the closest name: a typo once switched the regression check off.
#[test]
fn claims_naming_what_does_not_exist_are_refused_with_the_closest_name() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    std::fs::create_dir_all(d.join("probes")).unwrap();
    std::fs::copy(repo("probes/shared-softmax.toml"), d.join("probes/s.toml")).unwrap();
    let suite = |claim: &str| {
        let p = d.join("suite.toml");
        std::fs::write(
            &p,
            format!("version = 1\nprobes = [\"probes/*.toml\"]\n[[finding]]\nid = 11\nprobe = \"shared-softmax\"\nexpect = \"fixed\"\n{claim}\n"),
        )
        .unwrap();
        hefprobe().arg("suite").arg(&p).arg("--no-explain").timeout(timeout()).assert().code(2)
    };
    suite("first_drift = \"layers.99.attn.probs\"")
        .stderr(predicate::str::contains("key `first_drift`").and(predicate::str::contains("6 layers")));
    suite("first_drift = \"layers.0.attn.prob\"")
        .stderr(predicate::str::contains("did you mean `layers.0.attn.probs`"));
    suite("explained_by = \"shared-sotfmax\"").stderr(
        predicate::str::contains("key `explained_by`")
            .and(predicate::str::contains("did you mean `shared-softmax`")),
    );
    suite("metric = { tap = \"logitz\", figure = \"cosine\", below = 0.9 }").stderr(
        predicate::str::contains("key `metric.tap`").and(predicate::str::contains("did you mean `logits`")),
    );
}

/// Exposed outputs are mapped once: two outputs onto one tap (two of one name, two by the
/// convention, a map entry onto a tap an output is named for), a tap outside the model, a quant
/// scale no tap can hold: each an input error naming the outputs. `audit` checks exposed
/// outputs as taps.
#[test]
fn exposed_outputs_are_mapped_once_inside_the_model_with_a_usable_scale() {
    let t = tempfile::tempdir().unwrap();
    let h = t.path().join("x.hef");
    hefprobe()
        .args(["synth-hef", "--synth", "tinystories", "--expose", "layers.1.out,layers.2.out", "-o"])
        .arg(&h)
        .assert()
        .success();
    hefprobe()
        .arg("audit")
        .arg(&h)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("logits-rows").not())
        .stdout(predicate::str::contains("tap layers.1.out"));
    let edited = |name: &str, f: &dyn Fn(&mut hefprobe::hef::Stream)| {
        let mut hef = hefprobe::hef::Hef::read(&h).unwrap();
        for g in &mut hef.groups {
            g.outputs.iter_mut().filter(|o| o.name.ends_with("/layers.2.out")).for_each(f);
        }
        let p = t.path().join(name);
        std::fs::write(&p, hef.to_bytes()).unwrap();
        p
    };
    let run = |hef: &Path, extra: &str| {
        hefprobe()
            .arg("run")
            .arg(repo("probes/shared-softmax.toml"))
            .args(["--no-explain", "--backend"])
            .arg(format!("hef={}{extra}", hef.display()))
            .timeout(timeout())
            .assert()
    };
    let twice = edited("twice.hef", &|o| o.name = o.name.replace("layers.2.out", "layers.1.out"));
    run(&twice, "").code(2).stderr(predicate::str::contains("are both tap layers.1.out"));
    let nested = edited("nested.hef", &|o| o.name = o.name.replace("layers.2.out", "x/layers.1.out"));
    run(&nested, "").code(2).stderr(
        predicate::str::contains("x/layers.1.out").and(predicate::str::contains("both tap layers.1.out")),
    );
    let map =
        write(t.path(), "map.toml", "[taps]\n\"hefprobe_sim__prefill/layers.2.out\" = \"layers.1.out\"\n");
    run(&h, &format!(",map={}", map.display())).code(2).stderr(predicate::str::contains(
        "`hefprobe_sim__prefill/layers.1.out` and `hefprobe_sim__prefill/layers.2.out`",
    ));
    let outside = edited("outside.hef", &|o| o.name = o.name.replace("layers.2.out", "layers.9.out"));
    run(&outside, "")
        .code(2)
        .stderr(predicate::str::contains("is tap layers.9.out, but the model has 6 layers"));
    let huge = edited("huge.hef", &|o| o.quant_per_feature.iter_mut().for_each(|q| q.scale = 1e30));
    run(&huge, "").code(2).stderr(predicate::str::contains("layers.2.out cannot hold"));
}

/// `reduce` refuses a dump backend up front (a recording answers only its own inputs) and
/// writes nothing.
#[test]
fn reduce_refuses_a_dump_before_any_run() {
    let t = tempfile::tempdir().unwrap();
    let cap = t.path().join("d.npz");
    hefprobe()
        .args(["reference", "--synth", "tinystories", "--tokens", "1,2,3", "-o"])
        .arg(&cap)
        .assert()
        .success();
    let p = write(
        t.path(),
        "p.toml",
        &format!(
            "{HEAD}[checkpoint]\nsynth = \"tinystories\"\n[inputs]\ntokens = [1, 2, 3]\n[[backend]]\nname = \"rec\"\nkind = \"dump\"\npath = \"{}\"\n[explain]\nobserved = \"rec\"\n",
            cap.display()
        ),
    );
    let min = t.path().join("min.toml");
    hefprobe()
        .arg("reduce")
        .arg(&p)
        .arg("-o")
        .arg(&min)
        .timeout(timeout())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("backend `rec` is a dump"));
    assert!(!min.exists());
}

/// Calibration text is bounded in size and in prompts, naming the cap.
#[test]
fn calibration_text_is_bounded_in_size_and_prompts() {
    let t = tempfile::tempdir().unwrap();
    let big = t.path().join("big.txt");
    std::fs::File::create(&big).unwrap().set_len(1 << 30).unwrap();
    let many = write(t.path(), "many.txt", &"a\n\n".repeat(200_000));
    for (text, says) in
        [(&big, "a calibration text is read whole and may be at most 1.0 MiB"), (&many, "200000 paragraphs")]
    {
        hefprobe()
            .args(["synth-hef", "--synth", "tinystories", "-o"])
            .arg(t.path().join("c.hef"))
            .arg("--calib-text")
            .arg(text)
            .timeout(timeout())
            .assert()
            .code(2)
            .stderr(predicate::str::contains(says));
    }
}

/// Every whole-file read has a cap by kind (a 9 GB sparse file of each is refused naming the file
/// and the cap, nothing allocated) and honours --max-memory.
#[test]
fn every_whole_file_read_is_bounded() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let huge = |name: &str| {
        let p = d.join(name);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::File::create(&p).unwrap().set_len(9 << 30).unwrap();
        p
    };
    let refused = |args: Vec<std::ffi::OsString>, file: &str| {
        hefprobe()
            .args(&args)
            .timeout(timeout())
            .assert()
            .code(2)
            .stderr(predicate::str::contains(file).and(predicate::str::contains("may be at most")));
    };
    let os =
        |v: &[&dyn AsRef<std::ffi::OsStr>]| v.iter().map(|x| x.as_ref().to_os_string()).collect::<Vec<_>>();
    let p = tiny_probe(d, "");
    let hef = d.join("m.hef");
    hefprobe().args(["synth-hef", "--synth", "tinystories", "-o"]).arg(&hef).assert().success();
    refused(os(&[&"run", &huge("big-probe.toml")]), "big-probe.toml");
    refused(os(&[&"suite", &huge("big-suite.toml")]), "big-suite.toml");
    refused(os(&[&"suite", &p, &"--baseline", &huge("base.json")]), "base.json");
    refused(os(&[&"suite", &p, &"--history", &huge("h.jsonl")]), "h.jsonl");
    refused(os(&[&"merge", &huge("shard.json")]), "shard.json");
    refused(os(&[&"verify", &huge("bundle/bundle.json").parent().unwrap()]), "bundle.json");
    let shared = repo("probes/shared-softmax.toml");
    refused(
        os(&[
            &"run",
            &shared,
            &"--backend",
            &format!("hef={},map={}", hef.display(), huge("map.toml").display()),
        ]),
        "map.toml",
    );
    refused(
        os(&[
            &"synth-hef",
            &"--synth",
            &"tinystories",
            &"-o",
            &d.join("c.hef"),
            &"--calib-text",
            &huge("c.txt"),
        ]),
        "c.txt",
    );
    let ck = common::small_checkpoint(d, "ck", 300);
    let tok = write(d, "tok.toml", &format!("{HEAD}[checkpoint]\npath = \"ck\"\n[inputs]\ntext = \"hi\"\ntokenizer = \"tk/tokenizer.json\"\n{EMULATOR}"));
    huge("tk/tokenizer.json");
    refused(os(&[&"run", &tok]), "tk/tokenizer.json");
    let ck2 = d.join("ck2");
    copy_tree(&ck, &ck2);
    std::fs::File::create(ck2.join("tokenizer.json")).unwrap().set_len(9 << 30).unwrap();
    refused(
        os(&[&"reference", &"--checkpoint", &ck2, &"--text", &"hi", &"-o", &d.join("r.npz")]),
        "ck2/tokenizer.json",
    );
    std::fs::File::create(ck2.join("config.json")).unwrap().set_len(9 << 30).unwrap();
    refused(
        os(&[&"reference", &"--checkpoint", &ck2, &"--tokens", &"1", &"-o", &d.join("r.npz")]),
        "ck2/config.json",
    );
    // Under the cap, the budget decides before the read.
    let long = write(
        d,
        "long.toml",
        &format!("{}# {}\n", std::fs::read_to_string(&p).unwrap(), "x".repeat(3 << 20)),
    );
    hefprobe()
        .args(["--max-memory", "2M", "run"])
        .arg(&long)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("long.toml").and(predicate::str::contains("--max-memory")));
}

/// Rough edges of "every layer measured on the device": bisect takes --tokens and --text as
/// `reference` does; `synth-hef --layers 0..=L-1` writes the whole model (a loop over prefixes
/// ends there); `--expose 'layers.*.out'` is each layer's output and nothing else.
#[test]
fn bisect_takes_a_prompt_the_last_prefix_is_the_model_and_a_glob_is_one_segment() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("prefixes");
    std::fs::create_dir_all(&dir).unwrap();
    hefprobe()
        .args(["synth-hef", "--synth", "tinystories", "--layers", "0..=5", "-o"])
        .arg(dir.join("p5.hef"))
        .assert()
        .success();
    for prompt in [["--tokens", "5,9,44,120"], ["--text", "Once upon a time"]] {
        hefprobe()
            .args(["bisect", "run"])
            .arg(&dir)
            .args(["--synth", "tinystories"])
            .args(prompt)
            .timeout(timeout())
            .assert()
            .code(0)
            .stdout(predicate::str::contains("no drift at block 5"));
    }
    hefprobe()
        .args(["synth-hef", "--synth", "tinystories", "--expose", "layers.*.out", "-o"])
        .arg(t.path().join("x.hef"))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "exposed outputs (per-feature quant infos): layers.0.out, layers.1.out, layers.2.out, layers.3.out, layers.4.out, layers.5.out\n",
        ));
}

// ---- Round four (issue 54): verify re-derives, output that survives, the limits the process has ----

/// The allocator the binary runs with, so a refused allocation here ends as the binary's does.
#[global_allocator]
static ALLOC: hefprobe::alloc::CacheLineAligned = hefprobe::alloc::CacheLineAligned;

/// A file of the bundle rewritten by `f` and its hash and size pinned again, as a forger who
/// rewrites the manifest would.
fn rewrite(bundle: &Path, name: &str, f: impl FnOnce(Vec<u8>) -> Vec<u8>) {
    let p = bundle.join(name);
    std::fs::write(&p, f(std::fs::read(&p).unwrap())).unwrap();
    let (sha, bytes) = hefprobe::probe::bundle::sha256_file(&p).unwrap();
    edit_manifest(bundle, |m| m["files"][name] = serde_json::json!({"sha256": sha, "bytes": bytes}));
}

/// The device's capture in a tiny bundle (the one capture that is not the reference's).
fn device_capture(bundle: &Path) -> String {
    let names: Vec<String> = std::fs::read_dir(bundle.join("captures"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "reference.npz")
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    format!("captures/{}", names[0])
}

/// verify derives everything again rather than trust a manifest its forger re-hashed: a zeroed
/// device capture, the reference's capture under the device's name, a zeroed inputs.npz, a
/// file the manifest does not list, another hefprobe version in the manifest, a version or an
/// SVG tick one digit off, and forged text with terminal escapes (printed escaped).
#[test]
fn verify_rederives_inputs_captures_and_versions_never_trusting_a_rehashed_manifest() {
    let t = tempfile::tempdir().unwrap();
    let b = tiny_bundle(t.path());
    verify(&b).code(0).stdout(predicate::str::contains("all same: "));
    // Captures past the size cap are left out (their hashes kept, their folder empty): the same.
    let capped = t.path().join("capped");
    hefprobe()
        .arg("run")
        .arg(t.path().join("tiny.toml"))
        .args([
            "--backend",
            "emulator=shared-softmax@layers=0",
            "--no-explain",
            "--bundle-cap",
            "1",
            "--bundle",
        ])
        .arg(&capped)
        .timeout(timeout())
        .assert()
        .code(1);
    verify(&capped).code(0).stdout(predicate::str::contains("all same: "));
    let device = device_capture(&b);
    let reference = std::fs::read(b.join("captures/reference.npz")).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    // 0.1.0 -> 0.2.0: once "the same within one unit of the last digit".
    let mut parts: Vec<u64> = version.split('.').map(|p| p.parse().unwrap()).collect();
    parts[1] += 1;
    let bumped = parts.iter().map(u64::to_string).collect::<Vec<_>>().join(".");
    let svg = std::fs::read_to_string(b.join("figure-layers.svg")).unwrap();
    // An axis tick is a line of its own (`0.82`): its last digit moved by one.
    let label = svg
        .lines()
        .find(|l| l.starts_with("0.") && l.len() > 2 && l[2..].bytes().all(|b| b.is_ascii_digit()));
    let label = label.expect("a decimal tick").to_string();
    let last = label.as_bytes()[label.len() - 1] - b'0';
    let tick = format!("\n{label}\n");
    let next = format!("\n{}{}\n", &label[..label.len() - 1], (last + 1) % 10);
    type Forge<'a> = Box<dyn Fn(&Path) + 'a>;
    let cases: Vec<(&str, Forge, String)> = vec![
        (
            "zeroed device capture",
            Box::new(|d| rewrite(d, &device, |v| vec![0; v.len()])),
            format!("│ bundle file {device}"),
        ),
        (
            "the reference's capture as the device's",
            Box::new(|d| rewrite(d, &device, |_| reference.clone())),
            format!("│ bundle file {device}"),
        ),
        (
            "zeroed inputs",
            Box::new(|d| rewrite(d, "inputs.npz", |v| vec![0; v.len()])),
            "│ bundle file inputs.npz".into(),
        ),
        (
            "an unlisted file",
            Box::new(|d| std::fs::write(d.join("notes.md"), "all fine").unwrap()),
            "not in the manifest".into(),
        ),
        (
            "another version",
            Box::new(|d| edit_manifest(d, |m| m["hefprobe"] = bumped.clone().into())),
            format!("recorded by hefprobe {bumped}"),
        ),
        (
            "a version one digit off",
            Box::new(|d| {
                forge(d, "evidence.md", &format!("hefprobe {version},"), &format!("hefprobe {bumped},"))
            }),
            "│ evidence.md".into(),
        ),
        (
            "an SVG tick one digit off",
            Box::new(|d| forge(d, "figure-layers.svg", &tick, &next)),
            "│ figure-layers.svg".into(),
        ),
        (
            "terminal escapes",
            Box::new(|d| forge(d, "report.md", "first drift", "\u{1b}[2Jfirst drift")),
            "\\u{1b}[2J".into(),
        ),
    ];
    for (i, (what, f, says)) in cases.iter().enumerate() {
        let d = t.path().join(format!("forged-{i}"));
        copy_tree(&b, &d);
        f(&d);
        let out = verify(&d).code(1).stdout(predicate::str::contains(says.as_str()));
        let stdout = out.get_output().stdout.clone();
        assert!(!stdout.contains(&0x1b), "{what}: an escape reached the terminal");
    }
}

/// No line of a document is exempt from comparison by its wording: a spilled run's bundle
/// (whose report once carried "captures spilled to disk", left out of comparisons) names a
/// forged figure on a line that says it.
#[test]
fn a_line_that_says_captures_spilled_is_compared_like_any_other() {
    let t = tempfile::tempdir().unwrap();
    // 96 tokens over 6 layers: 13 MiB of captures in memory, an 8 MiB budget spills them.
    let tokens: Vec<String> = (0..96).map(|i| ((i * 37 + 5) % 500 + 1).to_string()).collect();
    let p = write(
        t.path(),
        "spill.toml",
        &format!(
            "{HEAD}[checkpoint]\nsynth = \"tinystories\"\nhidden = 64\nlayers = 6\nheads = 4\nkv_heads = 2\n\
             vocab = 512\n[inputs]\ntokens = [{}]\ndecode = 2\n{EMULATOR}",
            tokens.join(", ")
        ),
    );
    let b = t.path().join("b");
    hefprobe()
        .env("TMPDIR", t.path())
        .args(["--max-memory", "8M", "run"])
        .arg(&p)
        .args(["--backend", "emulator=shared-softmax@layers=0", "--no-explain", "--bundle"])
        .arg(&b)
        .timeout(timeout())
        .assert()
        .code(1)
        .stdout(predicate::str::contains("captures spilled to disk"));
    verify(&b).code(0).stdout(predicate::str::contains("all same: "));
    let md = std::fs::read_to_string(b.join("report.md")).unwrap();
    let line = md.lines().find(|l| l.contains("| `logits` |")).unwrap().to_string();
    let cosine = line.split('|').nth(4).unwrap().trim().to_string();
    let forged = line.replace(&cosine, "0.999999") + " captures spilled to disk";
    forge(&b, "report.md", &line, &forged);
    verify(&b).code(1).stdout(predicate::str::contains("│ report.md"));
}

/// `hefprobe ARGS` with its stdout (`stream` 1) or stderr (2) on a pipe whose reader is gone, or
/// on /dev/full (`full`): its status, and what it wrote on the other stream.
#[cfg(unix)]
fn on_a_failing_stream(args: &[std::ffi::OsString], stream: i32, full: bool) -> (Option<i32>, String) {
    use assert_cmd::cargo::CommandCargoExt;
    use std::process::Stdio;
    let sink: Stdio = match full {
        true => std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap().into(),
        false => {
            let (reader, writer) = std::io::pipe().unwrap();
            drop(reader);
            writer.into()
        }
    };
    let mut c = std::process::Command::cargo_bin("hefprobe").unwrap();
    c.args(args);
    match stream {
        1 => c.stdout(sink).stderr(Stdio::piped()),
        _ => c.stderr(sink).stdout(Stdio::piped()),
    };
    let out = c.output().unwrap();
    let other = if stream == 1 { out.stderr } else { out.stdout };
    (out.status.code(), String::from_utf8_lossy(&other).into_owned())
}

/// Every printing command ends as the tools beside it do when its output fails, never with a
/// panic (exit 101, "failed printing to stdout"): a reader that went away (`| head -1`) is a
/// quiet 141, a full device exit 3 naming the stream, stdout's or stderr's.
#[cfg(unix)]
#[test]
fn every_printing_command_ends_quietly_on_a_closed_pipe_and_with_3_on_a_full_device() {
    let t = tempfile::tempdir().unwrap();
    let p = tiny_probe(t.path(), "");
    let b = tiny_bundle(t.path());
    let at = |name: &str| t.path().join(name).into_os_string();
    let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
    let commands: Vec<Vec<std::ffi::OsString>> = vec![
        args(&["--help"]),
        args(&["faults"]),
        args(&["bisect", "plan", "--synth", "tinystories"]),
        [args(&["synth-hef", "--synth", "tinystories", "-o"]), vec![at("x.hef")]].concat(),
        [args(&["reference", "--synth", "tinystories", "--tokens", "1,2", "-o"]), vec![at("r.npz")]].concat(),
        [args(&["run"]), vec![p.clone().into_os_string()]].concat(),
        [args(&["verify"]), vec![b.clone().into_os_string()]].concat(),
        args(&["bench", "--preset", "tinystories", "--prompt-len", "4", "--decode", "1", "--reps", "1"]),
    ];
    for c in &commands {
        let (code, err) = on_a_failing_stream(c, 1, false);
        assert_eq!(code, Some(141), "{c:?} on a closed pipe: {err}");
        assert!(!err.contains("panicked") && !err.contains("error:"), "{c:?}: quietly: {err}");
        let (code, err) = on_a_failing_stream(c, 1, true);
        assert_eq!(code, Some(3), "{c:?} on /dev/full: {err}");
        assert!(err.contains("error: stdout: No space left on device"), "{c:?}: {err}");
    }
    // stderr: what a run announces there ("wrote PATH").
    let report = format!("markdown={}", t.path().join("r.md").display());
    let run = [args(&["run"]), vec![p.into_os_string()], args(&["--report", &report])].concat();
    let (code, out) = on_a_failing_stream(&run, 2, true);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("error: stderr: No space left on device"), "{out}");
    let (code, _) = on_a_failing_stream(&run, 2, false);
    assert_eq!(code, Some(141));
}

/// `-` (stdout) takes one report at most: two documents run together there.
#[test]
fn at_most_one_report_goes_to_stdout() {
    let t = tempfile::tempdir().unwrap();
    let p = tiny_probe(t.path(), "");
    for pair in [["json=-", "json=-"], ["json=-", "markdown=-"], ["markdown", "json=-"]] {
        hefprobe()
            .arg("run")
            .arg(&p)
            .args(["--report", pair[0], "--report", pair[1]])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("both go to stdout"));
    }
    hefprobe().args(["faults", "--report", "markdown", "--report", "json"]).assert().code(2);
}

/// A bundle is there whole or not at all: a run that stops (a HEF that is not there, a fault
/// the catalog does not know), a sweep that fails at its second point: no folder, nothing
/// beside it. An npz on a full device is exit 3 and says nothing of zip's own drop.
#[test]
fn a_bundle_is_written_whole_or_not_at_all() {
    let t = tempfile::tempdir().unwrap();
    let p = tiny_probe(t.path(), "");
    for backend in ["hef=nosuch.hef", "emulator=nosuchfault"] {
        hefprobe()
            .arg("run")
            .arg(&p)
            .args(["--backend", backend, "--bundle"])
            .arg(t.path().join("b"))
            .timeout(timeout())
            .assert()
            .failure();
    }
    let sweep = write(
        t.path(),
        "sw.toml",
        &format!("{HEAD}[checkpoint]\nsynth = \"tinystories\"\nlayers = 2\nvocab = 300\n[inputs]\ntokens = [5, 9, 44]\n\
                  [sweep]\nhidden = [64, 100000000]\nhead_dim = 32\nquant = [\"w8a16\"]\ngenerate = 2\n"),
    );
    hefprobe()
        .arg("sweep")
        .arg(&sweep)
        .arg("--bundle")
        .arg(t.path().join("b"))
        .timeout(timeout())
        .assert()
        .code(2);
    let left: Vec<_> = std::fs::read_dir(t.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(!left.iter().any(|n| n.to_string_lossy().contains('b') && n != "sw.toml"), "{left:?}");
    #[cfg(unix)]
    hefprobe()
        .args(["reference", "--synth", "tinystories", "--tokens", "1,2,3", "-o", "/dev/full"])
        .timeout(timeout())
        .assert()
        .code(3)
        .stderr(predicate::str::contains("No space left").and(predicate::str::contains("ZipWriter").not()));
}

/// `program` under an address-space limit of `bytes`. Under cargo's runner (qemu-aarch64 for
/// the arm64 tier) the limit is set by the host's `prlimit` on the runner itself: qemu-user
/// ignores a guest's setrlimit(RLIMIT_AS), which a `pre_exec` in this (guest) process would be.
#[cfg(unix)]
fn address_limited(program: &Path, bytes: u64) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let runner = std::env::vars().find(|(k, _)| k.starts_with("CARGO_TARGET_") && k.ends_with("_RUNNER"));
    if let Some((_, words)) = runner {
        let mut c = std::process::Command::new("prlimit");
        c.arg(format!("--as={bytes}")).arg("--").args(words.split_whitespace()).arg(program);
        return c;
    }
    let mut c = std::process::Command::new(program);
    // SAFETY: setrlimit in the child before exec; it touches nothing of the parent's.
    unsafe {
        c.pre_exec(move || {
            let r = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
            match libc::setrlimit(libc::RLIMIT_AS, &r) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    c
}

/// The memory budget is the least of what the process may take: under an address-space limit
/// (`prlimit --as=2000000000`), a 3B reference is refused with the figure and the limit, exit 2,
/// never a signal; `--max-memory 500M` refuses a 1.1 GiB checkpoint before it is read (its
/// tensor data a sparse file, so the test reads nothing of it either).
#[cfg(unix)]
#[test]
fn the_budget_is_the_least_of_the_limits_the_process_has_and_weights_are_checked_before_reading() {
    let t = tempfile::tempdir().unwrap();
    let mut c = address_limited(&assert_cmd::cargo::cargo_bin("hefprobe"), 2_000_000_000);
    c.args(["reference", "--synth", "llama3.2-3b", "--tokens", "1,2,3", "-o"]).arg(t.path().join("r.npz"));
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs 12.0 GiB, budget 1.") && err.contains("the address-space limit"), "{err}");
    let ck = common::small_checkpoint(t.path(), "ck", 512);
    let header =
        br#"{"model.embed_tokens.weight":{"dtype":"F32","shape":[300000000],"data_offsets":[0,1200000000]}}"#;
    let mut f = std::fs::File::create(ck.join("model.safetensors")).unwrap();
    std::io::Write::write_all(&mut f, &(header.len() as u64).to_le_bytes()).unwrap();
    std::io::Write::write_all(&mut f, header).unwrap();
    f.set_len(8 + header.len() as u64 + 1_200_000_000).unwrap();
    hefprobe()
        .args(["--max-memory", "500M", "reference", "--tokens", "1,2", "--checkpoint"])
        .arg(&ck)
        .arg("-o")
        .arg(t.path().join("r.npz"))
        .timeout(timeout())
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "the weights in model.safetensors: needs 1.1 GiB, budget 500.0 MiB",
        ));
}

/// An allocation the system refuses, past every check, ends the process with exit 3 and its size
/// and stage (the allocator's own message), never Rust's abort (signal 6).
#[cfg(unix)]
#[test]
fn a_refused_allocation_is_exit_3_with_its_size_and_what_was_built() {
    if std::env::var_os("HEFPROBE_TEST_REFUSE").is_some() {
        // The parent limited this process to 1 GiB of address space before exec.
        let _stage = hefprobe::alloc::building(&"a test's block");
        let v = vec![7u8; 4 << 30];
        std::hint::black_box(&v);
        return;
    }
    // This test binary again, alone, as the child, limited to 1 GiB of address space.
    let mut child = address_limited(&std::env::current_exe().unwrap(), 1 << 30);
    child
        .args([
            "--exact",
            "a_refused_allocation_is_exit_3_with_its_size_and_what_was_built",
            "--test-threads=1",
        ])
        .env("HEFPROBE_TEST_REFUSE", "1");
    let out = child.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("error: out of memory: 4.0 GiB for a test's block could not be allocated"), "{err}");
}

/// A loop of symbolic links among prefix HEFs is a path the user gave: exit 2 naming it, not a
/// runtime failure.
#[cfg(unix)]
#[test]
fn a_symlink_loop_among_prefix_hefs_is_exit_2_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("prefixes");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(dir.join("b.hef"), dir.join("a.hef")).unwrap();
    std::os::unix::fs::symlink(dir.join("a.hef"), dir.join("b.hef")).unwrap();
    hefprobe()
        .args(["bisect", "run"])
        .arg(&dir)
        .args(["--synth", "tinystories", "--tokens", "5,9"])
        .timeout(timeout())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("a.hef").and(predicate::str::contains("symbolic links")));
}
