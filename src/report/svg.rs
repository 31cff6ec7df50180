//! SVG plots (plotters): cosine and SQNR per layer (one line per backend and view), and a
//! layer × head heatmap of attention-probs cosine.

use super::run::Report;
use crate::compare::{PairComparison, TapRow, View};
use crate::error::{Error, Result};
use crate::tap::{LayerTap, Tap};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// The look every hefprobe line plot shares (band.rs draws with it too).
pub(super) const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Worst (lowest) value over phases of `f(row)` for `layers.I.<tap>`, per layer.
fn per_layer(pair: &PairComparison, tap: LayerTap, f: impl Fn(&TapRow) -> Option<f64>) -> Vec<(usize, f64)> {
    let mut out = std::collections::BTreeMap::new();
    for row in &pair.rows {
        let Some(Tap::Layer(l, t)) = row.tap.canonical() else { continue };
        let Some(v) = (t == tap).then(|| f(row)).flatten() else { continue };
        out.entry(l).and_modify(|e: &mut f64| *e = e.min(v)).or_insert(v);
    }
    out.into_iter().collect()
}

fn label(pair: &PairComparison) -> String {
    match pair.view {
        View::Cumulative | View::Expected => pair.candidate.clone(),
        View::Local => format!("{} (local)", pair.candidate),
    }
}

/// The error for a plot that failed to draw at `path`.
pub fn err(path: &Path) -> impl Fn(String) -> Error + '_ {
    move |e| Error::input(path.display().to_string(), format!("drawing the plot: {e}"))
}

/// Write the plots; returns the files written.
pub fn write(report: &Report, prefix: &Path) -> Result<Vec<String>> {
    let mut written = Vec::new();
    for (path, svg) in render(report, prefix)? {
        crate::files::write_file(&path, &svg)?;
        written.push(path.display().to_string());
    }
    Ok(written)
}

/// Where `--report svg=PATH`'s layer plot goes, and the name its other plots start with: a
/// PATH ending in `.svg` is that file, the heads plots beside it (`r.svg`, `r-heads-*.svg`);
/// any other PATH is a prefix (`reports/NAME`: `NAME-layers.svg`, `NAME-heads-*.svg`).
pub fn layers_path(prefix: &Path) -> (PathBuf, String) {
    let name = |n: Option<&std::ffi::OsStr>| {
        n.map_or_else(|| "hefprobe".into(), |n| n.to_string_lossy().to_string())
    };
    if prefix.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg")) {
        return (prefix.to_path_buf(), name(prefix.file_stem()));
    }
    let name = name(prefix.file_name());
    (prefix.with_file_name(format!("{name}-layers.svg")), name)
}

/// The plots and the files they go to ([`layers_path`]): the layer plot and one
/// `NAME-heads-PAIR.svg` per pair that has attention taps (what `verify` regenerates and compares).
pub fn render(report: &Report, prefix: &Path) -> Result<Vec<(PathBuf, String)>> {
    let (layers_path, name) = layers_path(prefix);
    let mut out = Vec::new();
    if let Some(svg) = layers_plot(report).map_err(err(&layers_path))? {
        out.push((layers_path, svg));
    }
    for pair in &report.comparisons {
        let view = if pair.view == View::Local { "-local" } else { "" };
        let safe: String = format!("{}{view}", pair.candidate)
            .chars()
            .map(|c| if c.is_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        let path: PathBuf = prefix.with_file_name(format!("{name}-heads-{safe}.svg"));
        if let Some(svg) = heads_plot(pair).map_err(err(&path))? {
            out.push((path, svg));
        }
    }
    Ok(out)
}

/// One panel of lines over an integer x axis (layers, hidden sizes): the look every hefprobe
/// line plot shares.
pub struct LinePanel<'a> {
    pub caption: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    pub x: std::ops::Range<f64>,
    pub y: std::ops::Range<f64>,
    pub x_labels: usize,
    /// (label, points); a label of "" adds no legend entry.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    pub legend: bool,
}

/// `panels` in one SVG of `size`: one fills it, two share it, top and bottom.
pub fn line_plot(size: (u32, u32), panels: &[LinePanel]) -> Drawn<String> {
    let draw = |area: &Area, p: &LinePanel| {
        framed(area, p, ((18, 32, 70), &int_label), |chart| {
            let mut series = p.series.iter().enumerate();
            series.try_for_each(|(i, (name, pts))| line(chart, i, (!name.is_empty()).then_some(name), pts))
        })
    };
    page(size, |root| {
        if let [top, bottom] = panels {
            let (a, b) = root.split_vertically(size.1 / 2);
            draw(&a, top)?;
            draw(&b, bottom)
        } else {
            panels.iter().try_for_each(|p| draw(root, p))
        }
    })
}

/// A drawing, or what plotters said went wrong.
pub(super) type Drawn<T = ()> = std::result::Result<T, String>;
type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
pub(super) type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
/// A frame's caption font size, its label areas' below the x axis and left of the y axis, and
/// how its x ticks read.
pub(super) type Look<'a> = ((u32, u32, u32), &'a dyn Fn(&f64) -> String);

pub(super) fn text(x: impl std::fmt::Display) -> String {
    x.to_string()
}

fn int_label(x: &f64) -> String {
    format!("{}", x.round() as i64)
}

/// One SVG of `size`: a white page that `draw` draws on.
pub(super) fn page(size: (u32, u32), draw: impl FnOnce(&Area) -> Drawn) -> Drawn<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(text)?;
        draw(&root)?;
        root.present().map_err(text)?;
    }
    Ok(svg)
}

/// The frame every hefprobe line plot is drawn in (here and in band.rs): `panel`'s caption, its
/// axes over x × y with their descriptions and ticks, the series `series` draws (not the
/// panel's own), and the legend if it has one.
pub(super) fn framed(
    area: &Area,
    panel: &LinePanel,
    ((caption, below, left), x_label): Look,
    series: impl FnOnce(&mut Chart) -> Drawn,
) -> Drawn {
    let mut chart = ChartBuilder::on(area)
        .caption(panel.caption, ("sans-serif", caption))
        .margin(12)
        .x_label_area_size(below)
        .y_label_area_size(left)
        .build_cartesian_2d(panel.x.clone(), panel.y.clone())
        .map_err(text)?;
    chart
        .configure_mesh()
        .x_desc(panel.x_desc)
        .y_desc(panel.y_desc)
        .x_labels(panel.x_labels)
        .x_label_formatter(x_label)
        .draw()
        .map_err(text)?;
    series(&mut chart)?;
    if panel.legend {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(text)?;
    }
    Ok(())
}

/// Series `i` of a plot in its palette colour: the line through `pts`, its legend entry when it
/// has a `label`, a dot at each point.
pub(super) fn line(chart: &mut Chart, i: usize, label: Option<&String>, pts: &[(f64, f64)]) -> Drawn {
    let color = PALETTE[i % PALETTE.len()];
    let drawn = chart.draw_series(LineSeries::new(pts.to_vec(), color.stroke_width(2))).map_err(text)?;
    if let Some(label) = label {
        drawn
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled()))).map_err(text)?;
    Ok(())
}

fn layers_plot(report: &Report) -> Drawn<Option<String>> {
    let points = |v: Vec<(usize, f64)>| -> Vec<(f64, f64)> {
        v.into_iter().filter(|(_, y)| y.is_finite()).map(|(l, y)| (l as f64, y)).collect()
    };
    let mut cos = Vec::new();
    let mut sqnr = Vec::new();
    for p in &report.comparisons {
        let c = per_layer(p, LayerTap::Out, |r| r.cosine());
        if c.is_empty() {
            continue;
        }
        cos.push((label(p), points(c)));
        sqnr.push((
            String::new(),
            points(per_layer(p, LayerTap::Out, |r| r.metrics.as_ref().map(|m| m.sqnr_db.min(200.0)))),
        ));
    }
    if cos.is_empty() {
        return Ok(None);
    }
    let all = |s: &[(String, Vec<(f64, f64)>)]| -> Vec<(f64, f64)> {
        s.iter().flat_map(|(_, p)| p.iter().copied()).collect()
    };
    let layers = all(&cos).iter().map(|(x, _)| *x as usize).max().unwrap_or(0) + 1;
    let min_cos = all(&cos).iter().map(|(_, y)| *y).fold(1.0f64, f64::min);
    let y0 = if min_cos > 0.999 { 0.999 } else { (min_cos * 100.0).floor() / 100.0 - 0.01 };
    let sq: Vec<f64> = all(&sqnr).iter().map(|(_, y)| *y).collect();
    let (s0, s1) = match (sq.iter().copied().reduce(f64::min), sq.iter().copied().reduce(f64::max)) {
        (Some(a), Some(b)) => ((a - 5.0).floor(), (b + 5.0).ceil()),
        _ => (0.0, 100.0),
    };
    let x = -0.5f64..(layers as f64 - 0.5);
    let panels = [
        LinePanel {
            caption: "cosine per layer (layers.I.out, worst phase)",
            x_desc: "layer",
            y_desc: "cosine",
            x: x.clone(),
            y: y0..1.0005,
            x_labels: layers.min(32),
            series: cos,
            legend: true,
        },
        LinePanel {
            caption: "SQNR per layer (dB, layers.I.out, worst phase; identical = 200)",
            x_desc: "layer",
            y_desc: "SQNR dB",
            x,
            y: s0..s1,
            x_labels: layers.min(32),
            series: sqnr,
            legend: false,
        },
    ];
    line_plot((860, 620), &panels).map(Some)
}

/// Cosine → colour: dark red at the low end, white-ish yellow at 1.
fn heat(c: f64, lo: f64) -> RGBColor {
    let t = if lo >= 1.0 { 1.0 } else { ((c - lo) / (1.0 - lo)).clamp(0.0, 1.0) };
    let lerp = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * t).round() as u8;
    RGBColor(lerp(120, 255), lerp(0, 245), lerp(20, 200))
}

fn heads_plot(pair: &PairComparison) -> Drawn<Option<String>> {
    let mut cells: Vec<(usize, usize, f64)> = Vec::new();
    for row in &pair.rows {
        let Some(Tap::Layer(l, LayerTap::Probs)) = row.tap.canonical() else { continue };
        for (h, b) in row.per_head.iter().enumerate() {
            match cells.iter_mut().find(|(ll, hh, _)| *ll == l && *hh == h) {
                Some(c) => c.2 = c.2.min(b.cosine),
                None => cells.push((l, h, b.cosine)),
            }
        }
    }
    if cells.is_empty() {
        return Ok(None);
    }
    let layers = cells.iter().map(|c| c.0).max().unwrap_or(0) + 1;
    let heads = cells.iter().map(|c| c.1).max().unwrap_or(0) + 1;
    let lo = cells.iter().map(|c| c.2).fold(1.0f64, f64::min).min(0.999);
    let caption = format!("attn.probs cosine, {} (worst phase): dark {lo:.3}, light 1", label(pair));
    let size = (360.max(120 + 40 * heads as u32), 110 + 26 * layers as u32);
    page(size, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(caption, ("sans-serif", 13))
            .margin(10)
            .x_label_area_size(28)
            .y_label_area_size(50)
            .build_cartesian_2d(-0.5f64..heads as f64 - 0.5, -0.5f64..layers as f64 - 0.5)
            .map_err(text)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("head")
            .y_desc("layer")
            .x_labels(heads)
            .y_labels(layers)
            .x_label_formatter(&int_label)
            .y_label_formatter(&int_label)
            .draw()
            .map_err(text)?;
        chart
            .draw_series(cells.iter().map(|&(l, h, c)| {
                let (x, y) = (h as f64, l as f64);
                Rectangle::new([(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)], heat(c, lo).filled())
            }))
            .map_err(text)?;
        Ok(())
    })
    .map(Some)
}
