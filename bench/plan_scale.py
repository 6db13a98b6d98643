"""How ``plan``'s time and memory grow with the world size (the reason for config.world.MAX_WORLD_SIZE).

Each size runs in a new process (``plan ... --format json``, output discarded) under
``/usr/bin/time``; rounds alternate the sizes and the medians are printed.

    .venv/bin/python bench/plan_scale.py --workload llama3_405b --sizes 4096,65536,262144 --rounds 3
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one(workload: str, size: int) -> tuple[float, int]:
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "dlio_ckpt", "plan",
                        f"workload={workload}", "--world-size", str(size), "--format", "json"],
                       cwd=REPO, capture_output=True, text=True, check=True)
    seconds, kib = r.stderr.strip().splitlines()[-1].split()
    return float(seconds), int(kib) * 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="llama3_405b")
    p.add_argument("--sizes", default="4096,65536,262144")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    seen: dict[int, list[tuple[float, int]]] = {s: [] for s in sizes}
    for r in range(args.rounds):
        for size in sizes if r % 2 == 0 else reversed(sizes):
            seen[size].append(one(args.workload, size))
    print(f"{platform.node()}, {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print("world size   seconds (median)   peak RSS MiB (median)   bytes per rank")
    for size in sizes:
        sec = statistics.median(s for s, _ in seen[size])
        rss = statistics.median(m for _, m in seen[size])
        print(f"{size:>10}   {sec:>16.2f}   {rss / 2**20:>21.0f}   {rss / size:>14.0f}")


if __name__ == "__main__":
    main()
