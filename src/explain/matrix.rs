//! The fault-localization matrix: inject each catalog fault into a synthesized model, then
//! check that `run` locates the first drift at the phase and tap the fault acts on, and that
//! `explain` ranks the injected fault first among the whole catalog. This is the proof that
//! the tool finds each fault; `hefprobe faults --matrix` renders it.

use crate::backend::collect;
use crate::backend::decoder::DecoderBackend;
use crate::compare::thresholds::Thresholds;
use crate::compare::{compare, locate, Settings};
use crate::error::Result;
use crate::explain::ExplainSpec;
use crate::fault::catalog::REGISTRY;
use crate::fault::spec::FaultSpec;
use crate::fault::Proof;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::synth::SynthSpec;
use crate::model::{Arch, Checkpoint, Decoder};
use crate::tap::TapSelection;
use serde::Serialize;
use std::sync::Arc;

/// The matrix's cases on the narrow model, every registry entry's [`Proof::Matrix`] in registry
/// order: (fault spec, expected first drift as PHASE/TAP; a trailing `*` matches any tap of that
/// prefix).
pub fn cases() -> Vec<(&'static str, &'static str)> {
    let proofs = REGISTRY.iter().map(|e| match e.proof {
        Proof::Matrix(cases) => cases,
        Proof::WideMatrix(_) | Proof::Test(_) => &[],
    });
    proofs.flatten().copied().collect()
}

/// The cases run on the wide model ([`Proof::WideMatrix`]: the width faults).
pub fn wide_cases() -> Vec<(&'static str, &'static str)> {
    let proofs = REGISTRY.iter().map(|e| match e.proof {
        Proof::WideMatrix(cases) => cases,
        Proof::Matrix(_) | Proof::Test(_) => &[],
    });
    proofs.flatten().copied().collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct MatrixRow {
    pub fault: String,
    pub finding: Option<u32>,
    pub expected: String,
    pub located: Option<String>,
    pub rank: Option<usize>,
    pub ties: Vec<String>,
    pub match_cosine: f64,
    /// The next-best fault and its match cosine: how decisive the ranking was.
    pub runner_up: Option<(String, f64)>,
    pub ok: bool,
}

/// The model and inputs the matrix runs on: small enough for tests, with 2 kv heads (for
/// cache-layout:transpose) and enough layers to tell them apart.
pub fn matrix_model() -> Result<(Checkpoint, InputSet)> {
    matrix_model_of(64, 128)
}

/// The matrix's wide model: the same, hidden 128 and an MLP of 256, whose rows are wider than
/// the 64-wide tile of the width faults' cases.
pub fn matrix_model_wide() -> Result<(Checkpoint, InputSet)> {
    matrix_model_of(128, 256)
}

fn matrix_model_of(hidden: usize, intermediate: usize) -> Result<(Checkpoint, InputSet)> {
    let mut s = SynthSpec::preset("tinystories", 11)?;
    (s.preset, s.arch, s.hidden, s.layers, s.heads, s.kv_heads) = (None, Arch::Llama, hidden, 3, 4, 2);
    (s.head_dim, s.intermediate, s.vocab) = (None, Some(intermediate), Some(512));
    let ckpt = s.build()?;
    let mut inputs = InputSet::new((0..12).map(|i| (i * 41 + 7) % 512).collect());
    inputs.decode = DecodeSpec::Forced(vec![5, 77, 300]);
    Ok((ckpt, inputs))
}

fn matches(expected: &str, got: &str) -> bool {
    match expected.strip_suffix('*') {
        Some(prefix) => got.starts_with(prefix),
        None => expected == got,
    }
}

/// One case: `spec` injected, located by `run`, ranked by `explain` over the catalog grid and
/// `extra` (the width cases, which the grid searches only on models wider than
/// [`crate::fault::catalog::width::SEARCHED_ABOVE`]).
pub fn run_case(
    ckpt: &Checkpoint,
    inputs: &InputSet,
    spec: &str,
    expected: &str,
    extra: &[FaultSpec],
) -> Result<MatrixRow> {
    let model = Arc::new(Decoder::new(ckpt)?);
    let all = TapSelection::all();
    let reference = collect(&mut DecoderBackend::reference(model), inputs, &all, None);
    let mut emu = DecoderBackend::emulator(spec, ckpt, &[FaultSpec::parse(spec)?], None)?;
    let observed = collect(&mut emu, inputs, &all, None);
    if let Some(e) = reference.error.or(observed.error) {
        return Err(e);
    }
    let thresholds = Thresholds::default();
    let pair =
        compare(&reference.capture, &observed.capture, ("reference", spec), &Settings::new(&thresholds))?;
    let located = locate::locate(&pair).first().map(|l| format!("{}/{}", l.phase, l.tap));
    let at = crate::explain::rank::Setting { ckpt, inputs, scratch: None, target: None };
    let mut how = ExplainSpec::default();
    if !extra.is_empty() {
        let mut faults = crate::fault::catalog::grid(&ckpt.config);
        faults.extend(extra.iter().filter(|e| !faults.contains(e)).cloned().collect::<Vec<_>>());
        how.faults = Some(faults);
    }
    let report = crate::explain::explain(&at, &reference.capture, (spec, &observed.capture), &how)?;
    let pos = report.rows.iter().position(|r| r.fault == spec || r.ties.iter().any(|t| t == spec));
    let row = pos.map(|i| &report.rows[i]);
    let name = spec.split([':', '@']).next().unwrap_or("");
    let ok = located.as_deref().is_some_and(|l| matches(expected, l)) && pos == Some(0);
    Ok(MatrixRow {
        fault: spec.to_string(),
        finding: crate::fault::catalog::finding_of(name),
        expected: expected.to_string(),
        located,
        rank: pos.map(|i| i + 1),
        ties: row.map(|r| r.ties.clone()).unwrap_or_default(),
        match_cosine: row.map_or(f64::NAN, |r| r.match_cosine),
        runner_up: report
            .rows
            .get(pos.map_or(1, |i| if i == 0 { 1 } else { 0 }))
            .map(|r| (r.fault.clone(), r.match_cosine)),
        ok,
    })
}

/// Every case of the matrix on the synthesized models: the narrow model's, then the width
/// faults' on the wide one.
pub fn run_matrix() -> Result<Vec<MatrixRow>> {
    let (ckpt, inputs) = matrix_model()?;
    let mut rows = run_cases(&ckpt, &inputs, cases(), &[])?;
    let (wide, inputs) = matrix_model_wide()?;
    rows.extend(run_cases(&wide, &inputs, wide_cases(), &width_candidates()?)?);
    Ok(rows)
}

/// The width cases' specs, ranked beside the grid for a width case ([`run_case`]'s `extra`).
pub fn width_candidates() -> Result<Vec<FaultSpec>> {
    wide_cases().into_iter().map(|(s, _)| FaultSpec::parse(s)).collect()
}

/// The matrix on any checkpoint and inputs (e.g. a real trained model, `faults --matrix
/// --checkpoint`): every case, the width faults' too (a model narrower than their tile shows
/// them as no-ops). A greedy decode is resolved by the clean model first and then
/// teacher-forced, so reference and faulty runs see the same tokens.
pub fn run_matrix_on(ckpt: &Checkpoint, inputs: &InputSet) -> Result<Vec<MatrixRow>> {
    let mut rows = run_cases(ckpt, inputs, cases(), &[])?;
    rows.extend(run_cases(ckpt, inputs, wide_cases(), &width_candidates()?)?);
    Ok(rows)
}

fn run_cases(
    ckpt: &Checkpoint,
    inputs: &InputSet,
    cases: Vec<(&str, &str)>,
    extra: &[FaultSpec],
) -> Result<Vec<MatrixRow>> {
    let mut inputs = inputs.clone();
    if let DecodeSpec::Greedy(_) = inputs.decode {
        let model = Arc::new(Decoder::new(ckpt)?);
        let logits = TapSelection::parse(&["logits".to_string()])?;
        let run = collect(&mut DecoderBackend::reference(model), &inputs, &logits, None).ok()?;
        inputs.decode = DecodeSpec::Forced(run.record.decode_tokens);
    }
    cases.into_iter().map(|(spec, expected)| run_case(ckpt, &inputs, spec, expected, extra)).collect()
}

/// What the matrix ran on, for the document: the synthesized matrix model's sentence.
pub fn synth_setup() -> String {
    "a synthesized llama (hidden 64, 3 layers, 4 heads, 2 kv heads, vocab 512; 12 prompt tokens, \
     3 teacher-forced decode steps; the width faults on the same at hidden 128, wider than their 64-wide tile, \
     each ranked over the grid and the four width cases)"
        .to_string()
}

/// The same sentence for any checkpoint and inputs.
pub fn setup_of(ckpt: &Checkpoint, inputs: &InputSet) -> String {
    let c = &ckpt.config;
    format!(
        "{} ({}, hidden {}, {} layers, {} heads, {} kv heads, vocab {}; {} prompt tokens, {} teacher-forced \
         decode steps)",
        ckpt.source,
        c.arch.name(),
        c.hidden_size,
        c.num_layers,
        c.num_heads,
        c.num_kv_heads,
        c.vocab_size,
        inputs.prompt.len(),
        inputs.decode.steps()
    )
}
