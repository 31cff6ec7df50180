//! `hefprobe suite` end to end: the probe catalog against simulated HEFs (a clean HEF passes
//! against its baseline; a planted fault fails exactly the faulted target's probes, with JUnit
//! failures naming the located tap and the explanation), planted run-to-run noise failing the
//! gate as unstable, a HEF for another architecture as an input error, shards merging byte for
//! byte into the unsharded result, and every output parsed (JUnit validated against the
//! committed schema).

mod common;
mod xsd;

use hefprobe::device::synth_hef::{synth_hef, SimCheckpoint, SimNoise, SynthHefOptions};
use hefprobe::model::synth::SynthSpec;
use hefprobe::report::ReportTarget;
use hefprobe::suite::baseline::Baseline;
use hefprobe::suite::figures::Figures;
use hefprobe::suite::outputs::{ratchet, SuiteOutputs};
use hefprobe::suite::result::{ErrorKind, Status, SuiteResult};
use hefprobe::suite::run::{run_suite, Clock, SuiteOptions};
use hefprobe::suite::shard::Shard;
use hefprobe::suite::spec::Suite;
use hefprobe::suite::{history, merge};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// A simulated HEF of the catalog's checkpoint (tinystories, seed 0), prefilling in chunks of
/// 16 as probes/kv-cache-layout.toml does.
fn write_hef(dir: &Path, name: &str, opts: SynthHefOptions, hw_arch: Option<i32>) -> PathBuf {
    let spec = SynthSpec::preset("tinystories", 0).unwrap();
    let ckpt = spec.build().unwrap();
    let mut hef = synth_hef(&ckpt, SimCheckpoint::Synth(spec), &opts).unwrap();
    if let Some(a) = hw_arch {
        hef.hw_arch = a;
    }
    let path = dir.join(name);
    std::fs::write(&path, hef.to_bytes()).unwrap();
    path
}

fn small() -> SynthHefOptions {
    SynthHefOptions { prefill_tokens: 16, kv_cache_size: 256, ..Default::default() }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn opts(baseline: Option<&Path>, update: bool) -> SuiteOptions {
    SuiteOptions {
        baseline: baseline.map(Path::to_path_buf),
        update_baseline: update,
        command: "hefprobe suite SUITE.toml".into(),
        clock: Clock::Fixed("2025-01-31T02:00:00Z".into()),
        ..SuiteOptions::default()
    }
}

/// Write a result's reports (no colour), as `suite` and `merge` do.
fn emit(r: &SuiteResult, targets: &[ReportTarget]) {
    hefprobe::report::write(&mut r.clone(), targets, false).unwrap();
}

fn targets(specs: &[&str]) -> Vec<ReportTarget> {
    specs.iter().map(|s| ReportTarget::parse(s).unwrap()).collect()
}

/// Every output of a result, rendered (terminal without colour).
fn outputs(r: &SuiteResult, dir: &Path, tag: &str) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    for (format, ext) in
        [("json", "json"), ("junit", "xml"), ("markdown", "md"), ("html", "html"), ("terminal", "txt")]
    {
        let path = dir.join(format!("{tag}.{ext}"));
        emit(r, &targets(&[&format!("{format}={}", path.display())]));
        out.insert(format, std::fs::read_to_string(path).unwrap());
    }
    out
}

/// The JUnit document validates against junit-10.xsd; returns it parsed-friendly.
fn check_junit(text: &str) {
    let errors = xsd::junit().validate(text);
    assert!(
        errors.is_empty(),
        "JUnit does not validate against junit-10.xsd:\n{}\n{text}",
        errors.join("\n")
    );
}

/// The HTML page parses whole, has an inline SVG per failing pair and nothing from elsewhere.
fn check_html(text: &str, failing: usize) {
    let doc = roxmltree::Document::parse_with_options(
        text,
        roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() },
    )
    .unwrap_or_else(|e| panic!("the HTML is not well-formed: {e}"));
    let svgs = doc.descendants().filter(|n| n.tag_name().name() == "svg").count();
    assert!(svgs >= failing, "{svgs} inline SVGs for {failing} failing pairs");
    for n in doc.descendants().filter(|n| n.is_element()) {
        assert!(
            !matches!(n.tag_name().name(), "script" | "link" | "img" | "iframe"),
            "<{}>",
            n.tag_name().name()
        );
        for a in n.attributes() {
            if matches!(a.name(), "src" | "href") {
                assert!(!a.value().contains(':'), "{}={} points elsewhere", a.name(), a.value());
            }
        }
    }
    let rows =
        doc.descendants().filter(|n| n.attribute("class").is_some_and(|c| c.starts_with("pair "))).count();
    assert!(rows > 0);
}

#[test]
fn xsd_validator_rejects_what_the_schema_rejects() {
    xsd::self_test();
}

#[test]
fn the_catalog_against_simulated_hefs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let clean = write_hef(d, "clean.hef", small(), None);
    let faulted = write_hef(
        d,
        "faulted.hef",
        SynthHefOptions {
            faults: vec![hefprobe::fault::spec::FaultSpec::parse("shared-softmax@layers=0").unwrap()],
            ..small()
        },
        None,
    );
    let suite_text = |tonight: &Path| {
        format!(
            "version = 1\nname = \"nightly\"\nroot = \"{}\"\nprobes = [\"probes/*.toml\"]\n\
             [[target]]\nname = \"release\"\nkind = \"hef\"\npath = \"{}\"\n\
             [[target]]\nname = \"tonight\"\nkind = \"hef\"\npath = \"{}\"\nrevision = \"abc1234\"\n\
             [gate]\nruns = 2\n\
             [explain]\nfaults = [\"shared-softmax@layers=0\", \"cache-layout:transpose\"]\n",
            repo("").display(),
            clean.display(),
            tonight.display()
        )
    };
    let baseline = d.join("baseline.json");
    let history_file = d.join("history.jsonl");
    let finish_with = |update| SuiteOutputs {
        baseline: Some(baseline.clone()),
        update_baseline: update,
        accept: false,
        known: Vec::new(),
        history: Some(history_file.clone()),
        reports: Vec::new(),
    };

    // Night 1: both targets are the clean HEF; the first baseline is written.
    let s1 = Suite::load(&write(d, "night1.toml", &suite_text(&clean))).unwrap();
    let probes = s1.probes.len();
    let n1 = run_suite(&s1, &opts(Some(&baseline), true)).unwrap();
    ratchet(&n1, &finish_with(true)).unwrap();
    let sweeps = n1.pairs.iter().filter(|p| p.status == Status::Skipped).count();
    assert_eq!(sweeps, 2, "the sweep probe is skipped against each target");
    assert_eq!(n1.counts.pass, 2 * probes - sweeps, "{}", outputs(&n1, d, "n1")["terminal"]);
    assert_eq!(n1.exit_code(), 0);
    for p in n1.pairs.iter().filter(|p| p.status == Status::Pass) {
        let g = p.gate.as_ref().expect("device targets are gated");
        assert!(g.stable && g.max_abs == 0.0, "the simulated device is deterministic: {g:?}");
        assert_eq!(p.device.as_ref().unwrap().architecture.as_deref(), Some("HAILO10H"));
    }
    assert_eq!(
        n1.pairs.iter().find(|p| p.target == "tonight").unwrap().hef_revision.as_deref(),
        Some("abc1234")
    );

    // Night 2: tonight's HEF shares the softmax in layer 0.
    let s2 = Suite::load(&write(d, "night2.toml", &suite_text(&faulted))).unwrap();
    let n2 = run_suite(&s2, &opts(Some(&baseline), false)).unwrap();
    ratchet(&n2, &finish_with(false)).unwrap();
    let out = outputs(&n2, d, "n2");
    for p in n2.pairs.iter().filter(|p| p.status != Status::Skipped) {
        if p.target == "release" {
            assert_eq!(p.status, Status::Pass, "the clean HEF passes against its baseline: {p:?}");
            continue;
        }
        assert_eq!(p.status, Status::Regressed, "{}: {}", p.probe, out["terminal"]);
        assert_eq!(p.regressions[0].tap, "logits");
        let located = p.located.as_deref().unwrap();
        assert!(located.contains("first drift at logits"), "{located}");
        let explained = p.explanation.as_deref().unwrap();
        assert!(explained.starts_with("best explanation: shared-softmax@layers=0"), "{explained}");
        assert!(p.first_run.as_deref().unwrap().starts_with("regressed"), "re-run once and confirmed");
    }
    assert_eq!(n2.counts.regressed, probes - 1);
    assert_eq!(n2.exit_code(), 1);

    check_junit(&out["junit"]);
    let junit = roxmltree::Document::parse(&out["junit"]).unwrap();
    let failures: Vec<roxmltree::Node> = junit.descendants().filter(|n| n.has_tag_name("failure")).collect();
    assert_eq!(failures.len(), probes - 1);
    for f in &failures {
        let message = f.attribute("message").unwrap();
        assert_eq!(f.attribute("type"), Some("regressed"));
        assert!(message.contains(": logits cosine"), "the located tap: {message}");
        assert!(message.contains("best explanation shared-softmax@layers=0"), "the explanation: {message}");
        assert_eq!(f.parent().unwrap().attribute("classname"), Some("hefprobe.tonight"));
    }
    assert_eq!(junit.descendants().filter(|n| n.has_tag_name("testcase")).count(), 2 * probes);
    check_html(&out["html"], probes - 1);
    let json: serde_json::Value = serde_json::from_str(&out["json"]).unwrap();
    assert_eq!(json["schema"], "hefprobe.suite/1");
    assert_eq!(json["counts"]["regressed"], probes - 1);
    assert!(
        out["markdown"].contains("<summary>REGRESSED ") && out["markdown"].contains("noise band"),
        "{}",
        out["markdown"]
    );

    // The history has both nights; the trend of tonight's logits cosine shows the drop.
    let lines = history::read(&history_file).unwrap();
    assert_eq!(lines.len(), 2 * (2 * probes - sweeps));
    let spec = history::TrendSpec {
        figure: hefprobe::suite::figures::Figure::Cosine,
        tap: "logits".into(),
        pairs: vec!["shared-softmax/tonight".into(), "shared-softmax/release".into()],
    };
    let trends = history::trends(&lines, &spec);
    assert_eq!(trends.len(), 2);
    let tonight = trends.iter().find(|t| t.target == "tonight").unwrap();
    assert!(tonight.points[1].1 < tonight.band.unwrap().0, "{tonight:?}");
    let svg = hefprobe::report::band::render(&history::plot(&trends, &spec)).unwrap();
    assert!(roxmltree::Document::parse(&svg).is_ok());
}

#[test]
fn planted_noise_fails_the_gate_as_unstable_and_a_foreign_hef_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let noisy = write_hef(
        d,
        "noisy.hef",
        SynthHefOptions { noise: Some(SimNoise { std: 0.2, seed: 1 }), ..small() },
        None,
    );
    // hw_arch 0: a HEF compiled for Hailo-8.
    let foreign = write_hef(d, "foreign.hef", small(), Some(0));
    let suite = write(
        d,
        "S.toml",
        &format!(
            "version = 1\nroot = \"{}\"\nprobes = [\"probes/shared-softmax.toml\"]\n[[target]]\nkind = \"hef\"\npath = \"{}\"\n[[target]]\nkind = \"hef\"\npath = \"{}\"\n",
            repo("").display(),
            noisy.display(),
            foreign.display()
        ),
    );
    // A baseline the noise would regress against, were the pair compared.
    let mut b = Baseline::default();
    let perfect = Figures {
        argmax: Some(1.0),
        cosine: Some(1.0),
        kl: Some(0.0),
        sqnr_db: Some(200.0),
        agreement: None,
    };
    b.pairs
        .entry("shared-softmax".into())
        .or_default()
        .insert("noisy".into(), BTreeMap::from([("logits".into(), perfect)]));
    let baseline = d.join("b.json");
    b.save(&baseline).unwrap();
    let r = run_suite(&Suite::load(&suite).unwrap(), &opts(Some(&baseline), false)).unwrap();
    let noisy = r.pairs.iter().find(|p| p.target == "noisy").unwrap();
    assert_eq!(noisy.status, Status::Unstable, "{noisy:?}");
    let g = noisy.gate.as_ref().unwrap();
    assert!(!g.stable && g.runs == 3 && g.cosine < 0.9999, "{g:?}");
    assert!(noisy.regressions.is_empty() && noisy.figures.is_empty(), "not compared");
    let foreign = r.pairs.iter().find(|p| p.target == "foreign").unwrap();
    let e = foreign.error.as_ref().unwrap();
    assert_eq!((foreign.status, e.kind), (Status::Error, ErrorKind::Input));
    assert!(e.message.contains("HAILO8") && e.message.contains("HAILO10H"), "{}", e.message);
    assert_eq!(r.exit_code(), 2, "an input error outranks the unstable device (3)");
    let out = outputs(&r, d, "r");
    check_junit(&out["junit"]);
    let junit = roxmltree::Document::parse(&out["junit"]).unwrap();
    let types: Vec<&str> =
        junit.descendants().filter(|n| n.has_tag_name("error")).filter_map(|n| n.attribute("type")).collect();
    assert_eq!(types, ["unstable", "input"]);
    assert!(out["terminal"].contains("the device disagrees with itself"), "{}", out["terminal"]);
}

const SMALL_PROBE: &str = "version = 1\nname = \"NAME\"\nquestion = \"q?\"\n\
    [checkpoint]\nsynth = \"tinystories\"\nhidden = 64\nlayers = 2\nheads = 4\nkv_heads = 2\nintermediate = 128\nvocab = 300\n\
    [inputs]\ntokens = TOKENS\ndecode = 2\n";

/// Three small probes and a suite of three emulator targets: `tonight` is clean on night 1 and
/// shares a softmax on night 2 (regressed), `release` stays clean (pass), `stand-in` always
/// repeats the mask (known, once a person accepted it by name).
fn small_suite(d: &Path, tonight_faults: &str) -> PathBuf {
    std::fs::create_dir_all(d.join("p")).unwrap();
    for (i, tokens) in
        ["[5, 17, 42, 99, 3, 7]", "[1, 2, 3, 4, 5, 6, 7, 8, 9]", "[250, 31, 8, 64]"].iter().enumerate()
    {
        write(
            &d.join("p"),
            &format!("p{i}.toml"),
            &SMALL_PROBE.replace("NAME", &format!("small-{i}")).replace("TOKENS", tokens),
        );
    }
    write(
        d,
        "S.toml",
        &format!(
            "version = 1\nname = \"small\"\nprobes = [\"p/*.toml\"]\n\
             [[target]]\nname = \"tonight\"\nkind = \"emulator\"\nfaults = [{tonight_faults}]\n\
             [[target]]\nname = \"release\"\nkind = \"emulator\"\n\
             [[target]]\nname = \"stand-in\"\nkind = \"emulator\"\nfaults = [\"mask-repeat\"]\n\
             [explain]\nfaults = [\"shared-softmax@layers=0\", \"mask-repeat\"]\n"
        ),
    )
}

#[test]
fn three_shards_merge_to_the_unsharded_result_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let baseline = d.join("baseline.json");
    let night1 = Suite::load(&small_suite(d, "")).unwrap();
    let r1 = run_suite(&night1, &opts(Some(&baseline), true)).unwrap();
    assert_eq!((r1.counts.pass, r1.counts.failed), (6, 3), "no baseline yet: the stand-in fails");
    let known = (0..3).map(|i| format!("small-{i}/stand-in")).collect();
    ratchet(
        &r1,
        &SuiteOutputs {
            baseline: Some(baseline.clone()),
            update_baseline: true,
            known,
            ..SuiteOutputs::default()
        },
    )
    .unwrap();
    let frozen = std::fs::read_to_string(&baseline).unwrap();

    let night2 = Suite::load(&small_suite(d, "\"shared-softmax@layers=0\"")).unwrap();
    let whole = run_suite(&night2, &opts(Some(&baseline), false)).unwrap();
    let count = |s: Status| whole.pairs.iter().filter(|p| p.status == s).count();
    assert_eq!((count(Status::Regressed), count(Status::Pass), count(Status::Known)), (3, 3, 3));
    assert!(whole.pairs.iter().filter(|p| p.status == Status::Regressed).all(|p| p.explanation.is_some()));

    let mut shards = Vec::new();
    for k in 1..=3 {
        let mut o = opts(Some(&baseline), false);
        o.shard = Some(Shard::new(k, 3, "test").unwrap());
        let r = run_suite(&night2, &o).unwrap();
        assert_eq!(r.pairs.len(), 3, "9 pairs over 3 shards, evenly");
        let path = d.join(format!("shard-{k}.json"));
        emit(&r, &targets(&[&format!("json={}", path.display())]));
        shards.push(path);
    }
    shards.reverse(); // the order given does not matter
    let merged = merge::merge_files(&shards, None).unwrap();
    assert_eq!(merged, whole);
    let (a, b) = (outputs(&whole, d, "whole"), outputs(&merged, d, "merged"));
    for (format, text) in &a {
        assert_eq!(text, &b[format], "{format} differs");
    }
    check_junit(&a["junit"]);
    check_html(&a["html"], 3 + 3);

    // History and the baseline update come out the same too.
    for (tag, r) in [("whole", &whole), ("merged", &merged)] {
        std::fs::write(&baseline, &frozen).unwrap();
        let f = SuiteOutputs {
            baseline: Some(baseline.clone()),
            update_baseline: true,
            history: Some(d.join(format!("{tag}.jsonl"))),
            ..SuiteOutputs::default()
        };
        ratchet(r, &f).unwrap();
        std::fs::rename(&baseline, d.join(format!("{tag}-baseline.json"))).unwrap();
    }
    let read = |p: &str| std::fs::read_to_string(d.join(p)).unwrap();
    assert_eq!(read("whole.jsonl"), read("merged.jsonl"));
    assert_eq!(read("whole-baseline.json"), read("merged-baseline.json"));
    assert_eq!(
        read("whole-baseline.json"),
        frozen,
        "the ratchet keeps the regressed target's better figures"
    );

    // Shards run without a baseline (the README's night) and merged with one say what the
    // unsharded night says: the planted regression is `regressed`, the stand-in `known`.
    let mut bare = Vec::new();
    for k in 1..=3 {
        let mut o = opts(None, false);
        o.shard = Some(Shard::new(k, 3, "test").unwrap());
        let r = run_suite(&night2, &o).unwrap();
        assert!(r.pairs.iter().all(|p| p.status != Status::Regressed), "no baseline: nothing regressed");
        let path = d.join(format!("bare-{k}.json"));
        emit(&r, &targets(&[&format!("json={}", path.display())]));
        bare.push(path);
    }
    std::fs::write(&baseline, &frozen).unwrap();
    let judged = merge::merge_files(&bare, Some(&baseline)).unwrap();
    let statuses = |r: &SuiteResult| r.pairs.iter().map(|p| (p.key(), p.status)).collect::<Vec<_>>();
    assert_eq!(statuses(&judged), statuses(&whole));
    assert_eq!((judged.counts.regressed, judged.counts.known), (3, 3));
    assert_eq!(judged.baseline.as_deref(), Some(baseline.display().to_string().as_str()));
    let regs = |r: &SuiteResult| r.pairs.iter().map(|p| p.regressions.len()).collect::<Vec<_>>();
    assert_eq!(regs(&judged), regs(&whole));

    // A missing shard is named, not merged into a smaller run.
    let e = merge::merge_files(&shards[..2], None).unwrap_err().to_string();
    assert!(e.contains("in no shard given"), "{e}");
}

#[test]
fn the_command_line_exit_codes_files_and_step_summary() {
    use assert_cmd::Command;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let suite = small_suite(d, "");
    let run = |args: &[&str], env: &[(&str, &Path)]| {
        let mut c = Command::cargo_bin("hefprobe").unwrap();
        c.current_dir(d).args(args);
        for v in ["GITHUB_STEP_SUMMARY", "CI_NODE_INDEX", "CI_NODE_TOTAL", "JOB_COMPLETION_INDEX"] {
            c.env_remove(v);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        c.assert()
    };
    let s = suite.to_str().unwrap();
    // No baseline: the stand-in's planted fault is a failed probe.
    run(
        &[
            "suite",
            s,
            "--baseline",
            "b.json",
            "--update-baseline",
            "--report",
            "json=r1.json",
            "--report",
            "junit=r1.xml",
        ],
        &[],
    )
    .code(1);
    assert!(d.join("b.json").exists());
    check_junit(&std::fs::read_to_string(d.join("r1.xml")).unwrap());
    // A baseline written on the first night does not make its failures known: the next night
    // they still fail (they were "known", exit 0, before issue 53). A person names them.
    run(&["suite", s, "--baseline", "b.json", "--report", "markdown=-"], &[])
        .code(1)
        .stdout(predicates::str::contains("3 failed"));
    let names: Vec<String> = (0..3).map(|i| format!("--known=small-{i}/stand-in")).collect();
    let mut accept = vec!["suite", s, "--baseline", "b.json", "--update-baseline"];
    accept.extend(names.iter().map(String::as_str));
    run(&accept, &[]).code(1).stderr(predicates::str::contains("3 failing pairs accepted as known"));
    run(&["suite", s, "--baseline", "b.json", "--update-baseline", "--known", "small-9/stand-in"], &[])
        .code(2)
        .stderr(predicates::str::contains("--known `small-9/stand-in`: no such pair"));
    // Accepted by name, it is known: exit 0, and the summary goes to GitHub's step summary.
    let summary = d.join("summary.md");
    run(
        &["suite", s, "--baseline", "b.json", "--history", "h.jsonl", "--report", "markdown=-"],
        &[("GITHUB_STEP_SUMMARY", &summary)],
    )
    .code(0)
    .stdout(predicates::str::contains("3 known"));
    assert!(std::fs::read_to_string(&summary).unwrap().contains("3 known"));
    // Shards from the flag and from GitLab's variables, merged.
    run(&["suite", s, "--baseline", "b.json", "--shard", "1/2", "--report", "json=s1.json"], &[]).code(0);
    let mut c = Command::cargo_bin("hefprobe").unwrap();
    c.current_dir(d)
        .args(["suite", s, "--baseline", "b.json", "--report", "json=s2.json"])
        .env_remove("GITHUB_STEP_SUMMARY")
        .env("CI_NODE_INDEX", "2")
        .env("CI_NODE_TOTAL", "2")
        .assert()
        .code(0);
    run(&["merge", "s1.json", "s2.json", "--report", "json=m.json", "--history", "h.jsonl"], &[]).code(0);
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("m.json")).unwrap()).unwrap();
    assert_eq!((m["counts"]["pairs"].as_u64(), m["counts"]["known"].as_u64()), (Some(9), Some(3)));
    assert!(m["shard"].is_null() && !m["command"].as_str().unwrap().contains("--shard"));
    // The README's `suite --shard 2/3 ... && hefprobe merge shard-*.json`: a shard with failures
    // exits 0 and says who judges them; the merge fails the night.
    for k in ["1", "2"] {
        run(&["suite", s, "--shard", &format!("{k}/2"), "--report", &format!("json=bare-{k}.json")], &[])
            .code(0)
            .stderr(predicates::str::contains("`hefprobe merge` of every shard judges the night"));
    }
    run(&["merge", "bare-1.json", "bare-2.json"], &[]).code(1);
    // The trend of two runs.
    run(&["trend", "h.jsonl", "--report", "svg=trend.svg", "--pair", "small-0/stand-in"], &[]).code(0);
    assert!(roxmltree::Document::parse(&std::fs::read_to_string(d.join("trend.svg")).unwrap()).is_ok());
    // An output that is a file the command reads is refused before anything runs, however
    // the path is spelled; nothing is written.
    let before = std::fs::read_to_string(d.join("s1.json")).unwrap();
    let refused: [(&[&str], &str); 8] = [
        (&["merge", "s1.json", "s2.json", "--report", "json=./p/../s1.json"], "a shard"),
        (&["merge", "s1.json", "s2.json", "--history", "s1.json"], "a shard"),
        (&["suite", s, "--report", &format!("json={s}")], "the suite"),
        (&["suite", s, "--report", "markdown=p/../p/p0.toml"], "a probe"),
        (&["suite", s, "--baseline", "b.json", "--report", "json=./b.json"], "the baseline"),
        (&["suite", s, "--baseline", "b.json", "--history", "b.json"], "the baseline"),
        (&["suite", s, "--history", "p/p0.toml"], "a probe"),
        (&["trend", "h.jsonl", "--report", "svg=h.jsonl"], "the history"),
    ];
    for (args, what) in refused {
        run(args, &[]).code(2).stderr(predicates::str::contains(what));
    }
    assert_eq!(std::fs::read_to_string(d.join("s1.json")).unwrap(), before);
    // Usage errors are exit 2.
    run(&["suite", s, "--shard", "3/2"], &[]).code(2);
    run(&["suite", s, "--report", "svg=x"], &[]).code(2);
    run(&["run", "p/p0.toml", "--report", "junit=x.xml", "--backend", "emulator"], &[]).code(2);
}

/// A probe whose captures (every tap of a 6-layer model on 96 tokens, ~13 MiB held) do not
/// fit an 8 MiB budget: the suite spills them as `run` does, each pair says so, and the
/// figures and verdicts are the ones the same suite gives held in memory.
#[test]
fn a_suite_over_the_memory_budget_spills_and_judges_the_same() {
    use assert_cmd::Command;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tokens: Vec<String> = (0..96).map(|i| ((i * 37 + 5) % 500 + 1).to_string()).collect();
    let probe = write(
        d,
        "big.toml",
        &format!(
            "version = 1\nname = \"big\"\nquestion = \"q?\"\ntaps = [\"*\"]\n[checkpoint]\nsynth = \"tinystories\"\n\
             hidden = 64\nlayers = 6\nheads = 4\nkv_heads = 2\nvocab = 512\n[inputs]\ntokens = [{}]\ndecode = 3\n\
             [[backend]]\nname = \"device\"\nkind = \"emulator\"\nfaults = [\"shared-softmax@layers=1\"]\n",
            tokens.join(", ")
        ),
    );
    let tmp = d.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let run = |budget: &str, tag: &str| -> serde_json::Value {
        let json = d.join(format!("{tag}.json"));
        Command::cargo_bin("hefprobe")
            .unwrap()
            .env("TMPDIR", &tmp)
            .args(["--max-memory", budget, "suite"])
            .arg(&probe)
            .args(["--no-explain", "--report"])
            .arg(format!("json={}", json.display()))
            .assert()
            .code(1);
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
    };
    let held = run("64M", "held");
    let spilled = run("8M", "spilled");
    let (h, s) = (&held["pairs"][0], &spilled["pairs"][0]);
    assert_eq!(s["status"], "failed", "{s}");
    for part in ["status", "located", "figures", "series"] {
        assert_eq!(h[part], s[part], "{part} differs between the held and the spilled suite");
    }
    assert!(h["note"].is_null(), "{}", h["note"]);
    let note = s["note"].as_str().unwrap();
    assert!(note.starts_with("captures spilled to disk: ") && note.contains("budget 8.0 MiB"), "{note}");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "the spill folder is gone");
    // A spill folder that is a file is refused before anything runs.
    Command::cargo_bin("hefprobe")
        .unwrap()
        .args(["suite"])
        .arg(&probe)
        .args(["--spill-dir"])
        .arg(&probe)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--spill-dir"));
}

/// Findings 11 (shared softmax) and 9 (KV cache layout) stated as claims and judged night after
/// night through the command line: fixed on a clean HEF, 11 reproducing on a HEF that shares
/// the softmax in layer 0, a failed run naming 11 once the log marks it fixed, and the status
/// change in the history and `trend --finding`.
#[test]
fn findings_are_claims_judged_every_night() {
    use assert_cmd::Command;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let clean = write_hef(d, "clean.hef", small(), None);
    let shared = hefprobe::fault::spec::FaultSpec::parse("shared-softmax@layers=0").unwrap();
    let softmax = write_hef(d, "softmax.hef", SynthHefOptions { faults: vec![shared], ..small() }, None);
    let suite = |hef: &Path, expect_11: &str| {
        write(
            d,
            "findings.toml",
            &format!(
                "version = 1\nname = \"findings\"\nroot = \"{}\"\n\
                 probes = [\"probes/shared-softmax.toml\", \"probes/kv-cache-layout.toml\"]\n\
                 [[target]]\nname = \"tonight\"\nkind = \"hef\"\npath = \"{}\"\n[gate]\nruns = 2\n\
                 [explain]\nfaults = [\"shared-softmax@layers=0\", \"cache-layout:transpose\"]\n\
                 [[finding]]\nid = 11\ntitle = \"shared softmax\"\nprobe = \"shared-softmax\"\nexpect = \"{expect_11}\"\n\
                 explained_by = \"shared-softmax\"\n\
                 [[finding]]\nid = 9\nprobe = \"kv-cache-layout\"\nexpect = \"fixed\"\n\
                 explained_by = \"cache-layout:transpose\"\n",
                repo("").display(),
                hef.display()
            ),
        )
    };
    let run = |args: &[&str]| {
        let mut c = Command::cargo_bin("hefprobe").unwrap();
        c.current_dir(d).args(args).env_remove("GITHUB_STEP_SUMMARY");
        c.assert()
    };
    let statuses = |file: &str| -> Vec<(u32, String, bool)> {
        let r: SuiteResult = serde_json::from_str(&std::fs::read_to_string(d.join(file)).unwrap()).unwrap();
        r.findings.iter().map(|f| (f.claim.id, f.status.name().to_string(), f.fails)).collect()
    };

    // Night 1, a clean HEF: both fixed; 11 was expected to reproduce, which is said, not failed.
    suite(&clean, "reproduces");
    run(&["suite", "findings.toml", "--history", "h.jsonl", "--report", "json=n1.json"]).code(0);
    assert_eq!(statuses("n1.json"), [(11, "fixed".into(), false), (9, "fixed".into(), false)]);

    // Night 2, the softmax shared in layer 0: 11 reproduces (the pair fails: no baseline yet);
    // a person accepts both drifts as known, by name.
    suite(&softmax, "reproduces");
    run(&[
        "suite",
        "findings.toml",
        "--history",
        "h.jsonl",
        "--baseline",
        "b.json",
        "--update-baseline",
        "--known",
        "shared-softmax/tonight",
        "--known",
        "kv-cache-layout/tonight",
    ])
    .code(1);
    run(&[
        "suite",
        "findings.toml",
        "--history",
        "h.jsonl",
        "--baseline",
        "b.json",
        "--report",
        "json=n2.json",
    ])
    .code(0);
    // 9 drifts too (the softmax is every probe's), but explained otherwise: changed, not failed.
    assert_eq!(statuses("n2.json"), [(11, "reproduces".into(), false), (9, "changed".into(), false)]);

    // Night 3: the log marks 11 fixed, and it reproduces: the pair is known against the
    // baseline, yet the run fails, naming the finding.
    suite(&softmax, "fixed");
    let out = run(&[
        "suite",
        "findings.toml",
        "--history",
        "h.jsonl",
        "--baseline",
        "b.json",
        "--report",
        "json=n3.json",
        "--report",
        "markdown=n3.md",
        "--report",
        "junit=n3.xml",
    ])
    .code(1);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(stderr.contains("finding 11 on tonight: reproduces — expected fixed"), "{stderr}");
    assert_eq!(statuses("n3.json"), [(11, "reproduces".into(), true), (9, "changed".into(), false)]);
    let md = std::fs::read_to_string(d.join("n3.md")).unwrap();
    assert!(md.contains("REPRODUCES") && md.contains("best explanation shared-softmax@layers=0"), "{md}");
    let junit = std::fs::read_to_string(d.join("n3.xml")).unwrap();
    check_junit(&junit);
    assert!(junit.contains("<testcase name=\"finding 11\"") && junit.contains("type=\"finding\""), "{junit}");
    // The history (this night's lines included) dates the last reproduction and the change.
    let r3: SuiteResult = serde_json::from_str(&std::fs::read_to_string(d.join("n3.json")).unwrap()).unwrap();
    let f11 = &r3.findings[0];
    assert_eq!(f11.last_reproduced.as_deref(), Some(r3.date.as_str()));
    let since = f11.since.clone().expect("dated from the history");
    assert!(since < r3.date, "reproducing since night 2 ({since}), not just tonight ({})", r3.date);
    assert_eq!(r3.findings[1].last_reproduced, None, "9 never reproduced");
    let trend = run(&["trend", "h.jsonl", "--finding", "11"]).code(0);
    let text = String::from_utf8_lossy(&trend.get_output().stdout).to_string();
    assert!(text.contains("fixed") && text.contains("changed (was fixed)"), "{text}");
    run(&["trend", "h.jsonl", "--finding", "11", "--report", "svg=f11.svg"]).code(0);
    assert!(std::fs::read_to_string(d.join("f11.svg")).unwrap().contains("<svg"));
    run(&["trend", "h.jsonl", "--finding", "4"]).code(2);
}

/// A target may name its own checkpoint: the probes run on it for that target (once per
/// checkpoint), the other targets keep the probes' own; a checkpoint that is not there is that
/// target's error, naming the path, and the rest still run.
#[test]
fn a_target_runs_the_probes_on_its_own_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    common::small_checkpoint(d, "ck", 300);
    common::small_checkpoint(d, "ck100", 100);
    small_suite(d, "");
    let text = std::fs::read_to_string(d.join("S.toml")).unwrap().replace(
        "[[target]]\nname = \"release\"\nkind = \"emulator\"\n",
        "[[target]]\nname = \"release\"\nkind = \"emulator\"\ncheckpoint = \"ck\"\n\
         [[target]]\nname = \"nowhere\"\nkind = \"emulator\"\ncheckpoint = \"no-such-ck\"\n\
         [[target]]\nname = \"narrow\"\nkind = \"emulator\"\ncheckpoint = \"ck100\"\n",
    );
    let suite = Suite::load(&write(d, "S.toml", &text)).unwrap();
    assert_eq!(suite.targets.iter().find(|t| t.label == "release").unwrap().checkpoint, Some(d.join("ck")));
    let r = run_suite(&suite, &opts(None, false)).unwrap();
    for p in &r.pairs {
        match p.target.as_str() {
            "release" | "tonight" => {
                assert_eq!(p.status, Status::Pass, "{} × {}: {:?}", p.probe, p.target, p.error)
            }
            "nowhere" => {
                let e = p.error.as_ref().expect("an error");
                assert_eq!(e.kind, ErrorKind::Input);
                assert!(e.message.contains("no-such-ck"), "{}", e.message);
            }
            // Its checkpoint has 100 tokens: only small-2 (token 250) cannot run on it.
            "narrow" if p.probe == "small-2" => {
                let e = p.error.as_ref().expect("token 250 is past a 100-token vocabulary");
                assert!(e.message.contains("250"), "{}", e.message);
            }
            "narrow" => assert_eq!(p.status, Status::Pass, "{}: {:?}", p.probe, p.error),
            _ => {}
        }
    }
    assert_eq!(r.pairs.iter().filter(|p| p.target == "release").count(), 3);
}

/// A night's evidence bundle (`suite --bundle`): verify replays it the same; a probe edited
/// after the night is named; `--bundle` with `--update-baseline` is refused.
#[test]
fn a_suite_bundle_replays_the_same_and_names_an_edited_probe() {
    use assert_cmd::Command;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let suite = small_suite(d, "\"shared-softmax@layers=0\"");
    let hefprobe = || {
        let mut c = Command::cargo_bin("hefprobe").unwrap();
        c.current_dir(d).env_remove("GITHUB_STEP_SUMMARY");
        c
    };
    hefprobe().arg("suite").arg(&suite).args(["--bundle", "night"]).assert().code(1);
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("night/bundle.json")).unwrap()).unwrap();
    assert!(m["asked"]["suite"]["inputs"][0].as_str().unwrap().ends_with("S.toml"), "{m}");
    for f in ["suite.toml", "report.json", "summary.md", "probes/small-0.toml"] {
        assert!(m["files"][f]["sha256"].is_string() && m["files"][f]["bytes"].is_u64(), "{f}: {m}");
    }
    let out = hefprobe().args(["verify", "night"]).assert().code(0);
    let said = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(said.contains(" 0 different, 0 not re-runnable here"), "{said}");
    let p0 = d.join("p/p0.toml");
    let text = std::fs::read_to_string(&p0).unwrap();
    std::fs::write(&p0, text + "# edited after the night\n").unwrap();
    hefprobe().args(["verify", "night"]).assert().code(1).stdout(
        predicates::prelude::PredicateBooleanExt::and(
            predicates::str::contains("probe `small-0`"),
            predicates::str::contains("p0.toml changed"),
        ),
    );
    hefprobe()
        .arg("suite")
        .arg(&suite)
        .args(["--bundle", "again", "--baseline", "b.json", "--update-baseline"])
        .assert()
        .code(2);
}
