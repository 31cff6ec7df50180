#!/usr/bin/env bash
# The real-weights reports: the fault-localization matrix and the finding-16 quantization /
# scope sweep on SmolLM2-135M-Instruct (the Q4_1 GGUF of scripts/fetch-real-models.sh,
# dequantized to f32). Writes reports/smollm2-fault-localization.md and
# reports/smollm2-quant-scope.md (+ .json); every command runs inside DIR with relative
# paths, so the commands the reports quote name no machine path.
#
#   scripts/real-weights-reports.sh DIR      (DIR: the folder fetch-real-models.sh printed)
#   HEFPROBE=path/to/hefprobe to use a given binary (default: cargo build, target/debug).
#
# Runtime on 2 cores (debug profile, dependencies at opt-level 3): about 12 min for the
# matrix, 10 min for the sweep, run in parallel; a release binary (HEFPROBE=target/release/hefprobe)
# takes a few minutes.
set -euo pipefail

GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
# The prompt of references/real/smollm2-135m-instruct.json.
TEXT="Once upon a time, in a small village by the sea, there lived an old fisherman who"

[ $# -eq 1 ] || { echo "usage: $0 DIR   (DIR holds $GGUF; scripts/fetch-real-models.sh)" >&2; exit 2; }
dir="$(cd "$1" && pwd)"
repo="$(cd "$(dirname "$0")/.." && pwd)"
[ -f "$dir/$GGUF" ] || { echo "error: $dir/$GGUF missing; run scripts/fetch-real-models.sh $dir" >&2; exit 2; }
if [ -z "${HEFPROBE:-}" ]; then
  (cd "$repo" && cargo build --quiet)
  HEFPROBE="$repo/target/debug/hefprobe"
fi

cd "$dir"
# Finding 16's hypotheses on real weights: weight bits 8 and 4 alone; uint8 activations per
# tensor, per channel, and per tensor with the 4 largest channels of each site in int16;
# each through the KV cache (kv) and as a prefill re-run per generated token (base).
cat > real-weights-quant.toml <<TOML
version = 1
name = "smollm2-quant-scope"
question = "On a real trained model, which quantization hypothesis (granularity, massive-activation channels, weight bits), in which scope, makes greedy generation degenerate?"
finding = 16

[checkpoint]
path = "$GGUF"

[inputs]
text = "$TEXT"

[sweep]
quant = ["w8", "w4", "w8a8", "w8a8,granularity=channel", "w8a8,keep=4", "w4a8", "w4a8,granularity=channel"]
scope = ["kv", "base"]
generate = 32
TOML

"$HEFPROBE" faults --matrix --checkpoint "$GGUF" --text "$TEXT" \
  --report markdown=smollm2-fault-localization.md > matrix.log 2>&1 &
matrix=$!
# Exit 1 is the sweep's answer (a hypothesis drifts past the probe's logits bound), not a failure.
sweep_status=0
"$HEFPROBE" sweep real-weights-quant.toml \
  --report markdown=smollm2-quant-scope.md --report json=smollm2-quant-scope.json > sweep.log 2>&1 \
  || sweep_status=$?
[ "$sweep_status" -le 1 ] || { echo "error: sweep exited $sweep_status; see $dir/sweep.log" >&2; exit "$sweep_status"; }
status=0
wait "$matrix" || status=$?   # exit 1: a fault was not ranked first (the report says which)
[ "$status" -le 1 ] || { echo "error: faults --matrix exited $status; see $dir/matrix.log" >&2; exit "$status"; }

for f in smollm2-fault-localization.md smollm2-quant-scope.md smollm2-quant-scope.json; do
  cp "$f" "$repo/reports/$f"
done
cp real-weights-quant.toml "$repo/reports/smollm2-quant-scope.probe.toml"
echo "wrote reports/smollm2-fault-localization.md, reports/smollm2-quant-scope.md (matrix exit $status, sweep exit $sweep_status)"
