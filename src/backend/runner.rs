//! One trait, in the spirit of Polygraphy's runners: name, check, capabilities, run. A backend
//! runs into a sink it is handed; the caller decides where the capture lives ([`Place`]: memory
//! or a file).

use super::generation::Served;
use crate::capture::{Capture, MemorySink, Place, PlaceSink, Store, TapSink};
use crate::error::{Error, Result};
use crate::fault::expected::Expected;
use crate::inputs::InputSet;
use crate::model::run::RunRecord;
use crate::model::Checkpoint;
use crate::tap::TapSelection;
use std::sync::Arc;

/// Default: what a recording or a served model gives, only what it records, with no feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Produces every canonical tap (false: only what it records, e.g. a device's logits).
    pub all_taps: bool,
    /// Accepts a feed (each layer fed the reference's input) for the local view.
    pub overrides: bool,
    /// Its every run takes the reference's capture as its input (a suffix HEF: the hidden state
    /// entering its first block).
    pub fed: bool,
}

/// How a run ended: what it fed and produced phase by phase, and the error that stopped it
/// (what finished has already reached the sink).
pub struct Ran {
    pub record: RunRecord,
    pub error: Option<Error>,
}

/// Makes a backend that computes the given faults on a checkpoint's weights, as the observed
/// one would ([`Backend::emulation`]), or None for faults it cannot compute (then the decoder
/// does); shared by explain's threads, each making its own.
#[derive(Clone)]
pub struct Emulation {
    make: Arc<MakeEmulation>,
    /// The taps every run of it outputs, asked for or not (a HEF's exposed outputs): a run
    /// that starts at a later block ([`crate::model::hooks::Hooks::resume`]) cannot skip the
    /// blocks that compute them.
    pub outputs: Vec<crate::tap::Tap>,
}

/// The faults, faults whose hooks go first (explain's instrument), and whether the backend may
/// leave out what nothing reads (frame rows: `device::sim`), to the backend.
type MakeEmulation = dyn Fn(
        &Checkpoint,
        &[crate::fault::spec::FaultSpec],
        Vec<Box<dyn crate::fault::Fault>>,
        bool,
    ) -> Result<Option<Box<dyn Backend>>>
    + Send
    + Sync;

impl Emulation {
    pub fn new(make: Arc<MakeEmulation>, outputs: Vec<crate::tap::Tap>) -> Self {
        Emulation { make, outputs }
    }

    /// The backend computing `faults`, with `first`'s hooks ahead of theirs; None: it cannot.
    /// `trim`: it may leave out the work nothing reads (the same bits come back).
    pub fn backend(
        &self,
        ckpt: &Checkpoint,
        faults: &[crate::fault::spec::FaultSpec],
        (first, trim): (Vec<Box<dyn crate::fault::Fault>>, bool),
    ) -> Result<Option<Box<dyn Backend>>> {
        (self.make)(ckpt, faults, first, trim)
    }
}

pub trait Backend {
    fn name(&self) -> &str;
    /// Whether it can run here, and if not, why, in one sentence.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    /// Whether it can run `inputs` at all (a base-scope HEF's one frame must hold the prompt
    /// and every decode step): a usage error naming what does not fit, before anything runs.
    fn check_inputs(&self, _inputs: &InputSet) -> Result<()> {
        Ok(())
    }
    /// When this backend is only comparable with a reference whose attention sees the last K
    /// keys (a device whose KV cache ring is shorter than the conversation): K, and the note
    /// the report shows about it.
    fn reference_window(&self, _inputs: &InputSet) -> Option<(usize, String)> {
        None
    }
    /// When this backend cannot run `inputs` as they are but runs them the way its device is
    /// fed (a HEF prefills in chunks of its own frame): the inputs it runs, and the note the
    /// report shows. It is then compared with a reference run on the same inputs.
    fn follow_inputs(&self, _inputs: &InputSet) -> Option<(InputSet, String)> {
        None
    }
    /// What this backend computes when nothing is wrong, beyond the float reference: a HEF's
    /// quantization ([`crate::fault::expected`]). Comparisons are judged against it, and
    /// explain composes every fault with it.
    fn expected(&mut self, _ckpt: &Checkpoint) -> Result<Option<Arc<Expected>>> {
        Ok(None)
    }
    /// How explain emulates a candidate fault as this backend computes it, where the decoder
    /// alone would compute something else (a HEF's frames and ring: [`hef::Frames`](super::hef::Frames));
    /// asked after [`Backend::expected`]. None: the decoder with the expected quantization.
    fn emulation(&self) -> Option<Emulation> {
        None
    }
    /// The device it runs on, as that device describes itself (None: no device).
    fn device(&self) -> Option<crate::device::DeviceFacts> {
        None
    }
    /// The widths of its logits' shards in output order, when its lm_head is split over 2 or
    /// more outputs (a HEF's own, or what a dump declares): the logits are also compared shard
    /// by shard at those boundaries.
    fn logits_shards(&self) -> Option<Vec<usize>> {
        None
    }
    /// What the report should say about where this backend's figures come from (a HEF: which
    /// outputs were measured, which taps only explain can infer); the report names the backend
    /// before each.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// What a served model returned in the last run, token by token ([`serve::Served`](Served)):
    /// taken once, by the stage that compares it.
    fn served(&mut self) -> Option<Served> {
        None
    }
    /// Run every phase of `inputs` (decode teacher-forced: greedy is resolved beforehand) into
    /// `sink`. With `feed` (the reference's `embed` and `layers.*.out`), every layer is fed the
    /// reference's own input: only for backends whose capabilities say `overrides`.
    fn run(
        &mut self,
        inputs: &InputSet,
        taps: &TapSelection,
        feed: Option<&dyn Store>,
        sink: &mut dyn TapSink,
    ) -> Ran;
}

/// What a run captured, where it was asked to go, with how the run ended.
pub struct Run<S> {
    pub capture: S,
    pub record: RunRecord,
    pub error: Option<Error>,
}

impl<S> Run<S> {
    /// The run, or the error that stopped it.
    pub fn ok(mut self) -> Result<Self> {
        self.error.take().map_or(Ok(self), Err)
    }
}

/// Run `backend` with its capture kept in memory.
pub fn collect(
    backend: &mut dyn Backend,
    inputs: &InputSet,
    taps: &TapSelection,
    feed: Option<&dyn Store>,
) -> Run<Capture> {
    let mut sink = MemorySink::new(taps.clone());
    let Ran { record, error } = backend.run(inputs, taps, feed, &mut sink);
    Run { capture: sink.capture, record, error }
}

/// Run `backend` with its capture at `place`. `Err` only for a file that could not be
/// written; a backend that stopped returns what it finished and its error.
pub fn run_to(
    backend: &mut dyn Backend,
    inputs: &InputSet,
    taps: &TapSelection,
    feed: Option<&dyn Store>,
    place: &Place,
) -> Result<Run<Box<dyn Store>>> {
    let mut sink = PlaceSink::create(place, taps)?;
    let Ran { record, error } = backend.run(inputs, taps, feed, sink.sink());
    Ok(Run { capture: sink.finish()?, record, error })
}

/// The refusal of a feed by a backend that takes none.
pub(super) fn no_feed(name: &str) -> Ran {
    Ran {
        record: RunRecord::default(),
        error: Some(Error::usage(format!("backend `{name}` cannot be fed the reference's layer inputs"))),
    }
}
