"""Any storage backend with every call timed: each write and read request, fsync, create, open, close,
rename, mkdir, listing, stat and removal goes into this process's :class:`~dlio_ckpt.io.latency.LatencyRecorder`
by kind (``summary.json``'s ``latency`` sections are made from it).

Why a wrapper around the backend and not timers in the engine: every caller of the storage (the engine's
threads, the coordinator's rename, manifests, storage checks, clean-up, drains to other tiers) goes through
the backend the run holds, so wrapping it once where the run builds it times them all, and the engine, the
backends and the layouts stay as they are. What the wrapper cannot see is what bypasses the backend: the real
modes' frameworks open the storage's URL themselves (their I/O is theirs, untimed), and an object-store
client's own part requests (those are in ``requests``, by kind).

The wrapper keeps the wrapped writer's and reader's shape, since the engine asks it: a writer offers
``sync`` only where the backend's does (:class:`~dlio_ckpt.io.backends.base.SyncingWriter` is a runtime
check), ``writev`` only where it gathers, a reader ``views`` only where the backend's lends its buffers: each
such call has a timed class of its own, and the wrapper is made of those its inner writer or reader offers.

With a :class:`~dlio_ckpt.io.trace.Tracer` (``checkpoint.trace``), every call it times is also a line of the trace:
its file, offset and size (a writer's and a reader's running offset where the call has none of its own).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import cache
from time import perf_counter_ns
from typing import Any

from dlio_ckpt.io.backends.base import (
    Backend,
    DeviceMemory,
    ItemReader,
    RangedReader,
    Reader,
    SyncingWriter,
    VectorWriter,
    ViewsReader,
    Writer,
)
from dlio_ckpt.io.latency import LatencyRecorder
from dlio_ckpt.io.trace import Tracer

# Each kind's class: data moves bytes (or makes them durable); metadata creates, finds, names and removes them.
DATA_KINDS = frozenset({"write", "read", "fsync", "close", "small write", "small read", "evict"})
METADATA_KINDS = frozenset({"create", "open", "stat", "rename", "mkdir", "list", "remove", "rmdir", "statfs",
                            "probe"})
COORDINATOR = "coordinator "  # the prefix of a call on a coordinator's file (DCP's .metadata, megatron's common.pt)


def kind_class(kind: str) -> str:
    """``data``, ``metadata`` or ``request`` (an object-store request, by its client's name for it)."""
    base = kind.removeprefix(COORDINATOR)
    if base in METADATA_KINDS:
        return "metadata"
    return "data" if base in DATA_KINDS else "request"


class _Traced:
    """A file's timed calls, also told to the trace where there is one (with the file and a running offset)."""

    def __init__(self, rec: LatencyRecorder, path: str, trace: Tracer | None) -> None:
        self._rec, self._path, self._trace, self._offset = rec, path, trace, 0

    def _traced(self, kind: str, t0: int, ns: int, size: int | None = None, offset: int | None = None) -> None:
        if self._trace is not None:
            self._trace.call(kind, self._path, t0, ns, size, offset)


class _TimedWriter(_Traced):
    """A writer whose calls are timed: ``write``/``write_at`` as data requests with their bytes, ``finish`` as
    the close (on an object store, the upload's completion)."""

    def __init__(self, inner: Writer, rec: LatencyRecorder, prefix: str, path: str = "",
                 trace: Tracer | None = None) -> None:
        super().__init__(rec, path, trace)
        self._w = inner
        self._write, self._close, self._fsync = prefix + "write", prefix + "close", prefix + "fsync"

    def write(self, data: memoryview) -> None:
        t0 = perf_counter_ns()
        self._w.write(data)
        ns, n = perf_counter_ns() - t0, len(data)
        self._rec.record(self._write, ns, n)
        self._traced(self._write, t0, ns, n, self._offset)
        self._offset += n

    def write_at(self, data: memoryview, offset: int) -> None:  # positional backends only (the engine asks)
        t0 = perf_counter_ns()
        self._w.write_at(data, offset)  # type: ignore[attr-defined]
        ns = perf_counter_ns() - t0
        self._rec.record(self._write, ns, len(data))
        self._traced(self._write, t0, ns, len(data), offset)

    def finish(self) -> None:
        t0 = perf_counter_ns()
        self._w.finish()
        ns = perf_counter_ns() - t0
        self._rec.record(self._close, ns)
        self._traced(self._close, t0, ns)

    def abort(self) -> None:
        self._w.abort()


class _TimedSync(_TimedWriter):
    """A writer that syncs on its own descriptor (:class:`~dlio_ckpt.io.backends.base.SyncingWriter`)."""

    def sync(self) -> None:
        t0 = perf_counter_ns()
        self._w.sync()  # type: ignore[attr-defined]
        ns = perf_counter_ns() - t0
        self._rec.record(self._fsync, ns)
        self._traced(self._fsync, t0, ns)


class _TimedWritev(_TimedWriter):
    """A writer that gathers (:class:`~dlio_ckpt.io.backends.base.VectorWriter`): a ``writev`` is one data request
    of all its bytes."""

    def writev(self, parts: list[memoryview]) -> None:
        t0 = perf_counter_ns()
        self._w.writev(parts)  # type: ignore[attr-defined]
        ns, n = perf_counter_ns() - t0, sum(len(p) for p in parts)
        self._rec.record(self._write, ns, n)
        self._traced(self._write, t0, ns, n, self._offset)
        self._offset += n


class _TimedReader(_Traced):
    """A reader whose requests are timed (``readinto``, ``read_at``), its ``size`` as a stat, ``close`` as a close."""

    def __init__(self, inner: Any, rec: LatencyRecorder, prefix: str, path: str = "",
                 trace: Tracer | None = None) -> None:
        super().__init__(rec, path, trace)
        self._r = inner
        self._read, self._close, self._stat = prefix + "read", prefix + "close", prefix + "stat"

    def readinto(self, buf: memoryview) -> int:
        t0 = perf_counter_ns()
        n: int = self._r.readinto(buf)
        if n:  # the read that finds the end moves nothing: not a request of the file's data
            ns = perf_counter_ns() - t0
            self._rec.record(self._read, ns, n)
            self._traced(self._read, t0, ns, n, self._offset)
            self._offset += n
        return n

    def read_at(self, buf: Any, offset: int) -> int:
        t0 = perf_counter_ns()
        n: int = self._r.read_at(buf, offset)
        ns = perf_counter_ns() - t0
        self._rec.record(self._read, ns, n)
        self._traced(self._read, t0, ns, n, offset)
        return n

    def size(self) -> int:
        t0 = perf_counter_ns()
        n: int = self._r.size()
        ns = perf_counter_ns() - t0
        self._rec.record(self._stat, ns)
        self._traced(self._stat, t0, ns)
        return n

    def close(self) -> None:
        t0 = perf_counter_ns()
        self._r.close()
        ns = perf_counter_ns() - t0
        self._rec.record(self._close, ns)
        self._traced(self._close, t0, ns)


class _TimedViews(_TimedReader):
    """A reader that lends its client's buffers (:class:`~dlio_ckpt.io.backends.base.ViewsReader`)."""

    def views(self) -> Iterator[memoryview]:
        """The client's own buffers, each timed from asking for it to having it (not while it is verified)."""
        parts = self._r.views()
        try:
            while True:
                t0 = perf_counter_ns()
                try:
                    view = next(parts)
                except StopIteration:
                    return
                ns = perf_counter_ns() - t0
                self._rec.record(self._read, ns, len(view))
                self._traced(self._read, t0, ns, len(view), self._offset)
                self._offset += len(view)
                yield view
        finally:
            close = getattr(parts, "close", None)
            if close is not None:
                close()


# each further call a writer or reader may offer: the protocol that names it, and the timed class that times it
_WRITER_CALLS: tuple[tuple[type, type[_TimedWriter]], ...] = ((SyncingWriter, _TimedSync), (VectorWriter, _TimedWritev))
_READER_CALLS: tuple[tuple[type, type[_TimedReader]], ...] = ((ViewsReader, _TimedViews),)


def _timed_class(inner: object, base: type, calls: tuple[tuple[type, type], ...]) -> type:
    """The timed class of ``inner``'s shape: ``base`` with a timed twin of every further call ``inner`` offers,
    whichever of them (one that gathers but does not sync keeps its ``writev``)."""
    return _combined(base, tuple(timed for protocol, timed in calls if isinstance(inner, protocol)))


@cache
def _combined(base: type, parts: tuple[type, ...]) -> type:
    return type("_Timed" + "".join(p.__name__.removeprefix("_Timed") for p in parts), parts, {}) if parts else base


class TimedBackend(Backend):
    """``inner`` with every call recorded in ``recorder``. ``coordinator``: the names of the coordinator's
    files (set once the plan is known); calls on them are recorded apart (``coordinator write``...).
    Anything else the wrapped backend offers (a client for a framework, its root) is its own, asked through.
    ``tracer``: where each call is also written as a trace event (``checkpoint.trace``), else None."""

    def __init__(self, inner: Backend, recorder: LatencyRecorder, tracer: Tracer | None = None) -> None:
        self.inner, self.recorder, self.tracer = inner, recorder, tracer
        self.name, self.capabilities, self.options = inner.name, inner.capabilities, inner.options
        self.coordinator: frozenset[str] = frozenset()

    def __getattr__(self, attr: str) -> Any:  # only what this class lacks: a backend's own extras
        return getattr(self.__dict__["inner"], attr)

    @property
    def requests(self) -> Any:
        return self.inner.requests

    def _prefix(self, path: str) -> str:
        return COORDINATOR if self.coordinator and os.path.basename(path) in self.coordinator else ""

    def _timed(self, kind: str, fn: Any, *args: Any) -> Any:
        t0 = perf_counter_ns()
        try:
            return fn(*args)
        finally:  # a failed call took its time too
            ns = perf_counter_ns() - t0
            self.recorder.record(kind, ns)
            if self.tracer is not None:  # the call's file (or folder): its first argument
                self.tracer.call(kind, args[0] if args and isinstance(args[0], str) else "", t0, ns)

    # -- files: what the engine opens -----------------------------------------------------------

    def open_write(self, path: str, odirect: bool) -> Writer:
        prefix = self._prefix(path)
        writer = self._timed(prefix + "create", self.inner.open_write, path, odirect)
        cls = _timed_class(writer, _TimedWriter, _WRITER_CALLS)
        return cls(writer, self.recorder, prefix, path, self.tracer)

    def open_read(self, path: str, odirect: bool) -> Reader:
        prefix = self._prefix(path)
        reader = self._timed(prefix + "open", self.inner.open_read, path, odirect)
        cls = _timed_class(reader, _TimedReader, _READER_CALLS)
        return cls(reader, self.recorder, prefix, path, self.tracer)

    def open_ranged(self, path: str, odirect: bool) -> RangedReader:
        prefix = self._prefix(path)
        reader = self._timed(prefix + "open", self.inner.open_ranged, path, odirect)
        return _TimedReader(reader, self.recorder, prefix, path, self.tracer)

    def item_reader(self) -> ItemReader | None:
        return self.inner.item_reader()

    def open_span(self, path: str, start: int, end: int) -> Reader:
        prefix = self._prefix(path)
        reader = self._timed(prefix + "open", self.inner.open_span, path, start, end)
        cls = _timed_class(reader, _TimedReader, _READER_CALLS)
        return cls(reader, self.recorder, prefix, path, self.tracer)

    def sync(self, path: str) -> None:
        self._timed(self._prefix(path) + "fsync", self.inner.sync, path)

    def evict(self, path: str) -> None:
        self._timed(self._prefix(path) + "evict", self.inner.evict, path)

    def rename(self, source: str, target: str, nbytes: int = 0) -> None:
        self._timed(self._prefix(target) + "rename", self.inner.rename, source, target, nbytes)

    # -- the rest of the storage's calls: metadata, small files -----------------------------------

    def check(self, writing: bool) -> None:
        self.inner.check(writing)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def join(self, *parts: str) -> str:
        return self.inner.join(*parts)

    def size(self, path: str) -> int | None:
        result: int | None = self._timed(self._prefix(path) + "stat", self.inner.size, path)
        return result

    def list_tree(self, path: str) -> list[str]:
        result: list[str] = self._timed("list", self.inner.list_tree, path)
        return result

    def list_names(self, path: str) -> list[str]:
        result: list[str] = self._timed("list", self.inner.list_names, path)
        return result

    def put_small(self, path: str, data: bytes) -> None:
        self._timed("small write", self.inner.put_small, path, data)

    def put_marker(self, path: str, data: bytes) -> None:
        self._timed("small write", self.inner.put_marker, path, data)

    def get_small(self, path: str) -> bytes | None:
        result: bytes | None = self._timed("small read", self.inner.get_small, path)
        return result

    def remove(self, path: str) -> None:
        self._timed("remove", self.inner.remove, path)

    def makedirs(self, path: str) -> None:
        self._timed("mkdir", self.inner.makedirs, path)

    def remove_empty(self, path: str) -> None:
        self._timed("rmdir", self.inner.remove_empty, path)

    def probe_write(self, folder: str, keep_folders: bool = False) -> list[str]:
        result: list[str] = self._timed("probe", self.inner.probe_write, folder, keep_folders)
        return result

    def free_bytes(self, path: str) -> int | None:
        result: int | None = self._timed("statfs", self.inner.free_bytes, path)
        return result

    # -- asked, not timed: no storage call, or one that is the framework's ---------------------------

    def in_memory(self, path: str) -> bool:
        return self.inner.in_memory(path)

    @property
    def queue_depth(self) -> int:
        return self.inner.queue_depth

    @property
    def read_queue_depth(self) -> int:
        return self.inner.read_queue_depth

    @property
    def buffer_size(self) -> int:
        return self.inner.buffer_size

    def url(self, path: str) -> str:
        return self.inner.url(path)

    def fsspec_options(self) -> dict[str, Any]:
        return self.inner.fsspec_options()

    def device_memory(self) -> DeviceMemory:
        return self.inner.device_memory()


def timed_backend(backend: Backend, recorder: LatencyRecorder) -> TimedBackend:
    """``backend`` with its calls recorded in ``recorder`` (a backend already timed is re-pointed, not
    wrapped twice)."""
    inner = backend.inner if isinstance(backend, TimedBackend) else backend
    return TimedBackend(inner, recorder)

