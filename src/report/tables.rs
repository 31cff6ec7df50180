//! The tables of a run report, built once for the terminal and Markdown: tap and fault names
//! are code (plain on a terminal), verdicts carry a tone (coloured on a terminal), alignment
//! shows in Markdown.

use super::doc::{Cell, Table, Text, Tone};
use super::format::{cos, num, pct, row_cos, row_sqnr, sci, verdict};
use super::{AttributionRow, ExplainRow};
use crate::compare::{PairComparison, TapRow};
use crate::tap::Phase;

/// A name as code, unless it is the "-" of a missing one.
fn code_or_dash(s: String) -> Cell {
    Cell::from(if s == "-" { Text::from(s) } else { Text::code(s) })
}

/// One row per tap (its worst phase), with a cosine column per comparison `beside` (a local
/// view, the float reference) at the same tap and phase, and for a device whether its figure
/// was measured there or can only be inferred.
pub fn taps(rows: &[(&TapRow, usize, usize)], beside: &[(&str, &PairComparison)], on_device: bool) -> Table {
    let mut header = vec!["tap", "worst phase", "fails", "cosine", "SQNR dB", "max |Δ|"];
    header.extend(beside.iter().map(|(h, _)| *h));
    if on_device {
        header.push("on the device");
    }
    header.push("verdict");
    let align = format!("llrrrr{}{}l", "r".repeat(beside.len()), if on_device { "l" } else { "" });
    let mut t = Table::new(header).align(&align);
    for &(row, failed, total) in rows {
        let m = row.metrics.as_ref();
        let mut cells = vec![
            Cell::from(Text::code(row.tap.to_string())),
            row.phase.to_string().into(),
            format!("{failed}/{total}").into(),
            row_cos(Some(row)).into(),
            row_sqnr(row).into(),
            sci(m.map(|m| m.max_abs)).into(),
        ];
        for (_, other) in beside {
            cells.push(row_cos(other.row(row.phase, &row.tap)).into());
        }
        if on_device {
            let how = match row.status {
                crate::compare::RowStatus::OnlyInReference => "inferred (explain)",
                _ => "measured",
            };
            cells.push(how.into());
        }
        let tone = match (row.checked(), row.failed()) {
            (false, _) => Tone::Muted,
            (true, true) => Tone::Bad,
            (true, false) => Tone::Good,
        };
        cells.push(Cell::from(verdict(row)).tone(tone));
        t.row(cells);
    }
    t
}

/// One row per phase: its first failing tap (red when there is one) and the logits figures.
pub fn phases(pair: &PairComparison) -> Table {
    let mut t = Table::new(["phase", "first failing tap", "logits cosine", "argmax", "KL mean", "flips"])
        .align("llrrrr");
    let mut phases: Vec<Phase> = pair.rows.iter().map(|r| r.phase).collect();
    phases.dedup();
    for phase in phases {
        let first = pair.rows.iter().find(|r| r.phase == phase && r.failed());
        let logits = pair.row(phase, &crate::tap::Tap::Logits.into());
        let l = logits.and_then(|r| r.logits.as_ref());
        let tone = if first.is_some() { Tone::Bad } else { Tone::Plain };
        t.row([
            phase.to_string().into(),
            code_or_dash(first.map_or("-".to_string(), |r| r.tap.to_string())).tone(tone),
            row_cos(logits).into(),
            l.map_or("-".into(), |l| pct(l.argmax_agreement)).into(),
            l.map_or("-".into(), |l| num(l.kl_mean)).into(),
            l.map_or("-".to_string(), |l| l.flips.len().to_string()).into(),
        ]);
    }
    t
}

/// Ranked faults: the first `limit`, then the clean reference's row ranked `baseline_rank`.
/// Ranked by the tokens each fault predicts (`tokens`): the served tokens each reproduces, the
/// positions whose top-1 is the served token, the served tokens' mean negative log-probability.
pub fn explain(
    rows: &[ExplainRow],
    limit: usize,
    baseline: Option<&ExplainRow>,
    (baseline_rank, tokens): (&str, bool),
) -> Table {
    let header = if tokens {
        ["rank", "fault", "finding", "served tokens reproduced", "top-1 = served", "served NLL", "note"]
    } else {
        ["rank", "fault", "finding", "match cosine", "argmax agree", "KL mean", "note"]
    };
    let mut t = Table::new(header).align("rlrrrrl");
    let ranked = rows.iter().take(limit).map(|r| (r, r.rank.to_string()));
    for (r, rank) in ranked.chain(baseline.map(|b| (b, baseline_rank.to_string()))) {
        let mut note = r.note.clone().unwrap_or_default();
        if !r.ties.is_empty() {
            note += &format!("{}ties: {}", if note.is_empty() { "" } else { "; " }, r.ties.join(", "));
        }
        t.row([
            rank.into(),
            Cell::from(Text::code(&r.fault)),
            r.finding.map_or("-".into(), |f| f.to_string()).into(),
            if tokens { pct(r.match_cosine) } else { cos(Some(r.match_cosine)) }.into(),
            pct(r.argmax_agreement).into(),
            if r.kl_mean.is_nan() { "-".to_string() } else { num(r.kl_mean) }.into(),
            note.into(),
        ]);
    }
    t
}

/// fp32 ↔ quantization emulation ↔ observed, per tap.
pub fn attribution(rows: &[AttributionRow]) -> Table {
    let mut t = Table::new([
        "phase",
        "tap",
        "fp32 vs observed",
        "fp32 vs quant emulation",
        "emulation vs observed",
        "explained",
    ])
    .align("llrrrr");
    for a in rows {
        t.row([
            a.phase.to_string().into(),
            Cell::from(Text::code(a.tap.to_string())),
            cos(Some(a.reference_vs_observed)).into(),
            cos(Some(a.reference_vs_quant)).into(),
            cos(Some(a.quant_vs_observed)).into(),
            format!("{:.0}%", a.explained * 100.0).into(),
        ]);
    }
    t
}
