//! What stands in for each observation's checkpoint: the given checkpoint where the record's
//! shape is its own (trained weights), else a checkpoint synthesized at the recorded shape
//! (hidden, layers, heads, kv heads, vocabulary, tied lm_head) with the massive-activation
//! channels real checkpoints have — random weights, which rarely collapse or react, so passing
//! there is weak evidence. A dimension the record leaves out takes a default, said in the
//! report. A bed also holds what every hypothesis is judged against on it: the float
//! reference's and the recipe's greedy tokens, and the reference's logits at the figures'
//! positions.

use super::record::{At, Observation, Outcome, Pattern, MAX_COST};
use crate::backend::decoder::DecoderBackend;
use crate::error::{Error, Result};
use crate::fault::spec::FaultSpec;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::synth::SynthSpec;
use crate::model::Checkpoint;
use crate::probe::sweep::{base_generate_until, logits_run};
use crate::tap::{Phase, Tap};
use serde::Serialize;

/// How strongly a bed's results speak for the checkpoint on record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Evidence {
    /// The given checkpoint is the one on record.
    Trained,
    /// Trained weights of the recorded shape, of another checkpoint (an instruct model for its
    /// base one): the shape's arithmetic, close weights.
    TrainedOfTheShape,
    /// Random weights of the recorded shape: a hypothesis that collapses or moves them acts;
    /// one that does not may still act on trained weights.
    Synthesized,
}

impl Evidence {
    pub fn text(self) -> &'static str {
        match self {
            Evidence::Trained => "strong: the checkpoint on record",
            Evidence::TrainedOfTheShape => {
                "fair: trained weights of the recorded shape, another checkpoint's"
            }
            Evidence::Synthesized => "weak: random weights rarely collapse or react",
        }
    }
}

/// What stood in for one observation, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct StoodIn {
    pub label: String,
    pub evidence: Evidence,
    /// Dimensions the record leaves out, and what the stand-in took.
    pub defaults: Vec<String>,
}

/// Where an observation is judged.
pub struct Bed {
    pub ckpt: Checkpoint,
    pub inputs: InputSet,
    /// Greedy tokens of the float reference and of the recipe alone (base scope, as long as the
    /// observation generates).
    pub reference_tokens: Vec<u32>,
    pub recipe_tokens: Vec<u32>,
    /// For each position a figure is at: the float reference's and the recipe's logits there.
    pub figure_logits: Vec<(At, Vec<f32>, Vec<f32>)>,
    pub stood_in: StoodIn,
}

/// The synthesized stand-in of `o`'s shape, and the defaults it took.
pub fn stand_in(o: &Observation) -> (SynthSpec, Vec<String>) {
    let mut took = Vec::new();
    let head_dim =
        [64, 48, 32, 16, 8, 2].into_iter().find(|d| o.hidden.is_multiple_of(*d)).unwrap_or(o.hidden);
    let heads = o.heads.unwrap_or_else(|| {
        took.push(format!("heads {} (head dim {head_dim})", o.hidden / head_dim));
        o.hidden / head_dim
    });
    let kv_heads = o.kv_heads.unwrap_or_else(|| {
        took.push(format!("kv heads {heads} (MHA)"));
        heads
    });
    let layers = o.layers.unwrap_or_else(|| {
        took.push("layers 6".into());
        6
    });
    let vocab = o.vocab.unwrap_or_else(|| {
        took.push("vocab 32000".into());
        32000
    });
    let mut s = SynthSpec::arch(crate::model::Arch::Llama, 16);
    (s.hidden, s.layers, s.heads, s.kv_heads) = (o.hidden, layers, heads, kv_heads);
    s.head_dim = Some(o.hidden / heads);
    s.vocab = Some(vocab);
    s.massive_channels = 4;
    s.tied = o.tied == Some(true);
    (s, took)
}

/// Multiply-adds per row of `o`'s stand-in: the projections, the MLP and the lm_head.
pub fn macs_per_row(o: &Observation) -> f64 {
    let (s, _) = stand_in(o);
    let (h, kv) = (s.hidden as f64, (s.kv_heads * s.head_dim.unwrap_or(1)) as f64);
    let mlp = crate::model::synth::default_intermediate(s.hidden) as f64;
    s.layers as f64 * (2.0 * h * h + 2.0 * h * kv + 3.0 * h * mlp) + h * s.vocab.unwrap_or(0) as f64
}

impl Pattern {
    /// Multiply-adds the record asks for with `hypotheses` hypotheses: per observation, its
    /// stand-in's multiply-adds per row times the rows its judge runs (base scope re-runs the
    /// growing conversation at every step; figures one prefill), once per hypothesis and once more
    /// for its reference and recipe runs.
    pub fn cost(&self, hypotheses: usize) -> f64 {
        self.observations.iter().map(|o| self.cost_of(o, hypotheses)).sum()
    }

    /// One observation's part of [`Pattern::cost`].
    fn cost_of(&self, o: &Observation, hypotheses: usize) -> f64 {
        let per_row = macs_per_row(o);
        let p = o.prompt(&self.defaults).len() as f64;
        let rows = match o.outcome {
            Outcome::Figures => p,
            _ => (0..o.tokens(&self.defaults)).map(|k| p + k as f64).sum::<f64>() + p,
        };
        per_row * rows * (hypotheses as f64 + 2.0)
    }

    /// The record's cost against [`MAX_COST`], refused up front naming its dearest observation.
    pub fn check_cost(&self, hypotheses: usize, what: &str) -> Result<()> {
        let cost = self.cost(hypotheses);
        if cost <= MAX_COST {
            return Ok(());
        }
        let one = |i: usize| self.cost_of(&self.observations[i], hypotheses);
        let dearest = (0..self.observations.len())
            .max_by(|&a, &b| one(a).total_cmp(&one(b)))
            .expect("a record has observations");
        Err(Error::input(
            what,
            format!(
                "judging its {hypotheses} hypotheses asks for {cost:.2e} multiply-adds, past the bound of {MAX_COST:.0e} \
                 (about 20 min on 2 cores); the dearest is {}: record fewer tokens, a shorter prompt or fewer \
                 observations",
                self.observation_name(dearest)
            ),
        ))
    }
}

/// Whether `ckpt` has `o`'s shape: every recorded dimension its own.
fn same_shape(o: &Observation, ckpt: &Checkpoint) -> bool {
    let c = &ckpt.config;
    let agree = |v: Option<usize>, own: usize| v.is_none_or(|v| v == own);
    o.hidden == c.hidden_size
        && agree(o.layers, c.num_layers)
        && agree(o.heads, c.num_heads)
        && agree(o.kv_heads, c.num_kv_heads)
        && agree(o.vocab, c.vocab_size)
        && o.tied.is_none_or(|t| t == c.tie_word_embeddings)
}

/// The bed of observation `i`: `given` where the shapes agree, a synthesized stand-in otherwise.
pub fn bed(p: &Pattern, i: usize, given: &Checkpoint) -> Result<Bed> {
    let o = &p.observations[i];
    let (ckpt, stood_in) = if same_shape(o, given) {
        let evidence = match &o.checkpoint {
            Some(name) if given.source.to_string().contains(name.rsplit('/').next().unwrap_or(name)) => {
                Evidence::Trained
            }
            _ => Evidence::TrainedOfTheShape,
        };
        (
            given.clone(),
            StoodIn { label: format!("{} (given)", given.source), evidence, defaults: Vec::new() },
        )
    } else {
        let (spec, defaults) = stand_in(o);
        let label = format!(
            "synthesized hidden {} × {} layers, heads {}/{}, vocab {}{}",
            spec.hidden,
            spec.layers,
            spec.heads,
            spec.kv_heads,
            spec.vocab.unwrap_or(0),
            if spec.tied { ", tied" } else { "" }
        );
        let ckpt = spec.build()?;
        (ckpt, StoodIn { label, evidence: Evidence::Synthesized, defaults })
    };
    let mut inputs = InputSet::new(o.prompt(&p.defaults).to_vec());
    inputs.decode = DecodeSpec::Greedy(0);
    let steps = if o.outcome == Outcome::Figures { 0 } else { o.tokens(&p.defaults) };
    let reference_tokens = generate(&ckpt, &inputs, &[], None, steps, |_| false)?;
    let recipe_tokens = generate(&ckpt, &inputs, &[], o.recipe(&p.defaults), steps, |_| false)?;
    let mut figure_logits = Vec::new();
    for at in positions(o) {
        let reference = logits_at(&ckpt, &inputs, at, &[], None)?;
        let recipe = logits_at(&ckpt, &inputs, at, &[], o.recipe(&p.defaults))?;
        figure_logits.push((at, reference, recipe));
    }
    Ok(Bed { ckpt, inputs, reference_tokens, recipe_tokens, figure_logits, stood_in })
}

/// One base-scope greedy generation under `faults` (+ `quant`), stopped by `done`, or by a
/// token outside the vocabulary (`no-lm-head`'s hidden-wide output): it cannot be fed back, and
/// ends the generation as its last token.
pub fn generate(
    ckpt: &Checkpoint,
    inputs: &InputSet,
    faults: &[FaultSpec],
    quant: Option<&FaultSpec>,
    steps: usize,
    mut done: impl FnMut(&[u32]) -> bool,
) -> Result<Vec<u32>> {
    let vocab = ckpt.config.vocab_size;
    let mut emu = DecoderBackend::emulator("hypothesis", ckpt, faults, quant)?;
    base_generate_until(&mut emu, inputs, steps, |t| outside(t, vocab).is_some() || done(t))
}

/// The last token when it lies outside the vocabulary.
pub fn outside(t: &[u32], vocab: usize) -> Option<u32> {
    t.last().copied().filter(|&x| x as usize >= vocab)
}

/// The distinct positions `o`'s figures are at.
pub fn positions(o: &Observation) -> Vec<At> {
    let mut at: Vec<At> = Vec::new();
    for f in &o.figures {
        if !at.contains(&f.at) {
            at.push(f.at);
        }
    }
    at
}

/// The logits a device returns for a prefill up to `at` (the prompt's last position, or its
/// position p: the prompt cut after p), under `faults` (+ `quant`): its output row, the frame's
/// last as genai reads it. The scope changes nothing here: a base-scope frame's padding moves
/// no real row (`device::base_scope_tests`).
pub fn logits_at(
    ckpt: &Checkpoint,
    inputs: &InputSet,
    at: At,
    faults: &[FaultSpec],
    quant: Option<&FaultSpec>,
) -> Result<Vec<f32>> {
    let mut emu = DecoderBackend::emulator("hypothesis", ckpt, faults, quant)?;
    let mut prompt = inputs.clone();
    prompt.decode = DecodeSpec::Greedy(0);
    if let At::Position(p) = at {
        prompt.prompt.truncate(p + 1);
    }
    let run = logits_run(&mut emu, &prompt)?;
    let a = run
        .capture
        .at(Phase::Prefill, Tap::Logits)
        .ok_or_else(|| Error::usage("the prefill returned no logits"))?;
    let last = a.outer_iter().last().ok_or_else(|| Error::usage("the prefill returned no rows"))?;
    Ok(last.iter().copied().collect())
}
