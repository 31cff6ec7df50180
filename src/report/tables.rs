//! The tables of a run report, built once for the terminal and Markdown: tap and fault names
//! are code (plain on a terminal), verdicts carry a tone (coloured on a terminal), alignment
//! shows in Markdown.

use super::doc::{Cell, Table, Text, Tone};
use super::format::{cos, num, pct, row_cos, row_sqnr, sci, verdict};
use crate::compare::{PairComparison, TapRow};
use crate::explain::{AttributionRow, ExplainRow};
use crate::tap::Phase;

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
            first.map_or(Cell::from("-"), |r| Cell::from(Text::code(r.tap.to_string()))).tone(tone),
            row_cos(logits).into(),
            l.map_or("-".into(), |l| pct(l.argmax_agreement)).into(),
            l.map_or("-".into(), |l| num(l.kl_mean)).into(),
            l.map_or("-".to_string(), |l| l.flips.len().to_string()).into(),
        ]);
    }
    t
}

/// The logits shard by shard, when they come from a sharded lm_head: per shard its worst phase
/// (lowest cosine), its figures there, the local argmax of the reference and the candidate at
/// that phase's last position, and in how many phases it fails its shard bounds.
pub fn shards(pair: &PairComparison) -> Option<Table> {
    let logits: Vec<&TapRow> = pair
        .rows
        .iter()
        .filter(|r| r.tap.canonical() == Some(crate::tap::Tap::Logits))
        .filter(|r| r.logits.as_ref().is_some_and(|l| !l.shards.is_empty()))
        .collect();
    let n = logits.first()?.logits.as_ref()?.shards.len();
    let mut t = Table::new([
        "shard",
        "columns",
        "worst phase",
        "fails",
        "cosine",
        "SQNR dB",
        "scale",
        "argmax (ref → got)",
        "argmax agree",
    ])
    .align("rllrrrrrr");
    for i in 0..n {
        let of = |r: &&TapRow| r.logits.as_ref().and_then(|l| l.shards.get(i)).cloned();
        let all: Vec<(Phase, crate::compare::shards::ShardFigures)> =
            logits.iter().filter_map(|r| Some((r.phase, of(r)?))).collect();
        let Some((phase, s)) = all.iter().min_by(|a, b| a.1.cosine.total_cmp(&b.1.cosine)) else { continue };
        let failed = all.iter().filter(|(_, s)| s.failed).count();
        let tone = if failed > 0 { Tone::Bad } else { Tone::Good };
        let local = format!(
            "{} {} {}",
            s.reference_argmax,
            if s.reference_argmax == s.candidate_argmax { "=" } else { "→" },
            s.candidate_argmax
        );
        t.row([
            i.to_string().into(),
            format!("[{}:{})", s.start, s.end).into(),
            phase.to_string().into(),
            Cell::from(format!("{failed}/{}", all.len())).tone(tone),
            cos(Some(s.cosine)).into(),
            if s.sqnr_db.is_finite() { format!("{:.1}", s.sqnr_db) } else { "inf".into() }.into(),
            format!("{:.6}", s.scale).into(),
            local.into(),
            pct(s.argmax_agreement).into(),
        ]);
    }
    Some(t)
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
