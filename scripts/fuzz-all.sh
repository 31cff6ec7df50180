#!/usr/bin/env bash
# Run every fuzz target of fuzz/ for SECONDS each (default 600) and print one line per target:
# executions, corpus size, crashes. docs/BAD-INPUT.md's fuzzing figures come from this script.
#
#   scripts/fuzz-all.sh [SECONDS] [JOBS] [TARGET...]   (JOBS targets at a time, default 1;
#                                                      default: every target)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain (or RUSTC_BOOTSTRAP=1 on
# stable). Built without a sanitizer (`-s none`): a panic, an abort, a run over -rss_limit_mb
# or over -timeout seconds is a crash. Corpora grow in fuzz/corpus/ (not committed); the seeds
# are fuzz/seeds/. Crashing inputs land in fuzz/artifacts/TARGET/.
set -euo pipefail
secs=${1:-600}
jobs=${2:-1}
cd "$(dirname "$0")/../fuzz"
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then toolchain=(+nightly); else export RUSTC_BOOTSTRAP=1; fi
cargo "${toolchain[@]}" fuzz build -s none -O >/dev/null
targets=(hef_reader npz_reader probe_toml model_config safetensors dump_map hailo_config
         gguf_reader tokenizer_json suite_toml suite_json history_jsonl)
[ $# -gt 2 ] && targets=("${@:3}")
mkdir -p logs
run() {
    local t=$1 seeds=seeds/$1
    [ "$t" = hef_reader ] && seeds=seeds   # the HEF seeds predate the per-target folders
    mkdir -p "corpus/$t"
    local status=0
    cargo "${toolchain[@]}" fuzz run -s none -O "$t" "corpus/$t" "$seeds" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        > "logs/$t.log" 2>&1 || status=$?
    local execs corpus
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "logs/$t.log" | tail -1)
    corpus=$(ls "corpus/$t" | wc -l)
    echo "$t: ${secs} s, ${execs:-?} executions, corpus $corpus, exit $status$([ "$status" = 0 ] && echo ', no crash' || echo ", CRASH: see fuzz/logs/$t.log")"
}
i=0
for t in "${targets[@]}"; do
    run "$t" &
    i=$((i + 1))
    if [ $((i % jobs)) -eq 0 ]; then wait; fi
done
wait
