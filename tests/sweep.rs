//! `sweep`: a small grid over hidden sizes and quant settings produces one point per
//! combination, with teacher-forced logits figures and greedy degeneracy figures.

use hefprobe::probe::schema::Probe;
use hefprobe::probe::sweep::run_sweep;
use std::path::Path;

const PROBE: &str = r#"
version = 1
name = "tiny-sweep"
question = "q?"
[checkpoint]
synth = "tinystories"
layers = 2
vocab = 300
[inputs]
tokens = [5, 9, 44, 120, 7, 7, 31]
[sweep]
hidden = [64, 128]
head_dim = 32
quant = ["w8a16", "w4a8"]
generate = 6
"#;

#[test]
fn sweep_runs_every_point_and_orders_quant_hypotheses() {
    let probe = Probe::parse(PROBE, Path::new("tiny.toml")).unwrap();
    let mut seen = Vec::new();
    let points = run_sweep(&probe, None, |l| seen.push(l.to_string())).unwrap();
    assert_eq!(points.len(), 4);
    assert_eq!(seen.len(), 4);
    for h in [64, 128] {
        let at = |s: &str| points.iter().find(|p| p.hidden == h && p.setting == s).unwrap();
        let (w8, w4) = (at("quant:w8a16"), at("quant:w4a8"));
        assert!(w8.logits_cosine > w4.logits_cosine, "coarser quantization drifts more at hidden {h}");
        assert!(w8.logits_cosine > 0.999 && w8.logits_cosine < 1.0);
        assert_eq!(w8.tokens.len(), 6);
        assert!(w8.longest_run >= 1 && w8.distinct_ratio > 0.0);
    }
}

#[test]
fn sweep_without_a_grid_is_a_clear_error() {
    let text = PROBE.split("[sweep]").next().unwrap();
    let probe = Probe::parse(text, Path::new("tiny.toml")).unwrap();
    let e = run_sweep(&probe, None, |_| {}).unwrap_err().to_string();
    assert!(e.contains("no [sweep] section"), "{e}");
}

/// Base scope re-runs the prefill over the whole sequence for every token; on the clean
/// reference and with weight-only quantization (no calibration) it generates exactly what
/// the KV-cache path does, and its teacher-forced figures cover one prefill per point.
#[test]
fn base_scope_regenerates_without_the_cache_and_matches_kv_where_it_must() {
    let text = PROBE.replace("hidden = [64, 128]", "hidden = [64]").replace(
        "quant = [\"w8a16\", \"w4a8\"]",
        "quant = [\"w8\", \"w8a8,granularity=channel\", \"w8a8,keep=2\"]\nscope = [\"kv\", \"base\"]",
    );
    let probe = Probe::parse(&text, Path::new("tiny.toml")).unwrap();
    let points = run_sweep(&probe, None, |_| {}).unwrap();
    assert_eq!(points.len(), 6);
    let at =
        |s: &str, scope: &str| points.iter().find(|p| p.scope == scope && p.setting.starts_with(s)).unwrap();
    let (kv, base) = (at("quant:w8", "kv"), at("quant:w8", "base"));
    assert_eq!(base.setting, "quant:w8 (base scope)");
    assert_eq!(base.tokens, kv.tokens, "weights-only quantization is scope-independent");
    assert_eq!(base.tokens.len(), 6);
    for p in &points {
        assert!(
            p.logits_cosine > 0.99 && p.logits_cosine <= 1.0 + 1e-9,
            "{}: {}",
            p.setting,
            p.logits_cosine
        );
    }

    let bad = text.replace("scope = [\"kv\", \"base\"]", "scope = [\"tbt\"]");
    let e = Probe::parse(&bad, Path::new("tiny.toml")).unwrap_err().to_string();
    assert!(e.contains("sweep.scope") && e.contains("`tbt`"), "{e}");
}

/// `sweep --bundle`: the points, the table and the probe pinned; verify re-runs the sweep and
/// finds every number the same; an edited point is named.
#[test]
fn a_sweep_bundle_replays_the_same_and_an_edited_point_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("tiny.toml");
    std::fs::write(&probe, PROBE.replace("hidden = [64, 128]", "hidden = [64]")).unwrap();
    let bundle = dir.path().join("b");
    let hefprobe = || assert_cmd::Command::cargo_bin("hefprobe").unwrap();
    hefprobe().arg("sweep").arg(&probe).arg("--bundle").arg(&bundle).assert().code(1);
    let out = hefprobe().arg("verify").arg(&bundle).assert().code(0);
    let said = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(said.contains(" 0 different"), "{said}");
    let points = bundle.join("points.json");
    let text = std::fs::read_to_string(&points).unwrap();
    std::fs::write(&points, text.replacen("\"prompt_len\": 7", "\"prompt_len\": 8", 1)).unwrap();
    let out = hefprobe().arg("verify").arg(&bundle).assert().code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stdout).contains("points.json changed"));
}
