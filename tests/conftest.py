"""Shared helpers: run the CLI as a user does, in a temporary folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"  # the venv's MPICH; a Debian mpiexec on PATH belongs to another MPI


def dlio(args: list[str], cwd: Path, nprocs: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "dlio_ckpt", *args]
    if nprocs is not None:
        if not MPIEXEC.exists():
            pytest.skip("mpiexec from the mpich wheel is not installed in this environment")
        cmd = [str(MPIEXEC), "-n", str(nprocs), *cmd]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)



def load(path: Path) -> dict:
    return json.loads(path.read_text())
