"""What ``checkpoint.trace`` costs (issue 49): CPU per million trace events, ours against pydftracer's, and a run's
time with the trace and without it.

Three figures:

1. ``ours``: :meth:`dlio_ckpt.io.trace.Tracer.call` a million times with a write's args (file, offset, size), then
   the file closed: formatting, the batch, gzip (level 1), writing. CPU seconds per million events.
2. ``pydftracer``: the same million events through pydftracer's ``dftracer.log_event`` (DFTracer's C++ writer,
   its default compression), in a process of its own (``--pydftracer-python``: an interpreter with dftracer and
   pydftracer; this one by default, whose requirements.txt has them).
3. ``runs``: an emulated run in this process (``workload=tiny``, 2 ranks, 4 saves and 4 loads, local files under
   ``--folder``), the trace off and on in alternating rounds, the median wall time of each over ``--rounds``
   rounds, for the stream pattern (8 MiB requests) and the framework pattern (DCP's calls); with the events the
   trace held, and those events times the per-event cost of (1) over the run's time (a steadier estimate than the
   difference of two medians on a shared machine).

Usage: .venv/bin/python bench/trace_cost.py [--folder /tmp/trace_cost] [--rounds 9] [--pydftracer-python PY]
"""

from __future__ import annotations

import argparse
import gzip
import logging
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlio_ckpt.io.trace import Tracer

N = 1_000_000
PATH = "/tmp/ck/global_epoch1_step1/__0_0.distcp"


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def ours() -> float:
    """CPU seconds per million events through our writer, the file written whole."""
    with tempfile.TemporaryDirectory() as folder:
        tracer = Tracer(0)
        tracer.at("save", 1)
        tracer.start(folder)
        t = cpu()
        for i in range(N):
            tracer.call("write", PATH, 1_000_000 + i * 50, 20_000, 704, i * 704)
        tracer.close()
        return cpu() - t


PYDFTRACER = f"""
import os, resource, shutil, sys, tempfile
folder = tempfile.mkdtemp()
os.environ.update(DFTRACER_ENABLE="1", DFTRACER_INC_METADATA="1", DFTRACER_LOG_FILE=folder + "/t")
from dftracer.python import dftracer, TagValue, TagDType
log = dftracer.initialize_log(logfile=None, data_dir=None, process_id=-1)
ints = {{"size": TagValue(704, TagDType.INT).value(), "rank": TagValue(0, TagDType.INT).value(),
         "checkpoint": TagValue(1, TagDType.INT).value()}}
strings = {{"fname": TagValue("{PATH}").value(), "phase": TagValue("save").value()}}
def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
t = cpu()
for i in range({N}):
    ints["offset"] = TagValue(i * 704, TagDType.INT).value()
    log.log_event("write", "POSIX", 1_000_000 + i * 50, 20, int_args=ints, string_args=strings)
log.finalize()
print(cpu() - t)
shutil.rmtree(folder, ignore_errors=True)
"""


def pydftracer(python: str) -> float:
    """CPU seconds per million events through pydftracer (in ``python``, a process of its own)."""
    with tempfile.TemporaryDirectory() as cwd:  # DFTracer leaves its own log (dft.log) where it runs
        r = subprocess.run([python, "-c", PYDFTRACER], capture_output=True, text=True, timeout=600, cwd=cwd)
    if r.returncode != 0:
        raise SystemExit(f"pydftracer failed: {r.stderr[-2000:]}")
    return float(r.stdout.strip().splitlines()[-1])


def one_run(folder: Path, overrides: list[str], trace: bool) -> tuple[float, float, int]:
    """(wall seconds of the run, its CPU seconds (all threads), events its trace held); a world of one process,
    2 ranks."""
    from dlio_ckpt.cli import main as cli
    from dlio_ckpt.cluster.comm import SelfComm

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cli.get_comm = SelfComm  # type: ignore[assignment] - this process alone, as the tests' run_here does
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        t, c = time.perf_counter(), cpu()
        code = cli.main(["workload=tiny", "--world-size", "2", f"++workload.checkpoint.checkpoint_folder={folder}/ck",
                         f"++hydra.run.dir={folder}/run", "++workload.checkpoint.num_checkpoints_write=4",
                         "++workload.checkpoint.num_checkpoints_read=4", f"++workload.checkpoint.trace={trace}",
                         *overrides])
        spent, used = time.perf_counter() - t, cpu() - c
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        logging.getLogger("dlio_ckpt").handlers.clear()
    assert code == 0, code
    events = sum(1 for p in (folder / "run").glob("*_trace.pfw.gz") for line in gzip.open(p, "rt")
                 if line.startswith("{"))
    return spent, used, events


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--folder", default="/tmp/trace_cost")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--pydftracer-python", metavar="PY", default=sys.executable,
                   help="an interpreter with dftracer and pydftracer (default: this one)")
    args = p.parse_args()
    mine = statistics.median(ours() for _ in range(3))
    print(f"ours: {mine:.3f} CPU s per million events ({mine:.3f} us per event)")
    theirs = statistics.median(pydftracer(args.pydftracer_python) for _ in range(3))
    print(f"pydftracer: {theirs:.3f} CPU s per million events ({theirs:.3f} us per event)")
    patterns = {"stream (8 MiB requests)": ["++workload.checkpoint.io_pattern=stream"],
                "framework (dcp, torch.save's calls)": ["++workload.checkpoint.layout=dcp",
                                                        "++workload.model.parallelism.tensor=1"]}
    print(f"\n| pattern | events | wall s, no trace / traced (medians of {args.rounds}) | difference | "
          "CPU s, no trace / traced | difference | events x cost / wall |")
    print("|---|---|---|---|---|---|---|")
    for label, overrides in patterns.items():
        off, on, events = [], [], 0
        for _ in range(args.rounds):  # alternating: a drift of the machine falls on both alike
            off.append(one_run(Path(args.folder), overrides, False)[:2])
            *both, events = one_run(Path(args.folder), overrides, True)
            on.append(tuple(both))
        (a, ca), (b, cb) = ((statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
                            for runs in (off, on))
        print(f"| {label} | {events:,} | {a:.3f} / {b:.3f} | {(b - a) / a:+.1%} | {ca:.3f} / {cb:.3f} | "
              f"{(cb - ca) / ca:+.1%} | {events * mine / N / a:.2%} |")
    shutil.rmtree(args.folder, ignore_errors=True)
    print(f"\n{time.strftime('%Y-%m-%d')}, python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
