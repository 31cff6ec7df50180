#!/bin/sh
# docs/BAD-INPUT.md's spill figures: an all-tap `hefprobe run` of Qwen2.5-0.5B's shape
# (random weights) against an emulator with a planted shared softmax, at N prompt tokens and 2
# decode steps. Its captures do not fit in memory past ~1024 tokens on a 24 GB machine, so the
# run spills them to disk; prints wall time and peak RSS (/usr/bin/time), the report's spill note.
#
#     scripts/spill-run.sh 2048           # default budget: MemAvailable
#     scripts/spill-run.sh 1024 12G       # a smaller budget forces the spill at 1024
#
# Needs ~40 GB free in the system's temp folder at 2048 tokens (or set TMPDIR). Exit 1 from
# the run is the planted drift, which is the point.
set -eu
N=${1:-2048}
BUDGET=${2:-}
cargo build --release -q
B=$(pwd)/target/release/hefprobe
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# Token ids (i * 7919 + 13) mod 151936, as `hefprobe bench` uses.
TOKENS=$(awk -v n="$N" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", (i ? ", " : ""), (i * 7919 + 13) % 151936 }')
cat > "$W/spill.toml" <<TOML
version = 1
name = "qwen-spill-$N"
question = "does a $N-token all-tap run of Qwen2.5-0.5B's shape complete in bounded memory?"
taps = ["*"]
[checkpoint]
synth = "qwen2.5-0.5b"
[inputs]
tokens = [$TOKENS]
decode = 2
[[backend]]
name = "emulator"
kind = "emulator"
faults = ["shared-softmax@layers=12"]
TOML
status=0
/usr/bin/time -v "$B" ${BUDGET:+--max-memory "$BUDGET"} run "$W/spill.toml" --no-explain \
    --report json="$W/r.json" --report terminal="$W/r.txt" 2> "$W/time.txt" || status=$?
[ "$status" -le 1 ] || { cat "$W/time.txt" >&2; exit "$status"; }
grep -E "Elapsed|Maximum resident" "$W/time.txt"
grep -o "captures spilled to disk: [^(]*([^)]*)" "$W/r.txt" || echo "held in memory (no spill)"
