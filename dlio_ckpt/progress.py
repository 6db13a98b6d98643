"""Rank 0's progress through the current checkpoint: a bar on a terminal, plain lines in a log.

Why rank 0's share: every process writes its own files and only rank 0 prints; its share of a
checkpoint moves at the pace of the others (they start at the same barrier), so its bytes, rate and
time left say how the checkpoint is going without a collective per chunk. On a terminal rich draws
a bar (bytes, rate, time left) that disappears when the checkpoint ends; when output is a file or
a pipe (batch jobs, CI) a line is logged every ``checkpoint.progress_interval`` seconds instead.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
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


def line(label: str, done: int, total: int, elapsed: float) -> str:
    """``save_ckpt3: 4.20/12.30 GiB (34%) at 1.25 GiB/s, ~7 s left (rank 0's files)``."""
    rate = done / elapsed if elapsed > 0 else 0.0
    left = f"~{(total - done) / rate:.0f} s left" if rate > 0 else "time left unknown"
    pct = 100 * done / total if total else 100.0
    return (f"{label}: {done / GIB:.2f}/{total / GIB:.2f} GiB ({pct:.0f}%) at {rate / GIB:.2f} GiB/s, "
            f"{left} (rank 0's files)")


class ProgressBar:
    """rich's bar with bytes, rate and time left; removed when the checkpoint ends."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._task: Any = None

    def start(self, label: str, total: int) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                             TransferSpeedColumn(), TimeRemainingColumn(), transient=True, redirect_stdout=False,
                             redirect_stderr=False)
        self._task = self._bar.add_task(f"{label} (rank 0)", total=total)
        self._bar.start()

    def advance(self, nbytes: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, nbytes)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def progress_display(enabled: bool, interval: float = 10.0) -> ProgressDisplay:
    """A bar on a terminal where rich is installed (the ``progress`` extra), log lines otherwise."""
    if not enabled:
        return NoProgress()
    return ProgressBar() if sys.stdout.isatty() and find_spec("rich") else ProgressLines(interval)
