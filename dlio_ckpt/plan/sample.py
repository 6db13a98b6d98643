"""A miniature that keeps whole items (``checkpoint.miniature=sample``): a sample of the full-size plan's items,
each at its full size, on ranks spread over the job.

Why: the default miniature shrinks every tensor and keeps every file, item and call, so at small scales the
time per item (the processes' CPU as they play a framework's calls item by item, the storage's latency per call)
is most of a save's time, and one run's time over its bytes ratio foretold 2 to 28 times what a run 200 times
larger measured (``bench/results/2026-12-06-miniature.md``). A sample keeps what sets the time at full size: each
item's bytes beside its calls, as MLPerf's subset mode keeps full-size files on a subset of the ranks. Its bytes
over the full size's are then the ratio of the time spent per byte and per item alike.

How, the same on every run (it depends on the plan and the scale alone, so ``plan`` shows what a run writes and a
load-only run at another process count reads it back):

- **Ranks.** The ranks that write are spread over the job, one at random from each of as many equal blocks of
  the ranks (at random, not evenly spaced: ranks evenly spaced by a multiple of the tensor parallelism would all
  be its rank 0, whose items are not the others'). As many as keep :data:`MIN_ITEMS_PER_RANK` items each where
  the scale allows, and at least :data:`MIN_WRITING_RANKS`. A process plays a contiguous block of ranks, so every
  process writes on 1, 2, 4 or 8 processes where 8 ranks are chosen, and on P processes wherever 2P or more are
  (a process's block then holds a whole one of theirs). Where the scale's share is a few large items (Megatron's
  llama3_70b at 0.0002: 2.8 of its 13,828 items' worth, where items over 100 MB hold 72 to 73 % of each rank's
  bytes), the processes cannot all hold a like share of the bytes, as they do at full size.
- **Items.** The chosen ranks' items are ordered by their stored size, and one is kept from each run of ``every``
  of them, at a random place within the run (stratified by size: the sample holds small and large items as the
  full size does, so its count of items and its bytes are near the same share of the full size's, and no period
  of the state dict's order, such as Adam's three states a parameter, aliases it). ``every`` is what the scale's
  share of the bytes asks.
- **At least one item a chosen rank**: where the scale's share is fewer items than the chosen ranks, the sample
  holds more than that share (the ratio said is the one held).
- **Files.** A file keeps its name and its kept items in their order; a file left without items is not written, so
  a rank with several files may write fewer, with fewer writer threads, than at full size.

The load reads what the full-size load reads of the kept items (:func:`dlio_ckpt.plan.reads.sample_reads`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import replace

from dlio_ckpt.plan.types import Item, ItemFile, Plan, RankPlan

MIN_ITEMS_PER_RANK = 16
MIN_WRITING_RANKS = 8
SEED = 0


def sampled(full: Plan, scale: float, item_size: Callable[[Item], int]) -> Plan:
    """A miniature of ``full`` (a plan of files of items) holding about ``scale`` of its stored bytes in whole
    items; ``item_size``: an item's stored archive (the layout's)."""
    writers = [r for r in full.ranks if any(isinstance(f, ItemFile) and f.items for f in r.files)]
    items = sum(len(f.items) for r in writers for f in r.files if isinstance(f, ItemFile))
    count = min(len(writers), max(MIN_WRITING_RANKS, int(scale * items / MIN_ITEMS_PER_RANK)))
    rng = random.Random(SEED)
    chosen = [writers[rng.randrange(j * len(writers) // count, (j + 1) * len(writers) // count)] for j in range(count)]
    placed = [(r.rank, k, item) for r in chosen for k, f in enumerate(r.files) if isinstance(f, ItemFile)
              for item in f.items]
    held = sum(item_size(item) for _, _, item in placed)
    by_size = sorted(range(len(placed)), key=lambda p: item_size(placed[p][2]))
    kept = {placed[by_size[p]] for p in picks(len(placed), max(1.0, held / (scale * full.stored_bytes)), rng)}
    holding = {rank for rank, _, _ in kept}
    for r in chosen:  # an item at least on each chosen rank
        if r.rank not in holding:
            kept.add(rng.choice([p for p in placed if p[0] == r.rank]))
    ranks = tuple(_kept(r, kept, item_size) for r in full.ranks)
    return Plan(full.layout, ranks, full.coordinator, sample=True).miniature_of(full)


def _kept(rank: RankPlan, kept: set[tuple[int, int, Item]], item_size: Callable[[Item], int]) -> RankPlan:
    """``rank`` with its files holding only the ``kept`` items (rank, file, item), in their order."""
    files = []
    for k, f in enumerate(rank.files):
        mine = tuple(item for item in f.items if (rank.rank, k, item) in kept) if isinstance(f, ItemFile) else ()
        if mine:
            files.append(ItemFile(f.stem, mine, sum(i.nbytes for i in mine), sum(item_size(i) for i in mine)))
    return replace(rank, files=tuple(files))


def picks(n: int, every: float, rng: random.Random) -> list[int]:
    """Positions among ``n``: one at random within each run of about ``every`` (runs of whole positions, from
    ``ceil(j * every)`` to ``ceil((j + 1) * every)``, the last cut at ``n``), none twice."""
    out, j = [], 0
    while (lo := math.ceil(j * every)) < n:
        out.append(rng.randrange(lo, min(n, math.ceil((j + 1) * every))))
        j += 1
    return out
