"""The tuned stream (``checkpoint.io_pattern=stream``): a file in chunks at fixed offsets. A storage that reads
and writes at offsets (file systems: ``capabilities.positional``) gets ``queue_depth`` chunks of a file in flight
at once, as fio's iodepth, from buffers allocated once; a stream (object stores, GDS) gets them in order. Reads
compare every byte; a ranged read serves a restore's slices of other ranks' files; a drain copies a tier's files on."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any, cast

from dlio_ckpt.errors import VerifyError
from dlio_ckpt.io.backends import PositionalReader, PositionalWriter, Source, Writer
from dlio_ckpt.io.engine.buffers import _Slot, _Worker
from dlio_ckpt.io.engine.content import _chunks, _formatted, _patched, _wrong, finished
from dlio_ckpt.io.engine.core import EngineCore
from dlio_ckpt.io.engine.tasks import FileTask
from dlio_ckpt.io.synthetic import first_difference


class StreamPattern(EngineCore):
    """The stream's writes, reads, ranged reads and drains."""

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
        with finished(self._open_write(task)) as writer:
            for piece in self._pieces(worker.data, task):
                writer.write(piece)
        return task.size

    def _write_chunk(self, writer: PositionalWriter, slot: _Slot, task: FileTask, k: int) -> None:
        """One chunk at its offset, from its window with the format's bytes written over it for the
        call and put back after (a few hundred bytes, against a copy of the whole chunk)."""
        window, patches = self._chunk_of(slot.data, task, k)
        with _formatted(window, patches):
            writer.write_at(window, k * self._chunk)
        self._progress(task.path, len(window))

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
            for offset, want in _patched(window, patches):
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
                        self._check_read(worker, task, got, pos, pos, min(end, pos + filled))
                    total += filled
                    pos += n
                    self._progress(task.path, filled)
        finally:
            reader.close()
        return total

    def copy_files(self, tasks: list[FileTask], source: Source, to: Callable[[str], str]) -> int:
        """Copy each file from ``source`` (the tier above) into this engine's storage at ``to(path)``,
        as a tiered checkpoint's drain does: read back, every byte compared with what was written, and
        written on as it is read (one buffer per thread, whatever the file's size); then synced like
        a save (``checkpoint.fsync``)."""
        def one(worker: _Worker, task: FileTask) -> int:
            with finished(self.backend.open_write(to(task.path), False)) as writer:
                self._read_file(worker, task, source, writer.write)
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
