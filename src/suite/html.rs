//! One self-contained HTML page (a minijinja template, `suite.html`): the summary, every pair,
//! and for every failing pair its figures against the baseline and an inline SVG of its cosine
//! per phase with the accepted band. No script, no stylesheet or font from elsewhere: it opens
//! offline, from a CI artifact. The markup is well-formed XML, so a test parses it whole.

use super::figures::{first_seen, tap_order, Figure};
use super::result::{PairResult, Status, SuiteResult};
use super::summary::{band_sentence, counts_sentence, devices, show, status_word, verdict_text, why};
use crate::error::{Error, Result};
use crate::report::band::{render as render_plot, BandPlot, BandSeries};
use crate::report::format::num;
use serde::Serialize;

const TEMPLATE: &str = include_str!("suite.html");

#[derive(Serialize)]
struct PairRow {
    probe: String,
    target: String,
    status: &'static str,
    /// The status as every report writes it (capitals for a failure).
    word: String,
    /// The verdict in a few words: the row's one line.
    verdict: String,
    /// What decided it in full, folded under the verdict (not for a plain pass).
    why: Option<String>,
    /// The pair's own section below, where it has one.
    anchor: Option<String>,
}

#[derive(Serialize)]
struct FigureRow {
    tap: String,
    figure: &'static str,
    value: String,
    baseline: String,
    band: String,
    verdict: &'static str,
}

#[derive(Serialize)]
struct Failing {
    anchor: String,
    probe: String,
    target: String,
    status: &'static str,
    why: String,
    rows: Vec<FigureRow>,
    svg: Option<String>,
}

fn figure_rows(p: &PairResult) -> Vec<FigureRow> {
    let taps = first_seen(p.series.iter().map(|s| &s.tap).chain(p.regressions.iter().map(|r| &r.tap)));
    let mut rows = Vec::new();
    for tap in tap_order(taps) {
        let Some(now) = p.figures.get(tap) else { continue };
        let base = p.baseline.as_ref().and_then(|b| b.get(tap));
        for f in Figure::ALL {
            let Some(v) = f.get(now) else { continue };
            let b = base.and_then(|b| f.get(b));
            let regressed = p.regressions.iter().any(|r| &r.tap == tap && r.figure == f);
            let band = p.band.zip(b).map_or("-".into(), |(band, b)| num(band.of(f, b)));
            rows.push(FigureRow {
                tap: tap.clone(),
                figure: f.title(),
                value: show(f, v),
                baseline: b.map_or("-".into(), |b| show(f, b)),
                band,
                verdict: if regressed { "regressed" } else { "ok" },
            });
        }
    }
    rows
}

/// Cosine per phase of the pair's logits and located tap, each with its accepted band
/// (baseline − noise band … baseline).
pub fn pair_plot(p: &PairResult) -> Result<Option<String>> {
    let Some(first) = p.series.first() else { return Ok(None) };
    let steps: Vec<String> = first.points.iter().map(|(ph, _)| ph.clone()).collect();
    let series = p
        .series
        .iter()
        .map(|s| {
            let base = p.baseline.as_ref().and_then(|b| b.get(&s.tap)).and_then(|f| f.cosine);
            BandSeries {
                label: s.tap.clone(),
                points: s
                    .points
                    .iter()
                    .filter_map(|(ph, v)| steps.iter().position(|x| x == ph).map(|i| (i, *v)))
                    .collect(),
                band: base.zip(p.band).map(|(b, band)| (b - band.cosine, b)),
            }
        })
        .collect();
    let plot = BandPlot {
        caption: format!("{} × {}: cosine per phase vs the reference", p.probe, p.target),
        x_desc: "phase".into(),
        y_desc: "cosine".into(),
        steps,
        series,
    };
    render_plot(&plot).map(Some).map_err(|e| Error::input(format!("plot of {} × {}", p.probe, p.target), e))
}

pub fn render(r: &SuiteResult) -> Result<String> {
    let has_section = |p: &PairResult| p.status.is_failure() || p.status == Status::Known;
    let mut pairs: Vec<PairRow> = r
        .pairs
        .iter()
        .enumerate()
        .map(|(i, p)| PairRow {
            probe: p.probe.clone(),
            target: p.target.clone(),
            status: p.status.name(),
            word: status_word(p.status),
            verdict: verdict_text(p),
            why: (p.status != Status::Pass).then(|| why(p)),
            anchor: has_section(p).then(|| format!("pair-{i}")),
        })
        .collect();
    // The first screen holds what failed: failures first, then what passed with a word (known,
    // flaky), then the rest, each group in the run's order.
    let rank = |s: &str| match Status::from_name(s) {
        Some(s) if s.is_failure() => 0,
        Some(Status::Known | Status::Flaky) => 1,
        _ => 2,
    };
    pairs.sort_by_key(|p| rank(p.status));
    let mut failing = Vec::new();
    for (i, p) in r.pairs.iter().enumerate().filter(|(_, p)| has_section(p)) {
        failing.push(Failing {
            anchor: format!("pair-{i}"),
            probe: p.probe.clone(),
            target: p.target.clone(),
            status: p.status.name(),
            why: verdict_text(p),
            rows: figure_rows(p),
            svg: pair_plot(p)?,
        });
    }
    let devices: Vec<serde_json::Value> = devices(r)
        .into_iter()
        .map(|(target, line)| serde_json::json!({"target": target, "line": line}))
        .collect();
    let mut env = minijinja::Environment::new();
    env.add_template("suite.html", TEMPLATE)
        .map_err(|e| Error::input("suite.html template", e.to_string()))?;
    let ctx = minijinja::context! {
        suite => r.suite,
        shard => r.shard.map(|s| s.to_string()),
        counts => counts_sentence(r),
        interrupted => (!r.unfinished.is_empty()).then(|| super::summary::unfinished_sentence(r)),
        exit => r.exit_code(),
        command => r.command,
        baseline => r.baseline,
        band => band_sentence(r),
        targets => r.targets,
        devices => devices,
        hefprobe => r.hefprobe,
        date => r.date,
        pairs => pairs,
        failing => failing,
        findings => r.findings.iter().map(|f| minijinja::context! {
            id => f.claim.id,
            title => f.claim.title,
            target => f.target,
            expect => f.claim.expect.name(),
            status => f.status.name(),
            fails => f.fails,
            why => f.why,
            last_reproduced => f.last_reproduced,
            since => f.since,
        }).collect::<Vec<_>>(),
    };
    env.get_template("suite.html")
        .and_then(|t| t.render(ctx))
        .map_err(|e| Error::input("suite.html template", e.to_string()))
}
