//! The suite's summary as one document (report::doc): the terminal view and the Markdown that
//! fits a pull-request comment are two renderings of it. Also the sentences every output
//! shares — what decided a pair, the noise band, a device — worded once, here.

use super::figures::{first_seen, tap_order, Figure, Regression};
use super::result::{PairResult, Status, SuiteResult};
use crate::device::DeviceFacts;
use crate::report::doc::{Cell, Doc, Table, Text, Tone};
use crate::report::format::{cos, num, pct};

/// A value of figure `f` as reports show it.
pub fn show(f: Figure, v: f64) -> String {
    match f {
        Figure::Cosine => cos(Some(v)),
        Figure::Argmax | Figure::Agreement => pct(v),
        _ => num(v),
    }
}

/// One regression: `logits cosine 0.642903 vs baseline 0.999994: worse by 0.357 (band 1e-4)`.
pub fn regression_sentence(r: &Regression) -> String {
    let by = num(r.figure.worse_by(r.value, r.baseline));
    format!("{}: worse by {by} (noise band {})", versus(r), num(r.band))
}

/// A regression's figure against its baseline: `logits cosine 0.642903 vs baseline 0.999994`.
fn versus(r: &Regression) -> String {
    let (f, title) = (r.figure, r.figure.title());
    format!("{} {title} {} vs baseline {}", r.tap, show(f, r.value), show(f, r.baseline))
}

/// The most characters a verdict line holds: it reads at a glance on a terminal, in a pull
/// request's comment and as a JUnit message; everything else is in the details below it.
pub const VERDICT_CHARS: usize = 160;

/// A pair's status as every report writes it: a failure in capitals, the rest as named.
pub fn status_word(s: Status) -> String {
    if s.is_failure() {
        s.name().to_uppercase()
    } else {
        s.name().to_string()
    }
}

/// What decided a pair in a few words, for its verdict line: the first drifting tap and its
/// figure against what was expected (or the regressed figure against its baseline), then the
/// best explanation. One figure, named as the details name it.
pub fn verdict_text(p: &PairResult) -> String {
    let best = p.best_explanation.as_ref().map(|b| format!("; best explanation {b}")).unwrap_or_default();
    let drift = || match (&p.first_drift, &p.failed_bound) {
        (Some(tap), Some(bound)) => format!("{tap} {bound}"),
        (Some(tap), None) => format!("first drift at {tap}"),
        _ => "beyond its thresholds".to_string(),
    };
    match p.status {
        Status::Regressed => match p.regressions.first() {
            Some(r) => format!("{} (noise band {}){best}", versus(r), num(r.band)),
            None => format!("{}{best}", drift()),
        },
        Status::Failed => format!("{}{best}", drift()),
        Status::Known => format!("{}; accepted as known, no worse than its baseline{best}", drift()),
        Status::Unstable => p.gate.as_ref().map_or("the device disagrees with itself".into(), |g| {
            format!(
                "the device disagrees with itself: logits cosine down to {} over {} runs of the same inputs",
                cos(Some(g.cosine)),
                g.runs
            )
        }),
        Status::Error => p.error.as_ref().map_or("could not run".into(), |e| e.message.clone()),
        Status::Flaky => "failed the first run, passed the re-run".into(),
        Status::Pass => headline(p).map_or("within thresholds".into(), |(tap, v, base)| {
            let base = base.map(|b| format!(" (baseline {})", cos(Some(b)))).unwrap_or_default();
            format!("{tap} cosine {}{base}", cos(Some(v)))
        }),
        Status::Skipped => p.note.clone().unwrap_or_else(|| "skipped".into()),
    }
}

/// A pair's verdict in one line of at most [`VERDICT_CHARS`]: status, pair, [`verdict_text`].
pub fn verdict_line(p: &PairResult) -> String {
    let line = format!("{} {} × {}: {}", status_word(p.status), p.probe, p.target, verdict_text(p));
    crate::report::doc::cut(&line, VERDICT_CHARS)
}

/// What decided a pair, in full: the rule that decided it, the located drift, the explanation,
/// the re-run; no sentence twice (the details under its verdict line, a JUnit failure's body).
pub fn why(p: &PairResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    match p.status {
        Status::Regressed => {
            let more = p.regressions.len().saturating_sub(1);
            if let Some(r) = p.regressions.first() {
                let more = if more > 0 { format!(" (+{more} more figures)") } else { String::new() };
                parts.push(format!("worse than its baseline: {}{more}", regression_sentence(r)));
            }
        }
        Status::Failed => parts.push(
            "beyond its thresholds, and no person accepted it as known (`--update-baseline --known PROBE/TARGET` \
             does)"
                .into(),
        ),
        Status::Known => {
            parts.push("beyond its thresholds, accepted as known by name, and no worse than its baseline".into())
        }
        Status::Unstable => parts.extend(p.gate.as_ref().map(|g| {
            format!(
                "the device disagrees with itself: over {} runs of the same inputs, logits cosine down to {} and \
                 argmax agreement {} between runs (max |Δ logit| {}{}); not compared",
                g.runs,
                cos(Some(g.cosine)),
                pct(g.argmax),
                num(g.max_abs),
                g.worst_key.as_ref().map(|k| format!(" at {k}")).unwrap_or_default()
            )
        })),
        Status::Flaky => parts.push(format!(
            "failed the first run ({}), passed the re-run",
            p.first_run.as_deref().unwrap_or("?")
        )),
        Status::Pass if p.baseline.is_none() => parts.push("within thresholds (no baseline yet)".into()),
        Status::Pass => parts.push("within thresholds and its baseline".into()),
        Status::Error => parts.extend(p.error.as_ref().map(|e| e.message.clone())),
        Status::Skipped => parts.push(p.note.clone().unwrap_or_else(|| "skipped".into())),
    }
    parts.extend(p.note.clone().filter(|_| p.status != Status::Skipped));
    parts.extend(p.located.clone().filter(|_| p.status != Status::Flaky));
    parts.extend(p.explanation.clone());
    if let Some(f) = p.first_run.as_ref().filter(|_| matches!(p.status, Status::Regressed | Status::Failed)) {
        // The first run's words, only where the re-run said otherwise.
        let said = f.split_once(": ").map_or(f.as_str(), |(_, s)| s);
        if parts.iter().any(|x| x.contains(said)) {
            parts.push("confirmed by a re-run".into());
        } else {
            parts.push(format!("confirmed by a re-run (first run: {f})"));
        }
    }
    parts.join(". ")
}

/// The headline figure of a pair: the logits' worst cosine, else the worst-cosine tap's.
pub fn headline(p: &PairResult) -> Option<(String, f64, Option<f64>)> {
    let tap = match p.figures.get("logits").and_then(|f| f.cosine) {
        Some(_) => "logits".to_string(),
        None => tap_order(p.figures.keys())
            .into_iter()
            .filter(|t| p.figures[*t].cosine.is_some())
            .min_by(|a, b| p.figures[*a].cosine.unwrap().total_cmp(&p.figures[*b].cosine.unwrap()))?
            .clone(),
    };
    let value = p.figures[&tap].cosine?;
    let base = p.baseline.as_ref().and_then(|b| b.get(&tap)).and_then(|f| f.cosine);
    Some((tap, value, base))
}

/// Each target's device, one line each, in the order the pairs name them.
pub fn devices(r: &SuiteResult) -> Vec<(String, String)> {
    first_seen(r.pairs.iter().filter_map(|p| Some((p.target.clone(), device_line(p.device.as_ref()?)))))
}

/// One line on a device: `sim HAILO10H — hefprobe 0.1.0 simulated Hailo-10H, quant a16`.
pub fn device_line(f: &DeviceFacts) -> String {
    let mut bits: Vec<String> = vec![f.kind.clone()];
    bits.extend(f.architecture.clone());
    bits.extend(f.device_id.clone());
    bits.extend(f.library_version.as_ref().map(|v| format!("HailoRT {v}")));
    bits.extend(f.temperature_c.map(|t| format!("{t:.1} °C")));
    let mut s = bits.join(" ");
    if let Some(sim) = &f.simulator {
        s += &format!(" — {sim}");
    }
    s
}

/// The rule, stated.
pub fn band_sentence(r: &SuiteResult) -> String {
    let f = &r.floors;
    format!(
        "a figure regresses when it is worse than its baseline by more than the noise band: the larger of a floor \
         (cosine {}, SQNR {} dB, KL {}, argmax agreement {}) and what the device's own run-to-run spread does to it; \
         device targets first run the same inputs {} times and are unstable below a logits cosine of {} between runs \
         or with any other argmax",
        num(f.cosine),
        num(f.sqnr_db),
        num(f.kl),
        pct(f.argmax),
        r.gate.runs,
        num(r.gate.min_cosine)
    )
}

pub fn counts_sentence(r: &SuiteResult) -> String {
    let c = &r.counts;
    let parts: Vec<String> = Status::ALL
        .iter()
        .filter(|s| c.get(**s) > 0)
        .map(|s| format!("{} {}", c.get(*s), s.name()))
        .collect();
    format!("{} pairs: {}", c.pairs, if parts.is_empty() { "none".into() } else { parts.join(", ") })
}

/// How a status looks on a colour terminal: a known failure is never shown as a pass.
pub fn tone(s: Status) -> Tone {
    match s {
        Status::Pass | Status::Flaky => Tone::Good,
        Status::Known => Tone::Warn,
        Status::Skipped => Tone::Muted,
        _ => Tone::Bad,
    }
}

/// The pairs as rows of status, probe, target and [`verdict_text`].
fn pairs_table(pairs: &[&PairResult]) -> Table {
    let mut t = Table::new(["status", "probe", "target", "verdict"]);
    for p in pairs {
        t.row([
            Cell::from(Text::strong(status_word(p.status))).tone(tone(p.status)),
            Cell::from(Text::code(&p.probe)),
            Cell::from(Text::code(&p.target)),
            verdict_text(p).into(),
        ]);
    }
    t
}

/// The summary document.
/// What an interrupted run did not do: its pairs not run (the first few named), no history, no
/// baseline update.
pub fn unfinished_sentence(r: &SuiteResult) -> String {
    let named: Vec<String> =
        r.unfinished.iter().take(5).map(|e| format!("{} × {}", e.probe, e.target)).collect();
    let more = r.unfinished.len().saturating_sub(named.len());
    format!(
        "{} of {} pairs of this run not run ({}{}); the history and baseline were not written",
        r.unfinished.len(),
        r.unfinished.len() + r.pairs.len(),
        named.join(", "),
        if more > 0 { format!(", {more} more") } else { String::new() }
    )
}

pub fn doc(r: &SuiteResult) -> Doc {
    let mut d = Doc::new();
    let shard = r.shard.map(|s| format!(" (shard {s})")).unwrap_or_default();
    d.heading(2, format!("hefprobe suite: {}{shard}", r.suite));
    let exit = r.exit_code();
    d.line(Text::strong("Result.").and(format!(" {} (exit {exit}).", counts_sentence(r)))).blank();
    if !r.unfinished.is_empty() {
        d.line(Text::strong("Interrupted.").and(format!(" {}", unfinished_sentence(r)))).blank();
    }
    let (bad, good): (Vec<&PairResult>, Vec<&PairResult>) =
        r.pairs.iter().partition(|p| !matches!(p.status, Status::Pass | Status::Skipped));
    // Each pair that is not a pass: its verdict line, the details folded under it.
    for p in &bad {
        let mut inner = Doc::new();
        inner.line(why(p));
        d.details(verdict_line(p), inner);
    }
    if !bad.is_empty() {
        d.blank();
    }
    if !good.is_empty() {
        let mut inner = Doc::new();
        inner.table(pairs_table(&good));
        d.details(format!("{} passing or skipped pairs", good.len()), inner).blank();
    }
    if !r.findings.is_empty() {
        for f in r.findings.iter().filter(|f| f.fails) {
            d.line(Text::strong("Finding.").and(format!(" {}", super::findings::sentence(f))));
        }
        d.table(super::findings::table(&r.findings)).blank();
    }
    d.fact(Text::from("command: ").and(Text::code(&r.command)));
    match &r.baseline {
        Some(b) => d.fact(Text::from("baseline: ").and(Text::code(b))),
        None => d.fact("baseline: none (a failure is \"failed\", never \"known\")"),
    };
    d.fact(format!("noise band: {}", band_sentence(r)));
    for t in &r.targets {
        let rev = t.revision.as_ref().map(|v| format!(", revision {v}")).unwrap_or_default();
        let path = t.path.as_ref().map(|p| format!(" {p}")).unwrap_or_default();
        d.fact(Text::from("target ").and(Text::code(&t.label)).and(format!(": {}{path}{rev}", t.kind)));
    }
    for (target, line) in devices(r) {
        d.fact(Text::from("device of ").and(Text::code(target)).and(format!(": {line}")));
    }
    let t = &r.timing;
    if t.total > 0.0 {
        d.fact(format!(
            "time: {} s, of which the probes' own stages {} s and the suite's {} s (devices {} s, gate {} s, re-runs {} s, \
             explain {} s)",
            secs(t.total),
            secs(t.probes),
            secs((t.total - t.probes).max(0.0)),
            secs(t.devices),
            secs(t.gate),
            secs(t.reruns),
            secs(t.explain)
        ));
    }
    d.fact(format!("hefprobe {}, {}", r.hefprobe, r.date));
    d
}

fn secs(s: f64) -> String {
    format!("{s:.1}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::figures::Figure;

    #[test]
    fn a_regression_reads_as_figures_and_band() {
        let r = Regression {
            tap: "logits".into(),
            figure: Figure::Cosine,
            value: 0.64,
            baseline: 0.99999,
            band: 1e-4,
        };
        assert_eq!(
            regression_sentence(&r),
            "logits cosine 0.640000 vs baseline 0.999990: worse by 0.35999 (noise band 1.000e-4)"
        );
    }
}
