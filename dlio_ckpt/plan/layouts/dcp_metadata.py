"""The size of DCP's ``.metadata``: the pickle (protocol 4) of its ``Metadata``, without building it.

Why a count of opcodes and not a pickle: at 16,384 ranks the file describes tens of millions of chunks
(gigabytes), and it is the file every rank reads first on load. Its objects repeat a few shapes, so the
size is a sum of per-entry costs, each the opcodes Python's pickler writes for it (worked out from real
``.metadata`` files of torch 2.13.0 with ``pickletools``): a string is 3 bytes and its text (memoized), a
reference to an earlier object 2 bytes (5 once the memo passes 256 entries), an int 2, 3 or 5 bytes by
size. Held to real files by ``tests/against_frameworks/test_dcp_layout.py``: within 1.4% in its six saves (1 to 4
ranks; it
allows 2%), not to the byte.

- ``state_dict_metadata``: per tensor its properties, global size and one chunk (offsets, sizes) per shard.
- ``planner_data``: per name the path of keys that leads to it.
- ``storage_data``: per item written, its index (name, offsets) and where it lies (file, offset, length).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from dlio_ckpt.plan.formats import Calls
from dlio_ckpt.plan.formats.pt import pickled_int
from dlio_ckpt.plan.types import Item

FIXED = 1000  # the header, the class and field names pickled once, storage_meta (path, save id), version
GET, LATE_GET = 2, 5  # references to objects memoized early (class names) and late (storage_data's field names)
LOCAL_PLAN_ITEM, LOCAL_PLAN_OBJECT = 130, 100  # a WriteItem in Megatron's all_local_plans, less its offsets


@dataclass(frozen=True)
class Tensor:
    """A tensor of the state dict: its name, global shape, dtype, and whether FSDP2 shards it on dim 0."""

    fqn: str
    shape: tuple[int, ...]
    dtype: str
    sharded: bool
    split: tuple[int, int] | None = None  # routed experts on dim 0 over (EP, then FSDP2 on dim 1 over the rest)
    ep: int = 1  # routed experts on torchtitan's expert mesh: its EP degree (a load reads by that mesh's chunks)

    def chunk(self, world: int, rank: int) -> tuple[int, ...]:
        """``rank``'s shard: FSDP2's dim-0 chunk (short or empty for the last ranks), or an EP rank's experts
        with their rows split over the other ranks (every rank alike)."""
        if self.split is not None:
            ep, rest = self.split
            return (self.shape[0] // ep, self.shape[1] // rest, *self.shape[2:])
        chunk = fsdp_chunk(self.shape[0], world)
        return (max(0, min(chunk, self.shape[0] - rank * chunk)), *self.shape[1:])


def fsdp_chunk(dim0: int, world: int) -> int:
    """FSDP2's rows per shard on dim 0: ceil(dim0 / world); the last ranks get fewer or none."""
    return -(-dim0 // world)


def chunks_listed(t: Tensor, world: int) -> int:
    """The chunks DCP lists for a sharded tensor: one per rank, but the ranks past its last rows all hold
    the same empty chunk (one index), which deduplication keeps once."""
    if t.split is not None:
        return world
    return min(world, -(-t.shape[0] // fsdp_chunk(t.shape[0], world)) + 1) if t.shape[0] else 1


def _int(n: int) -> int:
    """An int's pickled bytes: the pickler's own choice of opcode (:func:`~dlio_ckpt.plan.formats.pt.pickled_int`),
    the same at DCP's protocol as at torch.save's."""
    return len(pickled_int(n))


def _str(s: str) -> int:
    """A string's pickled bytes at DCP's protocol (pickle's default, 4: SHORT_BINUNICODE or BINUNICODE, then
    MEMOIZE), where torch.save's protocol 2 writes BINUNICODE and BINPUT
    (:class:`~dlio_ckpt.plan.formats.pt.Pickler`): the one pickle this package prices rather than writes."""
    n = len(s.encode())
    return (2 if n < 256 else 5) + n + 1


def _tuple_overhead(dims: int) -> int:
    """torch.Size(t): a reference to the class, the tuple (TUPLE1-3 or MARK..TUPLE, memoized; an empty
    one unmemoized), its argument tuple, REDUCE, memos."""
    return GET + (1 if dims == 0 else 2 if dims <= 3 else 3) + 4


def _ints_over_ranks(values: Callable[[int], int], world: int) -> int:
    """Sum of int sizes of ``values(r)`` for r < world, where values is non-decreasing: by the ranks
    where the size steps up (256, 65536, 2**31), found by bisection."""
    total, start = 0, 0
    while start < world:
        size = _int(values(start))
        lo, hi = start, world  # the last rank with this size
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if _int(values(mid)) == size else (lo, mid)
        total += size * (lo - start + 1)
        start = lo + 1
    return total


def _offsets_cost(t: Tensor, world: int) -> int:
    """All ranks' chunk offsets of a sharded tensor, pickled: (min(r * chunk, dim0), 0, ...); for experts
    split on dim 1, (EP rank's first expert, its row slice, 0, ...)."""
    d0, dims = t.shape[0], len(t.shape)
    if t.split is not None:
        ep, rest = t.split
        experts, rows = d0 // ep, t.shape[1] // rest
        return (rest * sum(_int(j * experts) for j in range(ep)) + ep * sum(_int(i * rows) for i in range(rest))
                + world * (2 * (dims - 2) + _tuple_overhead(dims)))
    chunk, listed = fsdp_chunk(d0, world), chunks_listed(t, world)
    return (_ints_over_ranks(lambda r: min(r * chunk, d0), listed)
            + listed * (2 * (dims - 1) + _tuple_overhead(dims)))


def _sizes_cost(t: Tensor, world: int) -> int:
    if t.split is not None:
        return world * _size_cost(t.chunk(world, 0))
    d0, dims = t.shape[0], len(t.shape)
    chunk, listed = fsdp_chunk(d0, world), chunks_listed(t, world)
    full, rest = divmod(d0, chunk)
    rows = _int(chunk) * full + (_int(rest) if rest else 0) + _int(0) * (listed - full - (1 if rest else 0))
    return rows + listed * (sum(_int(d) for d in t.shape[1:]) + _tuple_overhead(dims))


@cache  # offsets and sizes repeat across chunks and ranks: a plan of thousands of ranks asks millions of times
def _size_cost(shape: tuple[int, ...]) -> int:
    return sum(_int(d) for d in shape) + _tuple_overhead(len(shape))


def _tensor_entry(t: Tensor, world: int) -> int:
    """``state_dict_metadata[fqn]``: TensorStorageMetadata(properties, size, chunks)."""
    head = _str(t.fqn) + 8 + GET + 17 + GET + _size_cost(t.shape) + GET + 2
    if not t.sharded:  # one chunk: offsets (0, ...) and the whole size
        return head + 1 + 14 + _size_cost((0,) * len(t.shape)) + _size_cost(t.shape) + 2
    listed = chunks_listed(t, world)
    chunks = listed * 14 + _offsets_cost(t, world) + _sizes_cost(t, world)
    return head + 2 * (-(-listed // 1000)) + chunks + 2


def _planner_entry(fqn: str, world: int) -> int:
    """``planner_data[fqn]``: the keys leading to it ('model', name) or ('optim', 'state', name, key) or
    ('optim', 'param_groups', 0, key); a key used before is a reference (a parameter's name: 1 use in 3).
    With one rank the name itself is the object state_dict_metadata pickled (a reference); with more,
    the coordinator's copy from the gathered plans is pickled anew."""
    parts = fqn.split(".")
    key = LATE_GET if world == 1 else _str(fqn)
    if parts[0] == "model":
        return key + LATE_GET + _str(".".join(parts[1:])) + 2
    if parts[1] == "state":
        name = _str(".".join(parts[2:-1]))
        return key + 1 + 2 * LATE_GET + (name + 2 * LATE_GET) // 3 + LATE_GET + 2
    return key + 1 + 2 * LATE_GET + 2 + _str(parts[-1]) + 2


def _item_cost(item: Item, offset_in_file: int, length: int) -> int:
    """``storage_data``: MetadataIndex(fqn, index, offset) -> _StorageInfo(relative_path, offset, length),
    less the chunk offsets (summed over ranks apart) and the file's name."""
    key = (11 + LATE_GET + _str(item.fqn) + LATE_GET + 1 + 2) if not item.dtype else \
        (11 + LATE_GET + _str(item.fqn) + LATE_GET + 2 + LATE_GET + 2)
    value = 11 + LATE_GET + LATE_GET + _int(offset_in_file) + LATE_GET + _int(length) + 2
    if item.dtype and not item.rows:  # a replicated tensor (Adam's 0-d steps, a buffer): offsets (0, ...)
        key += _size_cost((0,) * len(item.shape))
    return key + value


def _per_rank(buckets: list[tuple[Item, ...]], item_size: Callable[[Item], int]) -> int:
    total = 0
    for bucket in buckets:
        offset = 0
        for item in bucket:
            length = item_size(item)
            total += _item_cost(item, offset, length)
            offset += length
    return total


def metadata_size(tensors: list[Tensor], groups: tuple[Item, ...], classes: list[tuple[range, list[tuple[Item, ...]]]],
                  extras: dict[int, list[Item]], world: int, item_size: Callable[[Item], int]) -> int:
    """``classes``: runs of ranks whose shards are alike, and their files (every rank once); ``extras``: the
    replicated items a rank writes besides (placed at the end of its file here: their offsets are estimates)."""
    total = FIXED
    total += sum(_tensor_entry(t, world) for t in tensors) + sum(_str(g.fqn) + 8 for g in groups)
    total += sum(_planner_entry(t.fqn, world) for t in tensors) + sum(_planner_entry(g.fqn, world) for g in groups)
    total += sum(_offsets_cost(t, world) for t in tensors if t.sharded)  # storage_data's MetadataIndex offsets
    entries = 0
    for ranks, buckets in classes:
        total += _per_rank(buckets, item_size) * len(ranks)
        entries += len(ranks) * sum(len(b) for b in buckets)
        files = [k for k, b in enumerate(buckets) if b]
        total += sum(_str(f"__{r}_{k}.distcp") - LATE_GET for r in ranks for k in files)  # each name once in full
        end = sum(item_size(i) for i in buckets[0]) if buckets else 0
        for r in ranks:
            for item in extras.get(r, ()):
                total += _item_cost(item, end, item_size(item))
                entries += 1
    return total + 2 * (-(-entries // 1000)) + 9 * (total // 65536)


@dataclass(frozen=True)
class Chunked:
    """A tensor and its chunks (offsets, sizes) as they are listed, for layouts whose chunks do not
    follow from the world size (Megatron's: per layer and tensor-parallel rank)."""

    fqn: str
    shape: tuple[int, ...]
    chunks: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]


def listed_metadata_size(tensors: list[Chunked], objects: list[str],
                         files: list[tuple[str, list[tuple[Item, tuple[int, ...]]]]],
                         item_size: Callable[[Item], int]) -> int:
    """``.metadata`` from every chunk and every item listed (files: name, and its items with their
    offsets in the whole tensor), as Megatron's planner leaves it: no planner_data, and every rank's
    local plan kept (``all_local_plans``: per item a WriteItem whose chunk, properties and size refer to
    objects pickled before, about 130 bytes and its offsets; megatron-core 0.16.1 with torch 2.13.0)."""
    total = FIXED + 1
    for t in tensors:
        n = len(t.chunks)
        total += (_str(t.fqn) + 8 + GET + 17 + GET + _size_cost(t.shape) + GET + 2
                  + (1 if n == 1 else 2 * -(-n // 1000)) + 2
                  + sum(14 + _size_cost(off) + _size_cost(size) for off, size in t.chunks))
    total += sum(_str(fqn) + 8 for fqn in objects)
    entries = 0
    for name, items in files:
        offset = 0
        for item, where in items:
            length = item_size(item)
            key = (LATE_GET + 2 + LATE_GET + _size_cost(where)) if item.dtype else (LATE_GET + 1)
            total += 11 + LATE_GET + _str(item.fqn) + key + 2  # MetadataIndex(fqn, index[, offset])
            total += 11 + 3 * LATE_GET + _int(offset) + LATE_GET + _int(length) + 2  # _StorageInfo
            total += (LOCAL_PLAN_ITEM + _size_cost(where)) if item.dtype else LOCAL_PLAN_OBJECT
            offset += length
            entries += 1
        total += _str(name) - LATE_GET if items else 0
    return total + 2 * -(-entries // 1000) + 9 * (total // 65536)


FRAME_WRITE = 65_548  # one pickle frame as the pickler hands it to the file: ~64 KiB of opcodes and its header


def pickle_calls(size: int) -> Calls:
    """``.metadata`` as ``pickle.dump`` writes it into an open file (DCP's ``FileSystemWriter.finish``, torch
    2.13.0): protocol 4 commits a frame once it holds 64 KiB and writes it at once, then the last frame at the
    end; a pickle smaller than a frame is one call (seen under strace: 65,548 then 25,829 bytes)."""
    frames, rest = divmod(size, FRAME_WRITE)
    return (FRAME_WRITE,) * frames + ((rest,) if rest else ())


def pickle_reads(size: int) -> Calls:
    """``.metadata`` as ``pickle.load`` reads it from an open file (every rank of DCP's load, torch 2.13.0): per
    frame its header (the first with the protocol's two bytes), then the frame; a logging file object shows
    ``read(11)``, ``read(65538)``, ``read(9)``, ``read(13937)`` for a two-frame pickle."""
    reads: list[int] = []
    for k, frame in enumerate(pickle_calls(size)):
        head = min(11 if k == 0 else 9, frame)
        reads += [head, frame - head] if frame > head else [head]
    return tuple(reads)

