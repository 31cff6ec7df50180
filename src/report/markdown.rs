//! Markdown, ready to paste into a findings page: the question, the exact command that
//! reproduces the result, versions, checkpoint hash, the tables and the located drift.

use super::doc::{relative_to, Cell, Doc, Table, Text};
use super::format::{blame_sentence, lens_sentence, phase_span, taps_summary};
use super::run::{compact, worst_per_tap, Report};
use super::tables;
use crate::compare::PairComparison;
use crate::explain::ExplainReport;
use std::path::Path;

/// `path` is where the Markdown goes, so plot links are relative to it.
pub fn render(report: &Report, path: Option<&Path>) -> String {
    doc(report, path).markdown()
}

pub fn doc(report: &Report, path: Option<&Path>) -> Doc {
    let mut d = Doc::new();
    let p = &report.probe;
    let title = if p.name.is_empty() { "comparison" } else { p.name.as_str() };
    d.heading(1, format!("hefprobe: {title}"));
    if !p.question.is_empty() {
        let finding = p.finding.map(|f| format!(" (finding {f})")).unwrap_or_default();
        d.line(Text::strong(format!("Question{finding}.")).and(format!(" {}", p.question))).blank();
    }
    for (i, _) in report.cumulative() {
        d.line(Text::strong("Result.").and(format!(" {}", report.headline(i)))).blank();
    }
    if let Some(e) = &report.explain {
        d.line(Text::strong("Explanation.").and(format!(" {}", e.conclusion))).blank();
    }
    d.table(facts(report));
    for (i, pair) in report.cumulative() {
        pair_section(report, i, pair, &mut d);
    }
    if let Some(e) = &report.explain {
        explain_section(e, &mut d);
    }
    for (cand, rows) in report.lens.iter().filter(|(_, rows)| !rows.is_empty()) {
        d.blank().heading(2, format!("Logit lens: reference vs {cand}"));
        d.line(format!("{}.", lens_sentence(rows)));
    }
    if !report.svg.is_empty() {
        d.blank().heading(2, "Plots");
        for s in &report.svg {
            d.figure(relative_to(Path::new(s), path)).blank();
        }
    }
    d
}

/// What produced the report: command, versions, checkpoint, inputs, backends.
fn facts(report: &Report) -> Table {
    let mut t = Table::headless();
    let p = &report.probe;
    t.row([Cell::from("command"), Text::code(&p.command).into()]);
    let v = &report.tool;
    t.row([
        "hefprobe".to_string(),
        format!("{} (candle {}; reference verified against {})", v.hefprobe, v.candle, v.goldens),
    ]);
    if let Some(c) = &report.checkpoint {
        let about = format!(
            "{} — {}, {} layers, hidden {}, heads {}/{}, head_dim {}, vocab {}, weights {} — ",
            c.source, c.arch, c.layers, c.hidden, c.heads, c.kv_heads, c.head_dim, c.vocab, c.stored_dtype
        );
        t.row([Cell::from("checkpoint"), Text::from(about).and(Text::code(&c.hash)).into()]);
        for (k, v) in &c.defaults_applied {
            let text = Text::code(k).and(format!(" missing from config.json: transformers' {v} applied"));
            t.row([Cell::from("config default"), text.into()]);
        }
    }
    for k in &report.config.unknown_keys {
        let text = Text::code(&k.key).and(" = ").and(Text::code(&k.value)).and(format!(
            " — not read by hefprobe, accepted as not changing the forward pass ({}); --strict-config refuses it",
            k.note
        ));
        t.row([Cell::from("config unknown key"), text.into()]);
    }
    if let Some(i) = &report.inputs {
        let chunk = i.chunk.map(|c| format!(", prefill chunks of {c} (remainder first)")).unwrap_or_default();
        let phases = phase_span(&i.phases);
        t.row([
            "inputs".to_string(),
            format!("{} prompt tokens, {}{chunk}; phases {phases}", i.prompt_tokens, i.bos),
        ]);
    }
    for b in &report.backends {
        let name = Text::from("backend ").and(Text::code(&b.name));
        t.row([Cell::from(name), format!("{} — {}", b.kind, b.status).into()]);
    }
    for s in &report.incomplete {
        t.row(["incomplete", s.as_str()]);
    }
    for s in &report.notes {
        t.row(["note", s.as_str()]);
    }
    t
}

fn pair_section(report: &Report, i: usize, pair: &PairComparison, d: &mut Doc) {
    d.blank().heading(2, format!("{} vs {}", pair.reference, pair.candidate));
    if let Some(t) = pair.tokens.as_ref().filter(|_| pair.rows.is_empty()) {
        d.line(format!("{}.", super::tokens::sentence(t))).blank();
        d.append(super::tokens::section(t, true));
        return;
    }
    let located = &report.located[i];
    if located.is_empty() {
        d.line("No drift beyond thresholds.").blank();
    }
    for l in located {
        d.fact(&l.sentence);
    }
    if let Some((_, layers)) = report.blame.iter().find(|(c, _)| *c == pair.candidate) {
        d.fact(blame_sentence(layers));
    }
    if let Some(s) = report.expected_sentence(&pair.candidate) {
        d.fact(s);
    }
    let beside = report.beside(&pair.candidate);
    let all = worst_per_tap(pair);
    let shown = compact(&all);
    d.blank().table(tables::taps(&shown, &beside, pair.on_device));
    if shown.len() < all.len() {
        let mut every = Doc::new();
        every.table(tables::taps(&all, &beside, pair.on_device));
        d.blank().details(format!("all {} taps", all.len()), every);
    }
    d.blank().table(tables::phases(pair));
    if let Some(t) = tables::shards(pair) {
        d.blank().line("lm_head shards (the logits at the HEF's own column boundaries):");
        d.blank().table(t);
    }
    if let Some(t) = &pair.tokens {
        d.blank().line(format!("Greedy on its own: {}.", super::tokens::sentence(t))).blank();
        d.append(super::tokens::section(t, true));
    }
}

fn explain_section(e: &ExplainReport, d: &mut Doc) {
    d.blank().heading(2, Text::from("Explain: which fault reproduces ").and(Text::code(&e.observed)));
    if e.by_tokens {
        d.line(
            "Ranked by the tokens each fault predicts: each emulated teacher-forced on the prompt and the served \
             continuation, by how many served tokens its top-1 reproduces before it parts, then by the served \
             tokens' mean negative log-probability (NLL).",
        )
    } else {
        d.line(format!(
            "Ranked by mean cosine between each emulation and the observation, {}.",
            taps_summary(&e.taps)
        ))
    }
    .blank();
    d.table(tables::explain(&e.rows, usize::MAX, e.baseline.as_ref(), ("baseline", e.by_tokens)));
    if let Some(s) = &e.search {
        d.blank().line(format!("{s}."));
    }
    if e.spent.candidates > 0 {
        d.blank().line(format!("Emulations: {}.", e.spent.summary()));
    }
    d.blank().line(&e.conclusion);
    if !e.attribution.is_empty() {
        d.blank().table(tables::attribution(&e.attribution));
    }
}
