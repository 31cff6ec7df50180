//! Running a probe, in named stages that can each be called (and tested) alone:
//! [`prepare`] (checkpoint, InputSet, taps, thresholds, backends), [`run_backends`] (the
//! reference and every backend into captures, the Polygraphy split), [`compare_runs`]
//! (compare, locate, local view, logit lens), [`explain_stage`] and [`save`]. Whatever
//! finished is kept when something fails.
//!
//! Captures are held in memory while they fit the memory budget. When they do not, `run`
//! ([`RunOptions::allow_spill`]) spills them: every capture is streamed to an `.npz` in a
//! temporary folder as it is produced ([`SpillPlan`]), compared from the files one tap of each
//! side at a time ([`crate::compare::stream::compare_files`]), explained from the files too
//! ([`explain_stage`]: each emulation a temporary file there), and the folder is deleted when
//! the run is dropped (unless it is `--save-captures`).
//!
//! (Over 600 lines on purpose: each stage takes a held and a spilled form of its captures side
//! by side, so that the two stay in step; the spill's own planning is in [`super::spill`].)

use crate::backend::decoder::DecoderBackend;
use crate::backend::overrides::Overrides;
use crate::backend::{Backend, BackendRun, Capabilities, FileRun};
use crate::backend::{BackendKind, BackendSpec};
use crate::budget::Bytes;
use crate::capture::source::Source;
use crate::capture::Capture;
use crate::compare::stream::{compare_files, keys_of};
use crate::compare::thresholds::Thresholds;
use crate::compare::{compare_selected, lens, locate, PairComparison, RowStatus, View};
use crate::error::{Error, Result};
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::memory::{self, TapsHeld};
use crate::model::run::RunRecord;
use crate::model::synth::SynthSpec;
use crate::model::tokenizer::{Tokenizer, SYNTH_TOKENIZER_VOCAB};
use crate::model::{Checkpoint, Decoder};
use crate::probe::schema::{CheckpointSpec, InputsSpec, Probe};
use crate::probe::spill::{spill_note, spill_plan, SpillDir};
pub use crate::probe::spill::{Held, SpillPlan};
use crate::report::{BackendInfo, BackendStatus, CheckpointInfo, InputInfo, ProbeInfo, Report};
use crate::tap::TapSelection;
use std::path::PathBuf;
use std::sync::Arc;

/// Command-line adjustments to a probe.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Replace the probe's backends.
    pub backends: Vec<BackendSpec>,
    /// Extra bounds, `METRIC=V` or `GLOB:METRIC=V`.
    pub thresholds: Vec<String>,
    pub save_inputs: Option<PathBuf>,
    /// Write every capture (`NAME.npz`) into this folder.
    pub save_captures: Option<PathBuf>,
    /// The command line that reproduces the run, for the Markdown report.
    pub command: String,
    /// Skip the explain step even if the probe asks for it.
    pub no_explain: bool,
    /// Run explain with these settings whatever the probe says.
    pub explain: Option<crate::explain::ExplainSpec>,
    /// Replace the probe's `[checkpoint]`: a HF folder or a .gguf file (`--checkpoint`).
    pub checkpoint: Option<PathBuf>,
    /// When the captures do not fit the memory budget, spill them to disk instead of refusing
    /// the run (`run`, `explain` and the suite do).
    pub allow_spill: bool,
    /// Where spilled captures go (`--spill-dir`); default the system's temporary folder.
    pub spill_dir: Option<PathBuf>,
}

pub fn synth_spec(c: &CheckpointSpec) -> Result<SynthSpec> {
    let preset = c.synth.as_deref().expect("synth checkpoint");
    let mut s = SynthSpec::preset(preset, c.seed)?;
    s.apply(&c.overrides);
    Ok(s)
}

/// config.json's unknown keys on stderr, for commands whose output has no header (sweep).
pub fn note_unknown_keys(ckpt: &Checkpoint) {
    if let Some(line) = crate::report::format::unknown_keys_line(&ckpt.config.unknown_keys) {
        eprintln!("{line}");
    }
}

pub fn load_checkpoint(c: &CheckpointSpec) -> Result<Checkpoint> {
    match &c.path {
        Some(p) => {
            let dir = crate::model::hub::resolve(
                p,
                c.revision.as_deref().unwrap_or(crate::model::hub::DEFAULT_REVISION),
            )?;
            let ckpt = Checkpoint::load(&dir)?;
            if c.strict_config {
                ckpt.config.refuse_unknown_keys(&dir.join("config.json").display().to_string())?;
            }
            Ok(ckpt)
        }
        None => synth_spec(c)?.build(),
    }
}

/// The InputSet of a probe's `[inputs]` (the command line's prompt flags build the same spec).
pub fn build_inputs(spec: &InputsSpec, ckpt: &Checkpoint) -> Result<InputSet> {
    let (prompt, bos_added) = match (&spec.tokens, &spec.text) {
        (Some(t), _) => (t.clone(), None),
        (None, Some(text)) => {
            let tok = match (&spec.tokenizer, &ckpt.source) {
                (Some(p), _) => Tokenizer::load(p)?,
                (None, crate::model::weights::CheckpointSource::Dir(d)) => Tokenizer::load(&d.join("tokenizer.json"))?,
                (None, crate::model::weights::CheckpointSource::Gguf { path, .. }) => Tokenizer::from_gguf(path)?,
                (None, _) if ckpt.config.vocab_size >= SYNTH_TOKENIZER_VOCAB => Tokenizer::synth(),
                (None, _) => {
                    return Err(Error::usage(format!(
                        "text needs a tokenizer: this synthesized model's vocabulary ({}) is too small for the \
                         byte-level one; give token ids (--tokens 1,2,3, or tokens = [...] in a probe)",
                        ckpt.config.vocab_size
                    )))
                }
            };
            let enc = tok.encode(text, spec.add_special_tokens)?;
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
    /// The probe's `[compare]` settings.
    pub local: bool,
    pub lens: bool,
    pub report: Report,
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
    pub capture: Held,
    pub local: Option<(TapSelection, Held)>,
    pub error: Option<Error>,
    /// The reference this backend is compared with when it needs its own
    /// ([`Backend::reference_window`]): its label and capture.
    pub reference: Option<(String, Held)>,
}

/// Stage 2's output.
pub struct Runs {
    pub reference: Held,
    pub backends: Vec<BackendOutput>,
    /// The folders of a spilled run; the temporary one goes when this is dropped.
    pub spill: Option<SpillDir>,
}

/// Stage 1: load the checkpoint (the command line's replaces the probe's), build the InputSet, parse taps and thresholds, pick the
/// backends (the command line's replace the probe's).
pub fn prepare(probe: &Probe, opts: &RunOptions) -> Result<Prepared> {
    let what = probe.path.display().to_string();
    // Thresholds first: a bad `--threshold` is refused before a model is built.
    let mut thresholds: Thresholds = probe.thresholds.build()?;
    for t in &opts.thresholds {
        thresholds.add_cli(t)?;
    }
    let specs: Vec<BackendSpec> =
        if opts.backends.is_empty() { probe.backends.clone() } else { opts.backends.clone() };
    if specs.is_empty() {
        return Err(Error::usage(format!(
            "{what}: no backend to compare with the reference; add a [[backend]] or pass --backend"
        )));
    }
    let ckpt = match &opts.checkpoint {
        Some(p) => Checkpoint::load(p)?,
        None => {
            load_checkpoint(&probe.checkpoint).map_err(|e| in_probe(e, &format!("{what} [checkpoint]")))?
        }
    };
    let layers = ckpt.config.num_layers;
    let inputs = build_inputs(&probe.inputs, &ckpt)?;
    let selection = TapSelection::parse(&probe.taps)?;
    selection.check_against(layers)?;
    thresholds.check_globs(&crate::tap::tap_names(layers), layers).map_err(|e| in_probe(e, &what))?;
    // The reference and every backend keep their captures (a local view is one more each);
    // explain holds one emulation at a time, two while it checks a tie; an emulator's faults
    // (and so explain's) may rewrite the weights (quantization): one more copy.
    let explain = explain_spec(probe, opts).is_some();
    let captures = 1 + 2 * specs.len() as u64 + if explain { 2 } else { 0 };
    let ref_taps = reference_selection(&probe.taps)?;
    let mut held = memory::estimate(&ckpt.config, &inputs, &ref_taps, TapsHeld::InMemory { captures });
    if explain || specs.iter().any(|s| s.kind == BackendKind::Emulator) {
        held.weights = held.weights.plus(memory::weights(&ckpt.config));
    }
    let in_memory = held.total();
    let budget = crate::budget::current();
    let spill = if budget.allows(in_memory) || !opts.allow_spill {
        memory::check(&held, &inputs).map_err(|e| in_probe(e, &format!("{what} [inputs]")))?;
        None
    } else {
        let local = probe.compare.local;
        let plan = spill_plan(&ckpt, &inputs, &ref_taps, &specs, (local, explain), in_memory, budget, opts)
            .map_err(|e| in_probe(e, &format!("{what} [inputs]")))?;
        Some(plan)
    };
    let model = Arc::new(Decoder::new(&ckpt)?);
    let mut report = Report::new(ProbeInfo {
        name: probe.name.clone(),
        question: probe.question.clone(),
        finding: probe.finding,
        file: Some(probe.path.display().to_string()),
        command: opts.command.clone(),
    });
    report.checkpoint = Some(checkpoint_info(&ckpt));
    report.config.unknown_keys = ckpt.config.unknown_keys.clone();
    Ok(Prepared {
        ckpt,
        model,
        inputs,
        selection,
        thresholds,
        specs,
        local: probe.compare.local,
        lens: probe.compare.lens,
        report,
        spill,
    })
}

/// Stage 2: the reference (which resolves greedy decoding once), then every backend
/// teacher-forced on its tokens, each with its local view where it takes overrides. A backend
/// that stops half-way keeps what it finished; a backend that cannot start is an error.
pub fn run_backends(p: &mut Prepared, opts: &RunOptions) -> Result<Runs> {
    run_backends_with(p, opts, &mut crate::backend::make_backend)
}

/// How [`run_backends_with`] gets each backend: [`crate::backend::make_backend`], or a caller's
/// own (the suite keeps one device open across probes instead of reopening it per probe).
pub type OpenBackend<'a> =
    dyn FnMut(&BackendSpec, &Checkpoint, &Arc<Decoder>) -> Result<Box<dyn Backend>> + 'a;

/// Stage 2 with the backends opened by `open`.
pub fn run_backends_with(p: &mut Prepared, opts: &RunOptions, open: &mut OpenBackend) -> Result<Runs> {
    let progress = indicatif::ProgressBar::new(p.specs.len() as u64 + 1);
    progress.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{pos}/{len}]").expect("template"),
    );
    progress.set_message("reference");
    let result = run_all(p, opts, &progress, open);
    progress.finish_and_clear();
    result
}

/// Run `backend` into memory, or into `file` when the run spills. `Err` only for a file that
/// could not be written; a backend that stopped returns what it finished and its error.
fn run_held(
    backend: &mut dyn Backend,
    inputs: &InputSet,
    taps: &TapSelection,
    file: Option<PathBuf>,
) -> Result<(RunRecord, Held, Option<Error>)> {
    Ok(match file {
        None => {
            let BackendRun { capture, record, error } = backend.run(inputs, taps);
            (record, Held::Memory(capture), error)
        }
        Some(path) => {
            let FileRun { record, error } = backend.run_to_file(inputs, taps, &path)?;
            (record, Held::File(path), error)
        }
    })
}

/// The reference's taps that feed a local view's overrides: the whole capture in memory, or
/// just those taps read from its file.
fn override_taps(reference: &Held, layers: usize) -> Result<std::borrow::Cow<'_, Capture>> {
    match reference {
        Held::Memory(c) => Ok(std::borrow::Cow::Borrowed(c)),
        Held::File(path) => {
            let wanted = TapSelection::parse(&Overrides::required_taps(layers))?;
            let mut f = crate::capture::npz::NpzFile::open(path)?;
            let mut c = Capture::default();
            for key in f.keys() {
                if key.split_once('/').is_some_and(|(_, t)| wanted.matches(t)) {
                    let a = f.read(&key)?;
                    c.insert(key, a);
                }
            }
            Ok(std::borrow::Cow::Owned(c))
        }
    }
}

fn run_all(
    p: &mut Prepared,
    opts: &RunOptions,
    progress: &indicatif::ProgressBar,
    open: &mut OpenBackend,
) -> Result<Runs> {
    let spill = p.spill.as_ref().map(|plan| SpillDir::create(plan, opts)).transpose()?;
    if let (Some(plan), Some(dir)) = (&p.spill, &spill) {
        // Said now as well as in the report: a long run fills the disk meanwhile.
        eprintln!(
            "note: the captures ({}) exceed the memory budget ({} from {}): writing them to {} (about {})",
            plan.in_memory,
            Bytes::new(plan.budget.bytes),
            plan.budget.from,
            dir.captures.display(),
            plan.on_disk
        );
    }
    let file_for = |name: &str| spill.as_ref().map(|s| s.captures.join(capture_file(name)));
    let mut reference = DecoderBackend::reference(p.model.clone());
    let ref_taps = reference_selection(p.selection.globs())?;
    let (ref_record, reference, ref_error) =
        run_held(&mut reference, &p.inputs, &ref_taps, file_for("reference"))?;
    if let Some(e) = ref_error {
        return Err(e);
    }
    // Greedy decoding is resolved once, by the reference; every backend is teacher-forced.
    if let DecodeSpec::Greedy(_) = p.inputs.decode {
        p.inputs.decode = DecodeSpec::Forced(ref_record.decode_tokens.clone());
    }
    p.report.inputs = Some(InputInfo {
        prompt_tokens: p.inputs.prompt.len(),
        bos: p.inputs.bos_note().to_string(),
        chunk: p.inputs.chunk,
        phases: ref_record.phases.iter().map(|(ph, _, _)| *ph).collect(),
        decode_tokens: ref_record.decode_tokens.clone(),
    });
    if let Some(path) = &opts.save_inputs {
        p.inputs.to_npz(path)?;
    }
    // A spilled run reads the reference's override taps from its file once, when a local view
    // first needs them.
    let mut overrides: Option<std::borrow::Cow<'_, Capture>> = None;
    let mut backends = Vec::new();
    for spec in &p.specs {
        let label = spec.label();
        progress.inc(1);
        progress.set_message(label.clone());
        let mut backend = open(spec, &p.ckpt, &p.model)?;
        if let Err(why) = backend.check() {
            return Err(Error::usage(format!("backend `{label}` cannot run here: {why}")));
        }
        let (record, capture, error) = run_held(backend.as_mut(), &p.inputs, &p.selection, file_for(&label))?;
        let run_status = status_of(&record, error.as_ref());
        p.report.backends.push(BackendInfo {
            name: label.clone(),
            kind: spec.kind.to_string(),
            status: run_status,
        });
        let capabilities = backend.capabilities();
        let own_reference = match backend.reference_window(&p.inputs) {
            Some((window, note)) => {
                p.report.notes.push(format!("backend `{label}`: {note}"));
                Some(windowed_reference(p, window, &file_for)?)
            }
            None => None,
        };
        let mut local = None;
        if p.local && capabilities.overrides && error.is_none() {
            let taps = TapSelection::parse(
                &[p.selection.globs().to_vec(), Overrides::required_taps(p.ckpt.config.num_layers)].concat(),
            )?;
            if overrides.is_none() {
                overrides = Some(override_taps(&reference, p.ckpt.config.num_layers)?);
            }
            let fed = overrides.as_deref().expect("read above");
            local = match &spill {
                None => backend.run_local(&p.inputs, &taps, fed).map(|l| (taps, Held::Memory(l.capture))),
                Some(s) => {
                    let path = s.tmp.path().join(format!("local.{}", capture_file(&label)));
                    // As in memory, a local run that stops keeps what it finished.
                    let run = backend.run_local_to_file(&p.inputs, &taps, fed, &path).transpose()?;
                    run.map(|_| (taps, Held::File(path)))
                }
            };
        }
        backends.push(BackendOutput {
            spec: spec.clone(),
            label,
            capabilities,
            capture,
            local,
            error,
            reference: own_reference,
        });
    }
    drop(overrides);
    if let (Some(plan), Some(dir)) = (&p.spill, &spill) {
        p.report.notes.insert(0, spill_note(plan, dir, &reference, &backends, opts));
    }
    Ok(Runs { reference, backends, spill })
}

/// The reference with every layer's attention limited to the last `window` keys
/// ([`Decoder::windowed`]), run on the same inputs (decode already teacher-forced).
fn windowed_reference(
    p: &Prepared,
    window: usize,
    file_for: &dyn Fn(&str) -> Option<PathBuf>,
) -> Result<(String, Held)> {
    let label = format!("reference[window={window}]");
    let mut backend = DecoderBackend::reference(Arc::new(p.model.windowed(window)));
    let (_, held, error) =
        run_held(&mut backend, &p.inputs, &reference_selection(p.selection.globs())?, file_for(&label))?;
    match error {
        Some(e) => Err(e),
        None => Ok((label, held)),
    }
}

/// Compare two captures held alike, over the taps `selection` matches: in memory
/// ([`compare_selected`]) or from their files ([`compare_files`], on `workers` threads).
fn compare_held(
    reference: &Held,
    candidate: &Held,
    names: (&str, &str),
    view: View,
    thresholds: &Thresholds,
    selection: &TapSelection,
    workers: usize,
) -> Result<PairComparison> {
    match (reference, candidate) {
        (Held::Memory(r), Held::Memory(c)) => {
            Ok(compare_selected(r, c, names, view, thresholds, Some(selection)))
        }
        (Held::File(r), Held::File(c)) => {
            let mut keys = keys_of(r, c)?;
            keys.keys.retain(|k| k.split_once('/').is_none_or(|(_, t)| selection.matches(t)));
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(workers.max(1))
                .build()
                .map_err(|e| Error::usage(format!("cannot start {workers} comparison threads: {e}")))?;
            pool.install(|| compare_files(r, c, &keys, names, view, thresholds))
        }
        _ => Err(Error::usage(
            "a run holds one capture in memory and the other on disk; this is a bug in hefprobe",
        )),
    }
}

/// Stage 3: compare every backend with the reference (cumulative, then local), locate, blame,
/// logit lens. A dump whose shapes cannot be aligned is an input error naming the tap.
pub fn compare_runs(p: &mut Prepared, runs: &Runs) -> Result<()> {
    let workers = p.spill.as_ref().map_or(1, |s| s.workers);
    for b in &runs.backends {
        let label = &b.label;
        let (ref_label, reference) = match &b.reference {
            Some((l, c)) => (l.as_str(), c),
            None => ("reference", &runs.reference),
        };
        let cumulative = compare_held(
            reference,
            &b.capture,
            (ref_label, label),
            View::Cumulative,
            &p.thresholds,
            &p.selection,
            workers,
        )?;
        if b.spec.kind == BackendKind::Dump {
            if let Some(bad) = cumulative.rows.iter().find(|r| r.status == RowStatus::ShapeMismatch) {
                return Err(Error::input(
                    format!("backend `{label}` tap {}", bad.key()),
                    format!(
                        "shape {:?} cannot be aligned with the reference's {:?}; fix the dump or add a layout \
                         transform (squeeze, permute, reshape) for it in the name map",
                        bad.cand_shape, bad.ref_shape
                    ),
                ));
            }
        }
        if p.lens && b.capabilities.all_taps {
            let rows =
                match (reference, &b.capture) {
                    (Held::Memory(r), Held::Memory(c)) => lens::logit_lens(&p.model, r, c)?,
                    (Held::File(r), Held::File(c)) => lens::logit_lens_files(&p.model, r, c)?,
                    _ => return Err(Error::usage(
                        "a run holds one capture in memory and the other on disk; this is a bug in hefprobe",
                    )),
                };
            p.report.lens.push((label.clone(), rows));
        }
        let failed_any = !cumulative.passed();
        p.report.add_comparison(cumulative);
        if let Some((taps, local)) = &b.local {
            let pair = compare_held(
                reference,
                local,
                (ref_label, label),
                View::Local,
                &p.thresholds,
                taps,
                workers,
            )?;
            // A spilled local view is compared once: its file goes now rather than at the end,
            // so a run with several backends holds one on disk at a time.
            if let Held::File(path) = local {
                let _ = std::fs::remove_file(path);
            }
            if failed_any {
                p.report.blame.push((label.clone(), locate::blamed_layers(&pair)));
            }
            p.report.add_comparison(pair);
        }
        if let Some(e) = &b.error {
            p.report.incomplete.push(format!("backend `{label}`: {e}"));
        }
    }
    Ok(())
}

/// The explain settings of this run: the command line's, else the probe's; None with
/// `--no-explain`.
fn explain_spec<'a>(probe: &'a Probe, opts: &'a RunOptions) -> Option<&'a crate::explain::ExplainSpec> {
    opts.explain.as_ref().or(probe.explain.as_ref()).filter(|_| !opts.no_explain)
}

/// A capture's taps, read from memory or from its file.
fn source(held: &Held) -> Result<Source<'_>> {
    match held {
        Held::Memory(c) => Ok(Source::Memory(c)),
        Held::File(path) => Source::open(path),
    }
}

/// Stage 4: rank the fault catalog against the observed backend, when the probe or the
/// command line asks for it. The probe names its own backend; backends replaced on the
/// command line are observed instead (the first one). A spilled run is explained from its
/// files, one tap of each side at a time, each emulation written to the spill folder and
/// deleted once matched: the same ranking and figures as in memory.
pub fn explain_stage(p: &mut Prepared, runs: &Runs, probe: &Probe, opts: &RunOptions) -> Result<()> {
    let Some(explain) = explain_spec(probe, opts) else {
        return Ok(());
    };
    let observed = match &explain.observed {
        Some(o) if opts.backends.is_empty() || runs.backends.iter().any(|b| b.label == *o) => o.clone(),
        _ => runs.backends[0].label.clone(),
    };
    let (observed_held, reference) = match runs.backends.iter().find(|b| b.label == observed) {
        Some(b) => (&b.capture, b.reference.as_ref().map_or(&runs.reference, |(_, c)| c)),
        None if observed == "reference" => (&runs.reference, &runs.reference),
        None => {
            return Err(Error::usage(format!(
                "[explain] observed `{observed}` is not a backend of this probe"
            )))
        }
    };
    let scratch = runs.spill.as_ref().map(|s| s.tmp.path());
    if let Some(dir) = scratch {
        p.report.notes.push(format!(
            "EXPLAIN READ FROM DISK: this run's captures were spilled, so explain read the observed capture and \
             the reference from their files one tap at a time, and wrote each fault's emulation to a temporary \
             file in {} (deleted once matched); the ranking is the one memory would give, at the cost of one \
             capture written and read back per fault",
            dir.display()
        ));
    }
    p.report.explain = Some(crate::explain::rank::explain_from(
        &p.ckpt,
        &p.model,
        &p.inputs,
        &source(reference)?,
        &observed,
        &source(observed_held)?,
        explain,
        scratch,
    )?);
    Ok(())
}

/// Stage 5: write every capture (`NAME.npz`) into `--save-captures`. A spilled run wrote its
/// captures there as they were produced: nothing is written twice.
pub fn save(runs: &Runs, opts: &RunOptions) -> Result<()> {
    let Some(dir) = &opts.save_captures else { return Ok(()) };
    let all = std::iter::once(("reference", &runs.reference))
        .chain(runs.backends.iter().filter_map(|b| b.reference.as_ref().map(|(l, c)| (l.as_str(), c))))
        .chain(runs.backends.iter().map(|b| (b.label.as_str(), &b.capture)));
    for (name, held) in all {
        let to = dir.join(capture_file(name));
        match held {
            Held::Memory(cap) => cap.write_npz(&to)?,
            Held::File(from) if *from != to => {
                std::fs::copy(from, &to).map_err(|e| Error::io(&to, e))?;
            }
            // Written there quietly as the run went; said now, as for a capture held in memory.
            Held::File(_) => crate::error::announce(&to),
        }
    }
    Ok(())
}

pub struct ProbeRun {
    pub report: Report,
    pub runs: Runs,
    pub inputs: InputSet,
    /// The first error that stopped a backend (the report is still complete up to it).
    pub error: Option<Error>,
}

/// Every stage in order. Once the backends have run, a stage that fails does not lose the
/// report: the run returns it with what finished, the failure in `incomplete` and in `error`,
/// so the command still writes its reports before it exits non-zero.
pub fn run_probe(probe: &Probe, opts: &RunOptions) -> Result<ProbeRun> {
    let mut p = prepare(probe, opts)?;
    let mut runs = run_backends(&mut p, opts)?;
    // The stages run in order; the first to fail names itself.
    let stages = match compare_runs(&mut p, &runs) {
        Err(e) => Err(("compare", e)),
        Ok(_) => match explain_stage(&mut p, &runs, probe, opts) {
            Err(e) => Err(("explain", e)),
            Ok(_) => save(&runs, opts).map_err(|e| ("save", e)),
        },
    };
    let mut error = runs.backends.iter_mut().find_map(|b| b.error.take());
    if let Err((stage, e)) = stages {
        p.report.incomplete.push(format!("the {stage} stage stopped: {e}"));
        // A stage error names the input at fault; it outranks a backend that stopped.
        error = Some(e);
    }
    Ok(ProbeRun { report: p.report, runs, inputs: p.inputs, error })
}
