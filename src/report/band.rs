//! Line plots over labelled steps (phases of a run, nights of a nightly job) with each series'
//! accepted band shaded behind it: a suite's failing pair against its baseline, a figure's
//! trend over runs. Rendered to a string, so a page can inline it and a command can write it.

use super::svg::PALETTE;
use plotters::prelude::*;

#[derive(Debug, Clone, PartialEq)]
pub struct BandSeries {
    pub label: String,
    /// (step index into [`BandPlot::steps`], value); non-finite values are left out.
    pub points: Vec<(usize, f64)>,
    /// The accepted range, drawn as a shaded strip: (lowest accepted, baseline).
    pub band: Option<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BandPlot {
    pub caption: String,
    pub x_desc: String,
    pub y_desc: String,
    /// The x axis' labels, one per step.
    pub steps: Vec<String>,
    pub series: Vec<BandSeries>,
}

/// The y range covering every point and band, padded a little; a flat range is widened so the
/// axis has ticks.
fn y_range(plot: &BandPlot) -> (f64, f64) {
    let values = plot
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1).chain(s.band.into_iter().flat_map(|(lo, hi)| [lo, hi])));
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.08).max(hi.abs().max(1e-3) * 1e-4);
    (lo - pad, hi + pad)
}

/// The plot as an SVG document.
pub fn render(plot: &BandPlot) -> Result<String, String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let mut out = String::new();
    {
        let n = plot.steps.len().max(1);
        let width = (360 + 48 * n as u32).clamp(520, 1100);
        let root = SVGBackend::with_string(&mut out, (width, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let (y0, y1) = y_range(plot);
        let mut chart = ChartBuilder::on(&root)
            .caption(&plot.caption, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5f64..n as f64 - 0.5, y0..y1)
            .map_err(|x| e(&x))?;
        let steps = plot.steps.clone();
        let step_label = move |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                steps.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .x_desc(plot.x_desc.as_str())
            .y_desc(plot.y_desc.as_str())
            .x_labels(n.min(24))
            .x_label_formatter(&step_label)
            .draw()
            .map_err(|x| e(&x))?;
        for (i, s) in plot.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            if let Some((lo, hi)) = s.band.filter(|(lo, hi)| lo.is_finite() && hi.is_finite()) {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(-0.5, lo), (n as f64 - 0.5, hi)],
                        color.mix(0.15).filled(),
                    )))
                    .map_err(|x| e(&x))?;
                chart
                    .draw_series(LineSeries::new(
                        [(-0.5, hi), (n as f64 - 0.5, hi)],
                        color.mix(0.6).stroke_width(1),
                    ))
                    .map_err(|x| e(&x))?;
            }
            let pts: Vec<(f64, f64)> =
                s.points.iter().filter(|p| p.1.is_finite()).map(|&(x, y)| (x as f64, y)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|x| e(&x))?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled()))).map_err(|x| e(&x))?;
        }
        if !plot.series.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|x| e(&x))?;
        }
        root.present().map_err(|x| e(&x))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_well_formed_svg_with_the_band_and_labels() {
        let plot = BandPlot {
            caption: "logits cosine per phase".into(),
            x_desc: "phase".into(),
            y_desc: "cosine".into(),
            steps: vec!["prefill".into(), "decode.0".into(), "decode.1".into()],
            series: vec![BandSeries {
                label: "logits".into(),
                points: vec![(0, 0.9), (1, 0.8), (2, f64::NAN)],
                band: Some((0.9999, 1.0)),
            }],
        };
        let svg = render(&plot).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert!(svg.contains("decode.0") && svg.contains("logits cosine per phase"));
        assert!(svg.contains("opacity=\"0.15\"") || svg.contains("fill-opacity=\"0.15\""), "band drawn");
    }

    #[test]
    fn a_flat_range_still_has_height() {
        let plot = BandPlot {
            caption: String::new(),
            x_desc: String::new(),
            y_desc: String::new(),
            steps: vec!["a".into()],
            series: vec![BandSeries { label: "x".into(), points: vec![(0, 1.0)], band: None }],
        };
        let (lo, hi) = y_range(&plot);
        assert!(lo < 1.0 && hi > 1.0);
    }
}
