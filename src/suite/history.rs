//! Trends: every suite run (or merge) appends one JSON line per pair to a history file — date,
//! the HEF build's revision, the device's facts, the figures, and the baseline and band they were
//! judged by — and `hefprobe trend` plots one figure of one tap over the runs, each pair's
//! accepted band shaded behind it. JSON Lines, so a nightly job only ever appends, and any tool
//! can read it.

use super::figures::{Band, Figure, Figures};
use super::result::FindingStatus;
use super::result::{Status, SuiteResult};
use crate::device::DeviceFacts;
use crate::error::{Error, Result};
use crate::report::band::{BandPlot, BandSeries};
use crate::report::doc::{Doc, Table};
use crate::report::format::num;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub const HISTORY_SCHEMA: &str = "hefprobe.history/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryLine {
    pub schema: String,
    pub date: String,
    pub suite: String,
    pub probe: String,
    pub target: String,
    pub status: Status,
    pub hef_revision: Option<String>,
    pub device: Option<DeviceFacts>,
    pub band: Option<Band>,
    pub figures: BTreeMap<String, Figures>,
    pub baseline: Option<BTreeMap<String, Figures>>,
    /// The status of each finding claimed on this pair (by id).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub findings: BTreeMap<u32, FindingStatus>,
}

/// The lines a run adds (skipped pairs have nothing to add).
pub fn lines(r: &SuiteResult) -> Vec<HistoryLine> {
    r.pairs
        .iter()
        .filter(|p| p.status != Status::Skipped)
        .map(|p| HistoryLine {
            schema: HISTORY_SCHEMA.into(),
            date: r.date.clone(),
            suite: r.suite.clone(),
            probe: p.probe.clone(),
            target: p.target.clone(),
            status: p.status,
            hef_revision: p.hef_revision.clone(),
            device: p.device.clone(),
            band: p.band,
            figures: p.figures.clone(),
            baseline: p.baseline.clone(),
            findings: r
                .findings
                .iter()
                .filter(|f| {
                    f.claim.probe == p.probe && f.target == p.target && f.status != FindingStatus::NotRun
                })
                .map(|f| (f.claim.id, f.status))
                .collect(),
        })
        .collect()
}

pub fn append(path: &Path, r: &SuiteResult) -> Result<usize> {
    // A last line cut off (a run killed while appending) is never glued onto: `read` names it.
    if unterminated(path)? {
        read(path)?;
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let new = lines(r);
    let mut text = String::new();
    for l in &new {
        text += &serde_json::to_string(l).expect("history lines serialize");
        text.push('\n');
    }
    crate::files::append(path, &text)?;
    Ok(new.len())
}

/// Whether the history at `path` exists and its last byte is not a newline (a line cut off
/// while appending): one byte read, not the file.
fn unterminated(path: &Path) -> Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    if !path.exists() {
        return Ok(false);
    }
    let mut f = crate::files::open(path)?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    if len == 0 {
        return Ok(false);
    }
    let mut last = [0u8; 1];
    f.seek(SeekFrom::Start(len - 1)).and_then(|_| f.read_exact(&mut last)).map_err(|e| Error::io(path, e))?;
    Ok(last[0] != b'\n')
}

fn truncated(path: &Path, line: usize) -> Error {
    Error::input(
        format!("{} line {line}", path.display()),
        "is cut off (no newline at its end: a run was stopped while appending); remove that line, then \
         append again",
    )
}

/// Check the history at `path` (when it exists) before a run that will append to it.
pub fn check(path: &Path) -> Result<()> {
    if path.exists() {
        read(path)?;
    }
    Ok(())
}

pub fn read(path: &Path) -> Result<Vec<HistoryLine>> {
    let text = crate::files::read_text(path, crate::files::Kind::History)?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(truncated(path, text.lines().count()));
    }
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = format!("{} line {}", path.display(), n + 1);
        let l: HistoryLine =
            serde_json::from_str(line).map_err(|e| Error::input(&at, format!("not a history line: {e}")))?;
        if l.schema != HISTORY_SCHEMA {
            return Err(Error::input(
                &at,
                format!("schema `{}`; this hefprobe reads `{HISTORY_SCHEMA}`", l.schema),
            ));
        }
        let what = format!("{at} ({} × {})", l.probe, l.target);
        super::check::date(&what, &l.date)?;
        super::check::taps(&what, &l.figures)?;
        if let Some(b) = &l.baseline {
            super::check::taps(&format!("{what} baseline"), b)?;
        }
        if let Some(b) = &l.band {
            super::check::band(&what, b)?;
        }
        out.push(l);
    }
    Ok(out)
}

/// What to plot.
#[derive(Debug, Clone)]
pub struct TrendSpec {
    pub figure: Figure,
    pub tap: String,
    /// `PROBE/TARGET` pairs to keep (empty: all).
    pub pairs: Vec<String>,
}

/// One pair's figure over the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Trend {
    pub probe: String,
    pub target: String,
    /// (date, value, status).
    pub points: Vec<(String, f64, Status)>,
    /// The latest run's accepted range: baseline − band … baseline (or up to baseline + band
    /// for KL, where lower is better).
    pub band: Option<(f64, f64)>,
}

pub fn trends(history: &[HistoryLine], spec: &TrendSpec) -> Vec<Trend> {
    let mut out: Vec<Trend> = Vec::new();
    for l in history {
        let key = format!("{}/{}", l.probe, l.target);
        if !spec.pairs.is_empty() && !spec.pairs.contains(&key) {
            continue;
        }
        let Some(v) = l.figures.get(&spec.tap).and_then(|f| spec.figure.get(f)) else { continue };
        let at = out.iter().position(|t| t.probe == l.probe && t.target == l.target);
        let i = at.unwrap_or_else(|| {
            let (probe, target) = (l.probe.clone(), l.target.clone());
            out.push(Trend { probe, target, points: Vec::new(), band: None });
            out.len() - 1
        });
        let t = &mut out[i];
        t.points.push((l.date.clone(), v, l.status));
        let base = l.baseline.as_ref().and_then(|b| b.get(&spec.tap)).and_then(|f| spec.figure.get(f));
        t.band = base.zip(l.band).map(|(b, band)| {
            let w = band.of(spec.figure, b);
            if spec.figure.higher_is_better() {
                (b - w, b)
            } else {
                (b, b + w)
            }
        });
    }
    out
}

/// The plot: runs along x (by date), one line per pair.
pub fn plot(trends: &[Trend], spec: &TrendSpec) -> BandPlot {
    let dates: BTreeSet<&String> = trends.iter().flat_map(|t| t.points.iter().map(|p| &p.0)).collect();
    let steps = dates.iter().map(|d| d.get(..16).unwrap_or(d).replace('T', " ")).collect();
    BandPlot {
        caption: format!(
            "{} of {} over runs (shaded: accepted band of the latest run)",
            spec.figure.title(),
            spec.tap
        ),
        x_desc: "run".into(),
        y_desc: spec.figure.title().into(),
        steps,
        series: trends
            .iter()
            .map(|t| BandSeries {
                label: format!("{} × {}", t.probe, t.target),
                points: t
                    .points
                    .iter()
                    .filter_map(|(d, v, _)| dates.iter().position(|x| *x == d).map(|i| (i, *v)))
                    .collect(),
                band: t.band,
            })
            .collect(),
    }
}

/// The table `hefprobe trend` prints: each pair's latest figure against its band.
pub fn doc(trends: &[Trend], spec: &TrendSpec) -> Doc {
    let mut d = Doc::new();
    d.line(format!("{} of {} over runs", spec.figure.title(), spec.tap));
    let mut t = Table::new(["probe", "target", "runs", "first", "latest", "accepted band", "latest status"])
        .align("llrrrll");
    for tr in trends {
        let (first, last) = (tr.points.first(), tr.points.last());
        t.row([
            tr.probe.clone(),
            tr.target.clone(),
            tr.points.len().to_string(),
            first.map_or("-".into(), |p| num(p.1)),
            last.map_or("-".into(), |p| num(p.1)),
            tr.band.map_or("-".into(), |(lo, hi)| format!("{} … {}", num(lo), num(hi))),
            last.map_or("-".into(), |p| p.2.name().to_string()),
        ]);
    }
    d.table(t);
    d
}

/// What `hefprobe trend` writes: a figure's (or a finding's) table over the runs, and its plot.
pub struct Trended {
    pub doc: Doc,
    pub plot: BandPlot,
    /// What a plot that cannot be drawn names: the finding, else the plot's file.
    pub finding: Option<u32>,
}

impl crate::report::Document for Trended {
    const COMMAND: &'static str = "trend";
    const FORMATS: &'static [crate::report::Format] =
        &[crate::report::Format::Svg, crate::report::Format::Terminal, crate::report::Format::Markdown];

    fn refusal(t: &crate::report::ReportTarget) -> String {
        format!("--report {}: trend writes svg=PATH, terminal or markdown", t.format.name())
    }

    fn doc(&self, _to: Option<&Path>) -> Doc {
        self.doc.clone()
    }

    /// The plot, at `path` itself (one file, not a prefix as in `run`).
    fn figures(&mut self, path: &Path) -> Result<()> {
        let what = self.finding.map_or_else(|| path.display().to_string(), |id| format!("finding {id}"));
        let svg = crate::report::band::render(&self.plot)
            .map_err(|e| Error::input(what, format!("drawing the plot: {e}")))?;
        crate::files::write_file(path, svg)
    }
}

/// Fill `last_reproduced` and `since` from the history's lines (oldest first, this run's
/// included): a finding's status on its probe × target over the runs.
pub fn annotate(findings: &mut [super::result::FindingResult], history: &[HistoryLine]) {
    for f in findings {
        let mut since: Option<&str> = None;
        let mut last: Option<FindingStatus> = None;
        for l in history.iter().filter(|l| l.probe == f.claim.probe && l.target == f.target) {
            let Some(&s) = l.findings.get(&f.claim.id) else { continue };
            if s == FindingStatus::Reproduces {
                f.last_reproduced = Some(l.date.clone());
            }
            if last != Some(s) {
                since = Some(&l.date);
                last = Some(s);
            }
        }
        if last == Some(f.status) {
            f.since = since.map(String::from);
        }
    }
}

/// A finding's runs in the history (oldest first): (date, probe × target, status).
fn runs_of(history: &[HistoryLine], id: u32) -> Vec<(&str, String, FindingStatus)> {
    history
        .iter()
        .filter_map(|l| {
            l.findings.get(&id).map(|s| (l.date.as_str(), format!("{} × {}", l.probe, l.target), *s))
        })
        .collect()
}

/// `hefprobe trend --finding N`: the finding's status per run, each change marked; None when
/// the history never judged it.
pub fn trend_doc(history: &[HistoryLine], id: u32) -> Option<Doc> {
    let runs = runs_of(history, id);
    if runs.is_empty() {
        return None;
    }
    let mut d = Doc::new();
    d.line(format!("finding {id} over runs"));
    let mut t = Table::new(["date", "pair", "status", ""]).align("llll");
    let mut last: BTreeMap<&str, FindingStatus> = BTreeMap::new();
    for (date, pair, s) in &runs {
        let change = match last.insert(pair.as_str(), *s) {
            Some(before) if before != *s => format!("changed (was {})", before.name()),
            _ => String::new(),
        };
        t.row([date.to_string(), pair.clone(), s.name().to_string(), change]);
    }
    d.table(t);
    Some(d)
}

/// The same as a plot: 1 reproduces, 0.5 changed, 0 fixed, one line per pair.
pub fn trend_plot(history: &[HistoryLine], id: u32) -> BandPlot {
    let runs = runs_of(history, id);
    let dates: BTreeSet<&str> = runs.iter().map(|r| r.0).collect();
    let mut series: Vec<BandSeries> = Vec::new();
    for (date, pair, s) in &runs {
        let y = match s {
            FindingStatus::Reproduces => 1.0,
            FindingStatus::Changed => 0.5,
            _ => 0.0,
        };
        let x = dates.iter().position(|d| d == date).unwrap_or(0);
        match series.iter_mut().find(|t| &t.label == pair) {
            Some(t) => t.points.push((x, y)),
            None => series.push(BandSeries { label: pair.clone(), points: vec![(x, y)], band: None }),
        }
    }
    BandPlot {
        caption: format!("finding {id} over runs (1 reproduces, 0.5 changed, 0 fixed)"),
        x_desc: "run".into(),
        y_desc: "status".into(),
        steps: dates.iter().map(|d| d.get(..16).unwrap_or(d).replace('T', " ")).collect(),
        series,
    }
}
