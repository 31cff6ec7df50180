#!/usr/bin/env bash
# How long each step of .ci/run takes: runs it with every output line stamped with the second
# it came (or reads such a log, `scripts/ci-times.sh LOG`), then prints each `== step` with its
# minutes and each test binary with its seconds, and the total. CI must finish within 90
# minutes on 2 cores; a step's share says where to look when it does not.
#
#   scripts/ci-times.sh            # runs .ci/run here, the log in target/ci-times.log
#   scripts/ci-times.sh LOG        # the steps of a log written before
set -uo pipefail
cd "$(dirname "$0")/.."
log="${1:-target/ci-times.log}"
mkdir -p target
if [ $# -eq 0 ]; then
  .ci/run 2>&1 | while IFS= read -r line; do printf '%(%s)T %s\n' -1 "$line"; done > "$log"
  printf '%(%s)T exit %s\n' -1 "${PIPESTATUS[0]}" >> "$log"
fi
awk '
  function close_step(t) { if (step != "") printf "%6.1f min  %s\n", (t - since) / 60, step }
  $2 == "==" { close_step($1); step = substr($0, index($0, "==") + 3); since = $1 }
  $2 == "Running" { test = $3 }
  $2 == "Doc-tests" { test = "doc tests" }
  /test result:/ { printf "           %7.1f s  %s\n", $(NF) + 0, test }
  $1 ~ /^[0-9]+$/ { if (first == "") first = $1; last = $1 }
  END { close_step(last); printf "%6.1f min  in all\n", (last - first) / 60 }
' "$log"
