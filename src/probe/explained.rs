//! Stage 4 of a run: rank the fault catalog against the observed backend.

use super::compared::Compared;
use super::prepare::Prepared;
use super::runs::Runs;
use crate::error::{Error, Result};
use crate::explain::ExplainSpec;
use crate::tap::Key;

/// Stage 4: rank the fault catalog against the observed backend, when the run explains. The
/// probe names its own backend; backends replaced on the command line are observed instead
/// (the first one). A spilled run is explained from its files, one tap of each side at a
/// time, each emulation written to the spill folder and deleted once matched: the same
/// ranking and figures as in memory.
pub fn explain_stage(
    p: &Prepared,
    runs: &Runs,
    compared: &[Compared],
    explain: Option<&ExplainSpec>,
) -> Result<Option<Explained>> {
    let Some(explain) = explain else { return Ok(None) };
    let _stage = crate::alloc::building(&"explain's emulations");
    let observed = match &explain.observed {
        Some(o) if !p.replaced_backends || runs.backend(o).is_some() => o.clone(),
        _ => runs.backends[0].label.clone(),
    };
    // A served model returned tokens only: the faults are ranked by the tokens they predict (a
    // base-scope HEF's tokens sit beside its logits, which explain ranks by as any HEF's).
    let served = compared
        .iter()
        .find(|c| c.label == observed && c.cumulative.rows.is_empty())
        .and_then(|c| c.cumulative.tokens.as_ref());
    if let Some(t) = served {
        let report =
            crate::explain::tokens::explain(&p.ckpt, &p.inputs, (&observed, &t.served_tokens), explain)?;
        return Ok(Some(Explained { report, from_disk: None }));
    }
    // The inputs the observed backend ran (a HEF's own chunking), which explain emulates too.
    let inputs = runs.backend(&observed).and_then(|b| b.inputs.as_ref()).unwrap_or(&p.inputs);
    let (observed_capture, reference, target) = match runs.backend(&observed) {
        // A backend that stopped before its first phase has nothing to explain; its own
        // error is the run's (a second one about empty captures would hide it).
        Some(b) if b.error.is_some() && b.capture.keys().is_empty() => return Ok(None),
        Some(b) => {
            let float = b.float_reference(runs).1;
            // Where the judge found it beyond its expected quantization: the drift to explain.
            let rows = compared.iter().find(|c| c.label == b.label).map(|c| c.cumulative.rows.as_slice());
            let failed = rows.unwrap_or_default().iter().filter(|r| r.failed());
            let focus = failed.map(|r| Key::new(r.phase, r.tap.clone())).collect();
            let target = b.expected.as_ref().map(|e| crate::explain::rank::Target {
                expected: e.quant.clone(),
                emulation: e.emulation.clone(),
                float,
                realization: e.realization.as_ref(),
                focus,
            });
            (b.capture.as_ref(), b.clean(runs).1, target)
        }
        None if observed == "reference" => (runs.reference.as_ref(), runs.reference.as_ref(), None),
        None => {
            return Err(Error::usage(format!(
                "[explain] observed `{observed}` is not a backend of this probe"
            )))
        }
    };
    let scratch = runs.spill.as_ref().map(|s| s.tmp.path());
    let at = crate::explain::rank::Setting { ckpt: &p.ckpt, inputs, scratch, target };
    let report = crate::explain::explain(&at, reference, (&observed, observed_capture), explain)?;
    Ok(Some(Explained { report, from_disk: scratch.map(|d| d.display().to_string()) }))
}

/// Stage 4's result: the ranking, and the folder its emulations went to when it read a
/// spilled run from disk.
pub struct Explained {
    pub report: crate::report::ExplainReport,
    pub from_disk: Option<String>,
}
