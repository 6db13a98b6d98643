"""Temporary files this process is writing right now, so the failure path can remove them.

Why: small files (manifests, markers, run records, result files) are written under a temporary name
and renamed, so a reader sees all or nothing. A job ended by SIGINT, SIGTERM or a stall leaves through
``MPI_Abort`` or ``os._exit`` from a signal handler or another thread, where no ``finally`` runs: the
temporary file would stay behind (``global_epoch1_step3.manifest.json.tmp4242``), beside files the
user keeps. The failure path removes what is registered here before the process ends.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.RLock()  # re-entered by a signal handler that interrupts its holder
_paths: set[str] = set()


@contextmanager
def temporary(path: str) -> Iterator[str]:
    """``path`` is being written under this name until the block ends (renamed or failed): removed
    on failure, and by :func:`remove_all` if the process is ended meanwhile."""
    with _lock:
        _paths.add(path)
    try:
        yield path
    except BaseException:
        _remove(path)
        raise
    finally:
        with _lock:
            _paths.discard(path)


def remove_all() -> None:
    """Every temporary file still being written (the failure path, just before the process ends)."""
    with _lock:
        paths = list(_paths)
    for path in paths:
        _remove(path)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass  # renamed already, or never created
