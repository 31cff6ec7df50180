//! The terminal table: the located drift in one sentence, then one row per tap (its worst
//! phase), then one row per phase. Colour only on a terminal.

use super::{compact, worst_per_tap, Report};
use crate::compare::{RowStatus, TapRow};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Color, ContentArrangement, Table};
use std::fmt::Write;

pub fn cos(v: Option<f64>) -> String {
    v.map_or("-".into(), |c| format!("{c:.6}"))
}

pub fn sqnr(v: Option<f64>) -> String {
    v.map_or("-".into(), |s| if s.is_infinite() { "inf".into() } else { format!("{s:.1}") })
}

pub fn sci(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| if x == 0.0 { "0".into() } else { format!("{x:.2e}") })
}

/// The verdict cell text of a row.
pub fn verdict(row: &TapRow) -> String {
    match row.status {
        RowStatus::OnlyInReference => "unchecked: reference only".into(),
        RowStatus::OnlyInCandidate => "unchecked: candidate only".into(),
        RowStatus::ShapeMismatch => format!("FAIL shape {:?}", row.cand_shape),
        RowStatus::Compared if row.failures.is_empty() => "ok".into(),
        RowStatus::Compared => {
            let names: Vec<&str> = row.failures.iter().map(|f| f.metric.as_str()).collect();
            format!("FAIL {}", names.join(", "))
        }
    }
}

fn table(color: bool) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Disabled);
    if color {
        t.enforce_styling();
    } else {
        t.force_no_tty();
    }
    t
}

fn verdict_cell(row: &TapRow, color: bool) -> Cell {
    let cell = Cell::new(verdict(row));
    match (color, row.checked(), row.failed()) {
        (false, _, _) => cell,
        (true, false, _) => cell.fg(Color::DarkGrey),
        (true, true, true) => cell.fg(Color::Red),
        (true, true, false) => cell.fg(Color::Green),
    }
}

pub fn header(report: &Report, out: &mut String) {
    let p = &report.probe;
    if !p.name.is_empty() {
        let finding = p.finding.map(|f| format!(" (finding {f})")).unwrap_or_default();
        let _ = writeln!(out, "probe: {} — {}{finding}", p.name, p.question);
    }
    if let Some(c) = &report.checkpoint {
        let _ = writeln!(
            out,
            "checkpoint: {} ({}, {} layers, hidden {}, heads {}/{}, vocab {}) {}",
            c.source, c.arch, c.layers, c.hidden, c.heads, c.kv_heads, c.vocab, c.hash
        );
        for (k, v) in &c.defaults_applied {
            let _ = writeln!(out, "  note: config.json has no `{k}`; transformers' default {v} applied");
        }
    }
    if let Some(i) = &report.inputs {
        let chunk = i.chunk.map(|c| format!(", prefill chunks of {c}")).unwrap_or_default();
        let phases = phase_span(&i.phases);
        let _ =
            writeln!(out, "inputs: {} prompt tokens ({}){chunk}; phases {phases}", i.prompt_tokens, i.bos);
    }
    for b in report.backends.iter().filter(|b| b.status != "ok") {
        let _ = writeln!(out, "backend {} ({}): {}", b.name, b.kind, b.status);
    }
    for s in &report.incomplete {
        let _ = writeln!(out, "incomplete: {s}");
    }
}

/// `prefill, decode.0..7` rather than every phase.
pub fn phase_span(phases: &[crate::tap::Phase]) -> String {
    use crate::tap::Phase;
    let prefill: Vec<String> = phases.iter().filter(|p| !p.is_decode()).map(|p| p.to_string()).collect();
    let decode: Vec<usize> =
        phases.iter().filter_map(|p| if let Phase::Decode(k) = p { Some(*k) } else { None }).collect();
    let mut parts = prefill;
    match decode.as_slice() {
        [] => {}
        [k] => parts.push(format!("decode.{k}")),
        [a, .., b] => parts.push(format!("decode.{a}..{b}")),
    }
    parts.join(", ")
}

pub fn render(report: &Report, color: bool) -> String {
    let mut out = String::new();
    header(report, &mut out);
    for (i, pair) in report.cumulative() {
        let _ = writeln!(out, "\n{}", report.headline(i));
        let local = report.local_of(&pair.candidate);
        if let Some((_, layers)) = report.blame.iter().find(|(c, _)| *c == pair.candidate) {
            let _ = writeln!(out, "{}", blame_sentence(layers));
        }
        let mut t = table(color);
        t.set_header(super::tap_header(local.is_some()));
        let all = worst_per_tap(pair);
        let shown = compact(&all);
        for &(row, failed, total) in &shown {
            let mut cells: Vec<Cell> =
                super::tap_cells(row, failed, total, local).into_iter().map(Cell::new).collect();
            cells.pop();
            cells.push(verdict_cell(row, color));
            t.add_row(cells);
        }
        let _ = writeln!(out, "{t}");
        if let Some((_, rows)) = report.lens.iter().find(|(c, _)| *c == pair.candidate) {
            let _ = writeln!(out, "{}", lens_sentence(rows));
        }
        if shown.len() < all.len() {
            let _ = writeln!(
                out,
                "({} more taps not shown: every tap of the first drifting layer and each layer's output are; \
                 --report markdown=PATH or json=PATH has them all)",
                all.len() - shown.len()
            );
        }
        let _ = writeln!(out, "{}", phase_table(pair, color));
    }
    if let Some(e) = &report.explain {
        let _ = writeln!(out, "\n{}", explain_table(e, color));
    }
    out
}

/// Where the logit lens's top-1 token first parts between the two sides, per phase.
pub fn lens_sentence(rows: &[crate::compare::lens::LensRow]) -> String {
    let flips = crate::compare::lens::first_lens_flip(rows);
    if flips.is_empty() {
        return "logit lens (last position of each phase): every layer's top-1 token agrees".into();
    }
    let shown: Vec<String> = flips.iter().take(4).map(|(p, l)| format!("{p} at layer {l}")).collect();
    let more = if flips.len() > 4 { format!(" (+{} more phases)", flips.len() - 4) } else { String::new() };
    format!(
        "logit lens (last position of each phase): the top-1 token first differs {}{more}",
        shown.join(", ")
    )
}

pub fn blame_sentence(layers: &[usize]) -> String {
    match layers {
        [] => "local view (each layer fed the reference's input): no layer fails on its own — the drift is inherited or enters outside the blocks".into(),
        [l] => format!("local view (each layer fed the reference's input): only layer {l} fails on its own"),
        ls => format!(
            "local view (each layer fed the reference's input): layers {} fail on their own",
            ls.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn phase_table(pair: &crate::compare::PairComparison, color: bool) -> Table {
    let mut t = table(color);
    t.set_header(super::PHASE_HEADER.to_vec());
    for (failed, cells) in super::phase_rows(pair) {
        let mut cells: Vec<Cell> = cells.into_iter().map(Cell::new).collect();
        if color && failed {
            cells[1] = cells[1].clone().fg(Color::Red);
        }
        t.add_row(cells);
    }
    t
}

/// Ranked faults shown on a terminal (the rest are in Markdown and JSON).
const EXPLAIN_ROWS: usize = 10;

pub fn explain_table(e: &super::ExplainReport, color: bool) -> String {
    let mut t = table(color);
    t.set_header(super::EXPLAIN_HEADER.to_vec());
    let fmt_row = |r: &super::ExplainRow, rank: String| super::explain_cells(r, rank);
    for r in e.rows.iter().take(EXPLAIN_ROWS) {
        t.add_row(fmt_row(r, r.rank.to_string()));
    }
    if let Some(b) = &e.baseline {
        t.add_row(fmt_row(b, "base".into()));
    }
    let more = match e.rows.len().saturating_sub(EXPLAIN_ROWS) {
        0 => String::new(),
        n => format!("({n} more ranked faults in the Markdown and JSON reports)\n"),
    };
    format!(
        "explain: which fault reproduces {} ({})\n{t}\n{more}{}",
        e.observed,
        taps_summary(&e.taps),
        e.conclusion
    )
}

/// "logits" or "63 taps: embed … logits".
pub fn taps_summary(taps: &[String]) -> String {
    match taps {
        [] => "no taps".into(),
        [t] => format!("matched on {t}"),
        ts if ts.len() <= 4 => format!("matched on {}", ts.join(", ")),
        ts => format!("matched on {} taps, {} … {}", ts.len(), ts[0], ts[ts.len() - 1]),
    }
}

/// A share as a percentage, or "-" when undefined (no logits to compare).
pub fn pct(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{:.0}%", v * 100.0)
    }
}
