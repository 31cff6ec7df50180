//! Running a probe, in named stages that can each be called (and tested) alone:
//! [`prepare`] (checkpoint, InputSet, taps, thresholds, backends, where captures live),
//! [`run_backends`] (the reference and every backend into captures, the Polygraphy split),
//! [`compare_runs`] (compare, locate, local view, logit lens), [`explain_stage`] and
//! [`save`]; [`report`] builds the report from what they returned. Whatever finished is kept
//! when something fails.
//!
//! Captures are held in memory while they fit the memory budget. When they do not, a run
//! that may spill ([`CaptureOptions::spill`]) streams every capture to an `.npz` in a
//! temporary folder as it is produced ([`SpillPlan`]); every later stage reads captures
//! through [`Store`], one tap of each side at a time, whichever they are.

use crate::backend::decoder::DecoderBackend;
use crate::backend::overrides::Overrides;
use crate::backend::{run_to, Backend, Capabilities, Run};
use crate::backend::{BackendKind, BackendSpec};
use crate::capture::{Place, Store};
use crate::compare::lens::LensRow;
use crate::compare::thresholds::{self, Thresholds};
use crate::compare::{compare, lens, locate, Beyond, PairComparison, RowStatus, Settings, View};
use crate::error::{Error, Result};
use crate::explain::ExplainSpec;
use crate::fault::expected::{Expected, Realization};
use crate::fault::Fault;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::memory::{self, TapsHeld};
use crate::model::run::RunRecord;
use crate::model::tokenizer::{Tokenizer, SYNTH_TOKENIZER_VOCAB};
use crate::model::{Checkpoint, CheckpointRef, Decoder};
use crate::probe::schema::{InputsSpec, Probe};
use crate::probe::spill::{spill_note, spill_plan, SpillDir};
pub use crate::probe::spill::{CaptureOptions, SpillPlan};
use crate::report::{BackendInfo, BackendStatus, CheckpointInfo, InputInfo, ProbeInfo, Report};
use crate::tap::{Key, TapSelection};
use std::sync::Arc;

/// What the command line changes in a probe, and where its captures go.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub probe: ProbeOverrides,
    pub captures: CaptureOptions,
    /// The command line that reproduces the run, for the Markdown report.
    pub command: String,
}

/// The probe's settings the command line replaces ([`prepare`]).
#[derive(Debug, Clone, Default)]
pub struct ProbeOverrides {
    /// Replace the probe's backends.
    pub backends: Vec<BackendSpec>,
    /// Replace the probe's `[checkpoint]` (`--checkpoint`).
    pub checkpoint: Option<CheckpointRef>,
    /// Extra bounds, `METRIC=V` or `GLOB:METRIC=V`.
    pub thresholds: Vec<String>,
    pub explain: ExplainChoice,
}

/// Whether the run ranks faults: as the probe says, never, or with these settings.
#[derive(Debug, Clone, Default)]
pub enum ExplainChoice {
    #[default]
    AsProbe,
    Off,
    With(ExplainSpec),
}

/// config.json's unknown keys on stderr, for commands whose output has no header (sweep).
pub fn note_unknown_keys(ckpt: &Checkpoint) {
    if let Some(line) = crate::report::format::unknown_keys_line(&ckpt.config.unknown_keys) {
        eprintln!("{line}");
    }
}

/// The tokenizer of a probe's text prompt: the one named, the checkpoint's, or the synth one.
fn tokenizer(spec: &InputsSpec, ckpt: &Checkpoint) -> Result<Tokenizer> {
    use crate::model::weights::CheckpointSource;
    match (&spec.tokenizer, &ckpt.source) {
        (Some(p), _) => Tokenizer::load(p),
        // A folder without one: named as missing, with the fix.
        (None, CheckpointSource::Dir(d)) => Tokenizer::load(&d.join("tokenizer.json")),
        (None, CheckpointSource::Gguf { path, .. }) => Tokenizer::from_gguf(path),
        (None, _) if ckpt.config.vocab_size >= SYNTH_TOKENIZER_VOCAB => Ok(Tokenizer::synth()),
        (None, _) => Err(Error::usage(format!(
            "text needs a tokenizer: this synthesized model's vocabulary ({}) is too small for the \
             byte-level one; give token ids (--tokens 1,2,3, or tokens = [...] in a probe)",
            ckpt.config.vocab_size
        ))),
    }
}

/// The InputSet of a probe's `[inputs]` (the command line's prompt flags build the same spec).
pub fn build_inputs(spec: &InputsSpec, ckpt: &Checkpoint) -> Result<InputSet> {
    let (prompt, bos_added) = match (&spec.tokens, &spec.text) {
        (Some(t), _) => (t.clone(), None),
        (None, Some(text)) => {
            let enc = tokenizer(spec, ckpt)?.encode(text, spec.add_special_tokens)?;
            (enc.ids, Some(enc.bos_added))
        }
        (None, None) => {
            return Err(Error::usage(
                "no prompt: give token ids (--tokens 1,2,3, or tokens = [...] in a probe) or text (--text / text = \"...\")",
            ))
        }
    };
    let decode = match (&spec.decode_tokens, spec.decode) {
        (Some(t), _) => DecodeSpec::Forced(t.clone()),
        (None, Some(n)) => DecodeSpec::Greedy(n),
        (None, None) => DecodeSpec::Forced(Vec::new()),
    };
    let inputs =
        InputSet { prompt, chunk: spec.chunk, decode, start_position: spec.start_position, bos_added };
    inputs.validate(ckpt.config.vocab_size, ckpt.config.max_position_embeddings)?;
    Ok(inputs)
}

/// Say which probe (and table) a budget or usage refusal came from.
fn in_probe(e: Error, what: &str) -> Error {
    match e {
        Error::Budget { what: w, needs, budget, budget_from, fix } => {
            Error::Budget { what: format!("{what}: {w}"), needs, budget, budget_from, fix }
        }
        Error::Usage(msg) => Error::Usage(format!("{what}: {msg}")),
        other => other,
    }
}

pub fn checkpoint_info(ckpt: &Checkpoint) -> CheckpointInfo {
    let c = &ckpt.config;
    CheckpointInfo {
        source: ckpt.source.to_string(),
        hash: ckpt.hash.clone(),
        arch: c.arch.name().into(),
        layers: c.num_layers,
        hidden: c.hidden_size,
        heads: c.num_heads,
        kv_heads: c.num_kv_heads,
        head_dim: c.head_dim,
        vocab: c.vocab_size,
        stored_dtype: ckpt.stored_dtype.clone(),
        defaults_applied: c.defaults_applied.clone(),
    }
}

/// Taps the reference must record beyond the probe's selection: what the local view and
/// the attention masks need.
fn reference_selection(probe_taps: &[String]) -> Result<TapSelection> {
    let mut globs = probe_taps.to_vec();
    globs.extend(["embed", "layers.*.out", "layers.*.attn.scores", "logits"].map(String::from));
    TapSelection::parse(&globs)
}

fn status_of(record: &RunRecord, error: Option<&Error>) -> BackendStatus {
    match error {
        None => BackendStatus::Ok,
        Some(e) => {
            BackendStatus::Stopped { after: record.phases.last().map(|(p, _, _)| *p), error: e.to_string() }
        }
    }
}

/// Stage 1's output: everything a run needs, checked before anything runs.
pub struct Prepared {
    pub ckpt: Checkpoint,
    pub model: Arc<Decoder>,
    pub inputs: InputSet,
    pub selection: TapSelection,
    pub thresholds: Thresholds,
    pub specs: Vec<BackendSpec>,
    /// The command line replaced the probe's backends (explain then observes the first one,
    /// unless it names one of them).
    pub replaced_backends: bool,
    /// The probe's `[compare]` settings.
    pub local: bool,
    pub lens: bool,
    /// The explain settings of this run (the command line's, else the probe's), if it explains.
    pub explain: Option<ExplainSpec>,
    pub probe: ProbeInfo,
    /// Set when the captures do not fit the budget in memory and go to disk instead.
    pub spill: Option<SpillPlan>,
}

/// A capture's file name: `NAME.npz` with anything but letters, digits, `-` and `.` as `_`.
fn capture_file(name: &str) -> String {
    let safe: String =
        name.chars().map(|c| if c.is_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
    format!("{safe}.npz")
}

/// One backend's captures: the cumulative run and, where it takes overrides, the local view.
pub struct BackendOutput {
    pub spec: BackendSpec,
    pub label: String,
    pub capabilities: Capabilities,
    pub status: BackendStatus,
    pub capture: Box<dyn Store>,
    pub local: Option<(TapSelection, Box<dyn Store>)>,
    pub error: Option<Error>,
    /// The float reference this backend is compared with when it needs its own
    /// ([`Backend::reference_window`]): its label, capture, and the note that says why.
    pub reference: Option<(String, Box<dyn Store>, String)>,
    /// What the backend computes when nothing is wrong ([`Backend::expected`]): the backend
    /// is judged on its excess over it.
    pub expected: Option<ExpectedRun>,
    /// Where its figures come from ([`Backend::notes`]).
    pub notes: Vec<String>,
    /// The device it ran on ([`Backend::device`]).
    pub device: Option<crate::device::DeviceFacts>,
    /// The inputs it ran when not the probe's ([`Backend::follow_inputs`]).
    pub inputs: Option<InputSet>,
}

/// A backend's expected quantization, emulated twice: the expected draw, and a second draw
/// ([`Realization`]) whose distance from the first is the spread the backend's own draw may
/// show.
pub struct ExpectedRun {
    pub quant: Arc<Expected>,
    /// How explain emulates a candidate as the backend computes it ([`Backend::emulation`]).
    pub emulation: Option<crate::backend::Emulation>,
    pub capture: Box<dyn Store>,
    pub realization: Box<dyn Store>,
}

impl BackendOutput {
    /// The float reference of this backend, and its label.
    pub fn float_reference<'a>(&'a self, runs: &'a Runs) -> (&'a str, &'a dyn Store) {
        match &self.reference {
            Some((l, c, _)) => (l, c.as_ref()),
            None => ("reference", runs.reference.as_ref()),
        }
    }

    /// What explain takes as clean for this backend, and its label: its expected emulation,
    /// else its float reference.
    pub fn clean<'a>(&'a self, runs: &'a Runs) -> (&'a str, &'a dyn Store) {
        match &self.expected {
            Some(e) => ("expected", e.capture.as_ref()),
            None => self.float_reference(runs),
        }
    }
}

/// Stage 2's output.
pub struct Runs {
    pub reference: Box<dyn Store>,
    /// What the reference fed (greedy decoding resolved) and when each phase ran.
    pub inputs: InputInfo,
    pub backends: Vec<BackendOutput>,
    /// The folders of a spilled run; the temporary one goes when this is dropped.
    pub spill: Option<SpillDir>,
}

impl Runs {
    pub fn backend(&self, label: &str) -> Option<&BackendOutput> {
        self.backends.iter().find(|b| b.label == label)
    }

    /// Every capture of the run: the reference, each backend's own reference, capture and
    /// local view.
    pub fn stores(&self) -> impl Iterator<Item = &dyn Store> {
        let backends = self.backends.iter();
        std::iter::once(self.reference.as_ref())
            .chain(backends.clone().filter_map(|b| b.reference.as_ref().map(|(_, c, _)| c.as_ref())))
            .chain(
                backends.clone().flat_map(|b| {
                    b.expected.iter().flat_map(|e| [e.capture.as_ref(), e.realization.as_ref()])
                }),
            )
            .chain(backends.clone().map(|b| b.capture.as_ref()))
            .chain(backends.filter_map(|b| b.local.as_ref().map(|(_, c)| c.as_ref())))
    }
}

/// Stage 1: load the checkpoint (the command line's replaces the probe's), build the InputSet,
/// parse taps and thresholds, pick the backends (the command line's replace the probe's), and
/// plan where the captures live.
pub fn prepare(probe: &Probe, opts: &RunOptions) -> Result<Prepared> {
    let what = probe.path.display().to_string();
    let over = &opts.probe;
    // Thresholds first: a bad `--threshold` is refused before a model is built.
    let mut thresholds: Thresholds = probe.thresholds.build()?;
    for t in &over.thresholds {
        thresholds.add_cli(t)?;
    }
    let specs: Vec<BackendSpec> =
        if over.backends.is_empty() { probe.backends.clone() } else { over.backends.clone() };
    if specs.is_empty() {
        return Err(Error::usage(format!(
            "{what}: no backend to compare with the reference; add a [[backend]] or pass --backend"
        )));
    }
    let ckpt = match &over.checkpoint {
        Some(c) => c.load()?,
        None => {
            probe.checkpoint.to_ref()?.load().map_err(|e| in_probe(e, &format!("{what} [checkpoint]")))?
        }
    };
    let layers = ckpt.config.num_layers;
    let inputs = build_inputs(&probe.inputs, &ckpt)?;
    let selection = TapSelection::parse(&probe.taps)?;
    selection.check_against(layers)?;
    thresholds.check_globs(&crate::tap::tap_names(layers), layers).map_err(|e| in_probe(e, &what))?;
    let explain = match &over.explain {
        ExplainChoice::AsProbe => probe.explain.clone(),
        ExplainChoice::Off => None,
        ExplainChoice::With(e) => Some(e.clone()),
    };
    let spill = plan_memory(&ckpt, &inputs, (probe, &specs), explain.is_some(), &opts.captures)
        .map_err(|e| in_probe(e, &format!("{what} [inputs]")))?;
    let model = Arc::new(Decoder::new(&ckpt)?);
    Ok(Prepared {
        ckpt,
        model,
        inputs,
        selection,
        thresholds,
        specs,
        replaced_backends: !over.backends.is_empty(),
        local: probe.compare.local,
        lens: probe.compare.lens,
        explain,
        probe: ProbeInfo {
            name: probe.name.clone(),
            question: probe.question.clone(),
            finding: probe.finding,
            file: Some(probe.path.display().to_string()),
            command: opts.command.clone(),
        },
        spill,
    })
}

/// Whether the captures fit the memory budget held in memory (None), or are spilled to disk
/// (the plan); refused when neither fits. The reference and every backend keep their
/// captures (a local view is one more each); explain holds one emulation at a time, two while
/// it checks a tie. The weights count once, in their stored dtype: emulators share them.
fn plan_memory(
    ckpt: &Checkpoint,
    inputs: &InputSet,
    (probe, specs): (&Probe, &[BackendSpec]),
    explain: bool,
    opts: &CaptureOptions,
) -> Result<Option<SpillPlan>> {
    let captures = 1 + 2 * specs.len() as u64 + if explain { 2 } else { 0 };
    let ref_taps = reference_selection(&probe.taps)?;
    let held = memory::estimate(&ckpt.config, inputs, &ref_taps, TapsHeld::InMemory { captures })
        .with_weights(memory::held(ckpt));
    let in_memory = held.total();
    let budget = crate::budget::current();
    if budget.allows(in_memory) || !opts.spill {
        memory::check(&held, inputs)?;
        return Ok(None);
    }
    let run = crate::probe::spill::Planned { ckpt, inputs, ref_taps: &ref_taps, specs };
    spill_plan(&run, (probe.compare.local, explain), (in_memory, budget), opts).map(Some)
}

/// How [`run_backends`] gets each backend: [`crate::backend::make_backend`], or a caller's own
/// (the suite keeps one device open across probes instead of reopening it per probe).
pub type OpenBackend<'a> =
    dyn FnMut(&BackendSpec, &Checkpoint, &Arc<Decoder>) -> Result<Box<dyn Backend>> + 'a;

/// Where one run's capture goes: memory, or a file in the spill folder.
struct Places<'a>(Option<&'a SpillDir>);

impl Places<'_> {
    fn capture(&self, name: &str) -> Place {
        self.0.map_or(Place::Memory, |s| Place::File(s.captures.join(capture_file(name))))
    }

    fn local(&self, name: &str) -> Place {
        self.0.map_or(Place::Memory, |s| {
            Place::File(s.tmp.path().join(format!("local.{}", capture_file(name))))
        })
    }
}

/// Stage 2: the reference (which resolves greedy decoding once), then every backend
/// teacher-forced on its tokens, each with its local view where it takes overrides. A backend
/// that stops half-way keeps what it finished; a backend that cannot start is an error.
/// `open` makes each backend ([`crate::backend::make_backend`] unless the caller has its own).
pub fn run_backends(p: &mut Prepared, opts: &CaptureOptions, open: &mut OpenBackend) -> Result<Runs> {
    let progress = crate::progress::bar(p.specs.len() as u64 + 1, "{spinner} {msg} [{pos}/{len}]");
    progress.set_message("reference");
    let spill = p.spill.as_ref().map(|plan| SpillDir::create(plan, opts)).transpose()?;
    if let (Some(plan), Some(dir)) = (&p.spill, &spill) {
        // Said now as well as in the report: a long run fills the disk meanwhile.
        eprintln!("{}", crate::probe::spill::spill_start(plan, dir));
    }
    let places = Places(spill.as_ref());
    let result = run_reference(p, opts, &places).and_then(|(reference, inputs)| {
        let mut backends = Vec::new();
        for spec in p.specs.clone() {
            progress.inc(1);
            progress.set_message(spec.label());
            backends.push(run_backend(p, &spec, reference.as_ref(), &places, open)?);
        }
        Ok((reference, inputs, backends))
    });
    progress.finish_and_clear();
    let (reference, inputs, backends) = result?;
    Ok(Runs { reference, inputs, backends, spill })
}

/// The reference run: greedy decoding is resolved here, once; every backend is teacher-forced.
fn run_reference(
    p: &mut Prepared,
    opts: &CaptureOptions,
    places: &Places,
) -> Result<(Box<dyn Store>, InputInfo)> {
    let mut reference = DecoderBackend::reference(p.model.clone());
    let ref_taps = reference_selection(p.selection.globs())?;
    let run = run_to(&mut reference, &p.inputs, &ref_taps, None, &places.capture("reference"))?;
    if let Some(e) = run.error {
        return Err(e);
    }
    if let DecodeSpec::Greedy(_) = p.inputs.decode {
        p.inputs.decode = DecodeSpec::Forced(run.record.decode_tokens.clone());
    }
    if let Some(path) = &opts.save_inputs {
        p.inputs.to_npz(path)?;
    }
    let info = InputInfo {
        prompt_tokens: p.inputs.prompt.len(),
        bos: p.inputs.bos_note().to_string(),
        chunk: p.inputs.chunk,
        phases: run.record.phases.iter().map(|(ph, _, _)| *ph).collect(),
        decode_tokens: run.record.decode_tokens.clone(),
    };
    Ok((run.capture, info))
}

/// One backend: its cumulative run, its own windowed reference where it needs one, and its
/// local view (each layer fed the reference's input) where it takes overrides.
fn run_backend(
    p: &Prepared,
    spec: &BackendSpec,
    reference: &dyn Store,
    places: &Places,
    open: &mut OpenBackend,
) -> Result<BackendOutput> {
    let label = spec.label();
    let mut backend = open(spec, &p.ckpt, &p.model)?;
    if let Err(why) = backend.check() {
        return Err(Error::usage(format!("backend `{label}` cannot run here: {why}")));
    }
    let capabilities = backend.capabilities();
    // A HEF prefills in its own frames: it runs the probe's inputs chunked that way, and is
    // compared with a reference chunked the same.
    let followed = backend.follow_inputs(&p.inputs);
    let inputs = followed.as_ref().map_or(&p.inputs, |f| &f.0);
    // A suffix HEF is fed the reference's hidden state entering its first block.
    let feed = capabilities.fed.then_some(reference);
    let Run { capture, record, error } =
        run_to(backend.as_mut(), inputs, &p.selection, feed, &places.capture(&label))?;
    let window = backend.reference_window(inputs);
    let w = window.as_ref().map_or(0, |w| w.0);
    let notes: Vec<String> =
        [followed.as_ref().map(|f| f.1.clone()), window.map(|w| format!("backend `{label}`: {}", w.1))]
            .into_iter()
            .flatten()
            .collect();
    let windowed = if notes.is_empty() {
        None
    } else {
        let (l, c) = own_reference(p, inputs, w, None, places)?;
        Some((l, c, notes.join("; ")))
    };
    let expected = match backend.expected(&p.ckpt)? {
        Some(quant) => {
            let (_, capture) =
                own_reference(p, inputs, w, Some((Box::new(quant.clone()), "expected")), places)?;
            let second = Box::new(Realization(quant.clone()));
            let (_, realization) =
                own_reference(p, inputs, w, Some((second, "expected-realization")), places)?;
            Some(ExpectedRun { quant, emulation: backend.emulation(), capture, realization })
        }
        None => None,
    };
    let mut local = None;
    if p.local && capabilities.overrides && error.is_none() {
        let taps = TapSelection::parse(
            &[p.selection.globs().to_vec(), Overrides::required_taps(p.ckpt.config.num_layers)].concat(),
        )?;
        // As the cumulative run, a local run that stops keeps what it finished.
        let run = run_to(backend.as_mut(), inputs, &taps, Some(reference), &places.local(&label))?;
        local = Some((taps, run.capture));
    }
    Ok(BackendOutput {
        spec: spec.clone(),
        status: status_of(&record, error.as_ref()),
        label,
        capabilities,
        capture,
        local,
        error,
        reference: windowed,
        expected,
        notes: backend.notes(),
        device: backend.device(),
        inputs: followed.map(|f| f.0),
    })
}

/// A backend's own reference, run on the same inputs (decode already teacher-forced): every
/// layer's attention limited to the last `window` keys when `window` > 0
/// ([`Decoder::windowed`]), and with the quantization `expected` (a fault, and its label)
/// when given.
fn own_reference(
    p: &Prepared,
    inputs: &InputSet,
    window: usize,
    expected: Option<(Box<dyn Fault>, &str)>,
    places: &Places,
) -> Result<(String, Box<dyn Store>)> {
    let mut label = String::from(expected.as_ref().map_or("reference", |e| e.1));
    if window > 0 {
        label += &format!("[window={window}]");
    }
    if let Some(c) = inputs.chunk.filter(|_| inputs.chunk != p.inputs.chunk) {
        label += &format!("[chunk={c}]");
    }
    let mut backend = match expected {
        Some((e, _)) => DecoderBackend::with_faults(&label, &p.ckpt, vec![e])?,
        None => DecoderBackend::reference(p.model.clone()),
    };
    if window > 0 {
        backend = backend.windowed(window);
    }
    let taps = reference_selection(p.selection.globs())?;
    let run = run_to(&mut backend, inputs, &taps, None, &places.capture(&label))?;
    match run.error {
        Some(e) => Err(e),
        None => Ok((label, run.capture)),
    }
}

/// What stage 3 found for one backend.
pub struct Compared {
    pub label: String,
    /// The float reference against the backend, judged (on the excess over `expected` when
    /// there is one).
    pub cumulative: PairComparison,
    /// The float reference against the backend's expected emulation: its quantization's own
    /// noise, shown beside and not judged.
    pub expected: Option<PairComparison>,
    /// The local view's comparison, and the layers whose own error fails there when the
    /// cumulative view failed.
    pub local: Option<(PairComparison, Option<Vec<usize>>)>,
    /// A device against the emulator dump it is set beside (`beside`): its excess over what the
    /// compiler's own emulator computed.
    pub beside: Option<PairComparison>,
    pub lens: Option<Vec<LensRow>>,
}

/// Stage 3: compare every backend with the reference (cumulative, then local), locate, blame,
/// logit lens. A dump whose shapes cannot be aligned is an input error naming the tap. What
/// was compared before a failure is kept in `out`.
pub fn compare_runs(p: &Prepared, runs: &Runs, out: &mut Vec<Compared>) -> Result<()> {
    let workers = p.spill.as_ref().map_or(1, |s| s.workers);
    let settings = |view, selection| Settings {
        view,
        thresholds: &p.thresholds,
        selection: Some(selection),
        workers,
        beyond: None,
    };
    let unbounded = p.thresholds.unbounded();
    for b in &runs.backends {
        let (ref_label, reference) = b.float_reference(runs);
        let names = (ref_label, b.label.as_str());
        // The quantization's own noise first, and how far two draws of it fall apart: the
        // backend is judged on its excess over them.
        let noise = Settings { thresholds: &unbounded, ..settings(View::Expected, &p.selection) };
        let (expected, spread) = match &b.expected {
            Some(e) => {
                let expected_label = crate::report::expected_label(&b.label);
                let pair = compare(reference, e.capture.as_ref(), (ref_label, &expected_label), &noise)?;
                let second = (expected_label.as_str(), "its second draw");
                let spread = compare(e.capture.as_ref(), e.realization.as_ref(), second, &noise)?;
                (Some(pair), Some(spread))
            }
            None => (None, None),
        };
        let beyond = expected.as_ref().map(|expected| Beyond { expected, spread: spread.as_ref() });
        let judged = Settings { beyond, ..settings(View::Cumulative, &p.selection) };
        let mut cumulative = compare(reference, b.capture.as_ref(), names, &judged)?;
        cumulative.on_device = b.spec.kind == BackendKind::Hef;
        if b.spec.kind == BackendKind::Dump {
            refuse_misaligned(&b.label, &cumulative)?;
        }
        let lens = (p.lens && b.capabilities.all_taps)
            .then(|| {
                lens::logit_lens(
                    &|h| p.model.lens_logits(h),
                    p.ckpt.config.num_layers,
                    reference,
                    b.capture.as_ref(),
                )
            })
            .transpose()?;
        let local = match &b.local {
            Some((taps, local)) => {
                let pair = compare(reference, local.as_ref(), names, &settings(View::Local, taps))?;
                let blame = (!cumulative.passed()).then(|| locate::blamed_layers(&pair));
                Some((pair, blame))
            }
            None => None,
        };
        let beside = beside_pair(p, runs, b, (&noise, spread.as_ref()))?;
        out.push(Compared { label: b.label.clone(), cumulative, expected, local, lens, beside });
    }
    Ok(())
}

/// A device against the emulator dump it is set `beside`, judged on its excess over what its
/// own quantization puts between the two (the expected emulation vs the dump), without the
/// bounds on the device's own figures, which the dump shares.
fn beside_pair(
    p: &Prepared,
    runs: &Runs,
    b: &BackendOutput,
    (noise, spread): (&Settings, Option<&PairComparison>),
) -> Result<Option<PairComparison>> {
    let Some(label) = &b.spec.beside else { return Ok(None) };
    let dump = runs.backends.iter().find(|d| d.label == *label && d.spec.kind == BackendKind::Dump);
    let dump = dump.ok_or_else(|| {
        Error::usage(format!(
            "backend `{}`: beside = `{label}` names no dump backend of this probe (the DFC emulator's \
             inference saved as .npz, with its map)",
            b.label
        ))
    })?;
    let quant = match &b.expected {
        Some(e) => Some(compare(dump.capture.as_ref(), e.capture.as_ref(), (label, "expected"), noise)?),
        None => None,
    };
    let beyond = quant.as_ref().map(|expected| Beyond { expected, spread });
    let relative = p.thresholds.relative();
    let judged = Settings {
        view: View::Cumulative,
        thresholds: &relative,
        selection: Some(&p.selection),
        workers: noise.workers,
        beyond,
    };
    let mut pair = compare(dump.capture.as_ref(), b.capture.as_ref(), (label, &b.label), &judged)?;
    pair.on_device = true;
    Ok(Some(pair))
}

/// A dump's tap whose shape cannot be aligned with the reference's is an input error.
fn refuse_misaligned(label: &str, pair: &PairComparison) -> Result<()> {
    match pair.rows.iter().find(|r| r.status == RowStatus::ShapeMismatch) {
        None => Ok(()),
        Some(bad) => Err(Error::input(
            format!("backend `{label}` tap {}", bad.key()),
            format!(
                "shape {:?} cannot be aligned with the reference's {:?}; fix the dump or add a layout \
                 transform (squeeze, permute, reshape) for it in the name map",
                bad.cand_shape, bad.ref_shape
            ),
        )),
    }
}

/// Stage 4: rank the fault catalog against the observed backend, when the run explains. The
/// probe names its own backend; backends replaced on the command line are observed instead
/// (the first one). A spilled run is explained from its files, one tap of each side at a
/// time, each emulation written to the spill folder and deleted once matched: the same
/// ranking and figures as in memory.
pub fn explain_stage(
    p: &Prepared,
    runs: &Runs,
    compared: &[Compared],
    explain: Option<&ExplainSpec>,
) -> Result<Option<Explained>> {
    let Some(explain) = explain else { return Ok(None) };
    let observed = match &explain.observed {
        Some(o) if !p.replaced_backends || runs.backend(o).is_some() => o.clone(),
        _ => runs.backends[0].label.clone(),
    };
    // The inputs the observed backend ran (a HEF's own chunking), which explain emulates too.
    let inputs = runs.backend(&observed).and_then(|b| b.inputs.as_ref()).unwrap_or(&p.inputs);
    let (observed_capture, reference, target) = match runs.backend(&observed) {
        // A backend that stopped before its first phase has nothing to explain; its own
        // error is the run's (a second one about empty captures would hide it).
        Some(b) if b.error.is_some() && b.capture.keys().is_empty() => return Ok(None),
        Some(b) => {
            let float = b.float_reference(runs).1;
            // Where the judge found it beyond its expected quantization: the drift to explain.
            let focus = compared
                .iter()
                .find(|c| c.label == b.label)
                .map(|c| {
                    c.cumulative
                        .rows
                        .iter()
                        .filter(|r| r.failed())
                        .map(|r| Key::new(r.phase, r.tap.clone()))
                        .collect()
                })
                .unwrap_or_default();
            let target = b.expected.as_ref().map(|e| crate::explain::rank::Target {
                expected: e.quant.clone(),
                emulation: e.emulation.clone(),
                float,
                realization: e.realization.as_ref(),
                focus,
            });
            (b.capture.as_ref(), b.clean(runs).1, target)
        }
        None if observed == "reference" => (runs.reference.as_ref(), runs.reference.as_ref(), None),
        None => {
            return Err(Error::usage(format!(
                "[explain] observed `{observed}` is not a backend of this probe"
            )))
        }
    };
    let scratch = runs.spill.as_ref().map(|s| s.tmp.path());
    let at = crate::explain::rank::Setting { ckpt: &p.ckpt, inputs, scratch, target };
    let report = crate::explain::explain(&at, reference, (&observed, observed_capture), explain)?;
    Ok(Some(Explained { report, from_disk: scratch.map(|d| d.display().to_string()) }))
}

/// Stage 4's result: the ranking, and the folder its emulations went to when it read a
/// spilled run from disk.
pub struct Explained {
    pub report: crate::report::ExplainReport,
    pub from_disk: Option<String>,
}

/// Stage 5: write every capture (`NAME.npz`) into `--save-captures`. A spilled run wrote its
/// captures there as they were produced: nothing is written twice.
pub fn save(runs: &Runs, opts: &CaptureOptions) -> Result<()> {
    let Some(dir) = &opts.save_captures else { return Ok(()) };
    let all = std::iter::once(("reference", runs.reference.as_ref()))
        .chain(
            runs.backends
                .iter()
                .filter_map(|b| b.reference.as_ref().map(|(l, c, _)| (l.as_str(), c.as_ref()))),
        )
        .chain(runs.backends.iter().map(|b| (b.label.as_str(), b.capture.as_ref())));
    for (name, capture) in all {
        crate::capture::save(capture, &dir.join(capture_file(name)), true)?;
    }
    Ok(())
}

pub struct ProbeRun {
    pub report: Report,
    pub runs: Runs,
    pub inputs: InputSet,
    /// Where the checkpoint came from (for an evidence bundle's hashes).
    pub source: crate::model::weights::CheckpointSource,
    /// The first error that stopped a backend (the report is still complete up to it).
    pub error: Option<Error>,
}

/// What the stages returned, whatever stopped them: the report is built from it.
pub struct Results<'a> {
    pub prepared: &'a Prepared,
    pub runs: &'a Runs,
    pub compared: &'a [Compared],
    pub explained: Option<&'a Explained>,
    /// The stage that stopped and why.
    pub stopped: Option<(&'a str, &'a Error)>,
}

/// The report of a run, built from what every stage returned.
pub fn report(r: &Results) -> Report {
    let (p, runs) = (r.prepared, r.runs);
    let mut report = Report::new(p.probe.clone());
    report.checkpoint = Some(checkpoint_info(&p.ckpt));
    report.config.unknown_keys = p.ckpt.config.unknown_keys.clone();
    report.inputs = Some(runs.inputs.clone());
    if let (Some(plan), Some(dir)) = (&p.spill, &runs.spill) {
        report.notes.push(spill_note(plan, dir, runs.stores()));
    }
    for b in &runs.backends {
        report.backends.push(BackendInfo {
            name: b.label.clone(),
            kind: b.spec.kind.to_string(),
            status: b.status.clone(),
        });
        report.notes.extend(b.reference.as_ref().map(|(_, _, note)| note.clone()));
        report.notes.extend(b.notes.iter().cloned());
        if let Some(e) = &b.expected {
            report.notes.push(format!(
                "backend `{}` is judged on its excess over what it computes when nothing is wrong, emulated: {} \
                 (each figure may also differ from the expected by {} times what a second draw of that \
                 quantization does)",
                b.label,
                e.quant.description,
                thresholds::REALIZATION_SLACK
            ));
        }
    }
    for c in r.compared {
        if let Some(rows) = &c.lens {
            report.lens.push((c.label.clone(), rows.clone()));
        }
        report.add_comparison(c.cumulative.clone());
        if let Some((pair, blame)) = &c.local {
            if let Some(layers) = blame {
                report.blame.push((c.label.clone(), layers.clone()));
            }
            report.add_comparison(pair.clone());
        }
        if let Some(noise) = &c.expected {
            report.add_comparison(noise.clone());
        }
        if let Some(beside) = &c.beside {
            report.add_comparison(beside.clone());
        }
    }
    // A backend that stopped is said once it was compared (a failed compare stage names itself).
    for b in runs.backends.iter().take(r.compared.len()) {
        if let Some(e) = &b.error {
            report.incomplete.push(format!("backend `{}`: {e}", b.label));
        }
    }
    if let Some(e) = r.explained {
        if let Some(dir) = &e.from_disk {
            report.notes.push(crate::probe::spill::explain_note(dir));
        }
        report.explain = Some(e.report.clone());
        if let (false, Some(best)) = (report.drift(), &e.report.best) {
            let clean = e.report.against.name();
            report.notes.push(format!(
                "`{}` drifts less than the thresholds, but explain reproduces it with {best}, not with \
                 the {clean}: the run fails on that fault",
                e.report.observed
            ));
        }
    }
    if let Some((stage, e)) = r.stopped {
        report.incomplete.push(format!("the {stage} stage stopped: {e}"));
    }
    report
}

/// Every stage in order. Once the backends have run, a stage that fails does not lose the
/// report: the run returns it with what finished, the failure in `incomplete` and in `error`,
/// so the command still writes its reports before it exits non-zero.
pub fn run_probe(probe: &Probe, opts: &RunOptions) -> Result<ProbeRun> {
    let mut p = prepare(probe, opts)?;
    let mut runs = run_backends(&mut p, &opts.captures, &mut crate::backend::make_backend)?;
    // The stages run in order; the first to fail names itself.
    let (mut compared, mut explained) = (Vec::new(), None);
    let stopped = match compare_runs(&p, &runs, &mut compared) {
        Err(e) => Some(("compare", e)),
        Ok(()) => match explain_stage(&p, &runs, &compared, p.explain.as_ref()) {
            Err(e) => Some(("explain", e)),
            Ok(e) => {
                explained = e;
                save(&runs, &opts.captures).err().map(|e| ("save", e))
            }
        },
    };
    let results = Results {
        prepared: &p,
        runs: &runs,
        compared: &compared,
        explained: explained.as_ref(),
        stopped: stopped.as_ref().map(|(s, e)| (*s, e)),
    };
    let report = report(&results);
    // A stage error names the input at fault; it outranks a backend that stopped.
    let error = stopped.map(|(_, e)| e).or_else(|| runs.backends.iter_mut().find_map(|b| b.error.take()));
    Ok(ProbeRun { report, runs, inputs: p.inputs, source: p.ckpt.source, error })
}
