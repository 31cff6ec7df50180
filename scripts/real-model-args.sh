# Sourced by the scripts that run on the real SmolLM2 (scripts/hef-real-weights.sh,
# scripts/explain-real-weights.sh) with their arguments: checks the one argument DIR holds the
# GGUF scripts/fetch-real-models.sh fetches, and sets GGUF, dir (absolute), repo and HEFPROBE
# (given, or the release binary, built here).
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
[ $# -eq 1 ] || { echo "usage: $0 DIR   (DIR holds $GGUF; scripts/fetch-real-models.sh)" >&2; exit 2; }
dir="$(cd "$1" && pwd)"
repo="$(cd "$(dirname "$0")/.." && pwd)"
[ -f "$dir/$GGUF" ] || { echo "error: $dir/$GGUF missing; run scripts/fetch-real-models.sh $dir" >&2; exit 2; }
if [ -z "${HEFPROBE:-}" ]; then
  (cd "$repo" && cargo build --release --quiet)
  HEFPROBE="$repo/target/release/hefprobe"
fi
