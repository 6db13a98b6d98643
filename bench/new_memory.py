#!/usr/bin/env python3
"""How fast this machine gives a process memory it has not used lately, beside memory just freed (bench only).

A buffered write lands in the page cache, which must find a page for every 4 KiB written. On a virtual machine
whose host takes back the memory its guest leaves free, a page the guest has not used lately costs the host a
fault, and the write runs at that rate, not the storage's; a page freed a moment ago (a removed file's) does not.
So the same save can take very different times depending on what the process and the page cache did before it
(``bench/lightning_phases.py --keep``: a Lightning save that keeps every file, as ``mode=lightning`` does, against
one whose previous file was removed). Each round, alternating:

- ``touch``: ``--mib`` MiB of new anonymous memory, one byte a page (the page faults alone), then freed;
- ``new file``: a new file of ``--mib`` MiB written in 8 MiB calls, every earlier file kept (the page cache grows);
- ``after a removal``: a file of ``--mib`` MiB removed, then a new one of the same size written (its pages reused).

Medians over rounds in GiB/s; nothing is synced (the page cache alone). Files go under ``--dir``, removed at the end.

    python bench/new_memory.py --dir /path/on/storage [--mib 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import mmap
import os
import platform
import shutil
import statistics
import time
from pathlib import Path

CALL = 8 << 20


def touch(nbytes: int) -> float:
    m = mmap.mmap(-1, nbytes)
    t0 = time.perf_counter()
    for i in range(0, nbytes, mmap.PAGESIZE):
        m[i] = 1
    seconds = time.perf_counter() - t0
    m.close()
    return seconds


def write(path: Path, nbytes: int, source: bytes) -> float:
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(nbytes // CALL):
            f.write(source)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--mib", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--settle", type=float, default=2.0, help="seconds before each measurement")
    a = ap.parse_args()
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    nbytes = a.mib << 20
    source = os.urandom(CALL)
    got: dict[str, list[float]] = {"touch": [], "new file": [], "after a removal": []}
    try:
        for r in range(a.rounds):
            order = list(got)
            order = order[r % 3:] + order[:r % 3]
            for kind in order:
                time.sleep(a.settle)
                if kind == "touch":
                    seconds = touch(nbytes)
                elif kind == "new file":
                    seconds = write(folder / f"kept{r}", nbytes, source)
                else:
                    write(folder / "removed", nbytes, source)
                    time.sleep(a.settle)
                    (folder / "removed").unlink()
                    seconds = write(folder / "removed", nbytes, source)
                    (folder / "removed").unlink()
                got[kind].append(nbytes / seconds / 2**30)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"- {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()} ({os.cpu_count()} cores), {a.mib} MiB, "
          f"{a.rounds} rounds, under {a.dir}")
    print("\n| what | median GiB/s | rounds GiB/s |\n|---|---|---|")
    for kind, rates in got.items():
        print(f"| {kind} | {statistics.median(rates):.2f} | {', '.join(f'{x:.2f}' for x in rates)} |")
    ratios = [r / n for r, n in zip(got["after a removal"], got["new file"], strict=True)]
    print(f"\nafter a removal / new file, per round: {', '.join(f'{x:.1f}' for x in ratios)} "
          f"(median {statistics.median(ratios):.1f})")


if __name__ == "__main__":
    main()
