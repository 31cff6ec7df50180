//! Markdown, ready to paste into a findings page: the question, the exact command that
//! reproduces the result, versions, checkpoint hash, the tables and the located drift.

use super::terminal::{blame_sentence, cos, pct, phase_span, sci, sqnr, taps_summary, verdict};
use super::{compact, relative_to, worst_per_tap, ExplainReport, Report};
use crate::compare::{fmt_num, PairComparison, TapRow};
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
    let _ = writeln!(o, "\n| phase | first failing tap | logits cosine | argmax | KL mean | flips |");
    let _ = writeln!(o, "|---|---|---:|---:|---:|---:|");
    let mut phases: Vec<crate::tap::Phase> = pair.rows.iter().map(|r| r.phase).collect();
    phases.dedup();
    for phase in phases {
        let first = pair.rows.iter().find(|r| r.phase == phase && r.failed());
        let logits = pair.row(phase, "logits");
        let l = logits.and_then(|r| r.logits.as_ref());
        let _ = writeln!(
            o,
            "| {phase} | {} | {} | {} | {} | {} |",
            first.map_or("-".to_string(), |r| format!("`{}`", r.tap)),
            cos(logits.and_then(TapRow::cosine)),
            l.map_or("-".into(), |l| format!("{:.0}%", l.argmax_agreement * 100.0)),
            l.map_or("-".into(), |l| fmt_num(l.kl_mean)),
            l.map_or("-".into(), |l| l.flips.len().to_string())
        );
    }
}

fn tap_table(rows: &[(&TapRow, usize, usize)], local: Option<&PairComparison>, o: &mut String) {
    let local_head = if local.is_some() { " local cosine |" } else { "" };
    let local_rule = if local.is_some() { "---:|" } else { "" };
    let _ =
        writeln!(o, "| tap | worst phase | fails | cosine | SQNR dB | max \\|Δ\\| |{local_head} verdict |");
    let _ = writeln!(o, "|---|---|---:|---:|---:|---:|{local_rule}---|");
    for &(row, failed, total) in rows {
        let m = row.metrics.as_ref();
        let local_cell = local
            .map(|l| format!(" {} |", cos(l.row(row.phase, &row.tap).and_then(TapRow::cosine))))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "| `{}` | {} | {failed}/{total} | {} | {} | {} |{local_cell} {} |",
            row.tap,
            row.phase,
            cos(row.cosine()),
            sqnr(m.map(|m| m.sqnr_db)),
            sci(m.map(|m| m.max_abs)),
            esc(&verdict(row))
        );
    }
}

fn explain_section(e: &ExplainReport, o: &mut String) {
    let _ = writeln!(o, "\n## Explain: which fault reproduces `{}`\n", e.observed);
    let _ = writeln!(
        o,
        "Ranked by mean cosine between each emulation and the observation, {}.\n",
        taps_summary(&e.taps)
    );
    let _ = writeln!(o, "| rank | fault | finding | match cosine | argmax agree | KL mean | note |");
    let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|---|");
    let row = |r: &super::ExplainRow, rank: String| {
        let mut note = r.note.clone().unwrap_or_default();
        if !r.ties.is_empty() {
            note += &format!("{}ties: {}", if note.is_empty() { "" } else { "; " }, r.ties.join(", "));
        }
        format!(
            "| {rank} | `{}` | {} | {:.6} | {} | {} | {} |",
            r.fault,
            r.finding.map_or("-".into(), |f| f.to_string()),
            r.match_cosine,
            pct(r.argmax_agreement),
            if r.kl_mean.is_nan() { "-".into() } else { fmt_num(r.kl_mean) },
            esc(&note)
        )
    };
    for r in &e.rows {
        let _ = writeln!(o, "{}", row(r, r.rank.to_string()));
    }
    if let Some(b) = &e.baseline {
        let _ = writeln!(o, "{}", row(b, "baseline".into()));
    }
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
