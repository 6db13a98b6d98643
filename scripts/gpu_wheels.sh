#!/usr/bin/env bash
# Gather, into .whl/ (git-ignored through .git/info/exclude), the wheels the GPU machine lacks for
# scripts/gpu_check.sh: it has Python 3.12 with torch, cupy, cuFile, lightning, h5py and no network.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .git/info && { grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude; }
rm -rf .whl && mkdir .whl
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_34_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
  -d .whl hydra-core==1.3.2 omegaconf==2.3.0 pydantic==2.11.7 pydantic-core==2.33.2 annotated-types==0.7.0 \
  typing-inspection==0.4.1 kvikio-cu13==26.10.0 libkvikio-cu13==26.10.0 rapids-logger mpi4py==4.1.0 mpich==4.3.1
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
du -sh .whl; ls .whl
