//! Outputs beyond the logits (docs/HAILO-RUNTIME.md, "Exposed outputs"). A HEF compiled with
//! extra output layers returns those tensors with every frame; each becomes a tap, measured on
//! the device. An output is a tap when an output map names it (the dump map's TOML form,
//! `backend::dump`), or, without one, when its name ends in `/TAP` with TAP a canonical tap
//! (`model__prefill/layers.3.out`); every other output is a part of the logits, in output order.
//!
//! On the wire an exposed output is [1, R, F]: R rows (the frame's, or only its last) of F
//! values. A tap's values sit in the row as the capture lays them out after its row axis:
//! `[T, F]` taps as they are, `[H, T, D]` as H·D (head-major), `[H, T, S]` as H·S with S the
//! cache ring's slots in the mask's column order.

use crate::error::{Error, Result};
use crate::tap::{Tap, TapSelection};
use ndarray::{ArrayD, Axis};

/// The most a dequantized exposed output may span (scale × the largest code) and still be
/// `tap`: probabilities lie in [0, 1]; every other tap of a trained model stays far below
/// f16's largest finite value, 65504. Past this the output's values are all one code (a scale of
/// 1e30 reads every value as the zero point) and the tap measures nothing.
fn tap_span(tap: Tap) -> f32 {
    match tap {
        Tap::Layer(_, crate::tap::LayerTap::Probs) => 4.0,
        _ => 1e6,
    }
}

/// A tap output's quant infos must dequantize into a range the tap can hold: HailoRT multiplies
/// by the scale; `qmax` is the output's largest code.
pub fn check_quant(o: &super::StreamInfo, tap: Tap, qmax: f32, what: &str) -> Result<()> {
    let absurd = |q: &crate::hef::QuantInfo| {
        !(q.scale.is_finite() && q.scale != 0.0 && q.zp.is_finite()) || q.scale.abs() * qmax > tap_span(tap)
    };
    match o.quant_infos.iter().position(absurd) {
        Some(i) => Err(Error::input(
            format!("{what} output `{}`", o.name),
            format!(
                "quant info {i} has scale {} and zero point {}: dequantized, its {} codes span {:e}, which \
                 {tap} cannot hold (at most {:e}); the HEF is damaged or the output is not this tap",
                o.quant_infos[i].scale,
                o.quant_infos[i].zp,
                qmax + 1.0,
                o.quant_infos[i].scale.abs() * qmax,
                tap_span(tap)
            ),
        )),
        None => Ok(()),
    }
}

/// What a HEF's frames are made of (its inputs and hailo-config.json say it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Key slots of the cache ring (kv_cache_size).
    pub slots: usize,
}

impl Geometry {
    pub fn layout(&self, tap: Tap) -> Layout {
        Layout::of(tap, self.heads, self.kv_heads)
    }

    /// Values of one wire row of `tap`.
    pub fn row_width(&self, tap: Tap) -> usize {
        let layout = self.layout(tap);
        let inner = if matches!(layout, Layout::Keys(_)) { self.slots } else { self.head_dim };
        layout.row_width(self.hidden, inner)
    }
}

pub use crate::tap::Layout;

/// One frame's exposed tap as the capture holds it: the last `real` rows along the row axis
/// (a remainder-first chunk's padding rows dropped; an output that holds only the last row is
/// kept as that row) and, for attention taps, the key slots in `cols` (the mask's columns of the
/// frame's last row, oldest first: the positions seen so far).
pub fn for_capture(
    a: ArrayD<f32>,
    layout: Layout,
    real: usize,
    cols: &[usize],
    what: &str,
) -> Result<ArrayD<f32>> {
    let axis = Axis(layout.row_axis());
    let rows = a.len_of(axis);
    let a = if rows > real { a.slice_axis(axis, ndarray::Slice::from(rows - real..)).to_owned() } else { a };
    match layout {
        Layout::Keys(_) => {
            let slots = a.len_of(Axis(2));
            if let Some(&c) = cols.iter().find(|&&c| c >= slots) {
                return Err(Error::input(
                    what,
                    format!("has {slots} key slots per head, but the mask frame has column {c} on"),
                ));
            }
            Ok(a.select(Axis(2), cols))
        }
        _ => Ok(a),
    }
}

/// The taps `--expose` selects on a model of `layers` blocks, in execution order: each glob
/// must select one that a HEF can output.
pub fn selected(globs: &TapSelection, layers: usize, range: Option<(usize, usize)>) -> Result<Vec<Tap>> {
    let (first, last) = range.unwrap_or((0, layers.saturating_sub(1)));
    let mut taps = Vec::new();
    for glob in globs.patterns() {
        let g = glob.as_str();
        let hit: Vec<Tap> = Tap::all(layers)
            .into_iter()
            .filter(|&t| t.exposable() && glob.matches(&t.to_string()))
            .filter(|t| t.layer().map_or(last + 1 == layers, |l| (first..=last).contains(&l)))
            .collect();
        if hit.is_empty() {
            return Err(Error::usage(format!(
                "--expose `{g}` selects no tap a HEF of blocks {first}..={last} of this {layers}-layer model can \
                 output (layers.I.out, layers.I.attn.probs, ..., final_norm; not embed or logits)"
            )));
        }
        taps.extend(hit.into_iter().filter(|t| !taps.contains(t)).collect::<Vec<_>>());
    }
    taps.sort();
    Ok(taps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tap::LayerTap;
    use ndarray::IxDyn;

    #[test]
    fn names_and_layouts_round_trip() {
        assert_eq!(Tap::of_output("m__prefill/layers.3.out"), Some(Tap::Layer(3, LayerTap::Out)));
        assert_eq!(Tap::of_output("m__prefill/output_layer1"), None);
        assert_eq!(Tap::of_output("m__prefill/logits"), None, "the logits are not an exposed tap");
        assert_eq!(Tap::of_output("m/layers.0.input"), None, "an edit site is not captured");
        // [H=2, T=3, D=2] -> rows of H·D -> back.
        let a = ArrayD::from_shape_vec(IxDyn(&[2, 3, 2]), (0..12).map(|x| x as f32).collect()).unwrap();
        let l = Layout::Heads(2);
        let rows = l.to_rows(&a);
        assert_eq!(rows[0], vec![0.0, 1.0, 6.0, 7.0], "row 0 holds head 0 then head 1");
        let back = l.from_rows(rows.concat(), 3, "x").unwrap();
        assert_eq!(back, a);
        assert!(l.from_rows(vec![0.0; 7], 3, "x").is_err());
    }

    #[test]
    fn padding_rows_and_unmasked_columns_are_kept_out() {
        // [H=1, T=3, S=4]: the frame's last 2 rows are real, columns 2 and 3 are on.
        let a = ArrayD::from_shape_vec(IxDyn(&[1, 3, 4]), (0..12).map(|x| x as f32).collect()).unwrap();
        let c = for_capture(a, Layout::Keys(1), 2, &[2, 3], "x").unwrap();
        assert_eq!(c.shape(), &[1, 2, 2]);
        assert_eq!(c.iter().copied().collect::<Vec<_>>(), vec![6.0, 7.0, 10.0, 11.0]);
        let a = ArrayD::from_shape_vec(IxDyn(&[1, 3, 4]), vec![0.0; 12]).unwrap();
        assert!(for_capture(a, Layout::Keys(1), 2, &[4], "x").is_err());
    }
}
