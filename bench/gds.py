#!/usr/bin/env python3
"""GPUDirect Storage on a GPU machine: dlio_ckpt's ``gds`` backend beside ``local_fs`` with O_DIRECT
and fio (libaio, O_DIRECT, queue depth 16: its best settings for one file per job; ``dd`` with
O_DIRECT where fio is not installed), on one folder,
alternating over rounds; medians, ratios, peak RSS per process; and the device generator and
verifier alone (GiB/s), to show they are far above storage speed.

Each dlio_ckpt run writes ``llama_7b_zero3`` scaled to ``--gib`` GiB per process with fsync, then reads
it back verified (pages evicted first). fio writes then reads the same bytes per process.

    python bench/gds.py --dir /path/on/nvme --procs 8 --gib 1 --rounds 3
    python bench/gds.py --device-data-only
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from fio_compare import BIN  # noqa: E402

GIB = 1 << 30
CHUNK = 8 << 20


def device_data(seconds: float = 2.0) -> dict[str, float]:
    """Stamp 8 MiB windows on the device, then compare them on the device: GiB/s of each alone."""
    import cupy

    from dlio_ckpt.io.synthetic import SyntheticData, first_difference_on_device

    source = SyntheticData(1, CHUNK, device=cupy)
    expected = cupy.empty(CHUNK, dtype=cupy.uint8)
    out = {}
    for what in ("generate", "verify"):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            window = source.window(42, n * CHUNK, CHUNK)
            if what == "verify":
                expected[:] = window
                assert first_difference_on_device(cupy, window, expected) is None
            n += 1
        cupy.cuda.runtime.deviceSynchronize()
        out[f"{what}_GiB_per_s"] = n * CHUNK / GIB / (time.perf_counter() - t0)
    source.close()
    return out


def dlio_run(folder: Path, procs: int, scale: float, storage: str) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix="bench_gds_"))
    extra = ["++workload.storage.storage_type=gds"] if storage == "gds" else ["++workload.checkpoint.odirect=True"]
    cmd = [str(BIN / "mpiexec"), "-n", str(procs), sys.executable, "-m", "dlio_ckpt", "workload=llama_7b_zero3",
           f"++workload.storage.storage_root={folder}", "++workload.checkpoint.checkpoint_folder=ck",
           "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
           "++workload.checkpoint.time_between_checkpoints=0", "++workload.checkpoint.fsync=True",
           f"++workload.checkpoint.scale={scale}", "++workload.checkpoint.progress=False",
           f"++hydra.run.dir={out}", "--world-size", str(procs), *extra]
    subprocess.run(cmd, check=True, capture_output=True)
    s = json.loads((out / "summary.json").read_text())
    shutil.rmtree(out)
    shutil.rmtree(folder / "ck")
    save, load = s["checkpoints"]["save"][0], s["checkpoints"]["load"][0]
    return {"write": save["bytes"] / save["duration_seconds"] / GIB,
            "read": load["bytes"] / load["duration_seconds"] / GIB, "bytes": save["bytes"],
            "rss_max": s["memory"]["peak_rss_bytes_max"],
            "transport": s["io"]["storage"].get("transport", "posix (O_DIRECT)")}


def dd_run(folder: Path, procs: int, per_proc: int) -> dict[str, float]:
    """Where fio is missing (the GPU machine has no package registry): ``procs`` dd processes at once,
    O_DIRECT, 8 MiB blocks, fsync at the end of writes."""
    d = folder / "dd"
    d.mkdir()
    out = {}
    for rw in ("write", "read"):
        count = per_proc // CHUNK
        cmds = [["dd", "if=/dev/zero", f"of={d}/{i}", f"bs={CHUNK}", f"count={count}", "oflag=direct",
                 "conv=fsync"] if rw == "write" else ["dd", f"if={d}/{i}", "of=/dev/null", f"bs={CHUNK}",
                                                      "iflag=direct"] for i in range(procs)]
        t0 = time.perf_counter()
        for p in [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in cmds]:
            p.wait()
        out[rw] = procs * count * CHUNK / GIB / (time.perf_counter() - t0)
    shutil.rmtree(d)
    return out


def fio_run(folder: Path, procs: int, per_proc: int) -> dict[str, float]:
    if shutil.which("fio") is None:
        return dd_run(folder, procs, per_proc)
    d = folder / "fio"
    d.mkdir()
    out = {}
    for rw in ("write", "read"):
        cmd = ["fio", "--name=ckpt", f"--directory={d}", f"--rw={rw}", f"--bs={CHUNK}", f"--size={per_proc}",
               f"--numjobs={procs}", "--ioengine=libaio", "--iodepth=16", "--direct=1", "--group_reporting",
               "--output-format=json", f"--end_fsync={int(rw == 'write')}"]
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["jobs"][0][rw]
        out[rw] = res["io_bytes"] / (res["runtime"] / 1000) / GIB
    shutil.rmtree(d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="folder on the storage under test")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--gib", type=float, default=1.0, help="GiB written per process per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device-data-only", action="store_true")
    a = ap.parse_args()
    print("device data:", json.dumps({k: round(v, 1) for k, v in device_data().items()}), flush=True)
    if a.device_data_only:
        return
    from dlio_ckpt.config import compose
    from dlio_ckpt.plan.layouts import make_plan

    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    full = make_plan(compose(["workload=llama_7b_zero3"])[0], a.procs).ranks[0].payload_bytes
    scale = min(1.0, a.gib * GIB / full)
    per_proc = int(full * scale) // 4096 * 4096
    yardstick = "fio_libaio_direct" if shutil.which("fio") else "dd_direct"
    runs: dict[str, list[dict]] = {"gds": [], "local_fs_odirect": [], yardstick: []}
    order = list(runs)
    for i in range(a.rounds):
        for name in order[i % 3:] + order[:i % 3]:  # rotate who goes first
            r = fio_run(folder, a.procs, per_proc) if name == yardstick else \
                dlio_run(folder, a.procs, scale, "gds" if name == "gds" else "local_fs")
            runs[name].append(r)
            print(f"round {i + 1} {name}: write {r['write']:.3f} GiB/s read {r['read']:.3f} GiB/s"
                  + (f" rss {r['rss_max'] / 2**20:.0f} MiB ({r['transport']})" if "rss_max" in r else ""), flush=True)
    med = {n: {k: statistics.median(r[k] for r in rs) for k in ("write", "read")} for n, rs in runs.items()}
    print(f"procs={a.procs} GiB/process={per_proc / GIB:.2f} rounds={a.rounds} host={os.uname().nodename}")
    base = med[yardstick]
    for name, m in med.items():
        print(f"median {name}: write {m['write']:.3f} GiB/s ({m['write'] / base['write']:.2f} of {yardstick}), "
              f"read {m['read']:.3f} GiB/s ({m['read'] / base['read']:.2f} of {yardstick})")


if __name__ == "__main__":
    main()
