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

/// A served model parting from the reference at a confident token, with one-token
/// continuations and the server's log-probabilities.
fn served_report() -> Report {
    use hefprobe::backend::serve::{Finish, Generation, Served, TokenInfo, TokenRef};
    use hefprobe::compare::{tokens, PairComparison};
    let tok = hefprobe::model::tokenizer::Tokenizer::synth();
    let ids = |s: &str| tok.encode(s, false).unwrap().ids;
    let reference = ids("Paris.");
    let rows: Vec<Vec<f32>> = reference
        .iter()
        .enumerate()
        .map(|(k, &r)| {
            let mut row = vec![0f32; 259];
            row[r as usize] = 4.0;
            if k == 1 {
                row[ids("i")[0] as usize] = 1.5; // the server's token, 2.5 below the top-1
            }
            row
        })
        .collect();
    let one = |text: &str, top: Vec<(TokenRef, f64)>| Generation {
        text: text.into(),
        tokens: vec![TokenInfo { text: text.into(), id: None, top }],
        finish: Finish::Length,
        count: Some(1),
        prompt_tokens: Some(12),
    };
    let greedy = Generation {
        text: "Pi".into(),
        tokens: ["P", "i"].iter().map(|t| TokenInfo { text: t.to_string(), id: None, top: vec![] }).collect(),
        finish: Finish::Stop,
        count: Some(2),
        prompt_tokens: Some(12),
    };
    let forced = reference
        .iter()
        .map(|&r| {
            Some(one(&tok.decode(&[r]), vec![(TokenRef::Id(r), -0.2), (TokenRef::Text("i".into()), -2.0)]))
        })
        .collect();
    let served = Served {
        server: "OpenAI-style server at http://127.0.0.1:8080, model m".into(),
        greedy,
        forced: Some(forced),
        forced_unavailable: None,
        prompt: "Q: capital of France?\nA:".into(),
        prompt_tokens: 12,
        max_tokens: reference.len(),
    };
    let t = tokens::compare(&rows, &served, &tok, &Thresholds::default());
    let mut report = Report::new(ProbeInfo {
        name: "served".into(),
        question: "Does the served model answer as the reference does?".into(),
        command: "hefprobe run served.toml --backend serve=http://127.0.0.1:8080,api=openai,logprobs=2"
            .into(),
        ..Default::default()
    });
    report.add_comparison(PairComparison {
        reference: "reference".into(),
        candidate: "serve".into(),
        view: View::Cumulative,
        rows: vec![],
        on_device: false,
        tokens: Some(t),
    });
    report
}

#[test]
fn served_terminal_and_markdown_snapshots() {
    let r = served_report();
    assert!(r.drift(), "a confident token lost fails the default token_gap bound");
    insta::assert_snapshot!(terminal::render(&r, false));
    insta::assert_snapshot!(markdown::render(&r, None));
}
