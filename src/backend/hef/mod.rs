//! The `hef` backend: a HEF on a device — the simulated device for HEFs `synth-hef` wrote,
//! the real Hailo-10H otherwise (feature `hailo`). It captures what a device returns: the
//! logits of each phase's last position ([1, vocab]), as HailoRT's server reads them.

use super::runner::{no_feed, Backend, Capabilities, Ran};
use crate::capture::{Store, TapSink};
use crate::device::driver::LlmDriver;
use crate::device::open::Opened;
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

mod outputs;

/// An output beyond the logits and the tap it is.
#[derive(Clone)]
struct TapOutput {
    output: String,
    tap: Tap,
    /// From an output map entry: the wire array [h, w, f] to the capture layout of a frame.
    transform: Option<crate::backend::map::Transform>,
}

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
    /// The network group named on the backend (`group=NAME`), or None for genai's choice.
    pub group: Option<String>,
    /// A base-scope group's own greedy generation in the last run ([`HefBackend::greedy`]).
    served: Option<super::generation::Served>,
    /// Kept alive for the driver's configured models.
    _device: Box<dyn Device>,
}

/// The HEF at `path` on its device ([`crate::device::open`]) as the `hef` backend `label`, on
/// the groups `group` names (genai's choice when None), its exposed outputs taken by their names.
pub fn open_hef(
    label: &str,
    path: &Path,
    profile: Option<SimProfile>,
    group: Option<&str>,
) -> Result<HefBackend> {
    let mut b = HefBackend::new(label, crate::device::open::open(path, profile, group)?);
    b.group = group.map(str::to_string);
    b.with_convention(&path.display().to_string())
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
    /// The HEF's embeddings table, decoded by the first backend and shared by the rest.
    embeddings: Arc<std::sync::OnceLock<Arc<[u16]>>>,
    /// The groups the backend drives (`group=NAME`; None: genai's choice).
    group: Option<String>,
}

impl Frames {
    /// The HEF on a simulated device computing `faults` (and nothing it was made with) through
    /// the expected quantization, on `ckpt`'s weights; None when a fault acts on positions,
    /// which the device never receives, or changes the graph's output (no lm_head: hidden-wide,
    /// which this HEF's vocab-wide output cannot hold): [`crate::fault::OnDevice`].
    /// `first`: faults whose hooks go ahead of the device's (explain's instrument); `trim`:
    /// the device leaves out the frame rows nothing reads (the same bits come back).
    pub fn backend(
        &self,
        ckpt: &Checkpoint,
        faults: &[FaultSpec],
        (first, trim): (Vec<Box<dyn crate::fault::Fault>>, bool),
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
            (first, quantized, trim),
        )?;
        let driver = LlmDriver::open_sharing(
            &mut dev,
            &self.hef,
            &self.what,
            self.group.as_deref(),
            &self.embeddings,
        )?;
        let mut b = HefBackend::from_parts("explain", Box::new(dev), driver, self.hef.clone());
        b.group = self.group.clone();
        b.driver.set_taps(&self.taps.iter().map(|t| t.output.clone()).collect());
        b.tap_outputs = self.taps.clone();
        Ok(Some(b))
    }
}

/// The `hef` backend for the HEF at `path` (on the groups `group` names), refused when it was
/// made from another checkpoint than the reference's.
pub fn open(
    label: &str,
    path: &Path,
    (profile, group): (Option<SimProfile>, Option<&str>),
    ckpt: &Checkpoint,
) -> Result<HefBackend> {
    let b = open_hef(label, path, profile, group)?;
    b.check_made_from(path, ckpt)?;
    Ok(b)
}

impl HefBackend {
    fn new(name: &str, opened: Opened) -> Self {
        let first_layer = opened.sim.as_ref().and_then(|(_, s)| s.layers).map_or(0, |[a, _]| a);
        let (made_from, sim) = opened.sim.map_or((None, None), |(h, s)| (Some(h), Some(s)));
        HefBackend {
            name: name.to_string(),
            driver: opened.driver,
            hef: opened.hef,
            facts: opened.facts,
            description: opened.description,
            made_from,
            sim,
            declared: None,
            expected: None,
            tap_outputs: Vec::new(),
            output_map: None,
            first_layer,
            group: None,
            served: None,
            _device: opened.device,
        }
    }

    pub fn from_parts(
        name: &str,
        device: Box<dyn Device>,
        driver: LlmDriver,
        hef: impl Into<Arc<Hef>>,
    ) -> Self {
        let hef = hef.into();
        let sim = sim_spec(&hef, name).ok().flatten();
        let (facts, description) = (device.facts(), device.describe());
        HefBackend { sim, ..Self::new(name, Opened { device, hef, driver, facts, description, sim: None }) }
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
        let calibration =
            self.sim.as_ref().map_or_else(|| Calibration::default_for(ckpt), |s| Ok(s.calibration(vocab)))?;
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
            embeddings: Arc::default(),
            group: self.group.clone(),
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

    /// The probe's chunk and the HEF's frame rows when they cut the prompt differently. A
    /// chunk that cuts it as the frames do (e.g. a prompt shorter than both) is the same run.
    fn other_cut(&self, inputs: &InputSet) -> Option<(usize, usize)> {
        let p = self.driver.prefill_tokens();
        let cut = |c| crate::inputs::chunks(inputs.prompt.len(), c);
        inputs.chunk.filter(|&c| c != p && cut(c) != cut(p)).map(|c| (c, p))
    }

    fn check_inputs(&self, inputs: &InputSet) -> Result<()> {
        let p = self.driver.prefill_tokens();
        if inputs.start_position != 0 {
            return Err(Error::usage("a device conversation starts at position 0; remove start_position"));
        }
        if let Some(frame) = self.driver.base_scope_frame() {
            let need = inputs.prompt.len().saturating_add(inputs.decode.steps());
            if need > frame {
                return Err(Error::usage(format!(
                    "backend `{}` runs base-scope group `{}`, whose one frame holds {frame} positions; the prompt \
                     ({} tokens) and {} decode steps need {need}: shorten the prompt or set decode ≤ {}",
                    self.name,
                    self.driver.prefill_group(),
                    inputs.prompt.len(),
                    inputs.decode.steps(),
                    frame.saturating_sub(inputs.prompt.len())
                )));
            }
        }
        // Only a different cut is refused (a run follows it first: `follow_inputs`).
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

    /// A base-scope group generating on its own, as the exporter's `generate_base_scope.py` runs it
    /// (@6cf9164a): the prompt, then each step's argmax appended and the whole prefix re-run, for
    /// as many tokens as the reference predicts (the last prompt row's and each decode step's).
    /// Beside it, the teacher-forced run's argmaxes (`record`) are the one-token continuations of
    /// the reference's own prefixes. Compared token by token with the reference (compare::tokens).
    fn greedy(&mut self, inputs: &InputSet, record: &RunRecord) -> Result<super::generation::Served> {
        use super::generation::{Finish, Generation, Served, TokenInfo};
        let steps = inputs.decode.steps();
        let frames_kept = self.driver.record.take();
        self.driver.new_conversation()?;
        let mut logits = self.driver.prefill(&inputs.prompt)?.pop().unwrap_or_default();
        let mut ids = Vec::with_capacity(steps + 1);
        for k in 0..=steps {
            let t = crate::model::decoder::argmax(&logits) as u32;
            ids.push(t);
            if k < steps {
                logits = self.driver.step(t)?;
            }
        }
        self.driver.take_exposed();
        self.driver.record = frames_kept;
        // Ids only: their texts are decoded where the checkpoint's tokenizer is (compare::tokens).
        let of = |ids: &[u32]| Generation {
            text: String::new(),
            tokens: ids
                .iter()
                .map(|&id| TokenInfo { text: String::new(), id: Some(id), top: Vec::new() })
                .collect(),
            finish: Finish::Length,
            count: Some(ids.len()),
            prompt_tokens: None,
        };
        let forced =
            record.argmax[record.argmax.len().saturating_sub(steps + 1)..].iter().map(|t| Some(of(&[*t])));
        let group = self.driver.prefill_group().to_string();
        Ok(Served {
            server: format!("base-scope group `{group}` of `{}`, greedy on the device", self.name),
            greedy: of(&ids),
            forced: Some(forced.collect()),
            forced_unavailable: None,
            prompt: String::new(),
            prompt_tokens: inputs.prompt.len(),
            max_tokens: steps + 1,
        })
    }

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

    /// The sliding window the reference needs to be comparable with this HEF on `inputs`, and
    /// the note that says so: kv_cache_size when the conversation is longer than that. Exact
    /// for tbt steps past the limit (one row sees the ring's kv_cache_size newest entries, as a
    /// window of that many keys does); a prefill frame past it gives its earlier rows fewer keys
    /// (row t of T sees kv − T + t + 1, the mask's columns being the ring's newest entries),
    /// which a sliding window does not model, and the note says that too.
    fn check_inputs(&self, inputs: &InputSet) -> Result<()> {
        HefBackend::check_inputs(self, inputs)
    }

    fn reference_window(&self, inputs: &InputSet) -> Option<(usize, String)> {
        // A base-scope frame holds the whole conversation or refuses it (check_inputs).
        if self.driver.base_scope_frame().is_some() {
            return None;
        }
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
            for c in crate::inputs::chunks(prompt, p) {
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

    /// A probe whose `chunk` cuts the prompt otherwise than the HEF's prefill frame: the same
    /// inputs chunked as genai feeds this HEF (remainder first, then frames of
    /// prefill_input_tokens_count rows), and the note that says so. `None` when the cuts agree.
    fn follow_inputs(&self, inputs: &InputSet) -> Option<(InputSet, String)> {
        let (c, p) = self.other_cut(inputs)?;
        let cut = |c| crate::inputs::chunks(inputs.prompt.len(), c);
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

    fn expected(&mut self, ckpt: &Checkpoint) -> Result<Option<Arc<Expected>>> {
        HefBackend::expected(self, ckpt).map(Some)
    }

    fn emulation(&self) -> Option<super::runner::Emulation> {
        let frames = self.frames()?;
        let outputs = self.tap_outputs.iter().map(|t| t.tap).collect();
        let make = move |ckpt: &Checkpoint, faults: &[FaultSpec], first, trim| {
            Ok(frames.backend(ckpt, faults, (first, trim))?.map(|b| Box::new(b) as Box<dyn Backend>))
        };
        Some(super::runner::Emulation::new(Arc::new(make), outputs))
    }

    fn notes(&self) -> Vec<String> {
        vec![self.outputs_note()]
    }

    fn served(&mut self) -> Option<super::generation::Served> {
        self.served.take()
    }

    fn logits_shards(&self) -> Option<Vec<usize>> {
        let widths = self.driver.logits_widths();
        (widths.len() > 1).then_some(widths)
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
        let mut error = self.drive(inputs, taps, sink, &mut record).err();
        if error.is_none() && self.driver.base_scope_frame().is_some() && inputs.decode.steps() > 0 {
            match self.greedy(inputs, &record) {
                Ok(served) => self.served = Some(served),
                Err(e) => error = Some(e),
            }
        }
        Ran { record, error }
    }
}
