#!/usr/bin/env bash
# Issue 51's check on real weights: SmolLM2-135M-Instruct through a simulated HEF that holds
# the exporter's three groups (prefill, tbt and a cache-less base-scope group of 24 positions,
# over the exporter's RoPE input map), run by name in base scope the way the exporter's
# generate_base_scope.py runs finding 16's checkpoints: clean, and with a fault planted at
# layer 2. Writes reports/smollm2-base-scope.md; every command runs inside DIR.
#
#   scripts/base-scope-real-weights.sh DIR   (DIR holds the GGUF of scripts/fetch-real-models.sh)
#   HEFPROBE=path/to/hefprobe to use a given binary (default: cargo build --release).
set -euo pipefail

. "$(dirname "$0")/real-model-args.sh"
cd "$dir"
mkdir -p base-scope
out=base-scope/smollm2-base-scope.md
common=(--checkpoint "$GGUF" --base-scope 24 --input-map exporter)
"$HEFPROBE" synth-hef "${common[@]}" --out base-scope/clean.hef > base-scope/clean.log 2>&1
"$HEFPROBE" synth-hef "${common[@]}" --fault shared-softmax@layers=2 --out base-scope/planted.hef \
  > base-scope/planted.log 2>&1
cat > base-scope/probe.toml <<'TOML'
version = 1
name = "base-scope"
question = "Does the base-scope group compute what the float model does, step by step?"
finding = 16

[checkpoint]
path = "../SmolLM2-135M-Instruct.Q4_1.gguf"

[inputs]
text = "Once upon a time there was a little girl"
decode = 8

[explain]
observed = "hef"
TOML

run() { # hef -> the run's terminal report, timed
  local start end
  start=$(date +%s)
  "$HEFPROBE" run base-scope/probe.toml --backend "hef=$1,group=hefprobe_sim" 2>/dev/null || true
  end=$(date +%s)
  echo "(wall time $((end - start)) s)" >&2
}

{
  echo "# SmolLM2-135M-Instruct in base scope (the exporter's cache-less group)"
  echo
  echo "Made by \`scripts/base-scope-real-weights.sh\`: a simulated HEF of SmolLM2-135M-Instruct"
  echo "(Q4_1 GGUF, dequantized) holding \`hefprobe_sim__prefill\`, \`hefprobe_sim__tbt\` and the"
  echo "cache-less \`hefprobe_sim\` of 24 positions, over the exporter's RoPE input map, run as"
  echo "\`--backend hef=X.hef,group=hefprobe_sim\`: every step re-runs the whole conversation"
  echo "right-aligned in the one frame (zero-embedding padding first), teacher-forced on the"
  echo "reference's greedy tokens for the logits of every step, then generating on its own (each"
  echo "step's argmax appended) for the token figures. Audit of the clean HEF:"
  echo
  echo '```text'
  "$HEFPROBE" audit base-scope/clean.hef --checkpoint "$GGUF" 2>&1 | grep -E '^(ERROR|WARNING|INFO)|error\(s\)' | cut -c1-160
  echo '```'
  echo
  echo "## Clean"
  echo
  echo '```text'
  run base-scope/clean.hef
  echo '```'
  echo
  echo "## shared-softmax@layers=2 planted"
  echo
  echo '```text'
  run base-scope/planted.hef
  echo '```'
} > "$out" 2> base-scope/times.log
cp "$out" "$repo/reports/smollm2-base-scope.md"
cat base-scope/times.log
echo "wrote $repo/reports/smollm2-base-scope.md"
