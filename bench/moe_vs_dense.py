"""Do many small files cost this storage? One MoE workload scaled down, beside a dense one scaled to the same
checkpoint size, saved and loaded in alternating rounds (``bench/layouts.py``'s runner: fsync on, caches
evicted before the load; medians, [min, max], the ratio MoE / dense).

The dense scale is found so that both plans hold the same payload bytes (within 1%); both run in the same
layout, with the same ranks and processes.

    .venv/bin/python bench/moe_vs_dense.py --moe qwen3_30b_a3b --dense llama3_8b --layout deepspeed \\
        --ranks 16 --procs 2 --scale 0.01 --rounds 5
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from layouts import GIB, overrides, run  # noqa: E402

from dlio_ckpt.config import compose  # noqa: E402
from dlio_ckpt.plan.layouts import check_job, make_plan  # noqa: E402


def planned(workload: str, layout: str, ranks: int, scale: float) -> tuple[int, int]:
    """Payload bytes and files of one checkpoint."""
    w, _, _ = compose([*overrides(workload, layout), f"++workload.checkpoint.scale={scale}"], None)
    check_job(w, ranks)
    plan = make_plan(w, ranks)
    return plan.total_payload_bytes, sum(len(r.files) for r in plan.ranks) + len(plan.coordinator)


def matching_scale(workload: str, layout: str, ranks: int, target: int) -> float:
    """The dense workload's checkpoint.scale whose payload is within 1% of ``target`` (bisection)."""
    lo, hi = 1e-6, 1.0
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        size, _ = planned(workload, layout, ranks, mid)
        if abs(size - target) <= 0.01 * target:
            return mid
        lo, hi = (mid, hi) if size < target else (lo, mid)
    raise SystemExit(f"no scale of {workload} matches {target} bytes within 1%")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--moe", default="qwen3_30b_a3b")
    p.add_argument("--dense", default="llama3_8b")
    p.add_argument("--layout", default="deepspeed")
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--scale", type=float, default=0.01, help="the MoE workload's checkpoint.scale")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--root", default=None, help="a folder on the storage to measure (default: a temporary one)")
    args = p.parse_args()
    moe_bytes, moe_files = planned(args.moe, args.layout, args.ranks, args.scale)
    dense_scale = matching_scale(args.dense, args.layout, args.ranks, moe_bytes)
    dense_bytes, dense_files = planned(args.dense, args.layout, args.ranks, dense_scale)
    print(f"{platform.node()}, {platform.machine()}, python {platform.python_version()}")
    print(f"layout {args.layout}, {args.ranks} ranks on {args.procs} processes, fsync, caches evicted before the load")
    cases = {args.moe: args.scale, args.dense: dense_scale}
    root = Path(tempfile.mkdtemp(dir=args.root))
    seen: dict[str, list[tuple[float, float, float]]] = {w: [] for w in cases}
    try:
        for r in range(args.rounds):
            for w in cases if r % 2 == 0 else reversed(list(cases)):
                seen[w].append(run(w, args.layout, args.ranks, args.procs, cases[w], root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"medians of {args.rounds} alternating rounds [min, max]")
    print("workload          scale     payload GiB  files  save GiB/s            load GiB/s")
    for w, size, files in ((args.moe, moe_bytes, moe_files), (args.dense, dense_bytes, dense_files)):
        save, load = ([x[k] for x in seen[w]] for k in (0, 1))
        print(f"{w:<17} {cases[w]:<9.3g} {size / GIB:>11.3f}  {files:>5}  {statistics.median(save):>5.2f} "
              f"[{min(save):.2f}, {max(save):.2f}]  {statistics.median(load):>5.2f} [{min(load):.2f}, {max(load):.2f}]")
    ratio = [statistics.median(x[k] for x in seen[args.moe]) / statistics.median(x[k] for x in seen[args.dense])
             for k in (0, 1)]
    print(f"MoE / dense: save {ratio[0]:.2f}, load {ratio[1]:.2f}")


if __name__ == "__main__":
    main()
