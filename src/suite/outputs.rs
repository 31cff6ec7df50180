//! What a night writes besides its reports, and when: its file reports rewritten after each
//! probe while it runs, then the baseline ratcheted and the history appended as asked (`suite`
//! and `merge` both).

use super::result::SuiteResult;
use super::{baseline, history};
use crate::error::{Error, Result};
use crate::output::Outputs;
use crate::report::ReportTarget;
use std::path::PathBuf;

/// Baseline, history and reports: what `suite` and `merge` both write.
#[derive(Debug, Clone, Default)]
pub struct SuiteOutputs {
    pub baseline: Option<PathBuf>,
    /// Write this run's figures into the baseline where they improved (everywhere with `accept`).
    pub update_baseline: bool,
    pub accept: bool,
    /// Failing pairs a person accepts as known, by name (`PROBE/TARGET`).
    pub known: Vec<String>,
    /// Append one JSON line per pair to this history.
    pub history: Option<PathBuf>,
    pub reports: Vec<ReportTarget>,
}

/// A finished night: the result (findings annotated from the history), and what updating the
/// baseline and the history said.
pub struct Night {
    pub result: SuiteResult,
    pub said: Vec<String>,
}

impl SuiteOutputs {
    /// Refuse, before anything runs, a format a suite does not write and an output that is a
    /// file the command reads (`outs` lists them): a report or the history written over the
    /// suite, a probe, a target's HEF or checkpoint, the baseline or a shard (`./p/../x` is `x`).
    /// The baseline is written only by `update_baseline`, which is what it asks for.
    pub fn check(&self, mut outs: Outputs) -> Result<()> {
        if let Some(b) = &self.baseline {
            outs.input("the baseline (--baseline)", b);
        }
        crate::report::register::<SuiteResult>(&self.reports, &mut outs)?;
        if let Some(h) = &self.history {
            outs.file("--history", h);
        }
        outs.check()?;
        // The history a run appends to is read now, so a damaged one fails before the night's work.
        self.history.as_ref().map_or(Ok(()), |h| history::check(h))
    }

    /// Ratchet the baseline and append the history, as asked; then annotate the findings: a
    /// finding's last reproduction and the date its status began come from the history, this
    /// run's lines included.
    pub fn finish(&self, mut result: SuiteResult) -> Result<Night> {
        let said = ratchet(&result, self)?;
        if let (Some(h), false) = (&self.history, result.findings.is_empty()) {
            history::annotate(&mut result.findings, &history::read(h)?);
        }
        Ok(Night { result, said })
    }
}

/// After each probe of a run still going: the file reports rewritten with what finished, and
/// what they hold said if the run is interrupted (stdout and $GITHUB_STEP_SUMMARY get the
/// finished run only; the history and baseline are written at the end).
pub fn partial_reports(out: &SuiteOutputs) -> impl FnMut(&SuiteResult) -> Result<()> {
    use crate::probe::cleanup;
    cleanup::install();
    let files: Vec<ReportTarget> = out.reports.iter().filter(|t| t.path.is_some()).cloned().collect();
    move |r| {
        if r.unfinished.is_empty() {
            return Ok(()); // the finished run's reports follow at once
        }
        let mut note = format!("{} not run", r.unfinished.len());
        if !files.is_empty() {
            cleanup::writing(|| -> Result<()> {
                for (t, path) in files.iter().filter_map(|t| Some((t, t.path.as_ref()?))) {
                    // Quiet: "wrote" is said once, for the finished run's files.
                    crate::files::write_file_quiet(path, crate::report::render(r, t, false)?)?;
                }
                Ok(())
            })?;
            let names: Vec<String> =
                files.iter().filter_map(|t| t.path.as_ref()).map(|p| p.display().to_string()).collect();
            note = format!("{} hold the {} pairs that finished ({note})", names.join(", "), r.pairs.len());
        }
        cleanup::leave(format!("{note}; no history appended, the baseline unchanged"));
        Ok(())
    }
}

/// Ratchet the baseline and append the history, as asked; returns the lines to print.
pub fn ratchet(r: &SuiteResult, f: &SuiteOutputs) -> Result<Vec<String>> {
    let mut said = Vec::new();
    if f.update_baseline {
        let path =
            f.baseline.as_ref().ok_or_else(|| Error::usage("--update-baseline needs --baseline FILE"))?;
        let mut b = baseline::Baseline::load_or_new(path, true)?;
        let keys: Vec<(String, String)> = r.pairs.iter().map(|p| p.key()).collect();
        let known = f.known.iter().map(|n| baseline::known_pair(n, &keys)).collect::<Result<Vec<_>>>()?;
        let u = b.update(&r.pairs, f.accept, &known);
        b.save(path)?;
        let how = if f.accept { "accepted as they are" } else { "ratcheted: improvements only" };
        let known_said = if u.known > 0 {
            format!("; {} failing pairs accepted as known", u.known)
        } else {
            String::new()
        };
        said.push(format!(
            "baseline {}: {} pairs added, {} changed, {} with worse figures kept as they were ({how}){known_said}",
            path.display(),
            u.added,
            u.changed,
            u.held
        ));
        let failing = r.pairs.iter().filter(|p| p.status.is_failure()).count();
        if failing > 0 && !f.accept && known.is_empty() {
            said.push(format!(
                "baseline {}: tonight's {failing} failing pairs stay failures on later nights (exit 1) until fixed \
                 or accepted with --known PROBE/TARGET",
                path.display()
            ));
        }
    }
    if let Some(h) = &f.history {
        let n = history::append(h, r)?;
        said.push(format!("history {}: {n} lines appended", h.display()));
    }
    Ok(said)
}
