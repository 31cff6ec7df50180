//! What `hefprobe explain --pattern` writes: the record, every hypothesis ranked with its
//! figures per observation, the cleared causes, the deciding experiment (terminal, Markdown,
//! JSON, and an SVG of the longest run each hypothesis produced).

use super::decide::Experiment;
use super::judge::{Judged, Status, Verdict};
use super::Pattern;
use crate::error::{Error, Result};
use crate::report::doc::{Cell, Doc, Table, Text};
use crate::report::Format;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Explained {
    pub finding: u32,
    pub summary: String,
    pub record: String,
    pub checkpoint: String,
    pub observations: Vec<super::Observation>,
    /// Where each observation was tested (or why not).
    pub tested_on: Vec<String>,
    pub grid: String,
    /// Ranked, best first.
    pub hypotheses: Vec<Judged>,
    pub cleared: Vec<Judged>,
    pub experiment: Experiment,
    pub emulations: usize,
    #[serde(skip)]
    pub generation: super::Generation,
    #[serde(skip)]
    pub command: String,
    #[serde(skip)]
    pub svg: Option<std::path::PathBuf>,
}

impl Explained {
    pub fn new(p: &Pattern, checkpoint: String, tested_on: Vec<String>, grid: String) -> Self {
        Explained {
            finding: p.finding,
            summary: p.summary.clone(),
            record: p.path.display().to_string(),
            checkpoint,
            observations: p.observations.clone(),
            tested_on,
            grid,
            hypotheses: Vec::new(),
            cleared: Vec::new(),
            experiment: Experiment::default(),
            emulations: 0,
            generation: p.generation.clone(),
            command: String::new(),
            svg: None,
        }
    }

    /// The one-paragraph answer: what reproduces the record, and what nothing does.
    pub fn conclusion(&self) -> String {
        let labels = |js: &[Judged], keep: &dyn Fn(Verdict) -> bool| -> Vec<String> {
            js.iter().filter(|j| keep(j.verdict)).map(|j| j.label.clone()).collect()
        };
        let full = labels(&self.hypotheses, &|v| v == Verdict::Reproduces);
        let part = labels(&self.hypotheses, &|v| v == Verdict::Partly);
        let not_cleared = labels(&self.cleared, &|v| v != Verdict::Contradicts);
        let mut s = if full.is_empty() {
            "Nothing in the catalog reproduces the whole record.".to_string()
        } else {
            format!("Reproduces the whole record: {}.", full.join(", "))
        };
        s += &if part.is_empty() {
            " No hypothesis reproduces any part of the collapse.".to_string()
        } else {
            format!(" Reproduces part of it (the collapse, but not every observation): {}.", part.join(", "))
        };
        s += &if not_cleared.is_empty() {
            " Every cause the finding cleared comes out contradicted, as the finding says.".to_string()
        } else {
            format!(" NOT contradicted by the record as written here: {}.", not_cleared.join(", "))
        };
        if self.tested_on.iter().any(|t| t.starts_with("synthesized")) {
            s += " Coherent observations of another width than the checkpoint's were checked on synthesized \
                  stand-ins (random weights, which rarely collapse or react): passing them is weak evidence, \
                  except where a width fault is a no-op there by definition.";
        }
        s
    }
}

fn verdict_cell(j: &Judged) -> Cell {
    let misses = j.misses();
    let text = match j.verdict {
        Verdict::Partly => format!(
            "partly (misses {})",
            misses.iter().map(|m| format!("#{m}")).collect::<Vec<_>>().join(", ")
        ),
        v => v.name().to_string(),
    };
    Cell::from(text)
}

fn figures(j: &Judged) -> String {
    j.results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mark = match r.status {
                Status::Reproduced => "✓",
                Status::Missed => "✗",
                Status::Untested => "–",
            };
            format!("#{} {mark} {}", i + 1, r.figures)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn ranked_table(rows: &[Judged]) -> Table {
    let mut t = Table::new(["rank", "hypothesis", "finding", "verdict", "per observation"]).align("rlrll");
    for (i, j) in rows.iter().enumerate() {
        t.row([
            Cell::from((i + 1).to_string()),
            Text::code(&j.label).into(),
            j.finding.map_or("-".into(), |f| f.to_string()).into(),
            verdict_cell(j),
            figures(j).into(),
        ]);
    }
    t
}

fn record(e: &Explained, d: &mut Doc) {
    let mut t = Table::new(["#", "shape on record", "outcome", "tested on"]).align("rlll");
    for (i, (o, on)) in e.observations.iter().zip(&e.tested_on).enumerate() {
        t.row([
            Cell::from((i + 1).to_string()),
            o.shape().into(),
            o.outcome_text(&e.generation).into(),
            on.clone().into(),
        ]);
    }
    d.table(t).blank();
    d.line(format!(
        "A degenerate outcome is reproduced when base-scope greedy generation (the prefill re-run per token) holds \
         a run of at least {} copies of one token within the recorded length; a coherent one when the hypothesis \
         leaves the baseline's greedy tokens as they are.",
        e.generation.run
    ))
    .blank();
}

fn experiment(x: &Experiment, d: &mut Doc) {
    d.heading(2, "The deciding experiment");
    if x.compared.len() < 2 {
        d.line("Fewer than two hypotheses to separate: no experiment decides between them.").blank();
        return;
    }
    d.line(format!("Compared: {} hypotheses ({}).", x.compared.len(), x.basis)).blank();
    for s in &x.shapes {
        d.line(Text::strong(format!("hidden {} ({} heads of {}, {} layers, kv_heads = heads).", s.hidden, s.heads, s.hidden / s.heads, s.layers)).and(format!(
            " Predicted to act, i.e. to move the logits `run` compares ({} of {}; the rest are bit-exact no-ops there): {}.",
            s.acting.len(),
            x.compared.len(),
            if s.acting.is_empty() { "none".into() } else { s.acting.join(", ") }
        )));
        for c in &s.commands {
            d.line(Text::code(c));
        }
        d.blank();
    }
    if !x.inseparable.is_empty() {
        let pairs: Vec<String> = x.inseparable.iter().map(|(a, b)| format!("{a} / {b}")).collect();
        d.line(format!(
            "No shape of hidden size alone separates {} pair(s): {} (they act on the same sizes; `run`'s explain \
             tells them apart on the device's logits).",
            pairs.len(),
            pairs.join(", ")
        ))
        .blank();
    }
}

impl crate::report::Document for Explained {
    const COMMAND: &'static str = "explain --pattern";
    const FORMATS: &'static [Format] = &[Format::Terminal, Format::Markdown, Format::Json, Format::Svg];

    fn doc(&self, to: Option<&std::path::Path>) -> Doc {
        let mut d = Doc::new();
        d.heading(1, format!("hefprobe explain --pattern: finding {}", self.finding));
        d.line(Text::strong("Record.").and(format!(" {}", self.summary))).blank();
        d.line(
            Text::from("Produced by ")
                .and(Text::code(&self.command))
                .and(format!(" (hefprobe {}).", env!("CARGO_PKG_VERSION"))),
        )
        .blank();
        d.line(format!("Checkpoint: {}. {}.", self.checkpoint, self.grid)).blank();
        record(self, &mut d);
        d.heading(2, "Conclusion").line(self.conclusion()).blank();
        d.heading(2, "Hypotheses, ranked");
        d.table(ranked_table(&self.hypotheses)).blank();
        d.heading(2, "Causes the finding cleared");
        d.table(ranked_table(&self.cleared)).blank();
        experiment(&self.experiment, &mut d);
        d.line(format!("{} base-scope generations.", self.emulations));
        if let Some(s) = &self.svg {
            d.blank().figure(crate::report::relative_to(s, to));
        }
        d
    }

    fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("json") + "\n"
    }

    fn figures(&mut self, path: &std::path::Path) -> Result<()> {
        write_svg(self, path)?;
        self.svg.get_or_insert_with(|| path.to_path_buf());
        Ok(())
    }
}

/// The longest run each hypothesis produced on the degenerate observations, in rank order, with
/// the collapse bar.
fn write_svg(e: &Explained, path: &std::path::Path) -> Result<()> {
    use crate::report::svg::{line_plot, LinePanel};
    let err = |x: String| Error::input(path.display().to_string(), format!("drawing the plot: {x}"));
    let pts: Vec<(f64, f64)> = e
        .hypotheses
        .iter()
        .enumerate()
        .filter_map(|(i, j)| {
            j.results.iter().filter_map(|r| r.longest_run).max().map(|r| ((i + 1) as f64, r as f64))
        })
        .collect();
    let n = e.hypotheses.len().max(1) as f64;
    let bar = e.generation.run as f64;
    let top = pts.iter().map(|p| p.1).fold(bar, f64::max) + 1.0;
    let panel = LinePanel {
        caption: "longest run of one token, base-scope generation (rank order)",
        x_desc: "hypothesis rank",
        y_desc: "tokens",
        x: 0.0..n + 1.0,
        y: 0.0..top,
        x_labels: 10,
        series: vec![
            ("longest run".into(), pts),
            (format!("collapse: run {}", e.generation.run), vec![(0.0, bar), (n + 1.0, bar)]),
        ],
        legend: true,
    };
    crate::files::write_file(path, line_plot((860, 360), &[panel]).map_err(err)?)
}
