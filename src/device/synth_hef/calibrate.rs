//! What a simulated compiler calibrates on (hefprobe's calibration text, given prompts or token
//! ids, seeded random prompts), and the ranges it sees there: logits, final norm, each layer's
//! keys and values, and per exposed tap one range per feature.

use crate::device::exposed::Layout;
use crate::error::{Error, Result};
use crate::fault::quant::Affine;
use crate::hef::QuantInfo;
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::hooks::{Hooks, StepCtx};
use crate::model::run::{run_inputs, RunRecord};
use crate::model::tokenizer::{Tokenizer, SYNTH_TOKENIZER_VOCAB};
use crate::model::{Checkpoint, Decoder};
use crate::tap::{LayerTap, Tap};
use candle_core::Tensor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The prompts a compiled graph is calibrated on (each followed by 16 greedy steps, as a DFC
/// calibration set of full conversations would be), and where they came from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    pub source: String,
    pub prompts: Vec<Vec<u32>>,
}

/// hefprobe's calibration text: ordinary prose, a recipe, a question and answer, code, a
/// letter; one prompt per paragraph.
pub const CALIBRATION_TEXT: &str = include_str!("../calibration.txt");

/// Greedy steps after each calibration prompt.
pub(super) const CALIBRATION_DECODE: usize = 16;

/// The most prompts and tokens a calibration set holds (`--calib-text`, `--calib-tokens`, a
/// simulated HEF's recorded set): far past any calibration corpus (hefprobe's own is 9
/// paragraphs, ~600 tokens), so a file or a damaged resource cannot make calibrating, which runs
/// every prompt and its greedy steps, go on without bound.
pub const MAX_CALIBRATION_PROMPTS: usize = 256;
pub const MAX_CALIBRATION_TOKENS: usize = 1 << 16;

impl Calibration {
    /// Four seeded random prompts of 64 tokens: the calibration of a checkpoint with no
    /// tokenizer of its own (synthesized weights, where any token is as typical as another).
    pub fn random(vocab: usize) -> Calibration {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x7369_6d63);
        let prompts = (0..4).map(|_| (0..64).map(|_| rng.random_range(0..vocab as u32)).collect()).collect();
        Calibration { source: "4 seeded random prompts of 64 token ids".into(), prompts }
    }

    /// Paragraphs of `text` (separated by blank lines) tokenized with `tok`, as genai encodes
    /// them (no special tokens); `what` names the text in the source.
    pub fn from_text(
        text: &str,
        tok: &crate::model::tokenizer::Tokenizer,
        what: &str,
    ) -> Result<Calibration> {
        let paragraphs: Vec<&str> = text.split("\n\n").map(str::trim).filter(|p| !p.is_empty()).collect();
        if paragraphs.len() > MAX_CALIBRATION_PROMPTS {
            return Err(Error::input(
                what,
                format!(
                    "holds {} paragraphs; a calibration set is at most {MAX_CALIBRATION_PROMPTS} prompts \
                     (one per paragraph): keep the most typical ones",
                    paragraphs.len()
                ),
            ));
        }
        let (mut prompts, mut tokens) = (Vec::new(), 0usize);
        for p in paragraphs {
            let ids = tok.encode(p, false)?.ids;
            tokens = tokens.saturating_add(ids.len());
            if tokens > MAX_CALIBRATION_TOKENS {
                return Err(Error::input(
                    what,
                    format!("holds more than {MAX_CALIBRATION_TOKENS} tokens; a calibration set is at most that: shorten it"),
                ));
            }
            prompts.push(ids);
        }
        if prompts.is_empty() {
            return Err(Error::input(
                what,
                "holds no text to calibrate on (paragraphs are separated by blank lines)",
            ));
        }
        let tokens: usize = prompts.iter().map(Vec::len).sum();
        Ok(Calibration {
            source: format!("{what}: {} prompts, {tokens} tokens, by {}", prompts.len(), tok.path.display()),
            prompts,
        })
    }

    /// The default for `ckpt`: hefprobe's calibration text through the checkpoint's own
    /// tokenizer, or [`Calibration::random`] when it has none.
    pub fn default_for(ckpt: &Checkpoint) -> Result<Calibration> {
        match crate::model::tokenizer::Tokenizer::of_checkpoint(ckpt)? {
            Some(tok) => Calibration::from_text(CALIBRATION_TEXT, &tok, "hefprobe's calibration text"),
            None => Ok(Calibration::random(ckpt.config.vocab_size)),
        }
    }

    /// The calibration runs: every prompt, then its greedy steps.
    pub fn inputs(&self) -> Vec<InputSet> {
        let greedy = |p: &Vec<u32>| InputSet {
            decode: DecodeSpec::Greedy(CALIBRATION_DECODE),
            ..InputSet::new(p.clone())
        };
        self.prompts.iter().map(greedy).collect()
    }
}

/// Ranges seen while calibrating: logits, final norm, and each layer's keys and values; and per
/// exposed tap, one range per feature of its output row (per head for attention scores and
/// probabilities, whose key slots the calibration runs do not lay out as the ring does).
#[derive(Default)]
pub(super) struct Ranges {
    sites: BTreeMap<String, (f32, f32)>,
    exposed: BTreeMap<Tap, Vec<(f32, f32)>>,
    pub(super) heads: (usize, usize),
}

impl Ranges {
    fn see(&mut self, site: String, t: &Tensor) -> Result<()> {
        let lo = t.min_all()?.to_scalar::<f32>()?;
        let hi = t.max_all()?.to_scalar::<f32>()?;
        let e = self.sites.entry(site).or_insert((lo, hi));
        *e = (e.0.min(lo), e.1.max(hi));
        Ok(())
    }

    /// Per-unit ranges of an exposed tap: the finite values only (masked scores are -inf).
    fn see_features(&mut self, tap: Tap, t: &Tensor) -> Result<()> {
        let a = crate::capture::tensor_to_array(t)?;
        let layout = Layout::of(tap, self.heads.0, self.heads.1);
        let rows = layout.to_rows(&a);
        let width = rows.first().map_or(0, Vec::len);
        let units = match layout {
            Layout::Keys(h) => h,
            _ => width,
        };
        let per_unit = width / units.max(1);
        let e = self.exposed.entry(tap).or_default();
        e.resize(units, (f32::INFINITY, f32::NEG_INFINITY));
        for row in &rows {
            for (i, &x) in row.iter().enumerate().filter(|(_, x)| x.is_finite()) {
                let r = &mut e[i / per_unit.max(1)];
                (r.0, r.1) = (r.0.min(x), r.1.max(x));
            }
        }
        Ok(())
    }

    /// The quant infos of an exposed output `width` values wide, and its scalar (limvals over
    /// every feature, as HailoRT takes them from the scalar for each feature).
    pub(super) fn exposed_quant(
        &self,
        tap: Tap,
        width: usize,
        how: ExposeQuant,
    ) -> (QuantInfo, Vec<QuantInfo>) {
        let units: Vec<(f32, f32)> = self.exposed[&tap]
            .iter()
            .map(|&(lo, hi)| if lo <= hi { (lo, hi) } else { (-1.0, 1.0) })
            .collect();
        let lo = units.iter().map(|u| u.0).fold(f32::INFINITY, f32::min);
        let hi = units.iter().map(|u| u.1).fold(f32::NEG_INFINITY, f32::max);
        let scalar = u16_quant(lo, hi);
        match how {
            ExposeQuant::PerTensor => (scalar, Vec::new()),
            ExposeQuant::PerFeature => {
                let per_unit = width / units.len().max(1);
                let list = (0..width)
                    .map(|f| {
                        let (a, b) = units[f / per_unit.max(1)];
                        QuantInfo { min: scalar.min, max: scalar.max, ..u16_quant(a, b) }
                    })
                    .collect();
                (scalar, list)
            }
        }
    }

    /// The uint16 quant info of a site's range ([-1, 1] for a site never seen).
    pub(super) fn quant(&self, site: &str) -> QuantInfo {
        let (lo, hi) = self.sites.get(site).copied().unwrap_or((-1.0, 1.0));
        u16_quant(lo, hi)
    }
}

impl Hooks for Ranges {
    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        match tap {
            Tap::Logits | Tap::FinalNorm => self.see(tap.to_string(), &t)?,
            Tap::Layer(l, LayerTap::K | LayerTap::V) => self.see(format!("cache.{l}"), &t)?,
            Tap::Layer(l, LayerTap::Out) => self.see(format!("out.{l}"), &t)?,
            _ => {}
        }
        if self.exposed.contains_key(&tap) {
            self.see_features(tap, &t)?;
        }
        Ok(t)
    }
}

/// An unsigned 16-bit affine quant info covering [lo, hi] widened by 10% (so decode steps
/// past the calibration prompts rarely clip).
pub fn u16_quant(lo: f32, hi: f32) -> QuantInfo {
    let pad = (hi - lo).abs().max(1e-6) * 0.05;
    let a = Affine::calibrate(lo - pad, hi + pad, 16, false);
    QuantInfo { zp: a.zp, scale: a.scale, min: (a.qmin - a.zp) * a.scale, max: (a.qmax - a.zp) * a.scale }
}

/// The ranges the HEF's quant infos are calibrated on: the simulated compiler's one
/// calibration set, the same the simulated graph's activations are calibrated on (a set of its
/// own once made the cache ranges clip ordinary prompts, moving later layers by up to 182 LSB).
pub(super) fn calibrate(model: &Decoder, calibration: &Calibration, expose: &[Tap]) -> Result<Ranges> {
    let c = &model.cfg;
    let exposed = expose.iter().map(|&t| (t, Vec::new())).collect();
    let mut ranges = Ranges { heads: (c.num_heads, c.num_kv_heads), exposed, ..Ranges::default() };
    for i in &calibration.inputs() {
        run_inputs(model, i, &mut Explicit(expose), &mut ranges, &mut RunRecord::default())?;
    }
    Ok(ranges)
}

/// A sink that keeps nothing but asks for `0`'s taps, so the decoder computes attention scores
/// and probabilities explicitly where they are exposed (the hooks see them on the way).
pub(super) struct Explicit<'a>(&'a [Tap]);

impl crate::capture::TapSink for Explicit<'_> {
    fn wants(&self, tap: Tap) -> bool {
        self.0.contains(&tap)
    }
    fn put(&mut self, _: crate::tap::Phase, _: Tap, _: &Tensor) -> Result<()> {
        Ok(())
    }
    fn put_array(&mut self, _: crate::tap::Key, _: ndarray::ArrayD<f32>) -> Result<()> {
        Ok(())
    }
}

crate::named_enum! {
    /// How `synth-hef --expose` quantizes an exposed output's uint16 values.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum ExposeQuant {
        /// One quant info per feature (OUTPUT_SCALE_PER_FEATURE), calibrated per feature (per head
        /// for attention scores and probabilities).
        #[default]
        PerFeature = "per-feature",
        /// One quant info for the whole output.
        PerTensor = "per-tensor",
    }
}

/// Where the calibration set comes from.
#[derive(Debug, Clone, Default)]
pub enum Calibrate {
    /// hefprobe's calibration text through the checkpoint's own tokenizer, or 4 seeded random
    /// prompts when it has none.
    #[default]
    Default,
    /// These prompts (token ids).
    Tokens(Vec<Vec<u32>>),
    /// One prompt per paragraph of this text file, through the checkpoint's tokenizer.
    Text(PathBuf),
    /// 4 seeded random prompts of 64 token ids.
    Random,
}

/// The calibration set asked for (the default when none is), cut to the model's positions:
/// what was cut is said in the second value.
impl Calibration {
    pub fn asked(how: &Calibrate, ckpt: &Checkpoint) -> Result<(Calibration, Option<String>)> {
        fit_positions(asked(how, ckpt)?, ckpt.config.max_position_embeddings)
    }
}

/// A calibration prompt whose run (its tokens, then its greedy steps) passes the model's
/// positions is cut into consecutive windows that fit: every token is still calibrated on, in
/// order, and no run asks for a position the model does not have (hefprobe's calibration text
/// through a byte-level tokenizer is 298 tokens a paragraph, past a 256-position model).
fn fit_positions(mut cal: Calibration, positions: usize) -> Result<(Calibration, Option<String>)> {
    let steps = cal.inputs().first().map_or(0, |i| i.decode.steps());
    let room = positions.saturating_sub(steps);
    if room == 0 {
        return Err(Error::usage(format!(
            "the model has {positions} positions (max_position_embeddings), too few for a calibration prompt and \
             its {steps} greedy steps"
        )));
    }
    let long = cal.prompts.iter().filter(|p| p.len() > room).count();
    if long == 0 {
        return Ok((cal, None));
    }
    let before = cal.prompts.len();
    cal.prompts = cal.prompts.iter().flat_map(|p| p.chunks(room).map(<[u32]>::to_vec)).collect();
    if cal.prompts.len() > MAX_CALIBRATION_PROMPTS {
        return Err(Error::usage(format!(
            "{}: cut to the model's {positions} positions it is {} prompts, more than a calibration set's \
             {MAX_CALIBRATION_PROMPTS}; give fewer or shorter prompts",
            cal.source,
            cal.prompts.len()
        )));
    }
    let note = format!(
        "{}; {long} of its {before} prompts, longer than the model's {positions} positions less {steps} greedy \
         steps, cut into windows of at most {room} tokens: {} prompts",
        cal.source,
        cal.prompts.len()
    );
    cal.source = format!("{}, cut into windows of at most {room} tokens", cal.source);
    Ok((cal, Some(note)))
}

/// The calibration set a flag asks for.
fn asked(how: &Calibrate, ckpt: &Checkpoint) -> Result<Calibration> {
    let path = match how {
        Calibrate::Default => return Calibration::default_for(ckpt),
        Calibrate::Random => return Ok(Calibration::random(ckpt.config.vocab_size)),
        Calibrate::Tokens(prompts) => {
            let source = format!("--calib-tokens: {} prompts", prompts.len());
            return Ok(Calibration { source, prompts: prompts.clone() });
        }
        Calibrate::Text(path) => path,
    };
    let tok = match Tokenizer::of_checkpoint(ckpt)? {
        Some(t) => t,
        None if ckpt.config.vocab_size >= SYNTH_TOKENIZER_VOCAB => Tokenizer::synth(),
        None => {
            return Err(Error::usage(format!(
                "--calib-text {}: the checkpoint has no tokenizer to read it with; give --calib-tokens",
                path.display()
            )))
        }
    };
    let what = path.display().to_string();
    Calibration::from_text(&crate::files::read_text(path, crate::files::Kind::Calibration)?, &tok, &what)
}
