//! Stage 2 of a run: the reference (which resolves greedy decoding once), then every backend
//! teacher-forced on its tokens, each into a capture at the place the memory plan chose (the
//! Polygraphy split: run everything first, compare second).

use super::prepare::{reference_selection, Prepared};
use super::runs::{capture_file, BackendOutput, ExpectedRun, Runs};
use super::spill::{CaptureOptions, SpillDir};
use crate::backend::decoder::DecoderBackend;
use crate::backend::overrides::Overrides;
use crate::backend::{run_to, Backend, BackendSpec, Run};
use crate::capture::{Place, Store};
use crate::error::{Error, Result};
use crate::fault::expected::Realization;
use crate::fault::Fault;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::{Checkpoint, Decoder};
use crate::report::{BackendStatus, InputInfo};
use crate::tap::TapSelection;
use std::sync::Arc;

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
        crate::errln!("{}", crate::probe::spill::spill_start(plan, dir));
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
    let run = run_to(&mut reference, &p.inputs, &ref_taps, None, &places.capture("reference"))?.ok()?;
    if let DecodeSpec::Greedy(_) = p.inputs.decode {
        p.inputs.decode = DecodeSpec::Forced(run.record.decode_tokens.clone());
    }
    if let Some(path) = &opts.save_inputs {
        p.inputs.to_npz(path, !opts.quiet)?;
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
    backend.check_inputs(inputs)?;
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
    // What the backend says of itself, under its name (after the runs: a quantizer's clip rates).
    let notes = backend.notes().into_iter().map(|n| format!("backend `{label}`: {n}")).collect();
    Ok(BackendOutput {
        spec: spec.clone(),
        status: error.as_ref().map_or(BackendStatus::Ok, |e| BackendStatus::Stopped {
            after: record.phases.last().map(|(p, _, _)| *p),
            error: e.to_string(),
        }),
        label,
        capabilities,
        capture,
        local,
        error,
        reference: windowed,
        expected,
        notes,
        device: backend.device(),
        inputs: followed.map(|f| f.0),
        shards: backend.logits_shards(),
        served: backend.served(),
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
    let run = run_to(&mut backend, inputs, &taps, None, &places.capture(&label))?.ok()?;
    Ok((label, run.capture))
}
