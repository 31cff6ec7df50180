#!/bin/sh
# docs/PERFORMANCE.md's streaming-compare figures: two all-tap captures of SmolLM2-135M's
# shape at N prompt tokens (random weights, seeds 0 and 1, so every tap differs), then
# `hefprobe compare` of one against the other under /usr/bin/time: wall time, peak RSS, and the
# rate at which it reads the two captures.
#
#     scripts/compare-bench.sh 1024     # 2 × 2.94 GB; needs ~6 GB free in TMPDIR
set -eu
N=${1:-1024}
cargo build --release -q
B=$(pwd)/target/release/hefprobe
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# Token ids (i * 7919 + 13) mod 49152, as `hefprobe bench` uses.
TOKENS=$(awk -v n="$N" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), (i * 7919 + 13) % 49152 }')
"$B" reference --synth smollm2-135m --synth-seed 0 --tokens "$TOKENS" --taps '*' -o "$W/a.npz" > /dev/null
"$B" reference --synth smollm2-135m --synth-seed 1 --tokens "$TOKENS" --taps '*' -o "$W/b.npz" > /dev/null
bytes=$(( $(stat -c %s "$W/a.npz") + $(stat -c %s "$W/b.npz") ))
status=0
/usr/bin/time -f "%e %M" -o "$W/time.txt" "$B" compare "$W/a.npz" "$W/b.npz" --report json="$W/c.json" > /dev/null || status=$?
# Exit 1 is drift (two different models), the expected outcome.
[ "$status" -le 1 ] || exit "$status"
# GNU time writes "Command exited with non-zero status 1" first when the run found drift.
read -r secs kb <<EOT
$(tail -n 1 "$W/time.txt")
EOT
awk -v b="$bytes" -v s="$secs" -v kb="$kb" 'BEGIN {
    printf "compare of 2 captures, %.2f GB in all: %.1f s, %.2f GB/s, peak RSS %.2f GiB\n", b / 1e9, s, b / 1e9 / s, kb / 1048576 }'
