//! Emulating `explain`'s candidates: each fault (or pair) run as the target computes it, and
//! matched on the observation. Three shortcuts, none of which changes a figure of the ranking
//! (`exhaustive` turns them off; tests compare the two on the localization matrix):
//! - reuse: a candidate that acts from block B on (`fault::catalog::first_block`) starts every
//!   step at the clean run's residual entering B ([`super::prefix`]); its keys below B are the
//!   clean run's;
//! - stopping: a run ends once every key it is matched on has come (later steps cannot change
//!   its match), and once its best possible match is worse than the [`CONTENDERS`]-th best so
//!   far by more than [`TIE_MARGIN`]: it cannot be among the rows whose figures explain reads,
//!   and is left out of the ranking (the report counts it);
//! - parallel: as many candidates at a time as there are cores (at most four), in waves of
//!   [`WAVE`] whose bar is set by the waves before, so which candidates stop depends neither on
//!   timing nor on the threads (the cores, the memory budget); where they fill every core, each
//!   computes its kernels on its own thread (`model::pool::alone`).

use super::matching::{match_captures, part, signature, Match, CLEAN_EPS};
use super::prefix::{below, Instrument, Layered, Prefix};
use super::Spent;
use crate::backend::decoder::DecoderBackend;
use crate::backend::{Backend, Ran};
use crate::capture::{Capture, Place, PlaceSink, Store, TapSink};
use crate::error::{Error, Result};
use crate::fault::expected::Expected;
use crate::fault::spec::FaultSpec;
use crate::fault::Fault;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::Checkpoint;
use crate::tap::{Key, Phase, Tap, TapSelection};
use candle_core::Tensor;
use ndarray::ArrayD;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Rows of the ranking whose figures explain reads beyond the first: those whose ties it
/// resolves, the families it narrows and the faults it pairs (`rank`'s `TIE_ROWS`, `REFINE`,
/// `PAIR_TOP`, each at most this). A candidate stops only when it cannot be among this many
/// best that are not clean-like.
pub const CONTENDERS: usize = 5;

/// How far a candidate's best possible match must fall behind the bar for it to stop: far
/// above float noise, in which two emulations that agree tie (`CLEAN_EPS` on the cosine; their
/// KL differs as little), and below any difference between faults (1e-3 and more on SmolLM2).
pub const TIE_MARGIN: f64 = 1e-6;

/// Candidates in a wave, whatever the threads: the bar a candidate is stopped against is set
/// by the waves before its own, so a wave that followed the threads would make a run with a
/// smaller memory budget (one thread) stop other candidates than one with a larger.
const WAVE: usize = 8;

/// What explain emulates on: the checkpoint, the inputs being explained, where emulations
/// are written (a spilled run's temporary folder; None: kept in memory), and the target's own
/// quantization when it has one (a HEF's): every candidate is that quantization composed with
/// the fault, and the baseline is the quantization alone.
pub struct Setting<'a> {
    pub ckpt: &'a Checkpoint,
    pub inputs: &'a InputSet,
    pub scratch: Option<&'a Path>,
    pub target: Option<Target<'a>>,
}

/// A quantized target: its quantization, and the float reference, against which that
/// quantization's own noise is measured.
pub struct Target<'a> {
    pub expected: Arc<Expected>,
    /// How a candidate is emulated as the target computes it (a HEF's frames and ring, the
    /// expected quantization inside); None: the decoder, with the expected quantization.
    pub emulation: Option<crate::backend::Emulation>,
    pub float: &'a dyn Store,
    /// A second draw of the expected quantization (`fault::expected::Realization`): how far
    /// two draws of it fall apart is part of its noise.
    pub realization: &'a dyn Store,
    /// The keys where the target is beyond its expected quantization (what its judge failed):
    /// matched alone when there are any, since elsewhere every candidate and the baseline differ
    /// from the observation only by the quantization's noise.
    pub focus: Vec<Key>,
}

pub struct Candidate {
    /// One fault, or a pair of them.
    pub specs: Vec<FaultSpec>,
    pub m: Match,
    /// The emulation equals the clean run on the shared taps (to float noise).
    pub clean_like: bool,
    /// The emulation's fingerprint ([`signature`]): two whose fingerprints differ cannot tie.
    pub signature: Vec<f64>,
}

impl Candidate {
    pub fn name(&self) -> String {
        crate::fault::spec::join(&self.specs, " + ")
    }
}

/// Best match first: by match cosine, or by KL to the observation's distribution when
/// `by_kl` (a quantized target seen through its logits: its quantization noise across the
/// whole vocabulary dominates the logits cosine, the KL weighs the tokens the model would pick;
/// measured on SmolLM2 HEFs, docs/QUANTIZATION.md).
fn order(a: &Match, b: &Match, by_kl: bool) -> Ordering {
    let (cos, kl) = (b.cosine.total_cmp(&a.cosine), a.kl.total_cmp(&b.kl));
    if by_kl {
        kl.then(cos)
    } else {
        cos.then(kl)
    }
}

pub fn sort(results: &mut [Candidate], by_kl: bool) {
    results.sort_by(|a, b| order(&a.m, &b.m, by_kl).then(a.name().cmp(&b.name())));
}

/// How a candidate is emulated: through the target's own emulation (a simulated HEF's
/// frames), or the decoder's rows (the reference, or a fault the frames cannot hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Frames,
    Decoder,
}

/// What a route's clean run left: its residuals when they can be reused, and the blocks a run
/// of it computes whole (over every step).
struct Clean {
    route: Route,
    prefix: Option<Arc<Prefix>>,
    whole: usize,
}

/// Why an emulation runs: a candidate (matched as it goes against the bar, when there is one),
/// or a check (a tie, the attribution) that needs its whole capture.
#[derive(Clone, Copy)]
enum For {
    Candidate(Option<Match>),
    Check,
}

/// A candidate's result: ranked, or stopped out of contention (its name).
enum Outcome {
    Ranked(Candidate),
    Stopped(String),
}

/// Runs the candidates on the inputs and taps being explained and matches each emulation
/// against the observation.
pub struct Emulator<'a> {
    pub at: &'a Setting<'a>,
    pub taps: TapSelection,
    pub reference: &'a dyn Store,
    pub observed: &'a dyn Store,
    pub keys: Vec<Key>,
    pub progress: indicatif::ProgressBar,
    key_set: BTreeSet<Key>,
    /// The observation's logits rows over the keys: the most a KL mean is divided by.
    rows: usize,
    /// No fault, emulated as every candidate is, where that is not `reference`: through a
    /// target's own emulation (a simulated HEF's frames).
    clean: Option<Arc<dyn Store + Send>>,
    /// Reuse and stopping on; off: every candidate from its first block to its last step.
    fast: bool,
    /// Each route's clean run, once run.
    cleans: Mutex<Vec<Clean>>,
    /// The best complete matches so far that are not clean-like, best first (at most
    /// [`CONTENDERS`]).
    contenders: Mutex<Vec<Match>>,
    pub spent: Mutex<Spent>,
}

impl<'a> Emulator<'a> {
    pub fn new(
        at: &'a Setting<'a>,
        (reference, observed): (&'a dyn Store, &'a dyn Store),
        keys: Vec<Key>,
        taps: TapSelection,
        exhaustive: bool,
    ) -> Result<Self> {
        let mut rows = 0;
        for k in keys.iter().filter(|k| k.tap().is_some_and(|t| t.is(Tap::Logits))) {
            rows += observed.get(k)?.map_or(0, |o| o.len() / o.shape().last().copied().unwrap_or(1).max(1));
        }
        let spent = Spent { exhaustive, ..Spent::default() };
        let emu = Emulator {
            at,
            taps,
            reference,
            observed,
            key_set: keys.iter().cloned().collect(),
            keys,
            progress: crate::progress::bar(0, "explain {pos}/{len} {msg}"),
            rows,
            clean: None,
            fast: !exhaustive,
            cleans: Mutex::new(Vec::new()),
            contenders: Mutex::new(Vec::new()),
            spent: Mutex::new(spent),
        };
        emu.with_clean()
    }

    /// Candidates on a target with its own emulation (a simulated HEF's frames) run through it,
    /// so the baseline does too: against the decoder's rows, a near no-op fault through the
    /// frames (mask-repeat@layers=29) "explained" 95% of a clean a16 HEF of SmolLM2's drift on
    /// the kv-cache-layout probe, which was the frames' own float order.
    fn with_clean(mut self) -> Result<Self> {
        if self.emulation().is_some() {
            let (store, clean) = self.record(Route::Frames)?;
            self.clean = Some(store);
            self.cleans.get_mut().expect("not shared yet").push(clean);
        }
        Ok(self)
    }

    fn emulation(&self) -> Option<&crate::backend::Emulation> {
        self.at.target.as_ref().and_then(|t| t.emulation.as_ref())
    }

    /// What "no fault" computes, emulated as the candidates are: the baseline of the ranking.
    pub fn clean(&self) -> &dyn Store {
        match &self.clean {
            Some(c) => c.as_ref(),
            None => self.reference,
        }
    }

    /// A quantized target matched on logits alone: ranked by KL (see [`order`]).
    pub fn by_kl(&self) -> bool {
        self.at.target.is_some() && self.keys.iter().all(|k| k.tap().is_some_and(|t| t.is(Tap::Logits)))
    }

    /// Every candidate of `all` in `all`'s order, as many at a time as there are cores (each
    /// is a small-batch decoder run that a second core barely speeds up), in waves of
    /// [`WAVE`]. `stop`: a candidate may be stopped out of contention, against the
    /// bar the waves before set.
    pub fn evaluate_all(&self, all: Vec<Vec<FaultSpec>>, stop: bool) -> Result<Vec<Candidate>> {
        use rayon::prelude::*;
        self.progress.inc_length(all.len() as u64);
        let threads = self.threads();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| Error::usage(format!("cannot start {threads} explain threads: {e}")))?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let _alone = (threads > 1 && threads >= cores).then(crate::model::pool::alone);
        let mut ranked = Vec::with_capacity(all.len());
        for wave in all.chunks(WAVE) {
            let bar = if stop { self.bar() } else { None };
            let done: Vec<Result<Outcome>> =
                pool.install(|| wave.par_iter().map(|specs| self.evaluate(specs, bar)).collect());
            for outcome in done {
                match outcome? {
                    Outcome::Ranked(c) => {
                        self.contend(&c);
                        ranked.push(c);
                    }
                    Outcome::Stopped(name) => self.spent().stopped_early.push(name),
                }
            }
        }
        Ok(ranked)
    }

    /// Emulations at a time: one per core (at most four), as many as the memory budget holds
    /// beside the weights they share (each holds its KV cache, working tensors and capture).
    fn threads(&self) -> usize {
        use crate::model::memory::{estimate, TapsHeld};
        let e =
            estimate(&self.at.ckpt.config, self.at.inputs, &self.taps, TapsHeld::InMemory { captures: 1 });
        let each = e.kv_cache.plus(e.activations).plus(e.taps);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
        let budget = crate::budget::current();
        (1..=cores).rev().find(|&n| budget.allows(each.times(n as u64).plus(e.weights))).unwrap_or(1)
    }

    fn evaluate(&self, specs: &[FaultSpec], bar: Option<Match>) -> Result<Outcome> {
        crate::error::check_interrupt()?;
        self.progress.set_message(crate::fault::spec::join(specs, " + "));
        self.progress.inc(1);
        let Some(cap) = self.emulate(specs, For::Candidate(bar))? else {
            return Ok(Outcome::Stopped(crate::fault::spec::join(specs, " + ")));
        };
        Ok(Outcome::Ranked(Candidate {
            m: match_captures(cap.as_ref(), self.observed, &self.keys)?,
            clean_like: match_captures(cap.as_ref(), self.clean(), &self.keys)?.cosine >= 1.0 - CLEAN_EPS,
            signature: signature(cap.as_ref(), &self.keys)?,
            specs: specs.to_vec(),
        }))
    }

    /// The bar a candidate must be able to reach: the [`CONTENDERS`]-th best so far.
    fn bar(&self) -> Option<Match> {
        let c = self.contenders.lock().expect("contenders");
        c.get(CONTENDERS - 1).copied().filter(|_| self.fast)
    }

    fn contend(&self, c: &Candidate) {
        if c.clean_like {
            return;
        }
        let mut best = self.contenders.lock().expect("contenders");
        let at = best.partition_point(|m| order(m, &c.m, self.by_kl()) != Ordering::Greater);
        best.insert(at, c.m);
        best.truncate(CONTENDERS);
    }

    fn spent(&self) -> std::sync::MutexGuard<'_, Spent> {
        self.spent.lock().expect("spent")
    }

    /// The emulation of `specs` with its whole capture (a tie check, the attribution).
    pub fn run(&self, specs: &[FaultSpec]) -> Result<Box<dyn Store>> {
        Ok(self.emulate(specs, For::Check)?.expect("a check is never stopped out of contention"))
    }

    /// Whether `b`'s emulation agrees with `a`'s (`a` re-run, or its run kept from the last
    /// check in `kept`) on these inputs, to float noise.
    pub fn tied(&self, a: &Candidate, b: &Candidate, kept: &mut Option<Box<dyn Store>>) -> Result<bool> {
        let a = match kept {
            Some(a) => a,
            None => kept.insert(self.run(&a.specs)?),
        };
        let b = self.run(&b.specs)?;
        Ok(match_captures(a.as_ref(), b.as_ref(), &self.keys)?.cosine >= 1.0 - CLEAN_EPS)
    }

    /// One emulation of `specs`: from the block they act from where the route's clean run
    /// allows it, into a sink that ends the run once it is matched (or out of contention:
    /// None).
    fn emulate(&self, specs: &[FaultSpec], why: For) -> Result<Option<Box<dyn Store>>> {
        let instrument = Instrument::counting(self.at.ckpt.config.num_layers);
        let (route, mut backend) = self.backend(specs, &instrument, true)?;
        let clean = self.clean_of(route)?;
        let prefix = match self.start_block(specs, route) {
            0 => None,
            b => clean.prefix.filter(|p| p.has(b)).map(|p| (p, b)),
        };
        if let Some((p, b)) = &prefix {
            instrument.resume_at(p.clone(), *b);
        }
        let from = prefix.as_ref().map_or(0, |(_, b)| *b);
        let bar = match why {
            For::Candidate(bar) => bar,
            For::Check => None,
        };
        let below = prefix.as_ref().map(|(p, _)| p.capture.as_ref() as &dyn Store);
        let (store, stop) = self.run_into(backend.as_mut(), (from, self.fast), bar, below)?;
        let saved = prefix.as_ref().map_or(0, |(p, b)| b * p.steps());
        self.account(why, (instrument.blocks(), saved, clean.whole), from);
        if stop == Some(Stop::Out) {
            return Ok(None);
        }
        Ok(Some(match prefix {
            Some((below, from)) => Box::new(Layered { below, own: store, from }),
            None => store as Box<dyn Store>,
        }))
    }

    fn account(&self, why: For, (ran, saved, whole): (usize, usize, usize), from: usize) {
        let mut s = self.spent();
        if let For::Check = why {
            s.other += 1;
            return;
        }
        s.candidates += 1;
        *(if from > 0 { &mut s.from_prefix } else { &mut s.from_first_block }) += 1;
        // A route whose clean run was not recorded (no candidate started later): its whole.
        let whole = if whole == 0 { ran } else { whole };
        s.block_steps += ran;
        s.block_steps_whole += whole;
        s.saved_by_reuse += saved;
        s.saved_by_stopping += whole.saturating_sub(ran + saved);
    }

    /// The backend computing `specs` with `instrument` first: through the target's own
    /// emulation when it can hold them (and `frames` allows it), else the decoder (with the
    /// target's quantization).
    fn backend(
        &self,
        specs: &[FaultSpec],
        instrument: &Arc<Instrument>,
        frames: bool,
    ) -> Result<(Route, Box<dyn Backend>)> {
        let first = || vec![Box::new(instrument.clone()) as Box<dyn Fault>];
        if let Some(e) = self.emulation().filter(|_| frames) {
            if let Some(b) = e.backend(self.at.ckpt, specs, (first(), self.fast))? {
                return Ok((Route::Frames, b));
            }
        }
        let mut faults = first();
        faults.extend(crate::fault::catalog::build_all(specs, &self.at.ckpt.config)?);
        if let Some(t) = &self.at.target {
            faults.push(Box::new(t.expected.clone()));
        }
        Ok((Route::Decoder, Box::new(DecoderBackend::with_faults("explain", self.at.ckpt, faults)?)))
    }

    /// The block a run of `specs` may start at: the first one they act in, unless the
    /// shortcuts are off, the decode is greedy (each candidate feeds its own tokens), or the
    /// route outputs a tap of a block below it (a HEF's exposed outputs) on every run.
    fn start_block(&self, specs: &[FaultSpec], route: Route) -> usize {
        let n = self.at.ckpt.config.num_layers;
        if !self.fast || !teacher_forced(&self.at.inputs.decode) {
            return 0;
        }
        let acts = specs.iter().map(|s| crate::fault::catalog::first_block(s, &self.at.ckpt.config)).min();
        let outputs = match (route, self.emulation()) {
            (Route::Frames, Some(e)) => e.outputs.clone(),
            _ => Vec::new(),
        };
        let computed = outputs.iter().map(|t| match t {
            Tap::Embed => 0,
            t => t.layer().unwrap_or(n),
        });
        acts.into_iter().chain(computed).min().unwrap_or(0)
    }

    /// `route`'s clean run: run (and recorded) the first time a candidate takes the route.
    fn clean_of(&self, route: Route) -> Result<Clean> {
        let mut cleans = self.cleans.lock().expect("clean runs");
        if let Some(c) = cleans.iter().find(|c| c.route == route) {
            return Ok(Clean { route, prefix: c.prefix.clone(), whole: c.whole });
        }
        if !self.fast {
            // Nothing is reused: each run counts its own blocks.
            cleans.push(Clean { route, prefix: None, whole: 0 });
            return Ok(Clean { route, prefix: None, whole: 0 });
        }
        let (_, clean) = self.record(route)?;
        let copy = Clean { route, prefix: clean.prefix.clone(), whole: clean.whole };
        cleans.push(clean);
        Ok(copy)
    }

    /// The clean run on `route`, whole, recording its residuals (with its keys) when the
    /// shortcuts are on and they fit a quarter of the memory budget (the rest holds the
    /// model, the captures and the emulations in flight).
    fn record(&self, route: Route) -> Result<(Arc<dyn Store + Send>, Clean)> {
        let limit = if self.fast { crate::budget::current().bytes / 4 } else { 0 };
        let instrument = Instrument::recording(self.at.ckpt.config.num_layers, limit);
        let (_, mut backend) = self.backend(&[], &instrument, route == Route::Frames)?;
        let (store, _) = self.run_into(backend.as_mut(), (0, false), None, None)?;
        self.spent().other += 1;
        let store: Arc<dyn Store + Send> = Arc::from(store);
        let mut bytes = instrument.recorded_bytes();
        // A spilled run's clean capture stays in its file; one in memory keeps the keys matched.
        let below: Arc<dyn Store + Send> = match store.file() {
            Some(_) => store.clone(),
            None => {
                let mut capture = Capture::default();
                for k in &self.keys {
                    if let Some(a) = store.get(k)? {
                        bytes = bytes.saturating_add(4 * a.len() as u64);
                        capture.insert(k.clone(), a.into_owned());
                    }
                }
                Arc::new(capture)
            }
        };
        let prefix = instrument.prefix(below).filter(|_| bytes <= limit).map(Arc::new);
        if self.fast && prefix.is_none() && teacher_forced(&self.at.inputs.decode) {
            self.spent().note = Some(format!(
                "no candidate started from the clean run's residuals: they and its keys take {}, over a quarter \
                 of the memory budget ({})",
                crate::budget::Bytes::new(bytes),
                crate::budget::current().from
            ));
        }
        Ok((store, Clean { route, prefix, whole: instrument.blocks() }))
    }

    /// Run `b` into a capture at explain's place, judged as it goes: where it `ends` early, the
    /// run stops once every key it makes (those at or after block `from`) has come, or once it
    /// is out of contention with `bar` (the store then holds what came before). A run started
    /// at block `from` is judged on the keys below it as `clean` holds them (what it would have
    /// computed there, bit for bit), so whether it stops is what it would be run whole: its
    /// match, once every key has come, against the bar.
    fn run_into(
        &self,
        b: &mut dyn Backend,
        (from, ends): (usize, bool),
        bar: Option<Match>,
        clean: Option<&dyn Store>,
    ) -> Result<(Box<dyn Store + Send>, Option<Stop>)> {
        let place = self.at.scratch.map_or(Place::Memory, |d| Place::Temporary(d.to_path_buf()));
        let mut sink = PlaceSink::create(&place, &self.taps)?;
        let expected = self.keys.iter().filter(|k| !below(k, from)).count();
        let mut sums = (0.0, 0.0, 0);
        if let (Some(clean), Some(_)) = (clean, bar) {
            for key in self.keys.iter().filter(|k| below(k, from)) {
                if let (Some(e), Some(o)) = (clean.get(key)?, self.observed.get(key)?) {
                    let p = part(key, &e, &o);
                    sums.0 += p.cosine;
                    sums.1 += p.kls.iter().sum::<f64>();
                }
                sums.2 += 1;
            }
        }
        let mut judge = Judge {
            inner: sink.sink(),
            emu: self,
            ends,
            bar,
            expected,
            came: BTreeSet::new(),
            sums,
            stop: None,
        };
        let Ran { error, .. } = b.run(self.at.inputs, &self.taps, None, &mut judge);
        let stop = judge.stop;
        let store = sink.finish()?;
        match (stop, error) {
            (None, Some(e)) => Err(e),
            _ => Ok((store, stop)),
        }
    }

    /// Whether a run whose judged keys add up to `cos` and `kl` (over `judged` keys) cannot
    /// come within [`TIE_MARGIN`] of `bar`, whatever its other keys hold: each of them at most
    /// a cosine of 1 and a KL of 0, its KL mean over at most the observation's rows.
    fn out_of_contention(&self, (cos, kl, judged): (f64, f64, usize), bar: &Match) -> bool {
        if self.by_kl() {
            return bar.kl.is_finite() && self.rows > 0 && kl / self.rows as f64 > bar.kl + TIE_MARGIN;
        }
        let n = self.keys.len() as f64;
        (cos + (n - judged as f64)) / n < bar.cosine - TIE_MARGIN
    }
}

/// A decode that feeds the same tokens to every candidate (teacher-forced, or none).
fn teacher_forced(d: &DecodeSpec) -> bool {
    matches!(d, DecodeSpec::Forced(_)) || d.steps() == 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Every key the run makes has come.
    Matched,
    /// Its best possible match cannot reach the bar.
    Out,
}

/// The sink a run goes into: every tap goes on to `inner`; each key explain matches is
/// counted as it comes (and, with a bar, matched at once), and the run is stopped (an error
/// the caller tells by `stop`) when it is matched or out of contention.
struct Judge<'s, 'e> {
    inner: &'s mut dyn TapSink,
    emu: &'e Emulator<'e>,
    /// Whether it may stop the run (the shortcuts on, and not a clean run recorded whole).
    ends: bool,
    bar: Option<Match>,
    /// Keys the run makes (not below the block it started at), and those that came.
    expected: usize,
    came: BTreeSet<Key>,
    /// The judged keys' cosines and KLs summed, and how many were judged.
    sums: (f64, f64, usize),
    stop: Option<Stop>,
}

impl<'s, 'e> Judge<'s, 'e> {
    fn arrived(&mut self, key: Key, value: impl FnOnce() -> Result<ArrayD<f32>>) -> Result<()> {
        let emu = self.emu;
        if !self.ends || self.stop.is_some() || !emu.key_set.contains(&key) || !self.came.insert(key.clone())
        {
            return Ok(());
        }
        if let Some(bar) = self.bar {
            if let Some(o) = emu.observed.get(&key)? {
                let p = part(&key, &value()?, &o);
                self.sums.0 += p.cosine;
                self.sums.1 += p.kls.iter().sum::<f64>();
            }
            self.sums.2 += 1;
            if emu.out_of_contention(self.sums, &bar) {
                return self.halt(Stop::Out);
            }
        }
        if self.came.len() == self.expected {
            return self.halt(Stop::Matched);
        }
        Ok(())
    }

    fn halt(&mut self, why: Stop) -> Result<()> {
        self.stop = Some(why);
        Err(Error::usage("explain: this emulation has what it is matched on"))
    }
}

impl TapSink for Judge<'_, '_> {
    fn wants(&self, tap: Tap) -> bool {
        self.inner.wants(tap)
    }
    fn put(&mut self, phase: Phase, tap: Tap, t: &Tensor) -> Result<()> {
        self.inner.put(phase, tap, t)?;
        self.arrived(Key::new(phase, tap), || crate::capture::tensor_to_array(t))
    }
    fn put_array(&mut self, key: Key, a: ArrayD<f32>) -> Result<()> {
        let copy = (self.bar.is_some() && self.emu.key_set.contains(&key)).then(|| a.clone());
        self.inner.put_array(key.clone(), a)?;
        self.arrived(key, || Ok(copy.expect("copied when judged")))
    }
}
