#!/usr/bin/env python3
"""transformers' side of `hefprobe bench --suite`: the same shape, random weights, eager
attention, float32, the same thread count; prints the figures as one JSON line (last line).

Run by `hefprobe bench --suite --hf-python PYTHON` from the repository root, with a Python
that has the pinned versions of references/requirements.txt. By hand:

    python scripts/bench-hf.py --shape '{"arch": "llama", "hidden_size": 576, ...}' \
        --threads 2 --prompt-lens 128,1024 --decode 16 --reps 3

Figures: median ms of a prefill of each prompt length (logits for every row, as transformers
returns by default) and median ms of one greedy decode step after the shortest prefill
(DynamicCache, use_cache=True).
"""
import argparse
import json
import statistics
import sys
import time


def build(shape):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    arch = shape.pop("arch")
    classes = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}
    if arch not in classes:
        sys.exit(f"bench-hf.py: arch {arch!r} not supported (llama, qwen2)")
    config_cls, model_cls = classes[arch]
    cfg = config_cls(**shape, attn_implementation="eager", torch_dtype="float32")
    torch.manual_seed(0)
    model = model_cls(cfg).to(torch.float32).eval()
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, help="JSON: arch plus HF config fields")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--prompt-lens", default="128,1024")
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import torch
    from transformers import DynamicCache

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    model = build(json.loads(args.shape))
    vocab = model.config.vocab_size
    lens = [int(x) for x in args.prompt_lens.split(",")]
    # The same token ids as hefprobe's bench: (i * 7919 + 13) mod vocab.
    prompt = lambda n: torch.tensor([[(i * 7919 + 13) % vocab for i in range(n)]])

    out = {}
    with torch.inference_mode():
        model(prompt(8))  # warm-up
        for n in lens:
            times = []
            for r in range(args.reps):
                print(f"transformers: prefill {n}, rep {r + 1}/{args.reps}", file=sys.stderr)
                ids = prompt(n)
                t = time.perf_counter()
                model(ids, use_cache=False)
                times.append((time.perf_counter() - t) * 1e3)
            out[f"prefill_{n}"] = statistics.median(times)
        steps = []
        for r in range(args.reps):
            print(f"transformers: decode, rep {r + 1}/{args.reps}", file=sys.stderr)
            cache = DynamicCache()
            o = model(prompt(min(lens)), past_key_values=cache, use_cache=True)
            nxt = o.logits[:, -1:].argmax(-1)
            t = time.perf_counter()
            for _ in range(args.decode):
                o = model(nxt, past_key_values=cache, use_cache=True)
                nxt = o.logits[:, -1:].argmax(-1)
            steps.append((time.perf_counter() - t) * 1e3 / max(args.decode, 1))
        out["decode"] = statistics.median(steps)
    out["threads"] = torch.get_num_threads()
    out["torch"] = torch.__version__
    import transformers

    out["transformers"] = transformers.__version__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
