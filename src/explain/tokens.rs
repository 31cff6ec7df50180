//! Explain a served model from the only thing it returns, its tokens: every candidate fault is
//! emulated teacher-forced on the prompt and the served continuation, and ranked by the tokens
//! it predicts — how many of the served tokens its greedy choice reproduces before it parts
//! (the same prefix, the same context: its own greedy continuation would part there too), then
//! by the mean log-probability it gives the served tokens. The clean reference is the baseline;
//! a fault explains the served model when it reproduces more of its tokens than the reference.

use super::{Baseline, ExplainReport, ExplainRow, ExplainSpec};
use crate::backend::{collect, decoder::DecoderBackend};
use crate::compare::tokens::reference_rows;
use crate::error::Result;
use crate::fault::spec::FaultSpec;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::Checkpoint;
use crate::tap::TapSelection;

/// Per-layer families narrowed to every single layer after the first ranking.
const REFINE: usize = 4;

/// One candidate's prediction of the served tokens.
#[derive(Debug, Clone, PartialEq)]
struct Predicted {
    specs: Vec<FaultSpec>,
    /// Served tokens its greedy choice reproduces before it parts.
    agreed: usize,
    /// Positions where its top-1 is the served token.
    matched: usize,
    /// The mean log-probability it gives the served tokens.
    logprob: f64,
}

/// Emulate `specs` (none: the clean reference) teacher-forced on `served` after the prompt of
/// `inputs`, and score its prediction of every served token.
fn predict(ckpt: &Checkpoint, inputs: &InputSet, served: &[u32], specs: &[FaultSpec]) -> Result<Predicted> {
    crate::error::check_interrupt()?;
    let mut backend = DecoderBackend::emulator("candidate", ckpt, specs, None)?;
    let forced =
        InputSet { decode: DecodeSpec::Forced(served[..served.len() - 1].to_vec()), ..inputs.clone() };
    let run = collect(&mut backend, &forced, &TapSelection::parse(&["logits".to_string()])?, None).ok()?;
    let phases: Vec<crate::tap::Phase> = run.record.phases.iter().map(|(p, _, _)| *p).collect();
    let rows = reference_rows(&run.capture, &phases)?;
    let top1 = |k: usize| crate::model::decoder::argmax(&rows[k]) as u32;
    let agreed = (0..rows.len()).take_while(|&k| top1(k) == served[k]).count();
    let matched = (0..rows.len()).filter(|&k| top1(k) == served[k]).count();
    let lp: f64 =
        rows.iter().zip(served).map(|(r, &t)| crate::compare::metrics::log_softmax(r)[t as usize]).sum();
    Ok(Predicted { specs: specs.to_vec(), agreed, matched, logprob: lp / rows.len().max(1) as f64 })
}

fn better(a: &Predicted, b: &Predicted) -> std::cmp::Ordering {
    b.agreed.cmp(&a.agreed).then(b.logprob.total_cmp(&a.logprob))
}

/// Every candidate, in parallel, ranked best first.
fn rank(
    ckpt: &Checkpoint,
    inputs: &InputSet,
    served: &[u32],
    candidates: &[FaultSpec],
) -> Result<Vec<Predicted>> {
    use rayon::prelude::*;
    let mut out: Vec<Predicted> = candidates
        .par_iter()
        .map(|c| predict(ckpt, inputs, served, std::slice::from_ref(c)))
        .collect::<Result<_>>()?;
    out.sort_by(better);
    Ok(out)
}

/// Rank the faults of `spec` (default: the catalog's grid, then the best per-layer families
/// at every layer) by the served tokens `served` they predict after the prompt of `inputs`.
pub fn explain(
    ckpt: &Checkpoint,
    inputs: &InputSet,
    (observed, served): (&str, &[u32]),
    spec: &ExplainSpec,
) -> Result<ExplainReport> {
    let base_report = |conclusion: String| ExplainReport {
        observed: observed.to_string(),
        conclusion,
        by_tokens: true,
        ..ExplainReport::default()
    };
    if served.is_empty() {
        return Ok(base_report(format!("`{observed}` returned no token: nothing to explain")));
    }
    let cfg = &ckpt.config;
    let base = predict(ckpt, inputs, served, &[])?;
    let candidates = spec.faults.clone().unwrap_or_else(|| crate::fault::catalog::grid(cfg));
    let mut ranked = rank(ckpt, inputs, served, &candidates)?;
    let mut narrowed: Vec<FaultSpec> = Vec::new();
    for p in ranked.iter().filter(|p| better(p, &base).is_lt()).take(REFINE) {
        narrowed.extend(crate::fault::catalog::per_layer(&p.specs[0], cfg));
    }
    narrowed.retain(|s| !candidates.contains(s));
    let count = candidates.len() + narrowed.len();
    ranked.extend(rank(ckpt, inputs, served, &narrowed)?);
    ranked.sort_by(better);
    let n = served.len();
    let rows = rows(&ranked, n);
    let baseline = row(&base, 0, n, "(clean reference)".to_string());
    let explained = rows.first().filter(|_| ranked[0].agreed > base.agreed);
    let conclusion = match explained {
        _ if base.agreed == n => format!(
            "`{observed}`'s {n} tokens are the clean reference's greedy choice: nothing to explain"
        ),
        Some(best) => format!(
            "best explanation: {} — its emulation reproduces the first {} of the {n} served tokens (the clean \
             reference {}); mean log-probability of the served tokens {:.4} (clean {:.4})",
            best.fault, ranked[0].agreed, base.agreed, ranked[0].logprob, base.logprob
        ),
        None => format!(
            "no fault reproduces more of the {n} served tokens than the clean reference ({}); the drift is none \
             the catalog models (a quantized served model parts from the float one by its own noise)",
            base.agreed
        ),
    };
    let best = explained.map(|r| r.fault.clone());
    let search = format!(
        "{count} candidates, each emulated teacher-forced on the prompt and the {n} served tokens (the grid, then the \
         best per-layer families at every layer)"
    );
    Ok(ExplainReport {
        rows,
        baseline: Some(baseline),
        against: Baseline::CleanReference,
        best,
        search: Some(search),
        ..base_report(conclusion)
    })
}

/// The ranking's rows, with candidates predicting exactly the same grouped as ties.
fn rows(ranked: &[Predicted], n: usize) -> Vec<ExplainRow> {
    let mut rows: Vec<ExplainRow> = Vec::new();
    let mut last: Option<&Predicted> = None;
    for p in ranked {
        let name = crate::fault::spec::join(&p.specs, "+");
        match (last, rows.last_mut()) {
            (Some(l), Some(r)) if (l.agreed, l.matched, l.logprob) == (p.agreed, p.matched, p.logprob) => {
                r.ties.push(name)
            }
            _ => {
                rows.push(row(p, rows.len() + 1, n, name));
                last = Some(p);
            }
        }
    }
    rows
}

/// A ranked prediction as explain's row: greedy agreement in the match column, the share of
/// positions whose top-1 is the served token, and the mean negative log-probability.
fn row(p: &Predicted, rank: usize, n: usize, fault: String) -> ExplainRow {
    ExplainRow {
        rank,
        finding: p.specs.first().and_then(|s| crate::fault::catalog::finding_of(&s.name)),
        fault,
        match_cosine: p.agreed as f64 / n as f64,
        argmax_agreement: p.matched as f64 / n as f64,
        kl_mean: -p.logprob,
        ties: Vec::new(),
        note: None,
    }
}
