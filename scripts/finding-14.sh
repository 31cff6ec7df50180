#!/bin/sh
# reports/finding-14.md and .svg: `explain --pattern probes/findings/14.toml` with the real
# SmolLM2-135M given (no observation of finding 14 has its shape, so each runs on a synthesized
# stand-in of its own: Qwen2.5-0.5B's 896 wide with five shards, TinyStories-25M, tinyllama-15M),
# and the deciding experiment. Needs the GGUF scripts/fetch-real-models.sh fetches:
#
#     scripts/finding-14.sh DIR        (from the repository root; HEFPROBE=BIN to use a built binary)
#
# The checkpoint is reached through a link under target/regen so that the report records a path
# inside the repository, not this machine's. Takes about 50 s on 2 cores (its explain prints the time).
set -eu
. "$(dirname "$0")/real-model-args.sh"
cd "$repo"
mkdir -p target/regen
ln -sf "$dir/$GGUF" "target/regen/$GGUF"
"$HEFPROBE" explain --pattern probes/findings/14.toml --checkpoint "target/regen/$GGUF" \
    --report markdown=reports/finding-14.md --report svg=reports/finding-14.svg
