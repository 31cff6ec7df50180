#!/usr/bin/env bash
# Check the Debian packages .ci/run builds (`cargo deb`): each holds the binary, the probe
# catalog where hefprobe looks for it and the findings' records (`explain --pattern`), the
# README with every file its relative links name and the guides' and reports' own (under
# /usr/share/doc/hefprobe), a changelog, and names a Maintainer with an address; and each
# package's binary, unpacked outside any checkout, runs a probe by name from that catalog
# (the arm64 one under qemu-aarch64).
#
#   scripts/check-debs.sh hefprobe_*_amd64.deb hefprobe_*_arm64.deb
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 PACKAGE.deb..." >&2; exit 2; }
for deb in "$@"; do
  echo "== $deb"
  contents="$(dpkg-deb -c "$deb")"
  for want in ./usr/bin/hefprobe ./usr/share/hefprobe/probes/shared-softmax.toml \
              ./usr/share/hefprobe/probes/findings/16.toml ./usr/share/doc/hefprobe/README.md \
              ./usr/share/doc/hefprobe/changelog.Debian.gz ./usr/share/doc/hefprobe/copyright; do
    grep -q " $want\$" <<<"$contents" || { echo "error: $deb lacks $want" >&2; exit 1; }
  done
  maintainer="$(dpkg-deb -f "$deb" Maintainer)"
  [[ "$maintainer" =~ ^[^\<]+\ \<[^@\>]+@[^\>]+\>$ ]] || { echo "error: $deb: Maintainer \`$maintainer\` has no address" >&2; exit 1; }
  probes_here="$(ls "$(dirname "$0")/../probes"/*.toml "$(dirname "$0")/../probes"/findings/*.toml | wc -l)"
  probes_in="$(grep -c ' ./usr/share/hefprobe/probes/.*\.toml$' <<<"$contents")"
  [ "$probes_in" = "$probes_here" ] || { echo "error: $deb holds $probes_in probe and finding files, the repository $probes_here" >&2; exit 1; }
  arch="$(dpkg-deb -f "$deb" Architecture)"
  root="$(mktemp -d)"
  dpkg-deb -x "$deb" "$root"
  # Every relative link of the packaged README, guides and reports names a file of the package.
  doc="$root/usr/share/doc/hefprobe"
  links=0
  while IFS= read -r page; do
    while IFS= read -r link; do
      target="${link%%#*}"
      [ -n "$target" ] || continue
      links=$((links + 1))
      [ -e "$(dirname "$page")/$target" ] || { echo "error: $deb: ${page#"$root"} links $target, which the package does not install" >&2; exit 1; }
    done < <(grep -o '](\([^)]*\))' "$page" | sed 's/^](\(.*\))$/\1/' | grep -v -E '^(https?:|mailto:|#)')
  done < <(find "$doc" -name '*.md')
  run=("$root/usr/bin/hefprobe")
  [ "$arch" = arm64 ] && [ "$(uname -m)" != aarch64 ] && run=(qemu-aarch64 -L /usr/aarch64-linux-gnu "${run[@]}")
  # Read whole, then searched: `grep -q` leaves at the first match and the binary's next line
  # then meets a closed pipe, which hefprobe ends with 141 (console.rs), failing the pipeline.
  usage="$("${run[@]}" --help)"
  grep -q '^Usage: hefprobe' <<<"$usage" || { echo "error: $arch binary: no usage" >&2; exit 1; }
  # Outside any checkout: `shared-softmax` is found in the package's own catalog.
  set +e
  out="$(cd "$root" && "${run[@]}" run shared-softmax --no-explain 2>&1)"
  code=$?
  set -e
  rm -rf "$root"
  if [ "$code" != 1 ] || ! grep -q 'first drift at layers.0.attn.probs' <<<"$out"; then
    echo "error: $arch binary: run shared-softmax exited $code:" >&2
    echo "$out" | tail -20 >&2
    exit 1
  fi
  echo "$arch: $(wc -l <<<"$contents") entries, $probes_in probes, $links relative links of the docs resolved; run shared-softmax from the catalog: exit 1, drift located"
done
