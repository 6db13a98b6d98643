#!/usr/bin/env python3
"""dlio_ckpt on S3 (SeaweedFS) and GCS (fake-gcs-server) against the bare client, in one run.

fio has no S3 or GCS engine in Debian's build, so the yardstick here is the same client library
with nothing of ours around it: each process PUTs objects of exactly the planned sizes from one
preallocated random buffer (no synthetic stamping, no format, no verification) with the same number
of threads, then GETs them back and drops the bytes. The ratio dlio_ckpt / bare is our overhead on
that store; the absolute figures describe a local emulator on this machine, not a cloud bucket.
Rounds alternate which tool goes first, each tool's after ``os.sync()``. Single rounds swing by
a third either way on this 2-core machine (client and server share it), so the ratio is taken round
by round, the two tools having run back to back, and reported as median and quartiles beside each
tool's medians. Loads are reported apart: in the run that saved, and from new processes
(``--load-rounds``). ``null`` shows our own ceiling. Every round's objects stay in the store until it
stops: ``--rounds`` x 2 tools x ``--procs`` x ``--mib``.

    python bench/object_stores.py --backends s3,gcs --procs 2 --mib 1024 --rounds 8 --threads 2 --load-rounds 6
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
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.servers import fake_gcs, seaweedfs  # noqa: E402

BIN = Path(sys.executable).parent
GIB = 1 << 30
WORKLOAD = "llama_7b_zero3"  # two files per rank (model and optimizer shards) of unequal size


def scale_for(procs: int, mib: int) -> float:
    per_rank_full = 11_792_473_088  # llama_7b_zero3's bytes per rank at world size 8 (spec example)
    return min(1.0, mib * (1 << 20) / (per_rank_full * 8 / procs))


VERIFY = ["++workload.checkpoint.verify=True"]  # --no-verify: dlio_ckpt only counts bytes read, as the bare client
OPTIONS: list[str] = []  # --option k=v: dlio_ckpt's storage options under test


def common(procs: int, scale: float, fmt: str) -> list[str]:
    return [f"workload={WORKLOAD}", f"++workload.checkpoint.scale={scale}", f"++workload.checkpoint.format={fmt}",
            *VERIFY,
            "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
            "++workload.checkpoint.time_between_checkpoints=0", "--world-size", str(procs)]


def storage_args(kind: str, server, threads: int, prefix: str) -> list[str]:
    out = [f"++workload.storage.storage_type={kind}", f"++workload.storage.storage_options.threads={threads}",
           *(f"++workload.storage.storage_options.{o}" for o in OPTIONS if kind != "null"),
           f"++workload.checkpoint.checkpoint_folder={prefix}"]
    if server is not None:
        out += [f"++workload.storage.storage_root={server.bucket}",
                f"++workload.storage.storage_options.endpoint_url={server.endpoint}"]
    return out


Figures = dict[str, dict[str, float]]  # phase -> GiB_per_second, cpu_seconds_per_GiB, minor_page_faults_per_GiB


def _phase(op: dict) -> dict[str, float]:
    gib = op["bytes"] / GIB
    return {"GiB_per_second": gib / op["duration_seconds"], "cpu_seconds_per_GiB": op["cpu"]["seconds_per_GiB"],
            "minor_page_faults_per_GiB": op["cpu"]["minor_page_faults"] / gib}


def dlio_round(kind: str, server, procs: int, scale: float, fmt: str, threads: int, n: int,
               load_only: bool = False) -> Figures:
    out = Path(tempfile.mkdtemp(prefix="bench_out_"))
    only = ["++workload.checkpoint.num_checkpoints_write=0"] if load_only else []
    cmd = [str(BIN / "mpiexec"), "-n", str(procs), sys.executable, "-m", "dlio_ckpt", *common(procs, scale, fmt),
           *storage_args(kind, server, threads, f"dlio{n}"), f"++hydra.run.dir={out}", *only]
    env = {**os.environ, **(server.env if server else {}), "PYTHONPATH": str(REPO)}
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    s = json.loads((out / "summary.json").read_text())
    shutil.rmtree(out)
    return {phase: _phase(s["checkpoints"][phase][0]) for phase in (["load"] if load_only else ["save", "load"])}


def planned_sizes(procs: int, scale: float, fmt: str) -> list[list[int]]:
    cmd = [sys.executable, "-m", "dlio_ckpt", "plan", *common(procs, scale, fmt), "--format", "json"]
    plan = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                     env={**os.environ, "PYTHONPATH": str(REPO)}).stdout)
    return [[f["file_bytes"] for f in r["files"]] for r in plan["ranks"]]


def bare_round(kind: str, server, sizes: list[list[int]], threads: int, n: int,
               load_only: bool = False) -> Figures:
    client = "s3-botocore" if kind == "s3" and "library=botocore" in OPTIONS else kind
    cmd = [str(BIN / "mpiexec"), "-n", str(len(sizes)), sys.executable, str(REPO / "bench" / "_bare_client.py"),
           client, server.endpoint, server.bucket, f"bare{n}", str(threads), json.dumps(sizes),
           "load" if load_only else "save,load"]
    env = {**os.environ, **server.env}
    res = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="s3,gcs,null")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--mib", type=int, default=256, help="MiB written per process per checkpoint")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4, help="objects in flight per process (both tools)")
    ap.add_argument("--format", default="pt")
    ap.add_argument("--no-verify", action="store_true", help="dlio_ckpt reads without comparing bytes")
    ap.add_argument("--settle", type=float, default=0.0, help="seconds after os.sync() before each tool (this "
                    "VM hands freed memory back to its host: see bench/fio_compare.py)")
    ap.add_argument("--option", action="append", default=[], help="a dlio_ckpt storage option, k=v (repeatable); "
                    "library=botocore makes the bare client botocore too (one PutObject and GetObject per object)")
    ap.add_argument("--load-rounds", type=int, default=0, help="then this many more loads of what the last round "
                    "wrote, alternating the tools (a load sample costs no save: loads swing most here)")
    a = ap.parse_args()
    VERIFY[0] = f"++workload.checkpoint.verify={not a.no_verify}"
    OPTIONS.extend(a.option)
    scale = scale_for(a.procs, a.mib)
    sizes = planned_sizes(a.procs, scale, a.format)
    # (store, tool, phase) -> round -> figures; phase: save, load (in the saving run), load-only (new processes)
    results: dict[tuple[str, str, str], dict[int, dict[str, float]]] = {}

    def keep(kind: str, tool: str, n: int, figures: Figures, only: bool) -> None:
        for phase, f in figures.items():
            results.setdefault((kind, tool, "load-only" if only else phase), {})[n] = f
        print(f"{'load round' if only else 'round'} {n} {kind:5s} {tool:5s} " + "  ".join(
            f"{phase} {f['GiB_per_second']:.3f} GiB/s ({f['cpu_seconds_per_GiB']:.2f} CPU s/GiB, "
            f"{f['minor_page_faults_per_GiB']:.0f} faults/GiB)" for phase, f in figures.items()), flush=True)

    with ExitStack() as stack:
        servers = {"s3": stack.enter_context(seaweedfs()) if "s3" in a.backends else None,
                   "gcs": stack.enter_context(fake_gcs()) if "gcs" in a.backends else None, "null": None}
        for n in range(a.rounds + a.load_rounds):
            only = n >= a.rounds  # load-only rounds read what the last full round wrote
            tag = min(n, a.rounds - 1)
            for kind in a.backends.split(","):
                for tool in (["dlio", "bare"] if n % 2 == 0 else ["bare", "dlio"]):
                    if kind == "null" and (tool == "bare" or only):  # null keeps nothing to load later
                        continue
                    # Each tool starts with no dirty pages of earlier rounds: the kernel writes back
                    # 1-2 GB at once here, and that burst landed in whichever load it met.
                    os.sync()
                    time.sleep(a.settle)  # as bench/fio_compare.py: freed memory settled alike for both tools
                    keep(kind, tool, n, dlio_round(kind, servers[kind], a.procs, scale, a.format, a.threads, tag, only)
                         if tool == "dlio" else bare_round(kind, servers[kind], sizes, a.threads, tag, only), only)
    total = sum(map(sum, sizes))
    print(f"\n{a.procs} processes x {a.threads} threads, {total / GIB:.3f} GiB per checkpoint ({a.format}), "
          f"{a.rounds} rounds (+{a.load_rounds} load-only), reads {'counted' if a.no_verify else 'verified'}; "
          "medians (CPU: seconds of all processes' threads per GiB; faults: minor page faults per GiB); "
          "ratio: dlio / bare of each round, median [quartiles]")
    for kind in a.backends.split(","):
        for phase in ("save", "load", "load-only"):
            tools = {tool: results[(kind, tool, phase)] for tool in ("dlio", "bare") if (kind, tool, phase) in results}
            if not tools:
                continue
            line = f"{kind:5s} {phase:9s}: " + " | ".join(
                f"{tool} {_median(r, 'GiB_per_second'):.3f} GiB/s, {_median(r, 'cpu_seconds_per_GiB'):.2f} CPU s/GiB, "
                f"{_median(r, 'minor_page_faults_per_GiB'):.0f} faults/GiB" for tool, r in tools.items())
            if len(tools) == 2:
                d, b = tools["dlio"], tools["bare"]
                ratios = [d[n]["GiB_per_second"] / b[n]["GiB_per_second"] for n in d if n in b]
                q1, med, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
                line += f" | ratio {med:.2f} [{q1:.2f}, {q3:.2f}]"
            print(line)


def _median(rounds: dict[int, dict[str, float]], key: str) -> float:
    return statistics.median(f[key] for f in rounds.values())


if __name__ == "__main__":
    main()
