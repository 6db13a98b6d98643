"""A miniature that keeps whole items (``checkpoint.miniature=sample``): a sample of the full-size plan's items,
each at its full size, on ranks spread over the job.

Why: the default miniature shrinks every tensor and keeps every file, item and call, so at small scales the
time per item (the processes' CPU as they play a framework's calls item by item, the storage's latency per call)
is most of a save's time, and one run's time over its bytes ratio foretold 2 to 28 times what a run 200 times
larger measured (``bench/results/2026-12-06-miniature.md``). A sample keeps what sets the time at full size: each
item's bytes beside its calls, as MLPerf's subset mode keeps full-size files on a subset of the ranks. Its bytes
over the full size's are then the ratio of the time spent per byte and per item alike.

How: the ranks that write are spread evenly over the job (rank 0 among them), as many as keep at least
:data:`MIN_ITEMS_PER_RANK` items each where the scale allows, and at least one a process (the run's; ``plan``
assumes one): a process plays a contiguous block of ranks, so the spread keeps each process writing, with the
writer threads it has at full size. Of each chosen rank's items (its files in order), one in every ``every`` is
kept, at a random place within each run of ``every`` (jittered, so that no period of the state dict's order, such
as Adam's three states a parameter, aliases it), the same on every run, and at least one a writing rank (so a
scale whose share of the bytes is fewer items than there are processes holds more than that share: the ratio said
is the one held). A file keeps its kept items in order and its name; a file left without items is not written.
The load reads what the full-size load reads of the kept items (:func:`dlio_ckpt.plan.reads.sample_reads`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from dlio_ckpt.plan.types import Item, ItemFile, Plan, RankPlan

MIN_ITEMS_PER_RANK = 16


def sampled(full: Plan, scale: float, item_size: Callable[[Item], int], processes: int = 1) -> Plan:
    """A miniature of ``full`` (a plan of files of items) holding about ``scale`` of its stored bytes in whole
    items, on at least ``processes`` ranks where it has them; ``item_size``: an item's stored archive (the
    layout's)."""
    writers = [r for r in full.ranks if r.files]
    items = sum(len(f.items) for r in writers for f in r.files if isinstance(f, ItemFile))
    count = min(len(writers), max(processes, int(scale * items / MIN_ITEMS_PER_RANK)))
    chosen = {writers[j * len(writers) // count].rank for j in range(count)}
    held = sum(f.size for r in writers if r.rank in chosen for f in r.files if isinstance(f, ItemFile))
    every = max(1.0, held / (scale * full.stored_bytes))
    ranks = tuple(_kept(r, every, item_size) if r.rank in chosen else replace(r, files=()) for r in full.ranks)
    return Plan(full.layout, ranks, full.coordinator, sample=True).miniature_of(full)


def _kept(rank: RankPlan, every: float, item_size: Callable[[Item], int]) -> RankPlan:
    """``rank`` with one item in every ``every`` of its files' items kept whole (:func:`picks`)."""
    placed = [(k, item) for k, f in enumerate(rank.files) if isinstance(f, ItemFile) for item in f.items]
    kept = {placed[p] for p in picks(len(placed), every, random.Random(rank.rank))}
    files = []
    for k, f in enumerate(rank.files):
        assert isinstance(f, ItemFile), "a sample is of files of items (the layout's item_size)"
        mine = tuple(item for item in f.items if (k, item) in kept)
        if mine:
            files.append(ItemFile(f.stem, mine, sum(i.nbytes for i in mine), sum(item_size(i) for i in mine)))
    return replace(rank, files=tuple(files))


def picks(n: int, every: float, rng: random.Random) -> list[int]:
    """Positions among ``n``: one at random within each run of ``every`` (the last run's only if it falls
    within ``n``), at least one."""
    out, j = [], 0
    while j * every < n:
        if (at := int(j * every + rng.random() * every)) < n:
            out.append(at)
        j += 1
    return out or [rng.randrange(n)]

