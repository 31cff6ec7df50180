//! The model's own memory, estimated from its config and the InputSet before anything is
//! allocated, and checked against the budget ([`crate::budget`]): weights, the KV cache, the
//! working tensors of the largest phase, and the taps a run keeps. Every product is checked
//! (`Bytes`), so absurd dims are a refusal naming them, never a wrapped small number or an
//! abort inside the allocator.
//!
//! The figures follow what the decoder does (`decoder.rs`): f32 weights shared between the
//! reference and fault-free backends, a `FullCache` that grows by concatenation (one layer's
//! old and new cache coexist for a moment), scores and probabilities [H, T, S] per layer, and
//! taps shaped as docs/ARCHITECTURE.md lists them. They are upper bounds within a small factor,
//! which is what a budget needs: the point is "128 GiB against 23 GiB", not the last megabyte.

use crate::budget::{self, Bytes};
use crate::error::Result;
use crate::inputs::InputSet;
use crate::model::ModelConfig;
use crate::tap::{LayerTap, Tap, TapSelection};

const F32: u64 = 4;

/// Where a run's taps go while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapsHeld {
    /// Streamed to disk as produced (`reference -o`): one phase's taps at a time.
    Streamed,
    /// Kept in memory until the run ends (`run`, `explain`): this many captures of the selection.
    InMemory { captures: u64 },
    /// Written to disk tap by tap and compared from the files (`run` over the budget): the
    /// largest single tap `copies` times (the one being written, and the few each comparison
    /// worker holds at once).
    Spilled { copies: u64 },
}

/// A run's planned memory, by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub weights: Bytes,
    pub kv_cache: Bytes,
    pub activations: Bytes,
    pub taps: Bytes,
}

impl Estimate {
    /// This estimate with the weights a loaded checkpoint holds ([`held`]).
    pub fn with_weights(self, weights: Bytes) -> Estimate {
        Estimate { weights, ..self }
    }

    pub fn total(&self) -> Bytes {
        self.weights.plus(self.kv_cache).plus(self.activations).plus(self.taps)
    }

    /// "weights 1.2 GiB + KV cache 3.0 MiB + working tensors 40.0 MiB + taps 2.1 GiB".
    pub fn breakdown(&self) -> String {
        format!(
            "weights {} + KV cache {} + working tensors {} + taps {}",
            self.weights, self.kv_cache, self.activations, self.taps
        )
    }
}

/// Parameter count, checked.
pub fn params(cfg: &ModelConfig) -> Bytes {
    let (h, i, v) = (cfg.hidden_size as u64, cfg.intermediate_size as u64, cfg.vocab_size as u64);
    let q = Bytes::new(cfg.num_heads as u64).times(cfg.head_dim as u64);
    let kv = Bytes::new(cfg.num_kv_heads as u64).times(cfg.head_dim as u64);
    // q_proj + o_proj, k_proj + v_proj, gate/up/down, two norms (biases and q/k norms are
    // a rounding error next to these and are left out).
    let per_layer = q
        .times(h)
        .times(2)
        .plus(kv.times(h).times(2))
        .plus(Bytes::new(h).times(i).times(3))
        .plus(Bytes::new(h).times(2));
    let embed = Bytes::new(v).times(h);
    let lm_head = if cfg.tie_word_embeddings { Bytes::ZERO } else { embed };
    embed.plus(per_layer.times(cfg.num_layers as u64)).plus(lm_head).plus(Bytes::new(h))
}

/// Weights in f32: what a synthesized model (drawn in f32) holds, and the bound a config is
/// checked against before any weight is read. A loaded checkpoint holds [`held`].
pub fn weights(cfg: &ModelConfig) -> Bytes {
    params(cfg).times(F32)
}

/// The bytes a loaded checkpoint's tensors hold, each in its own dtype (bf16 and f16 stay as
/// stored; the kernels widen them as they read). Every model built from the checkpoint
/// (reference, emulators, explain's candidates) shares these tensors: weight quantization is
/// applied as the weights are read, so no copy is counted.
pub fn held(ckpt: &crate::model::Checkpoint) -> Bytes {
    ckpt.tensors
        .values()
        .map(|t| Bytes::new(t.elem_count() as u64).times(t.dtype().size_in_bytes() as u64))
        .sum()
}

/// K and V of every layer for `positions` entries, plus one layer's worth again (the
/// concatenation that appends to a layer's cache holds the old and the new tensor at once).
pub fn kv_cache(cfg: &ModelConfig, positions: u64) -> Bytes {
    let (kv, d) = (cfg.num_kv_heads as u64, cfg.head_dim as u64);
    let layer = Bytes::new(2).times(kv).times(d).times(positions).times(F32);
    layer.times(cfg.num_layers as u64).plus(layer)
}

/// Working tensors of one phase of `t` tokens over `s` keys: scores, mask and probabilities
/// [H, T, S] (with a copy for the softmax), the MLP's three [T, I], a few [T, hidden] and the
/// logits [T, vocab].
pub fn activations(cfg: &ModelConfig, t: u64, s: u64) -> Bytes {
    let attn = Bytes::new(4).times(cfg.num_heads as u64).times(t).times(s);
    let mlp = Bytes::new(3).times(t).times(cfg.intermediate_size as u64);
    let hidden = Bytes::new(8).times(t).times(cfg.hidden_size as u64);
    let logits = Bytes::new(2).times(t).times(cfg.vocab_size as u64);
    attn.plus(mlp).plus(hidden).plus(logits).times(F32)
}

/// How many layers each tap kind is selected in, and whether embed / final_norm / logits are.
struct Selected {
    per_kind: Vec<(LayerTap, u64)>,
    embed: bool,
    final_norm: bool,
    logits: bool,
}

/// Layers looked at one by one; past this, a kind selected in any of them counts for all
/// (an upper bound, and a config that large is refused by its weights anyway).
const LAYERS_SCANNED: usize = 4096;

fn selected(cfg: &ModelConfig, sel: &TapSelection) -> Selected {
    let scanned = cfg.num_layers.min(LAYERS_SCANNED);
    let per_kind = LayerTap::ALL
        .into_iter()
        .filter(|t| t.is_captured())
        .map(|kind| {
            let n = (0..scanned).filter(|&l| sel.matches(&Tap::Layer(l, kind).to_string())).count() as u64;
            let n = if cfg.num_layers > scanned && n > 0 { cfg.num_layers as u64 } else { n };
            (kind, n)
        })
        .collect();
    Selected {
        per_kind,
        embed: sel.matches("embed"),
        final_norm: sel.matches("final_norm"),
        logits: sel.matches("logits"),
    }
}

/// Elements of the selected taps over phases whose token counts sum to `t_sum` and whose
/// `T × S` products sum to `ts_sum` (scores and probs are [H, T, S]; every other tap is
/// proportional to T).
fn tap_elements(cfg: &ModelConfig, sel: &Selected, t_sum: Bytes, ts_sum: Bytes) -> Bytes {
    let (h, d) = (cfg.hidden_size as u64, cfg.head_dim as u64);
    let (heads, kv) = (cfg.num_heads as u64, cfg.num_kv_heads as u64);
    let mut total = Bytes::ZERO;
    for &(kind, layers) in &sel.per_kind {
        let per_layer = match kind {
            LayerTap::Q => t_sum.times(heads).times(d),
            LayerTap::K | LayerTap::V => t_sum.times(kv).times(d),
            LayerTap::Scores | LayerTap::Probs => ts_sum.times(heads),
            _ => t_sum.times(h),
        };
        total = total.plus(per_layer.times(layers));
    }
    let flat = |on: bool, width: u64| if on { t_sum.times(width) } else { Bytes::ZERO };
    total.plus(flat(sel.embed, h)).plus(flat(sel.final_norm, h)).plus(flat(sel.logits, cfg.vocab_size as u64))
}

/// Elements of the largest single tap of the selection in any phase (a per-layer tap counts
/// one layer): the unit of a spilled run's memory.
fn largest_tap(cfg: &ModelConfig, sel: &Selected, phases: &[(u64, u64)]) -> Bytes {
    let none = || Selected { per_kind: Vec::new(), embed: false, final_norm: false, logits: false };
    // Each selected tap alone, as a selection of its own.
    let mut singles: Vec<Selected> = sel
        .per_kind
        .iter()
        .filter(|&&(_, n)| n > 0)
        .map(|&(kind, _)| Selected { per_kind: vec![(kind, 1)], ..none() })
        .collect();
    let flat = [
        (sel.embed, Selected { embed: true, ..none() }),
        (sel.final_norm, Selected { final_norm: true, ..none() }),
        (sel.logits, Selected { logits: true, ..none() }),
    ];
    singles.extend(flat.into_iter().filter_map(|(on, one)| on.then_some(one)));
    let mut widest = Bytes::ZERO;
    for &(t, s) in phases {
        for one in &singles {
            let b = tap_elements(cfg, one, Bytes::new(t), Bytes::new(t).times(s));
            // An overflow (None) is larger than anything.
            if b.get().is_none_or(|n| widest.get().is_some_and(|w| n > w)) {
                widest = b;
            }
        }
    }
    widest
}

/// The planned memory of running `inputs` with `taps` recorded.
pub fn estimate(cfg: &ModelConfig, inputs: &InputSet, taps: &TapSelection, held: TapsHeld) -> Estimate {
    let prompt = inputs.prompt.len() as u64;
    let steps = inputs.decode.steps() as u64;
    let positions = Bytes::new(prompt).plus(Bytes::new(steps));
    // Prefill phases: (tokens, keys visible) per chunk.
    let phases: Vec<(u64, u64)> =
        inputs.prefill_phases().into_iter().map(|(_, r)| (r.len() as u64, r.end as u64)).collect();
    let (t_max, s_max) = phases.iter().copied().max_by_key(|&(t, s)| t.saturating_mul(s)).unwrap_or((1, 1));
    let widest =
        activations(cfg, t_max, s_max).get().max(activations(cfg, 1, prompt.saturating_add(steps)).get());
    let sel = selected(cfg, taps);
    // Decode step k sees prompt + k + 1 keys: Σ_k (prompt + k + 1) = N·prompt + N(N+1)/2.
    let triangle = Bytes(Bytes::new(steps).times(steps.saturating_add(1)).get().map(|x| x / 2));
    let decode_ts = Bytes::new(steps).times(prompt).plus(triangle);
    let prefill_ts: Bytes = phases.iter().map(|&(t, s)| Bytes::new(t).times(s)).sum();
    let taps_bytes = match held {
        TapsHeld::Streamed => {
            tap_elements(cfg, &sel, Bytes::new(t_max), Bytes::new(t_max).times(s_max)).times(F32)
        }
        TapsHeld::InMemory { captures } => {
            tap_elements(cfg, &sel, positions, prefill_ts.plus(decode_ts)).times(F32).times(captures)
        }
        TapsHeld::Spilled { copies } => {
            // The widest prefill chunk, and the last decode step (which sees every key).
            let last_step = if steps > 0 { vec![(1, prompt.saturating_add(steps))] } else { Vec::new() };
            largest_tap(cfg, &sel, &[phases.clone(), last_step].concat()).times(F32).times(copies)
        }
    };
    Estimate {
        weights: weights(cfg),
        kv_cache: kv_cache(cfg, positions.get().unwrap_or(u64::MAX)),
        activations: Bytes(widest),
        taps: taps_bytes,
    }
}

/// Refuse a model whose weights alone exceed the budget (before they are drawn or read).
/// `what` names the model and the dims that size it (`synth hidden=1000000 ...`).
pub fn check_weights(cfg: &ModelConfig, what: &str) -> Result<()> {
    budget::current().check(
        format!("{what}: the weights"),
        weights(cfg),
        format!(
            "{} parameters in f32; lower hidden / intermediate / layers / vocab (flags --hidden, --layers, \
             ..., or the probe's [checkpoint] keys), or raise --max-memory",
            params(cfg).get().map_or("more than 2^64".to_string(), |p| if p >= 1_000_000_000 {
                format!("{:.1} B", p as f64 / 1e9)
            } else {
                format!("{:.1} M", p as f64 / 1e6)
            })
        ),
    )
}

/// Refuse a `synth` whose weights and writing do not fit the budget: the weights in f32, plus
/// twice the largest matrix (the embeddings or lm_head; an MLP matrix when larger), which
/// `Checkpoint::save` converts one tensor at a time.
pub fn check_synth(cfg: &ModelConfig, what: &str) -> Result<()> {
    let h = cfg.hidden_size as u64;
    let largest = Bytes::new(h).times((cfg.vocab_size as u64).max(cfg.intermediate_size as u64)).times(F32);
    budget::current().check(
        format!("{what}: the weights and writing them"),
        weights(cfg).plus(largest.times(2)),
        "write fewer or smaller layers (--layers, --hidden, --vocab), or raise --max-memory",
    )
}

/// Refuse a run of `ckpt` whose planned memory exceeds the budget, before the first phase runs.
pub fn check_run(
    ckpt: &crate::model::Checkpoint,
    inputs: &InputSet,
    taps: &TapSelection,
    taps_held: TapsHeld,
) -> Result<()> {
    check(&estimate(&ckpt.config, inputs, taps, taps_held).with_weights(held(ckpt)), inputs)
}

/// Refuse estimate `e` of a run on `inputs` past the memory budget, with its breakdown.
pub fn check(e: &Estimate, inputs: &InputSet) -> Result<()> {
    budget::current().check(
        format!(
            "a run of {} prompt tokens and {} decode steps on this model ({})",
            inputs.prompt.len(),
            inputs.decode.steps(),
            e.breakdown()
        ),
        e.total(),
        "shorten the prompt or --decode / decode, record fewer taps (--taps / taps = [...]), or raise --max-memory",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budget;
    use crate::inputs::DecodeSpec;
    use crate::model::synth::preset_config;

    #[test]
    fn absurd_dims_overflow_into_a_refusal() {
        let mut c = preset_config("tinystories").unwrap();
        c.hidden_size = usize::MAX / 2;
        assert_eq!(weights(&c).get(), None);
        let b = Budget::new(u64::MAX, "test");
        assert!(b.check("x", weights(&c), "").is_err());
    }

    #[test]
    fn held_taps_grow_quadratically_with_decode_steps() {
        let c = preset_config("qwen3-0.6b").unwrap();
        let mut inputs = InputSet::new(vec![1; 16]);
        inputs.decode = DecodeSpec::Greedy(40_000);
        let all = TapSelection::all();
        let held = estimate(&c, &inputs, &all, TapsHeld::InMemory { captures: 1 });
        let streamed = estimate(&c, &inputs, &all, TapsHeld::Streamed);
        // 16 heads × 28 layers × 2 (scores, probs) × Σ S ≈ 40000²/2, in f32: about 2.9 TB.
        assert!(held.taps.get().unwrap() > 2_000_000_000_000, "{}", held.breakdown());
        assert!(streamed.taps.get().unwrap() < 100_000_000, "{}", streamed.breakdown());
        // Spilled, one tap at a time: the largest single one, here the prefill's logits
        // [16, vocab] (the last decode step's scores are [16 heads, 1, 40016], smaller).
        let spilled = estimate(&c, &inputs, &all, TapsHeld::Spilled { copies: 3 });
        assert_eq!(spilled.taps.get(), Some(3 * 16 * c.vocab_size as u64 * 4), "{}", spilled.breakdown());
        let scores = TapSelection::parse(&["layers.*.attn.scores".into()]).unwrap();
        let one = estimate(&c, &inputs, &scores, TapsHeld::Spilled { copies: 1 });
        assert_eq!(one.taps.get(), Some(c.num_heads as u64 * (16 + 40_000) * 4), "{}", one.breakdown());
        let logits = TapSelection::parse(&["logits".into()]).unwrap();
        let few = estimate(&c, &inputs, &logits, TapsHeld::InMemory { captures: 1 });
        assert_eq!(few.taps.get(), Some((16 + 40_000) * c.vocab_size as u64 * 4));
    }
}
