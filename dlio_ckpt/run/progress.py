"""Rank 0's progress through the current checkpoint: a bar on a terminal, plain lines in a log.

Why rank 0's share: every process writes its own files and only rank 0 prints; its share of a
checkpoint moves at the pace of the others (they start at the same barrier), so its bytes, rate and
time left say how the checkpoint is going without a collective per chunk. On a terminal rich draws
a bar (bytes, rate, time left) that disappears when the checkpoint ends; when output is a file or
a pipe (batch jobs, CI) a line is logged every ``checkpoint.progress_interval`` seconds instead.

What is counted (:class:`PlannedBytes`): each file's bytes the checkpoint plans to move, once. The engine tells
every byte it moves, and a load moves some twice or more (``torch.load``'s reads of an archive go back over its
headers, a span under O_DIRECT is widened to whole blocks, an S3 client reads the gaps between items): counted
as told, the total was passed (a resharded load at a small scale read "134 %, ~-5 s left").
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterable
from importlib.util import find_spec
from typing import Any, Protocol

log = logging.getLogger("dlio_ckpt")
GIB = 1 << 30


class ProgressDisplay(Protocol):
    def start(self, label: str, total: int) -> None: ...
    def advance(self, nbytes: int) -> None: ...
    def stop(self) -> None: ...


class NoProgress:
    def start(self, label: str, total: int) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass

    def stop(self) -> None:
        pass


class ProgressLines:
    """A log line every ``interval`` seconds while a checkpoint is under way."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._label, self._total, self._done, self._t0, self._next = "", 0, 0, 0.0, 0.0

    def start(self, label: str, total: int) -> None:
        self._label, self._total, self._done = label, total, 0
        self._t0 = time.monotonic()
        self._next = self._t0 + self.interval

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self._done += nbytes
            now = time.monotonic()
            if now < self._next:
                return
            self._next = now + self.interval
        log.info("%s", line(self._label, self._done, self._total, now - self._t0))

    def stop(self) -> None:
        pass


class PlannedBytes:
    """A checkpoint's progress over its files' planned bytes: ``start`` is given each file's bytes (a file several
    loading ranks read, once per rank), and an ``advance`` counts toward its file's bytes no more than are left of
    them, so the display's total is what the checkpoint reads or writes and never passed: the bar ends at 100 %, and
    the time left is never negative. A file not planned (a coordinator's, written after the data) is not counted."""

    def __init__(self, display: ProgressDisplay) -> None:
        self.display = display
        self._lock = threading.Lock()
        self._left: dict[str, int] = {}

    def start(self, label: str, planned: Iterable[tuple[str, int]]) -> None:
        left: dict[str, int] = {}
        for path, nbytes in planned:
            left[path] = left.get(path, 0) + nbytes
        with self._lock:
            self._left = left
        self.display.start(label, sum(left.values()))

    def advance(self, path: str, nbytes: int) -> None:
        with self._lock:
            counted = min(nbytes, self._left.get(path, 0))
            if counted:
                self._left[path] -= counted
        if counted:
            self.display.advance(counted)

    def stop(self) -> None:
        with self._lock:
            self._left = {}  # what a file moves after its checkpoint (a drain, a late thread) is not this one's
        self.display.stop()


def line(label: str, done: int, total: int, elapsed: float) -> str:
    """``save_ckpt3: 4.20/12.30 GiB (34%) at 1.25 GiB/s, ~7 s left (rank 0's files)``."""
    rate = done / elapsed if elapsed > 0 else 0.0
    left = f"~{(total - done) / rate:.0f} s left" if rate > 0 else "time left unknown"
    pct = 100 * done / total if total else 100.0
    return (f"{label}: {done / GIB:.2f}/{total / GIB:.2f} GiB ({pct:.0f}%) at {rate / GIB:.2f} GiB/s, "
            f"{left} (rank 0's files)")


class ProgressBar:
    """rich's bar with bytes, rate and time left; removed when the checkpoint ends. ``terminal``: the
    terminal a launcher forwards our output to (then rich is told it draws on one)."""

    def __init__(self, terminal: str | None = None) -> None:
        self._bar: Any = None
        self._task: Any = None
        self._terminal = terminal

    def start(self, label: str, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        console = Console(force_terminal=True, width=_width(self._terminal)) if self._terminal else None
        # GiB and GiB/s, as the log lines and summary.json say them (rich's own rate column is in MB/s)
        rate = TextColumn("{task.fields[rate]}")
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                             rate, TimeRemainingColumn(), transient=True, redirect_stdout=False, redirect_stderr=False,
                             console=console)
        self._task = self._bar.add_task(f"{label} (rank 0)", total=total, rate="")
        self._bar.start()

    def advance(self, nbytes: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, nbytes)
            speed = self._bar.tasks[0].speed
            self._bar.update(self._task, rate=f"{speed / GIB:.2f} GiB/s" if speed else "")

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def progress_display(enabled: bool, interval: float = 10.0) -> ProgressDisplay:
    """A bar on a terminal where rich is installed (the ``progress`` extra), log lines otherwise. Under
    mpiexec or srun our stdout is a pipe to the launcher, which forwards it to the user's terminal:
    the bar is drawn when the launcher's own output is a terminal."""
    if not enabled or not find_spec("rich"):
        return ProgressLines(interval) if enabled else NoProgress()
    if sys.stdout.isatty():
        return ProgressBar()
    terminal = launcher_terminal()
    return ProgressBar(terminal) if terminal else ProgressLines(interval)


LAUNCHERS = {"mpiexec", "mpiexec.hydra", "mpirun", "hydra_pmi_proxy", "srun", "slurmstepd", "prterun", "prted",
             "orted", "torchrun"}


def launcher_terminal(pid: int | None = None) -> str | None:
    """The terminal behind the launcher processes this process runs under (their standard output),
    found through /proc; None when there is none (a batch job, CI, a file, no launcher)."""
    pid = os.getppid() if pid is None else pid
    while pid > 1:
        try:
            with open(f"/proc/{pid}/comm") as fh:
                name = fh.read().strip()
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                launcher = name in LAUNCHERS or b"torchrun" in fh.read()  # torchrun's process is python
            out = os.readlink(f"/proc/{pid}/fd/1")
            with open(f"/proc/{pid}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if not launcher:
            return None
        if out.startswith(("/dev/pts/", "/dev/tty")):
            return out
        pid = parent
    return None


def _width(terminal: str) -> int:
    """The launcher's terminal's width (rich cannot ask a pipe), 100 where it cannot be read."""
    try:
        fd = os.open(terminal, os.O_RDONLY | os.O_NOCTTY)
        try:
            columns = os.get_terminal_size(fd).columns
            return columns if columns >= 40 else 100  # a terminal that was never sized says 0
        finally:
            os.close(fd)
    except OSError:
        return 100
