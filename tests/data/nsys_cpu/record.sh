#!/usr/bin/env bash
# Re-record the CPU NVTX fixture and its nsys stats reference CSVs (needs Debian's nsys 2022.4 and nvtx==0.2.8).
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
nsys profile -t nvtx --sample=none --cpuctxsw=none -o "$tmp/cpu_nvtx" -f true python make_fixture.py >/dev/null 2>&1
[ -f "$tmp/cpu_nvtx.nsys-rep" ] || /usr/lib/nsight-systems/host-linux-x64/QdstrmImporter -i "$tmp/cpu_nvtx.qdstrm" >/dev/null 2>&1
nsys export --type sqlite -f true -o cpu_nvtx.sqlite "$tmp/cpu_nvtx.nsys-rep" >/dev/null 2>&1
for r in nvtxsum; do
  nsys stats -q --report $r --format csv --force-export false -o "ref" cpu_nvtx.sqlite >/dev/null 2>&1 || true
done
rm -rf "$tmp"
