//! What `hefprobe explain --pattern` writes: the record, every hypothesis ranked with its
//! figures per observation, the cleared causes, the deciding experiment (terminal, Markdown,
//! JSON, and an SVG of the longest run each hypothesis produced).

use super::decide::Experiment;
use super::judge::{Decided, Judged, Status, Verdict};
use super::record::{Defaults, Observation, Scope};
use crate::error::Result;
use crate::report::doc::{Cell, Doc, Table, Text};
use crate::report::Format;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Explained {
    pub finding: u32,
    pub summary: String,
    pub record: String,
    pub checkpoint: String,
    pub defaults: Defaults,
    pub observations: Vec<Observation>,
    /// What stood in for each observation's checkpoint, and how strong that evidence is.
    pub stood_in: Vec<super::bed::StoodIn>,
    pub grid: String,
    /// Ranked, best first.
    pub hypotheses: Vec<Judged>,
    pub cleared: Vec<Judged>,
    pub experiment: Experiment,
    pub emulations: usize,
    #[serde(skip)]
    pub command: String,
    #[serde(skip)]
    pub svg: Option<std::path::PathBuf>,
}

impl Explained {
    fn ids(&self, idx: &[usize]) -> String {
        idx.iter().map(|&i| self.observations[i].id.clone()).collect::<Vec<_>>().join(", ")
    }

    /// The answer, one sentence per question: what reproduces the whole record, what part of it,
    /// what a figure contradicts without a run, where the cleared causes stand, and how strong
    /// the evidence is. No sentence claims what another denies.
    pub fn conclusion(&self) -> String {
        let with =
            |v: Verdict| -> Vec<&Judged> { self.hypotheses.iter().filter(|j| j.verdict == v).collect() };
        let (full, part) = (with(Verdict::Reproduces), with(Verdict::Partly));
        let names = |js: &[&Judged]| js.iter().map(|j| j.label.clone()).collect::<Vec<_>>().join(", ");
        let mut s = if full.is_empty() {
            "No hypothesis reproduces the whole record.".to_string()
        } else {
            format!("Reproduces every observation tested: {}.", names(&full))
        };
        if !part.is_empty() {
            const SHOWN: usize = 6;
            let each: Vec<String> = part
                .iter()
                .take(SHOWN)
                .map(|j| format!("{} (misses {})", j.label, self.ids(&j.misses())))
                .collect();
            let more = part.len().saturating_sub(SHOWN);
            let more = if more > 0 { format!("; and {more} more in the table") } else { String::new() };
            s += &format!(" Reproduces part of it: {}{more}.", each.join("; "));
        } else if full.is_empty() {
            s += " None reproduces even part of it.";
        }
        let structural: Vec<String> = self
            .hypotheses
            .iter()
            .filter(|j| !j.structural().is_empty())
            .map(|j| format!("{} (by {}, no run needed)", j.label, self.ids(&j.structural())))
            .collect();
        if !structural.is_empty() {
            s += &format!(" Contradicted by the figures on record alone: {}.", structural.join("; "));
        }
        s += &self.cleared_sentence();
        let weak: Vec<usize> = (0..self.stood_in.len())
            .filter(|&i| self.stood_in[i].evidence == super::bed::Evidence::Synthesized)
            .collect();
        if !weak.is_empty() {
            s += &format!(
                " {} of {} observations ({}) ran on synthesized stand-ins of their shapes: random weights rarely \
                 collapse or react, so a hypothesis passing them is weak evidence, and failing them is evidence \
                 only where it acts on those shapes.",
                weak.len(),
                self.stood_in.len(),
                self.ids(&weak)
            );
        }
        s
    }

    fn cleared_sentence(&self) -> String {
        if self.cleared.is_empty() {
            return " The record lists no cause the finding cleared.".into();
        }
        let standing: Vec<&Judged> =
            self.cleared.iter().filter(|j| j.verdict != Verdict::Contradicts).collect();
        if standing.is_empty() {
            return format!(
                " Every cause the finding cleared ({}) comes out contradicted by the shapes on record, as the finding says.",
                self.cleared.iter().map(|j| j.label.clone()).collect::<Vec<_>>().join(", ")
            );
        }
        let each: Vec<String> =
            standing.iter().map(|j| format!("{} ({})", j.label, j.verdict.name())).collect();
        format!(
            " Cleared by the finding but NOT contradicted by the record as written here: {}.",
            each.join(", ")
        )
    }
}

fn figures(e: &Explained, j: &Judged) -> String {
    j.results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mark = match (r.status, r.decided) {
                (Status::Reproduced, _) => "✓",
                (Status::Missed, Decided::Structure) => "✗ (no run)",
                (Status::Missed, _) => "✗",
                (Status::Untested, _) => "–",
            };
            format!("{} {mark} {}", e.observations[i].id, r.figures)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn ranked_table(e: &Explained, rows: &[Judged]) -> Table {
    let mut t = Table::new(["rank", "hypothesis", "finding", "verdict", "per observation"]).align("rlrll");
    for (i, j) in rows.iter().enumerate() {
        t.row([
            Cell::from((i + 1).to_string()),
            Text::code(&j.label).into(),
            j.finding.map_or("-".into(), |f| f.to_string()).into(),
            match j.verdict {
                Verdict::Partly => format!("partly (misses {})", e.ids(&j.misses())),
                v => v.name().to_string(),
            }
            .into(),
            figures(e, j).into(),
        ]);
    }
    t
}

fn record(e: &Explained, d: &mut Doc) {
    let mut t = Table::new([
        "id",
        "checkpoint (source)",
        "shape on record",
        "run",
        "outcome on record",
        "stood in by",
    ])
    .align("llllll");
    let dflt = &e.defaults;
    for (i, o) in e.observations.iter().enumerate() {
        let recipe = o.recipe(dflt).map_or("float".to_string(), |r| r.to_string());
        let prompt = match (&o.prompt_text, &o.prompt) {
            (Some(t), _) => format!("prompt \"{t}\""),
            (None, Some(ids)) => format!("prompt {} ids on record", ids.len()),
            (None, None) => format!("stand-in prompt of {} ids", dflt.prompt.len()),
        };
        let run = match o.scope(dflt) {
            Scope::Base => {
                let frame = o.frame.or(dflt.frame).map_or("?".into(), |f| f.to_string());
                format!("{recipe}, base scope, frame {frame}, {prompt}, {} tokens", o.tokens(dflt))
            }
            Scope::Prefill => format!("{recipe}, prefill, {prompt}"),
        };
        let on = e.stood_in.get(i).map_or("not built".to_string(), |s| {
            let took = if s.defaults.is_empty() {
                String::new()
            } else {
                format!("; took {}", s.defaults.join(", "))
            };
            format!("{}{took} — {}", s.label, s.evidence.text())
        });
        t.row([
            Cell::from(o.id.clone()),
            format!("{} ({})", o.checkpoint.as_deref().unwrap_or("not named"), o.source).into(),
            o.shape().into(),
            run.into(),
            o.outcome_text(dflt).into(),
            on.into(),
        ]);
    }
    d.table(t).blank();
    d.line(format!(
        "Each observation is judged on its own bed: its recipe composed with the hypothesis, its prompt, base-scope \
         greedy generation (the conversation re-run per token) for an outcome, a prefill up to a figure's position \
         for its figures. Repetition is a run of at least {} copies of one token; a coherent observation holds when \
         the hypothesis leaves the recipe's tokens as they are; a figure holds within its band around the recorded \
         value, counting what the hypothesis adds beyond the recipe on the bed (the chip's recipe left its trained \
         counterparts at cosine 0.998-1.0; random weights amplify it), and an argmax agrees when the hypothesis keeps \
         the float model's token or the recipe's.",
        dflt.run
    ))
    .blank();
}

fn experiment(x: &Experiment, d: &mut Doc) {
    d.heading(2, "The deciding experiment");
    if !x.on_record.is_empty() {
        let sizes: Vec<String> = x.on_record.iter().map(usize::to_string).collect();
        d.line(format!("Hidden sizes already on record, so not proposed again: {}.", sizes.join(", ")))
            .blank();
    }
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
        d.produced_by(&self.command);
        d.line(format!("Checkpoint: {}. {}.", self.checkpoint, self.grid)).blank();
        record(self, &mut d);
        d.heading(2, "Conclusion").line(self.conclusion()).blank();
        d.heading(2, "Hypotheses, ranked");
        d.table(ranked_table(self, &self.hypotheses)).blank();
        d.heading(2, "Causes the finding cleared");
        if self.cleared.is_empty() {
            d.line("The record lists none.").blank();
        } else {
            d.table(ranked_table(self, &self.cleared)).blank();
        }
        experiment(&self.experiment, &mut d);
        d.line(format!("{} emulations (generations and prefills).", self.emulations));
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
    let pts: Vec<(f64, f64)> = e
        .hypotheses
        .iter()
        .enumerate()
        .filter_map(|(i, j)| {
            j.results.iter().filter_map(|r| r.longest_run).max().map(|r| ((i + 1) as f64, r as f64))
        })
        .collect();
    let n = e.hypotheses.len().max(1) as f64;
    let bar = e.defaults.run as f64;
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
            (format!("repetition: run {}", e.defaults.run), vec![(0.0, bar), (n + 1.0, bar)]),
        ],
        legend: true,
    };
    crate::files::write_file(path, line_plot((860, 360), &[panel]).map_err(crate::report::svg::err(path))?)
}
