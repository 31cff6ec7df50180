//! Markdown, ready to paste into a findings page: the question, the exact command that
//! reproduces the result, versions, checkpoint hash, the tables and the located drift.

use super::terminal::{blame_sentence, phase_span, taps_summary};
use super::{compact, relative_to, worst_per_tap, ExplainReport, Report};
use crate::compare::{PairComparison, TapRow};
use std::fmt::Write;
use std::path::Path;

fn esc(s: &str) -> String {
    s.replace('|', "\\|")
}

pub fn render(report: &Report, path: Option<&Path>) -> String {
    let mut o = String::new();
    let p = &report.probe;
    let title = if p.name.is_empty() { "comparison".to_string() } else { p.name.clone() };
    let _ = writeln!(o, "# hefprobe: {title}\n");
    if !p.question.is_empty() {
        let finding = p.finding.map(|f| format!(" (finding {f})")).unwrap_or_default();
        let _ = writeln!(o, "**Question{finding}.** {}\n", p.question);
    }
    for (i, _) in report.cumulative() {
        let _ = writeln!(o, "**Result.** {}\n", esc(&report.headline(i)));
    }
    if let Some(e) = &report.explain {
        let _ = writeln!(o, "**Explanation.** {}\n", esc(&e.conclusion));
    }
    let _ = writeln!(o, "| | |\n|---|---|");
    let _ = writeln!(o, "| command | `{}` |", p.command);
    let t = &report.tool;
    let _ = writeln!(
        o,
        "| hefprobe | {} (candle {}; reference verified against {}) |",
        t.hefprobe, t.candle, t.goldens
    );
    if let Some(c) = &report.checkpoint {
        let _ = writeln!(
            o,
            "| checkpoint | {} — {}, {} layers, hidden {}, heads {}/{}, head_dim {}, vocab {}, weights {} — `{}` |",
            esc(&c.source),
            c.arch,
            c.layers,
            c.hidden,
            c.heads,
            c.kv_heads,
            c.head_dim,
            c.vocab,
            c.stored_dtype,
            c.hash
        );
        for (k, v) in &c.defaults_applied {
            let _ =
                writeln!(o, "| config default | `{k}` missing from config.json: transformers' {v} applied |");
        }
    }
    if let Some(i) = &report.inputs {
        let chunk = i.chunk.map(|c| format!(", prefill chunks of {c} (remainder first)")).unwrap_or_default();
        let _ = writeln!(
            o,
            "| inputs | {} prompt tokens, {}{chunk}; phases {} |",
            i.prompt_tokens,
            i.bos,
            phase_span(&i.phases)
        );
    }
    for b in &report.backends {
        let _ = writeln!(o, "| backend `{}` | {} — {} |", b.name, b.kind, esc(&b.status));
    }
    for s in &report.incomplete {
        let _ = writeln!(o, "| incomplete | {} |", esc(s));
    }
    for (i, pair) in report.cumulative() {
        pair_section(report, i, pair, &mut o);
    }
    if let Some(e) = &report.explain {
        explain_section(e, &mut o);
    }
    lens_section(report, &mut o);
    if !report.svg.is_empty() {
        let _ = writeln!(o, "\n## Plots\n");
        for s in &report.svg {
            let rel = relative_to(Path::new(s), path);
            let _ = writeln!(o, "![{rel}]({rel})\n");
        }
    }
    o
}

fn pair_section(report: &Report, i: usize, pair: &PairComparison, o: &mut String) {
    let _ = writeln!(o, "\n## {} vs {}\n", pair.reference, pair.candidate);
    let located = &report.located[i];
    if located.is_empty() {
        let _ = writeln!(o, "No drift beyond thresholds.\n");
    }
    for l in located {
        let _ = writeln!(o, "- {}", esc(&l.sentence));
    }
    if let Some((_, layers)) = report.blame.iter().find(|(c, _)| *c == pair.candidate) {
        let _ = writeln!(o, "- {}", blame_sentence(layers));
    }
    let local = report.local_of(&pair.candidate);
    let all = worst_per_tap(pair);
    let shown = compact(&all);
    let _ = writeln!(o);
    tap_table(&shown, local, o);
    if shown.len() < all.len() {
        let _ = writeln!(o, "\n<details><summary>all {} taps</summary>\n", all.len());
        tap_table(&all, local, o);
        let _ = writeln!(o, "\n</details>");
    }
    let _ = writeln!(o);
    table(&super::PHASE_HEADER, "llrrrr", super::phase_rows(pair).into_iter().map(|(_, c)| code(c, 1)), o);
}

/// A Markdown table; cells are escaped; `align` has one `l` or `r` per column.
fn table(header: &[&str], align: &str, rows: impl Iterator<Item = Vec<String>>, o: &mut String) {
    let _ = writeln!(o, "| {} |", header.iter().map(|h| esc(h)).collect::<Vec<_>>().join(" | "));
    let rule: String = align.chars().map(|a| if a == 'r' { "---:|" } else { "---|" }).collect();
    let _ = writeln!(o, "|{rule}");
    for r in rows {
        let _ = writeln!(o, "| {} |", r.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | "));
    }
}

/// Cell `i` as inline code (tap and fault names), unless it is "-".
fn code(mut cells: Vec<String>, i: usize) -> Vec<String> {
    if cells[i] != "-" {
        cells[i] = format!("`{}`", cells[i]);
    }
    cells
}

fn tap_table(rows: &[(&TapRow, usize, usize)], local: Option<&PairComparison>, o: &mut String) {
    let cells = rows.iter().map(|&(row, failed, total)| code(super::tap_cells(row, failed, total, local), 0));
    let align = if local.is_some() { "llrrrrrl" } else { "llrrrrl" };
    table(&super::tap_header(local.is_some()), align, cells, o);
}

fn explain_section(e: &ExplainReport, o: &mut String) {
    let _ = writeln!(o, "\n## Explain: which fault reproduces `{}`\n", e.observed);
    let _ = writeln!(
        o,
        "Ranked by mean cosine between each emulation and the observation, {}.\n",
        taps_summary(&e.taps)
    );
    let rows = e
        .rows
        .iter()
        .map(|r| super::explain_cells(r, r.rank.to_string()))
        .chain(e.baseline.iter().map(|b| super::explain_cells(b, "baseline".into())))
        .map(|c| code(c, 1));
    table(&super::EXPLAIN_HEADER, "rlrrrrl", rows, o);
    let _ = writeln!(o, "\n{}", esc(&e.conclusion));
    if !e.attribution.is_empty() {
        let _ = writeln!(o, "\n| phase | tap | fp32 vs observed | fp32 vs quant emulation | emulation vs observed | explained |");
        let _ = writeln!(o, "|---|---|---:|---:|---:|---:|");
        for a in &e.attribution {
            let _ = writeln!(
                o,
                "| {} | `{}` | {:.6} | {:.6} | {:.6} | {:.0}% |",
                a.phase,
                a.tap,
                a.reference_vs_observed,
                a.reference_vs_quant,
                a.quant_vs_observed,
                a.explained * 100.0
            );
        }
    }
}

fn lens_section(report: &Report, o: &mut String) {
    for (cand, rows) in &report.lens {
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(o, "\n## Logit lens: reference vs {cand}\n");
        let _ = writeln!(o, "{}.", super::terminal::lens_sentence(rows));
    }
}
