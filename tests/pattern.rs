//! `explain --pattern`: a finding's record ranked against every hypothesis of the catalog, on
//! small synthesized checkpoints (hidden 320, 2 layers, vocab 64) (no downloads). `first-slot-output` (each phase returns its
//! first position's logits) makes every base-scope step predict the same token: a known
//! collapse, so a record of only degenerate observations must rank it "reproduces", and one with
//! a coherent observation it disturbs must mark it "partly", missing that one.

mod common;

use common::hefprobe;
use hefprobe::model::synth::SynthSpec;
use hefprobe::model::Arch;
use hefprobe::probe::pattern::judge::{Hypothesis, Status, Verdict};
use hefprobe::probe::pattern::{explain, Pattern};
use std::path::Path;

const DEGENERATE: &str = r#"
version = 1
finding = 16
summary = "tiny record"
baseline = "w8"
[generation]
tokens = 8
run = 4
[prompt]
tokens = [3, 17, 5, 40, 9, 33]
[[observation]]
hidden = 320
layers = 2
heads = 5
kv_heads = 5
lm_head_split = false
outcome = "degenerate"
[[cleared]]
cause = "lm-head-split"
[[cleared]]
cause = "gqa-ratio"
"#;

const COHERENT: &str = r#"
[[observation]]
hidden = 256
layers = 2
outcome = "coherent"
[[cleared]]
cause = "depth"
"#;

fn tiny(hidden: usize, heads: usize) -> hefprobe::model::Checkpoint {
    let mut s = SynthSpec::arch(Arch::Llama, 16);
    (s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.vocab) =
        (hidden, 2, heads, heads, Some(64), Some(64));
    s.build().unwrap()
}

#[test]
fn a_known_collapse_reproduces_the_record_and_the_cleared_causes_are_cleared() {
    let p = Pattern::parse(DEGENERATE, Path::new("tiny.toml")).unwrap();
    let e = explain(&p, &tiny(320, 5), 2).unwrap();
    let top = &e.hypotheses[0];
    assert!(matches!(&top.hypothesis, Hypothesis::Fault(s) if s == "first-slot-output"), "{}", top.label);
    assert_eq!(top.verdict, Verdict::Reproduces);
    assert!(top.results[0].longest_run.unwrap() >= 4, "{}", top.results[0].figures);
    // Random weights do not collapse: the baseline alone contradicts the record.
    let base = e.hypotheses.iter().find(|j| matches!(j.hypothesis, Hypothesis::Baseline)).unwrap();
    assert_eq!(base.verdict, Verdict::Contradicts, "{}", base.results[0].figures);
    // Every hypothesis of the grid is judged, the width faults among them.
    assert!(e.hypotheses.len() > 20);
    assert!(e.hypotheses.iter().any(|j| j.label.starts_with("tile-sum:64")));
    assert_eq!(e.cleared.len(), 2);
    for c in &e.cleared {
        assert_eq!(c.verdict, Verdict::Contradicts, "{}: {:?}", c.label, c.results);
    }
    assert!(e.conclusion().contains("first-slot-output"), "{}", e.conclusion());
}

#[test]
fn a_coherent_observation_it_disturbs_makes_it_partly_and_a_noop_passes_by_definition() {
    let p = Pattern::parse(&format!("{DEGENERATE}{COHERENT}"), Path::new("tiny.toml")).unwrap();
    let e = explain(&p, &tiny(320, 5), 2).unwrap();
    let first_slot = e.hypotheses.iter().find(|j| j.label == "first-slot-output").unwrap();
    assert_eq!(first_slot.verdict, Verdict::Partly);
    assert_eq!(first_slot.misses(), [2]);
    assert!(
        first_slot.results[1].figures.contains("leaves the baseline's tokens"),
        "{}",
        first_slot.results[1].figures
    );
    // tile-scale:256 at hidden 256 fits one tile: a no-op by definition, not run.
    let ts = e.hypotheses.iter().find(|j| j.label == "tile-scale:256").unwrap();
    assert_eq!(ts.results[1].status, Status::Reproduced);
    assert!(ts.results[1].figures.contains("no-op"), "{}", ts.results[1].figures);
    // Depth: the degenerate checkpoint is no deeper than the coherent one.
    let depth = e.cleared.iter().find(|c| c.label == "depth").unwrap();
    assert_eq!(depth.verdict, Verdict::Contradicts, "{:?}", depth.results);
    // Nothing reproduces the whole record, and the report says so.
    assert!(e.hypotheses.iter().all(|j| j.verdict != Verdict::Reproduces));
    assert!(
        e.conclusion().starts_with("Nothing in the catalog reproduces the whole record."),
        "{}",
        e.conclusion()
    );
}

#[test]
fn the_cli_prints_the_ranked_table_and_writes_every_report() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("h320");
    hefprobe()
        .args([
            "synth",
            "--arch",
            "llama",
            "--hidden",
            "320",
            "--layers",
            "2",
            "--heads",
            "5",
            "--kv-heads",
            "5",
        ])
        .args(["--vocab", "64", "--seed", "16", "-o"])
        .arg(&ckpt)
        .assert()
        .code(0);
    let record = dir.path().join("r.toml");
    std::fs::write(&record, DEGENERATE).unwrap();
    let md = dir.path().join("r.md");
    let json = dir.path().join("r.json");
    let svg = dir.path().join("r.svg");
    let out = hefprobe()
        .args(["explain", "--pattern"])
        .arg(&record)
        .arg("--checkpoint")
        .arg(&ckpt)
        .args(["--report", "terminal"])
        .arg(format!("--report=markdown={}", md.display()))
        .arg(format!("--report=json={}", json.display()))
        .arg(format!("--report=svg={}", svg.display()))
        .assert()
        .code(0)
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let row = stdout
        .lines()
        .find(|l| l.starts_with('│') && l.contains("first-slot-output"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains("reproduces") && row.contains("run "), "{row}");
    assert!(
        stdout.contains("Causes the finding cleared") && stdout.contains("The deciding experiment"),
        "{stdout}"
    );
    assert!(stderr.contains("base-scope generations in") && stderr.contains("thread(s)"), "{stderr}");
    let md = std::fs::read_to_string(&md).unwrap();
    let md_row = md.lines().find(|l| l.contains("`first-slot-output`")).unwrap_or_else(|| panic!("{md}"));
    assert!(md_row.starts_with("| 1 ") && md_row.contains("reproduces"), "{md_row}");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["hypotheses"][0]["verdict"], "reproduces");
    assert!(j["cleared"].as_array().unwrap().iter().all(|c| c["verdict"] == "contradicts"));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
}

#[test]
fn a_bad_record_is_exit_2_naming_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("bad.toml");
    std::fs::write(&record, DEGENERATE.replace("run = 4", "run = 1")).unwrap();
    let out = hefprobe().args(["explain", "--pattern"]).arg(&record).assert().code(2).get_output().clone();
    let e = String::from_utf8(out.stderr).unwrap();
    assert!(e.contains("bad.toml") && e.contains("`generation.run`"), "{e}");
    std::fs::write(&record, DEGENERATE.replace("hidden = 320", "hiden = 320")).unwrap();
    let out = hefprobe().args(["explain", "--pattern"]).arg(&record).assert().code(2).get_output().clone();
    let e = String::from_utf8(out.stderr).unwrap();
    assert!(e.contains("bad.toml") && e.contains("hiden"), "{e}");
}

/// Outside a checkout `--pattern probes/findings/16.toml` reads the installed catalog's record
/// (the Debian package installs probes/findings/ beside the probes), and says so.
#[test]
fn a_record_not_here_is_read_from_the_installed_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir(dir.path().join("findings")).unwrap();
    std::fs::copy(root.join("probes/findings/16.toml"), dir.path().join("findings/16.toml")).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let out = hefprobe()
        .current_dir(elsewhere.path())
        .env("HEFPROBE_PROBES", dir.path())
        .args(["explain", "--pattern", "probes/findings/16.toml", "--checkpoint", "no-such-checkpoint"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let e = String::from_utf8(out.stderr).unwrap();
    assert!(e.contains("using the installed catalog's") && e.contains("findings/16.toml"), "{e}");
    assert!(e.contains("no-such-checkpoint"), "the record was read; the checkpoint is what is missing: {e}");
}

/// reports/finding-16.md is made by scripts/finding-16.sh from the real SmolLM2 (an opt-in
/// download, so it is not regenerated here): it records the script's command, no machine path,
/// and every section the tool writes.
#[test]
fn the_committed_finding_16_report_is_the_scripts() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let md = std::fs::read_to_string(root.join("reports/finding-16.md")).unwrap();
    let script = std::fs::read_to_string(root.join("scripts/finding-16.sh")).unwrap();
    assert!(script.contains("--report markdown=reports/finding-16.md --report svg=reports/finding-16.svg"));
    assert!(md.contains(
        "`hefprobe explain --pattern probes/findings/16.toml --checkpoint target/regen/SmolLM2-135M-Instruct.Q4_1.gguf \
         --report markdown=reports/finding-16.md --report svg=reports/finding-16.svg`"
    ));
    for section in [
        "## Conclusion",
        "## Hypotheses, ranked",
        "## Causes the finding cleared",
        "## The deciding experiment",
    ] {
        assert!(md.contains(section), "{section}");
    }
    // No absolute path at all (a word starting with `/` then a letter or digit): the report
    // names the checkpoint relative to the repository, whichever machine made it.
    let words = md.lines().flat_map(|l| l.split(|c: char| c.is_whitespace() || "`(=\"'".contains(c)));
    let absolute =
        words.into_iter().find(|w| w.strip_prefix('/').is_some_and(|r| r.starts_with(char::is_alphanumeric)));
    assert!(absolute.is_none(), "a machine path in reports/finding-16.md: {absolute:?}");
    let svg = std::fs::read_to_string(root.join("reports/finding-16.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("longest run"));
}
