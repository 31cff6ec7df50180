//! Stage 3 of a run: compare every backend with its reference (cumulative, local, beside a
//! dump, beyond its expected quantization), locate, blame, logit lens.

use super::prepare::Prepared;
use super::runs::{BackendOutput, Runs};
use crate::backend::serve::Served;
use crate::backend::BackendKind;
use crate::compare::lens::{self, LensRow};
use crate::compare::{compare, locate, tokens, Beyond, PairComparison, RowStatus, Settings, View};
use crate::error::{Error, Result};

/// What stage 3 found for one backend.
pub struct Compared {
    pub label: String,
    /// The float reference against the backend, judged (on the excess over `expected` when
    /// there is one).
    pub cumulative: PairComparison,
    /// The float reference against the backend's expected emulation: its quantization's own
    /// noise, shown beside and not judged.
    pub expected: Option<PairComparison>,
    /// The local view's comparison, and the layers whose own error fails there when the
    /// cumulative view failed.
    pub local: Option<(PairComparison, Option<Vec<usize>>)>,
    /// A device against the emulator dump it is set beside (`beside`): its excess over what the
    /// compiler's own emulator computed.
    pub beside: Option<PairComparison>,
    pub lens: Option<Vec<LensRow>>,
}

/// Stage 3: compare every backend with the reference (cumulative, then local), locate, blame,
/// logit lens. A dump whose shapes cannot be aligned is an input error naming the tap. What
/// was compared before a failure is kept in `out`.
pub fn compare_runs(p: &Prepared, runs: &Runs, out: &mut Vec<Compared>) -> Result<()> {
    let workers = p.spill.as_ref().map_or(1, |s| s.workers);
    let settings = |view, selection| Settings {
        view,
        selection: Some(selection),
        workers,
        ..Settings::new(&p.thresholds)
    };
    let unbounded = p.thresholds.unbounded();
    for b in &runs.backends {
        if b.spec.kind == BackendKind::Serve {
            out.push(served_pair(p, runs, b, b.served.as_ref())?);
            continue;
        }
        let (ref_label, reference) = b.float_reference(runs);
        let names = (ref_label, b.label.as_str());
        let shards = b.shards.as_deref();
        // The quantization's own noise first, and how far two draws of it fall apart: the
        // backend is judged on its excess over them.
        let noise = Settings { thresholds: &unbounded, shards, ..settings(View::Expected, &p.selection) };
        let (expected, spread) = match &b.expected {
            Some(e) => {
                let expected_label = crate::report::expected_label(&b.label);
                let pair = compare(reference, e.capture.as_ref(), (ref_label, &expected_label), &noise)?;
                let second = (expected_label.as_str(), "its second draw");
                let spread = compare(e.capture.as_ref(), e.realization.as_ref(), second, &noise)?;
                (Some(pair), Some(spread))
            }
            None => (None, None),
        };
        let beyond = expected.as_ref().map(|expected| Beyond { expected, spread: spread.as_ref() });
        let judged = Settings { beyond, shards, ..settings(View::Cumulative, &p.selection) };
        let mut cumulative = compare(reference, b.capture.as_ref(), names, &judged)?;
        cumulative.on_device = b.spec.kind == BackendKind::Hef;
        // A base-scope group's own greedy generation, token by token.
        if let Some(served) = &b.served {
            cumulative.tokens = Some(token_figures(p, runs, reference, served, true)?);
        }
        if b.spec.kind == BackendKind::Dump {
            refuse_misaligned(&b.label, &cumulative)?;
        }
        let lens = (p.lens && b.capabilities.all_taps)
            .then(|| {
                lens::logit_lens(
                    &|h| p.model.lens_logits(h),
                    p.ckpt.config.num_layers,
                    reference,
                    b.capture.as_ref(),
                )
            })
            .transpose()?;
        let local = match &b.local {
            Some((taps, local)) => {
                let pair = compare(reference, local.as_ref(), names, &settings(View::Local, taps))?;
                let blame = (!cumulative.passed()).then(|| locate::blamed_layers(&pair));
                Some((pair, blame))
            }
            None => None,
        };
        let beside = beside_pair(p, runs, b, (&noise, spread.as_ref()))?;
        out.push(Compared { label: b.label.clone(), cumulative, expected, local, lens, beside });
    }
    Ok(())
}

/// `served` against `reference` token by token; `ids_only`: its tokens came as ids (a device's
/// own greedy generation), their texts decoded with the checkpoint's tokenizer.
fn token_figures(
    p: &Prepared,
    runs: &Runs,
    reference: &dyn crate::capture::Store,
    served: &Served,
    ids_only: bool,
) -> Result<tokens::TokenComparison> {
    let tok = crate::model::tokenizer::Tokenizer::for_checkpoint(&p.ckpt)?;
    let rows = tokens::reference_rows(reference, &runs.inputs.phases)?;
    let decoded = ids_only.then(|| tokens::with_texts(served, &tok));
    Ok(tokens::compare(&rows, decoded.as_ref().unwrap_or(served), &tok, &p.thresholds))
}

/// A served model against the reference, token by token: no tap rows (nothing but tokens came
/// back), its figures in the pair's `tokens` (none when it answered nothing).
fn served_pair(p: &Prepared, runs: &Runs, b: &BackendOutput, served: Option<&Served>) -> Result<Compared> {
    let tokens = served.map(|s| token_figures(p, runs, runs.reference.as_ref(), s, false)).transpose()?;
    let cumulative = PairComparison {
        reference: "reference".into(),
        candidate: b.label.clone(),
        view: View::Cumulative,
        rows: Vec::new(),
        on_device: false,
        tokens,
    };
    Ok(Compared { label: b.label.clone(), cumulative, expected: None, local: None, beside: None, lens: None })
}

/// A device against the emulator dump it is set `beside`, judged on its excess over what its
/// own quantization puts between the two (the expected emulation vs the dump), without the
/// bounds on the device's own figures, which the dump shares.
fn beside_pair(
    p: &Prepared,
    runs: &Runs,
    b: &BackendOutput,
    (noise, spread): (&Settings, Option<&PairComparison>),
) -> Result<Option<PairComparison>> {
    let Some(label) = &b.spec.beside else { return Ok(None) };
    let dump = runs.backends.iter().find(|d| d.label == *label && d.spec.kind == BackendKind::Dump);
    let dump = dump.ok_or_else(|| {
        Error::usage(format!(
            "backend `{}`: beside = `{label}` names no dump backend of this probe (the DFC emulator's \
             inference saved as .npz, with its map)",
            b.label
        ))
    })?;
    let quant = match &b.expected {
        Some(e) => Some(compare(dump.capture.as_ref(), e.capture.as_ref(), (label, "expected"), noise)?),
        None => None,
    };
    let beyond = quant.as_ref().map(|expected| Beyond { expected, spread });
    let relative = p.thresholds.relative();
    // The selection, workers and shards of the noise's comparison (the device's own).
    let judged = Settings { view: View::Cumulative, thresholds: &relative, beyond, ..*noise };
    let mut pair = compare(dump.capture.as_ref(), b.capture.as_ref(), (label, &b.label), &judged)?;
    pair.on_device = true;
    Ok(Some(pair))
}

/// A dump's tap whose shape cannot be aligned with the reference's is an input error.
fn refuse_misaligned(label: &str, pair: &PairComparison) -> Result<()> {
    match pair.rows.iter().find(|r| r.status == RowStatus::ShapeMismatch) {
        None => Ok(()),
        Some(bad) => Err(Error::input(
            format!("backend `{label}` tap {}", bad.key()),
            format!(
                "shape {:?} cannot be aligned with the reference's {:?}; fix the dump or add a layout \
                 transform (squeeze, permute, reshape) for it in the name map",
                bad.cand_shape, bad.ref_shape
            ),
        )),
    }
}
