#!/bin/sh
# The 1.5B-3B memory figures (docs/PERFORMANCE.md): a catalog probe's `hefprobe run` on the
# shapes of Qwen2.5-1.5B and Llama-3.2-3B, written as bf16 folders as they are published
# (random weights, `synth --dtype bf16`), with every tap, a 512-token prompt and 8 decode
# steps, an emulator with a planted shared softmax, and explain. Prints wall time and peak
# RSS (/usr/bin/time), the run's first drift and best explanation, and its spill note.
# explain ranks four candidates (the planted one, its whole-model form, mask-repeat and
# quant:w8, whose weights are quantized as they are read), not the whole catalog: it holds one
# emulation at a time (two in a tie check) whatever their number, so the peak is the same and
# the run takes minutes rather than hours on 2 cores.
#
#     scripts/scale-run.sh                       # both shapes
#     scripts/scale-run.sh qwen2.5-1.5b          # one
#     HEFPROBE=old/hefprobe scripts/scale-run.sh llama3.2-3b   # another build's binary
#
# Run it alone on its machine (no build or test beside it: they share its cores and memory)
# (the 3B run holds ~8 GiB and both cores for most of an hour).
#
# Each run gets the memory budget its target names (`--max-memory`: 10G for the 1.5B shape,
# 16G for the 3B one), so the captures that do not fit are spilled to disk as a user with
# that much memory would see.
#
# Needs ~20 GB free in the system's temp folder (or set TMPDIR) for the folders and spilled
# captures. Exit 1 from a run is the planted drift, which is the point.
set -eu
PRESETS=${*:-"qwen2.5-1.5b llama3.2-3b"}
if [ -n "${HEFPROBE:-}" ]; then
    B=$HEFPROBE
else
    cargo build --release -q
    B=$(pwd)/target/release/hefprobe
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for P in $PRESETS; do
    "$B" synth --preset "$P" --dtype bf16 -o "$W/$P" > /dev/null
    VOCAB=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$W/$P/config.json")
    # Token ids (i * 7919 + 13) mod vocab, as `hefprobe bench` uses.
    TOKENS=$(awk -v n=512 -v v="$VOCAB" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", (i ? ", " : ""), (i * 7919 + 13) % v }')
    cat > "$W/$P.toml" <<TOML
version = 1
name = "scale-$P"
question = "does a 512-token all-tap run with explain of $P's shape (bf16) fit in memory?"
finding = 11
taps = ["*"]
[checkpoint]
path = "$W/$P"
[inputs]
tokens = [$TOKENS]
decode = 8
[[backend]]
name = "device"
kind = "emulator"
faults = ["shared-softmax@layers=1"]
[thresholds.default]
cosine = 0.999
[explain]
observed = "device"
faults = ["shared-softmax@layers=1", "shared-softmax", "mask-repeat@layers=1", "quant:w8"]
TOML
    case "$P" in qwen2.5-1.5b) BUDGET=10G ;; *) BUDGET=16G ;; esac
    status=0
    /usr/bin/time -v "$B" --max-memory "$BUDGET" run "$W/$P.toml" --report terminal="$W/$P.txt" 2> "$W/time.txt" || status=$?
    [ "$status" -le 1 ] || { cat "$W/time.txt" >&2; exit "$status"; }
    echo "== $P (bf16, $(du -sh "$W/$P" | cut -f1) on disk, --max-memory $BUDGET)"
    grep -E "Elapsed|Maximum resident" "$W/time.txt"
    grep -m1 "first drift" "$W/$P.txt"
    grep -m1 -i "explanation" "$W/$P.txt" || true
    grep -o "captures spilled to disk: [^(]*([^)]*)" "$W/$P.txt" || echo "held in memory (no spill)"
    rm -rf "$W/$P"
done
