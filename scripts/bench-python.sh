#!/usr/bin/env bash
# `compare` of two 1024-token all-tap captures, from the command line and from the Python module,
# side by side in one run: wall time and peak RSS of each, three rounds, and their ratios
# (issue: Python within 1.2x of the CLI on both).
#
# Usage: scripts/bench-python.sh [PROFILE]
#   PROFILE: release (default) or dev (reuses the build `cargo test` made; the same code on both
#   sides, so the ratio still says what the binding costs).
# Needs python3 with venv; installs maturin and numpy into a venv outside the repository
# ($HEFPROBE_BENCH_VENV, default a new temporary one).
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-release}"
case "$profile" in
  release) out=release ;;
  dev) out=debug ;;
  *) echo "bench-python: PROFILE is release or dev, not $profile" >&2; exit 2 ;;
esac
[ -x /usr/bin/time ] || { echo "bench-python: needs GNU time (/usr/bin/time, Debian package time)" >&2; exit 2; }
venv="${HEFPROBE_BENCH_VENV:-$(mktemp -d)/venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q "maturin>=1.8,<2" numpy
cargo build -q --profile "$profile"
bin="target/$out/hefprobe"
wheels="$(mktemp -d)"
(cd python && "$venv/bin/maturin" build -q --profile "$profile" --out "$wheels" -i "$venv/bin/python")
"$venv/bin/pip" install -q --force-reinstall --no-deps "$wheels"/hefprobe-*.whl

work="$(mktemp -d)"
trap 'rm -rf "$work" "$wheels"' EXIT
tokens="$(python3 -c "print(','.join(str((i * 7919) % 32000) for i in range(1024)))")"
# TinyStories' dims with 4096 positions (the preset stops at 256): two seeds, two captures.
for seed in 0 1; do
  "$bin" synth --arch llama --hidden 288 --layers 6 --heads 6 --kv-heads 6 --vocab 32000 --seed "$seed" \
    -o "$work/ck$seed" >/dev/null
  "$bin" reference --checkpoint "$work/ck$seed" --tokens "$tokens" -o "$work/$seed.npz" >/dev/null
done
mv "$work/0.npz" "$work/a.npz"; mv "$work/1.npz" "$work/b.npz"
echo "captures: 1024 tokens, every tap, $(du -h "$work/a.npz" | cut -f1) each (tinystories dims, 6 layers)"

measure() { # prints "seconds peak_kib"
  /usr/bin/time -f "%e %M" -o "$work/t" "$@" >/dev/null 2>&1 || true
  tail -n 1 "$work/t"   # GNU time puts "Command exited with non-zero status" first (drift is exit 1)
}
printf '%-6s %10s %10s %12s %12s %8s %8s\n' round cli_s py_s cli_MiB py_MiB time_x rss_x
for round in 1 2 3; do
  read -r cs ck < <(measure "$bin" compare "$work/a.npz" "$work/b.npz" --report "json=$work/r.json")
  read -r ps pk < <(measure "$venv/bin/python" -c \
    "import hefprobe, sys; hefprobe.compare(sys.argv[1], sys.argv[2]).to_json()" "$work/a.npz" "$work/b.npz")
  python3 -c "
cs, ps, ck, pk = $cs, $ps, $ck, $pk
print(f'{$round:<6} {cs:10.2f} {ps:10.2f} {ck / 1024:12.1f} {pk / 1024:12.1f} {ps / cs:8.2f} {pk / ck:8.2f}')"
done
