//! `explain --pattern`: a finding's record ranked against every hypothesis of the catalog, on
//! small synthesized checkpoints (hidden 320, 2 layers, vocab 64) (no downloads). `first-slot-output` (each phase returns its
//! first position's logits) makes every base-scope step predict the same token: a known
//! collapse, so a record of only degenerate observations must rank it "reproduces", and one with
//! a coherent observation it disturbs must mark it "partly", missing that one.

mod common;

use common::hefprobe;
use hefprobe::model::synth::SynthSpec;
use hefprobe::model::Arch;
use hefprobe::probe::pattern::judge::{Decided, Hypothesis, Status, Verdict};
use hefprobe::probe::pattern::{explain, Pattern};
use std::path::Path;

const DEGENERATE: &str = r#"
version = 2
finding = 16
summary = "tiny record"
[defaults]
recipe = "w8"
scope = "base"
frame = 14
tokens = 8
run = 4
prompt = [3, 17, 5, 40, 9, 33]
[[observation]]
id = "D1"
source = "test"
hidden = 320
layers = 2
heads = 5
kv_heads = 5
vocab = 64
shard_count = 1
outcome = "repeats"
run = 4
from = 2
[[cleared]]
cause = "lm-head-split"
[[cleared]]
cause = "gqa-ratio"
"#;

const COHERENT: &str = r#"
[[observation]]
id = "C1"
source = "test"
hidden = 256
layers = 2
vocab = 64
outcome = "coherent"
[[cleared]]
cause = "depth"
"#;

/// Per-shard figures as finding 16's TinyMistral page records them, on the tiny model's 64
/// columns in shards of 32: shard 0 the worse, shard 1's argmax the reference's.
const SHARDED: &str = r#"
[[observation]]
id = "F1"
source = "test"
hidden = 320
layers = 2
heads = 5
kv_heads = 5
vocab = 64
shards = [32, 32]
outcome = "figures"
[[observation.figure]]
metric = "cosine"
shard = 0
value = 0.84
band = 0.05
[[observation.figure]]
metric = "cosine"
shard = 1
value = 0.92
band = 0.05
[[observation.figure]]
metric = "argmax"
shard = 1
agree = true
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
    // Random weights do not collapse: the recipe alone contradicts the record.
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
    assert_eq!(first_slot.misses(), [1]);
    assert!(
        first_slot.results[1].figures.contains("leaves the recipe's tokens"),
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
    // Nothing reproduces the whole record, and the report says so, and nothing else contrary.
    assert!(e.hypotheses.iter().all(|j| j.verdict != Verdict::Reproduces));
    let c = e.conclusion();
    assert!(
        c.starts_with("No hypothesis reproduces the whole record.")
            && c.contains("first-slot-output (misses C1)"),
        "{c}"
    );
    assert!(!c.contains("None reproduces even part"), "{c}");
    // The coherent observation of another width ran on a stand-in of its own shape, said weak.
    assert_eq!(e.stood_in[1].evidence, hefprobe::probe::pattern::bed::Evidence::Synthesized);
    assert!(c.contains("1 of 2 observations (C1) ran on synthesized stand-ins"), "{c}");
}

/// Figures on record are judged within their band (an overshoot is off the record like an
/// undershoot), and a fault whose claim about the logits a figure contradicts is contradicted
/// without a run: no lm_head against a shard whose argmax is the reference's, shard 0's own
/// scale against shard 0 being the worse shard.
#[test]
fn figures_are_judged_in_their_band_and_some_hypotheses_fall_without_a_run() {
    let p = Pattern::parse(
        &DEGENERATE
            .replace("[[observation]]\nid = \"D1\"", &format!("{SHARDED}[[observation]]\nid = \"D1\"")),
        Path::new("tiny.toml"),
    )
    .unwrap();
    let e = explain(&p, &tiny(320, 5), 2).unwrap();
    let by = |l: &str| e.hypotheses.iter().find(|j| j.label == l).unwrap_or_else(|| panic!("{l}"));
    for label in ["no-lm-head", "lm-head-shards:2,scale=shard0"] {
        let j = by(label);
        assert_eq!(j.structural(), [0], "{label}: {:?}", j.results[0]);
        assert_eq!(j.results[0].decided, Decided::Structure);
        assert!(e.conclusion().contains(&format!("{label} (by F1, no run needed)")), "{}", e.conclusion());
    }
    // The recipe alone leaves the logits near the reference: a cosine far above 0.84 ± 0.05 is
    // off the record, not a better match.
    let base = e.hypotheses.iter().find(|j| matches!(j.hypothesis, Hypothesis::Baseline)).unwrap();
    assert_eq!(base.results[0].status, Status::Missed);
    assert!(
        base.results[0].figures.contains("shard 0 cosine 1.0000 beyond the recipe's")
            && base.results[0].figures.contains("(off the record)"),
        "{}",
        base.results[0].figures
    );
}

/// A record that lists no cleared cause says so, and never that every one came out contradicted.
#[test]
fn a_record_without_cleared_causes_says_so() {
    let text = DEGENERATE.split("[[cleared]]").next().unwrap().to_string();
    let p = Pattern::parse(&text, Path::new("tiny.toml")).unwrap();
    let e = explain(&p, &tiny(320, 5), 2).unwrap();
    let c = e.conclusion();
    assert!(
        c.contains("The record lists no cause the finding cleared.") && !c.contains("Every cause"),
        "{c}"
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
    assert!(stderr.contains("emulations in") && stderr.contains("thread(s)"), "{stderr}");
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
    std::fs::write(&record, DEGENERATE.replace("run = 4\nprompt", "run = 1\nprompt")).unwrap();
    let out = hefprobe().args(["explain", "--pattern"]).arg(&record).assert().code(2).get_output().clone();
    let e = String::from_utf8(out.stderr).unwrap();
    assert!(e.contains("bad.toml") && e.contains("`defaults.run`"), "{e}");
    // An impossible shape names the record, the observation and its key, not the synthesizer.
    std::fs::write(&record, DEGENERATE.replace("heads = 5\nkv_heads = 5", "heads = 7\nkv_heads = 7"))
        .unwrap();
    let out = hefprobe().args(["explain", "--pattern"]).arg(&record).assert().code(2).get_output().clone();
    let e = String::from_utf8(out.stderr).unwrap();
    assert!(e.contains("bad.toml [[observation]] 1 (D1) key `heads`"), "{e}");
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
