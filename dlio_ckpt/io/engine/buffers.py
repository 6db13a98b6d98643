"""The memory a process's I/O owns, allocated once: per request in flight a synthetic source and a chunk to
read into (:class:`_Slot`), per file in flight its slots and request threads (:class:`_Worker`), per framework
writer thread a source as large as its calls (:class:`_CallWriter`); and what the storage must honour."""

from __future__ import annotations

import mmap
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.backends import Backend, DeviceMemory
from dlio_ckpt.io.engine.tasks import IOOptions
from dlio_ckpt.io.synthetic import (
    BLOCK,
    IRREDUCIBLE,
    SLACK,
    Reduction,
    SyntheticData,
    first_difference,
    first_difference_on_device,
)

_POPULATED = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)


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


class _CallWriter:
    """What one framework writer thread owns: a synthetic source for calls of up to ``calls`` bytes, with room for
    ``before`` bytes ahead of one (what a buffered file keeps and writes just before a call it cannot keep) and a
    block more (a call may start inside one); both whole blocks."""

    def __init__(self, run_key: int, calls: int, reduction: Reduction = IRREDUCIBLE, before: int = 0) -> None:
        self.calls, self.before = calls, before
        self.window = calls + before + BLOCK  # the largest window of the source, bytes
        self.data = SyntheticData(run_key, self.window, reduction=reduction)

    def scope(self) -> Any:
        return nullcontext()

    def close(self) -> None:
        self.data.close()
