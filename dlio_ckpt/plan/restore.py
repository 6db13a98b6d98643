"""What each rank of a restore reads: whole files, or byte ranges of other ranks' files when the load
runs at another world size than the save (resharding) or wants the model alone.

Why a plan of its own: a real restore is not the save played backwards. A DCP load reads ``.metadata``
on every rank, then, for every tensor it needs, the stored chunks that overlap its own shard, wherever
they lie (ByteCheckpoint, NSDI 2025: the read pattern decides the restore's time). The layout decides
what its framework reads (its ``restore``, asked by :func:`restore_plan`); this module holds the shape of
the answer and what a reader needs to know of it, and no framework's rules.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.layouts import get_layout
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


def spans(ranges: tuple[tuple[int, int], ...], align: int = 1) -> tuple[tuple[int, int], ...]:
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


def _spread(values: list[int]) -> dict[str, float]:
    """min, median, mean, max of a non-empty list (of ranks' or reads' figures)."""
    ordered = sorted(values)
    return {"min": ordered[0], "median": ordered[len(ordered) // 2], "mean": sum(ordered) / len(ordered),
            "max": ordered[-1]}


class Reader(Protocol):
    """How a load's ranges of one file reach storage where a storage's client reads them its own way
    (:class:`dlio_ckpt.io.backends.base.ItemReader`: on S3 s3torchconnector's reader): whose reader, the spans
    (start, end) it asks, the requests one span takes."""

    @property
    def follows(self) -> str: ...

    def spans(self, ranges: Iterable[tuple[int, int]], /) -> list[tuple[int, int]] | None: ...
    def requests(self, nbytes: int, /) -> int: ...


@dataclass(frozen=True)
class Sequential:
    """The reader a plan's restore follows (its layout's ``follows``): adjacent ranges read as one run
    (:func:`spans`), each run in requests of at most ``chunk`` bytes (on object stores a ranged GET each)."""

    follows: str
    chunk: int

    def spans(self, ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        return list(spans(tuple(ranges)))

    def requests(self, nbytes: int) -> int:
        return -(-nbytes // self.chunk)


def figures(restore: RestorePlan, file_size: Callable[[int, int], int], metadata_bytes: int, chunk: int,
            reader: Reader | None = None) -> dict[str, Any]:
    """summary.json's ``io.restore``: what the load needs and reads, per rank and in all, from its plan.
    ``file_size(rank, index)``: a saved file's bytes; ``metadata_bytes``: what every rank reads first.
    A read is what a rank asks for in one go: a whole file, or a span of ranges as ``reader`` joins them, each
    in ``reader``'s requests (by default the layout's reader, :class:`Sequential` with requests of at most
    ``chunk`` bytes); ``follows`` is ``reader``'s where some rank reads ranges."""
    reader = reader or Sequential(restore.follows, chunk)
    reads: list[list[int]] = []
    requests: list[int] = []
    ranged_files = False
    for r in restore.ranks:
        sizes, ranged = [metadata_bytes] if metadata_bytes else [], 0
        for f in r.files:
            runs = [end - start for start, end in (reader.spans(f.ranges) or ())] if f.ranges else []
            ranged_files = ranged_files or bool(runs)
            sizes += runs or [file_size(f.rank, f.index)]
            ranged += sum(reader.requests(n) for n in runs)
        reads.append(sizes)
        requests.append(ranged)
    needed = [r.needed for r in restore.ranks]
    read = [sum(s) for s in reads]
    every = [n for sizes in reads for n in sizes]
    histogram: dict[str, int] = {}
    for n in every:  # by power of two: "<=4096" holds reads of 2049..4096 bytes
        bound = 1 << max(n - 1, 0).bit_length()
        histogram[f"<={bound}"] = histogram.get(f"<={bound}", 0) + 1
    return {"world_size": restore.world_size, "saved_world_size": restore.saved_world_size,
            "model_only": restore.model_only, "resharded": restore.world_size != restore.saved_world_size,
            "follows": reader.follows if ranged_files else restore.follows, "bytes_needed": sum(needed),
            "bytes_read": sum(read),
            "read_amplification": sum(read) / sum(needed) if sum(needed) else None,
            "metadata_bytes_per_rank": metadata_bytes,
            "bytes_read_per_rank": _spread(read), "bytes_needed_per_rank": _spread(needed),
            "reads_per_rank": _spread([len(s) for s in reads]),
            "ranged_requests_per_rank": _spread(requests), "files_per_rank": _spread([len(r.files) for r in
                                                                                         restore.ranks]),
            "read_bytes": {**_spread(every), "histogram": dict(sorted(histogram.items(),
                                                                        key=lambda kv: int(kv[0][2:])))},
            "imbalance": max(read) / (sum(read) / len(read)) if sum(read) else 1.0,
            "heaviest_rank": read.index(max(read))}


def load_caveat(workload: Any, restore: RestorePlan) -> str | None:
    """In plain words, where the read phase is not held to the framework's own load (None where it is).
    Why said: such a load is verified byte for byte all the same, and "verified" alone reads as if its
    pattern were the framework's. A load where every rank reads its own files whole, in a layout whose
    framework loads otherwise, stands in for a load not modelled; a layout says which of its modelled loads
    are not held to its framework's (:class:`~dlio_ckpt.plan.layouts.base.Layout`)."""
    layout = get_layout(workload.checkpoint.layout)
    own_whole = all(f.rank == r.rank and not f.ranges for r in restore.ranks for f in r.files)
    if own_whole and layout.whole_file_load is not None:
        return f"not the framework's own load ({layout.whole_file_load}): each rank reads its own files whole"
    return layout.load_caveat(workload) if layout.load_caveat is not None else None


def _restored(restore: RestorePlan, file_size: Callable[[int, int], int],
              ) -> dict[tuple[int, int], tuple[tuple[int, int], ...]]:
    """Each saved file some rank reads, (writer rank, index), and the spans (start, end) of it read, each byte once."""
    ranges: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for r in restore.ranks:
        for f in r.files:
            ranges.setdefault((f.rank, f.index), []).extend(f.ranges or [(0, file_size(f.rank, f.index))])
    return {key: spans(tuple(sorted(each))) for key, each in ranges.items()}


def restored_bytes(restore: RestorePlan, file_size: Callable[[int, int], int], metadata_bytes: int) -> int:
    """The stored bytes a load restores, each once however many ranks read it: every byte of the files or
    ranges some rank reads, and the metadata every rank reads first. A whole load's is what the save wrote
    (held to it in the tests); with ``restore.model_only``, the model's part. Ours (``io.restore.bytes_restored``):
    DLIO's figures are over the payload (:func:`restored_payload`)."""
    return metadata_bytes + sum(hi - lo for each in _restored(restore, file_size).values() for lo, hi in each)


def stored_size(plan: Plan, fmt: Any) -> Callable[[int, int], int]:
    """A saved file's bytes as stored, by (writer rank, index), each worked out once: many ranks read the same
    file (every rank of a MoE job its dense model), and a file's size is its format's headers made whole (a
    ``torch.save`` archive pickled: the figures of 2048 ranks reading a 2-layer tiny_moe took 3.9 s uncached, 0.44 s
    so, on the development machine)."""
    from dlio_ckpt.plan.formats import planned_size

    @functools.cache
    def size(rank: int, k: int) -> int:
        return planned_size(fmt, plan.ranks[rank].files[k])

    return size


def restored_payload(restore: RestorePlan, plan: Plan, fmt: Any) -> int:
    """The payload (tensor bytes, no headers, no metadata) a load restores, each byte once: DLIO's count of a
    checkpoint (``checkpoint_size_GB``, the payload its ranks' states hold), over which DLIO's load figure is taken
    as its save's is. A whole load's is the plan's ``total_payload_bytes`` (held in the tests); with
    ``restore.model_only``, the model's."""
    size = stored_size(plan, fmt)
    total = 0
    for (rank, k), read in _restored(restore, size).items():
        file = plan.ranks[rank].files[k]
        if read == ((0, size(rank, k)),):
            total += file.payload_bytes
            continue
        at = 0
        for segment in fmt.segments(file):  # the payload's segments within the spans read
            n = len(segment) if isinstance(segment, bytes) else segment
            if not isinstance(segment, bytes):
                total += sum(max(0, min(hi, at + n) - max(lo, at)) for lo, hi in read)
            at += n
    return total


def described(workload: Any, restore: RestorePlan, plan: Plan, fmt: Any, reader: Reader | None = None,
              ) -> dict[str, Any]:
    """summary.json's ``io.restore``, and what ``plan`` prints of a restore: what each rank needs and reads
    (:func:`figures`, as ``reader`` reads the ranges where the storage's client reads them its own way, else as the
    layout's reader does), the heaviest rank's need, the stored bytes the load restores (``bytes_restored``), and
    whether it is the framework's own load (``frameworks_own_load``, ``caveat`` beside ``follows``). One function
    for both, so that a plan and a run say the same of the same restore."""
    size = stored_size(plan, fmt)
    metadata = sum(c.size for c in plan.coordinator)
    caveat = load_caveat(workload, restore)
    out: dict[str, Any] = {}
    for key, value in figures(restore, size, metadata, workload.checkpoint.chunk_size, reader).items():
        if key == "bytes_needed":
            out["bytes_restored"] = restored_bytes(restore, size, metadata)
        out[key] = value
        if key == "follows":  # the plain words beside the reader they qualify
            out.update(frameworks_own_load=caveat is None, caveat=caveat)
    out["heaviest_rank_bytes_needed"] = restore.ranks[out["heaviest_rank"]].needed
    return out


def at_saved_world(workload: Any, plan: Plan, world: int, why: str) -> None:
    """A load at another world size than the save's, refused where the layout's framework cannot reshard (``why``)."""
    if world != plan.world_size:
        raise ConfigError("workload.restore.world_size", world, f"must be the save's ({plan.world_size}) with "
                          f"checkpoint.layout={workload.checkpoint.layout}: {why}")


def restore_plan(workload: Any, plan: Plan) -> RestorePlan:
    """What each rank of the read phase reads: the layout's own ``restore`` where its framework reshards or
    loads the model alone (DCP); elsewhere each rank's own files whole, at the save's world size, and a load
    asked otherwise is refused with the layout's reason (its ``no_restore``), exit 2. A sample's load reads what
    the full size's reads of the kept items (:func:`sample_reads`)."""
    layout, asked = get_layout(workload.checkpoint.layout), workload.restore
    if plan.sample and plan.full_size is not None and layout.item_size is not None:
        return sample_reads(restore_plan(workload, plan.full_size), plan, layout.item_size)
    world = asked.world_size or plan.world_size
    if layout.restore is not None:
        return layout.restore(workload, plan, world, asked.model_only)
    at_saved_world(workload, plan, world, layout.no_restore)
    if asked.model_only:
        raise ConfigError("workload.restore.model_only", True, f"is not modelled with checkpoint.layout="
                          f"{workload.checkpoint.layout}: {layout.no_restore}")
    return whole_files(plan, layout.reads)


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
            ranges = f.ranges or ((0, planned_bytes(whole[f.rank].files[f.index])),)
            asked += sum(n for _, n in ranges)
            if (f.rank, f.index) in kept:
                index, pieces = kept[(f.rank, f.index)]
                if mine := tuple(_within(pieces, ranges)):
                    reads.append(FileReads(f.rank, index, mine))
                    got += sum(n for _, n in mine)
        ranks.append(RankReads(reader.rank, tuple(reads), round(reader.needed * got / asked) if asked else 0))
    return replace(full, ranks=tuple(ranks))


def planned_bytes(file: PlannedFile) -> int:
    """A file of items' stored bytes (a sample's files are)."""
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
