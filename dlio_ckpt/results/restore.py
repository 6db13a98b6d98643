"""What ``summary.json`` (``io.restore``) and ``plan`` say of a restore: what each rank needs and reads, in all and
per rank, the bytes it restores, and whether it is the framework's own load. One module for both, so that a plan
and a run say the same of the same restore; the restore itself is the plan's (:mod:`dlio_ckpt.plan.reads`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from dlio_ckpt.plan.layouts import load_caveat
from dlio_ckpt.plan.reads import RestorePlan, joined_reads
from dlio_ckpt.plan.types import Plan


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
    (:func:`~dlio_ckpt.plan.reads.joined_reads`), each run in requests of at most ``chunk`` bytes (on object
    stores a ranged GET each)."""

    follows: str
    chunk: int

    def spans(self, ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        return list(joined_reads(tuple(ranges)))

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


def _restored(restore: RestorePlan, file_size: Callable[[int, int], int],
              ) -> dict[tuple[int, int], tuple[tuple[int, int], ...]]:
    """Each saved file some rank reads, (writer rank, index), and the spans (start, end) of it read, each byte once."""
    ranges: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for r in restore.ranks:
        for f in r.files:
            ranges.setdefault((f.rank, f.index), []).extend(f.ranges or [(0, file_size(f.rank, f.index))])
    return {key: joined_reads(tuple(sorted(each))) for key, each in ranges.items()}


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
