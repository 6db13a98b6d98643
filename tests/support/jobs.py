"""MPI jobs started in the background (:func:`start`), for a test to signal, kill or cut off mid-run, and
to see how the job ended (:func:`ended`: its status, its message, and how long it took after the fault)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support import REPO
from tests.support.cli import MPIEXEC, load


def start(args: list[str], cwd: Path, nprocs: int = 2, env: dict | None = None) -> subprocess.Popen:
    cmd = [str(MPIEXEC), "-n", str(nprocs), sys.executable, "-m", "dlio_ckpt", *args]
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)})


def wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)


def ended(proc: subprocess.Popen, limit: float) -> tuple[int, str, float]:
    """Wait for the job; return its status, stderr, and seconds from now to its end."""
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=limit + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the job did not end within {limit + 30} s") from None
    took = time.monotonic() - t0
    print(f"job ended {took:.2f} s after the fault")
    assert took < limit, f"took {took:.1f} s to end"
    return proc.returncode, err, took


def no_ok_summary(out: Path) -> dict | None:
    path = out / "summary.json"
    if not path.exists():
        return None
    summary = load(path)
    assert summary["status"] == "failed", summary
    return summary


def rank_pid(proc: subprocess.Popen, rank: int) -> int:
    """The pid of one MPI rank of a job started by :func:`start` (from PMI_RANK in its environment)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"dlio_ckpt" in cmdline and f"PMI_RANK={rank}".encode() in env and \
                b"PMI_SIZE=" in b"".join(env) and str(proc.pid) != entry.name and _descends(int(entry.name), proc.pid):
            return int(entry.name)
    raise AssertionError(f"rank {rank} not found")


def _descends(pid: int, ancestor: int) -> bool:
    """Whether ``pid`` is a child, grandchild... of ``ancestor`` (not a rank of another job on the machine)."""
    while pid > 1:
        try:
            pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
    return False
