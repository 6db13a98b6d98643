#!/usr/bin/env bash
# A venv of its own with upstream DLIO v2.0.1 (argonne-lcf/dlio_benchmark b56c741), the real tool that
# bench/references.py runs beside checkpoint.reference=dlio-2.0. Not the project's venv: DLIO imports
# TensorFlow (its profiler factory) and pins its own stack. The versions are those of the DLIO run kept
# as test data (tests/data/dlio_run/SOURCE.md).
#   bash scripts/dlio_reference_env.sh VENV DLIO_SOURCE
# DLIO_SOURCE: a folder or archive of that commit (git archive b56c741 from a clone of the repository).
set -euo pipefail
venv=${1:?usage: dlio_reference_env.sh VENV DLIO_SOURCE}
src=${2:?usage: dlio_reference_env.sh VENV DLIO_SOURCE}
python3.11 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q torch==2.13.0  # the local CPU wheel, first (see requirements.txt)
"$venv/bin/python" -m pip install -q tensorflow-cpu==2.21.0 mpi4py==4.1.2 mpich==5.0.2 hydra-core==1.3.2 \
    omegaconf==2.3.1 numpy==2.4.6 pandas==3.1.1 psutil==7.2.2 PyYAML==6.0.3 h5py==3.14.0 pillow==13.0.0 \
    pydftracer==2.0.6
"$venv/bin/python" -m pip install -q --no-deps "$src"
"$venv/bin/python" -c "import dlio_benchmark.main" && echo "DLIO ready in $venv"
