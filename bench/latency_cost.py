"""What timing every storage call costs (issue 39): CPU per million recorded calls, and its share of a run's CPU.

Three figures:

1. ``record``: :meth:`LatencyRecorder.record` alone, a million times (the histogram's bucket, increment, lock).
2. ``wrapper``: a write through :class:`TimedBackend`'s writer over a writer that does nothing, against that
   writer called directly: the whole added cost of one timed request (two clock reads, the indirection, record).
3. ``share``: an emulated run in this process (``workload=tiny``, 2 ranks, local files under ``--folder``), its
   timed calls counted from its summary.json, times the wrapper's cost per call, over the run's CPU time (user and
   system, all threads). Also the run's CPU with the wrapper and without it (the wrapper replaced by the backend
   itself), best of ``--runs``: a direct check, noisier than the product on a shared machine.

Usage: .venv/bin/python bench/latency_cost.py [--folder /tmp/latency_cost] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import shutil
import signal
import sys
import time
from pathlib import Path

from dlio_ckpt.io.backends import timed
from dlio_ckpt.io.backends.null import NullWriter
from dlio_ckpt.io.latency import LatencyRecorder

N = 1_000_000


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def record_cost() -> float:
    """CPU seconds per million ``record`` calls (latencies spread over many buckets, as real ones are)."""
    rec = LatencyRecorder()
    values = [1000 + (i * 7919) % 5_000_000 for i in range(1000)]
    t = cpu()
    for _ in range(N // 1000):
        for v in values:
            rec.record("write", v, 4096)
    return cpu() - t


def wrapper_cost() -> float:
    """Added CPU seconds per million writes: through the timed writer minus straight to the writer."""
    data, raw = memoryview(b"x" * 4096), NullWriter()
    wrapped = timed._TimedWriter(raw, LatencyRecorder(), "")
    t = cpu()
    for _ in range(N):
        raw.write(data)
    direct = cpu() - t
    t = cpu()
    for _ in range(N):
        wrapped.write(data)
    return cpu() - t - direct


def per_operation_cost() -> float:
    """CPU seconds of the fixed work per checkpoint, whatever its requests: two takes of a recorder holding ten
    kinds spread from 1 us to 100 ms (the operation's start and its record), and the figures of those ten kinds
    over 2 processes (summary.json's entry: percentiles, metadata, outliers). Mean of 200."""
    from dlio_ckpt.results.latency import operation_latency

    kinds = ["write", "read", "fsync", "close", "create", "open", "stat", "rename", "mkdir", "remove"]
    t, n = cpu(), 200
    for _ in range(n):
        per_process = {}
        for p in range(2):
            rec = LatencyRecorder()
            for kind in kinds:
                for v in range(1000, 100_000_000, 1_000_000):
                    rec.record(kind, v)
            LatencyRecorder().take()  # the operation's start: an empty take
            per_process[p] = rec.take()  # its record
        operation_latency(per_process, 1.0, 0)
    recording = 2 * 2 * len(kinds) * 100 * wrapper_cost_per_call()
    return (cpu() - t) / n - recording


_WRAP: list[float] = []


def wrapper_cost_per_call() -> float:
    return _WRAP[0] / N if _WRAP else 0.0


def one_run(folder: Path, overrides: list[str], timed_on: bool) -> tuple[float, int]:
    """(CPU seconds of the run, timed calls in its summary.json); a world of one process, 2 ranks."""
    from dlio_ckpt.cli import main as cli
    from dlio_ckpt.cluster.comm import SelfComm
    from dlio_ckpt.run import launch

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cli.get_comm = SelfComm  # type: ignore[assignment] - this process alone, as the tests' run_here does
    original = launch.timed_backend
    if not timed_on:
        launch.timed_backend = lambda backend, recorder: backend  # type: ignore[assignment,return-value]
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        t = cpu()
        code = cli.main(["workload=tiny", "--world-size", "2", f"++workload.checkpoint.checkpoint_folder={folder}/ck",
                         f"++hydra.run.dir={folder}/run", "++workload.checkpoint.num_checkpoints_write=4",
                         "++workload.checkpoint.num_checkpoints_read=4", *overrides])
        spent = cpu() - t
    finally:
        launch.timed_backend = original
        for s, handler in handlers.items():
            signal.signal(s, handler)
        logging.getLogger("dlio_ckpt").handlers.clear()
    assert code == 0, code
    summary = json.loads((folder / "run" / "summary.json").read_text())
    calls = sum(k["count"] for k in summary.get("latency", {}).get("run", {}).get("kinds", {}).values()) \
        if timed_on else 0
    return spent, calls


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--folder", default="/tmp/latency_cost")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    rec = min(record_cost() for _ in range(3))
    wrap = min(wrapper_cost() for _ in range(3))
    _WRAP.append(wrap)
    fixed = per_operation_cost()
    print(f"record: {rec:.3f} CPU s per million calls ({rec:.3f} us per call)")
    print(f"wrapper (whole added cost of a timed write): {wrap:.3f} CPU s per million calls")
    print(f"fixed cost per checkpoint (takes, figures of 10 kinds x 2 processes): {fixed * 1e3:.2f} ms")
    patterns = {"stream (8 MiB requests)": ["++workload.checkpoint.io_pattern=stream"],
                "stream (64 KiB requests)": ["++workload.checkpoint.io_pattern=stream",
                                             "++workload.checkpoint.chunk_size=65536"],
                "framework (dcp, torch.save's calls)": ["++workload.checkpoint.layout=dcp",
                                                        "++workload.model.parallelism.tensor=1"]}
    print("\n| pattern | timed calls | run CPU s (timed) | run CPU s (not timed) | calls x cost / run CPU | "
          "(calls x cost + 8 checkpoints x fixed) / run CPU |")
    print("|---|---|---|---|---|---|")
    for label, overrides in patterns.items():
        on = [one_run(Path(args.folder), overrides, True) for _ in range(args.runs)]
        off = [one_run(Path(args.folder), overrides, False)[0] for _ in range(args.runs)]
        calls = on[0][1]
        best_on = min(s for s, _ in on)
        share = calls * wrap / N / best_on
        print(f"| {label} | {calls:,} | {best_on:.3f} | {min(off):.3f} | {share:.3%} | "
              f"{share + 8 * fixed / best_on:.2%} |")
    shutil.rmtree(args.folder, ignore_errors=True)
    print(f"\n{time.strftime('%Y-%m-%d')}, python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
