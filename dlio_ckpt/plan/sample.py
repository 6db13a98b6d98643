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
  (a process's block then holds a whole one of theirs).
- **Items.** The chosen ranks' items are ordered by their stored size, and one size is drawn from each run of
  ``every`` of them, at a random place within the run (stratified by size: the sample holds small and large items
  as the full size does, so its count of items and its bytes are near the same share of the full size's, and no
  period of the state dict's order, such as Adam's three states a parameter, aliases it). ``every`` is what the
  scale's share of the bytes asks, and no more than the chosen ranks' items over their count, so every chosen rank
  can hold one.
- **Spread as at full size.** Which rank keeps an item of the size drawn is the lightest of those holding one
  (:meth:`KeptByHalves.lightest`: the lighter half of the chosen ranks, then the lighter half of that), largest
  sizes first; a chosen rank left without an item takes one of the size its half lacks. Every process then holds a
  like share of the bytes, as at full size, where the share is a few large items: Megatron's llama3_70b at
  0.0002 is 2.8 of its 13,828 items' worth, where items over 100 MB hold 72 to 73 % of each rank's bytes; left to
  chance, 74 % of its sample lay on one of 2 processes, and one run's projection from it was 1.7 times the one
  from 0.005 (``bench/results/2026-12-07-miniature.md``). On as many processes as chosen ranks, a rank's one item cannot
  match, and the console says so.
- **At least one item a chosen rank**: where the scale's share is fewer items than the chosen ranks, the sample
  holds more than that share (the ratio said is the one held).
- **Files.** A file keeps its name and its kept items in their order; a file left without items is not written, so
  a rank with several files may write fewer, with fewer writer threads, than at full size.

The load reads what the full-size load reads of the kept items (:func:`dlio_ckpt.plan.reads.sample_reads`).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
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
    if not writers:  # no file of items to keep any from
        return Plan(full.layout, tuple(_kept(r, set(), item_size) for r in full.ranks), full.coordinator,
                    full.folder, sample=True).miniature_of(full)
    items = sum(len(f.items) for r in writers for f in r.files if isinstance(f, ItemFile))
    count = min(len(writers), max(MIN_WRITING_RANKS, int(scale * items / MIN_ITEMS_PER_RANK)))
    rng = random.Random(SEED)
    chosen = [writers[rng.randrange(j * len(writers) // count, (j + 1) * len(writers) // count)] for j in range(count)]
    placed = [(j, k, item) for j, r in enumerate(chosen) for k, f in enumerate(r.files) if isinstance(f, ItemFile)
              for item in f.items]
    size_of = [item_size(item) for _, _, item in placed]
    held, sizes, left = sum(size_of), sorted(size_of, reverse=True), _Left(placed, size_of)
    kept, halves = set(), KeptByHalves(count)
    every = max(1.0, min(held / (scale * full.stored_bytes), len(placed) / count))  # a run at least a chosen rank
    for lo, hi in runs(len(placed), every):
        size = sizes[rng.randrange(lo, hi)]
        j = halves.lightest(left.holders[size], rng)
        kept.add(left.take(size, j, rng))
        halves.add(j, size)
    for j in range(count):  # an item at least on each chosen rank: of the size its half lacks
        if not halves.held(j):
            size = min(sorted(left.sizes_on(j)), key=lambda size: abs(size - halves.lacking(j)))
            kept.add(left.take(size, j, rng))
            halves.add(j, size)
    named = {(chosen[j].rank, k, item) for j, k, item in kept}
    ranks = tuple(_kept(r, named, item_size) for r in full.ranks)
    return Plan(full.layout, ranks, full.coordinator, full.folder, sample=True).miniature_of(full)


class _Left:
    """The chosen ranks' items not kept yet, by stored size and rank, each rank's in their order in the plan; and
    by size, the ranks that still hold one, in order (so a draw costs a few steps, not a pass over the items)."""

    def __init__(self, placed: list[tuple[int, int, Item]], size_of: list[int]) -> None:
        self.items: dict[int, dict[int, list[tuple[int, int, Item]]]] = {}
        for p, size in zip(placed, size_of, strict=True):
            self.items.setdefault(size, {}).setdefault(p[0], []).append(p)
        self.holders = {size: sorted(by_rank) for size, by_rank in self.items.items()}

    def take(self, size: int, j: int, rng: random.Random) -> tuple[int, int, Item]:
        """One of rank ``j``'s items of ``size``, at random, no longer left."""
        mine = self.items[size][j]
        pick = mine.pop(rng.randrange(len(mine)))
        if not mine:
            holders = self.holders[size]
            holders.pop(bisect_left(holders, j))
        return pick

    def sizes_on(self, j: int) -> set[int]:
        return {size for size, by_rank in self.items.items() if by_rank.get(j)}


class KeptByHalves:
    """The bytes each of ``count`` chosen ranks keeps, summed over every half of them, half of a half, and so on
    (the nodes of the halving :meth:`lightest` walks), so each step of a draw reads a sum instead of adding one."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.sums: dict[tuple[int, int], int] = {}

    def held(self, j: int) -> int:
        """The bytes chosen rank ``j`` keeps."""
        return self.sums.get((j, j + 1), 0)

    def add(self, j: int, nbytes: int) -> None:
        lo, hi = 0, self.count
        while True:
            self.sums[(lo, hi)] = self.sums.get((lo, hi), 0) + nbytes
            if hi - lo == 1:
                return
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if j < mid else (mid, hi)

    def lightest(self, among: list[int], rng: random.Random) -> int:
        """Which of the chosen ranks ``among`` (in order) takes the next item: the lighter half of the chosen
        ranks (bytes kept a rank, where one half holds more ranks), then the lighter half of that, down to one
        rank; ties at random. Processes play contiguous blocks of ranks, and the chosen ranks are one a block, so
        every split of them into 2, 4, 8 ... contiguous groups keeps a like share of the bytes, as at full size,
        whatever the process count."""
        lo, hi, sums, n = 0, self.count, self.sums, len(among)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            i = bisect_left(among, lo)
            j = bisect_left(among, mid, i)
            if not (i < n and among[i] < mid):  # only the upper half holds one ([lo, hi) holds one at least)
                lo = mid
            elif not (j < n and among[j] < hi):
                hi = mid
            else:
                left, right = sums.get((lo, mid), 0) / (mid - lo), sums.get((mid, hi), 0) / (hi - mid)
                lo, hi = (lo, mid) if left < right or left == right and rng.random() < 0.5 else (mid, hi)
        return lo

    def lacking(self, j: int) -> float:
        """The bytes the half of the chosen ranks that holds ``j`` lacks against the other (per rank, where the
        halves differ by one); nothing where there is no other half."""
        mid = self.count // 2
        if not mid:
            return 0.0
        (own, n_own), (other, n_other) = ((self.sums.get((0, mid), 0), mid), (self.sums.get((mid, self.count), 0),
                                                                              self.count - mid))
        if j >= mid:
            (own, n_own), (other, n_other) = (other, n_other), (own, n_own)
        return other / n_other * n_own - own


def _kept(rank: RankPlan, kept: set[tuple[int, int, Item]], item_size: Callable[[Item], int]) -> RankPlan:
    """``rank`` with its files holding only the ``kept`` items (rank, file, item), in their order."""
    files = []
    for k, f in enumerate(rank.files):
        mine = tuple(item for item in f.items if (rank.rank, k, item) in kept) if isinstance(f, ItemFile) else ()
        if mine:
            files.append(ItemFile(f.stem, mine, sum(i.nbytes for i in mine), sum(item_size(i) for i in mine)))
    return replace(rank, files=tuple(files))


def runs(n: int, every: float) -> list[tuple[int, int]]:
    """Runs of about ``every`` among ``n`` positions, of whole positions: from ``ceil(j * every)`` to
    ``ceil((j + 1) * every)``, the last cut at ``n``."""
    out, j = [], 0
    while (lo := math.ceil(j * every)) < n:
        out.append((lo, min(n, math.ceil((j + 1) * every))))
        j += 1
    return out
