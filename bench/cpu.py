#!/usr/bin/env python3
"""What the emulator's own work costs a core: making the synthetic bytes and checking them on read.

A save hands the storage windows of the synthetic pool, each stamped first (32 bytes per 4 KiB
block); a verified load compares every byte read with the window it should equal. Both run on the
CPU of the process doing the I/O, so their speed per core is where the emulator would become the
bottleneck: storage faster than (processes x this) per host would be measured short. Rounds
alternate the two measurements; medians and quartiles, one thread, this machine.

    python bench/cpu.py --chunk 8388608 --gib 4 --rounds 7
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlio_ckpt.io.synthetic import SyntheticData, file_key, first_difference  # noqa: E402

GIB = 1 << 30


def stamping(data: SyntheticData, chunk: int, nbytes: int) -> float:
    """GiB/s of windows made ready to write (what a save asks of the generator per chunk)."""
    key, t0 = file_key(1, 0, 0), time.process_time()
    for k in range(nbytes // chunk):
        data.window(key, k * chunk, chunk)
    return nbytes / (time.process_time() - t0) / GIB


def full_compare(chunk: int, nbytes: int, a: memoryview, b: memoryview) -> float:
    """GiB/s of memcmp over two equal chunk buffers (the whole of a verified read's compare)."""
    t0 = time.process_time()
    for _ in range(nbytes // chunk):
        assert first_difference(a, b) is None
    return nbytes / (time.process_time() - t0) / GIB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunk", type=int, default=8 << 20)
    ap.add_argument("--gib", type=float, default=4.0, help="GiB per measurement")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    nbytes = int(a.gib * GIB) // a.chunk * a.chunk
    data = SyntheticData(1, a.chunk)
    maps = [mmap.mmap(-1, a.chunk) for _ in range(2)]
    for m in maps:
        m.write(os.urandom(a.chunk))
    x, y = (memoryview(m) for m in maps)
    y[:] = x
    rows: dict[str, list[float]] = {"stamp (save)": [], "memcmp (verify)": []}
    for i in range(a.rounds):
        steps = [("stamp (save)", lambda: stamping(data, a.chunk, nbytes)),
                 ("memcmp (verify)", lambda: full_compare(a.chunk, nbytes, x, y))]
        for name, step in (steps if i % 2 == 0 else steps[::-1]):
            rows[name].append(step())
    print(f"chunk {a.chunk} bytes, {nbytes / GIB:.1f} GiB per measurement, {a.rounds} rounds, one thread, "
          f"host {os.uname().nodename}; GiB/s per core of CPU time, median [quartiles]")
    medians = {}
    for name, values in rows.items():
        q1, medians[name], q3 = statistics.quantiles(values, n=4, method="inclusive")
        print(f"  {name:16s} {medians[name]:7.1f} [{q1:.1f}, {q3:.1f}]  ({1 / medians[name]:.4f} CPU s/GiB)")
    both = 1 / sum(1 / m for m in medians.values())  # a verified read stamps the window it compares with
    print(f"  a verified read (stamp + memcmp): {both:.1f} GiB/s per core ({1 / both:.4f} CPU s/GiB)")
    x.release()
    y.release()


if __name__ == "__main__":
    main()
