//! Reuse for `explain`: the residual a clean run fed each of its blocks, step by step, recorded
//! once; a candidate that acts from block B on (`fault::catalog::first_block`) starts every
//! step there, since the blocks below compute what the clean run's did, bit for bit.
//!
//! [`Instrument`] is the one mechanism: a fault whose hooks go ahead of every other in an
//! emulation ([`Hooks::resume`] and the `layers.{b}.input` edit site), which counts the blocks
//! a run computes and either records a clean run or starts each step of a candidate.

use crate::capture::Store;
use crate::error::{Error, Result};
use crate::fault::spec::FaultSpec;
use crate::fault::Fault;
use crate::model::hooks::{Hooks, StepCtx};
use crate::tap::{Key, LayerTap, Tap, TapName};
use candle_core::Tensor;
use ndarray::ArrayD;
use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard};

/// What one clean run fed its blocks, and its keys explain matches: a candidate starting at
/// block B reads its keys below B from `capture`.
pub struct Prefix {
    /// Per step, per block 0..=num_layers (the last: entering the final norm): the residual at
    /// `layers.{b}.input` as it came in, before any hook edited it.
    steps: Vec<Vec<Option<Tensor>>>,
    /// The clean run's capture: its own file where the run is spilled (read a tap at a time,
    /// never copied into memory: a copy of the 3B all-tap run's keys held 2.8 GiB more), else
    /// its keys explain matches, in memory.
    pub capture: Arc<dyn Store + Send>,
    /// Blocks the clean run computed, over all its steps: what a candidate run in full costs.
    pub block_steps: usize,
}

impl Prefix {
    /// Whether every step can start at block `b` (a graph cut from the model has no residual
    /// below its first block).
    pub fn has(&self, b: usize) -> bool {
        !self.steps.is_empty() && self.steps.iter().all(|s| s.get(b).is_some_and(Option::is_some))
    }

    pub fn steps(&self) -> usize {
        self.steps.len()
    }
}

/// Whether `key` is computed below block `from` (the embeddings, or a tap of an earlier block):
/// where a candidate that starts at `from` holds the clean run's values.
pub fn below(key: &Key, from: usize) -> bool {
    match key.tap().and_then(TapName::layer) {
        Some(l) => l < from,
        None => from > 0 && key.tap().is_some_and(|t| t.is(Tap::Embed)),
    }
}

enum Mode {
    Count,
    /// Record until the residuals pass `limit` bytes (then drop them: no reuse).
    Record {
        limit: u64,
    },
    Resume(Arc<Prefix>, usize),
}

struct State {
    mode: Mode,
    /// The next step's index (steps are asked for in run order: [`Hooks::resume`]).
    step: usize,
    blocks: usize,
    recorded: Vec<Vec<Option<Tensor>>>,
    bytes: u64,
    over: bool,
}

/// Explain's instrument, first in every emulation's hooks.
pub struct Instrument {
    spec: FaultSpec,
    layers: usize,
    state: Mutex<State>,
}

impl Instrument {
    /// Counts the blocks a run of a model of `layers` blocks computes.
    pub fn counting(layers: usize) -> Arc<Self> {
        let state =
            State { mode: Mode::Count, step: 0, blocks: 0, recorded: Vec::new(), bytes: 0, over: false };
        Arc::new(Instrument {
            spec: FaultSpec::parse("explain-instrument").expect("a bare name parses"),
            layers,
            state: Mutex::new(state),
        })
    }

    /// Also records every step's residuals, up to `limit` bytes.
    pub fn recording(layers: usize, limit: u64) -> Arc<Self> {
        let i = Self::counting(layers);
        i.lock().mode = Mode::Record { limit };
        i
    }

    /// Starts every step at block `b` from `prefix` (set before the run).
    pub fn resume_at(&self, prefix: Arc<Prefix>, b: usize) {
        self.lock().mode = Mode::Resume(prefix, b);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("the instrument's lock")
    }

    /// Blocks computed so far, over all steps.
    pub fn blocks(&self) -> usize {
        self.lock().blocks
    }

    /// What a recording run recorded, with its capture; None when it was not recording or
    /// the residuals passed its limit.
    pub fn prefix(&self, capture: Arc<dyn Store + Send>) -> Option<Prefix> {
        let mut s = self.lock();
        let recording = matches!(s.mode, Mode::Record { .. }) && !s.over;
        let steps = std::mem::take(&mut s.recorded);
        recording.then_some(Prefix { steps, capture, block_steps: s.blocks })
    }

    /// The bytes a recording holds so far.
    pub fn recorded_bytes(&self) -> u64 {
        self.lock().bytes
    }
}

impl Fault for Arc<Instrument> {
    fn spec(&self) -> &FaultSpec {
        &self.spec
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(InstrumentHooks(self))
    }
}

struct InstrumentHooks<'a>(&'a Instrument);

impl Hooks for InstrumentHooks<'_> {
    fn resume(&mut self, _ctx: &StepCtx) -> Result<Option<(usize, Tensor)>> {
        let mut s = self.0.lock();
        let step = s.step;
        s.step += 1;
        let State { mode, over, recorded, .. } = &mut *s;
        match mode {
            Mode::Count => Ok(None),
            Mode::Record { .. } => {
                if !*over {
                    recorded.push(vec![None; self.0.layers + 1]);
                }
                Ok(None)
            }
            Mode::Resume(p, b) => match p.steps.get(step).and_then(|st| st.get(*b).cloned().flatten()) {
                Some(x) => Ok(Some((*b, x))),
                None => Err(Error::usage(format!(
                    "explain: step {step} of a candidate has no clean residual entering block {b} (the clean run \
                     recorded {} steps)",
                    p.steps.len()
                ))),
            },
        }
    }

    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        let Tap::Layer(l, LayerTap::Input) = tap else { return Ok(t) };
        let mut s = self.0.lock();
        if l < self.0.layers {
            s.blocks += 1;
        }
        let State { mode, over, recorded, bytes, .. } = &mut *s;
        if let (Mode::Record { limit }, false) = (mode, *over) {
            *bytes = bytes.saturating_add(4 * t.elem_count() as u64);
            if *bytes > *limit {
                (*over, *recorded) = (true, Vec::new());
            } else if let Some(slot) = recorded.last_mut().and_then(|step| step.get_mut(l)) {
                *slot = Some(t.clone());
            }
        }
        Ok(t)
    }

    fn needs_explicit_attention(&self, _layer: usize) -> bool {
        false
    }

    /// A recording keeps whole steps (candidates resume from them); counting and resuming
    /// see rows only through the residual handed back, which the decoder cuts to a frame's.
    fn rows_apart(&self) -> bool {
        !matches!(self.0.lock().mode, Mode::Record { .. })
    }
}

/// A candidate's capture when it started at block `from`: its own keys from there on, the
/// clean run's below (what it would have computed there, bit for bit).
pub(super) struct Layered {
    pub below: Arc<Prefix>,
    pub own: Box<dyn Store>,
    pub from: usize,
}

impl Layered {
    fn side(&self, key: &Key) -> &dyn Store {
        if below(key, self.from) {
            self.below.capture.as_ref()
        } else {
            self.own.as_ref()
        }
    }
}

impl Store for Layered {
    fn keys(&self) -> Vec<Key> {
        let under = self.below.capture.keys().into_iter().filter(|k| below(k, self.from));
        let mut keys: Vec<Key> =
            under.chain(self.own.keys().into_iter().filter(|k| !below(k, self.from))).collect();
        keys.sort();
        keys
    }
    fn contains(&self, key: &Key) -> bool {
        self.side(key).contains(key)
    }
    fn get(&self, key: &Key) -> Result<Option<Cow<'_, ArrayD<f32>>>> {
        self.side(key).get(key)
    }
}
