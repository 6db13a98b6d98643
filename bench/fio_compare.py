#!/usr/bin/env python3
"""dlio_ckpt against fio's best configuration on the same folder: writes and verified reads.

1. Search: fio's grid on the folder (dlio_ckpt/tools/drivers/fio.py: psync, libaio and io_uring at depths up
   to 32, going deeper only while it pays, request sizes 1-32 MiB), per mode and direction, a short run
   each (``--search-gib`` per process). The fastest point is fio's best configuration.
2. Rounds: dlio_ckpt (one run: a save, then a load with every byte compared) against fio's best
   write and best read, and against fio's psync at dlio_ckpt's chunk size (what a storage team would
   not quote, kept for continuity), alternating who goes first. The same bytes per process (fio: one
   file per job of the size of one rank's checkpoint) and the same number of processes.

Why alternating and per-round ratios: a disk drifts (write-back, the host's other tenants), so each
ratio compares two runs made back to back; medians and quartiles of those ratios are printed, and
each tool's own medians beside them. Why ``--settle`` seconds before every write (each into new
files): on a VM that hands freed memory back to its host (virtio-balloon free page reporting, as
here), a buffered write is fast into page cache freed a moment ago and slow (a host fault per page)
into memory freed seconds ago: fio started 6 s after 4 GiB were freed wrote at 0.40-0.44 GiB/s, at
once 0.86-1.22. A tool that starts in milliseconds would otherwise be measured against one whose
start-up (MPI, Python) takes seconds.

    python bench/fio_compare.py --dir /path/on/storage --procs 2 --gib 2 --rounds 5
    python bench/fio_compare.py ... --modes direct --depth 4 --chunk 8388608
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
GIB, MIB = 1 << 30, 1 << 20
SETTLE = [10.0]  # --settle: seconds before each tool's write (see the docstring)
MODES = {"direct": "O_DIRECT", "fsync": "buffered, fsync before the save ends; reads after eviction"}


def dlio_round(folder: Path, procs: int, scale: float, mode: str, chunk: int, depth: int,
               fmt: str, read_depth: int | None = None) -> dict[str, float]:
    """One dlio_ckpt run: a save, then a verified load; GiB/s and CPU s/GiB of each."""
    time.sleep(SETTLE[0])
    out = Path(tempfile.mkdtemp(prefix="bench_out_"))
    cmd = [str(BIN / "mpiexec"), "-n", str(procs), sys.executable, "-m", "dlio_ckpt", "workload=llama_7b_zero3",
           f"++workload.checkpoint.checkpoint_folder={folder}/dlio", "++workload.checkpoint.num_checkpoints_write=1",
           "++workload.checkpoint.num_checkpoints_read=1", "++workload.checkpoint.time_between_checkpoints=0",
           f"++workload.checkpoint.scale={scale}", f"++workload.checkpoint.chunk_size={chunk}",
           f"++workload.checkpoint.fsync={mode == 'fsync'}", f"++workload.checkpoint.odirect={mode == 'direct'}",
           f"++workload.storage.storage_options.queue_depth={depth}",
           *([f"++workload.storage.storage_options.read_queue_depth={read_depth}"] if read_depth else []),
           f"++workload.checkpoint.format={fmt}", f"++hydra.run.dir={out}", "--world-size", str(procs)]
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    s = json.loads((out / "summary.json").read_text())
    shutil.rmtree(out)
    shutil.rmtree(folder / "dlio")
    figures = {}
    for phase, op in (("save", "write"), ("load", "read")):
        c = s["checkpoints"][phase][0]
        figures[op] = c["bytes"] / c["duration_seconds"] / GIB
        figures[f"{op}_cpu"] = c["cpu"]["seconds_per_GiB"]
    figures["bytes"] = s["checkpoints"]["save"][0]["bytes"]
    return figures


def fio_round(folder: Path, procs: int, size: int, mode: str, best: dict, chunk: int) -> dict[str, float]:
    """fio's best write and read, then psync at dlio_ckpt's chunk size, on files of ``size`` bytes."""
    from dlio_ckpt.tools.drivers import fio

    flags = {"direct": mode == "direct", "fsync": mode == "fsync"}
    out = {}
    for name, jobs in (("fio", {op: job for op, (_, job) in best.items()}),
                       ("psync", dict.fromkeys(fio.OPS, fio.FioJob("psync", 1, chunk)))):
        time.sleep(SETTLE[0])  # each write into new files (an overwrite would find its pages cached)
        for op in fio.OPS:
            out[f"{name}_{op}"] = fio.run(folder, procs, size, op, jobs[op], **flags)
        fio.remove_files(folder, procs)
    return out


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="folder on the storage under test")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--gib", type=float, default=2.0, help="GiB written per process per round")
    ap.add_argument("--search-gib", type=float, default=0.5, help="GiB per process per search point")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default="direct,fsync", help=f"of {', '.join(MODES)}")
    ap.add_argument("--chunk", type=int, default=8 * MIB, help="dlio_ckpt's checkpoint.chunk_size")
    ap.add_argument("--depth", type=int, default=None, help="dlio_ckpt's storage_options.queue_depth "
                    "(default: the tool's)")
    ap.add_argument("--read-depth", type=int, default=None, help="dlio_ckpt's storage_options.read_queue_depth "
                    "(default: --depth)")
    ap.add_argument("--format", choices=["pt", "raw"], default="pt")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds before each tool's write")
    a = ap.parse_args()
    SETTLE[0] = a.settle
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO))
    from dlio_ckpt.config import compose
    from dlio_ckpt.io.backends.options import LocalFSOptions
    from dlio_ckpt.plan.layouts import make_plan
    from dlio_ckpt.tools.drivers import fio

    depth = a.depth or LocalFSOptions().queue_depth
    per_rank_full = make_plan(compose(["workload=llama_7b_zero3"])[0], a.procs).ranks[0].payload_bytes
    scale = min(1.0, a.gib * GIB / per_rank_full)  # llama_7b_zero3 shrunk to a.gib per rank
    plan = make_plan(compose(["workload=llama_7b_zero3", f"++workload.checkpoint.scale={scale}"])[0], a.procs)
    size = plan.ranks[0].payload_bytes // 4096 * 4096  # fio's file per process: one rank's bytes
    host = os.uname().nodename
    for mode in a.modes.split(","):
        fio_dir = folder / "fio"
        fio_dir.mkdir(exist_ok=True)
        best = fio.best(fio_dir, a.procs, int(a.search_gib * GIB) // MIB * MIB, mode == "direct", mode == "fsync",
                        say=lambda line, mode=mode: print(f"  search {mode}: {line}", flush=True))
        for op, (speed, job) in best.items():
            print(f"fio's best {mode} {op}: {job} ({speed:.3f} GiB/s in the search)")
        rows: dict[str, list[float]] = {}

        def keep(figures: dict[str, float], rows: dict[str, list[float]] = rows) -> None:
            for k, v in figures.items():
                rows.setdefault(k, []).append(v)

        ours = [lambda mode=mode: keep({f"dlio_{k}": v for k, v in dlio_round(
            folder, a.procs, scale, mode, a.chunk, depth, a.format, a.read_depth).items()})]
        theirs = [lambda mode=mode, best=best, fio_dir=fio_dir: keep(fio_round(
            fio_dir, a.procs, size, mode, best, a.chunk))]
        for i in range(a.rounds):
            for run in (theirs + ours if i % 2 else ours + theirs):  # alternate who goes first: the
                run()  # disk's state after one run must not favour the other
            print(f"round {i + 1} {mode}: " + "  ".join(
                f"{op} dlio_ckpt {rows[f'dlio_{op}'][-1]:.3f} fio-best {rows[f'fio_{op}'][-1]:.3f} "
                f"psync {rows[f'psync_{op}'][-1]:.3f} GiB/s" for op in ("write", "read")), flush=True)
        fio_dir.rmdir()
        print(f"\n{mode} ({MODES[mode]}): {a.procs} processes, {statistics.median(rows['dlio_bytes']) / GIB:.2f} GiB "
              f"per round, {a.rounds} rounds, dlio_ckpt chunk_size={a.chunk} queue_depth={depth} "
              f"read_queue_depth={a.read_depth or depth} "
              f"format={a.format}, host {host}; median [quartiles]")
        for op in ("write", "read"):
            ours_ = rows[f"dlio_{op}"]
            best_ratio = quartiles([d / f for d, f in zip(ours_, rows[f"fio_{op}"], strict=True)])
            psync_ratio = quartiles([d / f for d, f in zip(ours_, rows[f"psync_{op}"], strict=True)])
            print(f"  {op:5s}: dlio_ckpt {statistics.median(ours_):.3f} GiB/s "
                  f"({statistics.median(rows[f'dlio_{op}_cpu']):.2f} CPU s/GiB), "
                  f"fio best ({best[op][1]}) {statistics.median(rows[f'fio_{op}']):.3f}, "
                  f"fio psync {statistics.median(rows[f'psync_{op}']):.3f}; ratio to best {best_ratio[1]:.3f} "
                  f"[{best_ratio[0]:.3f}, {best_ratio[2]:.3f}], to psync {psync_ratio[1]:.3f} "
                  f"[{psync_ratio[0]:.3f}, {psync_ratio[2]:.3f}]")


if __name__ == "__main__":
    main()
