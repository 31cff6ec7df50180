//! Device diagnostics no peer has (`hefprobe diagnose`, and the suite's repeatability gate),
//! concluded in [`diagnosis`]:
//! - **repeatability**: the same InputSet N times, run-to-run spread, before any comparison
//!   is trusted;
//! - **prefill/decode parity**: one position's logits from (a) a prefill, (b) a tbt step over
//!   the device's own cache, (c) a tbt step over a cache the driver wrote from the reference —
//!   separating cache-write error from decode-compute error (finding 9) — and (d) the
//!   cache-free control: a tbt step whose mask hides the whole cache against the reference's
//!   single-token forward, which needs no cache call and so runs over Hailo-10H's RPC client
//!   where (c) cannot (the exporter's own control: 0.9975 masked while the cache-reading step
//!   gave 0.84, `kv_greedy.py --mask-mode self`);
//! - **cache diff**: the device's cache entries against the reference's keys and values, per
//!   layer and head, in quantization steps (LSB).

pub mod bisect;
pub mod diagnosis;

use crate::backend::hef::HefBackend;
use crate::capture::{Capture, MemorySink, NoTaps};
use crate::compare::{metrics, Settings};
use crate::device::driver::LlmDriver;
use crate::device::padded_entry_bytes;
use crate::error::{Error, Result};
use crate::hef::{Hef, QuantInfo};
use crate::inputs::InputSet;
use crate::model::cache::FullCache;
use crate::model::hooks::NoHooks;
use crate::model::Decoder;
use crate::tap::{Phase, TapSelection};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Repeatability {
    pub runs: usize,
    /// Largest |Δ| of any logit between run 1 and any later run.
    pub max_abs: f64,
    pub worst_key: Option<String>,
    /// Run 1 against every later run in a comparison's own figures (the suite's gate widens a
    /// pair's noise band by it; `diagnose` reports `max_abs`).
    #[serde(skip)]
    pub spread: Spread,
}

/// Run 1 against every later run in a comparison's own figures, worst over phases and runs:
/// what the device's own noise alone does to a figure (identical runs: cosine 1, SQNR inf,
/// KL 0, argmax agreement 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub cosine: f64,
    pub sqnr_db: f64,
    pub kl: f64,
    pub argmax_agreement: f64,
}

impl Default for Spread {
    fn default() -> Self {
        Spread { cosine: 1.0, sqnr_db: f64::INFINITY, kl: 0.0, argmax_agreement: 1.0 }
    }
}

impl Spread {
    fn widen(&mut self, first: &Capture, later: &Capture) -> Result<()> {
        let thresholds = crate::compare::thresholds::Thresholds::default();
        let pair = crate::compare::compare(first, later, ("run 1", "run k"), &Settings::new(&thresholds))?;
        for row in &pair.rows {
            if let Some(m) = &row.metrics {
                self.cosine = self.cosine.min(m.cosine);
                self.sqnr_db = self.sqnr_db.min(m.sqnr_db);
            }
            if let Some(l) = &row.logits {
                self.kl = self.kl.max(l.kl_mean);
                self.argmax_agreement = self.argmax_agreement.min(l.argmax_agreement);
            }
        }
        Ok(())
    }
}

/// The same InputSet `runs` times (at least 2) on the device, run 1 against each later run:
/// the largest |Δ| of any logit, and the spread of every comparison figure.
pub fn repeatability(backend: &mut HefBackend, inputs: &InputSet, runs: usize) -> Result<Repeatability> {
    let runs = runs.max(2);
    let mut first: Option<Capture> = None;
    let (mut max_abs, mut worst_key) = (0f64, None);
    let mut spread = Spread::default();
    for _ in 0..runs {
        let mut sink = MemorySink::new(TapSelection::all());
        backend.drive(inputs, &crate::tap::TapSelection::all(), &mut sink, &mut Default::default())?;
        let cap = sink.capture;
        let Some(f) = &first else {
            first = Some(cap);
            continue;
        };
        for (k, a) in f.iter() {
            if let Some(b) = cap.get(k) {
                let d = a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs() as f64).fold(0.0, f64::max);
                if d > max_abs {
                    (max_abs, worst_key) = (d, Some(k.to_string()));
                }
            }
        }
        spread.widen(f, &cap)?;
    }
    Ok(Repeatability { runs, max_abs, worst_key, spread })
}

#[derive(Debug, Clone, Serialize)]
pub struct ParityRow {
    pub path: String,
    pub cosine: Option<f64>,
    pub kl: Option<f64>,
    pub argmax_matches: Option<bool>,
    /// Why the path could not run, when it could not.
    pub unavailable: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Parity {
    pub position: usize,
    pub rows: Vec<ParityRow>,
    pub verdict: ParityVerdict,
}

/// What the three parity paths say together. Decided once, in [`parity`]; printed as a
/// sentence (and carried as that sentence in `hefprobe.diagnose/1` JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParityVerdict {
    Agree,
    /// (a) fails: nothing after it can be judged.
    PrefillDrifts,
    /// (b) fails, (c) passes: finding 9.
    CacheWriteReadDisagree,
    /// (b) and (c) fail.
    DecodeComputeDrifts,
    /// (b) fails and neither (c) nor (d) could run.
    TbtDriftsCacheUnavailable,
    /// (b) fails, (c) could not run, (d) passes: tbt computes its own token right, not what it
    /// reads from the cache.
    TbtCacheReadDrifts,
    /// (b) fails, (c) could not run, (d) fails too: the tbt graph itself.
    TbtGraphDrifts,
}

impl ParityVerdict {
    pub fn sentence(self) -> &'static str {
        match self {
            ParityVerdict::Agree => "prefill and tbt agree with the reference",
            ParityVerdict::PrefillDrifts => {
                "prefill itself drifts: parity cannot separate the cache from the compute"
            }
            ParityVerdict::CacheWriteReadDisagree => {
                "tbt computes correctly from a cache in the reference's layout but not from \
                 the cache prefill wrote: the cache write (prefill) and read (tbt) disagree (finding 9)"
            }
            ParityVerdict::DecodeComputeDrifts => {
                "tbt drifts even over a correct cache: the decode compute, not the cache"
            }
            ParityVerdict::TbtDriftsCacheUnavailable => {
                "tbt drifts; the cache could not be rewritten to tell write from read"
            }
            ParityVerdict::TbtCacheReadDrifts => {
                "tbt computes its own token correctly with the cache masked but drifts over the cache: what \
                 tbt reads from the cache prefill wrote is wrong (finding 9's layout, or the cache read)"
            }
            ParityVerdict::TbtGraphDrifts => {
                "tbt drifts even with the whole cache masked: the tbt graph itself computes wrong, not the cache"
            }
        }
    }
}

impl Serialize for ParityVerdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.sentence())
    }
}

/// Reference logits at the last position of `prompt`, and the reference cache after all but
/// the last token.
fn reference(model: &Decoder, prompt: &[u32]) -> Result<(Vec<f32>, FullCache)> {
    let run = |tokens: &[u32]| -> Result<(Vec<f32>, FullCache)> {
        let mut cache = FullCache::new(model.cfg.num_layers);
        let input = model.step_input(Phase::Prefill, tokens, 0)?;
        let logits = model.step(&input, &mut cache, &mut NoTaps, &mut NoHooks)?;
        Ok((logits.get(tokens.len() - 1)?.to_vec1::<f32>()?, cache))
    };
    let (logits, _) = run(prompt)?;
    let (_, cache) = run(&prompt[..prompt.len() - 1])?;
    Ok((logits, cache))
}

fn judge(path: &str, reference: &[f32], got: &[f32]) -> ParityRow {
    let m = metrics::basic(reference, got, None);
    let row = metrics::logits_row(reference, got);
    ParityRow {
        path: path.to_string(),
        cosine: Some(m.cosine),
        kl: Some(row.kl),
        argmax_matches: Some(row.argmax_ref == row.argmax_cand),
        unavailable: None,
    }
}

fn cache_quant(hef: &Hef, group: &str, id: u32) -> Result<QuantInfo> {
    hef.group(group)
        .and_then(|g| g.caches.iter().find(|c| c.cache_id == id))
        .map(|c| c.quant)
        .ok_or_else(|| Error::input(format!("group `{group}`"), format!("no cache id {id}")))
}

/// Cache id 2l holds layer l's keys, 2l + 1 its values ([kv_head][dim] uint16 per entry).
fn reference_entries(cache: &FullCache, layer: usize, values: bool) -> Result<Vec<Vec<f32>>> {
    let (k, v) =
        cache.layer(layer).ok_or_else(|| Error::usage(format!("reference cache has no layer {layer}")))?;
    let x = if values { v } else { k };
    Ok(x.transpose(0, 1)?.contiguous()?.flatten_from(1)?.to_vec2::<f32>()?)
}

pub fn parity(driver: &mut LlmDriver, hef: &Hef, model: &Decoder, prompt: &[u32]) -> Result<Parity> {
    if prompt.len() < 2 {
        return Err(Error::usage("parity needs a prompt of at least 2 tokens"));
    }
    if !driver.has_tbt() {
        return Err(Error::usage("parity compares prefill with tbt: this HEF has no tbt group (base scope)"));
    }
    let n = prompt.len();
    let (ref_logits, ref_cache) = reference(model, prompt)?;
    let mut rows = Vec::new();
    driver.new_conversation()?;
    let a = driver.prefill(prompt)?.pop().expect("one chunk at least");
    if a.len() != ref_logits.len() {
        return Err(Error::input(
            "the HEF",
            format!(
                "returns {} logits per token, but the checkpoint's vocabulary is {}: diagnose the HEF against \
                 the checkpoint it was compiled from (--checkpoint DIR)",
                a.len(),
                ref_logits.len()
            ),
        ));
    }
    rows.push(judge("(a) prefill of the whole prompt", &ref_logits, &a));
    driver.new_conversation()?;
    driver.prefill(&prompt[..n - 1])?;
    let b = driver.step(prompt[n - 1])?;
    rows.push(judge("(b) tbt over the device's own cache", &ref_logits, &b));
    driver.new_conversation()?;
    driver.prefill(&prompt[..n - 1])?;
    match write_reference_cache(driver, hef, model, &ref_cache, n - 1) {
        Ok(()) => {
            let c = driver.step(prompt[n - 1])?;
            rows.push(judge("(c) tbt over a cache written from the reference", &ref_logits, &c));
        }
        Err(e) => rows.push(ParityRow {
            path: "(c) tbt over a cache written from the reference".into(),
            cosine: None,
            kl: None,
            argmax_matches: None,
            unavailable: Some(unavailable(&e)),
        }),
    }
    rows.push(self_masked(driver, model, prompt)?);
    let ok = |r: &ParityRow| r.cosine.is_some_and(|c| c >= 0.999) && r.argmax_matches == Some(true);
    let ran = |r: &ParityRow| r.unavailable.is_none();
    let (c, d) = (&rows[2], &rows[3]);
    let verdict = match (ok(&rows[0]), ok(&rows[1])) {
        (false, _) => ParityVerdict::PrefillDrifts,
        (true, true) => ParityVerdict::Agree,
        (true, false) if ran(c) && ok(c) => ParityVerdict::CacheWriteReadDisagree,
        (true, false) if ran(c) => ParityVerdict::DecodeComputeDrifts,
        (true, false) if ran(d) && ok(d) => ParityVerdict::TbtCacheReadDrifts,
        (true, false) if ran(d) => ParityVerdict::TbtGraphDrifts,
        (true, false) => ParityVerdict::TbtDriftsCacheUnavailable,
    };
    Ok(Parity { position: n - 1, rows, verdict })
}

/// (d) The cache-free control: after prefilling all but the last token, a tbt step whose mask
/// hides the whole cache (the token attends to its own slot only), against the reference's
/// forward of that token alone at its position (with one key, softmax is 1 and the output is
/// the token's own value: its position changes nothing). No cache is read or written by the host.
fn self_masked(driver: &mut LlmDriver, model: &Decoder, prompt: &[u32]) -> Result<ParityRow> {
    const PATH: &str = "(d) tbt with the cache masked vs the token alone";
    let n = prompt.len();
    let mut cache = FullCache::new(model.cfg.num_layers);
    let input = model.step_input(Phase::Prefill, &prompt[n - 1..], n - 1)?;
    let alone = model.step(&input, &mut cache, &mut NoTaps, &mut NoHooks)?.get(0)?.to_vec1::<f32>()?;
    driver.new_conversation()?;
    driver.prefill(&prompt[..n - 1])?;
    Ok(match driver.step_self(prompt[n - 1]) {
        Ok(got) => judge(PATH, &alone, &got),
        Err(e @ (Error::Usage(_) | Error::Unsupported(_))) => ParityRow {
            path: PATH.into(),
            cosine: None,
            kl: None,
            argmax_matches: None,
            unavailable: Some(unavailable(&e)),
        },
        Err(e) => return Err(e),
    })
}

/// Overwrite the entries of tokens 0..m with the reference's keys and values (token j sits at
/// ring entry j after `init_cache(0)`: each step's writes land right after its read window).
fn write_reference_cache(
    driver: &mut LlmDriver,
    hef: &Hef,
    model: &Decoder,
    cache: &FullCache,
    m: usize,
) -> Result<()> {
    let buffers = driver.cache_buffers()?;
    let group = driver.prefill_group().to_string();
    let c = &model.cfg;
    let entry = c.num_kv_heads * c.head_dim;
    let pad = padded_entry_bytes(entry * 2);
    for layer in 0..c.num_layers {
        for (id, values) in [(2 * layer as u32, false), (2 * layer as u32 + 1, true)] {
            let mut raw = buffers
                .get(&id)
                .cloned()
                .ok_or_else(|| Error::Device(format!("get_cache_buffers returned no cache id {id}")))?;
            let q = cache_quant(hef, &group, id)?;
            for (j, e) in reference_entries(cache, layer, values)?.iter().enumerate().take(m) {
                let at = j * pad;
                if at + entry * 2 > raw.len() {
                    return Err(Error::Device(format!(
                        "cache id {id}: {} bytes hold no entry {j}",
                        raw.len()
                    )));
                }
                for (f, &x) in e.iter().enumerate() {
                    let b = (q.quantize(x).clamp(0.0, 65535.0) as u16).to_le_bytes();
                    raw[at + 2 * f..at + 2 * f + 2].copy_from_slice(&b);
                }
            }
            driver.update_cache_buffer(id, &raw)?;
        }
    }
    Ok(())
}

/// The phrase every cache diagnostic shows when the device cannot read or write its cache
/// (the full reason is [`crate::device::RPC_CACHE_UNSUPPORTED`]).
pub const UNAVAILABLE_OVER_RPC: &str = "unavailable on this device (HailoRT 5.2 RPC)";

/// Why a diagnostic could not run, short: the RPC phrase for `Unsupported` cache calls, else the
/// error itself.
pub fn unavailable(e: &Error) -> String {
    match e {
        Error::Unsupported(m) if m.contains(UNAVAILABLE_OVER_RPC) => UNAVAILABLE_OVER_RPC.to_string(),
        e => e.to_string(),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CacheDiffRow {
    pub layer: usize,
    pub kind: &'static str,
    pub entries: usize,
    pub max_lsb: u32,
    pub mean_lsb: f64,
    /// The kv head with the largest difference, and its max.
    pub worst_head: usize,
    pub worst_head_max_lsb: u32,
    /// What this layer may differ by, from its own scale (see [`cache_tolerance_lsb`]).
    pub tolerance_lsb: u32,
    /// Reference values outside the layer's calibrated range (limvals): the cache clips them,
    /// and later layers attend over the clipped entries.
    pub clipped: usize,
}

/// After a prefill of `prompt`, the device's cache entries against the reference's, in LSB.
pub fn cache_diff(
    driver: &mut LlmDriver,
    hef: &Hef,
    model: &Decoder,
    prompt: &[u32],
) -> Result<Vec<CacheDiffRow>> {
    let c = &model.cfg;
    let mut cache = FullCache::new(c.num_layers);
    let input = model.step_input(Phase::Prefill, prompt, 0)?;
    model.step(&input, &mut cache, &mut NoTaps, &mut NoHooks)?;
    driver.new_conversation()?;
    driver.prefill(prompt)?;
    let buffers = driver.cache_buffers()?;
    let group = driver.prefill_group().to_string();
    let (entry, d) = (c.num_kv_heads * c.head_dim, c.head_dim);
    let pad = padded_entry_bytes(entry * 2);
    let mut rows = Vec::new();
    for layer in 0..c.num_layers {
        for (id, values, kind) in [(2 * layer as u32, false, "k"), (2 * layer as u32 + 1, true, "v")] {
            let raw = buffers.get(&id).ok_or_else(|| Error::Device(format!("no cache id {id}")))?;
            let q = cache_quant(hef, &group, id)?;
            let (mut max, mut sum, mut n, mut clipped) = (0u32, 0u64, 0usize, 0usize);
            let mut per_head = vec![0u32; c.num_kv_heads];
            for (j, e) in reference_entries(&cache, layer, values)?.iter().enumerate() {
                if j * pad + 2 * e.len() > raw.len() {
                    return Err(Error::Device(format!(
                        "cache id {id}: get_cache_buffers returned {} bytes, which hold no entry {j} \
                         ({pad} bytes each)",
                        raw.len()
                    )));
                }
                for (f, &x) in e.iter().enumerate() {
                    let at = j * pad + 2 * f;
                    let dev = u16::from_le_bytes([raw[at], raw[at + 1]]) as i64;
                    if !q.is_identity() && (x > q.max || x < q.min) {
                        clipped += 1;
                    }
                    let want = q.quantize(x).clamp(0.0, 65535.0) as i64;
                    let lsb = (dev - want).unsigned_abs() as u32;
                    max = max.max(lsb);
                    per_head[f / d] = per_head[f / d].max(lsb);
                    sum += lsb as u64;
                    n += 1;
                }
            }
            let (worst_head, worst) =
                per_head.iter().enumerate().max_by_key(|(_, v)| **v).map(|(h, v)| (h, *v)).unwrap_or((0, 0));
            rows.push(CacheDiffRow {
                layer,
                kind,
                entries: prompt.len(),
                max_lsb: max,
                mean_lsb: sum as f64 / n.max(1) as f64,
                worst_head,
                worst_head_max_lsb: worst,
                tolerance_lsb: cache_tolerance_lsb(&q),
                clipped,
            });
        }
    }
    Ok(rows)
}

/// How far a clean compiled graph may move a cache entry, as a fraction of the cache layer's
/// calibration spread (its limvals, `max − min`: the range the compiler calibrated the layer
/// over). The entries are not computed from the reference's keys and values: the runtime
/// quantizes the inputs and the graph every activation upstream of them, and that noise grows
/// with depth. Measured on the clean tinystories HEF, tokens 1..40: the runtime's input
/// quantization alone moves the last layer's keys by ~5 of 65,535 steps, 16-bit activations by
/// up to 15 (0.023 % of the spread); a cache-layout mistake by more than half the spread, and a
/// cache calibrated too narrowly (clipping) by ~180. 1/1024 (0.098 %) sits four times above
/// the clean figure and flags the clipping.
pub const CACHE_SPREAD_FRACTION: f64 = 1.0 / 1024.0;

/// What one cache layer may differ by, in its own LSB: [`CACHE_SPREAD_FRACTION`] of its
/// calibration spread divided by its scale (one step), plus one step because the device and
/// the reference round independently. A 16-bit cache spanning its spread gets 65 LSB, an
/// 8-bit one 2. A quant info with no spread (identity or INVALID, quantization.hpp) has no
/// scale to judge by: only the rounding step is allowed.
pub fn cache_tolerance_lsb(q: &QuantInfo) -> u32 {
    const ROUNDING: u32 = 1;
    let spread = f64::from(q.max) - f64::from(q.min);
    let scale = f64::from(q.scale);
    if q.is_identity() || !(scale > 0.0 && scale.is_finite() && spread > 0.0 && spread.is_finite()) {
        return ROUNDING;
    }
    let steps = (CACHE_SPREAD_FRACTION * spread / scale).ceil();
    // A scale far below its spread would ask for more steps than a u32 holds: saturate.
    ROUNDING.saturating_add(if steps >= f64::from(u32::MAX) { u32::MAX } else { steps as u32 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::synth_hef::u16_quant;

    #[test]
    fn cache_tolerance_comes_from_the_layers_scale_and_spread() {
        // A 16-bit cache over its calibrated spread: 65,535 steps, 1/128 of them plus rounding.
        let q16 = u16_quant(-3.0, 5.0);
        assert_eq!(cache_tolerance_lsb(&q16), 1 + (65535.0f64 / 1024.0).ceil() as u32);
        assert_eq!(cache_tolerance_lsb(&q16), 65);
        // The same spread in 8 bits: 255 steps -> 1 + 1.
        let q8 = QuantInfo { zp: 0.0, scale: 8.0 / 255.0, min: 0.0, max: 8.0 };
        assert_eq!(cache_tolerance_lsb(&q8), 2);
        // Scale-free: a wider spread at the same scale allows proportionally more steps.
        let wide = QuantInfo { max: q16.min + 2.0 * (q16.max - q16.min), ..q16 };
        assert!(cache_tolerance_lsb(&wide) > cache_tolerance_lsb(&q16) * 19 / 10);
        // Nothing to judge by: only the rounding step.
        assert_eq!(cache_tolerance_lsb(&QuantInfo::INVALID), 1);
        assert_eq!(cache_tolerance_lsb(&QuantInfo { zp: 0.0, scale: 1.0, min: -5.0, max: 5.0 }), 1);
        let nan = QuantInfo { scale: f32::NAN, ..q16 };
        assert_eq!(cache_tolerance_lsb(&nan), 1);
        let tiny = QuantInfo { scale: 1e-30, ..q16 };
        assert_eq!(cache_tolerance_lsb(&tiny), u32::MAX);
    }
}
