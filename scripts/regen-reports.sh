#!/bin/sh
# Regenerate every committed report under reports/ and every figure the README and docs/ quote from the
# tool, with the release build and the exact commands below. Run from the repository root:
#
#     scripts/regen-reports.sh
#
# Blocks between `<!-- regen:NAME -->` and `<!-- /regen:NAME -->` in the README and the guides under
# docs/ are replaced by the output of the command named here; nothing else in them is touched. tests/doc_sync.rs
# fails when a committed report (or the README's first example) no longer matches the tool.
# Timings (`hefprobe bench`, docs/PERFORMANCE.md's tables) depend on the machine: they are
# written to target/regen/bench.txt for a person to compare, not spliced.
set -eu

cargo build --release -q
B=target/release/hefprobe
# Every figure is the same on every CPU (tests/cross_isa.rs), so it does not matter where this runs.
OUT=target/regen
mkdir -p "$OUT"

# Exit 1 means drift (or a failed check): the point of these runs. 2 and 3 are real failures.
allow_drift() {
    "$@" && return 0
    status=$?
    [ "$status" -eq 1 ] || { echo "regen: '$*' exited $status" >&2; exit "$status"; }
}

# Replace the block between DOC's markers for NAME by FILE, fenced as text (DOC: the README or
# a guide under docs/, wherever the block lives).
splice() {
    awk -v name="$1" -v file="$2" '
        $0 == "<!-- regen:" name " -->" { print; print "```text"; while ((getline line < file) > 0) print line; print "```"; skip = 1; next }
        $0 == "<!-- /regen:" name " -->" { skip = 0 }
        !skip { print }
    ' "$3" > "$OUT/spliced.md"
    grep -q "<!-- /regen:$1 -->" "$OUT/spliced.md" || { echo "regen: $3 has no block $1" >&2; exit 2; }
    mv "$OUT/spliced.md" "$3"
}

# Reports record their command with argv[0] written `hefprobe`, as a user types it.
# reports/shared-softmax.md and its plots; its terminal output is the README's first example.
allow_drift "$B" run probes/shared-softmax.toml --report terminal \
    --report markdown=reports/shared-softmax.md --report svg=reports/shared-softmax > "$OUT/run-shared-softmax.txt"
splice run-shared-softmax "$OUT/run-shared-softmax.txt" README.md

# reports/fault-localization.md: every fault located and ranked first (exit 1 if one is not).
"$B" faults --matrix --report markdown=reports/fault-localization.md

# reports/hidden-size-sweep.md and .svg (exit 1: the quantization hypotheses drift, by design).
allow_drift "$B" sweep probes/hidden-size-degeneracy.toml \
    --report markdown=reports/hidden-size-sweep.md --report svg=reports/hidden-size-sweep.svg

# The README's HEF example: the same probe against a simulated HEF, from its logits alone.
"$B" synth-hef --synth tinystories --fault shared-softmax@layers=0 -o "$OUT/ts.hef" > /dev/null
allow_drift "$B" run probes/shared-softmax.toml --backend "hef=$OUT/ts.hef" > "$OUT/hef-run.txt"
grep '^best explanation' "$OUT/hef-run.txt" > "$OUT/hef-shared-softmax.txt"
splice hef-shared-softmax "$OUT/hef-shared-softmax.txt" README.md

# docs/DEVICE.md's diagnose example: finding 9's cache-layout fault on a simulated HEF.
"$B" synth-hef --synth tinystories --fault cache-layout:transpose -o "$OUT/cache.hef" > /dev/null
allow_drift "$B" diagnose "$OUT/cache.hef" --synth tinystories \
    --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40 \
    > "$OUT/diagnose-cache-layout.txt"
splice diagnose-cache-layout "$OUT/diagnose-cache-layout.txt" docs/DEVICE.md

# Timings, for a person to compare with docs/PERFORMANCE.md's tables (machine-dependent, not spliced).
"$B" bench > "$OUT/bench.txt"

echo "regenerated reports/ and the blocks of the README and docs/; timings in $OUT/bench.txt" >&2
