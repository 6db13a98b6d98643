#!/usr/bin/env python3
"""dlio_ckpt against fio on the same folder, alternating in one run; prints medians and the ratio.

Why alternating: disks and page caches drift; interleaving the two tools over R rounds and
comparing medians is fairer than two back-to-back batches. Both write the same bytes per process
with the same number of processes and the same I/O size. fio's files are one per job; dlio_ckpt
writes the planned files of the workload (tiny's layout at a chosen scale: two files per rank).

    python bench/fio_compare.py --dir /path/on/storage --procs 2 --gib 2 --rounds 3 --mode direct
    python bench/fio_compare.py ... --mode fsync      # buffered writes, fsync each file
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
from pathlib import Path

BIN = Path(sys.executable).parent
GIB = 1 << 30


def dlio_run(folder: Path, procs: int, per_proc_scale: float, mode: str, chunk: int, fmt: str) -> tuple[float, int]:
    out = Path(tempfile.mkdtemp(prefix="bench_out_"))
    cmd = [str(BIN / "mpiexec"), "-n", str(procs), sys.executable, "-m", "dlio_ckpt", "workload=llama_7b_zero3",
           f"++workload.checkpoint.checkpoint_folder={folder}/dlio", "++workload.checkpoint.num_checkpoints_write=1",
           "++workload.checkpoint.num_checkpoints_read=0", "++workload.checkpoint.time_between_checkpoints=0",
           f"++workload.checkpoint.scale={per_proc_scale}", f"++workload.checkpoint.chunk_size={chunk}",
           f"++workload.checkpoint.fsync={mode == 'fsync'}", f"++workload.checkpoint.odirect={mode == 'direct'}",
           f"++workload.checkpoint.format={fmt}", f"++hydra.run.dir={out}", "--world-size", str(procs)]
    subprocess.run(cmd, check=True, capture_output=True)
    s = json.loads((out / "summary.json").read_text())
    shutil.rmtree(out)
    shutil.rmtree(folder / "dlio")
    c = s["checkpoints"]["save"][0]
    return c["bytes"] / c["duration_seconds"] / GIB, c["bytes"]


def fio_run(folder: Path, procs: int, per_proc: int, mode: str, chunk: int) -> float:
    d = folder / "fio"
    d.mkdir()
    cmd = ["fio", "--name=ckpt", f"--directory={d}", "--rw=write", f"--bs={chunk}", f"--size={per_proc}",
           f"--numjobs={procs}", "--ioengine=psync", "--group_reporting", "--output-format=json",
           f"--direct={int(mode == 'direct')}", f"--fsync_on_close={int(mode == 'fsync')}",
           f"--end_fsync={int(mode == 'fsync')}"]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    shutil.rmtree(d)
    job = res["jobs"][0]["write"]
    return job["io_bytes"] / (job["runtime"] / 1000) / GIB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="folder on the storage under test")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--gib", type=float, default=2.0, help="GiB written per process per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", choices=["direct", "fsync"], default="direct")
    ap.add_argument("--chunk", type=int, default=8 << 20)
    ap.add_argument("--format", choices=["pt", "raw"], default="pt")
    a = ap.parse_args()
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dlio_ckpt.config import compose
    from dlio_ckpt.layouts import make_plan

    per_rank_full = make_plan(compose(["workload=llama_7b_zero3"])[0], a.procs).ranks[0].payload_bytes
    scale = min(1.0, a.gib * GIB / per_rank_full)  # llama_7b_zero3 shrunk to a.gib per rank
    per_proc = int(per_rank_full * scale) // 4096 * 4096
    dlio_s, fio_s = [], []
    for i in range(a.rounds):
        if i % 2:  # alternate who goes first: the disk's state after one run must not favour the other
            f = fio_run(folder, a.procs, per_proc, a.mode, a.chunk)
            d, nbytes = dlio_run(folder, a.procs, scale, a.mode, a.chunk, a.format)
        else:
            d, nbytes = dlio_run(folder, a.procs, scale, a.mode, a.chunk, a.format)
            f = fio_run(folder, a.procs, per_proc, a.mode, a.chunk)
        dlio_s.append(d)
        fio_s.append(f)
        print(f"round {i + 1}: dlio_ckpt {d:.3f} GiB/s  fio {f:.3f} GiB/s  ({nbytes / GIB:.2f} GiB total)", flush=True)
    md, mf = statistics.median(dlio_s), statistics.median(fio_s)
    print(f"format={a.format} mode={a.mode} procs={a.procs} chunk={a.chunk} rounds={a.rounds} "
          f"host={os.uname().nodename}")
    print(f"median: dlio_ckpt {md:.3f} GiB/s, fio {mf:.3f} GiB/s, ratio {md / mf:.3f}")


if __name__ == "__main__":
    main()
