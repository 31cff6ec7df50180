//! Every fault of the catalog: injected, located at the phase and tap it acts on, and ranked
//! first by `explain` among the whole catalog (ties only with faults identical on the input).

use hefprobe::backend::decoder::DecoderBackend;
use hefprobe::explain::matrix::{cases, matrix_model, run_matrix};
use hefprobe::explain::rank::{explain, Setting};
use hefprobe::explain::ExplainSpec;
use hefprobe::fault::catalog::REGISTRY;
use hefprobe::fault::{Entry, Proof};
use hefprobe::tap::TapSelection;

fn fs(text: &str) -> hefprobe::fault::spec::FaultSpec {
    hefprobe::fault::spec::FaultSpec::parse(text).unwrap()
}

#[test]
fn every_fault_is_located_and_ranked_first() {
    let mut failures = Vec::new();
    // The narrow model's cases, then the width faults' on the wide one.
    for row in run_matrix().unwrap() {
        let (spec, expected) = (&row.fault, &row.expected);
        eprintln!(
            "{spec:<36} located {:<34} rank {:?} match {:.6} ties {:?}",
            format!("{:?}", row.located),
            row.rank,
            row.match_cosine,
            row.ties
        );
        if !row.ok {
            failures.push(format!(
                "{spec}: expected {expected} and rank 1, got {:?} and rank {:?}",
                row.located, row.rank
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What is wrong with `e`'s proof ([`Proof`]), if anything: a matrix case that names another
/// fault, or whose first drift on the matrix model is not where the case says the fault acts
/// (a case that changes nothing has none); a proving test file that is missing or never names
/// the fault.
fn proof_problems(
    e: &Entry,
    ckpt: &hefprobe::model::Checkpoint,
    inputs: &hefprobe::inputs::InputSet,
) -> Vec<String> {
    let cases = match e.proof {
        Proof::Matrix(cases) => cases,
        // The width faults' cases run on the wide model (their tile is wider than this one's rows).
        Proof::WideMatrix(cases) => {
            let (wide, inputs) = hefprobe::explain::matrix::matrix_model_wide().unwrap();
            return matrix_problems(e, cases, &wide, &inputs);
        }
        Proof::Test(path) => {
            let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path));
            return match text {
                Ok(t) if t.contains(&format!("\"{}", e.name)) => Vec::new(),
                Ok(_) => vec![format!("{}: {path} never names it", e.name)],
                Err(err) => vec![format!("{}: {path}: {err}", e.name)],
            };
        }
    };
    matrix_problems(e, cases, ckpt, inputs)
}

/// What is wrong with matrix `cases` of `e` on `ckpt`.
fn matrix_problems(
    e: &Entry,
    cases: &[(&str, &str)],
    ckpt: &hefprobe::model::Checkpoint,
    inputs: &hefprobe::inputs::InputSet,
) -> Vec<String> {
    if cases.is_empty() {
        return vec![format!("{}: no matrix case", e.name)];
    }
    let all = TapSelection::all();
    let model = std::sync::Arc::new(hefprobe::model::Decoder::new(ckpt).unwrap());
    let reference =
        hefprobe::backend::collect(&mut DecoderBackend::reference(model), inputs, &all, None).capture;
    let mut problems = Vec::new();
    for (case, expected) in cases {
        if fs(case).name != e.name {
            problems.push(format!("{}: the case `{case}` injects another fault", e.name));
            continue;
        }
        let mut emulator = DecoderBackend::emulator("obs", ckpt, &[fs(case)], None).unwrap();
        let observed = hefprobe::backend::collect(&mut emulator, inputs, &all, None).capture;
        let thresholds = hefprobe::compare::thresholds::Thresholds::default();
        let settings = hefprobe::compare::Settings::new(&thresholds);
        let pair = hefprobe::compare::compare(&reference, &observed, ("reference", case), &settings).unwrap();
        let first =
            hefprobe::compare::locate::locate(&pair).first().map(|l| format!("{}/{}", l.phase, l.tap));
        let at = |got: &str| expected.strip_suffix('*').map_or(got == *expected, |p| got.starts_with(p));
        if !first.as_deref().is_some_and(at) {
            problems.push(format!("{}: `{case}` first drifts at {first:?}, not {expected}", e.name));
        }
    }
    problems
}

/// Every fault names its proof in its registry entry (the matrix reads its cases there), and
/// each case exercises the fault: it injects that fault, and the fault moves the tap the case
/// names first. The checker itself refuses a case of another fault, a case that changes
/// nothing and a proving file that does not exist.
#[test]
fn every_registry_entry_names_a_proof_that_exercises_it() {
    let (ckpt, inputs) = matrix_model().unwrap();
    let problems: Vec<String> = REGISTRY.iter().flat_map(|e| proof_problems(e, &ckpt, &inputs)).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let fake = |name, proof| Entry { name, proof, ..REGISTRY[0] };
    for (bad, says) in [
        (
            fake(
                "shared-softmax",
                Proof::Matrix(&[("mask-repeat@layers=1", "prefill/layers.1.attn.scores")]),
            ),
            "another fault",
        ),
        (
            fake("position-shift", Proof::Matrix(&[("position-shift:1", "prefill/layers.0.attn.q")])),
            "first drifts at",
        ),
        (fake("position-shift", Proof::Matrix(&[])), "no matrix case"),
        (fake("rope", Proof::Test("tests/width_faults.rs")), "never names it"),
        (fake("rope", Proof::Test("tests/no_such_file.rs")), "no_such_file"),
    ] {
        let found = proof_problems(&bad, &ckpt, &inputs);
        assert!(found.len() == 1 && found[0].contains(says), "{}: {found:?}", bad.name);
    }
}

#[test]
fn faults_indistinguishable_from_a_clean_run_are_never_claimed() {
    let (ckpt, mut inputs) = matrix_model().unwrap();
    inputs.chunk = Some(4);
    let model = std::sync::Arc::new(hefprobe::model::Decoder::new(&ckpt).unwrap());
    let logits = TapSelection::parse(&["logits".to_string()]).unwrap();
    let reference =
        hefprobe::backend::collect(&mut DecoderBackend::reference(model.clone()), &inputs, &logits, None)
            .capture;
    // Shifting every position (from the first chunk on) changes nothing under RoPE.
    let disguised = "position-shift:3,from=chunk0";
    let observed = DecoderBackend::emulator("obs", &ckpt, &[fs(disguised)], None)
        .map(|mut e| hefprobe::backend::collect(&mut e, &inputs, &logits, None))
        .unwrap()
        .capture;
    let spec = ExplainSpec {
        faults: Some(vec![fs(disguised), fs("shared-softmax"), fs("position-shift:1")]),
        ..Default::default()
    };
    let report = explain(
        &Setting { ckpt: &ckpt, inputs: &inputs, scratch: None, target: None },
        &reference,
        ("obs", &observed),
        &spec,
    )
    .unwrap();
    assert!(report.conclusion.contains("matches the clean reference"), "{}", report.conclusion);
    let row = report.rows.iter().find(|r| r.fault == disguised).expect("ranked");
    assert_eq!(row.note.as_deref(), Some("indistinguishable from a clean run on these inputs"));

    // Against a real fault, the disguised one is still labelled, and the real one wins.
    let observed = DecoderBackend::emulator("obs", &ckpt, &[fs("position-shift:1")], None)
        .map(|mut e| hefprobe::backend::collect(&mut e, &inputs, &logits, None))
        .unwrap()
        .capture;
    let report = explain(
        &Setting { ckpt: &ckpt, inputs: &inputs, scratch: None, target: None },
        &reference,
        ("obs", &observed),
        &spec,
    )
    .unwrap();
    assert_eq!(report.rows[0].fault, "position-shift:1", "{:?}", report.rows);
    assert!(report.conclusion.starts_with("best explanation: position-shift:1"), "{}", report.conclusion);
    let row = report.rows.iter().find(|r| r.fault == disguised).expect("ranked");
    assert!(row.note.is_some(), "{row:?}");
}

#[test]
fn nothing_in_the_catalog_is_said_plainly() {
    // An observation no fault produces: logits with noise added.
    let (ckpt, inputs) = matrix_model().unwrap();
    let model = std::sync::Arc::new(hefprobe::model::Decoder::new(&ckpt).unwrap());
    let logits = TapSelection::parse(&["logits".to_string()]).unwrap();
    let reference =
        hefprobe::backend::collect(&mut DecoderBackend::reference(model.clone()), &inputs, &logits, None)
            .capture;
    let mut observed = hefprobe::capture::Capture::default();
    for key in reference.keys() {
        let mut a = reference.get(key).unwrap().clone();
        for (i, v) in a.iter_mut().enumerate() {
            *v += ((i * 7919 % 101) as f32 - 50.0) * 0.05;
        }
        observed.insert(key.clone(), a);
    }
    let spec =
        ExplainSpec { faults: Some(vec![fs("shared-softmax"), fs("no-lm-head")]), ..Default::default() };
    let report = explain(
        &Setting { ckpt: &ckpt, inputs: &inputs, scratch: None, target: None },
        &reference,
        ("noisy", &observed),
        &spec,
    )
    .unwrap();
    assert!(report.conclusion.starts_with("nothing in the catalog explains"), "{}", report.conclusion);
}

#[test]
fn three_way_attribution_splits_drift_into_what_quantization_explains() {
    let (ckpt, inputs) = matrix_model().unwrap();
    let model = std::sync::Arc::new(hefprobe::model::Decoder::new(&ckpt).unwrap());
    let logits = TapSelection::parse(&["logits".to_string()]).unwrap();
    let reference =
        hefprobe::backend::collect(&mut DecoderBackend::reference(model.clone()), &inputs, &logits, None)
            .capture;
    let observe = |faults: &[&str]| {
        let specs: Vec<_> = faults.iter().map(|s| fs(s)).collect();
        hefprobe::backend::collect(
            &mut DecoderBackend::emulator("obs", &ckpt, &specs, None).unwrap(),
            &inputs,
            &logits,
            None,
        )
        .capture
    };
    let spec = ExplainSpec {
        faults: Some(vec![fs("no-lm-head")]),
        quant: Some(hefprobe::fault::spec::quantization("w4a8").unwrap()),
        ..Default::default()
    };
    // Observed = exactly the quantization hypothesis: it explains all of the drift.
    let quantized = observe(&["quant:w4a8"]);
    let report = explain(
        &Setting { ckpt: &ckpt, inputs: &inputs, scratch: None, target: None },
        &reference,
        ("obs", &quantized),
        &spec,
    )
    .unwrap();
    assert_eq!(report.attribution.len(), 4, "prefill and 3 decode steps");
    for a in &report.attribution {
        assert!(a.reference_vs_observed < 0.9999 && a.quant_vs_observed > 1.0 - 1e-9, "{a:?}");
        assert!(a.explained > 0.99, "{a:?}");
    }
    // Observed = quantization plus a softmax shared across heads: quantization explains little.
    let both = observe(&["quant:w4a8", "shared-softmax"]);
    let report = explain(
        &Setting { ckpt: &ckpt, inputs: &inputs, scratch: None, target: None },
        &reference,
        ("obs", &both),
        &spec,
    )
    .unwrap();
    assert!(report.attribution.iter().all(|a| a.explained < 0.5), "{:?}", report.attribution);
}

/// Explain's shortcuts (each candidate from the clean run's residual at the first block it acts
/// in; a run stopped once matched, or once out of contention) leave the ranking as the
/// exhaustive path has it, on every case of the localization matrix: observed on every tap,
/// and on the logits alone (where the layer search runs every per-layer fault at every layer).
#[test]
fn the_shortcuts_leave_the_ranking_as_the_exhaustive_path_has_it() {
    let (ckpt, inputs) = matrix_model().unwrap();
    let model = std::sync::Arc::new(hefprobe::model::Decoder::new(&ckpt).unwrap());
    let at = Setting { ckpt: &ckpt, inputs: &inputs, scratch: None, target: None };
    let (mut reused, mut stopped) = (0, 0);
    for taps in [TapSelection::all(), TapSelection::parse(&["logits".to_string()]).unwrap()] {
        let reference =
            hefprobe::backend::collect(&mut DecoderBackend::reference(model.clone()), &inputs, &taps, None)
                .capture;
        for (case, _) in cases() {
            let mut emulator = DecoderBackend::emulator("obs", &ckpt, &[fs(case)], None).unwrap();
            let observed = hefprobe::backend::collect(&mut emulator, &inputs, &taps, None).capture;
            let report = |exhaustive| {
                let spec = ExplainSpec { exhaustive, ..Default::default() };
                explain(&at, &reference, (case, &observed), &spec).unwrap()
            };
            let (fast, full) = (report(false), report(true));
            stopped += fast.same_ranking(&full).unwrap_or_else(|e| panic!("{case}: {e}"));
            reused += fast.spent.from_prefix;
            assert_eq!(full.spent.from_prefix + full.spent.stopped_early.len(), 0, "{case}: exhaustive");
        }
    }
    eprintln!("{reused} candidates started from a reused prefix, {stopped} stopped early");
    assert!(reused > 0 && stopped > 0, "the shortcuts took no effect: {reused} reused, {stopped} stopped");
}
