#!/usr/bin/env python3
"""The width faults of finding 16 against their definitions, in numpy alone.

Re-implements `tile-sum`, `norm-acc`, `norm-width` and `tile-scale` from the doc comments of
src/fault/catalog/width.rs (nothing taken from hefprobe's code) and checks a capture of
hefprobe's emulator with one of them planted, tap by tap and locally: every tap the fault
writes is recomputed from the capture's own upstream taps and the checkpoint's weights.

    python3 references/check_width.py CHECKPOINT_DIR CAPTURE.npz FAULT_SPEC

CHECKPOINT_DIR: a llama checkpoint as `hefprobe synth` writes it (config.json, f32
model.safetensors). CAPTURE.npz: every tap of every phase (`hefprobe run --save-captures`).
FAULT_SPEC: the spec the capture was emulated with, e.g. `tile-sum:256`, `norm-width:256,pad`.
Prints one line per checked tap kind and exits 0 when every tap agrees, 1 otherwise (also
when the fault acts nowhere this checkpoint lets it, so a check of a no-op cannot pass).
Needs numpy only (CI's Python tier runs it, python/tests/test_width_reference.py).
"""

import json
import pathlib
import struct
import sys

import numpy as np

F32 = np.float32


def load_safetensors(folder):
    out = {}
    for path in sorted(pathlib.Path(folder).glob("*.safetensors")):
        raw = path.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        base = 8 + n
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            if meta["dtype"] != "F32":
                raise SystemExit(f"{path}: {name} is {meta['dtype']}; this check reads f32 checkpoints")
            a, b = meta["data_offsets"]
            out[name] = np.frombuffer(raw[base + a:base + b], dtype="<f4").reshape(meta["shape"])
    return out


def parse_spec(text):
    head, _, layers = text.partition("@")
    name, _, params = head.partition(":")
    pos, named = [], {}
    for p in filter(None, params.split(",")):
        k, eq, v = p.partition("=")
        if eq:
            named[k.strip()] = v.strip()
        else:
            pos.append(p.strip())
    only = None
    if layers:
        only = set()
        for part in layers.removeprefix("layers=").split(","):
            a, _, b = part.partition("-")
            only.update(range(int(a), int(b or a) + 1))
    return name.strip(), pos, named, only


def rms(x, w, eps):
    """The ordinary RMSNorm (float64 sum, float32 result)."""
    ms = (x.astype(np.float64) ** 2).mean(-1, keepdims=True)
    return (x * (1.0 / np.sqrt(ms + eps)).astype(F32) * w).astype(F32)


# ---- the definitions -------------------------------------------------------------------

def norm_width(x, w, eps, width, pad):
    h = x.shape[-1]
    if h <= width or (pad and h % width == 0):
        return None
    if pad:
        ss = (x.astype(np.float64) ** 2).sum(-1, keepdims=True)
        count = -(-h // width) * width
    else:
        ss = (x[..., :width].astype(np.float64) ** 2).sum(-1, keepdims=True)
        count = width
    inv = (1.0 / np.sqrt(ss / count + eps)).astype(F32)
    return (x * inv * w).astype(F32)


def norm_acc(x, w, eps, bits):
    cap = 2 ** (bits - 1) - 1
    h = x.shape[-1]
    if h * 127 * 127 <= cap:
        return None
    out = rms(x, w, eps)
    hit = 0
    for r in range(x.shape[0]):
        row = x[r]
        s = F32(np.abs(row).max()) / F32(127)
        if s == 0:
            continue
        acc = int((np.round(row / s).astype(np.int64) ** 2).sum())
        if acc <= cap:
            continue
        hit += 1
        inv = F32(1.0 / np.sqrt(cap * float(s) * float(s) / h + eps))
        out[r] = row * inv * w
    return out, hit


def softmax_acc(probs, bits):
    cap = 2 ** (bits - 1) - 1
    p = probs.copy()
    hit = 0
    flat = p.reshape(-1, p.shape[-1])
    for row in flat:
        m = row.max()
        if not m > 0:
            continue
        e = row / m
        if int(np.round(e.astype(np.float64) * 32767).sum()) <= cap:
            continue
        hit += 1
        row[:] = e / F32(cap / 32767)
    return p, hit


def tile_scale(x, width):
    x = x.copy()
    h = x.shape[-1]
    for r in range(x.shape[0]):
        s0 = np.abs(x[r, :min(width, h)]).max()
        for a in range(width, h, width):
            t = x[r, a:a + width]
            st = np.abs(t).max()
            if st != 0:
                x[r, a:a + width] = t * (F32(s0) / F32(st))
    return x


def tile_sum(x, wt, bias, width, bits, mode):
    """x [rows, K] @ wt.T per W-wide tile of K, each partial written in the activation format."""
    k = x.shape[-1]
    qmax = F32(2 ** (bits - 1) - 1)
    parts = [x[:, a:a + width].astype(np.float64) @ wt[:, a:a + width].T.astype(np.float64)
             for a in range(0, k, width)]
    parts = [p.astype(F32) for p in parts]
    full = np.zeros_like(parts[0])
    for p in parts:
        full = full + p
    s = (np.abs(full).max(-1, keepdims=True) / qmax).astype(F32)
    safe = np.where(s > 0, s, F32(1))
    y = np.zeros_like(parts[0])
    for p in parts:
        if mode == "requant":
            q = np.clip(np.round(p / safe), -qmax, qmax) * safe
        else:
            q = np.clip(p, -qmax * safe, qmax * safe)
        y = y + np.where(s > 0, q, p).astype(F32)
    if bias is not None:
        y = y + bias
    return y.astype(F32), s


# ---- the check -------------------------------------------------------------------------

def main(folder, capture, spec):
    cfg = json.loads((pathlib.Path(folder) / "config.json").read_text())
    wts = load_safetensors(folder)
    cap = np.load(capture)
    name, pos, named, only = parse_spec(spec)
    eps = cfg.get("rms_norm_eps", 1e-6)
    L = cfg["num_hidden_layers"]
    H = cfg["hidden_size"]
    phases = sorted({k.split("/")[0] for k in cap.files})
    lm_head = wts.get("lm_head.weight", wts["model.embed_tokens.weight"])
    applies = (lambda l: only is None or l in only)
    worst, acted, checked, bad = 0.0, 0, 0, []

    def res_in(ph, l):
        return cap[f"{ph}/embed"] if l == 0 else cap[f"{ph}/layers.{l - 1}.out"]

    def compare(key, want, got, tol, slack=None):
        nonlocal worst, checked
        checked += 1
        d = np.abs(want.astype(np.float64) - got.astype(np.float64))
        scale = max(float(np.abs(got).max()), 1e-30)
        if slack is not None:
            # Partial sums rounded to codes: a rounding boundary may fall either side (float
            # order of the partial sums), so up to one code step per tile (`slack`), on at most
            # 0.1% of the values; everything else within `tol`.
            off = d > tol * scale
            if off.mean() > 1e-3 or (d - slack).max() > tol * scale:
                bad.append(f"{key}: {int(off.sum())} of {d.size} values off, max |diff| {d.max():.3g}")
            worst = max(worst, float(np.where(off, 0, d).max()) / scale)
            return
        rel = float(d.max()) / scale
        worst = max(worst, rel)
        if rel > tol:
            bad.append(f"{key}: max |diff| / max |x| = {rel:.3g} > {tol}")

    def norm_sites():
        for ph in phases:
            for l in range(L):
                if not applies(l):
                    continue
                x = res_in(ph, l)
                yield ph, f"layers.{l}.attn_norm", x, wts[f"model.layers.{l}.input_layernorm.weight"]
                mid = (x + cap[f"{ph}/layers.{l}.attn.out"]).astype(F32)
                yield ph, f"layers.{l}.mlp_norm", mid, wts[f"model.layers.{l}.post_attention_layernorm.weight"]
            if only is None:
                yield ph, "final_norm", cap[f"{ph}/layers.{L - 1}.out"], wts["model.norm.weight"]

    if name == "norm-width":
        width = int(pos[0] if pos else named.get("w", 512))
        pad = (pos[1] if len(pos) > 1 else named.get("variant", "first")) == "pad"
        for ph, tap, x, w in norm_sites():
            want = norm_width(x, w, eps, width, pad)
            if want is not None:
                acted += 1
                compare(f"{ph}/{tap}", want, cap[f"{ph}/{tap}"], 2e-6)
    elif name == "norm-acc":
        bits = int(pos[0] if pos else named.get("bits", 16))
        if named.get("target", "norm") == "softmax":
            for ph in phases:
                for l in filter(applies, range(L)):
                    want, hit = softmax_acc(softmax_of(cap[f"{ph}/layers.{l}.attn.scores"]), bits)
                    acted += hit
                    compare(f"{ph}/layers.{l}.attn.probs", want, cap[f"{ph}/layers.{l}.attn.probs"], 1e-5)
        else:
            for ph, tap, x, w in norm_sites():
                got = norm_acc(x, w, eps, bits)
                if got is not None:
                    want, hit = got
                    acted += hit
                    compare(f"{ph}/{tap}", want, cap[f"{ph}/{tap}"], 2e-5)
    elif name == "tile-scale":
        width = int(pos[0] if pos else named.get("w", 512))
        if H > width:
            for ph, tap, x, w in norm_sites():
                acted += 1
                compare(f"{ph}/{tap}", tile_scale(rms(x, w, eps), width), cap[f"{ph}/{tap}"], 2e-5)
    elif name == "tile-sum":
        width = int(pos[0] if pos else named.get("w", 512))
        bits = int(named.get("bits", 8))
        mode = named.get("mode", "requant")
        kv, d = cfg["num_key_value_heads"], cfg.get("head_dim") or H // cfg["num_attention_heads"]
        for ph in phases:
            for l in filter(applies, range(L)):
                if H <= width:
                    continue
                acted += 1
                x = cap[f"{ph}/layers.{l}.attn_norm"]
                w = wts[f"model.layers.{l}.self_attn.v_proj.weight"]
                want, s = tile_sum(x, w, wts.get(f"model.layers.{l}.self_attn.v_proj.bias"), width, bits, mode)
                got = cap[f"{ph}/layers.{l}.attn.v"].transpose(1, 0, 2).reshape(x.shape[0], kv * d)
                step = s if mode == "requant" else 0 * s
                compare(f"{ph}/layers.{l}.attn.v", want, got, 1e-5, slack=np.broadcast_to(step * -(-H // width), want.shape))
            if only is None and H > width:
                acted += 1
                x = cap[f"{ph}/final_norm"]
                want, s = tile_sum(x, lm_head, None, width, bits, mode)
                step = s if mode == "requant" else 0 * s
                compare(f"{ph}/logits", want, cap[f"{ph}/logits"], 1e-5, slack=np.broadcast_to(step * -(-H // width), want.shape))
    else:
        raise SystemExit(f"check_width.py: `{name}` is not a width fault (tile-sum, norm-acc, norm-width, tile-scale)")

    print(f"{spec}: {checked} taps checked over {len(phases)} phases, the fault acting at {acted}; "
          f"worst relative difference {worst:.3g}")
    for b in bad:
        print(f"  MISMATCH {b}")
    if acted == 0:
        print("  the fault acts nowhere on this checkpoint: nothing was checked")
        return 1
    return 1 if bad else 0


def softmax_of(scores):
    m = scores.max(-1, keepdims=True)
    e = np.exp((scores - m).astype(np.float64))
    return (e / e.sum(-1, keepdims=True)).astype(F32)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    sys.exit(main(*sys.argv[1:]))
