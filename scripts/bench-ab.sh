#!/bin/sh
# Two release binaries side by side, interleaved, on the same machine in one run: prefill 128 and
# decode per token at 2 threads and 1, for SmolLM2-135M's and Qwen2.5-0.5B's shapes (random
# weights), two rounds. docs/PERFORMANCE.md's A/B of a change comes from this script.
#
#   scripts/bench-ab.sh OLD_BINARY NEW_BINARY
#
# AB_PRESETS narrows the shapes (default: both), e.g. AB_PRESETS=smollm2-135m.
#
# Run it on a quiet machine: a neighbour's build moves these figures by more than most changes.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
for round in 1 2; do
  for preset in ${AB_PRESETS:-smollm2-135m qwen2.5-0.5b}; do
    for t in 2 1; do
      for bin in "$1" "$2"; do
        echo "== round $round, $preset, $t thread(s), $bin"
        "$bin" bench --preset "$preset" --threads "$t" --reps 3 --prompt-len 128 --decode 16 2>/dev/null |
          grep -E '^(prefill|decode)'
      done
    done
  done
done
