//! Every renderer on one fixed comparison, as insta snapshots.

use hefprobe::capture::Capture;
use hefprobe::compare::lens::LensRow;
use hefprobe::compare::thresholds::Thresholds;
use hefprobe::compare::{compare, Settings, View};
use hefprobe::report::{
    json, markdown, terminal, CheckpointInfo, ExplainReport, ExplainRow, InputInfo, ProbeInfo, Report,
};
use hefprobe::tap::Phase;
use ndarray::{ArrayD, IxDyn};

fn arr(shape: &[usize], f: impl Fn(usize) -> f32) -> ArrayD<f32> {
    let n: usize = shape.iter().product();
    ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(f).collect()).unwrap()
}

fn causal(t: usize, s: usize, f: impl Fn(usize) -> f32) -> ArrayD<f32> {
    arr(&[2, t, s], |i| {
        let (q, k) = ((i / s) % t, i % s);
        if k > q + (s - t) {
            f32::NEG_INFINITY
        } else {
            f(i)
        }
    })
}

fn softmax_rows(scores: &ArrayD<f32>) -> ArrayD<f32> {
    let s = *scores.shape().last().unwrap();
    let mut out = scores.clone();
    for row in out.as_slice_mut().unwrap().chunks_mut(s) {
        let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let z: f32 = row.iter().map(|x| (x - m).exp()).sum();
        row.iter_mut().for_each(|x| *x = (*x - m).exp() / z);
    }
    out
}

/// Reference and a candidate that drifts in layer 1 (scaled probs: per-head sums ≠ 1).
fn fixed_report() -> Report {
    let mut r = Capture::default();
    let mut c = Capture::default();
    for (phase, t, s) in [(Phase::Prefill, 3, 3), (Phase::Decode(0), 1, 4)] {
        let base = |i: usize| ((i * 37 % 11) as f32 - 5.0) / 3.0;
        let scores = causal(t, s, base);
        let probs = softmax_rows(&scores);
        for (tap, a) in [
            ("embed", arr(&[t, 4], base)),
            ("layers.0.attn.scores", scores.clone()),
            ("layers.0.attn.probs", probs.clone()),
            ("layers.0.out", arr(&[t, 4], |i| base(i + 1))),
            ("layers.1.attn.scores", scores.clone()),
            ("layers.1.attn.probs", probs.clone()),
            ("layers.1.out", arr(&[t, 4], |i| base(i + 2))),
            ("logits", arr(&[t, 5], |i| base(i + 3) * 2.0)),
        ] {
            r.insert(format!("{phase}/{tap}").as_str().into(), a.clone());
            let mut b = a.clone();
            match tap {
                "layers.1.attn.probs" => b.mapv_inplace(|x| x * 0.5),
                "layers.1.out" | "logits" => {
                    b.iter_mut().enumerate().for_each(|(i, x)| *x += if i % 2 == 0 { 0.4 } else { -0.3 })
                }
                _ => {}
            }
            c.insert(format!("{phase}/{tap}").as_str().into(), b);
        }
    }
    c.insert("prefill/dump_only".into(), arr(&[1], |_| 1.0));
    let mut report = Report::new(ProbeInfo {
        name: "fixed".into(),
        question: "Does the fixed candidate drift?".into(),
        finding: Some(11),
        file: Some("probes/fixed.toml".into()),
        command: "hefprobe run probes/fixed.toml".into(),
    });
    report.tool.candle = "X".into();
    report.checkpoint = Some(CheckpointInfo {
        source: "synth preset=fixed".into(),
        hash: "xxh3:0123456789abcdef".into(),
        arch: "llama".into(),
        layers: 2,
        hidden: 4,
        heads: 2,
        kv_heads: 1,
        head_dim: 2,
        vocab: 5,
        stored_dtype: "f32".into(),
        defaults_applied: vec![("rope_theta".into(), "10000".into())],
    });
    report.inputs = Some(InputInfo {
        prompt_tokens: 3,
        bos: "token ids given directly".into(),
        chunk: None,
        phases: vec![Phase::Prefill, Phase::Decode(0)],
        decode_tokens: vec![4],
    });
    let th = Thresholds::default();
    report.add_comparison(
        compare(&r, &c, ("reference", "device"), &Settings { view: View::Cumulative, ..Settings::new(&th) })
            .unwrap(),
    );
    let mut local = c.clone();
    for k in ["prefill/layers.1.out", "decode.0/layers.1.out", "prefill/logits", "decode.0/logits"] {
        local.insert(k.into(), r.get(&k.into()).unwrap().clone());
    }
    report.add_comparison(
        compare(&r, &local, ("reference", "device"), &Settings { view: View::Local, ..Settings::new(&th) })
            .unwrap(),
    );
    report.blame.push(("device".into(), vec![1]));
    report.lens.push((
        "device".into(),
        vec![
            LensRow { phase: Phase::Prefill, layer: 0, reference_top1: 3, candidate_top1: 3, kl: 0.0 },
            LensRow { phase: Phase::Prefill, layer: 1, reference_top1: 3, candidate_top1: 1, kl: 0.25 },
        ],
    ));
    let row = |rank, fault: &str, cos, note: Option<&str>| ExplainRow {
        rank,
        fault: fault.into(),
        finding: Some(11),
        match_cosine: cos,
        argmax_agreement: 1.0,
        kl_mean: 0.0,
        ties: vec![],
        note: note.map(String::from),
    };
    report.explain = Some(ExplainReport {
        observed: "device".into(),
        taps: vec!["logits".into()],
        rows: vec![row(1, "shared-softmax@layers=1", 0.9999999, None), row(2, "mask-repeat", 0.93, None)],
        baseline: Some(row(0, "(clean reference)", 0.91, None)),
        conclusion: "best explanation: shared-softmax@layers=1".into(),
        best: Some("shared-softmax@layers=1".into()),
        attribution: vec![],
        nonfinite: vec![],
        search: None,
        against: Default::default(),
        by_tokens: false,
        spent: hefprobe::explain::Spent {
            candidates: 3,
            from_first_block: 1,
            from_prefix: 2,
            stopped_early: vec!["no-lm-head".into()],
            other: 1,
            block_steps: 20,
            block_steps_whole: 36,
            saved_by_reuse: 12,
            saved_by_stopping: 4,
            ..Default::default()
        },
    });
    report
}

#[test]
fn terminal_snapshot() {
    insta::assert_snapshot!(terminal::render(&fixed_report(), false));
}

#[test]
fn markdown_snapshot() {
    insta::assert_snapshot!(markdown::render(&fixed_report(), None));
}

#[test]
fn json_snapshot() {
    insta::assert_snapshot!(json::render(&fixed_report()));
}

#[test]
fn svg_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let files = hefprobe::report::svg::write(&fixed_report(), &dir.path().join("fixed")).unwrap();
    assert_eq!(files.len(), 3, "{files:?}");
    for f in files {
        let name = std::path::Path::new(&f).file_name().unwrap().to_string_lossy().to_string();
        insta::assert_snapshot!(name, std::fs::read_to_string(&f).unwrap());
    }
}

#[test]
fn the_fixed_comparison_locates_layer_1_probs() {
    let r = fixed_report();
    let first = &r.located[0][0];
    assert_eq!((first.phase, first.tap.to_string().as_str()), (Phase::Prefill, "layers.1.attn.probs"));
    assert!(first.sentence.contains("per-head sums ≠ 1"), "{}", first.sentence);
    assert!(r.comparisons[0].rows.iter().any(|row| row.tap == "dump_only".into() && !row.checked()));
}
