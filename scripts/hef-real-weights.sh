#!/usr/bin/env bash
# Issue 21's check on real weights: every catalog probe through simulated HEFs of
# SmolLM2-135M-Instruct at synth-hef's default quantization (a16, calibrated on the committed
# corpus through the checkpoint's own tokenizer). For each probe:
#   - a clean HEF must pass (judged on its excess over the expected quantization), and
#   - a HEF with the probe's own fault planted (at layer 2 where the fault is per layer) must
#     fail, with the planted fault ranked first by explain.
# Then one suite of the whole catalog against the clean HEF (no baseline) and the calibration
# figure (clean HEF logits cosine vs float, random vs text calibration). Writes
# reports/smollm2-hef.md; every command runs inside DIR with relative paths.
#
#   scripts/hef-real-weights.sh DIR   (DIR holds the GGUF of scripts/fetch-real-models.sh)
#   RESUME=1 scripts/hef-real-weights.sh DIR   keeps the probe table of an earlier run in
#     DIR/hef-check (every row written) and runs only the suite and the calibration figures.
#   HEFPROBE=path/to/hefprobe to use a given binary (default: cargo build --release).
#
# About 45 min on 2 cores with a release binary (41 min measured, with a test run beside it; each
# faulted probe's explain ~4 min: 360 emulations through the HEF's frames).
set -euo pipefail

GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
[ $# -eq 1 ] || { echo "usage: $0 DIR   (DIR holds $GGUF; scripts/fetch-real-models.sh)" >&2; exit 2; }
dir="$(cd "$1" && pwd)"
repo="$(cd "$(dirname "$0")/.." && pwd)"
[ -f "$dir/$GGUF" ] || { echo "error: $dir/$GGUF missing; run scripts/fetch-real-models.sh $dir" >&2; exit 2; }
if [ -z "${HEFPROBE:-}" ]; then
  (cd "$repo" && cargo build --release --quiet)
  HEFPROBE="$repo/target/release/hefprobe"
fi
cd "$dir"
mkdir -p hef-check
cp "$repo"/probes/*.toml hef-check/
out=hef-check/smollm2-hef.md

# The fault each catalog probe plants, moved to layer 2 where it is per layer.
planted() { # probe file -> fault spec
  local spec
  spec=$(sed -n 's/^faults = \["\(.*\)"\]/\1/p' "$1" | head -1)
  spec=${spec%@layers=*}
  case "$spec" in
    shared-softmax*|mask-repeat*|rope*|cache-layout*) echo "$spec@layers=2" ;;  # the per-layer faults
    *) echo "$spec" ;;
  esac
}

if [ -n "${RESUME:-}" ]; then
  # The probe table of an earlier run, every probe a row; what followed it is made again.
  n=$(ls hef-check/*.toml | wc -l)
  [ -f hef-check/clean.hef ] && [ -f hef-check/random-calib.hef ] && [ -f "$out" ] \
    && [ "$(grep -c '^| [a-z].* | exit ' "$out")" -eq "$n" ] \
    || { echo "error: RESUME=1 needs a finished probe table in $dir/$out; run without it" >&2; exit 2; }
  sed -i '/^Suite of the whole catalog/,$d' "$out"; sed -i '${/^$/d}' "$out"
else
  "$HEFPROBE" synth-hef --checkpoint "$GGUF" --out hef-check/clean.hef > hef-check/clean.log 2>&1
  "$HEFPROBE" synth-hef --checkpoint "$GGUF" --calib-random --out hef-check/random-calib.hef > hef-check/random.log 2>&1

  {
    echo "# SmolLM2-135M-Instruct through simulated HEFs (a16, text calibration)"
    echo
    echo "Made by \`scripts/hef-real-weights.sh\`. Each probe of \`probes/\` runs with"
    echo "\`--checkpoint $GGUF --backend hef=HEF\`: against a clean HEF (must pass, judged on the"
    echo "excess over the expected quantization) and against a HEF with the probe's fault planted"
    echo "(must fail, with that fault ranked first)."
    echo
    echo "| probe | clean HEF | planted fault | faulted HEF | best explanation | match |"
    echo "|---|---|---|---|---|---|"
  } > "$out"

  for probe in hef-check/*.toml; do
    name=$(basename "$probe" .toml)
    fault=$(planted "$probe")
    clean_status=0
    "$HEFPROBE" run "$probe" --checkpoint "$GGUF" --backend hef=hef-check/clean.hef --no-explain \
      > "hef-check/$name.clean.log" 2>&1 || clean_status=$?
    if [ -z "$fault" ]; then
      echo "| $name | exit $clean_status | - | - | - | - |" >> "$out"; continue
    fi
    # A HEF without an lm_head is a structural mistake (its output is hidden-wide), not a fault
    # of a vocab-wide graph.
    plant=(--fault "$fault")
    [ "$fault" = no-lm-head ] && plant=(--mistake missing-lm-head)
    if ! "$HEFPROBE" synth-hef --checkpoint "$GGUF" "${plant[@]}" --out "hef-check/$name.hef" \
      > "hef-check/$name.synth.log" 2>&1; then
      # rope and position-shift act on positions, which a device never receives.
      echo "| $name | exit $clean_status | \`$fault\` | cannot be planted in a HEF | - | - |" >> "$out"; continue
    fi
    fault_status=0
    "$HEFPROBE" run "$probe" --checkpoint "$GGUF" --backend "hef=hef-check/$name.hef" \
      --report "json=hef-check/$name.json" > "hef-check/$name.fault.log" 2>&1 || fault_status=$?
    best=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=((d.get('explain') or {}).get('rows') or [{}])[0]; print(r.get('fault','-'), '%.6f' % r.get('match_cosine', float('nan')))" "hef-check/$name.json" 2>/dev/null || echo "- -")
    echo "| $name | exit $clean_status | \`$fault\` | exit $fault_status | \`${best% *}\` | ${best##* } |" >> "$out"
    rm -f "hef-check/$name.hef"
  done
fi

suite_status=0
"$HEFPROBE" suite hef-check/*.toml --checkpoint "$GGUF" --backend hef=hef-check/clean.hef \
  --report markdown=hef-check/suite-clean.md > hef-check/suite-clean.log 2>&1 || suite_status=$?
{
  echo
  echo "Suite of the whole catalog against the clean HEF, no baseline: exit $suite_status"
  echo "($(grep -c ': pass$' hef-check/suite-clean.log) pairs pass, $(grep -c ': skipped$' hef-check/suite-clean.log) skipped (the sweep probe), $(grep -c ': fail' hef-check/suite-clean.log) fail)."
  echo
  echo "Calibration source, clean HEF, prefill logits cosine vs the float reference (rope-tables probe):"
  for h in clean random-calib; do
    "$HEFPROBE" run hef-check/rope-tables.toml --checkpoint "$GGUF" --backend "hef=hef-check/$h.hef" \
      --no-explain --report "json=hef-check/calib-$h.json" > /dev/null 2>&1 || true
    c=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(*['%.4f' % r['metrics']['cosine'] for c in d['comparisons'] if c['view']=='cumulative' for r in c['rows'] if r['tap']=='logits' and r['phase']=='prefill'])" "hef-check/calib-$h.json")
    echo "- $h: $c"
  done
} >> "$out"
cp "$out" "$repo/reports/smollm2-hef.md"
echo "wrote reports/smollm2-hef.md"
