//! Line plots over labelled steps (phases of a run, nights of a nightly job) with each series'
//! accepted band shaded behind it: a suite's failing pair against its baseline, a figure's
//! trend over runs. Rendered to a string, so a page can inline it and a command can write it.

use super::svg::{framed, line, page, text, LinePanel, PALETTE};
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
    let n = plot.steps.len().max(1);
    let (x0, x1) = (-0.5, n as f64 - 0.5);
    let (y0, y1) = y_range(plot);
    let step_label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            plot.steps.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let axes = LinePanel {
        caption: &plot.caption,
        x_desc: &plot.x_desc,
        y_desc: &plot.y_desc,
        x: x0..x1,
        y: y0..y1,
        x_labels: n.min(24),
        series: Vec::new(),
        legend: !plot.series.is_empty(),
    };
    let width = (360 + 48 * n as u32).clamp(520, 1100);
    page((width, 360), |root| {
        framed(root, &axes, ((16, 36, 80), &step_label), |chart| {
            for (i, s) in plot.series.iter().enumerate() {
                let color = PALETTE[i % PALETTE.len()];
                if let Some((lo, hi)) = s.band.filter(|(lo, hi)| lo.is_finite() && hi.is_finite()) {
                    let strip = Rectangle::new([(x0, lo), (x1, hi)], color.mix(0.15).filled());
                    chart.draw_series(std::iter::once(strip)).map_err(text)?;
                    let top = LineSeries::new([(x0, hi), (x1, hi)], color.mix(0.6).stroke_width(1));
                    chart.draw_series(top).map_err(text)?;
                }
                let pts: Vec<(f64, f64)> =
                    s.points.iter().filter(|p| p.1.is_finite()).map(|&(x, y)| (x as f64, y)).collect();
                line(chart, i, Some(&s.label), &pts)?;
            }
            Ok(())
        })
    })
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
