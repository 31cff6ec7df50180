//! Sweeps: one probe over a grid (hidden sizes or checkpoints × quant settings × faults ×
//! prompt lengths) into one table, with greedy-generation degeneracy metrics per point — the
//! shape of finding 16, where generation collapses into one repeated token past a hidden size.

use crate::backend::decoder::DecoderBackend;
use crate::backend::{collect, Run};
use crate::capture::Capture;
use crate::compare::metrics;
use crate::compare::thresholds::{Dir, Metric, Thresholds};
use crate::error::{Error, Result};
use crate::fault::spec::FaultSpec;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::{Checkpoint, Decoder};
use crate::probe::schema::{Probe, SweepSpec};
use crate::report::doc::{Cell, Doc, Table, Text};
use crate::report::format::{cos, pct};
use crate::report::Format;
use crate::tap::{Phase, Tap, TapSelection};
use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    /// What varies: "hidden=576", a checkpoint folder, ...
    pub model: String,
    pub hidden: usize,
    pub setting: String,
    /// "kv" or "base" ([sweep] scope).
    pub scope: String,
    pub prompt_len: usize,
    /// Logits cosine, mean over phases (teacher-forced on the reference's tokens).
    pub logits_cosine: f64,
    pub kl_mean: f64,
    pub argmax_agreement: f64,
    /// Free greedy generation by the emulated device.
    pub longest_run: usize,
    pub distinct_ratio: f64,
    /// First generated step whose token differs from the reference's greedy token.
    pub first_divergence: Option<usize>,
    pub tokens: Vec<u32>,
    pub reference_longest_run: usize,
    pub reference_distinct_ratio: f64,
    /// The probe's logits bounds this point fails (`cosine 0.995857 < 0.999`); empty within
    /// them. A sweep drifts, and exits 1, when any point does.
    pub drift: Vec<String>,
}

/// Bounds of the probe's `[thresholds]` for the `logits` tap that a sweep point's figures
/// can be held to (cosine, kl_mean, argmax), and the ones this point fails.
fn logits_drift(t: &Thresholds, cos: f64, kl: f64, agree: f64) -> Vec<String> {
    let bounds = t.bounds_for("logits");
    let figures = [(Metric::Cosine, cos), (Metric::KlMean, kl), (Metric::Argmax, agree)];
    let failed = figures.into_iter().filter_map(|(metric, value)| {
        let (bound, _) = bounds.get(&metric)?;
        let below_fails = metric.dir() == Dir::Min;
        let fails = value.is_nan() || if below_fails { value < *bound } else { value > *bound };
        let op = if below_fails { "<" } else { ">" };
        fails.then(|| format!("{} {value:.6} {op} {bound}", metric.name()))
    });
    failed.collect()
}

pub use crate::compare::tokens::longest_run;

pub fn distinct_ratio(tokens: &[u32]) -> f64 {
    if tokens.is_empty() {
        return 1.0;
    }
    tokens.iter().collect::<std::collections::BTreeSet<_>>().len() as f64 / tokens.len() as f64
}

fn logits_figures(reference: &Capture, candidate: &Capture) -> (f64, f64, f64) {
    let (mut cos, mut kl, mut agree, mut n, mut rows) = (0.0, 0.0, 0usize, 0usize, 0usize);
    for key in reference.keys().filter(|k| k.tap().is_some_and(|t| t.is(Tap::Logits))) {
        let (Some(r), Some(x)) = (reference.get(key), candidate.get(key)) else { continue };
        if r.shape() != x.shape() {
            continue;
        }
        let (rv, xv) = (r.as_slice().expect("standard layout"), x.as_slice().expect("standard layout"));
        cos += metrics::basic(rv, xv, None).cosine;
        n += 1;
        let vocab = *r.shape().last().unwrap_or(&1);
        for (a, b) in rv.chunks(vocab).zip(xv.chunks(vocab)) {
            let row = metrics::logits_row(a, b);
            kl += row.kl;
            agree += usize::from(row.argmax_ref == row.argmax_cand);
            rows += 1;
        }
    }
    (cos / n.max(1) as f64, kl / rows.max(1) as f64, agree as f64 / rows.max(1) as f64)
}

/// First maximum of the last row of the prefill's logits: the greedy rule of DecodeSpec.
fn last_argmax(c: &Capture) -> Result<u32> {
    let l = c
        .at(Phase::Prefill, Tap::Logits)
        .ok_or_else(|| Error::usage("base scope: no prefill/logits captured"))?;
    let vocab = *l.shape().last().unwrap_or(&1);
    let v = l.as_slice().expect("standard layout");
    let row = &v[v.len() - vocab..];
    let best = row.iter().enumerate().fold(0, |b, (i, x)| if *x > row[b] { i } else { b });
    Ok(best as u32)
}

/// The one tap a sweep keeps.
fn logits_only() -> Result<TapSelection> {
    TapSelection::parse(&["logits".to_string()])
}

/// Run `backend` on `inputs`, keeping the logits; its error, if it stopped.
pub fn logits_run(backend: &mut DecoderBackend, inputs: &InputSet) -> Result<Run<Capture>> {
    collect(backend, inputs, &logits_only()?, None).ok()
}

/// Base scope's free generation: the whole sequence re-run as one prefill per new token,
/// stopped early once `done` says the tokens so far settle what the caller asks
/// (`explain --pattern`: a collapse found, or one no longer possible).
pub fn base_generate_until(
    backend: &mut DecoderBackend,
    greedy: &InputSet,
    steps: usize,
    mut done: impl FnMut(&[u32]) -> bool,
) -> Result<Vec<u32>> {
    let mut tokens = Vec::with_capacity(steps);
    while tokens.len() < steps && !done(&tokens) {
        let mut step = greedy.clone();
        step.prompt.extend(&tokens);
        step.decode = DecodeSpec::Greedy(0);
        tokens.push(last_argmax(&logits_run(backend, &step)?.capture)?);
    }
    Ok(tokens)
}

fn prompt_of_len(base: &[u32], len: usize) -> Vec<u32> {
    base.iter().copied().cycle().take(len).collect()
}

struct Model {
    label: String,
    hidden: usize,
    ckpt: Checkpoint,
}

/// The sweep's models: `checkpoint` when given (`--checkpoint`: the sweep runs its other axes
/// on this one model), else `[sweep] checkpoints`, else `[sweep] hidden` over the synth
/// preset, else the probe's own checkpoint.
fn models(
    probe: &Probe,
    sw: &SweepSpec,
    checkpoint: Option<&crate::model::CheckpointRef>,
) -> Result<Vec<Source>> {
    // A checkpoint loaded now, labelled by `label` or else by its source.
    let load = |c: &crate::model::CheckpointRef, label: Option<String>| -> Result<Source> {
        let ckpt = c.load()?;
        crate::probe::prepare::note_unknown_keys(&ckpt);
        let label = label.unwrap_or_else(|| ckpt.source.to_string());
        Ok(Source::Loaded(Box::new(Model { label, hidden: ckpt.config.hidden_size, ckpt })))
    };
    if let Some(c) = checkpoint {
        return Ok(vec![load(c, None)?]);
    }
    if !sw.checkpoints.is_empty() {
        return sw
            .checkpoints
            .iter()
            .map(|p| load(&crate::model::CheckpointRef::path(p), Some(p.display().to_string())))
            .collect();
    }
    if sw.hidden.is_empty() {
        return Ok(vec![load(&probe.checkpoint.to_ref()?, None)?]);
    }
    if probe.checkpoint.synth.is_none() {
        return Err(Error::usage("[sweep] hidden needs a synth checkpoint in [checkpoint]"));
    }
    let base = probe.checkpoint.synth_spec()?;
    let head_dim = sw.head_dim.or(base.head_dim).unwrap_or(64);
    let ratio = sw.kv_ratio.unwrap_or(1).max(1);
    if head_dim == 0 {
        // Probe::parse refuses `head_dim = 0`; a preset never has it. Kept so no path divides by it.
        return Err(Error::usage("[sweep] head_dim must be at least 2"));
    }
    sw.hidden
        .iter()
        .map(|&h| {
            if h % head_dim != 0 {
                return Err(Error::usage(format!(
                    "[sweep] hidden {h} is not a multiple of head_dim {head_dim}"
                )));
            }
            let heads = h / head_dim;
            if !heads.is_multiple_of(ratio) {
                return Err(Error::usage(format!(
                    "[sweep] hidden {h}: {heads} heads not divisible by kv_ratio {ratio}"
                )));
            }
            let mut s = base.clone();
            (s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate) =
                (h, heads, heads / ratio, Some(head_dim), None);
            Ok(Source::Synth(format!("hidden={h}"), h, Box::new(s)))
        })
        .collect()
}

/// A model of the sweep, synthesized only when its turn comes (one model's weights held at a
/// time, however long `[sweep] hidden` is).
enum Source {
    Loaded(Box<Model>),
    Synth(String, usize, Box<crate::model::synth::SynthSpec>),
}

impl Source {
    fn get(self) -> Result<Model> {
        match self {
            Source::Loaded(m) => Ok(*m),
            Source::Synth(label, hidden, s) => Ok(Model { label, hidden, ckpt: s.build()? }),
        }
    }
}

/// One setting of the grid: its label, the faults and the quantization it emulates.
struct Setting {
    label: String,
    faults: Vec<FaultSpec>,
    quant: Option<FaultSpec>,
}

impl Setting {
    /// Its label in the table: base scope's points say so.
    fn shown(&self, base: bool) -> String {
        if base {
            format!("{} (base scope)", self.label)
        } else {
            self.label.clone()
        }
    }
}

/// Every combination of `[sweep] quant` × `faults` (a missing axis is one clean value).
fn settings(sw: &SweepSpec) -> Vec<Setting> {
    let axis = |v: &[FaultSpec]| -> Vec<Option<FaultSpec>> {
        if v.is_empty() {
            vec![None]
        } else {
            v.iter().cloned().map(Some).collect()
        }
    };
    let mut out = Vec::new();
    for q in &axis(&sw.quant) {
        for f in &axis(&sw.faults) {
            let label = [f, q].into_iter().flatten().map(ToString::to_string).collect::<Vec<_>>().join("+");
            out.push(Setting {
                label: if label.is_empty() { "clean".into() } else { label },
                faults: f.iter().cloned().collect(),
                quant: q.clone(),
            });
        }
    }
    out
}

/// Refuse a model whose sweep (the reference and two emulator runs keeping their logits, each
/// emulator with a rewritten copy of the weights) does not fit the memory budget.
fn check_memory(probe: &Probe, sw: &SweepSpec, m: &Model, base: &InputSet) -> Result<()> {
    let longest = sw.prompt_len.iter().copied().max().unwrap_or(0).max(base.prompt.len());
    let mut planned = base.clone();
    planned.prompt = vec![0; longest];
    planned.decode = DecodeSpec::Greedy(sw.generate);
    let held = crate::model::memory::TapsHeld::InMemory { captures: 3 };
    crate::model::memory::check_run(&m.ckpt, &planned, &logits_only()?, held).map_err(|e| match e {
        Error::Budget { what, needs, budget, budget_from, fix } => Error::Budget {
            what: format!("{} [sweep] {}: {what}", probe.path.display(), m.label),
            needs,
            budget,
            budget_from,
            fix: format!("lower prompt_len / generate / hidden in [sweep], or {fix}"),
        },
        other => other,
    })
}

/// The reference of one scope at one prompt: its greedy tokens, its teacher-forced logits, and
/// the inputs every setting is teacher-forced on. kv decodes the reference's tokens through
/// the cache; base runs prompt + those tokens as one prefill (what base scope computes).
fn scope_reference(
    model: &Arc<Decoder>,
    greedy: &InputSet,
    kv: &Run<Capture>,
    base: bool,
    steps: usize,
) -> Result<(Vec<u32>, Capture, InputSet)> {
    if !base {
        let mut forced: InputSet = greedy.clone();
        forced.decode = DecodeSpec::Forced(kv.record.decode_tokens.clone());
        return Ok((kv.record.decode_tokens.clone(), kv.capture.clone(), forced));
    }
    let mut r = DecoderBackend::reference(model.clone());
    let ref_tokens = base_generate_until(&mut r, greedy, steps, |_| false)?;
    let mut full = greedy.clone();
    full.prompt.extend(&ref_tokens);
    full.decode = DecodeSpec::Greedy(0);
    let run = logits_run(&mut r, &full)?;
    Ok((ref_tokens, run.capture, full))
}

/// The reference of one scope at one prompt, as [`scope_reference`] gives it.
struct ScopeRef<'a> {
    tokens: &'a [u32],
    capture: &'a Capture,
    forced: &'a InputSet,
    greedy: &'a InputSet,
    base: bool,
}

/// One point: `setting`'s emulator teacher-forced against the scope's reference, then free
/// greedy generation.
fn point(
    m: &Model,
    setting: &Setting,
    r: &ScopeRef,
    (sw, thresholds): (&SweepSpec, &Thresholds),
) -> Result<SweepPoint> {
    let mut emu = DecoderBackend::emulator(&setting.label, &m.ckpt, &setting.faults, setting.quant.as_ref())?;
    let tf = logits_run(&mut emu, r.forced)?;
    let tokens = if r.base {
        base_generate_until(&mut emu, r.greedy, sw.generate, |_| false)?
    } else {
        logits_run(&mut emu, r.greedy)?.record.decode_tokens
    };
    let (cos, kl, agree) = logits_figures(r.capture, &tf.capture);
    Ok(SweepPoint {
        model: m.label.clone(),
        hidden: m.hidden,
        setting: setting.shown(r.base),
        scope: if r.base { "base" } else { "kv" }.to_string(),
        prompt_len: r.greedy.prompt.len(),
        logits_cosine: cos,
        kl_mean: kl,
        argmax_agreement: agree,
        longest_run: longest_run(&tokens),
        distinct_ratio: distinct_ratio(&tokens),
        first_divergence: tokens.iter().zip(r.tokens).position(|(a, b)| a != b),
        reference_longest_run: longest_run(r.tokens),
        reference_distinct_ratio: distinct_ratio(r.tokens),
        tokens,
        drift: logits_drift(thresholds, cos, kl, agree),
    })
}

/// Run the sweep (on `checkpoint` instead of the probe's models, when given); `progress` is
/// told each point's label.
pub fn run_sweep(
    probe: &Probe,
    checkpoint: Option<&crate::model::CheckpointRef>,
    mut progress: impl FnMut(&str),
) -> Result<Vec<SweepPoint>> {
    let sw = probe.sweep.clone().ok_or_else(|| {
        Error::usage(format!(
            "{}: no [sweep] section (hidden, quant, faults, prompt_len, generate)",
            probe.path.display()
        ))
    })?;
    let settings = settings(&sw);
    let thresholds = probe.thresholds.build()?;
    let scopes: Vec<String> = if sw.scope.is_empty() { vec!["kv".into()] } else { sw.scope.clone() };
    let mut points = Vec::new();
    for m in models(probe, &sw, checkpoint)? {
        let m = m.get()?;
        let base_inputs = probe.inputs.input_set(&m.ckpt)?;
        check_memory(probe, &sw, &m, &base_inputs)?;
        let model = Arc::new(Decoder::new(&m.ckpt)?);
        let lens =
            if sw.prompt_len.is_empty() { vec![base_inputs.prompt.len()] } else { sw.prompt_len.clone() };
        for len in lens {
            let mut greedy = base_inputs.clone();
            greedy.prompt = prompt_of_len(&base_inputs.prompt, len);
            greedy.decode = DecodeSpec::Greedy(sw.generate);
            let kv = logits_run(&mut DecoderBackend::reference(model.clone()), &greedy)?;
            for scope in &scopes {
                let base = scope == "base";
                let (tokens, capture, forced) = scope_reference(&model, &greedy, &kv, base, sw.generate)?;
                let r =
                    ScopeRef { tokens: &tokens, capture: &capture, forced: &forced, greedy: &greedy, base };
                for setting in &settings {
                    progress(&format!("{} {} prompt {len}", m.label, setting.shown(base)));
                    points.push(point(&m, setting, &r, (&sw, &thresholds))?);
                }
            }
        }
    }
    Ok(points)
}

/// What `hefprobe sweep` writes: the table of every point (terminal, Markdown), the points
/// (JSON) and the plot of the logits cosine against the hidden size (SVG).
pub struct Swept {
    pub probe: Probe,
    pub points: Vec<SweepPoint>,
    pub command: String,
    /// The first plot written: the Markdown links it.
    pub svg: Option<std::path::PathBuf>,
}

impl crate::report::Document for Swept {
    const COMMAND: &'static str = "sweep";
    const FORMATS: &'static [Format] = &[Format::Terminal, Format::Markdown, Format::Json, Format::Svg];

    fn doc(&self, to: Option<&std::path::Path>) -> Doc {
        let svg = self.svg.as_deref().map(|s| crate::report::relative_to(s, to));
        doc(&self.probe, &self.points, &self.command, svg.as_deref())
    }

    fn json(&self) -> String {
        serde_json::to_string_pretty(&self.points).expect("json") + "\n"
    }

    fn figures(&mut self, path: &std::path::Path) -> Result<()> {
        write_svg(&self.points, path)?;
        self.svg.get_or_insert_with(|| path.to_path_buf());
        Ok(())
    }
}

/// The sweep as a document: the question, how it was produced, one row per point and the plot.
pub fn doc(probe: &Probe, points: &[SweepPoint], command: &str, svg: Option<&str>) -> Doc {
    let mut d = Doc::new();
    d.heading(1, format!("hefprobe sweep: {}", probe.name));
    let finding = probe.finding.map(|f| format!(" (finding {f})")).unwrap_or_default();
    d.line(Text::strong(format!("Question{finding}.")).and(format!(" {}", probe.question))).blank();
    d.produced_by(command);
    d.line(
        "Logits figures are teacher-forced on the reference's greedy tokens (mean over phases); \
         generation figures are the emulated device's own greedy tokens.",
    )
    .blank();
    let mut t = Table::new([
        "model",
        "setting",
        "prompt",
        "logits cosine",
        "KL mean",
        "argmax",
        "longest run",
        "distinct",
        "first divergence",
        "reference run / distinct",
        "verdict",
    ])
    .align("llrrrrrrrll");
    for p in points {
        t.row([
            Cell::from(p.model.as_str()),
            Text::code(&p.setting).into(),
            p.prompt_len.to_string().into(),
            cos(Some(p.logits_cosine)).into(),
            format!("{:.4}", p.kl_mean).into(),
            pct(p.argmax_agreement).into(),
            p.longest_run.to_string().into(),
            format!("{:.2}", p.distinct_ratio).into(),
            p.first_divergence.map_or("none".into(), |s| format!("step {s}")).into(),
            format!("{} / {:.2}", p.reference_longest_run, p.reference_distinct_ratio).into(),
            if p.drift.is_empty() { "ok".into() } else { format!("FAIL {}", p.drift.join(", ")).into() },
        ]);
    }
    d.table(t);
    let drifting = points.iter().filter(|p| !p.drift.is_empty()).count();
    d.blank().line(format!(
        "{drifting} of {} points drift beyond the probe's logits bounds (verdict column; exit code 1 when any does).",
        points.len()
    ));
    if let Some(s) = svg {
        d.blank().figure(s);
    }
    d
}

/// Metric vs hidden size, one line per setting.
pub fn write_svg(points: &[SweepPoint], path: &std::path::Path) -> Result<()> {
    use crate::report::svg::{line_plot, LinePanel};
    let mut settings: Vec<&str> = points.iter().map(|p| p.setting.as_str()).collect();
    settings.sort();
    settings.dedup();
    let xs: Vec<f64> = points.iter().map(|p| p.hidden as f64).collect();
    let (x0, x1) = (xs.iter().copied().fold(f64::INFINITY, f64::min), xs.iter().copied().fold(0.0, f64::max));
    let pad = ((x1 - x0) * 0.05).max(8.0);
    let lo = points.iter().map(|p| p.logits_cosine).fold(1.0f64, f64::min);
    let y0 = ((lo * 100.0).floor() / 100.0 - 0.01).max(-1.0);
    let runs = points.iter().map(|p| p.longest_run).max().unwrap_or(1) as f64;
    let series = |f: &dyn Fn(&SweepPoint) -> f64, labelled: bool| -> Vec<(String, Vec<(f64, f64)>)> {
        settings
            .iter()
            .map(|s| {
                let pts =
                    points.iter().filter(|p| p.setting == *s).map(|p| (p.hidden as f64, f(p))).collect();
                (if labelled { s.to_string() } else { String::new() }, pts)
            })
            .collect()
    };
    let panels = [
        LinePanel {
            caption: "logits cosine vs hidden size (teacher-forced)",
            x_desc: "hidden",
            y_desc: "cosine",
            x: x0 - pad..x1 + pad,
            y: y0..1.0005,
            x_labels: 10,
            series: series(&|p| p.logits_cosine, true),
            legend: true,
        },
        LinePanel {
            caption: "longest run of one repeated token in greedy generation",
            x_desc: "hidden",
            y_desc: "tokens",
            x: x0 - pad..x1 + pad,
            y: 0.0..runs + 1.0,
            x_labels: 10,
            series: series(&|p| p.longest_run as f64, false),
            legend: false,
        },
    ];
    crate::files::write_file(path, line_plot((860, 620), &panels).map_err(crate::report::svg::err(path))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degeneracy_metrics() {
        assert_eq!(longest_run(&[1, 2, 2, 2, 3, 3]), 3);
        assert_eq!(longest_run(&[]), 0);
        assert!((distinct_ratio(&[5, 5, 5, 6]) - 0.5).abs() < 1e-12);
    }
}
