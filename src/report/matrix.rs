//! The fault-localization matrix (`hefprobe faults --matrix`) as a document.

use super::doc::{Cell, Doc, Table, Text};
use super::document::{Document, Format};
use super::format::cos;
use crate::explain::matrix::MatrixRow;

/// What `hefprobe faults` writes: the catalog, or the matrix and whether a fault was not located
/// or not ranked first (a failed check).
pub struct Faults {
    pub doc: Doc,
    pub failed: bool,
}

impl Document for Faults {
    const COMMAND: &'static str = "faults";
    const FORMATS: &'static [Format] = &[Format::Terminal, Format::Markdown, Format::Json];

    fn doc(&self, _to: Option<&std::path::Path>) -> Doc {
        self.doc.clone()
    }
}

/// The matrix as a document: how it was run, one row per fault, how many passed. `setup` is
/// `explain::matrix::{synth_setup, setup_of}`; `candidates` the size of the catalog grid.
pub fn doc(rows: &[MatrixRow], command: &str, setup: &str, candidates: usize) -> Doc {
    let mut d = Doc::new();
    d.heading(1, "Fault localization matrix");
    d.line(format!(
        "Each fault of the catalog is injected into {setup}. `located` is where \
         `run` puts the first drift (default thresholds); `rank` is the injected fault's place in \
         `explain`'s ranking over the whole catalog grid ({} candidates), by match cosine with the \
         observed capture.",
        candidates
    ))
    .blank();
    d.produced_by(command);
    let mut t = Table::new([
        "fault",
        "finding",
        "expected",
        "located",
        "rank",
        "match cosine",
        "runner-up (cosine)",
        "ties",
        "ok",
    ])
    .align("lrllrrlll");
    for r in rows {
        t.row([
            Cell::from(Text::code(&r.fault)),
            r.finding.map_or("-".into(), |f| f.to_string()).into(),
            Text::code(&r.expected).into(),
            r.located.as_deref().map_or(Text::from("not located"), Text::code).into(),
            r.rank.map_or("-".into(), |k| k.to_string()).into(),
            cos(Some(r.match_cosine)).into(),
            match &r.runner_up {
                Some((f, c)) => Text::code(f).and(format!(" ({})", cos(Some(*c)))),
                None => Text::from("-"),
            }
            .into(),
            if r.ties.is_empty() { "-".to_string() } else { r.ties.join(", ") }.into(),
            if r.ok { Text::from("yes") } else { Text::strong("no") }.into(),
        ]);
    }
    d.table(t);
    let ok = rows.iter().filter(|r| r.ok).count();
    d.blank().line(format!("{ok} of {} faults located at the expected tap and ranked first.", rows.len()));
    d
}

/// The catalog as a table, and how a spec is written.
pub fn catalog() -> Doc {
    let mut t = Table::new(["fault", "finding", "what it computes"]);
    for f in crate::fault::catalog::REGISTRY {
        t.row([f.name.to_string(), f.finding.map_or("-".into(), |f| f.to_string()), f.summary.to_string()]);
    }
    let mut d = Doc::new();
    d.table(t).line(
        "spec: NAME[:PARAMS][@layers=RANGE], e.g. shared-softmax@layers=0, rope:interleaved,target=q, position-shift:1",
    );
    d
}
