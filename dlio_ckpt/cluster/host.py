"""This host and this process, as Linux tells them: the host's name and memory, what is still
available, this process's peak resident memory (which a sweep restarts at each point), the file
system a folder is on.

Why apart: the collectives (:mod:`dlio_ckpt.cluster.comm`) and the result files (:mod:`dlio_ckpt.results.summary`) both
need these facts and neither owns them; they read /proc, which is this module's one job.
"""

from __future__ import annotations

import os
import re
import resource
import socket
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def hostname() -> str:
    return socket.gethostname()


def host_memory() -> int:
    """This host's physical memory in bytes (what the page cache can hold at most)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def proc_bytes(path: str, field: str) -> int | None:
    """A ``field:   N kB`` line of a Linux /proc file, in bytes; None where there is none."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def available_memory() -> int:
    """Bytes this host can still give processes without swapping (Linux's MemAvailable)."""
    available = proc_bytes("/proc/meminfo", "MemAvailable")
    return available if available is not None else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def peak_rss() -> int:
    """This process's peak resident memory in bytes: Linux's VmHWM, which :func:`reset_peak_rss`
    can restart (so each sweep point reports its own), else getrusage's lifetime maximum."""
    peak = proc_bytes("/proc/self/status", "VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        pass


def on_nearest(path: str, call: Callable[[str], T]) -> T:
    """``call`` on ``path`` or, where it does not exist, its nearest existing parent. A parent removed between
    the look and the call is walked past: another process's probe may remove a folder it made (pretend hosts
    on one machine each probe their own folder under a parent that one of them made and removes)."""
    probe = os.path.abspath(path)
    while True:
        try:
            return call(probe)
        except FileNotFoundError:
            if probe == os.path.dirname(probe):
                raise
            probe = os.path.dirname(probe)


def file_system(path: str) -> dict[str, Any]:
    """The file system holding ``path`` (or its nearest existing parent): device, type, mount point,
    from the kernel's mount table, so two folders are on one file system exactly when devices match."""
    real, dev = on_nearest(path, lambda p: (os.path.realpath(p), os.stat(os.path.realpath(p)).st_dev))
    best: tuple[str, str, str] = ("/", "unknown", "unknown")
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fields, (fstype, source, *_) = left.split(), right.split()
                mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])  # \040 is a space
                if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best[0]):
                    best = (mount, fstype, source)
    except OSError:
        pass
    return {"path": str(path), "realpath": real, "device": f"{os.major(dev)}:{os.minor(dev)}",
            "type": best[1], "source": best[2], "mount_point": best[0]}


MEMORY_FILE_SYSTEMS = ("tmpfs", "ramfs")  # a folder there is host memory (/dev/shm): a memory tier


def in_memory(path: str) -> bool:
    """Whether ``path``'s file system keeps its files in this host's memory."""
    return file_system(path)["type"] in MEMORY_FILE_SYSTEMS
