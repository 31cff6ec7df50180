#!/usr/bin/env bash
# Issue 41's explain figures on real weights (README "Performance"): the shared-softmax probe
# against two simulated a16 HEFs of SmolLM2-135M-Instruct, one with shared-softmax@layers=2
# planted (as scripts/hef-real-weights.sh plants it) and one clean, each explained with
# explain's shortcuts (reuse of the clean run's blocks, early stopping, candidates in parallel)
# and, unless FAST_ONLY=1, exhaustively (`--exhaustive`: every candidate whole, as explain ran
# before the shortcuts). Prints each explain's wall and CPU time (user + system: on a machine
# shared with other work, the wall time is the CPU time it got), its conclusion and its
# "emulations" line (candidates in full / from a reused prefix / stopped early; block-steps saved).
#
#   scripts/explain-real-weights.sh DIR   (DIR holds the GGUF of scripts/fetch-real-models.sh)
#   HEFPROBE=path/to/hefprobe to use a given binary (default: cargo build --release).
#
# The timed command is `hefprobe explain PROBE --checkpoint GGUF --backend hef=HEF`: the
# reference and the HEF run first (a few seconds), then explain. The ranking-equality check on
# the same HEFs is tests/real_models.rs (explains_shortcuts_leave_the_ranking_...).
set -euo pipefail

. "$(dirname "$0")/real-model-args.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$dir"
echo "threads: $(nproc); $("$HEFPROBE" --version)"
"$HEFPROBE" synth-hef --checkpoint "$GGUF" --fault shared-softmax@layers=2 --out "$work/planted.hef" > /dev/null
"$HEFPROBE" synth-hef --checkpoint "$GGUF" --out "$work/clean.hef" > /dev/null
modes=("" --exhaustive)
[ -z "${FAST_ONLY:-}" ] || modes=("")
for hef in planted clean; do
  for mode in "${modes[@]}"; do
    status=0
    # shellcheck disable=SC2086 # mode is empty or one flag
    /usr/bin/time -f '%e %U %S' -o "$work/time" "$HEFPROBE" explain "$repo/probes/shared-softmax.toml" \
      --checkpoint "$GGUF" --backend "hef=$work/$hef.hef" $mode > "$work/$hef$mode.log" 2>&1 || status=$?
    [ "$status" -le 1 ] || { cat "$work/$hef$mode.log" >&2; exit "$status"; }
    read -r wall user sys < <(tail -1 "$work/time")
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')
    echo "$hef HEF, explain ${mode:-(shortcuts)}: $wall s wall, $cpu s CPU (exit $status)"
    grep -E '^\(?[0-9]+ candidates' "$work/$hef$mode.log" | sed 's/^/  /' || true
    grep -E 'expected quantization noise|nothing in the catalog|best explanation' "$work/$hef$mode.log" | tail -1 \
      | sed 's/^/  /' || true
  done
done
