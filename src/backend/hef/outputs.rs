//! The `hef` backend's outputs beyond the logits: which taps a HEF exposes (by the
//! `<group>/<tap>` naming convention or an output map), each checked against the frame it comes
//! in, and how a frame's exposed outputs become capture arrays.

use super::{HefBackend, TapOutput};
use crate::device::driver::Exposed;
use crate::device::exposed::for_capture;
use crate::error::{Error, Result};
use crate::tap::{Phase, Tap, TapSelection};
use ndarray::{ArrayD, IxDyn};
use std::path::Path;

/// Whether an exposed output's [rows, values] are what the tap comes as: the frame's rows (or
/// only the last) of `width` values.
fn fits(rows_values: &[usize], frame: usize, width: usize) -> bool {
    matches!(rows_values, [r, w] if *w == width && (*r == frame || *r == 1))
}

impl HefBackend {
    /// The rows of a frame of `group` and the values of one wire row of `tap`.
    fn wire(&self, group: &str, tap: Tap) -> (usize, usize) {
        let frame = if group == self.driver.prefill_group() { self.driver.prefill_tokens() } else { 1 };
        (frame, self.driver.geometry().row_width(tap))
    }

    /// The exposed outputs by the naming convention (`<group>/<tap>`), each checked.
    pub(super) fn with_convention(mut self, what: &str) -> Result<Self> {
        let mut tap_outputs = Vec::new();
        for (group, o, is_tap) in self.driver.outputs() {
            let Some(tap) = is_tap.then(|| Tap::of_output(&o.name)).flatten() else {
                continue;
            };
            let (frame, want) = self.wire(&group, tap);
            let got = o.shape.features as usize;
            if !fits(&[o.shape.rows() as usize, got], frame, want) {
                return Err(Error::input(
                    format!("{what} output `{}`", o.name),
                    format!(
                        "is named as tap {tap}, whose frame is {frame} (or 1) rows of {want} values here, but the \
                         output is {} rows of {got}; rename it, or map it with an output map",
                        o.shape.rows()
                    ),
                ));
            }
            crate::device::exposed::check_quant(&o, tap, self.qmax(&group, &o.name), what)?;
            tap_outputs.push(TapOutput { output: o.name.clone(), tap, transform: None });
        }
        self.tap_outputs = tap_outputs;
        self.check_taps(None, what)?;
        Ok(self)
    }

    /// The largest code of an output as the hardware sends it (uint8 or uint16).
    fn qmax(&self, group: &str, output: &str) -> f32 {
        let output = self.hef.group(group).and_then(|g| g.outputs.iter().find(|s| s.name == output));
        if output.is_some_and(|s| s.data_bytes == 1) {
            255.0
        } else {
            65535.0
        }
    }

    /// Every exposed tap from one output of its group (two outputs onto one tap, by their
    /// names, an output map, or both, would have one silently win), and, with the model's
    /// `layers`, inside the model.
    pub(super) fn check_taps(&self, layers: Option<usize>, what: &str) -> Result<()> {
        let outputs = self.driver.outputs();
        let mut seen: Vec<(&str, Tap, &str)> = Vec::new();
        for (group, o, _) in &outputs {
            let Some(t) = self.tap_outputs.iter().find(|t| t.output == o.name) else { continue };
            if let Some((_, _, other)) = seen.iter().find(|(g, x, _)| *g == group.as_str() && *x == t.tap) {
                return Err(Error::input(
                    what,
                    format!(
                        "outputs `{other}` and `{}` of group `{group}` are both tap {}: measure each tap from one \
                         output (rename one, or map it elsewhere in the output map)",
                        o.name, t.tap
                    ),
                ));
            }
            seen.push((group, t.tap, &o.name));
            if let (Some(l), Some(n)) = (t.tap.layer(), layers) {
                if l >= n {
                    return Err(Error::input(
                        format!("{what} output `{}`", o.name),
                        format!("is tap {}, but the model has {n} layers (0..={})", t.tap, n - 1),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Take the HEF's outputs as the output map at `path` names them (the dump map's TOML form:
    /// output name → tap, with transforms from the output's [h, w, f] to the tap's frame layout
    /// rows of the tap's values); an output the map leaves out stays as the naming convention
    /// has it (a tap, or a part of the logits), and an entry mapping onto `logits` makes it a
    /// part of the logits.
    pub fn set_output_map(&mut self, path: &Path) -> Result<()> {
        let map_what = path.display().to_string();
        let text = crate::files::read_text(path, crate::files::Kind::NameMap)?;
        let outputs = self.driver.outputs();
        let names: Vec<String> = outputs.iter().map(|(_, o, _)| o.name.clone()).collect();
        let shape_of = |n: &str| {
            let o = &outputs.iter().find(|(_, o, _)| o.name == n).expect("plan asks for members").1;
            Ok(vec![o.shape.height as usize, o.shape.width as usize, o.shape.features as usize])
        };
        let group_of =
            |n: &str| outputs.iter().find(|(_, o, _)| o.name == n).map_or(String::new(), |x| x.0.clone());
        let entries =
            crate::backend::map::plan(&text, &map_what, "the HEF's outputs", &names, shape_of, group_of)?;
        let mentioned: Vec<String> = entries.iter().map(|e| e.member.clone()).collect();
        let mut tap_outputs: Vec<TapOutput> = Vec::new();
        for e in entries {
            let what = format!("{map_what} entry `{}`", e.member);
            let Some((phase, tap)) = e.key.canonical() else {
                return Err(Error::input(what, format!("`{}` is not a canonical tap", e.key)));
            };
            if phase != Phase::Prefill {
                return Err(Error::input(
                    what,
                    format!("names phase {phase}: an output's phase is the frame it comes back with; give the tap alone"),
                ));
            }
            if tap == Tap::Logits {
                continue;
            }
            if !tap.exposable() {
                return Err(Error::input(
                    what,
                    format!("{tap} cannot be a HEF's output (the host looks the embeddings up)"),
                ));
            }
            let (group, o, _) =
                outputs.iter().find(|(_, o, _)| o.name == e.member).expect("plan checked the member");
            let dims = shape_of(&e.member)?;
            let rows = match &e.transform {
                Some(t) => crate::backend::map::transformed_shape(&dims, t, &what)?,
                None => vec![dims[0] * dims[1], dims[2]],
            };
            let (frame, width) = self.wire(group, tap);
            if !fits(&rows, frame, width) {
                return Err(Error::input(
                    what,
                    format!(
                        "gives the output's {}×{}×{} as {rows:?}, but {tap} here comes as rows of {width} values \
                         ({frame} rows, or only the last): a transform must end in [rows, values] (squeeze, permute, \
                         reshape), the values in the capture's order after its row axis",
                        o.shape.height, o.shape.width, o.shape.features
                    ),
                ));
            }
            crate::device::exposed::check_quant(o, tap, self.qmax(group, &o.name), &map_what)?;
            tap_outputs.push(TapOutput { output: e.member.clone(), tap, transform: e.transform });
        }
        tap_outputs.extend(
            std::mem::take(&mut self.tap_outputs).into_iter().filter(|t| !mentioned.contains(&t.output)),
        );
        self.driver.set_taps(&tap_outputs.iter().map(|t| t.output.clone()).collect());
        self.tap_outputs = tap_outputs;
        self.check_taps(None, &map_what)?;
        self.output_map = Some(map_what);
        Ok(())
    }

    /// What the host sees of each exposed tap: its output's quant infos (the first group's that
    /// outputs it), for the expected emulation. An output a map transforms has its features in
    /// another order than the tap's: there only a quant info shared by all is reproduced.
    pub(super) fn exposed_quant(&self) -> Vec<(Tap, crate::fault::expected::ExposedQuant)> {
        let g = self.driver.geometry();
        let outputs = self.driver.outputs();
        let mut out: Vec<(Tap, crate::fault::expected::ExposedQuant)> = Vec::new();
        for t in &self.tap_outputs {
            let Some((group, o, _)) = outputs.iter().find(|(_, o, _)| o.name == t.output) else { continue };
            let shared = o.quant_infos.windows(2).all(|w| w[0] == w[1]);
            if out.iter().any(|(x, _)| *x == t.tap) || (t.transform.is_some() && !shared) {
                continue;
            }
            out.push((
                t.tap,
                crate::fault::expected::ExposedQuant {
                    layout: g.layout(t.tap),
                    slots: g.slots,
                    infos: if shared { o.quant_infos[..1].to_vec() } else { o.quant_infos.clone() },
                    qmax: self.qmax(group, &o.name),
                },
            ));
        }
        out
    }

    /// One frame's exposed outputs as capture arrays of the taps `taps` selects.
    pub(super) fn exposed_taps(
        &self,
        frame: Exposed,
        taps: &TapSelection,
    ) -> Result<Vec<(Tap, ArrayD<f32>)>> {
        let g = self.driver.geometry();
        let mut out = Vec::new();
        for (name, shape, values) in frame.outputs {
            let Some(t) = self.tap_outputs.iter().find(|t| t.output == name) else { continue };
            if !taps.matches(&t.tap.to_string()) {
                continue;
            }
            let what = format!("output `{name}`");
            let layout = g.layout(t.tap);
            let a = match &t.transform {
                None => layout.from_rows(values, shape.rows() as usize, &what)?,
                Some(tr) => {
                    let dims = [shape.height as usize, shape.width as usize, shape.features as usize];
                    let a = ArrayD::from_shape_vec(IxDyn(&dims), values)
                        .map_err(|e| Error::Device(format!("{what}: {e}")))?;
                    let rows = crate::backend::map::apply(a, tr, &what)?;
                    let n = rows.shape()[0];
                    layout.from_rows(rows.iter().copied().collect(), n, &what)?
                }
            };
            out.push((t.tap, for_capture(a, layout, frame.real_rows, &frame.cols, &what)?));
        }
        Ok(out)
    }

    /// Where each figure of this HEF comes from: which outputs are the logits, which taps were
    /// measured (and how their values reached the host), and that every other tap is inferred.
    pub fn outputs_note(&self) -> String {
        let outputs = self.driver.outputs();
        let logits: Vec<String> =
            outputs.iter().filter(|(_, _, t)| !t).map(|(_, o, _)| format!("`{}`", o.name)).collect();
        let mut note = match logits.is_empty() {
            true => "no logits (a graph cut before lm_head)".to_string(),
            false => format!("logits from {}", logits.join(", ")),
        };
        if self.tap_outputs.is_empty() {
            note += "; no other output, so every per-layer figure is inferred (explain), none measured on the device";
            return note;
        }
        let mut taps: Vec<String> = self.tap_outputs.iter().map(|t| t.tap.to_string()).collect();
        taps.sort();
        taps.dedup();
        let per_feature = self
            .tap_outputs
            .iter()
            .any(|t| outputs.iter().any(|(_, o, _)| o.name == t.output && o.quant_infos.len() > 1));
        note += &format!(
            "; measured on the device, from {} outputs named {}: {} (float32 as HailoRT dequantizes them, {}); \
             every other tap is inferred (explain)",
            self.tap_outputs.len(),
            self.output_map.as_ref().map_or("by the `<group>/<tap>` convention".to_string(), |m| format!("by {m} and the `<group>/<tap>` convention")),
            taps.join(", "),
            if per_feature { "per-feature quant infos" } else { "one quant info per output" }
        );
        note
    }
}
