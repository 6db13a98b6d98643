"""Runs one process's share of a checkpoint: writes or reads-and-verifies a list of files.

Why it looks like this: memory must stay bounded whatever the checkpoint size, and writes must run
at the storage's limit. So the engine cuts each file into chunks at fixed file offsets and makes each
chunk in a buffer allocated once (:mod:`~dlio_ckpt.io.synthetic`: one XOR pass over its pool, no per-write
allocation; the format's few bytes are written over the window for the call and put back). A storage that
reads and writes at offsets (file systems: ``capabilities.positional``) gets ``queue_depth`` chunks of a
file in flight at once, as fio's iodepth, from buffers allocated once; a stream (object stores, GDS) gets
them in order.
It knows neither model shapes nor storage protocols: it gets segments from a format and moves them
through a backend.

A file may also come with its framework's calls (``FileTask.calls``, ``checkpoint.io_pattern=framework``):
then it is written as the framework writes it, each call through a buffered file object of the storage's
block size (the buffering a framework's ``open(path, "wb")`` gets), by a few writer threads taking whole
files, each file synced on its own descriptor before it is closed (DCP's ``FileSystemWriter``).
"""

from __future__ import annotations

import io
import logging
import mmap
import os
import queue
import tempfile
import threading
import time
import zlib
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, NamedTuple, Protocol, TypeVar, cast

from dlio_ckpt.errors import ConfigError, StorageError, VerifyError
from dlio_ckpt.io.backends import (
    Backend,
    DeviceMemory,
    PositionalReader,
    PositionalWriter,
    RangedReader,
    Reader,
    Source,
    SyncingWriter,
    VectorWriter,
    Writer,
)
from dlio_ckpt.io.synthetic import (
    BLOCK,
    IRREDUCIBLE,
    SLACK,
    STAMP_BYTES,
    Reduction,
    SyntheticData,
    first_difference,
    first_difference_on_device,
)
from dlio_ckpt.plan.formats import FLUSH, Calls, Segment, file_size
from dlio_ckpt.plan.formats.pt import archive_records, load_reads
from dlio_ckpt.plan.restore import spans

log = logging.getLogger("dlio_ckpt")
# A framework's write of a whole tensor is one call; beyond this it is made in pieces of it, so that a writer
# thread holds at most this much synthetic data (the framework holds the whole state in memory)
LARGEST_CALL = 256 << 20
TOLD_AT_LEAST = 1 << 20  # a framework's read of at least this is told to the progress by itself
SLEEP_AT_LEAST = 0.002  # a writer thread's modelled copies are slept once they add up to this (s)
_POPULATED = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)


@dataclass(frozen=True)
class FileTask:
    path: str
    segments: tuple[Segment, ...]
    key: int  # synthetic-data identity of the file (who wrote it, which step)
    calls: Calls | None = None  # its framework's write calls (io_pattern=framework); None: the tuned stream
    synced: bool = True  # with its calls: whether its framework syncs it (checkpoint.fsync says whether any is)
    reads: Calls | None = None  # a coordinator's file: how its framework reads it, in order (its load's first reads)
    stream: str = "python"  # with its calls: the file object they go through ("python": open(path, "wb"); "c++":
    #                         torch.save(obj, path)'s std::ofstream)
    via_tmpdir: bool = False  # with its calls: written in $TMPDIR, then moved into place (fsspec's transaction)
    archive: bool = False  # with its calls: one torch.save archive, which a load reads as torch.load does
    in_memory: bool = False  # with its calls: serialized into fresh memory first, the calls made from that copy
    tensors: bool = True  # with its calls: its payload is tensors, copied from the accelerator where a save copies
    #                       them (Engine.device_copy_rate); a coordinator's metadata is not
    dtype: str = ""  # its tensors' datatype, which the synthetic values imitate (checkpoint.data_values); "": none

    @cached_property
    def size(self) -> int:
        """The file's bytes (summed once: a restore asks it at every read of a file of many segments)."""
        return file_size(list(self.segments))

    @cached_property
    def metadata_starts(self) -> list[int]:
        """Where each of :attr:`metadata`'s pieces starts (searched at every call a framework makes)."""
        return [offset for offset, _ in self.metadata]

    def format_piece(self, at: int) -> tuple[int, bytes] | None:
        """The piece of the format's bytes holding offset ``at`` (where it starts, its bytes), or None (payload)."""
        i = bisect_right(self.metadata_starts, at) - 1
        if i >= 0 and at < self.metadata[i][0] + len(self.metadata[i][1]):
            return self.metadata[i]
        return None

    def format_slice(self, lo: int, hi: int) -> memoryview | None:
        """The format's bytes [lo, hi) where one of its pieces holds them all (a header, a pickle), else None."""
        piece = self.format_piece(lo)
        if piece is not None and hi <= piece[0] + len(piece[1]):
            return memoryview(piece[1])[lo - piece[0]:hi - piece[0]]
        return None

    @cached_property
    def metadata(self) -> tuple[tuple[int, bytes], ...]:
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
        """The file, as :meth:`Engine._attempt` names what it retries or failed on."""
        return self.task.path


class _Job(Protocol):
    """What :meth:`Engine._each` runs: one file's work, named by its file (a :class:`FileTask`, or a
    :class:`_RangedRead`)."""

    @property
    def path(self) -> str: ...


_J = TypeVar("_J", bound=_Job)


class _Scoped(Protocol):
    """What :meth:`Engine._attempt` runs a file's work on: a worker whose memory may live on a device."""

    def scope(self) -> Any: ...


_W = TypeVar("_W", bound=_Scoped)


@dataclass(frozen=True)
class IOOptions:
    fsync: bool = False
    odirect: bool = False
    evict_before_read: bool = True
    verify: bool = True  # compare every byte read; False: count bytes only (as DLIO, as fio)
    chunk_size: int = 8 << 20
    reduction: Reduction = IRREDUCIBLE  # what a storage may reduce the bytes by (checkpoint.compression_ratio...)


def io_buffer_bytes(backend: Backend, chunk: int) -> int:
    """Every buffer a process's I/O holds, allocated when its engine is made and never again: per
    request in flight a synthetic source (a chunk its windows are made in, and its 1 MiB pool) and a chunk
    to read into."""
    return backend.options.threads * _depths(backend)[2] * (2 * chunk + SLACK)


def _depths(backend: Backend) -> tuple[int, int, int]:
    """Requests of one file in flight when writing and when reading, and the slots that takes."""
    if not backend.capabilities.positional:
        return 1, 1, 1
    write, read = backend.queue_depth, backend.read_queue_depth
    return write, read, max(write, read)


def check_capabilities(backend: Backend, options: IOOptions) -> None:
    """Settings the storage cannot honour are bad input: refused before anything is written."""
    caps = backend.capabilities
    if options.fsync and not (caps.fsync or caps.durable_on_close):
        raise ConfigError("workload.checkpoint.fsync", True,
                          f"storage_type={backend.name} cannot make files durable; set it to False")
    if options.odirect and not caps.odirect:
        raise ConfigError("workload.checkpoint.odirect", True,
                          f"storage_type={backend.name} has no O_DIRECT (its reads never come from "
                          "this host's page cache anyway); set it to False")


def _spans(window: Any, patches: list[tuple[int, bytes]]) -> Iterator[tuple[int, Any]]:
    """A chunk's bytes in order as (offset in the chunk, bytes): payload from ``window``, the
    format's bytes from ``patches``."""
    at = 0
    for offset, raw in patches:
        if offset > at:
            yield at, window[at:offset]
        yield offset, memoryview(raw)
        at = offset + len(raw)
    if at < len(window):
        yield at, window[at:]


@contextmanager
def _formatted(window: Any, patches: list[tuple[int, bytes]]) -> Iterator[None]:
    """The format's bytes written over a pool window for one call (a write, a compare) and put back after:
    a few hundred bytes moved, against a copy of the whole chunk; the pool stays as generated."""
    saved = [(offset, bytes(window[offset:offset + len(raw)])) for offset, raw in patches]
    try:
        for offset, raw in patches:
            window[offset:offset + len(raw)] = raw
        yield
    finally:
        for offset, raw in saved:
            window[offset:offset + len(raw)] = raw


def _finish(writer: Writer) -> None:
    writer.finish()


def _abort(writer: Writer) -> None:
    writer.abort()


def _close(reader: Reader) -> None:
    reader.close()


def _wrong(task: FileTask, offset: int, data: SyntheticData | None = None, got: Any = None, base: int = 0,
           ) -> VerifyError:
    """The first wrong byte, by file and offset; and, where ``got`` (the file's bytes from ``base``) holds the
    stamp of the block there, whose block came back instead (another file's, rank's, checkpoint's, run's)."""
    message = f"{task.path}: wrong data at offset {offset} (4 KiB block {offset // BLOCK})"
    at = offset - offset % BLOCK - base
    if data is not None and got is not None and 0 <= at and at + STAMP_BYTES <= len(got):
        whose = data.foreign(got[at:at + STAMP_BYTES], task.key, offset // BLOCK)
        if whose is not None:
            message += f": it holds {whose}"
    return VerifyError(message)


def _chunks(reader: Reader, buf: Any) -> Generator[Any, None, None]:
    """A file's bytes as the reader delivers them: in its own buffers where it lends them
    (``views``: verified where they landed, no copy), else read into ``buf`` one fill at a time."""
    views = getattr(reader, "views", None)
    if views is not None:
        yield from views()
        return
    while filled := reader.readinto(buf):
        yield buf[:filled]


def _span_of(data: SyntheticData, task: FileTask, start: int, end: int, skip: int = 0,
             ) -> tuple[Any, list[tuple[int, bytes]]]:
    """The file's bytes [start, end) as a window of its payload stream and the format's bytes that take the
    place of parts of it, as (offset in the window, bytes); ``skip``: bytes at the window's start the
    caller will not look at (left unstamped, block-aligned). ``start`` need not be block-aligned (a
    framework's tensor follows a header): the window is cut from one that is, with no copy."""
    lead = start % BLOCK
    window = data.window(task.key, start - lead, end - start + lead, skip, task.dtype)[lead:]
    meta = task.metadata
    patches = []
    for i in range(max(bisect_right(task.metadata_starts, start + skip) - 1, 0), len(meta)):
        offset, raw = meta[i]
        if offset >= end:
            break
        lo, hi = max(offset, start), min(offset + len(raw), end)
        if lo < hi:
            patches.append((lo - start, raw[lo - offset:hi - offset]))
    return window, patches


def _item_reads(task: FileTask, offset: int, length: int) -> tuple[tuple[int, int, bool], ...]:
    """How DCP's reader reads the item of ``task`` at [offset, offset + length): (offset in the item, bytes, by
    ``readinto``). A tensor's archive as ``torch.load`` reads it (its magic by ``read``), an object whole by
    ``read``. Worked out once per item shape: an item is its header's bytes, its payload and its trailer's (or
    one piece of the format's, an object), and items alike share those bytes objects (the layout makes each
    archive once per dtype and shape), so the pieces themselves are the key. An archive of several storages (a
    whole state dict's: DeepSpeed's files) is read from the plan's bytes."""
    head, tail = task.format_piece(offset), task.format_piece(offset + length - 1)
    if head is not None and tail is not None and head[0] == offset and tail[0] + len(tail[1]) == offset + length \
            and bisect_left(task.metadata_starts, offset + length) - bisect_left(task.metadata_starts, offset) == 2:
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


class _Slot:
    """What one request in flight owns: a synthetic source (each window is made in its buffer, so
    requests cannot share one) and a chunk buffer to read into, both allocated once. With a backend
    that moves device buffers (``device``), both live in GPU memory and reads are compared there:
    bulk data never crosses PCIe except through the storage path being measured."""

    def __init__(self, run_key: int, chunk: int, device: DeviceMemory | None, like: _Slot | None = None,
                 reduction: Reduction = IRREDUCIBLE) -> None:
        self.data: SyntheticData = SyntheticData(run_key, chunk, device=device.xp if device else None,
                                                 like=like.data if like else None, reduction=reduction)
        self._readmap: mmap.mmap | None = None
        self.readbuf: Any
        if device:
            self.readbuf = device.xp.empty(chunk, dtype=device.xp.uint8)
        else:  # page-aligned (usable under O_DIRECT) and faulted in now, not in the first timed read
            self._readmap = mmap.mmap(-1, chunk, flags=_POPULATED)
            self.readbuf = memoryview(self._readmap)

    def close(self) -> None:
        self.data.close()
        if self._readmap is not None:
            self.readbuf.release()
            try:
                self._readmap.close()
            except BufferError:  # a slice is still referenced (by a failed read's traceback): GC frees it
                pass
        self.readbuf = None


class _Worker:
    """What one file in flight owns: ``depth`` slots, one per request it keeps in flight, and the
    threads that issue them (none at depth 1: the file's own thread does)."""

    def __init__(self, run_key: int, chunk: int, depth: int, device: DeviceMemory | None,
                 reduction: Reduction = IRREDUCIBLE) -> None:
        self.device = device
        with self.scope():
            self.slots = [_Slot(run_key, chunk, device, reduction=reduction)]
            self.slots += [_Slot(run_key, chunk, device, self.slots[0], reduction) for _ in range(depth - 1)]
        self.data, self.readbuf = self.slots[0].data, self.slots[0].readbuf  # the sequential path's
        self.pool = ThreadPoolExecutor(depth, "dlio_ckpt_request") if depth > 1 else None
        self._big: mmap.mmap | None = None  # a framework's reads, larger than a chunk (framework_buffer)

    def scope(self) -> Any:
        """Where this worker's arrays live: its GPU selected for the calling thread, or nothing."""
        return self.device.scope() if self.device else nullcontext()

    def framework_buffer(self, n: int) -> memoryview:
        """``n`` bytes to read a framework's read into (a tensor's whole archive entry, up to
        :data:`LARGEST_CALL`): made on first use, grown only for a larger read."""
        if self._big is None or len(self._big) < n:
            if self._big is not None:
                self._big.close()
            self._big = mmap.mmap(-1, max(n, BLOCK))
        return memoryview(self._big)[:n]

    def first_difference(self, got: Any, want: Any) -> int | None:
        return first_difference_on_device(self.device.xp, got, want) if self.device else \
            first_difference(got, want)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
        for slot in self.slots:
            slot.close()
        self.readbuf = None  # data is slots[0]'s, closed above (its pool dropped) and held by slots as before
        if self._big is not None:
            try:
                self._big.close()
            except BufferError:  # a view is still referenced (by a failed read's traceback): GC frees it
                pass


class _Unbuffered(io.RawIOBase):
    """A storage writer as the raw file under Python's :class:`io.BufferedWriter`: the buffered file a
    framework's ``open(path, "wb")`` gives it, so its calls reach storage coalesced as CPython coalesces
    them (pieces that fit the buffer copied into it, larger ones written through whole)."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        self._writer.write(view)
        return len(view)


class _FileBuf:
    """The C++ stream ``torch.save(obj, path)`` writes through (libstdc++'s ``basic_filebuf``, the one
    ``std::ofstream`` torch's ``PyTorchFileWriter`` opens): a buffer of 8 KiB, one byte kept back. A piece of at
    least 1 KiB, or at least the room left, goes out at once with what is pending, in one ``writev``; a smaller
    one is copied in; the close writes what is pending. Seen under strace with torch 2.13.0: a 4 MiB tensor's
    archive is ``writev(704 + 4194304)`` then ``write(781)``."""

    SIZE, CHUNK = 8192, 1024

    def __init__(self, writer: Writer) -> None:
        self._writer, self._pending = writer, bytearray()

    def write(self, b: Any) -> None:
        view = memoryview(b).cast("B")
        if len(view) >= min(self.CHUNK, self.SIZE - 1 - len(self._pending)):
            _writev(self._writer, [memoryview(self._pending), view])
            self._pending.clear()
        else:
            self._pending += view

    def flush(self) -> None:
        """What is pending, in one ``write`` (torch.save(path) flushes only when it closes the stream)."""
        if self._pending:
            self._writer.write(memoryview(self._pending))
            self._pending.clear()


def _writev(writer: Writer, parts: list[memoryview]) -> None:
    """One gathered write where the storage has it (a file's ``writev(2)``), else the parts in order."""
    if isinstance(writer, VectorWriter):
        writer.writev(parts)
        return
    for part in parts:
        if len(part):
            writer.write(part)


class _RawReader(io.RawIOBase):
    """A storage reader as the raw file under Python's :class:`io.BufferedReader`: the buffered file a framework's
    ``open(path, "rb")`` gives it, so its reads reach storage as CPython's buffer makes them (small ones filled
    a block at a time, seeks inside the block free, large ones read through). Counts the bytes storage served."""

    def __init__(self, reader: RangedReader, size: int) -> None:
        self._reader, self._size, self._at, self.served = reader, size, 0, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._at = (offset, self._at + offset, self._size + offset)[whence]
        return self._at

    def tell(self) -> int:
        return self._at

    def readinto(self, b: Any) -> int:
        """One request, of no more than the file holds from here: storage answers it in one call, as a file's
        ``read(2)`` near its end returns what is left."""
        view = memoryview(b).cast("B")[:max(self._size - self._at, 0)]
        n = self._reader.read_at(view, self._at) if len(view) else 0
        self._at += n
        self.served += n
        return n


class _CallWriter:
    """What one framework writer thread owns: a synthetic source for calls of up to ``calls`` bytes (a block
    more: a call may start inside one)."""

    def __init__(self, run_key: int, calls: int, reduction: Reduction = IRREDUCIBLE) -> None:
        self.calls = calls
        self.data = SyntheticData(run_key, calls + BLOCK, reduction=reduction)

    def scope(self) -> Any:
        return nullcontext()

    def close(self) -> None:
        self.data.close()


class Engine:
    """Moves a process's files through a backend, ``backend.options.threads`` files at a time."""

    def __init__(self, backend: Backend, run_key: int, options: IOOptions,
                 progress: Callable[[str, int], None] = lambda _path, _n: None) -> None:
        caps = backend.capabilities
        self.backend, self.options = backend, options
        self._progress = progress  # told the file and its bytes at every chunk: watchdog, progress bar
        self.file_times: list[tuple[str, float, float, int]] = []  # (path, start, end, bytes), wall clock
        self.retries = 0  # files re-sent or re-read after a transient error, this process
        self._lock = threading.Lock()
        self._chunk = options.chunk_size
        self._align = caps.alignment if options.odirect else 1  # O_DIRECT reads ask whole blocks
        self._verify = caps.stores_data
        self._threads = backend.options.threads
        self._positional = caps.positional
        self._write_depth, self._read_depth, depth = _depths(backend)
        self._stream_buffers = io_buffer_bytes(backend, self._chunk)
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        device = backend.device_memory() if caps.device_buffers else None
        self._workers = [_Worker(run_key, self._chunk, depth, device, options.reduction) for _ in range(self._threads)]
        for w in self._workers:
            self._idle.put(w)
        self._pool = ThreadPoolExecutor(self._threads, "dlio_ckpt_io") if self._threads > 1 else None
        self._run_key = run_key
        self.framework_writers = 1  # threads writing files that come with their calls (the run sets it)
        self.framework_caller_writes = True  # whether the caller's thread is one of them (DCP's) or only waits
        self.device_copy_rate = 0.0  # bytes/s a writer thread copies a tensor from its accelerator at (0: no copy)
        self._copy_seconds: dict[int, float] = {}  # modelled copy time by writer thread, since the last take
        self._framework_cpu = 0.0  # CPU seconds of the framework's own work played, since the last take
        self._sleep_owed = threading.local()  # a writer thread's modelled copy time not yet slept (s; < 0: credit)
        self._call_writers: list[_CallWriter] = []  # made when such files first come, as large as their calls
        self._in_memory = 0  # the largest piece a writer copies into memory before writing it (Lightning's)

    @cached_property
    def _buffer_size(self) -> int:
        """The buffer of a framework's file object on this storage (asked once)."""
        return self.backend.buffer_size

    @property
    def buffer_bytes(self) -> int:
        """Every buffer this engine holds: the stream's, and its framework writers' sources once made (with the
        piece each copies into memory first where its framework serializes into memory), and the datatypes' pools
        its sources made (checkpoint.data_values=torch_rand: 1 MiB a datatype)."""
        pools = sum(s.data.value_pool_bytes for w in self._workers for s in w.slots)
        return self._stream_buffers + pools + sum(w.calls + BLOCK + SLACK + self._in_memory + w.data.value_pool_bytes
                                                  for w in self._call_writers)

    def _each(self, fn: Callable[[_Worker, _J], int], tasks: list[_J]) -> int:
        """Run ``fn`` on every task, ``threads`` at a time; the first error cancels the rest."""
        if self._pool is None:
            return sum(self._attempt(fn, self._workers[0], t) for t in tasks)

        def one(task: _J) -> int:
            worker = self._idle.get()
            try:
                return self._attempt(fn, worker, task)
            finally:
                self._idle.put(worker)

        futures = [self._pool.submit(one, t) for t in tasks]
        try:
            return sum(f.result() for f in futures)
        finally:
            for f in futures:
                f.cancel()
            wait(futures)

    def _attempt(self, fn: Callable[[_W, _J], int], worker: _W, task: _J) -> int:
        """One file, redone from its first byte after a transient storage error, at most
        ``retries`` times (the client's own attempts come on top); counted in ``self.retries``."""
        allowed = self.backend.options.retries
        for attempt in range(allowed + 1):
            self._progress(task.path, 0)
            try:
                start = time.time()
                with worker.scope():
                    nbytes = fn(worker, task)
                self.file_times.append((task.path, start, time.time(), nbytes))  # list.append is atomic
                return nbytes
            except StorageError as exc:
                if not exc.transient or attempt == allowed:
                    if attempt:
                        raise StorageError(f"{exc} (after {attempt} retries of the whole file)") from None
                    raise
                with self._lock:
                    self.retries += 1
                log.warning("retrying %s after: %s", task.path, exc)
                time.sleep(min(0.5 * 2**attempt, 5.0))
        raise AssertionError("unreachable")

    # -- content -------------------------------------------------------------------------------

    def _chunk_of(self, data: SyntheticData, task: FileTask, k: int, lo: int = 0, hi: int | None = None,
                  ) -> tuple[Any, list[tuple[int, bytes]]]:
        """Chunk ``k`` of the file (its bytes from ``k * chunk_size``): a window of the payload
        stream, and the format's bytes that take the place of parts of it, as (offset in the chunk,
        bytes). The stream's offsets are the file's, so a chunk of payload is one window, aligned
        in memory and in the file: written and read under O_DIRECT with no copy. A caller that
        looks only at the chunk's bytes [lo, hi) (a restore's range) gets those stamped and no more."""
        start = k * self._chunk
        end = min(start + self._chunk, task.size, start + hi if hi is not None else task.size)
        return _span_of(data, task, start, end, lo - lo % BLOCK)

    def _chunks_of(self, task: FileTask) -> range:
        return range(-(-task.size // self._chunk))

    def _pieces(self, data: SyntheticData, task: FileTask) -> Iterator[Any]:
        """The file's bytes in order, as a stream's writer and reader take them."""
        for k in self._chunks_of(task):
            window, patches = self._chunk_of(data, task, k)
            for _, piece in _spans(window, patches):
                yield piece
            self._progress(task.path, len(window))

    def _pipeline(self, worker: _Worker, tasks: list[FileTask], open_file: Callable[[FileTask], Any],
                  request: Callable[[Any, _Slot, FileTask, int], None], close_file: Callable[[Any], None],
                  abort_file: Callable[[Any], None], depth: int, timed: bool = False) -> int:
        """``request(handle, slot, task, k)`` for every chunk ``k`` of every file, in file order,
        ``depth`` in flight (fio's iodepth: the storage's queue_depth, or read_queue_depth for reads),
        across file boundaries as fio's one job keeps its queue full: a file is opened (``open_file``)
        when its first chunk is due, closed when its last is done, and its time recorded then
        (``timed``: files not timed by :meth:`_attempt`); on an error every open file is given up
        (``abort_file``: a writer's abort, which removes nothing but our partial file; a reader's close).
        Request n reuses the slot of request n - depth, done by then (they finish in order). The
        first error cancels the rest and closes every open file."""
        n = 0
        pending: deque[tuple[Future[None] | None, int]] = deque()  # (request, index of its file)
        handles: dict[int, Any] = {}
        left = [len(self._chunks_of(t)) for t in tasks]
        started = [0.0] * len(tasks)

        def done(i: int) -> None:
            close_file(handles.pop(i))
            if timed:
                self.file_times.append((tasks[i].path, started[i], time.time(), tasks[i].size))

        def retire() -> None:
            future, i = pending.popleft()
            if future is not None:
                future.result()
            left[i] -= 1
            if left[i] == 0:
                done(i)

        try:
            for i, task in enumerate(tasks):
                self._progress(task.path, 0)
                started[i] = time.time()
                handles[i] = open_file(task)
                if left[i] == 0:
                    done(i)
                for k in self._chunks_of(task):
                    if len(pending) == depth:
                        retire()
                    slot = worker.slots[n % depth]
                    if worker.pool is None:
                        request(handles[i], slot, task, k)
                        pending.append((None, i))
                    else:
                        pending.append((worker.pool.submit(request, handles[i], slot, task, k), i))
                    n += 1
            while pending:
                retire()
            return sum(t.size for t in tasks)
        except BaseException:
            for future, _ in pending:
                if future is not None:
                    future.cancel()
            wait([f for f, _ in pending if f is not None])
            for handle in handles.values():
                abort_file(handle)
            raise

    # -- write ---------------------------------------------------------------------------------

    def write_files(self, tasks: list[FileTask], writers: int | None = None) -> int:
        """Write every file, then fsync each (``checkpoint.fsync``): the rank's end time follows the
        last fsync, and the kernel writes one file back while the next is being written instead of
        the stream stalling after every file. Stores that commit on close need no second pass.
        Files that come with their framework's calls are written as it writes them (:meth:`_as_framework`), by
        ``writers`` threads (``framework_writers`` by default)."""
        if tasks and tasks[0].calls is not None:
            return self._as_framework(tasks, writers or self.framework_writers, writers == 1 or
                                      self.framework_caller_writes)
        if self._positional:
            nbytes = self._positioned(tasks, self._open_write, self._write_chunk, _finish, _abort, self._write_depth)
        else:
            nbytes = self._each(self._write_file, tasks)
        if self.options.fsync and not self.backend.capabilities.durable_on_close:
            self._each(lambda _, t: self._sync(t.path), tasks)
        return nbytes

    def _as_framework(self, tasks: list[FileTask], threads: int, caller_writes: bool) -> int:
        """DCP's ``FileSystemWriter``: ``threads`` threads, the caller's one of them (``caller_writes``; else it
        waits for them, as megatron-core's writer processes), each taking the next whole file until none is
        left, each file made of its calls (:meth:`_write_calls`). The first error stops the others after the
        file they are on."""
        writers = self._framework_pool(tasks, threads)
        todo: queue.SimpleQueue[FileTask] = queue.SimpleQueue()
        for task in tasks:
            todo.put(task)
        failed: list[BaseException] = []
        written = [0] * len(writers)

        def drain(i: int) -> None:
            try:
                while not failed:
                    try:
                        task = todo.get_nowait()
                    except queue.Empty:
                        return
                    written[i] += self._attempt(self._write_calls, writers[i], task)
            except BaseException as exc:  # noqa: BLE001 (handed to the caller's thread, raised there)
                failed.append(exc)

        first = 1 if caller_writes else 0
        helpers = [threading.Thread(target=drain, args=(i,), name="dlio_ckpt_writer")
                   for i in range(first, len(writers))]
        for helper in helpers:
            helper.start()
        if caller_writes:
            drain(0)
        for helper in helpers:
            helper.join()
        if failed:
            raise failed[0]
        return sum(written)

    def _framework_pool(self, tasks: list[FileTask], threads: int) -> list[_CallWriter]:
        """One source per writer thread, as large as the largest call of ``tasks`` (at most
        :data:`LARGEST_CALL`): made once, remade only for more threads or larger calls."""
        largest = min(max((n for t in tasks for n in t.calls or ()), default=1), LARGEST_CALL)
        # a python file object's buffer is written from the same source, whole
        largest = max(largest, self._buffer_size if any(t.stream == "python" for t in tasks) else 0)
        size = max([-(-largest // BLOCK) * BLOCK, *(w.calls for w in self._call_writers)])
        count = max(1, min(threads, len(tasks)))
        if len(self._call_writers) < count or self._call_writers[0].calls < size:
            for w in self._call_writers:
                w.close()
            self._call_writers = [_CallWriter(self._run_key, size, self.options.reduction) for _ in range(count)]
        if any(t.in_memory for t in tasks):  # each writer also holds a copy of the piece it writes (buffer_bytes)
            self._in_memory = max(self._in_memory, largest)
        return self._call_writers[:count]

    def _write_calls(self, w: _CallWriter, task: FileTask) -> int:
        """One file as its framework writes it: opened, each call made on a buffered file of the storage's
        block size (a flush where the framework flushes), synced on its own descriptor before it is closed
        (``checkpoint.fsync``; the framework's buffer is flushed at the close, after the fsync, as DCP's
        ``with open(...)`` does), closed. The file's bytes are the stream's, offset for offset. Each payload
        call's CRC-32 is computed as ``torch.save`` computes it over each record (torch 2.13.0's default): the one
        CPU cost of a save that grows with its bytes (its value is not written: the format's CRC fields stay 0).
        A file the framework serializes into memory first (``in_memory``: Lightning's ``torch.save`` into a
        ``BytesIO``) is copied into fresh memory piece by piece and written from the copy: the copy and its page
        faults are most of that save's CPU (``bench/lightning_phases.py``), played in bounded memory.
        A file the framework writes through torch.save's C++ stream goes through :class:`_FileBuf` instead; one it
        writes in ``$TMPDIR`` first (``via_tmpdir``, on a file system) is written there and moved into place
        (:meth:`Backend.rename <dlio_ckpt.io.backends.base.Backend.rename>`: a rename, or a copy to another
        device), as fsspec's transaction does under Lightning."""
        staged = self._staged_path() if task.via_tmpdir and self.backend.capabilities.rename else None
        writer = self.backend.open_write(staged or task.path, False)
        try:
            sync = task.synced and self.options.fsync and not self.backend.capabilities.durable_on_close
            own = sync and isinstance(writer, SyncingWriter)
            if task.stream == "python" and not task.in_memory:
                self._write_through_buffer(w, writer, task, cast(SyncingWriter, writer).sync if own else None)
                writer.finish()
                return self._placed(task, staged, sync and not own)
            buffered: io.BufferedWriter | _FileBuf = _FileBuf(writer) if task.stream == "c++" else \
                io.BufferedWriter(_Unbuffered(writer), self._buffer_size)
            offset = 0
            for n in task.calls or ():
                if n == FLUSH:
                    buffered.flush()
                    continue
                if (raw := task.format_slice(offset, offset + n)) is not None:  # a header: the format's alone
                    buffered.write(raw)
                    self._progress(task.path, n)
                    offset += n
                    continue
                if self.device_copy_rate and task.tensors:
                    self._copy_from_device(n)
                for at in range(offset, offset + n, w.calls):  # a call beyond LARGEST_CALL: in pieces of it
                    end = min(at + w.calls, offset + n)
                    window, patches = _span_of(w.data, task, at, end)
                    with _formatted(window, patches):
                        t0 = time.thread_time()
                        zlib.crc32(window)  # torch.save's per-byte work (its CRC-32 of each record); not written
                        # torch.save into memory (Lightning's BytesIO): each byte copied into memory never touched
                        # before (its pages faulted in), the write made from that copy; a piece at a time, freed
                        source = bytearray(window) if task.in_memory else window
                        self._played(time.thread_time() - t0)
                        buffered.write(source)
                    self._progress(task.path, end - at)
                offset += n
            if offset != task.size:
                raise AssertionError(f"{task.path}: calls of {offset} bytes for a file of {task.size}")
            if own:
                cast(SyncingWriter, writer).sync()
            buffered.flush()
            writer.finish()
        except BaseException:
            writer.abort()
            if staged is not None:
                self.backend.remove(staged)  # the temporary file this save made
            raise
        return self._placed(task, staged, sync and not own)

    def _placed(self, task: FileTask, staged: str | None, sync_by_name: bool) -> int:
        """A written file's last steps: synced by name where its writer has no descriptor of its own to sync, and
        moved into place from ``$TMPDIR`` (``staged``)."""
        if sync_by_name:
            self.backend.sync(staged or task.path)
        if staged is not None:
            try:
                self.backend.rename(staged, task.path)
            except BaseException:
                self.backend.remove(staged)
                raise
        return task.size

    def _write_through_buffer(self, w: _CallWriter, writer: Writer, task: FileTask,
                              sync: Callable[[], None] | None) -> None:
        """A file's calls through Python's buffered file (``open(path, "wb")``, :class:`io.BufferedWriter` of the
        storage's block size), played by its arithmetic: only the ``write(2)`` calls it makes are made, each from
        the file's bytes. CPython 3.11's ``_io__Buffered_write_impl``: a call that fits the room left is kept; one
        that does not first writes what is kept, then is kept itself, or written at once whole when it is larger
        than the buffer; a flush writes what is kept. So the storage sees the calls it sees under the framework
        (the strace tests hold them to a real ``dcp.save``), and a tensor's dozens of small header calls cost a
        few integer operations instead of a Python write each (a scaled save of 139,540 tensors made 5.4 million).
        Each payload call's CRC-32 is computed over its bytes when they are written (torch.save's per-byte work);
        its copy from the accelerator is modelled before it, as the framework copies before it writes.
        ``sync``: the writer's own fsync, made before the buffer's last bytes go out at the close (DCP's ``with
        open(...)``: ``os.fsync`` inside it, the flush at its end)."""
        size, piece = self._buffer_size, w.calls
        kept_at = kept = 0  # the buffer: where its bytes start in the file, how many
        payloads: list[tuple[int, int]] = []  # the payload calls among the kept bytes, (start, end) in the file

        def emit(lo: int, hi: int) -> None:
            window, patches = _span_of(w.data, task, lo, hi)
            with _formatted(window, patches):
                if payloads:
                    t0 = time.thread_time()
                    for start, end in payloads:
                        zlib.crc32(window[start - lo:end - lo])  # torch.save's CRC-32 of each record; not written
                    self._played(time.thread_time() - t0)
                writer.write(window)
            payloads.clear()
            self._progress(task.path, hi - lo)

        meta, i = task.metadata, 0  # the format's pieces, in order; i: the first that does not end before offset
        offset = 0
        for n in task.calls or ():
            if n == FLUSH:
                if kept:
                    emit(kept_at, kept_at + kept)
                    kept = 0
                continue
            while i < len(meta) and meta[i][0] + len(meta[i][1]) <= offset:
                i += 1
            # a call of the format's bytes alone lies within one of its pieces (what format_slice finds, in order)
            payload = not (i < len(meta) and meta[i][0] <= offset and offset + n <= meta[i][0] + len(meta[i][1]))
            if payload and self.device_copy_rate and task.tensors:
                self._copy_from_device(n)
            for at in range(offset, offset + n, piece) if payload else (offset,):  # beyond LARGEST_CALL: pieces
                m = min(piece, offset + n - at) if payload else n
                if kept and m > size - kept:  # no room left: what is kept goes out first
                    emit(kept_at, kept_at + kept)
                    kept = 0
                if payload:
                    payloads.append((at, at + m))
                if m > size:  # larger than the buffer: written at once, whole
                    emit(at, at + m)
                else:
                    kept_at, kept = (kept_at, kept + m) if kept else (at, m)
            offset += n
        if offset != task.size:
            raise AssertionError(f"{task.path}: calls of {offset} bytes for a file of {task.size}")
        if sync is not None:
            sync()
        if kept:
            emit(kept_at, kept_at + kept)

    def _copy_from_device(self, nbytes: int) -> None:
        """A tensor's copy from its accelerator before its framework writes it, modelled: a sleep at
        :attr:`device_copy_rate` (memory bounded: no bytes move), counted per writer thread. A thread's copies are
        slept once they add up to :data:`SLEEP_AT_LEAST`, the time overslept kept as credit: a sleep of a few
        microseconds lasts some 60 µs or more here (the kernel's timer slack and a wake-up), so a sleep a tensor
        made a scaled save of 139,540 small tensors last 34 s for 0.013 s of modelled copies."""
        seconds = nbytes / self.device_copy_rate
        with self._lock:
            thread = threading.get_ident()
            self._copy_seconds[thread] = self._copy_seconds.get(thread, 0.0) + seconds
        owed = getattr(self._sleep_owed, "s", 0.0) + seconds
        if owed >= SLEEP_AT_LEAST:
            t0 = time.perf_counter()
            time.sleep(owed)
            owed -= time.perf_counter() - t0
        self._sleep_owed.s = owed

    def _played(self, seconds: float) -> None:
        """CPU seconds a writer thread spent on the framework's own work it plays (torch.save's CRC-32, Lightning's
        copy into memory): a real job's cost too, told apart from ours (making and checking the bytes)."""
        with self._lock:
            self._framework_cpu += seconds

    def take_framework_cpu(self) -> float:
        """The CPU seconds of the framework's work played since the last call, all threads summed."""
        with self._lock:
            seconds, self._framework_cpu = self._framework_cpu, 0.0
        return seconds

    def take_copy_seconds(self) -> float:
        """The modelled copy time on this process's busiest writer thread since the last call: what the copies
        added to its save (its threads copy side by side, each at its share of its accelerator's rate)."""
        with self._lock:
            seconds, self._copy_seconds = max(self._copy_seconds.values(), default=0.0), {}
        return seconds

    @staticmethod
    def _staged_path() -> str:
        """A new temporary file in ``$TMPDIR``, made as fsspec's local transaction makes it (``mkstemp``) and
        reopened for the calls. Its mode is the one fsspec gives the file once it is in place (``0o666`` less the
        umask: ``mkstemp``'s 0600 would leave the checkpoint unreadable to others)."""
        fd, path = tempfile.mkstemp()
        os.close(fd)
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(path, 0o666 & ~umask)
        return path

    def _sync(self, path: str) -> int:
        """fsync one written file, as :meth:`_each` runs a task (it moves no bytes of its own)."""
        self.backend.sync(path)
        return 0

    def _evict(self, path: str) -> int:
        """Drop one file's cached pages, as :meth:`_each` runs a task (it moves no bytes of its own)."""
        self.backend.evict(path)
        return 0

    def _positioned(self, tasks: list[FileTask], open_file: Callable[[FileTask], Any],
                    request: Callable[[Any, _Slot, FileTask, int], None], close_file: Callable[[Any], None],
                    abort_file: Callable[[Any], None], depth: int) -> int:
        """Positional storage: one stream of requests through all of a process's files where it has
        one file in flight and no whole-file retries to interleave (the queue never drains between
        files); else a stream per file, ``threads`` files at a time, each retried whole."""
        if self._threads == 1 and self.backend.options.retries == 0:
            return self._pipeline(self._workers[0], tasks, open_file, request, close_file, abort_file, depth,
                                  timed=True)
        return self._each(lambda worker, task: self._pipeline(worker, [task], open_file, request, close_file,
                                                              abort_file, depth),
                          tasks)

    def _open_write(self, task: FileTask) -> Writer:
        return self.backend.open_write(task.path, self.options.odirect)

    def _write_file(self, worker: _Worker, task: FileTask) -> int:
        """A stream's file: its pieces in order."""
        writer = self._open_write(task)
        try:
            for piece in self._pieces(worker.data, task):
                writer.write(piece)
            writer.finish()
        except BaseException:
            writer.abort()
            raise
        return task.size

    def _write_chunk(self, writer: PositionalWriter, slot: _Slot, task: FileTask, k: int) -> None:
        """One chunk at its offset, from its window with the format's bytes written over it for the
        call and put back after (a few hundred bytes, against a copy of the whole chunk)."""
        window, patches = self._chunk_of(slot.data, task, k)
        with _formatted(window, patches):
            writer.write_at(window, k * self._chunk)
        self._progress(task.path, len(window))

    # -- read ----------------------------------------------------------------------------------

    def read_files(self, tasks: list[FileTask]) -> int:
        """Read every file whole, each byte compared with what was written; a file that comes with its
        framework's reads (a coordinator's ``.metadata``, on a file system) is read by them (:meth:`_read_calls`),
        and a file that is one ``torch.save`` archive (``FileTask.archive``) as ``torch.load`` reads it."""
        caps = self.backend.capabilities
        if self.options.evict_before_read and not self.options.odirect and caps.evict_cache:
            self._each(lambda _, t: self._evict(t.path), tasks)
        if not self._verify:
            return self._each(self._read_unverified, tasks)
        if tasks and tasks[0].reads is not None and self._positional:
            return self._each(self._read_calls, tasks)
        if tasks and tasks[0].archive and self._positional:
            return self._each(lambda worker, task: self._read_items(worker, task, ((0, task.size),)), tasks)
        if self._positional:
            return self._positioned(tasks, self._open_read, self._read_chunk, _close, _close, self._read_depth)
        return self._each(self._read_file if self.options.verify else self._read_counted, tasks)

    def _open_read(self, task: FileTask) -> PositionalReader:
        """A positional reader, the file's size checked first: the file system's answer (no I/O)."""
        # only called where capabilities.positional: such a backend's readers have read_at and size
        reader = cast(PositionalReader, self.backend.open_read(task.path, self.options.odirect))
        if (size := reader.size()) != task.size:
            reader.close()
            raise VerifyError(f"{task.path}: has {size} bytes, planned {task.size}")
        return reader

    def _read_chunk(self, reader: PositionalReader, slot: _Slot, task: FileTask, k: int) -> None:
        start = k * self._chunk
        n = min(self._chunk, task.size - start)
        got = slot.readbuf[:-(-n // self._align) * self._align]  # O_DIRECT: whole blocks, short at the end
        filled = reader.read_at(got, start)
        if filled != n:
            raise VerifyError(f"{task.path}: has {start + filled} bytes, planned {task.size}")
        if self.options.verify:
            window, patches = self._chunk_of(slot.data, task, k)
            for offset, want in _spans(window, patches):
                bad = first_difference(got[offset:offset + len(want)], want)
                if bad is not None:
                    raise _wrong(task, start + offset + bad, slot.data, got, start)
        self._progress(task.path, n)

    def _read_file(self, worker: _Worker, task: FileTask, source: Source | None = None,
                   sink: Callable[[Any], None] | None = None) -> int:
        """Read ``task`` back and compare every byte; from ``source`` instead of this engine's
        storage, handing each verified buffer to ``sink`` (a drain to the next tier). The size is
        checked by the read itself, not asked first: on S3 that would be a HEAD per object, a
        request the load does not need (a missing file fails at its open)."""
        source = source or self.backend
        reader = source.open_read(task.path, self.options.odirect)
        chunks = _chunks(reader, worker.readbuf)
        try:
            got, base, used = worker.readbuf[:0], 0, 0
            for piece in self._pieces(worker.data, task):
                while len(piece):  # a device array has no truth value
                    if used == len(got):
                        if sink is not None and len(got):
                            sink(got)
                        base += len(got)
                        got, used = next(chunks, None), 0
                        if got is None:
                            raise VerifyError(f"{task.path}: has {base} bytes, planned {task.size}")
                    n = min(len(piece), len(got) - used)
                    bad = worker.first_difference(got[used:used + n], piece[:n])
                    if bad is not None:
                        raise _wrong(task, base + used + bad, worker.data, got, base)
                    used += n
                    piece = piece[n:]
            if sink is not None and len(got):
                sink(got)
            extra = len(got) - used + sum(len(c) for c in chunks)  # bytes beyond the plan: none, or an error
            if extra:
                raise VerifyError(f"{task.path}: has {task.size + extra} bytes, planned {task.size}")
        finally:
            chunks.close()
            reader.close()
        return task.size

    def read_ranges(self, reads: list[tuple[FileTask, tuple[tuple[int, int], ...]]]) -> int:
        """Read byte ranges of files, every byte compared with what was written there: a restore that
        needs slices of other ranks' files (:mod:`dlio_ckpt.plan.restore`). Each file is opened once and its
        ranges read in the order given, adjacent ones as one, each in requests of at most ``chunk_size``
        (on object stores a ranged GET each), one in flight per file: DCP's ``FileSystemReader`` reads a
        rank's items one after another from one stream. Under O_DIRECT a range is widened to whole
        blocks, and the bytes read count them. Files that come with their framework's calls are read as
        its reader reads them: on a file system item by item (:meth:`_read_items`), on a storage that says how
        its framework client reads items (``item_spans``: S3, s3torchconnector's ``S3StorageReader``) in
        those spans (:meth:`_read_spans`). Returns the bytes read."""
        caps = self.backend.capabilities
        if self.options.evict_before_read and not self.options.odirect and caps.evict_cache:
            files = list({t.path: t for t, _ in reads}.values())  # a file many ranks read, evicted once
            self._each(lambda _, t: self._evict(t.path), files)
        if reads and reads[0][0].calls is not None and self._positional and self._verify:
            return self._each(lambda worker, job: self._read_items(worker, job.task, job.spans),
                              [_RangedRead(task, ranges) for task, ranges in reads])
        if reads and reads[0][0].calls is not None and self._verify:
            spanned = [(task, self.backend.item_spans(self._within(task, ranges))) for task, ranges in reads]
            if all(s is not None for _, s in spanned):
                return self._each(lambda worker, job: self._read_spans(worker, job.task, job.spans),
                                  [_RangedRead(task, tuple(s or ())) for task, s in spanned])
        # one entry per (rank, file) read: several loading ranks of this process may read one file
        jobs = [_RangedRead(task, self._spans_of(task, ranges)) for task, ranges in reads]
        return self._each(lambda worker, job: self._read_ranges(worker, job.task, job.spans), jobs)

    # -- a framework's reads -------------------------------------------------------------------------

    def _read_calls(self, worker: _Worker, task: FileTask) -> int:
        """A file read by its framework's reads (:attr:`FileTask.reads`), one after another through a buffered
        file; the bytes storage served."""
        with self._buffered(task) as (raw, buffered):
            at = told = 0
            for n in task.reads or ():
                told += self._framework_read(worker, task, buffered, at, n, into=False)  # pickle.load's read()s
                at += n
            self._progress(task.path, at - told)
        return raw.served

    def _read_items(self, worker: _Worker, task: FileTask, items: tuple[tuple[int, int], ...]) -> int:
        """The items a loading rank needs from one file, as DCP's ``FileSystemReader`` reads them: the file
        opened once, buffered; each item (offset, length) a ``torch.save`` archive, read as ``torch.load`` reads
        it, or an object read whole (an archive with no storage: DCP's bytes). The bytes storage served."""
        with self._buffered(task) as (raw, buffered):
            for offset, length in items:
                told = sum(self._framework_read(worker, task, buffered, offset + at, n, into)
                           for at, n, into in _item_reads(task, offset, length))
                self._progress(task.path, length - told)  # the rest an item at a time: dozens of small reads
        return raw.served

    @contextmanager
    def _buffered(self, task: FileTask) -> Iterator[tuple[_RawReader, io.BufferedReader]]:
        """The file opened as a framework opens it for reading: buffered, the storage's block size."""
        reader = self.backend.open_ranged(task.path, False)
        try:
            raw = _RawReader(reader, task.size)
            yield raw, io.BufferedReader(raw, self._buffer_size)
        finally:
            reader.close()

    def _framework_read(self, worker: _Worker, task: FileTask, buffered: io.BufferedReader, at: int, n: int,
                        into: bool) -> int:
        """One read of a framework: ``n`` bytes from ``at`` (in pieces of at most :data:`LARGEST_CALL`),
        compared with what was written there. ``into``: by ``readinto`` (``torch.load``'s), else by ``read``
        (``pickle.load``'s, DCP's bytes): CPython's buffer serves the two differently (``read`` asks storage
        for whole blocks and buffers the rest, ``readinto`` reads the remainder through). A piece of
        at least :data:`TOLD_AT_LEAST` is told to the progress at once (the watchdog hears of a long read as it goes);
        the bytes told are returned, the rest left to the caller, who tells them an item at a time."""
        buffered.seek(at)  # a read of nothing is a seek alone (torch.load's to the end, for the size)
        told = 0
        for lo in range(at, at + n, LARGEST_CALL):
            want = min(LARGEST_CALL, at + n - lo)
            if into:
                got = worker.framework_buffer(want)
                filled = buffered.readinto(got)
            else:
                got = memoryview(buffered.read(want))
                filled = len(got)
            if filled != want:
                raise VerifyError(f"{task.path}: ends before offset {lo + want}, planned {task.size} bytes")
            if self.options.verify:
                raw = task.format_slice(lo, lo + want)
                if raw is None:
                    self._check_span(worker, task, got, lo, lo, lo + want)
                elif (bad := first_difference(got, raw)) is not None:  # a header: compared with the format's
                    raise _wrong(task, lo + bad)
            if want >= TOLD_AT_LEAST:
                self._progress(task.path, want)
                told += want
        return told

    def _spans_of(self, task: FileTask, ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        """What is asked of storage for ``ranges`` (:func:`~dlio_ckpt.plan.restore.spans`, blocks under O_DIRECT),
        each within the file's planned size."""
        return spans(self._within(task, ranges), self._align)

    @staticmethod
    def _within(task: FileTask, ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        """``ranges``, each checked to lie within the file's planned size."""
        for offset, length in ranges:
            if offset + length > task.size:
                raise VerifyError(f"{task.path}: a read of [{offset}, {offset + length}) passes its planned "
                                  f"{task.size} bytes")
        return ranges

    def _read_spans(self, worker: _Worker, task: FileTask, spans: tuple[tuple[int, int], ...]) -> int:
        """A loading rank's items of one object as its framework's client reads them on this storage: each span
        (start, end) of :meth:`item_spans` one request stream (``open_span``: on S3 one GET of the range, which
        the CRT splits into ``part_size`` GETs), read in order in the client's own buffers, every byte compared
        with what was written there (a gap between items too: the file's bytes). The bytes read."""
        total = 0
        for start, end in spans:
            reader = self.backend.open_span(task.path, start, end)
            chunks = _chunks(reader, worker.readbuf)
            pos = start
            try:
                for got in chunks:
                    if pos + len(got) > end:
                        raise VerifyError(f"{task.path}: a read of [{start}, {end}) returned more bytes")
                    if self.options.verify:
                        self._check_span(worker, task, got, pos, pos, pos + len(got))
                    pos += len(got)
                    self._progress(task.path, len(got))
            finally:
                chunks.close()
                reader.close()
            if pos != end:
                raise VerifyError(f"{task.path}: has {pos} bytes, planned {task.size}")
            total += end - start
        return total

    def _read_ranges(self, worker: _Worker, task: FileTask, spans: tuple[tuple[int, int], ...]) -> int:
        """Every byte of ``spans`` read and compared (bytes a widened span holds beyond the ranges asked
        are the file's too: compared alike); the bytes read."""
        reader = self.backend.open_ranged(task.path, self.options.odirect)
        total = 0
        try:
            for pos, stop in spans:
                end = min(stop, task.size)
                while pos < stop:
                    n = min(self._chunk, stop - pos)
                    got = worker.readbuf[:n]
                    filled = reader.read_at(got, pos)
                    if filled < min(n, task.size - pos):  # the file's size is not asked: where it fell short
                        raise VerifyError(f"{task.path}: ends before offset {pos + min(n, task.size - pos)}, planned "
                                          f"{task.size} bytes")
                    if self._verify and self.options.verify:
                        self._check_span(worker, task, got, pos, pos, min(end, pos + filled))
                    total += filled
                    pos += n
                    self._progress(task.path, filled)
        finally:
            reader.close()
        return total

    def _check_span(self, worker: _Worker, task: FileTask, got: Any, base: int, lo: int, hi: int) -> None:
        """Compare ``got`` (the file's bytes from ``base``) over file offsets [lo, hi) with what was
        written there, one chunk of the file's grid at a time (a window starts on its grid). On the
        host, the format's bytes are written over the window for one compare and put back (a restore
        reads many small items, each mostly archive headers); on a device, span by span."""
        for k in range(lo // self._chunk, -(-hi // self._chunk)):
            start = k * self._chunk
            window, patches = self._chunk_of(worker.data, task, k, max(lo - start, 0), hi - start)
            if worker.device is None:
                a, b = max(lo, start), min(hi, start + len(window))
                with _formatted(window, patches):
                    bad = first_difference(got[a - base:b - base], window[a - start:b - start])
                if bad is not None:
                    raise _wrong(task, a + bad, worker.data, got, base)
                continue
            for offset, want in _spans(window, patches):
                a, b = max(lo, start + offset), min(hi, start + offset + len(want))
                if a >= b:
                    continue
                bad = worker.first_difference(got[a - base:b - base], want[a - start - offset:b - start - offset])
                if bad is not None:
                    raise _wrong(task, a + bad, worker.data, got, base)

    # -- drain -----------------------------------------------------------------------------------

    def copy_files(self, tasks: list[FileTask], source: Source, to: Callable[[str], str]) -> int:
        """Copy each file from ``source`` (the tier above) into this engine's storage at ``to(path)``,
        as a tiered checkpoint's drain does: read back, every byte compared with what was written, and
        written on as it is read (one buffer per thread, whatever the file's size); then synced like
        a save (``checkpoint.fsync``)."""
        def one(worker: _Worker, task: FileTask) -> int:
            writer = self.backend.open_write(to(task.path), False)
            try:
                self._read_file(worker, task, source, writer.write)
                writer.finish()
            except BaseException:
                writer.abort()
                raise
            return task.size

        nbytes = self._each(one, tasks)
        if self.options.fsync and not self.backend.capabilities.durable_on_close:
            self._each(lambda _, t: self._sync(to(t.path)), tasks)
        return nbytes

    def _read_counted(self, worker: _Worker, task: FileTask) -> int:
        """``checkpoint.verify=False``: read every byte, check only that the size is as planned."""
        reader = self.backend.open_read(task.path, self.options.odirect)
        chunks = _chunks(reader, worker.readbuf)
        try:
            total = 0
            for got in chunks:
                total += len(got)
                self._progress(task.path, len(got))
        finally:
            chunks.close()
            reader.close()
        if total != task.size:
            raise VerifyError(f"{task.path}: has {total} bytes, planned {task.size}")
        return total

    def _read_unverified(self, worker: _Worker, task: FileTask) -> int:
        """A backend that keeps nothing (null): produce the expected bytes and request as many,
        so the figure is our own cost of a read minus the compare."""
        reader = self.backend.open_read(task.path, self.options.odirect)
        try:
            for piece in self._pieces(worker.data, task):
                reader.readinto(worker.readbuf[:len(piece)])
        finally:
            reader.close()
        return task.size

    def take_file_times(self) -> tuple[tuple[str, float, float, int], ...]:
        """The files finished since the last call, by file name (for the report's timeline)."""
        out, self.file_times = self.file_times, []
        return tuple((path.rsplit("/", 1)[-1], s, e, n) for path, s, e, n in out)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        for w in self._workers:
            w.close()
        for c in self._call_writers:
            c.close()
