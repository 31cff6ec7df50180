//! The end of a run: its captures saved where asked, and its report assembled from what every
//! stage returned (a stage returns its result; none writes into the report).

use super::compared::Compared;
use super::explained::Explained;
use super::prepare::{checkpoint_info, Prepared};
use super::runs::{capture_file, Runs};
use super::spill::{spill_note, CaptureOptions};
use crate::compare::thresholds;
use crate::error::{Error, Result};
use crate::report::{BackendInfo, Report};

/// Stage 5: write every capture (`NAME.npz`) into `--save-captures`. A spilled run wrote its
/// captures there as they were produced: nothing is written twice.
pub fn save(runs: &Runs, opts: &CaptureOptions) -> Result<()> {
    let Some(dir) = &opts.save_captures else { return Ok(()) };
    let backends = runs.backends.iter();
    let own = backends.clone().filter_map(|b| b.reference.as_ref().map(|(l, c, _)| (l.as_str(), c.as_ref())));
    let captures = backends.map(|b| (b.label.as_str(), b.capture.as_ref()));
    for (name, capture) in std::iter::once(("reference", runs.reference.as_ref())).chain(own).chain(captures)
    {
        crate::capture::save(capture, &dir.join(capture_file(name)), !opts.quiet)?;
    }
    Ok(())
}

/// What the stages returned, whatever stopped them: the report is built from it.
pub struct Results<'a> {
    pub prepared: &'a Prepared,
    pub runs: &'a Runs,
    pub compared: &'a [Compared],
    pub explained: Option<&'a Explained>,
    /// The stage that stopped and why.
    pub stopped: Option<(&'a str, &'a Error)>,
}

/// The report of a run, built from what every stage returned.
pub fn report(r: &Results) -> Report {
    let (p, runs) = (r.prepared, r.runs);
    let mut report = Report::new(p.probe.clone());
    report.checkpoint = Some(checkpoint_info(&p.ckpt));
    report.config.unknown_keys = p.ckpt.config.unknown_keys.clone();
    report.inputs = Some(runs.inputs.clone());
    if let (Some(plan), Some(dir)) = (&p.spill, &runs.spill) {
        report.notes.push(spill_note(plan, dir, runs.stores()));
    }
    if let Some(chat) = &p.chat {
        report.notes.push(format!(
            "the prompt ({} tokens) is the probe's text as the user message of the chat template of {}, rendered as \
             the served model's server renders it",
            runs.inputs.prompt_tokens, chat.source
        ));
    }
    for b in &runs.backends {
        report.backends.push(BackendInfo {
            name: b.label.clone(),
            kind: b.spec.kind.to_string(),
            status: b.status.clone(),
        });
        report.notes.extend(b.reference.as_ref().map(|(_, _, note)| note.clone()));
        report.notes.extend(b.notes.iter().cloned());
        if let Some(e) = &b.expected {
            report.notes.push(format!(
                "backend `{}` is judged on its excess over what it computes when nothing is wrong, emulated: {} \
                 (each figure may also differ from the expected by {} times what a second draw of that \
                 quantization does)",
                b.label,
                e.quant.description,
                thresholds::REALIZATION_SLACK
            ));
        }
    }
    for c in r.compared {
        report.lens.extend(c.lens.as_ref().map(|rows| (c.label.clone(), rows.clone())));
        report.add_comparison(c.cumulative.clone());
        if let Some((pair, blame)) = &c.local {
            report.blame.extend(blame.as_ref().map(|layers| (c.label.clone(), layers.clone())));
            report.add_comparison(pair.clone());
        }
        for pair in c.expected.iter().chain(&c.beside) {
            report.add_comparison(pair.clone());
        }
    }
    // A backend that stopped is said once it was compared (a failed compare stage names itself).
    for b in runs.backends.iter().take(r.compared.len()) {
        report.incomplete.extend(b.error.as_ref().map(|e| format!("backend `{}`: {e}", b.label)));
    }
    if let Some(e) = r.explained {
        report.notes.extend(e.from_disk.as_deref().map(crate::probe::spill::explain_note));
        report.explain = Some(e.report.clone());
        if let (false, Some(best)) = (report.drift(), &e.report.best) {
            let clean = e.report.against.name();
            report.notes.push(format!(
                "`{}` drifts less than the thresholds, but explain reproduces it with {best}, not with \
                 the {clean}: the run fails on that fault",
                e.report.observed
            ));
        }
    }
    report.incomplete.extend(r.stopped.map(|(stage, e)| format!("the {stage} stage stopped: {e}")));
    report
}
