"""fio as the yardstick: its fastest configuration on a folder, for ``tune`` and bench/fio_compare.py.

Why fio's best and not one fixed job: a storage team quotes what its storage does at its best
setting (an NVMe array wants many requests in flight, a network file system large ones), so a
checkpoint figure is worth reading only beside the best that fio, the tool they trust, found on the
same folder with the same bytes and processes. The grid spans the engines a Linux host offers
(psync: one request in flight per process; libaio and io_uring: up to 32) and request sizes of
1-32 MiB. Each engine and request size climbs its depths (1, 4, 16, 32) only while a deeper queue pays
(:data:`DEPTH_GAIN`) and the file has requests left to put in flight: a storage that wants many requests
gets the whole ladder, one that does not is spared the fio runs that would say so again.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GIB, MIB = 1 << 30, 1 << 20
ENGINES = {"psync": (1,), "libaio": (1, 4, 16, 32), "io_uring": (1, 4, 16, 32)}
BLOCK_SIZES = (1 * MIB, 4 * MIB, 8 * MIB, 32 * MIB)
OPS = ("write", "read")  # in this order: the writes lay out the files the reads read
# a deeper queue is tried only where the last one gained at least this much over the one before it: a smaller gain
# is within what two runs of one setting can differ by, and says the storage has enough requests in flight
DEPTH_GAIN = 1.10


@dataclass(frozen=True)
class FioJob:
    engine: str
    iodepth: int
    bs: int

    def __str__(self) -> str:
        return f"{self.engine} iodepth={self.iodepth} bs={self.bs // MIB} MiB"


def available() -> bool:
    return shutil.which("fio") is not None


def run(folder: str | Path, procs: int, size: int, op: str, job: FioJob, direct: bool, fsync: bool,
        seconds: int | None = None) -> float:
    """One fio job group: ``procs`` processes, a file of ``size`` bytes each (or what they move in
    ``seconds``); aggregate GiB/s.
    Buffered writes end with an fsync that fio counts in the job's time (``end_fsync``), as a save's
    time counts its fsyncs; buffered reads start with the files' cached pages dropped (``invalidate``)."""
    cmd = ["fio", "--name=ckpt", f"--directory={folder}", f"--rw={op}", f"--bs={job.bs}", f"--size={size}",
           f"--numjobs={procs}", f"--ioengine={job.engine}", f"--iodepth={job.iodepth}", "--group_reporting",
           "--output-format=json", f"--direct={int(direct)}", "--invalidate=1",
           f"--end_fsync={int(fsync and op == 'write')}", *([f"--runtime={seconds}"] if seconds else [])]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"fio failed ({shlex.join(cmd)}): {done.stderr.strip() or done.stdout.strip()}")
    res = json.loads(done.stdout)
    stats = res["jobs"][0][op]
    return stats["io_bytes"] / (stats["runtime"] / 1000) / GIB


def ladders(size: int) -> list[list[FioJob]]:
    """The configurations that may be tried on files of ``size`` bytes, per engine and request size (fio refuses
    a request larger than the file), each its depths shallowest first, up to the first at which a file's every
    request can be in flight (a deeper queue has no more requests to hold)."""
    out = []
    for engine, depths in ENGINES.items():
        for bs in (b for b in BLOCK_SIZES if b <= size):
            rungs = []
            for depth in depths:
                rungs.append(FioJob(engine, depth, bs))
                if depth * bs >= size:
                    break
            out.append(rungs)
    return out


def grid(size: int) -> list[FioJob]:
    """Every configuration that may be tried on files of ``size`` bytes: the most :func:`best` runs (before its
    finalists run again)."""
    return [job for rungs in ladders(size) for job in rungs]


def best(folder: str | Path, procs: int, size: int, direct: bool, fsync: bool, seconds: int | None = None,
         say: Callable[[str], None] = lambda _line: None, finalists: int = 4,
         again: int = 2) -> dict[str, tuple[float, FioJob]]:
    """fio's fastest configuration per direction in ``folder`` (created, emptied of fio's files
    after): op -> (GiB/s, job); each point at most ``seconds``. One pass over the grid, each engine and
    request size climbing its depths (:func:`ladders`) while a deeper queue is :data:`DEPTH_GAIN` faster than
    the one before; then the ``finalists`` fastest run ``again`` times more and ranked by their median: a
    single pass on a noisy disk crowns whichever point met a quiet moment. ``say`` hears every point."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, tuple[float, FioJob]] = {}
    try:
        for op in OPS:
            speeds: dict[FioJob, list[float]] = {}
            for rungs in ladders(size):
                below = 0.0
                for job in rungs:
                    if op == "write":  # into new files: an overwrite finds the pages of the last point cached
                        remove_files(folder, procs)
                    speeds[job] = [run(folder, procs, size, op, job, direct, fsync, seconds)]
                    say(f"fio {op:5s} {job}: {speeds[job][0]:.3f} GiB/s")
                    if below and speeds[job][0] < below * DEPTH_GAIN:
                        break  # deeper did not pay: no deeper still
                    below = speeds[job][0]
            top = sorted(speeds, key=lambda j: speeds[j][0], reverse=True)[:finalists]
            for _ in range(again):
                for job in top:
                    if op == "write":
                        remove_files(folder, procs)
                    speeds[job].append(run(folder, procs, size, op, job, direct, fsync, seconds))
            for job in top:
                say(f"fio {op:5s} {job}: finalist, median {statistics.median(speeds[job]):.3f} GiB/s of "
                    f"{', '.join(f'{v:.3f}' for v in speeds[job])}")
            winner = max(top, key=lambda j: statistics.median(speeds[j]))
            out[op] = (statistics.median(speeds[winner]), winner)
    finally:
        remove_files(folder, procs)
    return out


def remove_files(folder: str | Path, procs: int) -> None:
    """fio's files of a job named ckpt (ckpt.<job>.0), and nothing else."""
    for i in range(procs):
        try:
            os.remove(Path(folder) / f"ckpt.{i}.0")
        except FileNotFoundError:
            pass
