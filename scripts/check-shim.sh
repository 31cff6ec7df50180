#!/usr/bin/env bash
# Type-checks the C++ shim (shim/hefprobe_shim.cpp) against a HailoRT source tree, without a
# HailoRT installation or a device: g++ -std=c++17 -fsyntax-only with the tree's public headers.
#
# Usage: scripts/check-shim.sh /path/to/hailort-source-tree
#   The tree is a checkout (or `git archive`) of github.com/hailo-ai/hailort; either its root
#   or its hailort/ subdirectory. The public headers live in
#   hailort/libhailort/include/hailo/*.{h,hpp} and include each other as <hailo/...>, so that
#   include directory is the only -I needed (the same role as /usr/include for an installed
#   HailoRT; see HAILORT_INCLUDE_DIR in build.rs).
# Environment: CXX (default g++), EXTRA_CXXFLAGS (appended).
# Exit status: 0 if the shim type-checks, 1 if it does not, 2 on usage errors.
set -euo pipefail

usage() {
    echo "usage: $0 /path/to/hailort-source-tree" >&2
    exit 2
}
[[ $# -eq 1 ]] || usage

tree=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
shim="$repo/shim/hefprobe_shim.cpp"
cxx=${CXX:-g++}

include=""
for candidate in "$tree/hailort/libhailort/include" "$tree/libhailort/include"; do
    if [[ -f "$candidate/hailo/hailort.hpp" ]]; then
        include=$candidate
        break
    fi
done
if [[ -z "$include" ]]; then
    echo "check-shim: no hailort/libhailort/include/hailo/hailort.hpp under $tree" >&2
    echo "check-shim: pass the root of a hailo-ai/hailort checkout (or its hailort/ directory)" >&2
    exit 2
fi
[[ -f "$shim" ]] || { echo "check-shim: $shim not found" >&2; exit 2; }
command -v "$cxx" >/dev/null || { echo "check-shim: compiler $cxx not found" >&2; exit 2; }

# The version the tree declares (CMake variables; the headers carry no version macros).
cmake="$include/../CMakeLists.txt"
version=unknown
if [[ -f "$cmake" ]]; then
    major=$(sed -n 's/^set(HAILORT_MAJOR_VERSION *\([0-9]*\))/\1/p' "$cmake")
    minor=$(sed -n 's/^set(HAILORT_MINOR_VERSION *\([0-9]*\))/\1/p' "$cmake")
    revision=$(sed -n 's/^set(HAILORT_REVISION_VERSION *\([0-9]*\))/\1/p' "$cmake")
    [[ -n "$major" ]] && version="$major.$minor.$revision"
fi

cmd=("$cxx" -std=c++17 -fsyntax-only -Wall -Wextra -Werror
     -I "$repo/shim" -I "$include" ${EXTRA_CXXFLAGS:-} "$shim")
echo "check-shim: HailoRT headers $include (version $version)"
echo "check-shim: ${cmd[*]}"
if "${cmd[@]}"; then
    echo "check-shim: OK - shim/hefprobe_shim.cpp type-checks against HailoRT $version"
else
    echo "check-shim: FAILED - shim/hefprobe_shim.cpp does not type-check against HailoRT $version" >&2
    exit 1
fi
