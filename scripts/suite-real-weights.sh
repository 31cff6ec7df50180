#!/usr/bin/env bash
# Issue 41's catalog-suite figure on real weights (README "Performance"): every probe of
# probes/*.toml against two simulated a16 HEFs of SmolLM2-135M-Instruct, one clean and one with
# shared-softmax@layers=2 planted (as scripts/hef-real-weights.sh plants it), in one `hefprobe
# suite` run with no baseline, explaining each failing pair (and, unless FAST_ONLY=1, again with
# --no-explain). Prints each run's wall and CPU time, its exit status and its last lines.
#
#   scripts/suite-real-weights.sh DIR   (DIR holds the GGUF of scripts/fetch-real-models.sh)
#   HEFPROBE=path/to/hefprobe to use a given binary (default: cargo build --release).
set -euo pipefail

. "$(dirname "$0")/real-model-args.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "threads: $(nproc); $("$HEFPROBE" --version)"
"$HEFPROBE" synth-hef --checkpoint "$dir/$GGUF" --out clean.hef > /dev/null
"$HEFPROBE" synth-hef --checkpoint "$dir/$GGUF" --fault shared-softmax@layers=2 --out planted.hef > /dev/null
modes=("" --no-explain)
[ -z "${FAST_ONLY:-}" ] || modes=("")
for mode in "${modes[@]}"; do
  status=0
  # shellcheck disable=SC2086 # mode is empty or one flag
  /usr/bin/time -f '%e %U %S' -o time "$HEFPROBE" suite "$repo"/probes/*.toml --checkpoint "$dir/$GGUF" \
    --backend hef=clean.hef --backend hef=planted.hef $mode > suite.log 2>&1 || status=$?
  [ "$status" -le 1 ] || { cat suite.log >&2; exit "$status"; }
  read -r wall user sys < <(tail -1 time)
  cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')
  echo "suite ${mode:-(explaining failures)}: $wall s wall, $cpu s CPU (exit $status)"
  grep -v '^ *$' suite.log | tail -4 | sed 's/^/  /'
done
