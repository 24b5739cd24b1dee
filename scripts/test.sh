#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian 12 machine, then run them.
# Used by the README's test command and by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

# Nsight Systems 2022.4 from Debian (non-free; its libcuda dependency lives in contrib):
# the reference our numbers are compared against, and the CPU NVTX recorder.
if ! command -v nsys >/dev/null 2>&1; then
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: contrib non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    | $SUDO tee /etc/apt/sources.list.d/profiler-kit-nonfree.sources >/dev/null
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends nsight-systems >/dev/null
fi

# torch pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build);
# triton for the FlashAttention kernels under TRITON_INTERPRET=1; nvtx 0.2.8 is the
# newest release whose ranges nsys 2022.4 records.
# A Python that refuses pip outside a virtual environment (Debian 12's own, PEP 668) gets one in .venv.
PY=python3
if python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
  python3 -m venv .venv 2>/dev/null || { $SUDO apt-get install -y -q python3-venv >/dev/null && python3 -m venv .venv; }
  PY=.venv/bin/python
fi
$PY -m pip install -q torch==2.13.0 triton==3.6.0 nvtx==0.2.8
$PY -m pip install -q -e ".[test]"

$PY -m pytest -q -p no:cacheprovider "$@"
