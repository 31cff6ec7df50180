//! `hefprobe synth-hef`: write a simulated LLM HEF in the real container format, for a
//! checkpoint — prefill and tbt groups with the inputs genai expects (suffixes
//! `input_layer1..6`), KV-cache layers shared by id, a logits output (optionally sharded),
//! quant infos from calibration, the four resources genai reads, and one resource of our own
//! (`hefprobe-sim.json`) naming the checkpoint and the emulator configuration the simulated
//! device runs. Options write the structural mistakes of the findings table so `audit` can be
//! tested against them.

use crate::capture::NoTaps;
use crate::error::{Error, Result};
use crate::fault::catalog::{self, rope::PositionShift, rope::RopeFault};
use crate::fault::quant::Affine;
use crate::hef::model::extension;
use crate::hef::{CacheLayer, FormatOrder, Hef, NetworkGroup, QuantInfo, Resource, Shape3, Stream};
use crate::inputs::{DecodeSpec, InputSet};
use crate::model::hooks::{Hooks, StepCtx};
use crate::model::run::{run_inputs, RunRecord};
use crate::model::synth::SynthSpec;
use crate::model::{Checkpoint, Decoder};
use crate::tap::{LayerTap, Tap};
use candle_core::Tensor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The resource naming what the simulated device runs.
pub const SIM_RESOURCE: &str = "hefprobe-sim.json";
pub const SIM_SCHEMA: &str = "hefprobe.sim/1";

/// Structural mistakes `synth-hef` can write (findings 1, 2, 3, 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mistake {
    /// The graph stops at the final-norm hidden state (finding 1).
    MissingLmHead,
    /// The prefill output holds every position, [1, P, vocab] (finding 2).
    FullSequenceOutput,
    /// hailo-config.json says `prefill_input_tokens_size` (finding 5).
    MisspelledConfigKey,
    /// Q RoPE inputs tiled per kv head instead of per head (finding 3).
    WrongRopeWidth,
}

impl Mistake {
    pub const ALL: [Mistake; 4] = [
        Mistake::MissingLmHead,
        Mistake::FullSequenceOutput,
        Mistake::MisspelledConfigKey,
        Mistake::WrongRopeWidth,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mistake::MissingLmHead => "missing-lm-head",
            Mistake::FullSequenceOutput => "full-sequence-output",
            Mistake::MisspelledConfigKey => "misspelled-config-key",
            Mistake::WrongRopeWidth => "wrong-rope-width",
        }
    }

    pub fn parse(s: &str) -> Result<Mistake> {
        Mistake::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            Error::usage(format!(
                "--mistake `{s}`: expected one of {}",
                Mistake::ALL.map(|m| m.name()).join(", ")
            ))
        })
    }
}

/// How the simulated device re-creates the checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum SimCheckpoint {
    Synth(SynthSpec),
    Path { path: PathBuf, hash: String },
}

/// `hefprobe-sim.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimSpec {
    pub schema: String,
    pub checkpoint: SimCheckpoint,
    /// Fault specs the device computes (see `hefprobe faults`).
    pub faults: Vec<String>,
    /// Quantization of the compiled graph, `quant` fault parameters (e.g. "a16", "w8a16").
    pub quant: String,
    pub mistakes: Vec<Mistake>,
    /// Planted run-to-run noise (tests of the suite's repeatability gate): see [`SimNoise`].
    /// Absent from HEFs written without it, so their resource is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<SimNoise>,
}

/// Run-to-run noise a real device should not have, planted so the suite's repeatability gate
/// can be tested: every output value gets Gaussian noise of standard deviation `std` (output
/// units, i.e. logits), drawn from a ChaCha8 stream seeded with `seed` that continues across
/// runs — two runs of the same inputs differ, and a test sees the same sequence every time.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimNoise {
    pub std: f32,
    pub seed: u64,
}

#[derive(Debug, Clone)]
pub struct SynthHefOptions {
    /// Group names are `<name>__prefill` and `<name>__tbt`.
    pub name: String,
    pub prefill_tokens: usize,
    pub kv_cache_size: usize,
    pub tbt: bool,
    pub faults: Vec<String>,
    pub quant: String,
    pub lm_head_shards: usize,
    pub mistakes: Vec<Mistake>,
    /// Calibration prompts (token ids); empty = seeded random prompts.
    pub calibration: Vec<Vec<u32>>,
    /// Planted run-to-run noise (see [`SimNoise`]).
    pub noise: Option<SimNoise>,
}

impl Default for SynthHefOptions {
    fn default() -> Self {
        SynthHefOptions {
            name: "hefprobe_sim".into(),
            // genai's defaults when hailo-config.json is silent (pre_process.hpp).
            prefill_tokens: 96,
            kv_cache_size: 2048,
            tbt: true,
            faults: Vec::new(),
            quant: "a16".into(),
            lm_head_shards: 1,
            mistakes: Vec::new(),
            calibration: Vec::new(),
            noise: None,
        }
    }
}

/// Ranges seen while calibrating: logits, final norm, and each layer's keys and values.
#[derive(Default)]
struct Ranges {
    sites: BTreeMap<String, (f32, f32)>,
}

impl Ranges {
    fn see(&mut self, site: String, t: &Tensor) -> Result<()> {
        let lo = t.min_all()?.to_scalar::<f32>()?;
        let hi = t.max_all()?.to_scalar::<f32>()?;
        let e = self.sites.entry(site).or_insert((lo, hi));
        e.0 = e.0.min(lo);
        e.1 = e.1.max(hi);
        Ok(())
    }

    fn get(&self, site: &str) -> (f32, f32) {
        self.sites.get(site).copied().unwrap_or((-1.0, 1.0))
    }
}

impl Hooks for Ranges {
    fn edit(&mut self, _ctx: &StepCtx, tap: Tap, t: Tensor) -> Result<Tensor> {
        match tap {
            Tap::Logits | Tap::FinalNorm => self.see(tap.to_string(), &t)?,
            Tap::Layer(l, LayerTap::K | LayerTap::V) => self.see(format!("cache.{l}"), &t)?,
            _ => {}
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

/// RoPE inputs: float32 from the host, quantized by the runtime into [-1, 1] (quantization.hpp).
pub fn rope_quant() -> QuantInfo {
    QuantInfo { zp: 32767.0, scale: 1.0 / 32767.0, min: -1.0, max: 1.0 }
}

/// The mask: uint8, "on" = quantize(1.0) = 255.
pub fn mask_quant() -> QuantInfo {
    QuantInfo { zp: 0.0, scale: 1.0 / 255.0, min: 0.0, max: 1.0 }
}

fn calibrate(model: &Decoder, opts: &SynthHefOptions) -> Result<Ranges> {
    use rand::{Rng, SeedableRng};
    let vocab = model.cfg.vocab_size as u32;
    let prompts = if opts.calibration.is_empty() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6361_6c69);
        (0..2).map(|_| (0..32).map(|_| rng.random_range(0..vocab)).collect()).collect()
    } else {
        opts.calibration.clone()
    };
    let mut ranges = Ranges::default();
    for prompt in prompts {
        let mut inputs = InputSet::new(prompt);
        inputs.decode = DecodeSpec::Greedy(8);
        run_inputs(model, &inputs, &mut NoTaps, &mut ranges, &mut RunRecord::default())?;
    }
    Ok(ranges)
}

fn stream(name: String, rows: usize, features: usize, data_bytes: u32, quant: QuantInfo) -> Stream {
    let shape = Shape3::new(1, rows as u32, features as u32);
    Stream {
        name,
        shape,
        padded: shape,
        order: FormatOrder::Nhwc,
        data_bytes,
        quant,
        quant_per_feature: Vec::new(),
        transposed: false,
    }
}

/// Build the HEF.
pub fn synth_hef(ckpt: &Checkpoint, checkpoint: SimCheckpoint, opts: &SynthHefOptions) -> Result<Hef> {
    let c = &ckpt.config;
    if opts.prefill_tokens == 0 || opts.kv_cache_size <= opts.prefill_tokens {
        return Err(Error::usage(format!(
            "--kv-cache-size ({}) must exceed --prefill-tokens ({}), which must be at least 1",
            opts.kv_cache_size, opts.prefill_tokens
        )));
    }
    if opts.lm_head_shards == 0 || opts.lm_head_shards > c.vocab_size {
        return Err(Error::usage(format!(
            "--lm-head-shards {}: expected 1..={}",
            opts.lm_head_shards, c.vocab_size
        )));
    }
    if let Some(n) = opts.noise.filter(|n| !(n.std.is_finite() && n.std > 0.0)) {
        return Err(Error::usage(format!("--noise {}: give a standard deviation above 0", n.std)));
    }
    // The device computes these faults; those acting on positions need positions the device
    // never receives (it gets RoPE tables), so they belong in the emulator.
    for f in &opts.faults {
        if catalog::is::<RopeFault>(f) || catalog::is::<PositionShift>(f) {
            return Err(Error::usage(format!(
                "fault `{f}` acts on positions, which a device never receives (it gets RoPE tables); \
                 use it with the emulator backend"
            )));
        }
        crate::fault::catalog::parse(f, c)?;
    }
    let model = Decoder::new(ckpt)?;
    let ranges = calibrate(&model, opts)?;

    let embed = ckpt.tensor("model.embed_tokens.weight")?;
    let (elo, ehi) = (embed.min_all()?.to_scalar::<f32>()?, embed.max_all()?.to_scalar::<f32>()?);
    let emb_q = {
        let a = Affine::calibrate(elo, ehi, 16, false);
        QuantInfo { zp: a.zp, scale: a.scale, min: elo, max: ehi }
    };
    let embeddings: Vec<u8> = embed
        .flatten_all()?
        .to_vec1::<f32>()?
        .iter()
        .flat_map(|&x| (emb_q.quantize(x).clamp(0.0, 65535.0) as u16).to_le_bytes())
        .collect();
    // theta: head_dim values, the rotate-half frequencies duplicated, so cos/sin of the
    // whole head come straight out of genai's tables.
    let half = &model.rope.inv_freq;
    let theta: Vec<u8> = (0..c.head_dim).flat_map(|i| half[i % half.len()].to_le_bytes()).collect();

    let mut groups = vec![group(ckpt, opts, &ranges, emb_q, true)];
    if opts.tbt {
        groups.push(group(ckpt, opts, &ranges, emb_q, false));
    }
    let spec = SimSpec {
        schema: SIM_SCHEMA.into(),
        checkpoint,
        faults: opts.faults.clone(),
        quant: opts.quant.clone(),
        mistakes: opts.mistakes.clone(),
        noise: opts.noise,
    };
    let tokenizer = crate::model::tokenizer::synth_tokenizer_json().to_string();
    let resources = vec![
        Resource::new("embeddings.bin", embeddings),
        Resource::new("tokenizer.json", tokenizer.into_bytes()),
        Resource::new("rope_theta_data.bin", theta),
        Resource::new("hailo-config.json", config_json(ckpt, opts).into_bytes()),
        Resource::new(SIM_RESOURCE, serde_json::to_vec_pretty(&spec).expect("json")),
    ];
    Ok(Hef {
        version: 3,
        hw_arch: 103, // HAILO1XH, the Hailo-10H/15H family (device_internal.cpp)
        sdk_version: format!("hefprobe {} synth-hef", env!("CARGO_PKG_VERSION")),
        groups,
        resources,
        extensions: vec![
            extension::HAILO_NET_FLOW,
            extension::PERIPH_CALCULATION_IN_HAILORT,
            extension::EXTERNAL_RESOURCES,
        ],
    })
}

fn config_json(ckpt: &Checkpoint, opts: &SynthHefOptions) -> String {
    let c = &ckpt.config;
    let count_key = if opts.mistakes.contains(&Mistake::MisspelledConfigKey) {
        "prefill_input_tokens_size"
    } else {
        "prefill_input_tokens_count"
    };
    let mut pre = serde_json::Map::new();
    pre.insert("kv_cache_size".into(), opts.kv_cache_size.into());
    pre.insert("num_attention_heads".into(), c.num_heads.into());
    pre.insert("num_key_value_heads".into(), c.num_kv_heads.into());
    pre.insert(count_key.into(), opts.prefill_tokens.into());
    let v = serde_json::json!({
        "eos_token_id": c.eos_token_id.unwrap_or(2),
        "default_generation_params": {"do_sample": false, "temperature": 1.0, "repetition_penalty": 1.0},
        "pre_process_params": pre,
    });
    serde_json::to_string_pretty(&v).expect("json")
}

fn group(
    ckpt: &Checkpoint,
    opts: &SynthHefOptions,
    ranges: &Ranges,
    emb_q: QuantInfo,
    prefill: bool,
) -> NetworkGroup {
    let c = &ckpt.config;
    let name = format!("{}__{}", opts.name, if prefill { "prefill" } else { "tbt" });
    let t = if prefill { opts.prefill_tokens } else { 1 };
    let l = c.head_dim;
    let q_heads = if opts.mistakes.contains(&Mistake::WrongRopeWidth) { c.num_kv_heads } else { c.num_heads };
    let input = |i: usize, features: usize, bytes: u32, q: QuantInfo| {
        stream(format!("{name}/input_layer{i}"), t, features, bytes, q)
    };
    let inputs = vec![
        input(1, c.hidden_size, 2, emb_q),
        input(2, opts.kv_cache_size * c.num_heads, 1, mask_quant()),
        input(3, l * q_heads, 2, rope_quant()),
        input(4, l * q_heads, 2, rope_quant()),
        input(5, l * c.num_kv_heads, 2, rope_quant()),
        input(6, l * c.num_kv_heads, 2, rope_quant()),
    ];
    let out_rows = if prefill && opts.mistakes.contains(&Mistake::FullSequenceOutput) { t } else { 1 };
    let outputs = if opts.mistakes.contains(&Mistake::MissingLmHead) {
        let (lo, hi) = ranges.get("final_norm");
        vec![stream(format!("{name}/output_layer1"), out_rows, c.hidden_size, 2, u16_quant(lo, hi))]
    } else {
        let (lo, hi) = ranges.get("logits");
        shard_widths(c.vocab_size, opts.lm_head_shards)
            .into_iter()
            .enumerate()
            .map(|(i, w)| stream(format!("{name}/output_layer{}", i + 1), out_rows, w, 2, u16_quant(lo, hi)))
            .collect()
    };
    let entry = c.num_kv_heads * c.head_dim;
    let mut caches = Vec::new();
    for layer in 0..c.num_layers {
        let (lo, hi) = ranges.get(&format!("cache.{layer}"));
        for (kind, id) in [("k", 2 * layer), ("v", 2 * layer + 1)] {
            for (is_input, window, side) in [(true, opts.kv_cache_size - t, "read"), (false, t, "write")] {
                caches.push(CacheLayer {
                    name: format!("{name}/cache_{kind}{layer}_{side}"),
                    is_input,
                    cache_id: id as u32,
                    shape: Shape3::new(1, window as u32, entry as u32),
                    // HailoRT takes the hardware features as the entry's byte count
                    // (cache_manager.cpp get_cache_ios_infos): 2 bytes per uint16 value.
                    padded: Shape3::new(1, window as u32, 2 * entry as u32),
                    order: FormatOrder::Nhwc,
                    data_bytes: 2,
                    quant: u16_quant(lo, hi),
                });
            }
        }
    }
    NetworkGroup { name, inputs, outputs, unordered_outputs: Vec::new(), caches, contexts: 1 }
}

/// Shard widths: ⌈V/N⌉ each, the last shorter (the lm-head-shards fault's split).
pub fn shard_widths(vocab: usize, n: usize) -> Vec<usize> {
    let w = vocab.div_ceil(n);
    (0..n).map(|i| w.min(vocab - (i * w).min(vocab))).filter(|&x| x > 0).collect()
}

/// Read `hefprobe-sim.json` from a HEF: None when the HEF is not one hefprobe wrote.
pub fn sim_spec(hef: &Hef, what: &str) -> Result<Option<SimSpec>> {
    let Some(bytes) = hef.resource(SIM_RESOURCE) else { return Ok(None) };
    let spec: SimSpec = serde_json::from_slice(bytes).map_err(|e| {
        Error::input(format!("{what} resource {SIM_RESOURCE}"), format!("not a valid simulator spec: {e}"))
    })?;
    if spec.schema != SIM_SCHEMA {
        return Err(Error::input(
            format!("{what} resource {SIM_RESOURCE}"),
            format!("schema `{}`; this hefprobe reads `{SIM_SCHEMA}`", spec.schema),
        ));
    }
    Ok(Some(spec))
}

impl SimCheckpoint {
    pub fn load(&self) -> Result<Checkpoint> {
        match self {
            SimCheckpoint::Synth(s) => s.build(),
            SimCheckpoint::Path { path, hash } => {
                let c = Checkpoint::load(path)?;
                if &c.hash != hash {
                    return Err(Error::input(
                        path.display().to_string(),
                        format!(
                            "checkpoint hash {} differs from {hash} the simulated HEF was made from",
                            c.hash
                        ),
                    ));
                }
                Ok(c)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_widths_cover_the_vocab() {
        assert_eq!(shard_widths(10, 3), vec![4, 4, 2]);
        assert_eq!(shard_widths(9, 3), vec![3, 3, 3]);
        assert_eq!(shard_widths(7, 1), vec![7]);
    }

    #[test]
    fn u16_quant_covers_the_range() {
        let q = u16_quant(-3.0, 5.0);
        assert!(q.dequantize(0.0) < -3.0 && q.dequantize(65535.0) > 5.0);
        assert!((q.dequantize(q.quantize(1.25)) - 1.25).abs() < q.scale);
    }
}
