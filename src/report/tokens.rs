//! A served model's token figures ([`TokenComparison`]) in words and tables, for the terminal
//! and Markdown alike (JSON carries the comparison as it is).

use super::doc::{Cell, Doc, Table, Text, Tone};
use super::format::{failure, num, pct};
use crate::compare::tokens::{Divergence, TokenComparison};

/// Misses of one-token continuations shown on a terminal (all of them in Markdown).
const MISSES_SHOWN: usize = 5;

/// A token's text quoted, control characters escaped (a served text cannot drive the terminal).
fn quoted(text: &str) -> String {
    let cut: String = text.chars().take(40).collect();
    format!("{cut:?}")
}

/// A token's text as code, with its id.
fn token(text: &str, id: Option<u32>) -> Text {
    match id {
        Some(id) => Text::code(quoted(text)).and(format!(" ({id})")),
        None => Text::from(text.to_string()),
    }
}

/// A generated text as one line: control characters and backticks escaped, at most `max`
/// characters.
fn visible(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| if c.is_control() || c == '`' { c.escape_default().to_string() } else { c.to_string() })
        .collect();
    if text.chars().nth(max).is_some() {
        out += "…";
    }
    out
}

/// The verdict on a served token the reference did not choose.
fn verdict(d: &Divergence) -> &'static str {
    if d.near_tie {
        "a near-tie, benign"
    } else {
        "a confident token lost: drift"
    }
}

/// The headline: how long the continuations agree, where they part and what the reference
/// thought of the served token there, and the failed bounds.
pub fn sentence(t: &TokenComparison) -> String {
    let mut s = match &t.divergence {
        None => format!("{} of {} compared tokens agree ({}); {}", t.agreement, t.compared, pct(t.agreement_share), t.ended),
        Some(d) => format!(
            "greedy continuations agree for {} token{}, then part at token {}: the reference's {} (top-1 margin {}) \
             where the server gave {} (rank {}, log-prob {}, {} below the top-1): {}",
            t.agreement,
            if t.agreement == 1 { "" } else { "s" },
            d.position,
            quoted(&d.reference_text),
            num(d.margin),
            if d.served_token.is_some() { quoted(&d.served_text) } else { "the end of its answer".into() },
            d.rank,
            num(d.logprob),
            num(d.gap),
            verdict(d)
        ),
    };
    if let Some(f) = &t.forced {
        s += &format!("; one-token continuations {}/{}", f.agreed, f.positions);
    }
    if let Some(k) = &t.kld {
        s += &format!("; KLD {}, same top-1 {}", num(k.mean), pct(k.same_top1));
    }
    if !t.failures.is_empty() {
        let failed: Vec<String> = t.failures.iter().map(failure).collect();
        s += &format!("; FAIL {}", failed.join(", "));
    }
    s
}

/// The figures, one per row.
pub fn figures(t: &TokenComparison) -> Table {
    let mut table = Table::new(["token figure", "value"]).align("ll");
    let mut row = |name: &str, value: Cell| table.row([Cell::from(name), value]);
    row(
        "greedy agreement",
        format!(
            "{} of {} compared tokens ({}); {}",
            t.agreement,
            t.compared,
            pct(t.agreement_share),
            t.ended
        )
        .into(),
    );
    if let Some(d) = &t.divergence {
        let tone = if d.near_tie { Tone::Good } else { Tone::Bad };
        let text = Text::from(format!("token {}: reference ", d.position))
            .and(token(&d.reference_text, Some(d.reference_token)))
            .and(format!(" (top-1 margin {}), served ", num(d.margin)))
            .and(token(&d.served_text, d.served_token))
            .and(format!(" ({})", d.how));
        row("first divergence", text.into());
        let under = format!(
            "rank {}, log-prob {}, {} below the top-1: {}",
            d.rank,
            num(d.logprob),
            num(d.gap),
            verdict(d)
        );
        row("served token under the reference", Cell::from(under).tone(tone));
    }
    if let Some(f) = &t.forced {
        let worst = f.misses.iter().map(|m| m.gap).reduce(f64::max);
        let worst = worst.map_or(String::new(), |g| format!("; the worst miss {} below the top-1", num(g)));
        let skipped = if f.skipped > 0 { format!(", {} not judged", f.skipped) } else { String::new() };
        let text = format!("{} of {} agree ({}){skipped}{worst}", f.agreed, f.positions, pct(f.share));
        row("one-token continuations (prefill only)", text.into());
    }
    if let Some(k) = &t.kld {
        let text = format!(
            "mean {}, max {} over {} positions (the server's top {} and one bucket for the rest)",
            num(k.mean),
            num(k.max),
            k.positions,
            k.top_n
        );
        row("KLD (reference ‖ server)", text.into());
        row("same top-1", pct(k.same_top1).into());
    }
    row(
        "longest repeated run",
        format!("served {}, reference {}", t.longest_run, t.reference_longest_run).into(),
    );
    for f in &t.failures {
        row("bound failed", Cell::from(failure(f)).tone(Tone::Bad));
    }
    table
}

/// The misses of one-token continuations, at most `limit`.
pub fn misses(t: &TokenComparison, limit: usize) -> Option<Table> {
    let misses = &t.forced.as_ref()?.misses;
    if misses.is_empty() {
        return None;
    }
    let mut table =
        Table::new(["position", "reference", "served", "margin", "rank", "log-prob", "gap", "verdict"])
            .align("rllrrrrl");
    for d in misses.iter().take(limit) {
        let tone = if d.near_tie { Tone::Good } else { Tone::Bad };
        table.row([
            Cell::from(d.position.to_string()),
            token(&d.reference_text, Some(d.reference_token)).into(),
            token(&d.served_text, d.served_token).into(),
            num(d.margin).into(),
            d.rank.to_string().into(),
            num(d.logprob).into(),
            num(d.gap).into(),
            Cell::from(verdict(d)).tone(tone),
        ]);
    }
    Some(table)
}

/// The section of one served model: its figures, its misses (the first few unless `all`),
/// its notes; Markdown adds the two texts.
pub fn section(t: &TokenComparison, all: bool) -> Doc {
    let mut d = Doc::new();
    d.line(format!("served by {}", t.server)).blank();
    d.table(figures(t));
    let limit = if all { usize::MAX } else { MISSES_SHOWN };
    if let Some(m) = misses(t, limit) {
        d.blank().line("one-token continuations the server answered otherwise:").blank().table(m);
        let n = t.forced.as_ref().map_or(0, |f| f.misses.len());
        if n > limit {
            d.note(format!("{} more in the Markdown and JSON reports", n - limit));
        }
    }
    for n in &t.notes {
        d.note(n);
    }
    if all {
        d.blank().labelled("served text", Text::code(visible(&t.served_text, 2000)));
        d.labelled("reference text", Text::code(visible(&t.reference_text, 2000)));
    }
    d
}
