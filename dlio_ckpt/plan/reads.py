"""What each rank of a restore reads, as a plan: whole files, or byte ranges of other ranks' files when the load
runs at another world size than the save (resharding) or wants the model alone.

Why a plan of its own: a real restore is not the save played backwards. A DCP load reads ``.metadata``
on every rank, then, for every tensor it needs, the stored chunks that overlap its own shard, wherever
they lie (ByteCheckpoint, NSDI 2025: the read pattern decides the restore's time). The layout decides
what its framework reads (its ``restore``, asked by :func:`dlio_ckpt.plan.layouts.restore_plan`); this module
holds the shape of the answer and its geometry (ranges joined into spans, a sample's reads taken from the full
size's), and no framework's rules. What ``summary.json`` says of a restore is
:mod:`dlio_ckpt.results.restore`'s.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from dlio_ckpt.plan.types import Item, ItemFile, Plan, PlannedFile


@dataclass(frozen=True)
class FileReads:
    """One file a rank reads: the ``index``-th file of writer ``rank``, whole (``ranges`` empty) or
    the byte ranges (offset, length) it needs, in the order the framework reads them."""

    rank: int
    index: int
    ranges: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class RankReads:
    """One reading rank's restore: its files in order, and the bytes of state it needs from them
    (tensor elements; what it reads beyond is the read amplification)."""

    rank: int
    files: tuple[FileReads, ...]
    needed: int


@dataclass(frozen=True)
class RestorePlan:
    """The whole load: every reading rank's reads, the world it runs at, what it loads, and which
    framework's reader it follows (said in summary.json)."""

    world_size: int
    saved_world_size: int
    model_only: bool
    ranks: tuple[RankReads, ...]
    follows: str


def by_file(rank: int, reads: list[tuple[int, int, int, int]], needed: int) -> RankReads:
    """A rank's reads, (writer rank, file, offset, length) in the order its framework issues them, grouped
    as DCP's ``FileSystemReader.read_data`` reads them: file by file in the order each first appears,
    each file's reads in their order (DCP's and Megatron's loads alike)."""
    files: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for writer, k, offset, length in reads:
        files.setdefault((writer, k), []).append((offset, length))
    return RankReads(rank, tuple(FileReads(w, k, tuple(r)) for (w, k), r in files.items()), needed)


def joined_reads(ranges: tuple[tuple[int, int], ...], align: int = 1) -> tuple[tuple[int, int], ...]:
    """What a sequential reader asks of storage for ``ranges`` (offset, length), read one after another:
    each widened to whole ``align`` blocks (O_DIRECT), then those that overlap or touch joined into one
    read, as (start, end)."""
    out: list[tuple[int, int]] = []
    for offset, length in ranges:
        lo, hi = offset - offset % align, -(-(offset + length) // align) * align
        if out and out[-1][0] <= lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def whole_files(plan: Plan, follows: str) -> RestorePlan:
    """Each rank reads its own files whole at the save's world size: DLIO's read phase."""
    ranks = tuple(RankReads(r.rank, tuple(FileReads(r.rank, k) for k in range(len(r.files))), r.payload_bytes)
                  for r in plan.ranks)
    return RestorePlan(plan.world_size, plan.world_size, False, ranks, follows)


Piece = tuple[int, int, int]  # a kept item: its (start, end) in the full-size file, its start in the sample's


def sample_reads(full: RestorePlan, plan: Plan, item_size: Callable[[Item], int]) -> RestorePlan:
    """What a sample's load reads (``checkpoint.miniature=sample``, :mod:`dlio_ckpt.plan.sample`): the full-size
    load's reads, ``full``, of the items ``plan`` kept, each where it lies in the sample's file, in the full load's
    order; every rank of the load keeps its place, and its need shrinks with what it still reads. Why not the
    layout's restore of the sample: a framework's load reads by the tensors it needs, which a sample does not all
    hold; mapped, each kept item is read by the ranks, and as many times, as at full size (Megatron's replicas)."""
    assert plan.full_size is not None
    whole, kept = plan.full_size.ranks, _kept_items(plan, item_size)
    ranks = []
    for reader in full.ranks:
        reads, asked, got = [], 0, 0
        for f in reader.files:
            ranges = f.ranges or ((0, _item_file_size(whole[f.rank].files[f.index])),)
            asked += sum(n for _, n in ranges)
            if (f.rank, f.index) in kept:
                index, pieces = kept[(f.rank, f.index)]
                if mine := tuple(_within(pieces, ranges)):
                    reads.append(FileReads(f.rank, index, mine))
                    got += sum(n for _, n in mine)
        ranks.append(RankReads(reader.rank, tuple(reads), round(reader.needed * got / asked) if asked else 0))
    return replace(full, ranks=tuple(ranks))


def _item_file_size(file: PlannedFile) -> int:
    """A file of items' stored bytes: a sample is made only of a plan of such files."""
    assert isinstance(file, ItemFile)
    return file.size


def _kept_items(plan: Plan, item_size: Callable[[Item], int]) -> dict[tuple[int, int], tuple[int, list[Piece]]]:
    """Where a sample's items lie: by (writer rank, index of its full-size file), the sample's file's index and
    each kept item's (start, end) in the full-size file and start in the sample's, in order."""
    assert plan.full_size is not None
    out: dict[tuple[int, int], tuple[int, list[Piece]]] = {}
    for r in plan.ranks:
        full_files = plan.full_size.ranks[r.rank].files
        index = {f.stem: k for k, f in enumerate(full_files)}
        for m, f in enumerate(r.files):
            k, whole = index[f.stem], full_files[index[f.stem]]
            assert isinstance(f, ItemFile) and isinstance(whole, ItemFile)
            starts, at = {}, 0
            for item in whole.items:
                starts[id(item)], at = at, at + item_size(item)
            pieces, at = [], 0
            for item in f.items:
                n = item_size(item)
                pieces.append((starts[id(item)], starts[id(item)] + n, at))
                at += n
            out[(r.rank, k)] = (m, pieces)
    return out


def _within(kept: list[Piece], ranges: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The parts of ``ranges`` (offset, length in a full-size file) that lie on kept items, ``kept`` (start, end in
    that file, start in the sample's, in order), each as (offset, length) in the sample's file."""
    ends = [hi for _, hi, _ in kept]
    for offset, n in ranges:
        k = bisect.bisect_right(ends, offset)
        while k < len(kept) and kept[k][0] < offset + n:
            lo, hi, at = kept[k]
            yield at + max(lo, offset) - lo, min(hi, offset + n) - max(lo, offset)
            k += 1
