"""Check that checkpoints written by `hefprobe synth` load in HF transformers and that HF
computes the same logits as hefprobe's reference on them; then re-implement the
`shared-softmax` and `mask-repeat` fault definitions on HF's eager attention and check HF
computes the same logits as hefprobe's emulator with those faults.

Usage (in the pinned venv of requirements.txt, see README.md here):
    python references/check_synth.py [path/to/hefprobe]

For each architecture it synthesizes a small checkpoint with `hefprobe synth`, runs
`hefprobe reference` on a prompt plus teacher-forced decode steps, loads the folder with
`AutoModelForCausalLM.from_pretrained(..., dtype=float32, attn_implementation="eager")`,
and compares logits position by position. Exits non-zero on any disagreement.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

HEFPROBE = sys.argv[1] if len(sys.argv) > 1 else "target/release/hefprobe"

CASES = {
    "llama": ["--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2"],
    "llama-massive": ["--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
                      "--massive-channels", "3"],
    "mistral-window": ["--arch", "mistral", "--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "1",
                       "--sliding-window", "5"],
    "qwen2": ["--arch", "qwen2", "--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2"],
    "qwen3": ["--arch", "qwen3", "--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
              "--head-dim", "32"],
    "tinystories-bf16": ["--preset", "tinystories", "--dtype", "bf16"],
}
PROMPT = [3, 17, 99, 4, 250, 7, 31, 8, 200, 11, 60, 5]
DECODE = [9, 140, 33]


def patch_attention(fault: str, layer: int):
    """Replace modeling_llama's eager attention with one that applies `fault` at `layer`,
    written from the definitions in src/fault/catalog/attention.rs."""
    import transformers.models.llama.modeling_llama as ml

    original = ml.eager_attention_forward

    def patched(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        if module.layer_idx != layer:
            return original(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
        key = ml.repeat_kv(key, module.num_key_value_groups)
        value = ml.repeat_kv(value, module.num_key_value_groups)
        scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # [B, H, T, S]
        b, h, t, s = scores.shape
        mask = attention_mask[:, :, :, :s]  # [B, 1, T, S] additive
        if fault == "mask-repeat":
            # head h, query t gets mask row floor((h*T + t) / H)
            rows = torch.tensor([[(hh * t + q) // h for q in range(t)] for hh in range(h)])
            mask = mask[:, 0][:, rows]  # [B, H, T, S]
        scores = scores + mask
        if fault == "shared-softmax":
            # one softmax per query row over all heads' scores together
            probs = torch.softmax(scores.transpose(1, 2).reshape(b, t, h * s), dim=-1)
            probs = probs.reshape(b, t, h, s).transpose(1, 2)
        else:
            probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, value).transpose(1, 2).contiguous()
        return out, probs

    ml.eager_attention_forward = patched
    return lambda: setattr(ml, "eager_attention_forward", original)


def check_faults(tmp: Path) -> int:
    failures = 0
    ckpt = tmp / "fault-ckpt"
    subprocess.run([HEFPROBE, "synth", *CASES["llama"], "--seed", "3", "-o", str(ckpt)], check=True,
                   stdout=subprocess.DEVNULL)
    for fault, layer in [("shared-softmax", 0), ("mask-repeat", 1)]:
        probe, caps = tmp / f"{fault}.toml", tmp / f"{fault}-caps"
        probe.write_text(
            f'version = 1\nname = "f"\nquestion = "q"\ntaps = ["logits"]\n[checkpoint]\npath = "{ckpt}"\n'
            f'[inputs]\ntokens = {PROMPT}\n[[backend]]\nname = "device"\nkind = "emulator"\n'
            f'faults = ["{fault}@layers={layer}"]\n[compare]\nlocal = false\nlens = false\n')
        subprocess.run([HEFPROBE, "run", str(probe), "--save-captures", str(caps)], stdout=subprocess.DEVNULL)
        ours = np.load(caps / "device.npz")["prefill/logits"]
        restore = patch_attention(fault, layer)
        try:
            model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
            with torch.no_grad():
                hf = model(torch.tensor([PROMPT])).logits[0].numpy()
        finally:
            restore()
        diff = np.abs(hf - ours).max()
        ok = diff <= 1e-4 * max(1.0, float(np.abs(hf).max()))
        failures += not ok
        print(f"{fault + '@layers=' + str(layer):<26} HF re-implementation vs hefprobe emulator: max|diff| {diff:.2e} "
              f"{'ok' if ok else 'MISMATCH'}")
    return failures


def main() -> int:
    failures = 0
    torch.set_num_threads(2)
    for name, args in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            ckpt, cap = Path(tmp) / "ckpt", Path(tmp) / "cap.npz"
            subprocess.run([HEFPROBE, "synth", *args, "--seed", "3", "-o", str(ckpt)], check=True,
                           stdout=subprocess.DEVNULL)
            subprocess.run([HEFPROBE, "reference", "--checkpoint", str(ckpt), "--tokens", ",".join(map(str, PROMPT)),
                            "--decode-tokens", ",".join(map(str, DECODE)), "--taps", "logits", "-o", str(cap)],
                           check=True, stdout=subprocess.DEVNULL)
            ours = np.load(cap)
            model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
            model.eval()
            ids = torch.tensor([PROMPT + DECODE])
            with torch.no_grad():
                hf = model(ids).logits[0].numpy()
            mine = np.concatenate([ours["prefill/logits"]] + [ours[f"decode.{k}/logits"] for k in range(len(DECODE))])
            diff = np.abs(hf - mine).max()
            tol = 1e-4 * max(1.0, float(np.abs(hf).max()))
            cos = float((hf * mine).sum() / np.sqrt((hf * hf).sum() * (mine * mine).sum()))
            ok = diff <= tol and (hf.argmax(-1) == mine.argmax(-1)).all()
            failures += not ok
            print(f"{name:<18} {type(model).__name__:<20} max|diff| {diff:.2e} (tol {tol:.1e}) cosine {cos:.9f} "
                  f"{'ok' if ok else 'MISMATCH'}")
    with tempfile.TemporaryDirectory() as tmp:
        failures += check_faults(Path(tmp))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
