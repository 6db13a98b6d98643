"""What the engine is asked to move: a file (:class:`FileTask`: its segments, its key, how its framework writes
and reads it), the options every file of a run shares (:class:`IOOptions`), and how a framework's reader reads one
item of a file (``torch.load``'s reads of an archive, ``pickle.load``'s of an object)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, NamedTuple, Protocol, TypeVar

from dlio_ckpt.io.synthetic import IRREDUCIBLE, Reduction
from dlio_ckpt.plan.formats import Segment, file_size
from dlio_ckpt.plan.formats.pt import archive_records, load_reads
from dlio_ckpt.plan.pattern import FilePattern


@dataclass(frozen=True)
class FileTask:
    path: str
    segments: tuple[Segment, ...]
    key: int  # synthetic-data identity of the file (who wrote it, which step)
    pattern: FilePattern | None = None  # how its framework writes it (io_pattern=framework); None: the tuned stream
    dtype: str = ""  # its tensors' datatype, which the synthetic values imitate (checkpoint.data_values); "": none

    @cached_property
    def size(self) -> int:
        """The file's bytes (summed once: a restore asks it at every read of a file of many segments)."""
        return file_size(list(self.segments))

    @cached_property
    def format_starts(self) -> list[int]:
        """Where each of :attr:`format_pieces` starts (searched at every call a framework makes)."""
        return [offset for offset, _ in self.format_pieces]

    def format_piece(self, at: int) -> tuple[int, bytes] | None:
        """The piece of the format's bytes holding offset ``at`` (where it starts, its bytes), or None (payload)."""
        i = bisect_right(self.format_starts, at) - 1
        if i >= 0 and at < self.format_pieces[i][0] + len(self.format_pieces[i][1]):
            return self.format_pieces[i]
        return None

    def format_slice(self, lo: int, hi: int) -> memoryview | None:
        """The format's bytes [lo, hi) where one of its pieces holds them all (a header, a pickle), else None."""
        piece = self.format_piece(lo)
        if piece is not None and hi <= piece[0] + len(piece[1]):
            return memoryview(piece[1])[lo - piece[0]:hi - piece[0]]
        return None

    @cached_property
    def format_pieces(self) -> tuple[tuple[int, bytes], ...]:
        """The format's bytes with their file offsets, in order; every other byte is payload."""
        out, offset = [], 0
        for seg in self.segments:
            if isinstance(seg, bytes):
                if seg:
                    out.append((offset, seg))
                offset += len(seg)
            else:
                offset += seg
        return tuple(out)


class _RangedRead(NamedTuple):
    """One loading rank's reads of one file: the file, and the spans (start, end) asked of storage."""

    task: FileTask
    spans: tuple[tuple[int, int], ...]

    @property
    def path(self) -> str:
        """The file, as :meth:`~dlio_ckpt.io.engine.core.EngineCore._attempt` names what it retries or failed on."""
        return self.task.path


class _Job(Protocol):
    """What :meth:`~dlio_ckpt.io.engine.core.EngineCore._each` runs: one file's work, named by its file (a
    :class:`FileTask`, or a :class:`_RangedRead`)."""

    @property
    def path(self) -> str: ...


_J = TypeVar("_J", bound=_Job)


class _Scoped(Protocol):
    """What :meth:`~dlio_ckpt.io.engine.core.EngineCore._attempt` runs a file's work on: a worker whose memory may
    live on a device."""

    def scope(self) -> Any: ...


_W = TypeVar("_W", bound=_Scoped)


@dataclass(frozen=True)
class WriterSettings:
    """How a framework's writer threads write a save's files (the stream's threads are the storage's): how many, whether
    the caller's thread is one of them (DCP's) or only waits for them (megatron-core's writer processes), and the rate
    each copies a tensor from its accelerator at before writing it (bytes/s; 0: the state is in host memory), and the
    time each spends on an item before writing it (``checkpoint.framework_item_us``)."""

    threads: int = 1
    caller_writes: bool = True
    device_copy_rate: float = 0.0
    item_seconds: float = 0.0  # the framework's own time on each item before its first call (framework_item_us)


@dataclass(frozen=True)
class IOOptions:
    fsync: bool = False
    odirect: bool = False
    evict_before_read: bool = True
    verify: bool = True  # compare every byte read; False: count bytes only (as DLIO, as fio)
    chunk_size: int = 8 << 20
    reduction: Reduction = IRREDUCIBLE  # what a storage may reduce the bytes by (checkpoint.compression_ratio...)


def _item_reads(task: FileTask, offset: int, length: int) -> tuple[tuple[int, int, bool], ...]:
    """How DCP's reader reads the item of ``task`` at [offset, offset + length): (offset in the item, bytes, by
    ``readinto``). A tensor's archive as ``torch.load`` reads it (its magic by ``read``), an object whole by
    ``read``. Worked out once per item shape: an item is its header's bytes, its payload and its trailer's (or
    one piece of the format's, an object), and items alike share those bytes objects (the layout makes each
    archive once per dtype and shape), so the pieces themselves are the key. An archive of several storages (a
    whole state dict's: DeepSpeed's files) is read from the plan's bytes."""
    head, tail = task.format_piece(offset), task.format_piece(offset + length - 1)
    if head is not None and tail is not None and head[0] == offset and tail[0] + len(tail[1]) == offset + length \
            and bisect_left(task.format_starts, offset + length) - bisect_left(task.format_starts, offset) == 2:
        return _archive_reads(length, head[1], tail[1])
    return _reads_of(length, lambda lo, hi: _format_bytes(task, offset + lo, offset + hi))


@lru_cache(maxsize=4096)
def _archive_reads(length: int, head: bytes, tail: bytes) -> tuple[tuple[int, int, bool], ...]:
    """:func:`_item_reads` of an item whose format's bytes are ``head`` at its start and ``tail`` at its end."""
    def fmt(lo: int, hi: int) -> bytes:
        if hi <= len(head):
            return head[lo:hi]
        if lo >= length - len(tail):
            return tail[lo - (length - len(tail)):hi - (length - len(tail))]
        raise AssertionError(f"[{lo}, {hi}) of an item of {length} bytes is its payload")

    return _reads_of(length, fmt)


def _reads_of(length: int, fmt: Callable[[int, int], bytes]) -> tuple[tuple[int, int, bool], ...]:
    if any(name.startswith("data/") for name in archive_records(length, fmt)[1]):
        return tuple((at, n, k > 0) for k, (at, n) in enumerate(load_reads(length, fmt)))
    return ((0, length, False),)


def _format_bytes(task: FileTask, lo: int, hi: int) -> bytes:
    """The format's bytes of the file in [lo, hi) (headers, a directory: never payload), from the plan."""
    out, at = [], lo
    while at < hi:
        piece = task.format_piece(at)
        if piece is None:
            raise AssertionError(f"{task.path}: [{lo}, {hi}) is not the format's bytes")
        offset, raw = piece
        out.append(raw[at - offset:hi - offset])
        at = min(hi, offset + len(raw))
    return b"".join(out)
