#!/usr/bin/env python3
"""An independent implementation of hefprobe's `quant` fault on HF transformers' float32
eager Llama, checked tap by tap against hefprobe's emulator captures.

The definition implemented is the module doc of src/fault/quant.rs (its code is the spec
where the doc is silent), at the sites where src/model/decoder.rs edits the forward pass:

- weights: symmetric per output channel, w' = rint(w / s_c) * s_c, s_c = max_j |w_cj| / qmax
  (int8: 127, int4: 7), every *_proj weight and the lm_head (SmolLM2's tied lm_head gets its
  own quantized copy; the embedding table stays float);
- activations: affine, one scale and zero point per site and layer (or per channel),
  calibrated on the run's OWN inputs: one pass over every phase with quantized weights and
  float activations and inputs records the finite min/max per channel of every site, then the
  quantized pass runs. The range is widened by 10% of itself on each side and to include 0;
  s = (max - min)/(qmax - qmin), zp = qmin - rint(min / s),
  x' = (clamp(rint(x / s + zp), qmin, qmax) - zp) * s, all in float32; -inf stays -inf.
  `granularity=channel`: one affine per channel; `keep=K`: the K channels of largest calibrated
  magnitude in int16 over their own joint range (per channel with granularity=channel), the
  others over a range without them;
- sites, in forward order: block input (before attn_norm; the residual carries the quantized
  value; also the stream entering the final norm), attn_norm, q and k after RoPE and v, all
  before the KV cache (the cache holds quantized keys and values), scores (scaled, masked
  -inf), probs (softmax of the quantized scores), attn.out (after o_proj), mlp_norm, mlp.act
  (silu(gate) * up), mlp.out (after down_proj), final_norm, logits. Channels: the last axis of
  the [tokens, features] sites, (head, head-dim) of q/k/v, one channel for scores and probs;
- runtime inputs (`inputs=runtime`, the default): embeddings uint16 affine over the embedding
  table's [min, max] (no headroom), RoPE cos/sin clipped to [-1, 1] and rounded in
  `rope_bits` affine steps of calibrate(-1, 1, rope_bits, unsigned); the mask stays exact.

Nothing is taken from hefprobe's code: the quantizers are this script's own. The tap machinery
(patched eager attention, module hooks, phase plan, KV-cache run) is make_goldens.py's,
imported; this script prepends hooks that edit each site before make_goldens' recorders see
it, patches apply_rotary_pos_emb (q/k sites), and replaces the eager attention while a
calibration or quantized pass runs.

Run from the repository root with the pinned venv (references/requirements.txt):

    hefprobe run PROBE.toml --checkpoint GGUF --save-captures DIR --no-explain
    python references/check_quant.py GGUF DIR PROBE.toml [--backend LABEL ...] [--quant SPEC]

PROBE.toml gives `[inputs] tokens` (plus `decode_tokens`, or `decode = N` greedy steps, read
back from DIR/reference.npz as hefprobe's reference resolved them; `chunk` is honoured) and
`[[backend]]` entries of kind "emulator" with a `quant` setting and no `faults`: each is
checked against DIR/LABEL.npz (LABEL: its `name`, or "emulator"). `--backend LABEL` checks
only those, `--quant SPEC` only those with that setting ("w8a16" is "quant:w8a16"),
`--capture NPZ --quant SPEC` one capture directly. For the local view of a setting with
quantized weights, give the probe a backend with the same weights and nothing else, e.g.
`quant = "w8,inputs=none"`: hefprobe's calibration pass is exactly that forward pass, so its
capture holds the activations hefprobe calibrated on (for settings without weight
quantization that is reference.npz). A probe for it:

    version = 1
    name = "quant-check"
    question = "Does hefprobe's quant emulation equal its definition?"
    [checkpoint]
    path = "SmolLM2-135M-Instruct.Q4_1.gguf"
    [inputs]
    tokens = [6403, 1980, 253, ...]      # ~24 ids
    decode_tokens = [4075, 30, 2306]
    [compare]
    local = false                        # hefprobe's own local view is not needed
    lens = false
    [[backend]]
    name = "w8a16"
    kind = "emulator"
    quant = "w8a16"
    [[backend]]
    name = "w8-calib"
    kind = "emulator"
    quant = "w8,inputs=none"

First HF's float taps are checked against DIR/reference.npz (max |diff| <= 1e-4 of the tap's
max |value|). Then every setting is run in three views, each compared tap by tap and phase
by phase: cosine, max |diff| in units of the site's quantization step (`layers.I.out`, not a
site itself, in steps of the block-input quantizer it feeds; `embed` in steps of the runtime
embedding quantizer), the count of elements whose codes differ (|diff| >= half a step), and
the grid residual: how far hefprobe's values lie from this script's grid, |x'/s + zp -
rint(x'/s + zp)| in steps (~0 when the scales and zero points agree; 1 when a value is off the
[qmin, qmax] range).

- free: this script's own calibration and quantized forward pass vs hefprobe's capture.
  On a deep quantized model this cannot agree to float tolerance, for either implementation:
  a value a float32 summation order away from a rounding boundary takes the other code, the
  one-step difference feeds every later site, and the cascade grows until the two runs differ
  by the quantization noise itself. The noise view measures that cascade;
- noise (the chaos baseline; hefprobe is not involved): the free pass again with 1e-6
  relative noise added before every quantizer, against the free pass. The free view is
  judged consistent when no tap kind is further (1 - cos) from hefprobe than --chaos-factor
  times from the noise baseline (or within --min-cos), once the noise view has run (before
  it, the free view's verdict is "pending"; without it, "unjudged"); an inconsistent free view
  is a warning on the last line, not a failure; --strict-free judges it by the per-tap bounds
  below instead;
- local (the decisive check): every captured tap recomputed by this script from hefprobe's own
  upstream taps (hefprobe's value replaces this script's at every captured tap, so nothing
  cascades), with quantizers calibrated by this script on hefprobe's calibration-pass
  activations. Only the block input (= hefprobe's previous `out`, so exact) and mlp.act are
  not captured; an mlp.act element on a rounding boundary moves a whole mlp.out row, so a
  local mlp.out outside the bounds is accepted when flipping mlp.act elements within
  --flip-window steps of a boundary (per token, nearest first, kept while they bring the row
  closer to hefprobe's codes) brings it within.

Bounds per tap (local view): cosine >= --min-cos (0.99999), max |diff| <= --max-steps (2)
steps, differing codes <= --max-off-frac (1%) of the elements + --off-slack (2), grid
residual <= --max-grid (0.05 steps). Exit 0 when the local view of every setting is within
them (and the float pass agrees), 1 otherwise with a table of the disagreeing taps, 2 on a
usage or setup error. About a minute to load the model, then ~40 s per setting on 2 cores
(SmolLM2-135M, 24-token prompt, 3 decode steps).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_goldens as mg  # noqa: E402  (pins, determinism, tap machinery)
import make_real_goldens as mrg  # noqa: E402  (gguf/accelerate pins, chunks_of, record_taps)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

F32 = np.float32
HEADROOM = F32(0.1)
POINTS = ["block-input", "norm", "qkv", "scores", "probs", "attn-out", "mlp-act", "mlp-out", "logits"]
FLOAT_TOL = 1e-4


def die(msg: str) -> None:
    print(f"ERROR: {msg}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------
# The setting: `quant:...` as quant.rs parses it.
# ---------------------------------------------------------------------------
@dataclass
class Setting:
    text: str
    weight_bits: int | None = None
    act: tuple[int, bool] | None = None  # (bits, signed)
    points: list[str] = field(default_factory=lambda: list(POINTS))
    runtime_inputs: bool = True
    rope_bits: int = 16
    per_channel: bool = False
    keep: int = 0


def parse_setting(text: str) -> Setting:
    full = text if text.startswith("quant") else f"quant:{text}"
    name, _, params = full.partition(":")
    if name != "quant" or "@" in full:
        die(f"`{text}`: not a quant setting")
    named, positional = {}, []
    for kv in filter(None, params.split(",")):
        if "=" in kv:
            k, v = kv.split("=", 1)
            named[k.strip()] = v.strip()
        else:
            positional.append(kv.strip())
    unknown = set(named) - {"preset", "weights", "acts", "points", "inputs", "rope_bits", "granularity", "keep"}
    if unknown or len(positional) > 1:
        die(f"`{text}`: unknown parameters {sorted(unknown) or positional[1:]}")
    s = Setting(text=full)
    preset = named.get("preset", positional[0] if positional else None)
    if preset is not None:
        m = re.fullmatch(r"(?:w(4|8))?(?:a(8|16))?", preset)
        if not m or not preset:
            die(f"`{preset}` is not a shorthand like w8a16")
        s.weight_bits = int(m[1]) if m[1] else None
        s.act = {"8": (8, False), "16": (16, True)}[m[2]] if m[2] else None
    if "weights" in named:
        s.weight_bits = {"int8": 8, "int4": 4, "none": None}[named["weights"]]
    if "acts" in named:
        s.act = {"uint8": (8, False), "int16": (16, True), "none": None}[named["acts"]]
    if "points" in named:
        s.points = named["points"].split("+")
        if any(p not in POINTS for p in s.points):
            die(f"`{text}`: points {s.points}")
    s.runtime_inputs = named.get("inputs", "runtime") == "runtime"
    s.rope_bits = int(named.get("rope_bits", 16))
    s.per_channel = named.get("granularity", "tensor") == "channel"
    s.keep = int(named.get("keep", 0))
    return s


# ---------------------------------------------------------------------------
# The quantizers, in float32 numpy (IEEE ops elementwise, as the Rust code does them).
# ---------------------------------------------------------------------------
def affine(mn, mx, bits: int, signed: bool):
    """Affine::calibrate, vectorized: (scale, zp, qmin, qmax) arrays over [min, max] widened
    to include 0."""
    mn, mx = np.asarray(mn, F32), np.asarray(mx, F32)
    levels = F32((1 << bits) - 1)
    qmin = F32(-(1 << (bits - 1))) if signed else F32(0)
    qmax = F32(qmin + levels)
    mn, mx = np.minimum(mn, F32(0)), np.maximum(mx, F32(0))
    with np.errstate(all="ignore"):
        scale = np.where(mx > mn, (mx - mn) / levels, F32(1)).astype(F32)
        zp = (qmin - np.rint(mn / scale)).astype(F32)
    return scale, zp, np.full_like(scale, qmin), np.full_like(scale, qmax)


def with_headroom(mn, mx, bits: int, signed: bool):
    mn, mx = np.asarray(mn, F32), np.asarray(mx, F32)
    pad = (mx - mn) * HEADROOM
    return affine(mn - pad, mx + pad, bits, signed)


def fake_quant(x: np.ndarray, q):
    """Quantize-dequantize float32 rows [N, C] with per-channel (C,) quantizers; non-finite
    values pass. Returns (values, clipped count)."""
    scale, zp, qmin, qmax = q
    with np.errstate(all="ignore"):
        code = np.rint(x / scale + zp)
        c = np.clip(code, qmin, qmax)
        y = ((c - zp) * scale).astype(F32)
    finite = np.isfinite(x)
    return np.where(finite, y, x), int(((c != code) & finite).sum())


def site_quantizers(lo: np.ndarray, hi: np.ndarray, st: Setting):
    """One quantizer per channel of a calibrated site (quant.rs site_quantizers)."""
    bits, signed = st.act
    n = len(lo)
    seen = lo <= hi
    if not seen.any():
        return None

    def joint(mask):
        m = seen & mask
        return (lo[m].min(), hi[m].max()) if m.any() else None

    every = joint(np.ones(n, bool))
    kept = np.zeros(n, bool)
    if st.keep > 0 and n > st.keep:
        mag = np.where(seen, np.maximum(np.abs(lo), np.abs(hi)), F32(0))
        order = np.lexsort((np.arange(n), -mag.astype(np.float64)))  # largest first, ties: lower index
        kept[order[: st.keep]] = True
    rest, wide = joint(~kept) or every, joint(kept) or every
    if st.per_channel:
        own_lo, own_hi = np.where(seen, lo, every[0]), np.where(seen, hi, every[1])
        q16 = with_headroom(own_lo, own_hi, 16, True)
        qa = with_headroom(own_lo, own_hi, bits, signed)
    else:
        q16 = with_headroom(np.full(n, wide[0]), np.full(n, wide[1]), 16, True)
        qa = with_headroom(np.full(n, rest[0]), np.full(n, rest[1]), bits, signed)
    return tuple(np.where(kept, a, b).astype(F32) for a, b in zip(q16, qa))


def quantize_weight(w: torch.Tensor, bits: int) -> torch.Tensor:
    qmax = F32((1 << (bits - 1)) - 1)
    a = w.detach().cpu().numpy().astype(F32)
    m = np.abs(a).max(axis=1)
    s = np.where(m == 0, F32(1), m / qmax).astype(F32)[:, None]
    out = (np.clip(np.rint(a / s), -qmax, qmax) * s).astype(F32)
    return torch.from_numpy(out)


# ---------------------------------------------------------------------------
# Sites: where each one sits in HF's forward pass, and its channel layout.
# layout "last": channels on the last axis; "heads": [1, H, T, D] with channel h*D + j;
# "one": a single channel.
# ---------------------------------------------------------------------------
def point_of(site: str) -> str | None:
    tail = site.split(".", 2)[-1] if site.startswith("layers.") else site
    return {
        "input": "block-input", "attn_norm": "norm", "mlp_norm": "norm", "final_norm": "norm",
        "attn.q": "qkv", "attn.k": "qkv", "attn.v": "qkv", "attn.scores": "scores",
        "attn.probs": "probs", "attn.out": "attn-out", "mlp.act": "mlp-act", "mlp.out": "mlp-out",
        "logits": "logits",
    }.get(tail)


def to_rows(a: np.ndarray, layout: str) -> np.ndarray:
    if layout == "one":
        return a.reshape(-1, 1)
    if layout == "heads":
        b, h, t, d = a.shape
        return a.transpose(0, 2, 1, 3).reshape(-1, h * d)
    return a.reshape(-1, a.shape[-1])


def from_rows(r: np.ndarray, shape, layout: str) -> np.ndarray:
    if layout == "heads":
        b, h, t, d = shape
        return r.reshape(b, t, h, d).transpose(0, 2, 1, 3)
    return r.reshape(shape)


class Sim:
    """The quantization state of one setting.

    mode "off": HF untouched; "calibrate": record the finite min/max per channel of every
    site; "quant": fake-quantize every site and the runtime inputs. With `force` (a capture
    of hefprobe's), every captured tap is replaced by hefprobe's value (after this script
    computed its own, kept in `local` in a quantized pass), so each tap is recomputed from
    hefprobe's upstream taps only (the local view), and calibration sees hefprobe's own
    activations."""

    def __init__(self) -> None:
        self.mode = "off"
        self.setting: Setting | None = None
        self.stats: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.quantizers: dict[str, tuple] = {}
        self.clipped: dict[str, list[int]] = {}
        self.embed_q = None
        self.layer = -1
        self.rope_calls = 0
        self.force: dict[str, np.ndarray] | None = None
        self.local: dict[str, np.ndarray] = {}
        self.acts: dict[str, np.ndarray] = {}  # mlp.act before quantization, in a local pass
        # the chaos baseline: relative float32-level noise added before every quantizer
        self.noise = 0.0
        self.rng = np.random.default_rng(0)

    def active_site(self, site: str) -> bool:
        st = self.setting
        return st is not None and st.act is not None and point_of(site) in st.points

    def edit(self, name: str, t: torch.Tensor, layout: str, cap: str | None = "") -> torch.Tensor:
        """The value at site or tap `name`: `layout` is its channel layout, `cap` how the
        capture holds it ("": t[0]; "v": v_proj's [1, T, KV*D] as [KV, T, D]; None: not
        captured)."""
        if self.mode == "off":
            return t
        key = f"{mg.REC.phase}/{name}"
        forcing = self.force is not None and cap is not None and key in self.force
        if self.mode == "calibrate":
            if forcing:
                t = self._capture_value(key, t, cap)
            if self.active_site(name):
                self._record(name, t, layout)
            return t
        if self.active_site(name):
            t = self._quantize(name, t, layout)
        if forcing:
            a = t.detach().numpy()
            h = self.force[key].shape[0]
            self.local[key] = (a[0].reshape(a.shape[1], h, -1).transpose(1, 0, 2) if cap == "v" else a[0]).copy()
            t = self._capture_value(key, t, cap)
        return t

    def _capture_value(self, key: str, t: torch.Tensor, cap: str) -> torch.Tensor:
        c = self.force[key]
        back = c.transpose(1, 0, 2).reshape(t.shape) if cap == "v" else c[None]
        return torch.from_numpy(np.ascontiguousarray(back, dtype=F32)).reshape(t.shape)

    def _record(self, name: str, t: torch.Tensor, layout: str) -> None:
        rows = to_rows(t.detach().to(torch.float32).numpy(), layout)
        finite = np.isfinite(rows)
        lo = np.where(finite, rows, F32(np.inf)).min(axis=0).astype(F32)
        hi = np.where(finite, rows, F32(-np.inf)).max(axis=0).astype(F32)
        if name in self.stats and len(self.stats[name][0]) == len(lo):
            plo, phi = self.stats[name]
            lo, hi = np.minimum(plo, lo), np.maximum(phi, hi)
        self.stats[name] = (lo, hi)

    def _quantize(self, name: str, t: torch.Tensor, layout: str) -> torch.Tensor:
        q = self.quantizers.get(name)
        if q is None:  # a site the calibration never reached at this shape
            return t
        a = t.detach().to(torch.float32).numpy()
        rows = to_rows(a, layout)
        if self.force is not None and name.endswith(".mlp.act"):
            self.acts[f"{mg.REC.phase}/{name}"] = rows.copy()
        if self.noise:
            rows = (rows * (1 + self.noise * self.rng.uniform(-1, 1, rows.shape))).astype(F32)
        y, clipped = fake_quant(rows, q)
        c = self.clipped.setdefault(name, [0, 0])
        c[0] += clipped
        c[1] += rows.size
        return torch.from_numpy(np.ascontiguousarray(from_rows(y, a.shape, layout))).to(t.dtype)

    def finish_calibration(self) -> None:
        self.quantizers = {}
        for name, (lo, hi) in self.stats.items():
            q = site_quantizers(lo, hi, self.setting)
            if q is not None:
                self.quantizers[name] = q


SIM = Sim()
PREV_ATTENTION = modeling_llama.eager_attention_forward  # make_goldens' recording wrapper
ORIG_ROPE = modeling_llama.apply_rotary_pos_emb


def quant_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Eager attention with the scores and probs sites (explicit, -inf masked, as hefprobe's
    decoder); outside a calibration or quantized pass, make_goldens' wrapper of HF's own."""
    if SIM.mode == "off":
        return PREV_ATTENTION(module, query, key, value, attention_mask, scaling, dropout=dropout, **kwargs)
    rec = mg.REC
    rec.attn_calls += 1
    li = module.layer_idx
    T, S = rec.T, rec.past + rec.T
    if query.shape[0] != 1 or query.shape[2] != T or key.shape[2] != S:
        mg.fail(f"layer {li}: unexpected shapes q {tuple(query.shape)} k {tuple(key.shape)}")
    vis = mg.expected_visible(module.config, li, rec.past, T)
    if attention_mask is not None:
        hf_vis = attention_mask[0, 0] != torch.finfo(attention_mask.dtype).min
        if not torch.equal(hf_vis, vis):
            mg.fail(f"layer {li}: HF's mask differs from the causal rule")
    k_all = modeling_llama.repeat_kv(key, module.num_key_value_groups)
    v_all = modeling_llama.repeat_kv(value, module.num_key_value_groups)
    scores = torch.matmul(query, k_all.transpose(2, 3)) * scaling
    scores = SIM.edit(f"layers.{li}.attn.scores", scores.masked_fill(~vis, float("-inf")), "one")
    probs = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32)
    probs = SIM.edit(f"layers.{li}.attn.probs", probs, "one")
    out = torch.matmul(probs, v_all).transpose(1, 2).contiguous()
    rec.put(f"layers.{li}.attn.q", query[0])
    rec.put(f"layers.{li}.attn.k", key[0, :, S - T:, :])
    rec.put(f"layers.{li}.attn.v", value[0, :, S - T:, :])
    rec.put(f"layers.{li}.attn.scores", scores[0])
    rec.put(f"layers.{li}.attn.probs", probs[0])
    return out, probs


def quant_rope(q, k, cos, sin, unsqueeze_dim=1):
    """HF's rotation, then the q and k sites (after RoPE, before the KV cache)."""
    SIM.rope_calls += 1
    qe, ke = ORIG_ROPE(q, k, cos, sin, unsqueeze_dim)
    q, k = (f"layers.{SIM.layer}.attn.{w}" for w in "qk")
    return SIM.edit(q, qe, "heads"), SIM.edit(k, ke, "heads")


modeling_llama.eager_attention_forward = quant_attention
modeling_llama.apply_rotary_pos_emb = quant_rope


def install_quant_hooks(model) -> None:
    """Editing hooks at every site; prepended, so make_goldens' recorders see the edit."""
    m = model.model
    n = model.config.num_hidden_layers

    def out_hook(name, cap=""):
        return lambda mod, args, output: SIM.edit(name, output, "last", cap)

    def pre_hook(name):
        def fn(mod, args, kwargs):
            if args:
                return (SIM.edit(name, args[0], "last", None), *args[1:]), kwargs
            return args, dict(kwargs, hidden_states=SIM.edit(name, kwargs["hidden_states"], "last", None))
        return fn

    def embed_hook(mod, args, output):
        if SIM.mode == "quant" and SIM.setting.runtime_inputs:
            a = output.detach().numpy()
            y, _ = fake_quant(a.reshape(-1, 1), SIM.embed_q)
            output = torch.from_numpy(y.reshape(a.shape))
        return SIM.edit("embed", output, "one")

    def rotary_hook(mod, args, output):
        if SIM.mode == "quant" and SIM.setting.runtime_inputs:
            q = affine(F32(-1), F32(1), SIM.setting.rope_bits, False)
            res = []
            for t in output:
                a = np.clip(t.detach().numpy(), F32(-1), F32(1))
                y, _ = fake_quant(a.reshape(-1, 1), q)
                res.append(torch.from_numpy(y.reshape(a.shape)))
            return tuple(res)
        return None

    def set_layer(i):
        def fn(mod, args):
            SIM.layer = i
        return fn

    m.embed_tokens.register_forward_hook(embed_hook, prepend=True)
    m.rotary_emb.register_forward_hook(rotary_hook, prepend=True)
    for i, layer in enumerate(m.layers):
        p = f"layers.{i}"
        layer.register_forward_pre_hook(pre_hook(f"{p}.input"), with_kwargs=True, prepend=True)
        layer.register_forward_hook(out_hook(f"{p}.out"), prepend=True)
        layer.input_layernorm.register_forward_hook(out_hook(f"{p}.attn_norm"), prepend=True)
        layer.self_attn.register_forward_pre_hook(set_layer(i), prepend=True)
        layer.self_attn.v_proj.register_forward_hook(out_hook(f"{p}.attn.v", "v"), prepend=True)
        layer.self_attn.o_proj.register_forward_hook(out_hook(f"{p}.attn.out"), prepend=True)
        layer.post_attention_layernorm.register_forward_hook(out_hook(f"{p}.mlp_norm"), prepend=True)
        down = layer.mlp.down_proj
        down.register_forward_pre_hook(
            lambda mod, args, name=f"{p}.mlp.act": (SIM.edit(name, args[0], "last", None), *args[1:]),
            prepend=True,
        )
        down.register_forward_hook(out_hook(f"{p}.mlp.out"), prepend=True)
    m.norm.register_forward_pre_hook(pre_hook(f"layers.{n}.input"), with_kwargs=True, prepend=True)
    m.norm.register_forward_hook(out_hook("final_norm"), prepend=True)
    model.lm_head.register_forward_hook(out_hook("logits"), prepend=True)


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------
def unit_of(tap: str, shape, layers: int) -> tuple[np.ndarray | None, tuple | None]:
    """(per-element step broadcastable to the capture's shape, quantizer broadcast) of a tap."""
    site = tap
    if tap == "embed":
        if SIM.setting.runtime_inputs:
            q = SIM.embed_q
            return q[0][0], tuple(x[0] for x in q)
        site = "layers.0.input"
    elif tap.endswith(".out") and tap.startswith("layers.") and tap.count(".") == 2:
        site = f"layers.{int(tap.split('.')[1]) + 1}.input"
    q = SIM.quantizers.get(site) if SIM.active_site(site) else None
    if q is None:
        return None, None
    if point_of(tap) == "qkv":
        h, _, d = shape
        qb = tuple(x.reshape(h, 1, d) for x in q)
    elif point_of(tap) in ("scores", "probs"):
        qb = tuple(x[0] for x in q)
    else:
        qb = q
    return qb[0], (qb if site == tap else None)


@dataclass
class Row:
    key: str
    cos: float
    steps: float | None
    off: int
    n: int
    grid: float | None
    rel: float
    note: str = ""


def compare_tap(key: str, mine: np.ndarray, hef: np.ndarray, layers: int) -> Row:
    tap = key.split("/", 1)[1]
    if mine.shape != hef.shape:
        return Row(key, -1.0, None, hef.size, hef.size, None, np.inf, f"shape {mine.shape} vs {hef.shape}")
    fm, fh = np.isfinite(mine), np.isfinite(hef)
    note = ""
    if not np.array_equal(fm, fh) or not np.array_equal(mine[~fm], hef[~fh]):
        note = "non-finite positions differ"
    both = fm & fh
    a, b = mine[both].astype(np.float64), hef[both].astype(np.float64)
    den = np.linalg.norm(a) * np.linalg.norm(b)
    cos = float(a @ b / den) if den > 0 else (1.0 if np.array_equal(a, b) else 0.0)
    with np.errstate(invalid="ignore"):  # -inf - -inf at masked scores
        diff = np.where(both, np.abs(mine.astype(np.float64) - hef.astype(np.float64)), 0.0)
    rel = float(diff.max() / max(np.abs(b).max(), 1e-30)) if b.size else 0.0
    unit, q = unit_of(tap, hef.shape, layers)
    steps, off, grid = None, 0, None
    if unit is not None:
        u = np.broadcast_to(np.asarray(unit, np.float64), hef.shape)
        st = np.where(both, diff / u, 0.0)
        steps = float(st.max()) if st.size else 0.0
        off = int((st >= 0.5).sum())
    else:
        off = int((diff > 1e-5 * max(np.abs(b).max(), 1e-30)).sum())
    if q is not None:
        scale, zp, qmin, qmax = (np.broadcast_to(x, hef.shape).astype(np.float64) for x in q)
        with np.errstate(all="ignore"):
            code = hef.astype(np.float64) / scale + zp
            r = np.abs(code - np.rint(code))[both]
            outside = ((np.rint(code) < qmin) | (np.rint(code) > qmax))[both]
        grid = float(r.max()) if r.size else 0.0
        if outside.any():  # hefprobe's value is beyond this script's range: a scale or zp mismatch
            grid = max(grid, 1.0)
    return Row(key, cos, steps, off, int(both.sum()), grid, rel, note)


def tap_kind(key: str) -> str:
    tap = key.split("/", 1)[1]
    return re.sub(r"^layers\.\d+\.", "layers.*.", tap)


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def print_table(rows: list[Row], title: str) -> None:
    print(title)
    print(f"  {'tap':<28} {'n':>9} {'worst cos':>12} {'max steps':>10} {'codes off':>10} {'frac off':>9} "
          f"{'grid res':>9}  worst at")
    for r in rows:
        frac = r.off / r.n if r.n else 0.0
        print(f"  {r.key:<28} {r.n:>9} {r.cos:>12.9f} {fmt(r.steps, '10.2f'):>10} {r.off:>10} {frac:>9.2e} "
              f"{fmt(r.grid, '9.2e'):>9}  {r.note}")


def aggregate(rows: list[Row]) -> list[Row]:
    kinds: dict[str, list[Row]] = {}
    for r in rows:
        kinds.setdefault(tap_kind(r.key), []).append(r)
    out = []
    for k, rs in kinds.items():
        worst = min(rs, key=lambda r: r.cos)
        steps = [r.steps for r in rs if r.steps is not None]
        grids = [r.grid for r in rs if r.grid is not None]
        worst_steps = max(rs, key=lambda r: -1 if r.steps is None else r.steps)
        out.append(Row(
            k, worst.cos, max(steps) if steps else None, sum(r.off for r in rs), sum(r.n for r in rs),
            max(grids) if grids else None, max(r.rel for r in rs),
            f"cos {worst.key}; steps {worst_steps.key}" + ("; " + "; ".join({r.note for r in rs if r.note})
                                                            if any(r.note for r in rs) else ""),
        ))
    return out


# ---------------------------------------------------------------------------
# Driving
# ---------------------------------------------------------------------------
def read_probe(path: Path):
    probe = tomllib.loads(path.read_text())
    inp = probe.get("inputs", {})
    if "tokens" not in inp:
        die(f"{path}: [inputs] needs `tokens` (this check feeds ids, not text)")
    if inp.get("start_position", 0) != 0:
        die(f"{path}: start_position != 0 is not supported")
    backends = []
    for b in probe.get("backend", []):
        if b.get("kind") != "emulator" or "quant" not in b or b.get("faults"):
            continue
        backends.append((b.get("name") or "emulator", b["quant"]))
    return inp, backends


def calibration_capture(st: Setting, backends, captures: Path) -> Path | None:
    """The capture of hefprobe's calibration pass for `st`: the float reference when no weights
    are quantized, else an emulator backend with the same weights and nothing else
    (`quant = "w8,inputs=none"`): hefprobe's calibration runs exactly that forward pass."""
    if st.weight_bits is None:
        return captures / "reference.npz"
    for label, q in backends:
        o = parse_setting(q)
        if o.weight_bits == st.weight_bits and o.act is None and not o.runtime_inputs:
            return captures / f"{label}.npz" if (captures / f"{label}.npz").is_file() else None
    return None


def same_setting(a: str, b: str) -> bool:
    norm = lambda s: s if s.startswith("quant") else f"quant:{s}"  # noqa: E731
    return norm(a) == norm(b)


def is_bad(r: Row, args, grid: bool = True) -> bool:
    return (r.cos < args.min_cos or (r.steps is not None and r.steps > args.max_steps)
            or r.off > args.max_off_frac * r.n + args.off_slack
            or (grid and r.grid is not None and r.grid > args.max_grid) or bool(r.note))


def explain_by_act_flips(model, key: str, target: np.ndarray, window: float):
    """A local-view `layers.L.mlp.out` that differs from hefprobe's: mlp.act (silu(gate)*up) is
    a quantization site no capture holds, so the local view computes it itself from gate and up
    projections summed in torch's order, not hefprobe's. An act element whose float value lies
    that summation order away from a rounding boundary may take the other code than in hefprobe
    (at 16 bits one ulp of a large act is ~2e-3 steps, and a prefill tap holds hundreds of act
    elements that close), moving its whole mlp.out row a little.

    Per row (token), try the act elements within `window` steps of a boundary, nearest first,
    each flipped to the code on the other side of its boundary (a rank-one change of mlp.out's
    row), and keep a flip when it lowers the row's excess: how far, in mlp.out steps, the row
    lies outside the rounding intervals of hefprobe's codes. Rows are independent, so every
    candidate is tried. Returns (mlp.out recomputed by torch from the flipped act, flips kept,
    farthest distance of a kept flip), or None when the tap has no act to flip."""
    phase, tap = key.split("/", 1)
    layer = int(tap.split(".")[1])
    act = SIM.acts.get(f"{phase}/layers.{layer}.mlp.act")
    qa, qm = SIM.quantizers.get(f"layers.{layer}.mlp.act"), SIM.quantizers.get(f"layers.{layer}.mlp.out")
    if act is None or qa is None or qm is None or act.shape[0] != target.shape[0]:
        return None
    weight = model.model.layers[layer].mlp.down_proj.weight.detach()  # no hooks: the sites stay untouched
    w = weight.double().numpy()
    with np.errstate(all="ignore"):
        code = act / qa[0] + qa[1]  # as fake_quant computes it
    dist = np.abs(code - np.floor(code) - F32(0.5))  # 0: exactly on a boundary
    aq, _ = fake_quant(act, qa)
    with torch.no_grad():
        pre = torch.nn.functional.linear(torch.from_numpy(aq), weight).numpy()
    s, z, qmin, qmax = (np.asarray(x, np.float64) for x in qm)
    with np.errstate(all="ignore"):
        want = np.clip(np.rint(target.astype(np.float64) / s + z), qmin, qmax)  # hefprobe's codes
    lo = np.where(want <= qmin, -np.inf, want - 0.5)
    hi = np.where(want >= qmax, np.inf, want + 0.5)

    def excess(row, p):
        c = p / s + z
        return np.nan_to_num(np.maximum(0.0, np.maximum(lo[row] - c, c - hi[row]))).sum()

    kept, far = 0, 0.0
    for row in range(act.shape[0]):
        p = pre[row].astype(np.float64)
        e = excess(row, p)
        near = np.flatnonzero(dist[row] <= window)
        for i in near[np.argsort(dist[row][near], kind="stable")]:
            if e == 0:
                break
            step = 1.0 if code[row, i] > np.rint(code[row, i]) else -1.0
            if not qa[2][i] <= np.rint(code[row, i]) + step <= qa[3][i]:
                continue
            delta = step * float(qa[0][i])
            p2 = p + delta * w[:, i]
            e2 = excess(row, p2)
            if e2 < e:
                p, e, kept, far = p2, e2, kept + 1, max(far, float(dist[row, i]))
                aq[row, i] += F32(delta)
    with torch.no_grad():
        out = torch.nn.functional.linear(torch.from_numpy(aq), weight).numpy()
    return fake_quant(out, qm)[0], kept, far


def judge_free(bad: list, kinds: list, missing: list, baseline: dict, args) -> str:
    """The free view's verdict: chaos-consistent when no tap kind lies further from hefprobe
    than --chaos-factor times the noise view's distance (or --min-cos) allows."""
    worse = [k for k in kinds if k.key in baseline and 1 - k.cos > max(
        1 - args.min_cos, args.chaos_factor * baseline[k.key])]
    if worse:
        print("     tap kinds further from hefprobe than the chaos baseline allows: "
              + ", ".join(f"{k.key} (1-cos {1 - k.cos:.1e} vs baseline {baseline[k.key]:.1e})" for k in worse))
    if bad or missing or worse:
        return "WARN"
    return "ok" if baseline else "unjudged"


def scale_differences(a: dict, b: dict) -> tuple[float, str, float]:
    """Max relative scale difference and max zero-point difference between two calibrations."""
    worst, at, dz = 0.0, "-", 0.0
    for site, qa in a.items():
        qb = b.get(site)
        if qb is None:
            return np.inf, site, np.inf
        rel = float(np.max(np.abs(qa[0].astype(np.float64) / qb[0] - 1)))
        if rel > worst:
            worst, at = rel, site
        dz = max(dz, float(np.max(np.abs(qa[1] - qb[1]))))
    return worst, at, dz


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", type=Path)
    ap.add_argument("captures", type=Path, help="hefprobe run --save-captures DIR")
    ap.add_argument("probe", type=Path)
    ap.add_argument("--backend", action="append", default=[], help="check only this backend label")
    ap.add_argument("--quant", help="check only the backends with this setting (or --capture's)")
    ap.add_argument("--capture", type=Path, help="an emulator capture to check against --quant")
    ap.add_argument("--calibration", type=Path, help="capture of hefprobe's calibration pass for the "
                    "local view (default: reference.npz, or the probe's weights-only inputs=none backend)")
    ap.add_argument("--view", action="append", choices=["free", "noise", "local"],
                    help="which views to run (default all three)")
    ap.add_argument("--strict-free", action="store_true",
                    help="judge the free view by the per-tap bounds too (fails by design on deep "
                         "quantized models: see the noise view)")
    ap.add_argument("--min-cos", type=float, default=0.99999)
    ap.add_argument("--max-steps", type=float, default=2.0, help="max |diff| per tap, in its steps")
    ap.add_argument("--flip-window", type=float, default=1e-2,
                    help="local view: mlp.act elements this close to a rounding boundary (in steps) may "
                         "be flipped to explain an mlp.out difference (see explain_by_act_flips)")
    ap.add_argument("--max-off-frac", type=float, default=1e-2,
                    help="max fraction of a tap's elements whose codes differ (plus --off-slack)")
    ap.add_argument("--off-slack", type=int, default=2, help="differing codes allowed in any tap")
    ap.add_argument("--max-grid", type=float, default=0.05, help="max grid residual, in steps")
    ap.add_argument("--chaos-factor", type=float, default=10.0,
                    help="free view: a tap kind's worst 1-cos may be this many times the noise view's")
    ap.add_argument("--noise", type=float, default=1e-6, help="relative noise of the noise view")
    ap.add_argument("--all-taps", action="store_true", help="print every tap, not one row per tap kind")
    ap.add_argument("--max-rows", type=int, default=20, help="disagreeing taps listed per view")
    ap.add_argument("--save", type=Path, help="folder for this script's taps (LABEL.VIEW.npz)")
    args = ap.parse_args()
    views = args.view or ["free", "noise", "local"]
    args.view = [v for v in ("free", "noise", "local") if v in views or (v == "free" and "noise" in views)]
    t0 = time.time()

    inp, backends = read_probe(args.probe)
    if args.capture:
        if not args.quant:
            die("--capture needs --quant")
        checks = [(args.capture.stem, args.quant, args.capture)]
    else:
        checks = [(label, q, args.captures / f"{label}.npz") for label, q in backends
                  if (not args.backend or label in args.backend) and (not args.quant or same_setting(q, args.quant))]
    if not checks:
        die("no emulator backend with a quant setting (and no faults) selected in the probe")
    for _, _, p in checks:
        if not p.is_file():
            die(f"{p} not found (run hefprobe run PROBE --checkpoint GGUF --save-captures DIR)")
    ref_path = args.captures / "reference.npz"
    if not ref_path.is_file():
        die(f"{ref_path} not found")
    reference = dict(np.load(ref_path))

    prompt = [int(t) for t in inp["tokens"]]
    sizes = mrg.chunks_of(len(prompt), inp["chunk"]) if inp.get("chunk") else None
    if "decode_tokens" in inp:
        decode = [int(t) for t in inp["decode_tokens"]]
    else:  # greedy, as hefprobe's reference resolved it
        steps = int(inp.get("decode", 0))
        phases = [p for p, _ in mg.phase_plan(prompt, [0] * steps, sizes)]
        n_prefill = len(phases) - steps
        # step k feeds the argmax (first maximum) of the phase before it
        decode = [int(np.argmax(reference[f"{phases[n_prefill - 1 + k]}/logits"][-1])) for k in range(steps)]
    plan = mg.phase_plan(prompt, decode, sizes)
    print(f"versions: {mg.VERSIONS} {mrg.EXTRA_VERSIONS}")
    print(f"prompt {len(prompt)} tokens, chunks {sizes}, decode {decode}; views {args.view}; settings: "
          + ", ".join(f"{label}={q}" for label, q, _ in checks))

    model = AutoModelForCausalLM.from_pretrained(
        args.gguf.parent, gguf_file=args.gguf.name, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    if model.config.model_type != "llama":
        die(f"model_type {model.config.model_type}: this check patches modeling_llama only")
    if not isinstance(model.model.layers[0].self_attn.q_proj, torch.nn.Linear):
        mg.fail("weights kept packed")
    if model.config.tie_word_embeddings or model.lm_head.weight is model.model.embed_tokens.weight:
        # The tied lm_head gets its own copy, quantized apart from the (float) embedding table.
        model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    n_layers = model.config.num_hidden_layers
    mg.install_hooks(model)
    install_quant_hooks(model)
    print(f"model loaded in {time.time() - t0:.1f} s")

    # 1. float sanity: HF's taps == hefprobe's reference.
    SIM.mode = "off"
    floats = mrg.record_taps(model, plan)
    worst = (0.0, "")
    for key, a in floats.items():
        if key not in reference:
            mg.fail(f"reference.npz has no {key}")
        b = reference[key]
        if a.shape != b.shape or not np.array_equal(np.isfinite(a), np.isfinite(b)):
            mg.fail(f"{key}: shape or -inf pattern differs from hefprobe's reference")
        f = np.isfinite(a)
        rel = float(np.abs(a[f] - b[f]).max() / max(np.abs(b[f]).max(), 1e-30))
        worst = max(worst, (rel, key))
    print(f"float pass: {len(floats)} taps, worst max|diff|/max|ref| {worst[0]:.2e} at {worst[1]}")
    if worst[0] > FLOAT_TOL:
        print(f"FAIL: HF's float taps differ from reference.npz by more than {FLOAT_TOL}")
        return 1

    params = {n: p for n, p in model.named_parameters() if n.endswith("proj.weight") or n == "lm_head.weight"}
    originals = {n: p.detach().clone() for n, p in params.items()}
    embed = model.model.embed_tokens.weight.detach().numpy()
    SIM.embed_q = tuple(np.atleast_1d(x) for x in affine(embed.min(), embed.max(), 16, False))

    failed, warned, summary = [], [], []
    n_flips = 0

    def calibrate(force):
        """Calibration pass (quantized weights, float activations and inputs); with `force`,
        on hefprobe's own activations of that pass."""
        SIM.stats, SIM.quantizers, SIM.force = {}, {}, force
        if SIM.setting.act is not None:
            SIM.mode = "calibrate"
            mg.run(model, plan, tapped=True)
            SIM.finish_calibration()
        SIM.force, SIM.mode = None, "quant"
        return SIM.stats, SIM.quantizers

    for label, qtext, cap_path in checks:
        st = parse_setting(qtext)
        SIM.setting, SIM.clipped = st, {}
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(quantize_weight(originals[n], st.weight_bits) if st.weight_bits else originals[n])
        hef = dict(np.load(cap_path))
        acts = f"{'int' if st.act[1] else 'uint'}{st.act[0]}" if st.act else "float"
        print()
        print(f"=== {label}: {st.text} (weights {f'int{st.weight_bits}' if st.weight_bits else 'float'}, "
              f"acts {acts}{' per channel' if st.per_channel else ''}{f', keep {st.keep}' if st.keep else ''}, "
              f"inputs {'runtime' if st.runtime_inputs else 'float'}) ===")
        own = calibrate(None)
        local_cal = own
        if "local" in args.view and st.act is not None:
            cal_path = args.calibration or calibration_capture(st, backends, args.captures)
            if cal_path is None:
                print("  local view calibrated on this script's own activations (no capture of hefprobe's "
                      f"calibration pass: add a backend with quant = \"w{st.weight_bits},inputs=none\")")
            else:
                local_cal = calibrate(dict(np.load(cal_path)))
                rel, at, dz = scale_differences(own[1], local_cal[1])
                print(f"  calibration on this script's own activations vs on hefprobe's ({cal_path.name}): "
                      f"{len(own[1])} sites, max relative scale difference {rel:.1e} (at {at}), "
                      f"max zero-point difference {dz:g}")
        baseline: dict[str, float] = {}
        free_pending = None
        for view in args.view:
            tv = time.time()
            SIM.stats, SIM.quantizers = local_cal if view == "local" else own
            SIM.rope_calls, SIM.clipped, SIM.local, SIM.acts = 0, {}, {}, {}
            SIM.force = hef if view == "local" else None
            SIM.noise, SIM.rng = (args.noise if view == "noise" else 0.0), np.random.default_rng(0)
            mine = mrg.record_taps(model, plan)
            SIM.force, SIM.noise = None, 0.0
            if SIM.rope_calls != n_layers * len(plan):
                mg.fail(f"patched apply_rotary_pos_emb ran {SIM.rope_calls}x (patch not effective?)")
            if view == "free":
                own_free = mine
            if view == "local":
                mine = SIM.local
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                mg.save_npz_deterministic(args.save / f"{label}.{view}.npz", mine)
            other = own_free if view == "noise" else hef
            missing = sorted(set(mine) ^ set(other))
            rows = [compare_tap(k, mine[k], other[k], n_layers) for k in mine if k in other]
            kinds = aggregate(rows)
            if view == "noise":
                baseline = {k.key: 1 - k.cos for k in kinds}
            what = {"free": "this script's own quantized forward pass vs hefprobe's capture",
                    "noise": f"chaos baseline: this script's free pass with {args.noise:g} relative noise "
                             "before every quantizer vs without it (hefprobe not involved)",
                    "local": "every captured tap recomputed from hefprobe's own upstream taps, calibrated "
                             "on hefprobe's calibration-pass activations"}[view]
            print(f"  -- {view}: {what} ({len(rows)} taps, {time.time() - tv:.1f} s)")
            print_table(rows if args.all_taps else kinds,
                        "     every tap:" if args.all_taps else "     per tap kind (worst over layers and phases):")
            if missing:
                print(f"     taps in one capture only: {missing[:8]}{' ...' if len(missing) > 8 else ''}")
            if view in ("free", "noise"):
                first = next((r for r in rows if r.cos < args.min_cos), None)
                print(f"     first tap (run order) below cosine {args.min_cos}: {first.key if first else 'none'}")
            if view == "noise":
                bad, verdict = [], "baseline"
                if free_pending:  # the free view runs first (the noise view perturbs its pass)
                    i, f_bad, f_kinds, f_missing = free_pending
                    f_verdict = judge_free(f_bad, f_kinds, f_missing, baseline, args)
                    print(f"     the free view, judged against this baseline: {f_verdict}")
                    summary[i] = summary[i][:9] + (f_verdict,) + summary[i][10:]
                    if f_verdict != "ok":
                        warned.append(f"{label}/free")
                    free_pending = None
            elif view == "free" and not args.strict_free:
                # chaos-consistent: no tap kind further from hefprobe than the noise baseline allows
                bad = [r for r in rows if r.note]
                if "noise" in args.view:
                    free_pending, verdict = (len(summary), bad, kinds, missing), "pending"
                else:
                    verdict = judge_free(bad, kinds, missing, baseline, args)
                    if verdict != "ok":
                        warned.append(f"{label}/free")
            else:
                bad = [r for r in rows if is_bad(r, args, grid=view == "local")]
                if view == "local":
                    explained, flips, far = [], 0, 0.0
                    for r in [r for r in bad if r.key.endswith(".mlp.out")]:
                        got = explain_by_act_flips(model, r.key, hef[r.key], args.flip_window)
                        if got is None:
                            continue
                        after = compare_tap(r.key, got[0], hef[r.key], n_layers)
                        if not is_bad(after, args):
                            explained.append(r)
                            flips, far = flips + got[1], max(far, got[2])
                            rows[rows.index(r)] = after  # the summary counts what is left
                    if explained:
                        print(f"     {len(explained)} mlp.out taps outside the bounds equal hefprobe's once {flips} "
                              f"mlp.act elements at most {far:.1e} steps from a rounding boundary take the other "
                              f"code: {', '.join(r.key for r in explained[:6])}{' ...' if len(explained) > 6 else ''}")
                    bad = [r for r in bad if r not in explained]
                    n_flips = flips
                verdict = "ok" if not bad and not missing else "FAIL"
                if bad or missing:
                    failed.append(f"{label}/{view}")
            if bad:
                print_table(bad[:args.max_rows], f"     DISAGREEING taps ({len(bad)}"
                            + (f", first {args.max_rows}" if len(bad) > args.max_rows else "") + "):")
            steps = [r.steps for r in rows if r.steps is not None]
            grids = [r.grid for r in rows if r.grid is not None]
            summary.append((label, view, st.text, max(steps) if steps else None, sum(r.off for r in rows),
                            sum(r.n for r in rows), min(r.cos for r in rows), max(grids) if grids else None,
                            n_flips if view == "local" else None, verdict, time.time() - tv))
            n_flips = 0

    print()
    print("summary (local: after the act flips that explain mlp.out differences; free: judged against the "
          "noise baseline)")
    print(f"{'backend':<16} {'view':<6} {'max steps':>9} {'codes off':>18} {'worst cos':>12} {'grid res':>9} "
          f"{'act flips':>9} {'verdict':>8} {'time':>5}  setting")
    for label, view, text, steps, off, tot, cos, grid, flips, verdict, dt in summary:
        print(f"{label:<16} {view:<6} {fmt(steps, '9.2f'):>9} {off:>8}/{tot:<9} {cos:>12.9f} "
              f"{fmt(grid, '9.2e'):>9} {fmt(flips, '9d'):>9} {verdict:>8} {dt:>4.0f}s  {text}")
    print(f"total {time.time() - t0:.0f} s; "
          + ("all settings agree" if not failed else f"DISAGREE: {', '.join(failed)}")
          + (f" (free view warnings: {', '.join(warned)})" if warned else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
