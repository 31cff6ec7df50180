#!/usr/bin/env bash
# Issue 21's check on real weights: every catalog probe through simulated HEFs of
# SmolLM2-135M-Instruct at synth-hef's default quantization (a16, calibrated on the committed
# corpus through the checkpoint's own tokenizer). For each probe:
#   - a clean HEF must pass, explain included (judged on its excess over the expected
#     quantization, and explain must not attribute its drift to a fault), and
#   - a HEF with the probe's own fault planted (at layer 2 where the fault is per layer) must
#     fail, with the planted fault ranked first by explain.
# Then, with shared-softmax@layers=2 planted in one more HEF: one suite of the whole catalog
# against the clean and the planted HEF (no baseline, no explain: the clean one's pairs must
# pass, the planted one's shared-softmax pair fail); the hardware checklist's path on the planted HEF (run
# --save-inputs, capture, explain --observed --hef); and the calibration figure (clean HEF
# logits cosine vs float, random vs text calibration). Writes reports/smollm2-hef.md; every
# command runs inside DIR with relative paths.
#
#   scripts/hef-real-weights.sh DIR   (DIR holds the GGUF of scripts/fetch-real-models.sh)
#   RESUME=1 scripts/hef-real-weights.sh DIR   keeps the HEFs and the probe table's rows of an
#     earlier run in DIR/hef-check, runs the probes that have no row yet and what follows.
#   HEFPROBE=path/to/hefprobe to use a given binary (default: cargo build --release).
#   CLEAN_EXPLAIN="probe ..." explains the clean HEF's runs of these probes only (default: all;
#     the others run --no-explain and are judged by the thresholds alone).
#
# About 2.5 hours on a 2-core AMD EPYC (Zen, AVX2) guest with a release binary before explain's
# shortcuts (issue 41): each explain took ~8 min there (360 emulations through the HEF's frames,
# each whole; ~4 min on the AVX-512 Xeon guest of earlier rounds), and 16 runs explain (9 clean,
# 6 planted, the checklist's). With CLEAN_EXPLAIN=attention-mask-broadcast
# (reports/smollm2-hef.md) about an hour there. With the shortcuts an explain takes 2-3× less
# (scripts/explain-real-weights.sh); the whole script has not been timed again.
set -euo pipefail

. "$(dirname "$0")/real-model-args.sh"
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
  # The rows of an earlier run are kept; what followed the table is made again.
  [ -f hef-check/clean.hef ] && [ -f hef-check/random-calib.hef ] && grep -q '^| probe |' "$out" 2>/dev/null \
    || { echo "error: RESUME=1 needs the HEFs and the table header of an earlier run in $dir/hef-check; run without it" >&2; exit 2; }
  sed -i '/^Suite of the whole catalog/,$d' "$out"; sed -i -e :a -e '/^\n*$/{$d;N;ba' -e '}' "$out"
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
    echo "The clean HEF's runs of ${CLEAN_EXPLAIN:-every probe} include explain: exit 0 means no drift"
    echo "beyond the thresholds and no fault that explains what drift there is (a run fails on a"
    echo "fault explain finds even below the thresholds); its verdict is the third column (\`-\`:"
    echo "run with \`--no-explain\`, judged by the thresholds alone)."
    echo
    echo "| probe | clean HEF | clean HEF: explain | planted fault | faulted HEF | best explanation | match |"
    echo "|---|---|---|---|---|---|---|"
  } > "$out"
fi

for probe in hef-check/*.toml; do
    name=$(basename "$probe" .toml)
    grep -q "^| $name | " "$out" && continue  # a row of an earlier run (RESUME)
    fault=$(planted "$probe")
    clean_status=0
    explain=()
    [ -z "${CLEAN_EXPLAIN:-}" ] || [[ " $CLEAN_EXPLAIN " == *" $name "* ]] || explain=(--no-explain)
    "$HEFPROBE" run "$probe" --checkpoint "$GGUF" --backend hef=hef-check/clean.hef "${explain[@]}" \
      > "hef-check/$name.clean.log" 2>&1 || clean_status=$?
    clean_verdict=$(grep -oE 'expected quantization noise|nothing in the catalog explains|best explanation: [^ ]+|matches the clean reference' \
      "hef-check/$name.clean.log" | tail -1 || true)  # none: run with --no-explain
    if [ -z "$fault" ]; then
      echo "| $name | exit $clean_status | ${clean_verdict:--} | - | - | - | - |" >> "$out"; continue
    fi
    # A HEF without an lm_head is a structural mistake (its output is hidden-wide), not a fault
    # of a vocab-wide graph.
    plant=(--fault "$fault")
    [ "$fault" = no-lm-head ] && plant=(--mistake missing-lm-head)
    if ! "$HEFPROBE" synth-hef --checkpoint "$GGUF" "${plant[@]}" --out "hef-check/$name.hef" \
      > "hef-check/$name.synth.log" 2>&1; then
      # rope and position-shift act on positions, which a device never receives.
      echo "| $name | exit $clean_status | ${clean_verdict:--} | \`$fault\` | cannot be planted in a HEF | - | - |" >> "$out"; continue
    fi
    fault_status=0
    "$HEFPROBE" run "$probe" --checkpoint "$GGUF" --backend "hef=hef-check/$name.hef" \
      --report "json=hef-check/$name.json" > "hef-check/$name.fault.log" 2>&1 || fault_status=$?
    best=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=((d.get('explain') or {}).get('rows') or [{}])[0]; print(r.get('fault','-'), '%.6f' % r.get('match_cosine', float('nan')))" "hef-check/$name.json" 2>/dev/null || echo "- -")
    echo "| $name | exit $clean_status | ${clean_verdict:--} | \`$fault\` | exit $fault_status | \`${best% *}\` | ${best##* } |" >> "$out"
    rm -f "hef-check/$name.hef"
done

# One planted fault for the parts below: the finding-11 softmax, at layer 2.
planted_hef=hef-check/softmax-l2.hef
[ -f "$planted_hef" ] || "$HEFPROBE" synth-hef --checkpoint "$GGUF" --fault shared-softmax@layers=2 \
  --out "$planted_hef" > hef-check/softmax-l2.synth.log 2>&1

# The nightly case: the whole catalog against two targets, the clean HEF and the planted one,
# with no baseline and no explain (each probe's explain of its planted fault is the table's).
# Every pair of the clean HEF must pass and the planted one's shared-softmax pair fail (the
# fault moves the other probes' logits too, by more or less than their bounds allow).
suite_status=0
"$HEFPROBE" suite hef-check/*.toml --checkpoint "$GGUF" --backend hef=hef-check/clean.hef \
  --backend "hef=$planted_hef" --no-explain --report json=hef-check/suite.json --report markdown=hef-check/suite.md \
  > hef-check/suite.log 2>&1 || suite_status=$?
{
  echo
  echo "Suite of the whole catalog against the clean HEF and \`shared-softmax@layers=2\` planted"
  echo "(targets \`clean\` and \`softmax-l2\`), no baseline, \`--no-explain\`: exit $suite_status."
  echo
  python3 - hef-check/suite.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("| target | pass | failed | skipped | other | first drift of each failure |")
print("|---|---|---|---|---|---|")
for t in ("clean", "softmax-l2"):
    ps = [p for p in d["pairs"] if p["target"] == t]
    n = lambda s: sum(p["status"] == s for p in ps)
    other = len(ps) - n("pass") - n("failed") - n("skipped")
    best = sorted({p.get("first_drift") or "none" for p in ps if p["status"] == "failed"})
    print(f"| {t} | {n('pass')} | {n('failed')} | {n('skipped')} | {other} | {', '.join('`%s`' % b for b in best) or '-'} |")
PY
} >> "$out"

# The hardware checklist's path: inputs saved here, the planted HEF captured as on a device
# host, explained here from the recorded logits with the HEF named.
"$HEFPROBE" run hef-check/shared-softmax.toml --checkpoint "$GGUF" --no-explain \
  --save-inputs hef-check/inputs.npz > /dev/null 2>&1 || true
"$HEFPROBE" capture "$planted_hef" --inputs hef-check/inputs.npz -o hef-check/device.npz \
  > hef-check/capture.log 2>&1
"$HEFPROBE" explain hef-check/shared-softmax.toml --checkpoint "$GGUF" --observed hef-check/device.npz \
  --hef "$planted_hef" > hef-check/checklist-explain.log 2>&1 || true
{
  echo
  echo "The hardware checklist's path on the planted HEF (\`run --save-inputs\`, \`capture\`,"
  echo "\`explain --observed device.npz --hef\`):"
  echo
  echo "> $(grep -E 'expected quantization noise|nothing in the catalog|best explanation' hef-check/checklist-explain.log | tail -1)"
} >> "$out"

{
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
