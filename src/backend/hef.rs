//! The `hef` backend: a HEF on a device — the simulated device for HEFs `synth-hef` wrote,
//! the real Hailo-10H otherwise (feature `hailo`). It captures what a device returns: the
//! logits of each phase's last position ([1, vocab]), as HailoRT's server reads them.

use super::{no_feed, Backend, Capabilities, Ran};
use crate::capture::{Store, TapSink};
use crate::device::driver::{Exposed, LlmDriver};
use crate::device::exposed::for_capture;
use crate::device::sim::SimDevice;
use crate::device::synth_hef::{sim_spec, Calibration, SimSpec};
use crate::device::{Device, DeviceFacts, SimProfile};
use crate::error::{Error, Result};
use crate::fault::expected::Expected;
use crate::fault::spec::FaultSpec;
use crate::hef::Hef;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::run::RunRecord;
use crate::model::Checkpoint;
use crate::tap::{Key, Phase, Tap, TapSelection};
use ndarray::{ArrayD, IxDyn};
use std::path::Path;
use std::sync::Arc;

/// A HEF open on its device: the driver ready, what the device says about itself, and (for a
/// HEF hefprobe simulates) the checkpoint it was made from.
pub struct HefBackend {
    name: String,
    pub driver: LlmDriver,
    /// Shared with its simulated device and explain's emulations of it ([`Frames`]).
    pub hef: Arc<Hef>,
    pub facts: DeviceFacts,
    /// One sentence naming the device ([`Device::describe`]).
    pub description: String,
    /// The checkpoint hash a simulated HEF was made from (a compiled HEF does not say).
    pub made_from: Option<String>,
    /// What a simulated HEF computes (its faults, quantization, calibration set).
    sim: Option<SimSpec>,
    /// The activation quantization the HEF was compiled with, when declared (`quant` of the
    /// backend); a simulated HEF's own is used otherwise.
    pub declared: Option<FaultSpec>,
    /// [`HefBackend::expected`], made once per checkpoint (its hash).
    expected: Option<(String, Arc<Expected>)>,
    /// The outputs beyond the logits and the taps they are ([`HefBackend::set_output_map`]).
    tap_outputs: Vec<TapOutput>,
    /// The output map that named them, when one did.
    output_map: Option<String>,
    /// The first block of the graph (> 0 for a suffix HEF, whose first input is the hidden state
    /// entering it): a simulated HEF's own, or declared (`first_layer`).
    pub first_layer: usize,
    /// Kept alive for the driver's configured models.
    _device: Box<dyn Device>,
}

/// Open the device a HEF needs: simulated when hefprobe wrote it (as `profile`, default
/// `sim`), else the real one (where a simulator profile is a usage error). With the HEF, and
/// the checkpoint hash a simulated one was made from.
type Opened = (Box<dyn Device>, Arc<Hef>, Option<(String, SimSpec)>);

fn open_device(path: &Path, profile: Option<SimProfile>) -> Result<Opened> {
    let what = path.display().to_string();
    let hef = Arc::new(Hef::read(path)?);
    if let Some(spec) = sim_spec(&hef, &what)? {
        let dev = SimDevice::with_profile(hef.clone(), spec.clone(), what, profile.unwrap_or_default())?;
        let made_from = dev.checkpoint.hash.clone();
        return Ok((Box::new(dev), hef, Some((made_from, spec))));
    }
    if let Some(p) = profile {
        return Err(Error::usage(format!(
            "device `{}` simulates a device, but {what} is a compiled HEF (no hefprobe-sim.json resource): \
             leave the device choice out to run it on the real device",
            p.name()
        )));
    }
    Ok((real_device(path)?, hef, None))
}

#[cfg(feature = "hailo")]
fn real_device(path: &Path) -> Result<Box<dyn Device>> {
    Ok(Box::new(crate::device::hailo::HailoDevice::open(path)?))
}

#[cfg(not(feature = "hailo"))]
fn real_device(path: &Path) -> Result<Box<dyn Device>> {
    Err(Error::Unsupported(format!(
        "{} is a compiled HEF, not one hefprobe simulates: running it needs a Hailo-10H and HailoRT 5.x. \
         On the device host build with `cargo build --release --features hailo` (HAILORT_INCLUDE_DIR / \
         HAILORT_LIB_DIR if not in /usr), or record a capture there with `hefprobe capture` and compare it here",
        path.display()
    )))
}

/// A HEF built for an architecture the device does not run is an input error, as HailoRT's
/// HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE would be (the table: [`crate::hef::arch`]).
pub fn check_arch(hw_arch: i32, device_arch: Option<&str>, what: &str) -> Result<()> {
    match device_arch {
        Some(arch) if !crate::hef::arch::runs_on(hw_arch, arch) => Err(Error::input(
            what,
            format!(
                "was built for {} (hw_arch {hw_arch}), which a {arch} device does not run (HailoRT: \
                 HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE); compile the HEF for {arch}",
                crate::hef::arch::hw_arch_name(hw_arch),
            ),
        )),
        _ => Ok(()),
    }
}

/// The HEF at `path` on its device (see [`open_device`]), its architecture checked against the
/// device's and its LLM driver opened.
pub fn open_hef(label: &str, path: &Path, profile: Option<SimProfile>) -> Result<HefBackend> {
    let what = path.display().to_string();
    let (mut device, hef, sim) = open_device(path, profile)?;
    let facts = device.facts();
    check_arch(hef.hw_arch, facts.architecture.as_deref(), &what)?;
    let driver = LlmDriver::open(device.as_mut(), &hef, &what)?;
    let description = device.describe();
    let first_layer = sim.as_ref().and_then(|(_, s)| s.layers).map_or(0, |[a, _]| a);
    let (made_from, sim) = sim.map_or((None, None), |(h, s)| (Some(h), Some(s)));
    HefBackend {
        name: label.to_string(),
        driver,
        hef,
        facts,
        description,
        made_from,
        sim,
        declared: None,
        expected: None,
        tap_outputs: Vec::new(),
        output_map: None,
        first_layer,
        _device: device,
    }
    .with_convention(&what)
}

/// What explain needs to emulate a candidate on a simulated HEF as its device computes it: the
/// HEF (its frames of prefill_input_tokens_count rows, padding rows attending over the whole
/// ring, as genai's `mask_frame` fills them), what it was made with, its exposed outputs, and
/// the frozen expected quantization every candidate is composed with. Two catalog faults act
/// on that geometry rather than on the prompt's rows (mask-repeat, first-slot-output:
/// docs/QUANTIZATION.md); the decoder alone computes something else for them.
#[derive(Clone)]
pub struct Frames {
    what: String,
    hef: Arc<Hef>,
    spec: SimSpec,
    expected: Arc<Expected>,
    taps: Vec<TapOutput>,
}

impl Frames {
    /// The HEF on a simulated device computing `faults` (and nothing it was made with) through
    /// the expected quantization, on `ckpt`'s weights; None when a fault acts on positions,
    /// which the device never receives, or changes the graph's output (no lm_head: hidden-wide,
    /// which this HEF's vocab-wide output cannot hold): [`crate::fault::OnDevice`].
    /// `first`: faults whose hooks go ahead of the device's (explain's instrument).
    pub fn backend(
        &self,
        ckpt: &Checkpoint,
        faults: &[FaultSpec],
        first: Vec<Box<dyn crate::fault::Fault>>,
    ) -> Result<Option<HefBackend>> {
        use crate::fault::{catalog::on_device, OnDevice};
        if !faults.iter().all(|f| matches!(on_device(f), OnDevice::Frames | OnDevice::Ring)) {
            return Ok(None);
        }
        let spec = SimSpec { faults: faults.to_vec(), noise: None, ..self.spec.clone() };
        let quantized = Box::new(crate::fault::expected::Activations(self.expected.clone()));
        let mut dev = SimDevice::emulating(
            self.hef.clone(),
            spec,
            self.what.clone(),
            ckpt.clone(),
            (first, quantized),
        )?;
        let driver = LlmDriver::open(&mut dev, &self.hef, &self.what)?;
        let mut b = HefBackend::from_parts("explain", Box::new(dev), driver, self.hef.clone());
        b.driver.set_taps(&self.taps.iter().map(|t| t.output.clone()).collect());
        b.tap_outputs = self.taps.clone();
        Ok(Some(b))
    }
}

/// An output beyond the logits and the tap it is.
#[derive(Clone)]
struct TapOutput {
    output: String,
    tap: Tap,
    /// From an output map entry: the wire array [h, w, f] to the capture layout of a frame.
    transform: Option<super::map::Transform>,
}

/// Whether an exposed output's [rows, values] are what the tap comes as: the frame's rows (or
/// only the last) of `width` values.
fn fits(rows_values: &[usize], frame: usize, width: usize) -> bool {
    matches!(rows_values, [r, w] if *w == width && (*r == frame || *r == 1))
}

/// The `hef` backend for the HEF at `path`, refused when it was made from another checkpoint
/// than the reference's.
pub fn open(label: &str, path: &Path, profile: Option<SimProfile>, ckpt: &Checkpoint) -> Result<HefBackend> {
    let b = open_hef(label, path, profile)?;
    b.check_made_from(path, ckpt)?;
    Ok(b)
}

impl HefBackend {
    /// The rows of a frame of `group` and the values of one wire row of `tap`.
    fn wire(&self, group: &str, tap: Tap) -> (usize, usize) {
        let frame = if group == self.driver.prefill_group() { self.driver.prefill_tokens() } else { 1 };
        (frame, self.driver.geometry().row_width(tap))
    }

    /// The exposed outputs by the naming convention (`<group>/<tap>`), each checked.
    fn with_convention(mut self, what: &str) -> Result<Self> {
        let mut tap_outputs = Vec::new();
        for (group, o, is_tap) in self.driver.outputs() {
            let Some(tap) = is_tap.then(|| crate::device::exposed::tap_named(&o.name)).flatten() else {
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
        let bytes = self
            .hef
            .group(group)
            .and_then(|g| g.outputs.iter().find(|s| s.name == output))
            .map_or(2, |s| s.data_bytes);
        if bytes == 1 {
            255.0
        } else {
            65535.0
        }
    }

    /// Every exposed tap from one output of its group (two outputs onto one tap, by their
    /// names, an output map, or both, would have one silently win), and, with the model's
    /// `layers`, inside the model.
    fn check_taps(&self, layers: Option<usize>, what: &str) -> Result<()> {
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
        let entries = super::map::plan(&text, &map_what, "the HEF's outputs", &names, shape_of, group_of)?;
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
            if !crate::device::exposed::exposable(tap) {
                return Err(Error::input(
                    what,
                    format!("{tap} cannot be a HEF's output (the host looks the embeddings up)"),
                ));
            }
            let (group, o, _) =
                outputs.iter().find(|(_, o, _)| o.name == e.member).expect("plan checked the member");
            let dims = shape_of(&e.member)?;
            let rows = match &e.transform {
                Some(t) => super::map::transformed_shape(&dims, t, &what)?,
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
    fn exposed_quant(&self) -> Vec<(Tap, crate::fault::expected::ExposedQuant)> {
        let g = self.driver.geometry();
        let outputs = self.driver.outputs();
        let mut out: Vec<(Tap, crate::fault::expected::ExposedQuant)> = Vec::new();
        for t in &self.tap_outputs {
            let Some((group, o, _)) = outputs.iter().find(|(_, o, _)| o.name == t.output) else { continue };
            let shared = o.quant_infos.windows(2).all(|w| w[0] == w[1]);
            if out.iter().any(|(x, _)| *x == t.tap) || (t.transform.is_some() && !shared) {
                continue;
            }
            let bytes = self
                .hef
                .group(group)
                .and_then(|g| g.outputs.iter().find(|s| s.name == o.name))
                .map_or(2, |s| s.data_bytes);
            out.push((
                t.tap,
                crate::fault::expected::ExposedQuant {
                    layout: g.layout(t.tap),
                    slots: g.slots,
                    infos: if shared { o.quant_infos[..1].to_vec() } else { o.quant_infos.clone() },
                    qmax: if bytes == 1 { 255.0 } else { 65535.0 },
                },
            ));
        }
        out
    }

    /// One frame's exposed outputs as capture arrays of the taps `taps` selects.
    fn exposed_taps(&self, frame: Exposed, taps: &TapSelection) -> Result<Vec<(Tap, ArrayD<f32>)>> {
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
                    let rows = super::map::apply(a, tr, &what)?;
                    let n = rows.shape()[0];
                    layout.from_rows(rows.iter().copied().collect(), n, &what)?
                }
            };
            out.push((t.tap, for_capture(a, layout, frame.real_rows, &frame.cols, &what)?));
        }
        Ok(out)
    }

    pub fn from_parts(
        name: &str,
        device: Box<dyn Device>,
        driver: LlmDriver,
        hef: impl Into<Arc<Hef>>,
    ) -> Self {
        let hef = hef.into();
        let sim = sim_spec(&hef, name).ok().flatten();
        HefBackend {
            name: name.to_string(),
            driver,
            hef,
            facts: device.facts(),
            description: device.describe(),
            made_from: None,
            sim,
            declared: None,
            expected: None,
            tap_outputs: Vec::new(),
            output_map: None,
            first_layer: 0,
            _device: device,
        }
    }

    /// What this HEF computes when nothing is wrong, on `ckpt`'s weights: its edges' quant
    /// infos, and the activation quantization it was compiled with — declared, or a simulated
    /// HEF's own (calibrated on its calibration set); `none` declares float activations.
    pub fn expected(&mut self, ckpt: &Checkpoint) -> Result<Arc<Expected>> {
        if let Some((hash, e)) = &self.expected {
            if *hash == ckpt.hash {
                return Ok(e.clone());
            }
        }
        let mut edges = self.driver.edge_quant(&self.hef)?;
        edges.exposed = self.exposed_quant();
        let vocab = ckpt.config.vocab_size;
        let acts = match (&self.declared, &self.sim) {
            (Some(d), _) => Some(d.clone()),
            (None, Some(s)) => Some(crate::fault::spec::quantization(&s.quant)?),
            (None, None) => None,
        };
        let acts = acts.filter(|a| a.text != "quant:none");
        let calibration = match &self.sim {
            Some(s) => s.calibration(vocab),
            None => Calibration::default_for(ckpt)?,
        };
        let inputs = calibration.inputs();
        let e = Arc::new(Expected::new(edges, acts.as_ref(), (&inputs, &calibration.source), ckpt)?);
        self.expected = Some((ckpt.hash.clone(), e.clone()));
        Ok(e)
    }

    /// How explain emulates candidates through this HEF's frames ([`Frames`]), once its
    /// expected quantization is made: for a simulated HEF that runs from block 0 with its lm_head.
    /// A compiled HEF (what it was made with is not known here), a suffix graph (fed the
    /// reference's hidden state) and a HEF without an lm_head are emulated by the decoder.
    pub fn frames(&self) -> Option<Frames> {
        let spec = self.sim.clone()?;
        let (_, expected) = self.expected.clone()?;
        let whole = self.first_layer == 0
            && !spec.mistakes.contains(&crate::device::synth_hef::Mistake::MissingLmHead);
        whole.then(|| Frames {
            what: self.name.clone(),
            hef: self.hef.clone(),
            spec,
            expected,
            taps: self.tap_outputs.clone(),
        })
    }

    /// A simulated HEF names the checkpoint it was made from: comparing it with another one is
    /// an input error, not drift. (A compiled HEF carries no such record; its logits width is
    /// checked against the vocabulary where the logits are compared.) Its exposed taps must be
    /// inside the checkpoint's blocks.
    pub fn check_made_from(&self, path: &Path, ckpt: &Checkpoint) -> Result<()> {
        self.check_taps(Some(ckpt.config.num_layers), &path.display().to_string())?;
        match &self.made_from {
            Some(made_from) if *made_from != ckpt.hash => Err(Error::input(
                path.display().to_string(),
                format!(
                    "was made from checkpoint {made_from}, but the reference is {} ({}); compare a HEF \
                     with the checkpoint it was compiled from",
                    ckpt.hash, ckpt.source
                ),
            )),
            _ => Ok(()),
        }
    }

    /// A probe whose `chunk` cuts the prompt otherwise than the HEF's prefill frame: the same
    /// inputs chunked as genai feeds this HEF (remainder first, then frames of
    /// prefill_input_tokens_count rows), and the note that says so. `None` when the cuts agree.
    pub fn follow_chunk(&self, inputs: &InputSet) -> Option<(InputSet, String)> {
        let (c, p) = self.other_cut(inputs)?;
        let cut = |c| crate::device::frames::chunks(inputs.prompt.len(), c);
        let followed = InputSet { chunk: Some(p), ..inputs.clone() };
        let note = format!(
            "backend `{}`: the probe prefills in chunks of {c}, the HEF in frames of {p} rows \
             (prefill_input_tokens_count): it ran as genai feeds it ({} chunk(s): {:?}) and is compared with \
             a reference chunked the same",
            self.name,
            cut(p).len(),
            cut(p)
        );
        Some((followed, note))
    }

    /// The probe's chunk and the HEF's frame rows when they cut the prompt differently. A
    /// chunk that cuts it as the frames do (e.g. a prompt shorter than both) is the same run.
    fn other_cut(&self, inputs: &InputSet) -> Option<(usize, usize)> {
        let p = self.driver.prefill_tokens();
        let cut = |c| crate::device::frames::chunks(inputs.prompt.len(), c);
        inputs.chunk.filter(|&c| c != p && cut(c) != cut(p)).map(|c| (c, p))
    }

    fn check_inputs(&self, inputs: &InputSet) -> Result<()> {
        let p = self.driver.prefill_tokens();
        if inputs.start_position != 0 {
            return Err(Error::usage("a device conversation starts at position 0; remove start_position"));
        }
        // Only a different cut is refused (a run follows it first: `follow_chunk`).
        if let Some((c, _)) = self.other_cut(inputs) {
            return Err(Error::usage(format!(
                "the probe prefills in chunks of {c}, the HEF in chunks of {p} (prefill_input_tokens_count): \
                 set [inputs] chunk = {p}, or leave it out to compare the last chunk only"
            )));
        }
        // Every phase keeps a logits row: a decode count from a file is sized before it runs
        // (a greedy_steps of 2^62 would otherwise run, and hold, without bound).
        let phases = crate::budget::Bytes::new(inputs.prompt.len().div_ceil(p.max(1)) as u64)
            .plus(crate::budget::Bytes::new(inputs.decode.steps() as u64));
        let held = phases.times(self.driver.vocab_rows() as u64).times(4);
        crate::budget::current().check(
            format!(
                "the device's logits of {} prompt tokens and {} decode steps ({} vocabulary rows each)",
                inputs.prompt.len(),
                inputs.decode.steps(),
                self.driver.vocab_rows()
            ),
            held,
            "fewer decode steps (the InputSet's `greedy_steps` or `decode_tokens`), or raise --max-memory",
        )?;
        // A conversation past kv_cache_size is not refused: genai runs it on a ring that
        // overwrites its oldest entries (see LlmDriver::note_context_full), and the comparison
        // uses a reference with a window of kv_cache_size keys (`reference_window`).
        Ok(())
    }

    /// The sliding window the reference needs to be comparable with this HEF on `inputs`, and
    /// the note that says so: kv_cache_size when the conversation is longer than that. Exact
    /// for tbt steps past the limit (one row sees the ring's kv_cache_size newest entries, as a
    /// window of that many keys does); a prefill frame past it gives its earlier rows fewer keys
    /// (row t of T sees kv − T + t + 1, the mask's columns being the ring's newest entries),
    /// which a sliding window does not model, and the note says that too.
    pub fn ring_window(&self, inputs: &InputSet) -> Option<(usize, String)> {
        let (kv, p) = (self.driver.kv_cache_size(), self.driver.prefill_tokens());
        let n = inputs.total_len();
        if n <= kv {
            return None;
        }
        let mut note = format!(
            "conversation of {n} tokens exceeds the HEF's kv_cache_size {kv}: the device's cache ring overwrote \
             the oldest entries; the reference attends to the last {kv} keys (sliding window), as genai's ring does"
        );
        // Prefill frames (more than one row) that end past kv_cache_size: the prompt's chunks
        // (a one-token prompt goes to tbt when there is one), and every decode step when the HEF
        // has no tbt group.
        let tbt = self.driver.has_tbt();
        let (prompt, steps) = (inputs.prompt.len(), inputs.decode.steps());
        let mut full = 0;
        if !(tbt && prompt == 1) {
            let mut end = 0usize;
            for c in crate::device::frames::chunks(prompt, p) {
                end = end.saturating_add(c);
                full += usize::from(end > kv);
            }
        }
        if !tbt {
            // Step k ends at prompt + k + 1 tokens: past kv for every k >= kv − prompt.
            full += steps - steps.min(kv.saturating_sub(prompt));
        }
        if full > 0 {
            note += &format!(
                "; {full} prefill frame(s) of {p} rows ran past it, whose rows before the last see only the ring's \
                 newest {kv} − {p} + row + 1 keys, not a full window: drift from there on may be the ring's, not the HEF's"
            );
        }
        Some((kv, note))
    }

    /// Feed `inputs` (decode teacher-forced, or greedy on the device's own argmax).
    pub fn drive(
        &mut self,
        inputs: &InputSet,
        taps: &TapSelection,
        sink: &mut dyn TapSink,
        record: &mut RunRecord,
    ) -> Result<()> {
        self.check_inputs(inputs)?;
        self.driver.new_conversation()?;
        self.driver.take_exposed();
        let logits = self.driver.prefill(&inputs.prompt)?;
        let mut exposed = self.driver.take_exposed().into_iter();
        let row = |v: Vec<f32>| ArrayD::from_shape_vec(IxDyn(&[1, v.len()]), v).expect("one row");
        let mut last = Vec::new();
        let n = logits.len();
        for (i, l) in logits.into_iter().enumerate() {
            let frame = exposed.next();
            let phase = match inputs.chunk {
                Some(_) => Phase::PrefillChunk(i),
                None if i + 1 == n => Phase::Prefill,
                None => continue,
            };
            record.phases.push((phase, Vec::new(), Vec::new()));
            record.argmax.push(crate::model::decoder::argmax(&l) as u32);
            last = l.clone();
            if !l.is_empty() {
                sink.put_array(Key::new(phase, Tap::Logits), row(l))?;
            }
            for (tap, a) in frame.map_or(Ok(Vec::new()), |f| self.exposed_taps(f, taps))? {
                sink.put_array(Key::new(phase, tap), a)?;
            }
        }
        for k in 0..inputs.decode.steps() {
            let token = match &inputs.decode {
                DecodeSpec::Forced(t) => t[k],
                DecodeSpec::Greedy(_) => crate::model::decoder::argmax(&last) as u32,
            };
            record.decode_tokens.push(token);
            let l = self.driver.step(token)?;
            record.phases.push((Phase::Decode(k), vec![token], Vec::new()));
            record.argmax.push(crate::model::decoder::argmax(&l) as u32);
            last = l.clone();
            if !l.is_empty() {
                sink.put_array(Key::new(Phase::Decode(k), Tap::Logits), row(l))?;
            }
            for frame in self.driver.take_exposed() {
                for (tap, a) in self.exposed_taps(frame, taps)? {
                    sink.put_array(Key::new(Phase::Decode(k), tap), a)?;
                }
            }
        }
        Ok(())
    }
}

impl HefBackend {
    /// Where each figure of this HEF comes from: which outputs are the logits, which taps were
    /// measured (and how their values reached the host), and that every other tap is inferred.
    pub fn outputs_note(&self) -> String {
        let outputs = self.driver.outputs();
        let logits: Vec<String> =
            outputs.iter().filter(|(_, _, t)| !t).map(|(_, o, _)| format!("`{}`", o.name)).collect();
        let mut note = match logits.is_empty() {
            true => format!("backend `{}`: no logits (a graph cut before lm_head)", self.name),
            false => format!("backend `{}`: logits from {}", self.name, logits.join(", ")),
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

impl HefBackend {
    /// A compiled suffix HEF's first block, as declared (`first_layer`); a simulated HEF's own
    /// range must agree with a declaration.
    pub fn declare_first_layer(&mut self, k: Option<usize>, layers: usize) -> Result<()> {
        let Some(k) = k else { return Ok(()) };
        let own = self.sim.as_ref().and_then(|s| s.layers).map(|[a, _]| a);
        if k >= layers || own.is_some_and(|a| a != k) || (self.sim.is_some() && own.is_none() && k != 0) {
            return Err(Error::usage(format!(
                "backend `{}`: first_layer = {k}, but {}",
                self.name,
                match own {
                    Some(a) => format!("the simulated HEF starts at block {a}"),
                    None if self.sim.is_some() => "the simulated HEF starts at block 0".to_string(),
                    None => format!("the checkpoint has {layers} blocks"),
                }
            )));
        }
        self.first_layer = k;
        Ok(())
    }

    fn feed_needed(&self, k: usize) -> Error {
        Error::usage(format!(
            "backend `{}` starts at block {k} (a suffix HEF): it is fed the reference's layers.{}.out, so run it \
             with a reference that records that tap",
            self.name,
            k - 1
        ))
    }

    /// The hidden state entering block `k` at every position, in run order: the reference's
    /// `layers.{k-1}.out` of each phase, rows concatenated.
    fn hidden_rows(&self, reference: &dyn Store, k: usize) -> Result<Vec<Vec<f32>>> {
        let tap = Tap::Layer(k - 1, crate::tap::LayerTap::Out);
        let mut rows = Vec::new();
        for phase in crate::capture::phases(reference) {
            let a = reference.get(&Key::new(phase, tap))?.ok_or_else(|| self.feed_needed(k))?;
            rows.extend(a.outer_iter().map(|r| r.iter().copied().collect::<Vec<f32>>()));
        }
        Ok(rows)
    }
}

impl Backend for HefBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn device(&self) -> Option<crate::device::DeviceFacts> {
        Some(self.facts.clone())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { all_taps: false, overrides: false, fed: self.first_layer > 0 }
    }

    fn reference_window(&self, inputs: &InputSet) -> Option<(usize, String)> {
        self.ring_window(inputs)
    }

    fn follow_inputs(&self, inputs: &InputSet) -> Option<(InputSet, String)> {
        self.follow_chunk(inputs)
    }

    fn expected(&mut self, ckpt: &Checkpoint) -> Result<Option<Arc<Expected>>> {
        HefBackend::expected(self, ckpt).map(Some)
    }

    fn emulation(&self) -> Option<super::Emulation> {
        let frames = self.frames()?;
        let outputs = self.tap_outputs.iter().map(|t| t.tap).collect();
        let make = move |ckpt: &Checkpoint, faults: &[FaultSpec], first| {
            Ok(frames.backend(ckpt, faults, first)?.map(|b| Box::new(b) as Box<dyn Backend>))
        };
        Some(super::Emulation::new(Arc::new(make), outputs))
    }

    fn notes(&self) -> Vec<String> {
        vec![self.outputs_note()]
    }

    fn run(
        &mut self,
        inputs: &InputSet,
        taps: &TapSelection,
        feed: Option<&dyn Store>,
        sink: &mut dyn TapSink,
    ) -> Ran {
        let mut record = RunRecord::default();
        match (feed, self.first_layer) {
            (Some(_), 0) => return no_feed(&self.name),
            (None, 0) => self.driver.feed = None,
            (feed, k) => match feed.ok_or_else(|| self.feed_needed(k)).and_then(|f| self.hidden_rows(f, k)) {
                Ok(rows) => self.driver.feed = Some(rows),
                Err(e) => return Ran { record, error: Some(e) },
            },
        }
        let error = self.drive(inputs, taps, sink, &mut record).err();
        Ran { record, error }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::doctor::{findings, Probe, Verdict};
    use crate::device::RealDevice;

    /// `doctor` and every device open (the suite's, `run`'s) judge a HEF's architecture by the
    /// same table: for every hw_arch and every device HailoRT 5.2 names, doctor's verdict is
    /// ok exactly where the open accepts the HEF.
    #[test]
    fn doctor_and_the_device_open_agree_on_every_architecture_pair() {
        let devices =
            ["HAILO8_A0", "HAILO8", "HAILO8L", "HAILO15H", "HAILO15L", "HAILO15M", "HAILO10H", "HAILO12L"];
        for hw_arch in (0..=8).chain(99..=110) {
            let hef = Hef {
                version: 0,
                hw_arch,
                sdk_version: String::new(),
                groups: Vec::new(),
                resources: Vec::new(),
                extensions: Vec::new(),
            };
            for arch in devices {
                let probe = Probe::Real {
                    library: Ok((5, 2, 0)),
                    device: Ok(RealDevice {
                        device_ids: "x".into(),
                        architecture: Some(arch.into()),
                        cache_local: true,
                    }),
                };
                let f = findings(&probe, &[], Some((Path::new("m.hef"), &hef)));
                let doctor = f.iter().find(|x| x.item == "HEF m.hef").expect("a HEF finding").verdict;
                let opens = check_arch(hw_arch, Some(arch), "m.hef").is_ok();
                assert_eq!(doctor == Verdict::Ok, opens, "hw_arch {hw_arch} on {arch}");
            }
        }
        assert!(check_arch(5, Some("HAILO10H"), "m.hef").is_err(), "the deprecated id runs nowhere");
        assert!(check_arch(0, Some("HAILO8"), "m.hef").is_ok());
    }
}
