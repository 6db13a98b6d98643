#!/usr/bin/env python3
"""The sweep examples of docs/guides/sweeps-and-tune.md, measured on this machine: chunk size × I/O threads
on local files, and multipart part size × objects in flight on S3 (SeaweedFS started on 127.0.0.1 for the run).
Each is one ``dlio_ckpt sweep`` job; the table, sweep.csv and the figures are in the sweep folder.

    python bench/sweep_examples.py --dir /path/on/storage [--procs 2] [--scale 0.02]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.servers import seaweedfs  # noqa: E402

BIN = Path(sys.executable).parent


def sweep(out: Path, procs: int, args: list[str], env: dict[str, str] | None = None) -> None:
    cmd = [str(BIN / "mpiexec"), "-n", str(procs), sys.executable, "-m", "dlio_ckpt", "sweep",
           "workload=llama_7b_zero3", "--world-size", str(procs), "++workload.checkpoint.num_checkpoints_write=2",
           "++workload.checkpoint.num_checkpoints_read=2", "++workload.checkpoint.time_between_checkpoints=0",
           "++workload.checkpoint.progress=False", f"++hydra.sweep.dir={out}", *args]
    done = subprocess.run(cmd, env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)}, text=True,
                          capture_output=True)
    print("\n".join(line for line in done.stdout.splitlines() if not line.startswith("[")), flush=True)
    if done.returncode:
        print(done.stderr, file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--scale", type=float, default=0.02, help="llama_7b_zero3 shrunk to this (0.02: ~1.8 GiB)")
    a = ap.parse_args()
    root = Path(a.dir).resolve()
    scale = f"++workload.checkpoint.scale={a.scale}"
    sweep(root / "local", a.procs, [scale, "++workload.checkpoint.fsync=True",
                                     f"++workload.storage.storage_root={root}",
                                     "++workload.checkpoint.chunk_size=1048576,4194304,16777216",
                                     "++workload.storage.storage_options.threads=1,2,4"])
    with seaweedfs() as server:
        sweep(root / "s3", a.procs, [scale, "++workload.storage.storage_type=s3",
                                      f"++workload.storage.storage_root={server.bucket}/sweep",
                                      f"++workload.storage.storage_options.endpoint_url={server.endpoint}",
                                      "++workload.storage.storage_options.part_size=8388608,16777216,33554432",
                                      "++workload.storage.storage_options.threads=1,2"], server.env)


if __name__ == "__main__":
    main()
