#!/usr/bin/env python3
"""Does a buffered write's time depend on where its bytes come from? (issue 50, item 1; bench only.)

The emulated save makes its bytes from a small pool (``dlio_ckpt.io.synthetic``: 1 MiB, reused, so it stays in the
CPU's caches; each window is the pool XORed into a buffer of its own), where a real ``dcp.save`` writes from the job's
tensors, hundreds of MiB read from memory once. This asks the simpler question underneath: does a buffered write's
copy cost more from memory read once than from a cached 1 MiB? It stands for the emulated save only loosely. Each
round, one file of ``--mib`` MiB is written in 1 MiB calls from each source, then fsynced and removed:

- ``pool``: the same 1 MiB of random bytes, every call;
- ``buffer``: successive 1 MiB slices of a ``--mib`` MiB buffer (one random 1 MiB repeated), every page touched
  before the rounds.

The two alternate, their order swapped every round, so each source is as often first as second (this VM's
writes into memory freed a second ago run at another rate: ``bench/new_memory.py``). Medians of the write calls'
time and of the fsync's, per source and per place in the round.

    python bench/write_source.py --dir /path/on/storage [--mib 916] [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

CALL = 1 << 20


def write(path: Path, nbytes: int, chunk: object) -> tuple[float, float]:
    """The write calls' seconds and the fsync's, for one file written from ``chunk(offset)``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for offset in range(0, nbytes, CALL):
            os.write(fd, chunk(offset))  # type: ignore[operator]
        t1 = time.perf_counter()
        os.fsync(fd)
        t2 = time.perf_counter()
    finally:
        os.close(fd)
        path.unlink()
    return t1 - t0, t2 - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--mib", type=int, default=916, help="one file's size (916: the I/O-pattern bench's save)")
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    nbytes = a.mib * CALL
    pool = os.urandom(CALL)
    buffer = memoryview(bytearray(os.urandom(CALL) * a.mib))  # every page touched as it is filled
    sources = {"pool": lambda _: pool, "buffer": lambda offset: buffer[offset:offset + CALL]}
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    seen: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for rnd in range(a.rounds):
        order = ["pool", "buffer"] if rnd % 2 == 0 else ["buffer", "pool"]
        for place, name in enumerate(order):
            seen.setdefault((name, place), []).append(write(folder / f"write_source_{name}", nbytes, sources[name]))
            time.sleep(1)
    for (name, place), runs in sorted(seen.items()):
        print(f"  {name} {('first', 'second')[place]}: writes " + ", ".join(f"{w:.3f}" for w, _ in runs))
    print(f"- {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()} ({os.cpu_count()} cores), {a.mib} MiB a file, "
          f"{a.rounds} rounds, one file from each source a round; medians, s")
    print("\n| source | writes, all | writes, first in round | writes, second | fsync, all |\n|---|---|---|---|---|")
    for name in sources:
        first, second = seen[(name, 0)], seen[(name, 1)]
        both = first + second
        print(f"| {name} | {statistics.median(w for w, _ in both):.3f} | {statistics.median(w for w, _ in first):.3f} "
              f"| {statistics.median(w for w, _ in second):.3f} | {statistics.median(f for _, f in both):.3f} |")


if __name__ == "__main__":
    main()
