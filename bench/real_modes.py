#!/usr/bin/env python3
"""The real modes beside the emulator and fio, on one folder, alternating over rounds; medians.

What it runs each round (order rotated between rounds, since disks and page caches drift):
- lightning: the demo transformer (``--layers``), TorchCheckpointIO, then in AsyncCheckpointIO;
- fsdp: ``--procs`` processes, a llama of hidden 1024 / ffn 2816 / 8 layers / vocab 32000 (fp16, Adam),
  FileSystemWriter, then ``dcp.async_save``;
- emulated: the same llama shape, ZeRO-3 over ``--procs`` ranks (DLIO's layout, more bytes: fp32
  master weights and optimizer state);
- fio: buffered sequential writes of the same bytes per process as each of lightning, fsdp and
  emulated, 8 MiB requests, fsync at the end ("vs fio" compares each with fio on its own bytes).
Every dlio_ckpt run fsyncs its files and reads back with the page cache evicted.

    python bench/real_modes.py --dir /path/on/storage --rounds 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fio_compare import BIN, fio_run  # noqa: E402

LLAMA = ["++workload.model.transformer.hidden_size=1024", "++workload.model.transformer.ffn_hidden_size=2816",
         "++workload.model.num_layers=8", "++workload.model.transformer.vocab_size=32000"]


def dlio(folder: Path, args: list[str], procs: int | None) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench_real_"))
    cmd = [sys.executable, "-m", "dlio_ckpt", *args, f"++workload.checkpoint.checkpoint_folder={folder}/ck",
           f"++hydra.run.dir={out}", "++workload.checkpoint.fsync=True", "++workload.checkpoint.overwrite=True",
           "++workload.checkpoint.time_between_checkpoints=0"]
    if procs:
        cmd = [str(BIN / "mpiexec"), "-n", str(procs), *cmd]
    subprocess.run(cmd, check=True, capture_output=True)
    summary = json.loads((out / "summary.json").read_text())
    shutil.rmtree(out)
    shutil.rmtree(folder / "ck", ignore_errors=True)
    return summary


def figures(s: dict) -> dict[str, float]:
    saves, loads = s["checkpoints"]["save"], s["checkpoints"]["load"]
    out = {"save": statistics.median(c["throughput_GiB_per_second"] for c in saves),
           "load": statistics.median(c["throughput_GiB_per_second"] for c in loads),
           "bytes": s["metric"]["checkpoint_size_bytes"]}
    held = [h for p in s.get("per_process", []) for h in p.get("blocking_save_seconds", [])]
    out["save_s"] = statistics.median(c["duration_seconds"] for c in saves)
    out["blocking_s"] = statistics.median(held) if held else out["save_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--checkpoints", type=int, default=3)
    a = ap.parse_args()
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    n = [f"++workload.checkpoint.num_checkpoints_write={a.checkpoints}",
         f"++workload.checkpoint.num_checkpoints_read={a.checkpoints}"]
    light = ["workload=lightning_demo", f"++workload.model.num_layers={a.layers}", *n]
    fsdp = ["workload=tiny", "++workload.mode=fsdp", *LLAMA, *n]
    cases = {
        "lightning": (light, None),
        "lightning async": (light + ["++workload.lightning.async_save=True"], None),
        "fsdp": (fsdp, a.procs),
        "fsdp async": (fsdp + ["++workload.fsdp.async_save=True"], a.procs),
        "emulated (same llama, ZeRO-3)": (["workload=tiny", *LLAMA, *n, "++workload.model.parallelism.tensor=1",
                                            "++workload.model.parallelism.zero_stage=3"], a.procs),
    }
    results: dict[str, list[dict]] = {k: [] for k in cases}
    fio: dict[str, list[float]] = {"lightning": [], "fsdp": [], "emulated": []}
    sizes: dict[str, int] = {}
    for r in range(a.rounds):
        names = list(cases)
        names = names[r % len(names):] + names[:r % len(names)]
        for name in names:
            args, procs = cases[name]
            results[name].append(figures(dlio(folder, args, procs)))
            sizes.setdefault(name.split()[0], results[name][-1]["bytes"])
        fio["lightning"].append(fio_run(folder, 1, sizes["lightning"], "fsync", 8 << 20))
        fio["fsdp"].append(fio_run(folder, a.procs, sizes["fsdp"] // a.procs, "fsync", 8 << 20))
        fio["emulated"].append(fio_run(folder, a.procs, sizes["emulated"] // a.procs, "fsync", 8 << 20))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"{'run':32} {'MiB':>8} {'save GiB/s':>10} {'vs fio':>7} {'save s':>7} {'held s':>7} {'load GiB/s':>10}")
    for name, rows in results.items():
        med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
        ref = fio.get(name.split()[0])
        ratio = f"{med['save'] / statistics.median(ref):.2f}" if ref else "-"
        print(f"{name:32} {med['bytes'] / (1 << 20):8.1f} {med['save']:10.3f} {ratio:>7} {med['save_s']:7.2f} "
              f"{med['blocking_s']:7.2f} {med['load']:10.3f}")
    for k, v in fio.items():
        print(f"fio, {k}'s bytes: {statistics.median(v):.3f} GiB/s (rounds: {', '.join(f'{x:.2f}' for x in v)})")


if __name__ == "__main__":
    main()
