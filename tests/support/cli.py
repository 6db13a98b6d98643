"""The tool's command line, run as a user runs it (a process: ``python -m dlio_ckpt``, under mpiexec, at a
terminal) or in this process (:func:`run_here`: no interpreter or Hydra start to wait for, where a process
adds nothing: bad input, read-only commands)."""

from __future__ import annotations

import json
import logging
import os
import pty
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"  # the venv's MPICH; a Debian mpiexec on PATH belongs to another MPI


def dlio(args: list[str], cwd: Path, nprocs: int | None = None, timeout: float = 120,
         env: dict | None = None, python: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m dlio_ckpt ARGS`` as a user runs it (``python``: another environment's interpreter)."""
    cmd = [str(python or sys.executable), "-m", "dlio_ckpt", *args]
    if nprocs is not None:
        if not MPIEXEC.exists():
            pytest.skip("mpiexec from the mpich wheel is not installed in this environment")
        cmd = [str(MPIEXEC), "-n", str(nprocs), *cmd]
    extra = env or {}  # a PYTHONPATH given here (the GPU stand-ins) goes before the repository
    paths = [p for p in (extra.get("PYTHONPATH"), str(REPO)) if p]
    env = {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def in_a_terminal(cmd: list[str], cwd) -> tuple[int, str]:
    """Run ``cmd`` with a pseudo-terminal as its output, as a user at a shell does."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=cwd,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm"})
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the terminal closed: the job ended
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), out.decode(errors="replace")


def run_here(args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``dlio_ckpt ARGS`` in this process, in ``cwd``, as a world of one (no MPI in the test's process), with
    ``env`` added to the environment: its exit status (argparse's errors, --help and --version exit by SystemExit)
    and what it wrote to stdout and stderr, as :func:`dlio` returns them. What a run installs for itself (its
    signal handlers, its log's handlers) is taken back afterwards, and the environment by ``monkeypatch``."""
    from dlio_ckpt.cli import main as cli
    from dlio_ckpt.cluster.comm import SelfComm
    from dlio_ckpt.run import failure

    assert "PYTHONPATH" not in (env or {}), "a PYTHONPATH needs a process of its own: use dlio()"
    capfd.readouterr()  # only this command's output
    monkeypatch.chdir(cwd)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(cli, "get_comm", SelfComm)
    # A failing rank pauses before it aborts, so that mpiexec forwards its message before the job is torn down; a
    # world of one in this process has no mpiexec to wait for (SelfComm's abort is a SystemExit), so the pause is
    # skipped here: 0.5 s of sleep per failing run (57 in test_fault_matrix.py alone). Its message, summary and exit
    # status are the same; the pause is walked by every failing run under mpiexec (tests/e2e/test_faults.py).
    monkeypatch.setattr(failure, "_let_output_drain", lambda: None)
    monkeypatch.setattr(sys, "argv", ["dlio_ckpt", *args])  # what a run records as its command
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = cli.main(list(args))
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        log = logging.getLogger("dlio_ckpt")
        for handler in list(log.handlers):
            log.removeHandler(handler)
            handler.close()
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["dlio_ckpt", *args], code, out, err)


def load(path: Path) -> dict:
    return json.loads(path.read_text())
