//! The terminal report: the located drift in one sentence, then one row per tap (its worst
//! phase), then one row per phase. Colour only on a terminal.

use super::doc::Doc;
use super::format::{blame_sentence, lens_sentence, phase_span, taps_summary};
use super::run::{compact, worst_per_tap, Report};
use super::tables;
use crate::explain::ExplainReport;

/// Ranked faults shown on a terminal (the rest are in Markdown and JSON).
const EXPLAIN_ROWS: usize = 10;

pub fn render(report: &Report, color: bool) -> String {
    doc(report).terminal(color)
}

pub fn doc(report: &Report) -> Doc {
    let mut d = header(report);
    for (i, pair) in report.cumulative() {
        d.blank().line(report.headline(i));
        if let Some(t) = pair.tokens.as_ref().filter(|_| pair.rows.is_empty()) {
            d.append(super::tokens::section(t, false));
            continue;
        }
        if let Some((_, layers)) = report.blame.iter().find(|(c, _)| *c == pair.candidate) {
            d.line(blame_sentence(layers));
        }
        if let Some(s) = report.expected_sentence(&pair.candidate) {
            d.line(s);
        }
        let all = worst_per_tap(pair);
        let shown = compact(&all);
        d.table(tables::taps(&shown, &report.beside(&pair.candidate), pair.on_device));
        if let Some((_, rows)) = report.lens.iter().find(|(c, _)| *c == pair.candidate) {
            d.line(lens_sentence(rows));
        }
        if shown.len() < all.len() {
            d.note(format!(
                "{} more taps not shown: every tap of the first drifting layer and each layer's output are; \
                 --report markdown=PATH or json=PATH has them all",
                all.len() - shown.len()
            ));
        }
        d.table(tables::phases(pair));
        if let Some(t) = tables::shards(pair) {
            d.line("lm_head shards (the logits at the HEF's own column boundaries):");
            d.table(t);
        }
        if let Some(t) = &pair.tokens {
            d.line(format!("greedy on its own: {}", super::tokens::sentence(t)));
            d.append(super::tokens::section(t, false));
        }
    }
    if let Some(e) = &report.explain {
        d.blank().append(explain(e));
    }
    d
}

fn header(report: &Report) -> Doc {
    let mut d = Doc::new();
    let p = &report.probe;
    if !p.name.is_empty() {
        let finding = p.finding.map(|f| format!(" (finding {f})")).unwrap_or_default();
        d.line(format!("probe: {} — {}{finding}", p.name, p.question));
    }
    if let Some(c) = &report.checkpoint {
        d.line(format!(
            "checkpoint: {} ({}, {} layers, hidden {}, heads {}/{}, vocab {}) {}",
            c.source, c.arch, c.layers, c.hidden, c.heads, c.kv_heads, c.vocab, c.hash
        ));
        for (k, v) in &c.defaults_applied {
            d.line(format!("  note: config.json has no `{k}`; transformers' default {v} applied"));
        }
    }
    if let Some(line) = super::format::unknown_keys_line(&report.config.unknown_keys) {
        d.line(format!("  {line}"));
    }
    if let Some(i) = &report.inputs {
        let chunk = i.chunk.map(|c| format!(", prefill chunks of {c}")).unwrap_or_default();
        let phases = phase_span(&i.phases);
        d.line(format!("inputs: {} prompt tokens ({}){chunk}; phases {phases}", i.prompt_tokens, i.bos));
    }
    for b in report.backends.iter().filter(|b| !b.status.is_ok()) {
        d.line(format!("backend {} ({}): {}", b.name, b.kind, b.status));
    }
    for s in &report.incomplete {
        d.line(format!("incomplete: {s}"));
    }
    for s in &report.notes {
        d.line(format!("note: {s}"));
    }
    d
}

fn explain(e: &ExplainReport) -> Doc {
    let mut d = Doc::new();
    if e.by_tokens {
        d.line(format!("explain: which fault predicts the tokens `{}` served", e.observed));
    } else {
        d.line(format!("explain: which fault reproduces {} ({})", e.observed, taps_summary(&e.taps)));
    }
    d.table(tables::explain(&e.rows, EXPLAIN_ROWS, e.baseline.as_ref(), ("base", e.by_tokens)));
    if let n @ 1.. = e.rows.len().saturating_sub(EXPLAIN_ROWS) {
        d.note(format!("{n} more ranked faults in the Markdown and JSON reports"));
    }
    if let Some(s) = &e.search {
        d.note(s);
    }
    if e.spent.candidates > 0 {
        d.note(e.spent.summary());
    }
    d.line(&e.conclusion);
    d
}
