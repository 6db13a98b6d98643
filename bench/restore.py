#!/usr/bin/env python3
"""A resharded restore against a same-shape one, of the same checkpoint, on local files and S3 (SeaweedFS).

One run saves a DCP checkpoint (llama3_8b's tensors, FSDP2 over ``--saved`` ranks, scaled to ``--gib`` in
all); then rounds alternate a read-only load at the save's world size and one at ``--world`` (a restart on
fewer or more GPUs), each from new processes, every byte verified, pages evicted first on local files. Each
load reports its duration (the slowest process's) and what it needed and read (``io.restore``); the ratio
resharded / same-shape is taken round by round (the two loads ran back to back) and given as median
[quartiles], beside the throughput of the bytes each load *needs* (what a restart waits for, per second).

    python bench/restore.py --backends local,s3 --saved 8 --world 6 --procs 2 --gib 2 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.servers import seaweedfs  # noqa: E402

BIN = Path(sys.executable).parent
GIB = 1 << 30
FULL_BYTES = 8.03e9 * 4 * 3  # llama3_8b: fp32 parameters and Adam's two fp32 moments


def run(args: list[str], cwd: Path, procs: int, env: dict | None = None) -> dict:
    r = subprocess.run([str(BIN / "mpiexec"), "-n", str(procs), sys.executable, "-m", "dlio_ckpt", *args,
                        "++hydra.run.dir=out", "++workload.checkpoint.progress=False"],
                       cwd=cwd, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"dlio_ckpt failed:\n{r.stderr[-3000:]}")
    summary = json.loads((cwd / "out" / "summary.json").read_text())
    shutil.rmtree(cwd / "out")
    return summary


def quartiles(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}"
    q = statistics.quantiles(values, n=4)
    return f"{statistics.median(values):.2f} [{q[0]:.2f}, {q[2]:.2f}]"


def bench(kind: str, server, opts: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench_restore_"))
    try:
        common = ["workload=llama3_8b", "++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1",
                  "++workload.model.parallelism.pipeline=1", "++workload.checkpoint.checkpoint_folder=ck",
                  f"++workload.checkpoint.scale={opts.gib * GIB / FULL_BYTES}", "--world-size", str(opts.saved)]
        env = None
        if kind == "s3":
            common += ["++workload.storage.storage_type=s3", f"++workload.storage.storage_root={server.bucket}/restore",
                       f"++workload.storage.storage_options.endpoint_url={server.endpoint}"]
            env = {**server.env, "PATH": f"{BIN}:/usr/bin:/bin"}
        else:
            common += [f"++workload.storage.storage_root={work / 'data'}"]
        saved = run([*common, "++workload.checkpoint.num_checkpoints_read=0"], work, opts.procs, env)
        print(f"{kind}: saved {saved['metric']['checkpoint_size_GiB']:.2f} GiB at world {opts.saved} "
              f"({saved['metric']['save_checkpoint_io_mean_GiB_per_second']:.2f} GiB/s)")
        seen: dict[int, list[dict]] = {opts.saved: [], opts.world: []}
        for k in range(opts.rounds):
            order = [opts.saved, opts.world] if k % 2 == 0 else [opts.world, opts.saved]
            for world in order:
                s = run([*common, "++workload.checkpoint.num_checkpoints_write=0",
                         "++workload.checkpoint.num_checkpoints_read=1", f"++workload.restore.world_size={world}"],
                        work, opts.procs, env)
                (load,) = s["checkpoints"]["load"]
                r = s["io"]["restore"]
                seen[world].append({"seconds": load["duration_seconds"], "read": r["bytes_read"],
                                    "needed": r["bytes_needed"], "reads": r["reads_per_rank"]["mean"],
                                    "metadata": load.get("metadata_read_seconds_max", 0.0)})
                print(f"  round {k + 1} world {world}: {load['duration_seconds']:.3f} s, "
                      f"{r['bytes_read'] / GIB:.3f} GiB read for {r['bytes_needed'] / GIB:.3f} needed")
        for world, rows in seen.items():
            secs = [x["seconds"] for x in rows]
            print(f"{kind} load at {world}: {quartiles(secs)} s; needed {rows[0]['needed'] / GIB:.3f} GiB, read "
                  f"{rows[0]['read'] / GIB:.3f} (x{rows[0]['read'] / rows[0]['needed']:.3f}), {rows[0]['reads']:.0f} "
                  f"reads per rank; needed GiB/s {quartiles([rows[0]['needed'] / GIB / s for s in secs])}; "
                  f".metadata {quartiles([x['metadata'] * 1000 for x in rows])} ms")
        ratio = [b["seconds"] / a["seconds"] for a, b in zip(seen[opts.saved], seen[opts.world], strict=True)]
        print(f"{kind}: resharded {opts.saved} -> {opts.world} takes {quartiles(ratio)} x the same-shape load's time")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="local,s3")
    ap.add_argument("--saved", type=int, default=8, help="the save's world size")
    ap.add_argument("--world", type=int, default=6, help="the resharded load's")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--gib", type=float, default=2.0, help="the checkpoint's size in all")
    ap.add_argument("--rounds", type=int, default=5)
    opts = ap.parse_args()
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
          f"{len(__import__('os').sched_getaffinity(0))} cores")
    with ExitStack() as stack:
        for kind in opts.backends.split(","):
            bench(kind, stack.enter_context(seaweedfs()) if kind == "s3" else None, opts)


if __name__ == "__main__":
    main()
