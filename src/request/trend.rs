//! `hefprobe trend`: a figure of one tap over the runs of a suite history, with its baseline
//! band, or a finding's status over the runs.

use crate::error::{Error, Result};
use crate::output::Outputs;
use crate::report::ReportTarget;
use crate::suite::figures::Figure;
use crate::suite::history::{self, TrendSpec, Trended};
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct Trend {
    pub history: PathBuf,
    pub reports: Vec<ReportTarget>,
    pub figure: Figure,
    /// The tap whose figure is plotted.
    pub tap: String,
    /// Only these pairs, `PROBE/TARGET`.
    pub pairs: Vec<String>,
    /// A finding's status over the runs instead of a figure.
    pub finding: Option<u32>,
}

impl Trend {
    pub fn run(&self) -> Result<Trended> {
        let mut outs = Outputs::new();
        outs.input("the history", &self.history);
        crate::report::register::<Trended>(&self.reports, &mut outs)?;
        outs.check()?;
        let lines = history::read(&self.history)?;
        let what = self.history.display().to_string();
        if let Some(id) = self.finding {
            let doc = history::trend_doc(&lines, id).ok_or_else(|| {
                Error::input(&what, format!("no run judged finding {id} (a suite's [[finding]] id {id})"))
            })?;
            return Ok(Trended { doc, plot: history::trend_plot(&lines, id), finding: Some(id) });
        }
        let figure = self.figure;
        let spec = TrendSpec { figure, tap: self.tap.clone(), pairs: self.pairs.clone() };
        let trends = history::trends(&lines, &spec);
        if trends.is_empty() {
            let pairs = if spec.pairs.is_empty() { "" } else { " for those pairs" };
            let why = format!("no run has a {} of tap `{}`{pairs}", figure.title(), spec.tap);
            return Err(Error::input(what, why));
        }
        Ok(Trended { doc: history::doc(&trends, &spec), plot: history::plot(&trends, &spec), finding: None })
    }
}
