#!/usr/bin/env bash
# Create .venv with everything dlio_ckpt and its tests need (from Debian: fio for the benchmark and
# tune's yardstick, strace for the tests that watch the reference presets' system calls, zstd for the tests that
# hold the synthetic bytes to what a compressing storage finds).
set -euo pipefail
cd "$(dirname "$0")/.."
# and util-linux's unshare and mount, hostname: scripts/pretend_host, which the hosts tests launch through;
# fincore (util-linux-extra on Debian 12): the test that the engine's eviction leaves no page cached
missing=$(for pair in fio:fio strace:strace zstd:zstd unshare:util-linux fincore:util-linux-extra mount:mount \
  hostname:hostname; do
  command -v "${pair%%:*}" >/dev/null || echo "${pair#*:}"; done)
# a fresh Debian's Python has no venv module until python3-venv is installed
python3 -c 'import ensurepip' 2>/dev/null || missing="$missing python3-venv"
if command -v apt-get >/dev/null && [ -n "$missing" ]; then
  # shellcheck disable=SC2086
  (apt-get update -qq && apt-get install -y -qq $missing >/dev/null) || echo "note: not installed: $missing"
fi
# lightning.checkpoint_io=dataflux: its own environment (requirements-dataflux.txt says why), built beside
# the main one (each pip mostly unpacks wheels: two at once use both cores)
dataflux_log=$(mktemp)
(
  set -e
  python3.11 -m venv .venv-dataflux 2>/dev/null || python3 -m venv .venv-dataflux
  .venv-dataflux/bin/python -m pip install -q --upgrade pip
  .venv-dataflux/bin/python -m pip install -q torch==2.13.0
  .venv-dataflux/bin/python -m pip install -q -r requirements-dataflux.txt
) > "$dataflux_log" 2>&1 &
dataflux=$!
python3.11 -m venv .venv 2>/dev/null || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first: s3torchconnector depends on it, and only 2.13.0 is a local CPU wheel here (any other
# version downloads gigabytes of CUDA packages)
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -r requirements.txt -r requirements-docs.txt
# the oracle of checkpoint.layout=megatron (tests only): megatron-core 0.16.1, the newest for Python 3.11;
# --no-deps, its imports (torch, numpy, packaging, psutil) are already here
.venv/bin/python -m pip install -q --no-deps megatron-core==0.16.1
.venv/bin/python -m pip install -q --no-deps -e .
# the second environment's packages are in by now; dlio_ckpt itself is installed into each in turn (an editable
# install builds in this folder)
wait "$dataflux" || { cat "$dataflux_log"; exit 1; }
rm -f "$dataflux_log"
.venv-dataflux/bin/python -m pip install -q --no-deps -e .
